/*
 * store_test.c - unit tests for the local snapshot store in store/store.c.
 *
 * Each test gets a fresh folder from mkdtemp() with an open store in it
 * (the fixture), and the folder is removed afterwards. Rows are counted,
 * and damage is done, through a second, raw sqlite3 connection to the same
 * file: the store exposes no back door, and that connection also proves the
 * schema's column names are what store.h documents. Blob keys are computed
 * here independently (OpenSSL) from the manifest format store.h documents,
 * and refs_mismatches() recounts every chunk reference from the manifests.
 * Patches for store_sandbox_commit_patch() are built by struct tpatch, a
 * model of patch.h's bytes kept apart from patch_read(); built with
 * -DSTORE_CHECK_PATCH, the lying-caller test expects the refusal instead.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../agentfs/patch.h"
#include "../proto/snapkey.h"
#include "../store/store.h"

static char dir[] = "/tmp/store_test.XXXXXX";
static struct store *st;

static void
setup(void)
{
	struct err e = { 0 };

	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
}

static void
teardown(void)
{
	static const char *const names[] = { "store.db", "store.db-wal",
	    "store.db-shm" };
	char path[PATH_MAX];

	store_close(st);
	st = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 30);

/*** Helpers ***/

/* Opens the store's file with plain SQLite, beside the store's own handle. */
static sqlite3 *
raw_open(void)
{
	char path[PATH_MAX];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/store.db", dir);
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
	    SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

/* Runs one constant statement with an optional text parameter ?1. */
static int64_t
raw_int(const char *sql, const char *p1)
{
	sqlite3 *db = raw_open();
	sqlite3_stmt *stmt = NULL;
	int64_t v = -1;
	int rc;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
	    "%s", sqlite3_errmsg(db));
	if (p1 != NULL)
		sqlite3_bind_text(stmt, 1, p1, -1, SQLITE_STATIC);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	else
		cr_assert_eq(rc, SQLITE_DONE, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return v;
}

static int64_t
blob_rows(void)
{
	return raw_int("SELECT count(*) FROM blobs", NULL);
}

static int64_t
chunk_rows(void)
{
	return raw_int("SELECT count(*) FROM chunks", NULL);
}

/*
 * Chunks whose refs differ from the number of manifest entries naming
 * them, plus listed chunks with no count and counts with no chunk row:
 * 0 when the reference counts are exactly what the manifests say.
 */
static int64_t
refs_mismatches(void)
{
	return raw_int("WITH RECURSIVE"
	    " pos (i, n, m) AS (SELECT 0, length(chunks) / 32, chunks"
	    "  FROM blobs UNION ALL SELECT i + 1, n, m FROM pos"
	    "  WHERE i + 1 < n),"
	    " listed (h, c) AS (SELECT lower(hex(substr(m, i * 32 + 1, 32))),"
	    "  count(*) FROM pos WHERE i < n GROUP BY 1)"
	    " SELECT (SELECT count(*) FROM chunk_refs AS r LEFT JOIN listed AS l"
	    "  ON l.h = r.sha256 WHERE l.c IS NULL OR l.c <> r.refs)"
	    " + (SELECT count(*) FROM listed AS l LEFT JOIN chunk_refs AS r"
	    "  ON r.sha256 = l.h WHERE r.refs IS NULL)"
	    " + (SELECT count(*) FROM chunks WHERE sha256 NOT IN"
	    "  (SELECT sha256 FROM chunk_refs))", NULL);
}

/* n bytes of a pattern unique to seed, so no two chunks are equal. */
static unsigned char *
pattern(size_t n, uint32_t seed)
{
	unsigned char *p = malloc(n > 0 ? n : 1);
	uint32_t x = seed * 2654435761u + 1;

	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
	return p;
}

static void
hex32(const unsigned char *md, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Plain SHA-256 of bytes, as hex (schema 1's keys). */
static void
sha256_of(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	cr_assert_eq(EVP_Digest(len > 0 ? data : "", len, md, &mdlen,
	    EVP_sha256(), NULL), 1);
	hex32(md, out);
}

/*
 * The key store.h documents: SHA-256 of "sandq-snapshot-1" NUL, the size
 * (u64 LE), the chunk size (u32 LE) and the raw SHA-256 of each 64 KiB
 * chunk.
 */
static void
manifest_key_of(const void *data, size_t len, char out[65])
{
	static const char domain[] = "sandq-snapshot-1";
	const unsigned char *p = data;
	unsigned char md[EVP_MAX_MD_SIZE], le[12];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)((uint64_t)len >> (8 * i));
	for (int i = 0; i < 4; i++)
		le[8 + i] = (unsigned char)((uint32_t)STORE_CHUNK_BYTES >> (8 * i));
	cr_assert_eq(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL), 1);
	EVP_DigestUpdate(ctx, domain, sizeof(domain));
	EVP_DigestUpdate(ctx, le, sizeof(le));
	for (size_t off = 0; off < len; off += STORE_CHUNK_BYTES) {
		size_t n = len - off < STORE_CHUNK_BYTES ? len - off :
		    STORE_CHUNK_BYTES;
		unsigned char h[EVP_MAX_MD_SIZE];

		cr_assert_eq(EVP_Digest(p + off, n, h, &mdlen, EVP_sha256(),
		    NULL), 1);
		EVP_DigestUpdate(ctx, h, 32);
	}
	cr_assert_eq(EVP_DigestFinal_ex(ctx, md, &mdlen), 1);
	EVP_MD_CTX_free(ctx);
	hex32(md, out);
}

static void
put_bytes(const void *data, size_t len, char sha[65])
{
	struct err e = { 0 };

	cr_assert_eq(store_blob_put(st, data, len, sha, &e), 0, "%s", e.msg);
}

/* Expects blob sha to read back as exactly data[len]. */
static void
expect_blob(const char *sha, const void *data, size_t len)
{
	struct err e = { 0 };
	void *got = NULL;
	size_t n = 0;

	cr_assert_eq(store_blob_get(st, sha, &got, &n, &e), 0, "%s: %s", sha,
	    e.msg);
	cr_expect_eq(n, len);
	cr_expect(n == len && memcmp(got, data, len) == 0, "blob %.12s "
	    "differs", sha);
	free(got);
}

/* Runs one statement through a raw connection. */
static void
raw_exec(const char *sql)
{
	sqlite3 *db = raw_open();
	char *msg = NULL;

	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg);
	sqlite3_close(db);
}

static void
put(const char *text, char sha[65])
{
	struct err e = { 0 };

	cr_assert_eq(store_blob_put(st, text, strlen(text), sha, &e), 0, "%s",
	    e.msg);
}

static void
create(const char *tenant, const char *id, const char *sha)
{
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create(st, tenant, id, sha, NULL, &e), 0,
	    "%s", e.msg);
}

static uint64_t
version_of(const char *tenant, const char *id)
{
	struct store_sandbox sb;
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_get(st, tenant, id, &sb, &e), 0, "%s",
	    e.msg);
	return sb.version;
}

/* History collected newest first. */
struct hist {
	int n;
	struct store_version v[16];
};

static int
hist_cb(const struct store_version *v, void *arg)
{
	struct hist *h = arg;

	cr_assert_lt(h->n, 16);
	h->v[h->n++] = *v;
	return 0;
}

static struct hist
history(const char *tenant, const char *id)
{
	struct hist h = { 0 };
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_history(st, tenant, id, hist_cb, &h, &e), 0,
	    "%s", e.msg);
	return h;
}

/* Ids listed, joined with ','. */
static int
list_cb(const struct store_sandbox *sb, void *arg)
{
	char *out = arg;

	if (out[0] != '\0')
		strcat(out, ",");
	strcat(out, sb->id);
	return 0;
}

/*** Blobs ***/

