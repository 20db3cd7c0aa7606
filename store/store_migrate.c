/*
 * store_migrate.c - converting a schema-1 snapshot store (whole blobs keyed
 * by the SHA-256 of their bytes) into schema 2 (chunks under a manifest
 * key), and a schema-2 one into schema 3 (the sandboxes' image and
 * workdir), once, when store_open() finds one. store.c's schema_ensure() runs
 * it inside the transaction that reads the schema version, so of several
 * processes opening one old file, one converts it and the others find it
 * done. It stores the blobs through the plans of store_chunks.c.
 */
#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "../common/sql.h"
#include "../common/util.h"
#include "store.h"
#include "store_int.h"

/*
 * Schema 1 differs only in blobs: (sha256, size, data, created_at), the
 * whole blob keyed by the SHA-256 of its bytes. store__migrate_v1() fills
 * these tables from it, then swaps blobs_v2 in.
 */
static const char MIGRATE_V1_SQL[] =
	CHUNK_TABLES_SQL
	"CREATE TABLE blobs_v2" BLOBS_COLUMNS_SQL;
static const char MIGRATE_V1_END_SQL[] =
	"DROP TABLE blobs;"
	"ALTER TABLE blobs_v2 RENAME TO blobs;"
	"PRAGMA user_version = 2;";

/* Renames blob old to new in every head and history row. */
static int
migrate_rename(sqlite3_stmt *heads, sqlite3_stmt *rows, const char *old,
    const char *new, struct err *e)
{
	int rc;

	if ((rc = sql_bind_text(heads, 1, new, "store", e)) != 0 ||
	    (rc = sql_bind_text(heads, 2, old, "store", e)) != 0 ||
	    (rc = sql_step_reset(heads, "store", "sandboxes", e)) != 0 ||
	    (rc = sql_bind_text(rows, 1, new, "store", e)) != 0 ||
	    (rc = sql_bind_text(rows, 2, old, "store", e)) != 0)
		return rc;
	return sql_step_reset(rows, "store", "versions", e);
}

/*
 * Converts a schema-1 file, inside schema_ensure()'s transaction: each
 * whole blob is cut into chunks and stored under its manifest key, and the
 * heads and history rows naming it are renamed. A blob whose bytes no
 * longer hash to its old key keeps that key, so reading it stays the
 * -EBADMSG it was rather than the damage gaining a valid name. Foreign
 * keys are off here (store_open() turns them on afterwards: the rows are
 * renamed before the table they point at is swapped in), so the result is
 * checked with foreign_key_check before it may commit.
 */
int
store__migrate_v1(struct store *st, struct err *e)
{
	sqlite3_stmt *blobs = NULL, *heads = NULL, *rows = NULL, *chk = NULL;
	char old[STORE_SHA_HEX + 1], got[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	struct blob_plan p;
	const void *data;
	int n, rc;

	if ((rc = sql_exec(st->db, MIGRATE_V1_SQL, "store", "migrate",
	    e)) != 0 ||
	    (rc = sql_prepare(st->db, "SELECT sha256, data, created_at"
	    " FROM blobs", &blobs, "store", e)) != 0 ||
	    (rc = sql_prepare(st->db, "UPDATE sandboxes SET head = ?1"
	    " WHERE head = ?2", &heads, "store", e)) != 0 ||
	    (rc = sql_prepare(st->db, "UPDATE versions SET sha256 = ?1"
	    " WHERE sha256 = ?2", &rows, "store", e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(blobs)) == SQLITE_ROW) {
		if ((rc = store__col_text(blobs, 0, old, sizeof(old),
		    "blobs.sha256", e)) != 0)
			goto out_finalize;
		data = sqlite3_column_blob(blobs, 1);
		n = sqlite3_column_bytes(blobs, 1);
		if (n < 0 || (data == NULL && n > 0)) {
			rc = err_set(e, -EBADMSG, "store: blob %s: damaged row",
			    old);
			goto out_finalize;
		}
		if ((rc = store__sha256_raw(data, (size_t)n, md, e)) != 0 ||
		    (rc = store__plan_make(st, data, (size_t)n, NULL, NULL, 0,
		    &p, e)) != 0)
			goto out_finalize;
		store__hex_of(md, SHA_RAW, got);
		if (strcmp(got, old) != 0)
			memcpy(p.key, old, sizeof(p.key));
		if ((rc = store__plan_chunks(st, &p, (int64_t)now_ms(),
		    e)) != 0 ||
		    (rc = store__plan_row(st,
		    "INSERT INTO blobs_v2 (sha256, size,"
		    " chunk_size, chunks, created_at) VALUES (?1, ?2, ?3, ?4,"
		    " ?5)", &p, sqlite3_column_int64(blobs, 2), e)) != 0 ||
		    (rc = migrate_rename(heads, rows, old, p.key, e)) != 0) {
			store__plan_free(&p);
			goto out_finalize;
		}
		store__plan_free(&p);
	}
	if (rc != SQLITE_DONE) {
		rc = sql_fail(e, st->db, rc, "store", "blobs");
		goto out_finalize;
	}
	sqlite3_finalize(blobs);
	blobs = NULL;
	if ((rc = sql_exec(st->db, MIGRATE_V1_END_SQL, "store", "migrate",
	    e)) != 0 ||
	    (rc = sql_prepare(st->db, "PRAGMA foreign_key_check", &chk, "store",
	    e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(chk);
	if (rc == SQLITE_ROW)
		rc = err_set(e, -EBADMSG, "store: migration: a row of %s names "
		    "a missing %s", sqlite3_column_text(chk, 0),
		    sqlite3_column_text(chk, 2));
	else
		rc = rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc, "store",
		    "migrate");
out_finalize:
	sqlite3_finalize(blobs);
	sqlite3_finalize(heads);
	sqlite3_finalize(rows);
	sqlite3_finalize(chk);
	return rc;
}

int
store__migrate_v2(struct store *st, struct err *e)
{
	/* A sandbox made before images recorded none: its jobs choose theirs. */
	return sql_exec(st->db,
	    "ALTER TABLE sandboxes ADD COLUMN image TEXT NOT NULL DEFAULT '';"
	    "ALTER TABLE sandboxes ADD COLUMN workdir TEXT NOT NULL DEFAULT '';"
	    "PRAGMA user_version = 3;", "store", "migrate", e);
}
