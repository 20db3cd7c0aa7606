/*
 * hosts_test.c - several sandqd hosts on one Redis, and the failures
 * between them (docs/hosts.md): a host killed, a host cut off from Redis,
 * Redis restarted. Each test runs a batch of 2,000 jobs over three hosts
 * and checks that every job ends with exactly one result, the right one.
 *
 * deploy/hosts.sh puts Redis and each sandqd in network namespaces of
 * their own (NAME-redis, NAME-h1..h3) joined by a bridge; it also gives
 * this (root) namespace a veth onto the bridge, so the test talks to Redis
 * directly, with libsandq to submit and hiredis to watch the keys. NAME is
 * "hq" and the test process's pid, so runs side by side do not collide;
 * the folder is a fresh /tmp/sandq-hosts-XXXXXX. The test process is a
 * child subreaper: the daemons hosts.sh starts become its children when
 * hosts.sh exits, so it reaps them and sees them die.
 *
 * Results are watched without consuming them: the test GETs
 * sandq:{T}:res:ID (never BLPOPs the done list), keeps the first copy it
 * sees of each, and at the end, after every host still alive has been
 * stopped with SIGTERM (which drains: everything it holds is published),
 * compares. A job has two results when its stored result is not the first
 * one seen, or when its done list does not hold exactly one element. A job
 * may *run* twice (at-least-once): a host cut off for longer than lease_ms
 * finishes what the others took over; its late result is not stored (the
 * first result wins) but its "finished" event reaches the audit stream
 * (a run's events travel in the same transaction as its result). So the
 * audit stream's runs are counted and may exceed one only for jobs that
 * were taken over; a publish repeated after a lost reply repeats the same
 * event and is counted apart.
 *
 * Set HOSTS_TEST_LOGS=1 to see the tail of every log at the end, and
 * HOSTS_TEST_KEEP=1 to keep the folder.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define NHOSTS 3
#define NJOBS 2000
#define WORKERS "workers=2"
#define TENANT "default"
#define HOSTS_SH "deploy/hosts.sh"
#define POLL_MS 250			/* between two looks at the results */
#define ALL_DONE_MS 150000		/* the whole batch, from the first submit */
#define STOP_MS 45000			/* hosts draining at the end (30 s drain + 5) */
#define REJOIN_MS 30000			/* hosts back on Redis after its restart */
#define EXAMPLES 5			/* jobs named per kind of failure */

/*** One run of deploy/hosts.sh ***/

struct hosts {
	char name[16];			/* NAME: namespaces NAME-redis, NAME-hI */
	char dir[256];			/* DIR: pid files, logs, state folders */
	char url[128];			/* redis://10.231.X.1:6379 */
	char host[64];			/* the URL's address, for hiredis */
	int port;
	bool up;			/* hosts.sh up succeeded: down at the end */
};

static struct hosts H;

static long long
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Progress and figures, shown by every run (cr_log_info needs --verbose). */
static void __attribute__((format(printf, 1, 2)))
note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "hosts_test: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * Runs deploy/hosts.sh with the arguments given (a printf format) and the
 * build folder under test; returns its exit status. Its standard error
 * goes to the test's, where Criterion shows it.
 */
static int __attribute__((format(printf, 1, 2)))
hosts_sh(const char *fmt, ...)
{
	char args[1024], cmd[1600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "SANDQ_BUILD='%s' sh %s %s </dev/null",
	    harness_build_dir(), HOSTS_SH, args);
	return harness_run(cmd, NULL);
}

/* The pid hosts.sh recorded in DIR/file, or -1. */
static pid_t
pid_of(const char *file)
{
	char path[400];
	FILE *f;
	int pid = -1;

	snprintf(path, sizeof(path), "%s/%s", H.dir, file);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	if (fscanf(f, "%d", &pid) != 1)
		pid = -1;
	fclose(f);
	return (pid_t)pid;
}

/*
 * Waits up to timeout_ms for pid to end; reaps it (it is our child once
 * hosts.sh has exited: we are a subreaper). Returns whether it ended;
 * *status gets its wait status when we reaped it, else -1.
 */
static bool
pid_wait_gone(pid_t pid, int timeout_ms, int *status)
{
	long long end = mono_ms() + timeout_ms;
	int st;

	if (status)
		*status = -1;
	for (;;) {
		pid_t p = waitpid(pid, &st, WNOHANG);

		if (p == pid) {
			if (status)
				*status = st;
			return true;
		}
		if (p < 0 && kill(pid, 0) < 0 && errno == ESRCH)
			return true;	/* not ours, and gone */
		if (mono_ms() > end)
			return false;
		msleep(10);
	}
}

