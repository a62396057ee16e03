/*
 * runtime/backend_host.c: host code that more than one backend room shares
 * (backend.h declares it): the MoE router's top-k selection, which the CPU
 * backend runs on its rows and the Vulkan backend on rows it read back, so
 * that both choose the same experts.
 *
 * Part: runtime/ (the interface between engine/ and the backend rooms).
 */
#include "runtime/backend.h"

#include <math.h>

void shoal_backend_top_k_rows(const float *x, uint32_t n, uint32_t n_rows, size_t ld, uint32_t k,
                              int32_t *ids, float *vals)
{
	for (uint32_t r = 0; r < n_rows; r++) {
		const float *p = x + (size_t)r * ld;
		int32_t *id = ids + (size_t)r * k;
		float *val = vals + (size_t)r * k;
		for (uint32_t j = 0; j < k; j++) {
			int32_t best = -1;
			float bv = -INFINITY;
			for (uint32_t i = 0; i < n; i++) {
				bool taken = false;
				for (uint32_t q = 0; q < j && !taken; q++)
					taken = id[q] == (int32_t)i;
				float v = p[i] != p[i] ? -INFINITY : p[i];
				if (!taken && (best < 0 || v > bv)) {
					best = (int32_t)i;
					bv = v;
				}
			}
			id[j] = best;
			val[j] = p[best];
		}
	}
}
