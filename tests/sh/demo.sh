#!/bin/bash
# tests/sh/demo.sh: `make demo`: the whole mission on one machine, in about a
# minute, leaving nothing running.
#
# Four peers of the bundled trained model, each offering 11 MiB
# (--mem-limit) with KV for 512 tokens, so the 14.5 MB model needs three of
# them (3 stages) and the fourth waits as a spare. As root, with ip,
# dbus-daemon and avahi-daemon, each peer runs in its own network namespace
# with its own mDNS daemon and finds the others through DNS-SD, with no
# seeds; otherwise they run on 127.0.0.1 and join through the first one's
# address. The demo prints the view and the plan as they form, streams a
# text through peer 1's OpenAI-compatible API, kills a stage peer -9 in the
# middle of it, shows the new plan and that the completed text is the one
# a single-peer run gives, says where the dashboard is, and ends with a
# summary (peers, plan, tokens/s, recovery). Run from the top of a build
# tree (make demo), or set SHOAL_BIN and SHOAL_DATA. DEMO_LOOPBACK=1 skips
# the namespaces. KEEP=1 (make demo KEEP=1) runs on 127.0.0.1 and leaves
# the cluster running at the end, its dashboard reachable from this
# machine, and prints how to stop it (a script that stops the peers and
# removes their directory).
set -u
. "$(dirname "$0")/lib.sh"
GOSSIP_MS=100 # the node's default timers, as a user gets them
M=$DATA/models/austen-dense-q8_0.gguf
PROMPT=${DEMO_PROMPT:-It is a truth universally acknowledged}
NTOK=${DEMO_TOKENS:-160}
# the kill after 40 chunks, or a quarter of a shorter stream's tokens (a
# chunk may carry several)
KILL_AFTER=$((NTOK / 4 < 40 ? NTOK / 4 : 40))
STREAM=$(dirname "$0")/demo_stream.py
[ -x "$B" ] || fail "demo: $B not found; run it from the build tree (make demo)"
[ -f "$M" ] || fail "demo: $M not found"
command -v python3 >/dev/null || fail "demo: needs python3"
t_start=$(now_ms)
secs() { awk -v ms="$(($(now_ms) - $1))" 'BEGIN { printf "%.1f s", ms / 1000 }'; }

mode=loopback
if [ -z "${DEMO_LOOPBACK:-}" ] && [ -z "${KEEP:-}" ] && [ "$(id -u)" = 0 ] &&
	command -v ip >/dev/null && command -v dbus-daemon >/dev/null &&
	command -v avahi-daemon >/dev/null && ip netns add "demo$$probe" 2>/dev/null; then
	ip netns del "demo$$probe"
	mode=netns
fi
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
NODE=(--mem-limit 11M --ctx 512)
if [ $mode = netns ]; then
	NL_PFX=demo$$
	echo "== 4 emulated hosts (network namespaces on one bridge), each with its own mDNS daemon"
	nl_up 4 || fail "namespaces"
	NL_N=4 nl_mdns_up || fail "dbus/avahi"
	for i in 1 2 3 4; do
		api=()
		[ $i = 1 ] && api=(--api 0.0.0.0:47480)
		start_host $i "host$i" "$M" "${NODE[@]}" "${api[@]}" # named host$i
	done
	on1() { nl_exec 1 "$@"; }
	URL="http://$(nl_ip 1):47480"
	echo "   no seeds given: the peers find each other through DNS-SD (_shoal._tcp)"
else
	echo "== 4 peers on 127.0.0.1 (no root or no avahi-daemon for namespaces with mDNS:"
	echo "   the peers join through the first one's address instead of DNS-SD)"
	start peer1 "$M" "${NODE[@]}" --api 127.0.0.1:0
	SEED=$(ep peer1)
	for i in 2 3 4; do start "peer$i" "$M" "${NODE[@]}" --peer "$SEED"; done
	on1() { "$@"; }
	URL="http://127.0.0.1:$(api_port peer1)"
fi

# the view and the plan as they form, as peer 1 sees them
view() { on1 curl -s --max-time 2 "$URL/v1/cluster" >"$T/view.json" 2>/dev/null; }
vq() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T/view.json" "$1" 2>/dev/null; }
echo
echo "== discovery and planning, as peer 1 sees them"
t0=$(now_ms)
seen=" "
planned=no
deadline=$((t0 + 40000))
while [ "$(now_ms)" -lt $deadline ]; do
	if view; then
		for p in $(vq '" ".join(p["name"] for p in d["peers"] if p["state"] == "alive")'); do
			case "$seen" in *" $p "*) ;; *)
				echo "   +$(secs $t0): $p is alive in the view"
				seen="$seen$p " ;;
			esac
		done
		if [ $planned = no ] && [ "$(vq 'len(d["plan"].get("stages") or [])')" = 3 ]; then
			echo "   +$(secs $t0): a plan: $(vq '", ".join("%s layers %d-%d" % (s["name"], s["first_layer"], s["end_layer"] - 1) for s in d["plan"]["stages"])')"
			planned=yes
		fi
		if [ "$(vq 'd["plan"]["servable"]')" = True ]; then
			echo "   +$(secs $t0): servable: every peer of the plan has mapped its layers"
			break
		fi
	fi
	sleep 0.2
