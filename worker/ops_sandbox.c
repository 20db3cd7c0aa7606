/*
 * ops_sandbox.c - the sandbox.* ops (create, fork, delete, export, import,
 * history, info, list), called through ops.c's dispatch table, and the
 * copy that sandbox.import makes of an uploaded snapshot.
 *
 * DESIGN. sandbox.import bytes are hostile: agentfs_open_untrusted()
 * refuses any schema object but the AgentFS tables (a view, a trigger, a
 * virtual table) and checks every page, then the tree is copied into a
 * database agentfs_new() made, entry by entry, so what is stored is
 * always a 0.4 database sandq wrote. An import stores only what a job on
 * the sandbox could materialise: materialise's own checks and caps
 * (workspace_tally_add()) under the job's files and disk_bytes, the claims
 * of the whole tree first (agentfs_claims()), and every file's size
 * against the bytes its chunks hold before it is read (the codec). Its
 * own bounds follow the upload, never its claims: its wall_ms, what it
 * writes (OPS_IMPORT_GROWTH), SQLite's heap while it runs. Legacy
 * json-file symlinks become native ones and legacy millisecond tool_calls
 * times become seconds. What is not copied: uid/gid, atime/ctime, nlink
 * (a hard-linked file becomes separate copies), kv created_at/updated_at,
 * the root's mode.
 *
 * Sections: Import, sandbox ops.
 */
#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../agentfs/agentfs.h"
#include "../proto/snapkey.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"
#include "ops.h"
#include "ops_int.h"

/*** Import ***/

/* The caps of an import, and the limit each one is, for its message. */
struct import_caps {
	struct workspace_tally t;	/* the caps, and what counts against them */
	const char *files_by;		/* what max_files is */
	const char *bytes_by;		/* what max_bytes is */
	const char *file_by;		/* what max_file_bytes is */
};

/* Copying an untrusted snapshot into a fresh one. */
struct copy {
	struct ops *o;		/* for rejections */
	struct agentfs *src;	/* untrusted, fully checked on open */
	struct agentfs *dst;	/* agentfs_new() */
	bool legacy;		/* src has the LocalSandbox layout */
	struct import_caps caps;	/* the tree's bounds */
	uint64_t dst_max;	/* bytes dst may grow to */
	uint64_t heap_max;	/* bytes SQLite's heap may grow by */
	uint64_t wall_ms;	/* the job's wall limit; 0: none */
	int64_t deadline_ns;	/* mono_ns() when wall_ms has passed; 0: none */
	int rc;			/* OPS_DONE once res is filled */
};

/*
 * The caps a job on the sandbox works under: what materialise applies
 * (WORKSPACE_LIMITS_DEFAULT: entries, depth, one file, all files) lowered
 * to the job's files and disk_bytes (the total, and any one file, which
 * RLIMIT_FSIZE bounds too). The dispatcher resolves l as for a run
 * (preset, the host's and the tenant's ceilings); 0 is no limit.
 */
static void
import_caps(const struct job_limits *l, struct import_caps *c)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;

	c->files_by = "the workspace's entry cap";
	c->bytes_by = "the workspace's size cap";
	c->file_by = "the workspace's file size cap";
	if (l->files != 0 && l->files < lim.max_files) {
		lim.max_files = (uint32_t)l->files;
		c->files_by = "the files limit";
	}
	if (l->disk_bytes != 0 && l->disk_bytes < lim.max_bytes) {
		lim.max_bytes = l->disk_bytes;
		c->bytes_by = "the disk limit";
	}
	if (l->disk_bytes != 0 && l->disk_bytes < lim.max_file_bytes) {
		lim.max_file_bytes = l->disk_bytes;
		c->file_by = "the disk limit";
	}
	workspace_tally_init(&c->t, &lim);
}

