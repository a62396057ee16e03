#!/bin/bash
# tests/sh/fault_loopback.sh: every fault of the test hook (net/fault.h:
# drop, delay, truncate, corrupt) on every link kind of a 3-peer pipeline
# of real `shoal node` processes on 127.0.0.1 ends in a retry or a clear
# error, never in a wrong token or a hang. Needs ./configure
# --enable-test-hooks (./bootstrap has it).
#
# The austen model at --mem-limit 11M splits into 3 stages (as in
# dist_loopback.sh). Each node reads its rules from $T/fault-NAME
# (SHOAL_TEST_FAULT=@FILE), armed and cleared while it runs. Per case:
# the hook's log line shows the fault happened; the faulted `shoal run
# --peer` (greedy, 16 tokens) prints the undisturbed ids with exit 0, or
# exits non-zero with a message, within 90 s (the owner's silence bound
# is 30 s); after the rule is cleared the plan is servable again and a run
# equals the reference.
#
#  1. tcp (data links): one hidden frame per sender. delay must give the
#     same ids; truncate and corrupt break the link (the receiver sees EOF
#     mid-frame / a checksum mismatch) and the owner replays the run;
#     drop is found by the owner's 30 s silence bound.
#  2. ctl (ZeroMQ): one reply of the owner to the client (RUN_TOKEN,
#     RUN_END). A dropped token is reported (RUN_END's count); a
#     truncated or corrupted reply is refused by the decoder, or, where
#     the flipped bit still decodes, only the last token can differ: on
#     the wire CURVE's MAC turns such damage into a drop (net/ctl.c).
#  3. swim (gossip): a fraction of every node's datagrams dropped,
#     corrupted, truncated or delayed for 3 s: a run during it equals the
#     reference, every node lives, and the plan is servable after.
#  4. a false death (one node's gossip lost until the others declare it
#     dead): a request sent as it refutes is served, not refused.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"

"$B" key new "$T/k" >/dev/null || fail "shoal key new"
NODES="d1 d2 d3"
for n in $NODES; do : >"$T/fault-$n"; done
SHOAL_TEST_FAULT=@$T/fault-d1 start d1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep d1)
SHOAL_TEST_FAULT=@$T/fault-d2 start d2 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
SHOAL_TEST_FAULT=@$T/fault-d3 start d3 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
wait_for 30 servable_all 3 d1 d2 d3 || fail "no servable 3-stage plan within 30 s"
P="Emma"
"$B" run "$DENSE" -p "$P" -n 16 --temp 0 --ids >"$T/ref" 2>/dev/null || fail "local run"
remote() { # remote OUT: a greedy run through d1 into OUT (stderr in OUT.err); its exit status
	timeout 90 "$B" run --peer "$SEED" --key "$T/k" -p "$P" -n 16 --temp 0 --ids >"$1" 2>"$1.err"
}
remote "$T/clean" || fail "undisturbed remote run: $(cat "$T/clean.err")"
same "undisturbed remote ids" "$T/clean" "$T/ref"
fired() { cat "$T"/d?.log | grep -c "fault: test hook: $1 $2 "; }
alive() { local n; for n in $NODES; do kill -0 "${PID[$n]}" 2>/dev/null || return 1; done; }

# case LINK FAULT RULE ON MODE: arm RULE on the nodes ON, one run, check
# it (MODE same: must equal the reference; any: the reference or a clear
# error; last: also a last token that differs), clear, recover.
case_() {
	local link=$1 f=$2 rule=$3 on=$4 mode=$5 n before t0 rc ms out=$T/r-$1-$2
	before=$(fired "$link" "$f")
	for n in $on; do echo "$rule" >"$T/fault-$n"; done
	sleep 0.1
	t0=$(now_ms)
	remote "$out"
	rc=$?
	ms=$(($(now_ms) - t0))
	for n in $on; do : >"$T/fault-$n"; done
	[ "$rc" -ne 124 ] || fail "$link $f: the run hung (killed after 90 s)"
	[ "$(fired "$link" "$f")" -gt "$before" ] || fail "$link $f: the hook did not fire"
	alive || fail "$link $f: a node died"
	if [ "$rc" -eq 0 ]; then
		if ! cmp -s "$out" "$T/ref"; then
			[ "$mode" = last ] && [ "$(cut -d' ' -f1-15 <"$out")" = "$(cut -d' ' -f1-15 <"$T/ref")" ] ||
				same "$link $f: ids of a run that exited 0" "$out" "$T/ref"
		fi
		echo "$link $f: same ids (exit 0) in $ms ms"
	else
		[ "$mode" != same ] || fail "$link $f: exit $rc: $(cat "$out.err")"
		grep -q "shoal run: ." "$out.err" || fail "$link $f: exit $rc without a message"
		echo "$link $f: clear error in $ms ms: $(tail -n 1 "$out.err")"
	fi
	wait_for 60 servable_all 3 $NODES || fail "$link $f: not servable 60 s after the fault"
	remote "$T/after" || fail "$link $f: the run after: $(cat "$T/after.err")"
	same "$link $f: ids of the run after" "$T/after" "$T/ref"
}

