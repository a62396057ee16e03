/*
 * runtime/dist/dist_impl.h: what the files of distributed inference share:
 * the stage's layout (dist_stage.c runs it, dist_experts.c is its MoE
 * hook), the control block codec and the link poll loop (dist_proto.c).
 *
 * Part: runtime/ (distributed inference, see dist.h for the protocol).
 */
#ifndef SHOAL_RUNTIME_DIST_IMPL_H
#define SHOAL_RUNTIME_DIST_IMPL_H

#include "base/log.h"
#include "runtime/dist/dist.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/mtp.h"

/* Remote expert peers one stage may dispatch to: a desk or home lab has a
 * handful of machines; 32 leaves room and keeps the table on the stack. */
#define DIST__MAX_XPEERS 32u
/* Sessions per stage: one result row each per step, so this bounds the
 * logits scratch ((64, n_vocab) f32: 38 MiB at a 151k vocabulary). */
#define DIST__MAX_SESSIONS 64u
/* Links one *_poll call watches: a stage has an upstream, a downstream,
 * its expert peers and a spare; 3 fds each (xfer.h). */
#define DIST__MAX_POLL 48u

/* Word 8 of an OPEN: the bit that says the sampled id's logprob is not wanted. */
#define DIST__NO_LOGPROB 0x80000000u
/* Word 8 of an OPEN: the bit that says the owner waits for a MATCH. */
#define DIST__WANT_MATCH 0x40000000u
/* Word 8 of an OPEN: the bit that says the owner drafts with the MTP
 * layer's guesses (dist.h "Speculation"). */
#define DIST__WANT_MTP 0x20000000u

/* A control block in host form (dist.h "Control"). */
typedef struct dist__ctl {
	uint32_t op, status;
	uint8_t owner[SHOAL_PEER_ID_LEN];
	uint32_t n_prompt, max_tokens, logprobs;
	bool no_logprob;     /* OPEN: word 8's bit 31 */
	bool want_match;     /* OPEN: word 8's bit 30 (the owner sent prefix hashes) */
	bool want_mtp;       /* OPEN: word 8's bit 29 (MTP guesses with the results) */
	uint32_t first_step; /* OPEN: the step of the first token sampled (a replay) */
	shoal_sampler_params sp;
	uint32_t n_tail;
	const int32_t *tail; /* OPEN: (n_tail) ids, borrowed */
	uint32_t n_done;     /* OPEN with a grammar: first_step */
	const int32_t *done; /* OPEN: (n_done) generated ids, borrowed */
	uint32_t n_hash;     /* OPEN, CLOSE: prefix block hashes; MATCH: blocks held */
	uint32_t pfloor;     /* OPEN: the fewest blocks every stage so far can rewind
	                        to, other than 0 (dist.h "The prefix cache") */
	const uint8_t *hash; /* OPEN, CLOSE: (n_hash, SHOAL_DIST_PREFIX_HASH), borrowed */
	char reason[SHOAL_XFER_REASON_MAX + 1]; /* ERROR */
} dist__ctl;

/* Encode c into words[cap]; returns the word count (dim), 0 if too big. */
uint32_t dist__ctl_encode(const dist__ctl *c, int32_t *words, uint32_t cap);
/* Decode a control frame's payload; bad -> FORMAT with a reason. */
shoal_err dist__ctl_decode(const shoal_xfer_frame *f, dist__ctl *c, char *why, size_t why_len);
/* Send control block c for session sid on link k. */
shoal_err dist__ctl_send(shoal_xfer_link *k, uint64_t sid, const dist__ctl *c, int32_t *scratch,
                         uint32_t cap, int timeout_ms, char *why, size_t why_len);

typedef shoal_err (*dist__handle_fn)(void *obj, shoal_xfer_link *from, const shoal_xfer_frame *f,
                                     char *why, size_t why_len);
/* Poll links[n] up to timeout_ms; drain each readable one, handing frames
 * to fn. FORMAT/MISMATCH receives: logged, ++*dropped. */
