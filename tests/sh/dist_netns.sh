#!/bin/bash
# tests/sh/dist_netns.sh: distributed inference between emulated hosts whose
# peers find each other through mDNS only (no seeds).
#
# Three network namespaces on one bridge, each with its own dbus-daemon and
# avahi-daemon (tests/sh/lib.sh). 1. A `shoal node --model` per host with
# the trained dense model, --mem-limit 11M --ctx 256 (a 3-stage split, see
# tests/sh/dist_loopback.sh): every host sees a servable 3-stage plan, and
# `shoal run --peer HOST` from host 1 to each host prints the greedy ids
# and --logprobs 5 lines of the local single-peer run. 2. The same with a
# random MoE fixture and --spread-experts: one layer's experts on 2+
# peers, ids and logprobs equal. Needs root, ip, dbus-daemon and
# avahi-daemon: otherwise SKIP (77), except under CI=true (1).
set -u
NL_PFX=sdn$$
. "$(dirname "$0")/lib.sh"
nl_require
DENSE=$DATA/models/austen-dense-q8_0.gguf
EXP=$DATA/models/expected/austen-dense-q8_0.json
[ -x "$PC" ] || skip "$PC not built"

t_start=$(now_ms)
nl_up 3 || fail "namespaces"
NL_N=3 nl_mdns_up || fail "dbus/avahi"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
MOE=$T/moe.gguf
moe_fixture 4 "$MOE"

compare() { # compare MODEL PROMPT N K LABEL: host 1 asks each host in turn
	local m=$1 p=$2 n=$3 k=$4 j
	"$B" run "$m" -p "$p" -n "$n" --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
	"$B" run "$m" -p "$p" -n 6 --temp 0 --logprobs "$k" >"$T/l-lp" 2>/dev/null
	for j in 1 2 3; do
		nl_exec 1 "$B" run --peer "$(nl_ip $j)" --key "$T/k" -p "$p" -n "$n" --temp 0 \
			--ids >"$T/r-ids" 2>"$T/r-err" || fail "$5 run via host$j: $(cat "$T/r-err")"
		same "$5 ids via host$j" "$T/r-ids" "$T/l-ids"
		nl_exec 1 "$B" run --peer "$(nl_ip $j)" --key "$T/k" -p "$p" -n 6 --temp 0 \
			--logprobs "$k" >"$T/r-lp" 2>"$T/r-err" || fail "$5 logprobs via host$j"
		same "$5 logprobs via host$j" "$T/r-lp" "$T/l-lp"
	done
}

# 1. dense, 3 stages, found through mDNS
t0=$(now_ms)
for i in 1 2 3; do start_host $i d$i "$DENSE" --mem-limit 11M --ctx 256; done
wait_for 30 servable_all 3 d1 d2 d3 || fail "dense: no common servable plan in 30 s ($("$PC" "$T/st-d1.json" servable))"
echo "dense: 3-stage plan servable on 3 hosts (mDNS only) in $(($(now_ms) - t0)) ms"
grep -q "mDNS found peer" "$T"/d[123].log || fail "no peer was found through mDNS"
NC=$("$PC" "$EXP" ncases)
for c in $(seq 0 $((NC - 1))); do compare "$DENSE" "$("$PC" "$EXP" prompt "$c")" 24 5 "dense case $c"; done
echo "dense: $NC prompts x 3 owners, greedy ids and logprobs identical to one peer"
stop_all

# 2. MoE, experts spread
t0=$(now_ms)
for i in 1 2 3; do start_host $i m$i "$MOE" --mem-limit 100M --ctx 256 --spread-experts; done
wait_for 30 servable_all "" m1 m2 m3 || fail "MoE: no common servable plan in 30 s ($("$PC" "$T/st-m1.json" servable))"
SPREAD=$("$PC" "$T/st-m1.json" spread)
[ "$SPREAD" -ge 2 ] || fail "experts of no layer on 2+ peers (spread $SPREAD)"
echo "MoE: plan servable in $(($(now_ms) - t0)) ms, one layer's experts on $SPREAD peers"
compare "$MOE" "hello world" 12 3 "MoE"
echo "MoE: greedy ids and logprobs identical to one peer via every host"
echo "PASS in $(($(now_ms) - t_start)) ms"
