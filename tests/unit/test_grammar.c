/*
 * tests/unit/test_grammar.c: the schema-to-grammar compiler and the byte
 * matcher (models/grammar.c, models/grammar_schema.c): documents a schema
 * admits and refuses, prefixes, the keywords it refuses, any JSON object,
 * forced tool calls read back by the tool-call parser, random walks that
 * must end in JSON, and the program check on damaged words.
 *
 * Part: tests of models/.
 */
#include "models/grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tool_call.h"
#include "tests/unit/test.h"

static shoal_grammar_prog compile(const char *schema)
{
	shoal_grammar_prog g = {0};
	char why[256] = "";
	shoal_err e = shoal_grammar_schema(schema, strlen(schema), &g, why, sizeof why);
	if (e) {
		fprintf(stderr, "compile %s: %s\n", schema, why);
		abort();
	}
	if (shoal_grammar_check(g.w, g.n, why, sizeof why)) {
		fprintf(stderr, "check: %s\n", why);
		abort();
	}
	return g;
}

/* 2: the whole text is a document; 1: a proper prefix of one; 0: neither */
static int match(const shoal_grammar_prog *g, const char *text)
{
	shoal_grammar_state st;
	shoal_grammar_start(g->w, &st);
	if (!shoal_grammar_feed(g->w, &st, (const uint8_t *)text, strlen(text)))
		return 0;
	return shoal_grammar_done(g->w, &st) ? 2 : 1;
}

static void test_object_schema(void)
{
	shoal_grammar_prog g = compile(
	    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
	    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":"
	    "[\"a\",\"bb\",3,null]},\"minItems\":1,\"maxItems\":2},\"ok\":{\"type\":\"boolean\"}},"
	    "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}");
	ASSERT_EQ(match(&g, "{\"name\":\"Emma\",\"age\":21,\"tags\":[\"a\",3],\"ok\":true}"), 2);
	ASSERT_EQ(match(&g, "{\"name\":\"Emma\",\"tags\":[null]}"), 2);
	ASSERT_EQ(match(&g, "{\"name\":\"\\u00e9\\n\",\"tags\":[\"bb\"],\"ok\":false}"), 2);
	ASSERT_EQ(match(&g, "{\"name\":\"Emma\",\"age\":-0,\"tags\":[\"a\"]}"), 2);
	ASSERT_EQ(match(&g, "{\"name\":\"Em"), 1);
	ASSERT_EQ(match(&g, "{\"name\":\"Emma\",\"age\":2"), 1);
	/* required missing, wrong order, extra key, too long, too many, bad enum */
	ASSERT_EQ(match(&g, "{\"tags\":[\"a\"]}"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"ok\":true,\"tags\":[\"a\"]}"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"x\":1,\"tags\":[\"a\"]}"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"Emma W\""), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"tags\":[]}"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"tags\":[\"a\",\"a\",\"a\"]}"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"tags\":[\"c\"]}"), 0);
	/* numbers: integer only, no leading zeros; whitespace is not taken */
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"age\":1.5"), 0);
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"age\":01"), 0);
	ASSERT_EQ(match(&g, "{ \"name\""), 0);
	/* the plain room: a string's characters left, 0 outside one */
	shoal_grammar_state st;
	shoal_grammar_start(g.w, &st);
	ASSERT_EQ(shoal_grammar_plain_room(g.w, &st), 0);
	ASSERT_TRUE(shoal_grammar_feed(g.w, &st, (const uint8_t *)"{\"name\":\"Em", 11));
	ASSERT_EQ(shoal_grammar_plain_room(g.w, &st), 3);
	ASSERT_TRUE(shoal_grammar_feed(g.w, &st, (const uint8_t *)"\\n", 2));
	ASSERT_EQ(shoal_grammar_plain_room(g.w, &st), 2);
	ASSERT_TRUE(shoal_grammar_feed(g.w, &st, (const uint8_t *)"\\", 1));
	ASSERT_EQ(shoal_grammar_plain_room(g.w, &st), 0); /* inside an escape */
	/* nothing after the end */
	ASSERT_EQ(match(&g, "{\"name\":\"E\",\"tags\":[3]} "), 0);
	free(g.w);
}

