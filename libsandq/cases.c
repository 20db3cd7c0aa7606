/*
 * cases.c - the per-case results of a run with cases (docs/protocol.md
 * "Cases"): the result's data, a msgpack map {cases: [{case, status,
 * exit_code, signal, stdout, stderr, stdout_truncated, stderr_truncated,
 * wall_ms, cpu_ms, pass, error}], passed, failed}, as plain structs.
 *
 * The data comes from Redis, so it is read as untrusted: msgpack-c parses
 * it, every value is type-checked, the case count is held to the wire
 * protocol's bound, and unknown keys are skipped (a newer server may add
 * some). Pure: no I/O.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "sandq.h"

/* Whether key k (a msgpack str) is name. */
static bool
key_is(const msgpack_object *k, const char *name)
{
	size_t n = strlen(name);

	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	    memcmp(k->via.str.ptr, name, n) == 0;
}

/* A str or bin value as a NUL-terminated copy; false for another type. */
static bool
get_bytes(const msgpack_object *v, uint8_t **out, size_t *len)
{
	const char *p;
	size_t n;

	if (v->type == MSGPACK_OBJECT_STR) {
		p = v->via.str.ptr;
		n = v->via.str.size;
	} else if (v->type == MSGPACK_OBJECT_BIN) {
		p = v->via.bin.ptr;
		n = v->via.bin.size;
	} else {
		return false;
	}
	free(*out);
	*out = (uint8_t *)xmemdup0(p, n);
	if (len != NULL)
		*len = n;
	return true;
}

static bool
get_u64(const msgpack_object *v, uint64_t *out)
{
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return false;
	*out = v->via.u64;
	return true;
}

static bool
get_int(const msgpack_object *v, int *out)
{
	if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT32_MAX)
		*out = (int)v->via.u64;
	else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
	    v->via.i64 >= INT32_MIN)
		*out = (int)v->via.i64;
	else
		return false;
	return true;
}

static bool
get_bool(const msgpack_object *v, bool *out)
{
	if (v->type != MSGPACK_OBJECT_BOOLEAN)
		return false;
	*out = v->via.boolean;
	return true;
}

/* One case's map into cr. False when a known key has the wrong type. */
static bool
case_decode(const msgpack_object *o, struct sandq_case_result *cr)
{
	bool pass = false;

	cr->pass = -1;
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &o->via.map.ptr[i].key;
		const msgpack_object *v = &o->via.map.ptr[i].val;
		bool ok = true;

		if (key_is(k, "case"))
			ok = get_u64(v, &cr->index);
		else if (key_is(k, "status"))
			ok = get_bytes(v, (uint8_t **)&cr->status, NULL);
		else if (key_is(k, "exit_code"))
			ok = get_int(v, &cr->exit_code);
		else if (key_is(k, "signal"))
			ok = get_int(v, &cr->signal);
		else if (key_is(k, "stdout"))
			ok = get_bytes(v, &cr->stdout_data, &cr->stdout_len);
		else if (key_is(k, "stderr"))
			ok = get_bytes(v, &cr->stderr_data, &cr->stderr_len);
		else if (key_is(k, "stdout_truncated"))
			ok = get_bool(v, &cr->stdout_truncated);
		else if (key_is(k, "stderr_truncated"))
			ok = get_bool(v, &cr->stderr_truncated);
		else if (key_is(k, "wall_ms"))
			ok = get_u64(v, &cr->wall_ms);
		else if (key_is(k, "cpu_ms"))
			ok = get_u64(v, &cr->cpu_ms);
		else if (key_is(k, "pass")) {
			ok = get_bool(v, &pass);
			cr->pass = pass ? 1 : 0;
		} else if (key_is(k, "error"))
			ok = get_bytes(v, (uint8_t **)&cr->error, NULL);
		if (!ok)
			return false;
	}
	if (cr->status == NULL)
		return false;
	if (cr->stdout_data == NULL)
		cr->stdout_data = (uint8_t *)xstrdup("");
	if (cr->stderr_data == NULL)
		cr->stderr_data = (uint8_t *)xstrdup("");
	return true;
}

int
sandq_cases_decode(const struct sandq_result *r, struct sandq_cases **out)
{
	msgpack_unpacked u;
	const msgpack_object *root;
	struct sandq_cases *cs = NULL;
	size_t off = 0;
	int rc = -EBADMSG;

	*out = NULL;
	if (r == NULL || r->data == NULL || r->data_len == 0)
		return -ENOENT;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, &off) !=
	    MSGPACK_UNPACK_SUCCESS || off != r->data_len)
		goto out_free;
	root = &u.data;
	if (root->type != MSGPACK_OBJECT_MAP)
		goto out_free;
	cs = xcalloc(1, sizeof(*cs));
	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object *k = &root->via.map.ptr[i].key;
		const msgpack_object *v = &root->via.map.ptr[i].val;

		if (key_is(k, "passed") && !get_u64(v, &cs->passed))
			goto out_free;
		if (key_is(k, "failed") && !get_u64(v, &cs->failed))
			goto out_free;
		if (!key_is(k, "cases"))
			continue;
		if (v->type != MSGPACK_OBJECT_ARRAY || cs->cases != NULL ||
		    v->via.array.size > JOB_CASES_MAX)
			goto out_free;
		cs->cases = xcalloc(v->via.array.size + 1, sizeof(*cs->cases));
		for (uint32_t k2 = 0; k2 < v->via.array.size; k2++) {
			if (!case_decode(&v->via.array.ptr[k2], &cs->cases[cs->ncases++]))
				goto out_free;
		}
	}
	if (cs->cases == NULL)
		goto out_free;
	*out = cs;
	cs = NULL;
	rc = 0;

out_free:
	sandq_cases_free(cs);
	msgpack_unpacked_destroy(&u);
	return rc;
}

void
sandq_cases_free(struct sandq_cases *cs)
{
	if (cs == NULL)
		return;
	for (size_t i = 0; i < cs->ncases; i++) {
		struct sandq_case_result *cr = &cs->cases[i];

		free(cr->status);
		free(cr->stdout_data);
		free(cr->stderr_data);
		free(cr->error);
	}
	free(cs->cases);
	free(cs);
}
