/*
 * ops_test.c - unit tests for the fs.*, kv.* and sandbox.* ops in
 * worker/ops.c.
 *
 * Each test gets a fresh store in a mkdtemp() folder (the fixture). Jobs
 * are built by hand (job_new() and fields, as the decoder would leave
 * them: paths absolute and normalised, the tenant set) and run through
 * ops_run(); results are checked field by field, and res->data is decoded
 * with msgpack-c. Snapshots are inspected through the AgentFS codec and the
 * store's own API, never through ops.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../proto/job.h"
#include "../proto/result.h"
#include "../agentfs/agentfs.h"
#include "../store/store.h"
#include "../worker/ops.h"

static char dir[] = "/tmp/ops_test.XXXXXX";
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

TestSuite(ops, .init = setup, .fini = teardown, .timeout = 60);

/*** Helpers ***/

static const char *tenant = "acme";

static char *
testdata_path(const char *name)
{
	const char *d = getenv("SANDQ_TESTDATA");
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s", d ? d : "tests/data", name) > 0);
	return p;
}

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
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static struct job *
mkjob(enum job_op op, const char *sandbox)
{
	struct job *j = job_new();

	j->op = op;
	j->tenant = strdup(tenant);
	j->sandbox = sandbox ? strdup(sandbox) : NULL;
	return j;
}

/* Runs j (then frees it) and returns the result. */
static struct result *
run(struct job *j)
{
	struct result *r = result_new("job-1");

	cr_assert_eq(ops_run(st, j, r), 0);
	cr_expect_geq(r->finished_at, r->started_at);
	cr_expect_gt(r->started_at, 0);
	job_free(j);
	return r;
}

static void
expect_ok(const struct result *r)
{
	cr_assert_eq(r->status, ST_OK, "status %s: %s: %s",
	    res_status_name(r->status), r->error_code ? r->error_code : "",
	    r->error_message ? r->error_message : "");
}

static void
expect_rejected(const struct result *r, const char *code)
{
	cr_assert_eq(r->status, ST_REJECTED, "status %s, want rejected %s "
	    "(%s)", res_status_name(r->status), code,
	    r->error_message ? r->error_message : "");
	cr_assert_str_eq(r->error_code, code, "%s", r->error_message);
}

/* Runs j, expects ok, frees the result. */
static void
run_ok(struct job *j)
{
	struct result *r = run(j);

	expect_ok(r);
	result_free(r);
}

/* Runs j, expects a rejection with code, frees the result. */
static void
run_rejected(struct job *j, const char *code)
{
	struct result *r = run(j);

	expect_rejected(r, code);
	result_free(r);
}

/* The decoded result data. */
struct dec {
	msgpack_unpacked up;
	msgpack_object o;
};

static void
dec_init(struct dec *d, const struct result *r)
{
	size_t off = 0;

	cr_assert_not_null(r->data, "no data");
	msgpack_unpacked_init(&d->up);
	cr_assert_eq(msgpack_unpack_next(&d->up, (const char *)r->data,
	    r->data_len, &off), MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(off, r->data_len, "trailing bytes in data");
	d->o = d->up.data;
}

static void
dec_free(struct dec *d)
{
	msgpack_unpacked_destroy(&d->up);
}

static bool
obj_str_is(const msgpack_object *o, const char *s)
{
	return o != NULL && o->type == MSGPACK_OBJECT_STR &&
	    o->via.str.size == strlen(s) &&
	    memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static const msgpack_object *
map_get(const msgpack_object *m, const char *key)
{
	cr_assert_eq(m->type, MSGPACK_OBJECT_MAP, "not a map");
	for (uint32_t i = 0; i < m->via.map.size; i++)
		if (obj_str_is(&m->via.map.ptr[i].key, key))
			return &m->via.map.ptr[i].val;
	return NULL;
}

static void
expect_str(const msgpack_object *m, const char *key, const char *want)
{
	const msgpack_object *v = map_get(m, key);

	cr_assert_not_null(v, "no key '%s'", key);
	cr_expect(obj_str_is(v, want), "'%s' is not '%s' (type %d)", key, want,
	    v->type);
}

static uint64_t
get_u64(const msgpack_object *m, const char *key)
{
	const msgpack_object *v = map_get(m, key);

	cr_assert_not_null(v, "no key '%s'", key);
	cr_assert_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "'%s' type %d",
	    key, v->type);
	return v->via.u64;
}

/* The path of entry i of an fs.list array. */
static void
expect_paths(const struct result *r, const char *const *want, size_t n)
{
	struct dec d;

	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_ARRAY);
	cr_expect_eq(d.o.via.array.size, n, "%u entries, want %zu",
	    d.o.via.array.size, n);
	for (size_t i = 0; i < n && i < d.o.via.array.size; i++)
		expect_str(&d.o.via.array.ptr[i], "path", want[i]);
	dec_free(&d);
}

static void
create(const char *sb)
{
	run_ok(mkjob(OP_SANDBOX_CREATE, sb));
}

static struct job *
write_job(const char *sb, const char *path, const char *text)
{
	struct job *j = mkjob(OP_FS_WRITE, sb);

	j->path = strdup(path);
	j->data = (uint8_t *)strdup(text);
	j->data_len = strlen(text);
	return j;
}

static void
write_text(const char *sb, const char *path, const char *text)
{
	run_ok(write_job(sb, path, text));
}

static struct job *
path_job(enum job_op op, const char *sb, const char *path)
{
	struct job *j = mkjob(op, sb);

	j->path = path ? strdup(path) : NULL;
	return j;
}

/* Reads path and checks its content. */
static void
expect_content(const char *sb, const char *path, const char *want)
{
	struct result *r = run(path_job(OP_FS_READ, sb, path));
	struct dec d;

	expect_ok(r);
	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_BIN);
	cr_expect_eq(d.o.via.bin.size, strlen(want));
	cr_expect(memcmp(d.o.via.bin.ptr, want, strlen(want)) == 0);
	dec_free(&d);
	result_free(r);
}

/* Reads path and checks its length. */
static void
expect_content_len(const char *sb, const char *path, size_t want)
{
	struct result *r = run(path_job(OP_FS_READ, sb, path));
	struct dec d;

	expect_ok(r);
	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_BIN);
	cr_expect_eq(d.o.via.bin.size, want);
	dec_free(&d);
	result_free(r);
}

static void
add_perm(struct job *j, const char *pattern, enum perm_level level)
{
	j->perms = realloc(j->perms, (j->nperms + 1) * sizeof(*j->perms));
	cr_assert_not_null(j->perms);
	j->perms[j->nperms].pattern = strdup(pattern);
	j->perms[j->nperms].level = level;
	j->nperms++;
}

static void
add_file(struct job *j, const char *path, const char *text)
{
	j->files = realloc(j->files, (j->nfiles + 1) * sizeof(*j->files));
	cr_assert_not_null(j->files);
	j->files[j->nfiles].path = strdup(path);
	j->files[j->nfiles].data = (uint8_t *)strdup(text);
	j->files[j->nfiles].len = strlen(text);
	j->nfiles++;
}

static struct store_sandbox
sandbox_get(const char *sb)
{
	struct store_sandbox out;
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_get(st, tenant, sb, &out, &e), 0, "%s",
	    e.msg);
	return out;
}

