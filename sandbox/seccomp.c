/*
 * seccomp.c - the worker's filter and the job's filter.
 *
 * They never stack: the worker confines itself after forking the spawner
 * (spawn.c), and every sandbox descends from the spawner, not the worker.
 *
 * The worker's filter is an allowlist of what a worker does once it is set
 * up: file and socket I/O on descriptors it has, cgroup folders, memory,
 * signals to its sandboxes, and answering its jobs' filters. Anything else
 * fails with EPERM; in particular a worker cannot open a socket (not even
 * AF_UNIX: its channels exist already), fork, exec, or ptrace.
 *
 * The job's filter is a deny list, installed by the sandbox's init after the
 * job's tmpfs are mounted and before the job's process is spawned, so every
 * process of the job runs under it. A refused call returns
 * SECCOMP_RET_USER_NOTIF: the worker, holding the filter's listener,
 * answers EPERM and counts the call by name for the result (sandbox.c). The
 * job sees an ordinary error and keeps running. clone3 gets ENOSYS
 * unrecorded, so libc falls back to clone(), whose flags a filter can read.
 * A syscall from a foreign architecture (i386 or x32 entry points on
 * x86_64) kills the process: libseccomp checks the architecture before any
 * rule, and x32 numbers fail that check.
 *
 * Two processes run this file, and each function says which in its name:
 * seccomp_worker_* run in the worker (the job filters are compiled there,
 * once, at start-up, with every static function here), and
 * seccomp_init_job_install() in the sandbox's init, which only loads the
 * compiled filter.
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

/*
 * Refused to jobs. Each refusal is a notification the worker answers with
 * EPERM and counts by name (the job keeps running).
 */
static const char *const job_refused[] = {
	/* the filesystem view, namespaces, identity of the machine */
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "sethostname", "setdomainname",
	/* other processes' memory */
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
	/* the kernel itself */
	"init_module", "finit_module", "delete_module", "kexec_load",
	"kexec_file_load", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key", "open_by_handle_at",
	"name_to_handle_at", "iopl", "ioperm", "uselib", "lookup_dcookie",
	/* the machine's clock and state */
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd",
	"vhangup",
};

/* The worker needs no more than this; anything else fails with EPERM. */
static const char *const worker_allowed[] = {
	"read", "write", "readv", "writev", "pread64", "pwrite64", "lseek",
	"close", "openat", "newfstatat", "fstat", "statfs", "fstatfs",
	"getdents64", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
	"fcntl", "dup", "dup3", "memfd_create", "ftruncate",
	"poll", "ppoll", "recvmsg", "recvfrom", "sendmsg", "sendto",
	"mmap", "munmap", "mremap", "mprotect", "brk", "madvise",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
	"futex", "getrandom", "clock_gettime", "clock_nanosleep", "nanosleep",
	"gettimeofday", "sched_yield", "getpid", "getppid", "gettid",
	"getuid", "geteuid", "getgid", "getegid", "uname",
	"kill", "tgkill", "pidfd_send_signal", "exit", "exit_group",
	"restart_syscall", "prlimit64", "sched_getaffinity", "readlink",
	"readlinkat", "set_robust_list", "rseq",
	/* the snapshot store (SQLite in WAL mode on files opened at start) */
	"fsync", "fdatasync", "fchown", "fchmod", "access", "faccessat",
	"faccessat2", "getcwd", "getrusage",
};

/* Adds one rule per name with action act; names unknown here are skipped. */
static int
add_names(scmp_filter_ctx ctx, uint32_t act, const char *const *names, size_t n,
    struct err *e)
{
	for (size_t i = 0; i < n; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]);
		int rc;

		if (nr == __NR_SCMP_ERROR)
			continue;	/* not on this architecture */
		rc = seccomp_rule_add(ctx, act, nr, 0);
		if (rc < 0)
			return err_set(e, rc, "seccomp rule %s: %s", names[i], strerror(-rc));
	}
	return 0;
}

static scmp_filter_ctx
filter_new(uint32_t def, struct err *e)
{
	scmp_filter_ctx ctx = seccomp_init(def);

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

int
seccomp_worker_install(struct err *e)
{
	scmp_filter_ctx ctx;
	int rc;

	if ((ctx = filter_new(SCMP_ACT_ERRNO(EPERM), e)) == NULL)
		return e->code;
	if ((rc = add_names(ctx, SCMP_ACT_ALLOW, worker_allowed,
	    sizeof(worker_allowed) / sizeof(worker_allowed[0]), e)) < 0)
		goto out_release;
	/* ioctl: only answering the jobs' filters. */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_EQ, SECCOMP_IOCTL_NOTIF_RECV))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_EQ, SECCOMP_IOCTL_NOTIF_SEND))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_EQ, SECCOMP_IOCTL_NOTIF_ID_VALID))) < 0) {
		err_set(e, rc, "seccomp ioctl rule: %s", strerror(-rc));
		goto out_release;
	}
	rc = seccomp_load(ctx);
	if (rc < 0)
		err_set(e, rc, "seccomp_load: %s", strerror(-rc));
out_release:
	seccomp_release(ctx);
	return rc;
}

/* The job filters as BPF, one per network mode, compiled once per worker. */
static struct sock_fprog job_prog[NET__COUNT];

