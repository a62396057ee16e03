/*
 * models/model_id.c: model and tensor digests (see model_id.h) and their
 * cache in the state directory.
 *
 * Part: models/. Divisions: the digests; the cache key and file; load.
 * Cache file layout (little-endian), <state>/model-ids/<key hex>.id:
 *   "SHOALMID" | version u32 = 1 | n_shards u32 | n_tensors u64 | key[16]
 *   | model id[32] | header digests[32 * n_shards]
 *   | tensor digests[32 * n_tensors] | checksum[32] = H(all before it)
 * A file is used only if its size, checksum and key match and the model id
 * recomputed from its digests (and the tensor names of the open file)
 * equals the stored one; otherwise it is ignored and rewritten.
 */
#include "models/model_id.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/le.h"
#include "base/hex.h"
#include "base/log.h"
#include "base/statedir.h"

#define MID_H         SHOAL_MODEL_ID_BYTES
#define MID_KEY_BYTES 16 /* 128-bit cache key: collisions need ~2^64 models */
#define MID_VERSION   1u
#define MID_DOMAIN    "shoal-model-id-v1"
#define MID_FIXED     (8 + 4 + 4 + 8 + MID_KEY_BYTES + MID_H) /* before the digests */

struct shoal_model_id {
	uint8_t id[MID_H];
	uint32_t n_shards;
	uint8_t *headers; /* (n_shards, 32) */
	size_t n_tensors;
	uint8_t *tensors; /* (n_tensors, 32) */
	uint64_t *nbytes; /* (n_tensors) */
	char **names;     /* (n_tensors) owned copies */
	bool cached;
	uint64_t hashed;
};

/* ---- the digests ------------------------------------------------------- */

/* The model id from the per-part digests (see model_id.h). */
static void mid_combine(const shoal_model_id *m, uint8_t out[MID_H])
{
	crypto_generichash_state st;
	uint8_t b[4];
	crypto_generichash_init(&st, NULL, 0, MID_H);
	crypto_generichash_update(&st, (const uint8_t *)MID_DOMAIN, strlen(MID_DOMAIN));
	shoal_le_put_u32(b, m->n_shards);
	crypto_generichash_update(&st, b, 4);
	crypto_generichash_update(&st, m->headers, (unsigned long long)m->n_shards * MID_H);
	for (size_t i = 0; i < m->n_tensors; i++) {
		size_t nl = strlen(m->names[i]);
		shoal_le_put_u32(b, (uint32_t)nl);
		crypto_generichash_update(&st, b, 4);
		crypto_generichash_update(&st, (const uint8_t *)m->names[i], nl);
		crypto_generichash_update(&st, m->tensors + i * MID_H, MID_H);
	}
	crypto_generichash_final(&st, out, MID_H);
}

void shoal_model_id_free(shoal_model_id *id)
{
	if (!id)
		return;
	if (id->names)
		for (size_t i = 0; i < id->n_tensors; i++)
			free(id->names[i]);
	free(id->names);
	free(id->headers);
	free(id->tensors);
	free(id->nbytes);
	free(id);
}

/* An id with the names and sizes of g and room for the digests. */
static shoal_model_id *mid_alloc(const shoal_gguf *g)
{
	shoal_model_id *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->n_shards = shoal_gguf_n_shards(g);
	m->n_tensors = shoal_gguf_n_tensors(g);
	size_t nt = m->n_tensors ? m->n_tensors : 1;
	m->headers = malloc((size_t)m->n_shards * MID_H);
	m->tensors = malloc(nt * MID_H);
	m->nbytes = malloc(nt * sizeof *m->nbytes);
	m->names = calloc(nt, sizeof *m->names);
	if (!m->headers || !m->tensors || !m->nbytes || !m->names)
		goto fail;
	for (size_t i = 0; i < m->n_tensors; i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, i);
		m->names[i] = strdup(t->name);
		if (!m->names[i])
			goto fail;
		m->nbytes[i] = t->nbytes;
	}
	return m;
fail:
	shoal_model_id_free(m);
	return NULL;
}

/* Hashing is compute-bound (BLAKE2b runs at roughly 1 GB/s a core), so the
 * tensors are shared among threads: one per online CPU, at most 16 (beyond
 * that the memory bus, not the cores, sets the pace). Each job writes its
 * own digest slot, so the result does not depend on the thread count. */
#define MID_MAX_THREADS 16

