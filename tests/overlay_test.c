/*
 * overlay_test.c - unit tests for the overlay path of workspace/workspace.c:
 * a capture that reads only an overlay's upper layer, and the update of
 * the lower tree it leaves behind (workspace_capture_overlay(),
 * workspace_apply()).
 *
 * Each scenario runs in a forked child that takes its own user and mount
 * namespaces (as a sandbox's init does, so the overlay is mounted with
 * user xattrs, as in a job) and a private tmpfs. The same edits are made
 * to a plain tree materialised from the same snapshot; the overlay capture
 * must produce exactly what the proven full capture of that plain tree
 * produces, and after workspace_apply() a full capture of the lower tree
 * against the new snapshot must find nothing to change. Without user
 * namespaces or overlayfs the test is skipped, saying so.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"

#define SKIP_EXIT 77

/*** In the child: failures print and exit ***/

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(1);
}

#define CHECK(cond, ...) do { if (!(cond)) die(__VA_ARGS__); } while (0)

static void
write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		die("write %s: %s", path, strerror(errno));
	close(fd);
}

static void
put(struct agentfs *fs, const char *path, const char *text, mode_t mode)
{
	struct err e;

	CHECK(agentfs_write(fs, path, text, strlen(text), mode, &e) == 0, "%s", e.msg);
}

static void
mkd(struct agentfs *fs, const char *path, mode_t mode)
{
	struct err e;

	CHECK(agentfs_mkdir(fs, path, mode, &e) == 0, "%s", e.msg);
}

/* Files, directories, links, a locked subtree, a hidden and a view file. */
static struct agentfs *
sample_new(void)
{
	struct agentfs *fs = NULL;
	struct err e;

	CHECK(agentfs_new(&fs, &e) == 0, "%s", e.msg);
	mkd(fs, "/src", 0755);
	mkd(fs, "/src/lib", 0755);
	mkd(fs, "/docs", 0755);
	mkd(fs, "/gone", 0755);
	mkd(fs, "/kind", 0755);
	mkd(fs, "/dir2link", 0755);
	mkd(fs, "/locked", 0755);
	mkd(fs, "/quiet", 0755);
	mkd(fs, "/untouched", 0755);
	mkd(fs, "/untouched/deep", 0700);
	put(fs, "/untouched/deep/file", "as it was\n", 0600);
	put(fs, "/untouched/deep/hidden", "never shown\n", 0600);
	CHECK(agentfs_symlink(fs, "../a.txt", "/untouched/up", &e) == 0, "%s", e.msg);
	put(fs, "/a.txt", "alpha\n", 0644);
	put(fs, "/src/main.c", "int main(void) { return 0; }\n", 0644);
	put(fs, "/src/lib/x.h", "#define X 1\n", 0644);
	put(fs, "/docs/readme", "read me\n", 0644);
	put(fs, "/gone/one", "1\n", 0644);
	put(fs, "/gone/two", "2\n", 0644);
	put(fs, "/kind/f", "a file\n", 0644);
	put(fs, "/dir2link/child", "c\n", 0644);
	put(fs, "/run.sh", "#!/bin/sh\n", 0755);
	put(fs, "/locked/keep", "keep\n", 0644);
	put(fs, "/quiet/secret", "hidden\n", 0644);
	put(fs, "/quiet/shown", "shown\n", 0644);
	put(fs, "/quiet/also", "hidden, untouched\n", 0644);
	put(fs, "/seen.bin", "0123456789", 0644);
	CHECK(agentfs_symlink(fs, "a.txt", "/link", &e) == 0, "%s", e.msg);
	return fs;
}

