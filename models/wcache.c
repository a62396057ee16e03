/*
 * models/wcache.c: the weights cache (see wcache.h).
 *
 * Part: models/. Divisions: the .have file; open/create/free; chunks and
 * tensors; eviction.
 * .have layout (little-endian):
 *   "SHOALWCH" | version u32 = 1 | zero u32 | n_tensors u64 | file size u64
 *   | model id[32] | header digest[32] | tensor digests[32 * n_tensors]
 *   | bits[(n_tensors + 7) / 8] | checksum[32] = H(all before it)
 */
#include "models/wcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/le.h"
#include "base/hex.h"
#include "base/log.h"
#include "base/statedir.h"
#include "models/gguf.h"

#define WC_H       SHOAL_MODEL_ID_BYTES /* a digest: BLAKE2b-256 */
#define WC_VERSION 1u
#define WC_FIXED   (8 + 4 + 4 + 8 + 8 + WC_H + WC_H) /* before the tensor digests */
/* Tensors are read back for their final check in 4 MiB pieces: large
 * enough for the hash to run at memory speed, small on the stack's heap. */
#define WC_READ_PIECE (4u << 20)

struct shoal_wcache {
	char dir[PATH_MAX];
	char path[PATH_MAX + 80]; /* <dir>/<hex>.gguf */
	char have[PATH_MAX + 80]; /* <dir>/<hex>.have */
	uint8_t model_id[WC_H];
	uint64_t file_size;
	size_t n_tensors;
	uint64_t *offset; /* (n_tensors) data offset in the file */
	shoal_model_id *mid;
	uint8_t *bits;      /* ((n_tensors + 7) / 8) */
	int fd;             /* the .gguf, read-write */
	pthread_mutex_t mu; /* bits */
	bool mu_ok;
};

/* ---- the .have file ------------------------------------------------------ */

static size_t wc_have_size(size_t nt)
{
	return WC_FIXED + nt * WC_H + (nt + 7) / 8 + WC_H;
}

/* Write the .have file (tmp + rename: never half a file); bits under mu. */
static shoal_err wc_have_save(shoal_wcache *c, char *why, size_t why_len)
{
	size_t nt = c->n_tensors, n = wc_have_size(nt);
	uint8_t *b = calloc(1, n), *p = b;
	if (!b)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	memcpy(p, "SHOALWCH", 8);
	p[8] = WC_VERSION;
	shoal_le_put_u64(p + 16, nt);
	shoal_le_put_u64(p + 24, c->file_size);
	p += 32;
	memcpy(p, c->model_id, WC_H);
	memcpy(p + WC_H, shoal_model_id_header_digest(c->mid, 0), WC_H);
	p += 2 * WC_H;
	for (size_t i = 0; i < nt; i++)
		memcpy(p + i * WC_H, shoal_model_id_tensor_digest(c->mid, i), WC_H);
	p += nt * WC_H;
	pthread_mutex_lock(&c->mu);
	memcpy(p, c->bits, (nt + 7) / 8);
	pthread_mutex_unlock(&c->mu);
	p += (nt + 7) / 8;
	crypto_generichash(p, WC_H, b, n - WC_H, NULL, 0);
	shoal_err e = shoal_file_replace(c->have, b, n, true, why, why_len);
	free(b);
	return e;
}

/* ---- open/create/free ---------------------------------------------------- */

void shoal_wcache_free(shoal_wcache *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	shoal_model_id_free(c->mid);
	free(c->offset);
	free(c->bits);
	if (c->mu_ok)
		pthread_mutex_destroy(&c->mu);
	free(c);
}

static shoal_wcache *wc_alloc(const char *dir, const uint8_t model_id[SHOAL_MODEL_ID_BYTES])
{
	shoal_wcache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fd = -1;
	if (pthread_mutex_init(&c->mu, NULL) != 0) {
		free(c);
		return NULL;
	}
	c->mu_ok = true;
	char hex[2 * WC_H + 1];
	shoal_model_id_hex(model_id, hex);
	snprintf(c->dir, sizeof c->dir, "%s", dir);
	snprintf(c->path, sizeof c->path, "%s/%s.gguf", dir, hex);
	snprintf(c->have, sizeof c->have, "%s/%s.have", dir, hex);
	memcpy(c->model_id, model_id, WC_H);
	return c;
}

