/*
 * patch.h - a snapshot as an image plus a patch of 4 KiB blocks.
 *
 * A worker keeps a sandbox's snapshot as a full image it read from the
 * store (sealed memfd) and a patch: the blocks that the jobs since then
 * rewrote. Each job's sandbox opens the image with the patch over it
 * (agentfs/cowimg.h), writes its own changes as new blocks, and hands back
 * the new cumulative patch: a job costs what it changed, never a copy of
 * the image. The store turns image + patch into chunks
 * (store_sandbox_commit_patch()).
 *
 * Wire format (all integers little-endian), what patch_parse() accepts:
 *
 *   "SQPATCH1"      8 bytes, the magic
 *   size            u64: the image's size with the patch applied
 *   block_size      u32: PATCH_BLOCK (4096)
 *   count           u32: the number of blocks that follow
 *   count times:    u32 index, then block_size bytes: the block at
 *                   index * block_size of the patched image
 *
 * Blocks are sorted by index, each index at most once, and every block
 * starts below size (a last block may reach past size; bytes past size are
 * not part of the image). The bytes of the patched image at offset o are
 * those of the block holding o if there is one, else the image's own
 * bytes if o is below the image's length, else zeros. A patch is made by
 * our own code but parsed as if it were not: patch_parse() checks every
 * field and the exact length.
 */
#ifndef SANDQ_AGENTFS_PATCH_H
#define SANDQ_AGENTFS_PATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define PATCH_MAGIC "SQPATCH1"
#define PATCH_BLOCK 4096u			/* bytes of a block */
#define PATCH_HEADER 24u			/* magic, size, block size, count */
#define PATCH_ENTRY (4u + PATCH_BLOCK)		/* index + block */
#define PATCH_SIZE_MAX ((uint64_t)1000000000)	/* an image's size, at most */

/* A parsed patch: a view into the bytes given to patch_parse(). */
struct patch {
	uint64_t size;			/* the patched image's size */
	uint32_t count;			/* blocks */
	const unsigned char *entries;	/* count entries of PATCH_ENTRY bytes */
};

/* The empty patch over an image of size bytes. */
void patch_empty(struct patch *p, uint64_t size);

/*
 * Checks data/len against the format above and fills p (a view: data must
 * outlive it). Returns 0 or -EBADMSG with e naming the field.
 */
int patch_parse(const void *data, size_t len, struct patch *p, struct err *e);

/* Block i (0 <= i < count) of p: its index and its bytes. */
uint32_t patch_index(const struct patch *p, uint32_t i);
const unsigned char *patch_block(const struct patch *p, uint32_t i);

/* The block of p at block index idx, or NULL (binary search). */
const unsigned char *patch_find(const struct patch *p, uint32_t idx);

/* Bytes of a patch of count blocks. */
size_t patch_bytes(uint32_t count);

/*
 * Writes the header of a patch of count blocks over an image of size
 * bytes to out (PATCH_HEADER bytes). The caller appends the entries.
 */
void patch_header(unsigned char *out, uint64_t size, uint32_t count);

/*
 * Copies len bytes at offset off of the image img (img_len bytes) with p
 * applied into out. The range must lie below p->size.
 */
void patch_read(const unsigned char *img, size_t img_len, const struct patch *p,
    uint64_t off, size_t len, unsigned char *out);

#endif
