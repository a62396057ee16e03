/*
 * tests/unit/test_tool_call.c: the tool-call parsers (models/tool_call.c)
 * on well-formed, truncated and hostile model outputs, in each syntax,
 * and the hold offset a stream keeps text back from.
 *
 * Part: tests of models/.
 */
#include "models/tool_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"

/* DeepSeek V3.1's tokens in UTF-8 (U+FF5C, U+2581) */
#define BAR            "\xef\xbd\x9c"
#define SP             "\xe2\x96\x81"
#define DS_CALLS_BEGIN "<" BAR "tool" SP "calls" SP "begin" BAR ">"
#define DS_CALLS_END   "<" BAR "tool" SP "calls" SP "end" BAR ">"
#define DS_CALL_BEGIN  "<" BAR "tool" SP "call" SP "begin" BAR ">"
#define DS_CALL_END    "<" BAR "tool" SP "call" SP "end" BAR ">"
#define DS_SEP         "<" BAR "tool" SP "sep" BAR ">"

static shoal_tool_parsed parse(shoal_chat_tools syn, const char *text)
{
	shoal_tool_parsed p;
	if (shoal_tool_parse(syn, text, strlen(text), &p) != SHOAL_OK) {
		fprintf(stderr, "out of memory\n");
		abort();
	}
	return p;
}

static void test_hermes(void)
{
	shoal_tool_parsed p = parse(SHOAL_CHAT_TOOLS_HERMES,
	                            "I shall ask.\n<tool_call>\n{\"name\": \"get_weather\", "
	                            "\"arguments\": {\"city\": \"Bath\", \"n\": [1, 2.5]}}\n"
	                            "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": "
	                            "\"{\\\"x\\\": \\\"caf\xc3\xa9\\\"}\"}\n</tool_call>\n");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_STR_EQ(p.content, "I shall ask.");
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.calls[0].name, "get_weather");
	ASSERT_STR_EQ(p.calls[0].arguments, "{\"city\":\"Bath\",\"n\":[1,2.5]}");
	ASSERT_STR_EQ(p.calls[1].name, "b"); /* arguments quoted as a string: read */
	ASSERT_STR_EQ(p.calls[1].arguments, "{\"x\":\"caf\xc3\xa9\"}");
	ASSERT_TRUE(p.calls[0].id == NULL);
	shoal_tool_parsed_fini(&p);
	/* plain prose: no calls, all content */
	p = parse(SHOAL_CHAT_TOOLS_HERMES, "It is a truth universally acknowledged");
	ASSERT_EQ(p.state, SHOAL_TOOL_NONE);
	ASSERT_STR_EQ(p.content, "It is a truth universally acknowledged");
	shoal_tool_parsed_fini(&p);
	/* no arguments at all: an empty object */
	p = parse(SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call>");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_STR_EQ(p.calls[0].arguments, "{}");
	shoal_tool_parsed_fini(&p);
}

static void test_truncated(void)
{
	/* every prefix of a whole call that cuts into it after its tag is
	 * PARTIAL, with the whole text as content and no calls (inside the
	 * tag it is NONE: a stream holds such a tail back, test_hold) */
	const char *whole = "Hm.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}\"}}\n"
	                    "</tool_call>";
	size_t open = strlen("Hm.");
	char buf[256];
	for (size_t n = open + 1; n < strlen(whole); n++) {
		snprintf(buf, sizeof buf, "%.*s", (int)n, whole);
		shoal_tool_parsed p = parse(SHOAL_CHAT_TOOLS_HERMES, buf);
		shoal_tool_state want =
		    n < open + strlen("<tool_call>") ? SHOAL_TOOL_NONE : SHOAL_TOOL_PARTIAL;
		if (p.state != want)
			TEST_FAIL_("prefix %zu '%s': state %d", n, buf, (int)p.state);
		ASSERT_EQ(p.n_calls, 0);
		ASSERT_STR_EQ(p.content, buf);
		shoal_tool_parsed_fini(&p);
	}
	shoal_tool_parsed p = parse(SHOAL_CHAT_TOOLS_HERMES, whole);
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	shoal_tool_parsed_fini(&p);
	/* DeepSeek cut inside the arguments, and before the closing token */
	p = parse(SHOAL_CHAT_TOOLS_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "{\"a\": ");
	ASSERT_EQ(p.state, SHOAL_TOOL_PARTIAL);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_DEEPSEEK,
	          DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "{}" DS_CALL_END);
	ASSERT_EQ(p.state, SHOAL_TOOL_PARTIAL);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", ");
	ASSERT_EQ(p.state, SHOAL_TOOL_PARTIAL);
	shoal_tool_parsed_fini(&p);
}

