/*
 * net/key.h: the cluster key and the CURVE keys derived from it.
 *
 * Part: net/ (how peers talk). Every peer of a cluster holds the same
 * 32-byte secret. From it we derive, with libsodium's crypto_kdf, two
 * Curve25519 keypairs: the "server" pair every peer's ROUTER uses and the
 * "client" pair every peer's DEALER presents. The ZAP handler (net/ctl.c)
 * accepts only the derived client public key, so a client must *prove* it
 * holds the cluster key (it cannot present that public key without the
 * matching secret); knowing the server's public key is not enough.
 *
 * Key file format (text, mode 0600, written by `shoal key new FILE`):
 *     # comment lines and blank lines are ignored
 *     shoal-cluster-key-v1 <64 lowercase hex digits = 32 bytes>
 */
#ifndef SHOAL_NET_KEY_H
#define SHOAL_NET_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SHOAL_KEY_BYTES        32 /* the cluster secret, and each Curve25519 key */
#define SHOAL_KEY_FILE_TAG     "shoal-cluster-key-v1"
#define SHOAL_KEY_DEFAULT_NAME "cluster.key" /* inside the state directory */

/* The cluster secret: a value type, copied freely, wiped by its owner. */
typedef struct shoal_key {
	uint8_t bytes[SHOAL_KEY_BYTES];
} shoal_key;

/* The keys ZeroMQ's CURVE mechanism needs, all derived from one shoal_key. */
typedef struct shoal_key_curve {
	uint8_t server_public[SHOAL_KEY_BYTES];
	uint8_t server_secret[SHOAL_KEY_BYTES];
	uint8_t client_public[SHOAL_KEY_BYTES];
	uint8_t client_secret[SHOAL_KEY_BYTES];
} shoal_key_curve;

/* Fill *key with 32 random bytes (libsodium randombytes). */
shoal_err shoal_key_generate(shoal_key *key);

/* Write *key to a new file `path` with mode 0600 in the format above.
 * Refuses (SHOAL_ERR_STATE) to overwrite an existing file. */
shoal_err shoal_key_write(const char *path, const shoal_key *key, char *why, size_t why_len);

/* Read a key file. Bad contents give SHOAL_ERR_FORMAT with a reason; a
 * file readable by group or others is accepted but *insecure_mode is set
 * (may be NULL) so the caller can warn. */
shoal_err shoal_key_read(const char *path, shoal_key *key, int *insecure_mode, char *why,
                         size_t why_len);

/* Parse the text of a key file (len bytes, need not be NUL-terminated). */
shoal_err shoal_key_parse(const char *text, size_t len, shoal_key *key, char *why, size_t why_len);

/* Derive the CURVE server and client keypairs from the cluster key.
 * Deterministic: every holder of the key gets the same four keys. */
shoal_err shoal_key_derive(const shoal_key *key, shoal_key_curve *out);

/* A short public fingerprint of the key for logs: 16 hex digits + NUL
 * (a keyed hash of a constant; reveals nothing about the key). */
void shoal_key_fingerprint(const shoal_key *key, char out[17]);

/* Overwrite secrets in memory (sodium_memzero). */
void shoal_key_wipe(void *p, size_t n);

#endif
