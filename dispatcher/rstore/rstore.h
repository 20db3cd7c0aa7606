/*
 * rstore.h - the Redis snapshot store: sandbox heads, history and blobs in
 * one Redis that every sandqd host shares, with each host's local store
 * (store.h) as a cache of immutable blobs.
 *
 * Lifecycle: rstore_open() -> around each job, on a work thread:
 * rstore_pull() (the head into the local store) ... the job commits
 * locally ... rstore_push() (the new blob's missing pieces) and
 * rstore_commit() (compare-and-set of the head) -> rstore_close(). Also
 * rstore_create / fork / delete / head / list / history / job_version. A
 * handle is one blocking hiredis connection: use one per thread, with
 * that thread's local store handle. A connection broken by an I/O error
 * or a timeout is opened again at the next call. Nothing here takes a
 * lock across hosts: the compare-and-set of rstore_commit() is what
 * orders two hosts working on one sandbox.
 *
 * DESIGN
 * Keys (docs/store.md, "The Redis store"), P the prefix, T the tenant;
 * the {T} hash tag puts all of a tenant's keys in one cluster slot and
 * under its ACL pattern P:{T}:*:
 *   P:{T}:sbx:ID     hash: head, version, created_at, updated_at, labels,
 *                    and image, workdir when the sandbox records them
 *   P:{T}:sbxv:ID    list, newest first: "VERSION SHA CREATED_AT[ JOB]"
 *   P:{T}:sbxj:ID    hash: job id -> the version it made (one per row)
 *   P:{T}:sbxs       set of the tenant's sandbox ids
 *   P:{T}:blob:SHA   a manifest's bytes (store.h's format)
 *   P:{T}:chunk:SHA  a chunk's bytes
 *   P:{T}:refs       hash: manifest key -> history rows naming it
 *   P:{T}:crefs      hash: chunk key -> manifest entries listing it
 * - Every write of a head (create, commit, fork, delete) is one Lua script,
 *   so the compare-and-set, the history row, retention and the collection
 *   of what nothing names any more are atomic. The head's row is always
 *   in the history, so a blob's names are its history rows.
 * - Blobs are per tenant (their keys carry {T}): a tenant's ACL user can
 *   read its own snapshots and no other's.
 * - rstore_push() uploads with SET NX and an expiry (RSTORE_PUSH_TTL_MS):
 *   the commit that first names a blob makes it and its new chunks
 *   permanent, so the uploads of a commit that never happens (lost the
 *   compare-and-set, host died) go by themselves, and NX never puts an
 *   expiry back on a piece that is named.
 * - Nothing read from Redis is trusted: rstore_pull() checks the manifest
 *   against its key and each chunk against its hash (in the local store's
 *   import) before anything is stored. A damaged copy is -EBADMSG naming
 *   the piece, and the local store is unchanged.
 * - Redis must not evict keys (maxmemory-policy noeviction): an evicted
 *   chunk is a snapshot lost.
 *
 * Names are checked as the local store checks them (store.h's Names); a
 * job id is 1..RSTORE_JOB_ID_MAX of [A-Za-z0-9._:-]. Errors are 0 or
 * -errno with `e` naming the sandbox or piece: -EINVAL (bad name, key or
 * labels), -ENOENT, -EEXIST, -ESTALE, -EALREADY, -EBADMSG (a damaged
 * Redis copy), -EIO (Redis unreachable or refusing), or the local store's
 * errors.
 */
#ifndef SANDQ_DISPATCHER_RSTORE_H
#define SANDQ_DISPATCHER_RSTORE_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../proto/keys.h"
#include "../../store/store.h"

#define RSTORE_PREFIX_DEFAULT "sandq"		/* as sandqd's prefix */
#define RSTORE_PREFIX_MAX 32			/* bytes, as config.c */
#define RSTORE_JOB_ID_MAX 128			/* bytes of a job id */
#define RSTORE_CONNECT_MS 5000			/* connecting, at most */
#define RSTORE_COMMAND_MS 30000			/* one reply, at most */
/*
 * Uploaded pieces no history row names yet expire after this. A commit
 * follows its push at once; an hour covers a slow upload of a large
 * snapshot many times over.
 */
#define RSTORE_PUSH_TTL_MS (60 * 60 * 1000)
/* Commands in flight in a pipeline: 64 chunks are 4 MiB. */
#define RSTORE_PIPELINE 64
/* rstore_pull() starts again this many times if the head moves under it. */
#define RSTORE_PULL_TRIES 3
/* Versions stay below 2^53: the scripts count in Lua's doubles. */
#define RSTORE_VERSION_MAX (((uint64_t)1 << 53) - 1)

struct rstore;

/*
 * History callback: one row, newest first, with the job that made it ("" for
 * none); v and job_id live only during the call.
 */
typedef int (*rstore_version_cb)(const struct store_version *v,
    const char *job_id, void *arg);

/*** Handles ***/

