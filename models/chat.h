/*
 * models/chat.h: turning a conversation into the prompt text a model was
 * trained on, for the chat formats of the popular model families.
 *
 * Part: models/. There is no Jinja interpreter: shoal_chat_detect()
 * recognises a family from distinctive markers in the GGUF's
 * tokenizer.chat_template and shoal_chat_render() writes that family's
 * format in C, byte for byte what the family's own template prints
 * (Jinja2, trim_blocks/lstrip_blocks, no date given); no tool calls.
 *
 * The caller passes the BOS/EOS token texts for the formats that print
 * them (Llama 3, Gemma, Mistral, DeepSeek: BOS; Mistral, Phi: EOS), and
 * tokenizes the result with special tokens parsed and no second BOS.
 */
#ifndef SHOAL_MODELS_CHAT_H
#define SHOAL_MODELS_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* A function call an assistant message made (OpenAI's tool_calls[i]):
 * id (NULL: none), the function's name, its arguments as JSON object text.
 * Strings NUL-terminated, owned by the caller. */
typedef struct shoal_chat_call {
	const char *id, *name, *arguments;
} shoal_chat_call;

/* One message; strings NUL-terminated, owned by the caller. Roles:
 * "system", "user", "assistant", and "tool" (a function's result: content,
 * tool_call_id) in the formats with tools (chat_tools.c); anything else is
 * refused. An assistant message may carry calls[n_calls] (content "" when
 * it has none). */
typedef struct shoal_chat_msg {
	const char *role;
	const char *content;
	const shoal_chat_call *calls; /* (n_calls) */
	size_t n_calls;
	const char *tool_call_id; /* tool messages; NULL elsewhere */
} shoal_chat_msg;

/* The formats. What each prints, for messages m[0..n) and generation
 * prompt g:
 *
 * PLAIN (base models, no template): each system message's content then
 *   "\n\n"; "User: <content>\n" and "Assistant: <content>\n" for the
 *   others; g adds "Assistant:" (no space: BPE vocabularies glue the space
 *   to the next word). No BOS/EOS.
 * CHATML (generic): "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message;
 *   g: "<|im_start|>assistant\n".
 * QWEN25: CHATML, plus when m[0] is not a system message the default
 *   "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
 *   system turn first.
 * QWEN3: CHATML, with Qwen3's thinking: an assistant turn after the last
 *   user turn shows its reasoning as "<think>\nR\n</think>\n\n" (always
 *   when it is the last message); earlier turns keep only the text after
 *   "</think>". g: "<|im_start|>assistant\n" (thinking left to the model).
 * LLAMA3 (3.0): BOS, then "<|start_header_id|>ROLE<|end_header_id|>\n\n"
 *   + trimmed content + "<|eot_id|>" per message; g: the assistant header.
 * LLAMA31 (3.1, 3.2, 3.3): BOS, a system header with "Cutting Knowledge
 *   Date: December 2023\nToday Date: 26 Jul 2024\n\n" (the templates'
 *   default date: renders are reproducible) and m[0]'s text when it is a
 *   system message, then as LLAMA3.
 * MISTRAL (Nemo, tekken): BOS, "[INST]user[/INST]" and "assistant" + EOS;
 *   a leading system message goes into the LAST user turn only, as
 *   "[INST]system\n\nuser[/INST]" (when the last message is that turn).
 *   Roles must alternate user/assistant; g prints nothing.
 * DEEPSEEK (V3.1, thinking off): BOS, all system texts joined by "\n\n",
 *   "<｜User｜>user"; an assistant turn that follows a user turn opens with
 *   "<｜Assistant｜><think></think>"; then its text after the first
 *   "</think>" and "<｜end▁of▁sentence｜>"; g after a user turn:
 *   "<｜Assistant｜><think></think>".
 * GEMMA (Gemma 2): BOS, "<start_of_turn>user|model\n" + trimmed content +
 *   "<end_of_turn>\n"; roles must alternate starting with user; g:
 *   "<start_of_turn>model\n". Gemma 2 has no system role: a leading system
 *   message is folded into the first user turn as "SYSTEM\n\nUSER", the
 *   way Gemma 3's own template does it; a system message anywhere else is
 *   refused.
 * PHI3 (Phi-3.5): "<|system|>\n", "<|user|>\n" or "<|assistant|>\n" +
 *   content + "<|end|>\n" (empty system messages are skipped); g:
 *   "<|assistant|>\n", otherwise EOS.
 * GLM (GLM-4.5, 4.6): "[gMASK]<sop>", then "<|system|>\n" + text,
 *   "<|user|>\n" + text (+ "/nothink" with thinking off, unless it ends so),
 *   "<|assistant|>" + "\n<think>R</think>" (R: the reasoning of a turn
 *   after the last user turn, stripped) or "\n<think></think>", then
 *   "\n" + the stripped text after the last "</think>" when not empty; g:
 *   "<|assistant|>", + "\n<think></think>" with thinking off. Tools,
 *   calls ("\n<tool_call>NAME" + "\n<arg_key>K</arg_key>\n<arg_value>V"
 *   "</arg_value>" per argument, V a string as is or tojson, +
 *   "\n</tool_call>") and results ("<|observation|>" once per run of
 *   them, "\n<tool_response>\nT\n</tool_response>" each) as its
 *   template (models/chat_tools_fmt.c).
 * HARMONY (gpt-oss): a system message of the format's own (identity,
 *   knowledge cutoff, the date and reasoning effort of shoal_chat_opts,
 *   the valid channels), "<|start|>developer<|message|># Instructions\n\n"
 *   + m[0]'s text + "\n\n<|end|>" when m[0] is a non-empty system
 *   message (a later system message is refused: the template drops it),
 *   "<|start|>user<|message|>" + text + "<|end|>", and
 *   "<|start|>assistant<|channel|>final<|message|>" + text + "<|end|>"
 *   ("<|return|>" for a last assistant message without g); g:
 *   "<|start|>assistant". Tools, calls (the first of a message, as the
 *   template prints one) and results as its template
 *   (models/chat_harmony.c).
 *
 * "Trimmed" means leading and trailing ASCII whitespace removed (Jinja's
 * trim also strips Unicode spaces; chats rarely end in those). */
