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
 */
#ifndef SANDQ_COMMON_LOG_H
#define SANDQ_COMMON_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN = 1,
	LOG_LVL_INFO = 2,
	LOG_LVL_DEBUG = 3,
};

/* The current level; read by the macros below before formatting. */
extern int log_level_current;

/* Sets the prefix printed on every line (copied). Call once per process. */
void log_procinit(const char *name);
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
