/*
 * mpjson.c - one msgpack object as JSON (see mpjson.h).
 *
 * DESIGN: moved out of cli/cli_common.c unchanged, so the CLI's output
 * stays byte for byte what it was while the gateway shares it. Recursion
 * follows the object; its depth is bounded where the bytes were decoded
 * (payload_scan's PAYLOAD_MAX_DEPTH on results).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>

#include "../common/xmalloc.h"
#include "mpjson.h"

#define B64_CHUNK (3u * 1024u * 1024u)	/* a multiple of 3: chunks concatenate */

char *
mpjson_base64(const uint8_t *p, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	char *o = out;

	/* EVP_EncodeBlock takes an int; whole 3-byte chunks concatenate. */
	while (n > 0) {
		size_t chunk = n > B64_CHUNK ? B64_CHUNK : n;

		o += EVP_EncodeBlock((unsigned char *)o, p, (int)chunk);
		p += chunk;
		n -= chunk;
	}
	*o = '\0';
	return out;
}

json_t *
mpjson_value(const msgpack_object *o)
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
		b64 = mpjson_base64((const uint8_t *)o->via.str.ptr, o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		b64 = mpjson_base64((const uint8_t *)o->via.bin.ptr, o->via.bin.size);
		break;
	case MSGPACK_OBJECT_EXT:
		b64 = mpjson_base64((const uint8_t *)o->via.ext.ptr, o->via.ext.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		j = json_array();
		for (uint32_t i = 0; i < o->via.array.size; i++)
			json_array_append_new(j, mpjson_value(&o->via.array.ptr[i]));
		return j;
	case MSGPACK_OBJECT_MAP:
		j = json_object();
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			json_t *val = mpjson_value(&kv->val);

			if (kv->key.type == MSGPACK_OBJECT_STR &&
			    json_object_setn_new(j, kv->key.via.str.ptr, kv->key.via.str.size,
			    val) == 0)
				continue;
			{
				json_t *k = mpjson_value(&kv->key);
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

/* Sets name to the bytes as a string if they are UTF-8, else name_b64. */
static void
set_bytes(json_t *obj, const char *name, const uint8_t *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	char key[32];
	char *b64;

	if (s != NULL) {
		json_object_set_new(obj, name, s);
		return;
	}
	snprintf(key, sizeof(key), "%s_b64", name);
	b64 = mpjson_base64(p, n);
	json_object_set_new(obj, key, json_string(b64));
	free(b64);
}

static json_t *
str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *
mpjson_result(const struct result *r)
{
	json_t *o = json_object(), *refused = json_object();

	json_object_set_new(o, "id", str_or_null(r->id));
	json_object_set_new(o, "status", json_string(res_status_name(r->status)));
	json_object_set_new(o, "exit_code", json_integer(r->exit_code));
	json_object_set_new(o, "signal", json_integer(r->signal));
	set_bytes(o, "stdout", r->out, r->out_len);
	json_object_set_new(o, "stdout_len", json_integer((json_int_t)r->out_len));
	json_object_set_new(o, "stdout_truncated", json_boolean(r->out_truncated));
	set_bytes(o, "stderr", r->err, r->err_len);
	json_object_set_new(o, "stderr_len", json_integer((json_int_t)r->err_len));
	json_object_set_new(o, "stderr_truncated", json_boolean(r->err_truncated));
	json_object_set_new(o, "wall_ms", json_integer((json_int_t)r->wall_ms));
	json_object_set_new(o, "cpu_ms", json_integer((json_int_t)r->cpu_ms));
	json_object_set_new(o, "max_rss_kb", json_integer((json_int_t)r->max_rss_kb));
	json_object_set_new(o, "queued_at", json_integer((json_int_t)r->queued_at));
	json_object_set_new(o, "started_at", json_integer((json_int_t)r->started_at));
	json_object_set_new(o, "finished_at", json_integer((json_int_t)r->finished_at));
	json_object_set_new(o, "host", str_or_null(r->host));
	json_object_set_new(o, "worker", json_integer(r->worker));
	json_object_set_new(o, "attempt", json_integer(r->attempt));
	if (r->error_code || r->error_message)
		json_object_set_new(o, "error", json_pack("{s:s, s:s}",
		    "code", r->error_code ? r->error_code : "",
		    "message", r->error_message ? r->error_message : ""));
	else
		json_object_set_new(o, "error", json_null());
	for (size_t i = 0; i < r->nrefused; i++)
		json_object_set_new(refused, r->refused[i].name,
		    json_integer((json_int_t)r->refused[i].count));
	json_object_set_new(o, "refused", refused);
	if (r->image) {
		json_object_set_new(o, "image", json_string(r->image));
		json_object_set_new(o, "image_digest", str_or_null(r->image_digest));
		json_object_set_new(o, "image_name", str_or_null(r->image_name));
	}
	if (r->negress) {
		/* net "allow" runs: the hosts reached or refused (docs/protocol.md). */
		json_t *rows = json_array();

		for (size_t i = 0; i < r->negress; i++) {
			const struct result_egress *g = &r->egress[i];
			json_t *row = json_pack("{s:o, s:I, s:b, s:I, s:I, s:I}",
			    "host", str_or_null(g->host), "port", (json_int_t)g->port,
			    "allowed", g->allowed, "conns", (json_int_t)g->conns,
			    "up", (json_int_t)g->up, "down", (json_int_t)g->down);

			if (g->reason)
				json_object_set_new(row, "reason", str_or_null(g->reason));
			if (g->throttled_ms)
				json_object_set_new(row, "throttled_ms",
				    json_integer((json_int_t)g->throttled_ms));
			json_array_append_new(rows, row);
		}
		json_object_set_new(o, "egress", rows);
	}
	if (r->sandbox) {
		json_t *ch = json_array(), *rp = json_array();

		json_object_set_new(o, "sandbox", json_string(r->sandbox));
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
		json_object_set_new(o, "snapshot", str_or_null(r->snapshot));
		for (size_t i = 0; i < r->nchanged; i++)
			json_array_append_new(ch, str_or_null(r->changed[i]));
		json_object_set_new(o, "changed", ch);
		json_object_set_new(o, "changed_truncated",
		    json_boolean(r->changed_truncated));
		json_object_set_new(o, "changes", json_pack("{s:I, s:I, s:I}",
		    "added", (json_int_t)r->added, "modified", (json_int_t)r->modified,
		    "removed", (json_int_t)r->removed));
		for (size_t i = 0; i < r->nrefused_paths; i++)
			json_array_append_new(rp, str_or_null(r->refused_paths[i]));
		json_object_set_new(o, "refused_paths", rp);
	}
	return o;
}
