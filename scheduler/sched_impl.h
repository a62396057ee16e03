/*
 * scheduler/sched_impl.h: what the scheduler's files share inside the part:
 * the plan's layout, the cost tables computed once per schedule() call (the
 * context), an assignment under construction, and the search, expert and
 * evaluation steps.
 *
 * Part: scheduler/ (pure). Peers are numbered by their index in the view
 * (= id order) everywhere in here; the plan renumbers them into its own
 * id-ordered table at the end. Times are nanoseconds, sizes bytes.
 * Calls between the files go one way: a file calls only files to its right
 * (tests/sh/cycle_check.sh holds every part to that):
 *   schedule.c, experts.c, tensor.c, search.c, plan.c, plan_access.c,
 *   cost.c, asg.c, arith.c, view.c, digest.c
 */
#ifndef SHOAL_SCHEDULER_SCHED_IMPL_H
#define SHOAL_SCHEDULER_SCHED_IMPL_H

#include "scheduler/plan.h"

#define SCHED__INF UINT64_MAX
/* A unit time (one layer on one peer, one hop) is clamped to 2^40 ns (18
 * minutes): why that keeps every sum below 2^63, cost.c's bounds. */
#define SCHED__TMAX     (1ULL << 40)
#define SCHED__NS_PER_S 1000000000ULL

/* p = calloc(nmemb, sizeof *p), at least one element; goto nomem on
 * failure (the caller's one label frees what it allocated). */
#define SCHED__ALLOC(p, nmemb)                                                                     \
	do {                                                                                       \
		size_t n_ = (nmemb);                                                               \
		(p) = calloc(n_ ? n_ : 1, sizeof *(p));                                            \
		if (!(p))                                                                          \
			goto nomem;                                                                \
	} while (0)

struct shoal_plan {
	uint64_t epoch;
	uint8_t digest[SHOAL_DIGEST_BYTES];
	uint64_t predicted_ns, moved_bytes;
	bool mtp;         /* the head peer holds DeepSeek's MTP layer */
	uint64_t mtp_mem; /* its bytes there (weights, KV, a shared embedding) */
	bool kept;
	char name[64];
	uint8_t model_id[SHOAL_MANIFEST_MODEL_ID_BYTES]; /* the manifest's */
	uint64_t model_bytes;                            /* all weights the manifest lists */
	uint32_t n_layer;
	size_t n_peers;
	shoal_plan_peer *peers; /* (n_peers) id order */
	size_t n_stages;
	shoal_plan_stage *stages; /* (n_stages) pipeline order */
	uint32_t embd_peer, head_peer;
	bool head_gpu;            /* the head on the head peer's GPU */
	uint32_t *layer_n_expert; /* (n_layer) */
	uint32_t *layer_slot;     /* (n_layer) first expert slot of the layer */
	uint32_t n_slots;
	uint8_t *slot_n_owner;       /* (n_slots) */
	uint32_t *slot_owner;        /* (n_slots, SHOAL_PLAN_MAX_OWNERS) */
	size_t n_groups;             /* tensor groups (0 without) */
	uint32_t *grp_stage;         /* (n_groups) the stage each group runs */
	uint32_t *grp_first, *grp_n; /* (n_groups) its members in grp_mem */
	shoal_plan_member *grp_mem;  /* (sum of grp_n) */
};

typedef enum sched__mode {
	SCHED__KEEP = 0, /* experts live with their layer */
	SCHED__SPREAD,   /* layers placed first, experts then spread by LPT */
} sched__mode;

/* The tensor groups of an assignment (scheduler/tensor.c), view indices. */
typedef struct sched__tp {
	uint32_t n_groups;
	uint32_t *g_n;      /* (n) members of group g */
	uint32_t *g_mem;    /* (n, n) group g's members, ascending view index */
	uint64_t *g_w;      /* (n, n) their speed weights */
	uint32_t *st_group; /* (L) the group stage i is, UINT32_MAX: one peer */
} sched__tp;

