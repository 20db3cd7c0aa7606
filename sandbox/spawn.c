/*
 * spawn.c - the spawner: the process every sandbox's init is cloned from.
 *
 * Seccomp filters are inherited and cannot be taken off. Were inits cloned
 * by the worker, every job would carry the worker's filter too, and two
 * things would break: the worker's filter could admit only what the worker
 * itself needs if no job ever ran under it, and a call it refuses with EPERM
 * would pre-empt the job filter's notification, so nothing refused to a job
 * could be recorded. So the worker forks the spawner before it confines
 * itself. The spawner does one thing, on request: clone an init into fresh
 * namespaces (the network one shared by this worker's sandboxes in turn,
 * below, and the IPC one likewise, ipcns.c) and hand the worker the init's control channel and a pidfd
 * (MSG_SPAWN_DONE, MSG_SPAWN_PIDFD). Inits are reaped by the kernel
 * (SIGCHLD ignored); the worker learns of an init's end from its pidfd and
 * its messages. The spawner dies with the worker (parent-death signal), and
 * each init with the spawner.
 *
 * The spawner reads only fixed-size requests from its worker (a layers
 * request is a bounded list of 64 hex digits each); it never sees a job's
 * bytes. What an init does is not the spawner's business: the
 * worker hands spawn_worker_start() init's entry (init.c) as a
 * spawn_init_cb, which each clone calls first thing.
 *
 * Three processes run this file, and each function says which in its name:
 * spawn_worker_* and worker_title_measure() run in the worker, spawner_main()
 * in the spawner; spawn_set_title() runs in the spawner and in each init
 * (whose first lines, before init_entry, are in spawner_main()).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/xmalloc.h"
#include "internal.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

static int spawner_fd = -1;	/* the worker's end of the spawner channel */
static char *title_area;	/* our command line's bytes (argv[0] on) */
static size_t title_len;

/*
 * Measures the command line we were started with, so spawn_set_title() can
 * overwrite it: a sandbox must not read the worker's arguments (its run
 * folder, host uid) in /proc/1/cmdline.
 */
static void
worker_title_measure(void)
{
	char buf[4096];
	ssize_t n;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n > 0 && (size_t)n < sizeof(buf)) {
		title_area = program_invocation_name;
		title_len = (size_t)n;
	}
}

void
spawn_set_title(const char *name)
{
	if (title_area != NULL) {
		memset(title_area, 0, title_len);
		memcpy(title_area, name, strnlen(name, title_len - 1));
	}
	prctl(PR_SET_NAME, name);
}

/*** The shared network namespace (spawner) ***/


/*
 * The network namespaces this spawner's inits share, each one sandbox at a
 * time (docs/security.md, "The network namespace"; docs/decisions.md). They
 * are the spawner's own making, so their owner is the host's user namespace
 * and no job holds a capability over them: no address, route, link, rule or
 * setting of them can change. What a job can leave in one are sockets
 * (listening, bound, connected, in TIME_WAIT, queued in flight), and the
 * next init is cloned into one only when the last init cloned into it has
 * ended (every process of its pid namespace with it, their descriptors
 * closed) and its counters show no socket of any kind; otherwise into a new
 * one, which takes that slot.
 *
 * Two slots, taken in turn as the job cgroups are (cgroup.c, slot_take()):
 * the worker may prepare the next sandbox while the last one still runs
 * (worker/job.c: during a persistent or python job), and that sandbox
 * then takes the other slot instead of a namespace of its own.
 */
#define NET_SLOTS 2

struct net_slot {
	int ns;			/* the namespace, or -1 */
	struct sockcap stat;	/* its sockstat and sockstat6 */
	int last;		/* pidfd of the last init cloned into it, or -1 */
};

