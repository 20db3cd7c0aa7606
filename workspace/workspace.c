/*
 * workspace.c - materialise a snapshot into a directory, and apply a
 * capture's changes to one. Capturing a directory back into a snapshot is
 * workspace_capture.c; workspace_int.h is what the two share.
 *
 * Pure file-system code on directory fds: no namespaces, no paths resolved
 * from the root. workspace.h states the threat (the job owns the directory
 * and may race us) and the decisions (specials and bad names refused).
 *
 * DESIGN. Materialise walks the snapshot once into an array, checks every
 * cap on it, then creates entries in walk order (parents first) through a
 * stack of held directory fds, and applies directory modes last, deepest
 * first, so a read-only directory is filled before it becomes read-only.
 *
 * PATH RULES. Materialise takes an optional compiled rule set and relies
 * on agentfs_walk() being depth first (a subtree is one contiguous run after
 * its root). It drops hidden entries while collecting (a hidden directory
 * that can show nothing is skipped as a whole), prunes bare directories
 * that ended up holding nothing visible, and reports level changes once
 * the tree stands.
 *
 * Sections: helpers, materialise, apply.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/err.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "perms.h"
#include "workspace.h"
#include "workspace_int.h"

/*** Helpers ***/

/* Copies lim (or the defaults) into out, lowered to the codec's caps. */
void
workspace__limits_resolve(const struct workspace_limits *lim,
    struct workspace_limits *out)
{
	static const struct workspace_limits def = WORKSPACE_LIMITS_DEFAULT;

	*out = lim ? *lim : def;
	if (out->max_file_bytes > AGENTFS_FILE_MAX)
		out->max_file_bytes = AGENTFS_FILE_MAX;
	if (out->max_depth > AGENTFS_DEPTH_MAX)
		out->max_depth = AGENTFS_DEPTH_MAX;
}

/*
 * True when s[0..n) is valid UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF) without C0 controls, DEL or C1 controls. Names and
 * link targets end up in logs, listings and terminals; a newline or an
 * escape sequence in one is refused rather than carried.
 */
bool
workspace__text_is_clean(const unsigned char *s, size_t n)
{
	for (size_t i = 0, len; i < n; i += len) {
		uint32_t cp;

		if ((len = utf8_decode(s + i, n - i, &cp)) == 0 ||
		    cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return false;	/* not UTF-8, or a C0 control, DEL or C1 */
	}
	return true;
}

bool
workspace_name_is_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > AGENTFS_NAME_MAX || strchr(name, '/') != NULL)
		return false;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	return workspace__text_is_clean((const unsigned char *)name, n);
}

void
workspace_tally_init(struct workspace_tally *t,
    const struct workspace_limits *lim)
{
	memset(t, 0, sizeof(*t));
	workspace__limits_resolve(lim, &t->lim);
}

int
workspace_tally_add(struct workspace_tally *t, const struct agentfs_entry *ent,
    bool content, struct err *e)
{
	t->hit = WORKSPACE_CAP_NONE;
	if (!workspace_name_is_valid(ent->name))
		return workspace__bad_name(e, ent->path, "name");
	if (ent->kind == AGENTFS_SPECIAL)
		return err_set(e, -EPERM, "workspace: %s: %s entries are "
		    "not materialised", ent->path,
		    agentfs_type_name(ent->mode));
	if (t->count >= t->lim.max_files) {
		t->hit = WORKSPACE_CAP_ENTRIES;
		return err_set(e, -EDQUOT, "workspace: %s: over the cap "
		    "of %u entries", ent->path, t->lim.max_files);
	}
	if (workspace_path_depth(ent->path) > t->lim.max_depth) {
		t->hit = WORKSPACE_CAP_DEPTH;
		return err_set(e, -EDQUOT, "workspace: %s: over the depth "
		    "cap of %u", ent->path, t->lim.max_depth);
	}
	if (ent->kind == AGENTFS_FILE) {
		if (ent->size > t->lim.max_file_bytes) {
			t->hit = WORKSPACE_CAP_FILE;
			return err_set(e, -EFBIG, "workspace: %s: over the "
			    "file size cap of %llu bytes", ent->path,
			    (unsigned long long)t->lim.max_file_bytes);
		}
		if (content && ent->size > t->lim.max_bytes - t->bytes) {
			t->hit = WORKSPACE_CAP_BYTES;
			return err_set(e, -EDQUOT, "workspace: %s: over the "
			    "total size cap of %llu bytes", ent->path,
			    (unsigned long long)t->lim.max_bytes);
		}
		if (content)
			t->bytes += ent->size;
	}
	if (ent->kind == AGENTFS_SYMLINK && (ent->target[0] == '\0' ||
	    !workspace__text_is_clean((const unsigned char *)ent->target,
	    strlen(ent->target))))
		return workspace__bad_name(e, ent->path, "symlink target");
	t->count++;
	return 0;
}

