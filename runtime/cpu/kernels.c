/*
 * runtime/cpu/kernels.c: the one place where the kernel ISA is chosen: which
 * tables are compiled in (KERNELS_HAVE_X86 / KERNELS_HAVE_NEON, set by
 * runtime/cpu/cpu.am), which the CPU supports (cpuid + xgetbv on x86,
 * hwcaps on arm64), and SHOAL_ISA to override.
 *
 * Part: runtime/, room cpu/. Preference, best first:
 *   x86:   avx512 (F+BW+VL+VNNI), avx512bw (F+BW+VL), avx2 (+FMA+F16C), scalar
 *   arm64: neon (with dotprod when the CPU has it, else baseline), scalar
 * "avx512" names the VNNI table when the CPU has VNNI and the F+BW+VL one
 * otherwise; "avx512bw" always names the latter (so both can be tested).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "runtime/cpu/kernels_iq.h"
#include "runtime/cpu/kernels_impl.h"

#if defined(KERNELS_HAVE_X86)
#include <cpuid.h>
#endif
#if defined(KERNELS_HAVE_NEON) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(KERNELS_HAVE_NEON) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

shoal_dtype shoal_kernels_act_type(shoal_dtype wt)
{
	if (kernels__iq_is_grid(wt))
		return SHOAL_DTYPE_Q8_K;
	switch (wt) {
	case SHOAL_DTYPE_F32:
	case SHOAL_DTYPE_F16:
	case SHOAL_DTYPE_BF16:
		return wt;
	case SHOAL_DTYPE_Q8_0:
	case SHOAL_DTYPE_Q4_0:
	case SHOAL_DTYPE_Q5_0:
	case SHOAL_DTYPE_Q5_1:
	case SHOAL_DTYPE_IQ4_NL:
	case SHOAL_DTYPE_MXFP4:
		return SHOAL_DTYPE_Q8_0;
	case SHOAL_DTYPE_Q2_K:
	case SHOAL_DTYPE_Q3_K:
	case SHOAL_DTYPE_Q4_K:
	case SHOAL_DTYPE_Q5_K:
	case SHOAL_DTYPE_Q6_K:
	case SHOAL_DTYPE_IQ4_XS:
		return SHOAL_DTYPE_Q8_K;
	default:
		/* A caller bug: the engine refuses non-computable tensors. */
		SHOAL_ASSERT(shoal_dtype_computable(wt));
		return SHOAL_DTYPE_F32;
	}
}

const shoal_kernels *shoal_kernels_scalar(void)
{
	return &kernels__scalar;
}

/* ---- what the CPU offers --------------------------------------------------------- */

#if defined(KERNELS_HAVE_X86)
typedef struct kernels_x86_caps {
	int avx2, avx512, vnni;
} kernels_x86_caps;

static kernels_x86_caps kernels_x86_probe(void)
{
	kernels_x86_caps c = {0, 0, 0};
	unsigned a, b, cx, d;
	if (!__get_cpuid(1, &a, &b, &cx, &d))
		return c;
	int fma = (cx >> 12) & 1, osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1;
	int f16c = (cx >> 29) & 1;
	if (!osxsave || !avx)
		return c;
	/* the OS must save the ymm (XCR0 bits 1-2) and zmm/opmask (bits 5-7) state */
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	int os_avx = (lo & 0x6) == 0x6, os_avx512 = os_avx && (lo & 0xe0) == 0xe0;
	if (__get_cpuid_max(0, NULL) < 7)
		return c;
	__cpuid_count(7, 0, a, b, cx, d);
	int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
	int vnni = (cx >> 11) & 1;
	c.avx2 = os_avx && avx2 && fma && f16c;
	c.avx512 = c.avx2 && os_avx512 && f && bw && vl;
	c.vnni = c.avx512 && vnni;
	return c;
}
#endif

