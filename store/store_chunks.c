/*
 * store_chunks.c - the blobs of the snapshot store: content-addressed
 * chunks under a manifest key, the plans that cut a blob into them, puts,
 * reads and collection. store.c calls these inside its transactions for
 * the sandbox calls; store_int.h is what they share.
 *
 * DESIGN
 * A put is two steps. store__plan_make() cuts the bytes into chunks and
 * hashes them (or takes a hash from the base's manifest where the bytes
 * are equal) with no lock held; store__plan_store() then writes, inside
 * the caller's transaction, only what is new: a chunk already stored gets
 * refs + 1 in chunk_refs. Collection (gc_blob()) is the reverse and runs
 * in the same transaction as whatever dropped a blob's last name. With the
 * _blob sandbox calls a blob is named in the transaction that stores it
 * and deleted in the one that stops naming it, so the two never
 * interleave. store__plan_make_patch() is the plan of an image with a
 * patch applied, for store_sandbox_commit_patch(): it hashes only the
 * chunks the patch touches.
 *
 * Sections: Chunks and manifests, Plans from an image and a patch,
 * Collection, Blobs, What a tenant stores.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../common/sql.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../agentfs/patch.h"
#include "store.h"
#include "store_int.h"

#define CHUNK_SIZE_MAX (16 * 1024 * 1024)	/* largest chunk_size read */

/* A snapshot the codec accepts must fit the store, up to SQLite's limit. */
_Static_assert(STORE_BLOB_MAX <= AGENTFS_BLOB_MAX, "store blob bound");
_Static_assert(STORE_CHUNK_BYTES <= CHUNK_SIZE_MAX, "chunk bound");
/* A patch block lies in exactly one chunk, and a patched image fits. */
_Static_assert(STORE_CHUNK_BYTES % PATCH_BLOCK == 0, "patch block bound");
_Static_assert(PATCH_SIZE_MAX <= STORE_BLOB_MAX, "patch size bound");
/* A blob's key is the one clients compute (proto/snapkey.h). */
_Static_assert(STORE_CHUNK_BYTES == SNAPKEY_CHUNK_BYTES, "key chunking");
_Static_assert(SHA_RAW == SNAPKEY_RAW && STORE_SHA_HEX == SNAPKEY_HEX, "key size");

/*** Chunks and manifests ***/

/* The blob key (proto/snapkey.h), named in the store's messages. */
static int
manifest_key(uint64_t size, uint32_t chunk_size, const unsigned char *hashes,
    size_t n, char key[STORE_SHA_HEX + 1], struct err *e)
{
	if (snapkey_manifest(size, chunk_size, hashes, n, key) != 0)
		return err_set(e, -EIO, "store: SHA-256 failed");
	return 0;
}

/*
 * Reads blob sha's manifest into *m (m->hashes is the caller's to free)
 * and checks it: n chunks of chunk_size cover size exactly, and the whole
 * hashes to sha. -ENOENT if no such blob; -EBADMSG, m empty, if damaged.
 */
int
store__manifest_read(struct store *st, const char *sha, struct manifest *m,
    struct err *e)
{
	char key[STORE_SHA_HEX + 1];
	sqlite3_stmt *stmt = NULL;
	int64_t size, cs;
	const void *p;
	int nb, rc;

	memset(m, 0, sizeof(*m));
	rc = store__prepare(st,
	    "SELECT size, chunk_size, chunks FROM blobs WHERE sha256 = ?1",
	    &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, sha, "store", e)) != 0)
		goto out_finalize;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_DONE) {
		rc = err_set(e, -ENOENT, "store: blob %s: not stored", sha);
		goto out_finalize;
	}
	if (rc != SQLITE_ROW) {
		rc = sql_fail(e, st->db, rc, "store", "blobs");
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
	store__release(st, stmt);
	return rc;
}

void
store__plan_free(struct blob_plan *p)
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
 * is hashed. Reads only (no lock held); the caller frees p (store__plan_free()).
 */
