/*
 * limits.c - the rlimits a job runs under.
 *
 * Always applied, whatever cgroups the machine has: they are per process and
 * inherited, so they bound each process of the job tree.
 *
 *   RLIMIT_CPU     cpu_ms rounded up to whole seconds; the hard limit one
 *                  second later, so SIGXCPU comes first and names the cause
 *                  (the job's cgroup bounds the CPU time of all its
 *                  processes together; this bounds each one)
 *   RLIMIT_AS      without a memory cgroup: memory_bytes of address space
 *                  per process. With one: unlimited, because the cgroup
 *                  bounds real memory for the whole tree and reports the OOM
 *                  kill, while an address-space cap would fail allocations
 *                  first (runtimes reserve far more address space than they
 *                  touch) and hide which limit was hit
 *   RLIMIT_NPROC   pids, plus one for the sandbox's init (counted per user
 *                  namespace, and each job has its own); with a pids cgroup
 *                  one more, so the cgroup refuses first and counts it
 *   RLIMIT_FSIZE   disk_bytes: no single file can outgrow the tmpfs cap
 *   RLIMIT_NOFILE  LIMITS_NOFILE descriptors
 *   RLIMIT_CORE    0: no core dumps
 *   RLIMIT_STACK   LIMITS_STACK (the default 8 MiB, bounded by memory)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define LIMITS_NOFILE 1024
#define LIMITS_STACK (8ull << 20)

static rlim_t
lim(uint64_t v)
{
	return v >= (uint64_t)RLIM_INFINITY ? RLIM_INFINITY : (rlim_t)v;
}

size_t
limits_to_rlimits(const struct job_limits *l, bool cgroup,
    struct limits_rlimit out[LIMITS_NRLIMITS])
{
	uint64_t as = cgroup ? (uint64_t)RLIM_INFINITY : l->memory_bytes;
	uint64_t nproc = l->pids + (cgroup ? 2 : 1);
	uint64_t cpu_s = (l->cpu_ms + 999) / 1000;
	uint64_t stack = LIMITS_STACK < l->memory_bytes ? LIMITS_STACK : l->memory_bytes;
	size_t n = 0;

	if (cpu_s == 0)
		cpu_s = 1;
	out[n++] = (struct limits_rlimit){ RLIMIT_CPU, { lim(cpu_s), lim(cpu_s + 1) } };
	out[n++] = (struct limits_rlimit){ RLIMIT_AS, { lim(as), lim(as) } };
	out[n++] = (struct limits_rlimit){ RLIMIT_NPROC, { lim(nproc), lim(nproc) } };
	out[n++] = (struct limits_rlimit){ RLIMIT_FSIZE,
	    { lim(l->disk_bytes), lim(l->disk_bytes) } };
	out[n++] = (struct limits_rlimit){ RLIMIT_NOFILE, { LIMITS_NOFILE, LIMITS_NOFILE } };
	out[n++] = (struct limits_rlimit){ RLIMIT_CORE, { 0, 0 } };
	out[n++] = (struct limits_rlimit){ RLIMIT_STACK, { lim(stack), lim(stack) } };
	return n;
}

int
limits_apply(const struct job_limits *l, bool cgroup, struct err *e)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	size_t n = limits_to_rlimits(l, cgroup, rl);

	for (size_t i = 0; i < n; i++) {
		if (setrlimit(rl[i].resource, &rl[i].rl) < 0)
			return err_set(e, -errno, "setrlimit %d: %s", rl[i].resource,
			    strerror(errno));
	}
	return 0;
}
