/*
 * workspace_test.c - unit tests for workspace/workspace.c: a snapshot
 * materialised into a directory and captured back.
 *
 * Each test gets a fresh mkdtemp folder holding "ws" (the workspace) and
 * "outside" (a file the workspace must never reach); the folder is removed
 * afterwards with nftw, without following symlinks. Trees are compared
 * through a dump: one line per entry of agentfs_walk(), with kind,
 * permission bits, size, target and a hash of file content.
 *
 * SANDQ_TESTDATA overrides the folder of the samples (default
 * tests/data, relative to the repository root tests run from).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"

static char root[64];		/* the test folder */
static int wsfd = -1;		/* root/ws, O_DIRECTORY */
static struct stat secret_st;	/* root/outside/secret before the test */

/*** Fixture ***/

static int
unlock_cb(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	if (type == FTW_D && !S_ISLNK(st->st_mode))
		chmod(path, 0700);
	return 0;
}

static int
remove_cb(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)type;
	(void)f;
	remove(path);
	return 0;
}

static void
setup(void)
{
	char path[128];
	int fd;

	strcpy(root, "/tmp/sandq-ws-XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/ws", root);
	cr_assert_eq(mkdir(path, 0755), 0);
	wsfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(wsfd, 0);
	snprintf(path, sizeof(path), "%s/outside", root);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/outside/secret", root);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "secret\n", 7), 7);
	close(fd);
	cr_assert_eq(stat(path, &secret_st), 0);
}

static void
teardown(void)
{
	if (wsfd >= 0)
		close(wsfd);
	/* Pre-order pass first so a 0555 directory can be emptied. */
	nftw(root, unlock_cb, 16, FTW_PHYS);
	nftw(root, remove_cb, 16, FTW_PHYS | FTW_DEPTH);
}

TestSuite(workspace, .init = setup, .fini = teardown, .timeout = 30);

/* The file outside is untouched and alone in its folder. */
static void
expect_outside_untouched(void)
{
	char path[128];
	struct stat st;
	char buf[16] = { 0 };
	int fd, n = 0;
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/outside/secret", root);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_size, 7);
	cr_expect_eq(st.st_mode, secret_st.st_mode);
	cr_expect_eq(st.st_mtim.tv_sec, secret_st.st_mtim.tv_sec);
	cr_expect_eq(st.st_mtim.tv_nsec, secret_st.st_mtim.tv_nsec);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_expect_eq(read(fd, buf, sizeof(buf)), 7);
	cr_expect_str_eq(buf, "secret\n");
	close(fd);
	snprintf(path, sizeof(path), "%s/outside", root);
	d = opendir(path);
	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	cr_expect_eq(n, 1, "something was created outside the workspace");
}

/*** Helpers ***/

static void
put(struct agentfs *fs, const char *path, const char *text, mode_t mode)
{
	struct err e;

	cr_assert_eq(agentfs_write(fs, path, text, strlen(text), mode, &e), 0,
	    "%s", e.msg);
}

static void
mkd(struct agentfs *fs, const char *path, mode_t mode)
{
	struct err e;

	cr_assert_eq(agentfs_mkdir(fs, path, mode, &e), 0, "%s", e.msg);
}

static unsigned char blob9000[9000];

/* The sample of the brief: nested dirs, a 9,000-byte file, an empty file,
 * a name with a space and U+00E9, a relative and an absolute symlink, a
 * setuid file, a read-only directory. */
static struct agentfs *
sample_new(void)
{
	struct agentfs *fs = NULL;
	struct err e;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	mkd(fs, "/src", 0755);
	mkd(fs, "/src/lib", 0755);
	mkd(fs, "/docs", 0750);
	mkd(fs, "/ro", 0555);
	put(fs, "/src/main.py", "print('hi')\n", 0644);
	put(fs, "/src/lib/util.py", "X = 1\n", 0600);
	put(fs, "/empty.txt", "", 0644);
	put(fs, "/notes \xc3\xa9.txt", "caf\xc3\xa9\n", 0644);
	put(fs, "/ro/keep.txt", "keep\n", 0444);
	put(fs, "/run.sh", "#!/bin/sh\n", 04755);
	for (size_t i = 0; i < sizeof(blob9000); i++)
		blob9000[i] = (unsigned char)(i * 7);
	cr_assert_eq(agentfs_write(fs, "/blob.bin", blob9000,
	    sizeof(blob9000), 0644, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_symlink(fs, "src/main.py", "/latest", &e), 0);
	cr_assert_eq(agentfs_symlink(fs, "/etc/passwd", "/passwd", &e), 0);
	return fs;
}

struct dump {
	char *buf;
	size_t len;
	FILE *f;
	char *files[64];
	size_t nfiles;
};

static int
dump_cb(const struct agentfs_entry *ent, void *arg)
{
	struct dump *d = arg;

	fprintf(d->f, "%s %s", ent->path, ent->kind == AGENTFS_DIR ? "dir" :
	    ent->kind == AGENTFS_FILE ? "file" :
	    ent->kind == AGENTFS_SYMLINK ? "link" : "special");
	if (ent->kind == AGENTFS_SYMLINK)
		fprintf(d->f, " -> %s\n", ent->target);
	else
		fprintf(d->f, " %04o %llu\n", ent->mode & 07777,
		    ent->kind == AGENTFS_FILE ?
		    (unsigned long long)ent->size : 0ULL);
	if (ent->kind == AGENTFS_FILE && d->nfiles < 64)
		d->files[d->nfiles++] = strdup(ent->path);
	return 0;
}

/* One line per entry, then one FNV-1a hash line per regular file. */
static char *
dump_tree(struct agentfs *fs)
{
	struct dump d = { 0 };
	struct err e;

	d.f = open_memstream(&d.buf, &d.len);
	cr_assert_not_null(d.f);
	cr_assert_eq(agentfs_walk(fs, dump_cb, &d, &e), 0, "%s", e.msg);
	for (size_t i = 0; i < d.nfiles; i++) {
		void *data = NULL;
		size_t len = 0;
		uint64_t h = 14695981039346656037ULL;

		cr_assert_eq(agentfs_read(fs, d.files[i], &data, &len, &e), 0,
		    "%s", e.msg);
		for (size_t k = 0; k < len; k++)
			h = (h ^ ((unsigned char *)data)[k]) * 1099511628211ULL;
		fprintf(d.f, "%s #%016llx\n", d.files[i], (unsigned long long)h);
		free(data);
		free(d.files[i]);
	}
	fclose(d.f);
	return d.buf;
}

static char *
read_at(int dfd, const char *path, size_t *len)
{
	int fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW);
	char *buf = malloc(65536);
	ssize_t n;

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	n = read(fd, buf, 65536);
	cr_assert_geq(n, 0);
	close(fd);
	*len = (size_t)n;
	return buf;
}

static void
write_at(int dfd, const char *path, const char *text)
{
	int fd = openat(dfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
	    0644);

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void
expect_link(int dfd, const char *path, const char *target)
{
	struct stat st;
	char buf[256];
	ssize_t n;

	cr_assert_eq(fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW), 0, "%s",
	    path);
	cr_expect(S_ISLNK(st.st_mode), "%s is not a symlink", path);
	n = readlinkat(dfd, path, buf, sizeof(buf) - 1);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	cr_expect_str_eq(buf, target);
}

static void
expect_mode(int dfd, const char *path, mode_t type, mode_t perm)
{
	struct stat st;

	cr_assert_eq(fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW), 0, "%s: %s",
	    path, strerror(errno));
	cr_expect_eq(st.st_mode & S_IFMT, type, "%s: type %o", path,
	    st.st_mode & S_IFMT);
	cr_expect_eq(st.st_mode & 07777, perm, "%s: mode %o, want %o", path,
	    st.st_mode & 07777, perm);
}

