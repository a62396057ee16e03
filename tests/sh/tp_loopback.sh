#!/bin/bash
# tests/sh/tp_loopback.sh: tensor groups (issue 11) through real `shoal node`
# processes on 127.0.0.1, against single-peer runs.
#
# Every node runs with --tensor --link-us 5 (loopback) and the test hook
# SHOAL_TEST_TP_PREFER=1 (links planned at --link-us, not as measured; the
# scheduler takes its best plan with a group
# even where a group does not pay: these models are too small to gain
# from one), and with probe files of unequal speeds (a 40, b 20, c 30 GB/s),
# so the shares are unequal. The design's count: every member takes part
# in 4 all-gathers per dense layer and 3 per MoE layer in each engine run,
# and sends one GATHER frame per other member in each. The group runs the
# last stage, so it splits the head by vocab rows (dist.h invariant 10): in
# each run with logits (one a token: runs are one session at a time here)
# every member takes part in one head gather, each member but the head
# peer sends it one slice, and the head peer receives NMEM - 1; the ids and
# logprobs below (printed with 9 significant digits: each float exactly)
# compare the gathered logits with one peer's.
#  1. Dense (austen), a 2-member group a + b with shares about 2 : 1:
#     greedy ids (32) and --logprobs 5 (8) of every expected prompt through
#     each peer equal local `shoal run`; gathers counted as designed.
#  2. c joins: a 3-member group, unequal shares; the same checks.
#  3. Churn: c is killed -9 while a 200-token run streams through a: the
#     run completes with the undisturbed ids; the survivors serve a group
#     of 2 again.
#  3b. A peer started without --tensor: no plan is servable, and status
#     names the options every peer must share.
#  4. MoE: the trained austen MoE (2 members) and a generated qwen3moe
#     fixture (3 members): ids and logprobs equal one peer; gathers as
#     designed (3 per MoE layer).
#  5. A member without the model file (--model-id): it fetches the tensors
#     of its stage and the head, whole, from the other member (a group
#     member computes with its shares of them; all 56, the tied head's
#     embedding once), and the group's ids and logprobs equal one peer.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
EXP=$DATA/models/expected/austen-dense-q8_0.json
AMOE=$DATA/models/austen-moe-q8_0.gguf
[ -f "$AMOE" ] || AMOE=${SHOAL_SHARED_MODELS:-/work/shared/models}/austen-moe-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks (SHOAL_TEST_TP_PREFER)"
export SHOAL_TEST_TP_PREFER=1
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

# unequal speeds: probe files kept in the state directories (node.c)
start p0 ""
wait_for 20 test -s "$T/p0/probe" || fail "no probe file"
stop p0 TERM
ISA=$(cut -d' ' -f3 "$T/p0/probe")
probe() { mkdir -p "$T/$1" && echo "shoal-probe 3 $ISA $2 $(($2 * 3)) $(date +%s) l1" >"$T/$1/probe"; }
TP=(--tensor --link-us 5 --ctx 256)

