/*
 * unpack.h - one OCI image layer (a tenant's tar stream, gzip- or
 * zstd-compressed or not) unpacked into a new directory that overlayfs can
 * use as a lower layer when mounted with `userxattr` in a user namespace.
 *
 * A layer is hostile input (docs/images.md, "Unpacking layers"): names
 * with `..` are refused, absolute names made relative, nothing is written
 * through a symlink, hard links reach only earlier files of the same
 * layer, device nodes and other special files are dropped, setuid and
 * setgid bits cleared, ownership not kept, and the layer's bytes, entries
 * and decompression ratio are bounded as it is read. OCI whiteouts become
 * overlayfs whiteouts (`DIR/.wh.NAME`: a 0/0 character device at DIR/NAME)
 * and opaque markers (`DIR/.wh..wh..opq`) the `user.overlay.opaque` xattr
 * on DIR.
 *
 * Lifecycle: none. Each call unpacks one layer in a child process it forks
 * and waits for (img_unpack_layer_as() drops that child's privileges
 * first), into a temporary directory beside dest that is renamed to dest
 * only when the whole layer is in and removed on any failure: dest is
 * either complete or absent. The caller must not reap children it did not
 * start (waitpid(-1)) while a call runs.
 */
#ifndef SANDQ_IMAGES_UNPACK_H
#define SANDQ_IMAGES_UNPACK_H

#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"

/*
 * The temporary directory's name starts with this, beside dest: after a
 * crash of the caller itself (the only way one outlives a call), whoever
 * owns the directory removes such leftovers.
 */
#define IMG_UNPACK_TMP_PREFIX ".unpack."
/* Uncompressed bytes read before max_ratio applies (a tiny layer's tar padding compresses well). */
#define IMG_UNPACK_RATIO_FLOOR (1024 * 1024)
/* Components in an entry's name, at most. */
#define IMG_UNPACK_DEPTH_MAX 256
/* The child's CPU seconds when max_cpu_seconds is 0 (RLIMIT_CPU). */
#define IMG_UNPACK_CPU_DEFAULT 900

/* Bounds of one layer; 0 means no bound for each of the first three. */
struct img_unpack_limits {
	uint64_t max_bytes;		/* sum of regular files' sizes in the layer */
	uint64_t max_entries;		/* tar entries */
	uint32_t max_ratio;		/* uncompressed bytes read / compressed bytes read, checked as it goes (0 = none) */
	uint32_t max_cpu_seconds;	/* the child's RLIMIT_CPU (0: IMG_UNPACK_CPU_DEFAULT) */
};

/* What one layer held; filled on failure too (what was done before it). */
struct img_unpack_stats {
	uint64_t bytes, entries, whiteouts, opaque;
	uint64_t dropped_devices, cleared_setid;	/* neutralised entries */
	uint64_t dropped_other;		/* FIFOs, sockets, unknown types, aufs `.wh..wh.` metadata */
	uint64_t written;		/* file data bytes written (bytes counts declared sizes) */
};

/*
 * The unpacker's binary (sandq-unpack), for a caller whose own folder does
 * not hold it: NULL or "" to look for it again (beside the running
 * program, one folder up, then in SANDQ_LIBEXECDIR).
 */
void img_unpack_set_helper(const char *path);

/*
 * Unpacks one OCI layer (a tar, gzip- or zstd-compressed or not: detect) read from fd into a
 * new directory dest (which must not exist): into a sibling temporary directory first,
 * renamed to dest only when the whole layer is in, removed on any failure (never a
 * half-unpacked dest). `what` names the layer in messages (e.g. "image X layer sha256:ab..";
 * sandq's own text: escape what a tenant chose before).
 *
 * The work runs in a forked child with the caller's credentials (NO_NEW_PRIVS, RLIMIT_FSIZE
 * at max_bytes, RLIMIT_CPU, every other descriptor closed): libarchive's paths are then
 * relative to the child's own working directory, the temporary directory, so all three of
 * its SECURE flags apply, and a parser bug cannot corrupt the caller. fd is read from its
 * current offset and not closed. Everything is owned by the caller's uid; the root of dest
 * is 0755 unless the layer names it.
 *
 * Returns 0 and fills st (may be NULL), or a negative errno with e naming the layer and,
 * for a refused entry, the entry (escaped): -EEXIST dest exists, -EINVAL a refused entry
 * (`..`, a link leaving the layer, writing through a symlink, a bad whiteout),
 * -ENAMETOOLONG a name past PATH_MAX or IMG_UNPACK_DEPTH_MAX, -EFBIG past max_bytes or
 * max_ratio, -E2BIG past max_entries, -EBADMSG a corrupt or truncated archive, -ECHILD
 * the child died; otherwise the failing call's errno.
 */
int img_unpack_layer(int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e);
/*
 * The same in a child process that first drops to uid/gid (setresgid, setgroups(0),
 * setresuid; PR_SET_NO_NEW_PRIVS; RLIMIT_FSIZE/CPU bounds), so hostile layer bytes are never
 * handled by root; dest's parent must be writable by uid. Waits for it and returns its
 * verdict and message (pass them back over a pipe). uid and gid 0 are refused (-EINVAL);
 * a caller without CAP_SETUID/CAP_SETGID gets -EPERM unless they are its own.
 */
int img_unpack_layer_as(uid_t uid, gid_t gid, int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e);

#endif
