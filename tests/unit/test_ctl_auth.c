/*
 * tests/unit/test_ctl_auth.c: the control plane admits only holders of the
 * cluster key (net/ctl.h + net/key.h).
 *
 * A keyed ROUTER runs in a thread and echoes every message. Clients try:
 *   1. the right key                                  -> answered
 *   2. the server's public key, a random client pair  -> refused by ZAP
 *   3. a different cluster key                        -> refused (handshake)
 *   4. no CURVE at all                                -> refused
 * and an insecure ROUTER answers a plain client. The server's counters
 * must show the refusals, and no refused client's message may arrive.
 * Each refusal reaches the client as SHOAL_ERR_AUTH with a reason, well
 * before its wait ends (it is not a timeout); a port where nothing
 * listens any more gives "connection refused" at once too.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "base/clock.h"
#include "net/ctl.h"
#include "net/key.h"
#include "tests/unit/test.h"

/* A refusal must come well within the client's wait (REFUSE_WAIT_MS):
 * the events that carry it arrive in milliseconds on loopback; 2 s leaves
 * room for a loaded machine. */
#define REFUSE_WAIT_MS 10000
#define REFUSE_MS      2000

typedef struct server {
	shoal_ctl *ctl;
	pthread_mutex_t mu;
	volatile int stop;
	int received;
	pthread_t th;
} server;

static void on_message(void *ud, const shoal_ctl_route *from, const uint8_t *buf, size_t len)
{
	server *s = ud;
	s->received++;
	uint8_t reply[300];
	if (len > 200)
		len = 200;
	memcpy(reply, "echo:", 5);
	memcpy(reply + 5, buf, len);
	shoal_ctl_reply(s->ctl, from, reply, len + 5);
}

static void *server_main(void *arg)
{
	server *s = arg;
	while (!s->stop) {
		pthread_mutex_lock(&s->mu);
		shoal_ctl_poll(s->ctl, 20, NULL, 0);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

static int server_start(server *s, const shoal_key *key)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->mu, NULL);
	shoal_ctl_config cfg = {.listen = "tcp://127.0.0.1:*",
	                        .key = key,
	                        .heartbeat_ms = 200,
	                        .on_message = on_message,
	                        .ud = s};
	char why[SHOAL_WHY_LEN];
	if (shoal_ctl_new(&cfg, &s->ctl, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "server: %s\n", why);
		return -1;
	}
	return pthread_create(&s->th, NULL, server_main, s);
}

static void server_stop(server *s)
{
	s->stop = 1;
	pthread_join(s->th, NULL);
	shoal_ctl_free(s->ctl);
	pthread_mutex_destroy(&s->mu);
}

static void server_stats(server *s, shoal_ctl_stats *st, int *received)
{
	pthread_mutex_lock(&s->mu);
	shoal_ctl_get_stats(s->ctl, st);
	*received = s->received;
	pthread_mutex_unlock(&s->mu);
}

static char last_why[SHOAL_WHY_LEN]; /* the client's reason of the last ask */
static uint64_t last_ms;             /* how long the last ask took */

/* Send "hello" to ep with the given keys; return the client's verdict. */
static shoal_err ask_at(const char *ep, const shoal_key_curve *keys, int timeout_ms, char *reply,
                        size_t cap)
{
	char why[SHOAL_WHY_LEN] = "";
	uint64_t t0 = shoal_clock_now_ms();
	shoal_ctl_client *c = NULL;
	shoal_err e = shoal_ctl_client_new(ep, keys, &c, why, sizeof why);
	if (e != SHOAL_OK)
		return e;
	const void *bufs[1] = {"hello"};
	size_t lens[1] = {5};
	e = shoal_ctl_client_send(c, bufs, lens, 1);
	uint8_t *r = NULL;
	size_t rl = 0;
	if (e == SHOAL_OK)
		e = shoal_ctl_client_recv(c, timeout_ms, &r, &rl, why, sizeof why);
	if (e == SHOAL_OK && reply) {
		snprintf(reply, cap, "%.*s", (int)rl, (const char *)r);
	}
	free(r);
	shoal_ctl_client_free(c);
	last_ms = shoal_clock_now_ms() - t0;
	snprintf(last_why, sizeof last_why, "%s", why);
	return e;
}

