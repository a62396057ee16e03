/*
 * models/ds_tokens.h: DeepSeek V3.1's special tokens as UTF-8 string
 * literals, for the files of models/ that print or read them (the chat
 * renderers, the tool-call reader, the grammar of a forced call).
 *
 * Part: models/ (internal: not for other parts).
 */
#ifndef SHOAL_MODELS_DS_TOKENS_H
#define SHOAL_MODELS_DS_TOKENS_H

/* DeepSeek's special tokens, in UTF-8: U+FF5C (full-width bar) is
 * EF BD 9C, U+2581 (lower one-eighth block) is E2 96 81. */
#define DS_BAR         "\xef\xbd\x9c"
#define DS_SP          "\xe2\x96\x81"
#define DS_USER        "<" DS_BAR "User" DS_BAR ">"      /* <｜User｜> */
#define DS_ASSISTANT   "<" DS_BAR "Assistant" DS_BAR ">" /* <｜Assistant｜> */
#define DS_EOS         "<" DS_BAR "end" DS_SP "of" DS_SP "sentence" DS_BAR ">" /* <｜end▁of▁sentence｜> */
#define DS_CALLS_BEGIN "<" DS_BAR "tool" DS_SP "calls" DS_SP "begin" DS_BAR ">"
#define DS_CALLS_END   "<" DS_BAR "tool" DS_SP "calls" DS_SP "end" DS_BAR ">"
#define DS_CALL_BEGIN  "<" DS_BAR "tool" DS_SP "call" DS_SP "begin" DS_BAR ">"
#define DS_CALL_END    "<" DS_BAR "tool" DS_SP "call" DS_SP "end" DS_BAR ">"
#define DS_SEP         "<" DS_BAR "tool" DS_SP "sep" DS_BAR ">"
#define DS_OUT_BEGIN   "<" DS_BAR "tool" DS_SP "output" DS_SP "begin" DS_BAR ">"
#define DS_OUT_END     "<" DS_BAR "tool" DS_SP "output" DS_SP "end" DS_BAR ">"

#endif
