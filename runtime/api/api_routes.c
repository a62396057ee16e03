/*
 * runtime/api/api_routes.c: the API's routes that are not completions
 * (api_impl.h): the model (/v1/models, /v1/models/{id}), CORS preflights,
 * the cluster's status (/v1/cluster) and Prometheus metrics (/metrics).
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result api__models(shoal_api *a, struct MHD_Connection *c)
{
	char m[256];
	api__model(a, m, sizeof m);
	a->req_ok++;
	if (!m[0]) /* not known yet */
		return api__send_json(a, c, 200, json_pack("{ss s[]}", "object", "list", "data"));
	return api__send_json(a, c, 200,
	                      json_pack("{ss s[{ss ss sI ss}]}", "object", "list", "data", "id", m,
	                                "object", "model", "created", (json_int_t)0, "owned_by",
	                                "shoal"));
}

/* GET /v1/models/{id}: the one model, or 404. */
enum MHD_Result api__model_get(shoal_api *a, struct MHD_Connection *c, const char *id)
{
	char m[256];
	api__model(a, m, sizeof m);
	if (!m[0] || strcmp(id, m))
		return api__fail(a, c, 404, "model", "model_not_found",
		                 "the model '%.*s' is not served here%s%s%s", 128, id,
		                 m[0] ? " (this cluster serves '" : "", m, m[0] ? "')" : "");
	a->req_ok++;
	return api__send_json(a, c, 200,
	                      json_pack("{ss ss sI ss}", "id", m, "object", "model", "created",
	                                (json_int_t)0, "owned_by", "shoal"));
}

/* A CORS preflight (OPTIONS): what a page at the --api-cors origin may send. */
enum MHD_Result api__preflight(shoal_api *a, struct MHD_Connection *c)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	api__headers(a, r);
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
	                        "Authorization, Content-Type, OpenAI-Organization, "
	                        "OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, "
	                        "X-Stainless-OS, X-Stainless-Package-Version, "
	                        "X-Stainless-Runtime, X-Stainless-Runtime-Version, "
	                        "X-Stainless-Retry-Count, X-Stainless-Timeout");
	MHD_add_response_header(r, "Access-Control-Max-Age",
	                        "600"); /* 10 min of cached preflights */
	enum MHD_Result res = MHD_queue_response(c, 204, r);
	MHD_destroy_response(r);
	a->req_ok++;
	return res;
}

enum MHD_Result api__cluster(shoal_api *a, struct MHD_Connection *c)
{
	char *s = a->ops.cluster_json ? a->ops.cluster_json(a->ops.ctx) : NULL;
	if (!s)
		return api__fail(a, c, 503, NULL, NULL, "no cluster view yet");
	a->req_ok++;
	enum MHD_Result r = api__send(a, c, 200, "application/json", s, strlen(s));
	free(s);
	return r;
}

static void metric(char **b, size_t *n, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void metric(char **b, size_t *n, size_t *cap, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int w = vsnprintf(*b ? *b + *n : NULL, *b ? *cap - *n : 0, fmt, ap);
		va_end(ap);
		if (w < 0)
			return;
		if (*b && *n + (size_t)w < *cap) {
			*n += (size_t)w;
			return;
		}
		size_t nc = (*cap ? *cap * 2 : 4096) + (size_t)w;
		char *nb = realloc(*b, nc);
		if (!nb)
			return;
		*b = nb;
		*cap = nc;
	}
}

