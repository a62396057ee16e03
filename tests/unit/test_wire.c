/*
 * tests/unit/test_wire.c: the membership codec of net/wire.c and the record
 * helpers of net/record.c. Round trips at the limits, then a corpus of bad
 * input -- random bytes, every truncation of valid messages, wrong field
 * types, huge declared lengths and counts, wrong schema version, unknown
 * type, non-map top level, deep nesting, over-limit counts -- each of
 * which must be refused with a reason (never a crash: run under
 * --enable-asan to be sure).
 */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/record.h"
#include "net/wire.h"
#include "runtime/node/status_json.h"
#include "tests/unit/test.h"

static uint64_t rs = 99;
static uint64_t rnd(void)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A record with every count at its maximum and every string full. */
static void full_record(shoal_record *r)
{
	shoal_record_init(r);
	for (int i = 0; i < SHOAL_PEER_ID_LEN; i++)
		r->id.b[i] = (uint8_t)(i * 17 + 3);
	memset(r->name, 'n', sizeof r->name - 1);
	r->version = 12345678901234ull;
	strcpy(r->cluster, "home-lab");
	strcpy(r->sw_version, "0.1.0");
	r->proto_version = 1;
	r->sched_version = 3;
	r->spec_mtp = 1;
	strcpy(r->ctl_endpoint, "tcp://192.168.1.7:7070");
	r->n_data_ep = SHOAL_RECORD_MAX_DATA_EP;
	for (uint32_t i = 0; i < r->n_data_ep; i++) {
		snprintf(r->data_ep[i].kind, sizeof r->data_ep[i].kind, "ethernet");
		snprintf(r->data_ep[i].ifname, sizeof r->data_ep[i].ifname, "en%u", i);
		snprintf(r->data_ep[i].addr, sizeof r->data_ep[i].addr, "tcp://10.0.%u.7:7071", i);
		r->data_ep[i].rdma = i & 1;
	}
	r->mem_total = 192ull << 30;
	r->mem_weights = 150ull << 30;
	r->compute_mb_s = 400000;
	r->compute_mflops = 27000000;
	r->cores = 24;
	strcpy(r->os, "darwin");
	strcpy(r->arch, "arm64");
	r->n_rdma = SHOAL_RECORD_MAX_RDMA;
	for (uint32_t i = 0; i < r->n_rdma; i++)
		snprintf(r->rdma[i], sizeof r->rdma[i], "rdma_en%u", i);
	r->n_models = SHOAL_RECORD_MAX_MODELS;
	for (uint32_t i = 0; i < r->n_models; i++) {
		memset(r->models[i].digest, (int)i, SHOAL_MODEL_DIGEST_LEN);
		memset(r->models[i].path, 'p', sizeof r->models[i].path - 1);
		r->models[i].bytes = (uint64_t)i << 33;
	}
	r->load_permille = 1500;
	r->n_links = SHOAL_RECORD_MAX_LINKS;
	for (uint32_t i = 0; i < r->n_links; i++) {
		r->links[i].peer.b[0] = (uint8_t)i;
		r->links[i].local_ep = (uint8_t)(i % SHOAL_RECORD_MAX_DATA_EP);
		r->links[i].remote_ep = (uint8_t)((i + 1) % SHOAL_RECORD_MAX_DATA_EP);
		r->links[i].rtt_us = 100 + i;
		r->links[i].bw_bytes_s = 1000000000ull + i;
	}
	r->n_dsuspect = SHOAL_RECORD_MAX_DSUSPECT;
	for (uint32_t i = 0; i < r->n_dsuspect; i++)
		memset(r->dsuspect[i].b, 0x40 + (int)i, SHOAL_PEER_ID_LEN);
	r->n_dlinks = SHOAL_RECORD_MAX_DLINKS;
	for (uint32_t i = 0; i < r->n_dlinks; i++) {
		memset(r->dlinks[i].peer.b, 0x80 + (int)i, SHOAL_PEER_ID_LEN);
		r->dlinks[i].rtt_us = UINT32_MAX - i;
		r->dlinks[i].bw_bytes_s = UINT64_MAX - i;
	}
	r->n_devices = SHOAL_RECORD_MAX_DEVICES;
	for (uint32_t i = 0; i < r->n_devices; i++) {
		shoal_record_device *d = &r->devices[i];
		memset(d->backend, 'b', sizeof d->backend - 1);
		memset(d->name, 'g', sizeof d->name - 1);
		d->kind = i ? SHOAL_RECORD_DEVICE_GPU : SHOAL_RECORD_DEVICE_CPU;
		d->unified = i & 1;
		d->software = i == 7;
		d->mem_bytes = (24ull << 30) + i;
		d->read_mb_s = 819000 + i;
		d->mflops = 50000000ull * (i + 1);
	}
}

