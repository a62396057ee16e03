/*
 * base/log.c: the stderr logger (see log.h).
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "base/clock.h"

static shoal_log_level log_threshold = SHOAL_LOG_INFO;

void shoal_log_set_level(shoal_log_level level)
{
	log_threshold = level;
}
shoal_log_level shoal_log_get_level(void)
{
	return log_threshold;
}

bool shoal_log_limit_pass(shoal_log_limit *l, uint64_t period_us, uint64_t *held)
{
	uint64_t now = shoal_clock_now_us();
	if (l->last_us && now - l->last_us < period_us) {
		l->held++;
		return false;
	}
	*held = l->held;
	l->held = 0;
	l->last_us = now ? now : 1;
	return true;
}

void shoal_log(shoal_log_level level, const char *part, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	if (level > log_threshold)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	localtime_r(&ts.tv_sec, &tm);
	char line[1024];
	int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s %s: ", tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, names[level], part);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof line)
		vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}
