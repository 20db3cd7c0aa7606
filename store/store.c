/*
 * store.c - the local snapshot store: one SQLite file of chunked blobs and
 * heads.
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
 * A put is two steps. plan_make() cuts the bytes into chunks and hashes
 * them (or takes a hash from the base's manifest where the bytes are
 * equal) with no lock held; plan_store() then writes, inside the caller's
 * transaction, only what is new: a chunk already stored gets refs + 1 in
 * chunk_refs. Collection (gc_blob()) is the reverse and runs in the same
 * transaction as whatever dropped a blob's last name. With the _blob
 * sandbox calls a blob is named in the transaction that stores it and
 * deleted in the one that stops naming it, so the two never interleave.
 *
 * store_sandbox_commit_patch() makes its plan from an image and a patch
 * instead of a whole blob: it takes the current head's manifest (read in
 * a read transaction) for every chunk the patch does not touch and
 * assembles and hashes the others, so a commit costs what changed, then
 * re-checks in the write transaction that the head is the one it read.
 *
 * Sections: Helpers, Names, Chunks and manifests, Collection, Handles,
 * Blobs, Sandboxes, Commits from an image and a patch, Retention.
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
#include "patch.h"
#include "sqlerr.h"
#include "store.h"

#define STORE_SCHEMA_VERSION 2
#define SHA_RAW 32			/* bytes of a raw SHA-256 */
#define MANIFEST_DOMAIN "sandq-snapshot-1"	/* hashed with its NUL */
#define CHUNK_SIZE_MAX (16 * 1024 * 1024)	/* largest chunk_size read */

/* A snapshot the codec accepts must fit the store, up to SQLite's limit. */
_Static_assert(STORE_BLOB_MAX <= AGENTFS_BLOB_MAX, "store blob bound");
_Static_assert(STORE_CHUNK_BYTES <= CHUNK_SIZE_MAX, "chunk bound");
/* A patch block lies in exactly one chunk, and a patched image fits. */
_Static_assert(STORE_CHUNK_BYTES % PATCH_BLOCK == 0, "patch block bound");
_Static_assert(PATCH_SIZE_MAX <= STORE_BLOB_MAX, "patch size bound");

struct store {
	sqlite3 *db;		/* the connection to dir/store.db */
	unsigned keep_versions;	/* history rows per sandbox; 0: all */
	long chunks_hashed;	/* chunks hashed for writes (a test hook) */
};

/* blobs, in schema 2 and in the table a schema-1 file is converted into. */
#define BLOBS_COLUMNS_SQL \
	" (sha256 TEXT NOT NULL PRIMARY KEY, size INTEGER NOT NULL," \
	" chunk_size INTEGER NOT NULL, chunks BLOB NOT NULL," \
	" created_at INTEGER NOT NULL);"

/*
 * refs lives in a table of its own: SQLite rewrites a whole row to change
 * one column, and a commit changes the count of every chunk of a snapshot.
 */
#define CHUNK_TABLES_SQL \
	"CREATE TABLE chunks (sha256 TEXT NOT NULL PRIMARY KEY," \
	" data BLOB NOT NULL, created_at INTEGER NOT NULL);" \
	"CREATE TABLE chunk_refs (sha256 TEXT NOT NULL PRIMARY KEY" \
	" REFERENCES chunks (sha256), refs INTEGER NOT NULL" \
	" CHECK (refs >= 1)) WITHOUT ROWID;"

static const char SCHEMA_SQL[] =
	CHUNK_TABLES_SQL
	"CREATE TABLE blobs" BLOBS_COLUMNS_SQL
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
	"PRAGMA user_version = 2;";

/*
 * Schema 1 differs only in blobs: (sha256, size, data, created_at), the
 * whole blob keyed by the SHA-256 of its bytes. migrate_v1() fills these
 * tables from it, then swaps blobs_v2 in.
 */
static const char MIGRATE_V1_SQL[] =
	CHUNK_TABLES_SQL
	"CREATE TABLE blobs_v2" BLOBS_COLUMNS_SQL;
static const char MIGRATE_V1_END_SQL[] =
	"DROP TABLE blobs;"
	"ALTER TABLE blobs_v2 RENAME TO blobs;"
	"PRAGMA user_version = 2;";

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

/* Binds n bytes as a BLOB (an empty one for n == 0, never SQL NULL). */
static int
bind_blob(struct store *st, sqlite3_stmt *stmt, int i, const void *p,
    size_t n, struct err *e)
{
	int rc = n > 0 ? sqlite3_bind_blob64(stmt, i, p, n, SQLITE_STATIC) :
	    sqlite3_bind_zeroblob(stmt, i, 0);

	if (rc != SQLITE_OK)
		return db_fail(st->db, rc, "bind", e);
	return 0;
}

/* Steps a statement to be reused; its bindings stay for the next step. */
static int
stmt_step_reset(struct store *st, sqlite3_stmt *stmt, const char *what,
    struct err *e)
{
	int rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	if (rc != SQLITE_DONE)
		return db_fail(st->db, rc, what, e);
	return 0;
}

/* Lower-case hex of n raw bytes: 2 * n digits and a NUL. */
static void
hex_of(const unsigned char *raw, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 0xf];
	}
	out[2 * n] = '\0';
}

/* Raw SHA-256 of data through OpenSSL's EVP interface. */
static int
sha256_raw(const void *data, size_t len, unsigned char out[SHA_RAW],
    struct err *e)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(len > 0 ? data : "", len, md, &mdlen, EVP_sha256(),
	    NULL) != 1 || mdlen != SHA_RAW)
		return err_set(e, -EIO, "store: SHA-256 failed");
	memcpy(out, md, SHA_RAW);
	return 0;
}

/* A growing list of blob keys, for what a collection must look at. */
struct shalist {
	char (*v)[STORE_SHA_HEX + 1];	/* the keys */
	size_t n;			/* keys held */
	size_t cap;			/* keys v has room for */
};

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
		if ((rc = col_text(stmt, 0, sha, sizeof(sha), what, e)) != 0)
			goto out_finalize;
		shalist_add(l, sha);
	}
	rc = rc == SQLITE_DONE ? 0 : db_fail(st->db, rc, what, e);
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

/*** Names ***/

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

/*** Chunks and manifests ***/

