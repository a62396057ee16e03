/*
 * net/wire.c: the membership control-message codec (see net/wire.h).
 *
 * Divisions, in order:
 *   - output buffer and packing helpers
 *   - the structural pre-scan (bounds every length before msgpack-c runs)
 *   - field readers (typed, bounded, one reason per failure)
 *   - the record: encode / decode
 *   - messages: encode / decode
 *
 * Keys are short strings (one or two letters) to keep piggybacked updates
 * small; every one is listed next to the field it carries.
 */
#include "net/wire.h"
#include "net/xfer_frame.h"

#include <limits.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* ==== output buffer and packing helpers ================================ */

void shoal_wire_buf_init(shoal_wire_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void shoal_wire_buf_fini(shoal_wire_buf *b)
{
	free(b->data);
	shoal_wire_buf_init(b);
}

shoal_err shoal_wire_buf_reserve(shoal_wire_buf *b, size_t cap)
{
	if (cap <= b->cap)
		return SHOAL_OK;
	uint8_t *d = realloc(b->data, cap);
	if (!d)
		return SHOAL_ERR_NOMEM;
	b->data = d;
	b->cap = cap;
	return SHOAL_OK;
}

int shoal_wire_buf_write(void *data, const char *p, size_t n)
{
	shoal_wire_buf *b = data;
	if (n > SIZE_MAX / 2 - b->len)
		return -1;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d)
			return -1;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

static int pack_key(msgpack_packer *pk, const char *k)
{
	return msgpack_pack_str_with_body(pk, k, strlen(k));
}

static int pack_kstr(msgpack_packer *pk, const char *k, const char *v)
{
	return pack_key(pk, k) | msgpack_pack_str_with_body(pk, v, strlen(v));
}

static int pack_ku64(msgpack_packer *pk, const char *k, uint64_t v)
{
	return pack_key(pk, k) | msgpack_pack_uint64(pk, v);
}

static int pack_kbin(msgpack_packer *pk, const char *k, const void *p, size_t n)
{
	return pack_key(pk, k) | msgpack_pack_bin_with_body(pk, p, n);
}

/* ==== the structural pre-scan ========================================== */

/* msgpack-c allocates an array's or map's elements as soon as it reads the
 * count, so a 6-byte message declaring 2^32 elements would ask for ~100 GB.
 * Walking the bytes first and requiring each declared element to have at
 * least one byte left bounds every allocation by 24 * len. */
shoal_err shoal_wire_prescan(const uint8_t *buf, size_t len, unsigned max_depth, char *why,
                             size_t why_len)
{
	uint64_t left[SHOAL_WIRE_MAX_DEPTH + 1]; /* objects still due at each level */
	unsigned depth = 0;
	size_t off = 0;
	if (max_depth > SHOAL_WIRE_MAX_DEPTH)
		max_depth = SHOAL_WIRE_MAX_DEPTH;
	left[0] = 1;
	for (;;) {
		while (depth > 0 && left[depth] == 0)
			depth--;
		if (depth == 0 && left[0] == 0)
			break;
		left[depth]--;
		if (off >= len)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "truncated at byte %zu",
			                 off);
		uint8_t b = buf[off++];
		size_t need = 0;   /* payload bytes that follow */
		uint64_t kids = 0; /* nested objects that follow */
		int container = 0;
		size_t lenb = 0; /* bytes of a big-endian length field */
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
			need = 0;
		} else if (b >= 0x80 && b <= 0x8f) {
			kids = 2u * (b & 0x0f), container = 1;
		} else if (b >= 0x90 && b <= 0x9f) {
			kids = b & 0x0f, container = 1;
		} else if (b >= 0xa0 && b <= 0xbf) {
			need = b & 0x1f;
		} else {
			switch (b) {
			case 0xc4: /* bin8 */
			case 0xd9: /* str8 */
				lenb = 1;
				break;
			case 0xc5: /* bin16 */
			case 0xda: /* str16 */
				lenb = 2;
				break;
			case 0xc6: /* bin32 */
			case 0xdb: /* str32 */
				lenb = 4;
				break;
			case 0xcc: /* uint8 */
			case 0xd0: /* int8 */
				need = 1;
				break;
			case 0xcd: /* uint16 */
			case 0xd1: /* int16 */
				need = 2;
				break;
			case 0xca: /* float32 */
			case 0xce: /* uint32 */
			case 0xd2: /* int32 */
				need = 4;
				break;
			case 0xcb: /* float64 */
			case 0xcf: /* uint64 */
			case 0xd3: /* int64 */
				need = 8;
				break;
			case 0xdc: /* array16 */
			case 0xde: /* map16 */
				lenb = 2, container = 1;
				break;
			case 0xdd: /* array32 */
			case 0xdf: /* map32 */
				lenb = 4, container = 1;
				break;
			default: /* 0xc1 (never used) and the ext family: we send no ext */
				return shoal_why(
				    why, why_len, SHOAL_ERR_FORMAT,
				    "msgpack type byte 0x%02x not accepted at byte %zu", b,
				    off - 1);
			}
			if (lenb) {
				if (len - off < lenb)
					return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
					                 "truncated length at byte %zu", off);
				uint64_t n = 0;
				for (size_t i = 0; i < lenb; i++)
					n = n << 8 | buf[off + i];
				off += lenb;
				if (container)
					kids = (b == 0xde || b == 0xdf) ? 2 * n : n;
				else
					need = (size_t)n;
			}
		}
		if (need > len - off)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "declared length %zu exceeds the %zu bytes left", need,
			                 len - off);
		off += need;
		if (container && kids) {
			if (kids > len - off)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "declared count %llu exceeds the %zu bytes left",
				                 (unsigned long long)kids, len - off);
			if (depth + 1 > max_depth)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "nested deeper than %u", max_depth);
			left[++depth] = kids;
		}
	}
	if (off != len)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%zu trailing bytes", len - off);
	return SHOAL_OK;
}

