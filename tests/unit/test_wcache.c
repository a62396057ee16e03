/*
 * tests/unit/test_wcache.c: the weights cache (models/wcache.h) over the
 * bundled austen model: a cache is made only from a header and digests
 * that give the model id; a chunk is written only when it matches the
 * digest sent ahead of it; a tensor counts only when it matches its digest
 * in the model id; what was complete survives a reopen (resume), a
 * damaged .have file is removed, not trusted; a filled cache opens as the
 * model; eviction removes the least recently opened caches first.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <sodium.h>

#include "models/gguf.h"
#include "models/model.h"
#include "models/model_id.h"
#include "models/wcache.h"
#include "test.h"

static char tmpdir[] = "/tmp/shoal-test-wcache-XXXXXX";
static shoal_gguf *g;
static shoal_model_id *mid;
static char why[SHOAL_WHY_LEN];

static void test_setup(void)
{
	char p[512];
	snprintf(p, sizeof p, "%s/models/austen-dense-q8_0.gguf", test_data_dir());
	ASSERT_TRUE(mkdtemp(tmpdir) != NULL);
	ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_id_compute(g, &mid, why, sizeof why), SHOAL_OK);
}

/* The digests of the tensors in file order, as a peer sends them. */
static uint8_t *digests(void)
{
	size_t n = shoal_model_id_n_tensors(mid);
	uint8_t *d = malloc(32 * n);
	for (size_t i = 0; i < n; i++)
		memcpy(d + SHOAL_MODEL_ID_BYTES * i, shoal_model_id_tensor_digest(mid, i),
		       SHOAL_MODEL_ID_BYTES);
	return d;
}

static shoal_err make(const char *dir, const uint8_t *id, const uint8_t *hdr, const uint8_t *dg,
                      shoal_wcache **c)
{
	return shoal_wcache_create(dir, id, shoal_gguf_shard_size(g, 0), hdr,
	                           (size_t)shoal_gguf_shard_header_bytes(g, 0), dg,
	                           shoal_model_id_n_tensors(mid), c, why, sizeof why);
}

static bool exists(const shoal_wcache *c, const char *ext)
{
	char p[1024];
	snprintf(p, sizeof p, "%.*s%s", (int)(strlen(shoal_wcache_path(c)) - 5),
	         shoal_wcache_path(c), ext);
	return access(p, F_OK) == 0;
}

static void test_create_checks_the_model_id(void)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/a", tmpdir);
	size_t hl = (size_t)shoal_gguf_shard_header_bytes(g, 0);
	uint8_t *hdr = malloc(hl), *dg = digests(), id[SHOAL_MODEL_ID_BYTES];
	memcpy(hdr, shoal_gguf_shard_base(g, 0), hl);
	memcpy(id, shoal_model_id_digest(mid), SHOAL_MODEL_ID_BYTES);
	shoal_wcache *c = NULL;
	/* another model id */
	id[3] ^= 1;
	ASSERT_EQ(make(dir, id, hdr, dg, &c), SHOAL_ERR_MISMATCH);
	id[3] ^= 1;
	/* one tensor digest off */
	dg[32 * 5] ^= 0x80;
	ASSERT_EQ(make(dir, id, hdr, dg, &c), SHOAL_ERR_MISMATCH);
	dg[32 * 5] ^= 0x80;
	/* a header byte off (the last byte of the last tensor name's padding
	 * or info: any change must fail, whichever check sees it) */
	hdr[hl - 40] ^= 0x01;
	ASSERT_NE(make(dir, id, hdr, dg, &c), SHOAL_OK);
	hdr[hl - 40] ^= 0x01;
	ASSERT_TRUE(c == NULL);
	/* nothing left behind by the failures; then the real thing */
	char hex[65], p[800];
	shoal_model_id_hex(id, hex);
	snprintf(p, sizeof p, "%s/%s.gguf", dir, hex);
	ASSERT_TRUE(access(p, F_OK) != 0);
	ASSERT_EQ(make(dir, id, hdr, dg, &c), SHOAL_OK);
	ASSERT_TRUE(exists(c, ".gguf") && exists(c, ".have"));
	ASSERT_U64_EQ(shoal_wcache_file_size(c), shoal_gguf_shard_size(g, 0));
	ASSERT_MEM_EQ(shoal_model_id_digest(shoal_wcache_id(c)), id, 32);
	for (size_t i = 0; i < shoal_wcache_n_tensors(c); i++)
		ASSERT_FALSE(shoal_wcache_has(c, i));
	shoal_wcache_free(c);
	free(hdr);
	free(dg);
}

/* A cache of the bundled model in tmpdir/NAME with nothing fetched. */
static shoal_wcache *fresh(const char *name)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
	uint8_t *dg = digests();
	shoal_wcache *c = NULL;
	if (make(dir, shoal_model_id_digest(mid), shoal_gguf_shard_base(g, 0), dg, &c))
		fprintf(stderr, "fresh: %s\n", why);
	free(dg);
	return c;
}

