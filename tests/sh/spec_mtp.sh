#!/bin/bash
# tests/sh/spec_mtp.sh: exact speculative decoding with DeepSeek's MTP layer
# through `shoal node` (issue 38, runtime/dist/dist.h "Speculation",
# runtime/dist/dist_mtp.c): the last stage runs the layer over the rows
# each session keeps and sends its guess back with the results; the owner
# drafts that guess. A deepseek2 fixture of gen_fixture with one nextn layer.
#  1. A node refuses --speculate mtp for a model without an MTP layer,
#     and a run that asks for mtp from a node whose model has none is
#     refused with the reason (`shoal run --peer --speculate mtp`); so is
#     a local run. A local `shoal run --speculate mtp` gives the ids of one
#     without, greedy and seeded, and drafts.
#  2. One peer (every layer, the MTP layer beside the head): runs with
#     --speculate mtp, greedy and seeded with a repetition penalty, give
#     the ids of local runs without speculation, and drafts were sent; an
#     API completion with "speculate": "mtp" equals one with "off".
#  3. Three stages (the owner p1 is not the last stage): the same; and a
#     run through p2 (no --speculate) that asks for mtp itself.
#  4. The last stage (or the middle one where the owner p1 is the last)
#     killed -9 mid-stream of an MTP run: the replay gives the ids of the
#     undisturbed run.
#  5. A tensor group of 2 (--tensor; MLA attention whole on each member,
#     the experts and the head split; SHOAL_TEST_TP_PREFER=1 takes the
#     group on these small models): greedy and seeded MTP runs give the
#     local ids, and guesses were drafted (the head peer runs the layer).
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/spec_mtp_lib.sh"
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
DS=$T/ds2-mtp.gguf
PLAIN=$T/ds2.gguf
"$BD/tests/helpers/gen_fixture" "${MTP_SHAPE[@]}" --nextn 1 "$DS" >/dev/null 2>&1 ||
	fail "gen_fixture deepseek2 --nextn 1"
"$BD/tests/helpers/gen_fixture" "${MTP_SHAPE[@]}" "$PLAIN" >/dev/null 2>&1 || fail "gen_fixture deepseek2"

# 1. refusals
"$B" node --model "$PLAIN" --speculate mtp --state-dir "$T/bad" --listen 127.0.0.1:0 --no-mdns \
	--key "$KEY" >"$T/bad.out" 2>&1 && fail "--speculate mtp accepted for a model without nextn"
grep -q "no MTP layer" "$T/bad.out" || fail "--speculate mtp without nextn: no reason: $(cat "$T/bad.out")"
start q1 "$PLAIN"
wait_for 40 servable_all 1 q1 || fail "the plain deepseek2 model is not servable"
"$B" run --peer "$(ep q1)" --key "$KEY" -p "$P" -n 4 --ids --speculate mtp >"$T/q.out" 2>&1 &&
	fail "a run with mtp accepted by a node without an MTP layer"
grep -q "no MTP layer" "$T/q.out" || fail "mtp from a node without nextn: no reason: $(cat "$T/q.out")"
stop_all
echo "mtp is refused with a reason for a model without an MTP layer"

# the reference: local runs without speculation; a local run with the MTP
# layer gives the same ids (the model without one is refused)
"$B" run "$PLAIN" -p "$P" -n 4 --speculate mtp >"$T/bad.out" 2>&1 &&
	fail "a local run with mtp accepted for a model without nextn"
grep -q "no MTP layer" "$T/bad.out" || fail "local mtp without nextn: no reason: $(cat "$T/bad.out")"
for mode in greedy seeded; do
	# shellcheck disable=SC2046
	"$B" run "$DS" -p "$P" -n $N --ids $(args $mode) >"$T/l-$mode" 2>"$T/l.err" ||
		fail "local run: $(cat "$T/l.err")"
	# shellcheck disable=SC2046
	"$B" run "$DS" -p "$P" -n $N --ids $(args $mode) --speculate mtp >"$T/lm-$mode" \
		2>"$T/lm.err" || fail "local run with mtp: $(cat "$T/lm.err")"
	same "local $mode ids with mtp" "$T/lm-$mode" "$T/l-$mode"
	grep -q "speculation (mtp): [1-9][0-9]* id(s) drafted" "$T/lm.err" ||
		fail "local $mode run with mtp drafted nothing: $(cat "$T/lm.err")"
done
echo "local: ids exact with mtp ($(tail -n 1 "$T/lm.err"))"


# 2. one peer
start d1 "$DS" --ctx 256 --speculate mtp --draft-max 1 --api 127.0.0.1:0
wait_for 40 servable_all 1 d1 || fail "the deepseek2 model with nextn on one peer is not servable"
peer_runs d1 o "on one peer"
read -r DR AC <<<"$(drafted d1)"
[ "${DR:-0}" -gt 0 ] || fail "one peer: no MTP guesses drafted (drafted '$DR', kept '$AC')"
# the API: "speculate": "mtp" and "off" give the same completion
python3 - "$(api_port d1)" "$P" >"$T/api.out" 2>&1 <<'PY' || fail "API with speculate mtp: $(cat "$T/api.out")"
import json, sys, urllib.request
def post(spec):
    body = {"prompt": sys.argv[2], "max_tokens": 40, "temperature": 0.9, "seed": 5,
            "speculate": spec}
    r = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                               json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=120) as f:
        return json.loads(f.read())["choices"][0]["text"]
