/*
 * egress_job_test.c - net "allow" jobs end to end: sandqd with one worker
 * and its egress proxy, a private redis-server, and a web server of the
 * test's own on the host's 127.0.0.1 that the proxy knows as pypi.example
 * (egress_hosts, with 127.0.0.1/32 in egress_allow_addrs, as an operator's
 * test setting would). private.example resolves to 10.0.0.1, refused
 * before any connection. Nothing reaches any other address.
 *
 * Each test runs a job and reads its output, its result's egress list
 * (the raw result from Redis, decoded by proto/result.c) and the audit
 * trail (sandq audit --json).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../libsandq/sandq.h"
#include "../proto/keys.h"
#include "../proto/result.h"
#include "harness.h"

static struct harness H;
static pid_t web_pid = -1;
static int web_port;
static char marker[64], webdir[300];

/* socketserver's, not http.server's server: no reverse lookup at bind. */
static const char web_py[] =
	"import http.server, os, socketserver, sys\n"
	"os.chdir(sys.argv[1])\n"
	"class H(http.server.SimpleHTTPRequestHandler):\n"
	"    def log_message(self, *a): pass\n"
	"class S(socketserver.ThreadingMixIn, socketserver.TCPServer):\n"
	"    daemon_threads = True\n"
	"    def handle_error(self, *a): pass\n"
	"s = S(('127.0.0.1', 0), H)\n"
	"os.write(1, b'%d\\n' % s.server_address[1])\n"
	"s.serve_forever()\n";

