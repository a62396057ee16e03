/*
 * models/gguf.c: the defensive GGUF v2/v3 reader (see gguf.h).
 *
 * Part: models/. A file is mapped read-only and checked completely at open:
 * every count against the bytes left, every string and array against the end
 * of the file, every tensor's type, shape, extent and alignment, and the
 * uniqueness of keys and tensor names. After open, the getters only index
 * tables built here; nothing reads outside the mapping.
 * Divisions, in order: reasons (one-line error text, hostile names made
 * printable); cursor (bounds-checked little-endian reads); one shard
 * (header, key/values, tensor infos, data extents); split models (finding
 * and checking the other shards); open/free; getters.
 */
#include "models/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* "GGUF" read as a little-endian uint32. */
#define GGUF_MAGIC             0x46554747u
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Alignments above 1 GiB make no sense for weight data and would let a
 * hostile file make the padding arithmetic wrap. */
#define GGUF_MAX_ALIGNMENT (1u << 30)
/* Smallest possible encodings, to bound counts before allocating:
 *   header: magic 4 + version 4 + n_tensors 8 + n_kv 8 = 24 bytes
 *   kv: key length 8 + type 4 + smallest value (uint8) 1 = 13 bytes
 *   tensor info: name length 8 + n_dims 4 + ne 8 (one dim) + type 4 +
 *                offset 8 = 32 bytes
 *   string array element: its length 8 */
#define GGUF_HEADER_BYTES          24u
#define GGUF_MIN_KV_BYTES          13u
#define GGUF_MIN_TENSOR_INFO_BYTES 32u
/* Names longer than this are not tensor names (ggml allows 64). */
#define GGUF_MAX_NAME 4096u
/* Split files: <prefix>-NNNNN-of-MMMMM.gguf, the reference tool's naming. */
#define GGUF_SPLIT_SUFFIX_LEN 20 /* strlen("-00001-of-00003.gguf") */
#define GGUF_MAX_SHARDS       9999u

typedef struct gguf_kv {
	const char *key; /* into the mapping, not NUL-terminated */
	size_t key_len;
	shoal_gguf_type type;
	const uint8_t *val;        /* scalar value, string (after its length), or
	                              array elements (after type and count) */
	uint64_t len;              /* string length, or array count */
	shoal_gguf_type elem_type; /* arrays only */
	const uint8_t **strs;      /* string arrays: (len) pointers to each
	                              element's length field; owned */
} gguf_kv;

typedef struct gguf_shard {
	char *path; /* owned */
	void *base; /* the mapping */
	uint64_t size;
	uint64_t data_off; /* start of the tensor data section */
	uint32_t version;
	gguf_kv *kv; /* (n_kv), owned */
	size_t n_kv;
	const gguf_kv **kv_sorted;  /* (n_kv) sorted by key, owned */
	shoal_gguf_tensor *tensors; /* (n_tensors) names owned */
	size_t n_tensors;
	int split_no;          /* -1 if the file has no split.no */
	int split_count;       /* 0 if the file has no split.count */
	int64_t split_tensors; /* -1 if absent */
} gguf_shard;

struct shoal_gguf {
	gguf_shard *shards; /* (n_shards), in split order */
	uint32_t n_shards;
	gguf_shard *meta;           /* the shard holding the metadata (shards[0]) */
	shoal_gguf_tensor *tensors; /* (n_tensors) all shards, in order; the
	                               names point into the shards' tables */
	size_t n_tensors;
	const shoal_gguf_tensor **tensor_sorted; /* (n_tensors) sorted by name */
};

/* ---- reasons ------------------------------------------------------------ */

/* Copy at most 48 bytes of an untrusted name into out, replacing anything
 * non-printable (a newline would break the one-line reason) by '?'. */
