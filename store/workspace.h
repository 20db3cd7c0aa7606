/*
 * workspace.h - a snapshot as a directory tree and back: materialise before
 * a job, capture after it.
 *
 * Lifecycle: workspace_materialise(snapshot, empty dirfd) -> the job runs
 * in that directory -> workspace_capture(dirfd, the same snapshot) -> a new
 * snapshot the caller commits, plus the list of what changed ->
 * workspace_changes_free().
 *
 * THREAT. The job controls the directory's contents, and a process it left
 * behind may still change them while we read: replace a directory with a
 * symlink to / between our calls, swap a file for a FIFO, grow a file, fill
 * the disk with empty directories. So:
 *  - every step is an *at() call relative to a directory fd we hold, opened
 *    O_DIRECTORY|O_NOFOLLOW; no path string is ever resolved from the root,
 *    so a swapped component fails (ELOOP/ENOTDIR) instead of leading out;
 *  - entries are classified with fstatat(AT_SYMLINK_NOFOLLOW), symlinks are
 *    read with readlinkat() and never followed;
 *  - a file is read through an fd opened O_NOFOLLOW|O_NONBLOCK (a FIFO
 *    swapped in cannot block us) and fstat()ed to be regular, on the same
 *    device and inode that fstatat() saw, before a byte is read;
 *  - nothing on another device (a mount) is entered;
 *  - total bytes, entry count, depth and single-file size are capped, and a
 *    file that grows past what fstat() said is refused.
 * Materialise writes only into a tree it creates: files O_CREAT|O_EXCL|
 * O_NOFOLLOW, directories mkdirat(), so a name already present (say a
 * planted symlink) is an error, never something written through.
 *
 * DECISIONS. Special files (FIFO, socket, device) are refused, not skipped,
 * by both directions (-EPERM naming the path): skipping at capture would
 * silently drop what the job made, skipping at materialise would make the
 * next capture delete it. Names must be valid UTF-8 without control
 * characters (C0, DEL, C1) in both directions (-EILSEQ, the name
 * hex-escaped), so a snapshot that could not be captured back is never
 * materialised. Permission bits are kept, but setuid, setgid and sticky are
 * never materialised (a mode differing only in those bits is not a change).
 * A directory's mode change is not captured (the codec has no chmod); a
 * new directory keeps its mode. Owners are not materialised or captured.
 */
#ifndef SANDQ_WORKSPACE_H
#define SANDQ_WORKSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "agentfs.h"

/* Caps on a tree, in both directions. Values above the codec's own caps
 * (AGENTFS_FILE_MAX, AGENTFS_DEPTH_MAX) are lowered to them. */
struct workspace_limits {
	uint64_t max_bytes;		/* sum of regular file sizes */
	uint64_t max_file_bytes;	/* one regular file */
	uint32_t max_files;		/* entries of any kind, dirs included */
	uint32_t max_depth;		/* nesting: "/a" is 1, "/a/b" is 2 */
};

#define WORKSPACE_LIMITS_DEFAULT { \
	.max_bytes = (uint64_t)512 << 20, \
	.max_file_bytes = (uint64_t)128 << 20, \
	.max_files = 100000, \
	.max_depth = 64, \
}

#define WORKSPACE_CHANGES_LIST_MAX 1024	/* paths kept in a change list */

enum workspace_op {
	WORKSPACE_ADDED = 'A',		/* new path */
	WORKSPACE_MODIFIED = 'M',	/* content, mode, target or kind changed */
	WORKSPACE_REMOVED = 'D',	/* path of the base that is gone */
};

struct workspace_change {
	enum workspace_op op;		/* what happened */
	char *path;			/* AgentFS path, "/src/main.py" */
};

/* What a capture changed. Counts are exact; the list keeps the first
 * WORKSPACE_CHANGES_LIST_MAX changes in the order they were made. */
struct workspace_changes {
	uint64_t added;			/* entries created */
	uint64_t modified;		/* entries rewritten */
	uint64_t removed;		/* entries of base deleted */
	struct workspace_change *list;	/* nlist changes, owned */
	size_t nlist;			/* entries in list */
	bool truncated;			/* more changes than the list holds */
};

/*
 * Writes the whole tree of fs into dirfd, which should be an empty
 * directory (an existing name is -EEXIST naming the path; nothing is
 * overwritten or followed). Files get their content, permission bits
 * (without setuid/setgid/sticky) and mtime; symlinks their stored target,
 * native or legacy json-file form alike, never resolved; directories their
 * permission bits, applied last so a read-only directory can be filled.
 * lim NULL means WORKSPACE_LIMITS_DEFAULT; caps are checked on the whole
 * snapshot before anything is written (-EDQUOT, or -EFBIG for one file, the
 * message naming the cap). Special entries: -EPERM. Does not take ownership
 * of fs or dirfd. On failure the tree may be partly written; the caller
 * discards the directory. Returns 0 or -errno with e set.
 */
int workspace_materialise(struct agentfs *fs, int dirfd,
    const struct workspace_limits *lim, struct err *e);

/*
 * Reads the tree below dirfd back into a new snapshot *out: a copy of base
 * (base NULL: an empty snapshot) where only what differs is rewritten. A
 * regular file is compared by size, permission bits and then content; new
 * entries are created; entries of base that are gone are removed; a path
 * whose kind changed is removed with its subtree and recreated (one
 * "modified"). Symlinks are stored as native symlinks with the target
 * readlinkat() returns. kv and tool_calls are carried over from base.
 * base is not modified; dirfd is not closed. ch (may be NULL) is filled
 * and owned by the caller (workspace_changes_free()), also on failure.
 * Errors name the path: special file -EPERM, bad name or target -EILSEQ
 * (hex-escaped), a cap -EDQUOT (total bytes, entries, depth) or -EFBIG (one
 * file), another device -EXDEV, a file that changed while read -EAGAIN.
 * Returns 0 with *out owned by the caller (agentfs_close()), or -errno with
 * *out NULL.
 */
int workspace_capture(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, struct agentfs **out,
    struct workspace_changes *ch, struct err *e);

/* Frees the list and zeroes *ch. NULL is a no-op. */
void workspace_changes_free(struct workspace_changes *ch);

/* True when name is one valid path component: 1..AGENTFS_NAME_MAX bytes of
 * valid UTF-8, no '/', no control character, not "." or "..". */
bool workspace_name_is_valid(const char *name);

#endif
