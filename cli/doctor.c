/*
 * doctor.c - sandq doctor: which isolation mechanisms this machine gives,
 * and so which job limits sandqd can enforce here and how.
 *
 * Every answer comes from trying or reading the real thing: namespaces are
 * unshared in a throw-away child, seccomp's actions come from
 * /proc/sys/kernel/seccomp/actions_avail, cgroups from the same detection
 * sandqd uses (sandbox/cgroup.c), Landlock from its ABI query. Exit status:
 * 0 when sandqd can run jobs here, 1 when a required mechanism is missing.
 */
#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../sandbox/cgroup.h"
#include "cli_esc.h"
#include "cli_man.h"
#include "doctor.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)

struct facts {
	struct utsname uts;
	bool root;
	int userns;		/* 0, or the errno of unshare(CLONE_NEWUSER) */
	int netns;		/* 0, or the errno of unshare(CLONE_NEWUSER|CLONE_NEWNET) */
	bool seccomp;		/* filters with errno and kill_process */
	bool notify;		/* user_notif: refused calls can be recorded */
	struct cg_sys cg;
	int landlock;		/* ABI version, or -errno */
};

/* errno of unshare(flags) in a child, or 0 when it worked. */
static int
try_unshare(int flags)
{
	int p[2], err = EIO, st;
	pid_t pid;

	if (pipe(p) < 0)
		return errno;
	if ((pid = fork()) < 0) {
		err = errno;
		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid == 0) {
		int e = unshare(flags) == 0 ? 0 : errno;

		(void)!write(p[1], &e, sizeof(e));
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], &err, sizeof(err)) != (ssize_t)sizeof(err))
		err = EIO;
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return err;
}

static void
seccomp_facts(struct facts *f)
{
	FILE *fp = fopen("/proc/sys/kernel/seccomp/actions_avail", "re");
	char line[512] = "";

	if (fp == NULL)
		return;
	if (fgets(line, sizeof(line), fp) == NULL)
		line[0] = '\0';
	fclose(fp);
	f->seccomp = strstr(line, "errno") && strstr(line, "kill_process");
	f->notify = strstr(line, "user_notif") != NULL;
}

static void
gather(struct facts *f)
{
	long v;

	memset(f, 0, sizeof(*f));
	uname(&f->uts);
	f->root = geteuid() == 0;
	f->userns = try_unshare(CLONE_NEWUSER);
	f->netns = try_unshare(CLONE_NEWUSER | CLONE_NEWNET);
	seccomp_facts(f);
	cg_detect(&f->cg);
	v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	f->landlock = v >= 0 ? (int)v : -errno;
}

static bool
ready(const struct facts *f, const char **why)
{
	*why = !f->root ? "sandqd must run as root (it maps ids and makes cgroups)" :
	    f->userns ? "user namespaces are not available" :
	    f->netns ? "network namespaces are not available inside a user namespace" :
	    !f->seccomp ? "seccomp filters are not available" :
	    !f->notify ? "seccomp user notifications are not available (sandq needs "
	    "Linux 5.9 or later)" :
	    NULL;
	return *why == NULL;
}

/* The mechanism behind each job limit on this machine. */
static void
limits_text(const struct facts *f, const char *out[7][2])
{
	bool mem = cg_has(&f->cg, CG_MEMORY), pids = cg_has(&f->cg, CG_PIDS);
	bool cpu = cg_has(&f->cg, CG_CPUACCT);

	out[0][0] = "wall_ms";
	out[0][1] = "the worker's clock kills the whole pid namespace (timeout)";
	out[1][0] = "cpu_ms";
	out[1][1] = cpu ? "cgroup CPU time of all processes together (cpu_limit), "
	    "and RLIMIT_CPU per process" : "RLIMIT_CPU per process only (cpu_limit)";
	out[2][0] = "memory_bytes";
	out[2][1] = !mem ? "RLIMIT_AS per process only: allocations fail (status "
	    "exit); socket buffers are not bounded" :
	    !f->cg.sock_bounded ? "cgroup memory for the whole job, files in its "
	    "tmpfs included; the kernel's OOM kill (memory_limit); socket buffers "
	    "are NOT bounded (the kernel charges them to no cgroup)" :
	    f->cg.version == CG_V1 ? "cgroup memory for the whole job, files in its "
	    "tmpfs included; the kernel's OOM kill (memory_limit); TCP and UDP "
	    "buffers in memory.kmem.tcp, at most job_socket_bytes" :
	    "cgroup memory for the whole job, files in its tmpfs and socket buffers "
	    "included; the kernel's OOM kill (memory_limit)";
	out[3][0] = "pids";
	out[3][1] = pids ? "cgroup pids for the whole job (pids_limit), "
	    "and RLIMIT_NPROC" : "RLIMIT_NPROC only";
	out[4][0] = "output_bytes";
	out[4][1] = "the worker stops the job past it (output_limit)";
	out[5][0] = "disk_bytes";
	out[5][1] = "size of the /workspace, /tmp and /dev/shm tmpfs, and "
	    "RLIMIT_FSIZE (disk_limit)";
	out[6][0] = "files";
	out[6][1] = "inodes of each tmpfs (disk_limit)";
}

