#!/bin/bash
# tests/sh/spec_draft.sh: a draft model on the cluster's owner (issue 38,
# `shoal node --draft FILE`) and the API's per-request "speculate" field,
# with real `shoal node` processes on 127.0.0.1. The draft is made with
# the project's tools: a Q4_0 copy of the dense model's F32 weights
# (tests/helpers/requant; it keeps ~85% of its drafts for the Q8_0 target).
#  1. Flags: node --speculate draft without --draft, and --draft without a
#     model, are refused with a reason; a node given a draft model of
#     another vocabulary stops at start, naming the file and the
#     difference.
#  2. One peer with --draft (auto): runs through it, greedy and seeded
#     with a repetition penalty, give the ids of a local run without
#     speculation; its status and /metrics count drafted and kept ids.
#  3. Three stages, the owner with --speculate draft --draft FILE: the
#     same, greedy and seeded; the counters move.
#  4. The API's "speculate": a bad value and a kind the node does not
#     offer get a 400 naming the field; "off" drafts nothing, "draft"
#     and "lookup" draft, and all replies equal.
#  5. `shoal run --peer --speculate`: a bad name is refused by the
#     client, "draft" by a peer without a draft model (with its reason);
#     "lookup" drafts on a peer without --speculate and "off" drafts
#     nothing on one with a draft model, the ids those of a local run.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
F32=$DATA/models/austen-dense-f32.gguf
RQ=$BD/tests/helpers/requant
[ -x "$PC" ] || skip "$PC not built"
[ -x "$RQ" ] || skip "$RQ not built"
command -v curl >/dev/null || skip "curl is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
DRAFT=$T/draft.gguf
"$RQ" "$F32" "$DRAFT" --type Q4_0 >/dev/null || fail "requant: no draft model"
X="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. It is a truth universally acknowledged, that a single man"


# 1. flags and the vocabulary check at start
"$B" node --model "$DENSE" --speculate draft --state-dir "$T/bad" >"$T/bad.out" 2>&1 &&
	fail "node --speculate draft without --draft accepted"
grep -q "needs --draft FILE" "$T/bad.out" || fail "--speculate draft alone: no reason: $(cat "$T/bad.out")"
"$B" node --draft "$DRAFT" --state-dir "$T/bad" >"$T/bad.out" 2>&1 && fail "--draft without a model accepted"
grep -q "draft needs --model" "$T/bad.out" || fail "--draft alone: no reason: $(cat "$T/bad.out")"
"$B" node --help 2>&1 | grep -q -- '--draft FILE' || fail "shoal node --help does not name --draft FILE"
start bad "$DENSE" --draft "$DATA/models/tiny-kq-q6_k.gguf"
BADPID=${PID[bad]}
for _ in $(seq 100); do kill -0 "$BADPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$BADPID" 2>/dev/null && fail "a node with a draft model of another vocabulary runs"
wait "$BADPID" && fail "a node with a draft model of another vocabulary exited 0"
unset 'PID[bad]'
grep -q "tiny-kq-q6_k.gguf.*vocabulary has 1024 tokens, the target's 32000" "$T/bad.log" ||
	fail "another vocabulary: no reason: $(tail -n 3 "$T/bad.log")"

# the reference: local runs without speculation
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run "$DENSE" -p "$X" -n 64 --ctx 512 --ids "${S[@]}" >"$T/l-$mode" 2>/dev/null ||
		fail "local run"
done

# 2. one peer, --draft alone (auto drafts with it)
start s1 "$DENSE" --ctx 512 --draft "$DRAFT" --draft-max 4 -v
wait_for 40 servable_all 1 s1 || fail "s1 alone is not servable"
grep -q "draft model .*draft.gguf" "$T/s1.log" || fail "s1 does not say it opened the draft model"
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run --peer "$(ep s1)" --key "$KEY" -p "$X" -n 64 --ids "${S[@]}" >"$T/s-$mode" \
		2>"$T/s-$mode.err" || fail "$mode run via s1: $(cat "$T/s-$mode.err")"
	same "$mode ids on one peer with a draft model" "$T/s-$mode" "$T/l-$mode"