/* The sandbox's head opened with the codec (full check). */
static struct agentfs *
head_open(const char *sb)
{
	struct store_sandbox s = sandbox_get(sb);
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	void *blob = NULL;
	size_t len = 0;

	cr_assert_eq(store_blob_get(st, s.head, &blob, &len, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	free(blob);
	return fs;
}

/*** sandbox.create ***/

Test(ops, create_empty_returns_info)
{
	struct job *j = mkjob(OP_SANDBOX_CREATE, "sb1");
	struct result *r;
	struct dec d;
	const msgpack_object *labels;

	j->labels = calloc(4, sizeof(char *));
	j->labels[0] = strdup("team");
	j->labels[1] = strdup("ml");
	j->labels[2] = strdup("env");
	j->labels[3] = strdup("dev");
	j->nlabels = 2;
	r = run(j);
	expect_ok(r);
	cr_expect_str_eq(r->sandbox, "sb1");
	cr_expect_eq(r->version, 1);
	cr_assert_not_null(r->snapshot);
	cr_expect_eq(strlen(r->snapshot), 64);
	dec_init(&d, r);
	expect_str(&d.o, "sandbox", "sb1");
	cr_expect_eq(get_u64(&d.o, "version"), 1);
	expect_str(&d.o, "snapshot", r->snapshot);
	cr_expect_gt(get_u64(&d.o, "size"), 0);
	cr_expect_gt(get_u64(&d.o, "created_at"), 1000000000000ull);
	labels = map_get(&d.o, "labels");
	cr_assert_not_null(labels);
	cr_expect_eq(labels->via.map.size, 2);
	expect_str(labels, "team", "ml");
	expect_str(labels, "env", "dev");
	dec_free(&d);
	result_free(r);
	cr_expect_str_eq(sandbox_get("sb1").labels,
	    "{\"env\":\"dev\",\"team\":\"ml\"}");
}

Test(ops, create_twice_is_sandbox_exists)
{
	create("sb1");
	run_rejected(mkjob(OP_SANDBOX_CREATE, "sb1"), "sandbox_exists");
}

Test(ops, create_from_files_makes_parents)
{
	struct job *j = mkjob(OP_SANDBOX_CREATE, "sb1");
	struct result *r;
	struct dec d;

	add_file(j, "a/b/c.txt", "deep\n");
	add_file(j, "top.txt", "top\n");
	add_file(j, "a/d.txt", "d\n");
	run_ok(j);
	expect_content("sb1", "/a/b/c.txt", "deep\n");
	expect_content("sb1", "/top.txt", "top\n");
	expect_content("sb1", "/a/d.txt", "d\n");
	r = run(path_job(OP_FS_STAT, "sb1", "/a/b"));
	expect_ok(r);
	dec_init(&d, r);
	expect_str(&d.o, "type", "dir");
	cr_expect_eq(get_u64(&d.o, "mode"), 0755);
	dec_free(&d);
	result_free(r);
	r = run(path_job(OP_FS_STAT, "sb1", "/a/b/c.txt"));
	expect_ok(r);
	dec_init(&d, r);
	expect_str(&d.o, "type", "file");
	cr_expect_eq(get_u64(&d.o, "mode"), 0644);
	cr_expect_eq(get_u64(&d.o, "size"), 5);
	dec_free(&d);
	result_free(r);
}

Test(ops, create_from_snapshot_imports_it)
{
	struct result *r;
	struct job *j;
	struct dec d;

	create("src");
	write_text("src", "/hello.txt", "hello\n");
	r = run(mkjob(OP_SANDBOX_EXPORT, "src"));
	expect_ok(r);
	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_BIN);
	j = mkjob(OP_SANDBOX_CREATE, "dst");
	j->snapshot = malloc(d.o.via.bin.size);
	memcpy(j->snapshot, d.o.via.bin.ptr, d.o.via.bin.size);
	j->snapshot_len = d.o.via.bin.size;
	dec_free(&d);
	result_free(r);
	run_ok(j);
	expect_content("dst", "/hello.txt", "hello\n");
	cr_expect_eq(sandbox_get("dst").version, 1);
}

Test(ops, create_with_files_and_snapshot_is_invalid)
{
	struct job *j = mkjob(OP_SANDBOX_CREATE, "sb1");

	add_file(j, "a.txt", "a");
	j->snapshot = (uint8_t *)strdup("x");
	j->snapshot_len = 1;
	run_rejected(j, "invalid");
}

/*** fs.write / fs.read ***/

Test(ops, write_then_read_back_and_version_increments)
{
	struct result *r;
	struct dec d;
	char first[65];

	create("sb1");
	r = run(write_job("sb1", "/notes.txt", "v1"));
	expect_ok(r);
	cr_expect_eq(r->version, 2);
	cr_expect_str_eq(r->sandbox, "sb1");
	strcpy(first, r->snapshot);
	dec_init(&d, r);
	expect_str(&d.o, "path", "/notes.txt");
	cr_expect_eq(get_u64(&d.o, "size"), 2);
	dec_free(&d);
	result_free(r);
	expect_content("sb1", "/notes.txt", "v1");

	r = run(write_job("sb1", "/notes.txt", "version two"));
	expect_ok(r);
	cr_expect_eq(r->version, 3);
	cr_expect_str_neq(r->snapshot, first);
	cr_expect_str_eq(r->snapshot, sandbox_get("sb1").head);
	result_free(r);
	expect_content("sb1", "/notes.txt", "version two");

	/* A read reports the head without moving it. */
	r = run(path_job(OP_FS_READ, "sb1", "/notes.txt"));
	expect_ok(r);
	cr_expect_eq(r->version, 3);
	result_free(r);
	cr_expect_eq(sandbox_get("sb1").version, 3);
}

Test(ops, write_honours_mode_and_empty_data)
{
	struct job *j;
	struct result *r;
	struct dec d;

	create("sb1");
	j = path_job(OP_FS_WRITE, "sb1", "/run.sh");
	j->mode = 0755;
	run_ok(j);
	r = run(path_job(OP_FS_STAT, "sb1", "/run.sh"));
	expect_ok(r);
	dec_init(&d, r);
	cr_expect_eq(get_u64(&d.o, "mode"), 0755);
	cr_expect_eq(get_u64(&d.o, "size"), 0);
	expect_str(&d.o, "name", "run.sh");
	dec_free(&d);
	result_free(r);
	expect_content("sb1", "/run.sh", "");
}

Test(ops, write_errors_map_to_codes)
{
	create("sb1");
	write_text("sb1", "/f", "x");
	run_ok(mkjob(OP_SANDBOX_INFO, "sb1"));
	run_rejected(write_job("sb1", "/no/such/file", "x"), "not_found");
	run_rejected(write_job("sb1", "/f/under", "x"), "not_dir");
	{
		struct job *j = mkjob(OP_SANDBOX_CREATE, "sb2");

		add_file(j, "d/x", "x");
		run_ok(j);
	}
	run_rejected(write_job("sb2", "/d", "x"), "is_dir");
	run_rejected(path_job(OP_FS_READ, "sb2", "/d"), "is_dir");
	run_rejected(path_job(OP_FS_READ, "sb2", "/nope"), "not_found");
	run_rejected(write_job("sb1", "/", "x"), "invalid");
	/* Nothing above moved a head. */
	cr_expect_eq(sandbox_get("sb1").version, 2);
	cr_expect_eq(sandbox_get("sb2").version, 1);
}

static struct job *import_job(const char *sb, const char *file);

/* fs.write's parents: mkdir -p, each folder under the rules, all or nothing. */
Test(ops, write_parents_makes_folders_under_the_rules)
{
	struct result *r;
	struct job *j;

	create("sb1");
	write_text("sb1", "/f", "x");
	/* Without parents a missing folder is still not_found. */
	run_rejected(write_job("sb1", "/a/b/c.txt", "x"), "not_found");
	j = write_job("sb1", "/a/b/c.txt", "deep");
	j->parents = true;
	run_ok(j);
	expect_content("sb1", "/a/b/c.txt", "deep");
	r = run(path_job(OP_FS_STAT, "sb1", "/a/b"));
	expect_ok(r);
	result_free(r);
	/* Existing folders are kept; only the missing one is made. */
	j = write_job("sb1", "/a/b2/d.txt", "d");
	j->parents = true;
	run_ok(j);
	cr_expect_eq(sandbox_get("sb1").version, 4);

	/* Through a file: refused naming it, nothing made. */
	j = write_job("sb1", "/f/g/h.txt", "x");
	j->parents = true;
	r = run(j);
	expect_rejected(r, "not_dir");
	cr_expect_not_null(strstr(r->error_message, "parent '/f' is a file"),
	    "%s", r->error_message);
	result_free(r);

	/* A folder the rules do not let the job write: refused, nothing made. */
	j = write_job("sb1", "/ro/x/y.txt", "x");
	j->parents = true;
	add_perm(j, "/ro/x", PERM_WRITE);
	add_perm(j, "/ro", PERM_READ);
	r = run(j);
	expect_rejected(r, "permission");
	cr_expect_not_null(strstr(r->error_message, "creating folder '/ro'"),
	    "%s", r->error_message);
	result_free(r);
	run_rejected(path_job(OP_FS_STAT, "sb1", "/ro"), "not_found");
	cr_expect_eq(sandbox_get("sb1").version, 4);

	/* Through a symlink: refused naming it, never followed. */
	run_ok(import_job("legacy", "localsandbox-export.db"));
	j = write_job("legacy", "/project/latest/x/y.txt", "x");
	j->parents = true;
	r = run(j);
	expect_rejected(r, "not_dir");
	cr_expect_not_null(strstr(r->error_message,
	    "parent '/project/latest' is a symlink"), "%s", r->error_message);
	result_free(r);
}

Test(ops, missing_sandbox_is_sandbox_not_found)
{
	run_rejected(path_job(OP_FS_READ, "ghost", "/a"), "sandbox_not_found");
	run_rejected(write_job("ghost", "/a", "x"), "sandbox_not_found");
	run_rejected(mkjob(OP_SANDBOX_INFO, "ghost"), "sandbox_not_found");
	run_rejected(mkjob(OP_SANDBOX_DELETE, "ghost"), "sandbox_not_found");
}

/*** fs.list / fs.stat ***/

static void
make_tree(const char *sb)
{
	struct job *j = mkjob(OP_SANDBOX_CREATE, sb);

	add_file(j, "b.txt", "b");
	add_file(j, "a/x", "x");
	add_file(j, "a/y/z", "z");
	add_file(j, ".env", "SECRET=1");
	add_file(j, "a/y/.env", "SECRET=2");
	add_file(j, "B", "capital");
	run_ok(j);
}

Test(ops, list_orders_parents_first_by_bytes_and_hides_none)
{
	static const char *const top[] = { "/B", "/a", "/b.txt" };
	static const char *const all[] = { "/B", "/a", "/a/x", "/a/y",
	    "/a/y/z", "/b.txt" };
	static const char *const sub[] = { "/a/x", "/a/y" };
	struct job *j;
	struct result *r;

	make_tree("sb1");
	r = run(path_job(OP_FS_LIST, "sb1", NULL));
	expect_ok(r);
	expect_paths(r, top, 3);
	result_free(r);

	j = path_job(OP_FS_LIST, "sb1", "/");
	j->recursive = true;
	r = run(j);
	expect_ok(r);
	expect_paths(r, all, 6);
	result_free(r);

	r = run(path_job(OP_FS_LIST, "sb1", "/a"));
	expect_ok(r);
	expect_paths(r, sub, 2);
	result_free(r);

	/* full-access shows the secrets. */
	j = path_job(OP_FS_LIST, "sb1", "/");
	j->recursive = true;
	j->perm_preset = strdup("full-access");
	r = run(j);
	expect_ok(r);
	{
		static const char *const every[] = { "/.env", "/B", "/a",
		    "/a/x", "/a/y", "/a/y/.env", "/a/y/z", "/b.txt" };

		expect_paths(r, every, 8);
	}
	result_free(r);
}

Test(ops, list_entry_fields_and_errors)
{
	struct result *r;
	struct dec d;
	const msgpack_object *e0;

	make_tree("sb1");
	r = run(path_job(OP_FS_LIST, "sb1", "/a"));
	expect_ok(r);
	dec_init(&d, r);
	e0 = &d.o.via.array.ptr[0];
	expect_str(e0, "name", "x");
	expect_str(e0, "type", "file");
	cr_expect_eq(get_u64(e0, "size"), 1);
	cr_expect_eq(get_u64(e0, "mode"), 0644);
	cr_expect_gt(get_u64(e0, "mtime"), 1000000000);
	cr_expect_null(map_get(e0, "target"));
	expect_str(&d.o.via.array.ptr[1], "type", "dir");
	dec_free(&d);
	result_free(r);
	run_rejected(path_job(OP_FS_LIST, "sb1", "/b.txt"), "not_dir");
	run_rejected(path_job(OP_FS_LIST, "sb1", "/nope"), "not_found");
	run_rejected(path_job(OP_FS_LIST, "sb1", "/a/y/.env"), "not_found");
}

Test(ops, stat_describes_one_entry)
{
	struct result *r;
	struct dec d;

	make_tree("sb1");
	r = run(path_job(OP_FS_STAT, "sb1", "/a/y/z"));
	expect_ok(r);
	dec_init(&d, r);
	expect_str(&d.o, "path", "/a/y/z");
	expect_str(&d.o, "name", "z");
	expect_str(&d.o, "type", "file");
	cr_expect_eq(get_u64(&d.o, "size"), 1);
	dec_free(&d);
	result_free(r);
	run_rejected(path_job(OP_FS_STAT, "sb1", "/a/zz"), "not_found");
	run_rejected(path_job(OP_FS_STAT, "sb1", "/b.txt/x"), "not_dir");
	/* Hidden exists, but looks absent. */
	run_rejected(path_job(OP_FS_STAT, "sb1", "/.env"), "not_found");
}

/*** fs.delete ***/

Test(ops, delete_file_then_gone)
{
	struct result *r;
	struct dec d;

	make_tree("sb1");
	r = run(path_job(OP_FS_DELETE, "sb1", "/b.txt"));
	expect_ok(r);
	cr_expect_eq(r->version, 2);
	dec_init(&d, r);
	expect_str(&d.o, "path", "/b.txt");
	cr_expect_eq(get_u64(&d.o, "removed"), 1);
	dec_free(&d);
	result_free(r);
	run_rejected(path_job(OP_FS_READ, "sb1", "/b.txt"), "not_found");
	run_rejected(path_job(OP_FS_DELETE, "sb1", "/b.txt"), "not_found");
}

Test(ops, delete_dir_needs_recursive)
{
	struct result *r;
	struct job *j;
	struct dec d;

	create("sb1");
	write_text("sb1", "/keep", "k");
	{
		struct job *c = mkjob(OP_SANDBOX_CREATE, "sb2");

		add_file(c, "d/x", "x");
		add_file(c, "d/e/y", "y");
		add_file(c, "keep", "k");
		run_ok(c);
	}
	run_rejected(path_job(OP_FS_DELETE, "sb2", "/d"), "not_empty");
	cr_expect_eq(sandbox_get("sb2").version, 1);
	j = path_job(OP_FS_DELETE, "sb2", "/d");
	j->recursive = true;
	r = run(j);
	expect_ok(r);
	dec_init(&d, r);
	cr_expect_eq(get_u64(&d.o, "removed"), 4);	/* d, d/e, d/e/y, d/x */
	dec_free(&d);
	result_free(r);
	run_rejected(path_job(OP_FS_STAT, "sb2", "/d"), "not_found");
	expect_content("sb2", "/keep", "k");
}

Test(ops, delete_recursive_refuses_when_an_entry_is_protected)
{
	static const char *const still[] = { "/d", "/d/.env", "/d/x" };
	struct result *r;
	struct job *j;

	create("sb1");
	{
		struct job *c = mkjob(OP_SANDBOX_CREATE, "sb2");

		add_file(c, "d/x", "x");
		add_file(c, "d/.env", "S=1");
		run_ok(c);
	}
	j = path_job(OP_FS_DELETE, "sb2", "/d");
	j->recursive = true;
	r = run(j);
	expect_rejected(r, "permission");
	/* The hidden name is not revealed. */
	cr_expect_null(strstr(r->error_message, ".env"), "%s",
	    r->error_message);
	result_free(r);
	j = path_job(OP_FS_LIST, "sb2", "/");
	j->recursive = true;
	j->perm_preset = strdup("full-access");
	r = run(j);
	expect_ok(r);
	expect_paths(r, still, 3);
	result_free(r);
	cr_expect_eq(sandbox_get("sb2").version, 1);
}

/*** Path rules ***/

Test(ops, path_rules_none_view_read)
{
	struct job *j;

	create("sb1");
	write_text("sb1", "/v.txt", "view");
	write_text("sb1", "/r.txt", "read");
	/* none: looks absent, even though it is there. */
	{
		struct job *c = path_job(OP_FS_WRITE, "sb1", "/.env");

		c->perm_preset = strdup("full-access");
		c->data = (uint8_t *)strdup("S=1");
		c->data_len = 3;
		run_ok(c);
	}
	run_rejected(path_job(OP_FS_READ, "sb1", "/.env"), "not_found");
	run_rejected(write_job("sb1", "/.env", "x"), "permission");
	/* view: listed, not readable. */
	j = path_job(OP_FS_READ, "sb1", "/v.txt");
	add_perm(j, "/v.txt", PERM_VIEW);
	run_rejected(j, "permission");
	j = path_job(OP_FS_STAT, "sb1", "/v.txt");
	add_perm(j, "/v.txt", PERM_VIEW);
	run_ok(j);
	/* read: readable, not writable or deletable. */
	j = path_job(OP_FS_READ, "sb1", "/r.txt");
	add_perm(j, "/r.txt", PERM_READ);
	run_ok(j);
	j = write_job("sb1", "/r.txt", "changed");
	add_perm(j, "/r.txt", PERM_READ);
	run_rejected(j, "permission");
	j = path_job(OP_FS_DELETE, "sb1", "/r.txt");
	add_perm(j, "r.txt", PERM_READ);
	run_rejected(j, "permission");
	expect_content("sb1", "/r.txt", "read");
	/* A preset: read-only refuses every write. */
	j = write_job("sb1", "/new", "x");
	j->perm_preset = strdup("read-only");
	run_rejected(j, "permission");
	/* A bad rule is the request's fault. */
	j = path_job(OP_FS_READ, "sb1", "/r.txt");
	add_perm(j, "/a/../b", PERM_READ);
	run_rejected(j, "invalid");
}

/*** kv ***/

static void
kv_set(const char *sb, const char *key, const char *value)
{
	struct job *j = mkjob(OP_KV_SET, sb);

	j->key = strdup(key);
	j->value = strdup(value);
	run_ok(j);
}

static void
expect_keys(const char *sb, const char *prefix, const char *const *want,
    size_t n)
{
	struct job *j = mkjob(OP_KV_KEYS, sb);
	struct result *r;
	struct dec d;

	j->prefix = prefix ? strdup(prefix) : NULL;
	r = run(j);
	expect_ok(r);
	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_ARRAY);
	cr_expect_eq(d.o.via.array.size, n);
	for (size_t i = 0; i < n && i < d.o.via.array.size; i++)
		cr_expect(obj_str_is(&d.o.via.array.ptr[i], want[i]),
		    "key %zu is not %s", i, want[i]);
	dec_free(&d);
	result_free(r);
}

