/*
 * jobs.c - from stream entry to published result.
 *
 * Every entry read from a tenant's stream ends in exactly one of:
 *   - a result under its id (ok/exit/.../rejected/expired/internal), stored
 *     and acknowledged in one transaction (rq_publish); for a job out of
 *     attempts, with its dead-letter entry in the same transaction, or
 *   - when no id can be read, an entry on the tenant's dead-letter stream with
 *     the reason, acknowledged in the same transaction (rq_dead).
 * A job whose worker fails under it is not answered but tried again
 * (jobs_retry), up to max_attempts across every host that holds it.
 * Until that transaction succeeds the djob stays on d->publish and is sent
 * again whenever Redis is reachable, so a Redis outage delays results but
 * never loses them, and nothing is acknowledged unanswered.
 *
 * What an entry is worth is decided in core/intake.c, without I/O: the job
 * to queue, or an answer, a dead letter or giving up. jobs_entry() carries
 * that out (the result, the audit trail, the admission check and the queue).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../workspace/perms.h"
#include "dispatcher.h"

#define PUBLISH_RETRY_MS 500
#define RETRY_BACKOFF_MAX_MS 60000

static void publish(struct sandqd *d, struct djob *j);

struct djob *
djob_new(struct sandqd *d, size_t tenant, const char *entry_id)
{
	struct djob *j = xcalloc(1, sizeof(*j));
	unsigned long long ms = 0;

	j->seq = ++d->next_seq;
	if (j->seq == 0)
		j->seq = ++d->next_seq;
	j->tenant = tenant;
	j->worker = -1;
	snprintf(j->entry_id, sizeof(j->entry_id), "%s", entry_id);
	/* An entry id is "<ms>-<seq>": the time the client added the job. */
	if (sscanf(entry_id, "%llu-", &ms) == 1)
		j->queued_at = ms;
	return j;
}

void
djob_free(struct djob *j)
{
	if (j == NULL)
		return;
	job_free(j->job);
	free(j->norm);
	free(j->res);
	free(j->dead_reason);
	free(j->dead_raw);
	free(j->audit);
	json_decref(j->attempts);
	free(j->dead_attempts);
	images_forget(j);
	free(j->image_name);
	result_free(j->sync_res);
	result_free(j->egress_held);
	result_free(j->egress_rows);
	free(j);
}

/*
 * The image a run ran on, in its result: the reference (canonical, a
 * name resolved), the digest it took and the tenant's name for it, if
 * any. A job on host names none, as before images.
 */
static void
image_named(const struct djob *j, struct result *r)
{
	const struct job *job = j->job;

	if (job == NULL || !JOB_OP_RUNS(job->op) || job->image == NULL ||
	    strcmp(job->image, "host") == 0)
		return;
	free(r->image);
	r->image = xstrdup(job->image);
	free(r->image_digest);
	r->image_digest = job->image_id != NULL ? xstrdup(job->image_id) : NULL;
	free(r->image_name);
	r->image_name = j->image_name != NULL ? xstrdup(j->image_name) : NULL;
}

/* Completes r with what the dispatcher knows, encodes it, publishes it. */
static void
answer(struct sandqd *d, struct djob *j, struct result *r)
{
	free(r->host);
	r->host = xstrdup(d->cfg.host);
	r->queued_at = j->queued_at;
	image_named(j, r);
	/* The attempts before this one failed; out of them, the last did. */
	r->attempt = (int64_t)(j->attempts ? json_array_size(j->attempts) : 0) +
	    (j->dead_attempts ? 0 : 1);
	if (r->finished_at == 0)
		r->finished_at = now_ms();
	daudit_result(d, j, r);
	/* Its live output ends with its status (res_status_name: static). */
	if (j->stream)
		j->eof_status = res_status_name(r->status);
	status_count(d, j->tenant, r->status == ST_REJECTED || r->status == ST_EXPIRED);
	exporter_job(d, j, r);
	if (payload_result_encode(r, &j->res, &j->reslen) < 0)
		fatalx("cannot encode a result");
	log_debug("job %s (%s): %s", j->id, d->tenants[j->tenant].name,
	    res_status_name(r->status));
	publish(d, j);
}

static void
answer_early(struct sandqd *d, struct djob *j, enum res_status st,
    const char *code, const char *msg)
{
	struct result *r = result_new(j->id);

	result_set_error(r, st, code, "%s", msg);
	answer(d, j, r);
	result_free(r);
}

