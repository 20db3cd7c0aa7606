/*
 * audit.c - the dispatcher's audit trail (docs/audit.md, audit/audit.h).
 *
 * Every decision the dispatcher makes about a job, and what the worker saw
 * the job try, becomes an event with the job's tenant, id and sandbox.
 * Each event goes two ways:
 *  - to the host's audit database (STATE/audit.db) at once, through the
 *    audit writer: a bounded queue and a thread, so an emit never blocks
 *    the loop, and what a full queue drops is counted and itself recorded;
 *  - to the tenant's Redis audit stream, carried by the job: the job's
 *    events are added in the very transaction that publishes its result
 *    (or its dead letter), so they wait out a Redis outage with it and
 *    never reach the stream before the result does. What waits is bounded
 *    by the jobs in flight and DAUDIT_JOB_MAX events per job; past that a
 *    job's events are counted, and one closing event says how many.
 * An audit write therefore never delays or fails a job.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define DAUDIT_QUEUE 4096		/* events the database writer holds */

void
daudit_start(struct sandqd *d)
{
	struct audit_retention ret = {
		.max_age_ms = d->cfg.audit_retention_s * 1000,
		.max_bytes = (uint64_t)d->cfg.audit_max_bytes,
	};
	struct err e = { 0 };
	char *path = NULL;

	xasprintf(&path, "%s/audit.db", d->cfg.state);
	if (audit_writer_start(&d->audit, path, DAUDIT_QUEUE, &ret, &e) < 0)
		log_warnx("audit: no host database (%s): events go to Redis only", e.msg);
	free(path);
	rq_audit_max(d->rq, d->cfg.audit_stream_max);
}

void
daudit_stop(struct sandqd *d)
{
	size_t lost;

	if (d->audit == NULL)
		return;
	if ((lost = audit_writer_stop(d->audit, 5000)) > 0)
		log_warnx("audit: %zu event%s not written to the host database", lost,
		    lost == 1 ? "" : "s");
	d->audit = NULL;
}

/* An event of j's, with its tenant, id and sandbox, timed now. */
static void
event_fill(struct sandqd *d, const struct djob *j, struct audit_event *ev,
    enum audit_category c, const char *action, const char *target, bool allowed,
    enum audit_level lv, const char *detail)
{
	audit_event_init(ev, c, action, target != NULL ? target : "", allowed, lv);
	ev->time_ms = (int64_t)now_ms();
	audit_text_set(ev->host, sizeof(ev->host), d->cfg.host);
	audit_text_set(ev->tenant, sizeof(ev->tenant), d->tenants[j->tenant].name);
	audit_text_set(ev->job, sizeof(ev->job), j->id);
	if (j->job != NULL && j->job->sandbox != NULL)
		audit_text_set(ev->sandbox, sizeof(ev->sandbox), j->job->sandbox);
	if (detail != NULL)
		audit_text_set(ev->detail, sizeof(ev->detail), detail);
}

void
daudit_job(struct sandqd *d, struct djob *j, enum audit_category c,
    const char *action, const char *target, bool allowed, enum audit_level lv,
    const char *fmt, ...)
{
	struct audit_event ev;
	char detail[AUDIT_DETAIL_MAX + 1] = "";
	va_list ap;

	if (fmt != NULL) {
		va_start(ap, fmt);
		vsnprintf(detail, sizeof(detail), fmt, ap);
		va_end(ap);
	}
	event_fill(d, j, &ev, c, action, target, allowed, lv, detail);
	if (d->audit != NULL)
		(void)audit_writer_emit(d->audit, &ev);
	if (j->naudit == DAUDIT_JOB_MAX) {
		j->audit_over++;
		return;
	}
	j->audit = xreallocarray(j->audit, j->naudit + 1, sizeof(*j->audit));
	j->audit[j->naudit++] = ev;
}

void
daudit_close(struct sandqd *d, struct djob *j)
{
	struct audit_event ev;
	char detail[64];

	if (j->audit_over == 0)
		return;
	snprintf(detail, sizeof(detail), "{\"not_streamed\":%" PRIu64 "}", j->audit_over);
	d->audit_stream_lost += j->audit_over;
	event_fill(d, j, &ev, AUDIT_CAT_AUDIT, "truncated", "", true, AUDIT_LVL_NOTICE,
	    detail);
	/* The last slot says what the stream misses (the database has all). */
	j->audit[DAUDIT_JOB_MAX - 1] = ev;
}

void
daudit_result(struct sandqd *d, struct djob *j, const struct result *r)
{
	static const char *const sandbox_actions[][2] = {
		{ "sandbox.create", "created" }, { "sandbox.fork", "forked" },
		{ "sandbox.delete", "deleted" }, { "sandbox.export", "exported" },
		{ "sandbox.import", "imported" },
	};
	const char *st = res_status_name(r->status);
	const char *op = j->job != NULL ? job_op_name(j->job->op) : "";

	for (size_t i = 0; i < r->nrefused; i++)
		daudit_job(d, j, AUDIT_CAT_SYSCALL, "refused", r->refused[i].name, false,
		    AUDIT_LVL_ALERT, "{\"count\":%" PRIu64 "}",
		    (uint64_t)r->refused[i].count);
	for (size_t i = 0; i < r->nrefused_paths; i++)
		daudit_job(d, j, AUDIT_CAT_PATH, "refused", r->refused_paths[i], false,
		    AUDIT_LVL_WARNING, "a change the path rules kept out of the commit");
	if (r->status == ST_REJECTED && r->error_code != NULL &&
	    strcmp(r->error_code, "storage_quota") == 0)
		daudit_job(d, j, AUDIT_CAT_QUOTA, "refused", "storage_quota_bytes", false,
		    AUDIT_LVL_WARNING, "%s", r->error_message ? r->error_message : "");
	if (r->status == ST_REJECTED || r->status == ST_EXPIRED) {
		daudit_job(d, j, AUDIT_CAT_JOB, "rejected", r->error_code, false,
		    AUDIT_LVL_WARNING, "%s", r->error_message ? r->error_message : st);
		return;
	}
	if (r->status == ST_OK) {
		for (size_t i = 0; i < sizeof(sandbox_actions) / sizeof(sandbox_actions[0]); i++)
			if (strcmp(op, sandbox_actions[i][0]) == 0)
				daudit_job(d, j, AUDIT_CAT_SANDBOX, sandbox_actions[i][1],
				    r->sandbox, true, AUDIT_LVL_INFO,
				    "{\"version\":%" PRIu64 ",\"snapshot\":\"%s\"}", r->version,
				    r->snapshot ? r->snapshot : "");
	}
	daudit_job(d, j, AUDIT_CAT_JOB, "finished", st, r->status != ST_INTERNAL,
	    r->status == ST_INTERNAL ? AUDIT_LVL_WARNING : AUDIT_LVL_INFO,
	    "{\"exit_code\":%d,\"signal\":%d,\"wall_ms\":%" PRIu64 ",\"cpu_ms\":%" PRIu64
	    ",\"max_rss_kb\":%" PRIu64 "%s%s%s}", r->exit_code, r->signal, r->wall_ms,
	    r->cpu_ms, r->max_rss_kb, r->error_code ? ",\"error\":\"" : "",
	    r->error_code ? r->error_code : "", r->error_code ? "\"" : "");
}
