/*
 * tests/unit/test_vulkan.c: the Vulkan backend's core on the machine's
 * Vulkan device (lavapipe here) against the CPU backend's scalar twin:
 * buffers, weights, write/read in call order, devices, the registry, and
 * the ops rms_norm, rope, kv_store (F32, F16), swiglu, gpt-oss's clamped
 * swiglu_oai, add, copy, softmax
 * and top_k, each on random inputs into poisoned outputs, with sizes that
 * leave tails (n not a multiple of the 256-wide workgroups), odd row
 * counts, padded rows, and a stated error bound.
 */
#include "config.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/backends.h"
#include "runtime/cpu/quant.h"
#include "tests/unit/test.h"
#include "tests/unit/test_vulkan_util.h"

/* ---- memory ------------------------------------------------------------------------------- */

static void test_buffers(void)
{
	shoal_backend_buf *buf;
	ASSERT_EQ(vt_vk->buf_alloc(vt_b, 4099, &buf), SHOAL_OK);
	ASSERT_TRUE(vt_vk->buf_host(buf) == NULL);
	unsigned char *dev = vt_vk->buf_addr(buf);
	unsigned char got[4099];
	memset(got, 0x5a, sizeof got);
	vt_vk->read(vt_b, dev, got, sizeof got);
	unsigned char zero[4099] = {0};
	ASSERT_MEM_EQ(got, zero, sizeof got); /* zeroed */
	/* address arithmetic: bytes written at an offset come back there */
	unsigned char msg[300];
	for (size_t i = 0; i < sizeof msg; i++)
		msg[i] = (unsigned char)(i * 7 + 1);
	vt_vk->write(vt_b, dev + 1001, msg, sizeof msg);
	vt_vk->read(vt_b, dev + 1000, got, sizeof msg + 2);
	ASSERT_EQ(got[0], 0);
	ASSERT_MEM_EQ(got + 1, msg, sizeof msg);
	ASSERT_EQ(got[sizeof msg + 1], 0);
	vt_vk->buf_free(vt_b, buf);
	vt_vk->buf_free(vt_b, NULL);
}

/* A device address is not host memory: dereferencing it faults. */
static void test_address_faults(void)
{
	shoal_backend_buf *buf;
	ASSERT_EQ(vt_vk->buf_alloc(vt_b, 64, &buf), SHOAL_OK);
	volatile unsigned char *dev = vt_vk->buf_addr(buf);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		_exit(dev[3] == 0 ? 10 : 11);
	}
	int st = 0;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	vt_vk->buf_free(vt_b, buf);
}

/* A buffer larger than a binding may span (lavapipe: 128 MiB): bytes
 * across its windows' seams come back, it is zeroed far in, and ops on
 * rows far in (add, copy between its ends) match the CPU's. */
static void test_large_buffer(void)
{
	size_t bytes = (size_t)300 << 20;
	shoal_backend_buf *buf;
	ASSERT_EQ(vt_vk->buf_alloc(vt_b, bytes, &buf), SHOAL_OK);
	unsigned char *dev = vt_vk->buf_addr(buf);
	size_t n = (size_t)3 << 20, at = ((size_t)127 << 20) + 12345;
	unsigned char *pat = malloc(n), *got = malloc(n);
	for (size_t i = 0; i < n; i++)
		pat[i] = (unsigned char)(i * 131 + 7);
	vt_vk->write(vt_b, dev + at, pat, n);
	vt_vk->read(vt_b, dev + at, got, n);
	ASSERT_MEM_EQ(got, pat, n);
	vt_vk->read(vt_b, dev + bytes - 4096, got, 4096);
	unsigned char zero[4096] = {0};
	ASSERT_MEM_EQ(got, zero, 4096);
	/* add on 3 rows of 1000 at 250 MiB (y) and 10 MiB (x); copy to 290 MiB */
	float *y = vt_rands(3000, -1, 1), *x = vt_rands(3000, -1, 1);
	float *dy = (float *)(dev + ((size_t)250 << 20)), *dx = (float *)(dev + ((size_t)10 << 20));
	float *dc = (float *)(dev + ((size_t)290 << 20));
	vt_vk->write(vt_b, dy, y, 3000 * 4);
	vt_vk->write(vt_b, dx, x, 3000 * 4);
	vt_vk->add(vt_b, dy, 1000, dx, 1000, 1000, 3);
	vt_vk->copy(vt_b, dc, 1000, dy, 1000, 1000, 3);
	vt_cpu->add(vt_c, y, 1000, x, 1000, 1000, 3);
	float back[3000];
	vt_vk->read(vt_b, dc, back, sizeof back);
	ASSERT_MEM_EQ(back, y, sizeof back);
	free(x);
	free(y);
	free(pat);
	free(got);
	vt_vk->buf_free(vt_b, buf);
}

