/*
 * job.c - msgpack codecs for jobs and results (pure, no I/O).
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
#include "job.h"

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

static const char *const op_names[OP__COUNT] = {
	[OP_NONE] = "none", [OP_EXEC] = "exec", [OP_SH] = "sh",
	[OP_PYTHON] = "python",
	[OP_FS_READ] = "fs.read", [OP_FS_WRITE] = "fs.write",
	[OP_FS_LIST] = "fs.list", [OP_FS_STAT] = "fs.stat",
	[OP_FS_DELETE] = "fs.delete",
	[OP_KV_GET] = "kv.get", [OP_KV_SET] = "kv.set",
	[OP_KV_DELETE] = "kv.delete", [OP_KV_KEYS] = "kv.keys",
	[OP_SANDBOX_CREATE] = "sandbox.create", [OP_SANDBOX_FORK] = "sandbox.fork",
	[OP_SANDBOX_DELETE] = "sandbox.delete", [OP_SANDBOX_EXPORT] = "sandbox.export",
	[OP_SANDBOX_IMPORT] = "sandbox.import", [OP_SANDBOX_HISTORY] = "sandbox.history",
	[OP_SANDBOX_INFO] = "sandbox.info", [OP_SANDBOX_LIST] = "sandbox.list",
};

/*
 * The perm_preset names. payload.c does not link store/, so this copy must
 * match the preset table of workspace/perms.c (perms_preset_names()); the first
 * is the default, PERMS_PRESET_DEFAULT.
 */
static const char *const perm_preset_names[] = {
	"agent-safe", "read-only", "full-access", "development", "view-only",
};

/* The levels of a path rule, as workspace/perms.c parses them. */
static const char *const perm_level_names[] = { "none", "view", "read", "write" };

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

/* A sandbox id: 1..JOB_SANDBOX_ID_MAX of [A-Za-z0-9._:-], not "." or "..". */
static bool
sandbox_id_valid(const char *s, size_t len)
{
	if (len > JOB_SANDBOX_ID_MAX || !payload_id_valid(s, len))
		return false;
	return !(len == 1 && s[0] == '.') && !(len == 2 && s[0] == '.' && s[1] == '.');
}

/* A tenant name: 1..JOB_TENANT_MAX of [A-Za-z0-9_-] (store.c, keys.c). */
static bool
tenant_valid(const char *s, size_t len)
{
	if (len == 0 || len > JOB_TENANT_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* True if every component of the path is empty or ".": "/", ".", "/./". */
static bool
path_is_root(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '/')
			continue;
		if (p[i] != '.' || (i + 1 < n && p[i + 1] != '/'))
			return false;
	}
	return true;
}

/*
 * JSON syntax check for kv values (RFC 8259, one value with optional white
 * space around it). The store keeps the text as it is, and AgentFS readers
 * (agentfs-sdk) JSON.parse it, so a value that is not JSON would break them
 * rather than sandq. Recursion is bounded by JSON_DEPTH_MAX. UTF-8 is
 * checked for well-formed sequences (no overlong two-byte forms, nothing
 * past U+10FFFF); that is what a SQLite TEXT column needs to stay readable.
 */
#define JSON_DEPTH_MAX 128

struct json_rd {
	const unsigned char *p;	/* the text */
	size_t n;		/* its length */
	size_t i;		/* read position */
};

static void
json_ws(struct json_rd *r)
{
	while (r->i < r->n && (r->p[r->i] == ' ' || r->p[r->i] == '\t' ||
	    r->p[r->i] == '\n' || r->p[r->i] == '\r'))
		r->i++;
}

static bool
json_lit(struct json_rd *r, const char *lit)
{
	size_t l = strlen(lit);

	if (r->n - r->i < l || memcmp(r->p + r->i, lit, l) != 0)
		return false;
	r->i += l;
	return true;
}

static bool
json_digits(struct json_rd *r)
{
	size_t start = r->i;

	while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9')
		r->i++;
	return r->i > start;
}

static bool
json_number(struct json_rd *r)
{
	if (r->i < r->n && r->p[r->i] == '-')
		r->i++;
	if (r->i < r->n && r->p[r->i] == '0')
		r->i++;
	else if (!json_digits(r))
		return false;
	if (r->i < r->n && r->p[r->i] == '.') {
		r->i++;
		if (!json_digits(r))
			return false;
	}
	if (r->i < r->n && (r->p[r->i] == 'e' || r->p[r->i] == 'E')) {
		r->i++;
		if (r->i < r->n && (r->p[r->i] == '+' || r->p[r->i] == '-'))
			r->i++;
		if (!json_digits(r))
			return false;
	}
	return true;
}

static bool
json_string(struct json_rd *r)
{
	r->i++;		/* the opening quote */
	while (r->i < r->n) {
		unsigned char c = r->p[r->i++];

		if (c == '"')
			return true;
		if (c < 0x20)
			return false;
		if (c == '\\') {
			if (r->i >= r->n)
				return false;
			c = r->p[r->i++];
			if (c == 'u') {
				if (r->n - r->i < 4)
					return false;
				for (int k = 0; k < 4; k++, r->i++) {
					unsigned char h = r->p[r->i];
					if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
					    (h >= 'A' && h <= 'F')))
						return false;
				}
			} else if (strchr("\"\\/bfnrt", c) == NULL || c == '\0') {
				return false;
			}
		} else if (c >= 0x80) {
			size_t more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;

			if (c < 0xc2 || c > 0xf4 || r->n - r->i < more)
				return false;
			for (size_t k = 0; k < more; k++)
				if ((r->p[r->i++] & 0xc0) != 0x80)
					return false;
		}
	}
	return false;
}

