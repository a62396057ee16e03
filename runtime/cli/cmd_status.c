/*
 * runtime/cli/cmd_status.c: `shoal status`: the cluster view, asked of a node
 * over the authenticated control plane (a STATUS_REQ, net/ctlmsg.h).
 *
 *   shoal status [--peer HOST[:PORT]] [--key FILE] [--insecure] [--json]
 *                [--state-dir D] [--timeout-ms MS]
 *
 * Without --peer it asks the local node, found through <state-dir>/control
 * (written by `shoal node`). The key is --key, else <state-dir>/cluster.key;
 * a local node that runs --insecure (its control file says so) is asked
 * without one. Exit status: 0 answered, 1 no answer / refused, 2 usage.
 *
 * --json prints one object (stable; tests and tools parse it):
 *   {"self": ID, "name": NAME, "cluster": NAME, "insecure": BOOL,
 *    "peers": [ {                      -- in id order, ourselves included
 *       "id": 32 hex, "name", "state": "alive"|"suspect"|"dead"|"left",
 *       "incarnation": N, "self": BOOL, "compatible": BOOL,
 *       "why_incompatible": TEXT (only when not compatible),
 *       "record_version", "cluster", "version", "protocol_version",
 *       "scheduler_version", "control_endpoint",
 *       "mem_total": bytes, "mem_weights": bytes available for weights,
 *       "compute_gb_s", "compute_gflops", "cores", "os", "arch", "load",
 *       "data_endpoints": [{"kind","interface","address","rdma"}],
 *       "rdma_devices": [names], "models": [{"model_id","path","bytes"}],
 *       "data_suspects": [IDs whose data plane it finds failing],
 *       "devices": [{"backend", "kind" ("cpu"|"gpu"), "name", "unified",
 *                    "software", "mem_bytes", "read_gb_s", "gflops"}]
 *                  (the CPU first),
 *       "links": [{"peer": ID, "local_endpoint", "remote_endpoint",
 *                  "rtt_us", "bandwidth_bytes_s"}] } ],
 *    "plan": {...} }                 -- only from a node serving a model:
 *   runtime/node/serve.h: "servable", "digest" (null without a plan), "epoch",
 *   "why", "stages", "experts", "memory" (runtime/node/plan_json.h), "ready" and
 *   "not_ready" (peer ids), "left_out" [{"peer", "name", "why"}], "links"
 *   [{"peer", "transport"}] (the data links this node opened).
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/fmt.h"
#include "base/statedir.h"
#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/endpoint.h"
#include "net/key.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/node/node.h"

static void cmd_status_usage(FILE *f)
{
	fprintf(f, "usage: shoal status [--peer HOST[:PORT]] [--key FILE] [--insecure] [--json]\n"
	           "                    [--state-dir D] [--timeout-ms MS]\n"
	           "Asks a peer for its view of the cluster: every peer with its state, memory,\n"
	           "speed and links, the plan (stages, experts, sessions) and whether it is\n"
	           "servable, and why not. Without --peer it asks the node of this machine (found\n"
	           "through its state directory).\n"
	           "  --peer HOST[:PORT]     the peer to ask (control port, default 47470)\n"
	           "  --key FILE             the cluster key (default: <state-dir>/cluster.key)\n"
	           "  --insecure             ask a cluster that runs without a key\n"
	           "  --json                 the whole status as JSON (described in README.md)\n"
	           "  --state-dir D          the local node's state directory\n"
	           "  --timeout-ms MS        give up after MS (default 3000)\n");
}

/* Read "endpoint X" and "insecure N" from <dir>/control. */
static int cmd_status_control(const char *dir, char *ep, size_t cap, int *insecure)
{
	char path[1100], line[256];
	snprintf(path, sizeof path, "%s/%s", dir, SHOAL_NODE_CONTROL_FILE);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	ep[0] = '\0';
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (!strncmp(line, "endpoint ", 9))
			snprintf(ep, cap, "%s", line + 9);
		else if (!strncmp(line, "insecure ", 9))
			*insecure = atoi(line + 9) != 0;
	}
	fclose(f);
	return ep[0] ? 0 : -1;
}

