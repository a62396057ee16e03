/*
 * runtime/dist/dist.h: distributed inference above the data plane: pipeline
 * stages, remote experts and the session owner, over shoal_xfer links.
 *
 * Part: runtime/ (DESIGN.md section 2). Transport-agnostic: every object
 * takes already-connected links through a lookup callback (peer id ->
 * link) and is driven by "handle this received frame" (for an event loop
 * that polls shoal_xfer_link_pollfds) or by a *_poll helper that polls a
 * given set of links itself. Files: dist_stage.c (a stage and an expert
 * server), dist_experts.c (the engine's moe_hook over links), dist_tensor.c
 * (a tensor group member's exchange and relay), dist_owner.c (the session
 * owner), dist_proto.c (the message layouts below).
 *
 * Threading: each object is used by one thread at a time, and a link by
 * one thread at a time (xfer.h): give each stage its own thread and its
 * own link ends. A stage blocks inside shoal_dist_stage_handle/flush while
 * its engine runs, including while it waits for expert replies (bounded
 * by timeout_ms); it does not serve EXPERT_REQ frames meanwhile, so a peer
 * that is both a stage and an expert holder of ANOTHER stage's layers
 * runs a separate expert server (shoal_dist_stage with an empty layer
 * range) on its own thread and link ends (the node does:
 * runtime/node/serve_data.c, with expert_link below): two stages
 * waiting on each other's experts would otherwise stall until
 * timeout_ms.
 */
#ifndef SHOAL_RUNTIME_DIST_H
#define SHOAL_RUNTIME_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/peer_id.h"
#include "models/grammar.h"
#include "models/model.h"
#include "models/model_id.h"
#include "net/xfer.h"
#include "runtime/engine/draft_ctl.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/sampler.h"
#include "scheduler/digest.h"

