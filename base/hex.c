/*
 * base/hex.c: bytes to lowercase hex and back (see hex.h).
 */
#include "base/hex.h"

void shoal_hex_encode(const void *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int shoal_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

shoal_err shoal_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t n)
{
	if (n > SIZE_MAX / 2 || hex_len != 2 * n)
		return SHOAL_ERR_FORMAT;
	/* Check every digit first, so that a bad one leaves out untouched. */
	for (size_t i = 0; i < hex_len; i++)
		if (shoal_hex_digit(hex[i]) < 0)
			return SHOAL_ERR_FORMAT;
	for (size_t i = 0; i < n; i++)
		out[i] =
		    (uint8_t)(shoal_hex_digit(hex[2 * i]) << 4 | shoal_hex_digit(hex[2 * i + 1]));
	return SHOAL_OK;
}
