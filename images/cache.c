/*
 * cache.c - the per-host image cache: opening it, and pulling an image
 * into it (cache.h has the folders; cache_records.c the files in them;
 * cache_evict.c the size bound).
 *
 * DESIGN
 * skopeo fetches, sandq checks. `skopeo copy` speaks the distribution
 * protocol (tokens, redirects, retries, mirrors, every transport) into one
 * OCI image layout shared by every image, so a blob two images share is
 * fetched once. skopeo trusts a blob already in the layout without reading
 * it, so nothing it leaves there is trusted here: from index.json to the
 * last layer, each blob is opened, its size and sha256 checked against the
 * descriptor that named it, and the layer is unpacked from that same open
 * descriptor. A blob that fails is removed, so the next pull fetches it
 * again. The record is written last, after every layer is in place: it is
 * the commit, and no half-pulled image has one.
 *
 * Locks, always taken in this order, each a flock on a file of locks/:
 *   cache.lock   shared by each pull from start to record; exclusive for an
 *                eviction, which so never removes what a pull is about
 *                to name, and never sees a half-pulled image as garbage.
 *   ref-NAME     one pull of a reference at a time. A pull that had to wait
 *                takes the record the other wrote while it waited.
 *   oci.lock     the layout, while skopeo writes into it and index.json is
 *                read: skopeo rewrites index.json whole from the copy it read
 *                at its start, so two copies at once would lose an entry.
 *   layer-HEX    one unpack of a layer at a time; the unpacker makes the
 *                layer's folder appear whole or not at all.
 *
 * Sections: Helpers, Fetching (skopeo), Verifying blobs, Reading the
 * image, Unpacking, Pulling, Opening.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "cache_int.h"
#include "skopeo.h"

#define HASH_CHUNK (1u << 20)	/* bytes hashed per read */
#define DIAGNOSE_TIMEOUT_MS 60000u	/* `skopeo inspect --raw` after a failed copy */

/* One pull in progress. */
struct pull {
	struct img_cache *c;
	const char *ref;
	const struct img_pull_opts *o;
	char shown[80];			/* ref, escaped, for messages */
	char name[CACHE_REF_NAME_MAX + 1];	/* ref's name in the layout and refs/ */
	const char *os, *arch;		/* the platform wanted */
	struct img_pull_stats st;
	struct oci_desc top;		/* index.json's entry */
	struct oci_desc man;		/* the image manifest (top, or picked from it) */
	struct oci_manifest m;
	struct oci_config cfg;
	int *fds;			/* each layer's verified blob, m.nlayers */
	uint64_t *unpacked;		/* each layer's unpacked bytes */
};

/*** Helpers ***/

