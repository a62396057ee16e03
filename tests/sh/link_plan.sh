#!/bin/bash
# tests/sh/link_plan.sh: nodes plan on the links they measured (issue 11).
# Two `shoal node` processes on 127.0.0.1 with --link-us 3000 (the figure
# for a link nobody measured): once each has probed the other, the plan's
# planned_links (status --json) holds the pair at the measured latency --
# the larger of the two directions' published RTT (already bucketed by the
# peer that measured it) halved, net/linkview.h -- not at 3000 us, and both
# peers planned on the same figure.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
ok() { echo "ok   $*"; }
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
start a "$DENSE" --link-us 3000 --ctx 256
start b "$DENSE" --link-us 3000 --ctx 256 --peer "$(ep a)"

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
[ "$lat" -lt 3000 ] || fail "a planned $lat us: the default, not a measurement"
ok "a planned the measured link: $lat us one way ($("$PC" "$T/st-a.json" rtts | tr '\n' ';'))"
wait_for 60 consistent b || fail "b: planned $("$PC" "$T/st-b.json" planned)"
# both sides derive the same figure once their views agree
agree() { consistent a && consistent b && [ "$("$PC" "$T/st-a.json" planned)" = "$("$PC" "$T/st-b.json" planned)" ]; }
wait_for 60 agree || fail "a planned $("$PC" "$T/st-a.json" planned), b $("$PC" "$T/st-b.json" planned)"
ok "b planned the same: $("$PC" "$T/st-b.json" planned)"
stop_all TERM
echo "PASS"