done
grep -q "a run drafts with the draft model" "$T/s1.log" || fail "s1's runs do not draft with the model"
read -r DR AC <<<"$(spec_counts s1)"
[ "$DR" -gt 0 ] && [ "$AC" -gt 0 ] && [ "$AC" -le "$DR" ] || fail "s1's status: drafted $DR, kept $AC"
echo "one peer: ids exact with a draft model, greedy and seeded; $DR drafted, $AC kept"
stop_all

# 3. three stages; p1 owns the runs and drafts with the model; p3 serves
# the API without a draft model
start p1 "$DENSE" --mem-limit 11M --ctx 512 --api 127.0.0.1:0 --speculate draft --draft "$DRAFT"
SEED=$(ep p1)
start p2 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"
start p3 "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED" --api 127.0.0.1:0
wait_for 60 servable_all 3 p1 p2 p3 || fail "no common 3-stage plan"
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.9 --seed 7 --repeat-penalty 1.1); fi
	"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 64 --ids "${S[@]}" >"$T/r-$mode" \
		2>"$T/r-$mode.err" || fail "$mode run via p1: $(cat "$T/r-$mode.err")"
	same "$mode ids through 3 stages with a draft model" "$T/r-$mode" "$T/l-$mode"
done
read -r DR AC <<<"$(spec_counts p1)"
[ "$DR" -gt 0 ] && [ "$AC" -gt 0 ] && [ "$AC" -le "$DR" ] || fail "p1's status: drafted $DR, kept $AC"
curl -s "http://127.0.0.1:$(api_port p1)/metrics" >"$T/m.txt" || fail "GET /metrics"
MD=$(sed -n 's/^shoal_spec_drafted_total //p' "$T/m.txt")
MA=$(sed -n 's/^shoal_spec_accepted_total //p' "$T/m.txt")
[ "${MD:-0}" -gt 0 ] && [ "${MA:-0}" -gt 0 ] || fail "/metrics: drafted '$MD', kept '$MA'"
echo "3 stages: ids exact with a draft model, greedy and seeded; $DR drafted, $AC kept"

# 4. the API's "speculate"
cat >"$T/api.py" <<'PY'
import json, sys, urllib.request, urllib.error
port, body = sys.argv[1], json.loads(sys.argv[2])
r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                           {"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(r, timeout=120) as f:
        print(200)
        print(json.loads(f.read())["choices"][0]["text"])
except urllib.error.HTTPError as e:
    print(e.code)
    print(json.dumps(json.loads(e.read())["error"]))
PY
api() { # api NAME SPECULATE-JSON SEED OUT: a completion through NAME's API
	python3 "$T/api.py" "$(api_port "$1")" "{\"prompt\": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$X"), \"max_tokens\": 48, \"temperature\": 0.9, \"seed\": $3, \"frequency_penalty\": 0.5${2:+, \"speculate\": $2}}" >"$4" ||
		fail "API request to $1"
}
api p1 '"bogus"' 1 "$T/a-bad"
[ "$(head -n 1 "$T/a-bad")" = 400 ] || fail "speculate bogus: $(cat "$T/a-bad")"
grep -q '"param": "speculate"' "$T/a-bad" && grep -q "must be \\\\\"off\\\\\"" "$T/a-bad" ||
	fail "speculate bogus: no reason: $(cat "$T/a-bad")"
