/*
 * runtime/node/serve_impl.h: the inside of runtime/node/serve.h, shared by
 * its files, one job each (its sizes, waits and probe figures are
 * serve_limits.h's):
 *   serve.c          new/free, the kept plan, our record's serving part
 *   serve_plan.c     planning from the view (node thread)
 *   serve_schedule.c the scheduler's view, plans and predictions (node thread)
 *   serve_ready.c    servability (node thread)
 *   serve_part.c     this peer's part: tensors, fetch, stage (node thread)
 *   serve_runs.c     run slots: queued (any thread), run by the data thread
 *   serve_clients.c  RUN_REQ and its replies (node thread); the API's ops
 *   serve_status.c   the status "plan" object (node thread)
 *   serve_data.c     the data thread
 *   serve_links.c    links, admission, the accept and expert threads
 *   serve_probe.c    data-plane probes, the prober thread, data suspects
 *   serve_timing.c   the plan's predicted step time against the measured one
 *   serve_draft.c    --draft's model and each run's drafter (data thread)
 *
 * What crosses threads goes through `mu`: the pending assignment, the
 * endpoint table, servability, run slots, the event ring, the expert
 * server handed to the expert thread and the metrics snapshots. Everything
 * else belongs to one thread, as marked.
 */
#ifndef SHOAL_RUNTIME_SERVE_IMPL_H
#define SHOAL_RUNTIME_SERVE_IMPL_H

#include <jansson.h>
#include <pthread.h>

#include "models/manifest.h"
#include "models/model.h"
#include "models/model_id.h"
#include "models/tokenizer.h"
#include "net/runmsg.h"
#include "base/clock.h"
#include "runtime/node/serve.h"
#include "runtime/node/serve_limits.h"
#include "runtime/dist/dist.h"
#include "runtime/node/timing.h"
#include "runtime/node/weights.h"
#include "scheduler/plan.h"

/* Link roles: which thread and object on the far side reads the frames. */
enum {
	SHOAL_SERVE_ROLE_STAGE = 1,   /* the data thread's stage */
	SHOAL_SERVE_ROLE_OWNER = 2,   /* the data thread's session owner */
	SHOAL_SERVE_ROLE_EXPERTS = 3, /* the expert thread's server */
	SHOAL_SERVE_ROLE_TENSOR = 5,  /* a group member's slices (read in its exchange) */
	SHOAL_SERVE_ROLE_PROBE = 6,   /* data-plane probes, echoed by the data thread */
	SHOAL_SERVE_ROLE_WEIGHTS = SHOAL_WEIGHTS_ROLE /* the weights server (weights.h) */
};

typedef struct shoal_serve_ep {
	uint8_t id[SHOAL_PEER_ID_LEN];
	uint64_t inc; /* its incarnation in our view */
	char host[64];
	uint16_t port;
} shoal_serve_ep;

/* What the node thread hands the data thread when the plan changes. */
typedef struct shoal_serve_assign {
	uint8_t digest[SHOAL_DIGEST_BYTES];
	uint64_t epoch;
	shoal_dist_stage *stage; /* NULL: no layers here */
	uint32_t l0, l1;
	/* NULL: no experts of other layers here; handed to the expert thread
	 * (and NULL here then) when the data thread takes the assignment */
	shoal_dist_stage *experts;
	uint8_t first[SHOAL_PEER_ID_LEN]; /* stage 0's peer */
	uint32_t sessions;                /* KV sessions per stage of the plan */
} shoal_serve_assign;

/* An API run's handle names its slot and the slot's use (gen), so that a
 * cancel for a run that ended and whose slot went to another is ignored:
 * the slot in the low SHOAL_SERVE_HANDLE_SLOT_BITS bits, gen above them
 * (it wraps after 2^24 uses of one slot). */
#define SHOAL_SERVE_HANDLE_SLOT_BITS 8
_Static_assert(SHOAL_SERVE_MAX_RUNS <= 1u << SHOAL_SERVE_HANDLE_SLOT_BITS,
               "a run handle's slot bits hold every slot");
