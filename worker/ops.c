/*
 * ops.c - the fs.*, kv.* and sandbox.* ops, run by a worker on the snapshot
 * store without starting any process.
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
 * - sandbox.import bytes are hostile: agentfs_open_blob() checks every page,
 *   then the tree is copied into a database agentfs_new() made, entry by
 *   entry, with sandq's own name rules (workspace_name_is_valid()), so what
 *   is stored is always a 0.4 database sandq wrote (no trigger, view or
 *   odd table of the upload survives). Legacy json-file symlinks become
 *   native ones and legacy millisecond tool_calls times become seconds.
 *   What is not copied: uid/gid, atime/ctime, nlink (a hard-linked file
 *   becomes separate copies), kv created_at/updated_at, the root's mode.
 * - Each op's result data is built in a msgpack sbuffer; lists whose length
 *   is known only at the end are packed into a second buffer and appended
 *   behind their array header (struct seq).
 *
 * Sections: Helpers, Loading and committing, fs ops, kv ops, Import,
 * sandbox ops, Entry point.
 */
#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../store/agentfs.h"
#include "../store/perms.h"
#include "../store/workspace.h"
#include "ops.h"

/* A handler's outcome besides 0 (ok) and -ESTALE (run again). */
#define OPS_DONE 1		/* res holds a rejection or an internal error */

/* One run of one op. Reset between attempts by ctx_reset(). */
struct ops {
	struct store *st;			/* the store (not owned) */
	const struct job *j;			/* the job (not owned) */
	struct result *res;			/* filled on rejection */
	const char *id;				/* j->sandbox, or "" */
	struct perms perms;			/* fs.* path rules */
	struct store_sandbox sb;		/* head loaded (have_sb) */
	bool have_sb;
	struct agentfs *fs;			/* loaded or new snapshot */
	void *head;				/* the loaded head's bytes, or NULL */
	size_t head_len;			/* their length */
	msgpack_sbuffer out;			/* result data */
	msgpack_packer pk;			/* packs into out */
	bool have_data;				/* out holds one object */
	uint64_t started_ms;			/* epoch ms the job began */
	bool committed;				/* new_sha is the head */
	char new_sha[STORE_SHA_HEX + 1];	/* head after a commit */
	uint64_t new_version;			/* its version */
	size_t blob_len;			/* bytes of the committed blob */
};

/* An array whose length is known at the end (see DESIGN). */
struct seq {
	msgpack_sbuffer buf;	/* packed elements */
	msgpack_packer pk;	/* packs into buf */
	uint32_t n;		/* elements packed */
};

/*** Helpers ***/

/* msgpack's write callback: out of memory is fatal, as with xmalloc(). */
static int
sbuf_write(void *data, const char *buf, size_t len)
{
	if (msgpack_sbuffer_write(data, buf, len) != 0)
		fatalx("ops: out of memory packing a result");
	return 0;
}

static void
pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void
pk_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
	pk_str(pk, k);
	pk_str(pk, v);
}

static void
pk_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
	pk_str(pk, k);
	msgpack_pack_uint64(pk, v);
}

static void
pk_kv_i64(msgpack_packer *pk, const char *k, int64_t v)
{
	pk_str(pk, k);
	msgpack_pack_int64(pk, v);
}

/* Text or nil. */
static void
pk_kv_opt(msgpack_packer *pk, const char *k, const char *v)
{
	pk_str(pk, k);
	if (v != NULL)
		pk_str(pk, v);
	else
		msgpack_pack_nil(pk);
}

static void
seq_init(struct seq *s)
{
	msgpack_sbuffer_init(&s->buf);
	msgpack_packer_init(&s->pk, &s->buf, sbuf_write);
	s->n = 0;
}

/* Packs the array header and the elements into pk; frees s. */
static void
seq_finish(struct seq *s, msgpack_packer *pk)
{
	msgpack_pack_array(pk, s->n);
	if (s->buf.size > 0)
		sbuf_write(pk->data, s->buf.data, s->buf.size);
	msgpack_sbuffer_destroy(&s->buf);
}

static void
seq_destroy(struct seq *s)
{
	msgpack_sbuffer_destroy(&s->buf);
}

/* Fills res with an error; returns OPS_DONE for the handler to return. */
static int
fail(struct ops *o, enum res_status st, const char *code, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));

static int
fail(struct ops *o, enum res_status st, const char *code, const char *fmt,
    ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	result_set_error(o->res, st, code, "%s", msg);
	return OPS_DONE;
}

/* An err message without its module prefix ("agentfs: ", "store: "). */
static const char *
emsg(const struct err *e)
{
	const char *m = e->msg;

	if (strncmp(m, "agentfs: ", 9) == 0)
		return m + 9;
	if (strncmp(m, "store: ", 7) == 0)
		return m + 7;
	return m;
}

/*
 * Maps an agentfs errno about a path of sandbox o->id to the spec's codes.
 * Anything that is not the request's fault (SQLite, memory) is internal.
 */
static int
fs_fail(struct ops *o, int rc, const struct err *e)
{
	const char *code;

	switch (rc) {
	case -ENOENT:
		code = "not_found";
		break;
	case -EEXIST:
		code = "exists";
		break;
	case -EISDIR:
		code = "is_dir";
		break;
	case -ENOTDIR:
		code = "not_dir";
		break;
	case -ENOTEMPTY:
		code = "not_empty";
		break;
	case -EFBIG:
		code = "too_large";
		break;
	case -EINVAL:
	case -ENAMETOOLONG:
	case -EBUSY:
		code = "invalid";
		break;
	default:
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(e));
	}
	return fail(o, ST_REJECTED, code, "sandbox '%s': %s", o->id, emsg(e));
}

/*
 * A JSON string of at most OPS_HISTORY_STR_MAX bytes of p: invalid UTF-8
 * becomes U+FFFD, and a longer text ends in "...(N bytes)".
 */
