/*
 * tests/unit/test_endpoint.c: net/endpoint.h: addresses as users type
 * them, good and bad.
 */
#include "config.h"

#include <string.h>

#include "net/endpoint.h"
#include "tests/unit/test.h"

static void test_split(void)
{
	char host[64], why[SHOAL_WHY_LEN];
	uint16_t port = 1;
	ASSERT_EQ(
	    shoal_endpoint_split("10.0.0.2:7000", 5, host, sizeof host, &port, why, sizeof why),
	    SHOAL_OK);
	ASSERT_STR_EQ(host, "10.0.0.2");
	ASSERT_EQ(port, 7000);
	ASSERT_EQ(shoal_endpoint_split("*", 5555, host, sizeof host, &port, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(host, "*");
	ASSERT_EQ(port, 5555);
	/* an empty host, a bad or out-of-range port, a host that does not fit */
	const char *bad[] = {":7000", "", "h:", "h:70x", "h:-1", "h:65536"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		why[0] = '\0';
		ASSERT_EQ(
		    shoal_endpoint_split(bad[i], 5, host, sizeof host, &port, why, sizeof why),
		    SHOAL_ERR_INVAL);
		ASSERT_TRUE(why[0] != '\0');
	}
	char longhost[100];
	memset(longhost, 'a', sizeof longhost - 1);
	longhost[sizeof longhost - 1] = '\0';
	ASSERT_EQ(shoal_endpoint_split(longhost, 5, host, sizeof host, &port, why, sizeof why),
	          SHOAL_ERR_INVAL);
}

static void test_parse(void)
{
	char ep[64], why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_endpoint_parse("127.0.0.1", 5270, ep, sizeof ep, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(ep, "tcp://127.0.0.1:5270");
	ASSERT_EQ(shoal_endpoint_parse("localhost:9", 5270, ep, sizeof ep, why, sizeof why),
	          SHOAL_OK);
	ASSERT_STR_EQ(ep, "tcp://127.0.0.1:9");
	ASSERT_EQ(shoal_endpoint_parse("127.0.0.1:0", 5270, ep, sizeof ep, why, sizeof why),
	          SHOAL_ERR_INVAL);
	ASSERT_EQ(
	    shoal_endpoint_parse("no-such-host.invalid", 5270, ep, sizeof ep, why, sizeof why),
	    SHOAL_ERR_NOTFOUND);
	char small[12];
	ASSERT_EQ(shoal_endpoint_parse("127.0.0.1:9", 1, small, sizeof small, why, sizeof why),
	          SHOAL_ERR_RANGE);
}

static void test_pieces(void)
{
	char ip[32];
	ASSERT_EQ(shoal_endpoint_ip("tcp://10.1.2.3:44", ip, sizeof ip), 0);
	ASSERT_STR_EQ(ip, "10.1.2.3");
	ASSERT_EQ(shoal_endpoint_ip("udp://10.1.2.3:44", ip, sizeof ip), -1);
	ASSERT_EQ(shoal_endpoint_ip("tcp://10.1.2.3", ip, sizeof ip), -1);
	ASSERT_EQ(shoal_endpoint_ip("tcp://10.1.2.3:44", ip, 4), -1);
	ASSERT_EQ(shoal_endpoint_port("tcp://10.1.2.3:44"), 44);
	ASSERT_EQ(shoal_endpoint_port("nothing"), 0);
}

TEST_MAIN(TEST_CASE(test_split), TEST_CASE(test_parse), TEST_CASE(test_pieces))
