/*
 * runtime/node/cluster_json.c: cluster JSON -> view and view -> cluster
 * JSON (the format in plan_json.h); plan_json.c writes plans.
 *
 * Part: runtime/ (glue). Divisions: sizes and numbers, peers, links and
 * routing, the view as JSON. Numbers given as decimals (GB/s,
 * microseconds) are converted to integers once, here, with one IEEE-754
 * multiply and a rounding, which every platform computes alike.
 */
#include "runtime/node/plan_json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/draft_kinds.h"

/* ---- sizes and numbers ------------------------------------------------- */

shoal_err shoal_cluster_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	double x = strtod(s, &end);
	if (end == s || !(x >= 0))
		return SHOAL_ERR_FORMAT;
	while (*end == ' ')
		end++;
	double mul = 1;
	if (*end) {
		char u = (char)toupper((unsigned char)end[0]);
		const char *rest = end + 1;
		int pow = u == 'K'   ? 1
		          : u == 'M' ? 2
		          : u == 'G' ? 3
		          : u == 'T' ? 4
		          : u == 'B' ? 0
		                     : -1;
		if (pow < 0)
			return SHOAL_ERR_FORMAT;
		double base = 1024;
		if (u == 'B') {
			if (*rest)
				return SHOAL_ERR_FORMAT;
		} else if (!strcmp(rest, "") || !strcmp(rest, "iB") || !strcmp(rest, "i")) {
			base = 1024;
		} else if (!strcmp(rest, "B")) {
			base = 1000;
		} else {
			return SHOAL_ERR_FORMAT;
		}
		for (int i = 0; i < pow; i++)
			mul *= base;
	}
	double b = x * mul;
	/* below 2^63: the cluster JSON writes memory back as a JSON integer
	 * (int64), and a larger value came back negative, refused on re-read */
	if (!(b < 9223372036854775808.0))
		return SHOAL_ERR_RANGE;
	*out = (uint64_t)llround(b);
	return SHOAL_OK;
}

/* A number field (integer or real) >= 0. */
static shoal_err get_num(const json_t *o, const char *key, bool required, double def, double *out,
                         const char *what, char *why, size_t why_len)
{
	const json_t *v = json_object_get(o, key);
	if (!v) {
		if (required)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: missing \"%s\"", what,
			                 key);
		*out = def;
		return SHOAL_OK;
	}
	if (!json_is_number(v))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"%s\" is not a number", what,
		                 key);
	double x = json_number_value(v);
	if (!(x >= 0 && x < 1e15))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%s: \"%s\" = %g out of range",
		                 what, key, x);
	*out = x;
	return SHOAL_OK;
}

/* ---- peers ------------------------------------------------------------- */

/* "efficiency": { "bandwidth": 0.41, "compute": 0.5 } (fractions 0..1 of
 * the device's figures a layer of the engine gets; each optional, absent:
 * 1) into permille; no object leaves both at 0 (the view's 1). */
static shoal_err read_eff(const json_t *o, const char *what, uint32_t *bw_pm, uint32_t *fl_pm,
                          char *why, size_t why_len)
{
	const json_t *e = json_object_get(o, "efficiency");
	if (!e)
		return SHOAL_OK;
	char w[96];
	snprintf(w, sizeof w, "%s.efficiency", what);
	if (!json_is_object(e))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: not an object", w);
	double b, f;
	shoal_err err;
	if ((err = get_num(e, "bandwidth", false, 1, &b, w, why, why_len)) ||
	    (err = get_num(e, "compute", false, 1, &f, w, why, why_len)))
		return err;
	if (b <= 0 || b > 1 || f <= 0 || f > 1)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%s: a fraction in (0, 1] (the share of the figure a layer gets)",
		                 w);
	*bw_pm = (uint32_t)llround(b * 1000) ? (uint32_t)llround(b * 1000) : 1;
	*fl_pm = (uint32_t)llround(f * 1000) ? (uint32_t)llround(f * 1000) : 1;
	return SHOAL_OK;
}