/*
 * Connects to url (proto/url.h: redis://[USER:PASS@]HOST[:PORT][/DB] or
 * unix://[USER:PASS@]/PATH, AUTH and SELECT as it says) with prefix
 * (NULL for RSTORE_PREFIX_DEFAULT; 1..RSTORE_PREFIX_MAX of [A-Za-z0-9_-])
 * and loads the scripts (SCRIPT LOAD). *out is the caller's
 * (rstore_close()). -EINVAL for a bad URL or prefix, -EIO otherwise.
 */
int rstore_open(const char *url, const char *prefix, struct rstore **out,
    struct err *e);

/*
 * Closes the connection, wipes the URL (it may hold a password) and frees
 * rs. NULL is a no-op.
 */
void rstore_close(struct rstore *rs);

/*** Sandboxes ***/

/* Fills *out with tenant/id's head in Redis (one HGETALL). -ENOENT if none. */
int rstore_head(struct rstore *rs, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e);

/*
 * Makes local hold tenant/id as Redis has it, and fills *out with it: the
 * same version, head, times, labels, image and workdir in local's sandbox row
 * (store_sandbox_adopt(), retention of local applies). When local's row
 * already says the same, that is all: one round trip. Otherwise fetches
 * the head's manifest unless local holds the blob, and, pipelined, only
 * the chunks local lacks; they are checked and stored together
 * (store_blob_import()), so on any failure local is unchanged but for
 * what it held. -ENOENT if Redis has no such sandbox; -EBADMSG naming the
 * piece when Redis's copy is damaged or missing; -ESTALE if the head kept
 * moving (RSTORE_PULL_TRIES times) while it was being fetched.
 */
int rstore_pull(struct rstore *rs, struct store *local, const char *tenant,
    const char *id, struct store_sandbox *out, struct err *e);

/*
 * Uploads local's blob sha_hex to tenant's keys: the chunks Redis lacks
 * (EXISTS, pipelined, then SET), then the manifest, each with SET NX and
 * RSTORE_PUSH_TTL_MS. A commit that changed 2 chunks of 160 sends 2 chunks
 * and a manifest. Each piece is checked against its hash as it leaves
 * local (-EBADMSG); -ENOENT if local does not hold the blob. Only
 * rstore_commit() or rstore_create() naming the blob makes it permanent;
 * one that comes after the expiry gets -ENOENT: push again.
 */
int rstore_push(struct rstore *rs, struct store *local, const char *tenant,
    const char *sha_hex, struct err *e);

/*
 * Compare-and-set, in one script (rstore_commit_lua): if tenant/id is at
 * from_version, moves its head to new_sha, version from_version + 1,
 * updated_at (Redis's clock), adds the history row with job_id (NULL or
 * "" for none), keeps keep_versions rows (0: all) and collects the blobs
 * and chunks only the dropped rows named. from_version 0 creates the
 * sandbox, with labels {} (rstore_create() takes labels). new_sha's
 * manifest and chunks must be in Redis (rstore_push()). Nothing changes
 * on failure: -EALREADY if job_id already made a version of tenant/id (a
 * job run twice: checked first, whatever the version), naming it;
 * -ESTALE naming both versions; -EEXIST for a create of an existing
 * sandbox; -ENOENT naming the sandbox, blob or chunk missing; -EBADMSG
 * for a manifest in Redis that is not one.
 */
int rstore_commit(struct rstore *rs, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, const char *job_id,
    unsigned keep_versions, struct err *e);

/*
 * Creates tenant/id at version 1 with head sha_hex (pushed before) and
 * labels_json (a JSON object, NULL for {}; stored compact with sorted
 * keys, as the local store does): rstore_commit() from version 0.
 */
int rstore_create(struct rstore *rs, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, const char *job_id,
    struct err *e);

/*
 * rstore_create() of a sandbox that records its image and workdir (NULL or
 * "" for none), as store_image_check() allows them: the hash's fields
 * image and workdir, absent when empty.
 */
int rstore_create_image(struct rstore *rs, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, const char *image,
    const char *workdir, const char *job_id, struct err *e);

/*
 * Creates tenant/dst from tenant/src in O(1), in one script: the same
 * head (its blob gets one more name, nothing is copied), the same labels,
 * image and workdir, version 1, one history row. -ENOENT if src is missing, -EEXIST if dst
 * exists.
 */
int rstore_fork(struct rstore *rs, const char *tenant, const char *src,
    const char *dst, struct err *e);

/*
 * Deletes tenant/id, its history and job records, and, in the same
 * script, every blob and chunk that only it named (a fork's shared blob
 * stays). -ENOENT if it does not exist.
 */
int rstore_delete(struct rstore *rs, const char *tenant, const char *id,
    struct err *e);

/*
 * Calls cb for every sandbox of tenant (the set P:{T}:sbxs), in id order.
 * A non-zero return from cb stops the listing and is returned. A sandbox
 * deleted meanwhile is skipped.
 */
int rstore_list(struct rstore *rs, const char *tenant, store_sandbox_cb cb,
    void *arg, struct err *e);

