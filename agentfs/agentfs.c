/*
 * agentfs.c - the AgentFS codec: snapshots as in-memory SQLite databases.
 *
 * A snapshot blob is copied into SQLite's memdb VFS with
 * sqlite3_deserialize() and read or changed there; sqlite3_serialize()
 * turns it back into one file image. No file is ever opened, so no -wal or
 * -shm appears anywhere, and a snapshot never touches the disk here.
 *
 * DESIGN
 * Blobs come from tenants (sandbox.import, uploaded snapshots), so the
 * database is hostile input. Before SQLite sees a byte, the header is
 * checked (magic, page size, whole pages); the connection runs in defensive
 * mode with triggers, views and untrusted schema functions disabled, so a
 * crafted schema cannot make our own statements do anything else; growth is
 * capped with SQLITE_FCNTL_SIZE_LIMIT. An uploaded database
 * (agentfs_open_blob()) is held to more, as SQLite's "Defense Against The
 * Dark Arts" advises: cell sizes checked, no memory mapping, a bounded
 * cache, a deadline; any schema object but the AgentFS tables and their
 * indexes refused from sqlite_master before a table is touched (a virtual
 * table would hand our queries to a module's code); PRAGMA quick_check
 * must pass; no generated column; and a file's size is a claim, checked
 * against the bytes its chunks hold before it is allocated. Every table
 * and column used below must exist, or the open fails naming it. Walking
 * the tree bounds depth and path length, refuses a directory reached twice
 * (a cycle, or a directory hard link that could make the walk
 * exponential), and refuses names a host filesystem would interpret ('/',
 * NUL, "", ".", ".."). SQL is constant text with bound parameters only;
 * SQLite calls go through ../common/sql.h.
 *
 * Two layouts are read: spec 0.4 (rdev and *_nsec columns, a schema_version
 * row) and the older LocalSandbox one. Writes follow whatever columns the
 * database has; symlinks are always written in the native form.
 *
 * Sections: Helpers (the statement cache), Handles, Paths, Walk, Files.
 * The key-value store and the history are in agentfs_meta.c, the shell
 * session in agentfs_session.c.
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
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "agentfs.h"
#include "internal.h"
#include "cowimg.h"

/* An inode as the path and file code needs it. */
struct node {
	int64_t ino;		/* fs_inode.ino */
	uint32_t mode;		/* full st_mode */
	int64_t size;		/* bytes */
	int64_t nlink;		/* links */
};

/* Where a path leads: its parent directory and, if present, its inode. */
struct loc {
	int64_t parent;				/* parent directory inode */
	char name[AGENTFS_NAME_MAX + 1];	/* last component, "" = root */
	bool found;				/* the last component exists */
	struct node node;			/* its inode when found */
};

#define AFS_PROGRESS_OPS 1000		/* VM steps between deadline checks */
#define AFS_UNTRUSTED_CACHE_KIB "2048"	/* page cache of an uploaded database */
#define AFS_SHOW_MAX 64			/* bytes of a stored name in a message */

static const char SCHEMA_SQL[] =
	"CREATE TABLE fs_config (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"CREATE TABLE fs_inode (ino INTEGER PRIMARY KEY AUTOINCREMENT,"
	" mode INTEGER NOT NULL, nlink INTEGER NOT NULL DEFAULT 0,"
	" uid INTEGER NOT NULL DEFAULT 0, gid INTEGER NOT NULL DEFAULT 0,"
	" size INTEGER NOT NULL DEFAULT 0, atime INTEGER NOT NULL,"
	" mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,"
	" rdev INTEGER NOT NULL DEFAULT 0,"
	" atime_nsec INTEGER NOT NULL DEFAULT 0,"
	" mtime_nsec INTEGER NOT NULL DEFAULT 0,"
	" ctime_nsec INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE fs_dentry (id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL, parent_ino INTEGER NOT NULL,"
	" ino INTEGER NOT NULL, UNIQUE (parent_ino, name));"
	"CREATE INDEX idx_fs_dentry_parent ON fs_dentry (parent_ino, name);"
	"CREATE TABLE fs_data (ino INTEGER NOT NULL,"
	" chunk_index INTEGER NOT NULL, data BLOB NOT NULL,"
	" PRIMARY KEY (ino, chunk_index));"
	"CREATE TABLE fs_symlink (ino INTEGER PRIMARY KEY,"
	" target TEXT NOT NULL);"
	"CREATE TABLE kv_store (key TEXT PRIMARY KEY, value TEXT NOT NULL,"
	" created_at INTEGER DEFAULT (unixepoch()),"
	" updated_at INTEGER DEFAULT (unixepoch()));"
	"CREATE INDEX idx_kv_store_created_at ON kv_store (created_at);"
	"CREATE TABLE tool_calls (id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" name TEXT NOT NULL, parameters TEXT, result TEXT, error TEXT,"
	" status TEXT NOT NULL DEFAULT 'pending',"
	" started_at INTEGER NOT NULL, completed_at INTEGER,"
	" duration_ms INTEGER);"
	"CREATE INDEX idx_tool_calls_name ON tool_calls (name);"
	"CREATE INDEX idx_tool_calls_started_at ON tool_calls (started_at);";

/* Every table and column this file reads or writes (checked on open). */
static const struct {
	const char *table;
	const char *cols[10];
} schema_need[] = {
	{ "fs_config", { "key", "value" } },
	{ "fs_inode", { "ino", "mode", "nlink", "uid", "gid", "size",
	    "atime", "mtime", "ctime" } },
	{ "fs_dentry", { "name", "parent_ino", "ino" } },
	{ "fs_data", { "ino", "chunk_index", "data" } },
	{ "fs_symlink", { "ino", "target" } },
	{ "kv_store", { "key", "value", "created_at", "updated_at" } },
	{ "tool_calls", { "id", "name", "parameters", "result", "error",
	    "status", "started_at", "completed_at", "duration_ms" } },
};

/*
 * The plain tables an untrusted database may hold besides schema_need's:
 * SQLite's own for AUTOINCREMENT, and sandq's session table
 * (agentfs_session.c). Anything else is refused by schema_objects_check().
 */
static const char *const schema_extra[] = {
	"sqlite_sequence",
	"sandq_session",
};

/*** Helpers ***/

int
afs_stmt_prepare(struct agentfs *fs, const char *sql, sqlite3_stmt **st,
    struct err *e)
{
	return sql_cache_prepare(&fs->cache, fs->db, sql, st, "agentfs", e);
}

void
afs_stmt_release(struct agentfs *fs, sqlite3_stmt *st)
{
	sql_cache_release(&fs->cache, st);
}

/* Steps a statement that returns no rows, then releases it. */
int
afs_stmt_done(struct agentfs *fs, sqlite3_stmt *st, const char *what,
    struct err *e)
{
	int rc = sql_step_reset(st, "agentfs", what, e);

	afs_stmt_release(fs, st);
	return rc;
}

void
afs_now_get(int64_t *sec, int64_t *nsec)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	*sec = ts.tv_sec;
	*nsec = ts.tv_nsec;
}

/* True when text is valid JSON (any value, not only objects). */
bool
afs_json_valid(const char *text)
{
	json_error_t jerr;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);

	if (j == NULL)
		return false;
	json_decref(j);
	return true;
}

/* True when a stored name could be used as one path component. */
static bool
name_ok(const char *name, size_t len)
{
	if (len == 0 || len > AGENTFS_NAME_MAX || strlen(name) != len)
		return false;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	return memchr(name, '/', len) == NULL;
}

/*** Handles ***/

/* Opens a private memdb connection with the hardening every handle gets. */
static void fs_harden(struct agentfs *fs);

static int
fs_alloc(struct agentfs **out, struct err *e)
{
	struct agentfs *fs = xcalloc(1, sizeof(*fs));
	int rc;

	rc = sqlite3_open_v2(":memory:", &fs->db,
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		rc = sql_fail(e, NULL, rc, "agentfs", "sqlite3_open");
		agentfs_close(fs);
		return rc;
	}
	fs_harden(fs);
	*out = fs;
	return 0;
}