static const char *gguf_printable(const char *s, size_t len, char out[64])
{
	size_t n = len < 48 ? len : 48, j = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		out[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (len > n) {
		memcpy(out + j, "...", 3);
		j += 3;
	}
	out[j] = '\0';
	return out;
}

/* Prefix the reason with the shard's name when there are several. */
typedef struct gguf_ctx {
	char *why;
	size_t why_len;
	const char *label; /* "shard 2 of 3 (x.gguf): " or "" */
} gguf_ctx;

__attribute__((format(printf, 3, 4))) static shoal_err gguf_fail(const gguf_ctx *c, shoal_err e,
                                                                 const char *fmt, ...)
{
	char msg[SHOAL_WHY_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	return shoal_why(c->why, c->why_len, e, "%s%s", c->label, msg);
}

/* ---- cursor ------------------------------------------------------------- */

typedef struct gguf_cur {
	const uint8_t *base;
	uint64_t size;
	uint64_t off;
} gguf_cur;

static bool cur_need(const gguf_cur *c, uint64_t n)
{
	return n <= c->size - c->off;
}

static bool cur_u32(gguf_cur *c, uint32_t *v)
{
	if (!cur_need(c, 4))
		return false;
	const uint8_t *p = c->base + c->off;
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	c->off += 4;
	return true;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static bool cur_u64(gguf_cur *c, uint64_t *v)
{
	if (!cur_need(c, 8))
		return false;
	*v = le64(c->base + c->off);
	c->off += 8;
	return true;
}

/* A string: u64 length then bytes. On success *s points at the bytes. */
static bool cur_str(gguf_cur *c, const char **s, uint64_t *len)
{
	uint64_t n;
	if (!cur_u64(c, &n))
		return false;
	if (!cur_need(c, n)) {
		c->off -= 8;
		*len = n;
		*s = NULL;
		return false;
	}
	*s = (const char *)(c->base + c->off);
	*len = n;
	c->off += n;
	return true;
}

static size_t gguf_scalar_size(uint32_t t)
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
	case SHOAL_GGUF_UINT64:
	case SHOAL_GGUF_INT64:
	case SHOAL_GGUF_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

/* ---- one shard ---------------------------------------------------------- */

/* Sort order of keys: bytewise, then shorter first. */
static int kv_sort_cmp(const void *a, const void *b)
{
	const gguf_kv *x = *(const gguf_kv *const *)a;
	const gguf_kv *y = *(const gguf_kv *const *)b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int r = memcmp(x->key, y->key, n);
	if (r)
		return r;
	return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Read one value of type t at the cursor into kv (arrays included). */
static shoal_err gguf_read_value(const gguf_ctx *ctx, gguf_cur *c, gguf_kv *kv, const char *kname)
{
	uint32_t t = kv->type;
	if (t == SHOAL_GGUF_STRING) {
		const char *s;
		uint64_t n;
		uint64_t at = c->off;
		if (!cur_str(c, &s, &n)) {
			if (!cur_need(c, 8))
				return gguf_fail(
				    ctx, SHOAL_ERR_FORMAT,
				    "key '%s': string length at offset %llu past end of "
				    "file (%llu bytes)",
				    kname, (unsigned long long)at, (unsigned long long)c->size);
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "key '%s': string of %llu bytes at offset %llu past end of "
			    "file (%llu bytes)",
			    kname, (unsigned long long)n, (unsigned long long)at,
			    (unsigned long long)c->size);
		}
		kv->val = (const uint8_t *)s;
		kv->len = n;
		return SHOAL_OK;
	}
	if (t == SHOAL_GGUF_ARRAY) {
		uint32_t et;
		uint64_t n;
		if (!cur_u32(c, &et) || !cur_u64(c, &n))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "key '%s': array header past end of file (%llu bytes)",
			                 kname, (unsigned long long)c->size);
		if (et == SHOAL_GGUF_ARRAY)
			return gguf_fail(ctx, SHOAL_ERR_UNSUPPORTED,
			                 "key '%s': arrays of arrays are not supported", kname);
		kv->elem_type = (shoal_gguf_type)et;
		kv->len = n;
		kv->val = c->base + c->off;
		if (et == SHOAL_GGUF_STRING) {
			/* Each element needs at least its 8-byte length. */
			uint64_t left = c->size - c->off;
			if (n > left / 8)
				return gguf_fail(
				    ctx, SHOAL_ERR_FORMAT,
				    "key '%s': array of %llu strings cannot fit in the %llu "
				    "bytes left",
				    kname, (unsigned long long)n, (unsigned long long)left);
			kv->strs = malloc((n ? n : 1) * sizeof *kv->strs);
			if (!kv->strs)
				return gguf_fail(ctx, SHOAL_ERR_NOMEM, "key '%s': out of memory",
				                 kname);
			for (uint64_t i = 0; i < n; i++) {
				const char *s;
				uint64_t sl;
				kv->strs[i] = c->base + c->off;
				if (!cur_str(c, &s, &sl))
					return gguf_fail(
					    ctx, SHOAL_ERR_FORMAT,
					    "key '%s': string %llu of %llu past end of file "
					    "(%llu bytes)",
					    kname, (unsigned long long)i, (unsigned long long)n,
					    (unsigned long long)c->size);
			}
			return SHOAL_OK;
		}
		size_t es = gguf_scalar_size(et);
		if (es == 0)
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "key '%s': unknown array element type %u", kname, et);
		uint64_t left = c->size - c->off;
		if (n > left / es)
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "key '%s': array of %llu elements of %zu bytes past end of file "
			    "(%llu bytes left)",
			    kname, (unsigned long long)n, es, (unsigned long long)left);
		c->off += n * es;
		return SHOAL_OK;
	}
	size_t es = gguf_scalar_size(t);
	if (es == 0)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT, "key '%s': unknown value type %u", kname,
		                 t);
	if (!cur_need(c, es))
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "key '%s': value at offset %llu past end of file (%llu bytes)",
		                 kname, (unsigned long long)c->off, (unsigned long long)c->size);
	kv->val = c->base + c->off;
	c->off += es;
	return SHOAL_OK;
}

