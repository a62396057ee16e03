/*
 * models/model_impl.h: what models/model.c and models/model_hparams.c share
 * (not a public header): model.c opens a file and finds its tensors,
 * model_hparams.c names the architectures and reads the hyper-parameters.
 * Calls go one way, model.c -> model_hparams.c.
 *
 * Part: models/.
 */
#ifndef SHOAL_MODELS_MODEL_IMPL_H
#define SHOAL_MODELS_MODEL_IMPL_H

#include "models/model.h"

/* The architecture named by the n bytes at a (not terminated), or -1. */
int model__arch_find(const char *a, size_t n);
/* An untrusted string for a message: at most 40 bytes, printable. */
const char *model__printable(const char *s, size_t len, char out[48]);
/* The hyper-parameters of a file of architecture arch into *hp: missing
 * or bad keys -> SHOAL_ERR_FORMAT, what the engine does not do ->
 * SHOAL_ERR_UNSUPPORTED, each with the reason in why. */
shoal_err model__hp_read(const shoal_gguf *g, shoal_arch arch, shoal_hparams *hp, char *why,
                         size_t why_len);

#endif
