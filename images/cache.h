/*
 * cache.h - the per-host image cache: every image a host runs, pulled
 * once, verified against its digests, each layer unpacked once, under one
 * root folder (sandqd uses STATE/images).
 *
 *   ROOT/oci/                     one OCI image layout skopeo copies into
 *                                 (index.json, oci-layout, blobs/sha256/)
 *   ROOT/layers/sha256/HEX/       a layer, unpacked (HEX: its compressed digest)
 *   ROOT/layers/sha256/HEX.json   what it is: digest, diff_id, sizes
 *   ROOT/images/sha256/HEX.json   an image record (HEX: its manifest's
 *                                 digest); its mtime is its last use
 *   ROOT/refs/NAME.json           a reference as given -> its manifest digest
 *   ROOT/locks/                   flock files (cache, layout, refs, layers)
 *   ROOT/tmp/                     skopeo's HOME and TMPDIR
 *
 * Lifecycle:
 *   img_cache_open(root) -> cache            makes the folders
 *   img_cache_pull(cache, ref, opts) -> rec  fetch, verify, unpack, record
 *   img_cache_lookup / img_cache_get -> rec  what is already there
 *   img_cache_touch(cache, digest)           on each use (LRU order)
 *   img_cache_list(cache) -> recs            `sandq image ls`
 *   img_cache_evict(cache, max, in_use)      least recently used first
 *   img_cache_close(cache)
 * Several processes may use one root at once (docs/images.md, "The
 * cache": which lock guards what). A handle is not for two threads.
 */
#ifndef SANDQ_IMAGES_CACHE_H
#define SANDQ_IMAGES_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"
#include "oci.h"
#include "unpack.h"

#define IMG_REF_MAX 1024		/* bytes of a skopeo transport reference */
#define IMG_PULL_TIMEOUT_MS (30u * 60 * 1000)	/* skopeo's default time limit */
#define IMG_UNPACK_BYTES_DEFAULT ((uint64_t)16 << 30)	/* per layer */
#define IMG_UNPACK_ENTRIES_DEFAULT 1000000u		/* per layer */
#define IMG_UNPACK_RATIO_DEFAULT 200u			/* per layer */

struct img_cache;

/* One layer of an image, base first. */
struct img_layer {
	char digest[OCI_DIGEST_MAX + 1];	/* of the compressed blob: the cache's name */
	char diff_id[OCI_DIGEST_MAX + 1];	/* of the tar stream (from the config) */
	char media_type[OCI_MEDIA_TYPE_MAX + 1];
	uint64_t size;				/* bytes of the blob */
	uint64_t unpacked;			/* bytes of its files, unpacked */
};

/* An image record: what the cache holds of one image. */
struct img_record {
	char *reference;			/* as first given (skopeo transport form) */
	char manifest[OCI_DIGEST_MAX + 1];	/* the image manifest's digest */
	char top[OCI_DIGEST_MAX + 1];		/* index.json's entry: the manifest or its index */
	char config[OCI_DIGEST_MAX + 1];	/* the config's digest */
	char os[OCI_PLATFORM_MAX + 1];
	char arch[OCI_PLATFORM_MAX + 1];
	struct img_layer *layers;		/* nlayers of them */
	size_t nlayers;
	char **env;				/* the config's Env (NULL: none) */
	size_t nenv;
	char *working_dir;			/* WorkingDir, or NULL */
	char *user;				/* User, or NULL */
	char **entrypoint;			/* kept for later; NULL: none */
	size_t nentrypoint;
	char **cmd;
	size_t ncmd;
	uint64_t unpacked_bytes;		/* sum of its layers' unpacked bytes */
	uint64_t blob_bytes;			/* manifest, config and layer blobs */
	uint64_t pulled_ms;			/* when the record was written */
	uint64_t last_use_ms;			/* its file's mtime: img_cache_touch() */
};

/* A pull's progress, as it goes (img_pull_opts.progress). */
enum img_phase {
	IMG_PHASE_FETCH,	/* skopeo copies a blob (digest set) or the config */
	IMG_PHASE_VERIFY,	/* checking blob index of count (digest set) */
	IMG_PHASE_UNPACK,	/* unpacking layer index of count (digest set) */
	IMG_PHASE_DONE,		/* the record is written */
};

struct img_progress {
	enum img_phase phase;
	const char *digest;	/* the blob, or NULL */
	unsigned index;		/* 1-based, for VERIFY and UNPACK */
	unsigned count;
	uint64_t size;		/* VERIFY, UNPACK: the blob's bytes (its
				   descriptor's); 0 unknown */
};

/* What one pull did (img_pull_opts.stats). */
struct img_pull_stats {
	bool reused;		/* the reference's record was there: no skopeo run */
	bool waited;		/* another process was pulling it; waited for its result */
	unsigned fetched;	/* skopeo runs (0 or 1) */
	unsigned unpacked;	/* layers this pull unpacked */
	uint64_t unpacked_bytes;	/* their bytes */
};

typedef void (*img_progress_cb)(void *arg, const struct img_progress *p);