static bool
change_listed(const struct workspace_changes *ch, enum workspace_op op,
    const char *path)
{
	for (size_t i = 0; i < ch->nlist; i++)
		if (ch->list[i].op == op && strcmp(ch->list[i].path, path) == 0)
			return true;
	return false;
}

/* Captures with lim and expects failure code with msg containing needle. */
static void
expect_capture_fails(const struct workspace_limits *lim, int code,
    const char *needle)
{
	struct agentfs *out = (struct agentfs *)1;
	struct workspace_changes ch;
	struct err e;
	int rc;

	rc = workspace_capture(wsfd, NULL, lim, &out, &ch, &e);
	cr_expect_eq(rc, code, "rc %d (%s), want %d", rc, e.msg, code);
	cr_expect_null(out);
	cr_expect(strstr(e.msg, needle) != NULL, "message \"%s\" lacks \"%s\"",
	    e.msg, needle);
	workspace_changes_free(&ch);
	expect_outside_untouched();
}

static void *
file_slurp(const char *name, size_t *len)
{
	const char *dir = getenv("SANDQ_TESTDATA");
	char *path = NULL;
	FILE *f;
	void *buf;
	long n;

	cr_assert(asprintf(&path, "%s/%s", dir ? dir : "tests/data",
	    name) > 0);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_gt(n, 0);
	rewind(f);
	buf = malloc((size_t)n);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	free(path);
	*len = (size_t)n;
	return buf;
}

/*** Round trip ***/

Test(workspace, round_trip_keeps_tree_and_never_follows_links)
{
	struct agentfs *fs = sample_new(), *out = NULL;
	struct workspace_changes ch;
	char *want, *got, *data;
	struct err e;
	size_t len;

	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s",
	    e.msg);
	expect_mode(wsfd, "src", S_IFDIR, 0755);
	expect_mode(wsfd, "src/lib", S_IFDIR, 0755);
	expect_mode(wsfd, "docs", S_IFDIR, 0750);
	expect_mode(wsfd, "ro", S_IFDIR, 0555);
	expect_mode(wsfd, "ro/keep.txt", S_IFREG, 0444);
	expect_mode(wsfd, "src/lib/util.py", S_IFREG, 0600);
	expect_mode(wsfd, "empty.txt", S_IFREG, 0644);
	expect_mode(wsfd, "notes \xc3\xa9.txt", S_IFREG, 0644);
	/* setuid is kept in the snapshot but never reaches the disk. */
	expect_mode(wsfd, "run.sh", S_IFREG, 0755);
	expect_link(wsfd, "latest", "src/main.py");
	expect_link(wsfd, "passwd", "/etc/passwd");
	data = read_at(wsfd, "blob.bin", &len);
	cr_expect_eq(len, sizeof(blob9000));
	cr_expect_eq(memcmp(data, blob9000, len), 0);
	free(data);
	data = read_at(wsfd, "src/main.py", &len);
	cr_expect_eq(len, 12);
	cr_expect_eq(memcmp(data, "print('hi')\n", 12), 0);
	free(data);

	cr_assert_eq(workspace_capture(wsfd, fs, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.added, 0);
	cr_expect_eq(ch.modified, 0);
	cr_expect_eq(ch.removed, 0);
	cr_expect_eq(ch.nlist, 0);
	want = dump_tree(fs);
	got = dump_tree(out);
	cr_expect_str_eq(got, want);
	/* The links are links in the capture, not /etc/passwd's content. */
	cr_expect_eq(agentfs_read(out, "/passwd", (void **)&data, &len, &e),
	    -EINVAL);
	free(want);
	free(got);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	expect_outside_untouched();
}

