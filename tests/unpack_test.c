/*
 * unpack_test.c - the layer unpacker (images/unpack.c, unpack_tar.c)
 * against layers each test writes with libarchive's writer into a memfd:
 * plain tar, gzip and zstd; a normal layer; whiteouts and opaque
 * directories (the device form, and the xattr form with mknod refused by a
 * seccomp filter); every hostile class it must refuse or neutralise
 * (`..`, absolute names, writing through a symlink, hard links out of the
 * layer or forward, devices, setuid, too many entries or bytes, a
 * decompression bomb, a truncated or corrupt stream, an existing dest);
 * and img_unpack_layer_as() as an unprivileged uid.
 *
 * Every refusal is followed by the same proof: no dest and no temporary
 * directory are left (leftovers()), and nothing appeared outside. Each test
 * works in its own mkdtemp folder under /tmp (removed by the fixture).
 * Root is needed only by the _as tests, which say on stderr when they are
 * skipped. A symlink "to /etc" is tested with a file name no system has,
 * never /etc/passwd itself: a broken unpacker must not break the machine.
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../images/unpack.h"

#define MTIME 1600000000		/* every entry's mtime */
#define NOBODY_UID 100999		/* a fresh uid for the _as tests */

static char base[64];			/* this test's mkdtemp folder */
static char dest[128];			/* base/layer */

static void
setup(void)
{
	snprintf(base, sizeof(base), "/tmp/unpack_test.XXXXXX");
	cr_assert_not_null(mkdtemp(base));
	snprintf(dest, sizeof(dest), "%s/layer", base);
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		chmod(path, 0700);
	return remove(path);
}

static void
teardown(void)
{
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(unpack, .init = setup, .fini = teardown, .timeout = 60);

/*** Writing layers ***/

enum comp { PLAIN, GZIP, ZSTD };

/* A layer being written: the archive and the memfd it goes to. */
struct lw {
	struct archive *a;
	int fd;
};

/* Starts a layer with compression c; false if libarchive cannot write it here. */
static bool
lw_open(struct lw *w, enum comp c)
{
	int r = ARCHIVE_OK;

	w->fd = memfd_create("layer", MFD_CLOEXEC);
	cr_assert_geq(w->fd, 0);
	w->a = archive_write_new();
	cr_assert_not_null(w->a);
	cr_assert_eq(archive_write_set_format_pax_restricted(w->a), ARCHIVE_OK);
	if (c == GZIP)
		r = archive_write_add_filter_gzip(w->a);
	else if (c == ZSTD)
		r = archive_write_add_filter_zstd(w->a);
	if (r != ARCHIVE_OK) {
		archive_write_free(w->a);
		close(w->fd);
		return false;
	}
	cr_assert_eq(archive_write_open_fd(w->a, w->fd), ARCHIVE_OK);
	return true;
}

/* One entry of type type at name; data (len bytes) for a regular file. */
static void
lw_add(struct lw *w, const char *name, mode_t type, mode_t perm,
    const void *data, size_t len, const char *symlink, const char *hardlink,
    dev_t rdev)
{
	struct archive_entry *e = archive_entry_new();

	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_mtime(e, MTIME, 0);
	archive_entry_set_uid(e, 4242);
	archive_entry_set_gid(e, 4242);
	if (symlink != NULL)
		archive_entry_set_symlink(e, symlink);
	if (hardlink != NULL)
		archive_entry_set_hardlink(e, hardlink);
	if (rdev != 0)
		archive_entry_set_rdev(e, rdev);
	archive_entry_set_size(e, (la_int64_t)len);
	cr_assert_geq(archive_write_header(w->a, e), ARCHIVE_WARN, "%s: %s",
	    name, archive_error_string(w->a));
	if (len > 0)
		cr_assert_eq(archive_write_data(w->a, data, len), (la_ssize_t)len);
	archive_entry_free(e);
}

static void
lw_file(struct lw *w, const char *name, mode_t perm, const char *text)
{
	lw_add(w, name, AE_IFREG, perm, text, strlen(text), NULL, NULL, 0);
}

static void
lw_dir(struct lw *w, const char *name, mode_t perm)
{
	lw_add(w, name, AE_IFDIR, perm, NULL, 0, NULL, NULL, 0);
}

static void
lw_symlink(struct lw *w, const char *name, const char *target)
{
	lw_add(w, name, AE_IFLNK, 0777, NULL, 0, target, NULL, 0);
}

static void
lw_hardlink(struct lw *w, const char *name, const char *target)
{
	lw_add(w, name, AE_IFREG, 0644, NULL, 0, NULL, target, 0);
}

/* Ends the layer; returns its fd at offset 0 (the caller closes it). */
static int
lw_close(struct lw *w)
{
	cr_assert_eq(archive_write_close(w->a), ARCHIVE_OK);
	archive_write_free(w->a);
	cr_assert_eq(lseek(w->fd, 0, SEEK_SET), 0);
	return w->fd;
}

/*** Checks ***/

/* Unpacks fd into dest with lim (NULL: none), closing fd. */
static int
unpack_fd(int fd, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	int r;

	err_clear(e);
	r = img_unpack_layer(fd, dest, "test layer", lim, st, e);
	close(fd);
	return r;
}

/* Entries of dir whose names start with IMG_UNPACK_TMP_PREFIX. */
static int
tmp_dirs(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	cr_assert_not_null(d, "%s", dir);
	while ((de = readdir(d)) != NULL)
		if (strncmp(de->d_name, IMG_UNPACK_TMP_PREFIX,
		    strlen(IMG_UNPACK_TMP_PREFIX)) == 0)
			n++;
	closedir(d);
	return n;
}

/* After a refusal: neither dest nor a temporary directory is left. */
static void
leftovers(void)
{
	struct stat sb;

	cr_expect_neq(lstat(dest, &sb), 0, "dest was left behind");
	cr_expect_eq(tmp_dirs(base), 0, "a temporary directory was left behind");
}

static bool
exists(const char *rel)
{
	char path[512];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dest, rel);
	return lstat(path, &sb) == 0;
}