static void test_peer_id_hex(void)
{
	shoal_peer_id a, b;
	char hex[33];
	for (int i = 0; i < SHOAL_PEER_ID_LEN; i++)
		a.b[i] = (uint8_t)rnd();
	shoal_peer_id_to_hex(&a, hex);
	ASSERT_EQ(strlen(hex), 32);
	ASSERT_EQ(shoal_peer_id_from_hex(hex, &b), SHOAL_OK);
	ASSERT_EQ(shoal_peer_id_cmp(&a, &b), 0);
	ASSERT_EQ(shoal_peer_id_from_hex("00", &b), SHOAL_ERR_FORMAT);
	hex[5] = 'g';
	ASSERT_EQ(shoal_peer_id_from_hex(hex, &b), SHOAL_ERR_FORMAT);
}

static void test_record_roundtrip_full(void)
{
	static shoal_record a, b;
	shoal_wire_buf buf;
	char why[SHOAL_WHY_LEN] = "";
	full_record(&a);
	ASSERT_EQ(shoal_record_check(&a, why, sizeof why), SHOAL_OK);
	shoal_wire_buf_init(&buf);
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	printf("  full record: %zu bytes of msgpack (limit %u)\n", buf.len, SHOAL_WIRE_MAX_RECORD);
	ASSERT_LE(buf.len, SHOAL_WIRE_MAX_RECORD);
	ASSERT_EQ(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_record_equal(&a, &b));
	b.links[63].rtt_us++;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	b = a;
	b.dsuspect[SHOAL_RECORD_MAX_DSUSPECT - 1].b[3] ^= 1;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	b = a;
	b.devices[7].read_mb_s++;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	b = a;
	b.dlinks[SHOAL_RECORD_MAX_DLINKS - 1].bw_bytes_s--;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	b = a;
	b.dlinks[0].rtt_us--;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	b = a;
	b.spec_mtp = 0;
	ASSERT_FALSE(shoal_record_equal(&a, &b));
	/* every truncation fails */
	size_t ok = 0;
	for (size_t n = 0; n < buf.len; n++)
		ok += shoal_wire_record_decode(buf.data, n, &b, why, sizeof why) == SHOAL_OK;
	ASSERT_EQ(ok, 0);
	shoal_wire_buf_fini(&buf);
}

static void test_record_json(void)
{
	static shoal_record a;
	full_record(&a);
	strcpy(a.name, "studio\xff"); /* not UTF-8: still a valid JSON object */
	json_t *o = shoal_status_record_json(&a);
	ASSERT_TRUE(o != NULL);
	ASSERT_EQ(strlen(json_string_value(json_object_get(o, "id"))), 32);
	ASSERT_EQ(json_array_size(json_object_get(o, "links")), SHOAL_RECORD_MAX_LINKS);
	ASSERT_EQ(json_array_size(json_object_get(o, "data_links")), SHOAL_RECORD_MAX_DLINKS);
	ASSERT_EQ(json_array_size(json_object_get(o, "models")), SHOAL_RECORD_MAX_MODELS);
	json_t *dv = json_object_get(o, "devices");
	ASSERT_EQ(json_array_size(dv), SHOAL_RECORD_MAX_DEVICES);
	ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(dv, 1), "kind")), "gpu");
	ASSERT_NEAR(json_real_value(json_object_get(json_array_get(dv, 0), "read_gb_s")), 819.0,
	            1e-6);
	ASSERT_EQ(json_integer_value(json_object_get(o, "mem_total")), (json_int_t)(192ull << 30));
	ASSERT_NEAR(json_real_value(json_object_get(o, "compute_gflops")), 27000.0, 1e-6);
	char *s = json_dumps(o, JSON_COMPACT);
	ASSERT_TRUE(s != NULL);
	free(s);
	json_decref(o);
}

