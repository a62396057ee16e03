#!/bin/bash
# tests/sh/api_loopback.sh: the OpenAI-compatible HTTP API (runtime/api/) of
# real `shoal node` processes on 127.0.0.1 (issue 10).
#
#  1. A 2-peer cluster of the trained dense model (--mem-limit 14M: 2
#     stages), the API on the first peer with an API key. The official
#     `openai` npm package (installed into a cache on first use) sends a
#     chat, a streamed chat, a completion and a chat with logprobs: the
#     texts equal local `shoal run`'s greedy output for the same prompt,
#     the streamed text equals the whole one, usage and finish_reason
#     are there, logprobs are OpenAI's shape.
#     `shoal chat` (the terminal client) gets the same text, one-shot and in
#     a conversation read from stdin.
#  2. curl: every error in OpenAI's shape with its status: malformed JSON,
#     a wrong type, an unknown model (404), a body over 1 MiB (413), no or
#     a wrong key (401), an unknown route (404); a stop string cuts the
#     text; /health, /v1/models, /v1/cluster (the peers and the plan).
#     8 concurrent streaming clients each get the text they would alone,
#     and the first peer's stage ran batched rows.
#  3. /metrics parses with prometheus_client and its counters move.
#  4. One peer, --sessions 1: a client that disconnects mid-stream frees
#     the session (the next request is served at once; /metrics counts a
#     cancel); 64 waiting requests fill the queue: the next gets 429 with
#     Retry-After, and once they go the peer serves again.
#  5. A peer too small for the model: 503 with the figures.
#  6. A stream the cluster cuts (a stage dies and the other peer cannot hold
#     the model alone) ends with an error event and [DONE] after the wait.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
PY=python3
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null && PY=/usr/bin/python3
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
echo "test-api-key-0123456789" >"$T/apikey"
AK=$(cat "$T/apikey")
P="It is a truth universally acknowledged"
MODEL=austen-dense-q8_0

jget() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }
# call OUT METHOD PATH [BODY]: the status code into $CODE, the body into OUT
call() {
	local out=$1 m=$2 path=$3
	shift 3
	CODE=$(curl -s -o "$out" -w '%{http_code}' -X "$m" -H "Authorization: Bearer $AK" \
		-H 'Content-Type: application/json' "$U$path" "$@")
}
expect_error() { # expect_error LABEL STATUS METHOD PATH [curl args]: OpenAI's error shape
	local label=$1 want=$2
	shift 2
	call "$T/e.json" "$@"
	[ "$CODE" = "$want" ] || fail "$label: status $CODE, not $want: $(head -c 300 "$T/e.json")"
	jget "$T/e.json" 'd["error"]["message"] and d["error"]["type"]' >/dev/null 2>&1 ||
		fail "$label: not an OpenAI error: $(head -c 300 "$T/e.json")"
	echo "  $label: $CODE $(jget "$T/e.json" 'd["error"]["message"]')"
}

# 1. a 2-peer cluster, the API on a1
start a1 "$DENSE" --mem-limit 14M --ctx 256 --api 127.0.0.1:0 --api-key "$T/apikey"
SEED=$(ep a1)
start a2 "$DENSE" --mem-limit 14M --ctx 256 --peer "$SEED" --backend cpu # its stage picks the CPU by name
wait_for 30 servable_all 2 a1 a2 || fail "no 2-stage plan on 2 peers"
U=http://127.0.0.1:$(api_port a1)
"$B" run "$DENSE" -p "$P" -n 24 --temp 0 >"$T/l-text" 2>/dev/null || fail "local run"
"$B" run "$DENSE" --chat -p "Emma" -n 16 --temp 0 >"$T/l-chat" 2>/dev/null || fail "local chat run"

NPM_DIR=${SHOAL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-test-npm}
if [ ! -d "$NPM_DIR/node_modules/openai" ] && command -v npm >/dev/null; then
	mkdir -p "$NPM_DIR"
	(cd "$NPM_DIR" && npm install --no-audit --no-fund --silent openai@4 >/dev/null 2>&1)
