/*
 * runtime/cli/cmd_chat.c: `shoal chat --peer HOST[:PORT]`: a terminal chat
 * client of a peer's HTTP API (runtime/api/): each line is a user turn,
 * the reply streams in as it is generated, the history goes with every
 * request. "/system TEXT" sets the system message, "/reset" forgets the
 * conversation, "/quit" (or end of input) leaves; Ctrl-C stops the reply
 * being written (the peer frees its session when the connection closes),
 * a second Ctrl-C at the prompt leaves. -p TEXT sends one turn and exits.
 *
 * Part: runtime/, room cli/. HTTP through libcurl, JSON through jansson.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "net/endpoint.h"
#include "runtime/api/api.h"
#include "runtime/cli/cli.h"

static volatile sig_atomic_t chat_interrupted;

static void chat_on_sigint(int sig)
{
	(void)sig;
	chat_interrupted = 1;
}

static void chat_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal chat --peer HOST[:PORT] [--api-key FILE] [--system TEXT]\n"
	        "                  [--temp T] [--max-tokens N] [--seed S] [-p TEXT]\n"
	        "Talks to a peer's HTTP API (`shoal node --api`, port %u by default): type a\n"
	        "line, the reply streams in. /system TEXT sets the system message, /reset\n"
	        "starts over, /quit leaves; Ctrl-C stops a reply.\n"
	        "  --peer HOST[:PORT]     the peer's API (default port %u)\n"
	        "  --api-key FILE         the API key, if the peer asks for one\n"
	        "  --system TEXT          the system message\n"
	        "  --temp T               temperature (default: the peer's)\n"
	        "  -n, --max-tokens N     tokens per reply at most\n"
	        "  --seed S               sampler seed\n"
	        "  -p, --prompt TEXT      one turn, then exit\n",
	        SHOAL_API_DEFAULT_PORT, SHOAL_API_DEFAULT_PORT);
}

/* The reply being streamed: SSE lines in, text out. */
typedef struct chat_stream {
	char *line;
	size_t len, cap;
	char *reply;
	size_t rlen, rcap;
	char err[SHOAL_WHY_WRAP_LEN];
	bool done;
} chat_stream;

static bool chat_append(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = (*cap ? *cap * 2 : 256) + n;
		char *nb = realloc(*b, c);
		if (!nb)
			return false;
		*b = nb;
		*cap = c;
	}
	memcpy(*b + *len, s, n);
	*len += n;
	(*b)[*len] = '\0';
	return true;
}

/* One event line "data: {...}". */
static void chat_event(chat_stream *cs, const char *data)
{
	if (!strcmp(data, "[DONE]")) {
		cs->done = true;
		return;
	}
	json_t *j = json_loads(data, 0, NULL);
	json_t *e = json_object_get(j, "error");
	if (e) {
		snprintf(cs->err, sizeof cs->err, "%s",
		         json_string_value(json_object_get(e, "message")) ?: "an error");
	} else {
		json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
		const char *piece =
		    json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
		if (piece && *piece) {
			fputs(piece, stdout);
			fflush(stdout);
			chat_append(&cs->reply, &cs->rlen, &cs->rcap, piece, strlen(piece));
		}
	}
	json_decref(j);
}

static size_t chat_write(char *p, size_t size, size_t n, void *ud)
{
	chat_stream *cs = ud;
	size_t total = size * n;
	for (size_t i = 0; i < total; i++) {
		if (p[i] != '\n') {
			if (!chat_append(&cs->line, &cs->len, &cs->cap, p + i, 1))
				return 0;
			continue;
		}
		if (cs->len > 6 && !strncmp(cs->line, "data: ", 6))
			chat_event(cs, cs->line + 6);
		else if (cs->len && cs->line[0] == '{') /* an error reply, not a stream */
			chat_event(cs, cs->line);
		cs->len = 0;
	}
	return total;
}

static int chat_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)ud, (void)a, (void)b, (void)c, (void)d;
	return chat_interrupted; /* nonzero: abort the transfer */
}

/* One turn: POST the history, stream the reply; the reply is appended to
 * the history. Returns 0, or 1 with a message on stderr. */