static void test_record_limits(void)
{
	static shoal_record a;
	char why[SHOAL_WHY_LEN] = "";
	full_record(&a);
	a.n_links = SHOAL_RECORD_MAX_LINKS + 1;
	ASSERT_EQ(shoal_record_check(&a, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "links") != NULL);
	full_record(&a);
	a.n_dsuspect = SHOAL_RECORD_MAX_DSUSPECT + 1;
	ASSERT_EQ(shoal_record_check(&a, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "data suspects") != NULL);
	full_record(&a);
	a.n_dlinks = SHOAL_RECORD_MAX_DLINKS + 1;
	ASSERT_EQ(shoal_record_check(&a, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "data links") != NULL);
	full_record(&a);
	a.dlinks[5].rtt_us = 0; /* a round trip of nothing: not a measurement */
	ASSERT_EQ(shoal_record_check(&a, why, sizeof why), SHOAL_ERR_RANGE);
	full_record(&a);
	a.ctl_endpoint[0] = 0;
	ASSERT_NE(shoal_record_check(&a, why, sizeof why), SHOAL_OK);
	full_record(&a);
	a.links[0].local_ep = 9;
	ASSERT_NE(shoal_record_check(&a, why, sizeof why), SHOAL_OK);
}

/* A valid message of each type with n updates carrying records. */
static void make_msg(uint32_t type, size_t n_up, shoal_wire_buf *out, shoal_wire_buf *rec)
{
	static shoal_record r;
	static shoal_wire_update ups[8];
	shoal_wire_msg m;
	full_record(&r);
	r.n_links = 2;
	r.n_models = 1;
	shoal_wire_record_encode(&r, rec);
	memset(&m, 0, sizeof m);
	m.type = type;
	m.from.b[0] = 7;
	strcpy(m.from_ep, "tcp://a:1");
	m.seq = 42;
	m.target.b[0] = 8;
	strcpy(m.target_ep, "tcp://b:2");
	m.reply = 1;
	for (size_t i = 0; i < n_up; i++) {
		memset(&ups[i], 0, sizeof ups[i]);
		ups[i].id = r.id;
		ups[i].state = (uint32_t)(i % 4);
		ups[i].incarnation = 3;
		ups[i].record_version = r.version;
		if (i % 2 == 0) {
			ups[i].record = rec->data;
			ups[i].record_len = rec->len;
		}
	}
	m.updates = ups;
	m.n_updates = n_up;
	shoal_wire_encode(&m, out);
}

