/*
 * base/log.h: readable log lines on stderr, "HH:MM:SS.mmm LEVEL part: text".
 *
 * The threshold is per process (set once from the CLI, e.g. -v); logging is
 * the one piece of process-wide state we allow, since every part must be
 * able to say why it dropped a bad message without being handed a sink.
 */
#ifndef SHOAL_BASE_LOG_H
#define SHOAL_BASE_LOG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum shoal_log_level {
	SHOAL_LOG_ERROR = 0,
	SHOAL_LOG_WARN,
	SHOAL_LOG_INFO,
	SHOAL_LOG_DEBUG,
} shoal_log_level;

void shoal_log_set_level(shoal_log_level level);
shoal_log_level shoal_log_get_level(void);

void shoal_log(shoal_log_level level, const char *part, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A rate limit for a line that could repeat per row or per frame (a peer
 * retrying into a stage that dropped its session): at most one line a
 * period; the lines held back are counted, and the next line that passes
 * says how many. One per call site and object, owned by the object's
 * thread. */
typedef struct shoal_log_limit {
	uint64_t last_us; /* the last line's time (the injectable clock); 0: none yet */
	uint64_t held;    /* lines held back since */
} shoal_log_limit;

/* The period most per-row lines use: one a second. */
#define SHOAL_LOG_LIMIT_US 1000000u

/* True when the line may go now: *held gets the count of lines held back
 * since the last one (then 0). False: held back and counted. */
bool shoal_log_limit_pass(shoal_log_limit *l, uint64_t period_us, uint64_t *held);

#define SHOAL_LOG_E(part, ...) shoal_log(SHOAL_LOG_ERROR, part, __VA_ARGS__)
#define SHOAL_LOG_W(part, ...) shoal_log(SHOAL_LOG_WARN, part, __VA_ARGS__)
#define SHOAL_LOG_I(part, ...) shoal_log(SHOAL_LOG_INFO, part, __VA_ARGS__)
#define SHOAL_LOG_D(part, ...) shoal_log(SHOAL_LOG_DEBUG, part, __VA_ARGS__)

#endif
