#!/bin/bash
# tests/sh/tp_mla.sh: a tensor group of an MLA model (deepseek2) through
# `shoal node --tensor` on 127.0.0.1. MLA's latent cache is every head's,
# so each member runs the whole attention (and keeps the whole cache) while
# the leading dense layer's FFN, the routed experts and the head are split
# (runtime/engine/engine_tp.c). Two members with unequal speeds (probe
# files) and SHOAL_TEST_TP_PREFER=1 (the group is taken on this small
# fixture, where it cannot pay): greedy ids (24) and logprobs (6 x top 5)
# of three prompts through each member equal a local run; on each member
# the gathers of a run are 2 for the dense layer and 1 for each MoE layer
# (none for attention), each one frame to the other member.
set -u
. "$(dirname "$0")/lib.sh"
M=$DATA/models/tiny-deepseek2-q8_0.gguf
[ -r "$M" ] || skip "no $M"
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks (SHOAL_TEST_TP_PREFER)"
export SHOAL_TEST_TP_PREFER=1
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start p0 ""
wait_for 20 test -s "$T/p0/probe" || fail "no probe file"
stop p0 TERM
ISA=$(cut -d' ' -f3 "$T/p0/probe")
probe() { mkdir -p "$T/$1" && echo "shoal-probe 3 $ISA $2 $(($2 * 3)) $(date +%s) l1" >"$T/$1/probe"; }
probe a 40000
probe b 20000
TP=(--tensor --link-us 5 --ctx 128)
start a "$M" "${TP[@]}"
start b "$M" "${TP[@]}" --peer "$(ep a)"
group2() { servable_all 1 a b && [ "$("$PC" "$T/st-a.json" members 0 | wc -w)" = 2 ]; }
wait_for 60 group2 || fail "no servable plan with a group of 2: $("$PC" "$T/st-a.json" servable)"
echo "deepseek2: a group of 2 ($("$PC" "$T/st-a.json" members 0))"
for P in "hello world" "It is a truth universally acknowledged" "1 2 3 4 5"; do
	"$B" run "$M" -p "$P" -n 24 --temp 0 --ids >"$T/l-ids" 2>/dev/null || fail "local run"
	"$B" run "$M" -p "$P" -n 6 --temp 0 --logprobs 5 >"$T/l-lp" 2>/dev/null || fail "local run"
	for n in a b; do
		"$B" run --peer "$(ep $n)" --key "$KEY" -p "$P" -n 24 --temp 0 --ids >"$T/r-ids" \
			2>"$T/r-err" || fail "run via $n: $(cat "$T/r-err")"
		same "greedy ids via $n ($P)" "$T/r-ids" "$T/l-ids"
		"$B" run --peer "$(ep $n)" --key "$KEY" -p "$P" -n 6 --temp 0 --logprobs 5 >"$T/r-lp" \
			2>"$T/r-err" || fail "logprobs via $n: $(cat "$T/r-err")"
		same "logprobs via $n ($P)" "$T/r-lp" "$T/l-lp"
	done
done
# gathers a run: layer 0 is dense (2), layers 1-3 MoE (1 each;
# models/README.md), attention none
G=5
for n in a b; do
	status "$n" || fail "status of $n"
	runs=$("$PC" "$T/st-$n.json" data stage.runs)
	g=$("$PC" "$T/st-$n.json" data stage.gathers)
	s=$("$PC" "$T/st-$n.json" data stage.gather_sent)
	[ "$runs" -gt 0 ] && [ "$g" = $((runs * G)) ] && [ "$s" = "$g" ] ||
		fail "$n: $runs runs, $g gathers, $s frames sent; want $G gathers a run (none for attention), one frame each"
done
echo "ok: ids and logprobs through both members identical to one peer; $G gathers a run ($g in $runs runs)"
