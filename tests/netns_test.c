/*
 * netns_test.c - a worker's jobs take turns in one network namespace, and
 * none leaves anything in it for the next (docs/security.md, "The network
 * namespace").
 *
 * The namespace is the spawner's (sandbox/spawn.c), owned by the host's
 * user namespace: a job holds no capability over it. Each case is real
 * jobs through a real sandqd with ONE worker, so consecutive jobs meet in
 * the same namespace when it is shared; a job prints its namespace's
 * identity (the inode of /proc/self/ns/net), so each case also says
 * whether the namespace was shared or renewed, and the cases that prove
 * "nothing is left" prove it on a namespace that was in fact shared.
 *
 * What a job could leave, and where each is checked:
 *  - settings, addresses, routes, the loopback's state: the job's attempts
 *    fail (no capability), and the next job reads what a pristine
 *    namespace shows (nothing_a_job_changes_reaches_the_next);
 *  - sockets: listeners, bound UDP ports and abstract unix names of a
 *    daemon the job leaves running die with its pid namespace before the
 *    next job's init is cloned (a_daemons_sockets_are_gone_for_the_next);
 *  - sockets the kernel keeps after their process (TIME_WAIT): the next
 *    job gets a new namespace (a_socket_left_in_time_wait_renews_the_namespace);
 *  - two jobs at once never share one (concurrent_jobs_never_share_a_namespace);
 *  - job_netns = fresh gives every job its own (fresh_gives_every_job_its_own).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 120000

static struct harness H;

static void
setup_workers(int workers, const char *const *extra)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, workers, extra);
}

static void
setup(void)
{
	setup_workers(1, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(netns, .init = setup, .fini = teardown, .timeout = 240);

/*
 * Runs src with python3 (an exec job: python3 -c SRC) with a 20 s wall
 * limit; asserts it ended ok. With sandbox, on that persistent sandbox:
 * the worker then makes the next sandbox while the job runs, once it has
 * run 10 ms (worker/job.c IDLE_AFTER_MS), in its other namespace
 * (two_namespaces_take_turns_and_nothing_is_left); without, the next
 * sandbox is made after the job and takes the namespace it leaves.
 */
static struct sandq_result *
run_py(struct sandq *c, const char *src, const char *sandbox)
{
	const char *argv[] = { "python3", "-c", src, NULL };
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	o.limits.wall_ms = 20000;
	o.sandbox = sandbox;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "submit: %s",
	    sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "wait: %s", sandq_last_error(c));
	cr_assert_str_eq(r->status, "ok", "status %s, stderr: %.*s", r->status,
	    (int)r->stderr_len, r->stderr_data ? (char *)r->stderr_data : "");
	return r;
}

static struct sandq_result *
py(struct sandq *c, const char *src)
{
	return run_py(c, src, NULL);
}

/* The value after "key " on its own line of r's stdout (a static copy). */
static const char *
line_of(const struct sandq_result *r, const char *key)
{
	static char buf[8192];
	char pat[64];
	const char *p, *end;

	snprintf(pat, sizeof(pat), "%s ", key);
	for (p = (const char *)r->stdout_data; p != NULL && *p != '\0';
	    p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, pat, strlen(pat)) == 0)
			break;
	cr_assert(p != NULL && *p != '\0', "no '%s' line in: %s", key,
	    (const char *)r->stdout_data);
	p += strlen(pat);
	end = strchr(p, '\n');
	if (end == NULL)
		end = p + strlen(p);
	cr_assert((size_t)(end - p) < sizeof(buf));
	memcpy(buf, p, (size_t)(end - p));
	buf[end - p] = '\0';
	return buf;
}

/* The job's namespace identity, as a fresh heap string. */
static char *
ns_of(const struct sandq_result *r)
{
	return strdup(line_of(r, "netns"));
}

/* The first lines of every probe: which namespace the job is in. */
#define PROBE_NS "import os, socket, fcntl, struct, errno\n" \
	"print('netns', os.readlink('/proc/self/ns/net'))\n"

/*
 * What a job can read of its namespace: settings, the loopback's flags,
 * MTU and addresses, the route tables, and every socket table. Each line
 * is compared between a pristine namespace and one a job tried to change.
 */