static inline uint32_t serve__handle(uint32_t slot, uint32_t gen)
{
	return slot | gen << SHOAL_SERVE_HANDLE_SLOT_BITS;
}
static inline uint32_t serve__handle_slot(uint32_t h)
{
	return h & ((1u << SHOAL_SERVE_HANDLE_SLOT_BITS) - 1);
}
static inline uint32_t serve__handle_gen(uint32_t h)
{
	return h >> SHOAL_SERVE_HANDLE_SLOT_BITS;
}

enum { SHOAL_SERVE_RUN_FREE = 0, SHOAL_SERVE_RUN_QUEUED, SHOAL_SERVE_RUN_STARTED };

typedef struct shoal_serve_run {
	int state;    /* under mu */
	bool cancel;  /* under mu: the client went away */
	uint32_t gen; /* counts the slot's uses: an API handle names (slot, gen) */
	shoal_ctl_route route;
	shoal_api_sink sink; /* an API run's (has_sink): tokens and end go there */
	bool has_sink;
	uint64_t seq;
	/* (n_prompt + max_tokens): the prompt, then the tokens streamed so far
	 * (n_gen, appended by the data thread): a replay's history */
	int32_t *prompt;
	uint32_t n_prompt, max_tokens, logprobs;
	bool no_logprob; /* an API request that does not show logprobs */
	int spec;        /* its drafter's shoal_speculate_kind; -1: --speculate's */
	shoal_sampler_params sp;
	uint32_t *grammar; /* (sp.n_grammar) structured output: sp.grammar, owned; NULL: none */
	/* under mu: its place in the queue (arrival order; a paused run keeps
	 * it) and when it last began to wait (queued, or paused) */
	uint64_t ticket;
	uint64_t queued_us;
	/* data thread */
	uint64_t noplan_us;    /* time it waited while no plan was servable here */
	uint64_t noplan_since; /* the start of the current such wait; 0: none */
	uint32_t n_gen;
	uint32_t replays;
	bool busy_retry;        /* a stage refused its OPEN: the next start is no new replay */
	uint64_t paused_us;     /* when a plan change paused it; 0: not paused */
	uint64_t not_before_us; /* a refused OPEN is tried again from then */
	uint64_t sid;
	uint64_t last_us;
	bool ended;
	/* the thread that tells the client: the data thread (API run) or
	 * the node thread (control-plane run) */
	shoal_detok dt;
	uint32_t n_sent; /* control-plane runs: RUN_TOKENs sent, RUN_END says how many */
} shoal_serve_run;

/* What the data thread tells the node thread through the event ring. */
typedef enum shoal_serve_ev_kind {
	SHOAL_SERVE_EV_TOKEN = 0, /* a control-plane run's token (id, lp, top) */
	SHOAL_SERVE_EV_END,       /* a control-plane run's end (err, retry, why) */
	SHOAL_SERVE_EV_PEER_GONE  /* a data link to (peer, inc) broke without a goodbye (why) */
} shoal_serve_ev_kind;

typedef struct shoal_serve_event {
	shoal_serve_ev_kind kind;
	uint32_t run;
	uint8_t peer[SHOAL_PEER_ID_LEN];
	uint64_t inc;
	shoal_err err;
	bool retry; /* the same request, sent again, may succeed */
	int32_t id;
	float lp;
	uint32_t n_top;
	int32_t top_ids[SHOAL_DIST_MAX_LOGPROBS];
	float top_lps[SHOAL_DIST_MAX_LOGPROBS];
	char why[SHOAL_WHY_LEN];
} shoal_serve_event;

typedef struct shoal_serve_lctx {
	shoal_serve *cl;
	int role;
} shoal_serve_lctx;

