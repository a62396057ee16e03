/*
 * tests/unit/test_vulkan_attn.c: the Vulkan backend's attention
 * (runtime/vulkan/vk_attn.c) against the CPU backend's scalar twin and a
 * double-precision reference, on random inputs: F32 and F16 caches, GQA
 * groups 1/4/8, head_dim 64/128 and the MLA shape (576, one KV head,
 * k == v, 16 query heads), decode rows of different sessions with
 * different lengths (1, and lengths on both sides of the shader's tile of
 * 64), prefill chunks (rows of one session at consecutive positions,
 * causal by n_kv), more decode rows than one dispatch takes, planes in
 * separate buffers, a plane larger than one storage buffer binds, and
 * gpt-oss's attention sinks (one per query head: one more score in the
 * softmax's sum, with no value; sinks far above and below the scores
 * too) with sliding-window rows (each row's planes start at its window's
 * first position, as engine_steps.c offsets them; the positions before
 * every row's window hold NaN bytes).
 * Outputs are poisoned (NaN bytes) before each run and the cache past
 * each session's last position holds NaN bytes, so a read past n_kv
 * shows. Each row run alone must give the batch's bits (backend.h:
 * results independent of the batch). A head wider than the shader holds
 * aborts with a message before touching the device.
 *
 * Without a Vulkan device the program skips (77); under CI=true a missing
 * device fails.
 */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/backends.h"
#include "runtime/cpu/quant.h"
#include "tests/unit/test.h"

/*
 * The bound, on |out - reference| / max|v| (an output is a convex
 * combination of the rows of v, so max|v| is its scale; here max|v| ~ 1,
 * |q| <= 2, n_kv <= 257, head_dim <= 576). The reference is the exact
 * attention in double over the cache's values as stored. Where the GPU's
 * F32 rounds (u = 2^-24 = 6e-8):
 *   - the sum over n_kv positions of p_t v_t, in order: at most n_kv u
 *     (1.5e-5), about sqrt(n_kv) u (1e-6) for random signs;
 *   - a score is an F32 dot over head_dim terms of rms ~0.7, times
 *     1/sqrt(head_dim): its error grows like sqrt(head_dim) u times the
 *     partial sums (~16 at 576) over sqrt(576): ~1e-6, and an error d in a
 *     score moves the output by at most 2 d;
 *   - the online softmax rescales by one exp() per tile of 64 positions
 *     (Vulkan lets exp be 3 + 2|x| ulp: a few 1e-7 each, <= 5 tiles).
 * 2e-5 covers the first term's worst case plus the others' typical size;
 * the largest error seen on lavapipe is 7e-7. The CPU scalar twin (its
 * sum in double) must meet the same bound, and the two agree within
 * twice it.
 */
#define BOUND 2e-5

static const shoal_backend_ops *vk_ops, *cpu_ops;
static shoal_backend *vk, *cpu;
static char vk_why[256];
static double worst_vk, worst_cpu;

static bool setup(void)
{
	static bool tried;
	if (tried)
		return vk != NULL;
	tried = true;
	setenv("SHOAL_ISA", "scalar", 1);
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 1024, .max_rows = 256, .max_n = 16 * 576, .max_group = 16};
	shoal_backend_opts o = {.name = "cpu"};
	if (shoal_backend_pick(&o, &cpu_ops, vk_why, sizeof vk_why) != SHOAL_OK ||
	    cpu_ops->create(&lim, &cpu) != SHOAL_OK) {
		fprintf(stderr, "the CPU backend: %s\n", vk_why);
		exit(1);
	}
	o.name = "vulkan";
	if (shoal_backend_pick(&o, &vk_ops, vk_why, sizeof vk_why) != SHOAL_OK)
		return false;
	if (vk_ops->create(&lim, &vk) != SHOAL_OK) {
		snprintf(vk_why, sizeof vk_why, "the vulkan backend's create failed");
		return false;
	}
	return true;
}