Test(ops, kv_set_get_delete_keys)
{
	static const char *const a[] = { "a:1", "a:2" };
	static const char *const all[] = { "a%", "a:1", "a:2", "b" };
	static const char *const after[] = { "a%", "a:1", "a:2" };
	struct result *r;
	struct job *j;
	struct dec d;

	create("sb1");
	kv_set("sb1", "a:2", "{\"x\":[1,2]}");
	kv_set("sb1", "a:1", "\"one\"");
	kv_set("sb1", "b", "3");
	kv_set("sb1", "a%", "null");
	cr_expect_eq(sandbox_get("sb1").version, 5);
	j = mkjob(OP_KV_GET, "sb1");
	j->key = strdup("a:2");
	r = run(j);
	expect_ok(r);
	dec_init(&d, r);
	cr_expect(obj_str_is(&d.o, "{\"x\":[1,2]}"));
	dec_free(&d);
	result_free(r);
	expect_keys("sb1", "a:", a, 2);
	expect_keys("sb1", NULL, all, 4);
	j = mkjob(OP_KV_DELETE, "sb1");
	j->key = strdup("b");
	r = run(j);
	expect_ok(r);
	cr_expect_eq(r->version, 6);
	dec_init(&d, r);
	cr_expect_eq(d.o.type, MSGPACK_OBJECT_NIL);
	dec_free(&d);
	result_free(r);
	expect_keys("sb1", "", after, 3);
	j = mkjob(OP_KV_GET, "sb1");
	j->key = strdup("b");
	run_rejected(j, "not_found");
	j = mkjob(OP_KV_DELETE, "sb1");
	j->key = strdup("b");
	run_rejected(j, "not_found");
	j = mkjob(OP_KV_SET, "sb1");
	j->key = strdup("bad");
	j->value = strdup("{not json");
	run_rejected(j, "invalid");
	cr_expect_eq(sandbox_get("sb1").version, 6);
}

