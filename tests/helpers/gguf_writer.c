/*
 * tests/helpers/gguf_writer.c: the small GGUF writer of tests/helpers/gguf_writer.h.
 *
 * Part: tests. The header (key/values and tensor infos) grows in memory;
 * tensor data streams straight to the file, so a multi-gigabyte fixture
 * needs no more memory than one row. Errors from the OS are returned;
 * misuse (writing more data than declared) is an error too, not an abort.
 */
#include "tests/helpers/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wtensor {
	uint64_t offset; /* within the data section */
	uint64_t nbytes;
	bool raw; /* no data expected */
} wtensor;

struct shoal_gguf_writer {
	FILE *f;
	uint32_t version;
	uint32_t alignment;
	uint8_t *kv; /* encoded key/values */
	size_t kv_len, kv_cap;
	uint64_t n_kv;
	uint8_t *ti; /* encoded tensor infos */
	size_t ti_len, ti_cap;
	wtensor *t;
	int n_t, cap_t;
	uint64_t next_off; /* next free data offset */
	bool started;
	int cur;           /* tensor being written */
	uint64_t cur_done; /* its bytes so far */
	uint64_t pos;      /* bytes written into the data section */
	bool oom;
};

static void buf_put(shoal_gguf_writer *w, uint8_t **b, size_t *len, size_t *cap, const void *p,
                    size_t n)
{
	if (w->oom || n == 0)
		return;
	if (*len + n > *cap) {
		size_t nc = *cap ? *cap * 2 : 4096;
		while (nc < *len + n)
			nc *= 2;
		uint8_t *nb = realloc(*b, nc);
		if (!nb) {
			w->oom = true;
			return;
		}
		*b = nb;
		*cap = nc;
	}
	memcpy(*b + *len, p, n);
	*len += n;
}

#define KV_PUT(p, n) buf_put(w, &w->kv, &w->kv_len, &w->kv_cap, p, n)
#define TI_PUT(p, n) buf_put(w, &w->ti, &w->ti_len, &w->ti_cap, p, n)

shoal_err shoal_gguf_writer_new(const char *path, shoal_gguf_writer **out)
{
	*out = NULL;
	shoal_gguf_writer *w = calloc(1, sizeof *w);
	if (!w)
		return SHOAL_ERR_NOMEM;
	w->f = fopen(path, "wb");
	if (!w->f) {
		free(w);
		return SHOAL_ERR_IO;
	}
	w->version = 3;
	w->alignment = 32;
	*out = w;
	return SHOAL_OK;
}

void shoal_gguf_writer_free(shoal_gguf_writer *w)
{
	if (!w)
		return;
	if (w->f)
		fclose(w->f);
	free(w->kv);
	free(w->ti);
	free(w->t);
	free(w);
}

void shoal_gguf_writer_set_version(shoal_gguf_writer *w, uint32_t version)
{
	w->version = version;
}

static void kv_key(shoal_gguf_writer *w, const char *key, uint32_t type)
{
	uint64_t n = strlen(key);
	KV_PUT(&n, 8);
	KV_PUT(key, n);
	KV_PUT(&type, 4);
	w->n_kv++;
}

void shoal_gguf_writer_set_alignment(shoal_gguf_writer *w, uint32_t alignment, bool add_key)
{
	w->alignment = alignment;
	if (add_key)
		shoal_gguf_writer_kv_u32(w, "general.alignment", alignment);
}

#define KV_SCALAR(fn, ctype, gt)                                                                   \
	void fn(shoal_gguf_writer *w, const char *key, ctype v)                                    \
	{                                                                                          \
		kv_key(w, key, gt);                                                                \
		KV_PUT(&v, sizeof v);                                                              \
	}
KV_SCALAR(shoal_gguf_writer_kv_u8, uint8_t, SHOAL_GGUF_UINT8)
KV_SCALAR(shoal_gguf_writer_kv_i8, int8_t, SHOAL_GGUF_INT8)
KV_SCALAR(shoal_gguf_writer_kv_u16, uint16_t, SHOAL_GGUF_UINT16)
KV_SCALAR(shoal_gguf_writer_kv_i16, int16_t, SHOAL_GGUF_INT16)
KV_SCALAR(shoal_gguf_writer_kv_u32, uint32_t, SHOAL_GGUF_UINT32)
KV_SCALAR(shoal_gguf_writer_kv_i32, int32_t, SHOAL_GGUF_INT32)
KV_SCALAR(shoal_gguf_writer_kv_u64, uint64_t, SHOAL_GGUF_UINT64)
KV_SCALAR(shoal_gguf_writer_kv_i64, int64_t, SHOAL_GGUF_INT64)
KV_SCALAR(shoal_gguf_writer_kv_f32, float, SHOAL_GGUF_FLOAT32)
KV_SCALAR(shoal_gguf_writer_kv_f64, double, SHOAL_GGUF_FLOAT64)

