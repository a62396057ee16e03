/*
 * runtime/backends.h: the registry of backend kinds, the one place that
 * knows which implementations of runtime/backend.h this build has and
 * chooses one from a caller's options (runtime/backends.c). Whoever makes
 * an engine (the CLI's run, bench and perplexity, a pipeline stage) asks
 * it for an ops table and passes that in shoal_engine_config.backend; the
 * engine then creates the instance with the limits it derives (threads
 * from shoal_engine_config.n_threads, contexts, rows, weight bytes).
 *
 * Part: runtime/ (the room "backends": the only file above the backend
 * rooms, cpu/ today, that names them; see ARCHITECTURE.md).
 */
#ifndef SHOAL_RUNTIME_BACKENDS_H
#define SHOAL_RUNTIME_BACKENDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "runtime/backend.h"

/* What a caller asks for. Zero-initialise it; fields may be added (a GPU
 * backend's device index), and zero keeps meaning "the default". */
typedef struct shoal_backend_opts {
	/* A kind's name ("cpu"), or NULL or "auto": the first kind of the
	 * table, best first, that is available in this build and on this
	 * machine (the CPU today). Not owned; read during the call only. */
	const char *name;
} shoal_backend_opts;

/* One kind of backend in the registry. */
typedef struct shoal_backend_kind {
	const char *name; /* "cpu": what --backend and opts.name say */
	const char *what; /* one line for help texts */
	/* The kind's ops table (static; never NULL). */
	const shoal_backend_ops *(*ops)(void);
	/* Whether this machine can run it: true, or false with the reason in
	 * why (a missing driver, no device). May probe the system once; does
	 * not block for long. NULL: always available (the CPU). */
	bool (*available)(char *why, size_t why_len);
	/* Whether "auto" may take it here (same form; true implies
	 * available, which auto then does not ask); NULL: whenever it is
	 * available. Vulkan: only a device that is not software. */
	bool (*automatic)(char *why, size_t why_len);
} shoal_backend_kind;

/* Choose the backend o asks for (o may be NULL: "auto"). On SHOAL_OK *out
 * is the kind's static ops table. An unknown name gives SHOAL_ERR_NOTFOUND
 * with the known names in why; a known kind this machine cannot run gives
 * SHOAL_ERR_UNSUPPORTED with its reason. */
shoal_err shoal_backend_pick(const shoal_backend_opts *o, const shoal_backend_ops **out, char *why,
                             size_t why_len);

/* The kinds of this build, best first: *n of them (static). */
const shoal_backend_kind *shoal_backend_kinds(size_t *n);

/* The kinds' names, "cpu" or "cpu, vulkan", into buf (always terminated,
 * cut at cap); returns buf. For help texts and errors. */
const char *shoal_backend_names(char *buf, size_t cap);

/* One compute device as a peer publishes it (net/record.h) and the
 * scheduler plans on it: a backend kind's device, described by its ops
 * table's `devices`. */
typedef struct shoal_backend_devinfo {
	const char *backend; /* the kind's name, "cpu" (static) */
	char name[64];       /* the device's, "cpu avx2 x8" */
	bool gpu;            /* a GPU; else a CPU */
	bool unified;        /* it shares host memory (the CPU; a Mac's GPU) */
	bool software;       /* a software device (Mesa's lavapipe) */
	uint64_t mem_bytes;  /* memory it can hold weights in */
	double read_gbps;    /* measured read bandwidth, GB/s; 0: not measured */
	double gflops;       /* measured multiply rate, GFLOP/s; 0: not measured */
} shoal_backend_devinfo;

/* The devices a node computes on with backend choice o (NULL: "auto"),
 * up to cap of them into out, the host's CPU first; *n says how many.
 * The CPU kind is always listed: it runs the layers no GPU holds. Then
 * "auto" lists every other available kind's devices but software ones
 * (a GPU that is a CPU in disguise only where asked for), and a kind's
 * name lists that kind's devices, software ones included; "cpu" lists
 * the CPU alone. measure: the kinds other than the CPU measure their
 * devices' figures (blocks for about a second a device); the CPU's are
 * left 0, for its caller's kept compute probe (runtime/cpu/kernels_probe.h).
 * lim: the limits an instance is made with to ask it (its thread count
 * names the CPU device); NULL: one thread. An unknown or unavailable name
 * gives shoal_backend_pick's error; a kind that cannot make an instance
 * its create's. */
shoal_err shoal_backend_devices(const shoal_backend_opts *o, const shoal_backend_limits *lim,
                                bool measure, shoal_backend_devinfo *out, size_t cap, size_t *n,
                                char *why, size_t why_len);

#endif