static void test_msg_roundtrip(void)
{
	shoal_wire_buf b, rec;
	shoal_wire_update ups[16];
	shoal_wire_msg m = {.updates = ups};
	char why[SHOAL_WHY_LEN] = "";
	shoal_wire_buf_init(&b);
	shoal_wire_buf_init(&rec);
	for (uint32_t t = SHOAL_WIRE_PING; t <= SHOAL_WIRE_PUSHPULL; t++) {
		make_msg(t, 5, &b, &rec);
		ASSERT_EQ(shoal_wire_decode(b.data, b.len, &m, 16, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(m.type, t);
		ASSERT_EQ(m.n_updates, 5);
		ASSERT_EQ(m.from.b[0], 7);
		ASSERT_STR_EQ(m.from_ep, "tcp://a:1");
		if (t != SHOAL_WIRE_PUSHPULL) {
			ASSERT_U64_EQ(m.seq, 42);
			ASSERT_EQ(m.target.b[0], 8);
		} else {
			ASSERT_EQ(m.reply, 1);
		}
		if (t == SHOAL_WIRE_PING_REQ)
			ASSERT_STR_EQ(m.target_ep, "tcp://b:2");
		ASSERT_EQ(m.updates[3].state, 3);
		ASSERT_TRUE(m.updates[3].record == NULL);
		ASSERT_EQ(m.updates[4].record_len, rec.len);
		ASSERT_MEM_EQ(m.updates[4].record, rec.data, rec.len);
		/* fewer slots than updates: refused, not overrun */
		ASSERT_EQ(shoal_wire_decode(b.data, b.len, &m, 4, why, sizeof why),
		          SHOAL_ERR_RANGE);
	}
	shoal_wire_buf_fini(&b);
	shoal_wire_buf_fini(&rec);
}

static void test_truncations(void)
{
	shoal_wire_buf b, rec;
	shoal_wire_update ups[16];
	shoal_wire_msg m = {.updates = ups};
	size_t accepted = 0, total = 0;
	shoal_wire_buf_init(&b);
	shoal_wire_buf_init(&rec);
	for (uint32_t t = SHOAL_WIRE_PING; t <= SHOAL_WIRE_PUSHPULL; t++) {
		make_msg(t, 3, &b, &rec);
		for (size_t n = 0; n < b.len; n++, total++)
			accepted += shoal_wire_decode(b.data, n, &m, 16, NULL, 0) == SHOAL_OK;
		/* and one byte too many */
		uint8_t *x = malloc(b.len + 1);
		memcpy(x, b.data, b.len);
		x[b.len] = 0;
		accepted += shoal_wire_decode(x, b.len + 1, &m, 16, NULL, 0) == SHOAL_OK;
		free(x);
	}
	printf("  %zu truncations tried\n", total);
	ASSERT_EQ(accepted, 0);
	shoal_wire_buf_fini(&b);
	shoal_wire_buf_fini(&rec);
}

/* The check (wire.h): every single flipped bit of an encoded message is
 * refused, most of them by the checksum alone (a flip in a record's bytes
 * or a peer id still decodes without it), except a flip in the check's
 * own key, which breaks the msgpack or leaves the message intact (and
 * decoded unchecked). */
static void test_bit_flips(void)
{
	shoal_wire_buf b, rec;
	shoal_wire_update ups[16];
	shoal_wire_msg m = {.updates = ups};
	char why[SHOAL_WHY_LEN] = "";
	size_t refused = 0, by_check = 0, total = 0;
	shoal_wire_buf_init(&b);
	shoal_wire_buf_init(&rec);
	for (uint32_t t = SHOAL_WIRE_PING; t <= SHOAL_WIRE_PUSHPULL; t++) {
		make_msg(t, 3, &b, &rec);
		ASSERT_TRUE(b.len > 7 && b.data[b.len - 7] == 0xa1 && b.data[b.len - 6] == 'k');
		for (size_t bit = 0; bit < 8 * b.len; bit++, total++) {
			size_t at = bit / 8;
			b.data[at] ^= (uint8_t)(1u << (bit % 8));
			shoal_err e = shoal_wire_decode(b.data, b.len, &m, 16, why, sizeof why);
			b.data[at] ^= (uint8_t)(1u << (bit % 8));
			if (at >= b.len - 7 && at < b.len - 4) {
				/* the key: refused as msgpack, or unchecked and intact */
				if (e == SHOAL_OK)
					ASSERT_EQ(m.n_updates, 3);
				continue;
			}
			if (e == SHOAL_OK)
				TEST_FAIL_("type %u: bit %zu flipped and accepted", t, bit);
			refused++;
			by_check += strstr(why, "checksum mismatch") != NULL;
		}
	}
	printf("  %zu of %zu flipped bits refused, %zu by the checksum\n", refused, total,
	       by_check);
	ASSERT_TRUE(by_check > 0);
	shoal_wire_buf_fini(&b);
	shoal_wire_buf_fini(&rec);
}

static void test_random_bytes(void)
{
	uint8_t buf[300];
	shoal_wire_update ups[16];
	shoal_wire_msg m = {.updates = ups};
	shoal_record r;
	size_t accepted = 0;
	for (int i = 0; i < 20000; i++) {
		size_t n = rnd() % sizeof buf;
		for (size_t j = 0; j < n; j++)
			buf[j] = (uint8_t)rnd();
		if (n && i % 2)
			buf[0] = 0x80 | (buf[0] & 15); /* a fixmap: get past the first check */
		accepted += shoal_wire_decode(buf, n, &m, 16, NULL, 0) == SHOAL_OK;
		accepted += shoal_wire_record_decode(buf, n, &r, NULL, 0) == SHOAL_OK;
	}
	ASSERT_EQ(accepted, 0);
}

/* Hand-built messages: a valid PING whose field `bad_key` is replaced by
 * a value of kind `how`. */
enum { AS_STR, AS_NEG, AS_BIN15, AS_MAP, AS_NIL, AS_FLOAT, AS_BIG };

static void write_cb_init(msgpack_sbuffer *sb, msgpack_packer *pk)
{
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void pk_value(msgpack_packer *pk, const char *key, const char *bad_key, int how,
                     void (*good)(msgpack_packer *))
{
	pk_str(pk, key);
	if (strcmp(key, bad_key)) {
		good(pk);
		return;
	}
	static const uint8_t b15[15];
	switch (how) {
	case AS_STR:
		pk_str(pk, "x");
		break;
	case AS_NEG:
		msgpack_pack_int64(pk, -1);
		break;
	case AS_BIN15:
		msgpack_pack_bin_with_body(pk, b15, 15);
		break;
	case AS_MAP:
		msgpack_pack_map(pk, 0);
		break;
	case AS_NIL:
		msgpack_pack_nil(pk);
		break;
	case AS_FLOAT:
		msgpack_pack_double(pk, 1.5);
		break;
	case AS_BIG:
		msgpack_pack_uint64(pk, UINT64_MAX);
		break;
	}
}

static void g_t(msgpack_packer *pk)
{
	msgpack_pack_uint32(pk, SHOAL_WIRE_PING);
}
static void g_v(msgpack_packer *pk)
{
	msgpack_pack_uint32(pk, SHOAL_WIRE_SCHEMA);
}
static void g_id(msgpack_packer *pk)
{
	static const uint8_t id[SHOAL_PEER_ID_LEN] = {1};
	msgpack_pack_bin_with_body(pk, id, SHOAL_PEER_ID_LEN);
}
static void g_ep(msgpack_packer *pk)
{
	pk_str(pk, "tcp://x:1");
}
static void g_seq(msgpack_packer *pk)
{
	msgpack_pack_uint64(pk, 5);
}
static void g_u(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 4);
	pk_str(pk, "i"), g_id(pk);
	pk_str(pk, "s"), msgpack_pack_uint32(pk, 1);
	pk_str(pk, "n"), msgpack_pack_uint32(pk, 2);
	pk_str(pk, "r"), msgpack_pack_uint32(pk, 3);
}

static shoal_err decode_variant(const char *bad_key, int how, char *why, size_t why_len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	shoal_wire_update ups[4];
	shoal_wire_msg m = {.updates = ups};
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 7);
	pk_value(&pk, "t", bad_key, how, g_t);
	pk_value(&pk, "v", bad_key, how, g_v);
	pk_value(&pk, "f", bad_key, how, g_id);
	pk_value(&pk, "e", bad_key, how, g_ep);
	pk_value(&pk, "s", bad_key, how, g_seq);
	pk_value(&pk, "g", bad_key, how, g_id);
	pk_value(&pk, "u", bad_key, how, g_u);
	shoal_err e = shoal_wire_decode((const uint8_t *)sb.data, sb.size, &m, 4, why, why_len);
	msgpack_sbuffer_destroy(&sb);
	return e;
}

static void test_wrong_field_types(void)
{
	static const char *keys[] = {"t", "v", "f", "e", "s", "g", "u"};
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(decode_variant("none", 0, why, sizeof why), SHOAL_OK);
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		for (int how = AS_STR; how <= AS_BIG; how++) {
			/* a huge seq is a valid seq; a string endpoint is valid */
			if (how == AS_BIG && !strcmp(keys[k], "s"))
				continue;
			if (how == AS_STR && !strcmp(keys[k], "e"))
				continue;
			why[0] = 0;
			shoal_err e = decode_variant(keys[k], how, why, sizeof why);
			if (e == SHOAL_OK)
				printf("  accepted %s as kind %d\n", keys[k], how);
			ASSERT_NE(e, SHOAL_OK);
			ASSERT_TRUE(why[0] != 0);
		}
	}
}