/* Writes s into out with every byte outside printable ASCII, and '\',
 * as \xNN, so a hostile name cannot forge or break a log line. */
void
workspace__str_escape(const char *s, char *out, size_t size)
{
	size_t o = 0;

	for (; *s != '\0' && o + 5 < size; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
	}
	out[o] = '\0';
}

int
workspace__bad_name(struct err *e, const char *path, const char *what)
{
	char esc[200];

	workspace__str_escape(path, esc, sizeof(esc));
	return err_set(e, -EILSEQ, "workspace: %s: %s is not valid UTF-8 "
	    "without control characters", esc, what);
}

int
workspace__sys_fail(struct err *e, const char *path, const char *call)
{
	int code = -errno;

	return err_set(e, code, "workspace: %s: %s: %s", path, call,
	    strerror(-code));
}

uint32_t
workspace_path_depth(const char *path)
{
	uint32_t d = 0;

	for (; *path != '\0'; path++)
		d += *path == '/';
	return d;
}

/* True when path is strictly below dir (dlen bytes, "/a/b"). */
bool
workspace__path_is_below(const char *path, const char *dir, size_t dlen)
{
	return strncmp(path, dir, dlen) == 0 && path[dlen] == '/';
}

/* The level of path under p; everything is writable without rules. */
enum perm_level
workspace__level_of(const struct perms *p, const char *path)
{
	return p != NULL ? perms_check(p, path) : PERM_WRITE;
}

/*** Materialise ***/

struct mat_ent {
	char *path;			/* AgentFS path */
	enum agentfs_kind kind;		/* dir, file or symlink */
	uint32_t mode;			/* as materialised (view: 0, 0555) */
	uint64_t size;			/* file size */
	int64_t mtime;			/* seconds */
	char *target;			/* symlink target or NULL */
	enum perm_level level;		/* none only for a bare directory */
};

struct mat {
	struct mat_ent *ents;		/* walk order: parents first */
	size_t n;			/* used */
	size_t cap;			/* allocated */
	struct workspace_tally t;	/* caps, and what counts against them:
					 * entries other than bare dirs, the
					 * bytes of files written */
	size_t nbare;			/* bare (none) directories in ents */
	const struct perms *p;		/* rules or NULL */
	struct err *e;			/* where the walk callback fails */
	size_t skiplen;			/* > 0: skipping the subtree of skip */
	char skip[AGENTFS_PATH_MAX + 1];	/* a hidden dir showing nothing */
};

/*
 * A stack of held directory fds for the current parent: fd[0] is the
 * caller's dirfd (borrowed), fd[i] the i-th component of path, opened from
 * fd[i - 1]. Moving to another parent closes what is not shared and opens
 * the rest one component at a time, O_NOFOLLOW.
 */
struct dirstack {
	int fd[AGENTFS_DEPTH_MAX + 1];		/* held fds, fd[0] borrowed */
	size_t end[AGENTFS_DEPTH_MAX + 1];	/* end of level i in path */
	int depth;				/* levels held past the root */
	char path[AGENTFS_PATH_MAX + 1];	/* current dir, "" is root */
};

static void
dirstack_init(struct dirstack *ds, int rootfd)
{
	ds->fd[0] = rootfd;
	ds->end[0] = 0;
	ds->depth = 0;
	ds->path[0] = '\0';
}

static void
dirstack_release(struct dirstack *ds)
{
	for (; ds->depth > 0; ds->depth--)
		close(ds->fd[ds->depth]);
	ds->path[0] = '\0';
}

/* Makes dir[0..dlen) ("" for the root, else "/a/b") the top of the stack
 * and returns its fd, or -errno with e naming the directory. */
static int
dirstack_enter(struct dirstack *ds, const char *dir, size_t dlen,
    struct err *e)
{
	int keep = 0;
	size_t off;

