#!/bin/sh
# tests/bench/models_bench.sh: decode speed against the memory-bandwidth
# bound, one thread, on generated ~1 GB models of the kinds the models
# issues add (issue 12, acceptance 5; issue 40, acceptance 4):
#   - a DeepSeek-V3-shaped deepseek2 at Q8_0 (MLA with q_lora, 1 dense lead
#     layer, 16 routed experts of which 2 are used, 1 shared expert,
#     sigmoid gating in 4 groups);
#   - a Llama-shaped model in the reference quantizer's Q4_K_M mix (Q4_K,
#     Q5_K, Q6_K tensors; tests/helpers/requant --mix q4_k_m);
#   - a gpt-oss-shaped model as gpt-oss ships: MXFP4 routed experts (32, 4
#     used, with their biases), everything else Q8_0, attention sinks and
#     a 128-token sliding window on every other layer (8 layers, dim 2048,
#     32 heads of 64 over 4 KV heads);
#   - a glm4moe-shaped model (GLM-4.5/4.6's layout: 1 dense lead layer, 32
#     routed experts of which 4 are used, 1 shared expert, sigmoid routing
#     with the selection bias, half-rotary heads of 128, q/k norms) in the
#     Q4_K_M mix, made from a Q8_0 file as the Llama one.
# Not part of make check: it needs ~6 GB in /tmp the first time (the
# fixtures stay in SHOAL_BENCH_DIR and are reused) and a few minutes.
#
#   tests/bench/models_bench.sh [BUILDDIR] [RUNS]
#
# Prints, per model and run, `shoal bench --json` (decode tokens/s, bytes
# per token, the measured bandwidth and the fraction of the bound). The
# figures are noisy on a shared machine: take the median. Then the gemv
# table per weight type (tests/bench/bench_kernels), 1 thread, against the
# read bound: bench_kernels' own lines, then one line per type with the
# fraction of the bound per table (avx512 is what SHOAL_ISA picks by
# default on a VNNI CPU, avx2 what SHOAL_ISA=avx2 picks) against the goal
# of 75%. MODELS=deepseek2,llama,gpt-oss,glm4moe (a comma list) keeps only
# those models; MODELS=none only the table.
set -eu
builddir=${1:-${SHOAL_BUILDDIR:-.}}
runs=${2:-3}
dir=${SHOAL_BENCH_DIR:-/tmp/shoal-bench}
mkdir -p "$dir"
for h in gen_fixture requant; do
	[ -x "$builddir/tests/helpers/$h" ] || make -C "$builddir" "tests/helpers/$h" >/dev/null
done
want() { case ",${MODELS:-deepseek2,llama,gpt-oss,glm4moe}," in *",$1,"*) return 0 ;; esac; return 1; }
# gen NAME ARGS...: make $dir/NAME.gguf with gen_fixture unless it is there.
gen() {
	f=$dir/$1.gguf
	shift
	if [ ! -s "$f" ]; then
		echo "making $f" >&2
		"$builddir/tests/helpers/gen_fixture" "$@" "$f.tmp"
		mv "$f.tmp" "$f"
	fi
}
# mix OUT SRC: OUT in the Q4_K_M mix from SRC, unless OUT is there.
mix() {
	if [ ! -s "$dir/$1.gguf" ]; then
		echo "making $dir/$1.gguf (from $dir/$2.gguf)" >&2
		"$builddir/tests/helpers/requant" "$dir/$2.gguf" "$dir/$1.gguf.tmp" --mix q4_k_m >/dev/null
		mv "$dir/$1.gguf.tmp" "$dir/$1.gguf"
	fi
}
models=""
if want deepseek2; then
	gen deepseek2-1g-q8_0 --arch deepseek2 --type Q8_0 --layers 6 --dim 2048 \
		--ff 5632 --heads 16 --head-dim 192 --vocab 32000 --kv-lora 512 --rope-dim 64 \
		--v-head-dim 128 --q-lora 768 --dense-lead 1 --experts 16 --experts-used 2 \
		--ff-exp 1408 --shared 1 --groups 4 --groups-used 2 --sigmoid --ctx 2048 --seed 3
	models="$models deepseek2-1g-q8_0"
