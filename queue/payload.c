/*
 * payload.c - msgpack codecs for jobs and results (pure, no I/O).
 *
 * Sections:
 *   - Structural scan: a bounded walk over raw msgpack bytes before msgpack-c
 *     sees them (msgpack-c allocates an array's announced size up front).
 *   - Field readers: typed getters that name the field in every error.
 *   - Job decode/encode.
 *   - Result decode/encode.
 *
 * DESIGN: decode is strict for jobs (an unknown field is a rejected job, so a
 * typo such as "limts" cannot silently run with default limits) and lenient
 * for results (a client ignores fields a newer daemon adds). Strings are
 * accepted as msgpack str or bin; output bytes are always encoded as bin,
 * since a program's output need not be UTF-8.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "payload.h"

/*** Structural scan ***/

static int
rd_be(const uint8_t *p, size_t n, uint64_t *v)
{
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v = (*v << 8) | p[i];
	return 0;
}

/*
 * Skips exactly one object (with everything nested in it) starting at *off.
 * Every container's count must fit in the bytes left (each element takes at
 * least one byte) and nesting is bounded, so no input can make a later
 * decoder allocate more than a small multiple of its length.
 */
static int
scan_object(const uint8_t *p, size_t len, size_t *offp, struct err *e)
{
	uint64_t stack[PAYLOAD_MAX_DEPTH + 1];
	size_t off = *offp;
	int depth = 0;

	stack[0] = 1;
	while (depth >= 0) {
		uint64_t skip = 0, count = 0, n;
		uint8_t b;
		size_t hdr;

		if (stack[depth] == 0) {
			depth--;
			continue;
		}
		stack[depth]--;
		if (off >= len)
			return err_set(e, -EBADMSG, "truncated msgpack at byte %zu", off);
		b = p[off];
		hdr = 1;
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
			/* fixint, nil, bool */
		} else if (b >= 0x80 && b <= 0x8f) {
			count = 2u * (b & 0x0f);
		} else if (b >= 0x90 && b <= 0x9f) {
			count = b & 0x0f;
		} else if (b >= 0xa0 && b <= 0xbf) {
			skip = b & 0x1f;
		} else {
			static const struct { uint8_t lenbytes, fixed, kind; } t[] = {
				/* kind: 0 scalar, 1 str/bin, 2 ext, 3 array, 4 map */
				[0xc4 - 0xc4] = { 1, 0, 1 }, [0xc5 - 0xc4] = { 2, 0, 1 },
				[0xc6 - 0xc4] = { 4, 0, 1 }, [0xc7 - 0xc4] = { 1, 1, 2 },
				[0xc8 - 0xc4] = { 2, 1, 2 }, [0xc9 - 0xc4] = { 4, 1, 2 },
				[0xca - 0xc4] = { 0, 4, 0 }, [0xcb - 0xc4] = { 0, 8, 0 },
				[0xcc - 0xc4] = { 0, 1, 0 }, [0xcd - 0xc4] = { 0, 2, 0 },
				[0xce - 0xc4] = { 0, 4, 0 }, [0xcf - 0xc4] = { 0, 8, 0 },
				[0xd0 - 0xc4] = { 0, 1, 0 }, [0xd1 - 0xc4] = { 0, 2, 0 },
				[0xd2 - 0xc4] = { 0, 4, 0 }, [0xd3 - 0xc4] = { 0, 8, 0 },
				[0xd4 - 0xc4] = { 0, 2, 0 }, [0xd5 - 0xc4] = { 0, 3, 0 },
				[0xd6 - 0xc4] = { 0, 5, 0 }, [0xd7 - 0xc4] = { 0, 9, 0 },
				[0xd8 - 0xc4] = { 0, 17, 0 }, [0xd9 - 0xc4] = { 1, 0, 1 },
				[0xda - 0xc4] = { 2, 0, 1 }, [0xdb - 0xc4] = { 4, 0, 1 },
				[0xdc - 0xc4] = { 2, 0, 3 }, [0xdd - 0xc4] = { 4, 0, 3 },
				[0xde - 0xc4] = { 2, 0, 4 }, [0xdf - 0xc4] = { 4, 0, 4 },
			};
			if (b == 0xc1)
				return err_set(e, -EBADMSG, "invalid msgpack byte 0xc1 at %zu", off);
			const uint8_t lb = t[b - 0xc4].lenbytes;
			if (len - off < 1u + lb)
				return err_set(e, -EBADMSG, "truncated msgpack at byte %zu", off);
			rd_be(p + off + 1, lb, &n);
			hdr = 1u + lb;
			switch (t[b - 0xc4].kind) {
			case 0: skip = t[b - 0xc4].fixed; break;
			case 1: skip = n; break;
			case 2: skip = n + 1; break;
			case 3: count = n; break;
			case 4: count = 2 * n; break;
			}
		}
		off += hdr;
		if (skip > len - off)
			return err_set(e, -EBADMSG, "msgpack value at byte %zu runs past the end", off);
		off += (size_t)skip;
		if (count > 0) {
			if (count > len - off)
				return err_set(e, -EBADMSG,
				    "msgpack container at byte %zu announces %llu items in %zu bytes",
				    off, (unsigned long long)count, len - off);
			if (depth == PAYLOAD_MAX_DEPTH)
				return err_set(e, -EBADMSG, "msgpack nested deeper than %d",
				    PAYLOAD_MAX_DEPTH);
			stack[++depth] = count;
		}
	}
	*offp = off;
	return 0;
}

