/*
 * runtime/vulkan/vk_ops.c: the Vulkan backend's per-row and elementwise
 * ops (rms_norm, rope, kv_store, swiglu, swiglu_oai, add, copy, softmax),
 * top_k on the
 * host over rows read back, and the read-bandwidth probe. Each records
 * its dispatches through vk_impl.h; offsets are in elements of the type
 * the shader reads.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/vk_state.h"

#include <assert.h>
#include <math.h>
#include <string.h>
#include <time.h>

VK__SHADER(add);
VK__SHADER(copy);
VK__SHADER(rms_norm);
VK__SHADER(rope);
VK__SHADER(kv_store_f32);
VK__SHADER(kv_store_f16);
VK__SHADER(swiglu);
VK__SHADER(swiglu_oai);
VK__SHADER(softmax);
VK__SHADER(read_probe);

#define WG 256u /* the shaders' local_size_x */

/* Where ref starts, in elements of elt bytes (a 32-bit index). */
static uint32_t elems(vk__ref r, size_t elt)
{
	assert(r.off % elt == 0 && r.off / elt <= UINT32_MAX);
	return (uint32_t)(r.off / elt);
}

static uint32_t groups(uint64_t n, uint32_t per)
{
	return (uint32_t)((n + per - 1) / per);
}

/* One dispatch per slice of rows: push[row0_at] is the first row of each,
 * gy the rows of each (at most the device's y count). */
static void by_rows(shoal_backend *b, const vk__shader *s, uint32_t n_bind, const VkBuffer *bind,
                    uint32_t *push, uint32_t push_words, uint32_t row0_at, uint32_t gx,
                    uint32_t n_rows)
{
	uint32_t max_y = b->caps.max_groups[1];
	assert(gx <= b->caps.max_groups[0]);
	for (uint32_t r = 0; r < n_rows; r += max_y) {
		push[row0_at] = r;
		uint32_t gy = n_rows - r < max_y ? n_rows - r : max_y;
		vk__dispatch(b, s, n_bind, bind, push, push_words * 4, gx, gy, 1);
	}
}

void vk__add(shoal_backend *b, float *y, size_t ldy, const float *x, size_t ldx, uint32_t n,
             uint32_t n_rows)
{
	if (!n || !n_rows)
		return;
	vk__ref ry = vk__at(b, y), rx = vk__at(b, x);
	uint32_t push[6] = {elems(ry, 4), (uint32_t)ldy, elems(rx, 4), (uint32_t)ldx, n, 0};
	VkBuffer bind[2] = {ry.buf, rx.buf};
	by_rows(b, &vk__sh_add, 2, bind, push, 6, 5, groups(n, WG), n_rows);
}

void vk__copy(shoal_backend *b, float *dst, size_t ldd, const float *src, size_t lds, uint32_t n,
              uint32_t n_rows)
{
	if (!n || !n_rows)
		return;
	vk__ref rd = vk__at(b, dst), rs = vk__at(b, src);
	uint32_t push[6] = {elems(rd, 4), (uint32_t)ldd, elems(rs, 4), (uint32_t)lds, n, 0};
	VkBuffer bind[2] = {rd.buf, rs.buf};
	by_rows(b, &vk__sh_copy, 2, bind, push, 6, 5, groups(n, WG), n_rows);
}

void vk__rms_norm(shoal_backend *b, const float *x, size_t ldx, const float *w, uint32_t n,
                  uint32_t n_rows, float eps, float *y, size_t ldy)
{
	if (!n || !n_rows)
		return;
	vk__ref rx = vk__at(b, x), rw = vk__at(b, w), ry = vk__at(b, y);
	uint32_t push[8] = {
	    elems(rx, 4), (uint32_t)ldx, elems(rw, 4), elems(ry, 4), (uint32_t)ldy, n, 0, 0};
	memcpy(&push[7], &eps, 4);
	VkBuffer bind[3] = {rx.buf, rw.buf, ry.buf};
	by_rows(b, &vk__sh_rms_norm, 3, bind, push, 8, 6, 1, n_rows);
}

