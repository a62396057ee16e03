/*
 * models/model_id.h: what identifies a model's bytes: a BLAKE2b-256 digest
 * of each shard's header, of each tensor's data, and over all of them the
 * model id. Peers compare model ids to know they hold the same model, and a
 * peer that receives a tensor (or a layer range) checks it against the
 * tensor's digest before computing with it (DESIGN.md invariant 4).
 *
 * Part: models/. Hashing a large model reads every byte, so the result is
 * cached in <state dir>/model-ids/, keyed by the absolute path, size and
 * mtime of every shard; a cache file carries its own checksum and is
 * recomputed, never trusted, when anything about it is off.
 */
#ifndef SHOAL_MODELS_MODEL_ID_H
#define SHOAL_MODELS_MODEL_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/gguf.h"
#include "scheduler/manifest.h"

/* Definition (all digests BLAKE2b-256: libsodium's crypto_generichash,
 * no key):
 *   header[s] = H(bytes [0, data section start) of shard s)
 *   tensor[i] = H(the nbytes of tensor i's data)
 *   model id  = H("shoal-model-id-v1" || n_shards (u32 LE) || header[0..]
 *                 || for each tensor in file order: name length (u32 LE),
 *                    name, tensor[i]) */
#define SHOAL_MODEL_ID_BYTES SHOAL_MANIFEST_MODEL_ID_BYTES

typedef struct shoal_model_id shoal_model_id; /* opaque */

/* The digests of g. With state_dir non-NULL and not "", look in (and on a miss write
 * to) state_dir/model-ids/; a cache that cannot be written is logged, not
 * an error. With state_dir NULL, always compute. *out is the caller's; free
 * with shoal_model_id_free. */
shoal_err shoal_model_id_load(const shoal_gguf *g, const char *state_dir, shoal_model_id **out,
                              char *why, size_t why_len);
/* Progress of a long hash: bytes hashed so far of total, from the calling
 * thread after each header or tensor (terminal output belongs to the
 * caller: models/ prints nothing). */
typedef void (*shoal_model_id_progress_fn)(void *ud, uint64_t done, uint64_t total);

/* shoal_model_id_load with a progress callback (fn NULL: none). */
shoal_err shoal_model_id_load_cb(const shoal_gguf *g, const char *state_dir,
                                 shoal_model_id_progress_fn fn, void *ud, shoal_model_id **out,
                                 char *why, size_t why_len);
/* An id from digests someone else computed: g's tensor names and sizes,
 * headers[32 * n_shards of g] and tensors[32 * n_tensors of g] (copied).
 * Nothing of g's data is read, so g may be a file whose tensor data is not
 * there yet; the caller compares shoal_model_id_digest with the id it
 * expects before trusting any digest. *out as for load. */
shoal_err shoal_model_id_from_digests(const shoal_gguf *g, const uint8_t *headers,
                                      const uint8_t *tensors, shoal_model_id **out, char *why,
                                      size_t why_len);
/* Same as load with no cache. */
shoal_err shoal_model_id_compute(const shoal_gguf *g, shoal_model_id **out, char *why,
                                 size_t why_len);
void shoal_model_id_free(shoal_model_id *id); /* NULL is a no-op */

/* The 32-byte model id; owned by id. */
const uint8_t *shoal_model_id_digest(const shoal_model_id *id);
uint32_t shoal_model_id_n_shards(const shoal_model_id *id);
const uint8_t *shoal_model_id_header_digest(const shoal_model_id *id, uint32_t shard);
size_t shoal_model_id_n_tensors(const shoal_model_id *id);
/* Digest of tensor i (the gguf's file order); NULL if out of range. */
const uint8_t *shoal_model_id_tensor_digest(const shoal_model_id *id, size_t i);
/* Size in bytes of tensor i; 0 if out of range. */
uint64_t shoal_model_id_tensor_bytes(const shoal_model_id *id, size_t i);
/* Index of the tensor named `name`, or -1. */
int64_t shoal_model_id_find(const shoal_model_id *id, const char *name);

/* SHOAL_OK if data[nbytes] is exactly tensor i's bytes; SHOAL_ERR_MISMATCH
 * if not (wrong size or digest); SHOAL_ERR_RANGE for a bad index. */
shoal_err shoal_model_id_verify_tensor(const shoal_model_id *id, size_t tensor_index,
                                       const void *data, uint64_t nbytes);

/* True if this id came from the cache; the number of tensor and header
 * bytes hashed to produce it (0 on a cache hit). */
bool shoal_model_id_cached(const shoal_model_id *id);
uint64_t shoal_model_id_bytes_hashed(const shoal_model_id *id);

/* Lowercase hex of a 32-byte digest, NUL-terminated. */
void shoal_model_id_hex(const uint8_t digest[SHOAL_MODEL_ID_BYTES],
                        char out[2 * SHOAL_MODEL_ID_BYTES + 1]);

#endif