static int chat_turn(CURL *curl, const char *url, struct curl_slist *hdr, json_t *req, json_t *msgs)
{
	char *body = json_dumps(req, JSON_COMPACT);
	chat_stream cs;
	memset(&cs, 0, sizeof cs);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, chat_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &cs);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, chat_progress);
	chat_interrupted = 0;
	CURLcode rc = curl_easy_perform(curl);
	long status = 0;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (cs.len) /* a last line without its newline */
		chat_write("\n", 1, 1, &cs);
	printf("\n");
	int ret = 0;
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		fprintf(stderr, "(stopped)\n");
	} else if (rc != CURLE_OK) {
		fprintf(stderr, "shoal chat: %s: %s\n", url, curl_easy_strerror(rc));
		ret = 1;
	} else if (cs.err[0] || status != 200) {
		fprintf(stderr, "shoal chat: %s\n",
		        cs.err[0] ? cs.err : "the peer answered with an error");
		ret = 1;
	}
	if (cs.rlen)
		json_array_append_new(
		    msgs, json_pack("{ss ss}", "role", "assistant", "content", cs.reply));
	free(cs.line);
	free(cs.reply);
	free(body);
	return ret;
}

int shoal_cmd_chat(int argc, char **argv)
{
	const char *peer = NULL, *key_file = NULL, *system = NULL, *once = NULL;
	double temp = -1, max_tokens = 0, seed = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			chat_usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "shoal chat: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--peer"))
			peer = v;
		else if (!strcmp(a, "--api-key"))
			key_file = v;
		else if (!strcmp(a, "--system"))
			system = v;
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			once = v;
		else if (!strcmp(a, "--temp"))
			temp = atof(v);
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n"))
			max_tokens = atof(v);
		else if (!strcmp(a, "--seed"))
			seed = atof(v);
		else {
			fprintf(stderr, "shoal chat: unknown option %s\n", a);
			chat_usage(stderr);
			return 2;
		}
	}
	if (!peer) {
		chat_usage(stderr);
		return 2;
	}
	char host[256], why[SHOAL_WHY_LEN], url[400], auth[320] = "";
	uint16_t port;
	if (shoal_endpoint_split(peer, SHOAL_API_DEFAULT_PORT, host, sizeof host, &port, why,
	                         sizeof why)) {
		fprintf(stderr, "shoal chat: --peer %s: %s\n", peer, why);
		return 2;
	}
	snprintf(url, sizeof url, "http://%s:%u/v1/chat/completions", host, (unsigned)port);
	if (key_file) {
		FILE *f = fopen(key_file, "r");
		char k[256] = "";
		if (!f || !fgets(k, sizeof k, f)) {
			fprintf(stderr, "shoal chat: --api-key %s: %s\n", key_file,
			        f ? "empty" : strerror(errno));
			if (f)
				fclose(f);
			return 2;
		}
		fclose(f);
		k[strcspn(k, "\r\n")] = '\0';
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", k);
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURL *curl = curl_easy_init();
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (auth[0])
		hdr = curl_slist_append(hdr, auth);
	json_t *msgs = json_array();
	char *sys = system ? strdup(system) : NULL;
	struct sigaction sa = {.sa_handler = chat_on_sigint};
	sigaction(SIGINT, &sa, NULL);
	int rc = 0;
	char *line = NULL;
	size_t cap = 0;
	bool tty = isatty(0);
	for (;;) {
		const char *text = once;
		if (!once) {
			if (tty) {
				printf("> ");
				fflush(stdout);
			}
			chat_interrupted = 0;
			ssize_t n = getline(&line, &cap, stdin);
			if (n < 0)
				break; /* end of input, or Ctrl-C at the prompt */
			line[strcspn(line, "\r\n")] = '\0';
			text = line;
			if (!*text)
				continue;
			if (!strcmp(text, "/quit"))
				break;
			if (!strcmp(text, "/reset")) {
				json_array_clear(msgs);
				continue;
			}
			if (!strncmp(text, "/system", 7)) {
				free(sys);
				sys = text[7] ? strdup(text + 8) : NULL;
				continue;
			}
		}
		json_array_append_new(msgs, json_pack("{ss ss}", "role", "user", "content", text));
		json_t *all = json_array();
		if (sys)
			json_array_append_new(
			    all, json_pack("{ss ss}", "role", "system", "content", sys));
		json_array_extend(all, msgs);
		json_t *req = json_pack("{so sb}", "messages", all, "stream", 1);
		if (temp >= 0)
			json_object_set_new(req, "temperature", json_real(temp));
		if (max_tokens > 0)
			json_object_set_new(req, "max_tokens",
			                    json_integer((json_int_t)max_tokens));
		if (seed >= 0)
			json_object_set_new(req, "seed", json_integer((json_int_t)seed));
		rc = chat_turn(curl, url, hdr, req, msgs);
		json_decref(req);
		if (once)
			break;
	}
	free(line);
	free(sys);
	json_decref(msgs);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(curl);
	curl_global_cleanup();
	return rc;
}
