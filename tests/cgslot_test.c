/*
 * cgslot_test.c - a worker's two kept cgroups (sandbox/cgroup.c, slots s0
 * and s1 on cgroup v1) carry nothing of one job to a later one: not its
 * limits, its CPU time, its peak, its OOM kills or its refused forks.
 *
 * Real jobs through a real sandqd with ONE worker, so a job's cgroup is the
 * one the job two before it had. Each job prints its memory cgroup
 * (/proc/self/cgroup: jobs have no cgroup namespace), so every case checks
 * first that the later job did get the earlier one's folder; on a machine
 * without cgroup v1 memory and pids the suite says so and skips.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 120000

static struct harness H;

static void
setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) != 0 ||
	    access("/sys/fs/cgroup/pids", F_OK) != 0)
		cr_skip_test("no cgroup v1 memory and pids hierarchies here: the kept "
		    "slots are a v1 measure (v2 makes a cgroup per job)");
	harness_start(&H, 1, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(cgslot, .init = setup, .fini = teardown, .timeout = 240);

/* The memory cgroup line a job prints first. */
#define PRINT_CG "grep -m1 ':memory:' /proc/self/cgroup | sed 's/^[0-9]*:memory:/cg /'; "

/* Runs an sh job with limits l (NULL: defaults); the result is the caller's. */
static struct sandq_result *
run(struct sandq *c, const char *script, const struct sandq_limits *l)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	if (l != NULL)
		o.limits = *l;
	cr_assert_eq(sandq_submit_sh(c, script, &o, id), 0, "submit: %s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "wait: %s", sandq_last_error(c));
	return r;
}

