/*
 * runtime/cli/cmd_key.c: `shoal key`: make and inspect cluster keys.
 *
 *   shoal key new FILE          write a new random key (mode 0600; never
 *                               overwrites); print its fingerprint
 *   shoal key fingerprint FILE  print the fingerprint of a key file
 *
 * Copy the same file to every peer, then `shoal node --key FILE`, or put
 * it at <state-dir>/cluster.key where `shoal node` looks by default. The
 * file format is documented in net/key.h.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "net/key.h"
#include "runtime/cli/cli.h"

static void cmd_key_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal key new FILE          write a new cluster key (mode 0600)\n"
	        "       shoal key fingerprint FILE  print a key's public fingerprint\n"
	        "\nCopy FILE to every peer and start them with `shoal node --key FILE`\n"
	        "(or copy it to <state-dir>/%s, the default).\n",
	        SHOAL_KEY_DEFAULT_NAME);
}

int shoal_cmd_key(int argc, char **argv)
{
	char why[SHOAL_WHY_WRAP_LEN] = "", fp[17];
	shoal_key k;
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		cmd_key_usage(stdout);
		return 0;
	}
	if (argc != 3) {
		cmd_key_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "new")) {
		if (shoal_key_generate(&k) != SHOAL_OK) {
			fprintf(stderr, "shoal key: no random source\n");
			return 1;
		}
		shoal_err e = shoal_key_write(argv[2], &k, why, sizeof why);
		shoal_key_fingerprint(&k, fp);
		shoal_key_wipe(&k, sizeof k);
		if (e != SHOAL_OK) {
			fprintf(stderr, "shoal key: %s\n", why);
			return 1;
		}
		printf("wrote %s (fingerprint %s)\n", argv[2], fp);
		return 0;
	}
	if (!strcmp(argv[1], "fingerprint")) {
		int loose = 0;
		if (shoal_key_read(argv[2], &k, &loose, why, sizeof why) != SHOAL_OK) {
			fprintf(stderr, "shoal key: %s\n", why);
			return 1;
		}
		shoal_key_fingerprint(&k, fp);
		shoal_key_wipe(&k, sizeof k);
		printf("%s\n", fp);
		if (loose)
			fprintf(stderr,
			        "shoal key: warning: %s is readable by others (chmod 600)\n",
			        argv[2]);
		return 0;
	}
	cmd_key_usage(stderr);
	return 2;
}
