/*
 * runtime/node/weights.h: weights for a peer without the model file: the
 * server that answers for the bytes of a model a peer maps, and the fetcher
 * that fills a weights cache (models/wcache.h) from such servers.
 *
 * Part: runtime/node. Both ends talk over data links of role WEIGHTS whose
 * admission token is made over the model id (not a plan digest: a joiner
 * has no plan yet). Every frame is SHOAL_XFER_KIND_WEIGHTS with the model
 * id in its digest field and the op in n_aux; payloads (little-endian):
 *
 *   op   request                          reply
 *   INFO (empty)                          u64 file size, u64 header bytes,
 *                                         u64 n_tensors
 *   READ u32 what, u32 len, u64 offset    the same 16 bytes, digest[32] of
 *                                         the data, the data (len bytes)
 *   ERR  -                                a one-line reason
 *
 * `what` is a tensor index (file order), or SHOAL_WEIGHTS_META: the blob
 * header bytes || the tensor digests (32 each, file order), which the
 * fetcher checks against the model id as a whole before it makes a cache.
 * The per-chunk digest only catches damage in transit (the server computes
 * it); the tensor's digest in the model id is the final word.
 *
 * Protocol invariants:
 *  1. A server answers requests of one link in order, one reply each.
 *  2. A server sends only bytes it holds whole: a peer filling its own
 *     cache answers READ of a tensor it has not verified with ERR.
 *  3. A fetcher writes nothing it has not checked (models/wcache.h) and
 *     asks again for a chunk whose digest does not match.
 *
 * Test hooks (compiled in only with ./configure --enable-test-hooks, as
 * net/fault.h; `shoal --version` says whether they are): with
 * SHOAL_TEST_CORRUPT_CHUNK=N in its environment, a server flips one byte
 * of the N-th tensor chunk it sends (counted from 1) after computing its
 * digest; with SHOAL_TEST_FETCH_DIE_AFTER=N a fetcher kills its own
 * process after N tensors (to show that a fetch resumes).
 */
#ifndef SHOAL_RUNTIME_NODE_WEIGHTS_H
#define SHOAL_RUNTIME_NODE_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/peer_id.h"
#include "models/gguf.h"
#include "models/model_id.h"
#include "models/wcache.h"
#include "net/key.h"
#include "net/record.h"
#include "net/xfer.h"
#include "scheduler/digest.h"

#define SHOAL_WEIGHTS_OP_INFO 1u
#define SHOAL_WEIGHTS_OP_READ 2u
#define SHOAL_WEIGHTS_OP_ERR  3u
#define SHOAL_WEIGHTS_META    0xffffffffu
/* 512 KiB a chunk: a reply (96-byte frame head + 48 + data) fits the 1 MiB
 * default frame, and 4 requests in flight (2 MiB) cover the
 * bandwidth-delay product of a 10 Gb/s LAN at 1 ms. */
#define SHOAL_WEIGHTS_CHUNK  (512u << 10)
#define SHOAL_WEIGHTS_WINDOW 4u
/* The link role of a WEIGHTS link (after runtime/node/serve_impl.h's). */
#define SHOAL_WEIGHTS_ROLE 4
/* The cache folder in the state directory. */
#define SHOAL_WEIGHTS_DIR "weights"

/* A data link's admission token: a BLAKE2b-256 MAC, then the role byte. */
#define SHOAL_LINK_TOKEN_ROLE SHOAL_DIGEST_BYTES /* the role byte's offset */
#define SHOAL_LINK_TOKEN_LEN  (SHOAL_DIGEST_BYTES + 1)

/* The admission token of a data link of `role` from peer `peer`:
 * BLAKE2b-256 keyed by the cluster key over ("shoal-data-v1", peer,
 * digest, role), then the role byte. digest: the plan digest for the
 * cluster's roles (runtime/node/serve_links.c), the model id for
 * SHOAL_WEIGHTS_ROLE. */