static bool
json_value(struct json_rd *r, int depth)
{
	unsigned char c;

	json_ws(r);
	if (r->i >= r->n)
		return false;
	c = r->p[r->i];
	if (c == '{' || c == '[') {
		unsigned char close = c == '{' ? '}' : ']';

		if (depth >= JSON_DEPTH_MAX)
			return false;
		r->i++;
		json_ws(r);
		if (r->i < r->n && r->p[r->i] == close) {
			r->i++;
			return true;
		}
		for (;;) {
			if (c == '{') {
				json_ws(r);
				if (r->i >= r->n || r->p[r->i] != '"' || !json_string(r))
					return false;
				json_ws(r);
				if (r->i >= r->n || r->p[r->i] != ':')
					return false;
				r->i++;
			}
			if (!json_value(r, depth + 1))
				return false;
			json_ws(r);
			if (r->i >= r->n)
				return false;
			if (r->p[r->i] == close) {
				r->i++;
				return true;
			}
			if (r->p[r->i] != ',')
				return false;
			r->i++;
		}
	}
	if (c == '"')
		return json_string(r);
	if (c == '-' || (c >= '0' && c <= '9'))
		return json_number(r);
	return json_lit(r, "true") || json_lit(r, "false") || json_lit(r, "null");
}

/* True if s (n bytes) is one JSON value; *at is where reading stopped. */
static bool
json_valid(const char *s, size_t n, size_t *at)
{
	struct json_rd r = { (const unsigned char *)s, n, 0 };
	bool ok = json_value(&r, 0);

	if (ok) {
		json_ws(&r);
		ok = r.i == n;
	}
	*at = r.i;
	return ok;
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
	free(j->tenant);
	free(j->sandbox);
	for (size_t i = 0; i < j->ncases; i++) {
		free(j->cases[i].stdin_data);
		free(j->cases[i].expect);
		free(j->cases[i].expect_mode);
	}
	free(j->cases);
	for (size_t i = 0; i < j->nperms; i++) {
		free(j->perms[i].pattern);
		free(j->perms[i].level);
	}
	free(j->perms);
	free(j->perm_preset);
	free(j->path);
	free(j->data);
	free(j->key);
	free(j->value);
	free(j->prefix);
	free(j->to);
	free(j->snapshot);
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

/*
 * Length of a leading "/workspace" (or, unless absolute_only, "workspace")
 * component of p: the sandbox root as a job sees it. 0 if there is none.
 */
static size_t
alias_len(const char *p, size_t n, bool absolute_only)
{
	size_t a = n > 0 && p[0] == '/' ? 1 : 0;

	if (a == 0 && absolute_only)
		return 0;
	if (n - a < 9 || memcmp(p + a, "workspace", 9) != 0)
		return 0;
	if (n - a > 9 && p[a + 9] != '/')
		return 0;
	return a + 9;
}

/*
 * Normalises a path of the sandbox's tree (files, fs.* path) into out
 * (JOB_PATH_MAX + 1 bytes) as payload_path_normalise() does, relative, with
 * "" for the root, and drops one leading "workspace" component: "a/b",
 * "/a/b", "/workspace/a/b" and "./workspace/a/b" are all "a/b". The alias is
 * taken from the raw text when it starts there, and then only once, so the
 * encoder can write a path whose own first folder is "workspace" back as
 * "/workspace/workspace/..." and get the same path again.
 */
static int
sandbox_path_normalise(const char *p, size_t n, char *out, const char *field,
    struct err *e)
{
	size_t a = alias_len(p, n, false);
	const char *p0 = p;
	size_t n0 = n;

	if (n == 0)
		return payload_path_normalise(p, n, out, field, e);
	p += a;
	n -= a;
	while (n > 0 && p[0] == '/') {
		p++;
		n--;
	}
	if (path_is_root(p, n)) {
		out[0] = '\0';
		return 0;
	}
	if (payload_path_normalise(p, n, out, field, e) < 0) {
		/* The same refusal, naming the path as the client wrote it. */
		(void)payload_path_normalise(p0, n0, out, field, e);
		return -EINVAL;
	}
	if (a == 0 && alias_len(out, strlen(out), false) > 0) {
		size_t l = strlen(out);
		memmove(out, out + (l > 9 ? 10 : 9), l - (l > 9 ? 10 : 9) + 1);
	}
	return 0;
}

int
payload_sandbox_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e)
{
	if (memchr(in, '\0', len) != NULL)
		return err_set(e, -EINVAL, "field '%s': contains a NUL byte", field);
	return sandbox_path_normalise(in, len, out, field, e);
}

const char *
payload_pattern_unalias(const char *p)
{
	if (alias_len(p, strlen(p), true) == 0)
		return p;
	return p[10] != '\0' ? p + 10 : "/";
}

/* True if the sandbox path s would lose its first component to the alias. */
static bool
path_needs_alias(const char *s)
{
	return alias_len(s, strlen(s), false) > 0;
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
		/* Paths are seeded under /workspace, whatever root they name. */
		if (sandbox_path_normalise(p, n, path, "files", e) < 0)
			return -EINVAL;
		if (path[0] == '\0') {
			char shown[72];
			return err_set(e, -EINVAL, "field 'files': '%s' is the workspace itself",
			    path_shown(p, n, shown));
		}
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

/*
 * Every top-level field of a job, as a bit. The op table below says which
 * fields each op uses and which it requires; a field an op does not use is
 * refused rather than ignored, for the same reason unknown fields are.
 */
enum job_field {
	JF_V, JF_ID, JF_OP, JF_ARGV, JF_SCRIPT, JF_CODE, JF_STDIN, JF_ENV,
	JF_CWD, JF_LIMITS, JF_PRESET, JF_FILES, JF_LABELS, JF_NET, JF_PRIORITY,
	JF_DEADLINE, JF_STREAM, JF_PERSIST, JF_TENANT, JF_SANDBOX, JF_PERMS,
	JF_PERM_PRESET, JF_PATH, JF_DATA, JF_MODE, JF_RECURSIVE, JF_KEY,
	JF_VALUE, JF_PREFIX, JF_TO, JF_SNAPSHOT, JF_CASES,
	JF__COUNT,
};

static const char *const job_field_names[JF__COUNT] = {
	[JF_V] = "v", [JF_ID] = "id", [JF_OP] = "op", [JF_ARGV] = "argv",
	[JF_SCRIPT] = "script", [JF_CODE] = "code", [JF_STDIN] = "stdin",
	[JF_ENV] = "env", [JF_CWD] = "cwd", [JF_LIMITS] = "limits",
	[JF_PRESET] = "preset", [JF_FILES] = "files", [JF_LABELS] = "labels",
	[JF_NET] = "net", [JF_PRIORITY] = "priority",
	[JF_DEADLINE] = "deadline_ms", [JF_STREAM] = "stream",
	[JF_PERSIST] = "persist", [JF_TENANT] = "tenant",
	[JF_SANDBOX] = "sandbox", [JF_PERMS] = "perms",
	[JF_PERM_PRESET] = "perm_preset", [JF_PATH] = "path", [JF_DATA] = "data",
	[JF_MODE] = "mode", [JF_RECURSIVE] = "recursive", [JF_KEY] = "key",
	[JF_VALUE] = "value", [JF_PREFIX] = "prefix", [JF_TO] = "to",
	[JF_SNAPSHOT] = "snapshot", [JF_CASES] = "cases",
};

_Static_assert(JF__COUNT <= 32, "job fields must fit in a uint32_t mask");

#define JFB(f) (UINT32_C(1) << (f))

/* Fields every op takes: the envelope and scheduling. */
#define JF_COMMON (JFB(JF_V) | JFB(JF_ID) | JFB(JF_OP) | JFB(JF_TENANT) | \
	JFB(JF_PRIORITY) | JFB(JF_DEADLINE))
