/*
 * pack.c - a root filesystem tarball written as a one-layer OCI image
 * layout (see pack.h).
 *
 * DESIGN. The tarball is read once, entry by entry, with libarchive's
 * reader, and each entry that passes is written again by libarchive's pax
 * writer through its gzip filter into a callback that hashes the
 * compressed bytes and writes them to a temporary blob. Each entry is
 * written from a fresh archive_entry holding only what a layer should
 * carry (pack.h), so nothing the input smuggles in a pax header (xattrs,
 * ACLs, names, sub-second times) reaches the image. The names read so far
 * are kept in a hash set with their types: that is what answers "is this
 * hard link's target an earlier file" and "is this entry below a symlink
 * of the same tarball", the two checks that keep the image one the
 * unpacker will accept (it refuses both, at pull time, far from here).
 * The diff_id is then the SHA-256 of the blob read back through gzip, so
 * it describes the bytes written, not the ones meant. The small JSON
 * documents are made with jansson, keys sorted, and written as blobs
 * under their digests; index.json and oci-layout last. Everything goes
 * into a folder made here and removed on any failure.
 *
 * Not a child process, unlike the unpacker: nothing is written where the
 * tarball's names say (names are only data to the writer), the caller is
 * the user's own sandq command, and libarchive's reader is given the tar
 * formats and in-library filters alone, never an external program.
 *
 * Sections: messages, the name set, entries, blobs and documents, the
 * layout.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "pack.h"
#include "unpack.h"

#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define MT_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_LAYER "application/vnd.oci.image.layer.v1.tar+gzip"
#define WH_PREFIX ".wh."		/* an OCI whiteout's name */
#define READ_BLOCK 65536		/* bytes libarchive reads at a time */
#define SHOWN_MAX 100			/* a name as a message shows it */
#define BLOB_TMP ".pack.tmp"		/* the blob being written, in blobs/sha256 */

/* A name read so far: its type, for hard links and parents. */
enum kind { K_NONE = 0, K_DIR, K_FILE, K_OTHER };

struct name_set {
	char **keys;			/* owned; NULL: a free slot */
	unsigned char *kinds;		/* enum kind of each key */
	size_t cap;			/* a power of two */
	size_t n;
	uint64_t bytes;			/* of the keys, against IMG_PACK_NAMES_MAX */
};

/* One packing. */
struct pack {
	const char *what;		/* names the tarball */
	const struct img_pack_opts *o;
	struct img_pack_result *r;
	struct err *e;
	uint64_t max_bytes, max_entries;
	struct archive *in;		/* the tarball */
	struct archive *out;		/* the layer: pax, gzip */
	EVP_MD_CTX *md;			/* over the layer's compressed bytes */
	int dir;			/* the layout folder */
	int blobs;			/* its blobs/sha256 */
	int tmp;			/* BLOB_TMP, being written */
	int write_errno;		/* why the write callback failed */
	struct name_set names;
	char name[PATH_MAX];		/* the current entry's normalised name */
	char link[PATH_MAX];		/* a hard link's target, normalised */
	char *buf;			/* READ_BLOCK bytes of data in passing */
	char last[PATH_MAX];		/* the last entry read whole, raw */
};

/*** Messages ***/