static struct stat
lstat_in(const char *rel)
{
	char path[512];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dest, rel);
	cr_assert_eq(lstat(path, &sb), 0, "%s: %s", rel, strerror(errno));
	return sb;
}

/* The file's contents (up to 255 bytes) as a string. */
static const char *
read_in(const char *rel)
{
	static char buf[256];
	char path[512];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dest, rel);
	fd = open(path, O_RDONLY | O_NOFOLLOW);
	cr_assert_geq(fd, 0, "%s: %s", rel, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert_geq(n, 0);
	buf[n] = '\0';
	return buf;
}

/* The xattr name of rel as a string ("" when absent). */
static const char *
xattr_in(const char *rel, const char *name)
{
	static char buf[16];
	char path[512];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dest, rel);
	n = lgetxattr(path, name, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static int wh_names;			/* names starting with .wh. under dest */

static int
count_wh(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	if (strncmp(path + ftw->base, ".wh.", 4) == 0)
		wh_names++;
	return 0;
}

/* A refusal's message: the code, a piece of the text, no control byte. */
static void
expect_refused(int r, int code, const struct err *e, const char *piece)
{
	cr_expect_eq(r, code, "got %d (%s)", r, e->msg);
	cr_expect_eq(e->code, code);
	cr_expect_not_null(strstr(e->msg, "test layer"), "%s", e->msg);
	if (piece != NULL)
		cr_expect_not_null(strstr(e->msg, piece), "no '%s' in: %s",
		    piece, e->msg);
	for (const char *p = e->msg; *p != '\0'; p++)
		cr_expect(*(const unsigned char *)p >= 0x20 &&
		    *(const unsigned char *)p != 0x7f, "control byte in: %s",
		    e->msg);
	leftovers();
}

/*** A normal layer ***/

/* The normal layer, compressed with c; false if c cannot be written here. */
static bool
normal_layer(enum comp c, int *fd)
{
	struct lw w;

	if (!lw_open(&w, c))
		return false;
	lw_dir(&w, "./etc/", 0755);
	lw_file(&w, "./etc/hosts", 0644, "127.0.0.1 localhost\n");
	lw_dir(&w, "usr/bin", 0750);
	lw_file(&w, "usr/bin/tool", 0755, "#!/bin/sh\necho tool\n");
	lw_hardlink(&w, "usr/bin/tool2", "usr/bin/tool");
	lw_symlink(&w, "usr/bin/hosts", "/etc/hosts");
	lw_symlink(&w, "usr/bin/rel", "../../etc");
	lw_dir(&w, "tmp", 01777);
	lw_file(&w, "secret", 0400, "shh");
	lw_file(&w, "implicit/parent/file", 0600, "deep");
	*fd = lw_close(&w);
	return true;
}

static void
check_normal_layer(void)
{
	struct stat sb, sb2;
	char buf[64];
	char path[512];
	ssize_t n;

	sb = lstat_in(".");
	cr_expect(S_ISDIR(sb.st_mode));
	cr_expect_eq(sb.st_mode & 07777, 0755, "root %o", sb.st_mode & 07777);
	cr_expect_str_eq(read_in("etc/hosts"), "127.0.0.1 localhost\n");
	sb = lstat_in("etc/hosts");
	cr_expect_eq(sb.st_mode & 07777, 0644);
	cr_expect_eq(sb.st_mtime, MTIME);
	cr_expect_eq(sb.st_uid, geteuid(), "ownership is the unpacker's");
	sb = lstat_in("etc");
	cr_expect_eq(sb.st_mtime, MTIME, "a directory's mtime survives its children");
	sb = lstat_in("usr/bin");
	cr_expect_eq(sb.st_mode & 07777, 0750);
	sb = lstat_in("usr/bin/tool");
	sb2 = lstat_in("usr/bin/tool2");
	cr_expect_eq(sb.st_ino, sb2.st_ino, "a hard link shares the inode");
	cr_expect_eq(sb.st_nlink, 2);
	cr_expect_eq(sb.st_mode & 07777, 0755);
	sb = lstat_in("usr/bin/hosts");
	cr_expect(S_ISLNK(sb.st_mode));
	snprintf(path, sizeof(path), "%s/usr/bin/hosts", dest);
	n = readlink(path, buf, sizeof(buf) - 1);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	cr_expect_str_eq(buf, "/etc/hosts", "a symlink is kept as it is");
	sb = lstat_in("tmp");
	cr_expect_eq(sb.st_mode & 07777, 01777, "the sticky bit is kept");
	sb = lstat_in("secret");
	cr_expect_eq(sb.st_mode & 07777, 0400);
	cr_expect_str_eq(read_in("secret"), "shh");
	cr_expect_str_eq(read_in("implicit/parent/file"), "deep");
	sb = lstat_in("implicit/parent");
	cr_expect_eq(sb.st_mode & 07777, 0755, "an implicit directory is 0755");
	cr_expect_eq(tmp_dirs(base), 0);
}

Test(unpack, a_plain_tar_layer_keeps_files_dirs_links_modes_and_mtimes)
{
	struct img_unpack_stats st;
	struct err e;
	int fd;

	cr_assert(normal_layer(PLAIN, &fd));
	cr_assert_eq(unpack_fd(fd, NULL, &st, &e), 0, "%s", e.msg);
	check_normal_layer();
	cr_expect_eq(st.entries, 10);
	cr_expect_eq(st.bytes, strlen("127.0.0.1 localhost\n") +
	    strlen("#!/bin/sh\necho tool\n") + 3 + 4);
	cr_expect_eq(st.written, st.bytes);
	cr_expect_eq(st.whiteouts + st.opaque + st.dropped_devices +
	    st.cleared_setid + st.dropped_other, 0);
}

Test(unpack, a_gzip_layer_is_detected_and_unpacked)
{
	struct img_unpack_stats st;
	struct err e;
	int fd;

	cr_assert(normal_layer(GZIP, &fd));
	cr_assert_eq(unpack_fd(fd, NULL, &st, &e), 0, "%s", e.msg);
	check_normal_layer();
}

Test(unpack, a_zstd_layer_is_detected_and_unpacked)
{
	struct img_unpack_stats st;
	struct err e;
	int fd;

	if (!normal_layer(ZSTD, &fd)) {
		fprintf(stderr, "unpack: zstd skipped: libarchive cannot write "
		    "zstd here\n");
		return;
	}
	cr_assert_eq(unpack_fd(fd, NULL, &st, &e), 0, "%s", e.msg);
	check_normal_layer();
}

Test(unpack, the_layer_may_name_its_root)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;
	struct stat sb;

	lw_open(&w, PLAIN);
	lw_dir(&w, "./", 0750);
	lw_file(&w, "f", 0644, "x");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);
	sb = lstat_in(".");
	cr_expect_eq(sb.st_mode & 07777, 0750);
	cr_expect_eq(sb.st_mtime, MTIME);
}

