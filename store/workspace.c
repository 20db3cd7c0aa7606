/*
 * workspace.c - materialise a snapshot into a directory, capture it back.
 *
 * Pure file-system code on directory fds: no namespaces, no paths resolved
 * from the root. workspace.h states the threat (the job owns the directory
 * and may race us) and the decisions (specials and bad names refused).
 *
 * DESIGN. Materialise walks the snapshot once into an array, checks every
 * cap on it, then creates entries in walk order (parents first) through a
 * stack of held directory fds, and applies directory modes last, deepest
 * first, so a read-only directory is filled before it becomes read-only.
 * Capture copies base, sorts base's entries with '/' ordered before every
 * other byte (so a subtree is one contiguous run that follows its root),
 * then walks the directory depth first, one held fd per level, rewriting
 * in the copy only what differs and marking what it saw; what is left
 * unmarked is removed, run reversed so children go before parents.
 *
 * PATH RULES. Both directions take an optional compiled rule set. Both rely
 * on agentfs_walk() being depth first (a subtree is one contiguous run after
 * its root), as path_cmp order also is. Materialise drops hidden entries
 * while collecting (a hidden directory that can show nothing is skipped as
 * a whole), prunes bare directories that ended up holding nothing visible,
 * and reports level changes once the tree stands. Capture decides every
 * path's level before touching it: a writable path goes through the code
 * above, a locked one (below write) only compares what is on disk with base
 * to report a refusal and never writes to the copy, and the removal pass
 * keeps a missing path when it or something below it is locked.
 *
 * Sections: helpers, materialise, capture.
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

/* Directories are walked through these: never a symlink, never a tty. */
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/*** Helpers ***/

