/*
 * cowimg_test.c - unit tests for the copy-on-write image VFS in
 * agentfs/cowimg.c.
 *
 * The central check is a twin: the same seeded mix of statements runs on a
 * cowimg connection and on a memdb copy (sqlite3_deserialize()) of the
 * same image; both start from identical bytes and SQLite is deterministic,
 * so cowimg_image() must equal the twin's sqlite3_serialize() byte for byte
 * and every query must agree. Patches are checked by reopening them (a
 * chain of five), against patch.h's own reader (patch_read()) and field by
 * field. The image and patch are mapped PROT_READ where it matters, so a
 * write into them kills the test. The file's methods are also called
 * directly (through SQLITE_FCNTL_FILE_POINTER) for the edges SQLite alone
 * does not reach: shrink then grow, reads past the end, the size cap.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../agentfs/cowimg.h"
#include "../agentfs/patch.h"

TestSuite(cowimg, .timeout = 120);

/*** Helpers ***/

struct rng {
	uint64_t s;
};

static uint64_t
rng_next(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * UINT64_C(2685821657736338717);
}

static struct rng
rng_make(uint64_t seed)
{
	struct rng r = { seed * UINT64_C(0x9E3779B97F4A7C15) + 1 };

	rng_next(&r);
	return r;
}

/* Deterministic bytes for a blob. */
static unsigned char blob_buf[9000];

static const unsigned char *
blob_fill(size_t len, uint64_t seed)
{
	struct rng r = rng_make(seed);

	cr_assert_leq(len, sizeof(blob_buf));
	for (size_t i = 0; i < len; i++)
		blob_buf[i] = (unsigned char)rng_next(&r);
	return blob_buf;
}

static void
exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
}

static void
stmt_prep(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);

	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
}

/* Steps st to the end and finalizes it; the step's result code. */
static int
stmt_run(sqlite3_stmt *st)
{
	int rc;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	sqlite3_finalize(st);
	return rc;
}

static int
t1_insert(sqlite3 *db, int64_t a, size_t blob_len, uint64_t seed)
{
	sqlite3_stmt *st = NULL;
	char b[64];

	snprintf(b, sizeof(b), "row-%lld-%llx", (long long)a,
	    (unsigned long long)seed);
	stmt_prep(db, "INSERT INTO t1 (a, b, c) VALUES (?, ?, ?)", &st);
	sqlite3_bind_int64(st, 1, a);
	sqlite3_bind_text(st, 2, b, -1, SQLITE_TRANSIENT);
	sqlite3_bind_blob(st, 3, blob_fill(blob_len, seed), (int)blob_len,
	    SQLITE_TRANSIENT);
	return stmt_run(st);
}

/*
 * A database of rows t1 rows (one in every big_every with a blob of big
 * bytes, the others up to 600), 300 t2 rows and t4's fixed row, pages of
 * page_size bytes, as an image from a ":memory:" database. malloc'd.
 */
static void *
source_make(int page_size, int rows, size_t big, int big_every, uint64_t seed,
    size_t *len)
{
	sqlite3 *db = NULL;
	sqlite3_int64 sz = 0;
	unsigned char *ser, *out;
	struct rng r = rng_make(seed);
	char sql[128];

	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	snprintf(sql, sizeof(sql), "PRAGMA page_size=%d", page_size);
	exec_ok(db, sql);
	exec_ok(db, "CREATE TABLE t1 (id INTEGER PRIMARY KEY, a INTEGER, "
	    "b TEXT, c BLOB);"
	    "CREATE TABLE t2 (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID;"
	    "CREATE TABLE t4 (u TEXT UNIQUE, pad BLOB);"
	    "INSERT INTO t4 VALUES ('fixed', x'00');"
	    "BEGIN");
	for (int i = 0; i < rows; i++) {
		size_t n = i % big_every == 0 ? big : rng_next(&r) % 600;

		cr_assert_eq(t1_insert(db, (int64_t)(rng_next(&r) % 100000), n,
		    rng_next(&r)), SQLITE_DONE);
	}
	for (int i = 0; i < 300; i++) {
		snprintf(sql, sizeof(sql), "INSERT INTO t2 VALUES ('k%04d', %d)",
		    i, i * 7);
		exec_ok(db, sql);
	}
	exec_ok(db, "COMMIT");
	ser = sqlite3_serialize(db, "main", &sz, 0);
	cr_assert_not_null(ser);
	cr_assert_eq(sz % page_size, 0);
	out = malloc((size_t)sz);
	cr_assert_not_null(out);
	memcpy(out, ser, (size_t)sz);
	sqlite3_free(ser);
	sqlite3_close(db);
	*len = (size_t)sz;
	return out;
}

/* A memdb copy of img, with the same pragmas as a cowimg connection. */
static sqlite3 *
twin_open(const void *img, size_t len)
{
	sqlite3 *db = NULL;
	unsigned char *buf = sqlite3_malloc64(len ? len : 1);

	cr_assert_not_null(buf);
	memcpy(buf, img, len);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", buf, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE |
	    SQLITE_DESERIALIZE_RESIZEABLE), SQLITE_OK);
	exec_ok(db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=MEMORY;"
	    "PRAGMA temp_store=MEMORY");
	return db;
}