/*** fork / export / import ***/

Test(ops, fork_shares_blob_and_is_independent)
{
	struct err e = { 0 };
	struct result *r;
	struct job *j;
	struct dec d;
	long blobs;

	create("src");
	write_text("src", "/f", "original");
	blobs = store_blob_count(st, &e);
	j = mkjob(OP_SANDBOX_FORK, "src");
	j->to = strdup("copy");
	r = run(j);
	expect_ok(r);
	cr_expect_str_eq(r->sandbox, "copy");
	cr_expect_eq(r->version, 1);
	cr_expect_str_eq(r->snapshot, sandbox_get("src").head);
	dec_init(&d, r);
	expect_str(&d.o, "sandbox", "copy");
	cr_expect_null(map_get(&d.o, "size"));
	dec_free(&d);
	result_free(r);
	cr_expect_eq(store_blob_count(st, &e), blobs);
	cr_expect_str_eq(sandbox_get("copy").head, sandbox_get("src").head);

	write_text("copy", "/f", "changed");
	expect_content("copy", "/f", "changed");
	expect_content("src", "/f", "original");
	cr_expect_eq(sandbox_get("src").version, 2);
	cr_expect_eq(sandbox_get("copy").version, 2);

	j = mkjob(OP_SANDBOX_FORK, "src");
	j->to = strdup("copy");
	run_rejected(j, "sandbox_exists");
	j = mkjob(OP_SANDBOX_FORK, "ghost");
	j->to = strdup("x");
	run_rejected(j, "sandbox_not_found");
}