Test(unpack, a_later_entry_replaces_an_earlier_one_never_writing_into_it)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_file(&w, "f", 0644, "old");
	lw_hardlink(&w, "h", "f");
	lw_symlink(&w, "s", "f");
	lw_file(&w, "f", 0600, "new");
	lw_file(&w, "s", 0644, "not through");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);
	cr_expect_str_eq(read_in("h"), "old", "the hard link's inode is not rewritten");
	cr_expect_str_eq(read_in("f"), "new");
	cr_expect_str_eq(read_in("s"), "not through");
	cr_expect(S_ISREG(lstat_in("s").st_mode));
}

/*** Whiteouts ***/

Test(unpack, whiteouts_and_opaque_markers_become_overlayfs_ones)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;
	struct stat sb;

	lw_open(&w, GZIP);
	lw_dir(&w, "a", 0755);
	lw_file(&w, "a/.wh.gone", 0644, "");
	lw_file(&w, "b/.wh..wh..opq", 0644, "");
	lw_file(&w, "b/kept", 0644, "b");
	/* Same layer: the whiteout hides lower layers only. */
	lw_file(&w, "c/kept", 0644, "c");
	lw_file(&w, "c/.wh.kept", 0644, "");
	/* A later entry replaces this layer's whiteout. */
	lw_file(&w, "d/.wh.later", 0644, "");
	lw_file(&w, "d/later", 0644, "later");
	lw_file(&w, ".wh..wh.plnk", 0644, "");
	lw_file(&w, ".wh.top", 0644, "");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);

	sb = lstat_in("a/gone");
	cr_expect(S_ISCHR(sb.st_mode), "a whiteout is a character device");
	cr_expect_eq(sb.st_rdev, makedev(0, 0));
	sb = lstat_in("top");
	cr_expect(S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(0, 0));
	cr_expect_str_eq(xattr_in("b", "user.overlay.opaque"), "y");
	cr_expect_str_eq(read_in("b/kept"), "b");
	cr_expect_str_eq(xattr_in("a", "user.overlay.opaque"), "");
	cr_expect_str_eq(read_in("c/kept"), "c");
	cr_expect_str_eq(read_in("d/later"), "later");
	wh_names = 0;
	nftw(dest, count_wh, 16, FTW_PHYS);
	cr_expect_eq(wh_names, 0, "a .wh. name appeared as such");
	cr_expect_eq(st.whiteouts, 3);
	cr_expect_eq(st.opaque, 1);
	cr_expect_eq(st.dropped_other, 1, "aufs metadata is dropped");
}