typedef enum shoal_chat_style {
	SHOAL_CHAT_PLAIN = 0,
	SHOAL_CHAT_CHATML,
	SHOAL_CHAT_QWEN25,
	SHOAL_CHAT_QWEN3,
	SHOAL_CHAT_LLAMA3,
	SHOAL_CHAT_LLAMA31,
	SHOAL_CHAT_MISTRAL,
	SHOAL_CHAT_DEEPSEEK,
	SHOAL_CHAT_GEMMA,
	SHOAL_CHAT_PHI3,
	SHOAL_CHAT_GLM,
	SHOAL_CHAT_HARMONY,
	SHOAL_CHAT__COUNT
} shoal_chat_style;

/* The family of a chat template (len bytes, need not be NUL-terminated).
 * tmpl NULL or len 0 -> SHOAL_CHAT_PLAIN (a base model has no template).
 * A template of no known family -> SHOAL_ERR_UNSUPPORTED, with a reason
 * that quotes its first 60 characters and its FNV-1a 64 hash. */
shoal_err shoal_chat_detect(const char *tmpl, size_t len, shoal_chat_style *out, char *why,
                            size_t why_len);

/* Render msgs[0..n) in style s; add_generation_prompt appends the opening
 * of the assistant's turn. bos/eos: the token texts to print where the
 * format wants them (NULL counts as ""). *out: a malloc'd NUL-terminated
 * string the caller frees (NULL on error). Errors, with a reason: n == 0
 * or a NULL string (SHOAL_ERR_INVAL), an unknown role or a conversation
 * the format cannot express (SHOAL_ERR_UNSUPPORTED), out of memory. */
shoal_err shoal_chat_render(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, const char *bos, const char *eos,
                            char **out, char *why, size_t why_len);

/* Switches some templates read from their caller (as chat_template_kwargs
 * in other servers). */
