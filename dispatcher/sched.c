/*
 * sched.c - which job runs next, and how much to read from Redis.
 *
 * Each tenant has a queue ordered by priority (higher first), then arrival.
 * Idle workers take jobs from tenants by deficit round robin: a tenant that
 * can run a job (one queued whose sandbox is free, below its max_running)
 * gets `weight` picks per round, spent one job at a time in round-robin
 * order; a round ends when no such tenant has picks left, and a tenant with
 * nothing to run forfeits what it had. Under contention the workers go to
 * the tenants in proportion to their weights, whatever their backlogs; a
 * tenant with a deep backlog cannot starve one with a few jobs.
 *
 * Jobs naming the same sandbox run one at a time, in arrival order: a job
 * whose sandbox is busy on a worker waits, and the tenant's next job whose
 * sandbox is free goes instead; a job never overtakes an earlier one on its
 * own sandbox, whatever its priority. (The store's compare-and-set commit
 * backs this up: two runs from one version can never both commit.) A job
 * whose worker failed under it goes back to the head of its queue to wait
 * out its backoff (jobs_retry); until then it is not run, nor is any later
 * job on its sandbox.
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
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define READ_RETRY_MS 500
#define HISTORY_COUNT 10000

static bool
same_sandbox(const struct djob *a, const struct djob *b)
{
	return a->tenant == b->tenant && a->job != NULL && b->job != NULL &&
	    a->job->sandbox != NULL && b->job->sandbox != NULL &&
	    strcmp(a->job->sandbox, b->job->sandbox) == 0;
}

/* Whether a job on j's sandbox is running on a worker, or committing to Redis. */
static bool
sandbox_busy(const struct sandqd *d, const struct djob *j)
{
	const struct djob *it;

	if (j->job == NULL || j->job->sandbox == NULL)
		return false;
	TAILQ_FOREACH(it, &d->pushing, link)
		if (same_sandbox(it, j))
			return true;
	for (size_t i = 0; i < d->nslots; i++) {
		const struct wslot *w = &d->slots[i];

		if (w->state == W_BUSY && w->job != NULL && same_sandbox(w->job, j))
			return true;
	}
	return false;
}

void
sched_enqueue(struct sandqd *d, struct djob *j)
{
	struct tenant *t = &d->tenants[j->tenant];
	struct djob *it;

	/*
	 * After the last job of equal or higher priority (FIFO within a
	 * level), and after the last job on the same sandbox.
	 */
	TAILQ_FOREACH_REVERSE(it, &t->queue, djob_list, link) {
		if (it->job->priority >= j->job->priority || same_sandbox(it, j)) {
			TAILQ_INSERT_AFTER(&t->queue, it, j, link);
			t->queued++;
			return;
		}
	}
	TAILQ_INSERT_HEAD(&t->queue, j, link);
	t->queued++;
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

/*
 * Whether j cannot run now: its sandbox is busy, it waits out a retry's
 * backoff, or an earlier job on its sandbox does (a retried job keeps its
 * place before later jobs on its sandbox).
 */
static bool
blocked(const struct sandqd *d, const struct tenant *t, const struct djob *j,
    uint64_t now)
{
	const struct djob *it;

	if (j->retry_at > now || j->sync == SYNC_PULLING || sandbox_busy(d, j))
		return true;
	if (d->nbackoff == 0 && d->shared_inflight == 0)
		return false;
	TAILQ_FOREACH(it, &t->queue, link) {
		if (it == j)
			break;
		if ((it->retry_at > now || it->sync == SYNC_PULLING) && same_sandbox(it, j))
			return true;
	}
	return false;
}

/* t's first queued job that can run now, or NULL. */
static struct djob *
first_runnable(const struct sandqd *d, const struct tenant *t)
{
	uint64_t now = d->nbackoff ? now_ms() : 0;
	struct djob *j;

	TAILQ_FOREACH(j, &t->queue, link)
		if (!blocked(d, t, j, now))
			return j;
	return NULL;
}

/* Counts the jobs still backing off and wakes the scheduler when the next is due. */
static void
backoff_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;
	uint64_t now = now_ms(), next = UINT64_MAX;
	struct djob *j;

	d->nbackoff = 0;
	for (size_t i = 0; i < d->ntenants; i++)
		TAILQ_FOREACH(j, &d->tenants[i].queue, link) {
			if (j->retry_at == 0)
				continue;
			if (j->retry_at <= now) {
				j->retry_at = 0;
				continue;
			}
			d->nbackoff++;
			if (j->retry_at < next)
				next = j->retry_at;
		}
	if (d->nbackoff > 0)
		uv_timer_start(&d->backoff_timer, backoff_cb, next - now, 0);
	sched_dispatch(d);
	sandqd_check_drained(d);
}