/* More than the device holds: NOMEM (the engine names the tensor), and
 * the instance still works. */
static void test_out_of_memory(void)
{
	shoal_backend_buf *buf = (shoal_backend_buf *)1;
	ASSERT_EQ(vt_vk->buf_alloc(vt_b, (size_t)1 << 50, &buf), SHOAL_ERR_NOMEM);
	ASSERT_TRUE(buf == NULL);
	const void *dev = NULL;
	char small[16] = {0};
	ASSERT_EQ(vt_vk->weights(vt_b, small, (size_t)1 << 50, &dev), SHOAL_ERR_NOMEM);
	float one = 1, got = 0;
	float *d = vt_dev(&one, 4);
	vt_vk->add(vt_b, d, 1, d, 1, 1, 1);
	vt_vk->read(vt_b, d, &got, 4);
	ASSERT_TRUE(got == 2.0f);
	vt_end();
}

/* A host pointer handed to an op is a caller's bug: it aborts, naming
 * the address, instead of reading anything. */
static void test_not_a_device_address(void)
{
	static float host[4];
	float *d = vt_poisoned(16);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		(void)!freopen("/dev/null", "w", stderr);
		vt_vk->add(vt_b, d, 4, host, 4, 4, 1);
		_exit(0);
	}
	int st = 0;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	vt_end();
}

/* Weights larger than the staging buffer (16 MiB) come back whole. */
static void test_weights(void)
{
	size_t n = (20u << 20) / 4 + 13;
	uint32_t *host = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		host[i] = (uint32_t)(i * 2654435761u);
	const void *dev = NULL;
	ASSERT_EQ(vt_vk->weights(vt_b, host, n * 4, &dev), SHOAL_OK);
	ASSERT_TRUE(dev != NULL && dev != (const void *)host);
	uint32_t *got = malloc(n * 4);
	vt_vk->read(vt_b, dev, got, n * 4);
	ASSERT_MEM_EQ(got, host, n * 4);
	/* a slice from the middle */
	vt_vk->read(vt_b, (const uint32_t *)dev + 777777, got, 40);
	ASSERT_MEM_EQ(got, host + 777777, 40);
	/* weights that start and end inside pages (a tensor in a mapping) */
	const void *dev2 = NULL;
	ASSERT_EQ(vt_vk->weights(vt_b, (const char *)host + 4093, 10007, &dev2), SHOAL_OK);
	vt_vk->read(vt_b, dev2, got, 10007);
	ASSERT_MEM_EQ(got, (const char *)host + 4093, 10007);
	/* lavapipe shares the host's memory and imports the pages: the device
	 * reads them in place (a change the contract forbids shows it) */
	shoal_backend_device d;
	vt_vk->devices(vt_b, false, &d, 1);
	if (strstr(d.name, "llvmpipe") && !getenv("SHOAL_VK_NO_IMPORT")) {
		host[777777] ^= 0xffffffffu;
		vt_vk->read(vt_b, (const uint32_t *)dev + 777777, got, 4);
		ASSERT_TRUE(got[0] == host[777777]);
	}
	free(got);
	free(host);
}

/* write, op, write, op, read: each op sees the writes before it and not
 * the ones after it (recorded, not yet run, when the later write comes). */
static void test_call_order(void)
{
	float a[5] = {1, 2, 3, 4, 5}, one[5] = {1, 1, 1, 1, 1}, ten[5] = {10, 10, 10, 10, 10};
	float *y = vt_dev(a, sizeof a), *x = vt_dev(one, sizeof one);
	vt_vk->add(vt_b, y, 5, x, 5, 5, 1); /* y = a + 1 */
	vt_vk->write(vt_b, x, ten, sizeof ten);
	vt_vk->add(vt_b, y, 5, x, 5, 5, 1); /* y = a + 11 */
	float got[5];
	vt_vk->read(vt_b, y, got, sizeof got);
	for (int i = 0; i < 5; i++)
		ASSERT_TRUE(got[i] == a[i] + 11);
	vt_end();
}