static void
fs_harden(struct agentfs *fs)
{
	/*
	 * The database is tenant data: nothing in its schema may run code of
	 * its own when our statements touch a table (triggers, views,
	 * side-effecting functions in defaults), and no statement may corrupt
	 * it deliberately (defensive mode).
	 */
	sqlite3_db_config(fs->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	sqlite3_db_config(fs->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	sqlite3_db_config(fs->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
	sqlite3_db_config(fs->db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
	sqlite3_limit(fs->db, SQLITE_LIMIT_ATTACHED, 0);
}

/* Whether SQLite should stop the statement running (sqlite3_progress_handler). */
static int
deadline_cb(void *arg)
{
	const struct agentfs *fs = arg;

	return fs->deadline_ns != 0 && mono_ns() > fs->deadline_ns;
}

/*
 * What an uploaded database gets on top of fs_harden(), as SQLite's
 * "Defense Against The Dark Arts" advises for database files of unknown
 * origin: every cell's size checked against its page as it is read, no
 * memory-mapped reads, a bounded page cache, sorts and temporary tables in
 * memory (never files of the worker's, and within the heap limit a caller
 * sets), and the deadline checked every AFS_PROGRESS_OPS virtual-machine
 * steps. After sqlite3_deserialize(): the pragmas are per database.
 */
static int
fs_harden_untrusted(struct agentfs *fs, struct err *e)
{
	static const char pragmas[] =
	    "PRAGMA cell_size_check = ON;"
	    "PRAGMA mmap_size = 0;"
	    "PRAGMA temp_store = MEMORY;"
	    "PRAGMA cache_size = -" AFS_UNTRUSTED_CACHE_KIB ";";
	int rc;

	fs->untrusted = true;
	sqlite3_progress_handler(fs->db, AFS_PROGRESS_OPS, deadline_cb, fs);
	rc = sqlite3_exec(fs->db, pragmas, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return rc == SQLITE_NOMEM || rc == SQLITE_INTERRUPT ?
		    sql_fail(e, fs->db, rc, "agentfs", "open") :
		    err_set(e, -EBADMSG, "agentfs: corrupt or truncated "
		    "database: %s", sqlite3_errmsg(fs->db));
	return 0;
}


/* Hands buf (sqlite3_malloc'd, always consumed) to the memdb VFS. */
static int
fs_deserialize(struct agentfs *fs, unsigned char *buf, size_t len,
    struct err *e)
{
	sqlite3_int64 limit = (sqlite3_int64)AGENTFS_BLOB_MAX;
	int rc;

	rc = sqlite3_deserialize(fs->db, "main", buf, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE |
	    SQLITE_DESERIALIZE_RESIZEABLE);
	if (rc != SQLITE_OK)
		return sql_fail(e, fs->db, rc, "agentfs", "deserialize");
	sqlite3_file_control(fs->db, "main", SQLITE_FCNTL_SIZE_LIMIT, &limit);
	return 0;
}

int
agentfs_new(struct agentfs **out, struct err *e)
{
	static const char *cfg_sql =
	    "INSERT INTO fs_config (key, value) VALUES"
	    " ('chunk_size', '4096'), ('schema_version', '0.4')";
	static const char *root_sql =
	    "INSERT INTO fs_inode (ino, mode, nlink, uid, gid, size, atime,"
	    " mtime, ctime, rdev, atime_nsec, mtime_nsec, ctime_nsec)"
	    " VALUES (1, ?1, 1, 0, 0, 0, ?2, ?2, ?2, 0, ?3, ?3, ?3)";
	struct agentfs *fs = NULL;
	sqlite3_stmt *st = NULL;
	int64_t sec, nsec;
	int rc;

	*out = NULL;
	if ((rc = fs_alloc(&fs, e)) != 0)
		return rc;
	/* An empty memdb image, so new and opened handles serialise alike. */
	if ((rc = fs_deserialize(fs, NULL, 0, e)) != 0)
		goto out_close;
	fs->chunk_size = 4096;
	fs->has_nsec = true;
	fs->has_version = true;
	if ((rc = sql_exec(fs->db, "BEGIN", "agentfs", "begin", e)) != 0)
		goto out_close;
	if ((rc = sql_exec(fs->db, SCHEMA_SQL, "agentfs", "create schema",
	    e)) != 0 ||
	    (rc = sql_exec(fs->db, cfg_sql, "agentfs", "fs_config", e)) != 0 ||
	    (rc = afs_stmt_prepare(fs, root_sql, &st, e)) != 0) {
		sql_rollback(fs->db);
		goto out_close;
	}
	afs_now_get(&sec, &nsec);
	sqlite3_bind_int64(st, 1, S_IFDIR | 0755);
	sqlite3_bind_int64(st, 2, sec);
	sqlite3_bind_int64(st, 3, nsec);
	rc = afs_stmt_done(fs, st, "root inode", e);
	if ((rc = sql_tx_end(fs->db, rc, "agentfs", e)) != 0)
		goto out_close;
	*out = fs;
	return 0;

out_close:
	agentfs_close(fs);
	return rc;
}


static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

/*
 * Checks the 100-byte header against the blob before SQLite sees it, so a
 * non-database or a cut-off download gets an error that says so.
 */
static int
header_check(const uint8_t *p, size_t len, struct err *e)
{
	uint32_t page, npages;

	if (len > AGENTFS_BLOB_MAX)
		return err_set(e, -EFBIG, "agentfs: snapshot of %zu bytes "
		    "exceeds the %zu-byte limit", len, AGENTFS_BLOB_MAX);
	if (len < 100 || memcmp(p, "SQLite format 3", 16) != 0)
		return err_set(e, -EBADMSG, "agentfs: not a SQLite 3 database "
		    "(bad header)");
	page = (uint32_t)p[16] << 8 | p[17];
	if (page == 1)
		page = 65536;
	if (page < 512 || page > 65536 || (page & (page - 1)) != 0)
		return err_set(e, -EBADMSG, "agentfs: bad page size %u", page);
	if (len % page != 0)
		return err_set(e, -EBADMSG, "agentfs: truncated database: "
		    "%zu bytes is not a whole number of %u-byte pages", len,
		    page);
	/* The page count is valid only when the change counters agree. */
	npages = be32(p + 28);
	if (npages != 0 && be32(p + 24) == be32(p + 92) &&
	    (uint64_t)npages * page > len)
		return err_set(e, -EBADMSG, "agentfs: truncated database: "
		    "header says %u pages, blob holds %zu", npages, len / page);
	return 0;
}

/*
 * Runs PRAGMA quick_check. The header check above catches most cut-off
 * blobs, but a WAL-mode writer leaves the header's page count unvalidated
 * (the change counter is not bumped), so a blob cut at a page boundary is
 * only found here: the schema points past the end.
 */
static int
quick_check(struct agentfs *fs, struct err *e)
{
	sqlite3_stmt *st = NULL;
	const char *res = NULL;
	int rc;

	rc = sqlite3_prepare_v2(fs->db, "PRAGMA quick_check(1)", -1, &st,
	    NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		res = (const char *)sqlite3_column_text(st, 0);
	if (rc == SQLITE_ROW && res != NULL && strcmp(res, "ok") == 0)
		rc = 0;
	else if (rc == SQLITE_NOMEM || rc == SQLITE_INTERRUPT)
		rc = sql_fail(e, fs->db, rc, "agentfs", "quick_check");
	else
		rc = err_set(e, -EBADMSG, "agentfs: corrupt or truncated "
		    "database: %s", res ? res : sqlite3_errmsg(fs->db));
	sqlite3_finalize(st);
	return rc;
}

/* Sets *has to whether table.col exists. */
static int
column_has(struct agentfs *fs, const char *table, const char *col, bool *has,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT 1 FROM pragma_table_info(?1)"
	    " WHERE name = ?2", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	*has = rc == SQLITE_ROW;
	rc = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? 0 :
	    sql_fail(e, fs->db, rc, "agentfs", "table_info");
	afs_stmt_release(fs, st);
	return rc;
}

/* Every table in schema_need must be a real table with its columns. */
static int
schema_check(struct agentfs *fs, struct err *e)
{
	sqlite3_stmt *st = NULL;
	bool has;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT type FROM sqlite_master WHERE name = ?1"
	    " AND type = 'table'", &st, e);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < sizeof(schema_need) / sizeof(schema_need[0]);
	    i++) {
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, schema_need[i].table, -1,
		    SQLITE_STATIC);
		rc = sqlite3_step(st);
		if (rc == SQLITE_DONE) {
			rc = err_set(e, -EBADMSG, "agentfs: not an AgentFS "
			    "database: no table %s", schema_need[i].table);
			goto out;
		}
		if (rc != SQLITE_ROW) {
			rc = sql_fail(e, fs->db, rc, "agentfs",
			    "sqlite_master");
			goto out;
		}
		for (size_t c = 0; c < 10 && schema_need[i].cols[c]; c++) {
			rc = column_has(fs, schema_need[i].table,
			    schema_need[i].cols[c], &has, e);
			if (rc != 0)
				goto out;
			if (!has) {
				rc = err_set(e, -EBADMSG, "agentfs: table %s "
				    "lacks column %s", schema_need[i].table,
				    schema_need[i].cols[c]);
				goto out;
			}
		}
	}
	rc = 0;
out:
	afs_stmt_release(fs, st);
	return rc;
}

/*
 * A stored name for a message: at most AFS_SHOW_MAX bytes, anything but
 * printable ASCII as '?', so a hostile name cannot forge a log line.
 */
static const char *
name_show(const unsigned char *s, char *buf, size_t size)
{
	size_t n = 0;

	for (; s != NULL && *s != '\0' && n + 1 < size && n < AFS_SHOW_MAX;
	    s++)
		buf[n++] = *s >= 0x20 && *s < 0x7f ? (char)*s : '?';
	buf[n] = '\0';
	return buf;
}

/*
 * True when sql starts with the keywords of words (NULL-ended), in any
 * case, each followed by whitespace or, for the last, anything but a
 * letter: "CREATE TABLE x", not "CREATE VIRTUAL TABLE x".
 */
static bool
sql_starts(const char *sql, const char *const *words)
{
	const char *p = sql;

	for (size_t i = 0; words[i] != NULL; i++) {
		size_t n = strlen(words[i]);

		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (strncasecmp(p, words[i], n) != 0)
			return false;
		p += n;
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    *p == '_')
			return false;
	}
	return true;
}

/* True when name is a table an AgentFS database may hold. */
static bool
table_allowed(const char *name)
{
	for (size_t i = 0; i < sizeof(schema_need) / sizeof(schema_need[0]);
	    i++)
		if (strcmp(name, schema_need[i].table) == 0)
			return true;
	for (size_t i = 0; i < sizeof(schema_extra) / sizeof(schema_extra[0]);
	    i++)
		if (strcmp(name, schema_extra[i]) == 0)
			return true;
	return false;
}

/*
 * Refuses, naming it, any schema object of an untrusted database but the
 * AgentFS tables (plain: "CREATE TABLE", with a b-tree of their own) and
 * indexes on them. A view or trigger would run SQL of the upload's when
 * our statements touch its table (both are disabled, and refused anyway
 * so that nothing of the kind reaches the store); a virtual table would
 * hand our queries to a module's code (FTS5's shadow-table readers, for
 * one) walking bytes of the upload; an unknown table is nothing sandq
 * reads and nothing it would store. Only sqlite_master is read, so no
 * module is ever loaded: this runs before any other statement.
 */
static int
schema_objects_check(struct agentfs *fs, struct err *e)
{
	static const char *const create_table[] = { "CREATE", "TABLE", NULL };
	static const char *const create_index[] = { "CREATE", "INDEX", NULL };
	static const char *const create_unique[] = { "CREATE", "UNIQUE",
	    "INDEX", NULL };
	static const char *const create_virtual[] = { "CREATE", "VIRTUAL",
	    NULL };
	char a[AFS_SHOW_MAX + 1], b[AFS_SHOW_MAX + 1], t[AFS_SHOW_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(fs->db, "SELECT type, name, tbl_name, "
	    "rootpage, sql FROM sqlite_master", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = rc == SQLITE_NOMEM || rc == SQLITE_INTERRUPT ?
		    sql_fail(e, fs->db, rc, "agentfs", "sqlite_master") :
		    err_set(e, -EBADMSG, "agentfs: corrupt or truncated "
		    "database: %s", sqlite3_errmsg(fs->db));
		sqlite3_finalize(st);
		return rc;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *type = (const char *)sqlite3_column_text(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		const char *tbl = (const char *)sqlite3_column_text(st, 2);
		int64_t root = sqlite3_column_int64(st, 3);
		const char *sql = (const char *)sqlite3_column_text(st, 4);

		if (type == NULL || name == NULL || tbl == NULL) {
			rc = err_set(e, -EBADMSG, "agentfs: a schema row "
			    "without a type or name");
			goto out;
		}
		name_show((const unsigned char *)name, a, sizeof(a));
		name_show((const unsigned char *)tbl, b, sizeof(b));
		if (strcmp(type, "table") == 0) {
			if (!table_allowed(name)) {
				rc = err_set(e, -EBADMSG, "agentfs: table '%s' "
				    "is not part of the AgentFS format: only "
				    "its tables are allowed", a);
				goto out;
			}
			if (sql == NULL || !sql_starts(sql, create_table) ||
			    root <= 0) {
				rc = err_set(e, -EBADMSG, "agentfs: table '%s' "
				    "is not a plain table (%s): virtual tables "
				    "are not allowed", a, sql != NULL &&
				    sql_starts(sql, create_virtual) ?
				    "CREATE VIRTUAL TABLE" : "no b-tree of its "
				    "own");
				goto out;
			}
		} else if (strcmp(type, "index") == 0) {
			if (!table_allowed(tbl) || root <= 0 || (sql != NULL &&
			    !sql_starts(sql, create_index) &&
			    !sql_starts(sql, create_unique))) {
				rc = err_set(e, -EBADMSG, "agentfs: index '%s' "
				    "on '%s' is not allowed", a, b);
				goto out;
			}
		} else {
			/* view, trigger, or whatever a crafted row says. */
			rc = err_set(e, -EBADMSG, "agentfs: the database "
			    "holds a %s '%s' (on '%s'): views and triggers "
			    "are not allowed", name_show((const unsigned char
			    *)type, t, sizeof(t)), a, b);
			goto out;
		}
	}
	rc = rc == SQLITE_DONE ? 0 : sql_fail(e, fs->db, rc, "agentfs",
	    "sqlite_master");
out:
	sqlite3_finalize(st);
	return rc;
}

/*
 * Refuses generated columns in the tables read: SQLite computes them on
 * every read, so an expression of the upload's (a zeroblob() of a
 * gigabyte, say) would run in our queries.
 */
static int
generated_check(struct agentfs *fs, struct err *e)
{
	char a[AFS_SHOW_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc = 0;

	rc = afs_stmt_prepare(fs, "SELECT name FROM pragma_table_xinfo(?1)"
	    " WHERE hidden <> 0", &st, e);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < sizeof(schema_need) / sizeof(schema_need[0]);
	    i++) {
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, schema_need[i].table, -1,
		    SQLITE_STATIC);
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			rc = err_set(e, -EBADMSG, "agentfs: table %s: column "
			    "'%s' is generated: only stored columns are "
			    "allowed", schema_need[i].table, name_show(
			    sqlite3_column_text(st, 0), a, sizeof(a)));
			goto out;
		}
		if (rc != SQLITE_DONE) {
			rc = sql_fail(e, fs->db, rc, "agentfs", "table_xinfo");
			goto out;
		}
		rc = 0;
	}
out:
	afs_stmt_release(fs, st);
	return rc;
}

/* Reads chunk_size (required, decimal) and the layout flags. */
static int
config_read(struct agentfs *fs, struct err *e)
{
	static const char *const nsec_cols[] = {
		"rdev", "atime_nsec", "mtime_nsec", "ctime_nsec",
	};
	sqlite3_stmt *st = NULL;
	const char *v = NULL;
	char *end;
	long n;
	bool has;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT key, value FROM fs_config"
	    " WHERE key IN ('chunk_size', 'schema_version')", &st, e);
	if (rc != 0)
		return rc;
	n = -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);

		v = (const char *)sqlite3_column_text(st, 1);
		if (k != NULL && strcmp(k, "schema_version") == 0) {
			fs->has_version = true;
			continue;
		}
		errno = 0;
		n = v ? strtol(v, &end, 10) : -1;
		if (v == NULL || end == v || *end != '\0' || errno != 0 ||
		    n < AGENTFS_CHUNK_MIN || n > AGENTFS_CHUNK_MAX) {
			rc = err_set(e, -EBADMSG, "agentfs: fs_config "
			    "chunk_size '%s' is not an integer in [%d, %d]",
			    v ? v : "(null)", AGENTFS_CHUNK_MIN,
			    AGENTFS_CHUNK_MAX);
			afs_stmt_release(fs, st);
			return rc;
		}
	}
	afs_stmt_release(fs, st);
	if (rc != SQLITE_DONE)
		return sql_fail(e, fs->db, rc, "agentfs", "fs_config");
	if (n < 0)
		return err_set(e, -EBADMSG, "agentfs: fs_config has no "
		    "chunk_size");
	fs->chunk_size = (size_t)n;
	fs->has_nsec = true;
	for (size_t i = 0; i < 4; i++) {
		if ((rc = column_has(fs, "fs_inode", nsec_cols[i], &has, e)))
			return rc;
		fs->has_nsec = fs->has_nsec && has;
	}
	return 0;
}

