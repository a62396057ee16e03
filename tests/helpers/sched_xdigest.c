/*
 * tests/helpers/sched_xdigest.c: prints the plan digest (or the error) of a fixed
 * series of scheduling problems, one line each, so that builds for two
 * platforms can be compared line by line (tests/sh/test_sched_arm64.sh: x86-64
 * native vs aarch64 under qemu). Self-contained: the scheduler's sources and
 * base/{err,hex,peer_id,assert}.c only, no JSON, so it cross-compiles
 * without a sysroot.
 * The series: random clusters of 1-12 peers and MoE or dense models (with and
 * without routing counts and spread policy), each planned afresh and again
 * against its own plan after one peer is removed and a faster one added,
 * and once more with tensor groups allowed,
 * then a DeepSeek-V3-sized model (61 layers, 256 experts) on 64 peers.
 */
#include <stdio.h>

#include "tests/unit/test_sched_util.h"

static void line(int i, const char *what, shoal_err e, const shoal_plan *p)
{
	char hex[65];
	if (e) {
		printf("%d %s err %d\n", i, what, (int)e);
		return;
	}
	shoal_digest_hex(shoal_plan_digest(p), hex);
	printf("%d %s %s %llu %llu\n", i, what, hex, (unsigned long long)shoal_plan_predicted_ns(p),
	       (unsigned long long)shoal_plan_moved_bytes(p));
}

static void big(void)
{
	static shoal_manifest_layer layers[61];
	shoal_manifest m;
	memset(&m, 0, sizeof m);
	m.n_layer = 61;
	m.layers = layers;
	for (int l = 0; l < 61; l++) {
		layers[l].bytes = 400000000ULL + 1000003ULL * l;
		layers[l].flops = 2 * layers[l].bytes;
		layers[l].kv_bytes_per_token = 2304;
		layers[l].attn_flops_per_ctx = 294912;
		if (l >= 3) {
			layers[l].n_expert = 256;
			layers[l].n_expert_used = 8;
			layers[l].expert_bytes = 26738688;
			layers[l].expert_flops = 88080384;
		}
	}
	m.embd_bytes = m.head_bytes = 561000000;
	m.head_flops = 1853358080;
	m.act_bytes_per_token = 28672;
	shoal_view *v = shoal_view_new(100000, 1250000000ULL);
	ti_rng r = {64};
	for (int i = 0; i < 64; i++) {
		shoal_view_peer p;
		memset(&p, 0, sizeof p);
		for (int b = 0; b < 16; b++)
			p.id.b[b] = (uint8_t)ti_next(&r);
		p.mem_bytes = ti_range(&r, 16, 256) << 30;
		p.mem_bw = ti_range(&r, 60, 800) * TI_GB;
		p.flops = ti_range(&r, 500, 30000) * TI_GB;
		shoal_view_add_peer(v, &p, NULL, 0);
	}
	for (int l = 3; l < 61; l += 7)
		for (uint32_t e = 0; e < 256; e++)
			shoal_view_set_expert_count(v, (uint32_t)l, e, ti_range(&r, 0, 1000));
	shoal_policy pol;
	shoal_policy_init(&pol);
	for (int spread = 0; spread < 2; spread++) {
		pol.spread_experts = spread;
		shoal_plan *p = NULL;
		shoal_err e = shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0);
		line(spread, "big", e, p);
		shoal_plan_free(p);
	}
	shoal_view_free(v);
}

int main(void)
{
	ti_rng r = {20261202};
	for (int it = 0; it < 300; it++) {
		ti_inst t;
		int n = ti_range(&r, 0, 9) ? (int)ti_range(&r, 1, 6) : (int)ti_range(&r, 9, 12);
		/* one draw per statement: argument order is unspecified in C */
		int L = (int)ti_range(&r, 1, 16);
		bool moe = ti_range(&r, 0, 1);
		ti_random(&t, &r, n, L, moe);
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.ctx = (uint32_t)ti_range(&r, 0, 8192);
		pol.spread_experts = ti_range(&r, 0, 5) == 0;
		shoal_view *v = ti_view(&t, NULL);
		shoal_plan *p = NULL, *q = NULL;
		shoal_err e = shoal_schedule(v, &t.m, &pol, NULL, &p, NULL, 0);
		line(it, "fresh", e, p);
		if (!e) {
			shoal_view_remove_peer(v, &t.p[0].id);
			shoal_view_peer extra = t.p[n - 1];
			extra.id.b[0] ^= 0x5a;
			extra.mem_bw *= 2;
			shoal_view_add_peer(v, &extra, NULL, 0);
			e = shoal_schedule(v, &t.m, &pol, p, &q, NULL, 0);
			line(it, "again", e, q);
		}
		shoal_plan_free(p);
		shoal_plan_free(q);
		/* the same with tensor groups, heads and columns to split (no
		 * draws: the instances above stay as they were) */
		for (int l = 0; l < L; l++) {
			t.m.layers[l].n_head_kv = 8;
			t.m.layers[l].n_ff = 1000 + 37 * (uint32_t)l;
			t.m.layers[l].attn_bytes = t.m.layers[l].bytes / 4;
		}
		pol.tensor_groups = true;
		shoal_view_free(v);
		v = ti_view(&t, NULL);
		p = NULL;
		e = shoal_schedule(v, &t.m, &pol, NULL, &p, NULL, 0);
		line(it, !e && shoal_plan_n_groups(p) ? "tensor-group" : "tensor", e, p);
		shoal_plan_free(p);
		shoal_view_free(v);
	}
	big();
	return 0;
}