void
sched_requeue(struct sandqd *d, struct djob *j, uint64_t delay_ms)
{
	struct tenant *t = &d->tenants[j->tenant];

	j->worker = -1;
	j->sync = SYNC_NONE;		/* its sandbox is pulled again */
	j->committed = 0;
	j->sbx_from = 0;
	j->retry_at = delay_ms > 0 ? now_ms() + delay_ms : 0;
	TAILQ_INSERT_HEAD(&t->queue, j, link);
	t->queued++;
	if (j->retry_at == 0) {
		sched_dispatch(d);
		return;
	}
	d->nbackoff++;
	if (!uv_is_active((uv_handle_t *)&d->backoff_timer) ||
	    uv_timer_get_due_in(&d->backoff_timer) > delay_ms)
		uv_timer_start(&d->backoff_timer, backoff_cb, delay_ms, 0);
}

void
sched_init(struct sandqd *d)
{
	uv_timer_init(d->loop, &d->backoff_timer);
	d->backoff_timer.data = d;
}

void
sched_stop(struct sandqd *d)
{
	uv_timer_stop(&d->backoff_timer);
	uv_close((uv_handle_t *)&d->backoff_timer, NULL);
}

static bool
can_run(const struct tenant *t)
{
	return t->max_running == 0 || t->running < t->max_running;
}

/*
 * The next job to run, by deficit round robin (see the top of the file).
 * NULL if no tenant can run one now.
 */
static struct djob *
pick_job(struct sandqd *d)
{
	for (int round = 0; round < 2; round++) {
		bool any = false;

		for (size_t k = 0; k < d->ntenants; k++) {
			size_t i = (d->rr + k) % d->ntenants;
			struct tenant *t = &d->tenants[i];
			struct djob *j = can_run(t) ? first_runnable(d, t) : NULL;

			if (j == NULL) {
				t->deficit = 0;		/* nothing to run: no credit kept */
				continue;
			}
			any = true;
			if (t->deficit == 0)
				continue;
			/* Stay on this tenant while it has picks, then move on. */
			if (--t->deficit == 0)
				d->rr = (i + 1) % d->ntenants;
			else
				d->rr = i;
			return j;
		}
		if (!any)
			return NULL;
		/* Nobody who can run has picks left: a new round. */
		for (size_t i = 0; i < d->ntenants; i++)
			d->tenants[i].deficit = d->tenants[i].weight;
	}
	return NULL;
}

/* Queued jobs of t that could run now (their sandbox is free). */
static size_t
runnable_of(const struct sandqd *d, const struct tenant *t)
{
	uint64_t now = d->nbackoff ? now_ms() : 0;
	const struct djob *j;
	size_t n = 0;

	TAILQ_FOREACH(j, &t->queue, link)
		n += !blocked(d, t, j, now);
	return n;
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
	for (size_t i = 0; i < d->ntenants; i++) {
		size_t n = runnable_of(d, &d->tenants[i]);

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

	while (pool_idle(d) != NULL && (j = pick_job(d)) != NULL) {
		struct tenant *t = &d->tenants[j->tenant];

		/* With the shared store, its sandbox is pulled first (shared.c). */
		if (!shared_before(d, j))
			continue;
		TAILQ_REMOVE(&t->queue, j, link);
		t->queued--;
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
