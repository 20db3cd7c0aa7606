/*
 * pack_test.c - the image packer (images/pack.c) and the tarball sorter
 * (images/tarkind.c), against tarballs each test writes with libarchive
 * into a file of its mkdtemp folder. No network and no root.
 *
 * pack: a root filesystem becomes a layout that the cache's own parsers
 * (images/oci.c) and skopeo read, every blob named by its SHA-256, the
 * diff_id the hash of the layer's uncompressed bytes, the layer holding
 * what a layer should (devices dropped, setuid kept, hard links and
 * symlinks as they were, no names of owners) and the same digest twice;
 * each hostile or broken tarball ('..', a truncated entry, garbage, an
 * empty file, a hard link to nothing, an entry below a symlink, a
 * whiteout name, the bounds) is refused naming the entry, escaped, and
 * leaves no layout behind.
 *
 * tarkind: an OCI archive and a docker-archive (written by skopeo from a
 * packed layout), a root filesystem, and refusals of empty, garbage and
 * truncated files naming the file and the entry.
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../images/oci.h"
#include "../images/pack.h"
#include "../images/tarkind.h"

#define MTIME 1600000000		/* every entry's mtime */

static char base[64];			/* this test's mkdtemp folder */
static char tarball[128];		/* base/in.tar */
static char layout[128];		/* base/oci */

/* One entry of a test tarball; an array ends with a NULL path. */
struct ent {
	const char *path;
	char type;		/* f file, d folder, l symlink, h hard link, c char device, p FIFO */
	const char *data;	/* a file's bytes; a link's target */
	unsigned mode;		/* 0: 0644 / 0755 */
	unsigned uid;
};

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void
setup(void)
{
	snprintf(base, sizeof(base), "/tmp/pack_test.XXXXXX");
	cr_assert_not_null(mkdtemp(base));
	snprintf(tarball, sizeof(tarball), "%s/in.tar", base);
	snprintf(layout, sizeof(layout), "%s/oci", base);
}

static void
teardown(void)
{
	if (base[0])
		nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(pack, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(tarkind, .init = setup, .fini = teardown, .timeout = 60);

/*** Helpers ***/

/* Writes ents as a tar (gzip-compressed if gz) at path. */
static void
write_tar(const char *path, const struct ent *ents, bool gz)
{
	struct archive *a = archive_write_new();

	cr_assert_not_null(a);
	if (gz)
		archive_write_add_filter_gzip(a);
	archive_write_set_format_pax_restricted(a);
	cr_assert_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (const struct ent *x = ents; x->path != NULL; x++) {
		struct archive_entry *e = archive_entry_new();
		size_t len = x->type == 'f' && x->data ? strlen(x->data) : 0;

		archive_entry_set_pathname(e, x->path);
		archive_entry_set_mtime(e, MTIME, 0);
		archive_entry_set_uid(e, x->uid);
		archive_entry_set_uname(e, "someone");
		switch (x->type) {
		case 'd':
			archive_entry_set_filetype(e, AE_IFDIR);
			archive_entry_set_perm(e, x->mode ? x->mode : 0755);
			break;
		case 'l':
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_perm(e, 0777);
			archive_entry_set_symlink(e, x->data);
			break;
		case 'h':
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_perm(e, 0644);
			archive_entry_set_hardlink(e, x->data);
			break;
		case 'c':
			archive_entry_set_filetype(e, AE_IFCHR);
			archive_entry_set_perm(e, 0666);
			archive_entry_set_rdevmajor(e, 1);
			archive_entry_set_rdevminor(e, 3);
			break;
		case 'p':
			archive_entry_set_filetype(e, AE_IFIFO);
			archive_entry_set_perm(e, 0644);
			break;
		default:
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_perm(e, x->mode ? x->mode : 0644);
			archive_entry_set_size(e, (la_int64_t)len);
			break;
		}
		cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK, "%s",
		    archive_error_string(a));
		if (len > 0)
			cr_assert_eq(archive_write_data(a, x->data, len), (la_ssize_t)len);
		archive_entry_free(e);
	}
	cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
}

/* Writes raw bytes as the whole file at path. */
static void
write_bytes(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Packs the file at path into layout with opts (tag "t" unless given). */
static int
pack_file(const char *path, struct img_pack_opts *o, struct img_pack_result *r,
    struct err *e)
{
	struct img_pack_opts def = { 0 };
	int fd, rc;

	if (o == NULL)
		o = &def;
	if (o->tag == NULL)
		o->tag = "t";
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	rc = img_pack_rootfs(fd, "the test tarball", layout, o, r, e);
	close(fd);
	return rc;
}

/* Reads a file whole (NUL-terminated); its length into *len. */
static char *
slurp(const char *path, size_t *len)
{
	struct stat sb;
	char *buf;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &sb), 0);
	buf = malloc((size_t)sb.st_size + 1);
	cr_assert_eq(read(fd, buf, (size_t)sb.st_size), sb.st_size);
	buf[sb.st_size] = '\0';
	close(fd);
	*len = (size_t)sb.st_size;
	return buf;
}

