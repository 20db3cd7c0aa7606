/*
 * reuse_test.c - what a worker keeps across its jobs to make them cheaper
 * (issue 19) carries nothing of one job to a later one.
 *
 * Real jobs through a real sandqd with ONE worker, so every job is the
 * same worker's and, on cgroup v1, a job's cgroup is the one the job two
 * before it had (cgslot_test.c proves its limits and counters are reset).
 * Here: the memory a job leaves charged to that cgroup. A case that needs
 * cgroup v1 says so and skips without it.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../sandbox/cgroup.h"
#include "harness.h"

#define WAIT_MS 120000
#define CG_V1_MEMORY "/sys/fs/cgroup/memory"

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

TestSuite(reuse, .init = setup, .fini = teardown, .timeout = 240);

/* The memory cgroup line a job prints first. */
#define PRINT_CG "grep -m1 ':memory:' /proc/self/cgroup | sed 's/^[0-9]*:memory:/cg /'; "

/* Runs an sh job with default limits; the result is the caller's. */
static struct sandq_result *
run(struct sandq *c, const char *script)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert_eq(sandq_submit_sh(c, script, &o, id), 0, "submit: %s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "wait: %s", sandq_last_error(c));
	cr_assert_str_eq(r->status, "ok", "%s: %s (%s)", script, r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	return r;
}

/* The job's memory cgroup folder (relative to the v1 hierarchy), a heap string. */
static char *
cg_of(const struct sandq_result *r)
{
	const char *p = strstr((const char *)r->stdout_data, "cg ");

	cr_assert(p != NULL, "no cgroup line: %s", (const char *)r->stdout_data);
	p += 3;
	return strndup(p, strcspn(p, "\n"));
}

/* A cgroup's memory.usage_in_bytes. */
static uint64_t
cg_usage(const char *cg)
{
	char path[CG_PATH_MAX + 64];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s%s/memory.usage_in_bytes", CG_V1_MEMORY, cg);
	f = fopen(path, "re");
	cr_assert(f != NULL, "open %s", path);
	cr_assert_eq(fscanf(f, "%llu", &v), 1, "read %s", path);
	fclose(f);
	return v;
}

/* Whether cgroup arg's charge is down to the residue a slot may keep. */
static bool
cg_residue_only(void *arg)
{
	return cg_usage(arg) <= CG_SLOT_RESIDUE_MAX;
}

/*
 * A job leaves about 10 MiB of kernel memory charged to its cgroup: the
 * negative dentries of 60,000 lookups of names the host's /usr lacks
 * (the dentry cache is charged to the cgroup that fills it, and outlives
 * the job). Once the next job (in the other slot) has run, the first
 * job's slot has been emptied for the job after it: what is charged
 * there is at most the bounded residue (CG_SLOT_RESIDUE_MAX) that
 * sandbox/cgroup.c lets stay, once what the reclaim freed has left the
 * count (dentries are freed after an RCU grace period). Left charged,
 * negative dentries stay until memory runs short: the count would not
 * fall.
 */
Test(reuse, a_jobs_charged_memory_is_not_left_in_its_slot)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *a, *f;
	char *ca, *cf;
	char mark[64], script[512];
	uint64_t left;

	if (access(CG_V1_MEMORY "/memory.limit_in_bytes", F_OK) != 0)
		cr_skip_test("no cgroup v1 memory hierarchy: slots are a v1 measure");
	harness_marker(mark, sizeof(mark), "nx");
	snprintf(script, sizeof(script), PRINT_CG "i=0; while [ $i -lt 60000 ]; do "
	    "[ -e /usr/%s$i ] && exit 9; i=$((i + 1)); done; echo looked", mark);
	a = run(c, script);
	cr_assert(strstr((const char *)a->stdout_data, "looked") != NULL);
	f = run(c, PRINT_CG "true");
	ca = cg_of(a);
	cf = cg_of(f);
	cr_assert(strstr(ca, "/s0") != NULL || strstr(ca, "/s1") != NULL,
	    "not a kept slot: %s", ca);
	cr_assert_str_neq(ca, cf, "two jobs in a row in one cgroup");
	harness_wait_for(cg_residue_only, ca, 20000);
	left = cg_usage(ca);
	cr_expect(left <= CG_SLOT_RESIDUE_MAX, "%" PRIu64 " bytes left charged in %s "
	    "(at most %" PRIu64 ")", left, ca, (uint64_t)CG_SLOT_RESIDUE_MAX);
	free(ca);
	free(cf);
	sandq_result_free(a);
	sandq_result_free(f);
	sandq_close(c);
}