void shoal_gguf_writer_kv_bool(shoal_gguf_writer *w, const char *key, bool v)
{
	uint8_t b = v ? 1 : 0;
	kv_key(w, key, SHOAL_GGUF_BOOL);
	KV_PUT(&b, 1);
}

void shoal_gguf_writer_kv_strn(shoal_gguf_writer *w, const char *key, const char *v, size_t n)
{
	uint64_t l = n;
	kv_key(w, key, SHOAL_GGUF_STRING);
	KV_PUT(&l, 8);
	KV_PUT(v, n);
}

void shoal_gguf_writer_kv_str(shoal_gguf_writer *w, const char *key, const char *v)
{
	shoal_gguf_writer_kv_strn(w, key, v, strlen(v));
}

static size_t elem_size(shoal_gguf_type t)
{
	switch (t) {
	case SHOAL_GGUF_UINT8:
	case SHOAL_GGUF_INT8:
	case SHOAL_GGUF_BOOL:
		return 1;
	case SHOAL_GGUF_UINT16:
	case SHOAL_GGUF_INT16:
		return 2;
	case SHOAL_GGUF_UINT32:
	case SHOAL_GGUF_INT32:
	case SHOAL_GGUF_FLOAT32:
		return 4;
	default:
		return 8;
	}
}

void shoal_gguf_writer_kv_arr(shoal_gguf_writer *w, const char *key, shoal_gguf_type elem_type,
                              const void *data, uint64_t n)
{
	uint32_t et = elem_type;
	kv_key(w, key, SHOAL_GGUF_ARRAY);
	KV_PUT(&et, 4);
	KV_PUT(&n, 8);
	KV_PUT(data, (size_t)n * elem_size(elem_type));
}

void shoal_gguf_writer_kv_arr_str(shoal_gguf_writer *w, const char *key, const char *const *strs,
                                  uint64_t n)
{
	uint32_t et = SHOAL_GGUF_STRING;
	kv_key(w, key, SHOAL_GGUF_ARRAY);
	KV_PUT(&et, 4);
	KV_PUT(&n, 8);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t l = strlen(strs[i]);
		KV_PUT(&l, 8);
		KV_PUT(strs[i], l);
	}
}

void shoal_gguf_writer_kv_raw(shoal_gguf_writer *w, const char *key, uint32_t type, const void *val,
                              size_t n)
{
	kv_key(w, key, type);
	KV_PUT(val, n);
}

static int tensor_push(shoal_gguf_writer *w, wtensor t)
{
	if (w->n_t == w->cap_t) {
		int nc = w->cap_t ? w->cap_t * 2 : 64;
		wtensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
		if (!nt) {
			w->oom = true;
			return -1;
		}
		w->t = nt;
		w->cap_t = nc;
	}
	w->t[w->n_t] = t;
	return w->n_t++;
}

static void ti_put(shoal_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, uint64_t offset)
{
	uint64_t l = strlen(name);
	TI_PUT(&l, 8);
	TI_PUT(name, l);
	TI_PUT(&n_dims, 4);
	for (uint32_t d = 0; d < n_dims; d++)
		TI_PUT(&ne[d], 8);
	TI_PUT(&type, 4);
	TI_PUT(&offset, 8);
}

int shoal_gguf_writer_add_tensor(shoal_gguf_writer *w, const char *name, shoal_dtype type,
                                 uint32_t n_dims, const uint64_t *ne)
{
	uint64_t nel = 1;
	for (uint32_t d = 0; d < n_dims; d++)
		nel *= ne[d];
	uint64_t be = shoal_dtype_block_elems(type), bb = shoal_dtype_block_bytes(type);
	uint64_t nbytes = be ? nel / be * bb : 0;
	uint64_t off = (w->next_off + w->alignment - 1) / w->alignment * w->alignment;
	ti_put(w, name, type, n_dims, ne, off);
	w->next_off = off + nbytes;
	return tensor_push(w, (wtensor){.offset = off, .nbytes = nbytes, .raw = false});
}