static const char *cmd_status_str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "?";
}

static double cmd_status_num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

/* A peer's devices past the CPU (its GB/s are the table's): one line each,
 * "    gpu: vulkan 'NAME', 24.0 GiB, 800.0 GB/s, 61000 GFLOP/s". */
static void cmd_status_print_devices(json_t *dv)
{
	for (size_t i = 1; i < json_array_size(dv); i++) {
		json_t *d = json_array_get(dv, i);
		char mem[SHOAL_FMT_BYTES_LEN];
		json_int_t m = json_integer_value(json_object_get(d, "mem_bytes"));
		printf("    %s: %s '%s', %s%s, %.1f GB/s, %.0f GFLOP/s%s\n",
		       cmd_status_str(d, "kind"), cmd_status_str(d, "backend"),
		       cmd_status_str(d, "name"), shoal_fmt_bytes(mem, sizeof mem, (uint64_t)m),
		       json_is_true(json_object_get(d, "unified")) ? " of the host's" : "",
		       cmd_status_num(d, "read_gb_s"), cmd_status_num(d, "gflops"),
		       json_is_true(json_object_get(d, "software")) ? " (software)" : "");
	}
}

/* The human view: a table of peers, then the link matrix (RTT in us, the
 * best endpoint pair; bandwidth in MB/s where measured). */
static void cmd_status_print(json_t *root)
{
	json_t *peers = json_object_get(root, "peers");
	size_t n = json_array_size(peers);
	printf("cluster '%s'%s, seen from %s: %zu peer(s)\n", cmd_status_str(root, "cluster"),
	       json_is_true(json_object_get(root, "insecure")) ? " (INSECURE)" : "",
	       cmd_status_str(root, "name"), n);
	printf("%-3s %-16s %-8s %-8s %5s %19s %9s %5s %-14s %s\n", "#", "NAME", "ID", "STATE",
	       "INC", "MEM OFFERED/TOTAL", "GB/s", "CORES", "OS/ARCH", "CONTROL");
	for (size_t i = 0; i < n; i++) {
		json_t *p = json_array_get(peers, i);
		char osarch[48];
		snprintf(osarch, sizeof osarch, "%s/%s", cmd_status_str(p, "os"),
		         cmd_status_str(p, "arch"));
		char mem[2 * SHOAL_FMT_BYTES_LEN], mw[SHOAL_FMT_BYTES_LEN], mt[SHOAL_FMT_BYTES_LEN];
		json_int_t w = json_integer_value(json_object_get(p, "mem_weights")),
		           t = json_integer_value(json_object_get(p, "mem_total"));
		snprintf(mem, sizeof mem, "%s/%s", shoal_fmt_bytes(mw, sizeof mw, (uint64_t)w),
		         shoal_fmt_bytes(mt, sizeof mt, (uint64_t)t));
		printf("%-3zu %-16.16s %-8.8s %-8s %5" JSON_INTEGER_FORMAT
		       " %19s %9.2f %5d %-14.14s %s%s\n",
		       i, cmd_status_str(p, "name"), cmd_status_str(p, "id"),
		       cmd_status_str(p, "state"),
		       json_integer_value(json_object_get(p, "incarnation")), mem,
		       cmd_status_num(p, "compute_gb_s"),
		       (int)json_integer_value(json_object_get(p, "cores")), osarch,
		       cmd_status_str(p, "control_endpoint"),
		       json_is_true(json_object_get(p, "self")) ? "  (this peer)" : "");
		if (json_is_false(json_object_get(p, "compatible")))
			printf("    left out of planning: %s\n",
			       cmd_status_str(p, "why_incompatible"));
		cmd_status_print_devices(json_object_get(p, "devices"));
	}
	printf("\nlinks (row -> column): RTT us / MB/s, best endpoint pair\n%-14s", "");
	for (size_t j = 0; j < n; j++)
		printf(" %14.14s", cmd_status_str(json_array_get(peers, j), "name"));
	printf("\n");
	for (size_t i = 0; i < n; i++) {
		json_t *links = json_object_get(json_array_get(peers, i), "links");
		printf("%-14.14s", cmd_status_str(json_array_get(peers, i), "name"));
		for (size_t j = 0; j < n; j++) {
			const char *to = cmd_status_str(json_array_get(peers, j), "id");
			double best_rtt = 0, bw = 0;
			for (size_t k = 0; k < json_array_size(links); k++) {
				json_t *l = json_array_get(links, k);
				if (strcmp(cmd_status_str(l, "peer"), to))
					continue;
				double rtt = cmd_status_num(l, "rtt_us");
				if (best_rtt == 0 || rtt < best_rtt) {
					best_rtt = rtt;
					bw = cmd_status_num(l, "bandwidth_bytes_s");
				}
			}
			char cell[32];
			if (i == j)
				snprintf(cell, sizeof cell, "-");
			else if (best_rtt == 0)
				snprintf(cell, sizeof cell, "?");
			else if (bw > 0)
				snprintf(cell, sizeof cell, "%.0f/%.0f", best_rtt, bw / 1e6);
			else
				snprintf(cell, sizeof cell, "%.0f", best_rtt);
			printf(" %14s", cell);
		}
		printf("\n");
	}
}