static void
web_start(void)
{
	char path[400], buf[32] = "";
	size_t got = 0;
	int p[2];
	FILE *f;

	snprintf(webdir, sizeof(webdir), "%s/web", H.dir);
	cr_assert_eq(mkdir(webdir, 0755), 0);
	snprintf(path, sizeof(path), "%s/hello.txt", webdir);
	cr_assert_not_null(f = fopen(path, "w"));
	fprintf(f, "%s\n", marker);
	fclose(f);
	snprintf(path, sizeof(path), "%s/big.bin", webdir);
	cr_assert_not_null(f = fopen(path, "w"));
	for (int i = 0; i < 512 * 1024; i++)
		fputc('x', f);
	fclose(f);
	cr_assert_eq(pipe(p), 0);
	web_pid = fork();
	cr_assert(web_pid >= 0);
	if (web_pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execl("/usr/bin/python3", "python3", "-c", web_py, webdir, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (got < sizeof(buf) - 1 && strchr(buf, '\n') == NULL) {
		ssize_t n = read(p[0], buf + got, sizeof(buf) - 1 - got);

		cr_assert(n > 0, "the web server did not start");
		got += (size_t)n;
	}
	close(p[0]);
	web_port = atoi(buf);
	cr_assert(web_port > 0);
}

static void
setup(void)
{
	char allow[160], hosts[160], modes[] = "net_modes=none, unix, allow";
	const char *extra[] = { "--set", modes, "--set", allow, "--set", hosts,
		"--set", "egress_allow_addrs=127.0.0.1/32", "--set", "egress_conns_max=4",
		/* The tenant's own rate; the other tests' files fit in one second's worth. */
		"--set", "tenant.default.egress_rate_bytes=131072",
		NULL };

	harness_marker(marker, sizeof(marker), "egress-job");
	harness_redis_start(&H);
	web_start();
	snprintf(allow, sizeof(allow), "net_allow=pypi.example:%d, private.example:%d, "
	    "pypi.example:443", web_port, web_port);
	/* pypi.example on port 443 is the web server's port: a stand-in, as an
	 * operator points a name at a mirror (egress_hosts NAME:PORT=ADDR:PORT). */
	snprintf(hosts, sizeof(hosts), "egress_hosts=pypi.example=127.0.0.1, "
	    "private.example=10.0.0.1, pypi.example:443=127.0.0.1:%d", web_port);
	harness_sandqd_start(&H, 1, extra);
}

static void
teardown(void)
{
	if (web_pid > 0) {
		kill(web_pid, SIGKILL);
		waitpid(web_pid, NULL, 0);
	}
	harness_stop(&H);
}

TestSuite(egress_job, .init = setup, .fini = teardown, .timeout = 180);

/* The job's raw result, from Redis, decoded. */
static struct result *
raw_result(const char *id)
{
	char key[512];
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *rep;
	struct result *r = NULL;
	struct err e = { 0 };

	cr_assert(rc != NULL && rc->err == 0);
	cr_assert(key_res(key, "sandq", "default", id) >= 0);
	rep = redisCommand(rc, "GET %s", key);
	cr_assert(rep != NULL && rep->type == REDIS_REPLY_STRING);
	cr_assert_eq(payload_result_decode(rep->str, rep->len, &r, &e), 0, "%s", e.msg);
	freeReplyObject(rep);
	redisFree(rc);
	return r;
}

/* The row of r's egress list for host:port, outcome and reason (NULL: any). */
static const struct result_egress *
row(const struct result *r, const char *host, int port, bool allowed, const char *why)
{
	for (size_t i = 0; i < r->negress; i++)
		if (strcmp(r->egress[i].host, host) == 0 && r->egress[i].port == port &&
		    r->egress[i].allowed == allowed && (why == NULL ||
		    (r->egress[i].reason != NULL && strcmp(r->egress[i].reason, why) == 0)))
			return &r->egress[i];
	return NULL;
}

/* Lines of text holding every one of needles. */
static int
lines_with(const char *text, const char *const *needles)
{
	int n = 0;

	for (const char *l = text; l != NULL && *l; ) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		char *line = strndup(l, len);
		bool all = true;

		for (size_t i = 0; needles[i] != NULL; i++)
			all &= strstr(line, needles[i]) != NULL;
		n += all;
		free(line);
		l = end ? end + 1 : NULL;
	}
	return n;
}

static struct sandq_result *
run_allow(struct sandq *c, const char *script, const char *const *allow)
{
	char port[32];
	const char *env[] = { port, NULL };
	struct sandq_job_opts o = { .net = "allow", .allow = allow, .env = env };

	snprintf(port, sizeof(port), "PORT=%d", web_port);
	return harness_sh(c, script, &o);
}

Test(egress_job, a_job_reaches_its_allowed_name_and_nothing_else_all_on_record)
{
	static const char script[] =
		"curl -sS --max-time 60 http://pypi.example:$PORT/hello.txt\n"
		"curl -s -o /dev/null -w 'other %{http_code}\\n' http://other.example:$PORT/\n"
		"curl -s -o /dev/null -w 'private %{http_code}\\n' "
		"    http://private.example:$PORT/\n"
		/* Without the proxy: no route, no resolver, not the host's loopback. */
		"curl -s -o /dev/null --noproxy '*' --max-time 20 http://127.0.0.1:$PORT/ "
		"    || echo direct-refused\n"
		"python3 -c \"\n"
		"import socket\n"
		"for f, t in ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM)):\n"
		"    s = socket.socket(f, t)\n"
		"    try:\n"
		"        s.connect(('192.0.2.1', 53)); s.send(b'x'); print('sent')\n"
		"    except OSError as e: print('unreachable', e.errno)\n"
		"try:\n"
		"    socket.getaddrinfo('pypi.example', 80); print('resolved')\n"
		"except OSError: print('no resolver')\n"
		"\"\n"
		"echo \"proxy=$HTTP_PROXY\"\n";
	char allowed[64], args[600], *out = NULL, cmd[1200];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, script, allow);
	cr_assert_str_eq(r->status, "ok", "%s %s %s", r->status, r->stdout_data,
	    r->stderr_data);
	cr_expect(strstr((char *)r->stdout_data, marker) != NULL, "%s", r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "other 403\n") != NULL, "%s",
	    r->stdout_data);
	/* Outside the job's list (the tenant's would have allowed it). */
	cr_expect(strstr((char *)r->stdout_data, "private 403\n") != NULL, "%s",
	    r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "direct-refused\n") != NULL, "%s",
	    r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "unreachable 101\nunreachable 101\n"
	    "no resolver\n") != NULL, "%s", r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "proxy=http://127.0.0.1:3128\n") != NULL,
	    "%s", r->stdout_data);

	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "pypi.example", web_port, true, NULL), "no row");
	cr_expect_eq(g->conns, 1);
	cr_expect(g->down > strlen(marker));
	cr_expect_null(g->reason);
	cr_assert_not_null(g = row(raw, "other.example", web_port, false, NULL));
	cr_expect_str_eq(g->reason, "not in the job's allow list");
	cr_assert_not_null(g = row(raw, "private.example", web_port, false, NULL));
	cr_expect_eq(raw->negress, 3);
	result_free(raw);

	snprintf(args, sizeof(args), "audit --json --job %s", r->id);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s", harness_build_dir(), H.url,
	    args);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	snprintf(allowed, sizeof(allowed), "\"target\":\"pypi.example:%d\"", web_port);
	cr_expect_eq(lines_with(out, (const char *const[]){ "\"action\":\"egress\"", allowed,
	    "\"allowed\":true", NULL }), 1, "%s", out);
	snprintf(allowed, sizeof(allowed), "\"target\":\"other.example:%d\"", web_port);
	cr_expect_eq(lines_with(out, (const char *const[]){ "\"action\":\"egress_refused\"",
	    allowed, "\"allowed\":false", NULL }), 1, "%s", out);
	free(out);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * The issue's own example: allow ["pypi.example:443"] reaches the stand-in
 * the operator put behind pypi.example:443 (egress_hosts, the test's web
 * server on a free port: a test never binds 443 on a shared host), by that
 * name and port, and nothing else: not the same server by its own port,
 * not another name on 443. The result and the audit name pypi.example:443.
 */
