/*
 * cowimg.c - a SQLite VFS whose only file is an image with a patch over
 * it, written copy-on-write in 4 KiB blocks kept in memory.
 *
 * A job's sandbox opens its snapshot (read-only image + patch, patch.h) as
 * a writable database in a few microseconds instead of copying ~12 MB into
 * fresh pages, and hands back the new cumulative patch: its cost is what
 * it changed.
 *
 * DESIGN
 * The layers of a byte, top first: the connection's own block, the
 * patch's block (patch_find), the image, zeros. The first write to a block
 * copies its current bytes into a malloc'd block; the image and the patch
 * are never written (tests map them PROT_READ). Own blocks live in an
 * open-addressing hash table keyed by block index (Fibonacci hashing,
 * linear probing, at most half full): O(1) per read and write, and a sort
 * only when a patch is made.
 *
 * A shrink (VACUUM) frees the own blocks past the new size and zeroes the
 * tail of the one it cuts; base_limit records the lowest size ever set,
 * past which the patch and the image no longer count (a regrown file reads
 * zeros there, not stale bytes). A patch made later carries a block for
 * each base block whose reading would otherwise differ (cow_iter).
 *
 * The VFS ("sandq-cowimg", registered once, not as the default) opens only
 * main databases, and only inside cowimg_open(): the layers reach xOpen
 * through a thread-local hand-off slot that xOpen empties, not through the
 * file name. A name that encodes a pointer would let any sqlite3_open_v2()
 * naming this VFS make xOpen dereference what it likes; the slot makes a
 * stray open fail with SQLITE_CANTOPEN, and connections opened at once in
 * several threads cannot take each other's layers. Journals, WAL and temp
 * files are never opened: the connection runs with journal_mode=MEMORY
 * (held there by SQLITE_FCNTL_PRAGMA), locking_mode=EXCLUSIVE and
 * temp_store=MEMORY, xOpen refuses any other file and xAccess says nothing
 * exists. Bytes 18 and 19 of the header read as 1 when they say 2 (WAL),
 * so an image saved in WAL mode opens with the journal in memory.
 *
 * Sections: Blocks, Layers, File, VFS, Patches, API.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cowimg.h"
#include "patch.h"

#define COW_VFS "sandq-cowimg"
#define COW_NAME "cowimg"		/* the main database's name */
#define COW_PATH_MAX 64			/* mxPathname: names are ours */
#define COW_SLOTS_MIN 16u		/* smallest hash table */
#define COW_BATCH 64			/* patch entries per writev() */

/* A slot of the own-block table; data NULL marks it empty. */
struct cow_slot {
	uint32_t idx;			/* block index */
	unsigned char *data;		/* PATCH_BLOCK bytes, malloc'd */
};

/* The layered file: what cowimg_open() binds to the main database. */
struct cowimg {
	const unsigned char *img;	/* the image, never written */
	size_t img_len;			/* its bytes */
	struct patch patch;		/* the patch over it, never written */
	uint64_t size;			/* the database's current size */
	uint64_t base_limit;		/* patch and image count below this */
	struct cow_slot *slots;		/* own blocks, open addressing */
	size_t cap;			/* slots: 0 or a power of two */
	unsigned shift;			/* 32 - log2(cap), for the hash */
	size_t count;			/* own blocks */
	int lock;			/* SQLITE_LOCK_*, for xUnlock */
};

/* The sqlite3_file subclass SQLite allocates (szOsFile) for us. */
struct cow_file {
	sqlite3_file base;		/* pMethods: cow_io */
	struct cowimg *c;		/* owned: freed by xClose */
};

/* The layers cowimg_open() hands to the xOpen it is about to cause. */
static _Thread_local struct cowimg *cow_pending;

static sqlite3_vfs *cow_base;		/* the default VFS, for delegation */

