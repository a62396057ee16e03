#!/bin/bash
# tests/sh/mesh_netns.sh: real mDNS between emulated hosts.
#
# Three network namespaces on one bridge, each with its own dbus-daemon
# and avahi-daemon (tests/sh/lib.sh); a `shoal node` per host with NO
# seeds finds the others through DNS-SD and all three agree on a view of 3
# alive peers. A fourth host without avahi runs a node that logs once that
# mDNS is unavailable and keeps working. Then `status --peer HOST` across
# hosts, and kill -9 / restart of host 3: dead through gossip although
# mDNS still lists it, back as itself. Last, host 1's avahi-daemon goes
# away: its node notices, keeps working and exits cleanly. Needs root, ip, dbus-daemon and
# avahi-daemon: otherwise SKIP (77), except under CI=true, where a skipped
# namespace test is a failure (1).
set -u
NL_PFX=shm$$
. "$(dirname "$0")/lib.sh"
nl_require

t_start=$(now_ms)
nl_up 4 || fail "namespaces"
# hosts 1-3 get mDNS; host 4 has none (no bus, no avahi)
NL_N=3 nl_mdns_up || fail "dbus/avahi"
echo "namespaces and daemons up in $(($(now_ms) - t_start)) ms"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"

t0=$(now_ms)
for i in 1 2 3 4; do start_host $i s$i ""; done
# status runs inside each namespace, through its loopback
seen() {
	local i
	for i in 1 2 3; do
		status s$i || return 1
		[ "$("$VC" "$T/st-s$i.json" count alive)" = 3 ] || return 1
	done
}
wait_for 20 seen || fail "hosts 1-3 did not find each other through mDNS in 20 s"
echo "3 hosts found each other through mDNS in $(($(now_ms) - t0)) ms"
# no seeds were given: every join started from an mDNS find (a peer found
# by another needs no find of its own: the join's push-pull tells it all)
cat "$T"/s[123].log | grep -q "mDNS found peer" || fail "no peer was found through mDNS"
for i in 1 2 3; do
	for j in 1 2 3; do
		[ "$("$VC" "$T/st-s$i.json" state host$j)" = alive ] || fail "host$i: host$j"
	done
done
"$VC" "$T/st-s1.json" schema || fail "status JSON"
# host 4: no avahi -> one line, still serving
[ "$(grep -c "mDNS unavailable" "$T/s4.log")" = 1 ] ||
	fail "host4 should log mDNS unavailable once"
status s4 || fail "host4 does not answer status"
[ "$("$VC" "$T/st-s4.json" count alive)" = 1 ] || fail "host4 should be alone"
echo "host without avahi: logged once, kept working"

# `--peer HOST` (default port 47470) from inside host 1
nl_exec 1 "$B" status --peer "$(nl_ip 2)" --key "$T/k" --json --timeout-ms 2000 \
	>"$T/st-peer.json" || fail "status --peer $(nl_ip 2)"
[ "$("$VC" "$T/st-peer.json" count alive)" = 3 ] || fail "host2's view via --peer"

# Liveness comes from gossip, not from mDNS (whose caches keep host3 for
# minutes): kill -9 host3's node, the others mark it dead; restart it, it
# is back under the same id.
ID3=$("$VC" "$T/st-s1.json" id host3)
stop s3
t0=$(now_ms)
dead3() {
	local i
	for i in 1 2; do
		status s$i || return 1
		[ "$("$VC" "$T/st-s$i.json" state host3)" = dead ] || return 1
	done
}
wait_for 15 dead3 || fail "host3 not marked dead in 15 s"
echo "host3 marked dead in $(($(now_ms) - t0)) ms"
t0=$(now_ms)
start_host 3 s3 ""
wait_for 15 seen || fail "restarted host3 not alive again in 15 s"
for i in 1 2 3; do
	[ "$("$VC" "$T/st-s$i.json" id host3)" = "$ID3" ] || fail "host3 came back with a new id"
	[ "$("$VC" "$T/st-s$i.json" named host3)" = 1 ] || fail "a ghost of host3 on host$i"
done
echo "host3 back as itself in $(($(now_ms) - t0)) ms"
# link probes crossed hosts (source-bound, per endpoint pair): host1 has
# been up for seconds, its record carries measured links
# (a probe round may still be on its way under load: wait for one)
links_ok() { status s2 && [ "$("$VC" "$T/st-s2.json" links host1)" -ge 1 ]; }
wait_for 10 links_ok || fail "no measured links in host1's record within 10 s"
# host 1's mDNS daemon goes away: its node says so, keeps serving, and
# still stops cleanly (exit 0) on SIGTERM
kill "$(cat "$T/h1/avahi.pid")"
sleep 1.5
kill -0 "${PID[s1]}" 2>/dev/null || fail "host1's node died with its mDNS daemon"
grep -q "mDNS daemon went away\|mDNS registration failed\|mDNS browse error" "$T/s1.log" ||
	fail "host1 did not notice its mDNS daemon went away"
seen || fail "views changed after host1's mDNS daemon went away"
stop s1 TERM
rc=$?
[ $rc = 0 ] || fail "host1's node exited with $rc after SIGTERM"
echo "mDNS daemon gone: noticed, kept serving, clean exit"
echo "PASS in $(($(now_ms) - t_start)) ms"
