/*
 * runtime/cpu/membw.h: the streaming-read bandwidth of this machine, the bound
 * that decoding (which reads every weight once per token) cannot beat.
 *
 * Part: runtime/ (engine). Used by `shoal bench` for "the decode bound".
 */
#ifndef SHOAL_RUNTIME_MEMBW_H
#define SHOAL_RUNTIME_MEMBW_H

#include <stddef.h>

/* The best of several passes of a streaming read (wide loads summed, so the
 * reads cannot be elided) of a buffer of `bytes` bytes (make it several
 * times the last-level cache, e.g. 512 MiB - 1 GiB), split among `threads`
 * pthreads, each reading its own contiguous slice that it first touched.
 * Returns GB/s (1e9 bytes per second), or a negative value if the buffer or
 * the threads could not be had. Blocks for about 6 passes of the buffer;
 * allocates and frees the buffer itself. */
double shoal_membw_read_gbps(int threads, size_t bytes);

#endif
