/*
 * images.c - what running on an OCI image costs a job, each case against
 * its floor in the same run (issue 16, item 7).
 *
 *   image-bench [--jobs N] [--warmup W] [--reps R] [--mb M] [--workers K]
 *
 * It starts everything it needs in temporary folders and stops it by pid:
 * Debian's docker-registry on a free loopback port, redis-server and a
 * sandqd (K workers, default one per CPU) whose config allows that registry
 * (image_sources, image_plain_http) - the functions of tests/harness.c -
 * and it writes its images by hand (tests/imgbuild.c: busybox, no Docker,
 * no internet) and pushes them with skopeo. Every job is `/bin/true`,
 * timed from submit to result, one at a time:
 *
 *   1. cached   N jobs (default 300) on a cached image vs N on `host`:
 *               p50 and p99, target at most 1.2x;
 *   2. first    the first job on a new image of about M MB (default 100:
 *               busybox's layer plus 3 layers of incompressible
 *               bytes, gzip,
 *               written fresh per run and per repetition, so nothing is
 *               cached) vs the floor: `skopeo copy` of the same image from
 *               the registry into an empty OCI layout plus `tar -xzf` of
 *               its layers into an empty folder. R repetitions (default
 *               3), the two orders alternating; medians, target at most
 *               1.5x;
 *   3. switch   N jobs alternating between two cached images vs N on one
 *               of them: p50, target at most 2x;
 *   4. name     N jobs on a tenant's image name (sandq image tag) vs N on
 *               the pinned reference it names: p50, no target (what one
 *               more Redis read per job costs).
 *
 * Each line prints the floor, sandq, the ratio and the target. What makes
 * the exit status 1 is never a time: a job not ok, or a floor command
 * failing. Times of a missed target are printed, not failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../libsandq/sandq.h"
#include "../tests/harness.h"
#include "../tests/imgbuild.h"
#include "timing.h"

#define WAIT_MS 600000		/* a result slower than this is a failure */
#define NLAYERS 3

static struct harness h;
static struct harness_registry reg;
static char top[300];		/* the mkdtemp folder: layouts, floors, registry */
static int failures;

/* Debian's static busybox, the root of every image (imgb_busybox()). */
static struct imgb_entry BASE[] = {
	{ "bin", 'd', NULL, 0, 0 },
	{ "bin/busybox", 'f', NULL, 0, 0755 },
	{ "bin/sh", 'l', "busybox", 0, 0 },
	{ "bin/true", 'l', "busybox", 0, 0 },
	{ "etc", 'd', NULL, 0, 0 },
	{ "which", 'f', NULL, 0, 0 },	/* a few bytes telling images apart */
	{ NULL, 0, NULL, 0, 0 },
};

/*** Setup ***/

/*
 * Writes an image named tag into the layout top/layout and pushes it to
 * the registry as bench/TAG:1. mb 0: busybox alone, `which` holding tag;
 * else busybox plus mb MB of incompressible bytes in NLAYERS more layers whose
 * sizes (and so bytes: imgbuild's filler is seeded by the length) differ
 * by salt. Fills *d.
 */
static void
image_make(const char *tag, size_t mb, unsigned salt, struct imgb_desc *d)
{
	static const char *const env[] = { "PATH=/bin", NULL };
	struct imgb_entry data[NLAYERS][2];
	struct imgb_image img = { .env = env, .layers = { BASE } };
	char layout[400], src[500], repo[100];
	size_t each = mb * 1000000 / NLAYERS;

	BASE[5].data = tag;
	BASE[5].len = strlen(tag);
	for (int i = 0; mb > 0 && i < NLAYERS; i++) {
		data[i][0] = (struct imgb_entry){ NULL, 'f', NULL, 0, 0 };
		data[i][1] = (struct imgb_entry){ NULL, 0, NULL, 0, 0 };
		data[i][0].path = i == 0 ? "data0" : i == 1 ? "data1" : "data2";
		data[i][0].len = each + salt * 16 + (size_t)i;
		if (i == 0)	/* busybox's layer counts in the total */
			data[i][0].len -= BASE[1].len;
		img.layers[i + 1] = data[i];
	}
	snprintf(layout, sizeof(layout), "%s/layout", top);
	imgb_write(layout, tag, &img, d);
	snprintf(src, sizeof(src), "oci:%s:%s", layout, tag);
	snprintf(repo, sizeof(repo), "bench/%s:1", tag);
	harness_registry_push(&reg, src, repo);
}

