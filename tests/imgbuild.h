/*
 * imgbuild.h - tiny OCI images for the image tests, made by hand: no
 * internet, no Docker. Each layer is a tar stream written with
 * libarchive's writer (gzip, zstd or uncompressed), the config, manifest
 * and index are JSON (jansson), and each is stored as a blob of an OCI
 * image layout under its sha256; index.json names an image by its tag,
 * so skopeo reads it as oci:DIR:TAG.
 *
 * Hostile layers too (images_hostile_test): names are written as given
 * (absolute, with '..', with control bytes), hard links may point
 * anywhere, devices, FIFOs, setuid bits and extended attributes are
 * written as a layer would carry them, a file of zeros makes a gzip bomb,
 * a layer's blob may be cut short (imgb_image.truncate), and a stored
 * blob may be altered in place (imgb_tamper) so it no longer matches its
 * digest.
 *
 * Asserts (Criterion) on any failure: it is test scaffolding.
 */
#ifndef SANDQ_TEST_IMGBUILD_H
#define SANDQ_TEST_IMGBUILD_H

#include <stddef.h>

/*
 * One entry of a layer. A layer is an array ended by a NULL path.
 *
 * type, and what data and len mean for it:
 *   'f'  a file: data its bytes (NULL: len incompressible bytes), len its size
 *   'z'  a file of len zero bytes (gzip makes about 1,000:1 of it: a bomb)
 *   'd'  a folder: data NULL, or "NAME=VALUE", an extended attribute it carries
 *   'x'  an empty file carrying the extended attribute data ("NAME=VALUE")
 *   'l'  a symlink to data
 *   'h'  a hard link to data (a name in the layer, written as given)
 *   'c', 'b'  a character or block device: len is its number (makedev())
 *   'p'  a FIFO
 */
struct imgb_entry {
	const char *path;	/* the name as written, byte for byte (a normal
				   layer's have no leading '/'); NULL ends the layer */
	char type;		/* see above */
	const char *data;
	size_t len;
	unsigned mode;		/* permission bits, setuid, setgid and sticky
				   included; 0: 0644 (0755 for a folder) */
};

enum imgb_compress { IMGB_GZIP, IMGB_ZSTD, IMGB_NONE };

struct imgb_image {
	const char *os;				/* NULL: linux */
	const char *arch;			/* NULL: amd64 */
	const char *const *env;			/* NULL-terminated, or NULL */
	const char *workdir;			/* or NULL */
	const char *user;			/* or NULL */
	const struct imgb_entry *layers[8];	/* base first; a NULL ends the list */
	enum imgb_compress compress;
	unsigned truncate;			/* 1-based: that layer's blob is cut to
						   half its size before it is stored and
						   named (so its digest is of the cut
						   bytes: only an unpacker sees it); 0: none */
};

/* A descriptor of what was written. */
struct imgb_desc {
	char digest[72];		/* sha256:... */
	size_t size;
	char media_type[80];
	char os[16];
	char arch[16];
	char layers[8][72];		/* a manifest's layer digests */
	size_t nlayers;
	char config[72];		/* a manifest's config digest */
};

/*
 * Writes img into the OCI layout dir (made if need be); tag (or NULL)
 * names it in index.json. Fills *out with the manifest's descriptor.
 */
void imgb_write(const char *dir, const char *tag, const struct imgb_image *img,
    struct imgb_desc *out);
/* Writes an image index of the n manifests m (each with its platform), named tag. */
void imgb_write_index(const char *dir, const char *tag, const struct imgb_desc *m, size_t n,
    struct imgb_desc *out);
/*
 * Alters the file at path (a stored blob) in place: its middle byte
 * changes, its size does not, so it no longer matches its digest.
 */
void imgb_tamper(const char *path);
/*
 * Points e (a file entry) at Debian's static busybox (/bin/busybox,
 * deploy/install-deps.sh): the root of the test images, read once per
 * process and kept for its life. Asserts, naming the package, when it is
 * missing.
 */
void imgb_busybox(struct imgb_entry *e);

#endif
