/*
 * runtime/vulkan/shaders/attn.comp: causal GQA attention (backend.h's
 * shoal_backend_attn) over an F32 or F16 cache, decode and prefill alike.
 *
 * One workgroup is a block: up to BLK_ROWS query vectors (a row's query
 * head) that read the same KV head of the same cache plane (vk_attn.c
 * makes them: the heads of one GQA group, and the rows of one session's
 * prefill chunk, share blocks, so each K and V row loaded serves all of
 * them). Entry i of a block is the query vector vec[i] (row * n_head +
 * head: q and out hold head_dim floats per vector) and sees positions
 * [0, n_kv[i]) (a ring plane: the block's positions first + t, at slot
 * (first + t) % ring, t in [0, n_kv[i])). The positions are walked in
 * tiles of TILE:
 *   1. thread j scores position t0 + j against every entry of the block
 *      (one F32 sum over d in order; masked positions are -inf, never read);
 *   2. per row, the tile's max and then its sum of exp(s - m) by a fixed
 *      tree over the 64 slots; the running (m, l) are rescaled by
 *      exp(m_old - m_new) (flash attention's online softmax);
 *   3. thread c owns output dims c, c + 64, ...: o = o * alpha + sum over
 *      the tile's unmasked positions in order of p_t v_t[d].
 * The end writes o / l. With attention sinks (gpt-oss), the running state
 * starts as the sink's own score: m = sink, l = exp(sink - sink) = 1, o =
 * 0, so the sink joins the max and the sum and carries no value, as
 * backend.h says; the query head a vector's sink belongs to is vec %
 * n_head. Every step's order depends only on the row's own
 * n_kv and head_dim, never on the other entries of its block or the
 * dispatch: a row gives the same bits alone as in any batch (the test
 * checks it). An entry with n_kv = 0 writes zeros (what the CPU gives).
 *
 * Bindings: 0 q (float), 1 out (float), 2/3 K as float / uint words,
 * 4/5 V as float / uint words (the same buffers twice: an F16 cache is
 * read two halves to a word with unpackHalf2x16, which needs no 16-bit
 * feature), 6 the blocks' parameters (uint, BLK_WORDS per block), 7 the
 * sinks (float, n_head of them; any buffer, unread, when there are none).
 */
#version 450

layout(local_size_x = 64) in;

#define TILE      64 /* positions per tile = the workgroup size */
#define BLK_ROWS  8  /* entries per block (vk_attn.c's VK_ATTN_BLK_ROWS) */
#define BLK_WORDS 20 /* k_off, v_off, n_entries, first, (vec, n_kv)[BLK_ROWS] */
#define MAX_C     10 /* head_dim <= 64 * MAX_C = 640 (MLA's 576 fits) */

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) writeonly buffer O { float o_out[]; };
layout(std430, binding = 2) readonly buffer KF { float kf[]; };
layout(std430, binding = 3) readonly buffer KH { uint kh[]; };
layout(std430, binding = 4) readonly buffer VF { float vf[]; };
layout(std430, binding = 5) readonly buffer VH { uint vh[]; };
layout(std430, binding = 6) readonly buffer P { uint prm[]; };
layout(std430, binding = 7) readonly buffer S { float sink[]; };

layout(push_constant) uniform Push {
	uint q_off;   /* floats: row 0 of q in its buffer */
	uint out_off; /* floats: row 0 of out */
	uint head_dim;
	uint pos_ld;  /* cache elements between positions */
	uint f16;      /* 1: the cache is F16 */
	uint prm_off;  /* uints: block 0's parameters */
	float scale;
	uint n_head;    /* query heads per row: a vector's head is vec % n_head */
	uint sinks;     /* 1: binding 7 holds the heads' sinks */
	uint sinks_off; /* floats: head 0's sink */
	uint ring;      /* a ring plane's positions (entry t at slot (first + t) % ring), or 0 */
}
pc;

shared float s_p[BLK_ROWS][TILE];   /* scores, then exp(s - m) */
shared float s_red[BLK_ROWS][TILE]; /* the reduction trees */

float k_at(uint e)
{
	if (pc.f16 != 0u)
		return unpackHalf2x16(kh[e >> 1])[e & 1u];
	return kf[e];
}

float v_at(uint e)
{
	if (pc.f16 != 0u)
		return unpackHalf2x16(vh[e >> 1])[e & 1u];
	return vf[e];
}

/* The cache slot of a block's t-th position. */
uint slot(uint first, uint t)
{
	return pc.ring != 0u ? (first + t) % pc.ring : t;
}

