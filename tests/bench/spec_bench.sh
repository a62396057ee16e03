#!/bin/bash
# tests/bench/spec_bench.sh: exact speculative decoding with prompt lookup
# and with a draft model on the owner (issue 38): decode tokens/s with and
# without it and the share of drafts kept, through 1 and 3 `shoal node`
# stages on 127.0.0.1. A benchmark,
# not a test: not part of make check; it fails only when it cannot set up
# a cluster or when tokens differ (they never may).
#
#   tests/bench/spec_bench.sh [BUILDDIR]        (from the source tree)
#
# Model: the trained austen model (tests/data, 6 layers). Six clusters
# are up at once, each with its own key: 1 and 3 peers (3: --mem-limit
# 11M forces 3 stages), one of each three with --speculate lookup on every
# peer, one with --speculate draft --draft DRAFT (the draft model: a
# DRAFT_TYPE copy of the F32 file made by tests/helpers/requant, with
# DRAFT_LAYERS only of its layers when set), the other without;
# runs go to the peer of stage 0 (the owner: no extra hop). Two prompts:
#   repeat  the opening of Pride and Prejudice twice, then its first
#           words again, greedy: the reply copies the passage (lookup
#           drafts well). Goal: >= 1.8x the tokens/s without.
#   poor    a short prompt, sampled (temperature 1, seeded): the reply
#           rarely repeats itself (lookup drafts poorly, and the session
#           stops drafting). Goal: >= 0.95x.
# Decode speed, two ways: (1) the owner's own clock, its decode steps
# over all the rounds (shoal status --json: plan.data.owner: tokens after
# each run's first per second of steps; a shared machine's noise from
# process starts does not reach it); (2) the wall time of each run for N1
# and N2 tokens, us/token = (t(N2) - t(N1)) / (N2 - N1), the median over
# RUNS rounds. Every config runs in turn in each round (load from
# elsewhere hits all alike). The kept share is the speculating owners'
# counters (plan.data.owner.spec) over the rounds. Ids with and
# without speculation are compared: they must be the same.
# Env: SHOAL_DATA, RUNS (default 3), N1 (16), N2 (256), THREADS (1),
# DRAFT_TYPE (Q4_0), DRAFT_LAYERS (all; the embedding and the tied head
# are 8.2 M of the 12.9 M weights, so fewer layers save little here),
# MODEL (austen, or fixture: the 1.17 GB Llama-shaped Q8_0 fixture of
# tests/bench/decode_bound.sh, SHOAL_BENCH_FIXTURE, made if missing; random
# weights, so the draft is a DRAFT_TYPE copy of the fixture itself and the
# repeat prompt is its first sentence twice; N1 2 and N2 34 by default,
# --ctx 512 --sessions 2, 3 stages at --mem-limit 460M: 8 layers and the
# embedding are 444 MB, and 2 x 460M cannot hold the model; or mtp: a
# deepseek2 fixture of gen_fixture with an MTP layer, random weights, so
# the guesses are poor: clusters with --speculate mtp (c1m, c3m; the last
# stage runs the layer) against none, the poor-drafter goal).
# QUIET=L with MODEL=fixture: the fixture made with gen_fixture
# --quiet-from L (its layers from L on add their outputs / 256 to the
# residual stream) and the draft its first L layers and head at Q8_0: a
# draft that chooses as the target on most greedy tokens (random weights
# give a truncated copy none of a trained model's agreement) and reads L
# of its 22 layers plus the head, the draft-model goal's case.
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
SRC_F32=$DATA/models/austen-dense-f32.gguf
RUNS=${RUNS:-3}
LIM3=11M
NODE_X=()
if [ "${MODEL:-austen}" = fixture ] && [ -n "${QUIET:-}" ]; then
	# its layers from QUIET on add little: a draft of the first QUIET
	# layers and the head (Q8_0, as the target) agrees on most tokens
	FIX=${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-quiet$QUIET-q8_0.gguf}
	bench_fixture "$FIX" --quiet-from "$QUIET"
	DRAFT_LAYERS=${DRAFT_LAYERS:-$QUIET}
	DRAFT_TYPE=${DRAFT_TYPE:-Q8_0}
fi
if [ "${MODEL:-austen}" = fixture ]; then
	DENSE=${FIX:-${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-q8_0.gguf}}
	bench_fixture "$DENSE"
	SRC_F32=$DENSE # its weights are Q8_0 already: the draft is a copy of it
	LIM3=460M
	NODE_X=(--sessions 2)
	N1=${N1:-2}
	N2=${N2:-34}
