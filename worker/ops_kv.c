/*
 * ops_kv.c - the kv.* ops (get, set, delete, keys) on the key-value store
 * inside a sandbox's snapshot, called through ops.c's dispatch table.
 * A set or delete commits a new snapshot like any other write.
 */
#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "../agentfs/agentfs.h"
#include "ops.h"
#include "ops_int.h"

/*** kv ops ***/

static int
key_get(struct ops *o, const char **key)
{
	*key = o->j->key;
	if (*key == NULL || **key == '\0')
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'key': required by %s", job_op_name(o->j->op));
	if (strlen(*key) > JOB_KV_KEY_MAX)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'key': longer than %d bytes", JOB_KV_KEY_MAX);
	return 0;
}

static int
kv_fail(struct ops *o, int rc, const char *key, const struct err *e)
{
	if (rc == -ENOENT)
		return ops__fail(o, ST_REJECTED, "not_found",
		    "sandbox '%s': kv key '%.256s' not found", o->id, key);
	if (rc == -EINVAL)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "sandbox '%s': kv key '%.256s': %s", o->id, key,
		    ops__emsg(e));
	return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s", o->id,
	    ops__emsg(e));
}

int
ops__kv_get(struct ops *o)
{
	struct err e = { 0 };
	char *value = NULL;
	const char *key;
	int rc;

	if ((rc = key_get(o, &key)) != 0 || (rc = ops__load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_get(o->fs, key, &value, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	pack_str(&o->pk, value);
	o->have_data = true;
	free(value);
	return 0;
}

int
ops__kv_set(struct ops *o)
{
	const char *key, *value = o->j->value;
	struct err e = { 0 };
	json_t *params;
	int rc;

	if ((rc = key_get(o, &key)) != 0)
		return rc;
	if (value == NULL)
		return ops__fail(o, ST_REJECTED, "invalid", "field 'value': required "
		    "by kv.set");
	if (strlen(value) > JOB_KV_VALUE_MAX)
		return ops__fail(o, ST_REJECTED, "too_large",
		    "field 'value': over %u bytes", JOB_KV_VALUE_MAX);
	if ((rc = ops__load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_set(o->fs, key, value, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	params = json_object();
	ops__jset_str(params, "key", key);
	ops__jset_str(params, "value", value);
	if ((rc = ops__commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

int
ops__kv_delete(struct ops *o)
{
	struct err e = { 0 };
	const char *key;
	json_t *params;
	int rc;

	if ((rc = key_get(o, &key)) != 0 || (rc = ops__load(o)) != 0)
		return rc;
	if ((rc = agentfs_kv_delete(o->fs, key, &e)) != 0)
		return kv_fail(o, rc, key, &e);
	params = json_object();
	ops__jset_str(params, "key", key);
	if ((rc = ops__commit(o, params, false, NULL)) != 0)
		return rc;
	msgpack_pack_nil(&o->pk);
	o->have_data = true;
	return 0;
}

static int
keys_cb(const char *key, void *arg)
{
	struct seq *s = arg;

	pack_str(&s->pk, key);
	s->n++;
	return 0;
}

int
ops__kv_keys(struct ops *o)
{
	struct err e = { 0 };
	struct seq s;
	int rc;

	if (o->j->prefix != NULL && strlen(o->j->prefix) > JOB_KV_KEY_MAX)
		return ops__fail(o, ST_REJECTED, "invalid",
		    "field 'prefix': longer than %d bytes", JOB_KV_KEY_MAX);
	if ((rc = ops__load(o)) != 0)
		return rc;
	ops__seq_init(&s);
	if ((rc = agentfs_kv_keys(o->fs, o->j->prefix, keys_cb, &s,
	    &e)) != 0) {
		ops__seq_destroy(&s);
		return ops__fail(o, ST_INTERNAL, "store", "sandbox '%s': %s",
		    o->id, ops__emsg(&e));
	}
	ops__seq_finish(&s, &o->pk);
	o->have_data = true;
	return 0;
}
