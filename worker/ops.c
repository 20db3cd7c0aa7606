/*
 * ops.c - the fs.*, kv.* and sandbox.* ops, run by a worker on the snapshot
 * store without starting any process. This file holds the entry point and
 * its dispatch table; the helpers every op uses, and loading and
 * committing, are in ops_common.c; the ops themselves in ops_fs.c,
 * ops_kv.c and ops_sandbox.c; ops_int.h is what they share.
 *
 * A read loads the sandbox's head (store_sandbox_get), its blob (the store
 * re-hashes it) and opens it with agentfs_open_trusted(). A write changes
 * that open copy, appends one tool_calls row naming the op (spec "History"),
 * serialises, puts the blob and moves the head by compare-and-set from the
 * version it read. When another worker moved the head first (-ESTALE) the
 * whole op runs again from a fresh load, up to OPS_COMMIT_RETRIES times.
 *
 * DESIGN
 * - The tenant comes from the dispatcher (j->tenant) and keys every store
 *   call, so an id of another tenant is simply "not found".
 * - Path rules (perms.h) are checked on the path before the snapshot is
 *   looked at, so an answer never tells whether a path the job may not see
 *   exists: none -> not_found for fs.read/stat/list, permission for the
 *   changing ops whatever exists.
 * - sandbox.import bytes are hostile: see ops_sandbox.c.
 * - Each op's result data is built in a msgpack sbuffer; lists whose length
 *   is known only at the end are packed into a second buffer and appended
 *   behind their array header (struct seq).
 *
 * Sections: Rules, Entry point.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "ops.h"
#include "ops_int.h"

/*** Rules ***/

/*
 * Compiles the job's preset and rules. The decoder (proto/job.c) has already
 * parsed each level and mapped the /workspace alias of patterns and paths to
 * the sandbox root.
 */
static int
perms_setup(struct ops *o)
{
	const struct job *j = o->j;
	struct err e = { 0 };

	if (j->nperms > PERMS_RULES_MAX)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "perms: more than %d rules", PERMS_RULES_MAX);
	if (perms_compile_job(&o->perms, j, &e) != 0)
		return ops__fail(o, ST_REJECTED, "invalid", "%s", e.msg);
	return 0;
}

/*** Entry point ***/

typedef int (*op_cb)(struct ops *o);

static const struct {
	op_cb run;		/* handler */
	bool perms;		/* compiles the path rules first */
	bool sandbox;		/* needs j->sandbox */
} op_table[OP__COUNT] = {
	[OP_FS_READ] = { ops__fs_read, true, true },
	[OP_FS_WRITE] = { ops__fs_write, true, true },
	[OP_FS_LIST] = { ops__fs_list, true, true },
	[OP_FS_STAT] = { ops__fs_stat, true, true },
	[OP_FS_DELETE] = { ops__fs_delete, true, true },
	[OP_KV_GET] = { ops__kv_get, false, true },
	[OP_KV_SET] = { ops__kv_set, false, true },
	[OP_KV_DELETE] = { ops__kv_delete, false, true },
	[OP_KV_KEYS] = { ops__kv_keys, false, true },
	[OP_SANDBOX_CREATE] = { ops__sandbox_create, false, true },
	[OP_SANDBOX_FORK] = { ops__sandbox_fork, false, true },
	[OP_SANDBOX_DELETE] = { ops__sandbox_delete, false, true },
	[OP_SANDBOX_EXPORT] = { ops__sandbox_export, false, true },
	[OP_SANDBOX_IMPORT] = { ops__sandbox_import, false, true },
	[OP_SANDBOX_HISTORY] = { ops__sandbox_history, false, true },
	[OP_SANDBOX_INFO] = { ops__sandbox_info, false, true },
	[OP_SANDBOX_LIST] = { ops__sandbox_list, false, false },
};

