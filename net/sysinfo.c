/*
 * net/sysinfo.c: the machine probes of sysinfo.h: memory, cores, uname,
 * interfaces (getifaddrs), RDMA devices (ibv_get_device_list), load.
 */
#include "config.h"

#include "net/sysinfo.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sched.h>
#endif
#ifdef __APPLE__
#include <mach/mach.h>
#include <sys/sysctl.h>
#endif
#ifdef SHOAL_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

/* Find "Key:   123 kB" in /proc/meminfo text; 0 when absent. */
static uint64_t sysinfo_meminfo_field(const char *text, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = text; p && *p;) {
		if (!strncmp(p, key, kl) && p[kl] == ':') {
			unsigned long long v = strtoull(p + kl + 1, NULL, 10);
			return (uint64_t)v * 1024u; /* the unit is always kB (KiB) */
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

shoal_err shoal_sysinfo_parse_meminfo(const char *text, uint64_t *total, uint64_t *available)
{
	*total = sysinfo_meminfo_field(text, "MemTotal");
	*available = sysinfo_meminfo_field(text, "MemAvailable");
	if (*available == 0) /* kernels before 3.14: approximate */
		*available =
		    sysinfo_meminfo_field(text, "MemFree") + sysinfo_meminfo_field(text, "Cached");
	return *total ? SHOAL_OK : SHOAL_ERR_FORMAT;
}

static void sysinfo_memory(shoal_sysinfo *si)
{
#ifdef __APPLE__
	uint64_t memsize = 0;
	size_t len = sizeof memsize;
	if (sysctlbyname("hw.memsize", &memsize, &len, NULL, 0) == 0)
		si->mem_total = memsize;
	vm_statistics64_data_t vm;
	mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
	vm_size_t page = 0;
	if (host_page_size(mach_host_self(), &page) == KERN_SUCCESS &&
	    host_statistics64(mach_host_self(), HOST_VM_INFO64, (host_info64_t)&vm, &count) ==
	        KERN_SUCCESS)
		/* free + inactive + purgeable pages can be had without paging */
		si->mem_available =
		    ((uint64_t)vm.free_count + vm.inactive_count + vm.purgeable_count) *
		    (uint64_t)page;
#else
	char text[8192];
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return;
	size_t n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	shoal_sysinfo_parse_meminfo(text, &si->mem_total, &si->mem_available);
#endif
}

static void sysinfo_load(shoal_sysinfo *si)
{
	double avg[1];
	if (getloadavg(avg, 1) == 1 && avg[0] >= 0)
		si->load_permille = (uint32_t)(avg[0] * 1000.0);
}

/* A guess at the kind of link from the interface name and sysfs. */
static void sysinfo_if_kind(const char *name, unsigned flags, char *kind, size_t cap)
{
	const char *k = "other";
	if (flags & IFF_LOOPBACK) {
		k = "loopback";
	} else {
#ifdef __APPLE__
		if (!strncmp(name, "bridge", 6) || !strncmp(name, "thunderbolt", 11))
			k = "thunderbolt";
		else if (!strncmp(name, "en", 2))
			k = "ethernet"; /* en0 may be Wi-Fi; the OS API to tell is not used yet */
#else
		char path[128];
		struct stat st;
		snprintf(path, sizeof path, "/sys/class/net/%s/wireless", name);
		if (stat(path, &st) == 0)
			k = "wifi";
		else if (!strncmp(name, "thunderbolt", 11))
			k = "thunderbolt";
		else if (!strncmp(name, "eth", 3) || !strncmp(name, "en", 2))
			k = "ethernet";
#endif
	}
	snprintf(kind, cap, "%s", k);
}

static void sysinfo_ifs(shoal_sysinfo *si, int include_loopback)
{
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) != 0)
		return;
	for (struct ifaddrs *p = ifa; p && si->n_if < SHOAL_SYSINFO_MAX_IF; p = p->ifa_next) {
		if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET)
			continue;
		if (!(p->ifa_flags & IFF_UP) || !(p->ifa_flags & IFF_RUNNING))
			continue;
		if ((p->ifa_flags & IFF_LOOPBACK) && !include_loopback)
			continue;
		shoal_sysinfo_if *e = &si->ifs[si->n_if++];
		snprintf(e->name, sizeof e->name, "%s", p->ifa_name);
		inet_ntop(AF_INET, &((struct sockaddr_in *)p->ifa_addr)->sin_addr, e->addr,
		          sizeof e->addr);
		sysinfo_if_kind(p->ifa_name, p->ifa_flags, e->kind, sizeof e->kind);
	}
	freeifaddrs(ifa);
}

