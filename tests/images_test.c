/*
 * images_test.c - the per-host image cache (images/cache.c) against a real
 * registry: Debian's docker-registry on a free loopback port in the test's
 * mkdtemp folder (harness.c), test images written by hand (imgbuild.c) and
 * pushed with skopeo. Nothing here reaches the internet.
 *
 * Each test proves one behaviour of a pull: the record and the unpacked
 * files; a second pull that reuses; two processes pulling once; a tampered
 * blob refused by its digest; an unreachable, dying or hung registry
 * refused by the image's name with nothing half-done; an index without
 * this host's platform refused naming the platforms it has; the size
 * bound keeping what is in use and dropping the least recently used;
 * the archive transports.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "../images/cache.h"
#include "harness.h"
#include "imgbuild.h"

#define UNPACK_UID 65534	/* nobody: layers are never unpacked as root */

static char dir[256], src[300], root[300];
static struct harness_registry reg;
static struct img_cache *cache;
static struct imgb_desc img1, img2;	/* test/img:1 and test/img2:1: one base layer */

static const char *const ENV[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hi", NULL };

static const struct imgb_entry BASE[] = {
	{ "hello.txt", 'f', "hello from the image\n", 21, 0 },
	{ "etc", 'd', NULL, 0, 0 },
	{ "etc/motd", 'f', "motd\n", 5, 0 },
	{ "link", 'l', "hello.txt", 0, 0 },
	{ NULL, 0, NULL, 0, 0 },
};
static const struct imgb_entry TOP1[] = {
	{ "app", 'd', NULL, 0, 0 },
	{ "app/run.sh", 'f', "#!/bin/sh\necho one\n", 19, 0755 },
	{ NULL, 0, NULL, 0, 0 },
};
static const struct imgb_entry TOP2[] = {
	{ "app", 'd', NULL, 0, 0 },
	{ "app/run.sh", 'f', "#!/bin/sh\necho two\n", 19, 0755 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** Fixture and helpers ***/

static void
setup(void)
{
	struct imgb_image a = { .env = ENV, .workdir = "/app", .user = "1000:1000",
	    .layers = { BASE, TOP1 } };
	struct imgb_image b = { .env = ENV, .layers = { BASE, TOP2 } };
	struct err e = { 0 };

	snprintf(dir, sizeof(dir), "/tmp/sandq-test-XXXXXX");
	cr_assert(mkdtemp(dir) != NULL);
	snprintf(src, sizeof(src), "%s/src", dir);
	snprintf(root, sizeof(root), "%s/cache", dir);
	imgb_write(src, "img1", &a, &img1);
	imgb_write(src, "img2", &b, &img2);
	harness_registry_start(&reg, dir);
	{
		char s[400];

		snprintf(s, sizeof(s), "oci:%s:img1", src);
		harness_registry_push(&reg, s, "test/img:1");
		snprintf(s, sizeof(s), "oci:%s:img2", src);
		harness_registry_push(&reg, s, "test/img2:1");
	}
	cr_assert(img_cache_open(root, &cache, &e) == 0, "%s", e.msg);
}

static void
teardown(void)
{
	img_cache_close(cache);
	cache = NULL;
	harness_registry_stop(&reg);
	if (dir[0])
		harness_rmtree(dir);
}

TestSuite(images, .init = setup, .fini = teardown, .timeout = 180);

/* Pull options for the test registry (plain HTTP), unpacking as nobody. */
static struct img_pull_opts
opts(struct img_pull_stats *st)
{
	struct img_pull_opts o = { .plain_http = true, .unpack_uid = UNPACK_UID,
	    .unpack_gid = UNPACK_UID, .timeout_ms = 60000, .stats = st };

	return o;
}

/* "docker://ADDR/repo" (one of four rotating buffers). */
static const char *
ref(const char *repo)
{
	static char bufs[4][400];
	static int k;
	char *b = bufs[k++ % 4];

	snprintf(b, 400, "docker://%s/%s", reg.addr, repo);
	return b;
}

/* Entries of ROOT/rel other than . and .. (0 if it does not exist). */
static int
entries(const char *rel)
{
	char path[600];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* ROOT/rel/... exists. */
static bool
exists(const char *fmt, const char *hex)
{
	char path[1100], rel[700];
	struct stat st;

	snprintf(rel, sizeof(rel), fmt, hex);
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	return lstat(path, &st) == 0;
}

/* Reads file into buf (n bytes); its length or -1. */
static ssize_t
slurp(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY);
	ssize_t r;

	if (fd < 0)
		return -1;
	r = read(fd, buf, n - 1);
	close(fd);
	buf[r > 0 ? r : 0] = '\0';
	return r;
}

/* Every blob in the cache's layout is whole: its bytes hash to its name. */
static void
expect_blobs_whole(void)
{
	char path[600], hex[65];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/oci/blobs/sha256", root);
	if ((d = opendir(path)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		unsigned char md[EVP_MAX_MD_SIZE], buf[65536];
		unsigned int n = 0;
		EVP_MD_CTX *ctx;
		char file[1024];
		ssize_t r;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		cr_assert((fd = open(file, O_RDONLY)) >= 0);
		ctx = EVP_MD_CTX_new();
		EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
		while ((r = read(fd, buf, sizeof(buf))) > 0)
			EVP_DigestUpdate(ctx, buf, (size_t)r);
		close(fd);
		EVP_DigestFinal_ex(ctx, md, &n);
		EVP_MD_CTX_free(ctx);
		for (unsigned int i = 0; i < n; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		cr_expect_str_eq(hex, de->d_name, "a partial or foreign blob %s in the layout",
		    de->d_name);
	}
	closedir(d);
}

/*
 * Nothing half-done: no record, no reference, no layer folder or meta,
 * no stray file in the layout next to index.json, oci-layout and blobs,
 * every blob whole, and no skopeo left running on this cache.
 */
static void
expect_nothing_half_done(void)
{
	char path[600];
	struct dirent *de;
	pid_t pids[4];
	DIR *d;

	cr_expect_eq(entries("images/sha256"), 0, "a record was left");
	cr_expect_eq(entries("refs"), 0, "a reference was left");
	cr_expect_eq(entries("layers/sha256"), 0, "a layer was left");
	cr_expect_eq(entries("tmp"), 0, "skopeo's temporary files were left");
	snprintf(path, sizeof(path), "%s/oci", root);
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL)
			cr_expect(de->d_name[0] == '.' || strcmp(de->d_name, "index.json") == 0 ||
			    strcmp(de->d_name, "oci-layout") == 0 ||
			    strcmp(de->d_name, "blobs") == 0, "stray %s in the layout", de->d_name);
		closedir(d);
	}
	expect_blobs_whole();
	cr_expect_eq(harness_pgrep(root, pids, 4), 0, "a process on the cache is left");
}

static void
layer_path(const char *digest, const char *file, char *out, size_t n)
{
	char l[600];

	cr_assert(img_cache_layer_path(cache, digest, l, sizeof(l)) == 0);
	snprintf(out, n, "%s/%s", l, file);
}

/*** Pulling ***/

struct seen {
	int fetch, verify, unpack, done;
};

static void
on_progress(void *arg, const struct img_progress *p)
{
	struct seen *s = arg;

	s->fetch += p->phase == IMG_PHASE_FETCH && p->digest != NULL;
	s->verify += p->phase == IMG_PHASE_VERIFY;
	s->unpack += p->phase == IMG_PHASE_UNPACK;
	s->done += p->phase == IMG_PHASE_DONE;
}

Test(images, pull_records_the_image_and_unpacks_its_layers)
{
	struct img_pull_stats st = { 0 };
	struct img_pull_opts o = opts(&st);
	struct img_record *r = NULL, *again = NULL;
	struct seen seen = { 0 };
	struct err e = { 0 };
	char path[700], buf[128];
	struct stat sb;

	o.progress = on_progress;
	o.progress_arg = &seen;
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect_str_eq(r->reference, ref("test/img:1"));
	cr_expect_str_eq(r->manifest, img1.digest, "the manifest is the one pushed");
	cr_expect_str_eq(r->config, img1.config);
	cr_expect_str_eq(r->arch, "amd64");
	cr_expect_str_eq(r->os, "linux");
	cr_assert_eq(r->nlayers, 2);
	cr_expect_str_eq(r->layers[0].digest, img1.layers[0]);
	cr_expect_str_eq(r->layers[1].digest, img1.layers[1]);
	cr_expect(strncmp(r->layers[0].diff_id, "sha256:", 7) == 0);
	cr_expect_str_eq(r->layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
	cr_assert_eq(r->nenv, 2);
	cr_expect_str_eq(r->env[1], "GREETING=hi");
	cr_expect_str_eq(r->working_dir, "/app");
	cr_expect_str_eq(r->user, "1000:1000");
	cr_assert_eq(r->ncmd, 1);
	cr_expect_str_eq(r->cmd[0], "/bin/sh");
	cr_expect_eq(r->unpacked_bytes, 21 + 5 + 19, "unpacked bytes: %llu",
	    (unsigned long long)r->unpacked_bytes);
	cr_expect_gt(r->blob_bytes, 0);
	cr_expect_eq(st.fetched, 1);
	cr_expect_eq(st.unpacked, 2);
	cr_expect(!st.reused);
	cr_expect_eq(seen.unpack, 2, "progress: %d unpacks", seen.unpack);
	cr_expect_eq(seen.verify, 4, "progress: %d verifications", seen.verify);
	cr_expect_geq(seen.fetch, 2, "progress: %d fetches with a digest", seen.fetch);
	cr_expect_eq(seen.done, 1);

	/* The files, unpacked, and owned by the unpacking uid. */
	layer_path(r->layers[0].digest, "hello.txt", path, sizeof(path));
	cr_assert_eq(slurp(path, buf, sizeof(buf)), 21, "%s", path);
	cr_expect_str_eq(buf, "hello from the image\n");
	cr_assert(stat(path, &sb) == 0);
	cr_expect_eq(sb.st_uid, UNPACK_UID);
	layer_path(r->layers[1].digest, "app/run.sh", path, sizeof(path));
	cr_assert(stat(path, &sb) == 0);
	cr_expect_eq(sb.st_mode & 0777, 0755);
	cr_expect(exists("images/sha256/%s.json", r->manifest + 7));

	/* Found again by its reference and by its digest. */
	cr_assert(img_cache_lookup(cache, ref("test/img:1"), &again, &e) == 0, "%s", e.msg);
	cr_expect_str_eq(again->manifest, r->manifest);
	img_record_free(again);
	cr_assert(img_cache_get(cache, r->manifest, &again, &e) == 0, "%s", e.msg);
	cr_expect_eq(again->nlayers, 2);
	img_record_free(again);
	cr_expect_eq(img_cache_lookup(cache, ref("test/img2:1"), &again, &e), -ENOENT);
	img_record_free(r);
}

/*
 * In a child as the unpacking uid (what a layer that compromised the
 * unpacker runs as): whether it can open path for writing, list the
 * finished layers, or see another unpack's folder. Returns the child's
 * errno for the open (0: it could).
 */
static int
open_as_unpacker(const char *path, int flags)
{
	pid_t pid = fork();
	int st;

	cr_assert(pid >= 0);
	if (pid == 0) {
		int fd;

		if (setgroups(0, NULL) < 0 || setresgid(UNPACK_UID, UNPACK_UID, UNPACK_UID) < 0 ||
		    setresuid(UNPACK_UID, UNPACK_UID, UNPACK_UID) < 0)
			_exit(100);
		fd = open(path, flags);
		_exit(fd >= 0 ? 0 : errno);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 100, "could not drop to the uid");
	return WEXITSTATUS(st);
}

Test(images, a_finished_layer_is_out_of_the_unpackers_reach)
{
	struct img_pull_stats st = { 0 };
	struct img_pull_opts o = opts(&st);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char path[700], sub[700];
	struct stat sb;

	cr_assert_eq(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e), 0, "%s", e.msg);
	/* Its files are the unpacking uid's, as the sandbox's mapping needs... */
	layer_path(r->layers[0].digest, "hello.txt", path, sizeof(path));
	cr_assert(stat(path, &sb) == 0);
	cr_expect_eq(sb.st_uid, UNPACK_UID);
	/* ...but that uid can no longer reach them: layers/ and staging/ are root's. */
	cr_expect_eq(open_as_unpacker(path, O_WRONLY), EACCES, "write a finished layer");
	snprintf(sub, sizeof(sub), "%s/layers/sha256", root);
	cr_expect_eq(open_as_unpacker(sub, O_RDONLY | O_DIRECTORY), EACCES, "list layers");
	snprintf(sub, sizeof(sub), "%s/staging", root);
	cr_expect_eq(open_as_unpacker(sub, O_RDONLY | O_DIRECTORY), EACCES, "list staging");
	cr_assert(stat(sub, &sb) == 0);
	cr_expect_eq(sb.st_uid, 0);
	cr_expect_eq(sb.st_mode & 07777, 0700);
	/* Nothing of the unpack is left in staging. */
	{
		DIR *d = opendir(sub);
		struct dirent *de;
		int n = 0;

		cr_assert_not_null(d);
		while ((de = readdir(d)) != NULL)
			n += de->d_name[0] != '.';
		closedir(d);
		cr_expect_eq(n, 0, "staging/ is empty after the pull");
	}
	img_record_free(r);
}

Test(images, second_pull_reuses_without_fetching_or_unpacking)
{
	struct img_pull_stats st = { 0 };
	struct img_pull_opts o = opts(&st);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char path[700];
	struct stat first, later;

	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	layer_path(r->layers[0].digest, "", path, sizeof(path));
	cr_assert(stat(path, &first) == 0);
	img_record_free(r);

	/* Known reference: no skopeo at all. */
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect(st.reused);
	cr_expect_eq(st.fetched, 0);
	cr_expect_eq(st.unpacked, 0);
	img_record_free(r);

	/* Asked again at the source: fetched and verified, but nothing unpacked. */
	o.refresh = true;
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect(!st.reused);
	cr_expect_eq(st.fetched, 1);
	cr_expect_eq(st.unpacked, 0, "a layer was unpacked again");
	cr_assert(stat(path, &later) == 0);
	cr_expect_eq(later.st_ino, first.st_ino, "the layer's folder was replaced");
	img_record_free(r);

	/* Another image on the same base: only its own layer is unpacked. */
	o.refresh = false;
	cr_assert(img_cache_pull(cache, ref("test/img2:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect_eq(st.unpacked, 1, "the shared base was unpacked again (%u, fetched %u, reused %d)", st.unpacked, st.fetched, st.reused);
	cr_assert(stat(path, &later) == 0);
	cr_expect_eq(later.st_ino, first.st_ino);
	img_record_free(r);
}

/*
 * A skopeo that logs each copy to DIR/copies and, before copying, waits
 * for DIR/release (at most 60 s): pull_together() creates it once the
 * other puller is seen blocked on a lock, so the two pulls overlap
 * whatever the machine's load.
 */
static const char *
slow_skopeo(void)
{
	static char path[400];
	char script[1200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/skopeo-slow", dir);
	snprintf(script, sizeof(script), "#!/bin/sh\n"
	    "if [ \"$1\" = copy ]; then echo copy >> %s/copies; n=0;\n"
	    "  while [ ! -e %s/release ] && [ $n -lt 6000 ]; do sleep 0.01; n=$((n+1)); done; fi\n"
	    "exec /usr/bin/skopeo \"$@\"\n", dir, dir);
	cr_assert((f = fopen(path, "w")) != NULL);
	fputs(script, f);
	fclose(f);
	chmod(path, 0755);
	return path;
}

/*
 * True once /proc/locks shows a process of pids (n of them) blocked on a
 * lock ("->" lines: waiters), within ms milliseconds.
 */
static bool
lock_waiter_among(const pid_t *pids, int n, int ms)
{
	for (int t = 0; t < ms; t += 10) {
		char line[256];
		FILE *f = fopen("/proc/locks", "r");

		while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
			char *arrow = strstr(line, "->");
			long pid;

			/* "N: -> FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE ..." */
			if (arrow == NULL || sscanf(arrow + 2, " %*s %*s %*s %ld", &pid) != 1)
				continue;
			for (int i = 0; i < n; i++) {
				if (pids[i] == (pid_t)pid) {
					fclose(f);
					return true;
				}
			}
		}
		if (f != NULL)
			fclose(f);
		usleep(10000);
	}
	return false;
}

struct child_result {
	int rc;
	struct img_pull_stats st;
	char msg[256];
};

/*
 * Forks n children that each pull refs[i] (refresh: asked again at the
 * source) when released together; fills res[i].
 */
static void
pull_together(const char *const *refs, int n, struct child_result *res)
{
	const char *slow = slow_skopeo();	/* written once: a running script is not rewritten */
	char release[400];
	int go[2], back[2];
	pid_t pids[8];
	FILE *f;

	cr_assert(pipe(go) == 0 && pipe(back) == 0);
	for (int i = 0; i < n; i++) {
		if ((pids[i] = fork()) == 0) {
			struct img_pull_opts o;
			struct child_result cr = { 0 };
			struct img_record *r = NULL;
			struct err e = { 0 };
			char c;

			close(go[1]);
			o = opts(&cr.st);
			o.refresh = true;
			o.skopeo = slow;
			if (read(go[0], &c, 1) != 1)
				_exit(1);
			cr.rc = img_cache_pull(cache, refs[i], &o, &r, &e);
			snprintf(cr.msg, sizeof(cr.msg), "%s", e.msg);
			img_record_free(r);
			/*
			 * Tagged with the child's index, so the parent knows whose
			 * it is; one write (under PIPE_BUF), so two children's
			 * records never interleave.
			 */
			struct { int i; struct child_result cr; } rec = { i, cr };

			if (write(back[1], &rec, sizeof(rec)) != sizeof(rec))
				_exit(1);
			_exit(0);
		}
		cr_assert(pids[i] > 0);
	}
	close(go[0]);
	close(back[1]);
	snprintf(release, sizeof(release), "%s/release", dir);
	unlink(release);
	/* Both start now: one byte each. */
	cr_assert(write(go[1], "gg", (size_t)n) == n);
	/*
	 * One pull holds its lock inside the gated skopeo; release it once
	 * another is blocked behind it, so they overlap for certain.
	 */
	cr_assert(lock_waiter_among(pids, n, 60000),
	    "no puller was ever seen waiting on a lock");
	cr_assert((f = fopen(release, "w")) != NULL);
	fclose(f);
	for (int k = 0; k < n; k++) {
		struct { int i; struct child_result cr; } rec;

		cr_assert(read(back[0], &rec, sizeof(rec)) == sizeof(rec) && rec.i >= 0 &&
		    rec.i < n);
		res[rec.i] = rec.cr;
	}
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
	close(go[1]);
	close(back[0]);
}

static int
copies(void)
{
	char path[400], buf[256];
	int n = 0;

	snprintf(path, sizeof(path), "%s/copies", dir);
	if (slurp(path, buf, sizeof(buf)) < 0)
		return 0;
	for (char *p = buf; *p; p++)
		n += *p == '\n';
	return n;
}

Test(images, two_processes_pulling_one_image_fetch_it_once)
{
	const char *refs[] = { ref("test/img:1"), ref("test/img:1") };
	struct child_result res[2];

	pull_together(refs, 2, res);
	cr_assert_eq(res[0].rc, 0, "%s", res[0].msg);
	cr_assert_eq(res[1].rc, 0, "%s", res[1].msg);
	cr_expect_eq(copies(), 1, "skopeo copy ran %d times", copies());
	cr_expect_eq(res[0].st.fetched + res[1].st.fetched, 1);
	cr_expect(res[0].st.waited || res[1].st.waited, "neither waited for the other");
	cr_expect_eq(res[0].st.unpacked + res[1].st.unpacked, 2, "layers unpacked %u times",
	    res[0].st.unpacked + res[1].st.unpacked);
	cr_expect_eq(entries("images/sha256"), 1);
	cr_expect_eq(entries("layers/sha256"), 4, "two layers and their meta");
}

/*
 * The layout lock runs the two copies one after the other, so the second
 * pull usually finds the base unpacked; the layer lock is for the times
 * the two reach it together. Either way, once.
 */
Test(images, two_images_pulled_at_once_unpack_their_shared_layer_once)
{
	const char *refs[] = { ref("test/img:1"), ref("test/img2:1") };
	struct child_result res[2];

	pull_together(refs, 2, res);
	cr_assert_eq(res[0].rc, 0, "%s", res[0].msg);
	cr_assert_eq(res[1].rc, 0, "%s", res[1].msg);
	cr_expect_eq(copies(), 2);
	/* Base once, each top once. */
	cr_expect_eq(res[0].st.unpacked + res[1].st.unpacked, 3, "layers unpacked %u times",
	    res[0].st.unpacked + res[1].st.unpacked);
	cr_expect_eq(entries("images/sha256"), 2);
	cr_expect_eq(entries("layers/sha256"), 6);
}

/*** Refusals ***/

Test(images, tampered_blob_is_refused_by_digest_and_leaves_no_record)
{
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char path[1024], blobs[400];
	const char *bad = img1.layers[1];
	struct stat st;
	char *junk;
	FILE *f;

	/*
	 * The layer already sits in the cache's layout, altered but of its
	 * size: skopeo takes it as present and does not fetch it.
	 */
	snprintf(blobs, sizeof(blobs), "%s/oci/blobs/sha256", root);
	snprintf(path, sizeof(path), "%s/oci", root);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/oci/blobs", root);
	mkdir(path, 0700);
	mkdir(blobs, 0700);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", src, bad + 7);
	cr_assert(stat(path, &st) == 0);
	cr_assert((junk = calloc(1, (size_t)st.st_size)) != NULL);
	snprintf(path, sizeof(path), "%s/%s", blobs, bad + 7);
	cr_assert((f = fopen(path, "w")) != NULL);
	fwrite(junk, 1, (size_t)st.st_size, f);
	fclose(f);
	free(junk);

	cr_assert_lt(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e), 0);
	cr_assert_null(r);
	cr_expect(strstr(e.msg, bad) != NULL, "the error does not name the blob: %s", e.msg);
	cr_expect(strstr(e.msg, "does not match its digest") != NULL, "%s", e.msg);
	cr_expect(strstr(e.msg, ref("test/img:1")) != NULL, "the error does not name the image: %s",
	    e.msg);
	cr_expect_eq(entries("images/sha256"), 0, "a record was left");
	cr_expect_eq(entries("refs"), 0);
	cr_expect_eq(entries("layers/sha256"), 0, "a layer of a refused image was unpacked");
	cr_expect(!exists("oci/blobs/sha256/%s", bad + 7), "the bad blob was kept");
	expect_blobs_whole();

	/* The next pull fetches it again, whole. */
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect_str_eq(r->layers[1].digest, bad);
	img_record_free(r);
}

Test(images, stopped_registry_fails_naming_the_image_and_leaves_nothing)
{
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };

	harness_registry_stop(&reg);
	cr_assert_lt(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e), 0);
	cr_assert_null(r);
	cr_expect(strstr(e.msg, ref("test/img:1")) != NULL, "%s", e.msg);
	cr_expect(strstr(e.msg, "connection refused") != NULL, "%s", e.msg);
	for (const char *p = e.msg; *p; p++)
		cr_expect((unsigned char)*p >= 0x20 && *p != 0x7f, "a control byte in: %s", e.msg);
	expect_nothing_half_done();
}

/*
 * A TCP proxy to the registry (harness_proxy_start) on a free port: once
 * more than cut bytes have passed it kills the registry and exits, or, if
 * stall, hangs every connection. Returns its pid; *port is where it
 * listens.
 */
static pid_t
proxy_start(size_t cut, bool stall, int *port)
{
	int lfd;

	*port = 0;
	lfd = harness_listen(port);
	return harness_proxy_start(lfd, reg.port, reg.pid, cut, stall);
}

/* pid's wait status once it exits, or, after ms, SIGKILL's. */
static int
wait_exit(pid_t pid, int ms)
{
	int st = 0;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return st;
}

Test(images, registry_dying_during_a_pull_fails_naming_the_image_and_leaves_nothing)
{
	static const struct imgb_entry big[] = {
		{ "big.bin", 'f', NULL, 4u << 20, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { BASE, big } };
	struct imgb_desc d;
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char s[400], via[400];
	int port, st;
	pid_t proxy;

	imgb_write(src, "big", &img, &d);
	snprintf(s, sizeof(s), "oci:%s:big", src);
	harness_registry_push(&reg, s, "test/big:1");

	/* The registry dies a megabyte into the 4 MiB layer. */
	proxy = proxy_start(1u << 20, false, &port);
	snprintf(via, sizeof(via), "docker://127.0.0.1:%d/test/big:1", port);
	o.retry_times = 1;
	cr_assert_lt(img_cache_pull(cache, via, &o, &r, &e), 0);
	cr_assert_null(r);
	st = wait_exit(proxy, 5000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "the proxy did not cut the transfer; the pull said: %s", e.msg);
	cr_expect(strstr(e.msg, via) != NULL, "the error does not name the image: %s", e.msg);
	expect_nothing_half_done();
}

Test(images, registry_stalling_mid_layer_times_out_and_leaves_nothing)
{
	static const struct imgb_entry big[] = {
		{ "big.bin", 'f', NULL, 4u << 20, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct imgb_image img = { .layers = { BASE, big } };
	struct imgb_desc d;
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL, *r1 = NULL;
	struct err e = { 0 };
	char s[400], via[400], index[600], before[8192], after[8192];
	int port;
	pid_t proxy;

	imgb_write(src, "big", &img, &d);
	snprintf(s, sizeof(s), "oci:%s:big", src);
	harness_registry_push(&reg, s, "test/big:1");
	/* An image already there: index.json has an entry to keep. */
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r1, &e) == 0, "%s", e.msg);
	snprintf(index, sizeof(index), "%s/oci/index.json", root);
	cr_assert_gt(slurp(index, before, sizeof(before)), 0);

	/* skopeo is a megabyte into the 4 MiB layer when the registry hangs. */
	proxy = proxy_start(1u << 20, true, &port);
	snprintf(via, sizeof(via), "docker://127.0.0.1:%d/test/big:1", port);
	o.timeout_ms = 3000;
	cr_expect_eq(img_cache_pull(cache, via, &o, &r, &e), -ETIMEDOUT, "%s", e.msg);
	kill(proxy, SIGKILL);
	waitpid(proxy, NULL, 0);
	cr_assert_null(r);
	cr_expect(strstr(e.msg, via) != NULL, "the error does not name the image: %s", e.msg);
	cr_expect(strstr(e.msg, "timed out") != NULL, "%s", e.msg);
	/* The first image whole and alone; skopeo's partial blob gone. */
	cr_assert_gt(slurp(index, after, sizeof(after)), 0);
	cr_expect_str_eq(after, before, "index.json changed");
	cr_expect_eq(entries("images/sha256"), 1);
	cr_expect_eq(entries("refs"), 1);
	cr_expect_eq(entries("layers/sha256"), 4);
	cr_expect_eq(entries("tmp"), 0);
	cr_expect_eq(entries("oci"), 3, "a stray file next to index.json, oci-layout, blobs");
	expect_blobs_whole();
	{
		pid_t pids[4];

		cr_expect_eq(harness_pgrep(root, pids, 4), 0, "skopeo is left running");
	}
	img_record_free(r1);
}

Test(images, hung_registry_times_out_naming_the_image_and_leaves_nothing)
{
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };

	/* Stopped, not dead: connections open, nothing ever answers. */
	cr_assert(kill(reg.pid, SIGSTOP) == 0);
	o.timeout_ms = 2000;
	cr_expect_eq(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e), -ETIMEDOUT, "%s",
	    e.msg);
	kill(reg.pid, SIGCONT);
	cr_assert_null(r);
	cr_expect(strstr(e.msg, ref("test/img:1")) != NULL, "%s", e.msg);
	cr_expect(strstr(e.msg, "timed out") != NULL, "%s", e.msg);
	expect_nothing_half_done();

	/* The registry back: the same pull works. */
	o.timeout_ms = 60000;
	cr_assert(img_cache_pull(cache, ref("test/img:1"), &o, &r, &e) == 0, "%s", e.msg);
	img_record_free(r);
}

Test(images, index_without_this_platform_is_refused_naming_the_platforms)
{
	static const struct imgb_entry mark_arm[] = {
		{ "arch", 'f', "arm64\n", 6, 0 }, { NULL, 0, NULL, 0, 0 } };
	static const struct imgb_entry mark_s390[] = {
		{ "arch", 'f', "s390x\n", 6, 0 }, { NULL, 0, NULL, 0, 0 } };
	static const struct imgb_entry mark_amd[] = {
		{ "arch", 'f', "amd64\n", 6, 0 }, { NULL, 0, NULL, 0, 0 } };
	struct imgb_image arm = { .arch = "arm64", .layers = { mark_arm } };
	struct imgb_image s390 = { .arch = "s390x", .layers = { mark_s390 } };
	struct imgb_image amd = { .layers = { mark_amd } };
	struct imgb_desc m[3], idx;
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char s[400], path[700], buf[32];

	imgb_write(src, "arm64", &arm, &m[0]);
	imgb_write(src, NULL, &s390, &m[1]);
	imgb_write(src, NULL, &amd, &m[2]);
	imgb_write_index(src, "foreign", m, 2, &idx);
	snprintf(s, sizeof(s), "oci:%s:foreign", src);
	harness_registry_push(&reg, s, "test/foreign:1");

	cr_expect_eq(img_cache_pull(cache, ref("test/foreign:1"), &o, &r, &e), -ENOENT, "%s",
	    e.msg);
	cr_assert_null(r);
	cr_expect(strstr(e.msg, ref("test/foreign:1")) != NULL, "%s", e.msg);
	cr_expect(strstr(e.msg, "linux/arm64") != NULL && strstr(e.msg, "linux/s390x") != NULL,
	    "the error does not name the platforms there are: %s", e.msg);
	cr_expect_eq(entries("images/sha256"), 0);
	cr_expect_eq(entries("layers/sha256"), 0);

	/* A single manifest for another platform: refused by its config. */
	snprintf(s, sizeof(s), "oci:%s:arm64", src);
	harness_registry_push(&reg, s, "test/arm:1");
	cr_expect_eq(img_cache_pull(cache, ref("test/arm:1"), &o, &r, &e), -ENOEXEC, "%s", e.msg);
	cr_expect(strstr(e.msg, "linux/arm64") != NULL, "%s", e.msg);
	cr_expect_eq(entries("images/sha256"), 0);

	/* With this platform among others, it is the one pulled. */
	m[1] = m[2];
	imgb_write_index(src, "multi", m, 2, &idx);
	snprintf(s, sizeof(s), "oci:%s:multi", src);
	harness_registry_push(&reg, s, "test/multi:1");
	cr_assert(img_cache_pull(cache, ref("test/multi:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect_str_eq(r->arch, "amd64");
	cr_expect_str_eq(r->manifest, m[2].digest);
	layer_path(r->layers[0].digest, "arch", path, sizeof(path));
	cr_expect_eq(slurp(path, buf, sizeof(buf)), 6);
	cr_expect_str_eq(buf, "amd64\n");
	img_record_free(r);
}

/*** The bound ***/

struct busy {
	const char *manifest;	/* the one image in use */
};

static bool
in_use(void *arg, const struct img_record *r)
{
	const struct busy *b = arg;

	return b->manifest != NULL && strcmp(r->manifest, b->manifest) == 0;
}

/* Sets the last use of the image manifest to secs ago. */
static void
used_ago(const char *manifest, int secs)
{
	char path[600];
	struct timespec ts[2];

	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= secs;
	ts[1] = ts[0];
	snprintf(path, sizeof(path), "%s/images/sha256/%s.json", root, manifest + 7);
	cr_assert(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

Test(images, eviction_keeps_images_in_use_and_drops_the_least_recently_used)
{
	static const struct imgb_entry ua[] = { { "a.bin", 'f', NULL, 65536, 0 }, { NULL, 0, NULL, 0, 0 } };
	static const struct imgb_entry ub[] = { { "b.bin", 'f', NULL, 131072, 0 }, { NULL, 0, NULL, 0, 0 } };
	static const struct imgb_entry uc[] = { { "c.bin", 'f', NULL, 262144, 0 }, { NULL, 0, NULL, 0, 0 } };
	struct imgb_image ia = { .layers = { BASE, ua } }, ib = { .layers = { BASE, ub } },
	    ic = { .layers = { BASE, uc } };
	struct imgb_desc da, db, dc;
	struct img_pull_opts o = opts(NULL);
	struct img_record *ra, *rb, *rc;
	struct img_evict_result res;
	struct busy busy;
	struct err e = { 0 };
	char s[400];
	uint64_t total;

	imgb_write(src, "a", &ia, &da);
	imgb_write(src, "b", &ib, &db);
	imgb_write(src, "c", &ic, &dc);
	snprintf(s, sizeof(s), "oci:%s:a", src);
	harness_registry_push(&reg, s, "test/a:1");
	snprintf(s, sizeof(s), "oci:%s:b", src);
	harness_registry_push(&reg, s, "test/b:1");
	snprintf(s, sizeof(s), "oci:%s:c", src);
	harness_registry_push(&reg, s, "test/c:1");
	cr_assert(img_cache_pull(cache, ref("test/a:1"), &o, &ra, &e) == 0, "%s", e.msg);
	cr_assert(img_cache_pull(cache, ref("test/b:1"), &o, &rb, &e) == 0, "%s", e.msg);
	cr_assert(img_cache_pull(cache, ref("test/c:1"), &o, &rc, &e) == 0, "%s", e.msg);
	/* B is the least recently used, but in use; then A; C the most recent. */
	used_ago(rb->manifest, 300);
	used_ago(ra->manifest, 200);
	used_ago(rc->manifest, 100);
	busy.manifest = rb->manifest;

	/* Room for everything: nothing goes. */
	cr_assert(img_cache_evict(cache, UINT64_MAX, in_use, &busy, &res, &e) == 0, "%s", e.msg);
	cr_expect_eq(res.images, 0);
	total = res.bytes_before;
	cr_expect_gt(total, 65536 + 131072 + 262144);

	/* One byte too many: the least recently used image not in use goes, alone. */
	cr_assert(img_cache_evict(cache, total - 1, in_use, &busy, &res, &e) == 0, "%s", e.msg);
	cr_expect_eq(res.images, 1);
	cr_expect_eq(res.layers, 1, "only A's own layer goes; the base stays");
	cr_expect_leq(res.bytes_after, total - 1);
	cr_expect(!exists("images/sha256/%s.json", ra->manifest + 7), "A's record is kept");
	cr_expect(exists("images/sha256/%s.json", rb->manifest + 7), "B (in use) was removed");
	cr_expect(exists("images/sha256/%s.json", rc->manifest + 7), "C (recent) was removed");
	cr_expect(!exists("layers/sha256/%s", ra->layers[1].digest + 7), "A's layer is kept");
	cr_expect(!exists("oci/blobs/sha256/%s", ra->layers[1].digest + 7), "A's blob is kept");
	cr_expect(!exists("oci/blobs/sha256/%s", ra->manifest + 7), "A's manifest is kept");
	cr_expect(exists("layers/sha256/%s", ra->layers[0].digest + 7), "the shared base went");
	cr_expect(exists("oci/blobs/sha256/%s", ra->layers[0].digest + 7));
	cr_expect_eq(entries("refs"), 2, "A's reference is kept");
	{
		struct img_record *x = NULL;

		cr_expect_eq(img_cache_lookup(cache, ref("test/a:1"), &x, &e), -ENOENT);
		img_record_free(x);
	}

	/* Nothing fits: all but the image in use goes. */
	cr_assert(img_cache_evict(cache, 0, in_use, &busy, &res, &e) == 0, "%s", e.msg);
	cr_expect_eq(res.images, 1);
	cr_expect(exists("images/sha256/%s.json", rb->manifest + 7));
	cr_expect(!exists("images/sha256/%s.json", rc->manifest + 7));
	cr_expect(exists("layers/sha256/%s", rb->layers[1].digest + 7));
	cr_expect(exists("layers/sha256/%s", rb->layers[0].digest + 7));

	/* Not in use any more: the cache empties. */
	cr_assert(img_cache_evict(cache, 0, NULL, NULL, &res, &e) == 0, "%s", e.msg);
	cr_expect_eq(res.images, 1);
	cr_expect_eq(res.bytes_after, 0);
	cr_expect_eq(entries("images/sha256"), 0);
	cr_expect_eq(entries("layers/sha256"), 0);
	cr_expect_eq(entries("refs"), 0);
	cr_expect_eq(entries("oci/blobs/sha256"), 0);
	{
		char path[600], buf[4096];

		snprintf(path, sizeof(path), "%s/oci/index.json", root);
		cr_assert_gt(slurp(path, buf, sizeof(buf)), 0);
		cr_expect(strstr(buf, "\"manifests\":[]") != NULL, "index.json: %s", buf);
	}
	img_record_free(ra);
	img_record_free(rb);
	img_record_free(rc);

	/* And it fills again. */
	cr_assert(img_cache_pull(cache, ref("test/a:1"), &o, &ra, &e) == 0, "%s", e.msg);
	img_record_free(ra);
}

/*** Other sources ***/

Test(images, archives_and_layouts_on_disk_are_pulled_like_a_registry)
{
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char from[400], to[1300], path[700], buf[64], *out = NULL;
	const char *srcs[3];
	char refs[3][400];

	snprintf(from, sizeof(from), "oci:%s:img1", src);
	snprintf(refs[0], sizeof(refs[0]), "oci-archive:%s/img.oci.tar", dir);
	snprintf(refs[1], sizeof(refs[1]), "docker-archive:%s/img.docker.tar", dir);
	snprintf(refs[2], sizeof(refs[2]), "oci:%s:img1", src);
	for (int i = 0; i < 2; i++) {
		const char *argv[] = { "/usr/bin/skopeo", "copy", from, to, NULL };

		snprintf(to, sizeof(to), "%s%s", refs[i], i == 1 ? ":test/img:1" : "");
		cr_assert(harness_exec(argv, &out) == 0, "%s", out);
		free(out);
	}
	srcs[0] = refs[0];
	srcs[1] = refs[1];
	srcs[2] = refs[2];
	for (int i = 0; i < 3; i++) {
		struct img_record *x = NULL;

		cr_assert(img_cache_pull(cache, srcs[i], &o, &r, &e) == 0, "%s: %s", srcs[i], e.msg);
		cr_expect_eq(r->nlayers, 2, "%s", srcs[i]);
		cr_expect(r->nenv == 2 && strcmp(r->env[1], "GREETING=hi") == 0, "%s", srcs[i]);
		layer_path(r->layers[0].digest, "hello.txt", path, sizeof(path));
		cr_expect_eq(slurp(path, buf, sizeof(buf)), 21, "%s: %s", srcs[i], path);
		cr_assert(img_cache_lookup(cache, srcs[i], &x, &e) == 0, "%s", e.msg);
		img_record_free(x);
		img_record_free(r);
	}
}

Test(images, zstd_layers_are_unpacked)
{
	struct imgb_image z = { .layers = { BASE }, .compress = IMGB_ZSTD };
	struct imgb_desc d;
	struct img_pull_opts o = opts(NULL);
	struct img_record *r = NULL;
	struct err e = { 0 };
	char s[400], path[700], buf[64];

	imgb_write(src, "zstd", &z, &d);
	snprintf(s, sizeof(s), "oci:%s:zstd", src);
	harness_registry_push(&reg, s, "test/zstd:1");
	cr_assert(img_cache_pull(cache, ref("test/zstd:1"), &o, &r, &e) == 0, "%s", e.msg);
	cr_expect_str_eq(r->layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+zstd");
	layer_path(r->layers[0].digest, "hello.txt", path, sizeof(path));
	cr_expect_eq(slurp(path, buf, sizeof(buf)), 21);
	img_record_free(r);
}

/*** References and options, without a registry ***/

static char bare[256], bare_root[300];

static void
bare_setup(void)
{
	snprintf(bare, sizeof(bare), "/tmp/sandq-test-XXXXXX");
	cr_assert(mkdtemp(bare) != NULL);
	snprintf(bare_root, sizeof(bare_root), "%s/cache", bare);
}

static void
bare_teardown(void)
{
	if (bare[0])
		harness_rmtree(bare);
}

TestSuite(image_refs, .init = bare_setup, .fini = bare_teardown, .timeout = 30);

Test(image_refs, refuses_what_skopeo_must_not_be_given)
{
	static const char *const bad[] = { "", "-v", "--src-creds=x:y", "http://example.org/x",
	    "docker://a b", "docker://a\x1b[2Jb", "docker://", "oci:", "host" };
	struct img_pull_opts o = { .unpack_uid = UNPACK_UID, .unpack_gid = UNPACK_UID };
	struct img_cache *c = NULL;
	struct img_record *r = NULL;
	struct err e = { 0 };

	cr_assert(img_cache_open(bare_root, &c, &e) == 0, "%s", e.msg);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(img_cache_pull(c, bad[i], &o, &r, &e), -EINVAL, "'%s' accepted", bad[i]);
		cr_expect_null(r);
		for (const char *p = e.msg; *p; p++)
			cr_expect((unsigned char)*p >= 0x20 && *p != 0x7f, "a control byte in: %s",
			    e.msg);
	}
	cr_expect(strstr(e.msg, "image 'host'") != NULL, "%s", e.msg);
	/* Never unpacked as root. */
	o.unpack_uid = 0;
	cr_expect_eq(img_cache_pull(c, "docker://127.0.0.1:1/x:1", &o, &r, &e), -EPERM);
	img_cache_close(c);
}

Test(image_refs, refuses_a_cache_path_skopeo_would_split)
{
	struct img_cache *c = NULL;
	struct err e = { 0 };
	char path[400];

	snprintf(path, sizeof(path), "%s/a:b", bare);
	cr_expect_eq(img_cache_open(path, &c, &e), -EINVAL);
	cr_expect_null(c);
	cr_expect_eq(img_cache_open("relative/cache", &c, &e), -EINVAL);
}
