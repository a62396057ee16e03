/*
 * runtime/vulkan/vk_moe.c: the Vulkan backend's MoE ops (backend.h's
 * moe_ffn and moe_route): the routed experts of a batch of rows recorded as a handful of
 * dispatches, with the routing (ids, weights) read by the shaders from
 * device memory, so that a layer's experts cost no read-back:
 *   1. x rounded as matmul rounds it for the gate and up weights (Q8_0 /
 *      Q8_K, vk__act_round), once per activation type;
 *   2. G (slot, n_ff) = gate_e x and U = up_e x for every slot s = r k + j
 *      of every row r, e = ids[s] (shaders/moe_vec.glsl, one shader per
 *      weight type, expert chosen in the shader);
 *   3. G = silu(G) * U (the swiglu op);
 *   4. G rounded for the down weights into U where they want it;
 *   5. Y (slot, n_embd) = down_e G[s];
 *   6. out[r] = sum_j w[s] * Y[s] in slot order (shaders/moe_combine.comp).
 * Scratch: G, U and Y in the caller's scratch (n_rows k (2 n_ff + n_embd)
 * floats, as backend.h says).
 *
 * That path reads an expert's weights once per slot: right for decode (a
 * few rows), wasteful for a prefill batch where many rows share an expert.
 * With more rows than the mat-vec's 8 and the routing on the host too
 * (ids_host), the grouped path plans from the host ids instead: the slots
 * sorted by expert, the rows they read gathered in that order into Y
 * (shaders/moe_gather.comp), then per expert used one matmul of gate and
 * up and one of down over its run of rows (vk__matmul: mat-vec or tiles,
 * each weight read once per run), swiglu over all, and the combine through
 * the slots' places in that order. Both paths give the same bits (the
 * matmul's mat-vec and tiles sum in one order, backend.h). An expert tensor larger than one binding
 * window (vk_impl.h) is bound in runs of whole experts, one dispatch per
 * run, each shader instance computing only the slots whose expert its run
 * holds.
 *
 * gpt-oss's experts (ABI 8): the biases added to each product after it
 * (shaders/moe_bias.comp by slot, the add op per run on the grouped path)
 * and the clamped SwiGLU (swiglu_oai) in place of swiglu.
 *
 * The router (moe_route, ABI 8): shaders/moe_route.comp, one invocation
 * per row, from the logits to the ids and weights that moe_ffn reads.
 *
 * Numbers: each expert product is computed as vk_matmul.c's mat-vec
 * computes one row (same rounding of x, same sum order), so it equals this
 * backend's matmul of that expert's matrix; the combine rounds each
 * product before adding it, as the CPU backend does.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/vulkan/vk_impl.h"

#define MOE_DECLARE(name, t) VK__SHADER(moe_mv_##name);
VK__WEIGHT_TYPES(MOE_DECLARE)
VK__SHADER(moe_combine);
VK__SHADER(moe_gather);
VK__SHADER(moe_bias);
VK__SHADER(moe_route);

/* The grouped path: from more rows than the mat-vec takes (vk_matmul.c's
 * MM_VEC_ROWS), in chunks of rows whose slots the host plans on its stack. */
#define MOE_GROUP_MIN_ROWS 9u
#define MOE_PLAN_SLOTS     2048u

typedef struct moe_kind {
	shoal_dtype t;
	const vk__shader *sh;
} moe_kind;

#define MOE_ROW(name, type) {type, &vk__sh_moe_mv_##name},
static const moe_kind moe_kinds[] = {VK__WEIGHT_TYPES(MOE_ROW)};

/* The expert shader of type t (one supports(MATMUL) takes: any other is a
 * caller's bug). */
static const vk__shader *shader_of(shoal_dtype t)
{
	for (size_t i = 0; i < sizeof moe_kinds / sizeof moe_kinds[0]; i++)
		if (moe_kinds[i].t == t)
			return moe_kinds[i].sh;
	fprintf(stderr,
	        "shoal: vulkan: moe_ffn with experts of type %d, which supports() refuses\n",
	        (int)t);
	abort();
}