/* Closes a twin and opens a new one on its bytes. */
static sqlite3 *
twin_reopen(sqlite3 *twin)
{
	sqlite3_int64 len = 0;
	unsigned char *img = sqlite3_serialize(twin, "main", &len, 0);
	sqlite3 *db;

	cr_assert_not_null(img);
	sqlite3_close(twin);
	db = twin_open(img, (size_t)len);
	sqlite3_free(img);
	return db;
}

static sqlite3 *
cow_open(const void *img, size_t img_len, const void *patch, size_t plen)
{
	struct err e = { 0 };
	sqlite3 *db = NULL;
	int rc = cowimg_open(img, img_len, patch, plen, &db, &e);

	cr_assert_eq(rc, 0, "cowimg_open: %d %s", rc, e.msg);
	cr_assert_not_null(db);
	return db;
}

/*
 * One statement (or transaction) chosen by seed, the same on any database
 * in the same state. Returns the first SQLite result code that is not a
 * success, or SQLITE_DONE: a twin must return the same.
 */
static int
op_apply(sqlite3 *db, uint64_t seed, int rows)
{
	static const char *const index_sql[] = {
		"CREATE INDEX IF NOT EXISTS i_a ON t1 (a)",
		"DROP INDEX IF EXISTS i_a",
		"CREATE INDEX IF NOT EXISTS i_b ON t1 (b, a)",
		"DROP INDEX IF EXISTS i_b",
		"CREATE INDEX IF NOT EXISTS i_v ON t2 (v)",
	};
	struct rng r = rng_make(seed);
	sqlite3_stmt *st = NULL;
	int64_t id = (int64_t)(rng_next(&r) % (uint64_t)(rows + rows / 4)) + 1;
	size_t blen = rng_next(&r) % 5 == 0 ? 4096 : rng_next(&r) % 900;
	char sql[160];
	int rc = SQLITE_DONE;

	switch (rng_next(&r) % 12) {
	case 0:
	case 1:
		return t1_insert(db, (int64_t)(rng_next(&r) % 100000), blen,
		    rng_next(&r));
	case 2:
	case 3:
		stmt_prep(db, "UPDATE t1 SET a = ?, b = b || 'u', c = ? "
		    "WHERE id = ?", &st);
		sqlite3_bind_int64(st, 1, (int64_t)(rng_next(&r) % 100000));
		sqlite3_bind_blob(st, 2, blob_fill(blen, rng_next(&r)),
		    (int)blen, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, id);
		return stmt_run(st);
	case 4:
		snprintf(sql, sizeof(sql), "DELETE FROM t1 WHERE id = %lld",
		    (long long)id);
		break;
	case 5:
		snprintf(sql, sizeof(sql), "DELETE FROM t1 WHERE id BETWEEN "
		    "%lld AND %lld", (long long)id, (long long)id + 6);
		break;
	case 6:
		snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO t2 VALUES "
		    "('k%04d', %d)", (int)(rng_next(&r) % 400),
		    (int)(rng_next(&r) % 1000));
		break;
	case 7:
		snprintf(sql, sizeof(sql), "DELETE FROM t2 WHERE k = 'k%04d'",
		    (int)(rng_next(&r) % 400));
		break;
	case 8:
		snprintf(sql, sizeof(sql), "%s",
		    index_sql[rng_next(&r) % 5]);
		break;
	case 9:
		/* Rolled back: the journal in memory restores the pages. */
		exec_ok(db, "BEGIN");
		if ((rc = t1_insert(db, 1, 4000, rng_next(&r))) == SQLITE_DONE)
			rc = t1_insert(db, 2, 300, rng_next(&r));
		snprintf(sql, sizeof(sql), "DELETE FROM t1 WHERE id < %lld",
		    (long long)id);
		exec_ok(db, sql);
		exec_ok(db, "ROLLBACK");
		return rc;
	case 10:
		/* Fails on its second row: a statement rollback. */
		stmt_prep(db, "INSERT INTO t4 VALUES ('new', ?), ('fixed', 1)",
		    &st);
		sqlite3_bind_blob(st, 1, blob_fill(3000, rng_next(&r)), 3000,
		    SQLITE_TRANSIENT);
		return stmt_run(st);
	default:
		exec_ok(db, "BEGIN");
		for (int i = 0; i < 5 && rc == SQLITE_DONE; i++)
			rc = t1_insert(db, i, blen, rng_next(&r));
		exec_ok(db, "COMMIT");
		return rc;
	}
	stmt_prep(db, sql, &st);
	return stmt_run(st);
}

/* Runs n ops from seed on both databases; each must answer alike. */
static void
ops_both(sqlite3 *a, sqlite3 *b, uint64_t seed, int n, int rows)
{
	for (int i = 0; i < n; i++) {
		uint64_t s = seed * 1000003u + (uint64_t)i;
		int ra = op_apply(a, s, rows), rb = op_apply(b, s, rows);

		cr_assert_eq(ra, rb, "op %d: %d vs %d", i, ra, rb);
	}
}

