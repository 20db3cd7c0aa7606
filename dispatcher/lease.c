/*
 * lease.c - at-least-once across hosts: leases on the entries a host holds,
 * and taking over the entries of a host that stopped.
 *
 * An entry a host has read stays pending in its tenant's consumer group
 * until its result is published (the publish acknowledges it). While the
 * host holds it, queued here, running or waiting to be published, the
 * host renews its lease every lease_ms / 3 (rq_lease: XCLAIM ... JUSTID
 * resets its idle time). Every lease_ms / 2, each host takes over the
 * entries of every tenant that have been idle for lease_ms (rq_reclaim:
 * XAUTOCLAIM): their host died, or lost Redis for that long.
 *
 * An entry taken over, or re-read after a restart, may have run already:
 * before it is queued its stored result is looked up, and if there is one
 * it is published again (which acknowledges the entry) instead of running
 * the job twice. If there is none, the delivery that was lost counts as a
 * failed attempt, with the attempts recorded before it (jobs_retry): a job
 * that keeps taking its hosts down ends on the dead-letter stream. A sandbox's commit moves its head only from the version
 * the job started on (store compare-and-set), so a job that did run twice
 * cannot commit twice.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

struct redelivery {
	struct sandqd *d;
	size_t tenant;
	char entry_id[48];
	char id[JOB_ID_MAX + 1];
	char *raw;
	size_t rawlen, nfields;
	bool history;			/* our own, read at start-up */
};

/* Whether this host holds the entry already (queued, running, publishing). */
static bool
held(const struct sandqd *d, size_t tenant, const char *entry_id)
{
	const struct djob *j;

	TAILQ_FOREACH(j, &d->tenants[tenant].queue, link)
		if (strcmp(j->entry_id, entry_id) == 0)
			return true;
	for (size_t i = 0; i < d->nslots; i++)
		if ((j = d->slots[i].run.job) != NULL && j->tenant == tenant &&
		    strcmp(j->entry_id, entry_id) == 0)
			return true;
	TAILQ_FOREACH(j, &d->publish, link)
		if (j->tenant == tenant && strcmp(j->entry_id, entry_id) == 0)
			return true;
	TAILQ_FOREACH(j, &d->pushing, link)
		if (j->tenant == tenant && strcmp(j->entry_id, entry_id) == 0)
			return true;
	return false;
}

/*
 * The job's past attempts, and this delivery as one more: the host that
 * held it died, lost Redis for lease_ms, or (our own history) restarted.
 */
static json_t *
attempts_with_this(struct redelivery *r, const char *const *recs, size_t n)
{
	json_t *a = json_array();
	char reason[200], *text;
	json_t *rec;

	for (size_t i = 0; i < n; i++) {
		json_t *one = json_loads(recs[i], 0, NULL);

		if (json_is_object(one))
			json_array_append_new(a, one);
		else
			json_decref(one);
	}
	if (r->history)
		snprintf(reason, sizeof(reason), "its delivery to %s was lost (sandqd "
		    "restarted, or lost its Redis connection, while holding it)",
		    r->d->cfg.host);
	else
		snprintf(reason, sizeof(reason), "the host holding the job stopped renewing "
		    "its lease for %lld ms (taken over by %s)", (long long)r->d->cfg.lease_ms,
		    r->d->cfg.host);
	rec = jobs_attempt_record(r->d, json_array_size(a) + 1, -1, reason);
	if ((text = json_dumps(rec, JSON_COMPACT)) == NULL)
		fatalx("cannot encode an attempt");
	json_array_append_new(a, rec);
	if (rq_attempt_add(r->d->rq, r->tenant, r->id, text,
	    r->d->cfg.result_ttl_s * 1000) < 0)
		log_warnx("job %s: its attempt could not be recorded in Redis", r->id);
	free(text);
	return a;
}