/* Prometheus text format: this peer's API and stage counters. */
enum MHD_Result api__metrics(shoal_api *a, struct MHD_Connection *c)
{
	shoal_api_gauges g;
	memset(&g, 0, sizeof g);
	if (a->ops.gauges)
		a->ops.gauges(a->ops.ctx, &g);
	char *b = NULL;
	size_t n = 0, cap = 0;
	metric(&b, &n, &cap,
	       "# HELP shoal_requests_total API requests by outcome.\n"
	       "# TYPE shoal_requests_total counter\n"
	       "shoal_requests_total{outcome=\"ok\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"client_error\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"server_error\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"cancelled\"} %" PRIuFAST64 "\n",
	       (uint_fast64_t)a->req_ok, (uint_fast64_t)a->req_client_err,
	       (uint_fast64_t)a->req_server_err, (uint_fast64_t)a->req_cancelled);
	metric(&b, &n, &cap,
	       "# HELP shoal_tokens_generated_total Tokens streamed to API clients.\n"
	       "# TYPE shoal_tokens_generated_total counter\n"
	       "shoal_tokens_generated_total %" PRIuFAST64 "\n"
	       "# HELP shoal_queue_length Requests waiting for a session.\n"
	       "# TYPE shoal_queue_length gauge\nshoal_queue_length %u\n"
	       "# HELP shoal_active_sessions Requests running.\n"
	       "# TYPE shoal_active_sessions gauge\nshoal_active_sessions %u\n",
	       (uint_fast64_t)a->tokens, g.queued, g.running);
	uint32_t conns = 0;
	uint64_t shed_late = 0, shed_room = 0;
	api__guard_counts(a->guard, &conns, &shed_late, &shed_room);
	metric(&b, &n, &cap,
	       "# HELP shoal_api_connections Open API connections.\n"
	       "# TYPE shoal_api_connections gauge\nshoal_api_connections %u\n"
	       "# HELP shoal_api_connections_shed_total Connections closed for a late request "
	       "(slow clients) or to make room.\n"
	       "# TYPE shoal_api_connections_shed_total counter\n"
	       "shoal_api_connections_shed_total{reason=\"late\"} %" PRIu64 "\n"
	       "shoal_api_connections_shed_total{reason=\"room\"} %" PRIu64 "\n",
	       conns, shed_late, shed_room);
	metric(
	    &b, &n, &cap,
	    "# HELP shoal_queue_paused Queued requests paused by a plan change (they go first).\n"
	    "# TYPE shoal_queue_paused gauge\nshoal_queue_paused %u\n"
	    "# HELP shoal_queue_oldest_wait_seconds How long the longest-waiting queued request "
	    "has waited.\n"
	    "# TYPE shoal_queue_oldest_wait_seconds gauge\n"
	    "shoal_queue_oldest_wait_seconds %.6f\n"
	    "# HELP shoal_queue_wait_seconds Waits in the queue of the requests started.\n"
	    "# TYPE shoal_queue_wait_seconds summary\n"
	    "shoal_queue_wait_seconds_sum %.6f\nshoal_queue_wait_seconds_count %" PRIu64 "\n"
	    "# HELP shoal_queue_wait_max_seconds The longest wait in the queue so far.\n"
	    "# TYPE shoal_queue_wait_max_seconds gauge\nshoal_queue_wait_max_seconds %.6f\n",
	    g.queued_paused, (double)g.queue_oldest_us / 1e6, (double)g.wait_sum_us / 1e6, g.wait_n,
	    (double)g.wait_max_us / 1e6);
	metric(&b, &n, &cap,
	       "# HELP shoal_stage_runs_total Engine runs of this peer's stage.\n"
	       "# TYPE shoal_stage_runs_total counter\nshoal_stage_runs_total %" PRIu64 "\n"
	       "# HELP shoal_stage_batched_runs_total Runs with rows of several sessions.\n"
	       "# TYPE shoal_stage_batched_runs_total counter\n"
	       "shoal_stage_batched_runs_total %" PRIu64 "\n"
	       "# HELP shoal_stage_rows_total Rows run by this peer's stage.\n"
	       "# TYPE shoal_stage_rows_total counter\nshoal_stage_rows_total %" PRIu64 "\n"
	       "# HELP shoal_hop_frames_total Frames this stage sent on (hidden states, results).\n"
	       "# TYPE shoal_hop_frames_total counter\n"
	       "shoal_hop_frames_total{kind=\"hidden\"} %" PRIu64 "\n"
	       "shoal_hop_frames_total{kind=\"token\"} %" PRIu64 "\n"
	       "# HELP shoal_hop_bytes_total Bytes of the hidden-state frames this stage sent.\n"
	       "# TYPE shoal_hop_bytes_total counter\nshoal_hop_bytes_total %" PRIu64 "\n"
	       "# HELP shoal_stage_step_seconds The latest run of this peer's stage.\n"
	       "# TYPE shoal_stage_step_seconds gauge\nshoal_stage_step_seconds %.9f\n",
	       g.stage_runs, g.stage_batched_runs, g.stage_rows, g.hidden_frames, g.token_frames,
	       g.hidden_bytes, (double)g.stage_last_run_ns / 1e9);
	metric(&b, &n, &cap,
	       "# HELP shoal_prefix_hits_total Sessions this stage started from kept KV.\n"
	       "# TYPE shoal_prefix_hits_total counter\nshoal_prefix_hits_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_hit_tokens_total Prompt positions this stage did not compute.\n"
	       "# TYPE shoal_prefix_hit_tokens_total counter\n"
	       "shoal_prefix_hit_tokens_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_evictions_total Kept sessions this stage freed for room.\n"
	       "# TYPE shoal_prefix_evictions_total counter\n"
	       "shoal_prefix_evictions_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_entries Ended sessions whose KV this stage keeps.\n"
	       "# TYPE shoal_prefix_entries gauge\nshoal_prefix_entries %" PRIu64 "\n"
	       "# HELP shoal_prefix_tokens Positions of KV kept in the prefix cache.\n"
	       "# TYPE shoal_prefix_tokens gauge\nshoal_prefix_tokens %" PRIu64 "\n"
	       "# HELP shoal_prefix_bytes Bytes of KV kept in the prefix cache.\n"
	       "# TYPE shoal_prefix_bytes gauge\nshoal_prefix_bytes %" PRIu64 "\n",
	       g.prefix_hits, g.prefix_hit_tokens, g.prefix_evictions, g.prefix_entries,
	       g.prefix_tokens, g.prefix_bytes);
	metric(&b, &n, &cap,
	       "# HELP shoal_spec_drafted_total Token ids drafted for this peer's sessions.\n"
	       "# TYPE shoal_spec_drafted_total counter\nshoal_spec_drafted_total %" PRIu64 "\n"
	       "# HELP shoal_spec_accepted_total Drafted ids kept (tokens without a step).\n"
	       "# TYPE shoal_spec_accepted_total counter\nshoal_spec_accepted_total %" PRIu64 "\n",
	       g.spec_drafted, g.spec_accepted);
	/* prediction beside measurement; a figure not known is left out */
	static const char *const tm[4][2] = {
	    {"shoal_plan_predicted_seconds_per_token", "The plan's predicted time per token."},
	    {"shoal_decode_step_seconds",
	     "Median of the recent decode steps of the sessions this peer owns."},
	    {"shoal_stage_predicted_seconds", "The plan's predicted time of this peer's stage."},
	    {"shoal_stage_decode_seconds", "Median of this peer's stage's recent decode runs."}};
	const uint64_t tv[4] = {g.pred_step_ns, g.step_ns, g.stage_pred_ns, g.stage_run_ns};
	for (int k = 0; k < 4; k++)
		if (tv[k])
			metric(&b, &n, &cap, "# HELP %s %s\n# TYPE %s gauge\n%s %.9f\n", tm[k][0],
			       tm[k][1], tm[k][0], tm[k][0], (double)tv[k] / 1e9);
	/* gossip state and link RTT per peer, from the cluster view */
	char *cj = a->ops.cluster_json ? a->ops.cluster_json(a->ops.ctx) : NULL;
	json_t *v = cj ? json_loads(cj, 0, NULL) : NULL;
	free(cj);
	json_t *peers = json_object_get(v, "peers");
	size_t i;
	json_t *p;
	metric(&b, &n, &cap,
	       "# HELP shoal_peer_state Gossip state of each peer (1 for its state).\n"
	       "# TYPE shoal_peer_state gauge\n");
	json_array_foreach(peers, i, p)
	{
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *st = json_string_value(json_object_get(p, "state"));
		metric(&b, &n, &cap, "shoal_peer_state{peer=\"%s\",state=\"%s\"} 1\n",
		       name ? name : "?", st ? st : "?");
	}
	metric(&b, &n, &cap,
	       "# HELP shoal_link_rtt_seconds Measured round trip to a peer.\n"
	       "# TYPE shoal_link_rtt_seconds gauge\n");
	json_array_foreach(peers, i, p)
	{
		if (!json_is_true(json_object_get(p, "self")))
			continue;
		size_t j;
		json_t *l;
		json_array_foreach(json_object_get(p, "links"), j, l)
		{
			const char *to = json_string_value(json_object_get(l, "peer"));
			json_t *rtt = json_object_get(l, "rtt_us");
			if (to && json_is_integer(rtt))
				metric(&b, &n, &cap,
				       "shoal_link_rtt_seconds{peer=\"%.32s\"} %.6f\n", to,
				       (double)json_integer_value(rtt) / 1e6);
		}
	}
	json_decref(v);
	a->req_ok++;
	enum MHD_Result r = api__send(a, c, 200, "text/plain; version=0.0.4", b ? b : "", n);
	free(b);
	return r;
}