static void
le32_put(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Blocks that hold bytes bytes. */
static uint32_t
blocks_of(uint64_t bytes)
{
	return (uint32_t)((bytes + PATCH_BLOCK - 1) / PATCH_BLOCK);
}

/*** Blocks ***/

static size_t
slot_hash(const struct cowimg *c, uint32_t idx)
{
	return (size_t)((idx * UINT32_C(0x9E3779B1)) >> c->shift);
}

/* Own block idx, or NULL. */
static unsigned char *
block_find(const struct cowimg *c, uint32_t idx)
{
	size_t mask = c->cap - 1;

	if (c->cap == 0)
		return NULL;
	for (size_t i = slot_hash(c, idx);; i = (i + 1) & mask) {
		if (c->slots[i].data == NULL)
			return NULL;
		if (c->slots[i].idx == idx)
			return c->slots[i].data;
	}
}

/* Puts a block known to be absent into slots that have room. */
static void
slot_put(struct cowimg *c, uint32_t idx, unsigned char *data)
{
	size_t mask = c->cap - 1, i = slot_hash(c, idx);

	while (c->slots[i].data != NULL)
		i = (i + 1) & mask;
	c->slots[i].idx = idx;
	c->slots[i].data = data;
	c->count++;
}

/*
 * Rebuilds the table with cap slots, keeping the blocks below keep and
 * freeing the others. Returns 0 or -ENOMEM with nothing changed.
 */
static int
table_rebuild(struct cowimg *c, size_t cap, uint32_t keep)
{
	struct cow_slot *old = c->slots;
	size_t old_cap = c->cap;
	unsigned shift = 32;

	for (size_t n = cap; n > 1; n >>= 1)
		shift--;
	if ((c->slots = calloc(cap, sizeof(*c->slots))) == NULL) {
		c->slots = old;
		return -ENOMEM;
	}
	c->cap = cap;
	c->shift = shift;
	c->count = 0;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i].data == NULL)
			continue;
		if (old[i].idx < keep)
			slot_put(c, old[i].idx, old[i].data);
		else
			free(old[i].data);
	}
	free(old);
	return 0;
}

static void
table_free(struct cowimg *c)
{
	for (size_t i = 0; i < c->cap; i++)
		free(c->slots[i].data);
	free(c->slots);
	c->slots = NULL;
	c->cap = c->count = 0;
}

/*** Layers ***/

/*
 * Copies n bytes at off, all inside one block, from below the own blocks:
 * the patch's block or the image up to base_limit, zeros past it.
 */
static void
base_copy(const struct cowimg *c, uint64_t off, size_t n, unsigned char *out)
{
	size_t valid = 0;

	if (off < c->base_limit) {
		const unsigned char *pb;

		valid = c->base_limit - off < n ?
		    (size_t)(c->base_limit - off) : n;
		pb = patch_find(&c->patch, (uint32_t)(off / PATCH_BLOCK));
		if (pb != NULL)
			memcpy(out, pb + off % PATCH_BLOCK, valid);
		else if (off >= c->img_len)
			memset(out, 0, valid);
		else {
			size_t have = c->img_len - off < valid ?
			    (size_t)(c->img_len - off) : valid;

			memcpy(out, c->img + off, have);
			memset(out + have, 0, valid - have);
		}
	}
	memset(out + valid, 0, n - valid);
}

/*
 * Own block idx, made on first use from the bytes it has now (below
 * base_limit from the patch or the image, zeros above) unless the caller
 * is about to overwrite all of it (whole). NULL when out of memory.
 */
static unsigned char *
block_own(struct cowimg *c, uint32_t idx, bool whole)
{
	unsigned char *b = block_find(c, idx);

	if (b != NULL)
		return b;
	if ((c->count + 1) * 2 > c->cap &&
	    table_rebuild(c, c->cap ? c->cap * 2 : COW_SLOTS_MIN,
	    UINT32_MAX) < 0)
		return NULL;
	if ((b = malloc(PATCH_BLOCK)) == NULL)
		return NULL;
	if (!whole)
		base_copy(c, (uint64_t)idx * PATCH_BLOCK, PATCH_BLOCK, b);
	slot_put(c, idx, b);
	return b;
}

