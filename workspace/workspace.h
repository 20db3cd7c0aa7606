/*
 * workspace.h - a snapshot as a directory tree and back: materialise before
 * a job, capture after it.
 *
 * Lifecycle: workspace_materialise(snapshot, empty dirfd) -> the job runs
 * in that directory -> workspace_capture(dirfd, the same snapshot) -> a new
 * snapshot the caller commits, plus the list of what changed ->
 * workspace_changes_free(). With path rules (perms.h), the same with
 * workspace_materialise_rules() and workspace_capture_rules() and the same
 * compiled rules on both sides.
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
 *    file that grows past what fstat() said is refused; a job's capture is
 *    also bounded by how much it may grow the snapshot (max_growth), with
 *    holes and hard links counted as the snapshot stores them.
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
 *
 * PATH RULES. Materialise shows the job only what its level allows (none:
 * absent; view: size without content) and reports where the level changes
 * so the caller can make subtrees read-only with bind mounts. Capture does
 * not trust those mounts: it alone enforces that a path below write keeps
 * exactly its state in base, whatever the job did on disk, and reports each
 * change it kept out. docs/paths.md, "How rules are enforced".
 */
#ifndef SANDQ_WORKSPACE_H
#define SANDQ_WORKSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../agentfs/agentfs.h"
#include "perms.h"

/* Caps on a tree, in both directions. Values above the codec's own caps
 * (AGENTFS_FILE_MAX, AGENTFS_DEPTH_MAX) are lowered to them. */
struct workspace_limits {
	uint64_t max_bytes;		/* sum of regular file sizes */
	uint64_t max_file_bytes;	/* one regular file */
	uint32_t max_files;		/* entries of any kind, dirs included */
	uint32_t max_depth;		/* nesting: "/a" is 1, "/a/b" is 2 */
	uint64_t max_growth;		/* capture only: how much the snapshot's
					 * size may grow over base's (see
					 * workspace_size()); 0: no bound */
	bool layer_devices;		/* capture only: the tree is a folder of
					 * an overlay root (an image's, where
					 * no mount can be below it), whose
					 * files report their layer's device:
					 * only folders must be on the tree's */
};

/*
 * What an entry costs in a snapshot beyond its file bytes: its inode and
 * directory rows and their index entries. An empty file with a short name
 * takes about 112 bytes of an AgentFS database; a 255-byte name, about
 * twice its length more.
 */
#define WORKSPACE_ENTRY_BYTES 512

#define WORKSPACE_LIMITS_DEFAULT { \
	.max_bytes = (uint64_t)512 << 20, \
	.max_file_bytes = (uint64_t)128 << 20, \
	.max_files = 100000, \
	.max_depth = 64, \
}

/* Which cap refused an entry (workspace_tally_add()). */
enum workspace_cap {
	WORKSPACE_CAP_NONE,	/* none: a bad name or target, a special file */
	WORKSPACE_CAP_ENTRIES,	/* max_files */
	WORKSPACE_CAP_DEPTH,	/* max_depth */
	WORKSPACE_CAP_FILE,	/* max_file_bytes */
	WORKSPACE_CAP_BYTES,	/* max_bytes */
};

/* A tree counted entry by entry against the caps materialise applies. */
struct workspace_tally {
	struct workspace_limits lim;	/* resolved caps */
	uint64_t bytes;			/* regular-file bytes counted */
	uint32_t count;			/* entries counted */
	enum workspace_cap hit;		/* the cap that refused the last entry */
};

#define WORKSPACE_CHANGES_LIST_MAX 1024	/* paths kept in a change list */
#define WORKSPACE_REFUSED_LIST_MAX 256	/* paths kept in a refused list */

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
 * WORKSPACE_CHANGES_LIST_MAX changes in the order they were made, the
 * refused list the first WORKSPACE_REFUSED_LIST_MAX refused paths (names
 * that are not valid hex-escaped as in error messages). */
struct workspace_changes {
	uint64_t added;			/* entries created */
	uint64_t modified;		/* entries rewritten */
	uint64_t removed;		/* entries of base deleted */
	struct workspace_change *list;	/* nlist changes, owned */
	size_t nlist;			/* entries in list */
	bool truncated;			/* more changes than the list holds */
	struct workspace_change *all;	/* workspace_capture_overlay() only:
					 * every change, in order, uncapped */
	size_t nall;			/* entries in all */
	uint64_t refused;		/* changes the path rules kept out */
	char **refused_list;		/* nrefused_list paths, owned */
	size_t nrefused_list;		/* entries in refused_list */
};

/*
 * Told about one materialised entry whose level differs from its parent's
 * (path "/" is the root itself). kind is AGENTFS_DIR, AGENTFS_FILE or
 * AGENTFS_SYMLINK; a bind mount on a symlink path would follow it, so a
 * caller skips those (capture keeps their base state anyway). path lives
 * only during the call. Returns 0, or -errno to stop materialising.
 */