/* Open c->path as a GGUF, check that it has one shard of `header_digest`'s
 * header (when given) and n_tensors tensors, and make c's id from its
 * names and `digests`: it must be c->model_id (invariant 1). */
static shoal_err wc_bind(shoal_wcache *c, const uint8_t *header_digest, const uint8_t *digests,
                         size_t n_tensors, char *why, size_t why_len)
{
	shoal_gguf *g = NULL;
	shoal_err e = shoal_gguf_open(c->path, &g, why, why_len);
	if (e)
		return e;
	size_t gn = shoal_gguf_n_tensors(g);
	uint64_t gs = shoal_gguf_shard_size(g, 0);
	if (shoal_gguf_n_shards(g) != 1 || gn != n_tensors || gs != c->file_size) {
		shoal_gguf_free(g);
		return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
		                 "the header names %zu tensors in %llu bytes; the peer sent %zu "
		                 "digests for %llu bytes",
		                 gn, (unsigned long long)gs, n_tensors,
		                 (unsigned long long)c->file_size);
	}
	e = shoal_model_id_from_digests(g, header_digest, digests, &c->mid, why, why_len);
	if (!e && (!(c->offset = malloc((n_tensors ? n_tensors : 1) * sizeof *c->offset)) ||
	           !(c->bits = calloc((n_tensors + 7) / 8 + 1, 1))))
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !e && i < n_tensors; i++)
		c->offset[i] = shoal_gguf_tensor_at(g, i)->file_offset;
	shoal_gguf_free(g);
	if (e)
		return e;
	c->n_tensors = n_tensors;
	if (sodium_memcmp(shoal_model_id_digest(c->mid), c->model_id, WC_H) != 0) {
		char want[2 * WC_H + 1], got[2 * WC_H + 1];
		shoal_model_id_hex(c->model_id, want);
		shoal_model_id_hex(shoal_model_id_digest(c->mid), got);
		return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
		                 "the header and digests give model id %.16s, not %.16s", got,
		                 want);
	}
	if ((c->fd = open(c->path, O_RDWR | O_CLOEXEC)) < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot open %s: %s", c->path,
		                 strerror(errno));
	return SHOAL_OK;
}

static void wc_remove(const shoal_wcache *c)
{
	unlink(c->path);
	unlink(c->have);
}

shoal_err shoal_wcache_open(const char *dir, const uint8_t model_id[SHOAL_MODEL_ID_BYTES],
                            shoal_wcache **out, char *why, size_t why_len)
{
	*out = NULL;
	if (sodium_init() < 0)
		return shoal_why(why, why_len, SHOAL_ERR_STATE, "libsodium failed to initialise");
	shoal_wcache *c = wc_alloc(dir, model_id);
	if (!c)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	shoal_err e = SHOAL_OK;
	uint8_t *b = NULL;
	int fd = open(c->have, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (fd < 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no cache of this model in %s",
		              dir);
		goto out;
	}
	if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)wc_have_size(0) ||
	    !(b = malloc((size_t)sb.st_size)) || read(fd, b, (size_t)sb.st_size) != sb.st_size) {
		e = shoal_why(why, why_len, SHOAL_ERR_MISMATCH, "%s is short or unreadable",
		              c->have);
		goto out;
	}
	size_t n = (size_t)sb.st_size;
	uint8_t sum[WC_H];
	crypto_generichash(sum, WC_H, b, n - WC_H, NULL, 0);
	uint64_t nt = shoal_le_get_u64(b + 16);
	if (sodium_memcmp(sum, b + n - WC_H, WC_H) != 0 || memcmp(b, "SHOALWCH", 8) ||
	    shoal_le_get_u64(b + 8) != WC_VERSION || nt > (n / WC_H) ||
	    wc_have_size((size_t)nt) != n || sodium_memcmp(b + 32, model_id, WC_H) != 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_MISMATCH, "%s is corrupt", c->have);
		goto out;
	}
	c->file_size = shoal_le_get_u64(b + 24);
	const uint8_t *digests = b + WC_FIXED;
	if ((e = wc_bind(c, b + 32 + WC_H, digests, (size_t)nt, why, why_len)) != SHOAL_OK)
		goto out;
	memcpy(c->bits, digests + nt * WC_H, (size_t)(nt + 7) / 8);
	futimens(fd, NULL); /* opened now: the last to be evicted */
