/*
 * models/tokenizer.h: text <-> token ids from a GGUF's tokenizer metadata.
 *
 * Part: models/. Two kinds, chosen by tokenizer.ggml.model:
 *   "llama": SentencePiece-style BPE over scores, with byte fallback;
 *   "gpt2":  byte-level BPE over merges, with a pre-tokenizer chosen by
 *            tokenizer.ggml.pre ("gpt-2", "llama-bpe", "qwen2", ...), whose
 *            regexes run on PCRE2 with Unicode properties.
 * Special/control tokens are matched in the text when parse_special is set.
 * BOS/EOS ids and whether to add BOS come from the metadata.
 * A tokenizer does not change after it is built: several threads may
 * encode and decode with one tokenizer at once.
 */
#ifndef SHOAL_MODELS_TOKENIZER_H
#define SHOAL_MODELS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/gguf.h"

typedef struct shoal_tokenizer shoal_tokenizer; /* opaque */

/* Build from g's metadata (copies what it needs: g may be freed after).
 * Unknown model or pre-tokenizer -> SHOAL_ERR_UNSUPPORTED with a reason. */
shoal_err shoal_tokenizer_from_gguf(const shoal_gguf *g, shoal_tokenizer **out, char *why,
                                    size_t why_len);
void shoal_tokenizer_free(shoal_tokenizer *t); /* NULL is a no-op */

uint32_t shoal_tokenizer_n_vocab(const shoal_tokenizer *t);
int32_t shoal_tokenizer_bos(const shoal_tokenizer *t); /* -1 if none */
int32_t shoal_tokenizer_eos(const shoal_tokenizer *t); /* -1 if none */
/* Whether encoding with add_special prepends BOS (metadata, or the model
 * kind's default). */
bool shoal_tokenizer_adds_bos(const shoal_tokenizer *t);
/* End of generation: EOS, EOT, <|im_end|>, <|eot_id|>... */
bool shoal_tokenizer_is_eog(const shoal_tokenizer *t, int32_t id);

/* The id of the token whose vocabulary text is exactly text[0..len) (e.g.
 * "<|im_end|>"), or -1. */
int32_t shoal_tokenizer_find(const shoal_tokenizer *t, const char *text, size_t len);

/* Encode len bytes of text. add_special: prepend BOS when the model adds it.
 * parse_special: text of special/control tokens becomes those tokens
 * (user-defined tokens are matched always, as the reference engine does).
 * A vocabulary that adds EOS gets it appended with add_special too.
 * *ids is malloc'd (caller frees), *n_ids its count. */
shoal_err shoal_tokenizer_encode(const shoal_tokenizer *t, const char *text, size_t len,
                                 bool add_special, bool parse_special, int32_t **ids,
                                 size_t *n_ids);

/* The bytes one token stands for (SentencePiece's U+2581 becomes a space,
 * <0xAB> byte tokens become that byte; control and unknown tokens give
 * their text only if `special`). Returns the byte count (may exceed cap: then nothing is
 * written past cap); 0 for an invalid id. */
size_t shoal_tokenizer_piece(const shoal_tokenizer *t, int32_t id, bool special, char *buf,
                             size_t cap);

/* Decode ids to text (malloc'd, NUL-terminated; caller frees). The leading
 * space SentencePiece adds to the first word is removed. The bytes are the
 * tokens' bytes, unchecked (use shoal_detok for guaranteed UTF-8); an id
 * outside the vocabulary -> SHOAL_ERR_RANGE. */
shoal_err shoal_tokenizer_decode(const shoal_tokenizer *t, const int32_t *ids, size_t n,
                                 bool special, char **text, size_t *len);

/* Streaming detokenizer: feed ids one by one; bytes come out only as whole
 * UTF-8 characters (a character split across tokens is emitted once it is
 * whole). Caller-owned storage: init/fini, no allocation per token. */
typedef struct shoal_detok {
	const shoal_tokenizer *tok;
	bool first;         /* strip SentencePiece's leading space once */
	bool special;       /* print control tokens' text */
	size_t pending_len; /* bytes of an incomplete UTF-8 character */
	char pending[8];
} shoal_detok;

/* After init, `first` is set when the tokenizer strips SentencePiece's
 * leading space; a caller whose ids continue text already shown (tokens
 * generated after a prompt) clears it: d.first = false. */
void shoal_detok_init(shoal_detok *d, const shoal_tokenizer *t, bool special);
/* Append the text now complete to out[cap]; returns bytes written (a token
 * piece longer than cap is cut at cap). */
size_t shoal_detok_push(shoal_detok *d, int32_t id, char *out, size_t cap);
/* Whatever is still pending (an invalid tail comes out as U+FFFD). */
size_t shoal_detok_flush(shoal_detok *d, char *out, size_t cap);

#endif
