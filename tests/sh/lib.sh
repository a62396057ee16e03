# tests/sh/lib.sh: what the multi-process shell tests share (source it with
# `. "$(dirname "$0")/lib.sh"`): real `shoal node` processes on 127.0.0.1
# or on emulated hosts (network namespaces), their state in one temporary
# directory $T, and the checks they are polled with.
#
#   ---- set-up       B BD SRC DATA PC VC T KEY, the EXIT trap, fail, skip
#   ---- polling      now_ms, wait_for, wait_soon
#   ---- nodes        start, ep, api_port, status, servable_all, same, stop,
#                     stop_all, moe_fixture, bench_fixture
#   ---- hosts        nl_require, nl_up, nl_mdns_up, nl_exec, nl_spawn,
#                     start_host, nl_partition, nl_heal, nl_down
#
# A node NAME keeps its state in $T/NAME, its log in $T/NAME.log and its PID
# in PID[NAME]; on exit every started node is killed and $T removed (KEEP=1
# keeps $T and says where). A test that sources this must run under bash.

# ---- set-up

BD=${SHOAL_BUILDDIR:-.}
B=${SHOAL_BIN:-$BD/shoal}
SRC=${SHOAL_SRCDIR:-$(dirname "${BASH_SOURCE[0]}")/../..}
DATA=${SHOAL_DATA:-$SRC/tests/data}
PC=$BD/tests/helpers/plancheck # reads plans out of status JSON
VC=$BD/tests/helpers/viewcheck # reads views out of status JSON
T=$(mktemp -d "/tmp/shoal-$(basename "$0" .sh)-XXXXXX")
KEY=$T/k        # the cluster key of start, start_host and status
GOSSIP_MS=50    # gossip base period of every node the tests start
# no compute probe retakes (runtime/node/node_probe.c): a retake moves the
# plan under a test whenever the machine turns quiet (probe_retake.sh sets 1)
export SHOAL_PROBE_RETAKE=${SHOAL_PROBE_RETAKE:-0}
declare -A PID  # NAME -> PID of a started node
declare -A HOST # NAME -> emulated host of a node started there

