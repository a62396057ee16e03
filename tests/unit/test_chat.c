/*
 * tests/unit/test_chat.c: chat template detection and rendering (models/chat.c).
 *
 * Part: models/. Every *.jinja in tests/data/vocab/templates must be
 * detected as its expected family and render each conversation of
 * conversations.json byte for byte like the reference .txt beside it (a
 * new template without an expectation here fails). Then the edge cases:
 * unknown templates, bad conversations, Gemma's folded system message,
 * Qwen3 and DeepSeek thinking, PLAIN.
 */
#include "models/chat.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>

#include "tests/unit/test.h"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0;
	char *p = malloc(cap);
	while (p) {
		size_t got = fread(p + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
		if (n + 1 == cap) {
			char *q = realloc(p, cap * 2);
			if (!q) {
				free(p);
				p = NULL;
				break;
			}
			p = q;
			cap *= 2;
		}
	}
	fclose(f);
	if (p) {
		p[n] = '\0';
		if (len)
			*len = n;
	}
	return p;
}

static const char *templates_dir(char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/vocab/templates", test_data_dir());
	return buf;
}

/* The family each bundled template must be detected as. */
static const struct {
	const char *name;
	shoal_chat_style style;
} expected_styles[] = {
    {"Qwen-Qwen2.5-7B-Instruct", SHOAL_CHAT_QWEN25},
    {"Qwen-Qwen3-0.6B", SHOAL_CHAT_QWEN3},
    {"deepseek-ai-DeepSeek-V3.1", SHOAL_CHAT_DEEPSEEK},
    {"google-gemma-2-2b-it", SHOAL_CHAT_GEMMA},
    {"meta-llama-Llama-3.1-8B-Instruct", SHOAL_CHAT_LLAMA31},
    {"microsoft-Phi-3.5-mini-instruct", SHOAL_CHAT_PHI3},
    {"mistralai-Mistral-Nemo-Instruct-2407", SHOAL_CHAT_MISTRAL},
    {"GLM-4.6", SHOAL_CHAT_GLM},
    {"openai-gpt-oss-120b", SHOAL_CHAT_HARMONY},
};

/* A conversation from conversations.json as messages pointing into it. */
typedef struct conv {
	const char *name;
	shoal_chat_msg m[16];
	size_t n;
} conv;

static size_t load_convs(json_t *root, conv *out, size_t cap)
{
	size_t k = 0;
	const char *key;
	json_t *arr;
	json_object_foreach(root, key, arr)
	{
		if (k == cap || !json_is_array(arr) || json_array_size(arr) > 16)
			return 0;
		out[k].name = key;
		out[k].n = json_array_size(arr);
		for (size_t i = 0; i < out[k].n; i++) {
			json_t *msg = json_array_get(arr, i);
			out[k].m[i] = (shoal_chat_msg){
			    .role = json_string_value(json_object_get(msg, "role")),
			    .content = json_string_value(json_object_get(msg, "content"))};
			if (!out[k].m[i].role || !out[k].m[i].content)
				return 0;
		}
		k++;
	}
	return k;
}

/* Print where two renderings part, for a readable failure. */
static void show_diff(const char *what, const char *got, const char *want)
{
	size_t i = 0;
	while (got[i] && got[i] == want[i])
		i++;
	fprintf(stderr, "%s: differs at byte %zu\n  got:  \"%.80s\"\n  want: \"%.80s\"\n", what, i,
	        got + i, want + i);
}

