/*
 * tests/unit/test_runmsg.c: the run protocol's messages (net/runmsg.h):
 * round trips, the limits, and bad bytes refused with a reason.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/ctlmsg.h"
#include "net/runmsg.h"
#include "tests/unit/test.h"

static void test_req_round_trip(void)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	shoal_run_req r = {.prompt = "It is a truth",
	                   .prompt_len = 13,
	                   .max_tokens = 32,
	                   .logprobs = 5,
	                   .top_k = 40,
	                   .temp = 0.8f,
	                   .top_p = 0.95f,
	                   .min_p = 0.05f,
	                   .repeat_penalty = 1.1f,
	                   .seed = 0xfedcba9876543210ull,
	                   .chat = true,
	                   .system = "Be brief.",
	                   .system_len = 9};
	ASSERT_EQ(shoal_runmsg_encode_req(7, &r, &b), SHOAL_OK);
	shoal_runmsg m;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m.type, SHOAL_CTLMSG_RUN_REQ);
	ASSERT_U64_EQ(m.seq, 7);
	ASSERT_EQ(m.req.prompt_len, 13);
	ASSERT_TRUE(!memcmp(m.req.prompt, "It is a truth", 13));
	ASSERT_EQ(m.req.max_tokens, 32);
	ASSERT_EQ(m.req.logprobs, 5);
	ASSERT_EQ(m.req.top_k, 40);
	ASSERT_TRUE(m.req.temp == 0.8f && m.req.top_p == 0.95f && m.req.min_p == 0.05f &&
	            m.req.repeat_penalty == 1.1f);
	ASSERT_U64_EQ(m.req.seed, 0xfedcba9876543210ull);
	ASSERT_TRUE(m.req.chat);
	ASSERT_EQ(m.req.system_len, 9);
	/* the plain request: no chat, no system */
	r.chat = false;
	r.system = NULL;
	r.system_len = 0;
	ASSERT_EQ(shoal_runmsg_encode_req(8, &r, &b), SHOAL_OK);
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(m.req.chat);
	ASSERT_TRUE(m.req.system == NULL);
	ASSERT_TRUE(m.req.speculate == NULL); /* absent: the owner's own */
	/* speculate: a name, carried as is (the owner parses it) */
	r.speculate = "lookup";
	r.speculate_len = 6;
	ASSERT_EQ(shoal_runmsg_encode_req(8, &r, &b), SHOAL_OK);
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m.req.speculate_len, 6);
	ASSERT_TRUE(m.req.speculate && !memcmp(m.req.speculate, "lookup", 6));
	/* an empty one is refused with a reason, a long one not sent */
	r.speculate_len = 0;
	ASSERT_EQ(shoal_runmsg_encode_req(8, &r, &b), SHOAL_OK);
	why[0] = '\0';
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "speculate") != NULL);
	r.speculate = "a-name-longer-than-16";
	r.speculate_len = strlen(r.speculate);
	ASSERT_EQ(shoal_runmsg_encode_req(8, &r, &b), SHOAL_ERR_RANGE);
	r.speculate = NULL;
	r.speculate_len = 0;
	/* outside the limits: the encoder refuses (a caller bug made visible) */
	r.logprobs = SHOAL_RUN_MAX_LOGPROBS + 1;
	ASSERT_EQ(shoal_runmsg_encode_req(9, &r, &b), SHOAL_ERR_RANGE);
	shoal_wire_buf_fini(&b);
}