/* A peer's "gpu": memory (a size), bandwidth_gbs and compute_gflops
 * (required, > 0), unified (default false), backend (default "vulkan") and
 * name (optional strings). */
static shoal_err read_gpu(const json_t *g, const char *peer, shoal_view_peer *vp, char *why,
                          size_t why_len)
{
	char what[64];
	snprintf(what, sizeof what, "%s.gpu", peer);
	if (!json_is_object(g))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: not an object", what);
	const json_t *mem = json_object_get(g, "memory");
	if (json_is_string(mem)) {
		if (shoal_cluster_parse_bytes(json_string_value(mem), &vp->gpu_mem))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: memory \"%s\": want e.g. 24G or 24GiB", what,
			                 json_string_value(mem));
	} else if (json_is_integer(mem) && json_integer_value(mem) > 0) {
		vp->gpu_mem = (uint64_t)json_integer_value(mem);
	} else {
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"memory\" missing or not bytes / a size string", what);
	}
	double bw, fl;
	shoal_err e;
	if ((e = get_num(g, "bandwidth_gbs", true, 0, &bw, what, why, why_len)) ||
	    (e = get_num(g, "compute_gflops", true, 0, &fl, what, why, why_len)))
		return e;
	vp->gpu_bw = (uint64_t)llround(bw * 1e9);
	vp->gpu_flops = (uint64_t)llround(fl * 1e9);
	const json_t *u = json_object_get(g, "unified"), *b = json_object_get(g, "backend"),
	             *n = json_object_get(g, "name");
	if ((u && !json_is_boolean(u)) || (b && !json_is_string(b)) || (n && !json_is_string(n)))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"unified\" is true or false, \"backend\" and \"name\" "
		                 "strings",
		                 what);
	vp->gpu_unified = u && json_is_true(u);
	snprintf(vp->gpu_backend, sizeof vp->gpu_backend, "%s",
	         b ? json_string_value(b) : "vulkan");
	snprintf(vp->gpu_name, sizeof vp->gpu_name, "%s", n ? json_string_value(n) : "");
	return read_eff(g, what, &vp->gpu_bw_eff_pm, &vp->gpu_fl_eff_pm, why, why_len);
}

static shoal_err read_peer(const json_t *p, size_t i, shoal_view_peer *vp, char *why,
                           size_t why_len)
{
	char what[48];
	snprintf(what, sizeof what, "peers[%zu]", i);
	memset(vp, 0, sizeof *vp);
	if (!json_is_object(p))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: not an object", what);
	const json_t *id = json_object_get(p, "id");
	if (!json_is_string(id) || shoal_peer_id_from_hex(json_string_value(id), &vp->id))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"id\" must be 32 hex digits",
		                 what);
	const json_t *name = json_object_get(p, "name");
	if (name && !json_is_string(name))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"name\" is not a string",
		                 what);
	snprintf(vp->name, sizeof vp->name, "%s",
	         name ? json_string_value(name) : json_string_value(id));
	const json_t *mem = json_object_get(p, "memory");
	if (json_is_string(mem)) {
		if (shoal_cluster_parse_bytes(json_string_value(mem), &vp->mem_bytes))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: memory \"%s\": want e.g. 512G, 64GiB or 16000000000",
			                 what, json_string_value(mem));
	} else if (json_is_integer(mem) && json_integer_value(mem) >= 0) {
		vp->mem_bytes = (uint64_t)json_integer_value(mem);
	} else {
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s: \"memory\" missing or not bytes / a size string", what);
	}
	double bw, fl, load, hop, rnd;
	shoal_err e;
	if ((e = get_num(p, "bandwidth_gbs", true, 0, &bw, what, why, why_len)) ||
	    (e = get_num(p, "compute_gflops", true, 0, &fl, what, why, why_len)) ||
	    (e = get_num(p, "load_pct", false, 0, &load, what, why, why_len)) ||
	    (e = get_num(p, "hop_us", false, 0, &hop, what, why, why_len)) ||
	    (e = get_num(p, "round_us", false, 0, &rnd, what, why, why_len)) ||
	    (e = read_eff(p, what, &vp->bw_eff_pm, &vp->fl_eff_pm, why, why_len)))
		return e;
	if (hop > 1e9 || rnd > 1e9)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%s: \"hop_us\" and \"round_us\" at most 1e9", what);
	vp->hop_ns = (uint64_t)llround(hop * 1e3);
	vp->round_ns = (uint64_t)llround(rnd * 1e3);
	vp->mem_bw = (uint64_t)llround(bw * 1e9);
	vp->flops = (uint64_t)llround(fl * 1e9);
	vp->load_pct = load > 1000 ? 1000 : (uint32_t)load; /* the view rejects > 90 */
	const json_t *spec = json_object_get(p, "speculate");
	if (spec) {
		shoal_speculate_kind k;
		char w[SHOAL_WHY_LEN] = "";
		if (!json_is_string(spec) ||
		    shoal_speculate_parse(json_string_value(spec), &k, w, sizeof w))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: \"speculate\": %s",
			                 what, w[0] ? w : "not a string");
		vp->mtp = k == SHOAL_SPECULATE_MTP;
	}
	const json_t *gpu = json_object_get(p, "gpu");
	return gpu ? read_gpu(gpu, what, vp, why, why_len) : SHOAL_OK;
}