/* The reference of bench/TAG:1 in the registry (two buffers, used in turn). */
static const char *
ref(const char *tag)
{
	static char buf[2][200];
	static int k;

	k ^= 1;
	snprintf(buf[k], sizeof(buf[k]), "docker://%s/bench/%s:1", reg.addr, tag);
	return buf[k];
}

/*** Timing ***/

/* Runs /bin/true on image (NULL: host); returns its ms, submit to result, or -1. */
static double
job(struct sandq *c, const char *image)
{
	static const char *const argv[] = { "/bin/true", NULL };
	struct sandq_job_opts o = { .image = image };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];
	double t0 = now_ms(), ms;

	if (sandq_submit_exec(c, argv, &o, id) != 0 || sandq_wait(c, id, WAIT_MS, &r) != 0) {
		fprintf(stderr, "image-bench: job on %s: %s\n", image ? image : "host",
		    sandq_last_error(c));
		failures++;
		return -1;
	}
	ms = now_ms() - t0;
	if (strcmp(r->status, "ok") != 0) {
		fprintf(stderr, "image-bench: job on %s: status %s, %s: %s\n",
		    image ? image : "host", r->status, r->error_code ? r->error_code : "-",
		    r->error_message ? r->error_message : "-");
		failures++;
		ms = -1;
	}
	sandq_result_free(r);
	return ms;
}

/*
 * n jobs, the i-th on images[i % nimg] (NULL: host), after w warm-up jobs
 * the same way; their times into v.
 */
static void
series(struct sandq *c, const char *const *images, size_t nimg, size_t n, size_t w,
    double *v)
{
	for (size_t i = 0; i < w; i++)
		job(c, images[i % nimg]);
	for (size_t i = 0; i < n; i++)
		v[i] = job(c, images[(w + i) % nimg]);
}

/* Runs argv, its output to /dev/null; returns its ms, or -1 if it failed. */
static double
timed(const char *const *argv)
{
	double t0 = now_ms();
	int st = harness_exec(argv, NULL);

	if (st != 0) {
		fprintf(stderr, "image-bench: %s %s: exit %d\n", argv[0], argv[1], st);
		failures++;
		return -1;
	}
	return now_ms() - t0;
}

/*
 * The floor of a first pull: skopeo copy of tag from the registry into an
 * empty OCI layout, then tar -xzf of each of d's layers into an empty
 * folder, both made and removed here. Returns the ms of both, the ms of
 * skopeo alone in *copy_ms.
 */
static double
floor_pull(const char *tag, const struct imgb_desc *d, double *copy_ms)
{
	char dir[400], dst[500], root[420], blob[600];
	const char *copy[] = { "/usr/bin/skopeo", "copy", "--src-tls-verify=false",
	    ref(tag), dst, NULL };
	double total;

	snprintf(dir, sizeof(dir), "%s/floor-%s", top, tag);
	snprintf(dst, sizeof(dst), "oci:%s/layout:%s", dir, tag);
	snprintf(root, sizeof(root), "%s/root", dir);
	if (mkdir(dir, 0700) != 0 || mkdir(root, 0700) != 0) {
		fprintf(stderr, "image-bench: mkdir %s: %s\n", root, strerror(errno));
		exit(1);
	}
	total = *copy_ms = timed(copy);
	for (size_t i = 0; i < d->nlayers && total >= 0; i++) {
		const char *tar[] = { "/usr/bin/tar", "-xzf", blob, "-C", root, NULL };
		double t;

		snprintf(blob, sizeof(blob), "%s/layout/blobs/sha256/%s", dir, d->layers[i] + 7);
		total = (t = timed(tar)) < 0 ? -1 : total + t;
	}
	harness_rmtree(dir);
	return total;
}