void vk__rope(shoal_backend *b, float *x, size_t ld, uint32_t n_rows, uint32_t n_head,
              uint32_t head_dim, uint32_t n_rot, const uint32_t *pos, const float *cs, bool neox)
{
	if (!n_rows || n_rot < 2 || !n_head)
		return;
	vk__ref rx = vk__at(b, x), rc = vk__at(b, cs);
	vk__ref rp = vk__params(b, pos, (size_t)n_rows * sizeof *pos);
	uint32_t push[9] = {elems(rx, 4), (uint32_t)ld, n_head,       head_dim, n_rot,
	                    neox,         elems(rc, 4), elems(rp, 4), 0};
	VkBuffer bind[3] = {rx.buf, rc.buf, rp.buf};
	by_rows(b, &vk__sh_rope, 3, bind, push, 9, 8, groups((uint64_t)(n_rot / 2) * n_head, WG),
	        n_rows);
}

/* The rows whose planes lie in one buffer go in one dispatch; params hold
 * (source row, cache element base) per row. */
#define KV_BATCH 256u

void vk__kv_store(shoal_backend *b, shoal_dtype t, const float *src, size_t ld, uint32_t n_rows,
                  uint32_t n_head_kv, uint32_t head_dim, void *const *plane, const uint32_t *pos,
                  size_t head_ld)
{
	assert(t == SHOAL_DTYPE_F32 || t == SHOAL_DTYPE_F16);
	if (!n_rows || !n_head_kv || !head_dim)
		return;
	size_t elt = t == SHOAL_DTYPE_F16 ? 2 : 4;
	const vk__shader *s = t == SHOAL_DTYPE_F16 ? &vk__sh_kv_store_f16 : &vk__sh_kv_store_f32;
	vk__ref rs = vk__at(b, src);
	uint32_t gx = groups((uint64_t)n_head_kv * head_dim, WG);
	uint32_t rows[2 * KV_BATCH];
	uint32_t done = 0;
	while (done < n_rows) {
		VkBuffer buf = vk__at(b, plane[done]).buf;
		uint32_t m = 0;
		for (uint32_t r = done; r < n_rows && m < KV_BATCH; r++) {
			vk__ref rp = vk__at(b, plane[r]);
			if (rp.buf != buf)
				break;
			rows[2 * m] = r;
			rows[2 * m + 1] = elems(rp, elt) + pos[r] * head_dim;
			m++;
		}
		vk__ref rq = vk__params(b, rows, (size_t)m * 2 * sizeof *rows);
		uint32_t push[7] = {elems(rs, 4),      (uint32_t)ld, n_head_kv, head_dim,
		                    (uint32_t)head_ld, elems(rq, 4), 0};
		VkBuffer bind[3] = {rs.buf, buf, rq.buf};
		by_rows(b, s, 3, bind, push, 7, 6, gx, m);
		done += m;
	}
}

/* A 1-D count of 256-element pieces as a 2-D grid (x at most the
 * device's count); the shader numbers pieces wg.y * num_wg.x + wg.x. */
static void grid_1d(shoal_backend *b, uint64_t n, uint32_t *gx, uint32_t *gy)
{
	uint64_t g = (n + WG - 1) / WG;
	uint32_t mx = b->caps.max_groups[0];
	*gx = g < mx ? (uint32_t)g : mx;
	*gy = (uint32_t)((g + *gx - 1) / *gx);
	assert(*gy <= b->caps.max_groups[1]);
}

void vk__swiglu(shoal_backend *b, const float *g, const float *u, size_t n, float *h)
{
	if (!n)
		return;
	vk__ref rg = vk__at(b, g), ru = vk__at(b, u), rh = vk__at(b, h);
	uint32_t push[4] = {elems(rg, 4), elems(ru, 4), elems(rh, 4), (uint32_t)n};
	VkBuffer bind[3] = {rg.buf, ru.buf, rh.buf};
	uint32_t gx, gy;
	grid_1d(b, n, &gx, &gy);
	vk__dispatch(b, &vk__sh_swiglu, 3, bind, push, sizeof push, gx, gy, 1);
}

