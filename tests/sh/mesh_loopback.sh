#!/bin/bash
# tests/sh/mesh_loopback.sh: real `shoal node` processes on 127.0.0.1.
#
#  1. 4 peers (own state dirs, ephemeral ports, seeded with peer 1) agree
#     on the view (4 alive everywhere) within 5 s of all listening;
#  2. kill -9 of peer 3: the others mark it dead within the failure timeout;
#  3. restart it: same id, higher incarnation, alive, exactly one entry
#     (no ghost twin);
#  4. a peer with another cluster key never appears in any view;
#  5. a client that HAS the key sends garbage and truncated messages to
#     peer 1 (tests/helpers/ctl_poke): dropped with a log line, status still
#     answers, the view is unchanged;
#  6. SIGTERM of peer 4: a graceful leave, seen as "left".
# Also: no key -> refuses to start with advice; records carry measured
# links; an --insecure node answers `shoal status` without a key; a peer
# of another cluster name is shown as incompatible, with the reason.
# JSON is read with tests/helpers/viewcheck (a check program; no python or jq).
# Gossip base period 50 ms: protocol period 250 ms, suspicion timeout
# 4 x ceil(log2(5)) x 250 ms = 3 s, so "dead" is due after ~4 s; we allow 15.
set -u
. "$(dirname "$0")/lib.sh"
POKE=$BD/tests/helpers/ctl_poke
# all_see N STATE NAME... : every listed node sees N peers in STATE
all_see() {
	local want=$1 st=$2 n
	shift 2
	for n in "$@"; do
		status "$n" || return 1
		[ "$("$VC" "$T/st-$n.json" count "$st")" = "$want" ] || return 1
	done
}

"$B" key new "$T/k" >/dev/null || fail "shoal key new"
"$B" key new "$T/other" >/dev/null || fail "shoal key new (other)"

# 0. no key and no --insecure: refuse with advice
if "$B" node --state-dir "$T/nokey" --listen 127.0.0.1:0 --no-mdns >"$T/nokey.log" 2>&1; then
	fail "node without a key started"
fi
grep -q "shoal key new" "$T/nokey.log" || fail "no advice on how to make a key"

# 1. four peers agree
start n1 ""
SEED=$(ep n1)
t0=$(now_ms)
for n in n2 n3 n4; do start $n "" --peer "$SEED"; done
# the 5 s are the gossip's: they begin once every peer listens (on a
# loaded machine a node's start-up alone, its compute probe included, has
# taken seconds)
for n in n2 n3 n4; do ep $n >/dev/null; done
t1=$(now_ms)
wait_for 5 all_see 4 alive n1 n2 n3 n4 || fail "4 peers did not agree within 5 s of all listening"
echo "agreed on 4 alive peers in $(($(now_ms) - t1)) ms after all listened ($(($(now_ms) - t0)) ms after the starts)"
"$VC" "$T/st-n1.json" schema || fail "status JSON lacks documented fields"
ID3=$("$VC" "$T/st-n1.json" id n3)
INC3=$("$VC" "$T/st-n1.json" inc n3)
for n in n2 n3 n4; do
	[ "$("$VC" "$T/st-$n.json" id n3)" = "$ID3" ] || fail "$n disagrees on n3's id"
done

# 2. kill -9 one
stop n3
t0=$(now_ms)
# A peer must show n3 dead; dead entries are kept for 8 suspicion timeouts
# (16 s here), so an entry that vanishes before it was seen dead is a bug
# (it was one: net/swim.c reaped in the tick that declared the death).
declare -A SAW_DEAD
dead_seen() {
	local ok=1 st
	for n in n1 n2 n4; do
		status $n || return 1
		st=$("$VC" "$T/st-$n.json" state n3)
		[ "$st" = dead ] && SAW_DEAD[$n]=1
		[ "$st" = dead ] || { [ "$st" = none ] && [ -n "${SAW_DEAD[$n]:-}" ]; } || ok=0
		[ "$st" = none ] && [ -z "${SAW_DEAD[$n]:-}" ] &&
			fail "$n dropped n3 before showing it dead"
	done
	[ $ok = 1 ]
}
wait_for 15 dead_seen || fail "n3 not marked dead within 15 s"
echo "n3 marked dead by all in $(($(now_ms) - t0)) ms"

# 3. restart it: same id, alive, no ghost
t0=$(now_ms)
start n3 "" --peer "$SEED"
back() {
	all_see 4 alive n1 n2 n3 n4 || return 1
	for n in n1 n2 n3 n4; do
		[ "$("$VC" "$T/st-$n.json" count all)" = 4 ] || return 1
		[ "$("$VC" "$T/st-$n.json" named n3)" = 1 ] || return 1
	done
}
wait_for 10 back || fail "restarted n3 not back as itself (or a ghost remains)"
[ "$("$VC" "$T/st-n1.json" id n3)" = "$ID3" ] || fail "restarted n3 has a new id"
INC3B=$("$VC" "$T/st-n1.json" inc n3)
[ "$INC3B" -gt "$INC3" ] || fail "incarnation did not grow ($INC3 -> $INC3B)"
echo "n3 back as itself in $(($(now_ms) - t0)) ms (incarnation $INC3 -> $INC3B)"