	while (keep < ds->depth) {
		size_t end = ds->end[keep + 1];

		if (end > dlen || memcmp(ds->path, dir, end) != 0 ||
		    (end < dlen && dir[end] != '/'))
			break;
		keep++;
	}
	for (; ds->depth > keep; ds->depth--)
		close(ds->fd[ds->depth]);
	off = ds->end[keep];
	while (off < dlen) {
		char comp[AGENTFS_NAME_MAX + 1];
		const char *start = dir + off + 1;
		const char *slash = memchr(start, '/', dlen - off - 1);
		size_t clen = slash ? (size_t)(slash - start) :
		    dlen - off - 1;
		int fd;

		if (clen == 0 || clen > AGENTFS_NAME_MAX ||
		    ds->depth >= AGENTFS_DEPTH_MAX)
			return err_set(e, -EINVAL, "workspace: %.*s: bad path",
			    (int)dlen, dir);
		memcpy(comp, start, clen);
		comp[clen] = '\0';
		fd = openat(ds->fd[ds->depth], comp, DIR_FLAGS);
		if (fd < 0) {
			int code = -errno;

			return err_set(e, code, "workspace: %.*s: openat: %s",
			    (int)(off + 1 + clen), dir, strerror(-code));
		}
		memcpy(ds->path + off, dir + off, clen + 1);
		off += clen + 1;
		ds->path[off] = '\0';
		ds->depth++;
		ds->fd[ds->depth] = fd;
		ds->end[ds->depth] = off;
	}
	return ds->fd[ds->depth];
}

/* Collects one snapshot entry and checks it against the caps. Under
 * rules, hidden entries are dropped here; a hidden directory that may hold
 * visible entries is kept as a bare one (level none), counted later. */
static int
mat_collect_cb(const struct agentfs_entry *ent, void *arg)
{
	struct mat *m = arg;
	struct mat_ent *me;
	enum perm_level level = PERM_WRITE;
	int rc;

	if (m->p != NULL) {
		/* The walk is depth first: once out of the skipped subtree,
		 * it is never entered again. */
		if (m->skiplen > 0 && workspace__path_is_below(ent->path,
		    m->skip, m->skiplen))
			return 0;
		m->skiplen = 0;
		level = perms_check(m->p, ent->path);
		if (level == PERM_NONE && (ent->kind != AGENTFS_DIR ||
		    !perms_dir_may_show(m->p, ent->path))) {
			if (ent->kind == AGENTFS_DIR) {
				m->skiplen = strlen(ent->path);
				memcpy(m->skip, ent->path, m->skiplen + 1);
			}
			return 0;
		}
	}
	if (level == PERM_NONE) {
		if (!workspace_name_is_valid(ent->name))
			return workspace__bad_name(m->e, ent->path, "name");
		m->nbare++;
		goto out_add;
	}
	/* A view file is written without content: no bytes. */
	if ((rc = workspace_tally_add(&m->t, ent, level != PERM_VIEW,
	    m->e)) != 0)
		return rc;
out_add:
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->ents = xreallocarray(m->ents, m->cap, sizeof(*m->ents));
	}
	me = &m->ents[m->n++];
	me->path = xstrdup(ent->path);
	me->kind = ent->kind;
	me->mode = ent->mode;
	me->size = ent->size;
	me->mtime = ent->mtime;
	me->target = ent->target ? xstrdup(ent->target) : NULL;
	me->level = level;
	/* What the job may not read or list-and-change is not writable by
	 * mode either; the caller's read-only mounts come on top. */
	if (level == PERM_NONE || (level == PERM_VIEW &&
	    ent->kind == AGENTFS_DIR))
		me->mode = S_IFDIR | 0555;
	else if (level == PERM_VIEW && ent->kind == AGENTFS_FILE)
		me->mode = S_IFREG;
	return 0;
}

/*
 * Drops bare directories that hold nothing visible (perms_dir_may_show()
 * is conservative, and the snapshot may simply hold nothing there), so a
 * hidden name is shown only when something visible needs it as a parent.
 * ents is depth first, so a directory's subtree is the run after it, and
 * it holds something kept iff the next kept entry is in that run. Then
 * checks the entry cap with the bare directories that remain.
 */
