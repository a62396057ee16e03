/*
 * tests/unit/test_sched_mtp.c: DeepSeek's MTP layer in the plan
 * (scheduler/cost.c: mtp_mem). A view with a peer that offers mtp makes
 * the head peer hold the layer's bytes (weights, its KV for ctx x
 * sessions, the embedding it shares):
 *   - two fast peers whose 10 + 10 layers fit without those bytes and not
 *     with them: the plan takes a third peer, every peer within its
 *     memory, and the head peer counts the layer;
 *   - without a peer that offers mtp, or with a model without the layer,
 *     the plan is bitwise the one of a manifest that knows no MTP layer;
 *   - a tensor group's lead, which samples, holds it, the other member not;
 *   - the plan with the layer encodes as version 3 and decodes with it.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#define GB 1000000000ULL
#define MB 1000000ULL

static shoal_manifest_layer layers[20];

/* 20 dense layers of 1 GB, a 1 MB embedding and head, no KV in the
 * layers; an MTP layer of 1.5 GB with 1000 bytes of KV a token. */
static shoal_manifest model(bool with_mtp)
{
	shoal_manifest m;
	memset(&m, 0, sizeof m);
	memset(layers, 0, sizeof layers);
	snprintf(m.name, sizeof m.name, "dense-mtp");
	m.n_layer = 20;
	m.layers = layers;
	for (uint32_t l = 0; l < m.n_layer; l++) {
		layers[l].bytes = GB;
		layers[l].flops = 2 * GB;
	}
	m.embd_bytes = MB;
	m.head_bytes = MB;
	m.head_flops = 2 * MB;
	m.act_bytes_per_token = 16384;
	if (with_mtp) {
		m.mtp_bytes = 1500 * MB;
		m.mtp_kv_bytes_per_token = 1000;
		m.mtp_shares_embd = true;
	}
	return m;
}

static shoal_view_peer peer(uint8_t id, const char *name, uint64_t mem, uint64_t bw_gbs, bool mtp)
{
	shoal_view_peer p;
	memset(&p, 0, sizeof p);
	p.id.b[15] = id;
	snprintf(p.name, sizeof p.name, "%s", name);
	p.mem_bytes = mem;
	p.mem_bw = bw_gbs * GB;
	p.flops = 100000 * GB;
	p.mtp = mtp;
	return p;
}

/* Fast a and b hold 10.5 GB each (10 layers and the embedding or the
 * head); slow c 100 GB. mtp_peer: which offers mtp (0: none). */
static shoal_view *cluster(int mtp_peer)
{
	shoal_view *v = shoal_view_new(20000, 5 * GB);
	shoal_view_peer ps[3] = {peer(1, "fast-a", 10500 * MB, 800, mtp_peer == 1),
	                         peer(2, "fast-b", 10500 * MB, 800, mtp_peer == 2),
	                         peer(3, "slow-c", 100 * GB, 50, mtp_peer == 3)};
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(shoal_view_add_peer(v, &ps[i], NULL, 0), SHOAL_OK);
	return v;
}

static shoal_policy policy(void)
{
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.ctx = 1000;
	pol.sessions = 2;
	pol.headroom_permille = 0;
	return pol;
}

static bool uses(const shoal_plan *p, const char *name)
{
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!strcmp(shoal_plan_peer_at(p, i)->name, name))
			return true;
	return false;
}

/* The head peer counts the layer; the plan needs the slow peer for it. */
static void test_head_counts_mtp(void)
{
	shoal_manifest m = model(true);
	shoal_policy pol = policy();
	char why[SHOAL_WHY_LEN] = "";
	shoal_plan *p0 = NULL, *p = NULL;
	shoal_view *v0 = cluster(0), *v = cluster(3); /* the slow peer offers mtp */
	ASSERT_EQ(shoal_schedule(v0, &m, &pol, NULL, &p0, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(p0), 2);
	ASSERT_FALSE(uses(p0, "slow-c"));
	ASSERT_FALSE(shoal_plan_mtp(p0));
	ASSERT_U64_EQ(shoal_plan_mtp_bytes(p0), 0);

	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_mtp(p));
	ASSERT_TRUE(uses(p, "slow-c"));
	ASSERT_GE(shoal_plan_n_stages(p), 2);
	ASSERT_NE(memcmp(shoal_plan_digest(p), shoal_plan_digest(p0), SHOAL_DIGEST_BYTES), 0);
	/* weights, KV for 1000 tokens x 2 sessions, and the embedding the
	 * layer shares where the head peer does not embed */
	uint32_t hp = shoal_plan_head_peer(p);
	uint64_t want = 1500 * MB + 1000 * 1000 * 2 + (hp != shoal_plan_embd_peer(p) ? MB : 0);
	ASSERT_U64_EQ(shoal_plan_mtp_bytes(p), want);
	uint64_t layers_on_head = 0;
	for (size_t i = 0; i < shoal_plan_n_stages(p); i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		if (s->peer == hp)
			layers_on_head += s->end_layer - s->first_layer;
	}
	const shoal_plan_peer *h = shoal_plan_peer_at(p, hp);
	ASSERT_GE(h->weight_bytes, layers_on_head * GB + MB + want);
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		ASSERT_LE(pp->weight_bytes + pp->kv_bytes, pp->capacity_bytes);
	}
	printf("  without mtp: 2 stages on the fast peers; with: %zu stages, head on %s "
	       "(%llu layers, %.3f GB of MTP layer)\n",
	       shoal_plan_n_stages(p), h->name, (unsigned long long)layers_on_head,
	       (double)want / 1e9);

	/* the same whichever peer offers it */
	for (int who = 1; who <= 2; who++) {
		shoal_view *vw = cluster(who);
		shoal_plan *q = NULL;
		ASSERT_EQ(shoal_schedule(vw, &m, &pol, NULL, &q, why, sizeof why), SHOAL_OK);
		ASSERT_MEM_EQ(shoal_plan_digest(q), shoal_plan_digest(p), SHOAL_DIGEST_BYTES);
		shoal_plan_free(q);
		shoal_view_free(vw);
	}
	/* a previous plan without the layer is not kept once it is asked for */
	shoal_plan *k = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &k, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_mtp(k));
	ASSERT_FALSE(shoal_plan_kept(k));
	shoal_plan_free(k);
	shoal_plan_free(p0);
	shoal_plan_free(p);
	shoal_view_free(v0);
	shoal_view_free(v);
}

