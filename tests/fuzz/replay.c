/*
 * tests/fuzz/replay.c: a libFuzzer target's main() without libFuzzer: runs
 * LLVMFuzzerInitialize (when the target has one) and LLVMFuzzerTestOneInput
 * on every file of the directories or files given, naming each one first
 * (a target aborts on a broken invariant). make check builds every target
 * so (tests/fuzz/replay_<t>) and tests/sh/fuzz_corpus.sh runs each over its
 * corpus_<t>/: the seeds, and the input of every crash found, once fixed,
 * stay a test under the plain build and under ASan.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: cannot open %s\n", path);
		return -1;
	}
	size_t cap = 4096, n = 0, k;
	uint8_t *buf = malloc(cap);
	while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			uint8_t *b = realloc(buf, cap *= 2);
			if (!b)
				free(buf);
			buf = b;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "replay: out of memory for %s\n", path);
		return -1;
	}
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 1;
}

int main(int argc, char **argv)
{
	long count = 0;
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: no %s\n", argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (replay_file(argv[i]) < 0)
				return 1;
			count++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char path[4096];
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
			if (replay_file(path) < 0)
				return 1;
			count++;
		}
		if (d)
			closedir(d);
	}
	printf("replay: %ld input(s), no invariant broken\n", count);
	return count ? 0 : 1;
}