static int
mat_prune(struct mat *m)
{
	size_t next = SIZE_MAX, o = 0;
	uint64_t kept = 0;

	for (size_t i = m->n; i-- > 0;) {
		struct mat_ent *me = &m->ents[i];

		if (me->level == PERM_NONE && (next == SIZE_MAX ||
		    !workspace__path_is_below(m->ents[next].path, me->path,
		    strlen(me->path)))) {
			free(me->path);
			free(me->target);
			me->path = NULL;
			continue;
		}
		kept += me->level == PERM_NONE;
		next = i;
	}
	for (size_t i = 0; i < m->n; i++)
		if (m->ents[i].path != NULL)
			m->ents[o++] = m->ents[i];
	m->n = o;
	if (m->t.count + kept > m->t.lim.max_files)
		return err_set(m->e, -EDQUOT, "workspace: over the cap of %u "
		    "entries (with %llu directories kept to reach visible "
		    "ones)", m->t.lim.max_files, (unsigned long long)kept);
	return 0;
}

/* Creates a view file: its size as a hole (no content reaches the disk),
 * mode 0000, its mtime. Same creation flags as mat_file(). */
static int
mat_view_file(int pfd, const char *name, const struct mat_ent *me,
    struct err *e)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = me->mtime },
	};
	int fd, rc = 0;

	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return workspace__sys_fail(e, me->path, "openat");
	if (ftruncate(fd, (off_t)me->size) != 0)
		rc = workspace__sys_fail(e, me->path, "ftruncate");
	else if (fchmod(fd, 0) != 0 || futimens(fd, ts) != 0)
		rc = workspace__sys_fail(e, me->path, "fchmod/futimens");
	close(fd);
	return rc;
}

/* A mark callback failed with rc: keep its own message if it left one in
 * e (it may share our record), else say which path it was. */
static int
mark_fail(struct err *e, int rc, const char *path)
{
	if (e != NULL && e->code != 0)
		return rc;
	return err_set(e, rc, "workspace: %s: mark: %s", path,
	    strerror(rc < 0 ? -rc : rc));
}

/* Calls mark for the root when it is below write, then for every entry
 * whose level differs from its parent's. ents is depth first, so the last
 * directory seen at depth d - 1 is the parent of an entry at depth d. */
static int
mat_marks(struct mat *m, workspace_mark_cb mark, void *arg)
{
	enum perm_level lv[AGENTFS_DEPTH_MAX + 1];
	int rc;

	lv[0] = perms_check(m->p, "/");
	if (lv[0] < PERM_WRITE && (rc = mark("/", lv[0], AGENTFS_DIR,
	    arg)) != 0)
		return mark_fail(m->e, rc, "/");
	for (size_t i = 0; i < m->n; i++) {
		const struct mat_ent *me = &m->ents[i];
		uint32_t d = workspace_path_depth(me->path);

		if (d == 0 || d > AGENTFS_DEPTH_MAX)
			return err_set(m->e, -EINVAL, "workspace: %s: bad "
			    "path", me->path);
		if (me->level != lv[d - 1] &&
		    (rc = mark(me->path, me->level, me->kind, arg)) != 0)
			return mark_fail(m->e, rc, me->path);
		if (me->kind == AGENTFS_DIR)
			lv[d] = me->level;
	}
	return 0;
}

/* What mat_write_dir() needs. */
struct mat_wdir {
	const struct perms *p;
	struct dirstack *ds;
	workspace_mark_cb mark;
	void *arg;
	struct err *e;
	int made;		/* folders made */
};

/* One folder for workspace_make_write_dirs(). */
static int
mat_write_dir(const char *dir, void *arg)
{
	struct mat_wdir *w = arg;
	const char *slash = strrchr(dir, '/');
	enum perm_level pl;
	struct err ignore = { 0 };
	char parent[AGENTFS_PATH_MAX + 1];
	int pfd, rc;

	if (slash == NULL || slash[1] == '\0' || (size_t)(slash - dir) >= sizeof(parent) ||
	    workspace_path_depth(dir) > AGENTFS_DEPTH_MAX ||
	    !workspace_name_is_valid(slash + 1) || perms_check(w->p, dir) != PERM_WRITE)
		return 0;
	memcpy(parent, dir, (size_t)(slash - dir));
	parent[slash - dir] = '\0';
	pl = perms_check(w->p, parent[0] != '\0' ? parent : "/");
	if (pl >= PERM_WRITE || pl == PERM_NONE)
		return 0;
	if ((pfd = dirstack_enter(w->ds, dir, (size_t)(slash - dir), &ignore)) < 0)
		return 0;	/* no such parent folder in the tree */
	if (mkdirat(pfd, slash + 1, 0755) != 0)
		return errno == EEXIST ? 0 : workspace__sys_fail(w->e, dir, "mkdirat");
	if ((rc = w->mark(dir, PERM_WRITE, AGENTFS_DIR, w->arg)) != 0)
		return mark_fail(w->e, rc, dir);
	w->made++;
	return 0;
}

