/*
 * tests/unit/test_linkview.c: measured links from gossiped records into
 * the scheduler's view (net/linkview.h): the fastest endpoint pair per
 * direction, the slower direction per pair, the default where nobody
 * measured; a pair measured at 5 us one way plans a tensor group and at
 * 300 us a pipeline; the same records in any order give the same links and
 * the same plan digest; the data plane's round trips and bandwidths
 * (dlinks) before the control plane's, where asked for.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "net/linkview.h"
#include "scheduler/plan.h"
#include "tests/unit/test.h"

#define GB   1000000000ULL
#define US   1000ULL
#define NLAY 32

static shoal_manifest_layer lay[NLAY];

/* 32 dense layers of 1 GB (a quarter attention), 8 KV heads, 14336 FFN
 * columns: as test_sched_tensor's, where two 20 GB peers choose between a
 * group and two stages by the link. */
static shoal_manifest model(void)
{
	shoal_manifest m;
	memset(&m, 0, sizeof m);
	snprintf(m.name, sizeof m.name, "linkview-test");
	m.n_layer = NLAY;
	m.n_embd = 4096;
	m.n_vocab = 32000;
	m.layers = lay;
	for (int l = 0; l < NLAY; l++) {
		memset(&lay[l], 0, sizeof lay[l]);
		lay[l].bytes = GB;
		lay[l].attn_bytes = GB / 4;
		lay[l].flops = 2 * GB;
		lay[l].kv_bytes_per_token = 16384;
		lay[l].n_head_kv = 8;
		lay[l].n_ff = 14336;
	}
	m.embd_bytes = m.head_bytes = 256000000ULL;
	m.head_flops = 512000000ULL;
	m.act_bytes_per_token = 4096 * 4;
	return m;
}

static void rec_init(shoal_record *r, int i)
{
	shoal_record_init(r);
	r->id.b[0] = 0xb0;
	r->id.b[15] = (uint8_t)(i + 1);
	snprintf(r->name, sizeof r->name, "peer%d", i);
}

static void rec_link(shoal_record *r, const shoal_record *to, uint8_t lep, uint32_t rtt_us,
                     uint64_t bw)
{
	shoal_record_link *l = &r->links[r->n_links++];
	memset(l, 0, sizeof *l);
	l->peer = to->id;
	l->local_ep = lep;
	l->remote_ep = lep;
	l->rtt_us = rtt_us;
	l->bw_bytes_s = bw;
}

static void rec_dlink(shoal_record *r, const shoal_record *to, uint32_t rtt_us, uint64_t bw)
{
	shoal_record_dlink *d = &r->dlinks[r->n_dlinks++];
	memset(d, 0, sizeof *d);
	d->peer = to->id;
	d->rtt_us = rtt_us;
	d->bw_bytes_s = bw;
}

/* A view of the records in order ord (NULL: as given), peers of 800 GB/s
 * and 20 GB, the node's default link (200 us, 125 MB/s) unless def_lat,
 * with the figures `what` names (net/linkview.h). */
static shoal_view *view_with(shoal_record *r, int n, const int *ord, uint64_t def_lat,
                             unsigned what)
{
	shoal_view *v = shoal_view_new(def_lat ? def_lat : 200 * US, 125000000u);
	const shoal_record *recs[8];
	char why[SHOAL_WHY_LEN] = "";
	for (int k = 0; v && k < n; k++) {
		const shoal_record *x = &r[ord ? ord[k] : k];
		shoal_view_peer p;
		memset(&p, 0, sizeof p);
		p.id = x->id;
		snprintf(p.name, sizeof p.name, "%s", x->name);
		p.mem_bytes = 20 * GB;
		p.mem_bw = 800 * GB;
		p.flops = 100000 * GB;
		recs[k] = x;
		if (shoal_view_add_peer(v, &p, why, sizeof why))
			goto fail;
	}
	if (v && shoal_linkview_apply(v, recs, (size_t)n, what, NULL, why, sizeof why) == SHOAL_OK)
		return v;
fail:
	fprintf(stderr, "view: %s\n", why);
	shoal_view_free(v);
	return NULL; /* the callers' ASSERTs fail on it */
}

/* The control plane's links only, as the tests before data links had it */
static shoal_view *view_of(shoal_record *r, int n, const int *ord, uint64_t def_lat)
{
	return view_with(r, n, ord, def_lat, SHOAL_LINKVIEW_CTL);
}

static shoal_plan *plan_of(const shoal_view *v)
{
	shoal_manifest m = model();
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.tensor_groups = true;
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why))
		fprintf(stderr, "schedule: %s\n", why);
	return p;
}