out:
	if (fd >= 0)
		close(fd);
	free(b);
	if (e) {
		if (e == SHOAL_ERR_MISMATCH) {
			SHOAL_LOG_W("models", "weights cache %s removed: %s", c->path, why);
			wc_remove(c);
		}
		shoal_wcache_free(c);
		return e;
	}
	*out = c;
	return SHOAL_OK;
}

shoal_err shoal_wcache_create(const char *dir, const uint8_t model_id[SHOAL_MODEL_ID_BYTES],
                              uint64_t file_size, const uint8_t *header, size_t header_len,
                              const uint8_t *digests, size_t n_tensors, shoal_wcache **out,
                              char *why, size_t why_len)
{
	*out = NULL;
	if (sodium_init() < 0)
		return shoal_why(why, why_len, SHOAL_ERR_STATE, "libsodium failed to initialise");
	if (header_len > file_size || file_size > (uint64_t)INT64_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
		                 "a header of %zu bytes in a file of %llu", header_len,
		                 (unsigned long long)file_size);
	if (shoal_state_dir_ensure(dir) != SHOAL_OK)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot create %s", dir);
	shoal_wcache *c = wc_alloc(dir, model_id);
	if (!c)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	c->file_size = file_size;
	shoal_err e = SHOAL_OK;
	unlink(c->have); /* a stale manifest must not outlive the file it described */
	int fd = open(c->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)file_size) != 0 ||
	    pwrite(fd, header, header_len, 0) != (ssize_t)header_len) {
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %s: %s", c->path,
		              strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	uint8_t hd[WC_H];
	crypto_generichash(hd, WC_H, header, header_len, NULL, 0);
	if (!e)
		e = wc_bind(c, hd, digests, n_tensors, why, why_len);
	if (!e) {
		/* the header must be all that precedes the data section */
		shoal_gguf *g = NULL;
		if (shoal_gguf_open(c->path, &g, why, why_len) == SHOAL_OK &&
		    shoal_gguf_shard_header_bytes(g, 0) != header_len)
			e = shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
			              "a header of %zu bytes, the file says %llu", header_len,
			              (unsigned long long)shoal_gguf_shard_header_bytes(g, 0));
		shoal_gguf_free(g);
	}
	if (!e)
		e = wc_have_save(c, why, why_len);
	if (e) {
		wc_remove(c);
		shoal_wcache_free(c);
		return e;
	}
	*out = c;
	return SHOAL_OK;
}

const char *shoal_wcache_path(const shoal_wcache *c)
{
	return c->path;
}

const shoal_model_id *shoal_wcache_id(const shoal_wcache *c)
{
	return c->mid;
}

uint64_t shoal_wcache_file_size(const shoal_wcache *c)
{
	return c->file_size;
}

size_t shoal_wcache_n_tensors(const shoal_wcache *c)
{
	return c->n_tensors;
}

bool shoal_wcache_has(shoal_wcache *c, size_t i)
{
	if (i >= c->n_tensors)
		return false;
	pthread_mutex_lock(&c->mu);
	bool h = c->bits[i / 8] >> (i % 8) & 1;
	pthread_mutex_unlock(&c->mu);
	return h;
}

/* ---- chunks and tensors -------------------------------------------------- */

shoal_err shoal_wcache_put_chunk(shoal_wcache *c, size_t i, uint64_t offset, const void *data,
                                 size_t len, const uint8_t digest[WC_H], char *why, size_t why_len)
{
	uint64_t nb = shoal_model_id_tensor_bytes(c->mid, i);
	if (i >= c->n_tensors || offset > nb || len > nb - offset)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "chunk [%llu, +%zu) outside tensor %zu",
		                 (unsigned long long)offset, len, i);
	uint8_t d[WC_H];
	crypto_generichash(d, WC_H, data, len, NULL, 0);
	if (sodium_memcmp(d, digest, WC_H) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
		                 "chunk [%llu, +%zu) of tensor %zu does not match its digest",
		                 (unsigned long long)offset, len, i);
	const uint8_t *p = data;
	uint64_t at = c->offset[i] + offset;
	while (len) {
		ssize_t w = pwrite(c->fd, p, len, (off_t)at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %s: %s", c->path,
			                 strerror(errno));
		p += w;
		at += (uint64_t)w;
		len -= (size_t)w;
	}
	return SHOAL_OK;
}

