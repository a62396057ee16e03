/*
 * tests/unit/test_sampler.c: the token sampler (runtime/engine/sampler.c).
 *
 * Part: runtime/ (engine). Greedy and its ties, the (seed, step) draw,
 * the empirical distribution against softmax, top-k, top-p, min-p, the
 * repetition penalty, logprobs against a hand computation, and
 * non-finite logits.
 */
#include "runtime/engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

#include "tests/unit/test.h"

static shoal_sampler_params plain(float temp)
{
	shoal_sampler_params p = shoal_sampler_defaults();
	p.temp = temp;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0.0f;
	p.repeat_penalty = 1.0f;
	return p;
}

static shoal_sampler *make(const shoal_sampler_params *p, uint32_t n)
{
	shoal_sampler *s = NULL;
	if (shoal_sampler_new(p, n, &s) != SHOAL_OK)
		return NULL;
	return s;
}

static void test_defaults(void)
{
	shoal_sampler_params p = shoal_sampler_defaults();
	ASSERT_NEAR(p.temp, 0.8, 1e-6);
	ASSERT_EQ(p.top_k, 40);
	ASSERT_NEAR(p.top_p, 0.95, 1e-6);
	ASSERT_NEAR(p.min_p, 0.05, 1e-6);
	ASSERT_NEAR(p.repeat_penalty, 1.0, 0);
	ASSERT_EQ(p.repeat_last_n, 64);
	ASSERT_U64_EQ(p.seed, 0);
}

static void test_bad_params(void)
{
	shoal_sampler *s = (shoal_sampler *)1;
	shoal_sampler_params p = plain(1.0f);
	ASSERT_EQ(shoal_sampler_new(&p, 0, &s), SHOAL_ERR_INVAL);
	ASSERT_EQ(shoal_sampler_new(NULL, 10, &s), SHOAL_ERR_INVAL);
	p.top_p = 1.5f;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &s), SHOAL_ERR_RANGE);
	ASSERT_TRUE(s == NULL);
	p = plain(NAN);
	ASSERT_EQ(shoal_sampler_new(&p, 10, &s), SHOAL_ERR_RANGE);
	p = plain(1.0f);
	p.top_k = -1;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &s), SHOAL_ERR_RANGE);
	p = plain(1.0f);
	p.repeat_penalty = 0.0f;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &s), SHOAL_ERR_RANGE);
	p = plain(1.0f);
	p.min_p = -0.1f;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &s), SHOAL_ERR_RANGE);
	shoal_sampler_free(NULL);
}

static void test_greedy(void)
{
	shoal_sampler_params p = plain(0.0f);
	shoal_sampler *s = make(&p, 6);
	ASSERT_TRUE(s);
	const float a[6] = {0.1f, -3.0f, 2.5f, 2.4f, 0.0f, -1.0f};
	ASSERT_EQ(shoal_sampler_sample(s, a, NULL, 0, 0), 2);
	ASSERT_EQ(shoal_sampler_sample(s, a, NULL, 0, 999), 2);
	const float tie[6] = {0.1f, 7.0f, 2.5f, 7.0f, 7.0f, -1.0f};
	ASSERT_EQ(shoal_sampler_sample(s, tie, NULL, 0, 3), 1);
	/* The penalty does not apply to greedy: argmax over raw logits. */
	const int32_t hist[1] = {1};
	ASSERT_EQ(shoal_sampler_sample(s, tie, hist, 1, 3), 1);
	shoal_sampler_free(s);
	/* A negative temperature is greedy too. */
	p.temp = -1.0f;
	s = make(&p, 6);
	ASSERT_TRUE(s);
	ASSERT_EQ(shoal_sampler_sample(s, a, NULL, 0, 0), 2);
	shoal_sampler_free(s);
}

/* Greedy against the rule written as one loop (a strictly higher key wins,
 * NaN's key -inf, +inf's FLT_MAX), on vectors of 1..70 logits drawn from a
 * few values (ties), NaN, -inf, +inf and FLT_MAX, across the 8-wide passes
 * and their tails. */
