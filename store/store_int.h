/*
 * store_int.h - what the files of the snapshot store share, and nothing
 * else sees: the handle, the blob plans and collection (SQLite calls go
 * through ../common/sql.h, with "store" as the messages' prefix).
 * store.c holds handles, sandboxes and retention; store_chunks.c chunks,
 * manifests, plans, puts and collection; store_migrate.c the schema 1 -> 2
 * conversion; store_sql.c the handle's kept statements. store.h is the public API and does not change with these.
 */
#ifndef SANDQ_STORE_INT_H
#define SANDQ_STORE_INT_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../common/sql.h"
#include "../proto/snapkey.h"
#include "store.h"

#define SHA_RAW 32			/* bytes of a raw SHA-256 */
#define MANIFEST_DOMAIN SNAPKEY_DOMAIN	/* the key's, hashed with its NUL */

struct patch;

struct refnet;

struct store {
	sqlite3 *db;		/* the connection to dir/store.db */
	struct sql_cache stmts;	/* kept for the handle's life (store_sql.c) */
	unsigned keep_versions;	/* history rows per sandbox; 0: all */
	uint64_t quota;		/* store_set_quota(): bytes; 0: none */
	long chunks_hashed;	/* chunks hashed for writes (a test hook) */
	bool defer_refs;	/* the next plan stored defers its reused
				 * chunks' references (store__net_flush()) */
	struct refnet *net;	/* those references, or NULL */
	int wal_frames;		/* the WAL's frames at this handle's last commit,
				 * 0 once checkpointed (store_checkpoint_idle()) */
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

/* A growing list of blob keys, for what a collection must look at. */
struct shalist {
	char (*v)[STORE_SHA_HEX + 1];	/* the keys */
	size_t n;			/* keys held */
	size_t cap;			/* keys v has room for */
};

/* A blobs row: what a blob is made of. */
struct manifest {
	uint64_t size;			/* bytes of the blob */
	uint32_t chunk_size;		/* bytes of each chunk but the last */
	size_t n;			/* chunks: size / chunk_size, up */
	unsigned char *hashes;		/* n raw SHA-256s, malloc'd */
};

/*
 * A blob cut into chunks and hashed, ready for store__plan_store(). The
 * blob is data itself, or, when patch is set, the image data with patch
 * applied (patch.h): its chunks are then assembled when they are needed.
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

/*** store_names.c: names, hashes, bounded columns ***/

/* Copies a TEXT column into dst[size]; a NULL or over-long one is -EBADMSG. */
/*
 * sql_cache_prepare() and sql_cache_release() on the handle's kept
 * statements (sql a constant: a commit runs about twenty, and parsing
 * each again was about a sixth of its CPU). store__step_release() is
 * sql_step_finalize()'s twin, and store__begin() and store__tx_end()
 * sql_begin()'s and sql_tx_end()'s, through kept statements.
 */
int store__prepare(struct store *st, const char *sql, sqlite3_stmt **stmt,
    struct err *e);
void store__release(struct store *st, sqlite3_stmt *stmt);
int store__step_release(struct store *st, sqlite3_stmt *stmt,
    const char *what, struct err *e);
int store__begin(struct store *st, struct err *e);
int store__tx_end(struct store *st, int rc, struct err *e);
/* Finalises every kept statement (store_close()). */
void store__stmts_close(struct store *st);

int store__col_text(sqlite3_stmt *stmt, int col, char *dst, size_t size,
    const char *what, struct err *e);
/* Lower-case hex of n raw bytes: 2 * n digits and a NUL. */
void store__hex_of(const unsigned char *raw, size_t n, char *out);
/* Raw SHA-256 of data through OpenSSL's EVP interface. */
int store__sha256_raw(const void *data, size_t len,
    unsigned char out[SHA_RAW], struct err *e);

/*** store_chunks.c: plans, puts and collection ***/

/*
 * Reads blob sha's manifest into *m (m->hashes is the caller's to free)
 * and checks it. -ENOENT if no such blob; -EBADMSG, m empty, if damaged.
 */
int store__manifest_read(struct store *st, const char *sha,
    struct manifest *m, struct err *e);
/* Frees what p holds and empties it. */
void store__plan_free(struct blob_plan *p);
/*
 * The plan of data (len bytes), reusing base_sha's chunk hashes where
 * base_data's bytes are equal. No lock held; the caller frees p.
 */
int store__plan_make(struct store *st, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    struct blob_plan *p, struct err *e);
/*
 * The plan of img with pt applied against base, the head's manifest; only
 * the chunks pt touches are hashed, and with prev (the head's own patch
 * over img, or NULL) only those holding a block pt has that prev lacks or
 * holds with other bytes. No lock held; p points into img, pt.
 */
int store__plan_make_patch(struct store *st, const void *img,
    size_t img_len, const struct patch *pt, const struct patch *prev,
    const struct manifest *base, struct blob_plan *p, struct err *e);
/* The STORE_CHECK_PATCH cross-check of a patch plan; 0 without it. */
int store__plan_check_patch(const struct blob_plan *p, struct err *e);
/* Stores p's new chunks and takes a reference on each; in a transaction. */
int store__plan_chunks(struct store *st, const struct blob_plan *p,
    int64_t now, struct err *e);
/* Inserts p's blobs row through sql (blobs, or blobs_v2 while migrating). */
int store__plan_row(struct store *st, const char *sql,
    const struct blob_plan *p, int64_t created_at, struct err *e);
/*
 * Stores the blob p describes, in the caller's write transaction. With
 * st->defer_refs (and p a new blob), the references on the chunks p
 * reuses from its base are owed instead of written (st->net): collection
 * in the same transaction drops a reference by cancelling an owed one,
 * and store__net_flush() writes what is left. A commit that reuses 185
 * chunks and retires a version sharing most of them then writes only the
 * counts that change.
 */
int store__plan_store(struct store *st, const struct blob_plan *p,
    struct err *e);
/*
 * Writes the references st->net still owes (a chunk found missing, in a
 * damaged file, is stored again from the plan, checked against its hash)
 * and ends the deferral. In the transaction of store__plan_store(); the
 * plan must still be alive. 0 or -errno.
 */
int store__net_flush(struct store *st, struct err *e);
/* Ends the deferral without writing (the transaction is rolled back). */
void store__net_end(struct store *st);
/*
 * The bytes the tenant's heads and history rows take in the store: each
 * blob they name once (its manifest) and each distinct chunk those blobs
 * list once. Within the caller's transaction when it has one. 0 or -errno.
 */
int store__tenant_stored(struct store *st, const char *tenant, uint64_t *bytes,
    struct err *e);
/*
 * Collects every blob of l that nothing names any more, in the caller's
 * write transaction. Adds the number deleted to *removed if not NULL.
 */
int store__gc_list(struct store *st, const struct shalist *l, long *removed,
    struct err *e);

/*** store_migrate.c ***/

/* Converts a schema-1 file, inside the caller's write transaction. */
int store__migrate_v1(struct store *st, struct err *e);
/*
 * Converts a schema-2 file (or one store__migrate_v1() just made) to
 * schema 3, inside the same transaction: the sandboxes gain their image
 * and workdir columns, '' (none) for every sandbox there is.
 */
int store__migrate_v2(struct store *st, struct err *e);

#endif
