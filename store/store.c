/*
 * store.c - the local snapshot store: one SQLite file of blobs and heads.
 *
 * See store.h for the model (content-addressed immutable blobs, sandboxes
 * as compare-and-set heads, forks as one row, explicit retention).
 *
 * DESIGN
 * Every write runs in BEGIN IMMEDIATE: the write lock is taken before the
 * first read, so the checks a write depends on (the sandbox exists, is at
 * the expected version, the blob is stored) cannot change before it
 * commits, and two writers never deadlock on a lock upgrade (they wait up
 * to STORE_BUSY_MS instead). Existence is checked with explicit SELECTs
 * rather than read back from constraint errors, so each failure gets its own
 * errno and a message naming the sandbox or blob; the foreign keys are the
 * second line, so a bug here still cannot leave a head naming no blob.
 * SQL is constant text with bound parameters; every column is named.
 * Text read back from the file is length-checked before it is copied into
 * the fixed buffers of struct store_sandbox: a damaged row is -EBADMSG.
 *
 * Sections: Helpers, Handles, Blobs, Sandboxes, Retention.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "agentfs.h"
#include "sqlerr.h"
#include "store.h"

#define STORE_SCHEMA_VERSION 1

/* A snapshot the codec accepts must fit the store, up to SQLite's limit. */
_Static_assert(STORE_BLOB_MAX <= AGENTFS_BLOB_MAX, "store blob bound");

struct store {
	sqlite3 *db;		/* the connection to dir/store.db */
};

static const char SCHEMA_SQL[] =
	"CREATE TABLE blobs (sha256 TEXT NOT NULL PRIMARY KEY,"
	" size INTEGER NOT NULL, data BLOB NOT NULL,"
	" created_at INTEGER NOT NULL);"
	"CREATE TABLE sandboxes (tenant TEXT NOT NULL, id TEXT NOT NULL,"
	" head TEXT NOT NULL REFERENCES blobs (sha256),"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
	" labels TEXT NOT NULL DEFAULT '{}',"
	" PRIMARY KEY (tenant, id));"
	"CREATE INDEX sandboxes_head ON sandboxes (head);"
	"CREATE TABLE versions (tenant TEXT NOT NULL, id TEXT NOT NULL,"
	" version INTEGER NOT NULL,"
	" sha256 TEXT NOT NULL REFERENCES blobs (sha256),"
	" created_at INTEGER NOT NULL,"
	" PRIMARY KEY (tenant, id, version),"
	" FOREIGN KEY (tenant, id) REFERENCES sandboxes (tenant, id)"
	" ON DELETE CASCADE);"
	"CREATE INDEX versions_sha256 ON versions (sha256);"
	"PRAGMA user_version = 1;";

#define SANDBOX_COLUMNS \
	"tenant, id, head, version, created_at, updated_at, labels"

/*** Helpers ***/

/* e <- "store: what: SQLite's message"; returns the matching -errno. */
static int
db_fail(sqlite3 *db, int rc, const char *what, struct err *e)
{
	return err_set(e, sqlerr_errno(rc), "store: %s: %s", what,
	    db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

static int
stmt_prepare(struct store *st, const char *sql, sqlite3_stmt **stmt,
    struct err *e)
{
	int rc = sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL);

	if (rc != SQLITE_OK)
		return db_fail(st->db, rc, "prepare", e);
	return 0;
}

/* Steps a statement that returns no rows, then finalises it. */
static int
stmt_done(struct store *st, sqlite3_stmt *stmt, const char *what,
    struct err *e)
{
	int rc = sqlite3_step(stmt);
	int ret = 0;

	if (rc != SQLITE_DONE)
		ret = db_fail(st->db, rc, what, e);
	sqlite3_finalize(stmt);
	return ret;
}

static int
db_exec(struct store *st, const char *sql, const char *what, struct err *e)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return db_fail(st->db, rc, what, e);
	return 0;
}

