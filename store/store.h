/*
 * store.h - the local snapshot store: chunked blobs and sandbox heads.
 *
 * One SQLite database file, <dir>/store.db, in sandqd's state folder holds
 * immutable snapshot blobs (AgentFS databases, see agentfs.h), cut into
 * content-addressed chunks, and sandboxes (tenant, id) that point at a head
 * blob with a version number, times and labels. Each move of a head
 * appends a row to the sandbox's history; the history is trimmed to the
 * newest store_set_keep_versions() rows at each commit, and a blob nothing
 * names any more goes in the same transaction. docs/store.md has the whole
 * model.
 *
 * Lifecycle: store_open() -> store_set_keep_versions() and
 * store_set_quota() (optional) -> sandbox_create_blob / commit_blob /
 * commit_patch / fork / get / list / history / delete / blob_get ->
 * store_close(). The Redis store
 * (rstore.h) uses a local store as its cache, through the calls of "Moving
 * blobs between stores" and store_sandbox_adopt(). A handle is not
 * thread-safe: use one per thread or process; any number of handles, in
 * any number of processes, may share the file (SQLite WAL locking, with a
 * busy timeout of STORE_BUSY_MS).
 *
 * DESIGN
 * Schema version 3 (every column named, so tests and tools may read it):
 *   chunks(sha256 TEXT PRIMARY KEY, data BLOB, created_at)
 *   chunk_refs(sha256 -> chunks PRIMARY KEY, refs) WITHOUT ROWID
 *   blobs(sha256 TEXT PRIMARY KEY, size, chunk_size, chunks BLOB,
 *         created_at)
 *   sandboxes(tenant, id, head -> blobs, version, created_at, updated_at,
 *             labels, image, workdir, PRIMARY KEY (tenant, id))
 *   versions(tenant, id, version, sha256 -> blobs, created_at,
 *            PRIMARY KEY (tenant, id, version)), cascading from sandboxes.
 * Times are epoch milliseconds. Foreign keys are enforced, so no head or
 * history row can name a blob that is not stored.
 *
 * - A blob is cut at fixed offsets into STORE_CHUNK_BYTES chunks (the last
 *   one shorter); chunks.sha256 is the hex SHA-256 of a chunk's bytes and
 *   blobs.chunks the concatenated raw 32-byte hashes, in order. A snapshot
 *   made by editing its parent's bytes in place (SQLite pages) shares every
 *   chunk it did not touch with the parent, so a version costs its changed
 *   chunks and a manifest, not a copy.
 * - A blob's key is the SHA-256 of its manifest:
 *     "sandq-snapshot-1" NUL, size (u64 little-endian), chunk size (u32
 *     little-endian), the raw chunk hashes.
 *   Same bytes, same key; another chunking gives another key. It is not
 *   the SHA-256 of the blob's bytes.
 * - chunk_refs.refs counts manifest entries naming a chunk (a chunk listed
 *   twice by one blob counts twice). It lives in its own narrow table
 *   because SQLite rewrites a whole row to change one column: a count
 *   beside 64 KiB of data would make each commit read and rewrite every
 *   chunk of the snapshot.
 * - Every read re-hashes each chunk and the manifest (OpenSSL EVP) and
 *   refuses a blob whose bytes no longer match its key (-EBADMSG), so a
 *   corrupted snapshot is an error, never data.
 * - A head moves only by compare-and-set on its version: two workers that
 *   loaded the same version cannot both commit; the loser gets -ESTALE.
 * - store_sandbox_create_blob() and store_sandbox_commit_blob() hash first
 *   and then store the blob and move the head in one write transaction,
 *   so no blob is ever stored unnamed between two transactions and
 *   garbage collection cannot race a commit. The worker uses them; the
 *   separate put and create/commit calls remain for tools and tests.
 * - store_sandbox_commit_patch() takes the new head as an image and a
 *   patch of 4 KiB blocks (patch.h): the chunks the patch does not touch
 *   take the current head's hashes from its manifest, unread and
 *   unhashed, so a commit costs the chunks that changed. It trusts the
 *   caller that the head is that image under an older, smaller patch; a
 *   build with -DSTORE_CHECK_PATCH checks it, at the cost of a full pass.
 * - A fork is one row: it names the same blob, so nothing is copied.
 * - Every sandbox statement is keyed by (tenant, id): no call can reach a
 *   sandbox of another tenant, whatever id it passes. Blobs and chunks are
 *   shared between tenants (same bytes, same key); a tenant can only reach
 *   a blob through its own sandboxes, which is for the callers to keep so.
 * - Retention: each commit keeps the newest keep_versions history rows of
 *   its sandbox (the head's always) and deletes the blobs of the dropped
 *   rows that no head and no history row still names, then the chunks no
 *   blob lists; deleting a sandbox does the same for its blobs. The cost
 *   is proportional to what is deleted (index lookups, no scan).
 *   store_prune() is the global sweep, for blobs put and never named.
 * - Durability: WAL with synchronous=NORMAL. A committed transaction
 *   survives a crash of the process; after a power loss the newest
 *   transactions may be rolled back, never half-applied.
 * - A schema-1 file (whole blobs keyed by the SHA-256 of their bytes) is
 *   converted by store_open() in one transaction: every blob re-chunked
 *   under its new key, heads and history renamed to match. A schema-2
 *   file gains the sandboxes' image and workdir columns ('' for none).
 * - A sandbox's image and workdir (docs/images.md "Sandboxes on images")
 *   are set when it is created and never change; a fork copies them.
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define STORE_DB_NAME "store.db"		/* file inside the store folder */
#define STORE_TENANT_MAX 64			/* bytes of a tenant name */
#define STORE_ID_MAX 128			/* bytes of a sandbox id */
#define STORE_LABELS_MAX 4096			/* bytes of labels JSON text */
#define STORE_IMAGE_MAX 1024			/* bytes of a sandbox's image */
#define STORE_WORKDIR_MAX 1024			/* bytes of a sandbox's workdir */
#define STORE_BLOB_MAX ((size_t)1000000000)	/* SQLite's default max length */
#define STORE_SHA_HEX 64			/* hex digits of a SHA-256 */
#define STORE_BUSY_MS 5000			/* wait for another writer */
#define STORE_CHUNK_BYTES (64 * 1024)		/* blobs are cut at this size */
/*
 * History rows each sandbox keeps by default. A version that changed a few
 * files costs its changed chunks (a few 64 KiB each), so 16 versions of a
 * 12.5 MB snapshot cost about the head again; enough to look back over a
 * working session, bounded even for a sandbox committed thousands of times.
 */
