/*
 * tests/unit/test_keycheck.c: net/keycheck.h: the key check datagrams
 * (round trip; every truncation, a bad magic, version, kind, fingerprint
 * and unprintable fields refused with a reason) and one ask answered over
 * loopback UDP.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/keycheck.h"
#include "tests/unit/test.h"

static shoal_keycheck_msg sample(uint8_t kind)
{
	shoal_keycheck_msg m;
	memset(&m, 0, sizeof m);
	m.kind = kind;
	snprintf(m.fp, sizeof m.fp, "0123456789abcdef");
	snprintf(m.cluster, sizeof m.cluster, "home-lab");
	snprintf(m.endpoint, sizeof m.endpoint, "tcp://127.0.0.1:47470");
	return m;
}

static void test_round_trip(void)
{
	uint8_t buf[SHOAL_KEYCHECK_MAX];
	char why[SHOAL_WHY_LEN];
	shoal_keycheck_msg m = sample(SHOAL_KEYCHECK_ASK), d;
	size_t n = shoal_keycheck_encode(&m, buf, sizeof buf);
	ASSERT_TRUE(n > 0);
	ASSERT_EQ(shoal_keycheck_decode(buf, n, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(d.kind, SHOAL_KEYCHECK_ASK);
	ASSERT_STR_EQ(d.fp, m.fp);
	ASSERT_STR_EQ(d.cluster, "home-lab");
	ASSERT_STR_EQ(d.endpoint, m.endpoint);
	ASSERT_TRUE(shoal_keycheck_same(&m, &d));
	/* no key, empty fields */
	snprintf(m.fp, sizeof m.fp, "%s", SHOAL_KEYCHECK_NOKEY);
	m.cluster[0] = m.endpoint[0] = '\0';
	n = shoal_keycheck_encode(&m, buf, sizeof buf);
	ASSERT_TRUE(n > 0);
	ASSERT_EQ(shoal_keycheck_decode(buf, n, &d, why, sizeof why), SHOAL_OK);
	ASSERT_STR_EQ(d.fp, SHOAL_KEYCHECK_NOKEY);
	shoal_keycheck_msg k = sample(SHOAL_KEYCHECK_ANSWER);
	ASSERT_TRUE(!shoal_keycheck_same(&k, &d));
	/* what cannot be encoded: a bad fingerprint, a long field, a small buffer */
	m = sample(SHOAL_KEYCHECK_ASK);
	snprintf(m.fp, sizeof m.fp, "0123456789ABCDEF");
	ASSERT_EQ(shoal_keycheck_encode(&m, buf, sizeof buf), 0);
	m = sample(SHOAL_KEYCHECK_ASK);
	memset(m.cluster, 'c', 255);
	m.cluster[255] = '\0';
	ASSERT_TRUE(shoal_keycheck_encode(&m, buf, sizeof buf) > 0);
	ASSERT_EQ(shoal_keycheck_encode(&m, buf, 40), 0);
	m.kind = 3;
	ASSERT_EQ(shoal_keycheck_encode(&m, buf, sizeof buf), 0);
}

static void test_hostile(void)
{
	uint8_t buf[SHOAL_KEYCHECK_MAX], bad[SHOAL_KEYCHECK_MAX];
	char why[SHOAL_WHY_LEN];
	shoal_keycheck_msg m = sample(SHOAL_KEYCHECK_ANSWER), d;
	size_t n = shoal_keycheck_encode(&m, buf, sizeof buf);
	/* every truncation, and one byte too many */
	for (size_t l = 0; l < n; l++) {
		why[0] = '\0';
		ASSERT_EQ(shoal_keycheck_decode(buf, l, &d, why, sizeof why), SHOAL_ERR_FORMAT);
		ASSERT_TRUE(why[0] != '\0');
	}
	memcpy(bad, buf, n);
	bad[n] = 'x';
	ASSERT_EQ(shoal_keycheck_decode(bad, n + 1, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	/* a field at a time: magic, version, kind, fingerprint, a length that
	 * runs past the end, an unprintable byte in a text field */
	size_t at[] = {0, 4, 5, 6, 21, 22, 24, 31};
	uint8_t to[] = {'X', 9, 7, 'G', 0xff, 200, '\n', 10};
	for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
		memcpy(bad, buf, n);
		bad[at[i]] = to[i];
		why[0] = '\0';
		ASSERT_EQ(shoal_keycheck_decode(bad, n, &d, why, sizeof why), SHOAL_ERR_FORMAT);
		ASSERT_TRUE(why[0] != '\0');
	}
}

/* a free UDP port on loopback, by binding port 0 and closing */
/* A UDP port free now on 127.0.0.1, or 0 (the caller's open then fails). */
static int free_port(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	bool ok = s >= 0 && !bind(s, (struct sockaddr *)&sa, sizeof sa) &&
	          !getsockname(s, (struct sockaddr *)&sa, &sl);
	if (s >= 0)
		close(s);
	return ok ? ntohs(sa.sin_port) : 0;
}

static void test_loopback(void)
{
	char ep[64], why[SHOAL_WHY_LEN], from[64];
	snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
	int fd, nofd = 0;
	ASSERT_EQ(shoal_keycheck_open(ep, &fd, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_keycheck_open("tcp://127.0.0.1", &nofd, why, sizeof why), SHOAL_ERR_INVAL);
	ASSERT_EQ(nofd, -1);
	shoal_keycheck_msg got, ans = sample(SHOAL_KEYCHECK_ANSWER);
	ASSERT_EQ(shoal_keycheck_recv(fd, &got, from, sizeof from, why, sizeof why),
	          SHOAL_ERR_BUSY);
	/* nothing answers: a timeout with the reason */
	shoal_keycheck_msg mine = sample(SHOAL_KEYCHECK_ASK), theirs;
	snprintf(mine.fp, sizeof mine.fp, "fedcba9876543210");
	ASSERT_EQ(shoal_keycheck_ask(ep, &mine, 100, &theirs, why, sizeof why), SHOAL_ERR_TIMEOUT);
	ASSERT_TRUE(strstr(why, "no key check answer") != NULL);
	/* the asks that came meanwhile are there to read, with their sender */
	ASSERT_EQ(shoal_keycheck_recv(fd, &got, from, sizeof from, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(got.kind, SHOAL_KEYCHECK_ASK);
	ASSERT_STR_EQ(got.fp, "fedcba9876543210");
	ASSERT_TRUE(strncmp(from, "127.0.0.1:", 10) == 0);
	while (shoal_keycheck_recv(fd, &got, from, sizeof from, why, sizeof why) == SHOAL_OK)
		;
	/* an answering peer: a child process answers the first ask */
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		char to[96];
		if (poll(&pf, 1, 5000) == 1 &&
		    shoal_keycheck_recv(fd, &got, from, sizeof from, why, sizeof why) == SHOAL_OK) {
			snprintf(to, sizeof to, "tcp://%s", from);
			shoal_keycheck_send(fd, to, &ans, why, sizeof why);
		}
		_exit(0);
	}
	ASSERT_EQ(shoal_keycheck_ask(ep, &mine, 3000, &theirs, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(theirs.kind, SHOAL_KEYCHECK_ANSWER);
	ASSERT_STR_EQ(theirs.fp, ans.fp);
	ASSERT_STR_EQ(theirs.cluster, "home-lab");
	ASSERT_TRUE(!shoal_keycheck_same(&mine, &theirs));
	close(fd);
}

TEST_MAIN(TEST_CASE(test_round_trip), TEST_CASE(test_hostile), TEST_CASE(test_loopback))
