/*
 * runtime/vulkan/backend_vulkan.h: the Vulkan backend
 * (runtime/vulkan/backend_vulkan.c), an implementation of
 * runtime/backend.h on any Vulkan 1.2 device (MoltenVK on a Mac, Mesa or
 * a vendor's driver on Linux), built with ./configure --with-vulkan.
 *
 * Part: runtime/ (the room vulkan/). Named only by the registry,
 * runtime/backends.c, and the tests.
 */
#ifndef SHOAL_RUNTIME_VULKAN_BACKEND_VULKAN_H
#define SHOAL_RUNTIME_VULKAN_BACKEND_VULKAN_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/backend.h"

/* The Vulkan backend's ops table. */
const shoal_backend_ops *shoal_backend_vulkan(void);

/* Whether this machine has a Vulkan 1.2 device with a compute queue:
 * true, or false with the reason in why. Probes once (an instance made
 * and destroyed), then answers from memory. A software device (Mesa's
 * lavapipe) counts. */
bool shoal_backend_vulkan_available(char *why, size_t why_len);

/* The same, counting only devices that are not software (what "auto"
 * may choose). */
bool shoal_backend_vulkan_hardware(char *why, size_t why_len);

#endif
