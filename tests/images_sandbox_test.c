/*
 * images_sandbox_test.c - sandboxes on images, end to end (docs/images.md
 * "Sandboxes on images"): a private redis-server and sandqd (harness.c),
 * a private docker-registry on loopback, and a task image written by hand
 * (imgbuild.c): Debian's static busybox as its root and a /testbed
 * folder holding a few files and a small git-like tree, as SWE-bench's
 * images hold their repository.
 *
 * Each test proves one behaviour: a sandbox seeded from /testbed with its
 * files there runs on the image and sees both; what a job changes the
 * next sees, a fork keeps the image and the files and then goes its own
 * way; sandqd learns a sandbox's image it did not know from the worker's
 * check (a restart, another host of the shared store) rather than run a
 * job on the wrong image; the refusals (an image outside image_sources, a
 * folder sandq mounts, a folder the image lacks, a file, a symlink, a
 * job naming another image); a host-image sandbox with a workdir; a job
 * on a plain sandbox still chooses its image. A last suite, without a
 * registry, times sequential `sh true` jobs on a sandbox (the figure of
 * docs/images.md, run against this build and another with SANDQ_BUILD).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

#define WAIT_MS 120000

static struct harness h;
static struct harness_registry reg;
static char src[300], sources[200], plain[100];
static pid_t host_b;

static const char *const ENV[] = { "PATH=/bin", "IMAGE_VAR=from-image", NULL };

#define README "a task repository\n"
#define HEAD "ref: refs/heads/main\n"

/* Busybox and a /testbed, as a task image holds its repository. */
static struct imgb_entry TASK[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "bin/echo", 'l', "busybox", 0, 0 },
	{ "bin/pwd", 'l', "busybox", 0, 0 },
	{ "bin/ls", 'l', "busybox", 0, 0 },
	{ "bin/test", 'l', "busybox", 0, 0 },
	{ "bin/true", 'l', "busybox", 0, 0 },
	{ "bin/touch", 'l', "busybox", 0, 0 },
	{ "bin/wc", 'l', "busybox", 0, 0 },
	{ "bin/readlink", 'l', "busybox", 0, 0 },
	{ "etc", 'd', NULL, 0, 0 },
	{ "etc/passwd", 'f', "root:x:0:0:root:/root:/bin/sh\n", 30, 0 },
	{ "hello.txt", 'f', "hello from the image\n", 21, 0 },
	{ "notadir", 'f', "a file\n", 7, 0 },
	{ "testbed", 'd', NULL, 0, 0 },
	{ "testbed/README", 'f', README, sizeof(README) - 1, 0 },
	{ "testbed/run.sh", 'f', "#!/bin/sh\necho ran\n", 19, 0755 },
	{ "testbed/src", 'd', NULL, 0, 0 },
	{ "testbed/src/main.c", 'f', "int main(void) { return 0; }\n", 29, 0 },
	{ "testbed/docs", 'l', "src", 0, 0 },
	{ "testbed/.git", 'd', NULL, 0, 0 },
	{ "testbed/.git/HEAD", 'f', HEAD, sizeof(HEAD) - 1, 0 },
	{ "testbed/.git/refs", 'd', NULL, 0, 0 },
	{ "testbed/.git/refs/heads", 'd', NULL, 0, 0 },
	{ "testbed/.git/refs/heads/main", 'f', "0123456789abcdef\n", 17, 0 },
	{ "testbed/.git/objects", 'd', NULL, 0, 0 },
	{ "testbed/.git/objects/01", 'd', NULL, 0, 0 },
	{ "testbed/.git/objects/01/23456789abcdef", 'f', NULL, 3000, 0444 },
	{ "linkbed", 'l', "testbed", 0, 0 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** Fixture ***/

/* Starts the registry with the task image (test/task:1) and another one. */
static void
registry_up(void)
{
	struct imgb_image task = { .env = ENV, .workdir = "/srv", .layers = { TASK } };
	struct imgb_image other = { .env = ENV, .layers = { TASK } };
	struct imgb_desc d;
	char s[400];

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	imgb_busybox(&TASK[1]);
	snprintf(src, sizeof(src), "/tmp/sandq-imgsbx-XXXXXX");
	cr_assert(mkdtemp(src) != NULL);
	harness_registry_start(&reg, src);
	snprintf(s, sizeof(s), "%s/layout", src);
	imgb_write(s, "task", &task, &d);
	other.workdir = "/";
	imgb_write(s, "other", &other, &d);
	snprintf(s, sizeof(s), "oci:%s/layout:task", src);
	harness_registry_push(&reg, s, "test/task:1");
	snprintf(s, sizeof(s), "oci:%s/layout:other", src);
	harness_registry_push(&reg, s, "test/other:1");
	/* Both a sandbox's image and another one are allowed; far/ is not. */
	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/test/*",
	    reg.addr);
	snprintf(plain, sizeof(plain), "image_plain_http=%s", reg.addr);
}

static void
setup(void)
{
	registry_up();
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_start(&h, 2, extra);
	}
}

static void
setup_shared(void)
{
	registry_up();
	{
		const char *const extra[] = { "--set", sources, "--set", plain,
		    "--set", "host=host-a", "--set", "snapshot_store=redis",
		    "--set", "lease_ms=3000", NULL };

		harness_start(&h, 1, extra);
	}
}

static void
teardown(void)
{
	if (host_b > 0) {
		kill(host_b, SIGTERM);
		waitpid(host_b, NULL, 0);
		host_b = 0;
	}
	harness_stop(&h);
	harness_registry_stop(&reg);
	if (src[0])
		harness_rmtree(src);
	src[0] = '\0';
}

TestSuite(images_sandbox, .init = setup, .fini = teardown, .timeout = 300);
TestSuite(images_sandbox_shared, .init = setup_shared, .fini = teardown,
    .timeout = 300);

/*** Helpers ***/

/* A reference to repo (e.g. "test/task:1") in the test registry. */
static const char *
ref(const char *repo)
{
	return harness_registry_ref(&reg, repo);
}

/* Creates sandbox id on image (NULL: none) with workdir and from (NULL: none). */
static struct sandq_result *
create(struct sandq *c, const char *id, const char *image, const char *workdir,
    const char *from)
{
	struct sandq_op_args a = { .sandbox = id, .workdir = workdir,
	    .from_image_dir = from };
	struct sandq_job_opts o = { .image = image };
	struct sandq_result *r = NULL;

	cr_assert_eq(sandq_call(c, "sandbox.create", &a, &o, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	return r;
}

/* Expects r ok, else says why. */
static void
expect_ok(const struct sandq_result *r, const char *what)
{
	cr_expect_str_eq(r->status, "ok", "%s: %s %s: %s (stderr: %s)", what, r->status,
	    r->error_code ? r->error_code : "", r->error_message ? r->error_message : "",
	    r->stderr_data ? (const char *)r->stderr_data : "");
}

/* Expects r rejected with code, its message holding each of the needles. */
static void
expect_rejected(const struct sandq_result *r, const char *code, const char *n1,
    const char *n2)
{
	cr_expect_str_eq(r->status, "rejected", "%s: %s", r->status,
	    r->error_message ? r->error_message : "");
	cr_expect_str_eq(r->error_code ? r->error_code : "", code, "%s",
	    r->error_message ? r->error_message : "");
	if (n1 != NULL)
		cr_expect(r->error_message && strstr(r->error_message, n1), "'%s' not in "
		    "'%s'", n1, r->error_message ? r->error_message : "");
	if (n2 != NULL)
		cr_expect(r->error_message && strstr(r->error_message, n2), "'%s' not in "
		    "'%s'", n2, r->error_message ? r->error_message : "");
}

/*
 * Runs script with sh -c (busybox's: the image has no bash, which op sh
 * runs) on sandbox (image: NULL, the sandbox's).
 */
static struct sandq_result *
sh_in(struct sandq *c, const char *sandbox, const char *image, const char *script)
{
	const char *const argv[] = { "sh", "-c", script, NULL };
	struct sandq_job_opts o = { .sandbox = sandbox, .image = image };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "%s", sandq_last_error(c));
	return r;
}

/* Runs script on sandbox and expects it ok with out on stdout. */
static void
expect_sh(struct sandq *c, const char *sandbox, const char *script, const char *out)
{
	struct sandq_result *r = sh_in(c, sandbox, NULL, script);

	expect_ok(r, script);
	cr_expect_str_eq((const char *)r->stdout_data, out, "%s", script);
	sandq_result_free(r);
}

/* The string value of key in the msgpack map of r's data, into buf ("" if none). */
static const char *
data_str(const struct sandq_result *r, const char *key, char *buf, size_t n)
{
	msgpack_unpacked u;

	buf[0] = '\0';
	msgpack_unpacked_init(&u);
	if (r->data != NULL && msgpack_unpack_next(&u, (const char *)r->data, r->data_len,
	    NULL) == MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < u.data.via.map.size; i++) {
			const msgpack_object *k = &u.data.via.map.ptr[i].key;
			const msgpack_object *v = &u.data.via.map.ptr[i].val;

			if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
			    memcmp(k->via.str.ptr, key, k->via.str.size) == 0 &&
			    v->type == MSGPACK_OBJECT_STR && v->via.str.size < n) {
				memcpy(buf, v->via.str.ptr, v->via.str.size);
				buf[v->via.str.size] = '\0';
			}
		}
	}
	msgpack_unpacked_destroy(&u);
	return buf;
}

/* sandbox.info of id: expects it ok, with image and workdir ("" for none). */
static void
expect_info(struct sandq *c, const char *id, const char *image, const char *workdir)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = NULL;
	char buf[1100];

	cr_assert_eq(sandq_call(c, "sandbox.info", &a, NULL, WAIT_MS, &r), 0);
	expect_ok(r, "sandbox.info");
	cr_expect_str_eq(data_str(r, "image", buf, sizeof(buf)), image, "%s", id);
	cr_expect_str_eq(data_str(r, "workdir", buf, sizeof(buf)), workdir, "%s", id);
	sandq_result_free(r);
}