#define NEED_DEVICE()                                                                              \
	do {                                                                                       \
		if (!setup()) {                                                                    \
			const char *ci = getenv("CI");                                             \
			if (ci && !strcmp(ci, "true")) {                                           \
				fprintf(stderr, "CI=true and no Vulkan device: %s\n", vk_why);     \
				exit(1);                                                           \
			}                                                                          \
			TEST_SKIP(vk_why);                                                         \
		}                                                                                  \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(float lo, float hi) /* uniform in [lo, hi) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

/* One case: n_rows rows, row r of session sess[r] seeing n_kv[r]. */
typedef struct acase {
	shoal_dtype t;
	uint32_t n_head, n_head_kv, head_dim, n_ctx;
	bool mla;      /* one plane: k == v */
	bool own_bufs; /* each session's planes in buffers of their own */
	uint32_t n_sess, n_rows;
	const uint32_t *sess, *n_kv;
	const float *sinks;    /* (n_head) or NULL */
	const uint32_t *first; /* (n_rows): row r's planes start at this position; or NULL */
	/* with first: the same rows again over ring planes of this many
	 * positions (position p at slot p % ring, row r from first[r]),
	 * which must give the window's bits on both backends; or 0 */
	uint32_t ring;
} acase;

/* One backend's copy of a case's memory. */
typedef struct side {
	const shoal_backend_ops *ops;
	shoal_backend *b;
	shoal_backend_buf *bufs[2 * 160 + 3];
	uint32_t n_buf;
	const void **k, **v; /* (n_rows) device addresses */
	float *q, *out, *out1;
	float *sinks; /* (n_head) device address, or NULL */
} side;

static void *alloc(side *s, size_t bytes)
{
	shoal_backend_buf *buf = NULL;
	if (s->ops->buf_alloc(s->b, bytes, &buf) != SHOAL_OK) {
		fprintf(stderr, "buf_alloc of %zu bytes failed\n", bytes);
		exit(1);
	}
	s->bufs[s->n_buf++] = buf;
	return s->ops->buf_addr(buf);
}

static void release(side *s)
{
	for (uint32_t i = 0; i < s->n_buf; i++)
		s->ops->buf_free(s->b, s->bufs[i]);
	free(s->k);
	free(s->v);
}

/* Lay the case out on a backend: q, the planes (bytes per session), two
 * poisoned outputs. */
static void place(side *s, const acase *c, const float *q, uint8_t *const *kb, uint8_t *const *vb,
                  size_t plane_bytes)
{
	size_t ld = (size_t)c->n_head * c->head_dim, act = (size_t)c->n_rows * ld * sizeof(float);
	s->q = alloc(s, act);
	s->out = alloc(s, act);
	s->out1 = alloc(s, act);
	s->ops->write(s->b, s->q, q, act);
	uint8_t *nan = malloc(act);
	memset(nan, 0xff, act);
	s->ops->write(s->b, s->out, nan, act);
	s->ops->write(s->b, s->out1, nan, act);
	free(nan);
	uint8_t *kall = NULL, *vall = NULL;
	if (!c->own_bufs) {
		kall = alloc(s, plane_bytes * c->n_sess);
		vall = c->mla ? kall : alloc(s, plane_bytes * c->n_sess);
	}
	const void **kp = calloc(c->n_sess, sizeof *kp), **vp = calloc(c->n_sess, sizeof *vp);
	for (uint32_t i = 0; i < c->n_sess; i++) {
		uint8_t *k = kall ? kall + i * plane_bytes : alloc(s, plane_bytes);
		uint8_t *v = c->mla ? k : vall ? vall + i * plane_bytes : alloc(s, plane_bytes);
		s->ops->write(s->b, k, kb[i], plane_bytes);
		if (!c->mla)
			s->ops->write(s->b, v, vb[i], plane_bytes);
		kp[i] = k;
		vp[i] = v;
	}
	s->k = calloc(c->n_rows, sizeof *s->k);
	s->v = calloc(c->n_rows, sizeof *s->v);
	size_t es = c->t == SHOAL_DTYPE_F16 ? 2 : 4;
	for (uint32_t r = 0; r < c->n_rows; r++) {
		size_t skip = c->first ? (size_t)c->first[r] * c->head_dim * es : 0;
		s->k[r] = (const uint8_t *)kp[c->sess[r]] + skip;
		s->v[r] = (const uint8_t *)vp[c->sess[r]] + skip;
	}
	s->sinks = NULL;
	if (c->sinks) {
		s->sinks = alloc(s, c->n_head * sizeof(float));
		s->ops->write(s->b, s->sinks, c->sinks, c->n_head * sizeof(float));
	}
	free(kp);
	free(vp);
}

static shoal_backend_attn args(const side *s, const acase *c)
{
	return (shoal_backend_attn){.n_rows = c->n_rows,
	                            .n_head = c->n_head,
	                            .n_head_kv = c->n_head_kv,
	                            .head_dim = c->head_dim,
	                            .scale = 1.0f / sqrtf((float)c->head_dim),
	                            .q = s->q,
	                            .kv_type = c->t,
	                            .k = s->k,
	                            .v = s->v,
	                            .head_ld = (size_t)c->n_ctx * c->head_dim,
	                            .pos_ld = c->head_dim,
	                            .n_kv = c->n_kv,
	                            .out = s->out,
	                            .sinks = s->sinks};
}

/* Case c's rows over ring planes of c->ring positions (each session's
 * positions [lo[i], used[i]) of kb/vb moved to slot p % ring, NaN
 * elsewhere): whether each backend gives the bits it gave over the whole
 * planes with offset pointers (og: Vulkan, oh: CPU). */
static bool ring_matches(const acase *c, const float *q, uint8_t *const *kb, uint8_t *const *vb,
                         const uint32_t *lo, const uint32_t *used, const float *og, const float *oh)
{
	uint32_t hd = c->head_dim, R = c->ring;
	size_t es = c->t == SHOAL_DTYPE_F16 ? 2 : 4, row = (size_t)hd * es;
	size_t ring_bytes = (size_t)c->n_head_kv * R * row;
	uint8_t **kr = calloc(c->n_sess, sizeof *kr), **vr = calloc(c->n_sess, sizeof *vr);
	for (uint32_t i = 0; i < c->n_sess; i++) {
		if (used[i] - lo[i] > R) {
			fprintf(stderr, "ring %u: session %u reads %u positions\n", R, i,
			        used[i] - lo[i]);
			abort(); /* the case is wrong, not a backend */
		}
		kr[i] = malloc(ring_bytes);
		vr[i] = malloc(ring_bytes);
		memset(kr[i], 0xff, ring_bytes);
		memset(vr[i], 0xff, ring_bytes);
		for (uint32_t h = 0; h < c->n_head_kv; h++)
			for (uint32_t p = lo[i]; p < used[i]; p++) {
				size_t from = ((size_t)h * c->n_ctx + p) * row;
				size_t to = ((size_t)h * R + p % R) * row;
				memcpy(kr[i] + to, kb[i] + from, row);
				memcpy(vr[i] + to, vb[i] + from, row);
			}
	}
	acase rc = *c;
	rc.n_ctx = R;
	rc.first = NULL; /* the planes' bases: the ring's slots do the rest */
	size_t act = (size_t)c->n_rows * c->n_head * hd;
	float *o = malloc(act * sizeof *o);
	bool same = true;
	for (int w = 0; w < 2; w++) {
		side s = {.ops = w ? cpu_ops : vk_ops, .b = w ? cpu : vk};
		place(&s, &rc, q, kr, vr, ring_bytes);
		shoal_backend_attn a = args(&s, &rc);
		a.ring = R;
		a.first = c->first;
		s.ops->attention(s.b, &a);
		s.ops->read(s.b, s.out, o, act * sizeof *o);
		if (memcmp(o, w ? oh : og, act * sizeof *o)) {
			fprintf(stderr, "ring %u: the %s backend's bits differ from its window's\n",
			        R, s.ops->name);
			same = false;
		}
		release(&s);
	}
	free(o);
	for (uint32_t i = 0; i < c->n_sess; i++) {
		free(kr[i]);
		free(vr[i]);
	}
	free(kr);
	free(vr);
	return same;
}

/* Run case c on both backends and check it; *max_err gets the worst
 * Vulkan error over max|v|. */
static void run_case(const acase *c)
{
	uint32_t hd = c->head_dim, group = c->n_head / c->n_head_kv;
	size_t ld = (size_t)c->n_head * hd, es = c->t == SHOAL_DTYPE_F16 ? 2 : 4;
	size_t plane_elems = (size_t)c->n_head_kv * c->n_ctx * hd, plane_bytes = plane_elems * es;
	/* the values as stored, per session, and their bytes */
	float **kf = calloc(c->n_sess, sizeof *kf), **vf = calloc(c->n_sess, sizeof *vf);
	uint8_t **kb = calloc(c->n_sess, sizeof *kb), **vb = calloc(c->n_sess, sizeof *vb);
	uint32_t *s_lo = calloc(c->n_sess, sizeof *s_lo),
	         *s_used = calloc(c->n_sess, sizeof *s_used);
	for (uint32_t i = 0; i < c->n_sess; i++) {
		/* positions [lo, used): what any row of the session reads */
		uint32_t used = 0, lo = UINT32_MAX;
		for (uint32_t r = 0; r < c->n_rows; r++) {
			uint32_t f = c->first ? c->first[r] : 0;
			if (c->sess[r] == i && f + c->n_kv[r] > used)
				used = f + c->n_kv[r];
			if (c->sess[r] == i && f < lo)
				lo = f;
		}
		s_lo[i] = lo;
		s_used[i] = used;
		for (int w = 0; w < 2; w++) {
			float *f = malloc(plane_elems * sizeof *f);
			uint8_t *bytes = malloc(plane_bytes);
			memset(bytes, 0xff, plane_bytes); /* NaN past the used positions */
			for (size_t e = 0; e < plane_elems; e++) {
				size_t pos = (e / hd) % c->n_ctx;
				f[e] = NAN;
				if (pos >= used || pos < lo)
					continue;
				float x = frand(-1.0f, 1.0f);
				if (c->t == SHOAL_DTYPE_F16) {
					uint16_t h = shoal_f32_to_fp16(x);
					memcpy(bytes + e * 2, &h, 2);
					x = shoal_fp16_to_f32(h);
				} else
					memcpy(bytes + e * 4, &x, 4);
				f[e] = x;
			}
			if (w == 0) {
				kf[i] = f;
				kb[i] = bytes;
			} else {
				vf[i] = f;
				vb[i] = bytes;
			}
		}
		if (c->mla) {
			memcpy(vf[i], kf[i], plane_elems * sizeof(float));
			memcpy(vb[i], kb[i], plane_bytes);
		}
	}
	float *q = malloc((size_t)c->n_rows * ld * sizeof *q);
	for (size_t i = 0; i < (size_t)c->n_rows * ld; i++)
		q[i] = frand(-2.0f, 2.0f);

	side g = {.ops = vk_ops, .b = vk}, h = {.ops = cpu_ops, .b = cpu};
	place(&g, c, q, kb, vb, plane_bytes);
	place(&h, c, q, kb, vb, plane_bytes);
	shoal_backend_attn ag = args(&g, c), ah = args(&h, c);
	vk_ops->attention(vk, &ag);
	cpu_ops->attention(cpu, &ah);
	/* each row alone, into the second output */
	for (uint32_t r = 0; r < c->n_rows; r++) {
		shoal_backend_attn one = ag;
		one.n_rows = 1;
		one.q = g.q + r * ld;
		one.k = g.k + r;
		one.v = g.v + r;
		one.n_kv = c->n_kv + r;
		one.out = g.out1 + r * ld;
		vk_ops->attention(vk, &one);
	}
	size_t act = (size_t)c->n_rows * ld;
	float *og = malloc(act * sizeof *og), *o1 = malloc(act * sizeof *o1);
	float *oh = malloc(act * sizeof *oh);
	vk_ops->read(vk, g.out, og, act * sizeof *og);
	vk_ops->read(vk, g.out1, o1, act * sizeof *o1);
	cpu_ops->read(cpu, h.out, oh, act * sizeof *oh);
	bool ring_same = !c->ring || ring_matches(c, q, kb, vb, s_lo, s_used, og, oh);

	double err_g = 0, err_h = 0, err_gh = 0;
	bool bits_same = !memcmp(og, o1, act * sizeof *og);
	double *p = malloc(c->n_ctx * sizeof *p);
	for (uint32_t r = 0; r < c->n_rows; r++) {
		const float *K = kf[c->sess[r]], *V = vf[c->sess[r]];
		uint32_t n = c->n_kv[r], f = c->first ? c->first[r] : 0;
		for (uint32_t hh = 0; hh < c->n_head; hh++) {
			size_t base = ((size_t)(hh / group) * c->n_ctx + f) * hd;
			const float *qr = q + r * ld + (size_t)hh * hd;
			double sink = c->sinks ? c->sinks[hh] : -INFINITY;
			double mx = sink, sum = c->sinks ? 1 : 0, vmax = 0;
			for (uint32_t t = 0; t < n; t++) {
				double s = 0;
				for (uint32_t d = 0; d < hd; d++)
					s += (double)qr[d] * K[base + (size_t)t * hd + d];
				p[t] = s / sqrt((double)hd);
				mx = p[t] > mx ? p[t] : mx;
			}
			if (c->sinks) /* the sink's own term, rescaled to the max */
				sum = exp(sink - mx);
			for (uint32_t t = 0; t < n; t++) {
				p[t] = exp(p[t] - mx);
				sum += p[t];
				for (uint32_t d = 0; d < hd; d++)
					vmax = fmax(vmax, fabs(V[base + (size_t)t * hd + d]));
			}
			for (uint32_t d = 0; d < hd; d++) {
				double ref = 0;
				for (uint32_t t = 0; t < n; t++)
					ref += p[t] / sum * V[base + (size_t)t * hd + d];
				size_t at = r * ld + (size_t)hh * hd + d;
				/* NaN (poison left, or a masked read) fails every test */
				double eg = fabs(og[at] - ref) / vmax,
				       eh = fabs(oh[at] - ref) / vmax;
				double egh = fabs((double)og[at] - oh[at]) / vmax;
				err_g = isnan(eg) || eg > err_g ? eg : err_g;
				err_h = isnan(eh) || eh > err_h ? eh : err_h;
				err_gh = isnan(egh) || egh > err_gh ? egh : err_gh;
			}
		}
	}
	free(p);
	free(og);
	free(o1);
	free(oh);
	free(q);
	for (uint32_t i = 0; i < c->n_sess; i++) {
		free(kf[i]);
		free(vf[i]);
		free(kb[i]);
		free(vb[i]);
	}
	free(kf);
	free(vf);
	free(kb);
	free(vb);
	free(s_lo);
	free(s_used);
	release(&g);
	release(&h);
	if (!isnan(err_g) && err_g > worst_vk)
		worst_vk = err_g;
	if (!isnan(err_h) && err_h > worst_cpu)
		worst_cpu = err_h;
	printf("  %s hd %u heads %u/%u rows %u%s%s%s: vulkan %.3g, cpu %.3g, apart %.3g\n",
	       c->t == SHOAL_DTYPE_F16 ? "f16" : "f32", hd, c->n_head, c->n_head_kv, c->n_rows,
	       c->sinks ? " sinks" : "", c->first ? " window" : "",
	       c->ring ? (ring_same ? " ring: same bits" : " ring: DIFFERENT bits") : "", err_g,
	       err_h, err_gh);
	ASSERT_TRUE(err_g <= BOUND);
	ASSERT_TRUE(err_h <= BOUND);
	ASSERT_TRUE(err_gh <= 2 * BOUND);
	ASSERT_TRUE(bits_same);
	ASSERT_TRUE(ring_same);
}

/* Decode: one row per session, lengths around the tile of 64. */
static void decode(shoal_dtype t, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, bool mla)
{
	static const uint32_t lens[] = {1, 63, 64, 65, 130, 7, 257};
	uint32_t n = sizeof lens / sizeof *lens, sess[7];
	for (uint32_t i = 0; i < n; i++)
		sess[i] = i;
	acase c = {.t = t,
	           .n_head = n_head,
	           .n_head_kv = n_head_kv,
	           .head_dim = hd,
	           .n_ctx = 300,
	           .mla = mla,
	           .n_sess = n,
	           .n_rows = n,
	           .sess = sess,
	           .n_kv = lens};
	run_case(&c);
}

/* Prefill: a decode row of session 0, a chunk of 19 rows of session 1 at
 * positions 50..68 (blocks of 8, 8, 3), a chunk of 5 rows of session 2
 * from position 0, and a decode row of session 0 again. */
static void prefill(shoal_dtype t, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, bool mla,
                    bool own_bufs)
{
	uint32_t sess[26], lens[26], n = 0;
	sess[n] = 0, lens[n++] = 100;
	for (uint32_t i = 0; i < 19; i++)
		sess[n] = 1, lens[n++] = 51 + i;
	for (uint32_t i = 0; i < 5; i++)
		sess[n] = 2, lens[n++] = 1 + i;
	sess[n] = 0, lens[n++] = 100;
	acase c = {.t = t,
	           .n_head = n_head,
	           .n_head_kv = n_head_kv,
	           .head_dim = hd,
	           .n_ctx = 128,
	           .mla = mla,
	           .own_bufs = own_bufs,
	           .n_sess = 3,
	           .n_rows = n,
	           .sess = sess,
	           .n_kv = lens};
	run_case(&c);
}

static void test_decode_f32(void)
{
	NEED_DEVICE();
	decode(SHOAL_DTYPE_F32, 2, 2, 64, false);  /* group 1 */
	decode(SHOAL_DTYPE_F32, 8, 2, 128, false); /* group 4 */
	decode(SHOAL_DTYPE_F32, 16, 2, 64, false); /* group 8 */
}

static void test_decode_f16(void)
{
	NEED_DEVICE();
	decode(SHOAL_DTYPE_F16, 3, 3, 128, false);
	decode(SHOAL_DTYPE_F16, 4, 1, 64, false);
	decode(SHOAL_DTYPE_F16, 8, 1, 128, false);
}

static void test_prefill(void)
{
	NEED_DEVICE();
	prefill(SHOAL_DTYPE_F32, 4, 1, 64, false, false);
	prefill(SHOAL_DTYPE_F16, 8, 1, 128, false, true);
	prefill(SHOAL_DTYPE_F32, 16, 2, 128, false, true);
	prefill(SHOAL_DTYPE_F16, 2, 2, 64, false, false);
}

static void test_mla(void)
{
	NEED_DEVICE();
	decode(SHOAL_DTYPE_F16, 16, 1, 576, true);
	decode(SHOAL_DTYPE_F32, 16, 1, 576, true);
	prefill(SHOAL_DTYPE_F16, 16, 1, 576, true, false);
	prefill(SHOAL_DTYPE_F32, 16, 1, 576, true, true);
}

/* gpt-oss's sinks: per query head, some near the scores (|s| <~ 3
 * here), one far above them (30: nearly all the weight goes to the sink,
 * the output is ~e^-27 of v's scale), one far below (-30: no effect);
 * decode rows around the tile of 64 and a prefill chunk, F32 and F16,
 * groups 1, 4 and 8; then sliding-window rows (window 20: row r of a
 * chunk at positions 40..58 sees [p - 19, p]) with and without sinks,
 * over whole planes and over rings (ABI 7). */
static void test_sinks(void)
{
	NEED_DEVICE();
	float sinks[16];
	for (uint32_t h = 0; h < 16; h++)
		sinks[h] = frand(-3.0f, 3.0f);
	sinks[1] = 30.0f;
	sinks[2] = -30.0f;
	static const uint32_t lens[] = {1, 63, 64, 65, 130, 7, 257};
	uint32_t sess[26], plen[26], first[26];
	for (uint32_t i = 0; i < 7; i++)
		sess[i] = i;
	acase c = {.t = SHOAL_DTYPE_F32,
	           .n_head = 8,
	           .n_head_kv = 2,
	           .head_dim = 64,
	           .n_ctx = 300,
	           .n_sess = 7,
	           .n_rows = 7,
	           .sess = sess,
	           .n_kv = lens,
	           .sinks = sinks};
	run_case(&c);
	c.t = SHOAL_DTYPE_F16, c.n_head = 3, c.n_head_kv = 3, c.head_dim = 128;
	run_case(&c);
	c.n_head = 16, c.n_head_kv = 2, c.head_dim = 64;
	run_case(&c);
	/* a prefill chunk of 19 rows at positions 40..58 and a decode row */
	for (uint32_t i = 0; i < 19; i++)
		sess[i] = 0, plen[i] = 41 + i, first[i] = 0;
	sess[19] = 1, plen[19] = 90, first[19] = 0;
	c.t = SHOAL_DTYPE_F32, c.n_head = 4, c.n_head_kv = 1, c.n_ctx = 128;
	c.n_sess = 2, c.n_rows = 20, c.n_kv = plen;
	run_case(&c);
	/* the same rows through a window of 20 */
	for (uint32_t i = 0; i < 20; i++) {
		first[i] = plen[i] > 20 ? plen[i] - 20 : 0;
		plen[i] -= first[i];
	}
	c.first = first;
	run_case(&c);
	c.t = SHOAL_DTYPE_F16, c.sinks = NULL;
	run_case(&c);
	/* and over rings of 40 positions (session 0's rows read positions
	 * 21..58: their windows wrap past slot 39), with and without sinks */
	c.ring = 40;
	run_case(&c);
	c.t = SHOAL_DTYPE_F32, c.sinks = sinks;
	run_case(&c);
}

/* More decode rows than one dispatch holds (vk_attn.c: 128 blocks). */
static void test_many_rows(void)
{
	NEED_DEVICE();
	enum { N = 150 };
	uint32_t sess[N], lens[N];
	for (uint32_t i = 0; i < N; i++)
		sess[i] = i, lens[i] = 1 + i % 9;
	acase c = {.t = SHOAL_DTYPE_F16,
	           .n_head = 4,
	           .n_head_kv = 2,
	           .head_dim = 64,
	           .n_ctx = 9,
	           .n_sess = N,
	           .n_rows = N,
	           .sess = sess,
	           .n_kv = lens};
	run_case(&c);
}

/* A plane larger than what one storage buffer binds on lavapipe (128
 * MiB; vk_core.c binds such ranges through windows every 64 MiB): 8 KV
 * heads of 160 Ki positions, F16, k == v, 160 MiB; the last heads start
 * past the first window, so each head must be resolved on its own. */
static void test_big_plane(void)
{
	NEED_DEVICE();
	uint32_t sess[3] = {0, 0, 0}, lens[3] = {98, 99, 100};
	acase c = {.t = SHOAL_DTYPE_F16,
	           .n_head = 16,
	           .n_head_kv = 8,
	           .head_dim = 64,
	           .n_ctx = 160 * 1024,
	           .mla = true,
	           .n_sess = 1,
	           .n_rows = 3,
	           .sess = sess,
	           .n_kv = lens};
	run_case(&c);
}

/* A head wider than attn.comp holds (640) is a caller's bug: the op
 * aborts with a message naming it, before touching the device. */
static void test_head_dim_too_large(void)
{
	NEED_DEVICE();
	int fd[2];
	ASSERT_EQ(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		uint32_t n_kv = 1;
		const void *plane = NULL;
		shoal_backend_attn a = {.n_rows = 1,
		                        .n_head = 1,
		                        .n_head_kv = 1,
		                        .head_dim = 704,
		                        .scale = 1.0f,
		                        .kv_type = SHOAL_DTYPE_F16,
		                        .k = &plane,
		                        .v = &plane,
		                        .head_ld = 704,
		                        .pos_ld = 704,
		                        .n_kv = &n_kv};
		vk_ops->attention(vk, &a);
		_exit(0);
	}
	close(fd[1]);
	char msg[512] = "";
	size_t len = 0;
	ssize_t got;
	while (len + 1 < sizeof msg && (got = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0)
		len += (size_t)got;
	close(fd[0]);
	int st = 0;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	ASSERT_TRUE(strstr(msg, "head_dim 704") != NULL);
}

static void test_bound(void)
{
	NEED_DEVICE();
	printf("  worst over the cases: vulkan %.3g, cpu %.3g (bound %g)\n", worst_vk, worst_cpu,
	       BOUND);
	ASSERT_TRUE(worst_vk > 0); /* the cases ran and compared something */
	vk_ops->destroy(vk);
	cpu_ops->destroy(cpu);
	vk = cpu = NULL;
}

TEST_MAIN(TEST_CASE(test_decode_f32), TEST_CASE(test_decode_f16), TEST_CASE(test_prefill),
          TEST_CASE(test_mla), TEST_CASE(test_sinks), TEST_CASE(test_many_rows),
          TEST_CASE(test_big_plane), TEST_CASE(test_head_dim_too_large), TEST_CASE(test_bound))