/* Starts sandqd on host i with extra --set options (NULL-terminated). */
static void
host_start(int i, const char *const *sets)
{
	char args[1024];
	size_t n;

	n = (size_t)snprintf(args, sizeof(args), "sandqd %s %d '%s' --set %s", H.name, i,
	    H.dir, WORKERS);
	for (size_t k = 0; sets[k] && n < sizeof(args); k++)
		n += (size_t)snprintf(args + n, sizeof(args) - n, " --set '%s'", sets[k]);
	cr_assert_eq(hosts_sh("%s >/dev/null", args), 0, "hosts.sh could not start h%d", i);
}

/*
 * SIGTERMs the sandqd of each host in [from, to] still running and waits
 * for all of them (a drain: each publishes everything it holds first).
 */
static void
hosts_stop(int from, int to)
{
	pid_t pids[NHOSTS + 1] = { 0 };
	long long end = mono_ms() + STOP_MS;

	for (int i = from; i <= to; i++) {
		char file[16];

		snprintf(file, sizeof(file), "h%d.pid", i);
		pids[i] = pid_of(file);
		cr_assert_gt(pids[i], 0);
		cr_assert_eq(kill(pids[i], SIGTERM), 0, "h%d (pid %d) is not running", i,
		    (int)pids[i]);
	}
	for (int i = from; i <= to; i++) {
		int left = (int)(end - mono_ms()), st;

		cr_assert(pid_wait_gone(pids[i], left > 0 ? left : 0, &st),
		    "h%d did not stop in %d s", i, STOP_MS / 1000);
		cr_expect(st == -1 || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
		    "h%d exited with status %#x", i, st);
	}
}

/* The last lines of host i's log, for a failure message (owned). */
static char *
host_log_tail(int i)
{
	char cmd[400], *out = NULL;

	snprintf(cmd, sizeof(cmd), "tail -n 12 '%s/h%d.log'", H.dir, i);
	harness_run(cmd, &out);
	return out;
}

/*
 * Runs left over by a hosts_test process that died before its teardown
 * (a Criterion timeout kills without one): NAME is "hq" and that pid, so
 * a run whose process is gone is stopped and deleted here. One named for
 * this very process is stale too: its pid was reused, and its name is the
 * one this run is about to take.
 */
static void
reap_stale_runs(void)
{
	char *out = NULL, *line, *save = NULL;

	if (harness_run("ls /run/sandq-hosts 2>/dev/null", &out) != 0) {
		free(out);
		return;
	}
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *end;
		long pid;

		if (strncmp(line, "hq", 2) != 0)
			continue;
		pid = strtol(line + 2, &end, 10);
		if (*end != '\0' || pid <= 0 ||
		    (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)))
			continue;
		fprintf(stderr, "hosts_test: run %s outlived its test: hosts.sh down\n", line);
		(void)hosts_sh("down %s", line);
	}
	free(out);
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void
setup(void)
{
	FILE *f;
	char path[400];

	if (geteuid() != 0)
		cr_skip_test("network namespaces and sandqd need root (uid %d)",
		    (int)geteuid());
	cr_assert_eq(access(HOSTS_SH, R_OK), 0, "%s: run from the repository root",
	    HOSTS_SH);
	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	reap_stale_runs();
	snprintf(H.name, sizeof(H.name), "hq%d", (int)(getpid() % 100000000));
	snprintf(H.dir, sizeof(H.dir), "/tmp/sandq-hosts-XXXXXX");
	cr_assert_not_null(mkdtemp(H.dir));
	cr_assert_eq(hosts_sh("up %s %d '%s' >/dev/null", H.name, NHOSTS, H.dir), 0,
	    "hosts.sh up failed");
	H.up = true;
	cr_assert_eq(hosts_sh("redis %s '%s' >/dev/null", H.name, H.dir), 0,
	    "hosts.sh redis failed");
	snprintf(path, sizeof(path), "%s/redis.url", H.dir);
	cr_assert_not_null(f = fopen(path, "r"));
	cr_assert_eq(fscanf(f, "%127s", H.url), 1);
	fclose(f);
	cr_assert_eq(sscanf(H.url, "redis://%63[^:]:%d", H.host, &H.port), 2,
	    "bad url %s", H.url);
	note("hosts %s in %s, redis %s", H.name, H.dir, H.url);
}