static int
inode_get(struct agentfs *fs, int64_t ino, struct node *n, struct err *e);

/*
 * Opens a copy of blob. An untrusted one (verify) is hardened, its schema
 * objects are checked before any statement but the read of sqlite_master
 * touches a table, then every page; its generated columns are refused.
 * deadline_ns (untrusted only; 0: none) interrupts SQLite past it.
 */
static int
open_blob(const void *blob, size_t len, bool verify, int64_t deadline_ns,
    struct agentfs **out, struct err *e)
{
	struct agentfs *fs = NULL;
	unsigned char *buf;
	struct node root;
	int rc;

	*out = NULL;
	if ((rc = header_check(blob, len, e)) != 0)
		return rc;
	if ((rc = fs_alloc(&fs, e)) != 0)
		return rc;
	if (verify)
		fs->deadline_ns = deadline_ns;
	buf = sqlite3_malloc64(len);
	if (buf == NULL) {
		rc = err_set(e, -ENOMEM, "agentfs: no memory for %zu bytes",
		    len);
		goto out_close;
	}
	memcpy(buf, blob, len);
	/* A WAL-mode header cannot be used in memory: make it rollback. */
	buf[18] = 1;
	buf[19] = 1;
	if ((rc = fs_deserialize(fs, buf, len, e)) != 0)
		goto out_close;
	/*
	 * Untrusted: the schema's objects first (reading sqlite_master runs
	 * no code of the upload's), then the pages, then the columns.
	 */
	if (verify && ((rc = fs_harden_untrusted(fs, e)) != 0 ||
	    (rc = schema_objects_check(fs, e)) != 0 ||
	    (rc = quick_check(fs, e)) != 0 ||
	    (rc = generated_check(fs, e)) != 0))
		goto out_close;
	if ((rc = schema_check(fs, e)) != 0 ||
	    (rc = config_read(fs, e)) != 0)
		goto out_close;
	rc = inode_get(fs, 1, &root, e);
	if (rc == -ENOENT || (rc == 0 && !S_ISDIR(root.mode)))
		rc = err_set(e, -EBADMSG, "agentfs: inode 1 is not the root "
		    "directory");
	if (rc != 0)
		goto out_close;
	*out = fs;
	return 0;

out_close:
	agentfs_close(fs);
	return rc;
}

