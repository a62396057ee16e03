#!/bin/bash
# tests/sh/dist_netns.sh: distributed inference between emulated hosts whose
# peers find each other through mDNS only (no seeds).
#
# Three network namespaces on one bridge, each with its own dbus-daemon and
# avahi-daemon (tests/sh/netns_lib.sh). 1. A `shoal node --model` per host with
# the trained dense model, --mem-limit 11M --ctx 256 (a 3-stage split, see
# tests/sh/dist_loopback.sh): every host sees a servable 3-stage plan, and
# `shoal run --peer HOST` from host 1 to each host prints the greedy ids
# and --logprobs 5 lines of the local single-peer run. 2. The same with a
# random MoE fixture and --spread-experts: one layer's experts on 2+
# peers, ids and logprobs equal. Needs root, ip, dbus-daemon and
# avahi-daemon: otherwise SKIP (77), except under CI=true (1).
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
DATA=${SHOAL_DATA:-$SRC/tests/data}
PC=$BD/tests/helpers/plancheck
DENSE=$DATA/models/austen-dense-q8_0.gguf
EXP=$DATA/models/expected/austen-dense-q8_0.json
[ -x "$PC" ] || skip "$PC not built"
NL_PFX=sdn$$
. "$SRC/tests/sh/netns_lib.sh"
declare -A PID
cleanup() { # only our nodes: a bare `wait` would wait for the daemons
	for p in "${PID[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	nl_down
}
trap cleanup EXIT
ip netns add "${NL_PFX}probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "${NL_PFX}probe"

fail() {
	echo "FAIL: $*"
	for f in "$NL_STATE"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 20 "$f"; }; done
	exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
same() { cmp -s "$2" "$3" || { head -c 400 "$2"; echo; head -c 400 "$3"; fail "$1 differs"; }; }

t_start=$(now_ms)
nl_up 3 || fail "namespaces"
NL_N=3 nl_mdns_up || fail "dbus/avahi"
"$B" key new "$NL_STATE/k" >/dev/null || fail "shoal key new"
MOE=$NL_STATE/moe.gguf
"$BD/tests/helpers/gen_fixture" --arch qwen3moe --type Q8_0 --layers 4 --dim 128 --ff 256 --heads 4 \
	--kv-heads 2 --vocab 2048 --experts 8 --experts-used 2 --ff-exp 256 --ctx 512 --seed 5 \
	"$MOE" >/dev/null 2>&1 || fail "gen_fixture qwen3moe"

node() { # node I TAG MODEL ARGS...: the peer of host I, no seeds
	local i=$1 tag=$2 m=$3
	shift 3
	nl_spawn "$i" "$B" node --state-dir "$NL_STATE/$tag$i" --name "host$i" \
		--listen 0.0.0.0:47470 --key "$NL_STATE/k" --gossip-ms 50 --threads 1 \
		--model "$m" "$@" >>"$NL_STATE/$tag$i.log" 2>&1
	PID[$tag$i]=$NL_PID
}
servable() { # servable TAG NSTAGES: every host has the same servable plan
	local tag=$1 want=$2 i d=""
	for i in 1 2 3; do
		nl_exec $i "$B" status --state-dir "$NL_STATE/$tag$i" --key "$NL_STATE/k" --json \
			--timeout-ms 1000 >"$NL_STATE/st$i.json" 2>>"$NL_STATE/status.log" || return 1
		[ "$("$PC" "$NL_STATE/st$i.json" servable)" = yes ] || return 1
		[ -z "$want" ] || [ "$("$PC" "$NL_STATE/st$i.json" stages)" = "$want" ] || return 1
		[ -z "$d" ] && d=$("$PC" "$NL_STATE/st$i.json" digest)
		[ "$("$PC" "$NL_STATE/st$i.json" digest)" = "$d" ] || return 1
	done
}
wait_servable() { # wait_servable TAG NSTAGES SECONDS
	local deadline=$(($(now_ms) + $3 * 1000))
	until servable "$1" "$2"; do
		[ "$(now_ms)" -lt $deadline ] ||
			fail "$1: no common servable plan in $3 s ($("$PC" "$NL_STATE/st1.json" servable))"
		sleep 0.25
	done
}
compare() { # compare MODEL PROMPT N K LABEL: host 1 asks each host in turn
	local m=$1 p=$2 n=$3 k=$4 j
	"$B" run "$m" -p "$p" -n "$n" --temp 0 --ids >"$NL_STATE/l-ids" 2>/dev/null || fail "local run"
	"$B" run "$m" -p "$p" -n 6 --temp 0 --logprobs "$k" >"$NL_STATE/l-lp" 2>/dev/null
	for j in 1 2 3; do
		nl_exec 1 "$B" run --peer "$(nl_ip $j)" --key "$NL_STATE/k" -p "$p" -n "$n" --temp 0 \
			--ids >"$NL_STATE/r-ids" 2>"$NL_STATE/r-err" || fail "$5 run via host$j: $(cat "$NL_STATE/r-err")"
		same "$5 ids via host$j" "$NL_STATE/r-ids" "$NL_STATE/l-ids"
		nl_exec 1 "$B" run --peer "$(nl_ip $j)" --key "$NL_STATE/k" -p "$p" -n 6 --temp 0 \
			--logprobs "$k" >"$NL_STATE/r-lp" 2>"$NL_STATE/r-err" || fail "$5 logprobs via host$j"
		same "$5 logprobs via host$j" "$NL_STATE/r-lp" "$NL_STATE/l-lp"
	done
}

# 1. dense, 3 stages, found through mDNS
t0=$(now_ms)
for i in 1 2 3; do node $i d "$DENSE" --mem-limit 11M --ctx 256; done
wait_servable d 3 30
echo "dense: 3-stage plan servable on 3 hosts (mDNS only) in $(($(now_ms) - t0)) ms"
grep -q "mDNS found peer" "$NL_STATE"/d[123].log || fail "no peer was found through mDNS"
NC=$("$PC" "$EXP" ncases)
for c in $(seq 0 $((NC - 1))); do compare "$DENSE" "$("$PC" "$EXP" prompt "$c")" 24 5 "dense case $c"; done
echo "dense: $NC prompts x 3 owners, greedy ids and logprobs identical to one peer"
for i in 1 2 3; do kill -9 "${PID[d$i]}"; wait "${PID[d$i]}" 2>/dev/null; unset "PID[d$i]"; done

# 2. MoE, experts spread
t0=$(now_ms)
for i in 1 2 3; do node $i m "$MOE" --mem-limit 100M --ctx 256 --spread-experts; done
wait_servable m "" 30
SPREAD=$("$PC" "$NL_STATE/st1.json" spread)
[ "$SPREAD" -ge 2 ] || fail "experts of no layer on 2+ peers (spread $SPREAD)"
echo "MoE: plan servable in $(($(now_ms) - t0)) ms, one layer's experts on $SPREAD peers"
compare "$MOE" "hello world" 12 3 "MoE"
echo "MoE: greedy ids and logprobs identical to one peer via every host"
echo "PASS in $(($(now_ms) - t_start)) ms"
