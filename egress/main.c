/*
 * main.c - sandq-egress: the egress proxy of `net: allow` jobs (issue 21).
 *
 * Started and supervised by sandqd (dispatcher/egress.c), in the host's
 * network namespace, with its control channel as fd 3 (SOCK_SEQPACKET,
 * common/msg.c frames). sandqd sends MSG_EGRESS_JOB with a job's listener
 * (made by its worker's spawner inside the job's namespace) and its own
 * word on the job (id, tenant, allow list, limits), and MSG_EGRESS_END when
 * the job is over; the proxy reports every connection (MSG_EGRESS_CONN) and
 * then MSG_EGRESS_ENDED. It trusts nothing of a job's but what it accepts
 * on the job's listener, and nothing of a worker's at all.
 *
 * Start-up, in this order (docs/security.md, "Network by allowlist"):
 * parent-death signal (the proxy dies with sandqd); the host's own
 * addresses read (getifaddrs: after the uid change nothing changes, and
 * it needs no privilege, but before the filter, which refuses netlink);
 * the operator's settings parsed from argv; the uid and gid changed to
 * --uid (never root: it needs no privilege at all, accepting on descriptors
 * it is given and connecting out); no new privileges; a seccomp filter
 * that kills exec, ptrace, mounts, namespaces and module or key calls and
 * refuses every socket family but unix, inet and inet6.
 *
 *   sandq-egress [--uid N] [--hosts NAME=ADDR,...] [--allow-addrs CIDR,...]
 *                [--head-timeout-ms N] [--log-level L]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <uv.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "proxy.h"

#define CTL_FD 3

static struct egress_host hosts[EGRESS_HOSTS_MAX];
static size_t nhosts;
static struct egress_cidr allow[EGRESS_CIDRS_MAX], own[EGRESS_CIDRS_MAX];
static size_t nallow, nown;
static struct egress_proxy *proxy;
static uv_poll_t ctl_poll;

/* Sends a frame to sandqd; a channel that fails ends the proxy. */
static void
ctl_send(uint32_t type, uint32_t job, const void *data, size_t len)
{
	int rc = msg_send(CTL_FD, type, job, data, len, -1);

	if (rc < 0)
		fatalx("sandqd's channel: %s", strerror(-rc));
}

static void
on_report(void *arg, uint32_t job, const struct msg_egress_conn *c)
{
	(void)arg;
	ctl_send(MSG_EGRESS_CONN, job, c, sizeof(*c));
}

static void
on_ended(void *arg, uint32_t job, uint64_t dropped)
{
	(void)arg;
	ctl_send(MSG_EGRESS_ENDED, job, &dropped, sizeof(dropped));
}

/* One frame from sandqd. A malformed one means a confused peer: exit. */
static void
on_ctl(uv_poll_t *h, int status, int events)
{
	struct msg m;
	struct err e = { 0 };
	int rc;

	(void)events;
	if (status < 0)
		fatalx("sandqd's channel: %s", uv_strerror(status));
	msg_init(&m);
	rc = msg_recv(CTL_FD, &m, MSG_MAX);
	if (rc == -EAGAIN)
		return;
	if (rc == 0) {
		log_info("sandqd closed the channel: exiting");
		uv_poll_stop(h);
		uv_stop(h->loop);
		return;
	}
	if (rc < 0)
		fatalx("sandqd's channel: %s", strerror(-rc));
	if (m.hdr.type == MSG_EGRESS_JOB && m.len == sizeof(struct msg_egress_job) &&
	    m.fd >= 0) {
		struct msg_egress_job j;
		int fd = m.fd;

		memcpy(&j, m.data, sizeof(j));
		m.fd = -1;
		if (egress_proxy_job_add(proxy, m.hdr.job_id, &j, fd, &e) < 0)
			log_warnx("job %u: %s", (unsigned)m.hdr.job_id, e.msg);
	} else if (m.hdr.type == MSG_EGRESS_LISTEN && m.len == 0 && m.fd >= 0) {
		int fd = m.fd;

		m.fd = -1;
		if (egress_proxy_job_listen(proxy, m.hdr.job_id, fd, &e) < 0)
			log_warnx("job %u: %s", (unsigned)m.hdr.job_id, e.msg);
	} else if (m.hdr.type == MSG_EGRESS_END && m.len == 0 && m.fd < 0) {
		egress_proxy_job_end(proxy, m.hdr.job_id);
	} else {
		fatalx("unexpected frame %s (%zu bytes) from sandqd",
		    msg_type_name(m.hdr.type), m.len);
	}
	msg_clear(&m);
}

/*
 * Parses --hosts: NAME=ADDR or NAME:PORT=ADDR:PORT items (egress_host_item_parse()),
 * comma-separated; a name (with its port) may repeat, for more addresses.
 */
static void
parse_hosts(const char *s)
{
	char *copy = xstrdup(s), *save = NULL;

	for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		struct egress_host_item it;
		struct egress_host *h = NULL;
		struct err e = { 0 };

		if (egress_host_item_parse(tok, &it, &e) < 0)
			fatalx("--hosts: %s", e.msg);
		for (size_t i = 0; i < nhosts; i++)
			if (strcmp(hosts[i].name, it.name) == 0 && hosts[i].port == it.port)
				h = &hosts[i];
		if (h == NULL) {
			if (nhosts == EGRESS_HOSTS_MAX)
				fatalx("--hosts: more than %d names", EGRESS_HOSTS_MAX);
			h = &hosts[nhosts++];
			snprintf(h->name, sizeof(h->name), "%s", it.name);
			h->port = it.port;
		}
		if (h->naddr == EGRESS_HOST_ADDRS_MAX)
			fatalx("--hosts: more than %d addresses for %s", EGRESS_HOST_ADDRS_MAX,
			    it.name);
		h->addr[h->naddr++] = it.addr;
	}
	free(copy);
}

