/*
 * store_sql.c - the store handle's kept statements (store_int.h:
 * store__prepare() and its kin, on common/sql.h's cache), a leaf the
 * store's other files call.
 */
#include <sqlite3.h>

#include "../common/sql.h"
#include "store_int.h"

int
store__prepare(struct store *st, const char *sql, sqlite3_stmt **stmt,
    struct err *e)
{
	return sql_cache_prepare(&st->stmts, st->db, sql, stmt, "store", e);
}

void
store__release(struct store *st, sqlite3_stmt *stmt)
{
	sql_cache_release(&st->stmts, stmt);
}

int
store__step_release(struct store *st, sqlite3_stmt *stmt, const char *what,
    struct err *e)
{
	int rc = sqlite3_step(stmt);

	rc = rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc, "store", what);
	store__release(st, stmt);
	return rc;
}

/* Runs one kept statement of no rows and no parameters. */
static int
stmt_run(struct store *st, const char *sql, const char *what, struct err *e)
{
	sqlite3_stmt *stmt;
	int rc;

	if ((rc = store__prepare(st, sql, &stmt, e)) != 0)
		return rc;
	return store__step_release(st, stmt, what, e);
}

int
store__begin(struct store *st, struct err *e)
{
	return stmt_run(st, "BEGIN IMMEDIATE", "begin", e);
}

int
store__tx_end(struct store *st, int rc, struct err *e)
{
	if (rc == 0)
		rc = stmt_run(st, "COMMIT", "commit", e);
	if (rc != 0)
		sql_rollback(st->db);
	return rc;
}

void
store__stmts_close(struct store *st)
{
	sql_cache_close(&st->stmts);
}
