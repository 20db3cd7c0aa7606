/*
 * imgbuild.c - tiny OCI images for the image tests (see imgbuild.h).
 *
 * Everything is deterministic (fixed times, owners and filler bytes), so
 * the same image written twice has the same digests, and two images that
 * share a layer's entries share its blob.
 *
 * Entries are written as given: nothing here checks a name, a link's
 * target or a mode, since the hostile-layer tests need exactly what a
 * layer may carry.
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "imgbuild.h"

#define LAYER_MAX (64u << 20)	/* a test layer, compressed */

static void
sha256_hex(const void *buf, size_t len, char out[72])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	cr_assert(EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL) == 1 && n == 32);
	memcpy(out, "sha256:", 7);
	for (unsigned int i = 0; i < n; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static void
mkdirs(const char *dir)
{
	char p[512];

	snprintf(p, sizeof(p), "%s", dir);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	cr_assert(mkdir(p, 0755) == 0 || errno == EEXIST, "mkdir %s", p);
}

static void
write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f != NULL, "open %s: %s", path, strerror(errno));
	cr_assert(len == 0 || fwrite(buf, 1, len, f) == len);
	cr_assert(fclose(f) == 0);
}

/* Stores buf as a blob of the layout dir; its digest into digest. */
static void
blob_put(const char *dir, const void *buf, size_t len, char digest[72])
{
	char path[600];

	sha256_hex(buf, len, digest);
	snprintf(path, sizeof(path), "%s/blobs/sha256", dir);
	mkdirs(path);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, digest + 7);
	write_file(path, buf, len);
}

/* Incompressible, repeatable filler: xorshift seeded by the length. */
static char *
filler(size_t len)
{
	char *b = malloc(len ? len : 1);
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ len;

	cr_assert(b != NULL);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (char)(x >> 24);
	}
	return b;
}

/* Adds data ("NAME=VALUE") as an extended attribute of ae. */
static void
xattr_add(struct archive_entry *ae, const char *data)
{
	const char *eq = data != NULL ? strchr(data, '=') : NULL;
	char name[128];

	cr_assert(eq != NULL && (size_t)(eq - data) < sizeof(name), "xattr '%s'", data);
	memcpy(name, data, (size_t)(eq - data));
	name[eq - data] = '\0';
	archive_entry_xattr_add_entry(ae, name, eq + 1, strlen(eq + 1));
}

/* Writes the entry e (imgbuild.h says what each type means) into a. */
static void
entry_write(struct archive *a, const struct imgb_entry *e)
{
	struct archive_entry *ae = archive_entry_new();
	char *fill = NULL;
	const char *d = NULL;
	size_t len = 0;

	archive_entry_set_pathname(ae, e->path);
	archive_entry_set_mtime(ae, 1700000000, 0);
	archive_entry_set_uid(ae, 0);
	archive_entry_set_gid(ae, 0);
	switch (e->type) {
	case 'd':
		archive_entry_set_filetype(ae, AE_IFDIR);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0755);
		if (e->data != NULL)
			xattr_add(ae, e->data);
		break;
	case 'l':
		archive_entry_set_filetype(ae, AE_IFLNK);
		archive_entry_set_perm(ae, 0777);
		archive_entry_set_symlink(ae, e->data);
		break;
	case 'h':
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
		archive_entry_set_hardlink(ae, e->data);
		archive_entry_set_size(ae, 0);
		break;
	case 'c':
	case 'b':
		archive_entry_set_filetype(ae, e->type == 'c' ? AE_IFCHR : AE_IFBLK);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
		archive_entry_set_rdev(ae, (dev_t)e->len);
		break;
	case 'p':
		archive_entry_set_filetype(ae, AE_IFIFO);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
		break;
	case 'x':
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
		archive_entry_set_size(ae, 0);
		xattr_add(ae, e->data);
		break;
	case 'z':
	case 'f':
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
		archive_entry_set_size(ae, (la_int64_t)e->len);
		len = e->len;
		if (e->type == 'z')
			d = fill = calloc(1, len ? len : 1);
		else
			d = e->data != NULL ? e->data : (fill = filler(len));
		cr_assert(d != NULL);
		break;
	default:
		cr_assert_fail("imgbuild: entry type '%c'", e->type);
	}
	cr_assert(archive_write_header(a, ae) == ARCHIVE_OK, "%s", archive_error_string(a));
	if (len > 0)
		cr_assert(archive_write_data(a, d, len) == (la_ssize_t)len);
	free(fill);
	archive_entry_free(ae);
}

