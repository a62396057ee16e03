#!/bin/sh
# tests/sh/test_perplexity.sh: `shoal perplexity` on the bundled austen models
# over the first 20 windows of 256 tokens of persuasion.txt must come
# within 1% of the reference engine's figures (tests/data/models/README.md).
# A few seconds of CPU per model with the SIMD kernels.
set -u
bin=${SHOAL_BIN:-./shoal}
data=${SHOAL_DATA:-tests/data}/models
fail=0
for pair in f32:117.1389 f16:117.1400 q8_0:117.2623; do
	type=${pair%%:*}
	ref=${pair#*:}
	out=$("$bin" perplexity "$data/austen-dense-$type.gguf" "$data/persuasion.txt" \
		--ctx 256 --chunks 20 --json) || { echo "FAIL $type: exit $?"; fail=1; continue; }
	ppl=$(printf '%s\n' "$out" | sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p')
	windows=$(printf '%s\n' "$out" | sed -n 's/.*"windows": *\([0-9]*\).*/\1/p')
	if [ -z "$ppl" ] || [ "$windows" != 20 ]; then
		echo "FAIL $type: unexpected output: $out"
		fail=1
		continue
	fi
	if awk -v p="$ppl" -v r="$ref" 'BEGIN { d = p / r - 1; if (d < 0) d = -d; exit !(d < 0.01) }'; then
		echo "ok   $type: perplexity $ppl (reference $ref)"
	else
		echo "FAIL $type: perplexity $ppl, reference $ref (more than 1% apart)"
		fail=1
	fi
done
exit $fail