static void test_greedy_rule(void)
{
	const float vals[] = {-1.0f, 0.5f, 2.0f, 2.0f, NAN, -INFINITY, INFINITY, FLT_MAX, -FLT_MAX};
	uint32_t r = 12345u;
	float v[70];
	for (uint32_t n = 1; n <= 70; n++) {
		shoal_sampler_params p = plain(0.0f);
		shoal_sampler *s = make(&p, n);
		ASSERT_TRUE(s);
		for (int trial = 0; trial < 40; trial++) {
			for (uint32_t i = 0; i < n; i++) {
				r = r * 1103515245u + 12345u;
				/* mostly ordinary values, some of each special one */
				uint32_t k = (r >> 16) % 40;
				v[i] = k < 9 ? vals[k] : (float)((r >> 8) % 7) - 3.0f;
			}
			int32_t best = 0;
			float bk = isnan(v[0]) ? -INFINITY : v[0] > FLT_MAX ? FLT_MAX : v[0];
			for (uint32_t i = 1; i < n; i++) {
				float x = isnan(v[i]) ? -INFINITY : v[i] > FLT_MAX ? FLT_MAX : v[i];
				if (x > bk) {
					bk = x;
					best = (int32_t)i;
				}
			}
			int32_t got = shoal_sampler_sample(s, v, NULL, 0, 0);
			if (got != best)
				TEST_FAIL_("n %u trial %d: greedy %d, the rule %d", n, trial, got,
				           best);
		}
		shoal_sampler_free(s);
	}
}

static void test_same_seed_step_same_token(void)
{
	enum { N = 100, STEPS = 400 };
	float logits[N];
	for (int i = 0; i < N; i++)
		logits[i] = 0.0f; /* uniform: every draw is decided by u alone */
	shoal_sampler_params p = plain(1.0f);
	p.seed = 1234;
	shoal_sampler *a = make(&p, N), *b = make(&p, N);
	ASSERT_TRUE(a && b);
	bool hit[N] = {false};
	int distinct = 0, changes = 0, prev = -1;
	for (uint64_t t = 0; t < STEPS; t++) {
		int32_t x = shoal_sampler_sample(a, logits, NULL, 0, t);
		/* Replay: another sampler with the same seed, asked out of order. */
		int32_t y = shoal_sampler_sample(b, logits, NULL, 0, t);
		ASSERT_EQ(x, y);
		ASSERT_EQ(shoal_sampler_sample(a, logits, NULL, 0, t), x);
		ASSERT_TRUE(x >= 0 && x < N);
		if (!hit[x]) {
			hit[x] = true;
			distinct++;
		}
		changes += x != prev;
		prev = x;
	}
	/* 400 uniform draws over 100 tokens hit ~98 distinct ones; 80 is far
	 * below what any sane generator gives. Consecutive steps differ
	 * 99% of the time: >= 380 of 400. */
	ASSERT_GE(distinct, 80);
	ASSERT_GE(changes, 380);
	/* A different seed gives a different sequence. */
	p.seed = 1235;
	shoal_sampler *c = make(&p, N);
	ASSERT_TRUE(c);
	int same = 0;
	for (uint64_t t = 0; t < STEPS; t++)
		same += shoal_sampler_sample(a, logits, NULL, 0, t) ==
		        shoal_sampler_sample(c, logits, NULL, 0, t);
	ASSERT_LT(same, 20); /* expected 4 */
	shoal_sampler_free(a);
	shoal_sampler_free(b);
	shoal_sampler_free(c);
}

/* Draw once per seed (step 0) and compare frequencies with softmax.
 * N = 40000 draws: the standard error of a frequency is at most
 * sqrt(0.25 / 40000) = 0.0025, so 0.01 is four of them; the chi-square
 * with 7 degrees of freedom is below 24.32 with probability 0.999. */
