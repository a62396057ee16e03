#!/bin/sh
# tests/sh/names_check.sh: the three visibilities of STYLE.md "Names".
#
#   public API        shoal_<part>_<name>, declared in a public header
#   shared in a room  <room>__<name>, declared in <room>_impl.h
#   file-local        static, carrying neither shoal_ nor __
# Reads the .c files of base/ scheduler/ models/ net/ runtime/ (not tests/)
# and fails, one line per finding with file:line, on
#   (a) a file-scope static function (definition or prototype) or static
#       variable whose name begins with shoal_ or contains __;
#   (b) a file-scope function definition that is not static and whose name
#       neither begins with shoal_ nor contains __ (main is exempt).
# Comments, strings and preprocessor lines are skipped; a declaration may
# span lines; __attribute__((...)) and all-caps macros before it are passed.
# Usage: names_check.sh [SRCDIR] (default $SHOAL_SRCDIR, else this tree).
src=${1:-${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
cd "$src" || exit 2
files=$(find base scheduler models net runtime -name '*.c' 2>/dev/null | sort)
[ -n "$files" ] || { echo "names_check: no .c files under $src" >&2; exit 2; }
# shellcheck disable=SC2086 # the file names have no spaces
awk '
# ---- tokenizer: tok[1..nt] with their lines tl[], per file -------------
function flush(   i) { parse(); nt = 0; incom = 0; inpp = 0 }
function add(t) { tok[++nt] = t; tl[nt] = FNR }
FNR == 1 && NR != 1 { flush() }
FNR == 1 { file = FILENAME }
{
	s = $0
	if (inpp) { inpp = (s ~ /\\$/); next }
	if (!incom && s ~ /^[ \t]*#/) {
		# an object-like macro that says static (KERNELS__INLINE) counts as static
		if (match(s, /^[ \t]*#[ \t]*define[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]/) &&
		    s ~ /[ \t]static([ \t]|$)/) {
			m = substr(s, 1, RLENGTH); sub(/^[ \t]*#[ \t]*define[ \t]+/, "", m)
			sub(/[ \t]+$/, "", m); staticmacro[m] = 1
		}
		inpp = (s ~ /\\$/); next
	}
	if (FILENAME ~ /\.h$/) next
	n = length(s); i = 1
	while (i <= n) {
		if (incom) {
			j = index(substr(s, i), "*/")
			if (!j) { i = n + 1; break }
			i += j + 1; incom = 0; continue
		}
		c = substr(s, i, 1); c2 = substr(s, i, 2)
		if (c2 == "/*") { incom = 1; i += 2; continue }
		if (c2 == "//") break
		if (c == "\"" || c == "\047") {
			q = c; i++
			while (i <= n && substr(s, i, 1) != q) i += (substr(s, i, 1) == "\\") ? 2 : 1
			i++; add("LIT"); continue
		}
		if (c ~ /[A-Za-z_]/) {
			match(substr(s, i), /^[A-Za-z_][A-Za-z0-9_]*/)
			add(substr(s, i, RLENGTH)); i += RLENGTH; continue
		}
		if (c ~ /[0-9]/) {
			match(substr(s, i), /^[0-9A-Za-z_.]*/)
			add("0"); i += RLENGTH; continue
		}
		if (c !~ /[ \t\r\f]/) add(c)
		i++
	}
}
END { flush(); exit(bad ? 1 : 0) }

# ---- parser: file-scope declarations ----------------------------------
function report(line, msg) {
	printf "names_check: %s:%d: %s\n", file, line, msg
	bad++
}
function shared_name(nm) { return nm ~ /^shoal_/ || nm ~ /__/ }
# The declaration tok[a..b-1] (without its ; or body), is_def when a body
# followed. Passes over __attribute__((...)) and the like.
function decl(a, b, is_def,   k, d, st, m, t, nm, ln, isfn, first, stop) {
	m = 0
	for (k = a; k < b; k++) {
		if (tok[k] ~ /^(__attribute__|__attribute|__asm__|__asm|asm|__declspec|_Alignas)$/ &&
		    tok[k + 1] == "(") {
			d = 0
			for (k++; k < b; k++) {
				if (tok[k] == "(") d++
				else if (tok[k] == ")" && --d == 0) break
			}
			continue
		}
		m++; dt[m] = tok[k]; dl[m] = tl[k]
	}
	# a file-scope macro call with no ; (TOKENIZER__HEAP_DEFINE(...)) runs
	# into the declaration after it: NAME(...) followed by a word is one
	for (k = 1; k < m && dt[k] ~ /^[A-Za-z_]/ && dt[k + 1] == "("; ) {
		d = 0
		for (t = k + 1; t <= m; t++) {
			if (dt[t] == "(") d++
			else if (dt[t] == ")" && --d == 0) break
		}
		if (t >= m || dt[t + 1] !~ /^[A-Za-z_]/) break
		for (d = t + 1; d <= m; d++) { dt[d - t] = dt[d]; dl[d - t] = dl[d] }
		m -= t
	}
	st = 0
	for (k = 1; k <= m; k++) {
		if (dt[k] == "typedef" || dt[k] == "_Static_assert" || dt[k] == "static_assert")
			return
		if (dt[k] == "static" || dt[k] in staticmacro) st = 1
	}
	# the first declarator: a function if a ( comes before any = or {
	first = 0
	for (k = 1; k <= m; k++) {
		if (dt[k] == "=" || dt[k] == "{" || dt[k] == "[" || dt[k] == ",") break
		if (dt[k] == "(") { first = k; break }
	}
	if (first) {
		if (dt[first + 1] == "*") { # (*name)(...): a pointer, or a function returning one
			for (k = first + 2; k <= m && (dt[k] !~ /^[A-Za-z_]/ || dt[k] == "const"); k++) ;
			nm = dt[k]; ln = dl[k]; isfn = (dt[k + 1] == "(")
		} else {
			nm = dt[first - 1]; ln = dl[first - 1]; isfn = 1
		}
		if (nm !~ /^[A-Za-z_][A-Za-z0-9_]*$/) return
		if (st && shared_name(nm))
			report(ln, sprintf("static %s %s has a shared name (shoal_ or __)",
			       isfn ? (is_def ? "function" : "prototype") : "variable", nm))
		if (!st && is_def && isfn && !shared_name(nm) && nm != "main")
			report(ln, sprintf("function %s is not static but has no shoal_ or __ in its name", nm))
		if (isfn || !st) return
	}
	if (!st || is_def) return
	# static variables: every declarator, its name the last identifier at
	# depth 0 before its =, [ or end
	d = 0; nm = ""
	for (k = 1; k <= m + 1; k++) {
		t = (k <= m) ? dt[k] : ","
		if (t == "(" || t == "[" || t == "{") { if (!d && t == "[") stop = 1; d++; continue }
		if (t == ")" || t == "]" || t == "}") { d--; continue }
		if (d) continue
		if (t == "=") { stop = 1; continue }
		if (t == ",") {
			if (nm != "" && shared_name(nm))
				report(ln, sprintf("static variable %s has a shared name (shoal_ or __)", nm))
			nm = ""; stop = 0; continue
		}
		if (!stop && t ~ /^[A-Za-z_][A-Za-z0-9_]*$/ && t != "LIT") { nm = t; ln = dl[k] }
	}
}
function parse(   i, a, pd, bd, eq, d, t) {
	i = 1
	while (i <= nt) {
		a = i; pd = 0; bd = 0; eq = 0
		for (; i <= nt; i++) {
			t = tok[i]
			if (t == "(" || t == "[") pd++
			else if (t == ")" || t == "]") pd--
			else if (t == "=" && !pd && !bd) eq = 1
			else if (t == "{" && !pd) {
				if (!bd && !eq && i > a && tok[i - 1] == ")") { # a function body
					decl(a, i, 1)
					for (d = 0; i <= nt; i++) {
						if (tok[i] == "{") d++
						else if (tok[i] == "}" && --d == 0) break
					}
					i++; break
				}
				bd++
			} else if (t == "}" && !pd) bd--
			else if (t == ";" && !pd && !bd) { decl(a, i, 0); i++; break }
		}
	}
}
' $(find base scheduler models net runtime -name '*.h' 2>/dev/null | sort) $files
