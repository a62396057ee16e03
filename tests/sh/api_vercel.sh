#!/bin/bash
# tests/sh/api_vercel.sh: the Vercel AI SDK (`ai` with the
# `@ai-sdk/openai-compatible` provider, installed into a cache on first use
# like api_loopback.sh's openai client) against a 2-peer cluster of real
# `shoal node` processes on 127.0.0.1 (issue 36, acceptance 1):
#  1. generateText with a tool and toolChoice "required" on the first
#     step: the SDK gets the call, runs the function, sends its result and
#     gets the final answer on the second step;
#  2. the same through streamText (the SDK assembles the streamed call);
#  3. generateObject with a JSON schema: the object validates against the
#     schema with ajv.
# The bundled models were trained on novels and have no chat template:
# SHOAL_TEST_CHAT_STYLE=qwen2.5 (a test hook) renders the chat in Qwen
# 2.5's format with its tools block; the call itself comes from the model,
# made to call by the constrained tool_choice.
set -u
. "$(dirname "$0")/lib.sh"
DENSE=$DATA/models/austen-dense-q8_0.gguf
[ -f "$DENSE" ] || skip "no $DENSE"
command -v node >/dev/null || skip "node is not installed"
"$B" --version | grep -q 'test hooks: yes' || skip "shoal was built without --enable-test-hooks"
NPM_DIR=${SHOAL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-test-npm}
if [ ! -d "$NPM_DIR/node_modules/@ai-sdk/openai-compatible" ] || [ ! -d "$NPM_DIR/node_modules/ajv" ]; then
	command -v npm >/dev/null && mkdir -p "$NPM_DIR" &&
		(cd "$NPM_DIR" && npm install --no-audit --no-fund --silent ai@5 @ai-sdk/openai-compatible@1 \
			ajv@8 >/dev/null 2>&1)
fi
[ -d "$NPM_DIR/node_modules/@ai-sdk/openai-compatible" ] && [ -d "$NPM_DIR/node_modules/ajv" ] ||
	skip "the ai, @ai-sdk/openai-compatible and ajv npm packages are not available"
"$B" key new "$KEY" >/dev/null || fail "shoal key new"

SHOAL_TEST_CHAT_STYLE=qwen2.5 start v1 "$DENSE" --mem-limit 14M --ctx 1024 --api 127.0.0.1:0
SHOAL_TEST_CHAT_STYLE=qwen2.5 start v2 "$DENSE" --mem-limit 14M --ctx 1024 --peer "$(ep v1)"
wait_for 30 servable_all 2 v1 v2 || fail "no 2-stage plan on 2 peers"
U=http://127.0.0.1:$(api_port v1)/v1

cat >"$NPM_DIR/vercel-$$.mjs" <<'EOF'
import { generateText, streamText, generateObject, tool, jsonSchema, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import Ajv from "ajv";
import { writeFileSync } from "node:fs";
const [base, out] = process.argv.slice(2);
const shoal = createOpenAICompatible({ name: "shoal", baseURL: base, apiKey: "none",
	supportsStructuredOutputs: true });
const model = shoal.chatModel("austen-dense-q8_0");
const r = { ran: [] };
const tools = {
	get_weather: tool({
		description: "The weather in a city",
		inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string", enum: ["Bath", "Lyme"] } },
			required: ["city"], additionalProperties: false }),
		execute: async ({ city }) => { r.ran.push(city); return { city, sky: "grey", temp_c: 11 }; },
	}),
};
const ask = { model, tools, maxOutputTokens: 64, temperature: 0, stopWhen: stepCountIs(2),
	prompt: "What is the weather in Bath?",
	prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }) };
// 1. whole
const g = await generateText(ask);
r.g = { steps: g.steps.length, calls: g.steps[0].toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
	results: g.steps[0].toolResults.length, finish0: g.steps[0].finishReason,
	text: g.text, finish: g.finishReason };
// 2. streamed
const s = streamText(ask);
let streamed = "";
for await (const t of s.textStream) streamed += t;
const steps = await s.steps;
r.s = { steps: steps.length, calls: steps[0].toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
	finish0: steps[0].finishReason, text: streamed };
// 3. an object that fits a schema
const schema = { type: "object", properties: {
	name: { type: "string", minLength: 1, maxLength: 24 }, age: { type: "integer" },
	mood: { type: "string", enum: ["calm", "vexed", "merry"] },
	friends: { type: "array", items: { type: "string", maxLength: 16 }, maxItems: 3 } },
	required: ["name", "age", "mood", "friends"], additionalProperties: false };
const o = await generateObject({ model, schema: jsonSchema(schema), schemaName: "person",
	prompt: "Describe Emma as JSON.", temperature: 0.8, seed: 7, maxOutputTokens: 200 });
const ajv = new Ajv({ strict: true });
r.o = { object: o.object, valid: ajv.validate(schema, o.object), errors: ajv.errors };
writeFileSync(out, JSON.stringify(r));
EOF
node "$NPM_DIR/vercel-$$.mjs" "$U" "$T/v.json" >"$T/v.err" 2>&1 ||
	{ rm -f "$NPM_DIR/vercel-$$.mjs"; fail "the AI SDK script: $(grep -m5 -i 'error\|message' "$T/v.err")"; }
rm -f "$NPM_DIR/vercel-$$.mjs"
python3 - "$T/v.json" <<'EOF' || fail "the AI SDK's results: $(cat "$T/v.json")"
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("g", "s"):
    x = r[k]
    assert x["steps"] == 2, (k, x)
    assert x["finish0"] == "tool-calls", (k, x)
    assert len(x["calls"]) >= 1 and all(c["name"] == "get_weather" for c in x["calls"]), (k, x)
    assert all(isinstance(c["input"].get("city"), str) and set(c["input"]) == {"city"}
               for c in x["calls"]), (k, x)
    assert x["text"], (k, "no final answer", x)
assert len(r["ran"]) >= 2, r["ran"]
assert r["o"]["valid"], r["o"]
print("AI SDK: generateText and streamText made a get_weather call (inputs %s, %s), ran it and "
      "answered (%r); generateObject gave %s, valid for ajv"
      % (r["g"]["calls"][0]["input"], r["s"]["calls"][0]["input"], r["g"]["text"][:40],
         json.dumps(r["o"]["object"])[:120]))
EOF
