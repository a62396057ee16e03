/*
 * runtime/node/node_fetch.c: a peer without the model file (`--model-id HEX|any`):
 * the model id the serving peers agree on, its header and digests learned
 * from one of them (weights_fetch.c's fetcher), then the weights cache
 * opened as the model (serve_part.c fetches each plan's tensors); and the
 * HTTP API, which starts at once and takes the model's name from the
 * peers that hold the file. Node thread.
 */
#include "config.h"

#include "runtime/node/node_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "base/hex.h"
#include "base/log.h"
#include "net/endpoint.h"

/* The API's name of a model: its file's, without the directory and .gguf. */
static void node_model_name(const char *path, char *out, size_t cap)
{
	const char *base = strrchr(path, '/');
	snprintf(out, cap, "%s", base ? base + 1 : path);
	size_t ml = strlen(out);
	if (ml > 5 && !strcmp(out + ml - 5, ".gguf"))
		out[ml - 5] = '\0';
}

/* The API's status JSON: the one the loop caches (node_turn). Any thread. */
static char *node_api_status(void *ctx)
{
	shoal_node *n = ctx;
	pthread_mutex_lock(&n->status_mu);
	char *s = n->status_cache ? strdup(n->status_cache) : NULL;
	pthread_mutex_unlock(&n->status_mu);
	return s;
}

/* --api; with --model-id the name comes when the weights do
 * (node__fetch_tick). */
