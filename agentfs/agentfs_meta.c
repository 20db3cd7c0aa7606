/*
 * agentfs_meta.c - the AgentFS key-value store and tool-call history.
 *
 * kv_store values are JSON text, checked on the way in; keys are matched by
 * prefix byte for byte (no LIKE: '%' and '_' are ordinary). tool_calls rows
 * are written in spec 0.4 units (seconds, duration in milliseconds); rows of
 * a legacy database are read back as stored (see agentfs_is_legacy()).
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../common/sql.h"
#include "../common/xmalloc.h"
#include "agentfs.h"
#include "internal.h"

/*** Key-value ***/

int
agentfs_kv_get(struct agentfs *fs, const char *key, char **value,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	const char *v;
	int rc;

	*value = NULL;
	rc = afs_stmt_prepare(fs, "SELECT value FROM kv_store WHERE key = ?1",
	    &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		v = (const char *)sqlite3_column_text(st, 0);
		*value = xmemdup0(v ? v : "", v ?
		    (size_t)sqlite3_column_bytes(st, 0) : 0);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "agentfs: kv key '%s' not found",
		    key);
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "kv_store");
	}
	afs_stmt_release(fs, st);
	return rc;
}

int
agentfs_kv_set(struct agentfs *fs, const char *key, const char *value,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int64_t sec, nsec;
	int rc;

	if (key == NULL || *key == '\0')
		return err_set(e, -EINVAL, "agentfs: empty kv key");
	if (value == NULL || !afs_json_valid(value))
		return err_set(e, -EINVAL, "agentfs: kv key '%s': value is not "
		    "JSON", key);
	rc = afs_stmt_prepare(fs, "INSERT INTO kv_store (key, value, created_at,"
	    " updated_at) VALUES (?1, ?2, ?3, ?3) ON CONFLICT (key) DO UPDATE"
	    " SET value = excluded.value, updated_at = excluded.updated_at",
	    &st, e);
	if (rc != 0)
		return rc;
	afs_now_get(&sec, &nsec);
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, sec);
	return afs_stmt_done(fs, st, "kv set", e);
}

int
agentfs_kv_delete(struct agentfs *fs, const char *key, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "DELETE FROM kv_store WHERE key = ?1", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	if ((rc = afs_stmt_done(fs, st, "kv delete", e)) != 0)
		return rc;
	if (sqlite3_changes(fs->db) == 0)
		return err_set(e, -ENOENT, "agentfs: kv key '%s' not found",
		    key);
	return 0;
}

int
agentfs_kv_keys(struct agentfs *fs, const char *prefix, agentfs_key_cb cb,
    void *arg, struct err *e)
{
	sqlite3_stmt *st = NULL;
	const char *k;
	int rc, ret = 0;

	/* Bytewise prefix match: no LIKE, so '%' and '_' mean themselves. */
	rc = afs_stmt_prepare(fs, "SELECT key FROM kv_store WHERE"
	    " substr(CAST(key AS BLOB), 1, length(CAST(?1 AS BLOB)))"
	    " = CAST(?1 AS BLOB) ORDER BY key", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, prefix ? prefix : "", -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		k = (const char *)sqlite3_column_text(st, 0);
		if (k != NULL && (ret = cb(k, arg)) != 0)
			break;
	}
	if (ret == 0 && rc != SQLITE_DONE)
		ret = sql_fail(e, fs->db, rc, "agentfs", "kv_store");
	afs_stmt_release(fs, st);
	return ret;
}

/*** History ***/

static bool
status_ok(const char *s)
{
	return s != NULL && (strcmp(s, "pending") == 0 ||
	    strcmp(s, "success") == 0 || strcmp(s, "error") == 0);
}

/* One string: the handle's statement cache knows it by its address. */
static const char tool_call_put[] = "INSERT INTO tool_calls (name, parameters,"
    " result, error, status, started_at, completed_at, duration_ms)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

void
agentfs_capture_warm(struct agentfs *fs)
{
	sqlite3_stmt *st = NULL;
	struct err e = { 0 };

	if (afs_stmt_prepare(fs, tool_call_put, &st, &e) == 0)
		afs_stmt_release(fs, st);
	afs_session_warm(fs);
}

