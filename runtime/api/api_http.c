/*
 * runtime/api/api_http.c: the API's replies (api_impl.h): the headers every
 * reply carries, bodies of text or JSON, and OpenAI's error shape, each
 * error counted for /metrics by its class.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void api__model(shoal_api *a, char *out, size_t cap)
{
	pthread_mutex_lock(&a->model_mu);
	snprintf(out, cap, "%s", a->model);
	pthread_mutex_unlock(&a->model_mu);
}

/* CORS when --api-cors names an origin: a browser page there may read the
 * reply and its seed header. */
void api__headers(const shoal_api *a, struct MHD_Response *r)
{
	if (!a->cors)
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin", a->cors);
	MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Shoal-Seed");
	if (strcmp(a->cors, "*"))
		MHD_add_response_header(r, "Vary", "Origin");
}

enum MHD_Result api__reply(shoal_api *a, struct MHD_Connection *c, unsigned status,
                           const char *type, const char *body, size_t len, const char *seed)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	api__headers(a, r);
	if (seed)
		MHD_add_response_header(r, "X-Shoal-Seed", seed);
	MHD_add_response_header(r, "Content-Type", type);
	if (status == 429) /* the queue is full: a slot frees within seconds */
		MHD_add_response_header(r, "Retry-After", "1");
	enum MHD_Result res = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return res;
}

enum MHD_Result api__send(shoal_api *a, struct MHD_Connection *c, unsigned status, const char *type,
                          const char *body, size_t len)
{
	return api__reply(a, c, status, type, body, len, NULL);
}

enum MHD_Result api__send_json(shoal_api *a, struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return api__send(a, c, 500, "text/plain", "out of memory\n", 14);
	enum MHD_Result r = api__send(a, c, status, "application/json", s, strlen(s));
	free(s);
	return r;
}

json_t *api__error_json(const char *type, const char *msg, const char *param, const char *code)
{
	return json_pack("{s{ss ss so so}}", "error", "message", msg, "type", type, "param",
	                 param ? json_string(param) : json_null(), "code",
	                 code ? json_string(code) : json_null());
}

enum MHD_Result api__fail(shoal_api *a, struct MHD_Connection *c, unsigned status,
                          const char *param, const char *code, const char *fmt, ...)
{
	char msg[SHOAL_WHY_WRAP_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (status >= 500)
		a->req_server_err++;
	else
		a->req_client_err++;
	const char *type = status == 401   ? "authentication_error"
	                   : status == 429 ? "rate_limit_error"
	                   : status >= 500 ? "server_error"
	                                   : "invalid_request_error";
	return api__send_json(a, c, status, api__error_json(type, msg, param, code));
}

unsigned api__status_of(shoal_err e)
{
	switch (e) {
	case SHOAL_ERR_BUSY:
		return 429;
	case SHOAL_ERR_INFEASIBLE:
	case SHOAL_ERR_TIMEOUT:
	case SHOAL_ERR_STATE:
		return 503;
	case SHOAL_ERR_INVAL:
	case SHOAL_ERR_RANGE:
	case SHOAL_ERR_UNSUPPORTED:
		return 400;
	default:
		return 500;
	}
}

/* The client of a request we are still answering closed its end (HTTP
 * clients send nothing more after the request, so EOF means gone). */
bool api__client_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	int fd = ci->connect_fd;
#ifdef POLLRDHUP
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
#else
	struct pollfd p = {.fd = fd, .events = POLLIN};
#endif
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR))
		return true;
	char b;
	return (p.revents & POLLIN) && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}