static void sysinfo_rdma(shoal_sysinfo *si)
{
#ifdef SHOAL_HAVE_RDMA
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list) /* ENOSYS / no devices: normal, TCP only */
		return;
	for (int i = 0; i < num && si->n_rdma < SHOAL_SYSINFO_MAX_RDMA; i++)
		snprintf(si->rdma[si->n_rdma++], SHOAL_SYSINFO_STR_MAX, "%s",
		         ibv_get_device_name(list[i]));
	ibv_free_device_list(list);
#else
	(void)si;
#endif
}

shoal_err shoal_sysinfo_probe(shoal_sysinfo *out, int include_loopback)
{
	memset(out, 0, sizeof *out);
	sysinfo_memory(out);
	long nc = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
	/* the CPUs this process may run on (taskset, a container's cpuset),
	 * when fewer: a node started under `taskset -c 0` computes on 1 thread */
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 &&
	    (nc <= 0 || CPU_COUNT(&set) < nc))
		nc = CPU_COUNT(&set);
#endif
	out->cores = nc > 0 ? (uint32_t)nc : 1;
	struct utsname u;
	if (uname(&u) == 0) {
		snprintf(out->os, sizeof out->os, "%.*s", (int)sizeof out->os - 1, u.sysname);
		for (char *c = out->os; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		snprintf(out->arch, sizeof out->arch, "%.*s", (int)sizeof out->arch - 1, u.machine);
	}
	sysinfo_ifs(out, include_loopback);
	sysinfo_rdma(out);
	sysinfo_load(out);
	return SHOAL_OK;
}

void shoal_sysinfo_refresh(shoal_sysinfo *si)
{
	sysinfo_memory(si);
	sysinfo_load(si);
}

/* ---- CPU time -------------------------------------------------------------- */

int shoal_sysinfo_parse_stat(const char *text, unsigned long long *busy, unsigned long long *total)
{
	/* "cpu  user nice system idle iowait irq softirq steal guest guest_nice":
	 * idle and iowait are idle; guest time is already inside user */
	unsigned long long v[8] = {0};
	if (strncmp(text, "cpu ", 4) != 0)
		return -1;
	int k = sscanf(text + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
	               &v[3], &v[4], &v[5], &v[6], &v[7]);
	if (k < 4)
		return -1;
	*busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	*total = *busy + v[3] + v[4];
	return 0;
}

void shoal_sysinfo_cpu_sample(shoal_sysinfo_cpu *out)
{
	memset(out, 0, sizeof *out);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	out->wall_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		out->self_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
		              (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
#ifdef __linux__
	char text[512];
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return;
	size_t n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	unsigned long long busy, total;
	long tck = sysconf(_SC_CLK_TCK);
	if (tck > 0 && shoal_sysinfo_parse_stat(text, &busy, &total) == 0) {
		out->machine_busy_s = (double)busy / (double)tck;
		out->known = 1;
	}
#endif
}

void shoal_sysinfo_cpu_busy(const shoal_sysinfo_cpu *a, const shoal_sysinfo_cpu *b, double *others,
                            double *self)
{
	double dt = b->wall_s - a->wall_s;
	*self = dt > 0 ? (b->self_s - a->self_s) / dt : 0.0;
	*others = -1.0;
	if (dt <= 0 || !a->known || !b->known)
		return;
	double o = (b->machine_busy_s - a->machine_busy_s) / dt - *self;
	*others = o > 0 ? o : 0.0; /* jiffies and rusage round differently */
}
