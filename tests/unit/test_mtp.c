/*
 * tests/unit/test_mtp.c: DeepSeek's MTP layer (runtime/engine/mtp.h) on
 * deepseek2 fixtures with a nextn block (tests/helpers/gen_fixture
 * --nextn 1): the loader keeps its tensors; its logits at every position
 * of a prompt match a plain computation of the same layer written here (in
 * double, loops over the weights in the file's layout, the expanded MLA
 * form, the MoE routing spelled out), which also shows that the other
 * order of the concatenation, or the hidden state without the output
 * norm, would be told apart; rows one at a time give bitwise the logits of
 * one batch; the drafter proposes the argmax of the last pushed row;
 * bad input gets a clear error.
 *
 * Part: tests of runtime/ (engine) and models/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/mtp.h"
#include "runtime/vulkan/backend_vulkan.h"
#include "tests/unit/test.h"
#include "tests/unit/test_fixture.h"

/* Both fixtures: 4 layers (1 dense), dim 128, 4 heads of 32 no-rope + 16
 * rope dims, latent 64, values 32, 8 experts (2 used) of 64 + 1 shared,
 * vocabulary 300; the MTP block is layer 4 (MoE). */
#define FX_ARGS                                                                                    \
	"--arch deepseek2 --type F32 --layers 4 --dim 128 --ff 256 --heads 4 --vocab 300 "         \
	"--head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --dense-lead 1 --shared 1 "      \
	"--experts 8 --experts-used 2 --ff-exp 64 --ctx 64 --seed 11 --nextn 1 "

static const char *fx_softmax(void)
{
	return fx_path("mtp-softmax-qlora", FX_ARGS "--q-lora 64");
}

static const char *fx_q8(void)
{
	return fx_path("mtp-q8_0", FX_ARGS "--q-lora 64 --sigmoid --type Q8_0");
}

static const char *fx_sigmoid(void)
{
	return fx_path("mtp-sigmoid-plainq", FX_ARGS "--q-lora 0 --sigmoid");
}

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* ---- the plain computation ------------------------------------------------- */

/* A tensor's values as doubles, in the file's order (NULL t: NULL). */
static double *dq(const shoal_gguf_tensor *t)
{
	if (!t)
		return NULL;
	size_t n = 1;
	for (uint32_t i = 0; i < SHOAL_GGUF_MAX_DIMS; i++)
		n *= t->ne[i];
	float *f = malloc(n * sizeof *f);
	double *d = malloc(n * sizeof *d);
	shoal_backend_cpu()->to_f32(t->type, t->data, f, n);
	for (size_t i = 0; i < n; i++)
		d[i] = f[i];
	free(f);
	return d;
}

/* y (n_out) = W x for W of GGUF shape {n_in, n_out}: row o at o * n_in. */
static void mv(const double *w, const double *x, size_t n_in, size_t n_out, double *y)
{
	for (size_t o = 0; o < n_out; o++) {
		double s = 0;
		for (size_t i = 0; i < n_in; i++)
			s += w[o * n_in + i] * x[i];
		y[o] = s;
	}
}

static void rms(const double *x, const double *w, size_t n, double eps, double *y)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += x[i] * x[i];
	double r = 1.0 / sqrt(s / (double)n + eps);
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * r * w[i];
}

/* Adjacent pairs (2i, 2i+1) of x (n_rot) rotated by pos * base^(-2i/n_rot). */
static void rope(double *x, uint32_t n_rot, uint32_t pos, double base)
{
	for (uint32_t i = 0; i < n_rot / 2; i++) {
		double th = pos * pow(base, -2.0 * i / n_rot), c = cos(th), s = sin(th);
		double a = x[2 * i], b = x[2 * i + 1];
		x[2 * i] = a * c - b * s;
		x[2 * i + 1] = a * s + b * c;
	}
}

static double silu(double x)
{
	return x / (1.0 + exp(-x));
}

/* y (E) = down(silu(gate x) * up x), the three of GGUF shapes {E, F},
 * {E, F}, {F, E}. */
static void swiglu(const double *g, const double *u, const double *d, const double *x, size_t E,
                   size_t F, double *y)
{
	double *a = malloc(F * sizeof *a), *b = malloc(F * sizeof *b);
	mv(g, x, E, F, a);
	mv(u, x, E, F, b);
	for (size_t f = 0; f < F; f++)
		a[f] = silu(a[f]) * b[f];
	mv(d, a, F, E, y);
	free(a);
	free(b);
}