static void
teardown(void)
{
	char cmd[800];

	if (!H.up)
		goto out_rm;
	if (getenv("HOSTS_TEST_LOGS")) {
		snprintf(cmd, sizeof(cmd), "tail -n 15 '%s'/*.log >&2", H.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "(no logs)\n");
	}
	if (hosts_sh("down %s", H.name) != 0)
		fprintf(stderr, "hosts_test: hosts.sh down %s failed\n", H.name);
	/* What hosts.sh stopped was ours to reap. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
out_rm:
	if (H.dir[0] && getenv("HOSTS_TEST_KEEP") == NULL)
		nftw(H.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(hosts, .init = setup, .fini = teardown);

/*** The batch ***/

/*
 * What a job runs: most echo their index on a throw-away sandbox; every
 * SBX_EVERY-th appends its index to a file in one of NSBX persistent
 * sandboxes (the hosts share them: snapshot_store = redis). Once every job
 * is answered, each sandbox's versions must be 2..n+1 with none skipped or
 * repeated, and its file must hold each of its jobs' lines once
 * (sbx_verify()).
 */
enum job_kind {
	JOB_ECHO,			/* sh "echo INDEX" on a fresh sandbox */
	JOB_SBX,			/* appends INDEX to log in sandbox sbx-K */
};

#define NSBX 8
#define SBX_EVERY 10
static const char *const sbx_names[NSBX] = {
	"sbx-0", "sbx-1", "sbx-2", "sbx-3", "sbx-4", "sbx-5", "sbx-6", "sbx-7",
};

struct job {
	char id[32];			/* TAG-INDEX, the client-made job id */
	enum job_kind kind;
	char script[64];
	const char *sandbox;		/* NULL: a throw-away sandbox */
	char expect[32];		/* the stdout it must print */
	char *first;			/* the first result seen (msgpack), owned */
	size_t first_len;
};

struct batch {
	struct job *jobs;
	size_t n;
	size_t answered;		/* jobs with a result seen */
};

/*
 * The job mix: fills job i of a batch (its id, what it runs, what it must
 * print). The only place that decides what a batch is made of. Each job
 * sleeps 50 ms, so a batch lasts long enough on this machine for every
 * event of a test to happen while jobs are still coming (one host alone
 * answers trivial jobs at over 200 a second: a batch of echos would be
 * over before a cut host came back).
 */
static void
job_mix(struct job *j, const char *tag, size_t i)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s-%04zu", tag, i);
	snprintf(j->expect, sizeof(j->expect), "%zu\n", i);
	if (i % SBX_EVERY == 0) {
		j->kind = JOB_SBX;
		j->sandbox = sbx_names[(i / SBX_EVERY) % NSBX];
		snprintf(j->script, sizeof(j->script), "sleep 0.05; echo %zu >> log; echo %zu",
		    i, i);
		return;
	}
	j->kind = JOB_ECHO;
	snprintf(j->script, sizeof(j->script), "sleep 0.05; echo %zu", i);
}

/* Whether r is the right answer to j; explains why not in why. */
static bool
job_check(const struct job *j, const struct sandq_result *r, char *why, size_t len)
{
	switch (j->kind) {
	case JOB_SBX:
		/* Committed by a host that died before publishing: said so. */
		if (strcmp(r->status, "internal") == 0 && r->error_code != NULL &&
		    strcmp(r->error_code, "result_lost") == 0)
			return true;
		/* FALLTHROUGH */
	case JOB_ECHO:
		if (strcmp(r->status, "ok") != 0) {
			snprintf(why, len, "status %s (%s)", r->status,
			    r->error_message ? r->error_message : "");
			return false;
		}
		if (r->stdout_len != strlen(j->expect) ||
		    memcmp(r->stdout_data, j->expect, r->stdout_len) != 0) {
			snprintf(why, len, "stdout \"%.40s\", expected \"%s\"",
			    (const char *)r->stdout_data, j->expect);
			return false;
		}
		return true;
	}
	snprintf(why, len, "unknown kind %d", (int)j->kind);
	return false;
}

static void
batch_init(struct batch *b, const char *tag, size_t n)
{
	b->jobs = calloc(n, sizeof(*b->jobs));
	cr_assert_not_null(b->jobs);
	b->n = n;
	b->answered = 0;
	for (size_t i = 0; i < n; i++)
		job_mix(&b->jobs[i], tag, i);
}

static void
batch_free(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->jobs[i].first);
	free(b->jobs);
	b->jobs = NULL;
}

static void
batch_submit(struct batch *b, struct sandq *c)
{
	for (size_t i = 0; i < b->n; i++) {
		struct job *j = &b->jobs[i];
		struct sandq_job_opts o = { .id = j->id, .sandbox = j->sandbox };
		char id[SANDQ_ID_MAX + 1];

		cr_assert_eq(sandq_submit_sh(c, j->script, &o, id), 0, "submit %s: %s",
		    j->id, sandq_last_error(c));
	}
}

/*** Watching Redis ***/

