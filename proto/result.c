/*
 * result.c - a job's result as a plain struct, and its msgpack codec (pure,
 * no I/O).
 *
 * DESIGN: decoding a result is lenient (a client ignores fields a newer
 * daemon adds), unlike a job's (job.c). Output bytes are encoded as bin,
 * since a program's output need not be UTF-8; r->data is one msgpack object,
 * copied into the map as it is.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "job.h"
#include "pack.h"
#include "result.h"
#include "scan.h"

/*** Names ***/

static const char *const status_names[ST__COUNT] = {
	[ST_OK] = "ok", [ST_EXIT] = "exit", [ST_SIGNAL] = "signal",
	[ST_TIMEOUT] = "timeout", [ST_CPU_LIMIT] = "cpu_limit",
	[ST_MEMORY_LIMIT] = "memory_limit", [ST_PIDS_LIMIT] = "pids_limit",
	[ST_OUTPUT_LIMIT] = "output_limit", [ST_DISK_LIMIT] = "disk_limit",
	[ST_REJECTED] = "rejected", [ST_CANCELLED] = "cancelled",
	[ST_EXPIRED] = "expired", [ST_INTERNAL] = "internal",
};

const char *
res_status_name(enum res_status st)
{
	if ((unsigned)st < ST__COUNT)
		return status_names[st];
	return "unknown";
}

int
res_status_parse(const char *s, enum res_status *st)
{
	for (int i = 0; i < ST__COUNT; i++) {
		if (strcmp(s, status_names[i]) == 0) {
			*st = (enum res_status)i;
			return 0;
		}
	}
	return -EINVAL;
}

/*** Results ***/

