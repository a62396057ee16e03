#!/bin/bash
# tests/sh/api_reasoning.sh: a reasoning model's reply through the HTTP API
# of a real `shoal node` on 127.0.0.1 (issue 40): the reasoning comes back
# as message.reasoning_content (delta.reasoning_content when streamed),
# never in the content, and no marker of the format reaches the client.
#
# The bundled models were trained on novels and never reason aloud: two
# test hooks (./configure --enable-test-hooks) stand in.
# SHOAL_TEST_CHAT_STYLE renders the chat in a reasoning model's format and
# SHOAL_TEST_REPLY puts a reply in that format in place of the model's
# words (8 bytes a token, so a stream cuts markers in the middle). The
# rest is the path users run: the reply read as reasoning and answer, the
# whole reply and the stream, and a stop string.
#
#  1. Qwen3's format: "<think>...</think>" then the answer; whole and
#     streamed, the parts are the same and the stream's pieces join to
#     them. With "stop" in the answer, the answer is cut and the reasoning
#     kept.
#  2. gpt-oss (harmony): an analysis message then a final one, with the
#     channels' control tokens in the text; the same checks.
#  3. gpt-oss with tools: the analysis message, then a call whose
#     recipient comes right after the generation prompt; whole and
#     streamed, the reasoning apart, the call in tool_calls, no content;
#     tool_choice "required" is a 400 (no forced call for gpt-oss yet).
#  4. Without a reasoning format (the model's own: none), a reply that
#     holds "<think>" is all content, as before.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
command -v curl >/dev/null || skip "curl is not installed"
"$B" --version | grep -q 'test hooks: yes' || skip "shoal was built without --enable-test-hooks"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

# check NAME STYLE REPLY REASONING CONTENT: a node in STYLE forced to
# REPLY; the whole and the streamed reply give REASONING and CONTENT
check() {
	local name=$1 style=$2 reply=$3 want_r=$4 want_c=$5
	SHOAL_TEST_CHAT_STYLE=$style SHOAL_TEST_REPLY=$reply \
		start "$name" "$DENSE" --mem-limit 32M --ctx 1024 --api 127.0.0.1:0
	wait_for 30 servable_all 1 "$name" || fail "$name: no plan"
	local u=http://127.0.0.1:$(api_port "$name")
	local body='{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":40,"temperature":0'
	curl -s -o "$T/$name.json" -H 'Content-Type: application/json' -d "$body}" \
		"$u/v1/chat/completions" || fail "$name: the whole reply"
	curl -sN -o "$T/$name.sse" -H 'Content-Type: application/json' -d "$body,\"stream\":true}" \
		"$u/v1/chat/completions" || fail "$name: the stream"
	python3 - "$T/$name.json" "$T/$name.sse" "$want_r" "$want_c" <<'EOF' ||
import json, sys
whole = json.load(open(sys.argv[1]))
want_r, want_c = sys.argv[3], sys.argv[4]
m = whole["choices"][0]["message"]
got_r = m.get("reasoning_content", "")
assert (got_r, m["content"]) == (want_r, want_c), f"whole: {got_r!r}, {m['content']!r}"
if not want_r:
    assert "reasoning_content" not in m, "an empty reasoning_content"
r = c = ""
pieces = 0
for line in open(sys.argv[2]):
    if not line.startswith("data: ") or line.startswith("data: [DONE]"):
        continue
    d = json.loads(line[6:])
    assert "error" not in d, d
    for ch in d.get("choices", []):
        delta = ch.get("delta", {})
        for part in ("reasoning_content", "content"):
            t = delta.get(part) or ""
            for mark in ("<|", "</think", "<think"):
                assert mark not in t or want_c.find(mark) >= 0, f"a marker in a {part} delta: {t!r}"
        r += delta.get("reasoning_content") or ""
        c += delta.get("content") or ""
        pieces += 1
assert (r, c) == (want_r, want_c), f"stream: {r!r}, {c!r}"
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: reasoning {len(want_r)} bytes, content {want_c!r}; {pieces} stream chunks")
EOF
		fail "$name: $(cat "$T/$name.json"; head -c 2000 "$T/$name.sse")"
	U=$u
}

