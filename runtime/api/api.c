/*
 * runtime/api/api.c: the OpenAI-compatible HTTP API (api.h) on libmicrohttpd
 * (a thread per connection) and jansson: the daemon, its routes and the
 * key. A completion is api_complete.c's (a run per choice, the whole reply)
 * and api_stream.c's (server-sent events); the other routes are
 * api_routes.c's; api_impl.h lists the files.
 *
 * Divisions: the routes; a request's end; the daemon.
 */
#include "config.h"

#include "runtime/api/api.h"
#include "runtime/api/api_guard.h"
#include "runtime/api/api_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

#define LOG_PART "api"
/* Connections one client address may hold: 3/4 of the limit (96 of the
 * default 128), so that one address never takes all (a proxy in front of
 * many users, or a test's 64 streams and its own requests, still fit);
 * slow clients spread over many addresses are the guard's (api_guard.c). */
#define API_PER_IP_CONNS(max_conns) ((max_conns) / 4u * 3u)

/* runtime/api/dashboard.html, built in (runtime/api/api.am) */
extern const char shoal_api_dashboard[];

/* ----------------------------------------------------------------- the routes */

static bool api_authorized(shoal_api *a, struct MHD_Connection *c)
{
	if (!a->key)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncmp(h, "Bearer ", 7))
		return false;
	const char *k = h + 7;
	size_t n = strlen(a->key);
	/* same time whatever the first difference */
	unsigned char d = strlen(k) != n;
	for (size_t i = 0; i < n && k[i]; i++)
		d |= (unsigned char)(k[i] ^ a->key[i]);
	return !d;
}

