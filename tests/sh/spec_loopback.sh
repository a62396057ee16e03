#!/bin/bash
# tests/sh/spec_loopback.sh: exact speculative decoding (issue 38,
# runtime/dist/dist.h "Speculation") with real `shoal node` processes on
# 127.0.0.1, prompt lookup as the drafter. A prompt that repeats a
# passage, so that lookup has something to propose.
#  1. Flags: --speculate and --draft-max appear in --help; a bad mode and
#     a bad K are refused with a reason; a node refuses draft without
#     --draft FILE (tests/sh/spec_draft.sh runs a node's draft model,
#     tests/sh/spec_mtp.sh the MTP layer); a local run refuses draft
#     without --draft FILE, --draft with another mode, and a draft model of
#     another vocabulary.
#  2. Local `shoal run --speculate lookup` gives the ids of a run without
#     it, greedy and seeded with a repetition penalty, and says how many
#     drafts it kept; the same with a draft model (the Q8_0 copy drafting
#     for the F32 model); `shoal bench --speculate lookup` counts them too.
#  3. The dense model in 3 stages (p1 p2 p3 at --mem-limit 11M), p1 and p3
#     speculating: runs through p1, greedy and seeded, equal local runs
#     without speculation; a run through p1 (drafts) and one through r4
#     (no --speculate, no stage) at the same time both equal theirs;
#     p1's /metrics and `shoal status` count drafted and kept ids; chat
#     replies under a grammar (json_object, a JSON schema), greedy and
#     seeded, through p1's API equal those through r4's.
#  4. A stage killed -9 mid-stream of a speculating run: the replay gives
#     the ids of an undisturbed run.
#  5. A qwen3moe fixture on one peer (one stage) and the deepseek2 fixture
#     in 2+ stages, speculating: ids equal local runs without it.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
X="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. It is a truth universally acknowledged, that a single man in possession"
SPEC=(--speculate lookup --draft-max 6)

# 1. flags
for c in run node; do
	"$B" $c --help 2>&1 | grep -q -- '--speculate' || fail "shoal $c --help does not name --speculate"
	"$B" $c --help 2>&1 | grep -q -- '--draft-max' || fail "shoal $c --help does not name --draft-max"
done
"$B" node --speculate bogus --state-dir "$T/bad" >"$T/bad.out" 2>&1 && fail "--speculate bogus accepted"
grep -q "auto, off, lookup" "$T/bad.out" || fail "--speculate bogus: no reason: $(cat "$T/bad.out")"
"$B" node --speculate draft --state-dir "$T/bad" >"$T/bad.out" 2>&1 && fail "node --speculate draft accepted"
grep -q "needs --draft FILE" "$T/bad.out" || fail "node --speculate draft: no reason: $(cat "$T/bad.out")"
# a local run takes a draft model: --draft FILE, checked
"$B" run "$DENSE" -p x --speculate draft >"$T/bad.out" 2>&1 && fail "run --speculate draft without --draft accepted"
grep -q "needs --draft FILE" "$T/bad.out" || fail "run --speculate draft: no reason: $(cat "$T/bad.out")"
"$B" run "$DENSE" -p x --speculate lookup --draft "$DENSE" >"$T/bad.out" 2>&1 && fail "--draft with lookup accepted"
grep -q "draft model of --speculate draft, not of --speculate lookup" "$T/bad.out" ||
	fail "--draft with lookup: no reason: $(cat "$T/bad.out")"
"$B" run "$DENSE" -p x -n 2 --draft "$DATA/models/tiny-kq-q6_k.gguf" >"$T/bad.out" 2>&1 &&
	fail "a draft model of another vocabulary accepted"
grep -q "tiny-kq-q6_k.gguf.*token" "$T/bad.out" || fail "--draft of another vocabulary: no reason: $(cat "$T/bad.out")"
"$B" node --draft-max 17 --state-dir "$T/bad" >"$T/bad.out" 2>&1 && fail "--draft-max 17 accepted"
grep -q "draft-max" "$T/bad.out" || fail "--draft-max 17: no reason: $(cat "$T/bad.out")"

# 2. local runs: the reference ids (no speculation), and with lookup
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run "$DENSE" -p "$X" -n 120 --ctx 512 --ids "${S[@]}" >"$T/l-$mode" 2>/dev/null ||
		fail "local run"
	"$B" run "$DENSE" -p "$X" -n 120 --ctx 512 --ids "${S[@]}" "${SPEC[@]}" >"$T/ls-$mode" \
		2>"$T/ls-$mode.err" || fail "local run with lookup: $(cat "$T/ls-$mode.err")"
	same "local $mode ids with lookup" "$T/ls-$mode" "$T/l-$mode"
	# greedy, the reply copies the passage: drafts are kept; seeded with a
	# penalty it soon does not, and a session whose first drafted steps
	# keep nothing and cost 1.5x stops drafting (draft_ctl.c): drafted
	kept='[1-9][0-9]*'
	[ $mode = seeded ] && kept='[0-9]*'
	grep -q "speculation (lookup): [1-9][0-9]* id(s) drafted, $kept kept" "$T/ls-$mode.err" ||
		fail "local $mode run: no drafts (kept): $(cat "$T/ls-$mode.err")"