static void test_scalars(void)
{
	shoal_grammar_prog g = compile("{\"type\":\"number\"}");
	ASSERT_EQ(match(&g, "-12.5e+3"), 2);
	ASSERT_EQ(match(&g, "0"), 2);
	ASSERT_EQ(match(&g, "12."), 1);
	ASSERT_EQ(match(&g, "1e"), 1);
	ASSERT_EQ(match(&g, "1e+"), 1);
	ASSERT_EQ(match(&g, "+1"), 0);
	ASSERT_EQ(match(&g, "1234567890123"), 0); /* past SHOAL_GRAMMAR_MAX_DIGITS */
	free(g.w);
	g = compile("{\"type\":[\"string\",\"null\"],\"minLength\":2}");
	ASSERT_EQ(match(&g, "null"), 2);
	ASSERT_EQ(match(&g, "\"ab\""), 2);
	ASSERT_EQ(match(&g, "\"a\""), 0);
	ASSERT_EQ(match(&g, "\"\xc3\xa9\xe2\x82\xac\""), 2); /* two characters */
	ASSERT_EQ(match(&g, "\"\xc0\x80x\""), 0);            /* overlong */
	ASSERT_EQ(match(&g, "\"\xed\xa0\x80x\""), 0);        /* a surrogate */
	ASSERT_EQ(match(&g, "\"a\nb\""), 0);                 /* control characters escaped */
	ASSERT_EQ(match(&g, "\"\\ud83d\\ude00x\""), 2);      /* a surrogate pair: one character */
	ASSERT_EQ(match(&g, "\"\\ud83dxy\""), 0);            /* a lone high surrogate */
	ASSERT_EQ(match(&g, "\"\\ude00xy\""), 0);            /* a lone low one */
	ASSERT_EQ(match(&g, "\"\\u00e9\\u0041\""), 2);
	free(g.w);
	g = compile("{\"enum\":[1,12,\"x\"]}");
	ASSERT_EQ(match(&g, "1"), 2);
	ASSERT_EQ(match(&g, "12"), 2);
	ASSERT_EQ(match(&g, "\"x\""), 2);
	ASSERT_EQ(match(&g, "2"), 0);
	free(g.w);
	g = compile("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"const\":"
	            "\"k\"}}]}");
	ASSERT_EQ(match(&g, "[\"k\",\"k\"]"), 2);
	ASSERT_EQ(match(&g, "7"), 2);
	ASSERT_EQ(match(&g, "[7]"), 0);
	free(g.w);
	g = compile("{}"); /* any value */
	ASSERT_EQ(match(&g, "[{\"a\":[true,{}]},\"s\",-1.0E5,null]"), 2);
	free(g.w);
}

