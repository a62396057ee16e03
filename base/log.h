/*
 * base/log.h: readable log lines on stderr, "HH:MM:SS.mmm LEVEL part: text".
 *
 * The threshold is per process (set once from the CLI, e.g. -v); logging is
 * the one piece of process-wide state we allow, since every part must be
 * able to say why it dropped a bad message without being handed a sink.
 */
#ifndef SHOAL_BASE_LOG_H
#define SHOAL_BASE_LOG_H

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

#define SHOAL_LOG_E(part, ...) shoal_log(SHOAL_LOG_ERROR, part, __VA_ARGS__)
#define SHOAL_LOG_W(part, ...) shoal_log(SHOAL_LOG_WARN, part, __VA_ARGS__)
#define SHOAL_LOG_I(part, ...) shoal_log(SHOAL_LOG_INFO, part, __VA_ARGS__)
#define SHOAL_LOG_D(part, ...) shoal_log(SHOAL_LOG_DEBUG, part, __VA_ARGS__)

#endif
