/*
 * hygiene_test.c - the pool keeps its workers healthy (dispatcher/pool.c):
 * a worker whose own memory grew past worker_max_memory_growth is replaced
 * after its job, a worker stuck in set-up is killed and started again, and
 * a worker stuck on a job is killed, its job tried again (here: answered),
 * and an idle worker folds the store's WAL into its file.
 *
 * Every test runs its own sandqd with one worker, so "the worker" is one
 * process, found by its command line (--run-dir names the harness's
 * folder). Waits are conditions with generous deadlines. Needs root, like
 * every test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000
#define BIG_FILE (8u << 20)		/* an fs.write that grows the worker */

static struct harness H;
static char tmpdir[64];		/* the set-up test's script folder, or "" */

static void
need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
}

/* Runs after a failed assertion too: nothing is left running. */
static void
teardown(void)
{
	char cmd[128];

	harness_stop(&H);
	if (tmpdir[0] != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		harness_run(cmd, NULL);
	}
}

TestSuite(hygiene, .init = need_root, .fini = teardown, .timeout = 240);

/*** Helpers ***/

/* The harness's worker process (exactly one expected), or 0. */
static pid_t
worker_pid(const struct harness *h)
{
	char needle[300];
	pid_t pids[4];

	snprintf(needle, sizeof(needle), "--run-dir %s/state/run/", h->dir);
	return harness_pgrep(needle, pids, 4) == 1 ? pids[0] : 0;
}

struct replaced {
	const struct harness *h;
	pid_t old;
};

/* A worker other than old serves the slot. */
static bool
worker_replaced(void *arg)
{
	const struct replaced *x = arg;
	pid_t now = worker_pid(x->h);

	return now > 0 && now != x->old;
}

static bool
process_gone(void *arg)
{
	return kill(*(pid_t *)arg, 0) < 0 && errno == ESRCH;
}

/* Whether sandqd's log contains needle. */
static bool
log_has(const struct harness *h, const char *needle)
{
	FILE *f = fopen(h->log, "r");
	char *buf = NULL;
	size_t cap = 0;
	bool found = false;

	cr_assert_not_null(f, "%s: %s", h->log, strerror(errno));
	/* The whole log as one record: it holds no NUL byte. */
	if (getdelim(&buf, &cap, '\0', f) > 0)
		found = strstr(buf, needle) != NULL;
	free(buf);
	fclose(f);
	return found;
}

static void
expect_ok(struct sandq_result *r, const char *what)
{
	cr_expect_str_eq(r->status, "ok", "%s: %s: %s", what, r->status,
	    r->error_message ? r->error_message : "");
	sandq_result_free(r);
}

/*
 * Creates sandbox sb and writes a BIG_FILE-byte file into it: the worker
 * opens the store and edits and commits the snapshot in its own memory, and
 * keeps some of it: its resident set grows by about 6 MiB (86 MiB under
 * ASan), where a small job adds a few pages.
 */