static void
dead_letter(struct sandqd *d, struct djob *j, const char *reason,
    const char *raw, size_t rawlen)
{
	log_warnx("tenant %s: entry %s dead-lettered: %s",
	    d->tenants[j->tenant].name, j->entry_id, reason);
	daudit_job(d, j, AUDIT_CAT_JOB, "dead_lettered", j->entry_id, false,
	    AUDIT_LVL_WARNING, "%s", reason);
	j->dead_reason = xstrdup(reason);
	exporter_count(d, EXP_DEAD_LETTER, j->tenant);
	if (raw != NULL) {
		j->dead_raw = xmemdup0(raw, rawlen);
		j->dead_rawlen = rawlen;
	}
	publish(d, j);
}

/*** Retries (docs/operations.md, "Retries and dead letters") ***/

json_t *
jobs_attempt_record(struct sandqd *d, size_t n, int worker, const char *reason)
{
	return json_pack("{s:I, s:s, s:o, s:I, s:s}", "attempt", (json_int_t)n,
	    "host", d->cfg.host, "worker", worker >= 0 ? json_integer(worker) : json_null(),
	    "at", (json_int_t)now_ms(), "reason", reason);
}

/* The last attempt's reason, from j's records. */
static const char *
last_reason(const struct djob *j)
{
	json_t *last = json_array_get(j->attempts, json_array_size(j->attempts) - 1);
	const char *s = json_string_value(json_object_get(last, "reason"));

	return s != NULL ? s : "unknown";
}

/*
 * Out of attempts: answered internal, and, in the same transaction, on the
 * dead-letter stream with every attempt and the job as it ran.
 */
static void
give_up(struct sandqd *d, struct djob *j)
{
	size_t n = json_array_size(j->attempts);
	struct result *r = result_new(j->id);

	j->dead_attempts = json_dumps(j->attempts, JSON_COMPACT);
	if (j->dead_attempts == NULL)
		fatalx("cannot encode attempts");
	j->dead_reason = xstrdup(last_reason(j));
	exporter_count(d, EXP_DEAD_LETTER, j->tenant);
	log_warnx("job %s (%s): failed %zu attempt%s; dead-lettered: %s", j->id,
	    d->tenants[j->tenant].name, n, n == 1 ? "" : "s", j->dead_reason);
	daudit_job(d, j, AUDIT_CAT_JOB, "dead_lettered", j->id, false, AUDIT_LVL_WARNING,
	    "failed %zu attempts: %s", n, j->dead_reason);
	result_set_error(r, ST_INTERNAL, "attempts_exhausted", "failed %zu attempt%s "
	    "(max_attempts %lld); the last: %s", n, n == 1 ? "" : "s",
	    (long long)d->cfg.max_attempts, j->dead_reason);
	r->worker = j->worker;
	answer(d, j, r);
	result_free(r);
}

/* Delay before attempt n + 1: retry_backoff_ms doubled per failed attempt. */
static uint64_t
backoff_ms(const struct sandqd *d, size_t n)
{
	uint64_t ms = (uint64_t)d->cfg.retry_backoff_ms;

	for (size_t i = 1; i < n && ms < RETRY_BACKOFF_MAX_MS; i++)
		ms *= 2;
	return ms < RETRY_BACKOFF_MAX_MS ? ms : RETRY_BACKOFF_MAX_MS;
}

void
jobs_retry(struct sandqd *d, struct djob *j, const char *fmt, ...)
{
	char reason[256], *text;
	json_t *rec;
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (d->draining || d->stopping || j->norm == NULL) {
		jobs_fail(d, j, "%s", reason);
		return;
	}
	if (j->attempts == NULL)
		j->attempts = json_array();
	n = json_array_size(j->attempts) + 1;
	rec = jobs_attempt_record(d, n, j->worker, reason);
	if ((text = json_dumps(rec, JSON_COMPACT)) == NULL)
		fatalx("cannot encode an attempt");
	json_array_append_new(j->attempts, rec);
	/* Another host that takes the job over counts on from here. */
	if (rq_attempt_add(d->rq, j->tenant, j->id, text, d->cfg.result_ttl_s * 1000) < 0)
		log_warnx("job %s: its attempt %zu could not be recorded in Redis", j->id, n);
	free(text);
	if (n >= (size_t)d->cfg.max_attempts) {
		give_up(d, j);
		return;
	}
	log_warnx("job %s (%s): attempt %zu failed (%s); retried in %llu ms", j->id,
	    d->tenants[j->tenant].name, n, reason, (unsigned long long)backoff_ms(d, n));
	exporter_count(d, EXP_RETRY, j->tenant);
	daudit_job(d, j, AUDIT_CAT_JOB, "retried", j->id, true, AUDIT_LVL_NOTICE,
	    "attempt %zu failed: %s", n, reason);
	sched_requeue(d, j, backoff_ms(d, n));
}

