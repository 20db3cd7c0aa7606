/*
 * pin.h - a registry's tag pinned to the digest it names now.
 *
 * `sandq image tag NAME docker://r.io/team/py:3.12` keeps the name on the
 * digest the tag named at that moment, so every host and every later job
 * runs the same bytes until the name is tagged again, whatever happens to
 * the tag in its registry. The digest is the SHA-256 of the top manifest
 * (or image index) the registry serves for the tag, as `skopeo inspect
 * --raw` fetches it: the digest `docker://...@sha256:...` pulls by.
 */
#ifndef SANDQ_IMAGES_PIN_H
#define SANDQ_IMAGES_PIN_H

#include <stdbool.h>

#include "../common/err.h"
#include "ref.h"

struct img_pin_opts {
	bool plain_http;		/* the registry speaks plain HTTP */
	unsigned timeout_ms;		/* skopeo's run, at most (0: 60 s) */
	const char *home;		/* skopeo's HOME and TMPDIR: a private folder,
					 * or NULL for a temporary one (removed after) */
	const char *skopeo;		/* the binary, or NULL for SKOPEO_BIN */
};

/*
 * out = in, with a docker:// reference's tag replaced by the digest the
 * registry serves for it now (in's tag kept nowhere: out is pinned). A
 * reference with a digest already, host, and the file transports are
 * copied as they are (their content is the file's on each host). Returns
 * 0, -EINVAL for a name, or the failure of the fetch with e naming the
 * image ("image 'docker://...': skopeo inspect failed: ...").
 */
int img_pin(const struct img_ref *in, const struct img_pin_opts *o,
    struct img_ref *out, struct err *e);

#endif
