#!/bin/bash
# tests/sh/thread_policy.sh: which threads of a peer may take a core from
# which (base/thread.h). On Linux, a `shoal node` with a model and 2
# threads: its control thread and ZeroMQ's I/O thread are background
# (SCHED_BATCH: their wake-ups never preempt a stage mid-step), and the
# threads that compute (the data thread, the expert thread, the engine's
# worker) keep the default policy although the control thread started
# them or the engine; a request through it gives the local run's ids.
set -u
. "$(dirname "$0")/lib.sh"
M=$DATA/models/austen-dense-q8_0.gguf
[ "$(uname -s)" = Linux ] || skip "thread policies are Linux's here"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start p1 "$M" --ctx 256 --threads 2
wait_for 30 servable_all 1 p1 || fail "no servable plan within 30 s"
P="It is a truth universally acknowledged"
"$B" run --peer "$(ep p1)" --key "$KEY" -p "$P" -n 8 --temp 0 --ids >"$T/remote" 2>"$T/remote.err" ||
	fail "remote run: $(cat "$T/remote.err")"
"$B" run "$M" -p "$P" -n 8 --temp 0 --ids >"$T/local" 2>/dev/null || fail "local run"
same "ids through the node" "$T/remote" "$T/local"
# policy NAME...: the scheduling policy of each thread of p1 named NAME
# (/proc's stat field 41: 0 SCHED_OTHER, 3 SCHED_BATCH), one a line
policy() {
	local pid=${PID[p1]} t
	for t in /proc/"$pid"/task/*; do
		[ "$(cat "$t/comm")" = "$1" ] || continue
		sed 's/.*) //' "$t/stat" | awk '{ print $39 }'
	done
}
pid=${PID[p1]}
main=$(sed 's/.*) //' "/proc/$pid/task/$pid/stat" | awk '{ print $39 }')
[ "$main" = 3 ] || fail "the control thread's policy is $main, not SCHED_BATCH (3)"
for name in ZMQbg/IO/0 shoal-accept; do
	got=$(policy "$name" | sort -u)
	[ "$got" = 3 ] || fail "thread $name: policy '$got', not SCHED_BATCH (3)"
done
for name in shoal-data shoal-experts shoal-worker; do
	got=$(policy "$name" | sort -u)
	[ "$got" = 0 ] || fail "thread $name: policy '$got', not SCHED_OTHER (0)"
done
echo "control, ZeroMQ I/O and accept threads SCHED_BATCH; data, expert and worker threads SCHED_OTHER"
echo PASS
