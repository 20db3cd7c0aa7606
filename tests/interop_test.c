/*
 * interop_test.c - sandq's AgentFS codec against the format's other tools.
 *
 * A snapshot is only portable if programs that are not sandq read it the
 * same way. Three readers and writers are checked here:
 *   - agentfs-sdk (Turso's Node package, pinned in tests/interop/
 *     package.json): read.mjs prints what the SDK sees in a blob the codec
 *     wrote; write.mjs builds a database with the SDK and prints what it put
 *     there, which the codec must read back (also after re-encoding it, as
 *     sandbox.import does);
 *   - the sqlite3 command-line tool: a blob is an ordinary SQLite file with
 *     the 0.4 tables and columns, its chunks BLOBs, and no -wal beside it.
 * Both sides are described in read.mjs's JSON shape ({files, kv, calls})
 * and compared with json_equal(), entry by entry, so a mismatch names the
 * path, key or call.
 *
 * The tools are required: when node, the SDK or sqlite3 is missing a test
 * FAILS saying what to install (deploy/install-deps.sh installs nodejs, npm
 * and sqlite3; deploy/install-node-deps.sh installs the SDK into
 * tests/interop), unless SANDQ_SKIP_INTEROP=1, when it is skipped with a
 * loud line.
 * SANDQ_NODE_MODULES names the node_modules folder (default
 * tests/interop/node_modules); tests run from the repository root, like
 * the other suites that find tests/data.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"

TestSuite(interop, .timeout = 120);

#define INTEROP_DIR "tests/interop"

/*** Prerequisites ***/

static const char *
node_modules_dir(void)
{
	const char *d = getenv("SANDQ_NODE_MODULES");

	return d != NULL && *d != '\0' ? d : INTEROP_DIR "/node_modules";
}

/* True when cmd is an executable file in some PATH directory. */
static bool
in_path(const char *cmd)
{
	const char *path = getenv("PATH");
	char *copy, *dir, *save = NULL, *full = NULL;
	bool found = false;

	if (path == NULL)
		path = "/usr/local/bin:/usr/bin:/bin";
	copy = strdup(path);
	cr_assert_not_null(copy);
	for (dir = strtok_r(copy, ":", &save); dir != NULL && !found;
	    dir = strtok_r(NULL, ":", &save)) {
		cr_assert(asprintf(&full, "%s/%s", *dir ? dir : ".", cmd) > 0);
		found = access(full, X_OK) == 0;
		free(full);
	}
	free(copy);
	return found;
}

/*
 * Fails the test naming what is missing and how to install it, or skips
 * it loudly under SANDQ_SKIP_INTEROP=1. Never skips silently: a machine
 * without the tools would otherwise pass without testing anything.
 */
static void
require_tools(bool node, bool sqlite)
{
	const char *skip = getenv("SANDQ_SKIP_INTEROP");
	char *pkg = NULL;
	char why[1024] = "";

	cr_assert(asprintf(&pkg, "%s/agentfs-sdk/package.json",
	    node_modules_dir()) > 0);
	if (node && !in_path("node"))
		snprintf(why, sizeof(why), "the node command is not in PATH: "
		    "install Debian's nodejs and npm (as root: sh "
		    "deploy/install-deps.sh, or apt-get install nodejs npm), "
		    "then sh deploy/install-node-deps.sh");
	else if (node && access(pkg, R_OK) != 0)
		snprintf(why, sizeof(why), "agentfs-sdk is not installed: %s "
		    "is missing; run sh deploy/install-node-deps.sh (npm "
		    "install in " INTEROP_DIR ") or set SANDQ_NODE_MODULES to a "
		    "node_modules holding the version pinned in "
		    INTEROP_DIR "/package.json", pkg);
	else if (sqlite && !in_path("sqlite3"))
		snprintf(why, sizeof(why), "the sqlite3 command-line tool is "
		    "not in PATH: install Debian's sqlite3 (as root: sh "
		    "deploy/install-deps.sh, or apt-get install sqlite3)");
	free(pkg);
	if (why[0] == '\0')
		return;
	if (skip != NULL && strcmp(skip, "1") == 0) {
		fprintf(stderr, "\n!!!!!!!! interop: SKIPPED because "
		    "SANDQ_SKIP_INTEROP=1: %s !!!!!!!!\n\n", why);
		cr_skip_test("SANDQ_SKIP_INTEROP=1: %s", why);
	}
	cr_assert_fail("%s (or set SANDQ_SKIP_INTEROP=1 to skip the interop "
	    "tests)", why);
}

