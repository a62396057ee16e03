#!/bin/sh
# tests/sh/cycle_check.sh: calls between the files of one room go one way.
#
# Reads the symbols of the built objects (nm) of base/ scheduler/ models/
# net/ and the rooms of runtime/ (runtime/<x>/ each, runtime/*.c one more)
# and fails, one line per finding, when files of one room call each other
# in a circle: each strongly connected component of two or more files is
# one line, a closed walk along the calls from its first file, e.g.
#   cycle_check: runtime/cli: cmd_run.c -> cmd_run_remote.c -> cmd_run.c
# A call is an undefined symbol of a file's object that a global function
# (T) of another file of the same room defines; calls across rooms are
# include_check.sh's business (the include rule orders the rooms).
# Usage: cycle_check.sh [SRCDIR [BUILDDIR]] (defaults $SHOAL_SRCDIR, else
# the tree this script is in; $SHOAL_BUILDDIR, else SRCDIR). The objects
# of SRCDIR's foo/bar.c are BUILDDIR's foo/bar.o and foo/*-bar.o (automake
# prefixes a target's name when it has its own flags). Known cycles, each
# an open piece of work, are listed in tests/sh/cycle_allow.txt as the
# line printed less "cycle_check: " (an entry matches the same room and
# the same set of files); a listed cycle that no longer occurs is
# reported too, so the list only shrinks. Exit 1 on a finding, 2 when
# nothing is built.
LC_ALL=C
export LC_ALL
src=${1:-${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
bd=${2:-${SHOAL_BUILDDIR:-$src}}
bd=$(cd "$bd" && pwd) || exit 2
cd "$src" || exit 2
allow=tests/sh/cycle_allow.txt
[ -f "$allow" ] || allow=/dev/null
syms=$(mktemp)
objs=$(mktemp)
trap 'rm -f "$syms" "$objs"' EXIT
# "OBJECT SOURCE" for every object of every source file, objects relative
# to the build tree
for d in base scheduler models net runtime; do
	[ -d "$d" ] && find "$d" -name '*.c'
done | sort | while read -r f; do
	dir=${f%/*} base=${f##*/}
	base=${base%.c}
	for o in "$bd/$dir/$base.o" "$bd/$dir/"*-"$base.o"; do
		[ -f "$o" ] && echo "${o#"$bd"/} $f"
	done
done >"$objs"
if [ ! -s "$objs" ]; then
	echo "cycle_check: no objects of $src's sources under $bd: build first"
	exit 2
fi
# "SOURCE T|U SYMBOL", sorted by source; one nm for all (one each: 10 s)
(cd "$bd" && cut -d' ' -f1 "$objs" | xargs ${NM:-nm} -P -A) | awk -v objs="$objs" '
BEGIN { while ((getline line < objs) > 0) { split(line, w, " "); src[w[1] ":"] = w[2] } }
($3 == "T" || $3 == "U") && ($1 in src) { print src[$1], $3, $2 }' | sort >"$syms"
awk -v allowfile="$allow" '
function room(p) {
	if (p ~ /^runtime\/[^\/]+\//) { split(p, a, "/"); return "runtime/" a[2] }
	split(p, a, "/"); return a[1]
}
function base(p) { sub(/^.*\//, "", p); return p }
# the key of a cycle line "ROOM: a.c -> b.c -> a.c": the room and the
# sorted set of its files
function key(line,    r, w, n, i, j, t, s, seen) {
	r = line; sub(/:.*$/, "", r)
	sub(/^[^:]*:[ \t]*/, "", line); gsub(/->/, " ", line)
	n = split(line, w, " ")
	for (i = 1; i <= n; i++) if (w[i] in seen) { w[i] = "" } else seen[w[i]] = 1
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
		if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
	s = r ":"
	for (i = 1; i <= n; i++) if (w[i] != "") s = s " " w[i]
	return s
}
BEGIN {
	while ((getline line < allowfile) > 0) {
		if (line ~ /^#/ || line ~ /^[ \t]*$/) continue
		unused[key(line)] = line
	}
}
$2 == "T" { if (!(($1, $3) in defd)) { defd[$1, $3] = 1; def[room($1), $3] = def[room($1), $3] " " $1 } }
$2 == "U" { nu++; uf[nu] = $1; us[nu] = $3 }
END {
	# files numbered in sorted order (the input is sorted by file)
	for (i = 1; i <= nu; i++) {
		r = room(uf[i])
		if (!((r, us[i]) in def)) continue
		m = split(def[r, us[i]], d, " ")
		for (k = 1; k <= m; k++) if (d[k] != uf[i]) edge[uf[i], d[k]] = 1
	}
	for (e in edge) {
		split(e, ab, SUBSEP)
		for (k = 1; k <= 2; k++) if (!(ab[k] in id)) { id[ab[k]] = ++nf; name[nf] = ab[k] }
	}
	# sort the files by name so that every walk and line is the same each run
	for (i = 1; i <= nf; i++) for (j = i + 1; j <= nf; j++)
		if (name[j] < name[i]) { t = name[i]; name[i] = name[j]; name[j] = t }
	for (i = 1; i <= nf; i++) { id[name[i]] = i; rm[i] = room(name[i]) }
	for (e in edge) { split(e, ab, SUBSEP); adj[id[ab[1]], id[ab[2]]] = 1; reach[id[ab[1]], id[ab[2]]] = 1 }
	# reachability (calls stay in a room; at most a few hundred files: n^3
	# steps, under a second)
	for (k = 1; k <= nf; k++) for (i = 1; i <= nf; i++) if ((i, k) in reach)
		for (j = 1; j <= nf; j++) if ((k, j) in reach) reach[i, j] = 1
	bad = 0
	for (i = 1; i <= nf; i++) {
		if (i in done) continue
		n = 0
		for (j = i; j <= nf; j++)
			if (j == i || ((i, j) in reach && (j, i) in reach)) { comp[++n] = j; done[j] = 1 }
		if (n < 2) continue
		delete inc; for (k = 1; k <= n; k++) inc[comp[k]] = 1
		# a closed walk from the first file through every file of the component
		walk = base(name[i]); cur = i
		for (k = 2; k <= n + 1; k++) {
			to = k <= n ? comp[k] : i
			if (k <= n && (to in onwalk)) continue
			walk = walk path(cur, to); cur = to
		}
		delete onwalk
		line = rm[i] ": " walk
		kk = key(line)
		if (kk in unused) { delete unused[kk]; continue }
		printf "cycle_check: %s\n", line
		bad++
	}
	for (kk in unused) { printf "cycle_check: listed cycle no longer occurs: %s\n", unused[kk]; bad++ }
	exit bad ? 1 : 0
}
# " -> x -> ... -> b": a shortest path from a to b (a != b) inside the
# component (breadth first, lower numbers first); marks the files it passes
function path(a, b,    q, h, t, par, x, y, s) {
	q[1] = a; h = 1; t = 1; par[a] = 0
	while (h <= t && !(b in par)) {
		x = q[h++]
		for (y = 1; y <= nf; y++)
			if ((x, y) in adj && (y in inc) && !(y in par)) { par[y] = x; q[++t] = y }
	}
	s = ""
	for (y = b; y != a; y = par[y]) { s = " -> " base(name[y]) s; onwalk[y] = 1 }
	return s
}' "$syms"
