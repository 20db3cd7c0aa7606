/*
 * mpjson.c - one msgpack object as JSON (see mpjson.h).
 *
 * DESIGN: moved out of cli/cli_common.c unchanged, so the CLI's output
 * stays byte for byte what it was while the gateway shares it. Recursion
 * follows the object; its depth is bounded where the bytes were decoded
 * (payload_scan's PAYLOAD_MAX_DEPTH on results).
 */
#include <stdint.h>
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
