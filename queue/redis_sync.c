/*
 * redis_sync.c - a blocking Redis connection from a sandq URL
 * (redis_sync.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "redis_sync.h"

static struct timeval
tv_ms(long ms)
{
	return (struct timeval){ .tv_sec = ms / 1000,
	    .tv_usec = (ms % 1000) * 1000 };
}

/* Sends one command from argv; 0, or -EIO with e naming what failed. */
static int
setup_cmd(redisContext *rc, int argc, const char **argv, struct err *e)
{
	size_t lens[3];
	redisReply *r;
	int ret = 0;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(rc, argc, argv, lens);
	if (r == NULL || r->type == REDIS_REPLY_ERROR)
		ret = err_set(e, -EIO, "%s: %s", argv[0],
		    r != NULL ? r->str : rc->errstr);
	freeReplyObject(r);
	return ret;
}

redisContext *
redis_sync_open(const char *url, long connect_ms, long command_ms,
    struct redis_url *out, struct err *e)
{
	/* cppcheck-suppress uninitvar ; only its address is taken here */
	struct redis_url local, *u = out != NULL ? out : &local;
	redisContext *rc = NULL;
	const char *argv[3];
	char db[16];
	int argc = 0;

	if (redis_url_parse(url, u, e) < 0)
		goto out;
	if (u->path[0])
		rc = redisConnectUnixWithTimeout(u->path, tv_ms(connect_ms));
	else
		rc = redisConnectWithTimeout(u->host, u->port,
		    tv_ms(connect_ms));
	if (rc == NULL || rc->err) {
		err_set(e, -EIO, "redis %s: %s", u->path[0] ? u->path : u->host,
		    rc ? rc->errstr : "cannot allocate a context");
		goto out_free;
	}
	if (redisSetTimeout(rc, tv_ms(command_ms)) != REDIS_OK) {
		err_set(e, -EIO, "redis: %s", rc->errstr);
		goto out_free;
	}
	if (u->user[0] || u->pass[0]) {
		argv[argc++] = "AUTH";
		if (u->user[0])
			argv[argc++] = u->user;
		argv[argc++] = u->pass;
		if (setup_cmd(rc, argc, argv, e) < 0)
			goto out_free;
	}
	if (u->db != 0) {
		snprintf(db, sizeof(db), "%d", u->db);
		argv[0] = "SELECT";
		argv[1] = db;
		if (setup_cmd(rc, 2, argv, e) < 0)
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