static int
copy_fail(struct copy *c, enum res_status st, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Fills res once (the first failure is the one reported); OPS_DONE. */
static int
copy_fail(struct copy *c, enum res_status st, const char *code,
    const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	if (c->rc != 0)
		return c->rc;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->rc = ops__fail(c->o, st, code, "import: %s", msg);
	return c->rc;
}

/*
 * A failure of the codec on either side: the import's own bounds (time,
 * the re-encoded size, SQLite's heap), a limit of the tree (names, paths),
 * a damaged or hostile upload, or, writing dst, our own failure.
 */
static int
copy_codec_fail(struct copy *c, int rc, bool writing, const char *path,
    const struct err *e)
{
	char where[220] = "";

	if (path != NULL)
		snprintf(where, sizeof(where), "'%.200s': ", path);
	if (rc == -ETIMEDOUT)
		return copy_fail(c, ST_REJECTED, "timeout", "%sstopped after "
		    "the wall_ms limit of %llu ms: %s", where,
		    (unsigned long long)c->wall_ms, ops__emsg(e));
	if (rc == -ENOMEM)
		return copy_fail(c, ST_REJECTED, "too_large", "%sSQLite "
		    "needed more than the import's memory bound of %llu bytes: "
		    "%s", where, (unsigned long long)c->heap_max, ops__emsg(e));
	if (rc == -ENOSPC && writing)
		return copy_fail(c, ST_REJECTED, "too_large", "%sthe "
		    "snapshot would pass %llu bytes, the import's bound (%d "
		    "times the upload and %llu MiB)", where,
		    (unsigned long long)c->dst_max,
		    OPS_IMPORT_GROWTH,
		    (unsigned long long)(OPS_IMPORT_SLACK >> 20));
	if (rc == -ENAMETOOLONG || rc == -EFBIG)
		return copy_fail(c, ST_REJECTED, "too_large", "%s%s", where,
		    ops__emsg(e));
	if (writing && rc != -EINVAL)
		return copy_fail(c, ST_INTERNAL, "store", "%s%s", where,
		    ops__emsg(e));
	return copy_fail(c, ST_REJECTED, "bad_snapshot", "%s%s", where,
	    ops__emsg(e));
}

/* A cap of c->caps refused ent (t.hit says which): the message names it. */
static int
copy_cap_fail(struct copy *c, const struct agentfs_entry *ent,
    const struct err *e)
{
	const struct workspace_limits *l = &c->caps.t.lim;

	switch (c->caps.t.hit) {
	case WORKSPACE_CAP_ENTRIES:
		return copy_fail(c, ST_REJECTED, "too_large", "'%.200s': more "
		    "than %u entries, %s", ent->path, l->max_files,
		    c->caps.files_by);
	case WORKSPACE_CAP_DEPTH:
		return copy_fail(c, ST_REJECTED, "too_large", "'%.200s': %u "
		    "directories deep, more than the depth limit %u", ent->path,
		    workspace_path_depth(ent->path), l->max_depth);
	case WORKSPACE_CAP_FILE:
		return copy_fail(c, ST_REJECTED, "too_large", "'%.200s': %llu "
		    "bytes, more than %s %llu", ent->path,
		    (unsigned long long)ent->size, c->caps.file_by,
		    (unsigned long long)l->max_file_bytes);
	case WORKSPACE_CAP_BYTES:
		return copy_fail(c, ST_REJECTED, "too_large", "'%.200s': files "
		    "hold more than %s %llu bytes", ent->path, c->caps.bytes_by,
		    (unsigned long long)l->max_bytes);
	case WORKSPACE_CAP_NONE:
		break;
	}
	return copy_fail(c, ST_REJECTED, "bad_snapshot", "%s", ops__emsg(e));
}

static int
copy_entry(const struct agentfs_entry *ent, void *arg)
{
	struct copy *c = arg;
	struct err e = { 0 };
	void *data = NULL;
	size_t len = 0;
	int rc = 0;

	/*
	 * What could not be materialised must not be stored either: the
	 * checks and caps of materialise, under the job's limits, before a
	 * byte of the entry is read.
	 */
	if (workspace_tally_add(&c->caps.t, ent, true, &e) != 0)
		return copy_cap_fail(c, ent, &e);
	/* SQLite checks the deadline inside long statements; many short
	 * ones are checked here. */
	if (c->deadline_ns != 0 && mono_ns() > c->deadline_ns) {
		err_set(&e, -ETIMEDOUT, "at '%.200s'", ent->path);
		return copy_codec_fail(c, -ETIMEDOUT, false, NULL, &e);
	}
	switch (ent->kind) {
	case AGENTFS_DIR:
		rc = agentfs_mkdir(c->dst, ent->path, ent->mode & 07777, &e);
		break;
	case AGENTFS_FILE:
		/* The codec refuses a size its chunks do not hold before it
		 * allocates the size (agentfs_open_untrusted()). */
		if ((rc = agentfs_read(c->src, ent->path, &data, &len,
		    &e)) != 0)
			return copy_codec_fail(c, rc, false, ent->path, &e);
		rc = agentfs_write(c->dst, ent->path, data, len,
		    ent->mode & 07777, &e);
		free(data);
		break;
	case AGENTFS_SYMLINK:
		/* Native whatever the form: legacy json-file links upgrade. */
		rc = agentfs_symlink(c->dst, ent->target, ent->path, &e);
		break;
	case AGENTFS_SPECIAL:
		/* workspace_tally_add() refuses these. */
		return copy_fail(c, ST_REJECTED, "bad_snapshot", "'%.200s': "
		    "special files are not allowed", ent->path);
	}
	if (rc == 0)
		rc = agentfs_set_mtime(c->dst, ent->path, ent->mtime, &e);
	if (rc != 0)
		return copy_codec_fail(c, rc, true, ent->path, &e);
	return 0;
}

static int
copy_kv(const char *key, void *arg)
{
	struct copy *c = arg;
	struct err e = { 0 };
	char *value = NULL;
	size_t klen = strlen(key);
	int rc;

	/* The bounds of kv.set: a value is parsed as JSON to be checked. */
	if (klen > JOB_KV_KEY_MAX)
		return copy_fail(c, ST_REJECTED, "too_large", "kv: a key of %zu "
		    "bytes, more than the key limit %u", klen,
		    (unsigned)JOB_KV_KEY_MAX);
	if ((rc = agentfs_kv_get(c->src, key, &value, &e)) != 0)
		return copy_codec_fail(c, rc, false, NULL, &e);
	if (strlen(value) > JOB_KV_VALUE_MAX) {
		free(value);
		return copy_fail(c, ST_REJECTED, "too_large", "kv key '%.200s': "
		    "a value of more than %u bytes, the value limit", key,
		    JOB_KV_VALUE_MAX);
	}
	rc = agentfs_kv_set(c->dst, key, value, &e);
	free(value);
	if (rc != 0)
		return copy_codec_fail(c, rc, true, NULL, &e);
	return 0;
}

/*
 * Whether a tool_calls time is in milliseconds. LocalSandbox's legacy rows
 * are; agentfs-sdk 0.5 writes the same legacy layout with seconds. Decided
 * per row: 1e11 is the year 5138 in seconds and 1973 in milliseconds.
 */
static bool
time_is_ms(int64_t t)
{
	return t >= 100000000000LL;
}

/* Copies one row, millisecond times converted to 0.4 seconds. */
static int
copy_tool_call(const struct agentfs_tool_call *tc, void *arg)
{
	struct copy *c = arg;
	struct agentfs_tool_call t = *tc;
	struct err e = { 0 };
	int rc;

	if (c->legacy && time_is_ms(tc->started_at)) {
		t.started_at = tc->started_at / 1000;
		t.completed_at = tc->completed_at / 1000;
		/* Legacy duration_ms is 1000 times too big; the times are not. */
		if (tc->completed_at != 0 && tc->completed_at >= tc->started_at)
			t.duration_ms = tc->completed_at - tc->started_at;
		else
			t.duration_ms = tc->duration_ms / 1000;
	}
	rc = agentfs_tool_call_put(c->dst, &t, &e);
	if (rc == -EINVAL)
		return copy_fail(c, ST_REJECTED, "bad_snapshot", "tool_calls "
		    "row %lld: %s", (long long)tc->id, ops__emsg(&e));
	if (rc != 0)
		return copy_codec_fail(c, rc, true, NULL, &e);
	return 0;
}

/*
 * Refuses a tree that claims more entries or file bytes than the caps
 * allow, from one query, before the walk lists a directory: a 150,000
 * entry upload costs a count, not 150,000 entries in memory.
 */
static int
copy_claims_check(struct copy *c)
{
	const struct workspace_limits *l = &c->caps.t.lim;
	struct err e = { 0 };
	uint64_t paths = 0, bytes = 0;
	int rc;

	if ((rc = agentfs_claims(c->src, &paths, &bytes, &e)) != 0)
		return copy_codec_fail(c, rc, false, NULL, &e);
	if (paths > l->max_files)
		return copy_fail(c, ST_REJECTED, "too_large", "%llu entries, "
		    "more than %s %u", (unsigned long long)paths,
		    c->caps.files_by, l->max_files);
	if (bytes > l->max_bytes)
		return copy_fail(c, ST_REJECTED, "too_large", "files of %llu "
		    "bytes, more than %s %llu", (unsigned long long)bytes,
		    c->caps.bytes_by, (unsigned long long)l->max_bytes);
	return 0;
}

/* Opens the upload, checks what it claims, and copies it into c->dst. */
static int
copy_run(struct copy *c)
{
	const struct job *j = c->o->j;
	struct err e = { 0 };
	int rc;

	if (c->wall_ms > 0)
		c->deadline_ns = mono_ns() + (int64_t)c->wall_ms * 1000000;
	rc = agentfs_open_untrusted(j->snapshot, j->snapshot_len,
	    c->deadline_ns, &c->src, &e);
	if (rc != 0)
		return copy_codec_fail(c, rc, false, NULL, &e);
	c->legacy = agentfs_is_legacy(c->src);
	if ((rc = copy_claims_check(c)) != 0)
		return rc;
	if ((rc = agentfs_new(&c->dst, &e)) != 0 ||
	    (rc = agentfs_size_limit(c->dst, c->dst_max, &e)) != 0)
		return copy_fail(c, ST_INTERNAL, "store", "%s", ops__emsg(&e));
	rc = agentfs_walk(c->src, copy_entry, c, &e);
	if (rc == 0)
		rc = agentfs_kv_keys(c->src, NULL, copy_kv, c, &e);
	if (rc == 0)
		rc = agentfs_tool_call_each(c->src, copy_tool_call, c, &e);
	/* A callback filled res; otherwise reading src failed. */
	if (rc != 0)
		return copy_codec_fail(c, rc, false, NULL, &e);
	return 0;
}

/*
 * Checks j->snapshot and re-encodes it into o->fs, a new database (see
 * DESIGN), under the import's bounds: the caps of a job on the sandbox,
 * its wall_ms, and memory in proportion to the upload (OPS_IMPORT_GROWTH,
 * OPS_IMPORT_SLACK). 0 or OPS_DONE.
 */
static int
import_build(struct ops *o)
{
	const struct job *j = o->j;
	struct copy c = { .o = o, .wall_ms = j->limits.wall_ms };
	int64_t hard, soft;

	if (j->snapshot == NULL || j->snapshot_len == 0)
		return ops__fail(o, ST_REJECTED, "invalid", "field 'snapshot': "
		    "required by %s", job_op_name(j->op));
	if (j->snapshot_len > JOB_SNAPSHOT_MAX)
		return ops__fail(o, ST_REJECTED, "too_large",
		    "field 'snapshot': over %u bytes", JOB_SNAPSHOT_MAX);
	import_caps(&j->limits, &c.caps);
	c.dst_max = OPS_IMPORT_GROWTH * (uint64_t)j->snapshot_len +
	    OPS_IMPORT_SLACK;
	c.heap_max = (uint64_t)j->snapshot_len + c.dst_max + OPS_IMPORT_SLACK;
	/*
	 * SQLite's heap limit is the process's: the worker runs one job at a
	 * time, so for this import it is what the worker's connections hold
	 * now plus the import's bound, and the old limits come back after.
	 */
	hard = sqlite3_hard_heap_limit64(-1);
	soft = sqlite3_soft_heap_limit64(-1);
	sqlite3_hard_heap_limit64(sqlite3_memory_used() + (int64_t)c.heap_max);
	(void)copy_run(&c);
	sqlite3_hard_heap_limit64(hard);
	sqlite3_soft_heap_limit64(soft);
	agentfs_close(c.src);
	/* The copy is ours now: its history row must not meet the bound. */
	if (c.rc == 0 && agentfs_size_limit(c.dst, AGENTFS_BLOB_MAX, NULL) != 0)
		copy_fail(&c, ST_INTERNAL, "store", "cannot lift the size bound");
	if (c.rc != 0) {
		agentfs_close(c.dst);
		return OPS_DONE;
	}
	o->fs = c.dst;
	return 0;
}

/*
 * A create from bytes the tenant already stores: 1, with the blob's key
 * in sha, when the upload is byte for byte a blob one of the tenant's own
 * sandboxes names (a head or a kept history row), which sandq wrote and
 * checked when it was committed; the sandbox is then made as a fork of
 * that blob (store_sandbox_create_named()), with no re-encode and no
 * history row added to it. 0 when the bytes are not such a blob (the
 * import then checks and copies them); OPS_DONE with res filled when
 * they are but hold more than the caps of a job on the sandbox allow,
 * as the import would refuse them. Costs hashing the upload once.
 */
static int
import_known(struct ops *o, char sha[STORE_SHA_HEX + 1])
{
	const struct job *j = o->j;
	struct copy c = { .o = o };
	struct err e = { 0 };
	int rc;

	if (j->snapshot == NULL || j->snapshot_len == 0 ||
	    j->snapshot_len > JOB_SNAPSHOT_MAX)
		return 0;
	if (snapkey_of(j->snapshot, j->snapshot_len, sha) != 0 ||
	    store_tenant_has_blob(o->st, j->tenant, sha, &e) != 1)
		return 0;
	import_caps(&j->limits, &c.caps);
	/* Read in place: a stored blob opens as a trusted image does. */
	if (agentfs_open_cow(j->snapshot, j->snapshot_len, NULL, 0, &c.src, &e) != 0)
		return 0;
	rc = copy_claims_check(&c);
	agentfs_close(c.src);
	return rc != 0 ? OPS_DONE : 1;
}

/*** sandbox ops ***/

/* The info map of o->id after a create or import. */
static int
pk_new_info(struct ops *o)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_get(o->st, o->j->tenant, o->id, &sb, &e);
	if (rc != 0)
		return ops__store_fail(o, rc, o->id, &e);
	ops__pk_info(&o->pk, &sb, true, o->blob_len);
	o->have_data = true;
	return 0;
}