/* The plan of a node that serves a model: stages with readiness, experts
 * per peer and layer, data links, peers left out. */
static void cmd_status_print_plan(json_t *plan)
{
	json_t *stages = json_object_get(plan, "stages"), *ready = json_object_get(plan, "ready");
	const char *digest = json_string_value(json_object_get(plan, "digest"));
	const char *why = json_string_value(json_object_get(plan, "why"));
	if (!digest) {
		printf("\nplan: none: %s\n", why ? why : "?");
	} else {
		printf("\nplan %.16s (epoch %" JSON_INTEGER_FORMAT
		       ") of %s: %s%s%s, %.2f ms/token predicted\n",
		       digest, json_integer_value(json_object_get(plan, "epoch")),
		       cmd_status_str(plan, "model"),
		       json_is_true(json_object_get(plan, "servable")) ? "servable"
		                                                       : "NOT servable",
		       why ? ": " : "", why ? why : "",
		       cmd_status_num(plan, "predicted_ms_per_token"));
	}
	for (size_t i = 0; i < json_array_size(stages); i++) {
		json_t *st = json_array_get(stages, i);
		const char *id = cmd_status_str(st, "peer");
		int is_ready = 0;
		for (size_t k = 0; k < json_array_size(ready); k++) {
			const char *r = json_string_value(json_array_get(ready, k));
			is_ready |= r && !strcmp(r, id);
		}
		printf("  stage %zu  %-16.16s %.8s  layers [%" JSON_INTEGER_FORMAT
		       ", %" JSON_INTEGER_FORMAT ")  %s\n",
		       i, cmd_status_str(st, "name"), id,
		       json_integer_value(json_object_get(st, "first_layer")),
		       json_integer_value(json_object_get(st, "end_layer")),
		       is_ready ? "ready" : "not ready");
		/* its layers by device, where a GPU has some */
		json_t *dv = json_object_get(st, "devices");
		bool gpu = false;
		for (size_t j = 0; j < json_array_size(dv); j++)
			gpu |= !strcmp(cmd_status_str(json_array_get(dv, j), "device"), "gpu");
		for (size_t j = 0; gpu && j < json_array_size(dv); j++) {
			json_t *d = json_array_get(dv, j);
			printf("%s%s (%s) [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT ")%s",
			       j ? ", " : "           on its ", cmd_status_str(d, "device"),
			       cmd_status_str(d, "backend"),
			       json_integer_value(json_object_get(d, "first_layer")),
			       json_integer_value(json_object_get(d, "end_layer")),
			       j + 1 == json_array_size(dv) ? "\n" : "");
		}
		json_t *ms = json_object_get(st, "members"); /* a tensor group */
		for (size_t j = 0; j < json_array_size(ms); j++) {
			json_t *mj = json_array_get(ms, j);
			printf("%s%s %.1f%%%s",
			       j ? ", " : "           tensor group: ", cmd_status_str(mj, "name"),
			       100.0 * json_real_value(json_object_get(mj, "share")),
			       j + 1 == json_array_size(ms) ? "\n" : "");
		}
	}
	json_t *pol = json_object_get(plan, "policy");
	if (pol)
		printf("  policy: ctx %" JSON_INTEGER_FORMAT
		       ", sessions %s, experts %s, tensor groups "
		       "%s, links assumed %" JSON_INTEGER_FORMAT
		       " us (every peer must give the same)\n",
		       json_integer_value(json_object_get(pol, "ctx")),
		       json_integer_value(json_object_get(pol, "sessions")) ? "given"
		                                                            : "from memory",
		       json_is_true(json_object_get(pol, "spread_experts")) ? "spread" : "kept",
		       json_is_true(json_object_get(pol, "tensor_groups")) ? "on" : "off",
		       json_integer_value(json_object_get(pol, "link_us")));
	json_t *ex = json_object_get(plan, "experts");
	for (size_t i = 0; i < json_array_size(ex); i++) {
		json_t *l = json_array_get(ex, i), *own = json_object_get(l, "owners");
		printf("  experts of layer %" JSON_INTEGER_FORMAT ":",
		       json_integer_value(json_object_get(l, "layer")));
		for (size_t j = 0; j < json_array_size(own); j++) {
			json_t *o = json_array_get(own, j);
			printf(" %s x%zu", cmd_status_str(o, "name"),
			       json_array_size(json_object_get(o, "experts")));
		}
		printf("\n");
	}
	json_t *links = json_object_get(plan, "links");
	for (size_t i = 0; i < json_array_size(links); i++) {
		json_t *l = json_array_get(links, i);
		printf("  data link to %.8s: %s\n", cmd_status_str(l, "peer"),
		       cmd_status_str(l, "transport"));
	}
	/* the prediction beside what this peer measured (runtime/node/timing.h) */
	json_t *tm = json_object_get(plan, "timing"), *ts = json_object_get(tm, "stage");
	if (cmd_status_num(tm, "measured_ms_per_token") > 0)
		printf("  measured %.2f ms/token (median of recent decode steps), predicted %.2f\n",
		       cmd_status_num(tm, "measured_ms_per_token"),
		       cmd_status_num(tm, "predicted_ms_per_token"));
	if (json_is_object(ts) && cmd_status_num(ts, "measured_ms") > 0)
		printf("  stage %.0f here: measured %.2f ms a decode run, predicted %.2f\n",
		       cmd_status_num(ts, "index"), cmd_status_num(ts, "measured_ms"),
		       cmd_status_num(ts, "predicted_ms"));
	/* this peer's stage's prefix cache (runtime/dist/dist.h) */
	json_t *pc = json_object_get(json_object_get(json_object_get(plan, "data"), "stage"),
	                             "prefix_cache");
	if (json_is_object(pc)) {
		char kb[32];
		printf("  prefix cache: %.0f hit(s), %.0f token(s) reused, %.0f eviction(s); "
		       "%.0f session(s) kept, %.0f token(s), %s\n",
		       cmd_status_num(pc, "hits"), cmd_status_num(pc, "hit_tokens"),
		       cmd_status_num(pc, "evictions"), cmd_status_num(pc, "entries"),
		       cmd_status_num(pc, "tokens"),
		       shoal_fmt_bytes(kb, sizeof kb, (uint64_t)cmd_status_num(pc, "bytes")));
	}
	/* speculation of the sessions this peer owns (runtime/dist/dist.h) */
	json_t *sp =
	    json_object_get(json_object_get(json_object_get(plan, "data"), "owner"), "spec");
	if (json_is_object(sp) && cmd_status_num(sp, "drafted") > 0) {
		double dr = cmd_status_num(sp, "drafted"), ac = cmd_status_num(sp, "accepted");
		printf("  speculation: %.0f id(s) drafted, %.0f kept (%.0f%%) in %.0f step(s); "
		       "%.0f pause(s)\n",
		       dr, ac, 100.0 * ac / dr, cmd_status_num(sp, "steps"),
		       cmd_status_num(sp, "pauses"));
	}
	json_t *left = json_object_get(plan, "left_out");
	for (size_t i = 0; i < json_array_size(left); i++) {
		json_t *l = json_array_get(left, i);
		printf("  left out: %s (%.8s): %s\n", cmd_status_str(l, "name"),
		       cmd_status_str(l, "peer"), cmd_status_str(l, "why"));
	}
}