typedef int (*workspace_mark_cb)(const char *path, enum perm_level level,
    enum agentfs_kind kind, void *arg);

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
 * workspace_materialise() under the rules p (NULL: everything is write, and
 * this is workspace_materialise()). The level of each path is
 * perms_check(p, path):
 *  - none: not materialised, nor anything below it; its name is not even
 *    checked. Exception: a directory that perms_dir_may_show() says may hold
 *    visible entries, and that does hold one, is created bare (mode 0555)
 *    listing only what is visible. Hidden special entries are skipped.
 *  - view: a file is created with its size but no content (sparse zeros)
 *    and mode 0000, a directory with mode 0555, a symlink as a symlink.
 *  - read, write: as workspace_materialise().
 * Caps are checked on what is materialised; a view file counts as an entry
 * and against the one-file cap, not against the total bytes (it has none).
 * Once the whole tree is in place, mark (may be NULL) is called, parents
 * before children, for the root when perms_check(p, "/") is below write,
 * then for every materialised entry whose level differs from its parent's
 * (the root's level for a top-level entry). A non-zero return from mark
 * stops it and is returned; e keeps what mark set in it (mark may fill the
 * same record), else names the path. Does not take ownership of fs, dirfd
 * or p.
 * Returns 0 or -errno with e set.
 */
int workspace_materialise_rules(struct agentfs *fs, int dirfd,
    const struct workspace_limits *lim, const struct perms *p,
    workspace_mark_cb mark, void *arg, struct err *e);

/*
 * Makes, in the tree at dirfd (a job's /workspace standing, its marks not
 * yet mounted), each folder a write rule of p names whole (the output
 * folder of agent-safe: perms_write_dirs()) that the tree lacks, when its
 * parent is there and readable but not writable by p: empty, 0755, and
 * marked writable through mark, so the job can write where its rules say,
 * as on AgentFense (docs/paths.md "Presets"). The capture then finds it a
 * new folder, committed like any. A missing or hidden parent, a name
 * already taken, or a level lowered by a more specific rule: nothing made.
 * Components are opened without following links. Returns how many
 * folders it made, or -errno with e.
 */
int workspace_make_write_dirs(int dirfd, const struct perms *p,
    workspace_mark_cb mark, void *arg, struct err *e);

/*
 * The size a capture bounds (workspace_limits.max_growth): the apparent
 * size (st_size) of every regular file of fs, each inode once, plus
 * WORKSPACE_ENTRY_BYTES per entry. Holes count as the zeros a snapshot
 * stores in their place, and a capture stores every name of a hard-linked
 * file as a file of its own, so this is what the snapshot holds, not what
 * a disk with holes and links held. Returns 0 or -errno with e set.
 */
int workspace_size(struct agentfs *fs, uint64_t *size, struct err *e);

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
 * With lim->max_growth, a result whose workspace_size() passes base's (0
 * without base) by more than max_growth is -ENOSPC, the message naming
 * the bound and both sizes; the walk stops as soon as the files read pass
 * what the bound allows, so no more than that is ever read.
 * Returns 0 with *out owned by the caller (agentfs_close()), or -errno with
 * *out NULL.
 */
int workspace_capture(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, struct agentfs **out,
    struct workspace_changes *ch, struct err *e);

/*
 * workspace_capture() under the rules p (NULL: workspace_capture()).
 * Invariant: a path whose level is below write keeps exactly its state in
 * base (present with the same kind, content, mode and target, or absent),
 * whatever is on disk. So at such a path a new entry is not added, a
 * modified one keeps base's version, a kind change keeps base's entry, and
 * nothing new below it is read. A hidden (none) path is absent on disk and
 * a view file is zero-filled with mode 0000: neither is a change. A path of
 * base missing on disk is kept if it or any of its base descendants is
 * below write (so removing a directory never drops what the job could not
 * see); a writable one is removed as usual. Writable paths below a
 * non-writable directory are captured normally. A writable path whose base
 * directory holds non-writable entries keeps that directory rather than
 * becoming a file or symlink. A directory at a none path that
 * perms_dir_may_show() says holds nothing visible is not read at all, so a
 * none rule also serves as an ignore list (base NULL: such paths simply do
 * not appear). Each change kept out counts in ch->refused and is listed;
 * at a non-writable path, a bad name or a special file is a refused change
 * rather than an error. Refusals are not errors: the capture succeeds.
 * Otherwise as workspace_capture(). Does not take ownership of p.
 */
int workspace_capture_rules(int dirfd, struct agentfs *base,
    const struct workspace_limits *lim, const struct perms *p,
    struct agentfs **out, struct workspace_changes *ch, struct err *e);

