/*
 * images_hostile_test.c - hostile images end to end (issue 16, items 3
 * and 6): each class of hostile layer or image is written by hand
 * (imgbuild.c), pushed to a private docker-registry (harness.c), and
 * named by a job that a real sandqd must pull it for.
 *
 * unpack_test proves the unpacker's classes on its own and images_test
 * the cache's; here each class is seen as a tenant sees it, through a
 * job's answer, and as the host sees it, through sandqd's cache
 * (STATE/images, the harness's state folder):
 *
 * - refused: the job is rejected with code image and a message naming
 *   the image, the layer and (where the unpacker names one) the entry,
 *   escaped; nothing of the image is in the cache (no record, no
 *   reference, no folder of the refused layer, no staging or .unpack.*
 *   folder), the eviction sweep after the refused pull leaves none of
 *   its blobs nor the layers below the refused one, and a job on a good
 *   image runs;
 * - neutralised: the job runs ok and shows the neutralised state (names
 *   inside the root, no devices nor FIFOs, no setuid or setgid bit, the
 *   root mounted nosuid and nodev, no extended attribute);
 * - whiteouts and opaque folders over three layers, as the OCI image
 *   spec says (what images_run_test does not already show).
 *
 * sandqd runs with the unpacker's bounds lowered through its config
 * (image_max_layer_bytes, _entries, _ratio), so the bounds are reached
 * with small layers and the messages show the configured values.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

#define MAX_BYTES (8u << 20)	/* image_max_layer_bytes */
#define MAX_ENTRIES 100		/* image_max_layer_entries */
#define MAX_RATIO 50		/* image_max_layer_ratio */
#define SWEEP_MS 20000		/* for the eviction after a good pull */

static struct harness h;
static struct harness_registry reg;
static char src[300], layout[320], cache[400];
static char sources[200], plain[100];
static struct imgb_desc d_good;

static const char *const ENV[] = { "PATH=/bin", NULL };

/* The busybox root of the good image and of the neutralised ones. */
static struct imgb_entry BASE[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/cat", 'l', "busybox", 0, 0 },
	{ "bin/ls", 'l', "busybox", 0, 0 },
	{ "bin/true", 'l', "busybox", 0, 0 },
	{ "etc", 'd', NULL, 0, 0 },
	{ "hello.txt", 'f', "hello\n", 6, 0 },
	{ "d", 'd', NULL, 0, 0 },
	{ "d/old.txt", 'f', "old\n", 4, 0 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** Fixture ***/

/* Writes img as tag into the layout and pushes it as test/TAG:1. */
static void
push(const char *tag, const struct imgb_image *img, struct imgb_desc *d)
{
	char s[400], repo[100];

	imgb_write(layout, tag, img, d);
	snprintf(s, sizeof(s), "oci:%s:%s", layout, tag);
	snprintf(repo, sizeof(repo), "test/%s:1", tag);
	harness_registry_push(&reg, s, repo);
}

static void
setup(void)
{
	struct imgb_image good = { .env = ENV, .layers = { BASE } };
	char bytes[64], entries[64], ratio[64];

	imgb_busybox(&BASE[1]);
	snprintf(src, sizeof(src), "/tmp/sandq-imghostile-XXXXXX");
	cr_assert(mkdtemp(src) != NULL);
	snprintf(layout, sizeof(layout), "%s/layout", src);
	harness_registry_start(&reg, src);
	push("good", &good, &d_good);
	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/test/*", reg.addr);
	snprintf(plain, sizeof(plain), "image_plain_http=%s", reg.addr);
	snprintf(bytes, sizeof(bytes), "image_max_layer_bytes=%u", MAX_BYTES);
	snprintf(entries, sizeof(entries), "image_max_layer_entries=%d", MAX_ENTRIES);
	snprintf(ratio, sizeof(ratio), "image_max_layer_ratio=%d", MAX_RATIO);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, "--set", bytes,
		    "--set", entries, "--set", ratio, NULL };

		harness_start(&h, 2, extra);
	}
	snprintf(cache, sizeof(cache), "%s/state/images", h.dir);
}

static void
teardown(void)
{
	harness_stop(&h);
	harness_registry_stop(&reg);
	if (src[0])
		harness_rmtree(src);
}

TestSuite(images_hostile, .init = setup, .fini = teardown, .timeout = 240);

/*** Helpers ***/

/* A reference to test/TAG:1 in the test registry. */
static const char *
ref(const char *tag)
{
	static char buf[4][200];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "docker://%s/test/%s:1", reg.addr, tag);
	return buf[k];
}

/* Runs sh -c script on image (wall limit 60 s) and returns its result. */
static struct sandq_result *
sh_on(const char *image, const char *script)
{
	const char *const argv[] = { "sh", "-c", script, NULL };
	struct sandq_job_opts o = { .image = image };
	struct sandq *c = harness_client(&h);
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	o.limits.wall_ms = 60000;
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, 120000, &r), 0, "%s", sandq_last_error(c));
	sandq_close(c);
	return r;
}

