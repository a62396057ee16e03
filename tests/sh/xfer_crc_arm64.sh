#!/bin/sh
# tests/sh/xfer_crc_arm64.sh: CRC-32C's arm64 path (net/xfer_frame.c)
# against its scalar twin on an x86 machine: tests/unit/test_xfer_frame.c
# cross-compiled statically for plain armv8-a (the CRC32 instructions
# found at run time through HWCAP_CRC32) and for armv8-a+crc (known at
# compile time), each run under qemu-aarch64 -cpu max, which must report
# the armv8-crc path. Exits 77 (SKIP) when the cross compiler or qemu is
# missing. Environment: SHOAL_SRCDIR, AARCH64_CC, QEMU_AARCH64 (from
# configure; looked up in PATH when empty).
set -u
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cc=${AARCH64_CC:-}
[ -n "$cc" ] || cc=$(command -v aarch64-linux-gnu-gcc || true)
qemu=${QEMU_AARCH64:-}
[ -n "$qemu" ] || qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if [ -z "$cc" ] || [ -z "$qemu" ]; then
	echo "SKIP: needs an aarch64 cross compiler (gcc-aarch64-linux-gnu) and qemu-aarch64 (qemu-user)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-crc-arm64.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
flags="-std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -I$src"
rc=0
for march in armv8-a armv8-a+crc; do
	"$cc" $flags -march=$march -static -o "$tmp/t" "$src/tests/unit/test_xfer_frame.c" \
		"$src/net/xfer_frame.c" "$src/base/err.c" "$src/base/assert.c" -lpthread -lm || exit 1
	out=$("$qemu" -cpu max "$tmp/t" 2>&1)
	st=$?
	echo "-march=$march:"
	echo "$out" | grep -E "crc32c|passed"
	[ $st -eq 0 ] || { echo "$out"; echo "FAIL: test_xfer_frame failed (-march=$march)"; rc=1; }
	echo "$out" | grep -q "^crc32c: armv8-crc" ||
		{ echo "FAIL: the armv8-crc path did not run (-march=$march)"; rc=1; }
done
exit $rc
