/*
 * runtime/cpu/iq_grids.c: the IQ types' grids (kernels_iq.h), expanded once
 * from the compact form that tools/iq_grids.py wrote (iq_grids_data.h: per
 * entry 2- or 3-bit indices into each grid's value set) to full tables of
 * bytes, 36 KB in all, that every kernel table and quant.c read.
 *
 * Part: runtime/, room cpu/. The values are the GGUF format's definition of
 * the grids; the expansion runs under pthread_once, so any thread may ask.
 */
#include <pthread.h>

#include "runtime/cpu/kernels_iq.h"

#include "runtime/cpu/iq_grids_data.h"

static kernels__iq_grids iq_grids;
static pthread_once_t iq_grids_once = PTHREAD_ONCE_INIT;

/* n entries of 8 two-bit indices into v, as 8 bytes each. */
static void iq_grids_expand8(const uint16_t *packed, int n, const int8_t *v, uint64_t *out)
{
	for (int i = 0; i < n; i++) {
		uint64_t e = 0;
		for (int j = 0; j < 8; j++)
			e |= (uint64_t)(uint8_t)v[(packed[i] >> (2 * j)) & 3] << (8 * j);
		out[i] = e;
	}
}

/* n entries of 4 three-bit indices into v, as 4 bytes each. */
static void iq_grids_expand4(const uint16_t *packed, int n, const int8_t *v, uint32_t *out)
{
	for (int i = 0; i < n; i++) {
		uint32_t e = 0;
		for (int j = 0; j < 4; j++)
			e |= (uint32_t)(uint8_t)v[(packed[i] >> (3 * j)) & 7] << (8 * j);
		out[i] = e;
	}
}

static void iq_grids_build(void)
{
	kernels__iq_grids *G = &iq_grids;
	iq_grids_expand8(iq_grids_iq2xxs_packed, 256, kernels__iq2_values, G->iq2xxs);
	iq_grids_expand8(iq_grids_iq2xs_packed, 512, kernels__iq2_values, G->iq2xs);
	iq_grids_expand8(iq_grids_iq2s_packed, 1024, kernels__iq2_values, G->iq2s);
	iq_grids_expand4(iq_grids_iq3xxs_packed, 256, kernels__iq3xxs_values, G->iq3xxs);
	iq_grids_expand4(iq_grids_iq3s_packed, 512, kernels__iq3s_values, G->iq3s);
	static const int8_t iq1_times8[4] = {-8, 0, 8, 8};
	iq_grids_expand8(iq_grids_iq1s_packed, 2048, iq1_times8, G->iq1s8);
	G->code_iq2xxs = iq_grids_iq2xxs_packed;
	G->code_iq2xs = iq_grids_iq2xs_packed;
	G->code_iq2s = iq_grids_iq2s_packed;
	G->code_iq3xxs = iq_grids_iq3xxs_packed;
	G->code_iq3s = iq_grids_iq3s_packed;
	G->code_iq1s = iq_grids_iq1s_packed;
	for (int s = 0; s < 256; s++) {
		uint64_t e = 0;
		for (int j = 0; j < 8; j++)
			e |= (uint64_t)((s >> j) & 1 ? 0xff : 0x01) << (8 * j);
		G->sign8[s] = e;
	}
	for (unsigned s = 0; s < 128; s++)
		G->sign7[s] = G->sign8[kernels__iq_ksigns(s)];
}

const kernels__iq_grids *kernels__iq_grids_get(void)
{
	pthread_once(&iq_grids_once, iq_grids_build);
	return &iq_grids;
}