/* FNV-1a over every value a query returns. */
static uint64_t
query_digest(sqlite3 *db, const char *sql)
{
	uint64_t h = UINT64_C(14695981039346656037);
	sqlite3_stmt *st = NULL;
	int rc;

	stmt_prep(db, sql, &st);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int i = 0; i < sqlite3_column_count(st); i++) {
			const unsigned char *p = sqlite3_column_blob(st, i);
			int n = sqlite3_column_bytes(st, i);

			h = (h ^ (uint64_t)sqlite3_column_type(st, i)) *
			    UINT64_C(1099511628211);
			for (int j = 0; j < n; j++)
				h = (h ^ p[j]) * UINT64_C(1099511628211);
		}
		h = (h ^ 0xff) * UINT64_C(1099511628211);
	}
	cr_assert_eq(rc, SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return h;
}

static const char *const queries[] = {
	"SELECT * FROM t1 ORDER BY id",
	"SELECT * FROM t2 ORDER BY k",
	"SELECT * FROM t4 ORDER BY u",
	"SELECT name, sql FROM sqlite_schema ORDER BY name",
	"SELECT count(*), total(a), total(length(c)) FROM t1",
	"PRAGMA integrity_check",
};

static void
queries_equal(sqlite3 *cow, sqlite3 *twin)
{
	for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
		cr_expect_eq(query_digest(cow, queries[i]),
		    query_digest(twin, queries[i]), "%s differs", queries[i]);
}

/* cowimg_image() of cow is the twin's serialization, byte for byte. */
static void
images_equal(sqlite3 *cow, sqlite3 *twin)
{
	struct err e = { 0 };
	void *img = NULL;
	size_t len = 0;
	sqlite3_int64 tlen = 0;
	unsigned char *t = sqlite3_serialize(twin, "main", &tlen, 0);

	cr_assert_not_null(t);
	cr_assert_eq(cowimg_image(cow, &img, &len, &e), 0, "%s", e.msg);
	cr_assert_eq(len, (size_t)tlen, "image %zu bytes, twin %lld", len,
	    (long long)tlen);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(((unsigned char *)img)[i], t[i],
		    "first difference at byte %zu", i);
	free(img);
	sqlite3_free(t);
}

static void *
cow_patch(sqlite3 *db, size_t *len)
{
	struct err e = { 0 };
	void *p = NULL;

	cr_assert_eq(cowimg_patch(db, &p, len, &e), 0, "%s", e.msg);
	return p;
}

static sqlite3_file *
cow_file(sqlite3 *db)
{
	sqlite3_file *f = NULL;

	cr_assert_eq(sqlite3_file_control(db, "main",
	    SQLITE_FCNTL_FILE_POINTER, &f), SQLITE_OK);
	cr_assert_not_null(f);
	return f;
}

/* A read-only mapping of a copy of p: any write through it faults. */
static const void *
ro_copy(const void *p, size_t len)
{
	int fd = memfd_create("cowimg-test", MFD_CLOEXEC);
	void *m;

	cr_assert_geq(fd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(write(fd, p, len), (ssize_t)len);
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED, "mmap: %s", strerror(errno));
	close(fd);
	return m;
}

static double
ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/*
 * Test 1 and 8: a source of page_size pages, 300 seeded ops on cowimg and
 * on the twin, then bytes and queries compared.
 */
static void
check_equivalence(int page_size, uint64_t seed)
{
	size_t len = 0;
	void *img = source_make(page_size, 2000, 4096, 4, seed, &len);
	sqlite3 *cow = cow_open(img, len, NULL, 0), *twin = twin_open(img, len);

	images_equal(cow, twin);
	ops_both(cow, twin, seed, 300, 2000);
	images_equal(cow, twin);
	queries_equal(cow, twin);
	cr_expect_gt(cowimg_dirty_blocks(cow), 0);
	cowimg_close(cow);
	sqlite3_close(twin);
	free(img);
}

/*** Equivalence ***/

Test(cowimg, matches_memdb_byte_for_byte)
{
	check_equivalence(4096, 1);
}

Test(cowimg, matches_memdb_with_1024_byte_pages)
{
	check_equivalence(1024, 2);
}

Test(cowimg, matches_memdb_with_8192_byte_pages)
{
	check_equivalence(8192, 3);
}

Test(cowimg, two_connections_stay_independent)
{
	size_t la = 0, lb = 0;
	void *ia = source_make(4096, 800, 4096, 4, 10, &la);
	void *ib = source_make(1024, 600, 2000, 4, 11, &lb);
	sqlite3 *ca = cow_open(ia, la, NULL, 0), *cb = cow_open(ib, lb, NULL, 0);
	sqlite3 *ta = twin_open(ia, la), *tb = twin_open(ib, lb);

	for (int round = 0; round < 6; round++) {
		ops_both(ca, ta, 100 + (uint64_t)round, 30, 800);
		ops_both(cb, tb, 200 + (uint64_t)round, 30, 600);
	}
	exec_ok(ca, "CREATE TABLE only_a (x)");
	cr_expect_neq(sqlite3_exec(cb, "SELECT * FROM only_a", NULL, NULL,
	    NULL), SQLITE_OK, "a table made in one connection is in the other");
	exec_ok(ta, "CREATE TABLE only_a (x)");
	images_equal(ca, ta);
	images_equal(cb, tb);
	queries_equal(ca, ta);
	queries_equal(cb, tb);
	cowimg_close(ca);
	cowimg_close(cb);
	sqlite3_close(ta);
	sqlite3_close(tb);
	free(ia);
	free(ib);
}

