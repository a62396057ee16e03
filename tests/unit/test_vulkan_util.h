/*
 * tests/unit/test_vulkan_util.h: what the Vulkan tests share: the two
 * backends (Vulkan on the machine's device, the CPU backend's scalar twin
 * as the reference), device copies of host arrays, poisoning (NaN bytes),
 * random inputs and the normwise relative error.
 *
 * vt_start() at the top of main: exit 77 without a Vulkan device, exit 1
 * (with the reason) when CI=true.
 */
#ifndef SHOAL_TESTS_UNIT_TEST_VULKAN_UTIL_H
#define SHOAL_TESTS_UNIT_TEST_VULKAN_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/vulkan/backend_vulkan.h"

static const shoal_backend_ops *vt_vk, *vt_cpu;
static shoal_backend *vt_b, *vt_c; /* Vulkan, CPU (scalar) */

#define VT_BUFS 64
static shoal_backend_buf *vt_bufs[VT_BUFS];
static int vt_nbufs;

static void vt_start(void)
{
	char why[256] = "";
	if (!shoal_backend_vulkan_available(why, sizeof why)) {
		if (getenv("CI") && !strcmp(getenv("CI"), "true")) {
			fprintf(stderr, "no Vulkan device, and CI=true needs one: %s\n", why);
			exit(1);
		}
		printf("SKIP: no Vulkan device: %s\n", why);
		exit(77);
	}
	setenv("SHOAL_ISA", "scalar", 1); /* the CPU reference: its scalar kernels */
	vt_vk = shoal_backend_vulkan();
	vt_cpu = shoal_backend_cpu();
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 256, .max_rows = 64, .max_n = 4096, .max_group = 8};
	if (vt_vk->create(&lim, &vt_b) || vt_cpu->create(&lim, &vt_c)) {
		fprintf(stderr, "cannot create the backends\n");
		exit(1);
	}
}

static void vt_end(void)
{
	for (int i = 0; i < vt_nbufs; i++)
		vt_vk->buf_free(vt_b, vt_bufs[i]);
	vt_nbufs = 0;
}

/* A device buffer of n bytes, poisoned (0xff bytes: F32 and F16 NaN). */
static void *vt_poisoned(size_t n)
{
	if (vt_nbufs == VT_BUFS)
		vt_end();
	shoal_backend_buf *buf;
	if (vt_vk->buf_alloc(vt_b, n, &buf)) {
		fprintf(stderr, "buf_alloc %zu failed\n", n);
		exit(1);
	}
	vt_bufs[vt_nbufs++] = buf;
	void *dev = vt_vk->buf_addr(buf);
	unsigned char *p = malloc(n ? n : 1);
	memset(p, 0xff, n);
	vt_vk->write(vt_b, dev, p, n);
	free(p);
	return dev;
}

/* A device copy of n bytes at host. */
static void *vt_dev(const void *host, size_t n)
{
	void *dev = vt_poisoned(n);
	vt_vk->write(vt_b, dev, host, n);
	return dev;
}

static void *vt_back(const void *dev, size_t n)
{
	void *p = malloc(n ? n : 1);
	vt_vk->read(vt_b, dev, p, n);
	return p;
}

static uint64_t vt_seed = 0x9e3779b97f4a7c15ull;
static float vt_rand(float lo, float hi)
{
	vt_seed = vt_seed * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (float)((vt_seed >> 40) & 0xffffff) / 16777216.0f;
}

static float *vt_rands(size_t n, float lo, float hi)
{
	float *p = malloc((n ? n : 1) * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = vt_rand(lo, hi);
	return p;
}

/* max |got - want| / max |want| over the n elements of rows of ld (a NaN
 * anywhere gives +inf). */
static double vt_relerr(const float *got, const float *want, size_t n, size_t n_rows, size_t ld)
{
	double num = 0, den = 0;
	for (size_t r = 0; r < n_rows; r++)
		for (size_t i = 0; i < n; i++) {
			double g = got[r * ld + i], w = want[r * ld + i];
			if (g != g || w != w)
				return INFINITY;
			num = fmax(num, fabs(g - w));
			den = fmax(den, fabs(w));
		}
	return den > 0 ? num / den : num;
}

/* Whether the bytes from n to ld of every row (and past the last row's n
 * up to total) still hold the poison. */
static int vt_untouched(const float *got, size_t n, size_t n_rows, size_t ld, size_t total)
{
	const unsigned char *p = (const unsigned char *)got;
	for (size_t i = 0; i < total; i++) {
		size_t r = i / ld, c = i % ld;
		if (r < n_rows && c < n)
			continue;
		for (int k = 0; k < 4; k++)
			if (p[4 * i + k] != 0xff)
				return 0;
	}
	return 1;
}

/* An op in place on rows of n, ld apart, in a buffer of n_rows * ld
 * floats poisoned before the input's (n_rows - 1) * ld + n were written:
 * the padding between rows still holds the input's bits (orig), and the
 * last row's padding the poison. */
static int vt_pad_kept(const float *got, const float *orig, size_t n, size_t n_rows, size_t ld)
{
	for (size_t r = 0; r + 1 < n_rows; r++)
		if (memcmp(got + r * ld + n, orig + r * ld + n, (ld - n) * 4))
			return 0;
	return vt_untouched(got + (n_rows - 1) * ld, n, 1, ld, ld);
}

#endif
