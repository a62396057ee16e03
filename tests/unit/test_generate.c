/*
 * tests/unit/test_generate.c: the generation loop (runtime/engine/
 * generate.h): the sequence's steps, positions and stops, and the local
 * driver's prefill, scoring and stop reasons on the trained model.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "models/model.h"
#include "models/tokenizer.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/generate.h"
#include "tests/unit/test.h"

static void test_seq_positions_and_max(void)
{
	shoal_gen_seq q;
	shoal_gen_seq_init(&q, 5, &(shoal_gen_limits){.max_tokens = 3});
	/* prefill chunks of 2: 2, 2, 1, then none */
	ASSERT_EQ(shoal_gen_seq_chunk(&q, 0, 2), 2);
	ASSERT_EQ(shoal_gen_seq_chunk(&q, 4, 2), 1);
	ASSERT_EQ(shoal_gen_seq_chunk(&q, 5, 2), 0);
	for (uint32_t s = 0; s < 3; s++) {
		ASSERT_EQ(shoal_gen_seq_step(&q), s);
		ASSERT_EQ(shoal_gen_seq_pos(&q), 4 + s); /* logits of n_prompt - 1 + s */
		ASSERT_EQ(shoal_gen_step_of_pos(5, shoal_gen_seq_pos(&q)), s);
		ASSERT_EQ(shoal_gen_seq_accept(&q, 7), SHOAL_GEN_STOP_NONE);
		shoal_gen_stop st = shoal_gen_seq_next(&q, false);
		ASSERT_EQ(st, s < 2 ? SHOAL_GEN_STOP_NONE : SHOAL_GEN_STOP_MAX);
		if (st == SHOAL_GEN_STOP_NONE)
			ASSERT_EQ(shoal_gen_seq_pos(&q), 5 + s); /* fed at n_prompt + s */
	}
	ASSERT_EQ(shoal_gen_seq_stop(&q), SHOAL_GEN_STOP_MAX);
	ASSERT_EQ(shoal_gen_seq_next(&q, true), SHOAL_GEN_STOP_MAX); /* stays */
	/* max_tokens 0: done before any step */
	shoal_gen_seq_init(&q, 1, &(shoal_gen_limits){.max_tokens = 0});
	ASSERT_EQ(shoal_gen_seq_stop(&q), SHOAL_GEN_STOP_MAX);
}

static void test_seq_stops(void)
{
	shoal_gen_seq q;
	/* the caller */
	shoal_gen_seq_init(&q, 2, &(shoal_gen_limits){.max_tokens = 10});
	ASSERT_EQ(shoal_gen_seq_accept(&q, 1), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_next(&q, true), SHOAL_GEN_STOP_CALLER);
	/* the context: 2 prompt + 2 generated fill n_ctx 4 */
	shoal_gen_seq_init(&q, 2, &(shoal_gen_limits){.max_tokens = 10, .n_ctx = 4});
	ASSERT_EQ(shoal_gen_seq_accept(&q, 1), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_next(&q, false), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_accept(&q, 1), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_next(&q, false), SHOAL_GEN_STOP_CTX);
	/* an end-of-generation id: counted, not handed out */
	char path[512], why[SHOAL_WHY_LEN] = "";
	snprintf(path, sizeof path, "%s/models/austen-dense-q8_0.gguf", test_data_dir());
	shoal_model *m = NULL;
	shoal_tokenizer *tok = NULL;
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_tokenizer_from_gguf(m->gguf, &tok, why, sizeof why), SHOAL_OK);
	int32_t eos = shoal_tokenizer_eos(tok);
	ASSERT_GE(eos, 0);
	shoal_gen_seq_init(&q, 3, &(shoal_gen_limits){.max_tokens = 10, .eog = tok});
	ASSERT_EQ(shoal_gen_seq_accept(&q, eos == 5 ? 6 : 5), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_next(&q, false), SHOAL_GEN_STOP_NONE);
	ASSERT_EQ(shoal_gen_seq_accept(&q, eos), SHOAL_GEN_STOP_EOG);
	ASSERT_EQ(shoal_gen_seq_step(&q), 2);
	ASSERT_EQ(shoal_gen_seq_next(&q, false), SHOAL_GEN_STOP_EOG);
	shoal_tokenizer_free(tok);
	shoal_model_free(m);
}

