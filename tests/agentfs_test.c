/*
 * agentfs_test.c - unit tests for the AgentFS codec in agentfs/agentfs.c.
 *
 * The central check is data-driven: a walk of a database is turned into a
 * JSON object of the same shape as the testdata *.expect.json files (dirs,
 * files with SHA-256, symlinks, special, kv, tool calls) and compared with
 * json_equal(), so the real LocalSandbox export is checked against its
 * expectation file and a freshly written database against itself after a
 * round trip through a blob. Bad databases are built with raw SQLite from a
 * good blob (the codec exposes no back door), and must fail with a message
 * naming the problem. The export is read into memory and never opened by
 * SQLite as a file, so nothing writes -wal/-shm beside it.
 *
 * SANDQ_TESTDATA overrides the folder of the samples (default tests/data,
 * relative to the repository root tests run from; the LocalSandbox export
 * and its README are copied there from the shared test data).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../agentfs/agentfs.h"

TestSuite(agentfs, .timeout = 30);

/*** Helpers ***/

static char *
testdata_path(const char *name)
{
	const char *dir = getenv("SANDQ_TESTDATA");
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s", dir ? dir : "tests/data",
	    name) > 0);
	return p;
}

/* Reads a whole sample file into memory. */
static void *
file_slurp(const char *name, size_t *len)
{
	char *path = testdata_path(name);
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_gt(n, 0);
	rewind(f);
	buf = malloc((size_t)n);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	free(path);
	*len = (size_t)n;
	return buf;
}

static void
sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	cr_assert_eq(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	cr_assert_eq(mdlen, 32);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static json_t *
mode_json(uint32_t mode)
{
	char buf[8];

	snprintf(buf, sizeof(buf), "%04o", mode & 07777);
	return json_string(buf);
}

struct snap {
	struct agentfs *fs;
	json_t *dirs, *files, *symlinks, *special, *kv, *names;
};

static int
snap_entry(const struct agentfs_entry *ent, void *arg)
{
	struct snap *s = arg;
	struct err e = { 0 };
	char hex[65];
	void *data;
	size_t len;
	int rc;

	switch (ent->kind) {
	case AGENTFS_DIR:
		json_object_set_new(s->dirs, ent->path,
		    json_pack("{s:o}", "mode", mode_json(ent->mode)));
		break;
	case AGENTFS_FILE:
		rc = agentfs_read(s->fs, ent->path, &data, &len, &e);
		cr_assert_eq(rc, 0, "read %s: %s", ent->path, e.msg);
		cr_expect_eq(len, ent->size, "%s: read %zu of %llu bytes",
		    ent->path, len, (unsigned long long)ent->size);
		sha256_hex(data, len, hex);
		free(data);
		json_object_set_new(s->files, ent->path,
		    json_pack("{s:I,s:s,s:o}", "size", (json_int_t)ent->size,
		    "sha256", hex, "mode", mode_json(ent->mode)));
		break;
	case AGENTFS_SYMLINK:
		json_object_set_new(s->symlinks, ent->path,
		    json_pack("{s:s,s:s}", "target", ent->target, "form",
		    ent->form == AGENTFS_LINK_NATIVE ? "native" :
		    "json-file"));
		break;
	case AGENTFS_SPECIAL:
		json_object_set_new(s->special, ent->path,
		    json_pack("{s:s,s:o}", "type",
		    agentfs_type_name(ent->mode), "mode",
		    mode_json(ent->mode)));
		break;
	}
	return 0;
}

static int
snap_key(const char *key, void *arg)
{
	struct snap *s = arg;
	struct err e = { 0 };
	char *v = NULL;

	cr_assert_eq(agentfs_kv_get(s->fs, key, &v, &e), 0, "%s", e.msg);
	json_object_set_new(s->kv, key, json_string(v));
	free(v);
	return 0;
}

static int
snap_call(const struct agentfs_tool_call *tc, void *arg)
{
	struct snap *s = arg;
	json_t *n = json_object_get(s->names, tc->name);

	json_object_set_new(s->names, tc->name,
	    json_integer(n ? json_integer_value(n) + 1 : 1));
	return 0;
}

/* Describes fs in the expect.json format (see testdata/README.md). */
static json_t *
snap_json(struct agentfs *fs)
{
	struct snap s = {
		.fs = fs, .dirs = json_object(), .files = json_object(),
		.symlinks = json_object(), .special = json_object(),
		.kv = json_object(), .names = json_object(),
	};
	struct err e = { 0 };
	int64_t ncalls;

	cr_assert_eq(agentfs_walk(fs, snap_entry, &s, &e), 0, "walk: %s",
	    e.msg);
	cr_assert_eq(agentfs_kv_keys(fs, "", snap_key, &s, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_tool_call_each(fs, snap_call, &s, &e), 0, "%s",
	    e.msg);
	ncalls = agentfs_tool_call_count(fs, &e);
	cr_assert_geq(ncalls, 0, "%s", e.msg);
	return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:I,s:o}",
	    "chunk_size", (json_int_t)agentfs_chunk_size(fs),
	    "dirs", s.dirs, "files", s.files, "symlinks", s.symlinks,
	    "special", s.special, "kv", s.kv,
	    "tool_calls", (json_int_t)ncalls, "tool_call_names", s.names);
}