/* Many dispatches between syncs: 5000 (ten descriptor pools of 512
 * sets, more than the first 4 made) and parameters past one 1 MiB
 * chunk (100 ropes of 4000 positions each, 16 KB apiece). */
static void test_long_recording(void)
{
	float one = 1, zero = 0, got = 0;
	float *y = vt_dev(&zero, 4), *x = vt_dev(&one, 4);
	for (int i = 0; i < 5000; i++)
		vt_vk->add(vt_b, y, 1, x, 1, 1, 1);
	vt_vk->read(vt_b, y, &got, 4);
	ASSERT_TRUE(got == 5000.0f);
	uint32_t rows = 4000, n_ctx = 64;
	uint32_t *pos = malloc(rows * sizeof *pos);
	float cs[64 * 2];
	for (uint32_t p = 0; p < n_ctx; p++) {
		cs[2 * p] = cosf(0.1f * (float)p);
		cs[2 * p + 1] = sinf(0.1f * (float)p);
	}
	for (uint32_t r = 0; r < rows; r++)
		pos[r] = (r * 7) % n_ctx;
	float *v = vt_rands(2 * rows, -1, 1);
	float *dv = vt_dev(v, 2 * rows * 4), *dcs = vt_dev(cs, sizeof cs);
	for (int i = 0; i < 100; i++) {
		vt_vk->rope(vt_b, dv, 2, rows, 1, 2, 2, pos, dcs, false);
		vt_cpu->rope(vt_c, v, 2, rows, 1, 2, 2, pos, cs, false);
	}
	float *back = vt_back(dv, 2 * rows * 4);
	/* 100 rotations, each within a few ulp (see test_rope) */
	ASSERT_TRUE(vt_relerr(back, v, 2 * rows, 1, 2 * rows) <= 1e-5);
	free(back);
	free(v);
	free(pos);
	vt_end();
}

/* ---- devices and the registry ---------------------------------------------------------------- */

static void test_devices(void)
{
	shoal_backend_device d[2];
	memset(d, 0x5a, sizeof d);
	ASSERT_EQ(vt_vk->devices(vt_b, false, d, 2), 1);
	ASSERT_TRUE(strstr(d[0].name, "(vulkan)") != NULL);
	ASSERT_GT(d[0].mem_bytes, 0);
	ASSERT_TRUE(d[0].read_gbps == 0 && d[0].gflops == 0);
	char why[200];
	bool hw = shoal_backend_vulkan_hardware(why, sizeof why);
	ASSERT_TRUE(hw == !d[0].software || !hw); /* a software device when that is all */
	if (strstr(d[0].name, "llvmpipe")) {
		ASSERT_TRUE(d[0].software);
		ASSERT_TRUE(d[0].unified);
		ASSERT_EQ(d[0].kind, SHOAL_DEVICE_CPU);
	}
	ASSERT_EQ(vt_vk->devices(vt_b, true, d, 1), 1);
	ASSERT_TRUE(d[0].read_gbps > 0.0);
	printf("device: %s, %.1f GiB, unified %d, software %d, read %.2f GB/s\n", d[0].name,
	       (double)d[0].mem_bytes / (1 << 30), d[0].unified, d[0].software, d[0].read_gbps);
}

static void test_registry(void)
{
	const shoal_backend_ops *ops = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_backend_opts o = {.name = "vulkan"};
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(ops == vt_vk);
	ASSERT_EQ(ops->abi, SHOAL_BACKEND_ABI);
	char names[128];
	ASSERT_TRUE(strstr(shoal_backend_names(names, sizeof names), "vulkan") != NULL);
	/* auto: Vulkan only on a device that is not software */
	o.name = "auto";
	ASSERT_EQ(shoal_backend_pick(&o, &ops, why, sizeof why), SHOAL_OK);
	bool hw = shoal_backend_vulkan_hardware(why, sizeof why);
	ASSERT_TRUE(ops == (hw ? vt_vk : vt_cpu));
}