# group_of N NAME...: every NAME serves the same 1-stage plan, a group of N
group_of() {
	local n=$1
	shift
	servable_all 1 "$@" && [ "$("$PC" "$T/st-$1.json" members 0 | wc -w)" = "$n" ]
}
# unequal NAME: the shares of stage 0's group are not all equal
unequal() { "$PC" "$T/st-$1.json" members 0 | tr ' ' '\n' | cut -d: -f2 | sort -u | sed -n 2p | grep -q .; }
# gathers_ok ROUNDS NMEM NAME...: on each member, gathers = runs x ROUNDS
# (per layer rounds x layers), frames sent = received = gathers x (NMEM - 1)
gathers_ok() {
	local r=$1 m=$2 n runs g s v
	shift 2
	for n in "$@"; do
		status "$n" || fail "status of $n"
		runs=$("$PC" "$T/st-$n.json" data stage.runs)
		g=$("$PC" "$T/st-$n.json" data stage.gathers)
		s=$("$PC" "$T/st-$n.json" data stage.gather_sent)
		v=$("$PC" "$T/st-$n.json" data stage.gather_recv)
		[ "$runs" -gt 0 ] && [ "$g" = $((runs * r)) ] && [ "$s" = $((g * (m - 1))) ] &&
			[ "$v" = "$s" ] || fail "$n: $runs runs, $g gathers, $s sent, $v received; want $r gathers a run, $((m - 1)) frames each"
	done
	echo "  gathers: $g in $runs runs on each member ($((g / runs)) a run), $s frames each way"
}
# heads_ok NMEM NAME...: one head gather a token on every member, one slice
# from each member to the head peer (the one that sent the tokens)
heads_ok() {
	local m=$1 n hg hs hr tok root=0 hg0=
	shift
	for n in "$@"; do
		status "$n" || fail "status of $n"
		hg=$("$PC" "$T/st-$n.json" data stage.head_gathers)
		hs=$("$PC" "$T/st-$n.json" data stage.head_sent)
		hr=$("$PC" "$T/st-$n.json" data stage.head_recv)
		tok=$("$PC" "$T/st-$n.json" data stage.tokens_sent)
		hs=${hs/none/0} hr=${hr/none/0} tok=${tok/none/0}
		[ "$hg" != none ] && [ "$hg" -gt 0 ] && [ "${hg0:-$hg}" = "$hg" ] ||
			fail "$n: $hg head gathers (want the same > 0 on every member, ${hg0:-?} before)"
		hg0=$hg
		if [ "$tok" -gt 0 ]; then
			root=$((root + 1))
			[ "$hg" = "$tok" ] && [ "$hr" = $((hg * (m - 1))) ] && [ "$hs" = 0 ] ||
				fail "$n (head peer): $hg head gathers for $tok tokens, $hr slices received, $hs sent; want one a token, $((m - 1)) received each, none sent"
		else
			[ "$hs" = "$hg" ] && [ "$hr" = 0 ] ||
				fail "$n: $hg head gathers, $hs slices sent, $hr received; want one sent each, none received"
		fi
	done
	[ "$root" = 1 ] || fail "$root members sent tokens; want the head peer alone"
	echo "  head split: $hg0 head gathers on each member (one a token), $((m - 1)) slice(s) to the head peer in each"
}
# same_runs MODEL NAME...: greedy ids and logprobs through each NAME equal local runs
same_runs() {
	local model=$1 i=0 P n
	shift
	while IFS= read -r P; do
		for n in "$@"; do
			"$B" run "$model" -p "$P" -n 24 --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
			"$B" run --peer "$(ep "$n")" --key "$KEY" -p "$P" -n 24 --temp 0 --ids >"$T/r-ids" \
				2>"$T/r-err" || fail "remote run via $n: $(cat "$T/r-err")"
			same "greedy ids via $n ($P)" "$T/r-ids" "$T/l-ids"
			"$B" run "$model" -p "$P" -n 6 --temp 0 --logprobs 5 >"$T/l-lp" 2>/dev/null
			"$B" run --peer "$(ep "$n")" --key "$KEY" -p "$P" -n 6 --temp 0 --logprobs 5 >"$T/r-lp" \
				2>"$T/r-err" || fail "remote logprobs via $n: $(cat "$T/r-err")"
			same "logprobs via $n ($P)" "$T/r-lp" "$T/l-lp"
		done
		i=$((i + 1))
	done <"$T/prompts"
	echo "  $i prompts through $*: greedy ids (24) and logprobs (6 x top 5) identical to one peer"
}

# 1. dense, a group of 2
NC=$("$PC" "$EXP" ncases)
for i in $(seq 0 $((NC - 1))); do "$PC" "$EXP" prompt "$i"; done >"$T/prompts"
probe a 40000
probe b 20000
probe c 30000
start a "$DENSE" "${TP[@]}"
SEED=$(ep a)
start b "$DENSE" "${TP[@]}" --peer "$SEED"
wait_for 20 group_of 2 a b || fail "no servable plan with a group of 2: $("$PC" "$T/st-a.json" servable)"
unequal a || fail "equal shares: $("$PC" "$T/st-a.json" members 0)"
echo "dense: group of 2 ($("$PC" "$T/st-a.json" members 0))"
same_runs "$DENSE" a b
gathers_ok 24 2 a b
heads_ok 2 a b

# 2. a group of 3
start c "$DENSE" "${TP[@]}" --peer "$SEED"
wait_for 20 group_of 3 a b c || fail "no servable plan with a group of 3: $("$PC" "$T/st-a.json" servable)"
unequal a || fail "equal shares: $("$PC" "$T/st-a.json" members 0)"
echo "dense: group of 3 ($("$PC" "$T/st-a.json" members 0))"
head -n 2 "$T/prompts" >"$T/p2" && mv "$T/p2" "$T/prompts"
same_runs "$DENSE" c a
gathers_ok 24 3 a b c
heads_ok 3 a b c

