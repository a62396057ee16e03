/*
 * base/le.h: little-endian integers in byte buffers (the model id's digest
 * input and cache files, the weights cache's manifest).
 *
 * Part: base/.
 */
#ifndef SHOAL_BASE_LE_H
#define SHOAL_BASE_LE_H

#include <stdint.h>

static inline void shoal_le_put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void shoal_le_put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t shoal_le_get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#endif
