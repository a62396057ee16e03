/*
 * base/err.c: names of the error codes and the one-line reason helper.
 */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const err_names[SHOAL_ERR__COUNT] = {
    [SHOAL_OK] = "ok",
    [SHOAL_ERR_NOMEM] = "out of memory",
    [SHOAL_ERR_IO] = "I/O error",
    [SHOAL_ERR_FORMAT] = "malformed input",
    [SHOAL_ERR_UNSUPPORTED] = "unsupported",
    [SHOAL_ERR_INVAL] = "invalid argument",
    [SHOAL_ERR_RANGE] = "value out of range",
    [SHOAL_ERR_PROTO] = "protocol error",
    [SHOAL_ERR_AUTH] = "authentication failed",
    [SHOAL_ERR_TIMEOUT] = "timed out",
    [SHOAL_ERR_NOTFOUND] = "not found",
    [SHOAL_ERR_BUSY] = "busy",
    [SHOAL_ERR_CLOSED] = "connection closed",
    [SHOAL_ERR_INFEASIBLE] = "infeasible",
    [SHOAL_ERR_MISMATCH] = "mismatch",
    [SHOAL_ERR_STATE] = "wrong state",
};

const char *shoal_strerror(shoal_err e)
{
	if ((unsigned)e >= SHOAL_ERR__COUNT || !err_names[e])
		return "unknown error";
	return err_names[e];
}

shoal_err shoal_why(char *why, size_t why_len, shoal_err e, const char *fmt, ...)
{
	if (why && why_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return e;
}