/* Copies len bytes at off (below size) of the layered file into out. */
static void
layers_copy(const struct cowimg *c, uint64_t off, size_t len,
    unsigned char *out)
{
	while (len > 0) {
		uint32_t idx = (uint32_t)(off / PATCH_BLOCK);
		size_t in = (size_t)(off % PATCH_BLOCK), n = PATCH_BLOCK - in;
		const unsigned char *b;

		if (n > len)
			n = len;
		if ((b = block_find(c, idx)) != NULL)
			memcpy(out, b + in, n);
		else
			base_copy(c, off, n, out);
		out += n;
		off += n;
		len -= n;
	}
}

/*** File ***/

static struct cowimg *
cow_of(sqlite3_file *file)
{
	return ((struct cow_file *)file)->c;
}

/* Frees the layered file: SQLite closes it once, at sqlite3_close(). */
static int
cow_close(sqlite3_file *file)
{
	struct cow_file *f = (struct cow_file *)file;

	if (f->c != NULL) {
		table_free(f->c);
		free(f->c);
		f->c = NULL;
	}
	return SQLITE_OK;
}

/*
 * Reads as SQLite requires: past the size, zeros and
 * SQLITE_IOERR_SHORT_READ. The header's write and read versions (bytes 18
 * and 19) read 2 (WAL) as 1 (rollback), since this connection's journal
 * is in memory and no -wal file may exist.
 */
static int
cow_read(sqlite3_file *file, void *buf, int amt, sqlite3_int64 off)
{
	struct cowimg *c = cow_of(file);
	unsigned char *out = buf;
	uint64_t o = (uint64_t)off;
	size_t have = 0;

	if (off < 0 || amt < 0)
		return SQLITE_IOERR_READ;
	if (o < c->size)
		have = c->size - o < (uint64_t)amt ? (size_t)(c->size - o) :
		    (size_t)amt;
	layers_copy(c, o, have, out);
	for (uint64_t v = 18; v <= 19; v++)
		if (v >= o && v < o + have && out[v - o] == 2)
			out[v - o] = 1;
	if (have < (size_t)amt) {
		memset(out + have, 0, (size_t)amt - have);
		return SQLITE_IOERR_SHORT_READ;
	}
	return SQLITE_OK;
}

/*
 * Writes copy-on-write, block by block, growing the size as each block is
 * done so a failure halfway keeps "own bytes past the size are zero".
 */
static int
cow_write(sqlite3_file *file, const void *buf, int amt, sqlite3_int64 off)
{
	struct cowimg *c = cow_of(file);
	const unsigned char *src = buf;
	uint64_t o = (uint64_t)off;
	size_t len = (size_t)amt;

	if (off < 0 || amt < 0)
		return SQLITE_IOERR_WRITE;
	if (o > PATCH_SIZE_MAX || len > PATCH_SIZE_MAX - o)
		return SQLITE_FULL;
	while (len > 0) {
		uint32_t idx = (uint32_t)(o / PATCH_BLOCK);
		size_t in = (size_t)(o % PATCH_BLOCK), n = PATCH_BLOCK - in;
		unsigned char *b;

		if (n > len)
			n = len;
		if ((b = block_own(c, idx, n == PATCH_BLOCK)) == NULL)
			return SQLITE_IOERR_NOMEM;
		memcpy(b + in, src, n);
		src += n;
		o += n;
		len -= n;
		if (o > c->size)
			c->size = o;
	}
	return SQLITE_OK;
}

/*
 * Shrinks or grows. A shrink frees the own blocks past the new size,
 * zeroes the tail of the block it cuts and lowers base_limit, so that
 * bytes past the old size read as zeros if the file grows again.
 */
static int
cow_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct cowimg *c = cow_of(file);
	uint64_t sz = (uint64_t)size;

	if (size < 0)
		return SQLITE_IOERR_TRUNCATE;
	if (sz > PATCH_SIZE_MAX)
		return SQLITE_FULL;
	if (sz < c->size) {
		uint32_t keep = blocks_of(sz);
		unsigned char *b;

		if (c->count > 0 && table_rebuild(c, c->cap, keep) < 0)
			return SQLITE_IOERR_NOMEM;
		if (sz % PATCH_BLOCK != 0 &&
		    (b = block_find(c, (uint32_t)(sz / PATCH_BLOCK))) != NULL)
			memset(b + sz % PATCH_BLOCK, 0,
			    PATCH_BLOCK - sz % PATCH_BLOCK);
		if (sz < c->base_limit)
			c->base_limit = sz;
	}
	c->size = sz;
	return SQLITE_OK;
}