static void test_bundled_templates(void)
{
	char dir[1024];
	templates_dir(dir, sizeof dir);
	char path[4096];
	snprintf(path, sizeof path, "%s/conversations.json", dir);
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr);
	if (!root)
		TEST_FAIL_("cannot read %s: %s", path, jerr.text);
	conv convs[8];
	size_t n_conv = load_convs(root, convs, 8);
	ASSERT_EQ(n_conv, 2);

	DIR *d = opendir(dir);
	if (!d) {
		json_decref(root);
		TEST_FAIL_("cannot list %s", dir);
	}
	int n_templates = 0, n_compared = 0, bad = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t nl = strlen(de->d_name);
		if (nl < 7 || strcmp(de->d_name + nl - 6, ".jinja"))
			continue;
		n_templates++;
		char base[256];
		snprintf(base, sizeof base, "%.*s", (int)(nl - 6), de->d_name);
		if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
			continue;
		size_t tlen = 0;
		char *tmpl = slurp(path, &tlen);
		if (!tmpl) {
			fprintf(stderr, "%s: cannot read\n", path);
			bad++;
			continue;
		}
		int want = -1;
		for (size_t i = 0; i < sizeof expected_styles / sizeof expected_styles[0]; i++)
			if (!strcmp(expected_styles[i].name, base))
				want = (int)expected_styles[i].style;
		shoal_chat_style got;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_chat_detect(tmpl, tlen, &got, why, sizeof why);
		free(tmpl);
		if (want < 0) {
			fprintf(stderr, "%s: no expected family in this test (detect says %s %s)\n",
			        base, e ? shoal_strerror(e) : shoal_chat_style_name(got), why);
			bad++;
			continue;
		}
		if (e || (int)got != want) {
			fprintf(stderr, "%s: detected %s (%s %s), expected %s\n", base,
			        shoal_chat_style_name(got), shoal_strerror(e), why,
			        shoal_chat_style_name((shoal_chat_style)want));
			bad++;
			continue;
		}
		for (size_t c = 0; c < n_conv; c++) {
			if (snprintf(path, sizeof path, "%s/%s.%s.txt", dir, base, convs[c].name) >=
			    (int)sizeof path)
				continue;
			size_t rlen = 0;
			char *ref = slurp(path, &rlen);
			char *out = NULL;
			/* the date the references were rendered with (gpt-oss prints it) */
			shoal_chat_opts o = {.add_generation_prompt = true,
			                     .bos = "<BOS>",
			                     .eos = "<EOS>",
			                     .thinking = -1,
			                     .date = "2026-01-01"};
			e = shoal_chat_render_opts(got, convs[c].m, convs[c].n, &o, &out, why,
			                           sizeof why);
			if (!ref) {
				/* Only Gemma's with-system has no reference (the
				 * template raises); test_gemma_system covers it. */
				if (got != SHOAL_CHAT_GEMMA ||
				    strcmp(convs[c].name, "with-system")) {
					fprintf(stderr, "%s: no reference %s\n", base, path);
					bad++;
				}
				free(out);
				continue;
			}
			if (e) {
				fprintf(stderr, "%s.%s: render failed: %s\n", base, convs[c].name,
				        why);
				bad++;
			} else if (strlen(out) != rlen || memcmp(out, ref, rlen)) {
				char what[300];
				snprintf(what, sizeof what, "%s.%s", base, convs[c].name);
				show_diff(what, out, ref);
				bad++;
			} else {
				n_compared++;
			}
			free(out);
			free(ref);
		}
	}
	closedir(d);
	json_decref(root);
	ASSERT_EQ(bad, 0);
	ASSERT_GE(n_templates, 7);
	ASSERT_GE(n_compared, 13);
}

static char *render(shoal_chat_style s, const shoal_chat_msg *m, size_t n, bool gen, shoal_err *e)
{
	char *out = NULL, why[SHOAL_WHY_LEN];
	*e = shoal_chat_render(s, m, n, gen, "<BOS>", "<EOS>", &out, why, sizeof why);
	if (*e)
		fprintf(stderr, "(render: %s)\n", why);
	return out;
}

static const shoal_chat_msg with_system[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello! Who are you?"},
    {"assistant", "I am a small model."},
    {"user", "What is 2+2?"},
};

/* Gemma 2 has no system role: shoal folds a leading system message into
 * the first user turn ("SYSTEM\n\nUSER"). The expectation is the no-system
 * reference with that one change. */
