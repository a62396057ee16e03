#!/bin/bash
# tests/sh/dist_loopback.sh: distributed inference through real `shoal node`
# processes on 127.0.0.1 (runtime/node/serve.h), against single-peer runs.
#
#  1. Dense: 3 peers with the trained austen model, --mem-limit 11M and
#     --ctx 256 (embedding 8.6 MiB + KV for 2 sessions leave room for at
#     most 2 of the 6 layers on a peer that holds the embedding or the tied
#     head, so 2 peers cannot hold it: `shoal plan` says so), plan with 3
#     stages, servable; for every prompt of the expected file, `shoal run
#     --peer` (each peer in turn owns a session) prints the same greedy ids
#     and the same --logprobs 5 lines as local `shoal run`; sampled text
#     (--temp 0.8 --seed 7) is identical too, and so are the greedy ids of
#     a --chat --system run (the owner renders the chat template). One
#     peer runs with --spin-us 0 (its data thread blocks at once), the
#     others with the default spin.
#  2. A peer with another model joins: it is left out of the plan, status
#     says why, the plan stays servable.
#  3. A client without the cluster key gets no answer; malformed RUN_REQ
#     messages (tests/helpers/run_poke) each get a RUN_END with a reason, and the
#     node still serves.
#  3b. Churn: a 4th dense peer joins; the peer of stage 1 is killed -9;
#     the others re-plan without it (3 stages again), the new plan becomes
#     servable and a greedy run equals the single-peer run again.
#  4. MoE (random qwen3moe fixture) on 3 new peers with --spread-experts:
#     status shows one layer's experts on at least 2 peers, and greedy ids
#     and --logprobs 3 equal the single-peer run.
#  5. MoE across stages: a 6-layer fixture at --mem-limit 4M splits into 2
#     stages with experts on all 3 peers, so each stage calls experts held
#     by the other stage's peer (its expert server) and by the third peer;
#     ids and logprobs through every peer equal the single-peer run.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
EXP=$DATA/models/expected/austen-dense-q8_0.json
[ -x "$PC" ] || skip "$PC not built"

"$B" key new "$T/k" >/dev/null || fail "shoal key new"
"$B" key new "$T/other" >/dev/null || fail "shoal key new (other)"

# 1. dense, 3 stages
t0=$(now_ms)
start d1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep d1)
start d2 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
# d3's data thread blocks at once (--spin-us 0), the others spin first
start d3 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED" --spin-us 0
wait_for 20 servable_all 3 d1 d2 d3 || fail "no servable 3-stage plan on all peers within 20 s: $("$PC" "$T/st-d1.json" servable)"
echo "3-stage plan servable on 3 peers in $(($(now_ms) - t0)) ms, digest $("$PC" "$T/st-d1.json" digest | cut -c1-16)"
EPS=("$SEED" "$(ep d2)" "$(ep d3)")
NC=$("$PC" "$EXP" ncases)
[ "$NC" -ge 1 ] || fail "no cases in $EXP"
for i in $(seq 0 $((NC - 1))); do
	P=$("$PC" "$EXP" prompt "$i")
	PEER=${EPS[$((i % 3))]}
	"$B" run "$DENSE" -p "$P" -n 32 --temp 0 --ids >"$T/l-ids-$i" 2>/dev/null || fail "local run $i"
	"$B" run --peer "$PEER" --key "$T/k" -p "$P" -n 32 --temp 0 --ids >"$T/r-ids-$i" 2>"$T/r-err-$i" ||
		fail "remote run $i: $(cat "$T/r-err-$i")"
	same "greedy ids of case $i" "$T/r-ids-$i" "$T/l-ids-$i"
	"$B" run "$DENSE" -p "$P" -n 8 --temp 0 --logprobs 5 >"$T/l-lp-$i" 2>/dev/null || fail "local lp $i"
	"$B" run --peer "$PEER" --key "$T/k" -p "$P" -n 8 --temp 0 --logprobs 5 >"$T/r-lp-$i" 2>"$T/r-err-$i" ||
		fail "remote logprobs $i: $(cat "$T/r-err-$i")"
	same "logprobs of case $i" "$T/r-lp-$i" "$T/l-lp-$i"
	[ "$(wc -l <"$T/r-lp-$i")" = 8 ] || fail "expected 8 logprob lines, got $(wc -l <"$T/r-lp-$i")"