fi
if command -v node >/dev/null && [ -d "$NPM_DIR/node_modules/openai" ]; then
	cat >"$T/client.mjs" <<'EOF'
import OpenAI from "openai";
import { writeFileSync } from "fs";
const [base, key, prompt, out] = process.argv.slice(2);
const c = new OpenAI({ baseURL: base, apiKey: key });
const r = {};
const chat = await c.chat.completions.create({ model: "austen-dense-q8_0", temperature: 0,
	max_tokens: 16, messages: [{ role: "user", content: "Emma" }] });
r.chat = chat.choices[0].message.content;
r.chat_finish = chat.choices[0].finish_reason;
r.chat_usage = chat.usage;
let streamed = "", finish = null, usage = null;
const s = await c.chat.completions.create({ model: "austen-dense-q8_0", temperature: 0,
	max_tokens: 16, messages: [{ role: "user", content: "Emma" }], stream: true,
	stream_options: { include_usage: true } });
for await (const ch of s) {
	if (ch.usage) usage = ch.usage;
	if (!ch.choices.length) continue;
	streamed += ch.choices[0].delta.content ?? "";
	finish = ch.choices[0].finish_reason ?? finish;
}
r.stream = streamed; r.stream_finish = finish; r.stream_usage = usage;
const cmp = await c.completions.create({ model: "austen-dense-q8_0", prompt, max_tokens: 24,
	temperature: 0 });
r.completion = cmp.choices[0].text;
const lp = await c.chat.completions.create({ model: "austen-dense-q8_0", temperature: 0,
	max_tokens: 4, messages: [{ role: "user", content: "Emma" }], logprobs: true, top_logprobs: 3 });
r.logprobs = lp.choices[0].logprobs.content;
writeFileSync(out, JSON.stringify(r));
EOF
	cp "$T/client.mjs" "$NPM_DIR/client-$$.mjs"
	node "$NPM_DIR/client-$$.mjs" "$U/v1" "$AK" "$P" "$T/oai.json" >"$T/oai.err" 2>&1 ||
		{ rm -f "$NPM_DIR/client-$$.mjs"; fail "the openai client: $(tail -5 "$T/oai.err")"; }
	rm -f "$NPM_DIR/client-$$.mjs"
	[ "$(jget "$T/oai.json" 'd["completion"]')" = "$(cat "$T/l-text")" ] ||
		fail "completion text differs: '$(jget "$T/oai.json" 'd["completion"]')' vs '$(cat "$T/l-text")'"
	[ "$(jget "$T/oai.json" 'd["chat"]')" = "$(cat "$T/l-chat")" ] ||
		fail "chat text differs: '$(jget "$T/oai.json" 'd["chat"]')' vs '$(cat "$T/l-chat")'"
	[ "$(jget "$T/oai.json" 'd["stream"] == d["chat"]')" = True ] || fail "the streamed chat differs from the whole one"
	[ "$(jget "$T/oai.json" 'd["chat_finish"], d["stream_finish"], d["stream_usage"]["completion_tokens"]')" = "('length', 'length', 16)" ] ||
		fail "finish_reason/usage: $(jget "$T/oai.json" 'd["chat_finish"], d["stream_finish"], d["stream_usage"]')"
	[ "$(jget "$T/oai.json" 'len(d["logprobs"]) == 4 and all(len(t["top_logprobs"]) == 3 and t["logprob"] <= 0 and t["top_logprobs"][0]["logprob"] >= t["top_logprobs"][1]["logprob"] for t in d["logprobs"])')" = True ] ||
		fail "logprobs shape: $(head -c 400 "$T/oai.json")"
	echo "openai npm client: chat, streamed chat, completion and logprobs; texts equal local shoal run ('$(cat "$T/l-chat")')"
