#!/bin/bash
# tests/sh/owner_death.sh: what the streams of the HTTP API show when an
# API peer dies with kill -9 (issue 35, "the owner's death ends its
# clients' streams with no error event").
#
# A peer's API runs are always owned by that peer (the API queues them in
# its own serving state; a peer without the model answers 503), so no
# stream on a surviving peer depends on an owner elsewhere. Three real
# `shoal node` processes at --mem-limit 14M (any 2 hold the model): a1
# and a2 serve the API, v1 is a spare. A stream runs through each API
# peer; a2 is killed with -9 once both stream text.
#  - a2's client cannot get an event from a dead peer, but its stream must
#    not look finished: no [DONE], and the HTTP chunked body is cut (curl
#    exits 18, "transfer closed with outstanding read data").
#  - a1's stream, whose run may have had a stage on a2, goes on: it ends
#    with [DONE] after either the whole text of an undisturbed single-peer
#    run (the paused run replayed) or an error event; never cut silently.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null 2>&1 || skip "curl is not installed"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip "no $PY"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
NODE=(--mem-limit 14M --ctx 256)
P="It is a truth universally acknowledged"
N=200
"$B" run "$DENSE" -p "$P" -n $N --ctx 256 --temp 0 >"$T/want" 2>/dev/null || fail "the local run"
start a1 "$DENSE" "${NODE[@]}" --api 127.0.0.1:0
start a2 "$DENSE" "${NODE[@]}" --api 127.0.0.1:0 --peer "$(ep a1)"
start v1 "$DENSE" "${NODE[@]}" --peer "$(ep a1)"
wait_for 30 servable_all 2 a1 a2 v1 || fail "no 2-stage plan on a1, a2, v1"
# the text of a stream's events (stdin), stream chunks only
text() { sed -n 's/^data: //p' | grep -v '^\[DONE\]' | grep -v '^{"error"' |
	$PY -c 'import json,sys; print("".join(c["text"] for l in sys.stdin for c in json.loads(l)["choices"]), end="")'; }
cut=no
for attempt in 1 2 3; do # a stream may outpace the kill: then once more
	for n in a1 a2; do
		curl -s -N --max-time 90 "http://127.0.0.1:$(api_port $n)/v1/completions" \
			-d "{\"prompt\": \"$P\", \"max_tokens\": $N, \"temperature\": 0, \"stream\": true}" \
			>"$T/s-$n.txt" 2>/dev/null &
		eval "CP_$n=$!"
	done
	both() { grep -q '"text"' "$T/s-a1.txt" && grep -q '"text"' "$T/s-a2.txt"; }
	wait_soon 20 both || fail "the streams sent no text"
	stop a2
	rc2=0
	wait $CP_a2 || rc2=$?
	wait $CP_a1 || fail "a1's stream: curl failed ($?)"
	tail -n 2 "$T/s-a1.txt" | grep -q '^data: \[DONE\]' ||
		fail "a1's stream was cut without [DONE]: $(tail -c 300 "$T/s-a1.txt")"
	if grep -q '^data: {"error"' "$T/s-a1.txt"; then
		echo "a1's stream ended with an error event: $(grep '^data: {"error"' "$T/s-a1.txt" | cut -c1-160)"
	else
		[ "$(text <"$T/s-a1.txt")" = "$(cat "$T/want")" ] ||
			fail "a1's stream ended whole with another text than the local run's"
		echo "a1's stream: the whole text of the local run ($(grep -c 'paused after' "$T/a1.log") run(s) paused on a1)"
	fi
	if grep -q '^data: \[DONE\]' "$T/s-a2.txt"; then
		# the run finished before the kill: try again with a fresh a2
		start a2 "$DENSE" "${NODE[@]}" --api 127.0.0.1:0 --peer "$(ep a1)"
		wait_for 30 servable_all 2 a1 a2 v1 || fail "no plan with the restarted a2"
		continue
	fi
	[ $rc2 = 18 ] || fail "a2's cut stream: curl exit $rc2, want 18 (a cut chunked body)"
	cut=yes
	break
done
[ $cut = yes ] || fail "three streams outpaced the kill"
echo "a2's stream, its peer killed: $(grep -c '"text"' "$T/s-a2.txt") chunks, no [DONE], the chunked body cut (curl 18)"
