/*
 * runtime/vulkan/vk_attn.c: attention (backend.h's shoal_backend_attn) on
 * the Vulkan device, by shaders/attn.comp.
 *
 * Part: runtime/ (the room vulkan/). The query vectors (a row's head)
 * are cut into blocks of up to VK_ATTN_BLK_ROWS that read the same KV
 * head of the same cache plane, and each block runs as one workgroup, so
 * each K and V row it loads serves the whole block: the query heads of a
 * GQA group (MLA's 16 heads over one latent plane: 2 blocks), and with
 * them the consecutive rows of a prefill chunk of one session. The
 * per-row cache planes are resolved here with vk__at and handed to the
 * shader as element offsets, with each vector's n_kv, through
 * vk__params; a dispatch binds one K and one V buffer, so the blocks are
 * dispatched in runs whose planes lie in the same buffers. Attention
 * sinks (gpt-oss: one per query head, a device address) are bound as an
 * eighth buffer; the shader starts each vector's running softmax at its
 * head's sink. Ring planes (a sliding layer's, ABI 7): a block's entries
 * share their first position, and the shader reads position first + t at
 * slot (first + t) % ring, in the order of a whole plane's t.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/vulkan/vk_impl.h"

VK__SHADER(attn);

/* attn.comp's BLK_ROWS, BLK_WORDS and MAX_C * 64. */
#define VK_ATTN_BLK_ROWS  8u
#define VK_ATTN_BLK_WORDS 20u
#define VK_ATTN_MAX_HD    640u
/* Blocks per dispatch: the parameters are staged on the stack (128 * 80
 * bytes = 10 KiB) and 128 workgroups are far below any device's
 * maxComputeWorkGroupCount (>= 65535), so no count needs splitting. */
#define VK_ATTN_CHUNK 128u

typedef struct attn_push {
	uint32_t q_off, out_off, head_dim, pos_ld, f16, prm_off;
	float scale;
	uint32_t n_head, sinks, sinks_off; /* sinks: 1 when there are any */
	uint32_t ring;                     /* positions of a ring plane, or 0 */
} attn_push;

/* The blocks being gathered for one dispatch. */
typedef struct attn_run {
	uint32_t w[VK_ATTN_CHUNK * VK_ATTN_BLK_WORDS];
	uint32_t n_blk;
	VkBuffer kbuf, vbuf;
	VkBuffer sbuf; /* the sinks' buffer, or q's (unread) */
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
	VkBuffer bind[8] = {qbuf,      obuf,      run->kbuf, run->kbuf,
	                    run->vbuf, run->vbuf, p.buf,     run->sbuf};
	vk__dispatch(b, &vk__sh_attn, 8, bind, pc, sizeof *pc, run->n_blk, 1, 1);
	run->n_blk = 0;
}

/* A new, empty block of run for the KV head at cache elements k_off and
 * v_off, its entries' positions from `first` on (a ring plane's; else 0),
 * flushing a full run first. */