/*
 * What a job sees of its tree: the mount table without ids and device
 * numbers (which differ per sandbox), and the names, types, modes and
 * owners under /dev and at the top of /.
 */
#define TREE_VIEW "cut -d' ' -f4- /proc/self/mountinfo; " \
	"stat -c '%n %F %a %u %g' / /* /dev/* /dev/pts/* /etc/*"

/*
 * Every sandbox's /etc, host folders and /dev come from one template the
 * worker built (sandbox/mount.c, TEMPLATE). A job that tries to change
 * each of them (create, remove, chmod, mount, remount, unmount) is
 * refused read-only where a write is tried, and the next job of the same
 * worker sees exactly the tree the job before it saw.
 */
Test(reuse, a_jobs_changes_to_the_template_reach_no_later_job)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *before, *hostile, *after;
	const char *out;

	before = run(c, TREE_VIEW);
	hostile = run(c, "for p in /dev/made /etc/made /usr/made; do touch $p; done; "
	    "mkdir /dev/dir; ln -s / /dev/link; rm -f /dev/null /dev/zero; "
	    "chmod 777 /dev /dev/shm /etc; echo x > /etc/hosts; "
	    "mount -o remount,rw /dev; mount -o remount,rw /; mount -t tmpfs t /dev; "
	    "umount /dev/null; umount -l /dev; umount -l /usr; umount -l /etc; "
	    "rm -rf /dev/pts /dev/shm; true");
	out = hostile->stderr_data != NULL ? (const char *)hostile->stderr_data : "";
	cr_expect(strstr(out, "touch: cannot touch '/dev/made': Read-only file system") != NULL,
	    "/dev is not read-only: %s", out);
	cr_expect(strstr(out, "touch: cannot touch '/etc/made': Read-only file system") != NULL,
	    "/etc is not read-only: %s", out);
	cr_expect(strstr(out, "touch: cannot touch '/usr/made': Read-only file system") != NULL,
	    "/usr is not read-only: %s", out);
	after = run(c, TREE_VIEW);
	cr_assert(before->stdout_len > 100, "no view: %s", (const char *)before->stderr_data);
	cr_expect(strstr((const char *)before->stdout_data, "/dev/null character special") != NULL,
	    "%s", (const char *)before->stdout_data);
	cr_expect(before->stdout_len == after->stdout_len &&
	    memcmp(before->stdout_data, after->stdout_data, before->stdout_len) == 0,
	    "the tree changed:\n--- before\n%s\n--- after\n%s",
	    (const char *)before->stdout_data, (const char *)after->stdout_data);
	sandq_result_free(before);
	sandq_result_free(hostile);
	sandq_result_free(after);
	sandq_close(c);
}

/* Prints the job's IPC namespace ("ns ipc:[N]") first. */
#define PRINT_IPC "echo ns $(readlink /proc/self/ns/ipc); "

/*
 * Shows what of IPC the job sees: the System V objects (one header line
 * per /proc/sysvipc file when there are none), and whether the POSIX
 * message queue named mq opens.
 */
#define IPC_VIEW(mq) "cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg | " \
	"wc -l | sed 's/^/sysv lines /'; python3 -c \"import ctypes; " \
	"l = ctypes.CDLL('libc.so.6', use_errno=True); " \
	"fd = l.mq_open(b'/" mq "', 0, 0, None); " \
	"print('mq', 'absent' if fd < 0 and ctypes.get_errno() == 2 else 'present')\""

/* The "ns ..." line of a result, a heap string. */
static char *
ns_of(const struct sandq_result *r)
{
	const char *p = strstr((const char *)r->stdout_data, "ns ");

	cr_assert(p != NULL, "no namespace line: %s", (const char *)r->stdout_data);
	return strndup(p, strcspn(p, "\n"));
}

/*
 * A worker's jobs take turns in one IPC namespace (sandbox/ipcns.c): a
 * job that leaves nothing in it hands it to the next.
 */
