/*
 * seccomp_test.c - the worker's and the job's seccomp filters, each loaded
 * into a forked child of the test (filters cannot be taken off again).
 *
 * The worker's filter is an allowlist: the test proves a confined worker can
 * still do its I/O but cannot open a socket of any family, fork or ptrace.
 * The job's filter notifies: the test plays the worker, answers a refused
 * call from a process under the filter and sees the caller get EPERM.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../sandbox/internal.h"

/* Runs fn in a child and returns its exit code (or 128 + signal). */
static int
in_child(int (*fn)(void))
{
	pid_t pid = fork();
	int st;

	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(fn());
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Exit codes name the first check that failed; 0 is all good. */
static int
worker_confined(void)
{
	struct err e = { 0 };
	int p[2];
	char c;

	if (pipe(p) < 0)
		return 90;
	if (seccomp_worker_install(&e) < 0)
		return 91;
	/* What a worker does keeps working. */
	if (write(p[1], "x", 1) != 1 || read(p[0], &c, 1) != 1 || c != 'x')
		return 10;
	/* What it must never do fails with EPERM. */
	if (socket(AF_INET, SOCK_STREAM, 0) >= 0 || errno != EPERM)
		return 20;
	if (socket(AF_INET6, SOCK_DGRAM, 0) >= 0 || errno != EPERM)
		return 21;
	if (socket(AF_UNIX, SOCK_STREAM, 0) >= 0 || errno != EPERM)
		return 22;
	if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) >= 0 || errno != EPERM)
		return 30;
	if (syscall(SYS_ptrace, PTRACE_ATTACH, getppid(), 0, 0) >= 0 || errno != EPERM)
		return 31;
	if (fork() >= 0 || errno != EPERM)
		return 40;
	if (syscall(SYS_execve, "/bin/true", NULL, NULL) >= 0 || errno != EPERM)
		return 41;
	if (mount("none", "/tmp", "tmpfs", 0, NULL) >= 0 || errno != EPERM)
		return 50;
	return 0;
}

Test(seccomp, the_worker_filter_allows_its_io_and_refuses_sockets_fork_and_ptrace)
{
	cr_assert_eq(in_child(worker_confined), 0,
	    "see worker_confined() for what the exit code names");
}

/*
 * Under the job filter: forks a caller that makes a refused call, answers
 * the notification as the worker does, and checks what the caller saw.
 */
static int
job_refusal_answered(void)
{
	struct err e = { 0 };
	struct seccomp_notif req;
	struct seccomp_notif_resp resp;
	struct pollfd pfd;
	int fd, st;
	pid_t caller;

	if (seccomp_worker_job_compile(&e) < 0)
		return 90;
	if ((fd = seccomp_init_job_install(NET_NONE, &e)) < 0)
		return 91;
	/*
	 * Allowed under the job filter: plain fork and unix sockets. An inet
	 * socket is sent to us to count (let through here); a mount refused.
	 */
	caller = fork();
	if (caller < 0)
		return 10;
	if (caller == 0) {
		int s = socket(AF_UNIX, SOCK_STREAM, 0);

		if (s < 0)
			_exit(20);
		close(s);
		if ((s = socket(AF_INET, SOCK_STREAM, 0)) < 0)
			_exit(22);
		close(s);
		/* Refused: waits for our answer below. */
		if (mount("none", "/tmp", "tmpfs", 0, NULL) == 0 || errno != EPERM)
			_exit(21);
		_exit(0);
	}
	for (int call = 0; call < 2; call++) {
		pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 30000) != 1)
			return 11;
		memset(&req, 0, sizeof(req));
		if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
			return 12;
		if ((pid_t)req.pid != caller)
			return 13;
		if (call == 0) {
			if (req.data.nr != SYS_socket ||
			    !seccomp_worker_job_counted(NET_NONE, &req.data))
				return 16;
			resp = (struct seccomp_notif_resp){ .id = req.id,
			    .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE };
		} else {
			if (req.data.nr != SYS_mount ||
			    seccomp_worker_job_counted(NET_NONE, &req.data))
				return 17;
			resp = (struct seccomp_notif_resp){ .id = req.id, .error = -EPERM };
		}
		if (ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0)
			return 14;
	}
	if (waitpid(caller, &st, 0) != caller || !WIFEXITED(st))
		return 15;
	return WEXITSTATUS(st);
}

Test(seccomp, the_job_filter_notifies_and_the_answer_is_the_callers_error)
{
	cr_assert_eq(in_child(job_refusal_answered), 0,
	    "see job_refusal_answered() for what the exit code names");
}

