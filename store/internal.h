/*
 * internal.h - what the files of the AgentFS codec share: the handle and
 * the SQLite helpers. agentfs.c holds handles, paths, the walk and files;
 * agentfs_meta.c the key-value store and the tool-call history.
 */
#ifndef SANDQ_STORE_INTERNAL_H
#define SANDQ_STORE_INTERNAL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/err.h"
#include "agentfs.h"

struct agentfs {
	sqlite3 *db;		/* memdb connection, owns the image */
	size_t chunk_size;	/* fs_config chunk_size */
	bool has_nsec;		/* fs_inode has rdev and *_nsec columns */
	bool has_version;	/* fs_config has a schema_version row */
};

/* e <- "agentfs: what: SQLite's message"; returns the matching -errno. */
int afs_db_fail(struct agentfs *fs, int rc, const char *what, struct err *e);
/* Prepares sql on fs; 0 or -errno with e. */
int afs_stmt_prepare(struct agentfs *fs, const char *sql, sqlite3_stmt **st,
    struct err *e);
/* Steps a statement that returns no rows, then finalises it. */
int afs_stmt_done(struct agentfs *fs, sqlite3_stmt *st, const char *what,
    struct err *e);
/* The wall clock, in seconds and nanoseconds. */
void afs_now_get(int64_t *sec, int64_t *nsec);
/* True when text is valid JSON (any value, not only objects). */
bool afs_json_valid(const char *text);

#endif
