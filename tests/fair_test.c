/*
 * fair_test.c - tenants sharing one pool (issue 5): a flood from one tenant
 * does not hold another back, and under contention the workers go to the
 * tenants in proportion to their weights.
 *
 * Each test starts its own redis-server and sandqd (2 workers, tenants
 * default, a and b; the harness checks readiness through default). Jobs
 * are `true`, so the scheduler, not the jobs, decides the order. What is
 * compared is counts of finished jobs at one moment, read back as results,
 * never times: it holds on a loaded machine.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 120000

static struct harness H;

static void
start(const char *const *extra)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(fair, .fini = teardown);

static struct sandq *
client_for(const char *tenant)
{
	char err[256];
	struct sandq *c = sandq_connect(H.url, tenant, err, sizeof(err));

	cr_assert_not_null(c, "connect as %s: %s", tenant, err);
	return c;
}

/* Submits n `true` jobs; their ids into ids[] (n x (SANDQ_ID_MAX + 1)). */
static void
submit_n(struct sandq *c, size_t n, char (*ids)[SANDQ_ID_MAX + 1])
{
	const char *tr[] = { "true", NULL };

	for (size_t i = 0; i < n; i++)
		cr_assert_eq(sandq_submit_exec(c, tr, NULL, ids[i]), 0, "submit: %s",
		    sandq_last_error(c));
}

/* How many of ids[0..n) have a result now. */
static size_t
count_done(struct sandq *c, size_t n, char (*ids)[SANDQ_ID_MAX + 1])
{
	size_t done = 0;

	for (size_t i = 0; i < n; i++) {
		struct sandq_result *r = NULL;
		int rc = sandq_result_get(c, ids[i], &r);

		cr_assert(rc == 0 || rc == -ENOENT, "result %s: %s", ids[i],
		    sandq_last_error(c));
		if (rc == 0) {
			cr_expect_str_eq(r->status, "ok");
			done++;
		}
		sandq_result_free(r);
	}
	return done;
}

static void
wait_all(struct sandq *c, size_t n, char (*ids)[SANDQ_ID_MAX + 1])
{
	for (size_t i = 0; i < n; i++) {
		struct sandq_result *r = NULL;

		cr_assert_eq(sandq_wait(c, ids[i], WAIT_MS, &r), 0, "wait %s: %s", ids[i],
		    sandq_last_error(c));
		cr_expect_str_eq(r->status, "ok");
		sandq_result_free(r);
	}
}

/*
 * Tenant a queues 5,000 jobs, then b queues 50: with equal weights b gets
 * every other worker as soon as its jobs are in, so all of b's finish
 * while a's backlog is still nearly whole.
 */
Test(fair, a_flood_from_one_tenant_does_not_hold_another_back)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b", NULL };
	enum { NA = 5000, NB = 50 };
	char (*ida)[SANDQ_ID_MAX + 1] = calloc(NA, sizeof(*ida));
	char (*idb)[SANDQ_ID_MAX + 1] = calloc(NB, sizeof(*idb));
	struct sandq *a, *b;
	size_t done_a;

	start(extra);
	a = client_for("a");
	b = client_for("b");
	submit_n(a, NA, ida);
	submit_n(b, NB, idb);
	wait_all(b, NB, idb);
	done_a = count_done(a, NA, ida);
	cr_log_info("when b's %d jobs had all finished, %zu of a's %d had", NB, done_a, NA);
	/* Even shares: about NB of a's ran meanwhile; a's backlog barely moved. */
	cr_expect_lt(done_a, NA / 5, "b waited for a's backlog: %zu of a's %d jobs had "
	    "finished before b's %d did", done_a, NA, NB);
	sandq_close(a);
	sandq_close(b);
	free(ida);
	free(idb);
}

/*
 * Weights 3:1, both tenants saturating the pool: when b has finished its
 * first 150 jobs, a has finished about 450.
 */
