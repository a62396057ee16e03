/*
 * runtime/engine/draft_model.c: the draft-model drafter (see draft_model.h).
 *
 * Part: runtime/ (engine). Divisions: the vocabulary check, the draft model
 * and its drafters.
 */
#include "runtime/engine/draft_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

/* ---- the vocabulary check ------------------------------------------------------ */

/* s (n bytes) for a message: at most 24 bytes, printable. */
static const char *vocab_show(const char *s, size_t n, char out[32])
{
	size_t k = n < 24 ? n : 24;
	for (size_t i = 0; i < k; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	out[k] = 0;
	return out;
}

shoal_err shoal_draft_vocab_check(const shoal_model *target, const shoal_model *draft, char *why,
                                  size_t why_len)
{
	static const char k_tokens[] = "tokenizer.ggml.tokens", k_model[] = "tokenizer.ggml.model";
	const shoal_gguf *gt = target->gguf, *gd = draft->gguf;
	if (target->hp.n_vocab != draft->hp.n_vocab)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "the draft model's vocabulary has %u tokens, the target's %u: a "
		                 "draft must share the target's vocabulary",
		                 draft->hp.n_vocab, target->hp.n_vocab);
	const char *a, *b;
	size_t an, bn;
	char sa[32], sb[32];
	bool ha = shoal_gguf_get_str(gt, k_model, &a, &an);
	bool hb = shoal_gguf_get_str(gd, k_model, &b, &bn);
	if (ha && hb && (an != bn || memcmp(a, b, an)))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "the draft model's tokenizer is '%s', the target's '%s'",
		                 vocab_show(b, bn, sb), vocab_show(a, an, sa));
	shoal_gguf_type et, ed;
	uint64_t nt, nd;
	const void *dt, *dd;
	if (!shoal_gguf_get_arr(gt, k_tokens, &et, &nt, &dt) ||
	    !shoal_gguf_get_arr(gd, k_tokens, &ed, &nd, &dd))
		return SHOAL_OK; /* a file without a token list: the sizes agree */
	if (nt != nd)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "the draft model lists %llu tokens, the target %llu",
		                 (unsigned long long)nd, (unsigned long long)nt);
	for (uint64_t i = 0; i < nt; i++) {
		if (!shoal_gguf_arr_str(gt, k_tokens, i, &a, &an) ||
		    !shoal_gguf_arr_str(gd, k_tokens, i, &b, &bn))
			return shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                 "token %llu of a vocabulary is not a string",
			                 (unsigned long long)i);
		if (an != bn || memcmp(a, b, an))
			return shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                 "the vocabularies differ at token %llu: '%s' in the "
			                 "draft model, '%s' in the target",
			                 (unsigned long long)i, vocab_show(b, bn, sb),
			                 vocab_show(a, an, sa));
	}
	return SHOAL_OK;
}

/* ---- the draft model and its drafters --------------------------------------------- */

struct shoal_draft_model {
	shoal_model *m;
	shoal_engine *e;
	uint32_t n_ctx, max_rows, n_vocab, max_sessions;
};

typedef struct dm_drafter {
	shoal_draft_model *dm;
	shoal_engine *e; /* dm's */
	uint32_t slot, n_ctx, max_rows, n_vocab;
	int32_t *ids;         /* (n_ctx) the ids whose KV the session holds */
	uint32_t n_have;      /* how many */
	float *logits;        /* (n_vocab) */
	uint32_t *pos, *sess; /* (max_rows) */
	uint8_t *want;        /* (max_rows) */
} dm_drafter;

static int32_t dm_argmax(const float *x, uint32_t n)
{
	uint32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return (int32_t)b;
}

/* Run ids[from, to) at their positions, the last row's logits into
 * d->logits. */
static shoal_err dm_run(dm_drafter *d, uint32_t from, uint32_t to)
{
	char why[SHOAL_WHY_LEN];
	for (uint32_t p = from; p < to;) {
		uint32_t c = to - p < d->max_rows ? to - p : d->max_rows;
		for (uint32_t r = 0; r < c; r++) {
			d->pos[r] = p + r;
			d->sess[r] = d->slot;
			d->want[r] = p + r == to - 1;
		}
		shoal_engine_batch b = {.n_rows = c,
		                        .tokens = d->ids + p,
		                        .session = d->sess,
		                        .pos = d->pos,
		                        .want_logits = d->want,
		                        .logits = d->logits};
		shoal_err err = shoal_engine_run(d->e, &b, why, sizeof why);
		uint32_t len = shoal_engine_session_len(d->e, d->slot);
		d->n_have = len < d->n_have ? len : d->n_have;
		if (err)
			return err;
		p += c;
		d->n_have = p;
	}
	return SHOAL_OK;
}

/* The session's KV brought to hist[0..n) (0 < n <= n_ctx), the last id's
 * logits in d->logits; false: an id out of the vocabulary, or the run
 * failed. */
static bool dm_sync(dm_drafter *d, const int32_t *hist, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (hist[i] < 0 || (uint32_t)hist[i] >= d->n_vocab)
			return false;
	/* keep the longest prefix held; the last id is run again for its
	 * logits when everything is held */
	uint32_t keep = 0;
	while (keep < d->n_have && keep < n && d->ids[keep] == hist[keep])
		keep++;
	if (keep == n)
		keep--;
	/* a sliding layer's ring may no longer hold the window before keep:
	 * then the session is run again from 0 */
	keep = shoal_engine_session_reusable(d->e, d->slot, keep);
	memcpy(d->ids + keep, hist + keep, (n - keep) * sizeof *hist);
	d->n_have = keep;
	return dm_run(d, keep, (uint32_t)n) == SHOAL_OK;
}

