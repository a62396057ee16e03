/*
 * runtime/engine/mtp.c: DeepSeek's MTP layer and its drafter (see mtp.h).
 *
 * Part: runtime/ (engine). Divisions: the layer (a one-layer view of the
 * model for an engine, the input projection on a backend instance of its
 * own, the run), the drafter.
 *
 * What the layer's definition rests on:
 *   - DeepSeek-V3 Technical Report (arXiv 2412.19437), section 2.2: module k
 *     combines RMSNorm(h_i) and RMSNorm(Emb(t_{i+k})) by a linear
 *     projection M_k of their concatenation, runs one Transformer block,
 *     and a head shared with the main model gives token i + k + 1; the
 *     embedding layer is shared too.
 *   - vLLM, vllm/model_executor/models/deepseek_mtp.py
 *     (DeepSeekMultiTokenPredictorLayer.forward): the concatenation in the
 *     released weights' order is [enorm(embedding) | hnorm(hidden)] (the
 *     paper writes them the other way round), the embedding is zeroed at
 *     position 0, the block is an ordinary decoder layer at the target's
 *     positions, and the logits are shared_head.head(shared_head.norm(x)).
 *     SGLang's deepseek_nextn.py concatenates in the same order. The hidden
 *     state vLLM hands over is its DeepseekV2Model's output, which has been
 *     through the final norm: here that norm (output_norm) is applied to
 *     the caller's pre-norm rows before hnorm.
 *   - llama.cpp's tensor names for the layer (blk.N.nextn.eh_proj, enorm,
 *     hnorm, shared_head_norm, shared_head_head, embed_tokens; the last two
 *     may be left out, when the model's own are meant).
 */
#include "runtime/engine/mtp.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

/* ---- the layer ------------------------------------------------------------ */

struct shoal_mtp {
	shoal_model view; /* the nextn block as a one-layer model (m's tensors) */
	const shoal_model *m;
	shoal_engine *e;
	uint32_t E, max_rows;
	/* the input projection, on an instance of its own (its widest input
	 * is 2 n_embd, which the engine's instance need not take) */
	const shoal_backend_ops *ops;
	shoal_backend *bk;
	shoal_backend_buf *buf;
	float *d_cat;                          /* device (max_rows, 2 E) [enorm(e) | hnorm(.)] */
	float *d_e, *d_h;                      /* device (max_rows, E) */
	const float *out_norm, *enorm, *hnorm; /* device (E) */
	float *vec[3];                         /* their host copies */
	const void *embd;                      /* the embedding table (device) */
	shoal_backend_mat eh;                  /* {2 E, E} */
	float *proj;                           /* host (max_rows, E) the block's input */
	float *zero;                           /* host (E) */
	int32_t *ids;                          /* host (max_rows) next, unknown ones as 0 */
};

/* An F32 copy of norm vector t (n_embd), kept in t->vec[i]: *dev. */
static shoal_err mtp_vec(shoal_mtp *t, int i, const shoal_gguf_tensor *src, const float **dev,
                         char *why, size_t why_len)
{
	if (!t->ops->supports(SHOAL_BACKEND_OP_TO_F32, src->type))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "tensor %s: type %s",
		                 src->name, shoal_dtype_name(src->type));
	if (!(t->vec[i] = malloc((size_t)t->E * sizeof(float))))
		return SHOAL_ERR_NOMEM;
	t->ops->to_f32(src->type, src->data, t->vec[i], t->E);
	const void *d = NULL;
	shoal_err err = t->ops->weights(t->bk, t->vec[i], (size_t)t->E * sizeof(float), &d);
	*dev = d;
	if (err)
		return shoal_why(why, why_len, err, "backend %s: %s does not fit", t->ops->name,
		                 src->name);
	return SHOAL_OK;
}