a, b = post("mtp"), post("off")
assert a == b, (a, b)
PY
echo "one peer: ids exact with mtp, greedy and seeded; $DR drafted, $AC kept"
stop_all

# 3. three stages; the owner p1 is not the last stage, unless the plan says
# so (4). 4.5M each: the last stage holds the MTP layer beside the head
# (2.3 MiB with the embedding it shares), which left 3M peers no plan
start p1 "$DS" --ctx 256 --mem-limit 4.5M --speculate mtp
SEED=$(ep p1)
start p2 "$DS" --ctx 256 --mem-limit 4.5M --peer "$SEED"
start p3 "$DS" --ctx 256 --mem-limit 4.5M --peer "$SEED"
start p4 "$DS" --ctx 256 --mem-limit 4.5M --peer "$SEED"
wait_for 40 servable_all 3 p1 p2 p3 p4 || fail "no common 3-stage deepseek2 plan"
peer_runs p1 r "through 3 stages"
read -r DR AC <<<"$(drafted p1)"
[ "${DR:-0}" -gt 0 ] || fail "3 stages: no MTP guesses drafted (drafted '$DR', kept '$AC')"
# a run that asks for mtp itself, through p2 (no --speculate)
# shellcheck disable=SC2046
"$B" run --peer "$(ep p2)" --key "$KEY" -p "$P" -n $N --ids $(args seeded) --speculate mtp \
	>"$T/r2-seeded" 2>"$T/r.err" || fail "a run asking for mtp through p2: $(cat "$T/r.err")"
same "seeded ids of a run asking for mtp" "$T/r2-seeded" "$T/l-seeded"
read -r DR2 _ <<<"$(drafted p2)"
[ "${DR2:-0}" -gt 0 ] || fail "a run asking for mtp through p2 drafted nothing"
echo "3 stages: ids exact with mtp, greedy and seeded; $DR drafted, $AC kept; a run asking for it too"

# 4. the middle stage killed -9 mid-stream
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
status p1 || fail "status p1"
# the last stage (its MTP layer's cache is lost: the replay's last stage
# builds it again), or the middle one where p1 runs the last
VICTIM=$("$PC" "$T/st-p1.json" stage 2)
[ "$VICTIM" = p1 ] && VICTIM=$("$PC" "$T/st-p1.json" stage 1)
[ -n "$VICTIM" ] && [ "$VICTIM" != p1 ] || fail "no stage to kill ('$VICTIM')"
# shellcheck disable=SC2046
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$P" -n 200 --ids $(args seeded) >"$T/k-ref" \
	2>"$T/k.err" || fail "a long run: $(cat "$T/k.err")"
# shellcheck disable=SC2046
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$P" -n 200 --ids $(args seeded) >"$T/k-seeded" \
	2>"$T/k.err" &
RP=$!
wait_for 20 at_least "$T/k-seeded" 20 || fail "the run did not stream: $(cat "$T/k.err")"
stop "$VICTIM"
wait $RP || fail "the run failed after $VICTIM was killed: $(cat "$T/k.err")"
# shellcheck disable=SC2046
"$B" run "$DS" -p "$P" -n 200 --ids $(args seeded) >"$T/k-local" 2>/dev/null || fail "local run"
same "seeded ids of a long run with mtp" "$T/k-ref" "$T/k-local"
same "seeded ids across the kill of $VICTIM" "$T/k-seeded" "$T/k-local"
echo "an MTP run, $VICTIM killed -9 mid-stream: ids identical to one peer"
stop_all

# 5. a tensor group of 2
if ! "$B" --version | grep -q '^test hooks: yes'; then
	echo "part 5 skipped: built without --enable-test-hooks (SHOAL_TEST_TP_PREFER)"
	exit 0
fi
export SHOAL_TEST_TP_PREFER=1
start g1 "$DS" --ctx 256 --tensor --link-us 5 --speculate mtp
start g2 "$DS" --ctx 256 --tensor --link-us 5 --speculate mtp --peer "$(ep g1)"
group2() { servable_all 1 g1 g2 && [ "$("$PC" "$T/st-g1.json" members 0 | wc -w)" = 2 ]; }
wait_for 40 group2 || fail "no plan with a tensor group of 2 for the deepseek2 model"
peer_runs g1 g "through a tensor group of 2"
read -r DR AC <<<"$(drafted g1)"
[ "${DR:-0}" -gt 0 ] || fail "a tensor group: no MTP guesses drafted (drafted '$DR', kept '$AC')"
echo "a tensor group of 2: ids exact with mtp, greedy and seeded; $DR drafted, $AC kept"