int shoal_cmd_status(int argc, char **argv)
{
	enum { O_PEER = 256, O_KEY, O_INSECURE, O_JSON, O_STATE, O_TIMEOUT };
	static const struct option opts[] = {
	    {"peer", required_argument, NULL, O_PEER},
	    {"key", required_argument, NULL, O_KEY},
	    {"insecure", no_argument, NULL, O_INSECURE},
	    {"json", no_argument, NULL, O_JSON},
	    {"state-dir", required_argument, NULL, O_STATE},
	    {"timeout-ms", required_argument, NULL, O_TIMEOUT},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *peer = NULL, *key_file = NULL, *state_dir = NULL;
	int insecure = 0, as_json = 0, timeout_ms = 3000, c;
	char dir[1024], ep[256], why[SHOAL_WHY_WRAP_LEN] = "";
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_PEER:
			peer = optarg;
			break;
		case O_KEY:
			key_file = optarg;
			break;
		case O_INSECURE:
			insecure = 1;
			break;
		case O_JSON:
			as_json = 1;
			break;
		case O_STATE:
			state_dir = optarg;
			break;
		case O_TIMEOUT:
			timeout_ms = atoi(optarg);
			break;
		case 'h':
			cmd_status_usage(stdout);
			return 0;
		default:
			cmd_status_usage(stderr);
			return 2;
		}
	}
	if (optind < argc || timeout_ms <= 0) {
		cmd_status_usage(stderr);
		return 2;
	}
	if (state_dir)
		snprintf(dir, sizeof dir, "%s", state_dir);
	else if (shoal_state_dir_default(dir, sizeof dir) != SHOAL_OK)
		dir[0] = '\0';
	if (peer) {
		if (shoal_endpoint_parse(peer, SHOAL_CTL_DEFAULT_PORT, ep, sizeof ep, why,
		                         sizeof why) != SHOAL_OK) {
			fprintf(stderr, "shoal status: %s\n", why);
			return 2;
		}
	} else if (cmd_status_control(dir, ep, sizeof ep, &insecure) != 0) {
		fprintf(stderr,
		        "shoal status: no local node found (no %s/%s); is `shoal node` running? "
		        "Use --peer HOST[:PORT] or --state-dir D\n",
		        dir, SHOAL_NODE_CONTROL_FILE);
		return 1;
	}
	shoal_key_curve curve, *keys = NULL;
	char fp[17];
	if (!cli__client_key("status", key_file, insecure, dir[0] ? dir : NULL, &curve, &keys, fp))
		return 1;
	json_t *root = cli__status_fetch("status", ep, keys, fp, timeout_ms);
	shoal_key_wipe(&curve, sizeof curve);
	if (!root)
		return 1;
	if (as_json) {
		char *s = json_dumps(root, JSON_INDENT(2));
		if (s)
			printf("%s\n", s);
		free(s);
	} else {
		cmd_status_print(root);
		if (json_is_object(json_object_get(root, "plan")))
			cmd_status_print_plan(json_object_get(root, "plan"));
	}
	json_decref(root);
	return 0;
}