#define STORE_KEEP_VERSIONS_DEFAULT 16
#define STORE_KEEP_VERSIONS_MAX 1000000		/* config bound */
/* store_prune() leaves a blob named by nothing alone for this long. */
#define STORE_PRUNE_GRACE_MS (10 * 60 * 1000)

struct store;

/* One sandbox as store_sandbox_get() and store_sandbox_list() give it. */
struct store_sandbox {
	char tenant[STORE_TENANT_MAX + 1];	/* owning tenant */
	char id[STORE_ID_MAX + 1];		/* sandbox id */
	char head[STORE_SHA_HEX + 1];		/* key of the head blob */
	uint64_t version;			/* 1 at create, +1 per commit */
	int64_t created_at;			/* epoch ms */
	int64_t updated_at;			/* epoch ms of the last commit */
	char labels[STORE_LABELS_MAX + 1];	/* JSON object text, compact */
	char image[STORE_IMAGE_MAX + 1];	/* the image its runs use (a
						 * canonical reference), "" none */
	char workdir[STORE_WORKDIR_MAX + 1];	/* where its files are in its
						 * runs, "" for /workspace */
};

/* One history row: the head at a version. */
struct store_version {
	uint64_t version;			/* version number */
	char sha256[STORE_SHA_HEX + 1];		/* key of the head blob then */
	int64_t created_at;			/* epoch ms it became head */
};