/* Pre-scan, then let msgpack-c build the object tree. */
static shoal_err unpack(const uint8_t *buf, size_t len, msgpack_unpacked *u, char *why,
                        size_t why_len)
{
	shoal_err e = shoal_wire_prescan(buf, len, SHOAL_WIRE_MAX_DEPTH, why, why_len);
	if (e)
		return e;
	size_t off = 0;
	msgpack_unpack_return r = msgpack_unpack_next(u, (const char *)buf, len, &off);
	if (r != MSGPACK_UNPACK_SUCCESS || off != len)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "msgpack decode failed (%d)",
		                 (int)r);
	if (u->data.type != MSGPACK_OBJECT_MAP)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "top level is not a map");
	return SHOAL_OK;
}

/* ==== field readers ===================================================== */

/* The value of key k in map m, or NULL. */
static const msgpack_object *map_get(const msgpack_object *m, const char *k)
{
	size_t kl = strlen(k);
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *key = &m->via.map.ptr[i].key;
		if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == kl &&
		    !memcmp(key->via.str.ptr, k, kl))
			return &m->via.map.ptr[i].val;
	}
	return NULL;
}

/* Each reader: required (absent is an error) or optional (absent leaves
 * *out untouched). `what` names the containing object in the reason. */
static shoal_err get_u64(const msgpack_object *m, const char *k, int required, uint64_t max,
                         uint64_t *out, const char *what, char *why, size_t why_len)
{
	const msgpack_object *v = map_get(m, k);
	if (!v)
		return required ? shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: missing \"%s\"",
		                            what, k)
		                : SHOAL_OK;
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"%s\" is not an unsigned integer", what, k);
	if (v->via.u64 > max)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" = %llu exceeds %llu",
		                 what, k, (unsigned long long)v->via.u64, (unsigned long long)max);
	*out = v->via.u64;
	return SHOAL_OK;
}

static shoal_err get_u32(const msgpack_object *m, const char *k, int required, uint32_t max,
                         uint32_t *out, const char *what, char *why, size_t why_len)
{
	uint64_t v = *out;
	shoal_err e = get_u64(m, k, required, max, &v, what, why, why_len);
	if (!e)
		*out = (uint32_t)v;
	return e;
}