int
agentfs_open_blob(const void *blob, size_t len, struct agentfs **out,
    struct err *e)
{
	return open_blob(blob, len, true, 0, out, e);
}

int
agentfs_open_untrusted(const void *blob, size_t len, int64_t deadline_ns,
    struct agentfs **out, struct err *e)
{
	return open_blob(blob, len, true, deadline_ns, out, e);
}

/* The checks of a trusted image once it is open: schema, config, root. */
static int
fs_check_trusted(struct agentfs *fs, struct err *e)
{
	struct node root;
	int rc;

	if ((rc = schema_check(fs, e)) != 0 || (rc = config_read(fs, e)) != 0)
		return rc;
	rc = inode_get(fs, 1, &root, e);
	if (rc == -ENOENT || (rc == 0 && !S_ISDIR(root.mode)))
		rc = err_set(e, -EBADMSG, "agentfs: inode 1 is not the root directory");
	return rc;
}

int
agentfs_open_cow(const void *img, size_t img_len, const void *patch, size_t patch_len,
    struct agentfs **out, struct err *e)
{
	struct agentfs *fs = xcalloc(1, sizeof(*fs));
	int rc;

	*out = NULL;
	if ((rc = cowimg_open(img, img_len, patch, patch_len, &fs->db, e)) != 0) {
		free(fs);
		return rc;
	}
	fs->cow = true;
	fs_harden(fs);
	if ((rc = fs_check_trusted(fs, e)) != 0) {
		agentfs_close(fs);
		return rc;
	}
	*out = fs;
	return 0;
}

int
agentfs_cow_patch_write(struct agentfs *fs, int fd, size_t *len, struct err *e)
{
	if (!fs->cow)
		return err_set(e, -EINVAL, "agentfs: not opened over an image and a patch");
	return cowimg_patch_write(fs->db, fd, len, e);
}

int
agentfs_open_trusted(const void *blob, size_t len, struct agentfs **out,
    struct err *e)
{
	return open_blob(blob, len, false, 0, out, e);
}

int
agentfs_to_blob(struct agentfs *fs, void **blob, size_t *len, struct err *e)
{
	sqlite3_int64 sz = 0;
	unsigned char *p;

	*blob = NULL;
	*len = 0;
	/* NOCOPY hands out the memdb image itself; we copy it once. */
	p = sqlite3_serialize(fs->db, "main", &sz, SQLITE_SERIALIZE_NOCOPY);
	if (p != NULL) {
		*blob = xmalloc(sz > 0 ? (size_t)sz : 1);
		memcpy(*blob, p, (size_t)sz);
		*len = (size_t)sz;
		return 0;
	}
	p = sqlite3_serialize(fs->db, "main", &sz, 0);
	if (p == NULL)
		return err_set(e, -ENOMEM, "agentfs: serialize failed");
	*blob = xmalloc(sz > 0 ? (size_t)sz : 1);
	memcpy(*blob, p, (size_t)sz);
	*len = (size_t)sz;
	sqlite3_free(p);
	return 0;
}

int
agentfs_size_limit(struct agentfs *fs, uint64_t bytes, struct err *e)
{
	sqlite3_int64 limit = (sqlite3_int64)(bytes < AGENTFS_BLOB_MAX ?
	    bytes : AGENTFS_BLOB_MAX);
	int rc;

	if (fs->cow)
		return err_set(e, -EINVAL, "agentfs: a copy-on-write handle "
		    "has no size limit of its own");
	rc = sqlite3_file_control(fs->db, "main", SQLITE_FCNTL_SIZE_LIMIT,
	    &limit);
	if (rc != SQLITE_OK)
		return sql_fail(e, fs->db, rc, "agentfs", "size limit");
	return 0;
}

