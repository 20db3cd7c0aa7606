/*
 * retry_test.c - retries, dead letters and cancellation (issue 6).
 *
 * One sandqd with one worker, max_attempts 2 and a 50 ms backoff. A
 * job's worker is killed under it (an infrastructure failure) until the
 * job is out of attempts; its result, its dead letter and `sandq dead`
 * are checked, then `sandq dead retry` runs it again. `sandq cancel`
 * stops a running job, answers a job no host has read, and says so for
 * a finished or unknown job.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define WAIT_MS 60000

static struct harness H;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "host=rt-host", "--set", "max_attempts=2",
	    "--set", "retry_backoff_ms=50", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 1, extra);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(retry, .init = setup, .fini = teardown);

/*
 * Waits for a new run of the job whose command line is marker (a pid other
 * than *old, below this sandqd), kills its worker, and makes it *old.
 */
static pid_t
kill_worker_under(const char *marker, pid_t *old)
{
	pid_t job = harness_wait_job(&H, marker, *old, WAIT_MS), worker;

	/* job <- the sandbox's init <- the worker's spawner <- the worker */
	worker = harness_ppid_of(harness_ppid_of(harness_ppid_of(job)));
	cr_assert_gt(worker, 1);
	cr_assert_eq(kill(worker, SIGKILL), 0);
	*old = job;
	return worker;
}

/* Fills argv ("sleep", marker's number, NULL) and returns the marker. */
static const char *
sleep_job(char *m, size_t n, const char *what, const char *argv[3])
{
	harness_marker(m, n, what);
	argv[0] = "sleep";
	argv[1] = m + strlen("sleep ");
	argv[2] = NULL;
	return m;
}

/* Runs the CLI against the harness; returns its exit status, *out its stdout. */
static int
cli(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
cli(char **out, const char *fmt, ...)
{
	char args[1024], cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s", harness_build_dir(), H.url,
	    args);
	return harness_run(cmd, out);
}

Test(retry, a_job_out_of_attempts_is_dead_lettered_with_each_and_can_be_retried)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r = NULL;
	const char *argv[3];
	char id[SANDQ_ID_MAX + 1], m[64], *out = NULL;
	json_t *dead, *one, *atts;
	pid_t old = 0;
	size_t i;

	sleep_job(m, sizeof(m), "sleep 4848", argv);
	cr_assert_eq(sandq_submit_exec(c, argv, NULL, id), 0);
	kill_worker_under(m, &old);
	kill_worker_under(m, &old);	/* the second and last attempt */
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "internal");
	cr_expect_str_eq(r->error_code ? r->error_code : "", "attempts_exhausted");
	cr_expect_not_null(strstr(r->error_message, "died"), "%s", r->error_message);
	cr_expect_eq(r->attempt, 2);
	sandq_result_free(r);
	cr_expect(harness_wait_for(harness_marker_gone, m, 10000));

	/* On the dead-letter stream: the job, both attempts and why. */
	cr_assert_eq(cli(&out, "dead ls --json"), 0);
	dead = json_loads(out, 0, NULL);
	free(out);
	cr_assert(json_is_array(dead) && json_array_size(dead) == 1, "dead ls: %zu",
	    json_array_size(dead));
	one = json_array_get(dead, 0);
	cr_expect_str_eq(json_string_value(json_object_get(one, "id")), id);
	cr_expect(json_is_true(json_object_get(one, "retryable")));
	atts = json_object_get(one, "attempts");
	cr_assert_eq(json_array_size(atts), 2);
	for (i = 0; i < 2; i++) {
		json_t *a = json_array_get(atts, i);

		cr_expect_eq(json_integer_value(json_object_get(a, "attempt")), (json_int_t)i + 1);
		cr_expect_not_null(strstr(json_string_value(json_object_get(a, "reason")), "died"));
		cr_expect_str_eq(json_string_value(json_object_get(a, "host")), "rt-host");
	}
	json_decref(dead);
	cr_assert_eq(cli(&out, "dead show %s", id), 0);
	cr_expect_not_null(strstr(out, "attempt 2 on rt-host, worker 0"), "%s", out);
	free(out);

	/* Retried: the same id runs again from attempt 1; the dead letter goes. */
	cr_assert_eq(cli(&out, "dead retry %s", id), 0, "%s", out);
	free(out);
	cr_assert_eq(kill(harness_wait_job(&H, m, 0, WAIT_MS), SIGKILL), 0);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "signal");
	cr_expect_eq(r->attempt, 1);
	sandq_result_free(r);
	cr_assert_eq(cli(&out, "dead ls --json"), 0);
	cr_expect_str_eq(out, "[]\n");
	free(out);
	sandq_close(c);
}