static int fail(struct pack *p, int code, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Fills p->e with "WHAT: WHY: 'NAME'" (or "WHAT: WHY" without a name),
 * the name escaped and cut (oci_shown()), and returns code.
 */
static int
fail(struct pack *p, int code, const char *name, const char *fmt, ...)
{
	char why[160], shown[SHOWN_MAX + 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (name == NULL)
		return err_set(p->e, code, "%s: %s", p->what, why);
	return err_set(p->e, code, "%s: %s: '%s'", p->what, why,
	    oci_shown(name, strlen(name), shown, sizeof(shown)));
}

/* libarchive's message on a, escaped (it may quote the archive's bytes). */
static const char *
archive_why(struct archive *a, char *buf, size_t size)
{
	const char *m = archive_error_string(a);

	if (m == NULL)
		m = "unknown error";
	return oci_shown(m, strlen(m), buf, size);
}

/*** The name set ***/

static uint64_t
name_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;	/* FNV-1a */

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/* The slot of key, or of the free slot where it would go. */
static size_t
name_slot(const struct name_set *s, const char *key)
{
	size_t i = (size_t)name_hash(key) & (s->cap - 1);

	while (s->keys[i] != NULL && strcmp(s->keys[i], key) != 0)
		i = (i + 1) & (s->cap - 1);
	return i;
}

/* The kind key was last recorded as, or K_NONE. */
static enum kind
name_get(const struct name_set *s, const char *key)
{
	size_t i;

	if (s->cap == 0)
		return K_NONE;
	i = name_slot(s, key);
	return s->keys[i] != NULL ? (enum kind)s->kinds[i] : K_NONE;
}

/* Records key as k (a later entry of one name supersedes the earlier). 0 or -E2BIG. */
static int
name_put(struct name_set *s, const char *key, enum kind k)
{
	size_t i;

	if (s->n + 1 > s->cap / 2) {
		struct name_set g = { 0 };

		g.cap = s->cap ? s->cap * 2 : 1024;
		g.keys = xcalloc(g.cap, sizeof(*g.keys));
		g.kinds = xcalloc(g.cap, sizeof(*g.kinds));
		for (size_t j = 0; j < s->cap; j++)
			if (s->keys[j] != NULL) {
				i = name_slot(&g, s->keys[j]);
				g.keys[i] = s->keys[j];
				g.kinds[i] = s->kinds[j];
			}
		free(s->keys);
		free(s->kinds);
		g.n = s->n;
		g.bytes = s->bytes;
		*s = g;
	}
	i = name_slot(s, key);
	if (s->keys[i] == NULL) {
		s->bytes += strlen(key) + 1;
		if (s->bytes > IMG_PACK_NAMES_MAX)
			return -E2BIG;
		s->keys[i] = xstrdup(key);
		s->n++;
	}
	s->kinds[i] = (unsigned char)k;
	return 0;
}

static void
name_free(struct name_set *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->keys[i]);
	free(s->keys);
	free(s->kinds);
	memset(s, 0, sizeof(*s));
}

/*** Entries ***/

/*
 * Normalises raw (an entry's name or a hard link's target) into out
 * (PATH_MAX bytes) as the unpacker does: leading '/' and empty and "."
 * components dropped, ".." refused, each component at most NAME_MAX, at
 * most IMG_UNPACK_DEPTH_MAX of them. Returns the number of components
 * (0: the root itself) or a negative errno with p->e.
 */
static int
norm_name(struct pack *p, const char *raw, char *out, const char *role)
{
	const char *s = raw, *c;
	size_t len, o = 0;
	int n = 0;

	if (raw == NULL || raw[0] == '\0')
		return fail(p, -EINVAL, NULL, "%s without a name (entry %" PRIu64 ")",
		    role, p->r->entries);
	if (strlen(raw) >= PATH_MAX)
		return fail(p, -ENAMETOOLONG, raw, "%s longer than %d bytes", role,
		    PATH_MAX - 1);
	for (;;) {
		while (*s == '/')
			s++;
		if (*s == '\0')
			break;
		c = s;
		while (*s != '/' && *s != '\0')
			s++;
		len = (size_t)(s - c);
		if (len == 1 && c[0] == '.')
			continue;
		if (len == 2 && c[0] == '.' && c[1] == '.')
			return fail(p, -EINVAL, raw, "'..' in %s is refused", role);
		if (len > NAME_MAX)
			return fail(p, -ENAMETOOLONG, raw, "%s with a component "
			    "longer than %d bytes", role, NAME_MAX);
		if (++n > IMG_UNPACK_DEPTH_MAX)
			return fail(p, -ENAMETOOLONG, raw, "%s deeper than %d "
			    "components", role, IMG_UNPACK_DEPTH_MAX);
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, c, len);
		o += len;
	}
	out[o] = '\0';
	return n;
}