Test(workspace, capture_without_base_adds_everything)
{
	struct agentfs *fs = sample_new(), *out = NULL;
	struct workspace_changes ch;
	char *want, *got;
	struct err e;

	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(workspace_capture(wsfd, NULL, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.added, 13);
	cr_expect_eq(ch.modified + ch.removed, 0);
	/* Same tree except run.sh, captured as materialised: 0755. */
	put(fs, "/run.sh", "#!/bin/sh\n", 0755);
	want = dump_tree(fs);
	got = dump_tree(out);
	cr_expect_str_eq(got, want);
	free(want);
	free(got);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
}

/*** Changes ***/

Test(workspace, capture_reports_exactly_what_changed)
{
	struct agentfs *fs = sample_new(), *out = NULL;
	struct workspace_changes ch;
	void *data = NULL;
	size_t len = 0;
	struct err e;

	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s",
	    e.msg);
	write_at(wsfd, "src/main.py", "print('bye')\n");	/* modified */
	write_at(wsfd, "src/new.txt", "new\n");			/* added */
	cr_assert_eq(unlinkat(wsfd, "empty.txt", 0), 0);	/* removed */
	cr_assert_eq(unlinkat(wsfd, "blob.bin", 0), 0);		/* file->dir */
	cr_assert_eq(mkdirat(wsfd, "blob.bin", 0700), 0);
	write_at(wsfd, "blob.bin/x", "x");			/* added */
	cr_assert_eq(unlinkat(wsfd, "src/lib/util.py", 0), 0);	/* dir->file */
	cr_assert_eq(unlinkat(wsfd, "src/lib", AT_REMOVEDIR), 0);
	write_at(wsfd, "src/lib", "now a file\n");
	cr_assert_eq(fchmodat(wsfd, "docs", 0700, 0), 0);	/* not captured */

	cr_assert_eq(workspace_capture(wsfd, fs, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.added, 2);
	cr_expect_eq(ch.modified, 3);
	cr_expect_eq(ch.removed, 2);
	cr_expect_eq(ch.nlist, 7);
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/src/main.py"));
	cr_expect(change_listed(&ch, WORKSPACE_ADDED, "/src/new.txt"));
	cr_expect(change_listed(&ch, WORKSPACE_REMOVED, "/empty.txt"));
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/blob.bin"));
	cr_expect(change_listed(&ch, WORKSPACE_ADDED, "/blob.bin/x"));
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/src/lib"));
	cr_expect(change_listed(&ch, WORKSPACE_REMOVED, "/src/lib/util.py"));

	cr_assert_eq(agentfs_read(out, "/src/main.py", &data, &len, &e), 0);
	cr_expect_eq(len, 13);
	cr_expect_eq(memcmp(data, "print('bye')\n", 13), 0);
	free(data);
	cr_assert_eq(agentfs_read(out, "/blob.bin/x", &data, &len, &e), 0);
	cr_expect_eq(len, 1);
	free(data);
	cr_assert_eq(agentfs_read(out, "/src/lib", &data, &len, &e), 0);
	cr_expect_eq(len, 11);
	free(data);
	cr_expect_eq(agentfs_read(out, "/empty.txt", &data, &len, &e),
	    -ENOENT);
	cr_expect_eq(agentfs_read(out, "/blob.bin", &data, &len, &e),
	    -EISDIR);
	/* base is untouched. */
	cr_assert_eq(agentfs_read(fs, "/empty.txt", &data, &len, &e), 0);
	free(data);
	cr_assert_eq(agentfs_read(fs, "/src/main.py", &data, &len, &e), 0);
	cr_expect_eq(len, 12);
	free(data);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
}

Test(workspace, mode_and_link_target_changes_are_modifications)
{
	struct agentfs *fs = sample_new(), *out = NULL;
	struct workspace_changes ch;
	struct err e;

	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(fchmodat(wsfd, "empty.txt", 0600, 0), 0);
	cr_assert_eq(unlinkat(wsfd, "latest", 0), 0);
	cr_assert_eq(symlinkat("src/other.py", wsfd, "latest"), 0);
	cr_assert_eq(workspace_capture(wsfd, fs, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.modified, 2);
	cr_expect_eq(ch.added + ch.removed, 0);
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/empty.txt"));
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/latest"));
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
}

/*** Hostile workspace ***/

Test(workspace, fifo_is_refused_naming_it)
{
	cr_assert_eq(mkdirat(wsfd, "d", 0755), 0);
	cr_assert_eq(mkfifoat(wsfd, "d/pipe", 0644), 0);
	expect_capture_fails(NULL, -EPERM, "/d/pipe: fifo refused");
}

Test(workspace, symlink_out_is_stored_as_link_not_followed)
{
	struct agentfs *out = NULL;
	struct workspace_changes ch;
	char abs[128];
	void *data = NULL;
	size_t len = 0;
	struct err e;

	snprintf(abs, sizeof(abs), "%s/outside", root);
	cr_assert_eq(symlinkat("../outside/secret", wsfd, "esc"), 0);
	cr_assert_eq(symlinkat(abs, wsfd, "escdir"), 0);
	cr_assert_eq(workspace_capture(wsfd, NULL, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.added, 2);
	cr_expect_eq(agentfs_read(out, "/esc", &data, &len, &e), -EINVAL);
	cr_expect_neq(agentfs_read(out, "/escdir/secret", &data, &len, &e),
	    0, "a read went through the link");
	workspace_changes_free(&ch);
	agentfs_close(out);
	expect_outside_untouched();
}

Test(workspace, file_over_size_cap_is_refused)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	char big[1002];

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	lim.max_file_bytes = 1000;
	cr_assert_eq(mkdirat(wsfd, "d", 0755), 0);
	write_at(wsfd, "d/big", big);
	expect_capture_fails(&lim, -EFBIG, "/d/big: over the file size cap");
}

Test(workspace, total_over_bytes_cap_is_refused)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	char part[601];

	memset(part, 'a', sizeof(part) - 1);
	part[sizeof(part) - 1] = '\0';
	lim.max_bytes = 1000;
	write_at(wsfd, "a", part);
	write_at(wsfd, "b", part);
	expect_capture_fails(&lim, -EDQUOT, "/b: over the total size cap");
}

/*** The growth bound (max_growth) ***/

/* A file of size bytes at name in the workspace: only holes (ftruncate). */
static void
sparse_at(const char *name, off_t size)
{
	int fd = openat(wsfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	cr_assert_geq(fd, 0, "%s: %s", name, strerror(errno));
	cr_assert_eq(ftruncate(fd, size), 0);
	close(fd);
}

/* A file of size bytes of 'x' at name in the workspace. */
static void
filled_at(const char *name, size_t size)
{
	char *buf = malloc(size + 1);

	cr_assert_not_null(buf);
	memset(buf, 'x', size);
	buf[size] = '\0';
	write_at(wsfd, name, buf);
	free(buf);
}

/*
 * A snapshot stores zeros in full; the tree made of it keeps each 4 KiB
 * block of zeros a hole, so a materialised workspace or kept base holds
 * what is not zero: a 1 MiB file with 5 bytes of data takes one block,
 * and reads back byte for byte.
 */
Test(workspace, materialise_keeps_blocks_of_zeros_as_holes)
{
	struct agentfs *fs = NULL;
	unsigned char *data = calloc(1, 1 << 20);
	struct stat st;
	struct err e;
	size_t len = 0;
	ssize_t n;
	char *back;
	int fd;

	cr_assert_not_null(data);
	memcpy(data + 300000, "hello", 5);
	cr_assert_eq(agentfs_new(&fs, &e), 0);
	cr_assert_eq(agentfs_write(fs, "/z", data, 1 << 20, 0644, &e), 0, "%s", e.msg);
	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s", e.msg);
	cr_assert_eq(fstatat(wsfd, "z", &st, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(st.st_size, 1 << 20);
	cr_expect_leq((uint64_t)st.st_blocks * 512, 16384, "%llu bytes allocated",
	    (unsigned long long)st.st_blocks * 512);
	back = malloc(1 << 20);
	fd = openat(wsfd, "z", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	cr_assert(back != NULL && fd >= 0);
	while (len < (size_t)1 << 20 && (n = read(fd, back + len, (1 << 20) - len)) > 0)
		len += (size_t)n;
	close(fd);
	cr_expect_eq(len, (size_t)1 << 20);
	cr_expect(len == (size_t)1 << 20 && memcmp(back, data, len) == 0);
	free(back);
	free(data);
	agentfs_close(fs);
}

/*
 * Eight 1 MiB files of holes take no block of a disk, but a snapshot
 * stores their zeros: with 1 MiB of growth allowed, the capture is
 * -ENOSPC naming the bound, in place as well as into a copy.
 */
Test(workspace, growth_bound_counts_holes_as_the_zeros_a_snapshot_stores)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *base = sample_new(), *out = NULL;
	struct workspace_changes ch;
	struct err e;
	char name[16];
	int rc;

	cr_assert_eq(workspace_materialise(base, wsfd, NULL, &e), 0, "%s", e.msg);
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "hole%d", i);
		sparse_at(name, 1 << 20);
	}
	lim.max_growth = 1 << 20;
	rc = workspace_capture(wsfd, base, &lim, &out, &ch, &e);
	cr_expect_eq(rc, -ENOSPC, "rc %d: %s", rc, e.msg);
	cr_expect_null(out);
	cr_expect_not_null(strstr(e.msg, "over the disk limit of 1048576 bytes"), "%s", e.msg);
	workspace_changes_free(&ch);
	rc = workspace_capture_inplace(wsfd, base, &lim, NULL, &ch, &e);
	cr_expect_eq(rc, -ENOSPC, "in place: rc %d: %s", rc, e.msg);
	workspace_changes_free(&ch);
	agentfs_close(base);
}

/*
 * Five names for one 300 KiB file: a capture stores each in full, so they
 * count 1.5 MiB against a bound of 1 MiB (-ENOSPC, the sizes named); two
 * names fit.
 */
Test(workspace, growth_bound_counts_each_name_of_a_hard_link_in_full)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *out = NULL;
	struct workspace_changes ch;
	struct err e;
	int rc;

	lim.max_growth = 1 << 20;
	filled_at("f", 300 << 10);
	cr_assert_eq(linkat(wsfd, "f", wsfd, "g1", 0), 0);
	rc = workspace_capture(wsfd, NULL, &lim, &out, &ch, &e);
	cr_expect_eq(rc, 0, "two names: rc %d: %s", rc, e.msg);
	agentfs_close(out);
	workspace_changes_free(&ch);
	for (int i = 2; i < 5; i++) {
		char name[8];

		snprintf(name, sizeof(name), "g%d", i);
		cr_assert_eq(linkat(wsfd, "f", wsfd, name, 0), 0);
	}
	rc = workspace_capture(wsfd, NULL, &lim, &out, &ch, &e);
	cr_expect_eq(rc, -ENOSPC, "five names: rc %d: %s", rc, e.msg);
	cr_expect_null(out);
	cr_expect_not_null(strstr(e.msg, "disk limit of 1048576"), "%s", e.msg);
	workspace_changes_free(&ch);
}

/*
 * The bound is on growth: replacing a 900 KiB file of base with another
 * of the same size grows nothing and passes a 100 KiB bound; adding 250
 * empty files does not, for each entry counts WORKSPACE_ENTRY_BYTES
 * (workspace_size()), and the message gives both sizes.
 */
Test(workspace, growth_bound_is_net_of_what_the_job_removed)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *base = NULL, *out = NULL;
	struct workspace_changes ch;
	uint64_t before = 0, after = 0;
	char *want;
	struct err e;
	int rc;

	lim.max_growth = 100 << 10;
	filled_at("old", 900 << 10);
	cr_assert_eq(workspace_capture(wsfd, NULL, NULL, &base, &ch, &e), 0, "%s", e.msg);
	workspace_changes_free(&ch);
	cr_assert_eq(unlinkat(wsfd, "old", 0), 0);
	filled_at("new", 900 << 10);
	rc = workspace_capture(wsfd, base, &lim, &out, &ch, &e);
	cr_expect_eq(rc, 0, "rc %d: %s", rc, e.msg);
	cr_expect(change_listed(&ch, WORKSPACE_REMOVED, "/old"));
	cr_expect(change_listed(&ch, WORKSPACE_ADDED, "/new"));
	cr_assert_eq(workspace_size(base, &before, &e), 0);
	cr_assert_eq(workspace_size(out, &after, &e), 0);
	cr_expect_eq(after, before);
	cr_expect_eq(after, (900 << 10) + WORKSPACE_ENTRY_BYTES);
	agentfs_close(out);
	workspace_changes_free(&ch);

	for (int i = 0; i < 250; i++) {
		char name[8];

		snprintf(name, sizeof(name), "e%d", i);
		write_at(wsfd, name, "");
	}
	rc = workspace_capture(wsfd, base, &lim, &out, &ch, &e);
	cr_expect_eq(rc, -ENOSPC, "rc %d: %s", rc, e.msg);
	cr_assert(asprintf(&want, "from %llu to %llu", (unsigned long long)before,
	    (unsigned long long)(before + 250 * WORKSPACE_ENTRY_BYTES)) > 0);
	cr_expect_not_null(strstr(e.msg, want), "\"%s\" lacks \"%s\"", e.msg, want);
	free(want);
	workspace_changes_free(&ch);
	agentfs_close(base);
}

