/*
 * runtime/api/api_req.c: a completion request's JSON body into a checked
 * shoal_api_req (runtime/api/api_req.h), with OpenAI's defaults and
 * ranges; any bytes give a request or a clear error.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_req.h"

#include "models/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* A JSON number field: absent (*v unchanged), or a number in [lo, hi]. */
static const char *num_field(json_t *o, const char *k, double lo, double hi, double *v)
{
	json_t *x = json_object_get(o, k);
	if (!x || json_is_null(x))
		return NULL;
	if (!json_is_number(x) || json_number_value(x) < lo || json_number_value(x) > hi)
		return k;
	*v = json_number_value(x);
	return NULL;
}

static const char *bool_field(json_t *o, const char *k, bool *v)
{
	json_t *x = json_object_get(o, k);
	if (!x || json_is_null(x))
		return NULL;
	if (!json_is_boolean(x))
		return k;
	*v = json_is_true(x);
	return NULL;
}

/* A message's content: a string, or an array of {"type": "text", "text"}
 * parts, joined. Returns a malloc'd string or NULL (bad shape). */
static char *content_text(json_t *c)
{
	if (json_is_string(c))
		return strdup(json_string_value(c));
	if (!json_is_array(c))
		return NULL;
	size_t n = 0, i;
	json_t *p;
	json_array_foreach(c, i, p)
	{
		json_t *t = json_object_get(p, "text");
		if (!json_is_string(t) || !json_is_string(json_object_get(p, "type")) ||
		    strcmp(json_string_value(json_object_get(p, "type")), "text"))
			return NULL;
		n += json_string_length(t);
	}
	char *s = malloc(n + 1), *w = s;
	if (!s)
		return NULL;
	json_array_foreach(c, i, p)
	{
		json_t *t = json_object_get(p, "text");
		memcpy(w, json_string_value(t), json_string_length(t));
		w += json_string_length(t);
	}
	*w = '\0';
	return s;
}