static void test_token_and_end(void)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	char text[SHOAL_RUN_MAX_TEXT];
	memset(text, 'x', sizeof text);
	shoal_run_token t = {.id = 31999,
	                     .logprob = -0.25f,
	                     .text = text,
	                     .text_len = SHOAL_RUN_MAX_TEXT,
	                     .n_top = SHOAL_RUN_MAX_LOGPROBS};
	for (uint32_t i = 0; i < t.n_top; i++) {
		t.top_ids[i] = (int32_t)(i * 97);
		t.top_lps[i] = i ? -(float)i : -INFINITY;
	}
	ASSERT_EQ(shoal_runmsg_encode_token(3, &t, &b), SHOAL_OK);
	/* the largest token fits the owner's reserved buffer */
	ASSERT_LE(b.len, SHOAL_RUN_MSG_RESERVE);
	shoal_runmsg m;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m.type, SHOAL_CTLMSG_RUN_TOKEN);
	ASSERT_EQ(m.tok.id, 31999);
	ASSERT_TRUE(m.tok.logprob == -0.25f);
	ASSERT_EQ(m.tok.text_len, SHOAL_RUN_MAX_TEXT);
	ASSERT_EQ(m.tok.n_top, SHOAL_RUN_MAX_LOGPROBS);
	ASSERT_EQ(m.tok.top_ids[99], 99 * 97);
	ASSERT_TRUE(m.tok.top_lps[0] == -INFINITY && m.tok.top_lps[5] == -5.0f);

	char reason[SHOAL_RUN_MAX_WHY];
	memset(reason, 'r', sizeof reason);
	shoal_run_end e = {.err = SHOAL_ERR_STATE,
	                   .retry = true,
	                   .why = reason,
	                   .why_len = sizeof reason,
	                   .text = text,
	                   .text_len = sizeof text,
	                   .tokens = 4000000000u};
	ASSERT_EQ(shoal_runmsg_encode_end(4, &e, &b), SHOAL_OK);
	ASSERT_LE(b.len, SHOAL_RUN_MSG_RESERVE);
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m.type, SHOAL_CTLMSG_RUN_END);
	ASSERT_EQ(m.end.err, SHOAL_ERR_STATE);
	ASSERT_TRUE(m.end.retry);
	ASSERT_EQ(m.end.why_len, sizeof reason);
	ASSERT_TRUE(m.end.has_tokens && m.end.tokens == 4000000000u); /* the count of RUN_TOKENs */
	/* retry only with an error */
	shoal_run_end ok = {.err = SHOAL_OK, .retry = true, .text = ""};
	ASSERT_EQ(shoal_runmsg_encode_end(5, &ok, &b), SHOAL_ERR_RANGE);
	shoal_wire_buf_fini(&b);
}

static void test_bad_bytes(void)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	shoal_run_req r = {
	    .prompt = "hi", .prompt_len = 2, .max_tokens = 4, .top_p = 1, .repeat_penalty = 1};
	ASSERT_EQ(shoal_runmsg_encode_req(1, &r, &b), SHOAL_OK);
	shoal_runmsg m;
	char why[SHOAL_WHY_LEN];
	/* every truncation of a valid message is refused with a reason */
	for (size_t n = 0; n < b.len; n++) {
		why[0] = '\0';
		ASSERT_NE(shoal_runmsg_decode(b.data, n, &m, why, sizeof why), SHOAL_OK);
		ASSERT_TRUE(why[0] != '\0');
	}
	/* random bytes never crash and never decode to a request */
	uint8_t junk[64];
	uint32_t x = 12345;
	for (int round = 0; round < 2000; round++) {
		for (size_t i = 0; i < sizeof junk; i++) {
			x = x * 1103515245u + 12345u;
			junk[i] = (uint8_t)(x >> 16);
		}
		if (round % 2)
			junk[0] = 0x8f; /* a map, so the decoder goes further */
		shoal_err e = shoal_runmsg_decode(junk, sizeof junk, &m, why, sizeof why);
		ASSERT_TRUE(e != SHOAL_OK || m.type != SHOAL_CTLMSG_RUN_REQ || m.req.prompt);
	}
	/* a non-run message type */
	shoal_ctlmsg c = {.type = SHOAL_CTLMSG_STATUS_REQ, .seq = 2};
	ASSERT_EQ(shoal_ctlmsg_encode(&c, &b), SHOAL_OK);
	ASSERT_EQ(shoal_runmsg_decode(b.data, b.len, &m, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	/* run messages are not ctlmsg's to encode */
	c.type = SHOAL_CTLMSG_RUN_REQ;
	ASSERT_EQ(shoal_ctlmsg_encode(&c, &b), SHOAL_ERR_INVAL);
	shoal_wire_buf_fini(&b);
}

TEST_MAIN(TEST_CASE(test_req_round_trip), TEST_CASE(test_token_and_end), TEST_CASE(test_bad_bytes))
