#!/bin/bash
# tests/bench/tp_bench.sh: decode tokens/s of the 1.17 GB Q8_0 fixture on a
# 2-peer tensor group against 1 peer, a 2-stage pipeline and one process
# with 1 and 2 threads (issue 11, acceptance 4). A benchmark, not a test:
# not part of make check; it fails only when it cannot set up a cluster.
#
#   tests/bench/tp_bench.sh [BUILDDIR]        (from the source tree)
#
# Fixture: the Llama-shaped one of tests/bench/decode_bound.sh (made with
# tests/helpers/gen_fixture if missing; ~1.2 GB in /tmp/shoal-bench).
# Every peer runs 1 thread, with the compute figures the first peer probed.
# Clusters (own keys and names), up at once, idle but for the runs:
#   1 peer       --ctx 256
#   group        2 peers, --tensor --link-us 5 (loopback): the scheduler
#                picks one stage run by a group of both (checked in status),
#                shares from the probed speeds; one such cluster per spin
#                (SPINS, the wait's spin in us before it blocks, default
#                "0 20 200"; 200 is the node's, SHOAL_SERVE_TP_SPIN_US)
#   pipeline     2 peers at --mem-limit 650M: 2 stages (checked)
# Timing as tests/bench/dist_bench.sh: the same greedy prompt for N1 and N2
# tokens, RUNS rounds of every config in turn; us/token = the median over
# rounds of (t(N2) - t(N1)) / (N2 - N1). Goals: the group >= 1.25 x one
# peer and >= 90 % of the 2-thread process. Takes ~3 minutes on 2 cores.
# Env: SHOAL_BENCH_FIXTURE, RUNS (default 3), SPINS, PIN (1: peer I of
# each cluster on CPU I-1 with taskset; 0: unpinned), PIPE_LIMIT (the
# pipeline's --mem-limit; a dry run on the austen model: 13M, with
# SHOAL_TEST_TP_PREFER=1 since a group does not pay there).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
FIX=${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-q8_0.gguf}
RUNS=${RUNS:-3}
SPINS=${SPINS:-0 20 200}
PROMPT="It is a truth universally acknowledged"
CTX=256
N1=2
N2=26

[ -x "$B" ] || fail "$B not found (give the build directory)"
bench_fixture "$FIX"

# ---- clusters: CONFIGS names them; EP0[C] owns the sessions (stage 0)
CONFIGS=(local1 local2 peer1)
for s in $SPINS; do CONFIGS+=("group$s"); done
CONFIGS+=(pipe)
declare -A EP0
cluster() { # cluster C N [node args...]: N peers of cluster C, all up
	local c=$1 n=$2 i seed
	shift 2
	"$B" key new "$T/k-$c" >/dev/null || fail "shoal key new"
	for i in $(seq "$n"); do [ -s "$T/probe" ] && mkdir -p "$T/$c-$i" && cp "$T/probe" "$T/$c-$i/probe"; done
	KEY=$T/k-$c LAUNCH=$(pin 1) start "$c-1" "$FIX" --cluster "tp-$c" --ctx $CTX "$@"
	seed=$(ep "$c-1")
	for i in $(seq 2 "$n"); do
		KEY=$T/k-$c LAUNCH=$(pin "$i") start "$c-$i" "$FIX" --cluster "tp-$c" --ctx $CTX "$@" --peer "$seed"
	done
}
# pin I: the command that runs peer I of a cluster on CPU I-1 (mod the CPUs),
# PIN=0: none. Unpinned, the kernel puts two peers that wake each other on
# one CPU (the waker's) half the time, and a group's members then take
# turns instead of computing at once (measured: members' sends ~one
# segment's compute apart).
pin() {
	[ "${PIN:-1}" = 1 ] && command -v taskset >/dev/null || return 0
	echo "taskset -c $((($1 - 1) % $(nproc)))"
}
ready() { # ready C N STAGES MEMBERS: the cluster serves its plan of that shape
	local c=$1 n=$2 names=() i
	for i in $(seq "$n"); do names+=("$c-$i"); done
	KEY=$T/k-$c servable_all "$3" "${names[@]}" || return 1
	local m
	m=$("$PC" "$T/st-$c-1.json" members 0)
	[ "$m" = none ] && m=
	[ "$(echo $m | wc -w)" = "$4" ]
}
t0=$(now_ms)
cluster peer1 1
# every other peer gets the first one's probed figures (its probe file):
# the cores are alike, and a probe disturbed by the machine's other load
# would skew the shares or keep a peer out of the group
wait_for 60 test -s "$T/peer1-1/probe" || fail "no probe file"
cp "$T/peer1-1/probe" "$T/probe"
for s in $SPINS; do SHOAL_TP_SPIN_US=$s cluster "group$s" 2 --tensor --link-us 5; done
cluster pipe 2 --mem-limit "${PIPE_LIMIT:-650M}"
wait_for 240 ready peer1 1 1 0 || fail "1 peer: no plan"
for s in $SPINS; do
	wait_for 240 ready "group$s" 2 1 2 || fail "group (spin $s): no servable plan with a group of 2: $("$PC" "$T/st-group$s-1.json" servable)"