/* Lines of the fixture's sandqd log that hold needle. */
static int
log_count(const char *needle)
{
	char cmd[800], *out = NULL;
	int n;

	snprintf(cmd, sizeof(cmd), "grep -c -F -- '%s' %s", needle, h.log);
	harness_run(cmd, &out);
	n = out != NULL ? atoi(out) : 0;
	free(out);
	return n;
}

/* What every job on a sandbox seeded from /testbed sees first. */
#define SEEN_SCRIPT "pwd; echo \"$HOME\"; cat README; cat .git/HEAD; " \
	"readlink docs; cat docs/main.c; cat /hello.txt; echo \"$IMAGE_VAR\"; " \
	"ls -A /workspace | wc -l; touch /workspace/x 2>/dev/null || echo ro"
#define SEEN_OUT "/testbed\n/testbed\n" README HEAD "src\n" \
	"int main(void) { return 0; }\nhello from the image\nfrom-image\n0\nro\n"

/*** Tests ***/

/*
 * The SWE-bench shape: /testbed of a task image becomes a sandbox whose
 * files are at /testbed; its jobs run on the image (its other files, its
 * Env) in /testbed; what one changes the next sees; a fork keeps the image
 * and the files, and then each goes its own way.
 */
Test(images_sandbox, seeded_from_testbed_runs_on_the_image_and_forks_diverge)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	char buf[1100];

	r = create(c, "tb", ref("test/task:1"), NULL, "/testbed");
	expect_ok(r, "create");
	cr_expect_eq(r->version, 1);
	cr_expect_str_eq(data_str(r, "image", buf, sizeof(buf)), ref("test/task:1"));
	cr_expect_str_eq(data_str(r, "workdir", buf, sizeof(buf)), "/testbed");
	sandq_result_free(r);
	expect_info(c, "tb", ref("test/task:1"), "/testbed");

	expect_sh(c, "tb", SEEN_SCRIPT, SEEN_OUT);
	/* A sandbox path names the same file: /README is /testbed/README. */
	{
		struct sandq_op_args a = { .sandbox = "tb", .path = "/README" };

		cr_assert_eq(sandq_call(c, "fs.read", &a, NULL, WAIT_MS, &r), 0);
		expect_ok(r, "fs.read");
		cr_expect(r->data_len > 0 && memmem(r->data, r->data_len, "a task", 6),
		    "fs.read /README gives /testbed/README");
		sandq_result_free(r);
	}
	/* The image's other files are the image's, per job: not the sandbox's. */
	r = sh_in(c, "tb", NULL, "echo changed >> README; echo new > new.txt; "
	    "echo tmp > /hello.txt; mkdir -p src/pkg && echo x > src/pkg/y");
	expect_ok(r, "change");
	cr_expect_eq(r->version, 3, "version 2 was the first job (it committed)");
	sandq_result_free(r);
	expect_sh(c, "tb", "cat README new.txt src/pkg/y /hello.txt",
	    README "changed\nnew\nx\nhello from the image\n");

	/* The fork: the same image and files; then each its own way. */
	{
		struct sandq_op_args a = { .sandbox = "tb", .to = "tb2" };

		cr_assert_eq(sandq_call(c, "sandbox.fork", &a, NULL, WAIT_MS, &r), 0);
		expect_ok(r, "fork");
		cr_expect_str_eq(data_str(r, "image", buf, sizeof(buf)), ref("test/task:1"));
		sandq_result_free(r);
	}
	expect_info(c, "tb2", ref("test/task:1"), "/testbed");
	expect_sh(c, "tb2", "pwd; cat README new.txt; echo fork > fork.txt; rm new.txt",
	    "/testbed\n" README "changed\nnew\n");
	expect_sh(c, "tb", "test -e fork.txt || echo no-fork; cat new.txt", "no-fork\nnew\n");
	expect_sh(c, "tb2", "cat fork.txt; test -e new.txt || echo no-new",
	    "fork\nno-new\n");
	sandq_close(c);
}

