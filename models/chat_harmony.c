/*
 * models/chat_harmony.c: gpt-oss's "harmony" chat format (models/chat.h,
 * SHOAL_CHAT_HARMONY): what the model's own template prints for system,
 * user and assistant messages, and for tools, calls and their results.
 *
 * Part: models/. Called by chat.c's renderer after its role checks, and
 * by chat_tools.c with a checked conversation with tools.
 *
 * The format: a system message the template writes itself (identity,
 * knowledge cutoff, the current date, the reasoning effort, the valid
 * channels, and with tools the channel their calls go to), a developer
 * message "# Instructions\n\nSYSTEM\n\n" when the conversation opens with
 * a non-empty system message, followed by the tools as a TypeScript
 * namespace "functions", then "<|start|>ROLE<|message|>CONTENT<|end|>" per
 * turn, an assistant's text on the final channel
 * ("<|start|>assistant<|channel|>final<|message|>"); the last message,
 * when it is the assistant's and no generation prompt follows, ends in
 * "<|return|>" (training's form). Reasoning of earlier turns (the analysis
 * channel) is never printed back, as the template drops it. The generation
 * prompt is "<|start|>assistant": the model writes the channel itself.
 *
 * An assistant message with calls prints its first call (the template's
 * one call per message) as "<|start|>assistant to=functions.NAME
 * <|channel|>commentary json<|message|>ARGS<|call|>", its text before as
 * an analysis message unless an assistant reply without calls follows
 * later; a tool message prints "<|start|>functions.NAME to=assistant
 * <|channel|>commentary<|message|>" + the content as a JSON string +
 * "<|end|>", NAME the last call's (a result with no call before it, or
 * after a reply, is refused as the template refuses it). The tools'
 * parameters are printed as the template's TypeScript types (ts_type:
 * its white space included); a tool without a description gets no comment
 * line, where the template fails.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/chat_impl.h"

/* The text a message may not carry: channel markup belongs in the
 * format, not in content (the template raises on it). */
static const char *const harmony_markup[] = {"<|channel|>analysis<|message|>",
                                             "<|channel|>final<|message|>"};

static bool harmony_date_ok(const char *d)
{
	/* YYYY-MM-DD */
	if (strlen(d) != 10 || d[4] != '-' || d[7] != '-')
		return false;
	for (int i = 0; i < 10; i++)
		if (i != 4 && i != 7 && (d[i] < '0' || d[i] > '9'))
			return false;
	return true;
}

/* ------------------------------------------------------------- the tools */

static bool truthy(const json_t *v)
{
	return v && !json_is_null(v) && !json_is_false(v) &&
	       !(json_is_string(v) && !json_string_length(v)) &&
	       !(json_is_array(v) && !json_array_size(v)) &&
	       !(json_is_object(v) && !json_object_size(v)) &&
	       !(json_is_integer(v) && !json_integer_value(v)) &&
	       !(json_is_real(v) && json_real_value(v) == 0.0);
}

static bool is_type(const json_t *spec, const char *t)
{
	const json_t *v = json_object_get(spec, "type");
	return json_is_string(v) && !strcmp(json_string_value(v), t);
}

/* A value as Jinja prints it: a string as it is, else Python's str() of
 * the simple values (a type list holds strings in practice). */
static void py_str(chat_out *b, const json_t *v)
{
	char s[32];
	if (json_is_string(v))
		chat__put(b, json_string_value(v), json_string_length(v));
	else if (json_is_null(v))
		chat__puts(b, "None");
	else if (json_is_boolean(v))
		chat__puts(b, json_is_true(v) ? "True" : "False");
	else if (json_is_integer(v))
		snprintf(s, sizeof s, "%" JSON_INTEGER_FORMAT, json_integer_value(v)),
		    chat__puts(b, s);
	else
		chat__puts(b, "?");
}