else
	[ "${CI:-}" = true ] && fail "node and the openai npm package are needed under CI"
	echo "SKIP part: node or the openai npm package (npm install openai) is not available"
fi

# 1b. shoal chat: a one-shot turn, and a conversation from stdin
"$B" chat --peer "$(ep a1)" --key "$KEY" --api-key "$T/apikey" --temp 0 -n 16 -p "Emma" \
	>"$T/chat1" 2>"$T/chat1.err" || fail "shoal chat -p: $(cat "$T/chat1.err")"
[ "$(cat "$T/chat1")" = "$(cat "$T/l-chat")" ] || fail "shoal chat -p: '$(cat "$T/chat1")' vs '$(cat "$T/l-chat")'"
printf 'Emma\n/system You are a novelist of manners.\nAgain\n/quit\n' |
	"$B" chat --api "$U" --api-key "$T/apikey" --temp 0 -n 8 >"$T/chat2" 2>"$T/chat2.err" ||
	fail "shoal chat (stdin): $(cat "$T/chat2.err")"
[ "$(wc -l <"$T/chat2")" = 2 ] && [ "$(head -n 1 "$T/chat2")" = "$(cut -d' ' -f1-9 "$T/l-chat")" ] ||
	fail "shoal chat conversation: $(cat "$T/chat2")"
echo "shoal chat: a one-shot turn equals local shoal run --chat; a 2-turn conversation with /system"
# Ctrl-C (SIGINT) during a long reply stops that reply, not the client: it
# reads the next line (here /quit) and exits 0
mkfifo "$T/chatin"
"$B" chat --api "$U" --api-key "$T/apikey" --temp 0 -n 2000 <"$T/chatin" \
	>"$T/chat3" 2>"$T/chat3.err" &
CPID=$!
exec 7>"$T/chatin"
echo "Emma" >&7
# the reply is at most the context (256 tokens, ~0.25 s here): Ctrl-C goes
# as soon as its first bytes show (wait_for's 0.2 s steps let a fast reply
# end before the signal)
wait_soon 20 test -s "$T/chat3" || fail "shoal chat streamed nothing in 20 s: $(cat "$T/chat3.err")"
kill -INT $CPID
wait_for 10 grep -q "(stopped)" "$T/chat3.err" || fail "Ctrl-C did not stop the reply: $(cat "$T/chat3.err")"
kill -0 $CPID 2>/dev/null || fail "shoal chat exited on Ctrl-C during a reply"
echo "/quit" >&7
exec 7>&-
wait $CPID || fail "shoal chat exited with $? after Ctrl-C and /quit"
[ "$(wc -w <"$T/chat3")" -lt 1500 ] || fail "the stopped reply ran on: $(wc -w <"$T/chat3") words"
echo "shoal chat: Ctrl-C stopped a reply after $(wc -w <"$T/chat3") words; the client went on and quit cleanly"

# 2. errors and the other routes, with curl
call "$T/h.json" GET /health
[ "$CODE" = 200 ] || fail "/health: $CODE"
call "$T/m.json" GET /v1/models
[ "$(jget "$T/m.json" 'd["data"][0]["id"]')" = "$MODEL" ] || fail "/v1/models: $(cat "$T/m.json")"
call "$T/c.json" GET /v1/cluster
[ "$(jget "$T/c.json" 'len(d["peers"]), len(d["plan"]["stages"])')" = "(2, 2)" ] ||
	fail "/v1/cluster: $(head -c 300 "$T/c.json")"
# each stage's layers by device (CPU-only peers: one CPU range, its own),
# and each peer's devices, the CPU first
DV=$(jget "$T/c.json" '[(r["device"], r["backend"], r["first_layer"] == s["first_layer"], r["end_layer"] == s["end_layer"]) for s in d["plan"]["stages"] for r in s["devices"]], [p["devices"][0]["backend"] for p in d["peers"]]')
[ "$DV" = "([('cpu', 'cpu', True, True), ('cpu', 'cpu', True, True)], ['cpu', 'cpu'])" ] ||
	fail "/v1/cluster devices: $DV"