static shoal_err decode_bytes(const uint8_t *p, size_t n, char *why, size_t why_len)
{
	shoal_wire_update ups[4];
	shoal_wire_msg m = {.updates = ups};
	return shoal_wire_decode(p, n, &m, 4, why, why_len);
}

static void test_huge_lengths(void)
{
	static const uint8_t cases[][6] = {
	    {0xdd, 0xff, 0xff, 0xff, 0xff, 0},   /* array32 of 4G */
	    {0xdf, 0xff, 0xff, 0xff, 0xff, 0},   /* map32 of 4G */
	    {0xdb, 0xff, 0xff, 0xff, 0xff, 0},   /* str32 of 4G */
	    {0xc6, 0xff, 0xff, 0xff, 0xff, 0},   /* bin32 of 4G */
	    {0x81, 0xa1, 'u', 0xdd, 0x7f, 0xff}, /* {"u": array32 of 2G (truncated)} */
	    {0x81, 0xa1, 'u', 0xdc, 0xff, 0xff}, /* {"u": array16 of 65535} */
	};
	char why[SHOAL_WHY_LEN];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		why[0] = 0;
		ASSERT_EQ(decode_bytes(cases[i], 6, why, sizeof why), SHOAL_ERR_FORMAT);
		ASSERT_TRUE(strstr(why, "exceeds") || strstr(why, "truncated"));
	}
}