done
wait_for 240 ready pipe 2 2 0 || fail "pipeline: no 2-stage plan: $("$PC" "$T/st-pipe-1.json" servable)"
for c in "${CONFIGS[@]}"; do
	case $c in local*) ;; *) EP0[$c]=$(ep "$("$PC" "$T/st-$c-1.json" stage 0)") ;; esac
done
echo "clusters up in $(($(now_ms) - t0)) ms; group shares: $("$PC" "$T/st-group${SPINS%% *}-1.json" members 0)"
for c in peer1 "group${SPINS%% *}" pipe; do
	echo "  $c: $(grep ' cluster: plan epoch ' "$T/$c-1.log" | tail -n 1 | sed 's/.*: \([0-9]* stage.*predicted\)/\1/')"
done

# gen C N OUT: one greedy run of N tokens; prints its wall time in us
gen() {
	local s e
	s=$(date +%s%N)
	case $1 in
	local1) "$B" run "$FIX" -p "$PROMPT" --temp 0 --ids --threads 1 --ctx $CTX -n "$2" ;;
	local2) "$B" run "$FIX" -p "$PROMPT" --temp 0 --ids --threads 2 --ctx $CTX -n "$2" ;;
	*) "$B" run --peer "${EP0[$1]}" --key "$T/k-$1" -p "$PROMPT" --temp 0 --ids -n "$2" ;;
	esac >"$3" 2>>"$T/run.log" || return 1
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}
declare -A US
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${CONFIGS[@]}"; do : >"$T/d-$c"; done
for r in $(seq "$RUNS"); do
	for c in "${CONFIGS[@]}"; do
		t1=$(gen "$c" $N1 "$T/ids1-$c") || fail "$c: run -n $N1 failed: $(tail -n 2 "$T/run.log")"
		t2=$(gen "$c" $N2 "$T/ids2-$c") || fail "$c: run -n $N2 failed: $(tail -n 2 "$T/run.log")"
		echo "$((t2 - t1))" >>"$T/d-$c"
	done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
# gathers of one group member: per engine run (design: 4 x 22 layers)
KEY=$T/k-group${SPINS%% *} status "group${SPINS%% *}-1"
G=$("$PC" "$T/st-group${SPINS%% *}-1.json" data stage.gathers)
R=$("$PC" "$T/st-group${SPINS%% *}-1.json" data stage.runs)
echo "group member: $G gathers in $R engine runs ($((G / (R ? R : 1))) a run)"
for s in $SPINS; do
	KEY=$T/k-group$s status "group$s-1"
	w=$("$PC" "$T/st-group$s-1.json" data stage.gather_wait_ns)
	bl=$("$PC" "$T/st-group$s-1.json" data stage.gather_blocked)
	g=$("$PC" "$T/st-group$s-1.json" data stage.gathers)
	echo "  spin $s us: mean wait for slices $((w / (g ? g : 1) / 1000)) us, $bl of $g waits blocked"
done
stop_all
echo
echo "config       us/token     tok/s   x 1 peer   x local 2 threads"
for c in "${CONFIGS[@]}"; do
	c1=$(wc -w <"$T/ids1-$c")
	c2=$(wc -w <"$T/ids2-$c")
	[ "$c2" -gt "$c1" ] || fail "$c: $c2 tokens for -n $N2, $c1 for -n $N1"
	[ "$c" = local1 ] || cmp -s "$T/ids2-$c" "$T/ids2-local1" || echo "note: $c: greedy ids differ from the local run"
	US[$c]=$(sort -n "$T/d-$c" | awk -v n="$((c2 - c1))" '{ d[NR] = $1 }
		END { m = NR % 2 ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2; printf "%.1f", m / n }')
done
for c in "${CONFIGS[@]}"; do
	awk -v c="$c" -v us="${US[$c]}" -v one="${US[peer1]}" -v l2="${US[local2]}" 'BEGIN {
		printf "%-10s %10.1f %9.2f %10.3f %10.3f\n", c, us, 1e6 / us, one / us, l2 / us }'
done
g="group$(echo "$SPINS" | tr ' ' '\n' | grep -x 200 || echo "${SPINS%% *}")"
awk -v g="${US[$g]}" -v one="${US[peer1]}" -v l2="${US[local2]}" -v name="$g" 'BEGIN {
	printf "goals (%s): >= 1.25 x 1 peer: %.3f (%s); >= 90%% of 2 threads: %.1f%% (%s)\n", name,
	       one / g, (one / g >= 1.25 ? "met" : "NOT met"), 100 * l2 / g, (l2 / g >= 0.9 ? "met" : "NOT met") }'
echo "raw (t(N2) - t(N1) us per round):"
for c in "${CONFIGS[@]}"; do echo "  $c: $(paste -sd' ' "$T/d-$c")"; done