static void test_supports(void)
{
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_F16));
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_F32));
	ASSERT_FALSE(vt_vk->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_Q8_0));
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_TO_F32, SHOAL_DTYPE_Q4_K));
	/* gpt-oss's ops (ABI 6), asked with F32 */
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_ATTN_SINKS, SHOAL_DTYPE_F32));
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_SWIGLU_OAI, SHOAL_DTYPE_F32));
	/* the MoE router and expert biases (ABI 8), asked with F32 */
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_MOE_ROUTE, SHOAL_DTYPE_F32));
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_MOE_BIAS, SHOAL_DTYPE_F32));
	ASSERT_FALSE(vt_vk->supports(SHOAL_BACKEND_OP_MOE_ROUTE, SHOAL_DTYPE_F16));
	/* to_f32 on the host: the CPU's dequantizer bit for bit */
	uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
	float a[4], b[4];
	vt_vk->to_f32(SHOAL_DTYPE_F16, h, a, 4);
	vt_cpu->to_f32(SHOAL_DTYPE_F16, h, b, 4);
	ASSERT_MEM_EQ(a, b, sizeof a);
	ASSERT_TRUE(a[0] == 1.0f && a[1] == -2.0f);
}

/* ---- elementwise ------------------------------------------------------------------------------
 */

/* add: one F32 addition per element, exact (bitwise equal), with a tail
 * (1000 = 3 * 256 + 232), 3 padded rows, a bias row (ldx 0), and rows past
 * the device's group count (70001 rows of 3: split dispatches). */
static void test_add(void)
{
	struct {
		uint32_t n, rows;
		size_t ldy, ldx;
	} cs[] = {{1000, 3, 1003, 1001}, {1000, 3, 1000, 0}, {3, 70001, 3, 3}, {1, 1, 1, 1}};
	for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
		uint32_t n = cs[c].n, rows = cs[c].rows;
		size_t ldy = cs[c].ldy, ldx = cs[c].ldx;
		size_t ny = (rows - 1) * ldy + n, nx = ldx ? (rows - 1) * ldx + n : n;
		float *y = vt_rands(ny, -4, 4), *x = vt_rands(nx, -4, 4);
		float *dy = vt_poisoned(ny * 4 + 64); /* poison past the end too */
		vt_vk->write(vt_b, dy, y, ny * 4);
		float *dx = vt_dev(x, nx * 4);
		vt_vk->add(vt_b, dy, ldy, dx, ldx, n, rows);
		vt_cpu->add(vt_c, y, ldy, x, ldx, n, rows);
		float *got = vt_back(dy, ny * 4 + 64);
		for (size_t r = 0; r < rows; r++)
			ASSERT_MEM_EQ(got + r * ldy, y + r * ldy, n * 4);
		ASSERT_TRUE(vt_untouched(got + ny, 0, 0, 1, 16));
		free(got);
		free(x);
		free(y);
		vt_end();
	}
}

/* copy: exact; padded destination rows keep their poison. */
static void test_copy(void)
{
	uint32_t n = 777, rows = 5;
	size_t ldd = 800, lds = 780;
	float *s = vt_rands((rows - 1) * lds + n, -1, 1);
	float *ds = vt_dev(s, ((rows - 1) * lds + n) * 4);
	float *dd = vt_poisoned(rows * ldd * 4);
	vt_vk->copy(vt_b, dd, ldd, ds, lds, n, rows);
	float *got = vt_back(dd, rows * ldd * 4);
	for (uint32_t r = 0; r < rows; r++)
		ASSERT_MEM_EQ(got + r * ldd, s + r * lds, n * 4);
	ASSERT_TRUE(vt_untouched(got, n, rows, ldd, rows * ldd));
	free(got);
	free(s);
	vt_end();
}

/* swiglu, and gpt-oss's swiglu_oai (alpha 1.702, limit 7, as the models
 * hold them; g in [-12, 12) and u in [-10, 10), so the clamp is reached
 * on g from above and on u from both sides, which is asserted): bound
 * 1e-5 relative per element (plus 1e-7 of the largest): the CPU's exp is
 * a polynomial (swiglu) or libm's (swiglu_oai), the device's exp within
 * (3 + 2|x|) ulp (Vulkan's precision rule) for |x| <= 8 (swiglu) or
 * 1.702 * 12 = 20.4 (swiglu_oai): <= 44 ulp ~ 5.2e-6, and a division
 * that rounds on both sides. Also in place (h == g). */
