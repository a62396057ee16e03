/*
 * runtime/engine/sampler.c: picking the next token from logits (see sampler.h).
 *
 * Part: runtime/ (engine). The pipeline for temp > 0 is, in order:
 * repetition penalty, temperature, top-k (partial selection, no full sort),
 * softmax, top-p, min-p, renormalise, draw with u = hash(seed, step).
 * Candidate order is total and deterministic: higher logit first, ties by
 * lower id. Non-finite logits: NaN counts as -inf (never picked while any
 * other token is possible); +inf counts as FLT_MAX. If no token is possible
 * (every logit -inf or NaN), token 0 is returned.
 *
 * Divisions: the random draw; candidate selection; the sampler; logprobs.
 */
#include "runtime/engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct shoal_sampler {
	shoal_sampler_params p;
	uint32_t n_vocab;
	float *val;      /* (n_vocab) working logits, indexed by token id */
	int32_t *cand;   /* (n_vocab) candidate ids still in the running */
	int32_t *heap;   /* (n_vocab) partial selection, then sorted best first */
	double *w;       /* (n_vocab) weights exp(l - l_max), by token id */
	uint8_t *seen;   /* (n_vocab) penalty marks, all zero between calls */
	uint16_t *count; /* (n_vocab) occurrences in the window, all zero between calls */
	float *masked;   /* (n_vocab) logits under a filter's mask */
};

/* ---------------------------------------------------------------- the draw */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A uniform double in [0, 1) that depends on (seed, step) only: two rounds
 * of SplitMix64 so that neighbouring seeds and steps are uncorrelated; the
 * top 53 bits fill a double's mantissa exactly (2^-53 steps). */
