/*
 * net/endpoint.c: "HOST[:PORT]" as users type it -> the endpoints the
 * control sockets take (net/endpoint.h).
 */
#include "config.h"

#include "net/endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

shoal_err shoal_endpoint_split(const char *hostport, uint16_t dflt, char *host, size_t cap,
                               uint16_t *port, char *why, size_t why_len)
{
	const char *colon = strrchr(hostport, ':');
	size_t hl = colon ? (size_t)(colon - hostport) : strlen(hostport);
	if (hl == 0 || hl >= cap)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "bad address '%s'", hostport);
	memcpy(host, hostport, hl);
	host[hl] = '\0';
	*port = dflt;
	if (colon) {
		char *end = NULL;
		long p = strtol(colon + 1, &end, 10);
		if (!colon[1] || *end || p < 0 || p > 65535)
			return shoal_why(why, why_len, SHOAL_ERR_INVAL, "bad port in '%s'",
			                 hostport);
		*port = (uint16_t)p;
	}
	return SHOAL_OK;
}

shoal_err shoal_endpoint_parse(const char *hostport, uint16_t dflt, char *out, size_t cap,
                               char *why, size_t why_len)
{
	char host[256];
	uint16_t port;
	shoal_err e = shoal_endpoint_split(hostport, dflt, host, sizeof host, &port, why, why_len);
	if (e != SHOAL_OK)
		return e;
	if (port == 0)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "port 0 in '%s'", hostport);
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0 || !res)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "cannot resolve '%s': %s", host,
		                 gai_strerror(rc));
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, sizeof ip);
	freeaddrinfo(res);
	if (snprintf(out, cap, "tcp://%s:%u", ip, (unsigned)port) >= (int)cap)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "endpoint too long");
	return SHOAL_OK;
}

int shoal_endpoint_ip(const char *ep, char *ip, size_t cap)
{
	if (strncmp(ep, "tcp://", 6))
		return -1;
	const char *h = ep + 6, *colon = strrchr(h, ':');
	if (!colon || (size_t)(colon - h) >= cap)
		return -1;
	memcpy(ip, h, (size_t)(colon - h));
	ip[colon - h] = '\0';
	return 0;
}

int shoal_endpoint_port(const char *ep)
{
	const char *colon = strrchr(ep, ':');
	return colon ? atoi(colon + 1) : 0;
}