static void test_hostile(void)
{
	static const struct {
		shoal_chat_tools syn;
		const char *text, *why;
	} cases[] = {
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>[1, 2]</tool_call>", "not a JSON object"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": 7}</tool_call>", "function name"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"\"}</tool_call>", "function name"},
	    {SHOAL_CHAT_TOOLS_HERMES,
	     "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "not a JSON object"},
	    {SHOAL_CHAT_TOOLS_HERMES,
	     "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>",
	     "not a JSON object"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"f\", \"name\": \"g\"}</tool_call>",
	     "JSON"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
	     "</tool_call>"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"f\"}</tool_call> and prose",
	     "text after"},
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{nope}</tool_call>", "JSON"},
	    {SHOAL_CHAT_TOOLS_MISTRAL, "[TOOL_CALLS]{\"name\": \"f\"}", "array"},
	    {SHOAL_CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][]", "no call"},
	    {SHOAL_CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\"}] more", "text after"},
	    {SHOAL_CHAT_TOOLS_LLAMA31, "{\"name\": \"f\", \"parameters\": {}} and so on",
	     "text after"},
	    {SHOAL_CHAT_TOOLS_LLAMA31, "<|python_tag|>brave_search.call(query=\"x\")", "JSON"},
	    {SHOAL_CHAT_TOOLS_DEEPSEEK, DS_CALLS_BEGIN "f" DS_SEP "{}", "begin token"},
	    /* found by tests/fuzz/fuzz_tool_call: DONE with no call */
	    {SHOAL_CHAT_TOOLS_DEEPSEEK, "Su" DS_CALLS_BEGIN DS_CALLS_END, "no call"},
	    {SHOAL_CHAT_TOOLS_DEEPSEEK,
	     DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "{}" DS_CALLS_END DS_CALLS_END, "end token"},
	    /* found by tests/fuzz/fuzz_tool_call: a NUL inside a name made it "" */
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"\\u0001gr\"}</tool_call>",
	     "control character"},
	    {SHOAL_CHAT_TOOLS_DEEPSEEK,
	     DS_CALLS_BEGIN DS_CALL_BEGIN "\tgr" DS_SEP "{}" DS_CALL_END DS_CALLS_END,
	     "control character"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		shoal_tool_parsed p = parse(cases[i].syn, cases[i].text);
		if (p.state != SHOAL_TOOL_BAD || !strstr(p.why, cases[i].why))
			TEST_FAIL_("case %zu '%s': state %d, why '%s' (want '%s')", i,
			           cases[i].text, (int)p.state, p.why, cases[i].why);
		ASSERT_EQ(p.n_calls, 0);
		ASSERT_STR_EQ(p.content, cases[i].text); /* all of it, as text */
		shoal_tool_parsed_fini(&p);
	}
	/* more calls than SHOAL_TOOL_MAX_CALLS */
	size_t one = strlen("<tool_call>{\"name\": \"f\"}</tool_call>");
	char *many = malloc(one * (SHOAL_TOOL_MAX_CALLS + 1) + 1);
	ASSERT_TRUE(many != NULL);
	many[0] = '\0';
	for (int i = 0; i <= SHOAL_TOOL_MAX_CALLS; i++)
		strcat(many, "<tool_call>{\"name\": \"f\"}</tool_call>");
	shoal_tool_parsed p = parse(SHOAL_CHAT_TOOLS_HERMES, many);
	ASSERT_EQ(p.state, SHOAL_TOOL_BAD);
	shoal_tool_parsed_fini(&p);
	many[one * SHOAL_TOOL_MAX_CALLS] = '\0';
	p = parse(SHOAL_CHAT_TOOLS_HERMES, many);
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, SHOAL_TOOL_MAX_CALLS);
	shoal_tool_parsed_fini(&p);
	free(many);
	/* NUL bytes inside the text: the length counts, not the terminator */
	static const char nul[] = "a\0<tool_call>{\"name\": \"f\"}</tool_call>";
	ASSERT_EQ(shoal_tool_parse(SHOAL_CHAT_TOOLS_HERMES, nul, sizeof nul - 1, &p), SHOAL_OK);
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_STR_EQ(p.content, "a");
	shoal_tool_parsed_fini(&p);
}

