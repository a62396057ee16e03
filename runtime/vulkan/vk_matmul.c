/*
 * runtime/vulkan/vk_matmul.c: the Vulkan backend's matrix products and
 * embedding rows (backend.h's matmul, embed and, for them, supports), as
 * dispatches of the shaders mv_T (mat-vec, 1..MM_VEC_ROWS rows of x),
 * mm_T (64 x 64 tiles, more rows) and embed_T, one of each per weight
 * type T (runtime/vulkan/shaders/mm_*.glsl hold their bodies).
 *
 * Part: runtime/ (the room vulkan/). Divisions: types and shaders, the
 * checks of an operand, matmul (and its activation pre-pass), embed.
 *
 * Numbers: weights are dequantized in the shader to the exact F32 values
 * of shoal_dequantize_row and multiplied with F32 activations, F32
 * accumulation. For the weight types whose CPU matmul rounds the
 * activations to Q8_0 or Q8_K first (shoal_kernels_act_type), a pre-pass
 * (shaders/act_q8.comp) rounds the rows of x once per such type and call
 * to the very values the CPU computes with (d * q, bit for bit), as F32
 * into the instance's scratch (vk__act_scratch), which the matmul shaders
 * then read: the GPU's products differ from the CPU's only in how the
 * sums are rounded. F32, F16 and BF16 weights take x as it is. Both
 * matmul shaders sum in the one order of shaders/mm_order.glsl, so every
 * output is bitwise the same whatever the batch size (backend.h's
 * contract).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/cpu/kernels.h"
#include "runtime/vulkan/vk_impl.h"

/* ---- types and shaders --------------------------------------------------------- */

/* The mat-vec keeps one accumulator per row of x in each lane's
 * registers: 8 covers the decode batches of a few sessions and speculative
 * drafts, and reads the weights once for all of them; past 8 the tiles
 * do (they read each weight once per 64 rows). MV_ROWS in mm_vec.glsl. */
#define MM_VEC_ROWS 8u
#define MM_VEC_OUTS 2u /* outputs per mat-vec workgroup: 64 threads, 32 lanes each */
/* A mat-mul tile: 64 rows x 64 outputs x 32 elements of n_in staged as
 * floats is 2 x 8 KiB, the 16 KiB of shared memory every device offers
 * (maxComputeSharedMemorySize's minimum); 256 threads of 4 x 4 outputs. */
#define MM_TILE     64u
#define EMBED_ELEMS 2048 /* elements of a row per embed workgroup (256 threads x 8) */

