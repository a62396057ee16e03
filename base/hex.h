/*
 * base/hex.h: bytes to lowercase hex and back, for ids and digests in
 * logs, JSON and files.
 *
 * Encoding writes lowercase; decoding takes either case, since ids and
 * digests typed or pasted by a person may be upper case.
 */
#ifndef SHOAL_BASE_HEX_H
#define SHOAL_BASE_HEX_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The 2n lowercase hex digits of p[n] and a NUL into out[2n + 1]. */
void shoal_hex_encode(const void *p, size_t n, char *out);

/* The value of one hex digit of either case (0..15), or -1. */
int shoal_hex_digit(char c);

/* Decode hex[hex_len], which must be exactly 2n hex digits of either case,
 * into out[n]. SHOAL_ERR_FORMAT on any other length or a non-hex character,
 * and then out is left as it was. */
shoal_err shoal_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t n);

#endif
