/*
 * runtime/node/weights_serve.c: the server half of runtime/node/weights.h
 * (a thread that answers WEIGHTS links from the mapped model), and what
 * both halves share: the admission token and the choice of endpoint.
 *
 * Divisions: shared; the server thread; new/free.
 */
#include "config.h"

#include "runtime/node/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "base/log.h"

/* Links one server holds: a fetcher keeps one open per job, so a handful
 * of joiners at once; more wait for the accept thread's next hand-over. */
#define WS_MAX_LINKS 16

/* ---- shared --------------------------------------------------------------- */

void shoal_weights_link_token(const shoal_key *key, const uint8_t peer[SHOAL_PEER_ID_LEN],
                              const uint8_t digest[SHOAL_DIGEST_BYTES], int role,
                              uint8_t out[SHOAL_LINK_TOKEN_LEN])
{
	static const char label[] = "shoal-data-v1";
	uint8_t r = (uint8_t)role;
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, key->bytes, sizeof key->bytes, 32);
	crypto_generichash_update(&hs, (const uint8_t *)label, sizeof label - 1);
	crypto_generichash_update(&hs, peer, 16);
	crypto_generichash_update(&hs, digest, 32);
	crypto_generichash_update(&hs, &r, 1);
	crypto_generichash_final(&hs, out, 32);
	out[SHOAL_LINK_TOKEN_ROLE] = r;
}

bool shoal_weights_pick_ep(const shoal_record *r, bool want_lo, char host[64], uint16_t *port)
{
	int pick = -1;
	for (uint32_t k = 0; k < r->n_data_ep && pick < 0; k++)
		if ((strncmp(r->data_ep[k].addr, "tcp://127.", 10) == 0) == want_lo)
			pick = (int)k;
	if (pick < 0 && r->n_data_ep)
		pick = 0;
	if (pick < 0)
		return false;
	const char *a =
	    r->data_ep[pick].addr + (strncmp(r->data_ep[pick].addr, "tcp://", 6) ? 0 : 6);
	const char *colon = strrchr(a, ':');
	if (!colon || colon - a >= 64)
		return false;
	memcpy(host, a, (size_t)(colon - a));
	host[colon - a] = '\0';
	*port = (uint16_t)atoi(colon + 1);
	return true;
}

/* ---- the server thread ---------------------------------------------------- */

struct shoal_weights_server {
	const shoal_gguf *g;
	const shoal_model_id *mid;
	shoal_wcache *wc;
	uint64_t header_len;
	uint64_t meta_len;   /* header || digests */
	uint8_t *scratch;    /* (SHOAL_WEIGHTS_CHUNK): a META piece or a corrupted chunk */
	uint64_t corrupt_at; /* SHOAL_TEST_CORRUPT_CHUNK (test hooks only): 0 none */
	uint64_t chunks;     /* tensor chunks sent */
	pthread_mutex_t mu;
	bool mu_ok;
	int stop;
	shoal_xfer_link *add[WS_MAX_LINKS]; /* handed over, under mu */
	size_t n_add;
	int wake[2];
	pthread_t thr;
	bool started;
};

static void ws_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t ws_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ws_get64(const uint8_t *p)
{
	return (uint64_t)ws_get32(p) | (uint64_t)ws_get32(p + 4) << 32;
}

static shoal_err ws_send(shoal_weights_server *s, shoal_xfer_link *k, uint32_t op,
                         const struct iovec *iov, int n)
{
	shoal_xfer_hdr h = {
	    .kind = SHOAL_XFER_KIND_WEIGHTS, .dtype = SHOAL_XFER_DTYPE_U8, .n_aux = op};
	memcpy(h.digest, shoal_model_id_digest(s->mid), SHOAL_MODEL_ID_BYTES);
	char why[SHOAL_WHY_LEN];
	shoal_err e = shoal_xfer_link_send(k, &h, iov, n, 10000, why, sizeof why);
	if (e)
		SHOAL_LOG_W("weights", "reply not sent: %s", why);
	return e;
}

