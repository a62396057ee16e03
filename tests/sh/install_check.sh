#!/bin/bash
# tests/sh/install_check.sh: `make install DESTDIR=...` puts the binary, the
# model specs, the example clusters and the service templates in place, and
# the installed `shoal plan` finds its specs and clusters by name from any
# directory (through the binary's own ../share/shoal, not the source tree).
set -u
. "$(dirname "$0")/lib.sh"
command -v make >/dev/null 2>&1 || skip "make is not installed"
D=$T/dest
make -s -C "$BD" install DESTDIR="$D" >"$T/install.log" 2>&1 || fail "make install: $(tail -5 "$T/install.log")"
BIN=$(find "$D" -type f -name shoal -perm -u+x | head -n 1)
[ -n "$BIN" ] || fail "no installed binary under $D"
SHARE=$(dirname "$(dirname "$BIN")")/share/shoal
for f in specs/deepseek-v3.1-q4_k_m.json specs/README.md clusters/mac-studio-x4.json \
	clusters/linux-homelab.json service/shoal-node.service service/org.shoal.node.plist; do
	[ -f "$SHARE/$f" ] || fail "not installed: share/shoal/$f"
done
! grep -q '@[a-z]*@' "$SHARE/service/shoal-node.service" "$SHARE/service/org.shoal.node.plist" ||
	fail "a service template kept a placeholder"
grep -q "ExecStart=/.*/bin/shoal node" "$SHARE/service/shoal-node.service" ||
	fail "the systemd unit does not start the installed binary"
/usr/bin/python3 -c 'import plistlib,sys; plistlib.load(open(sys.argv[1], "rb"))' \
	"$SHARE/service/org.shoal.node.plist" || fail "the launchd plist does not parse"
cd "$T" || fail "cd"
"$BIN" plan --list >"$T/list" 2>&1 || fail "installed shoal plan --list: $(cat "$T/list")"
grep -q "model specs (--model) ($SHARE/specs)" "$T/list" ||
	fail "the installed shoal plan does not read its installed specs: $(head -n 1 "$T/list")"
grep -q "^  kimi-k2-q4_k_m$" "$T/list" || fail "--list misses a spec: $(cat "$T/list")"
grep -q "^  studio-and-minis$" "$T/list" || fail "--list misses a cluster: $(cat "$T/list")"
"$BIN" plan --view mac-studio-x4 --model deepseek-v3.1-q4_k_m >"$T/plan" 2>&1 ||
	fail "installed shoal plan by names: $(cat "$T/plan")"
grep -q "plan for DeepSeek-V3.1 Q4_K_M" "$T/plan" || fail "unexpected plan output: $(head -3 "$T/plan")"
if "$BIN" plan --view no-such-cluster --model deepseek-v3.1-q4_k_m >"$T/bad" 2>&1; then
	fail "an unknown cluster name was accepted"
fi
grep -q "no such file or example cluster (see --list)" "$T/bad" || fail "unclear error: $(cat "$T/bad")"
echo "installed: binary, $(ls "$SHARE/specs" | wc -l) spec files, $(ls "$SHARE/clusters" | wc -l) clusters, 2 service templates; the installed shoal plan plans by name from $T"
echo PASS