/* An assignment in view indices. */
typedef struct sched__asg {
	uint32_t n_stages;
	uint32_t *st_peer, *st_first, *st_end; /* (n_stages) */
	uint32_t *st_gend;                     /* (n_stages) layers [st_first, st_gend) on the stage
	                                          peer's GPU, the rest on its CPU (by evaluation) */
	uint8_t *n_own;                        /* (n_slots) */
	uint16_t *own;                         /* (n_slots, MAX_OWNERS); peers < 1024 */
	sched__tp *tp;                         /* NULL: every stage is one peer */
	/* filled by sched__evaluate */
	bool feasible;
	uint64_t time_ns, moved;
	uint64_t *st_ns;          /* (n_stages) each stage's own time: its layers,
	                             experts, the head on the last (no hop in) */
	uint64_t *mem_w, *mem_kv; /* (n) */
	uint64_t *mem_g;          /* (n) of those, bytes on its GPU */
	bool head_gpu;            /* the head runs on the last peer's GPU */
	uint32_t *n_exp;          /* (n) experts held */
	uint32_t bad_peer;        /* first peer over its memory when !feasible */
} sched__asg;

typedef struct sched__ctx {
	const shoal_view *v;
	const shoal_manifest *m;
	const shoal_policy *pol;
	size_t n;                /* peers */
	uint32_t L;              /* layers */
	uint64_t *cap, *bw, *fl; /* (n) memory after headroom, effective B/s, FLOP/s */
	uint64_t *hop;           /* (n, n) latency + one activation row */
	uint64_t *rtt;           /* (n, n) expert round trip: rows out and back */
	uint64_t *send;          /* (n, n) sending one activation row */
	/* GPUs (gcap 0: the peer has none; every g* table is then unused) */
	uint64_t *gcap, *gbw, *gfl;            /* (n) GPU memory after headroom, B/s, FLOP/s */
	uint8_t *unified;                      /* (n) 1: the GPU's memory is the host's */
	uint64_t *tcap;                        /* (n) all a peer holds: cap (+ gcap if discrete) */
	uint32_t *gend[2];                     /* (n, L+1) per mode: a stage from layer a has
	                                          layers [a, gend) on its GPU (its head too
	                                          when gend = L and ghead_fits) */
	uint64_t *gtbase, *gtexp;              /* (n, L) tbase, texp on the GPU */
	uint64_t *gefull, *geunit;             /* (n, L) efull, eunit on the GPU */
	uint64_t *gtpre;                       /* (n, L+1) prefix of gtbase + gtexp */
	uint64_t *ghead_t;                     /* (n) output head on the GPU */
	uint64_t *tpbw, *tpfl;                 /* (n) B/s, FLOP/s of a tensor group member */
	uint64_t *hop_in;                      /* (n) the peer's engine's cost per hop in */
	uint64_t *round_in;                    /* (n) its cost per collective round and
	                                          other member */
	uint64_t *tbase;                       /* (n, L) layer without routed experts */
	uint64_t *texp;                        /* (n, L) the layer's routed experts, all local */
	uint64_t *tpre;                        /* (n, L+1) prefix of tbase + texp */
	uint64_t *head_t;                      /* (n) output head */
	uint64_t *kv;                          /* (L) KV reserved per layer */
	uint64_t *mpre[2];                     /* (L+1) prefix of memory per mode (weights + kv) */
	uint64_t embd_mem, head_mem, both_mem; /* first, last, both stages (the MTP
	                                          layer's with the head: mtp) */
	bool mtp;                              /* the head peer holds the MTP layer */
	uint64_t mtp_mem, mtp_first;           /* its bytes in head_mem and both_mem */
	uint32_t n_slots;
	uint32_t *slot0;   /* (L) first slot of each layer */
	uint64_t *load;    /* (n_slots) expected load of each expert, scaled */
	uint64_t *loadtot; /* (L) sum of a layer's loads x 12 */
	uint64_t *efull;   /* (n, L) n_expert_used experts on the peer, ns */
	uint64_t *eunit;   /* (n, L) that per load unit, ns x 2^20 */
	/* the previous plan in view indices, when it maps onto this view */
	bool has_prev;
	bool prev_gone; /* some of its peers left: infeasible, not evaluated */
	sched__asg prev;
	uint8_t *prev_base; /* (n, L) 1 if the peer held the layer */
	uint32_t *prev_exp; /* (n, L) experts of the layer the peer held */
	uint32_t prev_embd, prev_head;
	uint32_t *prev_gend; /* (L) its stages' GPU ends, as the plan said */
	bool prev_head_gpu;
} sched__ctx;

