/*
 * store_sql.c - the store handle's kept statements (store_int.h:
 * store__prepare() and its kin), a leaf the store's other files call:
 * prepared once per handle, reset and handed out again.
 */
#include <string.h>

#include <sqlite3.h>

#include "../common/sql.h"
#include "store_int.h"

int
store__prepare(struct store *st, const char *sql, sqlite3_stmt **stmt,
    struct err *e)
{
	struct store_stmt *k;
	int rc;

	for (size_t i = 0; i < st->nstmts; i++) {
		k = &st->stmts[i];
		if (!k->busy && strcmp(sqlite3_sql(k->stmt), sql) == 0) {
			k->busy = true;
			*stmt = k->stmt;
			return 0;
		}
	}
	rc = sqlite3_prepare_v3(st->db, sql, -1, st->nstmts < STORE_STMTS ?
	    SQLITE_PREPARE_PERSISTENT : 0, stmt, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(e, st->db, rc, "store", "prepare");
	if (st->nstmts < STORE_STMTS && *stmt != NULL)
		st->stmts[st->nstmts++] = (struct store_stmt){ *stmt, true };
	return 0;
}

void
store__release(struct store *st, sqlite3_stmt *stmt)
{
	if (stmt == NULL)
		return;
	for (size_t i = 0; i < st->nstmts; i++)
		if (st->stmts[i].stmt == stmt) {
			sqlite3_reset(stmt);
			sqlite3_clear_bindings(stmt);
			st->stmts[i].busy = false;
			return;
		}
	sqlite3_finalize(stmt);
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
	for (size_t i = 0; i < st->nstmts; i++)
		sqlite3_finalize(st->stmts[i].stmt);
	st->nstmts = 0;
}