Test(retry, dead_purge_removes_what_it_names_and_refuses_what_it_cannot_find)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *rep;
	char *out = NULL;

	cr_assert(rc != NULL && rc->err == 0);
	for (int i = 0; i < 3; i++) {
		rep = redisCommand(rc, "XADD sandq:{default}:dead * entry 1-%d id job-%d "
		    "reason test attempts [] payload x payload_truncated 0", i, i);
		cr_assert(rep != NULL && rep->type == REDIS_REPLY_STRING);
		freeReplyObject(rep);
	}
	cr_assert_eq(cli(&out, "dead purge job-1"), 0, "%s", out);
	free(out);
	cr_expect_eq(cli(&out, "dead purge job-1"), 1, "a purged letter found again");
	free(out);
	rep = redisCommand(rc, "XLEN sandq:{default}:dead");
	cr_expect_eq(rep->integer, 2);
	freeReplyObject(rep);
	cr_assert_eq(cli(&out, "dead purge --all"), 0);
	cr_expect_str_eq(out, "2 dead letters purged\n");
	free(out);
	rep = redisCommand(rc, "EXISTS sandq:{default}:dead");
	cr_expect_eq(rep->integer, 0);
	freeReplyObject(rep);
	cr_expect_eq(cli(&out, "dead retry"), 2, "retry with nothing named is a usage error");
	free(out);
	redisFree(rc);
}

Test(retry, cancel_stops_a_running_job_and_the_worker_is_replaced)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r = NULL;
	const char *argv[3];
	char id[SANDQ_ID_MAX + 1], m[64], *out = NULL;

	sleep_job(m, sizeof(m), "sleep 4949", argv);
	cr_assert_eq(sandq_submit_exec(c, argv, NULL, id), 0);
	harness_wait_job(&H, m, 0, WAIT_MS);
	cr_assert_eq(cli(&out, "cancel %s", id), 0, "%s", out);
	cr_expect_not_null(strstr(out, "cancelling (held by rt-host)"), "%s", out);
	free(out);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "cancelled");
	cr_expect_not_null(strstr(r->error_message, "while running"), "%s", r->error_message);
	sandq_result_free(r);
	cr_expect(harness_wait_for(harness_marker_gone, m, 10000), "the job outlived it");
	/* The one slot serves again, and a finished job is past cancelling. */
	r = harness_sh(c, "echo after", NULL);
	cr_expect_str_eq((char *)r->stdout_data, "after\n");
	cr_expect_eq(cli(&out, "cancel %s", r->id), 1);
	cr_expect_not_null(strstr(out, ": finished\n"), "%s", out);
	free(out);
	cr_expect_eq(cli(&out, "--json cancel %s", r->id), 1);
	cr_expect_not_null(strstr(out, "\"outcome\":\"finished\""), "%s", out);
	free(out);
	sandq_result_free(r);
	cr_expect_eq(cli(&out, "cancel no-such-job"), 1);
	cr_expect_str_eq(out, "no-such-job: unknown\n");
	free(out);
	sandq_close(c);
}

/* A tenant no host serves: its job stays unread, and cancel answers it. */
Test(retry, cancel_answers_a_job_no_host_has_read)
{
	char err[256], id[SANDQ_ID_MAX + 1], *out = NULL;
	struct sandq *c = sandq_connect(H.url, "unserved", err, sizeof(err));
	struct sandq_result *r = NULL;
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *rep;

	cr_assert_not_null(c, "%s", err);
	cr_assert(rc != NULL && rc->err == 0);
	cr_assert_eq(sandq_submit_sh(c, "echo never", NULL, id), 0);
	/* A job whose script names the id is not taken for it. */
	{
		char script[SANDQ_ID_MAX + 16], other[SANDQ_ID_MAX + 1];

		snprintf(script, sizeof(script), "echo %s", id);
		cr_assert_eq(sandq_submit_sh(c, script, NULL, other), 0);
	}
	cr_assert_eq(cli(&out, "--tenant unserved cancel %s", id), 0);
	cr_expect_eq(strcmp(out, "") != 0 && strstr(out, ": cancelled\n") != NULL, 1, "%s",
	    out);
	free(out);
	cr_assert_eq(sandq_wait(c, id, 5000, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "cancelled");
	sandq_result_free(r);
	rep = redisCommand(rc, "XLEN sandq:{unserved}:jobs");
	cr_expect_eq(rep->integer, 1, "the other job must stay queued");
	freeReplyObject(rep);
	redisFree(rc);
	sandq_close(c);
}