/* ---- arithmetic (arith.c) ---- */
/* ceil(a * b / c) in 128 bits, saturating. c > 0. */
uint64_t sched__muldiv_up(uint64_t a, uint64_t b, uint64_t c);
uint64_t sched__add(uint64_t a, uint64_t b); /* saturating */
uint64_t sched__mul(uint64_t a, uint64_t b); /* saturating */
/* max(bytes / bw, flops / fl) in ns, each rounded up and clamped to
 * SCHED__TMAX. bw, fl > 0. */
uint64_t sched__roofline(uint64_t bytes, uint64_t flops, uint64_t bw, uint64_t fl);
/* bytes at bw B/s (0 counts as 1), ns, rounded up, clamped to SCHED__TMAX */
uint64_t sched__xfer_ns(uint64_t bytes, uint64_t bw);

/* ---- the context (cost.c) ---- */

shoal_err sched__ctx_init(sched__ctx *c, const shoal_view *v, const shoal_manifest *m,
                          const shoal_policy *pol, char *why, size_t why_len);
void sched__ctx_fini(sched__ctx *c);
/* Map prev onto the view (false when the model differs or out of memory);
 * peers of prev that left set prev_gone. */
bool sched__ctx_set_prev(sched__ctx *c, const shoal_plan *prev);

/* The GPU end of a stage on p from layer a to b in this mode (a <= b <= L):
 * its layers go on the GPU from a while they fit (weights, KV and, in
 * KEEP mode, experts), the rest in host memory. */
static inline uint32_t sched__gpu_end(const sched__ctx *c, sched__mode mode, uint32_t p, uint32_t a,
                                      uint32_t b)
{
	uint32_t g = c->gend[mode][(size_t)p * (c->L + 1) + a];
	return g < b ? g : b;
}
/* Whether the head (head_mem bytes) also fits p's GPU after layers [a, L)
 * went there. */
static inline bool sched__ghead_fits(const sched__ctx *c, sched__mode mode, uint32_t p, uint32_t a)
{
	return c->gcap[p] && c->mpre[mode][c->L] - c->mpre[mode][a] + c->head_mem <= c->gcap[p];
}
/* What host memory must hold of `total` bytes on p when `on_gpu` of them
 * are on its GPU: all of them when its memory is the GPU's. */
static inline uint64_t sched__host_bytes(const sched__ctx *c, uint32_t p, uint64_t total,
                                         uint64_t on_gpu)
{
	return c->unified[p] || on_gpu > total ? total : total - on_gpu;
}

/* Bytes a head on p's GPU adds to a stage that is first and last: a tied
 * head is one matrix with the embedding, which a discrete GPU's peer then
 * keeps twice (rows on the host, the head on the GPU). */
static inline uint64_t sched__head_copy(const sched__ctx *c, uint32_t p, bool first)
{
	if (!first || c->unified[p] || !c->m->tied_head)
		return 0;
	return c->embd_mem + c->head_mem - c->both_mem;
}

/* ---- assignments and their groups' storage (asg.c) ---- */
/* Arrays sized for c; a->tp NULL. Free with sched__asg_fini (also after
 * a failed init). */
shoal_err sched__asg_init(sched__asg *a, const sched__ctx *c);
void sched__asg_fini(sched__asg *a); /* frees a->tp too */
/* dst (initialised for c) = src, its groups included; out of memory
 * leaves dst infeasible. */