#if defined(KERNELS_HAVE_NEON)
static int kernels_arm_dotprod(void)
{
#if defined(__linux__)
	return (getauxval(AT_HWCAP) >> 20) & 1; /* HWCAP_ASIMDDP */
#elif defined(__APPLE__)
	int v = 0;
	size_t len = sizeof v;
	if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0))
		return 0;
	return v;
#else
	return 0;
#endif
}
#endif

/* ---- where weights are prefetched (kernels.h) ------------------------------------ */

int kernels__pf_l2 = 0;
static int kernels_pf_fixed;

static void kernels_pf_choose(void)
{
	const char *want = getenv("SHOAL_PREFETCH");
	if (want && (!strcmp(want, "l1") || !strcmp(want, "l2"))) {
		kernels__pf_l2 = want[1] == '2';
		kernels_pf_fixed = 1;
		return;
	}
	if (want && *want)
		fprintf(stderr, "shoal: SHOAL_PREFETCH=%s is neither l1 nor l2; choosing by CPU\n",
		        want);
#if defined(KERNELS_HAVE_X86)
	unsigned a, b, c, d;
	if (__get_cpuid(0, &a, &b, &c, &d)) {
		char vendor[13];
		memcpy(vendor, &b, 4);
		memcpy(vendor + 4, &d, 4);
		memcpy(vendor + 8, &c, 4);
		vendor[12] = '\0';
		kernels__pf_l2 = !strcmp(vendor, "GenuineIntel");
	}
#else
	kernels__pf_l2 = 1;
#endif
}

static pthread_once_t kernels_pf_once = PTHREAD_ONCE_INIT;

const char *shoal_kernels_prefetch(void)
{
	pthread_once(&kernels_pf_once, kernels_pf_choose);
	return kernels__pf_l2 ? "l2" : "l1";
}

int shoal_kernels_prefetch_fixed(void)
{
	pthread_once(&kernels_pf_once, kernels_pf_choose);
	return kernels_pf_fixed;
}

void shoal_kernels_set_prefetch(int l2)
{
	pthread_once(&kernels_pf_once, kernels_pf_choose);
#if defined(KERNELS_HAVE_X86)
	kernels__pf_l2 = l2 != 0;
#else
	(void)l2;
#endif
}

/* ---- by name and best ---------------------------------------------------------- */

const shoal_kernels *shoal_kernels_by_name(const char *isa)
{
	pthread_once(&kernels_pf_once, kernels_pf_choose);
	if (!isa)
		return NULL;
	if (!strcmp(isa, "scalar"))
		return &kernels__scalar;
#if defined(KERNELS_HAVE_X86)
	kernels_x86_caps c = kernels_x86_probe();
	if (!strcmp(isa, "avx2"))
		return c.avx2 ? &kernels__avx2 : NULL;
	if (!strcmp(isa, "avx512bw"))
		return c.avx512 ? &kernels__avx512 : NULL;
	if (!strcmp(isa, "avx512"))
		return c.vnni ? &kernels__avx512vnni : c.avx512 ? &kernels__avx512 : NULL;
#endif
#if defined(KERNELS_HAVE_NEON)
	if (!strcmp(isa, "neon"))
		return kernels_arm_dotprod() ? &kernels__neon_dotprod : &kernels__neon;
	if (!strcmp(isa, "neon-base"))
		return &kernels__neon;
#endif
	return NULL;
}

static const shoal_kernels *kernels_best;

static void kernels_choose(void)
{
	static const char *const order[] = {"avx512", "avx2", "neon", "scalar"};
	const char *want = getenv("SHOAL_ISA");
	if (want && *want) {
		kernels_best = shoal_kernels_by_name(want);
		if (kernels_best)
			return;
		fprintf(stderr,
		        "shoal: SHOAL_ISA=%s is not compiled in or not supported "
		        "by this CPU; choosing automatically\n",
		        want);
	}
	for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
		kernels_best = shoal_kernels_by_name(order[i]);
		if (kernels_best)
			return;
	}
}

const shoal_kernels *shoal_kernels_best(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, kernels_choose);
	return kernels_best;
}