static void swiglu_check(bool oai)
{
	size_t n = 4097;
	const float alpha = 1.702f, limit = 7.0f;
	float *g = vt_rands(n, oai ? -12 : -8, oai ? 12 : 8);
	float *u = vt_rands(n, oai ? -10 : -2, oai ? 10 : 2);
	float *want = malloc(n * 4);
	if (oai) {
		vt_cpu->swiglu_oai(vt_c, g, u, n, alpha, limit, want);
		size_t g_hi = 0, u_hi = 0, u_lo = 0;
		for (size_t i = 0; i < n; i++)
			g_hi += g[i] > limit, u_hi += u[i] > limit, u_lo += u[i] < -limit;
		ASSERT_TRUE(g_hi > 0 && u_hi > 0 && u_lo > 0);
	} else {
		vt_cpu->swiglu(vt_c, g, u, n, want);
	}
	for (int inplace = 0; inplace < 2; inplace++) {
		float *dg = vt_dev(g, n * 4), *du = vt_dev(u, n * 4);
		float *dh = inplace ? dg : vt_poisoned(n * 4 + 64);
		if (oai)
			vt_vk->swiglu_oai(vt_b, dg, du, n, alpha, limit, dh);
		else
			vt_vk->swiglu(vt_b, dg, du, n, dh);
		float *got = vt_back(dh, n * 4);
		double big = 0;
		for (size_t i = 0; i < n; i++)
			big = fmax(big, fabs(want[i]));
		for (size_t i = 0; i < n; i++)
			ASSERT_NEAR(got[i], want[i], 1e-5 * fabs(want[i]) + 1e-7 * big);
		if (!inplace) {
			float tail[16];
			vt_vk->read(vt_b, dh + n, tail, sizeof tail);
			ASSERT_TRUE(vt_untouched(tail, 0, 0, 1, 16));
		}
		free(got);
		vt_end();
	}
	free(want);
	free(g);
	free(u);
}

static void test_swiglu(void)
{
	swiglu_check(false);
}

static void test_swiglu_oai(void)
{
	swiglu_check(true);
}

/* ---- per row ------------------------------------------------------------------------------------
 */

/* rms_norm: bound 1e-5 normwise: the device sums squares in F32 (256
 * partials of <= 4 terms, a fixed tree of 8 levels: relative error
 * <~ 12 ulp ~ 1.4e-6) where the CPU sums in double, then a sqrt and two
 * products that may be fused. In place too (y == x, same ld). */
static void test_rms_norm(void)
{
	uint32_t ns[] = {1000, 33, 256, 4096};
	for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
		uint32_t n = ns[c], rows = 5;
		size_t ldx = n + 3, ldy = n + 5;
		float *x = vt_rands((rows - 1) * ldx + n, -3, 3), *w = vt_rands(n, 0.5f, 1.5f);
		float *want = malloc(rows * ldy * 4), *want2 = malloc(((rows - 1) * ldx + n) * 4);
		vt_cpu->rms_norm(vt_c, x, ldx, w, n, rows, 1e-6f, want, ldy);
		memcpy(want2, x, ((rows - 1) * ldx + n) * 4);
		vt_cpu->rms_norm(vt_c, want2, ldx, w, n, rows, 1e-6f, want2, ldx);
		float *dx = vt_dev(x, ((rows - 1) * ldx + n) * 4), *dw = vt_dev(w, n * 4);
		float *dy = vt_poisoned(rows * ldy * 4);
		vt_vk->rms_norm(vt_b, dx, ldx, dw, n, rows, 1e-6f, dy, ldy);
		vt_vk->rms_norm(vt_b, dx, ldx, dw, n, rows, 1e-6f, dx, ldx); /* in place after */
		float *got = vt_back(dy, rows * ldy * 4);
		float *got2 = vt_back(dx, ((rows - 1) * ldx + n) * 4);
		double e = vt_relerr(got, want, n, rows, ldy);
		ASSERT_TRUE(e <= 1e-5);
		ASSERT_TRUE(vt_untouched(got, n, rows, ldy, rows * ldy));
		ASSERT_TRUE(vt_relerr(got2, want2, n, rows, ldx) <= 1e-5);
		free(got);
		free(got2);
		free(want);
		free(want2);
		free(x);
		free(w);
		vt_end();
	}
}