void
agentfs_close(struct agentfs *fs)
{
	if (fs == NULL)
		return;
	sql_cache_close(&fs->cache);
	if (fs->cow)
		cowimg_close(fs->db);
	else
		sqlite3_close_v2(fs->db);
	free(fs);
}

bool
agentfs_is_legacy(const struct agentfs *fs)
{
	return !fs->has_nsec || !fs->has_version;
}

size_t
agentfs_chunk_size(const struct agentfs *fs)
{
	return fs->chunk_size;
}

const char *
agentfs_type_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return "dir";
	case S_IFREG:
		return "file";
	case S_IFLNK:
		return "symlink";
	case S_IFIFO:
		return "fifo";
	case S_IFCHR:
		return "chr";
	case S_IFBLK:
		return "blk";
	case S_IFSOCK:
		return "sock";
	default:
		return "unknown";
	}
}

/*** Paths ***/

static int
inode_get(struct agentfs *fs, int64_t ino, struct node *n, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT mode, size, nlink FROM fs_inode"
	    " WHERE ino = ?1", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		n->ino = ino;
		n->mode = (uint32_t)sqlite3_column_int64(st, 0);
		n->size = sqlite3_column_int64(st, 1);
		n->nlink = sqlite3_column_int64(st, 2);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "agentfs: no inode %lld",
		    (long long)ino);
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_inode");
	}
	afs_stmt_release(fs, st);
	return rc;
}

/* Sets *ino to parent/name's inode, or returns -ENOENT (no message). */
static int
dentry_lookup(struct agentfs *fs, int64_t parent, const char *name,
    int64_t *ino, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT ino FROM fs_dentry"
	    " WHERE parent_ino = ?1 AND name = ?2", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, parent);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*ino = sqlite3_column_int64(st, 0);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = -ENOENT;
	} else {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_dentry");
	}
	afs_stmt_release(fs, st);
	return rc;
}

/*
 * Resolves path to its parent directory and last component without
 * following symlinks: every component but the last must be a directory.
 * The last one may be absent (l->found false). "/" resolves to the root.
 */
static int
loc_resolve(struct agentfs *fs, const char *path, struct loc *l,
    struct err *e)
{
	struct node cur = { .ino = 1 };
	const char *p = path, *end;
	int64_t ino = 0;
	size_t n;
	int rc;

	memset(l, 0, sizeof(*l));
	if (path == NULL || strlen(path) > AGENTFS_PATH_MAX)
		return err_set(e, -ENAMETOOLONG, "agentfs: path too long");
	if ((rc = inode_get(fs, 1, &cur, e)) != 0)
		return rc;
	l->parent = 1;
	l->found = true;
	l->node = cur;
	for (;;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			return 0;
		end = strchrnul(p, '/');
		n = (size_t)(end - p);
		if (n > AGENTFS_NAME_MAX)
			return err_set(e, -ENAMETOOLONG, "agentfs: %s: name "
			    "too long", path);
		if ((n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return err_set(e, -EINVAL, "agentfs: %s: '.' and "
			    "'..' are not allowed", path);
		if (!l->found)
			return err_set(e, -ENOENT, "agentfs: %s: no such "
			    "directory '%s'", path, l->name);
		if (!S_ISDIR(l->node.mode))
			return err_set(e, -ENOTDIR, "agentfs: %s: '%s' is not "
			    "a directory", path, l->name);
		l->parent = l->node.ino;
		memcpy(l->name, p, n);
		l->name[n] = '\0';
		rc = dentry_lookup(fs, l->parent, l->name, &ino, e);
		if (rc == -ENOENT) {
			l->found = false;
		} else if (rc != 0) {
			return rc;
		} else {
			if ((rc = inode_get(fs, ino, &l->node, e)) != 0)
				return rc;
		}
		p = end;
	}
}

int
afs_resolve_ino(struct agentfs *fs, const char *path, int64_t *ino,
    struct err *e)
{
	struct loc l;
	int rc;

	if ((rc = loc_resolve(fs, path, &l, e)) != 0)
		return rc;
	if (!l.found)
		return err_set(e, -ENOENT, "agentfs: %s: no such entry", path);
	*ino = l.node.ino;
	return 0;
}

/*** Walk ***/

/* A set of directory inodes already entered (open addressing). */
struct inoset {
	int64_t *slot;		/* 0 = empty; inodes are >= 1 */
	size_t cap;		/* power of two */
	size_t n;		/* used slots */
};

/* Adds ino; returns false when it was already there. */
static bool
inoset_add(struct inoset *s, int64_t ino)
{
	size_t i;

	if ((s->n + 1) * 2 > s->cap) {
		struct inoset g = { .cap = s->cap ? s->cap * 2 : 64 };

		g.slot = xcalloc(g.cap, sizeof(*g.slot));
		for (i = 0; i < s->cap; i++)
			if (s->slot[i] != 0)
				inoset_add(&g, s->slot[i]);
		free(s->slot);
		*s = g;
	}
	i = (size_t)((uint64_t)ino * 0x9e3779b97f4a7c15ull) & (s->cap - 1);
	while (s->slot[i] != 0) {
		if (s->slot[i] == ino)
			return false;
		i = (i + 1) & (s->cap - 1);
	}
	s->slot[i] = ino;
	s->n++;
	return true;
}

struct walk {
	struct agentfs *fs;			/* database walked */
	agentfs_walk_cb cb;			/* user callback */
	void *arg;				/* its argument */
	struct inoset seen;			/* directories entered */
	char path[AGENTFS_PATH_MAX + 1];	/* current path */
	struct err *e;				/* error record */
};

/* One dentry of a directory, copied out so no statement stays open. */
struct child {
	char *name;		/* dentry name, validated */
	int64_t ino;		/* dentry target */
	bool has_inode;		/* fs_inode row exists */
	uint32_t mode;		/* st_mode */
	int64_t size;		/* bytes */
	int64_t mtime;		/* seconds */
	bool json_prefix;	/* content starts with {"__symlink": */
};

static const char JSON_LINK_PREFIX[] = "{\"__symlink\":";

static void
children_free(struct child *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(c[i].name);
	free(c);
}

/*
 * Lists dir's dentries in name order; *out is freed by children_free().
 * Only a legacy database can hold a symlink as a JSON file, so only there
 * is each file's first chunk looked at: SQLite loads a whole value to take
 * its substr(), and doing so for every file read every file's first chunk,
 * most of a snapshot's bytes (5 ms of a 10 MB capture, docs/decisions.md).
 */
static int
children_list(struct walk *w, int64_t dir, struct child **out, size_t *nout)
{
	struct agentfs *fs = w->fs;
	sqlite3_stmt *st = NULL;
	struct child *c = NULL;
	size_t n = 0, cap = 0;
	int rc;

	rc = afs_stmt_prepare(fs, agentfs_is_legacy(fs) ?
	    "SELECT d.name, d.ino, i.ino, i.mode, i.size,"
	    " i.mtime, (SELECT substr(CAST(f.data AS BLOB), 1, 13)"
	    "  FROM fs_data AS f WHERE f.ino = d.ino AND f.chunk_index = 0)"
	    " FROM fs_dentry AS d LEFT JOIN fs_inode AS i ON i.ino = d.ino"
	    " WHERE d.parent_ino = ?1 ORDER BY d.name" :
	    "SELECT d.name, d.ino, i.ino, i.mode, i.size, i.mtime, NULL"
	    " FROM fs_dentry AS d LEFT JOIN fs_inode AS i ON i.ino = d.ino"
	    " WHERE d.parent_ino = ?1 ORDER BY d.name", &st, w->e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, dir);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		size_t nlen = (size_t)sqlite3_column_bytes(st, 0);
		const void *pre = sqlite3_column_blob(st, 6);

		if (name != NULL && nlen > AGENTFS_NAME_MAX) {
			rc = err_set(w->e, -ENAMETOOLONG, "agentfs: a name in "
			    "%s/ is %zu bytes, more than the name length limit "
			    "%d", w->path, nlen, AGENTFS_NAME_MAX);
			goto out;
		}
		if (name == NULL || !name_ok(name, nlen)) {
			rc = err_set(w->e, -EBADMSG, "agentfs: bad name in "
			    "%s/ (inode %lld): '%.*s'", w->path,
			    (long long)sqlite3_column_int64(st, 1),
			    name ? (int)strnlen(name, 64) : 0,
			    name ? name : "");
			goto out;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			c = xreallocarray(c, cap, sizeof(*c));
		}
		c[n] = (struct child){
			.name = xmemdup0(name, nlen),
			.ino = sqlite3_column_int64(st, 1),
			.has_inode = sqlite3_column_type(st, 2) != SQLITE_NULL,
			.mode = (uint32_t)sqlite3_column_int64(st, 3),
			.size = sqlite3_column_int64(st, 4),
			.mtime = sqlite3_column_int64(st, 5),
			.json_prefix = pre != NULL &&
			    sqlite3_column_bytes(st, 6) == 13 &&
			    memcmp(pre, JSON_LINK_PREFIX, 13) == 0,
		};
		n++;
	}
	if (rc != SQLITE_DONE) {
		rc = sql_fail(w->e, fs->db, rc, "agentfs", "fs_dentry");
		goto out;
	}
	rc = 0;
out:
	afs_stmt_release(fs, st);
	if (rc != 0) {
		children_free(c, n);
		return rc;
	}
	*out = c;
	*nout = n;
	return 0;
}

static int
file_read_ino(struct agentfs *fs, int64_t ino, int64_t size, void **data,
    size_t *len, struct err *e);

/*
 * Returns 1 and a malloc'd target when a legacy file holds exactly
 * {"__symlink":"T"} (one key, a non-empty string without NUL), else 0.
 */
static int
json_link_target(struct agentfs *fs, const struct child *c, char **target,
    struct err *e)
{
	json_error_t jerr;
	json_t *j, *v;
	void *buf = NULL;
	size_t len;
	int rc;