/* Memory needs no sync. */
static int
cow_sync(sqlite3_file *file, int flags)
{
	(void)file;
	(void)flags;
	return SQLITE_OK;
}

static int
cow_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
	*size = (sqlite3_int64)cow_of(file)->size;
	return SQLITE_OK;
}

/* One connection per file, so locks only record the level. */
static int
cow_lock(sqlite3_file *file, int level)
{
	cow_of(file)->lock = level;
	return SQLITE_OK;
}

static int
cow_unlock(sqlite3_file *file, int level)
{
	cow_of(file)->lock = level;
	return SQLITE_OK;
}

/* No other connection can hold a lock on this file. */
static int
cow_check_reserved(sqlite3_file *file, int *out)
{
	(void)file;
	*out = 0;
	return SQLITE_OK;
}

/*
 * SIZE_HINT: blocks are allocated as they are written, so there is
 * nothing to reserve (the size cap is enforced by xWrite). PRAGMA: the
 * journal stays in memory; any other journal mode would need a file (and
 * OFF would make ROLLBACK corrupt the database), so it is refused. Every
 * other op, mmap included, is not ours: SQLITE_NOTFOUND.
 */
static int
cow_file_control(sqlite3_file *file, int op, void *arg)
{
	(void)file;
	switch (op) {
	case SQLITE_FCNTL_SIZE_HINT:
		return SQLITE_OK;
	case SQLITE_FCNTL_VFSNAME:
		*(char **)arg = sqlite3_mprintf("%s", COW_VFS);
		return SQLITE_OK;
	case SQLITE_FCNTL_PRAGMA: {
		char **a = arg;

		if (sqlite3_stricmp(a[1], "journal_mode") != 0 ||
		    a[2] == NULL || sqlite3_stricmp(a[2], "memory") == 0)
			return SQLITE_NOTFOUND;
		a[0] = sqlite3_mprintf("%s: journal_mode is memory, not %s",
		    COW_VFS, a[2]);
		return SQLITE_ERROR;
	}
	default:
		return SQLITE_NOTFOUND;
	}
}

static int
cow_sector_size(sqlite3_file *file)
{
	(void)file;
	return PATCH_BLOCK;
}

/*
 * Nothing here survives a crash, so only what a live reader can see
 * matters. ATOMIC4K: an aligned 4 KiB write is one memcpy into one block.
 * SAFE_APPEND: the size grows only after the bytes are in place.
 * POWERSAFE_OVERWRITE: a write changes no byte outside its range.
 * SEQUENTIAL: writes land in the order they are made, so SQLite need not
 * order them with syncs.
 */
static int
cow_device(sqlite3_file *file)
{
	(void)file;
	return SQLITE_IOCAP_ATOMIC4K | SQLITE_IOCAP_SAFE_APPEND |
	    SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_SEQUENTIAL;
}

/* Version 1: no shared memory (no WAL) and no mmap. */
static const sqlite3_io_methods cow_io = {
	.iVersion = 1,
	.xClose = cow_close,
	.xRead = cow_read,
	.xWrite = cow_write,
	.xTruncate = cow_truncate,
	.xSync = cow_sync,
	.xFileSize = cow_file_size,
	.xLock = cow_lock,
	.xUnlock = cow_unlock,
	.xCheckReservedLock = cow_check_reserved,
	.xFileControl = cow_file_control,
	.xSectorSize = cow_sector_size,
	.xDeviceCharacteristics = cow_device,
};

/*** VFS ***/

/*
 * Opens the main database of the connection cowimg_open() is making, and
 * nothing else: the hand-off slot is emptied, so a second main database
 * (ATTACH, a stray sqlite3_open_v2) fails, as do journals and temp files.
 */