Test(unpack, a_whiteout_is_an_xattr_file_when_mknod_is_refused)
{
	struct img_unpack_stats st;
	scmp_filter_ctx ctx;
	struct lw w;
	struct err e;
	struct stat sb;

	lw_open(&w, PLAIN);
	lw_file(&w, "a/keep", 0644, "k");
	lw_file(&w, "a/.wh.gone", 0644, "");
	lw_file(&w, "b/.wh..wh..opq", 0644, "");
	lw_file(&w, "b/.wh.gone", 0644, "");
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	cr_assert_not_null(ctx);
	cr_assert_eq(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
	    SCMP_SYS(mknodat), 0), 0);
	cr_assert_eq(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
	    SCMP_SYS(mknod), 0), 0);
	cr_assert_eq(seccomp_load(ctx), 0);
	seccomp_release(ctx);
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);

	sb = lstat_in("a/gone");
	cr_expect(S_ISREG(sb.st_mode) && sb.st_size == 0);
	cr_expect_str_eq(xattr_in("a/gone", "user.overlay.whiteout"), "y");
	cr_expect_str_eq(xattr_in("a", "user.overlay.whiteouts"), "y");
	cr_expect_str_eq(xattr_in("a", "user.overlay.opaque"), "x",
	    "the directory says it holds xattr whiteouts");
	cr_expect_str_eq(xattr_in("b", "user.overlay.opaque"), "y",
	    "an opaque directory stays opaque");
	cr_expect_eq(st.whiteouts, 2);
}

Test(unpack, a_whiteout_naming_no_sibling_is_refused)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_dir(&w, "a", 0755);
	lw_file(&w, "a/.wh...", 0644, "");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "names no sibling");
	lw_open(&w, PLAIN);
	lw_file(&w, "a/.wh.dir/file", 0644, "x");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "whiteout name as a directory");
}

