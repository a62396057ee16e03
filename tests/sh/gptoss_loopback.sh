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
arch_local

# 1. stages; 2. routed experts spread over the peers (tests/sh/lib.sh)
arch_stages gpt-oss
arch_spread gpt-oss

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