static uint32_t *block_new(shoal_backend *b, attn_run *run, attn_push *pc, VkBuffer qbuf,
                           VkBuffer obuf, uint64_t k_off, uint64_t v_off, uint32_t first)
{
	if (run->n_blk == VK_ATTN_CHUNK)
		flush(b, run, pc, qbuf, obuf);
	uint32_t *blk = run->w + run->n_blk++ * VK_ATTN_BLK_WORDS;
	for (uint32_t i = 0; i < VK_ATTN_BLK_WORDS; i++)
		blk[i] = 0;
	blk[0] = (uint32_t)k_off;
	blk[1] = (uint32_t)v_off;
	blk[3] = first;
	return blk;
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
	uint32_t group = a->n_head / a->n_head_kv;
	uint64_t es = a->kv_type == SHOAL_DTYPE_F16 ? 2 : 4;
	uint64_t n_vec = (uint64_t)a->n_rows * a->n_head;
	uint64_t act_bytes = n_vec * a->head_dim * sizeof(float);
	vk__ref q = vk__at(b, a->q), o = vk__at(b, a->out);
	SHOAL_ASSERT(q.room >= act_bytes && o.room >= act_bytes);
	SHOAL_ASSERT(n_vec <= UINT32_MAX && a->pos_ld <= UINT32_MAX);
	attn_push pc = {
	    .q_off = elems_of(q.off, sizeof(float), "q"),
	    .out_off = elems_of(o.off, sizeof(float), "out"),
	    .head_dim = a->head_dim,
	    .pos_ld = (uint32_t)a->pos_ld,
	    .f16 = a->kv_type == SHOAL_DTYPE_F16,
	};
	pc.scale = a->scale;
	pc.n_head = a->n_head;
	pc.ring = a->ring;
	SHOAL_ASSERT(!a->ring || a->first);
	attn_run run; /* 10 KiB of staged parameters */
	run.n_blk = 0;
	run.sbuf = q.buf;
	if (a->sinks) {
		vk__ref s = vk__at(b, a->sinks);
		SHOAL_ASSERT(s.room >= (uint64_t)a->n_head * sizeof(float));
		pc.sinks = 1;
		pc.sinks_off = elems_of(s.off, sizeof(float), "the sinks");
		run.sbuf = s.buf;
	}
	/* the shader indexes q and out in uint */
	SHOAL_ASSERT((uint64_t)pc.q_off + n_vec * a->head_dim <= UINT32_MAX);
	SHOAL_ASSERT((uint64_t)pc.out_off + n_vec * a->head_dim <= UINT32_MAX);
	for (uint32_t r = 0, end; r < a->n_rows; r = end) {
		/* rows r..end-1 read the same planes from the same first
		 * position; n: the longest of them */
		uint32_t n = a->n_kv[r], first = a->ring ? a->first[r] : 0;
		for (end = r + 1; end < a->n_rows && a->k[end] == a->k[r] && a->v[end] == a->v[r] &&
		                  (!a->ring || a->first[end] == first);
		     end++)
			n = a->n_kv[end] > n ? a->n_kv[end] : n;
		SHOAL_ASSERT(!a->ring || n <= a->ring);
		/* each KV head resolved on its own: a plane larger than a
		 * window of vk__at (half of maxStorageBufferRange) needs only
		 * one head's positions to lie in one */
		for (uint32_t kvh = 0; kvh < a->n_head_kv; kvh++) {
			size_t at = (size_t)kvh * a->head_ld * es;
			vk__ref k = vk__at(b, (const char *)a->k[r] + at);
			vk__ref v = vk__at(b, (const char *)a->v[r] + at);
			uint64_t k_off = elems_of(k.off, es, "a K plane");
			uint64_t v_off = elems_of(v.off, es, "a V plane");
			/* the elements the head's rows read, and that the
			 * shader's uint indexes reach them */
			uint64_t last = a->ring ? (n ? a->ring - 1 : 0) : (n ? n - 1 : 0);
			uint64_t reach = last * a->pos_ld + a->head_dim;
			SHOAL_ASSERT(reach * es <= k.room && reach * es <= v.room);
			SHOAL_ASSERT(k_off + reach <= UINT32_MAX && v_off + reach <= UINT32_MAX);
			if (run.n_blk && (k.buf != run.kbuf || v.buf != run.vbuf))
				flush(b, &run, &pc, q.buf, o.buf);
			run.kbuf = k.buf;
			run.vbuf = v.buf;
			uint32_t *blk = NULL;
			for (uint32_t rr = r; rr < end; rr++)
				for (uint32_t g = 0; g < group; g++) {
					if (!blk || blk[2] == VK_ATTN_BLK_ROWS)
						blk = block_new(b, &run, &pc, q.buf, o.buf, k_off,
						                v_off, first);
					uint32_t i = blk[2]++;
					blk[4 + 2 * i] = rr * a->n_head + kvh * group + g;
					blk[5 + 2 * i] = a->n_kv[rr];
				}
		}
	}
	flush(b, &run, &pc, q.buf, o.buf);
}
