/*
 * net/endpoint.h: peer addresses as users write them ("HOST[:PORT]", on
 * the command line and in --peer) and as the control sockets take them
 * ("tcp://IPv4:PORT").
 *
 * Part: net/. Used by the node (seeds, listen addresses) and the CLI
 * (`shoal status --peer`, `shoal run --peer`).
 */
#ifndef SHOAL_NET_ENDPOINT_H
#define SHOAL_NET_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Split "ADDR[:PORT]" (ADDR may be "*") into host[cap] and *port (dflt
 * without one). INVAL for an empty or too long address or a bad port. */
shoal_err shoal_endpoint_split(const char *hostport, uint16_t dflt, char *host, size_t cap,
                               uint16_t *port, char *why, size_t why_len);

/* "HOST[:PORT]" -> "tcp://IPv4:PORT" in out[cap] (default port dflt; port
 * 0 is refused); resolves names with getaddrinfo (NOTFOUND). */
shoal_err shoal_endpoint_parse(const char *hostport, uint16_t dflt, char *out, size_t cap,
                               char *why, size_t why_len);

/* The IP of "tcp://IP:PORT" into ip[cap]; 0 on success, -1 otherwise. */
int shoal_endpoint_ip(const char *ep, char *ip, size_t cap);

/* The port of "...:PORT"; 0 without one. */
int shoal_endpoint_port(const char *ep);

#endif
