#!/bin/bash
# tests/sh/probe_busy.sh: a stage peer busy with a long prompt is not a
# gray failure (issue 35). The data-plane probes (runtime/node/
# serve_probe.c) are echoed by the data thread that runs the stage; a long
# prompt's frames arrive queued, and draining them (one engine run after
# another) used to keep the echoes back until the queue was empty: on a
# loaded machine (the 1.1 GB fixture, a 3.5k-token prompt, 2 stages) the
# others found the busy stage's data plane failing, left it out, and
# replayed the request again and again. The data thread now answers the
# probes between the frames of a drain.
#
# 3 real `shoal node` processes on 127.0.0.1 with the austen model at
# --mem-limit 11M (any 3 hold it, so each holds a stage); on b2 the test
# hook SHOAL_TEST_FRAME_MS=900 holds the data thread 900 ms after each
# stage frame it takes, as a slow engine would (its engine runs stay
# short, so the probes' bound stays at its floor, 1 s). A greedy request
# with a prompt of 8 frames (about 7 s of frames queued at b2) must give
# the single-peer ids with no peer named a data suspect, no pause and no
# replay. (Before the fix, b1 and b3 left b2 out and the request failed:
# no split of the layers fits without it.) Needs ./configure --enable-test-hooks (./bootstrap has it).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
"$B" --version | grep -q '^test hooks: yes' || skip "built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start b1 "$DENSE" --mem-limit 11M --ctx 256
SEED=$(ep b1)
SHOAL_TEST_FRAME_MS=900 start b2 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
start b3 "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"
wait_for 40 servable_all 3 b1 b2 b3 || fail "no 3-stage plan within 40 s"
# a prompt of ~230 tokens: 8 frames of at most 32 rows
P=$(python3 -c 'import sys; w = open(sys.argv[1]).read().split(); print(" ".join(w[300:470]))' \
	"$DATA/models/persuasion.txt")
"$B" run "$DENSE" -p "$P" -n 4 --temp 0 --ids --ctx 256 >"$T/ref" 2>"$T/ref.err" ||
	fail "local run: $(cat "$T/ref.err")"
t0=$(now_ms)
timeout 120 "$B" run --peer "$SEED" --key "$KEY" -p "$P" -n 4 --temp 0 --ids >"$T/r" 2>"$T/r.err" ||
	fail "the remote run: $(cat "$T/r.err")"
ms=$(($(now_ms) - t0))
same "ids through the busy stage" "$T/r" "$T/ref"
n=$(wc -w <"$T/ref")
echo "$n ids through b2 (900 ms a frame): same ids in $ms ms"
[ "$ms" -ge 4000 ] || fail "the request took $ms ms: b2's frames did not queue (the hook is off?)"
if grep -h "its data plane fails\|paused after\|replaying" "$T"/b?.log; then
	fail "a busy stage was taken for a gray failure"
fi
echo "no data suspect, no pause, no replay"
echo "PASS"
