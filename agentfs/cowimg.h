/*
 * cowimg.h - a writable SQLite connection over an image and a patch, with
 * copy-on-write 4 KiB blocks in memory.
 *
 * A worker keeps a sandbox's snapshot as a read-only image plus a patch of
 * the blocks rewritten since (agentfs/patch.h). A job opens the two as one
 * writable database without copying the image, changes it, and hands back
 * the new cumulative patch:
 *
 *   cowimg_open(img, patch) -> SQL on the sqlite3 * ->
 *   cowimg_patch() or cowimg_patch_write() -> cowimg_close()
 *
 * The connection runs with journal_mode=MEMORY, locking_mode=EXCLUSIVE and
 * temp_store=MEMORY, and its VFS ("sandq-cowimg") opens no other file: the
 * caller must not change those pragmas or ATTACH files. The bytes are not
 * checked here; a caller that opens a tenant's snapshot adds its own checks
 * (defensive mode, quick_check, as agentfs/agentfs.c does).
 */
#ifndef SANDQ_AGENTFS_COWIMG_H
#define SANDQ_AGENTFS_COWIMG_H

#include <sqlite3.h>
#include <stddef.h>

#include "../common/err.h"

/*
 * Opens a read-write connection to the image img (img_len bytes; 0 for
 * none) with the patch (patch_len bytes in the patch.h format; NULL/0 for
 * none) over it. Nothing is copied: img and patch must stay mapped and
 * unchanged until cowimg_close(); they are never written. Changes are kept
 * as 4 KiB blocks in memory. The patch's size is the database's size (an
 * empty patch: img_len). Returns 0 with *db, or -errno with e (-EBADMSG
 * for a bad patch, via patch_parse()). Connections are independent and may
 * be opened from several threads at once.
 */
int cowimg_open(const void *img, size_t img_len, const void *patch,
    size_t patch_len, sqlite3 **db, struct err *e);

/*
 * The connection's cumulative patch, patch.h format: every block of the
 * given patch and every block written since (its own win), sorted, with
 * the database's current size; blocks wholly past the size are dropped.
 * malloc'd into *out (the caller frees it). Returns 0, -EINVAL (not a
 * cowimg connection), -EBUSY (inside a transaction: the file may not hold
 * it yet), -ENODATA (an empty database, which patch.h cannot express) or
 * -ENOMEM.
 */
int cowimg_patch(sqlite3 *db, void **out, size_t *len, struct err *e);

/*
 * Writes the same patch into the file descriptor fd (e.g. a memfd) at its
 * current offset instead, without building it in memory first; returns its
 * length in *len. Errors as cowimg_patch(), plus -errno of write(2);
 * after a write error fd holds part of a patch (patch_parse() refuses it).
 */
int cowimg_patch_write(sqlite3 *db, int fd, size_t *len, struct err *e);

/*
 * The database's whole current image (img + patch + own blocks), malloc'd
 * into *out (the caller frees it): for exports and tests. Returns 0,
 * -EINVAL, -EBUSY or -ENOMEM as above; an empty database gives *len 0 and
 * a 1-byte allocation.
 */
int cowimg_image(sqlite3 *db, void **out, size_t *len, struct err *e);

/*
 * Blocks written through this connection and still inside the database
 * (not counting the patch it was opened with); 0 for a connection that is
 * not a cowimg one.
 */
size_t cowimg_dirty_blocks(sqlite3 *db);

/*
 * sqlite3_close_v2() and frees the layered file. NULL is a no-op. The
 * caller finalizes its statements first; one left open keeps the file (and
 * the need for img and patch) alive until it is finalized.
 */
void cowimg_close(sqlite3 *db);

#endif
