#!/bin/sh
# tests/sh/size_check_test.sh: the size checker fails on what it must.
# A made-up tree: runtime/node/ with a file of 600 lines passes; one of 601
# is reported; listed, it passes; a listed file back under the limit is
# reported.
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
chk="$src/tests/sh/size_check.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T/runtime/node" "$T/tests/sh"
echo '# none' >"$T/tests/sh/size_allow.txt"
lines() { seq "$2" | sed 's/^/int x/' >"$T/runtime/node/$1"; }
lines a.c 600
lines b.h 12
sh "$chk" "$T" >"$T/out" 2>&1 || { cat "$T/out"; fail "600 lines: the checker failed"; }
echo "ok: 600 lines pass"
lines a.c 601
sh "$chk" "$T" >"$T/out" 2>&1 && fail "601 lines: the checker passed"
grep -q "runtime/node/a.c has 601 lines" "$T/out" || { cat "$T/out"; fail "601 lines: not named"; }
echo "ok: $(cat "$T/out")"
echo runtime/node/a.c >>"$T/tests/sh/size_allow.txt"
sh "$chk" "$T" >"$T/out" 2>&1 || { cat "$T/out"; fail "listed: the checker failed"; }
echo "ok: a listed file passes"
lines a.c 20
sh "$chk" "$T" >"$T/out" 2>&1 && fail "a listed file under the limit: the checker passed"
grep -q "not over its limit" "$T/out" || { cat "$T/out"; fail "stale listing: not named"; }
echo "ok: $(cat "$T/out")"
echo PASS