typedef enum ref_mode { REF_PLAIN = 0, REF_SWAP_CAT, REF_NO_OUT_NORM } ref_mode;

/* The MTP layer's logits (n_rows, n_vocab) for rows p = 0..n_rows-1 with
 * hidden h (n_rows, E) and next ids, as defined in mtp.h; `mode` makes
 * one of the wrong variants instead. */
static void reference(const shoal_model *m, const float *h, const int32_t *next, uint32_t n_rows,
                      ref_mode mode, double *logits)
{
	const shoal_hparams *hp = &m->hp;
	const shoal_nextn *nx = m->nextn;
	const shoal_layer *L = &nx->layer;
	size_t E = hp->n_embd, H = hp->n_head, hd = hp->head_dim, nr = hp->n_rot, nope = hd - nr;
	size_t kvl = hp->kv_lora_rank, vh = hp->v_head_dim, V = hp->n_vocab, X = hp->n_expert;
	size_t F = hp->n_ff_exp, S = hp->n_ff_shexp, K = hp->n_expert_used, ql = hp->q_lora_rank;
	double eps = hp->rms_eps;
	double *embd = dq(nx->embd), *enorm = dq(nx->enorm), *hnorm = dq(nx->hnorm);
	double *onorm = dq(m->output_norm), *eh = dq(nx->eh_proj), *hn = dq(nx->head_norm);
	double *head = dq(nx->head), *an = dq(L->attn_norm), *fn = dq(L->ffn_norm);
	double *wqa = dq(L->wq_a), *qan = dq(L->q_a_norm), *wqb = dq(L->wq_b), *wq = dq(L->wq);
	double *wkva = dq(L->wkv_a), *kvan = dq(L->kv_a_norm), *wkb = dq(L->wk_b);
	double *wvb = dq(L->wv_b), *wo = dq(L->wo), *router = dq(L->ffn_gate_inp);
	double *bias = dq(L->exp_probs_b), *ge = dq(L->ffn_gate_exps), *ue = dq(L->ffn_up_exps);
	double *de = dq(L->ffn_down_exps), *gs = dq(L->ffn_gate_shexp), *us = dq(L->ffn_up_shexp);
	double *ds = dq(L->ffn_down_shexp);
	double *cat = calloc(2 * E, sizeof *cat), *t = calloc(E, sizeof *t);
	double *x = calloc(E, sizeof *x), *xn = calloc(E, sizeof *xn);
	double *qa = calloc(ql ? ql : 1, sizeof *qa), *q = calloc(H * hd, sizeof *q);
	double *kva = calloc(kvl + nr, sizeof *kva);
	double *lat = calloc((size_t)n_rows * kvl, sizeof *lat); /* cache: latents */
	double *kr = calloc((size_t)n_rows * nr, sizeof *kr);    /* cache: rope keys */
	double *att = calloc(H * vh, sizeof *att), *sc = calloc(n_rows, sizeof *sc);
	double *kn = calloc(nope, sizeof *kn), *vv = calloc(vh, sizeof *vv);
	double *y = calloc(E, sizeof *y), *ffo = calloc(E, sizeof *ffo);
	double *pr = calloc(X, sizeof *pr), *sel = calloc(X, sizeof *sel);
	double kq = 1.0 / sqrt((double)hd);
	for (uint32_t p = 0; p < n_rows; p++) {
		/* the input: [enorm(e) | hnorm(output_norm(h))], eh_proj */
		double *ce = mode == REF_SWAP_CAT ? cat + E : cat;
		double *ch = mode == REF_SWAP_CAT ? cat : cat + E;
		for (size_t i = 0; i < E; i++)
			t[i] = p == 0 ? 0.0 : embd[(size_t)next[p] * E + i];
		rms(t, enorm, E, eps, ce);
		for (size_t i = 0; i < E; i++)
			t[i] = h[(size_t)p * E + i];
		if (mode != REF_NO_OUT_NORM)
			rms(t, onorm, E, eps, t);
		rms(t, hnorm, E, eps, ch);
		mv(eh, cat, 2 * E, E, x);
		/* MLA attention, expanded: a head's key is [W_kb^T c | rope key],
		 * its value W_vb c */
		rms(x, an, E, eps, xn);
		if (ql) {
			mv(wqa, xn, E, ql, qa);
			rms(qa, qan, ql, eps, qa);
			mv(wqb, qa, ql, H * hd, q);
		} else {
			mv(wq, xn, E, H * hd, q);
		}
		mv(wkva, xn, E, kvl + nr, kva);
		rms(kva, kvan, kvl, eps, lat + (size_t)p * kvl);
		memcpy(kr + (size_t)p * nr, kva + kvl, nr * sizeof *kr);
		rope(kr + (size_t)p * nr, (uint32_t)nr, p, hp->rope_freq_base);
		for (size_t hh = 0; hh < H; hh++) {
			double *qh = q + hh * hd;
			rope(qh + nope, (uint32_t)nr, p, hp->rope_freq_base);
			double mx = -INFINITY, sum = 0;
			for (uint32_t j = 0; j <= p; j++) {
				const double *c = lat + (size_t)j * kvl;
				for (size_t d = 0; d < nope; d++) { /* wk_b {nope, kvl, H} */
					kn[d] = 0;
					for (size_t cc = 0; cc < kvl; cc++)
						kn[d] += wkb[(hh * kvl + cc) * nope + d] * c[cc];
				}
				double s = 0;
				for (size_t d = 0; d < nope; d++)
					s += qh[d] * kn[d];
				for (size_t d = 0; d < nr; d++)
					s += qh[nope + d] * kr[(size_t)j * nr + d];
				sc[j] = s * kq;
				mx = sc[j] > mx ? sc[j] : mx;
			}
			for (uint32_t j = 0; j <= p; j++)
				sum += (sc[j] = exp(sc[j] - mx));
			for (size_t o = 0; o < vh; o++)
				att[hh * vh + o] = 0;
			for (uint32_t j = 0; j <= p; j++) {
				mv(wvb + hh * vh * kvl, lat + (size_t)j * kvl, kvl, vh, vv);
				for (size_t o = 0; o < vh; o++)
					att[hh * vh + o] += sc[j] / sum * vv[o];
			}
		}
		mv(wo, att, H * vh, E, y);
		for (size_t i = 0; i < E; i++)
			x[i] += y[i];
		/* the MoE FFN: scores, top-k by score (+ bias), weights */
		rms(x, fn, E, eps, xn);
		mv(router, xn, E, X, pr);
		if (hp->gating == SHOAL_MOE_GATING_SOFTMAX) {
			double mx = -INFINITY, sum = 0;
			for (size_t e = 0; e < X; e++)
				mx = pr[e] > mx ? pr[e] : mx;
			for (size_t e = 0; e < X; e++)
				sum += (pr[e] = exp(pr[e] - mx));
			for (size_t e = 0; e < X; e++)
				pr[e] /= sum;
		} else {
			for (size_t e = 0; e < X; e++)
				pr[e] = 1.0 / (1.0 + exp(-pr[e]));
		}
		for (size_t e = 0; e < X; e++)
			sel[e] = pr[e] + (bias ? bias[e] : 0);
		size_t ids[16];
		double w[16], wsum = 0;
		for (size_t k = 0; k < K; k++) {
			size_t b = X;
			for (size_t e = 0; e < X; e++)
				if (sel[e] > -INFINITY && (b == X || sel[e] > sel[b]))
					b = e;
			ids[k] = b;
			w[k] = pr[b];
			wsum += w[k];
			sel[b] = -INFINITY;
		}
		swiglu(gs, us, ds, xn, E, S, ffo);
		for (size_t k = 0; k < K; k++) {
			double wk = (hp->expert_weights_norm ? w[k] / wsum : w[k]) *
			            hp->expert_weights_scale;
			size_t e = ids[k];
			swiglu(ge + e * F * E, ue + e * F * E, de + e * E * F, xn, E, F, y);
			for (size_t i = 0; i < E; i++)
				ffo[i] += wk * y[i];
		}
		for (size_t i = 0; i < E; i++)
			x[i] += ffo[i];
		/* the shared head */
		rms(x, hn, E, eps, xn);
		mv(head, xn, E, V, logits + (size_t)p * V);
	}
	double *all[] = {embd, enorm, hnorm, onorm, eh,  hn,  head, an,     fn,   wqa, qan,
	                 wqb,  wq,    wkva,  kvan,  wkb, wvb, wo,   router, bias, ge,  ue,
	                 de,   gs,    us,    ds,    cat, t,   x,    xn,     qa,   q,   kva,
	                 lat,  kr,    att,   sc,    kn,  vv,  y,    ffo,    pr,   sel};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
}