	*target = NULL;
	if (!c->json_prefix || c->size > AGENTFS_JSON_LINK_MAX)
		return 0;
	if ((rc = file_read_ino(fs, c->ino, c->size, &buf, &len, e)) != 0)
		return rc;
	j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (j == NULL)
		return 0;
	rc = 0;
	v = json_object_get(j, "__symlink");
	if (json_is_object(j) && json_object_size(j) == 1 &&
	    json_is_string(v) && json_string_length(v) > 0 &&
	    strlen(json_string_value(v)) == json_string_length(v)) {
		*target = xstrdup(json_string_value(v));
		rc = 1;
	}
	json_decref(j);
	return rc;
}

/* Sets *target to the fs_symlink row of ino (malloc'd). */
static int
native_link_target(struct agentfs *fs, int64_t ino, const char *path,
    char **target, struct err *e)
{
	sqlite3_stmt *st = NULL;
	const char *t;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT target FROM fs_symlink WHERE ino = ?1",
	    &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && (t = (const char *)sqlite3_column_text(st, 0))
	    && *t != '\0' &&
	    strlen(t) == (size_t)sqlite3_column_bytes(st, 0)) {
		*target = xstrdup(t);
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

/* Fills ent for child c (path already in w->path); *target is malloc'd. */
static int
entry_classify(struct walk *w, const struct child *c,
    struct agentfs_entry *ent, char **target)
{
	int rc;

	*target = NULL;
	if (!c->has_inode)
		return err_set(w->e, -EBADMSG, "agentfs: %s: dentry points to "
		    "missing inode %lld", w->path, (long long)c->ino);
	if (c->size < 0)
		return err_set(w->e, -EBADMSG, "agentfs: %s: negative size",
		    w->path);
	ent->form = AGENTFS_LINK_NONE;
	switch (c->mode & S_IFMT) {
	case S_IFDIR:
		ent->kind = AGENTFS_DIR;
		return 0;
	case S_IFREG:
		ent->kind = AGENTFS_FILE;
		if (!agentfs_is_legacy(w->fs))
			return 0;
		rc = json_link_target(w->fs, c, target, w->e);
		if (rc == 1) {
			ent->kind = AGENTFS_SYMLINK;
			ent->form = AGENTFS_LINK_JSON_FILE;
			rc = 0;
		}
		return rc;
	case S_IFLNK:
		ent->kind = AGENTFS_SYMLINK;
		ent->form = AGENTFS_LINK_NATIVE;
		return native_link_target(w->fs, c->ino, w->path, target,
		    w->e);
	case S_IFIFO:
	case S_IFCHR:
	case S_IFBLK:
	case S_IFSOCK:
		ent->kind = AGENTFS_SPECIAL;
		return 0;
	default:
		return err_set(w->e, -EBADMSG, "agentfs: %s: unknown file type "
		    "in mode 0%o", w->path, c->mode);
	}
}

static int
walk_dir(struct walk *w, int64_t dir, size_t plen, int depth)
{
	struct child *c = NULL;
	size_t n = 0;
	int rc;

	if (depth > AGENTFS_DEPTH_MAX)
		return err_set(w->e, -ELOOP, "agentfs: nested deeper than %d "
		    "directories at %.64s...", AGENTFS_DEPTH_MAX, w->path);
	if ((rc = children_list(w, dir, &c, &n)) != 0)
		return rc;
	for (size_t i = 0; i < n && rc == 0; i++) {
		size_t nlen = strlen(c[i].name);
		struct agentfs_entry ent = { 0 };
		char *target = NULL;

		if (plen + 1 + nlen > AGENTFS_PATH_MAX) {
			rc = err_set(w->e, -ENAMETOOLONG, "agentfs: a path "
			    "under %.*s/ is longer than the path length limit "
			    "%d", (int)(plen < 200 ? plen : 200), w->path,
			    AGENTFS_PATH_MAX);
			break;
		}
		w->path[plen] = '/';
		memcpy(w->path + plen + 1, c[i].name, nlen + 1);
		if ((rc = entry_classify(w, &c[i], &ent, &target)) != 0)
			break;
		ent.path = w->path;
		ent.name = w->path + plen + 1;
		ent.ino = c[i].ino;
		ent.mode = c[i].mode;
		ent.size = (uint64_t)c[i].size;
		ent.mtime = c[i].mtime;
		ent.target = target;
		rc = w->cb(&ent, w->arg);
		free(target);
		if (rc != 0 || ent.kind != AGENTFS_DIR)
			continue;
		if (!inoset_add(&w->seen, c[i].ino)) {
			rc = err_set(w->e, -ELOOP, "agentfs: %s: directory "
			    "inode %lld reached twice (cycle or hard link)",
			    w->path, (long long)c[i].ino);
			break;
		}
		rc = walk_dir(w, c[i].ino, plen + 1 + nlen, depth + 1);
		w->path[plen] = '\0';
	}
	w->path[plen] = '\0';
	children_free(c, n);
	return rc;
}

int
agentfs_walk(struct agentfs *fs, agentfs_walk_cb cb, void *arg,
    struct err *e)
{
	struct walk *w = xcalloc(1, sizeof(*w));
	int rc;

	w->fs = fs;
	w->cb = cb;
	w->arg = arg;
	w->e = e;
	inoset_add(&w->seen, 1);
	rc = walk_dir(w, 1, 0, 1);
	free(w->seen.slot);
	free(w);
	return rc;
}

/*** Files ***/

/*
 * Refuses a file of an untrusted database whose size claims more bytes
 * than its chunks store (those inside the size, each counted up to
 * chunk_size), before anything is allocated for it. A missing chunk reads
 * as zeros and the size column is free to lie, so a few bytes of upload
 * could otherwise claim gigabytes: what is allocated stays within what
 * was uploaded.
 */
static int
file_claim_check(struct agentfs *fs, int64_t ino, int64_t size,
    uint64_t nchunks, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int64_t stored;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT coalesce(sum(min(CASE typeof(data)"
	    " WHEN 'blob' THEN length(data) ELSE length(CAST(data AS BLOB))"
	    " END, ?3)), 0) FROM fs_data WHERE ino = ?1 AND chunk_index >= 0"
	    " AND chunk_index < ?2", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)nchunks);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)fs->chunk_size);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_data");
	} else if ((stored = sqlite3_column_int64(st, 0)) < size) {
		rc = err_set(e, -EBADMSG, "agentfs: inode %lld: its size says "
		    "%lld bytes, its chunks hold %lld", (long long)ino,
		    (long long)size, (long long)stored);
	} else {
		rc = 0;
	}
	afs_stmt_release(fs, st);
	return rc;
}

