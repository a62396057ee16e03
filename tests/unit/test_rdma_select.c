/*
 * tests/unit/test_rdma_select.c: net/rdma_select.h on the shapes of real
 * machines: a Mac with one RDMA device per Thunderbolt port (rdma_en2,
 * rdma_en3) whose GID index 0 belongs to another interface; an mlx5 RoCE
 * NIC whose index 0 is the link-local RoCE v1 GID; an InfiniBand port; a
 * cable to the wrong port, an inactive port, a missing v2 GID, and the
 * --rdma-device / --rdma-gid overrides.
 */
#include "config.h"

#include <string.h>

#include "net/rdma_select.h"
#include "tests/unit/test.h"

static void gid_v4(shoal_rdma_gid *g, int index, shoal_rdma_gid_type type, const char *ip,
                   const char *netdev)
{
	memset(g, 0, sizeof *g);
	g->index = index;
	g->type = type;
	if (ip)
		shoal_rdma_addr_v4(ip, g->gid);
	snprintf(g->netdev, sizeof g->netdev, "%s", netdev);
}

static void gid_ll(shoal_rdma_gid *g, int index, shoal_rdma_gid_type type, const char *netdev)
{
	memset(g, 0, sizeof *g);
	g->index = index;
	g->type = type;
	g->gid[0] = 0xfe;
	g->gid[1] = 0x80;
	g->gid[15] = (uint8_t)(index + 1);
	snprintf(g->netdev, sizeof g->netdev, "%s", netdev);
}

/* Two Thunderbolt ports: en2 (10.0.2.1) and en3 (10.0.3.1); each device's
 * index 0 is a link-local GID of another interface (as reported for
 * Apple's RDMA over Thunderbolt), its v2 GID at index 1 or 3. No netdev
 * names in the ports: the rdma_enX <-> enX rule applies. */
static size_t mac_layout(shoal_rdma_port_desc p[2])
{
	memset(p, 0, 2 * sizeof *p);
	snprintf(p[0].device, sizeof p[0].device, "rdma_en2");
	p[0].port = 1;
	p[0].active = 1;
	p[0].link = SHOAL_RDMA_LINK_ETH;
	gid_ll(&p[0].gids[0], 0, SHOAL_RDMA_GID_ROCE_V2, "en0");
	gid_v4(&p[0].gids[1], 1, SHOAL_RDMA_GID_ROCE_V2, "10.0.2.1", "en2");
	p[0].n_gid = 2;
	snprintf(p[1].device, sizeof p[1].device, "rdma_en3");
	p[1].port = 1;
	p[1].active = 1;
	p[1].link = SHOAL_RDMA_LINK_ETH;
	gid_ll(&p[1].gids[0], 0, SHOAL_RDMA_GID_ROCE_V2, "en0");
	gid_ll(&p[1].gids[1], 1, SHOAL_RDMA_GID_ROCE_V1, "en3");
	gid_v4(&p[1].gids[2], 3, SHOAL_RDMA_GID_ROCE_V2, "10.0.3.1", "en3");
	p[1].n_gid = 3;
	return 2;
}

/* mlx5_0 port 1 on ens1f0 (192.168.5.7): index 0 link-local v1, 1
 * link-local v2, 2 IPv4 v1, 3 IPv4 v2; mlx5_1 on ens1f1, cable out. */
static size_t mlx_layout(shoal_rdma_port_desc p[2])
{
	memset(p, 0, 2 * sizeof *p);
	snprintf(p[0].device, sizeof p[0].device, "mlx5_0");
	p[0].port = 1;
	p[0].active = 1;
	p[0].link = SHOAL_RDMA_LINK_ETH;
	snprintf(p[0].netdev, sizeof p[0].netdev, "ens1f0");
	gid_ll(&p[0].gids[0], 0, SHOAL_RDMA_GID_ROCE_V1, "ens1f0");
	gid_ll(&p[0].gids[1], 1, SHOAL_RDMA_GID_ROCE_V2, "ens1f0");
	gid_v4(&p[0].gids[2], 2, SHOAL_RDMA_GID_ROCE_V1, "192.168.5.7", "ens1f0");
	gid_v4(&p[0].gids[3], 3, SHOAL_RDMA_GID_ROCE_V2, "192.168.5.7", "ens1f0");
	p[0].n_gid = 4;
	snprintf(p[1].device, sizeof p[1].device, "mlx5_1");
	p[1].port = 1;
	p[1].active = 0;
	p[1].link = SHOAL_RDMA_LINK_ETH;
	snprintf(p[1].netdev, sizeof p[1].netdev, "ens1f1");
	return 2;
}