/*
 * Messages (all on data links, so each one is in order with the data of
 * its session; every frame carries the plan digest and epoch, checked by
 * the link: a frame of another plan is dropped as MISMATCH and logged):
 *
 *   kind    dtype layers          dim      rows         direction
 *   TOKEN   I32   [0, 0)          1        (sid, pos)   owner -> stage 0: ids
 *   HIDDEN  F32   [l0, l1)        n_embd   (sid, pos)   stage -> next stage
 *   TOKEN   I32   [L, L), L=n_layer 2+2K(+1) (sid, pos) last stage -> owner
 *   SESSION I32   [0, 0)          >= 18    (sid, 0)     control, see below
 *   EXPERT_REQ F32 [l, l+1)       n_embd   tags of rows routed there
 *   EXPERT_REP F32 [l, l+1)       n_embd   same rows and routes, payload
 *                                          (n_routes, n_embd) contributions
 *   GATHER  F32   [l, l+1)        slice    the batch's  member -> member: one
 *                                          rows         all-gather's slice
 *
 * A result row: word 0 the sampled id, word 1 its logprob (f32 bits),
 * then K pairs (id, logprob bits), best first; pos is the position whose
 * logits were sampled (the new token goes to pos + 1). A frame of an odd
 * dim, 3+2K, has one word more at the end of each row: the MTP layer's
 * guess at the token after the step's last kept id (-1: none), for the
 * rows of sessions that asked for it (see "Speculation").
 *
 * Control (a SESSION frame of 1 row; net/xfer_frame.h checks its shape), words:
 *   0 op (OPEN, CLOSE, ERROR, MATCH, SPEC)  1 status (shoal_err; OPEN, CLOSE and
 *   MATCH: n_hash, the prefix blocks below)  2-5 owner peer id
 *   6 n_prompt  7 max_tokens  8 logprobs K (bit 31: the sampled id's own
 *   logprob is not wanted: result word 1 reads 0 unless K > 0; bit 30: the
 *   owner waits for a MATCH; bit 29: MTP guesses wanted)  9 temp (f32 bits)  10 top_k
 *   11 top_p  12 min_p  13 repeat_penalty  14 repeat_last_n  15 n_tail
 *   16-17 seed (lo, hi)  18 first step  19 presence_penalty  20
 *   frequency_penalty (f32 bits)  21 n_bias  22 n_grammar  23 n_done
 *   24 OPEN: the prefix floor (below)  25-27 zero (the words after stay
 *   16-byte aligned)
 *   28.. OPEN: n_bias pairs (token id, logit bias f32 bits), then the
 *   last n_tail prompt ids (for the penalties), then n_grammar words of
 *   a grammar program (models/grammar.h: structured output; 0: none),
 *   then, with a grammar, the n_done = first step ids a replay generated
 *   before (the grammar's state is a function of them), then n_hash
 *   prefix block hashes; CLOSE: n_hash prefix block hashes; ERROR: n_tail
 *   bytes of reason.
 *
 * The prefix cache (dist_prefix.c): a block is SHOAL_DIST_PREFIX_BLOCK
 * positions; block i's hash (SHOAL_DIST_PREFIX_HASH bytes, 4 words) is the
 * digest of block i-1's hash and block i's token ids, so it names every
 * token before the block's end. An OPEN's hashes cover the whole blocks of
 * positions [0, n_prompt - 1) (the last prompt row always runs: its logits
 * are sampled). Each stage keys them with its own salt (model id, layer
 * range, device split, backend, KV type) and counts the leading blocks it
 * holds in one kept session, m; it passes the OPEN on with n_hash cut to
 * min(n_hash, m), and the last stage answers the owner with MATCH, n_hash
 * = that minimum M. The owner then sends the prompt from position M x
 * BLOCK; every stage took the kept session whose KV holds those positions
 * (the engine rewinds what lies beyond). A stage whose sliding layers keep
 * rings (runtime/engine/engine_kv.c) can rewind its kept session only to 0
 * or to a block count at least a (where the ring still holds the window
 * before it): the OPEN carries the floor F, the largest a of the stages so
 * far; a stage cuts n_hash to min(n_hash, m) and raises F to its a, and
 * where the cut falls below F it sends n_hash = 0 and F = 0 on: the
 * prompt is computed from its start, never read from a ring that lost it. A CLOSE's hashes cover
 * the whole blocks of every position fed (prompt and generated tokens); a stage keeps the session's
 * KV under them (as many as its KV holds) instead of freeing it, until an OPEN reuses it or it is
 * evicted, least recently used first. An OPEN without hashes waits for no MATCH.
 *
 * A replay (the owner re-opens a session on a new plan with its prompt
 * plus the k tokens already generated as the prompt) sets first step = k:
 * the token sampled at position n_prompt - 1 + s is step k + s, so the
 * sampler's draw, a function of (seed, step), is that of the undisturbed
 * run, and the tail (the last prompt ids, generated ones included) is the
 * repetition penalty's history as it was.
 *
 * Speculation (issue 38): a decoding step of a session may carry, after
 * the token the owner feeds at position p, up to SHOAL_DIST_DRAFT_MAX
 * drafted ids at p+1.. (the owner's guesses, runtime/engine/draft.h), as
 * rows of the same frame. Every stage runs them as one batch; the last
 * stage samples each row's choice as if the rows before it were kept: the
 * row at p+j with the draw of step t+j and the penalties and grammar state
 * advanced over its own choices at p..p+j-1, and returns one result row
 * per row (id -1: a grammar allows no token there). The owner keeps the
 * drafts up to the first that differs from the choice before it, and hands
 * out the choices up to that row: those are the tokens of a run without
 * drafts. Its next step starts at the first position not kept: the
 * engines overwrite the rows after it (a row at pos < KV length rewinds),
 * and the last stage first forgets the choices it made at those rows (the
 * penalty history and the grammar state go back to where the kept rows
 * left them). A CLOSE's hashes cover the kept positions only, so the
 * prefix cache never keeps a rejected row.
 *
 * MTP guesses (DeepSeek's MTP layer, runtime/engine/mtp.h; dist_mtp.c): the
 * layer needs the final hidden state of each kept row, which only the last
 * stage has, so it runs there. An OPEN with word 8's bit 29 asks for it
 * (and carries no prefix hashes: the layer sees every prompt row); the
 * last stage then runs the layer over the session's kept rows of each
 * step (prompt rows with the token after them from the OPEN's tail, or
 * zeroed before it; sampled rows with their choice) and puts its greedy
 * guess at the next token into the step's result rows (the odd word
 * above). The owner drafts that guess, and only it, as the next step's
 * one draft row: so the last stage knows which of its rows are kept (the
 * fed row; the draft row iff its guess equals the fed row's choice)
 * without seeing the ids, and a rejected row's MTP cache row is
 * overwritten by the next push. A stage without the layer, or whose
 * session's MTP falls out of step, sends no guesses (-1): the owner then
 * drafts nothing, and tokens are the same either way. While the owner's
 * session does not draft (draft_ctl.h's pause) it sends SPEC without bit
 * 29, travelling like CLOSE, in order before the step it applies to; the
 * last stage's layer then defers its rows (mtp.h: a batch per 64 rows, no
 * guess, -1 in the results) until a SPEC with bit 29, sent before the
 * step whose guess the owner will draft. An OPEN starts with guesses.
 *
 * Protocol invariants:
 *  1. A session id (sid) is chosen by its owner; its high 32 bits are the
 *     first 4 bytes of the owner's peer id, so owners rarely collide, and
 *     its low 32 bits count from the owner's start time; a stage refuses
 *     an OPEN whose sid is live for another owner (BUSY), and replaces one
 *     live for the same owner (stale: an owner never reopens a live sid).
 *  2. OPEN travels owner -> stage 0 -> ... -> last stage, ahead of the
 *     session's first TOKEN frame on the same links: no reply is needed.
 *  3. Exactly one HIDDEN frame per hop per engine run, unless the run's rows
 *     do not fit the link's max frame (then as few frames as fit, in
 *     order). A run is one step of one session, or, under *_poll, every
 *     row that arrived together (several sessions batch through).
 *  4. The last stage samples every row at pos >= n_prompt - 1 (the last
 *     prompt row, then the fed token and the drafts that follow it, see
 *     "Speculation" below); step t = first step + pos - (n_prompt - 1), so
 *     the draw is a function of (seed, t) (DESIGN invariant 2).
 *  5. Hidden states and expert inputs/outputs are raw F32, never converted.
 *  6. A stage that cannot run a session's rows (bad shape, bad position,
 *     engine or expert failure, the next stage unreachable) fails that
 *     session: it sends ERROR to the owner (directly with owner_link, else
 *     down the chain: the last stage to the owner) and drops its later
 *     frames. A frame for an unknown session is dropped and logged (a
 *     stray), except the first row of one the stage freed without its
 *     owner's CLOSE (its owner had left the stage's view, or the session
 *     idled and lost its slot): that fails the session at its owner with
 *     NOTFOUND, so that a momentary disagreement of the views costs a
 *     replay, not a silent hang.
 *  7. In an MoE layer, one EXPERT_REQ per remote expert peer per layer per
 *     engine run, one EXPERT_REP back, on the link the request came in on;
 *     contributions are combined in expert-id order by the engine.
 *  8. CLOSE travels like OPEN; stages free the slot. Nothing replies.
 *  9. A stage run by a tensor group: frames for the stage go to its entry
 *     member (member 0: the plan's stage peer), which relays each one, as
 *     it came, to every other member before it handles it, so that all
 *     members run the same batches in the same order (several owners may
 *     feed one stage; their frames interleave differently on other links).
 *     A group stage runs each data frame as its own batch. In each engine
 *     exchange (engine.h, 4 per dense layer, 3 per MoE layer) a member
 *     sends its slice to every other member as one GATHER frame (as few
 *     as fit, in order, when it is larger than a frame): n_aux = the
 *     round, the batch's row tags, dim = the frame's floats; a frame with
 *     other rows, layer or round, or more bytes than the slice has left,
 *     is a protocol error that fails the batch.
 *     One member (tp_out) passes the output and the control on.
 * 10. A group that runs the last stage splits the head (tp_head): every
 *     member computes its vocab rows' logits for the rows wanting logits
 *     (the last row of each session whose prompt is in, known alike to
 *     every member), and each member other than tp_root (the head peer,
 *     has_head, which samples) sends them to tp_root as one GATHER
 *     message (round SHOAL_ENGINE_TP_HEAD, layer_first = layer_end): per
 *     batch with logits, tp_n - 1 messages, none back.
 */
