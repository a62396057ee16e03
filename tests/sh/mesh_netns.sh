#!/bin/bash
# tests/sh/mesh_netns.sh: real mDNS between emulated hosts.
#
# Three network namespaces on one bridge, each with its own dbus-daemon
# and avahi-daemon (tests/sh/netns_lib.sh); a `shoal node` per host with NO
# seeds finds the others through DNS-SD and all three agree on a view of 3
# alive peers. A fourth host without avahi runs a node that logs once that
# mDNS is unavailable and keeps working. Then `status --peer HOST` across
# hosts, and kill -9 / restart of host 3: dead through gossip although
# mDNS still lists it, back as itself. Last, host 1's avahi-daemon goes
# away: its node notices, keeps working and exits cleanly. Needs root, ip, dbus-daemon and
# avahi-daemon: otherwise SKIP (77), except under CI=true, where a skipped
# namespace test is a failure (1).
set -u
skip() {
	echo "SKIP: $*"
	[ "${CI:-}" = true ] && exit 1
	exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
for t in ip dbus-daemon avahi-daemon; do
	command -v "$t" >/dev/null 2>&1 || skip "$t is not installed"
done
B=${SHOAL_BIN:-./shoal}
BD=${SHOAL_BUILDDIR:-.}
SRC=${SHOAL_SRCDIR:-$(dirname "$0")/..}
VC=$BD/tests/helpers/viewcheck
NL_PFX=shm$$
. "$SRC/tests/sh/netns_lib.sh"
trap nl_down EXIT
ip netns add "${NL_PFX}probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "${NL_PFX}probe"

fail() {
	echo "FAIL: $*"
	for f in "$NL_STATE"/*.log "$NL_STATE"/h*/avahi.log; do
		[ -f "$f" ] && { echo "---- $f"; tail -n 20 "$f"; }
	done
	for f in "$NL_STATE"/st*.json; do [ -f "$f" ] && { echo "---- $f"; "$VC" "$f" summary; }; done
	exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

t_start=$(now_ms)
nl_up 4 || fail "namespaces"
# hosts 1-3 get mDNS; host 4 has none (no bus, no avahi)
NL_N=3 nl_mdns_up || fail "dbus/avahi"
echo "namespaces and daemons up in $(($(now_ms) - t_start)) ms"
"$B" key new "$NL_STATE/k" >/dev/null || fail "shoal key new"

t0=$(now_ms)
declare -A PID
node() { # node I: start the peer of host I (no seeds)
	nl_spawn "$1" "$B" node --state-dir "$NL_STATE/s$1" --name "host$1" --listen 0.0.0.0:47470 \
		--key "$NL_STATE/k" --gossip-ms 50 >>"$NL_STATE/n$1.log" 2>&1
	PID[$1]=$NL_PID
}
for i in 1 2 3 4; do node $i; done
# status runs inside each namespace, through its loopback
seen() {
	local i
	for i in 1 2 3; do
		nl_exec $i "$B" status --state-dir "$NL_STATE/s$i" --key "$NL_STATE/k" --json \
			--timeout-ms 1000 >"$NL_STATE/st$i.json" 2>>"$NL_STATE/status.log" || return 1
		[ "$("$VC" "$NL_STATE/st$i.json" count alive)" = 3 ] || return 1
	done
}
deadline=$(($(now_ms) + 20000))
until seen; do
	[ "$(now_ms)" -lt $deadline ] || fail "hosts 1-3 did not find each other through mDNS in 20 s"
	sleep 0.25
done
echo "3 hosts found each other through mDNS in $(($(now_ms) - t0)) ms"
# no seeds were given: every join started from an mDNS find (a peer found
# by another needs no find of its own: the join's push-pull tells it all)
cat "$NL_STATE"/n[123].log | grep -q "mDNS found peer" || fail "no peer was found through mDNS"
for i in 1 2 3; do
	for j in 1 2 3; do
		[ "$("$VC" "$NL_STATE/st$i.json" state host$j)" = alive ] || fail "host$i: host$j"
	done
done
"$VC" "$NL_STATE/st1.json" schema || fail "status JSON"
# host 4: no avahi -> one line, still serving
[ "$(grep -c "mDNS unavailable" "$NL_STATE/n4.log")" = 1 ] ||
	fail "host4 should log mDNS unavailable once"
nl_exec 4 "$B" status --state-dir "$NL_STATE/s4" --key "$NL_STATE/k" --json --timeout-ms 1000 \
	>"$NL_STATE/st4.json" || fail "host4 does not answer status"
[ "$("$VC" "$NL_STATE/st4.json" count alive)" = 1 ] || fail "host4 should be alone"
echo "host without avahi: logged once, kept working"

# `--peer HOST` (default port 47470) from inside host 1
nl_exec 1 "$B" status --peer "$(nl_ip 2)" --key "$NL_STATE/k" --json --timeout-ms 2000 \
	>"$NL_STATE/st-peer.json" || fail "status --peer $(nl_ip 2)"
[ "$("$VC" "$NL_STATE/st-peer.json" count alive)" = 3 ] || fail "host2's view via --peer"

# Liveness comes from gossip, not from mDNS (whose caches keep host3 for
# minutes): kill -9 host3's node, the others mark it dead; restart it, it
# is back under the same id.
ID3=$("$VC" "$NL_STATE/st1.json" id host3)
kill -9 "${PID[3]}"
wait "${PID[3]}" 2>/dev/null
t0=$(now_ms)
dead3() {
	local i
	for i in 1 2; do
		nl_exec $i "$B" status --state-dir "$NL_STATE/s$i" --key "$NL_STATE/k" --json \
			--timeout-ms 1000 >"$NL_STATE/st$i.json" 2>>"$NL_STATE/status.log" || return 1
		[ "$("$VC" "$NL_STATE/st$i.json" state host3)" = dead ] || return 1
	done
}
deadline=$(($(now_ms) + 15000))
until dead3; do
	[ "$(now_ms)" -lt $deadline ] || fail "host3 not marked dead in 15 s"
	sleep 0.25
done
echo "host3 marked dead in $(($(now_ms) - t0)) ms"
t0=$(now_ms)
node 3
deadline=$(($(now_ms) + 15000))
until seen; do
	[ "$(now_ms)" -lt $deadline ] || fail "restarted host3 not alive again in 15 s"
	sleep 0.25
done
for i in 1 2 3; do
	[ "$("$VC" "$NL_STATE/st$i.json" id host3)" = "$ID3" ] || fail "host3 came back with a new id"
	[ "$("$VC" "$NL_STATE/st$i.json" named host3)" = 1 ] || fail "a ghost of host3 on host$i"
done
echo "host3 back as itself in $(($(now_ms) - t0)) ms"
# link probes crossed hosts (source-bound, per endpoint pair): host1 has
# been up for seconds, its record carries measured links
[ "$("$VC" "$NL_STATE/st2.json" links host1)" -ge 1 ] || fail "no measured links in host1's record"
# host 1's mDNS daemon goes away: its node says so, keeps serving, and
# still stops cleanly (exit 0) on SIGTERM
kill "$(cat "$NL_STATE/h1/avahi.pid")"
sleep 1.5
kill -0 "${PID[1]}" 2>/dev/null || fail "host1's node died with its mDNS daemon"
grep -q "mDNS daemon went away\|mDNS registration failed\|mDNS browse error" "$NL_STATE/n1.log" ||
	fail "host1 did not notice its mDNS daemon went away"
seen || fail "views changed after host1's mDNS daemon went away"
kill -TERM "${PID[1]}"
wait "${PID[1]}"
rc=$?
[ $rc = 0 ] || fail "host1's node exited with $rc after SIGTERM"
echo "mDNS daemon gone: noticed, kept serving, clean exit"
echo "PASS in $(($(now_ms) - t_start)) ms"
