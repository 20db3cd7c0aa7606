/*
 * imgbuild_cli_test.c - `sandq image build` and `sandq image import` end
 * to end: build/sandq against a private redis-server and sandqd
 * (harness.c) and a private docker-registry on loopback, whose
 * repositories sandq/ and src/ the sandqd allows (image_sources) over
 * plain HTTP (image_plain_http); the CLI pushes under
 * $SANDQ_IMAGE_PUSH=docker://ADDR/sandq.
 *
 * Each test proves one behaviour: a Debian image with python3-numpy,
 * built by mmdebstrap from this machine's apt sources, runs a job that
 * imports numpy, by its pinned reference and by the tenant's name; an OCI
 * archive and a docker-archive (made by skopeo from the registry) and a
 * root filesystem tarball are imported and each runs a job; garbage, an
 * empty file, a truncated tar and a bad name are refused naming what is
 * wrong, escaped, with nothing pushed and nothing named; a suite the
 * machine's apt sources lack is refused naming it; and the work folder
 * goes when the command is killed.
 *
 * The one build needs the machine's apt sources (the network): if
 * mmdebstrap cannot reach them the test fails, saying so, with
 * mmdebstrap's own last words. Run as root (sandqd needs it).
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "imgbuild.h"

static struct harness h;
static struct harness_registry reg;
static char dir[300];			/* the test's folder: registry, files, TMPDIR */
static char tmpdir[340];		/* the CLI's TMPDIR */
static char sandq_bin[400];

/* What one run of build/sandq printed. */
struct run {
	int status;
	char *out;			/* stdout */
	char *err;			/* stderr */
};

/*** Fixture ***/

static void
setup(void)
{
	char sources[300], plain[120], push[200];

	snprintf(dir, sizeof(dir), "/tmp/sandq-imgbuild-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", dir);
	cr_assert_eq(mkdir(tmpdir, 0700), 0);
	harness_registry_start(&reg, dir);
	snprintf(sources, sizeof(sources), "image_sources=host,docker://%s/sandq/*,"
	    "docker://%s/src/*", reg.addr, reg.addr);
	snprintf(plain, sizeof(plain), "image_plain_http=%s", reg.addr);
	{
		const char *const extra[] = { "--set", sources, "--set", plain, NULL };

		harness_start(&h, 2, extra);
	}
	snprintf(push, sizeof(push), "docker://%s/sandq", reg.addr);
	setenv("SANDQ_REDIS", h.url, 1);
	setenv("SANDQ_IMAGE_PUSH", push, 1);
	setenv("SANDQ_IMAGE_PLAIN_HTTP", reg.addr, 1);
	setenv("TMPDIR", tmpdir, 1);
	unsetenv("SANDQ_TENANT");
	snprintf(sandq_bin, sizeof(sandq_bin), "%s/sandq", harness_build_dir());
}

static void
teardown(void)
{
	harness_stop(&h);
	harness_registry_stop(&reg);
	if (dir[0])
		harness_rmtree(dir);
}

TestSuite(imgbuild_cli, .init = setup, .fini = teardown, .timeout = 240);

/*** Helpers ***/

/* A file's bytes, NUL-terminated (its length into *len if len is not NULL). */
static char *
slurp_n(const char *path, size_t *len)
{
	struct stat sb;
	char *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &sb) != 0) {
		if (fd >= 0)
			close(fd);
		if (len != NULL)
			*len = 0;
		return strdup("");
	}
	cr_assert_not_null(buf = malloc((size_t)sb.st_size + 1));
	cr_assert_eq(read(fd, buf, (size_t)sb.st_size), sb.st_size);
	buf[sb.st_size] = '\0';
	close(fd);
	if (len != NULL)
		*len = (size_t)sb.st_size;
	return buf;
}

static char *
slurp(const char *path)
{
	return slurp_n(path, NULL);
}

