#!/bin/bash
# tests/sh/swa_prefix.sh: the prefix cache over sliding layers' rings
# (runtime/engine/engine_kv.c; runtime/dist/dist.h "The prefix cache") with
# real `shoal node` processes on 127.0.0.1.
#
# A gpt-oss fixture with a window of 8 on the even layers (a node's engine
# takes 32 rows a call: each sliding layer keeps a ring of 40 positions
# out of a context of 256). p1, p2, p3 at --mem-limit 4M (8.1 MiB needed)
# hold 2 or more stages with the cache on; p4 offers 100K, holds no stage
# and runs with --prefix-cache off: its requests compute every position,
# the reference.
#  1. A long prompt X (far past the ring), greedy: p1's text equals p4's.
#  2. Near: X and more words; the rings still hold the window before the
#     last whole block of X, so the stages reuse it (cached tokens > 0)
#     and the text equals p4's.
#  3. Far: a prompt that leaves X after a few blocks: rewinding there
#     would read positions the rings have overwritten, so every stage
#     computes it from the start (cached tokens 0), and the text equals
#     p4's.
#  4. SHOAL_KV_RING=0 (whole planes) on four other peers: the same texts,
#     and there the far prompt does reuse its blocks.
#  5. The caches count the KV their entries hold: fewer bytes a kept
#     position with rings than with whole planes.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
DS=$T/swa.gguf
MODEL=swa
"$BD/tests/helpers/gen_fixture" --arch gpt-oss --type Q8_0 --layers 6 --dim 256 --heads 4 \
	--kv-heads 2 --head-dim 64 --vocab 2048 --experts 8 --experts-used 2 --ff-exp 128 \
	--window 8 --ctx 512 --seed 3 "$DS" >/dev/null 2>&1 || fail "gen_fixture gpt-oss"
cmpl() { api_post "$1" "$2" /v1/completions "{\"model\":\"$MODEL\",\"max_tokens\":8,\"temperature\":0,\"prompt\":\"$3\"}"; }
text() { jget "$1" 'd["choices"][0]["text"]'; }
cached() { jget "$1" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]'; }
ntok() { "$B" tokenize "$DS" "$1" | wc -w; }

X="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty, and then the numbers go on: twenty one twenty two twenty three twenty four twenty five twenty six twenty seven twenty eight twenty nine thirty, thirty one thirty two thirty three"
XN="$X thirty four thirty five"
Y="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen and something else entirely"

kept() { # kept PREFIX: the prefix caches' bytes per kept position over the 3 peers
	local b=0 n=0 i
	for i in 1 2 3; do
		b=$((b + $(stage_met "$1$i" bytes)))
		n=$((n + $(stage_met "$1$i" tokens)))
	done
	[ "$n" -gt 0 ] || fail "the caches of $1 1-3 keep nothing"
	echo "$((b / n)) ($b / $n)"
}
cluster() { # cluster PREFIX [env...]: 3 stage peers and the reference, $A1 and $A4
	local x=$1
	shift
	LAUNCH="env $*" start "${x}1" "$DS" --ctx 256 --mem-limit 4M --api 127.0.0.1:0
	LAUNCH="env $*" start "${x}2" "$DS" --ctx 256 --mem-limit 4M --peer "$(ep "${x}1")"
	LAUNCH="env $*" start "${x}3" "$DS" --ctx 256 --mem-limit 4M --peer "$(ep "${x}1")"
	LAUNCH="env $*" start "${x}4" "$DS" --ctx 256 --mem-limit 100K --peer "$(ep "${x}1")" \
		--api 127.0.0.1:0 --prefix-cache off
	wait_for 40 eval 'servable_all "" '"${x}1 ${x}2 ${x}3 ${x}4"' && [ "$("$PC" "$T/st-'"${x}"'1.json" stages)" -ge 2 ]' ||
		fail "no servable plan of 2+ stages on ${x}1..${x}4: $("$PC" "$T/st-${x}1.json" servable)"
	local st
	st=$(for i in 0 1 2 3; do "$PC" "$T/st-${x}1.json" stage $i 2>/dev/null; done | tr '\n' ' ')
	case " $st " in *" ${x}4 "*) fail "${x}4 (the reference, cache off) holds a stage: $st" ;; esac
	A1=$(api_port "${x}1")
	A4=$(api_port "${x}4")
	echo "${x}: $("$PC" "$T/st-${x}1.json" stages)-stage plan (${*:-rings})"
}

NX=$(ntok "$X")
NY=$(ntok "$Y")
echo "X: $NX tokens, Y: $NY tokens"
[ "$NX" -gt 120 ] || fail "X is $NX tokens: too short to wrap the rings"
[ "$NY" -gt 40 ] || fail "Y is $NY tokens: it shares no whole blocks with X"

cluster p
# 1. X
cmpl "$T/x.json" "$A1" "$X"
cmpl "$T/xr.json" "$A4" "$X"
[ "$(text "$T/x.json")" = "$(text "$T/xr.json")" ] || fail "X differs from the reference (p4)"
[ "$(cached "$T/xr.json")" = 0 ] || fail "p4 (cache off) reports cached tokens"
# 2. near
cmpl "$T/xn.json" "$A1" "$XN"
cmpl "$T/xnr.json" "$A4" "$XN"
CN=$(cached "$T/xn.json")
echo "near: $CN of $(jget "$T/xn.json" 'd["usage"]["prompt_tokens"]') tokens cached"
[ "$CN" -ge "$(((NX - 16) / 16 * 16))" ] || fail "near reuse cached $CN tokens (X is $NX)"
[ "$(text "$T/xn.json")" = "$(text "$T/xnr.json")" ] || fail "near reuse differs from the reference (p4)"
# 3. far
cmpl "$T/y.json" "$A1" "$Y"
cmpl "$T/yr.json" "$A4" "$Y"
CY=$(cached "$T/y.json")
echo "far: $CY of $NY tokens cached"
[ "$CY" = 0 ] || fail "a rewind past the rings reused $CY tokens"
[ "$(text "$T/y.json")" = "$(text "$T/yr.json")" ] || fail "the far prompt differs from the reference (p4)"
TX=$(text "$T/x.json")
TN=$(text "$T/xn.json")
TY=$(text "$T/y.json")
RING=$(kept p)
stop_all

# 4. whole planes: the same texts
cluster q SHOAL_KV_RING=0
cmpl "$T/x2.json" "$A1" "$X"
cmpl "$T/xn2.json" "$A1" "$XN"
cmpl "$T/y2.json" "$A1" "$Y"
[ "$(text "$T/x2.json")" = "$TX" ] && [ "$(text "$T/xn2.json")" = "$TN" ] &&
	[ "$(text "$T/y2.json")" = "$TY" ] || fail "whole planes give other texts than rings"
CY2=$(cached "$T/y2.json")
echo "whole planes (far prompt: $CY2 tokens cached): the same texts"
[ "$CY2" -gt 0 ] || fail "whole planes did not reuse the far prompt's blocks: the test shows nothing"
WHOLE=$(kept q)
# 5. what the cache counts: the bytes its entries' slots hold, so a sliding
# layer's ring counts at most its 40 positions; per kept position that is
# less than the whole planes' count (equal before the cache knew rings)
echo "kept, bytes per position (bytes / positions): rings $RING, whole planes $WHOLE"
awk -v r="${RING%% *}" -v w="${WHOLE%% *}" 'BEGIN { exit !(r > 0 && w > 0 && r < 0.95 * w) }' ||
	fail "the cache counts $RING bytes a kept position with rings, $WHOLE with whole planes"
stop_all
echo "PASS"
