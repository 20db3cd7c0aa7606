/*
 * agentfs.h - the AgentFS codec: a sandbox snapshot as one SQLite blob.
 *
 * A snapshot is a SQLite 3 database in the AgentFS format (spec 0.4, the
 * format of Turso's agentfs-sdk and of LocalSandbox exports). This module
 * works on such blobs in memory only: it never opens a file, so nothing
 * writes -wal or -shm files beside anything. Readers accept the older
 * LocalSandbox layout too (no rdev/nsec columns, no schema_version row,
 * history times in milliseconds, symlinks as {"__symlink":"T"} files).
 *
 * Every blob is untrusted: sizes, names, depths and link cycles are checked
 * and reported through `struct err` naming the table, entry or path.
 *
 * Lifecycle: agentfs_new() or agentfs_open_blob() -> walk/read/write/kv/
 * tool calls -> agentfs_to_blob() (any number of times) -> agentfs_close().
 * A handle is not thread-safe; use one per thread.
 *
 * Paths are AgentFS paths: "/" is the root inode (ino 1), components are
 * separated by '/', empty components are skipped, "." and ".." are refused
 * and symlinks are never followed while resolving.
 */
#ifndef SANDQ_AGENTFS_H
#define SANDQ_AGENTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"

#define AGENTFS_BLOB_MAX ((size_t)1 << 30)	/* largest snapshot accepted or grown */
#define AGENTFS_FILE_MAX ((uint64_t)1 << 30)	/* largest file agentfs_read() returns */
#define AGENTFS_CHUNK_MIN 512			/* fs_config chunk_size bounds */
#define AGENTFS_CHUNK_MAX (1024 * 1024)
#define AGENTFS_DEPTH_MAX 256			/* directory nesting walked */
#define AGENTFS_PATH_MAX 4096			/* bytes of a full path */
#define AGENTFS_NAME_MAX 255			/* bytes of one name */
#define AGENTFS_JSON_LINK_MAX 4096		/* largest {"__symlink":..} file */

struct agentfs;

enum agentfs_kind {
	AGENTFS_DIR,
	AGENTFS_FILE,
	AGENTFS_SYMLINK,
	AGENTFS_SPECIAL,	/* fifo, chr, blk or sock: see agentfs_type_name() */
};

enum agentfs_link_form {
	AGENTFS_LINK_NONE,	/* not a symlink */
	AGENTFS_LINK_NATIVE,	/* fs_symlink row, mode S_IFLNK */
	AGENTFS_LINK_JSON_FILE,	/* legacy regular file {"__symlink":"T"} */
};

/* One entry below the root, as agentfs_walk() reports it. */
struct agentfs_entry {
	const char *path;		/* full path, "/project/src/main.py" */
	const char *name;		/* last component, inside path */
	int64_t ino;			/* fs_inode.ino */
	enum agentfs_kind kind;		/* from mode, or symlink for json-file */
	uint32_t mode;			/* full st_mode as stored */
	uint64_t size;			/* fs_inode.size */
	int64_t mtime;			/* seconds */
	const char *target;		/* symlink target, NULL otherwise */
	enum agentfs_link_form form;	/* how the symlink is stored */
};

/* One tool_calls row, raw as stored (see agentfs_is_legacy() for units). */
struct agentfs_tool_call {
	int64_t id;
	const char *name;
	const char *parameters;		/* JSON text or NULL */
	const char *result;		/* JSON text or NULL */
	const char *error;		/* text or NULL */
	const char *status;		/* pending | success | error */
	int64_t started_at;		/* seconds (0.4) or ms (legacy rows) */
	int64_t completed_at;		/* same unit as started_at; 0 if NULL */
	int64_t duration_ms;		/* 0 if NULL */
};

typedef int (*agentfs_walk_cb)(const struct agentfs_entry *ent, void *arg);
typedef int (*agentfs_key_cb)(const char *key, void *arg);
typedef int (*agentfs_tool_call_cb)(const struct agentfs_tool_call *tc,
    void *arg);