/* The same edits, made through dirfd of either tree. */
static void
edit(const char *dir)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "cd '%s' && set -e; "
	    "printf 'changed\\n' > a.txt; "
	    "printf '/* more */\\n' >> src/main.c; "
	    "mkdir -p new/dir; printf 'new\\n' > new/dir/f.txt; "
	    "rm docs/readme; "
	    "rm -r gone; mkdir gone; printf '3\\n' > gone/three; "
	    "rm kind/f; mkdir kind/f; printf 'inner\\n' > kind/f/inside; "
	    "rm -r dir2link; ln -s src dir2link; "
	    "chmod 0700 run.sh; "
	    "rm link; ln -s src/main.c link; "
	    "printf 'x\\n' > locked/keep; printf 'y\\n' > locked/added; "
	    "printf 'peek\\n' > quiet/secret; "
	    "chmod 0644 seen.bin; printf 'z' >> seen.bin; "
	    "touch src/lib/x.h", dir);
	CHECK(system(cmd) == 0, "edit %s failed", dir);
}

static void
rules(struct perms *p)
{
	static const struct perm_rule r[] = {
		{ "/locked/**", PERM_READ },
		{ "/quiet/secret", PERM_NONE },
		{ "/quiet/also", PERM_NONE },
		{ "/untouched/deep/hidden", PERM_NONE },
		{ "/seen.bin", PERM_VIEW },
	};
	struct err e;

	CHECK(perms_compile(p, r, sizeof(r) / sizeof(r[0]), "full-access", &e) == 0,
	    "%s", e.msg);
}

static struct agentfs *
copy_of(struct agentfs *fs)
{
	struct agentfs *out = NULL;
	struct err e;
	void *blob = NULL;
	size_t len = 0;

	CHECK(agentfs_to_blob(fs, &blob, &len, &e) == 0, "%s", e.msg);
	CHECK(agentfs_open_trusted(blob, len, &out, &e) == 0, "%s", e.msg);
	free(blob);
	return out;
}

struct dump {
	FILE *f;
	struct agentfs *fs;
};

static int
dump_cb(const struct agentfs_entry *ent, void *arg)
{
	struct dump *d = arg;
	struct err e;

	fprintf(d->f, "%s %d %04o", ent->path, (int)ent->kind, ent->mode & 07777);
	if (ent->kind == AGENTFS_SYMLINK)
		fprintf(d->f, " -> %s", ent->target);
	if (ent->kind == AGENTFS_FILE) {
		void *data = NULL;
		size_t len = 0;

		CHECK(agentfs_read(d->fs, ent->path, &data, &len, &e) == 0, "%s", e.msg);
		fprintf(d->f, " %zu:%.*s", len, (int)len, (char *)data);
		free(data);
	}
	fputc('\n', d->f);
	return 0;
}

static char *
dump(struct agentfs *fs)
{
	struct dump d = { .fs = fs };
	char *buf = NULL;
	size_t len = 0;
	struct err e;

	d.f = open_memstream(&buf, &len);
	CHECK(agentfs_walk(fs, dump_cb, &d, &e) == 0, "%s", e.msg);
	fclose(d.f);
	return buf;
}

static int
open_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	return fd;
}

/* Own user (as the sandbox's init) and mount namespaces; 0 or skip. */
static int
enter_namespaces(void)
{
	char map[64];
	uid_t uid = getuid();
	gid_t gid = getgid();

	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		fprintf(stderr, "skipped: user and mount namespaces: %s\n", strerror(errno));
		return -1;
	}
	write_text("/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	write_text("/proc/self/uid_map", map);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	write_text("/proc/self/gid_map", map);
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0, "private /: %s",
	    strerror(errno));
	return 0;
}

/*
 * The least max_files a capture of fd (an overlay's upper layer: overlay
 * 1, or 2 with base's entries and levels read ahead; or a plain tree: 0)
 * against base passes under; a cap one lower must fail with -EDQUOT.
 * Entries the upper layer lacks count as a listing of the merged tree
 * counts them.
 */
