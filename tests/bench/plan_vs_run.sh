#!/bin/bash
# tests/bench/plan_vs_run.sh: the plan's predicted ms/token against the
# decode step the cluster then runs (issue 39, acceptance 2). A benchmark,
# not a test: not part of make check; it fails only when it cannot set up
# a cluster, or (BOUND, default 0: off) when a ratio measured / predicted
# falls outside [1/BOUND, BOUND] (tests/sh/plan_vs_run.sh runs it so with
# BOUND=3, one cluster).
#
#   tests/bench/plan_vs_run.sh [BUILDDIR] [CONFIG...]   (from the source tree)
#
# Clusters of `shoal node` peers on loopback, 1 thread each, with the
# shared models (SHOAL_MODELS, default /work/shared/models):
#   dense1   austen-dense-q8_0, 1 peer
#   dense2   the same, 2 peers at --mem-limit 10M: a 2-stage pipeline
#   moe1     austen-moe-q8_0, 1 peer
#   moe3     the same, 3 peers at --mem-limit 16M: 3 stages
#   group2   austen-dense-q8_0, 2 peers, --tensor with the test hook
#            SHOAL_TEST_TP_PREFER=1 (a group of both; the model is too
#            small for a group to pay, so the planner would not pick it)
# Predicted: status JSON "plan".predicted_ms_per_token of the first peer.
# Measured: the same greedy prompt for N1 and N2 tokens through
# `shoal run --peer` (the client's wall time), RUNS rounds; the step is the
# median over rounds of (t(N2) - t(N1)) / (N2 - N1): the decode step after
# warm-up (prefill, connection and the first tokens cancel out). Goal:
# within 25 %. Env: RUNS (default 3), N1 (4), N2 (36), SHOAL_MODELS, BOUND.
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
[ $# -gt 0 ] && shift
. "$(dirname "$0")/../sh/lib.sh"
MODELS=${SHOAL_MODELS:-/work/shared/models}
RUNS=${RUNS:-3}
N1=${N1:-4}
N2=${N2:-36}
BOUND=${BOUND:-0}
PROMPT="It is a truth universally acknowledged"
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(dense1 dense2 moe1 moe3 group2)

[ -x "$B" ] || fail "$B not found (give the build directory)"
[ -x "$PC" ] || make -C "$BD" tests/helpers/plancheck >/dev/null || fail "cannot build plancheck"
DENSE=$MODELS/austen-dense-q8_0.gguf
MOE=$MODELS/austen-moe-q8_0.gguf
[ -r "$DENSE" ] && [ -r "$MOE" ] || skip "no shared models in $MODELS"

declare -A NP MODEL ARGS STAGES MEMBERS ENV
NP=([dense1]=1 [dense2]=2 [moe1]=1 [moe3]=3 [group2]=2)
MODEL=([dense1]=$DENSE [dense2]=$DENSE [moe1]=$MOE [moe3]=$MOE [group2]=$DENSE)
ARGS=([dense1]="" [dense2]="--mem-limit 10M" [moe1]="" [moe3]="--mem-limit 16M" [group2]="--tensor")
STAGES=([dense1]=1 [dense2]=2 [moe1]=1 [moe3]=3 [group2]=1)
MEMBERS=([dense1]=0 [dense2]=0 [moe1]=0 [moe3]=0 [group2]=2)
ENV=([group2]="SHOAL_TEST_TP_PREFER=1")

cluster() { # cluster C: its peers, all started
	local c=$1 i seed
	"$B" key new "$T/k-$c" >/dev/null || fail "shoal key new"
	# shellcheck disable=SC2086
	KEY=$T/k-$c LAUNCH="env ${ENV[$c]:-}" start "$c-1" "${MODEL[$c]}" --cluster "pvr-$c" ${ARGS[$c]}
	seed=$(ep "$c-1")
	for i in $(seq 2 "${NP[$c]}"); do
		# shellcheck disable=SC2086
		KEY=$T/k-$c LAUNCH="env ${ENV[$c]:-}" start "$c-$i" "${MODEL[$c]}" --cluster "pvr-$c" \
			${ARGS[$c]} --peer "$seed"
	done
}
ready() { # ready C: every peer serves one plan of the config's shape
	local c=$1 names=() i m
	for i in $(seq "${NP[$c]}"); do names+=("$c-$i"); done
	KEY=$T/k-$c servable_all "${STAGES[$c]}" "${names[@]}" || return 1
	m=$("$PC" "$T/st-$c-1.json" members 0)
	[ "$m" = none ] && m=
	[ "$(echo $m | wc -w)" = "${MEMBERS[$c]}" ]
}
gen() { # gen C N OUT: one greedy run of N tokens through stage 0; its wall time in us
	local s e
	s=$(date +%s%N)
	"$B" run --peer "${EP0[$1]}" --key "$T/k-$1" -p "$PROMPT" --temp 0 --ids -n "$2" \
		>"$3" 2>>"$T/run.log" || return 1
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}

declare -A EP0 PRED
t0=$(now_ms)
for c in "${CONFIGS[@]}"; do
	[ -n "${NP[$c]:-}" ] || fail "unknown config $c (dense1 dense2 moe1 moe3 group2)"
	cluster "$c"
done
for c in "${CONFIGS[@]}"; do
	wait_for 240 ready "$c" || fail "$c: no servable plan of ${STAGES[$c]} stages, ${MEMBERS[$c]} members: $("$PC" "$T/st-$c-1.json" servable)"
	EP0[$c]=$(ep "$("$PC" "$T/st-$c-1.json" stage 0)")
	PRED[$c]=$("$PC" "$T/st-$c-1.json" predicted)
	[ "${PRED[$c]}" != none ] || fail "$c: no predicted_ms_per_token in the status JSON"
done
echo "clusters up in $(($(now_ms) - t0)) ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${CONFIGS[@]}"; do : >"$T/d-$c"; done
for r in $(seq "$RUNS"); do
	for c in "${CONFIGS[@]}"; do
		t1=$(gen "$c" "$N1" "$T/ids1-$c") || fail "$c: run -n $N1 failed: $(tail -n 2 "$T/run.log")"
		t2=$(gen "$c" "$N2" "$T/ids2-$c") || fail "$c: run -n $N2 failed: $(tail -n 2 "$T/run.log")"
		echo "$((t2 - t1))" >>"$T/d-$c"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
stop_all
echo
echo "config   predicted ms   measured ms   measured/predicted"
bad=0
for c in "${CONFIGS[@]}"; do
	c1=$(wc -w <"$T/ids1-$c")
	c2=$(wc -w <"$T/ids2-$c")
	[ "$c2" -gt "$c1" ] || fail "$c: $c2 tokens for -n $N2, $c1 for -n $N1"
	ms=$(sort -n "$T/d-$c" | awk -v n="$((c2 - c1))" '{ d[NR] = $1 }
		END { m = NR % 2 ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2; printf "%.3f", m / n / 1000 }')
	line=$(awk -v c="$c" -v p="${PRED[$c]}" -v m="$ms" -v b="$BOUND" 'BEGIN {
		r = m / p; printf "%-8s %12.3f %13.3f %12.2f  %s", c, p, m, r,
		(r >= 0.75 && r <= 1.25 ? "within 25%" : "outside 25%")
		if (b > 0 && (r > b || r < 1 / b)) { printf "  OUTSIDE %gx", b; exit 1 } }') || bad=1
	echo "$line"
	echo "  $c raw (t(N2) - t(N1) us): $(paste -sd' ' "$T/d-$c")" >>"$T/raw"
done
cat "$T/raw"
[ "$bad" = 0 ] || fail "a ratio outside ${BOUND}x"