/*
 * sandqd forgets what a sandbox runs on when it restarts; the worker's
 * check of the row makes it learn again (one more trip), never run the
 * job on the default image. A job naming the sandbox's image runs; one
 * naming another is refused naming both, before and after.
 */
Test(images_sandbox, a_restarted_sandqd_learns_the_image_and_refuses_another)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;

	r = create(c, "tb", ref("test/task:1"), NULL, "/testbed");
	expect_ok(r, "create");
	sandq_result_free(r);
	r = sh_in(c, "tb", ref("test/other:1"), "true");
	expect_rejected(r, "image", ref("test/other:1"), ref("test/task:1"));
	sandq_result_free(r);
	r = sh_in(c, "tb", ref("test/task:1"), "cat README");
	expect_ok(r, "the sandbox's image named");
	sandq_result_free(r);

	cr_assert_eq(harness_stop_sandqd(&h, 30000), 0);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_sandqd_start(&h, 2, extra);
	}
	cr_expect_eq(log_count("admitted again on it"), 0);
	expect_sh(c, "tb", SEEN_SCRIPT, SEEN_OUT);
	cr_expect_eq(log_count("admitted again on it"), 1, "the worker corrected sandqd");
	/* Learnt: the next job goes straight on. */
	expect_sh(c, "tb", "pwd", "/testbed\n");
	cr_expect_eq(log_count("admitted again on it"), 1);
	/* After a restart, a job naming another image is still refused. */
	cr_assert_eq(harness_stop_sandqd(&h, 30000), 0);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_sandqd_start(&h, 2, extra);
	}
	r = sh_in(c, "tb", ref("test/other:1"), "true");
	expect_rejected(r, "image", ref("test/other:1"), "sandbox 'tb'");
	sandq_result_free(r);
	sandq_close(c);
}