/* A blobs row: what a blob is made of. */
struct manifest {
	uint64_t size;			/* bytes of the blob */
	uint32_t chunk_size;		/* bytes of each chunk but the last */
	size_t n;			/* chunks: size / chunk_size, up */
	unsigned char *hashes;		/* n raw SHA-256s, malloc'd */
};

/*
 * The blob key: SHA-256 of "sandq-snapshot-1" NUL, size as u64 LE,
 * chunk_size as u32 LE and the n raw chunk hashes. The domain string sets
 * these keys apart from the plain SHA-256 of a snapshot (schema 1's keys:
 * a snapshot starts "SQLite format 3"), and size and chunk size make the
 * hash list unambiguous.
 */
static int
manifest_key(uint64_t size, uint32_t chunk_size, const unsigned char *hashes,
    size_t n, char key[STORE_SHA_HEX + 1], struct err *e)
{
	unsigned char head[sizeof(MANIFEST_DOMAIN) + 12];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx;
	bool ok;

	memcpy(head, MANIFEST_DOMAIN, sizeof(MANIFEST_DOMAIN));
	for (int i = 0; i < 8; i++)
		head[sizeof(MANIFEST_DOMAIN) + i] =
		    (unsigned char)(size >> (8 * i));
	for (int i = 0; i < 4; i++)
		head[sizeof(MANIFEST_DOMAIN) + 8 + i] =
		    (unsigned char)(chunk_size >> (8 * i));
	ctx = EVP_MD_CTX_new();
	ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
	    EVP_DigestUpdate(ctx, head, sizeof(head)) == 1 &&
	    (n == 0 || EVP_DigestUpdate(ctx, hashes, n * SHA_RAW) == 1) &&
	    EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == SHA_RAW;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return err_set(e, -EIO, "store: SHA-256 failed");
	hex_of(md, SHA_RAW, key);
	return 0;
}

/*
 * Reads blob sha's manifest into *m (m->hashes is the caller's to free)
 * and checks it: n chunks of chunk_size cover size exactly, and the whole
 * hashes to sha. -ENOENT if no such blob; -EBADMSG, m empty, if damaged.
 */
static int
manifest_read(struct store *st, const char *sha, struct manifest *m,
    struct err *e)
{
	char key[STORE_SHA_HEX + 1];
	sqlite3_stmt *stmt = NULL;
	int64_t size, cs;
	const void *p;
	int nb, rc;

	memset(m, 0, sizeof(*m));
	rc = stmt_prepare(st, "SELECT size, chunk_size, chunks FROM blobs"
	    " WHERE sha256 = ?1", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, sha, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: blob %s: not stored", sha);
		goto out_finalize;
	}
	if (rc != SQLITE_ROW) {
		rc = db_fail(st->db, rc, "blobs", e);
		goto out_finalize;
	}
	size = sqlite3_column_int64(stmt, 0);
	cs = sqlite3_column_int64(stmt, 1);
	p = sqlite3_column_blob(stmt, 2);
	nb = sqlite3_column_bytes(stmt, 2);
	if (size < 0 || (uint64_t)size > STORE_BLOB_MAX || cs < 1 ||
	    cs > CHUNK_SIZE_MAX || nb < 0 || nb % SHA_RAW != 0 ||
	    (p == NULL && nb > 0) ||
	    (size_t)nb / SHA_RAW != (size_t)((size + cs - 1) / cs)) {
		rc = err_set(e, -EBADMSG, "store: blob %s: damaged manifest "
		    "(size %lld, chunk size %lld, %d bytes of hashes)", sha,
		    (long long)size, (long long)cs, nb);
		goto out_finalize;
	}
	m->size = (uint64_t)size;
	m->chunk_size = (uint32_t)cs;
	m->n = (size_t)nb / SHA_RAW;
	m->hashes = xmalloc(nb > 0 ? (size_t)nb : 1);
	if (nb > 0)
		memcpy(m->hashes, p, (size_t)nb);
	rc = manifest_key(m->size, m->chunk_size, m->hashes, m->n, key, e);
	if (rc == 0 && strcmp(key, sha) != 0)
		rc = err_set(e, -EBADMSG, "store: blob %s: manifest does not "
		    "match its key", sha);
	if (rc != 0) {
		free(m->hashes);
		memset(m, 0, sizeof(*m));
	}
out_finalize:
	sqlite3_finalize(stmt);
	return rc;
}

/*
 * A blob cut into chunks and hashed, ready for plan_store(). The blob is
 * data itself, or, when patch is set, the image data with patch applied
 * (patch.h): its chunks are then assembled when they are needed.
 */
struct blob_plan {
	const unsigned char *data;	/* the caller's bytes, not owned */
	size_t data_len;		/* bytes of data */
	const struct patch *patch;	/* over data, or NULL; not owned */
	size_t len;			/* bytes of the blob */
	size_t n;			/* chunks */
	unsigned char *hashes;		/* n raw SHA-256s: manifest body */
	bool *reused;			/* per chunk: hash from the base */
	char key[STORE_SHA_HEX + 1];	/* the blob's key */
};

static void
plan_free(struct blob_plan *p)
{
	free(p->hashes);
	free(p->reused);
	memset(p, 0, sizeof(*p));
}

/*
 * Chunk i of p's blob, its length in *cn: a pointer into data, or, for an
 * image + patch, the chunk assembled into buf (STORE_CHUNK_BYTES bytes,
 * which the caller supplies whenever p->patch is set).
 */
static const unsigned char *
plan_chunk(const struct blob_plan *p, size_t i, unsigned char *buf,
    size_t *cn)
{
	size_t off = i * STORE_CHUNK_BYTES;

	*cn = p->len - off < STORE_CHUNK_BYTES ? p->len - off :
	    STORE_CHUNK_BYTES;
	if (p->patch == NULL)
		return p->data + off;
	patch_read(p->data, p->data_len, p->patch, off, *cn, buf);
	return buf;
}

/*
 * Cuts data into STORE_CHUNK_BYTES chunks and finds each one's hash: taken
 * from base_sha's manifest where the chunk memcmp-equals base_data's chunk
 * at the same offset (same length), computed otherwise. A base that is not
 * stored, damaged, or of another size or chunking is ignored: every chunk
 * is hashed. Reads only (no lock held); the caller frees p (plan_free()).
 */