shoal_err dist__poll(shoal_xfer_link *const *links, uint32_t n, int timeout_ms, dist__handle_fn fn,
                     void *obj, uint64_t *dropped, const char *who, char *why, size_t why_len);

uint64_t dist__now_ns(void);

/* ---- the prefix cache (dist_prefix.c) ------------------------------------ */

/* The chain hash of block i: out = digest(prev, ids[SHOAL_DIST_PREFIX_BLOCK])
 * cut to SHOAL_DIST_PREFIX_HASH bytes; prev NULL for block 0. */
void dist__prefix_chain(const uint8_t *prev, const int32_t *ids, uint8_t *out);
/* The chain hashes of the n_blocks whole blocks of ids, (n_blocks, HASH) out. */
void dist__prefix_chain_all(const int32_t *ids, uint32_t n_blocks, uint8_t *out);
/* A stage's salt: what else the KV of a position depends on. */
void dist__prefix_salt(const uint8_t model_id[SHOAL_MODEL_ID_BYTES], uint32_t layer_begin,
                       uint32_t layer_end, uint32_t device_end, const char *backend,
                       uint32_t kv_type, uint8_t salt[SHOAL_DIST_PREFIX_HASH]);
/* A chain hash keyed with a salt: what a stage stores and compares. */
void dist__prefix_key(const uint8_t salt[SHOAL_DIST_PREFIX_HASH], const uint8_t *chain,
                      uint8_t *key);

/* Sessions a stage keeps after their CLOSE: an entry per kept engine
 * slot, its keys (n_blocks, HASH), the least recently used evicted. */
typedef struct dist__pentry {
	bool used;
	uint32_t slot, n_blocks;
	uint64_t bytes; /* the KV its slot holds for those blocks */
	uint64_t tick;  /* last put or match: the LRU order */
	uint8_t *keys;  /* (SHOAL_DIST_PREFIX_MAX_BLOCKS, HASH) */
} dist__pentry;

typedef struct dist__pcache {
	uint8_t salt[SHOAL_DIST_PREFIX_HASH];
	uint64_t max_bytes, tick;
	uint32_t n; /* entries (the engine's session slots) */
	dist__pentry *e;
	uint64_t evictions;
} dist__pcache;

/* n entries; max_bytes 0: the cache is off (put keeps nothing). */
shoal_err dist__pcache_init(dist__pcache *c, uint32_t n, uint64_t max_bytes);
void dist__pcache_fini(dist__pcache *c);
/* The entry whose keys match the longest run of leading keys[n] (salted
 * by the caller), -1 when none matches a block; *m the blocks matched. */
int dist__pcache_match(const dist__pcache *c, const uint8_t *keys, uint32_t n, uint32_t *m);
/* Take entry i out of the cache (its slot is the caller's now). */
uint32_t dist__pcache_take(dist__pcache *c, int i);
/* Keep slot under keys[n] (n >= 1, at most MAX_BLOCKS), holding bytes of
 * KV for them (the engine's shoal_engine_kv_bytes_held: a sliding layer's
 * ring counts what it holds, not n blocks). Entries that do
 * not fit max_bytes any more are evicted, least recently used first, and
 * their slots written to out_free (capacity c->n): *n_free of them; the
 * new entry too when it alone is over (then false). */
bool dist__pcache_put(dist__pcache *c, uint32_t slot, const uint8_t *keys, uint32_t n,
                      uint64_t bytes, uint32_t *out_free, uint32_t *n_free);
/* Evict the least recently used entry: its slot, or -1 when empty. */
int64_t dist__pcache_evict(dist__pcache *c);
/* Entries, positions and bytes kept now. */
void dist__pcache_size(const dist__pcache *c, uint64_t *entries, uint64_t *tokens, uint64_t *bytes);

/* ---- the stage ---------------------------------------------------------- */

/* Session errors a stage could not deliver to their owners, kept and tried
 * again for DIST__ERR_RETRY_MS (an owner that restarted is reachable once
 * the view has its new endpoint). */
