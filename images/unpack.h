/*
 * unpack.h - unpacking one image layer (a tenant's tar stream) into a
 * folder. Declarations only, written by the cache's branch so that it
 * compiles: the unpacker's own branch owns this header and its contract,
 * and the lead keeps that one when the branches merge.
 */
#ifndef SANDQ_IMAGES_UNPACK_H
#define SANDQ_IMAGES_UNPACK_H

#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"

struct img_unpack_limits { uint64_t max_bytes; uint64_t max_entries; uint32_t max_ratio; };
struct img_unpack_stats { uint64_t bytes, entries, whiteouts, opaque; uint64_t dropped_devices, cleared_setid; };

/* dest must not exist; it appears complete or not at all. */
int img_unpack_layer(int fd, const char *dest, const char *what, const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e);
int img_unpack_layer_as(uid_t uid, gid_t gid, int fd, const char *dest, const char *what, const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e);

#endif
