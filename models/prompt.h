/*
 * models/prompt.h: a prompt (optionally as a chat turn after a system
 * message) to the token ids the model is fed.
 *
 * Part: models/ (uses the chat formats and the tokenizer).
 */
#ifndef SHOAL_MODELS_PROMPT_H
#define SHOAL_MODELS_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/run_limits.h"
#include "models/chat.h"
#include "models/model.h"
#include "models/tokenizer.h"

/* The token ids of a `shoal run` prompt, shared by the
 * local run and the owner of a --peer run (runtime/node/serve_clients.c) so both feed
 * the model the same ids. chat: the prompt becomes a user message, after
 * system (NULL: none; ignored without chat), rendered with the model's
 * chat template (tokenizer.chat_template; PLAIN without one) and tokenized
 * with special tokens parsed (a system text over SHOAL_RUN_MAX_SYSTEM
 * bytes: RANGE). *ids is malloc'd, the caller's to free. m, tok
 * and the strings are borrowed. Errors (unknown template, render failure,
 * out of memory) come with a reason in why. */
shoal_err shoal_prompt_ids(const shoal_model *m, const shoal_tokenizer *tok, const char *prompt,
                           bool chat, const char *system, int32_t **ids, size_t *n_ids, char *why,
                           size_t why_len);

/* A whole conversation msgs[n_msgs] (an API request's messages), rendered
 * with the model's chat template and a generation prompt, tokenized as
 * above. */
shoal_err shoal_prompt_chat_ids(const shoal_model *m, const shoal_tokenizer *tok,
                                const shoal_chat_msg *msgs, size_t n_msgs, int32_t **ids,
                                size_t *n_ids, char *why, size_t why_len);

/* The same with the functions the model may call (tools: a JSON array of
 * OpenAI tools, NULL: none; see shoal_chat_opts). */
shoal_err shoal_prompt_chat_tools_ids(const shoal_model *m, const shoal_tokenizer *tok,
                                      const shoal_chat_msg *msgs, size_t n_msgs, const char *tools,
                                      int32_t **ids, size_t *n_ids, char *why, size_t why_len);

/* The chat format of a model's template (tokenizer.chat_template; PLAIN
 * without one). With ./configure --enable-test-hooks, the environment's
 * SHOAL_TEST_CHAT_STYLE (a style name, models/chat.h) overrides it: the
 * tests' models have no template, and tests of tool calls need one. */
shoal_err shoal_prompt_chat_style(const shoal_model *m, shoal_chat_style *out, char *why,
                                  size_t why_len);

#endif