int
payload_scan(const void *buf, size_t len, struct err *e)
{
	size_t off = 0;
	int rc;

	if (len == 0)
		return err_set(e, -EBADMSG, "empty payload");
	if ((rc = scan_object(buf, len, &off, e)) < 0)
		return rc;
	if (off != len)
		return err_set(e, -EBADMSG, "%zu trailing bytes after the msgpack object",
		    len - off);
	return 0;
}

/* Reads a str header at *off: returns its length and moves *off to the body. */
static bool
peek_str(const uint8_t *p, size_t len, size_t *off, size_t *n)
{
	uint8_t b;
	uint64_t v;
	size_t lb;

	if (*off >= len)
		return false;
	b = p[*off];
	if (b >= 0xa0 && b <= 0xbf) {
		*n = b & 0x1f;
		lb = 0;
	} else if (b == 0xd9 || b == 0xc4) {
		lb = 1;
	} else if (b == 0xda || b == 0xc5) {
		lb = 2;
	} else if (b == 0xdb || b == 0xc6) {
		lb = 4;
	} else {
		return false;
	}
	if (lb) {
		if (len - *off < 1 + lb)
			return false;
		rd_be(p + *off + 1, lb, &v);
		*n = (size_t)v;
	}
	*off += 1 + lb;
	return *n <= len - *off;
}

bool
payload_peek_id(const void *buf, size_t len, char *idbuf)
{
	const uint8_t *p = buf;
	size_t off = 0, pairs, n;
	uint64_t v;
	struct err e;

	idbuf[0] = '\0';
	if (len == 0)
		return false;
	if (p[0] >= 0x80 && p[0] <= 0x8f) {
		pairs = p[0] & 0x0f;
		off = 1;
	} else if ((p[0] == 0xde || p[0] == 0xdf) && len >= (p[0] == 0xde ? 3u : 5u)) {
		rd_be(p + 1, p[0] == 0xde ? 2 : 4, &v);
		pairs = (size_t)v;
		off = p[0] == 0xde ? 3 : 5;
	} else {
		return false;
	}
	for (size_t i = 0; i < pairs; i++) {
		size_t koff = off;

		if (peek_str(p, len, &koff, &n) && n == 2 && memcmp(p + koff, "id", 2) == 0) {
			off = koff + 2;
			if (!peek_str(p, len, &off, &n) || !payload_id_valid((const char *)p + off, n))
				return false;
			memcpy(idbuf, p + off, n);
			idbuf[n] = '\0';
			return true;
		}
		if (scan_object(p, len, &off, &e) < 0 || scan_object(p, len, &off, &e) < 0)
			return false;
	}
	return false;
}

/*** Field readers ***/

static bool
key_is(const msgpack_object *k, const char *name)
{
	size_t n = strlen(name);

	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	    memcmp(k->via.str.ptr, name, n) == 0;
}

/* Gets str or bin bytes; returns false if o is neither. */
static bool
obj_bytes(const msgpack_object *o, const char **p, size_t *n)
{
	if (o->type == MSGPACK_OBJECT_STR) {
		*p = o->via.str.ptr;
		*n = o->via.str.size;
		return true;
	}
	if (o->type == MSGPACK_OBJECT_BIN) {
		*p = o->via.bin.ptr;
		*n = o->via.bin.size;
		return true;
	}
	return false;
}

/* Reads a string without NUL bytes, at most max bytes, into a new C string. */
static int
get_cstr(const msgpack_object *o, const char *field, size_t max, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (n > max)
		return err_set(e, -EINVAL, "field '%s': longer than %zu bytes", field, max);
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field '%s': contains a NUL byte", field);
	*out = xmemdup0(p, n);
	return 0;
}

static int
get_bytes(const msgpack_object *o, const char *field, size_t max,
    uint8_t **out, size_t *outlen, struct err *e)
{
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected bytes or a string", field);
	if (n > max)
		return err_set(e, -EINVAL, "field '%s': longer than %zu bytes", field, max);
	*out = (uint8_t *)xmemdup0(p, n);
	*outlen = n;
	return 0;
}

static int
get_u64(const msgpack_object *o, const char *field, uint64_t min, uint64_t max,
    uint64_t *out, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
	    o->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return err_set(e, -EINVAL, "field '%s': expected an integer", field);
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER || o->via.u64 < min)
		return err_set(e, -EINVAL, "field '%s': must be at least %llu", field,
		    (unsigned long long)min);
	if (o->via.u64 > max)
		return err_set(e, -EINVAL, "field '%s': must be at most %llu", field,
		    (unsigned long long)max);
	*out = o->via.u64;
	return 0;
}

static int
get_i64(const msgpack_object *o, const char *field, int64_t *out, struct err *e)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*out = o->via.i64;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
		*out = (int64_t)o->via.u64;
		return 0;
	}
	return err_set(e, -EINVAL, "field '%s': expected an integer", field);
}

static int
get_bool(const msgpack_object *o, const char *field, bool *out, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return err_set(e, -EINVAL, "field '%s': expected true or false", field);
	*out = o->via.boolean;
	return 0;
}

/*** Names ***/

static const char *const op_names[] = {
	[OP_NONE] = "none", [OP_EXEC] = "exec", [OP_SH] = "sh",
	[OP_PYTHON] = "python",
};

