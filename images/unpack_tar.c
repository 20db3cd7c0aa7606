/*
 * unpack_tar.c - one layer's entries, read by libarchive and written into
 * the working directory (the unpacking child's temporary directory), each
 * checked and neutralised on the way.
 *
 * DESIGN. The layer is a tenant's bytes, so two layers of defence stand
 * between a name and the disk. First, this file: every name is normalised
 * here (absolute names made relative, `..` refused, bounded length and
 * depth), whiteouts are turned into overlayfs's form, special files
 * dropped, modes stripped of setuid and setgid, hard links checked against
 * what the layer already wrote, and each entry's parent directories are
 * walked (and created) one component at a time with O_NOFOLLOW, a symlink
 * anywhere on the way refusing the entry. Second, libarchive's disk
 * writer, which then creates the entry, runs with ARCHIVE_EXTRACT_
 * SECURE_SYMLINKS, SECURE_NODOTDOT and SECURE_NOABSOLUTEPATHS and does
 * its own walk: it would refuse the same names even if the first layer
 * let one through. Neither restores owners, xattrs, ACLs or file flags.
 *
 * Bounds are checked as the archive is read, before the bytes they bound
 * are written: an entry's declared size against max_bytes at its header,
 * the entry count at each header, the decompression ratio after each block
 * the decompressor hands over (so a bomb stops within a block of the
 * limit, not after it is on disk).
 *
 * Sections: messages, names, the directory walk, whiteouts, entries, the
 * layer.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "unpack_int.h"

#define WH_PREFIX ".wh."		/* OCI whiteout: .wh.NAME hides NAME */
#define WH_OPAQUE ".wh..wh..opq"	/* OCI opaque marker: hides all of the directory below */
#define WH_META ".wh..wh."		/* aufs metadata (.wh..wh.plnk, ...): not content */
/* The overlayfs xattrs of a lower layer mounted with userxattr. */
#define OVL_OPAQUE "user.overlay.opaque"
#define OVL_WHITEOUT "user.overlay.whiteout"
#define OVL_WHITEOUTS "user.overlay.whiteouts"
#define ESC_MAX 64			/* tenant bytes shown in a message */
#define READ_BLOCK 65536		/* bytes libarchive reads from fd at a time */
#define RM_DEPTH_MAX (IMG_UNPACK_DEPTH_MAX + 16)

/* The layer being unpacked: the two archives and what bounds them. */
struct layer {
	struct archive *in;		/* reader of the tar stream */
	struct archive *out;		/* disk writer, relative to the working directory */
	const char *what;		/* names the layer in messages */
	const struct img_unpack_limits *lim;
	struct img_unpack_stats *st;
	struct err *e;
	int root;			/* the working directory, O_RDONLY */
	mode_t root_mode;		/* the root's mode at the end */
	bool root_time;			/* the layer named the root: set its mtime */
	struct timespec root_mtime;	/* that mtime */
	char name[PATH_MAX];		/* the current entry's normalised name */
	char link[PATH_MAX];		/* its hard link target, normalised */
};

/*** Messages ***/

/*
 * Copies tenant bytes s into buf (bufsz >= 4 * ESC_MAX + 4) for a message:
 * bytes outside printable ASCII and backslashes as \xNN, and single quotes
 * too when quote is set (a name shown between quotes cannot close them);
 * past ESC_MAX bytes "...". Returns buf.
 */
