/*
 * health_test.c - what an operator's tooling reads of sandqd (issue 18):
 * `sandq status` exits 1 when no host is live and 0 with one, with
 * --json's documented schema; sandqd tells $NOTIFY_SOCKET READY=1 once it
 * serves and STOPPING=1 when it drains (systemd's Type=notify, read here
 * from a datagram socket the test makes); SIGHUP applies a reloadable
 * option, reports one that needs a restart, and says RELOADING=1 then
 * READY=1; log_format = json makes every line one JSON object.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

static struct harness H;
static int notify_fd = -1;

static void
teardown(void)
{
	harness_stop(&H);
	if (notify_fd >= 0)
		close(notify_fd);
	unsetenv("NOTIFY_SOCKET");
}

TestSuite(health, .fini = teardown, .timeout = 120);

/* `sandq status ARGS`: its exit status, stdout in *out (owned). */
static int
status_run(const char *args, char **out)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s status %s 2>/dev/null",
	    harness_build_dir(), H.url, args);
	return harness_run(cmd, out);
}

/* A datagram socket in the harness's folder, named by $NOTIFY_SOCKET. */
static void
notify_listen(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	cr_assert(strlen(H.dir) + 8 < sizeof(a.sun_path), "%s: too long", H.dir);
	memcpy(a.sun_path, H.dir, strlen(H.dir));
	memcpy(a.sun_path + strlen(H.dir), "/notify", 8);
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert(notify_fd >= 0);
	cr_assert(bind(notify_fd, (struct sockaddr *)&a, sizeof(a)) == 0, "%s",
	    strerror(errno));
	setenv("NOTIFY_SOCKET", a.sun_path, 1);
}

/* Reads datagrams until one holds want (the suite's timeout bounds it). */
static void
notify_expect(const char *want)
{
	char buf[4096];

	for (;;) {
		ssize_t n = recv(notify_fd, buf, sizeof(buf) - 1, 0);

		cr_assert(n >= 0 || errno == EINTR, "recv: %s", strerror(errno));
		if (n < 0)
			continue;
		buf[n] = '\0';
		if (strstr(buf, want) != NULL)
			return;
	}
}

/* harness_wait_for() predicate: sandqd's log holds the string. */
static bool
log_says(void *want)
{
	char cmd[1024], *out = NULL;
	bool found;

	snprintf(cmd, sizeof(cmd), "cat %s", H.log);
	harness_run(cmd, &out);
	found = strstr(out, want) != NULL;
	free(out);
	return found;
}

Test(health, status_exits_1_when_no_host_is_live)
{
	char *out = NULL;
	json_t *o;

	harness_redis_start(&H);
	cr_expect_eq(status_run("--json", &out), 1);
	o = json_loads(out, 0, NULL);
	cr_assert_not_null(o, "%s", out);
	cr_expect_eq(json_integer_value(json_object_get(o, "live_hosts")), 0);
	cr_expect_eq(json_integer_value(json_object_get(o, "workers")), 0);
	cr_expect(json_is_array(json_object_get(o, "hosts")));
	json_decref(o);
	free(out);
	cr_expect_eq(status_run("", NULL), 1);
}

Test(health, status_exits_0_with_a_live_host_and_keeps_its_schema)
{
	const char *host_keys[] = { "host", "workers", "busy", "age_ms", "audit_lost", "live" };
	const char *tenant_keys[] = { "name", "queued", "pulling", "running", "done_1m",
	    "refused_1m", "share" };
	char *out = NULL;
	json_t *o, *h, *t;

	harness_start(&H, 1, NULL);
	cr_expect_eq(status_run("--json", &out), 0);
	o = json_loads(out, 0, NULL);
	cr_assert_not_null(o, "%s", out);
	cr_expect_eq(json_integer_value(json_object_get(o, "live_hosts")), 1);
	cr_expect_eq(json_integer_value(json_object_get(o, "workers")), 1);
	h = json_array_get(json_object_get(o, "hosts"), 0);
	t = json_array_get(json_object_get(o, "tenants"), 0);
	cr_assert_not_null(h);
	cr_assert_not_null(t);
	for (size_t i = 0; i < sizeof(host_keys) / sizeof(host_keys[0]); i++)
		cr_expect_not_null(json_object_get(h, host_keys[i]), "hosts[]: %s", host_keys[i]);
	for (size_t i = 0; i < sizeof(tenant_keys) / sizeof(tenant_keys[0]); i++)
		cr_expect_not_null(json_object_get(t, tenant_keys[i]), "tenants[]: %s",
		    tenant_keys[i]);
	cr_expect(json_is_true(json_object_get(h, "live")));
	json_decref(o);
	free(out);
	cr_expect_eq(status_run("", NULL), 0);
}