static int fail(struct pull *p, struct err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Fills e with "image 'REF': WHY" and returns code. */
static int
fail(struct pull *p, struct err *e, int code, const char *fmt, ...)
{
	char why[sizeof(e->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return err_set(e, code, "image '%s': %s", p->shown, why);
}

/* Tells the caller's progress callback: of blob desc, or (NULL) of digest. */
static void
progress(struct pull *p, enum img_phase phase, const struct oci_desc *desc,
    const char *digest, unsigned i, unsigned n)
{
	struct img_progress pr = { phase, desc != NULL ? desc->digest : digest, i, n,
	    desc != NULL ? desc->size : 0 };

	if (p->o->progress != NULL)
		p->o->progress(p->o->progress_arg, &pr);
}

/*
 * Whether ref is a transport reference skopeo may be given: a known
 * transport, printable ASCII, no spaces. Starting with a transport name
 * it can never start with '-' and be taken for an option.
 */
static int
ref_check(const char *ref, char *shown, size_t n, struct err *e)
{
	static const char *const transports[] = { "docker://", "oci:", "oci-archive:",
	    "docker-archive:" };
	size_t len = ref != NULL ? strnlen(ref, IMG_REF_MAX + 1) : 0;
	bool known = false;

	oci_shown(ref != NULL ? ref : "", len, shown, n);
	if (len == 0 || len > IMG_REF_MAX)
		return err_set(e, -EINVAL, "image '%s': empty, or longer than %d bytes",
		    shown, IMG_REF_MAX);
	for (size_t i = 0; i < len; i++)
		if (ref[i] <= 0x20 || ref[i] >= 0x7f)
			return err_set(e, -EINVAL, "image '%s': not printable ASCII without spaces",
			    shown);
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		known |= strncmp(ref, transports[i], strlen(transports[i])) == 0 &&
		    len > strlen(transports[i]);
	if (!known)
		return err_set(e, -EINVAL, "image '%s': not docker://, oci:, oci-archive: "
		    "or docker-archive:", shown);
	return 0;
}

/*** Fetching (skopeo) ***/

/* skopeo's stdout, line by line: "Copying blob sha256:...", "Copying config ...". */
static void
on_line(void *arg, const char *line)
{
	struct pull *p = arg;
	char digest[OCI_DIGEST_MAX + 1];
	const char *d = NULL;

	if (strncmp(line, "Copying blob ", 13) == 0)
		d = line + 13;
	else if (strncmp(line, "Copying config ", 15) == 0)
		d = line + 15;
	if (d == NULL)
		return;
	snprintf(digest, sizeof(digest), "%.*s", (int)strcspn(d, " "), d);
	progress(p, IMG_PHASE_FETCH, NULL, oci_digest_ok(digest) ? digest : NULL, 0, 0);
}

/* Runs skopeo with argv (from argv[1]; argv[0] is set here). */
static int
run(struct pull *p, const char **argv, unsigned timeout_ms, char *out, size_t out_max,
    char *why, size_t whysz)
{
	struct skopeo_cmd cmd = { 0 };
	char home[PATH_MAX];
	int rc;

	cache__path(p->c, home, "tmp");
	argv[0] = p->o->skopeo != NULL ? p->o->skopeo : SKOPEO_BIN;
	cmd.argv = argv;
	cmd.home = home;
	cmd.timeout_ms = timeout_ms;
	cmd.line_cb = out == NULL ? on_line : NULL;
	cmd.arg = p;
	cmd.out = out;
	cmd.out_max = out_max;
	rc = skopeo_exec(&cmd);
	snprintf(why, whysz, "%s", cmd.why);
	return rc;
}

/*
 * After a failed copy: asks the source for its top manifest. If it is an
 * index with no image for the platform, that is the error (skopeo's own
 * words for it are not ours to parse). Returns 0 if it found nothing to
 * say, else the error, with e.
 */
static int
diagnose(struct pull *p, struct err *e)
{
	const char *argv[8];
	char why[SKOPEO_WHY_MAX + 8], *raw = xmalloc(OCI_JSON_MAX + 1);
	struct oci_desc d;
	struct err e2 = { 0 };
	size_t n = 1;
	int rc = 0;

	argv[n++] = "inspect";
	argv[n++] = "--raw";
	if (p->o->plain_http && strncmp(p->ref, "docker://", 9) == 0)
		argv[n++] = "--tls-verify=false";
	argv[n++] = p->ref;
	argv[n] = NULL;
	if (run(p, argv, DIAGNOSE_TIMEOUT_MS, raw, OCI_JSON_MAX + 1, why, sizeof(why)) == 0 &&
	    strstr(raw, "\"manifests\"") != NULL &&
	    oci_index_pick(raw, strlen(raw), p->os, p->arch, &d, &e2) == -ENOENT)
		rc = fail(p, e, -ENOENT, "%s", e2.msg);
	free(raw);
	return rc;
}

/* Removes what a killed skopeo may have left in the layout and in tmp/. */
static void
layout_tidy(struct pull *p)
{
	char path[PATH_MAX], sub[PATH_MAX];
	struct dirent *de;
	DIR *d;

	cache__path(p->c, path, "oci");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
			    strcmp(de->d_name, "index.json") != 0 &&
			    strcmp(de->d_name, "oci-layout") != 0 &&
			    strcmp(de->d_name, "blobs") != 0 &&
			    cache__path(p->c, sub, "oci/%s", de->d_name) == 0)
				cache__rmtree(sub);
		closedir(d);
	}
	cache__path(p->c, path, "tmp");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
			    cache__path(p->c, sub, "tmp/%s", de->d_name) == 0)
				cache__rmtree(sub);
		closedir(d);
	}
}

