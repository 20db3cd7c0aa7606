/*
 * sched.c - which job runs next, and how much to read from Redis.
 *
 * The pick itself (deficit round robin over the tenants, per-sandbox order,
 * backoff, the worker that last ran the sandbox) is core/runq.c's, which
 * knows nothing of Redis or libuv; this file feeds it sandqd's tenants,
 * workers and clock, hands the jobs it picks to the pool, and wakes it when
 * a retry's backoff ends.
 *
 * Reading is pull-based, so jobs wait in Redis, where another host's sandqd
 * can take them, not in this process. But the pick above can only be fair
 * among the jobs it sees: a tenant whose jobs are all still in Redis would
 * lose its turn to one whose are here. So each tenant's local queue is
 * kept topped up to one job per worker: a read asks only the streams of
 * tenants below that, for up to that many each. While there is work here,
 * reads do not block, and after one that found nothing the next waits for
 * a job to finish (no busy loop); with nothing here at all, the read blocks
 * on every stream until something arrives. What waits here is bounded by
 * workers x tenants.
 */
#include <errno.h>
#include <stdlib.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define READ_RETRY_MS 500
#define HISTORY_COUNT 10000

void
sched_enqueue(struct sandqd *d, struct djob *j)
{
	/* A run on an image takes its digest first, or waits for its pull. */
	if (!images_before(d, j))
		return;
	runq_enqueue(&d->tenants[j->tenant], j);
}

size_t
sched_queued(const struct sandqd *d)
{
	size_t n = 0;

	for (size_t i = 0; i < d->ntenants; i++)
		n += d->tenants[i].queued;
	return n;
}

size_t
sched_running(const struct sandqd *d)
{
	size_t n = 0;

	for (size_t i = 0; i < d->ntenants; i++)
		n += d->tenants[i].running;
	return n;
}

/* Ends the backoffs due and wakes the scheduler again when the next is. */
static void
backoff_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;
	uint64_t now = now_ms(), next;

	if (runq_backoff(d->tenants, d->ntenants, now, &next) > 0)
		uv_timer_start(&d->backoff_timer, backoff_cb, next - now, 0);
	sched_dispatch(d);
	sandqd_check_drained(d);
}

void
sched_requeue(struct sandqd *d, struct djob *j, uint64_t delay_ms)
{
	j->worker = -1;
	j->sync = SYNC_NONE;		/* its sandbox is pulled again */
	j->committed = 0;
	j->sbx_from = 0;
	runq_requeue(&d->tenants[j->tenant], j, delay_ms > 0 ? now_ms() + delay_ms : 0);
	if (j->retry_at == 0) {
		sched_dispatch(d);
		return;
	}
	if (!uv_is_active((uv_handle_t *)&d->backoff_timer) ||
	    uv_timer_get_due_in(&d->backoff_timer) > delay_ms)
		uv_timer_start(&d->backoff_timer, backoff_cb, delay_ms, 0);
}

void
sched_init(struct sandqd *d)
{
	d->runq.committing = &d->pushing;
	uv_timer_init(d->loop, &d->backoff_timer);
	d->backoff_timer.data = d;
}

void
sched_stop(struct sandqd *d)
{
	uv_timer_stop(&d->backoff_timer);
	uv_close((uv_handle_t *)&d->backoff_timer, NULL);
}

static void
read_retry_cb(uv_timer_t *t)
{
	sched_dispatch(t->data);
}

static void
maybe_read(struct sandqd *d)
{
	size_t idle = pool_count(d, W_IDLE), target = d->nslots, local = 0;
	bool *want, any = false, starved = false;
	uint64_t now;
	int rc;

	if (d->draining || !rq_is_ready(d->rq) || rq_read_pending(d->rq) ||
	    uv_is_active((uv_handle_t *)&d->read_retry))
		return;
	if (!d->history_done) {
		/* Entries this host read but never answered before a restart. */
		rc = rq_read(d->rq, true, HISTORY_COUNT, 0, NULL);
		goto out;
	}
	want = xcalloc(d->ntenants, sizeof(*want));
	now = now_ms();
	for (size_t i = 0; i < d->ntenants; i++) {
		/*
		 * Jobs waiting for their image count as here: a long pull must
		 * not make the tenant read its whole stream meanwhile.
		 */
		size_t n = runq_runnable(&d->runq, &d->tenants[i], now) +
		    images_waiting(&d->tenants[i]);

		local += n;
		want[i] = d->tenants[i].active && n < target;
		any |= want[i];
		starved |= n == 0;
	}
	/*
	 * Nothing to gain: no idle worker and every tenant has a job here
	 * for the next pick; or a read found nothing since the last job
	 * ended and there is still work here to hand out.
	 */
	if (!any || (idle == 0 && !starved) || (local > 0 && d->read_dry)) {
		free(want);
		return;
	}
	rc = rq_read(d->rq, false, target, local > 0 ? 0 : d->cfg.read_block_ms, want);
	d->read_blocking = local == 0;
	free(want);
out:
	if (rc < 0 && rc != -ENOTCONN)
		uv_timer_start(&d->read_retry, read_retry_cb, READ_RETRY_MS, 0);
}

void
sched_read_done(struct sandqd *d, int status, size_t n)
{
	if (status < 0) {
		if (!d->draining && status != -ENOTCONN)
			uv_timer_start(&d->read_retry, read_retry_cb, READ_RETRY_MS, 0);
	} else if (!d->history_done) {
		d->history_done = true;
		if (n > 0)
			log_info("%zu job%s pending for this host read again", n,
			    n == 1 ? "" : "s");
	} else if (n == 0 && !d->read_blocking) {
		d->read_dry = true;	/* read again once a job has ended */
	}
	sched_dispatch(d);
	sandqd_check_drained(d);
}

void
sched_dispatch(struct sandqd *d)
{
	struct wslot *w;
	struct djob *j;

	while (pool_idle(d) != NULL &&
	    (j = runq_pick(&d->runq, d->tenants, d->ntenants, now_ms())) != NULL) {
		struct tenant *t = &d->tenants[j->tenant];

		/* With the shared store, its sandbox is pulled first (shared.c). */
		if (!shared_before(d, j))
			continue;
		runq_remove(t, j);
		/* Its deadline may have passed while it waited here. */
		if (j->job->deadline_ms > 0 && now_ms() > (uint64_t)j->job->deadline_ms) {
			jobs_expire(d, j);
			continue;
		}
		w = pool_idle_for(d, j);
		t->running++;
		if (pool_send_job(d, w, j) < 0) {
			/* The worker is being replaced; the job tries again. */
			t->running--;
			jobs_retry(d, j, "worker %d could not take the job", w->index);
		}
	}
	maybe_read(d);
}