/* gpt-oss: the answer as models/reply.c hands it on */
static void test_harmony(void)
{
	shoal_tool_parsed p =
	    parse(SHOAL_CHAT_TOOLS_HARMONY,
	          "Checking.<|channel|>commentary to=functions.get_weather json<|message|>"
	          "{\"city\": \"Bath\"}<|channel|>commentary to=functions.t <|constrain|>json"
	          "<|message|> {} ");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.content, "Checking.");
	ASSERT_STR_EQ(p.calls[0].name, "get_weather");
	ASSERT_STR_EQ(p.calls[0].arguments, "{\"city\":\"Bath\"}");
	ASSERT_STR_EQ(p.calls[1].name, "t");
	ASSERT_STR_EQ(p.calls[1].arguments, "{}");
	shoal_tool_parsed_fini(&p);
	/* cut inside the header: partial; arguments that are not an object,
	 * or a message that names no function: bad, the text kept whole */
	const char *partial = "x<|channel|>commentary to=functions.f";
	p = parse(SHOAL_CHAT_TOOLS_HARMONY, partial);
	ASSERT_EQ(p.state, SHOAL_TOOL_PARTIAL);
	ASSERT_STR_EQ(p.content, partial);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_HARMONY, "<|channel|>commentary to=functions.f<|message|>[1]");
	ASSERT_EQ(p.state, SHOAL_TOOL_BAD);
	ASSERT_EQ(p.n_calls, 0);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_HARMONY, "<|channel|>commentary<|message|>{}");
	ASSERT_EQ(p.state, SHOAL_TOOL_BAD);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_HARMONY,
	          "<|channel|>commentary to=functions. json<|message|>{}");
	ASSERT_EQ(p.state, SHOAL_TOOL_BAD);
	shoal_tool_parsed_fini(&p);
	/* no call: all content; a stream holds back what may open one */
	p = parse(SHOAL_CHAT_TOOLS_HARMONY, "Just text.");
	ASSERT_EQ(p.state, SHOAL_TOOL_NONE);
	shoal_tool_parsed_fini(&p);
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_HARMONY, "ok <|chan", 9), 3);
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_HARMONY, "ok", 2), 2);
}

