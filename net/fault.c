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
#include <time.h>

#ifdef SHOAL_TEST_HOOKS

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void fault_init(void)
{
	const char *env = getenv("SHOAL_TEST_FAULT");
	if (!env || !*env)
		return;
	char *copy = strdup(env), *save = NULL;
	if (!copy)
		return;
	for (char *rule = strtok_r(copy, ",", &save); rule; rule = strtok_r(NULL, ",", &save)) {
		char text[128];
		snprintf(text, sizeof text, "%s", rule);
		if (fault_n_rules == FAULT_RULES_MAX ||
		    fault_parse_rule(rule, &fault_rules[fault_n_rules])) {
			SHOAL_LOG_E("fault", "SHOAL_TEST_FAULT: ignoring rule \"%s\" (LINK:FAULT[:OPT=V]...,"
			                     " at most %d)", text, FAULT_RULES_MAX);
			continue;
		}
		SHOAL_LOG_W("fault", "test hook armed: %s", text);
		fault_n_rules++;
	}
	free(copy);
}

shoal_fault_kind shoal_fault_next(const char *link, const char *what, shoal_fault *f)
{
	pthread_once(&fault_once, fault_init);
	f->kind = SHOAL_FAULT_NONE;
	if (!fault_n_rules)
		return SHOAL_FAULT_NONE;
	pthread_mutex_lock(&fault_lock);
	for (int i = 0; i < fault_n_rules && !f->kind; i++) {
		fault_rule *r = &fault_rules[i];
		if (strcmp(r->link, link) || (r->kind_name[0] && (!what || strcmp(r->kind_name, what))))
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
