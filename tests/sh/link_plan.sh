#!/bin/bash
# tests/sh/link_plan.sh: nodes plan on the links they measured (issue 11).
# Two `shoal node` processes on 127.0.0.1 without --link-us: once each has
# probed the other, the plan's planned_links (status --json) holds the pair
# at the measured latency -- the larger of the two directions' published
# RTT (already bucketed by the peer that measured it) halved,
# net/linkview.h -- and both peers planned on the same figure. Then two
# with an explicit --link-us 7: that figure, for every link, in place of
# the measurements (no planned_links).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
ok() { echo "ok   $*"; }
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start a "$DENSE" --ctx 256 --tensor
start b "$DENSE" --ctx 256 --tensor --peer "$(ep a)"

# expected NAME: the latency (us) net/linkview.h derives from the records
# in NAME's status: max over directions of the least RTT, / 2
expected() {
	"$PC" "$T/st-$1.json" rtts | awk '
		$1 != "none" { k = $1 " " $2; if (!(k in m) || $3 < m[k]) m[k] = $3 }
		END { for (k in m) if (m[k] > best) best = m[k]; if (best) print int(best / 2); else print "none" }'
}
# consistent NAME: NAME's plan used one measured link, at the latency its
# records say now
consistent() {
	status "$1" || return 1
	local p e
	p=$("$PC" "$T/st-$1.json" planned)
	e=$(expected "$1")
	[ "$p" != none ] && [ "$e" != none ] && [ "$(echo "$p" | wc -l)" = 1 ] &&
		[ "$(echo "$p" | cut -d' ' -f3)" = "$e" ]
}
wait_for 60 consistent a || fail "a: planned $("$PC" "$T/st-a.json" planned), records: $("$PC" "$T/st-a.json" rtts)"
lat=$("$PC" "$T/st-a.json" planned | cut -d' ' -f3)
ok "a planned the measured link: $lat us one way ($("$PC" "$T/st-a.json" rtts | tr '\n' ';'))"
wait_for 60 consistent b || fail "b: planned $("$PC" "$T/st-b.json" planned)"
# both sides derive the same figure once their views agree
agree() { consistent a && consistent b && [ "$("$PC" "$T/st-a.json" planned)" = "$("$PC" "$T/st-b.json" planned)" ]; }
wait_for 60 agree || fail "a planned $("$PC" "$T/st-a.json" planned), b $("$PC" "$T/st-b.json" planned)"
ok "b planned the same: $("$PC" "$T/st-b.json" planned)"
stop_all TERM

# an explicit --link-us overrides the measurements
start c "$DENSE" --ctx 256 --tensor --cluster fixed --link-us 7
start d "$DENSE" --ctx 256 --tensor --cluster fixed --link-us 7 --peer "$(ep c)"
fixed() { # fixed NAME: NAME's plan is made at link_us 7 with no measured link
	status "$1" || return 1
	python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
sys.exit(0 if p.get("policy", {}).get("link_us") == 7 and not p.get("planned_links") and p.get("stages") else 1)' "$T/st-$1.json"
}
wait_for 60 fixed c || fail "c: plan $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["plan"]; print(p.get("policy"), p.get("planned_links"))' "$T/st-c.json")"
# it stays so after the probes have run
sleep 3
fixed c && fixed d || fail "after the probes: c or d planned on measured links"
ok "c and d planned every link at --link-us 7"
stop_all TERM
echo "PASS"
