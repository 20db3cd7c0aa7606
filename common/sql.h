/*
 * sql.h - one SQLite helper for the modules that keep a database: the
 * snapshot store (store/), the AgentFS codec (agentfs/) and the audit
 * database (audit/). Each function takes the module's own connection (or
 * one of its statements, or its statement cache); none holds state.
 *
 * A failure fills e with "who: what: SQLite's message" and returns the
 * matching -errno (sqlerr_errno()), so one SQLite failure reads the same
 * from any module. who is the module's prefix ("store", "agentfs",
 * "audit db"); what names the table or step that failed. Statements are
 * the caller's: these helpers never finalise one they did not prepare.
 */
#ifndef SANDQ_COMMON_SQL_H
#define SANDQ_COMMON_SQL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The -errno for a SQLite result code (extended codes included). */
int sqlerr_errno(int rc);

/*
 * e <- "who: what: " and db's last message (rc's own text when db is NULL,
 * as after a failed open); returns sqlerr_errno(rc). An interrupted
 * statement (only a deadline's progress handler interrupts one here) is
 * -ETIMEDOUT "who: what: stopped at the deadline".
 */
int sql_fail(struct err *e, sqlite3 *db, int rc, const char *who,
    const char *what);

/* Runs sql (no rows, no parameters); 0 or -errno naming what. */
int sql_exec(sqlite3 *db, const char *sql, const char *who, const char *what,
    struct err *e);
/*
 * Begins a write transaction, taking the write lock now (BEGIN IMMEDIATE):
 * the checks a write depends on cannot change before it commits, and two
 * writers never deadlock on a lock upgrade. Waits up to db's busy timeout.
 */
int sql_begin(sqlite3 *db, const char *who, struct err *e);
/*
 * Ends the open transaction: commits on rc == 0, rolls back otherwise
 * (and when the commit fails). Returns rc or the commit's error.
 */
int sql_tx_end(sqlite3 *db, int rc, const char *who, struct err *e);
/* Rolls back the open transaction, if there is one. */
void sql_rollback(sqlite3 *db);

/* Prepares sql into *stmt (NULL on failure); 0 or -errno with e. */
int sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **stmt,
    const char *who, struct err *e);
/*
 * Binds parameter i of stmt. Text and blobs are not copied: they must
 * outlive the statement's last step. A blob of n == 0 bytes is an empty
 * BLOB, never SQL NULL. 0 or -errno with e.
 */
int sql_bind_text(sqlite3_stmt *stmt, int i, const char *s, const char *who,
    struct err *e);
int sql_bind_i64(sqlite3_stmt *stmt, int i, int64_t v, const char *who,
    struct err *e);
int sql_bind_blob(sqlite3_stmt *stmt, int i, const void *p, size_t n,
    const char *who, struct err *e);

/*
 * Steps a statement that returns no rows, then resets it for its next use
 * (its bindings stay). 0 or -errno naming what.
 */
int sql_step_reset(sqlite3_stmt *stmt, const char *who, const char *what,
    struct err *e);
/* Steps a statement that returns no rows, then finalises it. */
int sql_step_finalize(sqlite3_stmt *stmt, const char *who, const char *what,
    struct err *e);
/*
 * Runs sql, a statement of one row (a PRAGMA, a count), and stores the
 * row's first column in *out. 0 or -errno naming what (NULL: the SQL text).
 */
int sql_query_i64(sqlite3 *db, const char *sql, int64_t *out,
    const char *who, const char *what, struct err *e);
/*
 * Copies TEXT column col of the current row into dst[size]. False, dst
 * untouched, when the value is NULL or does not fit: the caller says what
 * that means (a damaged row, usually).
 */
bool sql_col_text(sqlite3_stmt *stmt, int col, char *dst, size_t size);

/*
 * A handle's kept statements (the store's and each AgentFS handle's):
 * parsing SQL costs more than running the small statements a store commit
 * or a file read runs, several times each. Keyed by the address of the
 * SQL text, which must be a constant; one statement is in one use at a
 * time, and a second use of the same SQL meanwhile (a walk that recurses)
 * gets one of its own. The owner zero-fills it and closes it before its
 * connection.
 */
#define SQL_CACHE_MAX 64

struct sql_cache {
	struct {
		const char *sql;	/* the constant text it was prepared from */
		sqlite3_stmt *stmt;
		bool busy;		/* handed out and not yet released */
	} kept[SQL_CACHE_MAX];
	size_t n;
};

/*
 * *stmt: sql's kept statement when it is free (reset, no bindings), else a
 * new one, kept if there is room. 0 or -errno with e ("who: prepare").
 * Give it back with sql_cache_release(), never sqlite3_finalize().
 */
int sql_cache_prepare(struct sql_cache *c, sqlite3 *db, const char *sql,
    sqlite3_stmt **stmt, const char *who, struct err *e);
/* Resets a kept statement (bindings cleared) or finalises one not kept;
 * NULL is nothing. */
void sql_cache_release(struct sql_cache *c, sqlite3_stmt *stmt);
/* Finalises every kept statement. */
void sql_cache_close(struct sql_cache *c);

/*
 * Switches db's file to WAL, retrying up to busy_ms while another
 * connection holds the file: the switch takes the exclusive lock without
 * calling the busy handler. -EIO when SQLite settles on another mode.
 */
int sql_wal_enable(sqlite3 *db, int busy_ms, const char *who, struct err *e);

#endif