static struct {
	int host;		/* the spawner's own network namespace */
	struct net_slot slot[NET_SLOTS];
	unsigned turn;		/* the slot taken last: the next init tries it first */
	struct net_slot *cur;	/* the slot net_enter() chose, or NULL */
} net = { .host = -1, .slot = { { -1, { { -1, -1 } }, -1 },
    { -1, { { -1, -1 } }, -1 } } };

/* Whether slot i may take the next init as it is (see above). */
static bool
net_reusable(void *arg, unsigned i)
{
	struct net_slot *sl = &net.slot[i];

	(void)arg;
	return sl->ns >= 0 && ns_spawner_pidfd_ended(&sl->last) &&
	    sockcap_is_idle(&sl->stat) == 1;
}

/* Whether slot i's last init has ended. */
static bool
net_ended(void *arg, unsigned i)
{
	(void)arg;
	return ns_spawner_pidfd_ended(&net.slot[i].last);
}

/* Drops slot sl's namespace: its last init and our descriptors of it. */
static void
net_drop(struct net_slot *sl)
{
	if (sl->ns >= 0)
		close(sl->ns);
	if (sl->last >= 0)
		close(sl->last);
	sockcap_close(&sl->stat);
	sl->ns = sl->last = -1;
}

/*
 * Makes a new namespace in slot sl: unshared by the spawner, its descriptor
 * and counters opened from inside, then back to the host's. Returns 0 or
 * -errno with e; either way the spawner is back in its own namespace.
 */
static int
net_renew(struct net_slot *sl, struct err *e)
{
	int rc;

	net_drop(sl);
	if ((rc = ns_spawner_net_make(e)) == 0 &&
	    (rc = sockcap_open_dir(&sl->stat, "/proc/self/net", e)) == 0 &&
	    (sl->ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
		rc = err_set(e, -errno, "open our network namespace: %s", strerror(errno));
	if (setns(net.host, CLONE_NEWNET) < 0)
		_exit(1);	/* a spawner in the wrong namespace clones nothing */
	if (rc < 0)
		net_drop(sl);
	return rc;
}

/*
 * Enters the namespace the next init is to share: ns_spawner_slot_pick()'s
 * slot, made anew unless it may be entered as it is. Returns true if the
 * spawner is in it (the clone must not unshare one; net.cur is the slot),
 * false if the init gets a namespace of its own as without sharing.
 */
static bool
net_enter(const struct sandbox_conf *conf)
{
	struct net_slot *sl;
	struct err e = { 0 };
	bool reuse;

	net.cur = NULL;
	if (conf->net_fresh || net.host < 0)
		return false;
	net.turn = ns_spawner_slot_pick(NET_SLOTS, net.turn, net_reusable, net_ended, NULL, &reuse);
	sl = &net.slot[net.turn];
	if (!reuse && net_renew(sl, &e) < 0)
		return false;
	if (setns(sl->ns, CLONE_NEWNET) < 0)
		return false;
	net.cur = sl;
	return true;
}

/* In a new init: closes the spawner's descriptors of the namespaces. */
static void
net_close_all(void)
{
	if (net.host >= 0)
		close(net.host);
	for (unsigned i = 0; i < NET_SLOTS; i++) {
		if (net.slot[i].ns >= 0)
			close(net.slot[i].ns);
		if (net.slot[i].last >= 0)
			close(net.slot[i].last);
		sockcap_close(&net.slot[i].stat);
	}
}

/*
 * MSG_SPAWN_LISTEN: a TCP listener on 127.0.0.1:port in the network
 * namespace of the init pidfd names, for a net "allow" job's egress proxy
 * (docs/security.md, "Network by allowlist"). A listening socket stays in
 * the namespace it was made in, whoever holds it: the proxy, in the host's
 * namespace, accepts the job's connections on it. The namespace is never
 * shared again: the proxy's accepted sockets and their TIME_WAIT are its,
 * and a next job must not meet them (the next init gets a new one).
 * Returns the socket, or -errno; the spawner is back in its own namespace.
 */
static int
net_listen(int pidfd, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port) };
	struct stat job, shared;
	int fd = -1, rc = 0;

	if (setns(pidfd, CLONE_NEWNET) < 0)
		return -errno;
	if (stat("/proc/self/ns/net", &job) < 0)
		rc = -errno;
	for (unsigned i = 0; rc == 0 && i < NET_SLOTS; i++)
		if (net.slot[i].ns >= 0 && fstat(net.slot[i].ns, &shared) == 0 &&
		    job.st_ino == shared.st_ino && job.st_dev == shared.st_dev)
			net_drop(&net.slot[i]);
	if (rc == 0 && ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0))
		rc = -errno;
	if (setns(net.host, CLONE_NEWNET) < 0)
		_exit(1);	/* a spawner in the wrong namespace clones nothing */
	if (rc < 0 && fd >= 0)
		close(fd);
	return rc < 0 ? rc : fd;
}

