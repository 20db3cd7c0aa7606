/*
 * store.c - the local snapshot store: one SQLite file of chunked blobs and
 * heads. This file holds the handles, the sandboxes (heads, forks,
 * history) and retention; store_chunks.c holds the chunks, manifests, blob
 * plans, puts and collection, store_migrate.c the conversion of a schema-1
 * file, and store_int.h what the three share.
 *
 * See store.h for the model (content-addressed chunks under a manifest key,
 * sandboxes as compare-and-set heads, forks as one row, retention at each
 * commit) and docs/store.md for the file format.
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
 * A put is two steps (store_chunks.c): a plan made with no lock held, then
 * stored inside the caller's transaction.
 *
 * store_sandbox_commit_patch() makes its plan from an image and a patch
 * instead of a whole blob: it takes the current head's manifest (read in
 * a read transaction) for every chunk the patch does not touch and
 * assembles and hashes the others, so a commit costs what changed, then
 * re-checks in the write transaction that the head is the one it read.
 *
 * Sections: Helpers, Handles, Sandboxes, Commits from an image and a patch,
 * Retention. The names and hashes every store file uses are in
 * store_names.c.
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

#include "../common/sql.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/patch.h"
#include "store.h"
#include "store_int.h"

#define STORE_SCHEMA_VERSION 3

static const char SCHEMA_SQL[] =
	CHUNK_TABLES_SQL
	"CREATE TABLE blobs" BLOBS_COLUMNS_SQL
	"CREATE TABLE sandboxes (tenant TEXT NOT NULL, id TEXT NOT NULL,"
	" head TEXT NOT NULL REFERENCES blobs (sha256),"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
	" labels TEXT NOT NULL DEFAULT '{}',"
	" image TEXT NOT NULL DEFAULT '', workdir TEXT NOT NULL DEFAULT '',"
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
	"PRAGMA user_version = 3;";

#define SANDBOX_COLUMNS \
	"tenant, id, head, version, created_at, updated_at, labels, image, workdir"

/*** Helpers ***/

static void
shalist_add(struct shalist *l, const char *sha)
{
	if (l->n == l->cap) {
		l->cap = l->cap > 0 ? 2 * l->cap : 8;
		l->v = xreallocarray(l->v, l->cap, sizeof(*l->v));
	}
	memcpy(l->v[l->n++], sha, STORE_SHA_HEX + 1);
}

static void
shalist_free(struct shalist *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/*
 * Steps stmt (its parameters bound) to the end, adding column 0 of each
 * row, a blob key, to l; finalises stmt.
 */
static int
shalist_collect(struct store *st, sqlite3_stmt *stmt, struct shalist *l,
    const char *what, struct err *e)
{
	char sha[STORE_SHA_HEX + 1];
	int rc;

	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		if ((rc = store__col_text(stmt, 0, sha, sizeof(sha), what,
		    e)) != 0)
			goto out_finalize;
		shalist_add(l, sha);
	}
	rc = rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc, "store", what);
out_finalize:
	store__release(st, stmt);
	return rc;
}

/*** Handles ***/

/*
 * Creates the schema in a new file, converts a schema-1 file, or checks
 * the version of a current one, in one write transaction: of several
 * processes opening one file at once, one creates or converts it and the
 * others find it done.
 */
static int
schema_ensure(struct store *st, struct err *e)
{
	int64_t version = -1;
	int rc;

	if ((rc = store__begin(st, e)) != 0)
		return rc;
	rc = sql_query_i64(st->db, "PRAGMA user_version", &version, "store",
	    "user_version", e);
	if (rc == 0 && version == 0)
		rc = sql_exec(st->db, SCHEMA_SQL, "store", "schema", e);
	else if (rc == 0 && version == 1 && (rc = store__migrate_v1(st, e)) == 0)
		rc = store__migrate_v2(st, e);
	else if (rc == 0 && version == 2)
		rc = store__migrate_v2(st, e);
	else if (rc == 0 && version != STORE_SCHEMA_VERSION)
		rc = err_set(e, -EPROTONOSUPPORT, "store: schema version "
		    "%lld, this build knows %d", (long long)version,
		    STORE_SCHEMA_VERSION);
	return store__tx_end(st, rc, e);
}

/*
 * The WAL hook, in place of SQLite's auto-checkpoint (which is one too):
 * it notes the WAL's length for store_checkpoint_idle() and checkpoints,
 * passively, only past the backstop.
 */
