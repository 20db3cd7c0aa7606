/*
 * cli_dead.c - `sandq dead ls|show|retry|purge` and `sandq cancel`: an
 * operator's verbs on jobs that could not finish, and on jobs that should
 * not, run with the admin credentials of --redis.
 *
 * The dead-letter stream, PREFIX:{T}:dead, holds two kinds of entries
 * (docs/protocol.md): a job out of attempts (fields entry, id, reason,
 * attempts: a JSON array, payload: the job as it ran, payload_truncated)
 * and an entry no id could be read from (entry, reason, payload: its first
 * bytes). Only the first kind can be retried: one script deletes the job's
 * old result, done list, attempts and cancellation, adds the payload to
 * the job stream as a new entry and deletes the dead letter, so a retry is
 * never half done and never done twice.
 *
 * Reading and retrying are queue/dead.c's, shared with the gateway.
 * Cancelling is one script too, shared with batch's Ctrl-C: cancel.c.
 *
 * Sections: Redis, dead, cancel.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../proto/job.h"
#include "../proto/keys.h"
#include "../queue/dead.h"
#include "cancel.h"
#include "cli_common.h"
#include "cli_dead.h"
#include "cli_man.h"
#include "redis_sync.h"

#define PREFIX "sandq"
#define DEAD_LS_DEFAULT 50		/* entries `dead ls` shows by default */
#define DEAD_SCAN_MAX 100000		/* entries searched for a job id */
#define REASON_COLS 60			/* reason text in the ls table */

/*** Redis ***/

static void
print_age(uint64_t ms)
{
	uint64_t s = ms / 1000;

	if (s < 120)
		printf("%6llus", (unsigned long long)s);
	else if (s < 7200)
		printf("%6llum", (unsigned long long)(s / 60));
	else if (s < 172800)
		printf("%6lluh", (unsigned long long)(s / 3600));
	else
		printf("%6llud", (unsigned long long)(s / 86400));
}

static bool
is_stream_id(const char *s)
{
	unsigned long long a, b;
	char tail;

	return sscanf(s, "%llu-%llu%c", &a, &b, &tail) == 2;
}

/*
 * The dead letter REF names: a stream id, or the newest whose job id is
 * REF. Returns the XRANGE element (owned by *keep, freed by the caller) or
 * NULL (with *keep holding what to free, or NULL).
 */
static const redisReply *
dead_find(redisContext *rc, const char *key, const char *ref, redisReply **keep)
{
	redisReply *r;

	if (is_stream_id(ref)) {
		r = redisCommand(rc, "XRANGE %s %s %s", key, ref, ref);
		*keep = r;
		return r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 ?
		    r->element[0] : NULL;
	}
	r = redisCommand(rc, "XREVRANGE %s + - COUNT %d", key, DEAD_SCAN_MAX);
	*keep = r;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i < r->elements; i++) {
		struct queue_dead d;

		if (queue_dead_parse(r->element[i], &d) && d.id != NULL && strcmp(d.id, ref) == 0)
			return r->element[i];
	}
	return NULL;
}

/*** dead ***/

static int
dead_ls(redisContext *rc, const char *key, long limit, bool json)
{
	redisReply *r = redisCommand(rc, "XREVRANGE %s + - COUNT %ld", key, limit);
	json_t *arr = json_array();
	uint64_t now = now_ms();

	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		cli_warn("%s: %s", key, r && r->type == REDIS_REPLY_ERROR ?
		    r->str : rc->errstr);
		freeReplyObject(r);
		json_decref(arr);
		return 125;
	}
	if (!json && r->elements > 0)
		printf("%-20s %-32s %8s %7s  %s\n", "DEAD-ID", "JOB-ID", "ATTEMPTS", "AGE",
		    "REASON");
	for (size_t i = 0; i < r->elements; i++) {
		struct queue_dead d;
		json_t *o;
		unsigned long long ms = 0;

		if (!queue_dead_parse(r->element[i], &d))
			continue;
		o = queue_dead_json(&d);
		if (json) {
			json_array_append_new(arr, o);
			continue;
		}
		sscanf(d.dead_id, "%llu-", &ms);
		/* Ids and reasons may quote what the tenant sent: escaped. */
		printf("%-20s %-32s %8zu ", cli_esc(d.dead_id), d.id ? cli_esc_cut(d.id, 64) :
		    "-", json_array_size(json_object_get(o, "attempts")));
		print_age(now > ms ? now - ms : 0);
		printf("  %s\n", cli_esc_cut(d.reason, REASON_COLS + 3));
		json_decref(o);
	}
	if (json) {
		json_dumpf(arr, stdout, JSON_COMPACT);
		putchar('\n');
	} else if (r->elements == 0) {
		printf("no dead letters\n");
	}
	json_decref(arr);
	freeReplyObject(r);
	return 0;
}