/* The projection's instance, its weights and scratch. */
static shoal_err mtp_proj_init(shoal_mtp *t, const shoal_engine_config *cfg, char *why,
                               size_t why_len)
{
	const shoal_nextn *x = t->m->nextn;
	const shoal_gguf_tensor *eh = x->eh_proj, *em = x->embd;
	const shoal_backend_ops *ops = t->ops;
	uint32_t E = t->E, R = t->max_rows;
	size_t rb = shoal_dtype_row_bytes(eh->type, 2 * (uint64_t)E);
	if (!ops->supports(SHOAL_BACKEND_OP_MATMUL, eh->type) || rb == SIZE_MAX ||
	    (uint64_t)rb * E != eh->nbytes)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "tensor %s: type %s, which backend %s does not compute with",
		                 eh->name, shoal_dtype_name(eh->type), ops->name);
	if (!ops->supports(SHOAL_BACKEND_OP_EMBED, em->type))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "tensor %s: type %s",
		                 em->name, shoal_dtype_name(em->type));
	const shoal_gguf_tensor *need[] = {eh, em, t->m->output_norm, x->enorm, x->hnorm};
	for (size_t i = 0; cfg->tensor_held && i < sizeof need / sizeof need[0]; i++)
		if (!cfg->tensor_held(cfg->tensor_held_ctx, need[i]))
			return shoal_why(
			    why, why_len, SHOAL_ERR_NOTFOUND,
			    "tensor %s is not held here (the weights cache has not fetched it)",
			    need[i]->name);
	shoal_backend_limits lim = {.n_threads = cfg->n_threads ? cfg->n_threads : 1,
	                            .max_ctx = 1,
	                            .max_rows = R,
	                            .max_n = 2 * E,
	                            .max_group = 1,
	                            .weight_bytes = eh->nbytes};
	shoal_err err = ops->create(&lim, &t->bk);
	if (err)
		return shoal_why(why, why_len, err, "backend %s: %s", ops->name,
		                 shoal_strerror(err));
	if ((err = ops->buf_alloc(t->bk, (size_t)R * 4 * E * sizeof(float), &t->buf)))
		return shoal_why(why, why_len, err, "backend %s: no memory for the MTP rows",
		                 ops->name);
	t->d_cat = ops->buf_addr(t->buf);
	t->d_e = t->d_cat + (size_t)R * 2 * E;
	t->d_h = t->d_e + (size_t)R * E;
	t->eh = (shoal_backend_mat){
	    .type = eh->type, .n_in = 2 * (int64_t)E, .n_out = E, .row_bytes = rb};
	if ((err = ops->weights(t->bk, eh->data, eh->nbytes, &t->eh.data)) ||
	    (err = ops->weights(t->bk, em->data, em->nbytes, &t->embd)))
		return shoal_why(why, why_len, err, "backend %s: the MTP weights do not fit",
		                 ops->name);
	if ((err = mtp_vec(t, 0, t->m->output_norm, &t->out_norm, why, why_len)) ||
	    (err = mtp_vec(t, 1, x->enorm, &t->enorm, why, why_len)) ||
	    (err = mtp_vec(t, 2, x->hnorm, &t->hnorm, why, why_len)))
		return err;
	t->proj = malloc((size_t)R * E * sizeof(float));
	t->zero = calloc(E, sizeof(float));
	t->ids = malloc((size_t)R * sizeof(int32_t));
	return t->proj && t->zero && t->ids ? SHOAL_OK : SHOAL_ERR_NOMEM;
}

