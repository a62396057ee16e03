#!/bin/sh
# tests/bench/decode_bound.sh: decode speed against the memory-bandwidth
# bound on a 1.1B-parameter Llama-shaped Q8_0 fixture (22 layers, dim 2048,
# FFN 5632, 32 heads / 4 KV heads, vocab 32000: ~1.17 GB of random weights).
# Not part of make check: it needs ~1.2 GB in /tmp and a minute or two.
#
#   tests/bench/decode_bound.sh [BUILDDIR] [THREADS] [RUNS]
#
# Makes the fixture with tests/helpers/gen_fixture if it is missing, then prints
# `shoal bench --json` RUNS times (default 3; take the best or the median:
# the figures are noisy on a shared machine).
set -eu
builddir=${1:-${SHOAL_BUILDDIR:-.}}
threads=${2:-1}
runs=${3:-3}
fixture=${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-q8_0.gguf}
if [ ! -s "$fixture" ]; then
	mkdir -p "$(dirname "$fixture")"
	[ -x "$builddir/tests/helpers/gen_fixture" ] || make -C "$builddir" tests/helpers/gen_fixture >/dev/null
	echo "making $fixture" >&2
	"$builddir/tests/helpers/gen_fixture" --arch llama --type Q8_0 --layers 22 --dim 2048 --ff 5632 \
		--heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 1 "$fixture.tmp"
	mv "$fixture.tmp" "$fixture"
fi
i=0
while [ "$i" -lt "$runs" ]; do
	"$builddir/shoal" bench "$fixture" --threads "$threads" --prompt 32 --gen 32 --json
	i=$((i + 1))
done
