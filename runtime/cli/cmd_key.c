/*
 * runtime/cli/cmd_key.c: `shoal key`: make and inspect cluster keys.
 *
 *   shoal key new [FILE]          write a new random key (mode 0600; never
 *                                 overwrites); print its fingerprint
 *   shoal key fingerprint [FILE]  print the fingerprint of a key file
 *
 * Without FILE, the key is <state-dir>/cluster.key (the directory made,
 * mode 0700): where `shoal node`, `run` and `status` look by default, and
 * outside any source tree, so no secret ends up in a commit. Copy it to
 * the same place on every peer (or pass --key FILE). The file format is
 * documented in net/key.h.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/statedir.h"
#include "net/key.h"
#include "runtime/cli/cli.h"

static void cmd_key_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal key new [FILE]          write a new cluster key (mode 0600)\n"
	        "       shoal key fingerprint [FILE]  print a key's public fingerprint\n"
	        "\nWithout FILE: <state-dir>/%s (the default of `shoal node`, `run` and\n"
	        "`status`; SHOAL_STATE_DIR or ~/.local/state/shoal), kept out of any source\n"
	        "tree. Copy that file to the same place on every peer, or pass --key FILE.\n",
	        SHOAL_KEY_DEFAULT_NAME);
}

/* <state-dir>/cluster.key into path; make the directory when asked. */
static int cmd_key_default(char *path, size_t cap, bool make)
{
	char dir[1024];
	if (shoal_state_dir_default(dir, sizeof dir) != SHOAL_OK) {
		fprintf(stderr, "shoal key: no state directory (set SHOAL_STATE_DIR or HOME)\n");
		return 1;
	}
	if (make && shoal_state_dir_ensure(dir) != SHOAL_OK) {
		fprintf(stderr, "shoal key: cannot make %s\n", dir);
		return 1;
	}
	if ((size_t)snprintf(path, cap, "%s/%s", dir, SHOAL_KEY_DEFAULT_NAME) >= cap) {
		fprintf(stderr, "shoal key: the state directory's path is too long\n");
		return 1;
	}
	return 0;
}

int shoal_cmd_key(int argc, char **argv)
{
	char why[SHOAL_WHY_WRAP_LEN] = "", fp[17];
	shoal_key k;
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		cmd_key_usage(stdout);
		return 0;
	}
	if (argc != 2 && argc != 3) {
		cmd_key_usage(stderr);
		return 2;
	}
	char def[1100];
	const char *file = argc == 3 ? argv[2] : def;
	bool is_new = !strcmp(argv[1], "new");
	if (argc == 2 && (is_new || !strcmp(argv[1], "fingerprint")) &&
	    cmd_key_default(def, sizeof def, is_new))
		return 1;
	if (is_new) {
		if (shoal_key_generate(&k) != SHOAL_OK) {
			fprintf(stderr, "shoal key: no random source\n");
			return 1;
		}
		shoal_err e = shoal_key_write(file, &k, why, sizeof why);
		shoal_key_fingerprint(&k, fp);
		shoal_key_wipe(&k, sizeof k);
		if (e != SHOAL_OK) {
			fprintf(stderr, "shoal key: %s\n", why);
			return 1;
		}
		printf("wrote %s (fingerprint %s)\n", file, fp);
		if (file == def)
			printf("copy it to the same place on every peer (or pass --key FILE)\n");
		return 0;
	}
	if (!strcmp(argv[1], "fingerprint")) {
		int loose = 0;
		if (shoal_key_read(file, &k, &loose, why, sizeof why) != SHOAL_OK) {
			fprintf(stderr, "shoal key: %s\n", why);
			return 1;
		}
		shoal_key_fingerprint(&k, fp);
		shoal_key_wipe(&k, sizeof k);
		printf("%s\n", fp);
		if (loose)
			fprintf(stderr,
			        "shoal key: warning: %s is readable by others (chmod 600)\n", file);
		return 0;
	}
	cmd_key_usage(stderr);
	return 2;
}
