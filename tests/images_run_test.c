/*
 * images_run_test.c - jobs that run on OCI images, end to end: a private
 * redis-server and sandqd (harness.c), a private docker-registry on
 * loopback (harness_registry_start), and images written by hand
 * (imgbuild.c) whose root is Debian's static busybox: nothing of the
 * host's /usr, no internet.
 *
 * Each test proves one behaviour: the image's files, Env, WorkingDir and
 * User reach the job; a second job takes the cached image without a pull,
 * and jobs arriving together share one pull; a job may change its image
 * and the next job sees the original; nothing of the host's /usr is
 * there; a whiteout and an opaque folder of an upper layer hide what the
 * layer below holds; a source outside image_sources and an unreachable
 * registry are rejected naming the image; host jobs run as before.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

static struct harness h;
static struct harness_registry reg;
static char src[300], sources[200], plain[100];
static struct imgb_desc d_img, d_wh, d_user;

static const char *const ENV[] = { "PATH=/bin", "FOO=bar", NULL };

#define PASSWD "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1235:app:/srv:/bin/sh\n"

/* The busybox root every test image has; busybox's data set in setup(). */
static struct imgb_entry BASE[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "bin/echo", 'l', "busybox", 0, 0 },
	{ "bin/pwd", 'l', "busybox", 0, 0 },
	{ "bin/id", 'l', "busybox", 0, 0 },
	{ "bin/ls", 'l', "busybox", 0, 0 },
	{ "bin/test", 'l', "busybox", 0, 0 },
	{ "bin/true", 'l', "busybox", 0, 0 },
	{ "etc", 'd', NULL, 0, 0 },
	{ "etc/passwd", 'f', PASSWD, sizeof(PASSWD) - 1, 0 },
	{ "hello.txt", 'f', "hello from the image\n", 21, 0 },
	{ "gone.txt", 'f', "lower\n", 6, 0 },
	{ "d", 'd', NULL, 0, 0 },
	{ "d/old.txt", 'f', "old\n", 4, 0 },
	{ "srv", 'd', NULL, 0, 0 },
	{ NULL, 0, NULL, 0, 0 },
};
/* Deletes gone.txt, and makes d opaque with a new file of its own. */
static const struct imgb_entry WHITEOUTS[] = {
	{ ".wh.gone.txt", 'f', "", 0, 0 },
	{ "d", 'd', NULL, 0, 0 },
	{ "d/.wh..wh..opq", 'f', "", 0, 0 },
	{ "d/new.txt", 'f', "new\n", 4, 0 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** Fixture ***/

static void
setup(void)
{
	struct imgb_image img = { .env = ENV, .workdir = "/srv", .layers = { BASE } };
	struct imgb_image wh = { .env = ENV, .layers = { BASE, WHITEOUTS } };
	struct imgb_image user = { .env = ENV, .user = "app", .layers = { BASE } };
	char s[400];

	imgb_busybox(&BASE[1]);
	/* The registry's folder: a mkdtemp of its own, removed in teardown. */
	snprintf(src, sizeof(src), "/tmp/sandq-imgrun-XXXXXX");
	cr_assert(mkdtemp(src) != NULL);
	harness_registry_start(&reg, src);
	snprintf(s, sizeof(s), "%s/layout", src);
	imgb_write(s, "img", &img, &d_img);
	imgb_write(s, "wh", &wh, &d_wh);
	imgb_write(s, "user", &user, &d_user);
	snprintf(s, sizeof(s), "oci:%s/layout:img", src);
	harness_registry_push(&reg, s, "test/img:1");
	snprintf(s, sizeof(s), "oci:%s/layout:wh", src);
	harness_registry_push(&reg, s, "test/wh:1");
	snprintf(s, sizeof(s), "oci:%s/layout:user", src);
	harness_registry_push(&reg, s, "test/user:1");
	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/test/*", reg.addr);
	snprintf(plain, sizeof(plain), "image_plain_http=%s", reg.addr);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_start(&h, 2, extra);
	}
}

static void
teardown(void)
{
	harness_stop(&h);
	harness_registry_stop(&reg);
	if (src[0])
		harness_rmtree(src);
}

TestSuite(images_run, .init = setup, .fini = teardown, .timeout = 240);

/*** Helpers ***/

/* A reference to repo (e.g. "test/img:1") in the test registry. */
static const char *
ref(const char *repo)
{
	return harness_registry_ref(&reg, repo);
}

/* Runs argv on image (wall limit 60 s) and returns its result. */
static struct sandq_result *
run_on(struct sandq *c, const char *image, const char *const *argv)
{
	struct sandq_job_opts o = { .image = image };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0, "%s", sandq_last_error(c));
	return r;
}

/* Runs sh -c script on image. */
static struct sandq_result *
sh_on(struct sandq *c, const char *image, const char *script)
{
	const char *const argv[] = { "sh", "-c", script, NULL };

	return run_on(c, image, argv);
}

/* Expects r ok with exactly out on stdout. */
static void
expect_out(const struct sandq_result *r, const char *out)
{
	cr_expect_str_eq(r->status, "ok", "%s: %s (stderr: %s)", r->status,
	    r->error_message ? r->error_message : "", r->stderr_data);
	cr_expect_str_eq((const char *)r->stdout_data, out);
}

/* Lines of the sandqd log at path that hold needle. */
static int
log_count_in(const char *path, const char *needle)
{
	char cmd[800], *out = NULL;
	int n;

	snprintf(cmd, sizeof(cmd), "grep -c -F -- '%s' %s", needle, path);
	harness_run(cmd, &out);
	n = out != NULL ? atoi(out) : 0;
	free(out);
	return n;
}

/* Lines of the fixture's sandqd log that hold needle. */
static int
log_count(const char *needle)
{
	return log_count_in(h.log, needle);
}

static double
since_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/*** Tests ***/

Test(images_run, a_job_gets_the_images_files_env_workdir_and_user)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = sh_on(c, ref("test/img:1"),
	    "cat /hello.txt; echo $FOO; pwd; id -u");

	expect_out(r, "hello from the image\nbar\n/srv\n0\n");
	sandq_result_free(r);
	/* The job's own values win: its env and cwd over the image's. */
	{
		const char *const env[] = { "FOO=mine", NULL };
		const char *const argv[] = { "sh", "-c", "echo $FOO; pwd", NULL };
		struct sandq_job_opts o = { .image = ref("test/img:1"), .env = env,
		    .cwd = "/tmp" };
		char id[SANDQ_ID_MAX + 1];

		cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0);
		cr_assert_eq(sandq_wait(c, id, 120000, &r), 0);
		expect_out(r, "mine\n/tmp\n");
		sandq_result_free(r);
	}
	/* An image's User, by name from its own /etc/passwd. */
	r = sh_on(c, ref("test/user:1"), "id -u; id -g; pwd");
	expect_out(r, "1234\n1235\n/\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, a_second_job_takes_the_cached_image_without_a_pull)
{
	struct sandq *c = harness_client(&h);
	const char *const tr[] = { "true", NULL };
	struct sandq_result *r;
	struct timespec t0;
	double first, cached, host;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = sh_on(c, ref("test/img:1"), "cat /hello.txt");
	first = since_ms(&t0);
	expect_out(r, "hello from the image\n");
	sandq_result_free(r);
	r = sh_on(c, ref("test/img:1"), "cat /hello.txt");
	expect_out(r, "hello from the image\n");
	sandq_result_free(r);
	cr_expect_eq(log_count(": pulling (job"), 1, "one pull for two jobs");
	cr_expect_eq(log_count("pulled as sha256:"), 1);
	/* Figures: /bin/true, one job at a time, on the image, then on host. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 20; i++) {
		r = run_on(c, ref("test/img:1"), tr);
		cr_expect_str_eq(r->status, "ok");
		sandq_result_free(r);
	}
	cached = since_ms(&t0) / 20;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 20; i++) {
		r = run_on(c, "host", tr);
		cr_expect_str_eq(r->status, "ok");
		sandq_result_free(r);
	}
	host = since_ms(&t0) / 20;
	fprintf(stderr, "images_run: first job on a new image %.0f ms; /bin/true on the "
	    "cached image %.1f ms, on host %.1f ms (submit to result, mean of 20)\n",
	    first, cached, host);
	sandq_close(c);
}

Test(images_run, jobs_arriving_together_share_one_pull)
{
	struct sandq *c = harness_client(&h);
	const char *const argv[] = { "cat", "/hello.txt", NULL };
	struct sandq_job_opts o = { .image = ref("test/img:1") };
	char id[4][SANDQ_ID_MAX + 1];

	for (int i = 0; i < 4; i++)
		cr_assert_eq(sandq_submit_exec(c, argv, &o, id[i]), 0);
	for (int i = 0; i < 4; i++) {
		struct sandq_result *r = NULL;

		cr_assert_eq(sandq_wait(c, id[i], 120000, &r), 0);
		expect_out(r, "hello from the image\n");
		sandq_result_free(r);
	}
	cr_expect_eq(log_count(": pulling (job"), 1, "four jobs, one pull");
	sandq_close(c);
}

Test(images_run, a_job_may_change_its_image_and_the_next_sees_the_original)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = sh_on(c, ref("test/img:1"),
	    "echo x >> /hello.txt && cat /hello.txt && mkdir /new && echo y > /new/f "
	    "&& cat /new/f");

	expect_out(r, "hello from the image\nx\ny\n");
	sandq_result_free(r);
	r = sh_on(c, ref("test/img:1"), "cat /hello.txt; ls /new 2>&1 || true");
	cr_expect_str_eq(r->status, "ok");
	cr_expect_str_eq((const char *)r->stdout_data, "hello from the image\n"
	    "ls: /new: No such file or directory\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, nothing_of_the_hosts_usr_is_there)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = sh_on(c, ref("test/img:1"),
	    "test -e /usr/bin/python3 && echo python3; test -e /usr && echo usr; "
	    "test -e /lib && echo lib; ls /");

	/* The image's root and sandq's mounts: nothing else. */
	expect_out(r, "bin\nd\ndev\netc\ngone.txt\nhello.txt\nproc\nsrv\ntmp\nworkspace\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, a_whiteout_and_an_opaque_folder_hide_the_lower_layer)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = sh_on(c, ref("test/wh:1"),
	    "test -e /gone.txt && echo gone.txt is there; ls /d; cat /hello.txt");

	expect_out(r, "new.txt\nhello from the image\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, a_source_outside_image_sources_is_rejected_naming_the_field)
{
	struct sandq *c = harness_client(&h);
	const char *const argv[] = { "true", NULL };
	struct sandq_result *r = run_on(c, ref("other/img:1"), argv);
	char want[300];

	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "image");
	snprintf(want, sizeof(want), "field 'image': '%s' is not within this host's "
	    "image_sources", ref("other/img:1"));
	cr_expect_str_eq(r->error_message, want);
	sandq_result_free(r);
	cr_expect_eq(log_count(": pulling (job"), 0, "nothing fetched");
	sandq_close(c);
}

Test(images_run, an_unreachable_registry_rejects_the_job_naming_the_image)
{
	struct sandq *c = harness_client(&h);
	const char *const argv[] = { "true", NULL };
	struct sandq_result *r;
	char want[300];

	harness_registry_stop(&reg);
	r = run_on(c, ref("test/img:1"), argv);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "image");
	snprintf(want, sizeof(want), "field 'image': image '%s': ", ref("test/img:1"));
	cr_expect(r->error_message != NULL && strncmp(r->error_message, want,
	    strlen(want)) == 0, "message: %s", r->error_message);
	sandq_result_free(r);
	/* Host jobs are not held up by it. */
	r = sh_on(c, "host", "echo still");
	expect_out(r, "still\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, the_images_root_is_bounded_by_the_jobs_disk_limit)
{
	struct sandq *c = harness_client(&h);
	const char *const argv[] = { "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do "
	    "cat /bin/busybox; done > /big && echo written", NULL };
	struct sandq_job_opts o = { .image = ref("test/img:1") };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	/*
	 * Ten copies of busybox (about 20 MB: more than the writable layer
	 * holds before a job sizes it) fit 64 MiB, not 1 MiB.
	 */
	o.limits.disk_bytes = 64 << 20;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0);
	expect_out(r, "written\n");
	sandq_result_free(r);
	o.limits.disk_bytes = 1 << 20;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0);
	cr_expect_str_eq(r->status, "disk_limit", "%s: %s", r->status,
	    r->error_message ? r->error_message : "");
	sandq_result_free(r);
	sandq_close(c);
}

Test(images_run, a_persistent_sandbox_keeps_its_workspace_on_an_image)
{
	struct sandq *c = harness_client(&h);
	struct sandq_op_args a = { .sandbox = "imgsb" };
	struct sandq_job_opts o = { .image = ref("test/img:1"), .sandbox = "imgsb" };
	const char *const w[] = { "sh", "-c", "pwd; echo kept > /workspace/f; "
	    "echo lost >> /hello.txt", NULL };
	const char *const r2[] = { "sh", "-c", "cat /workspace/f /hello.txt", NULL };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, 30000, &r), 0);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	sandq_result_free(r);
	cr_assert_eq(sandq_submit_exec(c, w, &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0);
	expect_out(r, "/workspace\n");
	cr_expect_eq(r->version, 2);
	sandq_result_free(r);
	/* The workspace is the sandbox's; the image's root is each job's own. */
	cr_assert_eq(sandq_submit_exec(c, r2, &o, id), 0);
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0);
	expect_out(r, "kept\nhello from the image\n");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * With image_cache_bytes at 1 byte every pull is followed by an eviction of
 * every image no queued or running job names. wh:1's top layer is its
 * own: evicted, then pulled and unpacked again as a new folder, which the
 * worker (one, holding a mount of the old folder) must mount anew.
 */
Test(images_run, the_cache_bound_evicts_what_no_job_uses_and_it_comes_back)
{
	char bound[] = "image_cache_bytes=1", log[400], pulls[300];
	const char *const sets[] = { sources, plain, bound, NULL };
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	pid_t pid;

	/* A sandqd of one worker with the bound, in place of the fixture's. */
	harness_stop_sandqd(&h, 10000);
	pid = harness_start_host(&h, "bound", 1, 200000, sets);
	cr_assert(pid > 0);
	snprintf(log, sizeof(log), "%s/sandqd-bound.log", h.dir);
	r = sh_on(c, ref("test/wh:1"), "ls /d");
	expect_out(r, "new.txt\n");
	sandq_result_free(r);
	r = sh_on(c, ref("test/img:1"), "cat /hello.txt");
	expect_out(r, "hello from the image\n");
	sandq_result_free(r);
	r = sh_on(c, ref("test/wh:1"), "ls /d; test -e /gone.txt || echo no gone.txt");
	expect_out(r, "new.txt\nno gone.txt\n");
	sandq_result_free(r);
	snprintf(pulls, sizeof(pulls), "image %s: pulling", ref("test/wh:1"));
	cr_expect_eq(log_count_in(log, pulls), 2, "wh:1 evicted, then pulled again");
	cr_expect_geq(log_count_in(log, "images, "), 1, "an eviction was logged");
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	sandq_close(c);
}

Test(images_run, host_jobs_run_as_before_next_to_image_jobs)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = sh_on(c, "host", "test -x /usr/bin/python3 && echo py; id -u; pwd");

	expect_out(r, "py\n1000\n/workspace\n");
	sandq_result_free(r);
	r = sh_on(c, ref("test/img:1"), "id -u");
	expect_out(r, "0\n");
	sandq_result_free(r);
	/* And back: a worker that ran an image prepares for it, then changes. */
	for (int i = 0; i < 3; i++) {
		r = sh_on(c, NULL, "test -x /usr/bin/python3 && echo py");
		expect_out(r, "py\n");
		sandq_result_free(r);
	}
	sandq_close(c);
}