static int
vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
    int *out_flags)
{
	struct cow_file *f = (struct cow_file *)file;

	(void)vfs;
	f->base.pMethods = NULL;
	f->c = NULL;
	if (name == NULL || !(flags & SQLITE_OPEN_MAIN_DB) ||
	    cow_pending == NULL)
		return SQLITE_CANTOPEN;
	f->c = cow_pending;
	cow_pending = NULL;
	f->base.pMethods = &cow_io;
	if (out_flags != NULL)
		*out_flags = flags;
	return SQLITE_OK;
}

/* Nothing to delete: no file but the main database ever exists. */
static int
vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	(void)name;
	(void)sync_dir;
	return SQLITE_OK;
}

/* No hot journal, no -wal: SQLite must never look for one on disk. */
static int
vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void)vfs;
	(void)name;
	(void)flags;
	*out = 0;
	return SQLITE_OK;
}

/* Names are ours and not paths: copied as they are, no cwd. */
static int
vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
	size_t len = strlen(name);

	(void)vfs;
	if (n <= 0 || len >= (size_t)n)
		return SQLITE_CANTOPEN;
	memcpy(out, name, len + 1);
	return SQLITE_OK;
}

/* No extension loading through this VFS. */
static void *
vfs_dl_open(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	(void)name;
	return NULL;
}

static void
vfs_dl_error(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	if (n > 0)
		sqlite3_snprintf(n, msg, "%s: no extensions", COW_VFS);
}

static void
(*vfs_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
	(void)vfs;
	(void)h;
	(void)sym;
	return NULL;
}

static void
vfs_dl_close(sqlite3_vfs *vfs, void *h)
{
	(void)vfs;
	(void)h;
}

static int
vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return cow_base->xRandomness(cow_base, n, out);
}

static int
vfs_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return cow_base->xSleep(cow_base, us);
}

static int
vfs_current_time(sqlite3_vfs *vfs, double *now)
{
	(void)vfs;
	return cow_base->xCurrentTime(cow_base, now);
}

static int
vfs_last_error(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	if (cow_base->xGetLastError == NULL)
		return 0;
	return cow_base->xGetLastError(cow_base, n, msg);
}

static int
vfs_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *now)
{
	double d;
	int rc;

	(void)vfs;
	if (cow_base->iVersion >= 2 && cow_base->xCurrentTimeInt64 != NULL)
		return cow_base->xCurrentTimeInt64(cow_base, now);
	rc = cow_base->xCurrentTime(cow_base, &d);
	*now = (sqlite3_int64)(d * 86400000.0);
	return rc;
}

/* Not const: sqlite3_vfs_register() links it into SQLite's list. */
static sqlite3_vfs cow_vfs = {
	.iVersion = 2,
	.szOsFile = (int)sizeof(struct cow_file),
	.mxPathname = COW_PATH_MAX,
	.zName = COW_VFS,
	.xOpen = vfs_open,
	.xDelete = vfs_delete,
	.xAccess = vfs_access,
	.xFullPathname = vfs_full_pathname,
	.xDlOpen = vfs_dl_open,
	.xDlError = vfs_dl_error,
	.xDlSym = vfs_dl_sym,
	.xDlClose = vfs_dl_close,
	.xRandomness = vfs_randomness,
	.xSleep = vfs_sleep,
	.xCurrentTime = vfs_current_time,
	.xGetLastError = vfs_last_error,
	.xCurrentTimeInt64 = vfs_current_time64,
};

static pthread_once_t vfs_once = PTHREAD_ONCE_INIT;
static int vfs_rc = SQLITE_ERROR;	/* of the one registration */

static void
vfs_register_once(void)
{
	if ((cow_base = sqlite3_vfs_find(NULL)) == NULL)
		return;
	vfs_rc = sqlite3_vfs_register(&cow_vfs, 0);
}

/*** Patches ***/

/*
 * Walks the blocks of the cumulative patch in index order, merging three
 * sorted sources below the size: own blocks; the patch's blocks that start
 * below base_limit; and, after a shrink and regrowth, the blocks from
 * base_limit up to the image's end, which must be written out (as zeros
 * past base_limit) or a reader of the patch would see the image there.
 */