Test(store, blob_round_trip_is_idempotent)
{
	static const char data[] = "SQLite format 3\0 not really";
	char sha[65], sha2[65];
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 0;

	cr_assert_eq(store_blob_put(st, data, sizeof(data), sha, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(strlen(sha), 64);
	cr_assert_eq(store_blob_put(st, data, sizeof(data), sha2, &e), 0);
	cr_expect_str_eq(sha, sha2);
	cr_expect_eq(blob_rows(), 1);
	cr_assert_eq(store_blob_get(st, sha, &got, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(len, sizeof(data));
	cr_expect_eq(memcmp(got, data, len), 0);
	free(got);
	cr_expect_eq(store_blob_exists(st, sha, &e), 1);
	cr_expect_eq(store_blob_size(st, sha, &e), (int64_t)sizeof(data));
	cr_expect_eq(store_blob_size(st, "0000000000000000000000000000000000000000000000000000000000000000",
	    &e), -ENOENT);
}

Test(store, blob_key_is_the_sha256_of_its_manifest)
{
	size_t len = 3 * STORE_CHUNK_BYTES + 1000;
	unsigned char *big = pattern(len, 1);
	char sha[65], want[65], plain[65];

	put("abc", sha);
	manifest_key_of("abc", 3, want);
	cr_expect_str_eq(sha, want);
	/* Not the SHA-256 of the bytes, which schema 1 used. */
	cr_expect_str_neq(sha, "ba7816bf8f01cfea414140de5dae2223"
	    "b00361a396177a9cb410ff61f20015ad");

	put_bytes(big, len, sha);
	manifest_key_of(big, len, want);
	sha256_of(big, len, plain);
	cr_expect_str_eq(sha, want);
	/* What a client computes (proto/snapkey.h) is the store's key. */
	cr_assert_eq(snapkey_of(big, len, plain), 0);
	cr_expect_str_eq(plain, sha);
	cr_assert_eq(snapkey_of("abc", 3, plain), 0);
	manifest_key_of("abc", 3, want);
	cr_expect_str_eq(plain, want);
	sha256_of(big, len, plain);
	cr_expect_str_neq(sha, plain);
	cr_expect_eq(raw_int("SELECT chunk_size FROM blobs WHERE sha256 = ?1",
	    sha), STORE_CHUNK_BYTES);
	cr_expect_eq(raw_int("SELECT length(chunks) FROM blobs"
	    " WHERE sha256 = ?1", sha), 4 * 32);
	cr_expect_eq(raw_int("SELECT size FROM blobs WHERE sha256 = ?1", sha),
	    (int64_t)len);
	expect_blob(sha, big, len);
	free(big);
}

Test(store, blob_is_cut_into_chunks_stored_once_each)
{
	size_t len = 4 * STORE_CHUNK_BYTES + 5;
	unsigned char *a = pattern(len, 2);
	char sha[65], sha2[65];

	put_bytes(a, len, sha);
	cr_expect_eq(chunk_rows(), 5);
	cr_expect_eq(raw_int("SELECT length(data) FROM chunks ORDER BY"
	    " length(data) LIMIT 1", NULL), 5);
	/*
	 * Chunks 1 and 2 made equal to chunk 0: no new row, and chunk 0 is
	 * named four times (once by the first blob, three times here).
	 */
	memcpy(a + STORE_CHUNK_BYTES, a, STORE_CHUNK_BYTES);
	memcpy(a + 2 * STORE_CHUNK_BYTES, a, STORE_CHUNK_BYTES);
	put_bytes(a, len, sha2);
	cr_expect_str_neq(sha, sha2);
	cr_expect_eq(chunk_rows(), 5);
	cr_expect_eq(raw_int("SELECT max(refs) FROM chunk_refs", NULL), 4);
	cr_expect_eq(refs_mismatches(), 0);
	expect_blob(sha2, a, len);
	free(a);
}

Test(store, empty_blob_round_trips)
{
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 1;
	char sha[65], want[65];

	cr_assert_eq(store_blob_put(st, NULL, 0, sha, &e), 0, "%s", e.msg);
	manifest_key_of(NULL, 0, want);
	cr_expect_str_eq(sha, want);
	cr_expect_eq(chunk_rows(), 0);
	cr_assert_eq(store_blob_get(st, sha, &got, &len, &e), 0, "%s", e.msg);
	cr_expect_not_null(got);
	cr_expect_eq(len, 0);
	free(got);
}

Test(store, blob_get_of_missing_key_is_enoent)
{
	char sha[65] = "0000000000000000000000000000000000000000000000000000000000000000";
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 0;

	cr_expect_eq(store_blob_get(st, sha, &got, &len, &e), -ENOENT);
	cr_expect_null(got);
	cr_expect_eq(store_blob_exists(st, sha, &e), 0);
	cr_expect_eq(store_blob_get(st, "ABC", &got, &len, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: sha256: must be 64 lower-case hex "
	    "digits");
}

Test(store, blob_get_refuses_a_corrupted_chunk)
{
	size_t len = 2 * STORE_CHUNK_BYTES + 100;
	unsigned char *a = pattern(len, 3);
	struct err e = { 0 };
	void *got = NULL;
	size_t n = 0;
	char sha[65];

	put_bytes(a, len, sha);
	/* Same length, other bytes: only the hash can tell. */
	raw_exec("UPDATE chunks SET data = zeroblob(length(data))"
	    " WHERE length(data) = 100");
	cr_expect_eq(store_blob_get(st, sha, &got, &n, &e), -EBADMSG);
	cr_expect_null(got);
	cr_expect_eq(n, 0);
	cr_expect(strstr(e.msg, "chunk 2 does not match its SHA-256") != NULL,
	    "%s", e.msg);

	/* A truncated chunk is refused before hashing. */
	raw_exec("UPDATE chunks SET data = CAST('hello' AS BLOB)"
	    " WHERE length(data) = 100");
	cr_expect_eq(store_blob_get(st, sha, &got, &n, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "chunk 2: 5 bytes stored, 100 expected") !=
	    NULL, "%s", e.msg);
	cr_expect_null(got);

	/* So is a missing one. */
	raw_exec("DELETE FROM chunk_refs WHERE sha256 IN (SELECT sha256"
	    " FROM chunks WHERE length(data) = 5);"
	    "DELETE FROM chunks WHERE length(data) = 5");
	cr_expect_eq(store_blob_get(st, sha, &got, &n, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "is missing") != NULL, "%s", e.msg);
	cr_expect_null(got);
	free(a);
}

Test(store, blob_get_refuses_a_tampered_manifest)
{
	size_t len = 2 * STORE_CHUNK_BYTES;
	unsigned char *a = pattern(len, 4);
	struct err e = { 0 };
	void *got = NULL;
	size_t n = 0;
	char sha[65];

	put_bytes(a, len, sha);
	/* Chunks swapped: each chunk is intact, the order is not. */
	raw_exec("UPDATE blobs SET chunks = substr(chunks, 33, 32) ||"
	    " substr(chunks, 1, 32)");
	cr_expect_eq(store_blob_get(st, sha, &got, &n, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "manifest does not match its key") != NULL,
	    "%s", e.msg);
	/* A size the hashes cannot cover. */
	raw_exec("UPDATE blobs SET size = size + 1");
	cr_expect_eq(store_blob_get(st, sha, &got, &n, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "damaged manifest") != NULL, "%s", e.msg);
	cr_expect_null(got);
	free(a);
}

/*** Delta puts ***/

Test(store, delta_put_stores_only_the_changed_chunks)
{
	size_t len = 16 * STORE_CHUNK_BYTES + 300;
	unsigned char *base = pattern(len, 5), *next = malloc(len + 1000);
	char bsha[65], sha[65], want[65];
	struct err e = { 0 };
	int64_t before;

	put_bytes(base, len, bsha);
	before = chunk_rows();
	cr_expect_eq(before, 17);
	/* One SQLite page changed in place, as a commit does. */
	memcpy(next, base, len);
	memset(next + 5 * STORE_CHUNK_BYTES + 4096, 0x5a, 4096);
	cr_assert_eq(store_blob_put_delta(st, next, len, bsha, base, len, sha,
	    &e), 0, "%s", e.msg);
	manifest_key_of(next, len, want);
	cr_expect_str_eq(sha, want, "a delta put gives the same key as a "
	    "full put");
	cr_expect_eq(chunk_rows(), before + 1);
	cr_expect_eq(blob_rows(), 2);
	cr_expect_eq(refs_mismatches(), 0);
	expect_blob(sha, next, len);
	expect_blob(bsha, base, len);

	/* Grown by 1000 bytes: the old last chunk differs, the rest is shared. */
	memset(next + len, 0x11, 1000);
	before = chunk_rows();
	cr_assert_eq(store_blob_put_delta(st, next, len + 1000, sha, next, len,
	    want, &e), 0, "%s", e.msg);
	cr_expect_eq(chunk_rows(), before + 1);
	expect_blob(want, next, len + 1000);
	cr_expect_eq(refs_mismatches(), 0);
	free(base);
	free(next);
}

Test(store, delta_put_without_a_usable_base_is_a_full_put)
{
	size_t len = 3 * STORE_CHUNK_BYTES;
	unsigned char *a = pattern(len, 6), *b = pattern(len, 7);
	char missing[65] = "4444444444444444444444444444444444444444444444444444444444444444";
	char sha[65], want[65], asha[65];
	struct err e = { 0 };

	cr_assert_eq(store_blob_put_delta(st, a, len, NULL, NULL, 0, sha, &e),
	    0, "%s", e.msg);
	manifest_key_of(a, len, want);
	cr_expect_str_eq(sha, want);
	memcpy(asha, sha, sizeof(asha));
	cr_assert_eq(store_blob_put_delta(st, b, len, missing, a, len, sha,
	    &e), 0, "%s", e.msg);
	expect_blob(sha, b, len);
	/* A base of another length: every chunk is hashed. */
	cr_assert_eq(store_blob_put_delta(st, b, len - 1, asha, a, len, sha,
	    &e), 0, "%s", e.msg);
	expect_blob(sha, b, len - 1);
	cr_expect_eq(store_blob_put_delta(st, b, len, "nothex", a, len, sha,
	    &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: base_sha: must be 64 lower-case hex "
	    "digits");
	cr_expect_eq(refs_mismatches(), 0);
	free(a);
	free(b);
}

/*** Sandboxes ***/

Test(store, create_then_get)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char sha[65];

	put("v1", sha);
	cr_assert_eq(store_sandbox_create(st, "acme", "agent-1", sha,
	    "{ \"team\" : \"ml\", \"a\": 1 }", &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "agent-1", &sb, &e), 0);
	cr_expect_str_eq(sb.tenant, "acme");
	cr_expect_str_eq(sb.id, "agent-1");
	cr_expect_str_eq(sb.head, sha);
	cr_expect_eq(sb.version, 1);
	cr_expect_gt(sb.created_at, 1600000000000LL);
	cr_expect_eq(sb.updated_at, sb.created_at);
	cr_expect_str_eq(sb.labels, "{\"a\":1,\"team\":\"ml\"}");
	cr_expect_eq(history("acme", "agent-1").n, 1);
	cr_expect_eq(store_sandbox_get(st, "acme", "nope", &sb, &e), -ENOENT);
}

Test(store, create_twice_is_eexist)
{
	struct err e = { 0 };
	char sha[65], other[65];

	put("v1", sha);
	put("v2", other);
	create("acme", "a", sha);
	cr_expect_eq(store_sandbox_create(st, "acme", "a", other, NULL, &e),
	    -EEXIST);
	cr_expect_str_eq(e.msg, "store: sandbox acme/a: exists");
	cr_expect_eq(version_of("acme", "a"), 1);
}

Test(store, create_needs_a_stored_blob_and_object_labels)
{
	char sha[65] = "1111111111111111111111111111111111111111111111111111111111111111";
	struct store_sandbox sb;
	struct err e = { 0 };

	cr_expect_eq(store_sandbox_create(st, "acme", "a", sha, NULL, &e),
	    -ENOENT);
	cr_expect(strstr(e.msg, "not stored") != NULL, "%s", e.msg);
	put("v1", sha);
	cr_expect_eq(store_sandbox_create(st, "acme", "a", sha, "[1]", &e),
	    -EINVAL);
	cr_expect_str_eq(e.msg, "store: labels: not a JSON object");
	cr_expect_eq(store_sandbox_create(st, "acme", "a", sha,
	    "{\"k\":1,\"k\":2}", &e), -EINVAL);
	cr_expect_eq(store_sandbox_create(st, "acme", "a", sha, "{", &e),
	    -EINVAL);
	cr_expect_eq(store_sandbox_get(st, "acme", "a", &sb, &e), -ENOENT);
}

Test(store, commit_with_right_version_moves_head)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65], v2[65];
	struct hist h;

	put("v1", v1);
	put("v2", v2);
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &sb, &e), 0);
	cr_expect_eq(sb.version, 2);
	cr_expect_str_eq(sb.head, v2);
	cr_expect_geq(sb.updated_at, sb.created_at);
	h = history("acme", "a");
	cr_assert_eq(h.n, 2);
	cr_expect_eq(h.v[0].version, 2);
	cr_expect_str_eq(h.v[0].sha256, v2);
	cr_expect_eq(h.v[1].version, 1);
	cr_expect_str_eq(h.v[1].sha256, v1);
}

Test(store, commit_with_stale_version_changes_nothing)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65], v2[65], v3[65];

	put("v1", v1);
	put("v2", v2);
	put("v3", v3);
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	cr_expect_eq(store_sandbox_commit(st, "acme", "a", 1, v3, &e),
	    -ESTALE);
	cr_expect_str_eq(e.msg, "store: sandbox acme/a: at version 2, not 1");
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &sb, &e), 0);
	cr_expect_eq(sb.version, 2);
	cr_expect_str_eq(sb.head, v2);
	cr_expect_eq(history("acme", "a").n, 2);
	/* A missing blob or sandbox is -ENOENT, and also changes nothing. */
	cr_expect_eq(store_sandbox_commit(st, "acme", "a", 2,
	    "2222222222222222222222222222222222222222222222222222222222222222",
	    &e), -ENOENT);
	cr_expect_eq(store_sandbox_commit(st, "acme", "b", 1, v3, &e),
	    -ENOENT);
	cr_expect_eq(version_of("acme", "a"), 2);
}

/*
 * A sandbox made by naming a stored blob (a create by key, or from bytes
 * the tenant stores) is a fork of it: one row, nothing copied; only a blob
 * one of the tenant's own sandboxes names (head or kept history) counts.
 */
Test(store, create_named_takes_only_the_tenants_own_blobs)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65], v2[65], loose[65];
	int64_t blobs;

	put("v1", v1);
	put("v2", v2);
	put("loose", loose);
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	cr_expect_eq(store_tenant_has_blob(st, "acme", v1, &e), 1, "kept history");
	cr_expect_eq(store_tenant_has_blob(st, "acme", v2, &e), 1, "head");
	cr_expect_eq(store_tenant_has_blob(st, "other", v2, &e), 0);
	cr_expect_eq(store_tenant_has_blob(st, "acme", loose, &e), 0, "named by none");

	blobs = blob_rows();
	cr_assert_eq(store_sandbox_create_named(st, "acme", "n", v1, "{\"k\":\"v\"}",
	    "docker://r/x@sha256:00", "/srv", &e), 0, "%s", e.msg);
	cr_expect_eq(blob_rows(), blobs);
	cr_assert_eq(store_sandbox_get(st, "acme", "n", &sb, &e), 0);
	cr_expect_str_eq(sb.head, v1);
	cr_expect_eq(sb.version, 1);
	cr_expect_str_eq(sb.labels, "{\"k\":\"v\"}");
	cr_expect_str_eq(sb.workdir, "/srv");
	cr_expect_eq(history("acme", "n").n, 1);

	cr_expect_eq(store_sandbox_create_named(st, "other", "n", v2, NULL, NULL, NULL,
	    &e), -ENOENT, "another tenant's blob");
	cr_expect(strstr(e.msg, "not one of tenant other's") != NULL, "%s", e.msg);
	cr_expect_eq(store_sandbox_get(st, "other", "n", &sb, &e), -ENOENT);
	cr_expect_eq(store_sandbox_create_named(st, "acme", "m", loose, NULL, NULL, NULL,
	    &e), -ENOENT, "a blob no sandbox names");
	cr_expect_eq(store_sandbox_create_named(st, "acme", "n", v2, NULL, NULL, NULL,
	    &e), -EEXIST);

	/* Shared heads: a's is its own, until another sandbox names it. */
	cr_expect_eq(store_head_shared(st, "acme", v2, "a", &e), 0);
	cr_expect_eq(store_head_shared(st, "acme", v1, "a", &e), 1, "n's head");
	cr_expect_eq(store_head_shared(st, "acme", v1, "n", &e), 0,
	    "a's history row is not a head");
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "f", &e), 0);
	cr_expect_eq(store_head_shared(st, "acme", v2, "a", &e), 1);
	cr_expect_eq(store_head_shared(st, "other", v2, NULL, &e), 0);
}

Test(store, fork_shares_the_blob_then_moves_alone)
{
	struct store_sandbox src, dst;
	struct err e = { 0 };
	char v1[65], v2[65], v3[65];
	int64_t blobs;

	put("v1", v1);
	put("v2", v2);
	put("v3", v3);
	cr_assert_eq(store_sandbox_create(st, "acme", "a", v1,
	    "{\"x\":\"y\"}", &e), 0);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	blobs = blob_rows();
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "b", &e), 0, "%s",
	    e.msg);
	cr_expect_eq(blob_rows(), blobs);
	cr_assert_eq(store_sandbox_get(st, "acme", "b", &dst, &e), 0);
	cr_expect_str_eq(dst.head, v2);
	cr_expect_eq(dst.version, 1);
	cr_expect_str_eq(dst.labels, "{\"x\":\"y\"}");
	cr_expect_eq(history("acme", "b").n, 1);

	cr_assert_eq(store_sandbox_commit(st, "acme", "b", 1, v3, &e), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &src, &e), 0);
	cr_expect_str_eq(src.head, v2);
	cr_expect_eq(src.version, 2);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 2, v1, &e), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "b", &dst, &e), 0);
	cr_expect_str_eq(dst.head, v3);
	cr_expect_eq(dst.version, 2);

	cr_expect_eq(store_sandbox_fork(st, "acme", "a", "b", &e), -EEXIST);
	cr_expect_eq(store_sandbox_fork(st, "acme", "zz", "c", &e), -ENOENT);
}

/*** What a sandbox runs on (docs/images.md "Sandboxes on images") ***/

#define IMG "docker://127.0.0.1:5000/t/testbed:1"