/* The layer's tar stream, compressed, into *out (owned) and *len; its diff_id too. */
static void
layer_build(const struct imgb_entry *ents, enum imgb_compress z, char **out, size_t *len,
    char diff_id[72])
{
	struct archive *a;
	size_t used = 0, tused = 0;
	char *buf = malloc(LAYER_MAX), *tar = malloc(LAYER_MAX);

	cr_assert(buf != NULL && tar != NULL);
	/* Twice: once plain for the diff_id, once as stored. */
	for (int pass = 0; pass < 2; pass++) {
		a = archive_write_new();
		archive_write_set_format_pax_restricted(a);
		/* No time in the gzip header: the same layer, the same blob, always. */
		if (pass == 1 && z == IMGB_GZIP)
			cr_assert(archive_write_add_filter_gzip(a) == ARCHIVE_OK &&
			    archive_write_set_filter_option(a, "gzip", "timestamp", NULL) ==
			    ARCHIVE_OK);
		else if (pass == 1 && z == IMGB_ZSTD)
			cr_assert(archive_write_add_filter_zstd(a) == ARCHIVE_OK);
		archive_write_set_bytes_in_last_block(a, 1);
		cr_assert(archive_write_open_memory(a, pass ? buf : tar, LAYER_MAX,
		    pass ? &used : &tused) == ARCHIVE_OK);
		for (const struct imgb_entry *e = ents; e->path != NULL; e++)
			entry_write(a, e);
		cr_assert(archive_write_close(a) == ARCHIVE_OK, "%s", archive_error_string(a));
		archive_write_free(a);
		if (z == IMGB_NONE)
			break;
	}
	sha256_hex(tar, tused, diff_id);
	if (z == IMGB_NONE) {
		free(buf);
		*out = tar;
		*len = tused;
		return;
	}
	free(tar);
	*out = buf;
	*len = used;
}

/* Adds (or replaces) the entry tag of index.json in dir. */
static void
index_name(const char *dir, const char *tag, const struct imgb_desc *d)
{
	char path[600];
	json_t *idx, *ms, *m;
	size_t i = 0;

	snprintf(path, sizeof(path), "%s/oci-layout", dir);
	write_file(path, "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
	snprintf(path, sizeof(path), "%s/index.json", dir);
	if ((idx = json_load_file(path, 0, NULL)) == NULL)
		idx = json_pack("{s:i, s:[]}", "schemaVersion", 2, "manifests");
	ms = json_object_get(idx, "manifests");
	while ((m = json_array_get(ms, i)) != NULL) {
		const char *n = json_string_value(json_object_get(json_object_get(m,
		    "annotations"), "org.opencontainers.image.ref.name"));

		if (n != NULL && strcmp(n, tag) == 0)
			json_array_remove(ms, i);
		else
			i++;
	}
	json_array_append_new(ms, json_pack("{s:s, s:s, s:I, s:{s:s}}", "mediaType",
	    d->media_type, "digest", d->digest, "size", (json_int_t)d->size, "annotations",
	    "org.opencontainers.image.ref.name", tag));
	cr_assert(json_dump_file(idx, path, JSON_COMPACT) == 0);
	json_decref(idx);
}

void
imgb_write(const char *dir, const char *tag, const struct imgb_image *img,
    struct imgb_desc *out)
{
	static const char *const types[] = { "application/vnd.oci.image.layer.v1.tar+gzip",
	    "application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.v1.tar" };
	json_t *layers = json_array(), *diffs = json_array(), *env = json_array(), *cfg, *man;
	char digest[72], diff[72], *s;
	size_t n;

	mkdirs(dir);
	memset(out, 0, sizeof(*out));
	snprintf(out->os, sizeof(out->os), "%s", img->os ? img->os : "linux");
	snprintf(out->arch, sizeof(out->arch), "%s", img->arch ? img->arch : "amd64");
	for (size_t i = 0; i < 8 && img->layers[i] != NULL; i++) {
		char *blob;

		layer_build(img->layers[i], img->compress, &blob, &n, diff);
		if (img->truncate == i + 1)
			n /= 2;
		blob_put(dir, blob, n, digest);
		free(blob);
		json_array_append_new(layers, json_pack("{s:s, s:s, s:I}", "mediaType",
		    types[img->compress], "digest", digest, "size", (json_int_t)n));
		json_array_append_new(diffs, json_string(diff));
		memcpy(out->layers[i], digest, sizeof(digest));
		out->nlayers = i + 1;
	}
	for (size_t i = 0; img->env != NULL && img->env[i] != NULL; i++)
		json_array_append_new(env, json_string(img->env[i]));
	cfg = json_pack("{s:s, s:s, s:s, s:{s:o, s:s?, s:s?, s:[s]}, s:{s:s, s:o}}",
	    "created", "2023-11-14T22:13:20Z", "architecture", out->arch, "os", out->os,
	    "config", "Env", env, "WorkingDir", img->workdir, "User", img->user, "Cmd", "/bin/sh",
	    "rootfs", "type", "layers", "diff_ids", diffs);
	cr_assert(cfg != NULL);
	s = json_dumps(cfg, JSON_COMPACT);
	blob_put(dir, s, strlen(s), out->config);
	man = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2,
	    "mediaType", "application/vnd.oci.image.manifest.v1+json", "config",
	    "mediaType", "application/vnd.oci.image.config.v1+json", "digest", out->config,
	    "size", (json_int_t)strlen(s), "layers", layers);
	free(s);
	json_decref(cfg);
	s = json_dumps(man, JSON_COMPACT);
	json_decref(man);
	blob_put(dir, s, strlen(s), out->digest);
	out->size = strlen(s);
	free(s);
	snprintf(out->media_type, sizeof(out->media_type), "%s",
	    "application/vnd.oci.image.manifest.v1+json");
	if (tag != NULL)
		index_name(dir, tag, out);
}

