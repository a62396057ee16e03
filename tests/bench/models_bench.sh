#!/bin/sh
# tests/bench/models_bench.sh: decode speed against the memory-bandwidth
# bound, one thread, on two generated ~1 GB models of the kinds the models
# issue adds (issue 12, acceptance 5): a DeepSeek-V3-shaped deepseek2 at
# Q8_0 (MLA with q_lora, 1 dense lead layer, 16 routed experts of which 2
# are used, 1 shared expert, sigmoid gating in 4 groups) and a
# Llama-shaped model in the reference quantizer's Q4_K_M mix (Q4_K, Q5_K,
# Q6_K tensors; tests/helpers/requant --mix q4_k_m). Not part of make
# check: it needs ~3 GB in /tmp and a few minutes.
#
#   tests/bench/models_bench.sh [BUILDDIR] [RUNS]
#
# Prints, per model and run, `shoal bench --json` (decode tokens/s, bytes
# per token, the measured bandwidth and the fraction of the bound). The
# figures are noisy on a shared machine: take the median. Then the gemv
# table per weight type (tests/bench/bench_kernels), 1 thread, against the
# read bound.
set -eu
builddir=${1:-${SHOAL_BUILDDIR:-.}}
runs=${2:-3}
dir=${SHOAL_BENCH_DIR:-/tmp/shoal-bench}
mkdir -p "$dir"
for h in gen_fixture requant; do
	[ -x "$builddir/tests/helpers/$h" ] || make -C "$builddir" "tests/helpers/$h" >/dev/null
done
ds=$dir/deepseek2-1g-q8_0.gguf
if [ ! -s "$ds" ]; then
	echo "making $ds" >&2
	"$builddir/tests/helpers/gen_fixture" --arch deepseek2 --type Q8_0 --layers 6 --dim 2048 \
		--ff 5632 --heads 16 --head-dim 192 --vocab 32000 --kv-lora 512 --rope-dim 64 \
		--v-head-dim 128 --q-lora 768 --dense-lead 1 --experts 16 --experts-used 2 \
		--ff-exp 1408 --shared 1 --groups 4 --groups-used 2 --sigmoid --ctx 2048 --seed 3 \
		"$ds.tmp"
	mv "$ds.tmp" "$ds"
fi
mix=$dir/llama-1g-q4_k_m.gguf
if [ ! -s "$mix" ]; then
	src=$dir/llama-1g5-q8_0.gguf
	echo "making $mix (from $src)" >&2
	[ -s "$src" ] || "$builddir/tests/helpers/gen_fixture" --arch llama --type Q8_0 --layers 32 \
		--dim 2048 --ff 5632 --heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 4 "$src"
	"$builddir/tests/helpers/requant" "$src" "$mix.tmp" --mix q4_k_m
	mv "$mix.tmp" "$mix"
fi
for m in "$ds" "$mix"; do
	echo "== $(basename "$m") ($(du -m "$m" | cut -f1) MB)"
	i=0
	while [ "$i" -lt "$runs" ]; do
		"$builddir/shoal" bench "$m" --threads 1 --prompt 32 --gen 32 --json
		i=$((i + 1))
	done
done
# The gemv table per weight type (issue 40, acceptance 4): 1-thread gemv
# against the streaming-read bound, by tests/bench/bench_kernels, on the
# AVX-512 and AVX2 tables (what SHOAL_ISA=avx512 / avx2 would pick) where
# this CPU has them; BENCH_TYPES overrides the list.
[ -x "$builddir/tests/bench/bench_kernels" ] || make -C "$builddir" tests/bench/bench_kernels >/dev/null
echo "== gemv per type, 1 thread"
BENCH_TYPES=${BENCH_TYPES:-Q4_K,Q5_K,Q3_K,Q2_K,Q5_1} BENCH_ISAS=${BENCH_ISAS:-avx2,avx512,neon} \
	"$builddir/tests/bench/bench_kernels" 128