/* Copies lim (or the defaults) into out, lowered to the codec's caps. */
static void
limits_resolve(const struct workspace_limits *lim,
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
static bool
text_is_clean(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		uint32_t cp;
		size_t more;

		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f)
				return false;
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			cp = c & 0x1f;
			more = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			cp = c & 0x0f;
			more = 2;
		} else if (c >= 0xf0 && c <= 0xf4) {
			cp = c & 0x07;
			more = 3;
		} else
			return false;
		if (n - i <= more)
			return false;
		for (size_t k = 1; k <= more; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((more == 1 && cp <= 0x9f) ||	/* C1 controls */
		    (more == 2 && (cp < 0x800 ||
		    (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
			return false;
		i += more + 1;
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
	return text_is_clean((const unsigned char *)name, n);
}

/* Writes s into out with every byte outside printable ASCII, and '\',
 * as \xNN, so a hostile name cannot forge or break a log line. */
static void
str_escape(const char *s, char *out, size_t size)
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

static int
bad_name(struct err *e, const char *path, const char *what)
{
	char esc[200];

	str_escape(path, esc, sizeof(esc));
	return err_set(e, -EILSEQ, "workspace: %s: %s is not valid UTF-8 "
	    "without control characters", esc, what);
}

static int
sys_fail(struct err *e, const char *path, const char *call)
{
	int code = -errno;

	return err_set(e, code, "workspace: %s: %s: %s", path, call,
	    strerror(-code));
}

/* Nesting of an AgentFS path: the number of '/' in it. */
static uint32_t
path_depth(const char *path)
{
	uint32_t d = 0;

	for (; *path != '\0'; path++)
		d += *path == '/';
	return d;
}

/* True when path is strictly below dir (dlen bytes, "/a/b"). */
static bool
path_is_below(const char *path, const char *dir, size_t dlen)
{
	return strncmp(path, dir, dlen) == 0 && path[dlen] == '/';
}

/* The level of path under p; everything is writable without rules. */
static enum perm_level
level_of(const struct perms *p, const char *path)
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
	uint64_t bytes;			/* sum of file sizes written */
	uint32_t count;			/* entries other than bare dirs */
	size_t nbare;			/* bare (none) directories in ents */
	const struct perms *p;		/* rules or NULL */
	struct workspace_limits lim;	/* resolved caps */
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

	if (m->p != NULL) {
		/* The walk is depth first: once out of the skipped subtree,
		 * it is never entered again. */
		if (m->skiplen > 0 && path_is_below(ent->path, m->skip,
		    m->skiplen))
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
	if (!workspace_name_is_valid(ent->name))
		return bad_name(m->e, ent->path, "name");
	if (level == PERM_NONE) {
		m->nbare++;
		goto out_add;
	}
	if (ent->kind == AGENTFS_SPECIAL)
		return err_set(m->e, -EPERM, "workspace: %s: %s entries are "
		    "not materialised", ent->path,
		    agentfs_type_name(ent->mode));
	if (m->count >= m->lim.max_files)
		return err_set(m->e, -EDQUOT, "workspace: %s: over the cap "
		    "of %u entries", ent->path, m->lim.max_files);
	if (path_depth(ent->path) > m->lim.max_depth)
		return err_set(m->e, -EDQUOT, "workspace: %s: over the depth "
		    "cap of %u", ent->path, m->lim.max_depth);
	if (ent->kind == AGENTFS_FILE) {
		if (ent->size > m->lim.max_file_bytes)
			return err_set(m->e, -EFBIG, "workspace: %s: over the "
			    "file size cap of %llu bytes", ent->path,
			    (unsigned long long)m->lim.max_file_bytes);
		/* A view file is written without content: no bytes. */
		if (level != PERM_VIEW &&
		    ent->size > m->lim.max_bytes - m->bytes)
			return err_set(m->e, -EDQUOT, "workspace: %s: over the "
			    "total size cap of %llu bytes", ent->path,
			    (unsigned long long)m->lim.max_bytes);
		if (level != PERM_VIEW)
			m->bytes += ent->size;
	}
	if (ent->kind == AGENTFS_SYMLINK && (ent->target[0] == '\0' ||
	    !text_is_clean((const unsigned char *)ent->target,
	    strlen(ent->target))))
		return bad_name(m->e, ent->path, "symlink target");
	m->count++;
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
		    !path_is_below(m->ents[next].path, me->path,
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
	if (m->count + kept > m->lim.max_files)
		return err_set(m->e, -EDQUOT, "workspace: over the cap of %u "
		    "entries (with %llu directories kept to reach visible "
		    "ones)", m->lim.max_files, (unsigned long long)kept);
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
		return sys_fail(e, me->path, "openat");
	if (ftruncate(fd, (off_t)me->size) != 0)
		rc = sys_fail(e, me->path, "ftruncate");
	else if (fchmod(fd, 0) != 0 || futimens(fd, ts) != 0)
		rc = sys_fail(e, me->path, "fchmod/futimens");
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
		uint32_t d = path_depth(me->path);

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
		rc = sys_fail(e, me->path, "openat");
		goto out_free;
	}
	if ((rc = write_all(fd, data, len)) != 0) {
		errno = -rc;
		rc = sys_fail(e, me->path, "write");
		goto out_close_fd;
	}
	/* fchmod, not the create mode: the umask must not change what the
	 * snapshot says, and setuid/setgid/sticky never reach the disk. */
	if (fchmod(fd, me->mode & 0777) != 0 || futimens(fd, ts) != 0)
		rc = sys_fail(e, me->path, "fchmod/futimens");
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
		return sys_fail(e, me->path, "openat");
	if (fchmod(fd, me->mode & 0777) != 0 || futimens(fd, ts) != 0)
		rc = sys_fail(e, me->path, "fchmod/futimens");
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
	limits_resolve(lim, &m.lim);
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
				rc = sys_fail(e, me->path, "mkdirat");
			break;
		case AGENTFS_FILE:
			if (me->level == PERM_VIEW)
				rc = mat_view_file(pfd, name, me, e);
			else
				rc = mat_file(fs, pfd, name, me, e);
			break;
		case AGENTFS_SYMLINK:
			if (symlinkat(me->target, pfd, name) != 0)
				rc = sys_fail(e, me->path, "symlinkat");
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

/*** Capture ***/

struct base_ent {
	char *path;			/* AgentFS path */
	enum agentfs_kind kind;		/* as agentfs_walk() reports it */
	uint32_t mode;			/* as stored */
	uint64_t size;			/* fs_inode.size */
	char *target;			/* symlink target or NULL */
	bool done;			/* seen in the workspace, kept or removed */
	bool keep;			/* a descendant is kept: so is this */
	enum perm_level level;		/* set by the removal pass only */
};

struct cap {
	struct agentfs *base;		/* read only */
	struct agentfs *out;		/* the copy being rewritten */
	const struct perms *p;		/* rules or NULL */
	struct workspace_limits lim;	/* resolved caps */
	struct workspace_changes *ch;	/* where changes are recorded */
	struct base_ent *ents;		/* base's entries, path_cmp order */
	size_t n;			/* used */
	size_t cap;			/* allocated */
	uint64_t bytes;			/* file bytes read so far */
	uint64_t count;			/* entries seen so far */
	dev_t dev;			/* the workspace's device (overlay: the upper layer's) */
	bool overlay;			/* reading an overlay: merged + upper (see _overlay) */
	dev_t mdev;			/* overlay: the merged tree's device */
	size_t nall_alloc;		/* overlay: allocated entries of ch->all */
	struct err *e;			/* error record */
	char path[AGENTFS_PATH_MAX + 1];	/* path being visited */
};

/* Orders '/' before every other byte, so "/d" is directly followed by all
 * of "/d/..." and only then by "/d 2" or "/d.txt". */
static int
path_cmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		int ca = *a == '/' ? 1 : (unsigned char)*a + 1;
		int cb = *b == '/' ? 1 : (unsigned char)*b + 1;

		if (*a == '\0')
			ca = 0;
		if (*b == '\0')
			cb = 0;
		if (ca != cb || ca == 0)
			return ca - cb;
	}
}

static int
base_ent_cmp(const void *a, const void *b)
{
	return path_cmp(((const struct base_ent *)a)->path,
	    ((const struct base_ent *)b)->path);
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
cap_collect_cb(const struct agentfs_entry *ent, void *arg)
{
	struct cap *c = arg;
	struct base_ent *be;

	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 64;
		c->ents = xreallocarray(c->ents, c->cap, sizeof(*c->ents));
	}
	be = &c->ents[c->n++];
	be->path = xstrdup(ent->path);
	be->kind = ent->kind;
	be->mode = ent->mode;
	be->size = ent->size;
	be->target = ent->target ? xstrdup(ent->target) : NULL;
	be->done = false;
	be->keep = false;
	be->level = PERM_WRITE;
	return 0;
}

static struct base_ent *
base_find(struct cap *c, const char *path)
{
	struct base_ent key = { .path = (char *)(uintptr_t)path };

	if (c->n == 0)
		return NULL;	/* no base: ents may be NULL, which bsearch() may not get */
	return bsearch(&key, c->ents, c->n, sizeof(*c->ents), base_ent_cmp);
}

static void
change_add(struct cap *c, enum workspace_op op, const char *path)
{
	struct workspace_changes *ch = c->ch;

	if (op == WORKSPACE_ADDED)
		ch->added++;
	else if (op == WORKSPACE_MODIFIED)
		ch->modified++;
	else
		ch->removed++;
	if (c->overlay) {
		if (ch->nall == c->nall_alloc) {
			c->nall_alloc = c->nall_alloc ? 2 * c->nall_alloc : 64;
			ch->all = xreallocarray(ch->all, c->nall_alloc, sizeof(*ch->all));
		}
		ch->all[ch->nall].op = op;
		ch->all[ch->nall].path = xstrdup(path);
		ch->nall++;
	}
	if (ch->nlist == WORKSPACE_CHANGES_LIST_MAX) {
		ch->truncated = true;
		return;
	}
	if (ch->list == NULL)
		ch->list = xcalloc(WORKSPACE_CHANGES_LIST_MAX,
		    sizeof(*ch->list));
	ch->list[ch->nlist].op = op;
	ch->list[ch->nlist].path = xstrdup(path);
	ch->nlist++;
}

/* Records a change the rules kept out. path must be printable already
 * (a valid name, or escaped). */
static void
refuse_add(struct cap *c, const char *path)
{
	struct workspace_changes *ch = c->ch;

	ch->refused++;
	if (ch->nrefused_list == WORKSPACE_REFUSED_LIST_MAX)
		return;
	if (ch->refused_list == NULL)
		ch->refused_list = xcalloc(WORKSPACE_REFUSED_LIST_MAX,
		    sizeof(*ch->refused_list));
	ch->refused_list[ch->nrefused_list++] = xstrdup(path);
}

/* One past the last entry of be's subtree (path_cmp order: a run). */
static size_t
base_run_end(const struct cap *c, const struct base_ent *be)
{
	size_t len = strlen(be->path);
	size_t j = (size_t)(be - c->ents) + 1;

	while (j < c->n && path_is_below(c->ents[j].path, be->path, len))
		j++;
	return j;
}

/* Whether anything strictly below be in base is below write. */
static bool
base_tree_locked(const struct cap *c, const struct base_ent *be)
{
	size_t end;

	if (c->p == NULL || be->kind != AGENTFS_DIR)
		return false;
	end = base_run_end(c, be);
	for (size_t j = (size_t)(be - c->ents) + 1; j < end; j++)
		if (perms_check(c->p, c->ents[j].path) < PERM_WRITE)
			return true;
	return false;
}

/* Removes be and, for a directory, its whole subtree from the copy,
 * children first. The subtree is reported removed; be itself is not
 * reported (the caller recreates it as another kind: "modified"). */
static int
base_remove_tree(struct cap *c, struct base_ent *be)
{
	size_t i = (size_t)(be - c->ents);
	size_t j = base_run_end(c, be);
	int rc;

	while (j-- > i) {
		if (c->ents[j].done)
			continue;
		if ((rc = agentfs_remove(c->out, c->ents[j].path, c->e)) != 0)
			return rc;
		c->ents[j].done = true;
		if (j != i)
			change_add(c, WORKSPACE_REMOVED, c->ents[j].path);
	}
	return 0;
}

/*
 * Reads the regular file name under pfd into *data. The fd is opened
 * O_NOFOLLOW|O_NONBLOCK (a FIFO swapped in after fstatat cannot block us)
 * and must be the very inode fstatat saw. The size used is fstat's, capped;
 * a file that grows while read is refused rather than read without end.
 */
static int
cap_read_file(struct cap *c, int pfd, const char *name,
    const struct stat *seen, void **data, size_t *len)
{
	struct stat st;
	unsigned char extra;
	unsigned char *buf = NULL;
	size_t got = 0;
	ssize_t n;
	int fd, rc = 0;

	fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
	    O_CLOEXEC);
	if (fd < 0)
		return sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &st) != 0) {
		rc = sys_fail(c->e, c->path, "fstat");
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode) || st.st_ino != seen->st_ino ||
	    st.st_dev != seen->st_dev) {
		rc = err_set(c->e, -EAGAIN, "workspace: %s: replaced while "
		    "captured", c->path);
		goto out_close_fd;
	}
	if ((uint64_t)st.st_size > c->lim.max_file_bytes) {
		rc = err_set(c->e, -EFBIG, "workspace: %s: over the file size "
		    "cap of %llu bytes", c->path,
		    (unsigned long long)c->lim.max_file_bytes);
		goto out_close_fd;
	}
	if ((uint64_t)st.st_size > c->lim.max_bytes - c->bytes) {
		rc = err_set(c->e, -EDQUOT, "workspace: %s: over the total "
		    "size cap of %llu bytes", c->path,
		    (unsigned long long)c->lim.max_bytes);
		goto out_close_fd;
	}
	buf = xmalloc((size_t)st.st_size + 1);
	while (got < (size_t)st.st_size) {
		n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = sys_fail(c->e, c->path, "read");
			goto out_free;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	while ((n = read(fd, &extra, 1)) < 0 && errno == EINTR)
		;
	if (n != 0) {
		rc = err_set(c->e, -EAGAIN, "workspace: %s: changed while "
		    "captured", c->path);
		goto out_free;
	}
	c->bytes += got;
	*data = buf;
	*len = got;
	buf = NULL;
out_free:
	free(buf);
out_close_fd:
	close(fd);
	return rc;
}

