#!/bin/bash
# tests/sh/device_split.sh: a peer whose record has a GPU gets its stage
# split by the plan, the first layers on the GPU's backend and the rest on
# its CPU (issue 34, part 3). Without a GPU here the test hook
# SHOAL_TEST_GPU=BYTES:MB_S gives the peer one that its --backend (cpu)
# computes on: the plan puts the layers that fit 3 MB there (2 of the
# dense model's 6), `shoal status --json` shows the stage's two ranges,
# and greedy ids through the peer equal a local run's.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
grep -q "define SHOAL_TEST_HOOKS 1" "$BD/config.h" 2>/dev/null || skip "built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

export SHOAL_TEST_GPU=3000000:500000
start g1 "$DENSE" --mem-limit 64M --ctx 256 --sessions 2 --backend cpu
unset SHOAL_TEST_GPU
wait_for 30 servable_all 1 g1 || fail "no servable plan"
grep -q "device 1: cpu gpu 'test gpu" "$T/g1.log" || fail "the test GPU is not among the devices"
status g1 || fail "no status"
command -v python3 >/dev/null || skip "python3 reads the status JSON here"
DV=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print([(r["device"], r["backend"], r["first_layer"], r["end_layer"]) for s in d["plan"]["stages"] for r in s["devices"]])' "$T/st-g1.json")
[ "$DV" = "[('gpu', 'cpu', 0, 2), ('cpu', 'cpu', 2, 6)]" ] ||
	fail "the stage is not split 0-1 on the gpu, 2-5 on the cpu: $DV"
P="It is a truth universally acknowledged"
"$B" run "$DENSE" -p "$P" -n 24 --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
"$B" run --peer "$(ep g1)" --key "$KEY" -p "$P" -n 24 --temp 0 --ids >"$T/r-ids" 2>"$T/r-err" ||
	fail "run through the split peer: $(cat "$T/r-err")"
same "greedy ids through the split stage" "$T/r-ids" "$T/l-ids"
echo "a stage split 0-1 on the (test) gpu, 2-5 on the cpu; 24 greedy ids equal a local run's"
echo PASS