struct shoal_serve {
	shoal_serve_config cfg;
	char model_path[1024];
	char state_dir[1024];
	char data_host[64]; /* cfg.data_host points here: the caller's may not outlive the call */
	shoal_key key;
	shoal_model *model;
	shoal_tokenizer *tok;
	/* --draft's model (serve_draft.c; NULL: none): opened here, its
	 * drafters made, run and freed on the data thread only */
	struct shoal_draft_model *dm;
	uint8_t model_id[SHOAL_MODEL_ID_BYTES];
	uint64_t file_bytes;
	shoal_model_id *mid; /* the digests of a whole file (NULL with wc) */
	shoal_wcache *wc;    /* the weights cache the model is (NULL: a whole file) */
	shoal_weights_server *wserve;
	shoal_weights_fetcher *wf; /* with wc: fetches the tensors of our part */
	bool part_taken;           /* our part of cl->plan is built (or failed) */
	bool fetch_failed_seen;
	uint64_t fetch_retry_us;  /* a failed fetch is tried again from then */
	uint64_t cache_hit_bytes; /* bytes of our parts found in the cache */
	int hash_logged;          /* quarters of first-start hashing logged */
	shoal_manifest mf;
	shoal_policy pol;
	uint64_t offer; /* memory offered as last published */

	/* planning: node thread */
	uint8_t view_sig[SHOAL_DIGEST_BYTES];
	bool have_sig;
	shoal_plan *plan;       /* current, NULL when none */
	uint32_t plan_sessions; /* its KV sessions per stage (--sessions, or from memory) */
	shoal_plan *prev;       /* last servable, or learned from the peers we joined */
	uint8_t learn_tried[SHOAL_DIGEST_BYTES]; /* the digest we last tried to learn */
	size_t learn_tried_n;                    /* over this many candidates */
	char plan_why[SHOAL_WHY_LEN];
	shoal_err plan_err; /* why there is no plan (INFEASIBLE: memory, or left out) */
	uint64_t died_us;   /* when the plan went because a peer of it died; 0: it did not */
	char others_why[SHOAL_WHY_WRAP_LEN]; /* peers serving another model, as last logged */
	bool servable;
	uint8_t ready_digest[SHOAL_DIGEST_BYTES];
	uint64_t ready_epoch;
	uint64_t served_epoch;         /* the highest epoch of a plan servable here */
	char ready_why[SHOAL_WHY_LEN]; /* why we are not ready for the plan */
	size_t n_left;
	struct {
		shoal_peer_id id;
		char name[64];
		char why[SHOAL_WHY_LEN];
	} left[SHOAL_SERVE_MAX_PEERS];
	size_t n_cand;
	struct {
		shoal_peer_id id;
		bool ready;
	} cand[SHOAL_SERVE_MAX_PEERS];
	/* the measured links the last plan over all candidates used
	 * (net/linkview.h), for status; the others were at the default */
	size_t n_plan_links;
	struct {
		shoal_peer_id a, b;
		uint64_t latency_ns, bw;
	} plan_links[SHOAL_SERVE_MAX_PEERS];

