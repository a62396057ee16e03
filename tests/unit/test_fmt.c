/*
 * tests/unit/test_fmt.c: base/fmt.h: sizes in adaptive binary units with
 * one decimal, the unit carried up when rounding reaches 1024, the
 * extremes of uint64_t, and truncation into a short buffer.
 */
#include "config.h"

#include <string.h>

#include "base/fmt.h"
#include "tests/unit/test.h"

#define FMT(b) shoal_fmt_bytes(buf, sizeof buf, (b))

static void test_units(void)
{
	char buf[SHOAL_FMT_BYTES_LEN];
	ASSERT_STR_EQ(FMT(0), "0 B");
	ASSERT_STR_EQ(FMT(512), "512 B");
	ASSERT_STR_EQ(FMT(1023), "1023 B");
	ASSERT_STR_EQ(FMT(1024), "1.0 KiB");
	ASSERT_STR_EQ(FMT(1536), "1.5 KiB");
	ASSERT_STR_EQ(FMT(14889779), "14.2 MiB"); /* 14.19999 MiB */
	ASSERT_STR_EQ(FMT(11u << 20), "11.0 MiB");
	ASSERT_STR_EQ(FMT(3328599655ull), "3.1 GiB");
	ASSERT_STR_EQ(FMT(412ull << 30), "412.0 GiB");
	ASSERT_STR_EQ(FMT(3ull << 40), "3.0 TiB");
}

static void test_rounding(void)
{
	char buf[SHOAL_FMT_BYTES_LEN];
	ASSERT_STR_EQ(FMT(1024 + 51), "1.0 KiB");  /* 1.0498 */
	ASSERT_STR_EQ(FMT(1024 + 52), "1.1 KiB");  /* 1.0508 */
	ASSERT_STR_EQ(FMT(1048524), "1023.9 KiB"); /* 1023.949 */
	ASSERT_STR_EQ(FMT(1048525), "1.0 MiB");    /* 1023.950: 1024.0 KiB is 1.0 MiB */
	ASSERT_STR_EQ(FMT((1ull << 30) - 1), "1.0 GiB");
}

static void test_extremes(void)
{
	char buf[SHOAL_FMT_BYTES_LEN];
	ASSERT_STR_EQ(FMT(UINT64_MAX), "16.0 EiB");
	ASSERT_STR_EQ(FMT(1ull << 60), "1.0 EiB");
	ASSERT_STR_EQ(FMT((1ull << 60) - 1), "1.0 EiB");
	ASSERT_TRUE(strlen(FMT(1048524)) < SHOAL_FMT_BYTES_LEN);
}

static void test_short_buffer(void)
{
	char small[5] = "xxxx";
	ASSERT_TRUE(shoal_fmt_bytes(small, sizeof small, 14889779) == small);
	ASSERT_STR_EQ(small, "14.2");
	char one[1] = {'x'};
	shoal_fmt_bytes(one, sizeof one, 5);
	ASSERT_EQ(one[0], '\0');
	char none[1] = {'x'};
	shoal_fmt_bytes(none, 0, 5); /* nothing written */
	ASSERT_EQ(none[0], 'x');
}

TEST_MAIN(test_units, test_rounding, test_extremes, test_short_buffer)
