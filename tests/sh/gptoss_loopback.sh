#!/bin/bash
# tests/sh/gptoss_loopback.sh: a gpt-oss model (attention sinks, a sliding
# window of 4 on the even layers, biases, top-k softmax routing, clamped
# SwiGLU experts; a random fixture from tests/helpers/gen_fixture) served
# by real `shoal node` processes on 127.0.0.1, against single-peer runs:
#  1. 3 peers at --mem-limit 3M (7.4 MiB of weights and the KV cache
#     need all three): a plan of 2 or more stages; greedy ids and
#     --logprobs 4 through every peer equal local `shoal run`.
#  2. 3 peers at --mem-limit 4M with --spread-experts: routed experts (with
#     their biases) on 2+ peers; ids and logprobs through every peer equal
#     local `shoal run` again.
#  3. (a build with test hooks) 3 peers with --tensor, probes of unequal
#     speeds and SHOAL_TEST_TP_PREFER=1: one stage run by a tensor group
#     of 3 (heads with their sinks, experts with their biases split among
#     them); ids and logprobs through every peer equal local `shoal run`.
#  4. 2 peers with the file and a third without it (--model-id), all at
#     --mem-limit 4M --spread-experts: the third fetches the tensors of its
#     part (for experts: the router, ffn_*_exps and their biases), the plan
#     is servable, its status shows bytes fetched, and ids and logprobs
#     through every peer equal local `shoal run`.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
DS=$T/gptoss.gguf
"$BD/tests/helpers/gen_fixture" --arch gpt-oss --type Q8_0 --layers 6 --dim 256 --heads 4 \
	--kv-heads 2 --head-dim 64 --vocab 2048 --experts 8 --experts-used 2 --ff-exp 128 \
	--window 4 --ctx 512 --seed 3 "$DS" >/dev/null 2>&1 || fail "gen_fixture gpt-oss"
"$B" run "$DS" -p "hello world" -n 12 --temp 0 --ids >"$T/l-ids" 2>"$T/l-err" ||
	fail "local run: $(cat "$T/l-err")"
"$B" run "$DS" -p "hello world" -n 5 --temp 0 --logprobs 4 >"$T/l-lp" 2>/dev/null || fail "local logprobs"

# every peer of the current cluster ($@ = names) answers as one peer does
through_every_peer() {
	local n
	for n in "$@"; do
		"$B" run --peer "$(ep "$n")" --key "$T/k" -p "hello world" -n 12 --temp 0 --ids \
			>"$T/r-ids" 2>"$T/r-err" || fail "run via $n: $(cat "$T/r-err")"
		same "greedy ids via $n" "$T/r-ids" "$T/l-ids"
		"$B" run --peer "$(ep "$n")" --key "$T/k" -p "hello world" -n 5 --temp 0 --logprobs 4 \
			>"$T/r-lp" 2>"$T/r-err" || fail "logprobs via $n: $(cat "$T/r-err")"
		same "logprobs via $n" "$T/r-lp" "$T/l-lp"
	done
}

# three peers X1 X2 X3 of the model, joined through X1, with options $@
start_three() {
	local x=$1
	shift
	start "${x}1" "$DS" --ctx 256 "$@"
	start "${x}2" "$DS" --ctx 256 "$@" --peer "$(ep "${x}1")"
	start "${x}3" "$DS" --ctx 256 "$@" --peer "$(ep "${x}1")"
}

# 1. stages
t0=$(now_ms)
start_three p --mem-limit 3M
staged() { servable_all "" p1 p2 p3 && [ "$("$PC" "$T/st-p1.json" stages)" -ge 2 ]; }
wait_for 20 staged || {
	"$B" status --state-dir "$T/p1" --key "$T/k"
	fail "no servable gpt-oss plan of 2+ stages within 20 s: $("$PC" "$T/st-p1.json" servable)"
}
echo "gpt-oss: $("$PC" "$T/st-p1.json" stages)-stage plan servable in $(($(now_ms) - t0)) ms"
through_every_peer p1 p2 p3
echo "gpt-oss, stages: ids and logprobs through every peer identical to one peer"
stop_all

# 2. routed experts spread over the peers
t0=$(now_ms)
start_three s --mem-limit 4M --spread-experts
spread_ok() { servable_all "" s1 s2 s3 && [ "$("$PC" "$T/st-s1.json" spread)" -ge 2 ]; }
wait_for 20 spread_ok || {
	"$B" status --state-dir "$T/s1" --key "$T/k"
	fail "no servable gpt-oss plan with routed experts on 2+ peers within 20 s: $("$PC" "$T/st-s1.json" servable)"
}
echo "gpt-oss: plan with $("$PC" "$T/st-s1.json" stages) stage(s), one layer's experts on $("$PC" "$T/st-s1.json" spread) peers, in $(($(now_ms) - t0)) ms"
through_every_peer s1 s2 s3
echo "gpt-oss, spread experts: ids and logprobs through every peer identical to one peer"

# 3. a tensor group of 3
if "$B" --version | grep -q '^test hooks: yes'; then
	export SHOAL_TEST_TP_PREFER=1
	ISA=$(cut -d' ' -f3 "$T/p1/probe")
	for pg in "g1 40000" "g2 20000" "g3 30000"; do
		set -- $pg
		mkdir -p "$T/$1" && echo "shoal-probe 3 $ISA $2 $(($2 * 3)) $(date +%s) l1" >"$T/$1/probe"
	done
	start_three g --tensor --link-us 5
	group3() { servable_all 1 g1 g2 g3 && [ "$("$PC" "$T/st-g1.json" members 0 | wc -w)" = 3 ]; }
	wait_for 20 group3 || fail "no plan with a tensor group of 3 within 20 s: $("$PC" "$T/st-g1.json" servable)"
	echo "gpt-oss: one stage, a tensor group of 3 ($("$PC" "$T/st-g1.json" members 0))"
	through_every_peer g1 g2 g3
	echo "gpt-oss, tensor group: ids and logprobs through every peer identical to one peer"
	stop_all
	unset SHOAL_TEST_TP_PREFER
else
	echo "gpt-oss, tensor group: skipped (a build without test hooks)"
fi

# 4. a peer without the file
start f1 "$DS" --ctx 256 --mem-limit 4M --spread-experts
wait_for 20 eval 'status f1 && [ "$("$PC" "$T/st-f1.json" model_id)" != none ]' ||
	fail "f1 shows no model id"
MID=$("$PC" "$T/st-f1.json" model_id)
start f2 "$DS" --ctx 256 --mem-limit 4M --spread-experts --peer "$(ep f1)"
start f3 "" --model-id "$MID" --ctx 256 --mem-limit 4M --spread-experts --peer "$(ep f1)"
t0=$(now_ms)
wait_for 60 servable_all "" f1 f2 f3 || {
	tail -5 "$T/f3.log"
	fail "no servable plan with the peer without the file within 60 s: $("$PC" "$T/st-f3.json" servable)"
}
status f3 || fail "status f3"
fetched=$("$PC" "$T/st-f3.json" weights fetch.bytes_fetched)
[ "$fetched" -gt 0 ] 2>/dev/null || fail "f3's status shows no bytes fetched ($fetched)"
echo "gpt-oss: f3 fetched $fetched bytes; plan of $("$PC" "$T/st-f1.json" stages) stage(s), experts on $("$PC" "$T/st-f1.json" spread) peers, servable $(($(now_ms) - t0)) ms after f3 started"
through_every_peer f1 f2 f3
echo "gpt-oss, a peer without the file: ids and logprobs through every peer identical to one peer"
stop_all
echo "PASS"
