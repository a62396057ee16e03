#!/bin/sh
# tests/sh/names_check_test.sh: the names checker fails on what it must.
#
# Builds a small tree in a temp dir: a clean file (statics with plain names,
# a shoal_ function, a room__ function, main, a macro call with no ;, names
# in comments and strings) must pass; a bad file must fail with exactly
# its findings, each named with file:line, and nothing from the clean one.
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
chk="$src/tests/sh/names_check.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T/base" "$T/net" "$T/runtime/cpu"
cat >"$T/runtime/cpu/inline.h" <<'EOF'
#define ROOM__INLINE static inline __attribute__((always_inline))
EOF
cat >"$T/base/good.c" <<'EOF'
/* static int shoal_in_a_comment(void); */
#include "base/good.h"
#define LIST(X) X(a) X(b)
static const char *const names[] = {"static int shoal_in_a_string(void) {", "x"};
static int counter, table[4] = {1, 2}, *ptr;
static uint32_t (*fast)(uint32_t crc, const uint8_t *b, size_t n);
static int helper(int x);
HEAP_DEFINE(heap, int, less)
__attribute__((target("sse4.2"))) static unsigned
crc_raw(unsigned c,
        const unsigned char *b)
{
	static int shoal_inner_is_not_file_scope;
	return c + *b + (int)sizeof(struct { int shoal__x; });
}
int shoal_base_good(void) { return helper(counter); }
void base__shared(void) {}
static int helper(int x) { return x; }
int main(void) { return 0; }
typedef int (*shoal_good_fn)(void);
struct shoal_good_s { int a; };
EOF
sh "$chk" "$T" >"$T/out" 2>&1 || { cat "$T/out"; fail "the clean tree fails"; }
echo "ok: the clean tree passes"

cat >"$T/net/bad.c" <<'EOF'
static int shoal_bad_counter;
static int ok_one, room__bad_var = 3;
static void shoal_bad_proto(int x);
static const char *
shoal_bad_split(int x)
{
	return "";
}
int plain_public(void)
{
	return 0;
}
static int helper__twice(void) { return 0; }
ROOM__INLINE int shoal_bad_inline(void) { return 1; }
EOF
if sh "$chk" "$T" >"$T/out" 2>&1; then fail "the bad file passed"; fi
for want in 'net/bad.c:1: static variable shoal_bad_counter' \
	'net/bad.c:2: static variable room__bad_var' \
	'net/bad.c:3: static prototype shoal_bad_proto' \
	'net/bad.c:5: static function shoal_bad_split' \
	'net/bad.c:9: function plain_public is not static' \
	'net/bad.c:13: static function helper__twice' \
	'net/bad.c:14: static function shoal_bad_inline'; do
	grep -q "$want" "$T/out" || { cat "$T/out"; fail "no line matching '$want'"; }
	echo "ok: $want"
done
n=$(wc -l <"$T/out")
[ "$n" -eq 7 ] || { cat "$T/out"; fail "$n findings, want 7"; }
echo "9 checks of the checker passed"
