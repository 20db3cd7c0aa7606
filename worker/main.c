/*
 * main.c - sandq-worker start-up. Started only by sandqd, never by hand.
 *
 *   sandq-worker --index N --run-dir DIR --store-dir DIR --uid UID
 *       [--log-level L] [--log-format text|json] [--keep-versions N] [--no-overlay]
 *       [--image-cache DIR --image-uid UID]
 *
 * sandqd creates a SOCK_SEQPACKET socketpair, forks, puts its end on fd 3,
 * closes every other descriptor but stdio, and execs this binary (a fresh
 * address space: nothing of the dispatcher's memory, Redis credentials
 * included, survives into a worker). The steps below run in this order:
 *
 *   1. PR_SET_PDEATHSIG: a worker never outlives its dispatcher;
 *   2. signals back to defaults, so the spawner and sandboxes start sane;
 *   3. no supplementary groups: the host's group 0 must not follow into a
 *      sandbox;
 *   4. the host side of the sandboxes (sandbox_setup_host): our own mount
 *      namespace with the run folder on a private tmpfs and the generated
 *      /etc in it, our cgroup folder, the jobs' compiled filters, and the
 *      spawner, forked now so that no sandbox descends from a confined
 *      worker (spawn.c);
 *   4b. the snapshot store opened (its files stay open: the filter below
 *      allows what SQLite needs on open descriptors, and openat for its
 *      journal files);
 *   5. every capability dropped but CAP_SETUID/CAP_SETGID (writing the
 *      sandboxes' id maps) and CAP_KILL (what is left of them);
 *   6. our own allowlist seccomp filter, last, so set-up may use what the
 *      worker may not;
 *   7. MSG_HELLO with our version, pid and slot; then the job loop.
 *
 * The worker links neither hiredis nor libuv: it never talks to the network.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "worker.h"

#if defined(__SANITIZE_ADDRESS__)
/*
 * LeakSanitizer stops the world with ptrace, which this process's own
 * seccomp filter refuses by design; leak checks of the worker's code run in
 * the unit tests of its parts instead.
 */
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "detect_leaks=0";
}
#endif

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: sandq-worker --index N --run-dir DIR --store-dir DIR "
	    "--uid UID [--log-level LEVEL] [--log-format F] [--keep-versions N] [--no-overlay]\n"
	    "    [--net-fresh] [--socket-bytes N] [--sockets N] [--image-cache DIR --image-uid UID]\n"
	    "    [--egress-port PORT]\n"
	    "(started by sandqd; not meant to be run by hand)\n");
	exit(2);
}