/* Two peers that measured each other at rtt_ab / rtt_ba (0: not). */
static shoal_plan *pair(uint32_t rtt_ab, uint32_t rtt_ba, uint64_t def_lat, uint64_t *lat)
{
	shoal_record r[2];
	rec_init(&r[0], 0);
	rec_init(&r[1], 1);
	if (rtt_ab)
		rec_link(&r[0], &r[1], 0, rtt_ab, 10 * GB);
	if (rtt_ba)
		rec_link(&r[1], &r[0], 0, rtt_ba, 10 * GB);
	shoal_view *v = view_of(r, 2, NULL, def_lat);
	if (!v)
		return NULL;
	uint64_t bw;
	shoal_view_link(v, 0, 1, lat, &bw);
	shoal_plan *p = plan_of(v);
	shoal_view_free(v);
	return p; /* NULL on failure: the callers ASSERT */
}

static void test_golden_flip(void)
{
	uint64_t lat;
	/* measured 10 us RTT (5 us one way): the bucket of 10 is 9, so 4.5 us;
	 * the group wins although --link-us (200) alone would not */
	shoal_plan *p = pair(10, 10, 0, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_U64_EQ(lat, 4500);
	ASSERT_EQ(shoal_plan_n_groups(p), 1);
	ASSERT_EQ(shoal_plan_n_stages(p), 1);
	shoal_plan_free(p);
	/* 600 us RTT (300 us one way; bucket 512: 256 us): two stages */
	p = pair(600, 600, 0, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_U64_EQ(lat, 256000);
	ASSERT_EQ(shoal_plan_n_groups(p), 0);
	ASSERT_EQ(shoal_plan_n_stages(p), 2);
	shoal_plan_free(p);
	/* nothing measured: the default link (200 us) plans two stages, a
	 * default of 5 us (--link-us 5) the group */
	p = pair(0, 0, 0, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_U64_EQ(lat, 200000);
	ASSERT_EQ(shoal_plan_n_groups(p), 0);
	shoal_plan_free(p);
	p = pair(0, 0, 5 * US, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_EQ(shoal_plan_n_groups(p), 1);
	shoal_plan_free(p);
	/* one direction measured is enough; two that disagree: the slower */
	p = pair(10, 0, 0, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_U64_EQ(lat, 4500);
	ASSERT_EQ(shoal_plan_n_groups(p), 1);
	shoal_plan_free(p);
	p = pair(10, 600, 0, &lat);
	ASSERT_TRUE(p != NULL);
	ASSERT_U64_EQ(lat, 256000);
	ASSERT_EQ(shoal_plan_n_groups(p), 0);
	shoal_plan_free(p);
}

static void test_fastest_pair_and_bw(void)
{
	shoal_record r[2];
	rec_init(&r[0], 0);
	rec_init(&r[1], 1);
	/* over Ethernet (ep 0) and Thunderbolt (ep 1): the faster is planned,
	 * with its bandwidth; the other direction measured less bandwidth */
	rec_link(&r[0], &r[1], 0, 300, 100000000u);
	rec_link(&r[0], &r[1], 1, 12, 8 * GB);
	rec_link(&r[1], &r[0], 1, 11, 5 * GB);
	rec_link(&r[1], &r[0], 0, 310, 0);
	shoal_view *v = view_of(r, 2, NULL, 0);
	ASSERT_TRUE(v != NULL);
	ASSERT_EQ(shoal_view_n_links(v), 1);
	uint64_t lat, bw;
	shoal_view_link(v, 0, 1, &lat, &bw);
	/* buckets: 12 -> 11, 11 -> 11; 5e9 -> 4.29e9 (2^32) */
	ASSERT_U64_EQ(lat, 5500);
	ASSERT_U64_EQ(bw, shoal_bucket_geo_value(shoal_bucket_geo(5 * GB, SHOAL_BUCKET_NONE)));
	ASSERT_U64_EQ(bw, 4294967296ULL);
	shoal_view_free(v);
	/* no bandwidth measured: the view's default */
	rec_init(&r[0], 0);
	rec_init(&r[1], 1);
	rec_link(&r[0], &r[1], 0, 50, 0);
	v = view_of(r, 2, NULL, 0);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(bw, 125000000u);
	ASSERT_U64_EQ(lat, 22500); /* 50 -> 45 */
	shoal_view_free(v);
}

static void test_any_order(void)
{
	/* four peers: 0-1 and 2-3 close (two endpoint pairs for 0-1; 2-3
	 * measured by one side only), the rest far, 1-3 not measured */
	shoal_record r[4];
	for (int i = 0; i < 4; i++)
		rec_init(&r[i], i);
	rec_link(&r[0], &r[1], 0, 400, 2 * GB);
	rec_link(&r[0], &r[1], 1, 9, 10 * GB);
	rec_link(&r[1], &r[0], 1, 11, 12 * GB);
	rec_link(&r[2], &r[3], 0, 8, 10 * GB);
	rec_link(&r[0], &r[2], 0, 700, 1 * GB);
	rec_link(&r[2], &r[0], 0, 650, 0);
	rec_link(&r[0], &r[3], 0, 640, 1 * GB);
	rec_link(&r[1], &r[2], 0, 660, 1 * GB);
	uint8_t d0[SHOAL_DIGEST_BYTES];
	uint64_t l0[6], b0[6];
	int done = 0, ord[4];
	size_t groups = 0;
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			for (int c = 0; c < 4; c++)
				for (int d = 0; d < 4; d++) {
					if (a == b || a == c || a == d || b == c || b == d ||
					    c == d)
						continue;
					ord[0] = a, ord[1] = b, ord[2] = c, ord[3] = d;
					/* and the links inside each record reversed */
					if (done % 2)
						for (int i = 0; i < 4; i++)
							for (uint32_t k = 0; k < r[i].n_links / 2;
							     k++) {
								shoal_record_link t = r[i].links[k];
								r[i].links[k] =
								    r[i].links[r[i].n_links - 1 -
								               k];
								r[i].links[r[i].n_links - 1 - k] =
								    t;
							}
					shoal_view *v = view_of(r, 4, ord, 0);
					ASSERT_TRUE(v != NULL);
					ASSERT_EQ(shoal_view_n_links(v), 5);
					shoal_plan *p = plan_of(v);
					ASSERT_TRUE(p != NULL);
					for (size_t i = 0; i < 5; i++) {
						shoal_peer_id x, y;
						uint64_t lat, bw;
						shoal_view_link_at(v, i, &x, &y, &lat, &bw);
						if (!done)
							l0[i] = lat, b0[i] = bw;
						ASSERT_U64_EQ(lat, l0[i]);
						ASSERT_U64_EQ(bw, b0[i]);
					}
					if (!done++) {
						memcpy(d0, shoal_plan_digest(p), sizeof d0);
						groups = shoal_plan_n_groups(p);
					}
					ASSERT_MEM_EQ(shoal_plan_digest(p), d0, sizeof d0);
					shoal_plan_free(p);
					shoal_view_free(v);
				}
	ASSERT_EQ(done, 24);
	printf("     4 peers: %zu tensor group(s) in every order\n", groups);
	ASSERT_GT(groups, 0); /* the measured close pairs matter */
}

/* The data plane's figures (dlinks): before the control plane's where
 * either side has one, the slower direction, the data bandwidth where
 * measured; left out when not asked for. */
static void test_data_links(void)
{
	shoal_record r[2];
	rec_init(&r[0], 0);
	rec_init(&r[1], 1);
	/* the control plane over ZeroMQ: 900 us; the data plane: 40 and 53 us
	 * (buckets 38 and 53), 2 GB/s one way, not measured the other */
	rec_link(&r[0], &r[1], 0, 900, 100000000u);
	rec_dlink(&r[0], &r[1], 40, 2 * GB);
	rec_dlink(&r[1], &r[0], 53, 0);
	uint64_t lat, bw;
	shoal_view *v = view_with(r, 2, NULL, 0, SHOAL_LINKVIEW_CTL | SHOAL_LINKVIEW_DATA);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(lat, 26500); /* 53 / 2 us */
	ASSERT_U64_EQ(bw, shoal_bucket_geo_value(shoal_bucket_geo(2 * GB, SHOAL_BUCKET_NONE)));
	shoal_view_free(v);
	/* data figures alone: the same; the control plane alone: its own */
	v = view_with(r, 2, NULL, 0, SHOAL_LINKVIEW_DATA);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(lat, 26500);
	shoal_view_free(v);
	v = view_of(r, 2, NULL, 0);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(lat, shoal_bucket_geo_value(shoal_bucket_geo(900, SHOAL_BUCKET_NONE)) * 500);
	ASSERT_TRUE(bw < GB);
	shoal_view_free(v);
	/* no data bandwidth: the control plane's; neither: the default */
	r[0].dlinks[0].bw_bytes_s = 0;
	v = view_with(r, 2, NULL, 0, SHOAL_LINKVIEW_CTL | SHOAL_LINKVIEW_DATA);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(lat, 26500);
	ASSERT_U64_EQ(bw, shoal_bucket_geo_value(shoal_bucket_geo(100000000u, SHOAL_BUCKET_NONE)));
	shoal_view_free(v);
	v = view_with(r, 2, NULL, 0, SHOAL_LINKVIEW_DATA);
	ASSERT_TRUE(v != NULL);
	shoal_view_link(v, 0, 1, &lat, &bw);
	ASSERT_U64_EQ(bw, 125000000u);
	shoal_view_free(v);
	/* neither asked for: the default link */
	v = view_with(r, 2, NULL, 0, 0);
	ASSERT_TRUE(v != NULL);
	ASSERT_EQ(shoal_view_n_links(v), 0);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_golden_flip), TEST_CASE(test_fastest_pair_and_bw),
          TEST_CASE(test_any_order), TEST_CASE(test_data_links))
