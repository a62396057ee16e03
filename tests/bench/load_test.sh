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
# A warm-up of the same clients (WARMUP seconds, default 30) comes first:
# it makes the peers open what they keep for good (a data link is dialled
# when first needed: a stage dials the owners' results links the first
# time it must report a full session table), then the load drains and each
# peer's RSS and descriptors are taken at rest. The summary line counts the
# requests of both; the run fails when one was lost, when a peer's RSS at
# rest after the load is more than 5% above its figure after the warm-up,
# or when a peer holds other descriptors after the load than after the
# warm-up (the differing ones are listed).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
CLIENTS=${CLIENTS:-16}
DURATION=${DURATION:-600}
INTERVAL=${INTERVAL:-60}
WARMUP=${WARMUP:-30}
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
# fdlist PID: one line per descriptor, what it is (socket:[inode], a file,
# anon_inode:[eventfd], pipe:[inode]) with a TCP socket's addresses
fdlist() {
	local f t ino
	for f in /proc/$1/fd/*; do
		t=$(readlink "$f" 2>/dev/null) || continue
		case $t in
		socket:*)
			ino=${t#socket:[}
			ino=${ino%]}
			t="$t $(awk -v i="$ino" '$10 == i {print FILENAME, $2, $3, $4}' /proc/$1/net/tcp /proc/$1/net/tcp6 /proc/$1/net/unix 2>/dev/null | head -1)"
			;;
		esac
		echo "${f##*/} $t"
	done
}
declare -A FD0 RSS1 RSSN

# client I PHASE: requests until END; one line per request in $T/res-PHASE-I:
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
	done >"$T/res-$2-$i"
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

clients() { # clients PHASE SECONDS: CLIENTS clients from now for SECONDS
	START=$(date +%s)
	END=$((START + $2))
	CPIDS=()
	for i in $(seq 0 $((CLIENTS - 1))); do
		client "$i" "$1" &
		CPIDS+=($!)
	done
}
at_rest() { # at_rest PHASE: after the last requests, the peers close their connections
	wait "${CPIDS[@]}"
	sleep 2
	sample "$1"
}

clients warmup "$WARMUP"
at_rest "after $WARMUP s of warm-up"
for n in "${NAMES[@]}"; do
	FD0[$n]=$(fds "${PID[$n]}")
	fdlist "${PID[$n]}" >"$T/fd0-$n"
	RSS1[$n]=$(rss_kb "${PID[$n]}")
done
clients load "$DURATION"
tick=0
while [ "$(date +%s)" -lt "$END" ]; do
	sleep 1
	if [ $((($(date +%s) - START) / INTERVAL)) -gt $tick ]; then
		tick=$((tick + 1))
		sample "$((tick * INTERVAL)) s"
	fi
done
at_rest "end"

bad=""
for n in "${NAMES[@]}"; do
	RSSN[$n]=$(rss_kb "${PID[$n]}")
	fd1=$(fds "${PID[$n]}")
	if [ "$fd1" != "${FD0[$n]}" ]; then
		bad="$bad $n: descriptors ${FD0[$n]} after warm-up, $fd1 at the end;"
		fdlist "${PID[$n]}" >"$T/fd1-$n"
		echo "load: $n: descriptors after warm-up (<) and at the end (>):"
		diff "$T/fd0-$n" "$T/fd1-$n" | grep '^[<>]'
	fi
	if [ -n "${RSS1[$n]:-}" ]; then
		growth=$(((RSSN[$n] - RSS1[$n]) * 1000 / RSS1[$n]))
		echo "load: $n: rss $((RSS1[$n] / 1024)) MiB after warm-up, $((RSSN[$n] / 1024)) MiB at the end" \
			"($((growth / 10)).$(((growth < 0 ? -growth : growth) % 10))%); descriptors ${FD0[$n]} after warm-up, $fd1 at the end"
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
echo "load: summary: $CLIENTS clients, $WARMUP s warm-up + $DURATION s: $total requests, $ok completed" \
	"(p50 $p50 ms, p99 $p99 ms), $err explicit errors, $refused malformed refused, $lost lost;" \
	"$(python3 -c "print(f'{$total / ($WARMUP + $DURATION):.1f}')") requests/s${bad:+; FAIL:$bad}"
[ -z "$bad" ]