/* ---- the tests ---------------------------------------------------------------- */

/* The main model's final hidden states of the prompt, (NP, E). */
static int main_hidden(const shoal_model *m, float *h)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = 16;
	c.kv_type = SHOAL_DTYPE_F32;
	shoal_engine *e = NULL;
	uint32_t slot, pos[NP], sess[NP];
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_engine_session_open(e, &slot)) {
		fprintf(stderr, "main engine: %s\n", why);
		shoal_engine_free(e);
		return -1;
	}
	for (uint32_t i = 0; i < NP; i++) {
		pos[i] = i;
		sess[i] = slot;
	}
	shoal_engine_batch b = {
	    .n_rows = NP, .tokens = PROMPT, .session = sess, .pos = pos, .hidden_out = h};
	shoal_err err = shoal_engine_run(e, &b, why, sizeof why);
	if (err)
		fprintf(stderr, "main run: %s\n", why);
	shoal_engine_free(e);
	return err ? -1 : 0;
}

/* The backend the MTP layer runs on (the main model's hidden states always
 * come from the CPU backend). */
static const shoal_backend_ops *mtp_backend;

static shoal_mtp *mtp_open(const shoal_model *m, uint32_t sessions)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = mtp_backend ? mtp_backend : shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = 16;
	c.max_sessions = sessions;
	c.kv_type = SHOAL_DTYPE_F32;
	shoal_mtp *t = NULL;
	if (shoal_mtp_new(m, &c, &t, why, sizeof why))
		fprintf(stderr, "shoal_mtp_new: %s\n", why);
	return t;
}