/* ---- links and routing ------------------------------------------------- */

static shoal_err resolve(const json_t *peers, const json_t *ref, shoal_peer_id *out,
                         const char *what, char *why, size_t why_len)
{
	if (!json_is_string(ref))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: a peer must be an id or name",
		                 what);
	const char *s = json_string_value(ref);
	if (!shoal_peer_id_from_hex(s, out))
		return SHOAL_OK;
	int found = 0;
	size_t i;
	const json_t *p;
	json_array_foreach(peers, i, p)
	{
		const json_t *n = json_object_get(p, "name");
		if (json_is_string(n) && !strcmp(json_string_value(n), s)) {
			shoal_peer_id_from_hex(json_string_value(json_object_get(p, "id")), out);
			found++;
		}
	}
	if (found != 1)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: peer \"%s\" %s", what, s,
		                 found ? "is ambiguous" : "not found");
	return SHOAL_OK;
}

static shoal_err read_link_spec(const json_t *l, const char *what, uint64_t *lat, uint64_t *bw,
                                double def_us, double def_gbit, char *why, size_t why_len)
{
	double us, gbit;
	shoal_err e;
	if ((e = get_num(l, "latency_us", false, def_us, &us, what, why, why_len)) ||
	    (e = get_num(l, "bandwidth_gbit", false, def_gbit, &gbit, what, why, why_len)))
		return e;
	*lat = (uint64_t)llround(us * 1000.0);
	*bw = (uint64_t)llround(gbit * 1e9 / 8.0);
	if (!*bw)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%s: zero bandwidth", what);
	return SHOAL_OK;
}

static shoal_err read_routing(const json_t *r, shoal_view *v, char *why, size_t why_len)
{
	size_t i;
	const json_t *x;
	if (!json_is_array(r))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"routing\" is not an array");
	json_array_foreach(r, i, x)
	{
		const json_t *layer = json_object_get(x, "layer"),
		             *counts = json_object_get(x, "counts");
		if (!json_is_integer(layer) || json_integer_value(layer) < 0 ||
		    json_integer_value(layer) > UINT32_MAX || !json_is_array(counts))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "routing[%zu]: want {\"layer\": n, \"counts\": [...]}", i);
		size_t e;
		const json_t *c;
		json_array_foreach(counts, e, c)
		{
			if (!json_is_integer(c) || json_integer_value(c) < 0)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "routing[%zu].counts[%zu] is not a count", i, e);
			if (shoal_view_set_expert_count(v, (uint32_t)json_integer_value(layer),
			                                (uint32_t)e,
			                                (uint64_t)json_integer_value(c)))
				return shoal_why(why, why_len, SHOAL_ERR_RANGE,
				                 "routing[%zu]: layer or expert out of range", i);
		}
	}
	return SHOAL_OK;
}