int
workspace_make_write_dirs(int dirfd, const struct perms *p, workspace_mark_cb mark,
    void *arg, struct err *e)
{
	struct dirstack *ds = xcalloc(1, sizeof(*ds));
	struct mat_wdir w = { .p = p, .ds = ds, .mark = mark, .arg = arg, .e = e };
	int rc;

	dirstack_init(ds, dirfd);
	rc = perms_write_dirs(p, mat_write_dir, &w);
	dirstack_release(ds);
	free(ds);
	return rc < 0 ? rc : w.made;
}

/*
 * Writes data[0..len) to the empty file fd, leaving each 4 KiB block of
 * zeros a hole: a snapshot stores zeros in full, but the tree made of it
 * (a job's /workspace, the worker's kept base on tmpfs) then holds only
 * what is not zero. The file reads back the same bytes. 0 or -errno.
 */
static int
write_holes(int fd, const unsigned char *data, size_t len)
{
	static const unsigned char zero[4096];
	size_t off = 0;
	int rc;

	while (off < len) {
		size_t n = len - off < sizeof(zero) ? len - off : sizeof(zero);
		size_t run = 0;

		if (memcmp(data + off, zero, n) == 0) {
			off += n;
			continue;
		}
		/* A run of blocks holding data, written at its offset. */
		while (off + run < len) {
			size_t k = len - off - run < sizeof(zero) ? len - off - run :
			    sizeof(zero);

			if (memcmp(data + off + run, zero, k) == 0)
				break;
			run += k;
		}
		if (lseek(fd, (off_t)off, SEEK_SET) < 0)
			return -errno;
		if ((rc = write_all(fd, data + off, run)) != 0)
			return rc;
		off += run;
	}
	return ftruncate(fd, (off_t)len) != 0 ? -errno : 0;
}

/* Creates one regular file under pfd: O_EXCL so nothing existing is
 * reused, O_NOFOLLOW so a planted symlink is not written through. */
static int
mat_file(struct agentfs *fs, int pfd, const char *name,
    const struct mat_ent *me, struct err *e)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = me->mtime },
	};
	void *data = NULL;
	size_t len = 0;
	int fd = -1;
	int rc;

	if ((rc = agentfs_read(fs, me->path, &data, &len, e)) != 0)
		return rc;
	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = workspace__sys_fail(e, me->path, "openat");
		goto out_free;
	}
	if ((rc = write_holes(fd, data, len)) != 0) {
		errno = -rc;
		rc = workspace__sys_fail(e, me->path, "write");
		goto out_close_fd;
	}
	/* fchmod, not the create mode: the umask must not change what the
	 * snapshot says, and setuid/setgid/sticky never reach the disk. */
	if (fchmod(fd, me->mode & 0777) != 0 || futimens(fd, ts) != 0)
		rc = workspace__sys_fail(e, me->path, "fchmod/futimens");
out_close_fd:
	close(fd);
out_free:
	free(data);
	return rc;
}

/* Sets a directory's permission bits and mtime, through an fd opened
 * O_NOFOLLOW from its parent (fchmodat would follow a symlink). */
static int
mat_dir_finish(struct dirstack *ds, const struct mat_ent *me, struct err *e)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = me->mtime },
	};
	const char *slash = strrchr(me->path, '/');
	int pfd, fd, rc = 0;

	pfd = dirstack_enter(ds, me->path, (size_t)(slash - me->path), e);
	if (pfd < 0)
		return pfd;
	if ((fd = openat(pfd, slash + 1, DIR_FLAGS)) < 0)
		return workspace__sys_fail(e, me->path, "openat");
	if (fchmod(fd, me->mode & 0777) != 0 || futimens(fd, ts) != 0)
		rc = workspace__sys_fail(e, me->path, "fchmod/futimens");
	close(fd);
	return rc;
}

int
workspace_materialise(struct agentfs *fs, int dirfd,
    const struct workspace_limits *lim, struct err *e)
{
	return workspace_materialise_rules(fs, dirfd, lim, NULL, NULL, NULL,
	    e);
}

