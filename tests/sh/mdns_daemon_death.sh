#!/bin/bash
# tests/sh/mdns_daemon_death.sh: avahi-daemon stops while lookups are in
# flight, and the node lives on.
#
# Two emulated hosts with mDNS (tests/sh/lib.sh). Host 2 publishes
# `_shoal._tcp` instances whose host names have no address, so host 1's
# node has resolves and address queries open; then host 1's avahi-daemon
# is killed. Avahi 0.8's compatibility layer reports the daemon's failure
# through a callback pointer it never initialised for such lookups; the
# node runs with MALLOC_PERTURB_ so that garbage is never zero by luck
# (before net/discovery_dnssd.c's invariant 3 it segfaulted here every
# few trials). Three trials, each with a fresh daemon and node: the node
# must stay up, say that mDNS went away, and exit 0 on SIGTERM. Needs
# root, ip, dbus-daemon, avahi-daemon and avahi-publish: otherwise SKIP
# (77), except under CI=true (1).
set -u
NL_PFX=smd$$
. "$(dirname "$0")/lib.sh"
nl_require
command -v avahi-publish >/dev/null 2>&1 || skip "avahi-publish is not installed (avahi-utils)"

nl_up 2 || fail "namespaces"
NL_N=2 nl_mdns_up || fail "dbus/avahi"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"

for trial in 1 2 3; do
	: >"$T/s1.log"
	MALLOC_PERTURB_=170 start_host 1 s1 ""
	nl_wait_file -f "$T/s1.log" "advertising" || fail "trial $trial: host1 did not advertise"
	pubs=""
	for k in 1 2 3 4; do
		nl_exec 2 timeout 4 avahi-publish -s -H "ghost$k-$trial.local" "ghost$k-$trial" \
			_shoal._tcp $((47470 + k)) v=1 cluster=default \
			id=0123456789abcdef0123456789abcde$k inc=1 open=0 >/dev/null 2>&1 &
		pubs="$pubs $!"
	done
	sleep 1 # host1 browses the ghosts and starts resolving them
	kill "$(cat "$T/h1/avahi.pid")"
	sleep 1
	kill -0 "${PID[s1]}" 2>/dev/null || fail "trial $trial: host1's node died with its mDNS daemon"
	grep -q "mDNS daemon went away\|mDNS registration failed\|mDNS browse error" "$T/s1.log" ||
		fail "trial $trial: host1 did not notice its mDNS daemon went away"
	status s1 || fail "trial $trial: host1 does not answer status"
	stop s1 TERM
	rc=$?
	[ $rc = 0 ] || fail "trial $trial: host1's node exited with $rc after SIGTERM"
	wait $pubs 2>/dev/null
	nl_avahi_start 1
	nl_wait_file -f "$T/h1/avahi.log" "Server startup complete" ||
		fail "trial $trial: avahi on host1 did not restart"
	echo "trial $trial: daemon gone with lookups in flight, node kept serving"
done
echo PASS