/* What a create may not ask for, each refused naming it, nothing made. */
Test(images_sandbox, refusals_name_the_folder_and_the_image)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	char far[200];

	snprintf(far, sizeof(far), "docker://%s/far/task:1", reg.addr);
	r = create(c, "x", far, NULL, "/testbed");
	expect_rejected(r, "image", "far/task:1", "image_sources");
	sandq_result_free(r);
	r = create(c, "x", ref("test/task:1"), NULL, "/nope");
	expect_rejected(r, "image", "'/nope' does not exist", ref("test/task:1"));
	sandq_result_free(r);
	r = create(c, "x", ref("test/task:1"), NULL, "/notadir");
	expect_rejected(r, "image", "'/notadir' is not a folder", "test/task:1");
	sandq_result_free(r);
	r = create(c, "x", ref("test/task:1"), NULL, "/linkbed/src");
	expect_rejected(r, "image", "'/linkbed' is a symlink", "test/task:1");
	sandq_result_free(r);
	/* Nothing was made by any of them. */
	{
		struct sandq_op_args a = { .sandbox = "x" };

		cr_assert_eq(sandq_call(c, "sandbox.info", &a, NULL, WAIT_MS, &r), 0);
		expect_rejected(r, "sandbox_not_found", NULL, NULL);
		sandq_result_free(r);
	}
	/* A folder sandq mounts itself, checked by the client and the server. */
	{
		struct sandq_op_args a = { .sandbox = "x", .workdir = "/proc" };
		struct sandq_job_opts o = { .image = ref("test/task:1") };
		char id[SANDQ_ID_MAX + 1];

		cr_expect_eq(sandq_submit_op(c, "sandbox.create", &a, &o, id), -EINVAL);
		cr_expect(strstr(sandq_last_error(c), "'/proc' is /proc") != NULL, "%s",
		    sandq_last_error(c));
	}
	/* The seed is a sandbox's: it holds what a job could, no more. */
	{
		struct sandq_op_args a = { .sandbox = "small", .from_image_dir = "/testbed" };
		struct sandq_job_opts o = { .image = ref("test/task:1") };

		o.limits.files = 5;
		cr_assert_eq(sandq_call(c, "sandbox.create", &a, &o, WAIT_MS, &r), 0);
		expect_rejected(r, "too_large", "from_image_dir", NULL);
		sandq_result_free(r);
	}
	sandq_close(c);
}

