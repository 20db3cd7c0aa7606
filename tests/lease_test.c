/*
 * lease_test.c - no job lost when a host dies (issue 6, at-least-once):
 * two sandqd hosts share one Redis; the host running a job is killed with
 * SIGKILL, and the other takes the job over once its lease runs out and
 * answers it.
 *
 * The harness starts Redis and host A; the test starts host B itself (its
 * own state folder and host name) and stops it by its pid. lease_ms is
 * 1,500 so a takeover comes within a few seconds. Which host runs a job
 * is seen, never guessed: its process (a marker of this test's, exec
 * done) is below that host's sandqd; which host ran it is read from the
 * host's audit trail (its "started" event).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define WAIT_MS 60000

static struct harness H;
static pid_t host_b;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "host=host-a",
	    "--set", "lease_ms=1500", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 1, extra);
}

static void
teardown(void)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "tail -n 30 %s/sandqd-b.log %s >&2", H.dir, H.log);
	if (getenv("LEASE_TEST_LOGS") && system(cmd) != 0)
		fprintf(stderr, "(no logs)\n");
	if (host_b > 0) {
		kill(host_b, SIGKILL);
		waitpid(host_b, NULL, 0);
	}
	harness_stop(&H);
}

TestSuite(lease, .init = setup, .fini = teardown);

/* Host B: the same Redis, its own state, name and uid range. */
static pid_t
start_host_b(void)
{
	static const char *const sets[] = { "lease_ms=1500", NULL };
	pid_t pid = harness_start_host(&H, "b", 1, 200000, sets);

	cr_assert_geq(pid, 0);
	return pid;
}

/* Where a job runs: below which of two hosts its command line is. */
struct running_on {
	const char *cmdline;		/* the job's process's command line */
	pid_t hosts[2];			/* host A's sandqd, host B's */
	pid_t host;			/* out: the one it runs below */
};

static bool
job_runs_on_a_host(void *arg)
{
	struct running_on *x = arg;
	pid_t pids[4];

	for (int i = 0; i < 2; i++)
		if (harness_pgrep_below(x->hosts[i], x->cmdline, pids, 4) == 1) {
			x->host = x->hosts[i];
			return true;
		}
	return false;
}

/*
 * The host whose own audit database says it started the job, or "". (The
 * Redis stream gets a job's events with its result: too late here.)
 */
static void
started_on(const char *id, char *host, size_t len)
{
	static const char *const hosts[][2] = { { "host-a", "state" }, { "host-b", "state-b" } };
	char cmd[700], *out = NULL;

	host[0] = '\0';
	for (size_t i = 0; i < 2 && host[0] == '\0'; i++) {
		snprintf(cmd, sizeof(cmd), "%s/sandq audit --db %s/%s/audit.db --json "
		    "--job %s 2>/dev/null", harness_build_dir(), H.dir, hosts[i][1], id);
		if (harness_run(cmd, &out) == 0 && strstr(out, "\"action\":\"started\"") != NULL)
			snprintf(host, len, "%s", hosts[i][0]);
		free(out);
		out = NULL;
	}
}

Test(lease, a_job_on_a_killed_host_is_taken_over_and_answered_once)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1], m[64], script[128];
	struct running_on on = { m, { 0, 0 }, 0 };
	const char *host;
	pid_t victim;

	host_b = start_host_b();
	/*
	 * Killed while its sleep runs: 5 s from its exec, so the killed host
	 * has no result to give (the test sees the exec within milliseconds).
	 */
	snprintf(script, sizeof(script), "%s; echo first",
	    harness_marker(m, sizeof(m), "sleep 5"));
	cr_assert_eq(sandq_submit_sh(c, script, NULL, id), 0);
	on.hosts[0] = H.sandqd_pid;
	on.hosts[1] = host_b;
	cr_assert(harness_wait_for(job_runs_on_a_host, &on, WAIT_MS), "the job never started");
	victim = on.host;
	host = victim == H.sandqd_pid ? "host-a" : "host-b";
	cr_log_info("job %s started on %s: killing that host (pid %d; a %d, b %d)", id, host,
	    (int)victim, (int)H.sandqd_pid, (int)host_b);
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	if (victim == H.sandqd_pid)
		H.sandqd_pid = 0;
	else
		host_b = 0;

	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "the job was lost: %s",
	    sandq_last_error(c));
	cr_expect_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_str_eq((char *)r->stdout_data, "first\n");
	cr_assert_not_null(r->host);
	cr_expect_str_neq(r->host, host, "answered by the host that was killed");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * A job taken over that already has a result is not run again: its stored
 * result is published again. Set up with no host running: a job is read
 * by a consumer that then "dies" (it never renews), and a result is stored
 * under its id; the host that takes it over publishes that result, and its
 * own audit database shows it never started the job.
 */