void sched__asg_copy(sched__asg *dst, const sched__asg *src, const sched__ctx *c);
sched__tp *sched__tp_new(const sched__ctx *c); /* NULL when out of memory */
void sched__tp_free(sched__tp *t);             /* NULL is a no-op */
/* *dst = a copy of src (NULL: *dst freed and NULL); false when out of memory */
bool sched__tp_copy(sched__tp **dst, const sched__tp *src, const sched__ctx *c);
/* x and y have the same groups on the same stages (both without: true) */
bool sched__tp_same(const sched__ctx *c, const sched__asg *x, const sched__asg *y);
/* The member of group g that gathers the head's logits and samples when
 * its stage is last (every member holds its vocab rows): the largest
 * weight, ties to the lower index. _among: the same rule over k members
 * mem[] with weights w[] (tensor.c's units). */
uint32_t sched__tp_lead(const sched__ctx *c, const sched__tp *t, uint32_t g);
uint32_t sched__tp_lead_among(uint32_t k, const uint32_t *mem, const uint64_t *w);

/* ---- the cost model (cost.c) ---- */

/* Memory of layers [a, b) on a stage in this mode plus embedding/head. */
uint64_t sched__range_mem(const sched__ctx *c, sched__mode mode, uint32_t a, uint32_t b, bool first,
                          bool last);
/* Time of expert work w (load units; loadtot[l] = every routed token) on
 * peer o for layer l owned by s: the round trip when o != s plus the w /
 * loadtot share of the roofline of n_expert_used experts (exact when w is
 * the whole load, fixed point otherwise). Inline: expert placement asks it
 * for every expert x peer x layer. */
#define SCHED__EUNIT_SHIFT 20
static inline uint64_t sched__expert_time(const sched__ctx *c, uint32_t l, uint32_t s, uint32_t o,
                                          uint64_t w)
{
	if (!w)
		return 0;
	size_t i = (size_t)o * c->L + l;
	uint64_t t = w == c->loadtot[l] ? c->efull[i]
	                                : (w * c->eunit[i] + (1ULL << SCHED__EUNIT_SHIFT) - 1) >>
	                                      SCHED__EUNIT_SHIFT;
	return o == s ? t : t + c->rtt[(size_t)s * c->n + o];
}
/* Memory per peer, feasibility, predicted time, bytes moved vs prev, of
 * an assignment without groups. */
void sched__pipe_evaluate(const sched__ctx *c, sched__asg *a);

/* ---- the search (search.c) and expert placement (experts.c) ---- */
/* Find stages minimising the predicted time plus pen_num / pen_den ns per
 * byte newly loaded; fills a->st_*; false when nothing fits. */
bool sched__search(const sched__ctx *c, sched__mode mode, uint64_t pen_num, uint64_t pen_den,
                   sched__asg *a);
/* Give every expert owners (with the stage peer in KEEP mode, by LPT in
 * SPREAD mode); false when memory runs out. */
bool sched__experts(const sched__ctx *c, sched__mode mode, sched__asg *a);

/* ---- tensor groups (tensor.c) ---- */
/* The fastest feasible assignment whose stages may be tensor groups (KEEP
 * mode: a group's experts are split among its members); false when none
 * has a group or fits. *a must be initialised; it gets a->tp. */
bool sched__tensor_search(const sched__ctx *c, sched__asg *a);
/* sched__pipe_evaluate for an assignment with groups. */
void sched__tp_evaluate(const sched__ctx *c, sched__asg *a);

/* Memory per peer, feasibility, predicted time, bytes moved vs prev; by
 * tensor.c when the assignment has groups. Here, not in cost.c, so that the
 * cost model never calls up into the optional groups. */
static inline void sched__evaluate(const sched__ctx *c, sched__asg *a)
{
	if (a->tp)
		sched__tp_evaluate(c, a);
	else
		sched__pipe_evaluate(c, a);
}

/* ---- the plan (plan.c) ---- */
/* Build the plan object (digest included) from an assignment. */
shoal_err sched__plan_build(const sched__ctx *c, const sched__asg *a, uint64_t epoch,
                            shoal_plan **out);

#endif