/* Compares got and want key by key, printing both on a mismatch. */
static void
snap_expect_equal(json_t *got, json_t *want)
{
	const char *key;
	json_t *w;

	cr_assert_not_null(got);
	cr_assert_not_null(want);
	json_object_foreach(want, key, w) {
		json_t *g = json_object_get(got, key);
		char *gs = json_dumps(g, JSON_SORT_KEYS | JSON_COMPACT |
		    JSON_ENCODE_ANY);
		char *ws = json_dumps(w, JSON_SORT_KEYS | JSON_COMPACT |
		    JSON_ENCODE_ANY);

		cr_expect(json_equal(g, w), "%s differs:\n got  %s\n want %s",
		    key, gs ? gs : "(missing)", ws);
		free(gs);
		free(ws);
	}
	cr_expect_eq(json_object_size(got), json_object_size(want),
	    "the snapshot has keys the expectation lacks");
}

static struct agentfs *
open_export(void)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	size_t len;
	void *blob = file_slurp("localsandbox-export.db", &len);

	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "open: %s",
	    e.msg);
	free(blob);
	return fs;
}

/* Runs sql on a copy of blob with raw SQLite and returns the new image. */
static void *
blob_mutate(const void *blob, size_t len, const char *sql, size_t *outlen)
{
	unsigned char *buf = sqlite3_malloc64(len);
	sqlite3_int64 sz = 0;
	sqlite3 *db = NULL;
	char *msg = NULL;
	unsigned char *img;
	void *out;

	cr_assert_not_null(buf);
	memcpy(buf, blob, len);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", buf, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE |
	    SQLITE_DESERIALIZE_RESIZEABLE), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg ? msg : "?");
	img = sqlite3_serialize(db, "main", &sz, 0);
	cr_assert_not_null(img);
	out = malloc((size_t)sz);
	cr_assert_not_null(out);
	memcpy(out, img, (size_t)sz);
	sqlite3_free(img);
	sqlite3_close(db);
	*outlen = (size_t)sz;
	return out;
}

/* A fresh database's blob with sql applied to it. */
static void *
fresh_mutated(const char *sql, size_t *len)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	void *blob, *out;
	size_t blen;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &blen, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	out = blob_mutate(blob, blen, sql, len);
	free(blob);
	return out;
}

static int
count_entry(const struct agentfs_entry *ent, void *arg)
{
	(void)ent;
	(*(int *)arg)++;
	return 0;
}

/* Opens blob (which must open) and expects walk to fail mentioning want. */
static void
expect_walk_fails(const void *blob, size_t len, const char *want)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	int n = 0, rc;

	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	rc = agentfs_walk(fs, count_entry, &n, &e);
	cr_expect_lt(rc, 0, "walk accepted a bad tree");
	cr_expect(strstr(e.msg, want) != NULL, "msg '%s' lacks '%s'", e.msg,
	    want);
	agentfs_close(fs);
}

static void
expect_open_fails(const void *blob, size_t len, int want_rc,
    const char *want)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	int rc = agentfs_open_blob(blob, len, &fs, &e);

	cr_expect_eq(rc, want_rc, "rc %d, want %d (%s)", rc, want_rc, e.msg);
	cr_expect_null(fs);
	cr_expect(strstr(e.msg, want) != NULL, "msg '%s' lacks '%s'", e.msg,
	    want);
	agentfs_close(fs);
}

/*** The LocalSandbox export ***/

Test(agentfs, localsandbox_export_matches_expectation)
{
	char *path = testdata_path("localsandbox-export.expect.json");
	struct agentfs *fs = open_export();
	json_error_t jerr;
	json_t *want = json_load_file(path, 0, &jerr);
	json_t *got;

	cr_assert_not_null(want, "%s: %s", path, jerr.text);
	cr_expect(agentfs_is_legacy(fs));
	got = snap_json(fs);
	snap_expect_equal(got, want);
	json_decref(got);
	json_decref(want);
	agentfs_close(fs);
	free(path);
}

