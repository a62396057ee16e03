#!/bin/bash
# tests/sh/glm4moe_loopback.sh: a glm4moe model (GLM-4.5/4.6: QKV biases,
# q/k norms, half of each head rotated, a leading dense layer, a shared
# expert, sigmoid routing with its selection bias and groups; a random
# fixture from tests/helpers/gen_fixture) served by real `shoal node`
# processes on 127.0.0.1, against single-peer runs (tests/sh/lib.sh):
#  1. 3 peers at --mem-limit 3M: a plan of 2 or more stages; greedy ids
#     and --logprobs 4 through every peer equal local `shoal run`.
#  2. 3 peers at --mem-limit 4M with --spread-experts: routed experts on
#     2+ peers; ids and logprobs through every peer equal local `shoal run`.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
DS=$T/glm.gguf
"$BD/tests/helpers/gen_fixture" --arch glm4moe --type Q8_0 --layers 6 --dim 256 --ff 512 \
	--heads 4 --kv-heads 2 --head-dim 64 --vocab 2048 --dense-lead 1 --shared 1 --groups 2 \
	--groups-used 1 --sigmoid --experts 8 --experts-used 2 --ff-exp 128 --ctx 512 --seed 3 \
	"$DS" >/dev/null 2>&1 || fail "gen_fixture glm4moe"
arch_local

# 1. stages; 2. routed experts spread over the peers
arch_stages glm4moe
arch_spread glm4moe
echo "PASS"
