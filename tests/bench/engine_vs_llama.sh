#!/bin/bash
# tests/bench/engine_vs_llama.sh: the engine-speed table of issue 13, shoal
# beside the reference CPU engine when one is given.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin tests/bench/engine_vs_llama.sh [BUILDDIR]
#
# Models (generated once into $SHOAL_BENCH_DIR, default /tmp/shoal-bench):
# a 1.1B Llama-shaped Q8_0 (TinyLlama's shape), its Q4_K_M-mix version
# (tests/helpers/requant --mix q4_k_m) and a ~1.1 GB qwen3moe with 8
# experts, 2 used. For each model and thread count (THREADS, default
# "1 2"), ROUNDS (default 5) interleaved rounds of `shoal bench` (prefill
# 512, decode at context 0 and 1024) and, with LLAMA_BIN, `llama-bench`
# (-p 512 -n 32, and -n 32 after a 1024-token prompt with -d when the build
# has it; LLAMA_REPS repetitions inside each, default 1: the rounds give
# the median); the table gives medians and shoal/llama ratios. Without
# LLAMA_BIN only shoal's columns are filled. Not part of make check: it
# needs ~4 GB in /tmp and tens of minutes.
set -u
builddir=${1:-${SHOAL_BUILDDIR:-.}}
dir=${SHOAL_BENCH_DIR:-/tmp/shoal-bench}
rounds=${ROUNDS:-5}
threads=${THREADS:-1 2}
reps=${LLAMA_REPS:-1}
models=${MODELS:-q8 q4 moe} # a subset: MODELS="q8"
llama=${LLAMA_BIN:-}
mkdir -p "$dir"
for h in gen_fixture requant; do
	[ -x "$builddir/tests/helpers/$h" ] || make -C "$builddir" "tests/helpers/$h" >/dev/null || exit 1
done
q8=$dir/llama-1b-q8_0.gguf
[ -s "$q8" ] || "$builddir/tests/helpers/gen_fixture" --arch llama --type Q8_0 --layers 22 --dim 2048 \
	--ff 5632 --heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 1 "$q8" || exit 1
q4=$dir/llama-1b-q4_k_m.gguf
[ -s "$q4" ] || "$builddir/tests/helpers/requant" "$q8" "$q4" --mix q4_k_m >/dev/null || exit 1
moe=$dir/qwen3moe-1b-q8_0.gguf
[ -s "$moe" ] || "$builddir/tests/helpers/gen_fixture" --arch qwen3moe --type Q8_0 --layers 16 \
	--dim 1024 --ff 2816 --heads 16 --kv-heads 4 --head-dim 64 --vocab 32000 --experts 8 \
	--experts-used 2 --ff-exp 2816 --ctx 2048 --seed 2 "$moe" || exit 1

res=$(mktemp -d)
trap 'rm -rf "$res"' EXIT
jq_py() { python3 -c "$1" "${@:2}"; }
for r in $(seq "$rounds"); do
	for m in $(for k in $models; do eval echo "\$$k"; done); do
		for t in $threads; do
			tag=$(basename "$m" .gguf)-t$t
			"$builddir/shoal" bench "$m" --threads "$t" --prompt 512 --depth 0,1024 --gen 32 --json \
				>>"$res/$tag.shoal" 2>/dev/null
			if [ -n "$llama" ]; then
				"$llama/llama-bench" -m "$m" -t "$t" -r "$reps" -p 512 -n 32 -o json >"$res/$tag.l.$r" 2>/dev/null
				"$llama/llama-bench" -m "$m" -t "$t" -r "$reps" -p 0 -n 32 -d 1024 -o json >"$res/$tag.ld.$r" 2>/dev/null ||
					rm -f "$res/$tag.ld.$r" # an old build without -d
			fi
		done
	done
	echo "round $r of $rounds done" >&2
done
printf "%-22s %3s | %9s %9s %6s | %9s %9s %6s | %9s %9s %6s | %6s\n" model thr \
	"pp512 sh" "llama" ratio "tg sh" "llama" ratio "tg@1k sh" "llama" ratio "bound"
for m in $(for k in $models; do eval echo "\$$k"; done); do
	for t in $threads; do
		tag=$(basename "$m" .gguf)-t$t
		jq_py '
import json, statistics, sys, glob
res, tag = sys.argv[1], sys.argv[2]
sh = [json.loads(l) for l in open(f"{res}/{tag}.shoal") if l.strip()]
med = lambda xs: statistics.median(xs) if xs else float("nan")
pp = med([d["prefill"][0]["tok_s"] for d in sh])
tg = med([d["decode"][0]["tok_s"] for d in sh])
tg1k = med([d["decode"][1]["tok_s"] for d in sh])
frac = med([d["decode"][0]["fraction"] for d in sh])
def llama(pat, key):
    v = []
    for f in glob.glob(f"{res}/{tag}.{pat}.*"):
        try:
            for e in json.load(open(f)):
                if key(e):
                    v.append(e["avg_ts"])
        except Exception:
            pass
    return med(v)
lpp = llama("l", lambda e: e.get("n_prompt") == 512 and e.get("n_gen") == 0)
ltg = llama("l", lambda e: e.get("n_gen") == 32 and e.get("n_prompt") == 0)
ltg1k = llama("ld", lambda e: e.get("n_gen") == 32)
r = lambda a, b: a / b if b == b and b else float("nan")
name, thr = tag.rsplit("-t", 1)
print(f"{name:<22} {thr:>3} | {pp:9.1f} {lpp:9.1f} {r(pp, lpp):6.2f} | "
      f"{tg:9.2f} {ltg:9.2f} {r(tg, ltg):6.2f} | {tg1k:9.2f} {ltg1k:9.2f} {r(tg1k, ltg1k):6.2f} | {frac:6.2f}")
' "$res" "$tag"
	done
done