json_t *
ops_history_text(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t cap = n < OPS_HISTORY_STR_MAX ? n : OPS_HISTORY_STR_MAX;
	char *buf = xmalloc(cap * 3 + 32), *o = buf;
	json_t *v;

	for (size_t i = 0; i < cap;) {
		unsigned char c = s[i];
		size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 :
		    (c >> 3) == 30 ? 4 : 0;
		bool ok = len > 0 && i + len <= cap && c != 0;

		for (size_t k = 1; ok && k < len; k++)
			ok = (s[i + k] & 0xc0) == 0x80;
		if (ok && len == 2 && c < 0xc2)
			ok = false;	/* overlong */
		if (ok && len == 3 && ((c == 0xe0 && s[i + 1] < 0xa0) ||
		    (c == 0xed && s[i + 1] >= 0xa0)))
			ok = false;	/* overlong or a surrogate */
		if (ok && len == 4 && ((c == 0xf0 && s[i + 1] < 0x90) || c > 0xf4 ||
		    (c == 0xf4 && s[i + 1] >= 0x90)))
			ok = false;
		if (!ok) {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(o, s + i, len);
		o += len;
		i += len;
	}
	if (cap < n)
		o += sprintf(o, "...(%zu bytes)", n);
	v = json_stringn(buf, (size_t)(o - buf));
	free(buf);
	return v != NULL ? v : json_string("");
}

static void
jset_str(json_t *obj, const char *k, const char *v)
{
	json_object_set_new(obj, k, ops_history_text(v, strlen(v)));
}

/*
 * Compiles the job's preset and rules. The decoder (payload.c) has already
 * mapped the /workspace alias of patterns and paths to the sandbox root.
 */
static int
perms_setup(struct ops *o)
{
	const struct job *j = o->j;
	struct perm_rule *rules = NULL;
	struct err e = { 0 };
	int rc = 0;

	if (j->nperms > PERMS_RULES_MAX)
		return fail(o, ST_REJECTED, "invalid", "perms: more than %d "
		    "rules", PERMS_RULES_MAX);
	rules = xcalloc(j->nperms + 1, sizeof(*rules));
	for (size_t i = 0; i < j->nperms; i++) {
		if (j->perms[i].pattern == NULL || j->perms[i].level == NULL ||
		    perms_parse_level(j->perms[i].level, &rules[i].level) != 0) {
			rc = fail(o, ST_REJECTED, "invalid", "path rule %zu: "
			    "bad level '%s'", i + 1, j->perms[i].level ?
			    j->perms[i].level : "");
			goto out;
		}
		rules[i].pattern = j->perms[i].pattern;
	}
	if (perms_compile(&o->perms, rules, j->nperms, j->perm_preset,
	    &e) != 0)
		rc = fail(o, ST_REJECTED, "invalid", "%s", e.msg);
out:
	free(rules);
	return rc;
}

/*
 * The job's path, normalised into out ("/a/b", "/" the root), or "/" when
 * absent and root_ok. The root is refused unless root_ok.
 */
static int
path_get(struct ops *o, bool root_ok, char *out, size_t outsz)
{
	struct err e = { 0 };

	if (o->j->path == NULL) {
		if (!root_ok)
			return fail(o, ST_REJECTED, "invalid", "field 'path': "
			    "required by %s", job_op_name(o->j->op));
		snprintf(out, outsz, "/");
		return 0;
	}
	if (perms_normalize_path(o->j->path, out, outsz, &e) != 0)
		return fail(o, ST_REJECTED, "invalid", "field 'path': %s",
		    e.msg);
	if (out[0] != '/')
		return fail(o, ST_REJECTED, "invalid", "field 'path': '%s' is "
		    "not absolute", out);
	if (!root_ok && strcmp(out, "/") == 0)
		return fail(o, ST_REJECTED, "invalid", "field 'path': the root "
		    "is not allowed for %s", job_op_name(o->j->op));
	return 0;
}

/* Refuses a path with a component sandq could not materialise. */
static int
path_names_check(struct ops *o, const char *path)
{
	char name[AGENTFS_NAME_MAX + 1];
	const char *p = path, *end;
	size_t n;

	for (;;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			return 0;
		end = strchrnul(p, '/');
		n = (size_t)(end - p);
		if (n > AGENTFS_NAME_MAX)
			return fail(o, ST_REJECTED, "invalid", "sandbox '%s': "
			    "'%s': a name is longer than %d bytes", o->id,
			    path, AGENTFS_NAME_MAX);
		memcpy(name, p, n);
		name[n] = '\0';
		if (!workspace_name_is_valid(name))
			return fail(o, ST_REJECTED, "invalid", "sandbox '%s': "
			    "'%s': a name is not valid UTF-8 or has a control "
			    "character", o->id, path);
		p = end;
	}
}

/* True when path is dir or below it ("/" holds everything). */
static bool
path_below(const char *path, const char *dir, size_t dlen)
{
	if (dlen == 1 && dir[0] == '/')
		return true;
	return strncmp(path, dir, dlen) == 0 && path[dlen] == '/';
}

/* Labels pairs as compact JSON with sorted keys into *out (NULL: none). */
static int
labels_json(struct ops *o, char **out)
{
	const struct job *j = o->j;
	json_t *obj;

	*out = NULL;
	if (j->nlabels == 0)
		return 0;
	obj = json_object();
	for (size_t i = 0; i < j->nlabels; i++) {
		const char *k = j->labels[2 * i], *v = j->labels[2 * i + 1];
		json_t *jv = v != NULL ? json_string(v) : NULL;

		if (k == NULL || jv == NULL || json_object_set_new(obj, k,
		    jv) != 0) {
			json_decref(obj);
			return fail(o, ST_REJECTED, "invalid", "field 'labels': "
			    "entry %zu is not UTF-8 text", i + 1);
		}
	}
	*out = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	if (*out == NULL)
		fatalx("ops: out of memory encoding labels");
	return 0;
}

/* Packs the labels JSON object text as a map of str to str. */
static void
pk_labels(msgpack_packer *pk, const char *text)
{
	json_t *obj = json_loads(text, 0, NULL);
	const char *k;
	json_t *v;

	if (!json_is_object(obj)) {
		json_decref(obj);
		msgpack_pack_map(pk, 0);
		return;
	}
	msgpack_pack_map(pk, (uint32_t)json_object_size(obj));
	json_object_foreach(obj, k, v) {
		pk_str(pk, k);
		if (json_is_string(v)) {
			msgpack_pack_str_with_body(pk, json_string_value(v),
			    json_string_length(v));
		} else {
			char *t = json_dumps(v, JSON_COMPACT |
			    JSON_ENCODE_ANY);

			pk_str(pk, t != NULL ? t : "");
			free(t);
		}
	}
	json_decref(obj);
}

/* The info map of a sandbox; size only when with_size. */
static void
pk_info(msgpack_packer *pk, const struct store_sandbox *sb, bool with_size,
    uint64_t size)
{
	msgpack_pack_map(pk, with_size ? 7 : 6);
	pk_kv_str(pk, "sandbox", sb->id);
	pk_kv_u64(pk, "version", sb->version);
	pk_kv_str(pk, "snapshot", sb->head);
	if (with_size)
		pk_kv_u64(pk, "size", size);
	pk_kv_i64(pk, "created_at", sb->created_at);
	pk_kv_i64(pk, "updated_at", sb->updated_at);
	pk_str(pk, "labels");
	pk_labels(pk, sb->labels);
}

/* One fs.list/fs.stat entry map. */
static void
pk_entry(msgpack_packer *pk, const struct agentfs_entry *ent)
{
	bool link = ent->kind == AGENTFS_SYMLINK && ent->target != NULL;

	msgpack_pack_map(pk, link ? 7 : 6);
	pk_kv_str(pk, "path", ent->path);
	pk_kv_str(pk, "name", ent->name);
	pk_kv_str(pk, "type", ent->kind == AGENTFS_SYMLINK ? "symlink" :
	    agentfs_type_name(ent->mode));
	pk_kv_u64(pk, "size", ent->size);
	pk_kv_u64(pk, "mode", ent->mode & 07777);
	pk_kv_i64(pk, "mtime", ent->mtime);
	if (link)
		pk_kv_str(pk, "target", ent->target);
}

/*** Loading and committing ***/

/* Maps a store error about sandbox id; -ENOENT is sandbox_not_found. */
static int
store_fail(struct ops *o, int rc, const char *id, const struct err *e)
{
	if (rc == -ENOENT)
		return fail(o, ST_REJECTED, "sandbox_not_found", "sandbox '%s' "
		    "not found", id);
	if (rc == -EEXIST)
		return fail(o, ST_REJECTED, "sandbox_exists", "sandbox '%s' "
		    "already exists", id);
	if (rc == -EINVAL)
		return fail(o, ST_REJECTED, "invalid", "sandbox '%s': %s", id,
		    emsg(e));
	if (rc == -EFBIG)
		return fail(o, ST_REJECTED, "too_large", "sandbox '%s': %s", id,
		    emsg(e));
	return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", id, emsg(e));
}

/* Reads o->id's head row into o->sb. */
static int
head_get(struct ops *o)
{
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_get(o->st, o->j->tenant, o->id, &o->sb, &e);
	if (rc != 0)
		return store_fail(o, rc, o->id, &e);
	o->have_sb = true;
	return 0;
}

/* Reads the head blob; *blob is the caller's (free()). */
static int
head_blob(struct ops *o, void **blob, size_t *len)
{
	struct err e = { 0 };
	int rc;

	rc = store_blob_get(o->st, o->sb.head, blob, len, &e);
	if (rc != 0)
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': snapshot "
		    "%s: %s", o->id, o->sb.head, emsg(&e));
	return 0;
}

