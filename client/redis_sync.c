/*
 * redis_sync.c - the CLI's blocking Redis connection (redis_sync.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/err.h"
#include "redis_sync.h"

static struct timeval
tv_ms(long ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

/* Sends one command from argv; 0, or -EIO with msg naming what failed. */
static int
setup_cmd(redisContext *rc, int argc, const char **argv, char *msg, size_t len)
{
	size_t lens[3];
	redisReply *r;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(rc, argc, argv, lens);
	if (r == NULL || r->type == REDIS_REPLY_ERROR) {
		snprintf(msg, len, "%s: %s", argv[0], r ? r->str : rc->errstr);
		freeReplyObject(r);
		return -EIO;
	}
	freeReplyObject(r);
	return 0;
}

redisContext *
cli_redis_open(const char *url, struct redis_url *out, char *msg, size_t len)
{
	struct redis_url local, *u = out != NULL ? out : &local;
	struct err e = { 0 };
	redisContext *rc = NULL;
	const char *argv[3];
	char db[16];
	int argc = 0;

	if (redis_url_parse(url, u, &e) < 0) {
		snprintf(msg, len, "%s", e.msg);
		goto out;
	}
	if (u->path[0])
		rc = redisConnectUnixWithTimeout(u->path, tv_ms(CLI_REDIS_CONNECT_MS));
	else
		rc = redisConnectWithTimeout(u->host, u->port, tv_ms(CLI_REDIS_CONNECT_MS));
	if (rc == NULL || rc->err) {
		snprintf(msg, len, "redis %s: %s", u->path[0] ? u->path : u->host,
		    rc ? rc->errstr : "cannot allocate a context");
		goto out_free;
	}
	if (redisSetTimeout(rc, tv_ms(CLI_REDIS_COMMAND_MS)) != REDIS_OK) {
		snprintf(msg, len, "redis: %s", rc->errstr);
		goto out_free;
	}
	if (u->user[0] || u->pass[0]) {
		argv[argc++] = "AUTH";
		if (u->user[0])
			argv[argc++] = u->user;
		argv[argc++] = u->pass;
		if (setup_cmd(rc, argc, argv, msg, len) < 0)
			goto out_free;
	}
	if (u->db != 0) {
		snprintf(db, sizeof(db), "%d", u->db);
		argv[0] = "SELECT";
		argv[1] = db;
		if (setup_cmd(rc, 2, argv, msg, len) < 0)
			goto out_free;
	}
	goto out;

out_free:
	if (rc != NULL)
		redisFree(rc);
	rc = NULL;
out:
	if (out == NULL)
		explicit_bzero(&local, sizeof(local));
	return rc;
}