static void test_distribution_matches_softmax(void)
{
	enum { V = 8, N = 40000 };
	const float logits[V] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 1.5f, 0.25f};
	double want[V], z = 0.0;
	for (int i = 0; i < V; i++)
		z += exp(logits[i]);
	for (int i = 0; i < V; i++)
		want[i] = exp(logits[i]) / z;
	int count[V] = {0};
	shoal_sampler_params p = plain(1.0f);
	for (int i = 0; i < N; i++) {
		p.seed = (uint64_t)i;
		shoal_sampler *s = make(&p, V);
		ASSERT_TRUE(s);
		int32_t t = shoal_sampler_sample(s, logits, NULL, 0, 0);
		shoal_sampler_free(s);
		ASSERT_TRUE(t >= 0 && t < V);
		count[t]++;
	}
	double chi2 = 0.0;
	for (int i = 0; i < V; i++) {
		double f = (double)count[i] / N, e = want[i] * N;
		ASSERT_NEAR(f, want[i], 0.01);
		chi2 += (count[i] - e) * (count[i] - e) / e;
	}
	ASSERT_LT(chi2, 24.32);

	/* Temperature 2 flattens: the same test against softmax(l / 2),
	 * here over steps of one seed. */
	z = 0.0;
	for (int i = 0; i < V; i++)
		z += exp(logits[i] / 2.0);
	for (int i = 0; i < V; i++)
		want[i] = exp(logits[i] / 2.0) / z;
	memset(count, 0, sizeof count);
	p = plain(2.0f);
	p.seed = 77;
	shoal_sampler *s = make(&p, V);
	ASSERT_TRUE(s);
	for (int i = 0; i < N; i++)
		count[shoal_sampler_sample(s, logits, NULL, 0, (uint64_t)i)]++;
	shoal_sampler_free(s);
	for (int i = 0; i < V; i++)
		ASSERT_NEAR((double)count[i] / N, want[i], 0.01);
}

static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

static void test_top_k_one_is_greedy(void)
{
	enum { V = 500 };
	float logits[V];
	shoal_sampler_params pg = plain(0.0f), pk = plain(1.3f);
	pk.top_k = 1;
	pk.seed = 9;
	shoal_sampler *g = make(&pg, V), *k = make(&pk, V);
	ASSERT_TRUE(g && k);
	uint64_t x = 5;
	for (int r = 0; r < 50; r++) {
		for (int i = 0; i < V; i++)
			logits[i] = (float)(lcg(&x) % 1000) / 100.0f; /* ties likely */
		ASSERT_EQ(shoal_sampler_sample(k, logits, NULL, 0, (uint64_t)r),
		          shoal_sampler_sample(g, logits, NULL, 0, (uint64_t)r));
	}
	shoal_sampler_free(g);
	shoal_sampler_free(k);
}

static void test_top_k_ties_by_lower_id(void)
{
	const float logits[6] = {1.0f, 3.0f, 3.0f, 3.0f, 3.0f, 1.0f};
	shoal_sampler_params p = plain(1.0f);
	p.top_k = 2;
	shoal_sampler *s = make(&p, 6);
	ASSERT_TRUE(s);
	int seen[6] = {0};
	for (uint64_t t = 0; t < 400; t++)
		seen[shoal_sampler_sample(s, logits, NULL, 0, t)]++;
	ASSERT_GT(seen[1], 100);
	ASSERT_GT(seen[2], 100);
	ASSERT_EQ(seen[0] + seen[3] + seen[4] + seen[5], 0);
	shoal_sampler_free(s);
}

static uint64_t lcg(uint64_t *x);