void
jobs_entry(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *raw, size_t rawlen, size_t nfields, json_t *attempts)
{
	const struct tenant *t = &d->tenants[tenant];
	struct intake in = { .cfg = &d->cfg, .tenant = t->name,
	    .conf = t->has_conf ? &t->conf : NULL };
	struct djob *j = djob_new(d, tenant, entry_id);
	struct intake_refusal r;
	struct job *job;

	j->attempts = attempts;
	switch (intake_read(&in, raw, rawlen, nfields, j->id, &job, &r)) {
	case INTAKE_OK:
		break;
	case INTAKE_ANSWER:
		answer_early(d, j, r.status, r.code, r.msg);
		return;
	default:
		dead_letter(d, j, r.msg, raw, rawlen);
		return;
	}
	j->stream = job->stream;	/* even a refusal ends its output stream */
	j->job = job;		/* for the audit trail's sandbox field */
	daudit_job(d, j, AUDIT_CAT_JOB, "received", job_op_name(job->op), true,
	    AUDIT_LVL_INFO, NULL);
	j->job = NULL;
	in.now = now_ms();
	/* A run on a sandbox runs on the sandbox's image (sbximage.c). */
	sbximage_admit(d, j, job, &in);
	switch (intake_admit(&in, job, json_array_size(attempts), &j->norm, &j->normlen,
	    &r)) {
	case INTAKE_OK:
		break;
	case INTAKE_GIVE_UP:
		j->job = job;
		give_up(d, j);
		return;
	default:
		/* A tenant's rule: its events carry the job's sandbox. */
		if (r.audit_target != NULL) {
			j->job = job;
			daudit_job(d, j, r.audit_cat, "refused", r.audit_target, false,
			    AUDIT_LVL_WARNING, "%s", r.msg);
		}
		answer_early(d, j, r.status, r.code, r.msg);
		j->job = NULL;
		job_free(job);
		return;
	}
	j->job = job;
	if (egress_sandbox_allow(d, j))
		return;		/* queued once its sandbox's allow list is read */
	if (imgnames_lookup(d, j))
		return;		/* queued once its image name is read */
	jobs_admitted(d, j);
}

void
jobs_admitted(struct sandqd *d, struct djob *j)
{
	if (admit_capped(d, j->tenant)) {
		admit_read(d, j);	/* queued once admitted */
		return;
	}
	sched_enqueue(d, j);
}

void
jobs_refused_rule(struct sandqd *d, struct djob *j, const struct intake_refusal *r)
{
	if (r->audit_target != NULL)
		daudit_job(d, j, r->audit_cat, "refused", r->audit_target, false,
		    AUDIT_LVL_WARNING, "%s", r->msg);
	answer_early(d, j, r->status, r->code, r->msg);
}

void
jobs_refuse(struct sandqd *d, struct djob *j, const char *raw, size_t rawlen,
    const char *code, const char *quota, const char *msg)
{
	if (j->id[0] == '\0' && raw != NULL)
		payload_peek_id(raw, rawlen, j->id);
	daudit_job(d, j, AUDIT_CAT_QUOTA, "refused", quota, false, AUDIT_LVL_WARNING,
	    "%s", msg);
	if (j->id[0] != '\0')
		answer_early(d, j, ST_REJECTED, code, msg);
	else
		dead_letter(d, j, msg, raw, rawlen);
}

void
jobs_answer_error(struct sandqd *d, struct djob *j, enum res_status st,
    const char *code, const char *msg)
{
	answer_early(d, j, st, code, msg);
}

void
jobs_cancelled(struct sandqd *d, struct djob *j, const char *when)
{
	char msg[128];

	snprintf(msg, sizeof(msg), "cancelled (sandq cancel) %s", when);
	daudit_job(d, j, AUDIT_CAT_JOB, "cancelled", j->id, true, AUDIT_LVL_NOTICE,
	    "%s", msg);
	answer_early(d, j, ST_CANCELLED, "cancelled", msg);
}

void
jobs_expire(struct sandqd *d, struct djob *j)
{
	answer_early(d, j, ST_EXPIRED, "deadline",
	    "deadline passed before the job could start");
}

void
jobs_republish(struct sandqd *d, size_t tenant, const char *entry_id, const char *id,
    const char *res, size_t reslen)
{
	struct djob *j = djob_new(d, tenant, entry_id);

	snprintf(j->id, sizeof(j->id), "%s", id);
	j->res = xmemdup0(res, reslen);
	j->reslen = reslen;
	publish(d, j);
}

