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

/*** Materialise ***/

struct mat_ent {
	char *path;			/* AgentFS path */
	enum agentfs_kind kind;		/* dir, file or symlink */
	uint32_t mode;			/* as stored */
	uint64_t size;			/* file size */
	int64_t mtime;			/* seconds */
	char *target;			/* symlink target or NULL */
};

struct mat {
	struct mat_ent *ents;		/* walk order: parents first */
	size_t n;			/* used */
	size_t cap;			/* allocated */
	uint64_t bytes;			/* sum of file sizes */
	struct workspace_limits lim;	/* resolved caps */
	struct err *e;			/* where the walk callback fails */
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

/* Collects one snapshot entry and checks it against the caps. */
static int
mat_collect_cb(const struct agentfs_entry *ent, void *arg)
{
	struct mat *m = arg;
	struct mat_ent *me;

	if (!workspace_name_is_valid(ent->name))
		return bad_name(m->e, ent->path, "name");
	if (ent->kind == AGENTFS_SPECIAL)
		return err_set(m->e, -EPERM, "workspace: %s: %s entries are "
		    "not materialised", ent->path,
		    agentfs_type_name(ent->mode));
	if (m->n >= m->lim.max_files)
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
		if (ent->size > m->lim.max_bytes - m->bytes)
			return err_set(m->e, -EDQUOT, "workspace: %s: over the "
			    "total size cap of %llu bytes", ent->path,
			    (unsigned long long)m->lim.max_bytes);
		m->bytes += ent->size;
	}
	if (ent->kind == AGENTFS_SYMLINK && (ent->target[0] == '\0' ||
	    !text_is_clean((const unsigned char *)ent->target,
	    strlen(ent->target))))
		return bad_name(m->e, ent->path, "symlink target");
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
	struct mat m = { .e = e };
	struct dirstack *ds = NULL;
	int rc;

	err_clear(e);
	limits_resolve(lim, &m.lim);
	/* Every cap is checked on the whole snapshot before the first write,
	 * so an oversized snapshot leaves no half tree behind. */
	if ((rc = agentfs_walk(fs, mat_collect_cb, &m, e)) != 0)
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
	bool done;			/* seen in the workspace or removed */
};

struct cap {
	struct agentfs *base;		/* read only */
	struct agentfs *out;		/* the copy being rewritten */
	struct workspace_limits lim;	/* resolved caps */
	struct workspace_changes *ch;	/* where changes are recorded */
	struct base_ent *ents;		/* base's entries, path_cmp order */
	size_t n;			/* used */
	size_t cap;			/* allocated */
	uint64_t bytes;			/* file bytes read so far */
	uint64_t count;			/* entries seen so far */
	dev_t dev;			/* the workspace's device */
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

/* Removes be and, for a directory, its whole subtree from the copy,
 * children first. The subtree is reported removed; be itself is not
 * reported (the caller recreates it as another kind: "modified"). */
static int
base_remove_tree(struct cap *c, struct base_ent *be)
{
	size_t i = (size_t)(be - c->ents);
	size_t len = strlen(be->path);
	size_t j = i + 1;
	int rc;

	while (j < c->n && strncmp(c->ents[j].path, be->path, len) == 0 &&
	    c->ents[j].path[len] == '/')
		j++;
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

static int cap_dir(struct cap *c, int fd, size_t plen, uint32_t depth);

/* Captures the entry name of the directory pfd; c->path names it. */
static int
cap_entry(struct cap *c, int pfd, const char *name, size_t plen,
    uint32_t depth)
{
	struct base_ent *be = base_find(c, c->path);
	struct stat st, dst;
	int fd, rc;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return sys_fail(c->e, c->path, "fstatat");
	/* A mount (even one the job could make in its own namespace) is
	 * not part of the workspace: never enter or copy another device. */
	if (st.st_dev != c->dev)
		return err_set(c->e, -EXDEV, "workspace: %s: on another "
		    "file system", c->path);
	if (S_ISREG(st.st_mode))
		return cap_file(c, pfd, name, &st, be);
	if (S_ISLNK(st.st_mode))
		return cap_symlink(c, pfd, name, be);
	if (!S_ISDIR(st.st_mode))
		return err_set(c->e, -EPERM, "workspace: %s: %s refused: "
		    "special files are not captured", c->path,
		    agentfs_type_name(st.st_mode));

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
	/* O_NOFOLLOW|O_DIRECTORY, then the inode must be the one fstatat
	 * saw: a directory swapped for a symlink in between fails here. */
	if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
		return sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &dst) != 0) {
		rc = sys_fail(c->e, c->path, "fstat");
	} else if (dst.st_ino != st.st_ino || dst.st_dev != st.st_dev) {
		rc = err_set(c->e, -EAGAIN, "workspace: %s: replaced while "
		    "captured", c->path);
	} else
		rc = cap_dir(c, fd, plen, depth);
	close(fd);
	return rc;
}

/* Lists the directory fd (whose path is c->path[0..plen)), names sorted,
 * and captures each entry. One fd is held per level of nesting. */
static int
cap_dir(struct cap *c, int fd, size_t plen, uint32_t depth)
{
	char **names = NULL;
	size_t n = 0, alloc = 0;
	struct dirent *de;
	DIR *d = NULL;
	int lfd, rc = 0;

	/* A fresh fd for the listing: fdopendir() owns it and its offset. */
	if ((lfd = openat(fd, ".", DIR_FLAGS)) < 0)
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

			snprintf(bad, sizeof(bad), "%.*s/%s", (int)plen,
			    c->path, de->d_name);
			rc = bad_name(c->e, bad, "name");
			break;
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
		rc = cap_entry(c, fd, names[i], plen + 1 + nlen, depth + 1);
		c->path[plen] = '\0';
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

int
workspace_capture(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, struct agentfs **out,
    struct workspace_changes *ch, struct err *e)
{
	struct workspace_changes local = { 0 };
	struct cap c = { .base = base, .e = e };
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
	if ((rc = cap_dir(&c, dirfd, 0, 0)) != 0)
		goto out_close;
	/* What the walk did not see is gone; reversed path_cmp order
	 * removes every child before its directory. */
	for (size_t i = c.n; i-- > 0;) {
		if (c.ents[i].done)
			continue;
		if ((rc = agentfs_remove(c.out, c.ents[i].path, e)) != 0)
			goto out_close;
		c.ents[i].done = true;
		change_add(&c, WORKSPACE_REMOVED, c.ents[i].path);
	}
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

void
workspace_changes_free(struct workspace_changes *ch)
{
	if (ch == NULL)
		return;
	for (size_t i = 0; i < ch->nlist; i++)
		free(ch->list[i].path);
	free(ch->list);
	memset(ch, 0, sizeof(*ch));
}