/* Takes the write lock now, waiting up to the busy timeout. */
static int
tx_begin(struct store *st, struct err *e)
{
	return db_exec(st, "BEGIN IMMEDIATE", "begin", e);
}

/* Commits on rc == 0, rolls back otherwise; returns rc or the commit error. */
static int
tx_end(struct store *st, int rc, struct err *e)
{
	if (rc == 0)
		rc = db_exec(st, "COMMIT", "commit", e);
	if (rc != 0 && !sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

/* Binds a C string as TEXT; the string must outlive the statement step. */
static int
bind_text(struct store *st, sqlite3_stmt *stmt, int i, const char *s,
    struct err *e)
{
	int rc = sqlite3_bind_text(stmt, i, s, -1, SQLITE_STATIC);

	if (rc != SQLITE_OK)
		return db_fail(st->db, rc, "bind", e);
	return 0;
}

static int
bind_i64(struct store *st, sqlite3_stmt *stmt, int i, int64_t v,
    struct err *e)
{
	int rc = sqlite3_bind_int64(stmt, i, v);

	if (rc != SQLITE_OK)
		return db_fail(st->db, rc, "bind", e);
	return 0;
}

/*
 * Copies a TEXT column into dst[size]. A NULL or over-long value can only
 * come from a damaged file: -EBADMSG naming the column.
 */
static int
col_text(sqlite3_stmt *stmt, int col, char *dst, size_t size,
    const char *what, struct err *e)
{
	const unsigned char *s = sqlite3_column_text(stmt, col);
	int n = sqlite3_column_bytes(stmt, col);

	if (s == NULL || n < 0 || (size_t)n >= size)
		return err_set(e, -EBADMSG, "store: %s: damaged row", what);
	memcpy(dst, s, (size_t)n);
	dst[n] = '\0';
	return 0;
}

/* Lower-case hex SHA-256 of data through OpenSSL's EVP interface. */
static int
sha256_hex(const void *data, size_t len, char out[STORE_SHA_HEX + 1],
    struct err *e)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != STORE_SHA_HEX / 2)
		return err_set(e, -EIO, "store: SHA-256 failed");
	for (unsigned int i = 0; i < mdlen; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0xf];
	}
	out[STORE_SHA_HEX] = '\0';
	return 0;
}

/* A blob key is exactly 64 lower-case hex digits (the form we write). */
static int
sha_check(const char *field, const char *s, struct err *e)
{
	size_t i;

	for (i = 0; s != NULL && i < STORE_SHA_HEX; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			break;
	}
	if (s == NULL || i != STORE_SHA_HEX || s[i] != '\0')
		return err_set(e, -EINVAL,
		    "store: %s: must be 64 lower-case hex digits", field);
	return 0;
}

/* Tenant: 1..STORE_TENANT_MAX of [A-Za-z0-9_-]. */
static int
tenant_check(const char *s, struct err *e)
{
	size_t n = s != NULL ? strnlen(s, STORE_TENANT_MAX + 1) : 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			n = 0;
	}
	if (n == 0 || n > STORE_TENANT_MAX)
		return err_set(e, -EINVAL, "store: tenant: must be 1 to %d "
		    "characters of A-Z a-z 0-9 _ -", STORE_TENANT_MAX);
	return 0;
}

/*
 * Sandbox id: 1..STORE_ID_MAX of [A-Za-z0-9._:-]. "." and ".." are refused
 * too: ids are keys here, but a later caller may well use one as a path
 * component, and those two would name another directory.
 */
static int
id_check(const char *field, const char *s, struct err *e)
{
	size_t n = s != NULL ? strnlen(s, STORE_ID_MAX + 1) : 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		    c == ':' || c == '-'))
			n = 0;
	}
	if (n == 0 || n > STORE_ID_MAX)
		return err_set(e, -EINVAL, "store: %s: must be 1 to %d "
		    "characters of A-Z a-z 0-9 . _ : -", field, STORE_ID_MAX);
	if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return err_set(e, -EINVAL, "store: %s: must not be \".\" or "
		    "\"..\"", field);
	return 0;
}

