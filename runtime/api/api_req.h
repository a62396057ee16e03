/*
 * runtime/api/api_req.h: a completion request's body, parsed and checked
 * (runtime/api/api_req.c): what runtime/api/api_complete.c needs to run it, or the
 * status, parameter and message of OpenAI's error for it. A pure function
 * of the bytes (tests/fuzz/fuzz_api.c feeds it anything).
 *
 * Part: runtime/, room api/.
 */
#ifndef SHOAL_RUNTIME_API_REQ_H
#define SHOAL_RUNTIME_API_REQ_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/api/api.h"

#define SHOAL_API_MAX_STOP    4
#define SHOAL_API_STOP_LEN    256
#define SHOAL_API_DEFAULT_MAX 256u /* max_tokens when the request gives none */
#define SHOAL_API_MAX_TOOLS   128  /* functions in one request (OpenAI allows 128) */
#define SHOAL_API_FN_NAME_LEN 64   /* a function's name: [A-Za-z0-9_-], as OpenAI */

/* tool_choice */
typedef enum shoal_api_tool_choice {
	SHOAL_API_TOOL_AUTO = 0, /* the default with tools: the model may call */
	SHOAL_API_TOOL_NONE,     /* the default without: it must not */
	SHOAL_API_TOOL_REQUIRED, /* it must call one or more */
	SHOAL_API_TOOL_NAMED,    /* it must call tool_name */
} shoal_api_tool_choice;

typedef struct shoal_api_req {
	bool chat, stream, usage; /* usage: stream_options.include_usage */
	bool logprobs;            /* chat: logprobs true; completions: logprobs given */
	uint32_t top;             /* top alternatives per token */
	shoal_api_gen g;
	uint32_t n;  /* choices, 1..SHOAL_API_MAX_N: choice i samples with seed g.seed + i */
	bool seeded; /* the request gave a seed (else the caller draws one) */
	char stop[SHOAL_API_MAX_STOP][SHOAL_API_STOP_LEN + 1];
	size_t n_stop;
	size_t max_stop; /* the longest stop string */
	size_t n_prompt; /* set by the caller once tokenized */
	/* chat: the messages (texts owned here); completions: the prompt */
	shoal_chat_msg *msgs;
	char **texts;
	size_t n_msgs;
	char *prompt;
	/* tools: the array as compact JSON (NULL: none or empty), the choice
	 * (NONE when there are no tools), parallel_tool_calls (default on) */
	char *tools;
	shoal_api_tool_choice tool_choice;
	char tool_name[SHOAL_API_FN_NAME_LEN + 1];
	bool parallel;
	shoal_chat_call *calls; /* the history's calls; strings in json */
	void *json;             /* the body (json_t), which the strings point into */
} shoal_api_req;

/* Parse body[len] as a chat (chat) or completions request for `model`.
 * SHOAL_OK, or an error with *status (400, 404 for another model), *param
 * (the offending field, or NULL) and msg. Unknown fields are ignored.
 * Free with shoal_api_req_fini either way. */
shoal_err shoal_api_req_parse(const char *body, size_t len, bool chat, const char *model,
                              shoal_api_req *q, unsigned *status, const char **param, char *msg,
                              size_t msg_len);
void shoal_api_req_fini(shoal_api_req *q);

#endif