/*
 * A sandbox on the host's image may keep its files elsewhere too; a plain
 * sandbox still runs each job on the job's own image, at /workspace; a
 * sandbox on an image without a folder starts empty at its workdir.
 */
Test(images_sandbox, host_workdir_and_plain_sandboxes)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;

	r = create(c, "hw", "host", "/srv/app", NULL);
	expect_ok(r, "create host");
	sandq_result_free(r);
	expect_info(c, "hw", "host", "/srv/app");
	expect_sh(c, "hw", "pwd; echo \"$HOME\"; echo one > f; test -x /usr/bin/env && "
	    "echo host", "/srv/app\n/srv/app\nhost\n");
	expect_sh(c, "hw", "cat /srv/app/f; ls -A /workspace | wc -l", "one\n0\n");
	/* An OCI image sandbox without a folder: empty at its workdir. */
	r = create(c, "iw", ref("test/task:1"), "/code", NULL);
	expect_ok(r, "create on an image");
	sandq_result_free(r);
	expect_sh(c, "iw", "pwd; ls -A | wc -l; cat /hello.txt; echo a > a",
	    "/code\n0\nhello from the image\n");
	expect_sh(c, "iw", "cat a", "a\n");
	/* A plain sandbox: each job's own image, the files at /workspace. */
	r = create(c, "plain", NULL, NULL, NULL);
	expect_ok(r, "create plain");
	sandq_result_free(r);
	expect_info(c, "plain", "", "");
	r = sh_in(c, "plain", ref("test/other:1"), "pwd; echo p > p; cat /hello.txt");
	expect_ok(r, "plain on an image");
	cr_expect_str_eq((const char *)r->stdout_data, "/workspace\nhello from the image\n");
	sandq_result_free(r);
	expect_sh(c, "plain", "cat p; test -x /usr/bin/env && echo host", "p\nhost\n");
	sandq_close(c);
}