/* A new sandbox records its image and workdir; a fork copies them. */
Test(store, create_image_records_image_and_workdir_and_fork_copies_them)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char sha[65];

	cr_assert_eq(store_sandbox_create_image(st, "acme", "img", "snap", 4,
	    "{\"k\":\"v\"}", IMG, "/testbed", sha, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "img", &sb, &e), 0);
	cr_expect_str_eq(sb.image, IMG);
	cr_expect_str_eq(sb.workdir, "/testbed");
	cr_expect_str_eq(sb.head, sha);
	cr_expect_eq(raw_int("SELECT count(*) FROM sandboxes WHERE image = ?1"
	    " AND workdir = '/testbed'", IMG), 1);
	/* A commit keeps them; a fork copies them. */
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "img", 1, "snap2", 5,
	    NULL, NULL, 0, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_fork(st, "acme", "img", "img2", &e), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "img2", &sb, &e), 0);
	cr_expect_str_eq(sb.image, IMG);
	cr_expect_str_eq(sb.workdir, "/testbed");
	cr_expect_str_eq(sb.head, sha);
	/* A sandbox made the old way records neither; nor does its fork. */
	cr_assert_eq(store_sandbox_create_blob(st, "acme", "plain", "p", 1, NULL,
	    sha, &e), 0);
	cr_assert_eq(store_sandbox_fork(st, "acme", "plain", "plain2", &e), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "plain2", &sb, &e), 0);
	cr_expect_str_eq(sb.image, "");
	cr_expect_str_eq(sb.workdir, "");
	/* An image with no workdir (files at /workspace), and the reverse. */
	cr_assert_eq(store_sandbox_create_image(st, "acme", "i", "x", 1, NULL,
	    IMG, NULL, sha, &e), 0);
	cr_assert_eq(store_sandbox_create_image(st, "acme", "w", "x", 1, NULL,
	    NULL, "/srv/app", sha, &e), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "w", &sb, &e), 0);
	cr_expect_str_eq(sb.image, "");
	cr_expect_str_eq(sb.workdir, "/srv/app");
}

/* The columns are bounded: what could not be canonical is refused. */
Test(store, create_image_refuses_what_a_column_may_not_hold)
{
	static const char *const bad_workdirs[] = { "testbed", "/", "/a/",
	    "/a//b", "/a/./b", "/a/../b", "/..", "/a/.", "/a\nb" };
	char big[STORE_IMAGE_MAX + 2], sha[65];
	struct err e = { 0 };

	for (size_t i = 0; i < sizeof(bad_workdirs) / sizeof(bad_workdirs[0]); i++) {
		cr_expect_eq(store_sandbox_create_image(st, "acme", "x", "s", 1, NULL,
		    IMG, bad_workdirs[i], sha, &e), -EINVAL, "%s", bad_workdirs[i]);
		cr_expect(strstr(e.msg, "store: workdir: ") == e.msg, "%s", e.msg);
	}
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_expect_eq(store_sandbox_create_image(st, "acme", "x", "s", 1, NULL, big,
	    NULL, sha, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: image: longer than 1024 bytes");
	cr_expect_eq(store_sandbox_create_image(st, "acme", "x", "s", 1, NULL,
	    "docker://a b", NULL, sha, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: image: byte 0x20 at offset 10");
	cr_expect_eq(blob_rows(), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM sandboxes", NULL), 0);
}

/* adopt() (the Redis store's cache) takes the image and workdir too. */
Test(store, adopt_sets_image_and_workdir)
{
	struct store_sandbox sb = { .tenant = "t", .id = "box", .version = 3,
	    .created_at = 1000, .updated_at = 2000, .labels = "{}",
	    .image = IMG, .workdir = "/testbed" };
	struct store_sandbox got;
	struct err e = { 0 };
	char s1[65];

	put("one", s1);
	memcpy(sb.head, s1, sizeof(s1));
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "t", "box", &got, &e), 0);
	cr_expect_str_eq(got.image, IMG);
	cr_expect_str_eq(got.workdir, "/testbed");
	/* Another sandbox of that name, on no image. */
	sb.image[0] = sb.workdir[0] = '\0';
	sb.created_at = 5000;
	sb.version = 1;
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "t", "box", &got, &e), 0);
	cr_expect_str_eq(got.image, "");
	cr_expect_str_eq(got.workdir, "");
	snprintf(sb.workdir, sizeof(sb.workdir), "rel");
	cr_expect_eq(store_sandbox_adopt(st, &sb, &e), -EINVAL);
}

/*
 * A schema-2 file (before images) gains the two columns, empty for every
 * sandbox it has, and is schema 3 from then on; its sandboxes read and
 * commit as before.
 */
Test(store, open_converts_a_schema_2_store)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	sqlite3 *db;
	char sha[65];

	cr_assert_eq(store_sandbox_create_blob(st, "acme", "old", "v1", 2,
	    "{\"a\":\"b\"}", sha, &e), 0);
	store_close(st);
	st = NULL;
	/* What sandq wrote before this schema: no image, no workdir. */
	db = raw_open();
	cr_assert_eq(sqlite3_exec(db, "ALTER TABLE sandboxes DROP COLUMN image;"
	    "ALTER TABLE sandboxes DROP COLUMN workdir; PRAGMA user_version = 2;",
	    NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	cr_expect_eq(raw_int("SELECT count(*) FROM pragma_table_info('sandboxes')"
	    " WHERE name IN ('image', 'workdir')", NULL), 0);

	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
	cr_expect_eq(raw_int("PRAGMA user_version", NULL), 3);
	cr_assert_eq(store_sandbox_get(st, "acme", "old", &sb, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sb.head, sha);
	cr_expect_str_eq(sb.labels, "{\"a\":\"b\"}");
	cr_expect_str_eq(sb.image, "");
	cr_expect_str_eq(sb.workdir, "");
	cr_expect_eq(store_sandbox_commit_blob(st, "acme", "old", 1, "v2", 2, NULL,
	    NULL, 0, sha, &e), 0, "%s", e.msg);
	cr_expect_eq(store_sandbox_create_image(st, "acme", "new", "v3", 2, NULL,
	    IMG, "/testbed", sha, &e), 0, "%s", e.msg);
	/* A second open finds it done. */
	store_close(st);
	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "new", &sb, &e), 0);
	cr_expect_str_eq(sb.workdir, "/testbed");
}

/*** What a tenant stores, and its quota ***/

#define CH STORE_CHUNK_BYTES
#define MANIFEST(nchunks) (STORE_MANIFEST_HEAD + 32 * (nchunks))

/*
 * Kept history counts, each chunk once: a 3-chunk head and a version that
 * changed one chunk store 4 chunks and 2 manifests; a fork adds nothing;
 * another tenant's sandboxes are not counted; retention takes what only
 * the dropped version named off again.
 */
Test(store, tenant_usage_counts_kept_history_each_chunk_once)
{
	unsigned char *a = pattern(3 * CH, 1), *b = malloc(3 * CH), *x = pattern(CH, 3);
	struct err e = { 0 };
	char sha[65], other[65];

	cr_assert_not_null(b);
	memcpy(b, a, 3 * CH);
	memcpy(b + CH, x, CH);		/* the middle chunk changed */
	cr_assert_eq(store_sandbox_create_blob(st, "acme", "s", a, 3 * CH, NULL, sha,
	    &e), 0, "%s", e.msg);
	cr_expect_eq(store_tenant_usage(st, "acme", &e), 3 * CH + MANIFEST(3));
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "s", 1, b, 3 * CH, sha, a,
	    3 * CH, sha, &e), 0, "%s", e.msg);
	cr_expect_eq(store_tenant_usage(st, "acme", &e), 4 * CH + 2 * MANIFEST(3),
	    "history is not counted, or a shared chunk twice");
	cr_assert_eq(store_sandbox_fork(st, "acme", "s", "f", &e), 0, "%s", e.msg);
	cr_expect_eq(store_tenant_usage(st, "acme", &e), 4 * CH + 2 * MANIFEST(3));
	cr_assert_eq(store_sandbox_create_blob(st, "other", "o", x, CH, NULL, other,
	    &e), 0, "%s", e.msg);
	cr_expect_eq(store_tenant_usage(st, "acme", &e), 4 * CH + 2 * MANIFEST(3));
	cr_expect_eq(store_tenant_usage(st, "other", &e), CH + MANIFEST(1));

	store_set_keep_versions(st, 1);
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "s", 2, b, 2 * CH, sha, b,
	    3 * CH, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_delete(st, "acme", "f", &e), 0, "%s", e.msg);
	cr_expect_eq(store_tenant_usage(st, "acme", &e), 2 * CH + MANIFEST(2));
	free(a);
	free(b);
	free(x);
}

/*
 * A quota counts history: with room for one 3-chunk head and a little,
 * rewriting the head with new bytes of the same size is committed, but the
 * sandbox's older versions go with it (no pile of same-size rewrites); a
 * commit that grows the head past the quota is -EDQUOT naming both figures
 * and the setting, and stores nothing; one that fits keeps its history.
 */
Test(store, quota_counts_kept_history_and_refuses_growth_past_it)
{
	unsigned char *a = pattern(3 * CH, 11), *b = pattern(3 * CH, 12);
	unsigned char *c = pattern(4 * CH, 13), *d = malloc(3 * CH);
	const uint64_t quota = 4 * CH;
	struct store_sandbox sb;
	struct err e = { 0 };
	char sha[65], head[65], want[64];
	int64_t blobs, chunks;

	cr_assert_not_null(d);
	store_set_quota(st, quota);
	cr_assert_eq(store_sandbox_create_blob(st, "acme", "q", a, 3 * CH, NULL, sha,
	    &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "q", 1, b, 3 * CH, sha, a,
	    3 * CH, head, &e), 0, "a same-size rewrite over the quota: %s", e.msg);
	cr_expect_eq(history("acme", "q").n, 1, "the older version stayed");
	cr_expect_leq(store_tenant_usage(st, "acme", &e), (int64_t)quota);

	blobs = blob_rows();
	chunks = chunk_rows();
	cr_expect_eq(store_sandbox_commit_blob(st, "acme", "q", 2, c, 4 * CH, head, b,
	    3 * CH, sha, &e), -EDQUOT, "a growing commit past the quota");
	snprintf(want, sizeof(want), "storage quota (storage_quota_bytes) of %llu",
	    (unsigned long long)quota);
	cr_expect_not_null(strstr(e.msg, want), "%s", e.msg);
	cr_expect_not_null(strstr(e.msg, "kept history included"), "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "q", &sb, &e), 0);
	cr_expect_eq(sb.version, 2);
	cr_expect_str_eq(sb.head, head);
	cr_expect_eq(blob_rows(), blobs);
	cr_expect_eq(chunk_rows(), chunks);

	/* One chunk changed: 3 + 1 chunks and two manifests fit in 4 + 1. */
	store_set_quota(st, quota + CH);
	memcpy(d, b, 3 * CH);
	d[0] ^= 1;
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "q", 2, d, 3 * CH, head, b,
	    3 * CH, sha, &e), 0, "%s", e.msg);
	cr_expect_eq(history("acme", "q").n, 2);

	/* A new sandbox is growth: past the quota it is refused too. */
	cr_expect_eq(store_sandbox_create_blob(st, "acme", "q2", c, 4 * CH, NULL, sha,
	    &e), -EDQUOT);
	cr_expect_eq(store_sandbox_get(st, "acme", "q2", &sb, &e), -ENOENT);
	free(a);
	free(b);
	free(c);
	free(d);
}

Test(store, delete_removes_sandbox_history_and_unshared_blobs)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65], v2[65];

	put("v1", v1);
	put("v2", v2);
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	create("acme", "other", v1);
	cr_assert_eq(store_sandbox_delete(st, "acme", "a", &e), 0, "%s", e.msg);
	cr_expect_eq(store_sandbox_get(st, "acme", "a", &sb, &e), -ENOENT);
	cr_expect_eq(raw_int("SELECT count(*) FROM versions WHERE id = 'a'",
	    NULL), 0);
	/* v2 was a's alone; v1 is other's head too. */
	cr_expect_eq(store_blob_exists(st, v2, &e), 0);
	cr_expect_eq(store_blob_exists(st, v1, &e), 1);
	cr_expect_eq(chunk_rows(), 1);
	cr_expect_eq(refs_mismatches(), 0);
	cr_expect_eq(store_sandbox_delete(st, "acme", "a", &e), -ENOENT);
	cr_expect_eq(store_sandbox_history(st, "acme", "a", hist_cb,
	    &(struct hist){ 0 }, &e), -ENOENT);
	/* The id is free again. */
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_delete(st, "acme", "other", &e), 0);
	cr_assert_eq(store_sandbox_delete(st, "acme", "a", &e), 0);
	cr_expect_eq(blob_rows(), 0);
	cr_expect_eq(chunk_rows(), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM chunk_refs", NULL), 0);
}

Test(store, list_is_per_tenant_in_id_order)
{
	struct err e = { 0 };
	char ids[256] = "";
	char v1[65];

	put("v1", v1);
	create("acme", "c", v1);
	create("acme", "a", v1);
	create("other", "b", v1);
	cr_assert_eq(store_sandbox_list(st, "acme", list_cb, ids, &e), 0);
	cr_expect_str_eq(ids, "a,c");
	ids[0] = '\0';
	cr_assert_eq(store_sandbox_list(st, "other", list_cb, ids, &e), 0);
	cr_expect_str_eq(ids, "b");
	ids[0] = '\0';
	cr_assert_eq(store_sandbox_list(st, "empty", list_cb, ids, &e), 0);
	cr_expect_str_eq(ids, "");
}

