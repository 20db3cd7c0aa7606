/*
 * store.h - the local snapshot store: blobs by SHA-256 and sandbox heads.
 *
 * One SQLite database file, <dir>/store.db, in sandqd's state folder holds
 * immutable snapshot blobs (AgentFS databases, see agentfs.h) keyed by the
 * lower-case hex SHA-256 of their bytes, and sandboxes (tenant, id) that
 * point at a head blob with a version number, times and labels. Each move
 * of a head appends a row to the sandbox's history.
 *
 * Lifecycle: store_open() -> blob_put / sandbox_create / commit / fork /
 * get / list / history / delete / prune -> store_close(). A handle is not
 * thread-safe: use one per thread or process; any number of handles, in
 * any number of processes, may share the file (SQLite WAL locking, with a
 * busy timeout of STORE_BUSY_MS).
 *
 * DESIGN
 * Schema (every column named, so tests and tools may read it):
 *   blobs(sha256 TEXT PRIMARY KEY, size, data BLOB, created_at)
 *   sandboxes(tenant, id, head -> blobs, version, created_at, updated_at,
 *             labels, PRIMARY KEY (tenant, id))
 *   versions(tenant, id, version, sha256 -> blobs, created_at,
 *            PRIMARY KEY (tenant, id, version)), cascading from sandboxes.
 * Times are epoch milliseconds. Foreign keys are enforced, so no head or
 * history row can name a blob that is not stored.
 *
 * - Blobs are immutable and content-addressed: putting the same bytes twice
 *   stores them once. Every read recomputes the SHA-256 (OpenSSL EVP) and
 *   refuses a row whose bytes no longer match its key, so a corrupted
 *   snapshot is an error, never data.
 * - A head moves only by compare-and-set on its version
 *   (store_sandbox_commit()): two workers that loaded the same version
 *   cannot both commit; the loser gets -ESTALE and must reload.
 * - A fork is one row: it names the same blob, so nothing is copied.
 * - Every sandbox statement is keyed by (tenant, id): no call can reach a
 *   sandbox of another tenant, whatever id it passes. Blobs are shared
 *   between tenants (same bytes, same key); a tenant can only reach a blob
 *   through its own sandboxes, which is for the callers to keep so.
 * - Retention is explicit (store_prune()): deleting a sandbox or moving a
 *   head never deletes a blob; prune drops old history rows and then every
 *   blob that no head and no kept history row names.
 * - Durability: WAL with synchronous=NORMAL. A committed transaction
 *   survives a crash of the process; after a power loss the newest
 *   transactions may be rolled back, never half-applied.
 *
 * Names: a tenant is 1..STORE_TENANT_MAX of [A-Za-z0-9_-]; a sandbox id is
 * 1..STORE_ID_MAX of [A-Za-z0-9._:-], not "." or ".." (ids may become path
 * components later). Errors name the field: "store: tenant: ...".
 *
 * Errors are 0 or -errno with `e` filled: -EINVAL (bad name, hash, labels),
 * -ENOENT (no such blob or sandbox), -EEXIST, -ESTALE, -EBADMSG (corrupted
 * blob or database), -EFBIG, -EBUSY (lock timeout), -ENOMEM, -EIO.
 */
#ifndef SANDQ_STORE_H
#define SANDQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define STORE_DB_NAME "store.db"		/* file inside the store folder */
#define STORE_TENANT_MAX 64			/* bytes of a tenant name */
#define STORE_ID_MAX 128			/* bytes of a sandbox id */
#define STORE_LABELS_MAX 4096			/* bytes of labels JSON text */
#define STORE_BLOB_MAX ((size_t)1000000000)	/* SQLite's default max length */
#define STORE_SHA_HEX 64			/* hex digits of a SHA-256 */
#define STORE_BUSY_MS 5000			/* wait for another writer */

struct store;

/* One sandbox as store_sandbox_get() and store_sandbox_list() give it. */
struct store_sandbox {
	char tenant[STORE_TENANT_MAX + 1];	/* owning tenant */
	char id[STORE_ID_MAX + 1];		/* sandbox id */
	char head[STORE_SHA_HEX + 1];		/* SHA-256 of the head blob */
	uint64_t version;			/* 1 at create, +1 per commit */
	int64_t created_at;			/* epoch ms */
	int64_t updated_at;			/* epoch ms of the last commit */
	char labels[STORE_LABELS_MAX + 1];	/* JSON object text, compact */
};

/* One history row: the head at a version. */
struct store_version {
	uint64_t version;			/* version number */
	char sha256[STORE_SHA_HEX + 1];		/* head blob at that version */
	int64_t created_at;			/* epoch ms it became head */
};