# 4. another cluster key never appears, and both sides say so within 3 s
#    of x1's start, naming the other's address and both fingerprints
FPK=$("$B" key fingerprint "$T/k") || fail "shoal key fingerprint"
FPO=$("$B" key fingerprint "$T/other") || fail "shoal key fingerprint (other)"
KEY=$T/other start x1 "" --peer "$SEED"
ep x1 >/dev/null
X1=$(ep x1)
t0=$(now_ms)
told() {
	grep "key mismatch: the peer at .*(control tcp://$X1,.* holds key fingerprint $FPO; ours is key fingerprint $FPK" \
		"$T/n1.log" >/dev/null &&
		grep "key mismatch: the peer at tcp://$SEED .* holds key fingerprint $FPK; ours is key fingerprint $FPO" \
			"$T/x1.log" >/dev/null
}
wait_for 3 told || fail "the key mismatch was not told on both sides within 3 s of x1's start: $(grep -h "key mismatch" "$T/n1.log" "$T/x1.log")"
echo "key mismatch told on both sides in $(($(now_ms) - t0)) ms"
sleep 2
for n in n1 n2 n3 n4; do
	status $n || fail "status of $n"
	[ "$("$VC" "$T/st-$n.json" named x1)" = 0 ] || fail "x1 (other key) appears in $n's view"
	[ "$("$VC" "$T/st-$n.json" count all)" = 4 ] || fail "$n's view changed size"
done
status x1 "$T/other" || fail "status of x1 with its own key"
[ "$("$VC" "$T/st-x1.json" count all)" = 1 ] || fail "x1 sees peers of another cluster"
if "$B" status --state-dir "$T/n1" --key "$T/other" --timeout-ms 1000 >/dev/null 2>&1; then
	fail "status with the wrong key was answered"
fi
grep -q "handshake failed\|refused a client" "$T/n1.log" || fail "n1 did not log the refused key"
echo "other-key peer kept out"
# links: n1 has been up for seconds; its record must carry measured links
status n2 || fail "status of n2"
[ "$("$VC" "$T/st-n2.json" links n1)" -ge 2 ] || fail "n1's record has no measured links"

# an open (--insecure) node answers a status without a key
"$B" node --state-dir "$T/open" --name open --listen 127.0.0.1:0 --no-mdns --insecure \
	--gossip-ms $GOSSIP_MS >>"$T/open.log" 2>&1 &
PID[open]=$!
ep open >/dev/null
"$B" status --state-dir "$T/open" --json >"$T/st-open.json" 2>>"$T/status.log" ||
	fail "status of an insecure node"
grep -q '"insecure": true' "$T/st-open.json" || fail "insecure node does not say so"

# a peer of another cluster name (same key) is in the view, left out of
# planning, and status says why
start c1 "" --cluster elsewhere --peer "$SEED"
incompatible() {
	status n1 || return 1
	case "$("$VC" "$T/st-n1.json" compat c1)" in "no: "*cluster*) return 0 ;; esac
	return 1
}
wait_for 5 incompatible || fail "c1 (cluster 'elsewhere') not shown as incompatible"
"$B" status --state-dir "$T/n1" --key "$T/k" >"$T/status.txt" 2>>"$T/status.log" ||
	fail "text status"
grep -q "left out of planning: .*cluster" "$T/status.txt" || fail "text status does not say why"
# the link matrix is labelled by peer name, rows and columns
sed -n '/^links (row -> column)/,$p' "$T/status.txt" >"$T/matrix.txt"
grep -q "^n1 " "$T/matrix.txt" && sed -n 2p "$T/matrix.txt" | grep -q " n1" ||
	fail "the link matrix is not labelled by name: $(cat "$T/matrix.txt")"
stop c1 TERM
echo "incompatible peer shown with its reason"

# 5. garbage from a keyed client
sleep 1 # let c1's leave settle
status n1 && "$VC" "$T/st-n1.json" summary >"$T/before"
"$POKE" "tcp://$(ep n1)" "$T/k" >"$T/poke.out" 2>&1 ||
	fail "node did not answer after the garbage corpus: $(cat "$T/poke.out")"
cat "$T/poke.out"
kill -0 "${PID[n1]}" || fail "n1 died"
status n1 || fail "status after garbage"
"$VC" "$T/st-n1.json" summary >"$T/after"
cmp -s "$T/before" "$T/after" || fail "view changed after garbage: $(diff "$T/before" "$T/after")"
grep -q "dropped" "$T/n1.log" || fail "no log line for dropped messages"

# 6. graceful leave
stop n4 TERM
rc=$?
[ $rc = 0 ] || fail "n4 did not exit cleanly on SIGTERM (rc $rc)"
left_seen() {
	for n in n1 n2 n3; do
		status $n || return 1
		[ "$("$VC" "$T/st-$n.json" state n4)" = left ] || return 1
	done
}
wait_for 5 left_seen || fail "n4's leave not seen as left"
echo "graceful leave seen"
echo "PASS"
exit 0
