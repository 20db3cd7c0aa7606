/*
 * unpack_int.h - between the two files of the unpacker: unpack.c (the
 * child process, its privileges and its verdict) calls unpack_tar.c (the
 * layer's entries, in that child); never the other way.
 */
#ifndef SANDQ_IMAGES_UNPACK_INT_H
#define SANDQ_IMAGES_UNPACK_INT_H

#include "unpack.h"

/*
 * Unpacks the layer read from fd into the working directory, which must be
 * a new, empty directory of the calling process's own (the child's
 * temporary directory): every name handed to libarchive is relative to it.
 * Sets the directory's own mode (0755 unless the layer names it) and
 * mtime. Counts into st as it goes, also on failure. Returns 0 or a
 * negative errno with e naming the layer (`what`) and the entry; what is
 * in the directory on failure is for the caller to remove.
 */
int unpack__tar(int fd, const char *what, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e);
/*
 * Removes name (relative to dirfd) and, when it is a directory, all it
 * holds, depth first, never following a symlink: a symlink is removed, not
 * its target. A directory the layer left without owner rwx gets it first.
 * Returns 0 (name absent included) or the first failure's negative errno,
 * removing what it can past it.
 */
int unpack__rm_tree(int dirfd, const char *name);

#endif