/* A string into dst[cap]: must fit with its NUL and contain no NUL. */
static shoal_err str_into(const msgpack_object *v, char *dst, size_t cap, const char *k,
                          const char *what, char *why, size_t why_len)
{
	if (v->type != MSGPACK_OBJECT_STR)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" is not a string", what,
		                 k);
	if (v->via.str.size >= cap)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"%s\" is %u bytes, at most %zu", what, k, v->via.str.size,
		                 cap - 1);
	if (memchr(v->via.str.ptr, 0, v->via.str.size))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" contains a NUL", what,
		                 k);
	memcpy(dst, v->via.str.ptr, v->via.str.size);
	dst[v->via.str.size] = 0;
	return SHOAL_OK;
}

static shoal_err get_str(const msgpack_object *m, const char *k, int required, char *dst,
                         size_t cap, const char *what, char *why, size_t why_len)
{
	const msgpack_object *v = map_get(m, k);
	if (!v)
		return required ? shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: missing \"%s\"",
		                            what, k)
		                : SHOAL_OK;
	return str_into(v, dst, cap, k, what, why, why_len);
}

/* A bin of exactly n bytes. */
static shoal_err get_fixbin(const msgpack_object *m, const char *k, int required, void *dst,
                            size_t n, const char *what, char *why, size_t why_len)
{
	const msgpack_object *v = map_get(m, k);
	if (!v)
		return required ? shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: missing \"%s\"",
		                            what, k)
		                : SHOAL_OK;
	if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != n)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" is not a %zu-byte bin",
		                 what, k, n);
	memcpy(dst, v->via.bin.ptr, n);
	return SHOAL_OK;
}

/* An optional array of at most max maps or strings; *arr NULL if absent. */
static shoal_err get_array(const msgpack_object *m, const char *k, uint32_t max,
                           msgpack_object_type elem, const msgpack_object **arr, uint32_t *n,
                           const char *what, char *why, size_t why_len)
{
	const msgpack_object *v = map_get(m, k);
	*arr = NULL;
	*n = 0;
	if (!v)
		return SHOAL_OK;
	if (v->type != MSGPACK_OBJECT_ARRAY)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" is not an array", what,
		                 k);
	if (v->via.array.size > max)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"%s\" has %u entries, at most %u", what, k,
		                 v->via.array.size, max);
	for (uint32_t i = 0; i < v->via.array.size; i++)
		if (v->via.array.ptr[i].type != elem)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: \"%s\"[%u] has the wrong type", what, k, i);
	*arr = v->via.array.ptr;
	*n = v->via.array.size;
	return SHOAL_OK;
}

#define TRY(x)                                                                                     \
	do {                                                                                       \
		shoal_err e_ = (x);                                                                \
		if (e_)                                                                            \
			return e_;                                                                 \
	} while (0)

/* ==== the record ========================================================= */

/* Record keys: id name ver cl sw pv sv ctl | dep:[{k if a r}] | mt mw cmb cmf
 * co os ar rd:[str] | mo:[{d p b}] | ld | ln:[{p le re rtt bw}] | srv rdd rde
 * sve dsu:[bin] (serving, ready digest and epoch, served epoch, data suspects:
 * optional, absent from older peers) | dv:[{b n k u s m r f}] (devices:
 * backend, name, kind, unified, software, memory, MB/s, MFLOP/s; absent from
 * older peers: one CPU device then) | dl:[{p rtt bw}] (data links as probed:
 * round trip, bandwidth; absent from older peers: none) | mtp (it drafts
 * with the MTP layer; absent from older peers: 0). */
