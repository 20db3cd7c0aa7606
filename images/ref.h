/*
 * ref.h - image references: what a job (and later a sandbox or a tenant's
 * tag) names as its root filesystem, parsed into a plain struct; its
 * canonical text; the source string the fetchers hand skopeo; and the
 * allowlist patterns of the image_sources option. Pure: no I/O, no globals,
 * no allocation.
 *
 * References (docs/images.md "References"):
 *
 *   host                                      the host's own /usr (today's root)
 *   docker://HOST[:PORT]/REPO[:TAG|@sha256:HEX64]   an image in an OCI registry
 *   oci:PATH[:TAG]                            an OCI layout folder on this host
 *   oci-archive:PATH                          a tar of an OCI layout
 *   docker-archive:PATH                       a `docker save` tarball
 *   NAME[:TAG]                                a tenant's own name for one
 *                                             (sandq image tag NAME REF)
 *
 * Patterns (image_sources, a host's and a tenant's):
 *
 *   host                          the host's image
 *   docker://HOST[:PORT]/REPO     that repository, any tag or digest
 *   docker://HOST[:PORT]/PREFIX*  every repository whose path starts with PREFIX
 *   oci:/DIR/ then '*'          every path below DIR (a component
 *                                 boundary); so for oci-archive: and
 *                                 docker-archive:
 *   oci:/PATH (and the others)    exactly that path
 *
 * Lifecycle: img_ref_parse() fills a struct img_ref (nothing to free) ->
 * img_ref_str(), img_ref_source(), img_source_allowed(). Patterns are kept
 * as text by their owners (config, tenant records), checked with
 * img_pattern_parse() when set and parsed again by img_source_allowed().
 *
 * Error messages name the part that is wrong and show what was given with
 * every byte outside printable ASCII escaped (\xHH), at most 48 bytes of it:
 * the text is a tenant's, and it goes into results and logs.
 */
#ifndef SANDQ_IMAGES_REF_H
#define SANDQ_IMAGES_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define IMG_REF_MAX 1024		/* bytes of a reference or a pattern,
					 * as given and canonical */
#define IMG_HOST_MAX 253		/* bytes of a registry host (a DNS name) */
#define IMG_REPO_MAX 255		/* bytes of a repository path */
#define IMG_TAG_MAX 128			/* bytes of a tag */
#define IMG_DIGEST_LEN 71		/* "sha256:" and 64 hex digits */
#define IMG_NAME_MAX 64			/* bytes of a tenant's image name */
#define IMG_COMPONENT_MAX 255		/* bytes of one path component */
#define IMG_DEFAULT_TAG "latest"	/* a docker:// reference without a tag */

enum img_kind {
	IMG_HOST = 0,			/* the host's own image */
	IMG_DOCKER,			/* docker://: a registry */
	IMG_OCI,			/* oci:: a layout folder */
	IMG_OCI_ARCHIVE,		/* oci-archive:: a tar of one */
	IMG_DOCKER_ARCHIVE,		/* docker-archive:: a docker save tarball */
	IMG_NAME,			/* a tenant's name, resolved elsewhere */
};

/* A parsed reference. Fields a kind does not use are empty. */
struct img_ref {
	enum img_kind kind;
	char host[IMG_HOST_MAX + 1];	/* docker: lower-case DNS name, IPv4, or
					 * "[IPv6]" in inet_ntop()'s spelling */
	uint16_t port;			/* docker: 0 = none given */
	char repo[IMG_REPO_MAX + 1];	/* docker: "library/alpine" */
	char tag[IMG_TAG_MAX + 1];	/* docker ("latest" unless a digest is
					 * given), oci, name: "" = none */
	char digest[IMG_DIGEST_LEN + 1];	/* docker: "sha256:HEX", or "" */
	char path[IMG_REF_MAX + 1];	/* oci, oci-archive, docker-archive:
					 * absolute, normalised */
	char name[IMG_NAME_MAX + 1];	/* name: [a-z0-9][a-z0-9._-]* */
};

