/*
 * base/fmt.c: quantities as people read them (see fmt.h).
 */
#include "base/fmt.h"

#include <stdio.h>

const char *shoal_fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (!len)
		return buf;
	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	/* Tenths of the unit, rounded half up, in integers: bytes * 10 could
	 * overflow, but the remainder times 10 cannot (it is below 2^60 * 10). */
	size_t k = 1;
	uint64_t tenths = 0;
	for (;; k++) {
		uint64_t u = 1ull << (10 * k);
		tenths = bytes / u * 10 + (bytes % u * 10 + u / 2) / u;
		/* 1023.96 KiB rounds to 1024.0: show it as 1.0 MiB */
		if (tenths < 10240 || k + 1 == sizeof unit / sizeof unit[0])
			break;
	}
	snprintf(buf, len, "%llu.%llu %s", (unsigned long long)(tenths / 10),
	         (unsigned long long)(tenths % 10), unit[k]);
	return buf;
}