/* Ops of the protocol that this version does not run yet. */
static const char *const later_ops[] = {
	"fs.read", "fs.write", "fs.list", "fs.stat", "fs.delete",
	"kv.get", "kv.set", "kv.delete", "kv.keys",
	"sandbox.create", "sandbox.fork", "sandbox.delete", "sandbox.export",
	"sandbox.import", "sandbox.history",
};

static const char *const preset_names[] = {
	[PRESET_DEFAULT] = "default", [PRESET_STRICT] = "strict",
	[PRESET_NORMAL] = "normal", [PRESET_PERMISSIVE] = "permissive",
};

static const char *const status_names[ST__COUNT] = {
	[ST_OK] = "ok", [ST_EXIT] = "exit", [ST_SIGNAL] = "signal",
	[ST_TIMEOUT] = "timeout", [ST_CPU_LIMIT] = "cpu_limit",
	[ST_MEMORY_LIMIT] = "memory_limit", [ST_PIDS_LIMIT] = "pids_limit",
	[ST_OUTPUT_LIMIT] = "output_limit", [ST_DISK_LIMIT] = "disk_limit",
	[ST_REJECTED] = "rejected", [ST_CANCELLED] = "cancelled",
	[ST_EXPIRED] = "expired", [ST_INTERNAL] = "internal",
};

const char *
job_op_name(enum job_op op)
{
	if ((size_t)op < sizeof(op_names) / sizeof(op_names[0]))
		return op_names[op];
	return "unknown";
}

const char *
job_preset_name(enum job_preset p)
{
	if ((size_t)p < sizeof(preset_names) / sizeof(preset_names[0]))
		return preset_names[p];
	return "unknown";
}

int
job_net_parse(const char *s, enum job_net *n)
{
	if (strcmp(s, "none") == 0)
		*n = NET_NONE;
	else if (strcmp(s, "unix") == 0)
		*n = NET_UNIX;
	else
		return -EINVAL;
	return 0;
}

int
job_preset_parse(const char *s, enum job_preset *p)
{
	for (size_t i = PRESET_STRICT; i < sizeof(preset_names) / sizeof(preset_names[0]); i++) {
		if (strcmp(s, preset_names[i]) == 0) {
			*p = (enum job_preset)i;
			return 0;
		}
	}
	return -EINVAL;
}

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

/*** Validation helpers ***/

bool
payload_id_valid(const char *s, size_t len)
{
	if (len == 0 || len > JOB_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
		    c == ':'))
			return false;
	}
	return true;
}

/* A path as it may appear in a message: at most 64 bytes, control bytes as '?'. */
static const char *
path_shown(const char *in, size_t len, char buf[72])
{
	size_t n = len < 64 ? len : 64;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		buf[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	memcpy(buf + n, len > 64 ? "..." : "", len > 64 ? 4 : 1);
	return buf;
}

int
payload_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e)
{
	char shown[72];

	size_t o = 0, i = 0;

	if (len > JOB_PATH_MAX)
		return err_set(e, -EINVAL, "field '%s': path longer than %d bytes",
		    field, JOB_PATH_MAX);
	while (i < len) {
		size_t start, n;

		while (i < len && in[i] == '/')
			i++;
		start = i;
		while (i < len && in[i] != '/') {
			unsigned char c = (unsigned char)in[i];
			if (c < 0x20 || c == 0x7f)
				return err_set(e, -EINVAL,
				    "field '%s': path '%s' has a control character", field,
				    path_shown(in, len, shown));
			i++;
		}
		n = i - start;
		if (n == 0 || (n == 1 && in[start] == '.'))
			continue;
		if (n == 2 && in[start] == '.' && in[start + 1] == '.')
			return err_set(e, -EINVAL, "field '%s': path '%s' must not contain '..'",
			    field, path_shown(in, len, shown));
		if (n > JOB_NAME_MAX)
			return err_set(e, -EINVAL,
			    "field '%s': path component longer than %d bytes", field,
			    JOB_NAME_MAX);
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, in + start, n);
		o += n;
	}
	out[o] = '\0';
	if (o == 0)
		return err_set(e, -EINVAL, "field '%s': path is empty", field);
	return 0;
}

/*** Jobs ***/

struct job *
job_new(void)
{
	struct job *j = xcalloc(1, sizeof(*j));

	return j;
}