int
store__plan_make(struct store *st, const void *data, size_t len,
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
	if (base_sha != NULL && (rc = store_sha_check("base_sha", base_sha,
	    e)) != 0)
		return rc;
	if (base_sha != NULL && (b != NULL || base_len == 0)) {
		rc = store__manifest_read(st, base_sha, &base, e);
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
		} else if ((rc = store__sha256_raw(p->data + off, cn,
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
		store__plan_free(p);
	return rc;
}

/* The references a commit owes (store__plan_store(), store__net_flush()). */
/* One distinct chunk a plan reuses: its index in the plan, what is owed. */
struct owed {
	const unsigned char *hash;	/* into the plan's manifest */
	size_t idx;			/* a chunk of the plan with this hash */
	unsigned n;			/* references owed */
};

struct refnet {
	const struct blob_plan *p;	/* not owned */
	struct owed *v;			/* sorted by hash, distinct */
	size_t n;
};

/*
 * Takes one reference on each chunk of p, storing the chunks not stored
 * yet. A chunk whose hash came from the base but which is no longer stored
 * (the base was collected since store__plan_make()) is hashed now: it must match,
 * or base_data was not the base's bytes (-EINVAL). With an image + patch
 * that cannot happen (see store_sandbox_commit_patch()) short of a
 * damaged file, and the same check stands. In a transaction.
 */
int
store__plan_chunks(struct store *st, const struct blob_plan *p, int64_t now,
    struct err *e)
{
	sqlite3_stmt *ref = NULL, *chunk = NULL, *newref = NULL;
	unsigned char *buf = p->patch != NULL ? xmalloc(STORE_CHUNK_BYTES) :
	    NULL;
	char hex[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	int rc;

	if ((rc = store__prepare(st,
	    "UPDATE chunk_refs SET refs = refs + 1 WHERE sha256 = ?1", &ref, e)) != 0 ||
	    (rc = store__prepare(st, "INSERT INTO chunks (sha256, data,"
	    " created_at) VALUES (?1, ?2, ?3) ON CONFLICT (sha256) DO NOTHING",
	    &chunk, e)) != 0 ||
	    (rc = store__prepare(st,
	    "INSERT INTO chunk_refs (sha256, refs) VALUES (?1, 1)", &newref, e)) != 0 ||
	    (rc = sql_bind_i64(chunk, 3, now, "store", e)) != 0)
		goto out_finalize;
	for (size_t i = 0; i < p->n; i++) {
		const unsigned char *h = p->hashes + i * SHA_RAW, *c;
		size_t cn;

		/* Owed, written by store__net_flush(). */
		if (p->reused[i] && st->net != NULL && st->net->p == p)
			continue;
		store__hex_of(h, SHA_RAW, hex);
		if ((rc = sql_bind_text(ref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_step_reset(ref, "store", "chunk_refs",
		    e)) != 0)
			goto out_finalize;
		if (sqlite3_changes(st->db) == 1)
			continue;
		c = plan_chunk(p, i, buf, &cn);
		if (p->reused[i]) {
			if ((rc = store__sha256_raw(c, cn, md, e)) != 0)
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
		if ((rc = sql_bind_text(chunk, 1, hex, "store", e)) != 0 ||
		    (rc = sql_bind_blob(chunk, 2, c, cn, "store", e)) != 0 ||
		    (rc = sql_step_reset(chunk, "store", "chunks",
		    e)) != 0 ||
		    (rc = sql_bind_text(newref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_step_reset(newref, "store", "chunk_refs",
		    e)) != 0)
			goto out_finalize;
	}
out_finalize:
	store__release(st, ref);
	store__release(st, chunk);
	store__release(st, newref);
	free(buf);
	return rc;
}

/* Inserts p's blobs row, through sql (blobs, or blobs_v2 while migrating). */
int
store__plan_row(struct store *st, const char *sql, const struct blob_plan *p,
    int64_t created_at, struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	if ((rc = store__prepare(st, sql, &stmt, e)) != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, p->key, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 2, (int64_t)p->len, "store", e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 3, STORE_CHUNK_BYTES, "store", e)) != 0 ||
	    (rc = sql_bind_blob(stmt, 4, p->hashes, p->n * SHA_RAW, "store",
	    e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 5, created_at, "store", e)) != 0) {
		store__release(st, stmt);
		return rc;
	}
	return store__step_release(st, stmt, "blobs", e);
}

/*
 * Stores the blob p describes, in the caller's write transaction: nothing
 * when its key is stored already (blobs are immutable), else its new
 * chunks, a reference on each chunk and the manifest row.
 */
/*** Deferred references ***/

static int
owed_cmp(const void *a, const void *b)
{
	return memcmp(((const struct owed *)a)->hash,
	    ((const struct owed *)b)->hash, SHA_RAW);
}

/* st->net: one entry per distinct hash of p's reused chunks. */
static void
net_build(struct store *st, const struct blob_plan *p)
{
	struct refnet *net = xcalloc(1, sizeof(*net));
	size_t k = 0;

	net->p = p;
	net->v = xcalloc(p->n > 0 ? p->n : 1, sizeof(*net->v));
	for (size_t i = 0; i < p->n; i++)
		if (p->reused[i])
			net->v[net->n++] = (struct owed){
			    .hash = p->hashes + i * SHA_RAW, .idx = i, .n = 1 };
	if (net->n > 1)
		qsort(net->v, net->n, sizeof(*net->v), owed_cmp);
	for (size_t i = 0; i < net->n; i++) {
		if (k > 0 && memcmp(net->v[k - 1].hash, net->v[i].hash,
		    SHA_RAW) == 0)
			net->v[k - 1].n++;
		else
			net->v[k++] = net->v[i];
	}
	net->n = k;
	st->net = net;
}

/* Cancels a drop of h against an owed reference: true if there was one. */
static bool
net_take(struct store *st, const unsigned char *h)
{
	struct owed key = { .hash = h }, *o;

	if (st->net == NULL || st->net->n == 0)
		return false;
	o = bsearch(&key, st->net->v, st->net->n, sizeof(key), owed_cmp);
	if (o == NULL || o->n == 0)
		return false;
	o->n--;
	return true;
}

void
store__net_end(struct store *st)
{
	if (st->net == NULL)
		return;
	free(st->net->v);
	free(st->net);
	st->net = NULL;
}

int
store__net_flush(struct store *st, struct err *e)
{
	sqlite3_stmt *ref = NULL, *chunk = NULL, *newref = NULL;
	const struct blob_plan *p;
	unsigned char *buf = NULL;
	char hex[STORE_SHA_HEX + 1];
	unsigned char md[SHA_RAW];
	int rc;

	if (st->net == NULL)
		return 0;
	p = st->net->p;
	if ((rc = store__prepare(st, "UPDATE chunk_refs SET refs = refs + ?2"
	    " WHERE sha256 = ?1", &ref, e)) != 0 ||
	    (rc = store__prepare(st, "INSERT INTO chunks (sha256, data,"
	    " created_at) VALUES (?1, ?2, ?3) ON CONFLICT (sha256) DO NOTHING",
	    &chunk, e)) != 0 ||
	    (rc = store__prepare(st, "INSERT INTO chunk_refs (sha256, refs)"
	    " VALUES (?1, ?2)", &newref, e)) != 0 ||
	    (rc = sql_bind_i64(chunk, 3, (int64_t)now_ms(), "store", e)) != 0)
		goto out;
	for (size_t i = 0; i < st->net->n; i++) {
		const struct owed *o = &st->net->v[i];
		const unsigned char *c;
		size_t cn;

		if (o->n == 0)
			continue;
		store__hex_of(o->hash, SHA_RAW, hex);
		if ((rc = sql_bind_text(ref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_bind_i64(ref, 2, o->n, "store", e)) != 0 ||
		    (rc = sql_step_reset(ref, "store", "chunk_refs", e)) != 0)
			goto out;
		if (sqlite3_changes(st->db) == 1)
			continue;
		/* Gone from a damaged file: stored again, checked first. */
		if (buf == NULL && p->patch != NULL)
			buf = xmalloc(STORE_CHUNK_BYTES);
		c = plan_chunk(p, o->idx, buf, &cn);
		if ((rc = store__sha256_raw(c, cn, md, e)) != 0)
			goto out;
		st->chunks_hashed++;
		if (memcmp(md, o->hash, SHA_RAW) != 0) {
			rc = err_set(e, -EINVAL, p->patch == NULL ?
			    "store: base_data: not the bytes of the base blob "
			    "(chunk %zu)" : "store: patch: the head is not the "
			    "image with a subset of this patch (chunk %zu)", o->idx);
			goto out;
		}
		if ((rc = sql_bind_text(chunk, 1, hex, "store", e)) != 0 ||
		    (rc = sql_bind_blob(chunk, 2, c, cn, "store", e)) != 0 ||
		    (rc = sql_step_reset(chunk, "store", "chunks", e)) != 0 ||
		    (rc = sql_bind_text(newref, 1, hex, "store", e)) != 0 ||
		    (rc = sql_bind_i64(newref, 2, o->n, "store", e)) != 0 ||
		    (rc = sql_step_reset(newref, "store", "chunk_refs", e)) != 0)
			goto out;
	}
out:
	store__release(st, ref);
	store__release(st, chunk);
	store__release(st, newref);
	free(buf);
	store__net_end(st);
	return rc;
}

int
store__plan_store(struct store *st, const struct blob_plan *p, struct err *e)
{
	int64_t now = (int64_t)now_ms();
	int rc = store_blob_exists(st, p->key, e);

	if (rc != 0)
		return rc < 0 ? rc : 0;
	if (st->defer_refs && st->net == NULL)
		net_build(st, p);
	if ((rc = store__plan_chunks(st, p, now, e)) != 0)
		return rc;
	return store__plan_row(st,
	    "INSERT INTO blobs (sha256, size, chunk_size,"
	    " chunks, created_at) VALUES (?1, ?2, ?3, ?4, ?5)", p, now, e);
}

/*** Plans from an image and a patch ***/

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
int
store__plan_make_patch(struct store *st, const void *img, size_t img_len,
    const struct patch *pt, const struct patch *prev, const struct manifest *base,
    struct blob_plan *p, struct err *e)
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
	/*
	 * patch_parse() keeps every block below size, so inside p->n. A
	 * block the head's own patch holds with the same bytes is the head's:
	 * a worker's cumulative patch re-sends every block since its image,
	 * and only this commit's new or rewritten ones change a chunk.
	 */
	for (uint32_t i = 0; i < pt->count; i++) {
		uint32_t idx = patch_index(pt, i);
		const unsigned char *was = prev != NULL ? patch_find(prev, idx) : NULL;

		if (was == NULL || memcmp(was, patch_block(pt, i), PATCH_BLOCK) != 0)
			touched[idx / per_chunk] = true;
	}
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
		if ((rc = store__sha256_raw(c, cn, p->hashes + i * SHA_RAW,
		    e)) != 0)
			goto out_free;
		st->chunks_hashed++;
	}
	rc = manifest_key(p->len, STORE_CHUNK_BYTES, p->hashes, p->n, p->key,
	    e);
out_free:
	free(buf);
	free(touched);
	if (rc != 0)
		store__plan_free(p);
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
int
store__plan_check_patch(const struct blob_plan *p, struct err *e)
{
	unsigned char *buf = xmalloc(STORE_CHUNK_BYTES), md[SHA_RAW];
	const unsigned char *c;
	int rc = 0;

	for (size_t i = 0; i < p->n && rc == 0; i++) {
		size_t cn;

		c = plan_chunk(p, i, buf, &cn);
		if ((rc = store__sha256_raw(c, cn, md, e)) == 0 &&
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
int
store__plan_check_patch(const struct blob_plan *p, struct err *e)
{
	(void)p;
	(void)e;
	return 0;
}
#endif

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
gc_close(struct store *st, struct gc *g)
{
	store__release(st, g->named);
	store__release(st, g->manifest);
	store__release(st, g->blob);
	store__release(st, g->unref);
	store__release(st, g->ref);
	store__release(st, g->chunk);
	memset(g, 0, sizeof(*g));
}

static int
gc_open(struct store *st, struct gc *g, struct err *e)
{
	int rc;

	memset(g, 0, sizeof(*g));
	/* Both lookups use an index: sandboxes_head, versions_sha256. */
	if ((rc = store__prepare(st,
	    "SELECT EXISTS (SELECT 1 FROM sandboxes"
	    " WHERE head = ?1) OR EXISTS (SELECT 1 FROM versions"
	    " WHERE sha256 = ?1)", &g->named, e)) != 0 ||
	    (rc = store__prepare(st,
	    "SELECT chunks FROM blobs WHERE sha256 = ?1", &g->manifest, e)) != 0 ||
	    (rc = store__prepare(st, "DELETE FROM blobs WHERE sha256 = ?1",
	    &g->blob, e)) != 0 ||
	    (rc = store__prepare(st,
	    "UPDATE chunk_refs SET refs = refs - 1"
	    " WHERE sha256 = ?1 AND refs > 1", &g->unref, e)) != 0 ||
	    (rc = store__prepare(st,
	    "DELETE FROM chunk_refs WHERE sha256 = ?1", &g->ref,
	    e)) != 0 ||
	    (rc = store__prepare(st,
	    "DELETE FROM chunks WHERE sha256 = ?1", &g->chunk,
	    e)) != 0)
		gc_close(st, g);
	return rc;
}

/* Drops one reference on a chunk; the last one deletes it. */
static int
gc_chunk(struct store *st, struct gc *g, const unsigned char *h,
    struct err *e)
{
	char hex[STORE_SHA_HEX + 1];
	int rc;

	/* A reference the commit in hand owes: neither is written. */
	if (net_take(st, h))
		return 0;
	store__hex_of(h, SHA_RAW, hex);
	if ((rc = sql_bind_text(g->unref, 1, hex, "store", e)) != 0 ||
	    (rc = sql_step_reset(g->unref, "store", "chunk_refs", e)) != 0)
		return rc;
	if (sqlite3_changes(st->db) == 1)
		return 0;
	/* The count first: it references the chunk. */
	if ((rc = sql_bind_text(g->ref, 1, hex, "store", e)) != 0 ||
	    (rc = sql_step_reset(g->ref, "store", "chunk_refs", e)) != 0 ||
	    (rc = sql_bind_text(g->chunk, 1, hex, "store", e)) != 0)
		return rc;
	return sql_step_reset(g->chunk, "store", "chunks", e);
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

	if ((rc = sql_bind_text(g->named, 1, sha, "store", e)) != 0)
		return rc;
	rc = sqlite3_step(g->named);
	named = rc == SQLITE_ROW ? sqlite3_column_int(g->named, 0) : -1;
	sqlite3_reset(g->named);
	if (named < 0)
		return sql_fail(e, st->db, rc, "store", "blobs");
	if (named)
		return 0;
	if ((rc = sql_bind_text(g->manifest, 1, sha, "store", e)) != 0)
		return rc;
	rc = sqlite3_step(g->manifest);
	if (rc != SQLITE_ROW) {
		sqlite3_reset(g->manifest);
		return rc == SQLITE_DONE ? 0 : sql_fail(e, st->db, rc,
		    "store", "blobs");
	}
	/* A damaged manifest still gives back every whole hash it holds. */
	p = sqlite3_column_blob(g->manifest, 0);
	nb = p != NULL ? sqlite3_column_bytes(g->manifest, 0) / SHA_RAW : 0;
	hashes = xmalloc(nb > 0 ? (size_t)nb * SHA_RAW : 1);
	if (nb > 0)
		memcpy(hashes, p, (size_t)nb * SHA_RAW);
	sqlite3_reset(g->manifest);
	if ((rc = sql_bind_text(g->blob, 1, sha, "store", e)) != 0 ||
	    (rc = sql_step_reset(g->blob, "store", "blobs", e)) != 0)
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
int
store__gc_list(struct store *st, const struct shalist *l, long *removed,
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
	gc_close(st, &g);
	return rc;
}

/*** Blobs ***/

/* store__plan_store() of a prepared plan in a transaction of its own. */
static int
blob_put(struct store *st, const struct blob_plan *p,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e)
{
	int rc;

	if ((rc = store__begin(st, e)) != 0)
		return rc;
	rc = store__tx_end(st, store__plan_store(st, p, e), e);
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
	rc = store__plan_make(st, data, len, base_sha, base_data, base_len, &p,
	    e);
	if (rc != 0)
		return rc;
	rc = blob_put(st, &p, sha_hex, e);
	store__plan_free(&p);
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

	rc = store__prepare(st,
	    "SELECT data FROM chunks WHERE sha256 = ?1", &stmt, e);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t off = (uint64_t)i * m->chunk_size;
		uint64_t cn = m->size - off < m->chunk_size ? m->size - off :
		    m->chunk_size;

		store__hex_of(m->hashes + i * SHA_RAW, SHA_RAW, hex);
		if ((rc = sql_bind_text(stmt, 1, hex, "store", e)) != 0)
			break;
		rc = sqlite3_step(stmt);
		if (rc != SQLITE_ROW) {
			rc = rc == SQLITE_DONE ? err_set(e, -EBADMSG, "store: "
			    "blob %s: chunk %zu (%s) is missing", sha, i, hex) :
			    sql_fail(e, st->db, rc, "store", "chunks");
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
		if ((rc = store__sha256_raw(p, (size_t)n, md, e)) != 0)
			break;
		if (memcmp(md, m->hashes + i * SHA_RAW, SHA_RAW) != 0) {
			rc = err_set(e, -EBADMSG, "store: blob %s: chunk %zu "
			    "does not match its SHA-256", sha, i);
			break;
		}
		memcpy(buf + off, p, (size_t)n);
		sqlite3_reset(stmt);
	}
	store__release(st, stmt);
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
	if ((rc = store_sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	/*
	 * One read transaction: the manifest and its chunks come from one
	 * state of the file, whatever another handle collects meanwhile.
	 */
	if ((rc = sql_exec(st->db, "BEGIN", "store", "begin", e)) != 0)
		return rc;
	if ((rc = store__manifest_read(st, sha_hex, &m, e)) != 0)
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

	if ((rc = store_sha_check("sha256", sha_hex, e)) != 0)
		return rc;
	rc = store__prepare(st, "SELECT size FROM blobs WHERE sha256 = ?1",
	    &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, sha_hex, "store", e)) == 0) {
		int s = sqlite3_step(stmt);

		if (s == SQLITE_ROW)
			rc = sqlite3_column_int64(stmt, 0);
		else if (s == SQLITE_DONE)
			rc = err_set(e, -ENOENT, "store: no blob %s", sha_hex);
		else
			rc = sql_fail(e, st->db, s, "store", "blobs");
	}
	store__release(st, stmt);
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
	int64_t n;
	int rc;

	rc = sql_query_i64(st->db, "SELECT count(*) FROM blobs", &n, "store",
	    "blobs", e);
	return rc != 0 ? rc : (long)n;
}

long
store_chunk_count(struct store *st, struct err *e)
{
	int64_t n;
	int rc;

	rc = sql_query_i64(st->db, "SELECT count(*) FROM chunks", &n, "store",
	    "chunks", e);
	return rc != 0 ? rc : (long)n;
}

long
store_debug_chunks_hashed(const struct store *st)
{
	return st->chunks_hashed;
}

/*** What a tenant stores ***/

/*
 * A set of raw chunk hashes: open addressing on the hash's first 8 bytes
 * (SHA-256 is uniform), kept at most half full.
 */
struct chunkset {
	unsigned char (*v)[SHA_RAW];	/* slots; all zeros is empty */
	size_t n;			/* hashes held */
	size_t cap;			/* slots, a power of two */
};

static size_t
chunkset_slot(const struct chunkset *s, const unsigned char *h)
{
	uint64_t x;
	size_t i;

	memcpy(&x, h, sizeof(x));
	for (i = (size_t)x & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		static const unsigned char zero[SHA_RAW];

		if (memcmp(s->v[i], zero, SHA_RAW) == 0 ||
		    memcmp(s->v[i], h, SHA_RAW) == 0)
			return i;
	}
}

/* Adds h; true when it was not there yet. The all-zero hash (never a
 * SHA-256 in practice) is counted every time, never stored. */
static bool
chunkset_add(struct chunkset *s, const unsigned char *h)
{
	static const unsigned char zero[SHA_RAW];
	size_t i;

	if (memcmp(h, zero, SHA_RAW) == 0)
		return true;
	if (2 * (s->n + 1) > s->cap) {
		struct chunkset g = { .cap = s->cap ? 2 * s->cap : 1024 };

		g.v = xcalloc(g.cap, SHA_RAW);
		for (size_t k = 0; k < s->cap; k++)
			if (memcmp(s->v[k], zero, SHA_RAW) != 0)
				memcpy(g.v[chunkset_slot(&g, s->v[k])], s->v[k], SHA_RAW);
		g.n = s->n;
		free(s->v);
		*s = g;
	}
	i = chunkset_slot(s, h);
	if (memcmp(s->v[i], h, SHA_RAW) == 0)
		return false;
	memcpy(s->v[i], h, SHA_RAW);
	s->n++;
	return true;
}

/*
 * What the tenant's kept versions take in the store: every blob that one
 * of its heads or history rows names, once, as its manifest (the manifest
 * head and 32 bytes a chunk) and the distinct chunks those manifests list,
 * each once whatever number of blobs or times lists it. Chunks shared
 * with another tenant's blobs count here too: each tenant is charged what
 * its own versions name. Reads manifests only (no chunk data), in the
 * caller's transaction or its own statement's snapshot.
 */
int
store__tenant_stored(struct store *st, const char *tenant, uint64_t *bytes,
    struct err *e)
{
	struct chunkset set = { 0 };
	sqlite3_stmt *stmt = NULL;
	uint64_t total = 0;
	int rc;

	*bytes = 0;
	rc = store__prepare(st, "SELECT size, chunk_size, chunks FROM blobs"
	    " WHERE sha256 IN (SELECT head FROM sandboxes WHERE tenant = ?1"
	    "  UNION SELECT sha256 FROM versions WHERE tenant = ?1)", &stmt, e);
	if (rc != 0)
		return rc;
	if ((rc = sql_bind_text(stmt, 1, tenant, "store", e)) != 0)
		goto out_finalize;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		int64_t size = sqlite3_column_int64(stmt, 0);
		int64_t cs = sqlite3_column_int64(stmt, 1);
		const unsigned char *h = sqlite3_column_blob(stmt, 2);
		int nb = sqlite3_column_bytes(stmt, 2);
		size_t n = nb > 0 ? (size_t)nb / SHA_RAW : 0;

		if (size < 0 || cs < 1 || nb < 0 || nb % SHA_RAW != 0 ||
		    (h == NULL && nb > 0) ||
		    n != (size_t)((size + cs - 1) / cs)) {
			rc = err_set(e, -EBADMSG, "store: tenant %s: a damaged "
			    "manifest (size %lld, chunk size %lld)", tenant,
			    (long long)size, (long long)cs);
			goto out_finalize;
		}
		total += STORE_MANIFEST_HEAD + (uint64_t)nb;
		for (size_t i = 0; i < n; i++)
			if (chunkset_add(&set, h + i * SHA_RAW))
				total += i + 1 < n ? (uint64_t)cs :
				    (uint64_t)size - (uint64_t)cs * i;
	}
	if (rc != SQLITE_DONE) {
		rc = sql_fail(e, st->db, rc, "store", "blobs");
		goto out_finalize;
	}
	rc = 0;
	*bytes = total;
out_finalize:
	store__release(st, stmt);
	free(set.v);
	return rc;
}