Test(workspace, too_many_files_are_refused)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	char name[16];

	lim.max_files = 5;
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		write_at(wsfd, name, "");
	}
	expect_capture_fails(&lim, -EDQUOT, "over the cap of 5 entries");
}

Test(workspace, too_deep_a_tree_is_refused)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;

	lim.max_depth = 3;
	cr_assert_eq(mkdirat(wsfd, "a", 0755), 0);
	cr_assert_eq(mkdirat(wsfd, "a/b", 0755), 0);
	cr_assert_eq(mkdirat(wsfd, "a/b/c", 0755), 0);
	cr_assert_eq(mkdirat(wsfd, "a/b/c/d", 0755), 0);
	expect_capture_fails(&lim, -EDQUOT, "/a/b/c/d: over the depth cap");
}

Test(workspace, newline_in_name_is_refused_escaped)
{
	write_at(wsfd, "bad\nname", "");
	expect_capture_fails(NULL, -EILSEQ, "/bad\\x0aname: name");
}

Test(workspace, invalid_utf8_name_is_refused_escaped)
{
	write_at(wsfd, "caf\xe9.txt", "");
	expect_capture_fails(NULL, -EILSEQ, "/caf\\xe9.txt");
}

Test(workspace, name_validation)
{
	cr_expect(workspace_name_is_valid("notes \xc3\xa9.txt"));
	cr_expect(workspace_name_is_valid("\xf0\x9f\x98\x80"));
	cr_expect_not(workspace_name_is_valid(""));
	cr_expect_not(workspace_name_is_valid("."));
	cr_expect_not(workspace_name_is_valid(".."));
	cr_expect_not(workspace_name_is_valid("a/b"));
	cr_expect_not(workspace_name_is_valid("tab\there"));
	cr_expect_not(workspace_name_is_valid("del\x7f"));
	cr_expect_not(workspace_name_is_valid("c1\xc2\x85"));		/* NEL */
	cr_expect_not(workspace_name_is_valid("over\xc0\xaf"));	/* overlong */
	cr_expect_not(workspace_name_is_valid("sur\xed\xa0\x80"));	/* D800 */
	cr_expect_not(workspace_name_is_valid("cut\xc3"));
}

Test(workspace, materialise_never_writes_through_a_planted_symlink)
{
	struct agentfs *fs = sample_new();
	char abs[128];
	struct err e;
	int rc;

	snprintf(abs, sizeof(abs), "%s/outside", root);
	cr_assert_eq(symlinkat(abs, wsfd, "src"), 0);
	rc = workspace_materialise(fs, wsfd, NULL, &e);
	cr_expect_eq(rc, -EEXIST, "rc %d: %s", rc, e.msg);
	cr_expect(strstr(e.msg, "/src") != NULL, "%s", e.msg);
	agentfs_close(fs);
	expect_outside_untouched();
}

Test(workspace, materialise_checks_caps_before_writing)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *fs = sample_new();
	struct err e;
	DIR *d;
	struct dirent *de;
	int n = 0;

	lim.max_files = 3;
	cr_expect_eq(workspace_materialise(fs, wsfd, &lim, &e), -EDQUOT);
	cr_expect(strstr(e.msg, "cap of 3 entries") != NULL, "%s", e.msg);
	lim = (struct workspace_limits)WORKSPACE_LIMITS_DEFAULT;
	lim.max_file_bytes = 8999;
	cr_expect_eq(workspace_materialise(fs, wsfd, &lim, &e), -EFBIG);
	cr_expect(strstr(e.msg, "/blob.bin") != NULL, "%s", e.msg);
	d = fdopendir(dup(wsfd));
	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	cr_expect_eq(n, 0, "a refused snapshot left entries behind");
	agentfs_close(fs);
}

Test(workspace, materialise_refuses_special_entries)
{
	struct agentfs *fs = sample_new(), *bad = NULL;
	sqlite3 *db = NULL;
	unsigned char *img;
	sqlite3_int64 sz = 0;
	void *blob = NULL;
	size_t len = 0;
	struct err e;
	int rc;

	/* The codec has no call that makes a FIFO: add one with raw SQLite
	 * to a good image, as an uploaded snapshot could hold. */
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	img = sqlite3_malloc64(len);
	memcpy(img, blob, len);
	free(blob);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", img, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE |
	    SQLITE_DESERIALIZE_RESIZEABLE), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "INSERT INTO fs_inode(mode, nlink, uid, "
	    "gid, size, atime, mtime, ctime, rdev, atime_nsec, mtime_nsec, "
	    "ctime_nsec) VALUES (4516, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); "
	    "INSERT INTO fs_dentry(name, parent_ino, ino) VALUES ('pipe', 3, "
	    "last_insert_rowid());", NULL, NULL, NULL), SQLITE_OK, "%s",
	    sqlite3_errmsg(db));
	img = sqlite3_serialize(db, "main", &sz, 0);
	cr_assert_not_null(img);
	sqlite3_close(db);
	cr_assert_eq(agentfs_open_blob(img, (size_t)sz, &bad, &e), 0, "%s",
	    e.msg);
	sqlite3_free(img);
	rc = workspace_materialise(bad, wsfd, NULL, &e);
	cr_expect_eq(rc, -EPERM, "rc %d: %s", rc, e.msg);
	cr_expect(strstr(e.msg, "fifo") != NULL, "%s", e.msg);
	agentfs_close(bad);
	agentfs_close(fs);
}

/*** Legacy snapshot ***/

