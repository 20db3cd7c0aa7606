/*
 * store_import.c - moving blobs between a local store and another one (the
 * Redis store, rstore.h): manifests as the bytes their key is the hash of,
 * single chunks, which chunks of a manifest are missing, and the import of
 * a blob from the chunks fetched elsewhere.
 *
 * DESIGN
 * What leaves the store is checked as store_blob_get() checks it (the
 * manifest against its key, a chunk against its hash), so a damaged local
 * copy is never uploaded. What comes in is hashed exactly once, in
 * store_blob_import(), before the write lock, and refused whole if a
 * single chunk does not match: the caller does not hash, and the store
 * does not trust it. An import is a put from pieces: the same chunk
 * references and blobs row as store__plan_store(), written in one
 * transaction.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/sql.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "store.h"
#include "store_int.h"

_Static_assert(sizeof(MANIFEST_DOMAIN) + 12 == STORE_MANIFEST_HEAD,
    "manifest head");
_Static_assert(SHA_RAW * 2 == STORE_SHA_HEX, "hash sizes");

/*** Manifests ***/

/* Reads n bytes at p as an unsigned little-endian number. */
static uint64_t
le_get(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int
store_manifest_parse(const void *bytes, size_t len, const char *sha_hex,
    struct store_manifest *m, struct err *e)
{
	const unsigned char *b = bytes;
	unsigned char md[SHA_RAW];
	char key[STORE_SHA_HEX + 1];
	uint64_t size, cs;
	int rc;

	memset(m, 0, sizeof(*m));
	if ((rc = store_sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	if (b == NULL || len < STORE_MANIFEST_HEAD ||
	    len > STORE_MANIFEST_MAX ||
	    memcmp(b, MANIFEST_DOMAIN, sizeof(MANIFEST_DOMAIN)) != 0 ||
	    (len - STORE_MANIFEST_HEAD) % SHA_RAW != 0)
		return err_set(e, -EBADMSG, "store: blob %s: not a manifest "
		    "(%zu bytes)", sha_hex, len);
	size = le_get(b + sizeof(MANIFEST_DOMAIN), 8);
	cs = le_get(b + sizeof(MANIFEST_DOMAIN) + 8, 4);
	if (cs != STORE_CHUNK_BYTES || size > STORE_BLOB_MAX ||
	    (len - STORE_MANIFEST_HEAD) / SHA_RAW !=
	    (size + cs - 1) / cs)
		return err_set(e, -EBADMSG, "store: blob %s: damaged manifest "
		    "(size %llu, chunk size %llu, %zu bytes of hashes)",
		    sha_hex, (unsigned long long)size, (unsigned long long)cs,
		    len - STORE_MANIFEST_HEAD);
	if ((rc = store__sha256_raw(b, len, md, e)) != 0)
		return rc;
	store__hex_of(md, SHA_RAW, key);
	if (strcmp(key, sha_hex) != 0)
		return err_set(e, -EBADMSG, "store: blob %s: manifest does not "
		    "match its key", sha_hex);
	memcpy(m->sha256, key, sizeof(key));
	m->size = size;
	m->n = (len - STORE_MANIFEST_HEAD) / SHA_RAW;
	m->hashes = b + STORE_MANIFEST_HEAD;
	return 0;
}

size_t
store_manifest_chunk_len(const struct store_manifest *m, size_t i)
{
	uint64_t off = (uint64_t)i * STORE_CHUNK_BYTES;

	return m->size - off < STORE_CHUNK_BYTES ? (size_t)(m->size - off) :
	    STORE_CHUNK_BYTES;
}

void
store_manifest_chunk_hex(const struct store_manifest *m, size_t i,
    char hex[STORE_SHA_HEX + 1])
{
	store__hex_of(m->hashes + i * SHA_RAW, SHA_RAW, hex);
}

int
store_blob_manifest(struct store *st, const char *sha_hex, void **bytes,
    size_t *len, struct err *e)
{
	struct manifest m = { 0 };
	unsigned char *b;
	size_t n;
	int rc;

	err_clear(e);
	*bytes = NULL;
	*len = 0;
	if ((rc = store_sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	/* Checks the stored row against the key, as every read does. */
	if ((rc = store__manifest_read(st, sha_hex, &m, e)) != 0)
		return rc;
	if (m.chunk_size != STORE_CHUNK_BYTES) {
		free(m.hashes);
		return err_set(e, -EBADMSG, "store: blob %s: chunk size %u, "
		    "not %d", sha_hex, m.chunk_size, STORE_CHUNK_BYTES);
	}
	n = STORE_MANIFEST_HEAD + m.n * SHA_RAW;
	b = xmalloc(n);
	memcpy(b, MANIFEST_DOMAIN, sizeof(MANIFEST_DOMAIN));
	for (int i = 0; i < 8; i++)
		b[sizeof(MANIFEST_DOMAIN) + i] =
		    (unsigned char)(m.size >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[sizeof(MANIFEST_DOMAIN) + 8 + i] =
		    (unsigned char)(m.chunk_size >> (8 * i));
	if (m.n > 0)
		memcpy(b + STORE_MANIFEST_HEAD, m.hashes, m.n * SHA_RAW);
	free(m.hashes);
	*bytes = b;
	*len = n;
	return 0;
}

/*** Chunks ***/

int
store_chunk_get(struct store *st, const char *hex, void **data, size_t *len,
    struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	unsigned char md[SHA_RAW];
	char got[STORE_SHA_HEX + 1];
	const void *p;
	int n, rc;

	err_clear(e);
	*data = NULL;
	*len = 0;
	if ((rc = store_sha_check("chunk", hex, e)) != 0)
		return rc;
	rc = store__prepare(st,
	    "SELECT data FROM chunks WHERE sha256 = ?1", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, hex, "store", e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? err_set(e, -ENOENT, "store: chunk %s: "
		    "not stored", hex) :
		    sql_fail(e, st->db, rc, "store", "chunks");
		goto out_finalize;
	}
	p = sqlite3_column_blob(stmt, 0);
	n = sqlite3_column_bytes(stmt, 0);
	if (p == NULL || n <= 0 || n > STORE_CHUNK_BYTES) {
		rc = err_set(e, -EBADMSG, "store: chunk %s: %d bytes stored",
		    hex, n);
		goto out_finalize;
	}
	if ((rc = store__sha256_raw(p, (size_t)n, md, e)) != 0)
		goto out_finalize;
	store__hex_of(md, SHA_RAW, got);
	if (strcmp(got, hex) != 0) {
		rc = err_set(e, -EBADMSG, "store: chunk %s: does not match its "
		    "SHA-256", hex);
		goto out_finalize;
	}
	*data = xmalloc((size_t)n);
	memcpy(*data, p, (size_t)n);
	*len = (size_t)n;
out_finalize:
	store__release(st, stmt);
	return rc;
}

/* qsort_r() order of chunk indexes: by hash, then by index. */
static int
index_cmp(const void *a, const void *b, void *arg)
{
	const unsigned char *hashes = arg;
	size_t i = *(const size_t *)a, k = *(const size_t *)b;
	int c = memcmp(hashes + i * SHA_RAW, hashes + k * SHA_RAW, SHA_RAW);

	return c != 0 ? c : (i > k) - (i < k);
}

size_t
store_manifest_distinct(const struct store_manifest *m, bool *first)
{
	size_t *idx, count = 0;

	memset(first, 0, m->n * sizeof(*first));
	if (m->n == 0)
		return 0;
	/* Sorted by hash, then index: each run's first is its lowest index. */
	idx = xcalloc(m->n, sizeof(*idx));
	for (size_t i = 0; i < m->n; i++)
		idx[i] = i;
	qsort_r(idx, m->n, sizeof(*idx), index_cmp,
	    (void *)(uintptr_t)m->hashes);
	for (size_t k = 0; k < m->n; k++) {
		if (k > 0 && memcmp(m->hashes + idx[k] * SHA_RAW,
		    m->hashes + idx[k - 1] * SHA_RAW, SHA_RAW) == 0)
			continue;
		first[idx[k]] = true;
		count++;
	}
	free(idx);
	return count;
}

long
store_chunks_missing(struct store *st, const struct store_manifest *m,
    bool *missing, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	char hex[STORE_SHA_HEX + 1];
	long count = 0;
	int rc;

	err_clear(e);
	/* A chunk listed twice (a run of zero pages) is looked up once. */
	store_manifest_distinct(m, missing);
	rc = store__prepare(st, "SELECT 1 FROM chunks WHERE sha256 = ?1",
	    &stmt, e);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < m->n; i++) {
		if (!missing[i])
			continue;
		store_manifest_chunk_hex(m, i, hex);
		if ((rc = sql_bind_text(stmt, 1, hex, "store", e)) != 0)
			goto out_finalize;
		rc = sqlite3_step(stmt);
		sqlite3_reset(stmt);
		if (rc == SQLITE_ROW) {
			missing[i] = false;
		} else if (rc == SQLITE_DONE) {
			count++;
		} else {
			rc = sql_fail(e, st->db, rc, "store", "chunks");
			goto out_finalize;
		}
	}
	rc = 0;
out_finalize:
	store__release(st, stmt);
	return rc != 0 ? rc : count;
}

/*** Imports ***/

/*
 * The import's write, in the caller's transaction: a reference on each
 * chunk listed, storing the given chunks not stored yet, then the blobs
 * row. As store__plan_chunks() and store__plan_row() do for a put.
 */
static int
import_locked(struct store *st, const struct store_manifest *m,
    const void *const *chunks, struct err *e)
{
	sqlite3_stmt *ref = NULL, *chunk = NULL, *newref = NULL, *row = NULL;
	int64_t now = (int64_t)now_ms();
	char hex[STORE_SHA_HEX + 1];
	int rc = store_blob_exists(st, m->sha256, e);

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if ((rc = store__prepare(st,
	    "UPDATE chunk_refs SET refs = refs + 1 WHERE sha256 = ?1", &ref, e)) != 0 ||
	    (rc = store__prepare(st, "INSERT INTO chunks (sha256, data,"
	    " created_at) VALUES (?1, ?2, ?3) ON CONFLICT (sha256) DO NOTHING",
	    &chunk, e)) != 0 ||
	    (rc = store__prepare(st,
	    "INSERT INTO chunk_refs (sha256, refs) VALUES (?1, 1)", &newref, e)) != 0 ||
	    (rc = sql_bind_i64(chunk, 3, now, "store", e)) != 0)
		goto out_finalize;
	for (size_t i = 0; i < m->n; i++) {
		store_manifest_chunk_hex(m, i, hex);
		if ((rc = sql_bind_text(ref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_step_reset(ref, "store", "chunk_refs",
		    e)) != 0)
			goto out_finalize;
		if (sqlite3_changes(st->db) == 1)
			continue;
		/* Not stored: the caller must have sent it. */
		if (chunks[i] == NULL) {
			rc = err_set(e, -ENOENT, "store: blob %s: chunk %zu "
			    "(%s) is neither stored nor given", m->sha256, i,
			    hex);
			goto out_finalize;
		}
		if ((rc = sql_bind_text(chunk, 1, hex, "store", e)) != 0 ||
		    (rc = sql_bind_blob(chunk, 2, chunks[i],
		    store_manifest_chunk_len(m, i), "store", e)) != 0 ||
		    (rc = sql_step_reset(chunk, "store", "chunks",
		    e)) != 0 ||
		    (rc = sql_bind_text(newref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_step_reset(newref, "store", "chunk_refs",
		    e)) != 0)
			goto out_finalize;
	}
	if ((rc = store__prepare(st, "INSERT INTO blobs (sha256, size,"
	    " chunk_size, chunks, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
	    &row, e)) != 0)
		goto out_finalize;
	if ((rc = sql_bind_text(row, 1, m->sha256, "store", e)) != 0 ||
	    (rc = sql_bind_i64(row, 2, (int64_t)m->size, "store", e)) != 0 ||
	    (rc = sql_bind_i64(row, 3, STORE_CHUNK_BYTES, "store", e)) != 0 ||
	    (rc = sql_bind_blob(row, 4, m->hashes, m->n * SHA_RAW, "store",
	    e)) != 0 ||
	    (rc = sql_bind_i64(row, 5, now, "store", e)) != 0)
		goto out_finalize;
	rc = store__step_release(st, row, "blobs", e);
	row = NULL;
out_finalize:
	store__release(st, ref);
	store__release(st, chunk);
	store__release(st, newref);
	store__release(st, row);
	return rc;
}

int
store_blob_import(struct store *st, const struct store_manifest *m,
    const void *const *chunks, struct err *e)
{
	unsigned char md[SHA_RAW];
	char hex[STORE_SHA_HEX + 1];
	int rc;

	err_clear(e);
	if ((rc = store_sha_check("sha256", m->sha256, e)) != 0)
		return rc;
	/* Every byte that comes in is hashed here, before the lock. */
	for (size_t i = 0; i < m->n; i++) {
		if (chunks[i] == NULL)
			continue;
		if ((rc = store__sha256_raw(chunks[i],
		    store_manifest_chunk_len(m, i), md, e)) != 0)
			return rc;
		st->chunks_hashed++;
		if (memcmp(md, m->hashes + i * SHA_RAW, SHA_RAW) != 0) {
			store_manifest_chunk_hex(m, i, hex);
			return err_set(e, -EBADMSG, "store: blob %s: chunk %zu "
			    "(%s) does not match its SHA-256", m->sha256, i,
			    hex);
		}
	}
	if ((rc = store__begin(st, e)) != 0)
		return rc;
	return store__tx_end(st, import_locked(st, m, chunks, e), e);
}
