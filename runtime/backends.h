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
	/* Whether "auto" may take it here (same form); NULL: whenever it is
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

#endif
