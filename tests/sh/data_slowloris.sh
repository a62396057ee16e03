#!/bin/bash
# tests/sh/data_slowloris.sh: connections that know no cluster key do not
# delay a run (issue 9): 2 real `shoal node` peers with the trained dense
# model (--mem-limit 14M: 2 stages), 100 idle TCP connections held open on
# each peer's data port (reopened as the peers drop them: a slowloris)
# while the first run dials its data links through them. The run must
# finish within 30 s (a bound against hangs; a listener that read HELLOs
# one at a time, 2 s each, never admitted the links) with the ids of a
# local `shoal run`. Printed: the run's time with and without the idle
# connections (the latter on a fresh pair, so that it dials its links
# too), and each peer's fd count before, during and after the flood: the
# fds of dropped connections are closed.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
IDLE=100
[ -x "$PC" ] || skip "$PC not built"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
[ -d /proc/self/fd ] || skip "no /proc/PID/fd to count fds in"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"

P="It is a truth universally acknowledged"
"$B" run "$DENSE" -p "$P" -n 32 --temp 0 --ids >"$T/local" 2>/dev/null || fail "local run"

pair() { # pair A B: two peers on one 2-stage plan
	start "$1" "$DENSE" --mem-limit 14M --ctx 256
	start "$2" "$DENSE" --mem-limit 14M --ctx 256 --peer "$(ep "$1")"
	wait_for 20 servable_all 2 "$1" "$2" || fail "no servable 2-stage plan on $1, $2 within 20 s"
}
data_port() { # data_port NAME: its data port, from its status JSON
	status "$1" || fail "status $1"
	python3 - "$T/st-$1.json" <<'EOF'
import json, sys
for p in json.load(open(sys.argv[1]))["peers"]:
    if p["self"]:
        print(p["data_endpoints"][0]["address"].rsplit(":", 1)[1])
EOF
}
fds() { ls "/proc/$1/fd" | wc -l; }
timed_run() { # timed_run NAME OUT: a greedy run through NAME; its ms in $MS
	local t0 rc=0
	t0=$(now_ms)
	timeout 30 "$B" run --peer "$(ep "$1")" --key "$T/k" -p "$P" -n 32 --temp 0 --ids >"$2" \
		2>"$T/run-err" || rc=$?
	MS=$(($(now_ms) - t0))
	[ $rc = 0 ] || fail "run through $1 (rc $rc after $MS ms): $(cat "$T/run-err")"
}

# Without idle connections: a fresh pair, links dialled by the run.
pair a1 a2
timed_run a1 "$T/calm"
same "ids without idle connections" "$T/calm" "$T/local"
CALM=$MS
echo "run of 32 tokens without idle connections: $CALM ms"
stop_all

# With them: IDLE connections to each peer's data port, held open and
# reopened as they are dropped, until $T/stop appears.
pair s1 s2
PORTS=("$(data_port s1)" "$(data_port s2)")
[ -n "${PORTS[0]}" ] && [ -n "${PORTS[1]}" ] || fail "no data ports in status"
F0=("$(fds "${PID[s1]}")" "$(fds "${PID[s2]}")")
cat >"$T/hold.py" <<'EOF'
import os, select, socket, sys, time
n, ready, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ports = [int(p) for p in sys.argv[4:]]
held, opened, dropped = [], 0, 0
def dial(port):
    global opened
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    held.append((s, port))
    opened += 1
for port in ports:
    for _ in range(n):
        dial(port)
open(ready, "w").close()
end = time.time() + 120  # never outlive a broken test
redial, tick = [], time.time() + 0.25
while not os.path.exists(stop) and time.time() < end:
    r, _, _ = select.select([s for s, _ in held], [], [], max(0, tick - time.time()))
    for s in r:  # readable: an ERROR frame, EOF or a reset; the peer dropped it
        redial.append(next(p for t, p in held if t is s))
        held[:] = [(t, p) for t, p in held if t is not s]
        s.close()
        dropped += 1
    if time.time() >= tick:  # 4 times a second, not at once: no busy loop
        for port in redial:
            dial(port)
        redial, tick = [], time.time() + 0.25
for s, _ in held:
    s.close()
print(f"{opened} connections opened, {dropped} dropped by the peers")
EOF
python3 "$T/hold.py" "$IDLE" "$T/ready" "$T/stop" "${PORTS[@]}" >"$T/hold.out" 2>&1 &
HOLD=$!
wait_for 10 test -e "$T/ready" || fail "the idle connections were not opened"
sleep 0.3 # let the peers take them into their pending sets
F1=("$(fds "${PID[s1]}")" "$(fds "${PID[s2]}")")
timed_run s1 "$T/flood"
same "ids with $IDLE idle connections per peer" "$T/flood" "$T/local"
FLOOD=$MS
touch "$T/stop"
wait "$HOLD" || fail "the idle-connection holder failed: $(cat "$T/hold.out")"
sleep 2.5 # > handshake_ms: every pending connection is dropped
F2=("$(fds "${PID[s1]}")" "$(fds "${PID[s2]}")")
echo "run of 32 tokens with $IDLE idle connections on each data port: $FLOOD ms"
echo "idle connections: $(cat "$T/hold.out")"
for i in 0 1; do
	echo "peer s$((i + 1)) fds: ${F0[$i]} before, ${F1[$i]} during, ${F2[$i]} after the flood"
	[ "${F1[$i]}" -ge $((F0[i] + 32)) ] || fail "s$((i + 1)) did not hold the idle connections"
	# after: only the run's data links (and the session's sockets) remain
	[ "${F2[$i]}" -le $((F0[i] + 8)) ] || fail "s$((i + 1)) kept the fds of dropped connections"
done
