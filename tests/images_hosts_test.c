/*
 * images_hosts_test.c - two sandqd hosts on one Redis and one private
 * registry, each with its own image cache: a private redis-server and two
 * sandqd (harness.c: host-a and host-b, two workers each), a private
 * docker-registry on loopback, and busybox images written by hand
 * (imgbuild.c), as in images_run_test.
 *
 * Each test proves one behaviour: jobs on one image land on both hosts
 * and each host pulls it once (its log and the audit trail say so), and
 * `sandq image ls` shows both hosts holding it; the registry dying during
 * a pull (a proxy on a fixed port cuts the transfer and kills it) makes
 * the waiting jobs rejected with code image naming the image, leaves
 * nothing half-done in either cache, and a job succeeds once the registry
 * is back; `sandq image pull` shows its progress (lines, a bar on a
 * terminal) and its result, pulls what a tenant's name names, and a
 * reference outside image_sources, or host, is refused.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

#define JOBS 16			/* jobs of the first test, across both hosts */

static struct harness h;
static struct harness_registry reg;
static char src[300], sources[300], plain[200], timeout[64];
static int proxy_port, proxy_lfd = -1;
static pid_t host_b;

static const char *const ENV[] = { "PATH=/bin", NULL };

static struct imgb_entry BASE[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "bin/sleep", 'l', "busybox", 0, 0 },
	{ "hello.txt", 'f', "hello from the image\n", 21, 0 },
	{ NULL, 0, NULL, 0, 0 },
};
/* 4 MiB of bytes that do not compress: a transfer long enough to cut. */
static const struct imgb_entry BIG[] = {
	{ "big.bin", 'f', NULL, 4u << 20, 0 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** Fixture ***/

/* Waits until host name has written its status (it serves Redis). */
static void
wait_host(const char *name)
{
	redisContext *rc = redisConnect("127.0.0.1", h.port);

	cr_assert(rc != NULL && rc->err == 0);
	for (int i = 0; i < 300; i++) {
		redisReply *r = redisCommand(rc, "HEXISTS sandq:hosts %s", name);
		bool there = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;

		freeReplyObject(r);
		if (there) {
			redisFree(rc);
			return;
		}
		usleep(100000);
	}
	redisFree(rc);
	cr_assert_fail("host %s never reported", name);
}

static void
setup(void)
{
	struct imgb_image img = { .env = ENV, .layers = { BASE } };
	struct imgb_image big = { .env = ENV, .layers = { BASE, BIG } };
	struct imgb_desc d;
	char s[400];

	imgb_busybox(&BASE[1]);
	snprintf(src, sizeof(src), "/tmp/sandq-imghosts-XXXXXX");
	cr_assert(mkdtemp(src) != NULL);
	harness_registry_start(&reg, src);
	snprintf(s, sizeof(s), "%s/layout", src);
	imgb_write(s, "img", &img, &d);
	imgb_write(s, "big", &big, &d);
	snprintf(s, sizeof(s), "oci:%s/layout:img", src);
	harness_registry_push(&reg, s, "test/img:1");
	snprintf(s, sizeof(s), "oci:%s/layout:big", src);
	harness_registry_push(&reg, s, "test/big:1");
	/* The proxy's port is in the config: taken now, kept by the tests. */
	proxy_port = 0;
	proxy_lfd = harness_listen(&proxy_port);
	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/test/*,"
	    "docker://127.0.0.1:%d/test/*", reg.addr, proxy_port);
	snprintf(plain, sizeof(plain), "image_plain_http=%s,127.0.0.1:%d", reg.addr,
	    proxy_port);
	snprintf(timeout, sizeof(timeout), "image_pull_timeout_ms=30000");
	{
		const char *const extra[] = { "--set", "host=host-a", "--set", sources,
		    "--set", plain, "--set", timeout, NULL };
		const char *const sets[] = { sources, plain, timeout, NULL };

		harness_start(&h, 2, extra);
		host_b = harness_start_host(&h, "b", 2, 200000, sets);
		cr_assert(host_b > 0);
		wait_host("host-b");
	}
}

static void
teardown(void)
{
	/* IMAGES_HOSTS_LOGS=1: both hosts' logs, for a failure's story. */
	if (getenv("IMAGES_HOSTS_LOGS") != NULL && h.dir[0]) {
		char cmd[800], *out = NULL;

		snprintf(cmd, sizeof(cmd), "tail -n 60 %s %s/sandqd-b.log", h.log, h.dir);
		harness_run(cmd, &out);
		fprintf(stderr, "%s\n", out ? out : "");
		free(out);
	}
	if (host_b > 0) {
		kill(host_b, SIGTERM);
		waitpid(host_b, NULL, 0);
		host_b = 0;
	}
	harness_stop(&h);
	harness_registry_stop(&reg);
	if (proxy_lfd >= 0)
		close(proxy_lfd);
	proxy_lfd = -1;
	if (src[0])
		harness_rmtree(src);
}

TestSuite(images_hosts, .init = setup, .fini = teardown, .timeout = 300);

/*** Helpers ***/

/* A reference to repo (e.g. "test/img:1") in the registry itself. */
static const char *
ref(const char *repo)
{
	return harness_registry_ref(&reg, repo);
}

/* The same through the proxy's port. */
static const char *
via_proxy(const char *repo)
{
	static char buf[200];

	snprintf(buf, sizeof(buf), "docker://127.0.0.1:%d/%s", proxy_port, repo);
	return buf;
}

/* Submits sh -c script on image; the id into id. */
static void
submit_on(struct sandq *c, const char *image, const char *script, char *id)
{
	const char *const argv[] = { "sh", "-c", script, NULL };
	struct sandq_job_opts o = { .image = image };

	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
}

static struct sandq_result *
wait_for(struct sandq *c, const char *id)
{
	struct sandq_result *r = NULL;

	cr_assert_eq(sandq_wait(c, id, 180000, &r), 0, "%s", sandq_last_error(c));
	return r;
}

/* Lines of the log at path holding needle. */
static int
log_count(const char *path, const char *needle)
{
	char cmd[900], *out = NULL;
	int n;

	snprintf(cmd, sizeof(cmd), "grep -c -F -- '%s' %s", needle, path);
	harness_run(cmd, &out);
	n = out != NULL ? atoi(out) : 0;
	free(out);
	return n;
}

/* The logs of host-a and host-b. */
static const char *
log_of(char which)
{
	static char buf[2][400];

	if (which == 'a')
		return h.log;
	snprintf(buf[1], sizeof(buf[1]), "%s/sandqd-b.log", h.dir);
	return buf[1];
}

/* The image cache of host-a or host-b. */
static const char *
cache_of(char which)
{
	static char buf[2][400];

	snprintf(buf[which == 'b'], sizeof(buf[0]), "%s/%s/images", h.dir,
	    which == 'a' ? "state" : "state-b");
	return buf[which == 'b'];
}

/* Entries of the folder sub of a cache (0 if it does not exist). */
static int
entries(const char *cache, const char *sub)
{
	char path[600];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", cache, sub);
	if ((dir = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(dir)) != NULL)
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(dir);
	return n;
}

/*
 * Audit events of the default tenant's stream with category image and
 * action, on target (NULL: any), counted per host (a, b) and in all.
 * detail_has (or NULL): every such event's detail must hold it.
 */
static int
audit_count(const char *action, const char *target, const char *host,
    const char *detail_has)
{
	redisContext *rc = redisConnect("127.0.0.1", h.port);
	redisReply *r;
	int n = 0;

	cr_assert(rc != NULL && rc->err == 0);
	r = redisCommand(rc, "XRANGE sandq:{default}:audit - +");
	cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *f = r->element[i]->element[1];
		const char *cat = "", *act = "", *tgt = "", *hst = "", *det = "";

		for (size_t k = 0; k + 1 < f->elements; k += 2) {
			const char *name = f->element[k]->str, *v = f->element[k + 1]->str;

			if (strcmp(name, "category") == 0)
				cat = v;
			else if (strcmp(name, "action") == 0)
				act = v;
			else if (strcmp(name, "target") == 0)
				tgt = v;
			else if (strcmp(name, "host") == 0)
				hst = v;
			else if (strcmp(name, "detail") == 0)
				det = v;
		}
		if (strcmp(cat, "image") != 0 || strcmp(act, action) != 0 ||
		    (target != NULL && strcmp(tgt, target) != 0) ||
		    (host != NULL && strcmp(hst, host) != 0))
			continue;
		if (detail_has != NULL)
			cr_expect(strstr(det, detail_has) != NULL, "image/%s detail: %s",
			    action, det);
		n++;
	}
	freeReplyObject(r);
	redisFree(rc);
	return n;
}

/* Runs the sandq CLI with args (shell words); stdout into *out, stderr to err_path. */
static int
cli(const char *args, const char *err_path, char **out)
{
	char cmd[2000];

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s 2>%s", harness_build_dir(),
	    h.url, args, err_path);
	return harness_run(cmd, out);
}