static shoal_err ask(server *s, const shoal_key_curve *keys, int timeout_ms, char *reply,
                     size_t cap)
{
	return ask_at(shoal_ctl_bound(s->ctl), keys, timeout_ms, reply, cap);
}

/* A server with a new cluster key; *kc gets the keys that open it. */
static int keyed_server_start(server *s, shoal_key_curve *kc)
{
	shoal_key k;
	if (shoal_key_generate(&k) != SHOAL_OK || shoal_key_derive(&k, kc) != SHOAL_OK)
		return -1;
	return server_start(s, &k);
}

static void test_right_key_works(void)
{
	shoal_key_curve kc;
	server s;
	ASSERT_EQ(keyed_server_start(&s, &kc), 0);
	char reply[64] = "";
	shoal_err e = ask(&s, &kc, 3000, reply, sizeof reply);
	shoal_ctl_stats st;
	int received;
	server_stats(&s, &st, &received);
	server_stop(&s);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(reply, "echo:hello");
	ASSERT_EQ(received, 1);
	ASSERT_GE(st.zap_allowed, 1);
	ASSERT_EQ(st.zap_denied, 0);
}

static void test_server_key_but_random_client_refused(void)
{
	shoal_key k;
	shoal_key_curve kc, forged;
	ASSERT_EQ(shoal_key_generate(&k), SHOAL_OK);
	ASSERT_EQ(shoal_key_derive(&k, &kc), SHOAL_OK);
	/* The attacker knows the server public key, not the cluster key. */
	memcpy(forged.server_public, kc.server_public, SHOAL_KEY_BYTES);
	memset(forged.server_secret, 0, SHOAL_KEY_BYTES);
	ASSERT_EQ(crypto_box_keypair(forged.client_public, forged.client_secret), 0);
	server s;
	ASSERT_EQ(server_start(&s, &k), 0);
	shoal_err e = ask(&s, &forged, REFUSE_WAIT_MS, NULL, 0);
	ASSERT_EQ(e, SHOAL_ERR_AUTH);
	ASSERT_LT(last_ms, REFUSE_MS);
	ASSERT_TRUE(strstr(last_why, "refused our key") != NULL);
	/* Also: the derived client *public* key with a secret that is not its
	 * own (the attacker cannot know the real one). */
	shoal_key_curve forged2 = forged;
	memcpy(forged2.client_public, kc.client_public, SHOAL_KEY_BYTES);
	shoal_err e2 = ask(&s, &forged2, REFUSE_WAIT_MS, NULL, 0);
	ASSERT_EQ(e2, SHOAL_ERR_AUTH);
	ASSERT_LT(last_ms, REFUSE_MS);
	shoal_ctl_stats st;
	int received;
	server_stats(&s, &st, &received);
	server_stop(&s);
	ASSERT_NE(e, SHOAL_OK);
	ASSERT_NE(e2, SHOAL_OK);
	ASSERT_EQ(received, 0);
	ASSERT_GE(st.zap_denied, 1);
	ASSERT_EQ(st.zap_allowed, 0);
}

static void test_other_cluster_key_refused(void)
{
	shoal_key k, other;
	shoal_key_curve kother;
	ASSERT_EQ(shoal_key_generate(&k), SHOAL_OK);
	ASSERT_EQ(shoal_key_generate(&other), SHOAL_OK);
	ASSERT_EQ(shoal_key_derive(&other, &kother), SHOAL_OK);
	server s;
	ASSERT_EQ(server_start(&s, &k), 0);
	shoal_err e = ask(&s, &kother, REFUSE_WAIT_MS, NULL, 0);
	printf("  another cluster key: refused in %llu ms: %s\n", (unsigned long long)last_ms,
	       last_why);
	ASSERT_EQ(e, SHOAL_ERR_AUTH);
	ASSERT_LT(last_ms, REFUSE_MS);
	ASSERT_TRUE(strstr(last_why, "refused our key") != NULL);
	shoal_ctl_stats st;
	int received;
	server_stats(&s, &st, &received);
	server_stop(&s);
	ASSERT_NE(e, SHOAL_OK);
	ASSERT_EQ(received, 0);
	ASSERT_EQ(st.zap_allowed, 0);
}

