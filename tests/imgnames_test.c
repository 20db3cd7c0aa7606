/*
 * imgnames_test.c - a tenant's image names (sandq image tag), end to end:
 * a private redis-server and sandqd (harness.c), a private docker-registry
 * on loopback, busybox images made by hand (imgbuild.c).
 *
 * Each test proves one behaviour: a tag pins a registry's tag to its
 * digest and a job on the name runs that image, its result naming the
 * reference, the digest and the name; the name keeps its bytes when the
 * registry's tag moves, until it is tagged again; an unknown name, a name
 * whose target is outside image_sources and a damaged stored value are
 * rejected naming the problem; untag and tags; a tenant's own Redis user
 * may name its images and no other tenant's.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

static struct harness h;
static struct harness_registry reg;
static char src[300], sources[200], plain[100];
static struct imgb_desc d_one, d_two;

static const char *const ENV[] = { "PATH=/bin", NULL };

static struct imgb_entry ONE[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "which.txt", 'f', "one\n", 4, 0 },
	{ NULL, 0, NULL, 0, 0 },
};
static struct imgb_entry TWO[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "which.txt", 'f', "two\n", 4, 0 },
	{ NULL, 0, NULL, 0, 0 },
};

static void
setup(void)
{
	struct imgb_image one = { .env = ENV, .layers = { ONE } };
	struct imgb_image two = { .env = ENV, .layers = { TWO } };
	char s[400];

	imgb_busybox(&ONE[1]);
	imgb_busybox(&TWO[1]);
	snprintf(src, sizeof(src), "/tmp/sandq-imgnames-XXXXXX");
	cr_assert(mkdtemp(src) != NULL);
	harness_registry_start(&reg, src);
	snprintf(s, sizeof(s), "%s/layout", src);
	imgb_write(s, "one", &one, &d_one);
	imgb_write(s, "two", &two, &d_two);
	snprintf(s, sizeof(s), "oci:%s/layout:one", src);
	harness_registry_push(&reg, s, "test/img:1");
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

TestSuite(imgnames, .init = setup, .fini = teardown, .timeout = 240);

/*** Helpers ***/

static const char *
ref(const char *repo)
{
	return harness_registry_ref(&reg, repo);
}

/*
 * Runs `sandq --redis URL ARGS` (formatted; shell syntax); returns its
 * exit status with stdout and stderr together in *out.
 */
static int __attribute__((format(printf, 2, 3)))
sq(char **out, const char *fmt, ...)
{
	char args[2048], cmd[2600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s 2>&1", harness_build_dir(),
	    h.url, args);
	return harness_run(cmd, out);
}

/* `sandq image tag ARGS`, asserting success; its output freed. */
static void
tag(const char *args)
{
	char *out = NULL;
	int st = sq(&out, "image tag --plain-http %s", args);

	cr_assert_eq(st, 0, "image tag %s: %d: %s", args, st, out);
	free(out);
}

static struct sandq_result *
cat_on(struct sandq *c, const char *image)
{
	const char *const argv[] = { "cat", "/which.txt", NULL };
	struct sandq_job_opts o = { .image = image };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0, "%s", sandq_last_error(c));
	return r;
}

static void
expect_rejected(const struct sandq_result *r, const char *msg)
{
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "image");
	cr_expect_str_eq(r->error_message, msg);
}

/* The manifest digest the registry serves for repo, by skopeo. */
static void
registry_digest(const char *repo, char *buf, size_t size)
{
	char cmd[600], *out = NULL;

	snprintf(cmd, sizeof(cmd), "skopeo inspect --raw --tls-verify=false %s | "
	    "sha256sum | cut -c1-64", ref(repo));
	cr_assert_eq(harness_run(cmd, &out), 0);
	cr_assert(out != NULL && strlen(out) >= 64);
	snprintf(buf, size, "sha256:%.64s", out);
	free(out);
}

/*** Tests ***/

