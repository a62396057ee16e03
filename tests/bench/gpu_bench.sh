#!/bin/sh
# tests/bench/gpu_bench.sh: decode and prefill speed of each compute backend
# and device this build and machine have, on 1.1B-parameter Llama-shaped
# fixtures (22 layers, dim 2048, FFN 5632, 32 heads / 4 KV heads, vocab
# 32000) in Q8_0 (~1.17 GB) and Q4_K (~0.66 GB), with decode as a fraction
# of the device's own measured read bandwidth (shoal bench's probe: the CPU's
# streaming read, a GPU's copy shader) and prefill of 512 tokens against the
# CPU backend on the same machine. An MoE row (the model column "moe"): a
# Qwen3-MoE-shaped fixture (qwen3moe, 8 layers, dim 2048, 32 / 4 heads of
# 128, 64 experts of FFN 768, 8 used per token; ~1.4 GB in Q4_K), whose
# decode reads only the used experts (shoal bench's bound counts their
# bytes): the routed experts run as one backend op per layer (moe_ffn).
# Not part of make check; speed on Mesa's software Vulkan device (lavapipe)
# means nothing.
#
#   tests/bench/gpu_bench.sh [BUILDDIR]
#
# Environment: BACKENDS (default "cpu vulkan"), THREADS (CPU threads,
# default: all cores), GEN (decoded tokens, default 64), PROMPT (default
# 512), TYPES (default "Q8_0 Q4_K"; empty: no dense rows), MOE_TYPES (the
# MoE fixture's types, default "Q4_K"; empty: no MoE row), SHOAL_BENCH_DIR
# (fixtures, default /tmp/shoal-bench). A backend this build or machine lacks is reported and
# skipped.
set -eu
builddir=${1:-${SHOAL_BUILDDIR:-.}}
backends=${BACKENDS:-cpu vulkan}
threads=${THREADS:-$(nproc 2>/dev/null || echo 1)}
gen=${GEN:-64}
prompt=${PROMPT:-512}
types=${TYPES-Q8_0 Q4_K}
moe_types=${MOE_TYPES-Q4_K}
dir=${SHOAL_BENCH_DIR:-/tmp/shoal-bench}
mkdir -p "$dir"

field() { # field NAME JSON: a number or string field of shoal bench --json
	printf '%s' "$2" | sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" | head -n 1
}

[ -x "$builddir/tests/helpers/gen_fixture" ] || make -C "$builddir" tests/helpers/gen_fixture >/dev/null
bench_file() { # bench_file FILE MODEL TYPE: one row per backend
	f=$1
	cpu_pp=
	for b in $backends; do
		if ! out=$("$builddir/shoal" bench "$f" --backend "$b" --threads "$threads" \
			--prompt "$prompt" --gen "$gen" --json 2>"$dir/err.txt"); then
			printf '%-8s %-6s %-6s skipped: %s\n' "$b" "$2" "$3" "$(tail -n 1 "$dir/err.txt")"
			continue
		fi
		pp=$(field prefill_tok_s "$out")
		[ "$b" = cpu ] && cpu_pp=$pp
		vs=-
		[ -n "$cpu_pp" ] && vs=$(awk -v a="$pp" -v c="$cpu_pp" 'BEGIN { printf "%.2fx", a / c }')
		printf '%-8s %-6s %-6s %-34.34s %10s %9s %9s %8s %12s %8s\n' "$b" "$2" "$3" \
			"$(field device "$out")" "$(field decode_tok_s "$out")" \
			"$(field decode_bound_tok_s "$out")" "$(field mem_gbps "$out")" \
			"$(field decode_fraction "$out")" "$pp" "$vs"
	done
}

printf '%-8s %-6s %-6s %-34s %10s %9s %9s %8s %12s %8s\n' backend model type device decode_tok_s \
	bound_tok_s mem_gbps fraction prefill_tok_s vs_cpu
for t in $types; do
	f="$dir/llama-1b-$(printf '%s' "$t" | tr 'A-Z' 'a-z').gguf"
	if [ ! -s "$f" ]; then
		echo "making $f" >&2
		"$builddir/tests/helpers/gen_fixture" --arch llama --type "$t" --layers 22 --dim 2048 \
			--ff 5632 --heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 1 "$f.tmp"
		mv "$f.tmp" "$f"
	fi
	bench_file "$f" dense "$t"
done
for t in $moe_types; do
	f="$dir/qwen3moe-64x-$(printf '%s' "$t" | tr 'A-Z' 'a-z').gguf"
	if [ ! -s "$f" ]; then
		echo "making $f" >&2
		"$builddir/tests/helpers/gen_fixture" --arch qwen3moe --type "$t" --layers 8 \
			--dim 2048 --ff 768 --heads 32 --kv-heads 4 --head-dim 128 --experts 64 \
			--experts-used 8 --ff-exp 768 --vocab 32000 --ctx 2048 --seed 1 "$f.tmp"
		mv "$f.tmp" "$f"
	fi
	bench_file "$f" moe "$t"
done