static shoal_err ws_err(shoal_weights_server *s, shoal_xfer_link *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static shoal_err ws_err(shoal_weights_server *s, shoal_xfer_link *k, const char *fmt, ...)
{
	char r[SHOAL_XFER_REASON_MAX + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r, sizeof r, fmt, ap);
	va_end(ap);
	struct iovec v = {.iov_base = r, .iov_len = strlen(r)};
	return ws_send(s, k, SHOAL_WEIGHTS_OP_ERR, &v, 1);
}

/* One request frame f on link k (invariant 1: one reply). */
static shoal_err ws_handle(shoal_weights_server *s, shoal_xfer_link *k, const shoal_xfer_frame *f)
{
	if (f->hdr.kind != SHOAL_XFER_KIND_WEIGHTS)
		return ws_err(s, k, "a %s frame on a weights link",
		              shoal_xfer_kind_name(f->hdr.kind));
	if (sodium_memcmp(f->hdr.digest, shoal_model_id_digest(s->mid), SHOAL_MODEL_ID_BYTES) != 0)
		return ws_err(s, k, "this peer serves another model id");
	if (f->hdr.n_aux == SHOAL_WEIGHTS_OP_INFO && shoal_gguf_n_shards(s->g) != 1)
		return ws_err(s, k, "a split model: its bytes are not served to peers yet");
	if (f->hdr.n_aux == SHOAL_WEIGHTS_OP_INFO) {
		uint8_t b[24];
		ws_put64(b, shoal_gguf_shard_size(s->g, 0));
		ws_put64(b + 8, s->header_len);
		ws_put64(b + 16, shoal_model_id_n_tensors(s->mid));
		struct iovec v = {.iov_base = b, .iov_len = sizeof b};
		return ws_send(s, k, SHOAL_WEIGHTS_OP_INFO, &v, 1);
	}
	if (f->hdr.n_aux != SHOAL_WEIGHTS_OP_READ || f->hdr.payload_len != 16)
		return ws_err(s, k, "bad weights request (op %u, %u bytes)", f->hdr.n_aux,
		              f->hdr.payload_len);
	uint32_t what = ws_get32(f->payload), len = ws_get32(f->payload + 4);
	uint64_t off = ws_get64(f->payload + 8);
	uint64_t size =
	    what == SHOAL_WEIGHTS_META ? s->meta_len : shoal_model_id_tensor_bytes(s->mid, what);
	if (len > SHOAL_WEIGHTS_CHUNK || off > size || len > size - off ||
	    (what != SHOAL_WEIGHTS_META && what >= shoal_model_id_n_tensors(s->mid)))
		return ws_err(s, k, "read of [%llu, +%u) outside item %u", (unsigned long long)off,
		              len, what);
	const uint8_t *data;
	if (what == SHOAL_WEIGHTS_META) {
		/* header bytes, then the digests: copied piece by piece */
		for (uint32_t i = 0; i < len; i++) {
			uint64_t at = off + i;
			s->scratch[i] =
			    at < s->header_len
			        ? ((const uint8_t *)shoal_gguf_shard_base(s->g, 0))[at]
			        : shoal_model_id_tensor_digest(
			              s->mid, (at - s->header_len) / 32)[(at - s->header_len) % 32];
		}
		data = s->scratch;
	} else {
		if (s->wc && !shoal_wcache_has(s->wc, what)) /* invariant 2 */
			return ws_err(s, k, "tensor %u is not held here yet", what);
		data = (const uint8_t *)shoal_gguf_tensor_at(s->g, what)->data + off;
	}
	uint8_t head[48];
	memcpy(head, f->payload, 16);
	crypto_generichash(head + 16, 32, data, len, NULL, 0);
#ifdef SHOAL_TEST_HOOKS
	if (what != SHOAL_WEIGHTS_META && ++s->chunks == s->corrupt_at && len) {
		memcpy(s->scratch, data, len);
		s->scratch[len / 2] ^= 0x5a;
		data = s->scratch;
		SHOAL_LOG_W("weights",
		            "test hook: chunk %llu (tensor %u at %llu) corrupted in transit",
		            (unsigned long long)s->chunks, what, (unsigned long long)off);
	}
#endif
	struct iovec v[2] = {{.iov_base = head, .iov_len = sizeof head},
	                     {.iov_base = (void *)data, .iov_len = len}};
	return ws_send(s, k, SHOAL_WEIGHTS_OP_READ, v, 2);
}

static void *ws_main(void *arg)
{
	shoal_weights_server *s = arg;
	shoal_xfer_link *in[WS_MAX_LINKS];
	size_t n_in = 0;
	for (;;) {
		pthread_mutex_lock(&s->mu);
		int stop = s->stop;
		for (size_t i = 0; i < s->n_add; i++) {
			if (n_in < WS_MAX_LINKS)
				in[n_in++] = s->add[i];
			else
				shoal_xfer_link_free(s->add[i]);
		}
		s->n_add = 0;
		pthread_mutex_unlock(&s->mu);
		if (stop)
			break;
		struct pollfd pf[1 + 3 * WS_MAX_LINKS];
		int np = 0;
		pf[np++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		for (size_t i = 0; i < n_in; i++)
			np += shoal_xfer_link_pollfds(in[i], pf + np, 3);
		poll(pf, (nfds_t)np, 200);
		char drain[64];
		while (read(s->wake[0], drain, sizeof drain) > 0)
			;
		for (size_t i = 0; i < n_in;) {
			shoal_xfer_frame f;
			char why[SHOAL_WHY_LEN] = "";
			shoal_err e;
			while ((e = shoal_xfer_link_recv(in[i], 0, &f, why, sizeof why)) ==
			           SHOAL_OK ||
			       e == SHOAL_ERR_FORMAT) {
				if (e == SHOAL_OK && f.hdr.kind == SHOAL_XFER_KIND_ERROR) {
					e = SHOAL_ERR_CLOSED; /* the fetcher's goodbye */
					break;
				}
				if (e == SHOAL_OK && ws_handle(s, in[i], &f) != SHOAL_OK) {
					e = SHOAL_ERR_IO;
					break;
				}
			}
			if (e != SHOAL_ERR_TIMEOUT) {
				SHOAL_LOG_D("weights", "weights link closed: %s", why);
				shoal_xfer_link_free(in[i]);
				in[i] = in[--n_in];
			} else {
				i++;
			}
		}
	}
	for (size_t i = 0; i < n_in; i++) {
		shoal_xfer_link_bye(in[i], "the peer stops");
		shoal_xfer_link_free(in[i]);
	}
	return NULL;
}

/* ---- new/free ------------------------------------------------------------- */

shoal_err shoal_weights_server_new(const shoal_gguf *g, const shoal_model_id *mid, shoal_wcache *wc,
                                   shoal_weights_server **out, char *why, size_t why_len)
{
	*out = NULL;
	shoal_weights_server *s = calloc(1, sizeof *s);
	if (!s)
		return SHOAL_ERR_NOMEM;
	s->wake[0] = s->wake[1] = -1;
	s->g = g;
	s->mid = mid;
	s->wc = wc;
	s->header_len = shoal_gguf_shard_header_bytes(g, 0);
	s->meta_len = s->header_len + 32u * (uint64_t)shoal_model_id_n_tensors(mid);
#ifdef SHOAL_TEST_HOOKS /* weights.h; --enable-test-hooks */
	const char *hook = getenv("SHOAL_TEST_CORRUPT_CHUNK");
	if (hook && *hook)
		s->corrupt_at = strtoull(hook, NULL, 10);
#endif
	shoal_err e = SHOAL_OK;
	if (!(s->scratch = malloc(SHOAL_WEIGHTS_CHUNK))) {
		e = SHOAL_ERR_NOMEM;
		goto fail;
	}
	if (pthread_mutex_init(&s->mu, NULL) != 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot make a mutex");
		goto fail;
	}
	s->mu_ok = true;
	if (pipe(s->wake) != 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "pipe: %s", strerror(errno));
		goto fail;
	}
	for (int i = 0; i < 2; i++) {
		fcntl(s->wake[i], F_SETFL, O_NONBLOCK);
		fcntl(s->wake[i], F_SETFD, FD_CLOEXEC);
	}
	if (pthread_create(&s->thr, NULL, ws_main, s) != 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the weights thread");
		goto fail;
	}
	s->started = true;
	*out = s;
	return SHOAL_OK;
fail:
	shoal_weights_server_free(s);
	return e;
}

void shoal_weights_server_free(shoal_weights_server *s)
{
	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		pthread_mutex_unlock(&s->mu);
		char c = 1;
		if (write(s->wake[1], &c, 1) < 0 && errno != EAGAIN)
			SHOAL_LOG_W("weights", "wake: %s", strerror(errno));
		pthread_join(s->thr, NULL);
	}
	for (size_t i = 0; i < s->n_add; i++)
		shoal_xfer_link_free(s->add[i]);
	for (int i = 0; i < 2; i++)
		if (s->wake[i] >= 0)
			close(s->wake[i]);
	if (s->mu_ok)
		pthread_mutex_destroy(&s->mu);
	free(s->scratch);
	free(s);
}

void shoal_weights_server_add(shoal_weights_server *s, shoal_xfer_link *k)
{
	pthread_mutex_lock(&s->mu);
	if (s->n_add < WS_MAX_LINKS) {
		s->add[s->n_add++] = k;
		k = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	shoal_xfer_link_free(k);
	char c = 1;
	if (write(s->wake[1], &c, 1) < 0 && errno != EAGAIN)
		SHOAL_LOG_W("weights", "wake: %s", strerror(errno));
}
