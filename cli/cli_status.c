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
 * counted.
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
#include "../queue/tenant.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_status.h"
#include "redis_sync.h"

#define PREFIX "sandq"
#define STALE_MS 10000
#define TENANTS_SHOWN_MAX 4096

struct tfig {
	char name[TENANT_NAME_MAX + 1];
	long long queued, running, done, refused, backlog;
	long long pulling;	/* of queued: waiting for their image's pull */
};

static struct tfig *
fig_get(struct tfig *f, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp(f[i].name, name) == 0)
			return &f[i];
	if (*n == TENANTS_SHOWN_MAX || strlen(name) > TENANT_NAME_MAX)
		return NULL;
	memset(&f[*n], 0, sizeof(f[*n]));
	snprintf(f[*n].name, sizeof(f[*n].name), "%s", name);
	return &f[(*n)++];
}

static long long
jint(const json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

int
cli_status_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct tfig *figs = xcalloc(TENANTS_SHOWN_MAX, sizeof(*figs));
	json_t *out = json_object(), *hosts = json_array(), *tenants = json_array();
	bool json = conn->json;
	long long workers = 0, now = (long long)now_ms();
	size_t nfigs = 0;
	redisContext *rc = NULL;
	redisReply *r = NULL;
	char msg[512], key[KEY_MAX], **shown = NULL;
	size_t nshown = 0;
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
	/* The hosts, and what each says of each tenant. */
	r = redisCommand(rc, "HGETALL %s:hosts", PREFIX);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		cli_warn("%s:hosts: %s", PREFIX,
		    r ? (r->type == REDIS_REPLY_ERROR ? r->str : "not a hash") : rc->errstr);
		goto out;
	}
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		json_t *h = json_loadb(r->element[i + 1]->str, r->element[i + 1]->len, 0, NULL);
		json_t *ts, *e = json_object();
		const char *name;
		long long age;
		bool live;

		if (h == NULL || !json_is_object(h)) {
			json_decref(h);
			json_decref(e);
			continue;
		}
		age = now - jint(h, "time");
		live = age < STALE_MS;
		/* A name that is not UTF-8 goes into JSON as the table shows it. */
		shown = xreallocarray(shown, nshown + 1, sizeof(*shown));
		shown[nshown++] = xstrdup(cli_escn_cut(r->element[i]->str,
		    r->element[i]->len, 24));
		if ((ts = json_stringn(r->element[i]->str, r->element[i]->len)) == NULL)
			ts = json_string(cli_escn(r->element[i]->str, r->element[i]->len));
		json_object_set_new(e, "host", ts);
		json_object_set_new(e, "workers", json_integer(jint(h, "workers")));
		json_object_set_new(e, "busy", json_integer(jint(h, "busy")));
		json_object_set_new(e, "age_ms", json_integer(age));
		json_object_set_new(e, "audit_lost", json_integer(jint(h, "audit_db_dropped") +
		    jint(h, "audit_stream_lost")));
		json_object_set_new(e, "live", json_boolean(live));
		json_array_append_new(hosts, e);
		if (live) {
			workers += jint(h, "workers");
			ts = json_object_get(h, "tenants");
			json_object_foreach(ts, name, e) {
				struct tfig *f = fig_get(figs, &nfigs, name);

				if (f == NULL)
					continue;
				f->running += jint(e, "running");
				f->pulling += jint(e, "pulling");
				f->done += jint(e, "done_1m");
				f->refused += jint(e, "refused_1m");
			}
		}
		json_decref(h);
	}
	freeReplyObject(r);
	/* Tenants kept in Redis that no live host reports on yet. */
	r = redisCommand(rc, "SMEMBERS %s:tenants", PREFIX);
	if (r != NULL && r->type == REDIS_REPLY_ARRAY)
		for (size_t i = 0; i < r->elements; i++)
			if (r->element[i]->type == REDIS_REPLY_STRING)
				(void)fig_get(figs, &nfigs, r->element[i]->str);
	freeReplyObject(r);
	r = NULL;
	/* A stream holds its tenant's unfinished jobs: the rest are queued. */
	for (size_t i = 0; i < nfigs; i++) {
		if (key_jobs(key, PREFIX, figs[i].name) < 0)
			continue;
		r = redisCommand(rc, "XLEN %s", key);
		if (r != NULL && r->type == REDIS_REPLY_INTEGER)
			figs[i].backlog = r->integer;
		freeReplyObject(r);
		r = NULL;
		figs[i].queued = figs[i].backlog > figs[i].running ?
		    figs[i].backlog - figs[i].running : 0;
	}
	for (size_t i = 0; i < nfigs; i++) {
		json_t *e = json_object();

		json_object_set_new(e, "name", json_string(figs[i].name));
		json_object_set_new(e, "queued", json_integer(figs[i].queued));
		json_object_set_new(e, "pulling", json_integer(figs[i].pulling));
		json_object_set_new(e, "running", json_integer(figs[i].running));
		json_object_set_new(e, "done_1m", json_integer(figs[i].done));
		json_object_set_new(e, "refused_1m", json_integer(figs[i].refused));
		json_object_set_new(e, "share", json_real(workers > 0 ?
		    (double)figs[i].running / (double)workers : 0.0));
		json_array_append_new(tenants, e);
	}
	json_object_set_new(out, "workers", json_integer(workers));
	json_object_set(out, "hosts", hosts);
	json_object_set(out, "tenants", tenants);
	if (json) {
		char *text = json_dumps(out, JSON_COMPACT);

		puts(text);
		free(text);
	} else {
		size_t i;
		json_t *e;

		printf("%-24s %8s %6s %8s %11s\n", "HOST", "WORKERS", "BUSY", "AGE",
		    "AUDIT LOST");
		json_array_foreach(hosts, i, e)
			printf("%-24s %8lld %6lld %7.1fs %11lld%s\n", shown[i], jint(e, "workers"),
			    jint(e, "busy"), (double)jint(e, "age_ms") / 1000.0,
			    jint(e, "audit_lost"),
			    json_is_true(json_object_get(e, "live")) ? "" : "  (gone)");
		printf("\n%-24s %8s %8s %8s %8s %10s %6s\n", "TENANT", "QUEUED", "PULLING",
		    "RUNNING", "DONE/1m", "REFUSED/1m", "SHARE");
		for (i = 0; i < nfigs; i++)
			printf("%-24s %8lld %8lld %8lld %8lld %10lld %5.0f%%\n",
			    cli_esc(figs[i].name), figs[i].queued, figs[i].pulling,
			    figs[i].running, figs[i].done, figs[i].refused,
			    workers > 0 ? 100.0 * (double)figs[i].running / (double)workers : 0.0);
	}
	status = 0;
out:
	if (rc != NULL)
		redisFree(rc);
	json_decref(hosts);
	json_decref(tenants);
	json_decref(out);
	free(figs);
	for (size_t i = 0; i < nshown; i++)
		free(shown[i]);
	free(shown);
	return status;
}
