/*
 * redis_sync.c - the CLI's blocking Redis connection (redis_sync.h): the
 * shared queue/redis_sync.c with the CLI's timeouts and message buffer.
 */
#include <stdio.h>

#include "redis_sync.h"

redisContext *
cli_redis_open(const char *url, struct redis_url *u, char *msg, size_t len)
{
	struct err e = { 0 };
	redisContext *rc;

	rc = redis_sync_open(url, CLI_REDIS_CONNECT_MS, CLI_REDIS_COMMAND_MS, u,
	    &e);
	if (rc == NULL)
		snprintf(msg, len, "%s", e.msg);
	return rc;
}