	/* shared under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool mu_ok, cv_ok;
	int stop;
	shoal_serve_assign *pending; /* next assignment for the data thread */
	bool pending_set;
	shoal_serve_ep eps[SHOAL_SERVE_MAX_PEERS];
	size_t n_eps;
	uint64_t eps_version;
	bool shared_servable;
	uint8_t shared_digest[SHOAL_DIGEST_BYTES]; /* the digest accepted links must name */
	uint64_t shared_epoch;
	char shared_why[SHOAL_WHY_LEN]; /* why the plan is not servable ("" when it is) */
	bool shared_infeasible;         /* no plan: the peers' memory cannot hold the model */
	bool shared_noplan;             /* no plan at all: runs in flight pause */
	shoal_serve_run runs[SHOAL_SERVE_MAX_RUNS];
	uint64_t next_ticket;
	/* waits in the queue of the runs started so far, for /metrics */
	uint64_t wait_sum_us, wait_n, wait_max_us;
	shoal_serve_event *ev; /* ring (SHOAL_SERVE_EVENTS) */
	uint32_t ev_head, ev_n;
	shoal_xfer_link *acc[SHOAL_SERVE_LINKS]; /* accepted, waiting for the data thread */
	int acc_role[SHOAL_SERVE_LINKS];
	size_t n_acc;
	shoal_dist_stage *x_pending; /* the next expert server (NULL: none) */
	bool x_pending_set;
	shoal_xfer_link *xacc[SHOAL_SERVE_LINKS]; /* accepted EXPERTS links */
	size_t n_xacc;
	/* snapshots for status, taken by the thread that owns each object */
	shoal_dist_stage_metrics met_stage, met_experts;
	shoal_dist_owner_metrics met_owner;
	bool have_stage, have_experts;
	/* the plan's prediction against the run (serve_timing.c, timing.h):
	 * the plan's figures (set with it), decode samples, the gap rule */
	uint64_t tm_pred_ns, tm_stage_pred_ns;
	int32_t tm_stage; /* our stage in the plan, -1: none */
	shoal_timing_series tm_owner, tm_run;
	shoal_timing_gap tm_gap_owner, tm_gap_run;
	bool tm_gap_taken; /* shoal_serve_take_gap said it under this plan */
	char link_status[SHOAL_SERVE_MAX_PEERS][96]; /* per eps entry: "tcp", ... */
	uint8_t link_peer[SHOAL_SERVE_MAX_PEERS][SHOAL_PEER_ID_LEN];
	size_t n_link_status;

	shoal_wire_buf msg; /* node thread: RUN_* replies, reserved once */

	/* data suspects: the prober's (under mu), published by the node thread */
	shoal_peer_id dsus[SHOAL_RECORD_MAX_DSUSPECT];
	uint32_t n_dsus;
	uint64_t dsus_version;
	uint64_t dsus_published; /* node thread */
	/* data-plane round trips: the prober's (under mu), published with
	 * the suspects (dsus_version) */
	shoal_record_dlink dlinks[SHOAL_RECORD_MAX_DLINKS];
	uint32_t n_dlinks;

	/* threads */
	int wake[2];  /* node -> data thread */
	int xwake[2]; /* -> expert thread */
	int evfd[2];  /* data thread -> node */
	shoal_xfer_config xcfg;
	shoal_xfer_listener *listener;
	pthread_t data_thr, acc_thr, x_thr, probe_thr;
	bool data_started, acc_started, x_started, probe_started;
	int admit_role; /* accept thread only */
	/* link roles for dist objects */
	shoal_serve_lctx lctx_stage, lctx_owner, lctx_experts, lctx_tensor;
	struct shoal_serve_dt *dt; /* data thread only */
};

/* A data link of the data thread: `inc` is the peer's incarnation when
 * the link was made, `bye` that it said goodbye. */
typedef struct shoal_serve_dlink {
	uint8_t peer[SHOAL_PEER_ID_LEN];
	int role;
	uint64_t inc;
	bool bye;
	shoal_xfer_link *k;
} shoal_serve_dlink;

/* The data thread's own state (serve_data.c, serve_links.c, serve_runs.c). */
struct shoal_serve_dt {
	shoal_serve *cl;
	/* the counters at the last snapshot (serve_timing.c) */
	uint64_t tm_rows, tm_runs, tm_run_ns, tm_steps, tm_step_ns;
	shoal_serve_assign *as;
	shoal_dist_owner *owner;
	shoal_serve_ep eps[SHOAL_SERVE_MAX_PEERS];
	size_t n_eps;
	uint64_t eps_version;
	/* links we dialled (out) and accepted (in) */
	shoal_serve_dlink out[SHOAL_SERVE_LINKS];
	size_t n_out;
	shoal_serve_dlink in[SHOAL_SERVE_LINKS];
	size_t n_in;
	/* accepted PROBE links: kept across plans, echoed (serve_probe.c) */
	shoal_xfer_link *pin[SHOAL_SERVE_MAX_PEERS];
	size_t n_pin;
	uint32_t live; /* runs started and not ended */
	/* the spin before a wait (shoal_serve_wait) */
	uint64_t frame_us;    /* when the latest frame was handled */
	uint64_t spin_off_us; /* no spinning before then: the core is shared */
	uint64_t wait_us;     /* the recent waits for a frame, averaged; 0: none yet */
	/* the longest engine run of the last minute or so, told in probe
	 * echoes: a prober waits in proportion (serve_probe.c) */
	uint64_t run_max_ns, run_max_us;
	uint64_t echo_us; /* when the probes were last answered */
	/* test hook SHOAL_TEST_FRAME_MS: each stage frame taken holds the
	 * thread this long more, as a slow engine would (0: off) */
	uint32_t test_frame_ms;
};
typedef struct shoal_serve_dt shoal_serve_dt;

