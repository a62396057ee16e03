/*
 * runtime/api/api_req.c: a completion request's JSON body into a checked
 * shoal_api_req (runtime/api/api_req.h), with OpenAI's defaults and
 * ranges; any bytes give a request or a clear error.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_req.h"

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
	NUM("seed", -9.2e18, 9.2e18, q->g.seed = (uint64_t)(int64_t)v);
	NUM("n", 1, 1, (void)0);
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
	if (q->chat) {
		json_t *ms = json_object_get(o, "messages");
		if (!json_is_array(ms) || !json_array_size(ms)) {
			snprintf(bad, bad_len, "'messages' must be a non-empty array");
			*param = "messages";
			return false;
		}
		size_t n = json_array_size(ms);
		q->msgs = calloc(n, sizeof *q->msgs);
		q->texts = calloc(n, sizeof *q->texts);
		if (!q->msgs || !q->texts) {
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
			                                               : NULL;
			if (!rs) {
				snprintf(bad, bad_len,
				         "messages[%zu].role must be system, developer, user or "
				         "assistant",
				         i);
				*param = "messages";
				return false;
			}
			char *c = content_text(json_object_get(m, "content"));
			if (!c) {
				snprintf(bad, bad_len,
				         "messages[%zu].content must be a string or text parts", i);
				*param = "messages";
				return false;
			}
			q->texts[i] = c;
			q->msgs[i] = (shoal_chat_msg){rs, c};
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
	json_decref(o);
	return e;
}

void shoal_api_req_fini(shoal_api_req *q)
{
	for (size_t i = 0; q->texts && i < q->n_msgs; i++)
		free(q->texts[i]);
	free(q->texts);
	free(q->msgs);
	free(q->prompt);
	memset(q, 0, sizeof *q);
}