static void test_gemma_system(void)
{
	char path[1200];
	char dir[1024];
	snprintf(path, sizeof path, "%s/google-gemma-2-2b-it.no-system.txt",
	         templates_dir(dir, sizeof dir));
	char *ref = slurp(path, NULL);
	ASSERT_TRUE(ref);
	const char *first = "Hello! Who are you?";
	char *at = strstr(ref, first);
	ASSERT_TRUE(at);
	char want[1024];
	snprintf(want, sizeof want, "%.*s%s\n\n%s", (int)(at - ref), ref, with_system[0].content,
	         at);
	free(ref);
	shoal_err e;
	char *out = render(SHOAL_CHAT_GEMMA, with_system, 4, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, want);
	free(out);

	/* A system message later on, or roles out of turn, are refused. */
	const shoal_chat_msg late[] = {{"user", "a"}, {"system", "b"}};
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_chat_render(SHOAL_CHAT_GEMMA, late, 2, true, "", "", &out, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(out == NULL);
	ASSERT_TRUE(strstr(why, "system"));
	const shoal_chat_msg twice[] = {{"user", "a"}, {"user", "b"}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_GEMMA, twice, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "alternate"));
	const shoal_chat_msg alone[] = {{"system", "a"}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_GEMMA, alone, 1, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_UNSUPPORTED);
	/* Contents are trimmed, as the template's `| trim` does. */
	const shoal_chat_msg pad[] = {{"user", "  hi \n"}};
	out = render(SHOAL_CHAT_GEMMA, pad, 1, false, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<BOS><start_of_turn>user\nhi<end_of_turn>\n");
	free(out);
}

static void test_unknown_template(void)
{
	shoal_chat_style s = SHOAL_CHAT_QWEN3;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_chat_detect("{{ foo }}", 9, &s, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "{{ foo }}"));
	ASSERT_TRUE(strstr(why, "fnv1a64"));

	/* A long one: the reason quotes 60 characters and says there is more;
	 * newlines in the quote become spaces (one line). */
	const char *longer = "{% for m in messages %}\n{{ '### ' + m.role + ': ' + m.content }}\n"
	                     "{% endfor %}{{ '### assistant: ' }}";
	ASSERT_EQ(shoal_chat_detect(longer, strlen(longer), &s, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "{% for m in messages %} {{ '### ' + m.role"));
	ASSERT_TRUE(strstr(why, "...\""));
	ASSERT_TRUE(strchr(why, '\n') == NULL);

	/* Mistral v0.3 ("[INST] " with a space) is not Nemo's format. */
	const char *v03 = "{%- if loop.last and system_message is defined %}{{- \"[INST] \" + "
	                  "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}";
	ASSERT_EQ(shoal_chat_detect(v03, strlen(v03), &s, why, sizeof why), SHOAL_ERR_UNSUPPORTED);

	/* No template: PLAIN, the documented default for base models. */
	s = SHOAL_CHAT_QWEN3;
	ASSERT_EQ(shoal_chat_detect(NULL, 0, &s, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(s, SHOAL_CHAT_PLAIN);
	s = SHOAL_CHAT_QWEN3;
	ASSERT_EQ(shoal_chat_detect("x", 0, &s, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(s, SHOAL_CHAT_PLAIN);
}

/* Templates from memory of two more families: Llama 3.0 and plain ChatML. */
static void test_more_families(void)
{
	const char *l3 =
	    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set "
	    "content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
	    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set "
	    "content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
	    "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' "
	    "}}{% endif %}";
	shoal_chat_style s;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_chat_detect(l3, strlen(l3), &s, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(s, SHOAL_CHAT_LLAMA3);
	shoal_err e;
	char *out = render(s, with_system, 2, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out,
	              "<BOS><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
	              "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! "
	              "Who are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	free(out);

	const char *cm =
	    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
	    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
	ASSERT_EQ(shoal_chat_detect(cm, strlen(cm), &s, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(s, SHOAL_CHAT_CHATML);
	out = render(s, with_system + 1, 1, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out,
	              "<|im_start|>user\nHello! Who are you?<|im_end|>\n<|im_start|>assistant\n");
	free(out);
}

static void test_bad_conversations(void)
{
	char *out = (char *)1;
	char why[SHOAL_WHY_LEN] = "";
	for (int s = 0; s < SHOAL_CHAT__COUNT; s++) {
		why[0] = '\0';
		ASSERT_EQ(shoal_chat_render((shoal_chat_style)s, with_system, 0, true, "", "", &out,
		                            why, sizeof why),
		          SHOAL_ERR_INVAL);
		ASSERT_TRUE(out == NULL);
		ASSERT_TRUE(strstr(why, "empty conversation"));
	}
	/* a "tool" message: only in a format with a tool syntax it renders */
	const shoal_chat_msg tool[] = {{"user", "hi"}, {"tool", "42"}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_LLAMA3, tool, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "defines no tool calls"));
	/* Mistral pairs a result with its call by id: a result without one */
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_MISTRAL, tool, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "tool_call_id"));
	/* gpt-oss names the function a result answers: a result with no call
	 * before it, or after the reply that followed the call, is refused */
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_HARMONY, tool, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "message 1") && strstr(why, "no call before it"));
	const shoal_chat_call got = {"c1", "get", "{}"};
	const shoal_chat_msg late[] = {{"user", "hi"},
	                               {"assistant", "", &got, 1, NULL},
	                               {"tool", "1", NULL, 0, "c1"},
	                               {"assistant", "done"},
	                               {"tool", "2", NULL, 0, "c1"}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_HARMONY, late, 5, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "message 4"));
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_HARMONY, late, 4, true, "", "", &out, why, sizeof why),
	    SHOAL_OK);
	ASSERT_TRUE(strstr(out,
	                   "<|start|>functions.get to=assistant<|channel|>commentary<|message|>"
	                   "\"1\"<|end|>"));
	free(out);
	/* Llama 3.1 takes one call per assistant message */
	const shoal_chat_call two[] = {{"c1", "f", "{}"}, {"c2", "g", "{}"}};
	const shoal_chat_msg twice[] = {{"user", "hi"}, {"assistant", "", two, 2, NULL}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_LLAMA31, twice, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "one call per assistant message"));
	/* Mistral: a client's "call_..." id becomes 9 base-62 characters, the
	 * same for the call and its result */
	const shoal_chat_call one = {"call_abc123", "f", "{\"a\": 1}"};
	const shoal_chat_msg pair[] = {{"user", "hi"},
	                               {"assistant", "", &one, 1, NULL},
	                               {"tool", "7", NULL, 0, "call_abc123"}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_MISTRAL, pair, 3, false, "", "", &out, why, sizeof why),
	    SHOAL_OK);
	const char *id = strstr(out, "\"id\": \""), *cid = strstr(out, "\"call_id\": \"");
	ASSERT_TRUE(id && cid);
	id += 7, cid += 12;
	ASSERT_TRUE(strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") ==
	                9 &&
	            id[9] == '"');
	ASSERT_TRUE(!strncmp(id, cid, 10));
	free(out);
	const shoal_chat_msg odd[] = {{"user", "hi"}, {"robot", "42"}};
	const shoal_chat_opts with_tools = {.tools = "[{\"type\": \"function\"}]"};
	ASSERT_EQ(
	    shoal_chat_render_opts(SHOAL_CHAT_QWEN3, odd, 2, &with_tools, &out, why, sizeof why),
	    SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "message 1"));
	ASSERT_TRUE(strstr(why, "\"robot\""));
	const shoal_chat_call bad_args = {"c1", "f", "[1, 2]"};
	const shoal_chat_msg calls[] = {{"user", "hi"}, {"assistant", "", &bad_args, 1, NULL}};
	ASSERT_EQ(
	    shoal_chat_render(SHOAL_CHAT_QWEN25, calls, 2, true, "", "", &out, why, sizeof why),
	    SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "not a JSON object"));
	const shoal_chat_opts bad_tools = {.tools = "{\"type\": 1}"};
	ASSERT_EQ(
	    shoal_chat_render_opts(SHOAL_CHAT_QWEN25, tool, 2, &bad_tools, &out, why, sizeof why),
	    SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "not a JSON array"));
	ASSERT_TRUE(out == NULL);
	const shoal_chat_msg none[] = {{"user", NULL}};
	ASSERT_EQ(shoal_chat_render(SHOAL_CHAT_PLAIN, none, 1, true, "", "", &out, why, sizeof why),
	          SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "content"));
	ASSERT_EQ(shoal_chat_render(SHOAL_CHAT__COUNT, with_system, 1, true, "", "", &out, why,
	                            sizeof why),
	          SHOAL_ERR_INVAL);
	/* Mistral wants alternation too. */
	const shoal_chat_msg aa[] = {{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}};
	ASSERT_EQ(shoal_chat_render(SHOAL_CHAT_MISTRAL, aa, 3, true, "", "", &out, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "message 2"));
}

