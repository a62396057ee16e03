/*
 * tests/fuzz/fuzz_seed.h: how a target writes its seed corpus from real
 * encoders. When SHOAL_FUZZ_SEEDS names a directory, fuzz_seed() writes one
 * file there per call (named after the target and a counter); otherwise it
 * does nothing. The committed corpus_<target>/ directories were made so:
 *
 *   SHOAL_FUZZ_SEEDS=tests/fuzz/corpus_ctlmsg tests/fuzz/fuzz_ctlmsg -runs=0
 */
#ifndef SHOAL_TESTS_FUZZ_SEED_H
#define SHOAL_TESTS_FUZZ_SEED_H

#include <stdio.h>
#include <stdlib.h>

static inline void fuzz_seed(const char *target, const void *p, size_t n)
{
	static unsigned count;
	const char *dir = getenv("SHOAL_FUZZ_SEEDS");
	char path[512];
	if (!dir)
		return;
	snprintf(path, sizeof path, "%s/%s%02u", dir, target, count++);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		abort();
}

#endif