cleanup() {
	local p
	for p in "${PID[@]}"; do kill -9 "$p" 2>/dev/null; done
	# only our nodes: a bare `wait` would wait for the hosts' daemons too
	for p in "${PID[@]}"; do wait "$p" 2>/dev/null; done
	nl_down
	if [ -n "${KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

fail() { # fail MESSAGE: say it with the tails of the logs and the views, exit 1
	local f
	echo "FAIL: $*"
	for f in "$T"/*.log "$T"/h*/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 25 "$f"; }; done
	for f in "$T"/st-*.json; do [ -f "$f" ] && [ -x "$VC" ] && { echo "---- $f"; "$VC" "$f" summary; }; done
	exit 1
}
skip() { # skip REASON: exit 77 (SKIP); under CI=true, which has every tool, 1 (FAIL)
	echo "SKIP: $*"
	[ "${CI:-}" = true ] && exit 1
	exit 77
}

# ---- polling

now_ms() { echo $(($(date +%s%N) / 1000000)); }
wait_for() { # wait_for SECONDS cmd...: until cmd succeeds (every 0.2 s); 1 at the deadline
	wait_every 0.2 "$@"
}
# wait_soon SECONDS cmd...: as wait_for, every 10 ms: to act on a state that
# may not last 0.2 s (a short reply still streaming)
wait_soon() { wait_every 0.01 "$@"; }
wait_every() { # wait_every STEP SECONDS cmd...
	local step=$1 deadline=$(($(now_ms) + $2 * 1000))
	shift 2
	while [ "$(now_ms)" -lt $deadline ]; do
		"$@" && return 0
		sleep "$step"
	done
	return 1
}

# ---- nodes

start() { # start NAME MODEL [node args...]: a node on 127.0.0.1, no mDNS; MODEL "" for none
	# (LAUNCH, when set, is a command line that runs it: "taskset -c 0")
	local n=$1 m=$2
	shift 2
	${LAUNCH:-} "$B" node --state-dir "$T/$n" --name "$n" --listen 127.0.0.1:0 --no-mdns --key "$KEY" \
		--gossip-ms $GOSSIP_MS --threads 1 ${m:+--model "$m"} "$@" >>"$T/$n.log" 2>&1 &
	PID[$n]=$!
}
ep() { # ep NAME: the control endpoint HOST:PORT of a started node (waits up to 20 s)
	local _
	for _ in $(seq 400); do
		if [ -s "$T/$1/control" ] && grep -q '^endpoint ' "$T/$1/control"; then
			sed -n 's/^endpoint tcp:\/\///p' "$T/$1/control"
			return 0
		fi
		sleep 0.05
	done
	fail "node $1 did not start"
}
jget() { # jget FILE EXPR: EXPR of the JSON in FILE, as d (python3)
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"
}
api_post() { # api_post OUT PORT PATH BODY: POST a JSON body to a node's API; fail unless 200
	local code
	code=$(curl -s -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' \
		"http://127.0.0.1:$2$3" -d "$4")
	[ "$code" = 200 ] || fail "POST $3 on port $2: $code $(head -c 300 "$1")"
}
api_port() { # api_port NAME: the port a started node's HTTP API listens on (from its log)
	local _ p
	for _ in $(seq 100); do
		p=$(sed -n 's/.*API on http:\/\/127\.0\.0\.1:\([0-9]*\)\/v1.*/\1/p' "$T/$1.log" | tail -n 1)
		[ -n "$p" ] && { echo "$p"; return 0; }
		sleep 0.1
	done
	fail "no API port in $1's log"
}
status() { # status NAME [KEYFILE]: the node's status JSON in $T/st-NAME.json, asked on its host
	local on=()
	[ -n "${HOST[$1]:-}" ] && on=(nl_exec "${HOST[$1]}")
	"${on[@]}" "$B" status --state-dir "$T/$1" --key "${2:-$KEY}" --json --timeout-ms 2000 \
		>"$T/st-$1.json" 2>>"$T/status.log"
}
# json_find FILE KEYS EXPR [DEFAULT]: EXPR (python3, the object as o) of
# the first object in FILE's JSON, depth first, that has every one of the
# comma-separated KEYS; DEFAULT (else nothing) when none has them
json_find() {
	python3 - "$@" <<'EOF'
import json, sys
keys = sys.argv[2].split(",")
def find(o):
    if isinstance(o, dict):
        if all(k in o for k in keys):
            return o
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
    return None
o = find(json.load(open(sys.argv[1])))
if o is not None:
    print(eval(sys.argv[3], {"o": o}))
elif len(sys.argv) > 4:
    print(sys.argv[4])
EOF
}
# spec_counts NAME: "drafted kept" of NAME's sessions as owner (its status;
# "0 0" when it shows none)
spec_counts() {
	status "$1" || fail "status $1"
	json_find "$T/st-$1.json" spec,tokens '"%d %d" % (o["spec"]["drafted"], o["spec"]["accepted"])' "0 0"
}
# stage_met NAME KEY: the prefix cache's KEY (hits, tokens, bytes, ...) of
# NAME's stage, or its "rows" (0 when it holds none); asks its status
stage_met() {
	status "$1" || fail "status of $1"
	local e="o['prefix_cache']['$2']"
	[ "$2" = rows ] && e="o['rows']"
	json_find "$T/st-$1.json" prefix_cache,rows "$e" 0
}
# epochs_grow LOG...: in each node log, the plans that became servable
# have growing epochs, and an epoch recurs only for the plan it numbers (a
# plan that comes back after a moment without one): a served (epoch,
# digest) pair never comes again after another. For nodes never restarted.
epochs_grow() {
	awk '/ cluster: plan epoch / {
		for (i = 1; i < NF; i++) if ($i == "epoch") { e = $(i + 1) + 0; d = $(i + 3) }
		sub(":", "", d)
		cur[FILENAME] = e " " d
	}
	/ cluster: plan servable/ && FILENAME in cur {
		split(cur[FILENAME], c, " ")
		if (FILENAME in last && (c[1] < last[FILENAME] || (c[1] == last[FILENAME] && c[2] != dig[FILENAME]))) {
			printf "%s: served plan epoch %d (%s) after epoch %d (%s)\n", FILENAME, c[1], c[2],
				last[FILENAME], dig[FILENAME]
			bad = 1
		}
		last[FILENAME] = c[1]; dig[FILENAME] = c[2]
	} END { exit bad }' "$@"
}

servable_all() { # servable_all NSTAGES NAME...: all have the same servable plan ("": any stages)
	local want=$1 n d
	shift
	for n in "$@"; do
		status "$n" || return 1
		[ "$("$PC" "$T/st-$n.json" servable)" = yes ] || return 1
		[ -z "$want" ] || [ "$("$PC" "$T/st-$n.json" stages)" = "$want" ] || return 1
	done
	d=$("$PC" "$T/st-$1.json" digest)
	for n in "$@"; do [ "$("$PC" "$T/st-$n.json" digest)" = "$d" ] || return 1; done
}
same() { # same LABEL FILE_A FILE_B: fail unless equal (A is the remote run, B the local one)
	cmp -s "$2" "$3" || { echo "-- remote"; head -c 600 "$2"; echo "-- local"; head -c 600 "$3"; fail "$1 differs"; }
}
stop() { # stop NAME [SIGNAL]: signal one node (default KILL), wait, forget it; its exit status
	local p=${PID[$1]} rc
	kill -"${2:-9}" "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	rc=$?
	unset "PID[$1]" "HOST[$1]"
	return $rc
}
stop_all() { # stop_all [SIGNAL]: signal every started node (default KILL), wait, forget them
	local n
	for n in "${!PID[@]}"; do kill -"${1:-9}" "${PID[$n]}" 2>/dev/null; done
	for n in "${!PID[@]}"; do
		wait "${PID[$n]}" 2>/dev/null
		unset "PID[$n]" "HOST[$n]"
	done
}

# An architecture's fixture served by real nodes against single-peer runs
# (deepseek2_loopback.sh, gptoss_loopback.sh): $DS is the fixture, named
# LABEL in messages, and $T/k the cluster key.
# arch_local: the local greedy ids and logprobs of "hello world"
arch_local() {
	"$B" run "$DS" -p "hello world" -n 12 --temp 0 --ids >"$T/l-ids" 2>"$T/l-err" ||
		fail "local run: $(cat "$T/l-err")"
	"$B" run "$DS" -p "hello world" -n 5 --temp 0 --logprobs 4 >"$T/l-lp" 2>/dev/null ||
		fail "local logprobs"
}
# through_every_peer NAME...: every peer answers as one peer does
through_every_peer() {
	local n
	for n in "$@"; do
		"$B" run --peer "$(ep "$n")" --key "$T/k" -p "hello world" -n 12 --temp 0 --ids \
			>"$T/r-ids" 2>"$T/r-err" || fail "run via $n: $(cat "$T/r-err")"
		same "greedy ids via $n" "$T/r-ids" "$T/l-ids"
		"$B" run --peer "$(ep "$n")" --key "$T/k" -p "hello world" -n 5 --temp 0 --logprobs 4 \
			>"$T/r-lp" 2>"$T/r-err" || fail "logprobs via $n: $(cat "$T/r-err")"
		same "logprobs via $n" "$T/r-lp" "$T/l-lp"
	done
}
# start_three X [node args...]: peers X1 X2 X3 of $DS, joined through X1
start_three() {
	local x=$1
	shift
	start "${x}1" "$DS" --ctx 256 "$@"
	start "${x}2" "$DS" --ctx 256 "$@" --peer "$(ep "${x}1")"
	start "${x}3" "$DS" --ctx 256 "$@" --peer "$(ep "${x}1")"
}
# arch_stages LABEL: 3 peers at --mem-limit 3M (the fixture needs all
# three), a plan of 2 or more stages, every peer answering as one peer
arch_stages() {
	local t0
	t0=$(now_ms)
	start_three p --mem-limit 3M
	wait_for 20 eval 'servable_all "" p1 p2 p3 && [ "$("$PC" "$T/st-p1.json" stages)" -ge 2 ]' || {
		"$B" status --state-dir "$T/p1" --key "$T/k"
		fail "no servable $1 plan of 2+ stages within 20 s: $("$PC" "$T/st-p1.json" servable)"
	}
	echo "$1: $("$PC" "$T/st-p1.json" stages)-stage plan servable in $(($(now_ms) - t0)) ms"
	through_every_peer p1 p2 p3
	echo "$1, stages: ids and logprobs through every peer identical to one peer"
	stop_all
}
# arch_spread LABEL: 3 peers at --mem-limit 4M with --spread-experts, one
# layer's routed experts on 2 or more peers, every peer as one peer
arch_spread() {
	local t0
	t0=$(now_ms)
	start_three s --mem-limit 4M --spread-experts
	wait_for 20 eval 'servable_all "" s1 s2 s3 && [ "$("$PC" "$T/st-s1.json" spread)" -ge 2 ]' || {
		"$B" status --state-dir "$T/s1" --key "$T/k"
		fail "no servable $1 plan with routed experts on 2+ peers within 20 s: $("$PC" "$T/st-s1.json" servable)"
	}
	echo "$1: plan with $("$PC" "$T/st-s1.json" stages) stage(s), one layer's experts on $("$PC" "$T/st-s1.json" spread) peers, in $(($(now_ms) - t0)) ms"
	through_every_peer s1 s2 s3
	echo "$1, spread experts: ids and logprobs through every peer identical to one peer"
}

# bench_fixture PATH [GEN_FIXTURE ARGS...]: the 1.17 GB Llama-shaped Q8_0
# fixture of the benchmarks (tests/bench/decode_bound.sh) at PATH unless it
# is there (with the extra gen_fixture options given, e.g. --quiet-from),
# and the helpers the benchmarks use
bench_fixture() {
	local p
	for p in plancheck gen_fixture; do
		[ -x "$BD/tests/helpers/$p" ] || make -C "$BD" "tests/helpers/$p" >/dev/null || fail "cannot build tests/helpers/$p"
	done
	[ -s "$1" ] && return 0
	mkdir -p "$(dirname "$1")"
	echo "making $1 (1.17 GB)"
	"$BD/tests/helpers/gen_fixture" --arch llama --type Q8_0 --layers 22 --dim 2048 --ff 5632 \
		--heads 32 --kv-heads 4 --vocab 32000 --ctx 2048 --seed 1 "${@:2}" "$1.tmp" >/dev/null ||
		fail "gen_fixture failed"
	mv "$1.tmp" "$1"
}

# moe_fixture 4|6 PATH: a random qwen3moe fixture (8 experts, 2 used a
# token): 4 layers of dim 128 (seed 5), or 6 of dim 256 with smaller
# experts (seed 3)
moe_fixture() {
	local shape
	case $1 in
	4) shape=(--dim 128 --ff-exp 256 --seed 5) ;;
	6) shape=(--dim 256 --ff-exp 128 --seed 3) ;;
	*) fail "moe_fixture: no $1-layer fixture" ;;
	esac
	"$BD/tests/helpers/gen_fixture" --arch qwen3moe --type Q8_0 --layers "$1" "${shape[@]}" --ff 256 \
		--heads 4 --kv-heads 2 --vocab 2048 --experts 8 --experts-used 2 --ctx 512 "$2" \
		>/dev/null 2>&1 || fail "gen_fixture qwen3moe ($1 layers)"
}

