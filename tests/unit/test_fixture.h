/*
 * tests/unit/test_fixture.h: model fixtures for the engine tests: random
 * models made by tests/helpers/gen_fixture into a temporary folder (kept for
 * the program's run, removed by fx_cleanup), opening a model file, argmax.
 */
#ifndef SHOAL_TESTS_TEST_FIXTURE_H
#define SHOAL_TESTS_TEST_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "models/model.h"

static char fx_dir[256];

/* The fixture `name` made with gen_fixture's args (made once per run), or
 * NULL if it cannot be made. The path lives until the 8th later call. */
static inline const char *fx_path(const char *name, const char *args)
{
	static char path[8][512];
	static int slot;
	char *p = path[slot++ % 8];
	const char *bdir = getenv("SHOAL_BUILDDIR");
	if (!bdir)
		bdir = ".";
	if (!fx_dir[0]) {
		snprintf(fx_dir, sizeof fx_dir, "/tmp/shoal-test-fx-XXXXXX");
		if (!mkdtemp(fx_dir)) {
			fx_dir[0] = 0;
			return NULL;
		}
	}
	snprintf(p, 512, "%s/%s.gguf", fx_dir, name);
	if (access(p, R_OK) == 0)
		return p;
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s/tests/helpers/gen_fixture %s %s >/dev/null 2>&1", bdir, args,
	         p);
	if (system(cmd) != 0)
		return NULL;
	return p;
}

static inline void fx_cleanup(void)
{
	if (fx_dir[0]) {
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", fx_dir);
	}
}

/* The model at path (NULL path or a bad file: NULL, the reason on stderr). */
static inline shoal_model *open_model(const char *path)
{
	shoal_model *m = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (!path)
		return NULL;
	if (shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "open %s: %s\n", path, why);
		return NULL;
	}
	return m;
}

/* The first index of the largest value. */
static inline int32_t argmax(const float *x, uint32_t n)
{
	uint32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return (int32_t)b;
}

#endif
