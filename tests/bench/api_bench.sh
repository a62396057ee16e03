#!/bin/bash
# tests/bench/api_bench.sh: aggregate tokens/s of 1, 4 and 8 concurrent
# clients of the HTTP API (issue 10), through 1 peer and through 3 peers,
# on the trained dense model (and on a larger model file given as
# SHOAL_BENCH_FIXTURE, through 1 peer). A benchmark, not a test: not part
# of make check; it fails only when it cannot set up a cluster or a
# request fails.
#
#   tests/bench/api_bench.sh [BUILDDIR]        (from the source tree)
#
# Each round: N clients at once, each a greedy streamed /v1/completions of
# 128 tokens with a different prompt (server-sent events, the usage chunk
# asked for with stream_options.include_usage; STREAM=0: one JSON reply
# each); aggregate = the tokens of all (from usage) / the wall time of the
# round. ROUNDS rounds (default 3), the
# median printed. FIXTURE_ONLY=1 runs only the SHOAL_BENCH_FIXTURE part,
# THREADS=N gives its peer N compute threads (default 1, as every peer here). Goal: 8 clients >= 4x the aggregate of 1 client through
# the same cluster (a batch of 8 rows reads the weights once).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
ROUNDS=${ROUNDS:-3}
NTOK=128
STREAM_ARGS=', "stream": true, "stream_options": {"include_usage": true}'
[ "${STREAM:-1}" = 0 ] && STREAM_ARGS=""
command -v curl >/dev/null || fail "curl is needed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
PROMPTS=("It is a truth" "Emma Woodhouse, handsome" "The family of Dashwood" "Mr. Darcy"
	"Catherine Morland" "Sir Walter Elliot" "Fanny Price" "Anne was")

# round URL N: aggregate tokens/s of N concurrent clients
round() {
	local u=$1 n=$2 i t0 t1 tok=0 pids=()
	t0=$(date +%s%N)
	for i in $(seq 0 $((n - 1))); do
		curl -s -N --max-time 300 "$u/v1/completions" -d "{\"prompt\": \"${PROMPTS[$((i % 8))]}\", \"max_tokens\": $NTOK, \"temperature\": 0$STREAM_ARGS}" \
			>"$T/out-$i" &
		pids+=($!)
	done
	wait "${pids[@]}"
	t1=$(date +%s%N)
	for i in $(seq 0 $((n - 1))); do
		k=$(python3 -c '
import json, sys
t = open(sys.argv[1]).read()
if t.startswith("data:"):  # the last chunk before [DONE] carries usage
	ev = [json.loads(l[5:]) for l in t.splitlines() if l.startswith("data:") and l[5:].strip() != "[DONE]"]
	print([e for e in ev if e.get("usage")][-1]["usage"]["completion_tokens"])
else:
	print(json.loads(t)["usage"]["completion_tokens"])' "$T/out-$i" 2>/dev/null) ||
			fail "a request failed: $(head -c 200 "$T/out-$i")"
		tok=$((tok + k))
	done
	python3 -c "print(f'{$tok / (($t1 - $t0) / 1e9):.1f}')"
}
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }

bench() { # bench LABEL URL
	local label=$1 u=$2 n r v one=""
	for n in 1 4 8; do
		v=()
		for r in $(seq "$ROUNDS"); do v+=("$(round "$u" $n)"); done
		m=$(median "${v[@]}")
		[ $n = 1 ] && one=$m
		echo "$label: $n client(s): $m tokens/s aggregate (rounds: ${v[*]})$([ $n != 1 ] && python3 -c "print(f'; {$m / $one:.2f}x one client')")"
	done
}

if [ -z "${FIXTURE_ONLY:-}" ]; then
start one "$DENSE" --ctx 512 --sessions 8 --api 127.0.0.1:0
wait_for 30 servable_all 1 one || fail "no plan on one peer"
bench "austen, 1 peer" "http://127.0.0.1:$(api_port one)"
stop_all

start p1 "$DENSE" --mem-limit 14M --ctx 256 --sessions 8 --api 127.0.0.1:0
SEED=$(ep p1)
for n in p2 p3; do start $n "$DENSE" --mem-limit 14M --ctx 256 --sessions 8 --peer "$SEED"; done
wait_for 30 servable_all "" p1 p2 p3 || fail "no plan on 3 peers"
echo "3 peers: $("$PC" "$T/st-p1.json" stages) stage(s)"
bench "austen, 3 peers" "http://127.0.0.1:$(api_port p1)"
stop_all
fi

if [ -n "${SHOAL_BENCH_FIXTURE:-}" ] && [ -f "$SHOAL_BENCH_FIXTURE" ]; then
	start f1 "$SHOAL_BENCH_FIXTURE" --ctx 512 --sessions 8 --api 127.0.0.1:0 --threads "${THREADS:-1}"
	wait_for 120 servable_all 1 f1 || fail "no plan for the fixture"
	bench "$(basename "$SHOAL_BENCH_FIXTURE"), 1 peer" "http://127.0.0.1:$(api_port f1)"
fi
