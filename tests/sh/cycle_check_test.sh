#!/bin/sh
# tests/sh/cycle_check_test.sh: the call-cycle checker fails on what it must.
#
# Builds a made-up tree in a temp dir (sources in one, objects in another,
# as in a VPATH build): scheduler/a.c calls b.c; models/m.c and
# scheduler/b.c call each other across rooms (not its business); the
# clean tree passes. Then, one at a time: b.c calls back into a.c (a
# cycle, reported), the same with the cycle listed (passes), a listed
# cycle that no longer occurs, a ring of three files, a cycle between
# objects automake named with a target prefix (runtime/cli/shoal-q.o),
# and no objects at all.
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
chk="$src/tests/sh/cycle_check.sh"
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || { echo "SKIP: no C compiler ($cc)"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
S=$T/src B=$T/build
write() { # FILE TEXT: a source file of the made-up tree
	mkdir -p "$S/$(dirname "$1")" && printf '%s\n' "$2" >"$S/$1"
}
build() { # compile every source into the build tree, q.c under automake's prefix
	rm -rf "$B" && (cd "$S" && find . -name '*.c') | while read -r f; do
		f=${f#./} o=${f%.c}.o
		case "$f" in runtime/cli/q.c) o=runtime/cli/shoal-q.o ;; esac
		mkdir -p "$B/$(dirname "$o")" && "$cc" -c -o "$B/$o" "$S/$f" || exit 1
	done
}
fresh() {
	rm -rf "$S" && mkdir -p "$S/tests/sh" && echo '# known cycles' >"$S/tests/sh/cycle_allow.txt"
	write scheduler/a.c 'int b_f(int); int a_f(int x) { return b_f(x) + 1; }'
	write scheduler/b.c 'int m_f(int); int b_f(int x) { return x ? m_f(x - 1) : 0; }'
	write models/m.c 'int b_f(int); int m_f(int x) { return b_f(x); }'
}
expect() { # expect WHAT GREP: the checker fails and prints GREP
	build || fail "$1: does not compile"
	if sh "$chk" "$S" "$B" >"$T/out" 2>&1; then cat "$T/out"; fail "$1: the checker passed"; fi
	grep -q "$2" "$T/out" || { cat "$T/out"; fail "$1: no line matching '$2'"; }
	echo "ok: $1: $(grep "$2" "$T/out" | head -1)"
}
passes() { # passes WHAT
	build || fail "$1: does not compile"
	sh "$chk" "$S" "$B" >"$T/out" 2>&1 || { cat "$T/out"; fail "$1: the checker fails"; }
	echo "ok: $1 passes"
}
fresh
passes "the clean tree (a call across rooms back and forth)"

write scheduler/b.c 'int a_f(int); int b_f(int x) { return x ? a_f(x - 1) : 0; }'
expect "a cycle" '^cycle_check: scheduler: a.c -> b.c -> a.c$'
echo 'scheduler: b.c -> a.c -> b.c' >>"$S/tests/sh/cycle_allow.txt"
passes "the cycle listed (the same files from another start)"

fresh
echo 'scheduler: a.c -> b.c -> a.c' >>"$S/tests/sh/cycle_allow.txt"
expect "a stale entry" 'listed cycle no longer occurs: scheduler: a.c -> b.c -> a.c'

fresh
write scheduler/b.c 'int c_f(int); int b_f(int x) { return c_f(x); }'
write scheduler/c.c 'int a_f(int); int c_f(int x) { return x ? a_f(x - 1) : 0; }'
expect "a three-file ring" '^cycle_check: scheduler: a.c -> b.c -> c.c -> a.c$'

fresh
write runtime/cli/p.c 'int q_f(int); int p_f(int x) { return x ? q_f(x - 1) : 0; }'
write runtime/cli/q.c 'int p_f(int); int q_f(int x) { return x ? p_f(x - 1) : 0; }'
expect "a cycle through a prefixed object" '^cycle_check: runtime/cli: p.c -> q.c -> p.c$'

rm -rf "$B" && mkdir -p "$B"
if sh "$chk" "$S" "$B" >"$T/out" 2>&1; then fail "nothing built: the checker passed"; fi
echo "ok: nothing built: $(cat "$T/out")"
echo "7 checks of the checker passed"