#define SHOAL_DIST_CTL_WORDS 28u
/* Generated ids a constrained replay carries: 3072 (12 KiB) keeps the
 * largest OPEN (below, with a whole grammar and every prefix hash) under
 * a link's smallest max frame, 64 KiB; a constrained run replayed later
 * than that fails with a reason. */
#define SHOAL_DIST_REPLAY_MAX 3072u
/* Prefix blocks: 16 positions, vLLM's default block, so a prompt that
 * diverges mid-block recomputes at most 15 positions; 1024 blocks cover
 * a 16k-token prefix in 16 KiB of hashes per OPEN. A hash is 16 bytes of
 * a digest: 2^64 prompts before two collide by chance, and no client can
 * aim one at another's prefix. */
#define SHOAL_DIST_PREFIX_BLOCK      16u
#define SHOAL_DIST_PREFIX_MAX_BLOCKS 1024u
#define SHOAL_DIST_PREFIX_HASH       16u
/* The most words a control frame holds: its fields, the logit bias pairs,
 * the tail, a grammar, a replay's ids, the prefix hashes. */
#define SHOAL_DIST_CTL_MAX_WORDS                                                                   \
	(SHOAL_DIST_CTL_WORDS + 2u * SHOAL_SAMPLER_MAX_BIAS + SHOAL_DIST_TAIL_MAX +                \
	 SHOAL_GRAMMAR_MAX_WORDS + SHOAL_DIST_REPLAY_MAX +                                         \
	 SHOAL_DIST_PREFIX_MAX_BLOCKS * (SHOAL_DIST_PREFIX_HASH / 4u))
