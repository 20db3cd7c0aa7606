/*
 * scan.h - bounded reading of msgpack payloads: the structural scan every
 * decoder runs first, and the field readers of job.c and result.c.
 *
 * msgpack-c allocates an array's or map's announced size before it reads a
 * single element, so bytes from Redis are walked first: payload_scan()
 * refuses any container whose count exceeds the bytes left and any nesting
 * deeper than PAYLOAD_MAX_DEPTH, without allocating. Only then does msgpack-c
 * unpack them, and the scan_get_*() readers check each value's type and
 * bounds, naming the field in every error ("field 'limits.wall_ms': ...").
 *
 * Strings are accepted as msgpack str or bin. Pure: no I/O, no globals.
 */
#ifndef SANDQ_PROTO_SCAN_H
#define SANDQ_PROTO_SCAN_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define PAYLOAD_MAX_DEPTH 16	/* nesting of containers in a payload */

/*** Structural scan: raw bytes ***/

/*
 * Checks raw msgpack bytes for structural sanity without allocating:
 * exactly one object, every count within the bytes left, depth bounded.
 * Returns 0 or -EBADMSG with e naming the problem.
 */
int payload_scan(const void *buf, size_t len, struct err *e);

/*
 * Skips exactly one object (with everything nested in it) of p (len bytes)
 * starting at *off, and moves *off past it. Returns 0, or -EBADMSG with e
 * set and *off unchanged.
 */
int scan_object(const uint8_t *p, size_t len, size_t *off, struct err *e);

/*
 * Reads a str (or bin) header at *off: true with its body's length in *n and
 * *off moved to the body, which lies within len; false otherwise.
 */
bool scan_str_header(const uint8_t *p, size_t len, size_t *off, size_t *n);

/*
 * Reads a map header at *off: true with its count of pairs in *pairs and *off
 * moved to the first key; false if there is none. The pairs themselves are
 * not checked (scan_object() does that).
 */
bool scan_map_header(const uint8_t *p, size_t len, size_t *off, size_t *pairs);

/*** Field readers: unpacked objects ***/

/* True if k is the str key name. */
bool scan_key_is(const msgpack_object *k, const char *name);

/*
 * Points *p and *n at o's bytes if o is a str or a bin (nothing is copied);
 * returns false if it is neither.
 */
bool scan_peek_bytes(const msgpack_object *o, const char **p, size_t *n);

/*
 * Reads a str or bin of at most max bytes, without NUL bytes, into a new C
 * string *out (owned by the caller). Returns 0 or -EINVAL with e naming field.
 */
int scan_get_cstr(const msgpack_object *o, const char *field, size_t max,
    char **out, struct err *e);

/*
 * Reads a str or bin of at most max bytes into new bytes *out (owned by the
 * caller, NUL-terminated past *outlen). Returns 0 or -EINVAL with e set.
 */
int scan_get_bytes(const msgpack_object *o, const char *field, size_t max,
    uint8_t **out, size_t *outlen, struct err *e);

/* Reads an integer in [min, max]. Returns 0 or -EINVAL with e set. */
int scan_get_u64(const msgpack_object *o, const char *field, uint64_t min,
    uint64_t max, uint64_t *out, struct err *e);

/* Reads an integer that fits an int64_t. Returns 0 or -EINVAL with e set. */
int scan_get_i64(const msgpack_object *o, const char *field, int64_t *out,
    struct err *e);

/* Reads true or false. Returns 0 or -EINVAL with e set. */
int scan_get_bool(const msgpack_object *o, const char *field, bool *out,
    struct err *e);

/*** JSON text ***/

/*
 * True if s (n bytes) is exactly one JSON value (RFC 8259), white space
 * around it allowed; *at is where reading stopped, for the error message.
 * Nesting deeper than 128 is refused.
 */
bool scan_json_valid(const char *s, size_t n, size_t *at);

#endif
