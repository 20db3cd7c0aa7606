/*
 * image.h - the OCI image a worker's next sandbox is prepared for: read
 * from the image cache by its digest (the job's image_id), its layers
 * held mounted by the spawner, its user resolved.
 *
 * Lifecycle: worker_image_load(w's cache, conf, digest) -> img (its
 * sandbox_image for sandbox_prepare()) -> worker_image_clear(img). A
 * cleared img (digest "") is the host's image.
 */
#ifndef SANDQ_WORKER_IMAGE_H
#define SANDQ_WORKER_IMAGE_H

#include <stdbool.h>

#include "../common/err.h"
#include "../images/cache.h"
#include "../proto/job.h"
#include "../sandbox/sandbox.h"

struct worker_image {
	char digest[JOB_IMAGE_ID_LEN + 1];	/* its manifest digest; "": the host's */
	char (*layers)[65];			/* hex digits, top first (owned) */
	struct sandbox_image sbx;		/* what sandbox_prepare() takes */
};

/*
 * Loads the image of manifest digest from cache into *img (cleared
 * first): its record, its layers (mounted for conf's sandboxes by the
 * spawner: sandbox_image_layers()), and its User, resolved from the
 * layers' own files as the job's uid and gid. Returns 0; or -ENOENT
 * (not in the cache), -EINVAL (a user it cannot resolve, too many
 * layers) or -errno with e naming the image, and *img cleared.
 */
int worker_image_load(struct img_cache *cache, const struct sandbox_conf *conf,
    const char *digest, struct worker_image *img, struct err *e);
/* Frees what img holds; it is the host's image afterwards. */
void worker_image_clear(struct worker_image *img);
/* Whether img is the image of digest (NULL: the host's). */
bool worker_image_is(const struct worker_image *img, const char *digest);

#endif