/* Drafted rows one decoding step of a session may carry (draft_ctl.h). */
#define SHOAL_DIST_DRAFT_MAX SHOAL_DRAFT_MAX
/* --logprobs cap: the generation loop's. */
#define SHOAL_DIST_MAX_LOGPROBS SHOAL_GEN_MAX_LOGPROBS
/* Prompt tail for the repetition penalty: sampler's default last_n is 64;
 * 256 covers every setting seen in llama.cpp presets. */
#define SHOAL_DIST_TAIL_MAX 256u
_Static_assert(SHOAL_DIST_CTL_MAX_WORDS * 4u + 256u <= 65536u,
               "the largest control frame must fit a link's smallest max frame");
/* Members of one tensor group: a desk of 4 Mac Studios, a lab of a few
 * boxes; 16 keeps the config on the stack. */
#define SHOAL_DIST_TP_MAX 16u

enum {
	SHOAL_DIST_CTL_OPEN = 1,
	SHOAL_DIST_CTL_CLOSE = 2,
	SHOAL_DIST_CTL_ERROR = 3,
	SHOAL_DIST_CTL_MATCH = 4, /* last stage -> owner: the prefix blocks every stage holds */
	SHOAL_DIST_CTL_SPEC = 5   /* owner -> last stage: MTP guesses wanted (bit 29) or not */
};

/* Which link reaches peer `peer` (borrowed; NULL: none). Called on the
 * object's thread; the link must not be used by another thread meanwhile. */
typedef shoal_xfer_link *(*shoal_dist_link_fn)(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN]);

/* ---- stages and expert servers ------------------------------------------- */

typedef struct shoal_dist_stage shoal_dist_stage; /* opaque */

