/*
 * sched_test.c - unit tests for dispatcher/core/runq.c, the scheduler's
 * pick: deficit round robin over weighted tenants, max_running, priority,
 * per-sandbox order, backoff and held jobs, and the worker a job goes to.
 *
 * The pool is a fake: an array of struct runq_slot with no process behind
 * it. dispatch() does what sched_dispatch() does with sandqd's pool (pick,
 * take out of the queue, choose the slot, mark it busy) and finish() what
 * a worker's result does (the slot idle again). The clock is a number the
 * test passes. Pure: no Redis, no libuv, no root.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../dispatcher/core/core.h"

#define NTENANTS 3
#define NSLOTS_MAX 4
#define JOBS_MAX 1024

static struct tenant tenants[NTENANTS];
static struct runq_slot slots[NSLOTS_MAX], *slotp[NSLOTS_MAX];
static struct djob_list committing;
static struct runq q;
static struct djob *made[JOBS_MAX];	/* every job made, freed by teardown */
static size_t nmade;
static struct djob *started[JOBS_MAX];	/* jobs in the order they started */
static size_t nstarted;

static void
setup(void)
{
	memset(tenants, 0, sizeof(tenants));
	for (size_t i = 0; i < NTENANTS; i++) {
		TAILQ_INIT(&tenants[i].queue);
		tenants[i].weight = 1;
	}
	memset(slots, 0, sizeof(slots));
	TAILQ_INIT(&committing);
	memset(&q, 0, sizeof(q));
	q.slots = slotp;
	q.committing = &committing;
	nmade = nstarted = 0;
}

static void
teardown(void)
{
	for (size_t i = 0; i < nmade; i++) {
		free(made[i]->job->sandbox);
		free(made[i]->job);
		free(made[i]);
	}
}

TestSuite(sched, .init = setup, .fini = teardown);

/* n idle workers, slot 0 idle the longest. */
static void
pool(size_t n)
{
	q.nslots = n;
	for (size_t i = 0; i < n; i++) {
		slotp[i] = &slots[i];
		runq_slot_idle(&q, &slots[i]);
	}
}

/* A job of tenant t, not queued; sandbox NULL for a throw-away one. */
static struct djob *
job(size_t t, int64_t priority, const char *sandbox)
{
	struct djob *j = calloc(1, sizeof(*j));

	cr_assert(j != NULL && nmade < JOBS_MAX);
	j->job = calloc(1, sizeof(*j->job));
	cr_assert(j->job != NULL);
	j->tenant = t;
	j->worker = -1;
	j->job->priority = priority;
	j->job->sandbox = sandbox != NULL ? strdup(sandbox) : NULL;
	made[nmade++] = j;
	return j;
}

/* A job of tenant t, queued. */
static struct djob *
queue(size_t t, int64_t priority, const char *sandbox)
{
	struct djob *j = job(t, priority, sandbox);

	runq_enqueue(&tenants[t], j);
	return j;
}

/* Queues n throw-away jobs of tenant t. */
static void
backlog(size_t t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		queue(t, 0, NULL);
}

/*
 * What sched_dispatch() does: while a worker is idle and a job can run at
 * now, the job leaves its queue for the slot runq_idle_for() names.
 * Returns how many started.
 */
static size_t
dispatch(uint64_t now)
{
	struct djob *j;
	size_t n = 0;

	while (runq_idle(&q) >= 0 && (j = runq_pick(&q, tenants, NTENANTS, now)) != NULL) {
		int i = runq_idle_for(&q, j);

		cr_assert(i >= 0 && nstarted < JOBS_MAX);
		runq_remove(&tenants[j->tenant], j);
		tenants[j->tenant].running++;
		runq_slot_busy(q.slots[i], j);
		j->worker = i;
		started[nstarted++] = j;
		n++;
	}
	return n;
}

/* j's worker returns its result: the slot is idle again. */
static void
finish(struct djob *j)
{
	struct runq_slot *s = q.slots[j->worker];

	cr_assert_eq(s->job, j);
	s->job = NULL;
	runq_slot_idle(&q, s);
	tenants[j->tenant].running--;
}

/* Runs jobs to the end one dispatch at a time until n have started. */
static void
run(size_t n)
{
	while (nstarted < n) {
		size_t from = nstarted;

		cr_assert(dispatch(0) > 0, "nothing could start after %zu jobs", nstarted);
		for (size_t i = from; i < nstarted; i++)
			finish(started[i]);
	}
}

/* How many of the first n jobs started were tenant t's. */
static size_t
started_of(size_t t, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n && i < nstarted; i++)
		k += started[i]->tenant == t;
	return k;
}

/*** Fair share ***/