static redisContext *
redis_open(void)
{
	struct timeval tv = { 5, 0 };
	redisContext *rc = redisConnectWithTimeout(H.host, H.port, tv);

	cr_assert(rc != NULL && rc->err == 0, "redis %s: %s", H.url,
	    rc ? rc->errstr : "no memory");
	redisSetTimeout(rc, tv);
	return rc;
}

/*
 * One look at the results of every job not answered yet, pipelined. Keeps
 * the first copy of each result seen. Returns 0, or -EIO when Redis did
 * not answer (it may be restarting): the caller reconnects and looks again.
 */
static int
batch_poll(struct batch *b, redisContext *rc)
{
	size_t sent = 0;
	int rc_io = 0;

	if (rc->err != 0 && redisReconnect(rc) != REDIS_OK)
		return -EIO;
	for (size_t i = 0; i < b->n; i++)
		if (b->jobs[i].first == NULL) {
			redisAppendCommand(rc, "GET sandq:{" TENANT "}:res:%s", b->jobs[i].id);
			sent++;
		}
	for (size_t i = 0; i < b->n && sent > 0; i++) {
		struct job *j = &b->jobs[i];
		redisReply *r = NULL;

		if (j->first != NULL)
			continue;
		sent--;
		if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
			rc_io = -EIO;
			break;
		}
		if (r->type == REDIS_REPLY_STRING) {
			j->first = malloc(r->len + 1);
			cr_assert_not_null(j->first);
			memcpy(j->first, r->str, r->len);
			j->first_len = r->len;
			b->answered++;
		}
		freeReplyObject(r);
	}
	return rc_io;
}

/*
 * Polls every POLL_MS until at least target jobs are answered or
 * timeout_ms has passed (a target above the batch watches for exactly
 * timeout_ms). Returns the jobs answered.
 */
static size_t
batch_watch(struct batch *b, redisContext *rc, size_t target, int timeout_ms)
{
	long long end = mono_ms() + timeout_ms;

	for (;;) {
		(void)batch_poll(b, rc);
		if (b->answered >= target || mono_ms() >= end)
			return b->answered;
		msleep(POLL_MS);
	}
}

/* One "finished" event seen in the audit stream for a job. */
struct finished {
	size_t runs;			/* distinct (host, time, detail) */
	size_t events;			/* every event, repeats included */
	char sig[3][160];		/* the first few distinct signatures */
};

/* The index of job id in b, or -1 (not one of ours). */
static ssize_t
batch_index(const struct batch *b, const char *id, size_t len)
{
	const char *dash = memrchr(id, '-', len);
	char num[16];
	size_t i;

	if (dash == NULL || (size_t)(id + len - dash - 1) >= sizeof(num))
		return -1;
	memcpy(num, dash + 1, (size_t)(id + len - dash - 1));
	num[id + len - dash - 1] = '\0';
	i = strtoul(num, NULL, 10);
	if (i >= b->n || strlen(b->jobs[i].id) != len || memcmp(b->jobs[i].id, id, len) != 0)
		return -1;
	return (ssize_t)i;
}

/* Reads the tenant's whole audit stream; counts "finished" per job. */
static void
audit_finished(const struct batch *b, redisContext *rc, struct finished *fin)
{
	char start[64] = "-";

	for (;;) {
		redisReply *r = redisCommand(rc, "XRANGE sandq:{" TENANT "}:audit %s + COUNT 1000",
		    start);

		cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY, "XRANGE audit: %s",
		    r ? r->str : rc->errstr);
		for (size_t e = 0; e < r->elements; e++) {
			redisReply *ent = r->element[e], *kv = ent->element[1];
			const redisReply *job = NULL, *action = NULL, *host = NULL, *tm = NULL,
			    *detail = NULL;
			char sig[160];
			ssize_t i;
			struct finished *f;
			bool seen = false;

			snprintf(start, sizeof(start), "(%s", ent->element[0]->str);
			for (size_t k = 0; k + 1 < kv->elements; k += 2) {
				const char *name = kv->element[k]->str;

				if (strcmp(name, "job") == 0)
					job = kv->element[k + 1];
				else if (strcmp(name, "action") == 0)
					action = kv->element[k + 1];
				else if (strcmp(name, "host") == 0)
					host = kv->element[k + 1];
				else if (strcmp(name, "time") == 0)
					tm = kv->element[k + 1];
				else if (strcmp(name, "detail") == 0)
					detail = kv->element[k + 1];
			}
			if (job == NULL || action == NULL || strcmp(action->str, "finished") != 0)
				continue;
			if ((i = batch_index(b, job->str, job->len)) < 0)
				continue;
			f = &fin[i];
			f->events++;
			snprintf(sig, sizeof(sig), "host %s time %s %s", host ? host->str : "?",
			    tm ? tm->str : "?", detail ? detail->str : "");
			for (size_t s = 0; s < f->runs && s < 3; s++)
				seen |= strcmp(f->sig[s], sig) == 0;
			if (!seen) {
				if (f->runs < 3)
					snprintf(f->sig[f->runs], sizeof(f->sig[0]), "%s", sig);
				f->runs++;
			}
		}
		if (r->elements < 1000) {
			freeReplyObject(r);
			break;
		}
		freeReplyObject(r);
	}
}

