/*
 * tests/helpers/gguf_writer.h: a small GGUF v3 writer for tests and fixtures.
 *
 * Part: tests (serves models/ tests, the engine's and gen_fixture). Usage:
 *   1. shoal_gguf_writer_new(path), then any number of kv_* calls and
 *      add_tensor calls (the header is kept in memory);
 *   2. shoal_gguf_writer_begin_data() writes the header and padding;
 *   3. shoal_gguf_writer_write() streams each tensor's bytes in the order
 *      the tensors were added, in pieces of any size (padding between
 *      tensors is inserted automatically);
 *   4. shoal_gguf_writer_finish() checks every byte arrived and closes.
 * The writer does not judge what it writes: tests use the _raw calls to
 * build hostile files (odd dims, unknown types, wild offsets).
 */
#ifndef SHOAL_TESTS_GGUF_WRITER_H
#define SHOAL_TESTS_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/dtype.h"
#include "models/gguf.h"

typedef struct shoal_gguf_writer shoal_gguf_writer;

/* Create (truncate) path. Alignment 32 unless set_alignment is called. */
shoal_err shoal_gguf_writer_new(const char *path, shoal_gguf_writer **out);
/* Close and free; an unfinished file is left as far as it got. NULL ok. */
void shoal_gguf_writer_free(shoal_gguf_writer *w);

/* Header knobs (before begin_data). set_alignment also adds the
 * general.alignment key (u32) unless `add_key` is false. */
void shoal_gguf_writer_set_version(shoal_gguf_writer *w, uint32_t version);
void shoal_gguf_writer_set_alignment(shoal_gguf_writer *w, uint32_t alignment, bool add_key);

/* Key/values, in the order given. Strings are copied. */
void shoal_gguf_writer_kv_u8(shoal_gguf_writer *w, const char *key, uint8_t v);
void shoal_gguf_writer_kv_i8(shoal_gguf_writer *w, const char *key, int8_t v);
void shoal_gguf_writer_kv_u16(shoal_gguf_writer *w, const char *key, uint16_t v);
void shoal_gguf_writer_kv_i16(shoal_gguf_writer *w, const char *key, int16_t v);
void shoal_gguf_writer_kv_u32(shoal_gguf_writer *w, const char *key, uint32_t v);
void shoal_gguf_writer_kv_i32(shoal_gguf_writer *w, const char *key, int32_t v);
void shoal_gguf_writer_kv_u64(shoal_gguf_writer *w, const char *key, uint64_t v);
void shoal_gguf_writer_kv_i64(shoal_gguf_writer *w, const char *key, int64_t v);
void shoal_gguf_writer_kv_f32(shoal_gguf_writer *w, const char *key, float v);
void shoal_gguf_writer_kv_f64(shoal_gguf_writer *w, const char *key, double v);
void shoal_gguf_writer_kv_bool(shoal_gguf_writer *w, const char *key, bool v);
void shoal_gguf_writer_kv_str(shoal_gguf_writer *w, const char *key, const char *v);
void shoal_gguf_writer_kv_strn(shoal_gguf_writer *w, const char *key, const char *v, size_t n);
/* A numeric array: n elements of elem_type, given as host values (this
 * writer runs on little-endian hosts only, as GGUF files are). */
void shoal_gguf_writer_kv_arr(shoal_gguf_writer *w, const char *key, shoal_gguf_type elem_type,
                              const void *data, uint64_t n);
void shoal_gguf_writer_kv_arr_str(shoal_gguf_writer *w, const char *key, const char *const *strs,
                                  uint64_t n);
/* A key/value whose value bytes are given raw after the type (for hostile
 * tests: wild string lengths, array counts, unknown types). */
void shoal_gguf_writer_kv_raw(shoal_gguf_writer *w, const char *key, uint32_t type, const void *val,
                              size_t n);

/* Declare a tensor: ne[0..n_dims) in GGUF order; its data offset is the
 * next aligned offset. Returns its index. */
int shoal_gguf_writer_add_tensor(shoal_gguf_writer *w, const char *name, shoal_dtype type,
                                 uint32_t n_dims, const uint64_t *ne);
/* Declare a tensor with exactly these header fields and no data of its own
 * (the test writes whatever bytes it wants with write_raw). */
void shoal_gguf_writer_add_tensor_raw(shoal_gguf_writer *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const uint64_t *ne, uint64_t offset);
/* Bytes of tensor i's data (what add_tensor computed). */
uint64_t shoal_gguf_writer_tensor_bytes(const shoal_gguf_writer *w, int i);

shoal_err shoal_gguf_writer_begin_data(shoal_gguf_writer *w);
/* Stream data for the declared tensors, in order. */
shoal_err shoal_gguf_writer_write(shoal_gguf_writer *w, const void *p, size_t n);
/* Append bytes to the data section, outside any declared tensor. */
shoal_err shoal_gguf_writer_write_raw(shoal_gguf_writer *w, const void *p, size_t n);
/* Check every declared byte was written, flush and close. The writer must
 * still be freed. */
shoal_err shoal_gguf_writer_finish(shoal_gguf_writer *w);

#endif
