/*
 * memory.c - what sandq's processes and Redis hold, and whether it grows
 * with the number of jobs run.
 *
 *   memory-bench URL SANDQD_PID [--jobs N] [--checkpoint K] [--clients C]
 *
 * Against a running private stack (bench/run.sh starts a fresh one for it):
 *   processes  VmRSS and VmHWM (/proc/PID/status) of sandqd and of each
 *              worker (sandq-worker, a child of SANDQD_PID; found by the
 *              parent chain, never machine-wide by name) and its spawner
 *              (sandq-spawner, the worker's child): idle after 20 warm-up
 *              jobs, then after each batch of K (default 2,000) `/bin/true`
 *              jobs up to N (default 10,000), submitted from C (default 4)
 *              clients through libsandq as bench.c does (each submits its
 *              share, then waits for them). Workers are listed by slot
 *              (--index); a slot whose pid changed was recycled
 *              (worker_max_jobs, worker_max_memory_growth), and the row
 *              says when.
 *   Redis      INFO memory used_memory before and after N jobs are queued
 *              to a tenant no sandqd serves (not in sandq:tenants, so no
 *              host reads its stream and nothing else is disturbed), per
 *              1,000; the stream is then deleted. And used_memory before
 *              and after the N jobs ran: what stays per job (each result
 *              is kept as res:ID for result_ttl_s, and as done:ID too when
 *              the client found it in res:ID before its BLPOP; the job's
 *              stream entry is deleted; the tenant's audit stream grows
 *              until audit_stream_max), each part measured.
 *
 * VERDICT. A process's VmRSS after N jobs is compared with its VmRSS after
 * the first K (both sampled with the queue empty and the workers idle; every
 * batch the same size, so only the number of jobs run differs). Growth
 * beyond max(10%, 2 MiB) prints GROWS and the exit status is 1. Why that
 * tolerance: RSS moves in pages, and malloc keeps freed arenas and the
 * buffers hiredis and libuv grew for the largest burst, so a process that
 * does not leak still wanders by some hundreds of KiB; and sandqd still
 * fills bounded caches after K = 2,000 jobs: the audit database's SQLite
 * page cache (default 2,000 KiB) grows with audit.db, about 1 MiB more by
 * 4,000 jobs, flat after (its audit ring, 4,096 events of 2,680 bytes, is
 * all touched by some 1,400 jobs). 2 MiB over the 8,000 jobs between the
 * samples still catches a leak of about 260 bytes per job, and 10% keeps a
 * large process's page noise from counting. Comparing after K jobs, not
 * idle, leaves out what the first jobs legitimately warm up (that ring,
 * caches, pools). A slot whose worker was recycled between the samples is not
 * compared (a fresh process says nothing about the old one's growth); its
 * figures are still printed. Failed jobs also make the exit status 1.
 */
#include <dirent.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../libsandq/sandq.h"
#include "../proto/url.h"
#include "timing.h"

#define SERVED_TENANT "default"
#define IDLE_TENANT "membench-queued"	/* never added: no host serves it */
#define WARMUP_JOBS 20
#define SLOTS_MAX 64
#define TOL_BYTES (2u << 20)		/* the verdict's absolute tolerance */
#define TOL_PERCENT 10			/* and its relative one */
#define SETTLE_MS 500			/* after the last result, before sampling */

/*** Processes ***/

/* One process's figures, in KiB as /proc gives them; pid 0 = not found. */
struct pmem {
	pid_t pid;
	long rss_kb;
	long hwm_kb;
};

/* One sample: sandqd, and each worker slot with its spawner. */
struct sample {
	struct pmem sandqd;
	struct pmem worker[SLOTS_MAX];
	struct pmem spawner[SLOTS_MAX];
	int nslots;			/* highest slot seen + 1 */
};