/*
 * Validates labels (NULL means {}) as one JSON object without duplicate
 * keys and writes its compact, key-sorted form to out.
 */
static int
labels_canon(const char *text, char out[STORE_LABELS_MAX + 1],
    struct err *e)
{
	json_error_t jerr;
	json_t *j = NULL;
	char *dump = NULL;
	int ret = 0;

	if (text == NULL) {
		strcpy(out, "{}");
		return 0;
	}
	if (strnlen(text, STORE_LABELS_MAX + 1) > STORE_LABELS_MAX)
		return err_set(e, -EINVAL, "store: labels: longer than %d "
		    "bytes", STORE_LABELS_MAX);
	j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL)
		return err_set(e, -EINVAL, "store: labels: %s", jerr.text);
	if (!json_is_object(j)) {
		ret = err_set(e, -EINVAL, "store: labels: not a JSON object");
		goto out_decref;
	}
	dump = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	if (dump == NULL) {
		ret = err_set(e, -ENOMEM, "store: labels: out of memory");
		goto out_decref;
	}
	/* Compact is never longer than the input, but do not rely on it. */
	if (strlen(dump) > STORE_LABELS_MAX)
		ret = err_set(e, -EINVAL, "store: labels: longer than %d "
		    "bytes", STORE_LABELS_MAX);
	else
		strcpy(out, dump);
	free(dump);
out_decref:
	json_decref(j);
	return ret;
}

/* 0 when the blob is stored, -ENOENT naming it otherwise. */
static int
blob_require(struct store *st, const char *sha, struct err *e)
{
	int rc = store_blob_exists(st, sha, e);

	if (rc == 0)
		return err_set(e, -ENOENT, "store: blob %s: not stored", sha);
	return rc < 0 ? rc : 0;
}

