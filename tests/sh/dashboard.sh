#!/bin/bash
# tests/sh/dashboard.sh: the dashboard (GET / of the HTTP API, issues 10
# and 36) in headless Chromium, driven through the DevTools protocol by the
# `puppeteer-core` npm package (installed into a cache on first use, like
# api_loopback.sh's openai client). A 3-peer cluster of the trained dense
# model (3 stages), the API on d1 with a key:
#  1. Opened without the key: the key prompt opens once (dismissed, it
#     does not come back on every refresh) and a button offers it again.
#  2. Opened with the key in its URL: the drawing has a box for every peer
#     and an arrow between consecutive stages; the table shows every peer
#     with its state and the layers it holds; the plan is servable; data
#     links without RDMA read "TCP (no RDMA here)", not a raw verbs error;
#     the page loads nothing but the API (every request the page makes is
#     checked).
#  3. Chat: the test types a message into the box and presses Enter; the
#     reply streams into the log, the box is emptied.
# Screenshots: dashboard.png and dashboard-chat.png in the build directory.
# Needs chromium, node and npm: otherwise SKIP (77), except under CI=true (1).
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || skip "chromium is not installed"
command -v node >/dev/null || skip "node is not installed"
NPM_DIR=${SHOAL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-test-npm}
if [ ! -d "$NPM_DIR/node_modules/puppeteer-core" ] && command -v npm >/dev/null; then
	mkdir -p "$NPM_DIR"
	(cd "$NPM_DIR" && npm install --no-audit --no-fund --silent puppeteer-core@24 >/dev/null 2>&1)
fi
[ -d "$NPM_DIR/node_modules/puppeteer-core" ] || skip "the puppeteer-core npm package is not available"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
echo "dashboard-key-0123456789" >"$T/apikey"
start d1 "$DENSE" --mem-limit 11M --ctx 256 --api 127.0.0.1:0 --api-key "$T/apikey"
SEED=$(ep d1)
for n in d2 d3; do start $n "$DENSE" --mem-limit 11M --ctx 256 --peer "$SEED"; done
wait_for 30 servable_all 3 d1 d2 d3 || fail "no 3-stage plan"
PORT=$(api_port d1)
BASE="http://127.0.0.1:$PORT"
# one request through the stages, so that d1 has data links to show
curl -s -H "Authorization: Bearer $(cat "$T/apikey")" -H 'Content-Type: application/json' \
	-d '{"prompt":"Emma","max_tokens":2}' "$BASE/v1/completions" >/dev/null ||
	fail "a first request"