shoal_err shoal_wire_record_encode(const shoal_record *r, shoal_wire_buf *b)
{
	msgpack_packer pk;
	int rc = 0;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	rc |= msgpack_pack_map(&pk, 28);
	rc |= pack_kbin(&pk, "id", r->id.b, SHOAL_PEER_ID_LEN);
	rc |= pack_kstr(&pk, "name", r->name);
	rc |= pack_ku64(&pk, "ver", r->version);
	rc |= pack_kstr(&pk, "cl", r->cluster);
	rc |= pack_kstr(&pk, "sw", r->sw_version);
	rc |= pack_ku64(&pk, "pv", r->proto_version);
	rc |= pack_ku64(&pk, "sv", r->sched_version);
	rc |= pack_kstr(&pk, "ctl", r->ctl_endpoint);
	rc |= pack_key(&pk, "dep") | msgpack_pack_array(&pk, r->n_data_ep);
	for (uint32_t i = 0; i < r->n_data_ep; i++) {
		const shoal_record_endpoint *d = &r->data_ep[i];
		rc |= msgpack_pack_map(&pk, 4);
		rc |= pack_kstr(&pk, "k", d->kind) | pack_kstr(&pk, "if", d->ifname);
		rc |= pack_kstr(&pk, "a", d->addr) | pack_ku64(&pk, "r", d->rdma);
	}
	rc |= pack_ku64(&pk, "mt", r->mem_total);
	rc |= pack_ku64(&pk, "mw", r->mem_weights);
	rc |= pack_ku64(&pk, "cmb", r->compute_mb_s);
	rc |= pack_ku64(&pk, "cmf", r->compute_mflops);
	rc |= pack_ku64(&pk, "co", r->cores);
	rc |= pack_kstr(&pk, "os", r->os);
	rc |= pack_kstr(&pk, "ar", r->arch);
	rc |= pack_key(&pk, "rd") | msgpack_pack_array(&pk, r->n_rdma);
	for (uint32_t i = 0; i < r->n_rdma; i++)
		rc |= msgpack_pack_str_with_body(&pk, r->rdma[i], strlen(r->rdma[i]));
	rc |= pack_key(&pk, "mo") | msgpack_pack_array(&pk, r->n_models);
	for (uint32_t i = 0; i < r->n_models; i++) {
		const shoal_record_model *mo = &r->models[i];
		rc |= msgpack_pack_map(&pk, 3);
		rc |= pack_kbin(&pk, "d", mo->digest, SHOAL_MODEL_DIGEST_LEN);
		rc |= pack_kstr(&pk, "p", mo->path) | pack_ku64(&pk, "b", mo->bytes);
	}
	rc |= pack_ku64(&pk, "ld", r->load_permille);
	rc |= pack_key(&pk, "ln") | msgpack_pack_array(&pk, r->n_links);
	for (uint32_t i = 0; i < r->n_links; i++) {
		const shoal_record_link *l = &r->links[i];
		rc |= msgpack_pack_map(&pk, 5);
		rc |= pack_kbin(&pk, "p", l->peer.b, SHOAL_PEER_ID_LEN);
		rc |= pack_ku64(&pk, "le", l->local_ep) | pack_ku64(&pk, "re", l->remote_ep);
		rc |= pack_ku64(&pk, "rtt", l->rtt_us) | pack_ku64(&pk, "bw", l->bw_bytes_s);
	}
	rc |= pack_ku64(&pk, "srv", r->serving);
	rc |= pack_kbin(&pk, "rdd", r->ready_digest, SHOAL_MODEL_DIGEST_LEN);
	rc |= pack_ku64(&pk, "rde", r->ready_epoch);
	rc |= pack_ku64(&pk, "sve", r->served_epoch);
	rc |= pack_key(&pk, "dsu") | msgpack_pack_array(&pk, r->n_dsuspect);
	for (uint32_t i = 0; i < r->n_dsuspect; i++)
		rc |= msgpack_pack_bin_with_body(&pk, r->dsuspect[i].b, SHOAL_PEER_ID_LEN);
	rc |= pack_key(&pk, "dv") | msgpack_pack_array(&pk, r->n_devices);
	for (uint32_t i = 0; i < r->n_devices; i++) {
		const shoal_record_device *d = &r->devices[i];
		rc |= msgpack_pack_map(&pk, 8);
		rc |= pack_kstr(&pk, "b", d->backend) | pack_kstr(&pk, "n", d->name);
		rc |= pack_ku64(&pk, "k", d->kind) | pack_ku64(&pk, "u", d->unified);
		rc |= pack_ku64(&pk, "s", d->software) | pack_ku64(&pk, "m", d->mem_bytes);
		rc |= pack_ku64(&pk, "r", d->read_mb_s) | pack_ku64(&pk, "f", d->mflops);
	}
	rc |= pack_key(&pk, "dl") | msgpack_pack_array(&pk, r->n_dlinks);
	for (uint32_t i = 0; i < r->n_dlinks; i++) {
		rc |= msgpack_pack_map(&pk, 3);
		rc |= pack_kbin(&pk, "p", r->dlinks[i].peer.b, SHOAL_PEER_ID_LEN);
		rc |= pack_ku64(&pk, "rtt", r->dlinks[i].rtt_us);
		rc |= pack_ku64(&pk, "bw", r->dlinks[i].bw_bytes_s);
	}
	rc |= pack_ku64(&pk, "mtp", r->spec_mtp);
	return rc ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

/* The devices ("dv"); a peer that predates the list has one CPU device,
 * made of what it published of its CPU: its memory offer and the compute
 * probe's figures. */
static shoal_err record_devices(const msgpack_object *o, shoal_record *r, char *why, size_t why_len)
{
	const msgpack_object *a;
	uint32_t n;
	if (!map_get(o, "dv")) {
		shoal_record_device *d = &r->devices[0];
		memset(d, 0, sizeof *d);
		shoal_record_strcpy(d->backend, sizeof d->backend, "cpu");
		shoal_record_strcpy(d->name, sizeof d->name, "cpu");
		d->kind = SHOAL_RECORD_DEVICE_CPU;
		d->mem_bytes = r->mem_weights;
		d->read_mb_s = r->compute_mb_s;
		d->mflops = r->compute_mflops;
		r->n_devices = 1;
		return SHOAL_OK;
	}
	TRY(get_array(o, "dv", SHOAL_RECORD_MAX_DEVICES, MSGPACK_OBJECT_MAP, &a, &n, "record", why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		shoal_record_device *d = &r->devices[i];
		const char *dw = "record device";
		TRY(get_str(&a[i], "b", 1, d->backend, sizeof d->backend, dw, why, why_len));
		TRY(get_str(&a[i], "n", 0, d->name, sizeof d->name, dw, why, why_len));
		TRY(get_u32(&a[i], "k", 1, SHOAL_RECORD_DEVICE_GPU, &d->kind, dw, why, why_len));
		TRY(get_u32(&a[i], "u", 0, 1, &d->unified, dw, why, why_len));
		TRY(get_u32(&a[i], "s", 0, 1, &d->software, dw, why, why_len));
		TRY(get_u64(&a[i], "m", 0, UINT64_MAX, &d->mem_bytes, dw, why, why_len));
		TRY(get_u64(&a[i], "r", 0, UINT64_MAX, &d->read_mb_s, dw, why, why_len));
		TRY(get_u64(&a[i], "f", 0, UINT64_MAX, &d->mflops, dw, why, why_len));
	}
	r->n_devices = n;
	return SHOAL_OK;
}

static shoal_err record_from_obj(const msgpack_object *o, shoal_record *r, char *why,
                                 size_t why_len)
{
	const char *w = "record";
	const msgpack_object *a;
	uint32_t n;
	shoal_record_init(r);
	TRY(get_fixbin(o, "id", 1, r->id.b, SHOAL_PEER_ID_LEN, w, why, why_len));
	TRY(get_str(o, "name", 1, r->name, sizeof r->name, w, why, why_len));
	TRY(get_u64(o, "ver", 1, UINT64_MAX, &r->version, w, why, why_len));
	TRY(get_str(o, "cl", 0, r->cluster, sizeof r->cluster, w, why, why_len));
	TRY(get_str(o, "sw", 0, r->sw_version, sizeof r->sw_version, w, why, why_len));
	TRY(get_u32(o, "pv", 1, UINT32_MAX, &r->proto_version, w, why, why_len));
	TRY(get_u32(o, "sv", 1, UINT32_MAX, &r->sched_version, w, why, why_len));
	TRY(get_str(o, "ctl", 1, r->ctl_endpoint, sizeof r->ctl_endpoint, w, why, why_len));
	TRY(get_array(o, "dep", SHOAL_RECORD_MAX_DATA_EP, MSGPACK_OBJECT_MAP, &a, &n, w, why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		shoal_record_endpoint *d = &r->data_ep[i];
		const char *dw = "record data endpoint";
		TRY(get_str(&a[i], "k", 0, d->kind, sizeof d->kind, dw, why, why_len));
		TRY(get_str(&a[i], "if", 0, d->ifname, sizeof d->ifname, dw, why, why_len));
		TRY(get_str(&a[i], "a", 1, d->addr, sizeof d->addr, dw, why, why_len));
		TRY(get_u32(&a[i], "r", 0, 1, &d->rdma, dw, why, why_len));
	}
	r->n_data_ep = n;
	TRY(get_u64(o, "mt", 0, UINT64_MAX, &r->mem_total, w, why, why_len));
	TRY(get_u64(o, "mw", 0, UINT64_MAX, &r->mem_weights, w, why, why_len));
	TRY(get_u64(o, "cmb", 0, UINT64_MAX, &r->compute_mb_s, w, why, why_len));
	TRY(get_u64(o, "cmf", 0, UINT64_MAX, &r->compute_mflops, w, why, why_len));
	TRY(get_u32(o, "co", 0, UINT32_MAX, &r->cores, w, why, why_len));
	TRY(get_str(o, "os", 0, r->os, sizeof r->os, w, why, why_len));
	TRY(get_str(o, "ar", 0, r->arch, sizeof r->arch, w, why, why_len));
	TRY(get_array(o, "rd", SHOAL_RECORD_MAX_RDMA, MSGPACK_OBJECT_STR, &a, &n, w, why, why_len));
	for (uint32_t i = 0; i < n; i++)
		TRY(str_into(&a[i], r->rdma[i], sizeof r->rdma[i], "rd", w, why, why_len));
	r->n_rdma = n;
	TRY(get_array(o, "mo", SHOAL_RECORD_MAX_MODELS, MSGPACK_OBJECT_MAP, &a, &n, w, why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		shoal_record_model *mo = &r->models[i];
		const char *mw = "record model";
		TRY(get_fixbin(&a[i], "d", 1, mo->digest, SHOAL_MODEL_DIGEST_LEN, mw, why,
		               why_len));
		TRY(get_str(&a[i], "p", 0, mo->path, sizeof mo->path, mw, why, why_len));
		TRY(get_u64(&a[i], "b", 0, UINT64_MAX, &mo->bytes, mw, why, why_len));
	}
	r->n_models = n;
	TRY(get_u32(o, "ld", 0, UINT32_MAX, &r->load_permille, w, why, why_len));
	TRY(get_array(o, "ln", SHOAL_RECORD_MAX_LINKS, MSGPACK_OBJECT_MAP, &a, &n, w, why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		shoal_record_link *l = &r->links[i];
		const char *lw = "record link";
		uint32_t le = 0, re = 0;
		TRY(get_fixbin(&a[i], "p", 1, l->peer.b, SHOAL_PEER_ID_LEN, lw, why, why_len));
		TRY(get_u32(&a[i], "le", 0, SHOAL_RECORD_MAX_DATA_EP - 1, &le, lw, why, why_len));
		TRY(get_u32(&a[i], "re", 0, SHOAL_RECORD_MAX_DATA_EP - 1, &re, lw, why, why_len));
		l->local_ep = (uint8_t)le;
		l->remote_ep = (uint8_t)re;
		TRY(get_u32(&a[i], "rtt", 0, UINT32_MAX, &l->rtt_us, lw, why, why_len));
		TRY(get_u64(&a[i], "bw", 0, UINT64_MAX, &l->bw_bytes_s, lw, why, why_len));
	}
	r->n_links = n;
	TRY(get_u32(o, "srv", 0, 1, &r->serving, w, why, why_len));
	TRY(get_fixbin(o, "rdd", 0, r->ready_digest, SHOAL_MODEL_DIGEST_LEN, w, why, why_len));
	TRY(get_u64(o, "rde", 0, UINT64_MAX, &r->ready_epoch, w, why, why_len));
	TRY(get_u64(o, "sve", 0, UINT64_MAX, &r->served_epoch, w, why, why_len));
	TRY(get_array(o, "dsu", SHOAL_RECORD_MAX_DSUSPECT, MSGPACK_OBJECT_BIN, &a, &n, w, why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		if (a[i].via.bin.size != SHOAL_PEER_ID_LEN)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: \"dsu\"[%u] is no peer id", w, i);
		memcpy(r->dsuspect[i].b, a[i].via.bin.ptr, SHOAL_PEER_ID_LEN);
	}
	r->n_dsuspect = n;
	TRY(record_devices(o, r, why, why_len));
	TRY(get_array(o, "dl", SHOAL_RECORD_MAX_DLINKS, MSGPACK_OBJECT_MAP, &a, &n, w, why,
	              why_len));
	for (uint32_t i = 0; i < n; i++) {
		const char *dw = "record data link";
		TRY(get_fixbin(&a[i], "p", 1, r->dlinks[i].peer.b, SHOAL_PEER_ID_LEN, dw, why,
		               why_len));
		TRY(get_u32(&a[i], "rtt", 1, UINT32_MAX, &r->dlinks[i].rtt_us, dw, why, why_len));
		TRY(get_u64(&a[i], "bw", 0, UINT64_MAX, &r->dlinks[i].bw_bytes_s, dw, why,
		            why_len));
	}
	r->n_dlinks = n;
	TRY(get_u32(o, "mtp", 0, 1, &r->spec_mtp, w, why, why_len));
	return shoal_record_check(r, why, why_len);
}

shoal_err shoal_wire_record_decode(const uint8_t *buf, size_t len, shoal_record *out, char *why,
                                   size_t why_len)
{
	msgpack_unpacked u;
	shoal_err e;
	if (len > SHOAL_WIRE_MAX_RECORD)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "record of %zu bytes, at most %u",
		                 len, SHOAL_WIRE_MAX_RECORD);
	msgpack_unpacked_init(&u);
	e = unpack(buf, len, &u, why, why_len);
	if (!e)
		e = record_from_obj(&u.data, out, why, why_len);
	msgpack_unpacked_destroy(&u);
	return e;
}

/* ==== messages ========================================================== */

/* Message keys: t v f e | s g ge (probes) | r (push-pull) | u:[{i s n r d}].
 * Update keys: i id, s state, n incarnation, r record version, d record. */
/* The message check (wire.h): CRC-32C of the len bytes at p with the last
 * 4 (the value of "k") taken as zeros. */
static uint32_t wire_check(const uint8_t *p, size_t len)
{
	static const uint8_t zero[4];
	return shoal_xfer_crc32c(shoal_xfer_crc32c(0, p, len - 4), zero, 4);
}

/* Whether buf ends in the check's key and a 4-byte uint32. */
static int wire_has_check(const uint8_t *buf, size_t len)
{
	return len >= 7 && buf[len - 7] == 0xa1 && buf[len - 6] == 'k' && buf[len - 5] == 0xce;
}

shoal_err shoal_wire_encode(const shoal_wire_msg *m, shoal_wire_buf *b)
{
	msgpack_packer pk;
	int rc = 0;
	int probe = m->type != SHOAL_WIRE_PUSHPULL;
	int preq = m->type == SHOAL_WIRE_PING_REQ;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	rc |= msgpack_pack_map(&pk, 6 + (probe ? 2 : 1) + preq);
	rc |= pack_ku64(&pk, "t", m->type);
	rc |= pack_ku64(&pk, "v", SHOAL_WIRE_SCHEMA);
	rc |= pack_kbin(&pk, "f", m->from.b, SHOAL_PEER_ID_LEN);
	rc |= pack_kstr(&pk, "e", m->from_ep);
	if (probe) {
		rc |= pack_ku64(&pk, "s", m->seq);
		rc |= pack_kbin(&pk, "g", m->target.b, SHOAL_PEER_ID_LEN);
	} else {
		rc |= pack_ku64(&pk, "r", m->reply);
	}
	if (preq)
		rc |= pack_kstr(&pk, "ge", m->target_ep);
	rc |= pack_key(&pk, "u") | msgpack_pack_array(&pk, m->n_updates);
	for (size_t i = 0; i < m->n_updates; i++) {
		const shoal_wire_update *u = &m->updates[i];
		rc |= msgpack_pack_map(&pk, u->record ? 5 : 4);
		rc |= pack_kbin(&pk, "i", u->id.b, SHOAL_PEER_ID_LEN);
		rc |= pack_ku64(&pk, "s", u->state);
		rc |= pack_ku64(&pk, "n", u->incarnation);
		rc |= pack_ku64(&pk, "r", u->record_version);
		if (u->record)
			rc |= pack_kbin(&pk, "d", u->record, u->record_len);
	}
	/* the check, last: "k" and a 4-byte uint32 (filled below) */
	rc |= pack_key(&pk, "k") | msgpack_pack_fix_uint32(&pk, 0);
	if (rc)
		return SHOAL_ERR_NOMEM;
	uint32_t crc = wire_check(b->data, b->len);
	for (int i = 0; i < 4; i++)
		b->data[b->len - 1 - i] = (uint8_t)(crc >> (8 * i));
	return SHOAL_OK;
}

static shoal_err msg_from_obj(const msgpack_object *o, shoal_wire_msg *m, size_t cap, char *why,
                              size_t why_len)
{
	const char *w = "message";
	uint32_t v = 0;
	TRY(get_u32(o, "v", 1, UINT32_MAX, &v, w, why, why_len));
	if (v != SHOAL_WIRE_SCHEMA)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "schema version %u, we speak %u", v, SHOAL_WIRE_SCHEMA);
	TRY(get_u32(o, "t", 1, UINT32_MAX, &m->type, w, why, why_len));
	if (m->type < SHOAL_WIRE_PING || m->type > SHOAL_WIRE_PUSHPULL)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "unknown message type %u",
		                 m->type);
	TRY(get_fixbin(o, "f", 1, m->from.b, SHOAL_PEER_ID_LEN, w, why, why_len));
	TRY(get_str(o, "e", 1, m->from_ep, sizeof m->from_ep, w, why, why_len));
	if (m->type != SHOAL_WIRE_PUSHPULL) {
		TRY(get_u64(o, "s", 1, UINT64_MAX, &m->seq, w, why, why_len));
		TRY(get_fixbin(o, "g", 1, m->target.b, SHOAL_PEER_ID_LEN, w, why, why_len));
	} else {
		TRY(get_u32(o, "r", 1, 1, &m->reply, w, why, why_len));
	}
	if (m->type == SHOAL_WIRE_PING_REQ)
		TRY(get_str(o, "ge", 1, m->target_ep, sizeof m->target_ep, w, why, why_len));
	const msgpack_object *a;
	uint32_t n;
	TRY(get_array(o, "u", SHOAL_WIRE_MAX_UPDATES, MSGPACK_OBJECT_MAP, &a, &n, w, why, why_len));
	if (!a)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "message: missing \"u\"");
	if (n > cap)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "message: %u updates, room for %zu",
		                 n, cap);
	for (uint32_t i = 0; i < n; i++) {
		shoal_wire_update *u = &m->updates[i];
		const char *uw = "update";
		memset(u, 0, sizeof *u);
		TRY(get_fixbin(&a[i], "i", 1, u->id.b, SHOAL_PEER_ID_LEN, uw, why, why_len));
		TRY(get_u32(&a[i], "s", 1, 255, &u->state, uw, why, why_len));
		TRY(get_u64(&a[i], "n", 1, SHOAL_WIRE_INC_MAX, &u->incarnation, uw, why, why_len));
		TRY(get_u64(&a[i], "r", 1, UINT64_MAX, &u->record_version, uw, why, why_len));
		const msgpack_object *d = map_get(&a[i], "d");
		if (d) {
			if (d->type != MSGPACK_OBJECT_BIN || d->via.bin.size == 0 ||
			    d->via.bin.size > SHOAL_WIRE_MAX_RECORD)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "update: \"d\" is not a record bin");
			u->record = (const uint8_t *)d->via.bin.ptr;
			u->record_len = d->via.bin.size;
		}
	}
	m->n_updates = n;
	return SHOAL_OK;
}

shoal_err shoal_wire_decode(const uint8_t *buf, size_t len, shoal_wire_msg *m, size_t cap,
                            char *why, size_t why_len)
{
	msgpack_unpacked u;
	shoal_err e;
	shoal_wire_update *updates = m->updates;
	memset(m, 0, sizeof *m);
	m->updates = updates;
	if (len > SHOAL_WIRE_MAX_MSG)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "message of %zu bytes, at most %u",
		                 len, SHOAL_WIRE_MAX_MSG);
	if (wire_has_check(buf, len)) {
		uint32_t want = 0;
		for (int i = 0; i < 4; i++)
			want = want << 8 | buf[len - 4 + i];
		if (wire_check(buf, len) != want)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "checksum mismatch (a damaged message)");
	}
	msgpack_unpacked_init(&u);
	e = unpack(buf, len, &u, why, why_len);
	if (!e)
		e = msg_from_obj(&u.data, m, cap, why, why_len);
	msgpack_unpacked_destroy(&u);
	if (e)
		m->n_updates = 0;
	return e;
}