Test(workspace, legacy_json_symlink_materialises_as_real_symlink)
{
	struct agentfs *fs = NULL, *out = NULL;
	struct workspace_changes ch;
	size_t len = 0;
	void *blob = file_slurp("localsandbox-export.db", &len);
	size_t bad = 0;
	char *data;
	struct err e;

	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	free(blob);
	cr_assert_eq(workspace_materialise(fs, wsfd, NULL, &e), 0, "%s",
	    e.msg);
	expect_link(wsfd, "project/latest", "src/main.py");
	expect_mode(wsfd, "project/build", S_IFDIR, 0755);
	data = read_at(wsfd, "project/blob.bin", &len);
	cr_expect_eq(len, 9000);
	for (size_t i = 0; i < len; i++)
		bad += (unsigned char)data[i] != (unsigned char)(i * 7);
	cr_expect_eq(bad, 0, "blob.bin differs in %zu bytes", bad);
	free(data);
	cr_assert_eq(workspace_capture(wsfd, fs, NULL, &out, &ch, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
}

/*** Path rules ***/

static void
rules_compile(struct perms *p, const char *preset,
    const struct perm_rule *rules, size_t n)
{
	struct err e;

	cr_assert_eq(perms_compile(p, rules, n, preset, &e), 0, "%s", e.msg);
}

static bool
exists_at(int dfd, const char *path)
{
	struct stat st;

	return fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* rm -rf root/ws/path, without following symlinks. */
static void
rm_tree(const char *path)
{
	char abs[256];

	snprintf(abs, sizeof(abs), "%s/ws/%s", root, path);
	nftw(abs, unlock_cb, 16, FTW_PHYS);
	cr_assert_eq(nftw(abs, remove_cb, 16, FTW_PHYS | FTW_DEPTH), 0);
	cr_assert_not(exists_at(wsfd, path));
}

static bool
refused_listed(const struct workspace_changes *ch, const char *path)
{
	for (size_t i = 0; i < ch->nrefused_list; i++)
		if (strcmp(ch->refused_list[i], path) == 0)
			return true;
	return false;
}

static void
expect_content(struct agentfs *fs, const char *path, const void *want,
    size_t wantlen)
{
	void *data = NULL;
	size_t len = 0;
	struct err e;

	cr_assert_eq(agentfs_read(fs, path, &data, &len, &e), 0, "%s: %s",
	    path, e.msg);
	cr_expect_eq(len, wantlen, "%s: %zu bytes, want %zu", path, len,
	    wantlen);
	cr_expect(len == wantlen && memcmp(data, want, len) == 0,
	    "%s: content differs", path);
	free(data);
}

static bool
in_snapshot(struct agentfs *fs, const char *path)
{
	void *data = NULL;
	size_t len = 0;
	struct err e;
	int rc = agentfs_read(fs, path, &data, &len, &e);

	free(data);
	return rc == 0 || rc == -EISDIR || rc == -EINVAL;
}

/* Materialises fs under p, the job does its thing, then capture: */
static void
mat_rules(struct agentfs *fs, const struct perms *p)
{
	struct err e;

	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, p, NULL,
	    NULL, &e), 0, "%s", e.msg);
}

static struct agentfs *
cap_rules(struct agentfs *base, const struct perms *p,
    struct workspace_changes *ch)
{
	struct agentfs *out = NULL;
	struct err e;

	cr_assert_eq(workspace_capture_rules(wsfd, base, NULL, p, &out, ch,
	    &e), 0, "%s", e.msg);
	cr_assert_not_null(out);
	return out;
}

struct marks {
	char lines[32][128];
	size_t n;
};

static int
mark_cb(const char *path, enum perm_level level, enum agentfs_kind kind,
    void *arg)
{
	struct marks *m = arg;

	cr_assert_lt(m->n, 32);
	snprintf(m->lines[m->n++], sizeof(m->lines[0]), "%s %s %s", path,
	    perms_level_str(level), kind == AGENTFS_DIR ? "dir" :
	    kind == AGENTFS_FILE ? "file" : "link");
	return 0;
}

static void
expect_marks(const struct marks *m, const char *const *want, size_t n)
{
	cr_expect_eq(m->n, n, "%zu marks, want %zu", m->n, n);
	for (size_t i = 0; i < m->n && i < n; i++)
		cr_expect_str_eq(m->lines[i], want[i], "mark %zu", i);
}

/* A repository under agent-edit: .git read-only, .env hidden. */
static struct agentfs *
repo_new(void)
{
	struct agentfs *fs = NULL;
	struct err e;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	mkd(fs, "/.git", 0755);
	mkd(fs, "/.git/hooks", 0755);
	put(fs, "/.git/config", "[core]\n", 0644);
	put(fs, "/.git/hooks/pre-commit", "#!/bin/sh\n", 0755);
	put(fs, "/.env", "TOKEN=s3cret\n", 0600);
	mkd(fs, "/src", 0755);
	put(fs, "/src/main.py", "print('hi')\n", 0644);
	put(fs, "/src/app.key", "KEY\n", 0600);
	return fs;
}

Test(workspace, rules_none_file_is_absent_and_kept_when_recreated)
{
	struct agentfs *fs = repo_new(), *out = NULL, *out2 = NULL;
	struct workspace_changes ch, ch2;
	struct perms p;

	rules_compile(&p, "agent-edit", NULL, 0);
	mat_rules(fs, &p);
	cr_expect_not(exists_at(wsfd, ".env"), ".env was materialised");
	cr_expect_not(exists_at(wsfd, "src/app.key"));
	cr_expect(exists_at(wsfd, "src/main.py"));

	/* Untouched: nothing changed, nothing refused, secrets kept. */
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	cr_expect_eq(ch.refused, 0);
	expect_content(out, "/.env", "TOKEN=s3cret\n", 13);
	expect_content(out, "/src/app.key", "KEY\n", 4);

	/* The job "recreates" them: refused, base kept. A right guess is
	 * refused too, so the refused list is no oracle for the secret. */
	write_at(wsfd, ".env", "TOKEN=forged\n");
	write_at(wsfd, "src/app.key", "KEY\n");
	cr_assert_eq(fchmodat(wsfd, "src/app.key", 0600, 0), 0);
	cr_assert_eq(symlinkat("x", wsfd, "id.pem"), 0);
	out2 = cap_rules(fs, &p, &ch2);
	cr_expect_eq(ch2.refused, 3);
	cr_expect(refused_listed(&ch2, "/id.pem"));
	cr_expect_not(in_snapshot(out2, "/id.pem"));
	cr_expect(refused_listed(&ch2, "/.env"));
	cr_expect(refused_listed(&ch2, "/src/app.key"));
	cr_expect_eq(ch2.added + ch2.modified + ch2.removed, 0);
	expect_content(out2, "/.env", "TOKEN=s3cret\n", 13);
	expect_content(out2, "/src/app.key", "KEY\n", 4);
	workspace_changes_free(&ch);
	workspace_changes_free(&ch2);
	agentfs_close(out);
	agentfs_close(out2);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_view_file_has_size_only_and_changes_are_refused)
{
	static const struct perm_rule r[] = { { "/blob.bin", PERM_VIEW } };
	struct agentfs *fs = sample_new(), *out = NULL, *out2 = NULL;
	struct workspace_changes ch, ch2;
	struct marks m = { 0 };
	struct perms p;
	struct stat st;
	char *data;
	size_t len, nonzero = 0;
	struct err e;

	rules_compile(&p, "agent-edit", r, 1);
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, &p, mark_cb,
	    &m, &e), 0, "%s", e.msg);
	expect_mode(wsfd, "blob.bin", S_IFREG, 0);
	cr_assert_eq(fstatat(wsfd, "blob.bin", &st, AT_SYMLINK_NOFOLLOW), 0);
	cr_expect_eq(st.st_size, 9000);
	cr_assert_eq(fchmodat(wsfd, "blob.bin", 0400, 0), 0);
	data = read_at(wsfd, "blob.bin", &len);
	cr_assert_eq(fchmodat(wsfd, "blob.bin", 0, 0), 0);
	cr_expect_eq(len, 9000);
	for (size_t i = 0; i < len; i++)
		nonzero += data[i] != 0;
	cr_expect_eq(nonzero, 0, "view content reached the disk");
	free(data);
	expect_marks(&m, (const char *const[]){ "/blob.bin view file" }, 1);

	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.refused, 0, "a zero-filled view file is no change");
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	expect_content(out, "/blob.bin", blob9000, sizeof(blob9000));

	if (geteuid() == 0) {
		struct workspace_changes ch3;
		struct agentfs *out3;
		int fd = openat(wsfd, "blob.bin", O_WRONLY);

		/* Same size and mode 0000, one byte set: the content check
		 * (which needs CAP_DAC_OVERRIDE) finds it. */
		cr_assert_geq(fd, 0);
		cr_assert_eq(pwrite(fd, "x", 1, 8000), 1);
		close(fd);
		out3 = cap_rules(fs, &p, &ch3);
		cr_expect_eq(ch3.refused, 1);
		expect_content(out3, "/blob.bin", blob9000, sizeof(blob9000));
		workspace_changes_free(&ch3);
		agentfs_close(out3);
	}
	cr_assert_eq(fchmodat(wsfd, "blob.bin", 0644, 0), 0);
	write_at(wsfd, "blob.bin", "changed");
	out2 = cap_rules(fs, &p, &ch2);
	cr_expect_eq(ch2.refused, 1);
	cr_expect(refused_listed(&ch2, "/blob.bin"));
	cr_expect_eq(ch2.modified, 0);
	expect_content(out2, "/blob.bin", blob9000, sizeof(blob9000));
	workspace_changes_free(&ch);
	workspace_changes_free(&ch2);
	agentfs_close(out);
	agentfs_close(out2);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_changed_read_file_is_refused_and_base_kept)
{
	struct agentfs *fs = repo_new(), *out = NULL;
	struct workspace_changes ch;
	struct perms p;

	rules_compile(&p, "agent-edit", NULL, 0);
	mat_rules(fs, &p);
	write_at(wsfd, ".git/config", "[core]\nfsmonitor = evil\n");
	/* Same content but another mode is a change too. */
	cr_assert_eq(fchmodat(wsfd, ".git/hooks/pre-commit", 0777, 0), 0);
	write_at(wsfd, "src/main.py", "print('bye')\n");	/* writable */
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.refused, 2);
	cr_expect(refused_listed(&ch, "/.git/config"));
	cr_expect(refused_listed(&ch, "/.git/hooks/pre-commit"));
	cr_expect_eq(ch.modified, 1);
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/src/main.py"));
	expect_content(out, "/.git/config", "[core]\n", 7);
	expect_content(out, "/src/main.py", "print('bye')\n", 13);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_kind_change_and_removal_at_read_path_keep_base)
{
	struct agentfs *fs = repo_new(), *out = NULL;
	struct workspace_changes ch;
	struct perms p;
	char *want, *got;

	rules_compile(&p, "agent-edit", NULL, 0);
	mat_rules(fs, &p);
	cr_assert_eq(unlinkat(wsfd, ".git/config", 0), 0);
	cr_assert_eq(mkdirat(wsfd, ".git/config", 0755), 0);
	write_at(wsfd, ".git/config/x", "x");
	rm_tree(".git/hooks");
	write_at(wsfd, ".git/new", "planted");
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	/* config (kind), new (added), hooks and pre-commit (removed). */
	cr_expect_eq(ch.refused, 4, "refused %llu",
	    (unsigned long long)ch.refused);
	cr_expect(refused_listed(&ch, "/.git/config"));
	cr_expect(refused_listed(&ch, "/.git/new"));
	cr_expect(refused_listed(&ch, "/.git/hooks"));
	cr_expect(refused_listed(&ch, "/.git/hooks/pre-commit"));
	want = dump_tree(fs);
	got = dump_tree(out);
	cr_expect_str_eq(got, want);
	free(want);
	free(got);
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_write_path_under_read_dir_is_captured)
{
	static const struct perm_rule r[] = { { "/out", PERM_WRITE } };
	struct agentfs *fs = NULL, *out = NULL;
	struct workspace_changes ch;
	struct marks m = { 0 };
	struct perms p;
	struct err e;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	put(fs, "/README", "read me\n", 0644);
	mkd(fs, "/out", 0755);
	put(fs, "/out/log.txt", "1\n", 0644);
	rules_compile(&p, "read-only", r, 1);
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, &p, mark_cb,
	    &m, &e), 0, "%s", e.msg);
	expect_marks(&m, (const char *const[]){ "/ read dir",
	    "/out write dir" }, 2);
	write_at(wsfd, "README", "defaced\n");
	write_at(wsfd, "out/log.txt", "1\n2\n");
	write_at(wsfd, "out/new.txt", "new\n");
	write_at(wsfd, "stray.txt", "stray\n");
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.modified, 1);
	cr_expect_eq(ch.added, 1);
	cr_expect_eq(ch.removed, 0);
	cr_expect(change_listed(&ch, WORKSPACE_MODIFIED, "/out/log.txt"));
	cr_expect(change_listed(&ch, WORKSPACE_ADDED, "/out/new.txt"));
	cr_expect_eq(ch.refused, 2);
	cr_expect(refused_listed(&ch, "/README"));
	cr_expect(refused_listed(&ch, "/stray.txt"));
	expect_content(out, "/README", "read me\n", 8);
	expect_content(out, "/out/log.txt", "1\n2\n", 4);
	expect_content(out, "/out/new.txt", "new\n", 4);
	cr_expect_not(in_snapshot(out, "/stray.txt"));
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_new_entries_under_none_dir_are_refused)
{
	struct agentfs *fs = NULL, *out = NULL;
	struct workspace_changes ch;
	struct perms p;
	struct err e;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	mkd(fs, "/secrets", 0700);
	put(fs, "/secrets/db.txt", "pw\n", 0600);
	rules_compile(&p, "agent-edit", NULL, 0);
	mat_rules(fs, &p);
	cr_expect_not(exists_at(wsfd, "secrets"));
	cr_assert_eq(mkdirat(wsfd, "secrets", 0755), 0);
	write_at(wsfd, "secrets/db.txt", "forged\n");
	write_at(wsfd, "secrets/new.txt", "new\n");
	cr_assert_eq(mkdirat(wsfd, ".ssh", 0700), 0);
	write_at(wsfd, ".ssh/authorized_keys", "ssh-ed25519 AAAA\n");
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	/* One refusal per hidden directory: nothing below is read. */
	cr_expect_eq(ch.refused, 2);
	cr_expect(refused_listed(&ch, "/secrets"));
	cr_expect(refused_listed(&ch, "/.ssh"));
	expect_content(out, "/secrets/db.txt", "pw\n", 3);
	cr_expect_not(in_snapshot(out, "/secrets/new.txt"));
	cr_expect_not(in_snapshot(out, "/.ssh"));
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_removed_dir_keeps_hidden_file_and_its_ancestors)
{
	struct agentfs *fs = NULL, *out = NULL;
	struct workspace_changes ch;
	struct perms p;
	struct err e;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	mkd(fs, "/proj", 0755);
	mkd(fs, "/proj/sub", 0755);
	put(fs, "/proj/sub/.env", "TOKEN=1\n", 0600);
	put(fs, "/proj/sub/a.txt", "a\n", 0644);
	put(fs, "/proj/b.txt", "b\n", 0644);
	mkd(fs, "/d", 0755);
	put(fs, "/d/.env", "D=1\n", 0600);
	rules_compile(&p, "agent-edit", NULL, 0);
	mat_rules(fs, &p);
	rm_tree("proj");
	rm_tree("d");
	write_at(wsfd, "d", "now a file\n");	/* would drop /d/.env */
	out = cap_rules(fs, &p, &ch);
	expect_content(out, "/proj/sub/.env", "TOKEN=1\n", 8);
	expect_content(out, "/d/.env", "D=1\n", 4);
	cr_expect_not(in_snapshot(out, "/proj/sub/a.txt"));
	cr_expect_not(in_snapshot(out, "/proj/b.txt"));
	cr_expect_eq(ch.removed, 2);
	cr_expect(change_listed(&ch, WORKSPACE_REMOVED, "/proj/sub/a.txt"));
	cr_expect(change_listed(&ch, WORKSPACE_REMOVED, "/proj/b.txt"));
	cr_expect_eq(ch.added + ch.modified, 0);
	/* The removals of the ancestors and the kind change were kept out;
	 * the hidden files themselves are no change. */
	cr_expect_eq(ch.refused, 3);
	cr_expect(refused_listed(&ch, "/proj"));
	cr_expect(refused_listed(&ch, "/proj/sub"));
	cr_expect(refused_listed(&ch, "/d"));
	cr_expect_not(refused_listed(&ch, "/proj/sub/.env"));
	workspace_changes_free(&ch);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_marks_follow_agent_safe_levels)
{
	struct agentfs *fs = repo_new();
	struct marks m = { 0 };
	struct perms p;
	struct err e;

	rules_compile(&p, "agent-edit", NULL, 0);
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, &p, mark_cb,
	    &m, &e), 0, "%s", e.msg);
	expect_marks(&m, (const char *const[]){ "/.git read dir" }, 1);
	expect_mode(wsfd, ".git/config", S_IFREG, 0644);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_hidden_dir_with_visible_entry_is_bare)
{
	static const struct perm_rule r[] = {
		{ "/secrets/public", PERM_WRITE },
		{ "/docs/**", PERM_VIEW },
		{ "/.aws/pub", PERM_WRITE },	/* may show, holds nothing */
	};
	struct agentfs *fs = repo_new();
	struct marks m = { 0 };
	struct perms p;
	struct err e;
	DIR *d;
	struct dirent *de;
	int n = 0;

	mkd(fs, "/secrets", 0700);
	put(fs, "/secrets/key.txt", "k\n", 0600);
	mkd(fs, "/secrets/public", 0755);
	put(fs, "/secrets/public/ca.crt", "cert\n", 0644);
	mkd(fs, "/.aws", 0700);		/* hidden, nothing visible below */
	mkd(fs, "/.aws/sub", 0700);
	put(fs, "/.aws/sub/credentials", "c\n", 0600);
	mkd(fs, "/docs", 0755);
	put(fs, "/docs/a.md", "# a\n", 0644);
	cr_assert_eq(agentfs_symlink(fs, "a.md", "/docs/latest", &e), 0);
	rules_compile(&p, "agent-edit", r, 3);
	cr_assert(perms_dir_may_show(&p, "/.aws"));
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, &p, mark_cb,
	    &m, &e), 0, "%s", e.msg);
	expect_marks(&m, (const char *const[]){
	    "/.git read dir", "/docs view dir", "/secrets none dir",
	    "/secrets/public write dir" }, 4);
	expect_mode(wsfd, "secrets", S_IFDIR, 0555);
	expect_mode(wsfd, "secrets/public", S_IFDIR, 0755);
	expect_mode(wsfd, "docs", S_IFDIR, 0555);
	expect_mode(wsfd, "docs/a.md", S_IFREG, 0);
	expect_link(wsfd, "docs/latest", "a.md");
	cr_expect(exists_at(wsfd, "secrets/public/ca.crt"));
	cr_expect_not(exists_at(wsfd, ".aws"), "an empty bare dir was kept");
	d = fdopendir(openat(wsfd, "secrets", O_RDONLY | O_DIRECTORY));
	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	cr_expect_eq(n, 1, "the bare directory lists hidden entries");
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_view_only_root_is_marked)
{
	struct agentfs *fs = repo_new();
	struct marks m = { 0 };
	struct perms p;
	struct err e;

	rules_compile(&p, "view-only", NULL, 0);
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, &p, mark_cb,
	    &m, &e), 0, "%s", e.msg);
	expect_marks(&m, (const char *const[]){ "/ view dir" }, 1);
	expect_mode(wsfd, "src", S_IFDIR, 0555);
	expect_mode(wsfd, ".env", S_IFREG, 0);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_refused_count_is_exact_and_list_capped)
{
	struct workspace_changes ch;
	struct agentfs *fs = NULL, *out = NULL;
	struct perms p;
	struct err e;
	char name[32];
	size_t bad = 0;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	rules_compile(&p, "read-only", NULL, 0);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "n%03d", i);
		write_at(wsfd, name, "x");
	}
	write_at(wsfd, "bad\nname", "");	/* refused, not an error */
	out = cap_rules(fs, &p, &ch);
	cr_expect_eq(ch.refused, 301);
	cr_expect_eq(ch.nrefused_list, WORKSPACE_REFUSED_LIST_MAX);
	for (size_t i = 0; i < ch.nrefused_list; i++)
		bad += strncmp(ch.refused_list[i], "/n", 2) != 0 &&
		    strcmp(ch.refused_list[i], "/bad\\x0aname") != 0;
	cr_expect_eq(bad, 0);
	cr_expect_eq(ch.added + ch.modified + ch.removed, 0);
	cr_expect_not(in_snapshot(out, "/n000"));
	workspace_changes_free(&ch);
	cr_expect_eq(ch.refused, 0);
	cr_expect_null(ch.refused_list);
	agentfs_close(out);
	agentfs_close(fs);
	perms_free(&p);
}