# 3. churn: a member dies mid-run
P="It is a truth universally acknowledged"
N=200
"$B" run "$DENSE" -p "$P" -n $N --temp 0 --ids >"$T/l-long" 2>/dev/null || fail "local long run"
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
"$B" run --peer "$SEED" --key "$KEY" -p "$P" -n $N --temp 0 --ids --stats >"$T/r-long" 2>"$T/r-long.err" &
RPID=$!
wait_for 20 at_least "$T/r-long" 20 || fail "the long run did not stream: $(cat "$T/r-long.err")"
at=$(words "$T/r-long")
stop c
wait $RPID || fail "the run failed after c was killed: $(cat "$T/r-long.err")"
same "ids across the kill of c" "$T/r-long" "$T/l-long"
echo "churn: c killed -9 after ~$at of $N tokens: ids identical to one peer; $(tail -n 1 "$T/r-long.err" | sed 's/^shoal run: //')"
wait_for 20 group_of 2 a b || fail "the survivors serve no group of 2: $("$PC" "$T/st-a.json" servable)"
stop_all

# 3b. a peer without --tensor: the plans differ, and status says which options to check
start x1 "$DENSE" "${TP[@]}"
start x2 "$DENSE" --ctx 256 --link-us 5 --peer "$(ep x1)"
told() { status x1 && "$PC" "$T/st-x1.json" servable | grep -q -- "--tensor"; }
wait_for 20 told || fail "a policy mismatch is not named: $("$PC" "$T/st-x1.json" servable)"
echo "policy mismatch: $("$PC" "$T/st-x1.json" servable | cut -c1-160)"
stop_all

# 4. MoE: the trained austen MoE (2 members), a qwen3moe fixture (3)
printf '%s\n' "It is a truth" "Emma" "the quick brown fox" >"$T/prompts"
if [ -f "$AMOE" ]; then
	probe ma 40000
	probe mb 20000
	start ma "$AMOE" "${TP[@]}"
	start mb "$AMOE" "${TP[@]}" --peer "$(ep ma)"
	wait_for 20 group_of 2 ma mb || fail "MoE: no group of 2: $("$PC" "$T/st-ma.json" servable)"
	echo "austen MoE: group of 2 ($("$PC" "$T/st-ma.json" members 0))"
	same_runs "$AMOE" ma mb
	gathers_ok 18 2 ma mb
	heads_ok 2 ma mb
	stop_all
else
	echo "austen MoE: $AMOE not there, skipped"
fi
MOE=$T/moe.gguf
moe_fixture 4 "$MOE"
probe qa 40000
probe qb 20000
probe qc 30000
start qa "$MOE" "${TP[@]}"
start qb "$MOE" "${TP[@]}" --peer "$(ep qa)"
start qc "$MOE" "${TP[@]}" --peer "$(ep qa)"
wait_for 20 group_of 3 qa qb qc || fail "qwen3moe: no group of 3: $("$PC" "$T/st-qa.json" servable)"
unequal qa || fail "equal shares: $("$PC" "$T/st-qa.json" members 0)"
echo "qwen3moe fixture: group of 3 ($("$PC" "$T/st-qa.json" members 0))"
same_runs "$MOE" qb
gathers_ok 12 3 qa qb qc
heads_ok 3 qa qb qc
stop_all

# 5. a member without the file
probe f1 40000
probe f2 20000
start f1 "$DENSE" "${TP[@]}"
wait_for 20 eval 'status f1 && [ "$("$PC" "$T/st-f1.json" model_id)" != none ]' ||
	fail "f1 shows no model id"
start f2 "" --model-id "$("$PC" "$T/st-f1.json" model_id)" "${TP[@]}" --peer "$(ep f1)"
wait_for 60 group_of 2 f1 f2 || fail "no group of 2 with the peer without the file: $("$PC" "$T/st-f2.json" servable)"
part=$(grep "weights: our part: " "$T/f2.log" | head -n 1)
n_part=$(echo "$part" | sed 's/.*our part: \([0-9]*\) tensor.*/\1/')
# one stage: every tensor of the model, 6 layers x 9, the embedding (the
# tied head) and the final norm
[ "$n_part" = 56 ] || fail "f2's part is not the model's 56 tensors: $part"
echo "member without the file: ${part#*weights: }"
head -n 2 "$T/prompts" >"$T/p2" && mv "$T/p2" "$T/prompts"
same_runs "$DENSE" f2
heads_ok 2 f1 f2
echo "PASS"