Test(store, tenants_are_isolated)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char va[65], vb[65], vx[65];

	put("tenant a", va);
	put("tenant b", vb);
	put("intruder", vx);
	create("tenant-a", "shared-id", va);
	create("tenant-b", "shared-id", vb);

	/* A sees its own sandbox, never B's, under the same id. */
	cr_assert_eq(store_sandbox_get(st, "tenant-a", "shared-id", &sb, &e),
	    0);
	cr_expect_str_eq(sb.head, va);
	cr_expect_eq(store_sandbox_get(st, "tenant-a", "only-b", &sb, &e),
	    -ENOENT);
	create("tenant-b", "only-b", vb);
	cr_expect_eq(store_sandbox_get(st, "tenant-a", "only-b", &sb, &e),
	    -ENOENT);
	cr_expect_eq(store_sandbox_commit(st, "tenant-a", "only-b", 1, vx, &e),
	    -ENOENT);
	cr_expect_eq(store_sandbox_fork(st, "tenant-a", "only-b", "stolen",
	    &e), -ENOENT);
	cr_expect_eq(store_sandbox_delete(st, "tenant-a", "only-b", &e),
	    -ENOENT);
	cr_expect_eq(store_sandbox_history(st, "tenant-a", "only-b", hist_cb,
	    &(struct hist){ 0 }, &e), -ENOENT);

	/* A's writes on the shared id touch only A's sandbox. */
	cr_assert_eq(store_sandbox_commit(st, "tenant-a", "shared-id", 1, vx,
	    &e), 0);
	cr_assert_eq(store_sandbox_delete(st, "tenant-a", "shared-id", &e), 0);
	cr_assert_eq(store_sandbox_get(st, "tenant-b", "shared-id", &sb, &e),
	    0);
	cr_expect_str_eq(sb.head, vb);
	cr_expect_eq(sb.version, 1);
	cr_expect_eq(history("tenant-b", "shared-id").n, 1);
	cr_expect_eq(version_of("tenant-b", "only-b"), 1);
}

/*** Atomic put and move ***/

Test(store, create_blob_and_commit_blob_move_the_head)
{
	size_t len = 8 * STORE_CHUNK_BYTES + 17;
	unsigned char *a = pattern(len, 12), *b = malloc(len);
	char sha1[65], sha2[65], want[65];
	struct store_sandbox sb;
	struct err e = { 0 };
	struct hist h;

	cr_assert_eq(store_sandbox_create_blob(st, "acme", "a", a, len,
	    "{\"k\":1}", sha1, &e), 0, "%s", e.msg);
	manifest_key_of(a, len, want);
	cr_expect_str_eq(sha1, want);
	memcpy(b, a, len);
	b[3 * STORE_CHUNK_BYTES + 9] ^= 1;
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "a", 1, b, len,
	    sha1, a, len, sha2, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &sb, &e), 0);
	cr_expect_eq(sb.version, 2);
	cr_expect_str_eq(sb.head, sha2);
	cr_expect_str_eq(sb.labels, "{\"k\":1}");
	h = history("acme", "a");
	cr_assert_eq(h.n, 2);
	cr_expect_str_eq(h.v[0].sha256, sha2);
	cr_expect_str_eq(h.v[1].sha256, sha1);
	cr_expect_eq(chunk_rows(), 10);
	expect_blob(sha2, b, len);
	cr_expect_eq(refs_mismatches(), 0);
	free(a);
	free(b);
}

Test(store, commit_blob_with_stale_version_stores_nothing)
{
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *a = pattern(len, 13), *b = pattern(len, 14);
	char sha1[65], sha2[65];
	struct err e = { 0 };
	int64_t blobs, chunks, refs;

	cr_assert_eq(store_sandbox_create_blob(st, "acme", "a", a, len, NULL,
	    sha1, &e), 0, "%s", e.msg);
	blobs = blob_rows();
	chunks = chunk_rows();
	refs = raw_int("SELECT sum(refs) FROM chunk_refs", NULL);
	cr_expect_eq(store_sandbox_commit_blob(st, "acme", "a", 7, b, len,
	    sha1, a, len, sha2, &e), -ESTALE);
	cr_expect_str_eq(e.msg, "store: sandbox acme/a: at version 1, not 7");
	cr_expect_eq(store_sandbox_commit_blob(st, "acme", "gone", 1, b, len,
	    NULL, NULL, 0, sha2, &e), -ENOENT);
	cr_expect_eq(store_sandbox_create_blob(st, "acme", "a", b, len, NULL,
	    sha2, &e), -EEXIST);
	cr_expect_eq(blob_rows(), blobs);
	cr_expect_eq(chunk_rows(), chunks);
	cr_expect_eq(raw_int("SELECT sum(refs) FROM chunk_refs", NULL), refs);
	cr_expect_eq(version_of("acme", "a"), 1);
	cr_expect_eq(store_sandbox_commit_blob(st, "bad tenant", "a", 1, b,
	    len, NULL, NULL, 0, sha2, &e), -EINVAL);
	free(a);
	free(b);
}

Test(store, delta_put_against_a_collected_base_hashes_everything)
{
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *a = pattern(len, 15), *b = pattern(len, 16);
	unsigned char *c = malloc(len);
	char sha_a[65], sha_b[65], sha_c[65];
	struct err e = { 0 };

	/* x is at a's snapshot; a worker holds it as its base... */
	store_set_keep_versions(st, 1);
	cr_assert_eq(store_sandbox_create_blob(st, "acme", "x", a, len, NULL,
	    sha_a, &e), 0);
	/* ...while another commit drops it, chunks and all. */
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "x", 1, b, len,
	    sha_a, a, len, sha_b, &e), 0);
	cr_expect_eq(store_blob_exists(st, sha_a, &e), 0);
	/* The stale one is refused, and a put against the gone base works. */
	memcpy(c, a, len);
	c[5] ^= 1;
	cr_expect_eq(store_sandbox_commit_blob(st, "acme", "x", 1, c, len,
	    sha_a, a, len, sha_c, &e), -ESTALE);
	cr_assert_eq(store_blob_put_delta(st, c, len, sha_a, a, len, sha_c,
	    &e), 0, "%s", e.msg);
	expect_blob(sha_c, c, len);
	cr_expect_eq(refs_mismatches(), 0);
	free(a);
	free(b);
	free(c);
}

/*** Retention ***/

Test(store, prune_keeps_heads_newest_and_forked_blobs)
{
	char v[5][65], orphan[65], name[8];
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 0;
	struct hist h;

	store_set_keep_versions(st, 0);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "v%d", i + 1);
		put(name, v[i]);
	}
	put("never referenced", orphan);
	/* Old enough for prune to take it. */
	raw_exec("UPDATE blobs SET created_at = created_at - 3600000");
	/* a: v1 -> v2 -> v3 -> v4 -> v5; fork b at v2 (a at version 2). */
	create("acme", "a", v[0]);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v[1], &e), 0);
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "b", &e), 0);
	for (int i = 2; i < 5; i++)
		cr_assert_eq(store_sandbox_commit(st, "acme", "a",
		    (uint64_t)i, v[i], &e), 0);
	cr_assert_eq(blob_rows(), 6);
	cr_assert_eq(history("acme", "a").n, 5);

	/* Keep 2: a keeps versions 5 and 4; v1 and v3 and the orphan go. */
	cr_expect_eq(store_prune(st, 2, &e), 3, "%s", e.msg);
	h = history("acme", "a");
	cr_assert_eq(h.n, 2);
	cr_expect_eq(h.v[0].version, 5);
	cr_expect_eq(h.v[1].version, 4);
	cr_expect_eq(store_blob_get(st, v[0], &got, &len, &e), -ENOENT);
	cr_expect_eq(store_blob_get(st, v[2], &got, &len, &e), -ENOENT);
	cr_expect_eq(store_blob_get(st, orphan, &got, &len, &e), -ENOENT);
	/* v2 is b's head: the fork keeps it alive. */
	cr_assert_eq(store_blob_get(st, v[1], &got, &len, &e), 0, "%s", e.msg);
	free(got);
	cr_expect_eq(blob_rows(), 3);
	cr_expect_eq(chunk_rows(), 3);
	cr_expect_eq(refs_mismatches(), 0);

	/* Keep 0 still keeps every head. */
	cr_expect_eq(store_prune(st, 0, &e), 1);
	cr_expect_eq(history("acme", "a").n, 1);
	cr_expect_eq(history("acme", "b").n, 1);
	cr_expect_eq(store_blob_exists(st, v[4], &e), 1);
	cr_expect_eq(store_blob_exists(st, v[1], &e), 1);
	cr_expect_eq(store_prune(st, 0, &e), 0);

	/* Deleting the fork frees its blob at once; prune finds nothing. */
	cr_assert_eq(store_sandbox_delete(st, "acme", "b", &e), 0);
	cr_expect_eq(blob_rows(), 1);
	cr_expect_eq(store_prune(st, 10, &e), 0);
	cr_expect_eq(chunk_rows(), 1);
	cr_expect_eq(version_of("acme", "a"), 5);
}

Test(store, prune_spares_unnamed_blobs_younger_than_the_grace)
{
	size_t len = 2 * STORE_CHUNK_BYTES;
	unsigned char *a = pattern(len, 8);
	struct err e = { 0 };
	char sha[65], kept[65];

	put("kept", kept);
	create("acme", "a", kept);
	/* A put whose create has not come yet. */
	put_bytes(a, len, sha);
	cr_expect_eq(store_prune(st, 0, &e), 0, "%s", e.msg);
	expect_blob(sha, a, len);
	/* Its create may still come, and works. */
	create("acme", "late", sha);
	cr_assert_eq(store_sandbox_delete(st, "acme", "late", &e), 0);
	cr_expect_eq(store_blob_exists(st, sha, &e), 0);

	/* An orphan older than the grace goes, with its chunks. */
	put_bytes(a, len, sha);
	raw_exec("UPDATE blobs SET created_at = created_at - 600001");
	cr_expect_eq(store_prune(st, 0, &e), 1);
	cr_expect_eq(store_blob_exists(st, sha, &e), 0);
	cr_expect_eq(store_blob_exists(st, kept, &e), 1);
	cr_expect_eq(chunk_rows(), 1);
	cr_expect_eq(refs_mismatches(), 0);
	free(a);
}

/*
 * a: create, then commits of snapshots that each change one chunk of the
 * previous one, by delta put; returns the head's version.
 */
static uint64_t
commit_chain(const char *id, unsigned char *buf, size_t len, int commits,
    char shas[][65])
{
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create_blob(st, "acme", id, buf, len, NULL,
	    shas[0], &e), 0, "%s", e.msg);
	for (int i = 1; i <= commits; i++) {
		unsigned char *prev = malloc(len);

		memcpy(prev, buf, len);
		buf[(size_t)(i % 4) * STORE_CHUNK_BYTES + (size_t)i] ^= 0xff;
		cr_assert_eq(store_sandbox_commit_blob(st, "acme", id,
		    (uint64_t)i, buf, len, shas[i - 1], prev, len, shas[i],
		    &e), 0, "%s", e.msg);
		free(prev);
	}
	return (uint64_t)commits + 1;
}

Test(store, retention_keeps_n_versions_and_frees_the_rest)
{
	enum { COMMITS = 7, KEEP = 3 };
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *buf = pattern(len, 9);
	char shas[COMMITS + 1][65];
	struct err e = { 0 };
	struct hist h;

	store_set_keep_versions(st, KEEP);
	cr_expect_eq(commit_chain("a", buf, len, COMMITS, shas), COMMITS + 1);
	h = history("acme", "a");
	cr_assert_eq(h.n, KEEP);
	for (int i = 0; i < KEEP; i++)
		cr_expect_eq(h.v[i].version, (uint64_t)(COMMITS + 1 - i));
	cr_expect_str_eq(h.v[0].sha256, shas[COMMITS]);
	/* The dropped versions' blobs are gone; the kept ones read back. */
	for (int i = 0; i <= COMMITS - KEEP; i++)
		cr_expect_eq(store_blob_exists(st, shas[i], &e), 0, "v%d", i + 1);
	expect_blob(shas[COMMITS], buf, len);
	cr_expect_eq(blob_rows(), KEEP);
	/* 4 chunks under the head, and one more per older kept version. */
	cr_expect_eq(chunk_rows(), 4 + KEEP - 1);
	cr_expect_eq(refs_mismatches(), 0);

	/* Keep 1: the next commit leaves the head alone. */
	store_set_keep_versions(st, 1);
	buf[0] ^= 1;
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "a", COMMITS + 1,
	    buf, len, shas[COMMITS], NULL, 0, shas[0], &e), 0, "%s", e.msg);
	cr_expect_eq(history("acme", "a").n, 1);
	cr_expect_eq(blob_rows(), 1);
	cr_expect_eq(chunk_rows(), 4);
	cr_expect_eq(refs_mismatches(), 0);
	expect_blob(shas[0], buf, len);
	free(buf);
}

