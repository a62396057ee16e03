#!/bin/sh
# tests/sh/chat_tools_jinja.sh: shoal's chat renderers with tools
# (models/chat_tools.c, chat_tools_fmt.c) against Jinja2 running the real
# templates in tests/data/vocab/templates, on 400 random conversations per
# template (fixed seed): tools lists (nested schemas, enums, floats,
# Unicode, quotes, control characters), assistant turns with one to three
# calls and with or without text, runs of tool messages, <think> blocks, a
# leading system message or none, with and without a generation prompt.
# Every template with a tool syntax is rendered: Qwen 2.5, Qwen 3, Llama
# 3.1, Mistral Nemo, DeepSeek V3.1, GLM-4.6 and gpt-oss (its tools get
# parameters of every kind its template prints as TypeScript, and always
# a description: the template fails without one); a conversation the
# template refuses (raise_exception) must be refused by shoal too.
#
# `tojson` is transformers' (json.dumps, ensure_ascii off, keys in order):
# the filter the templates are rendered with in practice. A call's
# arguments reach the template as a dict (transformers' convention; the
# API gets them as a JSON string and parses them). Where shoal departs
# from a template on purpose (models/chat.h), the reference is the
# template's rendering of what shoal says it does: Mistral's call ids
# that are not 9 letters and digits are replaced by the same FNV-1a
# base-62 ids before Jinja sees them; DeepSeek's tools (which its template
# does not print) are given to Jinja as a first system message in shoal's
# words. The formats without a tool syntax must refuse such a
# conversation.
#
# Part: tests of models/ (chat). Needs python3 with jinja2 (SKIP otherwise)
# and the helper tests/helpers/chat_render.
set -u
: "${SHOAL_DATA:=tests/data}"
: "${SHOAL_BUILDDIR:=.}"
if ! python3 -c 'import jinja2' 2>/dev/null; then
	[ "${CI:-}" = true ] && { echo "FAIL: python3 with jinja2 is needed under CI"; exit 1; }
	echo "SKIP: python3 with jinja2 is not installed (Debian: python3-jinja2)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-chattools.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$SHOAL_DATA/vocab/templates" "$SHOAL_BUILDDIR/tests/helpers/chat_render" "$tmp" <<'PY'
import copy, json, random, subprocess, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment

tdir, helper, tmp = sys.argv[1:4]
rendered = {"Qwen-Qwen2.5-7B-Instruct": "qwen2.5", "Qwen-Qwen3-0.6B": "qwen3",
            "meta-llama-Llama-3.1-8B-Instruct": "llama3.1",
            "mistralai-Mistral-Nemo-Instruct-2407": "mistral-nemo",
            "deepseek-ai-DeepSeek-V3.1": "deepseek3.1", "GLM-4.6": "glm4.5",
            "openai-gpt-oss-120b": "gpt-oss"}
refused = ["llama3", "gemma", "phi3.5", "chatml", "plain"]

class Raised(Exception):
    pass

def raise_exception(msg):
    raise Raised(msg)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.globals["raise_exception"] = raise_exception
DATE = "2026-01-01"  # gpt-oss prints the date: strftime_now is pinned
env.globals["strftime_now"] = lambda fmt: DATE
env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: \
    json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
rng = random.Random(20261206)
texts = ["hi", "", " pad ", "multi\nline", "<think>r</think>a", "<think>\nr1\n</think>\n\nans",
         "\u00e9 \u6f22", "trail\n\n", "<tool_response>t</tool_response>", "q\"x\\y"]
scalars = [0.5, 1e-05, 100.0, 3, -7, True, False, None, "caf\u00e9", "a\"b\\c", "\u001f<&>",
           "line\nnext\ttab", 1.25e+20, 0.1, 12345678901234]

def value(d=0):
    r = rng.random()
    if d < 3 and r < 0.2:
        return {f"k{i}\u00e9"[: rng.randint(2, 4)]: value(d + 1) for i in range(rng.randint(0, 3))}
    if d < 3 and r < 0.3:
        return [value(d + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(scalars)

def tool(i):
    f = {"name": f"fn_{i}", "description": rng.choice(["Gets it.", "Ein \"Werkzeug\"", ""]),
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string", "enum": ["Bath", "Lyme"]},
             "n": {"type": "number", "minimum": rng.choice([0, 0.5, 1e-05])},
             "extra": value()}, "required": ["city"]}}
    if rng.random() < 0.3:
        del f["description"]
    return {"type": "function", "function": f}

def ts_params():
    """parameters of the kinds gpt-oss's template prints as TypeScript"""
    kinds = [{"type": "string", "description": "A \"name\"."}, {"type": "integer", "default": 5},
             {"type": "array", "items": {"type": "string"}}, {"type": "array"},
             {"type": "array", "items": {"type": "object", "properties": {"z": {"type": "boolean"}}}},
             {"type": "array", "items": {"type": "array", "items": {"type": "number"}}, "nullable": True},
             {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "number"}},
              "required": ["x"]},
             {"type": "object"}, {"type": ["string", "null"]}, {"type": "string", "nullable": True},
             {"type": "string", "enum": ["u", "v"], "default": "u"}, {"type": "boolean"},
             {"type": "string", "default": "caf\u00e9"},
             {"oneOf": [{"type": "string", "description": "s"}, {"type": "number", "default": 3}]},
             {"oneOf": [{"type": "object"}, {"type": "integer"}], "default": "x"}]
    return {f"p{i}": rng.choice(kinds) for i in range(rng.randint(1, 4))}

B62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

