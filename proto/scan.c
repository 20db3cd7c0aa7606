/*
 * scan.c - bounded reading of msgpack payloads (pure, no I/O).
 *
 * Sections:
 *   - Structural scan: a bounded walk over raw msgpack bytes before msgpack-c
 *     sees them (msgpack-c allocates an array's announced size up front), and
 *     the map and str headers payload_peek_id() reads without decoding.
 *   - Field readers: typed getters that name the field in every error.
 *   - JSON text: the syntax check of kv values.
 *
 * job.c and result.c decode through these; neither reads msgpack bytes or
 * objects any other way. Strings are accepted as msgpack str or bin.
 */
#include <errno.h>
#include <msgpack.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "scan.h"

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
int
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
bool
scan_str_header(const uint8_t *p, size_t len, size_t *off, size_t *n)
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
scan_map_header(const uint8_t *p, size_t len, size_t *off, size_t *pairs)
{
	uint64_t v;
	uint8_t b;

	if (*off >= len)
		return false;
	b = p[*off];
	if (b >= 0x80 && b <= 0x8f) {
		*pairs = b & 0x0f;
		*off += 1;
		return true;
	}
	if ((b == 0xde || b == 0xdf) && len - *off >= (b == 0xde ? 3u : 5u)) {
		rd_be(p + *off + 1, b == 0xde ? 2 : 4, &v);
		*pairs = (size_t)v;
		*off += b == 0xde ? 3 : 5;
		return true;
	}
	return false;
}

/*** Field readers ***/

bool
scan_key_is(const msgpack_object *k, const char *name)
{
	size_t n = strlen(name);

	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	    memcmp(k->via.str.ptr, name, n) == 0;
}

/* Gets str or bin bytes; returns false if o is neither. */
bool
scan_peek_bytes(const msgpack_object *o, const char **p, size_t *n)
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
int
scan_get_cstr(const msgpack_object *o, const char *field, size_t max, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (n > max)
		return err_set(e, -EINVAL, "field '%s': longer than %zu bytes", field, max);
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field '%s': contains a NUL byte", field);
	*out = xmemdup0(p, n);
	return 0;
}

int
scan_get_bytes(const msgpack_object *o, const char *field, size_t max,
    uint8_t **out, size_t *outlen, struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected bytes or a string", field);
	if (n > max)
		return err_set(e, -EINVAL, "field '%s': longer than %zu bytes", field, max);
	*out = (uint8_t *)xmemdup0(p, n);
	*outlen = n;
	return 0;
}

int
scan_get_u64(const msgpack_object *o, const char *field, uint64_t min, uint64_t max,
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

int
scan_get_i64(const msgpack_object *o, const char *field, int64_t *out, struct err *e)
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

int
scan_get_bool(const msgpack_object *o, const char *field, bool *out, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return err_set(e, -EINVAL, "field '%s': expected true or false", field);
	*out = o->via.boolean;
	return 0;
}

/*** JSON text ***/

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
bool
scan_json_valid(const char *s, size_t n, size_t *at)
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