Test(store, keep_versions_zero_keeps_every_version)
{
	enum { COMMITS = 20 };
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *buf = pattern(len, 10);
	char shas[COMMITS + 1][65];
	struct err e = { 0 };
	int64_t rows;

	store_set_keep_versions(st, 0);
	commit_chain("a", buf, len, COMMITS, shas);
	rows = raw_int("SELECT count(*) FROM versions", NULL);
	cr_expect_eq(rows, COMMITS + 1);
	cr_expect_eq(blob_rows(), COMMITS + 1);
	for (int i = 0; i <= COMMITS; i++)
		cr_expect_eq(store_blob_exists(st, shas[i], &e), 1);
	cr_expect_eq(refs_mismatches(), 0);
	/* The default keeps 16, and trims the rest at the next commit. */
	store_set_keep_versions(st, STORE_KEEP_VERSIONS_DEFAULT);
	buf[1] ^= 1;
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "a", COMMITS + 1,
	    buf, len, shas[COMMITS], buf, 0, shas[0], &e), 0, "%s", e.msg);
	cr_expect_eq(raw_int("SELECT count(*) FROM versions", NULL),
	    STORE_KEEP_VERSIONS_DEFAULT);
	cr_expect_eq(blob_rows(), STORE_KEEP_VERSIONS_DEFAULT);
	cr_expect_eq(refs_mismatches(), 0);
	free(buf);
}

Test(store, retention_spares_blobs_a_fork_still_names)
{
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *buf = pattern(len, 11), *forked = malloc(len);
	char shas[6][65];
	struct err e = { 0 };

	store_set_keep_versions(st, 1);
	commit_chain("a", buf, len, 1, shas);
	memcpy(forked, buf, len);
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "b", &e), 0);
	/* a moves on, dropping version 2, which b's head still names. */
	for (int i = 2; i <= 5; i++) {
		unsigned char *prev = malloc(len);

		memcpy(prev, buf, len);
		buf[(size_t)i * 7] ^= 0xff;
		cr_assert_eq(store_sandbox_commit_blob(st, "acme", "a",
		    (uint64_t)i, buf, len, shas[i - 1], prev, len, shas[i],
		    &e), 0, "%s", e.msg);
		free(prev);
	}
	expect_blob(shas[1], forked, len);
	cr_expect_eq(blob_rows(), 2);
	cr_expect_eq(refs_mismatches(), 0);

	/* Deleting the source leaves the fork whole. */
	cr_assert_eq(store_sandbox_delete(st, "acme", "a", &e), 0);
	cr_expect_eq(blob_rows(), 1);
	expect_blob(shas[1], forked, len);
	cr_expect_eq(chunk_rows(), 4);
	cr_expect_eq(refs_mismatches(), 0);
	cr_assert_eq(store_sandbox_delete(st, "acme", "b", &e), 0);
	cr_expect_eq(chunk_rows(), 0);
	free(buf);
	free(forked);
}

/*** Migration ***/

/* Schema 1, as store.c created it before blobs were chunked. */
static const char SCHEMA_V1_SQL[] =
	"CREATE TABLE blobs (sha256 TEXT NOT NULL PRIMARY KEY,"
	" size INTEGER NOT NULL, data BLOB NOT NULL,"
	" created_at INTEGER NOT NULL);"
	"CREATE TABLE sandboxes (tenant TEXT NOT NULL, id TEXT NOT NULL,"
	" head TEXT NOT NULL REFERENCES blobs (sha256),"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
	" labels TEXT NOT NULL DEFAULT '{}',"
	" PRIMARY KEY (tenant, id));"
	"CREATE INDEX sandboxes_head ON sandboxes (head);"
	"CREATE TABLE versions (tenant TEXT NOT NULL, id TEXT NOT NULL,"
	" version INTEGER NOT NULL,"
	" sha256 TEXT NOT NULL REFERENCES blobs (sha256),"
	" created_at INTEGER NOT NULL,"
	" PRIMARY KEY (tenant, id, version),"
	" FOREIGN KEY (tenant, id) REFERENCES sandboxes (tenant, id)"
	" ON DELETE CASCADE);"
	"CREATE INDEX versions_sha256 ON versions (sha256);"
	"PRAGMA user_version = 1;";

/* Replaces the fixture's store with a schema-1 file; returns its handle. */
static sqlite3 *
v1_create(void)
{
	char path[PATH_MAX];
	sqlite3 *db;

	store_close(st);
	st = NULL;
	teardown();
	cr_assert_not_null(mkdtemp(strcpy(dir, "/tmp/store_test.XXXXXX")));
	snprintf(path, sizeof(path), "%s/store.db", dir);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL,
	    NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, SCHEMA_V1_SQL, NULL, NULL, NULL),
	    SQLITE_OK, "%s", sqlite3_errmsg(db));
	return db;
}

/* Inserts a schema-1 blob under key (its SHA-256 unless damaged). */
static void
v1_blob(sqlite3 *db, const char *key, const void *data, size_t len)
{
	sqlite3_stmt *stmt = NULL;

	cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO blobs (sha256, size,"
	    " data, created_at) VALUES (?1, ?2, ?3, 1700000000000)", -1, &stmt,
	    NULL), SQLITE_OK);
	sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 2, (sqlite3_int64)len);
	if (len > 0)
		sqlite3_bind_blob(stmt, 3, data, (int)len, SQLITE_STATIC);
	else
		sqlite3_bind_zeroblob(stmt, 3, 0);
	cr_assert_eq(sqlite3_step(stmt), SQLITE_DONE, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
}

/* Runs sql with ?1..?3 bound to text (NULL: unbound). */
static void
v1_exec(sqlite3 *db, const char *sql, const char *p1, const char *p2,
    const char *p3)
{
	sqlite3_stmt *stmt = NULL;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
	    "%s", sqlite3_errmsg(db));
	if (p1 != NULL)
		sqlite3_bind_text(stmt, 1, p1, -1, SQLITE_STATIC);
	if (p2 != NULL)
		sqlite3_bind_text(stmt, 2, p2, -1, SQLITE_STATIC);
	if (p3 != NULL)
		sqlite3_bind_text(stmt, 3, p3, -1, SQLITE_STATIC);
	cr_assert_eq(sqlite3_step(stmt), SQLITE_DONE, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
}

Test(store, open_converts_a_schema_1_store)
{
	size_t len[3] = { 10, 3 * STORE_CHUNK_BYTES + 77, 0 };
	unsigned char *data[3], *bad = pattern(100, 99);
	char old[3][65], bad_key[65], want[65];
	struct store_sandbox sb;
	struct err e = { 0 };
	sqlite3 *db;
	struct hist h;

	db = v1_create();
	for (int i = 0; i < 3; i++) {
		data[i] = pattern(len[i], 20 + (uint32_t)i);
		sha256_of(data[i], len[i], old[i]);
		v1_blob(db, old[i], data[i], len[i]);
	}
	/* A damaged blob: its bytes do not hash to its key. */
	sha256_of("something else", 14, bad_key);
	v1_blob(db, bad_key, bad, 100);
	/* a: v1 -> v2 -> v3 (the empty blob); fork f at a's v2; c damaged. */
	v1_exec(db, "INSERT INTO sandboxes (tenant, id, head, version,"
	    " created_at, updated_at, labels) VALUES"
	    " ('acme', 'a', ?1, 3, 1, 2, '{\"k\":\"v\"}'),"
	    " ('acme', 'f', ?2, 1, 1, 1, '{}'), ('acme', 'c', ?3, 1, 1, 1,"
	    " '{}')", old[2], old[1], bad_key);
	v1_exec(db, "INSERT INTO versions (tenant, id, version, sha256,"
	    " created_at) VALUES ('acme', 'a', 1, ?1, 1),"
	    " ('acme', 'a', 2, ?2, 1), ('acme', 'a', 3, ?3, 2),"
	    " ('acme', 'f', 1, ?2, 1)", old[0], old[1], old[2]);
	v1_exec(db, "INSERT INTO versions (tenant, id, version, sha256,"
	    " created_at) VALUES ('acme', 'c', 1, ?1, 1)", bad_key, NULL,
	    NULL);
	sqlite3_close(db);

	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
	cr_expect_eq(raw_int("PRAGMA user_version", NULL), 3);
	cr_expect_eq(raw_int("SELECT count(*) FROM pragma_table_info('blobs')"
	    " WHERE name = 'data'", NULL), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM sqlite_schema"
	    " WHERE name = 'blobs_v2'", NULL), 0);
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &sb, &e), 0, "%s",
	    e.msg);
	manifest_key_of(data[2], len[2], want);
	cr_expect_str_eq(sb.head, want);
	cr_expect_eq(sb.version, 3);
	cr_expect_str_eq(sb.labels, "{\"k\":\"v\"}");
	h = history("acme", "a");
	cr_assert_eq(h.n, 3);
	for (int i = 0; i < 3; i++) {
		manifest_key_of(data[2 - i], len[2 - i], want);
		cr_expect_str_eq(h.v[i].sha256, want);
		expect_blob(h.v[i].sha256, data[2 - i], len[2 - i]);
	}
	cr_assert_eq(store_sandbox_get(st, "acme", "f", &sb, &e), 0);
	cr_expect_str_eq(sb.head, h.v[1].sha256);
	/* The damaged blob keeps its old key and still reads as damaged. */
	cr_assert_eq(store_sandbox_get(st, "acme", "c", &sb, &e), 0);
	cr_expect_str_eq(sb.head, bad_key);
	cr_expect_eq(store_blob_get(st, bad_key, &(void *){ NULL },
	    &(size_t){ 0 }, &e), -EBADMSG);
	cr_expect_eq(blob_rows(), 4);
	cr_expect_eq(chunk_rows(), 1 + 4 + 1);
	cr_expect_eq(refs_mismatches(), 0);
	cr_expect_eq(raw_int("SELECT created_at FROM blobs LIMIT 1", NULL),
	    1700000000000LL);

	/* The converted store works, and opens again as schema 2. */
	cr_assert_eq(store_sandbox_commit_blob(st, "acme", "a", 3, data[0],
	    len[0], NULL, NULL, 0, want, &e), 0, "%s", e.msg);
	store_close(st);
	st = NULL;
	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
	cr_expect_eq(version_of("acme", "a"), 4);
	for (int i = 0; i < 3; i++)
		free(data[i]);
	free(bad);
}

Test(store, failed_conversion_leaves_schema_1_as_it_was)
{
	char key[65], missing[65];
	struct err e = { 0 };
	sqlite3 *db;

	db = v1_create();
	sha256_of("v1", 2, key);
	v1_blob(db, key, "v1", 2);
	/* A head naming a blob that is not there (keys were off). */
	sha256_of("gone", 4, missing);
	v1_exec(db, "INSERT INTO sandboxes (tenant, id, head, version,"
	    " created_at, updated_at) VALUES ('acme', 'a', ?1, 1, 1, 1)",
	    missing, NULL, NULL);
	sqlite3_close(db);

	cr_expect_eq(store_open(dir, &st, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "migration") != NULL, "%s", e.msg);
	cr_expect_null(st);
	cr_expect_eq(raw_int("PRAGMA user_version", NULL), 1);
	cr_expect_eq(raw_int("SELECT count(*) FROM blobs WHERE sha256 = ?1",
	    key), 1);
	cr_expect_eq(raw_int("SELECT count(*) FROM sqlite_schema"
	    " WHERE name IN ('chunks', 'chunk_refs', 'blobs_v2')", NULL), 0);
}

/*** Names ***/