def mistral_id(i):
    """models/chat_tools_fmt.c's id for Mistral: kept when 9 letters and
    digits, else 9 base-62 digits of its FNV-1a 64 hash"""
    if len(i) == 9 and i.isascii() and i.isalnum():
        return i
    h = 0xcbf29ce484222325
    for c in i.encode():
        h = ((h ^ c) * 0x100000001b3) % (1 << 64)
    out = ""
    for _ in range(9):
        out += B62[h % 62]
        h //= 62
    return out

DS = "\uff5c"
DSP = "\u2581"
def ds_tok(*w):
    return "<" + DS + DSP.join(w) + DS + ">"

def deepseek_tools(tools):
    """the system text shoal gives DeepSeek V3.1 for its tools"""
    t = "## Tools\n\nYou can call these functions:\n"
    for x in tools:
        f = x["function"]
        t += "\n### " + f["name"]
        if isinstance(f.get("description"), str):
            t += "\nDescription: " + f["description"]
        t += "\nParameters: " + json.dumps(f.get("parameters", {}), ensure_ascii=False) + "\n"
    return t + ("\nTo call functions, write exactly " + ds_tok("tool", "calls", "begin") +
                ds_tok("tool", "call", "begin") + "NAME" + ds_tok("tool", "sep") + "ARGUMENTS" +
                ds_tok("tool", "call", "end") + ds_tok("tool", "calls", "end") +
                ", where ARGUMENTS is a JSON object that fits the function's parameters; for "
                "several calls, put one " + ds_tok("tool", "call", "begin") + "..." +
                ds_tok("tool", "call", "end") + " after another with nothing between them.")

def call_id(k):
    return rng.choice([f"call{k}", f"c{k}abcdefg", f"call_{k}x\u00e9", f"A{k}b2C3d4"])

def conversation():
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(texts)})
    msgs.append({"role": "user", "content": rng.choice(texts)})
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.7:
            calls = [{"id": call_id(k), "type": "function",
                      "function": {"name": f"fn_{k}", "arguments": {"city": "Bath", "x": value()}}}
                     for k in range(rng.randint(1, 3))]
            msgs.append({"role": "assistant", "content": rng.choice(["", "", "Let me see.",
                         "<think>plan</think>ok"]), "tool_calls": calls})
            for c in calls[: rng.randint(1, len(calls))]:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": rng.choice(texts)})
        if rng.random() < 0.6:
            msgs.append({"role": "assistant", "content": rng.choice(texts)})
        if rng.random() < 0.5:
            msgs.append({"role": "user", "content": rng.choice(texts)})
    return msgs

def for_shoal(msgs):
    out = copy.deepcopy(msgs)
    for m in out:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    return out

cases, want = [], []
for name, style in rendered.items():
    with open(f"{tdir}/{name}.jinja", encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    for i in range(400):
        msgs, gen = conversation(), rng.random() < 0.7
        tools = [tool(k) for k in range(rng.randint(0, 3))]
        if not tools and not any(m["role"] == "tool" for m in msgs):
            tools = [tool(0)]  # something of the tools path in every case
        if style == "gpt-oss":
            for t in tools:  # the template fails on a tool without one
                t["function"].setdefault("description", "Does it.")
                if rng.random() < 0.5:
                    t["function"]["parameters"]["properties"].update(ts_params())
        kw, thinking = {}, -1
        if style in ("qwen3", "deepseek3.1", "glm4.5") and rng.random() < 0.5:
            thinking = rng.choice([0, 1])
            kw["thinking" if style == "deepseek3.1" else "enable_thinking"] = bool(thinking)
        ref, ref_tools = copy.deepcopy(msgs), tools or None
        if style == "mistral-nemo":
            for m in ref:
                for c in m.get("tool_calls", []):
                    c["id"] = mistral_id(c["id"])
                if "tool_call_id" in m:
                    m["tool_call_id"] = mistral_id(m["tool_call_id"])
        if style == "deepseek3.1" and tools:
            ref.insert(0, {"role": "system", "content": deepseek_tools(tools)})
        try:
            w = {"out": tmpl.render(messages=ref, tools=ref_tools, add_generation_prompt=gen,
                                    bos_token="<BOS>", eos_token="<EOS>", **kw)}
        except Raised as e:
            w = {"err": str(e)}
        c = {"style": style, "gen": gen, "thinking": thinking, "msgs": for_shoal(msgs),
             "name": name, "date": DATE}
        if tools:
            c["tools"] = tools
        cases.append(c)
        want.append(w)
for style in refused:
    for i in range(20):
        cases.append({"style": style, "gen": True, "msgs": for_shoal(conversation()),
                      "tools": [tool(0)], "name": style})
        want.append({"err": "refused"})

with open(f"{tmp}/cases.json", "w") as f:
    json.dump(cases, f)
subprocess.run([helper, f"{tmp}/cases.json", f"{tmp}/res.json"], check=True)
with open(f"{tmp}/res.json") as f:
    got = json.load(f)

bad = 0
per = {}
for c, w, g in zip(cases, want, got):
    k = per.setdefault(c["style"], [0, 0])
    k[0 if "out" in w else 1] += 1
    ok = g.get("out") == w["out"] if "out" in w else "err" in g and "out" not in g
    if "err" in w and c["style"] in refused:
        ok = ok and "no tool calls" in g["err"]
    if not ok:
        bad += 1
        if bad <= 3:
            print(f"MISMATCH {c['name']} gen={c['gen']} case={json.dumps(c)[:1500]}")
            print(f"  jinja: {w!r}\n  shoal: {g!r}")
n_calls = sum(len(m.get("tool_calls", [])) for c in cases for m in c["msgs"])
print(f"{len(cases)} conversations ({n_calls} calls), {bad} mismatches; rendered/refused per "
      "format: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in per.items()))
sys.exit(1 if bad or len(got) != len(cases) else 0)
PY
