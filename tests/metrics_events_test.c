/*
 * metrics_events_test.c - the metrics of sandqd's rarer events and of the
 * streams in Redis (issue 18), each made to happen and then read from
 * GET /metrics: a job whose workers are killed until it runs out of
 * attempts (sandq_retries_total, sandq_dead_letters_total), a job taken
 * over from a consumer that stopped renewing its lease
 * (sandq_leases_taken_over_total), workers replaced after worker_max_jobs
 * (sandq_workers_recycled_total), jobs waiting behind a busy worker
 * (sandq_stream_entries and the ages of the oldest), and a sandbox's
 * snapshot (sandq_snapshot_store_bytes and _blobs).
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c) with
 * metrics_listen on a free loopback port and waits for a value to appear
 * by scraping again (the stream gauges are read every few seconds), never
 * for a fixed time.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000
#define T "{tenant=\"default\"}"

static struct harness H;
static int port;

/* GET sandqd's /metrics: *text its body (owned; "" when it did not answer). */
static void
scrape(char **text)
{
	CURL *c = curl_easy_init();
	char url[128];
	size_t len = 0;
	FILE *f = open_memstream(text, &len);

	cr_assert(c != NULL && f != NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	(void)curl_easy_perform(c);
	curl_easy_cleanup(c);
	fclose(f);
}

/* The sample named line (e.g. "sandq_x{a=\"b\"}") in a scrape now, or -1. */
static double
metric(const char *line)
{
	char want[256], *text = NULL;
	const char *p;
	double v = -1;

	scrape(&text);
	snprintf(want, sizeof(want), "\n%s ", line);
	if ((p = strstr(text, want)) != NULL)
		v = strtod(p + strlen(want), NULL);
	free(text);
	return v;
}

struct want {
	const char *line;
	double min, max;	/* the sample within [min, max] */
};

static bool
metric_within(void *arg)
{
	const struct want *w = arg;
	double v = metric(w->line);
	bool ok = v >= w->min && v <= w->max;

	if (!ok)
		usleep(200000);
	return ok;
}

/* Waits until line's sample is in [min, max]; asserts otherwise. */
static void
wait_metric(const char *line, double min, double max)
{
	struct want w = { line, min, max };

	cr_assert(harness_wait_for(metric_within, &w, WAIT_MS), "%s never in [%g, %g] "
	    "(last %g)", line, min, max, metric(line));
}

/* sandqd with workers and metrics_listen on a free port, plus --set each of sets. */
static void
start(int workers, const char *const *sets)
{
	const char *argv[32];
	char listen[64];
	size_t n = 0;
	int fd = harness_listen(&port);

	close(fd);
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (uid %d)", (int)geteuid());
	snprintf(listen, sizeof(listen), "metrics_listen=127.0.0.1:%d", port);
	argv[n++] = "--set";
	argv[n++] = listen;
	for (; sets != NULL && *sets != NULL && n < 30; sets++) {
		argv[n++] = "--set";
		argv[n++] = *sets;
	}
	argv[n] = NULL;
	harness_start(&H, workers, argv);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(metrics_events, .fini = teardown, .timeout = 240);

/* Waits for a new run of marker (not *old), kills its worker, makes it *old. */
static void
kill_worker_under(const char *marker, pid_t *old)
{
	pid_t job = harness_wait_job(&H, marker, *old, WAIT_MS), worker;

	/* job <- the sandbox's init <- the worker's spawner <- the worker */
	worker = harness_ppid_of(harness_ppid_of(harness_ppid_of(job)));
	cr_assert_gt(worker, 1);
	cr_assert_eq(kill(worker, SIGKILL), 0);
	*old = job;
}

Test(metrics_events, a_job_out_of_attempts_counts_a_retry_and_a_dead_letter)
{
	static const char *const sets[] = { "max_attempts=2", "retry_backoff_ms=50", NULL };
	struct sandq *c;
	struct sandq_result *r = NULL;
	const char *argv[3];
	char id[SANDQ_ID_MAX + 1], m[64];
	pid_t old = 0;

	start(1, sets);
	cr_expect_eq(metric("sandq_dead_letters_total" T), -1, "none before");
	c = harness_client(&H);
	harness_marker(m, sizeof(m), "sleep 4949");
	argv[0] = "sleep";
	argv[1] = m + strlen("sleep ");
	argv[2] = NULL;
	cr_assert_eq(sandq_submit_exec(c, argv, NULL, id), 0);
	kill_worker_under(m, &old);	/* the first attempt: retried */
	kill_worker_under(m, &old);	/* the second and last: dead-lettered */
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "internal");
	sandq_result_free(r);
	sandq_close(c);
	cr_expect_eq(metric("sandq_retries_total" T), 1);
	cr_expect_eq(metric("sandq_dead_letters_total" T), 1);
	cr_expect_eq(metric("sandq_jobs_total{tenant=\"default\",status=\"internal\"}"), 1);
}

Test(metrics_events, a_worker_past_worker_max_jobs_counts_as_recycled)
{
	static const char *const sets[] = { "worker_max_jobs=1", NULL };
	struct sandq *c;
	double n0;

	/* harness_start() ran a job: the worker that ran it is replaced. */
	start(1, sets);
	wait_metric("sandq_workers_recycled_total", 1, 1e9);
	n0 = metric("sandq_workers_recycled_total");
	c = harness_client(&H);
	for (int i = 0; i < 2; i++)
		sandq_result_free(harness_sh(c, "true", NULL));
	sandq_close(c);
	wait_metric("sandq_workers_recycled_total", n0 + 2, n0 + 2);
}

Test(metrics_events, a_job_held_by_a_silent_consumer_counts_as_taken_over)
{
	static const char *const sets[] = { "lease_ms=1500", NULL };
	const char *argv[3] = { "--set", "lease_ms=1500", NULL };
	char listen[64], id[SANDQ_ID_MAX + 1];
	const char *extra[5];
	struct sandq *c;
	struct sandq_result *r = NULL;
	redisContext *rc;
	redisReply *rep;

	start(1, sets);
	cr_expect_eq(metric("sandq_leases_taken_over_total" T), -1);
	cr_assert_eq(harness_stop_sandqd(&H, 30000), 0);
	/* No host: the job waits; a consumer that never renews takes it. */
	c = harness_client(&H);
	cr_assert_eq(sandq_submit_sh(c, "echo taken-over", NULL, id), 0);
	rc = redisConnect("127.0.0.1", H.port);
	cr_assert(rc != NULL && rc->err == 0);
	rep = redisCommand(rc, "XREADGROUP GROUP sandq ghost COUNT 1 STREAMS "
	    "sandq:{default}:jobs >");
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_ARRAY, "ghost read");
	freeReplyObject(rep);
	redisFree(rc);
	/* sandqd again, on the same port: it takes the entry over and runs it. */
	snprintf(listen, sizeof(listen), "metrics_listen=127.0.0.1:%d", port);
	extra[0] = "--set";
	extra[1] = listen;
	extra[2] = argv[0];
	extra[3] = argv[1];
	extra[4] = NULL;
	harness_sandqd_start(&H, 1, extra);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "ok");
	sandq_result_free(r);
	sandq_close(c);
	cr_expect_eq(metric("sandq_leases_taken_over_total" T), 1);
}