static enum MHD_Result api_access(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	(void)version;
	shoal_api *a = cls;
	api__conn *k = *con_cls;
	if (!k) {
		k = calloc(1, sizeof *k);
		if (!k)
			return MHD_NO;
		k->a = a;
		*con_cls = k;
		api__guard_set(a->guard, c, API__GUARD_BODY); /* the headers are in */
		return MHD_YES;
	}
	if (*upload_size) {
		if (k->len + *upload_size > a->cfg.max_body) {
			k->too_big = true;
		} else {
			char *b = realloc(k->body, k->len + *upload_size + 1);
			if (!b)
				return MHD_NO;
			memcpy(b + k->len, upload, *upload_size);
			k->body = b;
			k->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	api__guard_set(a->guard, c, API__GUARD_SERVE); /* the request is in */
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	if (!strcmp(url, "/") && get) { /* the page asks for the key itself */
		a->req_ok++;
		return api__send(a, c, 200, "text/html; charset=utf-8", shoal_api_dashboard,
		                 strlen(shoal_api_dashboard));
	}
	if (!strcmp(method, "OPTIONS") && a->cors) /* preflights carry no key */
		return api__preflight(a, c);
	if (!strcmp(url, "/health") && get) {
		a->req_ok++;
		return api__send(a, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
	}
	if (!api_authorized(a, c))
		return api__fail(a, c, 401, NULL, "invalid_api_key",
		                 "a valid API key is needed (Authorization: Bearer KEY)");
	if (k->too_big)
		return api__fail(a, c, 413, NULL, NULL, "the body is larger than %zu bytes",
		                 a->cfg.max_body);
	if (!strcmp(url, "/v1/models") && get)
		return api__models(a, c);
	if (!strncmp(url, "/v1/models/", 11) && url[11] && get)
		return api__model_get(a, c, url + 11);
	if (!strcmp(url, "/v1/cluster") && get)
		return api__cluster(a, c);
	if (!strcmp(url, "/metrics") && get)
		return api__metrics(a, c);
	if (!strcmp(url, "/v1/chat/completions") && post)
		return api__complete(a, c, k, true);
	if (!strcmp(url, "/v1/completions") && post)
		return api__complete(a, c, k, false);
	bool known = !strcmp(url, "/v1/models") || !strcmp(url, "/v1/cluster") ||
	             !strcmp(url, "/metrics") || !strcmp(url, "/v1/chat/completions") ||
	             !strcmp(url, "/v1/completions");
	if (known)
		return api__fail(a, c, 405, NULL, NULL, "%s does not take %s", url, method);
	return api__fail(a, c, 404, NULL, NULL, "no such route: %s %s", method, url);
}

/* ------------------------------------------------------------ a request's end */

/* The connection's request is over (done, or the client went away). */
static void api_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
	shoal_api *a = cls;
	api__conn *k = *con_cls;
	if (!k)
		return;
	api__guard_set(a->guard, c, API__GUARD_HEAD); /* kept alive: the next request's deadline */
	api__conn_end(a, k, toe);
	free(k->body);
	free(k->out);
	free(k);
	*con_cls = NULL;
}

/* ----------------------------------------------------------------- the daemon */

shoal_err shoal_api_start(const shoal_api_config *cfg, const shoal_api_ops *ops, shoal_api **out,
                          char *why, size_t why_len)
{
	*out = NULL;
	shoal_api *a = calloc(1, sizeof *a);
	if (!a)
		return SHOAL_ERR_NOMEM;
	a->cfg = *cfg;
	a->ops = *ops;
	a->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
	a->key = cfg->key ? strdup(cfg->key) : NULL;
	a->cors = cfg->cors ? strdup(cfg->cors) : NULL;
	snprintf(a->model, sizeof a->model, "%s", cfg->model ? cfg->model : "");
	if (pthread_mutex_init(&a->model_mu, NULL) != 0) {
		free(a);
		return SHOAL_ERR_NOMEM;
	}
	if (!a->cfg.max_body)
		a->cfg.max_body = 1u << 20;
	if (!a->cfg.max_conns) /* above the node's queue: a full queue answers 429 */
		a->cfg.max_conns = 128;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
	if (!a->host || (cfg->key && !a->key) || (cfg->cors && !a->cors)) {
		shoal_api_stop(a);
		return SHOAL_ERR_NOMEM;
	}
	if (inet_pton(AF_INET, a->host, &sa.sin_addr) != 1) {
		shoal_api_stop(a);
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "API address %s is not IPv4",
		                 cfg->host);
	}
	shoal_err ge = api__guard_new(a->cfg.max_conns, &a->guard, why, why_len);
	if (ge) {
		shoal_api_stop(a);
		return ge;
	}
	/* no MHD_USE_ERROR_LOG: a client that goes away mid-stream is normal.
	 * Slow clients: at most API_PER_IP_CONNS connections an address, and
	 * the guard's deadlines and room (api_guard.c); the idle timeout
	 * covers a reply nobody reads. */
	a->d = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
	    api_access, a, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT, a->cfg.max_conns,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, API_PER_IP_CONNS(a->cfg.max_conns),
	    MHD_OPTION_NOTIFY_COMPLETED, api_completed, a, MHD_OPTION_NOTIFY_CONNECTION,
	    api__guard_notify, a->guard, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
	    MHD_OPTION_END);
	if (!a->d) {
		int e = errno;
		shoal_api_stop(a);
		return shoal_why(
		    why, why_len, SHOAL_ERR_IO, "cannot listen for the API on %s:%u: %s",
		    cfg->host ? cfg->host : "127.0.0.1", (unsigned)cfg->port, strerror(e));
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
	a->port = info ? info->port : cfg->port;
	SHOAL_LOG_I(LOG_PART, "OpenAI-compatible API on http://%s:%u/v1 (model '%s')%s", a->host,
	            (unsigned)a->port, a->model[0] ? a->model : "not known yet",
	            a->key ? ", API key required" : "");
	*out = a;
	return SHOAL_OK;
}

void shoal_api_stop(shoal_api *a)
{
	if (!a)
		return;
	a->stopping = 1;
	/* streams in flight end with an error event first: each notices
	 * within a keepalive period (API_KEEPALIVE_MS); wait up to twice that */
	for (int i = 0; a->d && a->streams > 0 && i < 2 * API_KEEPALIVE_MS / 10; i++)
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	if (a->d)
		MHD_stop_daemon(a->d);
	api__guard_free(a->guard); /* after the daemon: its connections are closed */
	free(a->host);
	free(a->key);
	free(a->cors);
	pthread_mutex_destroy(&a->model_mu);
	free(a);
}

void shoal_api_set_model(shoal_api *a, const char *model)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->model_mu);
	snprintf(a->model, sizeof a->model, "%s", model ? model : "");
	pthread_mutex_unlock(&a->model_mu);
	SHOAL_LOG_I(LOG_PART, "the API serves model '%s'", model ? model : "");
}

uint16_t shoal_api_port(const shoal_api *a)
{
	return a ? a->port : 0;
}
