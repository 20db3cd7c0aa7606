/*
 * workspace_capture.c - capture a directory back into a snapshot: a copy
 * of the base rewritten where the directory differs, or, for a persistent
 * sandbox, the snapshot itself rewritten in place from a plain tree or
 * from the upper layer of an overlay. workspace.c materialises and
 * applies; workspace_int.h is what the two share.
 *
 * Pure file-system code on directory fds, as in workspace.c; workspace.h
 * states the threat (the job owns the directory and may race us).
 *
 * DESIGN. Capture copies base, sorts base's entries with '/' ordered before
 * every other byte (so a subtree is one contiguous run that follows its
 * root), then walks the directory depth first, one held fd per level,
 * rewriting in the copy only what differs and marking what it saw; what is
 * left unmarked is removed, run reversed so children go before parents.
 *
 * PATH RULES. Capture takes an optional compiled rule set and relies on
 * agentfs_walk() being depth first, as path_cmp order also is. It decides
 * every path's level before touching it: a writable path goes through the
 * code above, a locked one (below write) only compares what is on disk
 * with base to report a refusal and never writes to the copy, and the
 * removal pass keeps a missing path when it or something below it is
 * locked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/err.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "perms.h"
#include "workspace.h"
#include "workspace_int.h"

/*** Capture ***/

/*
 * An overlay's opaque mark on a directory of its upper layer: the overlay
 * is mounted with userxattr (workspace_capture_overlay()), where overlayfs
 * keeps its marks in user xattrs.
 */
#define OVL_XATTR_OPAQUE "user.overlay.opaque"