typedef struct shoal_chat_opts {
	bool add_generation_prompt;
	const char *bos, *eos; /* as for shoal_chat_render; NULL counts as "" */
	/* Thinking, for the formats that have a switch (others ignore it):
	 * -1 the template's default; 0 off; 1 on. QWEN3 (default on): off
	 * adds "<think>\n\n</think>\n\n" after the generation prompt.
	 * DEEPSEEK (default off): on ends the generation prompt with "<think>"
	 * instead of "<think></think>". */
	int thinking;
	/* The functions the model may call: a JSON array of OpenAI tool
	 * objects ({"type": "function", "function": {...}}), NULL or "[]":
	 * none. Only the formats with a tool syntax take tools, "tool"
	 * messages or calls (shoal_chat_tool_syntax); others: UNSUPPORTED. */
	const char *tools;
	/* HARMONY (gpt-oss) writes the date into its system message: "YYYY-MM-DD"
	 * (NULL: today, UTC, as the template's strftime_now) and a reasoning
	 * effort: "low", "medium" or "high" (NULL: "medium", its default). */
	const char *date;
	const char *reasoning;
} shoal_chat_opts;

/* How a format's model calls functions (models/tool_call.h parses it). */
typedef enum shoal_chat_tools {
	SHOAL_CHAT_TOOLS_NONE = 0, /* the template defines no tool syntax */
	SHOAL_CHAT_TOOLS_HERMES,   /* <tool_call>\n{"name": N, "arguments": A}\n</tool_call> */
	SHOAL_CHAT_TOOLS_LLAMA31,  /* {"name": N, "parameters": A} or <|python_tag|>... */
	SHOAL_CHAT_TOOLS_MISTRAL,  /* [TOOL_CALLS][{"name": N, "arguments": A, "id": I}] */
	SHOAL_CHAT_TOOLS_DEEPSEEK, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>A...
	                            */
	SHOAL_CHAT_TOOLS_GLM,     /* <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...
	                             </tool_call> */
	SHOAL_CHAT_TOOLS_HARMONY, /* gpt-oss: <|start|>assistant to=functions.N<|channel|>
	                             commentary json<|message|>A<|call|> */
} shoal_chat_tools;

/* The tool syntax of a format: HERMES for QWEN25 and QWEN3, LLAMA31,
 * MISTRAL, DEEPSEEK, GLM, HARMONY (gpt-oss) for theirs; NONE for the others, which refuse tools in
 * a render. Each format with a syntax renders tools, calls and "tool"
 * messages byte for byte as its template does (models/chat_tools.c,
 * chat_tools_fmt.c), with three choices where a template cannot serve an
 * API's conversation:
 *   - LLAMA31 (tools in the first user message, the template's default)
 *     refuses an assistant message with more than one call, as the
 *     template does;
 *   - MISTRAL needs call ids of 9 letters and digits: any other id (the
 *     clients' "call_..." ids) is replaced by 9 base-62 characters of its
 *     FNV-1a hash, the same for a call and its result; a call or a result
 *     without an id is refused;
 *   - DEEPSEEK's template prints no tools: shoal puts them (name,
 *     description, parameters) and the call syntax in a first system text,
 *     before the conversation's own system texts, as one more system
 *     message would be printed. */
shoal_chat_tools shoal_chat_tool_syntax(shoal_chat_style s);

/* shoal_chat_render with options (o NULL: no generation prompt, no
 * BOS/EOS text, default thinking). Same results and ownership. */
shoal_err shoal_chat_render_opts(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                                 const shoal_chat_opts *o, char **out, char *why, size_t why_len);

/* A static lower-case name ("plain", "chatml", "qwen2.5", "qwen3",
 * "llama3", "llama3.1", "mistral-nemo", "deepseek3.1", "gemma", "phi3.5",
 * "glm4.5", "gpt-oss");
 * "unknown" for a value out of range. */
const char *shoal_chat_style_name(shoal_chat_style s);

/* The style with that name (as above; for a CLI or config override).
 * Unknown name -> SHOAL_ERR_NOTFOUND. */
shoal_err shoal_chat_style_from_name(const char *name, shoal_chat_style *out);

#endif
