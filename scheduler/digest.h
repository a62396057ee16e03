/*
 * scheduler/digest.h: BLAKE2b-256 (RFC 7693), unkeyed, for plan digests.
 *
 * Part: scheduler/ (pure, dependency-free: the scheduler uses nothing but its
 * own types, so it carries this ~100-line hash instead of linking libsodium).
 * The output equals libsodium's crypto_generichash with a 32-byte output and
 * no key; tests/unit/test_sched_digest.c checks that on random inputs.
 */
#ifndef SHOAL_SCHEDULER_DIGEST_H
#define SHOAL_SCHEDULER_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define SHOAL_DIGEST_BYTES 32

void shoal_digest(const void *data, size_t len, uint8_t out[SHOAL_DIGEST_BYTES]);
/* 64 lower-case hex digits + NUL into out. */
void shoal_digest_hex(const uint8_t d[SHOAL_DIGEST_BYTES], char out[2 * SHOAL_DIGEST_BYTES + 1]);

#endif
