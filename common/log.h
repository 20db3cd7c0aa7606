/*
 * log.h - process-wide diagnostic logging (not the audit trail).
 *
 * Every sandq process logs to stderr with a prefix set once at start-up
 * (log_procinit("worker/3")). Workers run with stderr pointing at the
 * dispatcher's own stderr, so one stream shows every process, each line tagged.
 * The level is checked before the arguments are formatted, so a disabled
 * log_debug() costs one comparison.
 *
 * The `x` variants do not append strerror(errno); fatal()/fatalx() log and
 * exit(1) and are for start-up errors and broken invariants only: the
 * dispatcher never exits because one job failed.
 *
 * A line reads "2026-11-26T03:27:36.123Z sandqd warn: message" (RFC 3339,
 * UTC, milliseconds). When stderr is the journal (systemd sets
 * JOURNAL_STREAM to the device:inode of the stream it gives us; checked
 * against fstat(2) in log_procinit()), the time is left to journald and the
 * line starts with its syslog priority instead, "<4>sandqd warn: message"
 * (sd-daemon(3)). log_setformat("json") (common/log_json.c, which links
 * jansson) writes one JSON object a line for log shippers:
 * {"time","level","process","message"}, after the same "<N>" in the journal.
 */
#ifndef SANDQ_COMMON_LOG_H
#define SANDQ_COMMON_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN = 1,
	LOG_LVL_INFO = 2,
	LOG_LVL_DEBUG = 3,
};

/* The current level; read by the macros below before formatting. */
extern int log_level_current;

/*
 * Sets the prefix printed on every line (copied) and checks whether stderr
 * is the journal (log_to_journal()). Call once per process.
 */
void log_procinit(const char *name);
/* Whether lines carry a "<N>" priority instead of the time (journald). */
bool log_to_journal(void);
/*
 * Sets the line format: "text" or "json". Returns 0, or -EINVAL for an
 * unknown name. Defined in common/log_json.c (jansson): only the binaries
 * that link it can choose json.
 */
int log_setformat(const char *name);
/* The current format's name, "text" or "json". */
const char *log_getformat(void);

/*
 * The JSON line writer log_json.c installs: writes {"time", "level",
 * "process", "message"} and no newline into buf (size bytes); returns the
 * bytes written, or -1 (the caller then writes the text line).
 */
typedef int (*log_json_cb)(char *buf, size_t size, const char *time,
    const char *level, const char *process, const char *message);
void log__setjson(log_json_cb cb);
/* Sets the level; returns 0, or -EINVAL for an unknown name. */
int log_setlevel(const char *name);
void log_setlevel_num(int level);

void log__write(int level, int with_errno, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

#define log__at(lvl, e, ...)                                   \
	do {                                                   \
		if (log_level_current >= (lvl))                \
			log__write((lvl), (e), __VA_ARGS__);   \
	} while (0)

#define log_warn(...) log__at(LOG_LVL_WARN, 1, __VA_ARGS__)
#define log_warnx(...) log__at(LOG_LVL_WARN, 0, __VA_ARGS__)
#define log_error(...) log__at(LOG_LVL_ERROR, 1, __VA_ARGS__)
#define log_errorx(...) log__at(LOG_LVL_ERROR, 0, __VA_ARGS__)
#define log_info(...) log__at(LOG_LVL_INFO, 0, __VA_ARGS__)
#define log_debug(...) log__at(LOG_LVL_DEBUG, 0, __VA_ARGS__)

#endif
