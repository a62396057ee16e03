/*
 * runtime/cli/cmd_chat.c: `shoal chat [--peer HOST[:PORT] | --api URL]`: a
 * terminal chat client of a peer's HTTP API (runtime/api/). --peer is a
 * peer's control address, as for `run` and `status` (the local peer when
 * none is given): the API's address comes from that peer's status; --api
 * names the API itself. Each line is a user turn,
 * the reply streams in as it is generated, the history goes with every
 * request. Lines that start with "/" are commands (/help lists them; an
 * unknown one is refused, "//" sends a line that starts with "/"); Ctrl-C
 * stops the reply being written (the peer frees its session when the
 * connection closes); end of input leaves. -p TEXT sends one turn and
 * exits.
 *
 * On a terminal the chat opens with a banner (the model, the cluster, the
 * context, from GET /v1/cluster) and reads lines through libedit: line
 * editing, and a history kept in <state-dir>/chat_history. A turn that fails is taken back out of
 * the conversation, so the next one can succeed; a full context says to /reset.
 *
 * Part: runtime/, room cli/. HTTP through libcurl, JSON through jansson,
 * line editing through libedit.
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
#include <editline/readline.h>
#include <jansson.h>

#include "base/statedir.h"
#include "net/ctl.h"
#include "net/endpoint.h"
#include "runtime/api/api.h"
#include "runtime/cli/cli_impl.h"

static volatile sig_atomic_t chat_interrupted;

static void chat_on_sigint(int sig)
{
	(void)sig;
	chat_interrupted = 1;
}

/* The commands a line may start with. */
static const struct {
	const char *name, *args, *help;
} chat_cmds[] = {
    {"/help", "", "this list"},
    {"/system", " [TEXT]", "set the system message (without TEXT: none)"},
    {"/reset", "", "forget the conversation and start a new one"},
    {"/retry", "", "write the last reply again (a new seed unless --seed)"},
    {"/quit", "", "leave (also /exit, or Ctrl-D at the prompt)"},
};

static void chat_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal chat [--peer HOST[:PORT] | --api URL] [--key FILE | --insecure]\n"
	        "                  [--api-key FILE] [--system TEXT] [--temp T] [--max-tokens N]\n"
	        "                  [--seed S] [-p TEXT]\n"
	        "Talks to a peer's HTTP API (`shoal node --api`): type a line, the reply\n"
	        "streams in; /help lists the commands; Ctrl-C stops a reply.\n"
	        "  --peer HOST[:PORT]     a peer's control address, as for `run` and `status`\n"
	        "                         (default 127.0.0.1, port %u): its status says\n"
	        "                         where its API listens\n"
	        "  --key FILE             the cluster key (default: <state-dir>/cluster.key)\n"
	        "  --insecure             talk to a cluster that runs without a key\n"
	        "  --api URL              the API itself (http://HOST:PORT; port %u by\n"
	        "                         default), without asking a peer\n"
	        "  --api-key FILE         the API key, if the peer asks for one\n"
	        "  --system TEXT          the system message\n"
	        "  --temp T               temperature (default: the peer's)\n"
	        "  -n, --max-tokens N     tokens per reply at most\n"
	        "  --seed S               sampler seed (default: a new one per reply)\n"
	        "  -p, --prompt TEXT      one turn, then exit\n",
	        SHOAL_CTL_DEFAULT_PORT, SHOAL_API_DEFAULT_PORT);
}

/* The API's base URL from the status of the peer at control address peer
 * (NULL: the local node's, from the state directory's control file). 0, or
 * 1 with a message on stderr. */