Test(cowimg, new_database_from_nothing)
{
	struct err e = { 0 };
	sqlite3 *db = cow_open(NULL, 0, NULL, 0), *again;
	void *p = NULL;
	size_t plen = 0;

	cr_expect_eq(cowimg_patch(db, &p, &plen, &e), -ENODATA);
	exec_ok(db, "CREATE TABLE t (x); INSERT INTO t VALUES (42)");
	p = cow_patch(db, &plen);
	cowimg_close(db);
	/* No image at all: the patch alone is the database. */
	again = cow_open(NULL, 0, p, plen);
	cr_expect_eq(query_digest(again, "SELECT x FROM t"),
	    query_digest(again, "SELECT 42"));
	cowimg_close(again);
	free(p);
}

/*** Patches ***/

static uint32_t
blocks_of(uint64_t bytes)
{
	return (uint32_t)((bytes + PATCH_BLOCK - 1) / PATCH_BLOCK);
}

/* Every block index of older is in newer. */
static void
patch_contains(const void *newer, size_t nlen, const void *older, size_t olen)
{
	struct patch pn, po;
	struct err e = { 0 };

	cr_assert_eq(patch_parse(newer, nlen, &pn, &e), 0, "%s", e.msg);
	cr_assert_eq(patch_parse(older, olen, &po, &e), 0, "%s", e.msg);
	for (uint32_t i = 0; i < po.count; i++)
		cr_expect_not_null(patch_find(&pn, patch_index(&po, i)),
		    "block %u of the older patch is gone", patch_index(&po, i));
}

Test(cowimg, patch_chain_of_five_matches_memdb)
{
	size_t len = 0, plen = 0;
	void *img = source_make(4096, 2000, 4096, 4, 20, &len), *patch = NULL;
	sqlite3 *twin = twin_open(img, len), *cow = cow_open(img, len, NULL, 0);

	for (int step = 0; step < 5; step++) {
		void *next;
		size_t nlen = 0;
		struct err e = { 0 };
		size_t flen = 0;
		int fd;

		ops_both(cow, twin, 30 + (uint64_t)step, 60, 2000);
		next = cow_patch(cow, &nlen);
		cr_expect_eq(nlen, patch_bytes((uint32_t)((nlen - PATCH_HEADER) /
		    PATCH_ENTRY)));
		if (patch != NULL)
			patch_contains(next, nlen, patch, plen);

		/* The same bytes through a file descriptor. */
		fd = memfd_create("cowimg-patch", MFD_CLOEXEC);
		cr_assert_geq(fd, 0);
		cr_assert_eq(cowimg_patch_write(cow, fd, &flen, &e), 0, "%s",
		    e.msg);
		cr_expect_eq(flen, nlen);
		{
			unsigned char *m = malloc(flen);

			cr_assert_eq(pread(fd, m, flen, 0), (ssize_t)flen);
			cr_expect_eq(memcmp(m, next, flen), 0);
			free(m);
		}
		close(fd);

		/* patch.h's own reader sees the twin's bytes. */
		{
			struct patch p;
			sqlite3_int64 tlen = 0;
			unsigned char *t = sqlite3_serialize(twin, "main", &tlen, 0);
			unsigned char *got = malloc((size_t)tlen);

			cr_assert_eq(patch_parse(next, nlen, &p, &e), 0, "%s", e.msg);
			cr_assert_eq(p.size, (uint64_t)tlen);
			patch_read(img, len, &p, 0, (size_t)tlen, got);
			cr_expect_eq(memcmp(got, t, (size_t)tlen), 0);
			free(got);
			sqlite3_free(t);
		}

		/*
		 * Both sides reopen: in locking_mode=EXCLUSIVE SQLite bumps
		 * the change counter once per lock, so a twin that stayed
		 * open would count one write fewer.
		 */
		cowimg_close(cow);
		twin = twin_reopen(twin);
		free(patch);
		patch = next;
		plen = nlen;
		cow = cow_open(img, len, patch, plen);
		cr_expect_eq(cowimg_dirty_blocks(cow), 0);
		images_equal(cow, twin);
	}
	queries_equal(cow, twin);
	cowimg_close(cow);
	sqlite3_close(twin);
	free(patch);
	free(img);
}

Test(cowimg, never_writes_image_or_patch)
{
	size_t len = 0, plen = 0, plen2 = 0;
	void *src = source_make(4096, 1500, 4096, 4, 40, &len);
	const void *img = ro_copy(src, len), *patch;
	sqlite3 *twin = twin_open(src, len), *cow = cow_open(img, len, NULL, 0);
	void *p, *p2;

	ops_both(cow, twin, 41, 150, 1500);
	p = cow_patch(cow, &plen);
	cowimg_close(cow);
	twin = twin_reopen(twin);
	patch = ro_copy(p, plen);

	/* Rewrites blocks that the read-only patch holds. */
	cow = cow_open(img, len, patch, plen);
	ops_both(cow, twin, 42, 150, 1500);
	exec_ok(cow, "DELETE FROM t1 WHERE id % 3 = 0; VACUUM");
	exec_ok(twin, "DELETE FROM t1 WHERE id % 3 = 0; VACUUM");
	images_equal(cow, twin);
	p2 = cow_patch(cow, &plen2);
	cowimg_close(cow);
	cr_expect_eq(memcmp(img, src, len), 0);
	cr_expect_eq(memcmp(patch, p, plen), 0);
	munmap((void *)(uintptr_t)img, len);
	munmap((void *)(uintptr_t)patch, plen);
	sqlite3_close(twin);
	free(p);
	free(p2);
	free(src);
}

