/*
 * names.h - a tenant's names for images (sandq image tag), as kept in
 * Redis: the hash key_images() maps "NAME:TAG" (img_name_key()) to one
 * JSON object, written by the sandq command and read by every sandqd, so
 * every host resolves a name the same way:
 *
 *   {"ref": "docker://r.io/team/py@sha256:...",   what the name resolves to
 *    "given": "docker://r.io/team/py:3.12",       what `image tag` was given
 *    "at": 1764115200000}                         when (epoch ms)
 *
 * ref is canonical and never a name (a name given to `image tag` is
 * resolved once, then); a registry's tag is pinned to the digest it named
 * when the name was made (img_pin()). Pure: no I/O.
 */
#ifndef SANDQ_IMAGES_NAMES_H
#define SANDQ_IMAGES_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "ref.h"

#define IMG_NAME_VALUE_MAX 4096		/* bytes of a stored value */

/* One name's value. */
struct img_name_value {
	char ref[IMG_REF_MAX + 1];	/* canonical, not a name */
	char given[IMG_REF_MAX + 1];	/* canonical, as given to image tag */
	int64_t at_ms;
};

/*
 * The JSON text of v (malloc'd, NUL-terminated) into *out. Returns 0, or
 * -EINVAL when v's ref or given is not a canonical reference or ref is a
 * name.
 */
int img_name_value_encode(const struct img_name_value *v, char **out, struct err *e);

/*
 * Reads a stored value (len bytes, not NUL-terminated, at most
 * IMG_NAME_VALUE_MAX): an object with "ref" (a reference, not a name:
 * made canonical), "given" (optional) and "at" (optional). Returns 0, or
 * -EINVAL with e saying what is wrong with it.
 */
int img_name_value_decode(const char *json, size_t len, struct img_name_value *v,
    struct err *e);

#endif