Test(workspace, rules_ignored_subtree_is_not_read_without_base)
{
	static const struct perm_rule r[] = {
		{ "**/node_modules", PERM_NONE },
		{ "**/*.log", PERM_NONE },
	};
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct workspace_changes ch;
	struct agentfs *out = NULL;
	struct perms p;
	struct err e;
	char name[64];

	rules_compile(&p, "full-access", r, 2);
	cr_assert_eq(mkdirat(wsfd, "src", 0755), 0);
	write_at(wsfd, "src/a.c", "int a;\n");
	write_at(wsfd, "x.log", "log\n");
	cr_assert_eq(mkdirat(wsfd, "node_modules", 0755), 0);
	cr_assert_eq(mkfifoat(wsfd, "node_modules/fifo", 0644), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "node_modules/m%d", i);
		write_at(wsfd, name, "m");
	}
	/* Reading node_modules would trip the entry cap or the FIFO. */
	lim.max_files = 4;
	cr_assert_eq(workspace_capture_rules(wsfd, NULL, &lim, &p, &out, &ch,
	    &e), 0, "%s", e.msg);
	cr_expect_eq(ch.added, 2);
	cr_expect(change_listed(&ch, WORKSPACE_ADDED, "/src/a.c"));
	cr_expect_not(in_snapshot(out, "/node_modules"));
	cr_expect_not(in_snapshot(out, "/x.log"));
	cr_expect_eq(ch.refused, 2);
	workspace_changes_free(&ch);
	agentfs_close(out);
	perms_free(&p);
}