/*** Hostile names and links ***/

Test(unpack, a_dotdot_entry_fails_the_whole_layer)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;
	char path[128];

	lw_open(&w, PLAIN);
	lw_file(&w, "fine", 0644, "x");
	lw_file(&w, "a/../../escaped", 0644, "x");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "'a/../../escaped'");
	cr_expect_not_null(strstr(e.msg, "'..'"), "%s", e.msg);
	snprintf(path, sizeof(path), "%s/escaped", base);
	cr_expect_neq(access(path, F_OK), 0);
	cr_expect_eq(st.entries, 2, "stats say how far it got");
}

Test(unpack, a_refused_name_is_escaped_in_the_message)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_file(&w, "x\033[2J\n\\/../y", 0644, "x");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "x\\x1b[2J\\x0a\\x5c/../y");
}

Test(unpack, an_absolute_entry_lands_inside_the_layer)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_file(&w, "/abs/file", 0644, "in");
	lw_file(&w, "//also/./here", 0644, "too");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);
	cr_expect_str_eq(read_in("abs/file"), "in");
	cr_expect_str_eq(read_in("also/here"), "too");
}

Test(unpack, nothing_is_written_through_a_symlink)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;
	char outside[128], marker[64], path[256];

	snprintf(outside, sizeof(outside), "%s/outside", base);
	cr_assert_eq(mkdir(outside, 0755), 0);

	/* To a directory outside, by its absolute path. */
	lw_open(&w, PLAIN);
	lw_symlink(&w, "a", outside);
	lw_file(&w, "a/passwd", 0644, "pwned");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "through a symlink");
	snprintf(path, sizeof(path), "%s/passwd", outside);
	cr_expect_neq(access(path, F_OK), 0, "written outside");

	/* Relative, up and out. */
	lw_open(&w, PLAIN);
	lw_symlink(&w, "r", "../..");
	lw_file(&w, "r/x/passwd", 0644, "pwned");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "through a symlink");

	/* To /etc, with a name no system has. */
	snprintf(marker, sizeof(marker), "sandq-unpack-test-%d", (int)getpid());
	snprintf(path, sizeof(path), "a/%s", marker);
	lw_open(&w, GZIP);
	lw_symlink(&w, "a", "/etc");
	lw_file(&w, path, 0644, "pwned");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "through a symlink");
	snprintf(path, sizeof(path), "/etc/%s", marker);
	if (access(path, F_OK) == 0) {
		unlink(path);
		cr_expect_fail("written into /etc");
	}

	/* A whiteout through one. */
	lw_open(&w, PLAIN);
	lw_symlink(&w, "a", outside);
	lw_file(&w, "a/.wh.x", 0644, "");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "through a symlink");
	snprintf(path, sizeof(path), "%s/x", outside);
	cr_expect_neq(access(path, F_OK), 0, "a whiteout made outside");
}

/* Without root, removing it needs the directories made writable again. */
Test(unpack, a_failed_layer_with_read_only_directories_is_removed)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_dir(&w, "ro", 0555);
	lw_file(&w, "ro/f", 0444, "x");
	lw_dir(&w, "ro/none", 0);
	lw_file(&w, "ro/none/g", 0, "y");
	lw_file(&w, "../late", 0644, "x");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "'..'");
}

Test(unpack, a_hard_link_out_of_the_layer_is_refused)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_hardlink(&w, "h", "/etc/passwd");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "not an earlier file of this layer");

	lw_open(&w, PLAIN);
	lw_hardlink(&w, "h", "../../../../etc/passwd");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "'..'");

	lw_open(&w, PLAIN);
	lw_symlink(&w, "l", "/etc");
	lw_hardlink(&w, "h", "l/passwd");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "through a symlink");
}

Test(unpack, a_hard_link_to_a_later_entry_is_refused)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_hardlink(&w, "h", "f");
	lw_file(&w, "f", 0644, "later");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "'h'");
}

Test(unpack, a_non_directory_over_a_directory_of_the_layer_is_refused)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_dir(&w, "d", 0755);
	lw_symlink(&w, "d", "/etc");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -EINVAL, &e,
	    "over a directory");
}