void shoal_weights_link_token(const shoal_key *key, const uint8_t peer[SHOAL_PEER_ID_LEN],
                              const uint8_t digest[SHOAL_DIGEST_BYTES], int role,
                              uint8_t out[SHOAL_LINK_TOKEN_LEN]);

/* ---- the server ---------------------------------------------------------- */

typedef struct shoal_weights_server shoal_weights_server;

/* Serve the model mapped by g (one shard) with digests mid; wc non-NULL
 * when g is a weights cache being filled (only its complete tensors are
 * served). All three are borrowed for the server's life. Starts a thread. */
shoal_err shoal_weights_server_new(const shoal_gguf *g, const shoal_model_id *mid, shoal_wcache *wc,
                                   shoal_weights_server **out, char *why, size_t why_len);
/* Joins the thread and closes its links; NULL is a no-op. */
void shoal_weights_server_free(shoal_weights_server *s);
/* A new admitted WEIGHTS link: the server's from now on (any thread). */
void shoal_weights_server_add(shoal_weights_server *s, shoal_xfer_link *k);

/* ---- the fetcher --------------------------------------------------------- */

/* A peer that may hold the bytes. */
typedef struct shoal_weights_src {
	uint8_t id[SHOAL_PEER_ID_LEN];
	char name[64];
	char host[64];
	uint16_t port;
} shoal_weights_src;

/* The data endpoint of record r to dial, preferring one whose kind
 * (loopback or not) matches want_lo: loopback talks to loopback. False
 * when none parses. */
bool shoal_weights_pick_ep(const shoal_record *r, bool want_lo, char host[64], uint16_t *port);

typedef struct shoal_weights_config {
	uint8_t self[SHOAL_PEER_ID_LEN];
	shoal_key key; /* zero: insecure */
	uint8_t model_id[SHOAL_MODEL_ID_BYTES];
	const char *dir;    /* the cache folder (copied) */
	uint64_t cache_max; /* bytes the folder may hold (eviction bound) */
	bool tty;           /* draw a progress bar on stderr, else log lines */
} shoal_weights_config;

typedef struct shoal_weights_progress {
	bool running;
	bool failed;          /* the last job failed (why says why) */
	uint64_t done, total; /* bytes of the job */
	uint64_t fetched;     /* bytes received and verified by every job */
	uint32_t tensors_done, tensors_total;
	uint32_t refetched; /* chunks that failed their check and came again */
	double mb_s;        /* the job's rate so far */
	char peer[64];      /* the peer the bytes come from now */
	char why[SHOAL_WHY_LEN];
} shoal_weights_progress;

typedef struct shoal_weights_fetcher shoal_weights_fetcher;

shoal_err shoal_weights_fetcher_new(const shoal_weights_config *cfg, shoal_weights_fetcher **out);
void shoal_weights_fetcher_free(shoal_weights_fetcher *f); /* joins a running job */

/* Start a job on the fetcher's thread (one at a time: SHOAL_ERR_BUSY while
 * one runs). wc NULL: learn the header and digests from one of src[n] and
 * make the cache (shoal_weights_take_cache). Else fetch tensors[nt] of wc
 * (borrowed until the job ends) not yet complete, trying the sources in
 * turn. src is copied. */
shoal_err shoal_weights_start(shoal_weights_fetcher *f, const shoal_weights_src *src, size_t n,
                              shoal_wcache *wc, const uint32_t *tensors, size_t nt);
/* 0 while a job runs (or none started), 1 when the last one succeeded,
 * -1 when it failed. */
int shoal_weights_poll(shoal_weights_fetcher *f);
/* The cache a header job made (the caller's now), or NULL. */
shoal_wcache *shoal_weights_take_cache(shoal_weights_fetcher *f);
void shoal_weights_get_progress(shoal_weights_fetcher *f, shoal_weights_progress *p);
/* {"running", "failed", "why", "bytes_done", "bytes_total", "bytes_fetched",
 *  "tensors_done", "tensors_total", "refetched_chunks", "mb_s", "peer"}
 * (new reference, NULL when out of memory). */
json_t *shoal_weights_progress_json(const shoal_weights_progress *p);

#endif
