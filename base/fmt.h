/*
 * base/fmt.h: quantities as people read them, for logs and the messages
 * clients and `shoal plan` print.
 *
 * Sizes use binary units (1 KiB = 1024 B) and one decimal, with the unit
 * chosen so that the number stays below 1024: "512 B", "14.2 MiB",
 * "3.1 GiB". A small need is never shown as "0.0 GiB".
 */
#ifndef SHOAL_BASE_FMT_H
#define SHOAL_BASE_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Room for any size: the longest is "1023.9 KiB" (10 characters). */
#define SHOAL_FMT_BYTES_LEN 16

/* bytes as "14.2 MiB" into buf[len] (truncated to fit, always terminated
 * when len > 0); returns buf, for use as a printf argument. */
const char *shoal_fmt_bytes(char *buf, size_t len, uint64_t bytes);

#endif
