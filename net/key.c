/*
 * net/key.c: cluster key files and CURVE key derivation (see key.h).
 *
 * Derivation: crypto_kdf_derive_from_key(subkey, 32, id, "shoalctl", key)
 * with id 1 for the server secret and id 2 for the client secret; each
 * public key is crypto_scalarmult_base(secret). crypto_kdf is BLAKE2b keyed
 * by the cluster key, so the subkeys are independent and one-way: holding
 * a derived public key (or even a derived secret) does not give the key.
 */
#include "net/key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "base/hex.h"

#define SHOAL_KEY_KDF_CONTEXT "shoalctl" /* crypto_kdf_CONTEXTBYTES == 8 */
#define SHOAL_KEY_KDF_SERVER  1
#define SHOAL_KEY_KDF_CLIENT  2
/* A key file is two short lines; 4 KiB leaves room for comments and
 * bounds what we read from a path the user gave us. */
#define SHOAL_KEY_FILE_MAX 4096

static shoal_err key_sodium_init(void)
{
	return sodium_init() < 0 ? SHOAL_ERR_IO : SHOAL_OK;
}

shoal_err shoal_key_generate(shoal_key *key)
{
	if (key_sodium_init() != SHOAL_OK)
		return SHOAL_ERR_IO;
	randombytes_buf(key->bytes, sizeof key->bytes);
	return SHOAL_OK;
}

shoal_err shoal_key_write(const char *path, const shoal_key *key, char *why, size_t why_len)
{
	char hex[2 * SHOAL_KEY_BYTES + 1];
	char text[256];
	sodium_bin2hex(hex, sizeof hex, key->bytes, sizeof key->bytes);
	int n =
	    snprintf(text, sizeof text,
	             "# shoal cluster key: keep it secret; copy it to every peer of the cluster\n"
	             "%s %s\n",
	             SHOAL_KEY_FILE_TAG, hex);
	sodium_memzero(hex, sizeof hex);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		sodium_memzero(text, sizeof text);
		if (errno == EEXIST)
			return shoal_why(why, why_len, SHOAL_ERR_STATE,
			                 "%s already exists; not overwriting a key", path);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot create %s: %s", path,
		                 strerror(errno));
	}
	/* O_CREAT's mode is filtered by the umask; make sure it is 0600. */
	(void)fchmod(fd, 0600);
	ssize_t w = write(fd, text, (size_t)n);
	sodium_memzero(text, sizeof text);
	if (w != n || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(path);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %s: %s", path,
		                 strerror(e));
	}
	if (close(fd) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot write %s: %s", path,
		                 strerror(errno));
	return SHOAL_OK;
}

shoal_err shoal_key_parse(const char *text, size_t len, shoal_key *key, char *why, size_t why_len)
{
	const size_t tag_len = strlen(SHOAL_KEY_FILE_TAG);
	int found = 0;
	size_t line_no = 0;
	for (size_t pos = 0; pos < len;) {
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		const char *line = text + pos;
		size_t ll = end - pos;
		pos = end + 1;
		line_no++;
		if (ll > 0 && line[ll - 1] == '\r')
			ll--;
		while (ll > 0 && (line[ll - 1] == ' ' || line[ll - 1] == '\t'))
			ll--;
		if (ll == 0 || line[0] == '#')
			continue;
		if (found)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "line %zu: more than one key line", line_no);
		if (ll < tag_len + 1 || memcmp(line, SHOAL_KEY_FILE_TAG, tag_len) != 0 ||
		    line[tag_len] != ' ')
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "line %zu: expected '%s <64 hex digits>'", line_no,
			                 SHOAL_KEY_FILE_TAG);
		const char *hex = line + tag_len + 1;
		size_t hl = ll - tag_len - 1;
		if (hl != 2 * SHOAL_KEY_BYTES)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "line %zu: key has %zu hex digits, want %d", line_no, hl,
			                 2 * SHOAL_KEY_BYTES);
		for (size_t i = 0; i < hl; i++) {
			char c = hex[i];
			if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
			      (c >= 'A' && c <= 'F')))
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "line %zu: '%c' is not a hex digit", line_no, c);
		}
		size_t bin_len = 0;
		if (sodium_hex2bin(key->bytes, sizeof key->bytes, hex, hl, NULL, &bin_len, NULL) !=
		        0 ||
		    bin_len != SHOAL_KEY_BYTES)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "line %zu: bad hex key",
			                 line_no);
		found = 1;
	}
	if (!found)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "no '%s' line",
		                 SHOAL_KEY_FILE_TAG);
	return SHOAL_OK;
}

shoal_err shoal_key_read(const char *path, shoal_key *key, int *insecure_mode, char *why,
                         size_t why_len)
{
	char text[SHOAL_KEY_FILE_MAX];
	/* O_NONBLOCK: a FIFO in its place is refused below, not waited on */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return shoal_why(why, why_len, errno == ENOENT ? SHOAL_ERR_NOTFOUND : SHOAL_ERR_IO,
		                 "cannot open %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "%s is not a regular file", path);
	}
	if (insecure_mode)
		*insecure_mode = (st.st_mode & 077) != 0;
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, text + len, sizeof text - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			close(fd);
			return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot read %s: %s", path,
			                 strerror(e));
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == sizeof text) {
			close(fd);
			sodium_memzero(text, sizeof text);
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: larger than %d bytes, not a key file", path,
			                 SHOAL_KEY_FILE_MAX);
		}
	}
	close(fd);
	char reason[SHOAL_WHY_LEN] = "";
	shoal_err e = shoal_key_parse(text, len, key, reason, sizeof reason);
	sodium_memzero(text, sizeof text);
	if (e != SHOAL_OK)
		return shoal_why(why, why_len, e, "%s: %s", path, reason);
	return SHOAL_OK;
}

shoal_err shoal_key_derive(const shoal_key *key, shoal_key_curve *out)
{
	if (key_sodium_init() != SHOAL_OK)
		return SHOAL_ERR_IO;
	if (crypto_kdf_derive_from_key(out->server_secret, SHOAL_KEY_BYTES, SHOAL_KEY_KDF_SERVER,
	                               SHOAL_KEY_KDF_CONTEXT, key->bytes) != 0 ||
	    crypto_kdf_derive_from_key(out->client_secret, SHOAL_KEY_BYTES, SHOAL_KEY_KDF_CLIENT,
	                               SHOAL_KEY_KDF_CONTEXT, key->bytes) != 0)
		return SHOAL_ERR_IO;
	if (crypto_scalarmult_base(out->server_public, out->server_secret) != 0 ||
	    crypto_scalarmult_base(out->client_public, out->client_secret) != 0)
		return SHOAL_ERR_IO;
	return SHOAL_OK;
}

void shoal_key_fingerprint(const shoal_key *key, char out[17])
{
	static const char label[] = "shoal key fingerprint v1";
	uint8_t h[8];
	crypto_generichash(h, sizeof h, (const uint8_t *)label, sizeof label - 1, key->bytes,
	                   sizeof key->bytes);
	shoal_hex_encode(h, sizeof h, out);
}

void shoal_key_wipe(void *p, size_t n)
{
	sodium_memzero(p, n);
}
