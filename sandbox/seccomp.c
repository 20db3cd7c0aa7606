/*
 * seccomp.c - the worker's filter and the job's filter.
 *
 * Filters stack: a job runs under the worker's filter (inherited through
 * init) and its own, and the stricter answer wins. So the worker's filter
 * refuses what neither a worker nor any job may do (other socket families,
 * ptrace, kernel modules, kexec, bpf, ...), and the job's filter adds what only
 * the sandbox's init may still do (mount, pivot_root, new namespaces, ...).
 *
 * Refused calls return EPERM (ENOSYS for clone3, so libc falls back to
 * clone(), whose flags a filter can inspect), so a job sees an ordinary error
 * and keeps running. A syscall from a foreign architecture (i386 or x32 entry
 * points on x86_64) kills the process: libseccomp checks the architecture
 * before any rule, and x32 numbers fail that check.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/xmalloc.h"
#include "internal.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Refused for workers and jobs alike. */
static const char *const worker_denied[] = {
	"ptrace", "process_vm_readv", "process_vm_writev",
	"init_module", "finit_module", "delete_module",
	"kexec_load", "kexec_file_load", "bpf", "perf_event_open",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key", "open_by_handle_at",
	"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"iopl", "ioperm", "uselib", "lookup_dcookie", "kcmp",
};

/* Refused for jobs only: the sandbox's init needs these to build it. */
static const char *const job_denied[] = {
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"name_to_handle_at", "sethostname", "setdomainname",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "quotactl_fd",
};

static int
deny_names(scmp_filter_ctx ctx, const char *const *names, size_t n, struct err *e)
{
	for (size_t i = 0; i < n; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]);
		int rc;

		if (nr == __NR_SCMP_ERROR)
			continue;	/* not on this architecture */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (rc < 0)
			return err_set(e, rc, "seccomp rule %s: %s", names[i], strerror(-rc));
	}
	return 0;
}

static scmp_filter_ctx
filter_new(struct err *e)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);

	if (ctx == NULL) {
		err_set(e, -ENOMEM, "seccomp_init failed");
		return NULL;
	}
	if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0) {
		seccomp_release(ctx);
		err_set(e, -EINVAL, "seccomp: cannot set the bad-architecture action");
		return NULL;
	}
	return ctx;
}

static int
filter_load(scmp_filter_ctx ctx, struct err *e)
{
	int rc = seccomp_load(ctx);

	seccomp_release(ctx);
	if (rc < 0)
		return err_set(e, rc, "seccomp_load: %s", strerror(-rc));
	return 0;
}

int
seccomp_worker_install(struct err *e)
{
	scmp_filter_ctx ctx;
	int rc;

	if ((ctx = filter_new(e)) == NULL)
		return e->code;
	if ((rc = deny_names(ctx, worker_denied,
	    sizeof(worker_denied) / sizeof(worker_denied[0]), e)) < 0)
		goto out_release;
	/* Sockets: AF_UNIX only (the channel to the dispatcher is one). */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
	    SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 1,
	    SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0) {
		err_set(e, rc, "seccomp socket rule: %s", strerror(-rc));
		goto out_release;
	}
	return filter_load(ctx, e);
out_release:
	seccomp_release(ctx);
	return rc;
}

/* The job filter as BPF, compiled once per worker by seccomp_job_compile(). */
static struct sock_fprog job_prog;

/* Builds the job filter's rules into a new context. */
static scmp_filter_ctx
job_filter(struct err *e)
{
	static const unsigned long ns_flags[] = {
		CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
		CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWTIME,
	};
	scmp_filter_ctx ctx;
	int rc;

	if ((ctx = filter_new(e)) == NULL)
		return NULL;
	if ((rc = deny_names(ctx, job_denied,
	    sizeof(job_denied) / sizeof(job_denied[0]), e)) < 0)
		goto out_release;
	/* clone() with any namespace flag; clone3's flags live in memory. */
	for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (rc < 0)
			goto out_rule;
	}
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
		goto out_rule;
	/* Terminal injection into a shared tty. */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX))) < 0)
		goto out_rule;
	/*
	 * personality(): only PER_LINUX. libseccomp cannot compare one argument
	 * twice in a rule, so the query form (0xffffffff) is refused as well;
	 * programs treat a failed query as "default domain".
	 */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
	    SCMP_A0(SCMP_CMP_NE, PER_LINUX))) < 0)
		goto out_rule;
	return ctx;
out_rule:
	err_set(e, rc, "seccomp job rule: %s", strerror(-rc));
out_release:
	seccomp_release(ctx);
	return NULL;
}

int
seccomp_job_compile(struct err *e)
{
	scmp_filter_ctx ctx;
	struct stat st;
	int fd, rc;

	if (job_prog.filter != NULL)
		return 0;
	if ((ctx = job_filter(e)) == NULL)
		return e->code;
	/*
	 * libseccomp 2.5 exports BPF only to a descriptor: through a memfd
	 * into memory, once, so each job's process loads it with one call.
	 */
	fd = memfd_create("seccomp-job", MFD_CLOEXEC);
	if (fd < 0) {
		rc = err_set(e, -errno, "memfd: %s", strerror(errno));
		goto out_release;
	}
	if ((rc = seccomp_export_bpf(ctx, fd)) < 0) {
		err_set(e, rc, "seccomp_export_bpf: %s", strerror(-rc));
		goto out_close;
	}
	if (fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
	    st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
		rc = err_set(e, -EINVAL, "seccomp: exported filter has a bad size");
		goto out_close;
	}
	job_prog.filter = xmalloc((size_t)st.st_size);
	job_prog.len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	if (pread(fd, job_prog.filter, (size_t)st.st_size, 0) != st.st_size) {
		rc = err_set(e, -EIO, "seccomp: cannot read the exported filter");
		free(job_prog.filter);
		job_prog.filter = NULL;
		goto out_close;
	}
	rc = 0;
out_close:
	close(fd);
out_release:
	seccomp_release(ctx);
	return rc;
}

int
seccomp_job_install(struct err *e)
{
	scmp_filter_ctx ctx;

	if (job_prog.filter != NULL) {
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &job_prog) < 0)
			return err_set(e, -errno, "seccomp: %s", strerror(errno));
		return 0;
	}
	if ((ctx = job_filter(e)) == NULL)
		return e->code;
	return filter_load(ctx, e);
}