static int chat_api_of_peer(const char *peer, const char *key_file, bool insecure, char *base,
                            size_t cap)
{
	char ep[256], why[SHOAL_WHY_WRAP_LEN] = "", host[256] = "127.0.0.1";
	uint16_t cport = SHOAL_CTL_DEFAULT_PORT;
	if (!peer)
		peer = "127.0.0.1";
	if (shoal_endpoint_split(peer, SHOAL_CTL_DEFAULT_PORT, host, sizeof host, &cport, why,
	                         sizeof why) != SHOAL_OK ||
	    shoal_endpoint_parse(peer, SHOAL_CTL_DEFAULT_PORT, ep, sizeof ep, why, sizeof why) !=
	        SHOAL_OK) {
		fprintf(stderr, "shoal chat: --peer %s: %s\n", peer, why);
		return 1;
	}
	shoal_key_curve curve, *keys = NULL;
	char fp[17];
	if (!cli__client_key("chat", key_file, insecure, NULL, &curve, &keys, fp))
		return 1;
	json_t *st = cli__status_fetch("chat", ep, keys, fp, 3000);
	shoal_key_wipe(&curve, sizeof curve);
	if (!st)
		return 1;
	json_t *api = json_object_get(st, "api");
	const char *ah = json_string_value(json_object_get(api, "host"));
	json_int_t port = json_integer_value(json_object_get(api, "port"));
	if (!json_is_object(api) || port <= 0 || port > 65535) {
		fprintf(stderr,
		        "shoal chat: the peer at %s serves no HTTP API (start it with `shoal node "
		        "--api [HOST:]PORT`, or give --api URL)\n",
		        peer);
		json_decref(st);
		return 1;
	}
	/* an API on every address is reached where we reached the peer */
	bool any = !ah || !*ah || !strcmp(ah, "0.0.0.0") || !strcmp(ah, "::");
	bool v6 = strchr(any ? host : ah, ':') != NULL;
	snprintf(base, cap, v6 ? "http://[%s]:%lld" : "http://%s:%lld", any ? host : ah,
	         (long long)port);
	json_decref(st);
	return 0;
}

static void chat_help(void)
{
	printf("Commands:\n");
	for (size_t i = 0; i < sizeof chat_cmds / sizeof chat_cmds[0]; i++) {
		char head[32];
		snprintf(head, sizeof head, "%s%s", chat_cmds[i].name, chat_cmds[i].args);
		printf("  %-16s %s\n", head, chat_cmds[i].help);
	}
	printf("A line that starts with // is sent with one / (\"//x\" sends \"/x\").\n"
	       "Ctrl-C stops a reply; the arrow keys edit the line and walk the history.\n");
}

