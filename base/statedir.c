/*
 * base/statedir.c: the default state directory and its creation.
 */
#include "base/statedir.h"

#include <dirent.h>
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

static const char *file_kind(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	return "not a regular file";
}

static shoal_err check_dir(const char *dir, int depth, char *why, size_t why_len)
{
	DIR *d = opendir(dir);
	if (!d)
		return SHOAL_OK; /* absent, or unreadable: the reads that follow say so */
	shoal_err e = SHOAL_OK;
	struct dirent *de;
	while (e == SHOAL_OK && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char path[4096];
		struct stat st;
		if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path ||
		    stat(path, &st) != 0)
			continue; /* a dangling link is no state file */
		if (S_ISDIR(st.st_mode)) {
			if (depth > 0)
				e = check_dir(path, depth - 1, why, why_len);
		} else if (!S_ISREG(st.st_mode)) {
			e = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			              "%s is %s where the state directory keeps regular files: "
			              "move it away",
			              path, file_kind(st.st_mode));
		}
	}
	closedir(d);
	return e;
}

shoal_err shoal_state_dir_check(const char *dir, char *why, size_t why_len)
{
	return check_dir(dir, 1, why, why_len);
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