/* Fills m from /proc/PID/status. 0, or -1 if the process is gone. */
static int
pmem_read(pid_t pid, struct pmem *m)
{
	char path[64], line[256];
	FILE *f;

	m->pid = 0;
	m->rss_kb = m->hwm_kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "VmRSS:", 6) == 0)
			m->rss_kb = strtol(line + 6, NULL, 10);
		else if (strncmp(line, "VmHWM:", 6) == 0)
			m->hwm_kb = strtol(line + 6, NULL, 10);
	}
	fclose(f);
	m->pid = pid;
	return m->rss_kb < 0 ? -1 : 0;
}

/* The parent pid and comm of pid from /proc/PID/stat; 0 or -1. */
static int
proc_parent(pid_t pid, pid_t *ppid, char *comm, size_t commlen)
{
	char path[64], buf[512], *open, *close;
	FILE *f;
	size_t n;
	int pp;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "PID (COMM) S PPID ...": comm may hold spaces and parentheses. */
	if ((open = strchr(buf, '(')) == NULL || (close = strrchr(buf, ')')) == NULL ||
	    close < open || sscanf(close + 1, " %*c %d", &pp) != 1)
		return -1;
	snprintf(comm, commlen, "%.*s", (int)(close - open - 1), open + 1);
	*ppid = pp;
	return 0;
}

/* The worker slot of a sandq-worker from its --index argument, or -1. */
static int
worker_slot(pid_t pid)
{
	char path[64], buf[4096];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
		if (strcmp(buf + i, "--index") == 0 && i + 8 < n) {
			long s = strtol(buf + i + 8, NULL, 10);

			return s >= 0 && s < SLOTS_MAX ? (int)s : -1;
		}
	return -1;
}

/*
 * The children of parent named comm (one pass over /proc); writes up to
 * max pids into out. Returns how many.
 */
static int
children(pid_t parent, const char *want, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL && n < max) {
		char comm[64];
		pid_t pid, pp;

		if ((pid = (pid_t)strtol(de->d_name, NULL, 10)) <= 0)
			continue;
		if (proc_parent(pid, &pp, comm, sizeof(comm)) == 0 && pp == parent &&
		    strcmp(comm, want) == 0)
			out[n++] = pid;
	}
	closedir(d);
	return n;
}

/*
 * One sample of sandqd and its workers. Waits (up to 10 s) until want
 * workers are up, each with its spawner, so a slot being refilled after a
 * recycle is seen with its new process. 0, or -1 if sandqd is gone.
 */
static int
sample_take(pid_t sandqd, int want, struct sample *s)
{
	double deadline = now_ms() + 10000;

	for (;;) {
		pid_t w[SLOTS_MAX];
		int nw, complete = 0;

		memset(s, 0, sizeof(*s));
		if (pmem_read(sandqd, &s->sandqd) < 0)
			return -1;
		nw = children(sandqd, "sandq-worker", w, SLOTS_MAX);
		for (int i = 0; i < nw; i++) {
			int slot = worker_slot(w[i]);
			pid_t sp;

			if (slot < 0 || pmem_read(w[i], &s->worker[slot]) < 0)
				continue;
			if (slot + 1 > s->nslots)
				s->nslots = slot + 1;
			if (children(w[i], "sandq-spawner", &sp, 1) == 1 &&
			    pmem_read(sp, &s->spawner[slot]) == 0)
				complete++;
		}
		if (complete >= want || now_ms() > deadline)
			return 0;
		usleep(50000);
	}
}

/*** Redis ***/