/* "sha256:HEX" of len bytes. */
static void
sha256(const void *buf, size_t len, char out[OCI_DIGEST_MAX + 1])
{
	unsigned char md[32];
	unsigned n = 0;

	cr_assert_eq(EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL), 1);
	strcpy(out, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(out + 7 + 2 * i, "%02x", md[i]);
}

/* A blob of the layout, read whole, after checking it hashes to its name. */
static char *
blob(const char *digest, size_t *len)
{
	char path[512], got[OCI_DIGEST_MAX + 1], *buf;

	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, digest + 7);
	buf = slurp(path, len);
	sha256(buf, *len, got);
	cr_expect_str_eq(got, digest, "blob %s hashes to %s", digest, got);
	return buf;
}

/* Whether the layout folder is gone (every refusal must leave none). */
static bool
layout_gone(void)
{
	struct stat sb;

	return lstat(layout, &sb) != 0 && errno == ENOENT;
}

/* The layer's entries as "TYPE PATH MODE UID [-> TARGET]" lines, read by libarchive. */
static char *
layer_listing(const char *digest, size_t *nentries)
{
	char path[512], *out = calloc(1, 65536), why[64];
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	size_t o = 0;

	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, digest + 7);
	archive_read_support_format_tar(a);
	archive_read_support_filter_gzip(a);
	cr_assert_eq(archive_read_open_filename(a, path, 65536), ARCHIVE_OK);
	*nentries = 0;
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *hl = archive_entry_hardlink(e), *sl = archive_entry_symlink(e);
		char t = hl ? 'h' : archive_entry_filetype(e) == AE_IFDIR ? 'd' :
		    archive_entry_filetype(e) == AE_IFLNK ? 'l' :
		    archive_entry_filetype(e) == AE_IFREG ? 'f' : '?';

		snprintf(why, sizeof(why), "%s", archive_entry_uname(e) ?
		    archive_entry_uname(e) : "");
		o += (size_t)snprintf(out + o, 65536 - o, "%c %s %04o %ld%s%s%s%s\n", t,
		    archive_entry_pathname(e), (unsigned)archive_entry_perm(e),
		    (long)archive_entry_uid(e), hl || sl ? " -> " : "", hl ? hl : sl ? sl : "",
		    why[0] ? " uname=" : "", why);
		(*nentries)++;
	}
	archive_read_free(a);
	return out;
}

/* The SHA-256 of the layer blob's uncompressed bytes, by gzip -dc. */
static void
gunzip_sha256(const char *digest, char out[OCI_DIGEST_MAX + 1])
{
	char cmd[512], hex[80] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "gzip -dc %s/blobs/sha256/%s | sha256sum", layout,
	    digest + 7);
	cr_assert_not_null(p = popen(cmd, "r"));
	cr_assert_not_null(fgets(hex, sizeof(hex), p));
	pclose(p);
	hex[64] = '\0';
	snprintf(out, OCI_DIGEST_MAX + 1, "sha256:%s", hex);
}

/* Runs a shell command line; its exit status, its output into out (size bytes). */
static int
run(const char *cmd, char *out, size_t size)
{
	FILE *p = popen(cmd, "r");
	size_t n;

	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	return WEXITSTATUS(pclose(p));
}

static const struct ent ROOTFS[] = {
	{ "./", 'd', NULL, 0, 0 },
	{ "./etc/", 'd', NULL, 0, 0 },
	{ "./etc/passwd", 'f', "root:x:0:0:root:/root:/bin/sh\n", 0, 0 },
	{ "./etc/passwd.link", 'h', "./etc/passwd", 0, 0 },
	{ "./usr/bin/su", 'f', "#!/bin/sh\n", 04755, 0 },
	{ "./usr/bin/sh", 'f', "not really a shell\n", 0755, 0 },
	{ "./bin", 'l', "usr/bin", 0, 0 },
	{ "./dev/", 'd', NULL, 0, 0 },
	{ "./dev/null", 'c', NULL, 0, 0 },
	{ "./dev/fifo", 'p', NULL, 0, 0 },
	{ "/home/app/notes.txt", 'f', "owned by 1000\n", 0, 1000 },
	{ NULL, 0, NULL, 0, 0 },
};