static shoal_err from_json(const json_t *j, shoal_view **out, char *why, size_t why_len)
{
	shoal_err e;
	if (!json_is_object(j))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "cluster: not a JSON object");
	const json_t *peers = json_object_get(j, "peers");
	if (!json_is_array(peers) || !json_array_size(peers))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "cluster: \"peers\" must be a non-empty array");
	const json_t *dl = json_object_get(j, "default_link");
	uint64_t dlat = 200000, dbw = 125000000;
	if (dl) {
		if (!json_is_object(dl))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "\"default_link\" is not an object");
		if ((e = read_link_spec(dl, "default_link", &dlat, &dbw, 200, 1, why, why_len)))
			return e;
	}
	shoal_view *v = shoal_view_new(dlat, dbw);
	if (!v)
		return SHOAL_ERR_NOMEM;
	size_t i;
	const json_t *x;
	json_array_foreach(peers, i, x)
	{
		shoal_view_peer vp;
		if ((e = read_peer(x, i, &vp, why, why_len)) ||
		    (e = shoal_view_add_peer(v, &vp, why, why_len)))
			goto fail;
	}
	const json_t *links = json_object_get(j, "links");
	if (links && !json_is_array(links)) {
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"links\" is not an array");
		goto fail;
	}
	json_array_foreach(links, i, x)
	{
		char what[32];
		snprintf(what, sizeof what, "links[%zu]", i);
		shoal_peer_id a, b;
		uint64_t lat, bw;
		if (!json_is_object(x)) {
			e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: not an object", what);
			goto fail;
		}
		if ((e = resolve(peers, json_object_get(x, "a"), &a, what, why, why_len)) ||
		    (e = resolve(peers, json_object_get(x, "b"), &b, what, why, why_len)) ||
		    (e = read_link_spec(x, what, &lat, &bw, (double)dlat / 1000.0,
		                        (double)dbw * 8.0 / 1e9, why, why_len)) ||
		    (e = shoal_view_set_link(v, &a, &b, lat, bw, why, why_len)))
			goto fail;
	}
	const json_t *routing = json_object_get(j, "routing");
	if (routing && (e = read_routing(routing, v, why, why_len)))
		goto fail;
	*out = v;
	return SHOAL_OK;
fail:
	shoal_view_free(v);
	return e;
}

shoal_err shoal_cluster_parse(const char *text, size_t len, shoal_view **out, char *why,
                              size_t why_len)
{
	json_error_t err;
	json_t *j = json_loadb(text, len, 0, &err);
	if (!j)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "cluster: %s at line %d", err.text,
		                 err.line);
	shoal_err e = from_json(j, out, why, why_len);
	json_decref(j);
	return e;
}

shoal_err shoal_cluster_load(const char *path, shoal_view **out, char *why, size_t why_len)
{
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	if (!j)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: %s (line %d)", path, err.text,
		                 err.line);
	shoal_err e = from_json(j, out, why, why_len);
	json_decref(j);
	return e;
}

/* ---- the view as JSON ------------------------------------------------- */

static json_t *link_json(uint64_t lat, uint64_t bw)
{
	return json_pack("{s:f, s:f}", "latency_us", (double)lat / 1000.0, "bandwidth_gbit",
	                 (double)bw * 8.0 / 1e9);
}

static json_t *eff_json(uint32_t bw_pm, uint32_t fl_pm)
{
	return json_pack("{s:f, s:f}", "bandwidth", (bw_pm ? bw_pm : 1000) / 1000.0, "compute",
	                 (fl_pm ? fl_pm : 1000) / 1000.0);
}