/* A parsed image_sources pattern. */
struct img_pattern {
	enum img_kind kind;		/* never IMG_NAME */
	char host[IMG_HOST_MAX + 1];	/* docker: as in struct img_ref */
	uint16_t port;			/* docker: must equal the reference's */
	char repo[IMG_REPO_MAX + 1];	/* docker: the repository, or its prefix */
	char path[IMG_REF_MAX + 1];	/* paths: the path, or the folder ("" = /) */
	bool wild;			/* ends in '*': repo/path is a prefix */
};

/*
 * Parses s (NUL-terminated, at most IMG_REF_MAX bytes) into *r. Spelling
 * that means the same is made one (docs/images.md): a host is lower-cased,
 * index.docker.io is docker.io and a one-component repository of docker.io
 * is under library/, as Docker reads them; a docker:// reference without
 * a tag or digest gets tag "latest"; a path loses empty and "." components.
 * Returns 0, or -EINVAL with e naming what is wrong ("repository component
 * 'Alpine': ..."); *r is then zeroed. Never reads past s's NUL or
 * IMG_REF_MAX + 1 bytes.
 */
int img_ref_parse(const char *s, struct img_ref *r, struct err *e);

/*
 * Writes r's canonical text into buf (size bytes): what img_ref_parse()
 * reads back to an equal struct. Returns its length, or -ENAMETOOLONG when
 * it does not fit (it always fits IMG_REF_MAX + 1 bytes for a reference
 * img_ref_parse() returned).
 */
int img_ref_str(const struct img_ref *r, char *buf, size_t size);

/*
 * Writes the source skopeo takes for r (skopeo copy SRC ...):
 * "docker://host:port/repo:tag" (or "@sha256:..."), "oci:/path[:tag]",
 * "oci-archive:/path", "docker-archive:/path". Returns its length,
 * -ENAMETOOLONG, or -EINVAL for host and a name, which have none.
 */
int img_ref_source(const struct img_ref *r, char *buf, size_t size);

/*
 * The key a tenant's name r (IMG_NAME) is kept under: "NAME:TAG", the tag
 * "latest" when none is given, as Docker reads a bare name. Returns its
 * length, -ENAMETOOLONG, or -EINVAL when r is not a name.
 */
int img_name_key(const struct img_ref *r, char *buf, size_t size);

/* "host", "docker", "oci", "oci-archive", "docker-archive" or "name". */
const char *img_kind_name(enum img_kind k);

/*
 * Parses an image_sources pattern (the forms above). A '*' may only end a
 * docker:// pattern or be a path pattern's last component; a pattern names
 * no tag or digest. Hosts, docker.io and paths are made canonical as in
 * img_ref_parse(). Returns 0 or -EINVAL with e naming the problem.
 */
int img_pattern_parse(const char *s, struct img_pattern *p, struct err *e);

/*
 * Whether r is within pattern p: the same kind; for docker://, the same
 * host and port (both absent, or equal) and the repository equal to p's or,
 * for a wild p, starting with its prefix ("team*" takes "teamx" and
 * "team/a"; "team/" then '*' takes "team/a" only); for paths, the same
 * path or, for a wild p, one below its folder ("/srv/img/" then '*' takes
 * "/srv/img/a/b", never "/srv/imgx" or "/srv/img" itself). Tags and
 * digests never matter.
 */
bool img_pattern_match(const struct img_pattern *p, const struct img_ref *r);

/*
 * Whether a list of patterns (n of them; as given to img_pattern_parse())
 * allows r. An empty list allows only host. A name allows nothing: it must
 * be resolved to a reference first, which is then checked. A pattern that
 * does not parse matches nothing.
 */
bool img_source_allowed(char *const *patterns, size_t n, const struct img_ref *r);

#endif
