#!/bin/bash
# tests/sh/probe_cache.sh: a peer keeps its measured compute figures in its
# state directory and publishes them again after a restart (so a restart
# does not change the plan); --reprobe measures again; a malformed or
# foreign file is measured over, never trusted. Its record's first device
# is the CPU with those figures (--backend cpu: the CPU alone).
set -u
. "$(dirname "$0")/lib.sh"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

# up_and_down NAME [args...]: start, wait for its status, stop cleanly
up_and_down() {
	local n=$1
	shift
	: >"$T/$n.log"
	start "$n" "" "$@"
	wait_for 20 status "$n" || fail "$n does not answer status"
	"$VC" "$T/st-$n.json" schema || fail "$n: status JSON"
	stop "$n" TERM || fail "$n did not exit cleanly"
}
measured() { grep -q "compute probe ([a-z0-9_]*, [0-9]* ms)" "$T/$1.log"; }
kept() { grep -q "compute probe (.*kept from" "$T/$1.log"; }

up_and_down p
measured p || fail "first start did not measure"
# the record's devices: the CPU first, with the probe's figures
DEV=$("$VC" "$T/st-p.json" devices p | head -1)
[ "$DEV" = "cpu:cpu:probe" ] || fail "the first device is not the CPU with the probe's figures: $DEV"
grep -q "device 0: cpu cpu 'cpu " "$T/p.log" || fail "the log does not name the CPU device"
# --backend cpu publishes the CPU alone
[ -f "$T/p/probe" ] || fail "no probe file in the state directory"
FIG=$(cut -d' ' -f4,5 "$T/p/probe")
up_and_down p
kept p || fail "restart measured again instead of keeping the figures"
grep -q "$(echo "$FIG" | awk '{printf "%.2f GB/s", $1 / 1000}')" "$T/p.log" ||
	fail "the kept figures are not the measured ones ($FIG): $(grep 'compute probe' "$T/p.log")"
up_and_down p --backend cpu
[ "$("$VC" "$T/st-p.json" devices p)" = "cpu:cpu:probe" ] ||
	fail "--backend cpu: $("$VC" "$T/st-p.json" devices p)"
up_and_down p --reprobe
measured p || fail "--reprobe did not measure"
# the kept line names the weight prefetch the probe chose, and a restart
# uses it (unless SHOAL_PREFETCH fixes it)
PF=$(cut -d' ' -f7 "$T/p/probe")
case "$PF" in l1 | l2) ;; *) fail "no prefetch choice in the probe file: $(cat "$T/p/probe")" ;; esac
grep -q "weight prefetch $PF" "$T/p.log" || fail "the log does not name the prefetch $PF"
ISA=$(cut -d' ' -f3 "$T/p/probe")
for pf in l1 l2; do
	echo "shoal-probe 3 $ISA 1000 1000 $(date +%s) $pf" >"$T/p/probe"
	up_and_down p
	kept p || fail "a good probe file ($pf) was measured over"
	grep -q "weight prefetch $pf" "$T/p.log" || fail "the kept prefetch $pf was not used: $(grep 'compute probe' "$T/p.log")"
done
echo "shoal-probe 3 $ISA 1000 1000 $(date +%s) l2" >"$T/p/probe"
SHOAL_PREFETCH=l1 up_and_down p
grep -q "weight prefetch l1" "$T/p.log" || fail "SHOAL_PREFETCH=l1 did not override the kept l2"
for bad in "garbage" "shoal-probe 3 no-such-isa 1000 1000 $(date +%s) l1" \
	"shoal-probe 3 $ISA 0 0 $(date +%s) l1" \
	"shoal-probe 3 $ISA 1000 1000 $(($(date +%s) + 86400)) l1" \
	"shoal-probe 3 $ISA 1000 1000 1 l1" \
	"shoal-probe 3 $ISA 1000 1000 $(date +%s) l3" \
	"shoal-probe 3 $ISA 1000 1000 $(date +%s)" \
	"shoal-probe 1 $ISA 1000 1000 $(date +%s)" \
	"shoal-probe 2 $ISA 1000 1000 $(date +%s) l1"; do
	printf '%s\n' "$bad" >"$T/p/probe"
	up_and_down p
	measured p || fail "a bad probe file was trusted: $bad"
done
echo "the CPU published as device 0 with the probe's figures;"
echo "figures and prefetch kept across a restart, --reprobe measures, SHOAL_PREFETCH overrides, 9 bad files (older versions too) measured over"
echo PASS
