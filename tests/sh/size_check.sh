#!/bin/sh
# tests/sh/size_check.sh: files of the rooms kept to a size a reader can
# hold (issue 33: each file of runtime/node/ one job, under ~600 lines).
#
# Fails, one line per file, when a .c or .h file of a checked room has
# more lines than its limit:
#   runtime/node/  600
# Usage: size_check.sh [SRCDIR] (default $SHOAL_SRCDIR, else the tree this
# script is in). Exceptions, each an open piece of work, go in
# tests/sh/size_allow.txt as "FILE" lines (it starts empty); a listed file
# that is no longer over is reported too, so the list only shrinks.
src=${1:-${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
cd "$src" || exit 2
allow=tests/sh/size_allow.txt
[ -f "$allow" ] || allow=/dev/null
bad=0
over=$(for f in runtime/node/*.[ch]; do
	[ -f "$f" ] || continue
	n=$(wc -l <"$f")
	[ "$n" -gt 600 ] && echo "$f $n"
done)
listed() { grep -v '^#' "$allow" | grep -qx "$1"; }
for f in $(echo "$over" | cut -d' ' -f1); do
	listed "$f" && continue
	echo "size_check: $f has $(echo "$over" | grep "^$f " | cut -d' ' -f2) lines (limit 600): split it by job"
	bad=1
done
for f in $(grep -v '^#' "$allow"); do
	echo "$over" | grep -q "^$f " && continue
	echo "size_check: $f is listed in $allow but is not over its limit: remove the line"
	bad=1
done
[ $bad = 0 ] && echo "size_check: every file of runtime/node/ within 600 lines"
exit $bad