shoal_err shoal_mtp_new(const shoal_model *m, const shoal_engine_config *cfg, shoal_mtp **out,
                        char *why, size_t why_len)
{
	SHOAL_ASSERT(m && cfg && out);
	*out = NULL;
	if (!m->nextn)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
		                 "the model has no MTP layer (no blk.%u.nextn.* tensors; %u "
		                 "declared)",
		                 m->hp.n_layer, m->hp.n_nextn);
	if (!cfg->backend)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "no backend given");
	shoal_mtp *t = calloc(1, sizeof *t);
	if (!t)
		return SHOAL_ERR_NOMEM;
	t->m = m;
	t->E = m->hp.n_embd;
	t->max_rows = cfg->max_rows ? cfg->max_rows : 1;
	t->ops = cfg->backend;
	/* the view: the block as layer 0 of a one-layer model, with the
	 * layer's own embedding, head norm and head */
	t->view = *m;
	t->view.hp.n_layer = 1;
	t->view.hp.n_nextn = 0;
	t->view.hp.n_layer_dense_lead = m->nextn->layer.ffn_gate_inp ? 0 : 1;
	t->view.layers = (shoal_layer *)&m->nextn->layer; /* the engine only reads it */
	t->view.tok_embd = m->nextn->embd;
	t->view.output = m->nextn->head;
	t->view.output_norm = m->nextn->head_norm;
	t->view.hp.tied_head = m->nextn->head == m->nextn->embd;
	t->view.nextn = NULL;

	shoal_engine_config c = shoal_engine_config_default(&t->view);
	c.backend = cfg->backend;
	c.n_threads = cfg->n_threads ? cfg->n_threads : 1;
	c.n_ctx = cfg->n_ctx;
	c.max_sessions = cfg->max_sessions ? cfg->max_sessions : 1;
	c.max_rows = t->max_rows;
	c.kv_type = cfg->kv_type;
	c.tensor_held = cfg->tensor_held;
	c.tensor_held_ctx = cfg->tensor_held_ctx;
	c.has_embd = false;
	c.has_head = true;
	shoal_err err = shoal_engine_new(&t->view, &c, &t->e, why, why_len);
	if (!err)
		err = mtp_proj_init(t, cfg, why, why_len);
	if (err) {
		shoal_mtp_free(t);
		return err;
	}
	*out = t;
	return SHOAL_OK;
}

void shoal_mtp_free(shoal_mtp *t)
{
	if (!t)
		return;
	shoal_engine_free(t->e);
	if (t->bk) {
		t->ops->buf_free(t->bk, t->buf);
		t->ops->destroy(t->bk);
	}
	for (int i = 0; i < 3; i++)
		free(t->vec[i]);
	free(t->proj);
	free(t->zero);
	free(t->ids);
	free(t);
}

shoal_engine *shoal_mtp_engine(shoal_mtp *t)
{
	return t->e;
}

/* The next ids of n rows: each -1 (not known) or in the vocabulary. */
static shoal_err mtp_next_check(const shoal_mtp *t, uint32_t n, const int32_t *next, char *why,
                                size_t why_len)
{
	for (uint32_t r = 0; r < n; r++)
		if (next[r] < -1 || next[r] >= (int64_t)t->m->hp.n_vocab)
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "row %u: token %d outside the vocabulary of %u", r,
			                 next[r], t->m->hp.n_vocab);
	return SHOAL_OK;
}

