#!/bin/bash
# tests/sh/probe_engine.sh: a kept compute figure that the engine's decode
# runs contradict is replaced (issue 39: measurements that do not stick
# when wrong; runtime/node/node_probe.c, node__probe_engine_check). A node
# takes its probe; its kept figure is then made 20x low in the state
# directory (as a probe disturbed by load and kept for a week, but not
# marked, so no quiet retake would ever fix it). Restarted, the node
# publishes the kept figure and plans 20x slow; after a run its stage's
# decode runs are far below the prediction for long (timing.h's gap rule),
# so it measures again, replaces the figure in its record and its state
# directory, and plans anew.
. "$(dirname "$0")/lib.sh"
M=$DATA/models/austen-dense-q8_0.gguf
[ -r "$M" ] || skip "no $M"
command -v python3 >/dev/null || skip "no python3 (reads the status JSON)"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
export SHOAL_PROBE_RETAKE=1 # lib.sh turns retakes and engine checks off
PROBE=$T/p/probe
start p "$M" --ctx 128
wait_for 30 test -s "$PROBE" || fail "no probe file"
stop p
rm -f "$T/p/control"
read -r tag v isa mb mf at pf _ <"$PROBE"
LOW=$((mb / 20))
echo "$tag $v $isa $LOW $((mf / 20)) $at $pf 0" >"$PROBE"
echo "probed $mb MB/s; kept as $LOW MB/s"
start p "$M" --ctx 128
figure() { # the compute figure p publishes, MB/s
	"$B" status --state-dir "$T/p" --key "$KEY" --json --timeout-ms 2000 >"$T/st.json" 2>/dev/null &&
		python3 -c 'import json, sys
print(int(round(json.load(open(sys.argv[1]))["peers"][0]["compute_gb_s"] * 1000)))' "$T/st.json"
}
wait_for 60 servable_all 1 p || fail "no servable plan"
grep -q "compute probe (.*kept from" "$T/p.log" || fail "the kept figure was not used: $(grep "compute probe" "$T/p.log")"
f=$(figure) || fail "no status"
[ "$f" = "$LOW" ] || fail "p publishes $f MB/s, not the kept $LOW"
pred0=$("$PC" "$T/st-p.json" predicted)
"$B" run --peer "$(ep p)" --key "$KEY" -p "It is a truth universally acknowledged" \
	--temp 0 -n 96 >"$T/run.out" 2>"$T/run.err" || fail "run: $(cat "$T/run.err")"
replaced() { grep -q "the compute figure .* was wrong; measured again" "$T/p.log"; }
wait_for 20 replaced || fail "the figure was not replaced: $(grep -E "stage 0 runs|compute" "$T/p.log" | tail -3)"
grep -q "stage 0 runs take .* the plan predicted" "$T/p.log" || fail "the gap was not logged"
[ "$(grep -c "stage 0 runs take" "$T/p.log")" = 1 ] || fail "the gap was logged more than once"
up() { f=$(figure) && [ "$f" -gt $((LOW * 5 / 4)) ]; }
wait_for 10 up || fail "p still publishes $f MB/s (kept $LOW)"
read -r _ _ _ kept _ <"$PROBE"
[ "$kept" -gt $((LOW * 5 / 4)) ] || fail "the state directory still keeps $kept MB/s"
replanned() { status p && [ "$("$PC" "$T/st-p.json" predicted)" != "$pred0" ]; }
wait_for 10 replanned || fail "no new prediction (still $pred0 ms/token)"
echo "replaced: $LOW -> $f MB/s published, $kept kept; predicted $pred0 -> $("$PC" "$T/st-p.json" predicted) ms/token"
echo "$(grep -o "stage 0 runs take.*" "$T/p.log")"
