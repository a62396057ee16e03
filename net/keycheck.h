/*
 * net/keycheck.h: the key check, a plain UDP exchange on the control
 * port's number that tells two peers with different cluster keys why they
 * cannot talk.
 *
 * Part: net/. The control sockets are CURVE: a peer holding another key
 * seals its HELLO to a server key the listener does not have, and ZeroMQ
 * gives neither side more than "handshake failed" (the listener not even
 * the address of the peer at fault). So beside the ROUTER's TCP port the
 * node answers a small datagram: an ASK carries the sender's key
 * fingerprint, cluster name and advertised control endpoint; the ANSWER
 * carries the listener's. Each side compares and logs a mismatch naming
 * the other's address and both fingerprints. Fingerprints are public
 * (net/key.h); nothing here is secret and nothing here admits anyone.
 *
 * Datagram (both kinds; at most SHOAL_KEYCHECK_MAX bytes):
 *   "SHKC"  magic (4 bytes)
 *   u8      version (1)
 *   u8      kind (1 ask, 2 answer)
 *   16      fingerprint, ASCII hex; 16 '-' when the sender has no key
 *   u8 n    cluster name length, then n bytes (no NUL)
 *   u8 n    control endpoint length, then n bytes ("tcp://IP:PORT")
 */
#ifndef SHOAL_NET_KEYCHECK_H
#define SHOAL_NET_KEYCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SHOAL_KEYCHECK_MAX    540 /* header 23 + 255 + 255, rounded up */
#define SHOAL_KEYCHECK_ASK    1
#define SHOAL_KEYCHECK_ANSWER 2
#define SHOAL_KEYCHECK_NOKEY  "----------------"

typedef struct shoal_keycheck_msg {
	uint8_t kind;       /* SHOAL_KEYCHECK_ASK or _ANSWER */
	char fp[17];        /* 16 hex digits, or SHOAL_KEYCHECK_NOKEY */
	char cluster[256];  /* the sender's cluster name */
	char endpoint[256]; /* the sender's advertised control endpoint */
} shoal_keycheck_msg;

/* Encode m into buf[cap]; returns the length, 0 when a field is too long
 * or the fingerprint is not 16 hex digits (or NOKEY). */
size_t shoal_keycheck_encode(const shoal_keycheck_msg *m, uint8_t *buf, size_t cap);

/* Decode a datagram; FORMAT with the reason for anything malformed. */
shoal_err shoal_keycheck_decode(const uint8_t *buf, size_t len, shoal_keycheck_msg *m, char *why,
                                size_t why_len);

/* "key fingerprint FP", or "no key (--insecure)" for NOKEY, into buf[cap];
 * returns buf (the words both sides' mismatch lines use). */
const char *shoal_keycheck_says(const char *fp, char *buf, size_t cap);

/* 1 when the two fingerprints say the same key (or both none). */
int shoal_keycheck_same(const shoal_keycheck_msg *a, const shoal_keycheck_msg *b);

/* A non-blocking UDP socket bound to the IP and port of the bound control
 * endpoint "tcp://IP:PORT" (IP may be 0.0.0.0). */
shoal_err shoal_keycheck_open(const char *ctl_bound, int *fd, char *why, size_t why_len);

/* Send m from fd to the UDP port of control endpoint `to` ("tcp://IP:PORT"). */
shoal_err shoal_keycheck_send(int fd, const char *to, const shoal_keycheck_msg *m, char *why,
                              size_t why_len);

/* Read one datagram from fd (non-blocking): BUSY when none is waiting;
 * the sender's address as "IP:PORT" in from[from_cap]. */
shoal_err shoal_keycheck_recv(int fd, shoal_keycheck_msg *m, char *from, size_t from_cap, char *why,
                              size_t why_len);

/* A client's question: ask the peer at control endpoint `to` and wait up
 * to timeout_ms for its answer (TIMEOUT when none came: an old peer, a
 * firewall, or nothing there). */
shoal_err shoal_keycheck_ask(const char *to, const shoal_keycheck_msg *mine, int timeout_ms,
                             shoal_keycheck_msg *theirs, char *why, size_t why_len);

#endif