/*** pack ***/

Test(pack, writes_a_layout_the_cache_parsers_read_with_every_digest_right)
{
	struct img_pack_result r;
	struct oci_desc d;
	struct oci_manifest m = { 0 };
	struct oci_config c = { 0 };
	struct err e = { 0 };
	char diff[OCI_DIGEST_MAX + 1], path[256], *idx, *man, *cfg;
	size_t len;

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(pack_file(tarball, NULL, &r, &e), 0, "%s", e.msg);

	snprintf(path, sizeof(path), "%s/oci-layout", layout);
	free(slurp(path, &len));
	snprintf(path, sizeof(path), "%s/index.json", layout);
	idx = slurp(path, &len);
	cr_assert_eq(oci_layout_find(idx, len, "t", &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, r.manifest);
	cr_expect_eq(d.size, r.manifest_size);
	cr_expect_eq(oci_kind_of(d.media_type), OCI_KIND_MANIFEST);

	man = blob(r.manifest, &len);
	cr_assert_eq(oci_manifest_parse(man, len, d.media_type, &m, &e), 0, "%s", e.msg);
	cr_assert_eq(m.nlayers, 1);
	cr_expect_str_eq(m.layers[0].digest, r.layer);
	cr_expect_eq(m.layers[0].size, r.layer_size);
	cr_expect_str_eq(m.layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
	cr_expect_str_eq(m.config.digest, r.config);
	free(blob(r.layer, &len));
	cr_expect_eq(len, r.layer_size);

	cfg = blob(r.config, &len);
	cr_assert_eq(oci_config_parse(cfg, len, &c, &e), 0, "%s", e.msg);
	cr_expect_str_eq(c.os, "linux");
	cr_expect_str_eq(c.arch, oci_host_arch());
	cr_assert_eq(c.nenv, 1);
	cr_expect_str_eq(c.env[0], IMG_PACK_PATH_DEFAULT);
	cr_assert_eq(c.ndiff_ids, 1);
	cr_expect_str_eq(c.diff_ids[0], r.diff_id);
	gunzip_sha256(r.layer, diff);
	cr_expect_str_eq(diff, r.diff_id, "the diff_id is the uncompressed layer's hash");

	cr_expect_eq(r.entries, 11);
	cr_expect_eq(r.dropped, 2, "the device and the FIFO");
	oci_manifest_free(&m);
	oci_config_free(&c);
	free(idx);
	free(man);
	free(cfg);
}

Test(pack, keeps_what_a_layer_carries_and_drops_special_files)
{
	struct img_pack_result r;
	struct err e = { 0 };
	size_t n = 0;
	char *list;

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(pack_file(tarball, NULL, &r, &e), 0, "%s", e.msg);
	list = layer_listing(r.layer, &n);
	cr_expect_eq(n, 8, "%s", list);
	cr_expect(strstr(list, "d etc/ 0755 0\n") != NULL, "%s", list);
	cr_expect(strstr(list, "f etc/passwd 0644 0\n") != NULL, "%s", list);
	cr_expect(strstr(list, "h etc/passwd.link 0644 0 -> etc/passwd\n") != NULL,
	    "%s", list);
	cr_expect(strstr(list, "f usr/bin/su 4755 0\n") != NULL, "setuid kept: %s", list);
	cr_expect(strstr(list, "l bin 0777 0 -> usr/bin\n") != NULL, "%s", list);
	cr_expect(strstr(list, "f home/app/notes.txt 0644 1000\n") != NULL, "%s", list);
	cr_expect(strstr(list, "dev/null") == NULL, "no device: %s", list);
	cr_expect(strstr(list, "dev/fifo") == NULL, "no FIFO: %s", list);
	cr_expect(strstr(list, "uname=") == NULL, "no owner names: %s", list);
	free(list);
}

Test(pack, skopeo_reads_the_layout_and_sees_the_same_manifest)
{
	struct img_pack_result r;
	struct err e = { 0 };
	char cmd[512], out[4096], want[128];

	write_tar(tarball, ROOTFS, true);
	cr_assert_eq(pack_file(tarball, NULL, &r, &e), 0, "%s", e.msg);
	snprintf(cmd, sizeof(cmd), "skopeo inspect oci:%s:t 2>&1", layout);
	cr_assert_eq(run(cmd, out, sizeof(out)), 0, "skopeo inspect: %s", out);
	snprintf(want, sizeof(want), "\"Digest\": \"%s\"", r.manifest);
	cr_expect(strstr(out, want) != NULL, "%s", out);
	cr_expect(strstr(out, r.layer) != NULL, "%s", out);
}

Test(pack, the_same_tarball_gives_the_same_digests)
{
	struct img_pack_result r1, r2;
	struct err e = { 0 };

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(pack_file(tarball, NULL, &r1, &e), 0, "%s", e.msg);
	nftw(layout, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	sleep(1);	/* a gzip timestamp would differ now */
	cr_assert_eq(pack_file(tarball, NULL, &r2, &e), 0, "%s", e.msg);
	cr_expect_str_eq(r1.layer, r2.layer);
	cr_expect_str_eq(r1.manifest, r2.manifest);
}

Test(pack, takes_env_arch_and_history_from_its_options)
{
	static const char *const env[] = { "PATH=/bin", "LANG=C.UTF-8", NULL };
	struct img_pack_opts o = { .tag = "v1", .arch = "arm64", .env = env,
	    .created_by = "made by a test" };
	struct img_pack_result r;
	struct err e = { 0 };
	size_t len;
	char *cfg;

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(pack_file(tarball, &o, &r, &e), 0, "%s", e.msg);
	cfg = blob(r.config, &len);
	cr_expect(strstr(cfg, "\"architecture\":\"arm64\"") != NULL, "%s", cfg);
	cr_expect(strstr(cfg, "\"Env\":[\"PATH=/bin\",\"LANG=C.UTF-8\"]") != NULL, "%s", cfg);
	cr_expect(strstr(cfg, "\"created_by\":\"made by a test\"") != NULL, "%s", cfg);
	free(cfg);
}

/* Expects pack_file() to refuse the tarball with code, e naming needle, no layout left. */
static void
expect_refused(struct img_pack_opts *o, int code, const char *needle)
{
	struct img_pack_result r;
	struct err e = { 0 };
	int rc = pack_file(tarball, o, &r, &e);

	cr_expect_eq(rc, code, "rc %d (%s)", rc, e.msg);
	cr_expect(strstr(e.msg, "the test tarball: ") == e.msg, "%s", e.msg);
	cr_expect(strstr(e.msg, needle) != NULL, "'%s' not in: %s", needle, e.msg);
	cr_expect(layout_gone(), "a refused tarball left %s", layout);
}

Test(pack, refuses_dotdot_naming_the_entry)
{
	static const struct ent t[] = {
		{ "etc/", 'd', NULL, 0, 0 },
		{ "etc/../../escape", 'f', "x", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};

	write_tar(tarball, t, false);
	expect_refused(NULL, -EINVAL, "'..' in an entry is refused: 'etc/../../escape'");
}

Test(pack, refuses_a_truncated_tarball_naming_the_entry_it_broke_in)
{
	static char big[20000];
	const struct ent t[] = {
		{ "small", 'f', "x", 0, 0 },
		{ "big.bin", 'f', big, 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	size_t len;
	char *buf;

	memset(big, 'a', sizeof(big) - 1);
	write_tar(tarball, t, false);
	buf = slurp(tarball, &len);
	write_bytes(tarball, buf, 4096);	/* the middle of big.bin's data */
	free(buf);
	expect_refused(NULL, -EBADMSG, "'big.bin'");
}

Test(pack, refuses_garbage_and_an_empty_file)
{
	write_bytes(tarball, "this is not a tar archive, not at all\n", 38);
	expect_refused(NULL, -EBADMSG, "not a tar archive");
	write_bytes(tarball, "", 0);
	expect_refused(NULL, -EBADMSG, "an empty file");
}

Test(pack, refuses_a_hard_link_to_nothing_earlier)
{
	static const struct ent t[] = {
		{ "a", 'h', "b", 0, 0 },
		{ "b", 'f', "later\n", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};

	write_tar(tarball, t, false);
	expect_refused(NULL, -EINVAL, "a hard link to what is not an earlier file "
	    "of the tarball: 'a'");
}

Test(pack, refuses_an_entry_below_a_symlink_of_the_tarball)
{
	static const struct ent t[] = {
		{ "etc", 'l', "/etc", 0, 0 },
		{ "etc/sandq-pack-test-file", 'f', "through the link\n", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};

	write_tar(tarball, t, false);
	expect_refused(NULL, -EINVAL, "below a symlink of the same tarball: "
	    "'etc/sandq-pack-test-file'");
}

Test(pack, refuses_a_whiteout_name_and_a_file_over_a_folder)
{
	static const struct ent wh[] = {
		{ "etc/.wh.passwd", 'f', "", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	static const struct ent over[] = {
		{ "etc/", 'd', NULL, 0, 0 },
		{ "etc", 'f', "a file now\n", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};

	write_tar(tarball, wh, false);
	expect_refused(NULL, -EINVAL, "OCI whiteout");
	write_tar(tarball, over, false);
	expect_refused(NULL, -EINVAL, "a non-folder over a folder");
}

Test(pack, bounds_entries_and_bytes)
{
	struct img_pack_opts few = { .max_entries = 5 }, small = { .max_bytes = 20 };

	write_tar(tarball, ROOTFS, false);
	expect_refused(&few, -E2BIG, "more than 5 entries");
	expect_refused(&small, -EFBIG, "past 20 bytes of files");
}

Test(pack, escapes_control_bytes_of_a_name_it_refuses)
{
	static const struct ent t[] = {
		{ "x\x1b[2J\n/../y", 'f', "z", 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	struct err e = { 0 };

	write_tar(tarball, t, false);
	cr_assert_eq(pack_file(tarball, NULL, NULL, &e), -EINVAL);
	cr_expect(strchr(e.msg, '\x1b') == NULL && strchr(e.msg, '\n') == NULL,
	    "raw control bytes in: %s", e.msg);
	cr_expect(strstr(e.msg, "x\\x1b[2J\\x0a/../y") != NULL, "%s", e.msg);
}

Test(pack, refuses_an_existing_layout_folder_and_keeps_it)
{
	struct err e = { 0 };
	struct stat sb;

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(mkdir(layout, 0755), 0);
	cr_expect_eq(pack_file(tarball, NULL, NULL, &e), -EEXIST, "%s", e.msg);
	cr_expect_eq(stat(layout, &sb), 0, "the caller's folder is not removed");
}

/*** tarkind ***/

static int
kind_of(const char *path, enum img_tar_kind *k, struct err *e)
{
	int fd = open(path, O_RDONLY), rc;

	cr_assert_geq(fd, 0);
	rc = img_tar_kind(fd, "'in.tar'", k, e);
	close(fd);
	return rc;
}

Test(tarkind, tells_an_oci_archive_a_docker_archive_and_a_root_filesystem)
{
	struct img_pack_result r;
	enum img_tar_kind k = IMG_TAR_OCI;
	struct err e = { 0 };
	char cmd[512], out[2048], arch[160];

	write_tar(tarball, ROOTFS, false);
	cr_assert_eq(kind_of(tarball, &k, &e), 0, "%s", e.msg);
	cr_expect_eq(k, IMG_TAR_ROOTFS);
	cr_expect_str_eq(img_tar_kind_name(k), "a root filesystem tarball");

	cr_assert_eq(pack_file(tarball, NULL, &r, &e), 0, "%s", e.msg);
	snprintf(arch, sizeof(arch), "%s/oci.tar", base);
	snprintf(cmd, sizeof(cmd), "skopeo copy oci:%s:t oci-archive:%s 2>&1", layout, arch);
	cr_assert_eq(run(cmd, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(kind_of(arch, &k, &e), 0, "%s", e.msg);
	cr_expect_eq(k, IMG_TAR_OCI);

	snprintf(arch, sizeof(arch), "%s/docker.tar", base);
	snprintf(cmd, sizeof(cmd), "skopeo copy oci:%s:t docker-archive:%s:x/y:1 2>&1",
	    layout, arch);
	cr_assert_eq(run(cmd, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(kind_of(arch, &k, &e), 0, "%s", e.msg);
	cr_expect_eq(k, IMG_TAR_DOCKER);
}

Test(tarkind, refuses_empty_garbage_and_truncated_files_naming_them)
{
	static char big[20000];
	const struct ent t[] = {
		{ "first", 'f', "x", 0, 0 },
		{ "big.bin", 'f', big, 0, 0 },
		{ NULL, 0, NULL, 0, 0 },
	};
	enum img_tar_kind k;
	struct err e = { 0 };
	size_t len;
	char *buf;

	write_bytes(tarball, "", 0);
	cr_expect_eq(kind_of(tarball, &k, &e), -EBADMSG);
	cr_expect_str_eq(e.msg, "'in.tar': an empty file");
	write_bytes(tarball, "\x7f" "ELF garbage, and more garbage\n", 30);
	cr_expect_eq(kind_of(tarball, &k, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "'in.tar': not a tar archive") == e.msg, "%s", e.msg);

	memset(big, 'a', sizeof(big) - 1);
	write_tar(tarball, t, false);
	buf = slurp(tarball, &len);
	write_bytes(tarball, buf, 4096);
	free(buf);
	cr_expect_eq(kind_of(tarball, &k, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "'in.tar': truncated or corrupt in the entry "
	    "'big.bin'") == e.msg, "%s", e.msg);
}