/* The reply being streamed: SSE lines in, text out. */
typedef struct chat_stream {
	char *line;
	size_t len, cap;
	char *reply;
	size_t rlen, rcap;
	char err[SHOAL_WHY_WRAP_LEN];
	char finish[16];                  /* the last finish_reason seen */
	json_int_t prompt_tok, reply_tok; /* from the usage chunk, or -1 */
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
		json_t *u = json_object_get(j, "usage");
		if (json_is_object(u)) {
			cs->prompt_tok = json_integer_value(json_object_get(u, "prompt_tokens"));
			cs->reply_tok = json_integer_value(json_object_get(u, "completion_tokens"));
		}
		json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
		const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
		if (fin)
			snprintf(cs->finish, sizeof cs->finish, "%s", fin);
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

/* The conversation and what a turn needs. */
typedef struct chat_state {
	CURL *curl;
	struct curl_slist *hdr;
	char base[320]; /* http://host:port */
	json_t *msgs;   /* the turns so far, without the system message */
	char *sys;
	double temp, max_tokens, seed;
	json_int_t ctx; /* the context in tokens, from the banner (0: unknown) */
	bool tty;
} chat_state;

/* One turn: POST the history, stream the reply; the reply is appended to
 * the history, a turn that got no reply is taken back out of it. Returns
 * 0, or 1 with a message on stderr. */
static int chat_turn(chat_state *st)
{
	json_t *all = json_array();
	if (st->sys)
		json_array_append_new(all,
		                      json_pack("{ss ss}", "role", "system", "content", st->sys));
	json_array_extend(all, st->msgs);
	json_t *req = json_pack("{so sb s{sb}}", "messages", all, "stream", 1, "stream_options",
	                        "include_usage", 1);
	if (st->temp >= 0)
		json_object_set_new(req, "temperature", json_real(st->temp));
	if (st->max_tokens > 0)
		json_object_set_new(req, "max_tokens", json_integer((json_int_t)st->max_tokens));
	if (st->seed >= 0)
		json_object_set_new(req, "seed", json_integer((json_int_t)st->seed));
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	char url[400];
	snprintf(url, sizeof url, "%s/v1/chat/completions", st->base);
	chat_stream cs;
	memset(&cs, 0, sizeof cs);
	cs.prompt_tok = cs.reply_tok = -1;
	CURL *curl = st->curl;
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPGET, 0L);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, st->hdr);
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
		if (strstr(cs.err, "context"))
			fprintf(stderr, "(the conversation no longer fits the context: /reset "
			                "starts a new one)\n");
		ret = 1;
	} else if (!strcmp(cs.finish, "length") && st->ctx && cs.prompt_tok >= 0 &&
	           cs.prompt_tok + cs.reply_tok >= st->ctx) {
		fprintf(stderr,
		        "(the context of %lld tokens is full: /reset starts a new "
		        "conversation)\n",
		        (long long)st->ctx);
	}
	if (cs.rlen)
		json_array_append_new(
		    st->msgs, json_pack("{ss ss}", "role", "assistant", "content", cs.reply));
	else /* nothing came back: the turn is not part of the conversation */
		json_array_remove(st->msgs, json_array_size(st->msgs) - 1);
	free(cs.line);
	free(cs.reply);
	free(body);
	return ret;
}

static size_t chat_body(char *p, size_t size, size_t n, void *ud)
{
	chat_stream *cs = ud;
	return chat_append(&cs->reply, &cs->rlen, &cs->rcap, p, size * n) ? size * n : 0;
}

/* GET base + path as JSON: NULL with a message on stderr when it fails. */
static json_t *chat_get(chat_state *st, const char *path)
{
	char url[400];
	snprintf(url, sizeof url, "%s%s", st->base, path);
	chat_stream cs;
	memset(&cs, 0, sizeof cs);
	curl_easy_setopt(st->curl, CURLOPT_URL, url);
	curl_easy_setopt(st->curl, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(st->curl, CURLOPT_HTTPHEADER, st->hdr);
	curl_easy_setopt(st->curl, CURLOPT_WRITEFUNCTION, chat_body);
	curl_easy_setopt(st->curl, CURLOPT_WRITEDATA, &cs);
	curl_easy_setopt(st->curl, CURLOPT_NOPROGRESS, 1L);
	CURLcode rc = curl_easy_perform(st->curl);
	long status = 0;
	curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &status);
	json_t *j = rc == CURLE_OK && cs.reply ? json_loads(cs.reply, 0, NULL) : NULL;
	free(cs.reply);
	if (rc == CURLE_OK && j && status == 200)
		return j;
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	fprintf(stderr, "shoal chat: %s: %s\n", url,
	        rc != CURLE_OK ? curl_easy_strerror(rc)
	        : m            ? m
	                       : "not a shoal peer's API");
	json_decref(j);
	return NULL;
}

/* The banner, from GET /v1/models and /v1/cluster. Returns 0, or 1 with a
 * message on stderr when the peer cannot be asked. */