static void test_top_p(void)
{
	/* Probabilities 0.125, 0.5, 0.125, 0.25 (ids out of order). */
	const float logits[4] = {logf(0.125f), logf(0.5f), logf(0.125f), logf(0.25f)};
	shoal_sampler_params p = plain(1.0f);
	p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: keeps ids 1 and 3 */
	shoal_sampler *s = make(&p, 4);
	ASSERT_TRUE(s);
	int seen[4] = {0};
	for (uint64_t t = 0; t < 3000; t++)
		seen[shoal_sampler_sample(s, logits, NULL, 0, t)]++;
	ASSERT_EQ(seen[0] + seen[2], 0);
	/* Renormalised: 2/3 and 1/3. */
	ASSERT_NEAR(seen[1] / 3000.0, 2.0 / 3.0, 0.04);
	ASSERT_NEAR(seen[3] / 3000.0, 1.0 / 3.0, 0.04);
	shoal_sampler_free(s);

	/* p = 0.5 is reached by the first token alone; p = 0 keeps one. */
	float ps[2] = {0.5f, 0.0f};
	for (int j = 0; j < 2; j++) {
		p.top_p = ps[j];
		s = make(&p, 4);
		ASSERT_TRUE(s);
		for (uint64_t t = 0; t < 200; t++)
			ASSERT_EQ(shoal_sampler_sample(s, logits, NULL, 0, t), 1);
		shoal_sampler_free(s);
	}

	/* The boundary, in exact arithmetic: four equal tokens, p = 0.5 is
	 * reached exactly by two of them (>= p, not > p). */
	const float four[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	p.top_p = 0.5f;
	s = make(&p, 4);
	ASSERT_TRUE(s);
	memset(seen, 0, sizeof seen);
	for (uint64_t t = 0; t < 400; t++)
		seen[shoal_sampler_sample(s, four, NULL, 0, t)]++;
	ASSERT_EQ(seen[2] + seen[3], 0);
	ASSERT_GT(seen[0], 150);
	ASSERT_GT(seen[1], 150);
	shoal_sampler_free(s);

	/* A large flat vocabulary: the partial selection must grow past its
	 * first 64 tokens. 1000 equal tokens, p = 0.9 keeps the 900 with
	 * the lowest ids. */
	enum { V = 1000 };
	static float flat[V];
	for (int i = 0; i < V; i++)
		flat[i] = 0.25f;
	p.top_p = 0.9f;
	s = make(&p, V);
	ASSERT_TRUE(s);
	int hi = 0;
	for (uint64_t t = 0; t < 3000; t++) {
		int32_t x = shoal_sampler_sample(s, flat, NULL, 0, t);
		ASSERT_TRUE(x >= 0 && x < 900);
		if (x > hi)
			hi = x;
	}
	ASSERT_GT(hi, 850);
	shoal_sampler_free(s);

	/* The quickselect path on a large vocabulary with an exact boundary:
	 * three equal heavy tokens (ids 2000, 5, 1500) and 2997 light ones
	 * whose mass is e^-12 * 2997 / 3 = 0.0061 of a heavy one's. p = 0.85
	 * needs all three heavy tokens (2 hold < 0.67), p = 0.55 two of them,
	 * the lower ids 5 and 1500. Light tokens get random quantised values
	 * (ties included) so the partition sees a real mixture. */
	enum { L = 3000 };
	static float mix[L];
	uint64_t x = 11;
	for (int i = 0; i < L; i++)
		mix[i] = -12.0f - (float)(lcg(&x) % 7) * 0.5f;
	mix[2000] = mix[5] = mix[1500] = 0.0f;
	const float tops[2] = {0.85f, 0.55f};
	const int want_n[2] = {3, 2};
	for (int j = 0; j < 2; j++) {
		p = plain(1.0f);
		p.top_p = tops[j];
		p.seed = (uint64_t)j;
		s = make(&p, L);
		ASSERT_TRUE(s);
		int c5 = 0, c1500 = 0, c2000 = 0;
		for (uint64_t t = 0; t < 1500; t++) {
			int32_t y = shoal_sampler_sample(s, mix, NULL, 0, t);
			ASSERT_TRUE(y == 5 || y == 1500 || y == 2000);
			c5 += y == 5;
			c1500 += y == 1500;
			c2000 += y == 2000;
		}
		shoal_sampler_free(s);
		ASSERT_GT(c5, 1500 / want_n[j] - 150);
		ASSERT_GT(c1500, 1500 / want_n[j] - 150);
		if (want_n[j] == 3)
			ASSERT_GT(c2000, 350);
		else
			ASSERT_EQ(c2000, 0);
	}

	/* With top-k first: top_k 3 keeps 0.5, 0.25, 0.125 (id 0 before 2),
	 * renormalised 4/7, 2/7, 1/7; top_p 0.95 of that needs all three. */
	p = plain(1.0f);
	p.top_k = 3;
	p.top_p = 0.95f;
	s = make(&p, 4);
	ASSERT_TRUE(s);
	memset(seen, 0, sizeof seen);
	for (uint64_t t = 0; t < 7000; t++)
		seen[shoal_sampler_sample(s, logits, NULL, 0, t)]++;
	ASSERT_EQ(seen[2], 0);
	ASSERT_NEAR(seen[0] / 7000.0, 1.0 / 7.0, 0.02);
	shoal_sampler_free(s);
}

static void test_min_p(void)
{
	/* p = 0.05, 0.5, 0.15, 0.3; min_p 0.2 drops p < 0.1: only id 0. */
	const float logits[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
	shoal_sampler_params p = plain(1.0f);
	p.min_p = 0.2f;
	shoal_sampler *s = make(&p, 4);
	ASSERT_TRUE(s);
	int seen[4] = {0};
	for (uint64_t t = 0; t < 4000; t++)
		seen[shoal_sampler_sample(s, logits, NULL, 0, t)]++;
	ASSERT_EQ(seen[0], 0);
	ASSERT_GT(seen[2], 0);
	ASSERT_NEAR(seen[1] / 4000.0, 0.5 / 0.95, 0.03);
	shoal_sampler_free(s);
	/* min_p 1 keeps only the maximum. */
	p.min_p = 1.0f;
	s = make(&p, 4);
	ASSERT_TRUE(s);
	for (uint64_t t = 0; t < 100; t++)
		ASSERT_EQ(shoal_sampler_sample(s, logits, NULL, 0, t), 1);
	shoal_sampler_free(s);
}

static void test_repeat_penalty(void)
{
	shoal_sampler_params p = plain(1.0f);
	p.top_k = 1; /* deterministic: the best penalised logit */
	p.repeat_penalty = 1.5f;
	p.repeat_last_n = 2;
	shoal_sampler *s = make(&p, 4);
	ASSERT_TRUE(s);
	/* Positive: 2.0 / 1.5 = 1.33 < 1.9. */
	const float pos[4] = {2.0f, 1.9f, -1.0f, 0.0f};
	const int32_t h0[1] = {0};
	ASSERT_EQ(shoal_sampler_sample(s, pos, NULL, 0, 0), 0);
	ASSERT_EQ(shoal_sampler_sample(s, pos, h0, 1, 0), 1);
	/* Negative: -1.0 * 1.5 = -1.5 < -1.2. */
	const float neg[4] = {-1.0f, -1.2f, -5.0f, -6.0f};
	ASSERT_EQ(shoal_sampler_sample(s, neg, NULL, 0, 0), 0);
	ASSERT_EQ(shoal_sampler_sample(s, neg, h0, 1, 0), 1);
	/* Each distinct token once: 2.0 / 1.5 = 1.33 > 1.2 (three times would
	 * give 0.59). */
	const float once[4] = {2.0f, 1.2f, -1.0f, 0.0f};
	const int32_t h000[2] = {0, 0};
	ASSERT_EQ(shoal_sampler_sample(s, once, h000, 2, 0), 0);
	/* Only the last repeat_last_n = 2 tokens count; ids outside the
	 * vocabulary are ignored. */
	const int32_t old[4] = {0, 3, 3, 99};
	ASSERT_EQ(shoal_sampler_sample(s, pos, old, 4, 0), 0);
	const int32_t bad[3] = {-7, 0, 1 << 30};
	ASSERT_EQ(shoal_sampler_sample(s, pos, bad, 3, 0), 1);
	/* The marks are cleared between calls. */
	ASSERT_EQ(shoal_sampler_sample(s, pos, NULL, 0, 0), 0);
	shoal_sampler_free(s);
}

/* OpenAI's logit_bias, presence and frequency penalties: at temp 0 too,
 * over the last repeat_last_n tokens, counted per occurrence. */
static void test_openai_adjustments(void)
{
	shoal_sampler_params p = plain(0.0f);
	p.repeat_last_n = 3;
	p.n_bias = 2;
	p.bias_id[0] = 0;
	p.bias[0] = 5.0f;
	p.bias_id[1] = 1 << 20; /* out of the vocabulary: ignored */
	p.bias[1] = 100.0f;
	shoal_sampler *s = make(&p, 4);
	ASSERT_TRUE(s);
	const float l[4] = {1.0f, 2.0f, 3.0f, 0.0f};
	ASSERT_EQ(shoal_sampler_sample(s, l, NULL, 0, 0), 0); /* 1 + 5 beats 3 */
	shoal_sampler_free(s);
	p.bias[0] = -100.0f;
	p.bias_id[1] = 2;
	p.bias[1] = -100.0f;
	s = make(&p, 4);
	ASSERT_EQ(shoal_sampler_sample(s, l, NULL, 0, 0), 1); /* 0 and 2 banned */
	shoal_sampler_free(s);
	/* presence: once per token in the window, however often */
	p = plain(0.0f);
	p.repeat_last_n = 3;
	p.presence_penalty = 1.0f;
	s = make(&p, 4);
	const float m[4] = {1.0f, 1.5f, 0.0f, -1.0f};
	const int32_t h1[1] = {1}, h111[3] = {1, 1, 1};
	ASSERT_EQ(shoal_sampler_sample(s, m, NULL, 0, 0), 1);
	ASSERT_EQ(shoal_sampler_sample(s, m, h1, 1, 0), 0);   /* 1.5 - 1 < 1 */
	ASSERT_EQ(shoal_sampler_sample(s, m, h111, 3, 0), 0); /* the same */
	shoal_sampler_free(s);
	/* frequency: per occurrence; only the last repeat_last_n count */
	p.presence_penalty = 0.0f;
	p.frequency_penalty = 0.2f;
	s = make(&p, 4);
	ASSERT_EQ(shoal_sampler_sample(s, m, h1, 1, 0), 1);   /* 1.3 > 1 */
	ASSERT_EQ(shoal_sampler_sample(s, m, h111, 3, 0), 0); /* 0.9 < 1 */
	const int32_t old[4] = {1, 1, 0, 3};                  /* the window holds one 1 */
	ASSERT_EQ(shoal_sampler_sample(s, m, old, 4, 0), 1);
	ASSERT_EQ(shoal_sampler_sample(s, m, NULL, 0, 0), 1); /* counts cleared */
	shoal_sampler_free(s);
	/* a negative penalty encourages repeats */
	p.frequency_penalty = -2.0f;
	s = make(&p, 4);
	const int32_t h3[1] = {3}, h333[3] = {3, 3, 3};
	ASSERT_EQ(shoal_sampler_sample(s, m, h3, 1, 0), 1);   /* -1 + 2 < 1.5 */
	ASSERT_EQ(shoal_sampler_sample(s, m, h333, 3, 0), 3); /* -1 + 6 */
	shoal_sampler_free(s);
	/* sampling: every token but one biased away is never drawn */
	p = plain(1.0f);
	p.n_bias = 3;
	for (int i = 0; i < 3; i++) {
		p.bias_id[i] = i;
		p.bias[i] = -100.0f;
	}
	s = make(&p, 4);
	const float flat[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (uint64_t t = 0; t < 200; t++)
		ASSERT_EQ(shoal_sampler_sample(s, flat, NULL, 0, t), 3);
	shoal_sampler_free(s);
	/* ranges */
	shoal_sampler *bad = (shoal_sampler *)1;
	p = plain(1.0f);
	p.presence_penalty = 2.5f;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &bad), SHOAL_ERR_RANGE);
	p = plain(1.0f);
	p.frequency_penalty = NAN;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &bad), SHOAL_ERR_RANGE);
	p = plain(1.0f);
	p.n_bias = 1;
	p.bias[0] = 101.0f;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &bad), SHOAL_ERR_RANGE);
	p.bias[0] = 0.0f;
	p.n_bias = SHOAL_SAMPLER_MAX_BIAS + 1;
	ASSERT_EQ(shoal_sampler_new(&p, 10, &bad), SHOAL_ERR_RANGE);
}

