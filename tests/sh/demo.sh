#!/bin/bash
# tests/sh/demo.sh: `make demo`: three local peers serve the bundled model.
#
# Starts 3 `shoal node` processes on 127.0.0.1 (ephemeral ports, seeded
# with the first, fresh state dirs and key in a temporary directory), each
# offering 11 MiB (--mem-limit) with KV for 256 tokens, which forces a
# 3-stage split of the 14.5 MB model; shows the view and the plan (`shoal
# status`), streams a text through the pipeline (`shoal run --peer`), shows
# the single-peer run for comparison, and stops the peers. Run from the top
# of a build tree (./shoal), or set SHOAL_BIN and SHOAL_DATA.
set -u
B=${SHOAL_BIN:-./shoal}
DATA=${SHOAL_DATA:-$(dirname "$0")/data}
M=$DATA/models/austen-dense-q8_0.gguf
PROMPT=${DEMO_PROMPT:-It is a truth universally acknowledged}
[ -x "$B" ] || { echo "demo: $B not found; run it from the build tree (make demo)"; exit 1; }
[ -f "$M" ] || { echo "demo: $M not found"; exit 1; }
T=$(mktemp -d /tmp/shoal-demo-XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }

"$B" key new "$T/k" >/dev/null || exit 1
start() { # start NAME [--peer EP]
	local n=$1
	shift
	"$B" node --state-dir "$T/$n" --name "$n" --listen 127.0.0.1:0 --no-mdns --key "$T/k" \
		--gossip-ms 50 --threads 1 --model "$M" --mem-limit 11M --ctx 256 "$@" \
		>"$T/$n.log" 2>&1 &
	PIDS+=($!)
}
ep() {
	for _ in $(seq 200); do
		[ -s "$T/$1/control" ] && grep -q '^endpoint ' "$T/$1/control" &&
			{ sed -n 's/^endpoint tcp:\/\///p' "$T/$1/control"; return 0; }
		sleep 0.05
	done
	echo "demo: peer $1 did not start:" >&2
	cat "$T/$1.log" >&2
	exit 1
}
echo "== starting 3 peers (11 MiB each: the model needs all three)"
start peer1
SEED=$(ep peer1)
start peer2 --peer "$SEED"
start peer3 --peer "$SEED"
EP2=$(ep peer2)
deadline=$(($(now_ms) + 20000))
until "$B" status --peer "$SEED" --key "$T/k" --json 2>/dev/null | grep -q '"servable": true'; do
	[ "$(now_ms)" -lt $deadline ] || { echo "demo: no servable plan in 20 s"; tail "$T"/*.log; exit 1; }
	sleep 0.2
done
echo
echo "== the view and the plan (shoal status --peer $SEED)"
"$B" status --peer "$SEED" --key "$T/k" || exit 1
echo
echo "== streaming through the pipeline (shoal run --peer $EP2)"
echo "prompt: $PROMPT"
"$B" run --peer "$EP2" --key "$T/k" -p "$PROMPT" -n 48 --temp 0 || exit 1
echo
echo "== the same on one peer (shoal run MODEL), for comparison"
"$B" run "$M" -p "$PROMPT" -n 48 --temp 0 2>/dev/null
echo
echo "== stopping the peers"
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
echo "done"