Test(health, sandqd_notifies_ready_then_stopping)
{
	harness_redis_start(&H);
	notify_listen();
	harness_sandqd_start(&H, 1, NULL);
	notify_expect("READY=1");
	cr_expect_eq(harness_stop_sandqd(&H, 30000), 0);
	notify_expect("STOPPING=1");
}

Test(health, sighup_applies_a_reloadable_option_and_keeps_the_others)
{
	char conf[400], *args[3];
	FILE *f;

	harness_redis_start(&H);
	snprintf(conf, sizeof(conf), "%s/sandq.conf", H.dir);
	f = fopen(conf, "w");
	cr_assert_not_null(f);
	fputs("[sandqd]\nmax_attempts = 3\nlease_ms = 30000\n", f);
	fclose(f);
	notify_listen();
	args[0] = "--config";
	args[1] = conf;
	args[2] = NULL;
	harness_sandqd_start(&H, 1, (const char *const *)args);
	notify_expect("READY=1");

	f = fopen(conf, "w");
	cr_assert_not_null(f);
	fputs("[sandqd]\nmax_attempts = 5\nlease_ms = 9000\n", f);
	fclose(f);
	cr_assert(kill(H.sandqd_pid, SIGHUP) == 0);
	notify_expect("RELOADING=1");
	notify_expect("READY=1");
	cr_expect(harness_wait_for(log_says, "SIGHUP: max_attempts = 5 (was 3)", 30000));
	cr_expect(log_says("SIGHUP: lease_ms = 9000 needs a restart; 30000 kept"));
	cr_expect(log_says("SIGHUP: reloaded"));

	/* A file that no longer parses changes nothing. */
	f = fopen(conf, "w");
	cr_assert_not_null(f);
	fputs("[sandqd]\nmax_attempts = many\n", f);
	fclose(f);
	cr_assert(kill(H.sandqd_pid, SIGHUP) == 0);
	cr_expect(harness_wait_for(log_says, "configuration unchanged", 30000));
	cr_expect_eq(harness_stop_sandqd(&H, 30000), 0);
}

Test(health, log_format_json_writes_one_object_a_line)
{
	const char *extra[] = { "--set", "log_format=json", NULL };
	char cmd[1024], *out = NULL, *save = NULL;
	int lines = 0;

	harness_start(&H, 1, extra);
	cr_expect_eq(harness_stop_sandqd(&H, 30000), 0);
	snprintf(cmd, sizeof(cmd), "cat %s", H.log);
	harness_run(cmd, &out);
	for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
		json_t *o;

		/*
		 * Under `make SANITIZER=address`, the sanitizer's own runtime
		 * writes a warning to stderr when a worker's clone switches
		 * stacks: "==PID==WARNING: ..." and two lines after it. Those
		 * are not sandq's lines; every other line must be JSON.
		 */
		if (strncmp(l, "==", 2) == 0 ||
		    strcmp(l, "False positive error reports may follow") == 0 ||
		    strncmp(l, "For details see https://github.com/google/sanitizers", 52) == 0)
			continue;
		o = json_loads(l, 0, NULL);
		cr_expect_not_null(o, "not JSON: %s", l);
		if (o != NULL) {
			cr_expect_eq(json_object_size(o), 4, "%s", l);
			cr_expect_not_null(json_string_value(json_object_get(o, "process")));
		}
		json_decref(o);
		lines++;
	}
	cr_expect_gt(lines, 2);
	free(out);
}