/* A short description of a result's origin, for evidence. */
static void
result_origin(const void *buf, size_t len, char *out, size_t outlen)
{
	struct sandq_result *r = NULL;

	if (sandq_result_decode(buf, len, &r) != 0) {
		snprintf(out, outlen, "(undecodable, %zu bytes)", len);
		return;
	}
	snprintf(out, outlen, "host %s worker %lld started_at %llu finished_at %llu",
	    r->host ? r->host : "?", (long long)r->worker,
	    (unsigned long long)r->started_at, (unsigned long long)r->finished_at);
	sandq_result_free(r);
}

/* Sum of "took over N jobs" in a host's log, and "published again" lines. */
static void
log_takeovers(int i, long *taken, long *republished)
{
	char path[400], line[1024];
	FILE *f;

	*taken = *republished = 0;
	snprintf(path, sizeof(path), "%s/h%d.log", H.dir, i);
	if ((f = fopen(path, "r")) == NULL)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, ": took over ");
		long k;

		if (p && sscanf(p, ": took over %ld job", &k) == 1)
			*taken += k;
		if (strstr(line, "already answered; its result is published again"))
			(*republished)++;
	}
	fclose(f);
}

/*
 * The end of a test: every job has exactly one result, the right one; no
 * entry is left in the stream or pending. Prints results per host and the
 * takeovers. Call once every host still alive has been stopped.
 */
static void
batch_verify(struct batch *b, redisContext *rc)
{
	struct finished *fin = calloc(b->n, sizeof(*fin));
	size_t missing = 0, wrong = 0, replaced = 0, two_runs = 0, repeats = 0,
	    bad_done = 0, per_host[NHOSTS + 1] = { 0 };
	redisReply *r;

	cr_assert_not_null(fin);
	if (rc->err != 0)
		cr_assert_eq(redisReconnect(rc), REDIS_OK, "redis: %s", rc->errstr);
	audit_finished(b, rc, fin);
	for (size_t i = 0; i < b->n; i++) {
		redisAppendCommand(rc, "GET sandq:{" TENANT "}:res:%s", b->jobs[i].id);
		redisAppendCommand(rc, "LLEN sandq:{" TENANT "}:done:%s", b->jobs[i].id);
	}
	for (size_t i = 0; i < b->n; i++) {
		struct job *j = &b->jobs[i];
		redisReply *res = NULL, *llen = NULL;
		struct sandq_result *sr = NULL;
		char why[200], a[200], c[200];

		cr_assert_eq(redisGetReply(rc, (void **)&res), REDIS_OK, "%s", rc->errstr);
		cr_assert_eq(redisGetReply(rc, (void **)&llen), REDIS_OK, "%s", rc->errstr);
		if (res->type != REDIS_REPLY_STRING) {
			if (missing++ < EXAMPLES)
				cr_log_error("job %s: no result", j->id);
			goto next;
		}
		if (sandq_result_decode(res->str, res->len, &sr) != 0) {
			if (wrong++ < EXAMPLES)
				cr_log_error("job %s: result does not decode", j->id);
			goto next;
		}
		if (!job_check(j, sr, why, sizeof(why)) && wrong++ < EXAMPLES)
			cr_log_error("job %s: %s", j->id, why);
		if (sr->host && sr->host[0] == 'h' && atoi(sr->host + 1) >= 1 &&
		    atoi(sr->host + 1) <= NHOSTS)
			per_host[atoi(sr->host + 1)]++;
		if (j->first && (j->first_len != (size_t)res->len ||
		    memcmp(j->first, res->str, res->len) != 0)) {
			result_origin(j->first, j->first_len, a, sizeof(a));
			result_origin(res->str, (size_t)res->len, c, sizeof(c));
			if (replaced++ < EXAMPLES)
				cr_log_error("job %s: result replaced: first seen %s; now %s",
				    j->id, a, c);
		}
		if (llen->type != REDIS_REPLY_INTEGER || llen->integer != 1) {
			if (bad_done++ < EXAMPLES)
				cr_log_error("job %s: done list holds %lld elements", j->id,
				    llen->type == REDIS_REPLY_INTEGER ? llen->integer : -1LL);
		}
		if (fin[i].runs > 1) {
			if (two_runs++ < EXAMPLES)
				note("job %s: ran %zu times, one result kept (audit \"finished\": "
				    "%s | %s)", j->id, fin[i].runs, fin[i].sig[0], fin[i].sig[1]);
		} else if (fin[i].events > 1) {
			repeats++;
		}
next:
		sandq_result_free(sr);
		freeReplyObject(res);
		freeReplyObject(llen);
	}
	free(fin);

	long tsum = 0;
	{
		long taken[NHOSTS + 1] = { 0 }, again[NHOSTS + 1] = { 0 }, asum = 0;

		for (int i = 1; i <= NHOSTS; i++) {
			log_takeovers(i, &taken[i], &again[i]);
			tsum += taken[i];
			asum += again[i];
		}
		note("%zu jobs: results by host h1 %zu, h2 %zu, h3 %zu; taken over %ld "
		    "(by h1 %ld, h2 %ld, h3 %ld), of which already answered and "
		    "republished %ld; the same result published twice %zu; ran twice %zu",
		    b->n, per_host[1], per_host[2], per_host[3], tsum, taken[1], taken[2],
		    taken[3], asum, repeats, two_runs);
	}
	r = redisCommand(rc, "XLEN sandq:{" TENANT "}:jobs");
	cr_expect(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0,
	    "%lld entries left in the stream", r ? r->integer : -1LL);
	freeReplyObject(r);
	r = redisCommand(rc, "XPENDING sandq:{" TENANT "}:jobs sandq");
	cr_expect(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 0,
	    "entries still pending in the consumer group");
	freeReplyObject(r);
	cr_expect_eq(missing, 0, "%zu jobs lost (no result)", missing);
	cr_expect_eq(wrong, 0, "%zu jobs with a wrong result", wrong);
	cr_expect_eq(bad_done, 0, "%zu done lists not of one element", bad_done);
	cr_expect_eq(replaced, 0, "%zu results replaced by a second one (first result "
	    "must win)", replaced);
	/* Only a job taken over can have run twice. */
	cr_expect_leq((long)two_runs, tsum, "%zu jobs ran twice, but only %ld were taken over",
	    two_runs, tsum);
}

