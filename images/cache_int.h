/*
 * cache_int.h - what the files of the image cache share: the handle, the
 * on-disk layout's paths, locks and atomic writes, and the records
 * (cache_records.c, the leaf); the pull (cache.c) and the eviction
 * (cache_evict.c) call them. Not for other folders: they use cache.h.
 */
#ifndef SANDQ_IMAGES_CACHE_INT_H
#define SANDQ_IMAGES_CACHE_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../common/err.h"
#include "cache.h"

#define CACHE_RECORD_MAX (16u << 20)	/* an image record file */
#define CACHE_META_MAX 4096u		/* a layer's or a reference's file */
#define CACHE_REF_NAME_MAX 65		/* 'r' and 64 hex digits */

struct img_cache {
	char root[PATH_MAX - 200];	/* absolute; room left for the names below it */
};

/* What the cache knows of an unpacked layer: layers/sha256/HEX.json. */
struct cache_layer_meta {
	char digest[OCI_DIGEST_MAX + 1];
	char diff_id[OCI_DIGEST_MAX + 1];
	uint64_t size;		/* of the blob */
	uint64_t unpacked;	/* bytes of its files */
};

/*** Paths and files ***/

/* ROOT/ followed by fmt into buf (PATH_MAX bytes). 0 or -ENAMETOOLONG. */
int cache__path(const struct img_cache *c, char *buf, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The 64 hex digits of a valid digest (a pointer into it). */
const char *cache__hex(const char *digest);
/*
 * Takes the flock of ROOT/locks/NAME (LOCK_SH or LOCK_EX); sets *waited
 * (if not NULL) when another process held it first. Returns the lock's
 * descriptor (close it to unlock) or -errno with e.
 */
int cache__lock(const struct img_cache *c, const char *name, int op, bool *waited,
    struct err *e);
/*
 * Reads path (at most max bytes) into *buf (owned, NUL added) and *len.
 * Returns 0, -ENOENT, -EFBIG, or -errno; e names the path.
 */
int cache__read_file(const char *path, size_t max, char **buf, size_t *len,
    struct err *e);
/* Writes path whole or not at all (a temporary file, fsync, rename). 0 or -errno with e. */
int cache__write_atomic(const char *path, const void *buf, size_t len, struct err *e);
/* Removes path and all below it (no symlink followed). 0 or -errno. */
int cache__rmtree(const char *path);
/* The bytes of the regular files below path (a layer left without its meta). */
uint64_t cache__tree_bytes(const char *path);

/*** Records, references, layers ***/

/* A record into JSON text (owned). */
char *cache__record_encode(const struct img_record *r);
/* JSON text into a record (owned); every digest checked. 0 or -EBADMSG with e. */
int cache__record_decode(const char *buf, size_t len, struct img_record **out,
    struct err *e);
/* Reads the record of a manifest digest; last_use_ms from its mtime. 0, -ENOENT or -errno. */
int cache__record_read(const struct img_cache *c, const char *digest,
    struct img_record **out, struct err *e);
/* Writes a record atomically. 0 or -errno with e. */
int cache__record_write(const struct img_cache *c, const struct img_record *r,
    struct err *e);

/* The file name a reference is known by: 'r' and sha256(ref) in hex. */
void cache__ref_name(const char *ref, char name[CACHE_REF_NAME_MAX + 1]);
/* The manifest digest refs/NAME.json names. 0, -ENOENT, -EBADMSG. */
int cache__ref_read(const struct img_cache *c, const char *name,
    char digest[OCI_DIGEST_MAX + 1], struct err *e);
/* Writes refs/NAME.json: ref and its manifest digest. 0 or -errno with e. */
int cache__ref_write(const struct img_cache *c, const char *name, const char *ref,
    const char *digest, struct err *e);

/* Reads layers/sha256/HEX.json. 0, -ENOENT, -EBADMSG. */
int cache__layer_meta_read(const struct img_cache *c, const char *digest,
    struct cache_layer_meta *m, struct err *e);
/* Writes it atomically. 0 or -errno with e. */
int cache__layer_meta_write(const struct img_cache *c, const struct cache_layer_meta *m,
    struct err *e);

#endif
