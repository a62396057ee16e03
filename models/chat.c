/*
 * models/chat.c: chat formats of the popular model families (see chat.h).
 *
 * Part: models/. Detection looks for markers that only one family's
 * template contains; each renderer mirrors, branch by branch, what its
 * family's template prints for system/user/assistant messages.
 *
 * Divisions: the output buffer; detection; checking a conversation; the
 * renderers, one per family; the entry point.
 */
#include "models/chat.h"
#include "models/chat_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- output buffer */

/* chat_out and its appends: models/chat_json.c (chat_impl.h). */

/* A slice of a message's text. */
typedef struct chat_str {
	const char *p;
	size_t n;
} chat_str;

static chat_str str_of(const char *s)
{
	chat_str r = {s, strlen(s)};
	return r;
}

static void buf_str(chat_out *b, chat_str s)
{
	chat__put(b, s.p, s.n);
}

static bool is_ascii_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's trim, for ASCII whitespace. */
static chat_str str_trim(chat_str s)
{
	while (s.n && is_ascii_space(s.p[0])) {
		s.p++;
		s.n--;
	}
	while (s.n && is_ascii_space(s.p[s.n - 1]))
		s.n--;
	return s;
}

/* Python's lstrip('\n') and rstrip('\n'). */
static chat_str str_lstrip_nl(chat_str s)
{
	while (s.n && s.p[0] == '\n') {
		s.p++;
		s.n--;
	}
	return s;
}

static chat_str str_rstrip_nl(chat_str s)
{
	while (s.n && s.p[s.n - 1] == '\n')
		s.n--;
	return s;
}

/* First / last occurrence of needle in s; NULL if none. */
static const char *str_find(chat_str s, const char *needle)
{
	return memmem(s.p, s.n, needle, strlen(needle));
}

static const char *str_find_last(chat_str s, const char *needle)
{
	size_t k = strlen(needle);
	if (k > s.n)
		return NULL;
	for (size_t i = s.n - k + 1; i-- > 0;)
		if (!memcmp(s.p + i, needle, k))
			return s.p + i;
	return NULL;
}

static bool str_starts(chat_str s, const char *pre)
{
	size_t k = strlen(pre);
	return s.n >= k && !memcmp(s.p, pre, k);
}

static bool str_ends(chat_str s, const char *suf)
{
	size_t k = strlen(suf);
	return s.n >= k && !memcmp(s.p + s.n - k, suf, k);
}

/* ---------------------------------------------------------- detection */

static const char *const chat_style_names[SHOAL_CHAT__COUNT] = {
    [SHOAL_CHAT_PLAIN] = "plain",          [SHOAL_CHAT_CHATML] = "chatml",
    [SHOAL_CHAT_QWEN25] = "qwen2.5",       [SHOAL_CHAT_QWEN3] = "qwen3",
    [SHOAL_CHAT_LLAMA3] = "llama3",        [SHOAL_CHAT_LLAMA31] = "llama3.1",
    [SHOAL_CHAT_MISTRAL] = "mistral-nemo", [SHOAL_CHAT_DEEPSEEK] = "deepseek3.1",
    [SHOAL_CHAT_GEMMA] = "gemma",          [SHOAL_CHAT_PHI3] = "phi3.5",
    [SHOAL_CHAT_GLM] = "glm4.5",           [SHOAL_CHAT_HARMONY] = "gpt-oss",
};

const char *shoal_chat_style_name(shoal_chat_style s)
{
	if ((unsigned)s >= SHOAL_CHAT__COUNT)
		return "unknown";
	return chat_style_names[s];
}

shoal_err shoal_chat_style_from_name(const char *name, shoal_chat_style *out)
{
	if (!name || !out)
		return SHOAL_ERR_INVAL;
	for (int i = 0; i < SHOAL_CHAT__COUNT; i++) {
		if (!strcmp(name, chat_style_names[i])) {
			*out = (shoal_chat_style)i;
			return SHOAL_OK;
		}
	}
	return SHOAL_ERR_NOTFOUND;
}