int
workspace_materialise_rules(struct agentfs *fs, int dirfd,
    const struct workspace_limits *lim, const struct perms *p,
    workspace_mark_cb mark, void *arg, struct err *e)
{
	struct mat m = { .e = e, .p = p };
	struct dirstack *ds = NULL;
	int rc;

	err_clear(e);
	workspace_tally_init(&m.t, lim);
	/* Every cap is checked on the whole snapshot before the first write,
	 * so an oversized snapshot leaves no half tree behind. */
	if ((rc = agentfs_walk(fs, mat_collect_cb, &m, e)) != 0)
		goto out_free;
	if (m.nbare > 0 && (rc = mat_prune(&m)) != 0)
		goto out_free;
	ds = xcalloc(1, sizeof(*ds));
	dirstack_init(ds, dirfd);
	for (size_t i = 0; i < m.n; i++) {
		const struct mat_ent *me = &m.ents[i];
		const char *slash = strrchr(me->path, '/');
		const char *name = slash + 1;
		int pfd;

		pfd = dirstack_enter(ds, me->path,
		    (size_t)(slash - me->path), e);
		if (pfd < 0) {
			rc = pfd;
			goto out_release;
		}
		switch (me->kind) {
		case AGENTFS_DIR:
			/* 0700 until filled; the stored mode comes last. */
			if (mkdirat(pfd, name, 0700) != 0)
				rc = workspace__sys_fail(e, me->path,
				    "mkdirat");
			break;
		case AGENTFS_FILE:
			if (me->level == PERM_VIEW)
				rc = mat_view_file(pfd, name, me, e);
			else
				rc = mat_file(fs, pfd, name, me, e);
			break;
		case AGENTFS_SYMLINK:
			if (symlinkat(me->target, pfd, name) != 0)
				rc = workspace__sys_fail(e, me->path,
				    "symlinkat");
			break;
		case AGENTFS_SPECIAL:
			rc = err_set(e, -EPERM, "workspace: %s: special entry",
			    me->path);
			break;
		}
		if (rc != 0)
			goto out_release;
	}
	/* Deepest first: a parent's mtime is set after its children's
	 * fchmod/futimens, and a 0555 parent after it was filled. */
	for (size_t i = m.n; i-- > 0;) {
		if (m.ents[i].kind != AGENTFS_DIR)
			continue;
		if ((rc = mat_dir_finish(ds, &m.ents[i], e)) != 0)
			goto out_release;
	}
	/* Only a tree that stands is reported: the caller mounts on it. */
	if (p != NULL && mark != NULL)
		rc = mat_marks(&m, mark, arg);
out_release:
	dirstack_release(ds);
	free(ds);
out_free:
	for (size_t i = 0; i < m.n; i++) {
		free(m.ents[i].path);
		free(m.ents[i].target);
	}
	free(m.ents);
	return rc;
}

/*** Copy ***/

/* Copies the regular file name of sdir (st its stat) into ddir: the data
 * with its holes kept (SEEK_DATA/SEEK_HOLE; pread/pwrite, which on tmpfs
 * here cost a third of copy_file_range's splice), then the permission
 * bits and mtime. */
static int
copy_file(int sdir, int ddir, const char *name, const struct stat *st,
    const char *path, struct err *e)
{
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, st->st_mtim };
	off_t off = 0;
	int in, out, rc = 0;

	if ((in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)) < 0)
		return workspace__sys_fail(e, path, "openat");
	out = openat(ddir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_NOCTTY | O_CLOEXEC, 0600);
	if (out < 0) {
		rc = workspace__sys_fail(e, path, "openat");
		goto out_in;
	}
	while (rc == 0 && off < st->st_size) {
		off_t data = lseek(in, off, SEEK_DATA), end, a;

		if (data < 0 && errno == ENXIO)
			break;		/* a hole to the end */
		if (data < 0 || (end = lseek(in, data, SEEK_HOLE)) < 0) {
			rc = workspace__sys_fail(e, path, "lseek");
			break;
		}
		for (a = data; rc == 0 && a < end;) {
			static unsigned char buf[256 * 1024];
			size_t want = (size_t)(end - a) < sizeof(buf) ? (size_t)(end - a) :
			    sizeof(buf);
			ssize_t n = pread(in, buf, want, a);

			if (n < 0)
				rc = workspace__sys_fail(e, path, "pread");
			else if (n == 0)
				rc = err_set(e, -EIO, "workspace: %s: shorter than its size",
				    path);
			else if (pwrite(out, buf, (size_t)n, a) != n)
				rc = workspace__sys_fail(e, path, "pwrite");
			else
				a += n;
		}
		off = end;
	}
	if (rc == 0 && (ftruncate(out, st->st_size) != 0 ||
	    fchmod(out, st->st_mode & 0777) != 0 || futimens(out, ts) != 0))
		rc = workspace__sys_fail(e, path, "ftruncate/fchmod/futimens");
	close(out);
