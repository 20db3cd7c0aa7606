/*
 * cli_output.c - running one op of the sandbox, fs and kv verbs and
 * printing its result: the data in words, or with --json converted from
 * msgpack to one line of JSON (bin as base64); a rejected op prints
 * "sandq: CODE: MESSAGE" and gives exit status 125. The verbs (cli_sandbox.c,
 * cli_fs.c) call these through cli_sandbox_int.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_common.h"
#include "cli_sandbox_int.h"
#include "../libsandq/sandq.h"

/*** Output ***/

/*
 * Converts one msgpack object to JSON: bin and ext as base64 strings, a
 * str that is not UTF-8 as base64 too, map keys that are not strings as
 * their JSON text. Integers past INT64_MAX become reals. Depth is bounded
 * by the decoder (payload_scan's PAYLOAD_MAX_DEPTH on results).
 */
static json_t *
mp_to_json(const msgpack_object *o)
{
	json_t *j;
	char *b64;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		return json_null();
	case MSGPACK_OBJECT_BOOLEAN:
		return json_boolean(o->via.boolean);
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		if (o->via.u64 <= INT64_MAX)
			return json_integer((json_int_t)o->via.u64);
		return json_real((double)o->via.u64);
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		return json_integer((json_int_t)o->via.i64);
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		return json_real(o->via.f64);
	case MSGPACK_OBJECT_STR:
		if ((j = json_stringn(o->via.str.ptr, o->via.str.size)) != NULL)
			return j;
		b64 = cli_base64((const uint8_t *)o->via.str.ptr, o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		b64 = cli_base64((const uint8_t *)o->via.bin.ptr, o->via.bin.size);
		break;
	case MSGPACK_OBJECT_EXT:
		b64 = cli_base64((const uint8_t *)o->via.ext.ptr, o->via.ext.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		j = json_array();
		for (uint32_t i = 0; i < o->via.array.size; i++)
			json_array_append_new(j, mp_to_json(&o->via.array.ptr[i]));
		return j;
	case MSGPACK_OBJECT_MAP:
		j = json_object();
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			json_t *val = mp_to_json(&kv->val);

			if (kv->key.type == MSGPACK_OBJECT_STR &&
			    json_object_setn_new(j, kv->key.via.str.ptr, kv->key.via.str.size,
			    val) == 0)
				continue;
			{
				json_t *k = mp_to_json(&kv->key);
				char *ks = json_dumps(k, JSON_ENCODE_ANY | JSON_COMPACT);

				json_object_set_new(j, ks ? ks : "?", val);
				free(ks);
				json_decref(k);
			}
		}
		return j;
	default:
		return json_null();
	}
	j = json_string(b64);
	free(b64);
	return j;
}

/* The result's data as JSON, or NULL when it has none (or it is garbage). */
json_t *
cli__result_data_json(const struct sandq_result *r)
{
	msgpack_unpacked u;
	size_t off = 0;
	json_t *j = NULL;

	if (r->data == NULL || r->data_len == 0)
		return NULL;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, &off) ==
	    MSGPACK_UNPACK_SUCCESS)
		j = mp_to_json(&u.data);
	msgpack_unpacked_destroy(&u);
	return j;
}

/* Prints j as one compact line and drops the reference. 0 or 125. */
int
cli__print_json_line(json_t *j)
{
	int rc = 0;

	if (json_dumpf(j, stdout, JSON_COMPACT | JSON_ENCODE_ANY) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF)
		rc = cli__fail("writing the output: %s", strerror(errno));
	json_decref(j);
	return rc;
}

/* {"sandbox","version","snapshot"} of a result, for ops without data. */
json_t *
cli__result_head_json(const struct sandq_result *r)
{
	json_t *o = json_object();

	if (r->sandbox)
		json_object_set_new(o, "sandbox", json_string(r->sandbox));
	if (r->version)
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
	if (r->snapshot)
		json_object_set_new(o, "snapshot", json_string(r->snapshot));
	return o;
}

/*
 * Formats epoch milliseconds as "2024-05-01T12:00:00Z" (UTC, seconds);
 * "-" for 0 or a value past what gmtime can take.
 */
const char *
cli__fmt_time_ms(char *buf, size_t size, json_int_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || gmtime_r(&t, &tm) == NULL ||
	    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, size, "-");
	return buf;
}

/* A string member or def. */
const char *
cli__jstr(const json_t *o, const char *k, const char *def)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : def;
}

const char *
cli__jesc(const json_t *o, const char *k, const char *def)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_string(v))
		return cli_esc(def);
	return cli_escn(json_string_value(v), json_string_length(v));
}

const char *
cli__jesc_cut(const json_t *o, const char *k, size_t width)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_string(v))
		return "";
	return cli_escn_cut(json_string_value(v), json_string_length(v), width);
}

/* An integer member or 0. */
json_int_t
cli__jint(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	if (json_is_real(v))
		return (json_int_t)json_real_value(v);
	return json_integer_value(v);
}

