/*
 * scheduler/ready.c: the readiness tracker. Each peer's latest "ready for
 * digest D" announcement; a plan is servable when every peer it names has
 * announced that plan's digest.
 *
 * Part: scheduler/ (pure bookkeeping; the mesh feeds it and asks it).
 * Announcements are kept sorted by peer id, so lookups are O(log n) and the
 * tracker's state never depends on the order announcements arrived in
 * beyond "latest per peer wins".
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

typedef struct ready_entry {
	shoal_peer_id peer;
	uint8_t digest[SHOAL_DIGEST_BYTES];
} ready_entry;

struct shoal_ready {
	ready_entry *e; /* (n) sorted by peer id */
	size_t n, cap;
};

shoal_ready *shoal_ready_new(void)
{
	return calloc(1, sizeof(shoal_ready));
}

void shoal_ready_free(shoal_ready *r)
{
	if (!r)
		return;
	free(r->e);
	free(r);
}

static size_t ready_find(const shoal_ready *r, const shoal_peer_id *id, bool *found)
{
	size_t lo = 0, hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (shoal_peer_id_cmp(&r->e[mid].peer, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < r->n && !shoal_peer_id_cmp(&r->e[lo].peer, id);
	return lo;
}

shoal_err shoal_ready_announce(shoal_ready *r, const shoal_peer_id *peer,
                               const uint8_t digest[SHOAL_DIGEST_BYTES])
{
	bool found;
	size_t at = ready_find(r, peer, &found);
	if (!found) {
		if (r->n == r->cap) {
			size_t nc = r->cap ? 2 * r->cap : 8;
			ready_entry *ne = realloc(r->e, nc * sizeof *ne);
			if (!ne)
				return SHOAL_ERR_NOMEM;
			r->e = ne;
			r->cap = nc;
		}
		memmove(&r->e[at + 1], &r->e[at], (r->n - at) * sizeof *r->e);
		r->n++;
		r->e[at].peer = *peer;
	}
	memcpy(r->e[at].digest, digest, SHOAL_DIGEST_BYTES);
	return SHOAL_OK;
}

void shoal_ready_forget(shoal_ready *r, const shoal_peer_id *peer)
{
	bool found;
	size_t at = ready_find(r, peer, &found);
	if (!found)
		return;
	memmove(&r->e[at], &r->e[at + 1], (r->n - at - 1) * sizeof *r->e);
	r->n--;
}

size_t shoal_ready_missing(const shoal_ready *r, const shoal_plan *p, uint32_t *missing, size_t max)
{
	SHOAL_ASSERT(missing || !max);
	size_t k = 0;
	for (size_t i = 0; i < p->n_peers; i++) {
		bool found;
		size_t at = ready_find(r, &p->peers[i].id, &found);
		if (found && !memcmp(r->e[at].digest, p->digest, SHOAL_DIGEST_BYTES))
			continue;
		if (k < max && missing)
			missing[k] = (uint32_t)i;
		k++;
	}
	return k;
}

bool shoal_ready_servable(const shoal_ready *r, const shoal_plan *p)
{
	return p->n_peers > 0 && shoal_ready_missing(r, p, NULL, 0) == 0;
}