/*** Handles ***/

/*
 * Creates an empty 0.4 database: the full schema, chunk_size 4096,
 * schema_version 0.4 and the root directory (ino 1, 0040755).
 * Returns 0 and a handle the caller owns (agentfs_close()), or -errno.
 */
int agentfs_new(struct agentfs **out, struct err *e);

/*
 * Opens a copy of blob, of unknown origin (the caller keeps ownership of
 * blob). Refuses blobs over AGENTFS_BLOB_MAX (-EFBIG), anything that is not
 * a whole SQLite 3 database (-EBADMSG: bad magic, truncated, fails
 * quick_check), a schema holding anything but the AgentFS tables as plain
 * tables and indexes on them (-EBADMSG naming the object: a view, a
 * trigger, a virtual table, an unknown table), generated columns, and
 * databases lacking a table or column the format needs (-EBADMSG, the
 * message names it). The connection checks cell sizes, maps no memory,
 * keeps temporary data in memory and a 2 MiB page cache. Records whether
 * the layout is legacy and reads chunk_size from fs_config. On this
 * handle agentfs_read() refuses a file whose size claims more than its
 * chunks hold.
 */
int agentfs_open_blob(const void *blob, size_t len, struct agentfs **out,
    struct err *e);
/*
 * agentfs_open_blob() with a deadline: once mono_ns() passes deadline_ns
 * (0: none), every SQLite statement on the handle, the open's own checks
 * included, stops with -ETIMEDOUT ("stopped at the deadline"). A crafted
 * schema (an index missing, say) can make our queries quadratic; this is
 * what bounds the time they take.
 */
int agentfs_open_untrusted(const void *blob, size_t len, int64_t deadline_ns,
    struct agentfs **out, struct err *e);
/*
 * The same, without PRAGMA quick_check over every page (about as long as
 * copying the blob twice): only for a blob whose bytes the caller knows are
 * whole, such as one the store read back under its SHA-256 or one
 * agentfs_to_blob() made. The header, schema and root are still checked.
 */
int agentfs_open_trusted(const void *blob, size_t len, struct agentfs **out,
    struct err *e);
/*
 * Opens a trusted image (img_len bytes) with a patch of 4 KiB blocks over
 * it (patch.h; NULL/0 for none), copying neither: both must stay mapped
 * and unchanged until agentfs_close(). Changes are kept apart as blocks
 * (agentfs/cowimg.h); agentfs_cow_patch_write() writes the cumulative patch
 * (the given one's blocks and the new ones) to fd. The checks of
 * agentfs_open_trusted(); agentfs_to_blob() gives the whole image.
 */
int agentfs_open_cow(const void *img, size_t img_len, const void *patch,
    size_t patch_len, struct agentfs **out, struct err *e);
int agentfs_cow_patch_write(struct agentfs *fs, int fd, size_t *len, struct err *e);

/*
 * Serialises the database into one SQLite file image (header bytes 18/19
 * are 1: a rollback-journal file, no -wal). *blob is malloc'd and owned by
 * the caller (free()). Returns 0 or -errno.
 */
int agentfs_to_blob(struct agentfs *fs, void **blob, size_t *len,
    struct err *e);

/*
 * Caps the database's image at bytes (at most AGENTFS_BLOB_MAX, the cap
 * every handle starts with; never below its present size): a write that
 * would grow it further fails with -ENOSPC, and memory for the image is
 * never allocated past it. Not for a handle of agentfs_open_cow().
 */
int agentfs_size_limit(struct agentfs *fs, uint64_t bytes, struct err *e);

/* Frees the handle and its database. NULL is a no-op. */
void agentfs_close(struct agentfs *fs);

/* True for the LocalSandbox layout (no rdev/nsec or no schema_version). */
bool agentfs_is_legacy(const struct agentfs *fs);
/* The fs_config chunk_size in use. */
size_t agentfs_chunk_size(const struct agentfs *fs);
/* "dir", "file", "symlink", "fifo", "chr", "blk", "sock" or "unknown". */
const char *agentfs_type_name(uint32_t mode);