static const char state_probe[] = PROBE_NS
    "def sysctl(p):\n"
    "    with open('/proc/sys/net/' + p) as f: return f.read().strip()\n"
    "for p in ['ipv4/tcp_keepalive_time', 'ipv4/ip_local_port_range',\n"
    "          'ipv4/ping_group_range', 'ipv4/tcp_no_metrics_save',\n"
    "          'ipv4/ip_unprivileged_port_start', 'core/somaxconn',\n"
    "          'ipv4/conf/lo/forwarding', 'ipv6/conf/lo/disable_ipv6']:\n"
    "    print('sysctl:' + p, sysctl(p))\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "ifr = struct.pack('16sH14s', b'lo', 0, b'')\n"
    "print('flags', struct.unpack('16sH', fcntl.ioctl(s, 0x8913, ifr)[:18])[1])\n"
    "print('mtu', struct.unpack('16si', fcntl.ioctl(s, 0x8921, ifr)[:20])[1])\n"
    "print('addr', socket.inet_ntoa(fcntl.ioctl(s, 0x8915, ifr)[20:24]))\n"
    "s.close()\n"
    "for t in ['route', 'if_inet6', 'tcp', 'tcp6', 'udp', 'udp6',\n"
    "          'raw', 'raw6', 'unix']:\n"
    "    with open('/proc/net/' + t) as f: rows = f.read().splitlines()[1:]\n"
    "    print('table:' + t, '|'.join(sorted(rows)))\n";

/*
 * A job that tries every change it could make to its namespace without a
 * socket left behind: settings, the loopback down, its MTU, an address, a
 * route. Prints "changed N" for the attempts that did not fail.
 */
static const char change_probe[] = PROBE_NS
    "changed = 0\n"
    "for p, v in [('ipv4/tcp_keepalive_time', '1'), ('ipv4/ip_local_port_range', '2000 2001'),\n"
    "             ('ipv4/ping_group_range', '0 2147483647'), ('ipv4/tcp_no_metrics_save', '0'),\n"
    "             ('ipv4/ip_unprivileged_port_start', '0'), ('core/somaxconn', '1'),\n"
    "             ('ipv4/conf/lo/forwarding', '1'), ('ipv6/conf/lo/disable_ipv6', '1')]:\n"
    "    try:\n"
    "        with open('/proc/sys/net/' + p, 'w') as f: f.write(v)\n"
    "        changed += 1; print('wrote', p)\n"
    "    except OSError as e: pass\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "def ioc(req, data):\n"
    "    global changed\n"
    "    try: fcntl.ioctl(s, req, data); changed += 1; print('ioctl', hex(req))\n"
    "    except OSError: pass\n"
    "ioc(0x8914, struct.pack('16sH14s', b'lo', 0, b''))\n"              /* SIOCSIFFLAGS: down */
    "ioc(0x8922, struct.pack('16si12s', b'lo', 1280, b''))\n"           /* SIOCSIFMTU */
    "sin = struct.pack('HH4s8s', socket.AF_INET, 0, socket.inet_aton('10.9.8.7'), b'')\n"
    "ioc(0x8916, struct.pack('16s', b'lo') + sin)\n"                    /* SIOCSIFADDR */
    "rt = struct.pack('Q16s16s16sH', 0, sin, sin, sin, 3) + bytes(80)\n"
    "ioc(0x890B, rt)\n"                                                 /* SIOCADDRT */
    "s.close()\n"
    "print('changed', changed)\n";

/*
 * Two jobs without sockets in a row share the namespace: the case the
 * other tests rely on to prove that sharing leaves nothing.
 */
Test(netns, a_job_without_sockets_leaves_the_namespace_to_the_next)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *a = py(c, PROBE_NS), *b = py(c, PROBE_NS);
	char *na = ns_of(a), *nb = ns_of(b);

	cr_expect_str_eq(na, nb, "two jobs without sockets on one worker: %s then %s", na, nb);
	free(na);
	free(nb);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

Test(netns, nothing_a_job_changes_reaches_the_next)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *before = py(c, state_probe), *change = py(c, change_probe);
	struct sandq_result *after = py(c, state_probe);
	char *n0 = ns_of(before), *n1 = ns_of(change), *n2 = ns_of(after);

	cr_expect_str_eq(line_of(change, "changed"), "0",
	    "a job changed its shared namespace: %s", (const char *)change->stdout_data);
	cr_expect_str_eq(n0, n1, "the changing job did not run in the shared namespace");
	cr_expect_str_eq(n1, n2, "the next job did not run in the shared namespace");
	cr_expect_str_eq((const char *)after->stdout_data + strlen("netns ") + strlen(n2),
	    (const char *)before->stdout_data + strlen("netns ") + strlen(n0),
	    "the namespace differs after the job:\nbefore:%s\nafter:%s",
	    (const char *)before->stdout_data, (const char *)after->stdout_data);
	cr_expect_str_eq(line_of(after, "sysctl:ipv4/tcp_no_metrics_save"), "1");
	cr_expect_str_eq(line_of(after, "addr"), "127.0.0.1");
	free(n0);
	free(n1);
	free(n2);
	sandq_result_free(before);
	sandq_result_free(change);
	sandq_result_free(after);
	sandq_close(c);
}

/*
 * A daemon the job leaves: a TCP listener, a bound UDP port and an
 * abstract unix name, then the job ends. The next job finds none: it can
 * bind all three itself, and a connection to the port is refused.
 */