static void test_plain_client_refused(void)
{
	shoal_key k;
	ASSERT_EQ(shoal_key_generate(&k), SHOAL_OK);
	server s;
	ASSERT_EQ(server_start(&s, &k), 0);
	shoal_err e = ask(&s, NULL, REFUSE_WAIT_MS, NULL, 0);
	ASSERT_EQ(e, SHOAL_ERR_AUTH);
	ASSERT_LT(last_ms, REFUSE_MS);
	ASSERT_TRUE(strstr(last_why, "without a key") != NULL);
	shoal_ctl_stats st;
	int received;
	server_stats(&s, &st, &received);
	server_stop(&s);
	ASSERT_NE(e, SHOAL_OK);
	ASSERT_EQ(received, 0);
	ASSERT_EQ(st.zap_allowed, 0);
}

static void test_insecure_server_answers_plain_client(void)
{
	server s;
	ASSERT_EQ(server_start(&s, NULL), 0);
	char reply[64] = "";
	shoal_err e = ask(&s, NULL, 3000, reply, sizeof reply);
	server_stop(&s);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_STR_EQ(reply, "echo:hello");
}

/* The port of a ROUTER that was closed: nothing listens there now. */
static void test_nothing_listening(void)
{
	shoal_key_curve kc;
	server s;
	ASSERT_EQ(keyed_server_start(&s, &kc), 0);
	char ep[160];
	snprintf(ep, sizeof ep, "%s", shoal_ctl_bound(s.ctl));
	server_stop(&s);
	shoal_err e = ask_at(ep, &kc, REFUSE_WAIT_MS, NULL, 0);
	printf("  nothing listening: in %llu ms: %s\n", (unsigned long long)last_ms, last_why);
	ASSERT_EQ(e, SHOAL_ERR_IO);
	ASSERT_LT(last_ms, REFUSE_MS);
	ASSERT_TRUE(strstr(last_why, "connection refused") != NULL);
}

/* A server that goes away after answering: the client waiting for more
 * hears of it at once, not after its wait. */
static void test_connection_lost(void)
{
	shoal_key_curve kc;
	server s;
	ASSERT_EQ(keyed_server_start(&s, &kc), 0);
	shoal_ctl_client *c = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_ctl_client_new(shoal_ctl_bound(s.ctl), &kc, &c, why, sizeof why), SHOAL_OK);
	const void *bufs[1] = {"hello"};
	size_t lens[1] = {5};
	uint8_t *r = NULL;
	size_t rl = 0;
	shoal_err e = shoal_ctl_client_send(c, bufs, lens, 1);
	if (e == SHOAL_OK)
		e = shoal_ctl_client_recv(c, REFUSE_WAIT_MS, &r, &rl, why, sizeof why);
	free(r);
	r = NULL;
	server_stop(&s);
	uint64_t t0 = shoal_clock_now_ms();
	shoal_err e2 = shoal_ctl_client_recv(c, REFUSE_WAIT_MS, &r, &rl, why, sizeof why);
	uint64_t ms = shoal_clock_now_ms() - t0;
	free(r);
	shoal_ctl_client_free(c);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_EQ(e2, SHOAL_ERR_CLOSED);
	ASSERT_LT(ms, REFUSE_MS);
	ASSERT_TRUE(strstr(why, "closed the connection") != NULL);
}

TEST_MAIN(TEST_CASE(test_right_key_works), TEST_CASE(test_server_key_but_random_client_refused),
          TEST_CASE(test_other_cluster_key_refused), TEST_CASE(test_plain_client_refused),
          TEST_CASE(test_insecure_server_answers_plain_client), TEST_CASE(test_nothing_listening),
          TEST_CASE(test_connection_lost))