static void test_logprobs(void)
{
	const float logits[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
	double z = 0.0;
	for (int i = 0; i < 5; i++)
		z += exp(logits[i]);
	double lz = log(z);
	float clp = 0.0f;
	int32_t ids[3];
	float lps[3];
	shoal_logprobs_top(logits, 5, 2, &clp, 3, ids, lps);
	ASSERT_NEAR(clp, 2.0 - lz, 1e-6);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 3);
	ASSERT_EQ(ids[2], 2);
	ASSERT_NEAR(lps[0], 3.0 - lz, 1e-6);
	ASSERT_NEAR(lps[1], 3.0 - lz, 1e-6);
	ASSERT_NEAR(lps[2], 2.0 - lz, 1e-6);
	/* k = n_vocab gives the whole vocabulary, sorted. */
	int32_t all[5];
	float alp[5];
	shoal_logprobs_top(logits, 5, 4, &clp, 5, all, alp);
	ASSERT_NEAR(clp, -1.0 - lz, 1e-6);
	ASSERT_EQ(all[3], 0);
	ASSERT_EQ(all[4], 4);
	double psum = 0.0;
	for (int i = 0; i < 5; i++)
		psum += exp(alp[i]);
	ASSERT_NEAR(psum, 1.0, 1e-6);
	/* Stable with huge logits: a naive exp would overflow. */
	const float big[3] = {1000.0f, 1000.0f, 999.0f};
	shoal_logprobs_top(big, 3, 2, &clp, 1, ids, lps);
	double lz2 = 1000.0 + log(2.0 + exp(-1.0));
	ASSERT_NEAR(clp, 999.0 - lz2, 1e-5);
	ASSERT_EQ(ids[0], 0);
	ASSERT_NEAR(lps[0], 1000.0 - lz2, 1e-5);
}