/* "k=v,k2=v2" of a labels map into buf, each key and value escaped. */
const char *
cli__fmt_labels(char *buf, size_t size, const json_t *labels)
{
	const char *k;
	json_t *v;
	size_t n = 0;

	buf[0] = '\0';
	json_object_foreach((json_t *)(uintptr_t)labels, k, v) {
		int w = snprintf(buf + n, size - n, "%s%s=%s", n ? "," : "", cli_esc(k),
		    json_is_string(v) ? cli_escn(json_string_value(v),
		    json_string_length(v)) : "");

		if (w < 0 || (size_t)w >= size - n) {
			/* No half label (nor half a character): cut before it. */
			snprintf(buf + n, size - n, "%s...", n ? "," : "");
			break;
		}
		n += (size_t)w;
	}
	return buf;
}

/* An info map as "key: value" lines, the server's text escaped. */
void
cli__print_info(const json_t *o)
{
	char t1[32], t2[32], lb[2048];

	printf("sandbox: %s\n", cli__jesc(o, "sandbox", ""));
	printf("version: %" JSON_INTEGER_FORMAT "\n", cli__jint(o, "version"));
	printf("snapshot: %s\n", cli__jesc(o, "snapshot", ""));
	if (json_object_get(o, "size"))
		printf("size: %" JSON_INTEGER_FORMAT "\n", cli__jint(o, "size"));
	printf("created_at: %s\n", cli__fmt_time_ms(t1, sizeof(t1), cli__jint(o, "created_at")));
	printf("updated_at: %s\n", cli__fmt_time_ms(t2, sizeof(t2), cli__jint(o, "updated_at")));
	printf("labels: %s\n", cli__fmt_labels(lb, sizeof(lb), json_object_get(o, "labels")));
}

/* An fs entry as "key: value" lines, names and target escaped. */
void
cli__print_entry(const json_t *o)
{
	char t[32];

	printf("path: %s\n", cli__jesc(o, "path", ""));
	printf("type: %s\n", cli__jesc(o, "type", "?"));
	printf("size: %" JSON_INTEGER_FORMAT "\n", cli__jint(o, "size"));
	printf("mode: %04o\n", (unsigned)(cli__jint(o, "mode") & 07777));
	printf("mtime: %s\n", cli__fmt_time_ms(t, sizeof(t), cli__jint(o, "mtime") * 1000));
	if (json_object_get(o, "target"))
		printf("target: %s\n", cli__jesc(o, "target", ""));
}

/*
 * Explains a result that is not ok: "sandq: CODE: MESSAGE" for a rejected
 * or failed op. Returns the exit status.
 */
static int
result_failed(const struct sandq_result *r)
{
	if (r->error_code)
		cli_warn("%s: %s", r->error_code,
		    r->error_message && r->error_message[0] ? r->error_message :
		    r->status);
	else
		cli_warn("%s: the op did not succeed", r->status);
	return sandq_result_exit_status(r) ? sandq_result_exit_status(r) :
	    CLI_EXIT_SANDQ;
}

/*
 * Runs one op and waits for it. Returns 0 with *out an ok result (owned by
 * the caller), or the exit status with the failure explained.
 */
int
cli__call(const struct sbx *s, struct sandq *c, const char *op,
    const struct sandq_op_args *a, struct sandq_result **out)
{
	struct sandq_job_opts o = cli__job_opts(s);
	struct sandq_result *r = NULL;
	int rc, status;

	*out = NULL;
	/* An op carries only the perms of the fs verbs. */
	if (strncmp(op, "fs.", 3) != 0) {
		o.perms = NULL;
		o.nperms = 0;
		o.perm_preset = NULL;
	}
	rc = sandq_call(c, op, a, &o, s->wait_ms, &r);
	if (rc == -ETIMEDOUT)
		return cli__fail("%s: no result after the wait timeout", op);
	if (rc == -EINVAL)
		return cli__usage(s, "%s", sandq_last_error(c));
	if (rc < 0)
		return cli__fail("%s", sandq_last_error(c));
	if (strcmp(r->status, "ok") != 0) {
		status = result_failed(r);
		sandq_result_free(r);
		return status;
	}
	*out = r;
	return 0;
}

/*
 * The common tail of a verb: --json prints the data (or the head), else
 * human() if given. Frees r. Returns the exit status.
 */
int
cli__finish(const struct sbx *s, struct sandq_result *r,
    void (*human)(const json_t *))
{
	json_t *d = cli__result_data_json(r);
	int status = 0;

	if (s->json) {
		status = cli__print_json_line(d && !json_is_null(d) ? json_incref(d) :
		    cli__result_head_json(r));
	} else if (human && d) {
		human(d);
		if (fflush(stdout) == EOF)
			status = cli__fail("writing the output: %s", strerror(errno));
	}
	json_decref(d);
	sandq_result_free(r);
	return status;
}

/* The bytes of a bin (or str) result. false if it holds none. */
bool
cli__result_bytes(const struct sandq_result *r, msgpack_unpacked *u,
    const char **p, size_t *len)
{
	size_t off = 0;

	if (r->data == NULL || msgpack_unpack_next(u, (const char *)r->data,
	    r->data_len, &off) != MSGPACK_UNPACK_SUCCESS)
		return false;
	if (u->data.type == MSGPACK_OBJECT_BIN) {
		*p = u->data.via.bin.ptr;
		*len = u->data.via.bin.size;
		return true;
	}
	if (u->data.type == MSGPACK_OBJECT_STR) {
		*p = u->data.via.str.ptr;
		*len = u->data.via.str.size;
		return true;
	}
	return false;
}