Test(agentfs, legacy_database_accepts_writes_and_stays_legacy)
{
	struct agentfs *fs = open_export(), *fs2 = NULL;
	struct err e = { 0 };
	json_t *before, *after;
	void *blob, *data;
	size_t len, dlen;

	cr_assert_eq(agentfs_write(fs, "/project/new.txt", "hi\n", 3, 0600,
	    &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_symlink(fs, "README.md", "/project/readme",
	    &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_tool_call_add(fs, "bash", "{\"command\":\"ls\"}",
	    "{\"exitCode\":0}", NULL, "success", 1795298627000,
	    1795298627250, &e), 0, "%s", e.msg);
	before = snap_json(fs);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_open_blob(blob, len, &fs2, &e), 0, "%s", e.msg);
	cr_expect(agentfs_is_legacy(fs2));
	after = snap_json(fs2);
	snap_expect_equal(after, before);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(
	    json_object_get(after, "symlinks"), "/project/readme"), "form")),
	    "native");
	cr_expect_eq(json_integer_value(json_object_get(after, "tool_calls")),
	    9);
	cr_assert_eq(agentfs_read(fs2, "/project/new.txt", &data, &dlen, &e),
	    0, "%s", e.msg);
	cr_expect_eq(dlen, 3);
	cr_expect_eq(memcmp(data, "hi\n", 3), 0);
	free(data);
	json_decref(before);
	json_decref(after);
	free(blob);
	agentfs_close(fs);
	agentfs_close(fs2);
}

/*** A new database ***/

static void
fill_new(struct agentfs *fs, uint8_t *big, size_t bigsz)
{
	static const char py[] = "print('hello')\n";
	static const char notes[] = "caf\xc3\xa9 notes\n";
	struct err e = { 0 };

	for (size_t i = 0; i < bigsz; i++)
		big[i] = (uint8_t)((i * 7) % 256);
	cr_assert_eq(agentfs_mkdir(fs, "/project", 0755, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_mkdir(fs, "/project/src", 0750, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_mkdir(fs, "/project/build", 0755, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_write(fs, "/project/src/main.py", py,
	    sizeof(py) - 1, 0644, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/project/blob.bin", big, bigsz, 0600,
	    &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/project/empty.txt", "", 0, 0644, &e),
	    0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/project/notes \xc3\xa9.txt", notes,
	    sizeof(notes) - 1, 0644, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_symlink(fs, "src/main.py", "/project/latest",
	    &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "session", "\"abc\"", &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "step", "3", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_tool_call_add(fs, "sh", "{\"script\":\"ls\"}",
	    "{\"exit_code\":0}", NULL, "success", 1700000000123,
	    1700000001623, &e), 0, "%s", e.msg);
}

static int
history_check(const struct agentfs_tool_call *tc, void *arg)
{
	(void)arg;
	cr_expect_str_eq(tc->name, "sh");
	cr_expect_str_eq(tc->status, "success");
	cr_expect_eq(tc->started_at, 1700000000);
	cr_expect_eq(tc->completed_at, 1700000001);
	cr_expect_eq(tc->duration_ms, 1500);
	cr_expect_str_eq(tc->result, "{\"exit_code\":0}");
	cr_expect_null(tc->error);
	return 0;
}

Test(agentfs, new_database_round_trips_through_a_blob)
{
	static uint8_t big[9000];
	struct agentfs *fs = NULL, *fs2 = NULL;
	struct err e = { 0 };
	json_t *before, *after, *f;
	void *blob, *data;
	size_t len, dlen;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_expect_not(agentfs_is_legacy(fs));
	fill_new(fs, big, sizeof(big));
	before = snap_json(fs);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	cr_assert_gt(len, 100);
	cr_expect_eq(memcmp(blob, "SQLite format 3", 16), 0);
	cr_expect_eq(((uint8_t *)blob)[18], 1, "not a single-file header");
	cr_expect_eq(((uint8_t *)blob)[19], 1, "not a single-file header");
	cr_assert_eq(agentfs_open_blob(blob, len, &fs2, &e), 0, "%s", e.msg);
	cr_expect_not(agentfs_is_legacy(fs2));
	cr_expect_eq(agentfs_chunk_size(fs2), 4096);
	after = snap_json(fs2);
	snap_expect_equal(after, before);

	/* Spot checks, so the round trip is not merely self-consistent. */
	f = json_object_get(json_object_get(after, "files"),
	    "/project/blob.bin");
	cr_expect_eq(json_integer_value(json_object_get(f, "size")), 9000);
	cr_expect_str_eq(json_string_value(json_object_get(f, "sha256")),
	    "8b3dc1dbb56314b6b4281afe68f1329d0e3f1c87fa84262432255c85895be2e6");
	cr_expect_str_eq(json_string_value(json_object_get(f, "mode")),
	    "0600");
	cr_expect_not_null(json_object_get(json_object_get(after, "files"),
	    "/project/notes \xc3\xa9.txt"));
	cr_expect_not_null(json_object_get(json_object_get(after, "files"),
	    "/project/empty.txt"));
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(
	    json_object_get(after, "dirs"), "/project/src"), "mode")), "0750");
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(
	    json_object_get(after, "symlinks"), "/project/latest"), "target")),
	    "src/main.py");
	cr_expect_eq(json_integer_value(json_object_get(after, "tool_calls")),
	    1);
	cr_assert_eq(agentfs_read(fs2, "/project/blob.bin", &data, &dlen, &e),
	    0, "%s", e.msg);
	cr_expect_eq(dlen, sizeof(big));
	cr_expect_eq(memcmp(data, big, sizeof(big)), 0);
	free(data);
	cr_expect_eq(agentfs_tool_call_each(fs2, history_check, NULL, &e), 0);

	json_decref(before);
	json_decref(after);
	free(blob);
	agentfs_close(fs);
	agentfs_close(fs2);
}