static double max_abs_diff(const float *a, const double *b, size_t n, double *scale)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		s = fmax(s, fabs(b[i]));
	}
	*scale = s;
	return d;
}

/* The MTP logits of every row of the prompt against the plain computation;
 * the wrong variants are further off than the engine is. */
static void check_fixture(const char *path, double tol)
{
	shoal_model *m = open_model(path);
	ASSERT_TRUE(m != NULL);
	ASSERT_TRUE(m->nextn != NULL);
	ASSERT_EQ(m->hp.n_nextn, 1);
	ASSERT_EQ(m->hp.n_layer, 4);
	ASSERT_TRUE(m->nextn->layer.ffn_gate_inp != NULL); /* an MoE block */
	ASSERT_TRUE(m->nextn->head != m->output);          /* its own head */
	ASSERT_TRUE(m->nextn->embd == m->tok_embd);        /* the shared embedding */
	const uint32_t E = m->hp.n_embd, V = m->hp.n_vocab, n = NP - 1;
	float *h = malloc((size_t)NP * E * sizeof *h);
	float *got = malloc((size_t)n * V * sizeof *got);
	double *want = malloc((size_t)n * V * sizeof *want);
	ASSERT_EQ(main_hidden(m, h), 0);
	shoal_mtp *t = mtp_open(m, 2);
	ASSERT_TRUE(t != NULL);
	uint32_t slot, pos[NP], sess[NP];
	uint8_t want_l[NP];
	ASSERT_EQ(shoal_engine_session_open(shoal_mtp_engine(t), &slot), SHOAL_OK);
	for (uint32_t i = 0; i < n; i++) {
		pos[i] = i;
		sess[i] = slot;
		want_l[i] = 1;
	}
	char why[SHOAL_WHY_LEN] = "";
	shoal_mtp_batch b = {.n_rows = n,
	                     .hidden = h,
	                     .next = PROMPT + 1,
	                     .session = sess,
	                     .pos = pos,
	                     .want_logits = want_l,
	                     .logits = got};
	ASSERT_EQ(shoal_mtp_run(t, &b, why, sizeof why), SHOAL_OK);
	reference(m, h, PROMPT + 1, n, REF_PLAIN, want);
	double scale, d = max_abs_diff(got, want, (size_t)n * V, &scale);
	printf("  %s: max |logit - plain| %.3g (logits up to %.3g)\n", path, d, scale);
	ASSERT_TRUE(scale > 0.1);
	ASSERT_TRUE(d <= tol * scale);
	/* the test tells the concatenation's order and the output norm apart */
	reference(m, h, PROMPT + 1, n, REF_SWAP_CAT, want);
	double d_swap = max_abs_diff(got, want, (size_t)n * V, &scale);
	reference(m, h, PROMPT + 1, n, REF_NO_OUT_NORM, want);
	double d_nonorm = max_abs_diff(got, want, (size_t)n * V, &scale);
	printf("  wrong variants: swapped concatenation %.3g, no output norm %.3g\n", d_swap,
	       d_nonorm);
	ASSERT_TRUE(d_swap > 4 * d && d_swap > 10 * tol * scale);
	ASSERT_TRUE(d_nonorm > 4 * d);

	/* one row at a time, in a second session: bitwise the same */
	uint32_t s2;
	float *one = malloc((size_t)V * sizeof *one);
	ASSERT_EQ(shoal_engine_session_open(shoal_mtp_engine(t), &s2), SHOAL_OK);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t w1 = 1;
		shoal_mtp_batch b1 = {.n_rows = 1,
		                      .hidden = h + (size_t)i * E,
		                      .next = PROMPT + 1 + i,
		                      .session = &s2,
		                      .pos = &pos[i],
		                      .want_logits = &w1,
		                      .logits = one};
		ASSERT_EQ(shoal_mtp_run(t, &b1, why, sizeof why), SHOAL_OK);
		ASSERT_MEM_EQ(one, got + (size_t)i * V, (size_t)V * sizeof *one);
	}
	free(one);
	free(h);
	free(got);
	free(want);
	shoal_mtp_free(t);
	shoal_model_free(m);
}

