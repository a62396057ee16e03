/*
 * net/fault.c: the fault-injection test hook (see fault.h): the rules of
 * SHOAL_TEST_FAULT, parsed once, and the per-rule counters.
 *
 * Part: net/. Process-wide state by necessity: the hook is reached from
 * transports that know no node. Without SHOAL_TEST_HOOKS only the inert
 * stubs are compiled.
 */
#include "config.h"

#include "net/fault.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef SHOAL_TEST_HOOKS

#include <pthread.h>
#include <sys/stat.h>
#include <stdio.h>

#include "base/log.h"

#define FAULT_RULES_MAX 8

typedef struct fault_rule {
	char link[8];
	char kind_name[16]; /* "" for any */
	shoal_fault_kind fault;
	uint64_t n, skip, seed;
	double p;
	uint32_t ms;
	uint64_t seen, fired; /* eligible frames, faults made */
} fault_rule;

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static fault_rule fault_rules[FAULT_RULES_MAX];
static int fault_n_rules;
static const char *fault_file; /* SHOAL_TEST_FAULT=@FILE, else NULL */
static int64_t fault_stamp[4]; /* its size, mtime and inode when last read */

static const char *const fault_names[] = {
    [SHOAL_FAULT_DROP] = "drop",
    [SHOAL_FAULT_DELAY] = "delay",
    [SHOAL_FAULT_TRUNCATE] = "truncate",
    [SHOAL_FAULT_CORRUPT] = "corrupt",
};

/* splitmix64: a seeded, stateless draw for frame i of a rule. */
static uint64_t fault_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* One rule "link:fault[:opt=value]..." into *r; 0, or -1 when malformed. */
static int fault_parse_rule(char *s, fault_rule *r)
{
	char *save = NULL, *tok = strtok_r(s, ":", &save);
	memset(r, 0, sizeof *r);
	r->n = 1;
	r->seed = 1;
	r->p = 1.0;
	r->ms = 200;
	if (!tok || strlen(tok) >= sizeof r->link)
		return -1;
	strcpy(r->link, tok);
	if (!(tok = strtok_r(NULL, ":", &save)))
		return -1;
	for (int k = SHOAL_FAULT_DROP; k <= SHOAL_FAULT_CORRUPT; k++)
		if (!strcmp(tok, fault_names[k]))
			r->fault = (shoal_fault_kind)k;
	if (!r->fault)
		return -1;
	while ((tok = strtok_r(NULL, ":", &save))) {
		char *eq = strchr(tok, '='), *end;
		if (!eq)
			return -1;
		*eq++ = 0;
		if (!strcmp(tok, "kind")) {
			if (strlen(eq) >= sizeof r->kind_name)
				return -1;
			strcpy(r->kind_name, eq);
			continue;
		}
		errno = 0;
		if (!strcmp(tok, "p")) {
			r->p = strtod(eq, &end);
			if (*end || errno || !(r->p >= 0 && r->p <= 1))
				return -1;
			continue;
		}
		unsigned long long v = strtoull(eq, &end, 10);
		if (!*eq || *end || errno)
			return -1;
		if (!strcmp(tok, "n"))
			r->n = v;
		else if (!strcmp(tok, "skip"))
			r->skip = v;
		else if (!strcmp(tok, "seed"))
			r->seed = v;
		else if (!strcmp(tok, "ms") && v <= 600000)
			r->ms = (uint32_t)v;
		else
			return -1;
	}
	return 0;
}

/* Parse rules text (modified) into the table, replacing what was there. */
static void fault_parse(char *rules)
{
	char *save = NULL;
	fault_n_rules = 0;
	for (char *rule = strtok_r(rules, ",\n", &save); rule;
	     rule = strtok_r(NULL, ",\n", &save)) {
		char text[128];
		snprintf(text, sizeof text, "%s", rule);
		if (fault_n_rules == FAULT_RULES_MAX ||
		    fault_parse_rule(rule, &fault_rules[fault_n_rules])) {
			SHOAL_LOG_E("fault",
			            "SHOAL_TEST_FAULT: ignoring rule \"%s\" (LINK:FAULT[:OPT=V]...,"
			            " at most %d)",
			            text, FAULT_RULES_MAX);
			continue;
		}
		SHOAL_LOG_W("fault", "test hook armed: %s", text);
		fault_n_rules++;
	}
}