/* The prompt's KV while the target computes it: 170 prompt ids cost the
 * Q4_0 copy of the bundled dense model ~70 ms, a third of a 256-token
 * reply's decode, when its first proposal took them in. */
static void dm_prepare(void *self, const int32_t *hist, size_t n)
{
	dm_drafter *d = self;
	if (n && n <= d->n_ctx)
		(void)dm_sync(d, hist, n); /* a failure: the first proposal tries again */
}

static size_t dm_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	dm_drafter *d = self;
	if (n == 0 || k == 0 || n > d->n_ctx)
		return 0;
	if (k > d->n_ctx - n + 1) /* drafts 0..k-2 are run at n.. */
		k = d->n_ctx - n + 1;
	if (!dm_sync(d, hist, n))
		return 0;
	size_t got = 0;
	for (;;) {
		out[got] = dm_argmax(d->logits, d->n_vocab);
		if (++got == k)
			break;
		uint32_t p = (uint32_t)(n + got - 1);
		d->ids[p] = out[got - 1];
		if (dm_run(d, p, p + 1))
			break;
	}
	return got;
}

/* Nothing to do: the next propose keeps what matches the history. */
static void dm_feedback(void *self, size_t proposed, size_t accepted)
{
	(void)self;
	(void)proposed;
	(void)accepted;
}

static void dm_free(void *self)
{
	dm_drafter *d = self;
	if (!d)
		return;
	shoal_engine_session_close(d->e, d->slot);
	free(d->ids);
	free(d->logits);
	free(d->pos);
	free(d->sess);
	free(d->want);
	free(d);
}

static const shoal_drafter_ops dm_ops = {.name = "draft",
                                         .propose = dm_propose,
                                         .feedback = dm_feedback,
                                         .prepare = dm_prepare,
                                         .free = dm_free};

shoal_err shoal_draft_model_open(const char *path, const shoal_model *target,
                                 const shoal_engine_config *cfg, shoal_draft_model **out, char *why,
                                 size_t why_len)
{
	SHOAL_ASSERT(path && target && cfg && out);
	*out = NULL;
	if (!cfg->backend)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "no backend given");
	shoal_draft_model *dm = calloc(1, sizeof *dm);
	if (!dm)
		return SHOAL_ERR_NOMEM;
	char w2[SHOAL_WHY_LEN] = "";
	shoal_err err = shoal_model_open(path, &dm->m, w2, sizeof w2);
	if (!err)
		err = shoal_draft_vocab_check(target, dm->m, w2, sizeof w2);
	if (!err) {
		shoal_engine_config c = shoal_engine_config_default(dm->m);
		c.backend = cfg->backend;
		c.n_threads = cfg->n_threads ? cfg->n_threads : 1;
		c.n_ctx = cfg->n_ctx;
		c.max_rows = cfg->max_rows ? cfg->max_rows : 64;
		c.max_sessions = cfg->max_sessions ? cfg->max_sessions : 1;
		c.kv_type = cfg->kv_type;
		err = shoal_engine_new(dm->m, &c, &dm->e, w2, sizeof w2);
		dm->max_rows = c.max_rows;
		dm->max_sessions = c.max_sessions;
	}
	if (err) {
		shoal_why(why, why_len, err, "draft model %s: %s", path, w2);
		shoal_draft_model_free(dm);
		return err;
	}
	dm->n_ctx = shoal_engine_n_ctx(dm->e);
	dm->n_vocab = dm->m->hp.n_vocab;
	*out = dm;
	return SHOAL_OK;
}

void shoal_draft_model_free(shoal_draft_model *dm)
{
	if (!dm)
		return;
	shoal_engine_free(dm->e);
	shoal_model_free(dm->m);
	free(dm);
}

shoal_err shoal_draft_model_drafter(shoal_draft_model *dm, shoal_drafter *out, char *why,
                                    size_t why_len)
{
	SHOAL_ASSERT(dm && out);
	out->ops = NULL;
	out->self = NULL;
	dm_drafter *d = calloc(1, sizeof *d);
	if (!d)
		return SHOAL_ERR_NOMEM;
	d->dm = dm;
	d->e = dm->e;
	d->n_ctx = dm->n_ctx;
	d->max_rows = dm->max_rows;
	d->n_vocab = dm->n_vocab;
	d->ids = malloc((size_t)d->n_ctx * sizeof *d->ids);
	d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
	d->pos = malloc((size_t)d->max_rows * sizeof *d->pos);
	d->sess = malloc((size_t)d->max_rows * sizeof *d->sess);
	d->want = malloc(d->max_rows);
	if (!d->ids || !d->logits || !d->pos || !d->sess || !d->want ||
	    shoal_engine_session_open(dm->e, &d->slot)) {
		bool busy = d->ids && d->logits && d->pos && d->sess && d->want;
		d->slot = 0;
		free(d->ids);
		free(d->logits);
		free(d->pos);
		free(d->sess);
		free(d->want);
		free(d);
		return busy ? shoal_why(why, why_len, SHOAL_ERR_BUSY,
		                        "the draft model's %u sessions are all drafting",
		                        dm->max_sessions)
		            : SHOAL_ERR_NOMEM;
	}
	out->ops = &dm_ops;
	out->self = d;
	return SHOAL_OK;
}
