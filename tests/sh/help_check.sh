#!/bin/bash
# tests/sh/help_check.sh: every option a command's parser accepts is listed
# in that command's --help. The accepted options are read from the parser's
# source (option tables {"name", ..._argument} and "--name" literals), so a
# new option without a help line fails here. tokenize and detokenize share
# one source file: their helps are checked together. Every --help also
# exits 0 and prints a usage line.
set -u
. "$(dirname "$0")/lib.sh"
S=${SHOAL_SRCDIR:-$(dirname "$0")/../..}/runtime/cli
bad=0
checked=0
check() { # check "CMD..." FILE...
	local cmds=$1 o help="" c
	shift
	for c in $cmds; do
		local h
		h=$("$B" "$c" --help 2>&1) || { echo "shoal $c --help exits nonzero"; bad=1; }
		grep -q "usage: shoal $c" <<<"$h" || { echo "shoal $c --help has no usage line"; bad=1; }
		help="$help$h"$'\n'
	done
	local opts
	opts=$( (grep -ohE '"--[a-z][a-z0-9-]*"' "$@" | tr -d '"'
		grep -ohE '\{"[a-z][a-z0-9-]*", *(no|required|optional)_argument' "$@" |
			sed -E 's/\{"([^"]*)".*/--\1/') | sort -u | grep -vx -- "--help")
	for o in $opts; do
		checked=$((checked + 1))
		grep -qE -- "$o([^a-z0-9-]|$)" <<<"$help" || { echo "shoal $cmds: $o is accepted but not in --help"; bad=1; }
	done
}
check run "$S/cmd_run.c" "$S/cmd_run_remote.c"
check "tokenize detokenize" "$S/cmd_tokenize.c"
check perplexity "$S/cmd_perplexity.c"
check bench "$S/cmd_bench.c"
check node "$S/cmd_node.c"
check status "$S/cmd_status.c"
check key "$S/cmd_key.c"
check plan "$S/cmd_plan.c"
check chat "$S/cmd_chat.c"
# every command of `shoal --help` is one of those above
for c in $("$B" --help 2>&1 | sed -n 's/^  \([a-z]*\)  .*/\1/p'); do
	case " run tokenize detokenize perplexity bench node status key plan chat " in
	*" $c "*) ;;
	*) echo "command $c has no help check"; bad=1 ;;
	esac
done
# bad combinations name the flag and what it needs
err_is() { # err_is PATTERN ARGS...: shoal ARGS exits 2 with a message matching PATTERN
	local pat=$1 out rc
	shift
	out=$("$B" "$@" 2>&1)
	rc=$?
	[ $rc = 2 ] && grep -q -- "$pat" <<<"$out" || { echo "shoal $*: rc $rc, '$out'"; bad=1; }
}
err_is "mem-limit.* need --model FILE or --model-id" node --mem-limit 1G --insecure --state-dir "$T/s"
err_is "unexpected argument 'x.gguf' (a model file is given with --model FILE)" node x.gguf
err_is "--key and --insecure exclude each other" node --key "$T/k" --insecure
err_is "--cache-max needs --model-id" node --cache-max 1G --insecure
err_is "--model and --model-id exclude each other" node --model a.gguf --model-id any --insecure
err_is "--link-us wants 1..10000000" node --link-us 0 --insecure
err_is "--spin-us wants 0..100000, not '-5'" node --spin-us -5 --insecure
err_is "--spin-us wants 0..100000, not '100001'" node --spin-us 100001 --insecure
err_is "--spin-us wants 0..100000, not '2ms'" node --spin-us 2ms --insecure
err_is "--kv-type takes f16 or f32, not 'q8_0'" run m.gguf -p x --kv-type q8_0
err_is "--kv-type takes f16 or f32" bench m.gguf --kv-type F16
err_is "--kv-type takes f16 or f32" perplexity m.gguf t.txt --kv-type
err_is "--backend: unknown backend 'gpu9' (this build has: auto, .*cpu)" run m.gguf -p x --backend gpu9
err_is "--backend: unknown backend 'CPU'" bench m.gguf --backend CPU
err_is "--backend needs a name" perplexity m.gguf t.txt --backend
err_is "shoal node: --backend: unknown backend 'gpu9' (this build has: auto, .*cpu)" node --backend gpu9 --insecure --state-dir "$T/s"
[ $bad = 0 ] || fail "help does not list every option, or an error does not name its flag"
[ $checked -ge 60 ] || fail "only $checked options found: is the source scan broken?"
echo "$checked options of 10 commands, each in its command's --help"
echo PASS
