#!/bin/bash
# tests/sh/api_n.sh: n, several choices of one request, through the HTTP API
# of real `shoal node` processes on 127.0.0.1 (issue 36). Each choice is a
# run (a session) of its own; choice i samples with seed s + i, s the
# request's seed or the fresh one X-Shoal-Seed shows.
#
#  1. A 2-peer cluster (2 stages, --sessions 4), Qwen 2.5's chat format
#     (SHOAL_TEST_CHAT_STYLE: the model has no template). Chat, n = 3 at
#     temperature 1 with a seed: indices 0..2, each choice the n = 1 reply
#     of seed s + i, three different texts, usage = the prompt once and
#     the choices' tokens summed; logprobs per choice; without a seed, the
#     same from the seed
#     the reply shows; greedy: three equal texts. Streamed: each chunk
#     names its choice, each choice's role comes first, its text joins to
#     the whole reply's, it has one finish_reason chunk and it is its
#     last; then the usage chunk and one [DONE]. /v1/completions n = 2
#     with logprobs and a stop string: per choice, the n = 1 reply again.
#     n = 0, 17, 1.5, "2": 400s that name n.
#  2. tool_choice "required" with n = 3: each choice's call is made by its
#     own constrained run (the grammar's state per session), its arguments
#     fit the parameters, call ids unique over the choices, choice 2 the
#     n = 1 call of seed s + 2; streamed the same. A call cut by max_tokens
#     fails the request (500 naming the choice; an error event then [DONE]
#     when streamed). response_format json_schema with n = 3: each choice
#     validates (python3-jsonschema); choice 2 is the n = 1 reply of seed
#     s + 2; streamed the same.
#  3. The `openai` npm client: n = 3 whole and streamed (the SDK's own
#     accumulation per choice), the texts of part 1.
#  4. No session outlives its request: 63 runs queued by 4 streams (n = 16
#     and 15; hidden states delayed by SHOAL_TEST_FAULT, so that none
#     ends), then n = 2 finds room for one choice only: 429 naming the
#     other, the queued one cancelled; the streams' clients go away; the
#     owner's queue and sessions drain to 0 at once (the runs would take
#     minutes to end), and an n = 4 request is served, batched.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
python3 -c 'import jsonschema' 2>/dev/null || skip "python3-jsonschema is not installed (./bootstrap installs it)"
"$B" --version | grep -q 'test hooks: yes' || skip "shoal was built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

SHOAL_TEST_CHAT_STYLE=qwen2.5 SHOAL_TEST_FAULT=@$T/fault start a1 "$DENSE" --mem-limit 16M --ctx 512 --sessions 4 --api 127.0.0.1:0
SEED=$(ep a1)
SHOAL_TEST_CHAT_STYLE=qwen2.5 SHOAL_TEST_FAULT=@$T/fault start a2 "$DENSE" --mem-limit 16M --ctx 512 --sessions 4 --peer "$SEED"
wait_for 30 servable_all 2 a1 a2 || fail "no 2-stage plan on 2 peers"
U=http://127.0.0.1:$(api_port a1)

cat >"$T/lib_n.py" <<'EOF'
import json, urllib.request, urllib.error

def post(url, path, body):
    """(status, headers, text) of a POST of body as JSON."""
    r = urllib.request.Request(url + path, json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=120) as f:
            return f.status, dict(f.headers), f.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()

def ok(url, path, body):
    st, h, t = post(url, path, body)
    assert st == 200, (st, t[:400], body)
    return h, json.loads(t)

def events(text):
    """The data of a stream's events, [DONE] as None."""
    ev = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
    return [None if e == "[DONE]" else json.loads(e) for e in ev]