typedef struct seen {
	uint32_t tokens, logits, first_pos, last_pos;
	int32_t ids[64];
} seen;

static int on_token(void *ctx, const shoal_gen_token *t)
{
	seen *s = ctx;
	if (t->step != s->tokens)
		return 1; /* out of order: stop, and the count tells */
	s->ids[s->tokens++] = t->id;
	return 0;
}

static void on_logits(void *ctx, uint32_t pos, const float *lg)
{
	seen *s = ctx;
	(void)lg;
	if (!s->logits)
		s->first_pos = pos;
	s->last_pos = pos;
	s->logits++;
}

static void test_run(void)
{
	char path[512], why[SHOAL_WHY_LEN] = "";
	snprintf(path, sizeof path, "%s/models/austen-dense-q8_0.gguf", test_data_dir());
	shoal_model *m = NULL;
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = 8; /* the 20-token prompt in 3 chunks */
	shoal_engine *e = NULL;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	shoal_gen_config gc = {.sampler = shoal_sampler_defaults(), .prompt_logits = true};
	gc.sampler.temp = 0;
	shoal_gen *g = NULL;
	ASSERT_EQ(shoal_gen_new(e, &gc, &g, why, sizeof why), SHOAL_OK);
	int32_t prompt[20];
	for (int i = 0; i < 20; i++)
		prompt[i] = 100 + 37 * i;
	/* score positions [10, 19) without sampling */
	seen a = {0};
	shoal_gen_request rq = {.prompt = prompt,
	                        .n_prompt = 20,
	                        .max_tokens = 0,
	                        .ctx = &a,
	                        .score_from = 10,
	                        .score_to = 19,
	                        .on_logits = on_logits,
	                        .on_token = on_token};
	shoal_gen_stats st;
	ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(a.logits, 9);
	ASSERT_EQ(a.first_pos, 10);
	ASSERT_EQ(a.last_pos, 18);
	ASSERT_EQ(a.tokens, 0);
	ASSERT_EQ(st.stop, SHOAL_GEN_STOP_MAX);
	/* 12 greedy tokens; the same again from a reset session */
	seen b = {0}, b2 = {0};
	rq = (shoal_gen_request){
	    .prompt = prompt, .n_prompt = 20, .max_tokens = 12, .ctx = &b, .on_token = on_token};
	ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(b.tokens, 12);
	ASSERT_EQ(st.tokens, 12);
	ASSERT_EQ(st.decode_runs, 11); /* the last token is not fed */
	rq.ctx = &b2;
	ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(!memcmp(b.ids, b2.ids, sizeof b.ids));
	/* the context fills: 60 prompt tokens in a context of 64 */
	int32_t longp[60];
	for (int i = 0; i < 60; i++)
		longp[i] = 100 + i;
	seen d = {0};
	rq = (shoal_gen_request){
	    .prompt = longp, .n_prompt = 60, .max_tokens = 50, .ctx = &d, .on_token = on_token};
	ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(st.stop, SHOAL_GEN_STOP_CTX);
	ASSERT_EQ(d.tokens, 4);
	/* bad input: a prompt past the context, an id out of the vocabulary */
	rq.n_prompt = 65;
	ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_ERR_RANGE);
	prompt[3] = (int32_t)m->hp.n_vocab;
	rq = (shoal_gen_request){.prompt = prompt, .n_prompt = 20, .max_tokens = 2};
	why[0] = '\0';
	ASSERT_NE(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(why[0] != '\0');
	shoal_gen_free(g);
	shoal_engine_free(e);
	shoal_model_free(m);
}

TEST_MAIN(TEST_CASE(test_seq_positions_and_max), TEST_CASE(test_seq_stops), TEST_CASE(test_run))
