/*
 * log.c - stderr logging with a per-process prefix and a level.
 *
 * One line per call, written with a single write(2) so lines of the
 * dispatcher and its workers, which share stderr, never interleave inside a
 * line. No allocation: the line is built in a fixed buffer and cut if long.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

int log_level_current = LOG_LVL_INFO;
static char log_prefix[32] = "sandq";

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void
log_procinit(const char *name)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", name);
}

int
log_setlevel(const char *name)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			log_level_current = (int)i;
			return 0;
		}
	}
	return -EINVAL;
}

void
log_setlevel_num(int level)
{
	if (level < LOG_LVL_ERROR)
		level = LOG_LVL_ERROR;
	if (level > LOG_LVL_DEBUG)
		level = LOG_LVL_DEBUG;
	log_level_current = level;
}

static void
log_vwrite(int level, int errnum, const char *fmt, va_list ap)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	int n, m;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ",
	    tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
	    log_prefix, level_names[level]);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (m > 0)
		n += m;
	if ((size_t)n >= sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	if (errnum) {
		m = snprintf(line + n, sizeof(line) - (size_t)n, ": %s",
		    strerror(errnum));
		if (m > 0)
			n += m;
		if ((size_t)n >= sizeof(line) - 2)
			n = (int)sizeof(line) - 2;
	}
	line[n++] = '\n';
	/* A failed diagnostic write has nowhere to be reported. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

void
log__write(int level, int with_errno, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(level, with_errno ? saved : 0, fmt, ap);
	va_end(ap);
	errno = saved;
}

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LVL_ERROR, saved, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LVL_ERROR, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
