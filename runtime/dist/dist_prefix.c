/*
 * runtime/dist/dist_prefix.c: the prefix cache's keys and pool (dist.h "The
 * prefix cache"): chain hashes over blocks of token ids, a stage's salt,
 * and the table of ended sessions a stage keeps, least recently used first
 * out.
 *
 * Part: runtime/ (distributed inference). Pure: no engine, no links; the
 * stage (dist_stage.c) opens and closes the engine slots the table names.
 * Divisions: keys, the pool.
 */
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "runtime/dist/dist_impl.h"
#include "scheduler/digest.h"

#define HASH SHOAL_DIST_PREFIX_HASH
#define BLK  SHOAL_DIST_PREFIX_BLOCK

/* ---- keys ------------------------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

void dist__prefix_chain(const uint8_t *prev, const int32_t *ids, uint8_t *out)
{
	/* "block" tags the input so that no key of another kind equals it */
	uint8_t buf[6 + HASH + 4 * BLK], d[SHOAL_DIGEST_BYTES];
	memcpy(buf, "block:", 6);
	if (prev)
		memcpy(buf + 6, prev, HASH);
	else
		memset(buf + 6, 0, HASH);
	for (uint32_t i = 0; i < BLK; i++) /* little-endian on every host */
		put32(buf + 6 + HASH + 4 * i, (uint32_t)ids[i]);
	shoal_digest(buf, sizeof buf, d);
	memcpy(out, d, HASH);
}

void dist__prefix_chain_all(const int32_t *ids, uint32_t n_blocks, uint8_t *out)
{
	for (uint32_t b = 0; b < n_blocks; b++)
		dist__prefix_chain(b ? out + (size_t)(b - 1) * HASH : NULL, ids + (size_t)b * BLK,
		                   out + (size_t)b * HASH);
}

void dist__prefix_salt(const uint8_t model_id[SHOAL_MODEL_ID_BYTES], uint32_t layer_begin,
                       uint32_t layer_end, uint32_t device_end, const char *backend,
                       uint32_t kv_type, uint8_t salt[HASH])
{
	/* the backend by name: "auto" and NULL alike, since a stage picks the
	 * same kind for both on one machine; 32 bytes hold every kind's name */
	uint8_t buf[5 + SHOAL_MODEL_ID_BYTES + 16 + 32], d[SHOAL_DIGEST_BYTES];
	memset(buf, 0, sizeof buf);
	memcpy(buf, "salt:", 5);
	memcpy(buf + 5, model_id, SHOAL_MODEL_ID_BYTES);
	uint8_t *p = buf + 5 + SHOAL_MODEL_ID_BYTES;
	put32(p, layer_begin);
	put32(p + 4, layer_end);
	put32(p + 8, device_end);
	put32(p + 12, kv_type);
	const char *b = backend && strcmp(backend, "auto") ? backend : "";
	size_t n = strlen(b);
	memcpy(p + 16, b, n < 32 ? n : 32);
	shoal_digest(buf, sizeof buf, d);
	memcpy(salt, d, HASH);
}

void dist__prefix_key(const uint8_t salt[HASH], const uint8_t *chain, uint8_t *key)
{
	uint8_t buf[4 + 2 * HASH], d[SHOAL_DIGEST_BYTES];
	memcpy(buf, "key:", 4);
	memcpy(buf + 4, salt, HASH);
	memcpy(buf + 4 + HASH, chain, HASH);
	shoal_digest(buf, sizeof buf, d);
	memcpy(key, d, HASH);
}

/* ---- the pool ------------------------------------------------------------------ */

shoal_err dist__pcache_init(dist__pcache *c, uint32_t n, uint64_t max_bytes)
{
	memset(c, 0, sizeof *c);
	c->n = n;
	c->max_bytes = max_bytes;
	if (!max_bytes)
		return SHOAL_OK;
	if (!(c->e = calloc(n, sizeof *c->e)))
		return SHOAL_ERR_NOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (!(c->e[i].keys = malloc((size_t)SHOAL_DIST_PREFIX_MAX_BLOCKS * HASH))) {
			dist__pcache_fini(c);
			return SHOAL_ERR_NOMEM;
		}
	return SHOAL_OK;
}

void dist__pcache_fini(dist__pcache *c)
{
	if (c->e)
		for (uint32_t i = 0; i < c->n; i++)
			free(c->e[i].keys);
	free(c->e);
	memset(c, 0, sizeof *c);
}

int dist__pcache_match(const dist__pcache *c, const uint8_t *keys, uint32_t n, uint32_t *m)
{
	int best = -1;
	*m = 0;
	for (uint32_t i = 0; c->e && i < c->n; i++) {
		const dist__pentry *e = &c->e[i];
		if (!e->used)
			continue;
		uint32_t k = 0, lim = n < e->n_blocks ? n : e->n_blocks;
		while (k < lim &&
		       !memcmp(e->keys + (size_t)k * HASH, keys + (size_t)k * HASH, HASH))
			k++;
		/* the longest; among equals the most recent, so a conversation's
		 * latest turn is kept over its older ones */
		if (k > *m || (k && k == *m && e->tick > c->e[best].tick)) {
			*m = k;
			best = (int)i;
		}
	}
	return best;
}

uint32_t dist__pcache_take(dist__pcache *c, int i)
{
	SHOAL_ASSERT(c->e && i >= 0 && (uint32_t)i < c->n && c->e[i].used);
	c->e[i].used = false;
	return c->e[i].slot;
}

void dist__pcache_size(const dist__pcache *c, uint64_t *entries, uint64_t *tokens, uint64_t *bytes)
{
	*entries = *tokens = *bytes = 0;
	for (uint32_t i = 0; c->e && i < c->n; i++)
		if (c->e[i].used) {
			(*entries)++;
			*tokens += (uint64_t)c->e[i].n_blocks * BLK;
			*bytes += c->e[i].bytes;
		}
}

int64_t dist__pcache_evict(dist__pcache *c)
{
	int lru = -1;
	for (uint32_t i = 0; c->e && i < c->n; i++)
		if (c->e[i].used && (lru < 0 || c->e[i].tick < c->e[lru].tick))
			lru = (int)i;
	if (lru < 0)
		return -1;
	c->evictions++;
	return dist__pcache_take(c, lru);
}

bool dist__pcache_put(dist__pcache *c, uint32_t slot, const uint8_t *keys, uint32_t n,
                      uint64_t bytes, uint32_t *out_free, uint32_t *n_free)
{
	SHOAL_ASSERT(n >= 1 && n <= SHOAL_DIST_PREFIX_MAX_BLOCKS);
	*n_free = 0;
	dist__pentry *e = NULL;
	for (uint32_t i = 0; c->e && i < c->n && !e; i++)
		if (!c->e[i].used)
			e = &c->e[i];
	if (!e || bytes > c->max_bytes)
		return false;
	e->used = true;
	e->slot = slot;
	e->n_blocks = n;
	e->bytes = bytes;
	e->tick = ++c->tick;
	memcpy(e->keys, keys, (size_t)n * HASH);
	uint64_t entries, tokens, all;
	dist__pcache_size(c, &entries, &tokens, &all);
	while (all > c->max_bytes) {
		int64_t f = dist__pcache_evict(c); /* never the new one: it is the latest */
		SHOAL_ASSERT(f >= 0 && *n_free < c->n);
		out_free[(*n_free)++] = (uint32_t)f;
		dist__pcache_size(c, &entries, &tokens, &all);
	}
	return true;
}