static int
cap_file(struct cap *c, int pfd, const char *name, const struct stat *st,
    struct base_ent *be)
{
	enum workspace_op op = be ? WORKSPACE_MODIFIED : WORKSPACE_ADDED;
	uint32_t perm = st->st_mode & 0777;
	void *data = NULL, *old = NULL;
	size_t len = 0, oldlen = 0;
	int rc;

	if ((rc = cap_read_file(c, pfd, name, st, &data, &len)) != 0)
		return rc;
	if (be != NULL && be->kind == AGENTFS_FILE) {
		be->done = true;
		if ((be->mode & 0777) == perm && be->size == len) {
			rc = agentfs_read(c->base, be->path, &old, &oldlen,
			    c->e);
			if (rc != 0)
				goto out_free;
			if (oldlen == len && memcmp(old, data, len) == 0)
				goto out_free;	/* unchanged */
		}
	} else if (be != NULL && (rc = base_remove_tree(c, be)) != 0)
		goto out_free;
	rc = agentfs_write(c->out, c->path, data, len, perm, c->e);
	if (rc == 0)
		change_add(c, op, c->path);
out_free:
	free(old);
	free(data);
	return rc;
}

static int
cap_symlink(struct cap *c, int pfd, const char *name, struct base_ent *be)
{
	char target[AGENTFS_PATH_MAX + 1];
	ssize_t n;
	int rc;

	n = readlinkat(pfd, name, target, sizeof(target));
	if (n < 0)
		return sys_fail(c->e, c->path, "readlinkat");
	if ((size_t)n >= sizeof(target))
		return err_set(c->e, -ENAMETOOLONG, "workspace: %s: symlink "
		    "target over %d bytes", c->path, AGENTFS_PATH_MAX);
	target[n] = '\0';
	if (n == 0 || !text_is_clean((unsigned char *)target, (size_t)n))
		return bad_name(c->e, c->path, "symlink target");
	if (be != NULL && be->kind == AGENTFS_SYMLINK &&
	    strcmp(be->target, target) == 0) {
		be->done = true;
		return 0;
	}
	if (be != NULL && (rc = base_remove_tree(c, be)) != 0)
		return rc;
	if ((rc = agentfs_symlink(c->out, target, c->path, c->e)) != 0)
		return rc;
	change_add(c, be ? WORKSPACE_MODIFIED : WORKSPACE_ADDED, c->path);
	return 0;
}