/* A plain hiredis connection to url (AUTH, SELECT as it says), or NULL. */
static redisContext *
redis_open(const char *url)
{
	struct redis_url u;
	struct err e;
	redisContext *rc;
	redisReply *r = NULL;

	if (redis_url_parse(url, &u, &e) < 0) {
		fprintf(stderr, "memory-bench: %s\n", e.msg);
		return NULL;
	}
	rc = u.path[0] ? redisConnectUnix(u.path) : redisConnect(u.host, u.port);
	if (rc == NULL || rc->err) {
		fprintf(stderr, "memory-bench: cannot connect to Redis: %s\n",
		    rc ? rc->errstr : "out of memory");
		redisFree(rc);
		return NULL;
	}
	if (u.pass[0]) {
		r = u.user[0] ? redisCommand(rc, "AUTH %s %s", u.user, u.pass) :
		    redisCommand(rc, "AUTH %s", u.pass);
		if (r == NULL || r->type == REDIS_REPLY_ERROR)
			goto out_refused;
		freeReplyObject(r);
		r = NULL;
	}
	if (u.db != 0) {
		r = redisCommand(rc, "SELECT %d", u.db);
		if (r == NULL || r->type == REDIS_REPLY_ERROR)
			goto out_refused;
	}
	freeReplyObject(r);
	return rc;

out_refused:
	fprintf(stderr, "memory-bench: Redis refused AUTH or SELECT\n");
	freeReplyObject(r);
	redisFree(rc);
	return NULL;
}

/* INFO memory's used_memory in bytes, or -1. */
static long long
redis_used(redisContext *rc)
{
	redisReply *r = redisCommand(rc, "INFO memory");
	long long v = -1;
	const char *p;

	if (r != NULL && r->type == REDIS_REPLY_STRING &&
	    (p = strstr(r->str, "\nused_memory:")) != NULL)
		v = strtoll(p + 13, NULL, 10);
	freeReplyObject(r);
	return v;
}

/* An integer reply of a command (XLEN, DBSIZE, MEMORY USAGE), or -1. */
static long long
redis_int(redisContext *rc, const char *fmt, const char *arg)
{
	redisReply *r = redisCommand(rc, fmt, arg);
	long long v = -1;

	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	freeReplyObject(r);
	return v;
}

/*
 * How many keys match pattern (SCAN), or -1; *one gets MEMORY USAGE of the
 * first found (0 if none): they are all alike (one result each).
 */
