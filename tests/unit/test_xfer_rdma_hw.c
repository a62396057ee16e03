/*
 * tests/unit/test_xfer_rdma_hw.c: the RDMA data plane on real hardware through
 * libibverbs: two links on loopback TCP upgrade over the first device (a
 * queue pair to itself: loopback carries no RDMA device, so the device is
 * given as --rdma-device would, its GID index by SHOAL_TEST_RDMA_GID,
 * default 0) and carry frames intact and in order.
 *
 * Without a device (ibv_get_device_list returns NULL or an empty list) it
 * first checks that a link stays on TCP and says why, then exits 77 (SKIP)
 * with the reason; built without RDMA it skips at once.
 */
#include "config.h"

#include "net/xfer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"

#ifdef SHOAL_HAVE_RDMA
#include <infiniband/verbs.h>

static const uint8_t TOKEN[] = "hw";
static const uint8_t DIGEST[32] = {7};
static char skip_reason[SHOAL_WHY_LEN];
static char hw_device[64]; /* the first device: every link's override */

static int admit(void *ctx, const uint8_t peer[16], const char *addr, const uint8_t *t, size_t n)
{
	return n == sizeof TOKEN && !memcmp(t, TOKEN, n);
}

typedef struct conn_job {
	shoal_xfer_config cfg;
	uint16_t port;
	shoal_xfer_link *link;
	shoal_err e;
	char why[SHOAL_WHY_LEN];
} conn_job;

static void *conn_main(void *p)
{
	conn_job *j = p;
	j->e = shoal_xfer_link_connect(&j->cfg, "127.0.0.1", j->port, TOKEN, sizeof TOKEN, &j->link,
	                               j->why, sizeof j->why);
	return NULL;
}

static shoal_err pair(shoal_xfer_link **a, shoal_xfer_link **b)
{
	shoal_xfer_config c;
	shoal_xfer_listener *l;
	char why[SHOAL_WHY_LEN];
	shoal_xfer_config_default(&c);
	c.max_frame = 1 << 16;
	if (hw_device[0]) {
		const char *g = getenv("SHOAL_TEST_RDMA_GID");
		c.rdma.device = hw_device;
		c.rdma.gid_plus1 = (g ? atoi(g) : 0) + 1;
	}
	shoal_err e = shoal_xfer_listener_new(&c, "127.0.0.1", 0, admit, NULL, &l, why, sizeof why);
	if (e)
		return e;
	conn_job j = {.cfg = c, .port = shoal_xfer_listener_port(l)};
	pthread_t th;
	pthread_create(&th, NULL, conn_main, &j);
	e = shoal_xfer_listener_accept(l, 5000, a, why, sizeof why);
	pthread_join(th, NULL);
	shoal_xfer_listener_free(l);
	if (e || j.e)
		fprintf(stderr, "accept: %s / connect: %s\n", e ? why : "ok", j.e ? j.why : "ok");
	*b = j.link;
	return e ? e : j.e;
}
#endif

static void test_rdma_on_hardware(void)
{
#ifndef SHOAL_HAVE_RDMA
	TEST_SKIP("built without libibverbs (configure --with-rdma)");
#else
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		snprintf(skip_reason, sizeof skip_reason, "no RDMA device: ibv_get_device_list: %s",
		         list ? "no devices" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		/* Meanwhile a link must come up on TCP and say why. */
		shoal_xfer_link *a = NULL, *b = NULL;
		ASSERT_EQ(pair(&a, &b), SHOAL_OK);
		ASSERT_STR_EQ(shoal_xfer_link_transport(a), "tcp");
		const char *s = shoal_xfer_link_status(a);
		fprintf(stderr, "link status without a device: %s\n", s);
		/* plain words, not the verbs call's errno text */
		ASSERT_TRUE(strncmp(s, "tcp (no rdma device: this machine has none", 42) == 0);
		shoal_xfer_link_free(a);
		shoal_xfer_link_free(b);
		TEST_SKIP(skip_reason);
	}
	snprintf(hw_device, sizeof hw_device, "%s", ibv_get_device_name(list[0]));
	ibv_free_device_list(list);
	shoal_xfer_link *a = NULL, *b = NULL;
	ASSERT_EQ(pair(&a, &b), SHOAL_OK);
	printf("link status: %s\n", shoal_xfer_link_status(a));
	ASSERT_STR_EQ(shoal_xfer_link_transport(a), "rdma");
	shoal_xfer_link_set_plan(a, DIGEST, 1);
	shoal_xfer_link_set_plan(b, DIGEST, 1);
	static float x[4096];
	char why[SHOAL_WHY_LEN];
	for (int i = 0; i < 1000; i++) {
		shoal_xfer_row row = {(uint64_t)i, (uint32_t)i};
		uint32_t dim = 1 + (uint32_t)(i * 37 % 4096);
		x[0] = (float)i;
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
		                    .dtype = SHOAL_XFER_DTYPE_F32,
		                    .layer_first = 0,
		                    .layer_end = 1,
		                    .dim = dim,
		                    .n_rows = 1,
		                    .rows = &row};
		struct iovec v = {x, dim * 4};
		shoal_xfer_frame f;
		ASSERT_EQ(shoal_xfer_link_send(b, &h, &v, 1, 2000, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_OK);
		ASSERT_U64_EQ(f.hdr.rows[0].session, (uint64_t)i);
		ASSERT_EQ(f.hdr.dim, dim);
		ASSERT_EQ(((const float *)f.payload)[0], (float)i);
	}
	shoal_xfer_link_free(a);
	shoal_xfer_link_free(b);
#endif
}

TEST_MAIN(TEST_CASE(test_rdma_on_hardware))