static void test_schema_type_toplevel(void)
{
	char why[SHOAL_WHY_LEN];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	/* wrong schema version */
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 2);
	pk_str(&pk, "t"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "v"), msgpack_pack_uint32(&pk, SHOAL_WIRE_SCHEMA + 1);
	ASSERT_EQ(decode_bytes((uint8_t *)sb.data, sb.size, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "schema") != NULL);
	msgpack_sbuffer_destroy(&sb);
	/* unknown type */
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 2);
	pk_str(&pk, "t"), msgpack_pack_uint32(&pk, 99);
	pk_str(&pk, "v"), msgpack_pack_uint32(&pk, SHOAL_WIRE_SCHEMA);
	ASSERT_EQ(decode_bytes((uint8_t *)sb.data, sb.size, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "type") != NULL);
	msgpack_sbuffer_destroy(&sb);
	/* non-map top levels */
	static const uint8_t arr[] = {0x92, 1, 2}, num[] = {0x05}, str[] = {0xa1, 'x'},
	                     nil[] = {0xc0};
	ASSERT_EQ(decode_bytes(arr, sizeof arr, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "not a map") != NULL);
	ASSERT_EQ(decode_bytes(num, sizeof num, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_EQ(decode_bytes(str, sizeof str, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_EQ(decode_bytes(nil, sizeof nil, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_EQ(decode_bytes(nil, 0, why, sizeof why), SHOAL_ERR_FORMAT);
	/* ext types are not accepted anywhere */
	static const uint8_t ext[] = {0x81, 0xa1, 'x', 0xd4, 1, 2};
	ASSERT_EQ(decode_bytes(ext, sizeof ext, why, sizeof why), SHOAL_ERR_FORMAT);
}

static void test_nested_too_deep(void)
{
	uint8_t buf[300];
	char why[SHOAL_WHY_LEN];
	size_t n = 0;
	buf[n++] = 0x81, buf[n++] = 0xa1, buf[n++] = 'x';
	for (int i = 0; i < 200; i++)
		buf[n++] = 0x91; /* [[[[...]]]] */
	buf[n++] = 0x01;
	why[0] = 0;
	ASSERT_EQ(decode_bytes(buf, n, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "deeper") != NULL);
	/* exactly at the limit is structurally fine, one more is not */
	for (int extra = 0; extra <= 1; extra++) {
		n = 0;
		buf[n++] = 0x81, buf[n++] = 0xa1, buf[n++] = 'x';
		for (int i = 0; i < SHOAL_WIRE_MAX_DEPTH - 1 + extra; i++)
			buf[n++] = 0x91;
		buf[n++] = 0x01;
		ASSERT_EQ(shoal_wire_prescan(buf, n, SHOAL_WIRE_MAX_DEPTH, why, sizeof why),
		          extra ? SHOAL_ERR_FORMAT : SHOAL_OK);
	}
}

/* Records over the limits, built by hand. */
static void test_record_over_limits(void)
{
	static shoal_record a, b;
	shoal_wire_buf buf;
	char why[SHOAL_WHY_LEN];
	full_record(&a);
	shoal_wire_buf_init(&buf);
	/* 65 links: encode by lying about the count is impossible through the
	 * struct, so patch the array header in the encoded bytes instead: the
	 * links array is the last key; its header 0xdc 0x00 0x40 becomes 0x41
	 * with no 65th element -> declared count exceeds the bytes / format. */
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	size_t at = 0;
	for (size_t i = 0; i + 6 <= buf.len; i++)
		if (!memcmp(buf.data + i, "\xa2ln\xdc\x00\x40", 6))
			at = i + 5;
	ASSERT_TRUE(at != 0);
	buf.data[at] = 0x41;
	ASSERT_EQ(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	/* a too-long name */
	full_record(&a);
	a.n_links = 0;
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	ASSERT_EQ(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why), SHOAL_OK);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 6);
	pk_str(&pk, "id"), g_id(&pk);
	char longname[200];
	memset(longname, 'a', sizeof longname - 1);
	longname[199] = 0;
	pk_str(&pk, "name"), pk_str(&pk, longname);
	pk_str(&pk, "ver"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "pv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "sv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "ctl"), pk_str(&pk, "tcp://x:1");
	why[0] = 0;
	ASSERT_EQ(shoal_wire_record_decode((uint8_t *)sb.data, sb.size, &b, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "name") != NULL);
	msgpack_sbuffer_destroy(&sb);
	/* 17 models (one over), each complete */
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 7);
	pk_str(&pk, "id"), g_id(&pk);
	pk_str(&pk, "ctl"), pk_str(&pk, "tcp://x:1");
	pk_str(&pk, "name"), pk_str(&pk, "n");
	pk_str(&pk, "ver"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "pv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "sv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "mo"), msgpack_pack_array(&pk, SHOAL_RECORD_MAX_MODELS + 1);
	for (int i = 0; i <= SHOAL_RECORD_MAX_MODELS; i++) {
		static const uint8_t d[SHOAL_MODEL_DIGEST_LEN];
		msgpack_pack_map(&pk, 1);
		pk_str(&pk, "d"), msgpack_pack_bin_with_body(&pk, d, SHOAL_MODEL_DIGEST_LEN);
	}
	why[0] = 0;
	ASSERT_EQ(shoal_wire_record_decode((uint8_t *)sb.data, sb.size, &b, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "at most 16") != NULL);
	msgpack_sbuffer_destroy(&sb);
	shoal_wire_buf_fini(&buf);
}

/* The device list: a peer without it (older) is one CPU device made of
 * its memory offer and compute probe; bad devices are refused by name. */
static void test_record_devices(void)
{
	static shoal_record b;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char why[SHOAL_WHY_LEN];
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 9);
	pk_str(&pk, "id"), g_id(&pk);
	pk_str(&pk, "ctl"), pk_str(&pk, "tcp://x:1");
	pk_str(&pk, "name"), pk_str(&pk, "old");
	pk_str(&pk, "ver"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "pv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "sv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "mw"), msgpack_pack_uint64(&pk, 48ull << 30);
	pk_str(&pk, "cmb"), msgpack_pack_uint32(&pk, 21000);
	pk_str(&pk, "cmf"), msgpack_pack_uint32(&pk, 350000);
	ASSERT_EQ(shoal_wire_record_decode((uint8_t *)sb.data, sb.size, &b, why, sizeof why),
	          SHOAL_OK);
	msgpack_sbuffer_destroy(&sb);
	ASSERT_EQ(b.n_devices, 1);
	ASSERT_STR_EQ(b.devices[0].backend, "cpu");
	ASSERT_EQ(b.devices[0].kind, SHOAL_RECORD_DEVICE_CPU);
	ASSERT_U64_EQ(b.devices[0].mem_bytes, 48ull << 30);
	ASSERT_U64_EQ(b.devices[0].read_mb_s, 21000);
	ASSERT_U64_EQ(b.devices[0].mflops, 350000);
	ASSERT_EQ(b.spec_mtp, 0); /* an older peer offers no MTP layer */

	/* a CPU and a GPU round trip */
	static shoal_record a;
	shoal_wire_buf buf;
	shoal_wire_buf_init(&buf);
	shoal_record_init(&a);
	a.id.b[0] = 1;
	a.version = 1;
	a.proto_version = a.sched_version = 1;
	strcpy(a.ctl_endpoint, "tcp://127.0.0.1:7070");
	a.n_devices = 2;
	strcpy(a.devices[0].backend, "cpu");
	strcpy(a.devices[0].name, "cpu avx2 x8");
	a.devices[0].mem_bytes = 64ull << 30;
	a.devices[0].read_mb_s = 60000;
	strcpy(a.devices[1].backend, "vulkan");
	strcpy(a.devices[1].name, "AMD Radeon RX 7900 XTX");
	a.devices[1].kind = SHOAL_RECORD_DEVICE_GPU;
	a.devices[1].mem_bytes = 24ull << 30;
	a.devices[1].read_mb_s = 800000;
	a.devices[1].mflops = 61000000;
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	ASSERT_EQ(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_record_equal(&a, &b));
	ASSERT_STR_EQ(b.devices[1].name, "AMD Radeon RX 7900 XTX");
	ASSERT_U64_EQ(b.devices[1].mflops, 61000000);
	/* a kind that is neither CPU nor GPU */
	a.devices[1].kind = 2;
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	why[0] = 0;
	ASSERT_EQ(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "record device") != NULL);
	/* a device without its backend's name */
	a.devices[1].kind = SHOAL_RECORD_DEVICE_GPU;
	a.devices[1].backend[0] = 0;
	ASSERT_EQ(shoal_wire_record_encode(&a, &buf), SHOAL_OK);
	ASSERT_NE(shoal_wire_record_decode(buf.data, buf.len, &b, why, sizeof why), SHOAL_OK);
	shoal_wire_buf_fini(&buf);
	/* nine devices (one over) */
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 7);
	pk_str(&pk, "id"), g_id(&pk);
	pk_str(&pk, "ctl"), pk_str(&pk, "tcp://x:1");
	pk_str(&pk, "name"), pk_str(&pk, "n");
	pk_str(&pk, "ver"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "pv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "sv"), msgpack_pack_uint32(&pk, 1);
	pk_str(&pk, "dv"), msgpack_pack_array(&pk, SHOAL_RECORD_MAX_DEVICES + 1);
	for (int i = 0; i <= SHOAL_RECORD_MAX_DEVICES; i++) {
		msgpack_pack_map(&pk, 2);
		pk_str(&pk, "b"), pk_str(&pk, "cpu");
		pk_str(&pk, "k"), msgpack_pack_uint32(&pk, 0);
	}
	why[0] = 0;
	ASSERT_EQ(shoal_wire_record_decode((uint8_t *)sb.data, sb.size, &b, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "at most 8") != NULL);
	msgpack_sbuffer_destroy(&sb);
}

static void test_unknown_keys_ignored(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char why[SHOAL_WHY_LEN];
	write_cb_init(&sb, &pk);
	msgpack_pack_map(&pk, 8);
	pk_str(&pk, "t"), g_t(&pk);
	pk_str(&pk, "v"), g_v(&pk);
	pk_str(&pk, "f"), g_id(&pk);
	pk_str(&pk, "e"), g_ep(&pk);
	pk_str(&pk, "s"), g_seq(&pk);
	pk_str(&pk, "g"), g_id(&pk);
	pk_str(&pk, "u"), g_u(&pk);
	pk_str(&pk, "future"), msgpack_pack_double(&pk, 2.5);
	ASSERT_EQ(decode_bytes((uint8_t *)sb.data, sb.size, why, sizeof why), SHOAL_OK);
	msgpack_sbuffer_destroy(&sb);
}

/* A record's data suspects ("dsu") must be peer ids, at most
 * SHOAL_RECORD_MAX_DSUSPECT of them: a short id, a string or one too many
 * is refused with the key named; a whole list decodes. */
static void test_record_dsuspects(void)
{
	static shoal_record b;
	char why[SHOAL_WHY_LEN];
	static const uint8_t id[SHOAL_PEER_ID_LEN] = {9};
	for (int how = 0; how < 4; how++) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		write_cb_init(&sb, &pk);
		msgpack_pack_map(&pk, 7);
		pk_str(&pk, "id"), g_id(&pk);
		pk_str(&pk, "name"), pk_str(&pk, "p");
		pk_str(&pk, "ver"), msgpack_pack_uint32(&pk, 1);
		pk_str(&pk, "pv"), msgpack_pack_uint32(&pk, 1);
		pk_str(&pk, "sv"), msgpack_pack_uint32(&pk, 1);
		pk_str(&pk, "ctl"), pk_str(&pk, "tcp://x:1");
		pk_str(&pk, "dsu");
		uint32_t n = how == 3 ? SHOAL_RECORD_MAX_DSUSPECT + 1 : SHOAL_RECORD_MAX_DSUSPECT;
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++) {
			if (how == 1 && i == 2)
				msgpack_pack_bin_with_body(&pk, id, 4);
			else if (how == 2 && i == 0)
				pk_str(&pk, "not an id");
			else
				msgpack_pack_bin_with_body(&pk, id, SHOAL_PEER_ID_LEN);
		}
		why[0] = 0;
		shoal_err e =
		    shoal_wire_record_decode((uint8_t *)sb.data, sb.size, &b, why, sizeof why);
		if (how == 0) {
			ASSERT_EQ(e, SHOAL_OK);
			ASSERT_EQ(b.n_dsuspect, SHOAL_RECORD_MAX_DSUSPECT);
			ASSERT_MEM_EQ(b.dsuspect[3].b, id, SHOAL_PEER_ID_LEN);
		} else {
			ASSERT_EQ(e, SHOAL_ERR_FORMAT);
			ASSERT_TRUE(strstr(why, "dsu") != NULL);
		}
		msgpack_sbuffer_destroy(&sb);
	}
}

TEST_MAIN(TEST_CASE(test_peer_id_hex), TEST_CASE(test_record_roundtrip_full),
          TEST_CASE(test_record_json), TEST_CASE(test_record_limits), TEST_CASE(test_msg_roundtrip),
          TEST_CASE(test_truncations), TEST_CASE(test_bit_flips), TEST_CASE(test_random_bytes),
          TEST_CASE(test_wrong_field_types), TEST_CASE(test_huge_lengths),
          TEST_CASE(test_schema_type_toplevel), TEST_CASE(test_nested_too_deep),
          TEST_CASE(test_record_over_limits), TEST_CASE(test_record_devices),
          TEST_CASE(test_unknown_keys_ignored), TEST_CASE(test_record_dsuspects))