/* Floats at dev, n_rows rows of n, ld apart: the buffer and the element
 * offset of the first. */
static vk__ref floats_ref(shoal_backend *b, const void *dev, uint64_t n, uint64_t n_rows,
                          uint64_t ld)
{
	vk__ref r = vk__at(b, dev);
	SHOAL_ASSERT(r.off % sizeof(float) == 0 && n_rows >= 1 && n >= 1);
	uint64_t elems = (n_rows - 1) * ld + n;
	SHOAL_ASSERT(elems * sizeof(float) <= r.room);
	r.off /= sizeof(float);
	SHOAL_ASSERT(r.off + elems <= UINT32_MAX);
	return r;
}

/* The push constants of shaders/moe_vec.glsl (MoePush). */
typedef struct moe_push {
	uint32_t w_off, row_bytes, exp_bytes, n_in, n_out;
	uint32_t x_off, ldx, x_div, y_off, ldy;
	uint32_t id_off, e0, e1, slot0;
} moe_push;

/* Where a product's operands are: x (row s / x_div for slot s), the ids,
 * y (slot s's row), all as element offsets. */
typedef struct moe_io {
	vk__ref x, ids, y;
	uint32_t ldx, x_div, ldy, n_slots;
} moe_io;

/* y[s] = x[s / x_div] W_e^T for every slot s (e = ids[s]) of the expert
 * tensor w (expert e at w->data + e * stride), in runs of the experts one
 * binding holds. */
static void moe_products(shoal_backend *b, const shoal_backend_mat *w, size_t stride,
                         uint32_t n_expert, const moe_io *io)
{
	const vk__shader *sh = shader_of(w->type);
	const vk__caps *c = vk__caps_of(b);
	size_t row = shoal_dtype_row_bytes(w->type, w->n_in);
	SHOAL_ASSERT(row != SIZE_MAX && w->row_bytes >= row && w->n_out >= 1);
	uint64_t span = (uint64_t)(w->n_out - 1) * w->row_bytes + row; /* one expert's bytes */
	SHOAL_ASSERT(n_expert == 1 || stride >= span);
	SHOAL_ASSERT(w->row_bytes <= UINT32_MAX && stride <= UINT32_MAX);
	uint64_t groups = ((uint64_t)w->n_out + 1) / 2; /* 2 outputs per workgroup */
	uint32_t gx = groups < c->max_groups[0] ? (uint32_t)groups : c->max_groups[0];
	uint64_t gy = (groups + gx - 1) / gx;
	SHOAL_ASSERT(gy <= c->max_groups[1]);
	for (uint32_t e0 = 0; e0 < n_expert;) {
		vk__ref wr = vk__at(b, (const uint8_t *)w->data + (size_t)e0 * stride);
		if (span > wr.room || wr.off + span > UINT32_MAX) {
			fprintf(stderr,
			        "shoal: vulkan: an expert of %llu bytes does not fit one binding\n",
			        (unsigned long long)span);
			abort();
		}
		uint64_t fit = stride ? (wr.room - span) / stride + 1 : n_expert;
		uint64_t fit32 = stride ? (UINT32_MAX - wr.off - span) / stride + 1 : n_expert;
		fit = fit < fit32 ? fit : fit32;
		uint32_t n = fit < n_expert - e0 ? (uint32_t)fit : n_expert - e0;
		VkBuffer bind[5] = {wr.buf, io->x.buf, io->y.buf, io->ids.buf};
		uint32_t n_bind = 4 + vk__iq_grids(b, w->type, &bind[4]);
		for (uint32_t s0 = 0; s0 < io->n_slots;) {
			uint32_t gz = io->n_slots - s0;
			gz = gz < c->max_groups[2] ? gz : c->max_groups[2];
			moe_push pc = {
			    .w_off = (uint32_t)wr.off,
			    .row_bytes = (uint32_t)w->row_bytes,
			    .exp_bytes = (uint32_t)stride,
			    .n_in = (uint32_t)w->n_in,
			    .n_out = (uint32_t)w->n_out,
			    .x_off = (uint32_t)io->x.off,
			    .ldx = io->ldx,
			    .x_div = io->x_div,
			    .y_off = (uint32_t)io->y.off,
			    .ldy = io->ldy,
			    .id_off = (uint32_t)io->ids.off,
			    .e0 = e0,
			    .e1 = e0 + n,
			    .slot0 = s0,
			};
			vk__dispatch(b, sh, n_bind, bind, &pc, sizeof pc, gx, (uint32_t)gy, gz);
			s0 += gz;
		}
		e0 += n;
	}
}

