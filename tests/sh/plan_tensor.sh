#!/bin/sh
# tests/sh/plan_tensor.sh: `shoal plan --tensor` on the shipped example
# clusters prints the chosen mix of tensor groups and pipeline stages, each
# group's members with their shares (of the head's vocab rows too, where
# the group runs the last stage), and a prediction; without --tensor the
# plan is the pipeline plan it always was. Tensor groups compute on their
# members' CPUs unless a GPU is unified (scheduler/schedule.c, 4a), so the
# cases plan the example clusters without their GPUs: what this checks is
# the groups' arithmetic (without the Studios' calibrated round cost,
# which is MLX's on their GPUs: models/specs/README.md).
src=${SHOAL_SRCDIR:-.}
bin=${SHOAL_BIN:-./shoal}
ex=$src/scheduler/examples
specs=$src/models/specs
tmp=${TMPDIR:-/tmp}/shoal-plan-tensor.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
ms() { sed -n 's/^predicted \([0-9.]*\) ms\/token.*/\1/p' "$1"; }
digest() { sed -n 's/.*digest \([0-9a-f]\{64\}\).*/\1/p' "$1"; }
# an example cluster without its peers' "gpu" objects (each on its own line)
for v in mac-studio-x4 linux-homelab; do
	awk '/^ *"gpu":/ { sub(/, *$/, " }", prev); if ($0 ~ /} *}, *$/) prev = prev ","; next }
		{ if (n++) print prev; prev = $0 } END { print prev }' "$ex/$v.json" |
		sed 's/, "round_us": [0-9.]*//' >"$tmp/$v.json"
	grep -q '"gpu"' "$tmp/$v.json" && fail "$v: a GPU left in the CPU-only cluster"
done
plan() { # VIEW SPEC OUT [ARGS...]
	v=$1 s=$2 o=$3
	shift 3
	# the cases below were made for 8192 tokens x 1 session, not the
	# node's defaults (4096, sessions from memory)
	"$bin" plan --view "$tmp/$v.json" --model "$specs/$s.json" --ctx 8192 --sessions 1 "$@" \
		>"$tmp/$o" 2>&1 ||
		fail "plan $v $s $*: $(cat "$tmp/$o")"
}

# 4 Mac Studios over Thunderbolt 5 (50 us): one group of all four, equal
# shares of Llama 70B's 8 KV heads, faster than the pipeline
plan mac-studio-x4 llama-3.1-70b-q4_k_m tp --tensor
plan mac-studio-x4 llama-3.1-70b-q4_k_m pp
grep -q "^mix: 1 pipeline stage, 1 of them tensor group$" "$tmp/tp" &&
	grep -q "^  0  tensor group of 4 *layers   0-79" "$tmp/tp" &&
	[ "$(grep -c 'share  25.0%  KV heads [0-7]-[0-7] (2) ' "$tmp/tp")" -eq 4 ] &&
	ok "studios: a tensor group of 4, 2 KV heads each" || fail "studios: $(cat "$tmp/tp")"
# the head split by the same shares: 128256 rows in 4008 blocks of 32
[ "$(grep -c 'vocab rows [0-9]*-[0-9]* (32064)$' "$tmp/tp")" -eq 4 ] &&
	grep -q "head split by vocab rows over the last stage's members, gathered on studio-512-a" "$tmp/tp" &&
	ok "studios: the head split, 32064 vocab rows each" || fail "studios head: $(cat "$tmp/tp")"
awk -v a="$(ms "$tmp/tp")" -v b="$(ms "$tmp/pp")" 'BEGIN { exit !(a > 0 && a * 1.5 < b) }' &&
	ok "studios: group predicted $(ms "$tmp/tp") ms/token, pipeline $(ms "$tmp/pp")" ||
	fail "studios: group $(ms "$tmp/tp") ms vs pipeline $(ms "$tmp/pp") ms"
grep -q "tensor group" "$tmp/pp" && fail "a group without --tensor" ||
	ok "no group without --tensor"

# MoE on the studios: attention by heads, experts split by the same shares
plan mac-studio-x4 qwen3-235b-a22b-q4_k_m moe --tensor
grep -q "tensor group of 4" "$tmp/moe" &&
	grep -q "KV heads 0-0 (1) *FFN blocks - *experts 0-31 (32)" "$tmp/moe" &&
	ok "studios: MoE group, 32 experts each" || fail "studios MoE: $(cat "$tmp/moe")"

# Linux home lab: the 2.5 GbE pair (150 us) groups for a dense 70B in
# shares of its speeds (80 : 45 GB/s = 64 : 36), the laptop behind 1 GbE
# at 300 us stays out; a model that needs the laptop's memory is a pipeline
plan linux-homelab llama-3.1-70b-q4_k_m lab --tensor
grep -q "tensor group of 2" "$tmp/lab" &&
	grep -q "desktop *share  64.0%  KV heads 0-4 (5)" "$tmp/lab" &&
	grep -q "box *share  36.0%  KV heads 5-7 (3)" "$tmp/lab" && ! grep -q "laptop  *share" "$tmp/lab" &&
	ok "home lab: desktop + box grouped 64 : 36" || fail "home lab 70B: $(cat "$tmp/lab")"
plan linux-homelab qwen3-235b-a22b-q4_k_m lab2 --tensor
plan linux-homelab qwen3-235b-a22b-q4_k_m lab2pp
grep -q "^mix: 2 pipeline stages, 0 of them tensor groups$" "$tmp/lab2" &&
	[ "$(digest "$tmp/lab2")" = "$(digest "$tmp/lab2pp")" ] &&
	ok "home lab: Qwen3-235B as a pipeline, same digest as without --tensor" ||
	fail "home lab 235B: $(cat "$tmp/lab2")"

# --json names each group's members, and the head's (the same 4)
"$bin" plan --view "$tmp/mac-studio-x4.json" --model "$specs/llama-3.1-70b-q4_k_m.json" --tensor --ctx 8192 --sessions 1 \
	--json >"$tmp/j" 2>&1
[ "$(grep -c '"weight":' "$tmp/j")" -eq 8 ] && grep -q '"members"' "$tmp/j" &&
	[ "$(sed -n '/"head": {/,/^  }/p' "$tmp/j" | grep -c '"weight":')" -eq 4 ] &&
	grep -q "\"digest\": \"$(digest "$tmp/tp")\"" "$tmp/j" && ok "json members" ||
	fail "json: $(head -c 600 "$tmp/j")"

[ $fails -eq 0 ] || exit 1
exit 0