#define MM_DECLARE(name, t)                                                                        \
	VK__SHADER(mv_##name);                                                                     \
	VK__SHADER(mm_##name);                                                                     \
	VK__SHADER(embed_##name);
VK__WEIGHT_TYPES(MM_DECLARE)
VK__SHADER(act_q8);

/* The three shaders of one weight type. */
typedef struct mm_kind {
	shoal_dtype t;
	const vk__shader *vec, *tile, *embed;
} mm_kind;

#define MM_ROW(name, type) {type, &vk__sh_mv_##name, &vk__sh_mm_##name, &vk__sh_embed_##name},
static const mm_kind mm_kinds[] = {VK__WEIGHT_TYPES(MM_ROW)};

/* The shaders of type t; NULL for a type they do not read. */
static const mm_kind *kind_of(shoal_dtype t)
{
	for (size_t i = 0; i < sizeof mm_kinds / sizeof mm_kinds[0]; i++)
		if (mm_kinds[i].t == t)
			return &mm_kinds[i];
	return NULL;
}

bool vk__supports_type(shoal_backend_op op, shoal_dtype t)
{
	if (op != SHOAL_BACKEND_OP_MATMUL && op != SHOAL_BACKEND_OP_EMBED)
		return false;
	return kind_of(t) != NULL;
}

/* The shaders of type t, which the engine has asked supports() about: any
 * other type here is a caller's bug. */
static const mm_kind *kind_must(shoal_dtype t, const char *op)
{
	const mm_kind *k = kind_of(t);
	if (!k) {
		fprintf(stderr, "shoal: vulkan: %s of type %d, which supports() refuses\n", op,
		        (int)t);
		abort();
	}
	return k;
}

/* ---- the checks of an operand ---------------------------------------------------- */

/* The weights of up to n_out rows of n_in elements of type t, row_bytes
 * apart, from dev: in *r their buffer and the byte offset the shaders
 * address them from (a uint: maxStorageBufferRange is a uint32 too); how
 * many of the rows that buffer holds (>= 1; vk__at's room may end before
 * a range larger than one binding window does, vk_impl.h). */
static uint64_t weights_at(shoal_backend *b, shoal_dtype t, const void *dev, uint64_t n_in,
                           uint64_t n_out, uint64_t row_bytes, vk__ref *r)
{
	*r = vk__at(b, dev);
	size_t row = shoal_dtype_row_bytes(t, n_in); /* SIZE_MAX: not whole blocks */
	SHOAL_ASSERT(n_in >= 1 && n_out >= 1 && row != SIZE_MAX && row_bytes >= row);
	SHOAL_ASSERT(row <= r->room && r->off + row <= UINT32_MAX);
	uint64_t fit = (r->room - row) / row_bytes + 1;
	uint64_t fit32 = (UINT32_MAX - r->off - row) / row_bytes + 1;
	fit = fit < fit32 ? fit : fit32;
	return fit < n_out ? fit : n_out;
}

/* A float matrix of n_rows rows of n elements, ld apart, at dev: its
 * buffer, with off turned into the element index the shaders take. */
static vk__ref floats_at(shoal_backend *b, const void *dev, uint64_t n, uint64_t n_rows,
                         uint64_t ld)
{
	vk__ref r = vk__at(b, dev);
	SHOAL_ASSERT(r.off % sizeof(float) == 0);
	SHOAL_ASSERT(n_rows >= 1 && (n_rows == 1 || ld >= n));
	uint64_t elems = (n_rows - 1) * ld + n;
	SHOAL_ASSERT(elems * sizeof(float) <= r.room);
	r.off /= sizeof(float);
	SHOAL_ASSERT(r.off + elems <= UINT32_MAX);
	return r;
}

/* Groups for n items of work on a device allowing max[0..2] per
 * dimension: x up to max[0], the rest folded into y (the shaders
 * recompute the linear index; the ones past n return). */
static void fold_groups(const vk__caps *c, uint64_t n, uint32_t g[2])
{
	g[0] = n < c->max_groups[0] ? (uint32_t)n : c->max_groups[0];
	uint64_t y = (n + g[0] - 1) / g[0];
	SHOAL_ASSERT(y <= c->max_groups[1]);
	g[1] = (uint32_t)y;
}

/* ---- matmul ------------------------------------------------------------------------- */

/* The push constants of shaders/mm_order.glsl (MmPush). */
typedef struct mm_push {
	uint32_t w_off, row_bytes, n_in, n_out;
	uint32_t x_off, ldx, y_off, ldy;
	uint32_t n_rows;
} mm_push;

/* One matrix: y (n_rows, n_out) ldy = x W^T, in runs of output rows that
 * one binding of the weights holds (one run but for a matrix larger than
 * a binding window); each output is the same whatever its run. */
static void matmul_one(shoal_backend *b, const shoal_backend_mat *w, vk__ref xr, size_t ldx,
                       uint32_t n_rows, float *y, size_t ldy)
{
	const mm_kind *k = kind_must(w->type, "matmul");
	uint64_t n_out = (uint64_t)w->n_out;
	vk__ref yr = floats_at(b, y, n_out, n_rows, ldy);
	SHOAL_ASSERT(ldx <= UINT32_MAX && ldy <= UINT32_MAX && w->row_bytes <= UINT32_MAX);
	const vk__caps *c = vk__caps_of(b);
	for (uint64_t o = 0; o < n_out;) {
		vk__ref wr;
		const uint8_t *at = (const uint8_t *)w->data + o * w->row_bytes;
		uint64_t n =
		    weights_at(b, w->type, at, (uint64_t)w->n_in, n_out - o, w->row_bytes, &wr);
		mm_push pc = {
		    .w_off = (uint32_t)wr.off,
		    .row_bytes = (uint32_t)w->row_bytes,
		    .n_in = (uint32_t)w->n_in,
		    .n_out = (uint32_t)n,
		    .x_off = (uint32_t)xr.off,
		    .ldx = (uint32_t)ldx,
		    .y_off = (uint32_t)(yr.off + o),
		    .ldy = (uint32_t)ldy,
		    .n_rows = n_rows,
		};
		VkBuffer bind[4] = {wr.buf, xr.buf, yr.buf};
		uint32_t n_bind = 3 + vk__iq_grids(b, w->type, &bind[3]);
		uint32_t g[2];
		if (n_rows <= MM_VEC_ROWS) {
			fold_groups(c, (n + MM_VEC_OUTS - 1) / MM_VEC_OUTS, g);
			vk__dispatch(b, k->vec, n_bind, bind, &pc, sizeof pc, g[0], g[1], 1);
		} else {
			uint32_t row_tiles = (n_rows + MM_TILE - 1) / MM_TILE;
			SHOAL_ASSERT(row_tiles <= c->max_groups[2]);
			fold_groups(c, (n + MM_TILE - 1) / MM_TILE, g);
			vk__dispatch(b, k->tile, n_bind, bind, &pc, sizeof pc, g[0], g[1],
			             row_tiles);
		}
		o += n;
	}
}

/* The push constants of shaders/act_q8.comp. */
typedef struct act_push {
	uint32_t xo, ldx, oo, ldo, n, blk, row0;
} act_push;

/* Rows n_rows of x (xr: element offset, ldx) rounded as the CPU rounds
 * activations of type act (Q8_0 or Q8_K) into orf (n_rows, n), packed. */
void vk__act_round(shoal_backend *b, shoal_dtype act, vk__ref xr, size_t ldx, uint32_t n,
                   uint32_t n_rows, vk__ref orf)
{
	uint32_t blk = act == SHOAL_DTYPE_Q8_K ? 256u : 32u;
	SHOAL_ASSERT(n % blk == 0 && ldx <= UINT32_MAX);
	const vk__caps *c = vk__caps_of(b);
	uint32_t gx = (n + 255) / 256; /* 256 elements per workgroup */
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	VkBuffer bind[2] = {xr.buf, orf.buf};
	for (uint32_t r0 = 0; r0 < n_rows;) {
		uint32_t gy = n_rows - r0 < c->max_groups[1] ? n_rows - r0 : c->max_groups[1];
		act_push pc = {(uint32_t)xr.off, (uint32_t)ldx, (uint32_t)orf.off, n, n, blk, r0};
		vk__dispatch(b, &vk__sh_act_q8, 2, bind, &pc, sizeof pc, gx, gy, 1);
		r0 += gy;
	}
}

/* The activations weights of type t compute with on the CPU, where this
 * backend rounds them likewise (Q8_0, Q8_K); F32 for the rest (the F16 /
 * BF16 weights' F16 / BF16 rows are not rounded here). */
shoal_dtype vk__act_of(shoal_dtype t)
{
	shoal_dtype a = shoal_kernels_act_type(t);
	return a == SHOAL_DTYPE_Q8_0 || a == SHOAL_DTYPE_Q8_K ? a : SHOAL_DTYPE_F32;
}

/* Each matrix is its own dispatch. The matrices of one activation type
 * read the same x: as it is (F32), or rounded once for all of them into
 * the scratch, in passes of as many rows as it holds (all of them within
 * the limits). */
void vk__matmul(shoal_backend *b, uint32_t n_mat, const shoal_backend_mat *w, const float *x,
                size_t ldx, uint32_t n_rows, float *const *y, const size_t *ldy)
{
	if (n_rows == 0 || n_mat == 0)
		return;
	SHOAL_ASSERT(n_mat <= SHOAL_BACKEND_MAX_MATS);
	uint64_t n_in = (uint64_t)w[0].n_in;
	vk__ref xr = floats_at(b, x, n_in, n_rows, ldx);
	bool done[SHOAL_BACKEND_MAX_MATS] = {0};
	for (uint32_t i = 0; i < n_mat; i++) {
		SHOAL_ASSERT(w[i].n_in == w[0].n_in);
		shoal_dtype act = vk__act_of(w[i].type);
		if (done[i] || act == SHOAL_DTYPE_F32) {
			if (!done[i])
				matmul_one(b, &w[i], xr, ldx, n_rows, y[i], ldy[i]);
			continue;
		}
		uint64_t bytes;
		void *s = vk__act_scratch(b, &bytes);
		vk__ref sr = vk__at(b, s);
		bytes = bytes < sr.room ? bytes : sr.room;
		uint64_t per = bytes / (n_in * sizeof(float));
		if (per == 0) {
			fprintf(
			    stderr,
			    "shoal: vulkan: matmul rows of %llu elements, over the limits' max_n\n",
			    (unsigned long long)n_in);
			abort();
		}
		for (uint32_t r0 = 0; r0 < n_rows;) {
			uint32_t nr = n_rows - r0 < per ? n_rows - r0 : (uint32_t)per;
			vk__ref xp = xr;
			xp.off += (uint64_t)r0 * ldx;
			vk__ref ar = floats_at(b, s, n_in, nr, n_in);
			vk__act_round(b, act, xp, ldx, (uint32_t)n_in, nr, ar);
			for (uint32_t j = i; j < n_mat; j++)
				if (!done[j] && vk__act_of(w[j].type) == act)
					matmul_one(b, &w[j], ar, n_in, nr,
					           y[j] + (size_t)r0 * ldy[j], ldy[j]);
			r0 += nr;
		}
		for (uint32_t j = i; j < n_mat; j++)
			done[j] = done[j] || vk__act_of(w[j].type) == act;
	}
}

/* ---- embed -------------------------------------------------------------------------- */

/* The push constants of shaders/mm_embed.glsl (EmbedPush). */
typedef struct embed_push {
	uint32_t t_off, row_bytes, n_embd, n_rows;
	uint32_t id_off, out_off;
} embed_push;

/* Rows n_rows of out (n_rows, n_embd) from the table rows ids (device
 * ids at ir), the table bound as tr. */
static void embed_run(shoal_backend *b, const mm_kind *k, vk__ref tr, size_t row_bytes,
                      uint32_t n_embd, vk__ref ir, uint32_t n_rows, vk__ref orf)
{
	SHOAL_ASSERT(ir.off % sizeof(int32_t) == 0);
	embed_push pc = {
	    .t_off = (uint32_t)tr.off,
	    .row_bytes = (uint32_t)row_bytes,
	    .n_embd = n_embd,
	    .n_rows = n_rows,
	    .id_off = (uint32_t)(ir.off / sizeof(int32_t)),
	    .out_off = (uint32_t)orf.off,
	};
	VkBuffer bind[4] = {tr.buf, ir.buf, orf.buf};
	uint32_t n_bind = 3 + vk__iq_grids(b, k->t, &bind[3]);
	const vk__caps *c = vk__caps_of(b);
	uint32_t gx = (n_embd + EMBED_ELEMS - 1) / EMBED_ELEMS;
	SHOAL_ASSERT(gx <= c->max_groups[0]);
	/* rows over y, folded into z past the limit (the shader's r) */
	uint32_t gy = n_rows < c->max_groups[1] ? n_rows : c->max_groups[1];
	uint32_t gz = (n_rows + gy - 1) / gy;
	SHOAL_ASSERT(gz <= c->max_groups[2]);
	vk__dispatch(b, k->embed, n_bind, bind, &pc, sizeof pc, gx, gy, gz);
}

/* One dispatch for all rows where one binding holds the table up to the
 * largest id; else (a table larger than a binding window) one per row. */
void vk__embed(shoal_backend *b, shoal_dtype t, const void *table, size_t row_bytes,
               uint32_t n_embd, const int32_t *ids, uint32_t n_rows, float *out)
{
	if (n_rows == 0)
		return;
	const mm_kind *k = kind_must(t, "embed");
	int32_t max_id = 0;
	for (uint32_t r = 0; r < n_rows; r++) {
		SHOAL_ASSERT(ids[r] >= 0);
		max_id = ids[r] > max_id ? ids[r] : max_id;
	}
	SHOAL_ASSERT(row_bytes <= UINT32_MAX);
	vk__ref orf = floats_at(b, out, n_embd, n_rows, n_embd);
	vk__ref tr;
	if (weights_at(b, t, table, n_embd, (uint64_t)max_id + 1, row_bytes, &tr) >
	    (uint64_t)max_id) {
		embed_run(b, k, tr, row_bytes, n_embd,
		          vk__params(b, ids, (size_t)n_rows * sizeof *ids), n_rows, orf);
		return;
	}
	static const int32_t first = 0;
	for (uint32_t r = 0; r < n_rows; r++) {
		const uint8_t *row = (const uint8_t *)table + (size_t)ids[r] * row_bytes;
		weights_at(b, t, row, n_embd, 1, row_bytes, &tr);
		vk__ref o1 = orf;
		o1.off += (uint64_t)r * n_embd;
		embed_run(b, k, tr, row_bytes, n_embd, vk__params(b, &first, sizeof first), 1, o1);
	}
}