Test(store, rejects_bad_names_with_exact_messages)
{
	static const char TENANT_MSG[] = "store: tenant: must be 1 to 64 "
	    "characters of A-Z a-z 0-9 _ -";
	static const char ID_MSG[] = "store: id: must be 1 to 128 "
	    "characters of A-Z a-z 0-9 . _ : -";
	char long_tenant[66], long_id[130], ok_id[129];
	struct store_sandbox sb;
	struct err e = { 0 };
	char sha[65];

	put("v1", sha);
	memset(long_tenant, 't', 65);
	long_tenant[65] = '\0';
	memset(long_id, 'i', 129);
	long_id[129] = '\0';
	memset(ok_id, 'i', 128);
	ok_id[128] = '\0';

	const char *bad_tenants[] = { "", "a b", "a.b", "a/b", "ä", long_tenant };
	for (size_t i = 0; i < sizeof(bad_tenants) / sizeof(*bad_tenants); i++) {
		cr_expect_eq(store_sandbox_create(st, bad_tenants[i], "x", sha,
		    NULL, &e), -EINVAL, "tenant %zu", i);
		cr_expect_str_eq(e.msg, TENANT_MSG);
	}
	cr_expect_eq(store_sandbox_get(st, NULL, "x", &sb, &e), -EINVAL);
	cr_expect_str_eq(e.msg, TENANT_MSG);

	const char *bad_ids[] = { "", "a b", "a/b", "a\\b", "a\nb", long_id };
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(*bad_ids); i++) {
		cr_expect_eq(store_sandbox_create(st, "acme", bad_ids[i], sha,
		    NULL, &e), -EINVAL, "id %zu", i);
		cr_expect_str_eq(e.msg, ID_MSG);
	}
	cr_expect_eq(store_sandbox_get(st, "acme", "..", &sb, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: id: must not be \".\" or \"..\"");
	cr_expect_eq(store_sandbox_fork(st, "acme", "ok", "b/c", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: dst: must be 1 to 128 characters of "
	    "A-Z a-z 0-9 . _ : -");
	cr_expect_eq(store_sandbox_fork(st, "acme", "", "b", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "store: src: must be 1 to 128 characters of "
	    "A-Z a-z 0-9 . _ : -");

	/* The edges of the accepted sets. */
	cr_expect_eq(store_sandbox_create(st, "Az09_-", "aZ.0_:-", sha, NULL,
	    &e), 0, "%s", e.msg);
	long_tenant[64] = '\0';
	cr_expect_eq(store_sandbox_create(st, long_tenant, ok_id, sha, NULL,
	    &e), 0, "%s", e.msg);
}

/*** Durability ***/

Test(store, reopen_sees_everything)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65], v2[65];
	void *got = NULL;
	size_t len = 0;

	put("v1", v1);
	put("v2", v2);
	cr_assert_eq(store_sandbox_create(st, "acme", "a", v1, "{\"k\":\"v\"}",
	    &e), 0);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "b", &e), 0);
	store_close(st);
	st = NULL;

	cr_assert_eq(store_open(dir, &st, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "acme", "a", &sb, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(sb.version, 2);
	cr_expect_str_eq(sb.head, v2);
	cr_expect_str_eq(sb.labels, "{\"k\":\"v\"}");
	cr_expect_eq(history("acme", "a").n, 2);
	cr_assert_eq(store_sandbox_get(st, "acme", "b", &sb, &e), 0);
	cr_expect_str_eq(sb.head, v2);
	cr_assert_eq(store_blob_get(st, v1, &got, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 2);
	cr_expect_eq(memcmp(got, "v1", 2), 0);
	free(got);
}

Test(store, file_is_wal_and_private)
{
	char path[PATH_MAX];
	sqlite3_stmt *stmt = NULL;
	struct stat sb;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/store.db", dir);
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_eq(sb.st_mode & 0777, 0600);
	db = raw_open();
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt,
	    NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
	cr_expect_str_eq((const char *)sqlite3_column_text(stmt, 0), "wal");
	sqlite3_finalize(stmt);
	sqlite3_close(db);
}

Test(store, open_refuses_a_symlinked_database)
{
	char path[PATH_MAX], other[] = "/tmp/store_test_sym.XXXXXX";
	struct store *s2 = NULL;
	struct err e = { 0 };

	cr_assert_not_null(mkdtemp(other));
	snprintf(path, sizeof(path), "%s/store.db", other);
	cr_assert_eq(symlink("/tmp/elsewhere.db", path), 0);
	cr_expect_eq(store_open(other, &s2, &e), -ELOOP, "%s", e.msg);
	cr_expect_null(s2);
	unlink(path);
	rmdir(other);
}

/*
 * A pool's workers open a new store at the same moment: every one of them
 * must get it (switching the file to WAL does not wait for the busy
 * handler on its own).
 */
Test(store, many_processes_open_a_new_store_at_once)
{
	enum { N = 16, ROUNDS = 40 };
	int failed = 0;

	for (int r = 0; r < ROUNDS; r++) {
		char fresh[] = "/tmp/store_test_race.XXXXXX", path[PATH_MAX];
		pid_t pids[N];

		cr_assert_not_null(mkdtemp(fresh));
		for (int i = 0; i < N; i++) {
			pids[i] = fork();
			cr_assert_geq(pids[i], 0);
			if (pids[i] == 0) {
				struct store *s = NULL;
				struct err e = { 0 };
				int rc = store_open(fresh, &s, &e);

				if (rc < 0)
					fprintf(stderr, "open: %s\n", e.msg);
				store_close(s);
				_exit(rc < 0);
			}
		}
		for (int i = 0; i < N; i++) {
			int ws;

			cr_assert_eq(waitpid(pids[i], &ws, 0), pids[i]);
			failed += !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
		}
		snprintf(path, sizeof(path), "rm -rf %s", fresh);
		cr_assert_eq(system(path), 0);
	}
	cr_expect_eq(failed, 0, "%d of %d opens failed", failed, N * ROUNDS);
}

Test(store, two_handles_cannot_both_commit_one_version)
{
	struct store *s2 = NULL;
	struct err e = { 0 };
	char v1[65], v2[65], v3[65];

	put("v1", v1);
	put("v2", v2);
	put("v3", v3);
	create("acme", "a", v1);
	cr_assert_eq(store_open(dir, &s2, &e), 0, "%s", e.msg);
	cr_expect_eq(store_sandbox_commit(st, "acme", "a", 1, v2, &e), 0);
	cr_expect_eq(store_sandbox_commit(s2, "acme", "a", 1, v3, &e),
	    -ESTALE);
	store_close(s2);
	cr_expect_eq(version_of("acme", "a"), 2);
}

/*** Commits from an image and a patch ***/

/*
 * A cumulative patch over img, and the model of the snapshot it makes:
 * below size, a byte is its block's if the block is in the patch, else
 * img's below img_len, else zero (patch.h). Blocks are kept whole in
 * blocks[], which has room for cap bytes.
 */
struct tpatch {
	const unsigned char *img;	/* the image, not owned */
	size_t img_len;			/* bytes of img */
	size_t size;			/* the patched snapshot's size */
	size_t cap;			/* bytes blocks[] can hold */
	unsigned char *blocks;		/* block i at i * PATCH_BLOCK */
	bool *in;			/* block i is in the patch */
};

static void
tp_init(struct tpatch *t, const unsigned char *img, size_t img_len,
    size_t cap)
{
	t->img = img;
	t->img_len = img_len;
	t->size = img_len;
	t->cap = (cap + PATCH_BLOCK - 1) / PATCH_BLOCK * PATCH_BLOCK;
	t->blocks = calloc(t->cap, 1);
	t->in = calloc(t->cap / PATCH_BLOCK, sizeof(bool));
	cr_assert(t->blocks != NULL && t->in != NULL);
}

static void
tp_free(struct tpatch *t)
{
	free(t->blocks);
	free(t->in);
}

/* Byte o of the image under no block: img's, or zero past its end. */
static unsigned char
tp_img_byte(const struct tpatch *t, size_t o)
{
	return o < t->img_len ? t->img[o] : 0;
}

/* Writes n bytes at off, adding the blocks they fall in to the patch. */
static void
tp_write(struct tpatch *t, size_t off, const void *data, size_t n)
{
	cr_assert_leq(off + n, t->size);
	for (size_t b = off / PATCH_BLOCK; n > 0 &&
	    b <= (off + n - 1) / PATCH_BLOCK; b++) {
		if (t->in[b])
			continue;
		for (size_t o = b * PATCH_BLOCK; o < (b + 1) * PATCH_BLOCK; o++)
			t->blocks[o] = tp_img_byte(t, o);
		t->in[b] = true;
	}
	memcpy(t->blocks + off, data, n);
}

/* Writes a pattern over n bytes at off. */
static void
tp_scribble(struct tpatch *t, size_t off, size_t n, uint32_t seed)
{
	unsigned char *p = pattern(n, seed);

	tp_write(t, off, p, n);
	free(p);
}

/*
 * Sets the snapshot's size. Blocks wholly past a smaller size leave the
 * patch (patch.h keeps every block below size): the bytes come back from
 * img if the size grows again.
 */
static void
tp_resize(struct tpatch *t, size_t size)
{
	cr_assert_leq(size, t->cap);
	t->size = size;
	for (size_t b = (size + PATCH_BLOCK - 1) / PATCH_BLOCK;
	    b < t->cap / PATCH_BLOCK; b++)
		t->in[b] = false;
}

/* The snapshot the patch makes, as the model says (malloc'd, size bytes). */
static unsigned char *
tp_expected(const struct tpatch *t)
{
	unsigned char *out = malloc(t->size > 0 ? t->size : 1);

	cr_assert_not_null(out);
	for (size_t o = 0; o < t->size; o++)
		out[o] = t->in[o / PATCH_BLOCK] ? t->blocks[o] :
		    tp_img_byte(t, o);
	return out;
}

static void
le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* The patch's bytes (malloc'd) and their length. */
static unsigned char *
tp_bytes(const struct tpatch *t, size_t *len)
{
	uint32_t count = 0, k = 0;
	unsigned char *out;

	for (size_t b = 0; b < t->cap / PATCH_BLOCK; b++)
		count += t->in[b];
	*len = patch_bytes(count);
	out = malloc(*len);
	cr_assert_not_null(out);
	patch_header(out, t->size, count);
	for (size_t b = 0; b < t->cap / PATCH_BLOCK; b++) {
		unsigned char *ent;

		if (!t->in[b])
			continue;
		ent = out + PATCH_HEADER + (size_t)k++ * PATCH_ENTRY;
		le32(ent, (uint32_t)b);
		memcpy(ent + 4, t->blocks + b * PATCH_BLOCK, PATCH_BLOCK);
	}
	return out;
}

/*
 * Commits t's patch to acme/id at version, then checks the new head reads
 * back as the model's bytes and as patch_read() of the whole size, under
 * the key store_blob_put() gives those bytes (that put finds the key
 * stored and adds nothing). Returns how many chunks the commit hashed.
 */
static long
tp_commit(const struct tpatch *t, const char *id, uint64_t version,
    char sha[65])
{
	unsigned char *pb, *want, *read;
	struct patch p;
	struct err e = { 0 };
	char key[65];
	long hashed = store_debug_chunks_hashed(st);
	size_t plen;

	pb = tp_bytes(t, &plen);
	want = tp_expected(t);
	cr_assert_eq(store_sandbox_commit_patch(st, "acme", id, version, t->img,
	    t->img_len, pb, plen, sha, &e), 0, "%s", e.msg);
	hashed = store_debug_chunks_hashed(st) - hashed;
	cr_expect_eq(version_of("acme", id), version + 1);
	expect_blob(sha, want, t->size);
	cr_assert_eq(patch_parse(pb, plen, &p, &e), 0, "%s", e.msg);
	read = malloc(t->size);
	patch_read(t->img, t->img_len, &p, 0, t->size, read);
	cr_expect(memcmp(read, want, t->size) == 0, "patch_read differs from "
	    "the model");
	manifest_key_of(want, t->size, key);
	cr_expect_str_eq(sha, key);
	put_bytes(want, t->size, key);
	cr_expect_str_eq(sha, key);
	free(read);
	free(want);
	free(pb);
	return hashed;
}

/* Creates acme/id with img as its head at version 1. */
static void
create_img(const char *id, const unsigned char *img, size_t len, char sha[65])
{
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create_blob(st, "acme", id, img, len, NULL,
	    sha, &e), 0, "%s", e.msg);
}

Test(store, commit_patch_stores_the_patched_bytes)
{
	size_t len = 16 * STORE_CHUNK_BYTES + 777;
	unsigned char *img = pattern(len, 40);
	char sha[65], v2[65];
	struct tpatch t;

	create_img("a", img, len, sha);
	tp_init(&t, img, len, len + 5 * STORE_CHUNK_BYTES);
	/* Blocks inside, one straddling the image's odd tail. */
	tp_scribble(&t, 3 * PATCH_BLOCK + 10, 100, 1);
	tp_scribble(&t, 5 * STORE_CHUNK_BYTES, PATCH_BLOCK, 2);
	tp_scribble(&t, 5 * STORE_CHUNK_BYTES + 7 * PATCH_BLOCK - 3, 9, 3);
	tp_scribble(&t, 12 * STORE_CHUNK_BYTES + 4000, 300, 4);
	/*
	 * Grown past the image: the tail block holds image bytes then zeros
	 * where nothing wrote, one block is written far out, and the bytes
	 * between are zeros from no block at all.
	 */
	tp_resize(&t, len + 3 * STORE_CHUNK_BYTES + 4097);
	tp_scribble(&t, len - 5, 10, 5);
	tp_scribble(&t, len + 2 * STORE_CHUNK_BYTES + 123, 50, 6);
	tp_commit(&t, "a", 1, v2);
	cr_expect_str_neq(v2, sha);
	cr_expect_eq(refs_mismatches(), 0);
	tp_free(&t);

	/* Shrunk, on another sandbox: bytes past size are not the snapshot's. */
	create_img("b", img, len, sha);
	tp_init(&t, img, len, len);
	tp_resize(&t, len - 100000 - 5);
	tp_scribble(&t, 2 * STORE_CHUNK_BYTES + 1, 2, 7);
	tp_commit(&t, "b", 1, v2);
	cr_expect_eq(refs_mismatches(), 0);
	tp_free(&t);
	free(img);
}

Test(store, commit_patch_chains_cumulative_patches_over_one_image)
{
	size_t len = 8 * STORE_CHUNK_BYTES + 1000;
	unsigned char *img = pattern(len, 41);
	char shas[4][65];
	struct err e = { 0 };
	struct tpatch t;
	long chunks;

	store_set_keep_versions(st, 0);
	create_img("a", img, len, shas[0]);
	tp_init(&t, img, len, len);

	/* P1: one block in chunk 1. */
	chunks = store_chunk_count(st, &e);
	tp_scribble(&t, STORE_CHUNK_BYTES + 5 * PATCH_BLOCK, 64, 1);
	cr_expect_eq(tp_commit(&t, "a", 1, shas[1]), 1);
	cr_expect_eq(store_chunk_count(st, &e) - chunks, 1);

	/* P2 = P1 (chunk 1 written again) + a block in chunk 5. */
	chunks = store_chunk_count(st, &e);
	tp_scribble(&t, STORE_CHUNK_BYTES + 5 * PATCH_BLOCK + 8, 8, 2);
	tp_scribble(&t, 5 * STORE_CHUNK_BYTES, 10, 3);
	cr_expect_eq(tp_commit(&t, "a", 2, shas[2]), 2);
	cr_expect_eq(store_chunk_count(st, &e) - chunks, 2);

	/* P3 = P2 + a block in chunk 3: chunks 1 and 5 hashed, not new. */
	chunks = store_chunk_count(st, &e);
	tp_scribble(&t, 3 * STORE_CHUNK_BYTES + 9 * PATCH_BLOCK, 4096, 4);
	cr_expect_eq(tp_commit(&t, "a", 3, shas[3]), 3);
	cr_expect_eq(store_chunk_count(st, &e) - chunks, 1);

	/* Every version still reads back (keep_versions 0 keeps them all). */
	expect_blob(shas[0], img, len);
	cr_expect_eq(history("acme", "a").n, 4);
	cr_expect_eq(refs_mismatches(), 0);
	tp_free(&t);
	free(img);
}