/* The push constants of shaders/moe_bias.comp. */
typedef struct bias_push {
	uint32_t yo, ldy, bo, io, n, slot0;
} bias_push;

/* y (n_slots, n) ldy: slot s's row += bias row ids[s] of bias (n_expert,
 * n), a device address (backend.h: the expert biases of gpt-oss). */
static void moe_bias(shoal_backend *b, vk__ref yr, uint32_t ldy, const float *bias, uint32_t n,
                     uint32_t n_expert, vk__ref ir, uint32_t n_slots)
{
	const vk__caps *c = vk__caps_of(b);
	vk__ref br = floats_ref(b, bias, n, n_expert, n);
	uint32_t gx = (n + 255) / 256;
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	VkBuffer bind[3] = {yr.buf, br.buf, ir.buf};
	for (uint32_t s0 = 0; s0 < n_slots;) {
		uint32_t gy = n_slots - s0 < c->max_groups[1] ? n_slots - s0 : c->max_groups[1];
		bias_push pc = {(uint32_t)yr.off, ldy, (uint32_t)br.off, (uint32_t)ir.off, n, s0};
		vk__dispatch(b, &vk__sh_moe_bias, 3, bind, &pc, sizeof pc, gx, gy, 1);
		s0 += gy;
	}
}

/* h = silu(g) u, or gpt-oss's clamped form (m->oai), over n. */
static void moe_glu(shoal_backend *b, const shoal_backend_moe *m, float *g, const float *u,
                    size_t n)
{
	if (m->oai)
		vk__swiglu_oai(b, g, u, n, m->alpha, m->limit, g);
	else
		vk__swiglu(b, g, u, n, g);
}

/* x (n_rows, n) ldx as weights of type t read it: itself (F32), or its
 * rows rounded (act) into the matmul's activation scratch, packed. */
static vk__ref moe_act(shoal_backend *b, shoal_dtype act, vk__ref xr, size_t ldx, uint32_t n,
                       uint32_t n_rows, uint32_t *ld)
{
	*ld = (uint32_t)ldx;
	if (act == SHOAL_DTYPE_F32)
		return xr;
	uint64_t bytes;
	void *s = vk__act_scratch(b, &bytes);
	SHOAL_ASSERT((uint64_t)n_rows * n * sizeof(float) <= bytes);
	vk__ref ar = floats_ref(b, s, n, n_rows, n);
	vk__act_round(b, act, xr, ldx, n, n_rows, ar);
	*ld = n;
	return ar;
}

/* The push constants of shaders/moe_combine.comp. */
typedef struct combine_push {
	uint32_t yo, ldy, wo, oo, ldo, n, k, row0, mo, use_map;
} combine_push;

/* out rows r0 .. r0 + nr - 1 from their slots' rows of Y (yr: slot r0 k's
 * row, or with a map (mr: element offset of slot r0 k's entry) the row the
 * map gives, from there). */