cat >"$NPM_DIR/dash-$$.mjs" <<'EOF'
import puppeteer from "puppeteer-core";
import { writeFileSync } from "node:fs";
const [chrome, base, key, dir, shots, out] = process.argv.slice(2);
const r = { outside: [], dialogs: 0 };
const browser = await puppeteer.launch({ executablePath: chrome, headless: true, userDataDir: dir,
	args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1200,900"] });
try {
	const page = await browser.newPage();
	await page.setViewport({ width: 1200, height: 900 });
	page.on("request", (q) => { if (!q.url().startsWith(base) && !q.url().startsWith("data:")) r.outside.push(q.url()); });
	page.on("dialog", async (d) => { r.dialogs++; r.dialog = d.message(); await d.dismiss(); });
	// 1. no key: one prompt, then a button
	await page.goto(base + "/", { waitUntil: "load" });
	await page.waitForFunction(() => !document.getElementById("keybtn").hidden, { timeout: 15000 });
	await new Promise((ok) => setTimeout(ok, 3500)); /* three more refreshes */
	r.dialogs_without_key = r.dialogs;
	r.err_without_key = await page.$eval("#err", (e) => e.textContent);
	// 2. with the key in the URL
	await page.goto(base + "/#key=" + key, { waitUntil: "load" });
	await page.reload({ waitUntil: "load" });
	await page.waitForFunction(() => document.querySelectorAll("#map g.peer").length === 3 &&
		document.querySelectorAll("#peers tr.peer").length === 3, { timeout: 20000 });
	await new Promise((ok) => setTimeout(ok, 1500));
	r.map_peers = await page.$$eval("#map g.peer", (g) => g.map((e) => e.getAttribute("data-peer")).sort());
	r.map_text = await page.$eval("#map", (e) => e.textContent);
	r.flows = await page.$$eval("#map path.flow", (p) => p.map((e) => e.getAttribute("data-from") + ">" + e.getAttribute("data-to")));
	r.rows = await page.$$eval("#peers tr.peer", (t) => t.map((e) => e.getAttribute("data-name")).sort());
	r.table = await page.$eval("#peers", (e) => e.innerText);
	r.plan = await page.$eval("#plan", (e) => e.innerText);
	await page.screenshot({ path: shots + "/dashboard.png", fullPage: true });
	// 3. type a message and press Enter
	await page.click("#msg");
	await page.type("#msg", "Emma");
	/* the button disabled while the reply runs: seen by an observer set up
	 * before Enter (a poll for it missed a reply that ended within a frame) */
	await page.evaluate(() => {
		const b = document.getElementById("send");
		window.sendWasDisabled = false;
		new MutationObserver(() => { if (b.disabled) window.sendWasDisabled = true; })
			.observe(b, { attributes: true, attributeFilter: ["disabled"] });
	});
	await page.keyboard.press("Enter");
	await page.waitForFunction(() => !document.getElementById("send").disabled &&
		/model: .+\n$/s.test(document.getElementById("log").textContent), { timeout: 90000 });
	r.send_was_disabled = await page.evaluate(() => window.sendWasDisabled);
	r.log = await page.$eval("#log", (e) => e.textContent);
	r.box = await page.$eval("#msg", (e) => e.value);
	await page.screenshot({ path: shots + "/dashboard-chat.png", fullPage: true });
} finally {
	await browser.close();
}
writeFileSync(out, JSON.stringify(r));
EOF
node "$NPM_DIR/dash-$$.mjs" "$CHROME" "$BASE" "$(cat "$T/apikey")" "$T/chrome" "$BD" "$T/dash.json" \
	>"$T/dash.err" 2>&1 || { rm -f "$NPM_DIR/dash-$$.mjs"; fail "the browser script: $(tail -8 "$T/dash.err")"; }
rm -f "$NPM_DIR/dash-$$.mjs"
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$T/dash.json" "$1"; }

[ "$(jget 'd["dialogs_without_key"]')" = 1 ] ||
	fail "the key prompt opened $(jget 'd["dialogs_without_key"]') times without a key (want once)"
[[ "$(jget 'd["err_without_key"]')" == *"API key is needed"* ]] || fail "no word about the key: $(jget 'd["err_without_key"]')"
echo "without the key: one prompt ('$(jget 'd.get("dialog")')'), then a button"

[ "$(jget 'd["map_peers"]')" = "['d1', 'd2', 'd3']" ] || fail "the drawing shows $(jget 'd["map_peers"]')"
[ "$(jget 'len(d["flows"])')" = 2 ] || fail "the drawing has arrows $(jget 'd["flows"]'), not 2"
[[ "$(jget 'd["map_text"]')" == *"in use of"* ]] || fail "the drawing shows no memory: $(jget 'd["map_text"]')"
[ "$(jget 'd["rows"]')" = "['d1', 'd2', 'd3']" ] || fail "the table shows $(jget 'd["rows"]')"
stages=$(jget 'd["table"]' | grep -o 'layers \[[0-9]*, [0-9]*)' | sort -u | wc -l)
[ "$stages" = 3 ] || fail "the table shows $stages layer ranges, not 3: $(jget 'd["table"]')"
[[ "$(jget 'd["plan"]')" == servable* ]] || fail "the page does not say the plan is servable: $(jget 'd["plan"]')"
[ "$(jget 'd["table"].count("alive")')" -ge 3 ] || fail "no peer state shown: $(jget 'd["table"]')"
[[ "$(jget 'd["table"]')" == *"TCP (no RDMA here)"* ]] || fail "no link shown as TCP: $(jget 'd["table"]')"
if [[ "$(jget 'd["table"] + d["map_text"]')" == *ibv_* ]]; then
	fail "a raw verbs error on the page: $(jget 'd["table"]')"
fi
[ "$(jget 'd["outside"]')" = "[]" ] || fail "the dashboard loads something from outside: $(jget 'd["outside"]')"
echo "drawing: $(jget 'd["map_peers"]') with arrows $(jget 'd["flows"]'); table: 3 layer ranges, alive, servable, TCP (no RDMA here)"

[[ "$(jget 'd["log"]')" == "you: Emma"$'\n'"model: "* ]] || fail "the message was not sent: $(jget 'd["log"]')"
[ "$(jget 'd["send_was_disabled"]')" = True ] || fail "the send button stayed enabled while the reply ran"
reply=$(jget 'd["log"].split("model: ", 1)[1].strip()')
[ -n "$reply" ] && [[ "$reply" != "["* ]] || fail "no reply after Enter: $(jget 'd["log"]')"
[ "$(jget 'd["box"]')" = "" ] || fail "the box was not emptied: $(jget 'd["box"]')"
[ -s "$BD/dashboard.png" ] && [ -s "$BD/dashboard-chat.png" ] || fail "no screenshots"
echo "chat: typed 'Emma' + Enter -> '${reply:0:60}...'; screenshots $BD/dashboard.png, $BD/dashboard-chat.png"
