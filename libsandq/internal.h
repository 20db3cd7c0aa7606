/*
 * internal.h - what libsandq.c gives the library's other files (cases.c,
 * presets.c, audit.c): reads on the connection and its error message. Not
 * installed; sandq.h is the public header.
 */
#ifndef SANDQ_LIBSANDQ_INTERNAL_H
#define SANDQ_LIBSANDQ_INTERNAL_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "sandq.h"

#define SANDQ_KEY_PREFIX "sandq"	/* key prefix (docs/protocol.md, Keys) */

/* Sets c's last error (sandq_last_error()) and returns code. */
int sandq__fail(struct sandq *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Runs a read-only command (safe to repeat: reconnects once after a broken
 * socket). Returns 0 with *out owning a reply that is not an error reply,
 * or -EIO with c's message set.
 */
int sandq__read(struct sandq *c, redisReply **out, int argc, const char **argv,
    const size_t *lens);
/* The connection's tenant name. */
const char *sandq__tenant(const struct sandq *c);

#endif