/* No peer offers mtp, or the model has no such layer: the plan of a
 * manifest without MTP fields, bitwise. */
static void test_unchanged_without(void)
{
	shoal_manifest m = model(true), m0 = model(false);
	shoal_policy pol = policy();
	shoal_plan *a = NULL, *b = NULL, *c = NULL;
	shoal_view *v0 = cluster(0), *v = cluster(1);
	ASSERT_EQ(shoal_schedule(v0, &m0, &pol, NULL, &a, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_schedule(v0, &m, &pol, NULL, &b, NULL, 0), SHOAL_OK);
	m = model(false);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &c, NULL, 0), SHOAL_OK);
	ASSERT_MEM_EQ(shoal_plan_digest(a), shoal_plan_digest(b), SHOAL_DIGEST_BYTES);
	ASSERT_MEM_EQ(shoal_plan_digest(a), shoal_plan_digest(c), SHOAL_DIGEST_BYTES);
	ASSERT_U64_EQ(shoal_plan_predicted_ns(a), shoal_plan_predicted_ns(b));
	for (size_t i = 0; i < shoal_plan_n_peers(a); i++)
		ASSERT_U64_EQ(shoal_plan_peer_at(a, i)->weight_bytes,
		              shoal_plan_peer_at(b, i)->weight_bytes);
	ASSERT_FALSE(shoal_plan_mtp(b) || shoal_plan_mtp(c));
	shoal_plan_free(a);
	shoal_plan_free(b);
	shoal_plan_free(c);
	shoal_view_free(v0);
	shoal_view_free(v);
}

/* One tensor group of two equal peers: the lead counts the layer. */
static void test_tensor_group(void)
{
	shoal_manifest m = model(true);
	shoal_policy pol = policy();
	pol.tensor_groups = pol.tensor_prefer = true;
	shoal_view *v = shoal_view_new(20000, 5 * GB);
	shoal_view_peer a = peer(1, "a", 40 * GB, 800, true), b = peer(2, "b", 40 * GB, 800, false);
	ASSERT_EQ(shoal_view_add_peer(v, &a, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_view_add_peer(v, &b, NULL, 0), SHOAL_OK);
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_groups(p), 1);
	ASSERT_TRUE(shoal_plan_mtp(p));
	uint32_t lead = shoal_plan_head_peer(p);
	const shoal_plan_peer *l = shoal_plan_peer_at(p, lead),
	                      *o = shoal_plan_peer_at(p, 1 - lead);
	printf("  group: lead %s %.3f GB, other %.3f GB\n", l->name, (double)l->weight_bytes / 1e9,
	       (double)o->weight_bytes / 1e9);
	/* equal shares of the layers; the lead has the layer and its KV on top
	 * (both embed: the layer's embedding is there anyway) */
	ASSERT_GE(l->weight_bytes, o->weight_bytes + 1500 * MB + 2 * MB);
	ASSERT_LE(l->weight_bytes, o->weight_bytes + 1500 * MB + 2 * MB + 2 * MB);
	shoal_plan_free(p);
	shoal_view_free(v);
}

/* Version 3 round trip; a version 3 without its trailing 1 is refused. */
static void test_encoding(void)
{
	shoal_manifest m = model(true);
	shoal_policy pol = policy();
	shoal_plan *p = NULL, *q = NULL;
	shoal_view *v = cluster(2);
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	uint8_t *enc = NULL;
	size_t len = 0;
	ASSERT_EQ(shoal_plan_encode(p, &enc, &len), SHOAL_OK);
	ASSERT_EQ(enc[4], 3); /* the version, little-endian after "SHPL" */
	ASSERT_EQ(shoal_plan_decode(enc, len, &q, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_mtp(q));
	ASSERT_MEM_EQ(shoal_plan_digest(q), shoal_plan_digest(p), SHOAL_DIGEST_BYTES);
	shoal_plan_free(q);
	q = NULL;
	enc[len - 4] = 0;
	ASSERT_EQ(shoal_plan_decode(enc, len, &q, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "MTP") != NULL);
	ASSERT_EQ(shoal_plan_decode(enc, len - 4, &q, why, sizeof why), SHOAL_ERR_FORMAT);
	free(enc);
	shoal_plan_free(p);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_head_counts_mtp), TEST_CASE(test_unchanged_without),
          TEST_CASE(test_tensor_group), TEST_CASE(test_encoding))