/* Integer value of a kv of any integer type, as (negative?, magnitude). */
static bool kv_int(const gguf_kv *kv, int64_t *sv, uint64_t *uv, bool *neg)
{
	const uint8_t *p = kv->val;
	uint64_t u = 0;
	int64_t s = 0;
	switch (kv->type) {
	case SHOAL_GGUF_UINT8:
		u = p[0];
		break;
	case SHOAL_GGUF_INT8:
		s = (int8_t)p[0];
		goto sgn;
	case SHOAL_GGUF_UINT16:
		u = (uint64_t)p[0] | (uint64_t)p[1] << 8;
		break;
	case SHOAL_GGUF_INT16:
		s = (int16_t)(uint16_t)(p[0] | p[1] << 8);
		goto sgn;
	case SHOAL_GGUF_UINT32:
		u = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
		    (uint64_t)p[3] << 24;
		break;
	case SHOAL_GGUF_INT32:
		s = (int32_t)(uint32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
		                        (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		goto sgn;
	case SHOAL_GGUF_UINT64:
		u = le64(p);
		break;
	case SHOAL_GGUF_INT64:
		s = (int64_t)le64(p);
		goto sgn;
	default:
		return false;
	}
	*neg = false;
	*uv = u;
	*sv = u > INT64_MAX ? INT64_MAX : (int64_t)u;
	return true;
sgn:
	*neg = s < 0;
	*sv = s;
	*uv = s < 0 ? 0 : (uint64_t)s;
	return true;
}

static const gguf_kv *shard_find(const gguf_shard *sh, const char *key)
{
	size_t kl = strlen(key), lo = 0, hi = sh->n_kv;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const gguf_kv *kv = sh->kv_sorted[mid];
		size_t n = kv->key_len < kl ? kv->key_len : kl;
		int r = memcmp(kv->key, key, n);
		if (r == 0)
			r = (kv->key_len > kl) - (kv->key_len < kl);
		if (r == 0)
			return kv;
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* A small integer key (split.*, general.alignment) of any integer type. */
static shoal_err shard_int_key(const gguf_ctx *ctx, const gguf_shard *sh, const char *key,
                               uint64_t max, uint64_t *out, bool *present)
{
	const gguf_kv *kv = shard_find(sh, key);
	*present = kv != NULL;
	if (!kv)
		return SHOAL_OK;
	int64_t s;
	uint64_t u;
	bool neg;
	if (!kv_int(kv, &s, &u, &neg))
		return gguf_fail(ctx, SHOAL_ERR_FORMAT, "key '%s' is not an integer (type %u)", key,
		                 (unsigned)kv->type);
	if (neg || u > max)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT, "key '%s' = %lld out of range [0, %llu]",
		                 key,
		                 neg ? (long long)s : (long long)(u > INT64_MAX ? INT64_MAX : u),
		                 (unsigned long long)max);
	*out = u;
	return SHOAL_OK;
}

static void shard_fini(gguf_shard *sh)
{
	if (sh->kv)
		for (size_t i = 0; i < sh->n_kv; i++)
			free(sh->kv[i].strs);
	free(sh->kv);
	free(sh->kv_sorted);
	if (sh->tensors)
		for (size_t i = 0; i < sh->n_tensors; i++)
			free((char *)sh->tensors[i].name);
	free(sh->tensors);
	if (sh->base)
		munmap(sh->base, sh->size);
	free(sh->path);
	memset(sh, 0, sizeof *sh);
}

static int off_sort_cmp_(const void *a, const void *b)
{
	const shoal_gguf_tensor *x = *(const shoal_gguf_tensor *const *)a;
	const shoal_gguf_tensor *y = *(const shoal_gguf_tensor *const *)b;
	return (x->file_offset > y->file_offset) - (x->file_offset < y->file_offset);
}

static shoal_err shard_tensors(const gguf_ctx *ctx, gguf_shard *sh, gguf_cur *c, uint64_t n,
                               uint32_t shard_index, uint64_t alignment);

/* Map and check one file completely (everything but cross-shard checks). */
static shoal_err shard_open(const gguf_ctx *ctx, gguf_shard *sh, const char *path,
                            uint32_t shard_index)
{
	shoal_err e;
	char nb[64];
	memset(sh, 0, sizeof *sh);
	sh->split_no = -1;
	sh->split_tensors = -1;
	sh->path = strdup(path);
	if (!sh->path)
		return gguf_fail(ctx, SHOAL_ERR_NOMEM, "out of memory");

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gguf_fail(ctx, errno == ENOENT ? SHOAL_ERR_NOTFOUND : SHOAL_ERR_IO,
		                 "cannot open '%s': %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int er = errno;
		close(fd);
		return gguf_fail(ctx, SHOAL_ERR_IO, "cannot stat '%s': %s", path, strerror(er));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return gguf_fail(ctx, SHOAL_ERR_FORMAT, "'%s' is not a regular file", path);
	}
	if ((uint64_t)st.st_size < GGUF_HEADER_BYTES) {
		close(fd);
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "file of %llu bytes is too short for a GGUF header (24 bytes)",
		                 (unsigned long long)st.st_size);
	}
	sh->size = (uint64_t)st.st_size;
	if (sh->size > SIZE_MAX) {
		close(fd);
		return gguf_fail(ctx, SHOAL_ERR_UNSUPPORTED, "file too large to map");
	}
	void *m = mmap(NULL, (size_t)sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
	int er = errno;
	close(fd);
	if (m == MAP_FAILED)
		return gguf_fail(ctx, SHOAL_ERR_IO, "cannot map '%s': %s", path, strerror(er));
#if defined(MADV_HUGEPAGE)
	/* Best effort: the page cache then reads the file in large folios that
	 * map as 2 MiB pages, and decode streams the weights with few TLB
	 * misses. On a Xeon VM (ext4, kernel with file THP), Q8_0 gemv over a
	 * 1.1 GB model went from 12.0 GB/s (4 KiB pages) to 15.1 GB/s, the
	 * figure of a copy in anonymous huge pages, with no copy and no extra
	 * memory. Only pages read after this advice are affected: a file
	 * already cached in small pages keeps them until evicted. */
	(void)madvise(m, (size_t)sh->size, MADV_HUGEPAGE);
#endif
	sh->base = m;

	gguf_cur c = {.base = m, .size = sh->size, .off = 0};
	uint32_t magic = 0, version = 0;
	uint64_t n_tensors = 0, n_kv = 0; /* the 24 header bytes exist: checked above */
	cur_u32(&c, &magic);
	if (magic != GGUF_MAGIC)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "not a GGUF file: magic %02x %02x %02x %02x, expected 'GGUF'",
		                 ((uint8_t *)m)[0], ((uint8_t *)m)[1], ((uint8_t *)m)[2],
		                 ((uint8_t *)m)[3]);
	cur_u32(&c, &version);
	if (version == 1)
		return gguf_fail(
		    ctx, SHOAL_ERR_UNSUPPORTED,
		    "GGUF version 1 is not supported (only 2 and 3); reconvert the model");
	if (version != 2 && version != 3)
		return gguf_fail(ctx, SHOAL_ERR_UNSUPPORTED,
		                 "GGUF version %u is not supported (only 2 and 3)", version);
	sh->version = version;
	cur_u64(&c, &n_tensors);
	cur_u64(&c, &n_kv);
	uint64_t left = sh->size - c.off;
	if (n_kv > left / GGUF_MIN_KV_BYTES)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "%llu key/value pairs cannot fit in a file of %llu bytes",
		                 (unsigned long long)n_kv, (unsigned long long)sh->size);
	if (n_tensors > left / GGUF_MIN_TENSOR_INFO_BYTES)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "%llu tensors cannot fit in a file of %llu bytes",
		                 (unsigned long long)n_tensors, (unsigned long long)sh->size);
	if ((n_kv + n_tensors) * 13 > left)
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "%llu key/value pairs and %llu tensors cannot fit in a file of "
		                 "%llu bytes",
		                 (unsigned long long)n_kv, (unsigned long long)n_tensors,
		                 (unsigned long long)sh->size);

	/* Key/value pairs. */
	sh->kv = calloc(n_kv ? n_kv : 1, sizeof *sh->kv);
	sh->kv_sorted = malloc((n_kv ? n_kv : 1) * sizeof *sh->kv_sorted);
	if (!sh->kv || !sh->kv_sorted)
		return gguf_fail(ctx, SHOAL_ERR_NOMEM, "out of memory for %llu keys",
		                 (unsigned long long)n_kv);
	sh->n_kv = n_kv;
	for (uint64_t i = 0; i < n_kv; i++) {
		gguf_kv *kv = &sh->kv[i];
		const char *k;
		uint64_t kl;
		uint64_t at = c.off;
		if (!cur_str(&c, &k, &kl))
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "key #%llu: name at offset %llu past end of file (%llu bytes)",
			    (unsigned long long)i, (unsigned long long)at,
			    (unsigned long long)sh->size);
		if (kl == 0 || kl > GGUF_MAX_NAME || memchr(k, 0, kl))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "key #%llu: bad name '%s' (%llu bytes)",
			                 (unsigned long long)i, gguf_printable(k, kl, nb),
			                 (unsigned long long)kl);
		kv->key = k;
		kv->key_len = kl;
		uint32_t t;
		if (!cur_u32(&c, &t))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "key '%s': type past end of file (%llu bytes)",
			                 gguf_printable(k, kl, nb), (unsigned long long)sh->size);
		kv->type = (shoal_gguf_type)t;
		e = gguf_read_value(ctx, &c, kv, gguf_printable(k, kl, nb));
		if (e)
			return e;
		sh->kv_sorted[i] = kv;
	}
	qsort(sh->kv_sorted, sh->n_kv, sizeof *sh->kv_sorted, kv_sort_cmp);
	for (size_t i = 1; i < sh->n_kv; i++) {
		const gguf_kv *a = sh->kv_sorted[i - 1], *b = sh->kv_sorted[i];
		if (a->key_len == b->key_len && !memcmp(a->key, b->key, a->key_len))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT, "duplicate key '%s'",
			                 gguf_printable(a->key, a->key_len, nb));
	}

	uint64_t alignment = GGUF_DEFAULT_ALIGNMENT, v;
	bool present;
	e = shard_int_key(ctx, sh, "general.alignment", GGUF_MAX_ALIGNMENT, &alignment, &present);
	if (e)
		return e;
	if (alignment == 0 || (alignment & (alignment - 1)))
		return gguf_fail(ctx, SHOAL_ERR_FORMAT,
		                 "general.alignment = %llu is not a power of two",
		                 (unsigned long long)alignment);
	e = shard_int_key(ctx, sh, "split.no", GGUF_MAX_SHARDS, &v, &present);
	if (e)
		return e;
	if (present)
		sh->split_no = (int)v;
	e = shard_int_key(ctx, sh, "split.count", GGUF_MAX_SHARDS, &v, &present);
	if (e)
		return e;
	if (present)
		sh->split_count = (int)v;
	e = shard_int_key(ctx, sh, "split.tensors.count", INT64_MAX, &v, &present);
	if (e)
		return e;
	if (present)
		sh->split_tensors = (int64_t)v;

	return shard_tensors(ctx, sh, &c, n_tensors, shard_index, alignment);
}

