/*
 * net/linkprobe.c: RTT and bandwidth estimates per endpoint pair (see
 * linkprobe.h).
 */
#include "net/linkprobe.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/view.h"

/* Outstanding probes remembered: at one probe per base period and a 2 s
 * timeout, 64 covers base periods down to ~31 ms. */
#define SHOAL_LINKPROBE_INFLIGHT 64

typedef struct shoal_linkprobe_slot {
	shoal_linkprobe_target t;
	uint64_t srtt_us; /* 0: no sample yet */
	uint64_t bw;      /* bytes/s, 0: none */
	uint32_t rtt_b;   /* published quarter-octave buckets (scheduler/view.h) */
	uint32_t bw_b;
	uint32_t sent; /* probes sent to this target */
} shoal_linkprobe_slot;

typedef struct shoal_linkprobe_flight {
	uint64_t seq;
	uint64_t sent_us;
	uint32_t pad;
	shoal_peer_id peer;
	uint8_t lep, rep;
} shoal_linkprobe_flight;

struct shoal_linkprobe {
	shoal_linkprobe_slot *slots;
	size_t n;
	size_t next;
	uint64_t seq;
	shoal_linkprobe_flight flight[SHOAL_LINKPROBE_INFLIGHT];
};

shoal_err shoal_linkprobe_new(shoal_linkprobe **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? SHOAL_OK : SHOAL_ERR_NOMEM;
}

void shoal_linkprobe_free(shoal_linkprobe *lp)
{
	if (!lp)
		return;
	free(lp->slots);
	free(lp);
}

static int linkprobe_same(const shoal_linkprobe_target *a, const shoal_peer_id *peer, uint8_t lep,
                          uint8_t rep)
{
	return a->lep == lep && a->rep == rep && !memcmp(a->peer.b, peer->b, SHOAL_PEER_ID_LEN);
}

shoal_err shoal_linkprobe_set_targets(shoal_linkprobe *lp, const shoal_linkprobe_target *t,
                                      size_t n)
{
	shoal_linkprobe_slot *s = n ? calloc(n, sizeof *s) : NULL;
	if (n && !s)
		return SHOAL_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		s[i].t = t[i];
		s[i].rtt_b = s[i].bw_b = SHOAL_BUCKET_NONE;
		for (size_t j = 0; j < lp->n; j++)
			if (linkprobe_same(&lp->slots[j].t, &t[i].peer, t[i].lep, t[i].rep)) {
				s[i].srtt_us = lp->slots[j].srtt_us;
				s[i].bw = lp->slots[j].bw;
				s[i].rtt_b = lp->slots[j].rtt_b;
				s[i].bw_b = lp->slots[j].bw_b;
				s[i].sent = lp->slots[j].sent;
				break;
			}
	}
	free(lp->slots);
	lp->slots = s;
	lp->n = n;
	if (lp->next >= n)
		lp->next = 0;
	return SHOAL_OK;
}

int shoal_linkprobe_next(shoal_linkprobe *lp, uint64_t now_us, shoal_ctlmsg *msg,
                         const char **endpoint)
{
	if (lp->n == 0)
		return 0;
	shoal_linkprobe_slot *s = &lp->slots[lp->next];
	lp->next = (lp->next + 1) % lp->n;
	/* Bandwidth probes only once an RTT is known to subtract. */
	int big = s->srtt_us && s->sent % SHOAL_LINKPROBE_BW_EVERY == SHOAL_LINKPROBE_BW_EVERY - 1;
	s->sent++;
	lp->seq++;
	shoal_linkprobe_flight *f = &lp->flight[lp->seq % SHOAL_LINKPROBE_INFLIGHT];
	f->seq = lp->seq;
	f->sent_us = now_us;
	f->pad = big ? SHOAL_LINKPROBE_BW_BYTES : 0;
	f->peer = s->t.peer;
	f->lep = s->t.lep;
	f->rep = s->t.rep;
	memset(msg, 0, sizeof *msg);
	msg->type = SHOAL_CTLMSG_LINK_PROBE;
	msg->seq = lp->seq;
	msg->lep = s->t.lep;
	msg->rep = s->t.rep;
	msg->pad_len = f->pad;
	*endpoint = s->t.endpoint;
	return 1;
}

void shoal_linkprobe_ack(shoal_linkprobe *lp, const shoal_ctlmsg *ack, uint64_t now_us)
{
	shoal_linkprobe_flight *f = &lp->flight[ack->seq % SHOAL_LINKPROBE_INFLIGHT];
	if (f->seq != ack->seq || ack->seq == 0 || now_us < f->sent_us ||
	    now_us - f->sent_us > SHOAL_LINKPROBE_TIMEOUT_US || ack->n != f->pad)
		return;
	uint64_t rtt = now_us - f->sent_us;
	if (rtt == 0)
		rtt = 1;
	f->seq = 0; /* answered once */
	for (size_t i = 0; i < lp->n; i++) {
		shoal_linkprobe_slot *s = &lp->slots[i];
		if (!linkprobe_same(&s->t, &f->peer, f->lep, f->rep))
			continue;
		if (f->pad == 0) {
			s->srtt_us = s->srtt_us ? (7 * s->srtt_us + rtt) / 8 : rtt;
		} else if (s->srtt_us && rtt > s->srtt_us) {
			/* The padding took (rtt - srtt) to cross one way. */
			uint64_t bw = (uint64_t)f->pad * 1000000u / (rtt - s->srtt_us);
			s->bw = s->bw ? (3 * s->bw + bw) / 4 : bw;
		}
		/* what the record says moves by whole buckets, with hysteresis:
		 * every peer plans on the same figures, and jitter neither
		 * re-gossips the record nor flips a plan */
		s->rtt_b = shoal_bucket_geo(s->srtt_us, s->rtt_b);
		if (s->bw)
			s->bw_b = shoal_bucket_geo(s->bw, s->bw_b);
		return;
	}
}

size_t shoal_linkprobe_links(const shoal_linkprobe *lp, shoal_record_link *out, size_t cap)
{
	size_t k = 0;
	for (size_t i = 0; i < lp->n && k < cap; i++) {
		const shoal_linkprobe_slot *s = &lp->slots[i];
		if (!s->srtt_us)
			continue;
		memset(&out[k], 0, sizeof out[k]);
		out[k].peer = s->t.peer;
		out[k].local_ep = s->t.lep;
		out[k].remote_ep = s->t.rep;
		uint64_t rtt = shoal_bucket_geo_value(s->rtt_b);
		out[k].rtt_us = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
		out[k].bw_bytes_s = s->bw ? shoal_bucket_geo_value(s->bw_b) : 0;
		k++;
	}
	return k;
}
