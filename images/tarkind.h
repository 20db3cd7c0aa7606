/*
 * tarkind.h - what a tarball given to `sandq image import` is, read from
 * its entries' names: an OCI image layout in a tar (oci-archive:), a
 * `docker save` tarball (docker-archive:), or a root filesystem to pack
 * (images/pack.h). Only the headers are read, with the same bounds and
 * the same in-library filters as the packer.
 */
#ifndef SANDQ_IMAGES_TARKIND_H
#define SANDQ_IMAGES_TARKIND_H

#include "../common/err.h"

enum img_tar_kind {
	IMG_TAR_ROOTFS,		/* anything else: a root filesystem */
	IMG_TAR_OCI,		/* oci-layout and index.json at its top */
	IMG_TAR_DOCKER,		/* manifest.json at its top, no oci-layout */
};

/*
 * Reads every header of the tarball on fd (plain or compressed) from its
 * current offset, skipping the data, and says which kind it is (*kind).
 * `what` names it in messages (sandq's own text: escape a file name
 * first). Returns 0, or -EBADMSG with e for a file that is empty, not a
 * tar archive, truncated or corrupt (naming the last entry read whole),
 * -E2BIG past IMG_PACK_ENTRIES_DEFAULT entries, -errno otherwise.
 */
int img_tar_kind(int fd, const char *what, enum img_tar_kind *kind, struct err *e);

/* "a root filesystem tarball", "an OCI archive" or "a docker-archive". */
const char *img_tar_kind_name(enum img_tar_kind k);

#endif