static shoal_err shard_tensors(const gguf_ctx *ctx, gguf_shard *sh, gguf_cur *c, uint64_t n,
                               uint32_t shard_index, uint64_t alignment)
{
	char nb[64], nb2[64];
	sh->tensors = calloc(n ? n : 1, sizeof *sh->tensors);
	if (!sh->tensors)
		return gguf_fail(ctx, SHOAL_ERR_NOMEM, "out of memory for %llu tensors",
		                 (unsigned long long)n);
	sh->n_tensors = n;
	for (uint64_t i = 0; i < n; i++) {
		shoal_gguf_tensor *t = &sh->tensors[i];
		const char *name;
		uint64_t nl;
		uint64_t at = c->off;
		if (!cur_str(c, &name, &nl))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "tensor #%llu: name at offset %llu past end of file (%llu "
			                 "bytes)",
			                 (unsigned long long)i, (unsigned long long)at,
			                 (unsigned long long)sh->size);
		if (nl == 0 || nl > GGUF_MAX_NAME || memchr(name, 0, nl))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "tensor #%llu: bad name '%s' (%llu bytes)",
			                 (unsigned long long)i, gguf_printable(name, nl, nb),
			                 (unsigned long long)nl);
		char *copy = malloc(nl + 1);
		if (!copy)
			return gguf_fail(ctx, SHOAL_ERR_NOMEM, "out of memory");
		memcpy(copy, name, nl);
		copy[nl] = '\0';
		t->name = copy;
		const char *pn = gguf_printable(name, nl, nb);
		uint32_t nd;
		if (!cur_u32(c, &nd))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "tensor '%s': header past end of file", pn);
		if (nd < 1 || nd > SHOAL_GGUF_MAX_DIMS)
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "tensor '%s': %u dimensions (must be 1..%d)", pn, nd,
			                 SHOAL_GGUF_MAX_DIMS);
		t->n_dims = nd;
		uint64_t nel = 1;
		for (uint32_t d = 0; d < SHOAL_GGUF_MAX_DIMS; d++) {
			t->ne[d] = 1;
			if (d >= nd)
				continue;
			if (!cur_u64(c, &t->ne[d]))
				return gguf_fail(ctx, SHOAL_ERR_FORMAT,
				                 "tensor '%s': header past end of file", pn);
			if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
				return gguf_fail(ctx, SHOAL_ERR_FORMAT,
				                 "tensor '%s': dimension %u is %llu", pn, d,
				                 (unsigned long long)t->ne[d]);
			if (nel > INT64_MAX / t->ne[d])
				return gguf_fail(ctx, SHOAL_ERR_FORMAT,
				                 "tensor '%s': element count overflows", pn);
			nel *= t->ne[d];
		}
		uint32_t type;
		if (!cur_u32(c, &type) || !cur_u64(c, &t->file_offset))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "tensor '%s': header past end of file", pn);
		if (!shoal_dtype_known(type))
			return gguf_fail(ctx, SHOAL_ERR_FORMAT, "tensor '%s': unknown type %u", pn,
			                 type);
		t->type = (shoal_dtype)type;
		uint32_t be = shoal_dtype_block_elems(t->type);
		if (t->ne[0] % be)
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "tensor '%s': ne[0] = %llu is not a multiple of the %s block "
			    "size %u",
			    pn, (unsigned long long)t->ne[0], shoal_dtype_name(t->type), be);
		uint64_t blocks = nel / be, bb = shoal_dtype_block_bytes(t->type);
		if (blocks > UINT64_MAX / bb)
			return gguf_fail(ctx, SHOAL_ERR_FORMAT, "tensor '%s': byte size overflows",
			                 pn);
		t->nbytes = blocks * bb;
		if (t->file_offset % alignment)
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "tensor '%s': offset %llu is not a multiple of the alignment "
			    "%llu",
			    pn, (unsigned long long)t->file_offset, (unsigned long long)alignment);
		t->shard = shard_index;
	}

	/* The data section starts at the next multiple of the alignment. A
	 * file without tensors may end before that padding. */
	uint64_t pad = (alignment - c->off % alignment) % alignment;
	sh->data_off = c->off + pad;
	if (sh->data_off > sh->size) {
		if (n > 0)
			return gguf_fail(
			    ctx, SHOAL_ERR_FORMAT,
			    "data section at offset %llu past end of file (%llu bytes)",
			    (unsigned long long)sh->data_off, (unsigned long long)sh->size);
		sh->data_off = sh->size;
	}
	uint64_t data_size = sh->size - sh->data_off;
	for (uint64_t i = 0; i < n; i++) {
		shoal_gguf_tensor *t = &sh->tensors[i];
		if (t->file_offset > data_size || t->nbytes > data_size - t->file_offset) {
			uint64_t s = t->file_offset > UINT64_MAX - sh->data_off
			                 ? UINT64_MAX
			                 : sh->data_off + t->file_offset;
			uint64_t e = t->nbytes > UINT64_MAX - s ? UINT64_MAX : s + t->nbytes;
			return gguf_fail(ctx, SHOAL_ERR_FORMAT,
			                 "%s: data [%llu..%llu) past end of file (%llu bytes)",
			                 gguf_printable(t->name, strlen(t->name), nb),
			                 (unsigned long long)s, (unsigned long long)e,
			                 (unsigned long long)sh->size);
		}
		t->file_offset += sh->data_off;
		t->data = (const uint8_t *)sh->base + t->file_offset;
	}

	/* No two tensors may share bytes. */
	if (n > 1) {
		const shoal_gguf_tensor **byoff = malloc(n * sizeof *byoff);
		if (!byoff)
			return gguf_fail(ctx, SHOAL_ERR_NOMEM, "out of memory");
		for (uint64_t i = 0; i < n; i++)
			byoff[i] = &sh->tensors[i];
		qsort(byoff, n, sizeof *byoff, off_sort_cmp_);
		for (uint64_t i = 1; i < n; i++) {
			const shoal_gguf_tensor *a = byoff[i - 1], *b = byoff[i];
			if (a->file_offset + a->nbytes > b->file_offset) {
				shoal_err e = gguf_fail(
				    ctx, SHOAL_ERR_FORMAT,
				    "tensors '%s' [%llu..%llu) and '%s' [%llu..%llu) overlap",
				    gguf_printable(a->name, strlen(a->name), nb),
				    (unsigned long long)a->file_offset,
				    (unsigned long long)(a->file_offset + a->nbytes),
				    gguf_printable(b->name, strlen(b->name), nb2),
				    (unsigned long long)b->file_offset,
				    (unsigned long long)(b->file_offset + b->nbytes));
				free(byoff);
				return e;
			}
		}
		free(byoff);
	}
	return SHOAL_OK;
}