Test(reuse, an_ipc_namespace_left_empty_is_the_next_jobs)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *a = run(c, PRINT_IPC "true"), *b = run(c, PRINT_IPC "true");
	char *na = ns_of(a), *nb = ns_of(b);

	cr_expect_str_eq(na, nb, "two jobs of one worker in different IPC namespaces");
	free(na);
	free(nb);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*
 * A job leaves one IPC object of each kind (a System V shared memory
 * segment, a semaphore set, a message queue; a POSIX message queue); the
 * next job of the worker sees none of it, in a namespace of its own.
 */
Test(reuse, ipc_objects_a_job_leaves_reach_no_later_job)
{
	static const char *const leave[] = {
		"ipcmk -M 4096", "ipcmk -S 2", "ipcmk -Q",
		"python3 -c \"import ctypes; l = ctypes.CDLL('libc.so.6', use_errno=True); "
		"assert l.mq_open(b'/sandq-reuse', 0o102, 0o600, None) >= 0\"",
	};
	struct sandq *c = harness_client(&H);
	char script[1024];

	for (size_t i = 0; i < sizeof(leave) / sizeof(leave[0]); i++) {
		struct sandq_result *a, *b;
		char *na, *nb;

		snprintf(script, sizeof(script), PRINT_IPC "%s >/dev/null && " IPC_VIEW("sandq-reuse"),
		    leave[i]);
		a = run(c, script);
		cr_assert(strstr((const char *)a->stdout_data, i < 3 ? "sysv lines 4" :
		    "mq present") != NULL, "%s left nothing: %s", leave[i],
		    (const char *)a->stdout_data);
		b = run(c, PRINT_IPC IPC_VIEW("sandq-reuse"));
		cr_expect(strstr((const char *)b->stdout_data, "sysv lines 3\nmq absent") != NULL,
		    "after %s the next job sees: %s", leave[i], (const char *)b->stdout_data);
		na = ns_of(a);
		nb = ns_of(b);
		cr_expect_str_neq(na, nb, "after %s the next job got the same namespace", leave[i]);
		free(na);
		free(nb);
		sandq_result_free(a);
		sandq_result_free(b);
	}
	sandq_close(c);
}

/*
 * The sandbox after a persistent run's is made while that run's job
 * still holds its IPC namespace (worker/job.c): it takes the worker's
 * other one, never the running job's; the job after it takes the first
 * again, which the persistent job left empty.
 */
Test(reuse, a_sandbox_made_during_a_persistent_run_takes_the_other_ipc_namespace)
{
	struct sandq *c = harness_client(&H);
	struct sandq_op_args args = { 0 };
	struct sandq_result *r[3];
	char sbx[64], *ns[3];

	snprintf(sbx, sizeof(sbx), "reuse-%d", (int)getpid());
	args.sandbox = sbx;
	cr_assert_eq(sandq_call(c, "sandbox.create", &args, NULL, WAIT_MS, &r[0]), 0,
	    "create: %s", sandq_last_error(c));
	cr_assert_str_eq(r[0]->status, "ok", "create: %s", r[0]->status);
	sandq_result_free(r[0]);
	for (int i = 0; i < 3; i++) {
		struct sandq_job_opts o = { .sandbox = sbx };
		char id[SANDQ_ID_MAX + 1];

		cr_assert_eq(sandq_submit_sh(c, PRINT_IPC "sleep 0.2", &o, id), 0, "submit: %s",
		    sandq_last_error(c));
		cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r[i]), 0, "wait: %s",
		    sandq_last_error(c));
		cr_assert_str_eq(r[i]->status, "ok", "job %d: %s", i, r[i]->status);
		ns[i] = ns_of(r[i]);
	}
	cr_expect_str_neq(ns[0], ns[1], "the sandbox made during a persistent run shared "
	    "its IPC namespace");
	cr_expect_str_eq(ns[0], ns[2], "the third job did not take the first one's IPC "
	    "namespace (%s, %s, %s)", ns[0], ns[1], ns[2]);
	for (int i = 0; i < 3; i++) {
		free(ns[i]);
		sandq_result_free(r[i]);
	}
	sandq_close(c);
}