/*
 * Creates o->id at version 1 naming the stored snapshot sha, one of the
 * tenant's (store_sandbox_create_named()): 0 with the new sandbox's info,
 * -ENOENT when no sandbox of the tenant names it, -EEXIST when o->id
 * exists, OPS_DONE with res filled on a store failure.
 */
static int
create_named(struct ops *o, const char *labels, const char *sha)
{
	const struct job *j = o->j;
	struct err e = { 0 };
	int64_t size;
	int rc;

	rc = store_sandbox_create_named(o->st, j->tenant, o->id, sha, labels,
	    j->image, j->workdir, &e);
	if (rc == -ENOENT || rc == -EEXIST)
		return rc;
	if (rc == 0 && (size = store_blob_size(o->st, sha, &e)) < 0)
		rc = (int)size;
	if (rc != 0)
		return ops__store_fail(o, rc, o->id, &e);
	o->committed = true;
	o->new_version = 1;
	o->blob_len = (size_t)size;
	snprintf(o->new_sha, sizeof(o->new_sha), "%s", sha);
	return pk_new_info(o);
}

/*
 * Creates o->id from an upload import_known() finds stored: 1 when it is
 * not (the caller imports it), otherwise what the op returns: 0 with the
 * new sandbox's info, OPS_DONE with res filled, -EEXIST when the sandbox
 * exists by now.
 */