/* rope: bound 2e-6 normwise: each output is x0 c - x1 s (two products
 * and a difference; the device may fuse one into an fma): a few ulp of
 * |x0| + |x1|. Both pair layouts, n_rot < head_dim (the rest untouched),
 * padded rows, 7 rows at scattered positions. */
static void test_rope(void)
{
	uint32_t rows = 7, n_head = 3, head_dim = 10, n_rot = 8, n_ctx = 50;
	size_t ld = n_head * head_dim + 2, nx = (rows - 1) * ld + n_head * head_dim;
	float *cs = malloc(n_ctx * n_rot * 4);
	for (uint32_t p = 0; p < n_ctx; p++)
		for (uint32_t i = 0; i < n_rot / 2; i++) {
			float a = (float)p * powf(10000.0f, -2.0f * (float)i / (float)n_rot);
			cs[p * n_rot + 2 * i] = cosf(a);
			cs[p * n_rot + 2 * i + 1] = sinf(a);
		}
	uint32_t pos[7] = {0, 49, 3, 17, 17, 1, 33};
	float *dcs = vt_dev(cs, n_ctx * n_rot * 4);
	for (int neox = 0; neox < 2; neox++) {
		float *x = vt_rands(nx, -2, 2);
		float *dx = vt_poisoned(rows * ld * 4);
		vt_vk->write(vt_b, dx, x, nx * 4);
		vt_vk->rope(vt_b, dx, ld, rows, n_head, head_dim, n_rot, pos, dcs, neox);
		vt_cpu->rope(vt_c, x, ld, rows, n_head, head_dim, n_rot, pos, cs, neox);
		float *got = vt_back(dx, rows * ld * 4);
		ASSERT_TRUE(vt_relerr(got, x, n_head * head_dim, rows, ld) <= 2e-6);
		ASSERT_TRUE(vt_pad_kept(got, x, n_head * head_dim, rows, ld));
		for (uint32_t r = 0; r < rows; r++) /* dims past n_rot: unchanged bits */
			for (uint32_t h = 0; h < n_head; h++)
				ASSERT_MEM_EQ(got + r * ld + h * head_dim + n_rot,
				              x + r * ld + h * head_dim + n_rot,
				              (head_dim - n_rot) * 4);
		free(got);
		free(x);
	}
	free(cs);
	vt_end();
}

/* kv_store: F32 exact, F16 bit for bit the CPU's round to nearest even
 * (the shader rounds in integers); rows into two planes (two buffers),
 * cache elements not written keep their poison. Values include halfway
 * cases, subnormals and overflow. */
static void test_kv_store(void)
{
	uint32_t rows = 5, n_kv = 3, hd = 65, n_ctx = 9;
	size_t ld = n_kv * hd + 4, head_ld = (size_t)n_ctx * hd;
	float *src = vt_rands((rows - 1) * ld + n_kv * hd, -70000, 70000);
	src[1] = 1.0f + 3.0f / 2048; /* halfway, odd below: up to even */
	src[5] = 1.0f + 1.0f / 2048; /* halfway, even below: down */
	src[2] = 3e-6f;              /* subnormal half */
	src[3] = 65520.0f;           /* to infinity */
	src[4] = 1e-3f;
	uint32_t pos[5] = {0, 8, 4, 3, 7};
	float *dsrc = vt_dev(src, ((rows - 1) * ld + n_kv * hd) * 4);
	for (int f16 = 0; f16 < 2; f16++) {
		shoal_dtype t = f16 ? SHOAL_DTYPE_F16 : SHOAL_DTYPE_F32;
		size_t elt = f16 ? 2 : 4, plane_bytes = n_kv * head_ld * elt;
		unsigned char *host[2] = {malloc(plane_bytes), malloc(plane_bytes)};
		unsigned char *dev[2] = {vt_poisoned(plane_bytes), vt_poisoned(plane_bytes)};
		memset(host[0], 0xff, plane_bytes);
		memset(host[1], 0xff, plane_bytes);
		void *hp[5], *dp[5];
		for (uint32_t r = 0; r < rows; r++) {
			hp[r] = host[r % 3 == 1];
			dp[r] = dev[r % 3 == 1];
		}
		vt_vk->kv_store(vt_b, t, dsrc, ld, rows, n_kv, hd, dp, pos, head_ld);
		vt_cpu->kv_store(vt_c, t, src, ld, rows, n_kv, hd, hp, pos, head_ld);
		for (int p = 0; p < 2; p++) {
			unsigned char *got = vt_back(dev[p], plane_bytes);
			ASSERT_MEM_EQ(got, host[p], plane_bytes);
			free(got);
			free(host[p]);
		}
	}
	free(src);
	vt_end();
}