echo "routes: /health, /v1/models ($MODEL), /v1/cluster (2 peers, 2 stages, each on its CPU)"
echo "errors:"
expect_error "malformed JSON" 400 POST /v1/chat/completions -d '{"messages": ['
expect_error "a wrong type" 400 POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}'
expect_error "no messages" 400 POST /v1/chat/completions -d '{"model": "'$MODEL'"}'
expect_error "an unknown role" 400 POST /v1/chat/completions -d '{"messages": [{"role": "wizard", "content": "x"}]}'
expect_error "an unknown model" 404 POST /v1/chat/completions -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}'
head -c 1100000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt": "/; s/$/"}/' >"$T/big.json"
expect_error "a body over 1 MiB" 413 POST /v1/completions --data-binary @"$T/big.json"
expect_error "an unknown route" 404 GET /v2/nothing
CODE=$(curl -s -o "$T/e.json" -w '%{http_code}' "$U/v1/models")
[ "$CODE" = 401 ] || fail "no key: $CODE"
CODE=$(curl -s -o "$T/e.json" -w '%{http_code}' -H "Authorization: Bearer wrong-key-000" "$U/v1/models")
[ "$CODE" = 401 ] || fail "a wrong key: $CODE"
echo "  no key, a wrong key: 401"
call "$T/s.json" POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 24, \"temperature\": 0, \"stop\": \"very\"}"
want=$(sed 's/very.*//' "$T/l-text")
[ "$(jget "$T/s.json" 'd["choices"][0]["text"]')" = "$want" ] && [ "$(jget "$T/s.json" 'd["choices"][0]["finish_reason"]')" = stop ] ||
	fail "stop string: $(cat "$T/s.json")"
echo "stop string: the text ends before it ('$want'), finish_reason stop"

# 2b. 8 concurrent streaming clients: each gets the tokens it would alone,
#     and the stages ran rows of several sessions together
PROMPTS=("It is a truth" "Emma Woodhouse, handsome" "The family of Dashwood" "Mr. Darcy" \
	"Catherine Morland" "Sir Walter Elliot" "Fanny Price" "Anne was")
for i in "${!PROMPTS[@]}"; do
	"$B" run "$DENSE" -p "${PROMPTS[$i]}" -n 20 --temp 0 >"$T/lc-$i" 2>/dev/null || fail "local run $i"
done
pids=()
for i in "${!PROMPTS[@]}"; do
	curl -s -N --max-time 60 -H "Authorization: Bearer $AK" "$U/v1/completions" \
		-d "{\"prompt\": \"${PROMPTS[$i]}\", \"max_tokens\": 20, \"temperature\": 0, \"stream\": true}" \
		>"$T/cc-$i" 2>/dev/null &
	pids+=($!)
done
wait "${pids[@]}"
for i in "${!PROMPTS[@]}"; do
	got=$(sed -n 's/^data: //p' "$T/cc-$i" | grep -v '^\[DONE\]' |
		$PY -c 'import json,sys; print("".join(json.loads(l)["choices"][0]["text"] for l in sys.stdin if json.loads(l)["choices"]), end="")')
	[ "$got" = "$(cat "$T/lc-$i")" ] || fail "concurrent client $i: '$got' vs '$(cat "$T/lc-$i")'"
done
call "$T/mb.txt" GET /metrics
batched=$(sed -n 's/^shoal_stage_batched_runs_total //p' "$T/mb.txt")
[ "${batched:-0}" -gt 0 ] || fail "no batched runs on a1's stage: $(grep batched "$T/mb.txt")"
echo "8 concurrent streams: every text equals its local run; a1's stage ran $batched batched runs"