/* Keeps CAP_SETUID, CAP_SETGID and CAP_KILL; drops every other one for good. */
static int
worker_drop_capabilities(void)
{
	static const int keep[] = { CAP_SETUID, CAP_SETGID, CAP_KILL };
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	memset(data, 0, sizeof(data));
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		data[keep[i] / 32].effective |= 1u << (keep[i] % 32);
		data[keep[i] / 32].permitted |= 1u << (keep[i] % 32);
	}
	/* The bounding set first: dropping from it needs CAP_SETPCAP. */
	for (int cap = 0; cap <= 63; cap++) {
		bool kept = false;

		for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
			kept |= cap == keep[i];
		if (kept)
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL && cap > 0)
				break;	/* past the last capability */
			return -1;
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -1;
	return (int)syscall(SYS_capset, &hdr, data);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "index", required_argument, NULL, 'i' },
		{ "run-dir", required_argument, NULL, 'r' },
		{ "store-dir", required_argument, NULL, 's' },
		{ "uid", required_argument, NULL, 'u' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "keep-versions", required_argument, NULL, 'k' },
		{ "no-overlay", no_argument, NULL, 'o' },
		{ "net-fresh", no_argument, NULL, 'N' },
		{ "socket-bytes", required_argument, NULL, 'b' },
		{ "sockets", required_argument, NULL, 'n' },
		{ "image-cache", required_argument, NULL, 'c' },
		{ "image-uid", required_argument, NULL, 'U' },
		{ "log-format", required_argument, NULL, 'F' },
		{ "egress-port", required_argument, NULL, 'E' },
		{ NULL, 0, NULL, 0 },
	};
	struct worker w = { .fd = WORKER_FD, .snap_fd = -1, .patch_fd = -1,
	    .tmpl_fd = -1, .tmpl_patch_fd = -1 };
	const char *store_dir = NULL;
	struct msg_hello hello;
	struct err e = { 0 };
	int64_t idx = -1, uid = -1, keep = STORE_KEEP_VERSIONS_DEFAULT, sock = 0;
	int64_t nsock = SANDBOX_SOCKETS_DEFAULT, iuid = -1;
	char prefix[32];
	sigset_t none;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (parse_i64(optarg, 0, 1023, &idx) < 0)
				usage();
			break;
		case 'r':
			/* A copy: the spawner overwrites our command line (spawn.c). */
			w.sbx_conf.run_dir = xstrdup(optarg);
			break;
		case 's':
			store_dir = xstrdup(optarg);
			break;
		case 'u':
			if (parse_i64(optarg, 1, 4294967294LL, &uid) < 0)
				usage();
			break;
		case 'l':
			if (log_setlevel(optarg) < 0)
				usage();
			break;
		case 'F':
			if (log_setformat(optarg) < 0)
				usage();
			break;
		case 'k':
			if (parse_i64(optarg, 0, STORE_KEEP_VERSIONS_MAX, &keep) < 0)
				usage();
			break;
		case 'o':
			w.sbx_conf.no_base = true;
			break;
		case 'N':
			w.sbx_conf.net_fresh = true;
			break;
		case 'b':
			if (parse_i64(optarg, 0, INT64_MAX, &sock) < 0)
				usage();
			w.sbx_conf.socket_bytes = (uint64_t)sock;
			break;
		case 'n':
			if (parse_i64(optarg, 1, INT64_MAX, &nsock) < 0)
				usage();
			break;
		case 'c':
			w.sbx_conf.image_cache = xstrdup(optarg);
			break;
		case 'U':
			if (parse_i64(optarg, 1, 4294967294LL, &iuid) < 0)
				usage();
			break;
		case 'E': {
			int64_t port;

			if (parse_i64(optarg, 1, 65535, &port) < 0)
				usage();
			w.egress_port = (uint16_t)port;
			break;
		}
		default:
			usage();
		}
	}
	if (idx < 0 || uid < 0 || w.sbx_conf.run_dir == NULL || store_dir == NULL ||
	    (w.sbx_conf.image_cache != NULL) != (iuid > 0))
		usage();
	w.sbx_conf.unpack_uid = (uid_t)iuid;
	w.sbx_conf.index = (int)idx;
	w.sbx_conf.sockets_max = (uint64_t)nsock;
	w.sbx_conf.host_uid = (uid_t)uid;
	snprintf(prefix, sizeof(prefix), "worker/%d", (int)idx);
	log_procinit(prefix);

	/*
	 * 1. Die with the dispatcher; if it is already gone (its end of our
	 * channel closed), stop now. (Not getppid() == 1: sandqd may be pid 1.)
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fatal("PR_SET_PDEATHSIG");
	{
		struct pollfd pfd = { .fd = w.fd, .events = 0 };

		if (poll(&pfd, 1, 0) < 0 || (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)))
			fatalx("dispatcher already gone");
	}
	/* 2. Default signal dispositions and an empty mask. */
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* 3. No supplementary groups. */
	if (setgroups(0, NULL) < 0)
		fatal("setgroups");
	/* 4. The host side of every sandbox this worker will start. */
	if (sandbox_setup_host(&w.sbx_conf, &e) < 0)
		fatalx("sandbox set-up: %s", e.msg);
	if (store_open(store_dir, &w.store, &e) < 0)
		fatalx("snapshot store: %s", e.msg);
	/* 4c. The image cache's records (read on each new image; never written). */
	if (w.sbx_conf.image_cache != NULL &&
	    img_cache_attach(w.sbx_conf.image_cache, &w.images, &e) < 0)
		fatalx("image cache: %s", e.msg);
	store_set_keep_versions(w.store, (unsigned)keep);
	/*
	 * 5. Only the capabilities a worker still needs: mapping its sandboxes'
	 * ids (setuid, setgid) and killing what is left of them (kill).
	 */
	if (worker_drop_capabilities() < 0)
		fatal("drop capabilities");
	/* 6. Our own filter, last. */
	if (sandbox_confine_worker(&e) < 0)
		fatalx("seccomp: %s", e.msg);
	/* 7. Introduce ourselves. */
	hello.pid = (uint32_t)getpid();
	hello.index = (uint32_t)idx;
	if (msg_send(w.fd, MSG_HELLO, 0, &hello, sizeof(hello), -1) < 0)
		fatal("hello");
	return worker_loop(&w);
}