# ---- hosts
#
# Each emulated host i is a network namespace ${NL_PFX}i with eth0 (a veth)
# plugged into bridge br0, which lives in its own namespace ${NL_PFX}sw, so
# nothing but the namespace names touches the root namespace, and
# concurrent runs with different prefixes may reuse the subnet. Each host
# can get its own dbus-daemon (private system bus on a socket in $T/hi)
# and its own avahi-daemon (private /run through a tmpfs in the mount
# namespace `ip netns exec` gives it). Facts and timings: shared TESTNET.md.
#
#   NL_PFX=xy$$ ; . lib.sh ; nl_require ; nl_up 3 ; nl_mdns_up
#   start_host 2 NAME MODEL ... ; nl_exec 1 cmd... ; (nl_down runs on exit)
# Never connect to 10.213.37.x from the root namespace: the VM's outer
# network accepts any TCP connection there; use nl_exec.

NL_PFX=${NL_PFX:-nl$$}
NL_SUBNET=${NL_SUBNET:-10.213.37}
NL_N=0 # hosts made by nl_up

nl_ns() { echo "${NL_PFX}$1"; }
nl_ip() { echo "$NL_SUBNET.$((10 + $1))"; }

# Root, ip, dbus-daemon, avahi-daemon and namespaces, or skip.
nl_require() {
	local why="" t
	[ "$(id -u)" = 0 ] || why="needs root for network namespaces"
	for t in ip dbus-daemon avahi-daemon; do
		[ -n "$why" ] || command -v "$t" >/dev/null 2>&1 || why="$t is not installed"
	done
	if [ -z "$why" ]; then
		if ip netns add "${NL_PFX}probe" 2>/dev/null; then
			ip netns del "${NL_PFX}probe"
		else
			why="cannot create network namespaces here"
		fi
	fi
	[ -z "$why" ] || skip "$why"
}

