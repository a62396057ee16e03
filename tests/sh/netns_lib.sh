# tests/sh/netns_lib.sh: emulated hosts for the multi-host tests (source it).
#
# Each host is a network namespace ${NL_PFX}<i> with eth0 (a veth) plugged
# into bridge br0, which lives in its own namespace ${NL_PFX}sw, so nothing
# but the namespace names touches the root namespace, and concurrent runs
# with different prefixes may reuse the subnet. Each host can get its own
# dbus-daemon (private system bus on a socket in its state dir) and its
# own avahi-daemon (private /run through a tmpfs in the mount namespace
# `ip netns exec` gives it). Facts and timings: shared TESTNET.md.
#
#   NL_PFX=sh$$ ; source tests/sh/netns_lib.sh ; trap nl_down EXIT
#   nl_up 3 ; nl_mdns_up ; nl_exec 2 cmd... ; nl_spawn 1 daemon... ; nl_down
# Never connect to 10.213.37.x from the root namespace: the VM's outer
# network accepts any TCP connection there; use nl_exec.

NL_PFX=${NL_PFX:-nl$$}
NL_SUBNET=${NL_SUBNET:-10.213.37}
NL_STATE=${NL_STATE:-/tmp/shoal-netns-$NL_PFX}
NL_N=0

nl_ns() { echo "${NL_PFX}$1"; }
nl_ip() { echo "$NL_SUBNET.$((10 + $1))"; }
# Run a command on host i with the environment dns_sd clients need.
nl_exec() {
	local i=$1
	shift
	ip netns exec "$(nl_ns "$i")" env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$NL_STATE/h$i/dbus.sock" \
		AVAHI_COMPAT_NOWARN=1 "$@"
}

# Start a command on host i in the background; NL_PID is then its PID (ip
# netns exec and env exec it, so NL_PID is the command itself; `nl_exec
# ... &` would give the PID of a subshell instead). Redirect the call.
nl_spawn() {
	local i=$1
	shift
	ip netns exec "$(nl_ns "$i")" env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$NL_STATE/h$i/dbus.sock" \
		AVAHI_COMPAT_NOWARN=1 "$@" &
	NL_PID=$!
}

# nl_up N: the switch namespace and N hosts, addresses 10.213.37.11..
nl_up() {
	local i ns sw=${NL_PFX}sw
	NL_N=$1
	mkdir -p "$NL_STATE" || return 1
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
		mkdir -p "$NL_STATE/h$i"
	done
}

# Private system bus for host i; its policy lets avahi own its name.
nl_dbus_start() {
	local d=$NL_STATE/h$1
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
	local i=$1 d=$NL_STATE/h$1
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

nl_mdns_up() {
	local i
	for i in $(seq 1 "$NL_N"); do nl_dbus_start "$i"; done
	for i in $(seq 1 "$NL_N"); do
		nl_wait_file -S "$NL_STATE/h$i/dbus.sock" || {
			echo "dbus on host $i did not start" >&2
			cat "$NL_STATE/h$i/dbus.log" >&2
			return 1
		}
	done
	for i in $(seq 1 "$NL_N"); do nl_avahi_start "$i"; done
	for i in $(seq 1 "$NL_N"); do
		nl_wait_file -f "$NL_STATE/h$i/avahi.log" "Server startup complete" || {
			echo "avahi on host $i did not start" >&2
			cat "$NL_STATE/h$i/avahi.log" >&2
			return 1
		}
	done
}

# Kill only processes inside our namespaces, then delete them. Safe to call
# twice and from an EXIT trap.
nl_down() {
	local i ns p
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
	rm -rf "$NL_STATE"
	return 0
}
