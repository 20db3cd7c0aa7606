/*
 * imgbuild.h - tiny OCI images for the image tests, made by hand: no
 * internet, no Docker. Each layer is a tar stream written with
 * libarchive's writer (gzip, zstd or uncompressed), the config, manifest
 * and index are JSON (jansson), and each is stored as a blob of an OCI
 * image layout under its sha256; index.json names an image by its tag,
 * so skopeo reads it as oci:DIR:TAG.
 *
 * Asserts (Criterion) on any failure: it is test scaffolding.
 */
#ifndef SANDQ_TEST_IMGBUILD_H
#define SANDQ_TEST_IMGBUILD_H

#include <stddef.h>

/* One entry of a layer. A layer is an array ended by a NULL path. */
struct imgb_entry {
	const char *path;	/* in the layer, no leading '/'; NULL ends the layer */
	char type;		/* 'f' file, 'd' folder, 'l' symlink */
	const char *data;	/* a file's bytes (NULL: len incompressible bytes), a link's target */
	size_t len;		/* a file's size */
	unsigned mode;		/* 0: 0644 for a file, 0755 for a folder */
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

#endif