/* Marker sets. `all` must all appear, `none` must not; the first rule that
 * matches wins, so the more specific families come first. The escapes in
 * the markers are the template's own source text (a backslash and n). */
typedef struct chat_rule {
	shoal_chat_style style;
	const char *all[5];
	const char *none[4];
} chat_rule;

static const chat_rule chat_rules[] = {
    /* gpt-oss's harmony: channels and its own system message. */
    {SHOAL_CHAT_HARMONY,
     {"<|start|>", "<|channel|>", "<|message|>", "# Valid channels: analysis, commentary, final"},
     {0}},
    /* DeepSeek V3.1: full-width bars; V3 and R1 lack the empty think. */
    {SHOAL_CHAT_DEEPSEEK, {DS_USER, DS_ASSISTANT, "<think></think>"}, {0}},
    /* Qwen3: ChatML with think handling. */
    {SHOAL_CHAT_QWEN3, {"<|im_start|>", "<|im_end|>", "<think>", "reasoning_content"}, {0}},
    /* Qwen2.5: ChatML with its default system prompt. */
    {SHOAL_CHAT_QWEN25,
     {"<|im_start|>", "<|im_end|>", "You are Qwen, created by Alibaba Cloud."},
     {"<think>"}},
    /* Plain ChatML: no default system text of any kind (Qwen2 has "You
     * are a helpful assistant."), no Phi-4 separator, no thinking. */
    {SHOAL_CHAT_CHATML,
     {"<|im_start|>", "<|im_end|>", "<|im_start|>assistant\\n"},
     {"You are", "<|im_sep|>", "<think>"}},
    {SHOAL_CHAT_LLAMA31,
     {"<|start_header_id|>", "<|eot_id|>", "Cutting Knowledge Date: December 2023", "Today Date: "},
     {0}},
    /* Llama 3.0: the header tokens without any system preamble. */
    {SHOAL_CHAT_LLAMA3,
     {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
     {"Cutting Knowledge", "Today Date", "Environment:"}},
    /* Gemma 2 (Gemma 3 handles system and lists of parts itself). */
    {SHOAL_CHAT_GEMMA,
     {"<start_of_turn>", "<end_of_turn>", "'model'", "System role not supported"},
     {0}},
    /* GLM-4.5 and 4.6: the [gMASK]<sop> prefix and observation turns. */
    {SHOAL_CHAT_GLM, {"[gMASK]<sop>", "<|observation|>", "<|assistant|>", "<arg_key>"}, {0}},
    {SHOAL_CHAT_PHI3, {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"}, {0}},
    /* Mistral Nemo: no space after [INST] (v0.3 has one), system in the
     * last user turn, no [SYSTEM_PROMPT] (Small 3). */
    {SHOAL_CHAT_MISTRAL,
     {"[INST]", "[/INST]", "\"[INST]\" + system_message", "loop.last"},
     {"[SYSTEM_PROMPT]", "[INST] "}},
};

static uint64_t fnv1a64(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* How much of an unknown template the reason quotes. */
#define CHAT_QUOTE_LEN 60

shoal_err shoal_chat_detect(const char *tmpl, size_t len, shoal_chat_style *out, char *why,
                            size_t why_len)
{
	if (!out)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "chat detect: no output");
	*out = SHOAL_CHAT_PLAIN;
	if (!tmpl || len == 0)
		return SHOAL_OK;
	for (size_t r = 0; r < sizeof chat_rules / sizeof chat_rules[0]; r++) {
		const chat_rule *rule = &chat_rules[r];
		bool ok = true;
		for (size_t i = 0; ok && i < 5 && rule->all[i]; i++)
			ok = memmem(tmpl, len, rule->all[i], strlen(rule->all[i])) != NULL;
		for (size_t i = 0; ok && i < 4 && rule->none[i]; i++)
			ok = memmem(tmpl, len, rule->none[i], strlen(rule->none[i])) == NULL;
		if (ok) {
			*out = rule->style;
			return SHOAL_OK;
		}
	}
	/* Quote the start, printable ASCII only (the reason is one line). */
	char quote[CHAT_QUOTE_LEN + 1];
	size_t q = 0;
	for (size_t i = 0; i < len && q < CHAT_QUOTE_LEN; i++) {
		unsigned char c = (unsigned char)tmpl[i];
		quote[q++] = (c >= 0x20 && c < 0x7f) ? (char)c : ' ';
	}
	quote[q] = '\0';
	return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
	                 "unknown chat template (%zu bytes, fnv1a64 %016llx): \"%s%s\"", len,
	                 (unsigned long long)fnv1a64(tmpl, len), quote, len > q ? "..." : "");
}

/* ---------------------------------------------------------- conversation */

typedef enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } chat_role;

static const char *const role_names[] = {"system", "user", "assistant"};

/* A checked conversation: roles parsed, contents measured. */
typedef struct chat_conv {
	const shoal_chat_msg *m;
	size_t n;
	chat_role *role; /* (n) */
	char *why;
	size_t why_len;
} chat_conv;

static chat_str content(const chat_conv *c, size_t i)
{
	return str_of(c->m[i].content);
}

/* The alternation rule of Mistral and Gemma: from `from` on, user at even
 * offsets and assistant at odd ones. */
static shoal_err check_alternation(const chat_conv *c, size_t from, const char *family)
{
	for (size_t i = from; i < c->n; i++) {
		chat_role want = (i - from) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
		if (c->role[i] != want)
			return shoal_why(
			    c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			    "%s: message %zu is \"%s\" where \"%s\" is needed: after "
			    "an optional leading system message the roles must alternate "
			    "user/assistant starting with user",
			    family, i, role_names[c->role[i]], role_names[want]);
	}
	return SHOAL_OK;
}

/* ---------------------------------------------------------- renderers */

static shoal_err render_plain(const chat_conv *c, chat_out *b, bool gen)
{
	for (size_t i = 0; i < c->n; i++) {
		switch (c->role[i]) {
		case ROLE_SYSTEM:
			buf_str(b, content(c, i));
			chat__puts(b, "\n\n");
			break;
		case ROLE_USER:
			chat__puts(b, "User: ");
			buf_str(b, content(c, i));
			chat__puts(b, "\n");
			break;
		case ROLE_ASSISTANT:
			chat__puts(b, "Assistant: ");
			buf_str(b, content(c, i));
			chat__puts(b, "\n");
			break;
		}
	}
	if (gen)
		chat__puts(b, "Assistant:");
	return SHOAL_OK;
}

static void chatml_turn(chat_out *b, const char *role, chat_str text)
{
	chat__puts(b, "<|im_start|>");
	chat__puts(b, role);
	chat__puts(b, "\n");
	buf_str(b, text);
	chat__puts(b, "<|im_end|>\n");
}

/* CHATML and QWEN25 (which adds its default system turn). */
static shoal_err render_chatml(const chat_conv *c, chat_out *b, bool gen, bool qwen_default)
{
	if (qwen_default && c->role[0] != ROLE_SYSTEM)
		chatml_turn(b, "system",
		            str_of("You are Qwen, created by Alibaba Cloud. You are a helpful "
		                   "assistant."));
	for (size_t i = 0; i < c->n; i++)
		chatml_turn(b, role_names[c->role[i]], content(c, i));
	if (gen)
		chat__puts(b, "<|im_start|>assistant\n");
	return SHOAL_OK;
}

static shoal_err render_qwen3(const chat_conv *c, chat_out *b, bool gen, bool thinking)
{
	/* The last "real" user query: user turns that only wrap a tool
	 * response do not count. With none, the last index (no thinking is
	 * shown for any turn). */
	size_t last_query = c->n - 1;
	for (size_t i = c->n; i-- > 0;) {
		chat_str t = content(c, i);
		if (c->role[i] == ROLE_USER &&
		    !(str_starts(t, "<tool_response>") && str_ends(t, "</tool_response>"))) {
			last_query = i;
			break;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		if (c->role[i] != ROLE_ASSISTANT) {
			chatml_turn(b, role_names[c->role[i]], content(c, i));
			continue;
		}
		chat_str text = content(c, i), reason = {"", 0};
		const char *end = str_find(text, "</think>");
		if (end) {
			/* content: after the last </think>, leading newlines off;
			 * reasoning: before the first </think>, after the last
			 * <think> there, newlines off both ends. */
			const char *last = str_find_last(text, "</think>");
			const char *tail = last + sizeof "</think>" - 1;
			chat_str after = {tail, (size_t)(text.p + text.n - tail)};
			chat_str before = {text.p, (size_t)(end - text.p)};
			before = str_rstrip_nl(before);
			const char *open = str_find_last(before, "<think>");
			if (open) {
				const char *from = open + sizeof "<think>" - 1;
				before.n -= (size_t)(from - before.p);
				before.p = from;
			}
			reason = str_lstrip_nl(before);
			text = str_lstrip_nl(after);
		}
		chat__puts(b, "<|im_start|>assistant\n");
		if (i > last_query && (i == c->n - 1 || reason.n > 0)) {
			chat__puts(b, "<think>\n");
			buf_str(b, str_rstrip_nl(str_lstrip_nl(reason)));
			chat__puts(b, "\n</think>\n\n");
			buf_str(b, str_lstrip_nl(text));
		} else {
			buf_str(b, text);
		}
		chat__puts(b, "<|im_end|>\n");
	}
	if (gen) {
		chat__puts(b, "<|im_start|>assistant\n");
		if (!thinking)
			chat__puts(b, "<think>\n\n</think>\n\n");
	}
	return SHOAL_OK;
}

static void llama3_turn(chat_out *b, const char *role, chat_str text)
{
	chat__puts(b, "<|start_header_id|>");
	chat__puts(b, role);
	chat__puts(b, "<|end_header_id|>\n\n");
	buf_str(b, str_trim(text));
	chat__puts(b, "<|eot_id|>");
}

static shoal_err render_llama3(const chat_conv *c, chat_out *b, bool gen, const char *bos,
                               bool preamble)
{
	size_t i = 0;
	chat__puts(b, bos);
	if (preamble) {
		chat__puts(b, "<|start_header_id|>system<|end_header_id|>\n\n"
		              "Cutting Knowledge Date: December 2023\n"
		              "Today Date: 26 Jul 2024\n\n");
		if (c->role[0] == ROLE_SYSTEM)
			buf_str(b, str_trim(content(c, i++)));
		chat__puts(b, "<|eot_id|>");
	}
	for (; i < c->n; i++)
		llama3_turn(b, role_names[c->role[i]], content(c, i));
	if (gen)
		chat__puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return SHOAL_OK;
}

static shoal_err render_mistral(const chat_conv *c, chat_out *b, const char *bos, const char *eos)
{
	size_t from = c->role[0] == ROLE_SYSTEM ? 1 : 0;
	shoal_err e = check_alternation(c, from, "mistral-nemo");
	if (e)
		return e;
	chat__puts(b, bos);
	for (size_t i = from; i < c->n; i++) {
		if (c->role[i] == ROLE_USER) {
			chat__puts(b, "[INST]");
			if (i == c->n - 1 && from == 1) {
				buf_str(b, content(c, 0));
				chat__puts(b, "\n\n");
			}
			buf_str(b, content(c, i));
			chat__puts(b, "[/INST]");
		} else {
			buf_str(b, content(c, i));
			chat__puts(b, eos);
		}
	}
	return SHOAL_OK;
}

static shoal_err render_deepseek(const chat_conv *c, chat_out *b, bool gen, const char *bos,
                                 bool thinking)
{
	chat__puts(b, bos);
	bool first_sys = true;
	for (size_t i = 0; i < c->n; i++) {
		if (c->role[i] != ROLE_SYSTEM)
			continue;
		if (!first_sys)
			chat__puts(b, "\n\n");
		buf_str(b, content(c, i));
		first_sys = false;
	}
	bool last_user = false;
	for (size_t i = 0; i < c->n; i++) {
		if (c->role[i] == ROLE_USER) {
			last_user = true;
			chat__puts(b, DS_USER);
			buf_str(b, content(c, i));
		} else if (c->role[i] == ROLE_ASSISTANT) {
			if (last_user)
				chat__puts(b, DS_ASSISTANT "<think></think>");
			last_user = false;
			chat_str text = content(c, i);
			const char *end = str_find(text, "</think>");
			if (end) {
				const char *tail = end + sizeof "</think>" - 1;
				text.n -= (size_t)(tail - text.p);
				text.p = tail;
			}
			buf_str(b, text);
			chat__puts(b, DS_EOS);
		}
	}
	if (gen && last_user)
		chat__puts(b, thinking ? DS_ASSISTANT "<think>" : DS_ASSISTANT "<think></think>");
	return SHOAL_OK;
}

static shoal_err render_gemma(const chat_conv *c, chat_out *b, bool gen, const char *bos)
{
	size_t from = c->role[0] == ROLE_SYSTEM ? 1 : 0;
	for (size_t i = from; i < c->n; i++)
		if (c->role[i] == ROLE_SYSTEM)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "gemma: message %zu is a system message: Gemma has no "
			                 "system role (only a leading one is folded into the first "
			                 "user turn)",
			                 i);
	if (from == c->n)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
		                 "gemma: a system message alone has no user turn to go into");
	shoal_err e = check_alternation(c, from, "gemma");
	if (e)
		return e;
	chat__puts(b, bos);
	for (size_t i = from; i < c->n; i++) {
		chat__puts(b, c->role[i] == ROLE_USER ? "<start_of_turn>user\n"
		                                      : "<start_of_turn>model\n");
		if (from == 1 && i == 1) {
			buf_str(b, content(c, 0));
			chat__puts(b, "\n\n");
		}
		buf_str(b, str_trim(content(c, i)));
		chat__puts(b, "<end_of_turn>\n");
	}
	if (gen)
		chat__puts(b, "<start_of_turn>model\n");
	return SHOAL_OK;
}

