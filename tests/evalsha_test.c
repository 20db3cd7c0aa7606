/*
 * evalsha_test.c - sandqd's per-job scripts go as EVALSHA, and survive a
 * lost script cache (issue 19, item 2).
 *
 * One sandqd with one worker against a private redis-server. Jobs run;
 * INFO commandstats shows EVALSHA calls growing with them and no EVAL.
 * Then SCRIPT FLUSH empties Redis's script cache, as a restart or a
 * failover to a replica that never loaded the scripts would: the next
 * publish's EVALSHA answers NOSCRIPT inside its MULTI/EXEC and sandqd must
 * send the script again as EVAL, alone. Every job is answered exactly once
 * (its result right, one PUBLISH on the results channel per job, the jobs
 * stream empty with nothing pending), and EVALSHA carries on after.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000
#define ROUND 5

static struct harness H;

static void
setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 1, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(evalsha, .init = setup, .fini = teardown);

/* The calls of one command in INFO commandstats (0 if never called). */
static long long
calls(const char *command)
{
	static const char *const args[] = { "INFO", "commandstats", NULL };
	char *out = harness_redis_cli(&H, args), needle[64], *p;
	long long n = 0;

	snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", command);
	if ((p = strstr(out, needle)) != NULL)
		n = strtoll(p + strlen(needle), NULL, 10);
	free(out);
	return n;
}

/* Runs ROUND jobs one after the other, each answered with its own output. */
static void
round_of_jobs(struct sandq *c, int round)
{
	for (int i = 0; i < ROUND; i++) {
		char script[64], want[64];
		struct sandq_result *r;

		snprintf(script, sizeof(script), "echo job-%d-%d", round, i);
		snprintf(want, sizeof(want), "job-%d-%d\n", round, i);
		r = harness_sh(c, script, NULL);
		cr_assert_str_eq(r->status, "ok");
		cr_assert_str_eq((const char *)r->stdout_data, want);
		sandq_result_free(r);
	}
}

/* The default tenant's jobs stream: empty, nothing pending in its group. */
static void
stream_drained(void)
{
	static const char *const xlen[] = { "XLEN", "sandq:{default}:jobs", NULL };
	static const char *const pend[] = { "XPENDING", "sandq:{default}:jobs", "sandq",
	    NULL };
	char *out = harness_redis_cli(&H, xlen);

	cr_expect_eq(atoll(out), 0, "entries left in the stream: %s", out);
	free(out);
	out = harness_redis_cli(&H, pend);
	/* XPENDING's summary: the count first ("1) (integer) 0" from redis-cli). */
	cr_expect(strncmp(out, "0\n", 2) == 0 || strncmp(out, "1) (integer) 0\n", 15) == 0,
	    "entries pending: %s", out);
	free(out);
}

Test(evalsha, jobs_answered_once_across_a_script_flush)
{
	static const char *const flush[] = { "SCRIPT", "FLUSH", NULL };
	struct sandq *c = harness_client(&H);
	long long eval0, sha0, pub0, eval1, sha1, pub1;
	char *out;

	/* Warm up: sandqd is ready and has published once. */
	round_of_jobs(c, 0);
	eval0 = calls("eval");
	sha0 = calls("evalsha");
	pub0 = calls("publish");
	round_of_jobs(c, 1);
	cr_expect_eq(calls("eval"), eval0, "a job's result went as EVAL");
	cr_expect_geq(calls("evalsha") - sha0, ROUND, "fewer EVALSHAs than jobs");
	cr_expect_eq(calls("publish") - pub0, ROUND, "not one PUBLISH per job");
	stream_drained();

	out = harness_redis_cli(&H, flush);
	cr_assert(strstr(out, "OK") != NULL, "SCRIPT FLUSH: %s", out);
	free(out);
	eval1 = calls("eval");
	pub1 = calls("publish");
	round_of_jobs(c, 2);
	/* One NOSCRIPT, sent again as EVAL, which caches the script again. */
	cr_expect_eq(calls("eval") - eval1, 1, "EVALs after the flush: %lld",
	    calls("eval") - eval1);
	cr_expect_eq(calls("publish") - pub1, ROUND, "not one PUBLISH per job");
	stream_drained();

	eval1 = calls("eval");
	sha1 = calls("evalsha");
	round_of_jobs(c, 3);
	cr_expect_eq(calls("eval"), eval1, "EVAL after the script was cached again");
	cr_expect_geq(calls("evalsha") - sha1, ROUND, "fewer EVALSHAs than jobs");
	stream_drained();
	sandq_close(c);
}