static int
create_known(struct ops *o, const char *labels)
{
	char sha[STORE_SHA_HEX + 1];
	int rc;

	if ((rc = import_known(o, sha)) != 1)
		return rc == 0 ? 1 : rc;
	rc = create_named(o, labels, sha);
	return rc == -ENOENT ? 1 : rc;	/* the sandbox naming it went: copy */
}

/* Creates the directories above path ("/a/b/f": /a, /a/b) as needed. */
static int
mkdir_parents(struct ops *o, const char *path)
{
	char buf[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL, *p;
	int rc;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = strchr(buf + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
		*p = '\0';
		rc = agentfs_stat(o->fs, buf, &ent, &target, &e);
		free(target);
		target = NULL;
		if (rc == -ENOENT)
			rc = agentfs_mkdir(o->fs, buf, 0755, &e);
		else if (rc == 0 && ent.kind != AGENTFS_DIR)
			rc = err_set(&e, -ENOTDIR, "%s: not a directory", buf);
		if (rc != 0)
			return ops__fs_fail(o, rc, &e);
		*p = '/';
	}
	return 0;
}

/* Seeds j->files into o->fs: files 0644, parent directories 0755. */
static int
seed_files(struct ops *o, json_t *list)
{
	char path[JOB_PATH_MAX + 3];
	struct err e = { 0 };
	int rc;

	for (size_t i = 0; i < o->j->nfiles; i++) {
		const struct job_file *f = &o->j->files[i];
		if (f->path == NULL || strlen(f->path) > JOB_PATH_MAX)
			return ops__fail(o, ST_REJECTED, "invalid",
			    "field 'files': entry %zu has no valid path",
			    i + 1);
		if (perms_normalize_path(f->path, path, sizeof(path), &e) != 0)
			return ops__fail(o, ST_REJECTED, "invalid",
			    "field 'files': %s", e.msg);
		if (strcmp(path, "/") == 0)
			return ops__fail(o, ST_REJECTED, "invalid",
			    "field 'files': '%s' names the root", f->path);
		if ((rc = ops__path_names_check(o, path)) != 0 ||
		    (rc = mkdir_parents(o, path)) != 0)
			return rc;
		rc = agentfs_write(o->fs, path, f->data != NULL ? f->data :
		    (const uint8_t *)"", f->len, 0644, &e);
		if (rc != 0)
			return ops__fs_fail(o, rc, &e);
		json_array_append_new(list, ops_history_text(path, strlen(path)));
	}
	return 0;
}

int
ops__sandbox_create(struct ops *o)
{
	const struct job *j = o->j;
	struct store_sandbox sb;
	struct err e = { 0 };
	char *labels = NULL;
	json_t *params;
	int rc;

	if (j->snapshot != NULL && j->nfiles > 0)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "fields 'snapshot' and 'files' cannot be used together");
	/* Fail fast before building anything; create still checks. */
	rc = store_sandbox_get(o->st, j->tenant, o->id, &sb, &e);
	if (rc == 0)
		return ops__store_fail(o, -EEXIST, o->id, &e);
	if (rc != -ENOENT)
		return ops__store_fail(o, rc, o->id, &e);
	if ((rc = ops__labels_json(o, &labels)) != 0)
		return rc;
	params = json_object();
	if (j->image != NULL)
		json_object_set_new(params, "image", json_string(j->image));
	if (j->workdir != NULL)
		json_object_set_new(params, "workdir", json_string(j->workdir));
	if (j->from_image_dir != NULL) {
		/* Captured from the image by a sandbox on it (worker/seed.c). */
		json_object_set_new(params, "from_image_dir",
		    json_string(j->from_image_dir));
		if (o->seed == NULL)
			rc = ops__fail(o, ST_INTERNAL, "internal", "sandbox '%s': a "
			    "create from an image's folder was not seeded", o->id);
		else if ((rc = agentfs_open_trusted(o->seed, o->seed_len, &o->fs,
		    &e)) != 0)
			rc = ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': the "
			    "seeded snapshot: %s", o->id, ops__emsg(&e));
	} else if (j->snapshot_key != NULL) {
		/* A snapshot the tenant stores, named: a fork of it. */
		json_decref(params);
		rc = create_named(o, labels, j->snapshot_key);
		free(labels);
		if (rc == -ENOENT)
			return ops__fail(o, ST_REJECTED, "snapshot_not_found",
			    "field 'snapshot_key': no sandbox of this tenant has "
			    "snapshot %s (send its bytes as 'snapshot')", j->snapshot_key);
		if (rc == -EEXIST)
			return ops__store_fail(o, -EEXIST, o->id, &e);
		return rc;
	} else if (j->snapshot != NULL) {
		if ((rc = create_known(o, labels)) != 1) {
			json_decref(params);
			free(labels);
			if (rc == -EEXIST)
				return ops__store_fail(o, -EEXIST, o->id, &e);
			return rc;
		}
		rc = import_build(o);
		json_object_set_new(params, "snapshot",
		    json_integer((json_int_t)j->snapshot_len));
	} else if ((rc = agentfs_new(&o->fs, &e)) != 0) {
		rc = ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
	} else {
		json_t *list = json_array();

		json_object_set_new(params, "files", list);
		rc = seed_files(o, list);
	}
	if (rc != 0) {
		json_decref(params);
		free(labels);
		return rc;
	}
	rc = ops__commit(o, params, true, labels);
	free(labels);
	/* Created by another job since the check above. */
	if (rc == -EEXIST)
		return ops__store_fail(o, -EEXIST, o->id, &e);
	if (rc != 0)
		return rc;
	return pk_new_info(o);
}