static int
plan_make(struct store *st, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    struct blob_plan *p, struct err *e)
{
	const unsigned char *b = base_data;
	struct manifest base = { 0 };
	bool have_base = false;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	if (len > STORE_BLOB_MAX)
		return err_set(e, -EFBIG, "store: blob: %zu bytes, over %zu",
		    len, STORE_BLOB_MAX);
	if (base_sha != NULL && (rc = sha_check("base_sha", base_sha, e)) != 0)
		return rc;
	if (base_sha != NULL && (b != NULL || base_len == 0)) {
		rc = manifest_read(st, base_sha, &base, e);
		if (rc == 0)
			have_base = base.size == base_len &&
			    base.chunk_size == STORE_CHUNK_BYTES;
		else if (rc != -ENOENT && rc != -EBADMSG)
			return rc;
		err_clear(e);
	}
	p->data = data;
	p->data_len = len;
	p->len = len;
	p->n = (len + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES;
	p->hashes = xcalloc(p->n > 0 ? p->n : 1, SHA_RAW);
	p->reused = xcalloc(p->n > 0 ? p->n : 1, sizeof(bool));
	for (size_t i = 0; i < p->n; i++) {
		size_t off = i * STORE_CHUNK_BYTES;
		size_t cn = len - off < STORE_CHUNK_BYTES ? len - off :
		    STORE_CHUNK_BYTES;
		size_t bn = i < base.n && base_len - off < STORE_CHUNK_BYTES ?
		    base_len - off : STORE_CHUNK_BYTES;

		if (have_base && i < base.n && bn == cn &&
		    memcmp(p->data + off, b + off, cn) == 0) {
			memcpy(p->hashes + i * SHA_RAW,
			    base.hashes + i * SHA_RAW, SHA_RAW);
			p->reused[i] = true;
		} else if ((rc = sha256_raw(p->data + off, cn,
		    p->hashes + i * SHA_RAW, e)) != 0) {
			goto out_free;
		} else {
			st->chunks_hashed++;
		}
	}
	rc = manifest_key(len, STORE_CHUNK_BYTES, p->hashes, p->n, p->key, e);
out_free:
	free(base.hashes);
	if (rc != 0)
		plan_free(p);
	return rc;
}

/*
 * Takes one reference on each chunk of p, storing the chunks not stored
 * yet. A chunk whose hash came from the base but which is no longer stored
 * (the base was collected since plan_make()) is hashed now: it must match,
 * or base_data was not the base's bytes (-EINVAL). With an image + patch
 * that cannot happen (see store_sandbox_commit_patch()) short of a
 * damaged file, and the same check stands. In a transaction.
 */
static int
plan_chunks(struct store *st, const struct blob_plan *p, int64_t now,
    struct err *e)
{
	sqlite3_stmt *ref = NULL, *chunk = NULL, *newref = NULL;
	unsigned char *buf = p->patch != NULL ? xmalloc(STORE_CHUNK_BYTES) :
	    NULL;
	char hex[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	int rc;

	if ((rc = stmt_prepare(st, "UPDATE chunk_refs SET refs = refs + 1"
	    " WHERE sha256 = ?1", &ref, e)) != 0 ||
	    (rc = stmt_prepare(st, "INSERT INTO chunks (sha256, data,"
	    " created_at) VALUES (?1, ?2, ?3) ON CONFLICT (sha256) DO NOTHING",
	    &chunk, e)) != 0 ||
	    (rc = stmt_prepare(st, "INSERT INTO chunk_refs (sha256, refs)"
	    " VALUES (?1, 1)", &newref, e)) != 0 ||
	    (rc = bind_i64(st, chunk, 3, now, e)) != 0)
		goto out_finalize;
	for (size_t i = 0; i < p->n; i++) {
		const unsigned char *h = p->hashes + i * SHA_RAW, *c;
		size_t cn;

		hex_of(h, SHA_RAW, hex);
		if ((rc = bind_text(st, ref, 1, hex, e)) != 0 ||
		    (rc = stmt_step_reset(st, ref, "chunk_refs", e)) != 0)
			goto out_finalize;
		if (sqlite3_changes(st->db) == 1)
			continue;
		c = plan_chunk(p, i, buf, &cn);
		if (p->reused[i]) {
			if ((rc = sha256_raw(c, cn, md, e)) != 0)
				goto out_finalize;
			st->chunks_hashed++;
			if (memcmp(md, h, SHA_RAW) != 0) {
				rc = err_set(e, -EINVAL, p->patch == NULL ?
				    "store: base_data: not the bytes of the "
				    "base blob (chunk %zu)" : "store: patch: "
				    "the head is not the image with a subset "
				    "of this patch (chunk %zu)", i);
				goto out_finalize;
			}
		}
		if ((rc = bind_text(st, chunk, 1, hex, e)) != 0 ||
		    (rc = bind_blob(st, chunk, 2, c, cn, e)) != 0 ||
		    (rc = stmt_step_reset(st, chunk, "chunks", e)) != 0 ||
		    (rc = bind_text(st, newref, 1, hex, e)) != 0 ||
		    (rc = stmt_step_reset(st, newref, "chunk_refs", e)) != 0)
			goto out_finalize;
	}
out_finalize:
	sqlite3_finalize(ref);
	sqlite3_finalize(chunk);
	sqlite3_finalize(newref);
	free(buf);
	return rc;
}

/* Inserts p's blobs row, through sql (blobs, or blobs_v2 while migrating). */
static int
plan_row(struct store *st, const char *sql, const struct blob_plan *p,
    int64_t created_at, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	if ((rc = stmt_prepare(st, sql, &stmt, e)) != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, p->key, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 2, (int64_t)p->len, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 3, STORE_CHUNK_BYTES, e)) != 0 ||
	    (rc = bind_blob(st, stmt, 4, p->hashes, p->n * SHA_RAW, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 5, created_at, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	return stmt_done(st, stmt, "blobs", e);
}

/*
 * Stores the blob p describes, in the caller's write transaction: nothing
 * when its key is stored already (blobs are immutable), else its new
 * chunks, a reference on each chunk and the manifest row.
 */
static int
plan_store(struct store *st, const struct blob_plan *p, struct err *e)
{
	int64_t now = (int64_t)now_ms();
	int rc = store_blob_exists(st, p->key, e);

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if ((rc = plan_chunks(st, p, now, e)) != 0)
		return rc;
	return plan_row(st, "INSERT INTO blobs (sha256, size, chunk_size,"
	    " chunks, created_at) VALUES (?1, ?2, ?3, ?4, ?5)", p, now, e);
}

/*** Collection ***/

/* The statements of one collection, prepared once for all its blobs. */
struct gc {
	sqlite3_stmt *named;	/* 1 if a head or history row names ?1 */
	sqlite3_stmt *manifest;	/* ?1's chunk hashes */
	sqlite3_stmt *blob;	/* deletes blob ?1 */
	sqlite3_stmt *unref;	/* refs - 1 on chunk ?1, if more than 1 */
	sqlite3_stmt *ref;	/* deletes chunk ?1's count */
	sqlite3_stmt *chunk;	/* deletes chunk ?1 */
};

static void
gc_close(struct gc *g)
{
	sqlite3_finalize(g->named);
	sqlite3_finalize(g->manifest);
	sqlite3_finalize(g->blob);
	sqlite3_finalize(g->unref);
	sqlite3_finalize(g->ref);
	sqlite3_finalize(g->chunk);
	memset(g, 0, sizeof(*g));
}

static int
gc_open(struct store *st, struct gc *g, struct err *e)
{
	int rc;

	memset(g, 0, sizeof(*g));
	/* Both lookups use an index: sandboxes_head, versions_sha256. */
	if ((rc = stmt_prepare(st, "SELECT EXISTS (SELECT 1 FROM sandboxes"
	    " WHERE head = ?1) OR EXISTS (SELECT 1 FROM versions"
	    " WHERE sha256 = ?1)", &g->named, e)) != 0 ||
	    (rc = stmt_prepare(st, "SELECT chunks FROM blobs WHERE sha256 = ?1",
	    &g->manifest, e)) != 0 ||
	    (rc = stmt_prepare(st, "DELETE FROM blobs WHERE sha256 = ?1",
	    &g->blob, e)) != 0 ||
	    (rc = stmt_prepare(st, "UPDATE chunk_refs SET refs = refs - 1"
	    " WHERE sha256 = ?1 AND refs > 1", &g->unref, e)) != 0 ||
	    (rc = stmt_prepare(st, "DELETE FROM chunk_refs WHERE sha256 = ?1",
	    &g->ref, e)) != 0 ||
	    (rc = stmt_prepare(st, "DELETE FROM chunks WHERE sha256 = ?1",
	    &g->chunk, e)) != 0)
		gc_close(g);
	return rc;
}

/* Drops one reference on a chunk; the last one deletes it. */
static int
gc_chunk(struct store *st, struct gc *g, const unsigned char *h,
    struct err *e)
{
	char hex[STORE_SHA_HEX + 1];
	int rc;

	hex_of(h, SHA_RAW, hex);
	if ((rc = bind_text(st, g->unref, 1, hex, e)) != 0 ||
	    (rc = stmt_step_reset(st, g->unref, "chunk_refs", e)) != 0)
		return rc;
	if (sqlite3_changes(st->db) == 1)
		return 0;
	/* The count first: it references the chunk. */
	if ((rc = bind_text(st, g->ref, 1, hex, e)) != 0 ||
	    (rc = stmt_step_reset(st, g->ref, "chunk_refs", e)) != 0 ||
	    (rc = bind_text(st, g->chunk, 1, hex, e)) != 0)
		return rc;
	return stmt_step_reset(st, g->chunk, "chunks", e);
}

/*
 * Deletes blob sha if no head and no history row names it, then drops a
 * reference on each chunk its manifest lists. Returns 1 if deleted, 0 if
 * named or already gone, or -errno. In the caller's write transaction.
 */
static int
gc_blob(struct store *st, struct gc *g, const char *sha, struct err *e)
{
	unsigned char *hashes = NULL;
	const void *p;
	int named, nb, rc;

	if ((rc = bind_text(st, g->named, 1, sha, e)) != 0)
		return rc;
	rc = sqlite3_step(g->named);
	named = rc == SQLITE_ROW ? sqlite3_column_int(g->named, 0) : -1;
	sqlite3_reset(g->named);
	if (named < 0)
		return db_fail(st->db, rc, "blobs", e);
	if (named)
		return 0;
	if ((rc = bind_text(st, g->manifest, 1, sha, e)) != 0)
		return rc;
	rc = sqlite3_step(g->manifest);
	if (rc != SQLITE_ROW) {
		sqlite3_reset(g->manifest);
		return rc == SQLITE_DONE ? 0 : db_fail(st->db, rc, "blobs", e);
	}
	/* A damaged manifest still gives back every whole hash it holds. */
	p = sqlite3_column_blob(g->manifest, 0);
	nb = p != NULL ? sqlite3_column_bytes(g->manifest, 0) / SHA_RAW : 0;
	hashes = xmalloc(nb > 0 ? (size_t)nb * SHA_RAW : 1);
	if (nb > 0)
		memcpy(hashes, p, (size_t)nb * SHA_RAW);
	sqlite3_reset(g->manifest);
	if ((rc = bind_text(st, g->blob, 1, sha, e)) != 0 ||
	    (rc = stmt_step_reset(st, g->blob, "blobs", e)) != 0)
		goto out_free;
	for (int i = 0; i < nb; i++) {
		rc = gc_chunk(st, g, hashes + (size_t)i * SHA_RAW, e);
		if (rc != 0)
			goto out_free;
	}
	rc = 1;
out_free:
	free(hashes);
	return rc;
}

/*
 * Collects every blob of l that nothing names any more (a key may appear
 * more than once). Adds the number deleted to *removed if not NULL.
 */
static int
gc_list(struct store *st, const struct shalist *l, long *removed,
    struct err *e)
{
	struct gc g;
	int rc = 0;

	if (l->n == 0)
		return 0;
	if ((rc = gc_open(st, &g, e)) != 0)
		return rc;
	for (size_t i = 0; i < l->n; i++) {
		if ((rc = gc_blob(st, &g, l->v[i], e)) < 0)
			break;
		if (removed != NULL)
			*removed += rc;
		rc = 0;
	}
	gc_close(&g);
	return rc;
}

/*** Handles ***/

/* Renames blob old to new in every head and history row. */
static int
migrate_rename(struct store *st, sqlite3_stmt *heads, sqlite3_stmt *rows,
    const char *old, const char *new, struct err *e)
{
	int rc;

	if ((rc = bind_text(st, heads, 1, new, e)) != 0 ||
	    (rc = bind_text(st, heads, 2, old, e)) != 0 ||
	    (rc = stmt_step_reset(st, heads, "sandboxes", e)) != 0 ||
	    (rc = bind_text(st, rows, 1, new, e)) != 0 ||
	    (rc = bind_text(st, rows, 2, old, e)) != 0)
		return rc;
	return stmt_step_reset(st, rows, "versions", e);
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
static int
migrate_v1(struct store *st, struct err *e)
{
	sqlite3_stmt *blobs = NULL, *heads = NULL, *rows = NULL, *chk = NULL;
	char old[STORE_SHA_HEX + 1], got[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	struct blob_plan p;
	const void *data;
	int n, rc;

	if ((rc = db_exec(st, MIGRATE_V1_SQL, "migrate", e)) != 0 ||
	    (rc = stmt_prepare(st, "SELECT sha256, data, created_at"
	    " FROM blobs", &blobs, e)) != 0 ||
	    (rc = stmt_prepare(st, "UPDATE sandboxes SET head = ?1"
	    " WHERE head = ?2", &heads, e)) != 0 ||
	    (rc = stmt_prepare(st, "UPDATE versions SET sha256 = ?1"
	    " WHERE sha256 = ?2", &rows, e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(blobs)) == SQLITE_ROW) {
		if ((rc = col_text(blobs, 0, old, sizeof(old), "blobs.sha256",
		    e)) != 0)
			goto out_finalize;
		data = sqlite3_column_blob(blobs, 1);
		n = sqlite3_column_bytes(blobs, 1);
		if (n < 0 || (data == NULL && n > 0)) {
			rc = err_set(e, -EBADMSG, "store: blob %s: damaged row",
			    old);
			goto out_finalize;
		}
		if ((rc = sha256_raw(data, (size_t)n, md, e)) != 0 ||
		    (rc = plan_make(st, data, (size_t)n, NULL, NULL, 0, &p,
		    e)) != 0)
			goto out_finalize;
		hex_of(md, SHA_RAW, got);
		if (strcmp(got, old) != 0)
			memcpy(p.key, old, sizeof(p.key));
		if ((rc = plan_chunks(st, &p, (int64_t)now_ms(), e)) != 0 ||
		    (rc = plan_row(st, "INSERT INTO blobs_v2 (sha256, size,"
		    " chunk_size, chunks, created_at) VALUES (?1, ?2, ?3, ?4,"
		    " ?5)", &p, sqlite3_column_int64(blobs, 2), e)) != 0 ||
		    (rc = migrate_rename(st, heads, rows, old, p.key,
		    e)) != 0) {
			plan_free(&p);
			goto out_finalize;
		}
		plan_free(&p);
	}
	if (rc != SQLITE_DONE) {
		rc = db_fail(st->db, rc, "blobs", e);
		goto out_finalize;
	}
	sqlite3_finalize(blobs);
	blobs = NULL;
	if ((rc = db_exec(st, MIGRATE_V1_END_SQL, "migrate", e)) != 0 ||
	    (rc = stmt_prepare(st, "PRAGMA foreign_key_check", &chk, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(chk);
	if (rc == SQLITE_ROW)
		rc = err_set(e, -EBADMSG, "store: migration: a row of %s names "
		    "a missing %s", sqlite3_column_text(chk, 0),
		    sqlite3_column_text(chk, 2));
	else
		rc = rc == SQLITE_DONE ? 0 : db_fail(st->db, rc, "migrate", e);
out_finalize:
	sqlite3_finalize(blobs);
	sqlite3_finalize(heads);
	sqlite3_finalize(rows);
	sqlite3_finalize(chk);
	return rc;
}

/*
 * Creates the schema in a new file, converts a schema-1 file, or checks
 * the version of a current one, in one write transaction: of several
 * processes opening one file at once, one creates or converts it and the
 * others find it done.
 */
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
	else if (rc == 0 && version == 1)
		rc = migrate_v1(st, e);
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
	st->keep_versions = STORE_KEEP_VERSIONS_DEFAULT;
	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		rc = db_fail(st->db, rc, path, e);
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
	if ((rc = wal_enable(st, e)) != 0 ||
	    (rc = db_exec(st, "PRAGMA synchronous = NORMAL", "synchronous",
	    e)) != 0 ||
	    (rc = schema_ensure(st, e)) != 0 ||
	    (rc = db_exec(st, "PRAGMA foreign_keys = ON", "foreign_keys",
	    e)) != 0)
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

void
store_set_keep_versions(struct store *st, unsigned n)
{
	st->keep_versions = n;
}

/*** Blobs ***/

/* plan_store() of a prepared plan in a transaction of its own. */
static int
blob_put(struct store *st, const struct blob_plan *p,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	int rc;

	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	rc = tx_end(st, plan_store(st, p, e), e);
	if (rc == 0)
		memcpy(sha_hex, p->key, STORE_SHA_HEX + 1);
	return rc;
}

int
store_blob_put(struct store *st, const void *data, size_t len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	return store_blob_put_delta(st, data, len, NULL, NULL, 0, sha_hex, e);
}

int
store_blob_put_delta(struct store *st, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	struct blob_plan p;
	int rc;

	err_clear(e);
	rc = plan_make(st, data, len, base_sha, base_data, base_len, &p, e);
	if (rc != 0)
		return rc;
	rc = blob_put(st, &p, sha_hex, e);
	plan_free(&p);
	return rc;
}

/*
 * Copies blob m's chunks into buf, checking each one's length and hash:
 * a missing or damaged chunk is -EBADMSG naming it.
 */
static int
blob_assemble(struct store *st, const char *sha, const struct manifest *m,
    unsigned char *buf, struct err *e)
{
	char hex[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	sqlite3_stmt *stmt = NULL;
	const void *p;
	int n, rc;

	rc = stmt_prepare(st, "SELECT data FROM chunks WHERE sha256 = ?1",
	    &stmt, e);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t off = (uint64_t)i * m->chunk_size;
		uint64_t cn = m->size - off < m->chunk_size ? m->size - off :
		    m->chunk_size;

		hex_of(m->hashes + i * SHA_RAW, SHA_RAW, hex);
		if ((rc = bind_text(st, stmt, 1, hex, e)) != 0)
			break;
		rc = sqlite3_step(stmt);
		if (rc != SQLITE_ROW) {
			rc = rc == SQLITE_DONE ? err_set(e, -EBADMSG, "store: "
			    "blob %s: chunk %zu (%s) is missing", sha, i, hex) :
			    db_fail(st->db, rc, "chunks", e);
			break;
		}
		p = sqlite3_column_blob(stmt, 0);
		n = sqlite3_column_bytes(stmt, 0);
		if (n < 0 || (uint64_t)n != cn || p == NULL) {
			rc = err_set(e, -EBADMSG, "store: blob %s: chunk %zu: "
			    "%d bytes stored, %llu expected", sha, i, n,
			    (unsigned long long)cn);
			break;
		}
		/*
		 * Hash what was read before anything leaves: a damaged page or
		 * a hand-edited row must not reach a worker as a snapshot.
		 */
		if ((rc = sha256_raw(p, (size_t)n, md, e)) != 0)
			break;
		if (memcmp(md, m->hashes + i * SHA_RAW, SHA_RAW) != 0) {
			rc = err_set(e, -EBADMSG, "store: blob %s: chunk %zu "
			    "does not match its SHA-256", sha, i);
			break;
		}
		memcpy(buf + off, p, (size_t)n);
		sqlite3_reset(stmt);
	}
	sqlite3_finalize(stmt);
	return rc;
}

int
store_blob_get(struct store *st, const char *sha_hex, void **data,
    size_t *len, struct err *e)
{
	struct manifest m = { 0 };
	unsigned char *buf = NULL;
	int rc;

	err_clear(e);
	*data = NULL;
	*len = 0;
	if ((rc = sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	/*
	 * One read transaction: the manifest and its chunks come from one
	 * state of the file, whatever another handle collects meanwhile.
	 */
	if ((rc = db_exec(st, "BEGIN", "begin", e)) != 0)
		return rc;
	if ((rc = manifest_read(st, sha_hex, &m, e)) != 0)
		goto out_end;
	buf = malloc(m.size > 0 ? (size_t)m.size : 1);
	if (buf == NULL) {
		rc = err_set(e, -ENOMEM, "store: blob %s: out of memory",
		    sha_hex);
		goto out_end;
	}
	if ((rc = blob_assemble(st, sha_hex, &m, buf, e)) != 0)
		goto out_end;
	*data = buf;
	*len = (size_t)m.size;
	buf = NULL;
out_end:
	free(buf);
	free(m.hashes);
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
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

long
store_chunk_count(struct store *st, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	long n;
	int rc;

	if ((rc = stmt_prepare(st, "SELECT count(*) FROM chunks", &stmt,
	    e)) != 0)
		return rc;
	rc = sqlite3_step(stmt);
	n = rc == SQLITE_ROW ? (long)sqlite3_column_int64(stmt, 0) :
	    db_fail(st->db, rc, "chunks", e);
	sqlite3_finalize(stmt);
	return n;
}

long
store_debug_chunks_hashed(const struct store *st)
{
	return st->chunks_hashed;
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
store_sandbox_create_blob(struct store *st, const char *tenant,
    const char *id, const void *data, size_t len, const char *labels_json,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	char labels[STORE_LABELS_MAX + 1];
	struct blob_plan p;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0 ||
	    (rc = labels_canon(labels_json, labels, e)) != 0)
		return rc;
	/* Hashing happens here, before the write lock is taken. */
	if ((rc = plan_make(st, data, len, NULL, NULL, 0, &p, e)) != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		goto out_free;
	rc = plan_store(st, &p, e);
	if (rc == 0)
		rc = sandbox_insert(st, tenant, id, p.key, labels, e);
	if ((rc = tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	plan_free(&p);
	return rc;
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
 * than the newest keep_versions (the head's row is the newest, so it
 * stays), then the blobs they named that nothing names any more. Walks
 * keep_versions rows of the primary key and what it deletes, no more.
 */
static int
sandbox_retain(struct store *st, const char *tenant, const char *id,
    struct err *e)
{
	struct shalist dropped = { 0 };
	sqlite3_stmt *stmt = NULL;
	int rc;

	if (st->keep_versions == 0)
		return 0;
	rc = stmt_prepare(st, "DELETE FROM versions WHERE tenant = ?1"
	    " AND id = ?2 AND version < (SELECT version FROM versions"
	    "  WHERE tenant = ?1 AND id = ?2"
	    "  ORDER BY version DESC LIMIT 1 OFFSET ?3)"
	    " RETURNING sha256", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0 ||
	    (rc = bind_i64(st, stmt, 3, (int64_t)st->keep_versions - 1,
	    e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	rc = shalist_collect(st, stmt, &dropped, "versions.sha256", e);
	if (rc == 0)
		rc = gc_list(st, &dropped, NULL, e);
	shalist_free(&dropped);
	return rc;
}

/* The body of store_sandbox_commit(), inside its transaction. */
static int
sandbox_move(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *sha, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = (int64_t)now_ms();
	int rc;

	if ((rc = sandbox_expect(st, tenant, id, from_version, e)) != 0 ||
	    (rc = blob_require(st, sha, e)) != 0)
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
	if ((rc = version_append(st, tenant, id, from_version + 1, sha, now,
	    e)) != 0)
		return rc;
	return sandbox_retain(st, tenant, id, e);
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
store_sandbox_commit_blob(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	struct blob_plan p;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	/* Hashing happens here, before the write lock is taken. */
	rc = plan_make(st, data, len, base_sha, base_data, base_len, &p, e);
	if (rc != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		goto out_free;
	/* A stale or missing sandbox is found before anything is written. */
	rc = sandbox_expect(st, tenant, id, expect_version, e);
	if (rc == 0)
		rc = plan_store(st, &p, e);
	if (rc == 0)
		rc = sandbox_move(st, tenant, id, expect_version, p.key, e);
	if ((rc = tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	plan_free(&p);
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

	rc = stmt_prepare(st, "SELECT head, version FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
		goto out_finalize;
	}
	if (rc != SQLITE_ROW) {
		rc = db_fail(st->db, rc, "sandboxes", e);
		goto out_finalize;
	}
	if ((rc = col_text(stmt, 0, head, STORE_SHA_HEX + 1,
	    "sandboxes.head", e)) != 0)
		goto out_finalize;
	at = (uint64_t)sqlite3_column_int64(stmt, 1);
	if (at != version)
		rc = err_set(e, -ESTALE, "store: sandbox %s/%s: at version "
		    "%llu, not %llu", tenant, id, (unsigned long long)at,
		    (unsigned long long)version);
out_finalize:
	sqlite3_finalize(stmt);
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
	if ((rc = db_exec(st, "BEGIN", "begin", e)) != 0)
		return rc;
	rc = sandbox_head(st, tenant, id, version, head, e);
	if (rc == 0 && (rc = manifest_read(st, head, base, e)) == -EBADMSG) {
		err_clear(e);
		rc = 0;
	}
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	return rc;
}

/*
 * The plan of img (img_len bytes) with pt applied, against base, the
 * manifest of the current head (empty: no base). Chunk i takes the head's
 * hash, unhashed, when all of these hold:
 *   - no block of pt lies in it;
 *   - the head has a chunk i, of the same length (base->chunk_size is
 *     ours): so a chunk past the head's end is hashed;
 *   - it is not the last chunk of a blob whose size changed.
 * Under the caller's contract (the head is img with a patch whose blocks
 * are a subset of pt's) such a chunk is the same bytes as the head's: both
 * are img's bytes, or zeros past img_len, over the same offsets. The last
 * rule is not needed for that (the length test covers a grown or shrunk
 * last chunk), but costs one chunk and keeps a size change away from the
 * contract altogether. Every other chunk is assembled (patch_read()) and
 * hashed. No lock held; p keeps pointers to img and pt.
 */
static int
plan_make_patch(struct store *st, const void *img, size_t img_len,
    const struct patch *pt, const struct manifest *base, struct blob_plan *p,
    struct err *e)
{
	bool have_base = base->n > 0 && base->chunk_size == STORE_CHUNK_BYTES;
	const size_t per_chunk = STORE_CHUNK_BYTES / PATCH_BLOCK;
	unsigned char *buf = NULL;
	bool *touched = NULL;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	if (pt->size > STORE_BLOB_MAX)
		return err_set(e, -EFBIG, "store: patch: size %llu, over %zu",
		    (unsigned long long)pt->size, STORE_BLOB_MAX);
	p->data = img;
	p->data_len = img_len;
	p->patch = pt;
	p->len = (size_t)pt->size;
	p->n = (p->len + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES;
	p->hashes = xcalloc(p->n > 0 ? p->n : 1, SHA_RAW);
	p->reused = xcalloc(p->n > 0 ? p->n : 1, sizeof(bool));
	touched = xcalloc(p->n > 0 ? p->n : 1, sizeof(bool));
	buf = xmalloc(STORE_CHUNK_BYTES);
	/* patch_parse() keeps every block below size, so inside p->n. */
	for (uint32_t i = 0; i < pt->count; i++)
		touched[patch_index(pt, i) / per_chunk] = true;
	for (size_t i = 0; i < p->n; i++) {
		size_t off = i * STORE_CHUNK_BYTES, cn;
		size_t bn = i < base->n && base->size - off < STORE_CHUNK_BYTES ?
		    (size_t)(base->size - off) : STORE_CHUNK_BYTES;
		const unsigned char *c;

		cn = p->len - off < STORE_CHUNK_BYTES ? p->len - off :
		    STORE_CHUNK_BYTES;
		if (have_base && !touched[i] && i < base->n && bn == cn &&
		    !(i == p->n - 1 && p->len != base->size)) {
			memcpy(p->hashes + i * SHA_RAW,
			    base->hashes + i * SHA_RAW, SHA_RAW);
			p->reused[i] = true;
			continue;
		}
		c = plan_chunk(p, i, buf, &cn);
		if ((rc = sha256_raw(c, cn, p->hashes + i * SHA_RAW, e)) != 0)
			goto out_free;
		st->chunks_hashed++;
	}
	rc = manifest_key(p->len, STORE_CHUNK_BYTES, p->hashes, p->n, p->key,
	    e);
out_free:
	free(buf);
	free(touched);
	if (rc != 0)
		plan_free(p);
	return rc;
}

#ifdef STORE_CHECK_PATCH
/*
 * The debug cross-check of the caller's contract: every chunk of the new
 * snapshot assembled and hashed (a pass over the whole image: this is
 * what the contract saves) and compared with the plan. -EINVAL naming the
 * first chunk taken from the head that is not the snapshot's. Not counted
 * in store_debug_chunks_hashed().
 */
static int
plan_check_patch(const struct blob_plan *p, struct err *e)
{
	unsigned char *buf = xmalloc(STORE_CHUNK_BYTES), md[SHA_RAW];
	const unsigned char *c;
	int rc = 0;

	for (size_t i = 0; i < p->n && rc == 0; i++) {
		size_t cn;

		c = plan_chunk(p, i, buf, &cn);
		if ((rc = sha256_raw(c, cn, md, e)) == 0 &&
		    memcmp(md, p->hashes + i * SHA_RAW, SHA_RAW) != 0)
			rc = err_set(e, -EINVAL, "store: patch: chunk %zu has no "
			    "patch block but differs from the head's: the head "
			    "is not the image with a subset of this patch", i);
	}
	free(buf);
	return rc;
}
#else
/* Without STORE_CHECK_PATCH the contract is trusted (see store.h). */
static int
plan_check_patch(const struct blob_plan *p, struct err *e)
{
	(void)p;
	(void)e;
	return 0;
}
#endif

/*
 * Three steps, so that the write lock is held for row writes only:
 *
 * 1. A read transaction reads the head's key at expect_version and its
 *    manifest, together (head_read()).
 * 2. With no lock, the chunks holding patch blocks (and those past the
 *    head's end, and the last one if the size changed) are assembled and
 *    hashed; the rest take the head's hashes (plan_make_patch()).
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
 * its chunks are in place for the whole transaction; plan_chunks() takes
 * its own reference on each before retention runs, so the old head going
 * (keep_versions) cannot take a shared chunk with it. The version alone
 * would not be enough: a sandbox deleted and created again is at version
 * 1 with another head, which is why the head's key is compared too. A
 * reused chunk found missing anyway (a damaged file) is assembled and
 * checked against the head's hash before it is stored (plan_chunks()).
 */
int
store_sandbox_commit_patch(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *img, size_t img_len,
    const void *patch, size_t patch_len, char sha_hex[STORE_SHA_HEX + 1],
    struct err *e)
{
	char head[STORE_SHA_HEX + 1], now_head[STORE_SHA_HEX + 1];
	struct manifest base = { 0 };
	struct blob_plan p;
	struct patch pt;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	if (img == NULL && img_len > 0)
		return err_set(e, -EINVAL, "store: image: NULL with %zu bytes",
		    img_len);
	if (patch == NULL && patch_len > 0)
		return err_set(e, -EINVAL, "store: patch: NULL with %zu bytes",
		    patch_len);
	if ((rc = patch_parse(patch, patch_len, &pt, e)) != 0)
		return rc;
	if ((rc = head_read(st, tenant, id, expect_version, head, &base,
	    e)) != 0)
		goto out_base;
	rc = plan_make_patch(st, img, img_len, &pt, &base, &p, e);
	if (rc != 0)
		goto out_base;
	if ((rc = plan_check_patch(&p, e)) != 0 ||
	    (rc = tx_begin(st, e)) != 0)
		goto out_free;
	/* The CAS: same version and same head as the manifest read. */
	rc = sandbox_head(st, tenant, id, expect_version, now_head, e);
	if (rc == 0 && strcmp(now_head, head) != 0)
		rc = err_set(e, -ESTALE, "store: sandbox %s/%s: head is no "
		    "longer %s (deleted and created again?)", tenant, id, head);
	if (rc == 0)
		rc = plan_store(st, &p, e);
	if (rc == 0)
		rc = sandbox_move(st, tenant, id, expect_version, p.key, e);
	if ((rc = tx_end(st, rc, e)) == 0)
		memcpy(sha_hex, p.key, STORE_SHA_HEX + 1);
out_free:
	plan_free(&p);
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
	struct shalist named = { 0 };
	sqlite3_stmt *stmt = NULL;
	int rc;

	err_clear(e);
	if ((rc = tenant_check(tenant, e)) != 0 ||
	    (rc = id_check("id", id, e)) != 0)
		return rc;
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	/* The blobs it names, to collect once it is gone. */
	rc = stmt_prepare(st, "SELECT head FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2 UNION SELECT sha256 FROM versions"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		goto out_end;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0) {
		sqlite3_finalize(stmt);
		goto out_end;
	}
	if ((rc = shalist_collect(st, stmt, &named, "sandboxes.head",
	    e)) != 0)
		goto out_end;
	/* versions rows go with it: ON DELETE CASCADE. */
	rc = stmt_prepare(st, "DELETE FROM sandboxes"
	    " WHERE tenant = ?1 AND id = ?2", &stmt, e);
	if (rc != 0)
		goto out_end;
	if ((rc = bind_text(st, stmt, 1, tenant, e)) != 0 ||
	    (rc = bind_text(st, stmt, 2, id, e)) != 0) {
		sqlite3_finalize(stmt);
		goto out_end;
	}
	if ((rc = stmt_done(st, stmt, "sandboxes", e)) != 0)
		goto out_end;
	if (sqlite3_changes(st->db) == 0)
		rc = err_set(e, -ENOENT, "store: sandbox %s/%s: not found",
		    tenant, id);
	else
		rc = gc_list(st, &named, NULL, e);
out_end:
	shalist_free(&named);
	return tx_end(st, rc, e);
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
static long
prune_locked(struct store *st, unsigned keep_versions, struct err *e)
{
	struct shalist l = { 0 };
	sqlite3_stmt *stmt = NULL;
	long removed = 0;
	int rc;

	rc = stmt_prepare(st, "DELETE FROM versions WHERE rowid IN"
	    " (SELECT r FROM (SELECT v.rowid AS r, v.version AS version,"
	    "  s.version AS head_version, row_number() OVER"
	    "  (PARTITION BY v.tenant, v.id ORDER BY v.version DESC) AS n"
	    "  FROM versions AS v JOIN sandboxes AS s"
	    "  ON s.tenant = v.tenant AND s.id = v.id)"
	    " WHERE n > ?1 AND version <> head_version) RETURNING sha256",
	    &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = bind_i64(st, stmt, 1, (int64_t)keep_versions, e)) != 0) {
		sqlite3_finalize(stmt);
		return rc;
	}
	if ((rc = shalist_collect(st, stmt, &l, "versions.sha256", e)) != 0)
		goto out_free;
	/*
	 * Blobs nothing names, put long enough ago that no create or commit
	 * of theirs can still be on its way (store_blob_put() callers).
	 */
	rc = stmt_prepare(st, "SELECT sha256 FROM blobs WHERE created_at <= ?1"
	    " AND NOT EXISTS (SELECT 1 FROM sandboxes"
	    "  WHERE sandboxes.head = blobs.sha256)"
	    " AND NOT EXISTS (SELECT 1 FROM versions"
	    "  WHERE versions.sha256 = blobs.sha256)", &stmt, e);
	if (rc != 0)
		goto out_free;
	if ((rc = bind_i64(st, stmt, 1, (int64_t)now_ms() -
	    STORE_PRUNE_GRACE_MS, e)) != 0) {
		sqlite3_finalize(stmt);
		goto out_free;
	}
	if ((rc = shalist_collect(st, stmt, &l, "blobs.sha256", e)) != 0 ||
	    (rc = gc_list(st, &l, &removed, e)) != 0)
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
	if ((rc = tx_begin(st, e)) != 0)
		return rc;
	n = prune_locked(st, keep_versions, e);
	rc = tx_end(st, n < 0 ? (int)n : 0, e);
	if (rc != 0)
		return rc;
	return n > INT_MAX ? INT_MAX : (int)n;
}