static int cap_dir(struct cap *c, int fd, int mfd, size_t plen, uint32_t depth);

/*
 * Overlay: the merged directory name of mpfd, listed in place of the
 * upper one (it shows the lower layer's entries too, and hides what the
 * job deleted). It must be a directory of the merged tree.
 */
static int
cap_open_merged(struct cap *c, int mpfd, const char *name)
{
	struct stat st;
	int fd;

	if ((fd = openat(mpfd, name, DIR_FLAGS)) < 0)
		return sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_dev != c->mdev) {
		close(fd);
		return err_set(c->e, -EAGAIN, "workspace: %s: replaced while "
		    "captured", c->path);
	}
	return fd;
}

/* Enters the directory name of pfd (st as fstatat saw it) and captures
 * what it holds; mpfd is the merged parent in an overlay, else -1. */
static int
cap_descend(struct cap *c, int pfd, int mpfd, const char *name,
    const struct stat *st, size_t plen, uint32_t depth)
{
	struct stat dst;
	int fd, mfd = -1, rc;

	/* O_NOFOLLOW|O_DIRECTORY, then the inode must be the one fstatat
	 * saw: a directory swapped for a symlink in between fails here. */
	if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
		return sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &dst) != 0) {
		rc = sys_fail(c->e, c->path, "fstat");
	} else if (dst.st_ino != st->st_ino || dst.st_dev != st->st_dev) {
		rc = err_set(c->e, -EAGAIN, "workspace: %s: replaced while "
		    "captured", c->path);
	} else if (c->overlay && (mfd = cap_open_merged(c, mpfd, name)) < 0) {
		rc = mfd;
	} else
		rc = cap_dir(c, fd, mfd, plen, depth);
	if (mfd >= 0)
		close(mfd);
	close(fd);
	return rc;
}