/*
 * Checks that every folder on p->name's way is a folder of this tarball
 * or not in it at all: a symlink or a file there would have the entry
 * written through it (the unpacker refuses that at pull time). Returns 0
 * or -EINVAL with p->e.
 */
static int
check_parents(struct pack *p, const char *raw)
{
	char *slash = p->name;

	while ((slash = strchr(slash, '/')) != NULL) {
		enum kind k;

		*slash = '\0';
		k = name_get(&p->names, p->name);
		*slash = '/';
		if (k == K_FILE || k == K_OTHER)
			return fail(p, -EINVAL, raw, "an entry below a %s of the "
			    "same tarball", k == K_FILE ? "file" : "symlink");
		slash++;
	}
	return 0;
}

/* Copies the current entry's data (size bytes declared) to the layer. */
static int
copy_data(struct pack *p, const char *raw, int64_t size)
{
	char why[128];
	int64_t done = 0;
	la_ssize_t n;

	while ((n = archive_read_data(p->in, p->buf, READ_BLOCK)) > 0) {
		if ((done += n) > size)
			return fail(p, -EBADMSG, raw, "more data than its size");
		if (archive_write_data(p->out, p->buf, (size_t)n) != n)
			return fail(p, p->write_errno ? -p->write_errno : -EIO, NULL,
			    "writing the layer: %s", archive_why(p->out, why, sizeof(why)));
	}
	if (n < 0)
		return fail(p, -EBADMSG, raw, "reading its data: %s",
		    archive_why(p->in, why, sizeof(why)));
	if (done != size)
		return fail(p, -EBADMSG, raw, "%" PRId64 " bytes of data where %"
		    PRId64 " were declared", done, size);
	return 0;
}

/*
 * Checks the current entry ie (its raw name raw) and writes what a layer
 * keeps of it. Returns 0 (written, or dropped and counted) or a negative
 * errno with p->e.
 */
static int
pack_entry(struct pack *p, struct archive_entry *ie, const char *raw)
{
	const char *hard = archive_entry_hardlink(ie), *leaf;
	mode_t type = archive_entry_filetype(ie);
	struct archive_entry *oe;
	enum kind k, was;
	int64_t size = 0;
	char why[128];
	int n, rc;

	if ((n = norm_name(p, raw, p->name, "an entry")) < 0)
		return n;
	if (n == 0) {
		/* The root itself: its folder is the image's, not the tarball's. */
		if (hard == NULL && type == AE_IFDIR)
			return 0;
		return fail(p, -EINVAL, raw, "the root as a non-folder");
	}
	leaf = strrchr(p->name, '/');
	leaf = leaf != NULL ? leaf + 1 : p->name;
	if (strncmp(leaf, WH_PREFIX, strlen(WH_PREFIX)) == 0)
		return fail(p, -EINVAL, raw, "a '.wh.' name (an OCI whiteout) "
		    "in a root filesystem");
	if ((rc = check_parents(p, raw)) < 0)
		return rc;
	if (hard != NULL) {
		if ((rc = norm_name(p, hard, p->link, "a hard link's target")) < 0)
			return rc;
		if (rc == 0 || name_get(&p->names, p->link) != K_FILE)
			return fail(p, -EINVAL, raw, "a hard link to what is not an "
			    "earlier file of the tarball");
		k = K_FILE;
	} else if (type == AE_IFREG) {
		k = K_FILE;
		size = archive_entry_size(ie);
		if (size < 0)
			return fail(p, -EBADMSG, raw, "a negative size");
		if ((p->r->bytes += (uint64_t)size) > p->max_bytes)
			return fail(p, -EFBIG, raw, "past %" PRIu64 " bytes of files",
			    p->max_bytes);
	} else if (type == AE_IFDIR) {
		k = K_DIR;
	} else if (type == AE_IFLNK) {
		k = K_OTHER;
		if (archive_entry_symlink(ie) == NULL ||
		    strlen(archive_entry_symlink(ie)) >= PATH_MAX)
			return fail(p, -EINVAL, raw, "a symlink without a usable target");
	} else {
		/* Devices, FIFOs, sockets: a sandbox gets its own /dev. */
		p->r->dropped++;
		return 0;
	}
	was = name_get(&p->names, p->name);
	if (was == K_DIR && k != K_DIR)
		return fail(p, -EINVAL, raw, "a non-folder over a folder of the "
		    "same tarball");
	if (name_put(&p->names, p->name, k) < 0)
		return fail(p, -E2BIG, NULL, "past %" PRIu64 " bytes of names",
		    (uint64_t)IMG_PACK_NAMES_MAX);

	oe = archive_entry_new();
	archive_entry_copy_pathname(oe, p->name);
	if (hard != NULL) {
		archive_entry_set_filetype(oe, AE_IFREG);
		archive_entry_copy_hardlink(oe, p->link);
	} else {
		archive_entry_set_filetype(oe, (unsigned)type);
	}
	archive_entry_set_perm(oe, archive_entry_perm(ie) & 07777);
	archive_entry_set_uid(oe, archive_entry_uid(ie));
	archive_entry_set_gid(oe, archive_entry_gid(ie));
	archive_entry_set_mtime(oe, archive_entry_mtime(ie), 0);
	archive_entry_set_size(oe, size);
	if (hard == NULL && type == AE_IFLNK)
		archive_entry_copy_symlink(oe, archive_entry_symlink(ie));
	rc = archive_write_header(p->out, oe);
	archive_entry_free(oe);
	/* ARCHIVE_WARN: a name not in the locale's charset, kept as bytes. */
	if (rc < ARCHIVE_WARN)
		return fail(p, p->write_errno ? -p->write_errno : -EIO, raw,
		    "writing the layer: %s", archive_why(p->out, why, sizeof(why)));
	if (size > 0)
		return copy_data(p, raw, size);
	return 0;
}

