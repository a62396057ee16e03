/*
 * net/record.c: the record helpers (see net/record.h): the record's own
 * validity check, equality, and the per-peer JSON object of
 * `shoal status --json`.
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
	if (r->n_links > SHOAL_RECORD_MAX_LINKS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u links, at most %d", r->n_links,
		                 SHOAL_RECORD_MAX_LINKS);
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
	if (r->serving > 1 || (r->serving && r->n_models == 0))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "serving %u with %u models",
		                 r->serving, r->n_models);
	for (uint32_t i = 0; i < r->n_models; i++)
		if (!STR_OK(r->models[i].path))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE, "bad model %u", i);
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
	    a->n_links != b->n_links || a->serving != b->serving ||
	    a->ready_epoch != b->ready_epoch ||
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
	for (uint32_t i = 0; i < a->n_links; i++) {
		const shoal_record_link *x = &a->links[i], *y = &b->links[i];
		if (memcmp(&x->peer, &y->peer, sizeof x->peer) || x->local_ep != y->local_ep ||
		    x->remote_ep != y->remote_ep || x->rtt_us != y->rtt_us ||
		    x->bw_bytes_s != y->bw_bytes_s)
			return 0;
	}
	return 1;
}

/* json_object_set_new that remembers a failure instead of leaking. */
static int put(json_t *o, const char *k, json_t *v)
{
	return v ? json_object_set_new(o, k, v) : -1;
}

/* Strings from the network need not be UTF-8, which JSON requires. */
static json_t *jstr(const char *s)
{
	json_t *v = json_string(s);
	return v ? v : json_string("(not utf-8)");
}

json_t *shoal_record_to_json(const shoal_record *r)
{
	char hex[2 * SHOAL_MODEL_DIGEST_LEN + 1];
	json_t *o = json_object(), *a;
	int rc = 0;
	if (!o)
		return NULL;
	shoal_peer_id_to_hex(&r->id, hex);
	rc |= put(o, "id", jstr(hex));
	rc |= put(o, "name", jstr(r->name));
	rc |= put(o, "record_version", json_integer((json_int_t)r->version));
	rc |= put(o, "cluster", jstr(r->cluster));
	rc |= put(o, "version", jstr(r->sw_version));
	rc |= put(o, "protocol_version", json_integer(r->proto_version));
	rc |= put(o, "scheduler_version", json_integer(r->sched_version));
	rc |= put(o, "control_endpoint", jstr(r->ctl_endpoint));
	rc |= put(o, "mem_total", json_integer((json_int_t)r->mem_total));
	rc |= put(o, "mem_weights", json_integer((json_int_t)r->mem_weights));
	rc |= put(o, "compute_gb_s", json_real((double)r->compute_mb_s / 1000.0));
	rc |= put(o, "compute_gflops", json_real((double)r->compute_mflops / 1000.0));
	rc |= put(o, "cores", json_integer(r->cores));
	rc |= put(o, "os", jstr(r->os));
	rc |= put(o, "arch", jstr(r->arch));
	rc |= put(o, "load", json_real((double)r->load_permille / 1000.0));
	rc |= put(o, "data_endpoints", a = json_array());
	for (uint32_t i = 0; a && i < r->n_data_ep; i++) {
		json_t *e = json_object();
		if (!e || json_array_append_new(a, e)) {
			rc = -1;
			break;
		}
		rc |= put(e, "kind", jstr(r->data_ep[i].kind));
		rc |= put(e, "interface", jstr(r->data_ep[i].ifname));
		rc |= put(e, "address", jstr(r->data_ep[i].addr));
		rc |= put(e, "rdma", json_boolean(r->data_ep[i].rdma));
	}
	rc |= put(o, "rdma_devices", a = json_array());
	for (uint32_t i = 0; a && i < r->n_rdma; i++)
		rc |= json_array_append_new(a, jstr(r->rdma[i]));
	rc |= put(o, "models", a = json_array());
	for (uint32_t i = 0; a && i < r->n_models; i++) {
		json_t *e = json_object();
		if (!e || json_array_append_new(a, e)) {
			rc = -1;
			break;
		}
		shoal_hex_encode(r->models[i].digest, SHOAL_MODEL_DIGEST_LEN, hex);
		rc |= put(e, "model_id", jstr(hex));
		rc |= put(e, "path", jstr(r->models[i].path));
		rc |= put(e, "bytes", json_integer((json_int_t)r->models[i].bytes));
	}
	rc |= put(o, "serving", json_boolean(r->serving));
	if (r->ready_epoch) {
		shoal_hex_encode(r->ready_digest, SHOAL_MODEL_DIGEST_LEN, hex);
		rc |= put(o, "ready_digest", jstr(hex));
	} else {
		rc |= put(o, "ready_digest", json_null());
	}
	rc |= put(o, "ready_epoch", json_integer((json_int_t)r->ready_epoch));
	rc |= put(o, "links", a = json_array());
	for (uint32_t i = 0; a && i < r->n_links; i++) {
		const shoal_record_link *l = &r->links[i];
		json_t *e = json_object();
		if (!e || json_array_append_new(a, e)) {
			rc = -1;
			break;
		}
		shoal_peer_id_to_hex(&l->peer, hex);
		rc |= put(e, "peer", jstr(hex));
		rc |= put(e, "local_endpoint", json_integer(l->local_ep));
		rc |= put(e, "remote_endpoint", json_integer(l->remote_ep));
		rc |= put(e, "rtt_us", json_integer(l->rtt_us));
		rc |= put(e, "bandwidth_bytes_s", json_integer((json_int_t)l->bw_bytes_s));
	}
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}