/*
 * Given the head's own patch (prev), a commit hashes only the chunks whose
 * blocks that patch lacks or holds with other bytes, and stores the same
 * snapshot under the same key as without it.
 */
Test(store, commit_patch_from_the_heads_patch_hashes_only_what_changed)
{
	size_t len = 8 * STORE_CHUNK_BYTES + 1000, l1, l2, l3;
	unsigned char *img = pattern(len, 43), *p1, *p2, *p3, *want;
	char sha[65], v2[65], v3[65], v4[65], key[65];
	struct err e = { 0 };
	struct tpatch t;
	long hashed;

	create_img("a", img, len, sha);
	tp_init(&t, img, len, len);
	tp_scribble(&t, STORE_CHUNK_BYTES + 5 * PATCH_BLOCK, 64, 1);
	p1 = tp_bytes(&t, &l1);
	cr_assert_eq(store_sandbox_commit_patch_from(st, "acme", "a", 1, img, len,
	    NULL, 0, p1, l1, v2, &e), 0, "%s", e.msg);

	/* P2 = P1 + a block in chunk 5: chunk 1 is the head's, unread. */
	tp_scribble(&t, 5 * STORE_CHUNK_BYTES, 10, 2);
	p2 = tp_bytes(&t, &l2);
	hashed = store_debug_chunks_hashed(st);
	cr_assert_eq(store_sandbox_commit_patch_from(st, "acme", "a", 2, img, len,
	    p1, l1, p2, l2, v3, &e), 0, "%s", e.msg);
	cr_expect_eq(store_debug_chunks_hashed(st) - hashed, 1);
	want = tp_expected(&t);
	manifest_key_of(want, len, key);
	cr_expect_str_eq(v3, key);
	expect_blob(v3, want, len);
	free(want);

	/* P3 = P2 with chunk 1's block rewritten: chunk 1 again, not 5. */
	tp_scribble(&t, STORE_CHUNK_BYTES + 5 * PATCH_BLOCK + 1, 1, 3);
	p3 = tp_bytes(&t, &l3);
	hashed = store_debug_chunks_hashed(st);
	cr_assert_eq(store_sandbox_commit_patch_from(st, "acme", "a", 3, img, len,
	    p2, l2, p3, l3, v4, &e), 0, "%s", e.msg);
	cr_expect_eq(store_debug_chunks_hashed(st) - hashed, 1);
	want = tp_expected(&t);
	manifest_key_of(want, len, key);
	cr_expect_str_eq(v4, key);
	expect_blob(v4, want, len);
	cr_expect_eq(refs_mismatches(), 0);
	/* A prev that is no patch is refused, nothing stored. */
	cr_expect_eq(store_sandbox_commit_patch_from(st, "acme", "a", 4, img, len,
	    "junk", 4, p3, l3, v4, &e), -EBADMSG);
	cr_expect_eq(version_of("acme", "a"), 4);
	free(want);
	free(p1);
	free(p2);
	free(p3);
	tp_free(&t);
	free(img);
}

Test(store, commit_patch_hashes_only_the_touched_chunks)
{
	enum { N = 200 };
	size_t len = N * STORE_CHUNK_BYTES + 123;
	unsigned char *img = pattern(len, 42), *pb;
	char sha[65], v2[65], v3[65];
	struct err e = { 0 };
	struct tpatch t;
	long chunks, hashed;
	size_t plen;

	create_img("a", img, len, sha);
	tp_init(&t, img, len, len + 4 * STORE_CHUNK_BYTES);

	/* An empty patch: nothing hashed, nothing stored, the same key. */
	chunks = store_chunk_count(st, &e);
	hashed = store_debug_chunks_hashed(st);
	pb = tp_bytes(&t, &plen);
	cr_assert_eq(store_sandbox_commit_patch(st, "acme", "a", 1, img, len,
	    pb, plen, v2, &e), 0, "%s", e.msg);
	free(pb);
	cr_expect_eq(store_debug_chunks_hashed(st), hashed);
	cr_expect_eq(store_chunk_count(st, &e), chunks);
	cr_expect_str_eq(v2, sha);

	/* Ten blocks in chunks 7, 100 and 200 (the short last one). */
	for (int i = 0; i < 4; i++)
		tp_scribble(&t, 7 * STORE_CHUNK_BYTES + (size_t)i * PATCH_BLOCK,
		    33, (uint32_t)i);
	for (int i = 0; i < 5; i++)
		tp_scribble(&t, 100 * STORE_CHUNK_BYTES +
		    (size_t)(3 * i) * PATCH_BLOCK, 7, 10 + (uint32_t)i);
	tp_scribble(&t, N * STORE_CHUNK_BYTES + 100, 23, 20);
	hashed = store_debug_chunks_hashed(st);
	pb = tp_bytes(&t, &plen);
	cr_assert_eq(store_sandbox_commit_patch(st, "acme", "a", 2, img, len,
	    pb, plen, v2, &e), 0, "%s", e.msg);
	free(pb);
	cr_expect_eq(store_debug_chunks_hashed(st) - hashed, 3);
	cr_expect_eq(store_chunk_count(st, &e) - chunks, 3);

	/*
	 * Grown by three chunks and a bit, nothing new written: chunks 7 and
	 * 100 are hashed again for their blocks, the old last chunk 200 (now
	 * full length) and the three past it (201-203) for the new size; the
	 * other 200 are reused.
	 */
	tp_resize(&t, (N + 3) * STORE_CHUNK_BYTES + 5);
	chunks = store_chunk_count(st, &e);
	hashed = store_debug_chunks_hashed(st);
	pb = tp_bytes(&t, &plen);
	cr_assert_eq(store_sandbox_commit_patch(st, "acme", "a", 3, img, len,
	    pb, plen, v3, &e), 0, "%s", e.msg);
	free(pb);
	cr_expect_eq(store_debug_chunks_hashed(st) - hashed, 2 + 4);
	/* New: the grown chunk 200, zero chunks 201 and 202 (one row), 203. */
	cr_expect_eq(store_chunk_count(st, &e) - chunks, 3);
	pb = tp_expected(&t);
	expect_blob(v3, pb, t.size);
	free(pb);
	cr_expect_eq(refs_mismatches(), 0);
	tp_free(&t);
	free(img);
}

Test(store, commit_patch_refuses_stale_missing_and_bad_patches)
{
	size_t len = 4 * STORE_CHUNK_BYTES, plen;
	unsigned char *img = pattern(len, 43), *pb;
	char sha[65], out[65];
	struct err e = { 0 };
	int64_t blobs, chunks, refs;
	struct tpatch t;
	long hashed;

	create_img("a", img, len, sha);
	tp_init(&t, img, len, len);
	tp_scribble(&t, 100, 100, 1);
	pb = tp_bytes(&t, &plen);
	blobs = blob_rows();
	chunks = chunk_rows();
	refs = raw_int("SELECT sum(refs) FROM chunk_refs", NULL);
	hashed = store_debug_chunks_hashed(st);

	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 2, img, len,
	    pb, plen, out, &e), -ESTALE);
	cr_expect_str_eq(e.msg, "store: sandbox acme/a: at version 1, not 2");
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "gone", 1, img,
	    len, pb, plen, out, &e), -ENOENT);
	cr_expect_eq(store_sandbox_commit_patch(st, "other", "a", 1, img, len,
	    pb, plen, out, &e), -ENOENT, "another tenant's sandbox");
	/* Bad patches: truncated, wrong magic, blocks out of order. */
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 1, img, len,
	    pb, plen - 1, out, &e), -EBADMSG);
	pb[0] ^= 1;
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 1, img, len,
	    pb, plen, out, &e), -EBADMSG);
	cr_expect_str_eq(e.msg, "patch: not a patch (magic)");
	pb[0] ^= 1;
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 1, img, len,
	    NULL, 0, out, &e), -EBADMSG);
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 1, NULL, len,
	    pb, plen, out, &e), -EINVAL);
	free(pb);
	tp_scribble(&t, 3 * STORE_CHUNK_BYTES, 1, 2);
	pb = tp_bytes(&t, &plen);
	memcpy(pb + PATCH_HEADER + PATCH_ENTRY, pb + PATCH_HEADER, 4);
	cr_expect_eq(store_sandbox_commit_patch(st, "acme", "a", 1, img, len,
	    pb, plen, out, &e), -EBADMSG);
	free(pb);

	cr_expect_eq(store_debug_chunks_hashed(st), hashed);
	cr_expect_eq(blob_rows(), blobs);
	cr_expect_eq(chunk_rows(), chunks);
	cr_expect_eq(raw_int("SELECT sum(refs) FROM chunk_refs", NULL), refs);
	cr_expect_eq(version_of("acme", "a"), 1);
	tp_free(&t);
	free(img);
}

Test(store, commit_patch_applies_retention_and_keeps_shared_chunks)
{
	enum { COMMITS = 5, KEEP = 2 };
	size_t len = 4 * STORE_CHUNK_BYTES;
	unsigned char *img = pattern(len, 44), *want;
	char shas[COMMITS + 1][65];
	struct err e = { 0 };
	struct tpatch t;
	struct hist h;

	store_set_keep_versions(st, KEEP);
	create_img("a", img, len, shas[0]);
	tp_init(&t, img, len, len);
	for (int k = 1; k <= COMMITS; k++) {
		tp_scribble(&t, (size_t)(k % 4) * STORE_CHUNK_BYTES + 64, 8,
		    (uint32_t)k);
		tp_commit(&t, "a", (uint64_t)k, shas[k]);
	}
	h = history("acme", "a");
	cr_assert_eq(h.n, KEEP);
	cr_expect_str_eq(h.v[0].sha256, shas[COMMITS]);
	cr_expect_str_eq(h.v[1].sha256, shas[COMMITS - 1]);
	for (int k = 0; k <= COMMITS - KEEP; k++)
		cr_expect_eq(store_blob_exists(st, shas[k], &e), 0, "v%d", k + 1);
	/*
	 * Only the two kept versions are left: 4 chunks under the head and
	 * the one (chunk 1) the last commit changed; the chunks the head
	 * shares with the collected versions are still there.
	 */
	cr_expect_eq(blob_rows(), KEEP);
	cr_expect_eq(chunk_rows(), 4 + 1);
	cr_expect_eq(refs_mismatches(), 0);
	want = tp_expected(&t);
	expect_blob(shas[COMMITS], want, len);
	free(want);
	tp_free(&t);
	free(img);
}

Test(store, commit_patch_grows_and_shrinks_the_image)
{
	size_t len = 5 * STORE_CHUNK_BYTES + 300;
	unsigned char *img = pattern(len, 45);
	char sha[65], v[4][65];
	struct tpatch t;

	create_img("a", img, len, sha);
	tp_init(&t, img, len, len + 4 * STORE_CHUNK_BYTES);
	/* Grown by three chunks and a bit: a block in chunk 2 and in chunk 7. */
	tp_resize(&t, len + 3 * STORE_CHUNK_BYTES + 100);
	tp_scribble(&t, 2 * STORE_CHUNK_BYTES + 50, 10, 1);
	tp_scribble(&t, 7 * STORE_CHUNK_BYTES + 4096 * 3, 4096, 2);
	tp_commit(&t, "a", 1, v[1]);
	/* Shrunk below the image, inside chunk 2: its block stays. */
	tp_resize(&t, 2 * STORE_CHUNK_BYTES + 5000);
	tp_commit(&t, "a", 2, v[2]);
	/* Grown again: the image's bytes come back, then zeros past it. */
	tp_resize(&t, len + 10);
	tp_commit(&t, "a", 3, v[3]);
	cr_expect_eq(refs_mismatches(), 0);
	tp_free(&t);
	free(img);
}

/*
 * The caller's contract broken: the image passed is not the head's (chunk
 * 2 differs) and no block covers the difference. The store trusts the
 * contract, so the snapshot stored is the head's bytes, not img2's; a
 * build with STORE_CHECK_PATCH refuses the commit instead.
 */
