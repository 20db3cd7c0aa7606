/*
 * cache_evict.c - the image cache's size bound: least recently used
 * images first, never one in use, then whatever no remaining image names.
 *
 * DESIGN
 * The size is what the layers of the kept records take: each distinct
 * layer's unpacked bytes plus its blob's, counted once however many
 * images share it. Images are dropped, least recently used first (a
 * record's mtime, img_cache_touch()), skipping those the caller says are
 * in use, until that size fits; then every layer and blob no kept record
 * names goes, whoever left it (an evicted image, a refused pull, a crash).
 *
 * It runs under cache.lock held exclusively: every pull holds it shared
 * from its start to its record, so while an eviction runs no pull is
 * between fetching and recording, and anything unnamed is garbage, not
 * an image on its way in. It takes oci.lock too while it removes blobs
 * and rewrites index.json, which skopeo reads.
 *
 * Order: records first (no record, no image: lookups and reuse go
 * through them), then references to nothing, then layers, each renamed
 * out of layers/sha256/ before it is removed (a crash midway leaves no
 * half-removed folder under a layer's name, only trash the next eviction
 * removes), then blobs and index.json's entries for them.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "../common/xmalloc.h"
#include "cache_int.h"

/* A layer the records name, with how many kept records name it. */
struct lref {
	char digest[OCI_DIGEST_MAX + 1];
	uint64_t bytes;		/* unpacked plus blob */
	unsigned refs;
};

/* A set of digests: sorted, searched. */
struct dset {
	char (*v)[OCI_DIGEST_MAX + 1];
	size_t n, cap;
};

static int
cmp_digest(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

static void
dset_add(struct dset *s, const char *d)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->v = xreallocarray(s->v, s->cap, sizeof(*s->v));
	}
	memcpy(s->v[s->n++], d, OCI_DIGEST_MAX + 1);
}

static void
dset_seal(struct dset *s)
{
	if (s->n > 0)
		qsort(s->v, s->n, sizeof(*s->v), cmp_digest);
}

static bool
dset_has(const struct dset *s, const char *d)
{
	return s->n > 0 && bsearch(d, s->v, s->n, sizeof(*s->v), cmp_digest) != NULL;
}

static struct lref *
lref_find(struct lref *v, size_t n, const char *d)
{
	return n > 0 ? bsearch(d, v, n, sizeof(*v), cmp_digest) : NULL;
}

/*
 * The distinct layers of recs, each with the number of records naming it,
 * sorted by digest, into *out (*n). Returns their total bytes.
 */
static uint64_t
layers_of(struct img_record **recs, size_t nrecs, struct lref **out, size_t *n)
{
	struct lref *v = NULL;
	size_t k = 0, cap = 0, w = 0;
	uint64_t total = 0;

	for (size_t i = 0; i < nrecs; i++)
		for (size_t j = 0; j < recs[i]->nlayers; j++) {
			if (k == cap) {
				cap = cap ? cap * 2 : 64;
				v = xreallocarray(v, cap, sizeof(*v));
			}
			memcpy(v[k].digest, recs[i]->layers[j].digest, sizeof(v[k].digest));
			v[k].bytes = recs[i]->layers[j].unpacked + recs[i]->layers[j].size;
			v[k].refs = 1;
			k++;
		}
	if (k > 0)
		qsort(v, k, sizeof(*v), cmp_digest);
	/* Merge duplicates; a layer twice in one image counts as named twice. */
	for (size_t i = 0; i < k; i++) {
		if (w > 0 && strcmp(v[w - 1].digest, v[i].digest) == 0) {
			v[w - 1].refs++;
			continue;
		}
		v[w++] = v[i];
		total += v[i].bytes;
	}
	*out = v;
	*n = w;
	return total;
}

/* Removes ROOT/rel (a file or a folder); true if something went. */
static bool
remove_rel(const struct img_cache *c, const char *rel)
{
	char path[PATH_MAX];

	return cache__path(c, path, "%s", rel) == 0 && access(path, F_OK) == 0 &&
	    cache__rmtree(path) == 0;
}