static void test_plain(void)
{
	shoal_err e;
	char *out = render(SHOAL_CHAT_PLAIN, with_system, 4, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "You are a helpful assistant.\n\nUser: Hello! Who are you?\n"
	                   "Assistant: I am a small model.\nUser: What is 2+2?\nAssistant:");
	free(out);
	out = render(SHOAL_CHAT_PLAIN, with_system + 1, 1, false, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "User: Hello! Who are you?\n");
	free(out);
}

static void test_qwen3_thinking(void)
{
	const shoal_chat_msg m[] = {
	    {"user", "q1"},
	    {"assistant", "<think>\nold reasoning\n</think>\n\nanswer one"},
	    {"user", "q2"},
	    {"assistant", "<think>\n\nnew reasoning\n\n</think>\n\nanswer two"},
	};
	shoal_err e;
	/* Before the last query only the answer stays; after it the
	 * reasoning is shown, newlines normalised. */
	char *out = render(SHOAL_CHAT_QWEN3, m, 4, false, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer "
	                   "one<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n"
	                   "<think>\nnew reasoning\n</think>\n\nanswer two<|im_end|>\n");
	free(out);
	/* The last message, after the last query, without reasoning: an
	 * empty think block. */
	const shoal_chat_msg m2[] = {{"user", "q"}, {"assistant", "a"}};
	out = render(SHOAL_CHAT_QWEN3, m2, 2, false, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
	                   "</think>\n\na<|im_end|>\n");
	free(out);
}