static shoal_err render_phi3(const chat_conv *c, chat_out *b, bool gen, const char *eos)
{
	static const char *const tags[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
	for (size_t i = 0; i < c->n; i++) {
		chat_str text = content(c, i);
		if (c->role[i] == ROLE_SYSTEM && text.n == 0)
			continue;
		chat__puts(b, tags[c->role[i]]);
		buf_str(b, text);
		chat__puts(b, "<|end|>\n");
	}
	chat__puts(b, gen ? "<|assistant|>\n" : eos);
	return SHOAL_OK;
}

/* ---------------------------------------------------------- entry point */

/* Most messages a conversation may have: far beyond any context window
 * (a message is at least a few tokens, contexts are <= 1M tokens), and
 * keeps n * sizeof(chat_role) far from overflow. */
#define CHAT_MAX_MESSAGES (1u << 20)

shoal_err shoal_chat_render(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, const char *bos, const char *eos,
                            char **out, char *why, size_t why_len)
{
	shoal_chat_opts o = {
	    .add_generation_prompt = add_generation_prompt,
	    .bos = bos,
	    .eos = eos,
	    .thinking = -1,
	};
	return shoal_chat_render_opts(s, msgs, n, &o, out, why, why_len);
}

shoal_err shoal_chat_render_opts(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                                 const shoal_chat_opts *o, char **out, char *why, size_t why_len)
{
	if (!out)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "chat render: no output");
	*out = NULL;
	if ((unsigned)s >= SHOAL_CHAT__COUNT)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "chat render: style %d unknown",
		                 (int)s);
	if (n == 0 || !msgs)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "empty conversation: at least one message is needed");
	if (n > CHAT_MAX_MESSAGES)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "conversation of %zu messages: at most %u", n, CHAT_MAX_MESSAGES);

	static const shoal_chat_opts no_opts = {.thinking = -1};
	if (!o)
		o = &no_opts;
	/* models/chat_tools.c: conversations with tools, and GLM's always */
	if (s == SHOAL_CHAT_GLM || chat__has_tools(msgs, n, o)) {
		if (shoal_chat_tool_syntax(s) == SHOAL_CHAT_TOOLS_NONE)
			return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
			                 "the model's chat format (%s) defines no tool calls: "
			                 "tools, tool calls and tool messages cannot be "
			                 "rendered for it",
			                 shoal_chat_style_name(s));
		return chat__render_tools(s, msgs, n, o, out, why, why_len);
	}
	chat_conv c = {.m = msgs, .n = n, .why = why, .why_len = why_len};
	chat_out b = {0};
	shoal_err e = SHOAL_OK;
	c.role = malloc(n * sizeof *c.role);
	if (!c.role) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "chat render: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		if (!msgs[i].role || !msgs[i].content) {
			e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "message %zu has no %s", i,
			              msgs[i].role ? "content" : "role");
			goto fail;
		}
		size_t r = 0;
		while (r < 3 && strcmp(msgs[i].role, role_names[r]))
			r++;
		if (r == 3) {
			char quote[33];
			snprintf(quote, sizeof quote, "%s", msgs[i].role);
			for (char *q = quote; *q; q++)
				if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
					*q = '?';
			e = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
			              "message %zu: role \"%s\" is not supported (system, user, "
			              "assistant)",
			              i, quote);
			goto fail;
		}
		c.role[i] = (chat_role)r;
	}
	const char *bos = o->bos ? o->bos : "", *eos = o->eos ? o->eos : "";
	bool g = o->add_generation_prompt;
	switch (s) {
	case SHOAL_CHAT_PLAIN:
		e = render_plain(&c, &b, g);
		break;
	case SHOAL_CHAT_CHATML:
	case SHOAL_CHAT_QWEN25:
		e = render_chatml(&c, &b, g, s == SHOAL_CHAT_QWEN25);
		break;
	case SHOAL_CHAT_QWEN3:
		e = render_qwen3(&c, &b, g, o->thinking != 0);
		break;
	case SHOAL_CHAT_LLAMA3:
	case SHOAL_CHAT_LLAMA31:
		e = render_llama3(&c, &b, g, bos, s == SHOAL_CHAT_LLAMA31);
		break;
	case SHOAL_CHAT_MISTRAL:
		e = render_mistral(&c, &b, bos, eos);
		break;
	case SHOAL_CHAT_DEEPSEEK:
		e = render_deepseek(&c, &b, g, bos, o->thinking == 1);
		break;
	case SHOAL_CHAT_GEMMA:
		e = render_gemma(&c, &b, g, bos);
		break;
	case SHOAL_CHAT_PHI3:
		e = render_phi3(&c, &b, g, eos);
		break;
	case SHOAL_CHAT_HARMONY:
		e = chat__render_harmony(msgs, n, o, &b, why, why_len);
		break;
	case SHOAL_CHAT_GLM: /* chat_tools_fmt.c */
	case SHOAL_CHAT__COUNT:
		break;
	}
	if (e)
		goto fail;
	if (!b.oom && !b.p) { /* nothing printed: still a string */
		b.p = calloc(1, 1);
		b.oom = !b.p;
	}
	if (b.oom) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "chat render: out of memory");
		goto fail;
	}
	free(c.role);
	*out = b.p;
	return SHOAL_OK;
fail:
	free(c.role);
	free(b.p);
	return e;
}
