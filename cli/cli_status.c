/*
 * cli_status.c - `sandq status`: the hosts serving this Redis and, per
 * tenant, its queue (and how much of it waits for an image pull), what
 * runs, what finished and what was refused in the last minute, and its
 * share of the workers.
 *
 * Sources (admin credentials): PREFIX:hosts, where each sandqd writes its
 * status every couple of seconds (dispatcher/status.c), the tenant set
 * PREFIX:tenants, and each tenant's job stream, whose length is its jobs
 * not yet finished (an entry leaves the stream with its result). A host
 * whose last status is older than STALE_MS is listed as gone and not
 * counted. The figures are queue/status.c's, shared with the gateway.
 *
 * A health check: the exit status is 1 when no host is live (none has
 * reported within the stale time), after the figures are printed, so a
 * monitor can run `sandq status --json` and read both.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../queue/status.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_status.h"
#include "redis_sync.h"

#define PREFIX "sandq"

/* An integer member or 0. */
static long long
jint(const json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

/* Prints the view as the two tables. */
static void
print_tables(const struct queue_status *qs, const json_t *out)
{
	const json_t *hosts = json_object_get(out, "hosts");
	const json_t *tenants = json_object_get(out, "tenants");
	long long workers = jint(out, "workers");
	size_t i;
	json_t *e;

	printf("%-24s %8s %6s %8s %11s\n", "HOST", "WORKERS", "BUSY", "AGE",
	    "AUDIT LOST");
	/* A host's name is whatever its sandqd wrote: escaped as written. */
	json_array_foreach(hosts, i, e) {
		size_t len = 0;
		const char *name = queue_status_host(qs, i, &len);

		printf("%-24s %8lld %6lld %7.1fs %11lld%s\n",
		    cli_escn_cut(name ? name : "", len, 24),
		    jint(e, "workers"), jint(e, "busy"),
		    (double)jint(e, "age_ms") / 1000.0, jint(e, "audit_lost"),
		    json_is_true(json_object_get(e, "live")) ? "" : "  (gone)");
	}
	printf("\n%-24s %8s %8s %8s %8s %10s %6s\n", "TENANT", "QUEUED", "PULLING",
	    "RUNNING", "DONE/1m", "REFUSED/1m", "SHARE");
	json_array_foreach(tenants, i, e)
		printf("%-24s %8lld %8lld %8lld %8lld %10lld %5.0f%%\n",
		    cli_esc(json_string_value(json_object_get(e, "name"))),
		    jint(e, "queued"), jint(e, "pulling"), jint(e, "running"),
		    jint(e, "done_1m"), jint(e, "refused_1m"), workers > 0 ?
		    100.0 * (double)jint(e, "running") / (double)workers : 0.0);
}

int
cli_status_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct queue_status *qs = NULL;
	json_t *out = NULL;
	bool json = conn->json;
	redisContext *rc = NULL;
	redisReply *r = NULL;
	char msg[512], key[KEY_MAX];
	int c, status = 125;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'j')
			json = true;
		else if (c == 'h') {
			cli_man_print("status");
			status = 0;
			goto out;
		} else {
			fputs("Try 'sandq status --help'.\n", stderr);
			status = 2;
			goto out;
		}
	}
	if (conn->help) {
		cli_man_print("status");
		status = 0;
		goto out;
	}
	if (optind != argc) {
		cli_warn("status takes no argument");
		status = 2;
		goto out;
	}
	if ((rc = cli_redis_open(conn->redis, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		goto out;
	}
	qs = queue_status_new(now_ms());
	/* The hosts, and what each says of each tenant. */
	r = redisCommand(rc, "HGETALL %s:hosts", PREFIX);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		cli_warn("%s:hosts: %s", PREFIX,
		    r ? (r->type == REDIS_REPLY_ERROR ? r->str : "not a hash") : rc->errstr);
		goto out;
	}
	queue_status_hosts(qs, r);
	freeReplyObject(r);
	/* Tenants kept in Redis that no live host reports on yet. */
	r = redisCommand(rc, "SMEMBERS %s:tenants", PREFIX);
	queue_status_tenants(qs, r);
	freeReplyObject(r);
	r = NULL;
	/* A stream holds its tenant's unfinished jobs: the rest are queued. */
	for (size_t i = 0; i < queue_status_count(qs); i++) {
		if (key_jobs(key, PREFIX, queue_status_name(qs, i)) < 0)
			continue;
		r = redisCommand(rc, "XLEN %s", key);
		if (r != NULL && r->type == REDIS_REPLY_INTEGER)
			queue_status_backlog(qs, i, r->integer);
		freeReplyObject(r);
		r = NULL;
	}
	out = queue_status_json(qs);
	if (json) {
		char *text = json_dumps(out, JSON_COMPACT);

		puts(text);
		free(text);
	} else
		print_tables(qs, out);
	status = 0;
	if (queue_status_live_hosts(qs) == 0) {
		cli_warn("no live host: none has reported in the last %d s",
		    QUEUE_STATUS_STALE_MS / 1000);
		status = 1;
	}
out:
	if (rc != NULL)
		redisFree(rc);
	freeReplyObject(r);
	json_decref(out);
	queue_status_free(qs);
	return status;
}
