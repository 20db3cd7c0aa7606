/*
 * store_test.c - unit tests for the local snapshot store in store/store.c.
 *
 * Each test gets a fresh folder from mkdtemp() with an open store in it
 * (the fixture), and the folder is removed afterwards. Rows are counted,
 * and damage is done, through a second, raw sqlite3 connection to the same
 * file: the store exposes no back door, and that connection also proves the
 * schema's column names are what store.h documents.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

Test(store, blob_sha_is_the_sha256_of_the_bytes)
{
	char sha[65];

	put("abc", sha);
	cr_expect_str_eq(sha, "ba7816bf8f01cfea414140de5dae2223"
	    "b00361a396177a9cb410ff61f20015ad");
}

Test(store, empty_blob_round_trips)
{
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 1;
	char sha[65];

	cr_assert_eq(store_blob_put(st, NULL, 0, sha, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sha, "e3b0c44298fc1c149afbf4c8996fb924"
	    "27ae41e4649b934ca495991b7852b855");
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

Test(store, blob_get_refuses_corrupted_row)
{
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 0;
	char sha[65];
	sqlite3 *db;

	put("hello, snapshot", sha);
	db = raw_open();
	/* Same length, other bytes: only the hash can tell. */
	cr_assert_eq(sqlite3_exec(db, "UPDATE blobs SET data ="
	    " CAST('HELLO, SNAPSHOT' AS BLOB)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	cr_expect_eq(store_blob_get(st, sha, &got, &len, &e), -EBADMSG);
	cr_expect_null(got);
	cr_expect_eq(len, 0);
	cr_expect(strstr(e.msg, "does not match its SHA-256") != NULL, "%s",
	    e.msg);

	/* A truncated row is refused before hashing. */
	db = raw_open();
	cr_assert_eq(sqlite3_exec(db, "UPDATE blobs SET data ="
	    " CAST('hello' AS BLOB)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	cr_expect_eq(store_blob_get(st, sha, &got, &len, &e), -EBADMSG);
	cr_expect_null(got);
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

Test(store, delete_removes_sandbox_and_history)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	char v1[65];

	put("v1", v1);
	create("acme", "a", v1);
	cr_assert_eq(store_sandbox_delete(st, "acme", "a", &e), 0, "%s", e.msg);
	cr_expect_eq(store_sandbox_get(st, "acme", "a", &sb, &e), -ENOENT);
	cr_expect_eq(raw_int("SELECT count(*) FROM versions", NULL), 0);
	cr_expect_eq(blob_rows(), 1, "delete leaves blobs to prune");
	cr_expect_eq(store_sandbox_delete(st, "acme", "a", &e), -ENOENT);
	cr_expect_eq(store_sandbox_history(st, "acme", "a", hist_cb,
	    &(struct hist){ 0 }, &e), -ENOENT);
	/* The id is free again. */
	create("acme", "a", v1);
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

/*** Retention ***/

Test(store, prune_keeps_heads_newest_and_forked_blobs)
{
	char v[5][65], orphan[65], name[8];
	struct err e = { 0 };
	void *got = NULL;
	size_t len = 0;
	struct hist h;

	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "v%d", i + 1);
		put(name, v[i]);
	}
	put("never referenced", orphan);
	/* a: v1 -> v2 -> v3 -> v4 -> v5; fork b at v2 (a at version 2). */
	create("acme", "a", v[0]);
	cr_assert_eq(store_sandbox_commit(st, "acme", "a", 1, v[1], &e), 0);
	cr_assert_eq(store_sandbox_fork(st, "acme", "a", "b", &e), 0);
	for (int i = 2; i < 5; i++)
		cr_assert_eq(store_sandbox_commit(st, "acme", "a",
		    (uint64_t)i, v[i], &e), 0);
	cr_assert_eq(blob_rows(), 6);

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

	/* Keep 0 still keeps every head. */
	cr_expect_eq(store_prune(st, 0, &e), 1);
	cr_expect_eq(history("acme", "a").n, 1);
	cr_expect_eq(history("acme", "b").n, 1);
	cr_expect_eq(store_blob_exists(st, v[4], &e), 1);
	cr_expect_eq(store_blob_exists(st, v[1], &e), 1);
	cr_expect_eq(store_prune(st, 0, &e), 0);

	/* Deleting the fork frees its blob at the next prune. */
	cr_assert_eq(store_sandbox_delete(st, "acme", "b", &e), 0);
	cr_expect_eq(store_prune(st, 10, &e), 1);
	cr_expect_eq(blob_rows(), 1);
	cr_expect_eq(version_of("acme", "a"), 5);
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