static void
strv_free(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

struct result *
result_new(const char *id)
{
	struct result *r = xcalloc(1, sizeof(*r));

	r->id = xstrdup(id ? id : "");
	r->exit_code = -1;
	r->worker = -1;
	r->attempt = 1;
	return r;
}

void
result_free(struct result *r)
{
	if (r == NULL)
		return;
	free(r->id);
	free(r->out);
	free(r->err);
	free(r->host);
	free(r->error_code);
	free(r->error_message);
	for (size_t i = 0; i < r->nrefused; i++)
		free(r->refused[i].name);
	free(r->refused);
	free(r->sandbox);
	free(r->snapshot);
	free(r->image);
	free(r->image_digest);
	free(r->image_name);
	for (size_t i = 0; i < r->negress; i++) {
		free(r->egress[i].host);
		free(r->egress[i].reason);
	}
	free(r->egress);
	strv_free(r->changed, r->nchanged);
	strv_free(r->refused_paths, r->nrefused_paths);
	free(r->data);
	free(r);
}

void
result_add_refusal(struct result *r, const char *name, uint64_t count)
{
	for (size_t i = 0; i < r->nrefused; i++) {
		if (strcmp(r->refused[i].name, name) == 0) {
			r->refused[i].count += count;
			return;
		}
	}
	if (r->nrefused >= RESULT_REFUSED_MAX)
		return;
	r->refused = xreallocarray(r->refused, r->nrefused + 1, sizeof(*r->refused));
	r->refused[r->nrefused].name = xstrdup(name);
	r->refused[r->nrefused].count = count;
	r->nrefused++;
}

void
result_set_error(struct result *r, enum res_status st, const char *code,
    const char *fmt, ...)
{
	va_list ap;

	r->status = st;
	free(r->error_code);
	free(r->error_message);
	r->error_code = xstrdup(code);
	va_start(ap, fmt);
	if (vasprintf(&r->error_message, fmt, ap) < 0)
		fatalx("result_set_error: out of memory");
	va_end(ap);
}

static void
pk_kv_strv(msgpack_packer *pk, const char *k, char *const *v, size_t n)
{
	pack_str(pk, k);
	msgpack_pack_array(pk, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		pack_str(pk, v[i]);
}

/*
 * Encodes a result. r->data, when set, must hold exactly one msgpack object
 * (it is copied into the map as it is); otherwise returns -EINVAL, since a
 * result whose map does not parse could not even report the failure.
 */
int
payload_result_encode(const struct result *r, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	bool changes = r->added || r->modified || r->removed;
	uint32_t n = 17 + !!r->host + !!r->error_code + !!r->nrefused +
	    !!r->sandbox + !!r->version + !!r->snapshot + !!r->nchanged +
	    r->changed_truncated + changes + !!r->nrefused_paths + !!r->data +
	    !!r->image + !!r->image_digest + !!r->image_name + !!r->negress;

	if (r->data != NULL) {
		struct err e;
		size_t off = 0;

		if (r->data_len == 0 || r->data_len > RESULT_DATA_MAX ||
		    scan_object(r->data, r->data_len, &off, &e) < 0 ||
		    off != r->data_len)
			return -EINVAL;
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	pack_kv_u64(&pk, "v", PAYLOAD_VERSION);
	pack_kv_str(&pk, "id", r->id);
	pack_kv_str(&pk, "status", res_status_name(r->status));
	pack_kv_i64(&pk, "exit_code", r->exit_code);
	pack_kv_i64(&pk, "signal", r->signal);
	pack_str(&pk, "stdout");
	pack_bin(&pk, r->out, r->out_len);
	pack_str(&pk, "stderr");
	pack_bin(&pk, r->err, r->err_len);
	pack_kv_bool(&pk, "stdout_truncated", r->out_truncated);
	pack_kv_bool(&pk, "stderr_truncated", r->err_truncated);
	pack_kv_u64(&pk, "wall_ms", r->wall_ms);
	pack_kv_u64(&pk, "cpu_ms", r->cpu_ms);
	pack_kv_u64(&pk, "max_rss_kb", r->max_rss_kb);
	pack_kv_u64(&pk, "queued_at", r->queued_at);
	pack_kv_u64(&pk, "started_at", r->started_at);
	pack_kv_u64(&pk, "finished_at", r->finished_at);
	pack_kv_i64(&pk, "worker", r->worker);
	pack_kv_i64(&pk, "attempt", r->attempt);
	if (r->host)
		pack_kv_str(&pk, "host", r->host);
	if (r->error_code) {
		pack_str(&pk, "error");
		msgpack_pack_map(&pk, 2);
		pack_kv_str(&pk, "code", r->error_code);
		pack_kv_str(&pk, "message", r->error_message ? r->error_message : "");
	}
	if (r->nrefused) {
		pack_str(&pk, "refused");
		msgpack_pack_map(&pk, (uint32_t)r->nrefused);
		for (size_t i = 0; i < r->nrefused; i++)
			pack_kv_u64(&pk, r->refused[i].name, r->refused[i].count);
	}
	if (r->sandbox)
		pack_kv_str(&pk, "sandbox", r->sandbox);
	if (r->version)
		pack_kv_u64(&pk, "version", r->version);
	if (r->snapshot)
		pack_kv_str(&pk, "snapshot", r->snapshot);
	if (r->nchanged)
		pk_kv_strv(&pk, "changed", r->changed, r->nchanged);
	if (r->changed_truncated)
		pack_kv_bool(&pk, "changed_truncated", true);
	if (changes) {
		pack_str(&pk, "changes");
		msgpack_pack_map(&pk, 3);
		pack_kv_u64(&pk, "added", r->added);
		pack_kv_u64(&pk, "modified", r->modified);
		pack_kv_u64(&pk, "removed", r->removed);
	}
	if (r->nrefused_paths)
		pk_kv_strv(&pk, "refused_paths", r->refused_paths, r->nrefused_paths);
	if (r->image)
		pack_kv_str(&pk, "image", r->image);
	if (r->image_digest)
		pack_kv_str(&pk, "image_digest", r->image_digest);
	if (r->image_name)
		pack_kv_str(&pk, "image_name", r->image_name);
	if (r->negress) {
		pack_str(&pk, "egress");
		msgpack_pack_array(&pk, (uint32_t)r->negress);
		for (size_t i = 0; i < r->negress; i++) {
			const struct result_egress *g = &r->egress[i];

			msgpack_pack_map(&pk, 6 + !!g->reason + !!g->throttled_ms);
			pack_kv_str(&pk, "host", g->host);
			pack_kv_u64(&pk, "port", g->port);
			pack_kv_bool(&pk, "allowed", g->allowed);
			if (g->reason)
				pack_kv_str(&pk, "reason", g->reason);
			pack_kv_u64(&pk, "conns", g->conns);
			pack_kv_u64(&pk, "up", g->up);
			pack_kv_u64(&pk, "down", g->down);
			if (g->throttled_ms)
				pack_kv_u64(&pk, "throttled_ms", g->throttled_ms);
		}
	}
	if (r->data) {
		/* Already one object (checked above): written as it is. */
		pack_str(&pk, "data");
		msgpack_sbuffer_write(&sb, (const char *)r->data, r->data_len);
	}
	return pack_release(&sb, out, outlen);
}

bool
result_add_egress(struct result *r, const char *host, uint16_t port, bool allowed,
    const char *reason, uint64_t up, uint64_t down, uint64_t throttled_ms)
{
	struct result_egress *g;

	if (reason != NULL && reason[0] == '\0')
		reason = NULL;
	for (size_t i = 0; i < r->negress; i++) {
		g = &r->egress[i];
		if (g->port == port && g->allowed == allowed && strcmp(g->host, host) == 0 &&
		    (g->reason == NULL) == (reason == NULL) &&
		    (reason == NULL || strcmp(g->reason, reason) == 0)) {
			g->conns++;
			g->up += up;
			g->down += down;
			g->throttled_ms += throttled_ms;
			return true;
		}
	}
	if (r->negress == RESULT_EGRESS_MAX)
		return false;
	r->egress = xreallocarray(r->egress, r->negress + 1, sizeof(*r->egress));
	g = &r->egress[r->negress++];
	*g = (struct result_egress){ .host = xstrdup(host), .port = port,
	    .allowed = allowed, .reason = reason ? xstrdup(reason) : NULL, .conns = 1,
	    .up = up, .down = down, .throttled_ms = throttled_ms };
	return true;
}

/* Reads egress: an array of at most RESULT_EGRESS_MAX rows. */
static int
decode_result_egress(const msgpack_object *v, struct result *r, struct err *e)
{
	if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > RESULT_EGRESS_MAX ||
	    r->negress > 0)
		return err_set(e, -EINVAL, "field 'egress': expected an array of at most "
		    "%d maps", RESULT_EGRESS_MAX);
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		const msgpack_object *o = &v->via.array.ptr[i];
		char *host = NULL, *reason = NULL;
		uint64_t port = 0, conns = 0, up = 0, down = 0, throttled = 0;
		bool allowed = false;
		int rc = 0;

		if (o->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL, "field 'egress': expected maps");
		for (uint32_t m = 0; m < o->via.map.size && rc == 0; m++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[m];

			if (scan_key_is(&kv->key, "host") && host == NULL)
				rc = scan_get_cstr(&kv->val, "egress", 256, &host, e);
			else if (scan_key_is(&kv->key, "reason") && reason == NULL)
				rc = scan_get_cstr(&kv->val, "egress", 256, &reason, e);
			else if (scan_key_is(&kv->key, "port"))
				rc = scan_get_u64(&kv->val, "egress", 0, 65535, &port, e);
			else if (scan_key_is(&kv->key, "allowed"))
				rc = scan_get_bool(&kv->val, "egress", &allowed, e);
			else if (scan_key_is(&kv->key, "conns"))
				rc = scan_get_u64(&kv->val, "egress", 0, UINT64_MAX, &conns, e);
			else if (scan_key_is(&kv->key, "up"))
				rc = scan_get_u64(&kv->val, "egress", 0, UINT64_MAX, &up, e);
			else if (scan_key_is(&kv->key, "down"))
				rc = scan_get_u64(&kv->val, "egress", 0, UINT64_MAX, &down, e);
			else if (scan_key_is(&kv->key, "throttled_ms"))
				rc = scan_get_u64(&kv->val, "egress", 0, UINT64_MAX, &throttled, e);
		}
		if (rc == 0 && host == NULL)
			rc = err_set(e, -EINVAL, "field 'egress': a row without a host");
		if (rc == 0) {
			r->egress = xreallocarray(r->egress, r->negress + 1, sizeof(*r->egress));
			r->egress[r->negress++] = (struct result_egress){ .host = host,
			    .port = (uint16_t)port, .allowed = allowed, .reason = reason,
			    .conns = conns, .up = up, .down = down, .throttled_ms = throttled };
		} else {
			free(host);
			free(reason);
			return -EINVAL;
		}
	}
	return 0;
}

/* Reads an array of at most max path strings (changed, refused_paths). */
static int
decode_result_paths(const msgpack_object *v, const char *field, size_t max,
    char ***out, size_t *nout, struct err *e)
{
	char name[48];

	strv_free(*out, *nout);
	*out = NULL;
	*nout = 0;
	if (v->type != MSGPACK_OBJECT_ARRAY)
		return err_set(e, -EINVAL, "field '%s': expected an array of paths", field);
	if (v->via.array.size > max)
		return err_set(e, -EINVAL, "field '%s': more than %zu paths", field, max);
	*out = xcalloc(v->via.array.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		snprintf(name, sizeof(name), "%s[%u]", field, i);
		if (scan_get_cstr(&v->via.array.ptr[i], name, JOB_PATH_MAX + 1,
		    &(*out)[i], e) < 0)
			return -EINVAL;
		(*nout)++;
	}
	return 0;
}

/*
 * Copies data's object into fresh bytes. The object lives in the unpacked
 * zone of the whole result, which payload_scan() bounded already, so this
 * re-packing (never longer than the input) only needs its own size check.
 */
static int
decode_result_data(const msgpack_object *v, struct result *r, struct err *e)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct err se;
	size_t off = 0;

	free(r->data);
	r->data = NULL;
	r->data_len = 0;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_object(&pk, *v) != 0 || sb.size == 0) {
		msgpack_sbuffer_destroy(&sb);
		return err_set(e, -EINVAL, "field 'data': cannot be copied");
	}
	if (sb.size > RESULT_DATA_MAX || scan_object((const uint8_t *)sb.data,
	    sb.size, &off, &se) < 0 || off != sb.size) {
		msgpack_sbuffer_destroy(&sb);
		return err_set(e, -EINVAL, "field 'data': not one msgpack object of "
		    "at most %u bytes", RESULT_DATA_MAX);
	}
	r->data = (uint8_t *)sb.data;
	r->data_len = sb.size;
	return 0;
}

