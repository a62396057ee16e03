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
			if (kinds[i].available && !kinds[i].available(reason, sizeof reason))
				continue;
			if (kinds[i].automatic && !kinds[i].automatic(reason, sizeof reason))
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