/* Reads the current version of tenant/id; -ENOENT naming it if absent. */
static int
sandbox_version(struct store *st, const char *tenant, const char *id,
    uint64_t *version, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = stmt_prepare(st, "SELECT version FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*version = (uint64_t)sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	} else {
		rc = db_fail(st->db, rc, "sandboxes", e);
	}
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

/* Appends (tenant, id, version, sha, now) to the history. */
static int
version_append(struct store *st, const char *tenant, const char *id,
    uint64_t version, const char *sha, int64_t now, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = stmt_prepare(st, "INSERT INTO versions"
	    " (tenant, id, version, sha256, created_at)"
	    " VALUES (?1, ?2, ?3, ?4, ?5)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 3, (int64_t)version, e)) != 0 ||
	    (rc = bind_text(st, stmt, 4, sha, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 5, now, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	return stmt_done(st, stmt, "versions", e);
}

/* Fills *sb from a row of SANDBOX_COLUMNS. */
static int
sandbox_row(sqlite3_stmt *stmt, struct store_sandbox *sb, struct err *e)
{
	int rc;

	memset(sb, 0, sizeof(*sb));
	if ((rc = col_text(stmt, 0, sb->tenant, sizeof(sb->tenant),
	    "sandboxes.tenant", e)) != 0 ||
	    (rc = col_text(stmt, 1, sb->id, sizeof(sb->id),
	    "sandboxes.id", e)) != 0 ||
	    (rc = col_text(stmt, 2, sb->head, sizeof(sb->head),
	    "sandboxes.head", e)) != 0 ||
	    (rc = col_text(stmt, 6, sb->labels, sizeof(sb->labels),
	    "sandboxes.labels", e)) != 0)
		return rc;
	sb->version = (uint64_t)sqlite3_column_int64(stmt, 3);
	sb->created_at = sqlite3_column_int64(stmt, 4);
	sb->updated_at = sqlite3_column_int64(stmt, 5);
	return 0;
}

/*** Handles ***/

/* Creates the schema in a new file, or checks the version of an old one. */
static int
schema_ensure(struct store *st, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t version = -1;
	int rc;

	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "PRAGMA user_version", &stmt, e);
	if (rc == 0) {
		if (sqlite3_step(stmt) == SQLITE_ROW)
			version = sqlite3_column_int64(stmt, 0);
		else
			rc = db_fail(st->db, sqlite3_errcode(st->db),
			    "user_version", e);
		sqlite3_finalize(stmt);
	}
	if (rc == 0 && version == 0)
		rc = db_exec(st, SCHEMA_SQL, "schema", e);
	else if (rc == 0 && version != STORE_SCHEMA_VERSION)
		rc = err_set(e, -EPROTONOSUPPORT, "store: schema version "
		    "%lld, this build knows %d", (long long)version,
		    STORE_SCHEMA_VERSION);
	return tx_end(st, rc, e);
}

/* Switches the file to WAL; SQLite answers with the mode it really uses. */
static int
wal_enable(struct store *st, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	const unsigned char *mode;
	int rc;

	if ((rc = stmt_prepare(st, "PRAGMA journal_mode = WAL", &stmt, e)) != 0)
		return rc;
	/*
	 * Changing the journal mode takes the file's exclusive lock without
	 * calling the busy handler: several processes opening a new store at
	 * once (a pool's workers at start) retry here, up to STORE_BUSY_MS.
	 */
	for (int waited = 0;; waited += 2) {
		struct timespec ts = { 0, 2000000 };

		rc = sqlite3_step(stmt);
		if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || waited >= STORE_BUSY_MS)
			break;
		sqlite3_reset(stmt);
		nanosleep(&ts, NULL);
	}
	mode = rc == SQLITE_ROW ? sqlite3_column_text(stmt, 0) : NULL;
	if (rc != SQLITE_ROW)
		rc = db_fail(st->db, rc, "journal_mode", e);
	else if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
		rc = err_set(e, -EIO, "store: journal_mode: got %s, not wal",
		    mode != NULL ? (const char *)mode : "nothing");
	else
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}

int
store_open(const char *dir, struct store **out, struct err *e)
{
	struct store *st = NULL;
	char path[PATH_MAX];
	int fd = -1;
	int rc;

	err_clear(e);
	*out = NULL;
	if (dir == NULL || snprintf(path, sizeof(path), "%s/%s", dir,
	    STORE_DB_NAME) >= (int)sizeof(path))
		return err_set(e, -ENAMETOOLONG, "store: dir: path too long");
	/*
	 * Create the file ourselves so it is 0600 whatever the umask (SQLite
	 * gives -wal and -shm the database's mode), and refuse a symlink
	 * planted in the state folder.
	 */
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, -errno, "store: open %s: %s", path,
		    strerror(errno));
	close(fd);

	st = xcalloc(1, sizeof(*st));
	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		rc = db_fail(st->db, rc, path, e);
		goto out_close;
	}
	sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
	/* The file is ours: refuse writable_schema and similar footguns. */
	sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	/* foreign_keys is a no-op inside a transaction: set it first. */
	if ((rc = wal_enable(st, e)) != 0 ||
	    (rc = db_exec(st, "PRAGMA synchronous = NORMAL", "synchronous",
	    e)) != 0 ||
	    (rc = db_exec(st, "PRAGMA foreign_keys = ON", "foreign_keys",
	    e)) != 0 ||
	    (rc = schema_ensure(st, e)) != 0)
		goto out_close;
	*out = st;
	return 0;

out_close:
	store_close(st);
	return rc;
}

void
store_close(struct store *st)
{
	if (st == NULL)
		return;
	sqlite3_close_v2(st->db);
	free(st);
}

/*** Blobs ***/