# 1. data links
case_ tcp delay "tcp:delay:kind=hidden:ms=300" "$NODES" same
case_ tcp truncate "tcp:truncate:kind=hidden:seed=3" "$NODES" any
case_ tcp corrupt "tcp:corrupt:kind=hidden:seed=5" "$NODES" any
case_ tcp corrupt "tcp:corrupt:kind=token:seed=7" "$NODES" any
case_ tcp drop "tcp:drop:kind=hidden" "$NODES" any
grep -q "checksum .*damaged in transit" "$T"/d?.log || fail "no checksum mismatch logged for tcp corrupt"

# 2. control messages: the owner's replies to the client
case_ ctl delay "ctl:delay:kind=reply" d1 same
case_ ctl drop "ctl:drop:kind=reply:skip=3" d1 any
case_ ctl truncate "ctl:truncate:kind=reply:skip=2" d1 any
case_ ctl corrupt "ctl:corrupt:kind=reply:skip=4:seed=9" d1 last
# the owner's other replies (link probes' acks) pass the same hook: once
# more, later, if the one dropped was not a token
lost() { grep -q "got 15 of the 16 tokens" "$T/r-ctl-drop.err"; }
lost || case_ ctl drop "ctl:drop:kind=reply:skip=6" d1 any
lost || fail "ctl drop: the lost token was not reported"

# 3. gossip
RULES="swim:drop:n=0:p=0.3,swim:corrupt:n=0:p=0.1,swim:truncate:n=0:p=0.1,swim:delay:n=0:p=0.05:ms=20"
for n in $NODES; do echo "$RULES" >"$T/fault-$n"; done
sleep 3
remote "$T/r-swim" || fail "run under gossip faults: $(cat "$T/r-swim.err")"
for n in $NODES; do : >"$T/fault-$n"; done
same "ids under gossip faults" "$T/r-swim" "$T/ref"
for f in drop corrupt truncate delay; do
	[ "$(fired swim $f)" -gt 0 ] || fail "swim $f: the hook did not fire"
done
alive || fail "a node died under gossip faults"
wait_for 60 servable_all 3 $NODES || fail "not servable 60 s after the gossip faults"
remote "$T/after" || fail "the run after the gossip faults: $(cat "$T/after.err")"
same "ids after the gossip faults" "$T/after" "$T/ref"
echo "swim: $(fired swim drop) dropped, $(fired swim corrupt) corrupted, $(fired swim truncate) truncated, $(fired swim delay) delayed datagrams; same ids"

# 4. a false death: every datagram d2 sends is lost until d1 declares it
# dead and has no plan (d1 and d3 cannot hold the model); then d2 is heard
# again and refutes. A request sent at that moment waits for the plan to
# come back (SHOAL_SERVE_DIED_WAIT_MULT) instead of being refused.
echo "swim:drop:n=0" >"$T/fault-d2"
d2_dead() {
	status d1 && [[ "$("$VC" "$T/st-d1.json" state d2)" =~ ^(dead|none)$ ]] &&
		[[ "$("$PC" "$T/st-d1.json" servable)" == no* ]]
}
wait_for 30 d2_dead || fail "d1 did not declare the silent d2 dead"
: >"$T/fault-d2"
t0=$(now_ms)
remote "$T/r-false" || fail "a request right after a false death: $(cat "$T/r-false.err")"
same "ids of a request right after a false death" "$T/r-false" "$T/ref"
echo "false death: the request waited for d2's refutation, same ids in $(($(now_ms) - t0)) ms"
alive || fail "a node died after the false death"
wait_for 60 servable_all 3 $NODES || fail "not servable 60 s after the false death"
echo "PASS"