static char *
slurp(const char *path)
{
	char cmd[600], *out = NULL;

	snprintf(cmd, sizeof(cmd), "cat %s", path);
	harness_run(cmd, &out);
	return out;
}

/*** Tests ***/

/* `sandq image ls --json`'s host entry named host, or NULL. (Owned by all.) */
static json_t *
ls_host(json_t *all, const char *host)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(all, "hosts"), i, e)
		if (strcmp(json_string_value(json_object_get(e, "host")), host) == 0)
			return e;
	return NULL;
}

/* The digest host lists for reference, or NULL. */
static const char *
ls_digest(json_t *all, const char *host, const char *reference)
{
	json_t *e = ls_host(all, host), *img;
	size_t i;

	json_array_foreach(json_object_get(e, "images"), i, img)
		if (strcmp(json_string_value(json_object_get(img, "reference")), reference) == 0)
			return json_string_value(json_object_get(img, "digest"));
	return NULL;
}

Test(images_hosts, jobs_on_one_image_land_on_both_hosts_each_pulling_it_once)
{
	struct sandq *c = harness_client(&h);
	char ids[JOBS][SANDQ_ID_MAX + 1], needle[300], err[400], *out = NULL;
	int on_a = 0, on_b = 0;
	json_t *all = NULL;

	for (int i = 0; i < JOBS; i++)
		submit_on(c, ref("test/img:1"), "sleep 0.5; cat /hello.txt", ids[i]);
	for (int i = 0; i < JOBS; i++) {
		struct sandq_result *r = wait_for(c, ids[i]);

		cr_expect_str_eq(r->status, "ok", "%s: %s", r->status,
		    r->error_message ? r->error_message : "");
		cr_expect_str_eq((const char *)r->stdout_data, "hello from the image\n");
		on_a += r->host != NULL && strcmp(r->host, "host-a") == 0;
		on_b += r->host != NULL && strcmp(r->host, "host-b") == 0;
		sandq_result_free(r);
	}
	cr_expect_gt(on_a, 0, "no job ran on host-a (%d on host-b)", on_b);
	cr_expect_gt(on_b, 0, "no job ran on host-b (%d on host-a)", on_a);
	/* One pull per host, for every job on it: the logs and the trail. */
	snprintf(needle, sizeof(needle), "image %s: pulling", ref("test/img:1"));
	cr_expect_eq(log_count(log_of('a'), needle), 1, "host-a's pulls");
	cr_expect_eq(log_count(log_of('b'), needle), 1, "host-b's pulls");
	cr_expect_eq(audit_count("pulled", ref("test/img:1"), "host-a",
	    "\"layers_unpacked\":1"), 1);
	cr_expect_eq(audit_count("pulled", ref("test/img:1"), "host-b",
	    "\"layers_unpacked\":1"), 1);
	cr_expect_eq(audit_count("pull_started", ref("test/img:1"), NULL, NULL), 2);
	cr_expect_eq(audit_count("pull_failed", NULL, NULL, NULL), 0);

	/* Both hosts list it, with one digest (listed after a pull, sent every 2 s). */
	snprintf(err, sizeof(err), "%s/ls.err", h.dir);
	for (int i = 0; i < 100; i++) {
		json_decref(all);
		free(out);
		out = NULL;
		cr_assert_eq(cli("image ls --json", err, &out), 0, "%s", out);
		all = json_loads(out, 0, NULL);
		cr_assert_not_null(all, "not JSON: %s", out);
		if (ls_digest(all, "host-a", ref("test/img:1")) != NULL &&
		    ls_digest(all, "host-b", ref("test/img:1")) != NULL)
			break;
		usleep(200000);
	}
	cr_assert_not_null(ls_digest(all, "host-a", ref("test/img:1")), "%s", out);
	cr_assert_not_null(ls_digest(all, "host-b", ref("test/img:1")), "%s", out);
	cr_expect_str_eq(ls_digest(all, "host-a", ref("test/img:1")),
	    ls_digest(all, "host-b", ref("test/img:1")));
	cr_expect_eq(json_integer_value(json_object_get(ls_host(all, "host-a"),
	    "images_total")), 1);
	json_decref(all);
	free(out);
	/* The table: a line per host holding it. */
	cr_assert_eq(cli("image ls", err, &out), 0);
	{
		int lines = 0;

		for (char *p = out; (p = strstr(p, "test/img:1")) != NULL; p++)
			lines++;
		cr_expect_eq(lines, 2, "%s", out);
		cr_expect(strstr(out, "host-a") != NULL && strstr(out, "host-b") != NULL,
		    "%s", out);
		cr_expect(strstr(out, "sha256:") != NULL, "%s", out);
	}
	free(out);
	sandq_close(c);
}