Test(netns, a_daemons_sockets_are_gone_for_the_next)
{
	struct sandq *c = harness_client(&H);
	char marker[64], leave[1024], look[1024];
	struct sandq_result *a, *b;
	char *na, *nb;

	harness_marker(marker, sizeof(marker), "sandq-netns");
	snprintf(leave, sizeof(leave), PROBE_NS
	    "if os.fork() == 0:\n"
	    "    os.setsid()\n"
	    "    t = socket.socket(); t.bind(('127.0.0.1', 47011)); t.listen()\n"
	    "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47012))\n"
	    "    x = socket.socket(socket.AF_UNIX); x.bind('\\0%s'); x.listen()\n"
	    "    open('/tmp/up', 'w').close()\n"
	    "    import time; time.sleep(3600)\n"
	    "import time\n"
	    "while not os.path.exists('/tmp/up'): time.sleep(0.01)\n"
	    "print('left', 1)\n"
	    "time.sleep(0.1)\n", marker);
	snprintf(look, sizeof(look), PROBE_NS
	    "c = socket.socket()\n"
	    "print('connect', c.connect_ex(('127.0.0.1', 47011)) == errno.ECONNREFUSED)\n"
	    "t = socket.socket(); t.bind(('127.0.0.1', 47011)); t.listen()\n"
	    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47012))\n"
	    "x = socket.socket(socket.AF_UNIX); x.bind('\\0%s')\n"
	    "print('bound all')\n"
	    "import time; time.sleep(0.1)\n", marker);
	a = py(c, leave);
	cr_assert_str_eq(line_of(a, "left"), "1", "%s", (const char *)a->stdout_data);
	b = py(c, look);
	na = ns_of(a);
	nb = ns_of(b);
	cr_expect_str_eq(na, nb, "the next job did not run in the shared namespace");
	cr_expect_str_eq(line_of(b, "connect"), "True", "the left listener answered");
	cr_expect(strstr((const char *)b->stdout_data, "bound all") != NULL, "%s",
	    (const char *)b->stdout_data);
	free(na);
	free(nb);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*
 * Persistent runs: the worker makes the next sandbox while a job runs (one
 * that runs past the worker's 10 ms: these sleep 100 ms), in its other
 * namespace (sandbox/spawn.c, NET_SLOTS), so a job's successor
 * runs in a second namespace and the job after that takes the first one
 * again, once its job has ended. A daemon's sockets left in the first are gone for
 * that third job, as for a successor in a_daemons_sockets_are_gone_for_the_next.
 */
Test(netns, two_namespaces_take_turns_and_nothing_is_left)
{
	struct sandq *c = harness_client(&H);
	char marker[64], leave[1024], look[1024];
	struct sandq_op_args args = { 0 };
	struct sandq_result *a, *b, *d;
	char *na, *nb, *nd, sbx[64];

	harness_marker(marker, sizeof(marker), "sandq-netns2");
	snprintf(sbx, sizeof(sbx), "netns-%d", (int)getpid());
	args.sandbox = sbx;
	cr_assert_eq(sandq_call(c, "sandbox.create", &args, NULL, WAIT_MS, &a), 0,
	    "create: %s", sandq_last_error(c));
	cr_assert_str_eq(a->status, "ok", "create: %s", a->status);
	sandq_result_free(a);
	snprintf(leave, sizeof(leave), PROBE_NS
	    "if os.fork() == 0:\n"
	    "    os.setsid()\n"
	    "    t = socket.socket(); t.bind(('127.0.0.1', 47021)); t.listen()\n"
	    "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47022))\n"
	    "    x = socket.socket(socket.AF_UNIX); x.bind('\\0%s'); x.listen()\n"
	    "    open('/tmp/up', 'w').close()\n"
	    "    import time; time.sleep(3600)\n"
	    "import time\n"
	    "while not os.path.exists('/tmp/up'): time.sleep(0.01)\n"
	    "print('left', 1)\n"
	    "time.sleep(0.1)\n", marker);
	snprintf(look, sizeof(look), PROBE_NS
	    "c = socket.socket()\n"
	    "print('connect', c.connect_ex(('127.0.0.1', 47021)) == errno.ECONNREFUSED)\n"
	    "t = socket.socket(); t.bind(('127.0.0.1', 47021)); t.listen()\n"
	    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47022))\n"
	    "x = socket.socket(socket.AF_UNIX); x.bind('\\0%s')\n"
	    "print('bound all')\n"
	    "import time; time.sleep(0.1)\n", marker);
	a = run_py(c, leave, sbx);
	cr_assert_str_eq(line_of(a, "left"), "1", "%s", (const char *)a->stdout_data);
	b = run_py(c, look, sbx);
	d = run_py(c, look, sbx);
	na = ns_of(a);
	nb = ns_of(b);
	nd = ns_of(d);
	cr_expect_str_neq(na, nb, "the sandbox made during a persistent run shared its namespace");
	cr_expect_str_eq(na, nd, "the third job did not take the first one's namespace "
	    "(%s, %s, %s)", na, nb, nd);
	for (struct sandq_result *r = b; r != NULL; r = r == b ? d : NULL) {
		cr_expect_str_eq(line_of(r, "connect"), "True", "the left listener answered");
		cr_expect(strstr((const char *)r->stdout_data, "bound all") != NULL, "%s",
		    (const char *)r->stdout_data);
	}
	free(na);
	free(nb);
	free(nd);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_result_free(d);
	sandq_close(c);
}