/*
 * skopeo copy REF oci:ROOT/oci:NAME under the layout lock, then reads
 * index.json for NAME's descriptor into p->top. A failed or killed copy
 * leaves index.json as it found it. Returns 0 or -errno with e.
 */
static int
fetch(struct pull *p, struct err *e)
{
	char index[PATH_MAX], dest[PATH_MAX + 8], retries[16], why[SKOPEO_WHY_MAX + 8];
	char *saved = NULL, *buf = NULL;
	const char *argv[16];
	size_t saved_len = 0, len, n = 1;
	struct err e2 = { 0 };
	int lock, rc, d;

	if ((lock = cache__lock(p->c, "oci.lock", LOCK_EX, NULL, e)) < 0)
		return lock;
	layout_tidy(p);
	cache__path(p->c, index, "oci/index.json");
	rc = cache__read_file(index, OCI_LAYOUT_INDEX_MAX, &saved, &saved_len, &e2);
	if (rc < 0 && rc != -ENOENT) {
		rc = fail(p, e, rc, "the cache's layout: %s", e2.msg);
		goto out;
	}
	snprintf(retries, sizeof(retries), "%u", p->o->retry_times);
	snprintf(dest, sizeof(dest), "oci:%s/oci:%s", p->c->root, p->name);
	argv[n++] = "copy";
	argv[n++] = "--retry-times";
	argv[n++] = retries;
	/* The layout keeps no signatures; the host's policy.json still applies. */
	argv[n++] = "--remove-signatures";
	if (p->o->plain_http && strncmp(p->ref, "docker://", 9) == 0)
		argv[n++] = "--src-tls-verify=false";
	if (p->o->arch != NULL) {
		argv[n++] = "--override-arch";
		argv[n++] = p->arch;
	}
	if (p->o->os != NULL) {
		argv[n++] = "--override-os";
		argv[n++] = p->os;
	}
	argv[n++] = p->ref;
	argv[n++] = dest;
	argv[n] = NULL;
	p->st.fetched++;
	rc = run(p, argv, p->o->timeout_ms ? p->o->timeout_ms : IMG_PULL_TIMEOUT_MS, NULL, 0,
	    why, sizeof(why));
	if (rc < 0) {
		/* As it was: skopeo writes index.json in place, and may have died in it. */
		if (saved != NULL)
			cache__write_atomic(index, saved, saved_len, NULL);
		else
			unlink(index);
		layout_tidy(p);
		if (rc == -EIO && (d = diagnose(p, e)) < 0)
			rc = d;
		else if (rc == -ETIMEDOUT)
			fail(p, e, rc, "skopeo copy %s", why);
		else
			fail(p, e, rc, "skopeo copy failed: %s", why);
		goto out;
	}
	if ((rc = cache__read_file(index, OCI_LAYOUT_INDEX_MAX, &buf, &len, &e2)) < 0 ||
	    (rc = oci_layout_find(buf, len, p->name, &p->top, &e2)) < 0)
		fail(p, e, rc, "the cache's layout after skopeo copy: %s", e2.msg);
out:
	free(saved);
	free(buf);
	close(lock);
	return rc;
}

/*** Verifying blobs ***/

/*
 * Opens d's blob in the layout and checks its size and sha256 against d.
 * Returns the descriptor (at offset 0; the caller closes it) or -errno
 * with e. A blob that fails is removed (if the path still holds the file
 * that failed), so that the next pull fetches it again.
 */
