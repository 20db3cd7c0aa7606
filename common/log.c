/*
 * log.c - stderr logging with a per-process prefix and a level.
 *
 * One line per call, written with a single write(2) so lines of the
 * dispatcher and its workers, which share stderr, never interleave inside a
 * line. No allocation in text: the line is built in a fixed buffer and cut
 * if long. The JSON format (log_json.c) is a callback, so that only the
 * binaries that choose it link jansson; when it fails (out of memory) the
 * text line is written instead.
 *
 * Under systemd, stderr is a stream to journald, which stamps each line
 * itself and reads a leading "<N>" as its syslog priority (sd-daemon(3));
 * the stream is recognised by JOURNAL_STREAM ("DEV:INODE"), which a
 * process started from a unit inherits even once stderr is elsewhere,
 * hence the comparison with fstat(2) of stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

int log_level_current = LOG_LVL_INFO;
static char log_prefix[32] = "sandq";

static bool log_journal;
static log_json_cb log_json;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* syslog(3) priorities of the levels: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG. */
static const int level_prio[] = { 3, 4, 6, 7 };

/* Whether stderr is the stream JOURNAL_STREAM names. */
static bool
stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	uintmax_t dev, ino;
	struct stat st;
	char end;

	if (js == NULL || sscanf(js, "%ju:%ju%c", &dev, &ino, &end) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (uintmax_t)st.st_dev == dev && (uintmax_t)st.st_ino == ino;
}

void
log_procinit(const char *name)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", name);
	log_journal = stderr_is_journal();
}

bool
log_to_journal(void)
{
	return log_journal;
}

void
log__setjson(log_json_cb cb)
{
	log_json = cb;
}

const char *
log_getformat(void)
{
	return log_json != NULL ? "json" : "text";
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

/*
 * Adds m bytes just formatted (snprintf's answer) to the length *n of a
 * buffer of size bytes, keeping room for a newline and a NUL: a long line
 * is cut.
 */
static void
line_add(size_t size, int *n, int m)
{
	if (m > 0)
		*n += m;
	if ((size_t)*n >= size - 2)
		*n = (int)size - 2;
}

static void
log_vwrite(int level, int errnum, const char *fmt, va_list ap)
{
	char msg[1024], line[4096], stamp[64];
	struct timespec ts;
	struct tm tm;
	int n = 0, m;

	m = vsnprintf(msg, sizeof(msg), fmt, ap);
	line_add(sizeof(msg), &n, m < 0 ? 0 : m);
	msg[n] = '\0';
	if (errnum) {
		m = snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s",
		    strerror(errnum));
		line_add(sizeof(msg), &n, m);
		msg[n] = '\0';
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, ts.tv_nsec / 1000000);

	/* journald stamps lines itself: the priority replaces the time. */
	n = 0;
	if (log_journal)
		n = snprintf(line, sizeof(line), "<%d>", level_prio[level]);
	m = -1;
	if (log_json != NULL)
		m = log_json(line + n, sizeof(line) - 2 - (size_t)n, stamp,
		    level_names[level], log_prefix, msg);
	if (m < 0 && log_journal)
		m = snprintf(line + n, sizeof(line) - (size_t)n, "%s %s: %s",
		    log_prefix, level_names[level], msg);
	else if (m < 0)
		m = snprintf(line + n, sizeof(line) - (size_t)n, "%s %s %s: %s",
		    stamp, log_prefix, level_names[level], msg);
	line_add(sizeof(line), &n, m);
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
