/*
 * tests/fuzz/fuzz_runmsg.c: libFuzzer target for the run-request decoder
 * (net/runmsg.c: RUN_REQ, RUN_TOKEN, RUN_END). Any bytes decode or give an
 * error with a reason; decoded strings point into the input; a decoded
 * message is within the limits, so it encodes again, and that decodes to
 * the same fields.
 *
 *   make fuzz-build && tests/fuzz/fuzz_runmsg -max_total_time=60 CORPUS
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "net/ctlmsg.h"
#include "net/runmsg.h"
#include "tests/fuzz/fuzz_seed.h"

static shoal_wire_buf f_buf;

static void seed(void)
{
	fuzz_seed("runmsg", f_buf.data, f_buf.len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shoal_log_set_level(SHOAL_LOG_ERROR);
	shoal_wire_buf_init(&f_buf);
	shoal_run_req r = {.prompt = "Once upon a time",
	                   .prompt_len = 16,
	                   .max_tokens = 32,
	                   .logprobs = 2,
	                   .top_k = 40,
	                   .temp = 0.7f,
	                   .top_p = 0.9f,
	                   .min_p = 0.05f,
	                   .repeat_penalty = 1.1f,
	                   .seed = 42};
	if (shoal_runmsg_encode_req(1, &r, &f_buf))
		abort();
	seed();
	r.chat = true;
	r.system = "Be brief.";
	r.system_len = 9;
	if (shoal_runmsg_encode_req(2, &r, &f_buf))
		abort();
	seed();
	shoal_run_token t = {.id = 1234,
	                     .logprob = -0.5f,
	                     .text = " the",
	                     .text_len = 4,
	                     .n_top = 2,
	                     .top_ids = {1234, 99},
	                     .top_lps = {-0.5f, -1.25f}};
	if (shoal_runmsg_encode_token(3, &t, &f_buf))
		abort();
	seed();
	shoal_run_end e = {.err = SHOAL_OK, .text = "done", .text_len = 4};
	if (shoal_runmsg_encode_end(4, &e, &f_buf))
		abort();
	seed();
	e = (shoal_run_end){
	    .err = SHOAL_ERR_BUSY, .retry = true, .why = "queue full", .why_len = 10};
	if (shoal_runmsg_encode_end(5, &e, &f_buf))
		abort();
	seed();
	return 0;
}

static bool in(const char *s, size_t n, const uint8_t *data, size_t size)
{
	return !n || (s >= (const char *)data && s + n <= (const char *)data + size);
}

static bool same_str(const char *a, size_t an, const char *b, size_t bn)
{
	return an == bn && (!an || !memcmp(a, b, an));
}

#define SAME(x, y) (!memcmp(&(x), &(y), sizeof(x)))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static shoal_runmsg m, m2;
	char why[SHOAL_WHY_LEN];
	why[0] = 0;
	shoal_err e = shoal_runmsg_decode(data, size, &m, why, sizeof why);
	if (e) {
		if (!why[0])
			abort();
		return 0;
	}
	switch (m.type) {
	case SHOAL_CTLMSG_RUN_REQ:
		if (!in(m.req.prompt, m.req.prompt_len, data, size) ||
		    !in(m.req.system, m.req.system_len, data, size))
			abort();
		e = shoal_runmsg_encode_req(m.seq, &m.req, &f_buf);
		break;
	case SHOAL_CTLMSG_RUN_TOKEN:
		if (!in(m.tok.text, m.tok.text_len, data, size) ||
		    m.tok.n_top > SHOAL_RUN_MAX_LOGPROBS)
			abort();
		e = shoal_runmsg_encode_token(m.seq, &m.tok, &f_buf);
		break;
	case SHOAL_CTLMSG_RUN_END:
		if (!in(m.end.text, m.end.text_len, data, size) ||
		    !in(m.end.why, m.end.why_len, data, size))
			abort();
		e = shoal_runmsg_encode_end(m.seq, &m.end, &f_buf);
		break;
	default:
		abort();
	}
	if (e || shoal_runmsg_decode(f_buf.data, f_buf.len, &m2, why, sizeof why) ||
	    m2.type != m.type || m2.seq != m.seq)
		abort(); /* what the decoder accepts is within the encoder's limits */
	if (m.type == SHOAL_CTLMSG_RUN_REQ) {
		const shoal_run_req *a = &m.req, *b = &m2.req;
		if (!same_str(a->prompt, a->prompt_len, b->prompt, b->prompt_len) ||
		    !same_str(a->system, a->system_len, b->system, b->system_len) ||
		    (a->system == NULL) != (b->system == NULL) || a->max_tokens != b->max_tokens ||
		    a->logprobs != b->logprobs || a->top_k != b->top_k || !SAME(a->temp, b->temp) ||
		    !SAME(a->top_p, b->top_p) || !SAME(a->min_p, b->min_p) ||
		    !SAME(a->repeat_penalty, b->repeat_penalty) || a->seed != b->seed ||
		    a->chat != b->chat)
			abort();
	} else if (m.type == SHOAL_CTLMSG_RUN_TOKEN) {
		const shoal_run_token *a = &m.tok, *b = &m2.tok;
		if (a->id != b->id || !SAME(a->logprob, b->logprob) ||
		    !same_str(a->text, a->text_len, b->text, b->text_len) || a->n_top != b->n_top ||
		    memcmp(a->top_ids, b->top_ids, a->n_top * sizeof a->top_ids[0]) ||
		    memcmp(a->top_lps, b->top_lps, a->n_top * sizeof a->top_lps[0]))
			abort();
	} else {
		const shoal_run_end *a = &m.end, *b = &m2.end;
		if (a->err != b->err || a->retry != b->retry ||
		    !same_str(a->text, a->text_len, b->text, b->text_len) ||
		    !same_str(a->why, a->why_len, b->why, b->why_len))
			abort();
	}
	return 0;
}
