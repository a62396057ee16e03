#!/bin/bash
# tests/sh/probe_retake.sh: a compute probe taken under load does not stick
# (issue 39): a real `shoal node` started on one CPU shared with two busy
# loops logs that its probe ran under load and keeps the figure marked in
# its state directory; restarted without the load, it retakes the probe
# after one quiet period, keeps the new figure unmarked and publishes it
# (its status record). SHOAL_TEST_QUIET=1 (test builds) makes the second
# run count the machine as quiet, since other tests may load it; the load
# of the first run is detected for real.
. "$(dirname "$0")/lib.sh"
command -v taskset >/dev/null || skip "no taskset"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
export SHOAL_PROBE_RETAKE=1
PROBE=$T/p/probe
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//') # one CPU we may use
LOOPS=()
for _ in 1 2; do
	taskset -c "$cpu" sh -c 'while :; do :; done' &
	LOOPS+=($!)
done
cleanup_loops() { kill "${LOOPS[@]}" 2>/dev/null; }
trap 'cleanup_loops; cleanup' EXIT
LAUNCH="taskset -c $cpu" start p ""
ep p >/dev/null || fail "p did not start"
grep -q "the compute probe ran under load (its thread had" "$T/p.log" ||
	fail "the probe under load was not noticed: $(grep "compute probe" "$T/p.log")"
[ "$(awk '{print $NF}' "$PROBE")" = 1 ] || fail "the kept figure is not marked: $(cat "$PROBE")"
F1=$(awk '{print $4}' "$PROBE")
echo "under load: $(grep -o 'compute probe (.*' "$T/p.log" | head -1)"
cleanup_loops
stop p

rm -f "$T/p/control" # the killed node's
SHOAL_TEST_QUIET=1 start p ""
ep p >/dev/null || fail "p did not restart"
marked() { grep -q "taken under load: retaken when the machine is quiet" "$T/p.log"; }
wait_for 10 marked ||
	fail "the restart did not see the mark: $(grep "compute probe" "$T/p.log" | tail -1)"
retaken() { grep -q "compute probe retaken on a quiet machine" "$T/p.log"; }
wait_for 20 retaken || fail "no retake: $(grep "compute probe" "$T/p.log" | tail -2)"
[ "$(awk '{print $NF}' "$PROBE")" = 0 ] || fail "the new figure is still marked: $(cat "$PROBE")"
F2=$(awk '{print $4}' "$PROBE")
[ "$F2" != "$F1" ] || fail "the figure did not change ($F1 MB/s)"
published() {
	"$B" status --state-dir "$T/p" --key "$KEY" --json >"$T/st.json" 2>/dev/null &&
		python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["peers"]
sys.exit(0 if any(abs(x.get("compute_gb_s", 0) * 1000 - int(sys.argv[2])) < 1 for x in p) else 1)' "$T/st.json" "$F2"
}
wait_for 10 published || fail "the record does not carry the new figure $F2 MB/s"
echo "kept $F1 MB/s (marked), retaken: $F2 MB/s; $(grep -o 'compute probe retaken.*' "$T/p.log")"