Test(cowimg, one_row_update_dirties_few_blocks)
{
	size_t len = 0, plen = 0, flen = 0;
	void *img = source_make(4096, 3000, 4000, 1, 50, &len), *p;
	sqlite3 *cow = cow_open(img, len, NULL, 0);
	struct err e = { 0 };
	int fd;

	cr_assert_gt(len, (size_t)12000000);
	exec_ok(cow, "UPDATE t1 SET a = a + 1, b = 'changed' WHERE id = 1500");
	cr_expect_lt(cowimg_dirty_blocks(cow), 16);
	cr_expect_gt(cowimg_dirty_blocks(cow), 0);
	p = cow_patch(cow, &plen);
	cr_expect_eq(plen, patch_bytes((uint32_t)cowimg_dirty_blocks(cow)));
	fd = memfd_create("cowimg-patch", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(cowimg_patch_write(cow, fd, &flen, &e), 0, "%s", e.msg);
	cr_expect_eq(flen, plen);
	cr_expect_eq(lseek(fd, 0, SEEK_END), (off_t)plen);
	close(fd);
	cowimg_close(cow);
	free(p);
	free(img);
}

/* Test 7: a good patch, then each field broken alone. */
Test(cowimg, refuses_bad_patches)
{
	size_t len = 0, plen = 0;
	void *img = source_make(4096, 400, 4096, 4, 60, &len);
	sqlite3 *cow = cow_open(img, len, NULL, 0), *db = NULL;
	unsigned char *p, *bad;
	struct err e = { 0 };
	uint32_t count;

	exec_ok(cow, "UPDATE t1 SET c = zeroblob(5000) WHERE id % 50 = 1");
	p = cow_patch(cow, &plen);
	cowimg_close(cow);
	count = (uint32_t)((plen - PATCH_HEADER) / PATCH_ENTRY);
	cr_assert_geq(count, 3);
	bad = malloc(plen + PATCH_ENTRY);

	memcpy(bad, p, plen);
	bad[0] = 'X';
	cr_expect_eq(cowimg_open(img, len, bad, plen, &db, &e), -EBADMSG);
	cr_expect_null(db);

	memcpy(bad, p, plen);
	bad[20]++;			/* count one more than the entries */
	cr_expect_eq(cowimg_open(img, len, bad, plen, &db, &e), -EBADMSG);
	cr_expect_eq(cowimg_open(img, len, p, plen - 1, &db, &e), -EBADMSG);

	memcpy(bad, p, plen);		/* first two entries swapped */
	memcpy(bad + PATCH_HEADER, p + PATCH_HEADER + PATCH_ENTRY, PATCH_ENTRY);
	memcpy(bad + PATCH_HEADER + PATCH_ENTRY, p + PATCH_HEADER, PATCH_ENTRY);
	cr_expect_eq(cowimg_open(img, len, bad, plen, &db, &e), -EBADMSG);

	memcpy(bad, p, plen);		/* last index past the size */
	{
		uint32_t past = blocks_of(len);
		unsigned char *at = bad + PATCH_HEADER +
		    (size_t)(count - 1) * PATCH_ENTRY;

		for (int i = 0; i < 4; i++)
			at[i] = (unsigned char)(past >> (8 * i));
	}
	cr_expect_eq(cowimg_open(img, len, bad, plen, &db, &e), -EBADMSG);
	cr_expect_null(db);

	cr_expect_eq(cowimg_open(img, len, NULL, 5, &db, &e), -EINVAL);
	cr_expect_eq(cowimg_open(img, len, p, plen, &db, &e), 0, "%s", e.msg);
	cowimg_close(db);
	free(bad);
	free(p);
	free(img);
}

Test(cowimg, refuses_foreign_connection_and_open_transaction)
{
	sqlite3 *plain = NULL, *cow = cow_open(NULL, 0, NULL, 0);
	struct err e = { 0 };
	void *out = NULL;
	size_t len = 0;

	cr_assert_eq(sqlite3_open(":memory:", &plain), SQLITE_OK);
	cr_expect_eq(cowimg_patch(plain, &out, &len, &e), -EINVAL);
	cr_expect_eq(cowimg_image(plain, &out, &len, &e), -EINVAL);
	cr_expect_eq(cowimg_dirty_blocks(plain), 0);
	exec_ok(cow, "CREATE TABLE t (x); BEGIN; INSERT INTO t VALUES (1)");
	cr_expect_eq(cowimg_patch(cow, &out, &len, &e), -EBUSY);
	cr_expect_eq(cowimg_patch_write(cow, 1, &len, &e), -EBUSY);
	exec_ok(cow, "COMMIT");
	cr_expect_eq(cowimg_image(cow, &out, &len, &e), 0);
	free(out);
	cowimg_close(cow);
	cowimg_close(NULL);
	sqlite3_close(plain);
}

/*** Shrinking ***/

Test(cowimg, vacuum_shrinks_then_regrows)
{
	size_t len = 0, plen = 0, ilen = 0;
	void *img = source_make(4096, 2000, 4096, 4, 70, &len), *p, *im = NULL;
	sqlite3 *cow = cow_open(img, len, NULL, 0), *twin = twin_open(img, len);
	struct patch pp;
	struct err e = { 0 };

	ops_both(cow, twin, 71, 50, 2000);
	exec_ok(cow, "DELETE FROM t1 WHERE id > 100; VACUUM");
	exec_ok(twin, "DELETE FROM t1 WHERE id > 100; VACUUM");
	images_equal(cow, twin);
	p = cow_patch(cow, &plen);
	cr_assert_eq(patch_parse(p, plen, &pp, &e), 0, "%s", e.msg);
	cr_assert_eq(cowimg_image(cow, &im, &ilen, &e), 0);
	cr_expect_lt(pp.size, len / 4, "size %llu of %zu",
	    (unsigned long long)pp.size, len);
	cr_expect_eq(pp.size, ilen);
	cr_expect_eq(patch_index(&pp, pp.count - 1) + 1, blocks_of(pp.size));
	cr_expect_leq(cowimg_dirty_blocks(cow), blocks_of(pp.size));
	free(im);
	free(p);

	/* Grows again over bytes the image still has past the shrink. */
	ops_both(cow, twin, 72, 200, 2000);
	exec_ok(cow, "INSERT INTO t1 (a, c) SELECT a, c FROM t1 WHERE c IS NOT NULL");
	exec_ok(twin, "INSERT INTO t1 (a, c) SELECT a, c FROM t1 WHERE c IS NOT NULL");
	images_equal(cow, twin);
	p = cow_patch(cow, &plen);
	cowimg_close(cow);
	cow = cow_open(img, len, p, plen);
	images_equal(cow, twin);
	queries_equal(cow, twin);
	cowimg_close(cow);
	sqlite3_close(twin);
	free(p);
	free(img);
}

/*
 * Through the file's methods: a shrink into the middle of a block, then a
 * grow, reads zeros past the cut, from own blocks and from the image
 * alike, and the patch made then says so to patch.h's reader.
 */
Test(cowimg, truncate_then_grow_reads_zeros)
{
	size_t len = 0, plen = 0;
	void *img = source_make(4096, 200, 4096, 4, 80, &len), *p;
	sqlite3 *cow = cow_open(img, len, NULL, 0);
	sqlite3_file *f = cow_file(cow);
	const struct sqlite3_io_methods *m = f->pMethods;
	const sqlite3_int64 cut = 3 * PATCH_BLOCK + 100, grow = 9 * 4096 + 7;
	unsigned char *buf = malloc((size_t)grow), *got = malloc((size_t)grow);
	unsigned char one[10] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	sqlite3_int64 sz = 0;
	struct patch pp;
	struct err e = { 0 };

	cr_assert_gt(len, (size_t)(12 * 4096));
	/* An own block cut in its middle, and image blocks past the cut. */
	cr_assert_eq(m->xWrite(f, one, 10, 3 * 4096 + 50), SQLITE_OK);
	cr_assert_eq(m->xWrite(f, one, 10, 7 * 4096), SQLITE_OK);
	cr_expect_eq(cowimg_dirty_blocks(cow), 2);
	cr_assert_eq(m->xTruncate(f, cut), SQLITE_OK);
	cr_expect_eq(cowimg_dirty_blocks(cow), 1);
	cr_assert_eq(m->xTruncate(f, grow), SQLITE_OK);
	cr_assert_eq(m->xFileSize(f, &sz), SQLITE_OK);
	cr_expect_eq(sz, grow);
	cr_assert_eq(m->xRead(f, buf, (int)grow, 0), SQLITE_OK);
	cr_expect_eq(memcmp(buf, img, 18), 0);
	cr_expect_eq(memcmp(buf + 20, (unsigned char *)img + 20, 3 * 4096 + 30),
	    0);
	cr_expect_eq(memcmp(buf + 3 * 4096 + 50, one, 10), 0);
	for (sqlite3_int64 i = cut; i < grow; i++)
		cr_assert_eq(buf[i], 0, "byte %lld past the cut", (long long)i);

	p = cow_patch(cow, &plen);
	cr_assert_eq(patch_parse(p, plen, &pp, &e), 0, "%s", e.msg);
	cr_expect_eq(pp.size, (uint64_t)grow);
	patch_read(img, len, &pp, 0, (size_t)grow, got);
	cr_expect_eq(memcmp(got + 20, buf + 20, (size_t)grow - 20), 0);

	/* Reads past the end: zeros and a short read. */
	memset(buf, 0xee, 100);
	cr_expect_eq(m->xRead(f, buf, 100, grow - 10), SQLITE_IOERR_SHORT_READ);
	for (int i = 0; i < 100; i++)
		cr_expect_eq(buf[i], 0);
	cr_expect_eq(m->xRead(f, buf, 100, grow + 5000), SQLITE_IOERR_SHORT_READ);

	/* The size cap. */
	cr_expect_eq(m->xWrite(f, one, 10, (sqlite3_int64)PATCH_SIZE_MAX - 5),
	    SQLITE_FULL);
	cr_expect_eq(m->xTruncate(f, (sqlite3_int64)PATCH_SIZE_MAX + 1),
	    SQLITE_FULL);
	cr_assert_eq(m->xFileSize(f, &sz), SQLITE_OK);
	cr_expect_eq(sz, grow);
	cowimg_close(cow);
	free(buf);
	free(got);
	free(p);
	free(img);
}

Test(cowimg, writes_at_any_offset_and_length)
{
	size_t len = 0;
	void *img = source_make(4096, 100, 4096, 4, 90, &len);
	sqlite3 *cow = cow_open(img, len, NULL, 0);
	sqlite3_file *f = cow_file(cow);
	unsigned char *want = malloc(len + 3 * 4096), *got = malloc(len + 3 * 4096);
	struct rng r = rng_make(91);
	size_t size = len;

	memcpy(want, img, len);
	for (int i = 0; i < 500; i++) {
		size_t off = rng_next(&r) % (len + 2 * 4096);
		size_t n = rng_next(&r) % 9000 + 1;

		if (off + n > len + 3 * 4096)
			n = len + 3 * 4096 - off;
		if (off > size)
			memset(want + size, 0, off - size);
		memcpy(want + off, blob_fill(n, (uint64_t)i), n);
		if (off + n > size)
			size = off + n;
		cr_assert_eq(f->pMethods->xWrite(f, blob_buf, (int)n,
		    (sqlite3_int64)off), SQLITE_OK);
	}
	cr_assert_eq(f->pMethods->xRead(f, got, (int)size, 0), SQLITE_OK);
	/* Bytes 18 and 19 are read back as SQLite must see them. */
	if (want[18] == 2)
		want[18] = 1;
	if (want[19] == 2)
		want[19] = 1;
	cr_expect_eq(memcmp(got, want, size), 0);
	cowimg_close(cow);
	free(want);
	free(got);
	free(img);
}

/*
 * Thousands of own blocks, written in a random order: the table grows
 * through many rehashes and every block reads back; the time is printed.
 */
Test(cowimg, many_blocks_read_back)
{
	const uint32_t n = 12000;
	sqlite3 *cow = cow_open(NULL, 0, NULL, 0);
	sqlite3_file *f = cow_file(cow);
	uint32_t *order = malloc(n * sizeof(*order));
	unsigned char block[PATCH_BLOCK], got[PATCH_BLOCK];
	struct rng r = rng_make(120);
	struct timespec t0;
	struct patch pp;
	struct err e = { 0 };
	size_t plen = 0;
	void *p;
	double ms;

	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rng_next(&r) % (i + 1)), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint32_t i = 0; i < n; i++) {
		memset(block, (int)(order[i] % 251) + 3, sizeof(block));
		cr_assert_eq(f->pMethods->xWrite(f, block, PATCH_BLOCK,
		    (sqlite3_int64)order[i] * PATCH_BLOCK), SQLITE_OK);
	}
	ms = ms_since(&t0);
	cr_expect_eq(cowimg_dirty_blocks(cow), n);
	for (uint32_t i = 0; i < n; i += 7) {
		cr_assert_eq(f->pMethods->xRead(f, got, PATCH_BLOCK,
		    (sqlite3_int64)i * PATCH_BLOCK), SQLITE_OK);
		cr_assert_eq(got[100], (unsigned char)(i % 251 + 3), "block %u", i);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	p = cow_patch(cow, &plen);
	fprintf(stderr, "cowimg: %u blocks written in random order in %.2f ms, "
	    "their patch made in %.2f ms\n", n, ms, ms_since(&t0));
	cr_assert_eq(patch_parse(p, plen, &pp, &e), 0, "%s", e.msg);
	cr_expect_eq(pp.count, n);
	cr_expect_eq(pp.size, (uint64_t)n * PATCH_BLOCK);
	cowimg_close(cow);
	free(p);
	free(order);
}