/* Runs script on the image of tag and expects it ok with exactly out. */
static void
expect_ok(const char *tag, const char *script, const char *out)
{
	struct sandq_result *r = sh_on(ref(tag), script);

	cr_expect_str_eq(r->status, "ok", "%s: %s (stderr: %s)", r->status,
	    r->error_message ? r->error_message : "", r->stderr_data);
	cr_expect_str_eq((const char *)r->stdout_data, out, "stderr: %s", r->stderr_data);
	sandq_result_free(r);
}

/* How the unpacker names layer i (0-based) of d: "layer N (sha256:12 hex)". */
static const char *
layer_of(const struct imgb_desc *d, size_t i)
{
	static char buf[2][64];
	static int k;

	k = (k + 1) % 2;
	snprintf(buf[k], sizeof(buf[k]), "layer %zu (%.19s)", i + 1, d->layers[i]);
	return buf[k];
}

/* The path in the cache named by fmt with arg in it (one %s). */
static const char *
in_cache(const char *fmt, const char *arg)
{
	static char buf[2][PATH_MAX + 512];
	static int k;
	char rel[512];

	k = (k + 1) % 2;
	snprintf(rel, sizeof(rel), fmt, arg);
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", cache, rel);
	return buf[k];
}

/* The unpacked path rel of layer digest (sha256:...) in the cache. */
static const char *
unpacked(const char *digest, const char *rel)
{
	static char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s/layers/sha256/%s/%s", cache, digest + 7, rel);
	return buf;
}

