/*
 * tests/unit/test_reply.c: a chat reply read as reasoning and answer
 * (models/reply.c): Qwen3/GLM's <think> and gpt-oss's harmony channels,
 * whole and while they stream (every prefix's parts are prefixes of the
 * whole reply's, and markers never leak into either part).
 *
 * Part: tests of models/.
 */
#include "models/reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"

static shoal_reply split(shoal_reply_form f, const char *text, size_t len, bool final)
{
	shoal_reply r;
	if (shoal_reply_split(f, text, len, final, &r) != SHOAL_OK) {
		fprintf(stderr, "out of memory\n");
		abort();
	}
	return r;
}

/* The whole text gives reasoning R and content C, and every prefix of it,
 * read as a stream, gives prefixes of R and C without a marker's bytes. */
static void check(shoal_reply_form f, const char *text, const char *R, const char *C)
{
	size_t len = strlen(text);
	shoal_reply w = split(f, text, len, true);
	ASSERT_STR_EQ(w.reasoning, R);
	ASSERT_STR_EQ(w.content, C);
	ASSERT_EQ(w.n_reasoning, strlen(R));
	ASSERT_EQ(w.n_content, strlen(C));
	for (size_t cut = 0; cut <= len; cut++) {
		shoal_reply q = split(f, text, cut, false);
		bool ok = q.n_reasoning <= w.n_reasoning &&
		          !memcmp(q.reasoning, w.reasoning, q.n_reasoning) &&
		          q.n_content <= w.n_content &&
		          !memcmp(q.content, w.content, q.n_content) && q.settled <= cut;
		if (!ok)
			fprintf(stderr,
			        "  prefix %zu of \"%s\": reasoning \"%s\", content \"%s\"\n", cut,
			        text, q.reasoning, q.content);
		ASSERT_TRUE(ok);
		shoal_reply_fini(&q);
	}
	shoal_reply_fini(&w);
}

static void test_think(void)
{
	check(SHOAL_REPLY_THINK, "<think>\nThe user greets.\n</think>\n\nHello!",
	      "The user greets.", "Hello!");
	/* GLM opens with a newline; an empty think is no reasoning */
	check(SHOAL_REPLY_THINK, "\n<think></think>\nHi there", "", "Hi there");
	/* no think: all content, leading white space kept */
	check(SHOAL_REPLY_THINK, "  Plain answer <think>x</think>", "",
	      "  Plain answer <think>x</think>");
	/* a reply cut inside its reasoning: no content */
	check(SHOAL_REPLY_THINK, "<think>still thinking </thi", "still thinking </thi", "");
	/* a closing tag's bytes never reach the client mid-stream */
	shoal_reply q = split(SHOAL_REPLY_THINK, "<think>abc</th", 14, false);
	ASSERT_STR_EQ(q.reasoning, "abc");
	ASSERT_STR_EQ(q.content, "");
	shoal_reply_fini(&q);
	/* the opening tag, half written, holds everything */
	q = split(SHOAL_REPLY_THINK, "\n<thi", 5, false);
	ASSERT_EQ(q.n_content, 0u);
	ASSERT_EQ(q.settled, 0u);
	shoal_reply_fini(&q);
	/* the same text, whole, is content */
	q = split(SHOAL_REPLY_THINK, "\n<thi", 5, true);
	ASSERT_STR_EQ(q.content, "\n<thi");
	shoal_reply_fini(&q);
	/* PLAIN never splits */
	check(SHOAL_REPLY_PLAIN, "<think>a</think>b", "", "<think>a</think>b");
}

#define A "<|start|>assistant"

static void test_harmony(void)
{
	check(SHOAL_REPLY_HARMONY,
	      "<|channel|>analysis<|message|>User says hi. Reply briefly.<|end|>" A
	      "<|channel|>final<|message|>Hello! How can I help?",
	      "User says hi. Reply briefly.", "Hello! How can I help?");
	/* the final channel alone */
	check(SHOAL_REPLY_HARMONY, "<|channel|>final<|message|>Just this.", "", "Just this.");
	/* two analysis messages, a preamble on commentary, then the answer */
	check(SHOAL_REPLY_HARMONY,
	      "<|channel|>analysis<|message|>one<|end|>" A
	      "<|channel|>analysis<|message|>two<|end|>" A
	      "<|channel|>commentary<|message|>Looking.<|end|>" A
	      "<|channel|>final<|message|> done",
	      "one\n\ntwo", "Looking. done");
	/* a function call goes to the answer whole, for the tool reader */
	check(SHOAL_REPLY_HARMONY,
	      "<|channel|>analysis<|message|>Need weather.<|end|>" A
	      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	      "{\"city\":\"Bath\"}",
	      "Need weather.",
	      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	      "{\"city\":\"Bath\"}");
	/* the recipient in the role's part */
	check(SHOAL_REPLY_HARMONY, A " to=functions.f<|channel|>commentary json<|message|>{}", "",
	      "<|channel|>commentary to=functions.f json<|message|>{}");
	/* a call right after the generation prompt ("<|start|>assistant") */
	check(SHOAL_REPLY_HARMONY,
	      " to=functions.get<|channel|>commentary json<|message|>{\"a\": 1}", "",
	      "<|channel|>commentary to=functions.get json<|message|>{\"a\": 1}");
	/* a model that ignores the format: all answer */
	check(SHOAL_REPLY_HARMONY, "Hi <|end|> there", "", "Hi <|end|> there");
	/* cut inside a header: nothing of it shows */
	check(SHOAL_REPLY_HARMONY, "<|channel|>analysis<|message|>x<|end|><|start|>assist", "x",
	      "");
	/* while an analysis message streams, a marker's first bytes wait */
	const char *t = "<|channel|>analysis<|message|>abc<|en";
	shoal_reply q = split(SHOAL_REPLY_HARMONY, t, strlen(t), false);
	ASSERT_STR_EQ(q.reasoning, "abc");
	ASSERT_EQ(q.n_content, 0u);
	shoal_reply_fini(&q);
}

static void test_forms(void)
{
	ASSERT_EQ(shoal_reply_form_of(SHOAL_CHAT_HARMONY), SHOAL_REPLY_HARMONY);
	ASSERT_EQ(shoal_reply_form_of(SHOAL_CHAT_PLAIN), SHOAL_REPLY_PLAIN);
	ASSERT_EQ(shoal_reply_form_of(SHOAL_CHAT_QWEN3), SHOAL_REPLY_THINK);
	ASSERT_EQ(shoal_reply_form_of(SHOAL_CHAT_GLM), SHOAL_REPLY_THINK);
	/* no text at all */
	shoal_reply q = split(SHOAL_REPLY_HARMONY, NULL, 0, true);
	ASSERT_EQ(q.n_content + q.n_reasoning, 0u);
	ASSERT_TRUE(q.content && q.reasoning);
	shoal_reply_fini(&q);
}

TEST_MAIN(TEST_CASE(test_think), TEST_CASE(test_harmony), TEST_CASE(test_forms))