shoal_err shoal_mtp_run(shoal_mtp *t, const shoal_mtp_batch *b, char *why, size_t why_len)
{
	SHOAL_ASSERT(t && b);
	const shoal_backend_ops *ops = t->ops;
	const shoal_hparams *hp = &t->m->hp;
	uint32_t n = b->n_rows, E = t->E;
	if (n < 1 || n > t->max_rows)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%u rows (the MTP layer takes 1..%u)", n, t->max_rows);
	if (!b->hidden || !b->next || !b->pos)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "MTP rows without hidden states, next ids or positions");
	shoal_err ce = mtp_next_check(t, n, b->next, why, why_len);
	if (ce)
		return ce;
	for (uint32_t r = 0; r < n; r++)
		t->ids[r] = b->next[r] < 0 ? 0 : b->next[r];
	const shoal_gguf_tensor *em = t->m->nextn->embd;
	size_t ld2 = 2 * (size_t)E, ld = E;
	ops->write(t->bk, t->d_h, b->hidden, (size_t)n * E * sizeof(float));
	ops->embed(t->bk, em->type, t->embd, shoal_dtype_row_bytes(em->type, E), E, t->ids, n,
	           t->d_e);
	for (uint32_t r = 0; r < n; r++)
		if (b->pos[r] == 0 || b->next[r] < 0)
			ops->write(t->bk, t->d_e + (size_t)r * E, t->zero,
			           (size_t)E * sizeof(float));
	ops->rms_norm(t->bk, t->d_e, E, t->enorm, E, n, hp->rms_eps, t->d_cat, ld2);
	ops->rms_norm(t->bk, t->d_h, E, t->out_norm, E, n, hp->rms_eps, t->d_h, E);
	ops->rms_norm(t->bk, t->d_h, E, t->hnorm, E, n, hp->rms_eps, t->d_cat + E, ld2);
	float *y = t->d_h;
	ops->matmul(t->bk, 1, &t->eh, t->d_cat, ld2, n, &y, &ld);
	ops->read(t->bk, t->d_h, t->proj, (size_t)n * E * sizeof(float));
	shoal_engine_batch eb = {.n_rows = n,
	                         .hidden_in = t->proj,
	                         .session = b->session,
	                         .pos = b->pos,
	                         .want_logits = b->want_logits,
	                         .logits = b->logits};
	return shoal_engine_run(t->e, &eb, why, why_len);
}

/* ---- the drafter ------------------------------------------------------------ */

typedef struct mtp_drafter {
	shoal_mtp *t;
	uint32_t slot;
	float *logits;   /* (n_vocab) */
	uint32_t *pos;   /* (max_rows) */
	uint32_t *sess;  /* (max_rows) */
	uint8_t *want;   /* (max_rows) */
	size_t guess_at; /* the history length the guess is for (0: none) */
	int32_t guess;
	int32_t last_next; /* the id before it */
	uint32_t n_pushed; /* positions [0, n_pushed) in the MTP cache */
	/* deferred rows (shoal_mtp_drafter_defer): positions [n_pushed,
	 * n_pushed + n_pend), run when pend_cap of them wait or at the next
	 * push without deferral; pend_h/pend_next made at the first */
	bool defer;
	uint32_t n_pend, pend_cap;
	float *pend_h;      /* (pend_cap, E) */
	int32_t *pend_next; /* (pend_cap) */
} mtp_drafter;

/* Rows deferred at most before they run: one run of 64 rows reads the
 * layer's weights once where 64 pushes of a row read them 64 times, and a
 * session's buffer stays small (64 x 7168 floats: 1.8 MiB for DeepSeek-V3). */
#define MTP_PEND_MAX 64u

static size_t mtp_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	mtp_drafter *d = self;
	if (k < 1 || d->guess_at == 0 || n != d->guess_at || hist[n - 1] != d->last_next)
		return 0;
	out[0] = d->guess;
	return 1;
}

static void mtp_feedback(void *self, size_t proposed, size_t accepted)
{
	(void)self;
	(void)proposed;
	(void)accepted;
}

static void mtp_drafter_free(void *self)
{
	mtp_drafter *d = self;
	if (!d)
		return;
	shoal_engine_session_close(d->t->e, d->slot);
	free(d->logits);
	free(d->pos);
	free(d->sess);
	free(d->want);
	free(d->pend_h);
	free(d->pend_next);
	free(d);
}

static const shoal_drafter_ops mtp_drafter_ops = {
    .name = "mtp", .propose = mtp_propose, .feedback = mtp_feedback, .free = mtp_drafter_free};