json_t *shoal_cluster_to_json(const shoal_view *v)
{
	uint64_t lat, bw;
	shoal_view_default_link(v, &lat, &bw);
	json_t *o = json_object(), *peers = json_array(), *links = json_array(),
	       *routing = json_array();
	int bad = !o || !peers || !links || !routing;
	bad |= bad || json_object_set_new(o, "default_link", link_json(lat, bw));
	for (size_t i = 0; !bad && i < shoal_view_n_peers(v); i++) {
		const shoal_view_peer *p = shoal_view_peer_at(v, i);
		char hex[SHOAL_PEER_ID_HEX_LEN];
		shoal_peer_id_to_hex(&p->id, hex);
		json_t *pj = json_pack("{s:s, s:s, s:I, s:f, s:f, s:i}", "id", hex, "name", p->name,
		                       "memory", (json_int_t)p->mem_bytes, "bandwidth_gbs",
		                       (double)p->mem_bw / 1e9, "compute_gflops",
		                       (double)p->flops / 1e9, "load_pct", (int)p->load_pct);
		if (pj && p->gpu_mem)
			bad |= json_object_set_new(
			    pj, "gpu",
			    json_pack("{s:I, s:f, s:f, s:b, s:s, s:s}", "memory",
			              (json_int_t)p->gpu_mem, "bandwidth_gbs",
			              (double)p->gpu_bw / 1e9, "compute_gflops",
			              (double)p->gpu_flops / 1e9, "unified", p->gpu_unified,
			              "backend", p->gpu_backend, "name", p->gpu_name));
		if (pj && p->mtp)
			bad |= json_object_set_new(pj, "speculate", json_string("mtp"));
		if (pj && (p->hop_ns || p->round_ns))
			bad |=
			    json_object_set_new(pj, "hop_us", json_real((double)p->hop_ns / 1e3)) ||
			    json_object_set_new(pj, "round_us",
			                        json_real((double)p->round_ns / 1e3));
		if (pj && (p->bw_eff_pm || p->fl_eff_pm))
			bad |= json_object_set_new(pj, "efficiency",
			                           eff_json(p->bw_eff_pm, p->fl_eff_pm));
		if (pj && p->gpu_mem && (p->gpu_bw_eff_pm || p->gpu_fl_eff_pm))
			bad |= json_object_set_new(json_object_get(pj, "gpu"), "efficiency",
			                           eff_json(p->gpu_bw_eff_pm, p->gpu_fl_eff_pm));
		bad |= !pj || json_array_append_new(peers, pj);
	}
	for (size_t i = 0; !bad && i < shoal_view_n_links(v); i++) {
		shoal_peer_id a, b;
		char ha[SHOAL_PEER_ID_HEX_LEN], hb[SHOAL_PEER_ID_HEX_LEN];
		shoal_view_link_at(v, i, &a, &b, &lat, &bw);
		shoal_peer_id_to_hex(&a, ha);
		shoal_peer_id_to_hex(&b, hb);
		json_t *l = link_json(lat, bw);
		bad |= !l || json_object_set_new(l, "a", json_string(ha)) ||
		       json_object_set_new(l, "b", json_string(hb)) ||
		       json_array_append_new(links, l);
	}
	for (uint32_t l = 0; !bad && l < shoal_view_count_layers(v); l++) {
		if (!shoal_view_layer_has_counts(v, l))
			continue;
		json_t *counts = json_array();
		bad |= !counts;
		for (uint32_t e = 0; !bad && e < shoal_view_layer_n_counts(v, l); e++) {
			bool known;
			uint64_t c = shoal_view_expert_count(v, l, e, &known);
			bad |= json_array_append_new(counts, json_integer((json_int_t)c));
		}
		bad |= bad || json_array_append_new(routing, json_pack("{s:i, s:o}", "layer",
		                                                       (int)l, "counts", counts));
	}
	bad |= bad || json_object_set(o, "peers", peers) || json_object_set(o, "links", links) ||
	       json_object_set(o, "routing", routing);
	json_decref(peers);
	json_decref(links);
	json_decref(routing);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}