static double
median3(double *v, size_t n)
{
	return pct(v, n, 50);
}

/*
 * Prints the lines of sandqd's log (info level) that say how long each
 * pull took inside sandqd ("image ...: ... in N ms (K layers unpacked)"):
 * where a first job's time goes, beside the job's own figure.
 */
static void
print_pulls(void)
{
	char buf[1024];
	FILE *f = fopen(h.log, "r");

	if (f == NULL)
		return;
	while (fgets(buf, sizeof(buf), f) != NULL)
		if (strstr(buf, "layers unpacked") != NULL && strstr(buf, "/bench/new") != NULL)
			printf("  sandqd: %s", buf);
	fclose(f);
}

static void
line(const char *what, double floor, double sq, double target)
{
	double x = floor > 0 ? sq / floor : 0;

	printf("  %-34s %9.2f ms %9.2f ms %7.2fx   <= %.1fx %s\n", what, floor, sq, x,
	    target, x <= target ? "met" : "MISSED");
}

/*** Main ***/

static void
usage(void)
{
	fprintf(stderr, "usage: image-bench [--jobs N] [--warmup W] [--reps R] [--mb M] [--workers K]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	size_t n = 300, w = 20, reps = 3, mb = 100, nw = (size_t)sysconf(_SC_NPROCESSORS_ONLN);
	struct imgb_desc d_a, d_b, d_new[9];
	char sources[300], plain[120], tags[9][32];
	unsigned salt;
	struct sandq *c;
	double *v1, *v2, fl[9], sq[9], cp[9];

	for (int i = 1; i < argc; i++) {
		size_t *p = strcmp(argv[i], "--jobs") == 0 ? &n :
		    strcmp(argv[i], "--warmup") == 0 ? &w :
		    strcmp(argv[i], "--reps") == 0 ? &reps :
		    strcmp(argv[i], "--mb") == 0 ? &mb :
		    strcmp(argv[i], "--workers") == 0 ? &nw : NULL;

		if (p == NULL || i + 1 == argc)
			usage();
		*p = strtoul(argv[++i], NULL, 10);
	}
	if (n == 0 || reps == 0 || reps > 9 || mb == 0 || mb > 150 || nw == 0 || nw > 64)
		usage();
	if (getrandom(&salt, sizeof(salt), 0) != sizeof(salt))
		salt = (unsigned)getpid();
	salt %= 100000;
	imgb_busybox(&BASE[1]);
	snprintf(top, sizeof(top), "/tmp/sandq-imgbench-XXXXXX");
	if (mkdtemp(top) == NULL) {
		perror("image-bench: mkdtemp");
		return 1;
	}

	harness_registry_start(&reg, top);
	printf("sandq image bench on %ld CPUs, %zu workers: registry %s, %zu jobs per series, "
	    "%zu x %zu MB first pulls\n", sysconf(_SC_NPROCESSORS_ONLN), nw, reg.addr, n, reps, mb);
	fflush(stdout);
	/* Two small images, and the new big ones (pushed, never pulled yet). */
	image_make("a", 0, 0, &d_a);
	image_make("b", 0, 0, &d_b);
	for (size_t i = 0; i < reps; i++) {
		snprintf(tags[i], sizeof(tags[i]), "new%zu-%u", i, salt);
		image_make(tags[i], mb, salt * 10 + (unsigned)i, &d_new[i]);
	}

	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/bench/*", reg.addr);
	snprintf(plain, sizeof(plain), "image_plain_http=%s", reg.addr);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_start(&h, (int)nw, extra);
	}
	c = harness_client(&h);
	v1 = calloc(n, sizeof(*v1));
	v2 = calloc(n, sizeof(*v2));
	if (v1 == NULL || v2 == NULL)
		return 1;

	printf("\n  %-34s %12s %12s %8s   %s\n", "case", "floor", "sandq", "ratio", "target");

	/* 1. A cached image vs host. */
	{
		const char *host[] = { NULL }, *img[] = { ref("a") };

		job(c, img[0]);		/* the pull: cached from here on */
		series(c, host, 1, n, w, v1);
		series(c, img, 1, n, w, v2);
		printf("1. /bin/true, cached image vs host\n");
		line("p50", pct(v1, n, 50), pct(v2, n, 50), 1.2);
		line("p99", pct(v1, n, 99), pct(v2, n, 99), 1.2);
	}

	/* 2. The first job on a new image vs skopeo copy + tar -x. */
	printf("2. first job on a new %zu MB image vs skopeo copy + tar -xzf\n", mb);
	for (size_t i = 0; i < reps; i++) {
		if (i % 2 == 0) {
			sq[i] = job(c, ref(tags[i]));
			fl[i] = floor_pull(tags[i], &d_new[i], &cp[i]);
		} else {
			fl[i] = floor_pull(tags[i], &d_new[i], &cp[i]);
			sq[i] = job(c, ref(tags[i]));
		}
		printf("  run %zu: floor %.0f ms (skopeo copy %.0f ms, tar %.0f ms), sandq %.0f ms\n",
		    i + 1, fl[i], cp[i], fl[i] - cp[i], sq[i]);
	}
	{
		double mf = median3(fl, reps), ms = median3(sq, reps), mc = median3(cp, reps);

		line("median", mf, ms, 1.5);
		printf("  (median skopeo copy alone %.0f ms)\n", mc);
		print_pulls();
	}

	/* 3. Two cached images alternating vs one. */
	{
		const char *one[] = { ref("a") }, *two[2];

		two[0] = one[0];
		two[1] = ref("b");
		job(c, two[1]);		/* b's pull */
		series(c, one, 1, n, w, v1);
		series(c, two, 2, n, w, v2);
		printf("3. /bin/true, alternating two cached images vs one\n");
		line("p50", pct(v1, n, 50), pct(v2, n, 50), 2.0);
		printf("  %-34s %9.2f ms %9.2f ms\n", "p99 (no target)", pct(v1, n, 99),
		    pct(v2, n, 99));
	}

	/* 4. A tenant's image name vs the reference it names. */
	{
		char sq_bin[400], *out = NULL, *arrow, pinned[300];
		const char *tag[] = { sq_bin, "--redis", h.url, "image", "tag", "--plain-http",
		    "bench-a", ref("a"), NULL };
		const char *named[] = { "bench-a" }, *byref[] = { pinned };

		snprintf(sq_bin, sizeof(sq_bin), "%s/sandq", harness_build_dir());
		if (harness_exec(tag, &out) != 0 || out == NULL ||
		    (arrow = strstr(out, " -> ")) == NULL) {
			fprintf(stderr, "image-bench: sandq image tag failed: %s\n", out ? out : "");
			failures++;
		} else {
			snprintf(pinned, sizeof(pinned), "%.*s", (int)strcspn(arrow + 4, "\n"),
			    arrow + 4);
			job(c, pinned);		/* the pinned reference's own entry in the cache */
			series(c, byref, 1, n, w, v1);
			series(c, named, 1, n, w, v2);
			printf("4. /bin/true, by a tenant's image name vs by its pinned reference\n");
			printf("  %-34s %9.2f ms %9.2f ms %7.2fx   (one HGET more; no target)\n",
			    "p50", pct(v1, n, 50), pct(v2, n, 50), pct(v2, n, 50) / pct(v1, n, 50));
		}
		free(out);
	}

	sandq_close(c);
	harness_stop(&h);
	harness_registry_stop(&reg);
	harness_rmtree(top);
	free(v1);
	free(v2);
	if (failures)
		fprintf(stderr, "image-bench: %d failures\n", failures);
	return failures ? 1 : 0;
}