static int
dead_show(redisContext *rc, const char *key, const char *ref, bool json)
{
	redisReply *keep = NULL;
	const redisReply *e = dead_find(rc, key, ref, &keep);
	struct queue_dead d;
	json_t *o, *a;
	size_t i;

	if (e == NULL || !queue_dead_parse(e, &d)) {
		cli_warn("no dead letter '%s' in %s", ref, key);
		freeReplyObject(keep);
		return 1;
	}
	o = queue_dead_json(&d);
	if (json) {
		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		printf("dead letter %s\n  job:      %s\n  entry:    %s\n  reason:   %s\n"
		    "  payload:  %zu bytes%s\n  retry:    %s\n", cli_esc(d.dead_id),
		    d.id ? cli_esc(d.id) : "(no readable id)", d.entry ? cli_esc(d.entry) : "-",
		    d.reason ? cli_esc(d.reason) : "-", d.payload_len,
		    d.truncated ? " (cut at 1 MiB)" : "",
		    queue_dead_retryable(&d) ? "possible (sandq dead retry)" : "not possible");
		json_array_foreach(json_object_get(o, "attempts"), i, a) {
			const char *host = json_string_value(json_object_get(a, "host"));
			const char *why = json_string_value(json_object_get(a, "reason"));
			json_t *w = json_object_get(a, "worker");
			char where[64] = "";

			if (json_is_integer(w))
				snprintf(where, sizeof(where), ", worker %lld",
				    (long long)json_integer_value(w));
			printf("  attempt %lld on %s%s: %s\n",
			    (long long)json_integer_value(json_object_get(a, "attempt")),
			    host ? cli_esc(host) : "?", where, why ? cli_esc(why) : "?");
		}
	}
	json_decref(o);
	freeReplyObject(keep);
	return 0;
}

static int
dead_retry_one(redisContext *rc, const char *tenant, const char *key,
    const struct queue_dead *d)
{
	char jobs[KEY_MAX], res[KEY_MAX], done[KEY_MAX], att[KEY_MAX], can[KEY_MAX];
	redisReply *r;
	int status = 0;

	if (!queue_dead_retryable(d)) {
		cli_warn("dead letter %s cannot be retried: %s", d->dead_id,
		    d->id == NULL ? "its entry had no readable job id" :
		    "its job was cut at 1 MiB when it was recorded");
		return 1;
	}
	if (key_jobs(jobs, PREFIX, tenant) < 0 || key_res(res, PREFIX, tenant, d->id) < 0 ||
	    key_done(done, PREFIX, tenant, d->id) < 0 ||
	    key_attempts(att, PREFIX, tenant, d->id) < 0 ||
	    key_cancel(can, PREFIX, tenant, d->id) < 0) {
		cli_warn("job id '%s' makes too long a key", d->id);
		return 1;
	}
	r = redisCommand(rc, "EVAL %s 6 %s %s %s %s %s %s %s", queue_dead_retry_lua, key, jobs, res,
	    done, att, can, d->dead_id);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
		cli_warn("retry of %s: %s", d->dead_id,
		    r && r->type == REDIS_REPLY_ERROR ? r->str : rc->errstr);
		status = 125;
	} else if (r->element[0]->integer != 1) {
		cli_warn("dead letter %s: %s", d->dead_id, r->element[1]->str);
		status = 1;
	} else {
		printf("%s: submitted again as entry %s\n", cli_esc(d->id),
		    cli_esc(r->element[1]->str));
	}
	freeReplyObject(r);
	return status;
}