/* Undoes what an attempt built, so the next starts clean. */
static void
ctx_reset(struct ops *o)
{
	agentfs_close(o->fs);
	o->fs = NULL;
	free(o->head);
	o->head = NULL;
	o->head_len = 0;
	msgpack_sbuffer_clear(&o->out);
	o->have_data = false;
	o->have_sb = false;
	o->committed = false;
	o->id = o->j->sandbox != NULL ? o->j->sandbox : "";
}

/* Copies the outcome of a successful op into res. */
static void
result_fill(struct ops *o)
{
	struct result *res = o->res;

	res->status = ST_OK;
	if (o->have_data) {
		res->data = xmalloc(o->out.size);
		memcpy(res->data, o->out.data, o->out.size);
		res->data_len = o->out.size;
	}
}

int
ops_run(struct store *st, const struct job *j, struct result *res)
{
	return ops_run_quota(st, j, 0, res);
}

int
ops_run_quota(struct store *st, const struct job *j, uint64_t quota,
    struct result *res)
{
	return ops_run_seeded(st, j, quota, NULL, 0, res);
}

int
ops_run_seeded(struct store *st, const struct job *j, uint64_t quota,
    const void *seed, size_t len, struct result *res)
{
	struct ops o = { .st = st, .j = j, .res = res, .quota = quota,
	    .seed = seed, .seed_len = len };
	int64_t t0 = mono_ns();
	int rc = OPS_DONE, ret = 0;

	o.started_ms = now_ms();
	res->started_at = o.started_ms;
	msgpack_sbuffer_init(&o.out);
	msgpack_packer_init(&o.pk, &o.out, ops__sbuf_write);
	o.id = j->sandbox != NULL ? j->sandbox : "";
	if (!OPS_HANDLES(j->op) || op_table[j->op].run == NULL) {
		ops__fail(&o, ST_INTERNAL, "internal", "ops: op %d is not a "
		    "snapshot op", (int)j->op);
		ret = -EINVAL;
		goto out;
	}
	if (j->tenant == NULL || *j->tenant == '\0') {
		ops__fail(&o, ST_INTERNAL, "internal",
		    "%s: no tenant set by the dispatcher", job_op_name(j->op));
		goto out;
	}
	if (op_table[j->op].sandbox && j->sandbox == NULL) {
		ops__fail(&o, ST_REJECTED, "invalid",
		    "field 'sandbox': required by %s", job_op_name(j->op));
		goto out;
	}
	if (op_table[j->op].perms && perms_setup(&o) != 0)
		goto out;
	for (int attempt = 0; attempt <= OPS_COMMIT_RETRIES; attempt++) {
		ctx_reset(&o);
		if ((rc = op_table[j->op].run(&o)) != -ESTALE)
			break;
	}
	if (rc == -ESTALE)
		ops__fail(&o, ST_INTERNAL, "conflict",
		    "sandbox '%s': %d commits in a row lost to concurrent jobs",
		    o.id, OPS_COMMIT_RETRIES + 1);
	else if (rc == 0)
		result_fill(&o);
out:
	/* Every result of a sandbox op names it, with the head if known. */
	if (j->op != OP_SANDBOX_LIST && o.id[0] != '\0' &&
	    res->sandbox == NULL)
		res->sandbox = xstrdup(o.id);
	if (o.committed && res->snapshot == NULL) {
		res->version = o.new_version;
		res->snapshot = xstrdup(o.new_sha);
	} else if (o.have_sb && j->op != OP_SANDBOX_DELETE &&
	    res->snapshot == NULL) {
		res->version = o.sb.version;
		res->snapshot = xstrdup(o.sb.head);
	}
	agentfs_close(o.fs);
	free(o.head);
	perms_free(&o.perms);
	msgpack_sbuffer_destroy(&o.out);
	res->finished_at = now_ms();
	res->wall_ms = (uint64_t)((mono_ns() - t0) / 1000000);
	return ret;
}
