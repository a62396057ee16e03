/*
 * models/prompt.c: the token ids of a prompt (models/prompt.h): the chat
 * template rendering and tokenizing that a local `shoal run` and the owner
 * of a cluster run share, so both feed the model the same ids.
 *
 * Part: models/.
 */
#include "config.h"

#include "models/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "models/chat.h"

shoal_err shoal_prompt_ids(const shoal_model *m, const shoal_tokenizer *tok, const char *prompt,
                           bool chat, const char *system, int32_t **ids, size_t *n_ids, char *why,
                           size_t why_len)
{
	if (!chat)
		return shoal_tokenizer_encode(tok, prompt, strlen(prompt), true, false, ids, n_ids);
	if (system && strlen(system) > SHOAL_RUN_MAX_SYSTEM)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "a system text over %u bytes",
		                 SHOAL_RUN_MAX_SYSTEM);
	shoal_chat_msg msgs[2];
	size_t n_msgs = 0;
	if (system)
		msgs[n_msgs++] = (shoal_chat_msg){"system", system};
	msgs[n_msgs++] = (shoal_chat_msg){"user", prompt};
	return shoal_prompt_chat_ids(m, tok, msgs, n_msgs, ids, n_ids, why, why_len);
}

shoal_err shoal_prompt_chat_style(const shoal_model *m, shoal_chat_style *out, char *why,
                                  size_t why_len)
{
#ifdef SHOAL_TEST_HOOKS
	const char *force = getenv("SHOAL_TEST_CHAT_STYLE");
	if (force && force[0])
		return shoal_chat_style_from_name(force, out);
#endif
	const char *tmpl = NULL;
	size_t tlen = 0;
	shoal_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl, &tlen);
	return shoal_chat_detect(tmpl, tlen, out, why, why_len);
}

shoal_err shoal_prompt_chat_ids(const shoal_model *m, const shoal_tokenizer *tok,
                                const shoal_chat_msg *msgs, size_t n_msgs, int32_t **ids,
                                size_t *n_ids, char *why, size_t why_len)
{
	return shoal_prompt_chat_tools_ids(m, tok, msgs, n_msgs, NULL, ids, n_ids, why, why_len);
}

shoal_err shoal_prompt_chat_tools_ids(const shoal_model *m, const shoal_tokenizer *tok,
                                      const shoal_chat_msg *msgs, size_t n_msgs, const char *tools,
                                      int32_t **ids, size_t *n_ids, char *why, size_t why_len)
{
	shoal_chat_style style;
	shoal_err err = shoal_prompt_chat_style(m, &style, why, why_len);
	if (err)
		return err;
	char bos[64] = "", eos[64] = "";
	int32_t bos_id = shoal_tokenizer_bos(tok), eos_id = shoal_tokenizer_eos(tok);
	if (bos_id >= 0) {
		size_t n = shoal_tokenizer_piece(tok, bos_id, true, bos, sizeof bos - 1);
		bos[n < sizeof bos ? n : 0] = 0;
	}
	if (eos_id >= 0) {
		size_t n = shoal_tokenizer_piece(tok, eos_id, true, eos, sizeof eos - 1);
		eos[n < sizeof eos ? n : 0] = 0;
	}
	char *text = NULL;
	shoal_chat_opts o = {
	    .add_generation_prompt = true, .bos = bos, .eos = eos, .thinking = -1, .tools = tools};
	err = shoal_chat_render_opts(style, msgs, n_msgs, &o, &text, why, why_len);
	if (err)
		return err;
	/* formats that print BOS themselves must not get a second one */
	bool add_bos = !(bos[0] && !strncmp(text, bos, strlen(bos)));
	err = shoal_tokenizer_encode(tok, text, strlen(text), add_bos, true, ids, n_ids);
	free(text);
	return err;
}