/* The context of a run's token callback (shoal_dist_request.ctx). */
typedef struct shoal_serve_tokctx {
	shoal_serve *cl;
	uint32_t run;
} shoal_serve_tokctx;

/* How long a group member's wait for slices spins before it blocks: a
 * slice already on its way over loopback or a fast link comes within
 * ~10-60 us; longer waits are the other member still computing, and
 * spinning then takes the core from it where peers share cores (a dense
 * layer has 4 rounds: at 22 layers, 200 us bounds the spin to 17.6 ms a
 * token, reached only when every wait is that long). tests/bench/
 * tp_bench.sh, 2 pinned peers on 2 quiet cores, 3 runs: the mean wait was
 * 41-49 us; at 20 us a fifth of the waits blocked and the group made
 * 1.18-1.32x one peer, at 200 us 3 % blocked and 1.33-1.36x (91-101 % of
 * the 2-thread process). On 2 loaded cores (load ~10) spin 0, 50 and
 * 200 us were alike within noise. */
#define SHOAL_SERVE_TP_SPIN_US 200u
/* The data thread's spin before it blocks for frames (serve_data.c,
 * serve_wait): up to config.hop_spin_us (SHOAL_SERVE_HOP_SPIN_US,
 * serve.h, unless --spin-us says otherwise) while a session of ours
 * generates or for SHOAL_SERVE_HOP_ACTIVE_MS after a frame, when the
 * recent waits were shorter than that; a poll that returns
 * SHOAL_SERVE_HOP_GAP_US after it was called (the thread was preempted
 * for a time slice) stops it for SHOAL_SERVE_HOP_BACKOFF_MS. */
#define SHOAL_SERVE_HOP_ACTIVE_MS  20u
#define SHOAL_SERVE_HOP_GAP_US     500u
#define SHOAL_SERVE_HOP_BACKOFF_MS 1000u

/* The functions the files share, by file, in the order calls go: a file
 * calls only files below it here (tests/sh/cycle_check.sh). */

/* serve_plan.c calls serve_schedule.c, serve_part.c and serve_ready.c. */
/* serve_schedule.c: the GPU of record r the plan may use, into p (-1:
 * none, else its index in r->devices); whether plans take the control
 * plane's measured links, and whether predictions take the data plane's;
 * a plan over the candidates but `skip` (NULL: the plan we act on, then
 * predicted on the data links; sessions: what the policy chose); and
 * that for the plan we act on next, keeping our current plan's epoch
 * where the same inputs give it again. */
int serve__gpu(const shoal_record *r, shoal_view_peer *p);
bool serve__measured_links(const shoal_serve *cl);
bool serve__data_links(const shoal_serve *cl);
shoal_err serve__plan_on(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                         const uint8_t *skip, const shoal_plan *prev, shoal_plan **out,
                         uint32_t *sessions, char *why, size_t why_len);
shoal_err serve__plan_next(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                           const shoal_plan *prev, shoal_plan **out, uint32_t *sessions, char *why,
                           size_t why_len);
/* serve_ready.c: step 4 of shoal_serve_update (servability); 1: republish. */
int serve__judge(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc);
/* serve_part.c: take our part of cl->plan when it is not taken yet and its
 * tensors are here; 1 when readiness changed (republish). */
