/*
 * ops.h - the fs.*, kv.* and sandbox.* ops: run by a worker directly on the
 * snapshot store, without starting any process.
 *
 * Lifecycle: the worker opens its store once (store_open()), then for each
 * job of op OP_FS_READ..OP_SANDBOX_LIST calls ops_run() with a fresh
 * result (result_new()), sends the result and frees it. No state is kept
 * between calls.
 *
 * Every op is keyed by (j->tenant, j->sandbox): a tenant never reaches
 * another tenant's sandbox, whatever id it names. Reads open the head blob
 * (whose SHA-256 the store re-checks); writes change a copy, add one
 * tool_calls row, and move the head by compare-and-set from the version
 * read, retrying the whole op when another worker moved it first.
 * docs/protocol.md ("Sandboxes") and the spec list each op's operands,
 * result data and error codes.
 */
#ifndef SANDQ_WORKER_OPS_H
#define SANDQ_WORKER_OPS_H

#include <jansson.h>
#include <stdbool.h>

#include "../proto/job.h"
#include "../proto/result.h"
#include "../store/store.h"

#define OPS_COMMIT_RETRIES 3		/* reruns of an op whose commit lost */
#define OPS_HISTORY_STR_MAX 4096	/* bytes of a string in a history row */
#define OPS_READ_MAX JOB_DATA_MAX	/* largest file fs.read returns */
/*
 * An import's own bounds, in what was uploaded (N bytes), never in what
 * the upload claims: the snapshot it writes is at most
 * OPS_IMPORT_GROWTH * N + OPS_IMPORT_SLACK bytes, and SQLite's heap may
 * grow by that, N (the upload's image) and OPS_IMPORT_SLACK again (page
 * caches, statements) while it runs. Its tree is bounded by the limits a
 * job on the sandbox has (ops_sandbox.c, import_caps()).
 */
#define OPS_IMPORT_GROWTH 2
#define OPS_IMPORT_SLACK ((uint64_t)16 << 20)

/* True for the ops ops_run() handles. */
#define OPS_HANDLES(op) ((op) >= OP_FS_READ && (op) <= OP_SANDBOX_LIST)

/*
 * Runs job j (op one of OP_FS_READ..OP_SANDBOX_LIST) against store st and
 * fills res: status ok, rejected (error_code one of sandbox_not_found,
 * sandbox_exists, not_found, exists, is_dir, not_dir, not_empty,
 * permission, too_large, bad_snapshot, invalid) or internal (store or
 * SQLite failure; "conflict" when the commit lost OPS_COMMIT_RETRIES + 1
 * times), error_message naming the sandbox and path or key; res->sandbox,
 * res->version and res->snapshot (the head after the op, when there is
 * one); res->data (one msgpack object, malloc'd, owned by res); and
 * started_at, finished_at and wall_ms. Fields of res it sets are expected
 * unset (NULL) on entry. Does not take ownership of st or j.
 * Returns 0 when res describes the outcome (whatever its status), or
 * -EINVAL for a call that is not an ops job (op out of range; res is then
 * still filled as internal).
 */
int ops_run(struct store *st, const struct job *j, struct result *res);
/*
 * ops_run() for a tenant with a storage quota (bytes; 0: none): an op whose
 * commit would take the tenant's sandboxes' heads past it is rejected
 * (storage_quota) and changes nothing; one that does not grow its sandbox
 * always passes.
 */
int ops_run_quota(struct store *st, const struct job *j, uint64_t quota,
    struct result *res);
/*
 * ops_run_quota() of a sandbox.create with from_image_dir, whose version 1
 * a sandbox on the image captured from the image's folder (worker/seed.c):
 * seed (len bytes, an AgentFS database sandq wrote; not owned) becomes
 * the new sandbox's head, with the create's history row, image and
 * workdir, as a create from files would.
 */
int ops_run_seeded(struct store *st, const struct job *j, uint64_t quota,
    const void *seed, size_t len, struct result *res);

/*
 * A string of a tool_calls row (runs' too, worker/job.c): n bytes of p as
 * a JSON string of at most OPS_HISTORY_STR_MAX bytes, invalid UTF-8 as
 * U+FFFD, a longer text ending in "...(N bytes)". Never NULL; the caller
 * owns the reference.
 */
json_t *ops_history_text(const void *p, size_t n);

#endif