static int
blob_open(struct pull *p, const struct oci_desc *d, struct err *e)
{
	char path[PATH_MAX], hex[2 * EVP_MAX_MD_SIZE + 1];
	unsigned char md[EVP_MAX_MD_SIZE], *buf = NULL;
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = NULL;
	struct stat st, now;
	uint64_t left;
	int fd, rc = 0;

	cache__path(p->c, path, "oci/blobs/sha256/%s", cache__hex(d->digest));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return fail(p, e, -errno, "blob %s: %s", d->digest, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = fail(p, e, -EBADMSG, "blob %s: not a regular file", d->digest);
		goto bad;
	}
	if ((uint64_t)st.st_size != d->size) {
		rc = fail(p, e, -EBADMSG, "blob %s is %llu bytes, its descriptor says %llu",
		    d->digest, (unsigned long long)st.st_size, (unsigned long long)d->size);
		goto bad;
	}
	buf = xmalloc(HASH_CHUNK);
	ctx = EVP_MD_CTX_new();
	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();	/* only out of memory */
	for (left = d->size; left > 0;) {
		ssize_t n = read(fd, buf, left < HASH_CHUNK ? (size_t)left : HASH_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = fail(p, e, n < 0 ? -errno : -EIO, "blob %s: short read", d->digest);
			goto out;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		left -= (uint64_t)n;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (mdlen != 32 || strcmp(hex, cache__hex(d->digest)) != 0) {
		rc = fail(p, e, -EBADMSG, "blob %s does not match its digest "
		    "(removed from the cache)", d->digest);
		goto bad;
	}
	if (lseek(fd, 0, SEEK_SET) < 0)
		rc = fail(p, e, -errno, "blob %s: %s", d->digest, strerror(errno));
	goto out;
bad:
	{
		int lock = cache__lock(p->c, "oci.lock", LOCK_EX, NULL, NULL);

		/* The same file still: a fresh good copy is not removed. */
		if (lock >= 0 && lstat(path, &now) == 0 && now.st_ino == st.st_ino &&
		    now.st_dev == st.st_dev)
			unlink(path);
		if (lock >= 0)
			close(lock);
	}
out:
	EVP_MD_CTX_free(ctx);
	free(buf);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* The verified blob of d (at most max bytes) into *buf (owned), *len. */
static int
blob_read(struct pull *p, const struct oci_desc *d, size_t max, char **buf, size_t *len,
    struct err *e)
{
	size_t got = 0;
	int fd;

	*buf = NULL;
	if (d->size > max)
		return fail(p, e, -EFBIG, "blob %s: larger than %zu bytes", d->digest, max);
	if ((fd = blob_open(p, d, e)) < 0)
		return fd;
	*buf = xmalloc((size_t)d->size + 1);
	while (got < d->size) {
		ssize_t n = read(fd, *buf + got, (size_t)d->size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			free(*buf);
			*buf = NULL;
			return fail(p, e, -EIO, "blob %s: short read", d->digest);
		}
		got += (size_t)n;
	}
	(*buf)[got] = '\0';
	*len = got;
	close(fd);
	return 0;
}

/*** Reading the image ***/

/*
 * From p->top to the manifest (picked for the platform from an index),
 * its config and every layer's open, verified blob. Returns 0 or -errno
 * with e.
 */
static int
resolve(struct pull *p, struct err *e)
{
	struct err e2 = { 0 };
	char *buf = NULL;
	size_t len;
	unsigned count;
	int rc;

	switch (oci_kind_of(p->top.media_type)) {
	case OCI_KIND_INDEX:
		progress(p, IMG_PHASE_VERIFY, &p->top, NULL, 1, 1);
		if ((rc = blob_read(p, &p->top, OCI_JSON_MAX, &buf, &len, e)) < 0)
			return rc;
		rc = oci_index_pick(buf, len, p->os, p->arch, &p->man, &e2);
		free(buf);
		buf = NULL;
		if (rc < 0)
			return fail(p, e, rc, "%s", e2.msg);
		break;
	case OCI_KIND_MANIFEST:
		p->man = p->top;
		break;
	default: {
		char mt[96];

		return fail(p, e, -ENOTSUP, "media type '%s' is not an image",
		    oci_shown(p->top.media_type, strlen(p->top.media_type), mt, sizeof(mt)));
	}
	}
	count = 2;
	progress(p, IMG_PHASE_VERIFY, &p->man, NULL, 1, count);
	if ((rc = blob_read(p, &p->man, OCI_JSON_MAX, &buf, &len, e)) < 0)
		return rc;
	rc = oci_manifest_parse(buf, len, p->man.media_type, &p->m, &e2);
	free(buf);
	if (rc < 0)
		return fail(p, e, rc, "%s", e2.msg);
	count = 2 + (unsigned)p->m.nlayers;
	progress(p, IMG_PHASE_VERIFY, &p->m.config, NULL, 2, count);
	if ((rc = blob_read(p, &p->m.config, OCI_JSON_MAX, &buf, &len, e)) < 0)
		return rc;
	rc = oci_config_parse(buf, len, &p->cfg, &e2);
	free(buf);
	if (rc < 0)
		return fail(p, e, rc, "%s", e2.msg);
	if (strcmp(p->cfg.os, p->os) != 0 || strcmp(p->cfg.arch, p->arch) != 0) {
		char os[40], arch[40];

		return fail(p, e, -ENOEXEC, "it is for %s/%s, not %s/%s",
		    oci_shown(p->cfg.os, strlen(p->cfg.os), os, sizeof(os)),
		    oci_shown(p->cfg.arch, strlen(p->cfg.arch), arch, sizeof(arch)),
		    p->os, p->arch);
	}
	if (p->cfg.ndiff_ids != p->m.nlayers)
		return fail(p, e, -EBADMSG, "its config lists %zu layers, its manifest %zu",
		    p->cfg.ndiff_ids, p->m.nlayers);
	p->fds = xcalloc(p->m.nlayers, sizeof(*p->fds));
	p->unpacked = xcalloc(p->m.nlayers, sizeof(*p->unpacked));
	for (size_t i = 0; i < p->m.nlayers; i++)
		p->fds[i] = -1;
	for (size_t i = 0; i < p->m.nlayers; i++) {
		progress(p, IMG_PHASE_VERIFY, &p->m.layers[i], NULL, 3 + (unsigned)i, count);
		if ((p->fds[i] = blob_open(p, &p->m.layers[i], e)) < 0)
			return p->fds[i];
	}
	return 0;
}

/*** Unpacking ***/

/*
 * Layer i in place: unpacked now from its verified blob, or found there
 * (a layer another image shares). Under the layer's lock, so two pulls
 * never unpack it twice. Sets p->unpacked[i]. Returns 0 or -errno with e.
 */

/*
 * A folder of the unpacker's own for one unpack: STAGING/XXXXXX (0700,
 * its uid), in staging/, which like layers/sha256 is root's alone (0700).
 * The unpacker never sees another unpack's folder nor a finished layer: a
 * layer that compromised it can reach no file of another image, though
 * every layer is its uid's. Returns 0 with path filled, or -errno with e.
 */
static int
staging_make(const struct img_cache *c, uid_t uid, gid_t gid, char *path,
    struct err *e)
{
	cache__path(c, path, "staging/XXXXXX");
	if (mkdtemp(path) == NULL)
		return err_set(e, -errno, "image cache %.200s: %s", path, strerror(errno));
	if (chown(path, uid, gid) < 0) {
		int rc = -errno;

		rmdir(path);
		return err_set(e, rc, "image cache %.200s: %s", path, strerror(-rc));
	}
	return 0;
}

/*
 * Unpacks layer i from its verified blob into STAGING/layer as the
 * unpacking uid, then (root) renames it to dest, which nobody else makes
 * under the layer's lock. The staging folder goes either way.
 */
static int
layer_unpack(struct pull *p, size_t i, const char *dest, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	const struct oci_desc *l = &p->m.layers[i];
	char staging[PATH_MAX], tmp[PATH_MAX + 8], what[64];
	int rc;

	if ((rc = staging_make(p->c, p->o->unpack_uid, p->o->unpack_gid, staging, e)) < 0)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s/layer", staging);
	snprintf(what, sizeof(what), "layer %zu (%.19s)", i + 1, l->digest);
	rc = img_unpack_layer_as(p->o->unpack_uid, p->o->unpack_gid, p->fds[i], tmp, what,
	    lim, st, e);
	if (rc == 0 && rename(tmp, dest) < 0)
		rc = err_set(e, -errno, "image cache: %s -> %.200s: %s", what, dest,
		    strerror(errno));
	cache__rmtree(staging);
	return rc;
}

static int
layer_ensure(struct pull *p, size_t i, struct err *e)
{
	const struct oci_desc *l = &p->m.layers[i];
	struct cache_layer_meta meta = { 0 };
	struct img_unpack_limits lim = p->o->limits;
	struct img_unpack_stats st = { 0 };
	char dest[PATH_MAX], lockname[80];
	struct err e2 = { 0 };
	struct stat sb;
	int lock, rc = 0;

	snprintf(lockname, sizeof(lockname), "layer-%s.lock", cache__hex(l->digest));
	if ((lock = cache__lock(p->c, lockname, LOCK_EX, NULL, &e2)) < 0)
		return fail(p, e, lock, "%s", e2.msg);
	cache__path(p->c, dest, "layers/sha256/%s", cache__hex(l->digest));
	if (lstat(dest, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		/* There already; its meta is lost only if a crash came between. */
		if (cache__layer_meta_read(p->c, l->digest, &meta, NULL) == 0) {
			p->unpacked[i] = meta.unpacked;
			goto out;
		}
		st.bytes = cache__tree_bytes(dest);
	} else {
		cache__rmtree(dest);	/* not a folder: a stray */
		if (lim.max_bytes == 0)
			lim.max_bytes = IMG_UNPACK_BYTES_DEFAULT;
		if (lim.max_entries == 0)
			lim.max_entries = IMG_UNPACK_ENTRIES_DEFAULT;
		if (lim.max_ratio == 0)
			lim.max_ratio = IMG_UNPACK_RATIO_DEFAULT;
		progress(p, IMG_PHASE_UNPACK, l, NULL, (unsigned)i + 1, (unsigned)p->m.nlayers);
		if ((rc = layer_unpack(p, i, dest, &lim, &st, &e2)) < 0) {
			fail(p, e, rc, "%s", e2.msg);
			goto out;
		}
		p->st.unpacked++;
		p->st.unpacked_bytes += st.bytes;
	}
	memcpy(meta.digest, l->digest, sizeof(meta.digest));
	memcpy(meta.diff_id, p->cfg.diff_ids[i], sizeof(meta.diff_id));
	meta.size = l->size;
	meta.unpacked = st.bytes;
	p->unpacked[i] = st.bytes;
	if ((rc = cache__layer_meta_write(p->c, &meta, &e2)) < 0)
		fail(p, e, rc, "%s", e2.msg);
out:
	close(lock);
	return rc;
}

/*** Pulling ***/

/* The record of the pulled image (config fields moved out of p->cfg). */
static struct img_record *
record_make(struct pull *p)
{
	struct img_record *r = xcalloc(1, sizeof(*r));

	r->reference = xstrdup(p->ref);
	memcpy(r->manifest, p->man.digest, sizeof(r->manifest));
	memcpy(r->top, p->top.digest, sizeof(r->top));
	memcpy(r->config, p->m.config.digest, sizeof(r->config));
	memcpy(r->os, p->cfg.os, sizeof(r->os));
	memcpy(r->arch, p->cfg.arch, sizeof(r->arch));
	r->nlayers = p->m.nlayers;
	r->layers = xcalloc(r->nlayers, sizeof(*r->layers));
	r->blob_bytes = p->man.size + p->m.config.size +
	    (strcmp(p->top.digest, p->man.digest) != 0 ? p->top.size : 0);
	for (size_t i = 0; i < r->nlayers; i++) {
		struct img_layer *y = &r->layers[i];

		memcpy(y->digest, p->m.layers[i].digest, sizeof(y->digest));
		memcpy(y->diff_id, p->cfg.diff_ids[i], sizeof(y->diff_id));
		memcpy(y->media_type, p->m.layers[i].media_type, sizeof(y->media_type));
		y->size = p->m.layers[i].size;
		y->unpacked = p->unpacked[i];
		r->unpacked_bytes += y->unpacked;
		r->blob_bytes += y->size;
	}
	r->env = p->cfg.env;
	r->nenv = p->cfg.nenv;
	r->working_dir = p->cfg.working_dir;
	r->user = p->cfg.user;
	r->entrypoint = p->cfg.entrypoint;
	r->nentrypoint = p->cfg.nentrypoint;
	r->cmd = p->cfg.cmd;
	r->ncmd = p->cfg.ncmd;
	p->cfg.env = p->cfg.entrypoint = p->cfg.cmd = NULL;
	p->cfg.nenv = p->cfg.nentrypoint = p->cfg.ncmd = 0;
	p->cfg.working_dir = p->cfg.user = NULL;
	r->pulled_ms = now_ms();
	r->last_use_ms = r->pulled_ms;
	return r;
}

/*
 * The record ref already has, if every layer it names is in place:
 * touched, into *out. Returns 0, or -ENOENT when it must be pulled.
 */
static int
reuse(struct pull *p, struct img_record **out)
{
	char digest[OCI_DIGEST_MAX + 1], path[PATH_MAX];
	struct img_record *r;
	struct stat st;

	if (cache__ref_read(p->c, p->name, digest, NULL) < 0 ||
	    cache__record_read(p->c, digest, &r, NULL) < 0)
		return -ENOENT;
	for (size_t i = 0; i < r->nlayers; i++)
		if (cache__path(p->c, path, "layers/sha256/%s", cache__hex(r->layers[i].digest)) < 0 ||
		    lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
			img_record_free(r);
			return -ENOENT;
		}
	img_cache_touch(p->c, r->manifest, NULL);
	r->last_use_ms = now_ms();
	*out = r;
	return 0;
}

/* Identity of refs/NAME.json (inode and mtime), to see whether it changed. */
static void
ref_id(struct pull *p, struct stat *st)
{
	char path[PATH_MAX];

	memset(st, 0, sizeof(*st));
	if (cache__path(p->c, path, "refs/%s.json", p->name) == 0)
		stat(path, st);
}

/* The steps of a pull under the reference's lock: fetch, check, unpack, record. */
static int
pull_locked(struct pull *p, struct img_record **out, struct err *e)
{
	struct img_record *r = NULL, *old = NULL;
	struct err e2 = { 0 };
	int rc;

	if ((rc = fetch(p, e)) < 0 || (rc = resolve(p, e)) < 0)
		return rc;
	for (size_t i = 0; i < p->m.nlayers; i++)
		if ((rc = layer_ensure(p, i, e)) < 0)
			return rc;
	r = record_make(p);
	/* The same image under another reference keeps its record and first name. */
	if (cache__record_read(p->c, r->manifest, &old, NULL) == 0) {
		img_record_free(r);
		r = old;
		img_cache_touch(p->c, r->manifest, NULL);
	} else if ((rc = cache__record_write(p->c, r, &e2)) < 0) {
		img_record_free(r);
		return fail(p, e, rc, "%s", e2.msg);
	}
	if ((rc = cache__ref_write(p->c, p->name, p->ref, r->manifest, &e2)) < 0) {
		img_record_free(r);
		return fail(p, e, rc, "%s", e2.msg);
	}
	*out = r;
	return 0;
}

int
img_cache_pull(struct img_cache *c, const char *ref, const struct img_pull_opts *opts,
    struct img_record **out, struct err *e)
{
	struct pull p = { 0 };
	char lockname[CACHE_REF_NAME_MAX + 16];
	struct stat before, after;
	int cache_lock = -1, ref_lock = -1, rc;

	*out = NULL;
	p.c = c;
	p.ref = ref;
	p.o = opts;
	if ((rc = ref_check(ref, p.shown, sizeof(p.shown), e)) < 0)
		return rc;
	if (opts == NULL || opts->unpack_uid == 0 || opts->unpack_gid == 0)
		return fail(&p, e, -EPERM, "its layers must be unpacked by a uid and gid "
		    "other than root's");
	p.os = opts->os != NULL ? opts->os : "linux";
	p.arch = opts->arch != NULL ? opts->arch : oci_host_arch();
	cache__ref_name(ref, p.name);
	snprintf(lockname, sizeof(lockname), "ref-%s.lock", p.name);

	if ((cache_lock = cache__lock(c, "cache.lock", LOCK_SH, NULL, e)) < 0)
		return cache_lock;
	ref_id(&p, &before);
	if ((ref_lock = cache__lock(c, lockname, LOCK_EX, &p.st.waited, e)) < 0) {
		rc = ref_lock;
		goto out;
	}
	ref_id(&p, &after);
	/*
	 * Whoever held the lock pulled this reference while this one waited:
	 * its record is as fresh as a second fetch would make it.
	 */
	if ((!opts->refresh || (p.st.waited && (after.st_ino != before.st_ino ||
	    after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
	    after.st_mtim.tv_nsec != before.st_mtim.tv_nsec))) && reuse(&p, out) == 0) {
		p.st.reused = true;
		rc = 0;
		goto out;
	}
	rc = pull_locked(&p, out, e);
out:
	for (size_t i = 0; p.fds != NULL && i < p.m.nlayers; i++)
		if (p.fds[i] >= 0)
			close(p.fds[i]);
	free(p.fds);
	free(p.unpacked);
	oci_manifest_free(&p.m);
	oci_config_free(&p.cfg);
	if (ref_lock >= 0)
		close(ref_lock);
	close(cache_lock);
	if (rc == 0)
		progress(&p, IMG_PHASE_DONE, NULL, (*out)->manifest, 0, 0);
	if (opts->stats != NULL)
		*opts->stats = p.st;
	return rc;
}

/*** Opening ***/

int
img_cache_open(const char *root, struct img_cache **out, struct err *e)
{
	static const char *const dirs[] = { "", "/oci", "/layers", "/layers/sha256",
	    "/images", "/images/sha256", "/refs", "/locks", "/tmp", "/staging" };
	struct img_cache *c;
	char path[PATH_MAX];
	int rc;

	if ((rc = img_cache_attach(root, &c, e)) < 0)
		return rc;
	/*
	 * Tenants' images: the folders are root's alone (a cache an older
	 * sandq handed layers/sha256 to the unpacker is taken back). Each
	 * unpack gets a folder of its own in staging/ (staging_make()).
	 */
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		const mode_t mode = 0700;

		snprintf(path, sizeof(path), "%s%s", c->root, dirs[i]);
		if ((mkdir(path, mode) < 0 && errno != EEXIST) || lchown(path, 0, 0) < 0 ||
		    chmod(path, mode) < 0) {
			rc = -errno;
			img_cache_close(c);
			return err_set(e, rc, "image cache %.200s: %s", path, strerror(-rc));
		}
	}
	*out = c;
	return 0;
}