struct cow_iter {
	const struct cowimg *c;
	struct cow_slot *own;		/* own blocks sorted by index */
	size_t n_own, i_own;
	uint32_t i_patch;		/* next entry of c->patch */
	uint32_t patch_end;		/* patch entries below this count */
	uint32_t stale, stale_end;	/* base blocks past a shrink */
	unsigned char scratch[PATCH_BLOCK];	/* a block made up here */
};

static int
slot_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct cow_slot *)a)->idx;
	uint32_t y = ((const struct cow_slot *)b)->idx;

	return (x > y) - (x < y);
}

static int
iter_init(struct cow_iter *it, const struct cowimg *c)
{
	uint64_t stale_to = c->size < c->img_len ? c->size : c->img_len;
	uint32_t blocks = blocks_of(c->size), below = blocks_of(c->base_limit);
	size_t n = 0;

	memset(it, 0, offsetof(struct cow_iter, scratch));
	it->c = c;
	if (c->count > 0 &&
	    (it->own = malloc(c->count * sizeof(*it->own))) == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < c->cap; i++)
		if (c->slots[i].data != NULL)
			it->own[n++] = c->slots[i];
	if (n > 1)
		qsort(it->own, n, sizeof(*it->own), slot_cmp);
	it->n_own = n;
	it->patch_end = below < blocks ? below : blocks;
	if (stale_to > c->base_limit) {
		it->stale = (uint32_t)(c->base_limit / PATCH_BLOCK);
		it->stale_end = blocks_of(stale_to);
	}
	return 0;
}

static void
iter_rewind(struct cow_iter *it)
{
	it->i_own = 0;
	it->i_patch = 0;
	if (it->stale_end > 0)
		it->stale = (uint32_t)(it->c->base_limit / PATCH_BLOCK);
}

/*
 * The next block: its index and, if data is not NULL, its bytes (own,
 * patch or image memory, or it->scratch until the next call).
 */
static bool
iter_next(struct cow_iter *it, uint32_t *idx, const unsigned char **data)
{
	const struct cowimg *c = it->c;
	const unsigned char *pb = NULL, *own = NULL;
	uint32_t best = UINT32_MAX;
	bool any = false;

	if (it->i_own < it->n_own) {
		best = it->own[it->i_own].idx;
		any = true;
	}
	if (it->i_patch < c->patch.count &&
	    patch_index(&c->patch, it->i_patch) < it->patch_end) {
		uint32_t p = patch_index(&c->patch, it->i_patch);

		if (!any || p < best)
			best = p;
		any = true;
	}
	if (it->stale < it->stale_end) {
		if (!any || it->stale < best)
			best = it->stale;
		any = true;
	}
	if (!any)
		return false;
	if (it->i_own < it->n_own && it->own[it->i_own].idx == best)
		own = it->own[it->i_own++].data;
	if (it->i_patch < c->patch.count &&
	    patch_index(&c->patch, it->i_patch) < it->patch_end &&
	    patch_index(&c->patch, it->i_patch) == best)
		pb = patch_block(&c->patch, it->i_patch++);
	if (it->stale < it->stale_end && it->stale == best)
		it->stale++;
	*idx = best;
	if (data == NULL)
		return true;
	if (own != NULL)
		*data = own;
	else if ((uint64_t)(best + 1) * PATCH_BLOCK <= c->base_limit &&
	    pb != NULL)
		*data = pb;
	else if ((uint64_t)(best + 1) * PATCH_BLOCK <= c->base_limit &&
	    (uint64_t)(best + 1) * PATCH_BLOCK <= c->img_len)
		*data = c->img + (size_t)best * PATCH_BLOCK;
	else {
		base_copy(c, (uint64_t)best * PATCH_BLOCK, PATCH_BLOCK,
		    it->scratch);
		*data = it->scratch;
	}
	return true;
}

static uint32_t
iter_count(struct cow_iter *it)
{
	uint32_t n = 0, idx;

	while (iter_next(it, &idx, NULL))
		n++;
	iter_rewind(it);
	return n;
}

/* writev() all of iov, through partial writes and EINTR. */
static int
writev_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/*** API ***/