Test(imgnames, a_tag_pins_the_registrys_digest_and_a_job_runs_by_name)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	char *out = NULL, want[400], digest[80];

	registry_digest("test/img:1", digest, sizeof(digest));
	cr_assert_eq(sq(&out, "image tag --plain-http py %s", ref("test/img:1")), 0, "%s", out);
	snprintf(want, sizeof(want), "py:latest -> docker://%s/test/img@%s\n", reg.addr,
	    digest);
	cr_expect_str_eq(out, want);
	free(out);
	r = cat_on(c, "py");
	cr_expect_str_eq(r->status, "ok", "%s: %s", r->status, r->error_message);
	cr_expect_str_eq((const char *)r->stdout_data, "one\n");
	snprintf(want, sizeof(want), "docker://%s/test/img@%s", reg.addr, digest);
	cr_expect_str_eq(r->image, want);
	cr_expect_str_eq(r->image_name, "py:latest");
	cr_expect(r->image_digest != NULL && strncmp(r->image_digest, "sha256:", 7) == 0);
	sandq_result_free(r);
	/* The same name with its tag spelled out; a job on host names no image. */
	r = cat_on(c, "py:latest");
	cr_expect_str_eq((const char *)r->stdout_data, "one\n");
	cr_expect_str_eq(r->image_name, "py:latest");
	sandq_result_free(r);
	{
		struct sandq_result *hr = harness_sh(c, "true", NULL);

		cr_expect_str_eq(hr->status, "ok");
		cr_expect_null(hr->image);
		cr_expect_null(hr->image_name);
		sandq_result_free(hr);
	}
	sandq_close(c);
}

Test(imgnames, a_name_keeps_its_bytes_when_the_tag_moves_until_tagged_again)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	char s[400];

	tag("py " "docker://127.0.0.1:1/unused:1 --no-pin");
	r = cat_on(c, "py");
	cr_expect_str_eq(r->status, "rejected", "a target outside image_sources");
	sandq_result_free(r);
	snprintf(s, sizeof(s), "py %s", ref("test/img:1"));
	tag(s);
	r = cat_on(c, "py");
	cr_expect_str_eq((const char *)r->stdout_data, "one\n");
	sandq_result_free(r);
	/* The registry's tag moves to another image. */
	snprintf(s, sizeof(s), "oci:%s/layout:two", src);
	harness_registry_push(&reg, s, "test/img:1");
	r = cat_on(c, ref("test/img:1"));
	cr_expect_str_eq((const char *)r->stdout_data, "two\n", "the tag itself moved");
	sandq_result_free(r);
	r = cat_on(c, "py");
	cr_expect_str_eq((const char *)r->stdout_data, "one\n", "the name did not");
	sandq_result_free(r);
	/* Tagged again, the name means what the tag names now. */
	snprintf(s, sizeof(s), "py %s", ref("test/img:1"));
	tag(s);
	r = cat_on(c, "py");
	cr_expect_str_eq((const char *)r->stdout_data, "two\n");
	sandq_result_free(r);
	/* --no-pin keeps the tag; another name copies a name's reference. */
	snprintf(s, sizeof(s), "moving %s --no-pin", ref("test/img:1"));
	tag(s);
	tag("copy:v1 py");
	{
		char *out = NULL;

		cr_assert_eq(sq(&out, "image tags --json"), 0, "%s", out);
		snprintf(s, sizeof(s), "\"name\":\"moving:latest\",\"ref\":\"%s\"",
		    ref("test/img:1"));
		cr_expect(strstr(out, s) != NULL, "%s in %s", s, out);
		cr_expect(strstr(out, "\"name\":\"copy:v1\"") != NULL, "%s", out);
		free(out);
	}
	r = cat_on(c, "copy:v1");
	cr_expect_str_eq((const char *)r->stdout_data, "two\n");
	cr_expect_str_eq(r->image_name, "copy:v1");
	sandq_result_free(r);
	sandq_close(c);
}

Test(imgnames, unknown_outside_and_damaged_names_are_rejected_naming_the_problem)
{
	struct sandq *c = harness_client(&h);
	struct sandq_result *r;
	char want[600], s[400];
	const char zeros[] = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

	r = cat_on(c, "nope");
	expect_rejected(r, "field 'image': tenant 'default' has no image named "
	    "'nope:latest' (sandq image tag)");
	sandq_result_free(r);
	/* A name never widens image_sources: its target is checked per job. */
	snprintf(s, sizeof(s), "bad docker://%s/other/img@%s", reg.addr, zeros);
	tag(s);
	r = cat_on(c, "bad");
	snprintf(want, sizeof(want), "field 'image': 'docker://%s/other/img@%s' (image "
	    "name 'bad:latest') is not within this host's image_sources", reg.addr, zeros);
	expect_rejected(r, want);
	sandq_result_free(r);
	/* A value written past the command: read as untrusted. */
	{
		const char *const args[] = { "HSET", "sandq:{default}:images", "junk:latest",
		    "{\"ref\":\"docker://x/\\u001b[31m\"}", NULL };
		char *out = harness_redis_cli(&h, args);

		free(out);
	}
	r = cat_on(c, "junk");
	cr_expect_str_eq(r->status, "rejected");
	cr_expect(r->error_message != NULL && strstr(r->error_message,
	    "field 'image': image name 'junk:latest' of tenant 'default' is damaged "
	    "in Redis: 'ref': ") != NULL, "%s", r->error_message);
	cr_expect(r->error_message != NULL && strchr(r->error_message, 0x1b) == NULL,
	    "no raw escape byte in the message");
	sandq_result_free(r);
	sandq_close(c);
}