/*
 * Whether the regular file name of pfd is what materialise made of a view
 * file: base's size, mode 0000 and only zeros. Holes are skipped with
 * SEEK_DATA; what data there is is read in small blocks against the byte
 * cap. Opened as cap_read_file() opens, and must be the inode fstatat saw.
 */
static int
cap_view_is_same(struct cap *c, int pfd, const char *name,
    const struct stat *seen, const struct base_ent *be, bool *same)
{
	unsigned char buf[16384];
	struct stat st;
	off_t off = 0, size;
	ssize_t n;
	int fd, rc = 0;

	*same = false;
	if ((seen->st_mode & 07777) != 0 || (uint64_t)seen->st_size != be->size)
		return 0;
	fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
	    O_CLOEXEC);
	/* Without CAP_DAC_OVERRIDE a mode 0000 file cannot be opened: size
	 * and mode must do. Only the report depends on it; base is kept
	 * either way. */
	if (fd < 0 && errno == EACCES) {
		*same = true;
		return 0;
	}
	if (fd < 0)
		return sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &st) != 0) {
		rc = sys_fail(c->e, c->path, "fstat");
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode) || st.st_ino != seen->st_ino ||
	    st.st_dev != seen->st_dev || st.st_size != seen->st_size)
		goto out_close_fd;		/* changed: not the same */
	size = st.st_size;
	while (off < size) {
		off_t data = lseek(fd, off, SEEK_DATA);

		if (data < 0 && errno == ENXIO)
			break;			/* a hole to the end */
		if (data < 0)
			data = off;		/* no SEEK_DATA: read it all */
		if (data >= size)
			break;
		n = pread(fd, buf, (size_t)(size - data) < sizeof(buf) ?
		    (size_t)(size - data) : sizeof(buf), data);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = sys_fail(c->e, c->path, "pread");
			goto out_close_fd;
		}
		if (n == 0)
			break;
		if ((uint64_t)n > c->lim.max_bytes - c->bytes) {
			rc = err_set(c->e, -EDQUOT, "workspace: %s: over the "
			    "total size cap of %llu bytes", c->path,
			    (unsigned long long)c->lim.max_bytes);
			goto out_close_fd;
		}
		c->bytes += (uint64_t)n;
		for (ssize_t k = 0; k < n; k++)
			if (buf[k] != 0)
				goto out_close_fd;
		off = data + n;
	}
	*same = true;
out_close_fd:
	close(fd);
	return rc;
}

/* Whether the regular file name of pfd is be: same permission bits, size
 * and content (read as cap_file() reads it). */
static int
cap_read_is_same(struct cap *c, int pfd, const char *name,
    const struct stat *st, const struct base_ent *be, bool *same)
{
	void *data = NULL, *old = NULL;
	size_t len = 0, oldlen = 0;
	int rc;

	*same = false;
	if ((st->st_mode & 0777) != (be->mode & 0777) ||
	    (uint64_t)st->st_size != be->size)
		return 0;
	if ((rc = cap_read_file(c, pfd, name, st, &data, &len)) != 0)
		return rc;
	if ((rc = agentfs_read(c->base, be->path, &old, &oldlen, c->e)) == 0)
		*same = oldlen == len && memcmp(old, data, len) == 0;
	free(old);
	free(data);
	return rc;
}

/* Whether the symlink name of pfd points where be does. */
static int
cap_link_is_same(struct cap *c, int pfd, const char *name,
    const struct base_ent *be, bool *same)
{
	char target[AGENTFS_PATH_MAX + 1];
	ssize_t n;

	*same = false;
	n = readlinkat(pfd, name, target, sizeof(target));
	if (n < 0)
		return sys_fail(c->e, c->path, "readlinkat");
	if ((size_t)n >= sizeof(target))
		return 0;
	target[n] = '\0';
	*same = be->target != NULL && strcmp(be->target, target) == 0;
	return 0;
}

/*
 * Captures an entry at a locked path (level below write): the copy keeps
 * base's entry, or its absence, whatever is on disk. Only compares, to
 * report a refusal; nothing the job made here is read, except what must
 * be to tell a change, and only a directory of base is entered (writable
 * paths may lie below it). base_ent.done marks be as dealt with; its
 * subtree is left to the walk below or to the removal pass, which keeps
 * every locked path.
 */