Test(egress_job, allow_pypi_example_443_reaches_its_stand_in_and_nothing_else)
{
	static const char script[] =
		"curl -sS --max-time 60 http://pypi.example:443/hello.txt\n"
		"curl -s -o /dev/null -w 'own-port %{http_code}\\n' http://pypi.example:$PORT/\n"
		"curl -s -o /dev/null -w 'other %{http_code}\\n' http://other.example:443/\n";
	const char *allow[] = { "pypi.example:443", NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	r = run_allow(c, script, allow);
	cr_assert_str_eq(r->status, "ok", "%s %s %s", r->status, r->stdout_data,
	    r->stderr_data);
	cr_expect(strstr((char *)r->stdout_data, marker) != NULL, "%s", r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "own-port 403\n") != NULL, "%s",
	    r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "other 403\n") != NULL, "%s",
	    r->stdout_data);
	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "pypi.example", 443, true, NULL), "no row");
	cr_expect_eq(g->conns, 1);
	cr_expect(g->down > strlen(marker));
	cr_expect_not_null(row(raw, "pypi.example", web_port, false, NULL));
	cr_expect_not_null(row(raw, "other.example", 443, false, NULL));
	result_free(raw);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * The tenant's egress_rate_bytes (128 KiB/s, one second deep) holds a
 * 512 KiB download: the result's row and the audit event say for how long,
 * by the proxy's clock; at least (S - 2 * rate - one read) / rate = 1.5 s
 * (egress_test.c explains the bound). Never the test's own clock.
 */
Test(egress_job, the_tenants_rate_holds_a_download_and_the_result_says_so)
{
	char allowed[64], args[600], *out = NULL, cmd[1200];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, "curl -s -o /dev/null -w 'big %{size_download}\n' "
	    "http://pypi.example:$PORT/big.bin", allow);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->stderr_data);
	cr_expect(strstr((char *)r->stdout_data, "big 524288\n") != NULL, "%s",
	    r->stdout_data);
	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "pypi.example", web_port, true, NULL), "no row");
	cr_expect(g->down > 512 * 1024);
	cr_expect(g->throttled_ms >= (512 - 2 * 128 - 64) * 1000 / 128, "held %llu ms",
	    (unsigned long long)g->throttled_ms);
	result_free(raw);

	snprintf(args, sizeof(args), "audit --json --job %s", r->id);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s", harness_build_dir(), H.url,
	    args);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect_eq(lines_with(out, (const char *const[]){ "\"action\":\"egress\"",
	    "by the job's egress rate (egress_rate_bytes)", NULL }), 1, "%s", out);
	free(out);
	sandq_result_free(r);
	sandq_close(c);
}

