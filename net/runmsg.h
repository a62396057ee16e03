/*
 * net/runmsg.h: the run protocol between `shoal run --peer` (the client)
 * and the peer that owns its session, and the run limits that local
 * `shoal run`, the client and the owner all apply.
 *
 * Part: net/. Three control messages (net/ctlmsg.h types 68-70) in the
 * ctlmsg envelope, one msgpack map {t, v, seq, ...}, with typed fields:
 *
 *   RUN_REQ   prompt: str, max_tokens: uint, logprobs: uint, temp: float,
 *             top_k: uint, top_p: float, min_p: float,
 *             repeat_penalty: float, seed: uint,
 *             chat: bool (optional), system: str (optional; the owner
 *             renders its model's chat template, as local `shoal run --chat`),
 *             speculate: str (optional; a `--speculate` name, the drafter of
 *             this run, which the owner checks; absent: the owner's own)
 *   RUN_TOKEN id: int, text: str, logprob: float,
 *             top_ids: [int, ...], top_lps: [float, ...]  (one per token)
 *   RUN_END   err: uint (a shoal_err; 0: the run finished), retry: bool,
 *             why: str (the reason when err != 0), text: str (the
 *             detokenizer's tail when err == 0), tokens: uint (optional:
 *             the RUN_TOKENs the owner sent before it)
 *
 * "float" accepts a msgpack float or integer, "uint" a non-negative
 * integer, "int" any integer within 32 bits. Keys not listed are ignored;
 * none may be one of the envelope's or of another ctlmsg type (t, v, seq,
 * lep, rep, n, pad, json), which shoal_ctlmsg_decode reads for every type.
 *
 * Protocol invariants (the decoder checks 1-4):
 *  1. Every field of the type is present and typed, except chat, system
 *     and speculate; a value outside the run limits below is refused
 *     (RANGE).
 *  2. top_ids and top_lps have the same length, at most
 *     SHOAL_RUN_MAX_LOGPROBS; texts and reasons fit their limits.
 *  3. err is a known shoal_err; why is not empty when err != 0.
 *  4. retry is only set with err != 0: the owner says that the same
 *     request, sent again, may succeed (the plan changed under it).
 *     The client decides on err and retry, never on the text of why.
 *  5. Every reply carries the request's seq; RUN_END is the last one.
 *  6. A client that got fewer RUN_TOKENs than RUN_END's tokens says so and
 *     fails: a full queue drops a control message (net/ctl.c), and the
 *     text without it is wrong.
 */
#ifndef SHOAL_NET_RUNMSG_H
#define SHOAL_NET_RUNMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/run_limits.h"
#include "net/wire.h"

/* ---- run limits --------------------------------------------------------- */

/* The run limits (default and largest -n, logprobs, system and prompt
 * texts) are base/run_limits.h's. */
/* Sampler settings at most (the least is 0 for each): a temperature of 1e6
 * is already uniform; a repetition penalty of 100 already forbids. */
#define SHOAL_RUN_MAX_TEMP           1e6
#define SHOAL_RUN_MAX_TOP_K          1000000000u
#define SHOAL_RUN_MAX_REPEAT_PENALTY 100.0
#define SHOAL_RUN_MAX_SEED           1.8e19 /* below 2^64, as a CLI number */
/* Text one RUN_TOKEN or RUN_END carries at most: the detokenizer emits a
 * token's piece (a few bytes, a few hundred for a long special token); a
 * reason is one log line. */
#define SHOAL_RUN_MAX_TEXT 512u
#define SHOAL_RUN_MAX_WHY  256u
/* A speculate name's bytes at most: "lookup", the longest, is 6. */
#define SHOAL_RUN_MAX_SPECULATE 16u
/* Bytes that any RUN_TOKEN or RUN_END within the limits encodes into
 * (checked by tests/unit/test_runmsg): text 512 + 5, why 256 + 3,
 * 100 x (5 + 5) top pairs + 6, keys and envelope under 120. An owner
 * reserves this once and never grows its buffer per token. */
#define SHOAL_RUN_MSG_RESERVE 2048u

/* ---- messages ------------------------------------------------------------ */

/* Strings are borrowed: on encode the caller's, on decode they point into
 * the message bytes (NOT NUL-terminated) and live as long as those. */
typedef struct shoal_run_req {
	const char *prompt;
	size_t prompt_len;
	uint32_t max_tokens, logprobs, top_k;
	float temp, top_p, min_p, repeat_penalty;
	uint64_t seed;
	bool chat;
	const char *system; /* NULL: none */
	size_t system_len;
	const char *speculate; /* NULL: the owner's --speculate */
	size_t speculate_len;
} shoal_run_req;

typedef struct shoal_run_token {
	int32_t id;
	float logprob;
	const char *text;
	size_t text_len;
	uint32_t n_top;
	int32_t top_ids[SHOAL_RUN_MAX_LOGPROBS]; /* (n_top) best first */
	float top_lps[SHOAL_RUN_MAX_LOGPROBS];   /* (n_top) */
} shoal_run_token;

typedef struct shoal_run_end {
	shoal_err err; /* SHOAL_OK: the run finished */
	bool retry;    /* with err: the same request may succeed if sent again */
	const char *why, *text;
	size_t why_len, text_len;
	uint32_t tokens; /* RUN_TOKENs sent before this (decode: 0 if absent) */
	bool has_tokens; /* decode: "tokens" was there (encode: always sent) */
} shoal_run_end;

/* A decoded run message: type is SHOAL_CTLMSG_RUN_*, the member of that
 * name is filled. */
typedef struct shoal_runmsg {
	uint32_t type;
	uint64_t seq;
	shoal_run_req req;
	shoal_run_token tok;
	shoal_run_end end;
} shoal_runmsg;

/* Encode one message with seq into b (b->len reset first; b grows only
 * when its capacity is short: see SHOAL_RUN_MSG_RESERVE). A message
 * outside the limits is a caller bug: SHOAL_ERR_RANGE, b unchanged in
 * meaning. SHOAL_ERR_NOMEM when b cannot grow. */
shoal_err shoal_runmsg_encode_req(uint64_t seq, const shoal_run_req *r, shoal_wire_buf *b);
shoal_err shoal_runmsg_encode_token(uint64_t seq, const shoal_run_token *t, shoal_wire_buf *b);
shoal_err shoal_runmsg_encode_end(uint64_t seq, const shoal_run_end *e, shoal_wire_buf *b);

/* Decode buf[len], a RUN_* message, into m (strings point into buf).
 * SHOAL_ERR_FORMAT (malformed, a field missing or mistyped),
 * SHOAL_ERR_RANGE (a value outside the limits), SHOAL_ERR_UNSUPPORTED
 * (another schema, or not a RUN_* type), each with a reason in why. */
shoal_err shoal_runmsg_decode(const uint8_t *buf, size_t len, shoal_runmsg *m, char *why,
                              size_t why_len);

#endif