/* Loads the head and opens it as o->fs. */
static int
load(struct ops *o)
{
	struct err e = { 0 };
	void *blob = NULL;
	size_t len = 0;
	int rc;

	if ((rc = head_get(o)) != 0 || (rc = head_blob(o, &blob, &len)) != 0)
		return rc;
	/* The store re-hashed the bytes: no need for a page-by-page check.
	 * They stay: a commit stores only the chunks that differ from them. */
	rc = agentfs_open_trusted(blob, len, &o->fs, &e);
	o->head = blob;
	o->head_len = len;
	if (rc != 0)
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': snapshot "
		    "%s: %s", o->id, o->sb.head, emsg(&e));
	return 0;
}

/*
 * Records the op in o->fs's history (params: a JSON object, stolen), then
 * stores the snapshot and, when create, creates sandbox o->id with
 * labels_json; otherwise moves its head from the version loaded. Returns
 * 0, OPS_DONE, -EEXIST (create: the sandbox exists; res untouched), or
 * -ESTALE when the op must run again (another commit won, or the sandbox
 * or blob vanished under us: the rerun reports which).
 */
static int
commit(struct ops *o, json_t *params, bool create, const char *labels)
{
	struct err e = { 0 };
	void *blob = NULL;
	size_t len = 0;
	char *pj;
	int rc;

	pj = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(params);
	if (pj == NULL)
		fatalx("ops: out of memory encoding history");
	rc = agentfs_tool_call_add(o->fs, job_op_name(o->j->op), pj,
	    "{\"status\":\"ok\"}", NULL, "success", (int64_t)o->started_ms,
	    (int64_t)now_ms(), &e);
	free(pj);
	if (rc != 0)
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': history: %s",
		    o->id, emsg(&e));
	if ((rc = agentfs_to_blob(o->fs, &blob, &len, &e)) != 0)
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
	/* The blob and the head move in one transaction: nothing stored
	 * unnamed, whatever retention runs meanwhile. */
	if (create)
		rc = store_sandbox_create_blob(o->st, o->j->tenant, o->id, blob, len,
		    labels, o->new_sha, &e);
	else
		rc = store_sandbox_commit_blob(o->st, o->j->tenant, o->id,
		    o->sb.version, blob, len, o->head != NULL ? o->sb.head : NULL,
		    o->head, o->head_len, o->new_sha, &e);
	free(blob);
	if (rc == -ESTALE || rc == -ENOENT)
		return -ESTALE;
	if (rc == -EEXIST)
		return -EEXIST;
	if (rc != 0)
		return store_fail(o, rc, o->id, &e);
	o->committed = true;
	o->new_version = create ? 1 : o->sb.version + 1;
	o->blob_len = len;
	return 0;
}

