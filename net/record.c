/*
 * net/record.c: the record helpers (see net/record.h): the record's own
 * validity check and equality.
 */
#include "net/record.h"

#include <stdio.h>
#include <string.h>

#include "base/hex.h"

void shoal_record_init(shoal_record *r)
{
	memset(r, 0, sizeof *r);
}

void shoal_record_strcpy(char *dst, size_t cap, const char *src)
{
	if (!cap)
		return;
	size_t n = src ? strnlen(src, cap - 1) : 0;
	memcpy(dst, src, n);
	dst[n] = 0;
}

static int terminated(const char *s, size_t cap)
{
	return memchr(s, 0, cap) != NULL;
}

#define STR_OK(field) terminated((field), sizeof(field))

shoal_err shoal_record_check(const shoal_record *r, char *why, size_t why_len)
{
	if (r->n_data_ep > SHOAL_RECORD_MAX_DATA_EP)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u data endpoints, at most %d",
		                 r->n_data_ep, SHOAL_RECORD_MAX_DATA_EP);
	if (r->n_rdma > SHOAL_RECORD_MAX_RDMA)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u RDMA devices, at most %d",
		                 r->n_rdma, SHOAL_RECORD_MAX_RDMA);
	if (r->n_models > SHOAL_RECORD_MAX_MODELS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u models, at most %d",
		                 r->n_models, SHOAL_RECORD_MAX_MODELS);
	if (r->n_dsuspect > SHOAL_RECORD_MAX_DSUSPECT)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u data suspects, at most %d",
		                 r->n_dsuspect, SHOAL_RECORD_MAX_DSUSPECT);
	if (r->n_links > SHOAL_RECORD_MAX_LINKS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u links, at most %d", r->n_links,
		                 SHOAL_RECORD_MAX_LINKS);
	if (r->n_dlinks > SHOAL_RECORD_MAX_DLINKS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u data links, at most %d",
		                 r->n_dlinks, SHOAL_RECORD_MAX_DLINKS);
	for (uint32_t i = 0; i < r->n_dlinks; i++)
		if (!r->dlinks[i].rtt_us)
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "data link %u: no round trip", i);
	if (!STR_OK(r->name) || !STR_OK(r->cluster) || !STR_OK(r->sw_version) ||
	    !STR_OK(r->ctl_endpoint) || !STR_OK(r->os) || !STR_OK(r->arch))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "unterminated string");
	if (!r->ctl_endpoint[0])
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "empty control endpoint");
	for (uint32_t i = 0; i < r->n_data_ep; i++) {
		const shoal_record_endpoint *d = &r->data_ep[i];
		if (!STR_OK(d->kind) || !STR_OK(d->ifname) || !STR_OK(d->addr) || d->rdma > 1)
			return shoal_why(why, why_len, SHOAL_ERR_RANGE, "bad data endpoint %u", i);
	}
	for (uint32_t i = 0; i < r->n_rdma; i++)
		if (!STR_OK(r->rdma[i]))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE, "bad RDMA device %u", i);
	if (r->spec_mtp > 1)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "spec_mtp %u", r->spec_mtp);
	if (r->serving > 1 || (r->serving && r->n_models == 0))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "serving %u with %u models",
		                 r->serving, r->n_models);
	for (uint32_t i = 0; i < r->n_models; i++)
		if (!STR_OK(r->models[i].path))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE, "bad model %u", i);
	if (r->n_devices > SHOAL_RECORD_MAX_DEVICES)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u devices, at most %d",
		                 r->n_devices, SHOAL_RECORD_MAX_DEVICES);
	for (uint32_t i = 0; i < r->n_devices; i++) {
		const shoal_record_device *d = &r->devices[i];
		if (!STR_OK(d->backend) || !STR_OK(d->name) || !d->backend[0] ||
		    d->kind > SHOAL_RECORD_DEVICE_GPU || d->unified > 1 || d->software > 1)
			return shoal_why(why, why_len, SHOAL_ERR_RANGE, "bad device %u", i);
	}
	for (uint32_t i = 0; i < r->n_links; i++) {
		const shoal_record_link *l = &r->links[i];
		/* The remote index is checked against the other peer's record by
		 * whoever uses it; ours must name one of our endpoints. */
		if (l->local_ep >= SHOAL_RECORD_MAX_DATA_EP ||
		    l->remote_ep >= SHOAL_RECORD_MAX_DATA_EP ||
		    (r->n_data_ep && l->local_ep >= r->n_data_ep))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "link %u names endpoint %u of %u", i, l->local_ep,
			                 r->n_data_ep);
	}
	return SHOAL_OK;
}