/* ---- split models ------------------------------------------------------- */

/* If `path` ends in -NNNNN-of-MMMMM.gguf, return the prefix length and the
 * numbers; else -1. */
static long split_parse(const char *path, unsigned *no, unsigned *count)
{
	size_t n = strlen(path);
	if (n < GGUF_SPLIT_SUFFIX_LEN)
		return -1;
	const char *s = path + n - GGUF_SPLIT_SUFFIX_LEN;
	unsigned a = 0, b = 0;
	if (s[0] != '-' || memcmp(s + 6, "-of-", 4) || strcmp(s + 15, ".gguf"))
		return -1;
	for (int i = 1; i <= 5; i++) {
		if (s[i] < '0' || s[i] > '9' || s[i + 9] < '0' || s[i + 9] > '9')
			return -1;
		a = a * 10 + (unsigned)(s[i] - '0');
		b = b * 10 + (unsigned)(s[i + 9] - '0');
	}
	*no = a;
	*count = b;
	return (long)(n - GGUF_SPLIT_SUFFIX_LEN);
}

static int name_sort_cmp_(const void *a, const void *b)
{
	return strcmp((*(const shoal_gguf_tensor *const *)a)->name,
	              (*(const shoal_gguf_tensor *const *)b)->name);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* ---- open/free ---------------------------------------------------------- */

shoal_err shoal_gguf_open(const char *path, shoal_gguf **out, char *why, size_t why_len)
{
	shoal_err e;
	char label[160] = "";
	gguf_ctx ctx = {.why = why, .why_len = why_len, .label = label};
	*out = NULL;
	if (!path)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "no model path given");
	shoal_gguf *g = calloc(1, sizeof *g);
	gguf_shard first;
	char *name = NULL;
	if (!g)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	e = shard_open(&ctx, &first, path, 0);
	if (e) {
		shard_fini(&first);
		goto fail;
	}

	unsigned fno = 0, fcount = 0;
	long plen = split_parse(path, &fno, &fcount);
	uint32_t count = first.split_count > 1 ? (uint32_t)first.split_count : 1;
	if (count > 1 && (first.split_no < 0 || (uint32_t)first.split_no >= count)) {
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		              "split.count is %u but split.no is %s", count,
		              first.split_no < 0 ? "missing" : "out of range");
		shard_fini(&first);
		goto fail;
	}
	if (count > 1 && (plen < 0 || fcount != count || fno != (unsigned)first.split_no + 1)) {
		shard_fini(&first);
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		              "split.count is %u but the file name does not follow "
		              "<prefix>-%05u-of-%05u.gguf",
		              count, (unsigned)first.split_no + 1, count);
		goto fail;
	}
	g->shards = calloc(count, sizeof *g->shards);
	if (!g->shards) {
		shard_fini(&first);
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	g->n_shards = count;
	uint32_t fidx = count > 1 ? (uint32_t)first.split_no : 0;
	for (size_t i = 0; i < first.n_tensors; i++)
		first.tensors[i].shard = fidx;
	g->shards[fidx] = first;

	if (count > 1) {
		name = malloc((size_t)plen + 32); /* suffix: at most 31 bytes + NUL */
		if (!name) {
			e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		for (uint32_t i = 0; i < count; i++) {
			if (i == fidx)
				continue;
			memcpy(name, path, (size_t)plen);
			snprintf(name + plen, 32, "-%05u-of-%05u.gguf", i + 1, count);
			snprintf(label, sizeof label, "shard %u of %u (%s): ", i + 1, count,
			         base_name(name));
			gguf_shard *sh = &g->shards[i];
			e = shard_open(&ctx, sh, name, i);
			if (e == SHOAL_ERR_NOTFOUND) {
				e = gguf_fail(&ctx, SHOAL_ERR_NOTFOUND,
				              "missing: '%s' does not exist", name);
				goto fail;
			}
			if (e)
				goto fail;
			if (sh->split_no != (int)i || sh->split_count != (int)count) {
				e = gguf_fail(&ctx, SHOAL_ERR_FORMAT,
				              "says split.no %d, split.count %d; expected %u, %u",
				              sh->split_no, sh->split_count, i, count);
				goto fail;
			}
		}
		label[0] = '\0';
		uint64_t total = 0;
		for (uint32_t i = 0; i < count; i++)
			total += g->shards[i].n_tensors;
		int64_t want = g->shards[0].split_tensors;
		if (want >= 0 && (uint64_t)want != total) {
			e = shoal_why(
			    why, why_len, SHOAL_ERR_FORMAT,
			    "split.tensors.count is %lld but the %u shards hold %llu tensors",
			    (long long)want, count, (unsigned long long)total);
			goto fail;
		}
	}
	g->meta = &g->shards[0];

	/* One table of all tensors, names unique across shards. */
	size_t nt = 0;
	for (uint32_t i = 0; i < count; i++)
		nt += g->shards[i].n_tensors;
	g->tensors = malloc((nt ? nt : 1) * sizeof *g->tensors);
	g->tensor_sorted = malloc((nt ? nt : 1) * sizeof *g->tensor_sorted);
	if (!g->tensors || !g->tensor_sorted) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	g->n_tensors = nt;
	nt = 0;
	for (uint32_t i = 0; i < count; i++)
		for (size_t j = 0; j < g->shards[i].n_tensors; j++)
			g->tensors[nt++] = g->shards[i].tensors[j];
	for (size_t i = 0; i < nt; i++)
		g->tensor_sorted[i] = &g->tensors[i];
	qsort(g->tensor_sorted, nt, sizeof *g->tensor_sorted, name_sort_cmp_);
	for (size_t i = 1; i < nt; i++) {
		const char *a = g->tensor_sorted[i - 1]->name;
		if (!strcmp(a, g->tensor_sorted[i]->name)) {
			char nb[64];
			e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "duplicate tensor name '%s'",
			              gguf_printable(a, strlen(a), nb));
			goto fail;
		}
	}
	free(name);
	*out = g;
	return SHOAL_OK;
fail:
	free(name);
	shoal_gguf_free(g);
	return e;
}

