#!/bin/sh
# tests/sh/test_sched_arm64.sh: the scheduler gives the same digests, times
# and moved bytes on x86-64 and aarch64: tests/helpers/sched_xdigest.c is built
# natively and cross-compiled statically for aarch64 (run under qemu), and
# the two outputs must be identical line by line (also at -O0 natively).
# Exits 77 (SKIP) when the cross compiler or qemu is missing.
# Environment: SHOAL_SRCDIR, AARCH64_CC, QEMU_AARCH64 (from configure).
set -u
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
xcc=${AARCH64_CC:-}
[ -n "$xcc" ] || xcc=$(command -v aarch64-linux-gnu-gcc || true)
qemu=${QEMU_AARCH64:-}
[ -n "$qemu" ] || qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if [ -z "$xcc" ] || [ -z "$qemu" ]; then
	echo "SKIP: needs an aarch64 cross compiler and qemu-aarch64"
	exit 77
fi
case $(uname -m) in
aarch64 | arm64)
	echo "SKIP: already on arm64 (the other tests check the golden digests here)"
	exit 77
	;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-sched-arm64.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
srcs="$src/tests/helpers/sched_xdigest.c $src/base/err.c $src/base/hex.c $src/base/peer_id.c
	$src/base/assert.c $src/base/fmt.c"
for f in "$src"/scheduler/*.c; do # every file: the part uses only base
	srcs="$srcs $f"
done
flags="-std=gnu11 -Wall -Wextra -Wno-unused-parameter -I$src"
set -e
${CC:-cc} $flags -O2 -o "$tmp/native" $srcs
${CC:-cc} $flags -O0 -o "$tmp/native0" $srcs
"$xcc" $flags -O2 -static -o "$tmp/arm64" $srcs
set +e
"$tmp/native" >"$tmp/native.out" || exit 1
"$tmp/native0" >"$tmp/native0.out" || exit 1
"$qemu" "$tmp/arm64" >"$tmp/arm64.out" || exit 1
n=$(wc -l <"$tmp/native.out")
[ "$n" -gt 400 ] || { echo "FAIL: only $n lines"; exit 1; }
cmp "$tmp/native.out" "$tmp/native0.out" || { echo "FAIL: -O0 and -O2 differ"; exit 1; }
if ! cmp "$tmp/native.out" "$tmp/arm64.out"; then
	diff "$tmp/native.out" "$tmp/arm64.out" | head -20
	echo "FAIL: x86-64 and aarch64 plans differ"
	exit 1
fi
echo "ok   $n plans identical on x86-64 (-O2, -O0) and aarch64 ($(grep -c ' err ' "$tmp/native.out") refusals)"
exit 0
