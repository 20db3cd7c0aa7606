/*
 * oci.h - the JSON documents of an OCI image, parsed: an image layout's
 * index.json, an image index (or a Docker manifest list), an image
 * manifest (OCI, or Docker v2 schema 2) and an image config. Pure: bytes
 * in, plain structs out, no I/O; images/cache.c reads and verifies the
 * blobs these documents name.
 *
 * Every document is a registry's or a tenant's bytes. The caller bounds
 * its size (OCI_JSON_MAX); jansson parses it with duplicate keys refused;
 * each field is checked for its type, each digest for its form, each
 * media type against the short list sandq can unpack. An error names the
 * field, digest or media type it refused, escaped (oci_shown()).
 *
 * Lifecycle: parse into a caller's struct, read its fields, then
 * oci_manifest_free() / oci_config_free() (both safe on a zeroed or
 * half-filled struct, and twice).
 */
#ifndef SANDQ_IMAGES_OCI_H
#define SANDQ_IMAGES_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define OCI_DIGEST_MAX 71		/* "sha256:" and 64 hex digits */
#define OCI_MEDIA_TYPE_MAX 127		/* longest media type kept */
#define OCI_JSON_MAX (4u << 20)		/* a manifest, an index or a config */
#define OCI_LAYOUT_INDEX_MAX (16u << 20)	/* the cache's own index.json */
#define OCI_LAYERS_MAX 128		/* layers of one image (Docker's is 127) */
#define OCI_STRINGS_MAX 4096		/* entries of Env, Entrypoint, Cmd */
#define OCI_PLATFORM_MAX 31		/* an os or architecture name */
#define OCI_BLOB_SIZE_MAX ((uint64_t)1 << 40)	/* a descriptor's size */

/* The annotation an image layout names its images by (skopeo's oci:DIR:NAME). */
#define OCI_REF_NAME "org.opencontainers.image.ref.name"

/* What a media type is to the cache. */
enum oci_kind {
	OCI_KIND_OTHER,		/* nothing sandq reads */
	OCI_KIND_INDEX,		/* an image index or Docker manifest list */
	OCI_KIND_MANIFEST,	/* an image manifest (OCI or Docker v2 schema 2) */
};

/* A content descriptor: what a document says another blob is. */
struct oci_desc {
	char media_type[OCI_MEDIA_TYPE_MAX + 1];
	char digest[OCI_DIGEST_MAX + 1];	/* "sha256:<64 lowercase hex>" */
	uint64_t size;				/* bytes of the blob */
};

/* An image manifest: the config and the layers, base first. */
struct oci_manifest {
	struct oci_desc config;
	struct oci_desc *layers;	/* owned */
	size_t nlayers;			/* 1..OCI_LAYERS_MAX */
};

/* What the cache keeps of an image config. NULL arrays are absent ones. */
struct oci_config {
	char os[OCI_PLATFORM_MAX + 1];
	char arch[OCI_PLATFORM_MAX + 1];
	char **env;		/* "NAME=value" strings, owned */
	size_t nenv;
	char *working_dir;	/* owned, or NULL */
	char *user;		/* owned, or NULL */
	char **entrypoint;	/* owned, or NULL */
	size_t nentrypoint;
	char **cmd;		/* owned, or NULL */
	size_t ncmd;
	char (*diff_ids)[OCI_DIGEST_MAX + 1];	/* rootfs.diff_ids, owned */
	size_t ndiff_ids;
};

/*
 * s[0..n) as a message may quote it: printable ASCII as is, every other
 * byte (controls, quotes, backslashes, anything past 0x7e) as \xNN, cut
 * to fit size bytes with "..." marking the cut. Writes buf (size >= 8,
 * NUL-terminated) and returns it.
 */
const char *oci_shown(const char *s, size_t n, char *buf, size_t size);

/* True if d is "sha256:" and exactly 64 lowercase hex digits. */
bool oci_digest_ok(const char *d);
/* What media type mt is (OCI_KIND_OTHER for NULL). */
enum oci_kind oci_kind_of(const char *mt);
/* True if mt is a layer type the unpacker reads: tar, tar+gzip, tar+zstd. */
bool oci_layer_type_ok(const char *mt);
/* True if mt is an image config type (OCI, or Docker's container config). */
bool oci_config_type_ok(const char *mt);

/*
 * This machine's architecture as OCI names it (Go's GOARCH: amd64,
 * arm64, ...), from uname(); an unknown machine's own name. Static text.
 */
const char *oci_host_arch(void);

/*
 * An image layout's index.json (buf, len bytes): the descriptor of the
 * entry whose OCI_REF_NAME annotation is name (the last, if several).
 * Returns 0, -ENOENT (no such entry) or -EBADMSG, with e.
 */
int oci_layout_find(const char *buf, size_t len, const char *name,
    struct oci_desc *d, struct err *e);

/*
 * An image index or Docker manifest list (buf, len bytes): the descriptor
 * of its first image manifest for os/arch. Returns 0; -ENOENT when it has
 * none, e naming the platforms it has ("linux/arm64, linux/s390x");
 * -EBADMSG for a malformed index.
 */
int oci_index_pick(const char *buf, size_t len, const char *os, const char *arch,
    struct oci_desc *d, struct err *e);

/*
 * An image manifest (buf, len bytes) that its descriptor calls
 * media_type: fills m (owned by the caller: oci_manifest_free()). Refuses,
 * naming it, a config or layer media type sandq cannot use, a
 * non-sha256 digest, no layers or more than OCI_LAYERS_MAX. Returns 0,
 * -EBADMSG or -ENOTSUP, with e.
 */
int oci_manifest_parse(const char *buf, size_t len, const char *media_type,
    struct oci_manifest *m, struct err *e);
void oci_manifest_free(struct oci_manifest *m);

/*
 * An image config (buf, len bytes): fills c (owned by the caller:
 * oci_config_free()). os, architecture and rootfs.diff_ids are required.
 * Returns 0 or -EBADMSG with e.
 */
int oci_config_parse(const char *buf, size_t len, struct oci_config *c,
    struct err *e);
void oci_config_free(struct oci_config *c);

#endif