static void test_softmax_qlora(void)
{
	check_fixture(fx_softmax(), 1e-4);
}

static void test_sigmoid_plainq(void)
{
	check_fixture(fx_sigmoid(), 1e-4);
}

/* Q8_0 weights: the plain computation reads them exactly; the engine's
 * matrix products round the activations to Q8_0 too, hence the looser
 * bound (still far below the wrong variants' distance). */
static void test_q8_0(void)
{
	check_fixture(fx_q8(), 2e-2);
}

/* The drafter: pushes of the prompt's rows (in two pieces) propose the
 * argmax of the last row's MTP logits, for the history that follows. */
static void test_drafter(void)
{
	shoal_model *m = open_model(fx_softmax());
	ASSERT_TRUE(m != NULL);
	const uint32_t E = m->hp.n_embd, V = m->hp.n_vocab, n = NP - 1;
	float *h = malloc((size_t)NP * E * sizeof *h);
	float *lg = malloc((size_t)V * sizeof *lg);
	ASSERT_EQ(main_hidden(m, h), 0);
	shoal_mtp *t = mtp_open(m, 2);
	ASSERT_TRUE(t != NULL);
	/* the plain run's last row */
	uint32_t slot, pos[NP], sess[NP];
	uint8_t wl[NP] = {0};
	ASSERT_EQ(shoal_engine_session_open(shoal_mtp_engine(t), &slot), SHOAL_OK);
	for (uint32_t i = 0; i < n; i++) {
		pos[i] = i;
		sess[i] = slot;
	}
	wl[n - 1] = 1;
	char why[SHOAL_WHY_LEN] = "";
	shoal_mtp_batch b = {.n_rows = n,
	                     .hidden = h,
	                     .next = PROMPT + 1,
	                     .session = sess,
	                     .pos = pos,
	                     .want_logits = wl,
	                     .logits = lg};
	ASSERT_EQ(shoal_mtp_run(t, &b, why, sizeof why), SHOAL_OK);
	int32_t best = argmax(lg, V);

	shoal_drafter d;
	int32_t out[4] = {-1, -1, -1, -1};
	ASSERT_EQ(shoal_mtp_drafter_new(t, &d, why, sizeof why), SHOAL_OK);
	ASSERT_STR_EQ(d.ops->name, "mtp");
	ASSERT_EQ(d.ops->propose(d.self, PROMPT, NP, out, 4), 0); /* nothing pushed */
	ASSERT_EQ(shoal_mtp_drafter_push(&d, 0, 5, h, PROMPT + 1, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(
	    shoal_mtp_drafter_push(&d, 5, n - 5, h + (size_t)5 * E, PROMPT + 6, why, sizeof why),
	    SHOAL_OK);
	ASSERT_EQ(d.ops->propose(d.self, PROMPT, NP, out, 4), 1);
	ASSERT_EQ(out[0], best);
	ASSERT_EQ(d.ops->propose(d.self, PROMPT, NP - 1, out, 4), 0); /* out of step */
	ASSERT_EQ(d.ops->propose(d.self, PROMPT, NP, out, 0), 0);
	d.ops->feedback(d.self, 1, 0);
	/* a rewind: pushing from an earlier position again gives the same */
	out[0] = -1;
	ASSERT_EQ(
	    shoal_mtp_drafter_push(&d, 3, n - 3, h + (size_t)3 * E, PROMPT + 4, why, sizeof why),
	    SHOAL_OK);
	ASSERT_EQ(d.ops->propose(d.self, PROMPT, NP, out, 1), 1);
	ASSERT_EQ(out[0], best);
	/* a gap is refused by the layer's engine */
	ASSERT_EQ(shoal_mtp_drafter_push(&d, NP + 3, 1, h, PROMPT, why, sizeof why),
	          SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "gap") != NULL);
	/* a next id not known (-1) is a zeroed embedding, as at position 0
	 * always: row 0 guesses the same with it; below -1 is refused */
	ASSERT_EQ(shoal_mtp_drafter_push(&d, 0, 1, h, PROMPT + 1, why, sizeof why), SHOAL_OK);
	int32_t g_known = shoal_mtp_drafter_guess(&d), unknown = -1, bad = -2;
	ASSERT_EQ(shoal_mtp_drafter_len(&d), 1);
	ASSERT_EQ(shoal_mtp_drafter_push(&d, 0, 1, h, &unknown, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_mtp_drafter_guess(&d), g_known);
	ASSERT_EQ(shoal_mtp_drafter_push(&d, 0, 1, h, &bad, why, sizeof why), SHOAL_ERR_RANGE);
	d.ops->free(d.self);
	free(h);
	free(lg);
	shoal_mtp_free(t);
	shoal_model_free(m);
}

/* A weights cache that has fetched everything but the MTP projection. */
static bool held_but_eh(void *ctx, const struct shoal_gguf_tensor *t)
{
	(void)ctx;
	return strstr(t->name, "nextn.eh_proj") == NULL;
}

/* Bad input: a model without an MTP layer, a tensor not held, ids outside
 * the vocabulary, too many rows. */
static void test_errors(void)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m0 = open_model(fx_path("mtp-none", FX_ARGS "--q-lora 64 --nextn 0"));
	ASSERT_TRUE(m0 != NULL);
	ASSERT_TRUE(m0->nextn == NULL);
	shoal_engine_config c = shoal_engine_config_default(m0);
	c.backend = shoal_backend_cpu();
	shoal_mtp *t = NULL;
	ASSERT_EQ(shoal_mtp_new(m0, &c, &t, why, sizeof why), SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "no MTP layer") != NULL);
	ASSERT_TRUE(t == NULL);
	shoal_model_free(m0);

	shoal_model *m = open_model(fx_softmax());
	ASSERT_TRUE(m != NULL);
	c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.tensor_held = held_but_eh;
	ASSERT_EQ(shoal_mtp_new(m, &c, &t, why, sizeof why), SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "blk.4.nextn.eh_proj.weight is not held") != NULL);
	t = mtp_open(m, 1);
	ASSERT_TRUE(t != NULL);
	uint32_t slot, pos = 0;
	float *h = calloc(m->hp.n_embd, sizeof *h);
	int32_t bad = 300;
	ASSERT_EQ(shoal_engine_session_open(shoal_mtp_engine(t), &slot), SHOAL_OK);
	shoal_mtp_batch b = {.n_rows = 1, .hidden = h, .next = &bad, .session = &slot, .pos = &pos};
	ASSERT_EQ(shoal_mtp_run(t, &b, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "outside the vocabulary") != NULL);
	b.n_rows = 17;
	ASSERT_EQ(shoal_mtp_run(t, &b, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_EQ(shoal_engine_session_len(shoal_mtp_engine(t), slot), 0);
	free(h);
	shoal_mtp_free(t);
	shoal_model_free(m);
}

/* The layer on the Vulkan backend (lavapipe here), against the same plain
 * computation. */
static void test_vulkan(void)
{
	char why[256] = "";
	if (!shoal_backend_vulkan_available(why, sizeof why))
		TEST_SKIP("no Vulkan device");
	mtp_backend = shoal_backend_vulkan();
	check_fixture(fx_softmax(), 1e-3);
	mtp_backend = NULL;
}

static void test_cleanup(void)
{
	fx_cleanup();
}

TEST_MAIN(TEST_CASE(test_softmax_qlora), TEST_CASE(test_sigmoid_plainq), TEST_CASE(test_q8_0),
          TEST_CASE(test_drafter), TEST_CASE(test_errors), TEST_CASE(test_vulkan),
          TEST_CASE(test_cleanup))