static long long
redis_count(redisContext *rc, const char *pattern, long long *one)
{
	char cursor[32] = "0";
	long long n = 0;

	*one = 0;
	do {
		redisReply *r = redisCommand(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);

		if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    r->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		n += (long long)r->element[1]->elements;
		if (*one == 0 && r->element[1]->elements > 0 &&
		    r->element[1]->element[0]->type == REDIS_REPLY_STRING)
			*one = redis_int(rc, "MEMORY USAGE %s", r->element[1]->element[0]->str);
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	return n;
}

/*** Jobs ***/

struct client {
	const char *url;
	const char *tenant;
	size_t njobs;
	bool wait;			/* false: submit only */
	int failures;
	char err[256];
};

/* Submits its share of /bin/true jobs, then (if asked) waits for each. */
static void *
client_run(void *arg)
{
	struct client *cl = arg;
	struct sandq *c = sandq_connect(cl->url, cl->tenant, cl->err, sizeof(cl->err));
	const char *argv[] = { "/bin/true", NULL };
	char (*ids)[SANDQ_ID_MAX + 1];

	if (c == NULL) {
		cl->failures = (int)cl->njobs;
		return NULL;
	}
	ids = calloc(cl->njobs ? cl->njobs : 1, sizeof(*ids));
	for (size_t i = 0; i < cl->njobs; i++)
		if (sandq_submit_exec(c, argv, NULL, ids[i]) < 0) {
			snprintf(cl->err, sizeof(cl->err), "%s", sandq_last_error(c));
			cl->failures++;
			ids[i][0] = '\0';
		}
	for (size_t i = 0; cl->wait && i < cl->njobs; i++) {
		struct sandq_result *r = NULL;

		if (ids[i][0] == '\0')
			continue;
		if (sandq_wait(c, ids[i], 120000, &r) < 0 || strcmp(r->status, "ok") != 0)
			cl->failures++;
		sandq_result_free(r);
	}
	free(ids);
	sandq_close(c);
	return NULL;
}

/* n jobs from nclients clients to tenant; returns how many failed. */
static int
run_jobs(const char *url, const char *tenant, size_t n, int nclients, bool wait)
{
	pthread_t th[64];
	struct client cl[64];
	int failures = 0;

	if (nclients > 64)
		nclients = 64;
	memset(cl, 0, sizeof(cl));
	for (int i = 0; i < nclients; i++) {
		cl[i].url = url;
		cl[i].tenant = tenant;
		cl[i].wait = wait;
		cl[i].njobs = n / (size_t)nclients + ((size_t)i < n % (size_t)nclients);
		pthread_create(&th[i], NULL, client_run, &cl[i]);
	}
	for (int i = 0; i < nclients; i++) {
		pthread_join(th[i], NULL);
		if (cl[i].failures && cl[i].err[0])
			fprintf(stderr, "memory-bench: client %d: %s\n", i, cl[i].err);
		failures += cl[i].failures;
	}
	return failures;
}

/*** Report ***/

#define SAMPLES_MAX 64			/* idle + the batches */

static double
mib(long kb)
{
	return (double)kb / 1024.0;
}

/*
 * One row: name, the first pid, VmRSS in each sample, VmHWM in the last,
 * then any pid change (a recycled worker) with the jobs done by then.
 */
static void
print_row(const char *name, const struct pmem *const *m, int n, const size_t *done)
{
	pid_t pid = 0;

	for (int i = 0; i < n && pid == 0; i++)
		pid = m[i]->pid;
	printf("  %-17s %7d", name, (int)pid);
	for (int i = 0; i < n; i++) {
		if (m[i]->pid == 0)
			printf(" %6s", "-");
		else
			printf(" %6.1f", mib(m[i]->rss_kb));
	}
	if (m[n - 1]->pid != 0)
		printf(" %6.1f", mib(m[n - 1]->hwm_kb));
	for (int i = 1; i < n; i++)
		if (m[i]->pid != 0 && m[i - 1]->pid != 0 && m[i]->pid != m[i - 1]->pid)
			printf("  pid %d -> %d by %zu jobs", (int)m[i - 1]->pid,
			    (int)m[i]->pid, done[i]);
	printf("\n");
}

/*
 * The verdict of one process between the first batch's sample k and the
 * last one n: prints its line and returns true if it grew past the
 * tolerance (see the head comment).
 */
static bool
verdict(const char *name, const struct pmem *k, const struct pmem *n,
    size_t jobs_between)
{
	long grow_kb, tol_kb;

	if (k->pid == 0 || n->pid == 0) {
		printf("  %-17s absent in a sample: not compared\n", name);
		return false;
	}
	if (k->pid != n->pid) {
		printf("  %-17s recycled (pid %d -> %d) between the samples: not compared\n",
		    name, (int)k->pid, (int)n->pid);
		return false;
	}
	grow_kb = n->rss_kb - k->rss_kb;
	tol_kb = k->rss_kb * TOL_PERCENT / 100;
	if (tol_kb < (long)(TOL_BYTES >> 10))
		tol_kb = (long)(TOL_BYTES >> 10);
	printf("  %-17s %+6.2f MiB (%+6.1f KiB per 1,000 jobs), tolerance %.1f MiB: %s\n",
	    name, mib(grow_kb), (double)grow_kb * 1000.0 / (double)jobs_between,
	    mib(tol_kb), grow_kb > tol_kb ? "GROWS" : "ok");
	return grow_kb > tol_kb;
}

/* The rows of every process over the samples s[0..n). */
static void
print_table(const struct sample *s, int n, const size_t *done, int nslots)
{
	const struct pmem *m[SAMPLES_MAX];
	char name[32];

	printf("  %-17s %7s %6s", "VmRSS, MiB", "pid", "idle");
	for (int i = 1; i < n; i++)
		printf(" %6zu", done[i]);
	printf(" %6s\n", "VmHWM");
	for (int i = 0; i < n; i++)
		m[i] = &s[i].sandqd;
	print_row("sandqd", m, n, done);
	for (int w = 0; w < nslots; w++) {
		snprintf(name, sizeof(name), "worker %d", w);
		for (int i = 0; i < n; i++)
			m[i] = &s[i].worker[w];
		print_row(name, m, n, done);
		snprintf(name, sizeof(name), "worker %d spawner", w);
		for (int i = 0; i < n; i++)
			m[i] = &s[i].spawner[w];
		print_row(name, m, n, done);
	}
}

int
main(int argc, char **argv)
{
	size_t njobs = 10000, nk = 2000, done[SAMPLES_MAX];
	int nclients = 4, failures = 0, nslots = 0, nsamples;
	const char *url;
	pid_t sandqd;
	struct sample *s;
	redisContext *rc;
	long long q0, q1, q2, stream_bytes, xlen, r0, r1, a0, a1, nres, ndone, res1, done1;
	double t0 = now_ms(), t;
	bool grows = false;
	char key[128], pat[128], name[32];

	if (argc < 3) {
		fprintf(stderr, "usage: memory-bench URL SANDQD_PID [--jobs N] "
		    "[--checkpoint K] [--clients C]\n");
		return 2;
	}
	url = argv[1];
	sandqd = (pid_t)strtol(argv[2], NULL, 10);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--jobs") == 0)
			njobs = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--checkpoint") == 0)
			nk = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--clients") == 0)
			nclients = atoi(argv[i + 1]);
	}
	/* Batches of K: the same burst each time, so only jobs run differ. */
	if (sandqd <= 0 || nk == 0 || njobs <= nk || njobs % nk != 0 ||
	    njobs / nk + 1 > SAMPLES_MAX || nclients <= 0) {
		fprintf(stderr, "memory-bench: N must be a multiple of K, at most %d "
		    "batches\n", SAMPLES_MAX - 1);
		return 2;
	}
	nsamples = (int)(njobs / nk) + 1;
	s = calloc((size_t)nsamples, sizeof(*s));
	if (s == NULL || (rc = redis_open(url)) == NULL)
		return 1;

	/* Idle: start-up done, the first sandboxes prepared. */
	if (run_jobs(url, SERVED_TENANT, WARMUP_JOBS, 1, true) != 0) {
		fprintf(stderr, "memory-bench: warm-up jobs failed\n");
		return 1;
	}
	usleep(SETTLE_MS * 1000);
	if (sample_take(sandqd, 1, &s[0]) < 0) {
		fprintf(stderr, "memory-bench: sandqd (pid %d) is gone\n", (int)sandqd);
		return 1;
	}
	done[0] = 0;

	/* Redis: N jobs queued where no host reads them. */
	snprintf(key, sizeof(key), "sandq:{%s}:jobs", IDLE_TENANT);
	redis_int(rc, "DEL %s", key);
	q0 = redis_used(rc);
	failures += run_jobs(url, IDLE_TENANT, njobs, nclients, false);
	q1 = redis_used(rc);
	xlen = redis_int(rc, "XLEN %s", key);
	stream_bytes = redis_int(rc, "MEMORY USAGE %s SAMPLES 0", key);
	redis_int(rc, "DEL %s", key);
	q2 = redis_used(rc);

	/* The jobs run, K at a time, a sample after each batch. */
	r0 = redis_used(rc);
	snprintf(key, sizeof(key), "sandq:{%s}:audit", SERVED_TENANT);
	a0 = redis_int(rc, "MEMORY USAGE %s SAMPLES 0", key);
	t = now_ms();
	for (int i = 1; i < nsamples; i++) {
		failures += run_jobs(url, SERVED_TENANT, nk, nclients, true);
		usleep(SETTLE_MS * 1000);
		if (sample_take(sandqd, s[0].nslots, &s[i]) < 0) {
			fprintf(stderr, "memory-bench: sandqd (pid %d) is gone\n", (int)sandqd);
			return 1;
		}
		done[i] = (size_t)i * nk;
	}
	t = now_ms() - t;
	r1 = redis_used(rc);
	a1 = redis_int(rc, "MEMORY USAGE %s SAMPLES 0", key);
	for (int i = 0; i < nsamples; i++)
		if (s[i].nslots > nslots)
			nslots = s[i].nslots;

	printf("memory: %zu /bin/true jobs from %d clients, %zu at a time, "
	    "in %.1f s (%.0f jobs/s)\n", njobs, nclients, nk, t / 1e3,
	    (double)njobs / (t / 1e3));
	print_table(s, nsamples, done, nslots);

	snprintf(key, sizeof(key), "sandq:{%s}:jobs", SERVED_TENANT);
	snprintf(pat, sizeof(pat), "sandq:{%s}:res:*", SERVED_TENANT);
	nres = redis_count(rc, pat, &res1);
	snprintf(pat, sizeof(pat), "sandq:{%s}:done:*", SERVED_TENANT);
	ndone = redis_count(rc, pat, &done1);
	printf("\nredis: %lld jobs queued (no host serving them): used_memory %+.2f MiB, "
	    "%.1f KiB per 1,000 (the stream: %.1f KiB per 1,000); after DEL %+.1f KiB\n",
	    xlen, (double)(q1 - q0) / 1048576.0,
	    (double)(q1 - q0) / 1024.0 * 1000.0 / (double)njobs,
	    (double)stream_bytes / 1024.0 * 1000.0 / (double)njobs,
	    (double)(q2 - q0) / 1024.0);
	printf("redis: after the %zu jobs ran: used_memory %+.2f MiB, %.1f KiB per 1,000 "
	    "jobs, of which:\n", njobs, (double)(r1 - r0) / 1048576.0,
	    (double)(r1 - r0) / 1024.0 * 1000.0 / (double)njobs);
	printf("  %lld res:ID of %lld bytes (kept result_ttl_s): %.1f KiB per 1,000\n",
	    nres, res1, (double)(nres * res1) / 1024.0 * 1000.0 / (double)njobs);
	printf("  %lld done:ID of %lld bytes (result read from res:ID first, list not "
	    "popped; result_ttl_s): %.1f KiB per 1,000\n", ndone, done1,
	    (double)(ndone * done1) / 1024.0 * 1000.0 / (double)njobs);
	printf("  the audit stream %+.2f MiB (capped at audit_stream_max events): "
	    "%.1f KiB per 1,000\n", (double)(a1 - a0) / 1048576.0,
	    (double)(a1 - a0) / 1024.0 * 1000.0 / (double)njobs);
	printf("  the jobs stream: length %lld, %lld bytes (entries deleted once answered)\n",
	    redis_int(rc, "XLEN %s", key), redis_int(rc, "MEMORY USAGE %s SAMPLES 0", key));

	printf("\nverdict: VmRSS after %zu jobs against after %zu (tolerance max(%d%%, %u MiB))\n",
	    njobs, nk, TOL_PERCENT, TOL_BYTES >> 20);
	grows |= verdict("sandqd", &s[1].sandqd, &s[nsamples - 1].sandqd, njobs - nk);
	for (int i = 0; i < nslots; i++) {
		snprintf(name, sizeof(name), "worker %d", i);
		grows |= verdict(name, &s[1].worker[i], &s[nsamples - 1].worker[i], njobs - nk);
		snprintf(name, sizeof(name), "worker %d spawner", i);
		grows |= verdict(name, &s[1].spawner[i], &s[nsamples - 1].spawner[i],
		    njobs - nk);
	}
	printf("memory: %s (%.0f s)\n", grows ? "GROWS" : "no growth with jobs run",
	    (now_ms() - t0) / 1e3);
	if (failures)
		printf("\n%d job(s) failed\n", failures);
	redisFree(rc);
	free(s);
	return grows || failures ? 1 : 0;
}
