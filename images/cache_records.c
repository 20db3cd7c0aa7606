/*
 * cache_records.c - the image cache on disk: paths, locks, whole-or-
 * nothing writes, and the three kinds of small JSON files the cache keeps
 * (image records, references, layer metadata), with the public calls that
 * only read them (lookup, get, touch, list). The leaf of images/cache*.c:
 * it calls none of the others.
 *
 * Everything read back is bounded and checked as if a stranger wrote it:
 * a digest from a record becomes a path (layers/sha256/HEX), so a record
 * naming "sha256:../../x" must fail to decode, not reach unlink().
 *
 * A record's last use is its file's mtime, not a field: img_cache_touch()
 * is one utimensat(), which no concurrent touch or pull can lose, where a
 * field would need a read-modify-write under a lock on every job start.
 *
 * Sections: Paths and files, Records, References and layers, Public reads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/xmalloc.h"
#include "cache_int.h"

/*** Paths and files ***/

int
cache__path(const struct img_cache *c, char *buf, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(buf, PATH_MAX, "%s/", c->root), m;

	va_start(ap, fmt);
	m = vsnprintf(buf + n, (size_t)(PATH_MAX - n), fmt, ap);
	va_end(ap);
	return m < 0 || m >= PATH_MAX - n ? -ENAMETOOLONG : 0;
}

const char *
cache__hex(const char *digest)
{
	return digest + 7;	/* after "sha256:" */
}

int
cache__lock(const struct img_cache *c, const char *name, int op, bool *waited,
    struct err *e)
{
	char path[PATH_MAX];
	int fd;

	if (waited != NULL)
		*waited = false;
	if (cache__path(c, path, "locks/%s", name) < 0)
		return err_set(e, -ENAMETOOLONG, "lock %s: path too long", name);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return err_set(e, -errno, "lock %s: %s", path, strerror(errno));
	if (flock(fd, op | LOCK_NB) == 0)
		return fd;
	if (errno == EWOULDBLOCK) {
		if (waited != NULL)
			*waited = true;
		while (flock(fd, op) < 0)
			if (errno != EINTR) {
				int rc = -errno;

				close(fd);
				return err_set(e, rc, "lock %s: %s", path, strerror(-rc));
			}
		return fd;
	}
	{
		int rc = -errno;

		close(fd);
		return err_set(e, rc, "lock %s: %s", path, strerror(-rc));
	}
}

int
cache__read_file(const char *path, size_t max, char **buf, size_t *len, struct err *e)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = 0;
	size_t got = 0;

	*buf = NULL;
	*len = 0;
	if (fd < 0)
		return err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = err_set(e, -EINVAL, "%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > max) {
		rc = err_set(e, -EFBIG, "%s: larger than %zu bytes", path, max);
		goto out;
	}
	*buf = xmalloc((size_t)st.st_size + 1);
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, *buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = err_set(e, n < 0 ? -errno : -EIO, "%s: short read", path);
			goto out;
		}
		got += (size_t)n;
	}
	(*buf)[got] = '\0';
	*len = got;
out:
	close(fd);
	if (rc < 0) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

int
cache__write_atomic(const char *path, const void *buf, size_t len, struct err *e)
{
	char tmp[PATH_MAX];
	int fd, rc = 0;
	const char *p = buf;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= (int)sizeof(tmp))
		return err_set(e, -ENAMETOOLONG, "%s: path too long", path);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		return err_set(e, -errno, "%s: %s", tmp, strerror(errno));
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = -errno;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	/* Durable before it is visible: a crash leaves the old file or the new. */
	if (rc == 0 && (fchmod(fd, 0644) < 0 || fsync(fd) < 0))
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return err_set(e, rc, "%s: %s", path, strerror(-rc));
	}
	return 0;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	/* A folder the unpacking uid left without write permission. */
	if (flag == FTW_DP || flag == FTW_DNR) {
		chmod(path, 0700);
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	}
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int
cache__rmtree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	/* Searchable first, so the walk can read what is below. */
	chmod(path, 0700);
	return nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 ? -errno : 0;
}

static uint64_t tree_sum;