/*** Files ***/

/*
 * Calls cb for every entry below the root, parents before children,
 * siblings in name order. The entry and its strings live only during the
 * call. A non-zero return from cb stops the walk and is returned. Fails with
 * -EBADMSG naming the entry on a bad name ('/', NUL, "", ".", ".."), a
 * dentry without inode, -ELOOP on a directory reached twice (cycle or hard
 * link) or nesting deeper than AGENTFS_DEPTH_MAX, and -ENAMETOOLONG on a
 * name over AGENTFS_NAME_MAX or a path over AGENTFS_PATH_MAX (the message
 * names the limit).
 * Legacy databases only: a regular file whose whole content is
 * {"__symlink":"T"} is reported as a symlink of form json-file.
 */
int agentfs_walk(struct agentfs *fs, agentfs_walk_cb cb, void *arg,
    struct err *e);

/*
 * Reads a regular file: chunks in order, a missing chunk reads as zeros,
 * cut to fs_inode.size. *data is malloc'd (caller frees; never NULL on
 * success, even when *len is 0). Does not update atime (a snapshot read is
 * not an access). -ENOENT, -EISDIR, -EINVAL (not a regular file), -EFBIG.
 * On a handle of agentfs_open_blob(), a size larger than the bytes its
 * chunks store (each counted up to chunk_size) is -EBADMSG, found before
 * anything is allocated.
 */
int agentfs_read(struct agentfs *fs, const char *path, void **data,
    size_t *len, struct err *e);

/*
 * Creates or replaces the regular file at path with len bytes, in one
 * transaction. The parent directory must exist (-ENOENT; no implicit
 * mkdir -p, so a caller never creates a tree by accident). The permission
 * bits of mode (mode & 07777) are set on create and on replace; size,
 * mtime and ctime are updated. -EISDIR/-EEXIST when path is a directory or
 * another kind of node.
 */
int agentfs_write(struct agentfs *fs, const char *path, const void *data,
    size_t len, mode_t mode, struct err *e);

/* Creates a directory (nlink 1); the parent must exist. -EEXIST if taken. */
int agentfs_mkdir(struct agentfs *fs, const char *path, mode_t mode,
    struct err *e);

/*
 * Creates a native symlink (fs_symlink row, mode 0120777, size = strlen of
 * target) in any layout, legacy included. The target is stored as given and
 * never resolved. -EEXIST if path is taken.
 */
int agentfs_symlink(struct agentfs *fs, const char *target, const char *path,
    struct err *e);

/*
 * Removes a file, symlink, special node or empty directory (-ENOTEMPTY,
 * -EBUSY for the root). Decrements nlink; at 0 the inode, its data and its
 * fs_symlink row go too.
 */
int agentfs_remove(struct agentfs *fs, const char *path, struct err *e);

/*** Key-value store (values are JSON text) ***/

/* *value is malloc'd JSON text (caller frees). -ENOENT if absent. */
int agentfs_kv_get(struct agentfs *fs, const char *key, char **value,
    struct err *e);
/* Inserts or replaces; value must be valid JSON (-EINVAL otherwise). */
int agentfs_kv_set(struct agentfs *fs, const char *key, const char *value,
    struct err *e);
/* -ENOENT if absent. */
int agentfs_kv_delete(struct agentfs *fs, const char *key, struct err *e);
/* Calls cb with each key starting with prefix (bytewise), in key order. */
int agentfs_kv_keys(struct agentfs *fs, const char *prefix, agentfs_key_cb cb,
    void *arg, struct err *e);

/*** History (tool_calls) ***/

/*
 * Appends one tool call in 0.4 units: started_at/completed_at in seconds,
 * duration_ms = completed_ms - started_ms. params_json and result_json may
 * be NULL, otherwise must be valid JSON; error may be NULL; status is
 * "pending", "success" or "error". Existing (legacy, ms) rows are untouched.
 */