# Run a command on host i with the environment dns_sd clients need.
nl_exec() {
	local i=$1
	shift
	ip netns exec "$(nl_ns "$i")" env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$T/h$i/dbus.sock" \
		AVAHI_COMPAT_NOWARN=1 "$@"
}

# Start a command on host i in the background; NL_PID is then its PID (ip
# netns exec and env exec it, so NL_PID is the command itself; `nl_exec
# ... &` would give the PID of a subshell instead). Redirect the call.
nl_spawn() {
	local i=$1
	shift
	ip netns exec "$(nl_ns "$i")" env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$T/h$i/dbus.sock" \
		AVAHI_COMPAT_NOWARN=1 "$@" &
	NL_PID=$!
}

# start_host I NAME MODEL [node args...]: the node of host I (--name hostI,
# port 47470, mDNS on); MODEL "" for none
start_host() {
	local i=$1 n=$2 m=$3
	shift 3
	nl_spawn "$i" "$B" node --state-dir "$T/$n" --name "host$i" --listen 0.0.0.0:47470 --key "$KEY" \
		--gossip-ms $GOSSIP_MS --threads 1 ${m:+--model "$m"} "$@" >>"$T/$n.log" 2>&1
	PID[$n]=$NL_PID
	HOST[$n]=$i
}