static void test_other_syntaxes(void)
{
	shoal_tool_parsed p =
	    parse(SHOAL_CHAT_TOOLS_LLAMA31, " {\"name\": \"f\", \"parameters\": {\"q\": 1}}; "
	                                    "{\"name\": \"g\", \"parameters\": {}}");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.calls[0].arguments, "{\"q\":1}");
	ASSERT_STR_EQ(p.calls[1].name, "g");
	ASSERT_STR_EQ(p.content, "");
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_LLAMA31, "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	shoal_tool_parsed_fini(&p);
	/* Llama: a "{" in the middle of prose is not a call */
	p = parse(SHOAL_CHAT_TOOLS_LLAMA31, "Sets like {1, 2} are nice.");
	ASSERT_EQ(p.state, SHOAL_TOOL_NONE);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_MISTRAL,
	          "Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": "
	          "\"abcdefghi\"}, {\"name\": \"g\", \"arguments\": {}}]");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.content, "Sure.");
	ASSERT_STR_EQ(p.calls[0].id, "abcdefghi");
	ASSERT_TRUE(p.calls[1].id == NULL);
	shoal_tool_parsed_fini(&p);
	p = parse(SHOAL_CHAT_TOOLS_DEEPSEEK,
	          "Let me check." DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP
	          "{\"city\": \"Bath\"}" DS_CALL_END DS_CALL_BEGIN "t" DS_SEP
	          "{}" DS_CALL_END DS_CALLS_END);
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.content, "Let me check.");
	ASSERT_STR_EQ(p.calls[0].name, "get_weather");
	ASSERT_STR_EQ(p.calls[0].arguments, "{\"city\":\"Bath\"}");
	shoal_tool_parsed_fini(&p);
	/* GLM: bare string values, JSON ones, several calls, none */
	p = parse(SHOAL_CHAT_TOOLS_GLM,
	          "I will look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bath"
	          "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n<arg_key>o"
	          "</arg_key>\n<arg_value>{\"a\": [1]}</arg_value>\n</tool_call>\n<tool_call>now"
	          "\n</tool_call>");
	ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
	ASSERT_EQ(p.n_calls, 2);
	ASSERT_STR_EQ(p.content, "I will look.");
	ASSERT_STR_EQ(p.calls[0].name, "get_weather");
	ASSERT_STR_EQ(p.calls[0].arguments, "{\"city\":\"Bath\",\"days\":2,\"o\":{\"a\":[1]}}");
	ASSERT_STR_EQ(p.calls[1].name, "now");
	ASSERT_STR_EQ(p.calls[1].arguments, "{}");
	shoal_tool_parsed_fini(&p);
	static const struct {
		const char *text;
		shoal_tool_state st;
	} glm[] = {
	    {"<tool_call>f\n<arg_key>a</arg_key>\n<arg_val", SHOAL_TOOL_PARTIAL},
	    {"<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>", SHOAL_TOOL_PARTIAL},
	    {"<tool_call>f\nstray text\n</tool_call>", SHOAL_TOOL_BAD},
	    {"<tool_call>f\n<arg_key>a</arg_key>x</tool_call>", SHOAL_TOOL_BAD},
	    {"<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>a</arg_key>"
	     "<arg_value>2</arg_value></tool_call>",
	     SHOAL_TOOL_BAD},
	    {"<tool_call>\n</tool_call>", SHOAL_TOOL_BAD},
	    {"<tool_call>f</tool_call> and more", SHOAL_TOOL_BAD},
	};
	for (size_t i = 0; i < sizeof glm / sizeof glm[0]; i++) {
		p = parse(SHOAL_CHAT_TOOLS_GLM, glm[i].text);
		if (p.state != glm[i].st)
			TEST_FAIL_("glm case %zu: state %d, want %d (%s)", i, (int)p.state,
			           (int)glm[i].st, p.why);
		ASSERT_STR_EQ(p.content, glm[i].text);
		shoal_tool_parsed_fini(&p);
	}
	/* no syntax: nothing is ever a call */
	p = parse(SHOAL_CHAT_TOOLS_NONE, "<tool_call>{\"name\": \"f\"}</tool_call>");
	ASSERT_EQ(p.state, SHOAL_TOOL_NONE);
	shoal_tool_parsed_fini(&p);
}

static void test_hold(void)
{
	const char *t = "Well <tool_c";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_HERMES, t, strlen(t)), 5);
	t = "Well <tool_call>{\"na";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_HERMES, t, strlen(t)), 5);
	t = "Well <b>";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_HERMES, t, strlen(t)), strlen(t));
	t = "ok [TOOL";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_MISTRAL, t, strlen(t)), 3);
	t = "  ";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_LLAMA31, t, strlen(t)), 0);
	t = " <|pyth";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_LLAMA31, t, strlen(t)), 0);
	t = "Prose {";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_LLAMA31, t, strlen(t)), strlen(t));
	t = "x <" BAR "tool";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_DEEPSEEK, t, strlen(t)), 2);
	t = "<tool_call>";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_NONE, t, strlen(t)), strlen(t));
	t = "Hm <tool";
	ASSERT_EQ(shoal_tool_hold(SHOAL_CHAT_TOOLS_GLM, t, strlen(t)), 3);
}

TEST_MAIN(TEST_CASE(test_hermes), TEST_CASE(test_truncated), TEST_CASE(test_hostile),
          TEST_CASE(test_harmony), TEST_CASE(test_other_syntaxes), TEST_CASE(test_hold))
