#!/bin/bash
# tests/sh/run_notices.sh: a local `shoal run` says what it did when it
# did something a user may not expect: it stopped because the context was
# full, --ctx is above the model's training context, --chat on a model with
# no chat template. Each note goes to stderr; the text still comes.
set -u
. "$(dirname "$0")/lib.sh"
M=$DATA/models/austen-dense-q8_0.gguf
"$B" run "$M" -p "It is a truth universally acknowledged" -n 100 --ctx 24 --temp 0 \
	>"$T/o1" 2>"$T/e1" || fail "run with a small context: $(cat "$T/e1")"
grep -q "stopped after [0-9]* tokens: the context (24 tokens) is full" "$T/e1" ||
	fail "no word about the full context: $(cat "$T/e1")"
[ -s "$T/o1" ] || fail "no text"
"$B" run "$M" -p "It is a truth universally acknowledged" -n 8 --temp 0 >"$T/o2" 2>"$T/e2" ||
	fail "plain run"
[ ! -s "$T/e2" ] || fail "a plain run printed notes: $(cat "$T/e2")"
"$B" run "$M" -p "Emma" -n 2 --ctx 100000 --temp 0 >"$T/o3" 2>"$T/e3" || fail "run --ctx 100000"
grep -q -- "--ctx 100000 is above the 256 tokens the model was trained for" "$T/e3" ||
	fail "no word about --ctx above the training context: $(cat "$T/e3")"
"$B" run "$M" --chat -p "Emma" -n 2 --temp 0 >"$T/o4" 2>"$T/e4" || fail "run --chat"
grep -q "has no chat template: --chat formats the messages as plain" "$T/e4" ||
	fail "no word about the missing chat template: $(cat "$T/e4")"
echo "context full, --ctx above training, --chat without a template: each said on stderr"
echo PASS
