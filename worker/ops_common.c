/*
 * ops_common.c - what every fs.*, kv.* and sandbox.* op uses: packing
 * results, failures, operands and paths, and loading and committing the
 * sandbox's snapshot. The entry point and its table are in ops.c, the ops
 * themselves in ops_fs.c, ops_kv.c and ops_sandbox.c; this file calls none
 * of them.
 *
 * A read loads the sandbox's head (store_sandbox_get), its blob (the store
 * re-hashes it) and opens it with agentfs_open_trusted(). A write changes
 * that open copy, appends one tool_calls row naming the op (spec "History"),
 * serialises, puts the blob and moves the head by compare-and-set from the
 * version it read (ops__commit).
 *
 * Each op's result data is built in a msgpack sbuffer; lists whose length
 * is known only at the end are packed into a second buffer and appended
 * behind their array header (struct seq).
 *
 * Sections: Helpers, Loading and committing.
 */
#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"
#include "ops.h"
#include "ops_int.h"

/*** Helpers ***/

/* msgpack's write callback: out of memory is fatal, as with xmalloc(). */
int
ops__sbuf_write(void *data, const char *buf, size_t len)
{
	if (msgpack_sbuffer_write(data, buf, len) != 0)
		fatalx("ops: out of memory packing a result");
	return 0;
}

/* Text or nil. */
void
ops__pk_kv_opt(msgpack_packer *pk, const char *k, const char *v)
{
	pack_str(pk, k);
	if (v != NULL)
		pack_str(pk, v);
	else
		msgpack_pack_nil(pk);
}

void
ops__seq_init(struct seq *s)
{
	msgpack_sbuffer_init(&s->buf);
	msgpack_packer_init(&s->pk, &s->buf, ops__sbuf_write);
	s->n = 0;
}

/* Packs the array header and the elements into pk; frees s. */
void
ops__seq_finish(struct seq *s, msgpack_packer *pk)
{
	msgpack_pack_array(pk, s->n);
	if (s->buf.size > 0)
		ops__sbuf_write(pk->data, s->buf.data, s->buf.size);
	msgpack_sbuffer_destroy(&s->buf);
}

void
ops__seq_destroy(struct seq *s)
{
	msgpack_sbuffer_destroy(&s->buf);
}

/* Fills res with an error; returns OPS_DONE for the handler to return. */
int
ops__fail(struct ops *o, enum res_status st, const char *code, const char *fmt,
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
const char *
ops__emsg(const struct err *e)
{
	const char *m = e->msg;

	if (strncmp(m, "agentfs: ", 9) == 0)
		return m + 9;
	if (strncmp(m, "store: ", 7) == 0)
		return m + 7;
	if (strncmp(m, "workspace: ", 11) == 0)
		return m + 11;
	return m;
}

/*
 * Maps an agentfs errno about a path of sandbox o->id to the spec's codes.
 * Anything that is not the request's fault (SQLite, memory) is internal.
 */
int
ops__fs_fail(struct ops *o, int rc, const struct err *e)
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
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(e));
	}
	return ops__fail(o, ST_REJECTED, code, "sandbox '%s': %s", o->id,
	    ops__emsg(e));
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

void
ops__jset_str(json_t *obj, const char *k, const char *v)
{
	json_object_set_new(obj, k, ops_history_text(v, strlen(v)));
}

/*
 * The job's path, normalised into out ("/a/b", "/" the root), or "/" when
 * absent and root_ok. The root is refused unless root_ok.
 */
int
ops__path_get(struct ops *o, bool root_ok, char *out, size_t outsz)
{
	struct err e = { 0 };

	if (o->j->path == NULL) {
		if (!root_ok)
			return ops__fail(o, ST_REJECTED, "invalid",
			    "field 'path': required by %s",
			    job_op_name(o->j->op));
		snprintf(out, outsz, "/");
		return 0;
	}
	if (perms_normalize_path(o->j->path, out, outsz, &e) != 0)
		return ops__fail(o, ST_REJECTED, "invalid", "field 'path': %s",
		    e.msg);
	if (out[0] != '/')
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'path': '%s' is not absolute", out);
	if (!root_ok && strcmp(out, "/") == 0)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'path': the root is not allowed for %s",
		    job_op_name(o->j->op));
	return 0;
}