#define DIST__MAX_ERRS     16u
#define DIST__ERR_RETRY_MS 5000u

typedef struct dist__err {
	uint64_t sid;
	dist__ctl c;
	uint64_t until_ns;
} dist__err;

/* Sessions a stage freed without their owner's CLOSE (the owner left the
 * view, or went idle and lost its slot), the latest DIST__MAX_GONE: a row
 * of one that comes after all (the views disagreed for a moment) fails
 * that session at its owner, which replays it, instead of vanishing. */
#define DIST__MAX_GONE 16u

typedef struct dist__gone {
	uint64_t sid;
	uint8_t owner[SHOAL_PEER_ID_LEN];
	const char *why; /* a static string */
} dist__gone;

/* Each token's bytes in one text mode (dist_grammar.c): token i is
 * bytes[off[i], off[i + 1]); eog[i]: an end-of-generation id (no bytes). */
typedef struct dist__gvocab {
	bool ready;
	uint32_t n_vocab; /* the tokenizer's (ids past it never fit) */
	uint32_t *off;    /* (n_vocab + 1) */
	uint8_t *eog;     /* (n_vocab) */
	uint8_t *plain;   /* (n_vocab) all its bytes plain (shoal_grammar_plain_room) */
	uint8_t *bytes;
} dist__gvocab;

typedef struct dist__sess {
	bool used, failed;
	uint64_t sid;
	uint8_t owner[SHOAL_PEER_ID_LEN];
	uint32_t slot;     /* engine session slot */
	uint32_t n_prompt; /* the last stage samples rows at pos >= n_prompt - 1 */
	uint32_t step0;    /* the step of the row at n_prompt - 1 (a replay's history) */
	uint64_t last_ns;  /* the latest frame or control of the session */
	uint32_t logprobs;
	bool no_logprob;    /* with logprobs 0: the sampled id's logprob is not computed */
	shoal_sampler *smp; /* has_head only */
	int32_t *hist;      /* (2 * SHOAL_DIST_TAIL_MAX) recent ids, has_head only */
	uint32_t n_hist;
	/* structured output (has_head): the grammar program (malloc'd; NULL:
	 * none), the stage's token table it reads, the matcher's state after
	 * the tokens generated so far */
	uint32_t *gram;
	const dist__gvocab *gvocab;
	shoal_grammar_state gst;
	bool started; /* a row ran: the first one's position counts a prefix hit */
	/* speculation (has_head; dist.h "Speculation"): the position after
	 * the latest sampled row (0: none yet); per sampled row of the last
	 * DIST__SPEC_ROWS (by position modulo), the ids it added to hist and,
	 * with a grammar, the matcher's state after it; the run that sampled
	 * the latest row */
	uint32_t next_pos;
	uint8_t hadd[SHOAL_DIST_DRAFT_MAX + 1];
	shoal_grammar_state *gsnap; /* (DIST__SPEC_ROWS) with a grammar, else NULL */
	uint64_t stamp;
	bool stuck; /* a row of this run had no token: the later ones have none */
	/* MTP guesses (has_head, dist_mtp.c): the session's MTP drafter (ops
	 * NULL: none), the guess sent with its latest step (-1: none), the
	 * OPEN's tail of prompt ids */
	shoal_drafter mtp;
	int32_t mtp_guess;
	int32_t *ptail; /* (SHOAL_DIST_TAIL_MAX) has_head only */
	uint32_t n_ptail;
} dist__sess;

/* Sampled rows a stage can go back over: a step's fed row and its drafts. */
#define DIST__SPEC_ROWS (SHOAL_DIST_DRAFT_MAX + 1u)

/* Owners a stage remembers as waiting for a session (dist_admit.c): one
 * entry per owner; a lab has a few API peers, 16 leaves room. An entry
 * not refreshed for DIST__WAIT_TTL_MS is forgotten: 5 of the owners'
 * 200 ms retries (SHOAL_SERVE_BUSY_RETRY_MS) missed. */
