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

/* from's data-plane RTT to `to`, in us, and its bandwidth (0: none), both
 * re-bucketed without history (a bucket's value stays as it is); 0 when it
 * has none. */
static uint64_t linkview_data(const shoal_record *from, const shoal_peer_id *to, uint64_t *bw)
{
	*bw = 0;
	for (uint32_t i = 0; i < from->n_dlinks && i < SHOAL_RECORD_MAX_DLINKS; i++) {
		const shoal_record_dlink *d = &from->dlinks[i];
		if (memcmp(d->peer.b, to->b, SHOAL_PEER_ID_LEN) || !d->rtt_us)
			continue;
		if (d->bw_bytes_s)
			*bw = shoal_bucket_geo_value(
			    shoal_bucket_geo(d->bw_bytes_s, SHOAL_BUCKET_NONE));
		return shoal_bucket_geo_value(shoal_bucket_geo(d->rtt_us, SHOAL_BUCKET_NONE));
	}
	return 0;
}

shoal_err shoal_linkview_apply(shoal_view *v, const shoal_record *const *recs, size_t n,
                               unsigned what, size_t *n_set, char *why, size_t why_len)
{
	uint64_t def_lat, def_bw;
	shoal_view_default_link(v, &def_lat, &def_bw);
	size_t set = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			uint64_t bw_ij = 0, bw_ji = 0, rtt_ij = 0, rtt_ji = 0;
			if (what & SHOAL_LINKVIEW_CTL) {
				rtt_ij = linkview_dir(recs[i], &recs[j]->id, &bw_ij);
				rtt_ji = linkview_dir(recs[j], &recs[i]->id, &bw_ji);
			}
			uint64_t d_ij = 0, d_ji = 0, dbw_ij = 0, dbw_ji = 0;
			if (what & SHOAL_LINKVIEW_DATA) {
				d_ij = linkview_data(recs[i], &recs[j]->id, &dbw_ij);
				d_ji = linkview_data(recs[j], &recs[i]->id, &dbw_ji);
			}
			uint64_t rtt = d_ij || d_ji ? (d_ij > d_ji ? d_ij : d_ji)
			                            : (rtt_ij > rtt_ji ? rtt_ij : rtt_ji);
			if (!rtt)
				continue;
			if (dbw_ij || dbw_ji) { /* the data plane's, as 4 says */
				bw_ij = dbw_ij;
				bw_ji = dbw_ji;
			}
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