typedef struct mid_job {
	const shoal_gguf *g;
	shoal_model_id *m;
	atomic_size_t next;        /* jobs 0..n_shards-1: headers; then tensors */
	atomic_uint_fast64_t done; /* bytes hashed by all threads */
	uint64_t total;
	shoal_model_id_progress_fn fn; /* called by the calling thread only */
	void *ud;
} mid_job;

static void *mid_work(mid_job *j, bool caller)
{
	size_t total = j->m->n_shards + j->m->n_tensors;
	for (;;) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= total)
			return NULL;
		uint64_t nb;
		if (k < j->m->n_shards) {
			uint32_t s = (uint32_t)k;
			nb = shoal_gguf_shard_header_bytes(j->g, s);
			crypto_generichash(j->m->headers + (size_t)s * MID_H, MID_H,
			                   shoal_gguf_shard_base(j->g, s), nb, NULL, 0);
		} else {
			size_t i = k - j->m->n_shards;
			const shoal_gguf_tensor *t = shoal_gguf_tensor_at(j->g, i);
			nb = t->nbytes;
			crypto_generichash(j->m->tensors + i * MID_H, MID_H, t->data, t->nbytes,
			                   NULL, 0);
		}
		uint64_t d = atomic_fetch_add(&j->done, nb) + nb;
		if (caller && j->fn)
			j->fn(j->ud, d, j->total);
	}
}

static void *mid_worker(void *arg)
{
	return mid_work(arg, false);
}

static void mid_hash_all(const shoal_gguf *g, shoal_model_id *m, shoal_model_id_progress_fn fn,
                         void *ud)
{
	mid_job j = {.g = g, .m = m, .fn = fn, .ud = ud};
	atomic_init(&j.next, 0);
	atomic_init(&j.done, 0);
	for (uint32_t s = 0; s < m->n_shards; s++)
		j.total += shoal_gguf_shard_header_bytes(g, s);
	for (size_t i = 0; i < m->n_tensors; i++)
		j.total += shoal_gguf_tensor_at(g, i)->nbytes;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t jobs = m->n_shards + m->n_tensors;
	size_t nt = cpus < 1 ? 1 : (size_t)cpus;
	if (nt > MID_MAX_THREADS)
		nt = MID_MAX_THREADS;
	if (nt > jobs)
		nt = jobs;
	pthread_t th[MID_MAX_THREADS];
	size_t started = 0;
	for (size_t i = 1; i < nt; i++) {
		if (pthread_create(&th[started], NULL, mid_worker, &j) != 0)
			break; /* fewer threads: the work still gets done */
		started++;
	}
	mid_work(&j, true);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (fn)
		fn(ud, j.total, j.total);
	for (uint32_t s = 0; s < m->n_shards; s++)
		m->hashed += shoal_gguf_shard_header_bytes(g, s);
	for (size_t i = 0; i < m->n_tensors; i++)
		m->hashed += shoal_gguf_tensor_at(g, i)->nbytes;
	mid_combine(m, m->id);
}

shoal_err shoal_model_id_compute(const shoal_gguf *g, shoal_model_id **out, char *why,
                                 size_t why_len)
{
	return shoal_model_id_load(g, NULL, out, why, why_len);
}

/* ---- the cache ------------------------------------------------------------ */

/* Key over (absolute path, size, mtime) of every shard. */
static shoal_err mid_key(const shoal_gguf *g, uint8_t key[MID_KEY_BYTES], char *why, size_t why_len)
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, MID_KEY_BYTES);
	for (uint32_t s = 0; s < shoal_gguf_n_shards(g); s++) {
		const char *p = shoal_gguf_shard_path(g, s);
		char abs[PATH_MAX];
		struct stat sb;
		if (!realpath(p, abs) || stat(abs, &sb) != 0)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot stat '%s': %s", p,
			                 strerror(errno));
		uint8_t b[24];
#ifdef __APPLE__
		int64_t sec = sb.st_mtimespec.tv_sec, nsec = sb.st_mtimespec.tv_nsec;
#else
		int64_t sec = sb.st_mtim.tv_sec, nsec = sb.st_mtim.tv_nsec;
#endif
		shoal_le_put_u64(b, (uint64_t)sb.st_size);
		shoal_le_put_u64(b + 8, (uint64_t)sec);
		shoal_le_put_u64(b + 16, (uint64_t)nsec);
		crypto_generichash_update(&st, (const uint8_t *)abs, strlen(abs) + 1);
		crypto_generichash_update(&st, b, sizeof b);
	}
	crypto_generichash_final(&st, key, MID_KEY_BYTES);
	return SHOAL_OK;
}