/*** Files and journals ***/

static int (*real_open)(sqlite3_vfs *, const char *, sqlite3_file *, int,
    int *);
static int opens_main, opens_other;

static int
counting_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags,
    int *out)
{
	if (flags & SQLITE_OPEN_MAIN_DB)
		opens_main++;
	else
		opens_other++;
	return real_open(vfs, name, f, flags, out);
}

/* Wraps the VFS's xOpen (each test is its own process). */
static void
count_opens(void)
{
	sqlite3 *db = cow_open(NULL, 0, NULL, 0);
	sqlite3_vfs *vfs = sqlite3_vfs_find("sandq-cowimg");

	cowimg_close(db);
	cr_assert_not_null(vfs);
	real_open = vfs->xOpen;
	vfs->xOpen = counting_open;
	opens_main = opens_other = 0;
}

static int
dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* Test 5: a WAL image works with the journal in memory, and no file. */
Test(cowimg, wal_image_opens_without_files)
{
	char dir[] = "/tmp/cowimg-test-XXXXXX";
	sqlite3 *db = NULL, *cow;
	unsigned char hdr[100], *img, *out = NULL;
	size_t len, olen = 0;
	struct err e = { 0 };
	FILE *fp;
	long n;

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(chdir(dir), 0);
	cr_assert_eq(sqlite3_open("wal.db", &db), SQLITE_OK);
	exec_ok(db, "PRAGMA journal_mode=WAL; CREATE TABLE t (x, y);"
	    "INSERT INTO t VALUES (1, zeroblob(10000)), (2, 'two')");
	sqlite3_close(db);
	cr_assert_not_null(fp = fopen("wal.db", "rb"));
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	rewind(fp);
	len = (size_t)n;
	img = malloc(len);
	cr_assert_eq(fread(img, 1, len, fp), len);
	fclose(fp);
	cr_assert_eq(img[18], 2, "not a WAL image");
	cr_assert_eq(img[19], 2);
	unlink("wal.db");
	cr_assert_eq(dir_entries("."), 0);

	count_opens();
	cow = cow_open(img, len, NULL, 0);
	cr_assert_eq(cow_file(cow)->pMethods->xRead(cow_file(cow), hdr, 100, 0),
	    SQLITE_OK);
	cr_expect_eq(hdr[18], 1);
	cr_expect_eq(hdr[19], 1);
	cr_expect_eq(query_digest(cow, "PRAGMA journal_mode"),
	    query_digest(cow, "SELECT 'memory'"));
	exec_ok(cow, "INSERT INTO t VALUES (3, 'three'); UPDATE t SET y = 'one' "
	    "WHERE x = 1; BEGIN; DELETE FROM t; ROLLBACK");
	cr_expect_eq(query_digest(cow, "SELECT * FROM t ORDER BY x"),
	    query_digest(cow, "VALUES (1, 'one'), (2, 'two'), (3, 'three')"));
	cr_assert_eq(cowimg_image(cow, (void **)&out, &olen, &e), 0);
	cr_expect_eq(out[18], 1, "page 1 written with the header SQLite read");
	cr_expect_eq(out[19], 1);
	cowimg_close(cow);

	cr_expect_eq(opens_main, 1);
	cr_expect_eq(opens_other, 0, "SQLite asked for a journal or temp file");
	cr_expect_eq(dir_entries("."), 0, "a file appeared beside the database");
	cr_assert_eq(chdir("/"), 0);
	rmdir(dir);
	free(out);
	free(img);
}