static void
on_stored(void *arg, int status, const char *buf, size_t len,
    const char *const *attempts, size_t nattempts)
{
	struct redelivery *r = arg;

	if (status == 1) {
		log_info("job %s: already answered; its result is published again",
		    r->id);
		jobs_republish(r->d, r->tenant, r->entry_id, r->id, buf, len);
	} else if (status == 0)
		jobs_entry(r->d, r->tenant, r->entry_id, r->raw, r->rawlen, r->nfields,
		    attempts_with_this(r, attempts, nattempts));
	/* Else Redis is gone: the entry stays pending, taken again later. */
	free(r->raw);
	free(r);
}

void
lease_redelivered(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *raw, size_t rawlen, size_t nfields)
{
	struct redelivery *r;
	char id[JOB_ID_MAX + 1] = "";

	if (held(d, tenant, entry_id))
		return;
	if (raw == NULL || !payload_peek_id(raw, rawlen, id)) {
		jobs_entry(d, tenant, entry_id, raw, rawlen, nfields, NULL);
		return;
	}
	r = xcalloc(1, sizeof(*r));
	r->d = d;
	r->tenant = tenant;
	snprintf(r->entry_id, sizeof(r->entry_id), "%s", entry_id);
	snprintf(r->id, sizeof(r->id), "%s", id);
	r->raw = xmemdup0(raw, rawlen);
	r->rawlen = rawlen;
	r->nfields = nfields;
	r->history = !d->history_done;
	if (!r->history)
		exporter_count(d, EXP_TAKEN_OVER, tenant);
	if (rq_redelivery_get(d->rq, tenant, id, on_stored, r) < 0) {
		free(r->raw);
		free(r);
	}
}

/* Appends id to the growing array *ids (n used, *cap allocated). */
static void
ids_add(const char ***ids, size_t *n, size_t *cap, const char *id)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 16;
		*ids = xreallocarray(*ids, *cap, sizeof(**ids));
	}
	(*ids)[(*n)++] = id;
}

static void
renew_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;
	const char **ids = NULL;
	size_t cap = 0;

	for (size_t t = 0; t < d->ntenants; t++) {
		const struct djob *j;
		size_t n = 0;

		TAILQ_FOREACH(j, &d->tenants[t].queue, link)
			ids_add(&ids, &n, &cap, j->entry_id);
		for (size_t i = 0; i < d->nslots; i++)
			if ((j = d->slots[i].run.job) != NULL && j->tenant == t)
				ids_add(&ids, &n, &cap, j->entry_id);
		TAILQ_FOREACH(j, &d->publish, link)
			if (j->tenant == t && j->entry_id[0] != '\0')
				ids_add(&ids, &n, &cap, j->entry_id);
		TAILQ_FOREACH(j, &d->pushing, link)
			if (j->tenant == t)
				ids_add(&ids, &n, &cap, j->entry_id);
		if (n > 0)
			(void)rq_lease(d->rq, t, ids, n);
	}
	free(ids);
}

static void
reclaim_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;

	/* Not before our own history is back, nor while draining. */
	if (d->draining || !d->history_done)
		return;
	for (size_t t = 0; t < d->ntenants; t++)
		if (d->tenants[t].active)
			(void)rq_reclaim(d->rq, t, d->cfg.lease_ms, d->nslots);
}

void
lease_start(struct sandqd *d)
{
	uint64_t renew = (uint64_t)d->cfg.lease_ms / 3, reclaim = (uint64_t)d->cfg.lease_ms / 2;

	uv_timer_init(d->loop, &d->lease_renew);
	uv_timer_init(d->loop, &d->lease_reclaim);
	d->lease_renew.data = d->lease_reclaim.data = d;
	uv_timer_start(&d->lease_renew, renew_cb, renew, renew);
	uv_timer_start(&d->lease_reclaim, reclaim_cb, reclaim, reclaim);
}

void
lease_stop(struct sandqd *d)
{
	uv_timer_stop(&d->lease_renew);
	uv_timer_stop(&d->lease_reclaim);
	uv_close((uv_handle_t *)&d->lease_renew, NULL);
	uv_close((uv_handle_t *)&d->lease_reclaim, NULL);
}
