/*
 * base/err.h: the one error enum of shoal, and a helper for the one-line
 * reason that goes with an error on bad input.
 *
 * base/ sits under the four parts of DESIGN.md (models, scheduler, net,
 * runtime): every part may use it, it uses none of them.
 *
 * Convention: functions return shoal_err (SHOAL_OK = 0) and put results in
 * out-params. Functions that judge outside bytes (a file, a message, a
 * request) also take `char *why, size_t why_len` (either may be NULL/0) and
 * write there one line that names the problem.
 */
#ifndef SHOAL_BASE_ERR_H
#define SHOAL_BASE_ERR_H

#include <stddef.h>

typedef enum shoal_err {
	SHOAL_OK = 0,
	SHOAL_ERR_NOMEM,       /* out of memory */
	SHOAL_ERR_IO,          /* an OS call on a file or socket failed */
	SHOAL_ERR_FORMAT,      /* malformed input: file, message, request */
	SHOAL_ERR_UNSUPPORTED, /* well-formed but not something we run */
	SHOAL_ERR_INVAL,       /* bad argument from a caller or the CLI */
	SHOAL_ERR_RANGE,       /* a value out of its allowed range */
	SHOAL_ERR_PROTO,       /* a peer broke the protocol */
	SHOAL_ERR_AUTH,        /* missing or wrong credentials */
	SHOAL_ERR_TIMEOUT,     /* gave up waiting */
	SHOAL_ERR_NOTFOUND,    /* no such thing */
	SHOAL_ERR_BUSY,        /* try again later */
	SHOAL_ERR_CLOSED,      /* the other end went away */
	SHOAL_ERR_INFEASIBLE,  /* no plan fits the constraints */
	SHOAL_ERR_MISMATCH,    /* digests or versions differ */
	SHOAL_ERR_STATE,       /* not allowed in the current state */
	SHOAL_ERR__COUNT
} shoal_err;

/* Sizes of reason buffers (char why[...], the why_len that goes with it).
 * SHOAL_WHY_LEN: one reason. The long ones name a thing (a path in a state
 * directory, ~120 bytes; a GGUF tensor name, <= 64; a peer id, 32 hex
 * digits) and what is wrong with it (~80 bytes): 256 holds that, and is
 * the most a frame or a message carries (SHOAL_XFER_REASON_MAX 255 + NUL).
 * SHOAL_WHY_WRAP_LEN: a reason that quotes another whole reason after one
 * of its own ("fetching weights failed: <reason>", "tcp (peer: <reason>)"),
 * so 2 x 256: the quoted one is never cut. Anything longer is cut by
 * snprintf at the buffer's end, never overrun. */
#define SHOAL_WHY_LEN      256
#define SHOAL_WHY_WRAP_LEN (2 * SHOAL_WHY_LEN)

/* The precision of a "%.*s" that quotes a long string (a path, a client's
 * name) in a reason of why_len bytes and leaves `words` bytes of it to the
 * rest of the line: the quote is cut, what went wrong is not. E.g.
 *     shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %.*s: %s",
 *               SHOAL_WHY_QUOTE(why_len, 64), path, strerror(errno));  */
#define SHOAL_WHY_QUOTE(why_len, words)                                                            \
	((int)((size_t)(why_len) > (size_t)(words) ? (size_t)(why_len) - (size_t)(words) : 0))

/* A static string naming the error; never NULL. */
const char *shoal_strerror(shoal_err e);

/* Write a formatted one-line reason into why[why_len] (no-op if why is NULL
 * or why_len is 0) and return `e`, so callers can write
 *     return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad magic %x", m);  */
shoal_err shoal_why(char *why, size_t why_len, shoal_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
