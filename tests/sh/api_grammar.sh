#!/bin/bash
# tests/sh/api_grammar.sh: structured output through the HTTP API of real
# `shoal node` processes on 127.0.0.1 (issue 36): response_format
# json_schema and json_object, and tool_choice "required" or a named
# function, constrained by a grammar at the last stage.
#
# The bundled models were trained on novels: what they write inside the
# JSON is odd, but it must be JSON that fits the schema, checked by a real
# validator (python3-jsonschema).
#
#  1. A 2-peer cluster (2 stages: the last stage, which samples, is not the
#     API's peer). 10 schemas x GRAMMAR_N seeded generations each (default
#     20 here, to keep make check near a minute; tests/bench/grammar_bench.sh
#     runs the issue's 200), at temperature 1, 4 at a time: each one ends
#     with finish_reason "stop" and validates. The same seed gives the same
#     text again; a streamed reply joins to the whole one's text. json_object
#     (any object): a reply ends ("stop", an object) or runs out of
#     max_tokens inside a long string ("length"); some must end.
#  2. Refusals: unsupported keywords and bad response_format shapes are
#     400s that name response_format and the keyword.
#  3. tool_choice "required" and a named function, with Qwen 2.5's chat
#     format (SHOAL_TEST_CHAT_STYLE; the model never calls a function on its
#     own): the reply is a call, finish_reason "tool_calls", its arguments
#     fit the function's parameters; streamed too.
#  4. Replay: 4 peers, a 3-stage plan; a constrained streamed run loses its
#     stage-1 peer (kill -9) mid-stream: the run replays on the new plan and
#     its text is identical to the same seed's undisturbed run.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
N=${GRAMMAR_N:-20}
[ -x "$PC" ] || skip "$PC not built"
command -v curl >/dev/null || skip "curl is not installed"
python3 -c 'import jsonschema' 2>/dev/null || skip "python3-jsonschema is not installed (./bootstrap installs it)"
"$B" --version | grep -q 'test hooks: yes' || skip "shoal was built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"
post() { # post URL OUT BODY: status into $CODE
	CODE=$(curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' -d "$3" \
		"$1/v1/chat/completions")
}

# 1. ten schemas, validated
SHOAL_TEST_CHAT_STYLE=qwen2.5 start a1 "$DENSE" --mem-limit 16M --ctx 512 --api 127.0.0.1:0
SEED=$(ep a1)
SHOAL_TEST_CHAT_STYLE=qwen2.5 start a2 "$DENSE" --mem-limit 16M --ctx 512 --peer "$SEED"
wait_for 30 servable_all 2 a1 a2 || fail "no 2-stage plan on 2 peers"
U=http://127.0.0.1:$(api_port a1)

cat >"$T/schemas.py" <<'EOF'
SCHEMAS = [
 {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
  "age": {"type": "integer"}, "friends": {"type": "array", "maxItems": 3,
  "items": {"type": "string", "maxLength": 12}}}, "required": ["name", "age", "friends"]},
 {"type": "object", "properties": {"mood": {"enum": ["happy", "sad", "vexed"]},
  "score": {"type": "number"}}, "required": ["mood", "score"], "additionalProperties": False},
 {"type": "object", "properties": {"letter": {"type": "object", "properties": {
  "from": {"type": "string", "maxLength": 16}, "to": {"type": "string", "maxLength": 16},
  "sealed": {"type": "boolean"}}, "required": ["from", "to", "sealed"]}}, "required": ["letter"]},
 {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5},
 {"type": "object", "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 10},
  {"type": "integer"}, {"type": "null"}]}}, "required": ["v"]},
 {"type": "object", "properties": {"a": {"type": "string", "maxLength": 8}, "b": {"type": "integer"},
  "c": {"type": "boolean"}}, "required": ["b"]},
 {"type": "object", "properties": {"kind": {"const": "ball"}, "host": {"type": ["string", "null"],
  "maxLength": 12}, "guests": {"type": "integer"}}, "required": ["kind", "host", "guests"]},
 {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
  "n": {"type": "string", "maxLength": 10}, "k": {"type": "number"}}, "required": ["n", "k"],
  "additionalProperties": False}},
 {"type": "object", "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 24}},
  "required": ["title"], "additionalProperties": False},
 {"type": "object", "properties": {"ok": {"type": "boolean"}, "tags": {"type": "array",
  "items": {"enum": ["a", "b", 7]}, "maxItems": 4}, "note": {"type": "null"}}, "required": ["ok", "tags"]},
]
EOF
cat >"$T/gen.py" <<'EOF'
import json, sys, threading, urllib.request
import jsonschema
sys.path.insert(0, sys.argv[3])
from schemas import SCHEMAS
url, n = sys.argv[1], int(sys.argv[2])

