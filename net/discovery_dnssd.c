/*
 * net/discovery_dnssd.c: DNS-SD discovery through the dns_sd API (see
 * discovery.h): Register our `_shoal._tcp` instance, Browse for others,
 * Resolve each (host, port, TXT), then QueryRecord(A) for the host's IPv4
 * address. Avahi's compatibility library has no DNSServiceGetAddrInfo and
 * no shared connection, so every operation is its own DNSServiceRef with
 * its own descriptor, all polled by the node.
 *
 * Operation chain per instance found:  browse ADD -> resolve -> query A
 *                                       -> on_found(endpoint tcp://A:port)
 *
 * Invariants:
 *   1. A DNSServiceRef is released only by dnssd_process (after its
 *      DNSServiceProcessResult returned) or dnssd_fds, never inside
 *      its own callback: Avahi's compatibility layer frees its D-Bus client
 *      there, and doing it under the client's own dispatch crashed at
 *      teardown in tests/sh/mesh_netns.sh.
 *   2. When the register or browse reports an error (the daemon went
 *      away), every operation is closed and discovery stays off; the node
 *      keeps its seeds and gossip.
 *   3. With Avahi, Avahi's allocator zeroes what it hands out. Avahi 0.8's
 *      compatibility layer leaves the callback pointers of a new
 *      DNSServiceRef uninitialised except its own, and on a daemon failure
 *      calls the first non-NULL one: for a resolve or query in flight that
 *      was heap garbage, and the node segfaulted when avahi-daemon stopped
 *      (tests/sh/mdns_daemon_death.sh).
 */
#include "config.h"

#include "net/discovery.h"

#include <arpa/inet.h>
#include <dns_sd.h>
#include <pthread.h>
#ifdef SHOAL_HAVE_AVAHI
#include <avahi-common/malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

/* Operations in flight: one register, one browse, and per instance one
 * resolve or query. 64 lets a 30-peer LAN resolve at once. */
#define SHOAL_DNSSD_MAX_OPS 64
/* A resolve or query that has not answered in 10 s is abandoned (the
 * instance is stale, e.g. a crashed peer in a cache); browse re-adds. */
#define SHOAL_DNSSD_OP_TIMEOUT_MS 10000

typedef enum {
	SHOAL_DNSSD_REGISTER,
	SHOAL_DNSSD_BROWSE,
	SHOAL_DNSSD_RESOLVE,
	SHOAL_DNSSD_QUERY
} shoal_dnssd_kind;

typedef struct shoal_dnssd shoal_dnssd;

typedef struct shoal_dnssd_op {
	shoal_dnssd *owner;
	DNSServiceRef ref;
	shoal_dnssd_kind kind;
	uint64_t started_ms;
	/* resolve/query context */
	char name[256];
	uint16_t port;
	char id_hex[40];
	char cluster[80];
	uint64_t inc;
	int open;
	int resolved; /* resolve answered: start the A query (outside the callback) */
	uint32_t ifindex;
} shoal_dnssd_op;

struct shoal_dnssd {
	shoal_discovery_config cfg;
	char instance[64], cluster[80], id_hex[40];
	shoal_dnssd_op *ops[SHOAL_DNSSD_MAX_OPS];
	size_t n_ops;
	DNSServiceRef reg;
	int failed; /* the daemon went away: everything is closed */
};

static shoal_dnssd_op *dnssd_op_add(shoal_dnssd *d, shoal_dnssd_kind kind)
{
	if (d->n_ops >= SHOAL_DNSSD_MAX_OPS)
		return NULL;
	shoal_dnssd_op *op = calloc(1, sizeof *op);
	if (!op)
		return NULL;
	op->owner = d;
	op->kind = kind;
	op->started_ms = shoal_clock_now_ms();
	d->ops[d->n_ops++] = op;
	return op;
}

static void dnssd_op_del(shoal_dnssd *d, shoal_dnssd_op *op)
{
	for (size_t i = 0; i < d->n_ops; i++)
		if (d->ops[i] == op) {
			d->ops[i] = d->ops[--d->n_ops];
			break;
		}
	if (op->ref)
		DNSServiceRefDeallocate(op->ref);
	free(op);
}