static void tojson(chat_out *b, const json_t *v)
{
	char *j = chat__tojson_value(v, 0);
	if (!j) {
		b->oom = true;
		return;
	}
	chat__puts(b, j);
	free(j);
}

/* Python's len() of a UTF-8 string: its code points. */
static size_t code_points(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

static bool required(const json_t *spec, const char *name)
{
	const json_t *r = json_object_get(spec, "required");
	for (size_t i = 0; i < json_array_size(r); i++) {
		const json_t *x = json_array_get(r, i);
		if (json_is_string(x) && !strcmp(json_string_value(x), name))
			return true;
	}
	return false;
}

/* The template's render_typescript_type of a parameter's schema. */
static void ts_type(chat_out *b, const json_t *spec, int depth)
{
	const json_t *type = json_object_get(spec, "type");
	if (depth > 32) {
		chat__puts(b, "any");
	} else if (is_type(spec, "array")) {
		const json_t *items = json_object_get(spec, "items");
		if (!truthy(items)) {
			chat__puts(b, "any[]");
		} else if (is_type(items, "string")) {
			chat__puts(b, "string[]");
		} else if (is_type(items, "number") || is_type(items, "integer")) {
			chat__puts(b, "number[]");
		} else if (is_type(items, "boolean")) {
			chat__puts(b, "boolean[]");
		} else {
			chat_out in = {0};
			ts_type(&in, items, depth + 1);
			b->oom |= in.oom;
			const char *t = in.p ? in.p : "";
			if (!strcmp(t, "object | object") || code_points(t, in.len) > 50) {
				chat__puts(b, "any[]");
			} else {
				chat__put(b, t, in.len);
				chat__puts(b, "[]");
			}
			free(in.p);
		}
		if (truthy(json_object_get(spec, "nullable")))
			chat__puts(b, " | null");
	} else if (json_is_array(type) && json_array_size(type)) {
		for (size_t i = 0; i < json_array_size(type); i++) {
			if (i)
				chat__puts(b, " | ");
			py_str(b, json_array_get(type, i));
		}
	} else if (truthy(json_object_get(spec, "oneOf"))) {
		/* the template's test for object variants never holds (a loop
		 * variable set inside the loop): every variant is printed */
		const json_t *all = json_object_get(spec, "oneOf");
		size_t n = json_array_size(all);
		for (size_t i = 0; i < n; i++) {
			const json_t *v = json_array_get(all, i);
			ts_type(b, v, depth + 1);
			const json_t *d = json_object_get(v, "description");
			if (truthy(d)) {
				chat__puts(b, "// ");
				py_str(b, d);
			}
			if (json_object_get(v, "default")) {
				chat__puts(b, "                    // default: ");
				tojson(b, json_object_get(v, "default"));
			}
			if (i + 1 < n)
				chat__puts(b, " | \n");
		}
	} else if (is_type(spec, "string")) {
		const json_t *e = json_object_get(spec, "enum");
		if (truthy(e)) {
			chat__puts(b, "\"");
			for (size_t i = 0; i < json_array_size(e); i++) {
				if (i)
					chat__puts(b, "\" | \"");
				py_str(b, json_array_get(e, i));
			}
			chat__puts(b, "\"");
		} else {
			chat__puts(b, "string");
			if (truthy(json_object_get(spec, "nullable")))
				chat__puts(b, " | null");
		}
	} else if (is_type(spec, "number") || is_type(spec, "integer")) {
		chat__puts(b, "number");
	} else if (is_type(spec, "boolean")) {
		chat__puts(b, "boolean");
	} else if (is_type(spec, "object")) {
		json_t *props = json_object_get(spec, "properties");
		if (!truthy(props)) {
			chat__puts(b, "object");
			return;
		}
		chat__puts(b, "{\n");
		const char *k;
		json_t *v;
		size_t i = 0, n = json_object_size(props);
		json_object_foreach(props, k, v)
		{
			chat__puts(b, k);
			if (!required(spec, k))
				chat__puts(b, "?");
			/* the template's line break and indent before the type */
			chat__puts(b, ": \n                ");
			ts_type(b, v, depth + 1);
			if (++i < n)
				chat__puts(b, ", ");
		}
		chat__puts(b, "}");
	} else {
		chat__puts(b, "any");
	}
}

/* The developer message's "# Tools" section: the functions namespace. */
static void tools_namespace(chat_out *b, const json_t *tools)
{
	chat__puts(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
	for (size_t i = 0; i < json_array_size(tools); i++) {
		const json_t *f = json_object_get(json_array_get(tools, i), "function");
		const json_t *d = json_object_get(f, "description");
		if (d) {
			chat__puts(b, "// ");
			py_str(b, d);
			chat__puts(b, "\n");
		}
		chat__puts(b, "type ");
		py_str(b, json_object_get(f, "name"));
		chat__puts(b, " = ");
		const json_t *par = json_object_get(f, "parameters");
		json_t *props = truthy(par) ? json_object_get(par, "properties") : NULL;
		if (!truthy(props)) {
			chat__puts(b, "() => any;\n\n");
			continue;
		}
		chat__puts(b, "(_: {\n");
		const char *k;
		json_t *v;
		json_object_foreach(props, k, v)
		{
			const json_t *pd = json_object_get(v, "description");
			if (truthy(pd)) {
				chat__puts(b, "// ");
				py_str(b, pd);
				chat__puts(b, "\n");
			}
			chat__puts(b, k);
			if (!required(par, k))
				chat__puts(b, "?");
			chat__puts(b, ": ");
			ts_type(b, v, 0);
			const json_t *def = json_object_get(v, "default");
			if (def && truthy(json_object_get(v, "enum"))) {
				chat__puts(b, ", // default: ");
				py_str(b, def);
			} else if (def && truthy(json_object_get(v, "oneOf"))) {
				chat__puts(b, "// default: ");
				py_str(b, def);
			} else if (def) {
				chat__puts(b, ", // default: ");
				tojson(b, def);
			}
			chat__puts(b, ",\n");
		}
		chat__puts(b, "}) => any;\n\n");
	}
	chat__puts(b, "} // namespace functions");
}

/* ------------------------------------------------------------ the format */

/* A conversation with its tools (NULL: none) and, per message, its first
 * call's arguments (args[first[i]]; NULL with no calls anywhere). */
typedef struct harmony_conv {
	const shoal_chat_msg *m;
	size_t n;
	const json_t *tools;
	char *const *args;
	const size_t *first;
} harmony_conv;

static shoal_err render(const harmony_conv *c, const shoal_chat_opts *o, chat_out *b, char *why,
                        size_t why_len)
{
	const shoal_chat_msg *m = c->m;
	size_t n = c->n;
	char today[16];
	const char *date = o->date;
	if (!date) {
		time_t t = time(NULL);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(today, sizeof today, "%Y-%m-%d", &tm);
		date = today;
	}
	if (!harmony_date_ok(date))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "chat date \"%.16s\": not YYYY-MM-DD", date);
	const char *effort = o->reasoning ? o->reasoning : "medium";
	if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high"))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "reasoning effort \"%.16s\": low, medium or high", effort);
	const char *last_call = NULL; /* the name a tool message answers */
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && !strcmp(m[i].role, "system"))
			return shoal_why(
			    why, why_len, SHOAL_ERR_UNSUPPORTED,
			    "message %zu: gpt-oss's format takes a system message only "
			    "as the first message",
			    i);
		for (size_t k = 0; k < sizeof harmony_markup / sizeof *harmony_markup; k++)
			if (!strcmp(m[i].role, "assistant") &&
			    strstr(m[i].content, harmony_markup[k]))
				return shoal_why(
				    why, why_len, SHOAL_ERR_INVAL,
				    "message %zu: an assistant text with channel markup "
				    "(%s): give the reply's text alone",
				    i, harmony_markup[k]);
		if (!strcmp(m[i].role, "assistant"))
			last_call = m[i].n_calls ? m[i].calls[0].name : NULL;
		else if (!strcmp(m[i].role, "tool") && !last_call)
			return shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                 "message %zu: a tool result with no call before it "
			                 "(gpt-oss names the function a result answers)",
			                 i);
	}
	bool tools = c->tools && json_array_size(c->tools);
	chat__puts(b, "<|start|>system<|message|>"
	              "You are ChatGPT, a large language model trained by OpenAI.\n"
	              "Knowledge cutoff: 2024-06\n"
	              "Current date: ");
	chat__puts(b, date);
	chat__puts(b, "\n\nReasoning: ");
	chat__puts(b, effort);
	chat__puts(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be "
	              "included for every message.");
	if (tools)
		chat__puts(b, "\nCalls to these tools must go to the commentary channel: "
		              "'functions'.");
	chat__puts(b, "<|end|>");
	size_t i = 0;
	const char *dev = "";
	if (!strcmp(m[0].role, "system")) {
		dev = m[0].content;
		i = 1;
	}
	if (dev[0] || tools) {
		chat__puts(b, "<|start|>developer<|message|>");
		if (dev[0]) {
			chat__puts(b, "# Instructions\n\n");
			chat__puts(b, dev);
			chat__puts(b, "\n\n");
		}
		if (tools)
			tools_namespace(b, c->tools);
		chat__puts(b, "<|end|>");
	}
	last_call = NULL;
	for (; i < n; i++) {
		if (!strcmp(m[i].role, "user")) {
			chat__puts(b, "<|start|>user<|message|>");
			chat__puts(b, m[i].content);
			chat__puts(b, "<|end|>");
		} else if (!strcmp(m[i].role, "tool")) {
			chat__puts(b, "<|start|>functions.");
			chat__puts(b, last_call);
			chat__puts(b, " to=assistant<|channel|>commentary<|message|>");
			chat__json_string(b, m[i].content, strlen(m[i].content));
			chat__puts(b, "<|end|>");
		} else if (m[i].n_calls) {
			bool reply_later = false;
			for (size_t j = i + 1; j < n && !reply_later; j++)
				reply_later = !strcmp(m[j].role, "assistant") && !m[j].n_calls;
			if (m[i].content[0] && !reply_later) {
				chat__puts(b, "<|start|>assistant<|channel|>analysis<|message|>");
				chat__puts(b, m[i].content);
				chat__puts(b, "<|end|>");
			}
			chat__puts(b, "<|start|>assistant to=functions.");
			chat__puts(b, m[i].calls[0].name);
			chat__puts(b, "<|channel|>commentary json<|message|>");
			chat__puts(b, c->args[c->first[i]]);
			chat__puts(b, "<|call|>");
			last_call = m[i].calls[0].name;
		} else {
			chat__puts(b, "<|start|>assistant<|channel|>final<|message|>");
			chat__puts(b, m[i].content);
			bool last = i == n - 1 && !o->add_generation_prompt;
			chat__puts(b, last ? "<|return|>" : "<|end|>");
			if (!last)
				last_call = NULL;
		}
	}
	if (o->add_generation_prompt)
		chat__puts(b, "<|start|>assistant");
	return SHOAL_OK;
}

shoal_err chat__render_harmony(const shoal_chat_msg *m, size_t n, const shoal_chat_opts *o,
                               chat_out *b, char *why, size_t why_len)
{
	harmony_conv c = {.m = m, .n = n};
	return render(&c, o, b, why, why_len);
}

shoal_err chat__tools_harmony(const chat_tc *c, chat_out *b, const shoal_chat_opts *o)
{
	harmony_conv h = {
	    .m = c->m, .n = c->n, .tools = c->tools, .args = c->args, .first = c->first};
	return render(&h, o, b, c->why, c->why_len);
}
