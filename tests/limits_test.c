/*
 * limits_test.c - how resolved job limits become rlimits (sandbox/limits.c).
 */
#include <criterion/criterion.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../sandbox/internal.h"

/* The rlimit set for res; fails the test if the translation omits it. */
static struct rlimit
find(const struct limits_rlimit *rl, size_t n, int res)
{
	for (size_t i = 0; i < n; i++)
		if (rl[i].resource == res)
			return rl[i].rl;
	cr_assert_fail("resource %d missing", res);
	return (struct rlimit){ 0, 0 };
}

static struct job_limits
base(void)
{
	return (struct job_limits){ .wall_ms = 10000, .cpu_ms = 2500,
	    .memory_bytes = 256u << 20, .pids = 32, .output_bytes = 65536,
	    .disk_bytes = 16u << 20, .files = 64 };
}

Test(limits, cpu_rounds_up_to_seconds_with_a_later_hard_limit)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	struct job_limits l = base();
	size_t n = limits_to_rlimits(&l, false, rl);
	struct rlimit cpu = find(rl, n, RLIMIT_CPU);

	cr_expect_eq(cpu.rlim_cur, 3, "2500 ms rounds up to 3 s");
	cr_expect_eq(cpu.rlim_max, 4, "SIGKILL one second after SIGXCPU");
	l.cpu_ms = 1;
	n = limits_to_rlimits(&l, false, rl);
	cr_expect_eq(find(rl, n, RLIMIT_CPU).rlim_cur, 1);
}

Test(limits, memory_processes_and_file_size_map_one_to_one)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	struct job_limits l = base();
	size_t n = limits_to_rlimits(&l, false, rl);

	cr_expect_eq(find(rl, n, RLIMIT_AS).rlim_cur, 256u << 20);
	cr_expect_eq(find(rl, n, RLIMIT_AS).rlim_max, 256u << 20);
	cr_expect_eq(find(rl, n, RLIMIT_NPROC).rlim_cur, 33, "pids plus init");
	cr_expect_eq(find(rl, n, RLIMIT_FSIZE).rlim_cur, 16u << 20);
	cr_expect_eq(find(rl, n, RLIMIT_CORE).rlim_max, 0, "no core dumps");
	cr_expect_eq(find(rl, n, RLIMIT_NOFILE).rlim_cur, 1024);
}

Test(limits, with_a_cgroup_memory_and_processes_are_left_to_it)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	struct job_limits l = base();
	size_t n = limits_to_rlimits(&l, true, rl);

	cr_expect_eq(find(rl, n, RLIMIT_AS).rlim_cur, RLIM_INFINITY,
	    "the memory cgroup bounds memory and reports the OOM kill");
	cr_expect_eq(find(rl, n, RLIMIT_NPROC).rlim_cur, 34,
	    "one above the cgroup's pids.max, so the cgroup refuses first");
	cr_expect_eq(find(rl, n, RLIMIT_FSIZE).rlim_cur, 16u << 20, "unchanged");
	cr_expect_eq(find(rl, n, RLIMIT_CPU).rlim_cur, 3, "unchanged");
}

Test(limits, stack_never_exceeds_memory)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	struct job_limits l = base();
	size_t n;

	l.memory_bytes = 4u << 20;
	n = limits_to_rlimits(&l, false, rl);
	cr_expect_eq(find(rl, n, RLIMIT_STACK).rlim_cur, 4u << 20);
	l.memory_bytes = 1u << 30;
	n = limits_to_rlimits(&l, false, rl);
	cr_expect_eq(find(rl, n, RLIMIT_STACK).rlim_cur, 8u << 20);
}

Test(limits, every_rlimit_has_soft_at_most_hard)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	struct job_limits l = base();
	size_t n = limits_to_rlimits(&l, false, rl);

	cr_expect_eq(n, LIMITS_NRLIMITS);
	for (size_t i = 0; i < n; i++)
		cr_expect_leq(rl[i].rl.rlim_cur, rl[i].rl.rlim_max, "resource %d",
		    rl[i].resource);
}

Test(limits, apply_sets_the_calling_process_limits)
{
	pid_t pid;
	int st;

	/*
	 * In a child: the lowered address-space limit would starve the
	 * sanitizers' runtime in this process.
	 */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct job_limits l = base();
		struct err e = { 0 };
		struct rlimit r;

		if (limits_apply(&l, false, &e) < 0)
			_exit(1);
		if (getrlimit(RLIMIT_NPROC, &r) < 0 || r.rlim_cur != 33)
			_exit(2);
		if (getrlimit(RLIMIT_AS, &r) < 0 || r.rlim_cur != 256u << 20)
			_exit(3);
		if (getrlimit(RLIMIT_CPU, &r) < 0 || r.rlim_cur != 3 || r.rlim_max != 4)
			_exit(4);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "limits not applied (child status %d)", st);
}