static int
sql_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	default:
		return -EIO;
	}
}

/* Runs a pragma and checks its one-word answer (want NULL: none). */
static int
pragma_set(sqlite3 *db, const char *sql, const char *want, struct err *e)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *got;
	int rc;

	if ((rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL)) != SQLITE_OK)
		return err_set(e, sql_errno(rc), "cowimg: %s: %s", sql,
		    sqlite3_errmsg(db));
	rc = sqlite3_step(st);
	got = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		rc = err_set(e, sql_errno(rc), "cowimg: %s: %s", sql,
		    sqlite3_errmsg(db));
	else if (want != NULL &&
	    (got == NULL || sqlite3_stricmp((const char *)got, want) != 0))
		rc = err_set(e, -EIO, "cowimg: %s: got %s", sql,
		    got ? (const char *)got : "nothing");
	else
		rc = 0;
	sqlite3_finalize(st);
	return rc;
}

/* The layered file of db, or NULL if db is not a cowimg connection. */
static struct cowimg *
cow_get(sqlite3 *db)
{
	sqlite3_file *f = NULL;

	if (db == NULL || sqlite3_file_control(db, "main",
	    SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || f == NULL ||
	    f->pMethods != &cow_io)
		return NULL;
	return cow_of(f);
}

/* The layered file for a patch or an image: outside any transaction. */
static int
cow_get_idle(sqlite3 *db, struct cowimg **c, struct err *e)
{
	if ((*c = cow_get(db)) == NULL)
		return err_set(e, -EINVAL, "cowimg: not a cowimg connection");
	if (!sqlite3_get_autocommit(db))
		return err_set(e, -EBUSY, "cowimg: inside a transaction");
	return 0;
}

int
cowimg_open(const void *img, size_t img_len, const void *patch,
    size_t patch_len, sqlite3 **db, struct err *e)
{
	struct cowimg *c = NULL;
	sqlite3 *conn = NULL;
	bool bound;
	int rc;

	*db = NULL;
	if ((img == NULL && img_len > 0) || (patch == NULL && patch_len > 0))
		return err_set(e, -EINVAL, "cowimg: no bytes for a length");
	if (img_len > PATCH_SIZE_MAX)
		return err_set(e, -EFBIG, "cowimg: image of %zu bytes",
		    img_len);
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return err_set(e, -ENOMEM, "cowimg: no memory");
	c->img = img;
	c->img_len = img_len;
	if (patch_len == 0)
		patch_empty(&c->patch, img_len);
	else if ((rc = patch_parse(patch, patch_len, &c->patch, e)) < 0)
		goto out_free;
	c->size = c->base_limit = c->patch.size;
	if (pthread_once(&vfs_once, vfs_register_once) != 0 ||
	    vfs_rc != SQLITE_OK) {
		rc = err_set(e, -ENOMEM, "cowimg: cannot register the VFS");
		goto out_free;
	}

	/* xOpen takes c from the slot; if it did not run, c is still ours. */
	cow_pending = c;
	rc = sqlite3_open_v2(COW_NAME, &conn, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_PRIVATECACHE, COW_VFS);
	bound = cow_pending == NULL;
	cow_pending = NULL;
	if (!bound) {
		rc = err_set(e, rc == SQLITE_OK ? -EIO : sql_errno(rc),
		    "cowimg: open: %s", conn ? sqlite3_errmsg(conn) :
		    "no memory");
		sqlite3_close(conn);
		goto out_free;
	}
	if (rc != SQLITE_OK) {
		rc = err_set(e, sql_errno(rc), "cowimg: open: %s",
		    sqlite3_errmsg(conn));
		goto out_close;
	}

	/*
	 * Before anything reads or writes: with the journal in memory and
	 * the lock held for good, SQLite never asks for a journal or -wal
	 * file, and temp tables and sorts stay in memory.
	 */
	if ((rc = pragma_set(conn, "PRAGMA locking_mode=EXCLUSIVE",
	    "exclusive", e)) < 0 ||
	    (rc = pragma_set(conn, "PRAGMA journal_mode=MEMORY", "memory",
	    e)) < 0 ||
	    (rc = pragma_set(conn, "PRAGMA temp_store=MEMORY", NULL, e)) < 0)
		goto out_close;
	*db = conn;
	return 0;

out_close:
	sqlite3_close(conn);	/* xClose frees c */
	return rc;
out_free:
	free(c);
	return rc;
}

int
cowimg_patch(sqlite3 *db, void **out, size_t *len, struct err *e)
{
	struct cowimg *c = NULL;
	struct cow_iter it;
	const unsigned char *data;
	unsigned char *buf, *p;
	uint32_t count, idx;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = cow_get_idle(db, &c, e)) < 0)
		return rc;
	if (c->size == 0)
		return err_set(e, -ENODATA, "cowimg: an empty database has no "
		    "patch");
	if (iter_init(&it, c) < 0)
		return err_set(e, -ENOMEM, "cowimg: no memory");
	count = iter_count(&it);
	if ((buf = malloc(patch_bytes(count))) == NULL) {
		free(it.own);
		return err_set(e, -ENOMEM, "cowimg: no memory for a patch of "
		    "%u blocks", count);
	}
	patch_header(buf, c->size, count);
	p = buf + PATCH_HEADER;
	while (iter_next(&it, &idx, &data)) {
		le32_put(p, idx);
		memcpy(p + 4, data, PATCH_BLOCK);
		p += PATCH_ENTRY;
	}
	free(it.own);
	*out = buf;
	*len = patch_bytes(count);
	return 0;
}