void vk__swiglu_oai(shoal_backend *b, const float *g, const float *u, size_t n, float alpha,
                    float limit, float *h)
{
	if (!n)
		return;
	vk__ref rg = vk__at(b, g), ru = vk__at(b, u), rh = vk__at(b, h);
	struct {
		uint32_t go, uo, ho, n;
		float alpha, limit;
	} push = {elems(rg, 4), elems(ru, 4), elems(rh, 4), (uint32_t)n, alpha, limit};
	VkBuffer bind[3] = {rg.buf, ru.buf, rh.buf};
	uint32_t gx, gy;
	grid_1d(b, n, &gx, &gy);
	vk__dispatch(b, &vk__sh_swiglu_oai, 3, bind, &push, sizeof push, gx, gy, 1);
}

void vk__softmax(shoal_backend *b, float *x, uint32_t n, uint32_t n_rows, size_t ld)
{
	if (!n || !n_rows)
		return;
	vk__ref rx = vk__at(b, x);
	uint32_t push[4] = {elems(rx, 4), (uint32_t)ld, n, 0};
	VkBuffer bind[1] = {rx.buf};
	by_rows(b, &vk__sh_softmax, 1, bind, push, 4, 3, 1, n_rows);
}

/* Rows are read back in as many at a time as the scratch holds. */
void vk__top_k(shoal_backend *b, const float *x, uint32_t n, uint32_t n_rows, size_t ld, uint32_t k,
               int32_t *ids, float *vals)
{
	assert(n <= b->topk_cap);
	uint32_t r = 0;
	while (r < n_rows) {
		uint32_t m = 1;
		while (r + m < n_rows && (size_t)m * ld + n <= b->topk_cap)
			m++;
		size_t span = (size_t)(m - 1) * ld + n; /* floats from row r's start */
		vk__read(b, x + (size_t)r * ld, b->topk_rows, span * sizeof(float));
		/* the CPU backend's selection (runtime/backend_host.c) */
		shoal_backend_top_k_rows(b->topk_rows, n, m, ld, k, ids + (size_t)r * k,
		                         vals + (size_t)r * k);
		r += m;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Streaming read bandwidth: a large buffer read by read_probe.comp, best
 * of a few timed submits after one warm-up; 0 when there is no memory for
 * it. Software devices get a smaller buffer (they read host RAM slowly). */
double vk__read_gbps(shoal_backend *b)
{
	bool soft = b->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
	uint64_t bytes = soft ? (64ull << 20) : (512ull << 20);
	if (bytes > b->caps.max_buffer / 2)
		bytes = b->caps.max_buffer / 2 & ~(uint64_t)15;
	uint32_t threads = 65536; /* enough to keep any GPU's memory busy */
	void *src, *out;
	if (vk__region_new(b, bytes, &src))
		return 0;
	if (vk__region_new(b, (uint64_t)threads * 4, &out)) {
		vk__region_free(b, src);
		return 0;
	}
	vk__fill_zero(b, src, bytes);
	vk__submit_wait(b);
	vk__ref rs = vk__at(b, src), ro = vk__at(b, out);
	uint32_t push[3] = {elems(rs, 16), (uint32_t)(bytes / 16), elems(ro, 4)};
	VkBuffer bind[2] = {rs.buf, ro.buf};
	double best = 0;
	for (int it = 0; it < 4; it++) {
		double t0 = now_s();
		vk__dispatch(b, &vk__sh_read_probe, 2, bind, push, sizeof push, threads / WG, 1, 1);
		vk__submit_wait(b);
		double dt = now_s() - t0;
		double gbps = (double)bytes / dt / 1e9;
		if (it > 0 && gbps > best)
			best = gbps;
	}
	vk__region_free(b, out);
	vk__region_free(b, src);
	return best;
}
