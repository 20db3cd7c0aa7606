/*
 * admit.c - a tenant's max_queued and rate, refused at once.
 *
 * Reading is pull-based (sched.c): a job waits in its stream until a worker
 * can take it, which under a backlog is when the queue cap matters most.
 * So the caps are not checked when a job is read but when it is added:
 * while any tenant has max_queued or rate set, a connection of its own
 * XREADs the new entries of those tenants' streams as they arrive
 * (rq_watch: every host sees every entry), and each one is decided by an
 * atomic script shared by all hosts (rq_admit): past max_queued unfinished
 * jobs ahead of it, or with its tenant's token bucket empty, the entry is
 * deleted and the host that decided it answers it at once, rejected with
 * queue_full or rate_limited, on the audit trail. A host that reads a
 * capped tenant's entry for a worker asks the same script before queueing
 * it (admit_read), so whichever comes first decides, once, in stream
 * order: a job is never both run and refused, nor run unchecked.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define WATCH_BLOCK_MS 1000	/* the tenants watched are re-read this often */
#define WATCH_RETRY_MS 500

struct admit_req {
	struct sandqd *d;
	size_t tenant;
	char entry_id[48];
	char *job;		/* the entry's bytes, for the answer */
	size_t joblen;
};

static bool
capped(const struct tenant *t)
{
	return t->active && t->has_conf && (t->conf.max_queued > 0 || t->conf.rate > 0);
}

/*
 * Answers j, refused by verdict (1: queue full, 2: over the rate, as
 * rq_admit() says), with a message that says which setting and how to go
 * on.
 */
static void
refuse(struct sandqd *d, struct djob *j, int verdict, long long before,
    const char *raw, size_t rawlen)
{
	const struct tenant *t = &d->tenants[j->tenant];
	char msg[256];

	if (verdict == 1)
		snprintf(msg, sizeof(msg), "tenant '%s' has %lld jobs queued or running, "
		    "its max_queued is %u: submit again later", t->name, before,
		    t->conf.max_queued);
	else
		snprintf(msg, sizeof(msg), "tenant '%s' submits faster than its rate of "
		    "%g jobs/s (burst %u): submit again later", t->name, t->conf.rate,
		    tenant_burst(&t->conf));
	jobs_refuse(d, j, raw, rawlen, verdict == 1 ? "queue_full" : "rate_limited",
	    verdict == 1 ? "max_queued" : "rate", msg);
}

static void
on_verdict(void *arg, int verdict, long long before)
{
	struct admit_req *r = arg;
	struct sandqd *d = r->d;

	if (verdict == 1 || verdict == 2)
		refuse(d, djob_new(d, r->tenant, r->entry_id), verdict, before, r->job,
		    r->joblen);
	else if (verdict < 0 && verdict != -ENOTCONN)
		log_warnx("tenant %s: entry %s admitted unchecked: %s",
		    d->tenants[r->tenant].name, r->entry_id, strerror(-verdict));
	free(r->job);
	free(r);
}

bool
admit_capped(const struct sandqd *d, size_t tenant)
{
	return capped(&d->tenants[tenant]);
}

static void
on_read_verdict(void *arg, int verdict, long long before)
{
	struct djob *j = arg;
	struct sandqd *d = j->d;

	switch (verdict) {
	case 1:
	case 2:
		refuse(d, j, verdict, before, NULL, 0);
		break;
	case 3:
		djob_free(j);		/* refused and answered by whoever decided */
		break;
	case -ENOTCONN:
		/* Unanswered: the entry stays pending, read again later. */
		djob_free(j);
		break;
	default:
		if (verdict < 0)
			log_warnx("tenant %s: job %s admitted unchecked: %s",
			    d->tenants[j->tenant].name, j->id, strerror(-verdict));
		sched_enqueue(d, j);
		sched_dispatch(d);
		break;
	}
}

void
admit_read(struct sandqd *d, struct djob *j)
{
	const struct tenant *t = &d->tenants[j->tenant];

	j->d = d;
	if (rq_admit(d->rq, j->tenant, j->entry_id, t->conf.max_queued, t->conf.rate,
	    tenant_burst(&t->conf), on_read_verdict, j) < 0)
		djob_free(j);	/* Redis is down: read again once it is back */
}

void
admit_watched(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *job, size_t joblen)
{
	const struct tenant *t = &d->tenants[tenant];
	struct admit_req *r;

	if (!capped(t))
		return;
	r = xcalloc(1, sizeof(*r));
	r->d = d;
	r->tenant = tenant;
	snprintf(r->entry_id, sizeof(r->entry_id), "%s", entry_id);
	if (job != NULL) {
		r->job = xmemdup0(job, joblen);
		r->joblen = joblen;
	}
	if (rq_admit(d->rq, tenant, entry_id, t->conf.max_queued, t->conf.rate,
	    tenant_burst(&t->conf), on_verdict, r) < 0) {
		free(r->job);
		free(r);
	}
}

static void
retry_cb(uv_timer_t *timer)
{
	admit_watch(timer->data);
}

void
admit_watch(struct sandqd *d)
{
	bool *want, any = false;
	int rc;

	if (d->draining || uv_is_active((uv_handle_t *)&d->admit_retry))
		return;
	want = xcalloc(d->ntenants, sizeof(*want));
	for (size_t i = 0; i < d->ntenants; i++)
		any |= want[i] = capped(&d->tenants[i]);
	rc = any ? rq_watch(d->rq, want, WATCH_BLOCK_MS) : -EAGAIN;
	free(want);
	/* Busy: its reply comes back here. Else look again a bit later. */
	if (rc < 0 && rc != -EBUSY)
		uv_timer_start(&d->admit_retry, retry_cb, WATCH_RETRY_MS, 0);
}

void
admit_init(struct sandqd *d)
{
	uv_timer_init(d->loop, &d->admit_retry);
	d->admit_retry.data = d;
}

void
admit_stop(struct sandqd *d)
{
	uv_timer_stop(&d->admit_retry);
	uv_close((uv_handle_t *)&d->admit_retry, NULL);
}