/* Entries of the cache's folder rel ("." and ".." not counted). */
static int
entries(const char *rel)
{
	DIR *dir = opendir(in_cache("%s", rel));
	struct dirent *de;
	int n = 0;

	cr_assert(dir != NULL, "%s: %s", rel, strerror(errno));
	while ((de = readdir(dir)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(dir);
	return n;
}

/* Whether path exists on the host (not followed). */
static bool
host_has(const char *path)
{
	struct stat sb;

	return lstat(path, &sb) == 0;
}

static int unpack_dirs;		/* .unpack.* folders nftw found */

static int
count_unpack(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	if (strncmp(path + ftw->base, ".unpack.", 8) == 0)
		unpack_dirs++;
	return 0;
}

/* The digests a refused image may have left blobs of (up to 16). */
struct digests {
	const char *v[16];
	size_t n;
};

static void
digests_of(struct digests *ds, const struct imgb_desc *d)
{
	cr_assert_lt(ds->n + 2 + d->nlayers, 16);
	ds->v[ds->n++] = d->digest;
	if (d->config[0] != '\0')
		ds->v[ds->n++] = d->config;
	for (size_t i = 0; i < d->nlayers; i++)
		ds->v[ds->n++] = d->layers[i];
}

/* Whether name is one of the good image's blobs, or its layer's folder or .json. */
static bool
good_one(const char *name)
{
	const char *good[] = { d_good.digest, d_good.config, d_good.layers[0] };
	size_t n = strlen(d_good.layers[0] + 7);

	for (size_t i = 0; i < 3; i++)
		if (strcmp(name, good[i] + 7) == 0)
			return true;
	return strncmp(name, d_good.layers[0] + 7, n) == 0 && strcmp(name + n, ".json") == 0;
}

/* Whether the cache's folder rel holds nothing but the good image's (or is not there). */
static bool
only_good_in(const char *rel)
{
	DIR *dir = opendir(in_cache("%s", rel));
	struct dirent *de;
	bool ok = dir != NULL || errno == ENOENT;

	while (dir != NULL && ok && (de = readdir(dir)) != NULL)
		ok = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    good_one(de->d_name);
	if (dir != NULL)
		closedir(dir);
	return ok;
}

/*
 * harness_wait_for() predicate: the cache's blobs and unpacked layers are
 * the good image's alone (or none), and index.json names no digest of arg
 * (a struct digests): what the eviction after a pull leaves.
 */
static bool
swept(void *arg)
{
	const struct digests *ds = arg;
	char *index = NULL, cmd[PATH_MAX + 600];
	bool ok;

	if (!only_good_in("oci/blobs/sha256") || !only_good_in("layers/sha256"))
		return false;
	/* No index.json (none was ever written, or a failed copy's was undone) names nothing. */
	snprintf(cmd, sizeof(cmd), "cat %s 2>/dev/null", in_cache("%s", "oci/index.json"));
	harness_run(cmd, &index);
	ok = index != NULL;
	for (size_t i = 0; ok && i < ds->n; i++)
		ok = strstr(index, ds->v[i] + 7) == NULL;
	free(index);
	return ok;
}

/* No byte of s is a control byte. */
static void
expect_printable(const char *s)
{
	for (const char *p = s; p != NULL && *p != '\0'; p++)
		cr_expect(*(const unsigned char *)p >= 0x20 && *(const unsigned char *)p != 0x7f,
		    "a control byte at %zu in: %s", (size_t)(p - s), s);
}

/*
 * A job on the image of tag is rejected with code image and the message
 * "field 'image': image 'REF': " then why: exactly, or (prefix) as its
 * start, then holding tail; no control byte in it. Then nothing of it is
 * in the cache: no record, no reference, no folder of the refused layer
 * (digest layer, or NULL), no .unpack.* folder anywhere, nothing in tmp/
 * nor staging/;
 * the sweep after the refused pull leaves no blob (digests ds), index.json
 * entry or unpacked layer of the image; and a job on the good image runs.
 */
static void
expect_refused(const char *tag, const char *why, bool prefix, const char *tail,
    const struct digests *ds, const char *layer)
{
	struct sandq_result *r = sh_on(ref(tag), "true");
	char want[600];

	snprintf(want, sizeof(want), "field 'image': image '%s': %s", ref(tag), why);
	cr_expect_str_eq(r->status, "rejected", "%s: %s", r->status,
	    r->error_message ? r->error_message : "");
	cr_expect_str_eq(r->error_code, "image");
	cr_assert_not_null(r->error_message);
	if (prefix)
		cr_expect(strncmp(r->error_message, want, strlen(want)) == 0,
		    "message:  %s\nexpected: %s...", r->error_message, want);
	else
		cr_expect_str_eq(r->error_message, want);
	if (tail != NULL)
		cr_expect(strstr(r->error_message, tail) != NULL, "no '%s' in: %s", tail,
		    r->error_message);
	expect_printable(r->error_message);
	sandq_result_free(r);

	/* Nothing of it in the cache: the good image is not pulled yet either. */
	cr_expect_eq(entries("images/sha256"), 0, "an image record was left");
	cr_expect_eq(entries("refs"), 0, "a reference was left");
	if (layer != NULL) {
		cr_expect(!host_has(in_cache("layers/sha256/%s", layer + 7)),
		    "the refused layer's folder is there");
		cr_expect(!host_has(in_cache("layers/sha256/%s.json", layer + 7)));
	}
	unpack_dirs = 0;
	cr_assert_eq(nftw(cache, count_unpack, 16, FTW_PHYS), 0);
	cr_expect_eq(unpack_dirs, 0, "an .unpack.* folder was left");
	cr_expect_eq(entries("tmp"), 0, "skopeo left files in tmp/");
	cr_expect_eq(entries("staging"), 0, "an unpack's staging folder was left");
	/* What the pull fetched or unpacked before its refusal is swept after it. */
	cr_expect(harness_wait_for(swept, (void *)(uintptr_t)ds, SWEEP_MS),
	    "what the refused pull fetched stayed in the cache");

	/* The host goes on: a job on a good image runs. */
	expect_ok("good", "cat /hello.txt", "hello\n");
	cr_expect_eq(entries("images/sha256"), 1, "the good image's record alone");
	cr_expect_eq(entries("layers/sha256"), 2, "the good image's layer and its .json");
	cr_expect(swept((void *)(uintptr_t)ds));
}

/* expect_refused() for a one-layer image d, the unpacker's message whole. */
static void
expect_layer_refused(const char *tag, const struct imgb_desc *d, const char *why)
{
	struct digests ds = { 0 };
	char msg[400];

	snprintf(msg, sizeof(msg), "%s: %s", layer_of(d, 0), why);
	digests_of(&ds, d);
	expect_refused(tag, msg, false, NULL, &ds, d->layers[0]);
}

/*** Refused: names, links, whiteouts ***/

Test(images_hostile, a_dotdot_entry_is_refused_escaped_and_nothing_escapes)
{
	char name[200], out[120], why[300], tok[32];
	struct imgb_entry layer[] = {
		{ "ok.txt", 'f', "fine\n", 5, 0 },
		{ name, 'f', "escaped\n", 8, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	/* ESC [2J clears a terminal: it must reach no message raw. */
	harness_marker(tok, sizeof(tok), "");
	snprintf(name, sizeof(name), "a\x1b[2J/../../../../../../tmp/esc%s", tok);
	snprintf(out, sizeof(out), "/tmp/esc%s", tok);
	push("dotdot", &img, &d);
	snprintf(why, sizeof(why), "'..' in an entry is refused: "
	    "'a\\x1b[2J/../../../../../../tmp/esc%s'", tok);
	expect_layer_refused("dotdot", &d, why);
	cr_expect(!host_has(out), "%s was written on the host", out);
}

Test(images_hostile, a_hard_link_out_of_the_layer_is_refused)
{
	/* An absolute target is the layer's own path, which it never wrote. */
	static const struct imgb_entry layer[] = {
		{ "passwd", 'h', "/etc/passwd", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	push("hlabs", &img, &d);
	expect_layer_refused("hlabs", &d, "a hard link to a path that is not an "
	    "earlier file of this layer: 'passwd'");
}

Test(images_hostile, a_hard_link_up_and_out_of_the_layer_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "shadow", 'h', "../../../../etc/shadow", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	push("hlup", &img, &d);
	expect_layer_refused("hlup", &d, "'..' in a hard link's target is refused: "
	    "'../../../../etc/shadow'");
}

Test(images_hostile, a_hard_link_to_a_later_entry_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "early", 'h', "late", 0, 0 },
		{ "late", 'f', "late\n", 5, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	push("hllate", &img, &d);
	expect_layer_refused("hllate", &d, "a hard link to a path that is not an "
	    "earlier file of this layer: 'early'");
}

Test(images_hostile, writing_through_a_symlink_is_refused_and_nothing_escapes)
{
	char name[120], out[120], why[300], tok[32];
	struct imgb_entry layer[] = {
		{ "tmplink", 'l', "/tmp", 0, 0 },
		{ name, 'f', "escaped\n", 8, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	harness_marker(tok, sizeof(tok), "");
	snprintf(name, sizeof(name), "tmplink/esc%s", tok);
	snprintf(out, sizeof(out), "/tmp/esc%s", tok);
	push("symparent", &img, &d);
	snprintf(why, sizeof(why), "writing through a symlink is refused: '%s'", name);
	expect_layer_refused("symparent", &d, why);
	cr_expect(!host_has(out), "%s was written on the host", out);
}

Test(images_hostile, a_whiteout_naming_no_sibling_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "d", 'd', NULL, 0, 0 },
		{ "d/keep", 'f', "keep\n", 5, 0 },
		{ "d/.wh..", 'f', "", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;

	push("whdot", &img, &d);
	expect_layer_refused("whdot", &d, "a whiteout that names no sibling: 'd/.wh..'");
}

/*** Refused: bounds ***/

Test(images_hostile, a_layer_past_the_entries_bound_is_refused)
{
	static struct imgb_entry layer[MAX_ENTRIES + 2];
	static char names[MAX_ENTRIES + 1][16];
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;
	char why[100];

	for (int i = 0; i <= MAX_ENTRIES; i++) {
		snprintf(names[i], sizeof(names[i]), "e%03d", i);
		layer[i] = (struct imgb_entry){ names[i], 'f', "", 0, 0 };
	}
	layer[MAX_ENTRIES + 1].path = NULL;
	push("entries", &img, &d);
	snprintf(why, sizeof(why), "more than %d entries", MAX_ENTRIES);
	expect_layer_refused("entries", &d, why);
}

Test(images_hostile, a_layer_past_the_bytes_bound_is_refused_at_the_entry)
{
	/*
	 * 5 MiB of incompressible bytes, then 5 MiB of zeros: each alone
	 * within 8 MiB, the second past it in all, refused at its header.
	 */
	static const struct imgb_entry layer[] = {
		{ "first", 'f', NULL, 5u << 20, 0 },
		{ "second", 'z', NULL, 5u << 20, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;
	char why[100];

	push("bytes", &img, &d);
	snprintf(why, sizeof(why), "files of more than %u bytes in all, at: 'second'",
	    MAX_BYTES);
	expect_layer_refused("bytes", &d, why);
}

/*
 * On top of a good layer, which the pull unpacks before it meets the bomb:
 * the sweep after the refusal removes it.
 */
Test(images_hostile, a_gzip_bomb_past_the_ratio_is_refused)
{
	static const struct imgb_entry lower[] = {
		{ "lower.txt", 'f', "lower\n", 6, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	/* 6 MiB of zeros: within the bytes bound, gzip'd about 1,000 to 1. */
	static const struct imgb_entry layer[] = {
		{ "zeros", 'z', NULL, 6u << 20, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { lower, layer } };
	struct imgb_desc d;
	struct digests ds = { 0 };
	char why[200];

	push("bomb", &img, &d);
	snprintf(why, sizeof(why), "%s: decompresses more than %d times (", layer_of(&d, 1),
	    MAX_RATIO);
	digests_of(&ds, &d);
	expect_refused("bomb", why, true, "): refused as a decompression bomb", &ds,
	    d.layers[1]);
}

/*** Refused: damaged blobs, other platforms ***/

Test(images_hostile, a_truncated_layer_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "first", 'f', "x", 1, 0 },
		{ "random", 'f', NULL, 1u << 20, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	/* Cut in half: its digest is of the cut bytes, so only the unpacker sees it. */
	struct imgb_image img = { .layers = { layer }, .truncate = 1 };
	struct imgb_desc d;
	struct digests ds = { 0 };
	char why[200];

	push("truncated", &img, &d);
	snprintf(why, sizeof(why), "%s: corrupt or truncated archive: ", layer_of(&d, 0));
	digests_of(&ds, &d);
	expect_refused("truncated", why, true, "truncated gzip input", &ds, d.layers[0]);
}

Test(images_hostile, a_layer_that_does_not_match_its_digest_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "random", 'f', NULL, 256u << 10, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { layer } };
	struct imgb_desc d;
	struct digests ds = { 0 };
	char blob[PATH_MAX], tail[200];

	/* The registry's own copy is altered after the push: it serves other bytes. */
	push("tampered", &img, &d);
	snprintf(blob, sizeof(blob), "%s/data/docker/registry/v2/blobs/sha256/%.2s/%s/data",
	    reg.dir, d.layers[0] + 7, d.layers[0] + 7);
	imgb_tamper(blob);
	digests_of(&ds, &d);
	/* skopeo checks every blob it copies: its words, the digest in them. */
	snprintf(tail, sizeof(tail), "Digest did not match, expected %s, got sha256:",
	    d.layers[0]);
	expect_refused("tampered", "skopeo copy failed: ", true, tail, &ds, d.layers[0]);
}

Test(images_hostile, an_image_for_another_architecture_is_refused)
{
	static const struct imgb_entry layer[] = {
		{ "arch", 'f', "arm64\n", 6, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .arch = "arm64", .layers = { layer } };
	struct imgb_desc d;
	struct digests ds = { 0 };

	push("arm64", &img, &d);
	digests_of(&ds, &d);
	expect_refused("arm64", "it is for linux/arm64, not linux/amd64", false, NULL, &ds,
	    d.layers[0]);
}

Test(images_hostile, an_index_without_this_platform_is_refused_naming_its_platforms)
{
	static const struct imgb_entry arm[] = {
		{ "arch", 'f', "arm64\n", 6, 0 }, { NULL, 0, NULL, 0, 0 } };
	static const struct imgb_entry s390[] = {
		{ "arch", 'f', "s390x\n", 6, 0 }, { NULL, 0, NULL, 0, 0 } };
	struct imgb_image a = { .arch = "arm64", .layers = { arm } };
	struct imgb_image s = { .arch = "s390x", .layers = { s390 } };
	struct imgb_desc m[2], idx;
	struct digests ds = { 0 };
	char s_[400];

	imgb_write(layout, NULL, &a, &m[0]);
	imgb_write(layout, NULL, &s, &m[1]);
	imgb_write_index(layout, "multi", m, 2, &idx);
	snprintf(s_, sizeof(s_), "oci:%s:multi", layout);
	harness_registry_push(&reg, s_, "test/multi:1");
	digests_of(&ds, &idx);
	digests_of(&ds, &m[0]);
	digests_of(&ds, &m[1]);
	expect_refused("multi", "no linux/amd64 image in its index; it has: linux/arm64, "
	    "linux/s390x", false, NULL, &ds, NULL);
}

/*
 * image_cache_bytes = 0 means no bound: no image is ever evicted, but what
 * a refused pull fetched is still swept (the arm64 image's blobs, which
 * skopeo copied before the cache read its config).
 */
Test(images_hostile, with_no_cache_bound_a_refused_pull_is_still_swept)
{
	static const struct imgb_entry layer[] = {
		{ "arch", 'f', "arm64\n", 6, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .arch = "arm64", .layers = { layer } };
	char nobound[] = "image_cache_bytes=0";
	const char *const sets[] = { sources, plain, nobound, NULL };
	struct imgb_desc d;
	struct digests ds = { 0 };
	pid_t pid;

	/* A sandqd of its own in place of the fixture's. */
	harness_stop_sandqd(&h, 10000);
	pid = harness_start_host(&h, "nobound", 1, 200000, sets);
	cr_assert(pid > 0);
	snprintf(cache, sizeof(cache), "%s/state-nobound/images", h.dir);
	push("arm64nb", &img, &d);
	digests_of(&ds, &d);
	expect_refused("arm64nb", "it is for linux/arm64, not linux/amd64", false, NULL, &ds,
	    d.layers[0]);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

/*** Neutralised ***/

Test(images_hostile, absolute_names_land_inside_the_root)
{
	char dir[120], file[140], link[140], script[600], tok[32];
	struct imgb_entry layer[] = {
		{ dir, 'd', NULL, 0, 0 },
		{ file, 'f', "absolute\n", 9, 0 },
		{ link, 'h', file, 0, 0 },
		{ "//etc/motd", 'f', "motd\n", 5, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .env = ENV, .layers = { BASE, layer } };
	struct imgb_desc d;

	harness_marker(tok, sizeof(tok), "");
	snprintf(dir, sizeof(dir), "/abs%s", tok);
	snprintf(file, sizeof(file), "%s/file", dir);
	snprintf(link, sizeof(link), "%s/link", dir);
	push("absolute", &img, &d);
	snprintf(script, sizeof(script), "cat %s %s /etc/motd; busybox stat -c %%h %s",
	    file, link, file);
	expect_ok("absolute", script, "absolute\nabsolute\nmotd\n2\n");
	cr_expect(!host_has(dir), "%s was made on the host", dir);
	cr_expect(host_has(unpacked(d.layers[1], file + 1)), "not in the layer: %s", file);
}

Test(images_hostile, devices_and_fifos_are_absent)
{
	static const struct imgb_entry layer[] = {
		{ "devs", 'd', NULL, 0, 0 },
		{ "devs/null", 'c', NULL, 0, 0666 },	/* len set below */
		{ "devs/sda", 'b', NULL, 0, 0660 },
		{ "devs/fifo", 'p', NULL, 0, 0644 },
		{ "devs/kept", 'f', "kept\n", 5, 0 },
		/* A 0/0 device of the layer's own would be a whiteout: not obeyed. */
		{ "hello.txt", 'c', NULL, 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_entry l[7];
	struct imgb_image img = { .env = ENV, .layers = { BASE, l } };
	struct imgb_desc d;

	memcpy(l, layer, sizeof(l));
	l[1].len = makedev(1, 3);
	l[2].len = makedev(8, 0);
	l[5].len = makedev(0, 0);
	push("devices", &img, &d);
	expect_ok("devices", "ls -a /devs; cat /hello.txt", ".\n..\nkept\nhello\n");
	cr_expect(!host_has(unpacked(d.layers[1], "devs/null")));
	cr_expect(!host_has(unpacked(d.layers[1], "hello.txt")));
}

Test(images_hostile, setuid_and_setgid_bits_are_cleared_and_the_root_is_nosuid_nodev)
{
	static const struct imgb_entry layer[] = {
		{ "suid", 'f', "#!/bin/sh\n", 10, 04755 },
		{ "sgid", 'f', "#!/bin/sh\n", 10, 02755 },
		{ "both", 'f', "#!/bin/sh\n", 10, 06711 },
		{ "sgiddir", 'd', NULL, 0, 02775 },
		{ "sticky", 'd', NULL, 0, 01777 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .env = ENV, .layers = { BASE, layer } };
	struct imgb_desc d;
	struct stat sb;

	push("setid", &img, &d);
	/* The sticky bit is no privilege: kept. */
	expect_ok("setid", "busybox stat -c '%a %n' /suid /sgid /both /sgiddir /sticky",
	    "755 /suid\n755 /sgid\n711 /both\n775 /sgiddir\n1777 /sticky\n");
	/* The root's mount options, as the kernel shows them to the job. */
	expect_ok("setid", "busybox awk '$5 == \"/\" { n = split($6, o, \",\"); "
	    "for (i = 1; i <= n; i++) if (o[i] == \"nosuid\" || o[i] == \"nodev\") "
	    "print o[i] }' /proc/self/mountinfo", "nosuid\nnodev\n");
	cr_assert_eq(lstat(unpacked(d.layers[1], "suid"), &sb), 0);
	cr_expect_eq(sb.st_mode & 07777, 0755, "in the cache: %o", sb.st_mode & 07777);
}

Test(images_hostile, extended_attributes_are_not_restored)
{
	/*
	 * A forged user.overlay.opaque would hide the lower layer's d/old.txt
	 * (overlayfs reads user.overlay.* with userxattr); user.sandq is any
	 * attribute at all.
	 */
	static const struct imgb_entry layer[] = {
		{ "d", 'd', "user.overlay.opaque=y", 0, 0 },
		{ "d/top.txt", 'f', "top\n", 4, 0 },
		{ "noted", 'x', "user.sandq=hostile", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .env = ENV, .layers = { BASE, layer } };
	struct imgb_desc d;
	char list[256];

	push("xattrs", &img, &d);
	expect_ok("xattrs", "ls /d; cat /noted; echo end", "old.txt\ntop.txt\nend\n");
	cr_expect_eq(llistxattr(unpacked(d.layers[1], "d"), list, sizeof(list)), 0,
	    "d carries an xattr");
	cr_expect_eq(llistxattr(unpacked(d.layers[1], "noted"), list, sizeof(list)), 0,
	    "noted carries an xattr");
}

/*** Whiteouts and opaque folders, as the OCI image spec says ***/

/*
 * Over three layers: a whiteout for a lower layer's folder removes it
 * whole; an opaque folder hides the lower layers' files and keeps its
 * own and those of layers above; a whiteout and a file of the same name
 * in one layer keep the file (a whiteout hides lower layers only); a
 * file whited out in one layer and written again above comes back with
 * the new bytes; a nested whiteout removes one file of a lower folder.
 */
Test(images_hostile, whiteouts_and_opaque_folders_across_three_layers)
{
	static const struct imgb_entry one[] = {
		{ "w", 'd', NULL, 0, 0 },
		{ "w/a", 'f', "a\n", 2, 0 },
		{ "o", 'd', NULL, 0, 0 },
		{ "o/old", 'f', "old\n", 4, 0 },
		{ "back.txt", 'f', "one\n", 4, 0 },
		{ "n", 'd', NULL, 0, 0 },
		{ "n/gone", 'f', "gone\n", 5, 0 },
		{ "n/stays", 'f', "stays\n", 6, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	static const struct imgb_entry two[] = {
		{ ".wh.w", 'f', "", 0, 0 },
		{ "o", 'd', NULL, 0, 0 },
		{ "o/.wh..wh..opq", 'f', "", 0, 0 },
		{ "o/mine", 'f', "mine\n", 5, 0 },
		{ ".wh.back.txt", 'f', "", 0, 0 },
		{ ".wh.hello.txt", 'f', "", 0, 0 },
		{ "hello.txt", 'f', "replaced\n", 9, 0 },
		{ "n/.wh.gone", 'f', "", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	static const struct imgb_entry three[] = {
		{ "back.txt", 'f', "three\n", 6, 0 },
		{ "o/later", 'f', "later\n", 6, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .env = ENV, .layers = { BASE, one, two, three } };
	struct imgb_desc d;

	push("layers3", &img, &d);
	expect_ok("layers3", "ls -a / | busybox grep -c '^w$'; ls /o; cat /back.txt /hello.txt; "
	    "ls /n; ls -a / /o /n | busybox grep -c wh; true", "0\nlater\nmine\nthree\nreplaced\nstays\n0\n");
}

/*** The good image alone ***/

Test(images_hostile, the_good_image_runs_and_stays_alone_in_the_cache)
{
	struct digests none = { 0 };

	expect_ok("good", "cat /hello.txt; ls /d", "hello\nold.txt\n");
	cr_expect(harness_wait_for(swept, &none, SWEEP_MS));
	cr_expect_eq(entries("images/sha256"), 1);
	cr_expect_eq(entries("refs"), 1);
}