Test(sched, shares_follow_the_weights_under_contention)
{
	/* The lighter tenant has the deeper backlog: shares follow weights. */
	tenants[0].weight = 3;
	tenants[1].weight = 1;
	backlog(0, 200);
	backlog(1, 600);
	pool(2);
	run(80);
	cr_expect_eq(started_of(0, 80), 60, "tenant 0 (weight 3): %zu of 80",
	    started_of(0, 80));
	cr_expect_eq(started_of(1, 80), 20, "tenant 1 (weight 1): %zu of 80",
	    started_of(1, 80));
	/* And within every round, not only on the whole. */
	for (size_t r = 0; r + 4 <= 80; r += 4) {
		size_t k = 0;

		for (size_t i = r; i < r + 4; i++)
			k += started[i]->tenant == 1;
		cr_expect_eq(k, 1, "picks %zu..%zu: %zu of tenant 1's", r, r + 3, k);
	}
}

Test(sched, a_tenant_with_few_jobs_is_not_starved_by_a_deep_backlog)
{
	struct djob *few[3];

	backlog(0, 500);
	for (size_t i = 0; i < 3; i++)
		few[i] = queue(1, 0, NULL);
	pool(1);
	run(6);
	for (size_t i = 0; i < 3; i++)
		cr_expect(few[i]->worker >= 0, "tenant 1's job %zu did not start in the "
		    "first 6 picks (tenant 1 had %zu)", i, started_of(1, 6));
	cr_expect_eq(started_of(0, 6), 3);
}

Test(sched, a_tenant_at_max_running_is_skipped)
{
	/* Its weight would give it 3 of the 4 workers: its cap gives it 2. */
	tenants[0].weight = 3;
	tenants[0].max_running = 2;
	backlog(0, 10);
	backlog(1, 10);
	pool(4);
	cr_assert_eq(dispatch(0), 4);
	cr_expect_eq(tenants[0].running, 2);
	cr_expect_eq(tenants[1].running, 2);
}

Test(sched, a_capped_tenant_alone_leaves_workers_idle)
{
	tenants[0].max_running = 2;
	backlog(0, 10);
	pool(4);
	cr_expect_eq(dispatch(0), 2);
	cr_expect_eq(runq_pick(&q, tenants, NTENANTS, 0), NULL);
	cr_expect_geq(runq_idle(&q), 0, "two workers stay idle");
	/* One ends: one more starts, never a third at once. */
	finish(started[0]);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_eq(tenants[0].running, 2);
}

/*** Order within a tenant ***/

Test(sched, priority_orders_a_tenants_queue_and_arrival_breaks_ties)
{
	struct djob *p0 = queue(0, 0, NULL), *p5 = queue(0, 5, NULL),
	    *p10 = queue(0, 10, NULL), *p5b = queue(0, 5, NULL);

	pool(1);
	run(4);
	cr_expect_eq(started[0], p10);
	cr_expect_eq(started[1], p5);
	cr_expect_eq(started[2], p5b);
	cr_expect_eq(started[3], p0);
}

Test(sched, jobs_on_one_sandbox_never_run_two_at_a_time)
{
	struct djob *a1 = queue(0, 0, "A"), *a2 = queue(0, 0, "A"),
	    *b = queue(0, 0, "B"), *other = queue(1, 0, "A");

	pool(4);
	/* a2 waits for a1; b and tenant 1's "A" (another sandbox) go. */
	cr_expect_eq(dispatch(0), 3);
	cr_expect(a1->worker >= 0 && b->worker >= 0 && other->worker >= 0);
	cr_expect_eq(a2->worker, -1, "a2 started beside a1 on sandbox A");
	cr_expect_eq(runq_runnable(&q, &tenants[0], 0), 0);
	finish(a1);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_geq(a2->worker, 0);
}

Test(sched, a_later_job_never_overtakes_an_earlier_one_on_its_sandbox)
{
	struct djob *a1 = queue(0, 0, "A"), *b = queue(0, 0, "B"),
	    *a2 = queue(0, 10, "A");

	/* a2 goes before b (its priority) but never before a1 (its sandbox). */
	pool(1);
	run(3);
	cr_expect_eq(started[0], a1);
	cr_expect_eq(started[1], a2);
	cr_expect_eq(started[2], b);
}

Test(sched, a_higher_priority_job_waits_while_its_sandbox_is_busy)
{
	struct djob *a1 = queue(0, 0, "A"), *a2, *b;

	pool(2);
	cr_assert_eq(dispatch(0), 1);
	a2 = queue(0, 10, "A");
	b = queue(0, 0, "B");
	cr_expect_eq(dispatch(0), 1);
	cr_expect_geq(b->worker, 0);
	cr_expect_eq(a2->worker, -1);
	finish(a1);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_geq(a2->worker, 0);
}