/*** Tests ***/

/*** The shared sandboxes ***/

static void
sbx_create(struct sandq *c)
{
	for (int s = 0; s < NSBX; s++) {
		struct sandq_op_args a = { .sandbox = sbx_names[s] };
		struct sandq_result *r = NULL;

		cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, 60000, &r), 0, "%s",
		    sandq_last_error(c));
		cr_assert_str_eq(r->status, "ok", "create %s: %s", sbx_names[s],
		    r->error_message ? r->error_message : "");
		sandq_result_free(r);
	}
}

/* The version a job's first result says it made (0: none). */
static uint64_t
made_version(const struct job *j)
{
	struct sandq_result *r = NULL;
	uint64_t v = 0;
	const char *p;

	if (j->first == NULL || sandq_result_decode(j->first, j->first_len, &r) != 0)
		return 0;
	if (strcmp(r->status, "ok") == 0)
		v = r->version;
	else if (r->error_message && (p = strstr(r->error_message, "made version ")) != NULL)
		v = strtoull(p + 13, NULL, 10);
	sandq_result_free(r);
	return v;
}

/*
 * Every sandbox: the versions its jobs made are 2..n+1, each once, and
 * its file holds each job's line once. Run while hosts still serve (the
 * file is read by a job).
 */
static void
sbx_verify(const struct batch *b, struct sandq *c)
{
	size_t commits = 0;

	for (int s = 0; s < NSBX; s++) {
		size_t n = 0, lines = 0;
		bool seen[NJOBS / SBX_EVERY + 2] = { false };
		unsigned char count[NJOBS] = { 0 };
		struct sandq_job_opts o = { .sandbox = sbx_names[s] };
		struct sandq_result *r = NULL;
		char id[SANDQ_ID_MAX + 1], *p, *save = NULL;

		for (size_t i = 0; i < b->n; i++) {
			const struct job *j = &b->jobs[i];
			uint64_t v;

			if (j->kind != JOB_SBX || j->sandbox != sbx_names[s])
				continue;
			n++;
			v = made_version(j);
			cr_expect(v >= 2 && v < sizeof(seen), "%s: job %s made version %llu",
			    sbx_names[s], j->id, (unsigned long long)v);
			if (v < 2 || v >= sizeof(seen))
				continue;
			cr_expect(!seen[v], "%s: version %llu made twice (job %s)", sbx_names[s],
			    (unsigned long long)v, j->id);
			seen[v] = true;
		}
		for (size_t v = 2; v < n + 2; v++)
			cr_expect(seen[v], "%s: version %zu skipped", sbx_names[s], v);
		commits += n;
		cr_assert_eq(sandq_submit_sh(c, "cat log", &o, id), 0);
		cr_assert_eq(sandq_wait(c, id, 60000, &r), 0, "%s", sandq_last_error(c));
		cr_assert_str_eq(r->status, "ok", "cat on %s: %s", sbx_names[s],
		    r->error_message ? r->error_message : "");
		for (p = strtok_r((char *)r->stdout_data, "\n", &save); p != NULL;
		    p = strtok_r(NULL, "\n", &save)) {
			size_t k = strtoul(p, NULL, 10);

			lines++;
			if (k < NJOBS && count[k] < 255)
				count[k]++;
		}
		cr_expect_eq(lines, n, "%s: %zu lines for %zu jobs", sbx_names[s], lines, n);
		for (size_t i = 0; i < b->n; i++)
			if (b->jobs[i].kind == JOB_SBX && b->jobs[i].sandbox == sbx_names[s])
				cr_expect_eq(count[i], 1, "%s: job %zu's line %d times",
				    sbx_names[s], i, count[i]);
		sandq_result_free(r);
	}
	note("%d shared sandboxes: %zu commits, none skipped or repeated", NSBX, commits);
}

