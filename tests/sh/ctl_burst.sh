#!/bin/bash
# tests/sh/ctl_burst.sh: a control-plane run whose replies leave in one
# burst loses none of them (issue 35: clients of `shoal run --peer` that
# got every token and then "no answer in 60000 ms").
#
# The node thread sends a run's RUN_TOKENs and RUN_END from the event ring
# the data thread fills. When the node thread is held up (busy planning,
# answering status, or off its core on a loaded machine) the tokens wait
# in the ring and go out together afterwards; the ROUTER's queue to the
# client held 64 messages and dropped the rest without a word, the RUN_END
# first among them. The test hook holds the node thread in its first reply
# for 1.5 s (ctl:delay:kind=reply) while the run makes 200 tokens, so the
# other 199 and the RUN_END leave in one burst; the client must get them
# all, the same ids as an undisturbed run, and its RUN_END (its token
# count is checked against the ids it got: net/runmsg.h, invariant 6).
#
# Before the fix (net/ctl.c, SHOAL_CTL_ROUTER_SNDHWM) 5 of 5 runs of this
# test failed: the client printed the first 64 ids and gave up after
# --timeout-ms; after it, 0 of 5 (and 0 of 219 requests in 3 runs of
# tests/sh/admit_churn.sh with CLIENTS1=5 CLIENTS2=1 on a loaded machine,
# where before it 1 of 89 and 1 of 170 in 2 of 2 runs got every token but
# no RUN_END). Needs ./configure --enable-test-hooks (./bootstrap has it).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
N=200
: >"$T/fault"
SHOAL_TEST_FAULT=@$T/fault start o1 "$DENSE" --ctx 256 --sessions 2
wait_for 30 servable_all 1 o1 || fail "o1 serves no plan alone"
P="It is a truth universally acknowledged"
# hits PATTERN: how many lines of o1's log hold it
hits() { grep -c "$1" "$T/o1.log"; }
# ntok FILE: the tokens a --ids output holds (a word each, or a line each
# with --logprobs)
ntok() { if [ $c = 2 ]; then grep -c '"token"' "$1"; else wc -w <"$1"; fi; }
# once with greedy ids, once seeded with logprobs (longer messages)
for c in 1 2; do
	args=(--temp 0)
	[ $c = 2 ] && args=(--temp 0.8 --seed 7 --logprobs 3)
	"$B" run --peer "$(ep o1)" --key "$KEY" -p "$P" -n $N --ids "${args[@]}" >"$T/ref-$c" 2>"$T/ref-$c.err" ||
		fail "case $c undisturbed: $(cat "$T/ref-$c.err")"
	[ "$(ntok "$T/ref-$c")" -gt 64 ] || fail "case $c: the undisturbed run made $(ntok "$T/ref-$c") tokens (want > 64)"
	# the node reads the file anew at its next reply (fresh counters): that
	# reply, the run's first RUN_TOKEN, waits 1.5 s
	held=$(hits "ctl delay frame 1 (reply)")
	echo "ctl:delay:kind=reply:ms=1500:n=1" >"$T/fault"
	t0=$(now_ms)
	"$B" run --peer "$(ep o1)" --key "$KEY" -p "$P" -n $N --ids "${args[@]}" --timeout-ms 15000 \
		>"$T/out-$c" 2>"$T/out-$c.err" ||
		fail "case $c: the run held up on the node lost replies ($(ntok "$T/out-$c") tokens of $(ntok "$T/ref-$c")): $(cat "$T/out-$c.err")"
	same "case $c: the ids after the burst" "$T/out-$c" "$T/ref-$c"
	[ "$(hits "ctl delay frame 1 (reply)")" -gt "$held" ] || fail "case $c: the hook did not hold a reply"
	echo "case $c: $(ntok "$T/out-$c") tokens and the end after the node thread was held 1.5 s ($(($(now_ms) - t0)) ms)"
	: >"$T/fault"
done