void
imgb_write_index(const char *dir, const char *tag, const struct imgb_desc *m, size_t n,
    struct imgb_desc *out)
{
	json_t *ms = json_array(), *idx;
	char *s;

	for (size_t i = 0; i < n; i++)
		json_array_append_new(ms, json_pack("{s:s, s:s, s:I, s:{s:s, s:s}}",
		    "mediaType", m[i].media_type, "digest", m[i].digest, "size",
		    (json_int_t)m[i].size, "platform", "architecture", m[i].arch, "os", m[i].os));
	idx = json_pack("{s:i, s:s, s:o}", "schemaVersion", 2, "mediaType",
	    "application/vnd.oci.image.index.v1+json", "manifests", ms);
	s = json_dumps(idx, JSON_COMPACT);
	json_decref(idx);
	memset(out, 0, sizeof(*out));
	blob_put(dir, s, strlen(s), out->digest);
	out->size = strlen(s);
	free(s);
	snprintf(out->media_type, sizeof(out->media_type), "%s",
	    "application/vnd.oci.image.index.v1+json");
	index_name(dir, tag, out);
}

void
imgb_tamper(const char *path)
{
	struct stat st;
	unsigned char c;
	int fd = open(path, O_RDWR | O_CLOEXEC);

	cr_assert(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0, "tamper %s: %s", path,
	    strerror(errno));
	cr_assert(pread(fd, &c, 1, st.st_size / 2) == 1);
	c ^= 0xff;
	cr_assert(pwrite(fd, &c, 1, st.st_size / 2) == 1);
	cr_assert(close(fd) == 0);
}

void
imgb_busybox(struct imgb_entry *e)
{
	static char *data;
	static size_t len;

	if (data == NULL) {
		struct stat st;
		int fd = open("/bin/busybox", O_RDONLY | O_CLOEXEC);

		if (fd < 0 || fstat(fd, &st) < 0) {
			fprintf(stderr, "/bin/busybox (Debian's busybox-static, "
			    "deploy/install-deps.sh) is missing: %s\n", strerror(errno));
			cr_assert_fail("no /bin/busybox");
		}
		cr_assert((data = malloc((size_t)st.st_size)) != NULL);
		cr_assert(read(fd, data, (size_t)st.st_size) == st.st_size);
		len = (size_t)st.st_size;
		close(fd);
	}
	e->data = data;
	e->len = len;
}