static const char *const short_lease[] = { "lease_ms=3000", "snapshot_store=redis", NULL };
/* Longer than the Redis outage: test b is about Redis, not leases. */
static const char *const long_lease[] = { "lease_ms=30000", "snapshot_store=redis", NULL };

static long long
epoch_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The time of host i's last heartbeat in sandq:hosts (epoch ms), or -1. */
static long long
host_beat_ms(redisContext *rc, int i)
{
	redisReply *r;
	const char *t;
	long long ms = -1;

	if (rc->err != 0 && redisReconnect(rc) != REDIS_OK)
		return -1;
	r = redisCommand(rc, "HGET sandq:hosts h%d", i);
	if (r != NULL && r->type == REDIS_REPLY_STRING &&
	    (t = strstr(r->str, "\"time\":")) != NULL)
		ms = atoll(t + 7);
	freeReplyObject(r);
	return ms;
}

/*
 * 2,000 jobs over three hosts with 3 s leases. At a third answered, host 2
 * is SIGKILLed (its workers die with it); at half, host 3's link is cut
 * for 10 s, then healed. Every job must end answered once, correctly.
 */
Test(hosts, a_killed_host_and_a_cut_host_lose_no_job_and_answer_each_once,
    .timeout = 290)
{
	struct batch b;
	struct sandq *c;
	redisContext *rc;
	char err[256], needle[400];
	long long t0 = mono_ms(), t;
	pid_t h2, left[16];
	size_t at;

	for (int i = 1; i <= NHOSTS; i++)
		host_start(i, short_lease);
	cr_assert_not_null(c = sandq_connect(H.url, TENANT, err, sizeof(err)), "%s", err);
	rc = redis_open();
	batch_init(&b, "a", NJOBS);
	sbx_create(c);
	batch_submit(&b, c);
	note("submitted %zu jobs in %lld ms", b.n, mono_ms() - t0);

	at = batch_watch(&b, rc, b.n / 3, ALL_DONE_MS);
	cr_assert_geq(at, b.n / 3, "only %zu answered in %d s", at, ALL_DONE_MS / 1000);
	h2 = pid_of("h2.pid");
	cr_assert_gt(h2, 0);
	cr_assert_eq(kill(h2, SIGKILL), 0);
	cr_assert(pid_wait_gone(h2, 10000, NULL), "h2 survived SIGKILL");
	/* PR_SET_PDEATHSIG takes its workers (and their sandboxes) with it. */
	snprintf(needle, sizeof(needle), "--run-dir %s/h2/run/", H.dir);
	for (t = mono_ms(); harness_pgrep(needle, left, 16) > 0 && mono_ms() - t < 10000;)
		msleep(20);
	cr_expect_eq(harness_pgrep(needle, left, 16), 0, "h2's workers outlived it");
	note("%zu answered at %lld ms: killed h2 (pid %d)", at, mono_ms() - t0, (int)h2);

	at = batch_watch(&b, rc, b.n / 2, ALL_DONE_MS - (int)(mono_ms() - t0));
	cr_assert_geq(at, b.n / 2, "only %zu answered", at);
	cr_assert_eq(hosts_sh("cut %s 3", H.name), 0);
	note("%zu answered at %lld ms: cut h3 for 10 s", at, mono_ms() - t0);
	/* The cut itself is a fixed 10 s, watched all along. */
	batch_watch(&b, rc, b.n + 1, 10000);
	cr_assert_eq(hosts_sh("heal %s 3", H.name), 0);
	note("%zu answered at %lld ms: healed h3", b.answered, mono_ms() - t0);
	cr_expect_lt(b.answered, b.n, "the batch was over before h3 came back");

	at = batch_watch(&b, rc, b.n, ALL_DONE_MS - (int)(mono_ms() - t0));
	note("%zu answered at %lld ms", at, mono_ms() - t0);
	sbx_verify(&b, c);
	/* A drain publishes all a host holds: any late result lands now. */
	hosts_stop(1, 1);
	hosts_stop(3, 3);
	(void)batch_poll(&b, rc);
	cr_expect_eq(b.answered, b.n, "%zu of %zu jobs never answered", b.n - b.answered,
	    b.n);
	batch_verify(&b, rc);
	note("test a: %lld ms", mono_ms() - t0);
	batch_free(&b);
	redisFree(rc);
	sandq_close(c);
}