/* softmax: bound 1e-5 normwise: F32 partial sums in a fixed tree where
 * the CPU sums in double, the device's exp (<= 3 + 2|x| ulp, |x| <= 16)
 * against the CPU's polynomial. Tails (37, 1000), 3 padded rows. */
static void test_softmax(void)
{
	uint32_t ns[] = {37, 1000, 256};
	for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
		uint32_t n = ns[c], rows = 3;
		size_t ld = n + 7, nx = (rows - 1) * ld + n;
		float *x = vt_rands(nx, -8, 8);
		float *dx = vt_poisoned(rows * ld * 4);
		vt_vk->write(vt_b, dx, x, nx * 4);
		vt_vk->softmax(vt_b, dx, n, rows, ld);
		vt_cpu->softmax(vt_c, x, n, rows, ld);
		float *got = vt_back(dx, rows * ld * 4);
		ASSERT_TRUE(vt_relerr(got, x, n, rows, ld) <= 1e-5);
		ASSERT_TRUE(vt_pad_kept(got, x, n, rows, ld));
		free(got);
		free(x);
		vt_end();
	}
}

/* top_k: the CPU's ids and values exactly: ties to the lower index, NaN
 * lowest, 5 padded rows; and rows of 5000 (more than fit the scratch in
 * one read with ld 20000: read back a few rows at a time). */
static void test_top_k(void)
{
	uint32_t n = 64, rows = 5, k = 6;
	size_t ld = 70, nx = (rows - 1) * ld + n;
	float *x = vt_rands(nx, -1, 1);
	x[3] = x[9] = x[20] = 2.0f; /* a tie */
	x[ld + 5] = NAN;
	for (uint32_t i = 0; i < n; i++)
		x[2 * ld + i] = 0.5f; /* all tied */
	float *dx = vt_dev(x, nx * 4);
	int32_t ids[30], wid[30];
	float vals[30], wv[30];
	vt_vk->top_k(vt_b, dx, n, rows, ld, k, ids, vals);
	vt_cpu->top_k(vt_c, x, n, rows, ld, k, wid, wv);
	ASSERT_MEM_EQ(ids, wid, sizeof ids);
	ASSERT_MEM_EQ(vals, wv, sizeof vals);
	ASSERT_EQ(ids[0], 3);
	ASSERT_EQ(ids[1], 9);
	free(x);
	n = 5000, rows = 9, k = 3, ld = 20000, nx = (rows - 1) * ld + n;
	x = vt_rands(nx, -1, 1);
	dx = vt_dev(x, nx * 4);
	vt_vk->top_k(vt_b, dx, n, rows, ld, k, ids, vals);
	vt_cpu->top_k(vt_c, x, n, rows, ld, k, wid, wv);
	ASSERT_MEM_EQ(ids, wid, rows * k * 4);
	ASSERT_MEM_EQ(vals, wv, rows * k * 4);
	free(x);
	vt_end();
}

int main(void)
{
	vt_start();
	static const test_case_ cases[] = {
	    TEST_CASE(test_buffers),
	    TEST_CASE(test_address_faults),
	    TEST_CASE(test_out_of_memory),
	    TEST_CASE(test_large_buffer),
	    TEST_CASE(test_not_a_device_address),
	    TEST_CASE(test_weights),
	    TEST_CASE(test_call_order),
	    TEST_CASE(test_long_recording),
	    TEST_CASE(test_devices),
	    TEST_CASE(test_registry),
	    TEST_CASE(test_supports),
	    TEST_CASE(test_add),
	    TEST_CASE(test_copy),
	    TEST_CASE(test_swiglu),
	    TEST_CASE(test_swiglu_oai),
	    TEST_CASE(test_rms_norm),
	    TEST_CASE(test_rope),
	    TEST_CASE(test_kv_store),
	    TEST_CASE(test_softmax),
	    TEST_CASE(test_top_k),
	};
	int rc = test_run_(cases, sizeof cases / sizeof cases[0]);
	vt_end();
	vt_vk->destroy(vt_b);
	vt_cpu->destroy(vt_c);
	return rc;
}