static int chat_banner(chat_state *st)
{
	json_t *m = chat_get(st, "/v1/models");
	json_t *j = m ? chat_get(st, "/v1/cluster") : NULL;
	if (!j) {
		json_decref(m);
		return 1;
	}
	const char *model =
	    json_string_value(json_object_get(json_array_get(json_object_get(m, "data"), 0), "id"));
	json_t *plan = json_object_get(j, "plan");
	size_t n_peers = json_array_size(json_object_get(j, "peers"));
	size_t n_stages = json_array_size(json_object_get(plan, "stages"));
	st->ctx = json_integer_value(json_object_get(json_object_get(plan, "policy"), "ctx"));
	printf("shoal chat: model %s, cluster '%s' (%zu peer%s", model ? model : "(none yet)",
	       json_string_value(json_object_get(j, "cluster")) ?: "?", n_peers,
	       n_peers == 1 ? "" : "s");
	if (n_stages)
		printf(", %zu stage%s", n_stages, n_stages == 1 ? "" : "s");
	printf(")");
	if (st->ctx)
		printf(", context %lld tokens", (long long)st->ctx);
	printf("\n");
	if (!json_is_true(json_object_get(plan, "servable")))
		printf("The cluster cannot serve yet: %s\n",
		       json_string_value(json_object_get(plan, "why")) ?: "no plan");
	printf("Type a message and Enter. /help lists the commands; Ctrl-C stops a reply, "
	       "Ctrl-D leaves.\n");
	json_decref(m);
	json_decref(j);
	return 0;
}

/* Where the history lives: <state-dir>/chat_history (the node's state
 * directory: SHOAL_STATE_DIR, else ~/.local/state/shoal or the platform's
 * place), the directory made as needed; false when there is none. */
static bool chat_history_path(char *out, size_t cap)
{
	char dir[1024];
	if (shoal_state_dir_default(dir, sizeof dir) != SHOAL_OK ||
	    shoal_state_dir_ensure(dir) != SHOAL_OK)
		return false;
	return (size_t)snprintf(out, cap, "%s/chat_history", dir) < cap;
}

/* The next line, without its newline: libedit on a terminal, else stdin.
 * NULL at the end of input (or Ctrl-C at a bare prompt). The caller frees
 * it. */
static char *chat_read(const chat_state *st)
{
	chat_interrupted = 0;
	if (st->tty)
		return readline("> ");
	char *line = NULL;
	size_t cap = 0;
	if (getline(&line, &cap, stdin) < 0) {
		free(line);
		return NULL;
	}
	line[strcspn(line, "\r\n")] = '\0';
	return line;
}

/* A line that starts with "/": 1 to send text (the rest of "//x"), 0 when
 * it was handled here, -1 to leave. */
static int chat_command(chat_state *st, const char *line, const char **text)
{
	if (line[1] == '/') {
		*text = line + 1;
		return 1;
	}
	size_t n = strcspn(line, " \t");
	const char *arg = line + n + strspn(line + n, " \t");
	if (n == 5 && !strncmp(line, "/help", 5)) {
		chat_help();
	} else if ((n == 5 && !strncmp(line, "/quit", 5)) ||
	           (n == 5 && !strncmp(line, "/exit", 5))) {
		return -1;
	} else if (n == 6 && !strncmp(line, "/reset", 6)) {
		json_array_clear(st->msgs);
		if (st->tty)
			printf("(a new conversation)\n");
	} else if (n == 7 && !strncmp(line, "/system", 7)) {
		free(st->sys);
		st->sys = *arg ? strdup(arg) : NULL;
		if (st->tty)
			printf(st->sys ? "(the system message is set)\n" : "(no system message)\n");
	} else if (n == 6 && !strncmp(line, "/retry", 6)) {
		size_t k = json_array_size(st->msgs);
		const char *role =
		    json_string_value(json_object_get(json_array_get(st->msgs, k - 1), "role"));
		if (!k || !role || strcmp(role, "assistant")) {
			fprintf(stderr, "shoal chat: no reply to write again\n");
			return 0;
		}
		json_array_remove(st->msgs, k - 1);
		*text = NULL; /* send the conversation as it is */
		return 1;
	} else {
		fprintf(stderr,
		        "shoal chat: unknown command %.*s (/help lists them; // sends a "
		        "line that starts with /)\n",
		        (int)n, line);
	}
	return 0;
}

