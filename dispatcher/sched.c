/*
 * sched.c - which job runs next, and how much to read from Redis.
 *
 * Each tenant has a queue ordered by priority (higher first), then arrival.
 * Idle workers take jobs from tenants in round-robin order, one job per
 * tenant per turn, so a tenant with a deep backlog cannot starve one with a
 * few jobs: each tenant with queued work gets an equal share of the workers.
 * (Weights and quotas build on this pick.)
 *
 * Jobs naming the same sandbox run one at a time, in arrival order: a job
 * whose sandbox is busy on a worker waits, and the tenant's next job whose
 * sandbox is free goes instead; a job never overtakes an earlier one on its
 * own sandbox, whatever its priority. (The store's compare-and-set commit
 * backs this up: two runs from one version can never both commit.)
 *
 * Reading is pull-based: sandqd asks Redis only for as many jobs as it has
 * idle workers without queued work, so jobs wait in Redis, where another
 * host's sandqd can take them, not in this process. XREADGROUP's COUNT is
 * per stream, so a read over several tenant streams can return more than
 * asked; the surplus waits here, bounded by workers x tenants.
 */
#include <errno.h>
#include <string.h>

#include "../common/log.h"
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

/* Whether a job on j's sandbox is running on a worker. */
static bool
sandbox_busy(const struct sandqd *d, const struct djob *j)
{
	if (j->job == NULL || j->job->sandbox == NULL)
		return false;
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
 * The next job to run: from the next tenant, after the last one served,
 * that has a queued job whose sandbox is free; its first such job. NULL if
 * none can run now.
 */
static struct djob *
pick_job(struct sandqd *d)
{
	for (size_t k = 0; k < d->ntenants; k++) {
		size_t i = (d->rr + k) % d->ntenants;
		struct djob *j;

		if (d->tenants[i].queued == 0)
			continue;
		TAILQ_FOREACH(j, &d->tenants[i].queue, link) {
			if (!sandbox_busy(d, j)) {
				d->rr = (i + 1) % d->ntenants;
				return j;
			}
		}
	}
	return NULL;
}

/* Queued jobs that could run now (their sandbox is free). */
static size_t
sched_runnable(const struct sandqd *d)
{
	size_t n = 0;

	for (size_t i = 0; i < d->ntenants; i++) {
		const struct djob *j;

		TAILQ_FOREACH(j, &d->tenants[i].queue, link)
			n += !sandbox_busy(d, j);
	}
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
	/* Jobs waiting for a busy sandbox do not hold an idle worker back. */
	size_t idle = pool_count(d, W_IDLE), queued = sched_runnable(d);
	int rc;

	if (d->draining || !rq_is_ready(d->rq) || rq_read_pending(d->rq) ||
	    uv_is_active((uv_handle_t *)&d->read_retry))
		return;
	if (!d->history_done) {
		/* Entries this host read but never answered before a restart. */
		rc = rq_read(d->rq, true, HISTORY_COUNT, 0);
	} else {
		if (idle <= queued)
			return;
		rc = rq_read(d->rq, false, idle - queued, d->cfg.read_block_ms);
	}
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
			log_info("re-running %zu job%s read before a restart", n,
			    n == 1 ? "" : "s");
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

		w = pool_idle_for(d, j);
		TAILQ_REMOVE(&t->queue, j, link);
		t->queued--;
		t->running++;
		if (pool_send_job(d, w, j) < 0) {
			/* The worker is being replaced; the job fails with it. */
			t->running--;
			jobs_fail(d, j, "worker %d could not take the job", w->index);
		}
	}
	maybe_read(d);
}