Test(store, commit_patch_trusts_the_contract_unless_checked)
{
	size_t len = 4 * STORE_CHUNK_BYTES, plen;
	unsigned char *img = pattern(len, 46), *img2 = malloc(len), *pb;
	char sha[65], out[65];
	struct err e = { 0 };
	struct tpatch t;
	int rc;

	create_img("a", img, len, sha);
	memcpy(img2, img, len);
	img2[2 * STORE_CHUNK_BYTES + 5] ^= 0xff;
	tp_init(&t, img2, len, len);
	tp_scribble(&t, 10, 10, 1);
	pb = tp_bytes(&t, &plen);
	rc = store_sandbox_commit_patch(st, "acme", "a", 1, img2, len, pb, plen,
	    out, &e);
#ifdef STORE_CHECK_PATCH
	cr_expect_eq(rc, -EINVAL);
	cr_expect(strstr(e.msg, "chunk 2 ") != NULL, "%s", e.msg);
	cr_expect_eq(version_of("acme", "a"), 1);
	cr_expect_eq(blob_rows(), 1);
#else
	{
		unsigned char *want = tp_expected(&t);

		cr_assert_eq(rc, 0, "%s", e.msg);
		/* Chunk 2 came from the head: the head's bytes, not img2's. */
		memcpy(want + 2 * STORE_CHUNK_BYTES, img + 2 * STORE_CHUNK_BYTES,
		    STORE_CHUNK_BYTES);
		expect_blob(out, want, len);
		free(want);
	}
#endif
	free(pb);
	tp_free(&t);
	free(img2);
	free(img);
}

/*** Moving blobs between stores ***/

/* A second store in dir/other, for blobs to come from. */
static struct store *
other_open(char path[PATH_MAX])
{
	struct store *o = NULL;
	struct err e = { 0 };

	snprintf(path, PATH_MAX, "%s/other", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	cr_assert_eq(store_open(path, &o, &e), 0, "%s", e.msg);
	return o;
}

static void
other_close(struct store *o, const char *path)
{
	static const char *const names[] = { "store.db", "store.db-wal",
	    "store.db-shm" };
	char p[PATH_MAX + 16];

	store_close(o);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", path, names[i]);
		unlink(p);
	}
	rmdir(path);
}

Test(store, import_stores_a_blob_from_its_manifest_and_missing_chunks)
{
	const size_t len = 4 * STORE_CHUNK_BYTES + 100;
	unsigned char *v1 = pattern(len, 70), *v2 = pattern(len, 70);
	unsigned char *fresh = pattern(STORE_CHUNK_BYTES, 71);
	char path[PATH_MAX], sha1[65], sha2[65], hex[65], want[65];
	const void *chunks[5] = { NULL };
	struct store_manifest m;
	struct store *o = other_open(path);
	struct err e = { 0 };
	bool missing[5];
	void *mb = NULL, *c2 = NULL;
	size_t ml, c2len;
	long hashed;

	memcpy(v2 + 2 * STORE_CHUNK_BYTES, fresh, STORE_CHUNK_BYTES);
	put_bytes(v1, len, sha1);
	cr_assert_eq(store_blob_put(o, v2, len, sha2, &e), 0, "%s", e.msg);
	cr_assert_eq(store_blob_manifest(o, sha2, &mb, &ml, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(ml, STORE_MANIFEST_HEAD + 5 * 32);
	cr_assert_eq(store_manifest_parse(mb, ml, sha2, &m, &e), 0, "%s",
	    e.msg);
	manifest_key_of(v2, len, want);
	cr_expect_str_eq(m.sha256, want);
	cr_expect_eq(m.size, len);
	cr_expect_eq(m.n, 5);
	cr_expect_eq(store_manifest_chunk_len(&m, 4), 100);
	cr_expect_eq(store_chunks_missing(st, &m, missing, &e), 1);
	cr_expect(missing[2] && !missing[0] && !missing[4]);
	store_manifest_chunk_hex(&m, 2, hex);
	cr_assert_eq(store_chunk_get(o, hex, &c2, &c2len, &e), 0, "%s", e.msg);
	cr_assert_eq(c2len, STORE_CHUNK_BYTES);
	hashed = store_debug_chunks_hashed(st);

	/* A damaged chunk: refused, nothing stored. */
	((unsigned char *)c2)[7] ^= 1;
	chunks[2] = c2;
	cr_expect_eq(store_blob_import(st, &m, chunks, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "chunk 2") != NULL, "%s", e.msg);
	cr_expect_eq(blob_rows(), 1);
	cr_expect_eq(chunk_rows(), 5);
	/* A chunk neither stored nor given. */
	chunks[2] = NULL;
	cr_expect_eq(store_blob_import(st, &m, chunks, &e), -ENOENT);
	cr_expect_eq(blob_rows(), 1);
	/* The real one: stored, the rest shared, hashed once. */
	((unsigned char *)c2)[7] ^= 1;
	chunks[2] = c2;
	hashed = store_debug_chunks_hashed(st);
	cr_expect_eq(store_blob_import(st, &m, chunks, &e), 0, "%s", e.msg);
	cr_expect_eq(store_debug_chunks_hashed(st) - hashed, 1);
	cr_expect_eq(blob_rows(), 2);
	cr_expect_eq(chunk_rows(), 6);
	cr_expect_eq(refs_mismatches(), 0);
	expect_blob(sha2, v2, len);
	/* Again: the blob is there, nothing changes. */
	cr_expect_eq(store_blob_import(st, &m, chunks, &e), 0, "%s", e.msg);
	cr_expect_eq(blob_rows(), 2);
	cr_expect_eq(refs_mismatches(), 0);
	other_close(o, path);
	free(mb);
	free(c2);
	free(fresh);
	free(v1);
	free(v2);
}

Test(store, manifest_parse_refuses_what_is_not_a_manifest)
{
	const size_t len = 3 * STORE_CHUNK_BYTES;
	unsigned char *zeros = calloc(1, len), *bad;
	char sha[65], other[65], hex[65];
	struct store_manifest m;
	struct err e = { 0 };
	bool first[3];
	void *mb = NULL, *c = NULL;
	size_t ml, clen;

	put_bytes(zeros, len, sha);
	cr_assert_eq(store_blob_manifest(st, sha, &mb, &ml, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(store_manifest_parse(mb, ml, sha, &m, &e), 0, "%s", e.msg);
	/* Three equal chunks are one chunk to move. */
	cr_expect_eq(store_manifest_distinct(&m, first), 1);
	cr_expect(first[0] && !first[1] && !first[2]);
	cr_expect_eq(chunk_rows(), 1);
	memset(other, 'a', 64);
	other[64] = '\0';
	cr_expect_eq(store_manifest_parse(mb, ml, other, &m, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "does not match its key") != NULL, "%s", e.msg);
	cr_expect_eq(store_manifest_parse(mb, ml - 1, sha, &m, &e), -EBADMSG);
	cr_expect_eq(store_manifest_parse(mb, ml - 32, sha, &m, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "damaged manifest") != NULL, "%s", e.msg);
	cr_expect_eq(store_manifest_parse(mb, 10, sha, &m, &e), -EBADMSG);
	cr_expect_eq(store_manifest_parse(mb, ml, "ABC", &m, &e), -EINVAL);
	bad = malloc(ml);
	memcpy(bad, mb, ml);
	bad[0] = 'S';
	cr_expect_eq(store_manifest_parse(bad, ml, sha, &m, &e), -EBADMSG);
	memcpy(bad, mb, ml);
	bad[STORE_MANIFEST_HEAD - 4] = 1;	/* chunk size 65537 */
	cr_expect_eq(store_manifest_parse(bad, ml, sha, &m, &e), -EBADMSG);
	/* Chunks leave checked. */
	store_manifest_parse(mb, ml, sha, &m, &e);
	store_manifest_chunk_hex(&m, 0, hex);
	cr_expect_eq(store_chunk_get(st, other, &c, &clen, &e), -ENOENT);
	raw_exec("UPDATE chunks SET data = zeroblob(65535) || x'01'");
	cr_expect_eq(store_chunk_get(st, hex, &c, &clen, &e), -EBADMSG);
	cr_expect_null(c);
	free(bad);
	free(mb);
	free(zeros);
}

Test(store, adopt_makes_the_row_a_cache_of_another_store)
{
	char s1[65], s2[65], s3[65];
	struct store_sandbox sb = { .tenant = "t", .id = "box", .version = 4,
	    .created_at = 1000, .updated_at = 2000,
	    .labels = "{\"b\":1, \"a\":2}" };
	struct store_sandbox got;
	struct err e = { 0 };
	struct hist h;

	put("one", s1);
	put("two", s2);
	put("three", s3);
	memcpy(sb.head, s1, sizeof(s1));
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(st, "t", "box", &got, &e), 0);
	cr_expect_eq(got.version, 4);
	cr_expect_str_eq(got.head, s1);
	cr_expect_eq(got.created_at, 1000);
	cr_expect_eq(got.updated_at, 2000);
	cr_expect_str_eq(got.labels, "{\"a\":2,\"b\":1}");
	h = history("t", "box");
	cr_expect_eq(h.n, 1);
	cr_expect_eq(h.v[0].version, 4);
	cr_expect_eq(h.v[0].created_at, 2000);
	/* Forward: the new head's row joins the old. */
	memcpy(sb.head, s2, sizeof(s2));
	sb.version = 7;
	sb.updated_at = 3000;
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	h = history("t", "box");
	cr_expect_eq(h.n, 2);
	cr_expect_eq(h.v[0].version, 7);
	/* Back to 5 (the owner lost 6 and 7): rows above go, and blob two. */
	memcpy(sb.head, s3, sizeof(s3));
	sb.version = 5;
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	h = history("t", "box");
	cr_expect_eq(h.n, 2);
	cr_expect_eq(h.v[0].version, 5);
	cr_expect_eq(h.v[1].version, 4);
	cr_expect_eq(blob_rows(), 2);
	/* Another sandbox of that name: none of the old rows stay. */
	sb.version = 1;
	sb.created_at = 9999;
	cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	h = history("t", "box");
	cr_expect_eq(h.n, 1);
	cr_expect_eq(blob_rows(), 1);
	cr_expect_eq(refs_mismatches(), 0);
	/* The cache's retention applies. */
	store_set_keep_versions(st, 2);
	put("four", s1);
	for (uint64_t v = 2; v <= 4; v++) {
		memcpy(sb.head, v % 2 ? s1 : s3, 65);
		sb.version = v;
		cr_assert_eq(store_sandbox_adopt(st, &sb, &e), 0, "%s", e.msg);
	}
	h = history("t", "box");
	cr_expect_eq(h.n, 2);
	cr_expect_eq(h.v[1].version, 3);
	/* Refused: version 0, a head not stored, a bad name. */
	sb.version = 0;
	cr_expect_eq(store_sandbox_adopt(st, &sb, &e), -EINVAL);
	sb.version = 9;
	memset(sb.head, 'b', 64);
	cr_expect_eq(store_sandbox_adopt(st, &sb, &e), -ENOENT);
	memcpy(sb.head, s1, 65);
	snprintf(sb.tenant, sizeof(sb.tenant), "a:b");
	cr_expect_eq(store_sandbox_adopt(st, &sb, &e), -EINVAL);
	cr_expect_eq(version_of("t", "box"), 4);
}

/*** Checkpoints ***/

/*
 * A commit leaves its frames in the WAL and says how many; an idle
 * checkpoint folds them into the file (what a plain reader of the file,
 * not of the WAL, then sees) and a second one has nothing to do. Past
 * STORE_WAL_AUTOCHECKPOINT frames a commit checkpoints by itself, so the
 * WAL never stays past that bound.
 */
Test(store, an_idle_checkpoint_folds_the_wal_in_and_commits_keep_the_backstop)
{
	unsigned char *a = pattern(3 * STORE_CHUNK_BYTES, 7);
	char sha[65], uri[PATH_MAX + 32];
	struct err e = { 0 };
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL;
	int pending, n, drops = 0;

	cr_assert_eq(store_sandbox_create_blob(st, "acme", "w", a, 3 * STORE_CHUNK_BYTES,
	    NULL, sha, &e), 0, "%s", e.msg);
	cr_assert_gt(store_wal_pending(st), 0, "a commit left no frames");
	cr_assert_lt(store_wal_pending(st), STORE_WAL_AUTOCHECKPOINT);
	n = store_checkpoint_idle(st, &e);
	cr_assert_gt(n, 0, "checkpointed %d frames: %s", n, e.msg);
	cr_expect_eq(store_wal_pending(st), 0);
	cr_expect_eq(store_checkpoint_idle(st, &e), 0, "nothing left to fold in");

	/* The file alone (immutable: its WAL unread) holds the sandbox now. */
	snprintf(uri, sizeof(uri), "file:%s/store.db?immutable=1", dir);
	cr_assert_eq(sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
	    NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT version FROM sandboxes WHERE"
	    " tenant = 'acme' AND id = 'w'", -1, &stmt, NULL), SQLITE_OK);
	cr_expect_eq(sqlite3_step(stmt), SQLITE_ROW, "the file lacks the commit");
	sqlite3_finalize(stmt);
	sqlite3_close(db);

	/* New chunks at every commit: the WAL passes the bound several times. */
	pending = 0;
	for (int i = 0; i < 40; i++) {
		unsigned char *b = pattern(3 * STORE_CHUNK_BYTES, 100 + (uint32_t)i);
		char next[65];

		cr_assert_eq(store_sandbox_commit_blob(st, "acme", "w", (uint64_t)i + 1, b,
		    3 * STORE_CHUNK_BYTES, NULL, NULL, 0, next, &e), 0, "%s", e.msg);
		cr_assert_lt(store_wal_pending(st), STORE_WAL_AUTOCHECKPOINT,
		    "commit %d left %d frames in the WAL", i, store_wal_pending(st));
		drops += store_wal_pending(st) < pending;
		pending = store_wal_pending(st);
		free(b);
	}
	cr_expect_gt(drops, 0, "no commit checkpointed past the bound");
	free(a);
}
