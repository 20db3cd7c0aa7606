/*
 * snapkey.h - the key of a snapshot: what names its bytes everywhere.
 *
 * A snapshot (an AgentFS database) is cut at fixed offsets into
 * SNAPKEY_CHUNK_BYTES chunks (the last one shorter); its key is the
 * SHA-256 of "sandq-snapshot-1" NUL, its size (u64 little-endian), the
 * chunk size (u32 little-endian) and the raw SHA-256 of each chunk in
 * order, as 64 lower-case hex digits. The store keys its blobs so
 * (store/store.h), results and sandbox.info give it as `snapshot`, and a
 * client computes it to create a sandbox from a snapshot the tenant
 * stores without sending the bytes (`snapshot_key`, docs/protocol.md).
 * Same bytes, same key. docs/store.md, "Chunks and keys".
 */
#ifndef SANDQ_PROTO_SNAPKEY_H
#define SANDQ_PROTO_SNAPKEY_H

#include <stddef.h>
#include <stdint.h>

#define SNAPKEY_HEX 64				/* hex digits of a key */
#define SNAPKEY_CHUNK_BYTES (64 * 1024)		/* the chunking the key is over */
#define SNAPKEY_RAW 32				/* bytes of one raw SHA-256 */
#define SNAPKEY_DOMAIN "sandq-snapshot-1"	/* hashed with its NUL */

/*
 * The key of a snapshot of size bytes cut into chunks of chunk_size whose
 * n raw SHA-256 hashes are hashes (n * SNAPKEY_RAW bytes), into hex (64
 * digits and a NUL). Returns 0, or -EIO if OpenSSL's digest failed.
 */
int snapkey_manifest(uint64_t size, uint32_t chunk_size,
    const unsigned char *hashes, size_t n, char hex[SNAPKEY_HEX + 1]);

/* Lower-case hex of n raw bytes: 2 * n digits and a NUL into out. */
void snapkey_hex(const unsigned char *raw, size_t n, char *out);

/* The key of len bytes of data, into hex. 0 or -EIO (or -ENOMEM). */
int snapkey_of(const void *data, size_t len, char hex[SNAPKEY_HEX + 1]);

#endif