void main()
{
	uint tid = gl_LocalInvocationID.x;
	uint blk = pc.prm_off + gl_WorkGroupID.x * BLK_WORDS;
	uint k0 = prm[blk], v0 = prm[blk + 1u], nr = prm[blk + 2u], hd = pc.head_dim;
	uint first = prm[blk + 3u];
	uint n[BLK_ROWS], qv[BLK_ROWS], vec[BLK_ROWS], n_max = 0u;
	for (uint i = 0u; i < BLK_ROWS; i++) {
		vec[i] = i < nr ? prm[blk + 4u + 2u * i] : 0u;
		qv[i] = vec[i] * hd;
		n[i] = i < nr ? prm[blk + 5u + 2u * i] : 0u;
		n_max = max(n_max, n[i]);
	}

	float m[BLK_ROWS], l[BLK_ROWS], acc[BLK_ROWS][MAX_C];
	for (uint i = 0u; i < BLK_ROWS; i++) {
		m[i] = uintBitsToFloat(0xff800000u); /* -inf */
		l[i] = 0.0;
		if (pc.sinks != 0u && i < nr) {
			m[i] = sink[pc.sinks_off + vec[i] % pc.n_head];
			l[i] = 1.0;
		}
		for (uint c = 0u; c < MAX_C; c++)
			acc[i][c] = 0.0;
	}

	for (uint t0 = 0u; t0 < n_max; t0 += TILE) {
		/* 1. scores of position t0 + tid for every row that sees it */
		uint t = t0 + tid;
		float dot[BLK_ROWS];
		for (uint i = 0u; i < BLK_ROWS; i++)
			dot[i] = 0.0;
		if (t < n_max) {
			uint kr = k0 + slot(first, t) * pc.pos_ld;
			for (uint d = 0u; d < hd; d++) {
				float kd = k_at(kr + d);
				for (uint i = 0u; i < nr; i++)
					if (t < n[i])
						dot[i] += q[pc.q_off + qv[i] + d] * kd;
			}
		}
		for (uint i = 0u; i < nr; i++) {
			float s = t < n[i] ? dot[i] * pc.scale : uintBitsToFloat(0xff800000u);
			s_p[i][tid] = s;
			s_red[i][tid] = s;
		}
		barrier();
		/* 2. the tile's max per row, a fixed tree */
		for (uint w = TILE / 2u; w > 0u; w >>= 1) {
			if (tid < w)
				for (uint i = 0u; i < nr; i++)
					s_red[i][tid] = max(s_red[i][tid], s_red[i][tid + w]);
			barrier();
		}
		float alpha[BLK_ROWS];
		for (uint i = 0u; i < nr; i++) {
			float mt = s_red[i][0];
			float mn = max(m[i], mt);
			/* a row whose positions ended before this tile keeps its state */
			alpha[i] = t0 < n[i] ? exp(m[i] - mn) : 1.0;
			if (t0 < n[i])
				m[i] = mn;
		}
		barrier();
		for (uint i = 0u; i < nr; i++) {
			float p = t < n[i] ? exp(s_p[i][tid] - m[i]) : 0.0;
			s_p[i][tid] = p;
			s_red[i][tid] = p;
		}
		barrier();
		for (uint w = TILE / 2u; w > 0u; w >>= 1) {
			if (tid < w)
				for (uint i = 0u; i < nr; i++)
					s_red[i][tid] = s_red[i][tid] + s_red[i][tid + w];
			barrier();
		}
		for (uint i = 0u; i < nr; i++)
			if (t0 < n[i])
				l[i] = l[i] * alpha[i] + s_red[i][0];
		/* 3. values: this thread's dims, positions in order */
		for (uint i = 0u; i < nr; i++)
			for (uint c = 0u; c < MAX_C; c++)
				acc[i][c] *= alpha[i];
		uint jn = min(uint(TILE), n_max - t0);
		for (uint j = 0u; j < jn; j++) {
			uint vr = v0 + slot(first, t0 + j) * pc.pos_ld;
			for (uint c = 0u; c < MAX_C; c++) {
				uint d = tid + c * 64u;
				if (d >= hd)
					break;
				float vd = v_at(vr + d);
				for (uint i = 0u; i < nr; i++)
					if (t0 + j < n[i])
						acc[i][c] += s_p[i][j] * vd;
			}
		}
		barrier(); /* s_p and s_red are rewritten by the next tile */
	}

	for (uint i = 0u; i < nr; i++) {
		float inv = n[i] > 0u ? 1.0 / l[i] : 0.0;
		uint ob = pc.out_off + qv[i];
		for (uint c = 0u; c < MAX_C; c++) {
			uint d = tid + c * 64u;
			if (d >= hd)
				break;
			o_out[ob + d] = acc[i][c] * inv;
		}
	}
}
