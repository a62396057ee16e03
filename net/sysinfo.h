/*
 * net/sysinfo.h: what this machine has: memory, cores, OS/arch, network
 * interfaces, RDMA devices, load. The node puts these in its record.
 *
 * Part: net/. Linux reads /proc/meminfo (MemTotal, MemAvailable) and
 * /proc/loadavg; macOS (#ifdef __APPLE__, untested here) uses sysctl
 * hw.memsize and host_statistics64. RDMA devices come from libibverbs when
 * built with SHOAL_HAVE_RDMA; "none" (a NULL device list) is normal.
 */
#ifndef SHOAL_NET_SYSINFO_H
#define SHOAL_NET_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SHOAL_SYSINFO_STR_MAX  32
#define SHOAL_SYSINFO_MAX_IF   8 /* matches SHOAL_RECORD_MAX_DATA_EP */
#define SHOAL_SYSINFO_MAX_RDMA 4 /* matches SHOAL_RECORD_MAX_RDMA */

typedef struct shoal_sysinfo_if {
	char name[SHOAL_SYSINFO_STR_MAX]; /* "eth0" */
	char addr[48];                    /* IPv4 dotted quad */
	char kind[SHOAL_SYSINFO_STR_MAX]; /* "loopback", "ethernet", "wifi", "thunderbolt", "other"
	                                   */
} shoal_sysinfo_if;

typedef struct shoal_sysinfo {
	uint64_t mem_total;     /* bytes */
	uint64_t mem_available; /* bytes the OS says it can give without swapping */
	uint32_t cores;         /* online logical CPUs (Linux: those it may run on) */
	uint32_t load_permille; /* 1-minute load average x 1000 */
	char os[SHOAL_SYSINFO_STR_MAX];
	char arch[SHOAL_SYSINFO_STR_MAX];
	uint32_t n_if;
	shoal_sysinfo_if ifs[SHOAL_SYSINFO_MAX_IF];
	uint32_t n_rdma;
	char rdma[SHOAL_SYSINFO_MAX_RDMA][SHOAL_SYSINFO_STR_MAX];
} shoal_sysinfo;

/* Fill *out. include_loopback: list 127.0.0.0/8 interfaces too (a node
 * listening on loopback). Interfaces that are down or have no IPv4 are
 * skipped. A missing figure is left 0 and is not an error. */
shoal_err shoal_sysinfo_probe(shoal_sysinfo *out, int include_loopback);

/* Memory only, from the text of /proc/meminfo (tests feed it samples). */
shoal_err shoal_sysinfo_parse_meminfo(const char *text, uint64_t *total, uint64_t *available);

/* Refresh only what changes at run time (available memory, load). */
void shoal_sysinfo_refresh(shoal_sysinfo *si);

/* CPU time at one moment, to tell how busy the machine was between two
 * samples (shoal_sysinfo_cpu_busy): the machine's busy seconds over all
 * CPUs (Linux: /proc/stat; 0 where unknown), this process's CPU seconds
 * (getrusage) and a monotonic clock. */
typedef struct shoal_sysinfo_cpu {
	double machine_busy_s;
	double self_s;
	double wall_s;
	int known; /* the machine figure was read */
} shoal_sysinfo_cpu;

void shoal_sysinfo_cpu_sample(shoal_sysinfo_cpu *out);

/* Between samples a and b: the cores other processes kept busy on average
 * (*others) and this process (*self); -1 in *others where the machine
 * figure is unknown or no time passed. */
void shoal_sysinfo_cpu_busy(const shoal_sysinfo_cpu *a, const shoal_sysinfo_cpu *b, double *others,
                            double *self);

/* The busy and total jiffies of the aggregate "cpu" line of /proc/stat's
 * text (tests feed it samples); -1 when there is none. */
int shoal_sysinfo_parse_stat(const char *text, unsigned long long *busy, unsigned long long *total);

#endif