/* List and history callbacks: the struct lives only during the call. */
typedef int (*store_sandbox_cb)(const struct store_sandbox *sb, void *arg);
typedef int (*store_version_cb)(const struct store_version *v, void *arg);

/*** Names (store_names.c): the checks both stores share ***/

/* A blob key is exactly 64 lower-case hex digits; -EINVAL naming field. */
int store_sha_check(const char *field, const char *s, struct err *e);
/* A tenant name (Names above); -EINVAL saying what is allowed. */
int store_tenant_check(const char *s, struct err *e);
/* A sandbox id (Names above), called field in the message. */
int store_id_check(const char *field, const char *s, struct err *e);
/*
 * Validates labels (NULL means {}) as one JSON object without duplicate
 * keys and writes its compact, key-sorted form to out.
 */
int store_labels_canon(const char *text, char out[STORE_LABELS_MAX + 1],
    struct err *e);
/*
 * A sandbox's image (NULL or "" for none): at most STORE_IMAGE_MAX bytes
 * of printable ASCII without spaces, and its workdir (NULL or "" for
 * /workspace): an absolute path of at most STORE_WORKDIR_MAX bytes of
 * printable ASCII without "//", "." or ".." components nor a trailing
 * "/". The store keeps what sandqd made canonical (proto/ and images/
 * check the rest); these bound what a column may hold. -EINVAL naming it.
 */
int store_image_check(const char *image, const char *workdir, struct err *e);

/*** Handles ***/

/*
 * Opens (creating if needed, mode 0600) dir/store.db; dir must exist.
 * Sets WAL, synchronous=NORMAL, the busy timeout and foreign keys, and
 * creates the schema, or converts a schema-1 file in one transaction (a
 * failed conversion leaves the file as it was). Refuses a symlinked
 * database file and a schema newer than this build (-EPROTONOSUPPORT).
 * The handle keeps STORE_KEEP_VERSIONS_DEFAULT versions per sandbox.
 * *out is the caller's (store_close()).
 */
int store_open(const char *dir, struct store **out, struct err *e);

/* Closes the database and frees the handle. NULL is a no-op. */
void store_close(struct store *st);

/*
 * History rows each sandbox keeps at this handle's commits: the newest n
 * (the head's row is always one of them); 0 keeps every version. Applies
 * from the next commit on; rows already over the bound go at the
 * sandbox's next commit.
 */
void store_set_keep_versions(struct store *st, unsigned n);

/*
 * The storage quota of this handle's next creates and commits, in bytes (0,
 * the default: none), for the tenant they are made for: what that tenant's
 * heads and kept history rows store, each blob's manifest and each distinct
 * chunk once (store_tenant_usage()), measured in the commit's transaction
 * after retention. A commit or create that takes it past the quota is
 * refused, nothing stored, with -EDQUOT naming both figures, unless it
 * does not grow its sandbox's head: that one is committed and the
 * sandbox's older history rows are dropped with it (the head's row alone
 * stays), so a tenant over its quota can always shrink a sandbox, and
 * same-size rewrites cannot pile up history past it. Forks add no bytes
 * and are not checked.
 */
void store_set_quota(struct store *st, uint64_t bytes);

/*
 * Checkpoints. A commit that leaves STORE_WAL_AUTOCHECKPOINT frames or
 * more in the WAL folds it into the database file before it returns, as
 * SQLite's own auto-checkpoint does: the backstop that keeps the WAL
 * bounded. A caller with idle time does it earlier and off its commits:
 * store_wal_pending() is the WAL's frames as this handle's last commit
 * left them (0 after a checkpoint here), and store_checkpoint_idle() runs
 * a passive checkpoint (it waits for no reader or writer, in this process
 * or another) and returns the frames it folded in, or -errno.
 */
#define STORE_WAL_AUTOCHECKPOINT 1000
int store_wal_pending(const struct store *st);
int store_checkpoint_idle(struct store *st, struct err *e);

/*** Blobs ***/

