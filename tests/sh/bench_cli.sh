#!/bin/bash
# tests/sh/bench_cli.sh: `shoal bench` runs and reports what it says: one
# prefill entry per --prompt size and one decode entry per --depth, token
# time median inside the p10-p90 spread, a bound above zero, bytes per
# token equal to the model's weights as the header comment counts them,
# the peak RSS at least the mapped weights' size; bad lists are refused.
# (Speeds are benchmarks, never asserted.)
set -u
. "$(dirname "$0")/lib.sh"
M=$DATA/models/austen-dense-q8_0.gguf
"$B" bench "$M" --prompt 16,48 --depth 0,40 --gen 8 --json >"$T/b.json" 2>"$T/b.err" ||
	fail "shoal bench: $(cat "$T/b.err")"
python3 - "$T/b.json" "$M" <<'PY' || fail "bench JSON: $(cat "$T/b.json")"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert [p["tokens"] for p in d["prefill"]] == [16, 48], d["prefill"]
assert [r["context"] for r in d["decode"]] == [0, 40], d["decode"]
for p in d["prefill"]:
    assert p["tok_s"] > 0 and p["gflop_s"] > 0, p
for r in d["decode"]:
    assert r["tok_s"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"], r
    assert 0 < r["fraction"] and r["best_tok_s"] >= r["tok_s"] * 0.5, r
assert d["decode_tok_s"] == d["decode"][0]["tok_s"] and d["prefill_tok_s"] == d["prefill"][0]["tok_s"]
size = os.path.getsize(sys.argv[2])
# every weight but the embedding (plus one row of it): within the file's size
assert 0.8 * size < d["bytes_per_token"] <= size, (d["bytes_per_token"], size)
assert d["peak_rss_bytes"] >= d["bytes_per_token"], d["peak_rss_bytes"]
assert d["decode_bound_tok_s"] > 0 and d["mem_gbps"] > 0
PY
for bad in "--prompt 0" "--prompt 1,,2" "--depth x" "--prompt 1,2,3,4,5,6,7,8,9"; do
	# shellcheck disable=SC2086
	"$B" bench "$M" $bad >/dev/null 2>"$T/e" && fail "bench $bad was accepted"
	grep -q "needs numbers" "$T/e" || fail "bench $bad: $(cat "$T/e")"
done
echo "bench: 2 prefill sizes, 2 decode depths, token-time spread, bound, peak RSS; 4 bad lists refused"
echo PASS