Test(cowimg, journal_stays_in_memory)
{
	size_t len = 0;
	void *img = source_make(4096, 300, 4096, 4, 100, &len);
	sqlite3 *cow, *stray = NULL;

	count_opens();
	cow = cow_open(img, len, NULL, 0);
	cr_expect_neq(sqlite3_exec(cow, "PRAGMA journal_mode=WAL", NULL, NULL,
	    NULL), SQLITE_OK);
	cr_expect_neq(sqlite3_exec(cow, "PRAGMA journal_mode=DELETE", NULL,
	    NULL, NULL), SQLITE_OK);
	cr_expect_neq(sqlite3_exec(cow, "PRAGMA journal_mode=OFF", NULL, NULL,
	    NULL), SQLITE_OK);
	exec_ok(cow, "PRAGMA journal_mode=memory");
	/* A big transaction, a sort and a temp table: all in memory. */
	exec_ok(cow, "BEGIN; UPDATE t1 SET c = zeroblob(6000);"
	    "CREATE TEMP TABLE tt AS SELECT * FROM t1 ORDER BY b;"
	    "CREATE INDEX i_c ON t1 (c); ROLLBACK");
	cr_expect_neq(sqlite3_exec(cow, "ATTACH 'other.db' AS o", NULL, NULL,
	    NULL), SQLITE_OK);
	cr_expect_eq(query_digest(cow, "PRAGMA integrity_check"),
	    query_digest(cow, "SELECT 'ok'"));
	cr_expect_eq(cowimg_dirty_blocks(cow) > 0, true);
	cr_expect_eq(opens_other, 0);

	/* Outside cowimg_open() the VFS opens nothing. */
	cr_expect_neq(sqlite3_open_v2("x.db", &stray, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE, "sandq-cowimg"), SQLITE_OK);
	sqlite3_close(stray);
	cowimg_close(cow);
	free(img);
}