/* The IPC namespace this spawner's inits share, one at a time (ipcns.c). */
static struct ipcns ipc;

static void __attribute__((noreturn))
spawner_main(const struct sandbox_conf *conf, spawn_init_cb *init_entry, int sock,
    pid_t worker)
{
	struct msg m;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != worker)
		_exit(1);	/* the worker died before the line above */
	spawn_set_title("sandq-spawner");
	/* Nothing of the worker's but stdio and our channel, as fd 3. */
	if (sock != 3 && (dup3(sock, 3, O_CLOEXEC) < 0 || close(sock) < 0))
		_exit(1);
	sock = 3;
	if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
		_exit(1);
	/*
	 * Every disposition the default, once, whatever the worker's libraries
	 * set or the host ignored when it started sandqd (an ignored signal
	 * survives exec): each init (and so each job's process, exec.c)
	 * inherits ours, SIGCHLD's set back by init. The system call itself:
	 * glibc's sigaction() refuses the two real-time signals it keeps for
	 * threads (32, 33), which a job must not find ignored either; this
	 * process runs no threads.
	 */
	{
		struct { void *handler; unsigned long flags; void *restorer;
		    uint64_t mask; } dfl = { SIG_DFL, 0, NULL, 0 };

		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				(void)syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
	}
	signal(SIGCHLD, SIG_IGN);
	/* Each init copies our mount namespace: only what it needs (ns.c). */
	ns_spawner_mounts_trim(conf);
	/*
	 * No fast bins, and the worker's freed chunks merged now, once: an
	 * init's first large malloc (the job's decoder asks for 8 KiB) would
	 * otherwise merge every small chunk it inherited, writing to each one
	 * and so copying every heap page they lie on (3% of a /bin/true job's
	 * CPU in malloc_consolidate's copy-on-write faults).
	 */
	mallopt(M_MXFAST, 0);
	malloc_trim(0);
	net.host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	ipcns_spawner_init(&ipc);
	msg_init(&m);
	for (;;) {
		struct msg_spawn_done done = { -1, 0 };
		unsigned long flags = SBX_CLONE_FLAGS;
		int ctl[2], pidfd = -1, rc;
		bool shared, ipc_shared;
		long pid;

		rc = msg_recv(sock, &m, MSG_MAX);
		if (rc == 0)
			_exit(0);
		if (rc > 0 && m.hdr.type == MSG_SPAWN_LAYERS && m.fd < 0 && m.len > 0 &&
		    m.len % 64 == 0 && m.len / 64 <= SANDBOX_IMAGE_LAYERS_MAX) {
			struct msg_spawn_layers lr;

			layers_spawner_request(conf, m.data, m.len, &lr);
			msg_clear(&m);
			if (msg_send(sock, MSG_SPAWN_LAYERS_DONE, 0, &lr, sizeof(lr), -1) < 0)
				_exit(1);
			continue;
		}
		if (rc > 0 && m.hdr.type == MSG_SPAWN_LISTEN && m.fd >= 0 &&
		    m.len == sizeof(uint16_t)) {
			uint16_t port;
			int32_t error = 0;
			int lfd;

			memcpy(&port, m.data, sizeof(port));
			lfd = net_listen(m.fd, port);
			msg_clear(&m);
			if (lfd < 0)
				error = -lfd;
			if (msg_send(sock, MSG_SPAWN_LISTEN_DONE, 0, &error, sizeof(error),
			    lfd) < 0)
				_exit(1);
			if (lfd >= 0)
				close(lfd);
			continue;
		}
		if (rc < 0 || m.hdr.type != MSG_SPAWN_REQ || m.len != 0 || m.fd >= 0)
			_exit(1);
		msg_clear(&m);
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
			done.error = errno;
			if (msg_send(sock, MSG_SPAWN_DONE, 0, &done, sizeof(done), -1) < 0)
				_exit(1);
			continue;
		}
		/* The channel is made in our own namespace: no socket of ours is its. */
		if ((shared = net_enter(conf)))
			flags &= ~(unsigned long)CLONE_NEWNET;
		/* The IPC namespace likewise (ipcns.c). */
		if ((ipc_shared = ipcns_spawner_enter(&ipc)))
			flags &= ~(unsigned long)CLONE_NEWIPC;
		/* fork() semantics: the child goes on here, on a copy of our stack. */
		pid = syscall(SYS_clone, flags | CLONE_PIDFD | SIGCHLD, 0UL, &pidfd,
		    0UL, 0UL);
		if (pid == 0) {
			close(sock);
			close(ctl[0]);
			net_close_all();
			if (shared)
				ns_init_net_is_shared();
			ipcns_spawner_close(&ipc);
			if (ipc.host >= 0)
				close(ipc.host);
			init_entry(conf, ctl[1]);
			_exit(1);	/* init_entry() does not return */
		}
		if (shared && setns(net.host, CLONE_NEWNET) < 0)
			_exit(1);
		if (shared && pid > 0 &&
		    (net.cur->last = fcntl(pidfd, F_DUPFD_CLOEXEC, 0)) < 0)
			net_drop(net.cur);	/* unknown end: never shared again */
		if (ipc_shared)
			ipcns_spawner_leave(&ipc, pid > 0 ? pidfd : -1);
		close(ctl[1]);
		if (pid < 0) {
			done.error = errno;
			close(ctl[0]);
			if (msg_send(sock, MSG_SPAWN_DONE, 0, &done, sizeof(done), -1) < 0)
				_exit(1);
			continue;
		}
		done.pid = (int32_t)pid;
		if (msg_send(sock, MSG_SPAWN_DONE, 0, &done, sizeof(done), ctl[0]) < 0 ||
		    msg_send(sock, MSG_SPAWN_PIDFD, 0, NULL, 0, pidfd) < 0)
			_exit(1);
		close(ctl[0]);
		close(pidfd);
	}
}