Test(agentfs, written_chunks_are_blobs_of_chunk_size)
{
	static uint8_t big[9000];
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	unsigned char *buf;
	void *blob;
	size_t len;
	int n = 0;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	fill_new(fs, big, sizeof(big));
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	buf = sqlite3_malloc64(len);
	memcpy(buf, blob, len);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", buf, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT d.chunk_index,"
	    " typeof(d.data), length(d.data) FROM fs_data AS d"
	    " JOIN fs_dentry AS n ON n.ino = d.ino WHERE n.name = 'blob.bin'"
	    " ORDER BY d.chunk_index", -1, &st, NULL), SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW) {
		static const int want[] = { 4096, 4096, 808 };

		cr_assert_lt(n, 3);
		cr_expect_eq(sqlite3_column_int(st, 0), n);
		cr_expect_str_eq((const char *)sqlite3_column_text(st, 1),
		    "blob");
		cr_expect_eq(sqlite3_column_int(st, 2), want[n]);
		n++;
	}
	cr_expect_eq(n, 3);
	sqlite3_finalize(st);
	sqlite3_close(db);
	free(blob);
}

/*** File operations ***/

Test(agentfs, write_replace_remove_and_errors)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	void *data;
	size_t len;
	int n = 0;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_mkdir(fs, "/d", 0755, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/d/f", "long content", 12, 0644, &e),
	    0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "d//f", "short", 5, 0600, &e), 0,
	    "%s", e.msg);
	cr_assert_eq(agentfs_read(fs, "/d/f", &data, &len, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(len, 5);
	cr_expect_eq(memcmp(data, "short", 5), 0);
	free(data);

	cr_expect_eq(agentfs_write(fs, "/nodir/f", "x", 1, 0644, &e), -ENOENT);
	cr_expect_eq(agentfs_write(fs, "/d", "x", 1, 0644, &e), -EISDIR);
	cr_expect_eq(agentfs_write(fs, "/d/f/g", "x", 1, 0644, &e), -ENOTDIR);
	cr_expect_eq(agentfs_write(fs, "/d/../f", "x", 1, 0644, &e), -EINVAL);
	cr_expect_eq(agentfs_mkdir(fs, "/d", 0755, &e), -EEXIST);
	cr_expect_eq(agentfs_read(fs, "/d", &data, &len, &e), -EISDIR);
	cr_expect_eq(agentfs_read(fs, "/missing", &data, &len, &e), -ENOENT);
	cr_assert_eq(agentfs_symlink(fs, "f", "/d/l", &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_read(fs, "/d/l", &data, &len, &e), -EINVAL);
	cr_expect_eq(agentfs_write(fs, "/d/l", "x", 1, 0644, &e), -EEXIST);

	cr_expect_eq(agentfs_remove(fs, "/", &e), -EBUSY);
	cr_expect_eq(agentfs_remove(fs, "/d", &e), -ENOTEMPTY);
	cr_expect_eq(agentfs_remove(fs, "/d/f", &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_remove(fs, "/d/l", &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_remove(fs, "/d/f", &e), -ENOENT);
	cr_expect_eq(agentfs_remove(fs, "/d", &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_walk(fs, count_entry, &n, &e), 0, "%s", e.msg);
	cr_expect_eq(n, 0, "%d entries left after removing everything", n);
	agentfs_close(fs);
}

Test(agentfs, remove_frees_inode_data_and_symlink_rows)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	unsigned char *buf;
	void *blob;
	size_t len;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/f", "abc", 3, 0644, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_symlink(fs, "f", "/l", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_remove(fs, "/f", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_remove(fs, "/l", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	buf = sqlite3_malloc64(len);
	memcpy(buf, blob, len);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", buf, (sqlite3_int64)len,
	    (sqlite3_int64)len, SQLITE_DESERIALIZE_FREEONCLOSE), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT (SELECT COUNT(*) FROM"
	    " fs_inode), (SELECT COUNT(*) FROM fs_data), (SELECT COUNT(*)"
	    " FROM fs_symlink), (SELECT COUNT(*) FROM fs_dentry)", -1, &st,
	    NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_expect_eq(sqlite3_column_int(st, 0), 1, "only the root is left");
	cr_expect_eq(sqlite3_column_int(st, 1), 0);
	cr_expect_eq(sqlite3_column_int(st, 2), 0);
	cr_expect_eq(sqlite3_column_int(st, 3), 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	free(blob);
}

/*** Key-value ***/

static int
keys_join(const char *key, void *arg)
{
	char *out = arg;

	strcat(out, key);
	strcat(out, ";");
	return 0;
}

Test(agentfs, kv_set_get_delete_and_prefix)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	char keys[256] = "";
	char *v = NULL;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_kv_set(fs, "a", "{not json", &e), -EINVAL);
	cr_expect(strstr(e.msg, "not JSON") != NULL, "%s", e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "a%1", "1", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "ab", "2", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "b", "{\"x\":[1,2]}", &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_kv_set(fs, "ab", "\"two\"", &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_kv_get(fs, "ab", &v, &e), 0, "%s", e.msg);
	cr_expect_str_eq(v, "\"two\"");
	free(v);
	cr_assert_eq(agentfs_kv_keys(fs, "a%", keys_join, keys, &e), 0);
	cr_expect_str_eq(keys, "a%1;", "'%%' must not be a wildcard");
	keys[0] = '\0';
	cr_assert_eq(agentfs_kv_keys(fs, "a", keys_join, keys, &e), 0);
	cr_expect_str_eq(keys, "a%1;ab;");
	cr_expect_eq(agentfs_kv_delete(fs, "ab", &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_kv_delete(fs, "ab", &e), -ENOENT);
	cr_expect_eq(agentfs_kv_get(fs, "ab", &v, &e), -ENOENT);
	cr_expect_eq(agentfs_tool_call_add(fs, "x", "{bad", NULL, NULL,
	    "success", 0, 0, &e), -EINVAL);
	cr_expect_eq(agentfs_tool_call_add(fs, "x", NULL, NULL, NULL, "done",
	    0, 0, &e), -EINVAL);
	agentfs_close(fs);
}

/*** Bad input ***/

Test(agentfs, rejects_non_sqlite_blob)
{
	char junk[4096];

	memset(junk, 'x', sizeof(junk));
	expect_open_fails(junk, sizeof(junk), -EBADMSG, "not a SQLite 3");
	expect_open_fails(junk, 10, -EBADMSG, "not a SQLite 3");
}

/*
 * A trusted open skips only the page-by-page check: what it reads is the
 * same, and a blob that is not SQLite at all is still refused.
 */
Test(agentfs, trusted_open_reads_the_same_and_still_checks_the_header)
{
	struct agentfs *a = NULL, *b = NULL;
	struct err e = { 0 };
	char junk[4096];
	size_t len;
	void *blob = file_slurp("localsandbox-export.db", &len), *x, *y;
	size_t xl, yl;

	cr_assert_eq(agentfs_open_blob(blob, len, &a, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_open_trusted(blob, len, &b, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_read(a, "/project/blob.bin", &x, &xl, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_read(b, "/project/blob.bin", &y, &yl, &e), 0, "%s", e.msg);
	cr_expect(xl == 9000 && yl == xl && memcmp(x, y, xl) == 0);
	free(x);
	free(y);
	agentfs_close(a);
	agentfs_close(b);
	memset(junk, 'x', sizeof(junk));
	cr_expect_eq(agentfs_open_trusted(junk, sizeof(junk), &b, &e), -EBADMSG);
	cr_expect_null(b);
	free(blob);
}

Test(agentfs, rejects_truncated_blob)
{
	size_t len;
	void *blob = file_slurp("localsandbox-export.db", &len);

	expect_open_fails(blob, 40000, -EBADMSG, "truncated");
	expect_open_fails(blob, 8192, -EBADMSG, "truncated");
	free(blob);
}

Test(agentfs, rejects_oversized_blob)
{
	static const char hdr[100] = "SQLite format 3";

	/* The size is checked before a byte is read, so a short buffer does. */
	expect_open_fails(hdr, AGENTFS_BLOB_MAX + 1, -EFBIG, "exceeds");
}

Test(agentfs, rejects_database_without_the_tables)
{
	size_t len, blen;
	void *blob = fresh_mutated("DROP TABLE fs_dentry", &len);
	void *b2;

	expect_open_fails(blob, len, -EBADMSG, "no table fs_dentry");
	free(blob);
	blob = fresh_mutated("DROP TABLE kv_store;"
	    " CREATE TABLE kv_store (key TEXT PRIMARY KEY, value TEXT)", &len);
	expect_open_fails(blob, len, -EBADMSG, "kv_store lacks column "
	    "created_at");
	free(blob);
	blob = fresh_mutated("DELETE FROM fs_config WHERE key = 'chunk_size'",
	    &len);
	expect_open_fails(blob, len, -EBADMSG, "no chunk_size");
	free(blob);
	blob = fresh_mutated("UPDATE fs_config SET value = '4096x'"
	    " WHERE key = 'chunk_size'", &len);
	expect_open_fails(blob, len, -EBADMSG, "chunk_size '4096x'");
	free(blob);
	blob = fresh_mutated("DELETE FROM fs_inode WHERE ino = 1", &len);
	expect_open_fails(blob, len, -EBADMSG, "root directory");
	free(blob);
	/* An empty but valid SQLite database. */
	blob = fresh_mutated("DROP TABLE fs_config", &len);
	b2 = blob_mutate(blob, len, "DROP TABLE fs_inode", &blen);
	expect_open_fails(b2, blen, -EBADMSG, "no table fs_config");
	free(blob);
	free(b2);
}

Test(agentfs, walk_rejects_bad_names)
{
	static const char *const cases[][2] = {
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 33188, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('a/b', 1, 2)", "bad name" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 16877, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('..', 1, 2)", "bad name" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 16877, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('.', 1, 2)", "bad name" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 33188, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES (CAST(x'610062' AS TEXT), 1, 2)", "bad name" },
		{ "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('ghost', 1, 99)", "missing inode 99" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 16877, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('d', 1, 2), ('up', 2, 1)", "reached twice" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 16877, 2, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('a', 1, 2), ('b', 1, 2)", "reached twice" },
		{ "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " VALUES (2, 41471, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('l', 1, 2)", "fs_symlink" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		void *blob = fresh_mutated(cases[i][0], &len);

		expect_walk_fails(blob, len, cases[i][1]);
		free(blob);
	}
}

Test(agentfs, walk_bounds_depth)
{
	/* 300 nested directories, built by a recursive CTE. */
	static const char sql[] =
	    "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n"
	    " WHERE i < 301)"
	    " INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " SELECT i, 16877, 1, 0, 0, 0 FROM n;"
	    "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n"
	    " WHERE i < 301)"
	    " INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " SELECT 'd', i - 1, i FROM n;";
	size_t len;
	void *blob = fresh_mutated(sql, &len);

	expect_walk_fails(blob, len, "nested deeper than 256");
	free(blob);
}

Test(agentfs, json_symlink_form_only_in_legacy_databases)
{
	static const char link[] = "{\"__symlink\":\"target\"}";
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	json_t *s;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/f", link, sizeof(link) - 1, 0644,
	    &e), 0, "%s", e.msg);
	s = snap_json(fs);
	cr_expect_not_null(json_object_get(json_object_get(s, "files"), "/f"),
	    "a 0.4 database keeps it a regular file");
	cr_expect_eq(json_object_size(json_object_get(s, "symlinks")), 0);
	json_decref(s);
	agentfs_close(fs);
}

/*** Untrusted databases: schema objects, claimed sizes, deadlines ***/

/* A fresh database holding /f, 10000 bytes in three chunks, as a blob. */
static void *
blob_with_file(size_t *len)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	static unsigned char data[10000];
	void *blob;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7);
	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_write(fs, "/f", data, sizeof(data), 0644, &e), 0,
	    "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &blob, len, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	return blob;
}

/*
 * Only the AgentFS tables, plain, and indexes on them: a virtual table
 * standing in for fs_dentry (whose module would walk the upload's shadow
 * tables), a view, a trigger, an unknown table or a generated column is
 * refused at open, naming it, before any statement touches a table.
 */
Test(agentfs, untrusted_open_refuses_every_object_but_the_plain_tables)
{
	static const char *const cases[][2] = {
		{ "DROP TABLE fs_dentry; CREATE VIRTUAL TABLE fs_dentry USING"
		  " fts5(name, parent_ino, ino);"
		  "INSERT INTO fs_dentry VALUES ('x', 1, 1)",
		  "table 'fs_dentry' is not a plain table (CREATE VIRTUAL TABLE)" },
		{ "CREATE VIEW v AS SELECT * FROM fs_inode",
		  "holds a view 'v' (on 'v')" },
		{ "CREATE TRIGGER t AFTER INSERT ON kv_store BEGIN"
		  " DELETE FROM fs_data; END",
		  "holds a trigger 't' (on 'kv_store')" },
		{ "CREATE TABLE fs_whiteout (path TEXT PRIMARY KEY)",
		  "table 'fs_whiteout' is not part of the AgentFS format" },
		/* Statistics steer the planner: a crafted row, a full scan. */
		{ "ANALYZE",
		  "table 'sqlite_stat1' is not part of the AgentFS format" },
		{ "CREATE TABLE \"x\ny\" (a)",
		  "table 'x?y' is not part of the AgentFS format" },
		{ "CREATE INDEX i ON fs_inode (zeroblob(size))", "" },
		{ "DROP TABLE fs_symlink; CREATE TABLE fs_symlink (ino INTEGER"
		  " PRIMARY KEY, target TEXT AS (hex(zeroblob(100000000))))",
		  "table fs_symlink: column 'target' is generated" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct agentfs *fs = NULL;
		size_t len;
		void *blob = fresh_mutated(cases[i][0], &len);

		if (cases[i][1][0] == '\0') {
			/* An index on an AgentFS table is the upload's own. */
			cr_expect_eq(agentfs_open_blob(blob, len, &fs, NULL), 0,
			    "%s", cases[i][0]);
			agentfs_close(fs);
		} else {
			expect_open_fails(blob, len, -EBADMSG, cases[i][1]);
		}
		free(blob);
	}
}

/* sandq's own blobs, its session table included, still open. */
Test(agentfs, untrusted_open_takes_sandqs_own_tables)
{
	struct agentfs *fs = NULL, *back = NULL;
	struct err e = { 0 };
	void *blob;
	size_t len;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_session_set(fs, "cwd", "/x", 2, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_tool_call_add(fs, "sh", NULL, NULL, NULL,
	    "success", 1000, 2000, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_open_blob(blob, len, &back, &e), 0, "%s", e.msg);
	agentfs_close(back);
	agentfs_close(fs);
	free(blob);
}

/* Expects blob (len bytes) to be the bytes of fs now. */
static void
expect_blob_is(struct agentfs *fs, const void *blob, size_t len)
{
	struct err e = { 0 };
	void *now;
	size_t nlen;

	cr_assert_eq(agentfs_to_blob(fs, &now, &nlen, &e), 0, "%s", e.msg);
	cr_expect(nlen == len && memcmp(now, blob, len) == 0,
	    "the database changed (%zu bytes, was %zu)", nlen, len);
	free(now);
}

/* Expects session value name to be want. */
static void
expect_session(struct agentfs *fs, const char *name, const char *want)
{
	struct err e = { 0 };
	void *v = NULL;
	size_t n = 0;

	cr_assert_eq(agentfs_session_get(fs, name, &v, &n, &e), 0, "%s", e.msg);
	cr_expect(n == strlen(want) && memcmp(v, want, n) == 0, "%s: '%.*s'",
	    name, (int)n, (char *)v);
	free(v);
}

/*
 * The capture's warm-up (agentfs_capture_warm(), run while the job runs)
 * writes nothing, with or without a session table, and session writes
 * after it (the kept statement, the table made once) read back.
 */
Test(agentfs, capture_warm_changes_nothing_and_sessions_still_write)
{
	struct agentfs *fs = NULL, *back = NULL;
	struct err e = { 0 };
	void *blob, *v = NULL;
	size_t len, n;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	agentfs_capture_warm(fs);
	expect_blob_is(fs, blob, len);
	free(blob);
	cr_expect_eq(agentfs_session_get(fs, "cwd", &v, &n, &e), -ENOENT);
	cr_assert_eq(agentfs_session_set(fs, "cwd", "/x", 2, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_session_set(fs, "cwd", "/y/z", 4, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_session_set(fs, "env", "A=1", 3, &e), 0, "%s", e.msg);
	expect_session(fs, "cwd", "/y/z");
	expect_session(fs, "env", "A=1");

	/* A snapshot with the table: warmed, unchanged, then written. */
	cr_assert_eq(agentfs_to_blob(fs, &blob, &len, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_open_trusted(blob, len, &back, &e), 0, "%s", e.msg);
	agentfs_capture_warm(back);
	expect_blob_is(back, blob, len);
	cr_assert_eq(agentfs_session_set(back, "cwd", "/w", 2, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_tool_call_add(back, "sh", NULL, NULL, NULL,
	    "success", 1000, 2000, &e), 0, "%s", e.msg);
	expect_session(back, "cwd", "/w");
	expect_session(back, "env", "A=1");
	cr_expect_eq(agentfs_tool_call_count(back, &e), 1);
	agentfs_close(back);
	agentfs_close(fs);
	free(blob);
}

/* Reads one file of blob opened untrusted (or trusted); returns rc. */
static int
read_f(const void *blob, size_t len, bool trusted, size_t *got,
    struct err *e)
{
	struct agentfs *fs = NULL;
	void *data = NULL;
	int rc;

	rc = trusted ? agentfs_open_trusted(blob, len, &fs, e) :
	    agentfs_open_blob(blob, len, &fs, e);
	cr_assert_eq(rc, 0, "open: %s", e->msg);
	rc = agentfs_read(fs, "/f", &data, got, e);
	free(data);
	agentfs_close(fs);
	return rc;
}

/*
 * A size column is a claim: in an upload, a file whose size is more than
 * its chunks hold is refused (before its size is allocated: the read of a
 * gigabyte claim returns at once). Trusted blobs keep reading holes as
 * zeros.
 */
Test(agentfs, untrusted_read_refuses_a_size_its_chunks_do_not_hold)
{
	struct err e = { 0 };
	size_t len, mlen, got = 0;
	void *blob = blob_with_file(&len), *m;

	cr_expect_eq(read_f(blob, len, false, &got, &e), 0, "%s", e.msg);
	cr_expect_eq(got, 10000);

	m = blob_mutate(blob, len, "UPDATE fs_inode SET size = 1073741824"
	    " WHERE ino = 2", &mlen);
	cr_expect_eq(read_f(m, mlen, false, &got, &e), -EBADMSG, "%s", e.msg);
	cr_expect(strstr(e.msg, "its size says 1073741824 bytes, its chunks "
	    "hold 10000") != NULL, "%s", e.msg);
	free(m);

	/* A chunk missing inside the file: a hole the size counts. */
	m = blob_mutate(blob, len, "DELETE FROM fs_data WHERE ino = 2 AND"
	    " chunk_index = 1", &mlen);
	cr_expect_eq(read_f(m, mlen, false, &got, &e), -EBADMSG, "%s", e.msg);
	cr_expect(strstr(e.msg, "its chunks hold 5904") != NULL, "%s", e.msg);
	cr_expect_eq(read_f(m, mlen, true, &got, &e), 0, "%s", e.msg);
	cr_expect_eq(got, 10000, "a trusted blob reads the hole as zeros");
	free(m);

	/* A last chunk longer than the size is cut, not refused. */
	m = blob_mutate(blob, len, "UPDATE fs_inode SET size = 9000"
	    " WHERE ino = 2", &mlen);
	cr_expect_eq(read_f(m, mlen, false, &got, &e), 0, "%s", e.msg);
	cr_expect_eq(got, 9000);
	free(m);
	free(blob);
}

/* A name over 255 bytes is refused naming the limit, not as a bad name. */
Test(agentfs, walk_names_the_name_length_limit)
{
	static const char sql[] =
	    "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " VALUES (2, 16877, 1, 0, 0, 0);"
	    "INSERT INTO fs_dentry (name, parent_ino, ino) VALUES ('d', 1, 2);"
	    "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " VALUES (3, 33188, 1, 0, 0, 0);"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " VALUES (replace(hex(zeroblob(150)), '0', 'n'), 2, 3);";
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	size_t len;
	void *blob = fresh_mutated(sql, &len);
	int n = 0;

	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_walk(fs, count_entry, &n, &e), -ENAMETOOLONG);
	cr_expect_str_eq(e.msg, "agentfs: a name in /d/ is 300 bytes, more "
	    "than the name length limit 255");
	agentfs_close(fs);
	free(blob);
}

/* Paths and file bytes as one query counts them: a hard link twice. */
Test(agentfs, claims_count_every_path_and_its_file_bytes)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	uint64_t paths = 0, bytes = 0;
	size_t len, mlen;
	void *blob = blob_with_file(&len);
	void *m = blob_mutate(blob, len, "INSERT INTO fs_inode (ino, mode,"
	    " nlink, atime, mtime, ctime) VALUES (9, 16877, 1, 0, 0, 0);"
	    "INSERT INTO fs_dentry (name, parent_ino, ino) VALUES ('d', 1, 9),"
	    " ('again', 1, 2);"
	    "INSERT INTO fs_inode (ino, mode, nlink, size, atime, mtime, ctime)"
	    " VALUES (10, 33188, 1, 9223372036854775807, 0, 0, 0);"
	    "INSERT INTO fs_dentry (name, parent_ino, ino) VALUES ('huge', 9,"
	    " 10)", &mlen);

	cr_assert_eq(agentfs_open_blob(m, mlen, &fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_claims(fs, &paths, &bytes, &e), 0, "%s", e.msg);
	cr_expect_eq(paths, 4);
	cr_expect_eq(bytes, 2 * 10000 + ((uint64_t)1 << 40), "%llu",
	    (unsigned long long)bytes);
	agentfs_close(fs);
	free(m);
	free(blob);
}

static int64_t
mono_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Past its deadline, an untrusted handle's long statements stop with
 * -ETIMEDOUT: 3000 entries in a directory whose index the upload dropped.
 */
Test(agentfs, untrusted_handle_stops_at_its_deadline)
{
	static const char sql[] =
	    "DROP INDEX idx_fs_dentry_parent;"
	    "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n"
	    " WHERE i < 3001)"
	    " INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " SELECT i, 33188, 1, 0, 0, 0 FROM n;"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " SELECT 'f' || ino, 1, ino FROM fs_inode WHERE ino > 1;";
	struct timespec pause = { 0, 60 * 1000000 };
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	size_t len;
	void *blob = fresh_mutated(sql, &len);
	int n = 0;

	cr_assert_eq(agentfs_open_untrusted(blob, len, mono_now_ns() +
	    2000000000LL, &fs, &e), 0, "%s", e.msg);
	cr_expect_eq(agentfs_walk(fs, count_entry, &n, &e), 0, "%s", e.msg);
	cr_expect_eq(n, 3000);
	agentfs_close(fs);

	cr_assert_eq(agentfs_open_untrusted(blob, len, mono_now_ns() +
	    50000000LL, &fs, &e), 0, "%s", e.msg);
	nanosleep(&pause, NULL);
	cr_expect_eq(agentfs_walk(fs, count_entry, &n, &e), -ETIMEDOUT);
	cr_expect(strstr(e.msg, "stopped at the deadline") != NULL, "%s",
	    e.msg);
	agentfs_close(fs);
	free(blob);
}
