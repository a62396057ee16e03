#!/bin/bash
# tests/bench/prefix_bench.sh: time to first token of a growing conversation's
# turns with and without the stages' prefix cache (issue 37), and decode
# speed both ways. A benchmark, not a test: not part of make check; it
# fails only when it cannot set up the cluster.
#
#   tests/bench/prefix_bench.sh [BUILDDIR]        (from the source tree)
#
# Two stage peers (--mem-limit forces 2 stages; the plan is checked) with
# the cache on (the default) and the HTTP API on the first; a third peer
# that holds no stage (--mem-limit 1M) runs with --prefix-cache off and
# its own API: its requests send no prefix hashes, so they prefill their
# whole prompt (the uncached figure) on the same stages, at the same time
# of the machine's load. Turn k's prompt is the first FIRST + (k - 1) *
# CHUNK words of persuasion.txt: turn k + 1 starts with turn k's prompt, as
# a chat's history does, and adds what a turn adds (a question and the
# reply before it) to an opening that holds most of it (a system prompt, a
# document to discuss). For each turn the uncached peer runs
# first, then the cached one; time to first token is curl's
# time_starttransfer of a streamed request (the API answers once the first
# token is there), max_tokens 1. Decode: ms/token = (end - first byte) /
# DEC of a streamed request of 1 + DEC tokens on the last turn's prompt,
# both ways (cached: every prompt block is then held).
# Goal (issue 37): turns 2..8 cached <= 15% of uncached; decode unchanged.
# Env: MODEL (default the 1.17 GB fixture of tests/bench/decode_bound.sh,
# made if missing), LIMIT (each stage peer's --mem-limit, default 800M;
# austen: 11M), CTX (4096), TURNS (8), FIRST (words of turn 1, 440) and
# CHUNK (words each later turn adds, 30): ~2k tokens at turn 8 with the
# fixture's vocabulary (about 3 tokens a word of persuasion.txt); DEC
# (32), THREADS (1).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
FIX=${SHOAL_BENCH_FIXTURE:-/tmp/shoal-bench/llama-1b-q8_0.gguf}
MODEL=${MODEL:-$FIX}
LIMIT=${LIMIT:-800M}
CTX=${CTX:-4096}
TURNS=${TURNS:-8}
FIRST=${FIRST:-440}
CHUNK=${CHUNK:-30}
DEC=${DEC:-32}
THREADS=${THREADS:-1}
[ -x "$B" ] || fail "$B not found (give the build directory)"
command -v curl >/dev/null || fail "curl is needed"
[ "$MODEL" = "$FIX" ] && bench_fixture "$FIX"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

start s1 "$MODEL" --mem-limit "$LIMIT" --ctx "$CTX" --threads "$THREADS" --api 127.0.0.1:0
SEED=$(ep s1)
start s2 "$MODEL" --mem-limit "$LIMIT" --ctx "$CTX" --threads "$THREADS" --peer "$SEED"
start off "$MODEL" --mem-limit 1M --ctx "$CTX" --peer "$SEED" --api 127.0.0.1:0 --prefix-cache off
wait_for 120 servable_all 2 s1 s2 off || fail "no common 2-stage plan"
ON=$(api_port s1)
OFF=$(api_port off)
NAME=$(basename "$MODEL" .gguf)

# prompt K: turn K's FIRST + (K - 1) * CHUNK words, as a JSON string
prompt() {
	python3 - "$DATA/models/persuasion.txt" "$1" "$FIRST" "$CHUNK" <<'EOF'
import json, sys
w = open(sys.argv[1]).read().split()
k, first, chunk = (int(x) for x in sys.argv[2:5])
print(json.dumps(" ".join(w[200:200 + first + (k - 1) * chunk])))
EOF
}
# req PORT PROMPT_JSON N: seconds to the first byte of the streamed reply,
# and to its end, and the prompt's tokens and cached tokens (from usage)
req() {
	local body
	body="{\"model\":\"$NAME\",\"max_tokens\":$3,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"prompt\":$2}"
	curl -s -o "$T/out" -w '%{time_starttransfer} %{time_total}' -H 'Content-Type: application/json' \
		"http://127.0.0.1:$1/v1/completions" -d "$body" || fail "request to $1"
	python3 - "$T/out" <<'EOF'
import json, sys
u = None
for l in open(sys.argv[1]):
    if l.startswith("data: {"):
        d = json.loads(l[6:])
        u = d.get("usage") or u
if not u:
    sys.exit("no usage in the stream: " + open(sys.argv[1]).read()[:300])
print("", u["prompt_tokens"], u.get("prompt_tokens_details", {}).get("cached_tokens", 0))
EOF
}

echo "model $NAME, 2 stages, ctx $CTX, $THREADS thread(s) a peer; turn k: $FIRST + $CHUNK x (k - 1) words"
printf "%-5s %7s %8s %11s %11s %6s\n" turn tokens cached "ttft off s" "ttft on s" "on/off"
for k in $(seq "$TURNS"); do
	P=$(prompt "$k")
	read -r t_off _ n_off _ <<<"$(req "$OFF" "$P" 1)"
	read -r t_on _ n_on c_on <<<"$(req "$ON" "$P" 1)"
	printf "%-5s %7s %8s %11.3f %11.3f %5.0f%%\n" "$k" "$n_on" "$c_on" "$t_off" "$t_on" \
		"$(echo "100 * $t_on / $t_off" | bc -l)"
done
read -r a b _ <<<"$(req "$OFF" "$P" $((1 + DEC)))"
read -r c d _ <<<"$(req "$ON" "$P" $((1 + DEC)))"
printf "decode, last turn's prompt: %.1f ms/token off, %.1f ms/token on\n" \
	"$(echo "1000 * ($b - $a) / $DEC" | bc -l)" "$(echo "1000 * ($d - $c) / $DEC" | bc -l)"