static void
write_big_file(struct sandq *c, const char *sb)
{
	struct sandq_op_args a = { .sandbox = sb };
	struct sandq_result *r = NULL;
	uint8_t *data = malloc(BIG_FILE);
	uint32_t x = 2463534242u;

	cr_assert_not_null(data);
	for (size_t i = 0; i < BIG_FILE; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		data[i] = (uint8_t)x;
	}
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	expect_ok(r, "sandbox.create");
	a.path = "big.bin";
	a.data = data;
	a.data_len = BIG_FILE;
	cr_assert_eq(sandq_call(c, "fs.write", &a, NULL, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	free(data);
	expect_ok(r, "fs.write");
}

/*** Memory growth ***/

/*
 * Small jobs leave the worker alone; the ops that grow it past 2 MiB get
 * their results, then the worker is replaced at once, with an info line
 * naming the growth and no warning, and the new one serves.
 */
Test(hygiene, a_worker_whose_own_memory_grew_is_replaced_after_its_job)
{
	static const char *const extra[] = { "--set", "worker_max_memory_growth=2M",
	    "--log-level", "debug", NULL };
	struct sandq *c;
	pid_t first;

	harness_start(&H, 1, extra);
	c = harness_client(&H);
	first = worker_pid(&H);
	cr_assert_gt(first, 0);
	/* Had the first made it leave, the second would run on another. */
	expect_ok(harness_sh(c, "echo small", NULL), "small job");
	expect_ok(harness_sh(c, "echo small", NULL), "small job");
	cr_expect_eq(worker_pid(&H), first, "a small job replaced the worker");
	cr_expect_not(log_has(&H, "past worker_max_memory_growth"));

	write_big_file(c, "grow");
	cr_expect(harness_wait_for(worker_replaced, &(struct replaced){ &H, first },
	    WAIT_MS), "worker %d still serving after its memory grew", (int)first);
	cr_expect(log_has(&H, "past worker_max_memory_growth; replaced"));
	cr_expect_not(log_has(&H, "sandqd warn: worker/0"),
	    "a replacement on purpose is not a warning");
	cr_expect(harness_wait_for(process_gone, &first, WAIT_MS));
	expect_ok(harness_sh(c, "echo after", NULL), "job on the new worker");
	sandq_close(c);
}

/* With the default (256M), the same ops keep the worker. */
Test(hygiene, the_default_growth_limit_keeps_a_worker_after_the_same_job)
{
	struct sandq *c;
	pid_t first;

	harness_start(&H, 1, NULL);
	c = harness_client(&H);
	first = worker_pid(&H);
	cr_assert_gt(first, 0);
	write_big_file(c, "grow");
	/* A replacement would have been reaped before this job could run. */
	expect_ok(harness_sh(c, "echo after", NULL), "job after the write");
	cr_expect_eq(worker_pid(&H), first, "the worker was replaced");
	cr_expect_not(log_has(&H, "past worker_max_memory_growth"));
	sandq_close(c);
}

/*** The store's WAL ***/

struct in_file {
	const struct harness *h;
	const char *id;
	int version;
};

/*
 * Whether the store's database file itself (immutable=1: the WAL is not
 * read) holds the sandbox at the version: only a checkpoint puts a
 * commit there. A read that meets a page being written says not yet.
 */
static bool
file_has_version(void *arg)
{
	const struct in_file *x = arg;
	char uri[400];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	bool yes = false;

	snprintf(uri, sizeof(uri), "file:%.300s/state/store/store.db?immutable=1",
	    x->h->dir);
	if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) ==
	    SQLITE_OK && sqlite3_prepare_v2(db, "SELECT version FROM sandboxes"
	    " WHERE tenant = 'default' AND id = ?1", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, x->id, -1, SQLITE_STATIC) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		yes = sqlite3_column_int(st, 0) == x->version;
	sqlite3_finalize(st);
	sqlite3_close(db);
	return yes;
}

static bool
checkpointed(void *arg)
{
	return log_has(arg, "WAL frames checkpointed while idle");
}

/*
 * A commit leaves its frames in the WAL (below the backstop of
 * STORE_WAL_AUTOCHECKPOINT: the job's 2 MB of random bytes are some 500
 * frames, past what an idle worker waits for); once the worker has had
 * nothing to do for a moment it checkpoints them, so the next commits do
 * not: the database file shows the job's version, and the log says so.
 */
Test(hygiene, an_idle_worker_folds_the_store_wal_into_its_file)
{
	static const char *const extra[] = { "--log-level", "debug", NULL };
	struct sandq_op_args a = { 0 };
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[64];
	struct sandq *c;

	harness_start(&H, 1, extra);
	c = harness_client(&H);
	snprintf(id, sizeof(id), "wal-%d", (int)getpid());
	a.sandbox = id;
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	expect_ok(r, "sandbox.create");
	o.sandbox = id;
	r = harness_sh(c, "head -c 2000000 /dev/urandom > f", &o);
	cr_assert_not_null(r);
	cr_assert_eq(r->version, 2, "the job committed version %llu",
	    (unsigned long long)r->version);
	expect_ok(r, "job on the sandbox");
	cr_assert(harness_wait_for(checkpointed, &H, WAIT_MS),
	    "the worker never checkpointed while idle");
	cr_expect(file_has_version(&(struct in_file){ &H, id, 2 }),
	    "the store's file does not hold version 2 after the checkpoint");
	sandq_close(c);
}

/*** Stuck in set-up ***/

/*
 * worker_path is a script whose first start never says HELLO (it execs
 * sleep, keeping its pid) and whose later starts exec the real worker.
 * sandqd must kill the first after worker_setup_timeout_ms, say why, and
 * start another, which serves harness_start()'s first job.
 */
Test(hygiene, a_worker_stuck_in_set_up_is_killed_and_replaced)
{
	char *dir, script[300], starts[300], opt[400], m[64];
	const char *extra[] = { "--set", "worker_setup_timeout_ms=5000",
	    "--set", opt, NULL };
	pid_t pids[4] = { 0 }, now;
	int n = 0;
	FILE *f;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sandq-hyg-XXXXXX");
	cr_assert_not_null(dir = mkdtemp(tmpdir));
	snprintf(script, sizeof(script), "%s/worker.sh", dir);
	snprintf(starts, sizeof(starts), "%s/starts", dir);
	snprintf(opt, sizeof(opt), "worker_path=%s", script);
	harness_marker(m, sizeof(m), "sleep 5171");
	cr_assert_not_null(f = fopen(script, "w"));
	fprintf(f, "#!/bin/sh\n"
	    "echo $$ >> %s\n"
	    "if [ ! -e %s/hung ]; then : > %s/hung; exec %s; fi\n"
	    "exec %s/sandq-worker \"$@\"\n", starts, dir, dir, m, harness_build_dir());
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(chmod(script, 0755), 0);

	harness_start(&H, 1, extra);
	cr_assert_not_null(f = fopen(starts, "r"));
	while (n < 4 && fscanf(f, "%d", &pids[n]) == 1)
		n++;
	fclose(f);
	cr_assert_geq(n, 2, "the worker was started %d time(s)", n);
	cr_expect(harness_wait_for(process_gone, &pids[0], WAIT_MS),
	    "the stuck worker %d is still there", (int)pids[0]);
	cr_expect(harness_wait_for(harness_marker_gone, m, WAIT_MS));
	cr_expect(log_has(&H, "worker/0: was stuck in set-up: no HELLO 5000 ms after it "
	    "started; killing it"));
	now = worker_pid(&H);
	cr_expect_eq(now, pids[n - 1], "worker %d serves, not the last one started (%d)",
	    (int)now, (int)pids[n - 1]);
}

/*** Stuck on a job ***/

/*
 * The worker (not its sandbox) is stopped with SIGSTOP while its job
 * sleeps: no result can come. Past the job's wall limit plus
 * worker_stuck_grace_ms sandqd kills it. A stuck worker is a failure of
 * the infrastructure, so the job would be retried; with max_attempts 1 it
 * is answered `internal` at once (attempts_exhausted) naming the cause,
 * its processes are gone, and a fresh worker serves.
 */
Test(hygiene, a_worker_stuck_on_a_job_is_killed_and_its_job_answered)
{
	static const char *const extra[] = { "--set", "worker_stuck_grace_ms=500",
	    "--set", "max_attempts=1", NULL };
	struct sandq_job_opts o = { .limits.wall_ms = 5000 };
	const char *argv[] = { "sleep", NULL, NULL };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1], m[64];
	struct sandq *c;
	pid_t job, worker;

	argv[1] = harness_marker(m, sizeof(m), "sleep 5173") + strlen("sleep ");
	harness_start(&H, 1, extra);
	c = harness_client(&H);
	worker = worker_pid(&H);
	cr_assert_gt(worker, 0);
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0);
	job = harness_wait_job(&H, m, 0, WAIT_MS);
	/* job <- its sandbox's init <- the spawner <- the worker */
	cr_assert_eq(harness_ppid_of(harness_ppid_of(harness_ppid_of(job))), worker);
	cr_assert_eq(kill(worker, SIGSTOP), 0);

	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "internal");
	cr_expect_str_eq(r->error_code ? r->error_code : "", "attempts_exhausted");
	cr_expect_not_null(r->error_message);
	cr_expect_not_null(strstr(r->error_message ? r->error_message : "",
	    "was stuck: no result 500 ms after the job's wall limit"), "%s",
	    r->error_message);
	sandq_result_free(r);
	cr_expect(log_has(&H, "worker/0: was stuck: no result 500 ms after the job's "
	    "wall limit; killing it"));
	cr_expect(harness_wait_for(process_gone, &worker, WAIT_MS));
	cr_expect(harness_wait_for(harness_marker_gone, m, WAIT_MS),
	    "the job outlived its stuck worker");
	cr_expect(harness_wait_for(worker_replaced, &(struct replaced){ &H, worker },
	    WAIT_MS));
	expect_ok(harness_sh(c, "echo again", NULL), "job on the new worker");
	sandq_close(c);
}