int serve__take_part(shoal_serve *cl);
/* serve.c: keep cl->prev in the state directory. */
void serve__plan_save(shoal_serve *cl);

/* serve_data.c: the data thread, and the start and stop of every thread
 * of the data plane (the accept and expert threads are serve_links.c's). */
shoal_err serve__data_start(shoal_serve *cl, char *why, size_t why_len);
void serve__data_stop(shoal_serve *cl);
void *serve__data_main(void *arg);

/* serve_draft.c: --draft's model, opened after the policy (NULL path: a
 * no-op; another vocabulary: INVAL naming the difference), freed after the
 * data thread; whether a request's kind k is offered here (INVAL with the
 * reason otherwise); the drafter of a run of kind k (data thread; none
 * when it cannot be made: the run goes on without). */
shoal_err serve__draft_open(shoal_serve *cl, char *why, size_t why_len);
void serve__draft_free(shoal_serve *cl);
shoal_err serve__spec_check(const shoal_serve *cl, shoal_speculate_kind k, char *why,
                            size_t why_len);
void serve__drafter(shoal_serve *cl, shoal_speculate_kind k, shoal_drafter *out);

/* serve_runs.c: the run slots. Queue a run of (*ids)[n_ids] (taken) for at
 * most n tokens, answering the client `from` (seq) or, with sink, the
 * sink (special: its text shows control tokens; spec: its drafter's
 * shoal_speculate_kind, -1: --speculate's); *slot_out is its API handle.
 * BUSY when every slot is taken. Any thread. */
shoal_err serve__queue(shoal_serve *cl, int32_t **ids, size_t n_ids, uint32_t n, uint32_t k,
                       bool no_logprob, bool special, int spec, const shoal_sampler_params *sp,
                       const shoal_ctl_route *from, uint64_t seq, const shoal_api_sink *sink,
                       uint32_t *slot_out, char *why, size_t why_len);
/* The data thread's side of the runs: pause run i (replayed after
 * delay_us), start what waits, check what runs. */
void serve__pause(shoal_serve *cl, uint32_t i, uint64_t now, uint64_t delay_us, const char *why);
void serve__start_runs(shoal_serve_dt *d, shoal_serve_tokctx *tcs);
void serve__check_runs(shoal_serve_dt *d);
/* A run whose end was told frees its slot (the data thread for an API
 * run, the node thread for a control-plane run). */
void serve__free_run(shoal_serve *cl, shoal_serve_run *r);

/* serve_probe.c: data-plane probes. The data thread's side: the PROBE
 * links' fds (returns how many, at most cap), their echoes, their close. */
int serve__probe_pollfds(const shoal_serve_dt *d, struct pollfd *pf, int cap);
void serve__probe_answer(shoal_serve_dt *d);
void serve__probe_close(shoal_serve_dt *d);
/* The prober thread (started and joined by serve_data.c). */
void *serve__probe_main(void *arg);
/* How many of the candidates all[n] other than all[i] and those muted
 * (mute[j]; NULL: none) name all[i] a data suspect in their records; their
 * names, comma-separated, into names[names_len] (may be NULL, 0). */
size_t serve__dsuspect_votes(const shoal_swim_member *const *all, size_t n, size_t i,
                             const bool *mute, char *names, size_t names_len);
/* serve_probe.c: a data link's timing as its answered probes give it
 * (invariant 6 there): windows of the last round trips (us) of small and
 * large probes, and the buckets published (SHOAL_BUCKET_NONE: none yet). */
typedef struct serve__dtime {
	uint32_t rtt[SHOAL_SERVE_DRTT_WINDOW];
	uint32_t n_rtt, at_rtt; /* how many held, the next slot */
	uint32_t big[SHOAL_SERVE_DRTT_BW_WINDOW];
	uint32_t n_big, at_big;
	uint32_t rtt_b, bw_b;
} serve__dtime;
void serve__dtime_init(serve__dtime *t); /* no sample, no bucket */
/* An answered probe's round trip us (of a large one when big: only once a
 * small one is held) into t; whether a published bucket moved. */
