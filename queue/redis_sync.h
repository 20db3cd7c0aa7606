/*
 * redis_sync.h - a blocking Redis connection (hiredis) from a sandq Redis
 * URL, with AUTH and SELECT done: for the CLI's verbs that talk to Redis
 * directly (cli/redis_sync.h) and the Redis snapshot store, which runs
 * on a work thread (dispatcher/rstore/rstore.h). The dispatcher's own connections are
 * asynchronous (redis.h).
 */
#ifndef SANDQ_QUEUE_REDIS_SYNC_H
#define SANDQ_QUEUE_REDIS_SYNC_H

#include <hiredis/hiredis.h>

#include "../common/err.h"
#include "../proto/url.h"

/*
 * Connects to url (redis:// or unix://, with USER:PASS@ and /DB as url.h
 * reads them) within connect_ms, sets command_ms as the timeout of every
 * later command, and sends AUTH and SELECT as the URL asks. Returns the
 * context (the caller's: redisFree()), or NULL with e saying why (-EINVAL
 * for a bad URL, -EIO otherwise). When u is not NULL it receives the
 * parsed URL (the caller wipes it: it holds the password); otherwise it
 * is wiped here.
 */
redisContext *redis_sync_open(const char *url, long connect_ms,
    long command_ms, struct redis_url *u, struct err *e);

#endif