/* List and history callbacks: the struct lives only during the call. */
typedef int (*store_sandbox_cb)(const struct store_sandbox *sb, void *arg);
typedef int (*store_version_cb)(const struct store_version *v, void *arg);

/*** Handles ***/

/*
 * Opens (creating if needed, mode 0600) dir/store.db; dir must exist.
 * Sets WAL, synchronous=NORMAL, the busy timeout and foreign keys, and
 * creates the schema. Refuses a symlinked database file and a schema newer
 * than this build (-EPROTONOSUPPORT). *out is the caller's (store_close()).
 */
int store_open(const char *dir, struct store **out, struct err *e);

/* Closes the database and frees the handle. NULL is a no-op. */
void store_close(struct store *st);

/*** Blobs ***/

/*
 * Stores len bytes under their SHA-256 and writes the key (64 hex digits
 * and a NUL) to sha_hex. Idempotent and atomic: the same bytes are stored
 * once, and a failed put leaves nothing. Does not take ownership of data.
 * -EFBIG over STORE_BLOB_MAX.
 */
int store_blob_put(struct store *st, const void *data, size_t len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * Reads the blob sha_hex into *data (malloc'd, the caller frees; never
 * NULL on success, even for 0 bytes) and *len. -ENOENT when absent;
 * -EBADMSG when the stored bytes do not hash to sha_hex (nothing returned).
 */
int store_blob_get(struct store *st, const char *sha_hex, void **data,
    size_t *len, struct err *e);

/* The stored blob's size in bytes (no read, no hash check), or -ENOENT / -errno. */
int64_t store_blob_size(struct store *st, const char *sha_hex, struct err *e);
/* 1 when the blob is stored, 0 when not (no hash check), or -errno. */
int store_blob_exists(struct store *st, const char *sha_hex, struct err *e);
/* How many blobs the store holds, or -errno with e. */
long store_blob_count(struct store *st, struct err *e);

/*** Sandboxes ***/

/*
 * Creates tenant/id at version 1 with head sha_hex (which must be stored:
 * -ENOENT otherwise) and one history row. labels_json is a JSON object of
 * at most STORE_LABELS_MAX bytes, or NULL for {}; it is stored compact with
 * sorted keys. -EEXIST if the sandbox exists.
 */
int store_sandbox_create(struct store *st, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, struct err *e);

/* Fills *out with tenant/id. -ENOENT if it does not exist. */
int store_sandbox_get(struct store *st, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e);

/*
 * Compare-and-set: if tenant/id is at from_version, moves its head to
 * new_sha (which must be stored), sets version to from_version + 1 and
 * updated_at, and appends the history row, in one transaction. -ESTALE,
 * naming both versions, if the sandbox is at another version (nothing
 * changes); -ENOENT if the sandbox or the blob is missing.
 */
int store_sandbox_commit(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, struct err *e);

/*
 * Creates tenant/dst from tenant/src in O(1): same head blob (no copy),
 * same labels, version 1, a history of one row. Both sandboxes then move
 * independently. -ENOENT if src is missing, -EEXIST if dst exists.
 */
int store_sandbox_fork(struct store *st, const char *tenant, const char *src,
    const char *dst, struct err *e);

/*
 * Deletes tenant/id and its history. Its blobs stay until store_prune().
 * -ENOENT if it does not exist.
 */
int store_sandbox_delete(struct store *st, const char *tenant, const char *id,
    struct err *e);

/*
 * Calls cb for every sandbox of tenant, in id order. A non-zero return
 * from cb stops the listing and is returned. No sandbox is not an error.
 */
int store_sandbox_list(struct store *st, const char *tenant,
    store_sandbox_cb cb, void *arg, struct err *e);

/*
 * Calls cb for every history row of tenant/id, newest first (rows removed
 * by store_prune() are gone). A non-zero return from cb stops and is
 * returned. -ENOENT if the sandbox does not exist.
 */
int store_sandbox_history(struct store *st, const char *tenant,
    const char *id, store_version_cb cb, void *arg, struct err *e);

/*** Retention ***/

/*
 * In one transaction: for each sandbox keeps the newest keep_versions
 * history rows (the head's row always, even with keep_versions 0), deletes
 * the older ones, then deletes every blob named by no head and no history
 * row. Returns the number of blobs removed (>= 0) or -errno.
 * A blob put but not yet named by a sandbox is unreferenced too: run prune
 * where no put/create/commit pair is in flight, or retry such a pair on
 * -ENOENT (the create or commit fails cleanly; nothing dangles).
 */
int store_prune(struct store *st, unsigned keep_versions, struct err *e);

#endif