/*
 * Reads size bytes of ino's chunks; missing chunks are zeros (refused
 * first in an untrusted database: file_claim_check()).
 */
static int
file_read_ino(struct agentfs *fs, int64_t ino, int64_t size, void **data,
    size_t *len, struct err *e)
{
	uint64_t cs = fs->chunk_size, nchunks;
	sqlite3_stmt *st = NULL;
	uint8_t *buf;
	int rc;

	if (size < 0 || (uint64_t)size > AGENTFS_FILE_MAX)
		return err_set(e, -EFBIG, "agentfs: inode %lld: size %lld "
		    "out of range", (long long)ino, (long long)size);
	nchunks = ((uint64_t)size + cs - 1) / cs;
	if (fs->untrusted &&
	    (rc = file_claim_check(fs, ino, size, nchunks, e)) != 0)
		return rc;
	rc = afs_stmt_prepare(fs, "SELECT chunk_index, data FROM fs_data"
	    " WHERE ino = ?1 AND chunk_index >= 0 AND chunk_index < ?2"
	    " ORDER BY chunk_index", &st, e);
	if (rc != 0)
		return rc;
	buf = xcalloc(1, size > 0 ? (size_t)size : 1);
	sqlite3_bind_int64(st, 1, ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)nchunks);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t off = (uint64_t)sqlite3_column_int64(st, 0) * cs;
		const void *p = sqlite3_column_blob(st, 1);
		uint64_t n = (uint64_t)sqlite3_column_bytes(st, 1);

		/* A chunk longer than chunk_size or than the file is cut. */
		if (n > cs)
			n = cs;
		if (n > (uint64_t)size - off)
			n = (uint64_t)size - off;
		if (p != NULL && n > 0)
			memcpy(buf + off, p, n);
	}
	if (rc != SQLITE_DONE) {
		rc = sql_fail(e, fs->db, rc, "agentfs", "fs_data");
		afs_stmt_release(fs, st);
		free(buf);
		return rc;
	}
	afs_stmt_release(fs, st);
	*data = buf;
	*len = (size_t)size;
	return 0;
}

int
agentfs_read(struct agentfs *fs, const char *path, void **data, size_t *len,
    struct err *e)
{
	struct loc l;
	int rc;

	*data = NULL;
	*len = 0;
	if ((rc = loc_resolve(fs, path, &l, e)) != 0)
		return rc;
	if (!l.found)
		return err_set(e, -ENOENT, "agentfs: %s: no such file", path);
	if (S_ISDIR(l.node.mode))
		return err_set(e, -EISDIR, "agentfs: %s: is a directory",
		    path);
	if (!S_ISREG(l.node.mode))
		return err_set(e, -EINVAL, "agentfs: %s: not a regular file",
		    path);
	return file_read_ino(fs, l.node.ino, l.node.size, data, len, e);
}

/* Inserts an inode and returns its number in *ino. */
static int
inode_insert(struct agentfs *fs, uint32_t mode, int64_t size, int64_t *ino,
    struct err *e)
{
	static const char *sql_04 =
	    "INSERT INTO fs_inode (mode, nlink, uid, gid, size, atime, mtime,"
	    " ctime, rdev, atime_nsec, mtime_nsec, ctime_nsec)"
	    " VALUES (?1, 1, 0, 0, ?2, ?3, ?3, ?3, 0, ?4, ?4, ?4)";
	static const char *sql_legacy =
	    "INSERT INTO fs_inode (mode, nlink, uid, gid, size, atime, mtime,"
	    " ctime) VALUES (?1, 1, 0, 0, ?2, ?3, ?3, ?3)";
	sqlite3_stmt *st = NULL;
	int64_t sec, nsec;
	int rc;

	rc = afs_stmt_prepare(fs, fs->has_nsec ? sql_04 : sql_legacy, &st, e);
	if (rc != 0)
		return rc;
	afs_now_get(&sec, &nsec);
	sqlite3_bind_int64(st, 1, mode);
	sqlite3_bind_int64(st, 2, size);
	sqlite3_bind_int64(st, 3, sec);
	if (fs->has_nsec)
		sqlite3_bind_int64(st, 4, nsec);
	if ((rc = afs_stmt_done(fs, st, "insert inode", e)) != 0)
		return rc;
	*ino = sqlite3_last_insert_rowid(fs->db);
	return 0;
}

static int
dentry_insert(struct agentfs *fs, int64_t parent, const char *name,
    int64_t ino, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " VALUES (?1, ?2, ?3)", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, parent);
	sqlite3_bind_int64(st, 3, ino);
	return afs_stmt_done(fs, st, "insert dentry", e);
}

/* Deletes ino's chunks and writes data as chunk_size BLOBs. */
static int
chunks_write(struct agentfs *fs, int64_t ino, const uint8_t *data,
    size_t len, struct err *e)
{
	sqlite3_stmt *st = NULL;
	size_t off, n;
	int64_t idx;
	int rc;

	rc = afs_stmt_prepare(fs, "DELETE FROM fs_data WHERE ino = ?1", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	if ((rc = afs_stmt_done(fs, st, "delete chunks", e)) != 0)
		return rc;
	rc = afs_stmt_prepare(fs, "INSERT INTO fs_data (ino, chunk_index, data)"
	    " VALUES (?1, ?2, ?3)", &st, e);
	if (rc != 0)
		return rc;
	for (off = 0, idx = 0; off < len; off += n, idx++) {
		n = len - off < fs->chunk_size ? len - off : fs->chunk_size;
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, ino);
		sqlite3_bind_int64(st, 2, idx);
		/* Always a BLOB: agentfs-sdk cannot read a TEXT chunk. */
		sqlite3_bind_blob64(st, 3, data + off, n, SQLITE_STATIC);
		rc = sqlite3_step(st);
		if (rc != SQLITE_DONE) {
			rc = sql_fail(e, fs->db, rc, "agentfs", "insert chunk");
			afs_stmt_release(fs, st);
			return rc;
		}
	}
	afs_stmt_release(fs, st);
	return 0;
}

/* Sets mode, size, mtime and ctime of an existing inode. */
static int
inode_touch(struct agentfs *fs, int64_t ino, uint32_t mode, int64_t size,
    struct err *e)
{
	static const char *sql_04 =
	    "UPDATE fs_inode SET mode = ?1, size = ?2, mtime = ?3, ctime = ?3,"
	    " mtime_nsec = ?4, ctime_nsec = ?4 WHERE ino = ?5";
	static const char *sql_legacy =
	    "UPDATE fs_inode SET mode = ?1, size = ?2, mtime = ?3, ctime = ?3"
	    " WHERE ino = ?5";
	sqlite3_stmt *st = NULL;
	int64_t sec, nsec;
	int rc;