/* Fields of a run, besides its command. */
#define JF_RUN (JFB(JF_STDIN) | JFB(JF_ENV) | JFB(JF_CWD) | JFB(JF_LIMITS) | \
	JFB(JF_PRESET) | JFB(JF_FILES) | JFB(JF_LABELS) | JFB(JF_NET) | \
	JFB(JF_STREAM) | JFB(JF_PERSIST) | JFB(JF_SANDBOX) | JFB(JF_PERMS) | \
	JFB(JF_PERM_PRESET) | JFB(JF_CASES))
/* Fields of every fs.* op. */
#define JF_FS (JFB(JF_SANDBOX) | JFB(JF_PATH) | JFB(JF_PERMS) | JFB(JF_PERM_PRESET))
#define JF_SB JFB(JF_SANDBOX)

/* Per op: the fields it uses (besides JF_COMMON) and those it requires. */
static const struct {
	uint32_t uses;
	uint32_t needs;
} op_fields[OP__COUNT] = {
	[OP_EXEC] = { JF_RUN | JFB(JF_ARGV), JFB(JF_ARGV) },
	[OP_SH] = { JF_RUN | JFB(JF_SCRIPT), JFB(JF_SCRIPT) },
	[OP_PYTHON] = { JF_RUN | JFB(JF_CODE), JFB(JF_CODE) },
	[OP_FS_READ] = { JF_FS, JF_SB | JFB(JF_PATH) },
	[OP_FS_WRITE] = { JF_FS | JFB(JF_DATA) | JFB(JF_MODE),
	    JF_SB | JFB(JF_PATH) | JFB(JF_DATA) },
	[OP_FS_LIST] = { JF_FS | JFB(JF_RECURSIVE), JF_SB },
	[OP_FS_STAT] = { JF_FS, JF_SB | JFB(JF_PATH) },
	[OP_FS_DELETE] = { JF_FS | JFB(JF_RECURSIVE), JF_SB | JFB(JF_PATH) },
	[OP_KV_GET] = { JF_SB | JFB(JF_KEY), JF_SB | JFB(JF_KEY) },
	[OP_KV_SET] = { JF_SB | JFB(JF_KEY) | JFB(JF_VALUE),
	    JF_SB | JFB(JF_KEY) | JFB(JF_VALUE) },
	[OP_KV_DELETE] = { JF_SB | JFB(JF_KEY), JF_SB | JFB(JF_KEY) },
	[OP_KV_KEYS] = { JF_SB | JFB(JF_PREFIX), JF_SB },
	[OP_SANDBOX_CREATE] = { JF_SB | JFB(JF_FILES) | JFB(JF_SNAPSHOT) |
	    JFB(JF_LABELS) | JFB(JF_LIMITS) | JFB(JF_PRESET), JF_SB },
	[OP_SANDBOX_FORK] = { JF_SB | JFB(JF_TO) | JFB(JF_LABELS), JF_SB | JFB(JF_TO) },
	[OP_SANDBOX_DELETE] = { JF_SB, JF_SB },
	[OP_SANDBOX_EXPORT] = { JF_SB, JF_SB },
	[OP_SANDBOX_IMPORT] = { JF_SB | JFB(JF_SNAPSHOT) | JFB(JF_LABELS) |
	    JFB(JF_LIMITS) | JFB(JF_PRESET), JF_SB | JFB(JF_SNAPSHOT) },
	[OP_SANDBOX_HISTORY] = { JF_SB, JF_SB },
	[OP_SANDBOX_INFO] = { JF_SB, JF_SB },
	[OP_SANDBOX_LIST] = { 0, 0 },
};

/* The field a key names, or JF__COUNT. */
static enum job_field
job_field_lookup(const msgpack_object *k)
{
	for (int f = 0; f < JF__COUNT; f++)
		if (key_is(k, job_field_names[f]))
			return (enum job_field)f;
	return JF__COUNT;
}

/* Reads a sandbox id (sandbox, to) into a new string. */
static int
decode_sandbox_id(const msgpack_object *o, const char *field, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n) || !sandbox_id_valid(p, n))
		return err_set(e, -EINVAL, "field '%s': expected 1 to %d characters "
		    "of [A-Za-z0-9._:-], not '.' or '..'", field, JOB_SANDBOX_ID_MAX);
	*out = xmemdup0(p, n);
	return 0;
}

/*
 * Reads an fs.* path into "/a/b" ("/" is the root, allowed only if root_ok),
 * normalised like files (sandbox_path_normalise()).
 */
