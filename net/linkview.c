/*
 * net/linkview.c: measured links into the scheduler's view (see
 * linkview.h).
 */
#include "net/linkview.h"

#include <stdint.h>
#include <string.h>

/* from's figure for `to`: its least measured RTT over endpoint pairs, in
 * us, and that pair's bandwidth; 0 when it measured none. */
static uint64_t linkview_dir(const shoal_record *from, const shoal_peer_id *to, uint64_t *bw)
{
	uint64_t best = 0;
	*bw = 0;
	for (uint32_t i = 0; i < from->n_links && i < SHOAL_RECORD_MAX_LINKS; i++) {
		const shoal_record_link *l = &from->links[i];
		if (memcmp(l->peer.b, to->b, SHOAL_PEER_ID_LEN) || !l->rtt_us)
			continue;
		uint64_t rtt =
		    shoal_bucket_geo_value(shoal_bucket_geo(l->rtt_us, SHOAL_BUCKET_NONE));
		uint64_t b =
		    l->bw_bytes_s
		        ? shoal_bucket_geo_value(shoal_bucket_geo(l->bw_bytes_s, SHOAL_BUCKET_NONE))
		        : 0;
		/* ties: the larger bandwidth, so the order of the links is moot */
		if (!best || rtt < best || (rtt == best && b > *bw)) {
			best = rtt;
			*bw = b;
		}
	}
	return best;
}

shoal_err shoal_linkview_apply(shoal_view *v, const shoal_record *const *recs, size_t n,
                               size_t *n_set, char *why, size_t why_len)
{
	uint64_t def_lat, def_bw;
	shoal_view_default_link(v, &def_lat, &def_bw);
	size_t set = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			uint64_t bw_ij, bw_ji;
			uint64_t rtt_ij = linkview_dir(recs[i], &recs[j]->id, &bw_ij);
			uint64_t rtt_ji = linkview_dir(recs[j], &recs[i]->id, &bw_ji);
			if (!rtt_ij && !rtt_ji)
				continue;
			uint64_t rtt = rtt_ij > rtt_ji ? rtt_ij : rtt_ji;
			uint64_t bw = bw_ij && bw_ji ? (bw_ij < bw_ji ? bw_ij : bw_ji)
			              : bw_ij        ? bw_ij
			              : bw_ji        ? bw_ji
			                             : def_bw;
			/* one way, in ns */
			shoal_err e = shoal_view_set_link(v, &recs[i]->id, &recs[j]->id, rtt * 500u,
			                                  bw, why, why_len);
			if (e)
				return e;
			set++;
		}
	if (n_set)
		*n_set = set;
	return SHOAL_OK;
}