Test(images_hosts, a_registry_dying_during_a_pull_rejects_the_waiting_jobs_and_leaves_nothing)
{
	struct sandq *c = harness_client(&h);
	char ids[4][SANDQ_ID_MAX + 1], id[SANDQ_ID_MAX + 1], shown[200];
	struct sandq_result *r;
	pid_t proxy;
	int st;

	/* The registry is killed a megabyte into the 4 MiB layer. */
	proxy = harness_proxy_start(proxy_lfd, reg.port, reg.pid, 1u << 20, false);
	proxy_lfd = -1;
	snprintf(shown, sizeof(shown), "%s", via_proxy("test/big:1"));
	for (int i = 0; i < 4; i++)
		submit_on(c, shown, "cat /hello.txt", ids[i]);
	for (int i = 0; i < 4; i++) {
		r = wait_for(c, ids[i]);
		cr_expect_str_eq(r->status, "rejected");
		cr_expect_str_eq(r->error_code ? r->error_code : "", "image");
		cr_expect(r->error_message != NULL && strstr(r->error_message, shown) != NULL,
		    "the message does not name the image: %s", r->error_message);
		sandq_result_free(r);
	}
	cr_assert_eq(waitpid(proxy, &st, 0), proxy);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the proxy did not cut the transfer");
	cr_expect_geq(audit_count("pull_failed", shown, NULL, "\"error\":"), 1);
	cr_expect_eq(audit_count("pulled", shown, NULL, NULL), 0);
	/* Nothing half-done on either host: no record, reference, layer, stray. */
	for (const char *w = "ab"; *w; w++) {
		pid_t pids[4];
		char oci[500];

		cr_expect_eq(entries(cache_of(*w), "images/sha256"), 0, "host-%c", *w);
		cr_expect_eq(entries(cache_of(*w), "refs"), 0, "host-%c", *w);
		cr_expect_eq(entries(cache_of(*w), "layers/sha256"), 0, "host-%c", *w);
		cr_expect_eq(entries(cache_of(*w), "tmp"), 0, "host-%c", *w);
		snprintf(oci, sizeof(oci), "%s/oci", cache_of(*w));
		cr_expect_eq(harness_pgrep(oci, pids, 4), 0, "host-%c: skopeo left running", *w);
	}

	/* The registry back (same storage, a new port), the proxy passing all. */
	harness_registry_stop(&reg);
	harness_registry_start(&reg, src);
	{
		int port = proxy_port, lfd = harness_listen(&port);

		proxy = harness_proxy_start(lfd, reg.port, 0, SIZE_MAX, false);
	}
	submit_on(c, shown, "cat /hello.txt", id);
	r = wait_for(c, id);
	cr_expect_str_eq(r->status, "ok", "%s: %s", r->status,
	    r->error_message ? r->error_message : "");
	cr_expect_str_eq((const char *)r->stdout_data, "hello from the image\n");
	sandq_result_free(r);
	cr_expect_eq(audit_count("pulled", shown, NULL, NULL), 1);
	kill(proxy, SIGKILL);
	waitpid(proxy, NULL, 0);
	sandq_close(c);
}