done
# a draft model (the F32 model drafting for itself would keep all: the Q8_0
# copy drafts for the F32 target), greedy and seeded: the ids of a run
# without it
F32=$DATA/models/austen-dense-f32.gguf
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run "$F32" -p "$X" -n 48 --ctx 512 --ids "${S[@]}" >"$T/f-$mode" 2>/dev/null || fail "local F32 run"
	"$B" run "$F32" -p "$X" -n 48 --ctx 512 --ids "${S[@]}" --draft "$DENSE" --draft-max 4 \
		>"$T/fd-$mode" 2>"$T/fd-$mode.err" || fail "local run with a draft model: $(cat "$T/fd-$mode.err")"
	same "local $mode ids with a draft model" "$T/fd-$mode" "$T/f-$mode"
	grep -q "speculation (draft): [1-9][0-9]* id(s) drafted, [1-9][0-9]* kept" "$T/fd-$mode.err" ||
		fail "local $mode run with a draft model: no drafts kept: $(cat "$T/fd-$mode.err")"
done
"$B" bench "$DENSE" --prompt 8 --gen 16 --speculate lookup >"$T/bench.out" 2>&1 ||
	fail "shoal bench --speculate lookup: $(cat "$T/bench.out")"
grep -q "^speculate  lookup: [0-9]* id(s) drafted, [0-9]* kept" "$T/bench.out" ||
	fail "shoal bench: no speculation counts: $(cat "$T/bench.out")"
echo "local: lookup gives the ids of a run without it ($(cat "$T/ls-greedy.err"))"

# 3. three stages
start p1 "$DENSE" --mem-limit 11M --ctx 512 --api 127.0.0.1:0 "${SPEC[@]}"
SEED=$(ep p1)
start p2 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
start p3 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED" "${SPEC[@]}"
start r4 "$DENSE" --mem-limit 1M --ctx 512 --peer "$SEED" --api 127.0.0.1:0
wait_for 40 servable_all 3 p1 p2 p3 r4 || fail "no common 3-stage plan"
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 120 --ids "${S[@]}" >"$T/r-$mode" \
		2>"$T/r-$mode.err" || fail "$mode run via p1: $(cat "$T/r-$mode.err")"
	same "$mode ids through 3 stages with lookup" "$T/r-$mode" "$T/l-$mode"
done
# at once: p1's session drafts, r4's does not; both exact
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 120 --ids --temp 0 >"$T/c1" 2>"$T/c1.err" &
C1=$!
"$B" run --peer "$(ep r4)" --key "$KEY" -p "$X" -n 120 --ids --temp 0.9 --seed 7 \
	--repeat-penalty 1.1 >"$T/c4" 2>"$T/c4.err" || fail "run via r4: $(cat "$T/c4.err")"
wait $C1 || fail "run via p1 beside r4's: $(cat "$T/c1.err")"
same "greedy ids via p1 beside r4's run" "$T/c1" "$T/l-greedy"
same "seeded ids via r4 beside p1's run" "$T/c4" "$T/l-seeded"
DRAFTED=$(spec_counts p1)
read -r DR AC <<<"$DRAFTED"
[ "$DR" -gt 0 ] && [ "$AC" -gt 0 ] && [ "$AC" -le "$DR" ] || fail "p1's status: drafted $DR, kept $AC"
curl -s "http://127.0.0.1:$(api_port p1)/metrics" >"$T/m.txt" || fail "GET /metrics"
MD=$(sed -n 's/^shoal_spec_drafted_total //p' "$T/m.txt")
MA=$(sed -n 's/^shoal_spec_accepted_total //p' "$T/m.txt")
[ "${MD:-0}" -gt 0 ] && [ "${MA:-0}" -gt 0 ] || fail "/metrics: drafted '$MD', kept '$MA'"
"$B" status --state-dir "$T/p1" --key "$KEY" >"$T/st.txt" 2>&1 || fail "shoal status"
grep -q "speculation: [0-9]* id(s) drafted" "$T/st.txt" || fail "shoal status: no speculation line"
echo "3 stages: ids exact with lookup, greedy and seeded, beside a run without; $DR drafted, $AC kept"

# structured output: replies under a grammar through p1 (drafting) equal
# r4's (not), greedy and seeded, and p1 drafted meanwhile
cat >"$T/gram.py" <<'PY'
import json, sys, urllib.request
a, b = sys.argv[1], sys.argv[2]
def post(port, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                               json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=120) as f:
        return json.loads(f.read())["choices"][0]["message"]["content"]
ints = {"type": "object", "properties": {"list": {"type": "array", "items": {"type": "integer"},
        "maxItems": 40}}, "required": ["list"]}