out_in:
	close(in);
	return rc;
}

/* Copies what directory sfd holds into the empty directory dfd, depth
 * levels below the top (bounded: a tree materialise made). */
static int
copy_dir(int sfd, int dfd, const char *path, unsigned depth, struct err *e)
{
	struct dirent *de;
	DIR *d;
	int fd, rc = 0;

	if (depth > AGENTFS_DEPTH_MAX)
		return err_set(e, -ELOOP, "workspace: %s: nested too deep", path);
	if ((fd = openat(sfd, ".", DIR_FLAGS)) < 0)
		return workspace__sys_fail(e, path, "openat");
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return workspace__sys_fail(e, path, "fdopendir");
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		char sub[AGENTFS_PATH_MAX + 2];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", strcmp(path, "/") == 0 ? "" : path,
		    de->d_name);
		if (fstatat(sfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = workspace__sys_fail(e, sub, "fstatat");
		} else if (S_ISREG(st.st_mode)) {
			rc = copy_file(sfd, dfd, de->d_name, &st, sub, e);
		} else if (S_ISLNK(st.st_mode)) {
			char target[AGENTFS_PATH_MAX + 1];
			ssize_t n = readlinkat(sfd, de->d_name, target, sizeof(target) - 1);

			if (n < 0 || (size_t)n >= sizeof(target) - 1)
				rc = workspace__sys_fail(e, sub, "readlinkat");
			else {
				struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
				    st.st_mtim };

				target[n] = '\0';
				if (symlinkat(target, dfd, de->d_name) != 0)
					rc = workspace__sys_fail(e, sub, "symlinkat");
				else if (utimensat(dfd, de->d_name, ts,
				    AT_SYMLINK_NOFOLLOW) != 0)
					rc = workspace__sys_fail(e, sub, "utimensat");
			}
		} else if (S_ISDIR(st.st_mode)) {
			struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, st.st_mtim };
			int s2 = -1, d2 = -1;

			if (mkdirat(dfd, de->d_name, 0700) != 0)
				rc = workspace__sys_fail(e, sub, "mkdirat");
			else if ((s2 = openat(sfd, de->d_name, DIR_FLAGS)) < 0 ||
			    (d2 = openat(dfd, de->d_name, DIR_FLAGS)) < 0)
				rc = workspace__sys_fail(e, sub, "openat");
			else if ((rc = copy_dir(s2, d2, sub, depth + 1, e)) == 0 &&
			    (fchmod(d2, st.st_mode & 0777) != 0 || futimens(d2, ts) != 0))
				rc = workspace__sys_fail(e, sub, "fchmod/futimens");
			if (s2 >= 0)
				close(s2);
			if (d2 >= 0)
				close(d2);
		} else {
			rc = err_set(e, -EPERM, "workspace: %s: special entry", sub);
		}
	}
	if (rc == 0 && errno != 0)
		rc = workspace__sys_fail(e, path, "readdir");
	closedir(d);
	return rc;
}

int
workspace_copy_tree(int srcfd, int dstfd, struct err *e)
{
	struct stat st;
	int rc;

	err_clear(e);
	if ((rc = copy_dir(srcfd, dstfd, "/", 0, e)) != 0)
		return rc;
	if (fstat(srcfd, &st) != 0)
		return workspace__sys_fail(e, "/", "fstat");
	{
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, st.st_mtim };

		if (fchmod(dstfd, st.st_mode & 0777) != 0 || futimens(dstfd, ts) != 0)
			return workspace__sys_fail(e, "/", "fchmod/futimens");
	}
	return 0;
}

/*** Apply ***/

/* Removes name of pfd, a whole tree if it is a directory; absent is fine.
 * Nothing is followed: a symlink is removed, never entered. Returns 1 when
 * a directory went, else 0, or -errno. */