/* Whether each phase of the records in text (one JSON object a line or
 * record) comes in the order fetch, verify, unpack, done. */
static int
phase_rank(const char *phase)
{
	static const char *const order[] = { "fetch", "verify", "unpack", "done" };

	for (int i = 0; i < 4; i++)
		if (strcmp(phase, order[i]) == 0)
			return i;
	return -1;
}

Test(images_hosts, image_pull_shows_progress_and_the_image_and_refuses_other_sources)
{
	char err[400], args[600], first[64] = "", *out = NULL, *errs, *p;
	json_t *j, *img;
	const char *host;
	int rc;

	snprintf(err, sizeof(err), "%s/pull.err", h.dir);
	/* Not a terminal: a line per step, then the image on stdout. */
	snprintf(args, sizeof(args), "image pull %s", ref("test/img:1"));
	rc = cli(args, err, &out);
	errs = slurp(err);
	cr_assert_eq(rc, 0, "stdout: %s\nstderr: %s", out, errs);
	cr_expect(strstr(out, "pulled ") != NULL && strstr(out, ref("test/img:1")) != NULL,
	    "%s", out);
	cr_expect(strstr(out, "digest    sha256:") != NULL, "%s", out);
	cr_expect(strstr(out, "platform  linux/amd64") != NULL, "%s", out);
	cr_expect(strstr(errs, ": fetching") != NULL, "%s", errs);
	cr_expect(strstr(errs, ": verifying") != NULL, "%s", errs);
	cr_expect(strstr(errs, ": unpacking layer 1/1") != NULL, "%s", errs);
	cr_expect(strstr(errs, ": done  sha256:") != NULL, "%s", errs);
	/* "pulled REF on HOST in N ms" */
	if ((p = strstr(out, " on ")) != NULL)
		sscanf(p + 4, "%63s", first);
	cr_expect(strcmp(first, "host-a") == 0 || strcmp(first, "host-b") == 0, "%s", out);
	free(out);
	free(errs);

	/* --json --quiet: no progress; the same image, cached where it was pulled. */
	snprintf(args, sizeof(args), "image pull --json --quiet %s", ref("test/img:1"));
	cr_assert_eq(cli(args, err, &out), 0, "%s", out);
	errs = slurp(err);
	cr_expect_str_eq(errs, "");
	free(errs);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	img = json_object_get(j, "image");
	cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "ok");
	cr_expect_str_eq(json_string_value(json_object_get(img, "reference")),
	    ref("test/img:1"));
	cr_expect_str_eq(json_string_value(json_object_get(img, "os")), "linux");
	cr_expect_eq(json_array_size(json_object_get(img, "layers")), 1);
	host = json_string_value(json_object_get(j, "host"));
	cr_assert(host != NULL);
	/* Whichever host took it: cached there if it pulled it the first time. */
	cr_expect_eq(json_is_true(json_object_get(img, "pulled")), strcmp(host, first) != 0,
	    "first pulled on %s, then %s said pulled %d", first, host,
	    json_is_true(json_object_get(img, "pulled")));
	cr_expect_eq(audit_count("pulled", ref("test/img:1"), host, NULL), 1);
	json_decref(j);
	free(out);

	/* Outside image_sources, and host: refused naming the field. */
	snprintf(args, sizeof(args), "image pull docker://127.0.0.1:1/elsewhere/x:1");
	cr_expect_eq(cli(args, err, &out), 125);
	errs = slurp(err);
	cr_expect(strstr(errs, "rejected") != NULL && strstr(errs, "image_sources") != NULL,
	    "%s", errs);
	free(errs);
	free(out);
	cr_expect_eq(cli("image pull host", err, &out), 125);
	errs = slurp(err);
	cr_expect(strstr(errs, "nothing to pull") != NULL, "%s", errs);
	free(errs);
	free(out);

	/* A tenant's name pulls what it names (sandq image tag pins the tag). */
	snprintf(args, sizeof(args), "image tag box %s --plain-http", ref("test/img:1"));
	cr_assert_eq(cli(args, err, &out), 0, "%s", out);
	free(out);
	cr_assert_eq(cli("image pull --json --quiet box", err, &out), 0, "%s", out);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	img = json_object_get(j, "image");
	snprintf(args, sizeof(args), "docker://%s/test/img@sha256:", reg.addr);
	cr_expect(strncmp(json_string_value(json_object_get(img, "reference")), args,
	    strlen(args)) == 0, "%s", out);
	json_decref(j);
	free(out);

	/* libsandq: the records themselves, in order, before the result. */
	{
		struct sandq *c = harness_client(&h);
		struct sandq_job_opts o = { .stream = true };
		struct sandq_stream *s = NULL;
		struct sandq_result *r = NULL;
		char id[SANDQ_ID_MAX + 1];
		const void *data;
		size_t len;
		int fd, last = -1, seen[4] = { 0 };

		cr_assert_eq(sandq_submit_image_pull(c, ref("test/big:1"), &o, id), 0, "%s",
		    sandq_last_error(c));
		cr_assert_eq(sandq_stream_open(c, id, &s), 0);
		while ((rc = sandq_stream_next(s, 120000, &fd, &data, &len)) == 1) {
			json_t *rec = json_loadb(data, len, 0, NULL);
			int k;

			cr_assert_eq(fd, 3);
			cr_assert_not_null(rec, "not JSON: %.*s", (int)len, (const char *)data);
			k = phase_rank(json_string_value(json_object_get(rec, "phase")));
			cr_expect_geq(k, last, "a phase out of order: %.*s", (int)len,
			    (const char *)data);
			if (k >= 0) {
				last = k;
				seen[k]++;
			}
			json_decref(rec);
		}
		cr_expect_eq(rc, 0);
		sandq_stream_close(s);
		cr_expect_geq(seen[0], 1, "no fetch record");
		cr_expect_geq(seen[1], 4, "a verify record per blob");
		/* Its base layer is img:1's: unpacked already if that host pulled it. */
		cr_expect(seen[2] == 1 || seen[2] == 2, "an unpack record per layer "
		    "unpacked: %d", seen[2]);
		cr_expect_eq(seen[3], 1, "one done record");
		cr_assert_eq(sandq_wait(c, id, 60000, &r), 0);
		cr_expect_str_eq(r->status, "ok");
		cr_expect(r->data_len > 0);
		sandq_result_free(r);
		sandq_close(c);
	}
}

Test(images_hosts, image_pull_draws_a_bar_on_a_terminal)
{
	char cmd[1200], *out = NULL;

	if (access("/usr/bin/script", X_OK) != 0) {
		fprintf(stderr, "images_hosts_test: no /usr/bin/script (util-linux): the "
		    "bar on a terminal is not tested\n");
		return;
	}
	/* script(1) gives sandq a terminal; its typescript is what was drawn. */
	snprintf(cmd, sizeof(cmd), "script -qec '%s/sandq --redis %s image pull %s' "
	    "/dev/null", harness_build_dir(), h.url, ref("test/img:1"));
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect(strstr(out, "\r\033[K") != NULL, "no redrawn line: %s", out);
	cr_expect(strstr(out, "[########################]") != NULL, "no full bar: %s", out);
	cr_expect(strstr(out, "pulled ") != NULL, "%s", out);
	free(out);
}