done
echo "dense: $NC prompts, greedy ids (32) and logprobs (8 x top 5) identical to one peer"
"$B" run "$DENSE" -p "Emma" -n 40 --temp 0.8 --seed 7 >"$T/l-text" 2>/dev/null
"$B" run --peer "${EPS[1]}" --key "$T/k" -p "Emma" -n 40 --temp 0.8 --seed 7 >"$T/r-text" 2>"$T/r-err" ||
	fail "remote sampled run: $(cat "$T/r-err")"
same "sampled text" "$T/r-text" "$T/l-text"
echo "dense: sampled text (temp 0.8, seed 7) identical"
SYS="You are a novelist of manners."
"$B" run "$DENSE" --chat --system "$SYS" -p "Emma" --ids --temp 0 -n 16 >"$T/l-chat" 2>/dev/null ||
	fail "local chat run"
"$B" run --peer "${EPS[2]}" --key "$T/k" --chat --system "$SYS" -p "Emma" --ids --temp 0 -n 16 \
	>"$T/r-chat" 2>"$T/r-err" || fail "remote chat run: $(cat "$T/r-err")"
same "chat ids (--chat --system)" "$T/r-chat" "$T/l-chat"
echo "dense: --chat --system greedy ids identical ($(wc -w <"$T/l-chat") tokens)"

# 2. a peer with another model is left out, with the reason
MOE=$T/moe.gguf
moe_fixture 4 "$MOE"
start x1 "$MOE" --peer "$SEED"
left_out() { status d1 && "$PC" "$T/st-d1.json" left x1 | grep -q "model id"; }
wait_for 10 left_out || fail "peer with another model not left out: $("$PC" "$T/st-d1.json" left x1)"
echo "other model: $("$PC" "$T/st-d1.json" left x1)"
servable_all 3 d1 d2 d3 || fail "plan not servable after another model's peer joined"
"$B" run --peer "$SEED" --key "$T/k" -p "It is" -n 4 --temp 0 --ids >/dev/null 2>&1 || fail "run after x1 joined"

# 3. no key, no answer
if "$B" run --peer "$SEED" --key "$T/other" -p "It is" -n 4 --temp 0 --ids --timeout-ms 1500 \
	>"$T/wrongkey.out" 2>&1; then
	fail "a client with another key got an answer"
fi
echo "a client with another key: refused ($(head -c 80 "$T/wrongkey.out"))"
"$BD/tests/helpers/run_poke" "tcp://$SEED" "$T/k" >"$T/poke.out" 2>&1 || { cat "$T/poke.out"; fail "run_poke"; }
echo "malformed run requests: $(grep -c '^ok' "$T/poke.out") cases answered with a reason, node still serves"

# 3b. churn: a stage peer dies, the survivors re-plan and serve
start d4 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
ep d4 >/dev/null
wait_for 20 servable_all 3 d1 d2 d3 d4 || fail "no common servable plan with d4 within 20 s"
VICTIM=$("$PC" "$T/st-d1.json" stage 1)
OLD=$("$PC" "$T/st-d1.json" digest)
[ "$VICTIM" != none ] || fail "no stage 1"
stop "$VICTIM"
t0=$(now_ms)
LIVE=()
for n in d1 d2 d3 d4; do [ "$n" != "$VICTIM" ] && LIVE+=("$n"); done
replanned() { servable_all 3 "${LIVE[@]}" && [ "$("$PC" "$T/st-${LIVE[0]}.json" digest)" != "$OLD" ]; }
wait_for 20 replanned || fail "no new servable plan without $VICTIM within 20 s: $("$PC" "$T/st-${LIVE[0]}.json" servable)"
echo "churn: $VICTIM (stage 1) killed; new 3-stage plan servable in $(($(now_ms) - t0)) ms"
P=$("$PC" "$EXP" prompt 0)
"$B" run --peer "$(ep "${LIVE[0]}")" --key "$T/k" -p "$P" -n 32 --temp 0 --ids >"$T/r-churn" 2>"$T/r-err" ||
	fail "run after churn: $(cat "$T/r-err")"
same "greedy ids after churn" "$T/r-churn" "$T/l-ids-0"
echo "churn: greedy ids after the re-plan identical to one peer"
stop_all