Test(ops, export_is_the_stored_blob)
{
	struct err e = { 0 };
	struct result *r;
	void *blob = NULL;
	size_t len = 0;
	struct dec d;

	create("sb1");
	write_text("sb1", "/a", "bytes");
	r = run(mkjob(OP_SANDBOX_EXPORT, "sb1"));
	expect_ok(r);
	cr_expect_eq(r->version, 2);
	cr_assert_eq(store_blob_get(st, sandbox_get("sb1").head, &blob, &len,
	    &e), 0, "%s", e.msg);
	dec_init(&d, r);
	cr_assert_eq(d.o.type, MSGPACK_OBJECT_BIN);
	cr_expect_eq(d.o.via.bin.size, len);
	cr_expect(memcmp(d.o.via.bin.ptr, blob, len) == 0);
	dec_free(&d);
	free(blob);
	result_free(r);
}

static struct job *
import_job(const char *sb, const char *file)
{
	struct job *j = mkjob(OP_SANDBOX_IMPORT, sb);

	j->snapshot = file_slurp(file, &j->snapshot_len);
	return j;
}

/* Checks the walk of fs against expect.json (symlinks now native). */
struct walked {
	struct agentfs *fs;
	json_t *dirs, *files, *links;
	int64_t readme_mtime;
};

static int
walked_cb(const struct agentfs_entry *ent, void *arg)
{
	struct walked *w = arg;
	char mode[8], sha[65];
	struct err e = { 0 };
	void *data;
	size_t len;

	snprintf(mode, sizeof(mode), "%04o", ent->mode & 07777);
	switch (ent->kind) {
	case AGENTFS_DIR:
		json_object_set_new(w->dirs, ent->path, json_pack("{ss}",
		    "mode", mode));
		break;
	case AGENTFS_FILE:
		cr_assert_eq(agentfs_read(w->fs, ent->path, &data, &len, &e), 0,
		    "%s", e.msg);
		sha256_hex(data, len, sha);
		free(data);
		json_object_set_new(w->files, ent->path, json_pack("{sssssI}",
		    "mode", mode, "sha256", sha, "size", (json_int_t)len));
		if (strcmp(ent->path, "/project/README.md") == 0)
			w->readme_mtime = ent->mtime;
		break;
	case AGENTFS_SYMLINK:
		json_object_set_new(w->links, ent->path, json_pack("{ssss}",
		    "target", ent->target, "form",
		    ent->form == AGENTFS_LINK_NATIVE ? "native" : "json-file"));
		break;
	default:
		cr_assert_fail("special entry %s", ent->path);
	}
	return 0;
}

static void
walked_take(struct agentfs *fs, struct walked *w)
{
	struct err e = { 0 };

	w->fs = fs;
	w->dirs = json_object();
	w->files = json_object();
	w->links = json_object();
	cr_assert_eq(agentfs_walk(fs, walked_cb, w, &e), 0, "%s", e.msg);
}

static void
walked_free(struct walked *w)
{
	json_decref(w->dirs);
	json_decref(w->files);
	json_decref(w->links);
}

static int
calls_cb(const struct agentfs_tool_call *tc, void *arg)
{
	json_t *list = arg;

	json_array_append_new(list, json_pack("{sssIsIsI}", "name", tc->name,
	    "started_at", (json_int_t)tc->started_at, "completed_at",
	    (json_int_t)tc->completed_at, "duration_ms",
	    (json_int_t)tc->duration_ms));
	return 0;
}

Test(ops, import_legacy_localsandbox_export)
{
	char *path = testdata_path("localsandbox-export.expect.json");
	json_t *want = json_load_file(path, 0, NULL), *wlinks, *got_calls,
	    *src_calls;
	struct agentfs *fs, *src;
	struct walked w = { 0 }, ws = { 0 };
	struct err e = { 0 };
	struct result *r;
	char *v = NULL;
	size_t srclen;
	void *srcblob;
	struct dec d;

	cr_assert_not_null(want);
	r = run(import_job("legacy", "localsandbox-export.db"));
	expect_ok(r);
	cr_expect_eq(r->version, 1);
	dec_init(&d, r);
	expect_str(&d.o, "sandbox", "legacy");
	dec_free(&d);
	result_free(r);

	fs = head_open("legacy");
	cr_expect_not(agentfs_is_legacy(fs), "the stored copy is 0.4");
	walked_take(fs, &w);
	cr_expect(json_equal(w.dirs, json_object_get(want, "dirs")), "dirs "
	    "%s", json_dumps(w.dirs, JSON_SORT_KEYS));
	cr_expect(json_equal(w.files, json_object_get(want, "files")), "files "
	    "%s", json_dumps(w.files, JSON_SORT_KEYS));
	/* Legacy json-file symlinks are native now, same target. */
	wlinks = json_deep_copy(json_object_get(want, "symlinks"));
	json_object_set_new(json_object_get(wlinks, "/project/latest"), "form",
	    json_string("native"));
	cr_expect(json_equal(w.links, wlinks), "symlinks %s",
	    json_dumps(w.links, JSON_SORT_KEYS));
	json_decref(wlinks);

	/* mtimes kept. */
	srcblob = file_slurp("localsandbox-export.db", &srclen);
	cr_assert_eq(agentfs_open_blob(srcblob, srclen, &src, &e), 0, "%s",
	    e.msg);
	free(srcblob);
	walked_take(src, &ws);
	cr_expect_eq(w.readme_mtime, ws.readme_mtime);
	cr_expect_gt(ws.readme_mtime, 0);

	/* kv kept. */
	cr_assert_eq(agentfs_kv_get(fs, "session", &v, &e), 0, "%s", e.msg);
	cr_expect_str_eq(v, "\"abc\"");
	free(v);
	cr_assert_eq(agentfs_kv_get(fs, "step", &v, &e), 0, "%s", e.msg);
	cr_expect_str_eq(v, "3");
	free(v);

	/* tool_calls: the 8 rows in seconds, then the import's own row. */
	got_calls = json_array();
	src_calls = json_array();
	cr_assert_eq(agentfs_tool_call_each(fs, calls_cb, got_calls, &e), 0);
	cr_assert_eq(agentfs_tool_call_each(src, calls_cb, src_calls, &e), 0);
	cr_assert_eq(json_array_size(src_calls), 8);
	cr_assert_eq(json_array_size(got_calls), 9);
	for (size_t i = 0; i < 8; i++) {
		json_t *g = json_array_get(got_calls, i),
		    *s = json_array_get(src_calls, i);
		json_int_t ss = json_integer_value(json_object_get(s,
		    "started_at")), sc = json_integer_value(json_object_get(s,
		    "completed_at"));

		cr_expect_str_eq(json_string_value(json_object_get(g, "name")),
		    json_string_value(json_object_get(s, "name")));
		cr_expect_gt(ss, 1000000000000LL, "legacy rows hold ms");
		cr_expect_eq(json_integer_value(json_object_get(g,
		    "started_at")), ss / 1000);
		cr_expect_eq(json_integer_value(json_object_get(g,
		    "completed_at")), sc / 1000);
		cr_expect_eq(json_integer_value(json_object_get(g,
		    "duration_ms")), sc - ss);
	}
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(
	    got_calls, 8), "name")), "sandbox.import");
	json_decref(got_calls);
	json_decref(src_calls);
	walked_free(&w);
	walked_free(&ws);
	agentfs_close(src);
	agentfs_close(fs);
	json_decref(want);
	free(path);
}