Test(fair, weights_share_the_workers_in_proportion)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b",
	    "--set", "tenant.a.weight=3", NULL };
	enum { N = 1500, B_MARK = 150 };
	char (*ida)[SANDQ_ID_MAX + 1] = calloc(N, sizeof(*ida));
	char (*idb)[SANDQ_ID_MAX + 1] = calloc(N, sizeof(*idb));
	struct sandq *a, *b;
	size_t done_a, done_b;
	double ratio;

	start(extra);
	a = client_for("a");
	b = client_for("b");
	/* Interleaved in blocks, so both backlogs exist from the start. */
	for (size_t i = 0; i < N; i += 100) {
		submit_n(a, 100, ida + i);
		submit_n(b, 100, idb + i);
	}
	wait_all(b, B_MARK, idb);
	done_a = count_done(a, N, ida);
	done_b = count_done(b, N, idb);
	ratio = (double)done_a / (double)done_b;
	{
		/* Both backlogs show in sandq status, and so does the host. */
		char cmd[512], *out = NULL;

		snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s status --json",
		    harness_build_dir(), H.url);
		cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
		cr_expect_not_null(strstr(out, "\"workers\":2"), "%s", out);
		cr_expect_not_null(strstr(out, "{\"name\":\"a\",\"queued\":"), "%s", out);
		cr_expect_null(strstr(out, "{\"name\":\"a\",\"queued\":0,"),
		    "a's backlog is not shown: %s", out);
		cr_expect_null(strstr(out, "{\"name\":\"b\",\"queued\":0,"),
		    "b's backlog is not shown: %s", out);
		free(out);
	}
	cr_log_info("a (weight 3) finished %zu, b (weight 1) %zu: %.2f to 1", done_a,
	    done_b, ratio);
	cr_expect(done_a < N && done_b < N, "a tenant ran dry before the mark: %zu, %zu",
	    done_a, done_b);
	cr_expect(ratio > 2.2 && ratio < 4.0, "a finished %zu and b %zu: %.2f to 1, "
	    "not near 3 to 1", done_a, done_b, ratio);
	sandq_close(a);
	sandq_close(b);
	free(ida);
	free(idb);
}

/*
 * A tenant's own rules: a limit asked above its ceiling is rejected naming
 * it (a default above it is lowered to it), a command matching a denied
 * pattern is rejected naming the pattern, and both refusals are on the
 * audit trail.
 */
