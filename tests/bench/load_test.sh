#!/bin/bash
# tests/bench/load_test.sh: N concurrent HTTP clients through a 3-peer
# loopback cluster for a given time (issue 15). Not part of make check.
#
#   tests/bench/load_test.sh [BUILDDIR]                     (from the source tree)
#   CLIENTS=8 DURATION=120 tests/bench/load_test.sh         (a short run)
#
# It needs the build's shoal and tests/helpers/plancheck (make check builds
# it, or make tests/helpers/plancheck).
#
# CLIENTS (default 16) clients, each a loop of /v1/completions (greedy or
# sampled, 8..32 tokens, prompts in turn), spread over the three peers'
# APIs, for DURATION seconds (default 600); one request in 10 is malformed
# on purpose and must be refused with a 400. Every request must complete
# (200 with a usage) or get an explicit error (a status >= 400 with an
# error body); anything else (no answer within REQ_TIMEOUT, a broken
# connection, a 200 without a body) is a lost request. Every INTERVAL
# seconds (default 60) each peer's RSS and open descriptors are printed.
# The summary line counts the requests; the run fails when one was lost,
# when a peer's RSS at the end is more than 5% above its first sample
# (taken after the first INTERVAL: the warm-up), or when a peer holds
# other descriptors after the load than before it.
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
CLIENTS=${CLIENTS:-16}
DURATION=${DURATION:-600}
INTERVAL=${INTERVAL:-60}
REQ_TIMEOUT=${REQ_TIMEOUT:-120}
command -v curl >/dev/null || fail "curl is needed"
[ -f "$DENSE" ] || fail "no $DENSE"
[ -x "$PC" ] || fail "no $PC: make tests/helpers/plancheck tests/helpers/viewcheck (make check builds them)"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
PROMPTS=("It is a truth" "Emma Woodhouse, handsome" "The family of Dashwood" "Mr. Darcy"
	"Catherine Morland" "Sir Walter Elliot" "Fanny Price" "Anne was")
NAMES=(p1 p2 p3)

# three stages: each peer offers a little more than a third of the model
start p1 "$DENSE" --mem-limit 14M --ctx 256 --sessions 8 --api 127.0.0.1:0
SEED=$(ep p1)
for n in p2 p3; do
	start $n "$DENSE" --mem-limit 14M --ctx 256 --sessions 8 --peer "$SEED" --api 127.0.0.1:0
done
wait_for 60 servable_all "" p1 p2 p3 || fail "no plan on 3 peers"
URLS=()
for n in "${NAMES[@]}"; do URLS+=("http://127.0.0.1:$(api_port $n)"); done
echo "load: $CLIENTS clients, $DURATION s, 3 peers, $("$PC" "$T/st-p1.json" stages) stage(s)," \
	"APIs ${URLS[*]}"
# one request through each entry first: the plan is served everywhere
for u in "${URLS[@]}"; do
	wait_for 60 curl -sf --max-time 60 "$u/v1/completions" \
		-d '{"prompt": "It is", "max_tokens": 2, "temperature": 0}' -o /dev/null ||
		fail "no completion through $u"
done

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
declare -A FD0 RSS1 RSSN
for n in "${NAMES[@]}"; do FD0[$n]=$(fds "${PID[$n]}"); done

# client I: requests until END; one line per request in $T/res-I:
# ok MS | err STATUS | refused (the malformed one, 400) | lost WHY
client() {
	local i=$1 k=0 u p body code rc t0 t1 out=$T/out-$1
	while [ "$(date +%s)" -lt "$END" ]; do
		u=${URLS[$(((i + k) % 3))]}
		p=${PROMPTS[$(((i * 3 + k) % 8))]}
		if [ $(((i + k) % 10)) = 9 ]; then
			body='{"prompt": "unterminated'
		else
			body="{\"prompt\": \"$p\", \"max_tokens\": $((8 + (i + k) % 25)), \"temperature\": $(((i + k) % 2)), \"seed\": $k}"
		fi
		t0=$(date +%s%N)
		code=$(curl -s -o "$out" -w '%{http_code}' --max-time "$REQ_TIMEOUT" \
			-H 'Content-Type: application/json' "$u/v1/completions" -d "$body")
		rc=$?
		t1=$(date +%s%N)
		if [ $rc -ne 0 ]; then
			echo "lost curl-$rc $u"
		elif [ $(((i + k) % 10)) = 9 ]; then
			if [ "$code" = 400 ] && grep -q '"error"' "$out"; then echo refused; else echo "lost bad-request-got-$code"; fi
		elif [ "$code" = 200 ] && grep -q '"completion_tokens"' "$out"; then
			echo "ok $(((t1 - t0) / 1000000))"
		elif [ "$code" -ge 400 ] 2>/dev/null && grep -q '"error"' "$out"; then
			echo "err $code $(head -c 160 "$out" | tr '\n' ' ')"
		else
			echo "lost http-$code $(head -c 80 "$out" | tr '\n' ' ')"
		fi
		k=$((k + 1))
	done >"$T/res-$i"
}

