/*
 * net/rdma_select.c: the device, port and GID of a data link (the rule is in
 * rdma_select.h).
 */
#include "net/rdma_select.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int shoal_rdma_addr_v4(const char *dotted, uint8_t addr[16])
{
	struct in_addr a;
	if (!dotted || inet_pton(AF_INET, dotted, &a) != 1)
		return -1;
	memset(addr, 0, 16);
	addr[10] = addr[11] = 0xff;
	memcpy(addr + 12, &a, 4);
	return 0;
}

/* GID g is a RoCE v2 entry for addr that may belong to ifname (NULL:
 * any interface). */
static bool gid_fits(const shoal_rdma_gid *g, const char *ifname, const uint8_t addr[16])
{
	return g->type == SHOAL_RDMA_GID_ROCE_V2 && !memcmp(g->gid, addr, 16) &&
	       (!ifname || !g->netdev[0] || !strcmp(g->netdev, ifname));
}

/* The port's netdev, a RoCE v2 GID of ifname for addr, or (macOS)
 * rdma_enX for enX. */
static bool port_carries(const shoal_rdma_port_desc *p, const char *ifname, const uint8_t addr[16],
                         const char **how)
{
	if (p->netdev[0] && !strcmp(p->netdev, ifname)) {
		*how = "netdev";
		return true;
	}
	if (!strncmp(p->device, "rdma_", 5) && !strcmp(p->device + 5, ifname)) {
		*how = "macos name";
		return true;
	}
	for (size_t i = 0; i < p->n_gid; i++)
		if (p->gids[i].netdev[0] && gid_fits(&p->gids[i], ifname, addr)) {
			*how = "gid netdev";
			return true;
		}
	return false;
}

static bool gid_zero(const uint8_t g[16])
{
	static const uint8_t z[16];
	return !memcmp(g, z, 16);
}

/* The GID of port p for address addr, or -1 (reason in why). */
static int pick_gid(const shoal_rdma_port_desc *p, const char *ifname, const uint8_t addr[16],
                    char *why, size_t why_len)
{
	if (p->link == SHOAL_RDMA_LINK_IB) {
		for (size_t i = 0; i < p->n_gid; i++)
			if (p->gids[i].index == 0 && !gid_zero(p->gids[i].gid))
				return 0;
		snprintf(why, why_len, "%s port %u: no InfiniBand port GID", p->device,
		         (unsigned)p->port);
		return -1;
	}
	size_t v1 = 0, other = 0;
	for (size_t i = 0; i < p->n_gid; i++) {
		const shoal_rdma_gid *g = &p->gids[i];
		if (gid_fits(g, ifname, addr))
			return g->index;
		if (g->type == SHOAL_RDMA_GID_ROCE_V1)
			v1++;
		else
			other++;
	}
	char a[INET6_ADDRSTRLEN] = "?";
	if (addr[10] == 0xff && addr[11] == 0xff && !addr[0])
		inet_ntop(AF_INET, addr + 12, a, sizeof a);
	else
		inet_ntop(AF_INET6, addr, a, sizeof a);
	snprintf(why, why_len,
	         "%s port %u has no RoCE v2 GID for %s (%zu RoCE v1 and %zu other GID(s))",
	         p->device, (unsigned)p->port, a, v1, other);
	return -1;
}

shoal_err shoal_rdma_select(const shoal_rdma_port_desc *ports, size_t n_ports, const char *ifname,
                            const uint8_t addr[16], const char *want_device, int want_gid,
                            shoal_rdma_choice *out, char *why, size_t why_len)
{
	char r[SHOAL_WHY_LEN] = "";
	if (!n_ports)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no RDMA device");
	if (want_device) {
		for (size_t i = 0; i < n_ports; i++) {
			const shoal_rdma_port_desc *p = &ports[i];
			if (strcmp(p->device, want_device) || !p->active)
				continue;
			int g = want_gid;
			if (g >= 0) {
				bool found = false;
				for (size_t k = 0; k < p->n_gid && !found; k++)
					found = p->gids[k].index == g;
				if (!found)
					return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
					                 "--rdma-gid %d is not in %s's GID table",
					                 g, want_device);
			} else if ((g = pick_gid(p, NULL, addr, r, sizeof r)) < 0) {
				return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "%s", r);
			}
			*out = (shoal_rdma_choice){.port_at = i, .gid_index = g, .how = "override"};
			return SHOAL_OK;
		}
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
		                 "--rdma-device %s: no such device with an active port",
		                 want_device);
	}
	/* the devices on the link's interface */
	char seen[160] = "";
	size_t ns = 0;
	for (size_t i = 0; i < n_ports; i++) {
		const shoal_rdma_port_desc *p = &ports[i];
		const char *how = NULL;
		if (!port_carries(p, ifname, addr, &how)) {
			size_t l = strlen(seen);
			if (l < sizeof seen - 1)
				snprintf(
				    seen + l, sizeof seen - l, "%s%s on %s", ns++ ? ", " : "",
				    p->device,
				    p->netdev[0]
				        ? p->netdev
				        : (!strncmp(p->device, "rdma_", 5) ? p->device + 5 : "?"));
			continue;
		}
		if (!p->active) {
			snprintf(r, sizeof r, "%s port %u (on %s) is not active", p->device,
			         (unsigned)p->port, ifname);
			continue;
		}
		int g = pick_gid(p, ifname, addr, r, sizeof r);
		if (g < 0)
			continue;
		*out = (shoal_rdma_choice){.port_at = i, .gid_index = g, .how = how};
		return SHOAL_OK;
	}
	if (r[0])
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "%s", r);
	return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no RDMA device on %s (devices: %s)",
	                 ifname, seen[0] ? seen : "none");
}