/* Reads every entry of the tarball into the layer. 0 or a negative errno with p->e. */
static int
pack_entries(struct pack *p)
{
	struct archive_entry *ie;
	char why[128];
	int rc;

	for (;;) {
		const char *raw;

		rc = archive_read_next_header(p->in, &ie);
		if (rc == ARCHIVE_EOF)
			break;
		if (rc < ARCHIVE_WARN) {
			archive_why(p->in, why, sizeof(why));
			if (p->r->entries == 0)
				return fail(p, -EBADMSG, NULL, "not a tar archive (%s)", why);
			return fail(p, -EBADMSG, p->last, "truncated or corrupt after "
			    "the entry (%s)", why);
		}
		if (++p->r->entries > p->max_entries)
			return fail(p, -E2BIG, NULL, "more than %" PRIu64 " entries",
			    p->max_entries);
		raw = archive_entry_pathname(ie);
		if ((rc = pack_entry(p, ie, raw)) < 0)
			return rc;
		snprintf(p->last, sizeof(p->last), "%s", raw);
	}
	if (p->r->entries == 0)
		return fail(p, -EBADMSG, NULL, "no entries (an empty file or archive)");
	return 0;
}

/*** Blobs and documents ***/

/* The layer writer's sink: hashes and writes the compressed bytes. */
static la_ssize_t
layer_write(struct archive *a, void *arg, const void *buf, size_t len)
{
	struct pack *p = arg;
	size_t off = 0;

	EVP_DigestUpdate(p->md, buf, len);
	while (off < len) {
		ssize_t n = write(p->tmp, (const char *)buf + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			p->write_errno = errno;
			archive_set_error(a, errno, "%s", strerror(errno));
			return -1;
		}
		off += (size_t)n;
	}
	p->r->layer_size += len;
	return (la_ssize_t)len;
}

/* "sha256:" and the hex of the 32 bytes of md into out. */
static void
digest_str(const unsigned char *md, char *out)
{
	int o = snprintf(out, OCI_DIGEST_MAX + 1, "sha256:");

	for (int i = 0; i < 32; i++)
		o += snprintf(out + o, (size_t)(OCI_DIGEST_MAX + 1 - o), "%02x", md[i]);
}