static int
cap_locked(struct cap *c, int pfd, int mpfd, const char *name,
    const struct stat *st, struct base_ent *be, enum perm_level level,
    size_t plen, uint32_t depth)
{
	bool same = false;
	int rc = 0;

	if (be != NULL)
		be->done = true;
	if (be == NULL || st->st_dev != c->dev)
		goto out_refuse;
	if (S_ISDIR(st->st_mode) && be->kind == AGENTFS_DIR) {
		/* Nothing at or below can be visible, so materialise made
		 * nothing here: the job did. What it put there is not read. */
		if (!perms_dir_may_show(c->p, c->path))
			goto out_refuse;
		return cap_descend(c, pfd, mpfd, name, st, plen, depth);
	}
	/* A hidden file was never on disk: this one is the job's. */
	if (level == PERM_NONE)
		goto out_refuse;
	if (S_ISREG(st->st_mode) && be->kind == AGENTFS_FILE)
		rc = level == PERM_VIEW ?
		    cap_view_is_same(c, pfd, name, st, be, &same) :
		    cap_read_is_same(c, pfd, name, st, be, &same);
	else if (S_ISLNK(st->st_mode) && be->kind == AGENTFS_SYMLINK)
		rc = cap_link_is_same(c, pfd, name, be, &same);
	if (rc != 0 || same)
		return rc;
out_refuse:
	refuse_add(c, c->path);
	return 0;
}

/*
 * Overlay: an entry the upper layer does not hold is the lower layer's,
 * which is base materialised under the same rules, so it and everything
 * below it are unchanged and not read. They count against the caps as a
 * walk would have counted them (be itself is counted by the listing).
 */
static int
cap_unchanged(struct cap *c, struct base_ent *be)
{
	size_t i, end;

	if (be == NULL)
		return err_set(c->e, -EIO, "workspace: %s: in the lower layer "
		    "but not in the snapshot", c->path);
	i = (size_t)(be - c->ents);
	end = base_run_end(c, be);
	for (size_t j = i; j < end; j++) {
		struct base_ent *x = &c->ents[j];
		enum perm_level lv = c->p != NULL && (j > i ||
		    x->kind == AGENTFS_FILE) ? perms_check(c->p, x->path) : PERM_WRITE;

		x->done = true;
		if (j > i && lv != PERM_NONE && ++c->count > c->lim.max_files)
			return err_set(c->e, -EDQUOT, "workspace: %s: over the cap "
			    "of %u entries", x->path, c->lim.max_files);
		if (x->kind != AGENTFS_FILE || lv < PERM_READ)
			continue;
		if (x->size > c->lim.max_bytes - c->bytes)
			return err_set(c->e, -EDQUOT, "workspace: %s: over the total "
			    "size cap of %llu bytes", x->path,
			    (unsigned long long)c->lim.max_bytes);
		c->bytes += x->size;
	}
	return 0;
}

/* Captures the entry name of the directory pfd; c->path names it. In an
 * overlay, pfd is the upper directory and mpfd the merged one. */
static int
cap_entry(struct cap *c, int pfd, int mpfd, const char *name, size_t plen,
    uint32_t depth)
{
	struct base_ent *be = base_find(c, c->path);
	enum perm_level level = level_of(c->p, c->path);
	struct stat st;
	int rc;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (c->overlay && errno == ENOENT)
			return cap_unchanged(c, be);
		return sys_fail(c->e, c->path, "fstatat");
	}
	/* Decided before anything on disk is trusted: at a locked path the
	 * job's entry, whatever its kind or device, changes nothing. */
	if (level < PERM_WRITE)
		return cap_locked(c, pfd, mpfd, name, &st, be, level, plen,
		    depth);
	/* A mount (even one the job could make in its own namespace) is
	 * not part of the workspace: never enter or copy another device. */
	if (st.st_dev != c->dev)
		return err_set(c->e, -EXDEV, "workspace: %s: on another "
		    "file system", c->path);
	if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) &&
	    !S_ISDIR(st.st_mode))
		return err_set(c->e, -EPERM, "workspace: %s: %s refused: "
		    "special files are not captured", c->path,
		    agentfs_type_name(st.st_mode));
	/* Turning a directory into a file or symlink would drop its locked
	 * entries with it: base's directory stays (its writable entries
	 * missing from disk are removed by the removal pass). */
	if (!S_ISDIR(st.st_mode) && be != NULL && base_tree_locked(c, be)) {
		be->done = true;
		refuse_add(c, c->path);
		return 0;
	}
	if (S_ISREG(st.st_mode))
		return cap_file(c, pfd, name, &st, be);
	if (S_ISLNK(st.st_mode))
		return cap_symlink(c, pfd, name, be);

	if (be != NULL && be->kind == AGENTFS_DIR) {
		be->done = true;
	} else {
		if (be != NULL && (rc = base_remove_tree(c, be)) != 0)
			return rc;
		rc = agentfs_mkdir(c->out, c->path, st.st_mode & 0777, c->e);
		if (rc != 0)
			return rc;
		change_add(c, be ? WORKSPACE_MODIFIED : WORKSPACE_ADDED,
		    c->path);
	}
	return cap_descend(c, pfd, mpfd, name, &st, plen, depth);
}

/* Lists the directory fd (whose path is c->path[0..plen)), names sorted,
 * and captures each entry. One fd is held per level of nesting. In an
 * overlay, fd is the upper directory and mfd the merged one, which is what
 * is listed. */