def body(i, seed, stream=False):
    s = SCHEMAS[i] if i >= 0 else None
    rf = ({"type": "json_object"} if s is None else
          {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": s, "strict": i % 2 == 0}})
    return {"messages": [{"role": "user", "content": "Describe Emma as JSON."}], "temperature": 1,
            "seed": seed, "max_tokens": 200, "response_format": rf, "stream": stream}

def post(b):
    r = urllib.request.Request(url + "/v1/chat/completions", json.dumps(b).encode(),
                               {"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=120) as f:
        return f.read().decode()

bad, done, lock = [], [0], threading.Lock()
jobs = [(i, seed) for i in range(len(SCHEMAS)) for seed in range(1, n + 1)]
def work(k):
    for j in range(k, len(jobs), 4):
        i, seed = jobs[j]
        try:
            d = json.loads(post(body(i, seed)))
            c = d["choices"][0]
            doc = json.loads(c["message"]["content"])
            jsonschema.validate(doc, SCHEMAS[i])
            assert c["finish_reason"] == "stop", c["finish_reason"]
        except Exception as e:
            with lock:
                bad.append(f"schema {i} seed {seed}: {e!r:.300} {locals().get('d', '')!s:.300}")
        with lock:
            done[0] += 1
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
if bad:
    print("\n".join(bad[:5]))
    sys.exit(1)
# the same seed, the same text; a stream joins to the whole reply
a = json.loads(post(body(0, 77)))["choices"][0]["message"]["content"]
b = json.loads(post(body(0, 77)))["choices"][0]["message"]["content"]
assert a == b, (a, b)
txt, fin = "", None
for line in post(body(0, 77, True)).splitlines():
    if line.startswith("data: {"):
        ch = json.loads(line[6:])["choices"][0]
        txt += ch["delta"].get("content") or ""
        fin = ch.get("finish_reason") or fin
assert txt == a and fin == "stop", (txt, a, fin)
# json_object: strings without a bound may outrun max_tokens (finish_reason
# "length", as OpenAI documents); the ones that end are objects
ends = 0
for seed in range(1, n + 1):
    c = json.loads(post(body(-1, seed)))["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["message"]["content"]), dict), c
        ends += 1
    else:
        assert c["finish_reason"] == "length", c
assert ends > 0, "no json_object reply ended"
print(f"json_object: {ends} of {n} replies ended within max_tokens, each an object")
print(f"{done[0]} constrained generations over {len(SCHEMAS)} schemas all validate "
      f"(e.g. {a}); seed 77 twice and streamed: the same text")
EOF
t0=$SECONDS
python3 "$T/gen.py" "$U" "$N" "$T" || fail "constrained generations"
echo "(the generations took $((SECONDS - t0)) s)"

# 2. refusals
for rf in '{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^a"}}}|pattern' \
	'{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"d":{"$ref":"#/$defs/d"}}}}}|$ref' \
	'{"type":"json_schema","json_schema":{"name":"x","schema":{"oneOf":[{"type":"string"}]}}}|oneOf' \
	'{"type":"json_schema","json_schema":{"name":"x","schema":{"anyOf":[{"type":"object"},{"type":"object"}]}}}|anyOf' \
	'{"type":"xml"}|json_object' '{"type":"json_schema","json_schema":[]}|json_schema'; do
	post "$U" "$T/bad.json" "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":${rf%|*}}"
	[ "$CODE" = 400 ] && [ "$(jget "$T/bad.json" 'd["error"]["param"]')" = response_format ] &&
		jget "$T/bad.json" 'd["error"]["message"]' | grep -qF -- "${rf##*|}" ||
		fail "response_format ${rf%|*}: $CODE $(cat "$T/bad.json")"
done
echo "unsupported schemas and bad shapes: 400s naming the keyword (the last: $(jget "$T/bad.json" 'd["error"]["message"]' | head -c 100))"

# 3. forced tool calls, whole and streamed
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":16},"days":{"type":"integer"}},"required":["city","days"]}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"enum":["GMT","BST"]}},"required":["zone"]}}}]'
for tc in '"required"' '{"type":"function","function":{"name":"get_time"}}'; do
	for stream in false true; do
		post "$U" "$T/tc.out" "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Bath?\"}],\"tools\":$TOOLS,\"tool_choice\":$tc,\"max_tokens\":160,\"seed\":5,\"temperature\":1,\"stream\":$stream}"
		python3 - "$T/tc.out" "$TOOLS" "$tc" "$stream" <<'EOF' || fail "tool_choice $tc (stream $stream): $CODE $(head -c 600 "$T/tc.out")"
import json, sys, jsonschema
raw, tools, tc, stream = open(sys.argv[1]).read(), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4] == "true"
if stream:
    calls, fin = {}, None
    for line in raw.splitlines():
        if line.startswith("data: {"):
            ch = json.loads(line[6:])["choices"][0]
            for d in ch["delta"].get("tool_calls") or []:
                c = calls.setdefault(d["index"], {"name": "", "arguments": ""})
                c["name"] += d.get("function", {}).get("name") or ""
                c["arguments"] += d.get("function", {}).get("arguments") or ""
            fin = ch.get("finish_reason") or fin
    calls = list(calls.values())
else:
    ch = json.loads(raw)["choices"][0]
    calls, fin = [c["function"] for c in ch["message"]["tool_calls"]], ch["finish_reason"]
assert fin == "tool_calls" and len(calls) == 1, (fin, calls)
fn = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
if isinstance(tc, dict):
    assert calls[0]["name"] == tc["function"]["name"], calls
jsonschema.validate(json.loads(calls[0]["arguments"]), fn[calls[0]["name"]])
print(f"tool_choice {json.dumps(tc)}{' (streamed)' if stream else ''}: {calls[0]['name']}({calls[0]['arguments']})")
EOF
	done
done
stop_all

# 4. replay: a stage killed -9 mid-stream
start d1 "$DENSE" --mem-limit 11M --ctx 512 --api 127.0.0.1:0
SEED=$(ep d1)
for n in d2 d3 d4; do start $n "$DENSE" --mem-limit 11M --ctx 512 --peer "$SEED"; done
wait_for 30 servable_all 3 d1 d2 d3 d4 || fail "no common 3-stage plan on 4 peers"
U=http://127.0.0.1:$(api_port d1)
LONG='{"type":"array","minItems":24,"maxItems":24,"items":{"type":"object","properties":{"w":{"type":"string","maxLength":6},"n":{"enum":[1,2,3]}},"required":["w","n"]}}'
REQ="{\"messages\":[{\"role\":\"user\",\"content\":\"Emma\"}],\"temperature\":1,\"seed\":11,\"max_tokens\":480,\"stream\":true,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"long\",\"schema\":$LONG}}}"
joined() { python3 -c '
import json, sys
t, f = "", None
for l in open(sys.argv[1]).read().splitlines():
    if l.startswith("data: {"):
        c = json.loads(l[6:])["choices"][0]; t += c["delta"].get("content") or ""; f = c.get("finish_reason") or f
print(json.dumps([t, f]))' "$1"; }
curl -s -N -H 'Content-Type: application/json' -d "$REQ" "$U/v1/chat/completions" >"$T/ref.sse" ||
	fail "the undisturbed run"
chunks() { grep -c '^data: {' "$1" 2>/dev/null || true; }
[ "$(chunks "$T/ref.sse")" -ge 100 ] || fail "the undisturbed run is short: $(head -c 300 "$T/ref.sse")"
status d1 || fail "status"
OWNER=$("$PC" "$T/st-d1.json" stage 0)
VICTIM=$("$PC" "$T/st-d1.json" stage 1)
[ "$VICTIM" != d1 ] || VICTIM=$("$PC" "$T/st-d1.json" stage 2)
curl -s -N -H 'Content-Type: application/json' -d "$REQ" "$U/v1/chat/completions" >"$T/kill.sse" &
CPID=$!
wait_soon 20 eval '[ "$(chunks "$T/kill.sse")" -ge 30 ]' || fail "the run did not stream"
at=$(chunks "$T/kill.sse")
stop "$VICTIM"
wait $CPID || fail "the stream broke after $VICTIM was killed"
python3 - "$(joined "$T/ref.sse")" "$(joined "$T/kill.sse")" "$LONG" <<'EOF' || fail "replayed run differs: $(joined "$T/kill.sse" | head -c 400)"
import json, sys, jsonschema
(a, fa), (b, fb) = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert fa == fb == "stop" and a == b, (fa, fb, a[:200], b[:200])
jsonschema.validate(json.loads(b), json.loads(sys.argv[3]))
EOF
grep -q 'replaying' "$T/d1.log" || fail "no replay in d1's log"
echo "replay: $VICTIM (a stage; stage 0: $OWNER; the API's peer: d1) killed -9 after ~$at of $(chunks "$T/ref.sse") chunks: the constrained text is identical and validates"