static double draw_uniform(uint64_t seed, uint64_t step)
{
	uint64_t h = splitmix64(splitmix64(seed) ^ step);
	return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------- selection */

static inline float key_of(const float *v, int32_t id)
{
	float x = v[id];
	if (isnan(x))
		return -INFINITY;
	if (x > FLT_MAX)
		return FLT_MAX;
	return x;
}

/* The total order: a before b when a has the higher value, ties lower id. */
static inline bool better(const float *v, int32_t a, int32_t b)
{
	float x = key_of(v, a), y = key_of(v, b);
	return x > y || (x == y && a < b);
}

/* Heap whose root is the worst element (under `better`). */
static void sift_down(const float *v, int32_t *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && better(v, h[m], h[l]))
			m = l;
		if (r < n && better(v, h[m], h[r]))
			m = r;
		if (m == i)
			return;
		int32_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* The k best of the n ids cand[] (cand NULL: ids 0..n-1), into out[k],
 * best first. O(n log k): the vocabulary is never sorted whole. k <= n. */
static void select_top(const float *v, const int32_t *cand, size_t n, size_t k, int32_t *out)
{
	if (k == 0)
		return;
	for (size_t i = 0; i < k; i++)
		out[i] = cand ? cand[i] : (int32_t)i;
	for (size_t i = k / 2; i-- > 0;)
		sift_down(v, out, k, i);
	for (size_t i = k; i < n; i++) {
		int32_t id = cand ? cand[i] : (int32_t)i;
		if (better(v, id, out[0])) {
			out[0] = id;
			sift_down(v, out, k, 0);
		}
	}
	/* Heap sort: moving the worst to the end leaves the best first. */
	for (size_t i = k - 1; i > 0; i--) {
		int32_t t = out[0];
		out[0] = out[i];
		out[i] = t;
		sift_down(v, out, i, 0);
	}
}

/* ---------------------------------------------------------- the sampler */

shoal_sampler_params shoal_sampler_defaults(void)
{
	shoal_sampler_params p = {
	    .temp = 0.8f,
	    .top_k = 40,
	    .top_p = 0.95f,
	    .min_p = 0.05f,
	    .repeat_penalty = 1.0f,
	    .repeat_last_n = 64,
	    .seed = 0,
	};
	return p;
}

void shoal_sampler_free(shoal_sampler *s)
{
	if (!s)
		return;
	free(s->val);
	free(s->cand);
	free(s->heap);
	free(s->w);
	free(s->seen);
	free(s->count);
	free(s->masked);
	free(s);
}

/* Params come from clients (HTTP, CLI): NaN or out-of-range values are
 * SHOAL_ERR_RANGE, a missing pointer or an empty vocabulary SHOAL_ERR_INVAL.
 * repeat_last_n < 0 means the whole history given to each call. */
shoal_err shoal_sampler_new(const shoal_sampler_params *p, uint32_t n_vocab, shoal_sampler **out)
{
	if (!p || !out || n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX)
		return SHOAL_ERR_INVAL;
	*out = NULL;
	if (isnan(p->temp) || p->top_k < 0 || !(p->top_p >= 0.0f && p->top_p <= 1.0f) ||
	    !(p->min_p >= 0.0f && p->min_p <= 1.0f) ||
	    !(p->repeat_penalty > 0.0f && p->repeat_penalty < INFINITY) ||
	    !(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f) ||
	    !(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f) ||
	    p->n_bias > SHOAL_SAMPLER_MAX_BIAS)
		return SHOAL_ERR_RANGE;
	for (uint32_t i = 0; i < p->n_bias; i++)
		if (!(p->bias[i] >= -100.0f && p->bias[i] <= 100.0f))
			return SHOAL_ERR_RANGE;

	shoal_sampler *s = calloc(1, sizeof *s);
	if (!s)
		return SHOAL_ERR_NOMEM;
	s->p = *p;
	s->p.grammar = NULL; /* borrowed by the caller only */
	s->p.n_grammar = 0;
	s->n_vocab = n_vocab;
	s->val = malloc((size_t)n_vocab * sizeof *s->val);
	s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
	s->heap = malloc((size_t)n_vocab * sizeof *s->heap);
	s->w = malloc((size_t)n_vocab * sizeof *s->w);
	s->seen = calloc(n_vocab, 1);
	s->count = calloc(n_vocab, sizeof *s->count);
	s->masked = malloc((size_t)n_vocab * sizeof *s->masked);
	if (!s->val || !s->cand || !s->heap || !s->w || !s->seen || !s->count || !s->masked)
		goto fail;
	*out = s;
	return SHOAL_OK;
fail:
	shoal_sampler_free(s);
	return SHOAL_ERR_NOMEM;
}

/* The argmax under `better` (the lowest id among the best keys), in two
 * passes that need no branch per element, so they vectorize: the best key,
 * from 8 partial maxima (x > m is false for NaN, whose key never wins, and
 * key_of only clamps +inf, which keeps the order), then the first id with
 * that key. At 32k tokens it took ~40 us a token as one branchy loop. */
#define GREEDY_LANES 8
static int32_t sample_greedy(const float *logits, uint32_t n32)
{
	const size_t n = n32;
	if (n == 0)
		return 0;
	float m[GREEDY_LANES];
	for (size_t k = 0; k < GREEDY_LANES; k++)
		m[k] = -INFINITY;
	size_t i = 0;
	for (; i + GREEDY_LANES <= n; i += GREEDY_LANES) {
		const float *x = logits + i;
		for (size_t k = 0; k < GREEDY_LANES; k++)
			m[k] = x[k] > m[k] ? x[k] : m[k];
	}
	for (; i < n; i++)
		m[0] = logits[i] > m[0] ? logits[i] : m[0];
	float bk = -INFINITY;
	for (size_t k = 0; k < GREEDY_LANES; k++)
		bk = m[k] > bk ? m[k] : bk;
	if (bk > FLT_MAX)
		bk = FLT_MAX;
	/* an ordinary best key is its logit's value: the first equal one */
	i = 0;
	if (bk > -INFINITY && bk < FLT_MAX)
		for (; i + GREEDY_LANES <= n; i += GREEDY_LANES) {
			const float *x = logits + i;
			int hit = 0;
			for (size_t k = 0; k < GREEDY_LANES; k++)
				hit |= x[k] == bk;
			if (hit)
				break;
		}
	for (; i < n; i++)
		if (key_of(logits, (int32_t)i) == bk)
			return (int32_t)i;
	return 0; /* not reached: some key equals the best */
}

/* Divide positive logits by the penalty, multiply negative ones, once per
 * distinct token among the last repeat_last_n of the history. Ids outside
 * the vocabulary are ignored (the history is the client's prompt too). */
static void apply_penalty(shoal_sampler *s, const int32_t *hist, size_t n_hist)
{
	float pen = s->p.repeat_penalty, pres = s->p.presence_penalty,
	      freq = s->p.frequency_penalty;
	if ((pen == 1.0f && pres == 0.0f && freq == 0.0f) || !hist || n_hist == 0 ||
	    s->p.repeat_last_n == 0)
		return;
	size_t from = 0;
	if (s->p.repeat_last_n > 0 && n_hist > (size_t)s->p.repeat_last_n)
		from = n_hist - (size_t)s->p.repeat_last_n;
	for (size_t i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t >= 0 && (uint32_t)t < s->n_vocab && s->count[t] < UINT16_MAX)
			s->count[t]++;
	}
	for (size_t i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t < 0 || (uint32_t)t >= s->n_vocab || s->seen[t])
			continue;
		s->seen[t] = 1;
		float x = s->val[t];
		if (pen != 1.0f)
			x = x > 0.0f ? x / pen : x * pen;
		/* OpenAI's: once for presence, per occurrence for frequency */
		x -= pres + freq * (float)s->count[t];
		if (x == x) /* -inf - (-2) stays -inf; nothing becomes NaN */
			s->val[t] = x;
	}
	for (size_t i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t >= 0 && (uint32_t)t < s->n_vocab)
			s->seen[t] = 0, s->count[t] = 0;
	}
}

