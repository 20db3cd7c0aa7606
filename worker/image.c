/*
 * image.c - the OCI image a worker's sandboxes are prepared for (image.h).
 *
 * The dispatcher resolved the job's image to a manifest digest in the
 * host's image cache (dispatcher/images.c) and merged its Env and
 * WorkingDir into the job; what only the worker can do is here: read the
 * record (the worker links the cache's record reader alone, never the
 * pull), have the spawner mount the layers (sandbox/layers.c), and find
 * the image's user in those mounts. The cache's own folders are the
 * unpacker's and closed to the worker; the mounts are not (they show the
 * files as the sandboxes' uid), and the user's files are read there.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "../images/user.h"
#include "image.h"

void
worker_image_clear(struct worker_image *img)
{
	free(img->layers);
	memset(img, 0, sizeof(*img));
}

bool
worker_image_is(const struct worker_image *img, const char *digest)
{
	return digest == NULL ? img->digest[0] == '\0' : strcmp(img->digest, digest) == 0;
}

int
worker_image_load(struct img_cache *cache, const struct sandbox_conf *conf,
    const char *digest, struct worker_image *img, struct err *e)
{
	struct img_record *r = NULL;
	struct img_user u;
	struct err ie = { 0 };
	const char **paths = NULL;
	char *store = NULL;
	int rc;

	worker_image_clear(img);
	if (cache == NULL)
		return err_set(e, -ENOSYS, "image %s: this worker has no image cache", digest);
	if ((rc = img_cache_get(cache, digest, &r, &ie)) < 0)
		return err_set(e, rc, "image %s: %s", digest, rc == -ENOENT ?
		    "not in this host's image cache" : ie.msg);
	if (r->nlayers == 0 || r->nlayers > SANDBOX_IMAGE_LAYERS_MAX) {
		rc = err_set(e, -EINVAL, "image '%.200s': %zu layers (a sandbox takes 1 "
		    "to %d)", r->reference, r->nlayers, SANDBOX_IMAGE_LAYERS_MAX);
		goto out;
	}
	/* The record lists the base first; an overlay takes the top first. */
	img->layers = xcalloc(r->nlayers, sizeof(*img->layers));
	for (size_t i = 0; i < r->nlayers; i++)
		snprintf(img->layers[i], sizeof(img->layers[i]), "%.64s",
		    r->layers[r->nlayers - 1 - i].digest + 7);
	img->sbx.layers = (const char (*)[65])img->layers;
	img->sbx.nlayers = r->nlayers;
	if ((rc = sandbox_image_layers(conf, &img->sbx, &ie)) < 0) {
		rc = err_set(e, rc, "image '%.200s': %s", r->reference, ie.msg);
		goto out;
	}
	paths = xcalloc(r->nlayers, sizeof(*paths));
	store = xcalloc(r->nlayers, PATH_MAX);
	for (size_t i = 0; i < r->nlayers; i++) {
		snprintf(store + i * PATH_MAX, PATH_MAX, "%s/layers/%s", conf->run_dir,
		    img->layers[i]);
		paths[i] = store + i * PATH_MAX;
	}
	if ((rc = img_user_resolve(r->user, paths, r->nlayers, &u, &ie)) < 0) {
		rc = err_set(e, -EINVAL, "image '%.200s': %s", r->reference, ie.msg);
		goto out;
	}
	img->sbx.uid = u.uid;
	img->sbx.gid = u.gid;
	snprintf(img->digest, sizeof(img->digest), "%s", digest);
	rc = 0;
out:
	free(paths);
	free(store);
	img_record_free(r);
	if (rc < 0)
		worker_image_clear(img);
	return rc;
}
