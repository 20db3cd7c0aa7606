/*
 * shared_test.c - sandboxes shared by several hosts (snapshot_store =
 * redis, dispatcher/shared.c): two sandqd hosts on one Redis, each with
 * its own state folder (so its own local store).
 *
 * - A sandbox made and changed on host A is carried on by host B alone
 *   once A has stopped: B never saw it, so everything it has comes from
 *   Redis, and every version follows the last one.
 * - Jobs on a few sandboxes, submitted at once to both hosts: each
 *   sandbox's versions go 1, 2, ... with none skipped or repeated, and
 *   its file holds every job's line exactly once (a commit lost to the
 *   other host's runs again from the new head).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 120000

static struct harness H;
static pid_t host_b;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "host=host-a",
	    "--set", "snapshot_store=redis", "--set", "lease_ms=3000", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	if (host_b > 0) {
		kill(host_b, SIGTERM);
		waitpid(host_b, NULL, 0);
		host_b = 0;
	}
	harness_stop(&H);
}

TestSuite(shared, .init = setup, .fini = teardown, .timeout = 600);

/* Host B: the same Redis, its own state, name and uid range. */
static pid_t
start_host_b(void)
{
	static const char *const sets[] = { "snapshot_store=redis", "lease_ms=3000", NULL };
	pid_t pid = harness_start_host(&H, "b", 2, 200000, sets);

	cr_assert_geq(pid, 0);
	return pid;
}

static struct sandq_result *
on_sandbox(struct sandq *c, const char *sandbox, const char *script)
{
	struct sandq_job_opts o = { .sandbox = sandbox };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert_eq(sandq_submit_sh(c, script, &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	return r;
}

static void
create(struct sandq *c, const char *sandbox)
{
	struct sandq_op_args a = { .sandbox = sandbox };
	struct sandq_result *r = NULL;

	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok", "create %s: %s", sandbox,
	    r->error_message ? r->error_message : "");
	cr_assert_eq(r->version, 1);
	sandq_result_free(r);
}

Test(shared, a_sandbox_made_on_one_host_is_carried_on_by_another)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	char script[64];

	create(c, "carried");
	for (int i = 1; i <= 3; i++) {
		snprintf(script, sizeof(script), "echo a%d >> log", i);
		r = on_sandbox(c, "carried", script);
		cr_assert_str_eq(r->status, "ok");
		cr_expect_str_eq(r->host, "host-a");
		cr_expect_eq(r->version, (uint64_t)i + 1);
		sandq_result_free(r);
	}
	/* A stops (drained); B, which never saw the sandbox, goes on. */
	cr_assert_eq(harness_stop_sandqd(&H, 30000), 0);
	host_b = start_host_b();
	for (int i = 1; i <= 3; i++) {
		snprintf(script, sizeof(script), "echo b%d >> log; cat log", i);
		r = on_sandbox(c, "carried", script);
		cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
		cr_expect_str_eq(r->host, "host-b");
		cr_expect_eq(r->version, (uint64_t)i + 4, "version %llu after b%d",
		    (unsigned long long)r->version, i);
		if (i == 3)
			cr_expect_str_eq((char *)r->stdout_data, "a1\na2\na3\nb1\nb2\nb3\n");
		sandq_result_free(r);
	}
	/* The history is Redis's: B lists the versions A made too. */
	{
		char cmd[600], *out = NULL, needle[32];

		snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s --json sandbox history carried",
		    harness_build_dir(), H.url);
		cr_assert_eq(harness_run(cmd, &out), 0, "%s", out ? out : "");
		for (int v = 1; v <= 7; v++) {
			snprintf(needle, sizeof(needle), "\"version\":%d,", v);
			cr_expect_not_null(strstr(out, needle), "version %d missing from %s", v,
			    out);
		}
		free(out);
	}
	sandq_close(c);
}

#define NSBX 3
#define PER_SBX 12

Test(shared, concurrent_jobs_on_both_hosts_neither_skip_nor_repeat_a_version)
{
	struct sandq *c = harness_client(&H);
	char ids[NSBX][PER_SBX][SANDQ_ID_MAX + 1], name[32], script[96];
	bool seen[NSBX][PER_SBX + 2];
	size_t per_host[2] = { 0 };

	memset(seen, 0, sizeof(seen));
	host_b = start_host_b();
	for (int s = 0; s < NSBX; s++) {
		snprintf(name, sizeof(name), "shared-%d", s);
		create(c, name);
	}
	/* All at once: both hosts read them, and commit against each other. */
	for (int k = 0; k < PER_SBX; k++)
		for (int s = 0; s < NSBX; s++) {
			struct sandq_job_opts o = { .sandbox = NULL };

			snprintf(name, sizeof(name), "shared-%d", s);
			o.sandbox = name;
			snprintf(script, sizeof(script), "echo %d >> log", k);
			cr_assert_eq(sandq_submit_sh(c, script, &o, ids[s][k]), 0);
		}
	for (int s = 0; s < NSBX; s++)
		for (int k = 0; k < PER_SBX; k++) {
			struct sandq_result *r = NULL;

			cr_assert_eq(sandq_wait(c, ids[s][k], WAIT_MS, &r), 0, "%s",
			    sandq_last_error(c));
			cr_assert_str_eq(r->status, "ok", "%s",
			    r->error_message ? r->error_message : "");
			cr_assert(r->version >= 2 && r->version <= PER_SBX + 1,
			    "sandbox %d: version %llu", s, (unsigned long long)r->version);
			cr_expect(!seen[s][r->version], "sandbox %d: version %llu twice", s,
			    (unsigned long long)r->version);
			seen[s][r->version] = true;
			per_host[r->host && strcmp(r->host, "host-b") == 0]++;
			sandq_result_free(r);
		}
	cr_log_info("results by host: a %zu, b %zu", per_host[0], per_host[1]);
	/* Each sandbox's file: every job's line once (order: as committed). */
	for (int s = 0; s < NSBX; s++) {
		struct sandq_result *r;
		int count[PER_SBX] = { 0 }, lines = 0;
		char *p, *save = NULL;

		snprintf(name, sizeof(name), "shared-%d", s);
		r = on_sandbox(c, name, "cat log");
		cr_assert_str_eq(r->status, "ok");
		cr_expect_eq(r->version, PER_SBX + 2, "version %llu after the last run (each run commits: its tool call is recorded)", (unsigned long long)r->version);
		for (p = strtok_r((char *)r->stdout_data, "\n", &save); p != NULL;
		    p = strtok_r(NULL, "\n", &save)) {
			int k = atoi(p);

			cr_assert(k >= 0 && k < PER_SBX);
			count[k]++;
			lines++;
		}
		cr_expect_eq(lines, PER_SBX, "sandbox %d: %d lines", s, lines);
		for (int k = 0; k < PER_SBX; k++)
			cr_expect_eq(count[k], 1, "sandbox %d: job %d's line %d times", s, k,
			    count[k]);
		sandq_result_free(r);
	}
	sandq_close(c);
}