static void test_json_object(void)
{
	shoal_grammar_prog g = {0};
	char why[256];
	ASSERT_EQ(shoal_grammar_json_object(&g, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_grammar_check(g.w, g.n, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(match(&g, "{}"), 2);
	ASSERT_EQ(match(&g, "{\"a\":[1,2.5e3,{\"b\":null}],\"c\":\"\\u00e9x\"}"), 2);
	ASSERT_EQ(match(&g, "[1]"), 0);
	ASSERT_EQ(match(&g, "\"s\""), 0);
	ASSERT_EQ(match(&g, "{\"a\":"), 1);
	ASSERT_EQ(match(&g, "{\"a\"}"), 0);
	ASSERT_EQ(match(&g, "{\"a\":1,}"), 0);
	shoal_grammar_state st;
	shoal_grammar_start(g.w, &st);
	ASSERT_TRUE(shoal_grammar_feed(g.w, &st, (const uint8_t *)"{\"k", 3));
	ASSERT_EQ(shoal_grammar_plain_room(g.w, &st), UINT32_MAX);
	/* nesting beyond the stack is refused, not overflowed */
	char deep[256] = "{\"a\":";
	for (int i = 0; i < 100; i++)
		strcat(deep, "[");
	ASSERT_EQ(match(&g, deep), 0);
	free(g.w);
}

static void test_refused(void)
{
	static const struct {
		const char *schema, *word;
	} bad[] = {
	    {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'"},
	    {"{\"$ref\":\"#/$defs/x\"}", "'$ref'"},
	    {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'"},
	    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":0}}}",
	     "'minimum' is not supported (at '/properties/n')"},
	    {"{\"type\":\"string\",\"format\":\"date\"}", "'format'"},
	    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}",
	     "'additionalProperties'"},
	    {"{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{}}]}",
	     "same type"},
	    {"{\"type\":\"date\"}", "type 'date'"},
	    {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "'required'"},
	    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'minItems'"},
	    {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength'"},
	    {"[1]", "must be an object"},
	    {"{\"type\":", "not JSON"},
	    {"{\"allOf\":[]}", "'allOf'"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		shoal_grammar_prog g = {0};
		char why[256] = "";
		shoal_err e =
		    shoal_grammar_schema(bad[i].schema, strlen(bad[i].schema), &g, why, sizeof why);
		ASSERT_NE(e, SHOAL_OK);
		ASSERT_TRUE(g.w == NULL);
		if (!strstr(why, bad[i].word))
			TEST_FAIL_("%s: '%s' does not name %s", bad[i].schema, why, bad[i].word);
	}
	/* too deep */
	char deep[2048] = "";
	for (int i = 0; i < 20; i++)
		strcat(deep, "{\"type\":\"array\",\"items\":");
	strcat(deep, "{}");
	for (int i = 0; i < 20; i++)
		strcat(deep, "}");
	shoal_grammar_prog g = {0};
	char why[256] = "";
	ASSERT_EQ(shoal_grammar_schema(deep, strlen(deep), &g, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "nesting") != NULL);
}

static const char *tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";

static void test_tools(void)
{
	static const struct {
		shoal_chat_tools syn;
		const char *text;
	} ok[] = {
	    {SHOAL_CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{"
	                              "\"city\":\"Bath\"}}\n</tool_call>"},
	    {SHOAL_CHAT_TOOLS_LLAMA31,
	     "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Bath\"}}"},
	    {SHOAL_CHAT_TOOLS_MISTRAL,
	     "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Bath\"}}]"},
	    {SHOAL_CHAT_TOOLS_DEEPSEEK,
	     "<\xef\xbd\x9ctool\xe2\x96\x81"
	     "calls\xe2\x96\x81"
	     "begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81"
	     "call\xe2\x96\x81"
	     "begin\xef\xbd\x9c>get_weather<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>{\"city\":"
	     "\"Bath\"}<\xef\xbd\x9ctool\xe2\x96\x81"
	     "call\xe2\x96\x81"
	     "end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81"
	     "calls\xe2\x96\x81"
	     "end\xef\xbd\x9c>"},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		shoal_grammar_prog g = {0};
		char why[256] = "";
		ASSERT_EQ(shoal_grammar_tools(ok[i].syn, tools, NULL, &g, why, sizeof why),
		          SHOAL_OK);
		ASSERT_EQ(shoal_grammar_check(g.w, g.n, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(match(&g, ok[i].text), 2);
		/* the parser reads the forced call back */
		shoal_tool_parsed p;
		ASSERT_EQ(shoal_tool_parse(ok[i].syn, ok[i].text, strlen(ok[i].text), &p),
		          SHOAL_OK);
		ASSERT_EQ(p.state, SHOAL_TOOL_DONE);
		ASSERT_EQ(p.n_calls, 1);
		ASSERT_STR_EQ(p.calls[0].name, "get_weather");
		shoal_tool_parsed_fini(&p);
		free(g.w);
		/* a named function: the other is refused */
		ASSERT_EQ(shoal_grammar_tools(ok[i].syn, tools, "get_time", &g, why, sizeof why),
		          SHOAL_OK);
		ASSERT_EQ(match(&g, ok[i].text), 0);
		free(g.w);
	}
	shoal_grammar_prog g = {0};
	char why[256] = "";
	ASSERT_EQ(shoal_grammar_tools(SHOAL_CHAT_TOOLS_HERMES, tools, NULL, &g, why, sizeof why),
	          SHOAL_OK);
	ASSERT_EQ(match(&g, "I will call it.<tool_call>"), 0); /* no content first */
	ASSERT_EQ(match(&g, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"),
	          2);
	ASSERT_EQ(match(&g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}"), 0);
	free(g.w);
	ASSERT_NE(shoal_grammar_tools(SHOAL_CHAT_TOOLS_HERMES, tools, "nope", &g, why, sizeof why),
	          SHOAL_OK);
	ASSERT_TRUE(strstr(why, "nope") != NULL);
	ASSERT_NE(shoal_grammar_tools(SHOAL_CHAT_TOOLS_NONE, tools, NULL, &g, why, sizeof why),
	          SHOAL_OK);
}

/* Random walks: each step a random byte among those the matcher takes,
 * ending when done (with probability 1/2 once it may end). Every walk
 * that ends must be JSON; a bounded schema ends within the step cap. */
static void test_random_walks(void)
{
	shoal_grammar_prog g = compile(
	    "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":4},"
	    "\"n\":{\"type\":\"number\"},\"a\":{\"type\":\"array\",\"maxItems\":3,\"items\":"
	    "{\"type\":[\"integer\",\"boolean\",\"null\"]}},\"o\":{\"type\":\"object\","
	    "\"properties\":{\"x\":{\"enum\":[\"p\",\"q\"]}},\"required\":[\"x\"]}},"
	    "\"required\":[\"s\",\"o\"]}");
	uint64_t r = 12345;
	int ended = 0;
	for (int walk = 0; walk < 300; walk++) {
		shoal_grammar_state st;
		shoal_grammar_start(g.w, &st);
		char text[512];
		size_t n = 0;
		bool first[256];
		while (n + 1 < sizeof text) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			if (shoal_grammar_done(g.w, &st) && (r >> 40) % 2 == 0)
				break;
			shoal_grammar_first(g.w, &st, first);
			int k = 0, pick = -1;
			for (int c = 0; c < 256; c++)
				k += first[c];
			if (!k)
				break;
			int want = (int)((r >> 33) % (uint64_t)k);
			for (int c = 0; c < 256 && pick < 0; c++)
				if (first[c] && want-- == 0)
					pick = c;
			uint8_t b = (uint8_t)pick;
			ASSERT_TRUE(shoal_grammar_feed(g.w, &st, &b, 1));
			text[n++] = (char)b;
		}
		text[n] = 0;
		ASSERT_TRUE(shoal_grammar_done(g.w, &st));
		json_error_t je;
		json_t *j = json_loadb(text, n, 0, &je);
		if (!j)
			TEST_FAIL_("walk %d: not JSON: %s (%s)", walk, text, je.text);
		ASSERT_TRUE(json_is_object(j));
		ASSERT_TRUE(json_is_string(json_object_get(j, "s")));
		ASSERT_TRUE(json_is_string(json_object_get(json_object_get(j, "o"), "x")));
		json_decref(j);
		ended++;
	}
	ASSERT_EQ(ended, 300);
	free(g.w);
}

/* Damaged programs: the check refuses them or the matcher runs safely. */
static void test_check(void)
{
	shoal_grammar_prog g = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
	                               "\"array\",\"items\":{\"enum\":[\"x\",1]}}}}");
	char why[256];
	ASSERT_NE(shoal_grammar_check(g.w, g.n - 1, why, sizeof why), SHOAL_OK);
	ASSERT_NE(shoal_grammar_check(NULL, 0, why, sizeof why), SHOAL_OK);
	uint32_t *w = malloc(g.n * sizeof *w);
	uint64_t r = 99;
	int refused = 0;
	for (int t = 0; t < 2000; t++) {
		memcpy(w, g.w, g.n * sizeof *w);
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		w[(r >> 33) % g.n] ^= 1u << ((r >> 20) % 32);
		if (shoal_grammar_check(w, g.n, why, sizeof why)) {
			refused++;
			continue;
		}
		shoal_grammar_state st;
		shoal_grammar_start(w, &st);
		const char *doc = "{\"a\":[\"x\",1]}";
		(void)shoal_grammar_feed(w, &st, (const uint8_t *)doc, strlen(doc));
		(void)shoal_grammar_done(w, &st);
	}
	ASSERT_GT(refused, 0);
	free(w);
	free(g.w);
}

TEST_MAIN(TEST_CASE(test_object_schema), TEST_CASE(test_scalars), TEST_CASE(test_json_object),
          TEST_CASE(test_refused), TEST_CASE(test_tools), TEST_CASE(test_random_walks),
          TEST_CASE(test_check))