static size_t mid_file_size(uint32_t ns, size_t nt)
{
	return MID_FIXED + (size_t)ns * MID_H + nt * MID_H + MID_H;
}

static void mid_cache_path(const char *state_dir, const uint8_t key[MID_KEY_BYTES], char *out,
                           size_t cap)
{
	char hex[2 * MID_KEY_BYTES + 1];
	shoal_hex_encode(key, MID_KEY_BYTES, hex);
	snprintf(out, cap, "%s/model-ids/%s.id", state_dir, hex);
}

/* Fill m's digests from the cache file if it is sound. */
static bool mid_cache_read(const char *path, const uint8_t key[MID_KEY_BYTES], shoal_model_id *m)
{
	size_t want = mid_file_size(m->n_shards, m->n_tensors);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat sb;
	uint8_t *b = NULL;
	bool ok = false;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
		goto out;
	if ((uint64_t)sb.st_size != want) {
		SHOAL_LOG_W("models", "model-id cache %s has the wrong size; recomputing", path);
		goto out;
	}
	b = malloc(want);
	if (!b || read(fd, b, want) != (ssize_t)want)
		goto out;
	uint8_t sum[MID_H];
	crypto_generichash(sum, MID_H, b, want - MID_H, NULL, 0);
	const uint8_t *p = b;
	if (sodium_memcmp(sum, b + want - MID_H, MID_H) != 0 || memcmp(p, "SHOALMID", 8) ||
	    (shoal_le_get_u64(p + 8) & 0xffffffffu) != MID_VERSION ||
	    memcmp(p + 24, key, MID_KEY_BYTES)) {
		SHOAL_LOG_W("models", "model-id cache %s is corrupt; recomputing", path);
		goto out;
	}
	uint32_t ns =
	    (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
	if (ns != m->n_shards || shoal_le_get_u64(p + 16) != m->n_tensors)
		goto out;
	p += 24 + MID_KEY_BYTES;
	memcpy(m->id, p, MID_H);
	p += MID_H;
	memcpy(m->headers, p, (size_t)m->n_shards * MID_H);
	p += (size_t)m->n_shards * MID_H;
	memcpy(m->tensors, p, m->n_tensors * MID_H);
	/* The stored id must follow from the stored digests and our names. */
	uint8_t again[MID_H];
	mid_combine(m, again);
	if (sodium_memcmp(again, m->id, MID_H) != 0) {
		SHOAL_LOG_W("models", "model-id cache %s does not match this model; recomputing",
		            path);
		goto out;
	}
	ok = true;
out:
	free(b);
	close(fd);
	return ok;
}

static void mid_cache_write(const char *state_dir, const char *path,
                            const uint8_t key[MID_KEY_BYTES], const shoal_model_id *m)
{
	char dir[PATH_MAX]; /* path is at most PATH_MAX + 64: shoal_file_replace takes it */
	snprintf(dir, sizeof dir, "%s/model-ids", state_dir);
	if (shoal_state_dir_ensure(dir) != SHOAL_OK) {
		SHOAL_LOG_W("models", "cannot create %s; model id not cached", dir);
		return;
	}
	size_t n = mid_file_size(m->n_shards, m->n_tensors);
	uint8_t *b = malloc(n), *p = b;
	if (!b)
		return;
	memcpy(p, "SHOALMID", 8);
	shoal_le_put_u32(p + 8, MID_VERSION);
	shoal_le_put_u32(p + 12, m->n_shards);
	shoal_le_put_u64(p + 16, m->n_tensors);
	memcpy(p + 24, key, MID_KEY_BYTES);
	p += 24 + MID_KEY_BYTES;
	memcpy(p, m->id, MID_H);
	p += MID_H;
	memcpy(p, m->headers, (size_t)m->n_shards * MID_H);
	p += (size_t)m->n_shards * MID_H;
	memcpy(p, m->tensors, m->n_tensors * MID_H);
	p += m->n_tensors * MID_H;
	crypto_generichash(p, MID_H, b, n - MID_H, NULL, 0);
	char w[SHOAL_WHY_LEN];
	if (shoal_file_replace(path, b, n, false, w, sizeof w) != SHOAL_OK)
		SHOAL_LOG_W("models", "%s", w);
	free(b);
}

/* ---- load ----------------------------------------------------------------- */

shoal_err shoal_model_id_load(const shoal_gguf *g, const char *state_dir, shoal_model_id **out,
                              char *why, size_t why_len)
{
	return shoal_model_id_load_cb(g, state_dir, NULL, NULL, out, why, why_len);
}

shoal_err shoal_model_id_from_digests(const shoal_gguf *g, const uint8_t *headers,
                                      const uint8_t *tensors, shoal_model_id **out, char *why,
                                      size_t why_len)
{
	*out = NULL;
	if (sodium_init() < 0)
		return shoal_why(why, why_len, SHOAL_ERR_STATE, "libsodium failed to initialise");
	shoal_model_id *m = mid_alloc(g);
	if (!m)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	memcpy(m->headers, headers, (size_t)m->n_shards * MID_H);
	memcpy(m->tensors, tensors, m->n_tensors * MID_H);
	mid_combine(m, m->id);
	*out = m;
	return SHOAL_OK;
}

shoal_err shoal_model_id_load_cb(const shoal_gguf *g, const char *state_dir,
                                 shoal_model_id_progress_fn fn, void *ud, shoal_model_id **out,
                                 char *why, size_t why_len)
{
	*out = NULL;
	if (sodium_init() < 0)
		return shoal_why(why, why_len, SHOAL_ERR_STATE, "libsodium failed to initialise");
	shoal_model_id *m = mid_alloc(g);
	if (!m)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	if (!state_dir || !*state_dir) {
		mid_hash_all(g, m, fn, ud);
		*out = m;
		return SHOAL_OK;
	}
	uint8_t key[MID_KEY_BYTES];
	char path[PATH_MAX + 64];
	shoal_err e = mid_key(g, key, why, why_len);
	if (e) {
		shoal_model_id_free(m);
		return e;
	}
	mid_cache_path(state_dir, key, path, sizeof path);
	if (mid_cache_read(path, key, m)) {
		m->cached = true;
		*out = m;
		return SHOAL_OK;
	}
	mid_hash_all(g, m, fn, ud);
	mid_cache_write(state_dir, path, key, m);
	*out = m;
	return SHOAL_OK;
}

/* ---- accessors ------------------------------------------------------------ */

const uint8_t *shoal_model_id_digest(const shoal_model_id *id)
{
	return id->id;
}

uint32_t shoal_model_id_n_shards(const shoal_model_id *id)
{
	return id->n_shards;
}

const uint8_t *shoal_model_id_header_digest(const shoal_model_id *id, uint32_t shard)
{
	return shard < id->n_shards ? id->headers + (size_t)shard * MID_H : NULL;
}

size_t shoal_model_id_n_tensors(const shoal_model_id *id)
{
	return id->n_tensors;
}

const uint8_t *shoal_model_id_tensor_digest(const shoal_model_id *id, size_t i)
{
	return i < id->n_tensors ? id->tensors + i * MID_H : NULL;
}

int64_t shoal_model_id_find(const shoal_model_id *id, const char *name)
{
	for (size_t i = 0; name && i < id->n_tensors; i++)
		if (!strcmp(id->names[i], name))
			return (int64_t)i;
	return -1;
}

shoal_err shoal_model_id_verify_tensor(const shoal_model_id *id, size_t tensor_index,
                                       const void *data, uint64_t nbytes)
{
	if (tensor_index >= id->n_tensors)
		return SHOAL_ERR_RANGE;
	if (nbytes != id->nbytes[tensor_index] || (!data && nbytes))
		return SHOAL_ERR_MISMATCH;
	uint8_t d[MID_H];
	crypto_generichash(d, MID_H, data, nbytes, NULL, 0);
	return sodium_memcmp(d, id->tensors + tensor_index * MID_H, MID_H) == 0
	           ? SHOAL_OK
	           : SHOAL_ERR_MISMATCH;
}

uint64_t shoal_model_id_tensor_bytes(const shoal_model_id *id, size_t i)
{
	return i < id->n_tensors ? id->nbytes[i] : 0;
}

bool shoal_model_id_cached(const shoal_model_id *id)
{
	return id->cached;
}

uint64_t shoal_model_id_bytes_hashed(const shoal_model_id *id)
{
	return id->hashed;
}

void shoal_model_id_hex(const uint8_t digest[SHOAL_MODEL_ID_BYTES],
                        char out[2 * SHOAL_MODEL_ID_BYTES + 1])
{
	shoal_hex_encode(digest, SHOAL_MODEL_ID_BYTES, out);
}
