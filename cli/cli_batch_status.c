/*
 * cli_batch_status.c - `sandq batch status ID`, and summaries in words.
 *
 * A running `sandq batch run` keeps its progress in the hash
 * PREFIX:{T}:batch:ID (cli_batch.c writes it twice a second and at the
 * end, with a 7-day TTL; docs/protocol.md lists its fields), so that
 * another terminal can follow it: state (running, stopping, finished,
 * interrupted), counts, by_status and, once done, the summary. A record
 * still `running` but not updated for BATCH_STALE_MS is said to be
 * possibly dead: its sandq was killed, and a rerun resumes the batch.
 */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../proto/keys.h"
#include "cli_batch_int.h"
#include "cli_common.h"
#include "redis_sync.h"

#define PREFIX "sandq"

/*** Summaries ***/

const char *
cli_batch__fmt_eta(char *buf, size_t size, double secs)
{
	uint64_t s;

	if (!(secs >= 0) || secs > 1e8) {
		snprintf(buf, size, "--");
		return buf;
	}
	s = (uint64_t)(secs + 0.5);
	if (s >= 3600)
		snprintf(buf, size, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, s / 3600,
		    s / 60 % 60, s % 60);
	else
		snprintf(buf, size, "%" PRIu64 ":%02" PRIu64, s / 60, s % 60);
	return buf;
}

void
cli_batch__summary_print(const json_t *s)
{
	const json_t *bs = json_object_get(s, "by_status");
	const json_t *w = json_object_get(s, "wall_ms");
	const json_t *slow = json_object_get(s, "slowest");
	const json_t *failed = json_object_get(s, "failed_cases");
	json_int_t nfailed = cli_jint(s, "failed") + cli_jint(s, "not_ok") +
	    cli_jint(s, "malformed");
	const char *k;
	json_t *v;
	size_t i, n = 0;

	printf("batch %s: %s%" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT " cases done "
	    "(%" JSON_INTEGER_FORMAT " from an earlier run), %.1f s, %.1f cases/s\n",
	    cli_jesc(s, "batch", ""), json_is_true(json_object_get(s, "interrupted")) ?
	    "interrupted, " : "", cli_jint(s, "done"), cli_jint(s, "total"),
	    cli_jint(s, "resumed"), (double)cli_jint(s, "elapsed_ms") / 1000,
	    json_real_value(json_object_get(s, "cases_per_s")));
	printf("  passed %" JSON_INTEGER_FORMAT ", failed %" JSON_INTEGER_FORMAT
	    ", no expect %" JSON_INTEGER_FORMAT " (not ok %" JSON_INTEGER_FORMAT
	    "), malformed %" JSON_INTEGER_FORMAT "\n", cli_jint(s, "passed"),
	    cli_jint(s, "failed"), cli_jint(s, "no_expect"), cli_jint(s, "not_ok"),
	    cli_jint(s, "malformed"));
	printf("  status:");
	json_object_foreach((json_t *)(uintptr_t)bs, k, v) {
		printf("%s %s %" JSON_INTEGER_FORMAT, n++ ? "," : "", cli_esc(k),
		    json_integer_value(v));
	}
	printf("%s\n", json_object_size(bs) ? "" : " -");
	printf("  wall: p50 %" JSON_INTEGER_FORMAT " ms, p95 %" JSON_INTEGER_FORMAT
	    " ms, max %" JSON_INTEGER_FORMAT " ms\n", cli_jint(w, "p50"),
	    cli_jint(w, "p95"), cli_jint(w, "max"));
	if (json_array_size(slow) > 0) {
		printf("  slowest:");
		json_array_foreach(slow, i, v) {
			printf("%s case %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT " ms)",
			    i ? "," : "", cli_jint(v, "case"), cli_jint(v, "wall_ms"));
		}
		printf("\n");
	}
	if (json_array_size(failed) > 0) {
		printf("  failed cases:");
		json_array_foreach(failed, i, v) {
			printf("%s %" JSON_INTEGER_FORMAT, i ? "," : "", json_integer_value(v));
		}
		if (nfailed > (json_int_t)json_array_size(failed))
			printf(" and %" JSON_INTEGER_FORMAT " more",
			    nfailed - (json_int_t)json_array_size(failed));
		printf("\n");
	}
}

/*** Status ***/

/* Fields of the progress hash that are numbers. */
static bool
hash_field_numeric(const char *k)
{
	static const char *const tab[] = { "pid", "total", "done", "resumed", "passed",
	    "failed", "no_expect", "not_ok", "malformed", "running", "concurrency",
	    "started_at", "updated_at", "finished_at" };

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (strcmp(k, tab[i]) == 0)
			return true;
	return false;
}

