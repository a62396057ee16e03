#!/bin/bash
# tests/sh/partition_netns.sh: a network partition between emulated hosts
# (issue 9, acceptance 6). Five network namespaces on one bridge, a
# `shoal node` per host with the trained dense model at --mem-limit 11M
# (any 3 hold it), seeded with --peer (no mDNS). Hosts 1-2 are moved to a
# second bridge: no traffic passes between the halves. The majority
# (hosts 3-5) re-plans without the others and serves a run with the ids of
# a single-peer run; the minority (hosts 1-2) cannot hold the model: its
# status says why, and a run through host 1 is refused with the figures.
# Once the bridges are joined again, all five have one view and one
# servable plan, and a run through host 1 is served. Needs root and ip:
# otherwise SKIP (77), except under CI=true (1).
set -u
NL_PFX=spn$$
. "$(dirname "$0")/lib.sh"
nl_require
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
t_start=$(now_ms)
nl_up 5 || fail "namespaces"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
NODE=(--mem-limit 11M --ctx 256 --no-mdns)
P="It is a truth universally acknowledged"
"$B" run "$DENSE" -p "$P" -n 16 --ctx 256 --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
via() { # via HOST OUT: a run from host HOST through its own node
	nl_exec "$1" "$B" run --peer "$(nl_ip "$1")" --key "$KEY" -p "$P" -n 16 --temp 0 --ids \
		--timeout-ms 10000 >"$2" 2>"$2.err"
}

start_host 1 h1 "$DENSE" "${NODE[@]}"
for i in 2 3 4 5; do start_host $i h$i "$DENSE" "${NODE[@]}" --peer "$(nl_ip 1):47470"; done
wait_for 30 servable_all 3 h1 h2 h3 h4 h5 || fail "no common plan on 5 hosts"
echo "5 hosts: one servable 3-stage plan in $(($(now_ms) - t_start)) ms"

nl_partition 1 2 || fail "partition"
t0=$(now_ms)
majority_serves() {
	servable_all 3 h3 h4 h5 || return 1
	local i
	for i in 0 1 2; do
		case $("$PC" "$T/st-h3.json" stage $i) in host1 | host2 | none) return 1 ;; esac
	done
}
wait_for 30 majority_serves || fail "the majority did not re-plan without hosts 1-2"
echo "partition {1,2} | {3,4,5}: the majority serves a new plan after $(($(now_ms) - t0)) ms"
via 3 "$T/r-major" || fail "a run through host 3 in the majority: $(cat "$T/r-major.err")"
same "ids in the majority" "$T/r-major" "$T/l-ids"
minority_refuses() {
	local n
	for n in h1 h2; do
		status $n || return 1
		[[ "$("$PC" "$T/st-$n.json" servable)" == no*needs* ]] || return 1
	done
}
wait_for 30 minority_refuses || fail "the minority still serves or says no reason: $("$PC" "$T/st-h1.json" servable)"
echo "the minority says: $("$PC" "$T/st-h1.json" servable)"
if via 1 "$T/r-minor"; then fail "a run in the minority succeeded"; fi
grep -q "needs" "$T/r-minor.err" || fail "the minority's refusal has no figures: $(cat "$T/r-minor.err")"
echo "a run through host 1: $(cat "$T/r-minor.err")"

nl_heal || fail "heal"
t0=$(now_ms)
wait_for 60 servable_all 3 h1 h2 h3 h4 h5 || fail "no single view and plan after the partition healed"
echo "healed: one view, one servable plan on all 5 hosts after $(($(now_ms) - t0)) ms"
via 1 "$T/r-healed" || fail "a run through host 1 after healing: $(cat "$T/r-healed.err")"
same "ids after healing" "$T/r-healed" "$T/l-ids"
echo "PASS in $(($(now_ms) - t_start)) ms"