static int
wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
	struct store *st = arg;

	st->wal_frames = frames;
	if (frames >= STORE_WAL_AUTOCHECKPOINT) {
		(void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE,
		    NULL, NULL);
		st->wal_frames = 0;
	}
	return SQLITE_OK;
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
	st->keep_versions = STORE_KEEP_VERSIONS_DEFAULT;
	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		rc = sql_fail(e, st->db, rc, "store", path);
		goto out_close;
	}
	sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
	/* The file is ours: refuse writable_schema and similar footguns. */
	sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	/*
	 * foreign_keys is a no-op inside a transaction, so it is set after
	 * schema_ensure()'s: converting a schema-1 file renames rows before
	 * the table they name exists, and checks the keys itself at the end.
	 */
	/*
	 * secure_delete FAST: a freed page is not overwritten with zeros
	 * (Debian builds SQLite with it ON). Retention frees the chunks only
	 * an old version held at every commit, 16 pages each, and zeroing
	 * them doubled what a commit writes to the WAL (docs/store.md
	 * "Durability and concurrency", docs/security.md).
	 */
	if ((rc = sql_wal_enable(st->db, STORE_BUSY_MS, "store", e)) != 0 ||
	    (rc = sql_exec(st->db, "PRAGMA synchronous = NORMAL", "store",
	    "synchronous", e)) != 0 ||
	    (rc = sql_exec(st->db, "PRAGMA secure_delete = FAST", "store",
	    "secure_delete", e)) != 0 ||
	    (rc = schema_ensure(st, e)) != 0 ||
	    (rc = sql_exec(st->db, "PRAGMA foreign_keys = ON", "store",
	    "foreign_keys", e)) != 0)
		goto out_close;
	sqlite3_wal_hook(st->db, wal_hook, st);
	*out = st;
	return 0;

out_close:
	store_close(st);
	return rc;
}

int
store_wal_pending(const struct store *st)
{
	return st->wal_frames;
}

int
store_checkpoint_idle(struct store *st, struct err *e)
{
	int log = 0, done = 0, rc;

	err_clear(e);
	if (st->wal_frames == 0)
		return 0;
	st->wal_frames = 0;
	rc = sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_PASSIVE,
	    &log, &done);
	/* Busy: another connection is checkpointing; it does the same work. */
	if (rc == SQLITE_BUSY)
		return 0;
	if (rc != SQLITE_OK)
		return sql_fail(e, st->db, rc, "store", "checkpoint");
	return done > 0 ? done : 0;
}

void
store_close(struct store *st)
{
	if (st == NULL)
		return;
	store__stmts_close(st);
	sqlite3_close_v2(st->db);
	free(st);
}

void
store_set_keep_versions(struct store *st, unsigned n)
{
	st->keep_versions = n;
}

void
store_set_quota(struct store *st, uint64_t bytes)
{
	st->quota = bytes;
}

/*** Sandboxes ***/

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

	rc = store__prepare(st, "SELECT version FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*version = (uint64_t)sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	} else {
		rc = sql_fail(e, st->db, rc, "store", "sandboxes");
	}
out_finalize:
	store__release(st, stmt);
	return rc;
}