/* The job's cgroup folder, as a heap string. */
static char *
cg_of(const struct sandq_result *r)
{
	const char *p = strstr((const char *)r->stdout_data, "cg ");
	size_t n;

	cr_assert(p != NULL, "no cgroup line: %s / %s", (const char *)r->stdout_data,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	p += 3;
	n = strcspn(p, "\n");
	return strndup(p, n);
}

/*
 * Runs first (with limits lf), then a filler, then later (limits ll) and
 * checks later ran in first's cgroup; returns later's result.
 */
static struct sandq_result *
after_in_same_slot(struct sandq *c, const char *first, const struct sandq_limits *lf,
    struct sandq_result **firstr, const char *later, const struct sandq_limits *ll)
{
	struct sandq_result *a = run(c, first, lf), *f = run(c, PRINT_CG "true", NULL);
	struct sandq_result *b = run(c, later, ll);
	char *ca = cg_of(a), *cf = cg_of(f), *cb = cg_of(b);

	cr_assert_str_eq(ca, cb, "the job two later did not get the same cgroup "
	    "(%s, then %s, then %s)", ca, cf, cb);
	cr_expect_str_neq(ca, cf, "two jobs in a row in one cgroup");
	cr_assert(strstr(ca, "/s0") != NULL || strstr(ca, "/s1") != NULL,
	    "not a kept slot: %s", ca);
	free(ca);
	free(cf);
	free(cb);
	sandq_result_free(f);
	*firstr = a;
	return b;
}

/*
 * A job killed at a 32 MiB memory limit; the job that gets its cgroup
 * next holds 160 MiB under the default limit, and, exiting 3, is `exit`:
 * not memory_limit from the earlier job's OOM kill.
 */
Test(cgslot, a_memory_limit_and_its_oom_kill_stay_with_their_job)
{
	struct sandq *c = harness_client(&H);
	struct sandq_limits small = { .memory_bytes = 32u << 20 };
	struct sandq_result *a, *b;

	b = after_in_same_slot(c, PRINT_CG "python3 -c 'b = bytearray(200 << 20)'", &small,
	    &a, PRINT_CG "python3 -c 'b = bytearray(160 << 20); print(\"held\")'; exit 3",
	    NULL);
	cr_expect_str_eq(a->status, "memory_limit", "the first job: %s", a->status);
	cr_expect_str_eq(b->status, "exit", "the later job: %s (%s)", b->status,
	    b->error_code ? b->error_code : "");
	cr_expect(strstr((const char *)b->stdout_data, "held") != NULL,
	    "160 MiB not held under the default limit: %s", (const char *)b->stderr_data);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*
 * A job refused forks at a limit of 8 processes; the later one starts 24
 * at once under the default limit and, exiting 3, is `exit`.
 */
Test(cgslot, a_pids_limit_and_its_refused_forks_stay_with_their_job)
{
	struct sandq *c = harness_client(&H);
	struct sandq_limits few = { .pids = 8 };
	struct sandq_result *a, *b;

	b = after_in_same_slot(c, PRINT_CG "for i in $(seq 32); do sleep 1 & done; wait; exit 1",
	    &few, &a, PRINT_CG "for i in $(seq 24); do sleep 0.2 & done; wait && echo forked; exit 3",
	    NULL);
	cr_expect_str_eq(a->status, "pids_limit", "the first job: %s", a->status);
	cr_expect_str_eq(b->status, "exit", "the later job: %s", b->status);
	cr_expect(strstr((const char *)b->stdout_data, "forked") != NULL, "%s",
	    (const char *)b->stderr_data);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*
 * A job that burns a second of CPU; the later one sleeps a little under a
 * 200 ms CPU limit (checked every 50 ms while it runs) and exits 3: its
 * CPU time, read from the cgroup, and its limit are its own.
 */
Test(cgslot, cpu_time_is_the_jobs_own)
{
	struct sandq *c = harness_client(&H);
	struct sandq_limits cpu = { .cpu_ms = 200 };
	struct sandq_result *a, *b;

	b = after_in_same_slot(c, PRINT_CG "python3 -c '\nimport time\nt = time.process_time()\n"
	    "while time.process_time() - t < 1: pass'", NULL, &a, PRINT_CG "sleep 0.4; exit 3",
	    &cpu);
	cr_expect(a->cpu_ms >= 900, "the first job used %" PRIu64 " ms", a->cpu_ms);
	cr_expect_str_eq(b->status, "exit", "the later job: %s (%s)", b->status,
	    b->error_code ? b->error_code : "");
	cr_expect(b->cpu_ms < 200, "the later job is charged %" PRIu64 " ms of CPU", b->cpu_ms);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*
 * Memory a job leaves charged to its slot that no reclaim can take: the
 * worker's kept base (tmpfs pages, and no swap) that a persistent run's
 * init brings up to the commit. A later job in that slot with a memory
 * limit below that charge must still start (a limit under the usage is
 * refused by v1, EBUSY): the slot is made anew instead.
 */
Test(cgslot, memory_a_slot_cannot_reclaim_does_not_refuse_a_later_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_limits small = { .memory_bytes = 16u << 20 };
	struct sandq_op_args a = { 0 };
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r, *b1, *b2;
	char sbx[64], id[SANDQ_ID_MAX + 1], *cr, *c1, *c2;

	snprintf(sbx, sizeof(sbx), "cgslot-%d", (int)getpid());
	a.sandbox = sbx;
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	/* 40 MiB committed, and then kept in the worker's base by this init. */
	o.sandbox = sbx;
	cr_assert_eq(sandq_submit_sh(c, PRINT_CG "head -c 40M /dev/zero | tr '\\0' x > big",
	    &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok", "%s: %s", r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	cr = cg_of(r);
	sandq_result_free(r);
	b1 = run(c, PRINT_CG "echo small", &small);
	b2 = run(c, PRINT_CG "echo small", &small);
	cr_assert_str_eq(b1->status, "ok", "%s (%s)", b1->status,
	    b1->error_message ? b1->error_message : "");
	cr_assert_str_eq(b2->status, "ok", "%s (%s)", b2->status,
	    b2->error_message ? b2->error_message : "");
	c1 = cg_of(b1);
	c2 = cg_of(b2);
	cr_expect(strcmp(cr, c1) == 0 || strcmp(cr, c2) == 0,
	    "no later job got the persistent run's cgroup (%s, then %s, %s)", cr, c1, c2);
	free(cr);
	free(c1);
	free(c2);
	sandq_result_free(b1);
	sandq_result_free(b2);
	sandq_close(c);
}