struct base_ent {
	char *path;			/* AgentFS path */
	enum agentfs_kind kind;		/* as agentfs_walk() reports it */
	uint32_t mode;			/* as stored */
	uint64_t size;			/* fs_inode.size */
	char *target;			/* symlink target or NULL */
	bool done;			/* seen in the workspace, kept or removed */
	bool keep;			/* a descendant is kept: so is this */
	bool gone;			/* overlay: under a whiteout (the job removed it) */
	enum perm_level rule;		/* its level under c->p, if c->rules_ahead */
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
	uint64_t base_size;		/* workspace_size() of base */
	bool growth_cap;		/* lim.max_bytes is max_growth's bound */
	dev_t dev;			/* the workspace's device (overlay: the upper layer's) */
	bool overlay;			/* reading an overlay's upper layer (see _overlay) */
	bool rules_ahead;		/* each ents[].rule is set (workspace_ahead) */
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

/*
 * The error for a file of path that takes the bytes read past
 * c->lim.max_bytes: the total size cap, or, when max_growth set it, the
 * growth bound (-ENOSPC, as workspace_capture() says).
 */
static int
cap_bytes_fail(struct cap *c, const char *path)
{
	if (c->growth_cap)
		return err_set(c->e, -ENOSPC, "workspace: %s: over the disk limit of "
		    "%llu bytes: the workspace's files come to more than %llu bytes, "
		    "the snapshot's %llu plus the limit (holes count as zeros, each "
		    "name of a hard link in full)", path,
		    (unsigned long long)c->lim.max_growth,
		    (unsigned long long)c->lim.max_bytes,
		    (unsigned long long)c->base_size);
	return err_set(c->e, -EDQUOT, "workspace: %s: over the total size cap of "
	    "%llu bytes", path, (unsigned long long)c->lim.max_bytes);
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
	be->gone = false;
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

/* be's level under c->p (which is not NULL): read ahead, or checked now. */
static enum perm_level
base_level(const struct cap *c, const struct base_ent *be)
{
	return c->rules_ahead ? be->rule : perms_check(c->p, be->path);
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

	while (j < c->n && workspace__path_is_below(c->ents[j].path, be->path,
	    len))
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
		return workspace__sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &st) != 0) {
		rc = workspace__sys_fail(c->e, c->path, "fstat");
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
		rc = cap_bytes_fail(c, c->path);
		goto out_close_fd;
	}
	buf = xmalloc((size_t)st.st_size + 1);
	while (got < (size_t)st.st_size) {
		n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = workspace__sys_fail(c->e, c->path, "read");
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
		return workspace__sys_fail(c->e, c->path, "readlinkat");
	if ((size_t)n >= sizeof(target))
		return err_set(c->e, -ENAMETOOLONG, "workspace: %s: symlink "
		    "target over %d bytes", c->path, AGENTFS_PATH_MAX);
	target[n] = '\0';
	if (n == 0 || !workspace__text_is_clean((unsigned char *)target,
	    (size_t)n))
		return workspace__bad_name(c->e, c->path, "symlink target");
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

/* Enters the directory name of pfd (st as fstatat saw it) and captures
 * what it holds. */
static int
cap_descend(struct cap *c, int pfd, const char *name, const struct stat *st,
    size_t plen, uint32_t depth)
{
	struct stat dst;
	int fd, rc;

	/* O_NOFOLLOW|O_DIRECTORY, then the inode must be the one fstatat
	 * saw: a directory swapped for a symlink in between fails here. */
	if ((fd = openat(pfd, name, DIR_FLAGS)) < 0)
		return workspace__sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &dst) != 0) {
		rc = workspace__sys_fail(c->e, c->path, "fstat");
	} else if (dst.st_ino != st->st_ino || dst.st_dev != st->st_dev) {
		rc = err_set(c->e, -EAGAIN, "workspace: %s: replaced while "
		    "captured", c->path);
	} else
		rc = cap_dir(c, fd, plen, depth);
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
		return workspace__sys_fail(c->e, c->path, "openat");
	if (fstat(fd, &st) != 0) {
		rc = workspace__sys_fail(c->e, c->path, "fstat");
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
			rc = workspace__sys_fail(c->e, c->path, "pread");
			goto out_close_fd;
		}
		if (n == 0)
			break;
		if ((uint64_t)n > c->lim.max_bytes - c->bytes) {
			rc = cap_bytes_fail(c, c->path);
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
		return workspace__sys_fail(c->e, c->path, "readlinkat");
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
cap_locked(struct cap *c, int pfd, const char *name,
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
		return cap_descend(c, pfd, name, st, plen, depth);
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
		    x->kind == AGENTFS_FILE) ? base_level(c, x) : PERM_WRITE;

		x->done = true;
		if (j > i && lv != PERM_NONE && ++c->count > c->lim.max_files)
			return err_set(c->e, -EDQUOT, "workspace: %s: over the cap "
			    "of %u entries", x->path, c->lim.max_files);
		if (x->kind != AGENTFS_FILE || lv < PERM_READ)
			continue;
		if (x->size > c->lim.max_bytes - c->bytes)
			return cap_bytes_fail(c, x->path);
		c->bytes += x->size;
	}
	return 0;
}

/* Captures the entry name of the directory pfd (in an overlay, the upper
 * layer's); c->path names it. */
static int
cap_entry(struct cap *c, int pfd, const char *name, size_t plen,
    uint32_t depth)
{
	struct base_ent *be = base_find(c, c->path);
	enum perm_level level = workspace__level_of(c->p, c->path);
	struct stat st;
	int rc;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return workspace__sys_fail(c->e, c->path, "fstatat");
	/* Decided before anything on disk is trusted: at a locked path the
	 * job's entry, whatever its kind or device, changes nothing. */
	if (level < PERM_WRITE)
		return cap_locked(c, pfd, name, &st, be, level, plen, depth);
	/* A mount (even one the job could make in its own namespace) is
	 * not part of the workspace: never enter or copy another device.
	 * Through an overlay, a file shows its layer's device; a folder,
	 * which a mount point would be, the overlay's. */
	if (st.st_dev != c->dev && !(c->lim.layer_devices && !S_ISDIR(st.st_mode)))
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
	return cap_descend(c, pfd, name, &st, plen, depth);
}

