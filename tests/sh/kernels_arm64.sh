#!/bin/sh
# tests/sh/kernels_arm64.sh: the NEON kernel tables (dotprod and baseline)
# against the scalar oracle on an x86 machine: cross-compiles quant.c, the
# kernel tables and tests/unit/test_kernels.c statically for aarch64 and runs the
# test under qemu-aarch64 (-cpu max: has dotprod) with the "quick" sizes.
# Exits 77 (SKIP) when the cross compiler or qemu is missing.
# Environment: SHOAL_SRCDIR (the tree), AARCH64_CC, QEMU_AARCH64 (from
# configure; looked up in PATH when empty).
set -u
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cc=${AARCH64_CC:-}
[ -n "$cc" ] || cc=$(command -v aarch64-linux-gnu-gcc || true)
qemu=${QEMU_AARCH64:-}
[ -n "$qemu" ] || qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if [ -z "$cc" ]; then
	echo "SKIP: no aarch64 cross compiler (install gcc-aarch64-linux-gnu)"
	exit 77
fi
if [ -z "$qemu" ]; then
	echo "SKIP: no qemu-aarch64 (install qemu-user)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-arm64.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
flags="-std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -I$src"
set -e
"$cc" $flags -march=armv8-a -DKERNELS_DOTPROD=0 -c "$src/runtime/cpu/kernels_neon.c" -o "$tmp/neon.o"
"$cc" $flags -march=armv8.2-a+dotprod -DKERNELS_DOTPROD=1 -c "$src/runtime/cpu/kernels_neon.c" \
	-o "$tmp/neondot.o"
"$cc" $flags -march=armv8-a -DKERNELS_HAVE_NEON -static -o "$tmp/test_kernels" \
	"$src/tests/unit/test_kernels.c" "$src/runtime/cpu/quant.c" "$src/runtime/cpu/kernels.c" \
	"$src/runtime/cpu/kernels_scalar.c" "$src/runtime/cpu/iq_grids.c" "$src/models/dtype.c" \
	"$src/base/assert.c" "$tmp/neon.o" "$tmp/neondot.o" -lm
set +e
out=$("$qemu" -cpu max "$tmp/test_kernels" quick 2>&1)
rc=$?
echo "$out"
echo "$out" | grep -q "table neon (isa neon)" || { echo "FAIL: the dotprod table did not run"; rc=1; }
echo "$out" | grep -q "table neon-base" || { echo "FAIL: the baseline table did not run"; rc=1; }
exit $rc