/* Refuses a path with a component sandq could not materialise. */
int
ops__path_names_check(struct ops *o, const char *path)
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
			return ops__fail(o, ST_REJECTED, "invalid",
			    "sandbox '%s': "
			    "'%s': a name is longer than %d bytes", o->id,
			    path, AGENTFS_NAME_MAX);
		memcpy(name, p, n);
		name[n] = '\0';
		if (!workspace_name_is_valid(name))
			return ops__fail(o, ST_REJECTED, "invalid",
			    "sandbox '%s': "
			    "'%s': a name is not valid UTF-8 or has a control "
			    "character", o->id, path);
		p = end;
	}
}

/* True when path is dir or below it ("/" holds everything). */
bool
ops__path_below(const char *path, const char *dir, size_t dlen)
{
	if (dlen == 1 && dir[0] == '/')
		return true;
	return strncmp(path, dir, dlen) == 0 && path[dlen] == '/';
}

/* Labels pairs as compact JSON with sorted keys into *out (NULL: none). */
int
ops__labels_json(struct ops *o, char **out)
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
			return ops__fail(o, ST_REJECTED, "invalid", "field 'labels': "
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
		pack_str(pk, k);
		if (json_is_string(v)) {
			msgpack_pack_str_with_body(pk, json_string_value(v),
			    json_string_length(v));
		} else {
			char *t = json_dumps(v, JSON_COMPACT |
			    JSON_ENCODE_ANY);

			pack_str(pk, t != NULL ? t : "");
			free(t);
		}
	}
	json_decref(obj);
}

/* The info map of a sandbox; size only when with_size. */
void
ops__pk_info(msgpack_packer *pk, const struct store_sandbox *sb, bool with_size,
    uint64_t size)
{
	msgpack_pack_map(pk, (with_size ? 7 : 6) + (sb->image[0] != '\0') +
	    (sb->workdir[0] != '\0'));
	pack_kv_str(pk, "sandbox", sb->id);
	pack_kv_u64(pk, "version", sb->version);
	pack_kv_str(pk, "snapshot", sb->head);
	if (with_size)
		pack_kv_u64(pk, "size", size);
	pack_kv_i64(pk, "created_at", sb->created_at);
	pack_kv_i64(pk, "updated_at", sb->updated_at);
	pack_str(pk, "labels");
	pk_labels(pk, sb->labels);
	/* What it runs on (docs/images.md): absent for none. */
	if (sb->image[0] != '\0')
		pack_kv_str(pk, "image", sb->image);
	if (sb->workdir[0] != '\0')
		pack_kv_str(pk, "workdir", sb->workdir);
}

/* One fs.list/fs.stat entry map. */
void
ops__pk_entry(msgpack_packer *pk, const struct agentfs_entry *ent)
{
	bool link = ent->kind == AGENTFS_SYMLINK && ent->target != NULL;

	msgpack_pack_map(pk, link ? 7 : 6);
	pack_kv_str(pk, "path", ent->path);
	pack_kv_str(pk, "name", ent->name);
	pack_kv_str(pk, "type", ent->kind == AGENTFS_SYMLINK ? "symlink" :
	    agentfs_type_name(ent->mode));
	pack_kv_u64(pk, "size", ent->size);
	pack_kv_u64(pk, "mode", ent->mode & 07777);
	pack_kv_i64(pk, "mtime", ent->mtime);
	if (link)
		pack_kv_str(pk, "target", ent->target);
}

/*** Loading and committing ***/

