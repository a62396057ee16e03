#!/bin/bash
# tests/sh/node_batch.sh: what a real `shoal node` does with concurrent
# sessions (runtime/node/serve_data.c), against single-peer runs.
#
#  1. Batching: 3 dense peers (--mem-limit 11M --ctx 256: 3 stages), two
#     greedy sessions at once through the same owner. Both outputs equal
#     local `shoal run`; every stage ran batches with rows of both
#     sessions (batched_runs > 0) and sent fewer HIDDEN frames per hop than
#     the sessions' steps together.
#  2. Experts both ways: 2 peers with a 6-layer MoE fixture at --mem-limit
#     8M --ctx 512 (2 stages) and --spread-experts, so each stage calls experts held
#     by the other peer while that peer's own stage is busy; 4 concurrent
#     runs (--sessions 4), 2 owned by each peer. Every run equals the
#     single-peer run and no expert wait reached its timeout (the
#     expert_timeouts counters of both stages stay 0, and each peer's
#     expert server answered requests).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"

"$B" key new "$T/k" >/dev/null || fail "shoal key new"
counter() { "$PC" "$T/st-$1.json" data "$2"; } # counter NAME OBJ.FIELD (after status NAME)

# 1. two sessions through 3 stages
start d1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep d1)
start d2 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
start d3 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
wait_for 20 servable_all 3 d1 d2 d3 || fail "no servable 3-stage plan within 20 s"
STAGES=()
for i in 0 1 2; do STAGES+=("$("$PC" "$T/st-d1.json" stage "$i")"); done
echo "3 stages: ${STAGES[*]}"
N=120
PA="It is a truth universally acknowledged"
PB="Emma Woodhouse, handsome, clever, and rich"
"$B" run "$DENSE" -p "$PA" -n $N --temp 0 --ids >"$T/l-a" 2>/dev/null || fail "local run A"
"$B" run "$DENSE" -p "$PB" -n $N --temp 0 --ids >"$T/l-b" 2>/dev/null || fail "local run B"
declare -A H0
for n in "${STAGES[@]}"; do
	status "$n" || fail "status $n"
	H0[$n]=$(($(counter "$n" stage.hidden_sent) + $(counter "$n" stage.tokens_sent)))
done
"$B" run --peer "$SEED" --key "$T/k" -p "$PA" -n $N --temp 0 --ids >"$T/r-a" 2>"$T/e-a" &
ra=$!
"$B" run --peer "$SEED" --key "$T/k" -p "$PB" -n $N --temp 0 --ids >"$T/r-b" 2>"$T/e-b" &
rb=$!
wait $ra || fail "remote run A: $(cat "$T/e-a")"
wait $rb || fail "remote run B: $(cat "$T/e-b")"
same "session A's ids" "$T/r-a" "$T/l-a"
same "session B's ids" "$T/r-b" "$T/l-b"
# Each session's steps: one prefill frame (prompts < 32 tokens) and N - 1
# decode steps, unless it stopped early at an end token.
STEPS=$(($(wc -w <"$T/l-a") + $(wc -w <"$T/l-b")))
for n in "${STAGES[@]}"; do
	status "$n" || fail "status $n"
	sent=$(($(counter "$n" stage.hidden_sent) + $(counter "$n" stage.tokens_sent) - ${H0[$n]}))
	batched=$(counter "$n" stage.batched_runs)
	echo "stage $n: $sent frames out for $STEPS session steps, $batched runs with rows of both sessions"
	[ "$batched" -gt 0 ] || fail "stage $n never ran rows of two sessions together"
	[ "$sent" -lt "$STEPS" ] || fail "stage $n sent $sent frames for $STEPS steps: no batching"
done
echo "batching: both sessions equal local runs; every hop carried rows of both"
stop_all

# 2. two peers that serve each other's experts, 4 concurrent runs
MOE6=$T/moe6.gguf
moe_fixture 6 "$MOE6"
start x1 "$MOE6" --mem-limit 8M --ctx 512 --sessions 4 --spread-experts
SEED=$(ep x1)
start x2 "$MOE6" --mem-limit 8M --ctx 512 --sessions 4 --spread-experts --peer "$SEED"
both_ways() { servable_all 2 x1 x2 && [ "$("$PC" "$T/st-x1.json" spread)" -ge 2 ]; }
wait_for 20 both_ways || fail "no servable 2-stage MoE plan with experts on both peers within 20 s"
EPS=("$SEED" "$(ep x2)")
PROMPTS=("hello world" "the quick brown fox" "once upon a time" "it was the best of times")
pids=()
for i in 0 1 2 3; do
	"$B" run "$MOE6" -p "${PROMPTS[$i]}" -n 24 --temp 0 --ids >"$T/xl-$i" 2>/dev/null || fail "local MoE run $i"
done
for i in 0 1 2 3; do
	"$B" run --peer "${EPS[$((i % 2))]}" --key "$T/k" -p "${PROMPTS[$i]}" -n 24 --temp 0 --ids \
		>"$T/xr-$i" 2>"$T/xe-$i" &
	pids+=($!)
done
for i in 0 1 2 3; do wait "${pids[$i]}" || fail "remote MoE run $i: $(cat "$T/xe-$i")"; done
for i in 0 1 2 3; do same "MoE run $i" "$T/xr-$i" "$T/xl-$i"; done
for n in x1 x2; do
	status "$n" || fail "status $n"
	to=$(counter "$n" stage.expert_timeouts)
	served=$(counter "$n" experts.expert_served)
	echo "peer $n: stage sent $(counter "$n" stage.expert_reqs) expert requests, $to timed out; its expert server answered $served"
	[ "$to" = 0 ] || fail "peer $n: $to expert waits reached the timeout"
	[ "$served" != none ] && [ "$served" -gt 0 ] || fail "peer $n's expert server answered nothing"
done
echo "experts both ways: 4 concurrent runs equal single-peer runs, no expert wait timed out"
echo "PASS"
