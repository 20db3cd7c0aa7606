/*
 * workspace_test.c - unit tests for store/workspace.c: a snapshot
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

#include "../store/agentfs.h"
#include "../store/workspace.h"

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