/* Runs script on sandbox sbx with net "allow" and no list of its own. */
static struct sandq_result *
run_on_sandbox(struct sandq *c, const char *sbx, const char *script)
{
	char port[32];
	const char *env[] = { port, NULL };
	struct sandq_job_opts o = { .net = "allow", .env = env, .sandbox = sbx };

	snprintf(port, sizeof(port), "PORT=%d", web_port);
	return harness_sh(c, script, &o);
}

/* sandbox.create (or fork to `to`) on sbx with allow (NULL: none). */
static struct sandq_result *
sandbox_op(struct sandq *c, const char *op, const char *sbx, const char *to,
    const char *const *allow)
{
	struct sandq_op_args a = { .sandbox = sbx, .to = to };
	struct sandq_job_opts o = { .allow = allow };
	struct sandq_result *r = NULL;

	cr_assert_eq(sandq_call(c, op, &a, &o, 120000, &r), 0, "%s", sandq_last_error(c));
	return r;
}

/*
 * A sandbox created with allow gives its list to the net "allow" runs on
 * it that name none (and a fork keeps it); one created without gives none;
 * a sandbox's pattern outside the tenant's list is rejected naming the field.
 */
Test(egress_job, a_sandboxs_allow_list_serves_its_runs_within_the_tenants)
{
	static const char script[] =
		"curl -sS --max-time 60 http://pypi.example:$PORT/hello.txt\n"
		"curl -s -o /dev/null -w 'private %{http_code}\\n' "
		"    http://private.example:$PORT/\n";
	char allowed[64], sbx[96], fork[96], bare[96];
	const char *allow[] = { allowed, NULL }, *wide[] = { "*.files.example", NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	snprintf(sbx, sizeof(sbx), "net-%s", marker);
	snprintf(fork, sizeof(fork), "netfork-%s", marker);
	snprintf(bare, sizeof(bare), "netbare-%s", marker);

	r = sandbox_op(c, "sandbox.create", sbx, NULL, allow);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->error_message);
	sandq_result_free(r);
	r = run_on_sandbox(c, sbx, script);
	cr_assert_str_eq(r->status, "ok", "%s %s %s", r->status, r->error_message,
	    r->stderr_data);
	cr_expect(strstr((char *)r->stdout_data, marker) != NULL, "%s", r->stdout_data);
	/* Outside the sandbox's list, although inside the tenant's. */
	cr_expect(strstr((char *)r->stdout_data, "private 403\n") != NULL, "%s",
	    r->stdout_data);
	raw = raw_result(r->id);
	cr_expect_not_null(row(raw, "pypi.example", web_port, true, NULL));
	cr_expect_not_null(row(raw, "private.example", web_port, false,
	    "not in the job's allow list"));
	result_free(raw);
	sandq_result_free(r);

	/* A fork keeps the list. */
	r = sandbox_op(c, "sandbox.fork", sbx, fork, NULL);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->error_message);
	sandq_result_free(r);
	r = run_on_sandbox(c, fork, script);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->error_message);
	cr_expect(strstr((char *)r->stdout_data, marker) != NULL, "%s", r->stdout_data);
	sandq_result_free(r);

	/* Created without: a run naming none is rejected naming the field. */
	r = sandbox_op(c, "sandbox.create", bare, NULL, NULL);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->error_message);
	sandq_result_free(r);
	r = run_on_sandbox(c, bare, script);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect(r->error_message != NULL && strstr(r->error_message, "field 'allow'") &&
	    strstr(r->error_message, "created without allow"), "%s", r->error_message);
	sandq_result_free(r);

	/* A sandbox's list never widens the tenant's. */
	snprintf(bare, sizeof(bare), "netwide-%s", marker);
	r = sandbox_op(c, "sandbox.create", bare, NULL, wide);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_message, "field 'allow': '*.files.example' is not within "
	    "tenant 'default''s net_allow");
	sandq_result_free(r);
	sandq_close(c);
}