Test(ops, import_then_ops_see_native_symlink)
{
	struct result *r;
	struct dec d;

	run_ok(import_job("legacy", "localsandbox-export.db"));
	r = run(path_job(OP_FS_STAT, "legacy", "/project/latest"));
	expect_ok(r);
	dec_init(&d, r);
	expect_str(&d.o, "type", "symlink");
	expect_str(&d.o, "target", "src/main.py");
	dec_free(&d);
	result_free(r);
	run_rejected(path_job(OP_FS_READ, "legacy", "/project/latest"),
	    "invalid");
	expect_content("legacy", "/project/notes é.txt",
	    "caf\xc3\xa9 notes: na\xc3\xafve r\xc3\xa9sum\xc3\xa9\n");
}

Test(ops, import_into_existing_sandbox_is_next_version)
{
	struct result *r;

	create("sb1");
	write_text("sb1", "/old", "x");
	r = run(import_job("sb1", "localsandbox-export.db"));
	expect_ok(r);
	cr_expect_eq(r->version, 3);
	result_free(r);
	run_rejected(path_job(OP_FS_READ, "sb1", "/old"), "not_found");
	run_ok(path_job(OP_FS_STAT, "sb1", "/project/src/main.py"));
}

Test(ops, import_garbage_is_bad_snapshot)
{
	struct job *j = mkjob(OP_SANDBOX_IMPORT, "sb1");
	size_t len;
	void *blob;

	j->snapshot = (uint8_t *)strdup("this is not a database at all");
	j->snapshot_len = strlen((char *)j->snapshot);
	run_rejected(j, "bad_snapshot");

	/* A real database cut in half. */
	blob = file_slurp("localsandbox-export.db", &len);
	j = mkjob(OP_SANDBOX_IMPORT, "sb1");
	j->snapshot = blob;
	j->snapshot_len = len / 2;
	run_rejected(j, "bad_snapshot");
	run_rejected(mkjob(OP_SANDBOX_INFO, "sb1"), "sandbox_not_found");
}

/* Flipped bytes anywhere: a clean answer, never a crash or internal. */
Test(ops, import_of_damaged_database_never_crashes)
{
	size_t len;
	uint8_t *orig = file_slurp("localsandbox-export.db", &len);
	unsigned seed = 12345;

	for (int i = 0; i < 150; i++) {
		struct job *j = mkjob(OP_SANDBOX_IMPORT, "fuzz");
		struct result *r;

		j->snapshot = malloc(len);
		memcpy(j->snapshot, orig, len);
		j->snapshot_len = len;
		for (int k = 0; k < 4; k++) {
			seed = seed * 1103515245u + 12345u;
			j->snapshot[(seed >> 8) % len] ^= (uint8_t)(1u +
			    (seed >> 24) % 255u);
		}
		r = run(j);
		cr_expect(r->status == ST_OK || r->status == ST_REJECTED,
		    "mutation %d: %s %s", i, res_status_name(r->status),
		    r->error_message ? r->error_message : "");
		result_free(r);
	}
	free(orig);
}

/*** import: the limits of a job on the sandbox ***/

/*
 * A fresh database (agentfs_new(), then /f with nbytes of data when
 * nbytes > 0) with sql run on it by raw SQLite: the codec has no back
 * door, so hostile uploads are made the way a tenant would make them.
 */