/* A function name as OpenAI allows: 1-64 of [A-Za-z0-9_-]. */
static bool fn_name_ok(json_t *n)
{
	if (!json_is_string(n) || !json_string_length(n) ||
	    json_string_length(n) > SHOAL_API_FN_NAME_LEN)
		return false;
	for (const char *c = json_string_value(n); *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
			return false;
	return true;
}

/* tools, tool_choice, parallel_tool_calls into q. */
static bool parse_tools(json_t *o, shoal_api_req *q, char *bad, size_t bad_len, const char **param)
{
	json_t *t = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice");
	q->parallel = true;
	if (bool_field(o, "parallel_tool_calls", &q->parallel)) {
		snprintf(bad, bad_len, "'parallel_tool_calls' must be a boolean");
		*param = "parallel_tool_calls";
		return false;
	}
	size_t n = 0, i;
	json_t *x;
	if (t && !json_is_null(t)) {
		if (!json_is_array(t) || json_array_size(t) > SHOAL_API_MAX_TOOLS) {
			snprintf(bad, bad_len, "'tools' must be an array of at most %d tools",
			         SHOAL_API_MAX_TOOLS);
			*param = "tools";
			return false;
		}
		json_array_foreach(t, i, x)
		{
			json_t *f = json_object_get(x, "function"),
			       *ty = json_object_get(x, "type");
			json_t *pa = json_object_get(f, "parameters");
			if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") ||
			    !json_is_object(f) || !fn_name_ok(json_object_get(f, "name")) ||
			    (pa && !json_is_object(pa))) {
				snprintf(
				    bad, bad_len,
				    "tools[%zu] must be {\"type\": \"function\", \"function\": "
				    "{\"name\": 1-64 of [A-Za-z0-9_-], \"parameters\": an object}}",
				    i);
				*param = "tools";
				return false;
			}
		}
		n = json_array_size(t);
		if (n && !(q->tools = json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
			snprintf(bad, bad_len, "out of memory");
			return false;
		}
	}
	q->tool_choice = n ? SHOAL_API_TOOL_AUTO : SHOAL_API_TOOL_NONE;
	if (!tc || json_is_null(tc))
		return true;
	const char *s = json_string_value(tc);
	json_t *fn = json_object_get(json_object_get(tc, "function"), "name");
	if (s && !strcmp(s, "none")) {
		q->tool_choice = SHOAL_API_TOOL_NONE;
	} else if (s && (!strcmp(s, "auto") || !strcmp(s, "required")) && n) {
		q->tool_choice = !strcmp(s, "auto") ? SHOAL_API_TOOL_AUTO : SHOAL_API_TOOL_REQUIRED;
	} else if (json_is_object(tc) && n && fn_name_ok(fn)) {
		q->tool_choice = SHOAL_API_TOOL_NAMED;
		snprintf(q->tool_name, sizeof q->tool_name, "%s", json_string_value(fn));
		bool found = false;
		json_array_foreach(t, i, x)
		{
			found |= !strcmp(json_string_value(json_object_get(
			                     json_object_get(x, "function"), "name")),
			                 q->tool_name);
		}
		if (!found) {
			snprintf(bad, bad_len,
			         "tool_choice names the function '%s', not in 'tools'",
			         q->tool_name);
			*param = "tool_choice";
			return false;
		}
	} else {
		snprintf(
		    bad, bad_len,
		    "'tool_choice' must be \"none\", or with 'tools' \"auto\", \"required\" or "
		    "{\"type\": \"function\", \"function\": {\"name\": NAME}}");
		*param = "tool_choice";
		return false;
	}
	return true;
}

/* An assistant message's tool_calls into q->calls[*k..]: false with the
 * message in bad[]. */
static bool parse_calls(json_t *m, size_t i, shoal_api_req *q, size_t *k, char *bad, size_t bad_len)
{
	json_t *tcs = json_object_get(m, "tool_calls"), *x;
	size_t j;
	json_array_foreach(tcs, j, x)
	{
		json_t *f = json_object_get(x, "function"), *id = json_object_get(x, "id");
		json_t *args = json_object_get(f, "arguments"), *name = json_object_get(f, "name");
		if (!json_is_object(f) || !fn_name_ok(name) || (args && !json_is_string(args)) ||
		    (id && !json_is_string(id))) {
			snprintf(bad, bad_len,
			         "messages[%zu].tool_calls[%zu] must be {\"id\": string, \"type\": "
			         "\"function\", \"function\": {\"name\": NAME, \"arguments\": "
			         "string}}",
			         i, j);
			return false;
		}
		q->calls[(*k)++] = (shoal_chat_call){json_string_value(id), json_string_value(name),
		                                     args ? json_string_value(args) : "{}"};
	}
	return true;
}

/* response_format into q->g's grammar: "text" (none), "json_object" (any
 * object), "json_schema" ({"name", "schema", "strict"}: the schema's
 * grammar; strict or not, the reply follows it, since a grammar that
 * only mostly holds would be worth little). False with the message. */
static bool parse_format(json_t *o, shoal_api_req *q, char *bad, size_t bad_len, const char **param)
{
	json_t *rf = json_object_get(o, "response_format");
	if (!rf || json_is_null(rf))
		return true;
	*param = "response_format";
	const char *ty = json_string_value(json_object_get(rf, "type"));
	if (!json_is_object(rf) || !ty ||
	    (strcmp(ty, "text") && strcmp(ty, "json_object") && strcmp(ty, "json_schema"))) {
		snprintf(bad, bad_len,
		         "'response_format' must be {\"type\": \"text\"}, {\"type\": "
		         "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": "
		         "{\"name\": NAME, \"schema\": SCHEMA, \"strict\": BOOL}}");
		return false;
	}
	char why[SHOAL_WHY_LEN] = "";
	shoal_grammar_prog g = {0};
	shoal_err e = SHOAL_OK;
	if (!strcmp(ty, "text")) {
		*param = NULL;
		return true;
	} else if (!strcmp(ty, "json_object")) {
		e = shoal_grammar_json_object(&g, why, sizeof why);
	} else {
		json_t *js = json_object_get(rf, "json_schema");
		json_t *name = json_object_get(js, "name"), *sch = json_object_get(js, "schema");
		json_t *strict = json_object_get(js, "strict");
		if (!json_is_object(js) || (name && !json_is_string(name)) ||
		    (sch && !json_is_object(sch)) ||
		    (strict && !json_is_boolean(strict) && !json_is_null(strict))) {
			snprintf(bad, bad_len,
			         "'response_format.json_schema' must be {\"name\": string, "
			         "\"schema\": object, \"strict\": boolean}");
			return false;
		}
		if (!sch) {
			e = shoal_grammar_json_object(&g, why, sizeof why);
		} else {
			char *text = json_dumps(sch, JSON_COMPACT | JSON_PRESERVE_ORDER);
			e = text ? shoal_grammar_schema(text, strlen(text), &g, why, sizeof why)
			         : SHOAL_ERR_NOMEM;
			free(text);
		}
	}
	if (e) {
		snprintf(bad, bad_len, "response_format: %s", why[0] ? why : shoal_strerror(e));
		return false;
	}
	q->g.grammar = g.w;
	q->g.n_grammar = g.n;
	*param = NULL;
	return true;
}

/* "speculate" (a shoal extension): the drafter of the request's runs, one
 * of --speculate's names; absent or null: the node's. */
static bool parse_speculate(json_t *o, shoal_api_req *q, char *bad, size_t bad_len,
                            const char **param)
{
	static const char *const names[] = {"off", "auto", "lookup", "draft", "mtp"};
	json_t *sp = json_object_get(o, "speculate");
	q->g.speculate = SHOAL_API_SPEC_NODE;
	if (!sp || json_is_null(sp))
		return true;
	for (size_t i = 0; json_is_string(sp) && i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(json_string_value(sp), names[i])) {
			q->g.speculate = (uint8_t)(SHOAL_API_SPEC_OFF + i);
			return true;
		}
	snprintf(bad, bad_len,
	         "'speculate' must be \"off\", \"auto\", \"lookup\", \"draft\" or \"mtp\" "
	         "(the drafter of speculative decoding; absent: the node's)");
	*param = "speculate";
	return false;
}

/* The fields of object o into q; false with the offending parameter's
 * message in bad[] (and *param). */
static bool parse_fields(json_t *o, shoal_api_req *q, char *bad, size_t bad_len, const char **param)
{
	double v;
	const char *p = NULL;
	*param = NULL;
	q->g.max_tokens = SHOAL_API_DEFAULT_MAX;
	q->g.temp = 0.8f;
	q->g.top_p = 0.95f;
	q->g.seed = 0;
#define NUM(key, lo, hi, dst)                                                                      \
	do {                                                                                       \
		v = -1e300;                                                                        \
		if ((p = num_field(o, key, lo, hi, &v))) {                                         \
			snprintf(bad, bad_len, "'%s' must be a number in [%g, %g]", key,           \
			         (double)lo, (double)hi);                                          \
			*param = key;                                                              \
			return false;                                                              \
		}                                                                                  \
		if (v != -1e300)                                                                   \
			dst;                                                                       \
	} while (0)
	/* a count of tokens is a whole number: 1.5 is refused, not truncated */
#define WHOLE(key, dst)                                                                            \
	do {                                                                                       \
		if (v != (double)(int64_t)v) {                                                     \
			snprintf(bad, bad_len, "'%s' must be a whole number, not %g", key, v);     \
			*param = key;                                                              \
			return false;                                                              \
		}                                                                                  \
		dst;                                                                               \
	} while (0)
	NUM("max_tokens", 0, 1e9, WHOLE("max_tokens", q->g.max_tokens = (uint32_t)v));
	NUM("max_completion_tokens", 0, 1e9,
	    WHOLE("max_completion_tokens", q->g.max_tokens = (uint32_t)v));
	NUM("temperature", 0, 2, q->g.temp = (float)v);
	NUM("top_p", 0, 1, q->g.top_p = (float)v);
	/* an integer seed is taken exactly (a double loses bits past 2^53) */
	NUM("seed", -9.2e18, 9.2e18,
	    (q->g.seed = json_is_integer(json_object_get(o, "seed"))
	                     ? (uint64_t)json_integer_value(json_object_get(o, "seed"))
	                     : (uint64_t)(int64_t)v,
	     q->seeded = true));
	/* n: choices, each its own run; a number outside [1, SHOAL_API_MAX_N]
	 * or not whole gets its own message (how many, and why the bound) */
	v = -1e300;
	if (num_field(o, "n", -1e300, 1e300, &v) ||
	    (v != -1e300 && (v < 1 || v > SHOAL_API_MAX_N || v != (double)(int64_t)v))) {
		json_t *x = json_object_get(o, "n");
		char got[32] = "a non-number";
		if (json_is_number(x))
			snprintf(got, sizeof got, "%g", json_number_value(x));
		snprintf(bad, bad_len,
		         "'n' (the number of choices) must be a whole number from 1 to %d, not %s",
		         SHOAL_API_MAX_N, got);
		*param = "n";
		return false;
	}
	q->n = v != -1e300 ? (uint32_t)v : 1;
	NUM("presence_penalty", -2, 2, q->g.presence = (float)v);
	NUM("frequency_penalty", -2, 2, q->g.frequency = (float)v);
	json_t *lb = json_object_get(o, "logit_bias");
	if (lb && !json_is_null(lb)) {
		const char *key;
		json_t *x;
		bool ok = json_is_object(lb) && json_object_size(lb) <= SHOAL_API_MAX_BIAS;
		json_object_foreach(ok ? lb : NULL, key, x)
		{
			char *end;
			long id = strtol(key, &end, 10);
			if (!*key || *end || id < 0 || id > INT32_MAX || !json_is_number(x) ||
			    !(json_number_value(x) >= -100 && json_number_value(x) <= 100)) {
				ok = false;
				break;
			}
			q->g.bias_id[q->g.n_bias] = (int32_t)id;
			q->g.bias[q->g.n_bias++] = (float)json_number_value(x);
		}
		if (!ok) {
			snprintf(
			    bad, bad_len,
			    "'logit_bias' must map at most %d token ids to numbers in [-100, 100]",
			    SHOAL_API_MAX_BIAS);
			*param = "logit_bias";
			return false;
		}
	}
	if (!q->g.max_tokens)
		q->g.max_tokens = 1; /* OpenAI counts 0 as "at least one" nowhere; take it as 1 */
	if ((p = bool_field(o, "stream", &q->stream))) {
		snprintf(bad, bad_len, "'stream' must be a boolean");
		*param = p;
		return false;
	}
	json_t *so = json_object_get(o, "stream_options");
	if (so && !json_is_null(so) &&
	    (!json_is_object(so) || bool_field(so, "include_usage", &q->usage))) {
		snprintf(bad, bad_len, "'stream_options' must be {\"include_usage\": boolean}");
		*param = "stream_options";
		return false;
	}
	/* logprobs: chat: a boolean with top_logprobs; completions: an integer */
	json_t *lp = json_object_get(o, "logprobs");
	if (q->chat) {
		if ((p = bool_field(o, "logprobs", &q->logprobs))) {
			snprintf(bad, bad_len, "'logprobs' must be a boolean");
			*param = p;
			return false;
		}
		NUM("top_logprobs", 0, SHOAL_API_MAX_TOP, q->top = (uint32_t)v);
	} else if (lp && !json_is_null(lp)) {
		if (!json_is_integer(lp) || json_integer_value(lp) < 0 ||
		    json_integer_value(lp) > 5) {
			snprintf(bad, bad_len, "'logprobs' must be an integer in [0, 5]");
			*param = "logprobs";
			return false;
		}
		q->logprobs = true;
		q->top = (uint32_t)json_integer_value(lp);
	}
	q->g.logprobs = q->logprobs ? q->top : 0;
	q->g.logprob = q->logprobs;
#undef NUM
#undef WHOLE
	/* stop: a string or up to 4 */
	json_t *st = json_object_get(o, "stop");
	if (st && !json_is_null(st)) {
		json_t *one[1] = {st};
		size_t n = json_is_array(st) ? json_array_size(st) : 1;
		bool ok = n <= SHOAL_API_MAX_STOP;
		for (size_t i = 0; ok && i < n; i++) {
			json_t *s = json_is_array(st) ? json_array_get(st, i) : one[0];
			ok = json_is_string(s) && json_string_length(s) > 0 &&
			     json_string_length(s) <= SHOAL_API_STOP_LEN;
			if (ok) {
				snprintf(q->stop[q->n_stop], sizeof q->stop[0], "%s",
				         json_string_value(s));
				if (json_string_length(s) > q->max_stop)
					q->max_stop = json_string_length(s);
				q->n_stop++;
			}
		}
		if (!ok) {
			snprintf(bad, bad_len,
			         "'stop' must be a string or up to %d non-empty strings "
			         "of at most %d bytes",
			         SHOAL_API_MAX_STOP, SHOAL_API_STOP_LEN);
			*param = "stop";
			return false;
		}
	}
	if (q->chat && !parse_tools(o, q, bad, bad_len, param))
		return false;
	if (!parse_speculate(o, q, bad, bad_len, param))
		return false;
	if (!parse_format(o, q, bad, bad_len, param))
		return false;
	if (q->chat) {
		json_t *ms = json_object_get(o, "messages");
		if (!json_is_array(ms) || !json_array_size(ms)) {
			snprintf(bad, bad_len, "'messages' must be a non-empty array");
			*param = "messages";
			return false;
		}
		size_t n = json_array_size(ms), n_calls = 0, k = 0;
		for (size_t i = 0; i < n; i++) {
			json_t *tcs = json_object_get(json_array_get(ms, i), "tool_calls");
			n_calls += json_is_array(tcs) ? json_array_size(tcs) : 0;
		}
		q->msgs = calloc(n, sizeof *q->msgs);
		q->texts = calloc(n, sizeof *q->texts);
		q->calls = calloc(n_calls ? n_calls : 1, sizeof *q->calls);
		if (!q->msgs || !q->texts || !q->calls) {
			snprintf(bad, bad_len, "out of memory");
			return false;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *m = json_array_get(ms, i), *role = json_object_get(m, "role");
			const char *given = json_is_string(role) ? json_string_value(role) : "";
			/* the role as a static string: the JSON goes before the request */
			const char *rs = !strcmp(given, "system") || !strcmp(given, "developer")
			                     ? "system"
			                 : !strcmp(given, "user")      ? "user"
			                 : !strcmp(given, "assistant") ? "assistant"
			                 : !strcmp(given, "tool")      ? "tool"
			                                               : NULL;
			if (!rs) {
				snprintf(bad, bad_len,
				         "messages[%zu].role must be system, developer, user, "
				         "assistant or tool",
				         i);
				*param = "messages";
				return false;
			}
			json_t *tcs = json_object_get(m, "tool_calls"), *cid = NULL;
			json_t *ct = json_object_get(m, "content");
			bool calls = json_is_array(tcs) && json_array_size(tcs);
			if (tcs && !json_is_null(tcs) &&
			    (strcmp(rs, "assistant") || !json_is_array(tcs))) {
				snprintf(bad, bad_len,
				         "messages[%zu].tool_calls: only an assistant message has "
				         "them, as an array",
				         i);
				*param = "messages";
				return false;
			}
			if (!strcmp(rs, "tool") &&
			    !json_is_string(cid = json_object_get(m, "tool_call_id"))) {
				snprintf(bad, bad_len,
				         "messages[%zu]: a tool message needs 'tool_call_id'", i);
				*param = "messages";
				return false;
			}
			size_t first = k;
			if (calls && !parse_calls(m, i, q, &k, bad, bad_len)) {
				*param = "messages";
				return false;
			}
			/* an assistant message that calls may have null content */
			char *c =
			    calls && (!ct || json_is_null(ct)) ? strdup("") : content_text(ct);
			if (!c) {
				snprintf(bad, bad_len,
				         "messages[%zu].content must be a string or text parts", i);
				*param = "messages";
				return false;
			}
			q->texts[i] = c;
			q->msgs[i] = (shoal_chat_msg){rs, c, calls ? q->calls + first : NULL,
			                              k - first, json_string_value(cid)};
			q->n_msgs++;
		}
	} else {
		json_t *pr = json_object_get(o, "prompt");
		if (json_is_array(pr) && json_array_size(pr) == 1)
			pr = json_array_get(pr, 0);
		if (!json_is_string(pr)) {
			snprintf(bad, bad_len, "'prompt' must be a string");
			*param = "prompt";
			return false;
		}
		if (!(q->prompt = strdup(json_string_value(pr)))) {
			snprintf(bad, bad_len, "out of memory");
			return false;
		}
	}
	return true;
}

shoal_err shoal_api_req_parse(const char *body, size_t len, bool chat, const char *model,
                              shoal_api_req *q, unsigned *status, const char **param, char *msg,
                              size_t msg_len)
{
	memset(q, 0, sizeof *q);
	q->chat = chat;
	*status = 400;
	*param = NULL;
	json_error_t je;
	json_t *o = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
	if (!o || !json_is_object(o)) {
		snprintf(msg, msg_len, "the body is not a JSON object: %s",
		         o ? "another JSON value" : je.text);
		json_decref(o);
		return SHOAL_ERR_FORMAT;
	}
	shoal_err e = SHOAL_ERR_INVAL;
	json_t *m = json_object_get(o, "model");
	if (m && !json_is_string(m)) {
		snprintf(msg, msg_len, "'model' must be a string");
		*param = "model";
	} else if (m && model && strcmp(json_string_value(m), model)) {
		snprintf(msg, msg_len,
		         "the model '%.*s' is not served here (this cluster serves '%s')",
		         SHOAL_WHY_QUOTE(msg_len, 128), json_string_value(m), model);
		*param = "model";
		*status = 404;
		e = SHOAL_ERR_NOTFOUND;
	} else if (parse_fields(o, q, msg, msg_len, param)) {
		e = SHOAL_OK;
	}
	q->json = o; /* the messages' calls point into it */
	return e;
}

void shoal_api_req_fini(shoal_api_req *q)
{
	for (size_t i = 0; q->texts && i < q->n_msgs; i++)
		free(q->texts[i]);
	free(q->texts);
	free(q->msgs);
	free(q->prompt);
	free(q->tools);
	free(q->calls);
	free(q->g.grammar);
	json_decref(q->json);
	memset(q, 0, sizeof *q);
}