static int
decode_fs_path(const msgpack_object *o, bool root_ok, char **out, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'path': expected a string");
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field 'path': contains a NUL byte");
	if (sandbox_path_normalise(p, n, path, "path", e) < 0)
		return -EINVAL;
	if (path[0] == '\0' && !root_ok)
		return err_set(e, -EINVAL, "field 'path': must not be the sandbox root");
	xasprintf(out, "/%s", path);
	return 0;
}

/*
 * Reads one rule's pattern. Patterns stay as written (workspace/perms.c compiles
 * and checks them) except for the /workspace alias: "/workspace" is "/" and
 * "/workspace/x" is "/x". Only the absolute form is an alias, since a
 * relative pattern such as "workspace/x" may well mean a folder of that name.
 */
static int
decode_pattern(const msgpack_object *o, const char *field, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (n == 0)
		return err_set(e, -EINVAL, "field '%s': must not be empty", field);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c == 0x7f)
			return err_set(e, -EINVAL,
			    "field '%s': contains a NUL or control character", field);
	}
	/* Once only, so "/workspace" + a stored pattern reads back the same. */
	if (alias_len(p, n, true) > 0) {
		p += 10;
		n -= 10;
		if (n == 0) {
			p = "/";
			n = 1;
		}
	}
	if (n > JOB_PATTERN_MAX)
		return err_set(e, -EINVAL, "field '%s': longer than %d bytes", field,
		    JOB_PATTERN_MAX);
	*out = xmemdup0(p, n);
	return 0;
}

static int
decode_cases(const msgpack_object *o, struct job *j, struct err *e)
{
	char field[48];
	uint64_t total = 0;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
		return err_set(e, -EINVAL, "field 'cases': expected a non-empty array of "
		    "{stdin, expect, expect_mode} maps");
	if (o->via.array.size > JOB_CASES_MAX)
		return err_set(e, -EINVAL, "field 'cases': more than %d cases", JOB_CASES_MAX);
	j->cases = xcalloc(o->via.array.size, sizeof(*j->cases));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *m = &o->via.array.ptr[i];
		struct job_case *c = &j->cases[j->ncases++];

		if (m->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL,
			    "field 'cases[%u]': expected a map {stdin, expect, expect_mode}", i);
		for (uint32_t k = 0; k < m->via.map.size; k++) {
			const msgpack_object_kv *kv = &m->via.map.ptr[k];
			const char *p;
			size_t n;

			if (key_is(&kv->key, "stdin") && c->stdin_data == NULL) {
				snprintf(field, sizeof(field), "cases[%u].stdin", i);
				if (get_bytes(&kv->val, field, JOB_STDIN_MAX, &c->stdin_data,
				    &c->stdin_len, e) < 0)
					return -EINVAL;
				total += c->stdin_len;
			} else if (key_is(&kv->key, "expect") && c->expect == NULL) {
				snprintf(field, sizeof(field), "cases[%u].expect", i);
				if (get_bytes(&kv->val, field, JOB_STDIN_MAX, &c->expect,
				    &c->expect_len, e) < 0)
					return -EINVAL;
				total += c->expect_len;
			} else if (key_is(&kv->key, "expect_mode") && c->expect_mode == NULL) {
				if (!obj_bytes(&kv->val, &p, &n) ||
				    !((n == 5 && memcmp(p, "exact", 5) == 0) ||
				    (n == 4 && memcmp(p, "trim", 4) == 0) ||
				    (n == 5 && memcmp(p, "regex", 5) == 0)))
					return err_set(e, -EINVAL, "field 'cases[%u].expect_mode': "
					    "expected exact, trim or regex", i);
				c->expect_mode = xmemdup0(p, n);
			} else {
				p = "?";
				n = 1;
				obj_bytes(&kv->key, &p, &n);
				return err_set(e, -EINVAL, "field 'cases[%u].%.*s': unknown or "
				    "given twice (expected stdin, expect, expect_mode)", i,
				    (int)(n > 32 ? 32 : n), p);
			}
		}
		if (total > JOB_STDIN_MAX)
			return err_set(e, -EINVAL, "field 'cases': stdin and expect exceed %u "
			    "bytes in all", (unsigned)JOB_STDIN_MAX);
	}
	return 0;
}

static int
decode_perms(const msgpack_object *o, struct job *j, struct err *e)
{
	char field[48];

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return err_set(e, -EINVAL,
		    "field 'perms': expected an array of {pattern, level} maps");
	if (o->via.array.size > JOB_PERMS_MAX)
		return err_set(e, -EINVAL, "field 'perms': more than %d rules", JOB_PERMS_MAX);
	j->perms = xcalloc(o->via.array.size ? o->via.array.size : 1, sizeof(*j->perms));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *m = &o->via.array.ptr[i];
		struct job_perm *r = &j->perms[j->nperms++];

		if (m->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL,
			    "field 'perms[%u]': expected a map {pattern, level}", i);
		for (uint32_t k = 0; k < m->via.map.size; k++) {
			const msgpack_object_kv *kv = &m->via.map.ptr[k];

			if (key_is(&kv->key, "pattern")) {
				snprintf(field, sizeof(field), "perms[%u].pattern", i);
				if (r->pattern != NULL)
					return err_set(e, -EINVAL, "field '%s': given twice", field);
				if (decode_pattern(&kv->val, field, &r->pattern, e) < 0)
					return -EINVAL;
			} else if (key_is(&kv->key, "level")) {
				const char *p;
				size_t n, l;

				snprintf(field, sizeof(field), "perms[%u].level", i);
				if (r->level != NULL)
					return err_set(e, -EINVAL, "field '%s': given twice", field);
				if (!obj_bytes(&kv->val, &p, &n))
					return err_set(e, -EINVAL, "field '%s': expected a string",
					    field);
				for (l = 0; l < sizeof(perm_level_names) / sizeof(perm_level_names[0]); l++)
					if (strlen(perm_level_names[l]) == n &&
					    memcmp(p, perm_level_names[l], n) == 0)
						break;
				if (l == sizeof(perm_level_names) / sizeof(perm_level_names[0]))
					return err_set(e, -EINVAL,
					    "field '%s': expected none, view, read or write", field);
				r->level = xstrdup(perm_level_names[l]);
			} else {
				const char *p = "?";
				size_t n = 1;
				obj_bytes(&kv->key, &p, &n);
				return err_set(e, -EINVAL, "field 'perms[%u]': unknown key '%.*s'",
				    i, (int)(n > 64 ? 64 : n), p);
			}
		}
		if (r->pattern == NULL || r->level == NULL)
			return err_set(e, -EINVAL, "field 'perms[%u].%s': missing", i,
			    r->pattern == NULL ? "pattern" : "level");
	}
	return 0;
}

