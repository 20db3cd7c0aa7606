/*
 * pack.c - the msgpack writers job.c and result.c share (pure, no I/O).
 *
 * Keys are always str; output bytes are always bin, since a program's output
 * need not be UTF-8. Each writer appends to a msgpack-c packer whose buffer
 * grows as needed; pack_release() hands the bytes to the caller.
 */
#include <errno.h>
#include <msgpack.h>
#include <string.h>

#include "pack.h"

void
pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

void
pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, p, n);
}

void
pack_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
	pack_str(pk, k);
	msgpack_pack_uint64(pk, v);
}

void
pack_kv_i64(msgpack_packer *pk, const char *k, int64_t v)
{
	pack_str(pk, k);
	msgpack_pack_int64(pk, v);
}

void
pack_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
	pack_str(pk, k);
	pack_str(pk, v);
}

void
pack_kv_bool(msgpack_packer *pk, const char *k, bool v)
{
	pack_str(pk, k);
	if (v)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

/* Hands the sbuffer's memory to the caller. */
int
pack_release(msgpack_sbuffer *sb, char **out, size_t *outlen)
{
	*out = sb->data;
	*outlen = sb->size;
	sb->data = NULL;
	sb->size = sb->alloc = 0;
	return *out ? 0 : -ENOMEM;
}
