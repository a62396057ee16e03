#!/bin/sh
# tests/bench/plan_bench.sh: time `shoal plan` on a 64-peer cluster with the
# DeepSeek-V3 Q4_K_M spec (the scheduler's budget: under 50 ms per plan).
# Not part of make check. Usage: tests/bench/plan_bench.sh [SHOAL_BIN] [N]
set -e
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${1:-${SHOAL_BIN:-./shoal}}
n=${2:-20}
tmp=${TMPDIR:-/tmp}/shoal-plan-bench.$$
trap 'rm -f "$tmp"' EXIT
# 64 peers: a mix of 16 to 192 GB machines, 60 to 800 GB/s, on a 10 GbE
# switch (100 us, 10 Gbit/s by default) with Thunderbolt pairs (20 us, 80
# Gbit/s) between peers 2k and 2k+1.
awk 'BEGIN {
	split("16 32 64 128 192 96 48 256", mem, " ");
	split("60 120 273 546 800 400 100 819", bw, " ");
	printf "{ \"default_link\": { \"latency_us\": 100, \"bandwidth_gbit\": 10 },\n  \"peers\": [\n";
	for (i = 0; i < 64; i++) {
		k = i % 8 + 1;
		printf "    { \"id\": \"%032x\", \"name\": \"p%02d\", \"memory\": \"%sG\", \"bandwidth_gbs\": %s, \"compute_gflops\": %d }%s\n",
			i + 4096, i, mem[k], bw[(i * 3) % 8 + 1], 500 + 400 * k, i < 63 ? "," : "";
	}
	printf "  ],\n  \"links\": [\n";
	for (i = 0; i < 64; i += 2)
		printf "    { \"a\": \"p%02d\", \"b\": \"p%02d\", \"latency_us\": 20, \"bandwidth_gbit\": 80 }%s\n",
			i, i + 1, i < 62 ? "," : "";
	printf "  ]\n}\n";
}' > "$tmp"
"$bin" plan --view "$tmp" --model "$src/models/specs/deepseek-v3-q4_k_m.json" --bench "$n"
"$bin" plan --view "$tmp" --model "$src/models/specs/deepseek-v3-q4_k_m.json" | tail -3
