/*
 * runtime/api/api_impl.h: what the API's files share (runtime/api/api.c
 * and runtime/api/api_tools.c, the replies' function calls).
 *
 * Part: runtime/, room api/.
 */
#ifndef SHOAL_RUNTIME_API_IMPL_H
#define SHOAL_RUNTIME_API_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "models/tool_call.h"
#include "runtime/api/api_req.h"

/* A streamed call's arguments go out in pieces of this many bytes (OpenAI
 * streams them a token or so at a time; clients join the pieces). */
#define API_ARGS_PIECE 16

/* The tool_calls array of a reply's message: calls p->calls[0..n), each
 * {"id", "type": "function", "function": {"name", "arguments"}}; ids are
 * the model's own or "call_<base>_<i>". */
json_t *api__tool_calls_json(const shoal_tool_parsed *p, size_t n, const char *base);

/* The same as the "delta" objects of a stream, in order: per call its id,
 * type and name with empty arguments, then the arguments in pieces. A new
 * reference to an array. */
json_t *api__tool_deltas(const shoal_tool_parsed *p, size_t n, const char *base);

/* How many of the parsed calls the reply carries (parallel_tool_calls
 * false: one), or 0 for none. Why a tool_choice that asks for a call is
 * not met, into why[] (false), or true. */
size_t api__tool_count(const shoal_api_req *q, const shoal_tool_parsed *p);
bool api__tool_choice_met(const shoal_api_req *q, const shoal_tool_parsed *p, char *why,
                          size_t why_len);

/* Test hook (./configure --enable-test-hooks): the text that
 * SHOAL_TEST_TOOL_REPLY puts in place of the model's words for a request
 * that offers tools and does not end with a tool result; NULL: none (and
 * always NULL without the hooks). The bundled models, trained on novels,
 * never call a function: the tests of the round trip need one. */
const char *api__test_reply(const shoal_api_req *q);

#endif