int
agentfs_tool_call_add(struct agentfs *fs, const char *name,
    const char *params_json, const char *result_json, const char *error,
    const char *status, int64_t started_ms, int64_t completed_ms,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (name == NULL || *name == '\0')
		return err_set(e, -EINVAL, "agentfs: tool call without a name");
	if (params_json != NULL && !afs_json_valid(params_json))
		return err_set(e, -EINVAL, "agentfs: tool call '%s': "
		    "parameters are not JSON", name);
	if (result_json != NULL && !afs_json_valid(result_json))
		return err_set(e, -EINVAL, "agentfs: tool call '%s': result "
		    "is not JSON", name);
	if (!status_ok(status))
		return err_set(e, -EINVAL, "agentfs: tool call '%s': bad "
		    "status '%s'", name, status ? status : "(null)");
	if (started_ms < 0 || completed_ms < started_ms)
		return err_set(e, -EINVAL, "agentfs: tool call '%s': bad "
		    "times", name);
	rc = afs_stmt_prepare(fs, tool_call_put, &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, params_json, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, result_json, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, error, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, status, -1, SQLITE_STATIC);
	/* Spec 0.4: times in seconds, duration in milliseconds. */
	sqlite3_bind_int64(st, 6, started_ms / 1000);
	sqlite3_bind_int64(st, 7, completed_ms / 1000);
	sqlite3_bind_int64(st, 8, completed_ms - started_ms);
	return afs_stmt_done(fs, st, "insert tool call", e);
}

int64_t
agentfs_tool_call_count(struct agentfs *fs, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int64_t n;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT COUNT(*) FROM tool_calls", &st, e);
	if (rc != 0)
		return rc;
	rc = sqlite3_step(st);
	n = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) :
	    sql_fail(e, fs->db, rc, "agentfs", "tool_calls");
	afs_stmt_release(fs, st);
	return n;
}

int
agentfs_tool_call_each(struct agentfs *fs, agentfs_tool_call_cb cb,
    void *arg, struct err *e)
{
	sqlite3_stmt *st = NULL;
	struct agentfs_tool_call tc;
	int rc, ret = 0;

	rc = afs_stmt_prepare(fs, "SELECT id, name, parameters, result, error,"
	    " status, started_at, completed_at, duration_ms FROM tool_calls"
	    " ORDER BY id", &st, e);
	if (rc != 0)
		return rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		tc.id = sqlite3_column_int64(st, 0);
		tc.name = (const char *)sqlite3_column_text(st, 1);
		tc.parameters = (const char *)sqlite3_column_text(st, 2);
		tc.result = (const char *)sqlite3_column_text(st, 3);
		tc.error = (const char *)sqlite3_column_text(st, 4);
		tc.status = (const char *)sqlite3_column_text(st, 5);
		tc.started_at = sqlite3_column_int64(st, 6);
		tc.completed_at = sqlite3_column_int64(st, 7);
		tc.duration_ms = sqlite3_column_int64(st, 8);
		if (tc.name == NULL)
			tc.name = "";
		if (tc.status == NULL)
			tc.status = "";
		if ((ret = cb(&tc, arg)) != 0)
			break;
	}
	if (ret == 0 && rc != SQLITE_DONE)
		ret = sql_fail(e, fs->db, rc, "agentfs", "tool_calls");
	afs_stmt_release(fs, st);
	return ret;
}

/*** Single entries and raw copies (worker/ops.c) ***/

int
agentfs_stat(struct agentfs *fs, const char *path, struct agentfs_entry *ent,
    char **target, struct err *e)
{
	sqlite3_stmt *st = NULL;
	const char *t;
	int64_t ino;
	int rc;

	memset(ent, 0, sizeof(*ent));
	*target = NULL;
	if ((rc = afs_resolve_ino(fs, path, &ino, e)) != 0)
		return rc;
	rc = afs_stmt_prepare(fs, "SELECT mode, size, mtime FROM fs_inode"
	    " WHERE ino = ?1", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		ent->mode = (uint32_t)sqlite3_column_int64(st, 0);
		ent->size = (uint64_t)sqlite3_column_int64(st, 1);
		ent->mtime = sqlite3_column_int64(st, 2);
		rc = sqlite3_column_int64(st, 1) < 0 ? err_set(e, -EBADMSG,
		    "agentfs: %s: negative size", path) : 0;
	} else if (rc == SQLITE_DONE) {
		rc = err_set(e, -EBADMSG, "agentfs: %s: missing inode", path);
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_inode");
	}
	afs_stmt_release(fs, st);
	if (rc != 0)
		return rc;
	ent->path = path;
	t = strrchr(path, '/');
	ent->name = t != NULL ? t + 1 : path;
	ent->ino = ino;
	ent->form = AGENTFS_LINK_NONE;
	switch (ent->mode & S_IFMT) {
	case S_IFDIR:
		ent->kind = AGENTFS_DIR;
		return 0;
	case S_IFREG:
		ent->kind = AGENTFS_FILE;
		return 0;
	case S_IFLNK:
		break;
	default:
		ent->kind = AGENTFS_SPECIAL;
		return 0;
	}
	ent->kind = AGENTFS_SYMLINK;
	ent->form = AGENTFS_LINK_NATIVE;
	rc = afs_stmt_prepare(fs, "SELECT target FROM fs_symlink WHERE ino = ?1",
	    &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && (t = (const char *)sqlite3_column_text(st, 0))
	    != NULL && *t != '\0' &&
	    strlen(t) == (size_t)sqlite3_column_bytes(st, 0)) {
		*target = xstrdup(t);
		ent->target = *target;
		rc = 0;
	} else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
		rc = err_set(e, -EBADMSG, "agentfs: %s: symlink without a "
		    "valid fs_symlink target", path);
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_symlink");
	}
	afs_stmt_release(fs, st);
	return rc;
}