Test(lease, a_taken_over_job_that_has_a_result_is_not_run_again)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r = NULL;
	char first[SANDQ_ID_MAX + 1], id[SANDQ_ID_MAX + 1], host[64];
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *rep, *stored;

	cr_assert(rc != NULL && rc->err == 0);
	/* A real result, from host A, to store under the second job's id. */
	cr_assert_eq(sandq_submit_sh(c, "echo from-the-first-run", NULL, first), 0);
	cr_assert_eq(sandq_wait(c, first, WAIT_MS, &r), 0);
	sandq_result_free(r);
	stored = redisCommand(rc, "GET sandq:{default}:res:%s", first);
	cr_assert(stored != NULL && stored->type == REDIS_REPLY_STRING);
	cr_assert_eq(harness_stop_sandqd(&H, 30000), 0);

	/* No host: the job waits; a consumer that never renews takes it. */
	cr_assert_eq(sandq_submit_sh(c, "echo ran-again", NULL, id), 0);
	rep = redisCommand(rc, "XREADGROUP GROUP sandq ghost COUNT 1 STREAMS "
	    "sandq:{default}:jobs >");
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_ARRAY, "ghost read");
	freeReplyObject(rep);
	rep = redisCommand(rc, "SET sandq:{default}:res:%s %b", id, stored->str,
	    (size_t)stored->len);
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	freeReplyObject(stored);

	host_b = start_host_b();
	/* Answered (acknowledged, deleted) once B has taken it over. */
	for (int i = 0; i < 1500; i++) {
		long long n;

		rep = redisCommand(rc, "XLEN sandq:{default}:jobs");
		cr_assert(rep != NULL && rep->type == REDIS_REPLY_INTEGER);
		n = rep->integer;
		freeReplyObject(rep);
		if (n == 0)
			break;
		usleep(20000);
	}
	rep = redisCommand(rc, "XLEN sandq:{default}:jobs");
	cr_expect(rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0,
	    "the entry was never acknowledged");
	freeReplyObject(rep);
	started_on(id, host, sizeof(host));
	cr_expect_str_eq(host, "", "host %s ran the job again", host);
	cr_assert_eq(sandq_result_get(c, id, &r), 0);
	cr_expect_str_eq((char *)r->stdout_data, "from-the-first-run\n",
	    "the stored result was replaced");
	sandq_result_free(r);
	redisFree(rc);
	sandq_close(c);
}

/*
 * A takeover is an attempt: the job below already failed twice (on hosts
 * that died, as their records say), and its third holder stops renewing.
 * With max_attempts at its default of 3, the host that takes it over does
 * not run it: it answers it `internal` and dead-letters it with all three
 * attempts, the last naming the lost lease.
 */
Test(lease, a_takeover_past_max_attempts_is_dead_lettered_not_run)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1], host[64];
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *rep;

	cr_assert(rc != NULL && rc->err == 0);
	cr_assert_eq(harness_stop_sandqd(&H, 30000), 0);
	cr_assert_eq(sandq_submit_sh(c, "echo must-not-run", NULL, id), 0);
	rep = redisCommand(rc, "XREADGROUP GROUP sandq ghost COUNT 1 STREAMS "
	    "sandq:{default}:jobs >");
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_ARRAY, "ghost read");
	freeReplyObject(rep);
	for (int i = 1; i <= 2; i++) {
		char rec[200];

		snprintf(rec, sizeof(rec), "{\"attempt\":%d,\"host\":\"gone-%d\",\"worker\":0,"
		    "\"at\":1,\"reason\":\"worker 0 died of signal 9 while running the job\"}",
		    i, i);
		rep = redisCommand(rc, "RPUSH sandq:{default}:attempts:%s %s", id, rec);
		cr_assert(rep != NULL && rep->type == REDIS_REPLY_INTEGER);
		freeReplyObject(rep);
	}

	host_b = start_host_b();
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "internal");
	cr_expect_str_eq(r->error_code ? r->error_code : "", "attempts_exhausted");
	cr_expect_not_null(strstr(r->error_message ? r->error_message : "",
	    "stopped renewing"), "%s", r->error_message ? r->error_message : "");
	cr_expect_eq(r->attempt, 3);
	sandq_result_free(r);
	started_on(id, host, sizeof(host));
	cr_expect_str_eq(host, "", "host %s ran the job", host);

	rep = redisCommand(rc, "XRANGE sandq:{default}:dead - +");
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
	{
		const redisReply *f = rep->element[0]->element[1];
		const char *attempts = NULL;

		for (size_t i = 0; i + 1 < f->elements; i += 2)
			if (strcmp(f->element[i]->str, "attempts") == 0)
				attempts = f->element[i + 1]->str;
		cr_assert_not_null(attempts);
		cr_expect_not_null(strstr(attempts, "gone-1"), "%s", attempts);
		cr_expect_not_null(strstr(attempts, "gone-2"), "%s", attempts);
		cr_expect_not_null(strstr(attempts, "\"attempt\":3"), "%s", attempts);
		cr_expect_not_null(strstr(attempts, "taken over by host-b"), "%s", attempts);
	}
	freeReplyObject(rep);
	rep = redisCommand(rc, "EXISTS sandq:{default}:attempts:%s", id);
	cr_expect_eq(rep->integer, 0, "the attempts record outlived the result");
	freeReplyObject(rep);
	redisFree(rc);
	sandq_close(c);
}
