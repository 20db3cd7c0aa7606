/*
 * internal.h - what the files of the AgentFS codec share: the handle and
 * its prepared-statement cache (SQLite calls go through ../common/sql.h,
 * with "agentfs" as the messages' prefix). agentfs.c holds handles, paths,
 * the walk and files; agentfs_meta.c the key-value store and the tool-call
 * history; agentfs_session.c the shell session.
 */
#ifndef SANDQ_AGENTFS_INTERNAL_H
#define SANDQ_AGENTFS_INTERNAL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/err.h"
#include "../common/sql.h"
#include "agentfs.h"

struct agentfs {
	sqlite3 *db;		/* memdb connection, owns the image */
	bool cow;		/* db is a cowimg connection (cowimg.h) */
	struct sql_cache cache;	/* kept statements (afs_stmt_prepare()) */
	size_t chunk_size;	/* fs_config chunk_size */
	bool has_nsec;		/* fs_inode has rdev and *_nsec columns */
	bool has_version;	/* fs_config has a schema_version row */
	bool untrusted;		/* from agentfs_open_blob(): claims are checked */
	bool session_table;	/* sandq_session exists (agentfs_session.c) */
	int64_t deadline_ns;	/* mono_ns() past which SQLite is interrupted; 0: none */
};

/*
 * Hands out a prepared statement for sql, a constant string: the one kept
 * from an earlier call when it is free, else a new one (kept if there is
 * room). Parsing SQL costs more than running these small statements, and a
 * file read takes several. Give it back with afs_stmt_release(), never
 * sqlite3_finalize(). 0 or -errno with e.
 */
int afs_stmt_prepare(struct agentfs *fs, const char *sql, sqlite3_stmt **st,
    struct err *e);
/* The session table's write, prepared and kept if the table exists. */
void afs_session_warm(struct agentfs *fs);
/* Resets a kept statement for its next use, or finalises one not kept. */
void afs_stmt_release(struct agentfs *fs, sqlite3_stmt *st);
/* Steps a statement that returns no rows, then releases it. */
int afs_stmt_done(struct agentfs *fs, sqlite3_stmt *st, const char *what,
    struct err *e);
/*
 * The inode of path, never following a symlink: every component but the
 * last must be a directory (-ENOTDIR), a missing one is -ENOENT, "." and
 * ".." are -EINVAL; "/" is the root (ino 1).
 */
int afs_resolve_ino(struct agentfs *fs, const char *path, int64_t *ino,
    struct err *e);
/* The wall clock, in seconds and nanoseconds. */
void afs_now_get(int64_t *sec, int64_t *nsec);
/* True when text is valid JSON (any value, not only objects). */
bool afs_json_valid(const char *text);

#endif
