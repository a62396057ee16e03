/*
 * tests/unit/test_key.c: the cluster key file (net/key.h): write/read round
 * trip, mode 0600, refusal to overwrite, rejection of malformed files, and
 * the derivation (deterministic, distinct keys, a valid Curve25519 pair).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "net/key.h"
#include "tests/unit/test.h"

static char tmpdir[256];

static void setup(void)
{
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof tmpdir, "/tmp/shoal-test-key-XXXXXX");
		if (!mkdtemp(tmpdir))
			abort();
	}
}

static void test_roundtrip(void)
{
	setup();
	char path[300], why[SHOAL_WHY_LEN];
	snprintf(path, sizeof path, "%s/k1", tmpdir);
	shoal_key a, b;
	ASSERT_EQ(shoal_key_generate(&a), SHOAL_OK);
	ASSERT_EQ(shoal_key_write(path, &a, why, sizeof why), SHOAL_OK);
	struct stat st;
	ASSERT_EQ(stat(path, &st), 0);
	ASSERT_EQ(st.st_mode & 0777, 0600);
	int insecure = -1;
	ASSERT_EQ(shoal_key_read(path, &b, &insecure, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(insecure, 0);
	ASSERT_MEM_EQ(a.bytes, b.bytes, SHOAL_KEY_BYTES);
	/* never overwrite an existing key */
	shoal_key c;
	ASSERT_EQ(shoal_key_generate(&c), SHOAL_OK);
	ASSERT_EQ(shoal_key_write(path, &c, why, sizeof why), SHOAL_ERR_STATE);
	ASSERT_EQ(shoal_key_read(path, &b, NULL, why, sizeof why), SHOAL_OK);
	ASSERT_MEM_EQ(a.bytes, b.bytes, SHOAL_KEY_BYTES);
	/* a group-readable file is read but flagged */
	ASSERT_EQ(chmod(path, 0644), 0);
	ASSERT_EQ(shoal_key_read(path, &b, &insecure, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(insecure, 1);
	unlink(path);
}

static void test_generate_random(void)
{
	shoal_key a, b;
	ASSERT_EQ(shoal_key_generate(&a), SHOAL_OK);
	ASSERT_EQ(shoal_key_generate(&b), SHOAL_OK);
	ASSERT_TRUE(memcmp(a.bytes, b.bytes, SHOAL_KEY_BYTES) != 0);
}

static void test_parse(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_key k;
	const char *good = "# comment\n\nshoal-cluster-key-v1 "
	                   "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
	ASSERT_EQ(shoal_key_parse(good, strlen(good), &k, why, sizeof why), SHOAL_OK);
	for (int i = 0; i < SHOAL_KEY_BYTES; i++)
		ASSERT_EQ(k.bytes[i], i);
	const char *bad[] = {
	    "",
	    "# only a comment\n",
	    "shoal-cluster-key-v1 0001\n",
	    "shoal-cluster-key-v2 "
	    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
	    "shoal-cluster-key-v1 "
	    "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
	    "shoal-cluster-key-v1 "
	    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00\n",
	    "shoal-cluster-key-v1 "
	    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
	    "shoal-cluster-key-v1 "
	    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = '\0';
		ASSERT_EQ(shoal_key_parse(bad[i], strlen(bad[i]), &k, why, sizeof why),
		          SHOAL_ERR_FORMAT);
		ASSERT_TRUE(why[0] != '\0');
	}
}

static void test_derive(void)
{
	shoal_key a, b;
	shoal_key_curve ca, ca2, cb;
	ASSERT_EQ(shoal_key_generate(&a), SHOAL_OK);
	ASSERT_EQ(shoal_key_generate(&b), SHOAL_OK);
	ASSERT_EQ(shoal_key_derive(&a, &ca), SHOAL_OK);
	ASSERT_EQ(shoal_key_derive(&a, &ca2), SHOAL_OK);
	ASSERT_EQ(shoal_key_derive(&b, &cb), SHOAL_OK);
	ASSERT_MEM_EQ(&ca, &ca2, sizeof ca);
	ASSERT_TRUE(memcmp(ca.server_public, cb.server_public, SHOAL_KEY_BYTES) != 0);
	ASSERT_TRUE(memcmp(ca.client_public, cb.client_public, SHOAL_KEY_BYTES) != 0);
	ASSERT_TRUE(memcmp(ca.client_public, ca.server_public, SHOAL_KEY_BYTES) != 0);
	/* public = scalarmult_base(secret) */
	uint8_t pub[SHOAL_KEY_BYTES];
	ASSERT_EQ(crypto_scalarmult_base(pub, ca.client_secret), 0);
	ASSERT_MEM_EQ(pub, ca.client_public, SHOAL_KEY_BYTES);
	/* the secret is not the cluster key itself */
	ASSERT_TRUE(memcmp(ca.client_secret, a.bytes, SHOAL_KEY_BYTES) != 0);
	char fa[17], fb[17];
	shoal_key_fingerprint(&a, fa);
	shoal_key_fingerprint(&b, fb);
	ASSERT_EQ(strlen(fa), 16);
	ASSERT_TRUE(strcmp(fa, fb) != 0);
}

static void test_cleanup(void)
{
	if (tmpdir[0])
		ASSERT_EQ(rmdir(tmpdir), 0);
}

TEST_MAIN(TEST_CASE(test_roundtrip), TEST_CASE(test_generate_random), TEST_CASE(test_parse),
          TEST_CASE(test_derive), TEST_CASE(test_cleanup))