Test(workspace, rules_null_and_full_access_match_plain_codec)
{
	struct agentfs *fs = sample_new(), *a = NULL, *b = NULL, *c = NULL;
	struct workspace_changes cha, chb, chc;
	struct marks m = { 0 };
	struct perms p;
	struct err e;
	char *da, *db, *dc;

	rules_compile(&p, "full-access", NULL, 0);
	cr_assert_eq(workspace_materialise_rules(fs, wsfd, NULL, NULL,
	    mark_cb, &m, &e), 0, "%s", e.msg);
	cr_expect_eq(m.n, 0);
	expect_mode(wsfd, "ro", S_IFDIR, 0555);
	write_at(wsfd, "src/main.py", "print('bye')\n");
	write_at(wsfd, "src/new.txt", "new\n");
	cr_assert_eq(unlinkat(wsfd, "empty.txt", 0), 0);
	cr_assert_eq(workspace_capture(wsfd, fs, NULL, &a, &cha, &e), 0, "%s",
	    e.msg);
	b = cap_rules(fs, NULL, &chb);
	c = cap_rules(fs, &p, &chc);
	cr_expect_eq(cha.added, 1);
	cr_expect_eq(cha.modified, 1);
	cr_expect_eq(cha.removed, 1);
	cr_expect_eq(cha.refused + chb.refused + chc.refused, 0);
	cr_expect_eq(chb.nlist, cha.nlist);
	cr_expect_eq(chc.nlist, cha.nlist);
	for (size_t i = 0; i < cha.nlist && i < chb.nlist && i < chc.nlist;
	    i++) {
		cr_expect_eq(chb.list[i].op, cha.list[i].op);
		cr_expect_str_eq(chb.list[i].path, cha.list[i].path);
		cr_expect_eq(chc.list[i].op, cha.list[i].op);
		cr_expect_str_eq(chc.list[i].path, cha.list[i].path);
	}
	da = dump_tree(a);
	db = dump_tree(b);
	dc = dump_tree(c);
	cr_expect_str_eq(db, da);
	cr_expect_str_eq(dc, da);
	free(da);
	free(db);
	free(dc);
	workspace_changes_free(&cha);
	workspace_changes_free(&chb);
	workspace_changes_free(&chc);
	agentfs_close(a);
	agentfs_close(b);
	agentfs_close(c);
	agentfs_close(fs);
	perms_free(&p);
}