typedef struct shoal_dist_stage_config {
	uint32_t layer_begin, layer_end; /* [l0, l1); empty: an expert server */
	bool has_embd, has_head;
	/* (n_layer, n_expert) bytes, nonzero = held here; NULL: all. Copied. */
	const uint8_t *expert_mask;
	/* (n_layer, n_expert, 16) peer ids: who holds each expert NOT held
	 * here (read only for those). Required with expert_mask and layers;
	 * an expert server (no layers) dispatches nothing: NULL. Copied. */
	const uint8_t *expert_peer;
	/* Whether a tensor of the model file is held (shoal_engine_config's
	 * tensor_held: a weights cache); NULL: all are. */
	bool (*tensor_held)(void *ctx, const struct shoal_gguf_tensor *t);
	void *tensor_held_ctx;
	/* The model's tokenizer (the last stage's token bytes for structured
	 * output; borrowed for the stage's life); NULL: a constrained OPEN
	 * fails with a reason. */
	const shoal_tokenizer *tok;
	uint8_t self[SHOAL_PEER_ID_LEN];
	uint8_t next[SHOAL_PEER_ID_LEN]; /* the next stage (ignored with has_head) */
	uint8_t digest[SHOAL_DIGEST_BYTES];
	uint64_t epoch;
	uint32_t n_threads, n_ctx, max_sessions, max_rows; /* engine config */
	shoal_dist_link_fn link;
	void *link_ctx;
	/* Which link reaches an expert peer; NULL: `link`. A node gives the
	 * requests their own link ends, so that the far side's expert server
	 * thread reads them (runtime/node/serve_links.c). */
	shoal_dist_link_fn expert_link;
	void *expert_link_ctx;
	/* Which link reaches a session's owner from a stage that is not the
	 * last: a session that fails here (the next stage is gone) is told to
	 * its owner directly; NULL: down the chain, as the other control. */
	shoal_dist_link_fn owner_link;
	void *owner_link_ctx;
	int timeout_ms; /* bound on one send and on an expert reply */
	/* A tensor group (tp_n >= 2, invariant 9): this stage is member tp_me
	 * of the tp_n peers tp_peer (plan order) with share weights tp_w.
	 * expert_mask must be NULL then (a member's experts are its share).
	 * tp_out: this member sends the stage's output (hidden states to
	 * `next`, or results with has_head) and passes control on. Links to a
	 * member: tp_relay for relayed frames (the far side's stage reads
	 * them), tp_send for our slices; tp_recv says where a member's slices
	 * arrive (read only inside an exchange). tp_spin_us: how long a wait
	 * for slices polls without sleeping before it blocks. */
	uint32_t tp_n, tp_me;
	uint64_t tp_w[SHOAL_DIST_TP_MAX];
	uint8_t tp_peer[SHOAL_DIST_TP_MAX][SHOAL_PEER_ID_LEN];
	bool tp_out;
	shoal_dist_link_fn tp_relay, tp_send, tp_recv;
	void *tp_relay_ctx, *tp_send_ctx, *tp_recv_ctx;
	uint32_t tp_spin_us;
	/* The head split among the group (invariant 10; the last stage):
	 * member tp_root gathers the logits, and is the one with has_head. */
	bool tp_head;
	uint32_t tp_root;
	/* The compute backend by name (runtime/backends.h: "cpu", "vulkan";
	 * NULL or "auto": the best this machine has), and a split of the
	 * layers inside this peer (a stage boundary without a hop): with
	 * layer_begin < device_end < layer_end, layers [layer_begin,
	 * device_end) run on that backend and the rest on the CPU backend,
	 * hidden states passing between them in memory. 0 or layer_end: all
	 * on the one backend. Not with a tensor group. */
	const char *backend;
	uint32_t device_end;
	/* The prefix cache (see "The prefix cache" above): the most bytes of
	 * KV that ended sessions may keep in the stage's idle session slots
	 * (whose memory the engine holds anyway), each counted as its slot
	 * holds it (shoal_engine_kv_bytes_held: a sliding layer's ring at most
	 * the ring's positions); 0: off, UINT64_MAX: every
	 * idle slot. model_id salts the keys (with the layer range, split,
	 * backend and KV type), so that no other model's KV ever matches. */
	uint64_t prefix_bytes;
	uint8_t model_id[SHOAL_MODEL_ID_BYTES];
} shoal_dist_stage_config;

/* m is borrowed (must outlive the stage). Allocates the engine and all
 * scratch here: nothing per frame. */
shoal_err shoal_dist_stage_new(const shoal_model *m, const shoal_dist_stage_config *cfg,
                               shoal_dist_stage **out, char *why, size_t why_len);