static void test_mac_thunderbolt(void)
{
	shoal_rdma_port_desc p[2];
	size_t n = mac_layout(p);
	shoal_rdma_choice c;
	uint8_t a[16];
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_rdma_addr_v4("10.0.3.1", a), 0);
	ASSERT_EQ(shoal_rdma_select(p, n, "en3", a, NULL, -1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.port_at, 1);
	ASSERT_EQ(c.gid_index, 3); /* not 0 (another interface's), not 1 (v1) */
	ASSERT_STR_EQ(c.how, "macos name");
	shoal_rdma_addr_v4("10.0.2.1", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "en2", a, NULL, -1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.port_at, 0);
	ASSERT_EQ(c.gid_index, 1);
	/* the peer is on a cable to en5: no device there, and the reason says
	 * which devices are on which interfaces */
	shoal_rdma_addr_v4("10.0.5.1", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "en5", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "no RDMA device on en5") != NULL);
	ASSERT_TRUE(strstr(why, "rdma_en2 on en2") != NULL);
	ASSERT_TRUE(strstr(why, "rdma_en3 on en3") != NULL);
	/* the right device but an address it has no GID for */
	shoal_rdma_addr_v4("10.0.9.9", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "en3", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "no RoCE v2 GID for 10.0.9.9") != NULL);
}

static void test_mlx5_roce(void)
{
	shoal_rdma_port_desc p[2];
	size_t n = mlx_layout(p);
	shoal_rdma_choice c;
	uint8_t a[16];
	char why[SHOAL_WHY_LEN];
	shoal_rdma_addr_v4("192.168.5.7", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "ens1f0", a, NULL, -1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.port_at, 0);
	ASSERT_EQ(c.gid_index, 3); /* the IPv4 v2 GID, not index 0 (v1 link-local) */
	ASSERT_STR_EQ(c.how, "netdev");
	/* the second port has no cable */
	shoal_rdma_addr_v4("192.168.6.7", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "ens1f1", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "mlx5_1 port 1 (on ens1f1) is not active") != NULL);
	/* a v1-only fabric setup: drop the v2 GIDs; never falls to index 0 */
	p[0].n_gid = 1;
	shoal_rdma_addr_v4("192.168.5.7", a);
	ASSERT_EQ(shoal_rdma_select(p, n, "ens1f0", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "1 RoCE v1") != NULL);
}

static void test_infiniband(void)
{
	shoal_rdma_port_desc p;
	memset(&p, 0, sizeof p);
	snprintf(p.device, sizeof p.device, "mlx4_0");
	p.port = 1;
	p.active = 1;
	p.link = SHOAL_RDMA_LINK_IB;
	snprintf(p.netdev, sizeof p.netdev, "ib0");
	p.gids[0].index = 0;
	p.gids[0].type = SHOAL_RDMA_GID_IB;
	p.gids[0].gid[0] = 0xfe; /* subnet prefix fe80::, then the port GUID */
	p.gids[0].gid[1] = 0x80;
	p.gids[0].gid[15] = 7;
	p.n_gid = 1;
	shoal_rdma_choice c;
	uint8_t a[16];
	char why[SHOAL_WHY_LEN];
	shoal_rdma_addr_v4("10.1.0.2", a);
	ASSERT_EQ(shoal_rdma_select(&p, 1, "ib0", a, NULL, -1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.gid_index, 0);
	memset(p.gids[0].gid, 0, 16);
	ASSERT_EQ(shoal_rdma_select(&p, 1, "ib0", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
}

static void test_overrides(void)
{
	shoal_rdma_port_desc p[2];
	size_t n = mac_layout(p);
	shoal_rdma_choice c;
	uint8_t a[16];
	char why[SHOAL_WHY_LEN];
	shoal_rdma_addr_v4("10.0.3.1", a);
	/* --rdma-device alone: its GID by the rule, whatever the interface */
	ASSERT_EQ(shoal_rdma_select(p, n, "en9", a, "rdma_en3", -1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.port_at, 1);
	ASSERT_EQ(c.gid_index, 3);
	ASSERT_STR_EQ(c.how, "override");
	/* with --rdma-gid: taken when in the table, refused when not */
	ASSERT_EQ(shoal_rdma_select(p, n, "en3", a, "rdma_en3", 1, &c, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(c.gid_index, 1);
	ASSERT_EQ(shoal_rdma_select(p, n, "en3", a, "rdma_en3", 7, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "--rdma-gid 7") != NULL);
	ASSERT_EQ(shoal_rdma_select(p, n, "en3", a, "mlx5_9", -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "--rdma-device mlx5_9") != NULL);
	/* no devices at all */
	ASSERT_EQ(shoal_rdma_select(p, 0, "en3", a, NULL, -1, &c, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_EQ(shoal_rdma_addr_v4("not an address", a), -1);
}

TEST_MAIN(TEST_CASE(test_mac_thunderbolt), TEST_CASE(test_mlx5_roce), TEST_CASE(test_infiniband),
          TEST_CASE(test_overrides))