sample() { # sample LABEL: one line per peer
	local n p line="load: $1:"
	for n in "${NAMES[@]}"; do
		p=${PID[$n]}
		kill -0 "$p" 2>/dev/null || fail "peer $n died"
		line="$line $n rss $(($(rss_kb "$p") / 1024)) MiB fds $(fds "$p");"
	done
	echo "$line requests $(cat "$T"/res-* 2>/dev/null | wc -l)"
}

START=$(date +%s)
END=$((START + DURATION))
CPIDS=()
for i in $(seq 0 $((CLIENTS - 1))); do
	client "$i" &
	CPIDS+=($!)
done
tick=0
while [ "$(date +%s)" -lt "$END" ]; do
	sleep 1
	if [ $((($(date +%s) - START) / INTERVAL)) -gt $tick ]; then
		tick=$((tick + 1))
		sample "$((tick * INTERVAL)) s"
		for n in "${NAMES[@]}"; do
			[ -n "${RSS1[$n]:-}" ] || RSS1[$n]=$(rss_kb "${PID[$n]}")
		done
	fi
done
wait "${CPIDS[@]}"
sleep 2 # the peers close the last connections
sample "end"

bad=""
for n in "${NAMES[@]}"; do
	RSSN[$n]=$(rss_kb "${PID[$n]}")
	fd1=$(fds "${PID[$n]}")
	[ "$fd1" = "${FD0[$n]}" ] || bad="$bad $n: descriptors ${FD0[$n]} before, $fd1 after;"
	if [ -n "${RSS1[$n]:-}" ]; then
		growth=$(((RSSN[$n] - RSS1[$n]) * 1000 / RSS1[$n]))
		echo "load: $n: rss $((RSS1[$n] / 1024)) MiB after warm-up, $((RSSN[$n] / 1024)) MiB at the end" \
			"($((growth / 10)).$(((growth < 0 ? -growth : growth) % 10))%); descriptors ${FD0[$n]} before, $fd1 after"
		[ "$growth" -le 50 ] || bad="$bad $n: RSS grew $((growth / 10)).$((growth % 10))%;"
	fi
done
cat "$T"/res-* >"$T/all"
total=$(wc -l <"$T/all")
ok=$(grep -c '^ok' "$T/all")
err=$(grep -c '^err' "$T/all")
refused=$(grep -c '^refused' "$T/all")
lost=$(grep -c '^lost' "$T/all")
p50=$(grep '^ok' "$T/all" | awk '{print $2}' | sort -n | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : 0}')
p99=$(grep '^ok' "$T/all" | awk '{print $2}' | sort -n | awk '{a[NR] = $1} END {print NR ? a[int(NR * 0.99 + 0.999)] : 0}')
[ "$err" = 0 ] || { echo "load: explicit errors:"; grep '^err' "$T/all" | cut -c1-120 | sort | uniq -c | head; }
[ "$lost" = 0 ] || { echo "load: lost:"; grep '^lost' "$T/all" | sort | uniq -c | head; bad="$bad $lost lost;"; }
echo "load: summary: $CLIENTS clients, $DURATION s: $total requests, $ok completed" \
	"(p50 $p50 ms, p99 $p99 ms), $err explicit errors, $refused malformed refused, $lost lost;" \
	"$(python3 -c "print(f'{$total / $DURATION:.1f}')") requests/s${bad:+; FAIL:$bad}"
[ -z "$bad" ]