Test(fair, tenant_ceilings_and_denied_patterns_refuse_with_a_reason)
{
	static const char *const extra[] = { "--set", "tenants=default,a",
	    "--set", "tenant.a.ceiling.memory_bytes=268435456",
	    "--set", "tenant.a.deny=*curl *", NULL };
	struct sandq_job_opts big = { .limits = { .memory_bytes = (uint64_t)512 << 20 } };
	struct sandq_result *r;
	char id[SANDQ_ID_MAX + 1], cmd[512], *out = NULL;
	struct sandq *a;

	start(extra);
	a = client_for("a");
	cr_assert_eq(sandq_submit_sh(a, "true", &big, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "limit");
	cr_expect_not_null(strstr(r->error_message, "limits.memory_bytes"), "%s",
	    r->error_message);
	cr_expect_not_null(strstr(r->error_message, "268435456"), "%s", r->error_message);
	sandq_result_free(r);

	/* No ask: the host's default, above the ceiling, is lowered to it. */
	cr_assert_eq(sandq_submit_sh(a, "ulimit -v", NULL, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect(r->stdout_data != NULL && strtoull((char *)r->stdout_data, NULL, 10) <=
	    262144, "ulimit -v: %s KiB, above the tenant's ceiling",
	    r->stdout_data ? (char *)r->stdout_data : "(none)");
	sandq_result_free(r);

	cr_assert_eq(sandq_submit_sh(a, "curl http://example.org", NULL, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "policy");
	cr_expect_not_null(strstr(r->error_message, "*curl *"), "%s", r->error_message);
	sandq_result_free(r);

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s --tenant a audit --json --denied",
	    harness_build_dir(), H.url);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect_not_null(strstr(out, "\"category\":\"quota\""), "%s", out);
	cr_expect_not_null(strstr(out, "\"category\":\"policy\""), "%s", out);
	cr_expect_not_null(strstr(out, "\"target\":\"*curl *\""), "%s", out);
	free(out);
	sandq_close(a);
}

/*
 * max_queued and rate refuse at once: with two long jobs holding both
 * workers, a tenant capped at 4 unfinished jobs gets exactly two more
 * admitted and the rest rejected while the long ones still run; a tenant
 * with a rate of 1 job/s (burst 2) submitting 10 at once gets 2 through.
 */
Test(fair, max_queued_and_rate_refuse_submissions_at_once)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b",
	    "--set", "tenant.a.max_queued=4", "--set", "tenant.b.rate=1",
	    "--set", "tenant.b.burst=2", NULL };
	enum { N = 10 };
	char longs[2][SANDQ_ID_MAX + 1], ids[N][SANDQ_ID_MAX + 1];
	struct sandq_result *r;
	struct sandq *a, *b;
	int refused = 0, admitted = 0;

	start(extra);
	a = client_for("a");
	b = client_for("b");
	struct sandq_job_opts hold = { .limits = { .wall_ms = 8000 } };

	for (int i = 0; i < 2; i++)
		cr_assert_eq(sandq_submit_sh(a, "sleep 60", &hold, longs[i]), 0);
	for (int i = 0; i < N; i++)
		cr_assert_eq(sandq_submit_sh(a, "true", NULL, ids[i]), 0);
	/*
	 * Admitted jobs run once the long ones are stopped (8 s); refused ones
	 * are answered at once: before the long jobs end, whatever the load.
	 */
	uint64_t refused_last = 0, long_end = UINT64_MAX;

	for (int i = 0; i < N; i++) {
		cr_assert_eq(sandq_wait(a, ids[i], WAIT_MS, &r), 0, "%s", sandq_last_error(a));
		if (strcmp(r->status, "ok") == 0) {
			admitted++;
		} else {
			cr_expect_str_eq(r->status, "rejected");
			cr_expect_str_eq(r->error_code, "queue_full");
			cr_expect_not_null(strstr(r->error_message, "max_queued is 4"), "%s",
			    r->error_message);
			if (r->finished_at > refused_last)
				refused_last = r->finished_at;
			refused++;
		}
		sandq_result_free(r);
	}
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(sandq_wait(a, longs[i], WAIT_MS, &r), 0);
		cr_expect_str_eq(r->status, "timeout");
		if (r->finished_at < long_end)
			long_end = r->finished_at;
		sandq_result_free(r);
	}
	cr_expect_eq(admitted, 2, "admitted %d of %d past the two running", admitted, N);
	cr_expect_eq(refused, N - 2);
	cr_expect_lt(refused_last, long_end, "a refusal came only after the long jobs "
	    "ended: not at once");

	refused = admitted = 0;
	for (int i = 0; i < N; i++)
		cr_assert_eq(sandq_submit_exec(b, (const char *const[]){ "true", NULL }, NULL,
		    ids[i]), 0);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(sandq_wait(b, ids[i], WAIT_MS, &r), 0, "%s", sandq_last_error(b));
		if (strcmp(r->status, "rejected") == 0) {
			cr_expect_str_eq(r->error_code, "rate_limited");
			refused++;
		} else
			admitted++;
		sandq_result_free(r);
	}
	/* Ten submissions within a few ms: the burst of 2, perhaps one refill. */
	cr_expect(admitted >= 2 && admitted <= 3, "%d admitted at 1 job/s, burst 2",
	    admitted);
	sandq_close(a);
	sandq_close(b);
}

/*
 * A storage quota: a commit that would take the tenant's sandboxes past it
 * is rejected, naming the quota, and changes nothing; one that shrinks the
 * sandbox is always committed.
 */
