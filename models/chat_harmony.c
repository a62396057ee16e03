/*
 * models/chat_harmony.c: gpt-oss's "harmony" chat format (models/chat.h,
 * SHOAL_CHAT_HARMONY), without tools: what the model's own template
 * prints for system, user and assistant messages.
 *
 * Part: models/. Called by chat.c's renderer after its role checks.
 *
 * The format: a system message the template writes itself (identity,
 * knowledge cutoff, the current date, the reasoning effort, the valid
 * channels), a developer message "# Instructions\n\nSYSTEM\n\n" when the
 * conversation opens with a non-empty system message, then
 * "<|start|>ROLE<|message|>CONTENT<|end|>" per turn, an assistant's text
 * on the final channel ("<|start|>assistant<|channel|>final<|message|>");
 * the last message, when it is the assistant's and no generation prompt
 * follows, ends in "<|return|>" (training's form). Reasoning of earlier
 * turns (the analysis channel) is never printed back, as the template
 * drops it. The generation prompt is "<|start|>assistant": the model
 * writes the channel itself.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "models/chat_impl.h"

/* The text a message may not carry: channel markup belongs in the
 * format, not in content (the template raises on it). */
static const char *const harmony_markup[] = {"<|channel|>analysis<|message|>",
                                             "<|channel|>final<|message|>"};

static bool harmony_date_ok(const char *d)
{
	/* YYYY-MM-DD */
	if (strlen(d) != 10 || d[4] != '-' || d[7] != '-')
		return false;
	for (int i = 0; i < 10; i++)
		if (i != 4 && i != 7 && (d[i] < '0' || d[i] > '9'))
			return false;
	return true;
}

shoal_err chat__render_harmony(const shoal_chat_msg *m, size_t n, const shoal_chat_opts *o,
                               chat_out *b, char *why, size_t why_len)
{
	char today[16];
	const char *date = o->date;
	if (!date) {
		time_t t = time(NULL);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(today, sizeof today, "%Y-%m-%d", &tm);
		date = today;
	}
	if (!harmony_date_ok(date))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "chat date \"%.16s\": not YYYY-MM-DD", date);
	const char *effort = o->reasoning ? o->reasoning : "medium";
	if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high"))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "reasoning effort \"%.16s\": low, medium or high", effort);
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && !strcmp(m[i].role, "system"))
			return shoal_why(
			    why, why_len, SHOAL_ERR_UNSUPPORTED,
			    "message %zu: gpt-oss's format takes a system message only "
			    "as the first message",
			    i);
		for (size_t k = 0; k < sizeof harmony_markup / sizeof *harmony_markup; k++)
			if (!strcmp(m[i].role, "assistant") &&
			    strstr(m[i].content, harmony_markup[k]))
				return shoal_why(
				    why, why_len, SHOAL_ERR_INVAL,
				    "message %zu: an assistant text with channel markup "
				    "(%s): give the reply's text alone",
				    i, harmony_markup[k]);
	}
	chat__puts(b, "<|start|>system<|message|>"
	              "You are ChatGPT, a large language model trained by OpenAI.\n"
	              "Knowledge cutoff: 2024-06\n"
	              "Current date: ");
	chat__puts(b, date);
	chat__puts(b, "\n\nReasoning: ");
	chat__puts(b, effort);
	chat__puts(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be "
	              "included for every message.<|end|>");
	size_t i = 0;
	if (!strcmp(m[0].role, "system")) {
		if (m[0].content[0]) {
			chat__puts(b, "<|start|>developer<|message|># Instructions\n\n");
			chat__puts(b, m[0].content);
			chat__puts(b, "\n\n<|end|>");
		}
		i = 1;
	}
	for (; i < n; i++) {
		if (!strcmp(m[i].role, "user")) {
			chat__puts(b, "<|start|>user<|message|>");
			chat__puts(b, m[i].content);
			chat__puts(b, "<|end|>");
			continue;
		}
		chat__puts(b, "<|start|>assistant<|channel|>final<|message|>");
		chat__puts(b, m[i].content);
		chat__puts(b, i == n - 1 && !o->add_generation_prompt ? "<|return|>" : "<|end|>");
	}
	if (o->add_generation_prompt)
		chat__puts(b, "<|start|>assistant");
	return SHOAL_OK;
}