fi
PEERS3=3
XS=(s d) # the drafters: s lookup, d a draft model (m: the MTP layer)
if [ "${MODEL:-austen}" = mtp ]; then
	DENSE=$T/ds2-mtp.gguf
	"$BD/tests/helpers/gen_fixture" --arch deepseek2 --type Q8_0 --layers 6 --dim 256 --ff 512 \
		--heads 4 --vocab 2048 --head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 \
		--q-lora 64 --dense-lead 1 --shared 1 --groups 2 --groups-used 1 --sigmoid --experts 8 \
		--experts-used 2 --ff-exp 128 --ctx 512 --seed 3 --nextn 1 "$DENSE" >/dev/null 2>&1 ||
		fail "gen_fixture: no deepseek2 fixture"
	LIM3=4.5M # the last stage holds the MTP layer too (2.3 MiB with the embedding)
	PEERS3=4  # 3 or 4 peers plan 2 to 4 stages (probes decide): "3" is 2+
	XS=(m)
fi
N1=${N1:-16}
N2=${N2:-256}
P="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered as the rightful property of some one or other of their daughters."
REPEAT="$P $P It is a truth universally"
[ "${MODEL:-austen}" = fixture ] &&
	REPEAT="${P%%wife.*}wife. ${P%%wife.*}wife. It is a truth universally"
POOR="Mr. Darcy walked"
[ -x "$B" ] || fail "$B not found (give the build directory)"
[ -f "$DENSE" ] || fail "$DENSE not found (set SHOAL_DATA)"
DRAFT=$T/draft.gguf
[ "${XS[0]}" = m ] || "$BD/tests/helpers/requant" "$SRC_F32" "$DRAFT" --type "${DRAFT_TYPE:-Q4_0}" \
	${DRAFT_LAYERS:+--layers "$DRAFT_LAYERS"} >/dev/null || fail "requant: no draft model"

# ---- clusters: c1s c1d c1p (1 peer), c3s c3d c3p (3 peers); s drafts by
# lookup, d with the draft model, m with the MTP layer, p not at all
declare -A EP0 OWN OT NST
CL=()
for k in 1 3; do
	for x in "${XS[@]}" p; do CL+=("c$k$x"); done
done
for c in "${CL[@]}"; do
	"$B" key new "$T/k$c" >/dev/null || fail "shoal key new"
	k=${c:1:1}
	spec=()
	[ "${c:2:1}" = s ] && spec=(--speculate lookup)
	[ "${c:2:1}" = d ] && spec=(--speculate draft --draft "$DRAFT")
	[ "${c:2:1}" = m ] && spec=(--speculate mtp)
	# mtp: the clusters without it offer it too (the plan then gives the
	# last stage the MTP layer alike), and their runs ask for off
	[ "${XS[0]}" = m ] && [ "${c:2:1}" = p ] && spec=(--speculate mtp)
	lim=()
	[ "$k" = 3 ] && lim=(--mem-limit "$LIM3")
	KEY=$T/k$c start "${c}n1" "$DENSE" --cluster "sb$c" --ctx 512 "${lim[@]}" "${spec[@]}" \
		--threads "${THREADS:-1}" "${NODE_X[@]}"
	seed=$(ep "${c}n1")
	np=1
	[ "$k" = 3 ] && np=$PEERS3
	for i in $(seq 2 "$np"); do
		KEY=$T/k$c start "${c}n$i" "$DENSE" --cluster "sb$c" --ctx 512 "${lim[@]}" "${spec[@]}" \
			--threads "${THREADS:-1}" "${NODE_X[@]}" --peer "$seed"
	done
done
for c in "${CL[@]}"; do
	k=${c:1:1}
	names=()
	np=1
	[ "$k" = 3 ] && np=$PEERS3
	for i in $(seq "$np"); do names+=("${c}n$i"); done
	want=$k
	[ "$k" = 3 ] && [ "$PEERS3" != 3 ] && want=""
	KEY=$T/k$c wait_for 300 servable_all "$want" "${names[@]}" || fail "$c: no $k-stage plan"
	OWN[$c]=$("$PC" "$T/st-${c}n1.json" stage 0)
	NST[$c]=$("$PC" "$T/st-${c}n1.json" stages)
	[ "$k" = 1 ] || [ "${NST[$c]}" -ge 2 ] || fail "$c: a plan of ${NST[$c]} stage(s)"
	EP0[$c]=$(ep "${OWN[$c]}")
done

