/*
 * net/record.h: what a peer says about itself -- the record that membership
 * gossip carries. The peer id itself is base/peer_id.h.
 *
 * Part of net/ (DESIGN.md section 3). The struct has fixed maximums so a
 * record never allocates; every count is checked when a record is decoded
 * from the wire (net/wire.h). Figures the scheduler uses are integers
 * (bytes, microseconds, MB/s, MFLOP/s), so every peer computes the same plan.
 *
 * A record is versioned: `version` grows each time its peer changes it, and
 * together with the membership incarnation (kept by net/swim.h) it orders
 * records: (incarnation, version) compared lexicographically, higher wins.
 *
 */
#ifndef SHOAL_NET_RECORD_H
#define SHOAL_NET_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/peer_id.h"

/* Limits. Each one bounds both the struct and what a decoder accepts. */
#define SHOAL_RECORD_NAME_MAX    64  /* human name incl. NUL (hostname is <= 63) */
#define SHOAL_RECORD_STR_MAX     32  /* short strings: os, arch, versions, iface */
#define SHOAL_RECORD_EP_MAX      128 /* an endpoint "tcp://[v6 addr%scope]:port" */
#define SHOAL_RECORD_PATH_MAX    256 /* a model path, truncated for display only */
#define SHOAL_RECORD_MAX_DATA_EP 8   /* data endpoints: one per interface */
#define SHOAL_RECORD_MAX_RDMA    4   /* RDMA devices named */
#define SHOAL_RECORD_MAX_MODELS  16  /* models available locally */
#define SHOAL_RECORD_MAX_LINKS   64  /* measured links: one per (peer, endpoint pair) */
#define SHOAL_MODEL_DIGEST_LEN   32  /* model id = SHA-256 / BLAKE2b-256 of the file */
/* Peers whose data plane this peer finds failing, named at once: a plan of
 * a desk or a lab has a handful of peers, and one observer's list only
 * counts with another's (runtime/node/serve_probe.c). */
#define SHOAL_RECORD_MAX_DSUSPECT 8
#define SHOAL_RECORD_MAX_DEVICES  8 /* compute devices: the CPU and a few GPUs */
/* Data-plane round trips measured: one per peer serving our model, as many
 * as a serving cluster has peers (runtime/node/serve_impl.h). */
#define SHOAL_RECORD_MAX_DLINKS 64

/* One data endpoint: an address on one network interface. */
typedef struct shoal_record_endpoint {
	char kind[SHOAL_RECORD_STR_MAX];   /* "ethernet", "wifi", "thunderbolt", "loopback", ... */
	char ifname[SHOAL_RECORD_STR_MAX]; /* "en0", "eth1" */
	char addr[SHOAL_RECORD_EP_MAX];    /* "tcp://192.168.1.7:7071" */
	uint32_t rdma;                     /* 1: an RDMA device is usable on this interface */
} shoal_record_endpoint;

/* What a compute device is. */
typedef enum shoal_record_device_kind {
	SHOAL_RECORD_DEVICE_CPU = 0,
	SHOAL_RECORD_DEVICE_GPU = 1,
} shoal_record_device_kind;

/* One compute device of this peer, as its backend described and measured
 * it (runtime/backends.h). Figures are integers, like every figure the
 * scheduler plans on. */
typedef struct shoal_record_device {
	char backend[SHOAL_RECORD_STR_MAX]; /* the backend kind computing on it: "cpu", "vulkan" */
	char name[SHOAL_RECORD_NAME_MAX];   /* "cpu avx2 x8", "AMD Radeon RX 7900 XTX" */
	uint32_t kind;                      /* shoal_record_device_kind */
	uint32_t unified;                   /* 1: it shares host memory (a Mac's GPU, an APU) */
	uint32_t software;                  /* 1: a software device (Mesa's lavapipe) */
	uint64_t mem_bytes;                 /* memory it can hold weights and KV cache in */
	uint64_t read_mb_s;                 /* measured read bandwidth, MB/s (0: not measured) */
	uint64_t mflops;                    /* measured multiply rate, MFLOP/s (0: not measured) */
} shoal_record_device;

/* One model file this peer has locally. */
typedef struct shoal_record_model {
	uint8_t digest[SHOAL_MODEL_DIGEST_LEN]; /* the model id */
	char path[SHOAL_RECORD_PATH_MAX];       /* where it lives on that peer */
	uint64_t bytes;                         /* file size */
} shoal_record_model;

/* One measured link from this peer to another, per endpoint pair. */
typedef struct shoal_record_link {
	shoal_peer_id peer;  /* the other end */
	uint8_t local_ep;    /* index into our data endpoints */
	uint8_t remote_ep;   /* index into the other peer's data endpoints */
	uint32_t rtt_us;     /* round-trip time, smoothed */
	uint64_t bw_bytes_s; /* bandwidth estimate, bytes per second (0 = not measured) */
} shoal_record_link;

