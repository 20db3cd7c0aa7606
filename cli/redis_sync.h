/*
 * redis_sync.h - the CLI's blocking Redis connection (hiredis), for the
 * verbs that talk to Redis directly rather than through libsandq: audit,
 * status, tenant.
 */
#ifndef SANDQ_CLI_REDIS_SYNC_H
#define SANDQ_CLI_REDIS_SYNC_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "../proto/url.h"
#include "../queue/redis_sync.h"

#define CLI_REDIS_CONNECT_MS 5000	/* connecting, at most */
#define CLI_REDIS_COMMAND_MS 30000	/* one command, at most */

/*
 * redis_sync_open() with the timeouts above: connects to url (redis:// or
 * unix://, with USER:PASS@ and /DB as proto/url.h reads them), and sends
 * AUTH and SELECT as the URL asks. Returns the context, or NULL with msg (len
 * bytes) saying why. When u is not NULL it receives the parsed URL (the
 * caller wipes it: it holds the password); otherwise it is wiped here.
 */
redisContext *cli_redis_open(const char *url, struct redis_url *u, char *msg,
    size_t len);

#endif
