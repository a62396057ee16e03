#!/bin/bash
# tests/sh/vulkan_cluster.sh: a cluster in which one peer computes on the
# Vulkan backend (Mesa's lavapipe here) and two on the CPU (issue 34,
# acceptance 3), real `shoal node` processes on 127.0.0.1, a 12-layer
# Llama-shaped Q8_0 fixture (tests/helpers/gen_fixture; ~0.7 MB a layer)
# at --mem-limit 5M a peer, so all three are needed and each stage has
# several layers:
#  1. v1 (--backend vulkan; SHOAL_TEST_GPU_MEM caps lavapipe's 2 GiB at
#     1.2 MB, one layer) has its stage split: its first layer on its GPU,
#     the rest on its CPU, as `shoal status --json` shows. Greedy runs through every peer give a local CPU run's tokens and
#     logprobs (within 0.05) up to its first near-tie (vulkan_ids_check.py),
#     and the HTTP API
#     (/v1/completions, temperature 0) gives the text `shoal run --peer`
#     gives through the same cluster.
#  2. v1 is killed -9 while a run streams through c1; a CPU peer takes its
#     place and the run ends with all its tokens, the ids streamed before
#     the kill those of an undisturbed run.
#  3. A node that names no backend, on a system without a GPU device node,
#     lists its CPU only and loads no Vulkan driver.
# Skips (77) without a Vulkan build or device; under CI=true, fails.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$T/l12.gguf
[ -x "$PC" ] || skip "$PC not built"
grep -q "define SHOAL_TEST_HOOKS 1" "$BD/config.h" 2>/dev/null || skip "built without --enable-test-hooks"
"$B" run --help 2>&1 | grep -q vulkan || skip "this build has no Vulkan backend (./configure --with-vulkan)"
why=$("$B" run "$DATA/models/austen-dense-q8_0.gguf" -p x -n 1 --backend vulkan 2>&1 >/dev/null) ||
	skip "no Vulkan device: $why"
command -v python3 >/dev/null || skip "python3 reads the status JSON here"
command -v curl >/dev/null || skip "curl is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
"$BD/tests/helpers/gen_fixture" --arch llama --type Q8_0 --layers 12 --dim 256 --ff 512 --heads 4 \
	--kv-heads 2 --vocab 2048 --ctx 512 --seed 5 "$DENSE" >/dev/null 2>&1 || fail "gen_fixture"
echo "apikey-vulkan-cluster" >"$T/apikey"
P="It is a truth universally acknowledged"
N=48
NODE=(--mem-limit 5M --ctx 256)
"$B" run "$DENSE" -p "$P" -n $N --temp 0 --logprobs 2 --backend cpu --ctx 256 >"$T/l-lp" 2>/dev/null ||
	fail "local run"
CHECK="python3 $SRC/tests/sh/vulkan_ids_check.py $T/l-lp"

SHOAL_TEST_GPU_MEM=1200000 start v1 "$DENSE" "${NODE[@]}" --backend vulkan
SEED=$(ep v1)
start c1 "$DENSE" "${NODE[@]}" --backend cpu --peer "$SEED" --api 127.0.0.1:0 --api-key "$T/apikey"
start c2 "$DENSE" "${NODE[@]}" --backend cpu --peer "$SEED"
wait_for 90 servable_all 3 v1 c1 c2 || fail "no 3-stage plan on v1 c1 c2"
grep -q "device 1: vulkan" "$T/v1.log" || fail "v1 lists no Vulkan device"
status v1 || fail "no status of v1"
# one line a stage: its layer ranges, device:backend:first-last
DV=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
for s in d["plan"]["stages"]:
    print(" ".join("%s:%s:%d-%d" % (r["device"], r["backend"], r["first_layer"], r["end_layer"] - 1)
                   for r in s["devices"]))' "$T/st-v1.json")
echo "the plan's stages: $(echo "$DV" | tr '\n' '|')"
echo "$DV" | grep -q "gpu:vulkan:.* cpu:cpu:" || fail "no stage split between v1's GPU and its CPU: $DV"

# 1. through every peer, and through the API
for n in v1 c1 c2; do
	"$B" run --peer "$(ep $n)" --key "$KEY" -p "$P" -n $N --temp 0 --logprobs 2 --timeout-ms 60000 \
		>"$T/r-$n" 2>"$T/r-$n.err" || fail "a run through $n: $(cat "$T/r-$n.err")"
	$CHECK "$T/r-$n" || fail "the run through $n differs from the CPU's before a near-tie"
