#!/bin/bash
# tests/sh/vulkan_e2e.sh: `shoal run` and `shoal perplexity` on the Vulkan
# backend (Mesa's lavapipe in CI) against the CPU backend, for the bundled
# dense and MoE models, the DeepSeek-V3-style fixture, the K-quant
# fixtures, a gpt-oss fixture made here (MXFP4, attention sinks, a
# sliding window of 8 on the even layers, YaRN) and austen-dense
# re-encoded by requant --mix iq (Q2_K, Q3_K, IQ4_NL, IQ4_XS and the seven
# IQ grid types in one model: its greedy tokens; tests/sh/vulkan_e2e.py
# says what is compared and the bounds), and SHOAL_VK_PROFILE's table.
# Skips (77) when the build has no Vulkan backend or the machine no Vulkan
# device; under CI=true, a build with Vulkan and no device fails.
set -u
. "$(dirname "$0")/lib.sh"
if ! "$B" run --help 2>&1 | grep -q vulkan; then
	skip "this build has no Vulkan backend (./configure --with-vulkan)"
fi
if ! why=$("$B" run "$DATA/models/austen-dense-q8_0.gguf" -p x -n 1 --backend vulkan 2>&1 >/dev/null); then
	[ "${CI:-}" = true ] && fail "no Vulkan device under CI: $why"
	skip "no Vulkan device: $why"
fi
# SHOAL_VK_PROFILE: a table of the dispatches by shader at the end; a
# Q8_0 model's decode runs mv_q8_0 (one per weight matrix a token) and
# rms_norm, each with calls and a time (the device's timestamps)
SHOAL_VK_PROFILE=$T/prof "$B" run "$DATA/models/austen-dense-q8_0.gguf" -p "It is a truth" -n 4 \
	--temp 0 --backend vulkan >/dev/null 2>"$T/prof.err" ||
	fail "a run with SHOAL_VK_PROFILE: $(tail -n 3 "$T/prof.err")"
if grep -q "no timestamps" "$T/prof" 2>/dev/null; then
	echo "profile: $(head -n 1 "$T/prof")"
else
	for sh in mv_q8_0 rms_norm; do
		awk -v s=$sh '$1 == s && $2 > 0 && $3 > 0 { ok = 1 } END { exit !ok }' "$T/prof" 2>/dev/null ||
			fail "SHOAL_VK_PROFILE lists no timed $sh: $(cat "$T/prof" 2>/dev/null | head -n 5)"
	done
	echo "profile: $(grep -c -v '^#' "$T/prof") shaders timed, first: $(grep -v '^#' "$T/prof" | head -n 1)"
fi
moe=$SRC/../shared/models/austen-moe-q8_0.gguf
[ -s "$moe" ] || moe=
# gpt-oss: expert weights times 8, so that the clamped SwiGLU clamps;
# seed 5 of vocabulary 512 is a fixture whose CPU run has no near-tie in
# its first 12 greedy steps (many random fixtures of this size have one
# within 1 to 3: their logits are nearly flat), so those tokens are
# compared; 2.3 MiB, ~30 s of this test on lavapipe
oss=$T/tiny-gptoss-mxfp4.gguf
"$BD/tests/helpers/gen_fixture" --arch gpt-oss --type MXFP4 --layers 4 --dim 256 --heads 4 \
	--kv-heads 2 --head-dim 64 --vocab 512 --experts 8 --experts-used 2 --ff-exp 128 \
	--window 8 --yarn 4 --exp-scale 8 --ctx 512 --seed 5 "$oss" >/dev/null 2>&1 ||
	fail "gen_fixture gpt-oss"
# every type from Q2_K to IQ4_XS and the IQ grid types (requant's mix_iq_type)
mix=$T/austen-dense-iq-mix.gguf
"$BD/tests/helpers/requant" "$DATA/models/austen-dense-f32.gguf" "$mix" --mix iq >/dev/null ||
	fail "requant --mix iq"
python3 "$SRC/tests/sh/vulkan_e2e.py" "$B" "$DATA/models/persuasion.txt" tokens:"$mix" \
	"$DATA/models/austen-dense-q8_0.gguf" "$DATA/models/austen-dense-f16.gguf" \
	"$DATA/models/tiny-deepseek2-q8_0.gguf" "$DATA/models/tiny-kq-q4_k_m.gguf" \
	"$DATA/models/tiny-kq-q6_k.gguf" "$oss" $moe || fail "the Vulkan backend differs from the CPU's"