/* sandq sh --net allow --allow: the list arrives; outside the tenant's, refused by name. */
Test(egress_job, the_cli_passes_net_and_allow)
{
	char cmd[1200], *out = NULL;
	int rc;

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s sh --net allow --allow "
	    "pypi.example:%d 'curl -sS --max-time 60 http://pypi.example:%d/hello.txt' 2>&1",
	    harness_build_dir(), H.url, web_port, web_port);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect(strstr(out, marker) != NULL, "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s sh --net allow --allow "
	    "pypi.example:%d --allow other.example true 2>&1", harness_build_dir(), H.url,
	    web_port);
	rc = harness_run(cmd, &out);
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "field 'allow': 'other.example' is not within tenant "
	    "'default''s net_allow") != NULL, "%s", out);
	free(out);
	/* sandq sandbox create --allow: the list its runs take. */
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s sandbox create clinet-%s --allow "
	    "pypi.example:%d 2>&1 && %s/sandq --redis %s sh --net allow --sandbox clinet-%s "
	    "'curl -sS --max-time 60 http://pypi.example:%d/hello.txt' 2>&1",
	    harness_build_dir(), H.url, marker, web_port, harness_build_dir(), H.url, marker,
	    web_port);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect(strstr(out, marker) != NULL, "%s", out);
	free(out);
	/* A list without the mode is the CLI's usage error, sent nowhere. */
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s sh --allow pypi.example true 2>&1",
	    harness_build_dir(), H.url);
	rc = harness_run(cmd, &out);
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "--allow needs --net allow") != NULL, "%s", out);
	free(out);
}

/*
 * net "allow" with cases: each case runs in its own sandbox, which gets its
 * own listener (the proxy's job keeps one list, limits and report): every
 * case reaches the allowed name, and the result's row counts them all.
 */
Test(egress_job, each_case_of_a_net_allow_run_has_its_way_out)
{
	char allowed[64], port[32], want[96];
	const char *allow[] = { allowed, NULL }, *env[] = { port, NULL };
	struct sandq_case cs[3];
	struct sandq_job_opts o = { .net = "allow", .allow = allow, .env = env,
		.cases = cs, .ncases = 3 };
	struct sandq *c = harness_client(&H);
	struct sandq_cases *out = NULL;
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	snprintf(port, sizeof(port), "PORT=%d", web_port);
	snprintf(want, sizeof(want), "%s\n", marker);
	for (size_t i = 0; i < 3; i++)
		cs[i] = (struct sandq_case){ .expect = want, .expect_len = strlen(want) };
	r = harness_sh(c, "curl -sS --max-time 60 http://pypi.example:$PORT/hello.txt", &o);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->status, r->error_message);
	cr_assert_eq(sandq_cases_decode(r, &out), 0);
	cr_expect_eq(out->passed, 3, "passed %llu of 3: %s", (unsigned long long)out->passed,
	    out->ncases > 0 ? (char *)out->cases[0].stderr_data : "");
	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "pypi.example", web_port, true, NULL), "no row");
	cr_expect_eq(g->conns, 3);
	result_free(raw);
	sandq_cases_free(out);
	sandq_result_free(r);
	sandq_close(c);
}

Test(egress_job, a_pattern_outside_the_tenants_list_is_rejected_naming_the_field)
{
	const char *allow[] = { "*.example", NULL };
	const char *allow2[] = { "pypi.example:80", NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	r = run_allow(c, "true", allow);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_message, "field 'allow': pattern '*.example': a wildcard "
	    "needs a domain of two labels at least ('*.example.org')");
	sandq_result_free(r);
	r = run_allow(c, "true", allow2);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_message, "field 'allow': 'pypi.example:80' is not within "
	    "tenant 'default''s net_allow");
	sandq_result_free(r);
	sandq_close(c);
}

