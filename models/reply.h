/*
 * models/reply.h: a chat reply's text read as its two parts, the reasoning
 * the model wrote before it answered and the answer itself, in the form its
 * chat format gives them (issue 40: reasoning is returned apart, as
 * `reasoning_content`, never mixed into the text).
 *
 * Part: models/. A pure function of the text: any bytes give a result
 * (tests/fuzz/fuzz_tool_call.c). The forms:
 *
 *   PLAIN    the whole text is the answer.
 *   THINK    (Qwen3, GLM-4.5/4.6, and any format whose model opens its
 *            reply with "<think>"): after optional white space, "<think>",
 *            the reasoning, "</think>", then the answer (its leading white
 *            space dropped); the reasoning is trimmed. A reply that does
 *            not open with "<think>" is all answer.
 *   HARMONY  (gpt-oss): messages "<|channel|>C<|message|>BODY", each
 *            ended by "<|end|>" (or by the end of generation: "<|return|>"
 *            and "<|call|>" are not in the text), later ones opened by
 *            "<|start|>ROLE" first (the first one's ROLE is the generation
 *            prompt's, but a call's " to=functions.N" may open the text). The bodies of the
 * analysis channel are the reasoning (joined by a blank line), those of the final channel and of
 * commentary without a recipient the answer; a message with a recipient (" to=" in its header: a
 * function call) goes into the answer as "<|channel|>HEADER<|message|>BODY" for the tool reader.
 * Text outside that form is answer.
 *
 * While the reply streams (final false), what may still change is held
 * back: a tail that may become a marker, white space that a trim may drop,
 * and the answer until the reasoning's form is known. Both parts only ever
 * grow as the text grows, so a client may be sent their new bytes at each
 * step, and the parts of the final text extend those of every prefix.
 */
#ifndef SHOAL_MODELS_REPLY_H
#define SHOAL_MODELS_REPLY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "models/chat.h"

typedef enum shoal_reply_form {
	SHOAL_REPLY_PLAIN = 0,
	SHOAL_REPLY_THINK,
	SHOAL_REPLY_HARMONY,
} shoal_reply_form;

typedef struct shoal_reply {
	char *reasoning; /* malloc'd, NUL-terminated ("" when none) */
	size_t n_reasoning;
	char *content; /* malloc'd, NUL-terminated */
	size_t n_content;
	size_t settled; /* the text's bytes [0, settled) are in the parts (or
	                   markers): the rest is held back */
} shoal_reply;

/* The form of a chat format's replies: HARMONY for gpt-oss, PLAIN for the
 * format without a template, THINK for the others. */
shoal_reply_form shoal_reply_form_of(shoal_chat_style st);

/* Read text[len] in form f; final: the reply is whole. SHOAL_OK with *out
 * filled (free with shoal_reply_fini), or NOMEM. */
shoal_err shoal_reply_split(shoal_reply_form f, const char *text, size_t len, bool final,
                            shoal_reply *out);
void shoal_reply_fini(shoal_reply *r);

#endif
