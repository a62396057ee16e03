/*
 * tests/unit/test_linkprobe.c: link measurements (net/linkprobe.h) on a fake
 * clock, and the node's control messages they travel in (net/ctlmsg.h):
 * round trips, hostile bytes, and the RTT / bandwidth arithmetic.
 */
#include "config.h"

#include <string.h>

#include "net/ctlmsg.h"
#include "net/linkprobe.h"
#include "scheduler/view.h"
#include "tests/unit/test.h"

static void test_ctlmsg_roundtrip(void)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	char why[SHOAL_WHY_LEN];
	shoal_ctlmsg m = {
	    .type = SHOAL_CTLMSG_LINK_PROBE, .seq = 42, .lep = 1, .rep = 3, .pad_len = 10000};
	ASSERT_EQ(shoal_ctlmsg_encode(&m, &b), SHOAL_OK);
	ASSERT_GT(b.len, 10000);
	shoal_ctlmsg d;
	ASSERT_EQ(shoal_ctlmsg_decode(b.data, b.len, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(d.type, SHOAL_CTLMSG_LINK_PROBE);
	ASSERT_U64_EQ(d.seq, 42);
	ASSERT_EQ(d.lep, 1);
	ASSERT_EQ(d.rep, 3);
	ASSERT_EQ(d.pad_len, 10000);
	const char *js = "{\"peers\":[]}";
	shoal_ctlmsg s = {
	    .type = SHOAL_CTLMSG_STATUS_RESP, .seq = 9, .json = js, .json_len = strlen(js)};
	ASSERT_EQ(shoal_ctlmsg_encode(&s, &b), SHOAL_OK);
	ASSERT_EQ(shoal_ctlmsg_decode(b.data, b.len, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(d.json_len, strlen(js));
	ASSERT_TRUE(d.json && !memcmp(d.json, js, d.json_len));
	/* every proper prefix is refused */
	for (size_t n = 0; n < b.len; n++)
		ASSERT_NE(shoal_ctlmsg_decode(b.data, n, &d, why, sizeof why), SHOAL_OK);
	shoal_wire_buf_fini(&b);
}

static void test_ctlmsg_not_ours(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_ctlmsg d;
	/* {"t":1,"v":1}: a membership message, handed on to SWIM */
	static const uint8_t swim[] = {0x82, 0xa1, 't', 0x01, 0xa1, 'v', 0x01};
	ASSERT_EQ(shoal_ctlmsg_decode(swim, sizeof swim, &d, why, sizeof why), SHOAL_ERR_NOTFOUND);
	static const uint8_t unknown[] = {0x83, 0xa1, 't', 0xcc, 0xc8, 0xa1, 'v',
	                                  0x01, 0xa3, 's', 'e',  'q',  0x01};
	ASSERT_EQ(shoal_ctlmsg_decode(unknown, sizeof unknown, &d, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	static const uint8_t huge[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
	ASSERT_EQ(shoal_ctlmsg_decode(huge, sizeof huge, &d, why, sizeof why), SHOAL_ERR_FORMAT);
}

static void test_rtt_and_bandwidth(void)
{
	shoal_linkprobe *lp;
	ASSERT_EQ(shoal_linkprobe_new(&lp), SHOAL_OK);
	shoal_linkprobe_target t;
	memset(&t, 0, sizeof t);
	memset(t.peer.b, 7, sizeof t.peer.b);
	t.lep = 0;
	t.rep = 1;
	snprintf(t.endpoint, sizeof t.endpoint, "tcp://10.0.0.1:0;10.0.0.2:47470");
	ASSERT_EQ(shoal_linkprobe_set_targets(lp, &t, 1), SHOAL_OK);
	shoal_record_link links[4];
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 4), 0);
	/* A link of 100 us RTT and 1e9 bytes/s: a 64 KiB pad adds 65.5 us. */
	uint64_t now = 1000000;
	int big_seen = 0;
	for (int i = 0; i < 40; i++) {
		shoal_ctlmsg m;
		const char *ep;
		ASSERT_EQ(shoal_linkprobe_next(lp, now, &m, &ep), 1);
		ASSERT_STR_EQ(ep, t.endpoint);
		uint64_t rtt = 100 + m.pad_len * 1000000ull / 1000000000ull;
		big_seen |= m.pad_len > 0;
		shoal_ctlmsg ack = {.type = SHOAL_CTLMSG_LINK_ACK,
		                    .seq = m.seq,
		                    .lep = m.lep,
		                    .rep = m.rep,
		                    .n = m.pad_len};
		shoal_linkprobe_ack(lp, &ack, now + rtt);
		shoal_linkprobe_ack(lp, &ack, now + 5 * rtt); /* a duplicate is ignored */
		now += 100000;
	}
	ASSERT_TRUE(big_seen);
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 4), 1);
	ASSERT_EQ(links[0].local_ep, 0);
	ASSERT_EQ(links[0].remote_ep, 1);
	/* published as the buckets of 100 us (90.5..107.6: 90) and 1e9 B/s */
	ASSERT_EQ(links[0].rtt_us,
	          shoal_bucket_geo_value(shoal_bucket_geo(100, SHOAL_BUCKET_NONE)));
	ASSERT_EQ(links[0].rtt_us, 90);
	ASSERT_U64_EQ(links[0].bw_bytes_s,
	              shoal_bucket_geo_value(shoal_bucket_geo(1000000000u, SHOAL_BUCKET_NONE)));
	/* an ack with a wrong size or an unknown seq changes nothing */
	shoal_ctlmsg bogus = {.type = SHOAL_CTLMSG_LINK_ACK, .seq = 12345, .n = 0};
	shoal_linkprobe_ack(lp, &bogus, now + 1);
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 4), 1);
	ASSERT_EQ(links[0].rtt_us, 90);
	/* keeping the target keeps its figures; dropping it forgets them */
	ASSERT_EQ(shoal_linkprobe_set_targets(lp, &t, 1), SHOAL_OK);
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 4), 1);
	ASSERT_EQ(shoal_linkprobe_set_targets(lp, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 4), 0);
	shoal_ctlmsg m;
	const char *ep;
	ASSERT_EQ(shoal_linkprobe_next(lp, now, &m, &ep), 0);
	shoal_linkprobe_free(lp);
}

static void test_late_ack_ignored(void)
{
	shoal_linkprobe *lp;
	ASSERT_EQ(shoal_linkprobe_new(&lp), SHOAL_OK);
	shoal_linkprobe_target t;
	memset(&t, 0, sizeof t);
	snprintf(t.endpoint, sizeof t.endpoint, "tcp://127.0.0.1:1");
	ASSERT_EQ(shoal_linkprobe_set_targets(lp, &t, 1), SHOAL_OK);
	shoal_ctlmsg m;
	const char *ep;
	ASSERT_EQ(shoal_linkprobe_next(lp, 1000, &m, &ep), 1);
	shoal_ctlmsg ack = {.type = SHOAL_CTLMSG_LINK_ACK, .seq = m.seq, .n = 0};
	shoal_linkprobe_ack(lp, &ack, 1000 + SHOAL_LINKPROBE_TIMEOUT_US + 1);
	shoal_record_link links[1];
	ASSERT_EQ(shoal_linkprobe_links(lp, links, 1), 0);
	shoal_linkprobe_free(lp);
}

TEST_MAIN(TEST_CASE(test_ctlmsg_roundtrip), TEST_CASE(test_ctlmsg_not_ours),
          TEST_CASE(test_rtt_and_bandwidth), TEST_CASE(test_late_ack_ignored))
