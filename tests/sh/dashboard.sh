#!/bin/bash
# tests/sh/dashboard.sh: the dashboard (GET / of the HTTP API, issue 10) in
# headless Chromium: a 3-peer cluster of the trained dense model (3
# stages); the page, opened with the API key in its URL, shows every peer
# with its state and the layers it holds (the DOM is checked) and works
# offline (the page loads nothing but the API). A screenshot is saved in
# the build directory (dashboard.png). Needs chromium: otherwise SKIP
# (77), except under CI=true (1).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || skip "chromium is not installed"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
echo "dashboard-key-0123456789" >"$T/apikey"
start d1 "$DENSE" --mem-limit 11M --ctx 256 --api 127.0.0.1:0 --api-key "$T/apikey"
SEED=$(ep d1)
for n in d2 d3; do start $n "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"; done
wait_for 30 servable_all 3 d1 d2 d3 || fail "no 3-stage plan"
PORT=$(api_port d1)
URL="http://127.0.0.1:$PORT/#key=$(cat "$T/apikey")"
CHROME_ARGS=(--headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$T/chrome"
	--virtual-time-budget=4000 --window-size=1200,800)
"$CHROME" "${CHROME_ARGS[@]}" --dump-dom "$URL" >"$T/dom.html" 2>"$T/chrome.log" ||
	fail "chromium: $(tail -3 "$T/chrome.log")"
for n in d1 d2 d3; do
	grep -q "data-name=\"$n\"" "$T/dom.html" || fail "the dashboard does not show peer $n: $(head -c 600 "$T/dom.html")"
done
stages=$(grep -o 'layers \[[0-9]*, [0-9]*)' "$T/dom.html" | sort -u | wc -l)
[ "$stages" = 3 ] || fail "the dashboard shows $stages layer ranges, not 3"
grep -q 'class="ok">servable' "$T/dom.html" || fail "the dashboard does not say the plan is servable"
grep -q '<td class="alive">alive</td>' "$T/dom.html" || fail "no peer state shown"
if grep -Eo '(src|href)="https?://[^"]*"' "$T/dom.html" | grep -q .; then
	fail "the dashboard loads something from outside: $(grep -Eo '(src|href)="https?://[^"]*"' "$T/dom.html" | head -3)"
fi
"$CHROME" "${CHROME_ARGS[@]}" --screenshot="$BD/dashboard.png" "$URL" >/dev/null 2>>"$T/chrome.log" ||
	fail "chromium screenshot: $(tail -3 "$T/chrome.log")"
[ -s "$BD/dashboard.png" ] || fail "no screenshot"
echo "dashboard: 3 peers with their state and layers ([$(grep -o 'layers \[[0-9]*, [0-9]*)' "$T/dom.html" | sort -u | tr '\n' ' ')]), plan servable; screenshot $BD/dashboard.png"