int
spawn_worker_start(const struct sandbox_conf *conf, spawn_init_cb *init_entry,
    struct err *e)
{
	pid_t worker = getpid(), pid;
	int sv[2];

	worker_title_measure();
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_set(e, -errno, "spawner channel: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return err_set(e, -errno, "fork the spawner: %s", strerror(errno));
	}
	if (pid == 0) {
		close(sv[0]);
		spawner_main(conf, init_entry, sv[1], worker);
	}
	close(sv[1]);
	spawner_fd = sv[0];
	return 0;
}

int
spawn_worker_sandbox(pid_t *pid, int *ctl, int *pidfd, struct err *e)
{
	struct msg_spawn_done done;
	struct msg m;
	int rc;

	*pid = -1;
	*ctl = *pidfd = -1;
	msg_init(&m);
	/*
	 * A worker without its spawner can run no job: it exits, and the
	 * dispatcher answers its job and starts a new one.
	 */
	if ((rc = msg_send(spawner_fd, MSG_SPAWN_REQ, 0, NULL, 0, -1)) < 0)
		fatalx("the sandbox spawner is gone: %s", strerror(-rc));
	rc = msg_recv(spawner_fd, &m, MSG_MAX);
	if (rc <= 0 || m.hdr.type != MSG_SPAWN_DONE || m.len != sizeof(done))
		fatalx("the sandbox spawner is gone or confused (%d)", rc);
	memcpy(&done, m.data, sizeof(done));
	if (done.pid <= 0) {
		msg_clear(&m);
		return err_set(e, -done.error, "clone into new namespaces: %s",
		    strerror(done.error));
	}
	*pid = done.pid;
	*ctl = m.fd;
	m.fd = -1;
	msg_clear(&m);
	rc = msg_recv(spawner_fd, &m, MSG_MAX);
	if (rc <= 0 || m.hdr.type != MSG_SPAWN_PIDFD || m.fd < 0)
		fatalx("the sandbox spawner sent no pidfd (%d)", rc);
	*pidfd = m.fd;
	m.fd = -1;
	msg_clear(&m);
	return 0;
}