static int
tree_remove_at(int pfd, const char *name, const char *path, struct err *e)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	int fd, rc = 0;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : workspace__sys_fail(e, path,
		    "fstatat");
	if (!S_ISDIR(st.st_mode))
		return unlinkat(pfd, name, 0) == 0 || errno == ENOENT ? 0 :
		    workspace__sys_fail(e, path, "unlinkat");
	if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
		return workspace__sys_fail(e, path, "openat");
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return workspace__sys_fail(e, path, "fdopendir");
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
		    (rc = tree_remove_at(dirfd(d), de->d_name, path, e)) > 0)
			rc = 0;
	}
	if (rc == 0 && errno != 0)
		rc = workspace__sys_fail(e, path, "readdir");
	closedir(d);
	if (rc == 0 && unlinkat(pfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = workspace__sys_fail(e, path, "unlinkat");
	return rc == 0 ? 1 : rc;
}

int
workspace_remove_at(int dirfd, const char *name, struct err *e)
{
	int rc;

	err_clear(e);
	rc = tree_remove_at(dirfd, name, name, e);
	return rc < 0 ? rc : 0;
}

/* Writes fs's entry at path (a file, directory or symlink) as name of pfd. */
static int
apply_create(struct agentfs *fs, int pfd, const char *name, const char *path,
    struct err *e)
{
	struct agentfs_entry ent;
	struct mat_ent me = { .path = (char *)(uintptr_t)path };
	char *target = NULL;
	int rc;

	if ((rc = agentfs_stat(fs, path, &ent, &target, e)) != 0)
		return rc;
	me.mode = ent.mode;
	me.mtime = ent.mtime;
	switch (ent.kind) {
	case AGENTFS_DIR: {
		int fd;

		/* fchmod, not the create mode: the umask must not change it. */
		if (mkdirat(pfd, name, 0700) != 0)
			rc = workspace__sys_fail(e, path, "mkdirat");
		else if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
			rc = workspace__sys_fail(e, path, "openat");
		else {
			if (fchmod(fd, ent.mode & 0777) != 0)
				rc = workspace__sys_fail(e, path, "fchmod");
			close(fd);
		}
		break;
	}
	case AGENTFS_FILE:
		rc = mat_file(fs, pfd, name, &me, e);
		break;
	case AGENTFS_SYMLINK:
		if (symlinkat(target, pfd, name) != 0)
			rc = workspace__sys_fail(e, path, "symlinkat");
		break;
	default:
		rc = err_set(e, -EPERM, "workspace: %s: special entry", path);
		break;
	}
	free(target);
	return rc;
}

int
workspace_apply(struct agentfs *fs, int dirfd, const struct workspace_changes *ch,
    struct err *e)
{
	struct dirstack *ds = xcalloc(1, sizeof(*ds));
	int rc = 0;

	err_clear(e);
	dirstack_init(ds, dirfd);
	for (size_t i = 0; rc == 0 && i < ch->nall; i++) {
		const char *path = ch->all[i].path;
		const char *slash = strrchr(path, '/');
		int pfd;

		if (slash == NULL || slash[1] == '\0') {
			rc = err_set(e, -EINVAL, "workspace: %s: bad path", path);
			break;
		}
		pfd = dirstack_enter(ds, path, (size_t)(slash - path), e);
		if (pfd == -ENOENT && ch->all[i].op == WORKSPACE_REMOVED) {
			err_clear(e);
			continue;	/* its directory went first */
		}
		if (pfd < 0) {
			rc = pfd;
			break;
		}
		if ((rc = tree_remove_at(pfd, slash + 1, path, e)) < 0)
			break;
		/* A directory that went may be one the stack holds. */
		if (rc == 1) {
			dirstack_release(ds);
			pfd = dirstack_enter(ds, path, (size_t)(slash - path), e);
		}
		rc = 0;
		if (ch->all[i].op == WORKSPACE_REMOVED)
			continue;
		if (pfd < 0)
			rc = pfd;
		else
			rc = apply_create(fs, pfd, slash + 1, path, e);
	}
	dirstack_release(ds);
	free(ds);
	return rc;
}

void
workspace_changes_free(struct workspace_changes *ch)
{
	if (ch == NULL)
		return;
	for (size_t i = 0; i < ch->nall; i++)
		free(ch->all[i].path);
	free(ch->all);
	for (size_t i = 0; i < ch->nlist; i++)
		free(ch->list[i].path);
	free(ch->list);
	for (size_t i = 0; i < ch->nrefused_list; i++)
		free(ch->refused_list[i]);
	free(ch->refused_list);
	memset(ch, 0, sizeof(*ch));
}
