#!/bin/bash
# tests/sh/run_notices.sh: a local `shoal run` says what it did when it
# did something a user may not expect: it stopped because the context was
# full, --ctx is above the model's training context, --chat on a model with
# no chat template. Each note goes to stderr; the text still comes. And a
# normal start and leave of two peers logs no warning.
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
# log levels mean what they say: a normal start of two peers (the first
# cannot hold the model alone until the second joins) and a normal leave
# log no warning
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start w1 "$M" --mem-limit 15M --ctx 256 --sessions 2
start w2 "$M" --mem-limit 15M --ctx 256 --sessions 2 --peer "$(ep w1)"
wait_for 20 servable_all "" w1 w2 || fail "no plan over two peers"
stop w2 TERM || fail "w2 did not leave cleanly"
stop w1 TERM || fail "w1 did not leave cleanly"
grep -q "no plan over 1 peer" "$T/w1.log" || fail "w1 never said it waits for peers"
# (a compute probe that ran under load is a warning of the machine's, not
# of the start: other tests load it; runtime/node/node_probe.c)
if grep -n " WARN " "$T/w1.log" "$T/w2.log" | grep -v "the compute probe ran under load"; then
	fail "a normal start and leave logged a warning"
fi
echo "a normal start and leave of two peers: no warning"
# while a peer that dies (kill -9) and takes the plan with it is a warning
start w3 "$M" --mem-limit 15M --ctx 256 --sessions 2
start w4 "$M" --mem-limit 15M --ctx 256 --sessions 2 --peer "$(ep w3)"
wait_for 20 servable_all "" w3 w4 || fail "no plan over w3 and w4"
stop w4
wait_for 20 grep -q " WARN  cluster: no plan over 1 peer" "$T/w3.log" ||
	fail "w3 did not warn when w4 died and the plan went with it"
echo "a peer killed -9 that takes the plan with it: a warning"
echo PASS