int
spawn_worker_layers(const char (*hex)[65], size_t n, unsigned *mounted, struct err *e)
{
	struct msg_spawn_layers lr;
	struct msg m;
	char *buf;
	int rc;

	*mounted = 0;
	if (n == 0 || n > SANDBOX_IMAGE_LAYERS_MAX)
		return err_set(e, -E2BIG, "an image of %zu layers (at most %d)", n,
		    SANDBOX_IMAGE_LAYERS_MAX);
	buf = xmalloc(64 * n);
	for (size_t i = 0; i < n; i++)
		memcpy(buf + 64 * i, hex[i], 64);
	rc = msg_send(spawner_fd, MSG_SPAWN_LAYERS, 0, buf, 64 * n, -1);
	free(buf);
	if (rc < 0)
		fatalx("the sandbox spawner is gone: %s", strerror(-rc));
	msg_init(&m);
	rc = msg_recv(spawner_fd, &m, MSG_MAX);
	if (rc <= 0 || m.hdr.type != MSG_SPAWN_LAYERS_DONE || m.len != sizeof(lr))
		fatalx("the sandbox spawner is gone or confused (%d)", rc);
	memcpy(&lr, m.data, sizeof(lr));
	msg_clear(&m);
	*mounted = lr.mounted;
	if (lr.error != 0)
		return err_set(e, -lr.error, "mount layer sha256:%.64s of the image "
		    "cache: %s", lr.index >= 0 && (size_t)lr.index < n ? hex[lr.index] :
		    "?", strerror(lr.error));
	return 0;
}

int
spawn_worker_listen(int pidfd, uint16_t port, int *fd, struct err *e)
{
	struct msg m;
	int32_t error;
	int rc;

	*fd = -1;
	if ((rc = msg_send(spawner_fd, MSG_SPAWN_LISTEN, 0, &port, sizeof(port), pidfd)) < 0)
		fatalx("the sandbox spawner is gone: %s", strerror(-rc));
	msg_init(&m);
	rc = msg_recv(spawner_fd, &m, MSG_MAX);
	if (rc <= 0 || m.hdr.type != MSG_SPAWN_LISTEN_DONE || m.len != sizeof(error))
		fatalx("the sandbox spawner is gone or confused (%d)", rc);
	memcpy(&error, m.data, sizeof(error));
	if (error != 0 || m.fd < 0) {
		msg_clear(&m);
		return err_set(e, error ? -error : -EBADMSG, "listen on 127.0.0.1:%u in the "
		    "sandbox's network namespace: %s", (unsigned)port,
		    strerror(error ? error : EBADMSG));
	}
	*fd = m.fd;
	m.fd = -1;
	msg_clear(&m);
	return 0;
}