/* logit_bias, before the penalties (ids out of the vocabulary ignored). */
static void apply_bias(shoal_sampler *s)
{
	for (uint32_t i = 0; i < s->p.n_bias; i++) {
		int32_t t = s->p.bias_id[i];
		if (t >= 0 && (uint32_t)t < s->n_vocab && s->val[t] != -INFINITY)
			s->val[t] += s->p.bias[i];
	}
}

/* The index (of i, j, k) whose id is the median of the three. */
static size_t median3(const float *v, const int32_t *a, size_t i, size_t j, size_t k)
{
	if (better(v, a[i], a[j])) {
		if (better(v, a[j], a[k]))
			return j;
		return better(v, a[i], a[k]) ? k : i;
	}
	if (better(v, a[i], a[k]))
		return i;
	return better(v, a[j], a[k]) ? k : j;
}

/* Top-p without a sort: the worst token of the smallest best-first set of
 * a[0..n) whose weight w[id] reaches `need`, by a quickselect on mass
 * (a[] is reordered). Invariant: the mass `acc` of the tokens known to be
 * in the set is below `need`, and the boundary lies in a[lo..hi). Expected
 * O(n) where a sort is O(n log n): measured 2-4 ms against 70 ms for a heap sort
 * for a flat 152k vocabulary (top_p 0.95, no top-k). */
static int32_t top_p_boundary(const float *v, const double *w, int32_t *a, size_t n, double need)
{
	size_t lo = 0, hi = n;
	double acc = 0.0;
	while (hi - lo > 1) {
		size_t m = median3(v, a, lo, lo + (hi - lo) / 2, hi - 1);
		int32_t piv = a[m];
		a[m] = a[hi - 1];
		a[hi - 1] = piv;
		size_t j = lo;
		double mass = 0.0;
		for (size_t i = lo; i < hi - 1; i++) {
			if (better(v, a[i], piv)) {
				int32_t t = a[i];
				a[i] = a[j];
				a[j] = t;
				mass += w[t];
				j++;
			}
		}
		a[hi - 1] = a[j];
		a[j] = piv;
		if (j > lo && acc + mass >= need) {
			hi = j;
			continue;
		}
		acc += mass + w[piv];
		if (acc >= need)
			return piv;
		lo = j + 1;
	}
	/* One token left; or none, when rounding kept the whole range short
	 * of `need`: then the last one taken closes the set. */
	return lo < hi ? a[lo] : a[hi - 1];
}