# nl_up N: the switch namespace and N hosts, addresses 10.213.37.11..
nl_up() {
	local i ns sw=${NL_PFX}sw
	NL_N=$1
	ip netns add "$sw" || return 1
	ip -n "$sw" link set lo up
	ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 || return 1
	ip -n "$sw" link set br0 up
	# bridged frames must not go through iptables (a per-namespace knob)
	ip netns exec "$sw" sh -c 'for f in /proc/sys/net/bridge/bridge-nf-call-ip*tables; do
		[ -e "$f" ] && echo 0 >"$f"; done; true'
	for i in $(seq 1 "$NL_N"); do
		ns=$(nl_ns "$i")
		ip netns add "$ns" || return 1
		ip -n "$ns" link set lo up # down in a fresh namespace
		ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$sw" || return 1
		ip -n "$sw" link set "p$i" master br0 up
		ip -n "$ns" addr add "$(nl_ip "$i")/24" dev eth0
		ip -n "$ns" link set eth0 up
		mkdir -p "$T/h$i"
	done
}

# nl_partition I...: hosts I... onto a second switch (br1): no frame passes
# between them and the others, as if a cable between two switches were
# pulled; nl_heal puts them back on br0.
nl_partition() {
	local i sw=${NL_PFX}sw
	ip -n "$sw" link show br1 >/dev/null 2>&1 ||
		{ ip -n "$sw" link add br1 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 &&
			ip -n "$sw" link set br1 up; } || return 1
	for i in "$@"; do ip -n "$sw" link set "p$i" master br1 || return 1; done
}
nl_heal() {
	local i sw=${NL_PFX}sw
	for i in $(seq 1 "$NL_N"); do ip -n "$sw" link set "p$i" master br0 || return 1; done
}