int
ops__sandbox_import(struct ops *o)
{
	const struct job *j = o->j;
	struct err e = { 0 };
	char *labels = NULL;
	bool create;
	json_t *params;
	int rc;

	/* A new sandbox from bytes the tenant stores: as sandbox.create. */
	rc = store_sandbox_get(o->st, j->tenant, o->id, &o->sb, &e);
	if (rc == -ENOENT) {
		if ((rc = ops__labels_json(o, &labels)) != 0)
			return rc;
		rc = create_known(o, labels);
		free(labels);
		labels = NULL;
		if (rc == -EEXIST)
			return -ESTALE;	/* made meanwhile: run again */
		if (rc != 1)
			return rc;
	}
	err_clear(&e);
	if ((rc = import_build(o)) != 0)
		return rc;
	rc = store_sandbox_get(o->st, j->tenant, o->id, &o->sb, &e);
	if (rc != 0 && rc != -ENOENT)
		return ops__store_fail(o, rc, o->id, &e);
	create = rc == -ENOENT;
	o->have_sb = !create;
	/* An existing sandbox keeps what it runs on: a differing ask is refused. */
	if (!create && ((j->image != NULL && strcmp(j->image, o->sb.image) != 0) ||
	    (j->workdir != NULL && strcmp(j->workdir, o->sb.workdir) != 0)))
		return ops__fail(o, ST_REJECTED, "invalid", "sandbox '%s' runs on %s%s"
		    " with its files at %s; an import into it cannot change that",
		    o->id, o->sb.image[0] ? "image " : "its jobs' own image",
		    o->sb.image, o->sb.workdir[0] ? o->sb.workdir : "/workspace");
	/* Labels name a new sandbox; an existing one keeps its own. */
	if (create && (rc = ops__labels_json(o, &labels)) != 0)
		return rc;
	params = json_object();
	json_object_set_new(params, "snapshot",
	    json_integer((json_int_t)j->snapshot_len));
	rc = ops__commit(o, params, create, labels);
	free(labels);
	/* Created by another job meanwhile: run again, as a new version. */
	if (rc == -EEXIST)
		return -ESTALE;
	if (rc != 0)
		return rc;
	return pk_new_info(o);
}

