/*
 * ops_fs.c - the fs.* ops (read, write, list, stat, delete) on a sandbox's
 * snapshot, called through ops.c's dispatch table. The path rules were
 * compiled before the handler runs (ops.c); each handler checks its path
 * against them before it looks at the snapshot. fs.write with parents
 * also checks each folder it would create (fs_write_parents()).
 */
#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "ops.h"
#include "ops_int.h"

/*** fs ops ***/

int
ops__fs_read(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	void *data = NULL;
	size_t len = 0;
	int rc;

	if ((rc = ops__path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	switch (perms_check(&o->perms, path)) {
	case PERM_NONE:
		return ops__fail(o, ST_REJECTED, "not_found",
		    "sandbox '%s': '%s': no such file", o->id, path);
	case PERM_VIEW:
		return ops__fail(o, ST_REJECTED, "permission",
		    "sandbox '%s': '%s': "
		    "reading is not allowed by the path rules", o->id, path);
	default:
		break;
	}
	if ((rc = ops__load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return ops__fs_fail(o, rc, &e);
	if (ent.kind == AGENTFS_DIR)
		return ops__fail(o, ST_REJECTED, "is_dir",
		    "sandbox '%s': '%s': is a directory", o->id, path);
	if (ent.kind != AGENTFS_FILE)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "sandbox '%s': '%s': is a %s, not a regular file", o->id,
		    path, ent.kind == AGENTFS_SYMLINK ? "symlink" :
		    agentfs_type_name(ent.mode));
	if (ent.size > OPS_READ_MAX)
		return ops__fail(o, ST_REJECTED, "too_large",
		    "sandbox '%s': '%s': "
		    "%llu bytes, over the %u-byte read limit", o->id, path,
		    (unsigned long long)ent.size, OPS_READ_MAX);
	if ((rc = agentfs_read(o->fs, path, &data, &len, &e)) != 0)
		return ops__fs_fail(o, rc, &e);
	msgpack_pack_bin_with_body(&o->pk, data, len);
	o->have_data = true;
	free(data);
	return 0;
}

/*
 * fs.write's parents: the folders above path that are missing, checked
 * first and then created, top down, as mkdir -p would (mode 0755). Every
 * component is looked at before anything is made: one that is a file or a
 * symlink refuses the op naming it (a symlink is never followed, so a
 * write cannot leave the tree through one), and a missing folder the path
 * rules do not let the job write refuses it likewise. The snapshot loaded
 * is a copy committed only when the whole op succeeds, so a refusal at
 * the file leaves nothing behind either. Sets *made to the number of
 * folders created. Returns 0 or an ops__fail() code.
 */
static int
fs_write_parents(struct ops *o, const char *path, size_t *made)
{
	char dir[JOB_PATH_MAX + 3];
	const char *p, *first = NULL;
	struct err e = { 0 };
	int rc;

	*made = 0;
	/* Each ancestor below the root ends at a '/' of path: "/a", "/a/b"... */
	for (p = strchr(path + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
		struct agentfs_entry ent;
		char *target = NULL;

		memcpy(dir, path, (size_t)(p - path));
		dir[p - path] = '\0';
		rc = agentfs_stat(o->fs, dir, &ent, &target, &e);
		free(target);
		if (rc == -ENOENT) {
			first = p;
			break;
		}
		if (rc != 0)
			return ops__fs_fail(o, rc, &e);
		if (ent.kind == AGENTFS_DIR)
			continue;
		if (perms_check(&o->perms, dir) == PERM_NONE)
			return ops__fail(o, ST_REJECTED, "not_found",
			    "sandbox '%s': '%s': no such folder", o->id, dir);
		return ops__fail(o, ST_REJECTED, "not_dir",
		    "sandbox '%s': '%s': parent '%s' is a %s, not a folder",
		    o->id, path, dir, ent.kind == AGENTFS_SYMLINK ? "symlink" :
		    agentfs_type_name(ent.mode));
	}
	/* Everything from the first missing one down is to be made. */
	for (p = first; p != NULL; p = strchr(p + 1, '/')) {
		memcpy(dir, path, (size_t)(p - path));
		dir[p - path] = '\0';
		if (perms_check(&o->perms, dir) < PERM_WRITE)
			return ops__fail(o, ST_REJECTED, "permission",
			    "sandbox '%s': '%s': creating folder '%s' is not "
			    "allowed by the path rules", o->id, path, dir);
	}
	for (p = first; p != NULL; p = strchr(p + 1, '/')) {
		memcpy(dir, path, (size_t)(p - path));
		dir[p - path] = '\0';
		if ((rc = agentfs_mkdir(o->fs, dir, 0755, &e)) != 0)
			return ops__fs_fail(o, rc, &e);
		(*made)++;
	}
	return 0;
}

int
ops__fs_write(struct ops *o)
{
	const struct job *j = o->j;
	char path[JOB_PATH_MAX + 3];
	mode_t mode = j->mode != 0 ? (mode_t)(j->mode & 07777) : 0644;
	struct err e = { 0 };
	json_t *params;
	size_t made = 0;
	int rc;

	if ((rc = ops__path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) < PERM_WRITE)
		return ops__fail(o, ST_REJECTED, "permission",
		    "sandbox '%s': '%s': "
		    "writing is not allowed by the path rules", o->id, path);
	if ((rc = ops__path_names_check(o, path)) != 0)
		return rc;
	if (j->data_len > JOB_DATA_MAX)
		return ops__fail(o, ST_REJECTED, "too_large",
		    "sandbox '%s': '%s': %zu bytes, over %u", o->id, path,
		    j->data_len, JOB_DATA_MAX);
	if ((rc = ops__load(o)) != 0)
		return rc;
	if (j->parents && (rc = fs_write_parents(o, path, &made)) != 0)
		return rc;
	rc = agentfs_write(o->fs, path, j->data != NULL ? j->data :
	    (const uint8_t *)"", j->data_len, mode, &e);
	if (rc != 0)
		return ops__fs_fail(o, rc, &e);
	params = json_object();
	ops__jset_str(params, "path", path);
	json_object_set_new(params, "mode", json_integer(mode));
	json_object_set_new(params, "size", json_integer((json_int_t)
	    j->data_len));
	if (j->parents)
		json_object_set_new(params, "folders_made", json_integer(
		    (json_int_t)made));
	if ((rc = ops__commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_map(&o->pk, 2);
	pack_kv_str(&o->pk, "path", path);
	pack_kv_u64(&o->pk, "size", j->data_len);
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

	if (!ops__path_below(ent->path, lw->dir, lw->dlen))
		/* Preorder: the subtree is one run of entries. */
		return lw->inside ? WALK_STOP : 0;
	lw->inside = true;
	rest = ent->path + (lw->dlen == 1 ? 1 : lw->dlen + 1);
	if (!lw->recursive && strchr(rest, '/') != NULL)
		return 0;
	if (perms_check(lw->perms, ent->path) == PERM_NONE)
		return 0;
	ops__pk_entry(&lw->seq.pk, ent);
	lw->seq.n++;
	return 0;
}

int
ops__fs_list(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct list_walk lw = { 0 };
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	int rc;

	if ((rc = ops__path_get(o, true, path, sizeof(path))) != 0)
		return rc;
	if (strcmp(path, "/") != 0 &&
	    perms_check(&o->perms, path) == PERM_NONE)
		return ops__fail(o, ST_REJECTED, "not_found",
		    "sandbox '%s': '%s': no such directory", o->id, path);
	if ((rc = ops__load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return ops__fs_fail(o, rc, &e);
	if (ent.kind != AGENTFS_DIR)
		return ops__fail(o, ST_REJECTED, "not_dir", "sandbox '%s': '%s': not "
		    "a directory", o->id, path);
	lw.perms = &o->perms;
	lw.dir = path;
	lw.dlen = strlen(path);
	lw.recursive = o->j->recursive;
	ops__seq_init(&lw.seq);
	rc = agentfs_walk(o->fs, list_cb, &lw, &e);
	if (rc != 0 && rc != WALK_STOP) {
		ops__seq_destroy(&lw.seq);
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
	}
	ops__seq_finish(&lw.seq, &o->pk);
	o->have_data = true;
	return 0;
}

int
ops__fs_stat(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	int rc;

	if ((rc = ops__path_get(o, true, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) == PERM_NONE)
		return ops__fail(o, ST_REJECTED, "not_found",
		    "sandbox '%s': '%s': no such entry", o->id, path);
	if ((rc = ops__load(o)) != 0)
		return rc;
	if ((rc = agentfs_stat(o->fs, path, &ent, &target, &e)) != 0)
		return ops__fs_fail(o, rc, &e);
	if (strcmp(path, "/") == 0)
		ent.name = "";
	ops__pk_entry(&o->pk, &ent);
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

	if (!ops__path_below(ent->path, dw->dir, dw->dlen))
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
		rc = ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
		goto out;
	}
	if (dw.denied != NULL) {
		/* Never name a hidden path: that would reveal it. */
		if (dw.denied_hidden)
			rc = ops__fail(o, ST_REJECTED, "permission",
			    "sandbox '%s': "
			    "'%s': holds entries the path rules do not let "
			    "this job change", o->id, dir);
		else
			rc = ops__fail(o, ST_REJECTED, "permission",
			    "sandbox '%s': "
			    "'%s': '%s' may not be changed under the path "
			    "rules", o->id, dir, dw.denied);
		goto out;
	}
	rc = 0;
	for (size_t i = dw.n; i > 0 && rc == 0; i--)
		if ((rc = agentfs_remove(o->fs, dw.paths[i - 1], &e)) != 0)
			rc = ops__fs_fail(o, rc, &e);
	*removed = dw.n;
out:
	del_walk_free(&dw);
	return rc;
}

int
ops__fs_delete(struct ops *o)
{
	char path[JOB_PATH_MAX + 3];
	struct agentfs_entry ent;
	struct err e = { 0 };
	char *target = NULL;
	uint64_t removed = 0;
	json_t *params;
	int rc;

	if ((rc = ops__path_get(o, false, path, sizeof(path))) != 0)
		return rc;
	if (perms_check(&o->perms, path) < PERM_WRITE)
		return ops__fail(o, ST_REJECTED, "permission",
		    "sandbox '%s': '%s': "
		    "deleting is not allowed by the path rules", o->id, path);
	if ((rc = ops__load(o)) != 0)
		return rc;
	rc = agentfs_stat(o->fs, path, &ent, &target, &e);
	free(target);
	if (rc != 0)
		return ops__fs_fail(o, rc, &e);
	if (ent.kind == AGENTFS_DIR && o->j->recursive &&
	    (rc = delete_tree(o, path, &removed)) != 0)
		return rc;
	if ((rc = agentfs_remove(o->fs, path, &e)) != 0)
		return ops__fs_fail(o, rc, &e);
	removed++;
	params = json_object();
	ops__jset_str(params, "path", path);
	json_object_set_new(params, "recursive",
	    json_boolean(o->j->recursive));
	if ((rc = ops__commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_map(&o->pk, 2);
	pack_kv_str(&o->pk, "path", path);
	pack_kv_u64(&o->pk, "removed", removed);
	o->have_data = true;
	return 0;
}
