/*
 * jobstart_test.c - what a job's process starts with, where sandq stopped
 * doing a step per job because the processes before it already did it
 * once (issue 19, throughput): signal dispositions and mask.
 *
 * Real jobs through a real sandqd with one worker, so every job comes from
 * the same spawner and the same kind of init; each job reads its own
 * /proc/self/status. Needs root, like every test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 120000

static struct harness H;

/*
 * sandqd started with signals ignored, as a host may start it: an ignored
 * disposition survives exec, so without the spawner's reset a job would
 * find them ignored. SIGUSR1, and 32 and 33, which glibc's sigaction()
 * refuses to set (hence the system call).
 */
static void
setup(void)
{
	struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; }
	    ign = { SIG_IGN, 0, NULL, 0 };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	signal(SIGUSR1, SIG_IGN);
	cr_assert_eq(syscall(SYS_rt_sigaction, 32, &ign, NULL, sizeof(ign.mask)), 0);
	cr_assert_eq(syscall(SYS_rt_sigaction, 33, &ign, NULL, sizeof(ign.mask)), 0);
	harness_start(&H, 1, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(jobstart, .init = setup, .fini = teardown, .timeout = 240);

/* Runs an sh job with default limits and returns its stdout (heap). */
static char *
run_out(struct sandq *c, const char *script)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1], *out;

	cr_assert_eq(sandq_submit_sh(c, script, &o, id), 0, "submit: %s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "wait: %s", sandq_last_error(c));
	cr_assert_str_eq(r->status, "ok", "%s: %s (%s)", script, r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	out = strndup(r->stdout_data ? (const char *)r->stdout_data : "", r->stdout_len);
	sandq_result_free(r);
	return out;
}

/*
 * The job's process ignores no signal and blocks none, though sandqd was
 * started with three ignored (setup()): what its program
 * reads in /proc/self/status (cat, exec'd by the shell that is the job's
 * process, so its SigIgn and SigBlk are what the job was given; handlers
 * do not survive an exec). SIGCHLD, which the spawner ignores, is the one
 * most at risk.
 * Several jobs, so a sandbox made while another ran is read too.
 */
Test(jobstart, a_jobs_process_ignores_blocks_and_handles_no_signal)
{
	struct sandq *c = harness_client(&H);

	for (int i = 0; i < 4; i++) {
		char *out = run_out(c, "exec cat /proc/self/status");

		cr_expect(strstr(out, "SigIgn:\t0000000000000000\n") != NULL, "job %d: %s", i, out);
		cr_expect(strstr(out, "SigBlk:\t0000000000000000\n") != NULL, "job %d: %s", i, out);
		free(out);
	}
	sandq_close(c);
}

/*
 * /dev's nodes are the template's (sandbox/mount.c): each works as its
 * device, and /dev takes no new file. On a tmpfs mounted nodev, or by a
 * user namespace, opening them would fail.
 */
Test(jobstart, dev_nodes_work_as_their_devices_and_dev_stays_read_only)
{
	struct sandq *c = harness_client(&H);
	char *out = run_out(c,
	    "echo x > /dev/null && [ ! -s /dev/null ] && echo null-ok; "
	    "[ \"$(head -c 4 /dev/zero | od -An -tx1 | tr -d ' \\n')\" = 00000000 ] && echo zero-ok; "
	    "(echo x > /dev/full) 2>/dev/null || echo full-ok; "
	    "[ \"$(head -c 8 /dev/urandom | wc -c)\" = 8 ] && echo urandom-ok; "
	    "[ \"$(head -c 8 /dev/random | wc -c)\" = 8 ] && echo random-ok; "
	    "(: > /dev/newfile) 2>/dev/null || echo dev-ro-ok");

	cr_expect_str_eq(out, "null-ok\nzero-ok\nfull-ok\nurandom-ok\nrandom-ok\ndev-ro-ok\n");
	free(out);
	sandq_close(c);
}