/* One data link from this peer to another as its PROBE frames time it
 * (runtime/node/serve_probe.c): the least recent echo of a small probe,
 * and the bandwidth a large one's extra time gives, each as a
 * quarter-octave bucket's value (scheduler/view.h). What a hop or a tensor
 * group's round pays on the wire, unlike the control plane's figures above
 * (ZeroMQ and the node thread). */
typedef struct shoal_record_dlink {
	shoal_peer_id peer;  /* the other end */
	uint32_t rtt_us;     /* > 0 */
	uint64_t bw_bytes_s; /* 0: not measured (yet) */
} shoal_record_dlink;

typedef struct shoal_record {
	/* Identity and versions. */
	shoal_peer_id id;
	char name[SHOAL_RECORD_NAME_MAX];
	uint64_t version; /* record sequence; net/swim.h bumps it on every change */
	char cluster[SHOAL_RECORD_NAME_MAX];
	char sw_version[SHOAL_RECORD_STR_MAX]; /* "0.1.0" */
	uint32_t proto_version;                /* data plane / session protocol */
	uint32_t sched_version;                /* scheduler algorithm: plans must agree */

	/* Where to reach it. */
	char ctl_endpoint[SHOAL_RECORD_EP_MAX]; /* the control (gossip) endpoint */
	uint32_t n_data_ep;
	shoal_record_endpoint data_ep[SHOAL_RECORD_MAX_DATA_EP];

	/* What it has. */
	uint64_t mem_total;      /* bytes of RAM (unified memory on a Mac) */
	uint64_t mem_weights;    /* bytes available for weights and KV cache */
	uint64_t compute_mb_s;   /* compute probe: MB/s of the quantized mat-vec */
	uint64_t compute_mflops; /* compute probe: MFLOP/s of the same */
	uint32_t cores;
	char os[SHOAL_RECORD_STR_MAX];                          /* "linux", "darwin" */
	char arch[SHOAL_RECORD_STR_MAX];                        /* "x86_64", "arm64" */
	uint32_t n_rdma;                                        /* 0 is a normal answer */
	char rdma[SHOAL_RECORD_MAX_RDMA][SHOAL_RECORD_STR_MAX]; /* "mlx5_0", "rdma_en2" */
	uint32_t n_models;
	shoal_record_model models[SHOAL_RECORD_MAX_MODELS];
	uint32_t load_permille; /* 0..1000*cores: runnable work, like loadavg*1000 */
	/* Its compute devices, the CPU first. A record from a peer that
	 * predates the list decodes as one CPU device made of mem_weights,
	 * compute_mb_s and compute_mflops (net/wire.c). */
	uint32_t n_devices;
	shoal_record_device devices[SHOAL_RECORD_MAX_DEVICES];

	/* What it measured. */
	uint32_t n_links;
	shoal_record_link links[SHOAL_RECORD_MAX_LINKS];

	/* What it serves (runtime/node/serve.h). serving = 1: models[0] is the
	 * model it offers to the cluster, and mem_weights the bytes it offers
	 * (min of what is available and --mem-limit). ready_epoch > 0: it has
	 * mapped its part of the plan whose digest is ready_digest ("ready for
	 * digest D"); 0: ready for nothing. */
	uint32_t serving;
	uint8_t ready_digest[SHOAL_MODEL_DIGEST_LEN];
	uint64_t ready_epoch;
	/* The highest epoch of a plan that became servable here: every peer
	 * numbers a new plan above the largest of these it sees, so epochs
	 * only grow, also after a moment without any plan. */
	uint64_t served_epoch;
	/* 1: the sessions it owns draft with DeepSeek's MTP layer (shoal node
	 * --speculate mtp), which the plan's last stage then holds and runs
	 * (scheduler/view.h: mtp); absent from older peers: 0. */
	uint32_t spec_mtp;
	/* The peers whose data plane fails or crawls as this peer probes it
	 * (runtime/node/serve_probe.c): evidence that, with a second
	 * observer's, leaves a peer out of every peer's plan. */
	uint32_t n_dsuspect;
	shoal_peer_id dsuspect[SHOAL_RECORD_MAX_DSUSPECT];
	/* The data plane's round trips to the peers it probes (the same
	 * prober), in the order probed; absent from older peers. */
	uint32_t n_dlinks;
	shoal_record_dlink dlinks[SHOAL_RECORD_MAX_DLINKS];
} shoal_record;

/* Zero the record (all counts 0, all strings empty). */
void shoal_record_init(shoal_record *r);

/* Check a record that came from outside (or is about to be sent): counts
 * within limits, strings NUL-terminated, indices in range. */
shoal_err shoal_record_check(const shoal_record *r, char *why, size_t why_len);

/* 1 if the two records are equal in every field that is sent. */
int shoal_record_equal(const shoal_record *a, const shoal_record *b);

/* Copy NUL-terminated src into dst[cap], truncating; always terminates. */
void shoal_record_strcpy(char *dst, size_t cap, const char *src);

#endif