void shoal_dist_stage_free(shoal_dist_stage *s); /* NULL is a no-op */

/* Handle one frame received on link `from`, now (a data frame is run as
 * its own batch). Data frames of another plan than cfg's are dropped,
 * whatever the link's plan. Bad frames are logged and dropped, and fail
 * the session they name (invariant 6); the return is SHOAL_OK then. An
 * error return means the stage could not send (a link is down): the
 * reason says which. */
shoal_err shoal_dist_stage_handle(shoal_dist_stage *s, shoal_xfer_link *from,
                                  const shoal_xfer_frame *f, char *why, size_t why_len);

/* The same, for a caller that drains its links itself: a data frame joins
 * the pending batch (which runs first only when the rows would not fit);
 * any other frame runs the pending batch, then itself. Call
 * shoal_dist_stage_flush when every ready link is drained, so that rows
 * that arrived together, of several sessions, run as one batch and leave
 * as one frame per hop (invariant 3). */
shoal_err shoal_dist_stage_take(shoal_dist_stage *s, shoal_xfer_link *from,
                                const shoal_xfer_frame *f, char *why, size_t why_len);
shoal_err shoal_dist_stage_flush(shoal_dist_stage *s, char *why, size_t why_len);

/* Poll links[n] up to timeout_ms and handle every frame that arrived; the
 * data frames that arrived together run as one batch (control frames and
 * expert requests run the batch so far first, keeping their order).
 * FORMAT/MISMATCH receives are logged and counted as dropped. Returns OK
 * (something or nothing handled), or CLOSED/IO/PROTO when a link died.
 *
 * A node thread per stage, for example:
 *     links = {from the previous stage (or the owners), to the next stage,
 *              to each expert peer};
 *     while (running) shoal_dist_stage_poll(s, links, n, 50, why, len);  */
shoal_err shoal_dist_stage_poll(shoal_dist_stage *s, shoal_xfer_link *const *links, uint32_t n,
                                int timeout_ms, char *why, size_t why_len);

/* Free every session whose owner is not among owners[n_owners] (it left
 * the view: its CLOSE will never come); returns how many. A session idle
 * for SHOAL_DIST_IDLE_MS is also freed when an OPEN finds no free slot.
 * NULL s: 0. */
uint32_t shoal_dist_stage_keep_owners(shoal_dist_stage *s,
                                      const uint8_t (*owners)[SHOAL_PEER_ID_LEN], size_t n_owners);
#define SHOAL_DIST_IDLE_MS 60000u

typedef struct shoal_dist_stage_metrics {
	uint64_t runs;            /* engine runs (one per batch) */
	uint64_t batched_runs;    /* runs with rows of more than one session */
	uint64_t rows;            /* rows run */
	uint64_t run_ns;          /* wall time in the engine, experts included */
	uint64_t last_run_ns;     /* the latest run: step time of this stage */
	uint64_t hidden_sent;     /* HIDDEN frames sent downstream */
	uint64_t tokens_sent;     /* result TOKEN frames sent to owners */
	uint64_t expert_reqs;     /* EXPERT_REQ frames sent */
	uint64_t expert_layers;   /* MoE layer runs that dispatched >= 1 request */
	uint64_t expert_served;   /* EXPERT_REQ frames answered */
	uint64_t expert_timeouts; /* expert replies not there within timeout_ms */
	uint64_t dropped;         /* frames dropped: stray, malformed, other plan */
	uint64_t session_errors;  /* sessions failed here */
	/* whole frames, header included (as shoal_xfer_metrics counts them):
	 * divided by the tokens generated, the bytes per hop per token */
	uint64_t hidden_bytes;     /* HIDDEN sent */
	uint64_t tokens_bytes;     /* result TOKEN frames sent */
	uint64_t expert_req_bytes; /* EXPERT_REQ sent */
	uint64_t expert_rep_bytes; /* EXPERT_REP received (by collect) */
	/* a tensor group's member */
	uint64_t gathers;            /* exchanges (all-gathers) taken part in */
	uint64_t gather_sent;        /* slices sent: (tp_n - 1) per exchange */
	uint64_t gather_recv;        /* slices received */
	uint64_t gather_frames_sent; /* GATHER frames: one a slice unless it */
	uint64_t gather_frames_recv; /* is larger than a frame */
	uint64_t gather_bytes;       /* GATHER frames sent, whole */
	uint64_t gather_wait_ns;     /* time waiting for the others' slices */
	uint64_t gather_blocked;     /* waits that outlasted tp_spin_us and blocked */
	uint64_t relayed;            /* frames relayed to the other members (entry) */
	/* a member of a split head (invariant 10); its frames are counted
	 * with the gathers' above */
	uint64_t head_gathers; /* head gathers taken part in */
	uint64_t head_sent;    /* slices sent to the root: 1 per gather */
	uint64_t head_recv;    /* slices received (the root): tp_n - 1 each */
	/* the prefix cache */
	uint64_t prefix_hits;       /* sessions that started from kept KV */
	uint64_t prefix_hit_tokens; /* positions they did not compute */
	uint64_t prefix_evictions;  /* kept sessions freed for room */
	uint64_t prefix_entries;    /* kept sessions now */
	uint64_t prefix_tokens;     /* positions they hold now */
	uint64_t prefix_bytes;      /* their KV bytes now */
} shoal_dist_stage_metrics;