void shoal_gguf_free(shoal_gguf *g)
{
	if (!g)
		return;
	for (uint32_t i = 0; i < g->n_shards; i++)
		shard_fini(&g->shards[i]);
	free(g->shards);
	free(g->tensors);
	free(g->tensor_sorted);
	free(g);
}

/* ---- getters ------------------------------------------------------------ */

uint32_t shoal_gguf_version(const shoal_gguf *g)
{
	return g->meta->version;
}

uint32_t shoal_gguf_n_shards(const shoal_gguf *g)
{
	return g->n_shards;
}

const char *shoal_gguf_shard_path(const shoal_gguf *g, uint32_t i)
{
	return i < g->n_shards ? g->shards[i].path : NULL;
}

uint64_t shoal_gguf_shard_size(const shoal_gguf *g, uint32_t i)
{
	return i < g->n_shards ? g->shards[i].size : 0;
}

uint64_t shoal_gguf_shard_header_bytes(const shoal_gguf *g, uint32_t i)
{
	return i < g->n_shards ? g->shards[i].data_off : 0;
}

const void *shoal_gguf_shard_base(const shoal_gguf *g, uint32_t i)
{
	return i < g->n_shards ? g->shards[i].base : NULL;
}

size_t shoal_gguf_n_kv(const shoal_gguf *g)
{
	return g->meta->n_kv;
}

