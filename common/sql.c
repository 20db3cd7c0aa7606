/*
 * sql.c - the SQLite helper of the store, the AgentFS codec and the audit
 * database: result codes as -errno, and statements, binding and
 * transactions that fill a struct err on failure (see sql.h).
 *
 * Sections: Errors, Transactions, Statements.
 */
#include <errno.h>
#include <sqlite3.h>
#include <string.h>
#include <time.h>

#include "sql.h"

/*** Errors ***/

int
sqlerr_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;		/* disk full, or a database at its size cap */
	case SQLITE_TOOBIG:
		return -EFBIG;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_INTERRUPT:
		return -ETIMEDOUT;	/* a deadline's progress handler */
	case SQLITE_PERM:
	case SQLITE_READONLY:
		return -EACCES;
	default:
		return -EIO;
	}
}

int
sql_fail(struct err *e, sqlite3 *db, int rc, const char *who,
    const char *what)
{
	if ((rc & 0xff) == SQLITE_INTERRUPT)
		return err_set(e, -ETIMEDOUT, "%s: %s: stopped at the deadline",
		    who, what);
	return err_set(e, sqlerr_errno(rc), "%s: %s: %s", who, what,
	    db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/*** Transactions ***/

int
sql_exec(sqlite3 *db, const char *sql, const char *who, const char *what,
    struct err *e)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return sql_fail(e, db, rc, who, what);
	return 0;
}

int
sql_begin(sqlite3 *db, const char *who, struct err *e)
{
	return sql_exec(db, "BEGIN IMMEDIATE", who, "begin", e);
}

int
sql_tx_end(sqlite3 *db, int rc, const char *who, struct err *e)
{
	if (rc == 0)
		rc = sql_exec(db, "COMMIT", who, "commit", e);
	if (rc != 0)
		sql_rollback(db);
	return rc;
}

void
sql_rollback(sqlite3 *db)
{
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

/*** Statements ***/

int
sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **stmt,
    const char *who, struct err *e)
{
	int rc = sqlite3_prepare_v2(db, sql, -1, stmt, NULL);

	if (rc != SQLITE_OK)
		return sql_fail(e, db, rc, who, "prepare");
	return 0;
}

int
sql_bind_text(sqlite3_stmt *stmt, int i, const char *s, const char *who,
    struct err *e)
{
	int rc = sqlite3_bind_text(stmt, i, s, -1, SQLITE_STATIC);

	if (rc != SQLITE_OK)
		return sql_fail(e, sqlite3_db_handle(stmt), rc, who, "bind");
	return 0;
}

int
sql_bind_i64(sqlite3_stmt *stmt, int i, int64_t v, const char *who,
    struct err *e)
{
	int rc = sqlite3_bind_int64(stmt, i, v);

	if (rc != SQLITE_OK)
		return sql_fail(e, sqlite3_db_handle(stmt), rc, who, "bind");
	return 0;
}

int
sql_bind_blob(sqlite3_stmt *stmt, int i, const void *p, size_t n,
    const char *who, struct err *e)
{
	int rc = n > 0 ? sqlite3_bind_blob64(stmt, i, p, n, SQLITE_STATIC) :
	    sqlite3_bind_zeroblob(stmt, i, 0);

	if (rc != SQLITE_OK)
		return sql_fail(e, sqlite3_db_handle(stmt), rc, who, "bind");
	return 0;
}

/* Steps stmt, which must return no rows; 0 or -errno naming what. */
static int
step_done(sqlite3_stmt *stmt, const char *who, const char *what,
    struct err *e)
{
	int rc = sqlite3_step(stmt);

	if (rc != SQLITE_DONE)
		return sql_fail(e, sqlite3_db_handle(stmt), rc, who, what);
	return 0;
}

int
sql_step_reset(sqlite3_stmt *stmt, const char *who, const char *what,
    struct err *e)
{
	int rc = step_done(stmt, who, what, e);

	sqlite3_reset(stmt);
	return rc;
}

int
sql_step_finalize(sqlite3_stmt *stmt, const char *who, const char *what,
    struct err *e)
{
	int rc = step_done(stmt, who, what, e);

	sqlite3_finalize(stmt);
	return rc;
}

int
sql_query_i64(sqlite3 *db, const char *sql, int64_t *out, const char *who,
    const char *what, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	if ((rc = sql_prepare(db, sql, &stmt, who, e)) != 0)
		return rc;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else {
		rc = sql_fail(e, db, rc, who, what != NULL ? what : sql);
	}
	sqlite3_finalize(stmt);
	return rc;
}

bool
sql_col_text(sqlite3_stmt *stmt, int col, char *dst, size_t size)
{
	const unsigned char *s = sqlite3_column_text(stmt, col);
	int n = sqlite3_column_bytes(stmt, col);

	if (s == NULL || n < 0 || (size_t)n >= size)
		return false;
	memcpy(dst, s, (size_t)n);
	dst[n] = '\0';
	return true;
}

int
sql_wal_enable(sqlite3 *db, int busy_ms, const char *who, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	const unsigned char *mode;
	int rc;

	if ((rc = sql_prepare(db, "PRAGMA journal_mode = WAL", &stmt, who,
	    e)) != 0)
		return rc;
	/*
	 * Changing the journal mode takes the file's exclusive lock without
	 * calling the busy handler: several processes opening a new file at
	 * once (a pool's workers at start) retry here, up to busy_ms.
	 */
	for (int waited = 0;; waited += 2) {
		struct timespec ts = { 0, 2000000 };

		rc = sqlite3_step(stmt);
		if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || waited >= busy_ms)
			break;
		sqlite3_reset(stmt);
		nanosleep(&ts, NULL);
	}
	/* SQLite answers with the mode it really uses. */
	mode = rc == SQLITE_ROW ? sqlite3_column_text(stmt, 0) : NULL;
	if (rc != SQLITE_ROW)
		rc = sql_fail(e, db, rc, who, "journal_mode");
	else if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
		rc = err_set(e, -EIO, "%s: journal_mode: got %s, not wal", who,
		    mode != NULL ? (const char *)mode : "nothing");
	else
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}

/*** Kept statements ***/

int
sql_cache_prepare(struct sql_cache *c, sqlite3 *db, const char *sql,
    sqlite3_stmt **stmt, const char *who, struct err *e)
{
	bool room = c->n < SQL_CACHE_MAX;
	int rc;

	for (size_t i = 0; i < c->n; i++)
		if (c->kept[i].sql == sql && !c->kept[i].busy) {
			c->kept[i].busy = true;
			*stmt = c->kept[i].stmt;
			return 0;
		}
	rc = sqlite3_prepare_v3(db, sql, -1, room ? SQLITE_PREPARE_PERSISTENT : 0,
	    stmt, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(e, db, rc, who, "prepare");
	if (room && *stmt != NULL) {
		c->kept[c->n].sql = sql;
		c->kept[c->n].stmt = *stmt;
		c->kept[c->n++].busy = true;
	}
	return 0;
}

void
sql_cache_release(struct sql_cache *c, sqlite3_stmt *stmt)
{
	if (stmt == NULL)
		return;
	for (size_t i = 0; i < c->n; i++)
		if (c->kept[i].stmt == stmt) {
			sqlite3_reset(stmt);
			sqlite3_clear_bindings(stmt);
			c->kept[i].busy = false;
			return;
		}
	sqlite3_finalize(stmt);
}

void
sql_cache_close(struct sql_cache *c)
{
	for (size_t i = 0; i < c->n; i++)
		sqlite3_finalize(c->kept[i].stmt);
	c->n = 0;
}