/*
 * Calls cb for every history row of tenant/id, newest first, with the job
 * that made it. A non-zero return from cb stops and is returned. -ENOENT
 * if the sandbox does not exist.
 */
int rstore_history(struct rstore *rs, const char *tenant, const char *id,
    rstore_version_cb cb, void *arg, struct err *e);

/*
 * The version job_id made of tenant/id (> 0), or 0 when it made none that
 * the history still holds (records go with their rows), or -errno. A job
 * delivered again after a host failure asks this before running: a
 * version means it ran and committed already.
 */
int64_t rstore_job_version(struct rstore *rs, const char *tenant,
    const char *id, const char *job_id, struct err *e);

/*** The commit script, for another connection ***/

/*
 * rstore_commit()'s script, for a caller that runs it on a connection of
 * its own (the dispatcher's asynchronous one, inside the MULTI that
 * publishes a job's result) with EVAL, or EVALSHA of its SHA-1. All keys
 * carry {T}: the blobs and chunks the script reaches beyond KEYS are
 * built from ARGV[1] and so are in the same cluster slot.
 *
 *   KEYS[1] P:{T}:sbx:ID    KEYS[2] P:{T}:sbxv:ID   KEYS[3] P:{T}:sbxj:ID
 *   KEYS[4] P:{T}:refs      KEYS[5] P:{T}:crefs     KEYS[6] P:{T}:sbxs
 *   ARGV[1] "P:{T}:"        ARGV[2] ID
 *   ARGV[3] from_version, decimal (0 creates)
 *   ARGV[4] the new head's key, 64 lower-case hex digits
 *   ARGV[5] job id, or "" for none
 *   ARGV[6] keep_versions, decimal (0 keeps every row)
 *   ARGV[7] labels for a create: compact JSON object text ("" is {})
 *   ARGV[8] image for a create ("" for none)
 *   ARGV[9] workdir for a create ("" for /workspace)
 *
 * The reply is an array {status, version, detail}; nothing is written
 * unless status is "OK". The checks come in this order: KEYS and ARGV,
 * the job, the version, the blob and its chunks.
 *   "OK"        the new version      the new head's key
 *   "ESTALE"    the current version  ID
 *   "EEXIST"    the current version  ID (a create of an existing one)
 *   "ENOENT"    0                    "sandbox ID", "blob SHA", "chunk SHA"
 *   "EALREADY"  the job's version    the job id
 *   "EBADMSG"   0                    "blob SHA" (not a manifest)
 *   "EINVAL"    0                    what (KEYS not built from ARGV[1..2],
 *                                    a bad number or key)
 * rstore_commit_call() builds the arguments and rstore_commit_result()
 * reads the reply.
 */
extern const char rstore_commit_lua[];

#define RSTORE_COMMIT_KEYS 6			/* numkeys of the script */
#define RSTORE_COMMIT_ARGC (3 + RSTORE_COMMIT_KEYS + 9)

/* The arguments of one EVAL of rstore_commit_lua, and their storage. */
struct rstore_call {
	const char *argv[RSTORE_COMMIT_ARGC];	/* EVAL, script, 6, KEYS, ARGV */
	size_t len[RSTORE_COMMIT_ARGC];		/* byte length of each */
	char keys[RSTORE_COMMIT_KEYS][KEY_MAX];	/* KEYS[1..6] */
	char base[KEY_MAX];			/* ARGV[1] */
	char from[24];				/* ARGV[3] */
	char keep[16];				/* ARGV[6] */
	char labels[STORE_LABELS_MAX + 1];	/* ARGV[7] */
};

/*
 * Fills c for rstore_commit_lua (argc RSTORE_COMMIT_ARGC, with argv[0]
 * "EVAL" and argv[1] the script: put "EVALSHA" and its SHA-1 there to
 * send that instead), checking every name as rstore_commit() does.
 * labels_json, image and workdir are used by a create only (from_version
 * 0; NULL for {}, none, /workspace). Pointers in c->argv point into c and
 * into the strings given, which must outlive the call. -EINVAL naming the
 * field.
 */
int rstore_commit_call(const char *prefix, const char *tenant,
    const char *id, uint64_t from_version, const char *new_sha,
    const char *job_id, unsigned keep_versions, const char *labels_json,
    const char *image, const char *workdir, struct rstore_call *c,
    struct err *e);

/*
 * Reads a reply of rstore_commit_lua for tenant/id: 0 with *version the
 * new version, or the -errno of the table above with e naming the
 * sandbox, versions, piece or job; an error reply or another shape is
 * -EIO. version may be NULL.
 */
int rstore_commit_result(const redisReply *r, const char *tenant,
    const char *id, uint64_t from_version, uint64_t *version,
    struct err *e);

/*** Test hooks ***/

/* Chunks this handle fetched from Redis since rstore_open(). */
long rstore_debug_chunks_fetched(const struct rstore *rs);
/* Chunks this handle sent to Redis since rstore_open(). */
long rstore_debug_chunks_pushed(const struct rstore *rs);

#endif