int64_t shoal_gguf_find(const shoal_gguf *g, const char *key)
{
	const gguf_kv *kv = shard_find(g->meta, key);
	return kv ? (int64_t)(kv - g->meta->kv) : -1;
}

const char *shoal_gguf_key(const shoal_gguf *g, size_t i, size_t *len)
{
	if (i >= g->meta->n_kv)
		return NULL;
	if (len)
		*len = g->meta->kv[i].key_len;
	return g->meta->kv[i].key;
}

shoal_gguf_type shoal_gguf_kv_type(const shoal_gguf *g, size_t i)
{
	return i < g->meta->n_kv ? g->meta->kv[i].type : (shoal_gguf_type)-1;
}

static const gguf_kv *find_kv(const shoal_gguf *g, const char *key)
{
	return (g && key) ? shard_find(g->meta, key) : NULL;
}

bool shoal_gguf_get_u64(const shoal_gguf *g, const char *key, uint64_t *out)
{
	const gguf_kv *kv = find_kv(g, key);
	int64_t s;
	uint64_t u;
	bool neg;
	if (!kv || !kv_int(kv, &s, &u, &neg) || neg)
		return false;
	*out = u;
	return true;
}

bool shoal_gguf_get_u32(const shoal_gguf *g, const char *key, uint32_t *out)
{
	uint64_t u;
	if (!shoal_gguf_get_u64(g, key, &u) || u > UINT32_MAX)
		return false;
	*out = (uint32_t)u;
	return true;
}

