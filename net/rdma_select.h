/*
 * net/rdma_select.h: which RDMA device, port and GID a data link uses, from
 * the endpoint it upgrades. Part: net/ (data plane). A pure function over a
 * description of the devices (the provider fills it from the verbs GID
 * table, the tests from the shapes of real machines), so the rule is the
 * same everywhere and testable without hardware.
 *
 * The rule, for a link on interface IF with local address A:
 *   1. --rdma-device D (and --rdma-gid G) override: D must exist and have
 *      an active port; G, when given, must be in its GID table.
 *   2. Otherwise the devices whose port carries IF: on Linux the port's
 *      netdev is IF, or its GID table holds a RoCE v2 entry of IF for A
 *      (a VLAN or macvlan on the port); on macOS `rdma_enX` belongs to
 *      `enX` (Thunderbolt: one device per port). Ports not active are
 *      skipped with their state in the reason.
 *   3. On that port, the GID: InfiniBand, the port GID (index 0, its
 *      subnet prefix nonzero); Ethernet (RoCE) and Thunderbolt, a RoCE v2
 *      GID whose address is A (IPv4-mapped ::ffff:a.b.c.d or the IPv6
 *      address) and whose netdev, when known, is IF; a RoCE v1 or
 *      link-local GID is never chosen on its own (not routable, and
 *      unusable on v2-only fabrics).
 *   4. No match: SHOAL_ERR_NOTFOUND with a reason that names the
 *      interface, the address and what was there ("no RDMA device on en5
 *      (devices: rdma_en2 on en2, rdma_en3 on en3)"), so a link to a peer
 *      on another cable falls back to TCP with a reason that names it.
 */
#ifndef SHOAL_NET_RDMA_SELECT_H
#define SHOAL_NET_RDMA_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* GID entries kept per port: the populated ones of a table that is
 * usually 128-256 long (2 per address per RoCE version, plus VLANs). */
#define SHOAL_RDMA_MAX_GIDS 32
/* Ports described at most: 16 Thunderbolt ports or dual-port NICs. */
#define SHOAL_RDMA_MAX_PORTS 16

typedef enum {
	SHOAL_RDMA_GID_IB = 0,  /* InfiniBand port GID */
	SHOAL_RDMA_GID_ROCE_V1, /* RoCE v1 (link-local, layer 2) */
	SHOAL_RDMA_GID_ROCE_V2, /* RoCE v2 (UDP/IP, routable) */
} shoal_rdma_gid_type;

typedef enum { SHOAL_RDMA_LINK_IB = 0, SHOAL_RDMA_LINK_ETH } shoal_rdma_link_layer;

typedef struct shoal_rdma_gid {
	int index;
	shoal_rdma_gid_type type;
	uint8_t gid[16];
	char netdev[32]; /* the interface the GID belongs to ("" unknown) */
} shoal_rdma_gid;

/* One port of one device. */
typedef struct shoal_rdma_port_desc {
	char device[64]; /* "mlx5_0", "rdma_en3" */
	uint8_t port;    /* 1-based */
	int active;      /* port state ACTIVE */
	shoal_rdma_link_layer link;
	char netdev[32]; /* the port's interface ("" unknown) */
	uint16_t lid;    /* InfiniBand LID (0 on Ethernet) */
	uint32_t mtu;    /* active MTU in bytes */
	size_t n_gid;
	shoal_rdma_gid gids[SHOAL_RDMA_MAX_GIDS];
} shoal_rdma_port_desc;

typedef struct shoal_rdma_choice {
	size_t port_at; /* index into the ports given */
	int gid_index;
	const char *how; /* static: "override", "netdev", "macos name" */
} shoal_rdma_choice;

/* Choose for a link on interface ifname with local address addr (16
 * bytes: IPv6, or IPv4-mapped ::ffff:a.b.c.d). want_device NULL and
 * want_gid < 0: no override. */
shoal_err shoal_rdma_select(const shoal_rdma_port_desc *ports, size_t n_ports, const char *ifname,
                            const uint8_t addr[16], const char *want_device, int want_gid,
                            shoal_rdma_choice *out, char *why, size_t why_len);

/* addr as IPv4-mapped from a dotted quad; -1 when it is not one. */
int shoal_rdma_addr_v4(const char *dotted, uint8_t addr[16]);

#endif