/* Parses --allow-addrs: CIDR ranges, comma-separated. */
static void
parse_allow(const char *s)
{
	char *copy = xstrdup(s), *save = NULL;
	struct err e = { 0 };

	for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (nallow == EGRESS_CIDRS_MAX)
			fatalx("--allow-addrs: more than %d ranges", EGRESS_CIDRS_MAX);
		if (egress_cidr_parse(tok, &allow[nallow++], &e) < 0)
			fatalx("--allow-addrs: %s", e.msg);
	}
	free(copy);
}

/* The host's own addresses, each as a one-address range. */
static void
read_own(void)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		fatal("getifaddrs");
	for (i = ifa; i != NULL && nown < EGRESS_CIDRS_MAX; i = i->ifa_next) {
		struct egress_cidr *c = &own[nown];

		if (i->ifa_addr == NULL)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			c->family = AF_INET;
			memcpy(c->addr, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, 4);
			c->bits = 32;
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			c->family = AF_INET6;
			memcpy(c->addr, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, 16);
			c->bits = 128;
		} else {
			continue;
		}
		nown++;
	}
	freeifaddrs(ifa);
}

/* Drops to uid (and the gid of the same number), keeping no group. */
static void
drop_to(uid_t uid)
{
	if (uid == 0)
		fatalx("--uid: never root");
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
	    setresuid(uid, uid, uid) < 0)
		fatal("drop to uid %u", (unsigned)uid);
	if (setresuid(0, 0, 0) == 0)
		fatalx("uid 0 could be taken back");
}

/*
 * A deny list: the proxy's own calls are libuv's, the resolver's and
 * OpenSSL's, too many to list without breaking on a library update; what it
 * must never do is listed, and kills it.
 */
static void
filter_install(void)
{
	static const int kill[] = {
		SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(mount),
		SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot),
		SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(init_module), SCMP_SYS(finit_module),
		SCMP_SYS(delete_module), SCMP_SYS(kexec_load), SCMP_SYS(bpf),
		SCMP_SYS(perf_event_open), SCMP_SYS(keyctl), SCMP_SYS(add_key),
		SCMP_SYS(request_key), SCMP_SYS(open_by_handle_at),
		SCMP_SYS(userfaultfd), SCMP_SYS(setuid), SCMP_SYS(setgid),
		SCMP_SYS(setresuid), SCMP_SYS(setresgid), SCMP_SYS(setgroups),
		SCMP_SYS(fsopen), SCMP_SYS(fsmount), SCMP_SYS(open_tree),
		SCMP_SYS(move_mount), SCMP_SYS(pidfd_getfd), SCMP_SYS(reboot),
		SCMP_SYS(swapon), SCMP_SYS(swapoff),
	};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int rc = ctx == NULL ? -ENOMEM : 0;

	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	for (size_t i = 0; rc == 0 && i < sizeof(kill) / sizeof(kill[0]); i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	/* Sockets: unix (a resolver's nscd), inet and inet6; nothing else. */
	for (int fam = 0; rc == 0 && fam <= AF_INET6; fam++)
		if (fam != AF_UNIX && fam != AF_INET && fam != AF_INET6)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT),
			    SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fam));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
		    SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)AF_INET6));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	if (rc < 0)
		fatalx("seccomp filter: %s", strerror(-rc));
}

int
main(int argc, char **argv)
{
	struct egress_opts o = { 0 };
	uv_loop_t *loop = uv_default_loop();
	pid_t parent = getppid();
	long uid = 0;

	log_procinit("egress");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t n;

		if (v == NULL)
			fatalx("%s: needs a value", argv[i]);
		if (strcmp(argv[i], "--uid") == 0 && parse_i64(v, 1, 0x7fffffff, &n) == 0)
			uid = (long)n;
		else if (strcmp(argv[i], "--hosts") == 0)
			parse_hosts(v);
		else if (strcmp(argv[i], "--allow-addrs") == 0)
			parse_allow(v);
		else if (strcmp(argv[i], "--head-timeout-ms") == 0 &&
		    parse_i64(v, 1, 600000, &n) == 0)
			o.head_timeout_ms = (unsigned)n;
		else if (strcmp(argv[i], "--log-level") == 0 && log_setlevel(v) == 0)
			;
		else
			fatalx("unknown option or bad value: %s %s", argv[i], v);
		i++;
	}
	read_own();
	if (uid != 0)
		drop_to((uid_t)uid);
	else if (getuid() == 0)
		fatalx("--uid: the proxy does not run as root");
	/* A change of credentials clears the parent-death signal: again. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		fatalx("sandqd is gone");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fatal("no_new_privs");
	if (egress_sni_init() < 0)
		fatalx("OpenSSL: no context for reading ClientHellos");
	filter_install();
	o.hosts = hosts;
	o.nhosts = nhosts;
	o.allow = allow;
	o.nallow = nallow;
	o.own = own;
	o.nown = nown;
	o.report = on_report;
	o.ended = on_ended;
	proxy = egress_proxy_new(loop, &o);
	if (uv_poll_init(loop, &ctl_poll, CTL_FD) < 0 ||
	    uv_poll_start(&ctl_poll, UV_READABLE, on_ctl) < 0)
		fatalx("fd %d is not sandqd's channel", CTL_FD);
	log_info("ready: %zu names of the operator's, %zu address ranges allowed", nhosts,
	    nallow);
	uv_run(loop, UV_RUN_DEFAULT);
	egress_proxy_free(proxy);
	egress_sni_done();
	return 0;
}