int shoal_record_equal(const shoal_record *a, const shoal_record *b)
{
	if (memcmp(&a->id, &b->id, sizeof a->id) || a->version != b->version ||
	    strcmp(a->name, b->name) || strcmp(a->cluster, b->cluster) ||
	    strcmp(a->sw_version, b->sw_version) || a->proto_version != b->proto_version ||
	    a->sched_version != b->sched_version || strcmp(a->ctl_endpoint, b->ctl_endpoint) ||
	    a->n_data_ep != b->n_data_ep || a->mem_total != b->mem_total ||
	    a->mem_weights != b->mem_weights || a->compute_mb_s != b->compute_mb_s ||
	    a->compute_mflops != b->compute_mflops || a->cores != b->cores ||
	    strcmp(a->os, b->os) || strcmp(a->arch, b->arch) || a->n_rdma != b->n_rdma ||
	    a->n_models != b->n_models || a->load_permille != b->load_permille ||
	    a->n_links != b->n_links || a->n_devices != b->n_devices || a->serving != b->serving ||
	    a->n_dsuspect != b->n_dsuspect ||
	    memcmp(a->dsuspect, b->dsuspect, a->n_dsuspect * sizeof a->dsuspect[0]) ||
	    a->n_dlinks != b->n_dlinks || a->ready_epoch != b->ready_epoch ||
	    a->served_epoch != b->served_epoch || a->spec_mtp != b->spec_mtp ||
	    memcmp(a->ready_digest, b->ready_digest, sizeof a->ready_digest))
		return 0;
	for (uint32_t i = 0; i < a->n_data_ep; i++) {
		const shoal_record_endpoint *x = &a->data_ep[i], *y = &b->data_ep[i];
		if (strcmp(x->kind, y->kind) || strcmp(x->ifname, y->ifname) ||
		    strcmp(x->addr, y->addr) || x->rdma != y->rdma)
			return 0;
	}
	for (uint32_t i = 0; i < a->n_rdma; i++)
		if (strcmp(a->rdma[i], b->rdma[i]))
			return 0;
	for (uint32_t i = 0; i < a->n_models; i++) {
		const shoal_record_model *x = &a->models[i], *y = &b->models[i];
		if (memcmp(x->digest, y->digest, sizeof x->digest) || strcmp(x->path, y->path) ||
		    x->bytes != y->bytes)
			return 0;
	}
	for (uint32_t i = 0; i < a->n_devices; i++) {
		const shoal_record_device *x = &a->devices[i], *y = &b->devices[i];
		if (strcmp(x->backend, y->backend) || strcmp(x->name, y->name) ||
		    x->kind != y->kind || x->unified != y->unified || x->software != y->software ||
		    x->mem_bytes != y->mem_bytes || x->read_mb_s != y->read_mb_s ||
		    x->mflops != y->mflops)
			return 0;
	}
	for (uint32_t i = 0; i < a->n_dlinks; i++) {
		const shoal_record_dlink *x = &a->dlinks[i], *y = &b->dlinks[i];
		if (memcmp(&x->peer, &y->peer, sizeof x->peer) || x->rtt_us != y->rtt_us ||
		    x->bw_bytes_s != y->bw_bytes_s)
			return 0;
	}
	for (uint32_t i = 0; i < a->n_links; i++) {
		const shoal_record_link *x = &a->links[i], *y = &b->links[i];
		if (memcmp(&x->peer, &y->peer, sizeof x->peer) || x->local_ep != y->local_ep ||
		    x->remote_ep != y->remote_ep || x->rtt_us != y->rtt_us ||
		    x->bw_bytes_s != y->bw_bytes_s)
			return 0;
	}
	return 1;
}