int shoal_cmd_chat(int argc, char **argv)
{
	const char *peer = NULL, *key_file = NULL, *system = NULL, *once = NULL, *api = NULL,
	           *cluster_key = NULL;
	bool insecure = false;
	chat_state st = {.temp = -1, .max_tokens = 0, .seed = -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			chat_usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--insecure")) {
			insecure = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "shoal chat: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--peer"))
			peer = v;
		else if (!strcmp(a, "--api"))
			api = v;
		else if (!strcmp(a, "--key"))
			cluster_key = v;
		else if (!strcmp(a, "--api-key"))
			key_file = v;
		else if (!strcmp(a, "--system"))
			system = v;
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			once = v;
		else if (!strcmp(a, "--temp"))
			st.temp = atof(v);
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n"))
			st.max_tokens = atof(v);
		else if (!strcmp(a, "--seed"))
			st.seed = atof(v);
		else {
			fprintf(stderr, "shoal chat: unknown option %s\n", a);
			chat_usage(stderr);
			return 2;
		}
	}
	if ((peer && api) || (cluster_key && insecure)) {
		chat_usage(stderr);
		return 2;
	}
	char host[256], why[SHOAL_WHY_LEN], auth[320] = "";
	uint16_t port;
	if (api) {
		const char *hp = !strncmp(api, "http://", 7) ? api + 7 : api;
		char hb[300];
		snprintf(hb, sizeof hb, "%s", hp);
		hb[strcspn(hb, "/")] = '\0';
		if (strstr(api, "://") && strncmp(api, "http://", 7)) {
			fprintf(stderr, "shoal chat: --api %s: only http:// URLs\n", api);
			return 2;
		}
		if (shoal_endpoint_split(hb, SHOAL_API_DEFAULT_PORT, host, sizeof host, &port, why,
		                         sizeof why)) {
			fprintf(stderr, "shoal chat: --api %s: %s\n", api, why);
			return 2;
		}
		snprintf(st.base, sizeof st.base,
		         strchr(host, ':') ? "http://[%s]:%u" : "http://%s:%u", host,
		         (unsigned)port);
	} else if (chat_api_of_peer(peer, cluster_key, insecure, st.base, sizeof st.base)) {
		return 1;
	}
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
	st.curl = curl_easy_init();
	st.hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (auth[0])
		st.hdr = curl_slist_append(st.hdr, auth);
	st.msgs = json_array();
	st.sys = system ? strdup(system) : NULL;
	st.tty = !once && isatty(0) && isatty(1);
	struct sigaction sa = {.sa_handler = chat_on_sigint};
	sigaction(SIGINT, &sa, NULL);
	int rc = 0;
	char hist[600];
	bool keep = false;
	if (st.tty) {
		if (chat_banner(&st)) {
			rc = 1;
			goto done;
		}
		rl_readline_name = "shoal";
		using_history();
		stifle_history(1000);
		keep = chat_history_path(hist, sizeof hist);
		if (keep)
			read_history(hist);
	}
	for (;;) {
		const char *text = once;
		char *line = NULL;
		if (!once) {
			line = chat_read(&st);
			if (!line)
				break; /* end of input, or Ctrl-C at the prompt */
			text = line;
			if (!*text) {
				free(line);
				continue;
			}
			if (st.tty)
				add_history(line);
			if (text[0] == '/') {
				int c = chat_command(&st, line, &text);
				if (c <= 0) {
					free(line);
					if (c < 0)
						break;
					continue;
				}
			}
		}
		if (text)
			json_array_append_new(
			    st.msgs, json_pack("{ss ss}", "role", "user", "content", text));
		rc = chat_turn(&st);
		free(line);
		if (once)
			break;
	}
	if (keep)
		write_history(hist);
done:
	free(st.sys);
	json_decref(st.msgs);
	curl_slist_free_all(st.hdr);
	curl_easy_cleanup(st.curl);
	curl_global_cleanup();
	return rc;
}