/* Appends (tenant, id, version, sha, now) to the history. */
static int
version_append(struct store *st, const char *tenant, const char *id,
    uint64_t version, const char *sha, int64_t now, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = store__prepare(st, "INSERT INTO versions"
	    " (tenant, id, version, sha256, created_at)"
	    " VALUES (?1, ?2, ?3, ?4, ?5)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 3, (int64_t)version, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 4, sha, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 5, now, "store", e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	return store__step_release(st, stmt, "versions", e);
}

/* Fills *sb from a row of SANDBOX_COLUMNS. */
static int
sandbox_row(sqlite3_stmt *stmt, struct store_sandbox *sb, struct err *e)
{
	int rc;

	memset(sb, 0, sizeof(*sb));
	if ((rc = store__col_text(stmt, 0, sb->tenant, sizeof(sb->tenant),
	    "sandboxes.tenant", e)) != 0 ||
	    (rc = store__col_text(stmt, 1, sb->id, sizeof(sb->id),
	    "sandboxes.id", e)) != 0 ||
	    (rc = store__col_text(stmt, 2, sb->head, sizeof(sb->head),
	    "sandboxes.head", e)) != 0 ||
	    (rc = store__col_text(stmt, 6, sb->labels, sizeof(sb->labels),
	    "sandboxes.labels", e)) != 0 ||
	    (rc = store__col_text(stmt, 7, sb->image, sizeof(sb->image),
	    "sandboxes.image", e)) != 0 ||
	    (rc = store__col_text(stmt, 8, sb->workdir, sizeof(sb->workdir),
	    "sandboxes.workdir", e)) != 0)
		return rc;
	sb->version = (uint64_t)sqlite3_column_int64(stmt, 3);
	sb->created_at = sqlite3_column_int64(stmt, 4);
	sb->updated_at = sqlite3_column_int64(stmt, 5);
	return 0;
}

static int quota_enforce(struct store *st, const char *tenant, const char *id,
    int64_t old_size, const char *sha, struct err *e);

/* Inserts the sandboxes row and its first history row (in a transaction),
 * within the storage quota (quota_enforce()). image and workdir: "" or
 * NULL for none, checked by the caller (store_image_check()). */
static int
sandbox_insert(struct store *st, const char *tenant, const char *id,
    const char *sha, const char *labels, const char *image, const char *workdir,
    struct err *e)
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
	rc = store__prepare(st,
	    "INSERT INTO sandboxes (" SANDBOX_COLUMNS ")"
	    " VALUES (?1, ?2, ?3, 1, ?4, ?4, ?5, ?6, ?7)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 3, sha, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 4, now, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 5, labels, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 6, image ? image : "", "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 7, workdir ? workdir : "", "store", e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	if ((rc = store__step_release(st, stmt, "sandboxes", e)) != 0 ||
	    (rc = version_append(st, tenant, id, 1, sha, now, e)) != 0)
		return rc;
	return quota_enforce(st, tenant, id, -1, sha, e);
}

int
store_sandbox_create(struct store *st, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0 ||
	    (rc = store_sha_check("sha256", sha_hex, e)) != 0 ||
	    (rc = store_labels_canon(labels_json, labels, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	rc = blob_require(st, sha_hex, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, id, sha_hex, labels, NULL, NULL, e);
	return store__tx_end(st, rc, e);
}

int
store_sandbox_create_blob(struct store *st, const char *tenant,
    const char *id, const void *data, size_t len, const char *labels_json,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	return store_sandbox_create_image(st, tenant, id, data, len, labels_json,
	    NULL, NULL, sha_hex, e);
}

int
store_sandbox_create_image(struct store *st, const char *tenant,
    const char *id, const void *data, size_t len, const char *labels_json,
    const char *image, const char *workdir, char sha_hex[STORE_SHA_HEX + 1],
    struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	struct blob_plan p;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0 ||
	    (rc = store_labels_canon(labels_json, labels, e)) != 0 ||
	    (rc = store_image_check(image, workdir, e)) != 0)
		return rc;
	/* Hashing happens here, before the write lock is taken. */
	if ((rc = store__plan_make(st, data, len, NULL, NULL, 0, &p, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		goto out_free;
	rc = store__plan_store(st, &p, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, id, p.key, labels, image, workdir, e);
	if ((rc = store__tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	store__plan_free(&p);
	return rc;
}

/*
 * 1 when one of tenant's own sandboxes (other than except, NULL for none)
 * names sha in its head (heads_only) or in its head or a kept history row,
 * 0 when none does, or -errno. Index lookups (sandboxes_head,
 * versions_sha256), no scan.
 */
static int
tenant_names(struct store *st, const char *tenant, const char *sha,
    const char *except, bool heads_only, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = store__prepare(st, heads_only ?
	    "SELECT 1 FROM sandboxes WHERE head = ?1 AND tenant = ?2"
	    " AND id <> ?3 LIMIT 1" :
	    "SELECT 1 FROM versions WHERE sha256 = ?1 AND tenant = ?2"
	    " AND id <> ?3 LIMIT 1", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, sha, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 3, except != NULL ? except : "", "store", e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		rc = 1;
	else if (rc == SQLITE_DONE)
		rc = 0;
	else
		rc = sql_fail(e, st->db, rc, "store", "sandboxes");
	store__release(st, stmt);
	return rc;
}

/* tenant_names() of checked names. */
static int
tenant_names_checked(struct store *st, const char *tenant, const char *sha,
    const char *except, bool heads_only, struct err *e)
{
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_sha_check("sha256", sha, e)) != 0)
		return rc;
	return tenant_names(st, tenant, sha, except, heads_only, e);
}

int
store_head_shared(struct store *st, const char *tenant, const char *sha_hex,
    const char *id, struct err *e)
{
	return tenant_names_checked(st, tenant, sha_hex, id, true, e);
}

int
store_tenant_has_blob(struct store *st, const char *tenant, const char *sha_hex,
    struct err *e)
{
	return tenant_names_checked(st, tenant, sha_hex, NULL, false, e);
}

int
store_sandbox_create_named(struct store *st, const char *tenant,
    const char *id, const char *sha_hex, const char *labels_json,
    const char *image, const char *workdir, struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0 ||
	    (rc = store_sha_check("sha256", sha_hex, e)) != 0 ||
	    (rc = store_labels_canon(labels_json, labels, e)) != 0 ||
	    (rc = store_image_check(image, workdir, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	/* Inside the write transaction: the naming row cannot go meanwhile. */
	rc = tenant_names(st, tenant, sha_hex, NULL, false, e);
	if (rc == 0)
		rc = err_set(e, -ENOENT, "store: blob %s: not one of tenant %s's",
		    sha_hex, tenant);
	else if (rc == 1)
		rc = sandbox_insert(st, tenant, id, sha_hex, labels, image, workdir, e);
	return store__tx_end(st, rc, e);
}

int64_t
store_tenant_usage(struct store *st, const char *tenant, struct err *e)
{
	uint64_t used = 0;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store__tenant_stored(st, tenant, &used, e)) != 0)
		return rc;
	return (int64_t)used;
}

int
store_sandbox_get(struct store *st, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0)
		return rc;
	rc = store__prepare(st, "SELECT " SANDBOX_COLUMNS " FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		rc = sandbox_row(stmt, out, e);
	else if (rc == SQLITE_DONE)
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	else
		rc = sql_fail(e, st->db, rc, "store", "sandboxes");
out_finalize:
	store__release(st, stmt);
	return rc;
}

/*
 * 0 if tenant/id is at from_version and may move on; -ENOENT if it does
 * not exist, -ESTALE naming both versions if it is at another one.
 */
static int
sandbox_expect(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, struct err *e)
{
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
	return 0;
}

/*
 * Retention after a commit of tenant/id: deletes its history rows older
 * than the newest keep (the head's row is the newest, so it stays; 0
 * keeps them all), then the blobs they named that nothing names any more. Walks
 * keep_versions rows of the primary key and what it deletes, no more.
 */
static int
sandbox_retain(struct store *st, const char *tenant, const char *id,
    unsigned keep, struct err *e)
{
	struct shalist dropped = { 0 };
	sqlite3_stmt *stmt = NULL;
	int rc;

	if (keep == 0)
		return 0;
	rc = store__prepare(st, "DELETE FROM versions WHERE tenant = ?1"
	    " AND id = ?2 AND version < (SELECT version FROM versions"
	    "  WHERE tenant = ?1 AND id = ?2"
	    "  ORDER BY version DESC LIMIT 1 OFFSET ?3)"
	    " RETURNING sha256", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 3, (int64_t)keep - 1, "store", e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	rc = shalist_collect(st, stmt, &dropped, "versions.sha256", e);
	if (rc == 0)
		rc = store__gc_list(st, &dropped, NULL, e);
	shalist_free(&dropped);
	return rc;
}

/*
 * The storage quota (store_set_quota()) after tenant/id's head became sha,
 * its history row appended and retention applied, in the same write
 * transaction: what the tenant's kept versions store (store__tenant_stored())
 * against the quota. Over it, a head that did not grow (old_size >= the new
 * size; old_size -1: a new sandbox) is still committed, and the sandbox's
 * older history rows go with what only they named: a tenant over its quota
 * can clean up, and a rewrite of the same size cannot pile up history past
 * the quota. A head that grew is -EDQUOT naming the figures and the setting,
 * and the caller's rollback undoes the commit.
 */
static int
quota_enforce(struct store *st, const char *tenant, const char *id,
    int64_t old_size, const char *sha, struct err *e)
{
	uint64_t used = 0;
	int64_t size;
	int rc;

	if (st->quota == 0)
		return 0;
	if ((rc = store__tenant_stored(st, tenant, &used, e)) != 0)
		return rc;
	if (used <= st->quota)
		return 0;
	if ((size = store_blob_size(st, sha, e)) < 0)
		return (int)size;
	if (old_size >= 0 && size <= old_size)
		return sandbox_retain(st, tenant, id, 1, e);
	return err_set(e, -EDQUOT, "store: tenant '%s': its sandboxes would store "
	    "%llu bytes, kept history included, above its storage quota "
	    "(storage_quota_bytes) of %llu", tenant, (unsigned long long)used,
	    (unsigned long long)st->quota);
}

/* The size of tenant/id's head blob into *size, -1 when it has none. */
static int
head_size(struct store *st, const char *tenant, const char *id, int64_t *size,
    struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	*size = -1;
	rc = store__prepare(st, "SELECT b.size FROM sandboxes s JOIN blobs b"
	    " ON b.sha256 = s.head WHERE s.tenant = ?1 AND s.id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) == 0 &&
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) == 0) {
		int r = sqlite3_step(stmt);

		if (r == SQLITE_ROW)
			*size = sqlite3_column_int64(stmt, 0);
		else if (r != SQLITE_DONE)
			rc = sql_fail(e, st->db, r, "store", "sandboxes");
	}
	store__release(st, stmt);
	return rc;
}

/* The body of store_sandbox_commit(), inside its transaction. */
static int
sandbox_move(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *sha, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = (int64_t)now_ms(), old_size = -1;
	int rc;

	if ((rc = sandbox_expect(st, tenant, id, from_version, e)) != 0 ||
	    (rc = blob_require(st, sha, e)) != 0)
		return rc;
	if (st->quota > 0 && (rc = head_size(st, tenant, id, &old_size, e)) != 0)
		return rc;
	/* The version test is repeated in SQL: the CAS holds even alone. */
	rc = store__prepare(st, "UPDATE sandboxes SET head = ?3,"
	    " version = version + 1, updated_at = ?4"
	    " WHERE tenant = ?1 AND id = ?2 AND version = ?5", &stmt,
	    e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 3, sha, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 4, now, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 5, (int64_t)from_version, "store",
	    e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	if ((rc = store__step_release(st, stmt, "sandboxes", e)) != 0)
		return rc;
	if (sqlite3_changes(st->db) != 1)
		return err_set(e, -ESTALE, "store: sandbox %s/%s: moved "
		    "during commit", tenant, id);
	if ((rc = version_append(st, tenant, id, from_version + 1, sha, now,
	    e)) != 0 ||
	    (rc = sandbox_retain(st, tenant, id, st->keep_versions, e)) != 0)
		return rc;
	return quota_enforce(st, tenant, id, old_size, sha, e);
}

int
store_sandbox_commit(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, struct err *e)
{
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0 ||
	    (rc = store_sha_check("sha256", new_sha, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	rc = sandbox_move(st, tenant, id, from_version, new_sha, e);
	return store__tx_end(st, rc, e);
}

int
store_sandbox_commit_blob(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	struct blob_plan p;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0)
		return rc;
	/* Hashing happens here, before the write lock is taken. */
	rc = store__plan_make(st, data, len, base_sha, base_data, base_len, &p,
	    e);
	if (rc != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		goto out_free;
	/* A stale or missing sandbox is found before anything is written. */
	rc = sandbox_expect(st, tenant, id, expect_version, e);
	if (rc == 0)
		rc = store__plan_store(st, &p, e);
	if (rc == 0)
		rc = sandbox_move(st, tenant, id, expect_version, p.key, e);
	if ((rc = store__tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	store__plan_free(&p);
	return rc;
}

/*** Commits from an image and a patch ***/

/*
 * Reads tenant/id's head key into head[] and checks the sandbox is at
 * version: -ENOENT if it does not exist, -ESTALE naming both versions if
 * it is at another one. In the caller's transaction (read or write).
 */
static int
sandbox_head(struct store *st, const char *tenant, const char *id,
    uint64_t version, char head[STORE_SHA_HEX + 1], struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	uint64_t at;
	int rc;

	rc = store__prepare(st, "SELECT head, version FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
		goto out_finalize;
	}
	if (rc != SQLITE_ROW) {
		rc = sql_fail(e, st->db, rc, "store", "sandboxes");
		goto out_finalize;
	}
	if ((rc = store__col_text(stmt, 0, head, STORE_SHA_HEX + 1,
	    "sandboxes.head", e)) != 0)
		goto out_finalize;
	at = (uint64_t)sqlite3_column_int64(stmt, 1);
	if (at != version)
		rc = err_set(e, -ESTALE, "store: sandbox %s/%s: at version "
		    "%llu, not %llu", tenant, id, (unsigned long long)at,
		    (unsigned long long)version);
out_finalize:
	store__release(st, stmt);
	return rc;
}

/*
 * In one read transaction: the key of tenant/id's head, which must be at
 * version, and that head's manifest (base->hashes is the caller's to free).
 * A damaged manifest leaves base empty: every chunk is then hashed.
 */
static int
head_read(struct store *st, const char *tenant, const char *id,
    uint64_t version, char head[STORE_SHA_HEX + 1], struct manifest *base,
    struct err *e)
{
	int rc;

	memset(base, 0, sizeof(*base));
	if ((rc = sql_exec(st->db, "BEGIN", "store", "begin", e)) != 0)
		return rc;
	rc = sandbox_head(st, tenant, id, version, head, e);
	if (rc == 0 && (rc = store__manifest_read(st, head, base,
	    e)) == -EBADMSG) {
		err_clear(e);
		rc = 0;
	}
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	return rc;
}

/*
 * Three steps, so that the write lock is held for row writes only:
 *
 * 1. A read transaction reads the head's key at expect_version and its
 *    manifest, together (head_read()).
 * 2. With no lock, the chunks holding patch blocks (and those past the
 *    head's end, and the last one if the size changed) are assembled and
 *    hashed; the rest take the head's hashes (store__plan_make_patch()).
 * 3. A write transaction (BEGIN IMMEDIATE) checks the sandbox is still at
 *    expect_version AND still names the head read in step 1, then stores
 *    the plan and moves the head, as store_sandbox_commit_blob() does.
 *
 * Why the chunks taken from the head are still stored when step 3 inserts
 * the manifest naming them: a head's blob is stored (foreign key) and
 * holds a reference on each chunk it lists (chunk_refs), and collection
 * only ever deletes a blob that no head and no history row names. Step 3
 * holds the write lock from its check to its commit, and the check shows
 * that the sandbox still names the very blob step 1 read, so that blob and
 * its chunks are in place for the whole transaction; store__plan_chunks() takes
 * its own reference on each before retention runs, so the old head going
 * (keep_versions) cannot take a shared chunk with it. The version alone
 * would not be enough: a sandbox deleted and created again is at version
 * 1 with another head, which is why the head's key is compared too. A
 * reused chunk found missing anyway (a damaged file) is assembled and
 * checked against the head's hash before it is stored (store__plan_chunks()).
 */
int
store_sandbox_commit_patch(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *img, size_t img_len,
    const void *patch, size_t patch_len, char sha_hex[STORE_SHA_HEX + 1],
    struct err *e)
{
	return store_sandbox_commit_patch_from(st, tenant, id, expect_version, img,
	    img_len, NULL, 0, patch, patch_len, sha_hex, e);
}

int
store_sandbox_commit_patch_from(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *img, size_t img_len,
    const void *prev, size_t prev_len, const void *patch, size_t patch_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	char head[STORE_SHA_HEX + 1], now_head[STORE_SHA_HEX + 1];
	struct manifest base = { 0 };
	struct blob_plan p;
	struct patch pt, pv;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0)
		return rc;
	if (img == NULL && img_len > 0)
		return err_set(e, -EINVAL, "store: image: NULL with %zu bytes",
		    img_len);
	if (patch == NULL && patch_len > 0)
		return err_set(e, -EINVAL, "store: patch: NULL with %zu bytes",
		    patch_len);
	if ((rc = patch_parse(patch, patch_len, &pt, e)) != 0)
		return rc;
	if (prev != NULL && (rc = patch_parse(prev, prev_len, &pv, e)) != 0)
		return rc;
	if ((rc = head_read(st, tenant, id, expect_version, head, &base,
	    e)) != 0)
		goto out_base;
	rc = store__plan_make_patch(st, img, img_len, &pt, prev != NULL ? &pv : NULL,
	    &base, &p, e);
	if (rc != 0)
		goto out_base;
	if ((rc = store__plan_check_patch(&p, e)) != 0 ||
	    (rc = store__begin(st, e)) != 0)
		goto out_free;
	/* The CAS: same version and same head as the manifest read. */
	rc = sandbox_head(st, tenant, id, expect_version, now_head, e);
	if (rc == 0 && strcmp(now_head, head) != 0)
		rc = err_set(e, -ESTALE, "store: sandbox %s/%s: head is no "
		    "longer %s (deleted and created again?)", tenant, id, head);
	/* The reused chunks' references are owed until retention is done:
	 * most cancel against those the retired version drops. */
	st->defer_refs = true;
	if (rc == 0)
		rc = store__plan_store(st, &p, e);
	st->defer_refs = false;
	if (rc == 0)
		rc = sandbox_move(st, tenant, id, expect_version, p.key, e);
	if (rc == 0)
		rc = store__net_flush(st, e);
	store__net_end(st);
	if ((rc = store__tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	store__plan_free(&p);
out_base:
	free(base.hashes);
	return rc;
}

int
store_sandbox_fork(struct store *st, const char *tenant, const char *src,
    const char *dst, struct err *e)
{
	struct store_sandbox sb;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("src", src, e)) != 0 ||
	    (rc = store_id_check("dst", dst, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	/* Reading src inside the write transaction: it cannot move meanwhile. */
	rc = store_sandbox_get(st, tenant, src, &sb, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, dst, sb.head, sb.labels, sb.image,
		    sb.workdir, e);
	return store__tx_end(st, rc, e);
}

int
store_sandbox_delete(struct store *st, const char *tenant, const char *id,
    struct err *e)
{
	struct shalist named = { 0 };
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0)
		return rc;
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	/* The blobs it names, to collect once it is gone. */
	rc = store__prepare(st, "SELECT head FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2 UNION SELECT sha256 FROM versions"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		goto out_end;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0) {
		store__release(st, stmt);
		goto out_end;
	}
	if ((rc = shalist_collect(st, stmt, &named, "sandboxes.head",
	    e)) != 0)
		goto out_end;
	/* versions rows go with it: ON DELETE CASCADE. */
	rc = store__prepare(st, "DELETE FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		goto out_end;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0) {
		store__release(st, stmt);
		goto out_end;
	}
	if ((rc = store__step_release(st, stmt, "sandboxes", e)) != 0)
		goto out_end;
	if (sqlite3_changes(st->db) == 0)
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	else
		rc = store__gc_list(st, &named, NULL, e);
out_end:
	shalist_free(&named);
	return store__tx_end(st, rc, e);
}

/*
 * The body of store_sandbox_adopt(), inside its transaction. The rows that
 * go are collected after the new head's row is in, so a blob both name
 * stays.
 */
static int
sandbox_adopt_locked(struct store *st, const struct store_sandbox *sb,
    const char *labels, struct err *e)
{
	struct shalist old = { 0 };
	struct store_sandbox cur;
	sqlite3_stmt *stmt = NULL;
	int64_t above;
	int rc;

	if ((rc = blob_require(st, sb->head, e)) != 0)
		return rc;
	rc = store_sandbox_get(st, sb->tenant, sb->id, &cur, e);
	if (rc != 0 && rc != -ENOENT)
		return rc;
	err_clear(e);
	/*
	 * Rows at or above the new version are of a future this cache no
	 * longer holds; a sandbox created anew under the same name has a
	 * history of its own, so none of the old rows stay.
	 */
	above = rc == 0 && cur.created_at != sb->created_at ? 0 :
	    (int64_t)sb->version;
	if (rc == 0)
		shalist_add(&old, cur.head);
	rc = store__prepare(st, "DELETE FROM versions WHERE tenant = ?1"
	    " AND id = ?2 AND version >= ?3 RETURNING sha256", &stmt,
	    e);
	if (rc != 0)
		goto out_free;
	if ((rc = sql_bind_text(stmt, 1, sb->tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, sb->id, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 3, above, "store", e)) != 0) {
		store__release(st, stmt);
		goto out_free;
	}
	if ((rc = shalist_collect(st, stmt, &old, "versions.sha256", e)) != 0)
		goto out_free;
	rc = store__prepare(st,
	    "INSERT INTO sandboxes (" SANDBOX_COLUMNS ")"
	    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
	    " ON CONFLICT (tenant, id) DO UPDATE SET head = excluded.head,"
	    " version = excluded.version, created_at = excluded.created_at,"
	    " updated_at = excluded.updated_at, labels = excluded.labels,"
	    " image = excluded.image, workdir = excluded.workdir",
	    &stmt, e);
	if (rc != 0)
		goto out_free;
	if ((rc = sql_bind_text(stmt, 1, sb->tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, sb->id, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 3, sb->head, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 4, (int64_t)sb->version, "store",
	    e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 5, sb->created_at, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 6, sb->updated_at, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 7, labels, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 8, sb->image, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 9, sb->workdir, "store", e)) != 0) {
		store__release(st, stmt);
		goto out_free;
	}
	if ((rc = store__step_release(st, stmt, "sandboxes", e)) != 0 ||
	    (rc = version_append(st, sb->tenant, sb->id, sb->version,
	    sb->head, sb->updated_at, e)) != 0 ||
	    (rc = sandbox_retain(st, sb->tenant, sb->id, st->keep_versions, e)) != 0)
		goto out_free;
	rc = store__gc_list(st, &old, NULL, e);
out_free:
	shalist_free(&old);
	return rc;
}

int
store_sandbox_adopt(struct store *st, const struct store_sandbox *sb,
    struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(sb->tenant, e)) != 0 ||
	    (rc = store_id_check("id", sb->id, e)) != 0 ||
	    (rc = store_sha_check("head", sb->head, e)) != 0 ||
	    (rc = store_labels_canon(sb->labels, labels, e)) != 0 ||
	    (rc = store_image_check(sb->image, sb->workdir, e)) != 0)
		return rc;
	if (sb->version == 0 || sb->version > INT64_MAX)
		return err_set(e, -EINVAL, "store: sandbox %s/%s: version %llu",
		    sb->tenant, sb->id, (unsigned long long)sb->version);
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	return store__tx_end(st, sandbox_adopt_locked(st, sb, labels, e), e);
}

int
store_sandbox_list(struct store *st, const char *tenant, store_sandbox_cb cb,
    void *arg, struct err *e)
{
	struct store_sandbox sb;
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0)
		return rc;
	rc = store__prepare(st, "SELECT " SANDBOX_COLUMNS " FROM sandboxes"
	    " WHERE tenant = ?1 ORDER BY id", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		if ((rc = sandbox_row(stmt, &sb, e)) != 0 ||
		    (rc = cb(&sb, arg)) != 0)
			goto out_finalize;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc, "store",
	    "sandboxes");
out_finalize:
	store__release(st, stmt);
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
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check("id", id, e)) != 0)
		return rc;
	rc = store__prepare(st,
	    "SELECT version, sha256, created_at FROM versions"
	    " WHERE tenant = ?1 AND id = ?2 ORDER BY version DESC", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, id, "store", e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		rows++;
		memset(&v, 0, sizeof(v));
		v.version = (uint64_t)sqlite3_column_int64(stmt, 0);
		v.created_at = sqlite3_column_int64(stmt, 2);
		if ((rc = store__col_text(stmt, 1, v.sha256, sizeof(v.sha256),
		    "versions.sha256", e)) != 0 || (rc = cb(&v, arg)) != 0)
			goto out_finalize;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc, "store",
	    "versions");
	/* The head's row is never pruned: no rows means no sandbox. */
	if (rc == 0 && rows == 0)
		rc = sandbox_version(st, tenant, id, &version, e);
out_finalize:
	store__release(st, stmt);
	return rc;
}

/*** Retention ***/

/* The body of store_prune(), inside its transaction. */
static long
prune_locked(struct store *st, unsigned keep_versions, struct err *e)
{
	struct shalist l = { 0 };
	sqlite3_stmt *stmt = NULL;
	long removed = 0;
	int rc;

	rc = store__prepare(st, "DELETE FROM versions WHERE rowid IN"
	    " (SELECT r FROM (SELECT v.rowid AS r, v.version AS version,"
	    "  s.version AS head_version, row_number() OVER"
	    "  (PARTITION BY v.tenant, v.id ORDER BY v.version DESC) AS n"
	    "  FROM versions AS v JOIN sandboxes AS s"
	    "  ON s.tenant = v.tenant AND s.id = v.id)"
	    " WHERE n > ?1 AND version <> head_version) RETURNING sha256",
	    &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_i64(stmt, 1, (int64_t)keep_versions, "store",
	    e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	if ((rc = shalist_collect(st, stmt, &l, "versions.sha256", e)) != 0)
		goto out_free;
	/*
	 * Blobs nothing names, put long enough ago that no create or commit
	 * of theirs can still be on its way (store_blob_put() callers).
	 */
	rc = store__prepare(st,
	    "SELECT sha256 FROM blobs WHERE created_at <= ?1"
	    " AND NOT EXISTS (SELECT 1 FROM sandboxes"
	    "  WHERE sandboxes.head = blobs.sha256)"
	    " AND NOT EXISTS (SELECT 1 FROM versions"
	    "  WHERE versions.sha256 = blobs.sha256)", &stmt, e);
	if (rc != 0)
		goto out_free;
	if ((rc = sql_bind_i64(stmt, 1, (int64_t)now_ms() -
	    STORE_PRUNE_GRACE_MS, "store", e)) != 0) {
		store__release(st, stmt);
		goto out_free;
	}
	if ((rc = shalist_collect(st, stmt, &l, "blobs.sha256", e)) != 0 ||
	    (rc = store__gc_list(st, &l, &removed, e)) != 0)
		goto out_free;
	rc = 0;
out_free:
	shalist_free(&l);
	return rc != 0 ? rc : removed;
}

int
store_prune(struct store *st, unsigned keep_versions, struct err *e)
{
	long n;
	int rc;

	err_clear(e);
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	n = prune_locked(st, keep_versions, e);
	rc = store__tx_end(st, n < 0 ? (int)n : 0, e);
	if (rc != 0)
		return rc;
	return n > INT_MAX ? INT_MAX : (int)n;
}
