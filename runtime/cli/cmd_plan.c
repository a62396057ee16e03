/*
 * runtime/cli/cmd_plan.c: `shoal plan`: plan a model on a described cluster
 * and print the stages, experts per peer, memory per peer and the predicted
 * time per token, or why it does not fit.
 *
 *   shoal plan --view CLUSTER.json --model (MODEL.gguf|SPEC.json) [--ctx N]
 *              [--sessions N] [--spread-experts] [--tensor] [--json] [--bench N]
 *
 * --tensor lets the scheduler make a stage a tensor group (scheduler/tensor.c):
 * the plan then shows each group's members with their shares of the KV
 * heads, FFN column blocks and experts of the stage's first layer.
 * Part: runtime/ (CLI glue around scheduler/). --bench times N schedule()
 * calls (the only place a clock is read) and prints the mean per plan.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/fmt.h"
#include "models/manifest.h"
#include "models/model.h"
#include "models/spec.h"
#include "runtime/cli/cli.h"
#include "runtime/node/plan_json.h"
#include "scheduler/digest.h"
#include "scheduler/plan.h"

/* Members of a group whose shares the text shows (a wider group is named
 * with its size only). */
#define SHOAL_PLAN_TP_SHOW 64

/* As runtime/node/serve_impl.h's SHOAL_SERVE_DEFAULT_CTX. */
#define SHOAL_PLAN_DEFAULT_CTX 4096u

static void plan_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal plan --view CLUSTER --model (MODEL.gguf|SPEC) [--ctx N]\n"
	        "                  [--sessions N] [--spread-experts] [--tensor] [--json]\n"
	        "                  [--bench N]\n"
	        "       shoal plan --list\n"
	        "Plans a model on a cluster description and prints the stages, experts, memory\n"
	        "per peer and the predicted time per token. CLUSTER and SPEC are JSON files, or\n"
	        "the names of the example clusters and model specs that come with shoal\n"
	        "(--list shows them, e.g. --view mac-studio-x4 --model deepseek-v3.1-q4_k_m);\n"
	        "their formats are described in the specs folder's README.md.\n"
	        "  --ctx N            context tokens each session reserves KV for (default, as\n"
	        "                     shoal node: the model's training context, at most 4096)\n"
	        "  --sessions N       sessions per stage (default, as shoal node: the most of 16,\n"
	        "                     8, 4 that memory holds without a deeper pipeline, else 2\n"
	        "                     or 1)\n"
	        "  --spread-experts   place each MoE layer's experts on several peers\n"
	        "  --tensor           also consider stages run by a tensor group (peers splitting\n"
	        "                     each layer; `shoal node --tensor` runs them)\n"
	        "  --json             the plan as JSON\n"
	        "  --bench N          plan N times and print the time per plan\n"
	        "Data folder: $SHOAL_DATA_DIR, else <the binary's folder>/../share/shoal, else\n"
	        "%s.\n",
	        SHOAL_PKGDATADIR);
}

/* ---- the data that comes with shoal: model specs and example clusters */

static bool ends_with(const char *s, const char *suf);

/* The data folders, best first: $SHOAL_DATA_DIR; <exe>/../share/shoal (an
 * installed or relocated tree, DESTDIR staging included; the source
 * tree's folders first when the binary is the build tree's); the
 * configured pkgdatadir; the source tree's folders. */
static size_t plan_data_dirs(const char *sub, char dirs[5][1100])
{
	size_t n = 0;
	const char *env = getenv("SHOAL_DATA_DIR");
	if (env && *env)
		snprintf(dirs[n++], 1100, "%s/%s", env, sub);
	const char *src = !strcmp(sub, "specs") ? "models/specs" : "scheduler/examples";
	char exe[1024];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (k > 0) {
		exe[k] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			if (!strcmp(exe, SHOAL_BUILDDIR)) /* the binary of a build tree */
				snprintf(dirs[n++], 1100, "%s/%s", SHOAL_SRCDIR, src);
			char *up = strrchr(exe, '/'); /* <prefix>/bin -> <prefix> */
			if (up)
				snprintf(dirs[n++], 1100, "%.*s/share/shoal/%s", (int)(up - exe),
				         exe, sub);
		}
	}
	snprintf(dirs[n++], 1100, "%s/%s", SHOAL_PKGDATADIR, sub);
	snprintf(dirs[n++], 1100, "%s/%s", SHOAL_SRCDIR, src);
	return n;
}

