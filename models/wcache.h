/*
 * models/wcache.h: the weights cache: a model file that a peer without it
 * fills tensor by tensor from the peers that hold it, every byte checked
 * against the model id's digests (models/model_id.h).
 *
 * Part: models/. One model id is two files in the cache folder
 * (<state dir>/weights/):
 *   <id hex>.gguf  the model file at its full size, sparse: its header at
 *                  its place, a tensor's data once fetched, holes elsewhere
 *   <id hex>.have  what is known and held: the header and tensor digests
 *                  and one bit per complete tensor, with its own checksum
 * Invariants:
 *  1. A cache exists only for a header whose digests give the model id: the
 *     names come from the header, the digests from the peer, and the id is
 *     recomputed from both before anything is written (create), and again
 *     from the .have file at every open.
 *  2. A chunk is written only if it matches the digest sent ahead of it; a
 *     tensor's bit is set only after the whole tensor, read back from the
 *     file, matches its digest in the model id. A set bit survives a crash
 *     (the .have file is replaced by rename), so an interrupted transfer
 *     resumes at the first tensor not complete.
 * Thread use: one writer (put_chunk, finish); has() may be called from any
 * thread.
 */
#ifndef SHOAL_MODELS_WCACHE_H
#define SHOAL_MODELS_WCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/model_id.h"

typedef struct shoal_wcache shoal_wcache; /* opaque */

/* Open the cache of model_id in dir: SHOAL_ERR_NOTFOUND when there is
 * none; SHOAL_ERR_MISMATCH (the files are removed) when it is unsound. Its
 * .have file's mtime is set to now (the eviction order). *out is the
 * caller's (shoal_wcache_free). */
shoal_err shoal_wcache_open(const char *dir, const uint8_t model_id[SHOAL_MODEL_ID_BYTES],
                            shoal_wcache **out, char *why, size_t why_len);

/* Make the cache of model_id from what a peer sent: the model file's size,
 * its header bytes header[header_len] (one shard) and the digests of its
 * tensors digests[32 * n_tensors], all checked against model_id
 * (invariant 1: SHOAL_ERR_MISMATCH, nothing left behind). dir is created
 * if missing. *out as for open. */
shoal_err shoal_wcache_create(const char *dir, const uint8_t model_id[SHOAL_MODEL_ID_BYTES],
                              uint64_t file_size, const uint8_t *header, size_t header_len,
                              const uint8_t *digests, size_t n_tensors, shoal_wcache **out,
                              char *why, size_t why_len);

void shoal_wcache_free(shoal_wcache *c); /* NULL is a no-op */

/* The sparse model file (open it with shoal_model_open); owned by c. */
const char *shoal_wcache_path(const shoal_wcache *c);
/* The model id, its digests and the tensors' sizes; owned by c. */
const shoal_model_id *shoal_wcache_id(const shoal_wcache *c);
uint64_t shoal_wcache_file_size(const shoal_wcache *c);
size_t shoal_wcache_n_tensors(const shoal_wcache *c);
/* Tensor i is complete and verified (false out of range). */
bool shoal_wcache_has(shoal_wcache *c, size_t i);

/* Write data[len] at `offset` within tensor i's data if its BLAKE2b-256
 * digest is digest[32] (invariant 2): SHOAL_ERR_MISMATCH if not, RANGE if
 * the chunk is outside the tensor, IO on a failed write. */
shoal_err shoal_wcache_put_chunk(shoal_wcache *c, size_t i, uint64_t offset, const void *data,
                                 size_t len, const uint8_t digest[SHOAL_MODEL_ID_BYTES], char *why,
                                 size_t why_len);

/* Read tensor i back from the file and check it against the model id: on
 * a match set its bit and save the .have file; SHOAL_ERR_MISMATCH if it
 * does not match (fetch it again). */
shoal_err shoal_wcache_finish(shoal_wcache *c, size_t i, char *why, size_t why_len);

/* Keep the cache folder within max_bytes (disk blocks in use) counting
 * `incoming` more bytes: remove whole caches, least recently opened first,
 * never the one of keep_id (NULL: none). Returns how many were removed. */
size_t shoal_wcache_evict(const char *dir, const uint8_t *keep_id, uint64_t max_bytes,
                          uint64_t incoming);

#endif