Test(egress_job, a_job_cannot_widen_its_way_out_and_a_flood_is_capped)
{
	static const char script[] =
		/* Its own proxy variables change nothing: there is no other route. */
		"HTTP_PROXY=http://127.0.0.1:1 http_proxy=http://127.0.0.1:1 "
		"    curl -s -o /dev/null -w 'own %{http_code}\\n' --max-time 20 "
		"    http://pypi.example:$PORT/hello.txt\n"
		/* The proxy's port answers HTTP only: no control side to reach. */
		"curl -s -o /dev/null -w 'origin %{http_code}\\n' --noproxy '*' "
		"    http://127.0.0.1:3128/\n"
		"python3 -c \"\n"
		"import socket\n"
		"held = [socket.create_connection(('127.0.0.1', 3128)) for i in range(4)]\n"
		"over = [socket.create_connection(('127.0.0.1', 3128)) for i in range(3)]\n"
		"print('capped', sum(1 for s in over if s.recv(100).startswith(b'HTTP/1.1 503')))\n"
		"\"\n";
	char allowed[64];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, script, allow);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->stdout_data, r->stderr_data);
	cr_expect(strstr((char *)r->stdout_data, "own 000\n") != NULL, "%s", r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "origin 400\n") != NULL, "%s",
	    r->stdout_data);
	cr_expect(strstr((char *)r->stdout_data, "capped 3\n") != NULL, "%s", r->stdout_data);
	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "?", 0, false, "the job's connection limit is reached"));
	cr_expect_eq(g->conns, 3);
	result_free(raw);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * The test's package index and git repository, in the web server's folder:
 * a one-file wheel under simple/demo-pkg/ (PEP 503's layout), and a bare
 * repository served over git's dumb HTTP (update-server-info).
 */
static void
index_and_repo(void)
{
	static const char mk[] =
		"set -e; cd '%s'\n"
		"mkdir -p simple/demo-pkg files src\n"
		"/usr/bin/python3 - <<'PY'\n"
		"import base64, hashlib, zipfile\n"
		"files = {'demo_pkg/__init__.py': b'MARK = \"%s\"\\n',\n"
		"         'demo_pkg-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: demo-pkg\\nVersion: 1.0\\n',\n"
		"         'demo_pkg-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}\n"
		"rec = ''.join('%%s,sha256=%%s,%%d\\n' %% (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode(), len(d)) for n, d in files.items())\n"
		"rec += 'demo_pkg-1.0.dist-info/RECORD,,\\n'\n"
		"with zipfile.ZipFile('files/demo_pkg-1.0-py3-none-any.whl', 'w') as z:\n"
		"    for n, d in files.items(): z.writestr(n, d)\n"
		"    z.writestr('demo_pkg-1.0.dist-info/RECORD', rec)\n"
		"PY\n"
		"echo '<a href=\"../../files/demo_pkg-1.0-py3-none-any.whl\">demo_pkg-1.0-py3-none-any.whl</a>' "
		"    > simple/demo-pkg/index.html\n"
		"cd src && git init -q && echo '%s' > mark.txt && git add mark.txt\n"
		"git -c user.name=t -c user.email=t@t commit -qm one\n"
		"cd .. && git clone -q --bare src repo.git && git -C repo.git update-server-info\n";
	char cmd[4096], *out = NULL;

	snprintf(cmd, sizeof(cmd), mk, webdir, marker, marker);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	free(out);
}

Test(egress_job, pip_and_git_reach_a_local_index_and_repository_through_the_proxy)
{
	static const char script[] =
		"python3 -m pip download -q --no-cache-dir --no-deps -d /tmp/dl "
		"    --index-url http://pypi.example:$PORT/simple/ --trusted-host pypi.example "
		"    demo-pkg 2>&1 | tail -3\n"
		"python3 -c \"import sys, zipfile; "
		"print(zipfile.ZipFile('/tmp/dl/demo_pkg-1.0-py3-none-any.whl')"
		".read('demo_pkg/__init__.py').decode().strip())\"\n"
		"git clone -q http://pypi.example:$PORT/repo.git /tmp/repo 2>&1 | tail -3\n"
		"cat /tmp/repo/mark.txt\n";
	char allowed[64], want[128];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	const struct result_egress *g;

	index_and_repo();
	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, script, allow);
	cr_assert_str_eq(r->status, "ok", "%s %s", r->stdout_data, r->stderr_data);
	snprintf(want, sizeof(want), "MARK = \"%s\"\n", marker);
	cr_expect(strstr((char *)r->stdout_data, want) != NULL, "pip: %s", r->stdout_data);
	snprintf(want, sizeof(want), "\n%s\n", marker);
	cr_expect(strstr((char *)r->stdout_data, want) != NULL, "git: %s", r->stdout_data);
	raw = raw_result(r->id);
	cr_assert_not_null(g = row(raw, "pypi.example", web_port, true, NULL));
	cr_expect_geq(g->conns, 3, "pip's index and wheel, git's refs and objects");
	result_free(raw);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * The proxy's accepted sockets live in a net "allow" job's namespace: the
 * spawner never shares it with a later job, while jobs of other modes go on
 * taking turns in theirs (docs/security.md, "The network namespace").
 */
Test(egress_job, a_net_allow_jobs_namespace_is_never_the_next_jobs)
{
	static const char ns[] = "readlink /proc/self/ns/net";
	char allowed[64], first[64], second[64];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, "curl -s -o /dev/null http://pypi.example:$PORT/hello.txt; "
	    "readlink /proc/self/ns/net", allow);
	cr_assert_str_eq(r->status, "ok", "%s", r->stderr_data);
	snprintf(first, sizeof(first), "%s", (char *)r->stdout_data);
	sandq_result_free(r);
	r = harness_sh(c, ns, NULL);
	cr_assert_str_eq(r->status, "ok");
	snprintf(second, sizeof(second), "%s", (char *)r->stdout_data);
	cr_expect_str_neq(first, second, "the next job got the allow job's namespace");
	sandq_result_free(r);
	/* Sharing goes on for the jobs after it. */
	r = harness_sh(c, ns, NULL);
	cr_expect_str_eq((char *)r->stdout_data, second);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * A proxy that hangs delays a net "allow" job's result, never keeps it:
 * the result goes out once its hold ends (dispatcher/egress.c), with what
 * was reported (here nothing: the stopped proxy accepted nothing).
 */
/* The pid of sandqd's sandq-egress (its child named so), or -1. */
static pid_t
egress_pid(void)
{
	DIR *dir = opendir("/proc");
	struct dirent *de;
	pid_t found = -1;

	cr_assert_not_null(dir);
	while ((de = readdir(dir)) != NULL && found < 0) {
		char path[300], comm[32] = "";
		int ppid = 0;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%*d (%31[^)]) %*c %d", comm, &ppid) == 2 &&
		    ppid == H.sandqd_pid && strcmp(comm, "sandq-egress") == 0)
			found = atoi(de->d_name);
		fclose(f);
	}
	closedir(dir);
	return found;
}

Test(egress_job, a_hung_proxy_never_keeps_a_result)
{
	char allowed[64];
	const char *allow[] = { allowed, NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	struct result *raw;
	pid_t pids[1] = { egress_pid() };

	cr_assert(pids[0] > 0, "no sandq-egress below sandqd");
	cr_assert_eq(kill(pids[0], SIGSTOP), 0);
	snprintf(allowed, sizeof(allowed), "pypi.example:%d", web_port);
	r = run_allow(c, "curl -s -o /dev/null --max-time 2 "
	    "http://pypi.example:$PORT/hello.txt; echo curl $?", allow);
	kill(pids[0], SIGCONT);
	cr_assert_str_eq(r->status, "ok", "%s", r->stderr_data);
	cr_expect_str_eq((char *)r->stdout_data, "curl 28\n");
	raw = raw_result(r->id);
	cr_expect_eq(raw->negress, 0);
	result_free(raw);
	sandq_result_free(r);
	sandq_close(c);
}
