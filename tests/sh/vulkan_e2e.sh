#!/bin/bash
# tests/sh/vulkan_e2e.sh: `shoal run` and `shoal perplexity` on the Vulkan
# backend (Mesa's lavapipe in CI) against the CPU backend, for the bundled
# dense and MoE models, the DeepSeek-V3-style fixture and the K-quant
# fixtures (tests/sh/vulkan_e2e.py says what is compared and the bounds).
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
moe=$SRC/../shared/models/austen-moe-q8_0.gguf
[ -s "$moe" ] || moe=
python3 "$SRC/tests/sh/vulkan_e2e.py" "$B" "$DATA/models/persuasion.txt" \
	"$DATA/models/austen-dense-q8_0.gguf" "$DATA/models/austen-dense-f16.gguf" \
	"$DATA/models/tiny-deepseek2-q8_0.gguf" "$DATA/models/tiny-kq-q4_k_m.gguf" \
	"$DATA/models/tiny-kq-q6_k.gguf" $moe || fail "the Vulkan backend differs from the CPU's"
