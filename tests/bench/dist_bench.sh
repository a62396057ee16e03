#!/bin/bash
# tests/bench/dist_bench.sh: decode tokens/s of a cluster of 1, 2 and 3
# `shoal node` peers on 127.0.0.1 (1 thread each) against one local
# process, and the latency each pipeline hop adds. A benchmark, not a test:
# not part of make check; it fails only when it cannot set up a cluster.
#
#   tests/bench/dist_bench.sh [BUILDDIR]        (from the source tree)
#
# Models: the trained austen model (tests/data, 14.5 MB, 6 layers, tied
# head) and the 1.17 GB Llama-shaped Q8_0 fixture of tests/bench/
# decode_bound.sh (made with tests/helpers/gen_fixture if missing; ~1.2 GB in /tmp).
# Each cluster is exactly K peers whose --mem-limit forces K stages (the
# plan's stage count is checked through `shoal status --json`); the three
# clusters (own keys and names) are up at once, idle but for the runs.
#
# Decode time without prefill or setup: the same greedy prompt is run for
# N1 and N2 tokens, RUNS rounds of every config in turn (so that load from
# elsewhere on the machine hits all alike); us/token = (t(N2) - t(N1)) /
# (N2 - N1), the median over the rounds. Added latency per hop = (us/token
# with K stages - us/token with 1 stage) / (K - 1). Goals (issue
# "Distributed inference"): <= 50 us per hop; on the fixture, 2 and 3 peers
# <= 5% below one peer. Takes about 4 minutes on 2 cores.
# Env: SHOAL_DATA, SHOAL_BENCH_FIXTURE, RUNS (austen, default 10),
# FIX_RUNS (fixture, default 5), SPIN (every peer's --spin-us; default
# the node's), LLAMA_BIN (optional: llama.cpp's RPC backend with 2 servers
# on the fixture, for comparison), HOP_ONLY (set: the trained model only).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
FIX=${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-q8_0.gguf}
RUNS=${RUNS:-10}
FIX_RUNS=${FIX_RUNS:-5}
PROMPT="It is a truth universally acknowledged"
CTX=256 # KV per session, on every peer and the local run alike

[ -x "$B" ] || fail "$B not found (give the build directory)"
[ -f "$DENSE" ] || fail "$DENSE not found (set SHOAL_DATA)"
bench_fixture "$FIX"
for k in 1 2 3; do "$B" key new "$T/k$k" >/dev/null || fail "shoal key new"; done

# ---- clusters

peer() { # peer NAME K MODEL LIMIT [--peer EP]: a peer of cluster K (key kK)
	local n=$1 k=$2 m=$3 lim=$4
	shift 4
	KEY=$T/k$k start "$n" "$m" --cluster "bench$k" --mem-limit "$lim" --ctx $CTX \
		${SPIN:+--spin-us "$SPIN"} "$@"
}
plan_ok() { # plan_ok K: every peer of cluster K sees the same servable K-stage plan
	local k=$1 i names=()
	for i in $(seq "$k"); do names+=("c${k}p$i"); done
	KEY=$T/k$k servable_all "$k" "${names[@]}"
}

# clusters MODEL LIMIT1 LIMIT2 LIMIT3: clusters of 1, 2 and 3 peers, each
# with its own key and name, all up at once; EP0[K] is the peer of stage 0
# of cluster K (it owns the session: no extra hop to an outside owner)
declare -A EP0
clusters() {
	local m=$1 k i seed t0 deadline lim
	shift
	t0=$(now_ms)
	for k in 1 2 3; do
		lim=${!k}
		peer "c${k}p1" "$k" "$m" "$lim"
		seed=$(ep "c${k}p1")
		for i in $(seq 2 "$k"); do peer "c${k}p$i" "$k" "$m" "$lim" --peer "$seed"; done
	done
	deadline=$(($(now_ms) + 180000))
	for k in 1 2 3; do
		until plan_ok "$k"; do
			[ "$(now_ms)" -lt $deadline ] ||
				fail "$k peers at --mem-limit ${!k}: no servable $k-stage plan in 180 s" \
					"(stages $("$PC" "$T/st-c${k}p1.json" stages), $("$PC" "$T/st-c${k}p1.json" servable))"
			sleep 0.2
		done
		EP0[$k]=$(ep "$("$PC" "$T/st-c${k}p1.json" stage 0)")
		echo "  ($k peer(s) at --mem-limit ${!k}: $k-stage plan servable $(($(now_ms) - t0)) ms after start)"
	done
}

