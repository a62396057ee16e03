#!/bin/bash
# tests/sh/gray_loopback.sh: a gray failure of the data plane is routed
# around (issue 35, item 2). A stage peer whose data frames are all lost
# (the test hook's tcp:drop) or each held for 1 s (tcp:delay:ms=1000)
# while its gossip stays healthy is found by the others' data-plane probes
# (runtime/node/serve_probe.c), named in their records, and left out of the
# plan on two observers' word; a request sent as the fault starts
# completes with the single-peer ids, and once the fault is gone the peer
# answers the probes again and is back in the view. Needs ./configure
# --enable-test-hooks (./bootstrap has it).
#
# 4 real `shoal node` processes on 127.0.0.1 with the austen model at
# --mem-limit 11M: any 3 hold it. Each node reads its fault rules from
# $T/fault-NAME (SHOAL_TEST_FAULT=@FILE). The client talks to d1, which is
# never faulted; the faulted peer is a stage peer other than d1. The time
# from arming the fault to the request's last id is printed (issue 35
# asks for 15 s); the test's own bound is 90 s, so that a loaded machine
# does not fail it.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
NODES="d1 d2 d3 d4"
for n in $NODES; do : >"$T/fault-$n"; done
SHOAL_TEST_FAULT=@$T/fault-d1 start d1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep d1)
for n in d2 d3 d4; do
	SHOAL_TEST_FAULT=@$T/fault-$n start $n "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
done
wait_for 40 servable_all "" $NODES || fail "no servable plan within 40 s"
P="Emma"
"$B" run "$DENSE" -p "$P" -n 16 --temp 0 --ids --ctx 256 >"$T/ref" 2>/dev/null || fail "local run"
remote() { # remote OUT: a greedy run through d1 into OUT (stderr in OUT.err); its exit status
	timeout 90 "$B" run --peer "$SEED" --key "$KEY" -p "$P" -n 16 --temp 0 --ids >"$1" 2>"$1.err"
}
remote "$T/clean" || fail "undisturbed remote run: $(cat "$T/clean.err")"
same "undisturbed remote ids" "$T/clean" "$T/ref"

stages_of() { # stages_of NAME: the stage peers of NAME's plan, one a line
	local i
	for ((i = 0; i < $("$PC" "$T/st-$1.json" stages); i++)); do "$PC" "$T/st-$1.json" stage $i; done
}
left_out() { # left_out NAME X: X is left out of NAME's plan for its data plane, and holds no stage
	status "$1" && [[ "$("$PC" "$T/st-$1.json" left "$2")" == *"data plane fails"* ]] &&
		! stages_of "$1" | grep -qx "$2"
}
back_in() { # back_in X: no peer leaves X out, every peer has the same servable plan
	local n
	servable_all "" $NODES || return 1
	for n in $NODES; do [ "$("$PC" "$T/st-$n.json" left "$1")" = none ] || return 1; done
}

# case RULE: arm RULE on a stage peer other than d1, send a request at
# once, check it, clear the rule, and wait for the peer to be back
case_() {
	local rule=$1 x t0 ms rc
	status d1 || fail "no status from d1"
	x=$(stages_of d1 | grep -vx d1 | head -n 1)
	[ -n "$x" ] || fail "no stage peer other than d1"
	t0=$(now_ms)
	echo "$rule" >"$T/fault-$x"
	remote "$T/r" &
	local run=$!
	wait_for 60 left_out d1 "$x" || fail "$rule on $x: d1 did not leave $x out within 60 s"
	local out_ms=$(($(now_ms) - t0))
	wait "$run"
	rc=$?
	ms=$(($(now_ms) - t0))
	[ "$rc" -eq 0 ] || fail "$rule on $x: the request failed (exit $rc): $(cat "$T/r.err")"
	same "$rule on $x: ids of the request" "$T/r" "$T/ref"
	grep -q "its data plane fails" "$T"/d?.log || fail "$rule: no data suspect logged"
	echo "$rule on $x: left out after $out_ms ms (reason: $("$PC" "$T/st-d1.json" left "$x"))"
	echo "$rule on $x: the request sent as the fault began completed with the same ids in $ms ms"
	# a request while the peer is left out
	t0=$(now_ms)
	remote "$T/r2" || fail "$rule on $x: a request while $x is left out: $(cat "$T/r2.err")"
	same "$rule on $x: ids of a request while $x is left out" "$T/r2" "$T/ref"
	echo "$rule on $x: a new request while $x is left out: same ids in $(($(now_ms) - t0)) ms"
	# x's own probes fail too: it names the others, but one observer's
	# word leaves nobody out
	wait_for 30 eval 'status d1 && [ -n "$("$VC" "$T/st-d1.json" dsuspects "$x")" ]' ||
		fail "$rule on $x: $x names no data suspect within 30 s"
	local o
	for o in $NODES; do
		[ "$o" = "$x" ] && continue
		[ "$("$PC" "$T/st-d1.json" left "$o")" = none ] ||
			fail "$rule on $x: $o left out: $("$PC" "$T/st-d1.json" left "$o")"
	done
	# (within 10 s: on a loaded machine a peer's gossip can be late
	# enough that another holds it suspect for a moment)
	wait_for 10 servable_all "" $(echo $NODES | tr ' ' '\n' | grep -vx "$x") ||
		fail "$rule on $x: the others have no common servable plan within 10 s"
	echo "$rule on $x: $x names $("$VC" "$T/st-d1.json" dsuspects "$x" | tr '\n' ' ')alone; nobody else is left out"
	: >"$T/fault-$x"
	t0=$(now_ms)
	wait_for 60 back_in "$x" || fail "$rule on $x: not back in the view 60 s after the fault ended"
	echo "$rule on $x: back in the view $(($(now_ms) - t0)) ms after the fault ended"
	remote "$T/r3" || fail "$rule on $x: the request after: $(cat "$T/r3.err")"
	same "$rule on $x: ids of the request after" "$T/r3" "$T/ref"
}

case_ "tcp:drop:n=0"
case_ "tcp:delay:n=0:ms=1000"
echo "PASS"
