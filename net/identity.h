/*
 * net/identity.h: who this peer is, kept across restarts.
 *
 * Part: net/. A peer's 128-bit id is created once, at the first start, and
 * stored in <state-dir>/identity with the incarnation number. Every start
 * raises the incarnation (and so does every SWIM refutation, which the
 * node saves at once), so a restarted peer's fresh record beats whatever
 * the cluster still remembers of its previous life: it comes back as
 * itself, never as a ghost twin. A lock file keeps two processes from
 * running as the same peer.
 *
 * File format (text):
 *     # comment lines are ignored
 *     id <32 lowercase hex digits>
 *     incarnation <decimal u64>
 */
#ifndef SHOAL_NET_IDENTITY_H
#define SHOAL_NET_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/peer_id.h"

#define SHOAL_IDENTITY_ID_BYTES SHOAL_PEER_ID_LEN /* the id is a shoal_peer_id's bytes */
#define SHOAL_IDENTITY_NAME_MAX 64                /* bytes including NUL; longer names are cut */
#define SHOAL_IDENTITY_FILE     "identity"
#define SHOAL_IDENTITY_LOCK     "node.lock"

typedef struct shoal_identity {
	uint8_t id[SHOAL_IDENTITY_ID_BYTES];
	char id_hex[2 * SHOAL_IDENTITY_ID_BYTES + 1];
	char name[SHOAL_IDENTITY_NAME_MAX];
	uint64_t incarnation;
} shoal_identity;

/* Load the identity from state_dir, creating it (random id, incarnation 0)
 * if absent, then raise the incarnation by one and save it before
 * returning. name: the human name, or NULL for the host name. A corrupt
 * file is an error (SHOAL_ERR_FORMAT), never silently replaced: a new id
 * would make this peer a stranger to its cluster. */
shoal_err shoal_identity_load(const char *state_dir, const char *name, shoal_identity *out,
                              char *why, size_t why_len);

/* Save id->id and id->incarnation atomically (temp file, fsync, rename). */
shoal_err shoal_identity_save(const char *state_dir, const shoal_identity *id, char *why,
                              size_t why_len);

/* Parse the text of an identity file into out->id/id_hex/incarnation. */
shoal_err shoal_identity_parse(const char *text, size_t len, shoal_identity *out, char *why,
                               size_t why_len);

/* Take the state directory's lock (flock on SHOAL_IDENTITY_LOCK) for the
 * life of the process; *fd_out receives the descriptor (close it to
 * release). SHOAL_ERR_BUSY when another process holds it. */
shoal_err shoal_identity_lock(const char *state_dir, int *fd_out, char *why, size_t why_len);

#endif