/* Runs the CLI (sandq GROUP ... against the harness); its status, *out. */
static int
cli(const char *args, char **out)
{
	char cmd[1600];
	int st;

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s 2>&1", harness_build_dir(),
	    h.url, args);
	st = harness_run(cmd, out);
	return st;
}

/*
 * The CLI makes and shows a sandbox on an image; an export imported as a
 * new sandbox on the image runs there; an import into a sandbox cannot
 * change what it runs on.
 */
Test(images_sandbox, the_cli_and_import_carry_the_image)
{
	struct sandq *c = harness_client(&h);
	char args[1200], file[400], *out = NULL;

	snprintf(args, sizeof(args), "sandbox create c1 --image %s --from-image-dir "
	    "/testbed --label task=1", ref("test/task:1"));
	cr_expect_eq(cli(args, &out), 0, "%s", out);
	cr_expect(out && strstr(out, "workdir: /testbed\n"), "%s", out);
	cr_expect(out && strstr(out, ref("test/task:1")), "%s", out);
	free(out);
	cr_expect_eq(cli("sandbox ls", &out), 0);
	snprintf(args, sizeof(args), "image=%s:/testbed", ref("test/task:1"));
	cr_expect(out && strstr(out, args), "%s", out);
	free(out);
	cr_expect_eq(cli("sandbox info c1 --json", &out), 0);
	cr_expect(out && strstr(out, "\"workdir\":\"/testbed\""), "%s", out);
	free(out);
	/* Usage errors: said before anything is sent. */
	cr_expect_eq(cli("sandbox create c9 --from-image-dir /testbed", &out), 125);
	cr_expect(out && strstr(out, "--from-image-dir needs --image"), "%s", out);
	free(out);
	snprintf(args, sizeof(args), "sandbox create c9 --image %s --workdir /tmp/x",
	    ref("test/task:1"));
	cr_expect_eq(cli(args, &out), 125);
	cr_expect(out && strstr(out, "'/tmp/x' is below /tmp"), "%s", out);
	free(out);

	/* Export, then import as a new sandbox on the image. */
	snprintf(file, sizeof(file), "%s/c1.db", h.dir);
	snprintf(args, sizeof(args), "sandbox export c1 %s", file);
	cr_expect_eq(cli(args, &out), 0, "%s", out);
	free(out);
	snprintf(args, sizeof(args), "sandbox import c2 %s --image %s --workdir /testbed",
	    file, ref("test/task:1"));
	cr_expect_eq(cli(args, &out), 0, "%s", out);
	free(out);
	expect_info(c, "c2", ref("test/task:1"), "/testbed");
	expect_sh(c, "c2", "pwd; cat README; cat /hello.txt", "/testbed\n" README
	    "hello from the image\n");
	/* Into an existing one, another workdir is refused; the same is fine. */
	snprintf(args, sizeof(args), "sandbox import c1 %s --workdir /code", file);
	cr_expect_eq(cli(args, &out), 125);
	cr_expect(out && strstr(out, "cannot change that"), "%s", out);
	free(out);
	snprintf(args, sizeof(args), "sandbox import c1 %s --workdir /testbed", file);
	cr_expect_eq(cli(args, &out), 0, "%s", out);
	free(out);

	/* On a tenant's image name: the sandbox records what it names, pinned. */
	snprintf(args, sizeof(args), "image tag --plain-http task %s", ref("test/task:1"));
	cr_assert_eq(cli(args, &out), 0, "%s", out);
	free(out);
	cr_expect_eq(cli("sandbox create named --image task --from-image-dir /testbed",
	    &out), 0, "%s", out);
	snprintf(args, sizeof(args), "image: docker://%s/test/task@sha256:", reg.addr);
	cr_expect(out && strstr(out, args), "%s", out);
	free(out);
	expect_sh(c, "named", "pwd; cat README", "/testbed\n" README);
	sandq_close(c);
}

