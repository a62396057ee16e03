#!/bin/bash
# tests/sh/tp_mla.sh: `shoal node --tensor` with an MLA model (deepseek2),
# whose layers the engine cannot split among a tensor group's members
# (runtime/engine/engine_tp.c), stops at start with a clear error instead
# of planning a group that never becomes servable; without --tensor the
# same model serves.
. "$(dirname "$0")/lib.sh"
M=$DATA/models/tiny-deepseek2-q8_0.gguf
[ -r "$M" ] || skip "no $M"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start a "$M" --ctx 128 --tensor
wait "${PID[a]}"
rc=$?
unset "PID[a]"
[ "$rc" = 1 ] || fail "shoal node --tensor with an MLA model exited $rc"
grep -q "tensor groups of MLA models are not supported yet: start it without --tensor" "$T/a.log" ||
	fail "no clear error: $(tail -n 3 "$T/a.log")"
start b "$M" --ctx 128
wait_for 60 servable_all 1 b || fail "the MLA model does not serve without --tensor"
echo "ok: $(grep -o -- '--tensor: .*' "$T/a.log")"