int agentfs_tool_call_add(struct agentfs *fs, const char *name,
    const char *params_json, const char *result_json, const char *error,
    const char *status, int64_t started_ms, int64_t completed_ms,
    struct err *e);
/*
 * Prepares, and keeps in fs, the statements a capture's record and
 * session writes run (the session's only if its table exists): for a
 * capture opened ahead of its job's end, so that parsing them is not on
 * the way from the job's end to its result. Changes nothing in fs.
 */
void agentfs_capture_warm(struct agentfs *fs);
/* Number of tool_calls rows, or -errno. */
int64_t agentfs_tool_call_count(struct agentfs *fs, struct err *e);
/* Calls cb for each row in id order; strings live during the call only. */
int agentfs_tool_call_each(struct agentfs *fs, agentfs_tool_call_cb cb,
    void *arg, struct err *e);

/*
 * What the tree needs on a disk: regular-file bytes and inodes below the
 * root, from one query (no walk). For sizing a filesystem before
 * materialising; the walk still checks every entry.
 */
int agentfs_usage(struct agentfs *fs, uint64_t *bytes, uint64_t *entries,
    struct err *e);
/*
 * What an untrusted tree claims, from one query (no walk): *paths the
 * dentries (each a path the walk would report, if it reaches it) and
 * *bytes the regular-file sizes summed over them (a hard-linked file once
 * per path, as materialise writes it; each size counted up to 1 TiB). For
 * refusing an upload over a limit before walking it; the walk still
 * checks every entry.
 */
int agentfs_claims(struct agentfs *fs, uint64_t *paths, uint64_t *bytes,
    struct err *e);
/*** Session (agentfs_session.c): a sandq table, ignored by other tools ***/

/*
 * Reads session value `name` ("cwd", "env") into *value (malloc'd, with a
 * NUL after the len bytes; the caller frees). -ENOENT when there is none.
 */
int agentfs_session_get(struct agentfs *fs, const char *name, void **value,
    size_t *len, struct err *e);
/* Sets session value `name` to len bytes, creating the table if needed. */
int agentfs_session_set(struct agentfs *fs, const char *name, const void *value,
    size_t len, struct err *e);

/*** Single entries and raw copies (agentfs_meta.c, for worker/ops.c) ***/

/*
 * Describes the entry at path without following symlinks (lstat): fills
 * ent (ent->path is path, ent->name points into it; "/" is the root, kind
 * dir) and, for a native symlink, *target (malloc'd, caller frees; also in
 * ent->target). A legacy json-file symlink is reported as the regular file
 * it is stored as; only agentfs_walk() tells those apart. -ENOENT,
 * -ENOTDIR (a middle component is not a directory), -EINVAL ('.', '..'),
 * -ENAMETOOLONG, -EBADMSG (dangling dentry, bad symlink row).
 */
int agentfs_stat(struct agentfs *fs, const char *path,
    struct agentfs_entry *ent, char **target, struct err *e);

/*
 * Sets the mtime (seconds; nanoseconds 0) of the entry at path, which is
 * resolved as by agentfs_stat(). Leaves ctime alone. For copying a tree
 * with its times; agentfs_write() and agentfs_mkdir() stamp the clock.
 */
int agentfs_set_mtime(struct agentfs *fs, const char *path, int64_t mtime,
    struct err *e);

/*
 * Appends tc as given (tc->id is ignored: rows keep their order, not their
 * ids): the caller converts units first, since this writes started_at and
 * completed_at (0 = NULL) as they are, in the 0.4 unit (seconds), and
 * duration_ms as is. Text fields are copied unchecked (they are history,
 * not interpreted); name must be non-empty and status one of pending,
 * success, error (-EINVAL).
 */
int agentfs_tool_call_put(struct agentfs *fs,
    const struct agentfs_tool_call *tc, struct err *e);

#endif