shoal_err shoal_mtp_drafter_new(shoal_mtp *t, shoal_drafter *out, char *why, size_t why_len)
{
	SHOAL_ASSERT(t && out);
	out->ops = NULL;
	out->self = NULL;
	mtp_drafter *d = calloc(1, sizeof *d);
	if (!d)
		return SHOAL_ERR_NOMEM;
	d->t = t;
	d->logits = malloc((size_t)t->m->hp.n_vocab * sizeof(float));
	d->pos = malloc((size_t)t->max_rows * sizeof(uint32_t));
	d->sess = malloc((size_t)t->max_rows * sizeof(uint32_t));
	d->want = calloc(t->max_rows, 1);
	if (!d->logits || !d->pos || !d->sess || !d->want) {
		free(d->logits);
		free(d->pos);
		free(d->sess);
		free(d->want);
		free(d);
		return SHOAL_ERR_NOMEM;
	}
	if (shoal_engine_session_open(t->e, &d->slot) != SHOAL_OK) {
		free(d->logits);
		free(d->pos);
		free(d->sess);
		free(d->want);
		free(d);
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "no free MTP session");
	}
	d->pend_cap = t->max_rows < MTP_PEND_MAX ? t->max_rows : MTP_PEND_MAX;
	out->ops = &mtp_drafter_ops;
	out->self = d;
	return SHOAL_OK;
}

/* Rows [0, n_rows) at positions pos0.. into the MTP cache, in runs of
 * max_rows; the last row's logits into d->logits when `guess`. */
static shoal_err mtp_rows(mtp_drafter *d, uint32_t pos0, uint32_t n_rows, const float *hidden,
                          const int32_t *next, bool guess, char *why, size_t why_len)
{
	shoal_mtp *t = d->t;
	d->n_pushed = pos0; /* what follows is overwritten */
	for (uint32_t r0 = 0; r0 < n_rows; r0 += t->max_rows) {
		uint32_t c = n_rows - r0 < t->max_rows ? n_rows - r0 : t->max_rows;
		bool last = guess && r0 + c == n_rows;
		for (uint32_t r = 0; r < c; r++) {
			d->pos[r] = pos0 + r0 + r;
			d->sess[r] = d->slot;
			d->want[r] = last && r == c - 1;
		}
		shoal_mtp_batch b = {.n_rows = c,
		                     .hidden = hidden + (size_t)r0 * t->E,
		                     .next = next + r0,
		                     .session = d->sess,
		                     .pos = d->pos,
		                     .want_logits = d->want,
		                     .logits = d->logits};
		shoal_err err = shoal_mtp_run(t, &b, why, why_len);
		if (err)
			return err;
		d->n_pushed = pos0 + r0 + c;
	}
	return SHOAL_OK;
}

/* The deferred rows run (no guess): the cache then holds them. */
static shoal_err mtp_flush(mtp_drafter *d, char *why, size_t why_len)
{
	uint32_t n = d->n_pend;
	d->n_pend = 0;
	return n ? mtp_rows(d, d->n_pushed, n, d->pend_h, d->pend_next, false, why, why_len)
	         : SHOAL_OK;
}

void shoal_mtp_drafter_defer(shoal_drafter *dr, bool on)
{
	SHOAL_ASSERT(dr && dr->ops == &mtp_drafter_ops);
	((mtp_drafter *)dr->self)->defer = on;
}