/* Renames the finished BLOB_TMP to its digest's name. 0 or -errno with p->e. */
static int
blob_commit(struct pack *p, const char *digest)
{
	if (fsync(p->tmp) != 0 || close(p->tmp) != 0) {
		p->tmp = -1;
		return fail(p, -errno, NULL, "writing a blob: %s", strerror(errno));
	}
	p->tmp = -1;
	if (renameat(p->blobs, BLOB_TMP, p->blobs, digest + 7) != 0)
		return fail(p, -errno, NULL, "naming a blob: %s", strerror(errno));
	return 0;
}

/* Opens a new BLOB_TMP in p->tmp. 0 or -errno with p->e. */
static int
blob_open(struct pack *p)
{
	p->tmp = openat(p->blobs, BLOB_TMP, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
	    O_NOFOLLOW, 0644);
	if (p->tmp < 0)
		return fail(p, -errno, NULL, "making a blob: %s", strerror(errno));
	return 0;
}

/* Writes buf (len bytes) as a blob named by its digest (into digest). */
static int
blob_write(struct pack *p, const char *buf, size_t len, char *digest)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	int rc;

	if (EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		return fail(p, -EIO, NULL, "SHA-256 failed");
	digest_str(md, digest);
	if ((rc = blob_open(p)) < 0)
		return rc;
	for (size_t off = 0; off < len; ) {
		ssize_t n = write(p->tmp, buf + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail(p, -errno, NULL, "writing a blob: %s", strerror(errno));
		off += (size_t)n;
	}
	return blob_commit(p, digest);
}

/*
 * The SHA-256 of the layer blob's uncompressed bytes, read back through
 * libarchive's gzip reader, into p->r->diff_id. 0 or -errno with p->e.
 */
static int
layer_diff_id(struct pack *p)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	struct archive *a = archive_read_new();
	struct archive_entry *ae;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned mdlen = 0;
	char why[128];
	la_ssize_t n;
	int fd, rc = 0;

	fd = openat(p->blobs, p->r->layer + 7, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || a == NULL || ctx == NULL ||
	    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		rc = fail(p, fd < 0 ? -errno : -ENOMEM, NULL, "reading the layer "
		    "back: %s", strerror(fd < 0 ? errno : ENOMEM));
		goto out;
	}
	archive_read_support_filter_gzip(a);
	archive_read_support_format_raw(a);
	if (archive_read_open_fd(a, fd, READ_BLOCK) != ARCHIVE_OK ||
	    archive_read_next_header(a, &ae) != ARCHIVE_OK) {
		rc = fail(p, -EIO, NULL, "reading the layer back: %s",
		    archive_why(a, why, sizeof(why)));
		goto out;
	}
	while ((n = archive_read_data(a, p->buf, READ_BLOCK)) > 0)
		EVP_DigestUpdate(ctx, p->buf, (size_t)n);
	if (n < 0) {
		rc = fail(p, -EIO, NULL, "reading the layer back: %s",
		    archive_why(a, why, sizeof(why)));
		goto out;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	digest_str(md, p->r->diff_id);
out:
	archive_read_free(a);
	EVP_MD_CTX_free(ctx);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Writes the layer: every entry of the tarball on p->in. */
static int
write_layer(struct pack *p)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char why[128];
	int rc;

	if ((rc = blob_open(p)) < 0)
		return rc;
	p->md = EVP_MD_CTX_new();
	p->out = archive_write_new();
	if (p->md == NULL || p->out == NULL ||
	    EVP_DigestInit_ex(p->md, EVP_sha256(), NULL) != 1)
		return fail(p, -ENOMEM, NULL, "cannot start the layer");
	/*
	 * No timestamp in the gzip header and no padding after the stream:
	 * the same entries give the same blob, and so the same digest.
	 */
	if (archive_write_add_filter_gzip(p->out) != ARCHIVE_OK ||
	    archive_write_set_filter_option(p->out, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
	    archive_write_set_format_pax_restricted(p->out) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(p->out, 1) != ARCHIVE_OK ||
	    archive_write_open(p->out, p, NULL, layer_write, NULL) != ARCHIVE_OK)
		return fail(p, -EIO, NULL, "cannot start the layer: %s",
		    archive_why(p->out, why, sizeof(why)));
	if ((rc = pack_entries(p)) < 0)
		return rc;
	if (archive_write_close(p->out) != ARCHIVE_OK)
		return fail(p, p->write_errno ? -p->write_errno : -EIO, NULL,
		    "writing the layer: %s", archive_why(p->out, why, sizeof(why)));
	EVP_DigestFinal_ex(p->md, md, &mdlen);
	digest_str(md, p->r->layer);
	if ((rc = blob_commit(p, p->r->layer)) < 0)
		return rc;
	return layer_diff_id(p);
}

/* A descriptor {mediaType, digest, size}. */
static json_t *
desc(const char *mt, const char *digest, uint64_t size)
{
	return json_pack("{s:s, s:s, s:I}", "mediaType", mt, "digest", digest,
	    "size", (json_int_t)size);
}

/* j dumped (keys sorted, compact) as a blob, its digest and size out. Takes j. */
static int
json_blob(struct pack *p, json_t *j, char *digest, uint64_t *size)
{
	char *s;
	int rc;

	if (j == NULL)
		return fail(p, -ENOMEM, NULL, "cannot make a document");
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	if (s == NULL)
		return fail(p, -ENOMEM, NULL, "cannot make a document");
	rc = blob_write(p, s, strlen(s), digest);
	if (size != NULL)
		*size = strlen(s);
	free(s);
	return rc;
}

/* The config and manifest blobs, then index.json and oci-layout. */
static int
write_documents(struct pack *p)
{
	static const char *const path_only[] = { IMG_PACK_PATH_DEFAULT, NULL };
	const char *const *env = p->o->env != NULL ? p->o->env : path_only;
	const char *arch = p->o->arch != NULL ? p->o->arch : oci_host_arch();
	json_t *cfg, *envj = json_array(), *man, *idx, *entry;
	uint64_t cfg_size = 0;
	char *s;
	int rc, fd;

	for (size_t i = 0; env[i] != NULL; i++)
		json_array_append_new(envj, json_string(env[i]));
	cfg = json_pack("{s:s, s:s, s:{s:o}, s:{s:s, s:[s]}}", "architecture", arch,
	    "os", "linux", "config", "Env", envj, "rootfs", "type", "layers",
	    "diff_ids", p->r->diff_id);
	if (cfg != NULL && p->o->created_by != NULL)
		json_object_set_new(cfg, "history", json_pack("[{s:s}]", "created_by",
		    p->o->created_by));
	if ((rc = json_blob(p, cfg, p->r->config, &cfg_size)) < 0)
		return rc;
	man = json_pack("{s:i, s:s, s:o, s:[o]}", "schemaVersion", 2, "mediaType",
	    MT_MANIFEST, "config", desc(MT_CONFIG, p->r->config, cfg_size), "layers",
	    desc(MT_LAYER, p->r->layer, p->r->layer_size));
	if ((rc = json_blob(p, man, p->r->manifest, &p->r->manifest_size)) < 0)
		return rc;

	entry = desc(MT_MANIFEST, p->r->manifest, p->r->manifest_size);
	json_object_set_new(entry, "annotations", json_pack("{s:s}", OCI_REF_NAME,
	    p->o->tag));
	json_object_set_new(entry, "platform", json_pack("{s:s, s:s}", "architecture",
	    arch, "os", "linux"));
	idx = json_pack("{s:i, s:s, s:[o]}", "schemaVersion", 2, "mediaType", MT_INDEX,
	    "manifests", entry);
	s = idx != NULL ? json_dumps(idx, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(idx);
	if (s == NULL)
		return fail(p, -ENOMEM, NULL, "cannot make index.json");
	fd = openat(p->dir, "index.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	rc = fd < 0 ? -errno : write_all(fd, s, strlen(s));
	free(s);
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return fail(p, rc, NULL, "writing index.json: %s", strerror(-rc));
	fd = openat(p->dir, "oci-layout", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	rc = fd < 0 ? -errno : write_all(fd, "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return fail(p, rc, NULL, "writing oci-layout: %s", strerror(-rc));
	return 0;
}

/*** The layout ***/

/* Removes the layout folder this call made: its files and its two folders. */
static void
layout_remove(const char *layout, int dir, int blobs)
{
	DIR *d;
	struct dirent *de;

	if (blobs >= 0 && (d = fdopendir(dup(blobs))) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				unlinkat(blobs, de->d_name, 0);
		closedir(d);
	}
	if (dir >= 0) {
		unlinkat(dir, "blobs/sha256", AT_REMOVEDIR);
		unlinkat(dir, "blobs", AT_REMOVEDIR);
		unlinkat(dir, "index.json", 0);
		unlinkat(dir, "oci-layout", 0);
	}
	rmdir(layout);
}

int
img_pack_rootfs(int fd, const char *what, const char *layout,
    const struct img_pack_opts *o, struct img_pack_result *r, struct err *e)
{
	struct img_pack_result scratch;
	struct pack p = { .what = what, .o = o, .e = e, .dir = -1, .blobs = -1,
	    .tmp = -1 };
	char why[128];
	struct stat sb;
	bool made = false;
	int rc;

	p.r = r != NULL ? r : &scratch;
	p.buf = xmalloc(READ_BLOCK);
	memset(p.r, 0, sizeof(*p.r));
	err_clear(e);
	p.max_bytes = o->max_bytes ? o->max_bytes : IMG_PACK_BYTES_DEFAULT;
	p.max_entries = o->max_entries ? o->max_entries : IMG_PACK_ENTRIES_DEFAULT;
	if (o->tag == NULL || o->tag[0] == '\0') {
		free(p.buf);
		return err_set(e, -EINVAL, "%s: no tag to name the image by", what);
	}
	if (mkdir(layout, 0755) != 0) {
		rc = fail(&p, -errno, layout, "cannot make the image folder: %s",
		    strerror(errno));
		free(p.buf);
		return rc;
	}
	made = true;
	p.dir = open(layout, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (p.dir < 0 || mkdirat(p.dir, "blobs", 0755) != 0 ||
	    mkdirat(p.dir, "blobs/sha256", 0755) != 0 ||
	    (p.blobs = openat(p.dir, "blobs/sha256", O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = fail(&p, -errno, layout, "cannot make the image folder: %s",
		    strerror(errno));
		goto out;
	}
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
	    sb.st_size <= lseek(fd, 0, SEEK_CUR)) {
		rc = fail(&p, -EBADMSG, NULL, "an empty file");
		goto out;
	}
	if ((p.in = archive_read_new()) == NULL) {
		rc = fail(&p, -ENOMEM, NULL, "out of memory");
		goto out;
	}
	/* In-library filters only: never an external program on these bytes. */
	archive_read_support_format_tar(p.in);
	archive_read_support_filter_gzip(p.in);
	archive_read_support_filter_zstd(p.in);
	archive_read_support_filter_xz(p.in);
	archive_read_support_filter_bzip2(p.in);
	if (archive_read_open_fd(p.in, fd, READ_BLOCK) != ARCHIVE_OK) {
		rc = fail(&p, -EBADMSG, NULL, "not a tar archive (%s)",
		    archive_why(p.in, why, sizeof(why)));
		goto out;
	}
	if ((rc = write_layer(&p)) < 0 || (rc = write_documents(&p)) < 0)
		goto out;
	rc = 0;
out:
	/* The writer first: freeing it may flush into the blob once more. */
	if (p.out != NULL)
		archive_write_free(p.out);
	if (p.in != NULL)
		archive_read_free(p.in);
	if (p.tmp >= 0)
		close(p.tmp);
	if (rc < 0 && made)
		layout_remove(layout, p.dir, p.blobs);
	EVP_MD_CTX_free(p.md);
	name_free(&p.names);
	free(p.buf);
	if (p.blobs >= 0)
		close(p.blobs);
	if (p.dir >= 0)
		close(p.dir);
	return rc;
}