static void
strv_free(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void
job_free(struct job *j)
{
	if (j == NULL)
		return;
	free(j->id);
	strv_free(j->argv, j->argc);
	free(j->script);
	free(j->code);
	free(j->stdin_data);
	strv_free(j->env, j->nenv);
	free(j->cwd);
	for (size_t i = 0; i < j->nfiles; i++) {
		free(j->files[i].path);
		free(j->files[i].data);
	}
	free(j->files);
	strv_free(j->labels, 2 * j->nlabels);
	free(j->net);
	free(j);
}

static int
decode_argv(const msgpack_object *o, struct job *j, size_t *total, struct err *e)
{
	char field[32];

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return err_set(e, -EINVAL, "field 'argv': expected an array of strings");
	if (o->via.array.size == 0)
		return err_set(e, -EINVAL, "field 'argv': must not be empty");
	if (o->via.array.size > JOB_ARGV_MAX)
		return err_set(e, -EINVAL, "field 'argv': more than %d entries", JOB_ARGV_MAX);
	j->argv = xcalloc(o->via.array.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		snprintf(field, sizeof(field), "argv[%u]", i);
		if (get_cstr(&o->via.array.ptr[i], field, JOB_ARG_MAX - 1,
		    &j->argv[i], e) < 0)
			return -EINVAL;
		j->argc++;
		*total += strlen(j->argv[i]) + 1;
	}
	if (j->argv[0][0] == '\0')
		return err_set(e, -EINVAL, "field 'argv[0]': must not be empty");
	return 0;
}

static bool
env_name_valid(const char *p, size_t n)
{
	if (n == 0 || n > JOB_ENV_NAME_MAX || (p[0] >= '0' && p[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return true;
}

static int
decode_env(const msgpack_object *o, struct job *j, size_t *total, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'env': expected a map of strings");
	if (o->via.map.size > JOB_ENV_MAX)
		return err_set(e, -EINVAL, "field 'env': more than %d variables", JOB_ENV_MAX);
	j->env = xcalloc(o->via.map.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		const char *name;
		char *val = NULL;
		size_t nlen;

		if (!obj_bytes(&kv->key, &name, &nlen) || !env_name_valid(name, nlen))
			return err_set(e, -EINVAL,
			    "field 'env': variable names must match [A-Za-z_][A-Za-z0-9_]*");
		char field[JOB_ENV_NAME_MAX + 8];
		snprintf(field, sizeof(field), "env.%.*s", (int)nlen, name);
		/* A name given twice would reach the job twice, in either order. */
		for (size_t k = 0; k < j->nenv; k++)
			if (strncmp(j->env[k], name, nlen) == 0 && j->env[k][nlen] == '=')
				return err_set(e, -EINVAL, "field '%s': given twice", field);
		if (get_cstr(&kv->val, field, JOB_ARG_MAX - 2 - nlen, &val, e) < 0)
			return -EINVAL;
		xasprintf(&j->env[i], "%.*s=%s", (int)nlen, name, val);
		free(val);
		j->nenv++;
		*total += strlen(j->env[i]) + 1;
	}
	return 0;
}

static int
decode_limits(const msgpack_object *o, struct job_limits *l, struct err *e)
{
	static const struct {
		const char *name, *field;
		size_t off;
		uint64_t max;
	} tab[] = {
		{ "wall_ms", "limits.wall_ms", offsetof(struct job_limits, wall_ms), 86400000ull },
		{ "cpu_ms", "limits.cpu_ms", offsetof(struct job_limits, cpu_ms), 86400000ull },
		{ "memory_bytes", "limits.memory_bytes", offsetof(struct job_limits, memory_bytes), 1ull << 46 },
		{ "pids", "limits.pids", offsetof(struct job_limits, pids), 1u << 22 },
		{ "output_bytes", "limits.output_bytes", offsetof(struct job_limits, output_bytes), 1ull << 30 },
		{ "disk_bytes", "limits.disk_bytes", offsetof(struct job_limits, disk_bytes), 1ull << 40 },
		{ "files", "limits.files", offsetof(struct job_limits, files), 1u << 20 },
	};

	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'limits': expected a map");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		size_t t;

		for (t = 0; t < sizeof(tab) / sizeof(tab[0]); t++)
			if (key_is(&kv->key, tab[t].name))
				break;
		if (t == sizeof(tab) / sizeof(tab[0])) {
			const char *p = "?";
			size_t n = 1;
			obj_bytes(&kv->key, &p, &n);
			return err_set(e, -EINVAL, "field 'limits': unknown limit '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
		if (get_u64(&kv->val, tab[t].field, 1, tab[t].max,
		    (uint64_t *)((char *)l + tab[t].off), e) < 0)
			return -EINVAL;
	}
	return 0;
}

static int
decode_files(const msgpack_object *o, struct job *j, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	size_t total = 0;

	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'files': expected a map of path to bytes");
	if (o->via.map.size > JOB_FILES_MAX)
		return err_set(e, -EINVAL, "field 'files': more than %d files", JOB_FILES_MAX);
	j->files = xcalloc(o->via.map.size ? o->via.map.size : 1, sizeof(*j->files));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		struct job_file *f = &j->files[j->nfiles];
		const char *p;
		size_t n;

		if (!obj_bytes(&kv->key, &p, &n))
			return err_set(e, -EINVAL, "field 'files': paths must be strings");
		if (memchr(p, '\0', n) != NULL)
			return err_set(e, -EINVAL, "field 'files': a path contains a NUL byte");
		if (payload_path_normalise(p, n, path, "files", e) < 0)
			return -EINVAL;
		/* Paths are seeded under /workspace, whatever root they name. */
		if (strcmp(path, "workspace") == 0)
			return err_set(e, -EINVAL, "field 'files': '%s' is the workspace itself", path);
		if (strncmp(path, "workspace/", 10) == 0)
			memmove(path, path + 10, strlen(path + 10) + 1);
		for (size_t k = 0; k < j->nfiles; k++) {
			const char *q = j->files[k].path;
			size_t a = strlen(q), b = strlen(path);
			if (strcmp(q, path) == 0)
				return err_set(e, -EINVAL, "field 'files': '%s' given twice", path);
			if ((a < b && strncmp(q, path, a) == 0 && path[a] == '/') ||
			    (b < a && strncmp(q, path, b) == 0 && q[b] == '/'))
				return err_set(e, -EINVAL,
				    "field 'files': '%s' is both a file and a directory",
				    a < b ? q : path);
		}
		f->path = xstrdup(path);
		j->nfiles++;
		if (get_bytes(&kv->val, "files", JOB_FILES_BYTES_MAX, &f->data, &f->len, e) < 0)
			return -EINVAL;
		total += f->len;
		if (total > JOB_FILES_BYTES_MAX)
			return err_set(e, -EINVAL, "field 'files': more than %u bytes in all",
			    JOB_FILES_BYTES_MAX);
	}
	return 0;
}

static int
decode_labels(const msgpack_object *o, struct job *j, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'labels': expected a map of strings");
	if (o->via.map.size > JOB_LABELS_MAX)
		return err_set(e, -EINVAL, "field 'labels': more than %d labels", JOB_LABELS_MAX);
	j->labels = xcalloc(2 * (size_t)o->via.map.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (get_cstr(&kv->key, "labels", JOB_LABEL_MAX, &j->labels[2 * i], e) < 0 ||
		    get_cstr(&kv->val, "labels", JOB_LABEL_MAX, &j->labels[2 * i + 1], e) < 0) {
			j->nlabels = i + 1;
			return -EINVAL;
		}
		j->nlabels = i + 1;
	}
	return 0;
}

static int
decode_cwd(const msgpack_object *o, struct job *j, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'cwd': expected a string");
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field 'cwd': contains a NUL byte");
	if (n == 1 && p[0] == '/') {
		j->cwd = xstrdup("/");
		return 0;
	}
	if (payload_path_normalise(p, n, path, "cwd", e) < 0)
		return -EINVAL;
	/* Relative directories are relative to /workspace, the default cwd. */
	if (n > 0 && p[0] == '/')
		xasprintf(&j->cwd, "/%s", path);
	else
		xasprintf(&j->cwd, "/workspace/%s", path);
	return 0;
}

/* Decodes the fields of one job map; on failure e names the field. */
static int
decode_job_map(const msgpack_object *root, struct job *j, struct err *e)
{
	const msgpack_object *op = NULL, *argv = NULL, *script = NULL, *code = NULL;
	size_t exec_bytes = 0;
	uint64_t u = 0;
	bool b = false;

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object *k = &root->via.map.ptr[i].key;
		const msgpack_object *v = &root->via.map.ptr[i].val;
		int rc = 0;

		/*
		 * A repeated key would decode its field twice and replace an
		 * array whose count was kept (files, env, labels: a heap
		 * overflow). Every earlier key was a distinct known field, or
		 * decoding would have stopped, so this loop is short.
		 */
		for (uint32_t p = 0; p < i; p++) {
			const msgpack_object *pk = &root->via.map.ptr[p].key;

			if (k->type == MSGPACK_OBJECT_STR && pk->type == k->type &&
			    pk->via.str.size == k->via.str.size &&
			    memcmp(pk->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
				return err_set(e, -EINVAL, "field '%.*s': given twice",
				    (int)k->via.str.size, k->via.str.ptr);
		}
		if (key_is(k, "v")) {
			if (get_u64(v, "v", PAYLOAD_VERSION, PAYLOAD_VERSION, &u, e) < 0)
				return -EINVAL;
		} else if (key_is(k, "id")) {
			/* Read before the loop; already validated. */
		} else if (key_is(k, "op")) {
			op = v;
		} else if (key_is(k, "argv")) {
			argv = v;
		} else if (key_is(k, "script")) {
			script = v;
		} else if (key_is(k, "code")) {
			code = v;
		} else if (key_is(k, "stdin")) {
			rc = get_bytes(v, "stdin", JOB_STDIN_MAX, &j->stdin_data,
			    &j->stdin_len, e);
		} else if (key_is(k, "env")) {
			rc = decode_env(v, j, &exec_bytes, e);
		} else if (key_is(k, "cwd")) {
			rc = decode_cwd(v, j, e);
		} else if (key_is(k, "limits")) {
			rc = decode_limits(v, &j->limits, e);
		} else if (key_is(k, "preset")) {
			char *s = NULL;
			if ((rc = get_cstr(v, "preset", 32, &s, e)) == 0 &&
			    job_preset_parse(s, &j->preset) < 0)
				rc = err_set(e, -EINVAL,
				    "field 'preset': expected strict, normal or permissive");
			free(s);
		} else if (key_is(k, "files")) {
			rc = decode_files(v, j, e);
		} else if (key_is(k, "labels")) {
			rc = decode_labels(v, j, e);
		} else if (key_is(k, "net")) {
			free(j->net);
			j->net = NULL;
			if ((rc = get_cstr(v, "net", 32, &j->net, e)) == 0 &&
			    job_net_parse(j->net, &j->net_mode) < 0)
				rc = err_set(e, -EINVAL, "field 'net': unknown mode '%s' "
				    "(this version offers none and unix)", j->net);
		} else if (key_is(k, "priority")) {
			rc = get_i64(v, "priority", &j->priority, e);
		} else if (key_is(k, "deadline_ms")) {
			rc = get_u64(v, "deadline_ms", 0, INT64_MAX, &u, e);
			j->deadline_ms = (int64_t)u;
		} else if (key_is(k, "stream")) {
			if ((rc = get_bool(v, "stream", &b, e)) == 0 && b)
				rc = err_set(e, -EINVAL,
				    "field 'stream': live output is not available in this version");
		} else if (key_is(k, "persist")) {
			if ((rc = get_bool(v, "persist", &b, e)) == 0 && b)
				rc = err_set(e, -EINVAL,
				    "field 'persist': needs a persistent 'sandbox'");
		} else if (key_is(k, "sandbox") || key_is(k, "perms") ||
		    key_is(k, "perm_preset") || key_is(k, "image")) {
			rc = err_set(e, -EINVAL,
			    "field '%.*s': not available in this version",
			    (int)k->via.str.size, k->via.str.ptr);
		} else {
			const char *p = "?";
			size_t n = 1;
			obj_bytes(k, &p, &n);
			rc = err_set(e, -EINVAL, "unknown field '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
		if (rc < 0)
			return -EINVAL;
	}

	if (op == NULL)
		return err_set(e, -EINVAL, "field 'op': missing");
	{
		const char *p;
		size_t n;

		if (!obj_bytes(op, &p, &n))
			return err_set(e, -EINVAL, "field 'op': expected a string");
		for (size_t i = 1; i < sizeof(op_names) / sizeof(op_names[0]); i++)
			if (strlen(op_names[i]) == n && memcmp(p, op_names[i], n) == 0)
				j->op = (enum job_op)i;
		if (j->op == OP_NONE) {
			for (size_t i = 0; i < sizeof(later_ops) / sizeof(later_ops[0]); i++)
				if (strlen(later_ops[i]) == n && memcmp(p, later_ops[i], n) == 0)
					return err_set(e, -EINVAL,
					    "field 'op': '%s' is not available in this version",
					    later_ops[i]);
			return err_set(e, -EINVAL, "field 'op': unknown op '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
	}

	switch (j->op) {
	case OP_EXEC:
		if (argv == NULL)
			return err_set(e, -EINVAL, "field 'argv': missing (op exec)");
		if (script || code)
			return err_set(e, -EINVAL, "field '%s': not used by op exec",
			    script ? "script" : "code");
		if (decode_argv(argv, j, &exec_bytes, e) < 0)
			return -EINVAL;
		break;
	case OP_SH:
	case OP_PYTHON: {
		const msgpack_object *src = j->op == OP_SH ? script : code;
		const char *name = j->op == OP_SH ? "script" : "code";
		char **dst = j->op == OP_SH ? &j->script : &j->code;

		if (src == NULL)
			return err_set(e, -EINVAL, "field '%s': missing (op %s)", name,
			    job_op_name(j->op));
		if (argv || (j->op == OP_SH ? code : script) != NULL)
			return err_set(e, -EINVAL, "field '%s': not used by op %s",
			    argv ? "argv" : (j->op == OP_SH ? "code" : "script"),
			    job_op_name(j->op));
		if (get_cstr(src, name, JOB_ARG_MAX - 1, dst, e) < 0)
			return -EINVAL;
		j->argv = xcalloc(4, sizeof(char *));
		j->argv[0] = xstrdup(j->op == OP_SH ? "bash" : "python3");
		j->argv[1] = xstrdup("-c");
		j->argv[2] = xstrdup(*dst);
		j->argc = 3;
		exec_bytes += strlen(*dst) + 12;
		break;
	}
	default:
		break;
	}
	if (exec_bytes > JOB_EXEC_BYTES_MAX)
		return err_set(e, -EINVAL,
		    "field 'argv': arguments and environment exceed %u bytes",
		    JOB_EXEC_BYTES_MAX);
	return 0;
}

int
payload_job_decode(const void *buf, size_t len, struct job **out, char *idbuf,
    struct err *e)
{
	msgpack_unpacked up;
	const msgpack_object *root;
	struct job *j = NULL;
	size_t off = 0;
	int rc;

	*out = NULL;
	if (idbuf)
		idbuf[0] = '\0';
	if ((rc = payload_scan(buf, len, e)) < 0)
		return rc;
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		rc = err_set(e, -EBADMSG, "payload is not valid msgpack");
		goto out_unpacked;
	}
	root = &up.data;
	if (root->type != MSGPACK_OBJECT_MAP) {
		rc = err_set(e, -EBADMSG, "payload is not a msgpack map");
		goto out_unpacked;
	}
	j = job_new();
	/* The id comes first so a later error can still be reported under it. */
	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object_kv *kv = &root->via.map.ptr[i];
		const char *p;
		size_t n;

		if (!key_is(&kv->key, "id"))
			continue;
		if (!obj_bytes(&kv->val, &p, &n) || !payload_id_valid(p, n)) {
			rc = err_set(e, -EINVAL,
			    "field 'id': expected 1 to %d characters of [A-Za-z0-9._:-]",
			    JOB_ID_MAX);
			goto out_job;
		}
		if (j->id != NULL) {
			rc = err_set(e, -EINVAL, "field 'id': given twice");
			goto out_job;
		}
		j->id = xmemdup0(p, n);
	}
	if (j->id == NULL) {
		rc = err_set(e, -EINVAL, "field 'id': missing");
		goto out_job;
	}
	if (idbuf)
		memcpy(idbuf, j->id, strlen(j->id) + 1);
	if ((rc = decode_job_map(root, j, e)) < 0)
		goto out_job;
	msgpack_unpacked_destroy(&up);
	*out = j;
	return 0;

out_job:
	job_free(j);
out_unpacked:
	msgpack_unpacked_destroy(&up);
	return rc;
}

/*** Encoding helpers ***/

static void
pk_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void
pk_bin(msgpack_packer *pk, const void *p, size_t n)
{
	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, p, n);
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

static void
pk_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
	pk_str(pk, k);
	pk_str(pk, v);
}

static void
pk_kv_bool(msgpack_packer *pk, const char *k, bool v)
{
	pk_str(pk, k);
	if (v)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

/* Hands the sbuffer's memory to the caller. */
static int
sbuf_release(msgpack_sbuffer *sb, char **out, size_t *outlen)
{
	*out = sb->data;
	*outlen = sb->size;
	sb->data = NULL;
	sb->size = sb->alloc = 0;
	return *out ? 0 : -ENOMEM;
}

int
payload_job_encode(const struct job *j, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint32_t n = 3;		/* v, id, op */
	const struct job_limits *l = &j->limits;
	uint32_t nl = !!l->wall_ms + !!l->cpu_ms + !!l->memory_bytes + !!l->pids +
	    !!l->output_bytes + !!l->disk_bytes + !!l->files;

	n += 1;			/* argv, script or code */
	n += !!j->stdin_data + !!j->env + !!j->cwd + !!nl +
	    (j->preset != PRESET_DEFAULT) + !!j->nfiles + !!j->nlabels + !!j->net +
	    !!j->priority + !!j->deadline_ms;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	pk_kv_u64(&pk, "v", PAYLOAD_VERSION);
	pk_kv_str(&pk, "id", j->id ? j->id : "");
	pk_kv_str(&pk, "op", job_op_name(j->op));
	if (j->op == OP_SH) {
		pk_kv_str(&pk, "script", j->script ? j->script : "");
	} else if (j->op == OP_PYTHON) {
		pk_kv_str(&pk, "code", j->code ? j->code : "");
	} else {
		pk_str(&pk, "argv");
		msgpack_pack_array(&pk, j->argc);
		for (size_t i = 0; i < j->argc; i++)
			pk_str(&pk, j->argv[i]);
	}
	if (j->stdin_data) {
		pk_str(&pk, "stdin");
		pk_bin(&pk, j->stdin_data, j->stdin_len);
	}
	if (j->env) {
		pk_str(&pk, "env");
		msgpack_pack_map(&pk, j->nenv);
		for (size_t i = 0; i < j->nenv; i++) {
			const char *eq = strchr(j->env[i], '=');
			size_t kl = eq ? (size_t)(eq - j->env[i]) : strlen(j->env[i]);
			msgpack_pack_str(&pk, kl);
			msgpack_pack_str_body(&pk, j->env[i], kl);
			pk_str(&pk, eq ? eq + 1 : "");
		}
	}
	if (j->cwd)
		pk_kv_str(&pk, "cwd", j->cwd);
	if (nl) {
		pk_str(&pk, "limits");
		msgpack_pack_map(&pk, nl);
		if (l->wall_ms) pk_kv_u64(&pk, "wall_ms", l->wall_ms);
		if (l->cpu_ms) pk_kv_u64(&pk, "cpu_ms", l->cpu_ms);
		if (l->memory_bytes) pk_kv_u64(&pk, "memory_bytes", l->memory_bytes);
		if (l->pids) pk_kv_u64(&pk, "pids", l->pids);
		if (l->output_bytes) pk_kv_u64(&pk, "output_bytes", l->output_bytes);
		if (l->disk_bytes) pk_kv_u64(&pk, "disk_bytes", l->disk_bytes);
		if (l->files) pk_kv_u64(&pk, "files", l->files);
	}
	if (j->preset != PRESET_DEFAULT)
		pk_kv_str(&pk, "preset", job_preset_name(j->preset));
	if (j->nfiles) {
		pk_str(&pk, "files");
		msgpack_pack_map(&pk, j->nfiles);
		for (size_t i = 0; i < j->nfiles; i++) {
			pk_str(&pk, j->files[i].path);
			pk_bin(&pk, j->files[i].data, j->files[i].len);
		}
	}
	if (j->nlabels) {
		pk_str(&pk, "labels");
		msgpack_pack_map(&pk, j->nlabels);
		for (size_t i = 0; i < 2 * j->nlabels; i++)
			pk_str(&pk, j->labels[i]);
	}
	if (j->net)
		pk_kv_str(&pk, "net", j->net);
	if (j->priority)
		pk_kv_i64(&pk, "priority", j->priority);
	if (j->deadline_ms)
		pk_kv_i64(&pk, "deadline_ms", j->deadline_ms);
	return sbuf_release(&sb, out, outlen);
}

/*** Results ***/

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

int
payload_result_encode(const struct result *r, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint32_t n = 17 + !!r->host + !!r->error_code + !!r->nrefused;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	pk_kv_u64(&pk, "v", PAYLOAD_VERSION);
	pk_kv_str(&pk, "id", r->id);
	pk_kv_str(&pk, "status", res_status_name(r->status));
	pk_kv_i64(&pk, "exit_code", r->exit_code);
	pk_kv_i64(&pk, "signal", r->signal);
	pk_str(&pk, "stdout");
	pk_bin(&pk, r->out, r->out_len);
	pk_str(&pk, "stderr");
	pk_bin(&pk, r->err, r->err_len);
	pk_kv_bool(&pk, "stdout_truncated", r->out_truncated);
	pk_kv_bool(&pk, "stderr_truncated", r->err_truncated);
	pk_kv_u64(&pk, "wall_ms", r->wall_ms);
	pk_kv_u64(&pk, "cpu_ms", r->cpu_ms);
	pk_kv_u64(&pk, "max_rss_kb", r->max_rss_kb);
	pk_kv_u64(&pk, "queued_at", r->queued_at);
	pk_kv_u64(&pk, "started_at", r->started_at);
	pk_kv_u64(&pk, "finished_at", r->finished_at);
	pk_kv_i64(&pk, "worker", r->worker);
	pk_kv_i64(&pk, "attempt", r->attempt);
	if (r->host)
		pk_kv_str(&pk, "host", r->host);
	if (r->error_code) {
		pk_str(&pk, "error");
		msgpack_pack_map(&pk, 2);
		pk_kv_str(&pk, "code", r->error_code);
		pk_kv_str(&pk, "message", r->error_message ? r->error_message : "");
	}
	if (r->nrefused) {
		pk_str(&pk, "refused");
		msgpack_pack_map(&pk, (uint32_t)r->nrefused);
		for (size_t i = 0; i < r->nrefused; i++)
			pk_kv_u64(&pk, r->refused[i].name, r->refused[i].count);
	}
	return sbuf_release(&sb, out, outlen);
}

static int
decode_result_field(const msgpack_object *k, const msgpack_object *v,
    struct result *r, struct err *e)
{
	int64_t i = 0;

	if (key_is(k, "id")) {
		char *s = NULL;
		if (get_cstr(v, "id", JOB_ID_MAX, &s, e) < 0)
			return -EINVAL;
		free(r->id);
		r->id = s;
	} else if (key_is(k, "status")) {
		char *s = NULL;
		int rc = get_cstr(v, "status", 32, &s, e);
		if (rc == 0 && res_status_parse(s, &r->status) < 0)
			rc = err_set(e, -EINVAL, "field 'status': unknown status '%s'", s);
		free(s);
		return rc;
	} else if (key_is(k, "exit_code")) {
		if (get_i64(v, "exit_code", &i, e) < 0)
			return -EINVAL;
		r->exit_code = (int)i;
	} else if (key_is(k, "signal")) {
		if (get_i64(v, "signal", &i, e) < 0)
			return -EINVAL;
		r->signal = (int)i;
	} else if (key_is(k, "stdout")) {
		free(r->out);
		r->out = NULL;
		r->out_len = 0;
		return get_bytes(v, "stdout", RESULT_OUTPUT_MAX, &r->out, &r->out_len, e);
	} else if (key_is(k, "stderr")) {
		free(r->err);
		r->err = NULL;
		r->err_len = 0;
		return get_bytes(v, "stderr", RESULT_OUTPUT_MAX, &r->err, &r->err_len, e);
	} else if (key_is(k, "stdout_truncated")) {
		return get_bool(v, "stdout_truncated", &r->out_truncated, e);
	} else if (key_is(k, "stderr_truncated")) {
		return get_bool(v, "stderr_truncated", &r->err_truncated, e);
	} else if (key_is(k, "wall_ms")) {
		return get_u64(v, "wall_ms", 0, UINT64_MAX, &r->wall_ms, e);
	} else if (key_is(k, "cpu_ms")) {
		return get_u64(v, "cpu_ms", 0, UINT64_MAX, &r->cpu_ms, e);
	} else if (key_is(k, "max_rss_kb")) {
		return get_u64(v, "max_rss_kb", 0, UINT64_MAX, &r->max_rss_kb, e);
	} else if (key_is(k, "queued_at")) {
		return get_u64(v, "queued_at", 0, UINT64_MAX, &r->queued_at, e);
	} else if (key_is(k, "started_at")) {
		return get_u64(v, "started_at", 0, UINT64_MAX, &r->started_at, e);
	} else if (key_is(k, "finished_at")) {
		return get_u64(v, "finished_at", 0, UINT64_MAX, &r->finished_at, e);
	} else if (key_is(k, "worker")) {
		return get_i64(v, "worker", &r->worker, e);
	} else if (key_is(k, "attempt")) {
		return get_i64(v, "attempt", &r->attempt, e);
	} else if (key_is(k, "host")) {
		free(r->host);
		r->host = NULL;
		return get_cstr(v, "host", 256, &r->host, e);
	} else if (key_is(k, "error")) {
		if (v->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL, "field 'error': expected a map");
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			char **dst = key_is(&kv->key, "code") ? &r->error_code :
			    key_is(&kv->key, "message") ? &r->error_message : NULL;
			if (dst == NULL)
				continue;
			free(*dst);
			*dst = NULL;
			if (get_cstr(&kv->val, "error", 4096, dst, e) < 0)
				return -EINVAL;
		}
	} else if (key_is(k, "refused")) {
		if (v->type != MSGPACK_OBJECT_MAP || v->via.map.size > RESULT_REFUSED_MAX)
			return err_set(e, -EINVAL, "field 'refused': expected a map of at "
			    "most %d syscall names to counts", RESULT_REFUSED_MAX);
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			char *name = NULL;
			uint64_t count;

			if (get_cstr(&kv->key, "refused", 64, &name, e) < 0)
				return -EINVAL;
			if (get_u64(&kv->val, "refused", 0, UINT64_MAX, &count, e) < 0) {
				free(name);
				return -EINVAL;
			}
			result_add_refusal(r, name, count);
			free(name);
		}
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