Test(fair, storage_quota_refuses_commits_that_grow_past_it)
{
	static const char *const extra[] = { "--set", "tenants=default,a",
	    "--set", "tenant.a.storage_quota_bytes=600000", NULL };
	struct sandq_job_opts o = { .sandbox = "q1" };
	struct sandq_op_args create = { .sandbox = "q1" };
	struct sandq_op_args w = { .sandbox = "q1", .path = "/big",
	    .data_len = 600000 };
	struct sandq_result *r;
	char id[SANDQ_ID_MAX + 1];
	struct sandq *a;
	uint64_t version;
	void *zeros = calloc(1, 600000);

	start(extra);
	a = client_for("a");
	cr_assert_eq(sandq_call(a, "sandbox.create", &create, NULL, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);

	cr_assert_eq(sandq_submit_sh(a, "head -c 300000 /dev/urandom > f1; echo ok", &o, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	version = r->version;
	sandq_result_free(r);

	cr_assert_eq(sandq_submit_sh(a, "head -c 300000 /dev/urandom > f2", &o, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "storage_quota");
	cr_expect_not_null(strstr(r->error_message, "600000"), "%s", r->error_message);
	cr_expect_eq(r->version, version, "the refused commit moved the head");
	sandq_result_free(r);

	w.data = zeros;
	cr_assert_eq(sandq_call(a, "fs.write", &w, NULL, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "storage_quota");
	sandq_result_free(r);
	free(zeros);

	/* Shrinking is always allowed, over the quota or not. */
	cr_assert_eq(sandq_submit_sh(a, "rm f1", &o, id), 0);
	cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
	cr_expect_str_eq(r->status, "ok");
	cr_expect_eq(r->version, version + 1);
	sandq_result_free(r);
	sandq_close(a);
}

/* One number from the store's database (sqlite3 CLI, read-only). */
static long long
store_number(const char *sql)
{
	char cmd[1024], *out = NULL;
	long long v;

	snprintf(cmd, sizeof(cmd), "sqlite3 -readonly %s/state/store/store.db \"%s\"",
	    H.dir, sql);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", cmd);
	v = atoll(out);
	free(out);
	return v;
}

/*
 * Kept history counts in the quota: six jobs that each rewrite a 300 KB
 * file with new bytes never grow the head, yet every version holds 300 KB
 * of its own. With a quota of 1 MB none is refused for it, but the
 * sandbox's older versions go once the tenant is over, and what the store
 * holds stays within the quota instead of six times the file.
 */
Test(fair, storage_quota_counts_kept_history)
{
	static const char *const extra[] = { "--set", "tenants=default,a",
	    "--set", "tenant.a.storage_quota_bytes=1000000", NULL };
	struct sandq_job_opts o = { .sandbox = "h1" };
	struct sandq_op_args create = { .sandbox = "h1" };
	struct sandq_result *r;
	char id[SANDQ_ID_MAX + 1];
	struct sandq *a;
	long long stored, rows;

	start(extra);
	a = client_for("a");
	cr_assert_eq(sandq_call(a, "sandbox.create", &create, NULL, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(sandq_submit_sh(a, "head -c 300000 /dev/urandom > f", &o, id), 0);
		cr_assert_eq(sandq_wait(a, id, WAIT_MS, &r), 0);
		cr_expect(strcmp(r->status, "ok") == 0 || (strcmp(r->status, "rejected") == 0 &&
		    strcmp(r->error_code, "storage_quota") == 0), "job %d: %s %s", i,
		    r->status, r->error_message ? r->error_message : "");
		sandq_result_free(r);
	}
	stored = store_number("SELECT SUM(length(data)) FROM chunks");
	rows = store_number("SELECT count(*) FROM versions WHERE tenant = 'a'");
	cr_log_info("stored %lld bytes in %lld versions", stored, rows);
	cr_expect_leq(stored, 1000000, "the store holds %lld bytes in %lld versions, "
	    "above the quota of 1000000", stored, rows);
	cr_expect_lt(rows, 7, "every version was kept");
	sandq_close(a);
}