static const char *
yes_no(int err)
{
	static char buf[64];

	if (err == 0)
		return "yes";
	snprintf(buf, sizeof(buf), "no (%s)", strerror(err));
	return buf;
}

static void
print_text(const struct facts *f)
{
	const char *lim[7][2], *why;

	printf("sandq doctor: what this machine gives sandq\n\n");
	printf("  %-20s %s %s (%s)\n", "kernel", f->uts.sysname, f->uts.release,
	    f->uts.machine);
	printf("  %-20s %s\n", "running as root", f->root ? "yes" : "no");
	printf("  %-20s %s\n", "user namespaces", yes_no(f->userns));
	printf("  %-20s %s\n", "network namespaces", yes_no(f->netns));
	printf("  %-20s %s\n", "seccomp filters", f->seccomp ? "yes" : "no");
	printf("  %-20s %s\n", "seccomp notify", f->notify ?
	    "yes: refused calls are answered EPERM and recorded by name" : "no");
	if (f->cg.version == CG_NONE) {
		printf("  %-20s none usable: %s\n", "cgroups", f->cg.why);
	} else {
		printf("  %-20s v%d, socket buffers %s\n", "cgroups", (int)f->cg.version,
		    f->cg.sock_bounded ? "charged" : "NOT charged");
		for (int c = 0; c < CG__NCTRL; c++)
			printf("    %-18s %s\n", cg_ctrl_name(c),
			    f->cg.dir[c][0] ? f->cg.dir[c] : "absent");
	}
	if (f->landlock > 0)
		printf("  %-20s ABI %d (not used: each job's mount namespace already "
		    "holds only the image)\n", "landlock", f->landlock);
	else
		printf("  %-20s no (%s)\n", "landlock", strerror(-f->landlock));
	limits_text(f, lim);
	printf("\nlimits a job gets here\n\n");
	for (int i = 0; i < 7; i++)
		printf("  %-14s %s\n", lim[i][0], lim[i][1]);
	if (ready(f, &why))
		printf("\nready: sandqd can run jobs on this machine\n");
	else
		printf("\nnot ready: %s\n", why);
}

static int
print_json(const struct facts *f)
{
	const char *lim[7][2], *why;
	json_t *o = json_object(), *cg = json_object(), *ctl = json_object();
	json_t *limits = json_object();
	int rc = 0;

	json_object_set_new(o, "kernel", json_string(f->uts.release));
	json_object_set_new(o, "machine", json_string(f->uts.machine));
	json_object_set_new(o, "root", json_boolean(f->root));
	json_object_set_new(o, "user_namespaces", json_boolean(f->userns == 0));
	json_object_set_new(o, "network_namespaces", json_boolean(f->netns == 0));
	json_object_set_new(o, "seccomp", json_boolean(f->seccomp));
	json_object_set_new(o, "seccomp_notify", json_boolean(f->notify));
	json_object_set_new(cg, "version", json_integer(f->cg.version));
	for (int c = 0; c < CG__NCTRL; c++)
		if (f->cg.dir[c][0])
			json_object_set_new(ctl, cg_ctrl_name(c), json_string(f->cg.dir[c]));
	json_object_set_new(cg, "controllers", ctl);
	json_object_set_new(cg, "socket_buffers", json_boolean(f->cg.sock_bounded));
	if (f->cg.version == CG_NONE)
		json_object_set_new(cg, "why", json_string(f->cg.why));
	json_object_set_new(o, "cgroups", cg);
	json_object_set_new(o, "landlock_abi", json_integer(f->landlock > 0 ? f->landlock : 0));
	limits_text(f, lim);
	for (int i = 0; i < 7; i++)
		json_object_set_new(limits, lim[i][0], json_string(lim[i][1]));
	json_object_set_new(o, "limits", limits);
	json_object_set_new(o, "ready", json_boolean(ready(f, &why)));
	json_object_set_new(o, "why", why ? json_string(why) : json_null());
	if (json_dumpf(o, stdout, JSON_COMPACT) < 0 || fputc('\n', stdout) == EOF)
		rc = -1;
	json_decref(o);
	return rc;
}

int
doctor_main(int argc, char **argv)
{
	struct facts f;
	const char *why;
	bool json = false;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			cli_man_print("doctor");
			return 0;
		} else {
			cli_warn("doctor: unknown argument '%s'", argv[i]);
			fputs("Try 'sandq help doctor'.\n", stderr);
			return 2;
		}
	}
	gather(&f);
	if (json && print_json(&f) < 0)
		return 1;
	if (!json)
		print_text(&f);
	return ready(&f, &why) ? 0 : 1;
}

