#!/bin/bash
# tests/sh/spec_mtp_fetch.sh: DeepSeek's MTP layer on a last stage that has
# no model file (shoal node --model-id: its part of the plan fetched from
# the peers into its weights cache, runtime/node/serve_part.c). The plan
# gives the head peer the layer only while a peer drafts with it
# (--speculate mtp: its record's spec_mtp, scheduler/cost.c mtp_mem).
# The deepseek2 fixture of spec_mtp.sh (gen_fixture, one nextn layer); w2
# holds the one stage, f1 and f3 (--mem-limit 1M) are owners only.
#  1. No peer drafts with mtp: w2's part has no MTP layer; a run through
#     f1 that asks for mtp gets no guesses (w2 logs the tensor it lacks)
#     and the ids of a local run without speculation.
#  2. f3 joins with --speculate mtp: w2's status shows f3 alone offering
#     it, the new plan gives w2 the layer, w2 fetches and verifies its
#     tensors (and only those: the rest is in its cache), and greedy and
#     seeded runs through f3 draft its guesses, ids exact.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/spec_mtp_lib.sh"
[ -x "$PC" ] || skip "$PC not built"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
DS=$T/ds2-mtp.gguf
"$BD/tests/helpers/gen_fixture" "${MTP_SHAPE[@]}" --nextn 1 "$DS" >/dev/null 2>&1 ||
	fail "gen_fixture deepseek2 --nextn 1"
for mode in greedy seeded; do
	# shellcheck disable=SC2046
	"$B" run "$DS" -p "$P" -n $N --ids $(args $mode) >"$T/l-$mode" 2>"$T/l.err" ||
		fail "local run: $(cat "$T/l.err")"
done
# the MTP layer's tensors: blk.6.* (the file's names, once each)
N_MTP=$(grep -ao 'blk\.6\.[a-z_.]*\(weight\|bias\)' "$DS" | sort -u | wc -l)
[ "$N_MTP" -gt 10 ] || fail "no MTP layer tensors found in the fixture ($N_MTP)"

# 1. no peer drafts with mtp
start f1 "$DS" --ctx 256 --mem-limit 1M
SEED=$(ep f1)
wait_for 20 eval 'status f1 && [ "$("$PC" "$T/st-f1.json" model_id)" != none ]' ||
	fail "f1 shows no model id"
MID=$("$PC" "$T/st-f1.json" model_id)
start w2 "" --model-id "$MID" --ctx 256 --peer "$SEED"
wait_for 60 servable_all 1 f1 w2 || fail "no plan with w2 fetching: $("$PC" "$T/st-w2.json" servable)"
[ "$("$PC" "$T/st-w2.json" stage 0)" = w2 ] || fail "w2 is not the one stage"
[ "$(jget "$T/st-w2.json" 'd["plan"]["head"].get("mtp", False)')" = False ] ||
	fail "the plan gives the head peer the MTP layer, though no peer drafts with it"
part=$(grep "weights: our part: " "$T/w2.log" | tail -n 1)
case $part in *"MTP layer"*) fail "w2's part has the MTP layer, no peer drafts with it: $part" ;; esac
# shellcheck disable=SC2046
"$B" run --peer "$SEED" --key "$KEY" -p "$P" -n $N --ids $(args seeded) --speculate mtp \
	>"$T/c-seeded" 2>"$T/c.err" || fail "a run asking for mtp, w2 without the layer: $(cat "$T/c.err")"
same "seeded ids, the last stage without the MTP layer" "$T/c-seeded" "$T/l-seeded"
read -r DR _ <<<"$(drafted f1)"
[ "${DR:-0}" = 0 ] || fail "guesses drafted ($DR) though w2 does not hold the MTP layer"
grep -q "no MTP guesses: tensor blk\.6\..* is not held here" "$T/w2.log" ||
	fail "w2 does not say why it sends no guesses: $(grep -i mtp "$T/w2.log" | tail -n 3)"
echo "w2 from its cache, without the MTP layer: no guesses ($(grep -o 'no MTP guesses: .*' "$T/w2.log" | head -n 1)), ids exact"

# 2. f3 drafts with mtp
fetched_before=$(grep -c "fetched and verified" "$T/w2.log")
start f3 "$DS" --ctx 256 --mem-limit 1M --speculate mtp --peer "$SEED"
with_mtp() { grep -q "weights: our part: .* (with the MTP layer's)" "$T/w2.log" && servable_all 1 f1 w2 f3; }
wait_for 60 with_mtp || fail "w2's part did not take the MTP layer: $(grep 'our part' "$T/w2.log" | tail -n 2)"
status w2 || fail "status w2"
offers=$(jget "$T/st-w2.json" 'sorted(p["name"] for p in d["peers"] if p["speculate_mtp"])')
[ "$offers" = "['f3']" ] || fail "w2's status shows $offers offering mtp, not f3 alone"
[ "$(jget "$T/st-w2.json" 'd["plan"]["head"].get("mtp", False)')" = True ] ||
	fail "w2's plan does not give its head peer the MTP layer"
part=$(grep "weights: our part: .* (with the MTP layer's)" "$T/w2.log" | head -n 1)
echo "${part#*weights: }"
case $part in *"; $N_MTP missing"*) ;; *) fail "w2 did not miss exactly the $N_MTP tensors of the MTP layer: $part" ;; esac
[ "$(grep -c "fetched and verified" "$T/w2.log")" -gt "$fetched_before" ] ||
	fail "w2 did not fetch and verify the MTP layer's tensors"
grep "fetched and verified" "$T/w2.log" | tail -n 1 | sed 's/.*weights: /  /'
peer_runs f3 m "with the MTP layer from w2's cache"
read -r DR AC <<<"$(drafted f3)"
[ "${DR:-0}" -gt 0 ] || fail "w2 holds the MTP layer, yet no guesses drafted ('$DR', kept '$AC')"
echo "w2 from its cache with the MTP layer: ids exact, greedy and seeded; $DR drafted, $AC kept"
