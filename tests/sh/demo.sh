#!/bin/bash
# tests/sh/demo.sh: `make demo`: three local peers serve the bundled model.
#
# Starts 3 `shoal node` processes on 127.0.0.1 (ephemeral ports, seeded
# with the first, fresh state dirs and key in a temporary directory), each
# offering 11 MiB (--mem-limit) with KV for 256 tokens, which forces a
# 3-stage split of the 14.5 MB model; shows the view and the plan (`shoal
# status`), streams a text through the pipeline (`shoal run --peer`), shows
# the single-peer run for comparison, and stops the peers. Run from the top
# of a build tree (./shoal), or set SHOAL_BIN and SHOAL_DATA.
set -u
. "$(dirname "$0")/lib.sh"
M=$DATA/models/austen-dense-q8_0.gguf
PROMPT=${DEMO_PROMPT:-It is a truth universally acknowledged}
[ -x "$B" ] || fail "demo: $B not found; run it from the build tree (make demo)"
[ -f "$M" ] || fail "demo: $M not found"
"$B" key new "$T/k" >/dev/null || fail "shoal key new"
peer() { # peer NAME [--peer EP]
	local n=$1
	shift
	start "$n" "$M" --mem-limit 11M --ctx 256 "$@"
}
# (plancheck is a check program: `make demo` does not build it)
servable() { "$B" status --peer "$SEED" --key "$T/k" --json 2>/dev/null | grep -q '"servable": true'; }

echo "== starting 3 peers (11 MiB each: the model needs all three)"
peer peer1
SEED=$(ep peer1)
peer peer2 --peer "$SEED"
peer peer3 --peer "$SEED"
EP2=$(ep peer2)
wait_for 20 servable || fail "demo: no servable plan in 20 s"
echo
echo "== the view and the plan (shoal status --peer $SEED)"
"$B" status --peer "$SEED" --key "$T/k" || exit 1
echo
echo "== streaming through the pipeline (shoal run --peer $EP2)"
echo "prompt: $PROMPT"
"$B" run --peer "$EP2" --key "$T/k" -p "$PROMPT" -n 48 --temp 0 || exit 1
echo
echo "== the same on one peer (shoal run MODEL), for comparison"
"$B" run "$M" -p "$PROMPT" -n 48 --temp 0 2>/dev/null
echo
echo "== stopping the peers"
stop_all TERM
echo "done"