Test(unpack, names_past_the_depth_bound_are_refused)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;
	char name[2048] = "";

	for (int i = 0; i <= IMG_UNPACK_DEPTH_MAX; i++)
		strcat(name, "d/");
	strcat(name, "f");
	lw_open(&w, PLAIN);
	lw_file(&w, name, 0644, "x");
	expect_refused(unpack_fd(lw_close(&w), NULL, &st, &e), -ENAMETOOLONG,
	    &e, "deeper than");
}

/*** Neutralised entries ***/

Test(unpack, devices_and_fifos_are_dropped_and_counted)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_add(&w, "dev/null", AE_IFCHR, 0666, NULL, 0, NULL, NULL, makedev(1, 3));
	lw_add(&w, "dev/sda", AE_IFBLK, 0660, NULL, 0, NULL, NULL, makedev(8, 0));
	lw_add(&w, "dev/wh", AE_IFCHR, 0600, NULL, 0, NULL, NULL, makedev(0, 0));
	lw_add(&w, "fifo", AE_IFIFO, 0644, NULL, 0, NULL, NULL, 0);
	lw_file(&w, "dev/ok", 0644, "ok");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);
	cr_expect(!exists("dev/null"));
	cr_expect(!exists("dev/sda"));
	cr_expect(!exists("dev/wh"), "a 0/0 device of the layer's own is no whiteout");
	cr_expect(!exists("fifo"));
	cr_expect_str_eq(read_in("dev/ok"), "ok");
	cr_expect_eq(st.dropped_devices, 3);
	cr_expect_eq(st.dropped_other, 1);
}

Test(unpack, setuid_and_setgid_bits_are_cleared_and_counted)
{
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_dir(&w, "shared", 02775);
	lw_file(&w, "shared/su", 04755, "root me");
	lw_file(&w, "sg", 02711, "x");
	cr_assert_eq(unpack_fd(lw_close(&w), NULL, &st, &e), 0, "%s", e.msg);
	cr_expect_eq(lstat_in("shared").st_mode & 07777, 0775);
	cr_expect_eq(lstat_in("shared/su").st_mode & 07777, 0755);
	cr_expect_eq(lstat_in("sg").st_mode & 07777, 0711);
	cr_expect_eq(st.cleared_setid, 3);
}

/*** Bounds ***/

Test(unpack, too_many_entries_fail_the_layer)
{
	struct img_unpack_limits lim = { .max_entries = 3 };
	struct img_unpack_stats st;
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	for (int i = 0; i < 5; i++) {
		char name[16];

		snprintf(name, sizeof(name), "f%d", i);
		lw_file(&w, name, 0644, "x");
	}
	expect_refused(unpack_fd(lw_close(&w), &lim, &st, &e), -E2BIG, &e,
	    "more than 3 entries");
	cr_expect_eq(st.entries, 3);
}

Test(unpack, too_many_bytes_fail_the_layer_before_they_are_written)
{
	struct img_unpack_limits lim = { .max_bytes = 1000 };
	struct img_unpack_stats st;
	static char data[2000];
	struct lw w;
	struct err e;

	lw_open(&w, PLAIN);
	lw_file(&w, "small", 0644, "x");
	lw_add(&w, "big", AE_IFREG, 0644, data, sizeof(data), NULL, NULL, 0);
	expect_refused(unpack_fd(lw_close(&w), &lim, &st, &e), -EFBIG, &e,
	    "more than 1000 bytes");
	cr_expect_eq(st.written, 1);
}

/* A layer of n zero bytes in one file, gzip'd (about 1,000 to 1). */
static int
bomb(size_t n)
{
	char *zeros = calloc(1, n);
	struct lw w;

	cr_assert_not_null(zeros);
	lw_open(&w, GZIP);
	lw_add(&w, "zeros", AE_IFREG, 0644, zeros, n, NULL, NULL, 0);
	free(zeros);
	return lw_close(&w);
}

Test(unpack, a_decompression_bomb_stops_before_it_is_written)
{
	struct img_unpack_limits lim = { .max_ratio = 100 };
	struct img_unpack_stats st;
	struct err e;

	expect_refused(unpack_fd(bomb(8 << 20), &lim, &st, &e), -EFBIG, &e,
	    "decompression bomb");
	cr_expect_lt(st.written, 2 << 20, "wrote %ju bytes of 8 MiB",
	    (uintmax_t)st.written);
}