/*
 * Overlay: whether the upper layer's entry name of fd (listed with type
 * dtype) is a whiteout, the character device 0:0 overlayfs leaves where
 * the job removed a lower entry. The job cannot make one itself: overlayfs
 * refuses to create a whiteout through the merged tree.
 */
static int
cap_is_whiteout(struct cap *c, int fd, const char *name, unsigned char dtype,
    bool *wh)
{
	struct stat st;

	*wh = false;
	if (dtype != DT_CHR && dtype != DT_UNKNOWN)
		return 0;
	if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return workspace__sys_fail(c->e, c->path, "fstatat");
	*wh = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
	return 0;
}

/*
 * Overlay: marks the entry path[0..plen) + "/" + name of base as removed
 * by the job (its whiteout). Whatever is below it is gone too; the removal
 * pass decides each path as it does for a plain tree.
 */
static void
cap_mark_gone(struct cap *c, size_t plen, const char *name)
{
	char path[AGENTFS_PATH_MAX + 1];
	struct base_ent *be;

	if ((size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)plen, c->path,
	    name) >= sizeof(path))
		return;		/* longer than any path of base */
	if ((be = base_find(c, path)) != NULL)
		be->gone = true;
}

/*
 * Overlay: base's entries directly below the directory c->path[0..plen)
 * (held by the upper layer as fd) that the upper layer does not hold are
 * the lower layer's, unchanged with all below them, and counted as a
 * listing of the merged directory would have counted them; none are read.
 * Left to the removal pass: those under a whiteout, and all of them when
 * the directory is opaque (the job removed it and made it again), as
 * overlayfs shows neither. This is what makes a change beside many files
 * cost what the change costs, not what listing the folder does.
 */
static int
cap_lower_rest(struct cap *c, int fd, size_t plen)
{
	char v[2];
	size_t i, end;
	ssize_t n;
	int rc;

	/* The upper layer's root is never opaque. */
	if (plen > 0) {
		n = fgetxattr(fd, OVL_XATTR_OPAQUE, v, sizeof(v));
		if (n < 0 && errno != ENODATA)
			return workspace__sys_fail(c->e, c->path, "fgetxattr");
		if (n == 1 && v[0] == 'y')
			return 0;
	}
	if (plen == 0) {
		i = 0;
		end = c->n;
	} else {
		struct base_ent *dir = base_find(c, c->path);

		if (dir == NULL || dir->kind != AGENTFS_DIR)
			return 0;	/* the job's own folder: nothing below in base */
		i = (size_t)(dir - c->ents) + 1;
		end = base_run_end(c, dir);
	}
	while (i < end) {
		struct base_ent *be = &c->ents[i];
		size_t next = base_run_end(c, be);

		if (!be->done && !be->gone) {
			if (c->p == NULL || base_level(c, be) != PERM_NONE) {
				if (++c->count > c->lim.max_files)
					return err_set(c->e, -EDQUOT, "workspace: %s: "
					    "over the cap of %u entries", be->path,
					    c->lim.max_files);
			}
			if ((rc = cap_unchanged(c, be)) != 0)
				return rc;
		}
		i = next;
	}
	return 0;
}

