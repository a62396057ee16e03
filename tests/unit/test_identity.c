/*
 * tests/unit/test_identity.c: the peer identity (net/identity.h): created once,
 * same id on every later load, incarnation raised at each start and
 * persisted, corrupt files refused, and the state directory lock.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/statedir.h"
#include "net/identity.h"
#include "tests/unit/test.h"

static char dir[256];

static void setup(void)
{
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/shoal-test-identity-XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
}

static void test_create_then_reload(void)
{
	setup();
	char why[SHOAL_WHY_LEN];
	shoal_identity a, b, c;
	ASSERT_EQ(shoal_identity_load(dir, "alpha", &a, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(a.incarnation, 1);
	ASSERT_STR_EQ(a.name, "alpha");
	ASSERT_EQ(strlen(a.id_hex), 32);
	ASSERT_EQ(shoal_identity_load(dir, NULL, &b, why, sizeof why), SHOAL_OK);
	ASSERT_MEM_EQ(a.id, b.id, SHOAL_IDENTITY_ID_BYTES);
	ASSERT_STR_EQ(a.id_hex, b.id_hex);
	ASSERT_EQ(b.incarnation, 2);
	ASSERT_TRUE(b.name[0] != '\0'); /* host name */
	/* a refutation raised it at run time and the node saved it */
	b.incarnation = 40;
	ASSERT_EQ(shoal_identity_save(dir, &b, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_identity_load(dir, "alpha", &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.incarnation, 41);
	ASSERT_MEM_EQ(a.id, c.id, SHOAL_IDENTITY_ID_BYTES);
}

static void test_two_dirs_two_ids(void)
{
	char d2[256], why[SHOAL_WHY_LEN];
	snprintf(d2, sizeof d2, "/tmp/shoal-test-identity2-XXXXXX");
	ASSERT_TRUE(mkdtemp(d2) != NULL);
	shoal_identity a, b;
	ASSERT_EQ(shoal_identity_load(d2, "x", &a, why, sizeof why), SHOAL_OK);
	setup();
	ASSERT_EQ(shoal_identity_load(dir, "x", &b, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(memcmp(a.id, b.id, SHOAL_IDENTITY_ID_BYTES) != 0);
	char p[300];
	snprintf(p, sizeof p, "%s/%s", d2, SHOAL_IDENTITY_FILE);
	unlink(p);
	rmdir(d2);
}

static void test_parse_rejects(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_identity id;
	const char *good = "# x\nid 00112233445566778899aabbccddeeff\nincarnation 7\n";
	ASSERT_EQ(shoal_identity_parse(good, strlen(good), &id, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(id.incarnation, 7);
	ASSERT_STR_EQ(id.id_hex, "00112233445566778899aabbccddeeff");
	const char *bad[] = {
	    "",
	    "id 00112233445566778899aabbccddeeff\n",
	    "incarnation 3\n",
	    "id 0011\nincarnation 3\n",
	    "id 00112233445566778899aabbccddeeff\nincarnation -3\n",
	    "id 00112233445566778899aabbccddeeff\nincarnation 99999999999999999999999\n",
	    "id 00112233445566778899aabbccddeeff\nincarnation 3x\n",
	    "id 00112233445566778899aabbccddeeff\nincarnation 3\ncolour blue\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ASSERT_EQ(shoal_identity_parse(bad[i], strlen(bad[i]), &id, why, sizeof why),
		          SHOAL_ERR_FORMAT);
}

static void test_corrupt_file_refused(void)
{
	char d2[256], why[SHOAL_WHY_LEN], p[300];
	snprintf(d2, sizeof d2, "/tmp/shoal-test-identity3-XXXXXX");
	ASSERT_TRUE(mkdtemp(d2) != NULL);
	snprintf(p, sizeof p, "%s/%s", d2, SHOAL_IDENTITY_FILE);
	FILE *f = fopen(p, "w");
	ASSERT_TRUE(f != NULL);
	fputs("id nothex\nincarnation 1\n", f);
	fclose(f);
	shoal_identity id;
	ASSERT_EQ(shoal_identity_load(d2, NULL, &id, why, sizeof why), SHOAL_ERR_FORMAT);
	/* the file was not replaced by a fresh identity */
	f = fopen(p, "r");
	ASSERT_TRUE(f != NULL);
	char line[64] = "";
	ASSERT_TRUE(fgets(line, sizeof line, f) != NULL);
	fclose(f);
	ASSERT_STR_EQ(line, "id nothex\n");
	unlink(p);
	rmdir(d2);
}

/* An incarnation at the top (issue 35): one below the largest loads and
 * becomes the largest; one near 2^64 is refused as damaged, never wrapped
 * to 0; a FIFO in place of the file is refused at once, not waited on. */
static void test_incarnation_top_and_fifo(void)
{
	char d2[256], why[SHOAL_WHY_LEN], p[300];
	snprintf(d2, sizeof d2, "/tmp/shoal-test-identity4-XXXXXX");
	ASSERT_TRUE(mkdtemp(d2) != NULL);
	snprintf(p, sizeof p, "%s/%s", d2, SHOAL_IDENTITY_FILE);
	FILE *f = fopen(p, "w");
	ASSERT_TRUE(f != NULL);
	fputs("id 00112233445566778899aabbccddeeff\nincarnation 9223372036854775806\n", f);
	fclose(f);
	shoal_identity id;
	ASSERT_EQ(shoal_identity_load(d2, "x", &id, why, sizeof why), SHOAL_OK);
	ASSERT_U64_EQ(id.incarnation, 9223372036854775807ull);
	ASSERT_EQ(shoal_identity_load(d2, "x", &id, why, sizeof why), SHOAL_ERR_RANGE);
	f = fopen(p, "w");
	ASSERT_TRUE(f != NULL);
	fputs("id 00112233445566778899aabbccddeeff\nincarnation 18446744073709551614\n", f);
	fclose(f);
	ASSERT_EQ(shoal_identity_load(d2, "x", &id, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "damaged") != NULL);
	unlink(p);
	ASSERT_EQ(mkfifo(p, 0600), 0);
	ASSERT_EQ(shoal_identity_load(d2, "x", &id, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "not a regular file") != NULL);
	ASSERT_EQ(shoal_state_dir_check(d2, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "a FIFO") != NULL);
	unlink(p);
	ASSERT_EQ(shoal_state_dir_check(d2, why, sizeof why), SHOAL_OK);
	rmdir(d2);
}

static void test_lock(void)
{
	setup();
	char why[SHOAL_WHY_LEN];
	int fd1 = -1, fd2 = -1;
	ASSERT_EQ(shoal_identity_lock(dir, &fd1, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(fd1 >= 0);
	/* a second open file description is refused while the first holds it */
	ASSERT_EQ(shoal_identity_lock(dir, &fd2, why, sizeof why), SHOAL_ERR_BUSY);
	ASSERT_EQ(fd2, -1);
	close(fd1);
	ASSERT_EQ(shoal_identity_lock(dir, &fd2, why, sizeof why), SHOAL_OK);
	close(fd2);
}

static void test_cleanup(void)
{
	char p[300];
	snprintf(p, sizeof p, "%s/%s", dir, SHOAL_IDENTITY_FILE);
	unlink(p);
	snprintf(p, sizeof p, "%s/%s", dir, SHOAL_IDENTITY_LOCK);
	unlink(p);
	ASSERT_EQ(rmdir(dir), 0);
}

TEST_MAIN(TEST_CASE(test_create_then_reload), TEST_CASE(test_two_dirs_two_ids),
          TEST_CASE(test_parse_rejects), TEST_CASE(test_corrupt_file_refused),
          TEST_CASE(test_incarnation_top_and_fifo), TEST_CASE(test_lock), TEST_CASE(test_cleanup))
