/*
 * runtime/api/api_guard.h: the API's guard against slow clients (issue 35):
 * a deadline for a request's headers and body that trickled bytes do not
 * reset, the oldest idle connections shed first when the connections near
 * the limit, so that a new request always finds room. libmicrohttpd caps
 * connections per address itself (api.c); this adds what it lacks.
 *
 * Part: runtime/, room api/ (api.c starts it with the daemon). Thread-safe:
 * libmicrohttpd's threads call it; it runs one thread of its own.
 */
#ifndef SHOAL_RUNTIME_API_GUARD_H
#define SHOAL_RUNTIME_API_GUARD_H

#include <stdint.h>

#include <microhttpd.h>

#include "base/err.h"

/* Where a connection is: waiting for a request's headers (a new or a
 * kept-alive connection), reading its body, or serving it (no deadline:
 * a stream may last minutes). */
typedef enum api__guard_phase {
	API__GUARD_HEAD = 0,
	API__GUARD_BODY,
	API__GUARD_SERVE
} api__guard_phase;

typedef struct api__guard api__guard;

/* Guard up to max_conns connections (its thread started). NOMEM/IO. */
shoal_err api__guard_new(unsigned max_conns, api__guard **out, char *why, size_t why_len);
/* Stop its thread and free it; after the daemon stopped. NULL: no-op. */
void api__guard_free(api__guard *g);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard). */
void api__guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe);
/* Connection c is now in phase p (HEAD restarts its deadline). */
void api__guard_set(api__guard *g, struct MHD_Connection *c, api__guard_phase p);
/* Connections now; shed so far for a deadline and for room. */
void api__guard_counts(api__guard *g, uint32_t *live, uint64_t *shed_deadline, uint64_t *shed_room);

#endif
