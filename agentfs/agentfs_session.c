/*
 * agentfs_session.c - a sandbox's shell session (working directory and
 * exported variables) kept in its snapshot.
 *
 * One extra table, sandq_session(name TEXT PRIMARY KEY, value BLOB NOT
 * NULL), created on the first write. It travels with the snapshot, so a
 * fork or an export carries the session along, and AgentFS tools that do
 * not know it ignore it. Values are bytes: a directory or a variable may
 * hold any byte but NUL, valid UTF-8 or not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/sql.h"
#include "internal.h"

#define SESSION_DDL "CREATE TABLE IF NOT EXISTS sandq_session (" \
	"name TEXT PRIMARY KEY, value BLOB NOT NULL)"

int
agentfs_session_get(struct agentfs *fs, const char *name, void **value,
    size_t *len, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	*value = NULL;
	*len = 0;
	rc = sqlite3_prepare_v2(fs->db,
	    "SELECT value FROM sandq_session WHERE name = ?1", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		/* No table: no session yet. */
		sqlite3_finalize(st);
		return err_set(e, -ENOENT, "agentfs: no session");
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		int n = sqlite3_column_bytes(st, 0);
		const void *p = sqlite3_column_blob(st, 0);

		*value = malloc((size_t)n + 1);
		if (*value == NULL) {
			sqlite3_finalize(st);
			return err_set(e, -ENOMEM, "agentfs: session: out of memory");
		}
		if (n > 0)
			memcpy(*value, p, (size_t)n);
		((char *)*value)[n] = '\0';
		*len = (size_t)n;
		sqlite3_finalize(st);
		return 0;
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_DONE)
		return err_set(e, -ENOENT, "agentfs: session: no '%s'", name);
	return sql_fail(e, fs->db, rc, "agentfs", "session read");
}

/* One string: the handle's statement cache knows it by its address. */
static const char session_put[] = "INSERT INTO sandq_session (name, value) "
    "VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value";

void
afs_session_warm(struct agentfs *fs)
{
	sqlite3_stmt *st = NULL;
	struct err e = { 0 };

	/* Fails, and keeps nothing, while the table does not exist. */
	if (afs_stmt_prepare(fs, session_put, &st, &e) == 0) {
		fs->session_table = true;
		afs_stmt_release(fs, st);
	}
}

int
agentfs_session_set(struct agentfs *fs, const char *name, const void *value,
    size_t len, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (!fs->session_table) {
		if ((rc = sql_exec(fs->db, SESSION_DDL, "agentfs", "session table",
		    e)) != 0)
			return rc;
		fs->session_table = true;
	}
	if ((rc = afs_stmt_prepare(fs, session_put, &st, e)) != 0)
		return rc;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_blob64(st, 2, len > 0 ? value : "", len, SQLITE_STATIC);
	return afs_stmt_done(fs, st, "session write", e);
}
