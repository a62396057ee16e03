#!/bin/bash
# tests/sh/prefix_loopback.sh: the per-stage prefix cache (issue 37,
# runtime/dist/dist.h "The prefix cache") with real `shoal node` processes
# on 127.0.0.1.
#
# The trained dense model at --mem-limit 11M: 3 stages on p1, p2, p3 (the
# cache on, the default), the API on p1 and p3; r4 offers 1M (less than a
# layer), holds no stage, and runs with --prefix-cache off: its requests
# send no prefix hashes, so they compute every prompt position: the
# reference.
#  1. A two-turn chat through p1's API: the second turn reports
#     usage.prompt_tokens_details.cached_tokens of at least the first
#     turn's prompt (whole blocks), every stage counts a hit, and stage
#     0 ran only the rows past the cached ones (where the second turn's
#     ids first differ from the first turn's fed ids, the template's
#     rendering of the reply, the blocks from there on are recomputed); its text equals r4's
#     (no cache), greedy and seeded; the same turn through p3's API (the
#     cache lives on the stages) hits as much and gives the same text.
#  2. A completion whose prompt leaves the cached one in the middle of a
#     block reuses only the whole blocks before the divergence (computed
#     from `shoal tokenize`) and gives r4's text.
#  3. More distinct prompts than the stages have session slots: the
#     cache evicts (the counter moves), and a later run still gives the
#     reference text.
#  4. A stage killed -9 mid-stream (a run that started from kept KV):
#     the replay gives the ids of an undisturbed run, greedy and seeded;
#     /metrics and `shoal status` show hits and evictions.
#  5. Where there is a Vulkan device (lavapipe will do): the same two turns
#     with every stage on the Vulkan backend (KV in device memory).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
MODEL=austen-dense-q8_0

start p1 "$DENSE" --mem-limit 11M --ctx 512 --api 127.0.0.1:0
SEED=$(ep p1)
start p2 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
start p3 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED" --api 127.0.0.1:0
start r4 "$DENSE" --mem-limit 1M --ctx 512 --peer "$SEED" --api 127.0.0.1:0 --prefix-cache off
wait_for 40 servable_all 3 p1 p2 p3 r4 || fail "no common 3-stage plan on 4 peers"
STAGES=$(for i in 0 1 2; do "$PC" "$T/st-p1.json" stage $i; done | tr '\n' ' ')
echo "stages: $STAGES"
[ "$(echo "$STAGES" | grep -c r4)" = 0 ] || fail "r4 (1M) holds a stage: $STAGES"
FIRST=$("$PC" "$T/st-p1.json" stage 0)
A1=$(api_port p1)
A3=$(api_port p3)
A4=$(api_port r4)
"$B" node --help 2>&1 | grep -q -- '--prefix-cache' || fail "shoal node --help does not name --prefix-cache"
"$B" node --prefix-cache bogus --state-dir "$T/bad" >"$T/bad.out" 2>&1 && fail "--prefix-cache bogus accepted"
grep -q "prefix-cache" "$T/bad.out" || fail "--prefix-cache bogus: no reason: $(cat "$T/bad.out")"

# 1. two turns
U1="Tell me about Emma Woodhouse and her friends in Highbury, and what she thinks of marriage."
U2="And Mr Knightley?"
chat() { # chat OUT PORT TEMP SEED MESSAGES_JSON
	api_post "$1" "$2" /v1/chat/completions \
		"{\"model\":\"$MODEL\",\"max_tokens\":24,\"temperature\":$3,\"seed\":$4,\"messages\":$5}"
}
M1="[{\"role\":\"user\",\"content\":\"$U1\"}]"
chat "$T/t1.json" "$A1" 0 1 "$M1"
chat "$T/t1r.json" "$A4" 0 1 "$M1"
[ "$(jget "$T/t1.json" 'd["choices"][0]["message"]["content"]')" = "$(jget "$T/t1r.json" 'd["choices"][0]["message"]["content"]')" ] ||
	fail "turn 1 differs from the reference"