/* True if name is 64 lowercase hex digits followed by suffix. */
static bool
hex_named(const char *name, const char *suffix)
{
	char d[OCI_DIGEST_MAX + 8];

	if (strlen(name) != 64 + strlen(suffix) || strcmp(name + 64, suffix) != 0)
		return false;
	snprintf(d, sizeof(d), "sha256:%.64s", name);
	return oci_digest_ok(d);
}

/* References whose record is gone, and their locks. */
static void
refs_sweep(const struct img_cache *c)
{
	char path[PATH_MAX], rel[PATH_MAX];
	struct dirent *de;
	DIR *d;

	cache__path(c, path, "refs");
	if ((d = opendir(path)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char name[CACHE_REF_NAME_MAX + 1], digest[OCI_DIGEST_MAX + 1];
		size_t len = strlen(de->d_name);
		bool keep = false;

		if (de->d_name[0] == '.')
			continue;
		if (len == CACHE_REF_NAME_MAX + 5 && strcmp(de->d_name + CACHE_REF_NAME_MAX, ".json") == 0) {
			snprintf(name, sizeof(name), "%.*s", CACHE_REF_NAME_MAX, de->d_name);
			keep = cache__ref_read(c, name, digest, NULL) == 0 &&
			    cache__path(c, rel, "images/sha256/%s.json", cache__hex(digest)) == 0 &&
			    access(rel, F_OK) == 0;
			if (!keep) {
				snprintf(rel, sizeof(rel), "locks/ref-%s.lock", name);
				remove_rel(c, rel);
			}
		}
		if (!keep) {
			snprintf(rel, sizeof(rel), "refs/%s", de->d_name);
			remove_rel(c, rel);
		}
	}
	closedir(d);
}

/* Layers (and strays) of layers/ that no kept record names; returns the folders removed. */
static unsigned
layers_sweep(const struct img_cache *c, struct lref *kept, size_t nkept)
{
	char path[PATH_MAX], from[PATH_MAX], to[PATH_MAX], rel[PATH_MAX];
	struct dirent *de;
	unsigned removed = 0, seq = 0;
	DIR *d;

	cache__path(c, path, "layers/sha256");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			char digest[OCI_DIGEST_MAX + 8];
			bool dir = hex_named(de->d_name, ""), meta = hex_named(de->d_name, ".json");

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
			if ((dir || meta) && lref_find(kept, nkept, digest) != NULL)
				continue;
			/* Out of the layer's name first, then removed. */
			cache__path(c, from, "layers/sha256/%s", de->d_name);
			cache__path(c, to, "layers/trash-%d-%u", (int)getpid(), seq++);
			if (rename(from, to) == 0) {
				cache__rmtree(to);
				removed += dir;
			}
			if (dir) {
				snprintf(rel, sizeof(rel), "locks/layer-%s.lock", de->d_name);
				remove_rel(c, rel);
			}
		}
		closedir(d);
	}
	/* Trash a crashed eviction left. */
	cache__path(c, path, "layers");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strncmp(de->d_name, "trash-", 6) == 0) {
				snprintf(rel, sizeof(rel), "layers/%s", de->d_name);
				remove_rel(c, rel);
			}
		closedir(d);
	}
	/*
	 * Unpacks a crashed pull left in staging/: no pull runs while the
	 * eviction holds cache.lock, so whatever is there is a leftover.
	 */
	cache__path(c, path, "staging");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
				snprintf(rel, sizeof(rel), "staging/%s", de->d_name);
				remove_rel(c, rel);
			}
		closedir(d);
	}
	return removed;
}

/*
 * Blobs no kept record names, and index.json's entries for them; under
 * oci.lock. Returns the blobs removed.
 */