def per_choice(evs, chat=True):
    """Per index: text, role first, finish reasons, tool calls; the order of
    the indices of the content chunks; the usage chunk."""
    ch, order, usage = {}, [], None
    for e in evs:
        if e is None or "error" in e:
            continue
        if e.get("usage"):
            usage = e["usage"]
        for c in e["choices"]:
            s = ch.setdefault(c["index"], {"text": "", "role": None, "finish": [], "calls": {},
                                           "after_finish": 0})
            if s["finish"]:
                s["after_finish"] += 1
            if chat:
                d = c["delta"]
                if "role" in d and s["role"] is None:
                    s["role"] = s["text"] == "" and not s["calls"]
                s["text"] += d.get("content") or ""
                for t in d.get("tool_calls") or []:
                    k = s["calls"].setdefault(t["index"], {"id": "", "name": "", "arguments": ""})
                    k["id"] += t.get("id") or ""
                    k["name"] += t.get("function", {}).get("name") or ""
                    k["arguments"] += t.get("function", {}).get("arguments") or ""
            else:
                s["text"] += c.get("text") or ""
            if (c.get("delta", {}).get("content") or c.get("text")):
                order.append(c["index"])
            if c.get("finish_reason"):
                s["finish"].append(c["finish_reason"])
    return ch, order, usage
EOF

# 1. texts, seeds, usage, streams, refusals
cat >"$T/part1.py" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[2])
from lib_n import post, ok, events, per_choice
url, out = sys.argv[1], sys.argv[3]
C = "/v1/chat/completions"
base = {"messages": [{"role": "user", "content": "Emma"}], "max_tokens": 24, "temperature": 1}

def one(seed, **kw):
    return ok(url, C, {**base, "seed": seed, **kw})[1]

# seeded n = 3: choice i is the n = 1 reply of seed 4242 + i
h, d = ok(url, C, {**base, "seed": 4242, "n": 3})
assert [c["index"] for c in d["choices"]] == [0, 1, 2], d
texts = [c["message"]["content"] for c in d["choices"]]
singles = [one(4242 + i) for i in range(3)]
for i, s in enumerate(singles):
    assert s["choices"][0]["message"]["content"] == texts[i], (i, s, texts)
    assert s["choices"][0]["finish_reason"] == d["choices"][i]["finish_reason"], (i, s, d)
assert len(set(texts)) == 3, texts
assert h.get("X-Shoal-Seed") == "4242" and d["system_fingerprint"] == "shoal-seed-4242", (h, d)
u = d["usage"]
assert u["prompt_tokens"] == singles[0]["usage"]["prompt_tokens"], (u, singles[0]["usage"])
want = sum(s["usage"]["completion_tokens"] for s in singles)
assert u["completion_tokens"] == want and u["total_tokens"] == u["prompt_tokens"] + want, (u, want)
print(f"n = 3, seed 4242: 3 texts, each the n = 1 reply of seed 4242 + i; usage {u['prompt_tokens']} "
      f"+ {u['completion_tokens']} (the prompt once, {want} tokens over the choices)")

# chat logprobs per choice: the same texts, each choice's tokens its own
_, d = ok(url, C, {**base, "seed": 4242, "n": 2, "logprobs": True, "top_logprobs": 2})
for i, c in enumerate(d["choices"]):
    lp = c["logprobs"]["content"]
    assert c["message"]["content"] == texts[i], (i, c, texts[i])
    assert "".join(t["token"] for t in lp) == texts[i], (i, lp)
    assert all(len(t["top_logprobs"]) == 2 and t["logprob"] <= 0 for t in lp), lp
print("chat logprobs, n = 2: each choice's tokens join to its text")

# without a seed: the reply's seed s, choice i is seed s + i
h, d = ok(url, C, {**base, "n": 3})
s0 = int(h["X-Shoal-Seed"])
for i in range(3):
    assert one(s0 + i)["choices"][0]["message"]["content"] == d["choices"][i]["message"]["content"], i
assert len({c["message"]["content"] for c in d["choices"]}) == 3, d
print(f"n = 3 without a seed: X-Shoal-Seed {s0}; choice i is seed {s0} + i again")

# greedy: the same text three times
_, d = ok(url, C, {**base, "temperature": 0, "n": 3})
g = [c["message"]["content"] for c in d["choices"]]
assert len(set(g)) == 1 and g[0], g
print(f"n = 3 at temperature 0: three times {g[0]!r}")

# streamed n = 3 with the seed of the whole reply above
st, h, raw = post(url, C, {**base, "seed": 4242, "n": 3, "stream": True,
                           "stream_options": {"include_usage": True}})