[ "$(jget "$T/t1r.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0 ] ||
	fail "r4 (cache off) reports cached tokens: $(cat "$T/t1r.json")"
R1=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"]))' "$T/t1.json")
N1=$(jget "$T/t1.json" 'd["usage"]["prompt_tokens"]')
M2="[{\"role\":\"user\",\"content\":\"$U1\"},{\"role\":\"assistant\",\"content\":$R1},{\"role\":\"user\",\"content\":\"$U2\"}]"
H0=$(stage_met "$FIRST" hits)
ROWS0=$(stage_met "$FIRST" rows)
chat "$T/t2.json" "$A1" 0 1 "$M2"
ROWS1=$(stage_met "$FIRST" rows)
H1=$(stage_met "$FIRST" hits)
chat "$T/t2r.json" "$A4" 0 1 "$M2"
C2=$(jget "$T/t2.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
N2=$(jget "$T/t2.json" 'd["usage"]["prompt_tokens"]')
G2=$(jget "$T/t2.json" 'd["usage"]["completion_tokens"]')
echo "turn 1: $N1 prompt tokens; turn 2: $N2 prompt tokens, $C2 cached; stage 0 ran $((ROWS1 - ROWS0)) rows"
[ "$((C2 % 16))" = 0 ] && [ "$C2" -ge "$((N1 / 16 * 16))" ] && [ "$C2" -lt "$N2" ] ||
	fail "turn 2 cached $C2 of $N2 tokens (turn 1's prompt: $N1)"
[ "$((H1 - H0))" -ge 1 ] || fail "stage 0 counted no hit ($H0 -> $H1)"
# the new prompt rows and the generated tokens fed back (the last is not)
[ "$((ROWS1 - ROWS0))" = "$((N2 - C2 + G2 - 1))" ] ||
	fail "stage 0 ran $((ROWS1 - ROWS0)) rows for $N2 - $C2 new prompt tokens and $G2 generated"
[ "$(jget "$T/t2.json" 'd["choices"][0]["message"]["content"]')" = "$(jget "$T/t2r.json" 'd["choices"][0]["message"]["content"]')" ] ||
	fail "turn 2 with the cache differs from the reference: '$(jget "$T/t2.json" 'd["choices"][0]["message"]["content"]')'"
for n in $STAGES; do
	[ "$(stage_met "$n" hits)" -ge 1 ] || fail "stage $n counted no hit"
done
chat "$T/t2s.json" "$A1" 0.8 7 "$M2"
chat "$T/t2sr.json" "$A4" 0.8 7 "$M2"
[ "$(jget "$T/t2s.json" 'd["choices"][0]["message"]["content"]')" = "$(jget "$T/t2sr.json" 'd["choices"][0]["message"]["content"]')" ] ||
	fail "turn 2 seeded with the cache differs from the reference"
[ "$(jget "$T/t2s.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" -ge "$C2" ] ||
	fail "seeded turn 2 cached less: $(cat "$T/t2s.json")"
chat "$T/t2p3.json" "$A3" 0 1 "$M2"
[ "$(jget "$T/t2p3.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" -ge "$C2" ] ||
	fail "turn 2 through p3's API cached less: $(cat "$T/t2p3.json")"
[ "$(jget "$T/t2p3.json" 'd["choices"][0]["message"]["content"]')" = "$(jget "$T/t2r.json" 'd["choices"][0]["message"]["content"]')" ] ||
	fail "turn 2 through p3 differs from the reference"
echo "two turns: greedy and seeded equal the uncached reference; through p3 too ($(jget "$T/t2p3.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]') cached)"

# 2. divergence in the middle of a block
X="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood"
Y="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a carriage and four horses"
cmpl() { api_post "$1" "$2" /v1/completions "{\"model\":\"$MODEL\",\"max_tokens\":8,\"temperature\":0,\"prompt\":\"$3\"}"; }
cmpl "$T/x.json" "$A1" "$X"
cmpl "$T/y.json" "$A1" "$Y"
cmpl "$T/yr.json" "$A4" "$Y"
"$B" tokenize "$DENSE" "$X" >"$T/x.ids" || fail "tokenize"
"$B" tokenize "$DENSE" "$Y" >"$T/y.ids" || fail "tokenize"
L=$(python3 -c 'import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(n, len(b))' "$T/x.ids" "$T/y.ids")
COMMON=${L% *}
NY=${L#* }
WANT=$((COMMON / 16 * 16))
[ "$WANT" -gt "$(((NY - 1) / 16 * 16))" ] && WANT=$(((NY - 1) / 16 * 16))
CY=$(jget "$T/y.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
echo "divergence at token $COMMON of $NY: $CY cached (whole blocks: $WANT)"
[ "$((COMMON % 16))" != 0 ] || fail "the test's prompts diverge on a block boundary ($COMMON): pick others"
[ "$CY" = "$WANT" ] || fail "a prompt diverging at $COMMON reused $CY tokens, not $WANT"
[ "$(jget "$T/y.json" 'd["choices"][0]["text"]')" = "$(jget "$T/yr.json" 'd["choices"][0]["text"]')" ] ||
	fail "the diverging prompt's text differs from the reference"

# 3. eviction: more distinct prompts than session slots
EV0=$(stage_met "$FIRST" evictions)
for i in 1 2 3 4 5 6 7 8 9; do
	cmpl "$T/e$i.json" "$A1" "Chapter $i. The family of Dashwood had long been settled in Sussex, and their estate was large, number $i"
done
EV1=$(stage_met "$FIRST" evictions)
ENT=$(stage_met "$FIRST" entries)
echo "9 distinct prompts: $((EV1 - EV0)) evictions at stage 0, $ENT kept"
[ "$((EV1 - EV0))" -ge 1 ] || fail "no eviction after 9 distinct prompts ($ENT kept)"
cmpl "$T/e1b.json" "$A1" "Chapter 1. The family of Dashwood had long been settled in Sussex, and their estate was large, number 1"
cmpl "$T/e1r.json" "$A4" "Chapter 1. The family of Dashwood had long been settled in Sussex, and their estate was large, number 1"
[ "$(jget "$T/e1b.json" 'd["choices"][0]["text"]')" = "$(jget "$T/e1r.json" 'd["choices"][0]["text"]')" ] ||
	fail "after evictions the text differs from the reference"
curl -s "http://127.0.0.1:$A1/metrics" >"$T/metrics" || fail "/metrics"
grep -q '^shoal_prefix_hits_total [1-9]' "$T/metrics" || fail "/metrics: no prefix hits: $(grep prefix "$T/metrics")"
grep -q '^shoal_prefix_evictions_total' "$T/metrics" || fail "/metrics: no evictions line"
"$B" status --state-dir "$T/$FIRST" --key "$KEY" --timeout-ms 2000 >"$T/status.txt" 2>&1 ||
	fail "shoal status: $(cat "$T/status.txt")"
grep -q 'prefix cache: [1-9][0-9]* hit(s), [1-9][0-9]* token(s) reused, [1-9][0-9]* eviction' "$T/status.txt" ||
	fail "shoal status shows no prefix cache line: $(grep -i prefix "$T/status.txt")"
grep 'prefix cache' "$T/status.txt"
# 4. kill -9 of a stage mid-stream, with the cache on: a run that started
#    from kept KV (X's blocks) is replayed on the new plan and gives
#    the ids of an undisturbed run, greedy and seeded
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
ALIVE=(p1 p2 p3)
start p5 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
ALIVE+=(p5)
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.8 --seed 7); fi
	"$B" run "$DENSE" -p "$X" -n 150 --ctx 512 --ids "${S[@]}" >"$T/l-$mode" 2>/dev/null || fail "local run"
	wait_for 40 servable_all 3 "${ALIVE[@]}" r4 || fail "no common plan before the $mode kill"
	VICTIM=none
	for i in 0 1 2; do
		v=$("$PC" "$T/st-p1.json" stage $i)
		[ "$v" != p1 ] && VICTIM=$v
	done
	# the plan that took p5 in has new stages, with empty caches: X once
	"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 4 --temp 0 >/dev/null 2>"$T/seed.err" ||
		fail "a short run of X: $(cat "$T/seed.err")"
	H=$(stage_met "$("$PC" "$T/st-p1.json" stage 0)" hits)
	"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 150 --ids "${S[@]}" >"$T/r-$mode" 2>"$T/r-$mode.err" &
	RP=$!
	wait_for 20 at_least "$T/r-$mode" 30 || fail "the $mode run did not stream: $(cat "$T/r-$mode.err")"
	[ "$(stage_met "$("$PC" "$T/st-p1.json" stage 0)" hits)" -gt "$H" ] ||
		fail "the $mode run did not start from kept KV"
	stop "$VICTIM"
	wait $RP || fail "the $mode run failed after $VICTIM was killed: $(cat "$T/r-$mode.err")"
	same "$mode ids across the kill of $VICTIM" "$T/r-$mode" "$T/l-$mode"
	echo "$mode: a run from kept KV, $VICTIM killed -9 mid-stream: ids identical to one peer"
	NEW=()
	for n in "${ALIVE[@]}"; do [ "$n" != "$VICTIM" ] && NEW+=("$n"); done
	ALIVE=("${NEW[@]}")
	if [ $mode = greedy ]; then
		start "r$VICTIM" "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
		ALIVE+=("r$VICTIM")
	fi
done

# 5. KV in device memory: the stages compute on the Vulkan backend (Mesa's
#    lavapipe here): the kept slots' KV stays in the device's buffers, and a
#    second turn from them gives the text the uncached peer gives
stop_all
if "$B" run --help 2>&1 | grep -q vulkan &&
	"$B" run "$DENSE" -p x -n 1 --backend vulkan >/dev/null 2>&1; then
	start v1 "$DENSE" --mem-limit 11M --ctx 512 --backend vulkan --api 127.0.0.1:0
	VS=$(ep v1)
	start v2 "$DENSE" --mem-limit 11M --ctx 512 --backend vulkan --peer "$VS"
	start v3 "$DENSE" --mem-limit 11M --ctx 512 --backend vulkan --peer "$VS"
	start vr "$DENSE" --mem-limit 1M --ctx 512 --peer "$VS" --api 127.0.0.1:0 --prefix-cache off
	wait_for 60 servable_all 3 v1 v2 v3 vr || fail "no 3-stage plan on the Vulkan peers"
	V1=$(api_port v1)
	VR=$(api_port vr)
	chat "$T/v1.json" "$V1" 0 1 "$M1"
	R1=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"]))' "$T/v1.json")
	M2="[{\"role\":\"user\",\"content\":\"$U1\"},{\"role\":\"assistant\",\"content\":$R1},{\"role\":\"user\",\"content\":\"$U2\"}]"
	chat "$T/v2.json" "$V1" 0 1 "$M2"
	chat "$T/v2r.json" "$VR" 0 1 "$M2"
	CV=$(jget "$T/v2.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
	[ "$CV" -ge 16 ] || fail "Vulkan stages: turn 2 cached $CV tokens"
	[ "$(jget "$T/v2.json" 'd["choices"][0]["message"]["content"]')" = "$(jget "$T/v2r.json" 'd["choices"][0]["message"]["content"]')" ] ||
		fail "Vulkan stages: turn 2 with the cache differs from the reference"
	echo "Vulkan stages: turn 2 from kept device KV ($CV cached) equals the uncached text"
else
	echo "SKIP part: no Vulkan backend or device here"
fi
echo "PASS"