static void test_all_masked_but_one(void)
{
	enum { V = 300 };
	float logits[V];
	for (int i = 0; i < V; i++)
		logits[i] = -INFINITY;
	logits[217] = -3.0f;
	shoal_sampler_params ps[4] = {plain(0.0f), plain(1.0f), shoal_sampler_defaults(),
	                              plain(0.7f)};
	ps[3].top_p = 0.1f;
	ps[3].min_p = 0.5f;
	ps[3].repeat_penalty = 1.3f;
	const int32_t hist[2] = {217, 5};
	for (int j = 0; j < 4; j++) {
		shoal_sampler *s = make(&ps[j], V);
		ASSERT_TRUE(s);
		for (uint64_t t = 0; t < 20; t++)
			ASSERT_EQ(shoal_sampler_sample(s, logits, hist, 2, t), 217);
		shoal_sampler_free(s);
	}
	float clp;
	int32_t ids[2];
	float lps[2];
	shoal_logprobs_top(logits, V, 217, &clp, 2, ids, lps);
	ASSERT_NEAR(clp, 0.0, 1e-7);
	ASSERT_EQ(ids[0], 217);
	ASSERT_EQ(ids[1], 0);
	ASSERT_TRUE(isinf(lps[1]) && lps[1] < 0);
}

