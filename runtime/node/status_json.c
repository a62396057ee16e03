/*
 * runtime/node/status_json.c: the per-peer objects of `shoal status --json`
 * (runtime/node/status_json.h), rendered by the node from net/'s records
 * and SWIM members.
 */
#include "config.h"

#include "runtime/node/status_json.h"

#include "base/hex.h"
#include "base/peer_id.h"

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

/* One link to array a: the other end, the endpoints (< 0: left out, as
 * for a data link), the round trip and the bandwidth. */
static int link_put(json_t *a, const shoal_peer_id *peer, int local_ep, int remote_ep,
                    uint32_t rtt_us, uint64_t bw_bytes_s)
{
	char hex[2 * SHOAL_PEER_ID_LEN + 1];
	json_t *e = json_object();
	if (!e || json_array_append_new(a, e))
		return -1;
	shoal_peer_id_to_hex(peer, hex);
	int rc = put(e, "peer", jstr(hex));
	if (local_ep >= 0)
		rc |= put(e, "local_endpoint", json_integer(local_ep));
	if (remote_ep >= 0)
		rc |= put(e, "remote_endpoint", json_integer(remote_ep));
	rc |= put(e, "rtt_us", json_integer(rtt_us));
	rc |= put(e, "bandwidth_bytes_s", json_integer((json_int_t)bw_bytes_s));
	return rc;
}

json_t *shoal_status_record_json(const shoal_record *r)
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
	rc |= put(o, "devices", a = json_array());
	for (uint32_t i = 0; a && i < r->n_devices; i++) {
		const shoal_record_device *d = &r->devices[i];
		json_t *e = json_object();
		if (!e || json_array_append_new(a, e)) {
			rc = -1;
			break;
		}
		rc |= put(e, "backend", jstr(d->backend));
		rc |=
		    put(e, "kind", json_string(d->kind == SHOAL_RECORD_DEVICE_GPU ? "gpu" : "cpu"));
		rc |= put(e, "name", jstr(d->name));
		rc |= put(e, "unified", json_boolean(d->unified));
		rc |= put(e, "software", json_boolean(d->software));
		rc |= put(e, "mem_bytes", json_integer((json_int_t)d->mem_bytes));
		rc |= put(e, "read_gb_s", json_real((double)d->read_mb_s / 1000.0));
		rc |= put(e, "gflops", json_real((double)d->mflops / 1000.0));
	}
	rc |= put(o, "serving", json_boolean(r->serving));
	rc |= put(o, "speculate_mtp", json_boolean(r->spec_mtp));
	if (r->ready_epoch) {
		shoal_hex_encode(r->ready_digest, SHOAL_MODEL_DIGEST_LEN, hex);
		rc |= put(o, "ready_digest", jstr(hex));
	} else {
		rc |= put(o, "ready_digest", json_null());
	}
	rc |= put(o, "ready_epoch", json_integer((json_int_t)r->ready_epoch));
	/* the peers whose data plane this one finds failing (ids in hex) */
	rc |= put(o, "data_suspects", a = json_array());
	for (uint32_t i = 0; a && i < r->n_dsuspect; i++) {
		shoal_peer_id_to_hex(&r->dsuspect[i], hex);
		rc |= json_array_append_new(a, jstr(hex));
	}
	rc |= put(o, "links", a = json_array());
	for (uint32_t i = 0; a && i < r->n_links; i++) {
		const shoal_record_link *l = &r->links[i];
		rc |= link_put(a, &l->peer, l->local_ep, l->remote_ep, l->rtt_us, l->bw_bytes_s);
	}
	/* the data plane's round trips (serve_probe.c), as planned on */
	rc |= put(o, "data_links", a = json_array());
	for (uint32_t i = 0; a && i < r->n_dlinks; i++) {
		const shoal_record_dlink *l = &r->dlinks[i];
		rc |= link_put(a, &l->peer, -1, -1, l->rtt_us, l->bw_bytes_s);
	}
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *shoal_status_member_json(const shoal_swim_member *m)
{
	json_t *o = shoal_status_record_json(&m->record);
	if (!o)
		return NULL;
	int rc = json_object_set_new(o, "state", json_string(shoal_swim_state_name(m->state)));
	rc |= json_object_set_new(o, "incarnation", json_integer((json_int_t)m->incarnation));
	rc |= json_object_set_new(o, "self", json_boolean(m->is_self));
	rc |= json_object_set_new(o, "compatible", json_boolean(m->compatible));
	if (!m->compatible)
		rc |= json_object_set_new(
		    o, "why_incompatible",
		    json_string(m->why_incompatible[0] ? m->why_incompatible : "?"));
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}