/*
 * Two hosts on one Redis (snapshot_store = redis): the sandbox's image and
 * workdir travel with it; the host that did not make it learns them from
 * its worker's check, and every job, whichever host runs it, sees /testbed.
 */
Test(images_sandbox_shared, two_hosts_run_the_sandbox_on_its_image)
{
	static const char *sets[4];
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;

	sets[0] = sources;
	sets[1] = plain;
	sets[2] = "snapshot_store=redis";
	sets[3] = NULL;
	r = create(c, "tb", ref("test/task:1"), NULL, "/testbed");
	expect_ok(r, "create");
	sandq_result_free(r);
	host_b = harness_start_host(&h, "b", 1, 200000, sets);
	cr_assert_gt(host_b, 0);
	/* Host A stops taking jobs: B, which never saw the sandbox, runs them. */
	cr_assert_eq(harness_stop_sandqd(&h, 30000), 0);
	r = sh_in(c, "tb", NULL, "pwd; ls -A /testbed/.git/refs | wc -l; echo 0 > n");
	expect_ok(r, "on host b");
	cr_expect_str_eq(r->host ? r->host : "", "host-b");
	cr_expect_str_eq((const char *)r->stdout_data, "/testbed\n1\n");
	sandq_result_free(r);
	r = sh_in(c, "tb", NULL, "pwd; cat n; echo 1 > n");
	expect_ok(r, "on host b, again");
	cr_expect_str_eq((const char *)r->stdout_data, "/testbed\n0\n");
	sandq_result_free(r);
	expect_sh(c, "tb", "cat n; cat /hello.txt", "1\nhello from the image\n");
	sandq_close(c);
}

/*** Latency: sequential jobs on a sandbox ***/

static void
setup_plain(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&h, 2, NULL);
}

static void
teardown_plain(void)
{
	harness_stop(&h);
}

TestSuite(images_sandbox_latency, .init = setup_plain, .fini = teardown_plain,
    .timeout = 300);

static int
cmp_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * p50 of `sh true` on a host sandbox, one at a time, submit to result:
 * what a sandbox pays for the check of its image. Printed; the test fails
 * only if a job does. SANDQ_LAT_JOBS sets the count (default 200).
 */
Test(images_sandbox_latency, sequential_true_on_a_sandbox_p50)
{
	struct sandq *c = harness_client(&h);
	const char *env = getenv("SANDQ_LAT_JOBS");
	int n = env != NULL ? atoi(env) : 200;
	double *ms;
	struct sandq_result *r;

	if (n < 20)
		n = 20;
	ms = calloc((size_t)n, sizeof(*ms));
	cr_assert(ms != NULL);
	{
		struct sandq_op_args a = { .sandbox = "lat" };

		cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0);
		expect_ok(r, "create");
		sandq_result_free(r);
	}
	for (int i = -20; i < n; i++) {
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sh_in(c, "lat", NULL, "true");
		clock_gettime(CLOCK_MONOTONIC, &t1);
		cr_assert_str_eq(r->status, "ok");
		sandq_result_free(r);
		if (i >= 0)
			ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
			    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	}
	qsort(ms, (size_t)n, sizeof(*ms), cmp_ms);
	fprintf(stderr, "images_sandbox_test: %d sequential `sh true` jobs on a sandbox "
	    "(%s): p50 %.2f ms, p90 %.2f ms\n", n, harness_build_dir(), ms[n / 2],
	    ms[n * 9 / 10]);
	free(ms);
	sandq_close(c);
}