bool serve__dtime_note(serve__dtime *t, bool big, uint64_t us);

/* Which of the candidates all[n] (n <= SHOAL_SERVE_MAX_PEERS) the plan
 * leaves out: out[i] when SHOAL_SERVE_DSUSPECT_VOTES others name all[i],
 * not counting a peer that names every other candidate (of 3 or more: its
 * own data plane is the likelier broken one). Returns how many. A pure
 * function of the records: every peer decides alike. */
size_t serve__dsuspects(const shoal_swim_member *const *all, size_t n, bool *out);

/* serve_links.c: links by (peer, role) and admission; the accept and
 * expert threads. Data thread unless said. */
void serve__token(const shoal_serve *cl, const uint8_t peer[SHOAL_PEER_ID_LEN],
                  const uint8_t digest[SHOAL_DIGEST_BYTES], int role,
                  uint8_t out[SHOAL_LINK_TOKEN_LEN]); /* any thread */
void serve__free_assign(shoal_serve_assign *a);       /* any thread; NULL: no-op */
/* Which link reaches a peer, for dist objects (ctx: a shoal_serve_lctx). */
shoal_xfer_link *serve__link(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN]);
/* No link: the expert server's (it answers on the link a request came in
 * on, and runs on the expert thread, which must not touch the data
 * thread's links). */
shoal_xfer_link *serve__no_link(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN]);
/* The link a group member's slices arrive on (accepted, role TENSOR; ctx:
 * the serving state); NULL until it is there. */
shoal_xfer_link *serve__tensor_in(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN]);
/* A link to (peer, inc) broke: a PEER_GONE event unless it said goodbye
 * (bye) or is our own. */
void serve__link_broke(shoal_serve_dt *d, const uint8_t peer[SHOAL_PEER_ID_LEN], uint64_t inc,
                       bool bye, const char *why);
void serve__out_drop(shoal_serve_dt *d, size_t i);           /* close d->out[i] */
void serve__adopt(shoal_serve_dt *d);                        /* the accepted links */
void serve__links_close(shoal_serve_dt *d, const char *why); /* every link, with a goodbye */
/* The data listener's admission check (net/xfer.h's admit callback; the
 * accept thread). */
int serve__admit(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN], const char *addr,
                 const uint8_t *token, size_t token_len);
void *serve__accept_main(void *arg);
void *serve__experts_main(void *arg);

/* serve_timing.c: the plan's prediction against the run. */
typedef struct serve__timing {
	uint64_t pred_ns, stage_pred_ns; /* the plan's, ours (0: none) */
	int32_t stage;                   /* -1: we run no stage */
	uint64_t step_ns, steps;         /* median decode step we own, samples */
	uint64_t run_ns, runs;           /* median decode run of our stage, samples */
	bool gap_logged;
} serve__timing;
/* node thread: cl->plan was set (a new plan: the measured series start
 * anew), or only predicted anew (anew: the same plan, so its steps so far
 * stay measured; the gap is judged anew against the new prediction) */
void serve__timing_plan(shoal_serve *cl, bool anew);
/* data thread: the snapshots just taken */
void serve__timing_note(shoal_serve_dt *d, const shoal_dist_stage_metrics *sm,
                        const shoal_dist_owner_metrics *om);
void serve__timing_get(shoal_serve *cl, serve__timing *t);
json_t *serve__timing_json(shoal_serve *cl); /* the status' "timing" */

/* serve_wake.c: wake-up pipes and the event ring to the node thread. */
void serve__poke(int fd, const char *what); /* a byte into a pipe's write end */
void serve__wake(shoal_serve *cl);          /* the data thread */
void serve__xwake(shoal_serve *cl);         /* the expert thread */
/* Queue an event for the node thread; waits while the ring is full. */
void serve__event_push(shoal_serve *cl, const shoal_serve_event *ev);

#endif