/* NaN counts as -inf: never picked while another token is possible; with
 * every logit NaN the sampler returns token 0 and logprobs read -inf. */
static void test_nan_does_not_crash(void)
{
	const float logits[5] = {NAN, 0.5f, NAN, 0.4f, -INFINITY};
	shoal_sampler_params ps[3] = {plain(0.0f), plain(1.0f), shoal_sampler_defaults()};
	for (int j = 0; j < 3; j++) {
		shoal_sampler *s = make(&ps[j], 5);
		ASSERT_TRUE(s);
		for (uint64_t t = 0; t < 200; t++) {
			int32_t x = shoal_sampler_sample(s, logits, NULL, 0, t);
			ASSERT_TRUE(x == 1 || x == 3);
		}
		shoal_sampler_free(s);
	}
	const float nans[3] = {NAN, NAN, NAN};
	shoal_sampler *s = make(&ps[1], 3);
	ASSERT_TRUE(s);
	ASSERT_EQ(shoal_sampler_sample(s, nans, NULL, 0, 0), 0);
	shoal_sampler_free(s);
	s = make(&ps[0], 3);
	ASSERT_TRUE(s);
	ASSERT_EQ(shoal_sampler_sample(s, nans, NULL, 0, 0), 0);
	shoal_sampler_free(s);

	float clp;
	int32_t ids[2];
	float lps[2];
	shoal_logprobs_top(logits, 5, 0, &clp, 2, ids, lps);
	ASSERT_TRUE(isinf(clp) && clp < 0);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 3);
	ASSERT_FALSE(isnan(lps[0]) || isnan(lps[1]));
	shoal_logprobs_top(nans, 3, 1, &clp, 1, ids, lps);
	ASSERT_TRUE(isinf(clp) && clp < 0);

	/* A temperature so small that 1/temp overflows: still the argmax,
	 * also when the best logit is exactly 0. */
	const float zero_best[3] = {-1.0f, 0.0f, -2.0f};
	shoal_sampler_params tiny = plain(1e-40f);
	s = make(&tiny, 3);
	ASSERT_TRUE(s);
	for (uint64_t t = 0; t < 50; t++)
		ASSERT_EQ(shoal_sampler_sample(s, zero_best, NULL, 0, t), 1);
	shoal_sampler_free(s);

	/* +inf wins greedy and sampling alike. */
	const float pinf[3] = {1.0f, INFINITY, 2.0f};
	s = make(&ps[1], 3);
	ASSERT_TRUE(s);
	for (uint64_t t = 0; t < 50; t++)
		ASSERT_EQ(shoal_sampler_sample(s, pinf, NULL, 0, t), 1);
	shoal_sampler_free(s);
}

