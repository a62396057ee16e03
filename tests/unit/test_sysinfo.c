/*
 * tests/unit/test_sysinfo.c: the machine probe (net/sysinfo.h): /proc/meminfo
 * parsing on samples, and a live probe whose figures must be plausible.
 */
#include "config.h"

#include <string.h>
#ifdef __linux__
#include <sched.h>
#endif

#include "net/sysinfo.h"
#include "tests/unit/test.h"

static void test_meminfo_sample(void)
{
	const char *s = "MemTotal:       24634532 kB\n"
	                "MemFree:         1000000 kB\n"
	                "MemAvailable:   23001234 kB\n"
	                "Cached:          2000000 kB\n";
	uint64_t t = 0, a = 0;
	ASSERT_EQ(shoal_sysinfo_parse_meminfo(s, &t, &a), SHOAL_OK);
	ASSERT_U64_EQ(t, 24634532ull * 1024);
	ASSERT_U64_EQ(a, 23001234ull * 1024);
	/* an old kernel without MemAvailable: free + cached */
	const char *old = "MemTotal: 1000 kB\nMemFree: 100 kB\nCached: 50 kB\n";
	ASSERT_EQ(shoal_sysinfo_parse_meminfo(old, &t, &a), SHOAL_OK);
	ASSERT_U64_EQ(a, 150ull * 1024);
	ASSERT_EQ(shoal_sysinfo_parse_meminfo("garbage\n", &t, &a), SHOAL_ERR_FORMAT);
	/* a key that merely starts like MemTotal does not count */
	ASSERT_EQ(shoal_sysinfo_parse_meminfo("MemTotalX: 5 kB\n", &t, &a), SHOAL_ERR_FORMAT);
}

static void test_live_probe(void)
{
	shoal_sysinfo si;
	ASSERT_EQ(shoal_sysinfo_probe(&si, 1), SHOAL_OK);
	ASSERT_GT(si.mem_total, 16ull << 20);
	ASSERT_LE(si.mem_available, si.mem_total);
	ASSERT_GE(si.cores, 1);
	ASSERT_TRUE(si.os[0] != '\0');
	ASSERT_TRUE(si.arch[0] != '\0');
	ASSERT_LE(si.n_if, SHOAL_SYSINFO_MAX_IF);
	ASSERT_LE(si.n_rdma, SHOAL_SYSINFO_MAX_RDMA); /* 0 is normal: no device here */
	int lo = 0;
	for (uint32_t i = 0; i < si.n_if; i++)
		lo |= !strcmp(si.ifs[i].kind, "loopback");
	shoal_sysinfo no_lo;
	ASSERT_EQ(shoal_sysinfo_probe(&no_lo, 0), SHOAL_OK);
	for (uint32_t i = 0; i < no_lo.n_if; i++)
		ASSERT_TRUE(strcmp(no_lo.ifs[i].kind, "loopback") != 0);
	(void)lo;
}

/* cores counts the CPUs the process may run on: under a one-CPU affinity
 * (what `taskset -c N shoal node` gives) it is 1, and back after. */
static void test_cores_follow_affinity(void)
{
#ifdef __linux__
	cpu_set_t was, one;
	ASSERT_EQ(sched_getaffinity(0, sizeof was, &was), 0);
	int cpu = 0;
	while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &was))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
	shoal_sysinfo si;
	ASSERT_EQ(shoal_sysinfo_probe(&si, 0), SHOAL_OK);
	ASSERT_EQ(sched_setaffinity(0, sizeof was, &was), 0);
	ASSERT_EQ(si.cores, 1);
	ASSERT_EQ(shoal_sysinfo_probe(&si, 0), SHOAL_OK);
	ASSERT_EQ(si.cores, (uint32_t)CPU_COUNT(&was));
#endif
}

static void test_cpu_time(void)
{
	unsigned long long busy = 0, total = 0;
	/* user nice system idle iowait irq softirq steal guest guest_nice */
	ASSERT_EQ(shoal_sysinfo_parse_stat("cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 1 2 3 4\n", &busy,
	                                   &total),
	          0);
	ASSERT_EQ(busy, 161u); /* guest (7) is inside user already */
	ASSERT_EQ(total, 1181u);
	ASSERT_EQ(shoal_sysinfo_parse_stat("cpu  1 2 3 4\n", &busy, &total), 0); /* old kernels */
	ASSERT_EQ(busy, 6u);
	ASSERT_EQ(shoal_sysinfo_parse_stat("cpu0 1 2 3 4\n", &busy, &total), -1);
	ASSERT_EQ(shoal_sysinfo_parse_stat("cpu  1 2\n", &busy, &total), -1);
	/* a busy loop of ours over 200 ms: we kept up to one core busy */
	shoal_sysinfo_cpu a, b;
	shoal_sysinfo_cpu_sample(&a);
	volatile unsigned long x = 0;
	do {
		for (int i = 0; i < 100000; i++)
			x += (unsigned long)i;
		shoal_sysinfo_cpu_sample(&b);
	} while (b.wall_s - a.wall_s < 0.2);
	double others, self;
	shoal_sysinfo_cpu_busy(&a, &b, &others, &self);
	ASSERT_TRUE(self > 0.0 && self < 1.3); /* a share of a core, less on a busy machine */
	ASSERT_TRUE(a.known ? others >= 0.0 : others < 0.0);
	shoal_sysinfo_cpu_busy(&b, &b, &others, &self); /* no time passed */
	ASSERT_TRUE(others < 0.0);
}

TEST_MAIN(TEST_CASE(test_cpu_time), TEST_CASE(test_meminfo_sample), TEST_CASE(test_live_probe),
          TEST_CASE(test_cores_follow_affinity))