Test(unpack, the_same_layer_passes_without_a_ratio_bound)
{
	struct img_unpack_limits lim = { .max_bytes = 16 << 20 };
	struct img_unpack_stats st;
	struct err e;

	cr_assert_eq(unpack_fd(bomb(8 << 20), &lim, &st, &e), 0, "%s", e.msg);
	cr_expect_eq(st.written, 8 << 20);
	cr_expect_eq(lstat_in("zeros").st_size, 8 << 20);
}

Test(unpack, a_truncated_gzip_layer_fails_and_what_it_wrote_is_gone)
{
	struct img_unpack_stats st;
	static char data[1 << 20];
	struct lw w;
	struct err e;
	off_t size;
	int fd;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 2654435761u >> 13);
	lw_open(&w, GZIP);
	lw_file(&w, "first", 0644, "x");
	lw_add(&w, "random", AE_IFREG, 0644, data, sizeof(data), NULL, NULL, 0);
	fd = lw_close(&w);
	size = lseek(fd, 0, SEEK_END);
	cr_assert_eq(ftruncate(fd, size / 2), 0);
	cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
	expect_refused(unpack_fd(fd, NULL, &st, &e), -EBADMSG, &e,
	    "truncated");
	cr_expect_gt(st.written, 1, "the cut came before any data was written");
}

Test(unpack, bytes_that_are_no_tar_fail)
{
	struct img_unpack_stats st;
	struct err e;
	char junk[4096];
	int fd = memfd_create("junk", MFD_CLOEXEC);

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 7 + 1);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
	expect_refused(unpack_fd(fd, NULL, &st, &e), -EBADMSG, &e, NULL);
}

Test(unpack, an_existing_dest_is_left_alone)
{
	struct img_unpack_stats st;
	struct err e;
	char path[256];
	int fd, r;

	cr_assert_eq(mkdir(dest, 0700), 0);
	cr_assert(normal_layer(PLAIN, &fd));
	r = unpack_fd(fd, NULL, &st, &e);
	cr_expect_eq(r, -EEXIST, "%s", e.msg);
	cr_expect_not_null(strstr(e.msg, "already exists"), "%s", e.msg);
	snprintf(path, sizeof(path), "%s/etc", dest);
	cr_expect_neq(access(path, F_OK), 0, "the existing dest was written");
	cr_expect_eq(tmp_dirs(base), 0);
}

/* What the killer thread needs: the layer to feed, the pipe it feeds. */
struct feed {
	int layer;			/* memfd holding the whole layer */
	int wfd;			/* the pipe the unpacker reads */
	size_t prefix;			/* bytes of the layer fed before the kill */
	pid_t child;			/* the unpacker it killed (0: none found) */
};

/* The first pid in /proc/self/task/TID/children, or 0. */
static pid_t
first_child(void)
{
	char path[64];
	long pid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/children",
	    (int)getpid());
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	return (pid_t)pid;
}

/* Feeds a prefix of the layer, then SIGKILLs the unpacker mid-layer. */
static void *
killer(void *arg)
{
	struct feed *f = arg;
	char buf[4096];
	size_t done = 0;
	ssize_t n;

	while (done < f->prefix) {
		n = pread(f->layer, buf, sizeof(buf), (off_t)done);
		if (n <= 0 || write(f->wfd, buf, (size_t)n) != n)
			break;
		done += (size_t)n;
	}
	for (int i = 0; i < 500 && (f->child = first_child()) == 0; i++)
		usleep(10000);
	/* Let it write what the pipe still holds. */
	usleep(100000);
	if (f->child > 0)
		kill(f->child, SIGKILL);
	close(f->wfd);
	return NULL;
}

Test(unpack, an_unpacker_killed_mid_layer_leaves_nothing)
{
	struct img_unpack_stats st;
	static char data[1 << 20];
	struct feed f = { 0 };
	pthread_t t;
	struct lw w;
	struct err e;
	int p[2], r;

	lw_open(&w, PLAIN);
	lw_file(&w, "first", 0644, "x");
	lw_add(&w, "big", AE_IFREG, 0644, data, sizeof(data), NULL, NULL, 0);
	f.layer = lw_close(&w);
	f.prefix = sizeof(data) / 2;
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	f.wfd = p[1];
	cr_assert_eq(pthread_create(&t, NULL, killer, &f), 0);
	err_clear(&e);
	r = img_unpack_layer(p[0], dest, "test layer", NULL, &st, &e);
	pthread_join(t, NULL);
	close(p[0]);
	close(f.layer);
	if (f.child == 0) {
		fprintf(stderr, "unpack: kill test skipped: no "
		    "/proc/self/task/TID/children here\n");
		return;
	}
	expect_refused(r, -ECHILD, &e, "killed by signal 9");
}