static void *
hostile_blob(size_t nbytes, const char *sql, size_t *len)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	sqlite3_int64 sz = 0;
	sqlite3 *db = NULL;
	unsigned char *img, *buf;
	char *msg = NULL;
	size_t blen = 0;
	void *blob = NULL, *out;

	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	if (nbytes > 0) {
		uint8_t *data = malloc(nbytes);

		cr_assert_not_null(data);
		for (size_t i = 0; i < nbytes; i++)
			data[i] = (uint8_t)(i * 131 + (i >> 9));
		cr_assert_eq(agentfs_write(fs, "/f", data, nbytes, 0644, &e),
		    0, "%s", e.msg);
		free(data);
	}
	cr_assert_eq(agentfs_to_blob(fs, &blob, &blen, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	buf = sqlite3_malloc64(blen);
	cr_assert_not_null(buf);
	memcpy(buf, blob, blen);
	free(blob);
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_deserialize(db, "main", buf, (sqlite3_int64)blen,
	    (sqlite3_int64)blen, SQLITE_DESERIALIZE_FREEONCLOSE |
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
	*len = (size_t)sz;
	return out;
}

/* An import of blob (taken) into sb under files and disk_bytes (0: none). */
static struct job *
import_blob_job(const char *sb, void *blob, size_t len, uint64_t files,
    uint64_t disk)
{
	struct job *j = mkjob(OP_SANDBOX_IMPORT, sb);

	j->snapshot = blob;
	j->snapshot_len = len;
	j->limits.files = files;
	j->limits.disk_bytes = disk;
	return j;
}

/* Runs j, expects code and needle in the message, and nothing stored. */
static void
expect_import_refused(struct job *j, const char *code, const char *needle)
{
	char sb[JOB_SANDBOX_ID_MAX + 1];
	struct result *r;

	snprintf(sb, sizeof(sb), "%s", j->sandbox);
	r = run(j);
	expect_rejected(r, code);
	cr_expect(strstr(r->error_message, needle) != NULL, "'%s' lacks '%s'",
	    r->error_message, needle);
	cr_expect_null(r->snapshot, "a refused import names no snapshot");
	result_free(r);
	run_rejected(mkjob(OP_SANDBOX_INFO, sb), "sandbox_not_found");
}

/* n empty files /e1.../en. */
#define SQL_ENTRIES(n) \
	"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n" \
	" WHERE i < " #n ")" \
	" INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)" \
	" SELECT 100 + i, 33188, 1, 0, 0, 0 FROM n;" \
	"INSERT INTO fs_dentry (name, parent_ino, ino)" \
	" SELECT 'e' || (ino - 100), 1, ino FROM fs_inode WHERE ino > 100;"

/*
 * A 68 KiB upload whose size column lies was stored as a 564 MiB snapshot:
 * now a size its chunks do not hold is refused before it is allocated,
 * within the disk limit or not, and nothing is stored.
 */
Test(ops, import_refuses_a_size_its_chunks_do_not_hold)
{
	size_t len;
	void *blob;

	blob = hostile_blob(5000, "UPDATE fs_inode SET size = 104857600"
	    " WHERE ino = 2", &len);
	expect_import_refused(import_blob_job("lie", blob, len, 0, 0),
	    "bad_snapshot", "'/f': inode 2: its size says 104857600 bytes, "
	    "its chunks hold 5000");
	/* 127 files claiming 4 MiB each, no chunk at all: over the disk
	 * limit as claimed, refused before a single file is read. */
	blob = hostile_blob(0, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL"
	    " SELECT i + 1 FROM n WHERE i < 127)"
	    " INSERT INTO fs_inode (ino, mode, nlink, size, atime, mtime, ctime)"
	    " SELECT 1 + i, 33188, 1, 4194304, 0, 0, 0 FROM n;"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " SELECT 'f' || ino, 1, ino FROM fs_inode WHERE ino > 1;", &len);
	cr_expect_leq(len, 68 * 1024, "%zu bytes", len);
	expect_import_refused(import_blob_job("lie", blob, len, 0, 256 << 20),
	    "too_large", "files of 532676608 bytes, more than the disk limit "
	    "268435456");
}

Test(ops, import_refuses_more_entries_than_the_files_limit)
{
	size_t len;
	void *blob = hostile_blob(0, SQL_ENTRIES(150), &len);

	expect_import_refused(import_blob_job("many", blob, len, 100, 0),
	    "too_large", "import: 150 entries, more than the files limit 100");
	/* Within it, the same upload imports. */
	blob = hostile_blob(0, SQL_ENTRIES(150), &len);
	run_ok(import_blob_job("many", blob, len, 151, 0));
}

/* Deeper than materialise goes (64), though the codec walks 256. */
Test(ops, import_refuses_a_tree_deeper_than_a_workspace)
{
	size_t len;
	void *blob = hostile_blob(0,
	    "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n"
	    " WHERE i < 71)"
	    " INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " SELECT i, 16877, 1, 0, 0, 0 FROM n;"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " SELECT 'd', ino - 1, ino FROM fs_inode WHERE ino > 1;", &len);

	expect_import_refused(import_blob_job("deep", blob, len, 0, 0),
	    "too_large", "65 directories deep, more than the depth limit 64");
}

Test(ops, import_refuses_a_name_longer_than_the_name_limit)
{
	size_t len;
	void *blob = hostile_blob(0,
	    "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
	    " VALUES (2, 33188, 1, 0, 0, 0);"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " VALUES (replace(hex(zeroblob(128)), '0', 'n'), 1, 2);", &len);

	expect_import_refused(import_blob_job("long", blob, len, 0, 0),
	    "too_large", "a name in / is 256 bytes, more than the name length "
	    "limit 255");
}

/* Real bytes over the disk limit: 3 files of 40,000 under 64 KiB. */
Test(ops, import_refuses_files_over_the_disk_limit)
{
	size_t len;
	void *blob = hostile_blob(40000,
	    "INSERT INTO fs_inode (ino, mode, nlink, size, atime, mtime, ctime)"
	    " SELECT 2 + i, mode, 1, size, 0, 0, 0 FROM fs_inode,"
	    " (SELECT 1 AS i UNION ALL SELECT 2) WHERE ino = 2;"
	    "INSERT INTO fs_data (ino, chunk_index, data) SELECT 2 + i,"
	    " chunk_index, data FROM fs_data, (SELECT 1 AS i UNION ALL"
	    " SELECT 2) WHERE ino = 2;"
	    "INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " VALUES ('g', 1, 3), ('h', 1, 4);", &len);

	expect_import_refused(import_blob_job("big", blob, len, 0, 65536),
	    "too_large", "files of 120000 bytes, more than the disk limit 65536");
	blob = hostile_blob(40000, "SELECT 1", &len);
	run_ok(import_blob_job("big", blob, len, 0, 65536));
	expect_content_len("big", "/f", 40000);
}

/*
 * Only plain AgentFS tables: an FTS5 table standing in for fs_dentry, a
 * view and a trigger are each refused naming the object.
 */
Test(ops, import_refuses_virtual_tables_views_and_triggers)
{
	static const char *const cases[][2] = {
		{ "DROP TABLE fs_dentry; CREATE VIRTUAL TABLE fs_dentry USING"
		  " fts5(name, parent_ino, ino);"
		  "INSERT INTO fs_dentry VALUES ('f', 1, 2)",
		  "table 'fs_dentry' is not a plain table (CREATE VIRTUAL "
		  "TABLE)" },
		{ "CREATE VIEW listing AS SELECT name FROM fs_dentry",
		  "holds a view 'listing'" },
		{ "CREATE TRIGGER wipe AFTER INSERT ON fs_inode BEGIN"
		  " DELETE FROM fs_data; END",
		  "holds a trigger 'wipe' (on 'fs_inode')" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		void *blob = hostile_blob(100, cases[i][0], &len);

		expect_import_refused(import_blob_job("obj", blob, len, 0, 0),
		    "bad_snapshot", cases[i][1]);
	}
}

/*
 * What the import writes follows what was uploaded: one file of 1 MiB
 * hard-linked 40 times would be 40 MiB, more than twice the upload and
 * 16 MiB (OPS_IMPORT_GROWTH, OPS_IMPORT_SLACK); SQLite's heap limit is
 * the worker's own again afterwards.
 */
Test(ops, import_writes_at_most_twice_the_upload)
{
	int64_t hard = sqlite3_hard_heap_limit64(-1);
	int64_t soft = sqlite3_soft_heap_limit64(-1);
	size_t len;
	void *blob = hostile_blob(1 << 20,
	    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
	    " WHERE i < 40)"
	    " INSERT INTO fs_dentry (name, parent_ino, ino)"
	    " SELECT 'link' || i, 1, 2 FROM n;", &len);

	expect_import_refused(import_blob_job("links", blob, len, 0, 0),
	    "too_large", "the import's bound (2 times the upload and 16 MiB)");
	cr_expect_eq(sqlite3_hard_heap_limit64(-1), hard);
	cr_expect_eq(sqlite3_soft_heap_limit64(-1), soft);
}

/* kv.set's bounds: a value over 1 MiB is refused as kv.set refuses it. */
Test(ops, import_refuses_a_kv_value_over_the_kv_limit)
{
	size_t len;
	void *blob = hostile_blob(0, "INSERT INTO kv_store (key, value)"
	    " VALUES ('big', '\"' || replace(hex(zeroblob(524300)), '0', 'x')"
	    " || '\"')", &len);

	expect_import_refused(import_blob_job("kv", blob, len, 0, 0),
	    "too_large", "kv key 'big': a value of more than 1048576 bytes");
}

/* The job's wall_ms bounds the import's time, a crafted schema or not. */
Test(ops, import_stops_at_the_wall_limit)
{
	size_t len;
	void *blob = hostile_blob(0, "DROP INDEX idx_fs_dentry_parent;"
	    SQL_ENTRIES(3000), &len);
	struct job *j = import_blob_job("slow", blob, len, 0, 0);

	j->limits.wall_ms = 1;
	expect_import_refused(j, "timeout", "stopped after the wall_ms limit "
	    "of 1 ms");
}

/* Limits that the upload fits change nothing: the export imports. */
Test(ops, import_within_the_limits_of_a_job_keeps_everything)
{
	struct job *j = import_job("fits", "localsandbox-export.db");

	j->limits.files = 9;
	j->limits.disk_bytes = 9000 + 152 + 50 + 29 + 27;
	j->limits.wall_ms = 10000;
	run_ok(j);
	expect_content_len("fits", "/project/blob.bin", 9000);
	j = import_job("tight", "localsandbox-export.db");
	j->limits.files = 8;
	run_rejected(j, "too_large");
}

/*** history / info / list / delete ***/

Test(ops, history_lists_versions_and_one_call_per_change)
{
	static const char *const names[] = { "sandbox.create", "fs.write",
	    "kv.set", "fs.delete" };
	const msgpack_object *vers, *calls;
	struct result *r;
	struct dec d;

	create("sb1");
	write_text("sb1", "/f", "x");
	run_ok(path_job(OP_FS_READ, "sb1", "/f"));
	run_ok(path_job(OP_FS_LIST, "sb1", "/"));
	kv_set("sb1", "k", "1");
	run_ok(path_job(OP_FS_DELETE, "sb1", "/f"));
	run_rejected(path_job(OP_FS_DELETE, "sb1", "/f"), "not_found");
	r = run(mkjob(OP_SANDBOX_HISTORY, "sb1"));
	expect_ok(r);
	cr_expect_eq(r->version, 4);
	dec_init(&d, r);
	vers = map_get(&d.o, "versions");
	calls = map_get(&d.o, "calls");
	cr_assert_not_null(vers);
	cr_assert_not_null(calls);
	cr_assert_eq(vers->via.array.size, 4);
	for (uint32_t i = 0; i < 4; i++) {
		cr_expect_eq(get_u64(&vers->via.array.ptr[i], "version"), 4 - i);
		cr_expect_gt(get_u64(&vers->via.array.ptr[i], "created_at"),
		    1000000000000ull);
	}
	expect_str(&vers->via.array.ptr[0], "snapshot", r->snapshot);
	cr_assert_eq(calls->via.array.size, 4);
	for (uint32_t i = 0; i < 4; i++) {
		const msgpack_object *c = &calls->via.array.ptr[i];

		expect_str(c, "name", names[i]);
		expect_str(c, "status", "success");
		expect_str(c, "result", "{\"status\":\"ok\"}");
		cr_expect_gt(get_u64(c, "started_at"), 1000000000000ull);
		cr_expect_eq(map_get(c, "error")->type, MSGPACK_OBJECT_NIL);
	}
	expect_str(&calls->via.array.ptr[1], "parameters",
	    "{\"mode\":420,\"path\":\"/f\",\"size\":1}");
	expect_str(&calls->via.array.ptr[2], "parameters",
	    "{\"key\":\"k\",\"value\":\"1\"}");
	dec_free(&d);
	result_free(r);
}

Test(ops, history_cuts_long_strings)
{
	const msgpack_object *calls, *p;
	struct result *r;
	struct job *j;
	struct dec d;
	char *big = malloc(10001);

	memset(big, 'a', 10000);
	big[0] = '"';
	big[9999] = '"';
	big[10000] = '\0';
	create("sb1");
	j = mkjob(OP_KV_SET, "sb1");
	j->key = strdup("big");
	j->value = big;
	run_ok(j);
	r = run(mkjob(OP_SANDBOX_HISTORY, "sb1"));
	expect_ok(r);
	dec_init(&d, r);
	calls = map_get(&d.o, "calls");
	p = map_get(&calls->via.array.ptr[1], "parameters");
	cr_assert_eq(p->type, MSGPACK_OBJECT_STR);
	cr_expect_lt(p->via.str.size, 4200);
	cr_expect_not_null(memmem(p->via.str.ptr, p->via.str.size,
	    "...(10000 bytes)", 16));
	dec_free(&d);
	result_free(r);
}

Test(ops, info_list_and_delete)
{
	struct err e = { 0 };
	struct result *r;
	void *blob = NULL;
	size_t len = 0;
	struct dec d;

	create("b-box");
	create("a-box");
	write_text("a-box", "/x", "xx");
	r = run(mkjob(OP_SANDBOX_INFO, "a-box"));
	expect_ok(r);
	cr_assert_eq(store_blob_get(st, sandbox_get("a-box").head, &blob, &len,
	    &e), 0);
	free(blob);
	dec_init(&d, r);
	expect_str(&d.o, "sandbox", "a-box");
	cr_expect_eq(get_u64(&d.o, "version"), 2);
	cr_expect_eq(get_u64(&d.o, "size"), len);
	cr_expect_geq(get_u64(&d.o, "updated_at"), get_u64(&d.o,
	    "created_at"));
	cr_expect_eq(map_get(&d.o, "labels")->via.map.size, 0);
	dec_free(&d);
	result_free(r);

	r = run(mkjob(OP_SANDBOX_LIST, NULL));
	expect_ok(r);
	cr_expect_null(r->sandbox);
	dec_init(&d, r);
	cr_assert_eq(d.o.via.array.size, 2);
	expect_str(&d.o.via.array.ptr[0], "sandbox", "a-box");
	expect_str(&d.o.via.array.ptr[1], "sandbox", "b-box");
	cr_expect_null(map_get(&d.o.via.array.ptr[0], "size"));
	dec_free(&d);
	result_free(r);

	r = run(mkjob(OP_SANDBOX_DELETE, "a-box"));
	expect_ok(r);
	cr_expect_str_eq(r->sandbox, "a-box");
	dec_init(&d, r);
	cr_expect_eq(d.o.type, MSGPACK_OBJECT_NIL);
	dec_free(&d);
	result_free(r);
	run_rejected(mkjob(OP_SANDBOX_INFO, "a-box"), "sandbox_not_found");
}

/*** Tenants and misuse ***/

Test(ops, tenants_are_isolated)
{
	struct result *r;
	struct job *j;
	struct dec d;

	create("shared");
	write_text("shared", "/secret", "tenant a");
	tenant = "other";
	run_rejected(path_job(OP_FS_READ, "shared", "/secret"),
	    "sandbox_not_found");
	run_rejected(mkjob(OP_SANDBOX_EXPORT, "shared"), "sandbox_not_found");
	run_rejected(mkjob(OP_SANDBOX_HISTORY, "shared"), "sandbox_not_found");
	j = mkjob(OP_SANDBOX_FORK, "shared");
	j->to = strdup("mine");
	run_rejected(j, "sandbox_not_found");
	r = run(mkjob(OP_SANDBOX_LIST, NULL));
	expect_ok(r);
	dec_init(&d, r);
	cr_expect_eq(d.o.via.array.size, 0);
	dec_free(&d);
	result_free(r);
	/* The same id is a different sandbox. */
	create("shared");
	write_text("shared", "/secret", "tenant b");
	expect_content("shared", "/secret", "tenant b");
	tenant = "acme";
	expect_content("shared", "/secret", "tenant a");
}

Test(ops, missing_tenant_or_sandbox)
{
	struct job *j = mkjob(OP_FS_LIST, "sb1");
	struct result *r;

	free(j->tenant);
	j->tenant = NULL;
	r = run(j);
	cr_expect_eq(r->status, ST_INTERNAL);
	result_free(r);
	run_rejected(path_job(OP_FS_READ, NULL, "/a"), "invalid");
	r = result_new("x");
	j = mkjob(OP_SH, "sb1");
	cr_expect_eq(ops_run(st, j, r), -EINVAL);
	cr_expect_eq(r->status, ST_INTERNAL);
	job_free(j);
	result_free(r);
}
