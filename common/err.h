/*
 * err.h - error codes and the context-carrying error record.
 *
 * Functions return 0 on success and a negative errno on failure (libuv
 * style). Where the caller needs to know *what* failed (which field of a job,
 * which line of a config file, which path in a sandbox), they also take a
 * `struct err *` as their last argument and fill in a message that can go
 * verbatim into a result or a log line.
 */
#ifndef SANDQ_COMMON_ERR_H
#define SANDQ_COMMON_ERR_H

#include <stddef.h>

/* Error record filled by functions that can explain their failure. */
struct err {
	int code;		/* negative errno, or 0 */
	char msg[256];		/* human-readable, names the field/path */
};

/* Sets e->code and formats e->msg; returns code so callers can `return`. */
int err_set(struct err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Clears a record. */
void err_clear(struct err *e);

#endif