static void moe_combine(shoal_backend *b, const shoal_backend_moe *m, uint32_t r0, uint32_t nr,
                        vk__ref yr, const vk__ref *mr)
{
	const vk__caps *c = vk__caps_of(b);
	vk__ref wr = floats_ref(b, m->w + (size_t)r0 * m->k, (uint64_t)nr * m->k, 1, 0);
	vk__ref orf = floats_ref(b, m->out + (size_t)r0 * m->ldo, m->n_embd, nr, m->ldo);
	SHOAL_ASSERT(m->ldo <= UINT32_MAX);
	uint32_t gx = (m->n_embd + 255) / 256;
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	VkBuffer bind[4] = {yr.buf, wr.buf, orf.buf, mr ? mr->buf : yr.buf};
	for (uint32_t g0 = 0; g0 < nr;) {
		uint32_t gy = nr - g0;
		gy = gy < c->max_groups[1] ? gy : c->max_groups[1];
		combine_push pc = {
		    .yo = (uint32_t)yr.off,
		    .ldy = m->n_embd,
		    .wo = (uint32_t)wr.off,
		    .oo = (uint32_t)orf.off,
		    .ldo = (uint32_t)m->ldo,
		    .n = m->n_embd,
		    .k = m->k,
		    .row0 = g0,
		    .mo = mr ? (uint32_t)mr->off : 0,
		    .use_map = mr != NULL,
		};
		vk__dispatch(b, &vk__sh_moe_combine, 4, bind, &pc, sizeof pc, gx, gy, 1);
		g0 += gy;
	}
}

/* ---- the grouped path ------------------------------------------------------------ */

static int key_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Expert e's matrix of tensor w (expert 0) whose experts are stride apart. */
static shoal_backend_mat expert_of(const shoal_backend_mat *w, size_t stride, int32_t e)
{
	shoal_backend_mat x = *w;
	x.data = (const uint8_t *)w->data + (size_t)e * stride;
	return x;
}

/* The push constants of shaders/moe_gather.comp. */
typedef struct gather_push {
	uint32_t xo, ldx, ro, oo, n, row0;
} gather_push;

/* Rows r0 .. r0 + nr - 1 (nr k <= MOE_PLAN_SLOTS slots): their slots in
 * the scratch from slot r0 k on, in expert order. */