/* Builds the job filter's rules for network mode net into a new context. */
static scmp_filter_ctx
job_filter(enum job_net net, struct err *e)
{
	static const unsigned long ns_flags[] = {
		CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
		CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWTIME,
	};
	const uint32_t refuse = SCMP_ACT_NOTIFY;
	scmp_filter_ctx ctx;
	int rc;

	/*
	 * net "allow" is "none" to the filter: inet sockets reach the job's
	 * own loopback, where the egress proxy's listener is (egress/proxy.c).
	 */
	if (net == NET_ALLOW)
		net = NET_NONE;

	if ((ctx = filter_new(SCMP_ACT_ALLOW, e)) == NULL)
		return NULL;
	/*
	 * A binary tree of the syscall numbers, not libseccomp's default
	 * chain: each init loads the filter, and the kernel runs it once per
	 * syscall number as it loads (to cache what it always allows) with
	 * the process's signal lock held; a chain of some 60 tests made that
	 * about 95 us per job, the tree about 50 us (and every syscall of the
	 * job a few tests shorter). The same rules, so the same verdicts.
	 */
	if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0) {
		err_set(e, rc, "seccomp: cannot ask for a binary tree: %s", strerror(-rc));
		goto out_release;
	}
	if ((rc = add_names(ctx, refuse, job_refused,
	    sizeof(job_refused) / sizeof(job_refused[0]), e)) < 0)
		goto out_release;
	/* clone() with any namespace flag; clone3's flags live in memory. */
	for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
		rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(clone), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (rc < 0)
			goto out_rule;
	}
	/* ENOSYS, not recorded: libc then falls back to clone(), which we can read. */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
		goto out_rule;
	/* Terminal injection into a shared tty. */
	if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI))) < 0 ||
	    (rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX))) < 0)
		goto out_rule;
	/*
	 * personality(): only PER_LINUX. libseccomp cannot compare one argument
	 * twice in a rule, so the query form (0xffffffff) is refused as well;
	 * programs treat a failed query as "default domain".
	 */
	if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(personality), 1,
	    SCMP_A0(SCMP_CMP_NE, PER_LINUX))) < 0)
		goto out_rule;
	/*
	 * Sockets: AF_UNIX, and with net "none" AF_INET/AF_INET6, which in the
	 * job's network namespace reach only its own loopback. Every other
	 * family (netlink, packet, vsock, ...) is refused; net "unix" refuses
	 * the IP families too.
	 */
	_Static_assert(AF_UNIX == 1 && AF_INET == 2 && AF_INET6 == 10, "families");
	if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1,
	    SCMP_A0(SCMP_CMP_GT, net == NET_NONE ? AF_INET6 : AF_UNIX))) < 0)
		goto out_rule;
	for (int fam = 0; net == NET_NONE && fam < AF_INET6; fam++) {
		if (fam == AF_UNIX || fam == AF_INET)
			continue;
		if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1,
		    SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fam))) < 0)
			goto out_rule;
	}
	if (net != NET_NONE && (rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1,
	    SCMP_A0(SCMP_CMP_EQ, AF_UNSPEC))) < 0)
		goto out_rule;
	/*
	 * Inet sockets are counted: the worker lets one be made only while the
	 * job holds fewer than its socket cap (sockcap.c), since TCP charges
	 * each socket a segment past any memory limit. Same action as a
	 * refusal; seccomp_worker_job_counted() tells the two apart.
	 */
	for (int i = 0; net == NET_NONE && i < 2; i++) {
		if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1,
		    SCMP_A0(SCMP_CMP_EQ, i == 0 ? AF_INET : AF_INET6))) < 0)
			goto out_rule;
	}
	if ((rc = seccomp_rule_add(ctx, refuse, SCMP_SYS(socketpair), 1,
	    SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0)
		goto out_rule;
	return ctx;
out_rule:
	err_set(e, rc, "seccomp job rule: %s", strerror(-rc));
out_release:
	seccomp_release(ctx);
	return NULL;
}

bool
seccomp_worker_job_counted(enum job_net net, const struct seccomp_data *d)
{
	/* The filter compares all 64 bits of the family: so do we. */
	return (net == NET_NONE || net == NET_ALLOW) && d->nr == SCMP_SYS(socket) &&
	    (d->args[0] == AF_INET || d->args[0] == AF_INET6);
}

/* Compiles the filter of one network mode into job_prog[net]. */
static int
compile_one(enum job_net net, struct err *e)
{
	struct sock_fprog *prog = &job_prog[net];
	scmp_filter_ctx ctx;
	struct stat st;
	int fd, rc;

	if ((ctx = job_filter(net, e)) == NULL)
		return e->code;
	/*
	 * libseccomp 2.5 exports BPF only to a descriptor: through a memfd
	 * into memory, once, so each job's init loads it with one call.
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
	prog->filter = xmalloc((size_t)st.st_size);
	prog->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	if (pread(fd, prog->filter, (size_t)st.st_size, 0) != st.st_size) {
		rc = err_set(e, -EIO, "seccomp: cannot read the exported filter");
		free(prog->filter);
		prog->filter = NULL;
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
seccomp_worker_job_compile(struct err *e)
{
	for (int net = 0; net < NET__COUNT; net++) {
		int rc;

		if (job_prog[net].filter == NULL && (rc = compile_one(net, e)) < 0)
			return rc;
	}
	return 0;
}

int
seccomp_init_job_install(enum job_net net, struct err *e)
{
	long fd;

	if ((unsigned)net >= NET__COUNT || job_prog[net].filter == NULL)
		return err_set(e, -EINVAL, "seccomp: the job filter was not compiled");
	fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
	    SECCOMP_FILTER_FLAG_NEW_LISTENER, &job_prog[net]);
	if (fd < 0)
		return err_set(e, -errno, "seccomp: %s", strerror(errno));
	return (int)fd;
}
