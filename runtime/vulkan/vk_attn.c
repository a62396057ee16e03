/*
 * runtime/vulkan/vk_attn.c: attention (backend.h's shoal_backend_attn) on
 * the Vulkan device, by shaders/attn.comp.
 *
 * Part: runtime/ (the room vulkan/). The rows are cut into blocks of up
 * to VK_ATTN_BLK_ROWS consecutive rows that read the same cache plane
 * (a prefill chunk of one session: its K and V rows are loaded once per
 * block instead of once per row; a decode row of its own session is a
 * block of one), and each block runs as one workgroup per query head.
 * The per-row cache planes are resolved here with vk__at and handed to
 * the shader as element offsets with each row's n_kv through
 * vk__params; a dispatch binds one K and one V buffer, so the rows are
 * dispatched in runs whose planes lie in the same buffers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/vulkan/vk_impl.h"

VK__SHADER(attn);

/* attn.comp's BLK_ROWS, BLK_WORDS, MAX_C * 64 and workgroup size. */
#define VK_ATTN_BLK_ROWS  8u
#define VK_ATTN_BLK_WORDS 12u
#define VK_ATTN_MAX_HD    640u
/* Blocks per dispatch: the parameters are staged on the stack (128 * 48
 * bytes = 6 KiB) and 128 workgroups per head is far below any device's
 * maxComputeWorkGroupCount (>= 65535), so no count needs splitting. */
#define VK_ATTN_CHUNK 128u

typedef struct attn_push {
	uint32_t q_off, out_off, ld, head_dim, group, head_ld, pos_ld, f16, prm_off;
	float scale;
} attn_push;

/* The runs of blocks being gathered for one dispatch. */
typedef struct attn_run {
	uint32_t w[VK_ATTN_CHUNK * VK_ATTN_BLK_WORDS];
	uint32_t n_blk;
	VkBuffer kbuf, vbuf;
} attn_run;

static uint32_t elems_of(uint64_t bytes, uint64_t es, const char *what)
{
	if (bytes % es != 0 || bytes / es > UINT32_MAX) {
		fprintf(stderr,
		        "vulkan attention: %s at byte %llu is not a %u-byte element index\n", what,
		        (unsigned long long)bytes, (unsigned)es);
		abort();
	}
	return (uint32_t)(bytes / es);
}

static void flush(shoal_backend *b, attn_run *run, attn_push *pc, VkBuffer qbuf, VkBuffer obuf)
{
	if (run->n_blk == 0)
		return;
	size_t bytes = (size_t)run->n_blk * VK_ATTN_BLK_WORDS * sizeof(uint32_t);
	vk__ref p = vk__params(b, run->w, bytes);
	pc->prm_off = elems_of(p.off, sizeof(uint32_t), "the parameters");
	VkBuffer bind[7] = {qbuf, obuf, run->kbuf, run->kbuf, run->vbuf, run->vbuf, p.buf};
	uint32_t n_head = pc->ld / pc->head_dim;
	vk__dispatch(b, &vk__sh_attn, 7, bind, pc, sizeof *pc, run->n_blk, n_head, 1);
	run->n_blk = 0;
}

void vk__attention(shoal_backend *b, const shoal_backend_attn *a)
{
	if (a->n_rows == 0)
		return;
	SHOAL_ASSERT(a->kv_type == SHOAL_DTYPE_F32 || a->kv_type == SHOAL_DTYPE_F16);
	SHOAL_ASSERT(a->n_head_kv > 0 && a->n_head % a->n_head_kv == 0);
	if (a->head_dim == 0 || a->head_dim > VK_ATTN_MAX_HD) {
		fprintf(stderr, "vulkan attention: head_dim %u is outside 1..%u\n", a->head_dim,
		        VK_ATTN_MAX_HD);
		abort();
	}
	const vk__caps *caps = vk__caps_of(b);
	SHOAL_ASSERT(caps->max_groups[1] >= a->n_head);
	uint64_t es = a->kv_type == SHOAL_DTYPE_F16 ? 2 : 4;
	uint64_t ld = (uint64_t)a->n_head * a->head_dim;
	uint64_t act_bytes = (uint64_t)a->n_rows * ld * sizeof(float);
	vk__ref q = vk__at(b, a->q), o = vk__at(b, a->out);
	SHOAL_ASSERT(q.room >= act_bytes && o.room >= act_bytes);
	SHOAL_ASSERT(a->head_ld <= UINT32_MAX && a->pos_ld <= UINT32_MAX && ld <= UINT32_MAX);
	attn_push pc = {
	    .q_off = elems_of(q.off, sizeof(float), "q"),
	    .out_off = elems_of(o.off, sizeof(float), "out"),
	    .ld = (uint32_t)ld,
	    .head_dim = a->head_dim,
	    .group = a->n_head / a->n_head_kv,
	    .head_ld = (uint32_t)a->head_ld,
	    .pos_ld = (uint32_t)a->pos_ld,
	    .f16 = a->kv_type == SHOAL_DTYPE_F16,
	    .scale = a->scale,
	};
	/* The elements of the last KV head's row at position 0, from the
	 * plane's start: a row of n_kv reads (n_kv - 1) * pos_ld more. */
	uint64_t span = (uint64_t)(a->n_head_kv - 1) * a->head_ld + a->head_dim;
	attn_run run; /* 6 KiB of staged parameters */
	run.n_blk = 0;
	uint32_t *blk = NULL;
	uint64_t k_room = 0, v_room = 0, k_end = 0; /* the current block's plane */
	for (uint32_t r = 0; r < a->n_rows; r++) {
		/* the elements past the plane's start that row r reads, + 1 */
		uint64_t reach = span + (uint64_t)(a->n_kv[r] ? a->n_kv[r] - 1 : 0) * a->pos_ld;
		bool same = blk && blk[1] < VK_ATTN_BLK_ROWS && a->k[r] == a->k[r - blk[1]] &&
		            a->v[r] == a->v[r - blk[1]];
		if (!same) {
			vk__ref k = vk__at(b, a->k[r]), v = vk__at(b, a->v[r]);
			if (run.n_blk == VK_ATTN_CHUNK ||
			    (run.n_blk && (k.buf != run.kbuf || v.buf != run.vbuf)))
				flush(b, &run, &pc, q.buf, o.buf);
			run.kbuf = k.buf;
			run.vbuf = v.buf;
			blk = run.w + run.n_blk++ * VK_ATTN_BLK_WORDS;
			for (uint32_t i = 0; i < VK_ATTN_BLK_WORDS; i++)
				blk[i] = 0;
			blk[0] = r;
			blk[2] = elems_of(k.off, es, "a K plane");
			blk[3] = elems_of(v.off, es, "a V plane");
			k_room = k.room;
			v_room = v.room;
			k_end = (uint64_t)(blk[2] > blk[3] ? blk[2] : blk[3]);
		}
		/* the shader indexes in uint: every element it reads must fit */
		SHOAL_ASSERT(reach * es <= k_room && reach * es <= v_room);
		SHOAL_ASSERT(k_end + reach <= UINT32_MAX);
		blk[4 + blk[1]++] = a->n_kv[r];
	}
	flush(b, &run, &pc, q.buf, o.buf);
}