static void moe_grouped(shoal_backend *b, const shoal_backend_moe *m, uint32_t r0, uint32_t nr)
{
	uint32_t d = m->n_embd, ff = m->n_ff, k = m->k, S = nr * k;
	uint64_t all = (uint64_t)m->n_rows * k;
	float *g = m->scratch, *u = g + all * ff, *y = u + all * ff;
	size_t s0 = (size_t)r0 * k; /* the chunk's first slot */
	g += s0 * ff, u += s0 * ff, y += s0 * d;
	/* the plan: slots sorted by (expert, slot); rows[i] the x row of the
	 * i-th, at[s] where slot s went */
	uint64_t key[MOE_PLAN_SLOTS];
	uint32_t rows[MOE_PLAN_SLOTS], at[MOE_PLAN_SLOTS];
	for (uint32_t s = 0; s < S; s++) {
		int32_t e = m->ids_host[s0 + s];
		SHOAL_ASSERT(e >= 0 && (uint32_t)e < m->n_expert);
		key[s] = (uint64_t)e << 32 | s;
	}
	qsort(key, S, sizeof key[0], key_cmp);
	for (uint32_t i = 0; i < S; i++) {
		uint32_t s = (uint32_t)key[i];
		rows[i] = r0 + s / k;
		at[s] = i;
	}
	const vk__caps *c = vk__caps_of(b);
	vk__ref xr = floats_ref(b, m->x, d, m->n_rows, m->ldx);
	vk__ref yr = floats_ref(b, y, d, S, d);
	vk__ref rr = vk__params(b, rows, S * sizeof rows[0]);
	uint32_t gx = (d + 255) / 256;
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	VkBuffer bind[3] = {xr.buf, rr.buf, yr.buf};
	for (uint32_t i0 = 0; i0 < S;) {
		uint32_t gy = S - i0 < c->max_groups[1] ? S - i0 : c->max_groups[1];
		gather_push pc = {(uint32_t)xr.off,
		                  (uint32_t)m->ldx,
		                  (uint32_t)(rr.off / 4),
		                  (uint32_t)yr.off,
		                  d,
		                  i0};
		vk__dispatch(b, &vk__sh_moe_gather, 3, bind, &pc, sizeof pc, gx, gy, 1);
		i0 += gy;
	}
	/* each expert's run of rows: gate and up, then (after swiglu) down */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < S;) {
			int32_t e = (int32_t)(key[i] >> 32);
			uint32_t n = 1;
			while (i + n < S && (int32_t)(key[i + n] >> 32) == e)
				n++;
			if (pass == 0) {
				shoal_backend_mat w[2] = {expert_of(&m->gate, m->gate_stride, e),
				                          expert_of(&m->up, m->up_stride, e)};
				float *out[2] = {g + (size_t)i * ff, u + (size_t)i * ff};
				size_t ld[2] = {ff, ff};
				vk__matmul(b, 2, w, y + (size_t)i * d, d, n, out, ld);
				if (m->gate_b)
					vk__add(b, out[0], ff, m->gate_b + (size_t)e * ff, 0, ff,
					        n);
				if (m->up_b)
					vk__add(b, out[1], ff, m->up_b + (size_t)e * ff, 0, ff, n);
			} else {
				shoal_backend_mat w = expert_of(&m->down, m->down_stride, e);
				float *out = y + (size_t)i * d;
				size_t ld = d;
				vk__matmul(b, 1, &w, g + (size_t)i * ff, ff, n, &out, &ld);
				if (m->down_b)
					vk__add(b, out, d, m->down_b + (size_t)e * d, 0, d, n);
			}
			i += n;
		}
		if (pass == 0)
			moe_glu(b, m, g, u, (size_t)S * ff);
	}
	vk__ref mr = vk__params(b, at, S * sizeof at[0]);
	mr.off /= sizeof at[0];
	moe_combine(b, m, r0, nr, yr, &mr);
}

void vk__moe_ffn(shoal_backend *b, const shoal_backend_moe *m)
{
	if (m->n_rows == 0)
		return;
	uint32_t d = m->n_embd, ff = m->n_ff, k = m->k;
	uint64_t S = (uint64_t)m->n_rows * k; /* slots */
	SHOAL_ASSERT(k >= 1 && S <= UINT32_MAX && m->ldx <= UINT32_MAX);
	SHOAL_ASSERT(m->gate.n_in == d && m->up.n_in == d && m->down.n_in == ff);
	SHOAL_ASSERT(m->gate.n_out == ff && m->up.n_out == ff && m->down.n_out == d);
	if (m->ids_host && m->n_rows >= MOE_GROUP_MIN_ROWS && k <= MOE_PLAN_SLOTS) {
		uint32_t per = MOE_PLAN_SLOTS / k; /* rows per plan */
		for (uint32_t r0 = 0; r0 < m->n_rows; r0 += per)
			moe_grouped(b, m, r0, m->n_rows - r0 < per ? m->n_rows - r0 : per);
		return;
	}
	float *g = m->scratch, *u = g + S * ff, *y = u + S * ff;
	vk__ref ir = vk__at(b, m->ids);
	SHOAL_ASSERT(ir.off % sizeof(int32_t) == 0 && S * sizeof(int32_t) <= ir.room);
	ir.off /= sizeof(int32_t);
	vk__ref xr = floats_ref(b, m->x, d, m->n_rows, m->ldx);
	vk__ref gr = floats_ref(b, g, ff, S, ff), ur = floats_ref(b, u, ff, S, ff);
	vk__ref yr = floats_ref(b, y, d, S, d);
	/* gate and up: x rounded once per activation type they want */
	shoal_dtype ga = vk__act_of(m->gate.type), ua = vk__act_of(m->up.type);
	moe_io io = {.ids = ir, .x_div = k, .ldy = ff, .n_slots = (uint32_t)S};
	io.x = moe_act(b, ga, xr, m->ldx, d, m->n_rows, &io.ldx);
	io.y = gr;
	moe_products(b, &m->gate, m->gate_stride, m->n_expert, &io);
	if (ua != ga)
		io.x = moe_act(b, ua, xr, m->ldx, d, m->n_rows, &io.ldx);
	io.y = ur;
	moe_products(b, &m->up, m->up_stride, m->n_expert, &io);
	if (m->gate_b)
		moe_bias(b, gr, ff, m->gate_b, ff, m->n_expert, ir, (uint32_t)S);
	if (m->up_b)
		moe_bias(b, ur, ff, m->up_b, ff, m->n_expert, ir, (uint32_t)S);
	moe_glu(b, m, g, u, S * ff);
	/* down, on each slot's own hidden row (rounded into U when wanted) */
	shoal_dtype da = vk__act_of(m->down.type);
	io.x = gr, io.ldx = ff;
	if (da != SHOAL_DTYPE_F32) {
		vk__act_round(b, da, gr, ff, ff, (uint32_t)S, ur);
		io.x = ur;
	}
	io.x_div = 1, io.y = yr, io.ldy = d;
	moe_products(b, &m->down, m->down_stride, m->n_expert, &io);
	if (m->down_b)
		moe_bias(b, yr, d, m->down_b, d, m->n_expert, ir, (uint32_t)S);
	moe_combine(b, m, 0, m->n_rows, yr, NULL);
}