/* Build our TXT record into txt (caller deallocates). */
static void dnssd_txt(shoal_dnssd *d, TXTRecordRef *txt, char *buf, uint16_t cap)
{
	char inc[24];
	snprintf(inc, sizeof inc, "%llu", (unsigned long long)d->cfg.incarnation);
	TXTRecordCreate(txt, cap, buf);
	TXTRecordSetValue(txt, "v", 1, "1");
	TXTRecordSetValue(txt, "cluster", (uint8_t)strlen(d->cluster), d->cluster);
	TXTRecordSetValue(txt, "id", (uint8_t)strlen(d->id_hex), d->id_hex);
	TXTRecordSetValue(txt, "inc", (uint8_t)strlen(inc), inc);
	TXTRecordSetValue(txt, "open", 1, d->cfg.open ? "1" : "0");
}

/* Copy TXT value `key` into out[cap] as a string; "" when absent. */
static void dnssd_txt_get(uint16_t len, const unsigned char *txt, const char *key, char *out,
                          size_t cap)
{
	uint8_t vl = 0;
	const void *v = TXTRecordGetValuePtr(len, txt, key, &vl);
	out[0] = '\0';
	if (!v)
		return;
	size_t n = vl < cap - 1 ? vl : cap - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

static void DNSSD_API dnssd_register_cb(DNSServiceRef ref, DNSServiceFlags flags,
                                        DNSServiceErrorType err, const char *name, const char *type,
                                        const char *domain, void *ctx)
{
	shoal_dnssd *d = ctx;
	if (err != kDNSServiceErr_NoError) {
		SHOAL_LOG_W("discovery", "mDNS registration failed: error %d", (int)err);
		d->failed = 1;
	} else
		SHOAL_LOG_I("discovery", "advertising %s.%s%s", name, type, domain);
}

static void DNSSD_API dnssd_query_cb(DNSServiceRef ref, DNSServiceFlags flags, uint32_t ifindex,
                                     DNSServiceErrorType err, const char *fullname, uint16_t rrtype,
                                     uint16_t rrclass, uint16_t rdlen, const void *rdata,
                                     uint32_t ttl, void *ctx)
{
	shoal_dnssd_op *op = ctx;
	if (err != kDNSServiceErr_NoError || rrtype != kDNSServiceType_A || rdlen != 4 ||
	    !(flags & kDNSServiceFlagsAdd) || op->started_ms == 0)
		return;
	char ip[INET_ADDRSTRLEN], ep[96];
	if (!inet_ntop(AF_INET, rdata, ip, sizeof ip))
		return;
	snprintf(ep, sizeof ep, "tcp://%s:%u", ip, (unsigned)op->port);
	shoal_discovery_found f = {.id_hex = op->id_hex,
	                           .incarnation = op->inc,
	                           .cluster = op->cluster,
	                           .open = op->open,
	                           .endpoint = ep};
	op->started_ms = 0; /* done: dnssd_fds retires it (not from inside its callback) */
	op->owner->cfg.on_found(op->owner->cfg.ud, &f);
}

static void DNSSD_API dnssd_resolve_cb(DNSServiceRef ref, DNSServiceFlags flags, uint32_t ifindex,
                                       DNSServiceErrorType err, const char *fullname,
                                       const char *host, uint16_t port_be, uint16_t txt_len,
                                       const unsigned char *txt, void *ctx)
{
	shoal_dnssd_op *op = ctx;
	if (err != kDNSServiceErr_NoError) {
		op->started_ms = 0; /* retire */
		return;
	}
	op->port = ntohs(port_be);
	char inc[24];
	dnssd_txt_get(txt_len, txt, "id", op->id_hex, sizeof op->id_hex);
	dnssd_txt_get(txt_len, txt, "cluster", op->cluster, sizeof op->cluster);
	dnssd_txt_get(txt_len, txt, "inc", inc, sizeof inc);
	op->inc = strtoull(inc, NULL, 10);
	char open[4];
	dnssd_txt_get(txt_len, txt, "open", open, sizeof open);
	op->open = open[0] == '1';
	snprintf(op->name, sizeof op->name, "%s", host ? host : "");
	op->ifindex = ifindex;
	op->resolved = 1; /* dnssd_process swaps the resolve for a query */
}

static void DNSSD_API dnssd_browse_cb(DNSServiceRef ref, DNSServiceFlags flags, uint32_t ifindex,
                                      DNSServiceErrorType err, const char *name, const char *type,
                                      const char *domain, void *ctx)
{
	shoal_dnssd *d = ctx;
	if (err != kDNSServiceErr_NoError) {
		SHOAL_LOG_W("discovery", "mDNS browse error %d", (int)err);
		d->failed = 1;
		return;
	}
	if (!(flags & kDNSServiceFlagsAdd))
		return; /* removals mean nothing for liveness */
	if (!strcmp(name, d->instance))
		return; /* ourselves */
	shoal_dnssd_op *op = dnssd_op_add(d, SHOAL_DNSSD_RESOLVE);
	if (!op) {
		SHOAL_LOG_D("discovery", "too many lookups in flight; skipping %s", name);
		return;
	}
	snprintf(op->name, sizeof op->name, "%s", name);
	if (DNSServiceResolve(&op->ref, 0, ifindex, name, type, domain, dnssd_resolve_cb, op) !=
	    kDNSServiceErr_NoError) {
		op->ref = NULL;
		dnssd_op_del(d, op);
	}
}

static void dnssd_close(void *state);

#ifdef SHOAL_HAVE_AVAHI
/* Invariant 3: Avahi's allocations come zeroed (libc's free and realloc
 * stay, so memory from before the switch is freed the same way). */
static void *dnssd_zalloc(size_t size)
{
	return calloc(1, size ? size : 1);
}
static const AvahiAllocator dnssd_allocator = {
    .malloc = dnssd_zalloc, .free = free, .realloc = realloc, .calloc = calloc};
static void dnssd_set_allocator(void)
{
	avahi_set_allocator(&dnssd_allocator);
}
#endif

static shoal_err dnssd_open(const shoal_discovery_config *cfg, void **state, char *why,
                            size_t why_len)
{
	*state = NULL;
#ifndef __APPLE__
	/* Avahi's compatibility layer prints a 3-line warning per process
	 * unless this is set; we know what we use. */
	setenv("AVAHI_COMPAT_NOWARN", "1", 0);
#endif
#ifdef SHOAL_HAVE_AVAHI
	static pthread_once_t allocator_once = PTHREAD_ONCE_INIT;
	pthread_once(&allocator_once, dnssd_set_allocator);
#endif
	shoal_dnssd *d = calloc(1, sizeof *d);
	if (!d)
		return SHOAL_ERR_NOMEM;
	d->cfg = *cfg;
	snprintf(d->instance, sizeof d->instance, "%s", cfg->instance);
	snprintf(d->cluster, sizeof d->cluster, "%s", cfg->cluster);
	snprintf(d->id_hex, sizeof d->id_hex, "%s", cfg->id_hex);
	d->cfg.instance = d->instance;
	d->cfg.cluster = d->cluster;
	d->cfg.id_hex = d->id_hex;
	char buf[512];
	TXTRecordRef txt;
	dnssd_txt(d, &txt, buf, sizeof buf);
	shoal_dnssd_op *rop = dnssd_op_add(d, SHOAL_DNSSD_REGISTER);
	DNSServiceErrorType err =
	    rop ? DNSServiceRegister(&rop->ref, 0, 0, d->instance, SHOAL_DISCOVERY_SERVICE, NULL,
	                             NULL, htons(cfg->port), TXTRecordGetLength(&txt),
	                             TXTRecordGetBytesPtr(&txt), dnssd_register_cb, d)
	        : kDNSServiceErr_NoMemory;
	TXTRecordDeallocate(&txt);
	if (err != kDNSServiceErr_NoError) {
		if (rop)
			rop->ref = NULL;
		dnssd_close(d);
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
		                 "mDNS unavailable (is avahi-daemon running?): DNSServiceRegister "
		                 "error %d",
		                 (int)err);
	}
	rop->started_ms = UINT64_MAX; /* never times out */
	d->reg = rop->ref;
	shoal_dnssd_op *bop = dnssd_op_add(d, SHOAL_DNSSD_BROWSE);
	err = DNSServiceBrowse(&bop->ref, 0, 0, SHOAL_DISCOVERY_SERVICE, NULL, dnssd_browse_cb, d);
	if (err != kDNSServiceErr_NoError) {
		bop->ref = NULL;
		dnssd_close(d);
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "mDNS browse failed: error %d",
		                 (int)err);
	}
	bop->started_ms = UINT64_MAX;
	*state = d;
	return SHOAL_OK;
}