/*** fs ops ***/

static int
op_fs_read(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	void *data = NULL;
	size_t len = 0;
	int rc;

	if ((rc = path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	switch (perms_check(&o->perms, path)) {
	case PERM_NONE:
		return fail(o, ST_REJECTED, "not_found", "sandbox '%s': '%s': "
		    "no such file", o->id, path);
	case PERM_VIEW:
		return fail(o, ST_REJECTED, "permission", "sandbox '%s': '%s': "
		    "reading is not allowed by the path rules", o->id, path);
	default:
		break;
	}
	if ((rc = load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return fs_fail(o, rc, &e);
	if (ent.kind == AGENTFS_DIR)
		return fail(o, ST_REJECTED, "is_dir", "sandbox '%s': '%s': is "
		    "a directory", o->id, path);
	if (ent.kind != AGENTFS_FILE)
		return fail(o, ST_REJECTED, "invalid", "sandbox '%s': '%s': "
		    "is a %s, not a regular file", o->id, path,
		    ent.kind == AGENTFS_SYMLINK ? "symlink" :
		    agentfs_type_name(ent.mode));
	if (ent.size > OPS_READ_MAX)
		return fail(o, ST_REJECTED, "too_large", "sandbox '%s': '%s': "
		    "%llu bytes, over the %u-byte read limit", o->id, path,
		    (unsigned long long)ent.size, OPS_READ_MAX);
	if ((rc = agentfs_read(o->fs, path, &data, &len, &e)) != 0)
		return fs_fail(o, rc, &e);
	msgpack_pack_bin_with_body(&o->pk, data, len);
	o->have_data = true;
	free(data);
	return 0;
}

static int
op_fs_write(struct ops *o)
{
	const struct job *j = o->j;
	char path[JOB_PATH_MAX + 3];
	mode_t mode = j->mode != 0 ? (mode_t)(j->mode & 07777) : 0644;
	struct err e = { 0 };
	json_t *params;
	int rc;

	if ((rc = path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) < PERM_WRITE)
		return fail(o, ST_REJECTED, "permission", "sandbox '%s': '%s': "
		    "writing is not allowed by the path rules", o->id, path);
	if ((rc = path_names_check(o, path)) != 0)
		return rc;
	if (j->data_len > JOB_DATA_MAX)
		return fail(o, ST_REJECTED, "too_large", "sandbox '%s': '%s': "
		    "%zu bytes, over %u", o->id, path, j->data_len,
		    JOB_DATA_MAX);
	if ((rc = load(o)) != 0)
		return rc;
	rc = agentfs_write(o->fs, path, j->data != NULL ? j->data :
	    (const uint8_t *)"", j->data_len, mode, &e);
	if (rc != 0)
		return fs_fail(o, rc, &e);
	params = json_object();
	jset_str(params, "path", path);
	json_object_set_new(params, "mode", json_integer(mode));
	json_object_set_new(params, "size", json_integer((json_int_t)
	    j->data_len));
	if ((rc = commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_map(&o->pk, 2);
	pk_kv_str(&o->pk, "path", path);
	pk_kv_u64(&o->pk, "size", j->data_len);
	o->have_data = true;
	return 0;
}

/* fs.list's walk: the entries below dir, in walk order. */
struct list_walk {
	const struct perms *perms;	/* what the job may see */
	const char *dir;		/* directory listed */
	size_t dlen;			/* its length */
	bool recursive;			/* whole subtree, or one level */
	bool inside;			/* the walk reached the subtree */
	struct seq seq;			/* entries packed */
};

#define WALK_STOP 1	/* a callback's "seen enough" (not an error) */

static int
list_cb(const struct agentfs_entry *ent, void *arg)
{
	struct list_walk *lw = arg;
	const char *rest;

	if (!path_below(ent->path, lw->dir, lw->dlen))
		/* Preorder: the subtree is one run of entries. */
		return lw->inside ? WALK_STOP : 0;
	lw->inside = true;
	rest = ent->path + (lw->dlen == 1 ? 1 : lw->dlen + 1);
	if (!lw->recursive && strchr(rest, '/') != NULL)
		return 0;
	if (perms_check(lw->perms, ent->path) == PERM_NONE)
		return 0;
	pk_entry(&lw->seq.pk, ent);
	lw->seq.n++;
	return 0;
}

static int
op_fs_list(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct list_walk lw = { 0 };
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	int rc;

	if ((rc = path_get(o, true, path, sizeof(path))) != 0)
		return rc;
	if (strcmp(path, "/") != 0 &&
	    perms_check(&o->perms, path) == PERM_NONE)
		return fail(o, ST_REJECTED, "not_found", "sandbox '%s': '%s': "
		    "no such directory", o->id, path);
	if ((rc = load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return fs_fail(o, rc, &e);
	if (ent.kind != AGENTFS_DIR)
		return fail(o, ST_REJECTED, "not_dir", "sandbox '%s': '%s': not "
		    "a directory", o->id, path);
	lw.perms = &o->perms;
	lw.dir = path;
	lw.dlen = strlen(path);
	lw.recursive = o->j->recursive;
	seq_init(&lw.seq);
	rc = agentfs_walk(o->fs, list_cb, &lw, &e);
	if (rc != 0 && rc != WALK_STOP) {
		seq_destroy(&lw.seq);
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
	}
	seq_finish(&lw.seq, &o->pk);
	o->have_data = true;
	return 0;
}

static int
op_fs_stat(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	int rc;

	if ((rc = path_get(o, true, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) == PERM_NONE)
		return fail(o, ST_REJECTED, "not_found", "sandbox '%s': '%s': "
		    "no such entry", o->id, path);
	if ((rc = load(o)) != 0)
		return rc;
	if ((rc = agentfs_stat(o->fs, path, &ent, &target, &e)) != 0)
		return fs_fail(o, rc, &e);
	if (strcmp(path, "/") == 0)
		ent.name = "";
	pk_entry(&o->pk, &ent);
	o->have_data = true;
	free(target);
	return 0;
}

/* fs.delete's walk: every path below dir, and the first not writable. */
struct del_walk {
	const struct perms *perms;	/* what the job may change */
	const char *dir;		/* directory removed */
	size_t dlen;			/* its length */
	bool inside;			/* the walk reached the subtree */
	char **paths;			/* preorder, owned */
	size_t n, cap;
	char *denied;			/* first path not writable, or NULL */
	bool denied_hidden;		/* that path is at level none */
};

static int
del_cb(const struct agentfs_entry *ent, void *arg)
{
	struct del_walk *dw = arg;
	enum perm_level lvl;

	if (!path_below(ent->path, dw->dir, dw->dlen))
		return dw->inside ? WALK_STOP : 0;
	dw->inside = true;
	lvl = perms_check(dw->perms, ent->path);
	if (lvl < PERM_WRITE) {
		dw->denied = xstrdup(ent->path);
		dw->denied_hidden = lvl == PERM_NONE;
		return WALK_STOP;
	}
	if (dw->n == dw->cap) {
		dw->cap = dw->cap ? dw->cap * 2 : 64;
		dw->paths = xreallocarray(dw->paths, dw->cap,
		    sizeof(*dw->paths));
	}
	dw->paths[dw->n++] = xstrdup(ent->path);
	return 0;
}

static void
del_walk_free(struct del_walk *dw)
{
	for (size_t i = 0; i < dw->n; i++)
		free(dw->paths[i]);
	free(dw->paths);
	free(dw->denied);
}

/*
 * Removes the tree below dir, children before parents, after checking
 * that the rules let the job change every entry: one entry it may not
 * change refuses the whole delete, so nothing is half removed.
 */
static int
delete_tree(struct ops *o, const char *dir, uint64_t *removed)
{
	struct del_walk dw = { 0 };
	struct err e = { 0 };
	int rc;

	dw.perms = &o->perms;
	dw.dir = dir;
	dw.dlen = strlen(dir);
	rc = agentfs_walk(o->fs, del_cb, &dw, &e);
	if (rc != 0 && rc != WALK_STOP) {
		rc = fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
		goto out;
	}
	if (dw.denied != NULL) {
		/* Never name a hidden path: that would reveal it. */
		if (dw.denied_hidden)
			rc = fail(o, ST_REJECTED, "permission", "sandbox '%s': "
			    "'%s': holds entries the path rules do not let "
			    "this job change", o->id, dir);
		else
			rc = fail(o, ST_REJECTED, "permission", "sandbox '%s': "
			    "'%s': '%s' may not be changed under the path "
			    "rules", o->id, dir, dw.denied);
		goto out;
	}
	rc = 0;
	for (size_t i = dw.n; i > 0 && rc == 0; i--)
		if ((rc = agentfs_remove(o->fs, dw.paths[i - 1], &e)) != 0)
			rc = fs_fail(o, rc, &e);
	*removed = dw.n;
out:
	del_walk_free(&dw);
	return rc;
}

static int
op_fs_delete(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	uint64_t removed = 0;
	json_t *params;
	int rc;

	if ((rc = path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) < PERM_WRITE)
		return fail(o, ST_REJECTED, "permission", "sandbox '%s': '%s': "
		    "deleting is not allowed by the path rules", o->id, path);
	if ((rc = load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return fs_fail(o, rc, &e);
	if (ent.kind == AGENTFS_DIR && o->j->recursive &&
	    (rc = delete_tree(o, path, &removed)) != 0)
		return rc;
	if ((rc = agentfs_remove(o->fs, path, &e)) != 0)
		return fs_fail(o, rc, &e);
	removed++;
	params = json_object();
	jset_str(params, "path", path);
	json_object_set_new(params, "recursive",
	    json_boolean(o->j->recursive));
	if ((rc = commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_map(&o->pk, 2);
	pk_kv_str(&o->pk, "path", path);
	pk_kv_u64(&o->pk, "removed", removed);
	o->have_data = true;
	return 0;
}

/*** kv ops ***/

static int
key_get(struct ops *o, const char **key)
{
	*key = o->j->key;
	if (*key == NULL || **key == '\0')
		return fail(o, ST_REJECTED, "invalid", "field 'key': required "
		    "by %s", job_op_name(o->j->op));
	if (strlen(*key) > JOB_KV_KEY_MAX)
		return fail(o, ST_REJECTED, "invalid", "field 'key': longer "
		    "than %d bytes", JOB_KV_KEY_MAX);
	return 0;
}

static int
kv_fail(struct ops *o, int rc, const char *key, const struct err *e)
{
	if (rc == -ENOENT)
		return fail(o, ST_REJECTED, "not_found", "sandbox '%s': kv key "
		    "'%.256s' not found", o->id, key);
	if (rc == -EINVAL)
		return fail(o, ST_REJECTED, "invalid", "sandbox '%s': kv key "
		    "'%.256s': %s", o->id, key, emsg(e));
	return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
	    emsg(e));
}

static int
op_kv_get(struct ops *o)
{
	struct err e = { 0 };
	char *value = NULL;
	const char *key;
	int rc;

	if ((rc = key_get(o, &key)) != 0 || (rc = load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_get(o->fs, key, &value, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	pk_str(&o->pk, value);
	o->have_data = true;
	free(value);
	return 0;
}

static int
op_kv_set(struct ops *o)
{
	const char *key, *value = o->j->value;
	struct err e = { 0 };
	json_t *params;
	int rc;

	if ((rc = key_get(o, &key)) != 0)
		return rc;
	if (value == NULL)
		return fail(o, ST_REJECTED, "invalid", "field 'value': required "
		    "by kv.set");
	if (strlen(value) > JOB_KV_VALUE_MAX)
		return fail(o, ST_REJECTED, "too_large", "field 'value': over "
		    "%u bytes", JOB_KV_VALUE_MAX);
	if ((rc = load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_set(o->fs, key, value, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	params = json_object();
	jset_str(params, "key", key);
	jset_str(params, "value", value);
	if ((rc = commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

static int
op_kv_delete(struct ops *o)
{
	struct err e = { 0 };
	const char *key;
	json_t *params;
	int rc;

	if ((rc = key_get(o, &key)) != 0 || (rc = load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_delete(o->fs, key, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	params = json_object();
	jset_str(params, "key", key);
	if ((rc = commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

static int
keys_cb(const char *key, void *arg)
{
	struct seq *s = arg;

	pk_str(&s->pk, key);
	s->n++;
	return 0;
}

static int
op_kv_keys(struct ops *o)
{
	struct err e = { 0 };
	struct seq s;
	int rc;

	if (o->j->prefix != NULL && strlen(o->j->prefix) > JOB_KV_KEY_MAX)
		return fail(o, ST_REJECTED, "invalid", "field 'prefix': longer "
		    "than %d bytes", JOB_KV_KEY_MAX);
	if ((rc = load(o)) != 0)
		return rc;
	seq_init(&s);
	if ((rc = agentfs_kv_keys(o->fs, o->j->prefix, keys_cb, &s,
	    &e)) != 0) {
		seq_destroy(&s);
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
	}
	seq_finish(&s, &o->pk);
	o->have_data = true;
	return 0;
}

/*** Import ***/

/* Copying an untrusted snapshot into a fresh one. */
struct copy {
	struct ops *o;		/* for rejections */
	struct agentfs *src;	/* untrusted, fully checked on open */
	struct agentfs *dst;	/* agentfs_new() */
	bool legacy;		/* src has the LocalSandbox layout */
	uint64_t bytes;		/* file bytes copied so far */
	int rc;			/* OPS_DONE once res is filled */
};

/* A failure writing dst: too big is the upload's fault, the rest ours. */
static int
copy_dst_fail(struct copy *c, int rc, const char *what, const struct err *e)
{
	if (rc == -EFBIG)
		c->rc = fail(c->o, ST_REJECTED, "too_large", "snapshot: %s: "
		    "%s", what, emsg(e));
	else
		c->rc = fail(c->o, ST_INTERNAL, "store", "snapshot: %s: %s",
		    what, emsg(e));
	return c->rc;
}

static int
copy_bad(struct copy *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
copy_bad(struct copy *c, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->rc = fail(c->o, ST_REJECTED, "bad_snapshot", "snapshot: %s", msg);
	return c->rc;
}

static int
copy_entry(const struct agentfs_entry *ent, void *arg)
{
	struct copy *c = arg;
	struct err e = { 0 };
	void *data = NULL;
	size_t len = 0;
	int rc = 0;

	/* What could not be materialised must not be stored either. */
	if (!workspace_name_is_valid(ent->name))
		return copy_bad(c, "'%.200s': the name is not valid UTF-8 or "
		    "has a control character", ent->path);
	switch (ent->kind) {
	case AGENTFS_DIR:
		rc = agentfs_mkdir(c->dst, ent->path, ent->mode & 07777, &e);
		break;
	case AGENTFS_FILE:
		if (ent->size > OPS_IMPORT_BYTES_MAX - c->bytes)
			return c->rc = fail(c->o, ST_REJECTED, "too_large",
			    "snapshot: '%.200s': files hold more than %llu "
			    "bytes", ent->path,
			    (unsigned long long)OPS_IMPORT_BYTES_MAX);
		c->bytes += ent->size;
		if ((rc = agentfs_read(c->src, ent->path, &data, &len,
		    &e)) != 0)
			return copy_bad(c, "%s", emsg(&e));
		rc = agentfs_write(c->dst, ent->path, data, len,
		    ent->mode & 07777, &e);
		free(data);
		break;
	case AGENTFS_SYMLINK:
		/* Native whatever the form: legacy json-file links upgrade. */
		rc = agentfs_symlink(c->dst, ent->target, ent->path, &e);
		if (rc == -EINVAL)
			return copy_bad(c, "%s", emsg(&e));
		break;
	case AGENTFS_SPECIAL:
		return copy_bad(c, "'%.200s': special files (%s) are not "
		    "allowed", ent->path, agentfs_type_name(ent->mode));
	}
	if (rc == 0)
		rc = agentfs_set_mtime(c->dst, ent->path, ent->mtime, &e);
	if (rc != 0)
		return copy_dst_fail(c, rc, ent->path, &e);
	return 0;
}

static int
copy_kv(const char *key, void *arg)
{
	struct copy *c = arg;
	struct err e = { 0 };
	char *value = NULL;
	int rc;

	if ((rc = agentfs_kv_get(c->src, key, &value, &e)) != 0)
		return copy_bad(c, "kv: %s", emsg(&e));
	rc = agentfs_kv_set(c->dst, key, value, &e);
	free(value);
	if (rc == -EINVAL)
		return copy_bad(c, "kv key '%.200s': %s", key, emsg(&e));
	if (rc != 0)
		return copy_dst_fail(c, rc, "kv", &e);
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
		return copy_bad(c, "tool_calls row %lld: %s",
		    (long long)tc->id, emsg(&e));
	if (rc != 0)
		return copy_dst_fail(c, rc, "tool_calls", &e);
	return 0;
}

/*
 * Checks j->snapshot fully and re-encodes it into o->fs, a new database
 * (see DESIGN). 0 or OPS_DONE.
 */
static int
import_build(struct ops *o)
{
	const struct job *j = o->j;
	struct copy c = { .o = o };
	struct err e = { 0 };
	int rc;

	if (j->snapshot == NULL || j->snapshot_len == 0)
		return fail(o, ST_REJECTED, "invalid", "field 'snapshot': "
		    "required by %s", job_op_name(j->op));
	if (j->snapshot_len > JOB_SNAPSHOT_MAX)
		return fail(o, ST_REJECTED, "too_large", "field 'snapshot': "
		    "over %u bytes", JOB_SNAPSHOT_MAX);
	rc = agentfs_open_blob(j->snapshot, j->snapshot_len, &c.src, &e);
	if (rc == -EFBIG)
		return fail(o, ST_REJECTED, "too_large", "snapshot: %s",
		    emsg(&e));
	if (rc == -ENOMEM)
		return fail(o, ST_INTERNAL, "store", "snapshot: %s", emsg(&e));
	if (rc != 0)
		return fail(o, ST_REJECTED, "bad_snapshot", "snapshot: %s",
		    emsg(&e));
	c.legacy = agentfs_is_legacy(c.src);
	if ((rc = agentfs_new(&c.dst, &e)) != 0) {
		rc = fail(o, ST_INTERNAL, "store", "snapshot: %s", emsg(&e));
		goto out;
	}
	rc = agentfs_walk(c.src, copy_entry, &c, &e);
	if (rc == 0)
		rc = agentfs_kv_keys(c.src, NULL, copy_kv, &c, &e);
	if (rc == 0)
		rc = agentfs_tool_call_each(c.src, copy_tool_call, &c, &e);
	if (rc != 0) {
		/* A callback filled res; otherwise reading src failed. */
		if (c.rc == 0)
			fail(o, rc == -ENOMEM ? ST_INTERNAL : ST_REJECTED,
			    rc == -ENOMEM ? "store" : "bad_snapshot",
			    "snapshot: %s", emsg(&e));
		rc = OPS_DONE;
		goto out;
	}
	o->fs = c.dst;
	c.dst = NULL;
out:
	agentfs_close(c.dst);
	agentfs_close(c.src);
	return rc;
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
		return store_fail(o, rc, o->id, &e);
	pk_info(&o->pk, &sb, true, o->blob_len);
	o->have_data = true;
	return 0;
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
			return fs_fail(o, rc, &e);
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
			return fail(o, ST_REJECTED, "invalid", "field 'files': "
			    "entry %zu has no valid path", i + 1);
		if (perms_normalize_path(f->path, path, sizeof(path), &e) != 0)
			return fail(o, ST_REJECTED, "invalid", "field 'files': "
			    "%s", e.msg);
		if (strcmp(path, "/") == 0)
			return fail(o, ST_REJECTED, "invalid", "field 'files': "
			    "'%s' names the root", f->path);
		if ((rc = path_names_check(o, path)) != 0 ||
		    (rc = mkdir_parents(o, path)) != 0)
			return rc;
		rc = agentfs_write(o->fs, path, f->data != NULL ? f->data :
		    (const uint8_t *)"", f->len, 0644, &e);
		if (rc != 0)
			return fs_fail(o, rc, &e);
		json_array_append_new(list, ops_history_text(path, strlen(path)));
	}
	return 0;
}

static int
op_sandbox_create(struct ops *o)
{
	const struct job *j = o->j;
	struct store_sandbox sb;
	struct err e = { 0 };
	char *labels = NULL;
	json_t *params;
	int rc;

	if (j->snapshot != NULL && j->nfiles > 0)
		return fail(o, ST_REJECTED, "invalid", "fields 'snapshot' and "
		    "'files' cannot be used together");
	/* Fail fast before building anything; create still checks. */
	rc = store_sandbox_get(o->st, j->tenant, o->id, &sb, &e);
	if (rc == 0)
		return store_fail(o, -EEXIST, o->id, &e);
	if (rc != -ENOENT)
		return store_fail(o, rc, o->id, &e);
	if ((rc = labels_json(o, &labels)) != 0)
		return rc;
	params = json_object();
	if (j->snapshot != NULL) {
		rc = import_build(o);
		json_object_set_new(params, "snapshot",
		    json_integer((json_int_t)j->snapshot_len));
	} else if ((rc = agentfs_new(&o->fs, &e)) != 0) {
		rc = fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
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
	rc = commit(o, params, true, labels);
	free(labels);
	/* Created by another job since the check above. */
	if (rc == -EEXIST)
		return store_fail(o, -EEXIST, o->id, &e);
	if (rc != 0)
		return rc;
	return pk_new_info(o);
}

static int
op_sandbox_import(struct ops *o)
{
	const struct job *j = o->j;
	struct err e = { 0 };
	char *labels = NULL;
	bool create;
	json_t *params;
	int rc;

	if ((rc = import_build(o)) != 0)
		return rc;
	rc = store_sandbox_get(o->st, j->tenant, o->id, &o->sb, &e);
	if (rc != 0 && rc != -ENOENT)
		return store_fail(o, rc, o->id, &e);
	create = rc == -ENOENT;
	o->have_sb = !create;
	/* Labels name a new sandbox; an existing one keeps its own. */
	if (create && (rc = labels_json(o, &labels)) != 0)
		return rc;
	params = json_object();
	json_object_set_new(params, "snapshot",
	    json_integer((json_int_t)j->snapshot_len));
	rc = commit(o, params, create, labels);
	free(labels);
	/* Created by another job meanwhile: run again, as a new version. */
	if (rc == -EEXIST)
		return -ESTALE;
	if (rc != 0)
		return rc;
	return pk_new_info(o);
}

static int
op_sandbox_fork(struct ops *o)
{
	const struct job *j = o->j;
	struct err e = { 0 };
	int rc;

	if (j->to == NULL || *j->to == '\0')
		return fail(o, ST_REJECTED, "invalid", "field 'to': required by "
		    "sandbox.fork");
	/*
	 * The fork is one row naming the same blob (O(1)), so it keeps the
	 * source's labels: the store has no label update, and labels given
	 * here would be silently lost, so they are refused.
	 */
	if (j->nlabels > 0)
		return fail(o, ST_REJECTED, "invalid", "field 'labels': a fork "
		    "keeps the labels of sandbox '%s'", o->id);
	rc = store_sandbox_fork(o->st, j->tenant, o->id, j->to, &e);
	if (rc == -ENOENT)
		return store_fail(o, rc, o->id, &e);
	if (rc != 0)
		return store_fail(o, rc, j->to, &e);
	/* The result describes the new sandbox. */
	o->id = j->to;
	if ((rc = head_get(o)) != 0)
		return rc;
	pk_info(&o->pk, &o->sb, false, 0);
	o->have_data = true;
	return 0;
}

static int
op_sandbox_delete(struct ops *o)
{
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_delete(o->st, o->j->tenant, o->id, &e);
	if (rc != 0)
		return store_fail(o, rc, o->id, &e);
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

static int
op_sandbox_export(struct ops *o)
{
	void *blob = NULL;
	size_t len = 0;
	int rc;

	if ((rc = head_get(o)) != 0 || (rc = head_blob(o, &blob, &len)) != 0)
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
	pk_kv_u64(&s->pk, "version", v->version);
	pk_kv_str(&s->pk, "snapshot", v->sha256);
	pk_kv_i64(&s->pk, "created_at", v->created_at);
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
	pk_kv_i64(pk, "id", tc->id);
	pk_kv_str(pk, "name", tc->name);
	pk_kv_opt(pk, "parameters", tc->parameters);
	pk_kv_opt(pk, "result", tc->result);
	pk_kv_opt(pk, "error", tc->error);
	pk_kv_str(pk, "status", tc->status);
	pk_kv_i64(pk, "started_at", tc->started_at * unit);
	pk_str(pk, "completed_at");
	if (tc->completed_at != 0)
		msgpack_pack_int64(pk, tc->completed_at * unit);
	else
		msgpack_pack_nil(pk);
	pk_kv_i64(pk, "duration_ms", tc->duration_ms);
	c->seq.n++;
	return 0;
}

static int
op_sandbox_history(struct ops *o)
{
	struct err e = { 0 };
	struct calls calls;
	struct seq vers;
	int rc;

	if ((rc = load(o)) != 0)
		return rc;
	seq_init(&vers);
	seq_init(&calls.seq);
	rc = store_sandbox_history(o->st, o->j->tenant, o->id, version_cb,
	    &vers, &e);
	if (rc != 0) {
		rc = store_fail(o, rc, o->id, &e);
		goto out;
	}
	if ((rc = agentfs_tool_call_each(o->fs, call_cb, &calls, &e)) != 0) {
		rc = fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
		    emsg(&e));
		goto out;
	}
	msgpack_pack_map(&o->pk, 2);
	pk_str(&o->pk, "versions");
	seq_finish(&vers, &o->pk);
	pk_str(&o->pk, "calls");
	seq_finish(&calls.seq, &o->pk);
	o->have_data = true;
	return 0;
out:
	seq_destroy(&vers);
	seq_destroy(&calls.seq);
	return rc;
}

static int
op_sandbox_info(struct ops *o)
{
	struct err e = { 0 };
	int64_t size;
	int rc;

	if ((rc = head_get(o)) != 0)
		return rc;
	if ((size = store_blob_size(o->st, o->sb.head, &e)) < 0)
		return fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id, e.msg);
	pk_info(&o->pk, &o->sb, true, (uint64_t)size);
	o->have_data = true;
	return 0;
}

static int
list_sandbox_cb(const struct store_sandbox *sb, void *arg)
{
	struct seq *s = arg;

	pk_info(&s->pk, sb, false, 0);
	s->n++;
	return 0;
}

static int
op_sandbox_list(struct ops *o)
{
	struct err e = { 0 };
	struct seq s;
	int rc;

	seq_init(&s);
	rc = store_sandbox_list(o->st, o->j->tenant, list_sandbox_cb, &s, &e);
	if (rc != 0) {
		seq_destroy(&s);
		return fail(o, ST_INTERNAL, "store", "sandbox list: %s",
		    emsg(&e));
	}
	seq_finish(&s, &o->pk);
	o->have_data = true;
	return 0;
}

/*** Entry point ***/

typedef int (*op_cb)(struct ops *o);

static const struct {
	op_cb run;		/* handler */
	bool perms;		/* compiles the path rules first */
	bool sandbox;		/* needs j->sandbox */
} op_table[OP__COUNT] = {
	[OP_FS_READ] = { op_fs_read, true, true },
	[OP_FS_WRITE] = { op_fs_write, true, true },
	[OP_FS_LIST] = { op_fs_list, true, true },
	[OP_FS_STAT] = { op_fs_stat, true, true },
	[OP_FS_DELETE] = { op_fs_delete, true, true },
	[OP_KV_GET] = { op_kv_get, false, true },
	[OP_KV_SET] = { op_kv_set, false, true },
	[OP_KV_DELETE] = { op_kv_delete, false, true },
	[OP_KV_KEYS] = { op_kv_keys, false, true },
	[OP_SANDBOX_CREATE] = { op_sandbox_create, false, true },
	[OP_SANDBOX_FORK] = { op_sandbox_fork, false, true },
	[OP_SANDBOX_DELETE] = { op_sandbox_delete, false, true },
	[OP_SANDBOX_EXPORT] = { op_sandbox_export, false, true },
	[OP_SANDBOX_IMPORT] = { op_sandbox_import, false, true },
	[OP_SANDBOX_HISTORY] = { op_sandbox_history, false, true },
	[OP_SANDBOX_INFO] = { op_sandbox_info, false, true },
	[OP_SANDBOX_LIST] = { op_sandbox_list, false, false },
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
	struct ops o = { .st = st, .j = j, .res = res };
	int64_t t0 = mono_ns();
	int rc = OPS_DONE, ret = 0;

	o.started_ms = now_ms();
	res->started_at = o.started_ms;
	msgpack_sbuffer_init(&o.out);
	msgpack_packer_init(&o.pk, &o.out, sbuf_write);
	o.id = j->sandbox != NULL ? j->sandbox : "";
	if (!OPS_HANDLES(j->op) || op_table[j->op].run == NULL) {
		fail(&o, ST_INTERNAL, "internal", "ops: op %d is not a "
		    "snapshot op", (int)j->op);
		ret = -EINVAL;
		goto out;
	}
	if (j->tenant == NULL || *j->tenant == '\0') {
		fail(&o, ST_INTERNAL, "internal", "%s: no tenant set by the "
		    "dispatcher", job_op_name(j->op));
		goto out;
	}
	if (op_table[j->op].sandbox && j->sandbox == NULL) {
		fail(&o, ST_REJECTED, "invalid", "field 'sandbox': required "
		    "by %s", job_op_name(j->op));
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
		fail(&o, ST_INTERNAL, "conflict", "sandbox '%s': %d commits in "
		    "a row lost to concurrent jobs", o.id,
		    OPS_COMMIT_RETRIES + 1);
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
