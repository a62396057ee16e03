/*
 * base/statedir.c: the default state directory and its creation.
 */
#include "base/statedir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

shoal_err shoal_state_dir_default(char *buf, size_t cap)
{
	const char *env = getenv("SHOAL_STATE_DIR");
	int n;
	if (env && *env) {
		n = snprintf(buf, cap, "%s", env);
	} else {
		const char *home = getenv("HOME");
#ifdef __APPLE__
		n = snprintf(buf, cap, "%s/Library/Application Support/shoal", home ? home : ".");
#else
		const char *xdg = getenv("XDG_STATE_HOME");
		if (xdg && *xdg)
			n = snprintf(buf, cap, "%s/shoal", xdg);
		else
			n = snprintf(buf, cap, "%s/.local/state/shoal", home ? home : ".");
#endif
	}
	return (n < 0 || (size_t)n >= cap) ? SHOAL_ERR_RANGE : SHOAL_OK;
}

shoal_err shoal_state_dir_ensure(const char *dir)
{
	char path[4096];
	size_t len = strlen(dir);
	if (len == 0 || len >= sizeof path)
		return SHOAL_ERR_RANGE;
	memcpy(path, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		char c = path[i];
		path[i] = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			return SHOAL_ERR_IO;
		path[i] = c;
	}
	return SHOAL_OK;
}

shoal_err shoal_file_replace(const char *path, const void *buf, size_t len, bool durable, char *why,
                             size_t why_len)
{
	char tmp[4200];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= sizeof tmp)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "cannot write %.*s: path too long",
		                 SHOAL_WHY_QUOTE(why_len, 32), path);
	int fd = mkstemp(tmp);
	if (fd < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %.*s: %s",
		                 SHOAL_WHY_QUOTE(why_len, 64), tmp, strerror(errno));
	bool ok = write(fd, buf, len) == (ssize_t)len && (!durable || fsync(fd) == 0);
	ok = close(fd) == 0 && ok;
	if (!ok || rename(tmp, path) != 0) {
		int er = errno;
		unlink(tmp);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %.*s: %s",
		                 SHOAL_WHY_QUOTE(why_len, 64), path, strerror(er));
	}
	return SHOAL_OK;
}