int
ops__sandbox_fork(struct ops *o)
{
	const struct job *j = o->j;
	struct err e = { 0 };
	int rc;

	if (j->to == NULL || *j->to == '\0')
		return ops__fail(o, ST_REJECTED, "invalid", "field 'to': required by "
		    "sandbox.fork");
	/*
	 * The fork is one row naming the same blob (O(1)), so it keeps the
	 * source's labels: the store has no label update, and labels given
	 * here would be silently lost, so they are refused.
	 */
	if (j->nlabels > 0)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'labels': a fork keeps the labels of sandbox '%s'",
		    o->id);
	rc = store_sandbox_fork(o->st, j->tenant, o->id, j->to, &e);
	if (rc == -ENOENT)
		return ops__store_fail(o, rc, o->id, &e);
	if (rc != 0)
		return ops__store_fail(o, rc, j->to, &e);
	/* The result describes the new sandbox. */
	o->id = j->to;
	if ((rc = ops__head_get(o)) != 0)
		return rc;
	ops__pk_info(&o->pk, &o->sb, false, 0);
	o->have_data = true;
	return 0;
}

int
ops__sandbox_delete(struct ops *o)
{
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_delete(o->st, o->j->tenant, o->id, &e);
	if (rc != 0)
		return ops__store_fail(o, rc, o->id, &e);
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

int
ops__sandbox_export(struct ops *o)
{
	void *blob = NULL;
	size_t len = 0;
	int rc;

	if ((rc = ops__head_get(o)) != 0 ||
	    (rc = ops__head_blob(o, &blob, &len)) != 0)
		return rc;
	msgpack_pack_bin_with_body(&o->pk, blob, len);
	o->have_data = true;
	free(blob);
	return 0;
}

static int
version_cb(const struct store_version *v, void *arg)
{
	struct seq *s = arg;

	msgpack_pack_map(&s->pk, 3);
	pack_kv_u64(&s->pk, "version", v->version);
	pack_kv_str(&s->pk, "snapshot", v->sha256);
	pack_kv_i64(&s->pk, "created_at", v->created_at);
	s->n++;
	return 0;
}

/* tool_calls rows as history entries, times in ms. */
struct calls {
	struct seq seq;		/* packed rows */
};

static int
call_cb(const struct agentfs_tool_call *tc, void *arg)
{
	struct calls *c = arg;
	msgpack_packer *pk = &c->seq.pk;
	int64_t unit = time_is_ms(tc->started_at) ? 1 : 1000;

	msgpack_pack_map(pk, 9);
	pack_kv_i64(pk, "id", tc->id);
	pack_kv_str(pk, "name", tc->name);
	ops__pk_kv_opt(pk, "parameters", tc->parameters);
	ops__pk_kv_opt(pk, "result", tc->result);
	ops__pk_kv_opt(pk, "error", tc->error);
	pack_kv_str(pk, "status", tc->status);
	pack_kv_i64(pk, "started_at", tc->started_at * unit);
	pack_str(pk, "completed_at");
	if (tc->completed_at != 0)
		msgpack_pack_int64(pk, tc->completed_at * unit);
	else
		msgpack_pack_nil(pk);
	pack_kv_i64(pk, "duration_ms", tc->duration_ms);
	c->seq.n++;
	return 0;
}

int
ops__sandbox_history(struct ops *o)
{
	struct err e = { 0 };
	struct calls calls;
	struct seq vers;
	int rc;

	if ((rc = ops__load(o)) != 0)
		return rc;
	ops__seq_init(&vers);
	ops__seq_init(&calls.seq);
	rc = store_sandbox_history(o->st, o->j->tenant, o->id, version_cb,
	    &vers, &e);
	if (rc != 0) {
		rc = ops__store_fail(o, rc, o->id, &e);
		goto out;
	}
	if ((rc = agentfs_tool_call_each(o->fs, call_cb, &calls, &e)) != 0) {
		rc = ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
		goto out;
	}
	msgpack_pack_map(&o->pk, 2);
	pack_str(&o->pk, "versions");
	ops__seq_finish(&vers, &o->pk);
	pack_str(&o->pk, "calls");
	ops__seq_finish(&calls.seq, &o->pk);
	o->have_data = true;
	return 0;
out:
	ops__seq_destroy(&vers);
	ops__seq_destroy(&calls.seq);
	return rc;
}

int
ops__sandbox_info(struct ops *o)
{
	struct err e = { 0 };
	int64_t size;
	int rc;

	if ((rc = ops__head_get(o)) != 0)
		return rc;
	if ((size = store_blob_size(o->st, o->sb.head, &e)) < 0)
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id, e.msg);
	ops__pk_info(&o->pk, &o->sb, true, (uint64_t)size);
	o->have_data = true;
	return 0;
}

static int
list_sandbox_cb(const struct store_sandbox *sb, void *arg)
{
	struct seq *s = arg;

	ops__pk_info(&s->pk, sb, false, 0);
	s->n++;
	return 0;
}

int
ops__sandbox_list(struct ops *o)
{
	struct err e = { 0 };
	struct seq s;
	int rc;

	ops__seq_init(&s);
	rc = store_sandbox_list(o->st, o->j->tenant, list_sandbox_cb, &s, &e);
	if (rc != 0) {
		ops__seq_destroy(&s);
		return ops__fail(o, ST_INTERNAL, "store", "sandbox list: %s",
		    ops__emsg(&e));
	}
	ops__seq_finish(&s, &o->pk);
	o->have_data = true;
	return 0;
}
