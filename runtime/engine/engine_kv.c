/*
 * runtime/engine/engine_kv.c: the KV cache's layout and what a session's
 * rings still hold.
 *
 * Part: runtime/ (engine). Below engine_steps.c (which finds a row's
 * planes here) and engine.c (allocation, sessions, the batch's checks); it
 * calls no other file of the room.
 *
 * A full-attention layer keeps, per session, a K and a V plane of n_ctx
 * positions. A sliding layer (window W, gpt-oss's even layers) on a
 * backend that supports ATTN_RING keeps rings of R = W + max_rows
 * positions instead, position p at slot p % R:
 *   1. A call adds at most max_rows (S) positions to one session, so its
 *      first row at p0 overwrites nothing it reads: the slots written hold
 *      positions p0 - R + S .. (at most p0 - W), below the window of p0.
 *   2. sess_lo[s] is the lowest position whose slot still holds it (every
 *      position from there to the length is held). After a call writing
 *      [p0, p1) it is max(min(lo, p0), p1 - R).
 *   3. A call may start a session at p0 (a rewind when p0 < length) only
 *      if p0's window, [p0 - W + 1, p0), is held: p0 - W + 1 >= lo, or
 *      p0 = 0. A rewind of up to S positions from any length always is
 *      (speculation's rejected drafts); a longer one may not be, and then
 *      the caller recomputes from 0 (shoal_engine_session_reusable).
 * R >= n_ctx, a backend without rings, or SHOAL_KV_RING=0 in the
 * environment (tests compare the two) keep full planes; the positions each
 * row reads and their order are the same either way, so the bits are.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/engine_impl.h"

#include "base/assert.h"

/* ---- layout -------------------------------------------------------------------- */

shoal_err engine__kv_layout(shoal_engine *e, bool rings_ok)
{
	uint32_t n = e->n_own ? e->n_own : 1, C = e->cfg.n_ctx;
	const char *env = getenv("SHOAL_KV_RING");
	bool ring = rings_ok && !e->cfg.kv_full && !(env && strcmp(env, "0") == 0);
	e->kv_cap = calloc(n, sizeof *e->kv_cap);
	e->kv_off = calloc(n, sizeof *e->kv_off);
	if (!e->kv_cap || !e->kv_off)
		return SHOAL_ERR_NOMEM;
	size_t row = (size_t)e->kv_planes * e->kv_cache_dim * e->kv_elt, at = 0;
	e->ring_window = 0;
	for (uint32_t li = 0; li < n; li++) {
		uint32_t il = e->cfg.layer_begin + li;
		bool swa = e->n_own && shoal_hparams_layer_swa(&e->hp, il) && e->hp.n_swa;
		uint64_t R = (uint64_t)e->hp.n_swa + e->cfg.max_rows;
		e->kv_cap[li] = C;
		if (ring && swa && R < C) {
			e->kv_cap[li] = (uint32_t)R;
			if (e->hp.n_swa > e->ring_window)
				e->ring_window = e->hp.n_swa;
		}
		e->kv_off[li] = at;
		at += (size_t)e->kv_cap[li] * row;
	}
	e->kv_sess_bytes = at;
	return SHOAL_OK;
}

void *engine__kv_plane(const shoal_engine *e, uint32_t s, uint32_t li, int which)
{
	size_t plane = (size_t)e->kv_cap[li] * e->kv_cache_dim * e->kv_elt;
	return e->kv + (size_t)s * e->kv_sess_bytes + e->kv_off[li] + (size_t)which * plane;
}

/* ---- what a session's rings hold ------------------------------------------------ */

bool engine__kv_can_start(const shoal_engine *e, uint32_t s, uint32_t p0)
{
	uint32_t W = e->ring_window, lo = e->sess_lo[s];
	if (!W || p0 == 0 || lo == 0)
		return true;
	return p0 >= W - 1 && p0 - (W - 1) >= lo;
}

void engine__kv_wrote(shoal_engine *e, uint32_t s, uint32_t p0, uint32_t p1)
{
	if (!e->ring_window)
		return;
	uint32_t lo = e->sess_lo[s] < p0 ? e->sess_lo[s] : p0;
	uint32_t R = e->ring_window + e->cfg.max_rows; /* every ring's size */
	if (p1 > R && p1 - R > lo)
		lo = p1 - R;
	e->sess_lo[s] = lo;
}

uint32_t shoal_engine_session_reusable(const shoal_engine *e, uint32_t slot, uint32_t n)
{
	SHOAL_ASSERT(e && slot < e->cfg.max_sessions);
	if (!e->sess_open[slot])
		return 0;
	if (n > e->sess_len[slot])
		n = e->sess_len[slot];
	return engine__kv_can_start(e, slot, n) ? n : 0;
}

uint32_t shoal_engine_session_kept_from(const shoal_engine *e, uint32_t slot)
{
	SHOAL_ASSERT(e && slot < e->cfg.max_sessions);
	return e->sess_open[slot] ? e->sess_lo[slot] : 0;
}

uint64_t shoal_engine_kv_bytes(const shoal_engine *e)
{
	return (uint64_t)e->cfg.max_sessions * e->kv_sess_bytes;
}

uint32_t shoal_engine_kv_ring(const shoal_engine *e)
{
	return e->ring_window ? e->ring_window + e->cfg.max_rows : 0;
}

uint64_t shoal_engine_kv_bytes_held(const shoal_engine *e, uint32_t n)
{
	uint64_t row = (uint64_t)e->kv_planes * e->kv_cache_dim * e->kv_elt, sum = 0;
	for (uint32_t li = 0; li < e->n_own; li++)
		sum += (uint64_t)(n < e->kv_cap[li] ? n : e->kv_cap[li]) * row;
	return sum;
}