/*** As an unprivileged uid ***/

static bool
need_root(const char *test)
{
	if (geteuid() == 0)
		return true;
	fprintf(stderr, "unpack: %s skipped: needs root (to become uid %d)\n",
	    test, NOBODY_UID);
	return false;
}

Test(unpack, as_an_unprivileged_uid_everything_is_its_own)
{
	struct img_unpack_stats st;
	char own[128], layer[160], path[256];
	struct stat sb;
	struct lw w;
	struct err e;
	int fd;

	if (!need_root("as_an_unprivileged_uid_everything_is_its_own"))
		return;
	cr_assert_eq(chmod(base, 0755), 0);
	snprintf(own, sizeof(own), "%s/own", base);
	cr_assert_eq(mkdir(own, 0755), 0);
	cr_assert_eq(chown(own, NOBODY_UID, NOBODY_UID), 0);
	snprintf(layer, sizeof(layer), "%s/layer", own);

	lw_open(&w, GZIP);
	lw_file(&w, "etc/hosts", 0644, "h");
	lw_file(&w, "bin/su", 04755, "s");
	lw_file(&w, "etc/.wh.gone", 0644, "");
	lw_file(&w, "var/.wh..wh..opq", 0644, "");
	fd = lw_close(&w);
	err_clear(&e);
	cr_assert_eq(img_unpack_layer_as(NOBODY_UID, NOBODY_UID, fd, layer,
	    "test layer", NULL, &st, &e), 0, "%s", e.msg);
	close(fd);
	cr_assert_eq(lstat(layer, &sb), 0);
	cr_expect_eq(sb.st_uid, NOBODY_UID);
	snprintf(path, sizeof(path), "%s/etc/hosts", layer);
	cr_assert_eq(lstat(path, &sb), 0);
	cr_expect_eq(sb.st_uid, NOBODY_UID);
	cr_expect_eq(sb.st_gid, NOBODY_UID);
	snprintf(path, sizeof(path), "%s/bin/su", layer);
	cr_assert_eq(lstat(path, &sb), 0);
	cr_expect_eq(sb.st_mode & 07777, 0755);
	snprintf(path, sizeof(path), "%s/etc/gone", layer);
	cr_assert_eq(lstat(path, &sb), 0);
	cr_expect(S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(0, 0),
	    "an unprivileged uid makes the 0/0 whiteout");
	cr_expect_eq(st.whiteouts, 1);
	cr_expect_eq(st.opaque, 1);
	cr_expect_eq(st.cleared_setid, 1);
}

Test(unpack, as_an_unprivileged_uid_it_cannot_write_where_root_could)
{
	struct img_unpack_stats st;
	char rootonly[128], layer[160];
	struct stat sb;
	struct err e;
	int fd, r;

	if (!need_root("as_an_unprivileged_uid_it_cannot_write_where_root_could"))
		return;
	cr_assert_eq(chmod(base, 0755), 0);
	snprintf(rootonly, sizeof(rootonly), "%s/rootonly", base);
	cr_assert_eq(mkdir(rootonly, 0755), 0);
	snprintf(layer, sizeof(layer), "%s/layer", rootonly);
	cr_assert(normal_layer(PLAIN, &fd));
	err_clear(&e);
	r = img_unpack_layer_as(NOBODY_UID, NOBODY_UID, fd, layer,
	    "test layer", NULL, &st, &e);
	close(fd);
	cr_expect_eq(r, -EACCES, "%d: %s", r, e.msg);
	cr_expect_not_null(strstr(e.msg, "Permission denied"), "%s", e.msg);
	cr_expect_not_null(strstr(e.msg, rootonly), "%s", e.msg);
	cr_expect_neq(lstat(layer, &sb), 0);
	cr_expect_eq(tmp_dirs(rootonly), 0);

	/* And root itself is refused as the uid to become. */
	cr_assert(normal_layer(PLAIN, &fd));
	r = img_unpack_layer_as(0, 0, fd, layer, "test layer", NULL, &st, &e);
	close(fd);
	cr_expect_eq(r, -EINVAL, "%s", e.msg);
	cr_expect_neq(lstat(layer, &sb), 0);
}