assert st == 200, (st, raw[:300])
evs = events(raw)
assert evs.count(None) == 1 and evs[-1] is None, raw[-300:]
assert all("error" not in e for e in evs[:-1]), raw[:600]
ch, order, usage = per_choice(evs)
assert sorted(ch) == [0, 1, 2], ch.keys()
for i in range(3):
    s = ch[i]
    assert s["role"] is True, (i, s)
    assert s["text"] == texts[i], (i, s["text"], texts[i])
    assert s["finish"] == [singles[i]["choices"][0]["finish_reason"]], (i, s["finish"])
    assert s["after_finish"] == 0, (i, s)
cnt = lambda x: {k: x[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
assert cnt(usage) == cnt(u), (usage, u)  # cached_tokens: what the prefix cache held then
switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
print(f"streamed n = 3: each choice's text is the whole reply's, one finish_reason chunk each, "
      f"usage, one [DONE]; the index changed {switches} times over {len(order)} text chunks")

# completions: n = 2, logprobs, a stop string
P = "/v1/completions"
cb = {"prompt": "It is a truth", "max_tokens": 16, "temperature": 1, "logprobs": 2, "stop": ["."]}
_, d = ok(url, P, {**cb, "seed": 11, "n": 2})
assert [c["index"] for c in d["choices"]] == [0, 1], d
n_out = 0
for i, c in enumerate(d["choices"]):
    s = ok(url, P, {**cb, "seed": 11 + i})[1]["choices"][0]
    assert s["text"] == c["text"] and s["finish_reason"] == c["finish_reason"], (i, s, c)
    assert s["logprobs"]["tokens"] == c["logprobs"]["tokens"], (i, s["logprobs"], c["logprobs"])
    assert "".join(c["logprobs"]["tokens"]).startswith(c["text"]) and "." not in c["text"], c
    assert all(len(t) <= 2 for t in c["logprobs"]["top_logprobs"]), c["logprobs"]
    n_out += len(c["logprobs"]["tokens"])
assert d["usage"]["completion_tokens"] == n_out, (d["usage"], n_out)
print(f"completions n = 2 with logprobs and a stop: {[c['text'] for c in d['choices']]}, each seed 11 + i")

# refusals
for bad in (0, 17, 1.5, "2", -1):
    st, _, t = post(url, C, {**base, "n": bad})
    e = json.loads(t)["error"]
    assert st == 400 and e["param"] == "n" and "1 to 16" in e["message"], (bad, st, t)
print(f"n = 0, 17, 1.5, \"2\", -1: 400 ({e['message']})")
json.dump({"texts": texts, "usage": u}, open(out, "w"))
EOF
t0=$SECONDS
python3 "$T/part1.py" "$U" "$T" "$T/part1.json" || fail "n: texts, seeds, usage and streams"
echo "(part 1: $((SECONDS - t0)) s)"

# 2. tools and json_schema per choice
cat >"$T/part2.py" <<'EOF'
import json, sys, jsonschema
sys.path.insert(0, sys.argv[2])
from lib_n import post, ok, events, per_choice
url = sys.argv[1]
C = "/v1/chat/completions"
PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
          "days": {"type": "integer"}}, "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
tb = {"messages": [{"role": "user", "content": "Weather in Bath?"}], "tools": TOOLS,
      "tool_choice": "required", "max_tokens": 160, "temperature": 1}

_, d = ok(url, C, {**tb, "seed": 5, "n": 3})
calls = []
for i, c in enumerate(d["choices"]):
    assert c["index"] == i and c["finish_reason"] == "tool_calls", c
    tc = c["message"]["tool_calls"]
    assert len(tc) == 1 and tc[0]["function"]["name"] == "get_weather", tc
    jsonschema.validate(json.loads(tc[0]["function"]["arguments"]), PARAMS)
    calls.append(tc[0])
ids = [t["id"] for t in calls]
assert len(set(ids)) == 3, ids
args = [t["function"]["arguments"] for t in calls]
assert len(set(args)) > 1, args
s = ok(url, C, {**tb, "seed": 7})[1]["choices"][0]["message"]["tool_calls"][0]
assert s["function"]["arguments"] == args[2], (s, args[2])
print(f"tool_choice required, n = 3: {args}, ids {ids}; choice 2 is the n = 1 call of seed 7")

st, _, raw = post(url, C, {**tb, "seed": 5, "n": 3, "stream": True})
evs = events(raw)
assert st == 200 and evs.count(None) == 1 and evs[-1] is None, raw[-400:]
ch, _, _ = per_choice(evs)
for i in range(3):
    s = ch[i]
    k = list(s["calls"].values())
    assert s["finish"] == ["tool_calls"] and len(k) == 1, (i, s)
    assert k[0]["name"] == "get_weather" and k[0]["arguments"] == args[i], (i, k, args[i])
assert len({list(ch[i]["calls"].values())[0]["id"] for i in range(3)}) == 3, ch
print("tool_choice required, n = 3, streamed: each choice's call joins to the whole reply's")

# a call cut short by max_tokens: the request fails, naming a choice
st, _, t = post(url, C, {**tb, "seed": 5, "n": 2, "max_tokens": 8})
e = json.loads(t)["error"]
assert st == 500 and e["code"] == "tool_call_missing" and "choice " in e["message"], (st, t)
st, _, raw = post(url, C, {**tb, "seed": 5, "n": 2, "max_tokens": 8, "stream": True})
evs = events(raw)
errs = [x for x in evs if x and "error" in x]
assert st == 200 and len(errs) == 1 and errs[0]["error"]["code"] == "tool_call_missing", raw[-600:]
assert evs.count(None) == 1 and evs[-1] is None, raw[-300:]
print(f"a required call cut by max_tokens, n = 2: 500 ({e['message'][:90]}...), streamed: an error event, [DONE]")

# json_schema: each choice constrained, each validates
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
          "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": False}