/* ---- constrained sampling: shoal_sampler_sample_filtered ---- */

typedef struct filt {
	uint32_t mod, rem; /* allowed: id % mod == rem (mod 0: none) */
	int masks;         /* mask calls */
} filt;

static bool filt_allow(void *ctx, int32_t id)
{
	filt *f = ctx;
	return f->mod && (uint32_t)id % f->mod == f->rem;
}

static void filt_mask(void *ctx, float *logits, uint32_t n)
{
	filt *f = ctx;
	f->masks++;
	for (uint32_t i = 0; i < n; i++)
		if (!filt_allow(f, (int32_t)i))
			logits[i] = -INFINITY;
}

static void test_filtered(void)
{
	enum { V = 1000 };
	static float lg[V];
	for (int i = 0; i < V; i++) /* a peaked, uneven distribution */
		lg[i] = (float)((i * 7919) % 101) / 10.0f;
	float temps[2] = {0.0f, 0.9f};
	for (int t = 0; t < 2; t++) {
		shoal_sampler_params p = shoal_sampler_defaults();
		p.temp = temps[t];
		p.seed = 42;
		shoal_sampler *s = make(&p, V);
		filt all = {1, 0, 0}, some = {7, 3, 0}, none = {0, 0, 0};
		shoal_sampler_filter fa = {filt_allow, filt_mask, &all};
		shoal_sampler_filter fs = {filt_allow, filt_mask, &some};
		shoal_sampler_filter fn = {filt_allow, filt_mask, &none};
		for (uint64_t step = 0; step < 200; step++) {
			/* a filter that allows the draw changes nothing, masks nothing */
			int32_t raw = shoal_sampler_sample(s, lg, NULL, 0, step);
			ASSERT_EQ(shoal_sampler_sample_filtered(s, lg, NULL, 0, step, &fa), raw);
			ASSERT_EQ(shoal_sampler_sample_filtered(s, lg, NULL, 0, step, NULL), raw);
			int32_t a = shoal_sampler_sample_filtered(s, lg, NULL, 0, step, &fs);
			ASSERT_EQ(a % 7, 3);
			/* the same (seed, step, state): the same token */
			ASSERT_EQ(shoal_sampler_sample_filtered(s, lg, NULL, 0, step, &fs), a);
			if (raw % 7 == 3) /* the draw fits: kept as it is */
				ASSERT_EQ(a, raw);
			ASSERT_EQ(shoal_sampler_sample_filtered(s, lg, NULL, 0, step, &fn), -1);
		}
		ASSERT_EQ(all.masks, 0);
		ASSERT_GT(some.masks, 0);
		if (t == 1) /* some draws fit (about 1 in 7): no mask for those */
			ASSERT_LT(some.masks, 2 * 200);
		if (t == 0) { /* greedy under the mask: the best allowed token */
			int32_t best = -1;
			for (int i = 3; i < V; i += 7)
				if (best < 0 || lg[i] > lg[best])
					best = i;
			ASSERT_EQ(shoal_sampler_sample_filtered(s, lg, NULL, 0, 0, &fs), best);
		}
		shoal_sampler_free(s);
	}
}

TEST_MAIN(TEST_CASE(test_defaults), TEST_CASE(test_bad_params), TEST_CASE(test_greedy),
          TEST_CASE(test_greedy_rule), TEST_CASE(test_same_seed_step_same_token),
          TEST_CASE(test_distribution_matches_softmax), TEST_CASE(test_top_k_one_is_greedy),
          TEST_CASE(test_top_k_ties_by_lower_id), TEST_CASE(test_top_p), TEST_CASE(test_min_p),
          TEST_CASE(test_repeat_penalty), TEST_CASE(test_openai_adjustments),
          TEST_CASE(test_logprobs), TEST_CASE(test_all_masked_but_one),
          TEST_CASE(test_nan_does_not_crash), TEST_CASE(test_filtered))
