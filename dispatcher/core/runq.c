/*
 * runq.c - the tenants' run queues: which job runs next, and on which worker.
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
 * whose sandbox is busy on a worker (or still committing it) waits, and the
 * tenant's next job whose sandbox is free goes instead; a job never
 * overtakes an earlier one on its own sandbox, whatever its priority. (The
 * store's compare-and-set commit backs this up: two runs from one version
 * can never both commit.) A job whose worker failed under it goes back to
 * the head of its queue to wait out its backoff (runq_requeue); until then
 * it is not run, nor is any later job on its sandbox. Nor is a job whose
 * sandbox is being pulled from the shared store (SYNC_PULLING), or whose
 * image is being pulled into the host's cache (img_wait), nor any later
 * job on that sandbox.
 *
 * The job goes to the worker that last ran its sandbox if that one is idle
 * (it still holds the snapshot: no store read, no hash), else to the worker
 * idle the longest.
 *
 * Nothing here reads a clock or touches a process: the caller says what
 * time it is, and the workers are struct runq_slot (core.h).
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

static bool
same_sandbox(const struct djob *a, const struct djob *b)
{
	return a->tenant == b->tenant && a->job != NULL && b->job != NULL &&
	    a->job->sandbox != NULL && b->job->sandbox != NULL &&
	    strcmp(a->job->sandbox, b->job->sandbox) == 0;
}

/* Whether a job on j's sandbox is running on a worker, or committing. */
static bool
sandbox_busy(const struct runq *q, const struct djob *j)
{
	const struct djob *it;

	if (j->job == NULL || j->job->sandbox == NULL)
		return false;
	if (q->committing != NULL)
		TAILQ_FOREACH(it, q->committing, link)
			if (same_sandbox(it, j))
				return true;
	for (size_t i = 0; i < q->nslots; i++) {
		const struct runq_slot *s = q->slots[i];

		if (s->state == W_BUSY && s->job != NULL && same_sandbox(s->job, j))
			return true;
	}
	return false;
}

void
runq_enqueue(struct tenant *t, struct djob *j)
{
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

void
runq_requeue(struct tenant *t, struct djob *j, uint64_t retry_at)
{
	j->retry_at = retry_at;
	TAILQ_INSERT_HEAD(&t->queue, j, link);
	t->queued++;
}

void
runq_remove(struct tenant *t, struct djob *j)
{
	TAILQ_REMOVE(&t->queue, j, link);
	t->queued--;
}

/*
 * Whether j waits by itself: out a retry's backoff, for its sandbox's
 * pull, or for its image (dispatcher/images.c).
 */
static bool
waiting(const struct djob *j, uint64_t now)
{
	return j->retry_at > now || j->sync == SYNC_PULLING || j->img_wait != NULL;
}

/*
 * Whether j, queued on t behind `ahead` jobs that wait, cannot run now: it
 * waits, its sandbox is busy, or an earlier job on its sandbox waits (a
 * retried job keeps its place before later jobs on its sandbox).
 */
static bool
blocked(const struct runq *q, const struct tenant *t, const struct djob *j,
    uint64_t now, size_t ahead)
{
	const struct djob *it;

	if (waiting(j, now) || sandbox_busy(q, j))
		return true;
	if (ahead == 0)
		return false;
	TAILQ_FOREACH(it, &t->queue, link) {
		if (it == j)
			break;
		if (waiting(it, now) && same_sandbox(it, j))
			return true;
	}
	return false;
}

/* t's first queued job that can run now, or NULL. */
static struct djob *
first_runnable(const struct runq *q, const struct tenant *t, uint64_t now)
{
	struct djob *j;
	size_t ahead = 0;

	TAILQ_FOREACH(j, &t->queue, link) {
		if (!blocked(q, t, j, now, ahead))
			return j;
		ahead += waiting(j, now);
	}
	return NULL;
}

size_t
runq_runnable(const struct runq *q, const struct tenant *t, uint64_t now)
{
	const struct djob *j;
	size_t n = 0, ahead = 0;

	TAILQ_FOREACH(j, &t->queue, link) {
		n += !blocked(q, t, j, now, ahead);
		ahead += waiting(j, now);
	}
	return n;
}

static bool
can_run(const struct tenant *t)
{
	return t->max_running == 0 || t->running < t->max_running;
}

struct djob *
runq_pick(struct runq *q, struct tenant *tenants, size_t n, uint64_t now)
{
	for (int round = 0; round < 2; round++) {
		bool any = false;

		for (size_t k = 0; k < n; k++) {
			size_t i = (q->rr + k) % n;
			struct tenant *t = &tenants[i];
			struct djob *j = can_run(t) ? first_runnable(q, t, now) : NULL;

			if (j == NULL) {
				t->deficit = 0;		/* nothing to run: no credit kept */
				continue;
			}
			any = true;
			if (t->deficit == 0)
				continue;
			/* Stay on this tenant while it has picks, then move on. */
			if (--t->deficit == 0)
				q->rr = (i + 1) % n;
			else
				q->rr = i;
			return j;
		}
		if (!any)
			return NULL;
		/* Nobody who can run has picks left: a new round. */
		for (size_t i = 0; i < n; i++)
			tenants[i].deficit = tenants[i].weight;
	}
	return NULL;
}

size_t
runq_backoff(struct tenant *tenants, size_t n, uint64_t now, uint64_t *next)
{
	struct djob *j;
	size_t waits = 0;

	*next = UINT64_MAX;
	for (size_t i = 0; i < n; i++)
		TAILQ_FOREACH(j, &tenants[i].queue, link) {
			if (j->retry_at == 0)
				continue;
			if (j->retry_at <= now) {
				j->retry_at = 0;
				continue;
			}
			waits++;
			if (j->retry_at < *next)
				*next = j->retry_at;
		}
	return waits;
}

/*** The workers ***/

void
runq_slot_idle(struct runq *q, struct runq_slot *s)
{
	s->state = W_IDLE;
	s->idle_seq = ++q->idle_seq;
}

void
runq_slot_busy(struct runq_slot *s, struct djob *j)
{
	s->job = j;
	s->state = W_BUSY;
	s->last_tenant = j->tenant;
	snprintf(s->last_sandbox, sizeof(s->last_sandbox), "%s",
	    j->job != NULL && j->job->sandbox != NULL ? j->job->sandbox : "");
}

int
runq_idle(const struct runq *q)
{
	int best = -1;

	for (size_t i = 0; i < q->nslots; i++) {
		const struct runq_slot *s = q->slots[i];

		if (s->state == W_IDLE &&
		    (best < 0 || s->idle_seq < q->slots[best]->idle_seq))
			best = (int)i;
	}
	return best;
}

int
runq_idle_for(const struct runq *q, const struct djob *j)
{
	/*
	 * The worker that last ran a job on this sandbox still holds its
	 * snapshot (worker/job.c): no store read, no hash.
	 */
	if (j->job != NULL && j->job->sandbox != NULL) {
		for (size_t i = 0; i < q->nslots; i++) {
			const struct runq_slot *s = q->slots[i];

			if (s->state == W_IDLE && s->last_tenant == j->tenant &&
			    strcmp(s->last_sandbox, j->job->sandbox) == 0)
				return (int)i;
		}
	}
	return runq_idle(q);
}