/* Tensor i's bytes as chunks of `chunk`, each with its own digest. */
static shoal_err put_tensor(shoal_wcache *c, size_t i, size_t chunk)
{
	const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, i);
	for (uint64_t off = 0; off < t->nbytes; off += chunk) {
		size_t len = t->nbytes - off < chunk ? (size_t)(t->nbytes - off) : chunk;
		uint8_t d[SHOAL_MODEL_ID_BYTES];
		crypto_generichash(d, 32, (const uint8_t *)t->data + off, len, NULL, 0);
		shoal_err e = shoal_wcache_put_chunk(c, i, off, (const uint8_t *)t->data + off, len,
		                                     d, why, sizeof why);
		if (e)
			return e;
	}
	return shoal_wcache_finish(c, i, why, sizeof why);
}

static void test_chunks_and_tensors(void)
{
	shoal_wcache *c = fresh("b");
	ASSERT_TRUE(c != NULL);
	const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, 1);
	ASSERT_GT(t->nbytes, 64);
	uint8_t *bad = malloc(t->nbytes), d[SHOAL_MODEL_ID_BYTES];
	memcpy(bad, t->data, t->nbytes);
	bad[7] ^= 0x5a; /* damaged in transit: the digest sent ahead is the good one's */
	crypto_generichash(d, 32, t->data, 64, NULL, 0);
	ASSERT_EQ(shoal_wcache_put_chunk(c, 1, 0, bad, 64, d, why, sizeof why), SHOAL_ERR_MISMATCH);
	/* a chunk outside the tensor */
	ASSERT_EQ(shoal_wcache_put_chunk(c, 1, t->nbytes - 8, t->data, 64, d, why, sizeof why),
	          SHOAL_ERR_RANGE);
	/* a lying server: the digest of its bad bytes passes the chunk check,
	 * the tensor's digest in the model id does not */
	crypto_generichash(d, 32, bad, t->nbytes, NULL, 0);
	ASSERT_EQ(shoal_wcache_put_chunk(c, 1, 0, bad, (size_t)t->nbytes, d, why, sizeof why),
	          SHOAL_OK);
	ASSERT_EQ(shoal_wcache_finish(c, 1, why, sizeof why), SHOAL_ERR_MISMATCH);
	ASSERT_FALSE(shoal_wcache_has(c, 1));
	/* the real bytes in odd-sized chunks, then the whole check */
	ASSERT_EQ(put_tensor(c, 1, 1000), SHOAL_OK);
	ASSERT_TRUE(shoal_wcache_has(c, 1));
	ASSERT_FALSE(shoal_wcache_has(c, 0));
	ASSERT_FALSE(shoal_wcache_has(c, shoal_wcache_n_tensors(c)));
	free(bad);
	shoal_wcache_free(c);
}