static unsigned
blobs_sweep(const struct img_cache *c, const struct dset *keep)
{
	char path[PATH_MAX], rel[PATH_MAX], *buf = NULL;
	struct dirent *de;
	unsigned removed = 0;
	size_t len;
	json_t *j;
	DIR *d;
	int lock = cache__lock(c, "oci.lock", LOCK_EX, NULL, NULL);

	if (lock < 0)
		return 0;
	cache__path(c, path, "oci/blobs/sha256");
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			char digest[OCI_DIGEST_MAX + 8];

			if (de->d_name[0] == '.')
				continue;
			snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
			if (hex_named(de->d_name, "") && dset_has(keep, digest))
				continue;
			snprintf(rel, sizeof(rel), "oci/blobs/sha256/%s", de->d_name);
			removed += remove_rel(c, rel);
		}
		closedir(d);
	}
	/* index.json without the entries whose blob went; skopeo would trip on them. */
	cache__path(c, path, "oci/index.json");
	if (cache__read_file(path, OCI_LAYOUT_INDEX_MAX, &buf, &len, NULL) == 0 &&
	    (j = json_loadb(buf, len, 0, NULL)) != NULL) {
		json_t *ms = json_object_get(j, "manifests"), *m;
		size_t i = 0;
		bool changed = false;

		while (json_is_array(ms) && (m = json_array_get(ms, i)) != NULL) {
			const char *dg = json_string_value(json_object_get(m, "digest"));

			if (dg != NULL && dset_has(keep, dg)) {
				i++;
				continue;
			}
			json_array_remove(ms, i);
			changed = true;
		}
		if (changed) {
			char *s = json_dumps(j, JSON_COMPACT);

			if (s != NULL)
				cache__write_atomic(path, s, strlen(s), NULL);
			free(s);
		}
		json_decref(j);
	}
	free(buf);
	close(lock);
	return removed;
}

int
img_cache_evict(struct img_cache *c, uint64_t max_bytes, img_in_use_cb in_use,
    void *arg, struct img_evict_result *res, struct err *e)
{
	struct img_evict_result r = { 0 };
	struct img_record **recs = NULL;
	struct lref *layers = NULL;
	struct dset keep = { 0 };
	bool *gone = NULL;
	size_t nrecs = 0, nlayers = 0;
	uint64_t total;
	int lock, rc;

	if ((lock = cache__lock(c, "cache.lock", LOCK_EX, NULL, e)) < 0)
		return lock;
	if ((rc = img_cache_list(c, &recs, &nrecs, e)) < 0)
		goto out;
	total = layers_of(recs, nrecs, &layers, &nlayers);
	r.bytes_before = total;
	gone = xcalloc(nrecs + 1, sizeof(*gone));
	/* recs is least recently used first. */
	for (size_t i = 0; i < nrecs && total > max_bytes; i++) {
		char path[PATH_MAX];

		if (in_use != NULL && in_use(arg, recs[i]))
			continue;
		if (cache__path(c, path, "images/sha256/%s.json", cache__hex(recs[i]->manifest)) < 0 ||
		    (unlink(path) < 0 && errno != ENOENT))
			continue;
		gone[i] = true;
		r.images++;
		for (size_t j = 0; j < recs[i]->nlayers; j++) {
			struct lref *l = lref_find(layers, nlayers, recs[i]->layers[j].digest);

			if (l != NULL && l->refs > 0 && --l->refs == 0)
				total -= l->bytes;
		}
	}
	r.bytes_after = total;

	/* What the kept records name: their layers, and every blob of theirs. */
	{
		size_t w = 0;

		for (size_t i = 0; i < nlayers; i++)
			if (layers[i].refs > 0)
				layers[w++] = layers[i];
		nlayers = w;
	}
	for (size_t i = 0; i < nrecs; i++) {
		if (gone[i])
			continue;
		dset_add(&keep, recs[i]->top);
		dset_add(&keep, recs[i]->manifest);
		dset_add(&keep, recs[i]->config);
		for (size_t j = 0; j < recs[i]->nlayers; j++)
			dset_add(&keep, recs[i]->layers[j].digest);
	}
	dset_seal(&keep);
	refs_sweep(c);
	r.layers = layers_sweep(c, layers, nlayers);
	r.blobs = blobs_sweep(c, &keep);
out:
	img_records_free(recs, nrecs);
	free(layers);
	free(keep.v);
	free(gone);
	close(lock);
	if (res != NULL)
		*res = r;
	return rc;
}