shoal_err node__api_start(shoal_node *n, char *why, size_t why_len)
{
	char host[64], model[256] = "";
	uint16_t port = 0;
	shoal_err e = shoal_endpoint_split(n->cfg.api, SHOAL_API_DEFAULT_PORT, host, sizeof host,
	                                   &port, why, why_len);
	if (e)
		return e;
	if (n->cfg.model)
		node_model_name(n->cfg.model, model, sizeof model);
	n->api_named = model[0] != '\0';
	if (pthread_mutex_init(&n->status_mu, NULL) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot make a mutex");
	n->status_mu_ok = true;
	n->api_hub.status = node_api_status;
	n->api_hub.status_ctx = n;
	shoal_serve_api_set(&n->api_hub, n->cl);
	shoal_serve_api_ops(&n->api_hub, &n->api_ops);
	shoal_api_config ac = {.host = host,
	                       .port = port,
	                       .key = n->cfg.api_key,
	                       .model = model[0] ? model : NULL,
	                       .cors = n->cfg.api_cors};
	return shoal_api_start(&ac, &n->api_ops, &n->api, why, why_len);
}

/* --api with --model-id: the model's name is the one the peers that hold
 * the file give it (their file's name), so a client sees one name on every
 * peer. */
void node__api_name_from_peers(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (!n->api || n->api_named || shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	for (size_t i = 0; i < nv; i++) {
		const shoal_record *r = &v[i].record;
		if (r->serving && r->n_models &&
		    !memcmp(r->models[0].digest, n->fetch_id, SHOAL_MODEL_ID_BYTES) &&
		    memcmp(r->id.b, n->ident.id, SHOAL_PEER_ID_LEN) && r->models[0].path[0] &&
		    !strstr(r->models[0].path, "/weights/")) { /* not another fetcher's cache */
			char name[256];
			node_model_name(r->models[0].path, name, sizeof name);
			shoal_api_set_model(n->api, name);
			n->api_named = true;
			break;
		}
	}
	shoal_swim_view_free(v);
}

/* ------------------------------------------------------------ the weights */

/* A cache of model id `id` in the state dir: the cluster serves it (its
 * missing tensors fetched per plan). False when there is none yet. */
static bool node_fetch_open(shoal_node *n, const uint8_t id[SHOAL_MODEL_ID_BYTES])
{
	char dir[1100], why[SHOAL_WHY_LEN], hex[65];
	shoal_wcache *wc = NULL;
	snprintf(dir, sizeof dir, "%s/" SHOAL_WEIGHTS_DIR, n->state_dir);
	shoal_model_id_hex(id, hex);
	if (shoal_wcache_open(dir, id, &wc, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_I("node", "model %.16s: %s", hex, why);
		return false;
	}
	size_t held = 0;
	for (size_t i = 0; i < shoal_wcache_n_tensors(wc); i++)
		held += shoal_wcache_has(wc, i);
	SHOAL_LOG_I("node", "model %.16s: weights cache %s, %zu of %zu tensors held", hex,
	            shoal_wcache_path(wc), held, shoal_wcache_n_tensors(wc));
	if (node__serve_new(n, wc, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_W("node", "cannot serve the cached model %.16s: %s", hex, why);
		return false;
	}
	return true;
}

/* --model-id: the cached model at once, else a fetcher for its header. */
shoal_err node__fetch_new(shoal_node *n, char *why, size_t why_len)
{
	n->fetch_any = !strcmp(n->cfg.model_id, "any");
	if (!n->fetch_any) {
		if (shoal_hex_decode(n->cfg.model_id, strlen(n->cfg.model_id), n->fetch_id, 32) !=
		    SHOAL_OK)
			return shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                 "--model-id wants 64 hex digits or \"any\", not '%s'",
			                 n->cfg.model_id);
		n->have_fetch_id = true;
		if (node_fetch_open(n, n->fetch_id))
			return SHOAL_OK;
	}
	return SHOAL_OK; /* the fetcher is made once the id is known (fetch tick) */
}

/* --model-id without a cache yet, once per base period: pick the model id
 * (for "any": the one every serving peer names), then learn its header and
 * digests from a serving peer on the fetcher's thread; once the cache
 * exists the cluster takes over. */
void node__fetch_tick(shoal_node *n)
{
	uint64_t now = node__now_us(NULL);
	if (now < n->fetch_retry_us)
		return;
	if (n->wf) {
		shoal_weights_progress pr;
		shoal_weights_get_progress(n->wf, &pr);
		int r = shoal_weights_poll(n->wf);
		if (pr.running)
			return;
		if (r == 1) {
			shoal_wcache *wc = shoal_weights_take_cache(n->wf);
			char why[SHOAL_WHY_LEN], w2[SHOAL_WHY_LEN];
			if (wc && node__serve_new(n, wc, why, sizeof why) == SHOAL_OK) {
				node__record_refresh(n);
				if (shoal_swim_set_record(n->sw, &n->rec, w2, sizeof w2) !=
				    SHOAL_OK)
					SHOAL_LOG_W("node", "cannot publish our record: %s", w2);
				shoal_weights_fetcher_free(n->wf);
				n->wf = NULL;
				return;
			}
			if (wc)
				SHOAL_LOG_W("node", "cannot serve the fetched model: %s", why);
		}
		if (r == -1)
			n->fetch_retry_us = now + 10 * n->base_us; /* let gossip move on */
		if (r != 0 && now < n->fetch_retry_us)
			return;
	}
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	shoal_weights_src src[64];
	size_t ns = 0;
	bool agree = true, seen = false;
	bool want_lo = !strncmp(n->listen_ip, "127.", 4);
	for (size_t i = 0; i < nv; i++) {
		const shoal_record *r = &v[i].record;
		if ((v[i].state != SHOAL_SWIM_STATE_ALIVE &&
		     v[i].state != SHOAL_SWIM_STATE_SUSPECT) ||
		    !v[i].compatible || !r->serving || !r->n_models ||
		    !memcmp(r->id.b, n->ident.id, SHOAL_PEER_ID_LEN))
			continue;
		if (!n->have_fetch_id) { /* "any" */
			if (!seen)
				memcpy(n->fetch_id, r->models[0].digest, SHOAL_MODEL_ID_BYTES);
			else if (memcmp(r->models[0].digest, n->fetch_id, SHOAL_MODEL_ID_BYTES))
				agree = false;
			seen = true;
		} else if (memcmp(r->models[0].digest, n->fetch_id, SHOAL_MODEL_ID_BYTES)) {
			continue;
		}
		if (ns < sizeof src / sizeof src[0] &&
		    shoal_weights_pick_ep(r, want_lo, src[ns].host, &src[ns].port)) {
			memcpy(src[ns].id, r->id.b, SHOAL_PEER_ID_LEN);
			snprintf(src[ns].name, sizeof src[ns].name, "%s", r->name);
			ns++;
		}
	}
	shoal_swim_view_free(v);
	if (!ns)
		return;
	char hex[65];
	if (!n->have_fetch_id) {
		if (!agree) {
			SHOAL_LOG_W("node",
			            "--model-id any: the serving peers name different models");
			memset(n->fetch_id, 0, SHOAL_MODEL_ID_BYTES);
			n->fetch_retry_us = now + 10 * n->base_us;
			return;
		}
		n->have_fetch_id = true;
		shoal_model_id_hex(n->fetch_id, hex);
		SHOAL_LOG_I("node", "--model-id any: the serving peers serve model %.16s", hex);
		if (node_fetch_open(n, n->fetch_id))
			return;
	}
	if (!n->wf) {
		shoal_weights_config wcf = {
		    .key = n->key,
		    .cache_max = n->cfg.cache_max ? n->cfg.cache_max : SHOAL_NODE_DEFAULT_CACHE_MAX,
		    .tty = isatty(2) != 0};
		char dir[1100];
		snprintf(dir, sizeof dir, "%s/" SHOAL_WEIGHTS_DIR, n->state_dir);
		wcf.dir = dir;
		memcpy(wcf.self, n->ident.id, SHOAL_PEER_ID_LEN);
		memcpy(wcf.model_id, n->fetch_id, SHOAL_MODEL_ID_BYTES);
		shoal_err e = shoal_weights_fetcher_new(&wcf, &n->wf);
		sodium_memzero(&wcf.key, sizeof wcf.key);
		if (e != SHOAL_OK)
			return;
	}
	shoal_model_id_hex(n->fetch_id, hex);
	SHOAL_LOG_I("node", "model %.16s: learning its header and digests from %zu peer(s)", hex,
	            ns);
	shoal_weights_start(n->wf, src, ns, NULL, NULL, 0);
}