/*
 * workspace_capture_rules() of a workspace that is an overlay whose lower
 * layer is fs materialised under the same rules p
 * (workspace_materialise_rules()), and whose upper layer (upperfd) holds
 * what the job changed; the overlay is mounted with userxattr, so without
 * redirect_dir or metacopy (which userxattr turns off). Only the upper
 * layer is listed and read, never the merged tree: a whiteout
 * there (the 0:0 character device) or an opaque directory (the
 * user.overlay.opaque xattr) is what the job removed, as overlayfs shows
 * it. An entry the upper layer lacks is base's, unchanged, and counts
 * against the caps with its subtree, without a system call: a change
 * beside many files costs what the change does. The capture is made in
 * place: fs is base on entry and the new snapshot on success (on failure
 * it is half rewritten: discard it). ch (required) also gets ch->all, every change in order, for
 * workspace_apply(). Otherwise as workspace_capture_rules().
 */
int workspace_capture_overlay(int upperfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e);

/*
 * What a capture reads of its base before it looks at the directory: the
 * base's entries (one walk, sorted), its size and, given p, each entry's
 * level under p. Read ahead of the capture (while the job still runs)
 * with workspace_capture_ahead(), and handed to
 * workspace_capture_overlay_ahead(), which takes it over and must get the
 * same rules p (or none). It is fs's as it was when read: nothing may
 * write fs in between.
 */
struct workspace_ahead;
int workspace_capture_ahead(struct agentfs *fs, const struct perms *p,
    struct workspace_ahead **out, struct err *e);
/* Frees a read-ahead not handed over; NULL is a no-op. */
void workspace_ahead_free(struct workspace_ahead *a);
/*
 * workspace_capture_overlay() with fs's entries and size already read into
 * a (from fs, untouched since): the capture does the same checks and makes
 * the same snapshot, without walking fs again. a is freed.
 */
int workspace_capture_overlay_ahead(int upperfd, struct agentfs *fs,
    struct workspace_ahead *a, const struct workspace_limits *lim,
    const struct perms *p, struct workspace_changes *ch, struct err *e);

/*
 * workspace_capture_rules() made in place: fs is base on entry and the new
 * snapshot on success (half rewritten on failure: discard it). Every
 * path's base state is read before that path is written, so one handle
 * serves both. ch is required; ch->all stays empty.
 */
int workspace_capture_inplace(int dirfd, struct agentfs *fs,
    const struct workspace_limits *lim, const struct perms *p,
    struct workspace_changes *ch, struct err *e);

/*
 * Brings a tree materialised from a snapshot up to date with the snapshot
 * fs that ch->all (from workspace_capture_overlay()) turned it into: each
 * removed path is deleted (a directory with its tree), each added or
 * modified one deleted and written again from fs, in ch->all's order. The
 * paths are all writable ones (a capture never changes another), so the
 * tree ends as workspace_materialise_rules(fs) under the same rules would
 * write it. Nothing is followed. On failure the tree is half updated: the
 * caller discards it. Returns 0 or -errno with e set.
 */
int workspace_apply(struct agentfs *fs, int dirfd,
    const struct workspace_changes *ch, struct err *e);

/*
 * Copies the tree under the directory srcfd into the empty directory
 * dstfd: directories and regular files with their permission bits and
 * mtime, a file's data with its holes kept, symlinks with their mtime; any
 * other kind of entry is refused (-EPERM). Nothing is followed. Made for
 * trees workspace_materialise_rules() wrote (the kept base's template,
 * sandbox/persist.c): nesting past AGENTFS_DEPTH_MAX is -ELOOP. On failure
 * dstfd holds part of the copy: the caller removes it. Returns 0 or -errno
 * with e naming the path.
 */
int workspace_copy_tree(int srcfd, int dstfd, struct err *e);

/* Removes name of dirfd, with its whole tree if it is a directory, never
 * following a symlink; absent is fine. Returns 0 or -errno with e set. */
int workspace_remove_at(int dirfd, const char *name, struct err *e);

/* Frees the lists and zeroes *ch. NULL is a no-op. */
void workspace_changes_free(struct workspace_changes *ch);

/* True when name is one valid path component: 1..AGENTFS_NAME_MAX bytes of
 * valid UTF-8, no '/', no control character, not "." or "..". */
bool workspace_name_is_valid(const char *name);

/* Nesting of an AgentFS path, as the depth cap counts it: "/a" is 1. */
uint32_t workspace_path_depth(const char *path);

/* Starts a tally under lim (NULL: WORKSPACE_LIMITS_DEFAULT), resolved as
 * materialise resolves it (lowered to the codec's caps). */
void workspace_tally_init(struct workspace_tally *t,
    const struct workspace_limits *lim);
/*
 * Counts ent (parents come first, as agentfs_walk() reports them) and
 * refuses what workspace_materialise() would refuse, with the same
 * message: an invalid name or symlink target (-EILSEQ, hex-escaped), a
 * special file (-EPERM), one entry more than max_files or deeper than
 * max_depth (-EDQUOT), a file over max_file_bytes (-EFBIG), file bytes past
 * max_bytes (-EDQUOT; with content false the file counts no bytes, as a
 * view file has none). t->hit says which cap refused (NONE otherwise).
 * Returns 0 or -errno with e naming the path.
 */
int workspace_tally_add(struct workspace_tally *t,
    const struct agentfs_entry *ent, bool content, struct err *e);

#endif