void shoal_dist_stage_metrics_get(const shoal_dist_stage *s, shoal_dist_stage_metrics *m);
/* The plan (digest, epoch) the stage was made for. */
void shoal_dist_stage_plan(const shoal_dist_stage *s, uint8_t digest[SHOAL_DIGEST_BYTES],
                           uint64_t *epoch);

/* ---- the session owner ---------------------------------------------------- */

typedef struct shoal_dist_owner shoal_dist_owner; /* opaque */

typedef struct shoal_dist_owner_config {
	uint8_t self[SHOAL_PEER_ID_LEN];
	uint8_t first[SHOAL_PEER_ID_LEN]; /* stage 0's peer */
	uint8_t digest[SHOAL_DIGEST_BYTES];
	uint64_t epoch;
	uint32_t max_sessions;
	uint32_t max_rows; /* prompt rows per TOKEN frame: <= stage 0's max_rows */
	shoal_dist_link_fn link;
	void *link_ctx;
	int timeout_ms; /* bound on one send */
	/* Send prefix hashes with OPEN and CLOSE (dist.h "The prefix cache"):
	 * a session starts after the blocks every stage holds. */
	bool prefix_cache;
	/* Positions per session at the stages (0: unknown): drafts never
	 * reach past it. */
	uint32_t n_ctx;
} shoal_dist_owner_config;

/* One generated token, handed to the callback (pointers borrowed). */
typedef struct shoal_dist_token {
	uint64_t sid;
	uint32_t step; /* 0 for the first generated token */
	int32_t id;
	float logprob;
	uint32_t n_top;         /* = the request's logprobs K */
	const int32_t *top_ids; /* (n_top) best first */
	const float *top_lps;   /* (n_top) */
	uint32_t cached;        /* prompt positions the stages reused (prefix cache) */
} shoal_dist_token;

/* Return nonzero to stop the session after this token (e.g. end of
 * generation); the token itself is never fed back then. */
typedef int (*shoal_dist_token_fn)(void *ctx, const shoal_dist_token *t);

