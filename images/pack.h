/*
 * pack.h - a root filesystem tarball made an OCI image: one gzip layer,
 * its config and manifest, written as a new OCI image layout folder
 * (oci-layout, index.json naming the image by a tag, blobs/sha256/) that
 * skopeo copies as oci:DIR:TAG to a registry or another layout. What
 * `sandq image build` (mmdebstrap's tarball) and `sandq image import`
 * (a plain root filesystem tarball) push.
 *
 * The tarball is input sandq did not write (a user's file, a build's
 * output), read as the unpacker reads a layer (images/unpack.h): names
 * normalised (leading '/' and "./" dropped), '..' refused, names and
 * depth bounded, no entry below a symlink or file of the same tarball,
 * hard links only to earlier files, the entries and the bytes bounded as
 * they are read; a truncated or corrupt archive is refused naming the
 * entry it broke in. Device nodes, FIFOs and sockets are dropped (a
 * container gets its own /dev); a `.wh.` name is refused (in a layer it
 * would be a whiteout, which a root filesystem cannot mean). Kept: type,
 * permission bits (setuid and setgid included: the unpacker clears them
 * on the way into a sandbox, another runtime decides for itself), numeric
 * owners, whole-second mtimes, link targets. Not kept: user and group
 * names, xattrs, ACLs, file flags, atime and ctime.
 *
 * Lifecycle: none. img_pack_rootfs() reads the stream to its end, writes
 * the layout, and leaves either the whole layout or nothing.
 */
#ifndef SANDQ_IMAGES_PACK_H
#define SANDQ_IMAGES_PACK_H

#include <stdint.h>

#include "../common/err.h"
#include "oci.h"

#define IMG_PACK_BYTES_DEFAULT ((uint64_t)16 << 30)	/* the unpacker's per layer */
#define IMG_PACK_ENTRIES_DEFAULT 1000000u		/* the unpacker's per layer */
#define IMG_PACK_NAMES_MAX ((uint64_t)256 << 20)	/* bytes of names remembered */
/* Debian's PATH, what its images on Docker Hub set. */
#define IMG_PACK_PATH_DEFAULT \
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* How to pack. A zeroed struct but for tag is a valid default. */
struct img_pack_opts {
	const char *tag;		/* index.json's name for the image (OCI_REF_NAME) */
	const char *arch;		/* the config's architecture; NULL: oci_host_arch() */
	const char *const *env;		/* the config's Env, NULL-terminated;
					   NULL: IMG_PACK_PATH_DEFAULT alone */
	const char *created_by;		/* the config's one history entry, or NULL */
	uint64_t max_bytes;		/* sum of regular files' sizes; 0: the default */
	uint64_t max_entries;		/* tar entries read; 0: the default */
};

/* What was written, and what the tarball held. */
struct img_pack_result {
	char manifest[OCI_DIGEST_MAX + 1];	/* the image manifest's digest */
	char config[OCI_DIGEST_MAX + 1];	/* the config's */
	char layer[OCI_DIGEST_MAX + 1];		/* the gzip layer blob's */
	char diff_id[OCI_DIGEST_MAX + 1];	/* the uncompressed tar stream's */
	uint64_t manifest_size;
	uint64_t layer_size;			/* bytes of the gzip blob */
	uint64_t entries;			/* entries read */
	uint64_t bytes;				/* regular files' bytes */
	uint64_t dropped;			/* device nodes, FIFOs, sockets */
};

/*
 * Reads a root filesystem tarball (tar, pax or GNU; plain or compressed
 * with any filter libarchive reads) from fd, from its current offset to
 * its end, and writes it as an OCI image into layout, a folder this call
 * makes (it must not exist): one layer (application/vnd.oci.image.layer
 * .v1.tar+gzip, deterministic: no gzip timestamp), its config (linux,
 * o->arch, o->env, rootfs.diff_ids), the manifest, index.json naming the
 * manifest o->tag, and oci-layout. Digests are SHA-256; the diff_id is
 * computed by reading the written blob back, so it is the blob's. `what`
 * names the tarball in messages (sandq's own text: escape a user's file
 * name before). fd is not closed.
 *
 * Returns 0 and fills r (may be NULL), or a negative errno with e naming
 * the tarball and, for a refused entry, the entry (escaped): -EINVAL a
 * refused entry, -ENAMETOOLONG a name past PATH_MAX or IMG_UNPACK_DEPTH_MAX,
 * -EFBIG past max_bytes, -E2BIG past max_entries or IMG_PACK_NAMES_MAX,
 * -EBADMSG not an archive, empty, truncated or corrupt, -EEXIST layout
 * exists; otherwise the failing call's errno. On failure layout is gone.
 */
int img_pack_rootfs(int fd, const char *what, const char *layout,
    const struct img_pack_opts *o, struct img_pack_result *r, struct err *e);

#endif