# 1. Qwen3
THINK=$'<think>\nThe user wants a greeting. Keep it short.\n</think>\n\nHello! How do you do?'
check q qwen3 "$THINK" "The user wants a greeting. Keep it short." "Hello! How do you do?"
CODE=$(curl -s -o "$T/stop.json" -w '%{http_code}' -H 'Content-Type: application/json' \
	-d '{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":6,"stop":["How"]}' \
	"$U/v1/chat/completions")
[ "$CODE" = 200 ] && python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert m["content"] == "Hello! " and m["reasoning_content"].startswith("The user wants"), m' "$T/stop.json" ||
	fail "a stop string in the answer: $CODE $(cat "$T/stop.json")"
echo "a stop string cuts the answer and keeps the reasoning"
stop q

# 2. gpt-oss (harmony)
HARMONY='<|channel|>analysis<|message|>Greeting requested; answer in one line.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!'
check h gpt-oss "$HARMONY" "Greeting requested; answer in one line." "Hello there!"
stop h

# 3. gpt-oss with tools
CALL='<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Bath"}'
SHOAL_TEST_CHAT_STYLE=gpt-oss SHOAL_TEST_REPLY=$CALL \
	start t "$DENSE" --mem-limit 32M --ctx 1024 --api 127.0.0.1:0
wait_for 30 servable_all 1 t || fail "t: no plan"
U=http://127.0.0.1:$(api_port t)
TOOLS='[{"type":"function","function":{"name":"get_weather","description":"The weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
TB="{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Bath?\"}],\"tools\":$TOOLS,\"max_tokens\":40"
curl -s -o "$T/tc.json" -H 'Content-Type: application/json' -d "$TB}" "$U/v1/chat/completions" ||
	fail "a gpt-oss call"
curl -sN -o "$T/tc.sse" -H 'Content-Type: application/json' -d "$TB,\"stream\":true}" \
	"$U/v1/chat/completions" || fail "a streamed gpt-oss call"
python3 - "$T/tc.json" "$T/tc.sse" <<'EOF' || fail "gpt-oss's call: $(cat "$T/tc.json"; head -c 2000 "$T/tc.sse")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
m = c["message"]
assert c["finish_reason"] == "tool_calls" and m["content"] is None, c
assert m["reasoning_content"] == "Need the weather.", m
calls = m["tool_calls"]
assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather", calls
assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Bath"}, calls
r = content = args = ""
name = None
for line in open(sys.argv[2]):
    if not line.startswith("data: {"):
        continue
    for ch in json.loads(line[6:]).get("choices", []):
        d = ch.get("delta", {})
        r += d.get("reasoning_content") or ""
        content += d.get("content") or ""
        for t in d.get("tool_calls") or []:
            name = t.get("function", {}).get("name") or name
            args += t.get("function", {}).get("arguments") or ""
assert (r, content, name) == ("Need the weather.", "", "get_weather"), (r, content, name)
assert json.loads(args) == {"city": "Bath"}, args
print("gpt-oss call: reasoning apart, get_weather({\"city\": \"Bath\"}) whole and streamed")
EOF
CODE=$(curl -s -o "$T/req.json" -w '%{http_code}' -H 'Content-Type: application/json' \
	-d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$TOOLS,\"tool_choice\":\"required\"}" \
	"$U/v1/chat/completions")
[ "$CODE" = 400 ] && grep -q "gpt-oss" "$T/req.json" || fail "tool_choice required on gpt-oss: $CODE $(cat "$T/req.json")"
echo "tool_choice required on gpt-oss: 400"
stop t

# 4. no reasoning format: the text as it is
check p "" "<think>x</think>y" "" "<think>x</think>y"
stop p
echo "api_reasoning: passed"