/*
 * A connection closed by the job itself stays in TIME_WAIT after it, in
 * the kernel: the next job gets a new namespace, with no such socket.
 */
Test(netns, a_socket_left_in_time_wait_renews_the_namespace)
{
	struct sandq *c = harness_client(&H);
	static const char tw[] = PROBE_NS
	    "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n"
	    "k = socket.create_connection(l.getsockname()); a, _ = l.accept()\n"
	    "k.close(); a.recv(1); a.close()\n"
	    "print('tw', sum(1 for r in open('/proc/net/tcp').read().splitlines()[1:]"
	    " if r.split()[3] == '06'))\n";
	static const char look[] = PROBE_NS
	    "print('tcp', len(open('/proc/net/tcp').read().splitlines()) - 1)\n";
	struct sandq_result *a = py(c, tw), *b = py(c, look), *d = py(c, look);
	char *na = ns_of(a), *nb = ns_of(b), *nd = ns_of(d);

	cr_assert_str_eq(line_of(a, "tw"), "1", "the job left no TIME_WAIT: %s",
	    (const char *)a->stdout_data);
	cr_expect_str_neq(na, nb, "a namespace holding a TIME_WAIT socket was shared");
	cr_expect_str_eq(line_of(b, "tcp"), "0");
	cr_expect_str_eq(nb, nd, "the new namespace is not shared on");
	free(na);
	free(nb);
	free(nd);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_result_free(d);
	sandq_close(c);
}

/*** Two workers: a namespace each ***/

static void
setup_two(void)
{
	setup_workers(2, NULL);
}

TestSuite(netns_two, .init = setup_two, .fini = teardown, .timeout = 240);

/*
 * While one job listens on a port, a job on the other worker connects to
 * it (refused: another namespace) and binds the same port itself.
 */
Test(netns_two, concurrent_jobs_never_share_a_namespace)
{
	struct sandq *c = harness_client(&H);
	char marker[64], listen[768], id[SANDQ_ID_MAX + 1];
	struct sandq_job_opts o = { 0 };
	struct sandq_result *a = NULL, *b;
	char *na, *nb;

	/* About 6 s: the time the other job has to find the listener. */
	harness_marker(marker, sizeof(marker), "sleep 6");
	snprintf(listen, sizeof(listen), PROBE_NS
	    "t = socket.socket(); t.bind(('127.0.0.1', 47021)); t.listen()\n"
	    "import subprocess; subprocess.run(['sh', '-c', 'exec %s'])\n", marker);
	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_python(c, listen, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert(harness_wait_job(&H, marker, 0, 30000) > 0, "the listening job never ran");
	b = py(c, PROBE_NS
	    "k = socket.socket()\n"
	    "print('connect', k.connect_ex(('127.0.0.1', 47021)) == errno.ECONNREFUSED)\n"
	    "t = socket.socket(); t.bind(('127.0.0.1', 47021)); t.listen()\n"
	    "print('bound')\n");
	cr_expect_str_eq(line_of(b, "connect"), "True", "reached the other job's listener");
	cr_expect(strstr((const char *)b->stdout_data, "bound") != NULL);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &a), 0, "%s", sandq_last_error(c));
	cr_assert_str_eq(a->status, "ok");
	na = ns_of(a);
	nb = ns_of(b);
	cr_expect_str_neq(na, nb, "two jobs at once in one namespace");
	free(na);
	free(nb);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}

/*** job_netns = fresh ***/

static void
setup_fresh(void)
{
	static const char *const extra[] = { "--set", "job_netns=fresh", NULL };

	setup_workers(1, extra);
}

TestSuite(netns_fresh, .init = setup_fresh, .fini = teardown, .timeout = 240);

Test(netns_fresh, fresh_gives_every_job_its_own)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *a = py(c, PROBE_NS), *b = py(c, PROBE_NS);
	char *na = ns_of(a), *nb = ns_of(b);

	cr_expect_str_neq(na, nb, "job_netns=fresh, yet one namespace: %s", na);
	free(na);
	free(nb);
	sandq_result_free(a);
	sandq_result_free(b);
	sandq_close(c);
}