fi
if want llama; then
	[ -s "$dir/llama-1g-q4_k_m.gguf" ] ||
		gen llama-1g5-q8_0 --arch llama --type Q8_0 --layers 32 --dim 2048 --ff 5632 \
			--heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 4
	mix llama-1g-q4_k_m llama-1g5-q8_0
	models="$models llama-1g-q4_k_m"
fi
if want gpt-oss; then
	# 8 layers of 32 experts x 3 x 2048 x 1024 MXFP4 (~107 MB a layer),
	# attention and the 32000-token embedding and head Q8_0: ~1.07 GB
	gen gpt-oss-1g-mxfp4 --arch gpt-oss --type Q8_0 --exp-type MXFP4 --layers 8 \
		--dim 2048 --heads 32 --kv-heads 4 --head-dim 64 --vocab 32000 --experts 32 \
		--experts-used 4 --ff-exp 1024 --window 128 --ctx 2048 --seed 5
	models="$models gpt-oss-1g-mxfp4"
fi
if want glm4moe; then
	# 1 dense layer (FFN 5632) and 7 MoE layers of 32 experts x 3 x 2048 x
	# 1024 and a shared one, heads 16 x 128 over 4 KV heads: ~1.7 G
	# parameters, ~1.0 GB in the mix (1.8 GB at Q8_0 first)
	[ -s "$dir/glm4moe-1g-q4_k_m.gguf" ] ||
		gen glm4moe-1g8-q8_0 --arch glm4moe --type Q8_0 --layers 8 --dim 2048 --ff 5632 \
			--heads 16 --kv-heads 4 --head-dim 128 --vocab 32000 --dense-lead 1 \
			--experts 32 --experts-used 4 --ff-exp 1024 --shared 1 --sigmoid --ctx 2048 \
			--seed 6
	mix glm4moe-1g-q4_k_m glm4moe-1g8-q8_0
	models="$models glm4moe-1g-q4_k_m"
fi
for name in $models; do
	m=$dir/$name.gguf
	echo "== $name.gguf ($(du -m "$m" | cut -f1) MB)"
	i=0
	while [ "$i" -lt "$runs" ]; do
		"$builddir/shoal" bench "$m" --threads 1 --prompt 32 --gen 32 --json
		i=$((i + 1))
	done
done
# The gemv table per weight type (issue 40, acceptance 4): 1-thread gemv
# against the streaming-read bound, by tests/bench/bench_kernels, on the
# AVX-512 and AVX2 tables (what SHOAL_ISA=avx512 / avx2 would pick) where
# this CPU has them; BENCH_TYPES and BENCH_ISAS override the lists,
# BENCH_MB the matrices' size (MiB, far above the caches).
[ -x "$builddir/tests/bench/bench_kernels" ] || make -C "$builddir" tests/bench/bench_kernels >/dev/null
echo "== gemv per type, 1 thread (load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
out=$(BENCH_TYPES=${BENCH_TYPES:-Q4_K,Q5_K,Q3_K,Q2_K,Q5_1,IQ4_NL,IQ4_XS,MXFP4} \
	BENCH_ISAS=${BENCH_ISAS:-avx2,avx512,neon} \
	"$builddir/tests/bench/bench_kernels" "${BENCH_MB:-128}")
printf '%s\n' "$out"
# The table: a row per type, a column per table, the fraction of the
# bound (bench_kernels' "(NN.N% of bound" field); "<" marks one under 75%.
printf '%s\n' "$out" | awk '
	/ gemv .*% of bound/ {
		isa = $1; type = $2; pct = $0
		sub(/.*\(/, "", pct); sub(/%.*/, "", pct)
		if (!(type in seen)) { seen[type] = 1; order[++nt] = type }
		if (!(isa in iseen)) { iseen[isa] = 1; isas[++ni] = isa }
		f[type, isa] = pct
	}
	END {
		if (!nt) exit
		line = sprintf("%-7s", "type")
		for (i = 1; i <= ni; i++) line = line sprintf(" %10s", isas[i])
		print line "   (% of the 1-thread read bound; goal 75)"
		for (t = 1; t <= nt; t++) {
			line = sprintf("%-7s", order[t])
			for (i = 1; i <= ni; i++) {
				v = f[order[t], isas[i]]
				line = line sprintf(" %9s%s", v == "" ? "-" : v, v != "" && v + 0 < 75 ? "<" : " ")
			}
			print line
		}
	}'
