/*
 * tests/fuzz/fuzz_api.c: libFuzzer target for the HTTP API's request path
 * (runtime/api/api_req.c): any bytes as a chat or a completions body must
 * give a checked request or an error with a status and a message, never a
 * crash or a leak. The first byte picks chat or completions; a parsed
 * request's fields are checked against the limits the API promises.
 *
 *   make fuzz                      (builds every target with clang, runs each)
 *   tests/fuzz/fuzz_api -max_total_time=60 [CORPUS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/grammar.h"
#include "runtime/api/api_req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	bool chat = data[0] & 1;
	shoal_api_req q;
	unsigned status = 0;
	const char *param = NULL;
	char msg[SHOAL_WHY_LEN];
	shoal_err e = shoal_api_req_parse((const char *)data + 1, size - 1, chat, "m", &q, &status,
	                                  &param, msg, sizeof msg);
	if (e) {
		if ((status != 400 && status != 404) || !msg[0])
			abort();
	} else {
		if (q.n_stop > SHOAL_API_MAX_STOP || q.n < 1 || q.n > SHOAL_API_MAX_N ||
		    q.top > SHOAL_API_MAX_TOP || !q.g.max_tokens ||
		    !(q.g.temp >= 0 && q.g.temp <= 2) || !(q.g.top_p >= 0 && q.g.top_p <= 1) ||
		    (chat && !q.n_msgs) || (!chat && !q.prompt))
			abort();
		for (size_t i = 0; i < q.n_msgs; i++)
			if (!q.msgs[i].role || !q.msgs[i].content)
				abort();
		/* a response_format's grammar is a well-formed program */
		if (q.g.grammar && shoal_grammar_check(q.g.grammar, q.g.n_grammar, msg, sizeof msg))
			abort();
	}
	shoal_api_req_fini(&q);
	return 0;
}