static int
decode_result_field(const msgpack_object *k, const msgpack_object *v,
    struct result *r, struct err *e)
{
	int64_t i = 0;

	if (scan_key_is(k, "id")) {
		char *s = NULL;
		if (scan_get_cstr(v, "id", JOB_ID_MAX, &s, e) < 0)
			return -EINVAL;
		free(r->id);
		r->id = s;
	} else if (scan_key_is(k, "status")) {
		char *s = NULL;
		int rc = scan_get_cstr(v, "status", 32, &s, e);
		if (rc == 0 && res_status_parse(s, &r->status) < 0)
			rc = err_set(e, -EINVAL, "field 'status': unknown status '%s'", s);
		free(s);
		return rc;
	} else if (scan_key_is(k, "exit_code")) {
		if (scan_get_i64(v, "exit_code", &i, e) < 0)
			return -EINVAL;
		r->exit_code = (int)i;
	} else if (scan_key_is(k, "signal")) {
		if (scan_get_i64(v, "signal", &i, e) < 0)
			return -EINVAL;
		r->signal = (int)i;
	} else if (scan_key_is(k, "stdout")) {
		free(r->out);
		r->out = NULL;
		r->out_len = 0;
		return scan_get_bytes(v, "stdout", RESULT_OUTPUT_MAX, &r->out, &r->out_len, e);
	} else if (scan_key_is(k, "stderr")) {
		free(r->err);
		r->err = NULL;
		r->err_len = 0;
		return scan_get_bytes(v, "stderr", RESULT_OUTPUT_MAX, &r->err, &r->err_len, e);
	} else if (scan_key_is(k, "stdout_truncated")) {
		return scan_get_bool(v, "stdout_truncated", &r->out_truncated, e);
	} else if (scan_key_is(k, "stderr_truncated")) {
		return scan_get_bool(v, "stderr_truncated", &r->err_truncated, e);
	} else if (scan_key_is(k, "wall_ms")) {
		return scan_get_u64(v, "wall_ms", 0, UINT64_MAX, &r->wall_ms, e);
	} else if (scan_key_is(k, "cpu_ms")) {
		return scan_get_u64(v, "cpu_ms", 0, UINT64_MAX, &r->cpu_ms, e);
	} else if (scan_key_is(k, "max_rss_kb")) {
		return scan_get_u64(v, "max_rss_kb", 0, UINT64_MAX, &r->max_rss_kb, e);
	} else if (scan_key_is(k, "queued_at")) {
		return scan_get_u64(v, "queued_at", 0, UINT64_MAX, &r->queued_at, e);
	} else if (scan_key_is(k, "started_at")) {
		return scan_get_u64(v, "started_at", 0, UINT64_MAX, &r->started_at, e);
	} else if (scan_key_is(k, "finished_at")) {
		return scan_get_u64(v, "finished_at", 0, UINT64_MAX, &r->finished_at, e);
	} else if (scan_key_is(k, "worker")) {
		return scan_get_i64(v, "worker", &r->worker, e);
	} else if (scan_key_is(k, "attempt")) {
		return scan_get_i64(v, "attempt", &r->attempt, e);
	} else if (scan_key_is(k, "host")) {
		free(r->host);
		r->host = NULL;
		return scan_get_cstr(v, "host", 256, &r->host, e);
	} else if (scan_key_is(k, "error")) {
		if (v->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL, "field 'error': expected a map");
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			char **dst = scan_key_is(&kv->key, "code") ? &r->error_code :
			    scan_key_is(&kv->key, "message") ? &r->error_message : NULL;
			if (dst == NULL)
				continue;
			free(*dst);
			*dst = NULL;
			if (scan_get_cstr(&kv->val, "error", 4096, dst, e) < 0)
				return -EINVAL;
		}
	} else if (scan_key_is(k, "refused")) {
		if (v->type != MSGPACK_OBJECT_MAP || v->via.map.size > RESULT_REFUSED_MAX)
			return err_set(e, -EINVAL, "field 'refused': expected a map of at "
			    "most %d syscall names to counts", RESULT_REFUSED_MAX);
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			char *name = NULL;
			uint64_t count;

			if (scan_get_cstr(&kv->key, "refused", 64, &name, e) < 0)
				return -EINVAL;
			if (scan_get_u64(&kv->val, "refused", 0, UINT64_MAX, &count, e) < 0) {
				free(name);
				return -EINVAL;
			}
			result_add_refusal(r, name, count);
			free(name);
		}
	} else if (scan_key_is(k, "sandbox")) {
		free(r->sandbox);
		r->sandbox = NULL;
		return scan_get_cstr(v, "sandbox", JOB_SANDBOX_ID_MAX, &r->sandbox, e);
	} else if (scan_key_is(k, "version")) {
		return scan_get_u64(v, "version", 0, UINT64_MAX, &r->version, e);
	} else if (scan_key_is(k, "snapshot")) {
		free(r->snapshot);
		r->snapshot = NULL;
		return scan_get_cstr(v, "snapshot", RESULT_SNAPSHOT_MAX, &r->snapshot, e);
	} else if (scan_key_is(k, "changed")) {
		return decode_result_paths(v, "changed", RESULT_CHANGED_MAX,
		    &r->changed, &r->nchanged, e);
	} else if (scan_key_is(k, "changed_truncated")) {
		return scan_get_bool(v, "changed_truncated", &r->changed_truncated, e);
	} else if (scan_key_is(k, "changes")) {
		if (v->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL, "field 'changes': expected a map");
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			uint64_t *dst = scan_key_is(&kv->key, "added") ? &r->added :
			    scan_key_is(&kv->key, "modified") ? &r->modified :
			    scan_key_is(&kv->key, "removed") ? &r->removed : NULL;
			if (dst != NULL && scan_get_u64(&kv->val, "changes", 0, UINT64_MAX,
			    dst, e) < 0)
				return -EINVAL;
		}
	} else if (scan_key_is(k, "refused_paths")) {
		return decode_result_paths(v, "refused_paths", RESULT_REFUSED_PATHS_MAX,
		    &r->refused_paths, &r->nrefused_paths, e);
	} else if (scan_key_is(k, "data")) {
		return decode_result_data(v, r, e);
	} else if (scan_key_is(k, "image")) {
		free(r->image);
		r->image = NULL;
		return scan_get_cstr(v, "image", RESULT_IMAGE_MAX, &r->image, e);
	} else if (scan_key_is(k, "image_digest")) {
		free(r->image_digest);
		r->image_digest = NULL;
		return scan_get_cstr(v, "image_digest", RESULT_IMAGE_MAX, &r->image_digest, e);
	} else if (scan_key_is(k, "image_name")) {
		free(r->image_name);
		r->image_name = NULL;
		return scan_get_cstr(v, "image_name", RESULT_IMAGE_MAX, &r->image_name, e);
	} else if (scan_key_is(k, "egress")) {
		return decode_result_egress(v, r, e);
	}
	return 0;
}

int
payload_result_decode(const void *buf, size_t len, struct result **out,
    struct err *e)
{
	msgpack_unpacked up;
	struct result *r;
	size_t off = 0;
	int rc;

	*out = NULL;
	if ((rc = payload_scan(buf, len, e)) < 0)
		return rc;
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    up.data.type != MSGPACK_OBJECT_MAP) {
		msgpack_unpacked_destroy(&up);
		return err_set(e, -EBADMSG, "result is not a msgpack map");
	}
	r = result_new(NULL);
	for (uint32_t i = 0; i < up.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &up.data.via.map.ptr[i];
		if ((rc = decode_result_field(&kv->key, &kv->val, r, e)) < 0) {
			result_free(r);
			msgpack_unpacked_destroy(&up);
			return rc;
		}
	}
	msgpack_unpacked_destroy(&up);
	*out = r;
	return 0;
}
