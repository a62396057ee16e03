#!/bin/bash
# tests/sh/demo_keep.sh: `make demo KEEP=1` (issue 39): the demo ends with
# its cluster still running on 127.0.0.1; the dashboard and the API it
# names answer from this machine after the demo has exited; the stop
# script it names stops every peer and removes their directory.
set -u
. "$(dirname "$0")/lib.sh"
[ -f "$DATA/models/austen-dense-q8_0.gguf" ] || skip "no bundled model"
KEEP=1 DEMO_TOKENS=60 SHOAL_BIN=$B SHOAL_DATA=$DATA bash "$(dirname "$0")/demo.sh" >"$T/demo.out" 2>&1 ||
	fail "the demo failed: $(tail -5 "$T/demo.out")"
URL=$(sed -n 's|.*keeps running (KEEP=1): dashboard \(http://127.0.0.1:[0-9]*\)/ .*|\1|p' "$T/demo.out")
STOP=$(sed -n 's|.*stop it with: sh \(/.*stop.sh\)$|\1|p' "$T/demo.out")
[ -n "$URL" ] && [ -n "$STOP" ] || fail "the demo did not say where its cluster is and how to stop it: $(tail -4 "$T/demo.out")"
PIDS=$(sed -n 's/^kill \([0-9 ]*\) .*/\1/p' "$STOP")
[ -n "$PIDS" ] || fail "no peers in $STOP: $(cat "$STOP")"
cleanup_kept() { kill -9 $PIDS 2>/dev/null; rm -rf "$(dirname "$STOP")"; }
trap 'cleanup_kept; cleanup' EXIT
curl -s --max-time 5 "$URL/" | grep -q "<title>shoal</title>" || fail "the kept dashboard $URL/ does not answer"
curl -s --max-time 5 "$URL/v1/cluster" | grep -q '"servable": *true' || fail "the kept cluster is not servable"
R=$(curl -s --max-time 20 -H 'Content-Type: application/json' -d '{"prompt":"Emma","max_tokens":4}' "$URL/v1/completions")
echo "$R" | grep -q '"text"' || fail "the kept API did not complete: $R"
echo "kept: $URL/ answers after the demo exited ($(echo $PIDS | wc -w) peers)"
sh "$STOP" >/dev/null || fail "the stop script failed"
for p in $PIDS; do
	wait_for 10 sh -c "! kill -0 $p 2>/dev/null" || fail "peer $p still runs after the stop script"
done
[ ! -d "$(dirname "$STOP")" ] || fail "the stop script left $(dirname "$STOP")"
echo "the stop script stopped every peer and removed their directory"
