/*
 * models/manifest.h: the scheduler's view of a model (scheduler/manifest.h)
 * computed from its GGUF header: bytes and FLOPs per layer and per expert.
 *
 * Part: models/. Figures are exact tensor byte counts (as stored, quantized
 * or not) and 2 FLOPs per multiply-add of every weight matrix (tensors of
 * two or more dimensions) a token passes through; norms and biases are left
 * out of the FLOPs (they are O(n_embd), not O(n_embd^2)).
 */
#ifndef SHOAL_MODELS_MANIFEST_H
#define SHOAL_MODELS_MANIFEST_H

#include "base/err.h"
#include "models/model.h"
#include "models/model_id.h"
#include "scheduler/manifest.h"

/* Fill *out from m (model_id all zero: see shoal_manifest_set_model_id).
 * out->layers is allocated here; release with shoal_manifest_fini. */
shoal_err shoal_model_manifest(const shoal_model *m, shoal_manifest *out);
/* Copy the model id (models/model_id.h) into the manifest. */
void shoal_manifest_set_model_id(shoal_manifest *mf, const shoal_model_id *id);
/* Free out->layers and zero the struct; safe on a zeroed manifest. */
void shoal_manifest_fini(shoal_manifest *mf);

#endif