int
store_blob_put(struct store *st, const void *data, size_t len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if (len > STORE_BLOB_MAX)
		return err_set(e, -EFBIG, "store: blob: %zu bytes, over %zu",
		    len, STORE_BLOB_MAX);
	if ((rc = sha256_hex(len > 0 ? data : "", len, sha_hex, e)) != 0)
		return rc;
	/* One statement is one transaction: the row is there whole or not. */
	rc = stmt_prepare(st, "INSERT INTO blobs"
	    " (sha256, size, data, created_at) VALUES (?1, ?2, ?3, ?4)"
	    " ON CONFLICT (sha256) DO NOTHING", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, sha_hex, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 2, (int64_t)len, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 4, (int64_t)now_ms(), e)) != 0)
		goto out_finalize;
	/* A NULL pointer would bind SQL NULL; an empty blob is a zeroblob. */
	rc = len > 0 ? sqlite3_bind_blob64(stmt, 3, data, len, SQLITE_STATIC) :
	    sqlite3_bind_zeroblob(stmt, 3, 0);
	if (rc != SQLITE_OK) {
		rc = db_fail(st->db, rc, "bind", e);
		goto out_finalize;
	}
	return stmt_done(st, stmt, "blobs", e);

out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

int
store_blob_get(struct store *st, const char *sha_hex, void **data,
    size_t *len, struct err *e)
{
	char got[STORE_SHA_HEX + 1];
	sqlite3_stmt *stmt = NULL;
	const void *p;
	void *buf = NULL;
	int64_t size;
	int n, rc;

	err_clear(e);
	*data = NULL;
	*len = 0;
	if ((rc = sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "SELECT size, data FROM blobs WHERE sha256 = ?1",
	    &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, sha_hex, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: blob %s: not stored", sha_hex);
		goto out_finalize;
	}
	if (rc != SQLITE_ROW) {
		rc = db_fail(st->db, rc, "blobs", e);
		goto out_finalize;
	}
	size = sqlite3_column_int64(stmt, 0);
	p = sqlite3_column_blob(stmt, 1);
	n = sqlite3_column_bytes(stmt, 1);
	if (n < 0 || size != n || (p == NULL && n > 0)) {
		rc = err_set(e, -EBADMSG, "store: blob %s: size %lld, stored "
		    "%d bytes", sha_hex, (long long)size, n);
		goto out_finalize;
	}
	/*
	 * Hash what was read before anything leaves: a damaged page or a
	 * hand-edited row must not reach a worker as a snapshot.
	 */
	if ((rc = sha256_hex(n > 0 ? p : "", (size_t)n, got, e)) != 0)
		goto out_finalize;
	if (strcmp(got, sha_hex) != 0) {
		rc = err_set(e, -EBADMSG, "store: blob %s: content does not "
		    "match its SHA-256", sha_hex);
		goto out_finalize;
	}
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf == NULL) {
		rc = err_set(e, -ENOMEM, "store: blob %s: out of memory",
		    sha_hex);
		goto out_finalize;
	}
	if (n > 0)
		memcpy(buf, p, (size_t)n);
	*data = buf;
	*len = (size_t)n;
	rc = 0;
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

int64_t
store_blob_size(struct store *st, const char *sha_hex, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t rc;

	if ((rc = sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "SELECT size FROM blobs WHERE sha256 = ?1", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, sha_hex, e)) == 0) {
		int s = sqlite3_step(stmt);

		if (s == SQLITE_ROW)
			rc = sqlite3_column_int64(stmt, 0);
		else if (s == SQLITE_DONE)
			rc = err_set(e, -ENOENT, "store: no blob %s", sha_hex);
		else
			rc = db_fail(st->db, s, "blobs", e);
	}
	sqlite3_finalize(stmt);
	return rc;
}

int
store_blob_exists(struct store *st, const char *sha_hex, struct err *e)
{
	int64_t rc = store_blob_size(st, sha_hex, e);

	if (rc == -ENOENT)
		return 0;
	return rc < 0 ? (int)rc : 1;
}