static const char *
esc(const char *s, char *buf, size_t bufsz, bool quote)
{
	size_t i, o = 0;
	unsigned char c;

	if (s == NULL)
		s = "";
	for (i = 0; s[i] != '\0' && o + 5 < bufsz; i++) {
		if (i == ESC_MAX) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		c = (unsigned char)s[i];
		if (c < 0x20 || c >= 0x7f || c == '\\' || (quote && c == '\''))
			o += (size_t)snprintf(buf + o, bufsz - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

static int refuse(struct layer *l, int code, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Fills l->e with "WHAT: WHY: 'NAME'" (or "WHAT: WHY" when name is NULL),
 * the reason before the name so that a long name is what a full message
 * loses, and returns code.
 */
static int
refuse(struct layer *l, int code, const char *name, const char *fmt, ...)
{
	char why[160], q[4 * ESC_MAX + 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (name == NULL)
		return err_set(l->e, code, "%s: %s", l->what, why);
	return err_set(l->e, code, "%s: %s: '%s'", l->what, why,
	    esc(name, q, sizeof(q), true));
}

/*
 * The failure of one of libarchive's calls on a: its message (which may
 * quote the archive's bytes, so escaped) after what. Returns code.
 */
static int
archive_fail(struct layer *l, struct archive *a, int code, const char *what)
{
	char q[4 * ESC_MAX + 8];
	const char *msg = archive_error_string(a);

	return err_set(l->e, code, "%s: %s: %s", l->what, what,
	    esc(msg != NULL ? msg : "unknown error", q, sizeof(q), false));
}

/*** Names ***/

/*
 * Normalises raw, an entry's name or a hard link's target, into out
 * (PATH_MAX bytes): leading slashes dropped (an absolute name is relative
 * to the layer's root, where it lands at run time anyway), empty and "."
 * components dropped, ".." refused wherever it is (never resolved: a name
 * means what it says or nothing), a `.wh.` component anywhere but last
 * refused (whiteouts are markers, never directories). Returns the number
 * of components (0: the root itself) or a negative errno; role ("an
 * entry", "a hard link's target") names raw in messages.
 */
static int
norm_name(struct layer *l, const char *raw, char *out, const char *role)
{
	const char *p = raw, *c;
	size_t len, o = 0;
	int n = 0;

	if (raw == NULL)
		return refuse(l, -EINVAL, NULL, "%s without a name (entry %ju)",
		    role, (uintmax_t)l->st->entries);
	if (strlen(raw) >= PATH_MAX)
		return refuse(l, -ENAMETOOLONG, raw, "%s longer than %d bytes",
		    role, PATH_MAX - 1);
	for (;;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		c = p;
		while (*p != '/' && *p != '\0')
			p++;
		len = (size_t)(p - c);
		if (len == 1 && c[0] == '.')
			continue;
		if (len == 2 && c[0] == '.' && c[1] == '.')
			return refuse(l, -EINVAL, raw, "'..' in %s is refused",
			    role);
		if (len > NAME_MAX)
			return refuse(l, -ENAMETOOLONG, raw, "%s with a "
			    "component longer than %d bytes", role, NAME_MAX);
		if (++n > IMG_UNPACK_DEPTH_MAX)
			return refuse(l, -ENAMETOOLONG, raw,
			    "%s deeper than %d components", role,
			    IMG_UNPACK_DEPTH_MAX);
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, c, len);
		o += len;
	}
	out[o] = '\0';
	/* Every component but the last: no whiteout marker among them. */
	for (c = out; (p = strchr(c, '/')) != NULL; c = p + 1)
		if (strncmp(c, WH_PREFIX, strlen(WH_PREFIX)) == 0)
			return refuse(l, -EINVAL, raw,
			    "a whiteout name as a directory in %s", role);
	return n;
}

/* The last component of a normalised name. */
static const char *
base_of(const char *name)
{
	const char *s = strrchr(name, '/');

	return s != NULL ? s + 1 : name;
}

/*** The directory walk ***/

/*
 * Opens the directory holding name (normalised; its last component is
 * left out) one component at a time from the root, never following a
 * symlink: one on the way is refused, so nothing is ever written through
 * it. With create, a missing directory is made (0755, as the layer had
 * named it without saying more) and a non-directory in the way (a
 * whiteout, a file) is replaced by one, as a later entry of a changeset
 * supersedes an earlier one. Returns an O_RDONLY descriptor (the caller
 * closes it) or a negative errno: -ELOOP a symlink on the way, -ENOENT or
 * -ENOTDIR (without create) a missing directory.
 */
static int
open_parent(struct layer *l, const char *name, bool create)
{
	char comp[NAME_MAX + 1];
	const char *p = name, *slash;
	struct stat sb;
	size_t len;
	int dfd, nfd;

	dfd = fcntl(l->root, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	while ((slash = strchr(p, '/')) != NULL) {
		len = (size_t)(slash - p);
		if (len > NAME_MAX) {
			close(dfd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		p = slash + 1;
		if (fstatat(dfd, comp, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			if (errno != ENOENT || !create)
				goto out_errno;
			if (mkdirat(dfd, comp, 0755) != 0)
				goto out_errno;
		} else if (S_ISLNK(sb.st_mode)) {
			close(dfd);
			return -ELOOP;
		} else if (!S_ISDIR(sb.st_mode)) {
			if (!create) {
				close(dfd);
				return -ENOTDIR;
			}
			if (unlinkat(dfd, comp, 0) != 0 ||
			    mkdirat(dfd, comp, 0755) != 0)
				goto out_errno;
		}
		/* O_NOFOLLOW again: the check above is not the only guard. */
		nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (nfd < 0)
			goto out_errno;
		close(dfd);
		dfd = nfd;
	}
	return dfd;

out_errno:
	nfd = -errno;
	close(dfd);
	return nfd;
}

/*
 * True if leaf (in dfd, lstat'ed into sb) is an overlayfs whiteout: a 0/0
 * character device, or a zero-size regular file with OVL_WHITEOUT.
 */
static bool
is_whiteout(int dfd, const char *leaf, const struct stat *sb)
{
	ssize_t n;
	int fd;

	if (S_ISCHR(sb->st_mode))
		return sb->st_rdev == makedev(0, 0);
	if (!S_ISREG(sb->st_mode) || sb->st_size != 0)
		return false;
	fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = fgetxattr(fd, OVL_WHITEOUT, NULL, 0);
	close(fd);
	return n >= 0;
}

/*
 * Makes way for an entry of type `type` at leaf (in dfd), as the OCI spec
 * applies a changeset over existing files: two directories merge (the
 * entry's attributes win, libarchive sets them), anything else already
 * there is removed first, so no entry is ever written into an existing
 * inode (a hard link's, a symlink's target). Replacing a directory the
 * layer made by a non-directory is refused: a layer never needs it, and
 * libarchive may still hold that directory's mode and times to set at the
 * end. Returns 0 or a negative errno (l->e filled).
 */
static int
clear_leaf(struct layer *l, int dfd, const char *leaf, mode_t type)
{
	struct stat sb;

	if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT)
			return 0;
		return refuse(l, -errno, l->name, "cannot look at: %s",
		    strerror(errno));
	}
	if (S_ISDIR(sb.st_mode)) {
		if (type == AE_IFDIR)
			return 0;
		return refuse(l, -EINVAL, l->name,
		    "a non-directory over a directory of the same layer");
	}
	if (unlinkat(dfd, leaf, 0) != 0)
		return refuse(l, -errno, l->name, "cannot replace: %s",
		    strerror(errno));
	return 0;
}

/*** Whiteouts ***/

/*
 * The overlayfs whiteout for name at leaf in dfd when mknod is refused: a
 * zero-size regular file with OVL_WHITEOUT, its directory marked with
 * OVL_WHITEOUTS (Linux 6.7) and OVL_OPAQUE "x" (6.8 on, and 6.7's stable
 * updates: "holds xattr whiteouts", unless the directory is opaque "y"
 * already, which hides the lower entries anyway). Only kernels from 6.7
 * on, mounting with userxattr, read it: on 5.8 and later an unprivileged
 * mknod of 0/0 succeeds, so this serves only where something else refuses
 * it (a seccomp filter, an LSM, a kernel before 5.8 without CAP_MKNOD).
 */
static int
whiteout_file(int dfd, const char *leaf)
{
	char v;
	int fd;

	fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fsetxattr(fd, OVL_WHITEOUT, "y", 1, 0) != 0) {
		fd = -errno;
		unlinkat(dfd, leaf, 0);
		return fd;
	}
	close(fd);
	if (fsetxattr(dfd, OVL_WHITEOUTS, "y", 1, 0) != 0)
		return -errno;
	if (fgetxattr(dfd, OVL_OPAQUE, &v, 1) == 1 && v == 'y')
		return 0;
	if (fsetxattr(dfd, OVL_OPAQUE, "x", 1, 0) != 0)
		return -errno;
	return 0;
}

/*
 * Applies the marker entry l->name (last component starting with `.wh.`):
 * `.wh..wh..opq` makes its directory opaque (OVL_OPAQUE "y"), `.wh.NAME`
 * puts a whiteout at NAME, other `.wh..wh.` names (aufs metadata) are
 * dropped. The marker itself never appears. Per the OCI spec a whiteout
 * hides only lower layers: when this layer already has NAME, the whiteout
 * is skipped, and an entry NAME later in the layer replaces it
 * (clear_leaf); the opaque marker hides lower layers only by its nature.
 * Returns 0 or a negative errno.
 */
static int
whiteout(struct layer *l)
{
	const char *leaf = base_of(l->name), *victim;
	bool opaque = strcmp(leaf, WH_OPAQUE) == 0;
	struct stat sb;
	int dfd, r = 0;

	if (!opaque && strncmp(leaf, WH_META, strlen(WH_META)) == 0) {
		l->st->dropped_other++;
		return 0;
	}
	victim = leaf + strlen(WH_PREFIX);
	if (!opaque && (victim[0] == '\0' || strcmp(victim, ".") == 0 ||
	    strcmp(victim, "..") == 0))
		return refuse(l, -EINVAL, l->name,
		    "a whiteout that names no sibling");
	dfd = open_parent(l, l->name, true);
	if (dfd == -ELOOP)
		return refuse(l, -EINVAL, l->name,
		    "a whiteout through a symlink is refused");
	if (dfd < 0)
		return refuse(l, dfd, l->name,
		    "cannot make the whiteout's directory: %s", strerror(-dfd));
	if (opaque) {
		if (fsetxattr(dfd, OVL_OPAQUE, "y", 1, 0) != 0)
			r = refuse(l, -errno, l->name, "cannot set %s (user "
			    "xattrs on this filesystem?): %s", OVL_OPAQUE,
			    strerror(errno));
		else
			l->st->opaque++;
		close(dfd);
		return r;
	}
	if (fstatat(dfd, victim, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		/* This layer has it: the whiteout is for lower layers only. */
		close(dfd);
		return 0;
	}
	if (mknodat(dfd, victim, S_IFCHR | 0, makedev(0, 0)) != 0)
		r = errno == EPERM ? whiteout_file(dfd, victim) : -errno;
	close(dfd);
	if (r < 0)
		return refuse(l, r, l->name, "cannot make the whiteout: %s",
		    strerror(-r));
	l->st->whiteouts++;
	return 0;
}

/*** Entries ***/

/*
 * Checks the hard link entry ae, whose target is raw: the target must be a
 * regular file or symlink this layer already wrote (not a whiteout, not a
 * directory), reached without a symlink on the way, so the link cannot
 * leave the layer or reach a later entry. Points ae at the normalised
 * target and drops any data it carries (a link's bytes are its target's).
 * Returns 1 to write the entry, 0 to skip it (a link to itself), or a
 * negative errno.
 */
static int
link_entry(struct layer *l, struct archive_entry *ae, const char *raw)
{
	const char *leaf;
	struct stat sb;
	int dfd, n;

	n = norm_name(l, raw, l->link, "a hard link's target");
	if (n < 0)
		return n;
	if (n == 0 || strncmp(base_of(l->link), WH_PREFIX,
	    strlen(WH_PREFIX)) == 0)
		return refuse(l, -EINVAL, l->name,
		    "a hard link to the layer's root or a whiteout");
	if (strcmp(l->link, l->name) == 0)
		return 0;
	dfd = open_parent(l, l->link, false);
	if (dfd == -ELOOP)
		return refuse(l, -EINVAL, l->name,
		    "a hard link through a symlink");
	if (dfd < 0)
		goto out_missing;
	leaf = base_of(l->link);
	if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !(S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) ||
	    is_whiteout(dfd, leaf, &sb)) {
		close(dfd);
		goto out_missing;
	}
	close(dfd);
	archive_entry_copy_hardlink(ae, l->link);
	archive_entry_set_size(ae, 0);
	return 1;

out_missing:
	return refuse(l, -EINVAL, l->name,
	    "a hard link to a path that is not an earlier file of this layer");
}

/*
 * Past max_ratio? un is the uncompressed bytes read so far, compared with
 * the compressed bytes the decompressor consumed. 0 or -EFBIG.
 */
static int
check_ratio(struct layer *l, uint64_t pending)
{
	int64_t un = archive_filter_bytes(l->in, 0);
	int64_t comp = archive_filter_bytes(l->in, -1);
	uint64_t u;

	if (l->lim->max_ratio == 0 || un < 0 || comp <= 0)
		return 0;
	u = (uint64_t)un + pending;
	if (u < IMG_UNPACK_RATIO_FLOOR ||
	    u / (uint64_t)comp <= l->lim->max_ratio)
		return 0;
	return refuse(l, -EFBIG, NULL,
	    "decompresses more than %u times (%ju bytes from %jd): refused "
	    "as a decompression bomb", l->lim->max_ratio, (uintmax_t)u,
	    (intmax_t)comp);
}

/*
 * Copies the current entry's data to the file libarchive's writer opened,
 * one decompressed block at a time, the ratio checked before each block
 * is written. 0 or a negative errno.
 */
static int
copy_data(struct layer *l)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	for (;;) {
		r = archive_read_data_block(l->in, &buf, &len, &off);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN)
			return archive_fail(l, l->in, -EBADMSG,
			    "corrupt or truncated archive");
		r = check_ratio(l, len);
		if (r < 0)
			return r;
		if (len == 0)
			continue;
		if (archive_write_data_block(l->out, buf, len, off) <
		    ARCHIVE_WARN)
			return archive_fail(l, l->out, -EIO, "cannot write");
		l->st->written += len;
	}
}

/*
 * Unpacks the entry ae just read: a marker becomes a whiteout, a device or
 * other special file is dropped, anything else is checked, neutralised and
 * written (with its data for a regular file). 0 or a negative errno.
 */
static int
entry(struct layer *l, struct archive_entry *ae)
{
	const char *hard = archive_entry_hardlink(ae);
	mode_t type = archive_entry_filetype(ae), mode = archive_entry_perm(ae);
	uint64_t size;
	int n, dfd, r;

	n = norm_name(l, archive_entry_pathname(ae), l->name, "an entry");
	if (n < 0)
		return n;
	if (n == 0) {
		/* "./" or "/": the layer's root, which is ours already. */
		if (type != AE_IFDIR || hard != NULL)
			return refuse(l, -EINVAL, archive_entry_pathname(ae),
			    "the layer's root as a non-directory");
		l->root_mode = mode & (0777 | S_ISVTX);
		if (mode & (S_ISUID | S_ISGID))
			l->st->cleared_setid++;
		l->root_time = true;
		l->root_mtime.tv_sec = archive_entry_mtime(ae);
		l->root_mtime.tv_nsec = archive_entry_mtime_nsec(ae);
		return 0;
	}
	if (strncmp(base_of(l->name), WH_PREFIX, strlen(WH_PREFIX)) == 0)
		return whiteout(l);
	if (hard != NULL) {
		r = link_entry(l, ae, hard);
		if (r <= 0)
			return r;
		/* The link shares its target's inode: no mode of its own. */
		type = AE_IFREG;
		archive_entry_set_perm(ae, mode & 0777);
	} else {
		switch (type) {
		case AE_IFREG:
			size = archive_entry_size_is_set(ae) &&
			    archive_entry_size(ae) > 0 ?
			    (uint64_t)archive_entry_size(ae) : 0;
			if (l->lim->max_bytes > 0 &&
			    size > l->lim->max_bytes - l->st->bytes)
				return refuse(l, -EFBIG, l->name,
				    "files of more than %ju bytes in all, at",
				    (uintmax_t)l->lim->max_bytes);
			l->st->bytes += size;
			break;
		case AE_IFDIR:
		case AE_IFLNK:
			break;
		case AE_IFCHR:
		case AE_IFBLK:
			l->st->dropped_devices++;
			return 0;
		default:
			l->st->dropped_other++;
			return 0;
		}
		if (mode & (S_ISUID | S_ISGID))
			l->st->cleared_setid++;
		archive_entry_set_perm(ae, mode & (0777 | S_ISVTX));
	}
	/* Belt and braces: the writer's flags ask for none of these. */
	archive_entry_xattr_clear(ae);
	archive_entry_acl_clear(ae);
	archive_entry_set_fflags(ae, 0, 0);
	archive_entry_copy_pathname(ae, l->name);

	dfd = open_parent(l, l->name, true);
	if (dfd < 0)
		return refuse(l, dfd == -ELOOP ? -EINVAL : dfd, l->name, "%s",
		    dfd == -ELOOP ? "writing through a symlink is refused" :
		    strerror(-dfd));
	r = clear_leaf(l, dfd, base_of(l->name), type);
	close(dfd);
	if (r < 0)
		return r;
	if (archive_write_header(l->out, ae) < ARCHIVE_WARN)
		return archive_fail(l, l->out, -EINVAL, "refused by the writer");
	if (type == AE_IFREG && hard == NULL) {
		r = copy_data(l);
		if (r < 0)
			return r;
	}
	if (archive_write_finish_entry(l->out) < ARCHIVE_WARN)
		return archive_fail(l, l->out, -EIO, "cannot finish an entry");
	return 0;
}

/*** The layer ***/

/* ARCHIVE_EXTRACT_* for every entry; see the DESIGN paragraph. */
#define EXTRACT_FLAGS (ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | \
	ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT | \
	ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS)

int
unpack__tar(int fd, const char *what, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	static const struct img_unpack_limits none;
	struct archive_entry *ae;
	struct timespec ts[2];
	struct layer *l;
	int r = 0;

	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return err_set(e, -ENOMEM, "%s: out of memory", what);
	l->what = what;
	l->lim = lim != NULL ? lim : &none;
	l->st = st;
	l->e = e;
	l->root_mode = 0755;
	l->root = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (l->root < 0) {
		r = err_set(e, -errno, "%s: cannot open the directory: %s",
		    what, strerror(errno));
		goto out_free;
	}
	/*
	 * Only tar, and only the compressions OCI layers use (gzip, zstd,
	 * none): nothing else of libarchive's parsers sees the bytes.
	 * Debian's libarchive has zstd built in, so no external program runs.
	 */
	l->in = archive_read_new();
	l->out = archive_write_disk_new();
	if (l->in == NULL || l->out == NULL) {
		r = err_set(e, -ENOMEM, "%s: out of memory", what);
		goto out_archives;
	}
	archive_read_support_format_tar(l->in);
	archive_read_support_filter_gzip(l->in);
	archive_read_support_filter_zstd(l->in);
	if (archive_write_disk_set_options(l->out, EXTRACT_FLAGS) != ARCHIVE_OK) {
		r = archive_fail(l, l->out, -EINVAL, "cannot set up the writer");
		goto out_archives;
	}
	if (archive_read_open_fd(l->in, fd, READ_BLOCK) != ARCHIVE_OK) {
		r = archive_fail(l, l->in, -EBADMSG,
		    "corrupt or truncated archive");
		goto out_archives;
	}
	for (;;) {
		r = archive_read_next_header(l->in, &ae);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			r = archive_fail(l, l->in, -EBADMSG,
			    "corrupt or truncated archive");
			goto out_archives;
		}
		if (l->lim->max_entries > 0 &&
		    st->entries >= l->lim->max_entries) {
			r = refuse(l, -E2BIG, NULL, "more than %ju entries",
			    (uintmax_t)l->lim->max_entries);
			goto out_archives;
		}
		st->entries++;
		r = check_ratio(l, 0);
		if (r == 0)
			r = entry(l, ae);
		if (r < 0)
			goto out_archives;
	}
	r = 0;
	/* Directories' modes and times, which libarchive keeps for the end. */
	if (archive_write_close(l->out) < ARCHIVE_WARN) {
		r = archive_fail(l, l->out, -EIO, "cannot finish the layer");
		goto out_archives;
	}
	if (fchmod(l->root, l->root_mode) != 0) {
		r = err_set(e, -errno, "%s: cannot set the root's mode: %s",
		    what, strerror(errno));
		goto out_archives;
	}
	if (l->root_time) {
		ts[0] = l->root_mtime;
		ts[1] = l->root_mtime;
		if (futimens(l->root, ts) != 0) {
			r = err_set(e, -errno, "%s: cannot set the root's "
			    "time: %s", what, strerror(errno));
			goto out_archives;
		}
	}

out_archives:
	/* Freeing the writer applies its pending fixups: still in our directory. */
	if (l->out != NULL)
		archive_write_free(l->out);
	if (l->in != NULL)
		archive_read_free(l->in);
	close(l->root);
out_free:
	free(l);
	return r;
}

/*
 * Gives the directory behind fd (O_PATH, not a symlink) owner rwx,
 * through /proc/self/fd: fchmod() refuses an O_PATH descriptor, and
 * fchmodat() has no AT_SYMLINK_NOFOLLOW before Linux 6.6.
 */
static int
own_rwx(int fd, mode_t mode)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return chmod(path, (mode & 07777) | 0700) == 0 ? 0 : -errno;
}

/* unpack__rm_tree() below depth levels. */
static int
rm_at(int dirfd, const char *name, int depth)
{
	struct dirent *de;
	struct stat sb;
	DIR *dir;
	int fd, r = 0, rr;

	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(sb.st_mode))
		return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 :
		    -errno;
	if (depth >= RM_DEPTH_MAX)
		return -ELOOP;
	if ((sb.st_mode & 0700) != 0700) {
		fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (fd < 0)
			return -errno;
		r = own_rwx(fd, sb.st_mode);
		close(fd);
		if (r < 0 && r != -EPERM)
			return r;
		r = 0;
	}
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	dir = fdopendir(fd);
	if (dir == NULL) {
		r = -errno;
		close(fd);
		return r;
	}
	while ((de = readdir(dir)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		rr = rm_at(fd, de->d_name, depth + 1);
		if (rr < 0 && r == 0)
			r = rr;
	}
	closedir(dir);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT &&
	    r == 0)
		r = -errno;
	return r;
}

int
unpack__rm_tree(int dirfd, const char *name)
{
	return rm_at(dirfd, name, 0);
}
