/*
 * tests/unit/test_hex.c: base/hex.h and base/peer_id.h: round trip of every
 * byte value, lowercase output, either case accepted, odd and wrong
 * lengths and bad characters refused with the output untouched.
 */
#include "config.h"

#include <string.h>

#include "base/hex.h"
#include "base/peer_id.h"
#include "tests/unit/test.h"

static void test_roundtrip(void)
{
	uint8_t in[256], out[256];
	char hex[2 * 256 + 1];
	for (int i = 0; i < 256; i++)
		in[i] = (uint8_t)i;
	shoal_hex_encode(in, sizeof in, hex);
	ASSERT_EQ(strlen(hex), 512);
	ASSERT_TRUE(!strncmp(hex, "000102", 6));
	ASSERT_STR_EQ(hex + 2 * 250, "fafbfcfdfeff");
	memset(out, 0, sizeof out);
	ASSERT_EQ(shoal_hex_decode(hex, strlen(hex), out, sizeof out), SHOAL_OK);
	ASSERT_MEM_EQ(in, out, sizeof in);
}

static void test_empty(void)
{
	char hex[1] = {'x'};
	shoal_hex_encode("", 0, hex);
	ASSERT_STR_EQ(hex, "");
	ASSERT_EQ(shoal_hex_decode("", 0, NULL, 0), SHOAL_OK);
}

static void test_case(void)
{
	uint8_t b[4];
	char hex[9];
	ASSERT_EQ(shoal_hex_decode("DeadBEEF", 8, b, 4), SHOAL_OK);
	ASSERT_MEM_EQ(b, "\xde\xad\xbe\xef", 4);
	shoal_hex_encode(b, 4, hex);
	ASSERT_STR_EQ(hex, "deadbeef"); /* output is always lowercase */
	ASSERT_EQ(shoal_hex_digit('a'), 10);
	ASSERT_EQ(shoal_hex_digit('F'), 15);
	ASSERT_EQ(shoal_hex_digit('9'), 9);
	ASSERT_EQ(shoal_hex_digit('g'), -1);
}

static void test_length(void)
{
	uint8_t b[2] = {0x55, 0x55};
	ASSERT_EQ(shoal_hex_decode("abc", 3, b, 2), SHOAL_ERR_FORMAT);    /* odd */
	ASSERT_EQ(shoal_hex_decode("ab", 2, b, 2), SHOAL_ERR_FORMAT);     /* short */
	ASSERT_EQ(shoal_hex_decode("abcdef", 6, b, 2), SHOAL_ERR_FORMAT); /* long */
	ASSERT_EQ(b[0], 0x55);
	ASSERT_EQ(b[1], 0x55);
	/* Only hex_len digits are read: the NUL-free prefix of a longer text. */
	ASSERT_EQ(shoal_hex_decode("0aff>", 4, b, 2), SHOAL_OK);
	ASSERT_EQ(b[0], 0x0a);
	ASSERT_EQ(b[1], 0xff);
}

static void test_bad_char(void)
{
	uint8_t b[2] = {0x55, 0x55};
	static const char *const bad[] = {"0g", "g0", " 0", "0 ", "-1", "0x", "\xc3\xa9"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ASSERT_EQ(shoal_hex_decode(bad[i], 2, b, 1), SHOAL_ERR_FORMAT);
	/* a bad digit late in the text leaves out as it was */
	ASSERT_EQ(shoal_hex_decode("12z4", 4, b, 2), SHOAL_ERR_FORMAT);
	ASSERT_EQ(b[0], 0x55);
	ASSERT_EQ(b[1], 0x55);
	static const char nul[4] = {'1', '2', '\0', '4'}; /* a NUL is a bad digit */
	ASSERT_EQ(shoal_hex_decode(nul, sizeof nul, b, 2), SHOAL_ERR_FORMAT);
}

static void test_peer_id(void)
{
	static const uint8_t raw[SHOAL_PEER_ID_LEN] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
	                                               0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
	                                               0xcc, 0xdd, 0xee, 0xff};
	shoal_peer_id a = shoal_peer_id_from_bytes(raw), b;
	ASSERT_MEM_EQ(a.b, raw, sizeof raw);
	char hex[33];
	shoal_peer_id_to_hex(&a, hex);
	ASSERT_STR_EQ(hex, "00112233445566778899aabbccddeeff");
	ASSERT_EQ(shoal_peer_id_from_hex("00112233445566778899AABBCCDDEEFF", &b), SHOAL_OK);
	ASSERT_EQ(shoal_peer_id_cmp(&a, &b), 0);
	b.b[15] = 0xfe;
	ASSERT_GT(shoal_peer_id_cmp(&a, &b), 0);
	b.b[0] = 0x01; /* the first byte is the most significant */
	ASSERT_LT(shoal_peer_id_cmp(&a, &b), 0);
	ASSERT_EQ(shoal_peer_id_from_hex("00112233445566778899aabbccddeef", &b), SHOAL_ERR_FORMAT);
	ASSERT_EQ(shoal_peer_id_from_hex("00112233445566778899aabbccddeeff0", &b),
	          SHOAL_ERR_FORMAT);
	ASSERT_EQ(shoal_peer_id_from_hex(NULL, &b), SHOAL_ERR_FORMAT);
}

TEST_MAIN(TEST_CASE(test_roundtrip), TEST_CASE(test_empty), TEST_CASE(test_case),
          TEST_CASE(test_length), TEST_CASE(test_bad_char), TEST_CASE(test_peer_id))