static void test_deepseek_and_others(void)
{
	const shoal_chat_msg m[] = {
	    {"system", "S1"},
	    {"user", "q"},
	    {"assistant", "<think>hmm</think>a"},
	    {"system", "S2"},
	};
	shoal_err e;
	char *out = render(SHOAL_CHAT_DEEPSEEK, m, 4, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	/* Systems joined at the top; no generation prompt after an
	 * assistant turn. */
	ASSERT_STR_EQ(out, "<BOS>S1\n\nS2<\xef\xbd\x9cUser\xef\xbd\x9c>q<\xef\xbd\x9c"
	                   "Assistant\xef\xbd\x9c><think></think>a<\xef\xbd\x9c"
	                   "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
	free(out);
	/* Phi without a generation prompt ends with EOS. */
	out = render(SHOAL_CHAT_PHI3, m + 1, 2, false, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<|user|>\nq<|end|>\n<|assistant|>\n<think>hmm</think>a<|end|>\n<EOS>");
	free(out);
	/* Mistral: the system goes only into a last user turn. */
	const shoal_chat_msg ms[] = {{"system", "S"}, {"user", "q"}, {"assistant", "a"}};
	out = render(SHOAL_CHAT_MISTRAL, ms, 3, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<BOS>[INST]q[/INST]a<EOS>");
	free(out);
	out = render(SHOAL_CHAT_MISTRAL, ms, 2, true, &e);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(out, "<BOS>[INST]S\n\nq[/INST]");
	free(out);
}

/* The thinking switch (chat_template_kwargs elsewhere). */
static void test_thinking_opts(void)
{
	const shoal_chat_msg m[] = {{"user", "q"}};
	shoal_chat_opts o = {.add_generation_prompt = true, .bos = "<BOS>", .thinking = 0};
	char *out = NULL, why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_chat_render_opts(SHOAL_CHAT_QWEN3, m, 1, &o, &out, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
	                   "</think>\n\n");
	free(out);
	o.thinking = 1;
	ASSERT_EQ(shoal_chat_render_opts(SHOAL_CHAT_QWEN3, m, 1, &o, &out, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
	free(out);
	ASSERT_EQ(shoal_chat_render_opts(SHOAL_CHAT_DEEPSEEK, m, 1, &o, &out, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(out, "<BOS><\xef\xbd\x9cUser\xef\xbd\x9c>q<\xef\xbd\x9c"
	                   "Assistant\xef\xbd\x9c><think>");
	free(out);
	/* Other formats ignore it. */
	ASSERT_EQ(shoal_chat_render_opts(SHOAL_CHAT_PHI3, m, 1, &o, &out, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(out, "<|user|>\nq<|end|>\n<|assistant|>\n");
	free(out);
	/* No options: no generation prompt, no BOS/EOS text. */
	ASSERT_EQ(shoal_chat_render_opts(SHOAL_CHAT_PHI3, m, 1, NULL, &out, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(out, "<|user|>\nq<|end|>\n");
	free(out);
}

static void test_style_names(void)
{
	for (int s = 0; s < SHOAL_CHAT__COUNT; s++) {
		shoal_chat_style back = SHOAL_CHAT__COUNT;
		const char *name = shoal_chat_style_name((shoal_chat_style)s);
		ASSERT_TRUE(strcmp(name, "unknown"));
		ASSERT_EQ(shoal_chat_style_from_name(name, &back), SHOAL_OK);
		ASSERT_EQ(back, s);
	}
	shoal_chat_style x;
	ASSERT_EQ(shoal_chat_style_from_name("jinja", &x), SHOAL_ERR_NOTFOUND);
	ASSERT_STR_EQ(shoal_chat_style_name(SHOAL_CHAT__COUNT), "unknown");
}

TEST_MAIN(TEST_CASE(test_bundled_templates), TEST_CASE(test_gemma_system),
          TEST_CASE(test_unknown_template), TEST_CASE(test_more_families),
          TEST_CASE(test_bad_conversations), TEST_CASE(test_plain), TEST_CASE(test_qwen3_thinking),
          TEST_CASE(test_deepseek_and_others), TEST_CASE(test_thinking_opts),
          TEST_CASE(test_style_names))