/*** Speed ***/

/* Test 10: printed, not asserted. */
Test(cowimg, speed_open_update_patch)
{
	size_t len = 0, flen = 0;
	void *img = source_make(4096, 3050, 4000, 1, 110, &len), *copy;
	struct timespec t0;
	struct err e = { 0 };
	double t_open = 0, t_upd = 0, t_patch = 0, t_close = 0, t_copy;
	const int runs = 20;
	sqlite3 *cow;
	int fd;

	for (int i = 0; i < runs; i++) {
		fd = memfd_create("cowimg-speed", MFD_CLOEXEC);
		cr_assert_geq(fd, 0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		cow = cow_open(img, len, NULL, 0);
		t_open += ms_since(&t0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		exec_ok(cow, "UPDATE t1 SET a = a + 1 WHERE id = 1700");
		t_upd += ms_since(&t0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		cr_assert_eq(cowimg_patch_write(cow, fd, &flen, &e), 0);
		t_patch += ms_since(&t0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		cowimg_close(cow);
		t_close += ms_since(&t0);
		close(fd);
	}
	copy = malloc(len);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memcpy(copy, img, len);
	t_copy = ms_since(&t0);
	cr_expect_eq(memcmp(copy, img, len), 0);	/* keeps the copy */
	fprintf(stderr, "cowimg speed (%.1f MB image, mean of %d): open %.3f ms, "
	    "UPDATE one row %.3f ms, patch_write %.3f ms (%zu bytes), close "
	    "%.3f ms; one memcpy of the image: %.3f ms\n", (double)len / 1e6,
	    runs, t_open / runs, t_upd / runs, t_patch / runs, flen,
	    t_close / runs, t_copy);
	free(copy);
	free(img);
}
