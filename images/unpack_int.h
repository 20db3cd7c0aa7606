/*
 * unpack_int.h - between the files of the unpacker: unpack.c (the caller's
 * side: it starts the unpacker and reads its verdict), unpack_child.c (the
 * unpacker's process: its privileges, its bounds, its verdict; the whole
 * of sandq-unpack with unpack_main.c) and unpack_tar.c (the layer's
 * entries, in that process). unpack.c and unpack_child.c call
 * unpack_tar.c, never the other way.
 */
#ifndef SANDQ_IMAGES_UNPACK_INT_H
#define SANDQ_IMAGES_UNPACK_INT_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "unpack.h"

#define UNPACK_TMP_NAME_MAX 64		/* IMG_UNPACK_TMP_PREFIX and 16 hex digits */
#define UNPACK_WHAT_MAX 128		/* bytes of the layer's name kept */
#define UNPACK_HELPER "sandq-unpack"	/* the unpacker's binary */

/* The unpacker's descriptors once it runs (its stdin, stdout, stderr: /dev/null). */
#define UNPACK_FD_LAYER 3		/* the layer's bytes */
#define UNPACK_FD_VERDICT 4		/* where the verdict goes */
#define UNPACK_FD_JOB 5			/* struct unpack_job, read once */

/* What the unpacker sends back: one fixed-size record, then it exits. */
struct unpack_verdict {
	int code;			/* 0 or a negative errno */
	struct img_unpack_stats st;	/* what it did, also on failure */
	char msg[sizeof(((struct err *)0)->msg)];	/* e->msg, when code < 0 */
};

/* One layer: all the unpacker needs, prepared by the caller (no pointers). */
struct unpack_job {
	bool drop;			/* become uid/gid first */
	uid_t uid;			/* with drop */
	gid_t gid;			/* with drop */
	int fd;				/* the layer (UNPACK_FD_LAYER in the unpacker) */
	int pipe;			/* the verdict's write end */
	pid_t caller;			/* the caller's pid: the unpacker's parent */
	char what[UNPACK_WHAT_MAX];	/* names the layer */
	struct img_unpack_limits lim;	/* bounds (zeros: none) */
	char parent[PATH_MAX];		/* dest's directory */
	char base[NAME_MAX + 1];	/* dest's name in it */
	char tmp[UNPACK_TMP_NAME_MAX];	/* the temporary directory's name in it */
};

/*
 * The unpacker's whole life (unpack_child.c): set up, unpack into j->tmp
 * in j->parent, rename it to j->base, write the verdict to j->pipe, exit.
 */
void unpack__child_main(const struct unpack_job *j) __attribute__((noreturn));

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