shoal_err shoal_mtp_drafter_push(shoal_drafter *dr, uint32_t pos0, uint32_t n_rows,
                                 const float *hidden, const int32_t *next, char *why,
                                 size_t why_len)
{
	SHOAL_ASSERT(dr && dr->ops == &mtp_drafter_ops);
	mtp_drafter *d = dr->self;
	shoal_mtp *t = d->t;
	uint32_t known = d->n_pushed + d->n_pend;
	if (pos0 > known)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "MTP rows from %u: a gap after the %u positions the layer holds",
		                 pos0, known);
	/* checked here, since deferred rows run later (nothing changed) */
	shoal_err err = mtp_next_check(t, n_rows, next, why, why_len);
	if (err)
		return err;
	if (d->defer && !d->pend_h) {
		d->pend_h = malloc((size_t)d->pend_cap * t->E * sizeof(float));
		d->pend_next = malloc((size_t)d->pend_cap * sizeof(int32_t));
		if (!d->pend_h || !d->pend_next) {
			free(d->pend_h);
			free(d->pend_next);
			d->pend_h = NULL;
			d->pend_next = NULL;
			return SHOAL_ERR_NOMEM;
		}
	}
	d->guess_at = 0;
	/* what follows pos0 is overwritten: deferred rows after it go */
	if (pos0 < d->n_pushed) {
		d->n_pend = 0;
		d->n_pushed = pos0;
	} else {
		d->n_pend = pos0 - d->n_pushed;
	}
	if (d->defer) {
		for (uint32_t r = 0; r < n_rows; r++) {
			if (d->n_pend == d->pend_cap && (err = mtp_flush(d, why, why_len)))
				return err;
			memcpy(d->pend_h + (size_t)d->n_pend * t->E, hidden + (size_t)r * t->E,
			       (size_t)t->E * sizeof(float));
			d->pend_next[d->n_pend++] = next[r];
		}
		return SHOAL_OK;
	}
	if ((err = mtp_flush(d, why, why_len)) ||
	    (err = mtp_rows(d, pos0, n_rows, hidden, next, true, why, why_len)))
		return err;
	if (n_rows == 0)
		return SHOAL_OK;
	int32_t best = 0;
	for (uint32_t v = 1; v < t->m->hp.n_vocab; v++)
		if (d->logits[v] > d->logits[best])
			best = (int32_t)v;
	d->guess = best;
	d->last_next = next[n_rows - 1];
	d->guess_at = (size_t)pos0 + n_rows + 1;
	return SHOAL_OK;
}

bool shoal_mtp_drafter_is(const shoal_drafter *d)
{
	return d && d->ops == &mtp_drafter_ops;
}

uint32_t shoal_mtp_drafter_len(const shoal_drafter *dr)
{
	SHOAL_ASSERT(dr && dr->ops == &mtp_drafter_ops);
	const mtp_drafter *d = dr->self;
	return d->n_pushed + d->n_pend;
}

int32_t shoal_mtp_drafter_guess(const shoal_drafter *dr)
{
	SHOAL_ASSERT(dr && dr->ops == &mtp_drafter_ops);
	const mtp_drafter *d = dr->self;
	return d->guess_at ? d->guess : -1;
}

/* ---- the owner's drafter: the guess a result carried ----------------------- */

typedef struct mtp_carry {
	int32_t after, guess; /* guess follows id `after`; guess -1: none */
	shoal_mtp_carry_fn fn;
	void *ctx;
} mtp_carry;

static size_t mtp_carry_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	mtp_carry *c = self;
	size_t got = 0;
	if (k >= 1 && n >= 1 && c->guess >= 0 && hist[n - 1] == c->after) {
		out[0] = c->guess;
		got = 1;
	}
	c->guess = -1; /* one proposal per guess */
	return got;
}

static void mtp_carry_free(void *self)
{
	free(self);
}

static const shoal_drafter_ops mtp_carry_ops = {
    .name = "mtp", .propose = mtp_carry_propose, .feedback = mtp_feedback, .free = mtp_carry_free};

shoal_err shoal_mtp_carry_new(shoal_drafter *out, shoal_mtp_carry_fn fn, void *ctx)
{
	mtp_carry *c = malloc(sizeof *c);
	if (!c)
		return SHOAL_ERR_NOMEM;
	*c = (mtp_carry){.after = -1, .guess = -1, .fn = fn, .ctx = ctx};
	out->ops = &mtp_carry_ops;
	out->self = c;
	return SHOAL_OK;
}

bool shoal_mtp_carry_is(const shoal_drafter *d)
{
	return d && d->ops == &mtp_carry_ops;
}

void shoal_mtp_carry_set(shoal_drafter *d, int32_t after, int32_t guess)
{
	SHOAL_ASSERT(shoal_mtp_carry_is(d));
	mtp_carry *c = d->self;
	c->after = after;
	c->guess = guess;
	if (c->fn)
		c->fn(c->ctx, after, guess);
}