long
store_blob_count(struct store *st, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	long n;
	int rc;

	if ((rc = stmt_prepare(st, "SELECT count(*) FROM blobs", &stmt, e)) != 0)
		return rc;
	rc = sqlite3_step(stmt);
	n = rc == SQLITE_ROW ? (long)sqlite3_column_int64(stmt, 0) :
	    db_fail(st->db, rc, "blobs", e);
	sqlite3_finalize(stmt);
	return n;
}

/*** Sandboxes ***/

/* Inserts the sandboxes row and its first history row (in a transaction). */
static int
sandbox_insert(struct store *st, const char *tenant, const char *id,
    const char *sha, const char *labels, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = (int64_t)now_ms();
	uint64_t version;
	int rc;

	rc = sandbox_version(st, tenant, id, &version, e);
	if (rc == 0)
		return err_set(e, -EEXIST, "store: sandbox %s/%s: exists",
		    tenant, id);
	if (rc != -ENOENT)
		return rc;
	err_clear(e);
	rc = stmt_prepare(st, "INSERT INTO sandboxes (" SANDBOX_COLUMNS ")"
	    " VALUES (?1, ?2, ?3, 1, ?4, ?4, ?5)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0 ||
	    (rc = bind_text(st, stmt, 3, sha, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 4, now, e)) != 0 ||
	    (rc = bind_text(st, stmt, 5, labels, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	if ((rc = stmt_done(st, stmt, "sandboxes", e)) != 0)
		return rc;
	return version_append(st, tenant, id, 1, sha, now, e);
}

int
store_sandbox_create(struct store *st, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0 ||
	    (rc = sha_check("sha256", sha_hex, e)) != 0 ||
	    (rc = labels_canon(labels_json, labels, e)) != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	rc = blob_require(st, sha_hex, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, id, sha_hex, labels, e);
	return tx_end(st, rc, e);
}

int
store_sandbox_get(struct store *st, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "SELECT " SANDBOX_COLUMNS " FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		rc = sandbox_row(stmt, out, e);
	else if (rc == SQLITE_DONE)
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	else
		rc = db_fail(st->db, rc, "sandboxes", e);
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

/* The body of store_sandbox_commit(), inside its transaction. */
static int
sandbox_move(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *sha, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = (int64_t)now_ms();
	uint64_t version;
	int rc;

	if ((rc = sandbox_version(st, tenant, id, &version, e)) != 0)
		return rc;
	if (version != from_version)
		return err_set(e, -ESTALE, "store: sandbox %s/%s: at version "
		    "%llu, not %llu", tenant, id, (unsigned long long)version,
		    (unsigned long long)from_version);
	if (version >= INT64_MAX)
		return err_set(e, -EOVERFLOW, "store: sandbox %s/%s: version "
		    "overflow", tenant, id);
	if ((rc = blob_require(st, sha, e)) != 0)
		return rc;
	/* The version test is repeated in SQL: the CAS holds even alone. */
	rc = stmt_prepare(st, "UPDATE sandboxes SET head = ?3,"
	    " version = version + 1, updated_at = ?4"
	    " WHERE tenant = ?1 AND id = ?2 AND version = ?5", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0 ||
	    (rc = bind_text(st, stmt, 3, sha, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 4, now, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 5, (int64_t)from_version, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	if ((rc = stmt_done(st, stmt, "sandboxes", e)) != 0)
		return rc;
	if (sqlite3_changes(st->db) != 1)
		return err_set(e, -ESTALE, "store: sandbox %s/%s: moved "
		    "during commit", tenant, id);
	return version_append(st, tenant, id, from_version + 1, sha, now, e);
}

int
store_sandbox_commit(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, struct err *e)
{
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0 ||
	    (rc = sha_check("sha256", new_sha, e)) != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	rc = sandbox_move(st, tenant, id, from_version, new_sha, e);
	return tx_end(st, rc, e);
}

int
store_sandbox_fork(struct store *st, const char *tenant, const char *src,
    const char *dst, struct err *e)
{
	struct store_sandbox sb;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("src", src, e)) != 0 ||
	    (rc = id_check("dst", dst, e)) != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	/* Reading src inside the write transaction: it cannot move meanwhile. */
	rc = store_sandbox_get(st, tenant, src, &sb, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, dst, sb.head, sb.labels, e);
	return tx_end(st, rc, e);
}

int
store_sandbox_delete(struct store *st, const char *tenant, const char *id,
    struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	/* versions rows go with it: ON DELETE CASCADE. */
	rc = stmt_prepare(st, "DELETE FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	if ((rc = stmt_done(st, stmt, "sandboxes", e)) != 0)
		return rc;
	if (sqlite3_changes(st->db) == 0)
		return err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	return 0;
}

int
store_sandbox_list(struct store *st, const char *tenant, store_sandbox_cb cb,
    void *arg, struct err *e)
{
	struct store_sandbox sb;
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "SELECT " SANDBOX_COLUMNS " FROM sandboxes"
	    " WHERE tenant = ?1 ORDER BY id", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		if ((rc = sandbox_row(stmt, &sb, e)) != 0 ||
		    (rc = cb(&sb, arg)) != 0)
			goto out_finalize;
	}
	rc = rc == SQLITE_DONE ? 0 : db_fail(st->db, rc, "sandboxes", e);
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

int
store_sandbox_history(struct store *st, const char *tenant, const char *id,
    store_version_cb cb, void *arg, struct err *e)
{
	struct store_version v;
	sqlite3_stmt *stmt = NULL;
	uint64_t version;
	int rows = 0;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	rc = stmt_prepare(st, "SELECT version, sha256, created_at FROM versions"
	    " WHERE tenant = ?1 AND id = ?2 ORDER BY version DESC", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		rows++;
		memset(&v, 0, sizeof(v));
		v.version = (uint64_t)sqlite3_column_int64(stmt, 0);
		v.created_at = sqlite3_column_int64(stmt, 2);
		if ((rc = col_text(stmt, 1, v.sha256, sizeof(v.sha256),
		    "versions.sha256", e)) != 0 || (rc = cb(&v, arg)) != 0)
			goto out_finalize;
	}
	rc = rc == SQLITE_DONE ? 0 : db_fail(st->db, rc, "versions", e);
	/* The head's row is never pruned: no rows means no sandbox. */
	if (rc == 0 && rows == 0)
		rc = sandbox_version(st, tenant, id, &version, e);
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

/*** Retention ***/

/* The body of store_prune(), inside its transaction. */
static int
prune_locked(struct store *st, unsigned keep_versions, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = stmt_prepare(st, "DELETE FROM versions WHERE rowid IN"
	    " (SELECT r FROM (SELECT v.rowid AS r, v.version AS version,"
	    "  s.version AS head_version, row_number() OVER"
	    "  (PARTITION BY v.tenant, v.id ORDER BY v.version DESC) AS n"
	    "  FROM versions AS v JOIN sandboxes AS s"
	    "  ON s.tenant = v.tenant AND s.id = v.id)"
	    " WHERE n > ?1 AND version <> head_version)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_i64(st, stmt, 1, (int64_t)keep_versions, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	if ((rc = stmt_done(st, stmt, "versions", e)) != 0)
		return rc;
	rc = stmt_prepare(st, "DELETE FROM blobs WHERE"
	    " NOT EXISTS (SELECT 1 FROM sandboxes"
	    "  WHERE sandboxes.head = blobs.sha256) AND"
	    " NOT EXISTS (SELECT 1 FROM versions"
	    "  WHERE versions.sha256 = blobs.sha256)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = stmt_done(st, stmt, "blobs", e)) != 0)
		return rc;
	return sqlite3_changes(st->db);
}

int
store_prune(struct store *st, unsigned keep_versions, struct err *e)
{
	int n, rc;

	err_clear(e);
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	n = prune_locked(st, keep_versions, e);
	rc = tx_end(st, n < 0 ? n : 0, e);
	return rc != 0 ? rc : n;
}