/* How to pull. A zeroed struct is a valid default (TLS verified, no retries). */
struct img_pull_opts {
	bool plain_http;	/* the source is an allowed plain-HTTP registry:
				   --src-tls-verify=false (docker:// only) */
	bool refresh;		/* ask the source again even if the reference has
				   a record (a tag that may have moved) */
	unsigned retry_times;	/* skopeo --retry-times */
	unsigned timeout_ms;	/* skopeo's time limit; 0: IMG_PULL_TIMEOUT_MS */
	uid_t unpack_uid;	/* who unpacks (img_unpack_layer_as) ... */
	gid_t unpack_gid;	/* ... never root for a tenant's image */
	struct img_unpack_limits limits;	/* per layer; 0 fields: the defaults */
	const char *os;		/* platform wanted; NULL: "linux" ... */
	const char *arch;	/* ... and the host's (uname: amd64, arm64, ...) */
	const char *skopeo;	/* the binary; NULL: /usr/bin/skopeo */
	img_progress_cb progress;	/* called as the pull goes, or NULL */
	void *progress_arg;
	struct img_pull_stats *stats;	/* out: filled if not NULL */
};

/*
 * Opens (and makes, mode 0700, as needed) the cache at root, which must
 * be an absolute path without ':' (skopeo's oci:DIR:NAME splits on it).
 * On success *out owns the handle. Returns 0 or -errno with e.
 */
int img_cache_open(const char *root, struct img_cache **out, struct err *e);
/*
 * A handle on the cache at root for a process that only reads records
 * and names layers (img_cache_get, img_cache_lookup, img_cache_layer_path,
 * img_cache_list): checks the path as img_cache_open() does, but makes and
 * changes nothing on disk (the worker, confined, links this alone). 0 or
 * -errno with e.
 */
int img_cache_attach(const char *root, struct img_cache **out, struct err *e);
/* Closes the handle (NULL is a no-op). Holds no lock between calls. */
void img_cache_close(struct img_cache *c);

/*
 * Pulls ref (docker://..., oci:..., oci-archive:..., docker-archive:...)
 * into the cache and fills *out (owned: img_record_free()). A reference
 * that already has a record is not fetched again unless opts->refresh;
 * two processes pulling one reference at once fetch it once (the second
 * waits and takes the first's record). Every blob is checked against its
 * descriptor's sha256 and size before use, each missing layer is unpacked
 * as opts->unpack_uid, and the record is written last: a failed pull
 * leaves no record and no partial layer. Errors name the image: an
 * unreachable source (skopeo's reason, escaped), a time limit, a blob
 * that does not match its digest (the blob is removed, so the next pull
 * fetches it again), no image for the platform (naming the ones there
 * are), a media type sandq cannot use. Returns 0 or -errno with e.
 */
int img_cache_pull(struct img_cache *c, const char *ref, const struct img_pull_opts *opts,
    struct img_record **out, struct err *e);

/*
 * The record of the image ref was last pulled as, into *out (owned), if
 * the cache has it. Returns 0, -ENOENT, or -errno with e.
 */
int img_cache_lookup(struct img_cache *c, const char *ref, struct img_record **out,
    struct err *e);
/* The record of manifest digest, into *out (owned). 0, -ENOENT or -errno with e. */
int img_cache_get(struct img_cache *c, const char *digest, struct img_record **out,
    struct err *e);
/* Marks the image of manifest digest used now. 0, -ENOENT or -errno with e. */
int img_cache_touch(struct img_cache *c, const char *digest, struct err *e);

/*
 * The folder of an unpacked layer (its compressed digest) into buf (n
 * bytes): what an overlay mounts. Returns 0 or -ENAMETOOLONG / -EINVAL.
 */
int img_cache_layer_path(const struct img_cache *c, const char *digest, char *buf,
    size_t n);

/*
 * Every image record, least recently used first, into *out (*n of them;
 * owned: img_records_free()). Unreadable records are skipped. 0 or -errno.
 */
int img_cache_list(struct img_cache *c, struct img_record ***out, size_t *n,
    struct err *e);

/* Whether an image is in use (a job runs on it): eviction keeps it. */
typedef bool (*img_in_use_cb)(void *arg, const struct img_record *r);

/* What an eviction did. */
struct img_evict_result {
	unsigned images;	/* records removed */
	unsigned layers;	/* unpacked layers removed */
	unsigned blobs;		/* blobs removed from the layout */
	uint64_t bytes_before;	/* the cache's size before... */
	uint64_t bytes_after;	/* ...and after (may still exceed the bound:
				   what is in use stays) */
};

/*
 * Shrinks the cache to max_bytes: removes the least recently used image
 * records for which in_use (NULL: none is) says false until the size of
 * the layers the remaining records name (unpacked plus compressed) fits,
 * then every layer no remaining record names, and every blob of the
 * layout none names. Waits for pulls in progress to finish, and holds
 * them off meanwhile. Fills *res if not NULL. Returns 0 or -errno with e.
 */
int img_cache_evict(struct img_cache *c, uint64_t max_bytes, img_in_use_cb in_use,
    void *arg, struct img_evict_result *res, struct err *e);

void img_record_free(struct img_record *r);
void img_records_free(struct img_record **v, size_t n);

#endif