Test(imgnames, untag_tags_and_the_commands_refusals)
{
	char *out = NULL, s[400];

	tag("a:1 host");
	snprintf(s, sizeof(s), "b %s", ref("test/img:1"));
	tag(s);
	cr_assert_eq(sq(&out, "image tags"), 0, "%s", out);
	cr_expect(strstr(out, "NAME") == out, "a header first: %s", out);
	cr_expect(strstr(out, "a:1 ") != NULL && strstr(out, " host\n") != NULL, "%s", out);
	cr_expect(strstr(out, "b:latest") != NULL && strstr(out, "(tagged as ") != NULL,
	    "%s", out);
	cr_expect(strstr(out, "a:1") < strstr(out, "b:latest"), "sorted: %s", out);
	free(out);
	cr_expect_eq(sq(&out, "image untag a:1"), 0, "%s", out);
	free(out);
	cr_expect_eq(sq(&out, "image untag a:1"), 1);
	cr_expect_str_eq(out, "sandq: image: tenant 'default' has no image named 'a:1'\n");
	free(out);
	/* Usage: a reference as the name, a bad name, a bad reference. */
	cr_expect_eq(sq(&out, "image tag %s host", ref("test/img:1")), 2);
	free(out);
	cr_expect_eq(sq(&out, "image tag 'Bad Name' host"), 2);
	cr_expect(strstr(out, "'Bad Name': byte 0x20 at offset 3") != NULL, "%s", out);
	free(out);
	cr_expect_eq(sq(&out, "image tag ok ftp://x/y"), 2);
	cr_expect(strstr(out, "unknown transport 'ftp:'") != NULL, "%s", out);
	free(out);
	/* A registry that does not answer: nothing stored, the image named. */
	cr_expect_eq(sq(&out, "image tag --plain-http gone docker://127.0.0.1:1/x:1"), 1);
	cr_expect(strstr(out, "image 'docker://127.0.0.1:1/x:1': skopeo inspect failed")
	    != NULL, "%s", out);
	free(out);
	cr_expect_eq(sq(&out, "image untag gone"), 1);
	free(out);
}

Test(imgnames, a_tenants_own_user_names_its_images_and_no_one_elses)
{
	char *out = NULL, url[400], cmd[1200];
	const char *p, *nl;

	cr_assert_eq(sq(&out, "tenant add t1"), 0, "%s", out);
	/* The last line is the tenant's URL. */
	p = out + strlen(out);
	while (p > out && p[-1] == '\n')
		p--;
	nl = p;
	while (p > out && p[-1] != '\n')
		p--;
	snprintf(url, sizeof(url), "%.*s", (int)(nl - p), p);
	free(out);
	cr_assert(strncmp(url, "redis://sandq-t1", 16) == 0, "%s", url);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis '%s' --tenant t1 image tag mine host 2>&1",
	    harness_build_dir(), url);
	cr_expect_eq(harness_run(cmd, &out), 0, "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis '%s' --tenant t1 image tags 2>&1",
	    harness_build_dir(), url);
	cr_expect_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect(strstr(out, "mine:latest") != NULL, "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis '%s' --tenant default image tag "
	    "theirs host 2>&1", harness_build_dir(), url);
	cr_expect_eq(harness_run(cmd, &out), 125, "%s", out);
	cr_expect(strstr(out, "NOPERM") != NULL, "%s", out);
	free(out);
	cr_expect_eq(sq(&out, "image tags"), 0);
	cr_expect(strstr(out, "theirs") == NULL, "%s", out);
	free(out);
}