/* NAME as given when it is a file or has a '/'; else NAME(.json) in the
 * first data folder that has it. Writes the path to out; false when none. */
static bool plan_find(const char *name, const char *sub, char *out, size_t cap)
{
	struct stat st;
	if (strchr(name, '/') || stat(name, &st) == 0) {
		snprintf(out, cap, "%s", name);
		return true;
	}
	char dirs[5][1100];
	size_t n = plan_data_dirs(sub, dirs);
	for (size_t i = 0; i < n; i++)
		for (int j = 0; j < 2; j++) {
			int w = snprintf(out, cap, "%s/%s%s", dirs[i], name, j ? ".json" : "");
			if (w > 0 && (size_t)w < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode))
				return true;
		}
	return false;
}

static int plan_name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* --list: the specs and clusters of the first data folder that has each. */
static int plan_list(void)
{
	static const char *const subs[] = {"specs", "clusters"};
	for (size_t s = 0; s < 2; s++) {
		char dirs[5][1100];
		size_t n = plan_data_dirs(subs[s], dirs);
		DIR *d = NULL;
		size_t i = 0;
		for (; i < n && !(d = opendir(dirs[i])); i++)
			;
		if (!d) {
			printf("%s: none found\n", subs[s]);
			continue;
		}
		printf("%s (%s):\n", s ? "example clusters (--view)" : "model specs (--model)",
		       dirs[i]);
		char names[256][128];
		size_t k = 0;
		struct dirent *e;
		while ((e = readdir(d)) && k < 256)
			if (ends_with(e->d_name, ".json") && strlen(e->d_name) < sizeof names[0])
				snprintf(names[k++], sizeof names[0], "%.*s",
				         (int)(strlen(e->d_name) - 5), e->d_name);
		closedir(d);
		qsort(names, k, sizeof names[0], plan_name_cmp);
		for (size_t j = 0; j < k; j++)
			printf("  %s\n", names[j]);
	}
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long x = strtoul(s, &end, 10);
	if (errno || end == s || *end || x > 0xffffffffUL)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* One member's share of n units ("0-7 (8)"), or "-" without units. */
static void share_str(char *b, size_t bl, const shoal_plan_member *mem, uint32_t k, uint32_t j,
                      uint32_t units)
{
	uint64_t w[SHOAL_PLAN_TP_SHOW];
	uint32_t first[SHOAL_PLAN_TP_SHOW], cnt[SHOAL_PLAN_TP_SHOW];
	if (!units) {
		snprintf(b, bl, "-");
		return;
	}
	for (uint32_t i = 0; i < k; i++)
		w[i] = mem[i].weight;
	shoal_plan_split(w, k, units, first, cnt);
	if (!cnt[j])
		snprintf(b, bl, "none");
	else
		snprintf(b, bl, "%u-%u (%u)", first[j], first[j] + cnt[j] - 1, cnt[j]);
}

/* One member's vocab rows, in blocks of SHOAL_PLAN_TP_COLS ("0-31999
 * (32000)"), as the engine splits the head. */
static void rows_str(char *b, size_t bl, const shoal_plan_member *mem, uint32_t k, uint32_t j,
                     uint32_t rows)
{
	uint64_t w[SHOAL_PLAN_TP_SHOW];
	uint32_t first[SHOAL_PLAN_TP_SHOW], cnt[SHOAL_PLAN_TP_SHOW];
	for (uint32_t i = 0; i < k; i++)
		w[i] = mem[i].weight;
	shoal_plan_split(w, k, (rows + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS, first, cnt);
	uint32_t a = first[j] * SHOAL_PLAN_TP_COLS, e = (first[j] + cnt[j]) * SHOAL_PLAN_TP_COLS;
	a = a > rows ? rows : a;
	e = e > rows ? rows : e;
	if (e == a)
		snprintf(b, bl, "none");
	else
		snprintf(b, bl, "%u-%u (%u)", a, e - 1, e - a);
}

/* A tensor group stage: its members and their shares of the stage's first
 * layer (every layer of a model splits alike in practice), and in the last
 * stage of the head's vocab rows. */
static void print_group(const shoal_plan *p, const shoal_manifest *m, size_t st,
                        const shoal_plan_member *mem, uint32_t k)
{
	bool last = st + 1 == shoal_plan_n_stages(p) && m->n_vocab;
	const shoal_plan_stage *s = shoal_plan_stage_at(p, st);
	const shoal_manifest_layer *y = &m->layers[s->first_layer];
	uint32_t blocks = (y->n_ff + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS;
	unsigned __int128 tot = 0;
	for (uint32_t j = 0; j < k; j++)
		tot += mem[j].weight;
	for (uint32_t j = 0; j < k; j++) {
		char h[32], c[32], x[32];
		share_str(h, sizeof h, mem, k, j, y->n_head_kv);
		share_str(c, sizeof c, mem, k, j, blocks);
		share_str(x, sizeof x, mem, k, j, y->n_expert);
		printf("       %-20s share %5.1f%%  KV heads %-12s FFN blocks %-14s experts %s",
		       shoal_plan_peer_at(p, mem[j].peer)->name,
		       (double)mem[j].weight * 100.0 / (double)tot, h, c, x);
		if (last) {
			char v[48];
			rows_str(v, sizeof v, mem, k, j, m->n_vocab);
			printf("  vocab rows %s", v);
		}
		printf("\n");
	}
}

/* The figures the plan assumes, per peer and device: its CPU in host
 * memory and, where it has one, its GPU. */
static void print_devices(const shoal_view *v)
{
	printf("devices (the figures the plan assumes):\n");
	for (size_t i = 0; i < shoal_view_n_peers(v); i++) {
		const shoal_view_peer *vp = shoal_view_peer_at(v, i);
		char b[SHOAL_FMT_BYTES_LEN];
		printf("  %-20s cpu %s, %.0f GB/s, %.0f GFLOP/s\n", vp->name,
		       shoal_fmt_bytes(b, sizeof b, vp->mem_bytes), (double)vp->mem_bw / 1e9,
		       (double)vp->flops / 1e9);
		if (vp->gpu_mem)
			printf("  %-20s gpu %s%s%s%s, %s%s, %.0f GB/s, %.0f GFLOP/s\n", "",
			       vp->gpu_backend, vp->gpu_name[0] ? " (" : "", vp->gpu_name,
			       vp->gpu_name[0] ? ")" : "",
			       shoal_fmt_bytes(b, sizeof b, vp->gpu_mem),
			       vp->gpu_unified ? " of the host's" : "", (double)vp->gpu_bw / 1e9,
			       (double)vp->gpu_flops / 1e9);
	}
}

/* "gpu (vulkan) 0-20, cpu 21-30" after a stage line, when its peer has a
 * GPU part. */
static void print_split(const shoal_plan *p, const shoal_plan_stage *s)
{
	const shoal_plan_peer *pp = shoal_plan_peer_at(p, s->peer);
	if (s->gpu_end == s->first_layer && !pp->gpu_capacity)
		return;
	printf("       on its");
	if (s->gpu_end > s->first_layer)
		printf(" gpu (%s) %u-%u", pp->gpu_backend, s->first_layer, s->gpu_end - 1);
	if (s->gpu_end < s->end_layer)
		printf("%s cpu %u-%u", s->gpu_end > s->first_layer ? "," : "", s->gpu_end,
		       s->end_layer - 1);
	printf("\n");
}

static void print_text(const shoal_plan *p, const shoal_manifest *m, const shoal_spec_info *info,
                       const shoal_policy *pol)
{
	char dh[2 * SHOAL_DIGEST_BYTES + 1]; /* hex and a NUL */
	shoal_digest_hex(shoal_plan_digest(p), dh);
	printf("plan for %s", shoal_plan_name(p));
	if (info)
		printf(" (%.1fB params, %.1fB active, %s at %.3g bits/weight)",
		       (double)info->n_params / 1e9, (double)info->n_params_active / 1e9,
		       info->quant, info->mbits_per_weight / 1000.0);
	printf("\n  KV reserved for %u tokens x %u session%s\n", pol->ctx, pol->sessions,
	       pol->sessions == 1 ? "" : "s");
	size_t ns = shoal_plan_n_stages(p), ng = shoal_plan_n_groups(p);
	if (pol->tensor_groups)
		printf("mix: %zu pipeline stage%s, %zu of them tensor group%s\n", ns,
		       ns == 1 ? "" : "s", ng, ng == 1 ? "" : "s");
	printf("stages:\n");
	for (size_t i = 0; i < ns; i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		shoal_plan_member mem[SHOAL_PLAN_TP_SHOW];
		size_t k = shoal_plan_stage_members(p, i, mem, SHOAL_PLAN_TP_SHOW);
		char grp[40];
		snprintf(grp, sizeof grp, "tensor group of %zu", k);
		printf("  %zu  %-20s layers %3u-%-3u (%u)\n", i,
		       k ? grp : shoal_plan_peer_at(p, s->peer)->name, s->first_layer,
		       s->end_layer - 1, s->end_layer - s->first_layer);
		if (k > SHOAL_PLAN_TP_SHOW)
			printf("       (%zu members: shares not shown above %d)\n", k,
			       SHOAL_PLAN_TP_SHOW);
		else if (k)
			print_group(p, m, i, mem, (uint32_t)k);
		else
			print_split(p, s);
	}
	/* a group's members all embed (the stream is replicated from the
	 * token ids on); a last group splits the head by vocab rows, and its
	 * lead gathers the logits */
	shoal_plan_member m0;
	bool g0 = shoal_plan_stage_members(p, 0, &m0, 1) > 0;
	bool gl = shoal_plan_stage_members(p, ns - 1, &m0, 1) > 0;
	printf("  embedding on %s, head %s %s%s\n",
	       g0 ? "every member of stage 0"
	          : shoal_plan_peer_at(p, shoal_plan_embd_peer(p))->name,
	       gl ? "split by vocab rows over the last stage's members, gathered on" : "on",
	       shoal_plan_peer_at(p, shoal_plan_head_peer(p))->name,
	       shoal_plan_head_gpu(p) ? "'s gpu" : "");
	if (shoal_plan_mtp(p)) { /* a peer offers mtp (the cluster's "speculate") */
		char b[SHOAL_FMT_BYTES_LEN];
		printf("  MTP layer on %s beside the head: %s (weights, its KV%s)\n",
		       shoal_plan_peer_at(p, shoal_plan_head_peer(p))->name,
		       shoal_fmt_bytes(b, sizeof b, shoal_plan_mtp_bytes(p)),
		       m->mtp_shares_embd && !m->tied_head &&
		               shoal_plan_head_peer(p) != shoal_plan_embd_peer(p)
		           ? ", the embedding it shares"
		           : "");
	}
	/* experts: say "with their layers" when every expert sits with its stage */
	bool any = false, with_layer = true;
	for (size_t i = 0; i < shoal_plan_n_stages(p); i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		for (uint32_t l = s->first_layer; l < s->end_layer; l++)
			for (uint32_t e = 0; e < shoal_plan_layer_n_expert(p, l); e++) {
				uint32_t own[SHOAL_PLAN_MAX_OWNERS];
				size_t k = shoal_plan_expert_owners(p, l, e, own);
				any = true;
				if (k != 1 || own[0] != s->peer)
					with_layer = false;
			}
	}
	if (any && with_layer) {
		printf("experts: kept with their layers\n");
	} else if (any) {
		/* counts per peer, one line per run of layers placed alike;
		 * the expert ids are in --json */
		printf("experts per peer (ids in --json):\n");
		size_t np = shoal_plan_n_peers(p);
		uint32_t *cnt = calloc(2 * np, sizeof *cnt);
		if (!cnt)
			return;
		uint32_t *prev = cnt + np, run0 = UINT32_MAX, L = shoal_plan_n_layer(p);
		for (uint32_t l = 0; l <= L; l++) {
			bool moe = l < L && shoal_plan_layer_n_expert(p, l);
			if (moe) {
				memset(cnt, 0, np * sizeof *cnt);
				for (uint32_t e = 0; e < shoal_plan_layer_n_expert(p, l); e++) {
					uint32_t own[SHOAL_PLAN_MAX_OWNERS];
					size_t k = shoal_plan_expert_owners(p, l, e, own);
					for (size_t j = 0; j < k; j++)
						cnt[own[j]]++;
				}
			}
			bool same =
			    moe && run0 != UINT32_MAX && !memcmp(cnt, prev, np * sizeof *cnt);
			if (run0 != UINT32_MAX && !same) {
				printf("  layers %3u-%-3u:", run0, l - 1);
				for (size_t i = 0; i < np; i++)
					if (prev[i])
						printf(" %s %u", shoal_plan_peer_at(p, i)->name,
						       prev[i]);
				printf("\n");
				run0 = UINT32_MAX;
			}
			if (moe && !same) {
				run0 = l;
				memcpy(prev, cnt, np * sizeof *cnt);
			}
		}
		free(cnt);
	}
	printf("memory:\n");
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		char b1[SHOAL_FMT_BYTES_LEN], b2[SHOAL_FMT_BYTES_LEN], b3[SHOAL_FMT_BYTES_LEN],
		    b4[SHOAL_FMT_BYTES_LEN];
		printf("  %-20s weights %10s + KV %10s = %10s of %10s", pp->name,
		       shoal_fmt_bytes(b1, sizeof b1, pp->weight_bytes),
		       shoal_fmt_bytes(b2, sizeof b2, pp->kv_bytes),
		       shoal_fmt_bytes(b3, sizeof b3, pp->weight_bytes + pp->kv_bytes),
		       shoal_fmt_bytes(b4, sizeof b4, pp->capacity_bytes));
		if (pp->n_experts)
			printf(", %u experts", pp->n_experts);
		printf("\n");
		/* a GPU: what it holds, and (discrete) what stays in host memory */
		if (pp->gpu_capacity && pp->gpu_unified)
			printf("  %-20s of it on the gpu %10s of %10s (the host's memory)\n", "",
			       shoal_fmt_bytes(b1, sizeof b1, pp->gpu_bytes),
			       shoal_fmt_bytes(b2, sizeof b2, pp->gpu_capacity));
		else if (pp->gpu_capacity)
			printf("  %-20s of it on the gpu %10s of %10s, in host memory %s\n", "",
			       shoal_fmt_bytes(b1, sizeof b1, pp->gpu_bytes),
			       shoal_fmt_bytes(b2, sizeof b2, pp->gpu_capacity),
			       shoal_fmt_bytes(b3, sizeof b3,
			                       pp->weight_bytes + pp->kv_bytes - pp->gpu_bytes));
	}
	uint64_t t = shoal_plan_predicted_ns(p);
	printf("predicted %.3f ms/token, %.1f tokens/s\n", (double)t / 1e6,
	       t ? 1e9 / (double)t : 0.0);
	printf("epoch %llu, digest %s\n", (unsigned long long)shoal_plan_epoch(p), dh);
}

/* "members" ([{peer, weight}]) on each stage object of a group, and on
 * the head when the last stage is one (the head split by vocab rows). */
static int add_members(json_t *o, const shoal_plan *p)
{
	json_t *st = json_object_get(o, "stages");
	for (size_t i = 0; i < shoal_plan_n_stages(p); i++) {
		shoal_plan_member mem[SHOAL_PLAN_TP_SHOW];
		size_t k = shoal_plan_stage_members(p, i, mem, SHOAL_PLAN_TP_SHOW);
		if (!k)
			continue;
		json_t *arr = json_array(), *so = json_array_get(st, i);
		if (!arr || !so || k > SHOAL_PLAN_TP_SHOW)
			return json_decref(arr), -1;
		for (size_t j = 0; j < k; j++) {
			json_t *x = json_pack("{s:s, s:I}", "peer",
			                      shoal_plan_peer_at(p, mem[j].peer)->name, "weight",
			                      (json_int_t)mem[j].weight);
			if (!x || json_array_append_new(arr, x))
				return json_decref(arr), -1;
		}
		if (json_object_set_new(so, "members", arr))
			return -1;
	}
	size_t last = shoal_plan_n_stages(p) - 1;
	json_t *lm = json_object_get(json_array_get(st, last), "members");
	json_t *head = json_object_get(o, "head");
	if (lm && head && json_object_set_new(head, "members", json_deep_copy(lm)))
		return -1;
	return 0;
}

int shoal_cmd_plan(int argc, char **argv)
{
	const char *view_path = NULL, *model_path = NULL;
	bool json = false;
	uint32_t bench = 0;
	shoal_policy pol;
	shoal_policy_init(&pol);
	/* the defaults of `shoal node` (runtime/node/serve_impl.h) */
	pol.ctx = SHOAL_PLAN_DEFAULT_CTX;
	bool ctx_given = false, sessions_given = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			plan_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--view") && has) {
			view_path = argv[++i];
		} else if (!strcmp(a, "--model") && has) {
			model_path = argv[++i];
		} else if (!strcmp(a, "--ctx") && has) {
			if (parse_u32(argv[++i], &pol.ctx) || !pol.ctx)
				goto usage;
			ctx_given = true;
		} else if (!strcmp(a, "--sessions") && has) {
			if (parse_u32(argv[++i], &pol.sessions) || !pol.sessions)
				goto usage;
			sessions_given = true;
		} else if (!strcmp(a, "--bench") && has) {
			if (parse_u32(argv[++i], &bench) || !bench)
				goto usage;
		} else if (!strcmp(a, "--spread-experts")) {
			pol.spread_experts = true;
		} else if (!strcmp(a, "--tensor")) {
			pol.tensor_groups = true;
		} else if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--list")) {
			return plan_list();
		} else {
			fprintf(stderr, "shoal plan: unknown or incomplete argument '%s'\n", a);
			goto usage;
		}
	}
	if (!view_path || !model_path)
		goto usage;
	char view_buf[1200], model_buf[1200];
	bool gguf = ends_with(model_path, ".gguf");
	if (!plan_find(view_path, "clusters", view_buf, sizeof view_buf)) {
		fprintf(stderr,
		        "shoal plan: --view %s: no such file or example cluster (see --list)\n",
		        view_path);
		return 1;
	}
	if (!gguf && !plan_find(model_path, "specs", model_buf, sizeof model_buf)) {
		fprintf(stderr, "shoal plan: --model %s: no such file or model spec (see --list)\n",
		        model_path);
		return 1;
	}
	view_path = view_buf;
	if (!gguf)
		model_path = model_buf;

	char why[SHOAL_WHY_LEN] = "";
	shoal_view *view = NULL;
	shoal_manifest m = {0};
	shoal_spec_info info;
	shoal_plan *plan = NULL;
	int rc = 1;
	bool from_spec = !gguf;
	shoal_spec_info *pinfo = NULL;
	shoal_err e;
	if (from_spec) {
		e = shoal_spec_load(model_path, &m, &info, why, sizeof why);
		pinfo = &info;
	} else {
		/* a GGUF: only its header is read (the tensors stay mapped, unread) */
		shoal_model *model = NULL;
		e = shoal_model_open(model_path, &model, why, sizeof why);
		if (!e && (e = shoal_model_manifest(model, &m)))
			snprintf(why, sizeof why, "%.*s: %s", SHOAL_WHY_QUOTE(sizeof why, 64),
			         model_path, shoal_strerror(e));
		if (!e && !ctx_given && model->hp.n_ctx_train && model->hp.n_ctx_train < pol.ctx)
			pol.ctx = model->hp.n_ctx_train; /* as a node: the model's, at most 4096 */
		shoal_model_free(model);
	}
	if (e) {
		fprintf(stderr, "shoal plan: %s\n", why);
		goto out;
	}
	e = shoal_cluster_load(view_path, &view, why, sizeof why);
	if (e) {
		fprintf(stderr, "shoal plan: %s\n", why);
		goto out;
	}
	/* without --sessions, as a node: as many as memory holds */
	e = sessions_given ? shoal_schedule(view, &m, &pol, NULL, &plan, why, sizeof why)
	                   : shoal_schedule_sessions(view, &m, &pol, NULL, &plan, why, sizeof why);
	if (e) {
		fprintf(stderr, "shoal plan: cannot plan %s on %s: %s\n", m.name, view_path, why);
		goto out;
	}
	if (bench) {
		uint64_t t0 = shoal_clock_now_ns();
		for (uint32_t i = 0; i < bench; i++) {
			shoal_plan *q = NULL;
			shoal_schedule(view, &m, &pol, NULL, &q, NULL, 0);
			shoal_plan_free(q);
		}
		double dt = (double)(shoal_clock_now_ns() - t0) / 1e9 / bench;
		printf("%zu peers, %s: %.2f ms per plan (mean of %u)\n", shoal_view_n_peers(view),
		       m.name, dt * 1e3, bench);
		rc = 0;
		goto out;
	}
	if (json) {
		json_t *o = shoal_plan_to_json(plan);
		if (o && add_members(o, plan)) {
			json_decref(o);
			o = NULL;
		}
		char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
		json_decref(o);
		if (!s) {
			fprintf(stderr, "shoal plan: out of memory\n");
			goto out;
		}
		printf("%s\n", s);
		free(s);
	} else {
		print_devices(view);
		print_text(plan, &m, pinfo, &pol);
	}
	rc = 0;
out:
	shoal_plan_free(plan);
	shoal_view_free(view);
	if (from_spec)
		shoal_spec_manifest_fini(&m);
	else
		shoal_manifest_fini(&m);
	return rc;
usage:
	plan_usage(stderr);
	return 2;
}