#define DIST__MAX_WAITERS 16u
#define DIST__WAIT_TTL_MS 1000u

typedef struct dist__waiter {
	uint8_t owner[SHOAL_PEER_ID_LEN];
	bool resumed;      /* a refused OPEN was a replay (first_step > 0) */
	uint64_t first_ns; /* its first refusal: its place */
	uint64_t last_ns;  /* its latest refusal: it still waits */
} dist__waiter;

typedef struct dist__admit {
	dist__waiter w[DIST__MAX_WAITERS];
	uint32_t n;
} dist__admit;

struct shoal_dist_stage {
	shoal_dist_stage_config cfg;
	const shoal_model *m;
	shoal_engine *e;  /* the layers [layer_begin, device_end or layer_end) */
	shoal_engine *e2; /* the rest on the CPU (cfg.device_end), or NULL */
	float *mid;       /* (R, d) hidden states from e to e2 */
	uint8_t *mask;    /* (n_layer, n_expert) held here */
	int8_t *xpeer;    /* (n_layer, n_expert) index into xpeers, -1: held here */
	uint8_t xpeers[DIST__MAX_XPEERS][SHOAL_PEER_ID_LEN];
	uint32_t n_xpeers;
	uint32_t d, n_vocab, n_layer, n_expert, k, R;
	dist__sess *sess; /* (max_sessions) */
	/* the pending batch: rows [0, n_pend) from one or more frames */
	uint32_t n_pend;
	int32_t *tok;          /* (R) */
	float *hin, *hout;     /* (R, n_embd) */
	uint32_t *slot, *pos;  /* (R) */
	uint32_t *row_sess;    /* (R) index into sess */
	uint8_t *want;         /* (R) */
	shoal_xfer_row *tags;  /* (R) */
	float *logits;         /* (n_lrows, n_vocab) */
	int32_t *res;          /* (n_lrows, 2 + 2 MAX_LOGPROBS) results */
	int32_t *reply;        /* (n_lrows, 2 + 2 MAX_LOGPROBS) one owner's */
	shoal_xfer_row *rtags; /* (n_lrows) */
	shoal_xfer_row *otags; /* (n_lrows) one reply's tags */
	uint8_t *rdone;        /* (n_lrows) */
	uint32_t *wsess;       /* (n_lrows) */
	uint32_t n_lrows;      /* rows of logits one run may want: max_sessions + DRAFT_MAX */
	int32_t *top_ids;      /* (MAX_LOGPROBS) */
	float *top_lps;
	/* MTP guesses (has_head): the layer (made at the first session that
	 * asks), each row's choice (-1: none), a session's kept rows */
	shoal_mtp *mtp;
	int32_t *rchoice;  /* (R) */
	float *mtp_h;      /* (R, n_embd) */
	int32_t *mtp_next; /* (R) */
	int32_t ctl[SHOAL_DIST_CTL_MAX_WORDS];
	dist__gvocab gv[2]; /* token tables: [0] text, [1] with control tokens */
	dist__err errs[DIST__MAX_ERRS];
	uint32_t n_errs;
	uint64_t errs_last_ns;
	dist__gone gone[DIST__MAX_GONE]; /* a ring; sid 0: empty */
	uint32_t n_gone;                 /* recorded so far */
	/* expert server: (R, k) ids/w, (R, k, n_embd) contributions, (R k) slots */
	int32_t *ex_ids;
	float *ex_w, *ex_contrib, *ex_out;
	uint32_t *ex_slot;
	uint8_t *ex_req; /* (n_expert) */
	/* expert client: one dispatch at a time */
	float *xx;                /* (R, n_embd) rows gathered for one peer */
	shoal_xfer_route *xroute; /* (R k) */
	shoal_xfer_row *xtags;    /* (R) */
	uint32_t n_sent;
	uint8_t sent[DIST__MAX_XPEERS]; /* xpeer indices requested, in order */
	uint32_t sent_routes[DIST__MAX_XPEERS];
	uint32_t tp_rows;  /* rows of the batch in the engine (a group's tags check) */
	uint32_t tp_row0;  /* and the first of them (a run of part of the batch) */
	dist__admit admit; /* owners refused for want of a session, in order */
	dist__pcache pc;   /* ended sessions' KV kept for their prefixes */
	uint8_t pkeys[SHOAL_DIST_PREFIX_MAX_BLOCKS * SHOAL_DIST_PREFIX_HASH]; /* scratch */
	/* per-row and per-frame lines, one a second (base/log.h) */
	shoal_log_limit log_busy, log_row, log_plan, log_frame;
	shoal_dist_stage_metrics met;
};

