#!/bin/sh
# tests/sh/include_check_test.sh: the include checker fails on what it must.
#
# Copies the tree's sources to a temp dir; the clean copy passes; then, one
# at a time: an upward include between rooms (engine -> cli), between parts
# (net -> models), engine -> cpu, dist -> cpu (dist picks a backend through
# runtime/backends.h), a listed exception that no longer occurs, and a
# two-header circle; each must fail and be named.
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
chk="$src/tests/sh/include_check.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fresh() {
	rm -rf "$T/t" && mkdir -p "$T/t/tests/sh" &&
		(cd "$src" && tar cf - --exclude='*.o' --exclude='.deps' --exclude='*.a' \
			base models net scheduler runtime | tar xf - -C "$T/t") && cp "$src/tests/sh/include_allow.txt" "$T/t/tests/sh/"
}
expect() { # expect WHAT GREP: the checker fails and prints GREP
	if sh "$chk" "$T/t" >"$T/out" 2>&1; then fail "$1: the checker passed"; fi
	grep -q "$2" "$T/out" || { cat "$T/out"; fail "$1: no line matching '$2'"; }
	echo "ok: $1: $(grep "$2" "$T/out" | head -1)"
}
fresh
sh "$chk" "$T/t" >"$T/out" 2>&1 || { cat "$T/out"; fail "the clean tree fails"; }
echo "ok: the clean tree passes"

echo '#include "runtime/cli/cli.h"' >>"$T/t/runtime/engine/sampler.c"
expect "engine includes cli" 'runtime/engine/sampler.c:[0-9]* includes runtime/cli/cli.h'
fresh
echo '#include "models/gguf.h"' >>"$T/t/net/wire.c"
expect "net includes models" 'net/wire.c:[0-9]* includes models/gguf.h: net may not include models'
fresh
echo '#include "runtime/cpu/threadpool.h"' >>"$T/t/runtime/engine/engine_moe.c"
expect "engine includes cpu" 'engine_moe.c:[0-9]* includes runtime/cpu/threadpool.h'
fresh
echo '#include "runtime/cpu/backend_cpu.h"' >>"$T/t/runtime/dist/dist_stage.c"
expect "dist includes cpu" 'dist_stage.c:[0-9]* includes runtime/cpu/backend_cpu.h: runtime/dist may not include runtime/cpu'
fresh
echo '#include "net/ctl.h"' >>"$T/t/scheduler/plan.c"
expect "scheduler includes net" 'scheduler/plan.c:[0-9]* includes net/ctl.h: scheduler may not include net'
fresh
echo 'runtime/cli/main.c runtime/engine/engine.h' >>"$T/t/tests/sh/include_allow.txt"
expect "stale exception" 'no longer occurs: runtime/cli/main.c runtime/engine/engine.h'
fresh
echo '#include "base/log.h"' >>"$T/t/base/err.h"
echo '#include "base/err.h"' >>"$T/t/base/log.h"
expect "circle" 'circle:.*base/\(err\|log\)\.h.*base/\(err\|log\)\.h'
echo "7 checks of the checker passed"