typedef struct shoal_dist_request {
	const int32_t *prompt; /* (n_prompt) ids, copied */
	uint32_t n_prompt;     /* >= 1 */
	uint32_t max_tokens;   /* >= 1 */
	uint32_t logprobs;     /* K: 0..SHOAL_DIST_MAX_LOGPROBS */
	bool no_logprob;       /* with K = 0: skip the sampled id's logprob (a vocab-wide
	                          log-sum-exp per token); its logprob reads 0 */
	/* A replay: the last first_step ids of prompt are tokens this request
	 * generated before (steps 0..first_step-1); its next token is step
	 * first_step. 0 for a new request. */
	uint32_t first_step;
	shoal_sampler_params sampler;
	/* Stop at its end-of-generation ids (the token is not handed to
	 * on_token), as a local run; NULL: never. Borrowed for the session. */
	const shoal_tokenizer *eog;
	shoal_dist_token_fn on_token;
	void *ctx;
	/* Speculation ("Speculation" above): a drafter (ops NULL: none) that
	 * the session owns from the start (freed when it ends, also when the
	 * start fails), and the most ids drafted per step (1..
	 * SHOAL_DIST_DRAFT_MAX; 0: SHOAL_DIST_DRAFT_DEFAULT). The session
	 * adapts its draft length to the recent acceptance and stops drafting
	 * for a while when drafts stop paying. Tokens are those of a run
	 * without a drafter. */
	shoal_drafter drafter;
	uint32_t draft_max;
} shoal_dist_request;
/* Drafted ids per step at most when a request does not say. */
#define SHOAL_DIST_DRAFT_DEFAULT SHOAL_DRAFT_DEFAULT

shoal_err shoal_dist_owner_new(const shoal_dist_owner_config *cfg, shoal_dist_owner **out,
                               char *why, size_t why_len);
void shoal_dist_owner_free(shoal_dist_owner *o); /* NULL is a no-op */

/* Start a session: OPEN, then the prompt in frames of max_rows. *sid out.
 * BUSY when max_sessions are live; UNSUPPORTED for a repetition penalty
 * over more than SHOAL_DIST_TAIL_MAX tokens. */
shoal_err shoal_dist_owner_start(shoal_dist_owner *o, const shoal_dist_request *req, uint64_t *sid,
                                 char *why, size_t why_len);

/* Handle one frame from a stage (a result or an ERROR control). Results
 * for other positions (duplicates) are dropped and counted. */
shoal_err shoal_dist_owner_handle(shoal_dist_owner *o, shoal_xfer_link *from,
                                  const shoal_xfer_frame *f, char *why, size_t why_len);

/* Poll links[n] up to timeout_ms and handle what arrived. */
shoal_err shoal_dist_owner_poll(shoal_dist_owner *o, shoal_xfer_link *const *links, uint32_t n,
                                int timeout_ms, char *why, size_t why_len);

/* Whether session sid is finished; *result is OK (max_tokens or stopped by
 * the callback) or the error that ended it, with the reason in why.
 * Returns false while running. A finished session's slot is freed by this
 * call (a second call says NOTFOUND). */
bool shoal_dist_owner_done(shoal_dist_owner *o, uint64_t sid, shoal_err *result, char *why,
                           size_t why_len);

/* End session sid now, whatever its state (its client went away, or it
 * is replayed elsewhere): CLOSE to the stages, the slot freed. Unknown
 * sid: a no-op. */
void shoal_dist_owner_cancel(shoal_dist_owner *o, uint64_t sid);

/* Blocking convenience: start, poll links[n] until done or timeout_ms of
 * silence, return the session's result. */
shoal_err shoal_dist_owner_generate(shoal_dist_owner *o, const shoal_dist_request *req,
                                    shoal_xfer_link *const *links, uint32_t n, int timeout_ms,
                                    char *why, size_t why_len);

typedef struct shoal_dist_owner_metrics {
	uint64_t tokens;       /* results accepted */
	uint64_t token_frames; /* TOKEN frames sent to stage 0 (prefill + decode) */
	uint64_t dropped;      /* frames dropped: duplicates, strays, malformed */
	uint64_t last_step_ns; /* send of a token to receipt of the next, plus its
	                          step's drafting (a draft model runs before the send) */
	uint64_t step_ns;      /* sum over decode steps */
	uint64_t steps;
	/* speculation */
	uint64_t drafted;     /* ids proposed by drafters and sent */
	uint64_t accepted;    /* of those, kept (each a token without a step) */
	uint64_t spec_steps;  /* decoding steps that carried drafts */
	uint64_t spec_pauses; /* times a session stopped drafting: drafts did not pay */
} shoal_dist_owner_metrics;

void shoal_dist_owner_metrics_get(const shoal_dist_owner *o, shoal_dist_owner_metrics *m);

#endif