static size_t dnssd_fds(void *state, int *fds, size_t cap)
{
	shoal_dnssd *d = state;
	uint64_t now = shoal_clock_now_ms();
	for (size_t i = 0; i < d->n_ops;) {
		shoal_dnssd_op *op = d->ops[i];
		if (op->started_ms != UINT64_MAX &&
		    (op->started_ms == 0 || !op->ref ||
		     now - op->started_ms > SHOAL_DNSSD_OP_TIMEOUT_MS)) {
			dnssd_op_del(d, op);
			continue;
		}
		i++;
	}
	size_t k = 0;
	for (size_t i = 0; i < d->n_ops && k < cap; i++)
		fds[k++] = DNSServiceRefSockFD(d->ops[i]->ref);
	return k;
}

static void dnssd_process(void *state, int fd)
{
	shoal_dnssd *d = state;
	for (size_t i = 0; !d->failed && i < d->n_ops; i++) {
		shoal_dnssd_op *op = d->ops[i];
		if (!op->ref || DNSServiceRefSockFD(op->ref) != fd)
			continue;
		DNSServiceErrorType e = DNSServiceProcessResult(op->ref);
		/* Refs are released here, after ProcessResult returned, never
		 * inside their own callbacks: Avahi's compatibility layer would
		 * free the client under its own D-Bus dispatch. */
		if (d->failed) {
			SHOAL_LOG_W("discovery", "the mDNS daemon went away: discovery is off "
			                         "(seeds and gossip go on)");
			while (d->n_ops)
				dnssd_op_del(d, d->ops[d->n_ops - 1]);
			d->reg = NULL;
			return;
		}
		/* on error retire it, unless it is the register or the browse */
		if (e != kDNSServiceErr_NoError && op->started_ms != UINT64_MAX)
			op->started_ms = 0;
		if (op->kind == SHOAL_DNSSD_RESOLVE && op->resolved && op->started_ms != 0) {
			/* Swap the resolve for a query of the host's A record. */
			DNSServiceRef q;
			DNSServiceRefDeallocate(op->ref);
			op->ref = NULL;
			op->kind = SHOAL_DNSSD_QUERY;
			if (DNSServiceQueryRecord(&q, 0, op->ifindex, op->name, kDNSServiceType_A,
			                          kDNSServiceClass_IN, dnssd_query_cb,
			                          op) != kDNSServiceErr_NoError)
				op->started_ms = 0;
			else
				op->ref = q;
		}
		return;
	}
}

static shoal_err dnssd_update(void *state, uint64_t incarnation)
{
	shoal_dnssd *d = state;
	d->cfg.incarnation = incarnation;
	if (d->failed || !d->reg)
		return SHOAL_ERR_STATE;
	char buf[512];
	TXTRecordRef txt;
	dnssd_txt(d, &txt, buf, sizeof buf);
	DNSServiceErrorType err = DNSServiceUpdateRecord(d->reg, NULL, 0, TXTRecordGetLength(&txt),
	                                                 TXTRecordGetBytesPtr(&txt), 0);
	TXTRecordDeallocate(&txt);
	return err == kDNSServiceErr_NoError ? SHOAL_OK : SHOAL_ERR_IO;
}

static void dnssd_close(void *state)
{
	shoal_dnssd *d = state;
	if (!d)
		return;
	while (d->n_ops)
		dnssd_op_del(d, d->ops[d->n_ops - 1]);
	free(d);
}

const shoal_discovery_ops shoal_discovery_dnssd = {
    .name = "dns-sd",
    .open = dnssd_open,
    .fds = dnssd_fds,
    .process = dnssd_process,
    .update = dnssd_update,
    .close = dnssd_close,
};