Test(sched, a_committing_job_keeps_its_sandbox_busy)
{
	struct djob *c = job(0, 0, "A"), *a = queue(0, 0, "A");

	TAILQ_INSERT_TAIL(&committing, c, link);
	pool(1);
	cr_expect_eq(dispatch(0), 0);
	TAILQ_REMOVE(&committing, c, link);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_eq(a->worker, 0);
}

/*** Retries and held jobs ***/

Test(sched, a_job_in_backoff_holds_back_later_jobs_on_its_sandbox_until_due)
{
	struct djob *r = job(0, 0, "A"), *a2, *b;
	uint64_t next;

	runq_requeue(&tenants[0], r, 1000);
	a2 = queue(0, 0, "A");
	b = queue(0, 0, "B");
	pool(3);
	cr_expect_eq(runq_runnable(&q, &tenants[0], 500), 1);
	cr_expect_eq(dispatch(500), 1);
	cr_expect_geq(b->worker, 0);
	cr_expect_eq(r->worker, -1);
	cr_expect_eq(a2->worker, -1, "a2 overtook the retried job on its sandbox");
	cr_expect_eq(runq_backoff(tenants, NTENANTS, 500, &next), 1);
	cr_expect_eq(next, 1000);
	cr_expect_eq(dispatch(999), 0);
	/* Due: the retried job first, a2 after it. */
	cr_expect_eq(runq_backoff(tenants, NTENANTS, 1000, &next), 0);
	cr_expect_eq(r->retry_at, 0);
	cr_expect_eq(dispatch(1000), 1);
	cr_expect_geq(r->worker, 0);
	cr_expect_eq(a2->worker, -1);
	finish(r);
	cr_expect_eq(dispatch(1000), 1);
	cr_expect_geq(a2->worker, 0);
}

Test(sched, a_requeued_job_goes_before_the_rest_of_its_queue)
{
	struct djob *x = queue(0, 5, NULL), *r = job(0, 0, NULL);

	runq_requeue(&tenants[0], r, 0);
	pool(1);
	run(2);
	cr_expect_eq(started[0], r);
	cr_expect_eq(started[1], x);
}

Test(sched, a_job_whose_sandbox_is_pulled_holds_back_later_jobs_on_it)
{
	struct djob *a1 = queue(0, 0, "A"), *a2 = queue(0, 0, "A"),
	    *b = queue(0, 0, "B");

	a1->sync = SYNC_PULLING;
	pool(3);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_geq(b->worker, 0);
	cr_expect_eq(a2->worker, -1);
	a1->sync = SYNC_READY;
	cr_expect_eq(dispatch(0), 1);
	cr_expect_geq(a1->worker, 0);
}

/*** Which worker ***/

Test(sched, a_job_goes_to_the_worker_idle_the_longest)
{
	struct djob *x = queue(0, 0, NULL);

	pool(3);
	/* Slot 0 was idle first; now it runs and ends a job: slot 1 is next. */
	cr_assert_eq(dispatch(0), 1);
	cr_expect_eq(x->worker, 0);
	finish(x);
	cr_expect_eq(runq_idle(&q), 1);
	queue(0, 0, NULL);
	cr_assert_eq(dispatch(0), 1);
	cr_expect_eq(started[1]->worker, 1);
}

Test(sched, an_idle_worker_that_last_ran_the_sandbox_is_preferred)
{
	struct djob *a1 = queue(0, 0, "A"), *a2, *b, *other;

	pool(3);
	cr_assert_eq(dispatch(0), 1);
	cr_assert_eq(a1->worker, 0);
	finish(a1);
	/* Slot 0 is now idle the shortest, but holds A's snapshot. */
	a2 = job(0, 0, "A");
	b = job(0, 0, "B");
	other = job(1, 0, "A");
	cr_expect_eq(runq_idle_for(&q, a2), 0);
	cr_expect_eq(runq_idle_for(&q, b), 1, "no affinity: the longest idle");
	cr_expect_eq(runq_idle_for(&q, other), 1, "another tenant's sandbox A");
	runq_enqueue(&tenants[0], a2);
	cr_expect_eq(dispatch(0), 1);
	cr_expect_eq(a2->worker, 0);
}

Test(sched, affinity_gives_way_when_that_worker_is_not_idle)
{
	struct djob *a1 = queue(0, 0, "A"), *a2;

	pool(2);
	cr_assert_eq(dispatch(0), 1);
	cr_assert_eq(a1->worker, 0);
	/* Worn out after a1 (pool.c's worn_out()): retired, not reaped yet. */
	finish(a1);
	slots[0].state = W_DEAD;
	a2 = queue(0, 0, "A");
	cr_expect_eq(dispatch(0), 1);
	cr_expect_eq(a2->worker, 1);
}