done
[ "$(vq 'd["plan"]["servable"]')" = True ] || fail "demo: no servable plan in 40 s"
stages0=$(vq '" -> ".join(s["name"] for s in d["plan"]["stages"])')
spare=$(vq '[p["name"] for p in d["peers"] if p["name"] not in [s["name"] for s in d["plan"]["stages"]]][0]')
# the victim: a stage peer, not peer 1 (it owns the run: a dead owner's
# clients lose their connection), stage 1 when it can be
VICTIM=$(vq '[s["name"] for s in sorted(d["plan"]["stages"], key=lambda s: s["first_layer"] != 1) if s["name"] not in ("peer1", "host1")][0]')
echo "   plan: 3 stages $stages0; $spare holds no stage (a spare)"
echo
if [ $mode = netns ]; then
	echo "== the dashboard: $URL/ inside host 1 (ip netns exec $(nl_ns 1) curl $URL/)"
else
	echo "== the dashboard: open $URL/ in a browser while the demo runs"
fi
echo
echo "== streaming $NTOK tokens through peer 1's API ($URL/v1/completions);"
echo "   after $KILL_AFTER of them, $VICTIM (a stage) is killed -9"
echo "prompt: $PROMPT"
# (stderr of the shell aside while the victim dies: no "Killed" job line)
{ on1 python3 "$STREAM" "$URL" "$PROMPT" "$NTOK" "$KILL_AFTER" "${PID[$VICTIM]}" "$T/stream.json" &&
	wait "${PID[$VICTIM]}"; } 2>"$T/stream.err"
[ -s "$T/stream.json" ] || fail "demo: the stream failed: $(cat "$T/stream.err")"
unset "PID[$VICTIM]"
sq() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T/stream.json" "$1"; }
[ "$(sq 'd["error"]')" = None ] || fail "demo: the stream: $(sq 'd["error"]')"
echo
echo "== after the kill"
wait_for 20 eval 'view && [ "$(vq "d[\"plan\"][\"servable\"]")" = True ]' || fail "demo: no plan after the kill"
stages1=$(vq '" -> ".join(s["name"] for s in d["plan"]["stages"])')
echo "   the peers saw $VICTIM die and re-planned: 3 stages $stages1"
echo "   the run paused $(sq '"%.0f ms" % (d["longest_pause_s"] * 1000)') (before token $(sq 'd["pause_after_chunk"] + 1')), replayed its history through the new plan, and went on"
"$B" run "$M" -p "$PROMPT" -n "$NTOK" --ctx 512 --temp 0 >"$T/local.txt" 2>/dev/null || fail "local run"
same=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["text"]; b=open(sys.argv[2]).read().rstrip("\n"); print("yes" if a == b else "no")' "$T/stream.json" "$T/local.txt")
[ "$same" = yes ] || fail "demo: the text differs from a single-peer run"
echo "   the text is identical to a single-peer run (shoal run MODEL -p ... --temp 0)"
echo
echo "== summary"
echo "   discovery: $([ $mode = netns ] && echo "mDNS/DNS-SD across 4 network namespaces" || echo "seeds on loopback"); 4 peers"
echo "   plan: 3 stages ($stages0), one spare; after the kill: $stages1"
echo "   streamed: $(sq 'd["tokens"]') tokens in $(sq '"%.1f s" % d["seconds"]'): $(sq '"%.0f" % (d["tokens"] / d["seconds"])') tokens/s with the pause, $(sq '"%.0f" % (d["tokens"] / max(d["seconds"] - d["longest_pause_s"], 1e-3))') without it"
echo "   recovery: kill -9 -> next token $(sq '"%.0f ms" % (d["longest_pause_s"] * 1000)'); text identical"
if [ -n "${KEEP:-}" ]; then
	{
		echo "#!/bin/sh"
		echo "# stops the peers of a kept \`make demo KEEP=1\` and removes their directory"
		echo "kill ${PID[*]} 2>/dev/null"
		echo "sleep 1; rm -rf '$T'"
		echo "echo 'the demo cluster is stopped'"
	} >"$T/stop.sh"
	chmod +x "$T/stop.sh"
	for n in "${!PID[@]}"; do unset "PID[$n]"; done # the exit trap leaves them running
	echo "   the cluster keeps running (KEEP=1): dashboard $URL/ , API $URL/v1"
	echo "   stop it with: sh $T/stop.sh"
	exit 0
fi
stop_all TERM
echo "   the peers stopped; demo done in $(secs "$t_start")"