void
jobs_worker_result(struct sandqd *d, struct djob *j, int worker,
    const void *buf, size_t len)
{
	struct result *r = NULL;
	struct err e = { 0 };

	if (payload_result_decode(buf, len, &r, &e) < 0 || strcmp(r->id, j->id) != 0) {
		log_warnx("worker/%d: bad result for job %s: %s", worker, j->id,
		    r ? "id mismatch" : e.msg);
		result_free(r);
		jobs_retry(d, j, "worker %d returned a malformed result", worker);
		return;
	}
	r->worker = worker;
	/* net "allow": published once the proxy has reported every connection. */
	if (egress_hold(d, j, r))
		return;
	jobs_worker_result_go(d, j, r);
}

void
jobs_worker_result_go(struct sandqd *d, struct djob *j, struct result *r)
{
	/* The sandbox runs on another image than sandqd held: admitted again. */
	if (sbximage_stale(d, j, r)) {
		result_free(r);
		return;
	}
	sbximage_result(d, j, r);
	egress_sandbox_result(d, j, r);
	if (!shared_after(d, j, r))
		return;		/* its commit goes to Redis first (shared.c) */
	answer(d, j, r);
	result_free(r);
}

void
jobs_answer(struct sandqd *d, struct djob *j, struct result *r)
{
	answer(d, j, r);
}

void
jobs_result_lost(struct sandqd *d, struct djob *j, uint64_t version)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "the job ran and made version %llu of sandbox '%s', "
	    "but its worker or host stopped before returning its result; it is not "
	    "run again", (unsigned long long)version, j->job->sandbox);
	daudit_job(d, j, AUDIT_CAT_JOB, "result_lost", j->id, false, AUDIT_LVL_WARNING,
	    "%s", msg);
	answer_early(d, j, ST_INTERNAL, "result_lost", msg);
}

void
jobs_fail(struct sandqd *d, struct djob *j, const char *fmt, ...)
{
	struct result *r = result_new(j->id);
	va_list ap;
	char msg[256];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	result_set_error(r, ST_INTERNAL, "internal", "%s", msg);
	r->worker = j->worker;
	answer(d, j, r);
	result_free(r);
}

/*** Publishing ***/

static void
publish_done(void *arg, int status)
{
	struct djob *j = arg;
	struct sandqd *d = j->d;

	d->inflight_publish--;
	j->publishing = false;
	if (status < 0) {
		/* Stays on the list; the transaction applied nothing. */
		if (!uv_is_active((uv_handle_t *)&d->publish_retry))
			uv_timer_start(&d->publish_retry, jobs_publish_pending_cb,
			    PUBLISH_RETRY_MS, 0);
		return;
	}
	TAILQ_REMOVE(&d->publish, j, link);
	if (j->res != NULL) {
		d->jobs_done++;
		exporter_published(d, j);
	}
	djob_free(j);
	sandqd_check_drained(d);
}

static void
publish(struct sandqd *d, struct djob *j)
{
	j->d = d;
	TAILQ_INSERT_TAIL(&d->publish, j, link);
	jobs_publish_pending(d);
}

void
jobs_publish_pending_cb(uv_timer_t *t)
{
	jobs_publish_pending(t->data);
}

void
jobs_publish_pending(struct sandqd *d)
{
	struct djob *j;
	int rc;

	TAILQ_FOREACH(j, &d->publish, link) {
		if (j->publishing)
			continue;
		daudit_close(d, j);
		if (j->res == NULL) {
			rc = rq_dead(d->rq, j->tenant, j->entry_id, j->dead_reason,
			    j->dead_raw, j->dead_rawlen, j->audit, j->naudit, publish_done, j);
		} else {
			struct rq_dead_rec dead = { j->dead_reason, j->dead_attempts,
			    j->norm, j->normlen };

			rc = rq_publish(d->rq, j->tenant, j->id, j->entry_id, j->res,
			    j->reslen, d->cfg.result_ttl_s * 1000,
			    j->dead_attempts != NULL ? &dead : NULL, j->eof_status, j->audit,
			    j->naudit, publish_done, j);
		}
		if (rc == -ENOTCONN)
			return;		/* ready() will call us again */
		if (rc < 0) {
			log_warnx("cannot publish job %s: %s", j->id, strerror(-rc));
			return;
		}
		j->publishing = true;
		d->inflight_publish++;
	}
}
