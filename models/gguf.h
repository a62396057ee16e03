/*
 * models/gguf.h: a defensive reader of GGUF v2/v3 files over mmap.
 *
 * Part: models/. Every count, string length, offset and tensor extent is
 * checked when the file is opened (not at first use); a bad file gives
 * SHOAL_ERR_FORMAT (or _UNSUPPORTED) and a one-line reason, never a crash.
 * Split models (name-00001-of-0000N.gguf) open as one: metadata comes from
 * the first shard, tensors from all of them.
 *
 * Tensor shape convention (GGUF's): ne[0] is the innermost, contiguous
 * dimension. A weight matrix used as y = W x has ne = {n_in, n_out}; each of
 * its n_out rows is shoal_dtype_row_bytes(type, n_in) bytes. Expert stacks
 * have ne = {n_in, n_out, n_expert}.
 *
 * Strings handed out point into the mapping and are NOT NUL-terminated
 * unless stated: always use the length. Everything handed out lives until
 * shoal_gguf_free().
 */
#ifndef SHOAL_MODELS_GGUF_H
#define SHOAL_MODELS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/dtype.h"

typedef struct shoal_gguf shoal_gguf; /* opaque */

/* Metadata value types, GGUF's numbering. */
typedef enum shoal_gguf_type {
	SHOAL_GGUF_UINT8 = 0,
	SHOAL_GGUF_INT8 = 1,
	SHOAL_GGUF_UINT16 = 2,
	SHOAL_GGUF_INT16 = 3,
	SHOAL_GGUF_UINT32 = 4,
	SHOAL_GGUF_INT32 = 5,
	SHOAL_GGUF_FLOAT32 = 6,
	SHOAL_GGUF_BOOL = 7,
	SHOAL_GGUF_STRING = 8,
	SHOAL_GGUF_ARRAY = 9,
	SHOAL_GGUF_UINT64 = 10,
	SHOAL_GGUF_INT64 = 11,
	SHOAL_GGUF_FLOAT64 = 12,
} shoal_gguf_type;

#define SHOAL_GGUF_MAX_DIMS 4

typedef struct shoal_gguf_tensor {
	const char *name;                 /* NUL-terminated copy, owned by the shoal_gguf */
	uint32_t n_dims;                  /* 1..4 */
	uint64_t ne[SHOAL_GGUF_MAX_DIMS]; /* unused dims are 1 */
	shoal_dtype type;
	const void *data;     /* into the mapping, aligned as the file says */
	uint64_t nbytes;      /* exact size of the data */
	uint32_t shard;       /* which file of a split model (0 for one file) */
	uint64_t file_offset; /* absolute offset of data within its shard */
} shoal_gguf_tensor;

/* Open `path` (for a split model, any shard's name; all shards are opened).
 * On success *out owns the mappings; free with shoal_gguf_free(). */
shoal_err shoal_gguf_open(const char *path, shoal_gguf **out, char *why, size_t why_len);
void shoal_gguf_free(shoal_gguf *g); /* NULL is a no-op */

uint32_t shoal_gguf_version(const shoal_gguf *g);
uint32_t shoal_gguf_n_shards(const shoal_gguf *g);
/* The path and size of shard i (for model-id caching by path/size/mtime). */
const char *shoal_gguf_shard_path(const shoal_gguf *g, uint32_t i);
uint64_t shoal_gguf_shard_size(const shoal_gguf *g, uint32_t i);
/* Bytes of shard i before the tensor data section (the "header"). */
uint64_t shoal_gguf_shard_header_bytes(const shoal_gguf *g, uint32_t i);
const void *shoal_gguf_shard_base(const shoal_gguf *g, uint32_t i);

/* ---- metadata ---------------------------------------------------------- */
size_t shoal_gguf_n_kv(const shoal_gguf *g);
/* Index of `key`, or -1. */
int64_t shoal_gguf_find(const shoal_gguf *g, const char *key);
const char *shoal_gguf_key(const shoal_gguf *g, size_t i, size_t *len);
shoal_gguf_type shoal_gguf_kv_type(const shoal_gguf *g, size_t i);

/* Typed getters: false if the key is absent or its value does not fit the
 * requested type (integers of any width convert when in range; floats
 * convert from FLOAT32/FLOAT64). */
bool shoal_gguf_get_u32(const shoal_gguf *g, const char *key, uint32_t *out);
bool shoal_gguf_get_u64(const shoal_gguf *g, const char *key, uint64_t *out);
bool shoal_gguf_get_i64(const shoal_gguf *g, const char *key, int64_t *out);
bool shoal_gguf_get_f32(const shoal_gguf *g, const char *key, float *out);
bool shoal_gguf_get_bool(const shoal_gguf *g, const char *key, bool *out);
/* A string value: pointer into the mapping (not NUL-terminated) and length. */
bool shoal_gguf_get_str(const shoal_gguf *g, const char *key, const char **s, size_t *len);

/* Arrays: element type and count. Numeric arrays give a pointer to the raw
 * little-endian elements (possibly unaligned: read with memcpy); string
 * arrays are read element by element with shoal_gguf_arr_str (O(1): the
 * reader indexes them at open). */
bool shoal_gguf_get_arr(const shoal_gguf *g, const char *key, shoal_gguf_type *elem_type,
                        uint64_t *n, const void **data);
bool shoal_gguf_arr_str(const shoal_gguf *g, const char *key, uint64_t i, const char **s,
                        size_t *len);

/* ---- tensors ------------------------------------------------------------ */
size_t shoal_gguf_n_tensors(const shoal_gguf *g);
const shoal_gguf_tensor *shoal_gguf_tensor_at(const shoal_gguf *g, size_t i);
/* NULL if there is no tensor of that name. */
const shoal_gguf_tensor *shoal_gguf_tensor_find(const shoal_gguf *g, const char *name);

#endif
