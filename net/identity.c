/*
 * net/identity.c: the peer id file, the incarnation counter and the state
 * directory lock (see identity.h).
 */
#include "net/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "base/hex.h"
#include "net/wire.h"

#define SHOAL_IDENTITY_FILE_MAX 4096 /* two short lines plus comments */

shoal_err shoal_identity_parse(const char *text, size_t len, shoal_identity *out, char *why,
                               size_t why_len)
{
	int have_id = 0, have_inc = 0;
	size_t line_no = 0;
	for (size_t pos = 0; pos < len;) {
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		char line[128];
		size_t ll = end - pos;
		const char *src = text + pos;
		pos = end + 1;
		line_no++;
		while (ll > 0 && (src[ll - 1] == '\r' || src[ll - 1] == ' ' || src[ll - 1] == '\t'))
			ll--;
		if (ll == 0 || src[0] == '#')
			continue;
		if (ll >= sizeof line)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "line %zu: too long",
			                 line_no);
		memcpy(line, src, ll);
		line[ll] = '\0';
		if (!strncmp(line, "id ", 3)) {
			if (shoal_hex_decode(line + 3, strlen(line + 3), out->id,
			                     SHOAL_IDENTITY_ID_BYTES) != SHOAL_OK)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "line %zu: id must be %d hex digits", line_no,
				                 2 * SHOAL_IDENTITY_ID_BYTES);
			have_id = 1;
		} else if (!strncmp(line, "incarnation ", 12)) {
			const char *num = line + 12;
			char *endp = NULL;
			errno = 0;
			unsigned long long v = strtoull(num, &endp, 10);
			if (num[0] < '0' || num[0] > '9' || errno != 0 || *endp != '\0')
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "line %zu: bad incarnation '%s'", line_no, num);
			out->incarnation = (uint64_t)v;
			have_inc = 1;
		} else {
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "line %zu: unknown field",
			                 line_no);
		}
	}
	if (!have_id || !have_inc)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "missing %s line",
		                 have_id ? "incarnation" : "id");
	shoal_hex_encode(out->id, SHOAL_IDENTITY_ID_BYTES, out->id_hex);
	return SHOAL_OK;
}

shoal_err shoal_identity_save(const char *state_dir, const shoal_identity *id, char *why,
                              size_t why_len)
{
	char path[4096], tmp[4096 + 16];
	if (snprintf(path, sizeof path, "%s/%s", state_dir, SHOAL_IDENTITY_FILE) >=
	    (int)sizeof path)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "state directory path too long");
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	char hex[2 * SHOAL_IDENTITY_ID_BYTES + 1];
	shoal_hex_encode(id->id, SHOAL_IDENTITY_ID_BYTES, hex);
	char text[256];
	int n = snprintf(text, sizeof text,
	                 "# shoal peer identity: belongs to this machine, do not copy it\n"
	                 "id %s\nincarnation %" PRIu64 "\n",
	                 hex, id->incarnation);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot create %s: %s", tmp,
		                 strerror(errno));
	if (write(fd, text, (size_t)n) != n || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %s: %s", tmp,
		                 strerror(e));
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot rename %s: %s", tmp,
		                 strerror(e));
	}
	return SHOAL_OK;
}

static shoal_err identity_read_file(const char *path, shoal_identity *out, int *absent, char *why,
                                    size_t why_len)
{
	char text[SHOAL_IDENTITY_FILE_MAX];
	*absent = 0;
	/* O_NONBLOCK: a FIFO in its place is refused below, not waited on */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT) {
			*absent = 1;
			return SHOAL_OK;
		}
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot open %s: %s", path,
		                 strerror(errno));
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s is not a regular file (move it away)", path);
	}
	ssize_t r = read(fd, text, sizeof text);
	int e = errno;
	close(fd);
	if (r < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot read %s: %s", path,
		                 strerror(e));
	if ((size_t)r == sizeof text)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: too large", path);
	char reason[SHOAL_WHY_LEN] = "";
	shoal_err err = shoal_identity_parse(text, (size_t)r, out, reason, sizeof reason);
	if (err != SHOAL_OK)
		return shoal_why(why, why_len, err, "%s: %s (move it away to make a new identity)",
		                 path, reason);
	return SHOAL_OK;
}

shoal_err shoal_identity_load(const char *state_dir, const char *name, shoal_identity *out,
                              char *why, size_t why_len)
{
	char path[4096];
	memset(out, 0, sizeof *out);
	if (snprintf(path, sizeof path, "%s/%s", state_dir, SHOAL_IDENTITY_FILE) >=
	    (int)sizeof path)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "state directory path too long");
	int absent = 0;
	shoal_err e = identity_read_file(path, out, &absent, why, why_len);
	if (e != SHOAL_OK)
		return e;
	if (absent) {
		if (sodium_init() < 0)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "libsodium init failed");
		randombytes_buf(out->id, sizeof out->id);
		out->incarnation = 0;
	}
	if (out->incarnation >= SHOAL_WIRE_INC_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%s: incarnation %" PRIu64 " is at or past the largest (%" PRIu64
		                 "): the file is damaged; move it away to make a new identity",
		                 path, out->incarnation, SHOAL_WIRE_INC_MAX);
	out->incarnation++;
	shoal_hex_encode(out->id, SHOAL_IDENTITY_ID_BYTES, out->id_hex);
	if (name && *name) {
		snprintf(out->name, sizeof out->name, "%s", name);
	} else {
		char host[256] = "";
		if (gethostname(host, sizeof host - 1) != 0 || !host[0])
			snprintf(host, sizeof host, "peer-%.8s", out->id_hex);
		char *dot = strchr(host, '.');
		if (dot && dot != host)
			*dot = '\0';
		snprintf(out->name, sizeof out->name, "%s", host);
	}
	return shoal_identity_save(state_dir, out, why, why_len);
}

shoal_err shoal_identity_lock(const char *state_dir, int *fd_out, char *why, size_t why_len)
{
	char path[4096];
	*fd_out = -1;
	if (snprintf(path, sizeof path, "%s/%s", state_dir, SHOAL_IDENTITY_LOCK) >=
	    (int)sizeof path)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "state directory path too long");
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot open %s: %s", path,
		                 strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		close(fd);
		if (e == EWOULDBLOCK)
			return shoal_why(why, why_len, SHOAL_ERR_BUSY,
			                 "another shoal node already runs with state dir %s",
			                 state_dir);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot lock %s: %s", path,
		                 strerror(e));
	}
	*fd_out = fd;
	return SHOAL_OK;
}