n = 0
for rf in ({"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "l", "schema": ints}}):
    for seed in (0, 1, 2):
        body = {"messages": [{"role": "user", "content": "List the numbers, again and again."}],
                "max_tokens": 120, "response_format": rf, "seed": seed,
                "temperature": 0 if seed == 0 else 1}
        x, y = post(a, body), post(b, body)
        assert x == y, (rf["type"], seed, x, y)
        n += 1
print(n)
PY
read -r D0 _ <<<"$(status p1 && python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        if "spec" in o and "tokens" in o:
            return o["spec"]
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
s = find(json.load(open(sys.argv[1])))
print(s["drafted"], s["accepted"])' "$T/st-p1.json")"
N=$(python3 "$T/gram.py" "$(api_port p1)" "$(api_port r4)" 2>"$T/gram.err") ||
	fail "structured output with lookup differs: $(tail -n 3 "$T/gram.err")"
read -r D1 _ <<<"$(status p1 && python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        if "spec" in o and "tokens" in o:
            return o["spec"]
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
s = find(json.load(open(sys.argv[1])))
print(s["drafted"], s["accepted"])' "$T/st-p1.json")"
[ "$D1" -gt "$D0" ] || fail "p1 drafted nothing under a grammar ($D0 -> $D1)"
echo "structured output: $N replies with lookup equal those without ($((D1 - D0)) ids drafted)"

# 4. kill -9 of a stage mid-stream of a speculating run
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
start p5 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
wait_for 40 servable_all 3 p1 p2 p3 r4 p5 || fail "no common plan with p5"
VICTIM=none
for i in 0 1 2; do
	v=$("$PC" "$T/st-p1.json" stage $i)
	[ "$v" != p1 ] && VICTIM=$v
done
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 120 --ids --temp 0.9 --seed 7 --repeat-penalty 1.1 \
	>"$T/k-seeded" 2>"$T/k.err" &
RP=$!
wait_for 20 at_least "$T/k-seeded" 20 || fail "the run did not stream: $(cat "$T/k.err")"
stop "$VICTIM"
wait $RP || fail "the run failed after $VICTIM was killed: $(cat "$T/k.err")"
same "seeded ids across the kill of $VICTIM" "$T/k-seeded" "$T/l-seeded"
echo "a speculating run, $VICTIM killed -9 mid-stream: ids identical to one peer"
stop_all

# 5. MoE on one peer, deepseek2 in 2+ stages
MOE=$T/moe.gguf
moe_fixture 4 "$MOE"
"$B" run "$MOE" -p "hello world hello world" -n 60 --ids --temp 0 >"$T/l-moe" 2>"$T/l.err" ||
	fail "local MoE run: $(cat "$T/l.err")"
start m1 "$MOE" "${SPEC[@]}"
wait_for 40 servable_all 1 m1 || fail "the MoE model on one peer is not servable"
"$B" run --peer "$(ep m1)" --key "$KEY" -p "hello world hello world" -n 60 --ids --temp 0 \
	>"$T/r-moe" 2>"$T/r.err" || fail "MoE run: $(cat "$T/r.err")"
same "MoE ids on one stage with lookup" "$T/r-moe" "$T/l-moe"
stop_all
DS=$T/ds2.gguf
"$BD/tests/helpers/gen_fixture" --arch deepseek2 --type Q8_0 --layers 6 --dim 256 --ff 512 \
	--heads 4 --vocab 2048 --head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --q-lora 64 \
	--dense-lead 1 --shared 1 --groups 2 --groups-used 1 --sigmoid --experts 8 --experts-used 2 \
	--ff-exp 128 --ctx 512 --seed 3 "$DS" >/dev/null 2>&1 || fail "gen_fixture deepseek2"
# a random model: it repeats itself, lookup finds that
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 3 --repeat-penalty 1.1); fi
	"$B" run "$DS" -p "hello world hello world" -n 60 --ids "${S[@]}" >"$T/l-ds-$mode" 2>/dev/null ||
		fail "local deepseek2 run"
done
start d1 "$DS" --ctx 256 --mem-limit 3M "${SPEC[@]}"
start d2 "$DS" --ctx 256 --mem-limit 3M --peer "$(ep d1)"
start d3 "$DS" --ctx 256 --mem-limit 3M --peer "$(ep d1)"
staged() { servable_all "" d1 d2 d3 && [ "$("$PC" "$T/st-d1.json" stages)" -ge 2 ]; }
wait_for 30 staged || fail "no servable deepseek2 plan of 2+ stages"
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 3 --repeat-penalty 1.1); fi
	"$B" run --peer "$(ep d1)" --key "$KEY" -p "hello world hello world" -n 60 --ids "${S[@]}" \
		>"$T/r-ds" 2>"$T/r.err" || fail "deepseek2 run: $(cat "$T/r.err")"
	same "deepseek2 $mode ids in $("$PC" "$T/st-d1.json" stages) stages with lookup" "$T/r-ds" "$T/l-ds-$mode"
done
status d1 || fail "status d1"
echo "MoE on one stage, deepseek2 in $("$PC" "$T/st-d1.json" stages) stages: ids exact with lookup"