static int
tree_add(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (flag == FTW_F && S_ISREG(st->st_mode))
		tree_sum += (uint64_t)st->st_size;
	return 0;
}

uint64_t
cache__tree_bytes(const char *path)
{
	/* nftw takes no argument: one walk at a time, as a handle is one thread's. */
	tree_sum = 0;
	nftw(path, tree_add, 32, FTW_PHYS | FTW_MOUNT);
	return tree_sum;
}

/*** Records ***/

void
img_record_free(struct img_record *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->nenv; i++)
		free(r->env[i]);
	for (size_t i = 0; i < r->nentrypoint; i++)
		free(r->entrypoint[i]);
	for (size_t i = 0; i < r->ncmd; i++)
		free(r->cmd[i]);
	free(r->env);
	free(r->entrypoint);
	free(r->cmd);
	free(r->working_dir);
	free(r->user);
	free(r->reference);
	free(r->layers);
	free(r);
}

void
img_records_free(struct img_record **v, size_t n)
{
	for (size_t i = 0; v != NULL && i < n; i++)
		img_record_free(v[i]);
	free(v);
}

static json_t *
strings_json(char *const *v, size_t n)
{
	json_t *a;

	if (v == NULL)
		return json_null();
	a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

char *
cache__record_encode(const struct img_record *r)
{
	json_t *j = json_object(), *layers = json_array();
	char *s;

	for (size_t i = 0; i < r->nlayers; i++)
		json_array_append_new(layers, json_pack("{s:s, s:s, s:s, s:I, s:I}",
		    "digest", r->layers[i].digest, "diff_id", r->layers[i].diff_id,
		    "media_type", r->layers[i].media_type,
		    "size", (json_int_t)r->layers[i].size,
		    "unpacked", (json_int_t)r->layers[i].unpacked));
	json_object_set_new(j, "version", json_integer(1));
	json_object_set_new(j, "reference", json_string(r->reference));
	json_object_set_new(j, "manifest", json_string(r->manifest));
	json_object_set_new(j, "top", json_string(r->top));
	json_object_set_new(j, "config", json_string(r->config));
	json_object_set_new(j, "os", json_string(r->os));
	json_object_set_new(j, "architecture", json_string(r->arch));
	json_object_set_new(j, "layers", layers);
	json_object_set_new(j, "env", strings_json(r->env, r->nenv));
	json_object_set_new(j, "working_dir",
	    r->working_dir ? json_string(r->working_dir) : json_null());
	json_object_set_new(j, "user", r->user ? json_string(r->user) : json_null());
	json_object_set_new(j, "entrypoint", strings_json(r->entrypoint, r->nentrypoint));
	json_object_set_new(j, "cmd", strings_json(r->cmd, r->ncmd));
	json_object_set_new(j, "unpacked_bytes", json_integer((json_int_t)r->unpacked_bytes));
	json_object_set_new(j, "blob_bytes", json_integer((json_int_t)r->blob_bytes));
	json_object_set_new(j, "pulled_ms", json_integer((json_int_t)r->pulled_ms));
	s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_decref(j);
	if (s == NULL)
		abort();	/* jansson fails to dump only when out of memory */
	return s;
}

/* A digest field of j into out; false if absent or malformed. */
static bool
digest_get(const json_t *j, const char *key, char out[OCI_DIGEST_MAX + 1])
{
	const char *s = json_string_value(json_object_get(j, key));

	if (!oci_digest_ok(s))
		return false;
	memcpy(out, s, OCI_DIGEST_MAX + 1);
	return true;
}

/* A non-negative integer field of j; false if absent or negative. */
static bool
u64_get(const json_t *j, const char *key, uint64_t *out)
{
	const json_t *v = json_object_get(j, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* A short string field into out (size bytes); false if absent or too long. */
static bool
str_get(const json_t *j, const char *key, char *out, size_t size)
{
	const json_t *v = json_object_get(j, key);

	if (!json_is_string(v) || json_string_length(v) >= size)
		return false;
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return true;
}

/* An array of strings or null into *v, *n; false if anything else. */
static bool
strings_get(const json_t *j, const char *key, char ***v, size_t *n)
{
	const json_t *a = json_object_get(j, key), *s;
	size_t i;

	if (json_is_null(a))
		return true;
	if (!json_is_array(a) || json_array_size(a) > OCI_STRINGS_MAX)
		return false;
	*v = xcalloc(json_array_size(a) + 1, sizeof(**v));
	json_array_foreach(a, i, s) {
		if (!json_is_string(s))
			return false;
		(*v)[i] = xmemdup0(json_string_value(s), json_string_length(s));
		*n = i + 1;
	}
	return true;
}

/* A string or null into *out; false if anything else. */
static bool
opt_str_get(const json_t *j, const char *key, char **out)
{
	const json_t *v = json_object_get(j, key);

	if (json_is_null(v))
		return true;
	if (!json_is_string(v))
		return false;
	*out = xmemdup0(json_string_value(v), json_string_length(v));
	return true;
}

int
cache__record_decode(const char *buf, size_t len, struct img_record **out,
    struct err *e)
{
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	const json_t *layers = json_object_get(j, "layers"), *l;
	const json_t *ref = json_object_get(j, "reference");
	struct img_record *r = xcalloc(1, sizeof(*r));
	size_t i;
	bool ok;

	*out = NULL;
	ok = json_is_object(j) && json_is_string(ref) &&
	    json_string_length(ref) <= IMG_REF_MAX &&
	    digest_get(j, "manifest", r->manifest) && digest_get(j, "top", r->top) &&
	    digest_get(j, "config", r->config) && str_get(j, "os", r->os, sizeof(r->os)) &&
	    str_get(j, "architecture", r->arch, sizeof(r->arch)) &&
	    u64_get(j, "unpacked_bytes", &r->unpacked_bytes) &&
	    u64_get(j, "blob_bytes", &r->blob_bytes) && u64_get(j, "pulled_ms", &r->pulled_ms) &&
	    strings_get(j, "env", &r->env, &r->nenv) &&
	    strings_get(j, "entrypoint", &r->entrypoint, &r->nentrypoint) &&
	    strings_get(j, "cmd", &r->cmd, &r->ncmd) &&
	    opt_str_get(j, "working_dir", &r->working_dir) &&
	    opt_str_get(j, "user", &r->user) && json_is_array(layers) &&
	    json_array_size(layers) >= 1 && json_array_size(layers) <= OCI_LAYERS_MAX;
	if (ok) {
		r->reference = xmemdup0(json_string_value(ref), json_string_length(ref));
		r->layers = xcalloc(json_array_size(layers), sizeof(*r->layers));
		json_array_foreach(layers, i, l) {
			struct img_layer *y = &r->layers[i];

			if (!digest_get(l, "digest", y->digest) ||
			    !digest_get(l, "diff_id", y->diff_id) ||
			    !str_get(l, "media_type", y->media_type, sizeof(y->media_type)) ||
			    !u64_get(l, "size", &y->size) || !u64_get(l, "unpacked", &y->unpacked)) {
				ok = false;
				break;
			}
			r->nlayers = i + 1;
		}
	}
	json_decref(j);
	if (!ok) {
		img_record_free(r);
		return err_set(e, -EBADMSG, "image record: malformed");
	}
	*out = r;
	return 0;
}

int
cache__record_read(const struct img_cache *c, const char *digest,
    struct img_record **out, struct err *e)
{
	char path[PATH_MAX], *buf;
	struct stat st;
	size_t len;
	int rc;

	*out = NULL;
	if (!oci_digest_ok(digest))
		return err_set(e, -EINVAL, "not a sha256 digest");
	if (cache__path(c, path, "images/sha256/%s.json", cache__hex(digest)) < 0)
		return err_set(e, -ENAMETOOLONG, "record path too long");
	if ((rc = cache__read_file(path, CACHE_RECORD_MAX, &buf, &len, e)) < 0)
		return rc;
	rc = cache__record_decode(buf, len, out, e);
	free(buf);
	if (rc < 0)
		return err_set(e, rc, "image record %s: malformed", path);
	/* A record that names another manifest than its file's is not this one. */
	if (strcmp((*out)->manifest, digest) != 0) {
		img_record_free(*out);
		*out = NULL;
		return err_set(e, -EBADMSG, "image record %s: names another manifest", path);
	}
	if (stat(path, &st) == 0)
		(*out)->last_use_ms = (uint64_t)st.st_mtim.tv_sec * 1000 +
		    (uint64_t)st.st_mtim.tv_nsec / 1000000;
	return 0;
}

int
cache__record_write(const struct img_cache *c, const struct img_record *r,
    struct err *e)
{
	char path[PATH_MAX], *s;
	int rc;

	if (cache__path(c, path, "images/sha256/%s.json", cache__hex(r->manifest)) < 0)
		return err_set(e, -ENAMETOOLONG, "record path too long");
	s = cache__record_encode(r);
	rc = cache__write_atomic(path, s, strlen(s), e);
	free(s);
	return rc;
}

/*** References and layers ***/

void
cache__ref_name(const char *ref, char name[CACHE_REF_NAME_MAX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(ref, strlen(ref), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		abort();	/* SHA-256 of memory cannot fail but for OOM */
	name[0] = 'r';
	for (unsigned int i = 0; i < 32; i++)
		snprintf(name + 1 + 2 * i, 3, "%02x", md[i]);
}

/* Reads a small JSON object file of the cache into *out. 0, -ENOENT, -EBADMSG, ... */
static int
meta_load(const char *path, json_t **out, struct err *e)
{
	char *buf;
	size_t len;
	int rc;

	*out = NULL;
	if ((rc = cache__read_file(path, CACHE_META_MAX, &buf, &len, e)) < 0)
		return rc;
	*out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
	free(buf);
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return err_set(e, -EBADMSG, "%s: malformed", path);
	}
	return 0;
}

int
cache__ref_read(const struct img_cache *c, const char *name,
    char digest[OCI_DIGEST_MAX + 1], struct err *e)
{
	char path[PATH_MAX];
	json_t *j;
	bool ok;
	int rc;

	if (cache__path(c, path, "refs/%s.json", name) < 0)
		return err_set(e, -ENAMETOOLONG, "reference path too long");
	if ((rc = meta_load(path, &j, e)) < 0)
		return rc;
	ok = digest_get(j, "manifest", digest);
	json_decref(j);
	return ok ? 0 : err_set(e, -EBADMSG, "%s: malformed", path);
}

int
cache__ref_write(const struct img_cache *c, const char *name, const char *ref,
    const char *digest, struct err *e)
{
	char path[PATH_MAX], *s;
	json_t *j;
	int rc;

	if (cache__path(c, path, "refs/%s.json", name) < 0)
		return err_set(e, -ENAMETOOLONG, "reference path too long");
	j = json_pack("{s:s, s:s}", "reference", ref, "manifest", digest);
	s = json_dumps(j, JSON_SORT_KEYS);
	json_decref(j);
	rc = cache__write_atomic(path, s, strlen(s), e);
	free(s);
	return rc;
}

int
cache__layer_meta_read(const struct img_cache *c, const char *digest,
    struct cache_layer_meta *m, struct err *e)
{
	char path[PATH_MAX];
	json_t *j;
	bool ok;
	int rc;

	if (cache__path(c, path, "layers/sha256/%s.json", cache__hex(digest)) < 0)
		return err_set(e, -ENAMETOOLONG, "layer path too long");
	if ((rc = meta_load(path, &j, e)) < 0)
		return rc;
	ok = digest_get(j, "digest", m->digest) && strcmp(m->digest, digest) == 0 &&
	    digest_get(j, "diff_id", m->diff_id) && u64_get(j, "size", &m->size) &&
	    u64_get(j, "unpacked", &m->unpacked);
	json_decref(j);
	return ok ? 0 : err_set(e, -EBADMSG, "%s: malformed", path);
}

int
cache__layer_meta_write(const struct img_cache *c, const struct cache_layer_meta *m,
    struct err *e)
{
	char path[PATH_MAX], *s;
	json_t *j;
	int rc;

	if (cache__path(c, path, "layers/sha256/%s.json", cache__hex(m->digest)) < 0)
		return err_set(e, -ENAMETOOLONG, "layer path too long");
	j = json_pack("{s:s, s:s, s:I, s:I}", "digest", m->digest, "diff_id", m->diff_id,
	    "size", (json_int_t)m->size, "unpacked", (json_int_t)m->unpacked);
	s = json_dumps(j, JSON_SORT_KEYS);
	json_decref(j);
	rc = cache__write_atomic(path, s, strlen(s), e);
	free(s);
	return rc;
}

/*** Public reads ***/

int
img_cache_attach(const char *root, struct img_cache **out, struct err *e)
{
	struct img_cache *c;
	size_t len = root != NULL ? strlen(root) : 0;

	*out = NULL;
	if (len == 0 || root[0] != '/')
		return err_set(e, -EINVAL, "image cache: not an absolute path");
	if (strchr(root, ':') != NULL)
		return err_set(e, -EINVAL, "image cache %.200s: ':' in its path", root);
	c = xcalloc(1, sizeof(*c));
	if (len >= sizeof(c->root)) {
		free(c);
		return err_set(e, -ENAMETOOLONG, "image cache: path too long");
	}
	memcpy(c->root, root, len + 1);
	while (len > 1 && c->root[len - 1] == '/')
		c->root[--len] = '\0';
	*out = c;
	return 0;
}

void
img_cache_close(struct img_cache *c)
{
	free(c);
}

int
img_cache_get(struct img_cache *c, const char *digest, struct img_record **out,
    struct err *e)
{
	return cache__record_read(c, digest, out, e);
}

int
img_cache_lookup(struct img_cache *c, const char *ref, struct img_record **out,
    struct err *e)
{
	char name[CACHE_REF_NAME_MAX + 1], digest[OCI_DIGEST_MAX + 1];
	int rc;

	*out = NULL;
	cache__ref_name(ref, name);
	if ((rc = cache__ref_read(c, name, digest, e)) < 0)
		return rc;
	return cache__record_read(c, digest, out, e);
}

int
img_cache_touch(struct img_cache *c, const char *digest, struct err *e)
{
	char path[PATH_MAX];

	if (!oci_digest_ok(digest))
		return err_set(e, -EINVAL, "not a sha256 digest");
	if (cache__path(c, path, "images/sha256/%s.json", cache__hex(digest)) < 0)
		return err_set(e, -ENAMETOOLONG, "record path too long");
	/* Its mtime is its last use: one call, nothing to read or rewrite. */
	if (utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) < 0)
		return err_set(e, -errno, "image %s: %s", digest, strerror(errno));
	return 0;
}

int
img_cache_layer_path(const struct img_cache *c, const char *digest, char *buf, size_t n)
{
	if (!oci_digest_ok(digest))
		return -EINVAL;
	if ((size_t)snprintf(buf, n, "%s/layers/sha256/%s", c->root, cache__hex(digest)) >= n)
		return -ENAMETOOLONG;
	return 0;
}

static int
by_last_use(const void *a, const void *b)
{
	const struct img_record *x = *(struct img_record *const *)a;
	const struct img_record *y = *(struct img_record *const *)b;

	if (x->last_use_ms != y->last_use_ms)
		return x->last_use_ms < y->last_use_ms ? -1 : 1;
	return strcmp(x->manifest, y->manifest);
}

int
img_cache_list(struct img_cache *c, struct img_record ***out, size_t *n, struct err *e)
{
	char path[PATH_MAX];
	struct dirent *de;
	size_t cap = 0;
	DIR *d;

	*out = NULL;
	*n = 0;
	if (cache__path(c, path, "images/sha256") < 0)
		return err_set(e, -ENAMETOOLONG, "records path too long");
	if ((d = opendir(path)) == NULL)
		return err_set(e, -errno, "%s: %s", path, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		char digest[OCI_DIGEST_MAX + 8];
		struct img_record *r;
		size_t len = strlen(de->d_name);

		/* HEX.json only: temporary files and strays are not records. */
		if (len != 64 + 5 || strcmp(de->d_name + 64, ".json") != 0)
			continue;
		snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
		if (cache__record_read(c, digest, &r, NULL) < 0)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			*out = xreallocarray(*out, cap, sizeof(**out));
		}
		(*out)[(*n)++] = r;
	}
	closedir(d);
	if (*n > 0)
		qsort(*out, *n, sizeof(**out), by_last_use);
	return 0;
}
