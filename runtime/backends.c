/*
 * runtime/backends.c: the registry of backend kinds (backends.h): a const
 * table, best first, and the choice by name or "auto". A new backend
 * (a GPU room beside cpu/) adds one row here and nothing anywhere else
 * names it.
 *
 * Part: runtime/ (the room "backends", which alone may include the
 * backend rooms; see tests/sh/include_check.sh).
 */
#include "config.h"

#include "runtime/backends.h"

#include <stdio.h>
#include <string.h>

#include "runtime/cpu/backend_cpu.h"
#ifdef SHOAL_HAVE_VULKAN
#include "runtime/vulkan/backend_vulkan.h"
#endif

/* Best first: "auto" takes the first row that is available (and, where a
 * row says, that auto may take: Vulkan only on a device that is not
 * software). The CPU is always available and is last, so "auto" always
 * finds one. */
static const shoal_backend_kind kinds[] = {
#ifdef SHOAL_HAVE_VULKAN
    {.name = "vulkan",
     .what = "a Vulkan 1.2 GPU (MoltenVK on a Mac; Mesa's software lavapipe only when named)",
     .ops = shoal_backend_vulkan,
     .available = shoal_backend_vulkan_available,
     .automatic = shoal_backend_vulkan_hardware},
#endif
    {.name = "cpu",
     .what = "the CPU: the best kernels of this machine and a thread pool",
     .ops = shoal_backend_cpu,
     .available = NULL},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

/* The kinds' names in an error: a handful of short names. */
#define NAMES_LEN 128

/* The kind that computes in host memory: always among a node's devices
 * (it runs whatever no GPU holds). */
#define HOST_KIND "cpu"

/* Devices one kind may describe at most: a machine with 8 GPUs. */
#define KIND_MAX_DEVICES 8

const shoal_backend_kind *shoal_backend_kinds(size_t *n)
{
	*n = N_KINDS;
	return kinds;
}

const char *shoal_backend_names(char *buf, size_t cap)
{
	size_t len = 0;
	if (cap)
		buf[0] = '\0';
	for (size_t i = 0; i < N_KINDS && len < cap; i++) {
		int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", kinds[i].name);
		if (w < 0)
			break;
		len += (size_t)w;
	}
	return buf;
}

shoal_err shoal_backend_pick(const shoal_backend_opts *o, const shoal_backend_ops **out, char *why,
                             size_t why_len)
{
	const char *name = o ? o->name : NULL;
	char reason[SHOAL_WHY_LEN] = ""; /* why a kind is unavailable */
	if (!name || !strcmp(name, "auto")) {
		for (size_t i = 0; i < N_KINDS; i++) {
			/* automatic implies available (and may be cheaper to ask) */
			if (kinds[i].automatic
			        ? !kinds[i].automatic(reason, sizeof reason)
			        : kinds[i].available && !kinds[i].available(reason, sizeof reason))
				continue;
			*out = kinds[i].ops();
			return SHOAL_OK;
		}
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "no backend is available on this machine (%s)", reason);
	}
	for (size_t i = 0; i < N_KINDS; i++) {
		if (strcmp(name, kinds[i].name))
			continue;
		if (kinds[i].available && !kinds[i].available(reason, sizeof reason))
			return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
			                 "backend '%s' is not available here: %s", name, reason);
		*out = kinds[i].ops();
		return SHOAL_OK;
	}
	char names[NAMES_LEN];
	return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
	                 "unknown backend '%s' (this build has: auto, %s)", name,
	                 shoal_backend_names(names, sizeof names));
}

/* ---- the devices --------------------------------------------------------- */

/* d as the registry describes devices. backend.h version 3 has a name,
 * memory and bandwidth and only the CPU kind: its device is a CPU in host
 * memory. Version 4 says the kind, unified, software and GFLOP/s. */
static void devinfo_of(const shoal_backend_kind *k, const shoal_backend_device *d,
                       shoal_backend_devinfo *out)
{
	memset(out, 0, sizeof *out);
	out->backend = k->name;
	size_t len = strnlen(d->name, sizeof d->name);
	if (len >= sizeof out->name)
		len = sizeof out->name - 1;
	memcpy(out->name, d->name, len);
	out->name[len] = '\0';
	out->mem_bytes = d->mem_bytes;
	out->read_gbps = d->read_gbps > 0 ? d->read_gbps : 0;
#if SHOAL_BACKEND_ABI >= 4
	out->gpu = d->kind == SHOAL_DEVICE_GPU;
	out->unified = d->unified;
	out->software = d->software;
	out->gflops = d->gflops > 0 ? d->gflops : 0;
#else
	out->unified = true;
#endif
}

/* Kind k's devices appended to out[*n..cap); software ones only if asked. */
static shoal_err kind_devices(const shoal_backend_kind *k, const shoal_backend_limits *lim,
                              bool measure, bool software, shoal_backend_devinfo *out, size_t cap,
                              size_t *n, char *why, size_t why_len)
{
	const shoal_backend_ops *ops = k->ops();
	shoal_backend *b = NULL;
	shoal_err e = ops->create(lim, &b);
	if (e)
		return shoal_why(why, why_len, e, "backend '%s': cannot describe its devices (%s)",
		                 k->name, shoal_strerror(e));
	shoal_backend_device dev[KIND_MAX_DEVICES];
	size_t nd = ops->devices(b, measure, dev, KIND_MAX_DEVICES);
	for (size_t i = 0; i < nd && i < KIND_MAX_DEVICES && *n < cap; i++) {
		devinfo_of(k, &dev[i], &out[*n]);
		if (!out[*n].software || software)
			(*n)++;
	}
	ops->destroy(b);
	return SHOAL_OK;
}

shoal_err shoal_backend_devices(const shoal_backend_opts *o, const shoal_backend_limits *lim,
                                bool measure, shoal_backend_devinfo *out, size_t cap, size_t *n,
                                char *why, size_t why_len)
{
	const shoal_backend_ops *picked;
	*n = 0;
	shoal_err e = shoal_backend_pick(o, &picked, why, why_len);
	if (e)
		return e;
	const char *name = o ? o->name : NULL;
	bool any = !name || !strcmp(name, "auto");
	shoal_backend_limits one = {
	    .n_threads = 1, .max_ctx = 1, .max_rows = 1, .max_n = 32, .max_group = 1};
	if (!lim)
		lim = &one;
	char reason[SHOAL_WHY_LEN];
	/* the host's CPU first, then the others in table order */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < N_KINDS; i++) {
			const shoal_backend_kind *k = &kinds[i];
			bool host = !strcmp(k->name, HOST_KIND);
			if (host != (pass == 0))
				continue;
			if (!host && !any && strcmp(k->name, name))
				continue;
			/* under auto, as pick asks: a kind that auto would not take
			 * (Vulkan with no GPU in the system) has nothing to list, and
			 * asking it loads every driver (Mesa's LLVM: about a second
			 * of CPU in every node that starts) */
			if (!host && (any && k->automatic
			                  ? !k->automatic(reason, sizeof reason)
			                  : k->available && !k->available(reason, sizeof reason)))
				continue;
			e = kind_devices(k, lim, measure && !host, !any, out, cap, n, why, why_len);
			if (e)
				return e;
		}
	return SHOAL_OK;
}