static int
cap_dir(struct cap *c, int fd, int mfd, size_t plen, uint32_t depth)
{
	char **names = NULL;
	size_t n = 0, alloc = 0;
	struct dirent *de;
	DIR *d = NULL;
	int lfd, rc = 0;

	/* A fresh fd for the listing: fdopendir() owns it and its offset. */
	if ((lfd = openat(c->overlay ? mfd : fd, ".", DIR_FLAGS)) < 0)
		return sys_fail(c->e, plen ? c->path : "/", "openat");
	if ((d = fdopendir(lfd)) == NULL) {
		rc = sys_fail(c->e, plen ? c->path : "/", "fdopendir");
		close(lfd);
		return rc;
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0)
				rc = sys_fail(c->e, plen ? c->path : "/",
				    "readdir");
			break;
		}
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		/* The name is checked before it is used anywhere, so every
		 * later message can print the path raw. */
		if (!workspace_name_is_valid(de->d_name)) {
			char bad[AGENTFS_PATH_MAX + AGENTFS_NAME_MAX + 2];
			char esc[AGENTFS_PATH_MAX + 1];

			snprintf(bad, sizeof(bad), "%.*s/%s", (int)plen,
			    c->path, de->d_name);
			if (level_of(c->p, bad) == PERM_WRITE) {
				rc = bad_name(c->e, bad, "name");
				break;
			}
			/* At a locked path it changes nothing: refused,
			 * counted, never used. */
			if (++c->count > c->lim.max_files) {
				rc = err_set(c->e, -EDQUOT, "workspace: %.*s: "
				    "over the cap of %u entries", (int)plen,
				    c->path, c->lim.max_files);
				break;
			}
			str_escape(bad, esc, sizeof(esc));
			refuse_add(c, esc);
			continue;
		}
		if (plen + 1 + strlen(de->d_name) > AGENTFS_PATH_MAX) {
			rc = err_set(c->e, -ENAMETOOLONG, "workspace: %.200s/"
			    "...: path over %d bytes", c->path,
			    AGENTFS_PATH_MAX);
			break;
		}
		if (++c->count > c->lim.max_files) {
			rc = err_set(c->e, -EDQUOT, "workspace: %.*s/%s: over "
			    "the cap of %u entries", (int)plen, c->path,
			    de->d_name, c->lim.max_files);
			break;
		}
		if (depth + 1 > c->lim.max_depth) {
			rc = err_set(c->e, -EDQUOT, "workspace: %.*s/%s: over "
			    "the depth cap of %u", (int)plen, c->path,
			    de->d_name, c->lim.max_depth);
			break;
		}
		if (n == alloc) {
			alloc = alloc ? 2 * alloc : 16;
			names = xreallocarray(names, alloc, sizeof(*names));
		}
		names[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	if (rc == 0 && n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t nlen = strlen(names[i]);

		c->path[plen] = '/';
		memcpy(c->path + plen + 1, names[i], nlen + 1);
		rc = cap_entry(c, fd, mfd, names[i], plen + 1 + nlen,
		    depth + 1);
		c->path[plen] = '\0';
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/*
 * The removal pass, after the walk: what the walk did not see is gone from
 * disk. Locked paths stay, and so does every ancestor of one (it is
 * missing only because the job removed a directory whose locked content it
 * could not see or change). Levels are taken first, in order, so a hidden
 * directory that can show nothing settles its whole subtree with one
 * check. Then in reverse path_cmp order, so children are decided (and
 * removed) before their directory.
 */
static int
cap_remove_missing(struct cap *c)
{
	char parent[AGENTFS_PATH_MAX + 1];
	int rc;

	for (size_t i = 0; c->p != NULL && i < c->n; i++) {
		struct base_ent *be = &c->ents[i];
		size_t end;

		if (be->done)
			continue;
		be->level = perms_check(c->p, be->path);
		if (be->level != PERM_NONE || be->kind != AGENTFS_DIR ||
		    perms_dir_may_show(c->p, be->path))
			continue;
		end = base_run_end(c, be);
		for (size_t j = i + 1; j < end; j++)
			c->ents[j].level = PERM_NONE;
		i = end - 1;
	}
	for (size_t i = c->n; i-- > 0;) {
		struct base_ent *be = &c->ents[i];
		const char *slash;

		if (be->done)
			continue;
		be->done = true;
		if (be->level == PERM_WRITE && !be->keep) {
			if ((rc = agentfs_remove(c->out, be->path, c->e)) != 0)
				return rc;
			change_add(c, WORKSPACE_REMOVED, be->path);
			continue;
		}
		/* Hidden paths are not on disk by design: not a change. */
		if (be->level != PERM_NONE)
			refuse_add(c, be->path);
		slash = strrchr(be->path, '/');
		if (slash != NULL && slash != be->path) {
			struct base_ent *pe;

			memcpy(parent, be->path, (size_t)(slash - be->path));
			parent[slash - be->path] = '\0';
			if ((pe = base_find(c, parent)) != NULL)
				pe->keep = true;
		}
	}
	return 0;
}

int
workspace_capture(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, struct agentfs **out,
    struct workspace_changes *ch, struct err *e)
{
	return workspace_capture_rules(dirfd, base, lim, NULL, out, ch, e);
}

int
workspace_capture_rules(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, const struct perms *p,
    struct agentfs **out, struct workspace_changes *ch, struct err *e)
{
	struct workspace_changes local = { 0 };
	struct cap c = { .base = base, .p = p, .e = e };
	struct stat st;
	void *blob = NULL;
	size_t len = 0;
	int rc;

	err_clear(e);
	*out = NULL;
	if (ch == NULL)
		ch = &local;
	memset(ch, 0, sizeof(*ch));
	c.ch = ch;
	limits_resolve(lim, &c.lim);
	if (fstat(dirfd, &st) != 0)
		return sys_fail(e, "/", "fstat");
	if (!S_ISDIR(st.st_mode))
		return err_set(e, -ENOTDIR, "workspace: /: not a directory");
	c.dev = st.st_dev;

	if (base != NULL) {
		if ((rc = agentfs_to_blob(base, &blob, &len, e)) != 0)
			goto out_free;
		/* Our own copy of base, just made: no need to verify its pages. */
		rc = agentfs_open_trusted(blob, len, &c.out, e);
		free(blob);
		if (rc != 0)
			goto out_free;
		if ((rc = agentfs_walk(base, cap_collect_cb, &c, e)) != 0)
			goto out_close;
		if (c.n > 1)
			qsort(c.ents, c.n, sizeof(*c.ents), base_ent_cmp);
	} else if ((rc = agentfs_new(&c.out, e)) != 0)
		goto out_free;

	c.path[0] = '\0';
	if ((rc = cap_dir(&c, dirfd, -1, 0, 0)) != 0)
		goto out_close;
	if ((rc = cap_remove_missing(&c)) != 0)
		goto out_close;
	*out = c.out;
	c.out = NULL;
out_close:
	agentfs_close(c.out);
out_free:
	for (size_t i = 0; i < c.n; i++) {
		free(c.ents[i].path);
		free(c.ents[i].target);
	}
	free(c.ents);
	if (ch == &local)
		workspace_changes_free(&local);
	return rc;
}

/*
 * A capture made in place on fs: of an overlay when upperfd >= 0 (dirfd is
 * the merged tree), else of the plain tree dirfd.
 */
static int
capture_inplace(int dirfd, int upperfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e)
{
	struct cap c = { .base = fs, .out = fs, .p = p, .e = e, .overlay = upperfd >= 0 };
	struct stat st;
	int rc;

	err_clear(e);
	memset(ch, 0, sizeof(*ch));
	c.ch = ch;
	limits_resolve(lim, &c.lim);
	if (fstat(c.overlay ? upperfd : dirfd, &st) != 0)
		return sys_fail(e, "/", "fstat");
	c.dev = st.st_dev;
	if (!S_ISDIR(st.st_mode) || fstat(dirfd, &st) != 0 || !S_ISDIR(st.st_mode))
		return err_set(e, -ENOTDIR, "workspace: /: not a directory");
	c.mdev = st.st_dev;
	/*
	 * One handle is both base and result: every path's base state is
	 * read (to compare) before that path is written, and never after, so
	 * reading through the copy being rewritten reads base.
	 */
	if ((rc = agentfs_walk(fs, cap_collect_cb, &c, e)) == 0) {
		if (c.n > 1)
			qsort(c.ents, c.n, sizeof(*c.ents), base_ent_cmp);
		c.path[0] = '\0';
		rc = c.overlay ? cap_dir(&c, upperfd, dirfd, 0, 0) : cap_dir(&c, dirfd, -1, 0, 0);
		if (rc == 0)
			rc = cap_remove_missing(&c);
	}
	for (size_t i = 0; i < c.n; i++) {
		free(c.ents[i].path);
		free(c.ents[i].target);
	}
	free(c.ents);
	return rc;
}

int
workspace_capture_overlay(int mergedfd, int upperfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e)
{
	return capture_inplace(mergedfd, upperfd, fs, lim, p, ch, e);
}

int
workspace_capture_inplace(int dirfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e)
{
	return capture_inplace(dirfd, -1, fs, lim, p, ch, e);
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
		return errno == ENOENT ? 0 : sys_fail(e, path, "fstatat");
	if (!S_ISDIR(st.st_mode))
		return unlinkat(pfd, name, 0) == 0 || errno == ENOENT ? 0 :
		    sys_fail(e, path, "unlinkat");
	if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
		return sys_fail(e, path, "openat");
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return sys_fail(e, path, "fdopendir");
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
		    (rc = tree_remove_at(dirfd(d), de->d_name, path, e)) > 0)
			rc = 0;
	}
	if (rc == 0 && errno != 0)
		rc = sys_fail(e, path, "readdir");
	closedir(d);
	if (rc == 0 && unlinkat(pfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = sys_fail(e, path, "unlinkat");
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
			rc = sys_fail(e, path, "mkdirat");
		else if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
			rc = sys_fail(e, path, "openat");
		else {
			if (fchmod(fd, ent.mode & 0777) != 0)
				rc = sys_fail(e, path, "fchmod");
			close(fd);
		}
		break;
	}
	case AGENTFS_FILE:
		rc = mat_file(fs, pfd, name, &me, e);
		break;
	case AGENTFS_SYMLINK:
		if (symlinkat(target, pfd, name) != 0)
			rc = sys_fail(e, path, "symlinkat");
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
