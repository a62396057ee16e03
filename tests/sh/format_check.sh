#!/bin/sh
# tests/sh/format_check.sh: the C sources are formatted by .clang-format.
#
# Runs clang-format --dry-run -Werror with the committed .clang-format over
# the .c and .h files of base/ scheduler/ models/ net/ runtime/ tests/ and
# fails naming every file it would change. Generated files are left out:
# runtime/api/dashboard.c (made from dashboard.html at build time),
# runtime/vulkan/vk_shaders.c (the embedded shaders) and
# config.h. Without clang-format it skips (77), except under CI=true where
# a missing formatter fails. Also `make format-check`.
# Usage: format_check.sh [SRCDIR] (default $SHOAL_SRCDIR, else this tree).
src=${1:-${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
cd "$src" || exit 2
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null 2>&1; then
	if [ "${CI:-}" = true ]; then
		echo "format_check: $cf not found (CI=true: it must be installed)"
		exit 1
	fi
	echo "SKIP: $cf not found (./bootstrap installs it)"
	exit 77
fi
[ -f .clang-format ] || { echo "format_check: no .clang-format in $src"; exit 2; }
bad=0
for f in $(find base scheduler models net runtime tests -name '*.[ch]' \
	! -path runtime/api/dashboard.c ! -path runtime/vulkan/vk_shaders.c ! -name config.h | sort); do
	if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
		echo "format_check: $f is not formatted (clang-format -i $f)"
		bad=$((bad + 1))
	fi
done
if [ "$bad" -gt 0 ]; then
	echo "format_check: $bad file(s) differ from .clang-format ($("$cf" --version))"
	exit 1
fi
echo "format_check: all files formatted ($("$cf" --version))"