int
agentfs_set_mtime(struct agentfs *fs, const char *path, int64_t mtime,
    struct err *e)
{
	static const char *sql_04 = "UPDATE fs_inode SET mtime = ?1,"
	    " mtime_nsec = 0 WHERE ino = ?2";
	static const char *sql_legacy = "UPDATE fs_inode SET mtime = ?1"
	    " WHERE ino = ?2";
	sqlite3_stmt *st = NULL;
	int64_t ino;
	int rc;

	if ((rc = afs_resolve_ino(fs, path, &ino, e)) != 0)
		return rc;
	rc = afs_stmt_prepare(fs, fs->has_nsec ? sql_04 : sql_legacy, &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, mtime);
	sqlite3_bind_int64(st, 2, ino);
	return afs_stmt_done(fs, st, "set mtime", e);
}

int
agentfs_tool_call_put(struct agentfs *fs, const struct agentfs_tool_call *tc,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (tc->name == NULL || *tc->name == '\0')
		return err_set(e, -EINVAL, "agentfs: tool call without a name");
	if (!status_ok(tc->status))
		return err_set(e, -EINVAL, "agentfs: tool call '%s': bad "
		    "status '%s'", tc->name, tc->status ? tc->status :
		    "(null)");
	rc = afs_stmt_prepare(fs, tool_call_put, &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, tc->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, tc->parameters, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, tc->result, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, tc->error, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, tc->status, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, tc->started_at);
	/* agentfs_tool_call_each() reads NULL as 0: write it back as NULL. */
	if (tc->completed_at != 0)
		sqlite3_bind_int64(st, 7, tc->completed_at);
	sqlite3_bind_int64(st, 8, tc->duration_ms);
	return afs_stmt_done(fs, st, "insert tool call", e);
}

int
agentfs_usage(struct agentfs *fs, uint64_t *bytes, uint64_t *entries,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	/* Inodes, not paths: a hard-linked file counts once, as on a disk. */
	rc = afs_stmt_prepare(fs, "SELECT count(*), coalesce(sum(CASE WHEN "
	    "(mode & 61440) = 32768 THEN size ELSE 0 END), 0) FROM fs_inode", &st, e);
	if (rc != 0)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		int64_t n = sqlite3_column_int64(st, 0), b = sqlite3_column_int64(st, 1);

		*entries = n > 1 ? (uint64_t)(n - 1) : 0;	/* not the root */
		*bytes = b > 0 ? (uint64_t)b : 0;
		rc = 0;
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_inode");
	}
	afs_stmt_release(fs, st);
	return rc;
}

int
agentfs_claims(struct agentfs *fs, uint64_t *paths, uint64_t *bytes,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	/* total() is a double: no overflow however many sizes it adds. */
	rc = afs_stmt_prepare(fs, "SELECT count(*), total(CASE WHEN"
	    " (i.mode & 61440) = 32768 THEN min(max(i.size, 0), 1099511627776)"
	    " ELSE 0 END) FROM fs_dentry AS d LEFT JOIN fs_inode AS i"
	    " ON i.ino = d.ino", &st, e);
	if (rc != 0)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		int64_t n = sqlite3_column_int64(st, 0);
		double b = sqlite3_column_double(st, 1);

		*paths = n > 0 ? (uint64_t)n : 0;
		*bytes = b <= 0 ? 0 : b >= 1.8e19 ? UINT64_MAX : (uint64_t)b;
		rc = 0;
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_dentry");
	}
	afs_stmt_release(fs, st);
	return rc;
}