# gen CLUSTER PROMPT N OUT: one run; prints its wall time in us
gen() {
	local s e S
	if [ "$2" = repeat ]; then S=(-p "$REPEAT" --temp 0); else S=(-p "$POOR" --temp 1 --seed 11); fi
	s=$(date +%s%N)
	[ "${XS[0]}" = m ] && [ "${1:2:1}" = p ] && S+=(--speculate off)
	"$B" run --peer "${EP0[$1]}" --key "$T/k$1" "${S[@]}" --ids -n "$3" >"$4" 2>>"$T/run.log" ||
		return 1
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}
# owner_counts CLUSTER: "tokens steps step_ns drafted kept" of its owner
owner_counts() {
	KEY=$T/k$1 status "${OWN[$1]}" || { echo "0 0 0 0 0"; return; }
	json_find "$T/st-${OWN[$1]}.json" step_ns,token_frames \
		'" ".join(str(v) for v in (o["tokens"], o["steps"], o["step_ns"],
		                           o.get("spec", {}).get("drafted", 0),
		                           o.get("spec", {}).get("accepted", 0)))' "0 0 0 0 0"
}

echo "${MODEL:-austen}: clusters up; load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A US C0
for prompt in repeat poor; do
	for c in "${CL[@]}"; do
		: >"$T/d-$c"
		C0[$c]=$(owner_counts "$c")
	done
	for r in $(seq "$RUNS"); do
		for c in "${CL[@]}"; do
			t1=$(gen "$c" $prompt "$N1" "$T/i1-$c") || fail "$c: run failed: $(tail -n 2 "$T/run.log")"
			t2=$(gen "$c" $prompt "$N2" "$T/i2-$c") || fail "$c: run failed: $(tail -n 2 "$T/run.log")"
			echo "$((t2 - t1))" >>"$T/d-$c"
		done
	done
	for k in 1 3; do
		for x in "${XS[@]}"; do
			cmp -s "$T/i2-c${k}$x" "$T/i2-c${k}p" || fail "$prompt, $k stage(s): ids with drafter $x differ"
		done
	done
	for c in "${CL[@]}"; do
		n=$(($(wc -w <"$T/i2-$c") - $(wc -w <"$T/i1-$c")))
		US[$c]=$(sort -n "$T/d-$c" | awk -v n="$n" '{ d[NR] = $1 }
			END { m = NR % 2 ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2; printf "%.1f", m / n }')
		# the owner's decode steps over the rounds: tokens after each
		# run's first (which the prompt's step gives) per second of steps
		OT[$c]=$(echo "${C0[$c]} $(owner_counts "$c") $((2 * RUNS))" | awk '{
			tok = $6 - $1 - $11; ns = $8 - $3; d = $9 - $4; a = $10 - $5
			printf "%.1f %d %d", (ns > 0 ? tok / (ns / 1e9) : 0), d, a }')
	done
	for k in 1 3; do
		for x in "${XS[@]}"; do
			read -r ots d a <<<"${OT[c${k}$x]}"
			read -r otp _ _ <<<"${OT[c${k}p]}"
			awk -v p=$prompt -v k="${NST[c${k}$x]}" -v kp="${NST[c${k}p]}" -v us="${US[c${k}$x]}" -v up="${US[c${k}p]}" -v d="$d" -v a="$a" \
			-v os="$ots" -v op="$otp" -v w="$(case $x in s) echo lookup ;; d) echo draft ;; *) echo mtp ;; esac)" 'BEGIN {
			printf "%-6s %d stage(s): owner steps %7.1f tok/s with %-6s, %7.1f without", p, k, os, w, op
			if (kp != k) printf " (%d stages)", kp
			printf ": %.2fx;", (op > 0 ? os / op : 0)
			printf " wall %.1f vs %.1f tok/s (%.2fx); %d drafted, %d kept (%.0f%%)\n",
				(us > 0 ? 1e6 / us : 0), (up > 0 ? 1e6 / up : 0), (us > 0 ? up / us : 0), d, a, (d ? 100 * a / d : 0) }'
		done
	done
done
echo "(goals: lookup: repeat >= 1.8x; a draft model keeping >= 60%: >= 1.4x; a drafter keeping"
echo " < 20%: >= 0.95x; ${MODEL:-austen}, RUNS=$RUNS rounds, tokens $N1..$N2, medians; draft: ${DRAFT_TYPE:-Q4_0}, ${DRAFT_LAYERS:-all} layers;"
echo " load average $(cut -d' ' -f1-3 /proc/loadavg))"