/*
 * Stores len bytes as a blob, hashing every chunk, and writes its key (64
 * hex digits and a NUL) to sha_hex. Idempotent and atomic: the same bytes
 * are stored once, and a failed put leaves nothing. Does not take ownership
 * of data. -EFBIG over STORE_BLOB_MAX. A blob put and not yet named by a
 * sandbox is swept by store_prune() once older than STORE_PRUNE_GRACE_MS,
 * and sooner by any commit's collection that happens to drop its last
 * name: prefer the _blob sandbox calls, which cannot leave one.
 */
int store_blob_put(struct store *st, const void *data, size_t len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * store_blob_put(), knowing that data was made from the stored blob
 * base_sha, whose bytes the caller holds as base_data[base_len]: a chunk
 * of data equal (memcmp, same length) to the base's chunk at the same
 * offset takes its hash from the base's manifest without hashing, so a
 * snapshot differing in a few pages costs a compare, a few hashes and a
 * few rows. base_data must be base_sha's bytes as store_blob_get() gave
 * them: only the length and the base's manifest are checked (checking the
 * bytes would cost the hashing this saves). base_sha NULL, not stored, or
 * of another length or chunking: the same as store_blob_put(). Does not
 * take ownership of data or base_data.
 */
int store_blob_put_delta(struct store *st, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * Reads the blob sha_hex into *data (malloc'd, the caller frees; never
 * NULL on success, even for 0 bytes) and *len. -ENOENT when absent;
 * -EBADMSG when a chunk or the manifest does not hash to its key, or a
 * chunk is missing (nothing returned).
 */
int store_blob_get(struct store *st, const char *sha_hex, void **data,
    size_t *len, struct err *e);

/* The stored blob's size in bytes (no read, no hash check), or -ENOENT / -errno. */
int64_t store_blob_size(struct store *st, const char *sha_hex, struct err *e);
/* 1 when the blob is stored, 0 when not (no hash check), or -errno. */
int store_blob_exists(struct store *st, const char *sha_hex, struct err *e);
/* How many blobs the store holds, or -errno with e. */
long store_blob_count(struct store *st, struct err *e);
/* How many distinct chunks the store holds, or -errno with e. */
long store_chunk_count(struct store *st, struct err *e);

/*** Sandboxes ***/

/*
 * Creates tenant/id at version 1 with head sha_hex (which must be stored:
 * -ENOENT otherwise) and one history row. labels_json is a JSON object of
 * at most STORE_LABELS_MAX bytes, or NULL for {}; it is stored compact with
 * sorted keys. -EEXIST if the sandbox exists.
 */
int store_sandbox_create(struct store *st, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, struct err *e);

/*
 * store_blob_put() and store_sandbox_create() in one write transaction
 * (the hashing is done before it, outside the lock): either the sandbox
 * exists at version 1 naming the blob, or nothing was stored. Writes the
 * blob's key to sha_hex. -EEXIST if the sandbox exists.
 */
int store_sandbox_create_blob(struct store *st, const char *tenant,
    const char *id, const void *data, size_t len, const char *labels_json,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * store_sandbox_create_blob() of a sandbox that records what its runs use:
 * image (NULL: none) and workdir (NULL: /workspace), as
 * store_image_check() allows them. Kept for the sandbox's life and copied
 * by its forks.
 */
int store_sandbox_create_image(struct store *st, const char *tenant,
    const char *id, const void *data, size_t len, const char *labels_json,
    const char *image, const char *workdir, char sha_hex[STORE_SHA_HEX + 1],
    struct err *e);

/*
 * Creates tenant/id at version 1 naming the stored blob sha_hex in O(1), as
 * a fork does (nothing hashed, copied or added to the blob), with labels,
 * image and workdir as store_sandbox_create_image() takes them. The blob
 * must be named by a head or a kept history row of one of tenant's own
 * sandboxes, checked in the create's own transaction: -ENOENT otherwise,
 * so a tenant never reaches a blob only another tenant stores (nor learns
 * that one does). -EEXIST if the sandbox exists.
 */
int store_sandbox_create_named(struct store *st, const char *tenant,
    const char *id, const char *sha_hex, const char *labels_json,
    const char *image, const char *workdir, struct err *e);

/*
 * 1 when a head or a kept history row of one of tenant's own sandboxes
 * names the blob sha_hex, 0 when none does, or -errno. One index lookup.
 */
int store_tenant_has_blob(struct store *st, const char *tenant,
    const char *sha_hex, struct err *e);

/*
 * 1 when a sandbox of tenant other than id (NULL: any) has sha_hex as its
 * head, 0 when none has, or -errno. One index lookup: the worker asks it
 * to keep a snapshot several sandboxes start from (worker/job.c).
 */
int store_head_shared(struct store *st, const char *tenant, const char *sha_hex,
    const char *id, struct err *e);

/*
 * What the tenant's sandboxes store: every blob a head or a kept history
 * row names, once (forks of one head share it), as its manifest, and every
 * distinct chunk those manifests list, once, whatever number of versions
 * shares it. What a tenant's storage quota is measured against
 * (store_set_quota()). Costs a read of the manifests, not of the chunks.
 * Returns the size (>= 0) or -errno.
 */
int64_t store_tenant_usage(struct store *st, const char *tenant, struct err *e);

/* Fills *out with tenant/id. -ENOENT if it does not exist. */
int store_sandbox_get(struct store *st, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e);

/*
 * Compare-and-set: if tenant/id is at from_version, moves its head to
 * new_sha (which must be stored), sets version to from_version + 1 and
 * updated_at, appends the history row and applies retention (see
 * store_set_keep_versions(): older rows go, and the blobs and chunks only
 * they named), in one transaction. -ESTALE, naming both versions, if the
 * sandbox is at another version (nothing changes); -ENOENT if the sandbox
 * or the blob is missing.
 */
int store_sandbox_commit(struct store *st, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, struct err *e);

/*
 * store_blob_put_delta() and store_sandbox_commit() in one write
 * transaction, the hashing done before it: stores data's new chunks and
 * manifest, moves tenant/id from expect_version to expect_version + 1 with
 * data as head, appends the history row and applies retention. On any
 * failure nothing is stored: -ESTALE if the sandbox is at another version,
 * -ENOENT if it is gone. base_sha/base_data/base_len as for
 * store_blob_put_delta() (normally the head at expect_version; NULL for a
 * full put). Writes the new head's key to sha_hex.
 */
int store_sandbox_commit_blob(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *data, size_t len,
    const char *base_sha, const void *base_data, size_t base_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * store_sandbox_commit_blob() for a new head given as an image and a
 * patch: the new snapshot is img (img_len bytes) with patch (patch_len
 * bytes, patch.h's format) applied, patch->size bytes long (a size below
 * img_len drops the image's tail; above, the bytes no block covers are
 * zeros). Costs the chunks the patch touches, never a pass over the image.
 *
 * The caller's contract: tenant/id's head at expect_version is img with a
 * patch whose blocks (indexes) are a subset of this patch's (a worker's
 * cumulative patch since it read img, an empty one included). Every 64 KiB
 * chunk holding no block of this patch, and of the same length as the
 * head's chunk at that index, then has the head's bytes, and takes the
 * head's chunk hash from the head's manifest without being read. The
 * other chunks (holding a block, past the head's end, or the last one when
 * the size changed) are assembled and hashed. A caller that breaks the
 * contract gets a wrong snapshot, stored consistently under its key; a
 * build with -DSTORE_CHECK_PATCH hashes every chunk and refuses such a
 * commit with -EINVAL instead.
 *
 * The head's manifest is read in a read transaction and the hashing done
 * with no lock held; then one write transaction checks that the sandbox
 * is still at expect_version with the same head, stores the new chunks and
 * the manifest, moves the head, appends the history row and applies
 * retention. On any failure nothing is stored: -EBADMSG for a malformed
 * patch, -ESTALE if the sandbox is at another version (or was deleted and
 * created again), -ENOENT if it is gone, -EINVAL for img or patch NULL
 * with a length. Does not take ownership of img or patch. Writes the new
 * head's key to sha_hex: the key store_blob_put() gives the same bytes.
 */
int store_sandbox_commit_patch(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *img, size_t img_len,
    const void *patch, size_t patch_len, char sha_hex[STORE_SHA_HEX + 1],
    struct err *e);
/*
 * store_sandbox_commit_patch() given also prev (prev_len bytes, or NULL):
 * the head's own patch over img, the one the new patch grew from. A chunk
 * whose blocks in patch are all in prev with the same bytes is the head's
 * chunk and takes its hash unread: a worker's cumulative patch grows with
 * every job since its image, and without prev each commit would hash
 * every chunk it ever touched. The contract widens to: the head at
 * expect_version is img with prev, and prev's blocks are a subset of
 * patch's (a build with -DSTORE_CHECK_PATCH checks the outcome). -EBADMSG
 * for a malformed prev too.
 */
int store_sandbox_commit_patch_from(struct store *st, const char *tenant,
    const char *id, uint64_t expect_version, const void *img, size_t img_len,
    const void *prev, size_t prev_len, const void *patch, size_t patch_len,
    char sha_hex[STORE_SHA_HEX + 1], struct err *e);

/*
 * Creates tenant/dst from tenant/src in O(1): same head blob (no copy),
 * same labels, image and workdir, version 1, a history of one row. Both sandboxes then move
 * independently. -ENOENT if src is missing, -EEXIST if dst exists.
 */
int store_sandbox_fork(struct store *st, const char *tenant, const char *src,
    const char *dst, struct err *e);

/*
 * Deletes tenant/id and its history, then, in the same transaction, each
 * of its blobs that no other head or history row names (a fork's shared
 * blob stays) and the chunks no blob lists any more. -ENOENT if it does
 * not exist.
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
 * by retention or store_prune() are gone). A non-zero return from cb stops
 * and is returned. -ENOENT if the sandbox does not exist.
 */
int store_sandbox_history(struct store *st, const char *tenant,
    const char *id, store_version_cb cb, void *arg, struct err *e);

/*** Moving blobs between stores ***/

/*
 * The Redis store (rstore.h) keeps a blob as this store does: its manifest,
 * in the bytes whose SHA-256 is the blob's key, and each chunk under the
 * hex SHA-256 of its bytes. These calls copy a blob out of a local store
 * piece by piece, and into one with only the chunks it lacks. Every byte
 * that comes in is hashed once and checked against the key that names it.
 */

/* The manifest's fixed part: the domain and its NUL, u64 size, u32 chunk size. */
#define STORE_MANIFEST_HEAD 29
/* Bytes of the largest manifest: a STORE_BLOB_MAX blob's. */
#define STORE_MANIFEST_MAX (STORE_MANIFEST_HEAD + (size_t)32 * \
	((STORE_BLOB_MAX + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES))

/* A blob's manifest as store_manifest_parse() reads it. */
struct store_manifest {
	char sha256[STORE_SHA_HEX + 1];		/* the blob's key */
	uint64_t size;				/* bytes of the blob */
	size_t n;				/* chunks (64 KiB but the last) */
	const unsigned char *hashes;		/* n raw SHA-256s, in the bytes */
};

/*
 * Reads len bytes as the manifest of blob sha_hex (no I/O): the format of
 * store.h's DESIGN with chunk size STORE_CHUNK_BYTES (the only one this
 * build writes), n chunks covering size exactly, size at most
 * STORE_BLOB_MAX, and SHA-256(bytes) == sha_hex. -EINVAL for a malformed
 * sha_hex; -EBADMSG naming what is wrong otherwise. m->hashes points into
 * bytes, which must outlive m.
 */
int store_manifest_parse(const void *bytes, size_t len, const char *sha_hex,
    struct store_manifest *m, struct err *e);

/* The length of chunk i of m (i < m->n). */
size_t store_manifest_chunk_len(const struct store_manifest *m, size_t i);

/* The hex key of chunk i of m (i < m->n): 64 digits and a NUL into hex. */
void store_manifest_chunk_hex(const struct store_manifest *m, size_t i,
    char hex[STORE_SHA_HEX + 1]);

/*
 * Sets first[i] (m->n entries, the caller's) for the first index of each
 * distinct chunk of m and clears the others; returns how many were set.
 * A chunk listed twice (a run of zero pages) is moved once.
 */
size_t store_manifest_distinct(const struct store_manifest *m, bool *first);

/*
 * The manifest of the stored blob sha_hex, in the bytes its key is the
 * SHA-256 of, into *bytes (malloc'd, the caller frees) and *len. Checked
 * against the key: -EBADMSG if damaged, -ENOENT if not stored.
 */
int store_blob_manifest(struct store *st, const char *sha_hex, void **bytes,
    size_t *len, struct err *e);

/*
 * The bytes of chunk hex into *data (malloc'd, the caller frees) and *len,
 * checked against their hash: -EBADMSG if damaged, -ENOENT if not stored.
 */
int store_chunk_get(struct store *st, const char *hex, void **data,
    size_t *len, struct err *e);

/*
 * Which chunks of m the store lacks: sets missing[i] (m->n entries, the
 * caller's) for the first index of each such chunk, clears the others.
 * Returns how many were set (>= 0) or -errno. A chunk may be collected
 * right after this answer; store_blob_import() says so (-ENOENT).
 */
long store_chunks_missing(struct store *st, const struct store_manifest *m,
    bool *missing, struct err *e);

/*
 * Stores blob m from chunks[] (m->n entries): chunks[i] holds
 * store_manifest_chunk_len(m, i) bytes of chunk i, or NULL for a chunk the
 * store holds (store_chunks_missing()). Each chunk given is hashed first,
 * with no lock held: one that does not match its hash is -EBADMSG naming
 * it, and nothing is stored. Then one write transaction stores the chunks
 * not stored yet, a reference on each chunk listed, and the manifest;
 * nothing when the blob is stored already. A chunk neither stored nor
 * given is -ENOENT (nothing stored). The blob is unnamed until a sandbox
 * names it (store_sandbox_adopt()): like a store_blob_put(), store_prune()
 * sweeps it after STORE_PRUNE_GRACE_MS. Does not take ownership of chunks.
 */
int store_blob_import(struct store *st, const struct store_manifest *m,
    const void *const *chunks, struct err *e);

/*
 * Makes sb->tenant/sb->id what sb says (head, version, created_at,
 * updated_at, labels, image, workdir), as a cache of a sandbox another store owns: no
 * compare-and-set. The head must be stored (-ENOENT). History rows at or
 * above sb->version go (all of them when created_at differs: another
 * sandbox of that name), the head's row is added with sb->updated_at as
 * its time, then retention applies as at a commit, and the blobs no row
 * names any more are collected, in one write transaction. -EINVAL for a
 * bad name, key, version 0, labels, image or workdir.
 */
int store_sandbox_adopt(struct store *st, const struct store_sandbox *sb,
    struct err *e);

/*** Test hook ***/

/*
 * How many chunks this handle has hashed to write blobs since
 * store_open(): puts, commits, imports and the check of a reused chunk
 * found missing (not reads, which hash every chunk they return, and not the
 * STORE_CHECK_PATCH cross-check). For tests and the benchmark, which use
 * it to show that a commit hashed only what changed.
 */
long store_debug_chunks_hashed(const struct store *st);

/*** Retention ***/

/*
 * The global sweep, in one transaction: for each sandbox keeps the newest
 * keep_versions history rows (the head's row always, even with
 * keep_versions 0: unlike store_set_keep_versions(), 0 here keeps no
 * older row), deletes the older ones and the blobs only they named, then
 * every other blob named by no head and no history row that is older than
 * STORE_PRUNE_GRACE_MS (a put whose create or commit is still to come is
 * younger), and with each blob the chunks no blob lists any more. Returns
 * the number of blobs removed (>= 0) or -errno.
 */
int store_prune(struct store *st, unsigned keep_versions, struct err *e);

#endif
