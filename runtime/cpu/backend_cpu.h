/*
 * runtime/cpu/backend_cpu.h: the CPU backend (runtime/cpu/backend_cpu.c),
 * the first implementation of runtime/backend.h: the best kernels table of
 * this machine (runtime/cpu/kernels.h) and a thread pool.
 *
 * Part: runtime/cpu/. Named by those that make engines (the CLI, the
 * stages, tests); never by the engine.
 */
#ifndef SHOAL_RUNTIME_CPU_BACKEND_CPU_H
#define SHOAL_RUNTIME_CPU_BACKEND_CPU_H

#include "runtime/backend.h"

/* The CPU backend's ops table. */
const shoal_backend_ops *shoal_backend_cpu(void);

/* The ISA name of the kernels the CPU backend uses ("avx2", ...). */
const char *shoal_backend_cpu_isa(void);

#endif