/* Maps a store error about sandbox id; -ENOENT is sandbox_not_found. */
int
ops__store_fail(struct ops *o, int rc, const char *id, const struct err *e)
{
	if (rc == -ENOENT)
		return ops__fail(o, ST_REJECTED, "sandbox_not_found",
		    "sandbox '%s' not found", id);
	if (rc == -EEXIST)
		return ops__fail(o, ST_REJECTED, "sandbox_exists",
		    "sandbox '%s' already exists", id);
	if (rc == -EINVAL)
		return ops__fail(o, ST_REJECTED, "invalid", "sandbox '%s': %s",
		    id, ops__emsg(e));
	if (rc == -EFBIG)
		return ops__fail(o, ST_REJECTED, "too_large",
		    "sandbox '%s': %s", id, ops__emsg(e));
	return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", id,
	    ops__emsg(e));
}

/* Reads o->id's head row into o->sb. */
int
ops__head_get(struct ops *o)
{
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_get(o->st, o->j->tenant, o->id, &o->sb, &e);
	if (rc != 0)
		return ops__store_fail(o, rc, o->id, &e);
	o->have_sb = true;
	return 0;
}

/* Reads the head blob; *blob is the caller's (free()). */
int
ops__head_blob(struct ops *o, void **blob, size_t *len)
{
	struct err e = { 0 };
	int rc;

	rc = store_blob_get(o->st, o->sb.head, blob, len, &e);
	if (rc != 0)
		return ops__fail(o, ST_INTERNAL, "store",
		    "sandbox '%s': snapshot %s: %s", o->id, o->sb.head,
		    ops__emsg(&e));
	return 0;
}

/* Loads the head and opens it as o->fs. */
int
ops__load(struct ops *o)
{
	struct err e = { 0 };
	void *blob = NULL;
	size_t len = 0;
	int rc;

	if ((rc = ops__head_get(o)) != 0 ||
	    (rc = ops__head_blob(o, &blob, &len)) != 0)
		return rc;
	/* The store re-hashed the bytes: no need for a page-by-page check.
	 * They stay: a commit stores only the chunks that differ from them. */
	rc = agentfs_open_trusted(blob, len, &o->fs, &e);
	o->head = blob;
	o->head_len = len;
	if (rc != 0)
		return ops__fail(o, ST_INTERNAL, "store",
		    "sandbox '%s': snapshot %s: %s", o->id, o->sb.head,
		    ops__emsg(&e));
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
int
ops__commit(struct ops *o, json_t *params, bool create, const char *labels)
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
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': history: %s",
		    o->id, ops__emsg(&e));
	if ((rc = agentfs_to_blob(o->fs, &blob, &len, &e)) != 0)
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
	/* The blob and the head move in one transaction: nothing stored
	 * unnamed, whatever retention runs meanwhile. The tenant's storage
	 * quota, kept history included, is checked in it (store.h). */
	store_set_quota(o->st, o->quota);
	/* A new sandbox records what its runs use (sandqd made it canonical). */
	if (create)
		rc = store_sandbox_create_image(o->st, o->j->tenant, o->id, blob, len,
		    labels, o->j->image, o->j->workdir, o->new_sha, &e);
	else
		rc = store_sandbox_commit_blob(o->st, o->j->tenant, o->id,
		    o->sb.version, blob, len, o->head != NULL ? o->sb.head : NULL,
		    o->head, o->head_len, o->new_sha, &e);
	store_set_quota(o->st, 0);
	free(blob);
	if (rc == -EDQUOT)
		return ops__fail(o, ST_REJECTED, "storage_quota", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
	if (rc == -ESTALE || rc == -ENOENT)
		return -ESTALE;
	if (rc == -EEXIST)
		return -EEXIST;
	if (rc != 0)
		return ops__store_fail(o, rc, o->id, &e);
	o->committed = true;
	o->new_version = create ? 1 : o->sb.version + 1;
	o->blob_len = len;
	return 0;
}