	rc = afs_stmt_prepare(fs, fs->has_nsec ? sql_04 : sql_legacy, &st, e);
	if (rc != 0)
		return rc;
	afs_now_get(&sec, &nsec);
	sqlite3_bind_int64(st, 1, mode);
	sqlite3_bind_int64(st, 2, size);
	sqlite3_bind_int64(st, 3, sec);
	if (fs->has_nsec)
		sqlite3_bind_int64(st, 4, nsec);
	sqlite3_bind_int64(st, 5, ino);
	return afs_stmt_done(fs, st, "update inode", e);
}

/* Resolves path for creating a node: the parent exists, the name is new. */
static int
loc_for_create(struct agentfs *fs, const char *path, struct loc *l,
    struct err *e)
{
	int rc = loc_resolve(fs, path, l, e);

	if (rc != 0)
		return rc;
	if (l->name[0] == '\0')
		return err_set(e, -EEXIST, "agentfs: %s: is the root", path);
	if (l->found)
		return err_set(e, -EEXIST, "agentfs: %s: exists", path);
	return 0;
}

static int
write_tx(struct agentfs *fs, const char *path, const void *data, size_t len,
    mode_t mode, struct err *e)
{
	uint32_t m = S_IFREG | (mode & 07777);
	struct loc l;
	int64_t ino;
	int rc;

	if ((rc = loc_resolve(fs, path, &l, e)) != 0)
		return rc;
	if (l.name[0] == '\0' || (l.found && S_ISDIR(l.node.mode)))
		return err_set(e, -EISDIR, "agentfs: %s: is a directory",
		    path);
	if (l.found && !S_ISREG(l.node.mode))
		return err_set(e, -EEXIST, "agentfs: %s: exists and is a %s",
		    path, agentfs_type_name(l.node.mode));
	if (l.found) {
		ino = l.node.ino;
		rc = inode_touch(fs, ino, m, (int64_t)len, e);
	} else {
		rc = inode_insert(fs, m, (int64_t)len, &ino, e);
		if (rc == 0)
			rc = dentry_insert(fs, l.parent, l.name, ino, e);
	}
	if (rc != 0)
		return rc;
	return chunks_write(fs, ino, data, len, e);
}

int
agentfs_write(struct agentfs *fs, const char *path, const void *data,
    size_t len, mode_t mode, struct err *e)
{
	int rc;

	if (len > AGENTFS_FILE_MAX)
		return err_set(e, -EFBIG, "agentfs: %s: %zu bytes is over the "
		    "file limit", path, len);
	if ((rc = sql_begin(fs->db, "agentfs", e)) != 0)
		return rc;
	rc = write_tx(fs, path, data, len, mode, e);
	return sql_tx_end(fs->db, rc, "agentfs", e);
}

int
agentfs_mkdir(struct agentfs *fs, const char *path, mode_t mode,
    struct err *e)
{
	struct loc l;
	int64_t ino;
	int rc;

	if ((rc = sql_begin(fs->db, "agentfs", e)) != 0)
		return rc;
	rc = loc_for_create(fs, path, &l, e);
	if (rc == 0)
		rc = inode_insert(fs, S_IFDIR | (mode & 07777), 0, &ino, e);
	if (rc == 0)
		rc = dentry_insert(fs, l.parent, l.name, ino, e);
	return sql_tx_end(fs->db, rc, "agentfs", e);
}

static int
symlink_tx(struct agentfs *fs, const char *target, const char *path,
    struct err *e)
{
	sqlite3_stmt *st = NULL;
	struct loc l;
	int64_t ino;
	int rc;

	if ((rc = loc_for_create(fs, path, &l, e)) != 0 ||
	    (rc = inode_insert(fs, S_IFLNK | 0777, (int64_t)strlen(target),
	    &ino, e)) != 0 ||
	    (rc = dentry_insert(fs, l.parent, l.name, ino, e)) != 0)
		return rc;
	rc = afs_stmt_prepare(fs, "INSERT INTO fs_symlink (ino, target)"
	    " VALUES (?1, ?2)", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	sqlite3_bind_text(st, 2, target, -1, SQLITE_STATIC);
	return afs_stmt_done(fs, st, "insert symlink", e);
}

int
agentfs_symlink(struct agentfs *fs, const char *target, const char *path,
    struct err *e)
{
	int rc;

	if (target == NULL || *target == '\0' ||
	    strlen(target) > AGENTFS_PATH_MAX)
		return err_set(e, -EINVAL, "agentfs: %s: bad symlink target",
		    path);
	if ((rc = sql_begin(fs->db, "agentfs", e)) != 0)
		return rc;
	rc = symlink_tx(fs, target, path, e);
	return sql_tx_end(fs->db, rc, "agentfs", e);
}

/* Runs one constant statement with ?1 bound to ino. */
static int
ino_exec(struct agentfs *fs, const char *sql, int64_t ino, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = afs_stmt_prepare(fs, sql, &st, e)) != 0)
		return rc;
	sqlite3_bind_int64(st, 1, ino);
	return afs_stmt_done(fs, st, sql, e);
}

static int
dir_is_empty(struct agentfs *fs, int64_t dir, bool *empty, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = afs_stmt_prepare(fs, "SELECT 1 FROM fs_dentry WHERE parent_ino = ?1"
	    " LIMIT 1", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, dir);
	rc = sqlite3_step(st);
	*empty = rc == SQLITE_DONE;
	rc = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? 0 :
	    sql_fail(e, fs->db, rc, "agentfs", "fs_dentry");
	afs_stmt_release(fs, st);
	return rc;
}

static int
remove_tx(struct agentfs *fs, const char *path, struct err *e)
{
	sqlite3_stmt *st = NULL;
	struct node n;
	struct loc l;
	bool empty;
	int rc;

	if ((rc = loc_resolve(fs, path, &l, e)) != 0)
		return rc;
	if (l.name[0] == '\0')
		return err_set(e, -EBUSY, "agentfs: cannot remove the root");
	if (!l.found)
		return err_set(e, -ENOENT, "agentfs: %s: no such entry", path);
	if (S_ISDIR(l.node.mode)) {
		rc = dir_is_empty(fs, l.node.ino, &empty, e);
		if (rc == 0 && !empty)
			rc = err_set(e, -ENOTEMPTY, "agentfs: %s: directory "
			    "not empty", path);
		if (rc != 0)
			return rc;
	}
	rc = afs_stmt_prepare(fs, "DELETE FROM fs_dentry WHERE parent_ino = ?1"
	    " AND name = ?2", &st, e);
	if (rc != 0)
		return rc;
	sqlite3_bind_int64(st, 1, l.parent);
	sqlite3_bind_text(st, 2, l.name, -1, SQLITE_STATIC);
	if ((rc = afs_stmt_done(fs, st, "delete dentry", e)) != 0 ||
	    (rc = ino_exec(fs, "UPDATE fs_inode SET nlink = nlink - 1"
	    " WHERE ino = ?1", l.node.ino, e)) != 0 ||
	    (rc = inode_get(fs, l.node.ino, &n, e)) != 0)
		return rc;
	if (n.nlink > 0)
		return 0;
	if ((rc = ino_exec(fs, "DELETE FROM fs_data WHERE ino = ?1",
	    l.node.ino, e)) != 0 ||
	    (rc = ino_exec(fs, "DELETE FROM fs_symlink WHERE ino = ?1",
	    l.node.ino, e)) != 0)
		return rc;
	return ino_exec(fs, "DELETE FROM fs_inode WHERE ino = ?1", l.node.ino,
	    e);
}

int
agentfs_remove(struct agentfs *fs, const char *path, struct err *e)
{
	int rc;

	if ((rc = sql_begin(fs->db, "agentfs", e)) != 0)
		return rc;
	rc = remove_tx(fs, path, e);
	return sql_tx_end(fs->db, rc, "agentfs", e);
}