bool shoal_gguf_get_i64(const shoal_gguf *g, const char *key, int64_t *out)
{
	const gguf_kv *kv = find_kv(g, key);
	int64_t s;
	uint64_t u;
	bool neg;
	if (!kv || !kv_int(kv, &s, &u, &neg))
		return false;
	if (!neg && u > INT64_MAX)
		return false;
	*out = s;
	return true;
}

bool shoal_gguf_get_f32(const shoal_gguf *g, const char *key, float *out)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv)
		return false;
	if (kv->type == SHOAL_GGUF_FLOAT32) {
		memcpy(out, kv->val, 4);
		return true;
	}
	if (kv->type == SHOAL_GGUF_FLOAT64) {
		double d;
		memcpy(&d, kv->val, 8);
		*out = (float)d;
		return true;
	}
	return false;
}

bool shoal_gguf_get_bool(const shoal_gguf *g, const char *key, bool *out)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SHOAL_GGUF_BOOL)
		return false;
	*out = kv->val[0] != 0;
	return true;
}

bool shoal_gguf_get_str(const shoal_gguf *g, const char *key, const char **s, size_t *len)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SHOAL_GGUF_STRING)
		return false;
	*s = (const char *)kv->val;
	*len = (size_t)kv->len;
	return true;
}

bool shoal_gguf_get_arr(const shoal_gguf *g, const char *key, shoal_gguf_type *elem_type,
                        uint64_t *n, const void **data)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SHOAL_GGUF_ARRAY)
		return false;
	if (elem_type)
		*elem_type = kv->elem_type;
	if (n)
		*n = kv->len;
	if (data)
		*data = kv->val;
	return true;
}

bool shoal_gguf_arr_str(const shoal_gguf *g, const char *key, uint64_t i, const char **s,
                        size_t *len)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SHOAL_GGUF_ARRAY || kv->elem_type != SHOAL_GGUF_STRING ||
	    i >= kv->len)
		return false;
	*len = (size_t)le64(kv->strs[i]);
	*s = (const char *)kv->strs[i] + 8;
	return true;
}

size_t shoal_gguf_n_tensors(const shoal_gguf *g)
{
	return g->n_tensors;
}

const shoal_gguf_tensor *shoal_gguf_tensor_at(const shoal_gguf *g, size_t i)
{
	return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const shoal_gguf_tensor *shoal_gguf_tensor_find(const shoal_gguf *g, const char *name)
{
	size_t lo = 0, hi = g->n_tensors;
	if (!name)
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const shoal_gguf_tensor *t = g->tensor_sorted[mid];
		int r = strcmp(t->name, name);
		if (r == 0)
			return t;
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
