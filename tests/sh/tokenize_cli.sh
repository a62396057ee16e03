#!/bin/sh
# tests/sh/tokenize_cli.sh: `shoal tokenize` / `shoal detokenize` on a
# vocabulary-only GGUF, against a reference vector, and their errors: a
# truncated file and a file with the wrong magic each exit 1 with exactly
# one line on stderr; usage errors exit 2.
#
# Part: tests of runtime/ (CLI) and models/ (tokenizer).
set -u
: "${SHOAL_BIN:=./shoal}"
: "${SHOAL_DATA:=tests/data}"
V="$SHOAL_DATA/vocab/ggml-vocab-llama-spm.gguf"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-tokcli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The reference vector: "Hello world" is text 12 of the .inp, line 12 of
# the .out (no BOS).
want=$(sed -n 12p "$V.out" | sed 's/^ *//')
[ "$want" = "15043 3186" ] || fail "unexpected reference line: '$want'"
got=$("$SHOAL_BIN" tokenize "$V" "Hello world" --no-bos) || fail "tokenize exit $?"
[ "$got" = "$want" ] || fail "tokenize: '$got' != '$want'"
got=$("$SHOAL_BIN" tokenize "$V" "Hello world") || fail "tokenize (bos) exit $?"
[ "$got" = "1 $want" ] || fail "tokenize with BOS: '$got'"
got=$("$SHOAL_BIN" tokenize "$V" "<s>x" --special --no-bos)
[ "${got%% *}" = "1" ] || fail "--special: '$got'"
got=$(printf 'Hello world' | "$SHOAL_BIN" tokenize "$V" - --no-bos) || fail "tokenize - exit $?"
[ "$got" = "$want" ] || fail "tokenize from stdin: '$got'"
got=$("$SHOAL_BIN" detokenize "$V" 1 15043 3186) || fail "detokenize exit $?"
[ "$got" = "Hello world" ] || fail "detokenize: '$got'"

# expect_one_line STATUS CMD...: exit status STATUS, one stderr line.
expect_one_line() {
	want_rc=$1
	shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" -eq "$want_rc" ] || fail "$*: exit $rc, want $want_rc"
	n=$(wc -l <"$tmp/err")
	[ "$n" -eq 1 ] || { fail "$*: $n stderr lines"; cat "$tmp/err"; }
}

head -c 1000 "$V" >"$tmp/trunc.gguf"
expect_one_line 1 "$SHOAL_BIN" tokenize "$tmp/trunc.gguf" "Hello"
grep -q "^shoal tokenize: $tmp/trunc.gguf: " "$tmp/err" || fail "truncated: $(cat "$tmp/err")"

cp "$V" "$tmp/magic.gguf"
printf 'GGUX' | dd of="$tmp/magic.gguf" bs=1 count=4 conv=notrunc 2>/dev/null
expect_one_line 1 "$SHOAL_BIN" tokenize "$tmp/magic.gguf" "Hello"
grep -q "^shoal tokenize: $tmp/magic.gguf: " "$tmp/err" || fail "magic: $(cat "$tmp/err")"
expect_one_line 1 "$SHOAL_BIN" detokenize "$tmp/magic.gguf" 1

expect_one_line 1 "$SHOAL_BIN" tokenize "$tmp/missing.gguf" "Hello"
expect_one_line 1 "$SHOAL_BIN" detokenize "$V" 32000

# usage errors
"$SHOAL_BIN" tokenize >/dev/null 2>&1
[ $? -eq 2 ] || fail "tokenize without arguments: not 2"
"$SHOAL_BIN" tokenize "$V" "a" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "tokenize --bogus: not 2"
"$SHOAL_BIN" detokenize "$V" >/dev/null 2>&1
[ $? -eq 2 ] || fail "detokenize without ids: not 2"
"$SHOAL_BIN" detokenize "$V" 12x >/dev/null 2>&1
[ $? -eq 2 ] || fail "detokenize 12x: not 2"

# a system text over the run limit (models/prompt.h, 64 KiB): one clear line
big=$(head -c 70000 /dev/zero | tr '\0' a)
out=$("$SHOAL_BIN" run "${SHOAL_DATA:-tests/data}/models/austen-dense-q8_0.gguf" --chat \
	--system "$big" -p hi -n 1 2>&1)
rc=$?
[ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q "system text over 65536 bytes" ||
	fail "run --system of 70000 bytes: rc $rc, '$(printf '%s' "$out" | head -c 200)'"

[ "$fails" -eq 0 ] || exit 1
echo "tokenize_cli: ok"