/* Lists the directory fd (whose path is c->path[0..plen)), names sorted,
 * and captures each entry. One fd is held per level of nesting. In an
 * overlay, fd is the upper layer's directory: only what the job changed
 * is listed, and cap_lower_rest() settles the rest. */
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
		return workspace__sys_fail(c->e, plen ? c->path : "/",
		    "openat");
	if ((d = fdopendir(lfd)) == NULL) {
		rc = workspace__sys_fail(c->e, plen ? c->path : "/",
		    "fdopendir");
		close(lfd);
		return rc;
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0)
				rc = workspace__sys_fail(c->e,
				    plen ? c->path : "/", "readdir");
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
			if (workspace__level_of(c->p, bad) == PERM_WRITE) {
				rc = workspace__bad_name(c->e, bad, "name");
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
			workspace__str_escape(bad, esc, sizeof(esc));
			refuse_add(c, esc);
			continue;
		}
		if (plen + 1 + strlen(de->d_name) > AGENTFS_PATH_MAX) {
			rc = err_set(c->e, -ENAMETOOLONG, "workspace: %.200s/"
			    "...: path over %d bytes", c->path,
			    AGENTFS_PATH_MAX);
			break;
		}
		if (c->overlay) {
			bool wh;

			if ((rc = cap_is_whiteout(c, fd, de->d_name, de->d_type,
			    &wh)) != 0)
				break;
			if (wh) {
				cap_mark_gone(c, plen, de->d_name);
				continue;
			}
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
	if (rc == 0 && c->overlay)
		rc = cap_lower_rest(c, fd, plen);
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

/*** The growth bound ***/

/* Base's entries, sorted, and its size: what a capture reads before the walk. */
struct workspace_ahead {
	struct base_ent *ents;
	size_t n;
	size_t cap;
	uint64_t base_size;
	bool rules;		/* each entry's level under the capture's rules is set */
};

int
workspace_size(struct agentfs *fs, uint64_t *size, struct err *e)
{
	uint64_t bytes = 0, entries = 0;
	int rc;

	*size = 0;
	if (fs == NULL)
		return 0;
	if ((rc = agentfs_usage(fs, &bytes, &entries, e)) != 0)
		return rc;
	*size = bytes + entries * WORKSPACE_ENTRY_BYTES;
	return 0;
}

/*
 * Before the walk: base's size, and, with max_growth, the files read
 * lowered to what the bound allows. Every file of the result is read or
 * counted by the walk, so the bytes read never pass the result's size:
 * passing base's size plus max_growth already settles it, before a
 * sparse file is read to its end or a hard link once more.
 */
static int
cap_growth_start(struct cap *c, struct agentfs *base, const struct workspace_ahead *a)
{
	uint64_t allow;
	int rc;

	if (c->lim.max_growth == 0)
		return 0;
	if (a != NULL)
		c->base_size = a->base_size;
	else if ((rc = workspace_size(base, &c->base_size, c->e)) != 0)
		return rc;
	allow = c->base_size + c->lim.max_growth;
	if (allow < c->base_size)
		return 0;		/* overflow: no lower cap */
	if (allow < c->lim.max_bytes) {
		c->lim.max_bytes = allow;
		c->growth_cap = true;
	}
	return 0;
}

/* After the walk: out's size against base's plus max_growth. */
static int
cap_growth_check(struct cap *c, struct agentfs *out)
{
	uint64_t size;
	int rc;

	if (c->lim.max_growth == 0)
		return 0;
	if ((rc = workspace_size(out, &size, c->e)) != 0)
		return rc;
	if (size <= c->base_size || size - c->base_size <= c->lim.max_growth)
		return 0;
	return err_set(c->e, -ENOSPC, "workspace: over the disk limit of %llu "
	    "bytes: the snapshot would grow by %llu bytes, from %llu to %llu "
	    "(file sizes with holes as zeros, each name of a hard link in "
	    "full, plus %d bytes an entry)",
	    (unsigned long long)c->lim.max_growth,
	    (unsigned long long)(size - c->base_size),
	    (unsigned long long)c->base_size, (unsigned long long)size,
	    WORKSPACE_ENTRY_BYTES);
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
	workspace__limits_resolve(lim, &c.lim);
	if (fstat(dirfd, &st) != 0)
		return workspace__sys_fail(e, "/", "fstat");
	if (!S_ISDIR(st.st_mode))
		return err_set(e, -ENOTDIR, "workspace: /: not a directory");
	c.dev = st.st_dev;
	if ((rc = cap_growth_start(&c, base, NULL)) != 0)
		goto out_free;

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
	if ((rc = cap_remove_missing(&c)) != 0 ||
	    (rc = cap_growth_check(&c, c.out)) != 0)
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

int
workspace_capture_ahead(struct agentfs *fs, const struct perms *p,
    struct workspace_ahead **out, struct err *e)
{
	struct workspace_ahead *a = xcalloc(1, sizeof(*a));
	struct cap c = { .base = fs, .e = e };
	int rc;

	*out = NULL;
	err_clear(e);
	if ((rc = workspace_size(fs, &a->base_size, e)) == 0)
		rc = agentfs_walk(fs, cap_collect_cb, &c, e);
	if (rc == 0 && c.n > 1)
		qsort(c.ents, c.n, sizeof(*c.ents), base_ent_cmp);
	/* The rules' verdict on each entry: most are left unchanged, and
	 * still counted by level (cap_unchanged()). */
	for (size_t i = 0; rc == 0 && p != NULL && i < c.n; i++)
		c.ents[i].rule = perms_check(p, c.ents[i].path);
	a->rules = p != NULL;
	a->ents = c.ents;
	a->n = c.n;
	a->cap = c.cap;
	if (rc != 0) {
		workspace_ahead_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void
workspace_ahead_free(struct workspace_ahead *a)
{
	if (a == NULL)
		return;
	for (size_t i = 0; i < a->n; i++) {
		free(a->ents[i].path);
		free(a->ents[i].target);
	}
	free(a->ents);
	free(a);
}

/*
 * A capture made in place on fs of dirfd: an overlay's upper layer if
 * overlay, else a plain tree. a, if not NULL, is fs's entries and size
 * read ahead (taken over and freed).
 */
static int
capture_inplace(int dirfd, bool overlay, struct agentfs *fs,
    struct workspace_ahead *a, const struct workspace_limits *lim,
    const struct perms *p, struct workspace_changes *ch, struct err *e)
{
	struct cap c = { .base = fs, .out = fs, .p = p, .e = e, .overlay = overlay };
	bool ahead = a != NULL;
	struct stat st = { 0 };
	int rc;

	err_clear(e);
	memset(ch, 0, sizeof(*ch));
	c.ch = ch;
	workspace__limits_resolve(lim, &c.lim);
	if (ahead) {
		c.ents = a->ents;
		c.n = a->n;
		c.cap = a->cap;
		c.rules_ahead = a->rules && p != NULL;
		a->ents = NULL;
		a->n = 0;
	}
	rc = fstat(dirfd, &st) != 0 ? workspace__sys_fail(e, "/", "fstat") : 0;
	c.dev = st.st_dev;
	if (rc == 0 && !S_ISDIR(st.st_mode))
		rc = err_set(e, -ENOTDIR, "workspace: /: not a directory");
	if (rc == 0)
		rc = cap_growth_start(&c, fs, a);
	workspace_ahead_free(a);
	/*
	 * One handle is both base and result: every path's base state is
	 * read (to compare) before that path is written, and never after, so
	 * reading through the copy being rewritten reads base. Entries read
	 * ahead were read from the same handle before any write.
	 */
	if (rc == 0 && !ahead)
		rc = agentfs_walk(fs, cap_collect_cb, &c, e);
	if (rc == 0 && !ahead && c.n > 1)
		qsort(c.ents, c.n, sizeof(*c.ents), base_ent_cmp);
	if (rc == 0) {
		c.path[0] = '\0';
		rc = cap_dir(&c, dirfd, 0, 0);
		if (rc == 0)
			rc = cap_remove_missing(&c);
		if (rc == 0)
			rc = cap_growth_check(&c, fs);
	}
	for (size_t i = 0; i < c.n; i++) {
		free(c.ents[i].path);
		free(c.ents[i].target);
	}
	free(c.ents);
	return rc;
}

int
workspace_capture_overlay(int upperfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e)
{
	return capture_inplace(upperfd, true, fs, NULL, lim, p, ch, e);
}

int
workspace_capture_overlay_ahead(int upperfd, struct agentfs *fs,
    struct workspace_ahead *a, const struct workspace_limits *lim,
    const struct perms *p, struct workspace_changes *ch, struct err *e)
{
	return capture_inplace(upperfd, true, fs, a, lim, p, ch, e);
}

int
workspace_capture_inplace(int dirfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e)
{
	return capture_inplace(dirfd, false, fs, NULL, lim, p, ch, e);
}