struct mark_stop {
	struct err *e;			/* shared with materialise */
	int calls;
};

static int
mark_stop_cb(const char *path, enum perm_level level, enum agentfs_kind kind,
    void *arg)
{
	struct mark_stop *ms = arg;

	(void)level;
	(void)kind;
	ms->calls++;
	return err_set(ms->e, -E2BIG, "too many mounts at %s", path);
}

Test(workspace, rules_mark_failure_stops_and_keeps_its_message)
{
	struct agentfs *fs = repo_new();
	struct perms p;
	struct err e;
	struct mark_stop ms = { .e = &e };
	int rc;

	rules_compile(&p, "read-only", NULL, 0);
	rc = workspace_materialise_rules(fs, wsfd, NULL, &p, mark_stop_cb, &ms,
	    &e);
	cr_expect_eq(rc, -E2BIG);
	cr_expect_eq(ms.calls, 1);
	cr_expect_str_eq(e.msg, "too many mounts at /");
	agentfs_close(fs);
	perms_free(&p);
}

/*** Copying a tree (the kept base's template, sandbox/persist.c) ***/

/* Makes path (under root) a file of len bytes of c at off, mode, mtime. */
static void
file_at(const char *rel, off_t size, off_t off, char c, mode_t mode, time_t mtime)
{
	char path[256];
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = mtime } };
	int fd;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(ftruncate(fd, size), 0);
	if (c != 0)
		cr_assert_eq(pwrite(fd, &c, 1, off), 1);
	cr_assert_eq(fchmod(fd, mode), 0);
	cr_assert_eq(futimens(fd, ts), 0);
	close(fd);
}

/* Both stats agree on what a copy keeps. */
static void
expect_same(const char *rel)
{
	char a[256], b[256];
	struct stat sa, sb;

	snprintf(a, sizeof(a), "%s/src/%s", root, rel);
	snprintf(b, sizeof(b), "%s/dst/%s", root, rel);
	cr_assert_eq(lstat(a, &sa), 0, "%s", a);
	cr_assert_eq(lstat(b, &sb), 0, "%s missing from the copy", rel);
	cr_expect_eq(sa.st_mode, sb.st_mode, "%s: mode %o, copy %o", rel, sa.st_mode,
	    sb.st_mode);
	cr_expect_eq(sb.st_nlink, S_ISDIR(sb.st_mode) ? sa.st_nlink : 1u,
	    "%s: its own inode", rel);
	cr_expect_neq(sa.st_ino, sb.st_ino, "%s: shared with the source", rel);
	cr_expect_eq(sa.st_mtim.tv_sec, sb.st_mtim.tv_sec, "%s: mtime", rel);
	cr_expect_eq(sa.st_mtim.tv_nsec, sb.st_mtim.tv_nsec, "%s: mtime ns", rel);
	if (!S_ISDIR(sa.st_mode))
		cr_expect_eq(sa.st_size, sb.st_size, "%s: size", rel);
	if (S_ISREG(sa.st_mode))
		cr_expect_leq(sb.st_blocks, sa.st_blocks + 8, "%s: holes filled in "
		    "(%lld blocks, %lld in the source)", rel, (long long)sb.st_blocks,
		    (long long)sa.st_blocks);
}

Test(workspace, a_copied_tree_is_the_same_tree_on_inodes_of_its_own)
{
	static const char *const mk[] = { "src", "src/d", "src/d/e", "src/ro", "dst" };
	char path[256], target[64];
	struct timespec old[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 1000000000,
	    .tv_nsec = 123456789 } };
	struct err e = { 0 };
	int s, d, fd;
	char byte = 0;

	for (size_t i = 0; i < sizeof(mk) / sizeof(mk[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", root, mk[i]);
		cr_assert_eq(mkdir(path, 0755), 0);
	}
	file_at("src/a", 5, 0, 'a', 0640, 1000000000);
	file_at("src/d/none", 7, 0, 'n', 0, 1100000000);
	file_at("src/d/e/sparse", 4 << 20, 3 << 20, 'z', 0755, 1200000000);
	file_at("src/ro/r", 0, 0, 0, 0444, 1300000000);
	snprintf(path, sizeof(path), "%s/src/link", root);
	cr_assert_eq(symlink("d/none", path), 0);
	cr_assert_eq(utimensat(AT_FDCWD, path, old, AT_SYMLINK_NOFOLLOW), 0);
	snprintf(path, sizeof(path), "%s/src/d/e", root);
	cr_assert_eq(chmod(path, 0700), 0);
	cr_assert_eq(utimensat(AT_FDCWD, path, old, 0), 0);
	snprintf(path, sizeof(path), "%s/src/ro", root);
	cr_assert_eq(chmod(path, 0555), 0);

	snprintf(path, sizeof(path), "%s/src", root);
	s = open(path, O_RDONLY | O_DIRECTORY);
	snprintf(path, sizeof(path), "%s/dst", root);
	d = open(path, O_RDONLY | O_DIRECTORY);
	cr_assert(s >= 0 && d >= 0);
	cr_assert_eq(workspace_copy_tree(s, d, &e), 0, "%s", e.msg);
	expect_same(".");
	expect_same("a");
	expect_same("d");
	expect_same("d/none");
	expect_same("d/e");
	expect_same("d/e/sparse");
	expect_same("ro");
	expect_same("ro/r");
	expect_same("link");
	snprintf(path, sizeof(path), "%s/dst/link", root);
	cr_assert_eq(readlink(path, target, sizeof(target)), 6);
	cr_expect_eq(memcmp(target, "d/none", 6), 0);
	snprintf(path, sizeof(path), "%s/dst/d/e/sparse", root);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &byte, 1, 3 << 20), 1);
	cr_expect_eq(byte, 'z');
	cr_assert_eq(pread(fd, &byte, 1, 1 << 20), 1);
	cr_expect_eq(byte, 0);
	close(fd);
	close(d);

	/* Anything but a folder, a file or a symlink is refused by name. */
	snprintf(path, sizeof(path), "%s/src/d/fifo", root);
	cr_assert_eq(mkfifo(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/dst2", root);
	cr_assert_eq(mkdir(path, 0755), 0);
	d = open(path, O_RDONLY | O_DIRECTORY);
	cr_expect_eq(workspace_copy_tree(s, d, &e), -EPERM);
	cr_expect(strstr(e.msg, "/d/fifo: special entry") != NULL, "%s", e.msg);
	close(d);
	close(s);
}
