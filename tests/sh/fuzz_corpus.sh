#!/bin/bash
# tests/sh/fuzz_corpus.sh: every libFuzzer target, built without libFuzzer
# (tests/fuzz/replay_<t>), over its seed corpus tests/fuzz/corpus_<t>/: the
# seeds and every crash input kept there once fixed give no crash and break
# none of the target's invariants (each aborts on one). Under
# --enable-asan this is the sanitizer check of every decoder on those inputs.
set -u
. "$(dirname "$0")/lib.sh"
export FUZZ_VOCAB_DIR=$DATA/vocab
n=0
for t in api gguf tokenizer ctlmsg wire runmsg xfer_frame xfer_stream plan json tool_call grammar; do
	r=$BD/tests/fuzz/replay_$t
	[ -x "$r" ] || fail "no $r"
	"$r" "$SRC/tests/fuzz/corpus_$t" >"$T/$t.out" 2>"$T/$t.err" ||
		{ tail -n 20 "$T/$t.err"; fail "replay_$t failed on the last input named"; }
	echo "$t: $(cat "$T/$t.out")"
	n=$((n + 1))
done
echo "ok: $n targets"