int32_t shoal_sampler_sample(shoal_sampler *s, const float *logits, const int32_t *history,
                             size_t n_history, uint64_t step)
{
	const uint32_t nv = s->n_vocab;
	/* greedy: the raw argmax unless OpenAI's adjustments ask for more
	 * (the repetition penalty stays a sampling setting, as before) */
	bool adjust =
	    s->p.n_bias || s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f;
	if (!(s->p.temp > 0.0f) && !adjust)
		return sample_greedy(logits, nv);

	float *val = s->val;
	for (uint32_t i = 0; i < nv; i++)
		val[i] = key_of(logits, (int32_t)i);
	apply_bias(s);
	if (!(s->p.temp > 0.0f)) {
		float rp = s->p.repeat_penalty;
		s->p.repeat_penalty = 1.0f;
		apply_penalty(s, history, n_history);
		s->p.repeat_penalty = rp;
		return sample_greedy(val, nv);
	}
	apply_penalty(s, history, n_history);

	/* Temperature, as a division: with a tiny temp, 1/temp overflows and
	 * 0 * inf would be NaN, while 0 / temp stays 0. Large quotients are
	 * clamped to FLT_MAX; only tokens with a finite result stay. */
	size_t n = 0;
	const float temp = s->p.temp;
	for (uint32_t i = 0; i < nv; i++) {
		float x = val[i];
		if (x == -INFINITY)
			continue;
		x /= temp;
		if (isnan(x))
			x = -INFINITY;
		else if (x > FLT_MAX)
			x = FLT_MAX;
		else if (x < -FLT_MAX)
			x = -INFINITY;
		val[i] = x;
		if (x != -INFINITY)
			s->cand[n++] = (int32_t)i;
	}
	if (n == 0)
		return 0;

	/* Top-k: `list` is best first from here on when `sorted`, else it
	 * is in id order. */
	const int32_t *list = s->cand;
	bool sorted = false;
	if (s->p.top_k > 0 && (size_t)s->p.top_k < n) {
		select_top(val, s->cand, n, (size_t)s->p.top_k, s->heap);
		n = (size_t)s->p.top_k;
		list = s->heap;
		sorted = true;
	}

	/* Softmax weights relative to the maximum: w = exp(l - l_max), in
	 * double, so w(max) = 1 and p_i = w_i / sum. */
	double *w = s->w;
	float lmax = -INFINITY;
	for (size_t i = 0; i < n; i++)
		if (val[list[i]] > lmax)
			lmax = val[list[i]];
	double sum = 0.0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = list[i];
		w[id] = exp((double)val[id] - (double)lmax);
		sum += w[id];
	}

	/* Top-p: the smallest best-first set whose mass reaches p (at least
	 * one token). Sorted: a prefix. Otherwise: find the boundary token by
	 * quickselect on mass and keep every token at least as good, in id
	 * order. */
	if (s->p.top_p < 1.0f) {
		double need = (double)s->p.top_p * sum;
		if (sorted) {
			double cum = 0.0;
			size_t keep = 0;
			while (keep < n) {
				cum += w[list[keep++]];
				if (cum >= need)
					break;
			}
			n = keep;
		} else {
			memcpy(s->heap, list, n * sizeof *s->heap);
			int32_t edge = top_p_boundary(val, w, s->heap, n, need);
			size_t k = 0;
			for (size_t i = 0; i < n; i++)
				if (!better(val, edge, list[i]))
					s->heap[k++] = list[i];
			list = s->heap;
			n = k;
		}
	}

	/* Min-p: p_i < min_p * p_max  <=>  w_i < min_p, since w_max = 1. The
	 * maximum always stays (min_p <= 1). Order is kept. */
	if (s->p.min_p > 0.0f) {
		size_t k = 0;
		int32_t *dst = s->heap;
		for (size_t i = 0; i < n; i++)
			if (w[list[i]] >= (double)s->p.min_p)
				dst[k++] = list[i];
		list = dst;
		n = k;
	}

	/* Renormalise and draw: walk the kept list (best first, or by id)
	 * until the cumulative weight passes u * total. */
	double total = 0.0;
	for (size_t i = 0; i < n; i++)
		total += w[list[i]];
	double target = draw_uniform(s->p.seed, step) * total;
	double cum = 0.0;
	for (size_t i = 0; i < n; i++) {
		cum += w[list[i]];
		if (target < cum)
			return list[i];
	}
	return list[n - 1];
}

/* Try the unconstrained draw first: inside a free string almost every
 * drawn token fits, and the mask (a walk over the whole vocabulary) is
 * paid only where the grammar narrows the choice. */
int32_t shoal_sampler_sample_filtered(shoal_sampler *s, const float *logits, const int32_t *history,
                                      size_t n_history, uint64_t step,
                                      const shoal_sampler_filter *f)
{
	int32_t id = shoal_sampler_sample(s, logits, history, n_history, step);
	if (!f || f->allow(f->ctx, id))
		return id;
	memcpy(s->masked, logits, (size_t)s->n_vocab * sizeof *s->masked);
	f->mask(f->ctx, s->masked, s->n_vocab);
	id = shoal_sampler_sample(s, s->masked, history, n_history, step);
	return f->allow(f->ctx, id) ? id : -1;
}

/* ---------------------------------------------------------- logprobs */

void shoal_logprobs_top(const float *logits, uint32_t n_vocab, int32_t chosen, float *chosen_lp,
                        uint32_t k, int32_t *top_ids, float *top_lps)
{
	if (n_vocab == 0) {
		if (chosen_lp)
			*chosen_lp = -INFINITY;
		return;
	}
	/* Log-sum-exp, max-subtracted, in double. */
	double mx = -INFINITY;
	for (uint32_t i = 0; i < n_vocab; i++) {
		double x = key_of(logits, (int32_t)i);
		if (x > mx)
			mx = x;
	}
	double lse = -INFINITY;
	if (mx > -INFINITY) {
		double sum = 0.0;
		for (uint32_t i = 0; i < n_vocab; i++)
			sum += exp((double)key_of(logits, (int32_t)i) - mx);
		lse = mx + log(sum);
	}
	/* With no finite logit at all, every logprob reads -inf. */
#define LOGPROB_OF(id) (lse == -INFINITY ? -INFINITY : (float)((double)key_of(logits, (id)) - lse))
	if (chosen_lp)
		*chosen_lp =
		    (chosen >= 0 && (uint32_t)chosen < n_vocab) ? LOGPROB_OF(chosen) : -INFINITY;
	if (k > n_vocab)
		k = n_vocab;
	if (k == 0 || !top_ids)
		return;
	select_top(logits, NULL, n_vocab, k, top_ids);
	if (top_lps)
		for (uint32_t i = 0; i < k; i++)
			top_lps[i] = LOGPROB_OF(top_ids[i]);
#undef LOGPROB_OF
}
