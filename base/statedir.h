/*
 * base/statedir.h: where a peer keeps what survives a restart (its id, its
 * cluster key, cached model digests).
 *
 * Default: $SHOAL_STATE_DIR if set; else $XDG_STATE_HOME/shoal, else
 * ~/.local/state/shoal on Linux and ~/Library/Application Support/shoal on
 * macOS. A --state-dir option overrides all of these.
 */
#ifndef SHOAL_BASE_STATEDIR_H
#define SHOAL_BASE_STATEDIR_H

#include <stddef.h>

#include <stdbool.h>

#include "base/err.h"

/* Write the default state directory into buf[cap]. */
shoal_err shoal_state_dir_default(char *buf, size_t cap);
/* Create dir (and missing parents) with mode 0700 if it does not exist. */
shoal_err shoal_state_dir_ensure(const char *dir);
/* Check that every entry of dir (and of its folders, one level down) is a
 * regular file or a folder: a FIFO, socket or device where a state file
 * belongs would block or confuse the reads at start (issue 35). FORMAT
 * with the path and its kind; OK for an absent dir. */
shoal_err shoal_state_dir_check(const char *dir, char *why, size_t why_len);
/* Replace the file at path with buf[len]: written to a fresh temporary file
 * beside it (mkstemp; fsync'd when durable), then renamed over it, so a
 * reader never sees half a file. On failure the old file stays and why
 * says "cannot write PATH: reason". */
shoal_err shoal_file_replace(const char *path, const void *buf, size_t len, bool durable, char *why,
                             size_t why_len);

#endif
