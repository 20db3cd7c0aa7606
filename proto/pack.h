/*
 * pack.h - the msgpack writers job.c and result.c share.
 *
 * Each appends to a msgpack-c packer on a msgpack_sbuffer; pack_release()
 * then hands the buffer's bytes to the caller. Keys are str, output bytes
 * bin. Pure: no I/O.
 */
#ifndef SANDQ_PROTO_PACK_H
#define SANDQ_PROTO_PACK_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Packs C string s as a str. */
void pack_str(msgpack_packer *pk, const char *s);
/* Packs n bytes at p as a bin. */
void pack_bin(msgpack_packer *pk, const void *p, size_t n);

/* Each packs one map entry: key k (a str), then the value v. */
void pack_kv_u64(msgpack_packer *pk, const char *k, uint64_t v);
void pack_kv_i64(msgpack_packer *pk, const char *k, int64_t v);
void pack_kv_str(msgpack_packer *pk, const char *k, const char *v);
void pack_kv_bool(msgpack_packer *pk, const char *k, bool v);

/*
 * Hands sb's bytes to the caller (*out, *outlen; free() them) and leaves sb
 * empty. Returns 0, or -ENOMEM if nothing was written.
 */
int pack_release(msgpack_sbuffer *sb, char **out, size_t *outlen);

#endif