/* Runs build/sandq ARGS... (NULL-terminated), stdout and stderr kept apart. */
static struct run
cli(const char *const *args)
{
	const char *argv[32];
	char out[400], err[400];
	struct run r = { -1, NULL, NULL };
	int k = 0, st;
	pid_t pid;

	argv[k++] = sandq_bin;
	for (int i = 0; args[i] != NULL && k < 31; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	snprintf(out, sizeof(out), "%s/cli.out", dir);
	snprintf(err, sizeof(err), "%s/cli.err", dir);
	if ((pid = fork()) == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(127);
		execv(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	cr_assert_gt(pid, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	r.out = slurp(out);
	r.err = slurp(err);
	/* The progress is worth seeing when a test fails. */
	fprintf(stderr, "--- sandq %s %s: exit %d\n%s", args[0], args[1] ? args[1] : "",
	    r.status, r.err);
	if (r.status == 0)
		fprintf(stderr, "%s", r.out);
	return r;
}

static void
run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

/* Whether s is "docker://ADDR/REPO@sha256:" and 64 hex digits, and a newline. */
static bool
pinned(const char *s, const char *repo)
{
	char want[300];
	size_t n;

	n = (size_t)snprintf(want, sizeof(want), "docker://%s/%s@sha256:", reg.addr, repo);
	if (strncmp(s, want, n) != 0)
		return false;
	return strspn(s + n, "0123456789abcdef") == 64 && strcmp(s + n + 64, "\n") == 0;
}

/* The first line of s, in a static buffer. */
static const char *
line1(const char *s)
{
	static char buf[600];

	snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(s, "\n"), s);
	return buf;
}

/* How many sandq-image-* work folders are in the CLI's TMPDIR. */
static int
work_folders(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	int n = 0;

	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		n += strncmp(de->d_name, "sandq-image-", 12) == 0;
	closedir(d);
	return n;
}

/* Whether the work folder is gone (the janitor works after the command). */
static bool
no_work_folder(void *arg)
{
	(void)arg;
	return work_folders() == 0;
}

static char *busybox;
static size_t busybox_len;

static void
read_busybox(void)
{
	struct stat st;
	int fd = open("/bin/busybox", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "imgbuild_cli_test: /bin/busybox (Debian's busybox-static, "
		    "deploy/install-deps.sh) is missing: %s\n", strerror(errno));
		cr_assert_fail("no /bin/busybox");
	}
	busybox_len = (size_t)st.st_size;
	cr_assert_not_null(busybox = malloc(busybox_len));
	cr_assert_eq(read(fd, busybox, busybox_len), (ssize_t)busybox_len);
	close(fd);
}

/*
 * A root filesystem tarball at path: busybox as /bin/sh and friends, a
 * /hello.txt, and extra bytes of incompressible data (0: none) in
 * /big.bin.
 */
static void
write_rootfs(const char *path, const char *hello, size_t extra)
{
	static const char *const links[] = { "sh", "cat", "echo", "ls", "true", NULL };
	struct archive *a = archive_write_new();
	struct archive_entry *e;
	char name[64];

	if (busybox == NULL)
		read_busybox();
	archive_write_set_format_pax_restricted(a);
	cr_assert_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
#define ENTRY(n, type, mode, size) do { \
	e = archive_entry_new(); \
	archive_entry_set_pathname(e, n); \
	archive_entry_set_filetype(e, type); \
	archive_entry_set_perm(e, mode); \
	archive_entry_set_size(e, size); \
	archive_entry_set_mtime(e, 1600000000, 0); \
} while (0)
	ENTRY("./", AE_IFDIR, 0755, 0);
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	archive_entry_free(e);
	ENTRY("./bin/", AE_IFDIR, 0755, 0);
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	archive_entry_free(e);
	ENTRY("./bin/busybox", AE_IFREG, 0755, (la_int64_t)busybox_len);
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	cr_assert_eq(archive_write_data(a, busybox, busybox_len), (la_ssize_t)busybox_len);
	archive_entry_free(e);
	for (int i = 0; links[i] != NULL; i++) {
		snprintf(name, sizeof(name), "./bin/%s", links[i]);
		ENTRY(name, AE_IFLNK, 0777, 0);
		archive_entry_set_symlink(e, "busybox");
		cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
		archive_entry_free(e);
	}
	ENTRY("./dev/", AE_IFDIR, 0755, 0);
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	archive_entry_free(e);
	ENTRY("./dev/null", AE_IFCHR, 0666, 0);
	archive_entry_set_rdevmajor(e, 1);
	archive_entry_set_rdevminor(e, 3);
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	archive_entry_free(e);
	ENTRY("./hello.txt", AE_IFREG, 0644, (la_int64_t)strlen(hello));
	cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
	cr_assert_eq(archive_write_data(a, hello, strlen(hello)), (la_ssize_t)strlen(hello));
	archive_entry_free(e);
	if (extra > 0) {
		static char chunk[1 << 16];
		FILE *rnd = fopen("/dev/urandom", "r");

		cr_assert_not_null(rnd);
		ENTRY("./big.bin", AE_IFREG, 0644, (la_int64_t)extra);
		cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
		for (size_t done = 0; done < extra; ) {
			size_t n = extra - done < sizeof(chunk) ? extra - done : sizeof(chunk);

			cr_assert_eq(fread(chunk, 1, n, rnd), n);
			cr_assert_eq(archive_write_data(a, chunk, n), (la_ssize_t)n);
			done += n;
		}
		archive_entry_free(e);
		fclose(rnd);
	}
#undef ENTRY
	cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
}

/* Runs `sandq run --image image sh -c script` and expects ok with stdout want. */
static void
expect_job(const char *image, const char *script, const char *want)
{
	const char *const args[] = { "run", "--image", image, "sh", "-c", script, NULL };
	struct run r = cli(args);

	cr_expect_eq(r.status, 0, "a job on %s: exit %d: %s", image, r.status, r.err);
	cr_expect_str_eq(r.out, want, "a job on %s", image);
	run_free(&r);
}

/* A busybox image (tests/imgbuild.c) pushed to the registry as src/bb:1. */
static void
push_source_image(void)
{
	static struct imgb_entry base[] = {
		{ "bin", 'd', NULL, 0, 0 },
		{ "bin/busybox", 'f', NULL, 0, 0755 },
		{ "bin/sh", 'l', "busybox", 0, 0 },
		{ "bin/cat", 'l', "busybox", 0, 0 },
		{ "hello.txt", 'f', "hello from the source image\n", 28, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	static const char *const env[] = { "PATH=/bin", NULL };
	struct imgb_image img = { .env = env, .layers = { base } };
	struct imgb_desc d;
	char layout[400], src[420];

	if (busybox == NULL)
		read_busybox();
	base[1].data = busybox;
	base[1].len = busybox_len;
	snprintf(layout, sizeof(layout), "%s/layout", dir);
	imgb_write(layout, "bb", &img, &d);
	snprintf(src, sizeof(src), "oci:%s:bb", layout);
	harness_registry_push(&reg, src, "src/bb:1");
}

/* skopeo copy docker://ADDR/src/bb:1 to dest (oci-archive:... or docker-archive:...). */
static void
copy_out(const char *dest)
{
	char src[200], *out = NULL;
	const char *const argv[] = { "/usr/bin/skopeo", "copy", "--src-tls-verify=false",
	    src, dest, NULL };

	snprintf(src, sizeof(src), "docker://%s/src/bb:1", reg.addr);
	cr_assert_eq(harness_exec(argv, &out), 0, "skopeo copy to %s: %s", dest, out);
	free(out);
}

/*** Tests ***/

/*
 * The Debian build has a suite of its own for its longer bound: a test's
 * own .timeout above its suite's leaks an allocation of Criterion's
 * runner, which the sanitizer builds report.
 */
TestSuite(imgbuild_debian, .init = setup, .fini = teardown, .timeout = 1200);

Test(imgbuild_debian, builds_numpy_from_debian_and_a_job_imports_it)
{
	const char *const build[] = { "image", "build", "numpy-test", "--debian",
	    "bookworm", "--packages", "python3-numpy", NULL };
	const char *code = "import numpy; print(numpy.__version__, numpy.arange(4).sum())";
	struct timespec t0, t1;
	struct run r;
	char ref[700];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = cli(build);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (r.status != 0) {
		fprintf(stderr, "imgbuild_cli_test: `sandq image build --debian bookworm` "
		    "FAILED (exit %d). It builds with mmdebstrap from this machine's apt "
		    "sources (/etc/apt): if they cannot be reached from here, this test "
		    "cannot pass. sandq said:\n%s\n", r.status, r.err);
		cr_assert_fail("sandq image build failed (exit %d): %s", r.status,
		    line1(strstr(r.err, "mmdebstrap failed") ? strstr(r.err,
		    "mmdebstrap failed") : r.err));
	}
	fprintf(stderr, "imgbuild_cli_test: sandq image build (mmdebstrap minbase + "
	    "python3-numpy, pack, push) took %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	cr_assert(pinned(r.out, "sandq/default/numpy-test"), "stdout: %s", r.out);
	cr_expect(strstr(r.err, "from the apt sources in /etc/apt/") != NULL, "%s", r.err);
	snprintf(ref, sizeof(ref), "%s", line1(r.out));
	run_free(&r);
	cr_expect(harness_wait_for(no_work_folder, NULL, 10000), "the work folder stays");

	/* By the pinned reference, then by the tenant's name image build gave it. */
	{
		const char *const job[] = { "python", "--image", ref, code, NULL };
		const char *const byname[] = { "python", "--image", "numpy-test", code, NULL };

		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = cli(job);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		fprintf(stderr, "imgbuild_cli_test: the first job on it (sandqd's pull and "
		    "unpack included) took %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) +
		    (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
		cr_expect_eq(r.status, 0, "exit %d: %s", r.status, r.err);
		cr_expect(strstr(r.out, " 6\n") != NULL && r.out[0] >= '1' && r.out[0] <= '9',
		    "numpy's version and 0+1+2+3: %s", r.out);
		fprintf(stderr, "imgbuild_cli_test: numpy %s", r.out);
		run_free(&r);
		r = cli(byname);
		cr_expect_eq(r.status, 0, "exit %d: %s", r.status, r.err);
		cr_expect(strstr(r.out, " 6\n") != NULL, "%s", r.out);
		run_free(&r);
	}
	/* The name is the image tag's: pinned to what was pushed. */
	{
		const char *const tags[] = { "image", "tags", NULL };

		r = cli(tags);
		cr_expect_eq(r.status, 0);
		cr_expect(strstr(r.out, "numpy-test:latest") != NULL, "%s", r.out);
		cr_expect(strstr(r.out, ref) != NULL, "%s", r.out);
		run_free(&r);
	}
}

Test(imgbuild_cli, imports_a_root_filesystem_tarball_and_a_job_runs_on_it)
{
	char tar[400];
	const char *const args[] = { "image", "import", "bb:root", tar, "--json", NULL };
	struct run r;
	char ref[700];
	const char *p, *q;

	snprintf(tar, sizeof(tar), "%s/rootfs.tar", dir);
	write_rootfs(tar, "hello from a root filesystem\n", 0);
	r = cli(args);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_expect(strstr(r.err, "is a root filesystem tarball") != NULL, "%s", r.err);
	cr_expect(strstr(r.out, "\"kind\":\"rootfs\"") != NULL, "%s", r.out);
	cr_expect(strstr(r.out, "\"tenant\":\"default\"") != NULL, "%s", r.out);
	cr_assert_not_null(p = strstr(r.out, "\"reference\":\""), "%s", r.out);
	p += strlen("\"reference\":\"");
	cr_assert_not_null(q = strchr(p, '"'));
	snprintf(ref, sizeof(ref), "%.*s\n", (int)(q - p), p);
	cr_expect(pinned(ref, "sandq/default/bb"), "%s", ref);
	ref[strlen(ref) - 1] = '\0';
	run_free(&r);
	expect_job(ref, "cat /hello.txt; ls /dev/null", "hello from a root filesystem\n"
	    "/dev/null\n");
	expect_job("bb:root", "cat /hello.txt", "hello from a root filesystem\n");
	cr_expect(harness_wait_for(no_work_folder, NULL, 10000), "the work folder stays");
}

Test(imgbuild_cli, imports_an_oci_archive_and_a_job_runs_on_it)
{
	char arch[400], dest[420];
	const char *const args[] = { "image", "import", "bb:oci", arch, NULL };
	struct run r;

	push_source_image();
	snprintf(arch, sizeof(arch), "%s/bb-oci.tar", dir);
	snprintf(dest, sizeof(dest), "oci-archive:%s", arch);
	copy_out(dest);
	r = cli(args);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_expect(strstr(r.err, "is an OCI archive") != NULL, "%s", r.err);
	cr_expect(pinned(r.out, "sandq/default/bb"), "%s", r.out);
	run_free(&r);
	expect_job("bb:oci", "cat /hello.txt", "hello from the source image\n");
}

Test(imgbuild_cli, imports_a_docker_archive_and_a_job_runs_on_it)
{
	char arch[400], dest[440];
	const char *const args[] = { "image", "import", "bb:docker", arch, NULL };
	struct run r;

	push_source_image();
	snprintf(arch, sizeof(arch), "%s/bb-docker.tar", dir);
	snprintf(dest, sizeof(dest), "docker-archive:%s:src/bb:1", arch);
	copy_out(dest);
	r = cli(args);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_expect(strstr(r.err, "is a docker-archive") != NULL, "%s", r.err);
	cr_expect(pinned(r.out, "sandq/default/bb"), "%s", r.out);
	run_free(&r);
	expect_job("bb:docker", "cat /hello.txt", "hello from the source image\n");
}

Test(imgbuild_cli, refuses_garbage_empty_truncated_and_bad_names_and_pushes_nothing)
{
	char garbage[400], empty[400], trunc[400], tar[400], *buf = NULL;
	const char *const tags[] = { "image", "tags", "--json", NULL };
	size_t len = 0;
	struct run r;
	FILE *f;

	snprintf(garbage, sizeof(garbage), "%s/gar\x1b[2Jbage.tar", dir);
	cr_assert_not_null(f = fopen(garbage, "w"));
	fputs("\x7f" "ELF this is not a tar archive at all\n", f);
	fclose(f);
	{
		const char *const args[] = { "image", "import", "bad", garbage, NULL };

		r = cli(args);
		cr_expect_eq(r.status, 1);
		cr_expect(strstr(r.err, "gar\\x1b[2Jbage.tar': not a tar archive") != NULL,
		    "%s", r.err);
		cr_expect(strchr(r.err, '\x1b') == NULL, "a raw escape reached stderr");
		cr_expect_str_eq(r.out, "");
		run_free(&r);
	}
	snprintf(empty, sizeof(empty), "%s/empty.tar", dir);
	cr_assert_not_null(f = fopen(empty, "w"));
	fclose(f);
	{
		const char *const args[] = { "image", "import", "bad", empty, NULL };

		r = cli(args);
		cr_expect_eq(r.status, 1);
		cr_expect(strstr(r.err, "empty.tar': an empty file") != NULL, "%s", r.err);
		run_free(&r);
	}
	/* A tarball cut in the middle of its busybox. */
	snprintf(tar, sizeof(tar), "%s/whole.tar", dir);
	write_rootfs(tar, "x\n", 0);
	buf = slurp_n(tar, &len);
	cr_assert_gt(len, 300000);
	snprintf(trunc, sizeof(trunc), "%s/trunc.tar", dir);
	cr_assert_not_null(f = fopen(trunc, "w"));
	fwrite(buf, 1, 300000, f);
	fclose(f);
	free(buf);
	{
		const char *const args[] = { "image", "import", "bad", trunc, NULL };

		r = cli(args);
		cr_expect_eq(r.status, 1);
		cr_expect(strstr(r.err, "trunc.tar': truncated or corrupt in the entry "
		    "'./bin/busybox'") != NULL, "%s", r.err);
		run_free(&r);
	}
	{
		const char *const bad[] = { "image", "import", "Bad_Name", tar, NULL };
		const char *const ref[] = { "image", "import", "docker://x.io/a:1", tar, NULL };
		const char *const ctl[] = { "image", "build", "nu\x1bmpy", "--debian",
		    "bookworm", NULL };

		r = cli(bad);
		cr_expect_eq(r.status, 2);
		cr_expect(strstr(r.err, "image name 'Bad_Name'") != NULL, "%s", r.err);
		run_free(&r);
		r = cli(ref);
		cr_expect_eq(r.status, 2);
		cr_expect(strstr(r.err, "is a reference, not a name") != NULL, "%s", r.err);
		run_free(&r);
		r = cli(ctl);
		cr_expect_eq(r.status, 2);
		cr_expect(strstr(r.err, "NAME: byte 0x1b at offset 2") != NULL, "%s", r.err);
		cr_expect(strchr(r.err, '\x1b') == NULL, "a raw escape reached stderr");
		run_free(&r);
	}
	/* Nothing was named, and nothing was pushed. */
	r = cli(tags);
	cr_expect_str_eq(r.out, "[]\n");
	run_free(&r);
	{
		char cmd[300], *out = NULL;

		snprintf(cmd, sizeof(cmd), "curl -s http://%s/v2/_catalog", reg.addr);
		harness_run(cmd, &out);
		cr_expect(out != NULL && strstr(out, "sandq/") == NULL, "%s", out);
		free(out);
	}
	cr_expect(harness_wait_for(no_work_folder, NULL, 10000), "a work folder stays");
}

Test(imgbuild_cli, refuses_a_suite_the_machines_apt_sources_lack)
{
	const char *const args[] = { "image", "build", "x", "--debian", "no-such-suite",
	    "--packages", "python3-numpy", NULL };
	const char *const pkg[] = { "image", "build", "x", "--debian", "bookworm",
	    "--packages", "python3-numpy;rm", NULL };
	struct run r = cli(args);

	cr_expect_eq(r.status, 1);
	cr_expect(strstr(r.err, "the machine's apt sources have no suite "
	    "'no-such-suite' (they have: ") != NULL, "%s", r.err);
	run_free(&r);
	r = cli(pkg);
	cr_expect_eq(r.status, 2);
	cr_expect(strstr(r.err, "'python3-numpy;rm' is not a Debian package name") != NULL,
	    "%s", r.err);
	run_free(&r);
}

Test(imgbuild_cli, the_work_folder_goes_when_the_command_is_killed)
{
	char tar[400];
	const char *argv[] = { sandq_bin, "image", "import", "big", tar, NULL };
	struct timespec ts = { 0, 20 * 1000000L };
	pid_t pid;
	int st, i;

	snprintf(tar, sizeof(tar), "%s/big.tar", dir);
	write_rootfs(tar, "big\n", (size_t)192 << 20);
	if ((pid = fork()) == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execv(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	cr_assert_gt(pid, 0);
	/* Killed while it packs: the work folder is there, half full. */
	for (i = 0; i < 1000 && work_folders() == 0; i++)
		nanosleep(&ts, NULL);
	cr_assert_eq(work_folders(), 1, "no work folder appeared");
	nanosleep(&ts, NULL);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFSIGNALED(st), "it finished before it was killed");
	cr_expect(harness_wait_for(no_work_folder, NULL, 10000),
	    "the work folder outlived a killed command");
}
