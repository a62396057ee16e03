#!/bin/bash
# tests/sh/deepseek2_loopback.sh: a deepseek2 model (MLA, shared + routed
# experts, grouped sigmoid routing; a random fixture from
# tests/helpers/gen_fixture) served by real `shoal node` processes on
# 127.0.0.1, against single-peer runs:
#  1. 3 peers at --mem-limit 3M (7.5 MiB of weights and latent KV cache
#     need all three): a plan of 2 or more stages; greedy ids and
#     --logprobs 4 through every peer equal local `shoal run`.
#  2. 3 peers at --mem-limit 4M with --spread-experts: routed experts on 2+
#     peers (the shared experts stay with their layer's stage); ids and
#     logprobs through every peer equal local `shoal run` again.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
DS=$T/ds2.gguf
"$BD/tests/helpers/gen_fixture" --arch deepseek2 --type Q8_0 --layers 6 --dim 256 --ff 512 \
	--heads 4 --vocab 2048 --head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --q-lora 64 \
	--dense-lead 1 --shared 1 --groups 2 --groups-used 1 --sigmoid --experts 8 --experts-used 2 \
	--ff-exp 128 --ctx 512 --seed 3 "$DS" >/dev/null 2>&1 || fail "gen_fixture deepseek2"
arch_local

# 1. stages; 2. routed experts spread over the peers (tests/sh/lib.sh)
arch_stages deepseek2
arch_spread deepseek2
echo "PASS"