static int
dead_retry(redisContext *rc, const char *tenant, const char *key, char **refs,
    int nrefs, bool all)
{
	int status = 0, st;

	if (all) {
		redisReply *r = redisCommand(rc, "XRANGE %s - + COUNT %d", key, DEAD_SCAN_MAX);

		if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
			cli_warn("%s: %s", key, r && r->type == REDIS_REPLY_ERROR ?
			    r->str : rc->errstr);
			freeReplyObject(r);
			return 125;
		}
		for (size_t i = 0; i < r->elements; i++) {
			struct queue_dead d;

			if (queue_dead_parse(r->element[i], &d) &&
			    (st = dead_retry_one(rc, tenant, key, &d)) > status)
				status = st;
		}
		if (r->elements == 0)
			printf("no dead letters\n");
		freeReplyObject(r);
		return status;
	}
	for (int i = 0; i < nrefs; i++) {
		redisReply *keep = NULL;
		const redisReply *e = dead_find(rc, key, refs[i], &keep);
		struct queue_dead d;

		if (e == NULL || !queue_dead_parse(e, &d)) {
			cli_warn("no dead letter '%s' in %s", refs[i], key);
			st = 1;
		} else {
			st = dead_retry_one(rc, tenant, key, &d);
		}
		if (st > status)
			status = st;
		freeReplyObject(keep);
	}
	return status;
}

static int
dead_purge(redisContext *rc, const char *key, char **refs, int nrefs, bool all,
    uint64_t older_ms)
{
	redisReply *r;
	int status = 0;

	if (all || older_ms > 0) {
		if (all)
			r = redisCommand(rc, "XLEN %s", key);
		else
			r = redisCommand(rc, "XTRIM %s MINID %llu-0", key,
			    (unsigned long long)(now_ms() - older_ms));
		if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
			cli_warn("%s: %s", key, r && r->type == REDIS_REPLY_ERROR ?
			    r->str : rc->errstr);
			freeReplyObject(r);
			return 125;
		}
		printf("%lld dead letter%s purged\n", r->integer, r->integer == 1 ? "" : "s");
		freeReplyObject(r);
		if (all) {
			r = redisCommand(rc, "DEL %s", key);
			freeReplyObject(r);
		}
		return 0;
	}
	for (int i = 0; i < nrefs; i++) {
		redisReply *keep = NULL;
		const redisReply *e = dead_find(rc, key, refs[i], &keep);

		if (e == NULL) {
			cli_warn("no dead letter '%s' in %s", refs[i], key);
			status = 1;
		} else {
			r = redisCommand(rc, "XDEL %s %s", key, e->element[0]->str);
			if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
				printf("%s: purged\n", cli_esc(e->element[0]->str));
			freeReplyObject(r);
		}
		freeReplyObject(keep);
	}
	return status;
}