# 3. /metrics
call "$T/m1.txt" GET /metrics
call "$T/x.json" POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 4, \"temperature\": 0}"
call "$T/m2.txt" GET /metrics
cat >"$T/prom.py" <<'EOF'
import sys
from prometheus_client.parser import text_string_to_metric_families
def load(path):
    out = {}
    for fam in text_string_to_metric_families(open(path).read()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
ok = ("shoal_requests_total", (("outcome", "ok"),))
tok = ("shoal_tokens_generated_total", ())
assert b[ok] > a[ok], (a[ok], b[ok])
assert b[tok] >= a[tok] + 4, (a[tok], b[tok])
assert any(k[0] == "shoal_peer_state" for k in b)
print(f"{len(b)} samples; requests ok {a[ok]:.0f} -> {b[ok]:.0f}, tokens {a[tok]:.0f} -> {b[tok]:.0f}")
EOF
if $PY -c 'import prometheus_client' 2>/dev/null; then
	echo "/metrics: $($PY "$T/prom.py" "$T/m1.txt" "$T/m2.txt" 2>&1)" || true
	$PY "$T/prom.py" "$T/m1.txt" "$T/m2.txt" >/dev/null 2>&1 || fail "/metrics: $($PY "$T/prom.py" "$T/m1.txt" "$T/m2.txt" 2>&1 | tail -2)"
else
	[ "${CI:-}" = true ] && fail "python3-prometheus-client is needed under CI"
	echo "SKIP part: prometheus_client is not installed"
fi
stop_all

# 4. a client that disconnects mid-stream frees its session
start b1 "$DENSE" --ctx 4096 --sessions 1 --api 127.0.0.1:0 --api-key "$T/apikey"
wait_for 30 servable_all 1 b1 || fail "no plan on b1"
U=http://127.0.0.1:$(api_port b1)
curl -s -N --max-time 1 -H "Authorization: Bearer $AK" "$U/v1/completions" \
	-d "{\"prompt\": \"$P\", \"max_tokens\": 4000, \"temperature\": 0, \"stream\": true}" >"$T/cut.txt" 2>/dev/null
grep -q '^data: {' "$T/cut.txt" || fail "the long stream sent nothing: $(head -c 200 "$T/cut.txt")"
t0=$(now_ms)
call "$T/next.json" POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 8, \"temperature\": 0}" --max-time 20
dt=$(($(now_ms) - t0))
[ "$CODE" = 200 ] || fail "the next request after a disconnect: $CODE $(head -c 200 "$T/next.json")"
call "$T/m3.txt" GET /metrics
grep -q '^shoal_requests_total{outcome="cancelled"} [1-9]' "$T/m3.txt" || fail "no cancel counted: $(grep cancelled "$T/m3.txt")"
echo "a client gone mid-stream: its session freed; the next request served in $dt ms"
# the same for a client that gave up on a whole (non-streamed) reply: its
# run is cancelled while it runs (counted), not when it would have ended
c0=$(sed -n 's/^shoal_requests_total{outcome="cancelled"} \([0-9]*\).*/\1/p' "$T/m3.txt")
curl -s --max-time 1 -H "Authorization: Bearer $AK" "$U/v1/completions" \
	-d "{\"prompt\": \"$P\", \"max_tokens\": 4000, \"temperature\": 0}" >/dev/null 2>&1
call "$T/next2.json" POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 8, \"temperature\": 0}" --max-time 20
[ "$CODE" = 200 ] || fail "the next request after a whole reply was abandoned: $CODE"
call "$T/m4.txt" GET /metrics
c1=$(sed -n 's/^shoal_requests_total{outcome="cancelled"} \([0-9]*\).*/\1/p' "$T/m4.txt")
[ "${c1:-0}" -gt "${c0:-0}" ] || fail "an abandoned whole reply was not cancelled (cancelled $c0 -> $c1)"
echo "a client gone while waiting for a whole reply: its run cancelled at once"
# the queue (64 requests a peer) full: 429 with Retry-After
pids=()
for i in $(seq 64); do
	curl -s -N --max-time 60 -H "Authorization: Bearer $AK" "$U/v1/completions" \
		-d "{\"prompt\": \"$P\", \"max_tokens\": 4000, \"temperature\": 0, \"stream\": true}" \
		>/dev/null 2>&1 &
	pids+=($!)
done
full() {
	call "$T/e.json" GET /metrics
	[ "$(sed -n 's/^shoal_queue_length //p' "$T/e.json")" -ge 63 ]
}
wait_for 20 full || fail "the queue did not fill: $(grep -E 'queue|active' "$T/e.json")"
CODE=$(curl -s -D "$T/h429" -o "$T/e.json" -w '%{http_code}' -H "Authorization: Bearer $AK" "$U/v1/completions" \
	-d "{\"prompt\": \"$P\", \"max_tokens\": 4}")
kill "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
[ "$CODE" = 429 ] || fail "a request on a full queue: $CODE $(head -c 200 "$T/e.json")"
grep -qi '^retry-after: [0-9]' "$T/h429" || fail "429 without Retry-After"
echo "  a full queue: 429, Retry-After $(sed -n 's/^[Rr]etry-[Aa]fter: //p' "$T/h429" | tr -d '\r'): $(jget "$T/e.json" 'd["error"]["message"]')"
again() { call "$T/e.json" POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 4, \"temperature\": 0}"; [ "$CODE" = 200 ]; }
wait_for 20 again || fail "no service after the queue emptied: $CODE"
echo "  the queue emptied when its clients went: served again"
stop_all

# 5. a peer that cannot hold the model: 503 with the figures
start c1 "$DENSE" --mem-limit 8M --ctx 256 --api 127.0.0.1:0 --api-key "$T/apikey"
U=http://127.0.0.1:$(api_port c1)
no_plan() { status c1 && [[ "$("$PC" "$T/st-c1.json" servable)" == no* ]]; }
wait_for 20 no_plan || fail "c1 serves alone at 8M"
expect_error "a cluster too small" 503 POST /v1/completions -d "{\"prompt\": \"$P\", \"max_tokens\": 4}"
grep -q "needs" "$T/e.json" || fail "503 without the figures: $(cat "$T/e.json")"
stop_all

# 6. a stream the cluster cuts ends with an error event, not a silent close:
#    2 peers that both hold layers; one dies and the other alone cannot
#    hold the model, so the paused run gives up after the wait (20 s)
start w1 "$DENSE" --mem-limit 14M --ctx 256 --api 127.0.0.1:0 --api-key "$T/apikey"
U=http://127.0.0.1:$(api_port w1)
cut=no
for attempt in 1 2 3; do # the run may outpace the kill: then once more
	start w2 "$DENSE" --mem-limit 14M --ctx 256 --peer "$(ep w1)"
	wait_for 30 servable_all 2 w1 w2 || fail "no 2-stage plan on w1, w2"
	curl -s -N --max-time 60 -H "Authorization: Bearer $AK" "$U/v1/completions" \
		-d "{\"prompt\": \"$P\", \"max_tokens\": 240, \"temperature\": 0, \"stream\": true}" >"$T/cutoff.txt" 2>/dev/null &
	CP=$!
	wait_soon 10 grep -q '"text"' "$T/cutoff.txt" # 240 tokens take ~0.25 s here
	stop w2
	wait $CP
	if grep -q '^data: {"error"' "$T/cutoff.txt"; then cut=yes; break; fi
	grep -q '"finish_reason":"length"' "$T/cutoff.txt" || fail "the stream ended neither whole nor with an error event: $(tail -c 300 "$T/cutoff.txt")"
done
[ $cut = yes ] || fail "three runs outpaced the kill"
tail -n 2 "$T/cutoff.txt" | grep -q '^data: \[DONE\]' || fail "the cut stream does not end with [DONE]"
echo "a stream cut by the cluster: $(grep -c '"text"' "$T/cutoff.txt") chunks, then: $(grep '^data: {"error"' "$T/cutoff.txt" | head -c 200)"