static void fault_init(void)
{
	const char *env = getenv("SHOAL_TEST_FAULT");
	if (!env || !*env)
		return;
	if (env[0] == '@') {
		fault_file = env + 1;
		return;
	}
	char *copy = strdup(env);
	if (copy)
		fault_parse(copy);
	free(copy);
}

/* SHOAL_TEST_FAULT=@FILE: re-read FILE whenever its size or mtime change
 * (a stat per frame: tests only); a missing or empty file arms nothing.
 * Called with the lock held. */
static void fault_reload(void)
{
	struct stat st;
	if (stat(fault_file, &st)) {
		fault_n_rules = 0;
		memset(fault_stamp, 0, sizeof fault_stamp);
		return;
	}
#ifdef __APPLE__
	long ns = st.st_mtimespec.tv_nsec;
#else
	long ns = st.st_mtim.tv_nsec;
#endif
	int64_t stamp[4] = {(int64_t)st.st_size, (int64_t)st.st_mtime, ns, (int64_t)st.st_ino};
	if (!memcmp(stamp, fault_stamp, sizeof stamp))
		return;
	memcpy(fault_stamp, stamp, sizeof stamp);
	char text[1024] = "";
	FILE *fp = fopen(fault_file, "r");
	if (fp) {
		size_t n = fread(text, 1, sizeof text - 1, fp);
		text[n] = 0;
		fclose(fp);
	}
	fault_parse(text);
}

shoal_fault_kind shoal_fault_next(const char *link, const char *what, shoal_fault *f)
{
	pthread_once(&fault_once, fault_init);
	f->kind = SHOAL_FAULT_NONE;
	if (!fault_n_rules && !fault_file)
		return SHOAL_FAULT_NONE;
	pthread_mutex_lock(&fault_lock);
	if (fault_file)
		fault_reload();
	for (int i = 0; i < fault_n_rules && !f->kind; i++) {
		fault_rule *r = &fault_rules[i];
		if (strcmp(r->link, link) ||
		    (r->kind_name[0] && (!what || strcmp(r->kind_name, what))))
			continue;
		uint64_t draw = fault_mix(r->seed * 0x100000001b3ull + r->seen++);
		if (r->seen <= r->skip || (r->n && r->fired >= r->n))
			continue;
		if (r->p < 1 && (double)(draw >> 11) * 0x1p-53 >= r->p)
			continue;
		r->fired++;
		f->kind = r->fault;
		f->delay_ms = r->ms;
		f->pick = fault_mix(draw);
		SHOAL_LOG_W("fault", "test hook: %s %s frame %llu (%s), fault %llu of %llu", link,
		            fault_names[r->fault], (unsigned long long)r->seen, what ? what : "-",
		            (unsigned long long)r->fired, (unsigned long long)r->n);
	}
	pthread_mutex_unlock(&fault_lock);
	return f->kind;
}

#else

shoal_fault_kind shoal_fault_next(const char *link, const char *what, shoal_fault *f)
{
	(void)link;
	(void)what;
	f->kind = SHOAL_FAULT_NONE;
	return SHOAL_FAULT_NONE;
}

#endif

int shoal_fault_message(const char *link, const char *what, const void **buf, size_t *len,
                        void **copy)
{
	shoal_fault f;
	*copy = NULL;
	switch (shoal_fault_next(link, what, &f)) {
	case SHOAL_FAULT_DROP:
		return 1;
	case SHOAL_FAULT_DELAY:
		shoal_fault_sleep(f.delay_ms);
		return 0;
	case SHOAL_FAULT_TRUNCATE:
		*len = *len ? (size_t)(f.pick % *len) : 0;
		return 0;
	case SHOAL_FAULT_CORRUPT:
		if (!*len)
			return 0;
		if (!(*copy = malloc(*len)))
			return 1;
		memcpy(*copy, *buf, *len);
		shoal_fault_flip(*copy, *len, f.pick);
		*buf = *copy;
		return 0;
	default:
		return 0;
	}
}

void shoal_fault_flip(uint8_t *buf, size_t len, uint64_t pick)
{
	buf[(pick >> 3) % len] ^= (uint8_t)(1u << (pick & 7));
}

void shoal_fault_sleep(uint32_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
