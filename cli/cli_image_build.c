/*
 * cli_image_build.c - `sandq image build NAME --debian SUITE --packages
 * "..."` and `sandq image import NAME FILE`: images made without Docker
 * and pushed where sandqd can pull them, under the tenant's name.
 *
 *   build   the machine's apt sources for SUITE (images/debian.c) ->
 *           mmdebstrap --mode=unshare to a tarball -> one gzip layer and
 *           its documents in an OCI layout (images/pack.c) -> skopeo copy
 *   import  FILE read for what it is (images/tarkind.c): an OCI archive
 *           or a docker-archive is copied by skopeo as it is; a root
 *           filesystem tarball is packed as a build's is, then copied
 *
 * Where to: --to REF (docker://HOST[:PORT]/REPO[:TAG] or oci:/DIR[:TAG]),
 * else $SANDQ_IMAGE_PUSH, a prefix (docker://HOST[:PORT][/PREFIX] or
 * oci:/DIR) under which the image is PREFIX/TENANT/NAME:TAG. A registry
 * is reached over plain HTTP only with --plain-http or when
 * $SANDQ_IMAGE_PLAIN_HTTP lists it (HOST[:PORT],...), as sandqd's
 * image_plain_http. The CLI has no config file: these variables are its
 * settings, as $SANDQ_REDIS and $SANDQ_TENANT are.
 *
 * Once pushed, NAME[:TAG] becomes the tenant's name for the image pinned
 * to its digest, by the code of `sandq image tag` itself
 * (cli_image_tag_record(): one way to name an image, one place).
 *
 * What it prints: progress on stderr ("sandq image build: ..."), then
 * the pushed image pinned to its manifest digest on stdout
 * (docker://HOST/REPO@sha256:...; an oci: folder has no digest form, so
 * its tagged reference), or one JSON object with --json.
 *
 * The work happens in a private folder ($TMPDIR, else /var/tmp). A
 * janitor process forked first removes it when this process ends, however
 * it ends (a Ctrl-C, a kill): a build leaves hundreds of megabytes there.
 *
 * Sections: messages, options, where to push, the work folder, build,
 * import, push, the verbs.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/aptsrc.h"
#include "../images/debian.h"
#include "../images/oci.h"
#include "../images/pack.h"
#include "../images/ref.h"
#include "../images/skopeo.h"
#include "../images/tarkind.h"
#include "../proto/keys.h"
#include "cli_common.h"
#include "cli_image_build.h"
#include "cli_image_tag.h"
#include "cli_man.h"

#define PUSH_TIMEOUT_MS (60u * 60 * 1000)	/* one skopeo copy */
#define EXIT_REFUSED 1		/* the build failed, or FILE is not an image */
#define EXIT_USAGE 2

/* One run of build or import. */
struct ib {
	const char *verb;		/* "build" or "import" */
	const char *redis;		/* --redis, for the tenant's names */
	const char *tenant;		/* whose image it is */
	const char *name_arg;		/* NAME[:TAG] as given */
	char name[IMG_NAME_MAX + 1];	/* NAME */
	char tag[IMG_TAG_MAX + 1];	/* TAG, or "latest" */
	const char *suite;		/* --debian */
	char **packages;		/* --packages, split; NULL-terminated */
	size_t npackages;
	const char *file;		/* import's FILE */
	const char *to;			/* --to */
	bool plain_http;		/* --plain-http */
	bool json;
	bool help;
	struct img_ref dest;		/* where the image goes */
	char dest_src[IMG_REF_MAX + 1];	/* its skopeo form */
	char work[PATH_MAX];		/* the private folder; "" until made */
	const char *kind;		/* "debian", "rootfs", "oci-archive", "docker-archive" */
	struct img_pack_result packed;	/* when this command packed the image */
	bool did_pack;
	char digest[OCI_DIGEST_MAX + 1];	/* the pushed manifest's */
};

/*** Messages ***/