int
cli_dead_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "limit", required_argument, NULL, 'l' },
		{ "all", no_argument, NULL, 'a' },
		{ "older-than", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = cli_tenant_or_default(conn->tenant);
	bool json = conn->json, all = false;
	long limit = DEAD_LS_DEFAULT;
	uint64_t older = 0;
	const char *verb;
	redisContext *rc;
	char key[KEY_MAX], msg[512], *end;
	int c, status;

	if (conn->help || argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		cli_man_print("dead");
		return conn->help || argc >= 2 ? 0 : 2;
	}
	verb = argv[1];
	if (strcmp(verb, "ls") != 0 && strcmp(verb, "show") != 0 &&
	    strcmp(verb, "retry") != 0 && strcmp(verb, "purge") != 0) {
		cli_warn("dead: unknown verb '%s' (ls, show, retry, purge)",
		    verb);
		return 2;
	}
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			limit = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || limit < 1 || limit > DEAD_SCAN_MAX) {
				cli_warn("--limit: expected 1..%d, got '%s'",
				    DEAD_SCAN_MAX, optarg);
				return 2;
			}
			break;
		case 'a':
			all = true;
			break;
		case 'o':
			if (cli_parse_seconds(optarg, &older) < 0 || older == 0) {
				cli_warn("--older-than: expected seconds > 0, got "
				    "'%s'", optarg);
				return 2;
			}
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			cli_man_print("dead");
			return 0;
		default:
			fputs("Try 'sandq dead --help'.\n", stderr);
			return 2;
		}
	}
	argc -= optind + 1;
	argv += optind + 1;
	if ((strcmp(verb, "ls") == 0 && argc != 0) ||
	    (strcmp(verb, "show") == 0 && argc != 1) ||
	    (strcmp(verb, "retry") == 0 && (all ? argc != 0 : argc == 0)) ||
	    (strcmp(verb, "purge") == 0 &&
	    ((all || older) ? argc != 0 || (all && older) : argc == 0)) ||
	    ((all && strcmp(verb, "retry") != 0 && strcmp(verb, "purge") != 0) ||
	    (older && strcmp(verb, "purge") != 0))) {
		cli_warn("dead %s: wrong arguments", verb);
		fputs("Try 'sandq dead --help'.\n", stderr);
		return 2;
	}
	if (!key_tenant_valid(tenant)) {
		cli_warn("'%s' is not a tenant name", tenant);
		return 2;
	}
	if (key_dead(key, PREFIX, tenant) < 0)
		return 2;
	if ((rc = cli_redis_open(conn->redis, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		return 125;
	}
	if (strcmp(verb, "ls") == 0)
		status = dead_ls(rc, key, limit, json);
	else if (strcmp(verb, "show") == 0)
		status = dead_show(rc, key, argv[0], json);
	else if (strcmp(verb, "retry") == 0)
		status = dead_retry(rc, tenant, key, argv, argc, all);
	else
		status = dead_purge(rc, key, argv, argc, all, older);
	redisFree(rc);
	return status;
}

/*** cancel ***/

/* The word `sandq cancel` prints for an outcome. */
static const char *
cancel_word(enum cli_cancel c)
{
	switch (c) {
	case CLI_CANCELLED:
		return "cancelled";
	case CLI_CANCELLING:
	case CLI_CANCEL_HELD:
		return "cancelling";
	case CLI_CANCEL_FINISHED:
		return "finished";
	default:
		return "unknown";
	}
}

int
cli_cancel_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = cli_tenant_or_default(conn->tenant);
	bool json = conn->json;
	json_t *arr;
	redisContext *rc;
	char msg[512];
	int c, status = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'j')
			json = true;
		else if (c == 'h') {
			cli_man_print("cancel");
			return 0;
		} else {
			fputs("Try 'sandq cancel --help'.\n", stderr);
			return 2;
		}
	}
	if (conn->help) {
		cli_man_print("cancel");
		return 0;
	}
	if (optind == argc) {
		cli_warn("cancel: name at least one job id");
		return 2;
	}
	if (!key_tenant_valid(tenant)) {
		cli_warn("'%s' is not a tenant name", tenant);
		return 2;
	}
	for (int i = optind; i < argc; i++)
		if (!payload_id_valid(argv[i], strlen(argv[i]))) {
			cli_warn("cancel: '%s' is not a job id", argv[i]);
			return 2;
		}
	if ((rc = cli_redis_open(conn->redis, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		return 125;
	}
	arr = json_array();
	for (int i = optind; i < argc; i++) {
		char host[256];
		enum cli_cancel got = cli_cancel_job(rc, tenant, argv[i], false,
		    host, sizeof(host));
		const char *outcome = cancel_word(got);

		if (got == CLI_CANCEL_FAILED) {
			status = 125;
			break;
		}
		if (got == CLI_CANCEL_FINISHED || got == CLI_CANCEL_UNKNOWN)
			status = 1;
		if (json)
			json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "id", argv[i],
			    "outcome", outcome, "host", host[0] ? json_string(host) : json_null()));
		else if (host[0])
			printf("%s: cancelling (held by %s)\n", argv[i], cli_esc(host));
		else
			printf("%s: %s\n", argv[i], outcome);
	}
	if (json && status != 125) {
		json_dumpf(arr, stdout, JSON_COMPACT);
		putchar('\n');
	}
	json_decref(arr);
	redisFree(rc);
	return status;
}