shoal_err shoal_wcache_finish(shoal_wcache *c, size_t i, char *why, size_t why_len)
{
	if (i >= c->n_tensors)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "no tensor %zu", i);
	uint64_t nb = shoal_model_id_tensor_bytes(c->mid, i);
	size_t cap = nb < WC_READ_PIECE ? (size_t)nb + 1 : WC_READ_PIECE;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, WC_H);
	uint64_t done = 0;
	shoal_err e = SHOAL_OK;
	while (done < nb) {
		size_t want = nb - done < cap ? (size_t)(nb - done) : cap;
		ssize_t r = pread(c->fd, buf, want, (off_t)(c->offset[i] + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			e = shoal_why(why, why_len, SHOAL_ERR_IO, "cannot read %s: %s", c->path,
			              r < 0 ? strerror(errno) : "short file");
			break;
		}
		crypto_generichash_update(&st, buf, (unsigned long long)r);
		done += (uint64_t)r;
	}
	free(buf);
	if (e)
		return e;
	uint8_t d[WC_H];
	crypto_generichash_final(&st, d, WC_H);
	if (sodium_memcmp(d, shoal_model_id_tensor_digest(c->mid, i), WC_H) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
		                 "tensor %zu does not match its digest in the model id", i);
	pthread_mutex_lock(&c->mu);
	c->bits[i / 8] |= (uint8_t)(1u << (i % 8));
	pthread_mutex_unlock(&c->mu);
	return wc_have_save(c, why, why_len);
}

/* ---- eviction ------------------------------------------------------------ */

typedef struct wc_entry {
	char hex[2 * WC_H + 1];
	int64_t mtime;
	uint64_t bytes; /* both files' blocks */
} wc_entry;

static int wc_entry_cmp(const void *a, const void *b)
{
	const wc_entry *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? -1 : 1;
	return strcmp(x->hex, y->hex);
}

size_t shoal_wcache_evict(const char *dir, const uint8_t *keep_id, uint64_t max_bytes,
                          uint64_t incoming)
{
	DIR *dh = opendir(dir);
	if (!dh)
		return 0;
	wc_entry *ents = NULL;
	size_t n = 0, cap = 0, removed = 0;
	uint64_t total = incoming;
	char keep[2 * WC_H + 1] = "", p[PATH_MAX + 80];
	if (keep_id)
		shoal_model_id_hex(keep_id, keep);
	struct dirent *de;
	while ((de = readdir(dh))) {
		size_t l = strlen(de->d_name);
		if (l != 64 + 5 || strcmp(de->d_name + 64, ".have"))
			continue;
		wc_entry e = {.mtime = 0};
		memcpy(e.hex, de->d_name, 64);
		struct stat sb;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (stat(p, &sb) != 0)
			continue;
		e.mtime = (int64_t)sb.st_mtime;
		e.bytes = (uint64_t)sb.st_blocks * 512u;
		snprintf(p, sizeof p, "%s/%s.gguf", dir, e.hex);
		if (stat(p, &sb) == 0)
			e.bytes += (uint64_t)sb.st_blocks * 512u;
		total += e.bytes;
		if (!strcmp(e.hex, keep))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			wc_entry *ne = realloc(ents, nc * sizeof *ne);
			if (!ne)
				break;
			ents = ne;
			cap = nc;
		}
		ents[n++] = e;
	}
	closedir(dh);
	if (n)
		qsort(ents, n, sizeof *ents, wc_entry_cmp);
	for (size_t i = 0; i < n && total > max_bytes; i++) {
		snprintf(p, sizeof p, "%s/%s.have", dir, ents[i].hex);
		unlink(p);
		snprintf(p, sizeof p, "%s/%s.gguf", dir, ents[i].hex);
		unlink(p);
		SHOAL_LOG_I("models",
		            "weights cache: evicted model %.16s (%.1f MiB) to stay within "
		            "%.1f MiB",
		            ents[i].hex, (double)ents[i].bytes / 1048576.0,
		            (double)max_bytes / 1048576.0);
		total -= ents[i].bytes;
		removed++;
	}
	free(ents);
	return removed;
}