static int
decode_perm_preset(const msgpack_object *o, struct job *j, struct err *e)
{
	const char *p;
	size_t n;

	if (!obj_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'perm_preset': expected a string");
	for (size_t i = 0; i < sizeof(perm_preset_names) / sizeof(perm_preset_names[0]); i++) {
		if (strlen(perm_preset_names[i]) == n &&
		    memcmp(p, perm_preset_names[i], n) == 0) {
			j->perm_preset = xstrdup(perm_preset_names[i]);
			return 0;
		}
	}
	return err_set(e, -EINVAL, "field 'perm_preset': expected agent-safe, "
	    "read-only, full-access, development or view-only");
}

static int
decode_kv_value(const msgpack_object *o, struct job *j, struct err *e)
{
	size_t at;

	if (get_cstr(o, "value", JOB_KV_VALUE_MAX, &j->value, e) < 0)
		return -EINVAL;
	if (!json_valid(j->value, strlen(j->value), &at))
		return err_set(e, -EINVAL, "field 'value': not JSON text (at byte %zu)", at);
	return 0;
}

/* Decodes the command of a run: argv, or the script/code run by -c. */
static int
decode_command(const msgpack_object *o, struct job *j, size_t *exec_bytes,
    struct err *e)
{
	const char *name = j->op == OP_SH ? "script" : "code";
	char **dst = j->op == OP_SH ? &j->script : &j->code;

	if (j->op == OP_EXEC)
		return decode_argv(o, j, exec_bytes, e);
	if (get_cstr(o, name, JOB_ARG_MAX - 1, dst, e) < 0)
		return -EINVAL;
	j->argv = xcalloc(4, sizeof(char *));
	j->argv[0] = xstrdup(j->op == OP_SH ? "bash" : "python3");
	j->argv[1] = xstrdup("-c");
	j->argv[2] = xstrdup(*dst);
	j->argc = 3;
	*exec_bytes += strlen(*dst) + 12;
	return 0;
}

/* Decodes one field's value into j; f is a field the op uses. */
static int
decode_job_field(enum job_field f, const msgpack_object *v, struct job *j,
    size_t *exec_bytes, bool *persist_given, struct err *e)
{
	uint64_t u = 0;
	int rc = 0;

	switch (f) {
	case JF_V:
		return get_u64(v, "v", PAYLOAD_VERSION, PAYLOAD_VERSION, &u, e);
	case JF_ID:
	case JF_OP:
		return 0;	/* Read before. */
	case JF_ARGV:
	case JF_SCRIPT:
	case JF_CODE:
		return decode_command(v, j, exec_bytes, e);
	case JF_STDIN:
		return get_bytes(v, "stdin", JOB_STDIN_MAX, &j->stdin_data,
		    &j->stdin_len, e);
	case JF_ENV:
		return decode_env(v, j, exec_bytes, e);
	case JF_CWD:
		return decode_cwd(v, j, e);
	case JF_LIMITS:
		return decode_limits(v, &j->limits, e);
	case JF_PRESET: {
		char *s = NULL;
		if ((rc = get_cstr(v, "preset", 32, &s, e)) == 0 &&
		    job_preset_parse(s, &j->preset) < 0)
			rc = err_set(e, -EINVAL,
			    "field 'preset': expected strict, normal or permissive");
		free(s);
		return rc;
	}
	case JF_FILES:
		return decode_files(v, j, e);
	case JF_LABELS:
		return decode_labels(v, j, e);
	case JF_NET:
		if ((rc = get_cstr(v, "net", 32, &j->net, e)) == 0 &&
		    job_net_parse(j->net, &j->net_mode) < 0)
			rc = err_set(e, -EINVAL, "field 'net': unknown mode '%s' "
			    "(this version offers none and unix)", j->net);
		return rc;
	case JF_PRIORITY:
		return get_i64(v, "priority", &j->priority, e);
	case JF_DEADLINE:
		rc = get_u64(v, "deadline_ms", 0, INT64_MAX, &u, e);
		j->deadline_ms = (int64_t)u;
		return rc;
	case JF_STREAM:
		return get_bool(v, "stream", &j->stream, e);
	case JF_PERSIST:
		*persist_given = true;
		return get_bool(v, "persist", &j->persist, e);
	case JF_TENANT: {
		const char *p;
		size_t n;

		if (!obj_bytes(v, &p, &n) || !tenant_valid(p, n))
			return err_set(e, -EINVAL, "field 'tenant': expected 1 to %d "
			    "characters of [A-Za-z0-9_-]", JOB_TENANT_MAX);
		j->tenant = xmemdup0(p, n);
		return 0;
	}
	case JF_SANDBOX:
		return decode_sandbox_id(v, "sandbox", &j->sandbox, e);
	case JF_TO:
		return decode_sandbox_id(v, "to", &j->to, e);
	case JF_PERMS:
		return decode_perms(v, j, e);
	case JF_CASES:
		return decode_cases(v, j, e);
	case JF_PERM_PRESET:
		return decode_perm_preset(v, j, e);
	case JF_PATH:
		return decode_fs_path(v, j->op == OP_FS_LIST, &j->path, e);
	case JF_DATA:
		return get_bytes(v, "data", JOB_DATA_MAX, &j->data, &j->data_len, e);
	case JF_MODE:
		rc = get_u64(v, "mode", 0, 07777, &u, e);
		j->mode = (uint32_t)u;
		return rc;
	case JF_RECURSIVE:
		return get_bool(v, "recursive", &j->recursive, e);
	case JF_KEY:
		if ((rc = get_cstr(v, "key", JOB_KV_KEY_MAX, &j->key, e)) == 0 &&
		    j->key[0] == '\0')
			rc = err_set(e, -EINVAL, "field 'key': must not be empty");
		return rc;
	case JF_VALUE:
		return decode_kv_value(v, j, e);
	case JF_PREFIX:
		return get_cstr(v, "prefix", JOB_KV_KEY_MAX, &j->prefix, e);
	case JF_SNAPSHOT:
		if ((rc = get_bytes(v, "snapshot", JOB_SNAPSHOT_MAX, &j->snapshot,
		    &j->snapshot_len, e)) == 0 && j->snapshot_len == 0)
			rc = err_set(e, -EINVAL, "field 'snapshot': empty (expected "
			    "an AgentFS SQLite database)");
		return rc;
	case JF__COUNT:
		break;
	}
	return err_set(e, -EINVAL, "field %d: not decodable", (int)f);
}

/*
 * Decodes the fields of one job map; on failure e names the field.
 *
 * In four passes, so the first error reported is the most useful one:
 * names (an unknown or repeated key), the op, the fields the op does not use
 * or needs and lacks, and only then the values, in map order.
 */
static int
decode_job_map(const msgpack_object *root, struct job *j, struct err *e)
{
	const msgpack_object *fields[JF__COUNT] = { NULL };
	uint32_t given = 0;
	size_t exec_bytes = 0;
	bool persist_given = false;
	const char *opname;

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object *k = &root->via.map.ptr[i].key;
		enum job_field f = job_field_lookup(k);

		if (f == JF__COUNT) {
			const char *p = "?";
			size_t n = 1;

			obj_bytes(k, &p, &n);
			if (key_is(k, "image"))
				return err_set(e, -EINVAL,
				    "field 'image': not available in this version");
			return err_set(e, -EINVAL, "unknown field '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
		/*
		 * A repeated key would decode its field twice and replace an
		 * array whose count was kept (files, env, labels: a heap
		 * overflow).
		 */
		if (given & JFB(f))
			return err_set(e, -EINVAL, "field '%s': given twice",
			    job_field_names[f]);
		given |= JFB(f);
		fields[f] = &root->via.map.ptr[i].val;
	}

	if (fields[JF_OP] == NULL)
		return err_set(e, -EINVAL, "field 'op': missing");
	{
		const char *p;
		size_t n;

		if (!obj_bytes(fields[JF_OP], &p, &n))
			return err_set(e, -EINVAL, "field 'op': expected a string");
		for (size_t i = 1; i < OP__COUNT; i++)
			if (strlen(op_names[i]) == n && memcmp(p, op_names[i], n) == 0)
				j->op = (enum job_op)i;
		if (j->op == OP_NONE)
			return err_set(e, -EINVAL, "field 'op': unknown op '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
	}
	opname = op_names[j->op];

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		enum job_field f = job_field_lookup(&root->via.map.ptr[i].key);

		if (!((JF_COMMON | op_fields[j->op].uses) & JFB(f)))
			return err_set(e, -EINVAL, "field '%s': not used by op '%s'",
			    job_field_names[f], opname);
	}
	for (int f = 0; f < JF__COUNT; f++)
		if ((op_fields[j->op].needs & JFB(f)) && fields[f] == NULL)
			return err_set(e, -EINVAL, "field '%s': missing (op %s)",
			    job_field_names[f], opname);
	if (fields[JF_SNAPSHOT] && fields[JF_FILES])
		return err_set(e, -EINVAL,
		    "field 'snapshot': not together with 'files' (op %s)", opname);
	/* Limits bound what a create imports: without a snapshot, nothing. */
	if (j->op == OP_SANDBOX_CREATE && fields[JF_SNAPSHOT] == NULL &&
	    (fields[JF_LIMITS] || fields[JF_PRESET]))
		return err_set(e, -EINVAL, "field '%s': used only with 'snapshot' "
		    "(op %s)", fields[JF_LIMITS] ? "limits" : "preset", opname);

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		enum job_field f = job_field_lookup(&root->via.map.ptr[i].key);

		if (decode_job_field(f, &root->via.map.ptr[i].val, j, &exec_bytes,
		    &persist_given, e) < 0)
			return -EINVAL;
	}

	if (exec_bytes > JOB_EXEC_BYTES_MAX)
		return err_set(e, -EINVAL,
		    "field 'argv': arguments and environment exceed %u bytes",
		    JOB_EXEC_BYTES_MAX);
	/* A run on a named sandbox commits back unless it says otherwise. */
	if (j->persist && j->sandbox == NULL)
		return err_set(e, -EINVAL, "field 'persist': needs 'sandbox'");
	if (j->ncases > 0) {
		/* Every case starts from the same files: nothing is committed. */
		if (j->persist)
			return err_set(e, -EINVAL, "field 'cases': cases never commit; not "
			    "with persist: true");
		if (j->stream)
			return err_set(e, -EINVAL, "field 'cases': not with stream");
		if (fields[JF_STDIN] != NULL)
			return err_set(e, -EINVAL, "field 'cases': each case has its own "
			    "stdin; not with stdin");
	} else if (!persist_given && j->sandbox != NULL && JOB_OP_RUNS(j->op))
		j->persist = true;
	if (j->op == OP_FS_LIST && j->path == NULL)
		j->path = xstrdup("/");
	if (j->op == OP_FS_WRITE && fields[JF_MODE] == NULL)
		j->mode = 0644;
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

/*
 * Packs a sandbox path; one whose first folder is itself named "workspace"
 * gets the alias prefix (decode drops exactly one), so it reads back as is.
 */
static void
pk_path(msgpack_packer *pk, const char *prefix, const char *path)
{
	size_t pl = strlen(prefix), n = strlen(path);
	const char *rel = path[0] == '/' ? path + 1 : path;

	if (!path_needs_alias(rel)) {
		pk_str(pk, path);
		return;
	}
	msgpack_pack_str(pk, pl + n);
	msgpack_pack_str_body(pk, prefix, pl);
	msgpack_pack_str_body(pk, path, n);
}

/*
 * Counts an entry when cond holds; true if it should also be packed (pk is
 * NULL on the counting pass). job_pack() runs twice with the same
 * conditions, so the map's count and its entries cannot disagree.
 */
static bool
pk_want(bool cond, uint32_t *n, const msgpack_packer *pk)
{
	if (!cond)
		return false;
	(*n)++;
	return pk != NULL;
}

/* Packs j's entries (or, with pk NULL, only counts them); returns the count. */
static uint32_t
job_pack(const struct job *j, msgpack_packer *pk)
{
	const struct job_limits *l = &j->limits;
	uint32_t nl = !!l->wall_ms + !!l->cpu_ms + !!l->memory_bytes + !!l->pids +
	    !!l->output_bytes + !!l->disk_bytes + !!l->files;
	uint32_t n = 0;

	if (pk_want(true, &n, pk))
		pk_kv_u64(pk, "v", PAYLOAD_VERSION);
	if (pk_want(true, &n, pk))
		pk_kv_str(pk, "id", j->id ? j->id : "");
	if (pk_want(true, &n, pk))
		pk_kv_str(pk, "op", job_op_name(j->op));
	if (pk_want(j->op == OP_SH, &n, pk))
		pk_kv_str(pk, "script", j->script ? j->script : "");
	if (pk_want(j->op == OP_PYTHON, &n, pk))
		pk_kv_str(pk, "code", j->code ? j->code : "");
	if (pk_want(j->op == OP_EXEC, &n, pk)) {
		pk_str(pk, "argv");
		msgpack_pack_array(pk, j->argc);
		for (size_t i = 0; i < j->argc; i++)
			pk_str(pk, j->argv[i]);
	}
	if (pk_want(j->stdin_data != NULL, &n, pk)) {
		pk_str(pk, "stdin");
		pk_bin(pk, j->stdin_data, j->stdin_len);
	}
	if (pk_want(j->env != NULL, &n, pk)) {
		pk_str(pk, "env");
		msgpack_pack_map(pk, j->nenv);
		for (size_t i = 0; i < j->nenv; i++) {
			const char *eq = strchr(j->env[i], '=');
			size_t kl = eq ? (size_t)(eq - j->env[i]) : strlen(j->env[i]);
			msgpack_pack_str(pk, kl);
			msgpack_pack_str_body(pk, j->env[i], kl);
			pk_str(pk, eq ? eq + 1 : "");
		}
	}
	if (pk_want(j->cwd != NULL, &n, pk))
		pk_kv_str(pk, "cwd", j->cwd);
	if (pk_want(nl != 0, &n, pk)) {
		pk_str(pk, "limits");
		msgpack_pack_map(pk, nl);
		if (l->wall_ms) pk_kv_u64(pk, "wall_ms", l->wall_ms);
		if (l->cpu_ms) pk_kv_u64(pk, "cpu_ms", l->cpu_ms);
		if (l->memory_bytes) pk_kv_u64(pk, "memory_bytes", l->memory_bytes);
		if (l->pids) pk_kv_u64(pk, "pids", l->pids);
		if (l->output_bytes) pk_kv_u64(pk, "output_bytes", l->output_bytes);
		if (l->disk_bytes) pk_kv_u64(pk, "disk_bytes", l->disk_bytes);
		if (l->files) pk_kv_u64(pk, "files", l->files);
	}
	if (pk_want(j->preset != PRESET_DEFAULT, &n, pk))
		pk_kv_str(pk, "preset", job_preset_name(j->preset));
	if (pk_want(j->nfiles != 0, &n, pk)) {
		pk_str(pk, "files");
		msgpack_pack_map(pk, j->nfiles);
		for (size_t i = 0; i < j->nfiles; i++) {
			pk_path(pk, "/workspace/", j->files[i].path);
			pk_bin(pk, j->files[i].data, j->files[i].len);
		}
	}
	if (pk_want(j->nlabels != 0, &n, pk)) {
		pk_str(pk, "labels");
		msgpack_pack_map(pk, j->nlabels);
		for (size_t i = 0; i < 2 * j->nlabels; i++)
			pk_str(pk, j->labels[i]);
	}
	if (pk_want(j->net != NULL, &n, pk))
		pk_kv_str(pk, "net", j->net);
	if (pk_want(j->priority != 0, &n, pk))
		pk_kv_i64(pk, "priority", j->priority);
	if (pk_want(j->deadline_ms != 0, &n, pk))
		pk_kv_i64(pk, "deadline_ms", j->deadline_ms);
	if (pk_want(j->tenant != NULL, &n, pk))
		pk_kv_str(pk, "tenant", j->tenant);
	if (pk_want(j->sandbox != NULL, &n, pk))
		pk_kv_str(pk, "sandbox", j->sandbox);
	if (pk_want(j->stream, &n, pk))
		pk_kv_bool(pk, "stream", j->stream);
	if (pk_want(j->ncases > 0, &n, pk)) {
		pk_str(pk, "cases");
		msgpack_pack_array(pk, j->ncases);
		for (size_t i = 0; i < j->ncases; i++) {
			const struct job_case *c = &j->cases[i];

			msgpack_pack_map(pk, (c->stdin_data != NULL) + (c->expect != NULL) +
			    (c->expect_mode != NULL));
			if (c->stdin_data != NULL)
				pk_str(pk, "stdin"), pk_bin(pk, c->stdin_data, c->stdin_len);
			if (c->expect != NULL)
				pk_str(pk, "expect"), pk_bin(pk, c->expect, c->expect_len);
			if (c->expect_mode != NULL)
				pk_kv_str(pk, "expect_mode", c->expect_mode);
		}
	}
	/*
	 * A run on a sandbox says persist either way, so the default cannot
	 * drift; a persist without a sandbox is written so decode refuses it.
	 */
	if (pk_want((JOB_OP_RUNS(j->op) && j->sandbox != NULL) || j->persist, &n, pk))
		pk_kv_bool(pk, "persist", j->persist);
	if (pk_want(j->perms != NULL, &n, pk)) {
		pk_str(pk, "perms");
		msgpack_pack_array(pk, j->nperms);
		for (size_t i = 0; i < j->nperms; i++) {
			msgpack_pack_map(pk, 2);
			pk_str(pk, "pattern");
			if (alias_len(j->perms[i].pattern, strlen(j->perms[i].pattern), true))
				pk_path(pk, "/workspace", j->perms[i].pattern);
			else
				pk_str(pk, j->perms[i].pattern);
			pk_kv_str(pk, "level", j->perms[i].level);
		}
	}
	if (pk_want(j->perm_preset != NULL, &n, pk))
		pk_kv_str(pk, "perm_preset", j->perm_preset);
	if (pk_want(j->path != NULL, &n, pk)) {
		pk_str(pk, "path");
		pk_path(pk, "/workspace", j->path);
	}
	if (pk_want(j->data != NULL, &n, pk)) {
		pk_str(pk, "data");
		pk_bin(pk, j->data, j->data_len);
	}
	/* fs.write always carries its mode: decode made an absent one 0644. */
	if (pk_want(j->op == OP_FS_WRITE || j->mode != 0, &n, pk))
		pk_kv_u64(pk, "mode", j->mode);
	if (pk_want(j->recursive, &n, pk))
		pk_kv_bool(pk, "recursive", true);
	if (pk_want(j->key != NULL, &n, pk))
		pk_kv_str(pk, "key", j->key);
	if (pk_want(j->value != NULL, &n, pk))
		pk_kv_str(pk, "value", j->value);
	if (pk_want(j->prefix != NULL, &n, pk))
		pk_kv_str(pk, "prefix", j->prefix);
	if (pk_want(j->to != NULL, &n, pk))
		pk_kv_str(pk, "to", j->to);
	if (pk_want(j->snapshot != NULL, &n, pk)) {
		pk_str(pk, "snapshot");
		pk_bin(pk, j->snapshot, j->snapshot_len);
	}
	return n;
}

/*
 * Every field the decoder filled is written back, so the worker decodes the
 * job the dispatcher validated (defaults included: fs.list's "/", a
 * sandbox run's persist, fs.write's mode).
 */
int
payload_job_encode(const struct job *j, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, job_pack(j, NULL));
	job_pack(j, &pk);
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
	free(r->sandbox);
	free(r->snapshot);
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
	pk_str(pk, k);
	msgpack_pack_array(pk, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		pk_str(pk, v[i]);
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
	    r->changed_truncated + changes + !!r->nrefused_paths + !!r->data;

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
	if (r->sandbox)
		pk_kv_str(&pk, "sandbox", r->sandbox);
	if (r->version)
		pk_kv_u64(&pk, "version", r->version);
	if (r->snapshot)
		pk_kv_str(&pk, "snapshot", r->snapshot);
	if (r->nchanged)
		pk_kv_strv(&pk, "changed", r->changed, r->nchanged);
	if (r->changed_truncated)
		pk_kv_bool(&pk, "changed_truncated", true);
	if (changes) {
		pk_str(&pk, "changes");
		msgpack_pack_map(&pk, 3);
		pk_kv_u64(&pk, "added", r->added);
		pk_kv_u64(&pk, "modified", r->modified);
		pk_kv_u64(&pk, "removed", r->removed);
	}
	if (r->nrefused_paths)
		pk_kv_strv(&pk, "refused_paths", r->refused_paths, r->nrefused_paths);
	if (r->data) {
		/* Already one object (checked above): written as it is. */
		pk_str(&pk, "data");
		msgpack_sbuffer_write(&sb, (const char *)r->data, r->data_len);
	}
	return sbuf_release(&sb, out, outlen);
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
		if (get_cstr(&v->via.array.ptr[i], name, JOB_PATH_MAX + 1,
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
	} else if (key_is(k, "sandbox")) {
		free(r->sandbox);
		r->sandbox = NULL;
		return get_cstr(v, "sandbox", JOB_SANDBOX_ID_MAX, &r->sandbox, e);
	} else if (key_is(k, "version")) {
		return get_u64(v, "version", 0, UINT64_MAX, &r->version, e);
	} else if (key_is(k, "snapshot")) {
		free(r->snapshot);
		r->snapshot = NULL;
		return get_cstr(v, "snapshot", RESULT_SNAPSHOT_MAX, &r->snapshot, e);
	} else if (key_is(k, "changed")) {
		return decode_result_paths(v, "changed", RESULT_CHANGED_MAX,
		    &r->changed, &r->nchanged, e);
	} else if (key_is(k, "changed_truncated")) {
		return get_bool(v, "changed_truncated", &r->changed_truncated, e);
	} else if (key_is(k, "changes")) {
		if (v->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL, "field 'changes': expected a map");
		for (uint32_t m = 0; m < v->via.map.size; m++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[m];
			uint64_t *dst = key_is(&kv->key, "added") ? &r->added :
			    key_is(&kv->key, "modified") ? &r->modified :
			    key_is(&kv->key, "removed") ? &r->removed : NULL;
			if (dst != NULL && get_u64(&kv->val, "changes", 0, UINT64_MAX,
			    dst, e) < 0)
				return -EINVAL;
		}
	} else if (key_is(k, "refused_paths")) {
		return decode_result_paths(v, "refused_paths", RESULT_REFUSED_PATHS_MAX,
		    &r->refused_paths, &r->nrefused_paths, e);
	} else if (key_is(k, "data")) {
		return decode_result_data(v, r, e);
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