/* dist_grammar.c: a session's grammar from its OPEN (none: nothing),
 * its state rebuilt from a replay's ids; the filter the sampler applies;
 * the state moved on by the sampled id; the grammar freed; a token table
 * freed. */
shoal_err dist__grammar_open(shoal_dist_stage *s, dist__sess *ss, const dist__ctl *c, char *w,
                             size_t w_len);
shoal_sampler_filter dist__grammar_filter(dist__sess *ss);
void dist__grammar_advance(dist__sess *ss, int32_t id);
void dist__grammar_close(dist__sess *ss);
void dist__gvocab_fini(dist__gvocab *v);

/* dist_verify.c: before sampling the row at pos of session ss, forget
 * the choices made at rows pos.. of an earlier step (drafts the owner did
 * not keep): the penalty history and the grammar state as those rows
 * found them (false: pos lies further back than a step reaches); after
 * sampling it (added: ids appended to hist), note the row. */
bool dist__verify_rewind(dist__sess *ss, uint32_t pos);
void dist__verify_note(dist__sess *ss, uint32_t pos, uint8_t added);

/* ---- MTP guesses (dist_mtp.c; the last stage) ----------------------------- */

/* Session ss opened with c: its MTP drafter when c asks for guesses (on
 * failure it goes on without, logged). */
void dist__mtp_open(shoal_dist_stage *s, dist__sess *ss, const dist__ctl *c);
void dist__mtp_close(dist__sess *ss);
/* After the rows [r0, r0 + n) ran (s->hout from r0) and were sampled
 * (s->rchoice): each MTP session's kept rows into its layer, its guess in
 * ss->mtp_guess. */
void dist__mtp_run(shoal_dist_stage *s, uint32_t r0, uint32_t n);

/* dist_admit.c: the waiters that rank before an OPEN of `owner` (a replay
 * when resumed), after forgetting those that gave up; the OPEN refused
 * (it waits, keeping its first place); the OPEN admitted (entry dropped). */
uint32_t dist__admit_ahead(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN], bool resumed,
                           uint64_t now_ns);
void dist__admit_refused(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN], bool resumed,
                         uint64_t now_ns);
void dist__admit_taken(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN]);

/* dist_experts.c: the engine's moe_hook for stage s (ctx = s). */
shoal_err dist__experts_dispatch(void *ctx, uint32_t layer, const shoal_moe_rows *rows);
shoal_err dist__experts_collect(void *ctx, uint32_t layer, const shoal_moe_rows *rows,
                                float *contrib);
/* Answer an EXPERT_REQ from link `from` with this stage's engine. */
shoal_err dist__experts_serve(shoal_dist_stage *s, shoal_xfer_link *from, const shoal_xfer_frame *f,
                              char *why, size_t why_len);

/* dist_tensor.c: the engine's exchange and head gather for a tensor group
 * member (ctx = s), and the entry member's relay of frame f to the other
 * members (false: a member could not be reached; the reason in why). */
shoal_err dist__tp_exchange(void *ctx, uint32_t layer, shoal_engine_tp_round round,
                            void *const *bufs, const size_t *len);
shoal_err dist__tp_gather(void *ctx, uint32_t root, void *const *bufs, const size_t *len);
bool dist__tp_relay(shoal_dist_stage *s, const shoal_xfer_frame *f, char *why, size_t why_len);

#endif