Test(metrics_events, jobs_behind_a_busy_worker_show_in_the_stream_gauges)
{
	struct sandq *c;
	struct sandq_result *r = NULL;
	char first[SANDQ_ID_MAX + 1], ids[2][SANDQ_ID_MAX + 1], m[64], script[128];

	start(1, NULL);
	/* Read once at least, with nothing in the stream. */
	wait_metric("sandq_stream_entries" T, 0, 0);
	cr_expect_eq(metric("sandq_stream_oldest_age_seconds" T), 0);
	c = harness_client(&H);
	/* The one worker busy until its marker file goes: the others wait. */
	snprintf(script, sizeof(script), "%s; true",
	    harness_marker(m, sizeof(m), "sleep 3600"));
	cr_assert_eq(sandq_submit_sh(c, script, NULL, first), 0);
	cr_assert_gt(harness_wait_job(&H, m, 0, WAIT_MS), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(sandq_submit_sh(c, "true", NULL, ids[i]), 0);
	/* Three unanswered entries: one running, two read by no host or queued here. */
	wait_metric("sandq_stream_entries" T, 3, 3);
	wait_metric("sandq_stream_oldest_age_seconds" T, 0.001, 1e9);
	cr_expect_eq(metric("sandq_stream_waiting" T) + metric("sandq_queue_depth" T), 2);
	if (metric("sandq_stream_waiting" T) > 0)
		wait_metric("sandq_stream_waiting_oldest_age_seconds" T, 0.001, 1e9);
	/* The running job ends: everything is answered, the gauges go back to 0. */
	cr_assert_eq(kill(harness_wait_job(&H, m, 0, WAIT_MS), SIGKILL), 0);
	cr_assert_eq(sandq_wait(c, first, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	sandq_result_free(r);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(sandq_wait(c, ids[i], WAIT_MS, &r), 0, "%s", sandq_last_error(c));
		cr_expect_str_eq(r->status, "ok");
		sandq_result_free(r);
	}
	sandq_close(c);
	wait_metric("sandq_stream_entries" T, 0, 0);
	cr_expect_eq(metric("sandq_stream_waiting" T), 0);
	cr_expect_eq(metric("sandq_stream_oldest_age_seconds" T), 0);
}

Test(metrics_events, a_sandbox_makes_the_snapshot_store_grow)
{
	struct sandq_file f = { "seed.txt", "seed\n", 5 };
	struct sandq_op_args a = { .sandbox = "metered", .files = &f, .nfiles = 1 };
	struct sandq *c;
	struct sandq_result *r = NULL;

	start(1, NULL);
	wait_metric("sandq_snapshot_store_blobs", 0, 1e9);	/* read once */
	c = harness_client(&H);
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	sandq_close(c);
	wait_metric("sandq_snapshot_store_blobs", 1, 1e9);
	cr_expect_gt(metric("sandq_snapshot_store_bytes"), 0);
}