static unsigned
least_cap(int fd, struct agentfs *base, const struct perms *p,
    int overlay)
{
	for (unsigned cap = 1; cap < 1000; cap++) {
		struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
		struct workspace_changes ch = { 0 };
		struct agentfs *out = NULL;
		struct err e;
		int rc;

		lim.max_files = cap;
		if (overlay == 2) {
			struct workspace_ahead *a = NULL;

			out = copy_of(base);
			CHECK(workspace_capture_ahead(out, p, &a, &e) == 0, "%s", e.msg);
			rc = workspace_capture_overlay_ahead(fd, out, a, &lim, p,
			    &ch, &e);
		} else if (overlay) {
			out = copy_of(base);
			rc = workspace_capture_overlay(fd, out, &lim, p, &ch, &e);
		} else
			rc = workspace_capture_rules(fd, base, &lim, p, &out, &ch, &e);
		workspace_changes_free(&ch);
		agentfs_close(out);
		if (rc == 0)
			return cap;
		CHECK(rc == -EDQUOT, "capture under a cap of %u: %s", cap, e.msg);
	}
	die("no cap under 1000 passes");
}

static void
scenario(const char *root)
{
	struct workspace_changes ch_ovl = { 0 }, ch_plain = { 0 }, ch_after = { 0 };
	struct workspace_changes ch_ahead = { 0 };
	struct agentfs *base, *ovl, *plain = NULL, *after = NULL, *ahead;
	struct workspace_ahead *wa = NULL;
	struct perms p = { 0 };
	char path[4][256], opts[1024];
	const char *sub[] = { "lower", "plain", "ovl", "merged" };
	int lower, plainfd, upper;
	struct err e;
	char *a, *b;

	CHECK(mount("tmpfs", root, "tmpfs", 0, "size=64m") == 0, "tmpfs: %s", strerror(errno));
	for (int i = 0; i < 4; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/%s", root, sub[i]);
		CHECK(mkdir(path[i], 0755) == 0, "mkdir %s", path[i]);
	}
	snprintf(opts, sizeof(opts), "%s/u", path[2]);
	CHECK(mkdir(opts, 0755) == 0, "mkdir u");
	snprintf(opts, sizeof(opts), "%s/w", path[2]);
	CHECK(mkdir(opts, 0755) == 0, "mkdir w");

	base = sample_new();
	rules(&p);
	lower = open_dir(path[0]);
	plainfd = open_dir(path[1]);
	CHECK(workspace_materialise_rules(base, lower, NULL, &p, NULL, NULL, &e) == 0,
	    "%s", e.msg);
	CHECK(workspace_materialise_rules(base, plainfd, NULL, &p, NULL, NULL, &e) == 0,
	    "%s", e.msg);
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/u,workdir=%s/w,userxattr",
	    path[0], path[2], path[2]);
	if (mount("overlay", path[3], "overlay", 0, opts) != 0) {
		fprintf(stderr, "skipped: overlayfs in a user namespace: %s\n",
		    strerror(errno));
		_exit(SKIP_EXIT);
	}
	edit(path[3]);
	edit(path[1]);

	/* The overlay capture, in place on a copy of base... */
	snprintf(opts, sizeof(opts), "%s/u", path[2]);
	upper = open_dir(opts);
	ovl = copy_of(base);
	CHECK(workspace_capture_overlay(upper, ovl, NULL, &p, &ch_ovl, &e) == 0,
	    "overlay capture: %s", e.msg);
	/* ...is the full capture of the same edits on a plain tree. */
	CHECK(workspace_capture_rules(plainfd, base, NULL, &p, &plain, &ch_plain, &e) == 0,
	    "plain capture: %s", e.msg);
	a = dump(ovl);
	b = dump(plain);
	CHECK(strcmp(a, b) == 0, "overlay capture:\n%s\nplain capture:\n%s", a, b);
	CHECK(ch_ovl.added == ch_plain.added && ch_ovl.modified == ch_plain.modified &&
	    ch_ovl.removed == ch_plain.removed && ch_ovl.refused == ch_plain.refused,
	    "changes A%llu M%llu D%llu R%llu, plain A%llu M%llu D%llu R%llu",
	    (unsigned long long)ch_ovl.added, (unsigned long long)ch_ovl.modified,
	    (unsigned long long)ch_ovl.removed, (unsigned long long)ch_ovl.refused,
	    (unsigned long long)ch_plain.added, (unsigned long long)ch_plain.modified,
	    (unsigned long long)ch_plain.removed, (unsigned long long)ch_plain.refused);
	CHECK(ch_ovl.added > 0 && ch_ovl.modified > 0 && ch_ovl.removed > 0 &&
	    ch_ovl.refused >= 3, "the edits should add, modify, remove and be refused");
	CHECK(ch_ovl.nall == ch_ovl.added + ch_ovl.modified + ch_ovl.removed,
	    "all lists %zu changes", ch_ovl.nall);
	free(a);
	free(b);

	/* The same capture with base's entries and their levels read ahead
	 * (as while a job runs) is the same snapshot. */
	ahead = copy_of(base);
	CHECK(workspace_capture_ahead(ahead, &p, &wa, &e) == 0, "%s", e.msg);
	CHECK(workspace_capture_overlay_ahead(upper, ahead, wa, NULL, &p,
	    &ch_ahead, &e) == 0, "overlay capture read ahead: %s", e.msg);
	a = dump(ahead);
	b = dump(plain);
	CHECK(strcmp(a, b) == 0, "overlay capture read ahead:\n%s\nplain capture:\n%s",
	    a, b);
	CHECK(ch_ahead.added == ch_plain.added && ch_ahead.modified == ch_plain.modified &&
	    ch_ahead.removed == ch_plain.removed && ch_ahead.refused == ch_plain.refused,
	    "read ahead: other changes");
	free(a);
	free(b);

	/* All count entries the same: the least cap each passes under. */
	CHECK(least_cap(upper, base, &p, 1) == least_cap(plainfd, base,
	    &p, 0), "the overlay capture counts %u entries, the plain one %u",
	    least_cap(upper, base, &p, 1),
	    least_cap(plainfd, base, &p, 0));
	CHECK(least_cap(upper, base, &p, 2) == least_cap(plainfd, base,
	    &p, 0), "the overlay capture read ahead counts %u entries, the plain one %u",
	    least_cap(upper, base, &p, 2),
	    least_cap(plainfd, base, &p, 0));

	/* The lower tree brought up to date is the new snapshot, under p. */
	CHECK(umount2(path[3], MNT_DETACH) == 0, "umount: %s", strerror(errno));
	CHECK(workspace_apply(ovl, lower, &ch_ovl, &e) == 0, "apply: %s", e.msg);
	CHECK(workspace_capture_rules(lower, ovl, NULL, &p, &after, &ch_after, &e) == 0,
	    "capture after apply: %s", e.msg);
	CHECK(ch_after.added + ch_after.modified + ch_after.removed + ch_after.refused == 0,
	    "after apply the lower tree differs: A%llu M%llu D%llu R%llu, first %s",
	    (unsigned long long)ch_after.added, (unsigned long long)ch_after.modified,
	    (unsigned long long)ch_after.removed, (unsigned long long)ch_after.refused,
	    ch_after.nlist ? ch_after.list[0].path :
	    ch_after.nrefused_list ? ch_after.refused_list[0] : "-");

	workspace_changes_free(&ch_ovl);
	workspace_changes_free(&ch_plain);
	workspace_changes_free(&ch_after);
	workspace_changes_free(&ch_ahead);
	agentfs_close(ahead);
	agentfs_close(after);
	agentfs_close(plain);
	agentfs_close(ovl);
	agentfs_close(base);
	perms_free(&p);
	close(upper);
	close(lower);
	close(plainfd);
}

/*** Tests ***/

/* Runs fn in a child with its own namespaces; asserts it passed. */
static void
run_child(void (*fn)(const char *root))
{
	char root[] = "/tmp/sandq-overlay-XXXXXX";
	int status;
	pid_t pid;

	cr_assert_not_null(mkdtemp(root));
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (enter_namespaces() != 0)
			_exit(SKIP_EXIT);
		fn(root);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	rmdir(root);
	if (WIFEXITED(status) && WEXITSTATUS(status) == SKIP_EXIT)
		cr_skip_test("needs user namespaces and overlayfs (see stderr)");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the scenario failed (its message is above)");
}

Test(overlay, capture_of_the_upper_layer_equals_a_full_capture_and_apply_catches_up)
{
	run_child(scenario);
}