api p1 '3' 1 "$T/a-bad"
[ "$(head -n 1 "$T/a-bad")" = 400 ] || fail "speculate 3: $(cat "$T/a-bad")"
api p3 '"draft"' 1 "$T/a-bad"
[ "$(head -n 1 "$T/a-bad")" = 400 ] || fail "speculate draft without a draft model: $(cat "$T/a-bad")"
grep -q "no draft model" "$T/a-bad" || fail "speculate draft on p3: no reason: $(cat "$T/a-bad")"
api p1 '"mtp"' 1 "$T/a-bad"
[ "$(head -n 1 "$T/a-bad")" = 400 ] || fail "speculate mtp: $(cat "$T/a-bad")"
grep -q "no MTP layer" "$T/a-bad" || fail "speculate mtp: no reason: $(cat "$T/a-bad")"
for seed in 1 2; do
	api p3 '' $seed "$T/a-ref"
	[ "$(head -n 1 "$T/a-ref")" = 200 ] || fail "API reference: $(cat "$T/a-ref")"
	read -r D0 _ <<<"$(spec_counts p1)"
	api p1 '"off"' $seed "$T/a-off"
	read -r D1 _ <<<"$(spec_counts p1)"
	[ "$D1" = "$D0" ] || fail "speculate off drafted ($D0 -> $D1)"
	same "API reply with speculate off" "$T/a-off" "$T/a-ref"
	for kind in '"draft"' '' '"lookup"'; do
		api p1 "$kind" $seed "$T/a-k"
		read -r D2 _ <<<"$(spec_counts p1)"
		same "API reply with speculate ${kind:-absent (draft)}" "$T/a-k" "$T/a-ref"
		[ "$kind" = '"lookup"' ] || [ "$D2" -gt "$D1" ] ||
			fail "speculate ${kind:-absent} drafted nothing ($D1 -> $D2)"
		D1=$D2
	done
done
# p3 has no --speculate: a request may still ask for lookup
read -r D0 _ <<<"$(spec_counts p3)"
api p3 '"lookup"' 2 "$T/a-k"
read -r D1 _ <<<"$(spec_counts p3)"
same "API reply through p3 with speculate lookup" "$T/a-k" "$T/a-ref"
[ "$D1" -gt "$D0" ] || fail "p3: speculate lookup drafted nothing ($D0 -> $D1)"
echo "API: speculate bad/draft-less/mtp are 400s; off, draft, lookup and absent give the same reply"

# 5. shoal run --peer --speculate: this run's drafter on the owner
"$B" run --peer "$(ep p3)" --key "$KEY" -p "$X" -n 8 --speculate bogus >"$T/rb.out" 2>&1 &&
	fail "run --peer --speculate bogus accepted"
grep -q "lookup" "$T/rb.out" || fail "--speculate bogus: no names: $(cat "$T/rb.out")"
"$B" run --peer "$(ep p3)" --key "$KEY" -p "$X" -n 8 --speculate draft >"$T/rb.out" 2>&1 &&
	fail "run --peer --speculate draft accepted by a peer without a draft model"
grep -q "speculate.*no draft model" "$T/rb.out" ||
	fail "--speculate draft on p3: no reason: $(cat "$T/rb.out")"
read -r D0 _ <<<"$(spec_counts p3)"
"$B" run --peer "$(ep p3)" --key "$KEY" -p "$X" -n 64 --ids --temp 0 --speculate lookup \
	>"$T/rl" 2>"$T/rl.err" || fail "run via p3 with --speculate lookup: $(cat "$T/rl.err")"
same "greedy ids via p3 with --speculate lookup" "$T/rl" "$T/l-greedy"
read -r D1 _ <<<"$(spec_counts p3)"
[ "$D1" -gt "$D0" ] || fail "p3: run --speculate lookup drafted nothing ($D0 -> $D1)"
DL=$((D1 - D0))
read -r D0 _ <<<"$(spec_counts p1)"
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$X" -n 64 --ids --temp 0 --speculate off \
	>"$T/ro" 2>"$T/ro.err" || fail "run via p1 with --speculate off: $(cat "$T/ro.err")"
same "greedy ids via p1 with --speculate off" "$T/ro" "$T/l-greedy"
read -r D1 _ <<<"$(spec_counts p1)"
[ "$D1" = "$D0" ] || fail "p1: run --speculate off drafted ($D0 -> $D1)"
echo "run --peer --speculate: bogus and draft-less refused; lookup via p3 drafted $DL, off via p1 none; ids exact"