# 4. MoE with spread experts
t0=$(now_ms)
start m1 "$MOE" --mem-limit 100M --ctx 256 --spread-experts
SEED=$(ep m1)
start m2 "$MOE" --mem-limit 100M --ctx 256 --spread-experts --peer "$SEED"
start m3 "$MOE" --mem-limit 100M --ctx 256 --spread-experts --peer "$SEED"
spread_ok() { servable_all "" m1 m2 m3 && [ "$("$PC" "$T/st-m1.json" spread)" -ge 2 ]; }
wait_for 20 spread_ok || {
	"$B" status --state-dir "$T/m1" --key "$T/k"
	fail "no servable MoE plan with one layer's experts on 2+ peers within 20 s: $("$PC" "$T/st-m1.json" servable), spread $("$PC" "$T/st-m1.json" spread)"
}
SPREAD=$("$PC" "$T/st-m1.json" spread)
echo "MoE plan servable in $(($(now_ms) - t0)) ms: $("$PC" "$T/st-m1.json" stages) stage(s), one layer's experts on $SPREAD peers"
MEPS=("$SEED" "$(ep m2)" "$(ep m3)")
i=0
for P in "hello world" "the quick brown fox" "once upon a time"; do
	PEER=${MEPS[$((i % 3))]}
	"$B" run "$MOE" -p "$P" -n 16 --temp 0 --ids >"$T/ml-ids-$i" 2>/dev/null || fail "local MoE run"
	"$B" run --peer "$PEER" --key "$T/k" -p "$P" -n 16 --temp 0 --ids >"$T/mr-ids-$i" 2>"$T/r-err" ||
		fail "remote MoE run: $(cat "$T/r-err")"
	same "MoE greedy ids ($P)" "$T/mr-ids-$i" "$T/ml-ids-$i"
	"$B" run "$MOE" -p "$P" -n 6 --temp 0 --logprobs 3 >"$T/ml-lp-$i" 2>/dev/null
	"$B" run --peer "$PEER" --key "$T/k" -p "$P" -n 6 --temp 0 --logprobs 3 >"$T/mr-lp-$i" 2>"$T/r-err" ||
		fail "remote MoE logprobs: $(cat "$T/r-err")"
	same "MoE logprobs ($P)" "$T/mr-lp-$i" "$T/ml-lp-$i"
	i=$((i + 1))
done
echo "MoE: 3 prompts, greedy ids and logprobs identical to one peer"
stop_all

# 5. MoE over 2 stages with experts on every peer
MOE6=$T/moe6.gguf
moe_fixture 6 "$MOE6"
t0=$(now_ms)
start s1 "$MOE6" --mem-limit 4M --ctx 256 --spread-experts
SEED=$(ep s1)
start s2 "$MOE6" --mem-limit 4M --ctx 256 --spread-experts --peer "$SEED"
start s3 "$MOE6" --mem-limit 4M --ctx 256 --spread-experts --peer "$SEED"
spread2_ok() { servable_all 2 s1 s2 s3 && [ "$("$PC" "$T/st-s1.json" spread)" -ge 2 ]; }
wait_for 20 spread2_ok || {
	"$B" status --state-dir "$T/s1" --key "$T/k"
	fail "no servable 2-stage MoE plan with experts on 2+ peers within 20 s: $("$PC" "$T/st-s1.json" servable), $("$PC" "$T/st-s1.json" stages) stage(s)"
}
SPREAD=$("$PC" "$T/st-s1.json" spread)
echo "2-stage MoE plan servable in $(($(now_ms) - t0)) ms, one layer's experts on $SPREAD peers"
"$B" run "$MOE6" -p "hello world" -n 12 --temp 0 --ids >"$T/sl-ids" 2>/dev/null || fail "local run (6 layers)"
"$B" run "$MOE6" -p "hello world" -n 5 --temp 0 --logprobs 4 >"$T/sl-lp" 2>/dev/null
for PEER in "$SEED" "$(ep s2)" "$(ep s3)"; do
	"$B" run --peer "$PEER" --key "$T/k" -p "hello world" -n 12 --temp 0 --ids >"$T/sr-ids" 2>"$T/r-err" ||
		fail "remote 2-stage MoE run: $(cat "$T/r-err")"
	same "2-stage MoE ids via $PEER" "$T/sr-ids" "$T/sl-ids"
	"$B" run --peer "$PEER" --key "$T/k" -p "hello world" -n 5 --temp 0 --logprobs 4 >"$T/sr-lp" 2>"$T/r-err" ||
		fail "remote 2-stage MoE logprobs: $(cat "$T/r-err")"
	same "2-stage MoE logprobs via $PEER" "$T/sr-lp" "$T/sl-lp"
done
echo "2-stage MoE: ids and logprobs through every peer identical to one peer"
echo "PASS"
