#!/bin/bash
# tests/sh/freeze_loopback.sh: a peer frozen for 10 s (SIGSTOP, then
# SIGCONT) is the only peer that dies; nobody else is declared dead and
# requests still give the single-peer ids (issue 35, item 3).
#
# 3 real `shoal node` processes on 127.0.0.1 hold the austen model at
# --mem-limit 11M in 3 stages (every peer is needed). A greedy run streams
# through d1 while the middle stage's peer is stopped for 10 s: the others
# declare it dead and close their links to it with a goodbye; it resumes,
# refutes, and the plan comes back. Before, the resumed peer's first send
# on a link closed meanwhile failed ("Broken pipe") before it read the
# goodbye, and it declared its next stage dead (3-5 more plan changes).
# Checked: no "peer X is dead" line names a peer that was not frozen, no
# view polled during and after the freeze shows one dead, the run equals
# the local run, and a request after the freeze does too.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
[ -x "$VC" ] || skip "$VC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
NODES="d1 d2 d3"
start d1 "$DENSE" --mem-limit 14M --ctx 512
SEED=$(ep d1)
start d2 "$DENSE" --mem-limit 14M --ctx 512 --peer "$SEED"
start d3 "$DENSE" --mem-limit 14M --ctx 512 --peer "$SEED"
wait_for 30 servable_all "" $NODES || fail "no servable plan within 30 s"
P="It is a truth universally acknowledged"
N=400
"$B" run "$DENSE" -p "$P" -n $N --temp 0 --ids --ctx 512 >"$T/ref" 2>/dev/null || fail "local run"
remote() { # remote NODE OUT N: a greedy run of N tokens through NODE into OUT; its exit status
	timeout 120 "$B" run --peer "$(ep "$1")" --key "$KEY" -p "$P" -n "$3" --temp 0 --ids >"$2" 2>"$2.err"
}
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }

# the first stage peer other than d1 (which takes the client's request)
# is frozen
status d1 || fail "no status from d1"
NST=$("$PC" "$T/st-d1.json" stages)
F=$("$PC" "$T/st-d1.json" stage 0)
[ "$F" = d1 ] && F=$("$PC" "$T/st-d1.json" stage 1)
OTHERS=$(for n in $NODES; do [ "$n" != "$F" ] && echo "$n"; done)
declare -A ID
for n in $NODES; do ID[$n]=$("$VC" "$T/st-d1.json" id "$n"); done
echo "$NST stages; frozen: $F; others: $(echo $OTHERS)"

# every view, polled from the freeze until 10 s after the resume
watch_views() {
	local n o
	while :; do
		for n in $NODES; do
			[ "$n" = "$F" ] && [ -e "$T/frozen" ] && continue
			"$B" status --state-dir "$T/$n" --key "$KEY" --json --timeout-ms 2000 \
				>"$T/w-$n.json" 2>/dev/null || continue
			for o in $OTHERS; do echo "$n sees $o $("$VC" "$T/w-$n.json" state "$o")"; done
		done
		sleep 0.2
	done
}

# two runs stream, one through d1 and one through the peer to be frozen
remote d1 "$T/r1" $N &
RUN1=$!
remote "$F" "$T/r2" $N &
RUN2=$!
wait_for 30 at_least "$T/r1" 10 || fail "the run through d1 streamed no ids within 30 s: $(cat "$T/r1.err")"
wait_for 30 at_least "$T/r2" 10 || fail "the run through $F streamed no ids within 30 s: $(cat "$T/r2.err")"
touch "$T/frozen"
watch_views >"$T/views" 2>/dev/null &
WATCH=$!
kill -STOP "${PID[$F]}"
sleep 10
kill -CONT "${PID[$F]}"
rm -f "$T/frozen"
t0=$(now_ms)
wait "$RUN1" || fail "the run through d1 across the freeze: $(cat "$T/r1.err")"
same "ids of the run through d1 across the freeze" "$T/r1" "$T/ref"
wait "$RUN2" || fail "the run through $F across the freeze: $(cat "$T/r2.err")"
same "ids of the run through $F across the freeze" "$T/r2" "$T/ref"
echo "runs through d1 and $F across a 10 s freeze of $F: same ids, both ended $(($(now_ms) - t0)) ms after the resume"
wait_for 30 servable_all "" $NODES || fail "no servable plan 30 s after the resume"
sleep_until=$((t0 + 10000))
while [ "$(now_ms)" -lt $sleep_until ]; do sleep 0.2; done
kill "$WATCH" 2>/dev/null
wait "$WATCH" 2>/dev/null

# nobody but the frozen peer was taken for dead
for o in $OTHERS; do
	for n in $NODES; do
		if grep -q "node: peer ${ID[$o]:0:8} is dead" "$T/$n.log"; then
			fail "$n declared $o dead, which was not frozen: $(grep "peer ${ID[$o]:0:8} is dead" "$T/$n.log" | head -n 1)"
		fi
	done
done
polls=$(wc -l <"$T/views")
[ "$polls" -gt 20 ] || fail "only $polls view lines polled"
if grep -E "sees ($(echo $OTHERS | tr ' ' '|')) dead" "$T/views" >"$T/bad"; then
	fail "a peer that was not frozen was seen dead: $(head -n 3 "$T/bad" | tr '\n' ';')"
fi
echo "no death of $(echo $OTHERS) in $polls view polls and the logs"
for n in $NODES; do
	echo "$n: $(grep -c ' cluster: plan epoch ' "$T/$n.log") plan(s) taken in all"
done

"$B" run "$DENSE" -p "$P" -n 16 --temp 0 --ids --ctx 512 >"$T/ref16" 2>/dev/null || fail "local run"
for n in $NODES; do
	remote "$n" "$T/r3" 16 || fail "a run through $n after the freeze: $(cat "$T/r3.err")"
	same "ids of a run through $n after the freeze" "$T/r3" "$T/ref16"
done
echo "PASS"