/* ---- the router -------------------------------------------------------------------- */

/* The push constants of shaders/moe_route.comp. */
typedef struct route_push {
	uint32_t lo, ld, bo, has_bias, io, wo;
	uint32_t n, k, gating, n_group, n_group_used, norm;
	float scale;
	uint32_t n_rows;
} route_push;

void vk__moe_route(shoal_backend *b, const shoal_backend_route *r)
{
	if (r->n_rows == 0)
		return;
	const vk__caps *c = vk__caps_of(b);
	uint32_t ne = r->n_expert, k = r->k;
	SHOAL_ASSERT(shoal_backend_route_sized(r));
	SHOAL_ASSERT(r->ld <= UINT32_MAX);
	vk__ref lr = floats_ref(b, r->logits, ne, r->n_rows, r->ld);
	vk__ref br = r->bias ? floats_ref(b, r->bias, ne, 1, 0) : lr;
	vk__ref ir = vk__at(b, r->ids);
	SHOAL_ASSERT(ir.off % sizeof(int32_t) == 0 &&
	             (uint64_t)r->n_rows * k * sizeof(int32_t) <= ir.room);
	ir.off /= sizeof(int32_t);
	vk__ref wr = floats_ref(b, r->w, (uint64_t)r->n_rows * k, 1, 0);
	route_push pc = {
	    .lo = (uint32_t)lr.off,
	    .ld = (uint32_t)r->ld,
	    .bo = r->bias ? (uint32_t)br.off : 0,
	    .has_bias = r->bias != NULL,
	    .io = (uint32_t)ir.off,
	    .wo = (uint32_t)wr.off,
	    .n = ne,
	    .k = k,
	    .gating = (uint32_t)r->gating,
	    .n_group = r->n_group,
	    .n_group_used = r->n_group_used,
	    .norm = r->norm,
	    .scale = r->scale,
	    .n_rows = r->n_rows,
	};
	VkBuffer bind[4] = {lr.buf, br.buf, ir.buf, wr.buf};
	uint32_t gx = (r->n_rows + 63) / 64; /* the shader's 64 rows per group */
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	vk__dispatch(b, &vk__sh_moe_route, 4, bind, &pc, sizeof pc, gx, 1, 1);
}