int
cowimg_patch_write(sqlite3 *db, int fd, size_t *len, struct err *e)
{
	struct cowimg *c = NULL;
	struct cow_iter it;
	struct iovec iov[2 * COW_BATCH + 1];
	unsigned char head[PATCH_HEADER], idx_le[COW_BATCH][4];
	const unsigned char *data = NULL;
	uint32_t count, idx;
	int n = 0, k = 0, rc;

	*len = 0;
	if ((rc = cow_get_idle(db, &c, e)) < 0)
		return rc;
	if (c->size == 0)
		return err_set(e, -ENODATA, "cowimg: an empty database has no "
		    "patch");
	if (iter_init(&it, c) < 0)
		return err_set(e, -ENOMEM, "cowimg: no memory");
	count = iter_count(&it);
	patch_header(head, c->size, count);
	iov[n++] = (struct iovec){ head, PATCH_HEADER };
	for (;;) {
		bool more = iter_next(&it, &idx, &data);

		if (more) {
			le32_put(idx_le[k], idx);
			iov[n++] = (struct iovec){ idx_le[k++], 4 };
			/* Only a cast: writev() reads the block. */
			iov[n++] = (struct iovec){ (void *)(uintptr_t)data,
			    PATCH_BLOCK };
		}
		/* it->scratch is reused by the next block: write it now. */
		if (!more || k == COW_BATCH || data == it.scratch) {
			if ((rc = writev_all(fd, iov, n)) < 0) {
				free(it.own);
				return err_set(e, rc, "cowimg: write patch: %s",
				    strerror(-rc));
			}
			n = k = 0;
		}
		if (!more)
			break;
	}
	free(it.own);
	*len = patch_bytes(count);
	return 0;
}

int
cowimg_image(sqlite3 *db, void **out, size_t *len, struct err *e)
{
	struct cowimg *c = NULL;
	unsigned char *buf;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = cow_get_idle(db, &c, e)) < 0)
		return rc;
	if ((buf = malloc(c->size ? (size_t)c->size : 1)) == NULL)
		return err_set(e, -ENOMEM, "cowimg: no memory for %llu bytes",
		    (unsigned long long)c->size);
	layers_copy(c, 0, (size_t)c->size, buf);
	*out = buf;
	*len = (size_t)c->size;
	return 0;
}

size_t
cowimg_dirty_blocks(sqlite3 *db)
{
	struct cowimg *c = cow_get(db);

	return c ? c->count : 0;
}

void
cowimg_close(sqlite3 *db)
{
	if (db != NULL)
		sqlite3_close_v2(db);
}