/*
 * 2,000 jobs over three hosts; at a third answered, Redis is stopped with
 * SIGTERM (it fsyncs its AOF and exits) and started again on the same
 * address and folder. Every host must be back on Redis within REJOIN_MS
 * (its heartbeat), the hosts publish what finished meanwhile, and every
 * job must end answered once, correctly.
 */
Test(hosts, a_redis_restart_with_aof_loses_no_job, .timeout = 290)
{
	struct batch b;
	struct sandq *c;
	struct sandq_result *r = NULL;
	redisContext *rc;
	char err[256];
	long long t0 = mono_ms(), restarted;
	pid_t redis;
	size_t at;
	bool back[NHOSTS + 1] = { false };

	for (int i = 1; i <= NHOSTS; i++)
		host_start(i, long_lease);
	cr_assert_not_null(c = sandq_connect(H.url, TENANT, err, sizeof(err)), "%s", err);
	rc = redis_open();
	batch_init(&b, "b", NJOBS);
	sbx_create(c);
	batch_submit(&b, c);

	at = batch_watch(&b, rc, b.n / 3, ALL_DONE_MS);
	cr_assert_geq(at, b.n / 3, "only %zu answered in %d s", at, ALL_DONE_MS / 1000);
	redis = pid_of("redis.pid");
	cr_assert_gt(redis, 0);
	cr_assert_eq(kill(redis, SIGTERM), 0);
	cr_assert(pid_wait_gone(redis, 30000, NULL), "redis-server did not stop");
	note("%zu answered at %lld ms: redis stopped", at, mono_ms() - t0);
	cr_assert_eq(hosts_sh("redis %s '%s' >/dev/null", H.name, H.dir), 0,
	    "redis-server did not start again");
	restarted = epoch_ms();
	note("redis up again at %lld ms", mono_ms() - t0);

	/* A libsandq connection opened before the restart works on after it. */
	cr_expect_eq(sandq_result_get(c, b.jobs[0].id, &r), 0, "libsandq after restart: %s",
	    sandq_last_error(c));
	sandq_result_free(r);

	/* Every host is back: a heartbeat written after the restart. */
	for (long long end = mono_ms() + REJOIN_MS; mono_ms() < end;) {
		bool all = true;

		for (int i = 1; i <= NHOSTS; i++)
			all &= back[i] = back[i] || host_beat_ms(rc, i) >= restarted;
		if (all)
			break;
		(void)batch_poll(&b, rc);
		msleep(POLL_MS);
	}
	for (int i = 1; i <= NHOSTS; i++) {
		char *log = back[i] ? NULL : host_log_tail(i);

		cr_expect(back[i], "h%d not back on Redis %d s after its restart; its log:\n%s",
		    i, REJOIN_MS / 1000, log ? log : "");
		free(log);
	}
	note("hosts back at %lld ms (%d, %d, %d)", mono_ms() - t0, back[1], back[2], back[3]);
	cr_assert(back[1] && back[2] && back[3], "a host never came back (above)");
	cr_expect_lt(b.answered, b.n, "the batch was over before the restart");

	at = batch_watch(&b, rc, b.n, ALL_DONE_MS - (int)(mono_ms() - t0));
	note("%zu answered at %lld ms", at, mono_ms() - t0);
	sbx_verify(&b, c);
	hosts_stop(1, NHOSTS);
	(void)batch_poll(&b, rc);
	cr_expect_eq(b.answered, b.n, "%zu of %zu jobs never answered", b.n - b.answered,
	    b.n);
	batch_verify(&b, rc);
	note("test b: %lld ms", mono_ms() - t0);
	batch_free(&b);
	redisFree(rc);
	sandq_close(c);
}
