/*
 * models/spec.h: a model described by its hyper-parameters and quant type
 * (a JSON "spec", no weights) turned into the scheduler's manifest, so that
 * users can plan for models they have not downloaded.
 *
 * Part: models/ (uses scheduler/manifest.h, as DESIGN allows: the manifest
 * is declared in scheduler/ and filled by models/). The format, with the
 * shipped specs, is documented in models/specs/README.md.
 */
#ifndef SHOAL_MODELS_SPEC_H
#define SHOAL_MODELS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "scheduler/manifest.h"

typedef struct shoal_spec_info {
	uint64_t n_params;         /* all weights */
	uint64_t n_params_active;  /* weights one token touches */
	uint32_t mbits_per_weight; /* millibits, e.g. 4850 for Q4_K_M */
	char quant[16];            /* "Q4_K_M", or "custom" */
} shoal_spec_info;

/* Parse a spec from JSON text (len bytes). On success *m is filled (its
 * layers array is malloc'd: release with shoal_spec_manifest_fini) and *info
 * too when non-NULL. Bad input -> SHOAL_ERR_FORMAT / SHOAL_ERR_RANGE /
 * SHOAL_ERR_UNSUPPORTED with a one-line reason naming the field. */
shoal_err shoal_spec_parse(const char *text, size_t len, shoal_manifest *m, shoal_spec_info *info,
                           char *why, size_t why_len);
/* Same, from a file. */
shoal_err shoal_spec_load(const char *path, shoal_manifest *m, shoal_spec_info *info, char *why,
                          size_t why_len);
/* Free what a spec put in m (its layers); m itself is the caller's. */
void shoal_spec_manifest_fini(shoal_manifest *m);

/* Millibits per weight assumed for a quant type name (case-sensitive):
 * F32 32000, F16/BF16 16000, Q8_0 8500 (34 bytes per 32), Q6_K 6562 (210 per
 * 256), Q4_0 4500 (18 per 32), Q4_K_M 4850 (a mix of Q4_K and Q6_K tensors,
 * llama.cpp's published average); 0 for an unknown name. */
uint32_t shoal_spec_quant_mbits(const char *quant);

#endif
