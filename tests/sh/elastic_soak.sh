#!/bin/bash
# tests/sh/elastic_soak.sh: 20 random kill -9 / restart cycles of peers that
# own no request, while requests run without pause through two owners
# (issue 9, acceptance 5). Five peers with the trained dense model at
# --mem-limit 11M (any 3 hold it); o1 and o2 own the requests, v1-v3 are
# killed in turn at random moments and restarted after a random delay
# (same state directory: the same id, a new incarnation). Every request
# must complete with the ids of a single-peer run: greedy through o1,
# seeded (temp 0.8, seed 11) through o2. CYCLES=N overrides the 20,
# SOAK_SEED=N the random cycles (7).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
EXP=$DATA/models/expected/austen-dense-q8_0.json
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
CYCLES=${CYCLES:-20}
CTX=256
NODE=(--mem-limit 11M --ctx $CTX)
NC=$("$PC" "$EXP" ncases)
[ "$NC" -ge 1 ] || fail "no cases in $EXP"
for i in $(seq 0 $((NC - 1))); do
	"$PC" "$EXP" prompt "$i" >"$T/p-$i"
	"$B" run "$DENSE" -p "$(cat "$T/p-$i")" -n 64 --ctx $CTX --temp 0 --ids >"$T/lg-$i" 2>/dev/null ||
		fail "local greedy run $i"
	"$B" run "$DENSE" -p "$(cat "$T/p-$i")" -n 64 --ctx $CTX --temp 0.8 --seed 11 --ids \
		>"$T/ls-$i" 2>/dev/null || fail "local seeded run $i"
done

start o1 "$DENSE" "${NODE[@]}"
SEED=$(ep o1)
for n in o2 v1 v2 v3; do start $n "$DENSE" "${NODE[@]}" --peer "$SEED"; done
wait_for 30 servable_all 3 o1 o2 v1 v2 v3 || fail "no common plan on 5 peers"

# client LABEL OWNER KIND ARGS...: requests one after another until $T/stop
# exists; each result is checked against the local run of its prompt
client() {
	local label=$1 owner=$2 kind=$3 i=0 ok=0 bad=0
	shift 3
	while [ ! -e "$T/stop" ]; do
		local c=$((i % NC)) out="$T/$label-$i"
		if "$B" run --peer "$(ep "$owner")" --key "$KEY" -p "$(cat "$T/p-$c")" -n 64 --ids "$@" \
			>"$out" 2>"$out.err" && cmp -s "$out" "$T/$kind-$c"; then
			ok=$((ok + 1))
		else
			bad=$((bad + 1))
			echo "request $i (case $c): $(head -c 300 "$out.err")" >>"$T/$label.bad"
		fi
		i=$((i + 1))
		echo "$ok $bad" >"$T/$label.count"
	done
	echo "$ok $bad" >"$T/$label.count"
}
# both clients have at least 5 good requests (a slow build, e.g. under
# ASan, runs fewer in the cycles' time: they go on until then)
enough() {
	local a b
	read -r a b <"$T/g.count" 2>/dev/null || return 1
	[ "$a" -ge 5 ] || return 1
	read -r a b <"$T/s.count" 2>/dev/null || return 1
	[ "$a" -ge 5 ]
}
client g o1 lg --temp 0 &
CG=$!
client s o2 ls --temp 0.8 --seed 11 &
CS=$!

RANDOM=${SOAK_SEED:-7} # the same cycles every time
t0=$(now_ms)
for c in $(seq "$CYCLES"); do
	v=v$((RANDOM % 3 + 1))
	sleep "0.$((RANDOM % 8 + 2))"
	stop "$v"
	sleep "0.$((RANDOM % 8 + 2))"
	start "$v" "$DENSE" "${NODE[@]}" --peer "$SEED"
done
wait_for 30 servable_all 3 o1 o2 v1 v2 v3 || fail "no common plan after the cycles"
wait_for 90 enough || true # the count check below says what was short
sleep 1
touch "$T/stop"
wait $CG $CS
read -r gok gbad <"$T/g.count"
read -r sok sbad <"$T/s.count"
echo "soak: $CYCLES kill -9/restart cycles in $(($(now_ms) - t0)) ms; greedy requests $gok ok, $gbad lost or wrong; seeded $sok ok, $sbad lost or wrong"
echo "pauses replayed: $(cat "$T"/o1.log "$T"/o2.log | grep -c 'replaying')"
[ "$gbad" = 0 ] && [ "$sbad" = 0 ] || { cat "$T"/*.bad; fail "requests were lost or wrong"; }
[ "$gok" -ge 5 ] && [ "$sok" -ge 5 ] || fail "too few requests ran ($gok, $sok)"
# epochs only grow through all of it (the owners are never restarted)
epochs_grow "$T/o1.log" "$T/o2.log" || fail "a plan epoch went down or recurred"
echo "plan epochs on o1: $(grep -c ' cluster: plan epoch ' "$T/o1.log") plans, last $(grep ' cluster: plan epoch ' "$T/o1.log" | tail -1 | sed 's/.*plan epoch \([0-9]*\).*/\1/')"