jb = {"messages": [{"role": "user", "content": "Describe Emma as JSON."}], "max_tokens": 120,
      "temperature": 1, "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}}
_, d = ok(url, C, {**jb, "seed": 77, "n": 3})
docs = []
for i, c in enumerate(d["choices"]):
    assert c["finish_reason"] == "stop", c
    jsonschema.validate(json.loads(c["message"]["content"]), SCHEMA)
    docs.append(c["message"]["content"])
assert len(set(docs)) > 1, docs
s = ok(url, C, {**jb, "seed": 79})[1]["choices"][0]["message"]["content"]
assert s == docs[2], (s, docs[2])
st, _, raw = post(url, C, {**jb, "seed": 77, "n": 3, "stream": True})
ch, _, _ = per_choice(events(raw))
assert [ch[i]["text"] for i in range(3)] == docs, (ch, docs)
print(f"json_schema, n = 3: {docs} all validate; choice 2 is seed 79's; the stream's are the same")
EOF
t0=$SECONDS
python3 "$T/part2.py" "$U" "$T" || fail "n with tools and json_schema"
echo "(part 2: $((SECONDS - t0)) s)"
t0=$SECONDS

# 3. the openai npm client
NPM_DIR=${SHOAL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-test-npm}
if [ ! -d "$NPM_DIR/node_modules/openai" ] && command -v npm >/dev/null; then
	mkdir -p "$NPM_DIR"
	(cd "$NPM_DIR" && npm install --no-audit --no-fund --silent openai@4 >/dev/null 2>&1)
fi
if command -v node >/dev/null && [ -d "$NPM_DIR/node_modules/openai" ]; then
	cat >"$NPM_DIR/n-$$.mjs" <<'EOF'
import OpenAI from "openai";
import { writeFileSync } from "fs";
const [base, out] = process.argv.slice(2);
const c = new OpenAI({ baseURL: base, apiKey: "none" });
const req = { model: "austen-dense-q8_0", messages: [{ role: "user", content: "Emma" }],
	max_tokens: 24, temperature: 1, seed: 4242, n: 3 };
const a = await c.chat.completions.create(req);
const s = c.beta.chat.completions.stream({ ...req, stream: true, stream_options: { include_usage: true } });
const fin = await s.finalChatCompletion();
writeFileSync(out, JSON.stringify({
	whole: a.choices.map((x) => [x.index, x.message.content, x.finish_reason]),
	usage: a.usage,
	streamed: fin.choices.map((x) => [x.index, x.message.content, x.finish_reason]),
	s_usage: fin.usage }));
EOF
	node "$NPM_DIR/n-$$.mjs" "$U/v1" "$T/oai.json" >"$T/oai.err" 2>&1 ||
		{ rm -f "$NPM_DIR/n-$$.mjs"; fail "the openai client: $(grep -m3 -i 'message\|error' "$T/oai.err")"; }
	rm -f "$NPM_DIR/n-$$.mjs"
	python3 - "$T/oai.json" "$T/part1.json" <<'EOF' || fail "the openai client's choices: $(cat "$T/oai.json")"
import json, sys
r, p1 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [x[0] for x in r["whole"]] == [0, 1, 2] and [x[1] for x in r["whole"]] == p1["texts"], (r, p1)
assert [x[:2] for x in r["streamed"]] == [x[:2] for x in r["whole"]], r
assert [x[2] for x in r["streamed"]] == [x[2] for x in r["whole"]], r
cnt = lambda x: {k: x[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
assert cnt(r["usage"]) == cnt(p1["usage"]) and cnt(r["s_usage"]) == cnt(p1["usage"]), r
print("openai npm client: n = 3 whole and streamed (finalChatCompletion) give part 1's three texts and usage")
EOF
else
	[ "${CI:-}" = true ] && fail "node and the openai npm package are needed under CI"
	echo "SKIP part: node or the openai npm package (npm install openai) is not available"
fi

echo "(part 3: $((SECONDS - t0)) s)"

# 4. no session outlives its request
t4=$SECONDS
metric() { curl -s "$U/metrics" | sed -n "s/^$1 //p"; }
held() { echo $(($(metric shoal_queue_length) + $(metric shoal_active_sessions))); }
LONGB='"messages":[{"role":"user","content":"Emma"}],"max_tokens":400,"temperature":1,"stream":true'
# hidden states 250 ms late: a run of 400 tokens lasts minutes, the queue stays put
echo "tcp:delay:ms=250:n=0:kind=hidden" >"$T/fault"
pids=()
for n in 16 16 16 15; do
	curl -s -N --max-time 60 -H 'Content-Type: application/json' -d "{$LONGB,\"n\":$n}" \
		"$U/v1/chat/completions" >/dev/null 2>&1 &
	pids+=($!)
done
full() { [ "$(held)" = 63 ]; }
wait_for 20 full || fail "63 runs were not queued: $(held)"
CODE=$(curl -s -D "$T/h429" -o "$T/busy.json" -w '%{http_code}' -H 'Content-Type: application/json' \
	-d '{"messages":[{"role":"user","content":"Emma"}],"max_tokens":4,"n":2}' "$U/v1/chat/completions")
[ "$CODE" = 429 ] && grep -q 'choice 1 of n = 2' "$T/busy.json" && grep -qi '^Retry-After' "$T/h429" ||
	fail "n = 2 with room for one choice: $CODE $(cat "$T/busy.json")"
kill "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
# the hook off again: the data thread, which the delays slow, ends the
# cancelled runs; undisturbed, the 63 would run 16 rounds of 4 sessions
: >"$T/fault"
t0=$(now_ms)
drained() { [ "$(held)" = 0 ]; }
wait_for 10 drained || fail "runs outlived their clients: $(held) queued or running"
dt=$(($(now_ms) - t0))
b0=$(metric shoal_stage_batched_runs_total)
CODE=$(curl -s -o "$T/n4.json" -w '%{http_code}' --max-time 20 -H 'Content-Type: application/json' \
	-d '{"messages":[{"role":"user","content":"Emma"}],"max_tokens":16,"temperature":1,"n":4}' "$U/v1/chat/completions")
[ "$CODE" = 200 ] && [ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["choices"]))' "$T/n4.json")" = 4 ] ||
	fail "n = 4 after the drain: $CODE $(head -c 300 "$T/n4.json")"
b1=$(metric shoal_stage_batched_runs_total)
[ "$b1" -gt "$b0" ] || fail "the 4 choices ran no batched rows ($b0 -> $b1)"
echo "63 runs queued; n = 2 with room for one: 429 ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["message"][:80])' "$T/busy.json")); clients gone: 0 runs held after $dt ms; n = 4 then served in $((b1 - b0)) batched runs"
echo "(part 4: $((SECONDS - t4)) s)"
stop_all
echo "PASS"