# Private system bus for host i; its policy lets avahi own its name.
nl_dbus_start() {
	local d=$T/h$1
	rm -f "$d/dbus.sock"
	cat >"$d/dbus.conf" <<EOT
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$d/dbus.sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/> <allow own="*"/>
    <allow send_type="method_call"/> <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/> <allow receive_type="method_return"/>
    <allow receive_type="error"/> <allow receive_type="signal"/>
  </policy>
</busconfig>
EOT
	ip netns exec "$(nl_ns "$1")" dbus-daemon --config-file="$d/dbus.conf" --nofork --nopidfile \
		>"$d/dbus.log" 2>&1 &
}

# avahi-daemon for host i: its own host name (all namespaces share the UTS
# name), eth0 only, runs as root without chroot (config and bus socket are
# outside /etc/avahi), private /run (pid file and socket paths are fixed).
nl_avahi_start() {
	local i=$1 d=$T/h$1
	cat >"$d/avahi.conf" <<EOT
[server]
host-name=$(nl_ns "$i")
use-ipv4=yes
use-ipv6=no
allow-interfaces=eth0
enable-dbus=yes
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
EOT
	: >"$d/avahi.log"
	ip netns exec "$(nl_ns "$i")" sh -c "mount -t tmpfs tmpfs /run && exec env \
		DBUS_SYSTEM_BUS_ADDRESS=unix:path=$d/dbus.sock avahi-daemon -f $d/avahi.conf \
		--no-chroot --no-drop-root --no-rlimits --no-proc-title" >>"$d/avahi.log" 2>&1 &
	echo $! >"$d/avahi.pid" # sh execs the daemon: this is its PID
}

nl_wait_file() { # nl_wait_file TEST PATH [PATTERN]: up to 5 s
	local _
	for _ in $(seq 250); do
		if [ -z "${3:-}" ]; then
			[ "$1" "$2" ] && return 0
		else
			grep -q "$3" "$2" 2>/dev/null && return 0
		fi
		sleep 0.02
	done
	return 1
}

# nl_mdns_up: dbus and avahi on hosts 1..NL_N
nl_mdns_up() {
	local i
	for i in $(seq 1 "$NL_N"); do nl_dbus_start "$i"; done
	for i in $(seq 1 "$NL_N"); do
		nl_wait_file -S "$T/h$i/dbus.sock" || {
			echo "dbus on host $i did not start" >&2
			cat "$T/h$i/dbus.log" >&2
			return 1
		}
	done
	for i in $(seq 1 "$NL_N"); do nl_avahi_start "$i"; done
	for i in $(seq 1 "$NL_N"); do
		nl_wait_file -f "$T/h$i/avahi.log" "Server startup complete" || {
			echo "avahi on host $i did not start" >&2
			cat "$T/h$i/avahi.log" >&2
			return 1
		}
	done
}

# Kill only processes inside our namespaces, then delete them (none made:
# nothing to do). Safe to call twice; the EXIT trap calls it.
nl_down() {
	local i ns p
	[ "$NL_N" -gt 0 ] || return 0
	for i in $(seq 1 "$NL_N") sw; do
		p=$(ip netns pids "${NL_PFX}$i" 2>/dev/null)
		[ -n "$p" ] && kill $p 2>/dev/null
	done
	sleep 0.2
	for i in $(seq 1 "$NL_N") sw; do
		ns=${NL_PFX}$i
		p=$(ip netns pids "$ns" 2>/dev/null)
		[ -n "$p" ] && kill -9 $p 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
	NL_N=0
	return 0
}