# ---- timing

# gen CONFIG N OUT: one greedy run of N tokens; CONFIG 0 is the local
# process, K the cluster of K peers. Prints the wall time in us.
gen() {
	local s e
	s=$(date +%s%N)
	if [ "$1" = 0 ]; then
		"$B" run "$MODEL" -p "$PROMPT" --temp 0 --ids --threads 1 --ctx $CTX -n "$2"
	else
		"$B" run --peer "${EP0[$1]}" --key "$T/k$1" -p "$PROMPT" --temp 0 --ids -n "$2"
	fi >"$3" 2>>"$T/run.log" || return 1
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}

# measure N1 N2 RUNS: RUNS rounds, each timing every config for N1 then N2
# tokens in turn (so that load from elsewhere hits all configs alike); sets
# US[CONFIG] = us/token, the median over rounds of t(N2) - t(N1) (a median:
# on a loaded machine one quiet or one busy window must not decide)
declare -A US RANGE
measure() {
	local n1=$1 n2=$2 runs=$3 r c t1 t2 c1 c2
	for c in 0 1 2 3; do : >"$T/d-$c"; done
	for r in $(seq "$runs"); do
		for c in 0 1 2 3; do
			t1=$(gen "$c" "$n1" "$T/ids1-$c") || fail "config $c: run -n $n1 failed: $(tail -n 2 "$T/run.log")"
			t2=$(gen "$c" "$n2" "$T/ids2-$c") || fail "config $c: run -n $n2 failed: $(tail -n 2 "$T/run.log")"
			echo "$((t2 - t1))" >>"$T/d-$c"
		done
	done
	for c in 0 1 2 3; do
		c1=$(wc -w <"$T/ids1-$c") # a run may stop early at EOS: count what came
		c2=$(wc -w <"$T/ids2-$c")
		[ "$c2" -gt "$c1" ] || fail "config $c: $c2 tokens for -n $n2, $c1 for -n $n1"
		[ "$c" = 0 ] || cmp -s "$T/ids2-$c" "$T/ids2-0" ||
			echo "  note: $c peer(s): greedy ids differ from the local run"
		US[$c]=$(sort -n "$T/d-$c" | awk -v n="$((c2 - c1))" '{ d[NR] = $1 }
			END { m = NR % 2 ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2; printf "%.1f", m / n }')
		RANGE[$c]=$(sort -n "$T/d-$c" | awk -v n="$((c2 - c1))" '{ d[NR] = $1 }
			END { printf "%.0f..%.0f", d[1] / n, d[NR] / n }')
		printf '{"model":"%s","peers":%d,"stages":%d,"n1":%d,"n2":%d,"rounds_t2_minus_t1_us":[%s],"us_per_token":%s}\n' \
			"$MODEL_NAME" "$c" "$c" "$c1" "$c2" "$(paste -sd, "$T/d-$c")" "${US[$c]}" >>"$T/raw"
	done
}

# breakdown: from each cluster's `shoal status --json` (plan.data), the
# owner's mean decode step (a token's send to stage 0 to its result) and
# the sum of the stages' mean engine runs: their difference is what the
# links and hand-offs add inside the pipeline, without the client's side
breakdown() {
	local k i files
	for k in 1 2 3; do
		files=()
		for i in $(seq "$k"); do
			KEY=$T/k$k status "c${k}p$i" || continue
			files+=("$T/st-c${k}p$i.json")
		done
		python3 - "$k" "${files[@]}" <<'PY'
import json, sys
k, step, run = int(sys.argv[1]), None, 0.0
for f in sys.argv[2:]:
    d = (json.load(open(f)).get("plan") or {}).get("data") or {}
    st, ow = d.get("stage") or {}, d.get("owner") or {}
    if st.get("runs"):
        run += st["run_ns"] / st["runs"] / 1e3
    if ow.get("steps"):
        step = ow["step_ns"] / ow["steps"] / 1e3
if step is not None:
    print("  %d stage(s): owner step %.1f us, stages' engine runs %.1f us, links and hand-offs %.1f us"
          % (k, step, run, step - run))
PY
	done
}

# bench NAME MODEL N1 N2 RUNS LIMIT1 LIMIT2 LIMIT3
bench() {
	MODEL_NAME=$1 MODEL=$2
	local n1=$3 n2=$4 runs=$5 c h2 h3 small=1
	shift 5
	US=()
	echo
	echo "== $MODEL_NAME ($(stat -c %s "$MODEL") bytes), decode tokens $n1 -> $n2, median of $runs rounds, --ctx $CTX"
	clusters "$MODEL" "$@"
	echo "  load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	measure "$n1" "$n2" "$runs"
	echo "  load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
	# at 20 ms a token or more, run-to-run noise (~1%) exceeds 100 us: the
	# hop goal is judged on the small model only; the breakdown is shown
	# there only too (the stages' runs include the prompts' prefills, one a
	# generation: a small bias at 232 tokens a run, not at 34)
	awk -v u="${US[1]}" 'BEGIN { exit !(u > 20000) }' && small=0
	[ $small = 0 ] || breakdown
	stop_all
	rm -rf "$T"/c[0-9]p[0-9]*
	echo "  config    stages   us/token     tok/s  x local   x 1peer  us/token range over rounds"
	for c in 0 1 2 3; do
		awk -v c="$c" -v us="${US[$c]}" -v ref="${US[0]}" -v one="${US[1]}" -v rg="${RANGE[$c]}" 'BEGIN {
			printf "  %-9s %6s %10.1f %9.2f %9.3f %9.3f  %s\n", c == 0 ? "local" : c == 1 ? "1 peer" : c " peers",
			       c == 0 ? "-" : c, us, 1e6 / us, ref / us, one / us, rg }'
	done
	h2=$(awk -v a="${US[2]}" -v b="${US[1]}" 'BEGIN { printf "%.1f", a - b }')
	h3=$(awk -v a="${US[3]}" -v b="${US[1]}" 'BEGIN { printf "%.1f", (a - b) / 2 }')
	if [ $small = 0 ]; then
		echo "  added latency per hop: 2 stages $h2 us, 3 stages $h3 us" \
			"(below the timing noise at ${US[1]} us/token: hop goal judged on the small model)"
	else
		echo "  added latency per hop: 2 stages $h2 us, 3 stages $h3 us" \
			"(goal <= 50 us: $(awk -v a="$h2" -v b="$h3" 'BEGIN { print (a <= 50 && b <= 50) ? "met" : "NOT met" }'))"
	fi
	echo "  1 peer vs local process: $(awk -v a="${US[1]}" -v b="${US[0]}" 'BEGIN { printf "%+.1f", a - b }') us/token (client round trip)"
	printf '{"model":"%s","hop_us_2":%s,"hop_us_3":%s}\n' "$MODEL_NAME" "$h2" "$h3" >>"$T/raw"
}

# throughput_goal: 2 and 3 peers at most 5% below one peer (the 1-peer
# cluster; the local process is shown too)
throughput_goal() {
	local k ok=met r1 rl
	for k in 2 3; do
		r1=$(awk -v a="${US[1]}" -v b="${US[$k]}" 'BEGIN { printf "%.1f", 100 * a / b }')
		rl=$(awk -v a="${US[0]}" -v b="${US[$k]}" 'BEGIN { printf "%.1f", 100 * a / b }')
		echo "  $k peers: throughput $r1% of the 1-peer cluster, $rl% of the local process"
		awk -v r="$r1" 'BEGIN { exit !(r < 95) }' && ok="NOT met"
	done
	echo "  goal (at most 5% below one peer): $ok"
}

NCPU=$(nproc)
echo "dist_bench: $NCPU CPU core(s); every peer and the local run use 1 thread"
[ "$NCPU" -lt 3 ] && echo "note: 3 peers (+ the client) share $NCPU cores here, so the 3-peer figures include CPU contention"

# austen: 14.5 MB, embedding 8.6 MiB counted on both the embedding and the
# (tied) head peer, ~1 MB a layer. 64M holds it all (1 stage); 13M holds the
# embedding and 3 layers but not the whole model (2 stages); 11M holds the
# embedding and 2 layers (3 stages, as in tests/sh/dist_loopback.sh).
bench austen-dense-q8_0 "$DENSE" 8 232 "$RUNS" 64M 13M 11M
# fixture: 1.17 GB = embedding 70 MB + head 70 MB + 22 layers x 46.8 MB.
# 1.3G holds it all; 650M holds 11 layers + embedding (585 MB) but not the
# model; 450M holds 8 layers + embedding (444 MB), and 2 x 450M < 1.17 GB.
# (HOP_ONLY: the hop alone, no fixture, no llama.cpp)
if [ -z "${HOP_ONLY:-}" ]; then
	bench llama-1b-q8_0-fixture "$FIX" 2 34 "$FIX_RUNS" 1300M 650M 450M
	throughput_goal
fi

# llama_rpc: with LLAMA_BIN (a llama.cpp build's bin/ with ggml-rpc-server
# and llama-bench), the reference's RPC backend on the same fixture: 2
# servers on 127.0.0.1 with 1 thread each, every layer offloaded to them
# (-ngl 99), decode of 32 tokens, FIX_RUNS repetitions; the 2- and 3-peer
# clusters' tokens/s against it (issue 13's goal: >= 1.0x).
llama_rpc() {
	local l=$LLAMA_BIN p1 p2 pids=() ts
	[ -x "$l/ggml-rpc-server" ] && [ -x "$l/llama-bench" ] || {
		echo "  LLAMA_BIN=$l has no ggml-rpc-server and llama-bench: skipped"
		return 0
	}
	p1=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	p2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	for p in "$p1" "$p2"; do
		"$l/ggml-rpc-server" -H 127.0.0.1 -p "$p" -t 1 >>"$T/rpc.log" 2>&1 &
		pids+=($!)
	done
	sleep 2
	ts=$("$l/llama-bench" -m "$FIX" --rpc "127.0.0.1:$p1,127.0.0.1:$p2" -ngl 99 -t 1 -p 0 -n 32 \
		-r "$FIX_RUNS" -o json 2>>"$T/rpc.log" | python3 -c '
import json, sys
print(json.load(sys.stdin)[0]["avg_ts"])' 2>/dev/null)
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	[ -n "$ts" ] || {
		echo "  llama.cpp RPC run failed: $(tail -n 3 "$T/rpc.log")"
		return 0
	}
	echo
	echo "== llama.cpp RPC, 2 servers x 1 thread, on the fixture: $ts tok/s"
	for k in 2 3; do
		awk -v k="$k" -v us="${US[$k]}" -v ts="$ts" 'BEGIN {
			printf "  %d peers: %.2f tok/s, %.3fx llama.cpp RPC (goal >= 1.0)\n", k, 1e6 / us, 1e6 / us / ts }'
	done
	printf '{"model":"llama-1b-q8_0-fixture","llama_rpc_2_servers_tok_s":%s}\n' "$ts" >>"$T/raw"
}
[ -z "${HOP_ONLY:-}" ] && [ -n "${LLAMA_BIN:-}" ] && llama_rpc
echo
echo "== raw"
cat "$T/raw"