static int ib_usage(const struct ib *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int ib_fail(const struct ib *b, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void progress(const struct ib *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "sandq image VERB: MESSAGE" and the pointer to the manual; EXIT_USAGE. */
static int
ib_usage(const struct ib *b, const char *fmt, ...)
{
	char prefix[48], hint[48];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "sandq image %s: ", b->verb);
	snprintf(hint, sizeof(hint), "sandq image %s --help", b->verb);
	va_start(ap, fmt);
	cli_vfail(EXIT_USAGE, prefix, hint, fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

/* "sandq image VERB: MESSAGE" (escaped); returns status. */
static int
ib_fail(const struct ib *b, int status, const char *fmt, ...)
{
	char prefix[48];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "sandq image %s: ", b->verb);
	va_start(ap, fmt);
	cli_vfail(status, prefix, NULL, fmt, ap);
	va_end(ap);
	return status;
}

/*
 * "sandq image VERB: " and msg, a message images/ (or this file) composed
 * with every outside byte already escaped (oci_shown(): \xNN): written as
 * it is, but for any byte outside printable ASCII (none should be left),
 * shown as \xNN too; a second cli_esc() pass would double its
 * backslashes. Then the manual's pointer when usage. Returns status.
 */
static int
ib_say(const struct ib *b, int status, bool usage, const char *msg)
{
	fprintf(stderr, "sandq image %s: ", b->verb);
	for (const unsigned char *c = (const unsigned char *)msg; *c != '\0'; c++)
		if (*c < 0x20 || *c >= 0x7f)
			fprintf(stderr, "\\x%02x", *c);
		else
			fputc(*c, stderr);
	fputc('\n', stderr);
	if (usage)
		fprintf(stderr, "Try 'sandq image %s --help'.\n", b->verb);
	return status;
}

static int ib_sayf(const struct ib *b, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ib_say() of a formatted message whose arguments are escaped already. */
static int
ib_sayf(const struct ib *b, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return ib_say(b, status, status == EXIT_USAGE, msg);
}

/* A progress line on stderr, escaped as every message is. */
static void
progress(const struct ib *b, const char *fmt, ...)
{
	char prefix[48];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "sandq image %s: ", b->verb);
	va_start(ap, fmt);
	cli_vwarn(prefix, fmt, ap);
	va_end(ap);
}

/* A tool's output line (mmdebstrap's, skopeo's) as progress. */
static void
tool_line(void *arg, const char *line)
{
	const struct ib *b = arg;

	progress(b, "  %s", line);
}

/*** Options ***/

enum {
	B_REDIS = 256,
	B_TENANT,
	B_JSON,
	B_HELP,
	B_DEBIAN,
	B_PACKAGES,
	B_TO,
	B_PLAIN_HTTP,
};

static const struct option ib_opts[] = {
	{ "redis", required_argument, NULL, B_REDIS },
	{ "tenant", required_argument, NULL, B_TENANT },
	{ "json", no_argument, NULL, B_JSON },
	{ "help", no_argument, NULL, B_HELP },
	{ "debian", required_argument, NULL, B_DEBIAN },
	{ "packages", required_argument, NULL, B_PACKAGES },
	{ "to", required_argument, NULL, B_TO },
	{ "plain-http", no_argument, NULL, B_PLAIN_HTTP },
	{ NULL, 0, NULL, 0 },
};

/* Adds the packages of --packages (spaces or commas between them). */
static int
packages_add(struct ib *b, const char *arg)
{
	const char *p = arg;

	for (;;) {
		size_t n;
		char *pkg;

		p += strspn(p, " \t,");
		if (*p == '\0')
			return 0;
		n = strcspn(p, " \t,");
		pkg = xmemdup0(p, n);
		p += n;
		if (!img_debian_package_ok(pkg)) {
			int rc = ib_usage(b, "--packages: '%s' is not a Debian package "
			    "name (lower-case letters, digits, + . -; optionally "
			    "=VERSION or /RELEASE)", pkg);

			free(pkg);
			return rc;
		}
		if (b->npackages >= IMG_DEBIAN_PACKAGES_MAX) {
			free(pkg);
			return ib_usage(b, "--packages: more than %d packages",
			    IMG_DEBIAN_PACKAGES_MAX);
		}
		b->packages = xreallocarray(b->packages, b->npackages + 2,
		    sizeof(*b->packages));
		b->packages[b->npackages++] = pkg;
		b->packages[b->npackages] = NULL;
	}
}

/* Reads NAME[:TAG] into b->name and b->tag. 0 or a usage error's status. */
static int
name_read(struct ib *b, const char *arg)
{
	struct img_ref r;
	struct err e = { 0 };

	if (img_ref_parse(arg, &r, &e) < 0)
		return ib_sayf(b, EXIT_USAGE, "NAME: %s", e.msg);
	if (r.kind != IMG_NAME)
		return ib_usage(b, "NAME: '%s' is a reference, not a name for the "
		    "image (expected NAME[:TAG], such as numpy or numpy:1; say "
		    "where it goes with --to)", arg);
	snprintf(b->name, sizeof(b->name), "%s", r.name);
	snprintf(b->tag, sizeof(b->tag), "%s", r.tag[0] ? r.tag : IMG_DEFAULT_TAG);
	return 0;
}

/* Parses argv (from the verb) into b. 0, or the exit status to end with. */
static int
opts_parse(struct ib *b, int argc, char **argv)
{
	int o, rc;

	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", ib_opts, NULL)) != -1) {
		switch (o) {
		case B_REDIS:
			b->redis = optarg;
			break;
		case B_TENANT:
			b->tenant = optarg;
			break;
		case B_JSON:
			b->json = true;
			break;
		case 'h':
		case B_HELP:
			b->help = true;
			break;
		case B_DEBIAN:
			if (strcmp(b->verb, "build") != 0)
				return ib_usage(b, "--debian is for 'sandq image build'");
			if (!apt_suite_ok(optarg))
				return ib_usage(b, "--debian '%s': expected a suite such "
				    "as bookworm", optarg);
			b->suite = optarg;
			break;
		case B_PACKAGES:
			if (strcmp(b->verb, "build") != 0)
				return ib_usage(b, "--packages is for 'sandq image build'");
			if ((rc = packages_add(b, optarg)) != 0)
				return rc;
			break;
		case B_TO:
			b->to = optarg;
			break;
		case B_PLAIN_HTTP:
			b->plain_http = true;
			break;
		case ':':
			return ib_usage(b, "option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt != 0)
				return ib_usage(b, "unknown option '-%c'", optopt);
			return ib_usage(b, "unknown option '%.*s'",
			    (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
		}
	}
	if (b->help)
		return 0;
	argc -= optind;
	argv += optind;
	if (strcmp(b->verb, "build") == 0) {
		if (argc != 1)
			return ib_usage(b, "expected NAME, got %d arguments", argc);
		if (b->suite == NULL)
			return ib_usage(b, "--debian SUITE is required");
	} else {
		if (argc != 2)
			return ib_usage(b, "expected NAME FILE, got %d arguments", argc);
		b->file = argv[1];
	}
	b->name_arg = argv[0];
	return name_read(b, argv[0]);
}

/*** Where to push ***/

/* Whether the destination's registry is one plain HTTP is allowed for. */
static bool
plain_http_allowed(const struct ib *b)
{
	const char *list = getenv("SANDQ_IMAGE_PLAIN_HTTP");
	char hostport[IMG_HOST_MAX + 8];
	size_t n = 0;

	if (b->dest.kind != IMG_DOCKER)
		return false;
	if (b->plain_http)
		return true;
	if (b->dest.port != 0)
		snprintf(hostport, sizeof(hostport), "%s:%u", b->dest.host,
		    (unsigned)b->dest.port);
	else
		snprintf(hostport, sizeof(hostport), "%s", b->dest.host);
	for (const char *p = list; p != NULL && *p != '\0'; p += n) {
		p += strspn(p, " ,");
		n = strcspn(p, " ,");
		if (n == strlen(hostport) && strncasecmp(p, hostport, n) == 0)
			return true;
	}
	return false;
}

/*
 * The destination: --to as given (a tag of its own, else NAME's), or
 * $SANDQ_IMAGE_PUSH's prefix with TENANT/NAME:TAG under it. Fills b->dest
 * and b->dest_src. 0 or the exit status to end with.
 */
static int
dest_resolve(struct ib *b)
{
	const char *prefix = getenv("SANDQ_IMAGE_PUSH");
	char ref[IMG_REF_MAX * 2 + 160];
	struct err e = { 0 };
	size_t n;

	if (b->to != NULL) {
		snprintf(ref, sizeof(ref), "%s", b->to);
		if (img_ref_parse(ref, &b->dest, &e) < 0)
			return ib_sayf(b, EXIT_USAGE, "--to: %s", e.msg);
		if (b->dest.kind != IMG_DOCKER && b->dest.kind != IMG_OCI)
			return ib_usage(b, "--to '%s': expected docker://HOST[:PORT]/REPO"
			    "[:TAG] or oci:/DIR[:TAG]", b->to);
		if (b->dest.digest[0] != '\0')
			return ib_usage(b, "--to '%s': a digest is what a push gives, "
			    "not what it is given; name a tag", b->to);
		if (b->dest.kind == IMG_OCI && b->dest.tag[0] == '\0')
			snprintf(b->dest.tag, sizeof(b->dest.tag), "%s", b->tag);
	} else {
		if (prefix == NULL || prefix[0] == '\0')
			return ib_usage(b, "nowhere to push: give --to REF, or set "
			    "SANDQ_IMAGE_PUSH to docker://REGISTRY[/PREFIX] or oci:/DIR");
		n = strlen(prefix);
		while (n > 0 && prefix[n - 1] == '/')
			n--;
		if (strncmp(prefix, "docker://", 9) != 0 && strncmp(prefix, "oci:/", 5) != 0)
			return ib_usage(b, "SANDQ_IMAGE_PUSH '%s': expected "
			    "docker://REGISTRY[/PREFIX] or oci:/DIR", prefix);
		if (n > IMG_REF_MAX)
			return ib_usage(b, "SANDQ_IMAGE_PUSH: longer than %d bytes",
			    IMG_REF_MAX);
		snprintf(ref, sizeof(ref), "%.*s/%s/%s:%s", (int)n, prefix, b->tenant,
		    b->name, b->tag);
		if (img_ref_parse(ref, &b->dest, &e) < 0)
			return ib_sayf(b, EXIT_USAGE, "the image's place under "
			    "SANDQ_IMAGE_PUSH, PREFIX/TENANT/NAME: %s (name one with --to)",
			    e.msg);
	}
	if (img_ref_source(&b->dest, b->dest_src, sizeof(b->dest_src)) < 0)
		return ib_usage(b, "the destination is too long");
	return 0;
}

/*** The work folder ***/

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* Removes the tree at path, links not followed. Best effort. */
static void
rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * Forks the janitor: it waits for this process's end (its pipe's other
 * end closing, whatever ends it), then removes path. It ignores the
 * terminal's signals, so a Ctrl-C that ends the build does not end it
 * too, and holds none of our descriptors but the pipe, so nobody reading
 * our output waits for it.
 */
static void
janitor_start(const char *path)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	if ((pid = fork()) < 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		signal(SIGINT, SIG_IGN);
		signal(SIGQUIT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		if (p[0] != 3 && dup2(p[0], 3) < 0)
			_exit(1);
		close_range(4, ~0U, 0);
		while (read(3, &c, 1) < 0 && errno == EINTR)
			;
		rm_tree(path);
		_exit(0);
	}
	close(p[0]);
	/* Kept open, unused, until this process ends: then the janitor reads EOF. */
	(void)p[1];
}

/* Makes the private work folder, and its janitor. 0 or the exit status. */
static int
work_make(struct ib *b)
{
	const char *base = getenv("TMPDIR");

	if (base == NULL || base[0] != '/' || strchr(base, ':') != NULL ||
	    strlen(base) > PATH_MAX - 64)
		base = "/var/tmp";
	snprintf(b->work, sizeof(b->work), "%s/sandq-image-XXXXXX", base);
	if (mkdtemp(b->work) == NULL) {
		int rc = ib_fail(b, CLI_EXIT_SANDQ, "cannot make a work folder in %s: %s",
		    base, strerror(errno));

		b->work[0] = '\0';
		return rc;
	}
	janitor_start(b->work);
	return 0;
}

/*** Build ***/

/* Packs the root filesystem tarball at path into work/oci. 0 or the exit status. */
static int
pack(struct ib *b, const char *path, const char *what)
{
	struct img_pack_opts o = { .tag = b->tag };
	char layout[PATH_MAX + 8], created[512];
	struct err e = { 0 };
	int fd, rc;

	if (b->suite != NULL)
		snprintf(created, sizeof(created), "sandq image build --debian %s "
		    "(mmdebstrap --variant=minbase, %zu packages)", b->suite, b->npackages);
	else
		snprintf(created, sizeof(created), "sandq image import (a root "
		    "filesystem tarball)");
	o.created_by = created;
	snprintf(layout, sizeof(layout), "%s/oci", b->work);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return ib_sayf(b, EXIT_REFUSED, "%s: %s", what, strerror(errno));
	progress(b, "packing the root filesystem into one layer");
	rc = img_pack_rootfs(fd, what, layout, &o, &b->packed, &e);
	close(fd);
	if (rc < 0)
		return ib_say(b, rc == -EBADMSG || rc == -EINVAL || rc == -E2BIG ||
		    rc == -EFBIG || rc == -ENAMETOOLONG ? EXIT_REFUSED : CLI_EXIT_SANDQ,
		    false, e.msg);
	b->did_pack = true;
	progress(b, "packed %" PRIu64 " entries (%.1f MB of files, %" PRIu64
	    " special files dropped) into a %.1f MB layer %s", b->packed.entries,
	    (double)b->packed.bytes / 1e6, b->packed.dropped,
	    (double)b->packed.layer_size / 1e6, b->packed.layer);
	return 0;
}

/* Debian root with mmdebstrap, packed. 0 or the exit status. */
static int
build(struct ib *b)
{
	struct img_debian_build d = { .suite = b->suite,
	    .packages = (const char *const *)b->packages, .line_cb = tool_line, .arg = b };
	char sources[PATH_MAX + 16], tarball[PATH_MAX + 16], files[512], pkgs[256] = "";
	char *text = NULL;
	struct err e = { 0 };
	int fd, rc;

	if (img_debian_sources(IMG_DEBIAN_ETC_APT, b->suite, &text, files, sizeof(files),
	    &e) < 0)
		return ib_sayf(b, EXIT_REFUSED, "--debian %s: %s", b->suite, e.msg);
	snprintf(sources, sizeof(sources), "%s/apt.sources", b->work);
	fd = open(sources, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	rc = fd < 0 ? -errno : write_all(fd, text, strlen(text));
	if (fd >= 0)
		close(fd);
	free(text);
	if (rc < 0)
		return ib_fail(b, CLI_EXIT_SANDQ, "writing %s: %s", sources, strerror(-rc));
	snprintf(tarball, sizeof(tarball), "%s/rootfs.tar", b->work);
	d.sources = sources;
	d.out = tarball;
	for (size_t i = 0, o = 0; i < b->npackages && o < sizeof(pkgs) - 1; i++)
		o += (size_t)snprintf(pkgs + o, sizeof(pkgs) - o, "%s%s", i ? " " : "",
		    b->packages[i]);
	progress(b, "Debian %s (minbase%s%s) with mmdebstrap, from the apt sources in %s",
	    b->suite, b->npackages ? ", with " : "", pkgs, files);
	if ((rc = img_debian_build(&d, &e)) < 0)
		return ib_say(b, rc == -EIO ? EXIT_REFUSED : CLI_EXIT_SANDQ, false, e.msg);
	b->kind = "debian";
	rc = pack(b, tarball, "mmdebstrap's root filesystem");
	unlink(tarball);
	return rc;
}

/*** Import ***/

/*
 * Reads FILE for what it is; a root filesystem is packed, an archive
 * becomes skopeo's source through a link in the work folder (its path
 * then holds no ':', which skopeo would split on). Fills src (skopeo's
 * source). 0 or the exit status.
 */
static int
import(struct ib *b, char *src, size_t size)
{
	enum img_tar_kind kind;
	char what[PATH_MAX + 16], abs[PATH_MAX], link[PATH_MAX + 16], shown[PATH_MAX];
	struct err e = { 0 };
	int fd, rc;

	snprintf(what, sizeof(what), "'%s'", oci_shown(b->file, strlen(b->file), shown,
	    sizeof(shown)));
	if ((fd = open(b->file, O_RDONLY | O_CLOEXEC)) < 0)
		return ib_sayf(b, EXIT_REFUSED, "%s: %s", what, strerror(errno));
	rc = img_tar_kind(fd, what, &kind, &e);
	close(fd);
	if (rc < 0)
		return ib_say(b, EXIT_REFUSED, false, e.msg);
	progress(b, "'%s' is %s", b->file, img_tar_kind_name(kind));
	if (kind == IMG_TAR_ROOTFS) {
		b->kind = "rootfs";
		if ((rc = pack(b, b->file, what)) != 0)
			return rc;
		snprintf(src, size, "oci:%s/oci:%s", b->work, b->tag);
		return 0;
	}
	if (realpath(b->file, abs) == NULL)
		return ib_sayf(b, EXIT_REFUSED, "%s: %s", what, strerror(errno));
	snprintf(link, sizeof(link), "%s/input.tar", b->work);
	if (symlink(abs, link) != 0)
		return ib_fail(b, CLI_EXIT_SANDQ, "%s: %s", link, strerror(errno));
	b->kind = kind == IMG_TAR_OCI ? "oci-archive" : "docker-archive";
	snprintf(src, size, "%s:%s", b->kind, link);
	return 0;
}

/*** Push ***/

/* Makes the folders above path (absolute), as mkdir -p does. 0 or -errno. */
static int
mkdir_parents(const char *path)
{
	char buf[PATH_MAX];
	char *slash;

	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (slash = strchr(buf + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -errno;
		*slash = '/';
	}
	return 0;
}

/* skopeo copy src to the destination; reads the pushed digest. 0 or the exit status. */
static int
push(struct ib *b, const char *src)
{
	char digestfile[PATH_MAX + 16], buf[OCI_DIGEST_MAX + 8], shown[IMG_REF_MAX + 1];
	const char *argv[10];
	struct skopeo_cmd c = { 0 };
	ssize_t n;
	int k = 0, fd, rc;

	snprintf(digestfile, sizeof(digestfile), "%s/digest", b->work);
	argv[k++] = SKOPEO_BIN;
	argv[k++] = "copy";
	if (plain_http_allowed(b))
		argv[k++] = "--dest-tls-verify=false";
	argv[k++] = "--digestfile";
	argv[k++] = digestfile;
	argv[k++] = src;
	argv[k++] = b->dest_src;
	argv[k] = NULL;
	c.argv = argv;
	c.envp = environ;
	c.timeout_ms = PUSH_TIMEOUT_MS;
	c.line_cb = tool_line;
	c.arg = b;
	img_ref_str(&b->dest, shown, sizeof(shown));
	/* skopeo makes an oci: folder, not the folders above it. */
	if (b->dest.kind == IMG_OCI && (rc = mkdir_parents(b->dest.path)) < 0)
		return ib_fail(b, CLI_EXIT_SANDQ, "cannot make the folders of %s: %s",
		    shown, strerror(-rc));
	progress(b, "pushing to %s%s", shown, plain_http_allowed(b) ?
	    " (plain HTTP)" : "");
	if ((rc = skopeo_exec(&c)) < 0)
		return ib_sayf(b, CLI_EXIT_SANDQ, "pushing to %s: skopeo copy failed: %s",
		    shown, c.why);
	if ((fd = open(digestfile, O_RDONLY | O_CLOEXEC)) < 0)
		return ib_fail(b, CLI_EXIT_SANDQ, "skopeo wrote no digest: %s",
		    strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!oci_digest_ok(buf))
		return ib_fail(b, CLI_EXIT_SANDQ, "skopeo wrote no sha256 digest");
	memcpy(b->digest, buf, sizeof(b->digest));	/* oci_digest_ok(): 71 bytes and a NUL */
	return 0;
}

/* The pushed image pinned to its digest where the transport can say it (oci: cannot). */
static void
pinned_str(const struct ib *b, char *buf, size_t size)
{
	struct img_ref pinned = b->dest;

	if (pinned.kind == IMG_DOCKER) {
		pinned.tag[0] = '\0';
		snprintf(pinned.digest, sizeof(pinned.digest), "%s", b->digest);
	}
	img_ref_str(&pinned, buf, size);
}

/*
 * Names the pushed image NAME:TAG for the tenant, with the code of `sandq
 * image tag` (cli_image_tag.c), so a job may say --image NAME[:TAG]. 0 or
 * the exit status (the push stays; the message says what it pushed).
 */
static int
name_it(const struct ib *b)
{
	const struct cli_conn conn = { .redis = b->redis, .tenant = b->tenant };
	char ref[IMG_REF_MAX + 1], name[IMG_NAME_MAX + IMG_TAG_MAX + 2];
	int status;

	pinned_str(b, ref, sizeof(ref));
	snprintf(name, sizeof(name), "%s:%s", b->name, b->tag);
	if ((status = cli_image_tag_record(&conn, name, ref)) != 0)
		return ib_fail(b, status, "pushed %s, but the name %s was not recorded for "
		    "tenant %s (try 'sandq image tag %s %s')", ref, name, b->tenant, name, ref);
	return 0;
}

/* Prints the pushed image: pinned to its digest where the transport can say it. */
static int
report(const struct ib *b)
{
	char ref[IMG_REF_MAX + 1], tagged[IMG_REF_MAX + 1];
	json_t *o;

	img_ref_str(&b->dest, tagged, sizeof(tagged));
	pinned_str(b, ref, sizeof(ref));
	progress(b, "pushed %s:%s for tenant %s: %s (%s)", b->name, b->tag, b->tenant,
	    tagged, b->digest);
	if (!b->json) {
		if (printf("%s\n", ref) < 0 || fflush(stdout) == EOF)
			return cli_fail("writing the reference: %s", strerror(errno));
		return 0;
	}
	o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "name", b->name, "tag", b->tag,
	    "tenant", b->tenant, "reference", ref, "pushed", tagged, "digest", b->digest);
	json_object_set_new(o, "kind", json_string(b->kind));
	if (b->did_pack) {
		json_object_set_new(o, "layer", json_string(b->packed.layer));
		json_object_set_new(o, "layer_bytes", json_integer((json_int_t)b->packed.layer_size));
		json_object_set_new(o, "entries", json_integer((json_int_t)b->packed.entries));
		json_object_set_new(o, "file_bytes", json_integer((json_int_t)b->packed.bytes));
	}
	return cli_print_json_line(o);
}

/*** The verbs ***/

bool
cli_image_build_is_verb(int argc, char **argv)
{
	return argc >= 2 && strcmp(argv[0], "image") == 0 &&
	    (strcmp(argv[1], "build") == 0 || strcmp(argv[1], "import") == 0);
}

static void
ib_free(struct ib *b)
{
	for (size_t i = 0; i < b->npackages; i++)
		free(b->packages[i]);
	free(b->packages);
	if (b->work[0] != '\0')
		rm_tree(b->work);
}

int
cli_image_build_main(const struct cli_conn *conn, int argc, char **argv)
{
	struct ib b = { .redis = conn->redis, .tenant = conn->tenant, .json = conn->json,
	    .help = conn->help };
	char src[PATH_MAX + 64];
	int status;

	b.verb = argv[1];
	if ((status = opts_parse(&b, argc - 1, argv + 1)) != 0)
		goto out;
	if (b.help) {
		cli_man_print(strcmp(b.verb, "build") == 0 ? "image build" : "image import");
		goto out;
	}
	b.redis = cli_redis_or_default(b.redis);
	b.tenant = cli_tenant_or_default(b.tenant);
	if (!key_tenant_valid(b.tenant)) {
		status = ib_usage(&b, "'%s' is not a tenant name", b.tenant);
		goto out;
	}
	if ((status = dest_resolve(&b)) != 0 || (status = work_make(&b)) != 0)
		goto out;
	if (strcmp(b.verb, "build") == 0) {
		status = build(&b);
		snprintf(src, sizeof(src), "oci:%s/oci:%s", b.work, b.tag);
	} else {
		status = import(&b, src, sizeof(src));
	}
	if (status != 0 || (status = push(&b, src)) != 0 || (status = name_it(&b)) != 0)
		goto out;
	status = report(&b);
out:
	ib_free(&b);
	return status;
}
