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

#include "base/err.h"

/* Write the default state directory into buf[cap]. */
shoal_err shoal_state_dir_default(char *buf, size_t cap);
/* Create dir (and missing parents) with mode 0700 if it does not exist. */
shoal_err shoal_state_dir_ensure(const char *dir);

#endif