done
same "ids through v1 and c1" "$T/r-v1" "$T/r-c1"
"$B" run --peer "$(ep c1)" --key "$KEY" -p "$P" -n 16 --temp 0 >"$T/r-text" 2>/dev/null || fail "text run"
U=http://127.0.0.1:$(api_port c1)
curl -s -H "Authorization: Bearer $(cat "$T/apikey")" -H 'Content-Type: application/json' \
	-d "{\"model\": \"l12\", \"prompt\": \"$P\", \"max_tokens\": 16, \"temperature\": 0}" \
	"$U/v1/completions" >"$T/api.json" || fail "the API request"
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' \
	"$T/api.json" >"$T/api-text" || fail "no completion: $(head -c 300 "$T/api.json")"
[ "$(tr -d '\n' <"$T/api-text")" = "$(tr -d '\n' <"$T/r-text")" ] ||
	fail "the API's text differs: '$(cat "$T/api-text")' vs '$(cat "$T/r-text")'"
echo "runs through v1, c1 and c2 agree with the CPU before a near-tie and with each other; the API's text equals run --peer's"

# 2. kill -9 of the Vulkan peer mid-stream; a CPU peer takes its place
M=200
"$B" run --peer "$(ep c1)" --key "$KEY" -p "$P" -n $M --temp 0 --ids --timeout-ms 60000 \
	>"$T/u-ids" 2>/dev/null || fail "the undisturbed run"
"$B" run --peer "$(ep c1)" --key "$KEY" -p "$P" -n $M --temp 0 --ids --stats --timeout-ms 60000 \
	>"$T/k-ids" 2>"$T/k-ids.err" &
RPID=$!
words() { if [ -f "$1" ]; then wc -w <"$1"; else echo 0; fi; }
at_least() { [ "$(words "$1")" -ge "$2" ]; }
wait_for 60 at_least "$T/k-ids" 20 || fail "the run did not stream: $(cat "$T/k-ids.err")"
at=$(words "$T/k-ids")
stop v1
start c3 "$DENSE" "${NODE[@]}" --backend cpu --peer "$(ep c1)"
wait $RPID || fail "the run failed after v1 was killed: $(cat "$T/k-ids.err")"
[ "$(words "$T/k-ids")" = $M ] || fail "the run ended with $(words "$T/k-ids") of $M ids"
tr ' ' '\n' <"$T/k-ids" | head -n "$at" >"$T/k-head"
tr ' ' '\n' <"$T/u-ids" | head -n "$at" >"$T/u-head"
same "the ids streamed before the kill" "$T/k-head" "$T/u-head"
echo "v1 killed -9 after ~$at of $M ids: the run ended with all of them; $(tail -n 1 "$T/k-ids.err" | sed 's/^shoal run: //')"

# 3. a node that names no backend (auto), where the system shows no GPU
# device node: it lists its CPU only and never loads a Vulkan driver
# (Mesa's pull in LLVM: about a second of CPU at every node's start)
if ls /dev/dri/renderD* /dev/nvidia0 /dev/nvidiactl /dev/kfd /dev/dxg >/dev/null 2>&1; then
	echo "3. skipped: this system shows a GPU device node"
else
	# the dynamic loader names every library it loads (a driver is
	# unloaded again when the instance goes: its mapping does not stay)
	LAUNCH="env LD_DEBUG=files" start a1 "$DENSE" "${NODE[@]}" --cluster alone
	wait_for 30 grep -q "device 0:" "$T/a1.log" || fail "a1 logs no device"
	grep -q "device 1:" "$T/a1.log" && fail "a1 (auto, no GPU node) lists a second device"
	grep -q "file=libzmq" "$T/a1.log" || fail "LD_DEBUG=files logged no library: the check shows nothing"
	drv=$(grep -o 'file=[^ ]*\(lvp\|LLVM\|mesa\)[^ ]*' "$T/a1.log" | sort -u | tr '\n' ' ')
	[ -z "$drv" ] || fail "a1 (auto, no GPU node) loaded a Vulkan driver: $drv"
	echo "3. a node with --backend auto and no GPU node: its CPU only, no driver loaded"
fi
echo PASS