/*** Files and processes ***/

/* This test's folder; made after require_tools(), as a skipped test
 * does not run its .fini. */
static char tmpdir[64];

static void
tmp_setup(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/sandq-interop-XXXXXX",
	    base != NULL && strlen(base) < 32 ? base : "/tmp");
	cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

static void
tmp_teardown(void)
{
	DIR *d = tmpdir[0] != '\0' ? opendir(tmpdir) : NULL;
	struct dirent *de;
	char *p = NULL;

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (asprintf(&p, "%s/%s", tmpdir, de->d_name) > 0) {
			unlink(p);
			free(p);
		}
	}
	closedir(d);
	rmdir(tmpdir);
}

/* The path of name in this test's folder; caller frees. */
static char *
tmp_path(const char *name)
{
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s", tmpdir, name) > 0);
	return p;
}

static void *
file_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0, got;

	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	do {
		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap + 1);
			cr_assert_not_null(buf);
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	cr_assert(!ferror(f), "read %s", path);
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

static void
file_put(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "create %s: %s", path, strerror(errno));
	cr_assert_eq(fwrite(data, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

static bool
file_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/*
 * Runs argv (looked up in PATH) with stdout and stderr going to files in
 * the test folder, waits, and returns its exit status (128 + signal when
 * killed). *out and *errout are the NUL-terminated output (caller frees).
 */
static int
run_tool(char *const argv[], char **out, char **errout)
{
	char *opath = tmp_path("run.stdout"), *epath = tmp_path("run.stderr");
	int status = 0;
	size_t len;
	pid_t pid;

	pid = fork();
	cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
	if (pid == 0) {
		int ofd = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int efd = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (ofd < 0 || efd < 0 || dup2(ofd, 1) < 0 ||
		    dup2(efd, 2) < 0)
			_exit(126);
		execvp(argv[0], argv);
		dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		cr_assert_eq(errno, EINTR, "waitpid: %s", strerror(errno));
	*out = file_slurp(opath, &len);
	*errout = file_slurp(epath, &len);
	unlink(opath);
	unlink(epath);
	free(opath);
	free(epath);
	return WIFEXITED(status) ? WEXITSTATUS(status) :
	    128 + WTERMSIG(status);
}

/* Runs `node tests/interop/SCRIPT DBFILE` and returns its JSON output. */
static json_t *
run_node(const char *script, const char *dbfile)
{
	char *js = NULL, *db = strdup(dbfile), *out = NULL, *errout = NULL;
	char node[] = "node";
	json_error_t jerr;
	json_t *j;
	int rc;

	cr_assert_not_null(db);
	cr_assert(asprintf(&js, INTEROP_DIR "/%s", script) > 0);
	rc = run_tool((char *const[]){ node, js, db, NULL }, &out, &errout);
	cr_assert_eq(rc, 0, "node %s %s exited %d:\n%s", js, dbfile, rc,
	    errout);
	j = json_loads(out, 0, &jerr);
	cr_assert_not_null(j, "node %s printed no JSON (%s):\n%.2000s\n%s",
	    js, jerr.text, out, errout);
	free(js);
	free(db);
	free(out);
	free(errout);
	return j;
}

/*** JSON in read.mjs's shape ***/

static char *
b64(const void *data, size_t len)
{
	char *s = malloc(4 * ((len + 2) / 3) + 1);

	cr_assert_not_null(s);
	EVP_EncodeBlock((unsigned char *)s, data, (int)len);
	return s;
}

static json_t *
json_text_value(const char *text)
{
	json_error_t jerr;
	json_t *v;

	if (text == NULL)
		return json_null();
	v = json_loads(text, JSON_DECODE_ANY, &jerr);
	cr_assert_not_null(v, "not JSON (%s): %s", jerr.text, text);
	return v;
}

static json_t *
file_json(const char *type, uint32_t mode, uint64_t size)
{
	return json_pack("{s:s,s:I,s:I}", "type", type, "mode",
	    (json_int_t)mode, "size", (json_int_t)size);
}

struct codec_view {
	struct agentfs *fs;
	json_t *files;
	json_t *kv;
	json_t *calls;
};

static int
view_entry(const struct agentfs_entry *ent, void *arg)
{
	struct codec_view *v = arg;
	struct err e = { 0 };
	json_t *f = file_json(agentfs_type_name(ent->mode), ent->mode,
	    ent->size);
	void *data = NULL;
	size_t len = 0;
	char *s;

	json_object_set_new(f, "mtime", json_integer(ent->mtime));
	if (ent->kind == AGENTFS_FILE) {
		cr_assert_eq(agentfs_read(v->fs, ent->path, &data, &len, &e),
		    0, "read %s: %s", ent->path, e.msg);
		s = b64(data, len);
		json_object_set_new(f, "content_b64", json_string(s));
		free(s);
		free(data);
	} else if (ent->kind == AGENTFS_SYMLINK) {
		cr_expect_eq(ent->form, AGENTFS_LINK_NATIVE, "%s", ent->path);
		json_object_set_new(f, "target", json_string(ent->target));
	}
	json_object_set_new(v->files, ent->path, f);
	return 0;
}

static int
view_key(const char *key, void *arg)
{
	struct codec_view *v = arg;
	struct err e = { 0 };
	char *value = NULL;

	cr_assert_eq(agentfs_kv_get(v->fs, key, &value, &e), 0, "%s", e.msg);
	json_object_set_new(v->kv, key, json_text_value(value));
	free(value);
	return 0;
}

static int
view_call(const struct agentfs_tool_call *tc, void *arg)
{
	struct codec_view *v = arg;

	json_array_append_new(v->calls, json_pack("{s:I,s:s,s:o,s:o,s:o,s:s,"
	    "s:I,s:I,s:I}", "id", (json_int_t)tc->id, "name", tc->name,
	    "parameters", json_text_value(tc->parameters),
	    "result", json_text_value(tc->result),
	    "error", tc->error ? json_string(tc->error) : json_null(),
	    "status", tc->status, "started_at", (json_int_t)tc->started_at,
	    "completed_at", (json_int_t)tc->completed_at,
	    "duration_ms", (json_int_t)tc->duration_ms));
	return 0;
}

/* What the codec sees in fs, as read.mjs would print it. */
static json_t *
codec_json(struct agentfs *fs)
{
	struct codec_view v = { .fs = fs, .files = json_object(),
	    .kv = json_object(), .calls = json_array() };
	struct err e = { 0 };

	cr_assert_eq(agentfs_walk(fs, view_entry, &v, &e), 0, "walk: %s",
	    e.msg);
	cr_assert_eq(agentfs_kv_keys(fs, "", view_key, &v, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(agentfs_tool_call_each(fs, view_call, &v, &e), 0, "%s",
	    e.msg);
	return json_pack("{s:I,s:o,s:o,s:o}", "chunk_size",
	    (json_int_t)agentfs_chunk_size(fs), "files", v.files, "kv", v.kv,
	    "calls", v.calls);
}

/*
 * Checks every entry's mtime lies in [t0, t1] (the clock when the
 * database was written) and removes it, so the rest compares exactly.
 */
static void
strip_mtimes(json_t *snap, json_int_t t0, json_int_t t1)
{
	json_t *files = json_object_get(snap, "files"), *f;
	const char *path;

	cr_assert(json_is_object(files));
	json_object_foreach(files, path, f) {
		json_t *m = json_object_get(f, "mtime");

		cr_expect(json_is_integer(m), "%s: no mtime", path);
		cr_expect(json_integer_value(m) >= t0 &&
		    json_integer_value(m) <= t1, "%s: mtime %lld outside "
		    "[%lld, %lld]", path, (long long)json_integer_value(m),
		    (long long)t0, (long long)t1);
		json_object_del(f, "mtime");
	}
}

static void
expect_same(const char *what, const char *name, json_t *got, json_t *want)
{
	char *gs, *ws;

	if (json_equal(got, want))
		return;
	gs = got ? json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT |
	    JSON_ENCODE_ANY) : NULL;
	ws = want ? json_dumps(want, JSON_SORT_KEYS | JSON_COMPACT |
	    JSON_ENCODE_ANY) : NULL;
	cr_expect_fail("%s %s differs:\n got  %.600s\n want %.600s", what,
	    name, gs ? gs : "(missing)", ws ? ws : "(missing)");
	free(gs);
	free(ws);
}

/* Compares two objects key by key, so a failure names the key. */
static void
expect_same_members(const char *what, json_t *got, json_t *want)
{
	const char *key;
	json_t *v;

	cr_assert(json_is_object(got), "%s: not an object", what);
	cr_assert(json_is_object(want), "%s: not an object", what);
	json_object_foreach(want, key, v)
		expect_same(what, key, json_object_get(got, key), v);
	json_object_foreach(got, key, v)
		if (json_object_get(want, key) == NULL)
			expect_same(what, key, v, NULL);
}

/* Compares files, kv and calls (and chunk_size) of two snapshots. */
static void
expect_same_snapshot(json_t *got, json_t *want)
{
	json_t *gc = json_object_get(got, "calls");
	json_t *wc = json_object_get(want, "calls");
	char name[32];

	expect_same("fs_config", "chunk_size",
	    json_object_get(got, "chunk_size"),
	    json_object_get(want, "chunk_size"));
	expect_same_members("file", json_object_get(got, "files"),
	    json_object_get(want, "files"));
	expect_same_members("kv key", json_object_get(got, "kv"),
	    json_object_get(want, "kv"));
	cr_assert(json_is_array(gc) && json_is_array(wc));
	cr_expect_eq(json_array_size(gc), json_array_size(wc),
	    "%zu tool calls, want %zu", json_array_size(gc),
	    json_array_size(wc));
	for (size_t i = 0; i < json_array_size(wc); i++) {
		snprintf(name, sizeof(name), "#%zu", i + 1);
		expect_same_members(name, json_array_get(gc, i),
		    json_array_get(wc, i));
	}
}

/*** The snapshot sandq writes ***/

static uint8_t bytes_bin[768];	/* every byte value, three times */
static uint8_t big_bin[10000];	/* 2 full chunks and 1808 bytes */
static uint8_t exact_bin[8192];	/* exactly 2 chunks */

struct fixture_file {
	const char *path;
	const void *data;
	size_t len;
	mode_t mode;
};

static const char *const fixture_dirs[][2] = {
	{ "/project", "0755" }, { "/project/src", "0750" },
	{ "/project/empty-dir", "0700" }, { "/data", "0755" },
};

static const struct fixture_file fixture_files[] = {
	{ "/project/src/main.py", "print('hello')\n", 15, 0644 },
	{ "/project/run.sh", "#!/bin/sh\necho hi\n", 18, 0755 },
	{ "/project/notes \xc3\xa9.txt", "caf\xc3\xa9 notes\n", 12, 0600 },
	{ "/project/empty.txt", "", 0, 0644 },
	{ "/data/bytes.bin", bytes_bin, sizeof(bytes_bin), 0644 },
	{ "/data/big.bin", big_bin, sizeof(big_bin), 0640 },
	{ "/data/exact.bin", exact_bin, sizeof(exact_bin), 0644 },
};

static const char *const fixture_links[][2] = {
	{ "/project/latest", "src/main.py" },
	{ "/dangling", "/nowhere/at/all" },
	{ "/data/\xc3\xbcn\xc3\xaf", "../project/notes \xc3\xa9.txt" },
};

/* Key and value (JSON text): every JSON type, non-ASCII, LIKE wildcards. */
static const char *const fixture_kv[][2] = {
	{ "session", "\"abc\"" },
	{ "step", "3" },
	{ "ratio", "0.5" },
	{ "flag", "false" },
	{ "nothing", "null" },
	{ "list", "[1,\"two\",{\"three\":3}]" },
	{ "config", "{\"nested\":{\"a\":[1,2]},\"name\":\"caf\xc3\xa9\"}" },
	{ "unicode \xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", "\"\xc3\xa9\"" },
	{ "100%_done", "true" },
};

struct fixture_call {
	const char *name, *params, *result, *error, *status;
	int64_t started_ms, completed_ms;
};

static const struct fixture_call fixture_calls[] = {
	{ "sh", "{\"script\":\"ls -la\"}",
	    "{\"status\":\"ok\",\"exit_code\":0,\"stdout\":\"x\\n\"}", NULL,
	    "success", 1700000000123, 1700000001623 },
	{ "python", "{\"code\":\"1/0\"}", NULL,
	    "ZeroDivisionError: division by zero", "error", 1700000010000,
	    1700000011000 },
	{ "kv.get", NULL, NULL, NULL, "pending", 1700000020000,
	    1700000020000 },
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void
fixture_fill(void)
{
	for (size_t i = 0; i < sizeof(bytes_bin); i++)
		bytes_bin[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(big_bin); i++)
		big_bin[i] = (uint8_t)((i * 31 + 7) % 251);
	memset(exact_bin, 0x5a, sizeof(exact_bin));
}

/* Builds the fixture with the codec; the caller closes the handle. */
static struct agentfs *
fixture_build(void)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };

	fixture_fill();
	cr_assert_eq(agentfs_new(&fs, &e), 0, "%s", e.msg);
	for (size_t i = 0; i < NELEM(fixture_dirs); i++)
		cr_assert_eq(agentfs_mkdir(fs, fixture_dirs[i][0],
		    (mode_t)strtol(fixture_dirs[i][1], NULL, 8), &e), 0,
		    "%s", e.msg);
	for (size_t i = 0; i < NELEM(fixture_files); i++)
		cr_assert_eq(agentfs_write(fs, fixture_files[i].path,
		    fixture_files[i].data, fixture_files[i].len,
		    fixture_files[i].mode, &e), 0, "%s", e.msg);
	for (size_t i = 0; i < NELEM(fixture_links); i++)
		cr_assert_eq(agentfs_symlink(fs, fixture_links[i][1],
		    fixture_links[i][0], &e), 0, "%s", e.msg);
	for (size_t i = 0; i < NELEM(fixture_kv); i++)
		cr_assert_eq(agentfs_kv_set(fs, fixture_kv[i][0],
		    fixture_kv[i][1], &e), 0, "%s", e.msg);
	for (size_t i = 0; i < NELEM(fixture_calls); i++) {
		const struct fixture_call *c = &fixture_calls[i];

		cr_assert_eq(agentfs_tool_call_add(fs, c->name, c->params,
		    c->result, c->error, c->status, c->started_ms,
		    c->completed_ms, &e), 0, "%s", e.msg);
	}
	return fs;
}

/*
 * The fixture as read.mjs should print it, from the tables above and not
 * from the codec, so both readers are held to what was written.
 */
static json_t *
fixture_json(void)
{
	json_t *files = json_object(), *kv = json_object();
	json_t *calls = json_array(), *f;
	char *s;

	for (size_t i = 0; i < NELEM(fixture_dirs); i++)
		json_object_set_new(files, fixture_dirs[i][0], file_json("dir",
		    S_IFDIR | (uint32_t)strtol(fixture_dirs[i][1], NULL, 8),
		    0));
	for (size_t i = 0; i < NELEM(fixture_files); i++) {
		f = file_json("file", S_IFREG | fixture_files[i].mode,
		    fixture_files[i].len);
		s = b64(fixture_files[i].data, fixture_files[i].len);
		json_object_set_new(f, "content_b64", json_string(s));
		free(s);
		json_object_set_new(files, fixture_files[i].path, f);
	}
	for (size_t i = 0; i < NELEM(fixture_links); i++) {
		f = file_json("symlink", S_IFLNK | 0777,
		    strlen(fixture_links[i][1]));
		json_object_set_new(f, "target",
		    json_string(fixture_links[i][1]));
		json_object_set_new(files, fixture_links[i][0], f);
	}
	for (size_t i = 0; i < NELEM(fixture_kv); i++)
		json_object_set_new(kv, fixture_kv[i][0],
		    json_text_value(fixture_kv[i][1]));
	for (size_t i = 0; i < NELEM(fixture_calls); i++) {
		const struct fixture_call *c = &fixture_calls[i];

		/* 0.4 units: seconds, and the exact duration in ms. */
		json_array_append_new(calls, json_pack("{s:I,s:s,s:o,s:o,s:o,"
		    "s:s,s:I,s:I,s:I}", "id", (json_int_t)(i + 1), "name",
		    c->name, "parameters", json_text_value(c->params),
		    "result", json_text_value(c->result), "error",
		    c->error ? json_string(c->error) : json_null(),
		    "status", c->status,
		    "started_at", (json_int_t)(c->started_ms / 1000),
		    "completed_at", (json_int_t)(c->completed_ms / 1000),
		    "duration_ms",
		    (json_int_t)(c->completed_ms - c->started_ms)));
	}
	return json_pack("{s:i,s:o,s:o,s:o}", "chunk_size", 4096, "files",
	    files, "kv", kv, "calls", calls);
}

static json_int_t
real_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (json_int_t)ts.tv_sec;
}

/* Builds the fixture, writes its blob to tmpdir/name; returns the blob. */
static void *
fixture_blob_file(const char *name, size_t *len, json_int_t *t0,
    json_int_t *t1)
{
	struct agentfs *fs;
	struct err e = { 0 };
	char *path = tmp_path(name);
	void *blob = NULL;

	/* The codec stamps CLOCK_REALTIME; time() may read a coarser clock a
	 * tick behind it, so the window is taken from the same clock. */
	*t0 = real_seconds();
	fs = fixture_build();
	*t1 = real_seconds();
	cr_assert_eq(agentfs_to_blob(fs, &blob, len, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	file_put(path, blob, *len);
	free(path);
	return blob;
}

/*** agentfs-sdk reads what sandq writes ***/

Test(interop, sdk_reads_codec_snapshot, .fini = tmp_teardown)
{
	json_int_t t0, t1;
	json_t *got, *want;
	char *path;
	size_t len;
	void *blob;

	require_tools(true, false);
	tmp_setup();
	blob = fixture_blob_file("codec.db", &len, &t0, &t1);
	path = tmp_path("codec.db");
	/* read.mjs writes to the file it opens (see there): a copy. */
	got = run_node("read.mjs", path);
	strip_mtimes(got, t0, t1);
	want = fixture_json();
	expect_same_snapshot(got, want);
	json_decref(got);
	json_decref(want);
	free(path);
	free(blob);
}

Test(interop, codec_reads_its_own_snapshot_like_the_sdk, .fini = tmp_teardown)
{
	/* The reference for the test above, without node: the codec's own
	 * view of the fixture equals the same expectation. */
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	json_int_t t0, t1;
	json_t *got, *want;
	size_t len;
	void *blob;

	tmp_setup();
	blob = fixture_blob_file("codec.db", &len, &t0, &t1);
	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	got = codec_json(fs);
	strip_mtimes(got, t0, t1);
	want = fixture_json();
	expect_same_snapshot(got, want);
	json_decref(got);
	json_decref(want);
	agentfs_close(fs);
	free(blob);
}

/*** sandq reads what agentfs-sdk writes ***/

/* Runs write.mjs into tmpdir/name; returns its JSON and the file's bytes. */
static json_t *
sdk_database(const char *name, void **blob, size_t *len)
{
	char *path = tmp_path(name);
	json_t *want = run_node("write.mjs", path);

	*blob = file_slurp(path, len);
	cr_assert_gt(*len, 0);
	free(path);
	return want;
}

/*
 * The codec's struct agentfs_tool_call reads a NULL completed_at or
 * duration_ms as 0 (agentfs.h): expect 0 where the SDK left NULL (pending).
 */
static void
nulls_read_as_zero(json_t *snap)
{
	size_t i;
	json_t *c;

	json_array_foreach(json_object_get(snap, "calls"), i, c) {
		if (json_is_null(json_object_get(c, "completed_at")))
			json_object_set_new(c, "completed_at", json_integer(0));
		if (json_is_null(json_object_get(c, "duration_ms")))
			json_object_set_new(c, "duration_ms", json_integer(0));
	}
}

static void
time_bracket(json_t *want, json_int_t *t0, json_int_t *t1)
{
	json_t *t = json_object_get(want, "time");

	cr_assert(json_is_array(t) && json_array_size(t) == 2);
	*t0 = json_integer_value(json_array_get(t, 0));
	*t1 = json_integer_value(json_array_get(t, 1));
	json_object_del(want, "time");
}

Test(interop, codec_reads_sdk_database, .fini = tmp_teardown)
{
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	json_int_t t0, t1;
	json_t *got, *want;
	size_t len;
	void *blob;

	require_tools(true, false);
	tmp_setup();
	want = sdk_database("sdk.db", &blob, &len);
	time_bracket(want, &t0, &t1);
	json_object_del(want, "sdk");
	nulls_read_as_zero(want);
	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0,
	    "agentfs_open_blob of the SDK's database: %s", e.msg);
	cr_expect_not(agentfs_is_legacy(fs), "an SDK 0.6 database is 0.4");
	got = codec_json(fs);
	strip_mtimes(got, t0, t1);
	expect_same_snapshot(got, want);
	json_decref(got);
	json_decref(want);
	agentfs_close(fs);
	free(blob);
}

Test(interop, sdk_reads_reencoded_sdk_database, .fini = tmp_teardown)
{
	/* sandbox.import re-encodes what it is given: the SDK must still
	 * see everything it wrote, NULLs included, in the new blob. */
	struct agentfs *fs = NULL;
	struct err e = { 0 };
	json_int_t t0, t1;
	json_t *got, *want;
	void *blob, *out = NULL;
	size_t len, outlen;
	char *path;

	require_tools(true, false);
	tmp_setup();
	want = sdk_database("sdk.db", &blob, &len);
	time_bracket(want, &t0, &t1);
	cr_assert_eq(agentfs_open_blob(blob, len, &fs, &e), 0, "%s", e.msg);
	cr_assert_eq(agentfs_to_blob(fs, &out, &outlen, &e), 0, "%s", e.msg);
	agentfs_close(fs);
	path = tmp_path("reencoded.db");
	file_put(path, out, outlen);
	got = run_node("read.mjs", path);
	strip_mtimes(got, t0, t1);
	expect_same_snapshot(got, want);
	json_decref(got);
	json_decref(want);
	free(path);
	free(out);
	free(blob);
}

/*** The sqlite3 command-line tool ***/

struct sql_case {
	const char *sql;
	const char *want;	/* the tool's output, rows joined by '\n' */
};

/* Columns exactly as the 0.4 format (and agentfs-sdk 0.6) define them. */
static const struct sql_case schema_cases[] = {
	{ "SELECT group_concat(name, ',') FROM pragma_table_info('fs_config')",
	  "key,value" },
	{ "SELECT group_concat(name, ',') FROM pragma_table_info('fs_inode')",
	  "ino,mode,nlink,uid,gid,size,atime,mtime,ctime,rdev,atime_nsec,"
	  "mtime_nsec,ctime_nsec" },
	{ "SELECT group_concat(name, ',') FROM pragma_table_info('fs_dentry')",
	  "id,name,parent_ino,ino" },
	{ "SELECT group_concat(name, ',') FROM pragma_table_info('fs_data')",
	  "ino,chunk_index,data" },
	{ "SELECT group_concat(name, ',') FROM "
	  "pragma_table_info('fs_symlink')", "ino,target" },
	{ "SELECT group_concat(name, ',') FROM pragma_table_info('kv_store')",
	  "key,value,created_at,updated_at" },
	{ "SELECT group_concat(name, ',') FROM "
	  "pragma_table_info('tool_calls')",
	  "id,name,parameters,result,error,status,started_at,completed_at,"
	  "duration_ms" },
};

/*
 * The fixture's rows. Inodes are numbered in creation order: 1 the root,
 * 2-5 the directories, 6-12 the files, 13-15 the symlinks.
 */
static const struct sql_case row_cases[] = {
	{ "PRAGMA integrity_check", "ok" },
	{ "PRAGMA journal_mode", "delete" },
	{ "SELECT key, value FROM fs_config ORDER BY key",
	  "chunk_size|4096\nschema_version|0.4" },
	{ "SELECT ino, printf('%o', mode), nlink, size FROM fs_inode "
	  "ORDER BY ino",
	  "1|40755|1|0\n2|40755|1|0\n3|40750|1|0\n4|40700|1|0\n5|40755|1|0\n"
	  "6|100644|1|15\n7|100755|1|18\n8|100600|1|12\n9|100644|1|0\n"
	  "10|100644|1|768\n11|100640|1|10000\n12|100644|1|8192\n"
	  "13|120777|1|11\n14|120777|1|15\n15|120777|1|23" },
	{ "SELECT count(*) FROM fs_inode WHERE rdev != 0 OR uid != 0 OR "
	  "gid != 0 OR typeof(atime_nsec) != 'integer' OR "
	  "typeof(mtime) != 'integer'", "0" },
	{ "SELECT parent_ino, name, ino FROM fs_dentry ORDER BY parent_ino, "
	  "name",
	  "1|dangling|14\n1|data|5\n1|project|2\n"
	  "2|empty-dir|4\n2|empty.txt|9\n2|latest|13\n"
	  "2|notes \xc3\xa9.txt|8\n2|run.sh|7\n2|src|3\n"
	  "3|main.py|6\n"
	  "5|big.bin|11\n5|bytes.bin|10\n5|exact.bin|12\n"
	  "5|\xc3\xbcn\xc3\xaf|15" },
	{ "SELECT ino, chunk_index, typeof(data), length(data) FROM fs_data "
	  "ORDER BY ino, chunk_index",
	  "6|0|blob|15\n7|0|blob|18\n8|0|blob|12\n10|0|blob|768\n"
	  "11|0|blob|4096\n11|1|blob|4096\n11|2|blob|1808\n"
	  "12|0|blob|4096\n12|1|blob|4096" },
	{ "SELECT CAST(data AS TEXT) FROM fs_data WHERE ino = 6",
	  "print('hello')\n" },
	{ "SELECT hex(substr(data, 1, 4)) || hex(substr(data, 766)) FROM "
	  "fs_data WHERE ino = 10", "00010203FDFEFF" },
	{ "SELECT ino, target FROM fs_symlink ORDER BY ino",
	  "13|src/main.py\n14|/nowhere/at/all\n"
	  "15|../project/notes \xc3\xa9.txt" },
	{ "SELECT key, value, typeof(created_at), typeof(updated_at) FROM "
	  "kv_store WHERE key IN ('step', 'config') ORDER BY key",
	  "config|{\"nested\":{\"a\":[1,2]},\"name\":\"caf\xc3\xa9\"}|integer|"
	  "integer\nstep|3|integer|integer" },
	{ "SELECT count(*), sum(json_valid(value)) FROM kv_store", "9|9" },
	{ "SELECT id, name, ifnull(parameters, 'NULL'), ifnull(result, "
	  "'NULL'), ifnull(error, 'NULL'), status, started_at, completed_at, "
	  "duration_ms FROM tool_calls ORDER BY id",
	  "1|sh|{\"script\":\"ls -la\"}|{\"status\":\"ok\",\"exit_code\":0,"
	  "\"stdout\":\"x\\n\"}|NULL|success|1700000000|1700000001|1500\n"
	  "2|python|{\"code\":\"1/0\"}|NULL|ZeroDivisionError: division by "
	  "zero|error|1700000010|1700000011|1000\n"
	  "3|kv.get|NULL|NULL|NULL|pending|1700000020|1700000020|0" },
};

/* Runs sqlite3 -batch on dbfile and expects the output of each case. */
static void
expect_sqlite3(const char *dbfile, const struct sql_case *cases, size_t n)
{
	char tool[] = "sqlite3", batch[] = "-batch";
	char *db = strdup(dbfile);

	cr_assert_not_null(db);
	for (size_t i = 0; i < n; i++) {
		char *sql = strdup(cases[i].sql), *out = NULL, *errout = NULL;
		size_t l;
		int rc;

		cr_assert_not_null(sql);
		rc = run_tool((char *const[]){ tool, batch, db, sql, NULL },
		    &out, &errout);
		cr_expect_eq(rc, 0, "sqlite3 '%s' exited %d: %s", cases[i].sql,
		    rc, errout);
		l = strlen(out);
		if (l > 0 && out[l - 1] == '\n')
			out[l - 1] = '\0';
		cr_expect_str_eq(out, cases[i].want, "sqlite3 '%s':\n got  "
		    "%s\n want %s", cases[i].sql, out, cases[i].want);
		free(sql);
		free(out);
		free(errout);
	}
	free(db);
}

Test(interop, sqlite3_tool_reads_codec_blob, .fini = tmp_teardown)
{
	char *path, *wal, *shm, *journal;
	json_int_t t0, t1;
	size_t len, after_len;
	void *blob, *after;

	require_tools(false, true);
	tmp_setup();
	blob = fixture_blob_file("codec.db", &len, &t0, &t1);
	/* Header bytes 18/19: 1 is a rollback-journal file, 2 would be WAL. */
	cr_expect_eq(((uint8_t *)blob)[18], 1);
	cr_expect_eq(((uint8_t *)blob)[19], 1);
	path = tmp_path("codec.db");
	cr_assert(asprintf(&wal, "%s-wal", path) > 0);
	cr_assert(asprintf(&shm, "%s-shm", path) > 0);
	cr_assert(asprintf(&journal, "%s-journal", path) > 0);
	expect_sqlite3(path, schema_cases, NELEM(schema_cases));
	expect_sqlite3(path, row_cases, NELEM(row_cases));
	cr_expect_not(file_exists(wal), "%s appeared beside the blob", wal);
	cr_expect_not(file_exists(shm), "%s appeared beside the blob", shm);
	cr_expect_not(file_exists(journal), "%s was left beside the blob",
	    journal);
	/* Reading needed no recovery: the file is still the blob. */
	after = file_slurp(path, &after_len);
	cr_expect(after_len == len && memcmp(after, blob, len) == 0,
	    "sqlite3 changed the blob");
	free(after);
	free(wal);
	free(shm);
	free(journal);
	free(path);
	free(blob);
}

Test(interop, sqlite3_tool_sees_sdk_schema_in_sdk_database,
    .fini = tmp_teardown)
{
	/* The column lists the test above holds our blobs to are the ones
	 * the SDK itself creates. */
	char *path;
	size_t len;
	void *blob;
	json_t *want;

	require_tools(true, true);
	tmp_setup();
	want = sdk_database("sdk.db", &blob, &len);
	path = tmp_path("sdk.db");
	expect_sqlite3(path, schema_cases, NELEM(schema_cases));
	json_decref(want);
	free(path);
	free(blob);
}
