#!/bin/bash
# tests/bench/elastic_bench.sh: the pause a client sees when a stage peer is
# killed -9 mid-stream, with the nodes' default timers (issue 9's goal:
# < 3 s from the kill to the next token on the trained dense model). A
# benchmark, not a test: not part of make check; it fails only when it
# cannot set up a cluster or a run loses its tokens.
#
#   tests/bench/elastic_bench.sh [BUILDDIR]        (from the source tree)
#
# Each trial: 4 peers at --mem-limit 11M (any 3 hold the model: 3 stages),
# a greedy 300-token run through stage 0's peer, stage 1's peer killed -9
# after ~60 tokens. The pause is the longest gap between two tokens the
# client received (`shoal run --stats`), which contains the kill; the ids
# must equal a single-peer run. Env: TRIALS (default 5), GOSSIP (the base
# period in ms, default 100: the node's default).
set -u
SHOAL_BUILDDIR=${1:-${SHOAL_BUILDDIR:-.}}
. "$(dirname "$0")/../sh/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
TRIALS=${TRIALS:-5}
GOSSIP_MS=${GOSSIP:-100}
CTX=512
P="It is a truth universally acknowledged"
[ -x "$PC" ] || fail "$PC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
"$B" run "$DENSE" -p "$P" -n 300 --ctx $CTX --temp 0 --ids >"$T/local" 2>/dev/null || fail "local run"
pauses=()
for t in $(seq "$TRIALS"); do
	for n in 1 2 3 4; do
		start "e$t$n" "$DENSE" --mem-limit 11M --ctx $CTX ${SEED:+--peer "$SEED"}
		[ $n = 1 ] && SEED=$(ep "e${t}1")
	done
	wait_for 30 servable_all 3 "e${t}1" "e${t}2" "e${t}3" "e${t}4" || fail "no plan (trial $t)"
	OWNER=$("$PC" "$T/st-e${t}1.json" stage 0)
	VICTIM=$("$PC" "$T/st-e${t}1.json" stage 1)
	"$B" run --peer "$(ep "$OWNER")" --key "$KEY" -p "$P" -n 300 --temp 0 --ids --stats \
		>"$T/r$t" 2>"$T/r$t.err" &
	rp=$!
	wait_for 20 bash -c "[ -f '$T/r$t' ] && [ \$(wc -w <'$T/r$t') -ge 60 ]" || fail "no stream"
	stop "$VICTIM"
	wait $rp || fail "trial $t: the run failed: $(cat "$T/r$t.err")"
	cmp -s "$T/r$t" "$T/local" || fail "trial $t: ids differ from the single-peer run"
	ms=$(sed -n 's/.*longest pause \([0-9.]*\) ms.*/\1/p' "$T/r$t.err")
	pauses+=("$ms")
	echo "trial $t: stage 1 ($VICTIM) killed -9: longest pause $ms ms; ids identical"
	stop_all
	unset SEED
done
sorted=$(printf '%s\n' "${pauses[@]}" | sort -n)
echo "kill -9 -> next token, $TRIALS trials, gossip base ${GOSSIP_MS} ms: min $(echo "$sorted" | head -1) ms, median $(echo "$sorted" | sed -n "$(((TRIALS + 1) / 2))p") ms, max $(echo "$sorted" | tail -1) ms (goal < 3000 ms)"
