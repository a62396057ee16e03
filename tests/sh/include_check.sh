#!/bin/sh
# tests/sh/include_check.sh: the one-way include rule (ARCHITECTURE.md).
#
# Reads every #include "..." of base/ models/ net/ scheduler/ runtime/ and
# fails, one line per finding, when a file includes upward across the parts
# or the rooms of runtime/, or when files include each other in a circle.
#   parts: base <- scheduler <- {models, net} <- runtime; models and net
#          never include each other.
#   rooms: cli -> node -> dist -> engine -> backend.h <- cpu, vulkan;
#          engine and cpu never include each other; vulkan may include
#          cpu (its host dequantizer, runtime/cpu/quant.h); backends.[ch] (the registry of
#          backend kinds) may include backend.h and the backend rooms and
#          is what cli, node and dist use to pick one; dist never names
#          cpu; cli and node still may (the compute probe, bench's kernel
#          line); node -> api, and api uses only base, scheduler, models
#          and net.
# Usage: include_check.sh [SRCDIR] (default $SHOAL_SRCDIR, else the tree
# this script is in). Known exceptions, each an open piece of work, are
# listed in tests/sh/include_allow.txt as "FROM TO" lines; an exception
# that no longer occurs is reported too, so the list only shrinks.
src=${1:-${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
cd "$src" || exit 2
allow=tests/sh/include_allow.txt
[ -f "$allow" ] || allow=/dev/null
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
find base models net scheduler runtime -name '*.[ch]' | sort | while read -r f; do
	awk -v f="$f" '/^[ \t]*#[ \t]*include[ \t]*"/ {
		s = $0; sub(/^[^"]*"/, "", s); sub(/".*$/, "", s)
		if (s != "config.h") print f, s, FNR }' "$f"
done >"$edges"
awk -v allowfile="$allow" '
function room(p) {
	if (p ~ /^runtime\/[a-z]+\//) { split(p, a, "/"); return "runtime/" a[2] }
	if (p ~ /^runtime\/backends\.[ch]$/) return "runtime/backends"
	if (p ~ /^runtime\//) return "runtime/backend"
	split(p, a, "/"); return a[1]
}
# may[x, y]: a file of room/part x may include one of y
BEGIN {
	n = split("base scheduler models net runtime/backend runtime/backends runtime/cpu runtime/vulkan runtime/engine runtime/dist runtime/api runtime/node runtime/cli", R, " ")
	for (i = 1; i <= n; i++) may[R[i], R[i]] = 1
	up["scheduler"] = "base"; up["models"] = "base scheduler"; up["net"] = "base scheduler"
	rt = "base scheduler models net runtime/backend"
	up["runtime/backend"] = "base scheduler models net"
	up["runtime/cpu"] = rt; up["runtime/engine"] = rt
	up["runtime/vulkan"] = rt " runtime/cpu"
	up["runtime/backends"] = rt " runtime/cpu runtime/vulkan"
	up["runtime/dist"] = rt " runtime/engine runtime/backends"
	up["runtime/api"] = "base scheduler models net"
	up["runtime/node"] = up["runtime/dist"] " runtime/dist runtime/api runtime/cpu"
	up["runtime/cli"] = up["runtime/node"] " runtime/node"
	for (x in up) { m = split(up[x], b, " "); for (j = 1; j <= m; j++) may[x, b[j]] = 1 }
	while ((getline line < allowfile) > 0) {
		if (line ~ /^#/ || line == "") continue
		split(line, w, " "); allowed[w[1], w[2]] = 1; unused[w[1], w[2]] = line
	}
}
{
	from = $1; to = $2; ln = $3
	if (to !~ /\//) next
	nfiles[from] = 1; adj[from] = adj[from] " " to
	ra = room(from); rb = room(to)
	if ((ra, rb) in may) next
	if ((from, to) in allowed) { delete unused[from, to]; next }
	printf "include_check: %s:%d includes %s: %s may not include %s\n", from, ln, to, ra, rb
	bad++
}
END {
	for (k in unused) { printf "include_check: listed exception no longer occurs: %s\n", unused[k]; bad++ }
	# circles: depth-first search over the include graph
	for (f in nfiles) if (!(f in color)) bad += dfs(f, "")
	exit bad ? 1 : 0
}
function dfs(f, path,    k, m, e, t, c, i) {
	color[f] = 1; path = path " " f; c = 0
	m = split(adj[f], e, " ")
	for (k = 1; k <= m; k++) {
		t = e[k]
		if ((t in color) && color[t] == 1) {
			# the circle is the part of the path from t on, back to t
			i = index(path " ", " " t " ")
			printf "include_check: circle:%s %s\n", substr(path, i), t
			c++
		} else if (!(t in color) && (t in nfiles)) c += dfs(t, path)
	}
	color[f] = 2
	return c
}' "$edges"
