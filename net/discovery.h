/*
 * net/discovery.h: how a peer finds others to join: a const ops table per
 * method (DNS-SD today; a static list or a cloud registry could follow).
 *
 * Part: net/. Discovery only introduces peers: each find gives a control
 * endpoint, and the node asks membership (net/swim.h) to join through it.
 * Liveness never comes from here (an mDNS entry of a crashed peer lives on
 * for minutes).
 *
 * Advertised (DNS-SD `_shoal._tcp`, port = the control port) with TXT:
 *   v=1  cluster=NAME  id=<32 hex>  inc=<incarnation>  open=0|1
 * open=1 says the cluster runs --insecure (no key).
 */
#ifndef SHOAL_NET_DISCOVERY_H
#define SHOAL_NET_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SHOAL_DISCOVERY_SERVICE "_shoal._tcp"

/* One peer found. Every pointer is borrowed for the callback only. */
typedef struct shoal_discovery_found {
	const char *id_hex;   /* "" if the TXT had none */
	uint64_t incarnation; /* 0 if absent */
	const char *cluster;  /* "" if absent */
	int open;             /* 1: that peer runs without a key */
	const char *endpoint; /* "tcp://IP:PORT", its control endpoint */
} shoal_discovery_found;

typedef struct shoal_discovery_config {
	const char *instance; /* service instance name, e.g. "host-1a2b3c4d" */
	const char *cluster;
	const char *id_hex;
	uint64_t incarnation;
	uint16_t port; /* our control port */
	int open;
	/* Called from ops->process for each peer resolved (ourselves too: the
	 * node filters by id). Required. */
	void (*on_found)(void *ud, const shoal_discovery_found *f);
	void *ud;
} shoal_discovery_config;

typedef struct shoal_discovery_ops {
	const char *name;
	/* Start advertising and browsing. May block briefly (connecting to a
	 * local daemon). cfg's strings are copied. *state is owned by the
	 * method until close. SHOAL_ERR_NOTFOUND with a reason when the
	 * system service is not there (the node then goes on with seeds).
	 * Required. */
	shoal_err (*open)(const shoal_discovery_config *cfg, void **state, char *why,
	                  size_t why_len);
	/* The descriptors to poll for reading, at most cap, written to fds.
	 * Also retires operations that have hung for too long. Must not block.
	 * Required. */
	size_t (*fds)(void *state, int *fds, size_t cap);
	/* fd is readable: process it (may call on_found). Must not block.
	 * Required. */
	void (*process)(void *state, int fd);
	/* Re-advertise with a new incarnation. May be NULL (not supported). */
	shoal_err (*update)(void *state, uint64_t incarnation);
	/* Withdraw the advertisement and free state. NULL state is a no-op.
	 * Required. */
	void (*close)(void *state);
} shoal_discovery_ops;

/* DNS-SD through dns_sd.h: Avahi's compatibility library on Linux,
 * Bonjour on macOS (net/discovery_dnssd.c). */
extern const shoal_discovery_ops shoal_discovery_dnssd;

#endif