void shoal_gguf_writer_add_tensor_raw(shoal_gguf_writer *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const uint64_t *ne, uint64_t offset)
{
	ti_put(w, name, type, n_dims, ne, offset);
	tensor_push(w, (wtensor){.offset = offset, .nbytes = 0, .raw = true});
}

uint64_t shoal_gguf_writer_tensor_bytes(const shoal_gguf_writer *w, int i)
{
	return (i >= 0 && i < w->n_t) ? w->t[i].nbytes : 0;
}

static shoal_err put(shoal_gguf_writer *w, const void *p, size_t n)
{
	if (n == 0)
		return SHOAL_OK; /* p may be NULL (no keys yet) */
	return fwrite(p, 1, n, w->f) == n ? SHOAL_OK : SHOAL_ERR_IO;
}

static shoal_err pad_to(shoal_gguf_writer *w, uint64_t target)
{
	static const uint8_t zeros[256];
	while (w->pos < target) {
		uint64_t n = target - w->pos;
		if (n > sizeof zeros)
			n = sizeof zeros;
		if (put(w, zeros, (size_t)n))
			return SHOAL_ERR_IO;
		w->pos += n;
	}
	return SHOAL_OK;
}

/* Skip raw tensors and empty ones; move to the next that wants data. */
static shoal_err next_tensor(shoal_gguf_writer *w)
{
	while (w->cur < w->n_t && (w->t[w->cur].raw || w->cur_done == w->t[w->cur].nbytes)) {
		w->cur++;
		w->cur_done = 0;
	}
	if (w->cur < w->n_t)
		return pad_to(w, w->t[w->cur].offset);
	return SHOAL_OK;
}

shoal_err shoal_gguf_writer_begin_data(shoal_gguf_writer *w)
{
	if (w->oom)
		return SHOAL_ERR_NOMEM;
	if (w->started)
		return SHOAL_ERR_STATE;
	uint32_t magic = 0x46554747u;
	uint64_t nt = (uint64_t)w->n_t;
	if (put(w, &magic, 4) || put(w, &w->version, 4) || put(w, &nt, 8) || put(w, &w->n_kv, 8) ||
	    put(w, w->kv, w->kv_len) || put(w, w->ti, w->ti_len))
		return SHOAL_ERR_IO;
	uint64_t hdr = 24 + w->kv_len + w->ti_len;
	uint64_t a = w->alignment ? w->alignment : 1;
	uint64_t pad = (a - hdr % a) % a;
	static const uint8_t zeros[64];
	while (pad) {
		size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
		if (put(w, zeros, n))
			return SHOAL_ERR_IO;
		pad -= n;
	}
	w->started = true;
	w->cur = 0;
	w->cur_done = 0;
	w->pos = 0;
	return next_tensor(w);
}

shoal_err shoal_gguf_writer_write(shoal_gguf_writer *w, const void *p, size_t n)
{
	const uint8_t *b = p;
	if (!w->started)
		return SHOAL_ERR_STATE;
	while (n) {
		shoal_err e = next_tensor(w);
		if (e)
			return e;
		if (w->cur >= w->n_t)
			return SHOAL_ERR_RANGE; /* more data than declared */
		uint64_t left = w->t[w->cur].nbytes - w->cur_done;
		size_t k = n < left ? n : (size_t)left;
		if (put(w, b, k))
			return SHOAL_ERR_IO;
		w->cur_done += k;
		w->pos += k;
		b += k;
		n -= k;
	}
	return SHOAL_OK;
}

shoal_err shoal_gguf_writer_write_raw(shoal_gguf_writer *w, const void *p, size_t n)
{
	if (!w->started)
		return SHOAL_ERR_STATE;
	if (put(w, p, n))
		return SHOAL_ERR_IO;
	w->pos += n;
	return SHOAL_OK;
}

shoal_err shoal_gguf_writer_finish(shoal_gguf_writer *w)
{
	if (!w->started) {
		shoal_err e = shoal_gguf_writer_begin_data(w);
		if (e)
			return e;
	}
	shoal_err e = next_tensor(w);
	if (e)
		return e;
	if (w->cur < w->n_t)
		return SHOAL_ERR_STATE; /* a declared tensor is missing data */
	int rc = fclose(w->f);
	w->f = NULL;
	return rc == 0 ? SHOAL_OK : SHOAL_ERR_IO;
}