static void test_resume_and_damaged_manifest(void)
{
	shoal_wcache *c = fresh("c"), *r = NULL;
	ASSERT_TRUE(c != NULL);
	ASSERT_EQ(put_tensor(c, 0, 4096), SHOAL_OK);
	ASSERT_EQ(put_tensor(c, 3, 4096), SHOAL_OK);
	/* half of tensor 4 written, not finished: an interrupted transfer */
	const shoal_gguf_tensor *t4 = shoal_gguf_tensor_at(g, 4);
	uint8_t d[SHOAL_MODEL_ID_BYTES];
	crypto_generichash(d, 32, t4->data, t4->nbytes / 2, NULL, 0);
	ASSERT_EQ(
	    shoal_wcache_put_chunk(c, 4, 0, t4->data, (size_t)(t4->nbytes / 2), d, why, sizeof why),
	    SHOAL_OK);
	char dir[600], have[1024];
	snprintf(dir, sizeof dir, "%s/c", tmpdir);
	snprintf(have, sizeof have, "%.*s.have", (int)(strlen(shoal_wcache_path(c)) - 5),
	         shoal_wcache_path(c));
	shoal_wcache_free(c);
	ASSERT_EQ(shoal_wcache_open(dir, shoal_model_id_digest(mid), &r, why, sizeof why),
	          SHOAL_OK);
	ASSERT_TRUE(shoal_wcache_has(r, 0));
	ASSERT_TRUE(shoal_wcache_has(r, 3));
	ASSERT_FALSE(shoal_wcache_has(r, 4)); /* resumes at the tensor */
	ASSERT_FALSE(shoal_wcache_has(r, 2));
	ASSERT_EQ(put_tensor(r, 4, 4096), SHOAL_OK);
	shoal_wcache_free(r);
	/* another model id finds nothing */
	uint8_t other[SHOAL_MODEL_ID_BYTES];
	memcpy(other, shoal_model_id_digest(mid), SHOAL_MODEL_ID_BYTES);
	other[0] ^= 1;
	ASSERT_EQ(shoal_wcache_open(dir, other, &r, why, sizeof why), SHOAL_ERR_NOTFOUND);
	/* one bit of the manifest flipped: not trusted, removed */
	int fd = open(have, O_RDWR);
	ASSERT_TRUE(fd >= 0);
	uint8_t b;
	ASSERT_EQ(pread(fd, &b, 1, 100), 1);
	b ^= 0x10;
	ASSERT_EQ(pwrite(fd, &b, 1, 100), 1);
	close(fd);
	ASSERT_EQ(shoal_wcache_open(dir, shoal_model_id_digest(mid), &r, why, sizeof why),
	          SHOAL_ERR_MISMATCH);
	ASSERT_TRUE(access(have, F_OK) != 0);
	ASSERT_EQ(shoal_wcache_open(dir, shoal_model_id_digest(mid), &r, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
}

static void test_filled_cache_is_the_model(void)
{
	shoal_wcache *c = fresh("d");
	ASSERT_TRUE(c != NULL);
	for (size_t i = 0; i < shoal_wcache_n_tensors(c); i++)
		ASSERT_EQ(put_tensor(c, i, 512u << 10), SHOAL_OK);
	shoal_model *m = NULL;
	ASSERT_EQ(shoal_model_open(shoal_wcache_path(c), &m, why, sizeof why), SHOAL_OK);
	shoal_model_id *again = NULL;
	ASSERT_EQ(shoal_model_id_compute(m->gguf, &again, why, sizeof why), SHOAL_OK);
	ASSERT_MEM_EQ(shoal_model_id_digest(again), shoal_model_id_digest(mid), 32);
	shoal_model_id_free(again);
	shoal_model_free(m);
	shoal_wcache_free(c);
}

/* A fake cache of id byte `k`: `kib` KiB of data, opened `age` s ago. */
static void fake(const char *dir, uint8_t k, size_t kib, int age)
{
	uint8_t id[SHOAL_MODEL_ID_BYTES];
	char hex[65], p[800];
	memset(id, k, SHOAL_MODEL_ID_BYTES);
	shoal_model_id_hex(id, hex);
	char *buf = calloc(1024, kib);
	memset(buf, 1, 1024 * kib);
	for (int e = 0; e < 2; e++) {
		snprintf(p, sizeof p, "%s/%s.%s", dir, hex, e ? "have" : "gguf");
		FILE *f = fopen(p, "wb");
		fwrite(buf, 1, e ? 64 : 1024 * kib, f);
		fclose(f);
		struct timeval tv[2];
		gettimeofday(&tv[0], NULL);
		tv[0].tv_sec -= age;
		tv[1] = tv[0];
		utimes(p, tv);
	}
	free(buf);
}

static bool fake_there(const char *dir, uint8_t k)
{
	uint8_t id[SHOAL_MODEL_ID_BYTES];
	char hex[65], p[800];
	memset(id, k, SHOAL_MODEL_ID_BYTES);
	shoal_model_id_hex(id, hex);
	snprintf(p, sizeof p, "%s/%s.gguf", dir, hex);
	return access(p, F_OK) == 0;
}

static void test_evict_least_recent_first(void)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/e", tmpdir);
	ASSERT_EQ(mkdir(dir, 0700), 0);
	fake(dir, 0x11, 200, 300); /* oldest */
	fake(dir, 0x22, 200, 200);
	fake(dir, 0x33, 200, 100);
	uint8_t keep[SHOAL_MODEL_ID_BYTES];
	memset(keep, 0x11, SHOAL_MODEL_ID_BYTES);
	/* room for 1 MiB with 512 KiB coming: one must go, never the kept one */
	ASSERT_EQ(shoal_wcache_evict(dir, keep, 1u << 20, 512u << 10), 1);
	ASSERT_TRUE(fake_there(dir, 0x11));
	ASSERT_FALSE(fake_there(dir, 0x22));
	ASSERT_TRUE(fake_there(dir, 0x33));
	ASSERT_EQ(shoal_wcache_evict(dir, NULL, 64u << 20, 0), 0);
	ASSERT_EQ(shoal_wcache_evict(dir, NULL, 0, 0), 2);
}

static void test_teardown(void)
{
	shoal_model_id_free(mid);
	shoal_gguf_free(g);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN(TEST_CASE(test_setup), TEST_CASE(test_create_checks_the_model_id),
          TEST_CASE(test_chunks_and_tensors), TEST_CASE(test_resume_and_damaged_manifest),
          TEST_CASE(test_filled_cache_is_the_model), TEST_CASE(test_evict_least_recent_first),
          TEST_CASE(test_teardown))