/*** The socket cap (sockcap.c) ***/

/* Only an inet socket() under net "none" is counted; anything else the filter
 * notifies is a refusal, a family with high bits set included. */
Test(seccomp, only_inet_sockets_in_mode_none_are_counted_calls)
{
	struct seccomp_data d = { .nr = SCMP_SYS(socket) };

	d.args[0] = AF_INET;
	cr_expect(seccomp_worker_job_counted(NET_NONE, &d));
	d.args[0] = AF_INET6;
	cr_expect(seccomp_worker_job_counted(NET_NONE, &d));
	cr_expect_not(seccomp_worker_job_counted(NET_UNIX, &d));
	d.args[0] = ((uint64_t)1 << 32) | AF_INET;
	cr_expect_not(seccomp_worker_job_counted(NET_NONE, &d));
	d.args[0] = AF_NETLINK;
	cr_expect_not(seccomp_worker_job_counted(NET_NONE, &d));
	d.nr = SCMP_SYS(socketpair);
	d.args[0] = AF_INET;
	cr_expect_not(seccomp_worker_job_counted(NET_NONE, &d));
}

/* The count is every socket held plus every TCP socket in the tables. */
Test(seccomp, sockstat_counts_held_sockets_and_tcp_in_the_tables)
{
	static const char stat[] =
	    "sockets: used 12\n"
	    "TCP: inuse 5 orphan 0 tw 2 alloc 9 mem 3\n"
	    "UDP: inuse 1 mem 0\n"
	    "UDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n";
	static const char stat6[] =
	    "TCP6: inuse 3\nUDP6: inuse 0\nUDPLITE6: inuse 0\nRAW6: inuse 0\n"
	    "FRAG6: inuse 0 memory 0\n";

	cr_expect_eq(sockcap_parse(stat, stat6), 12 + 5 + 3);
	cr_expect_eq(sockcap_parse(stat, NULL), 12 + 5);
	cr_expect_eq(sockcap_parse("TCP: inuse 5\n", stat6), -EINVAL);
	cr_expect_eq(sockcap_parse("sockets: used x\nTCP: inuse 5\n", NULL), -EINVAL);
	cr_expect_eq(sockcap_parse("sockets: used 1\nTCP: inuse -4\n", NULL), -EINVAL);
	cr_expect_eq(sockcap_parse(stat, "UDP6: inuse 0\n"), -EINVAL);
}

/*
 * A namespace is idle (sharable with the next job, spawn.c) only when
 * every per-namespace count of both files is zero: sockets held, TCP in
 * the tables, TIME_WAIT, UDP, raw, fragments; the host-wide ones (orphan,
 * alloc, mem) do not count.
 */
Test(seccomp, sockstat_idle_means_every_per_namespace_count_zero)
{
	static const char idle[] =
	    "sockets: used 0\n"
	    "TCP: inuse 0 orphan 4 tw 0 alloc 31 mem 80\n"
	    "UDP: inuse 0 mem 7\n"
	    "UDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n";
	static const char idle6[] =
	    "TCP6: inuse 0\nUDP6: inuse 0\nUDPLITE6: inuse 0\nRAW6: inuse 0\n"
	    "FRAG6: inuse 0 memory 0\n";
	static const char *const busy[] = {
		"sockets: used 1\nTCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\n",
		"sockets: used 0\nTCP: inuse 1 orphan 0 tw 0 alloc 0 mem 0\n",
		"sockets: used 0\nTCP: inuse 0 orphan 0 tw 1 alloc 0 mem 0\n",
		"sockets: used 0\nTCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nUDP: inuse 2 mem 0\n",
		"sockets: used 0\nTCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nRAW: inuse 1\n",
		"sockets: used 0\nTCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nFRAG: inuse 0 memory 4096\n",
		"sockets: used x\nTCP: inuse 0\n",
		"TCP: inuse 0 orphan 0 tw 0\n",
		"",
	};

	cr_expect(sockcap_idle(idle, idle6));
	cr_expect(sockcap_idle(idle, NULL));
	cr_expect_not(sockcap_idle(idle, "TCP6: inuse 1\nUDP6: inuse 0\n"));
	cr_expect_not(sockcap_idle(idle, "TCP6: inuse 0\nUDP6: inuse 3\n"));
	for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]); i++)
		cr_expect_not(sockcap_idle(busy[i], idle6), "idle: %s", busy[i]);
}