/* The progress hash as JSON: numbers as numbers, by_status and summary parsed. */
static json_t *
hash_json(const redisReply *r, const char *id)
{
	json_t *o = json_object();

	json_object_set_new(o, "batch", json_string(id));
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
		json_t *j = NULL;
		int64_t n;

		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    r->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		if (hash_field_numeric(k) && parse_i64(v, 0, INT64_MAX, &n) == 0)
			j = json_integer(n);
		else if (strcmp(k, "by_status") == 0 || strcmp(k, "summary") == 0)
			j = json_loads(v, 0, NULL);
		if (j == NULL)
			j = json_stringn(v, r->element[i + 1]->len);
		if (j != NULL)
			json_object_set_new(o, k, j);
	}
	return o;
}

/* The progress in words. */
static void
status_print(const json_t *o)
{
	json_int_t total = cli_jint(o, "total"), done = cli_jint(o, "done");
	json_int_t ran = done - cli_jint(o, "resumed"), now = (json_int_t)now_ms();
	json_int_t upd = cli_jint(o, "updated_at"), start = cli_jint(o, "started_at");
	const char *state = cli_jstr(o, "state", "?"), *k;
	const json_t *bs = json_object_get(o, "by_status");
	double secs = (double)(upd - start) / 1000, rate = secs > 0 ? ran / secs : 0;
	char t[32], eta[32];
	json_t *v;
	size_t n = 0;

	printf("batch %s: %s, %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT
	    " cases done (%d%%), %" JSON_INTEGER_FORMAT " in flight\n",
	    cli_jesc(o, "batch", ""), cli_esc(state), done, total,
	    total ? (int)(done * 100 / total) : 100, cli_jint(o, "running"));
	printf("  passed %" JSON_INTEGER_FORMAT ", failed %" JSON_INTEGER_FORMAT
	    ", no expect %" JSON_INTEGER_FORMAT " (not ok %" JSON_INTEGER_FORMAT
	    "), malformed %" JSON_INTEGER_FORMAT "\n", cli_jint(o, "passed"),
	    cli_jint(o, "failed"), cli_jint(o, "no_expect"), cli_jint(o, "not_ok"),
	    cli_jint(o, "malformed"));
	printf("  status:");
	json_object_foreach((json_t *)(uintptr_t)bs, k, v) {
		printf("%s %s %" JSON_INTEGER_FORMAT, n++ ? "," : "", cli_esc(k),
		    json_integer_value(v));
	}
	printf("%s\n", n ? "" : " -");
	printf("  started %s on %s (pid %" JSON_INTEGER_FORMAT "), %.1f cases/s",
	    cli_fmt_time_ms(t, sizeof(t), start), cli_jesc(o, "host", "?"),
	    cli_jint(o, "pid"), rate);
	if (strcmp(state, "running") == 0)
		printf(", ETA %s", cli_batch__fmt_eta(eta, sizeof(eta), rate > 0 ?
		    (double)(total - done) / rate : -1));
	printf("\n");
	if (strcmp(state, "running") == 0 && now - upd > BATCH_STALE_MS)
		printf("  no update for %" JSON_INTEGER_FORMAT " s: its sandq may have "
		    "stopped (run the batch again to resume it)\n", (now - upd) / 1000);
	if (json_object_get(o, "summary") != NULL) {
		const json_t *w = json_object_get(json_object_get(o, "summary"), "wall_ms");

		printf("  wall: p50 %" JSON_INTEGER_FORMAT " ms, p95 %" JSON_INTEGER_FORMAT
		    " ms, max %" JSON_INTEGER_FORMAT " ms\n", cli_jint(w, "p50"),
		    cli_jint(w, "p95"), cli_jint(w, "max"));
	}
}

int
cli_batch__status(const char *url, const char *tenant, const char *id, bool json)
{
	char key[KEY_MAX], msg[512];
	redisContext *rc;
	redisReply *r;
	json_t *o;
	int status = 0;

	if (key_batch(key, PREFIX, tenant, id) < 0)
		return 2;
	if ((rc = cli_redis_open(url, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		return CLI_EXIT_SANDQ;
	}
	r = redisCommand(rc, "HGETALL %s", key);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		cli_warn("batch status: redis: %s",
		    r && r->type == REDIS_REPLY_ERROR ? r->str : rc->errstr);
		status = CLI_EXIT_SANDQ;
	} else if (r->elements == 0) {
		cli_warn("batch status: no batch '%s' for tenant %s (never "
		    "run, or its record expired)", id, tenant);
		status = 1;
	} else {
		o = hash_json(r, id);
		if (json)
			status = cli_print_json_line(o) ? CLI_EXIT_SANDQ : 0;
		else {
			status_print(o);
			json_decref(o);
		}
	}
	freeReplyObject(r);
	redisFree(rc);
	return status;
}
