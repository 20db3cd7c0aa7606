/*
 * cli_sandbox_test.c - the sandq CLI's persistent-sandbox verbs end to end:
 * `sandq sandbox|fs|kv ...` and `sandq sh|python --sandbox`, run as a
 * script would run them, against a real redis-server and sandqd.
 *
 * The verbs, their output, their exit statuses and what fs get may write are
 * a contract scripts rely on (cli/cli_man.c's manual pages,
 * docs/operations.md "The sandq CLI", docs/protocol.md "Sandboxes"). Each
 * test checks an exit status and what was printed or stored, so a change of
 * either fails here. Local folders are made below the harness's folder,
 * which harness_stop() removes without following symlinks.
 *
 * Needs root (sandqd maps each worker's jobs to an unprivileged host uid);
 * every test stops with a reason if it runs without it.
 *
 * Sections: fixture and helpers / sandbox verbs / fs verbs / fs get /
 * kv verbs / jobs on a sandbox / bad input / known bugs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define EXIT_SANDQ 125		/* a refused op, or sandq itself failed */

/*** Fixture and helpers ***/

static struct harness H;

static void
setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 2, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(cli_sandbox, .init = setup, .fini = teardown);

/* A whole file, NUL-terminated (owned), or NULL; *len its size if given. */
static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t n = 0, cap = 4096, got;
	char *buf;

	if (f == NULL)
		return NULL;
	buf = malloc(cap);
	cr_assert_not_null(buf);
	while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
		n += got;
		if (cap - n < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
	}
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* Writes len bytes to path with mode (made exactly so, umask aside). */
static void
put_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, data, len), (ssize_t)len);
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
}

/* put_file() of a string at H.dir/rel (its folders must exist). */
static void
put_text(const char *rel, const char *text, mode_t mode)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", H.dir, rel);
	put_file(path, text, strlen(text), mode);
}

/* mkdir H.dir/rel with mode. */
static void
mk_dir(const char *rel, mode_t mode)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", H.dir, rel);
	cr_assert_eq(mkdir(path, mode), 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(chmod(path, mode), 0);
}

/* True if something (even a dangling symlink) is at path. */
static bool
exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/*
 * Runs `sandq --redis URL ARGS` through sh in H.dir, ARGS formatted from
 * fmt (shell syntax: quote what needs it). Stores stdout in *out and
 * stderr in *err when given (both owned). Returns the exit status.
 */
static int __attribute__((format(printf, 3, 4)))
sq(char **out, char **err, const char *fmt, ...)
{
	char args[8192], cmd[9000], errpath[400];
	va_list ap;
	int n, st;

	va_start(ap, fmt);
	n = vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	cr_assert(n > 0 && (size_t)n < sizeof(args));
	snprintf(errpath, sizeof(errpath), "%s/cli.stderr", H.dir);
	n = snprintf(cmd, sizeof(cmd), "cd %s && %s/sandq --redis %s %s 2>%s", H.dir,
	    harness_build_dir(), H.url, args, errpath);
	cr_assert(n > 0 && (size_t)n < sizeof(cmd));
	st = harness_run(cmd, out);
	if (err) {
		*err = slurp(errpath, NULL);
		cr_assert_not_null(*err);
	}
	return st;
}

/* sq() that must exit 0; returns its stdout (owned). */
static char * __attribute__((format(printf, 1, 2)))
sq_ok(const char *fmt, ...)
{
	char args[8192], *out = NULL, *err = NULL;
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	st = sq(&out, &err, "%s", args);
	cr_assert_eq(st, 0, "sandq %s: exit %d, stderr: %s", args, st, err);
	free(err);
	return out;
}

/*
 * sq() that must be refused: exit 125 with every needle (NULL-ended) on
 * standard error, nothing on standard output.
 */
static void
sq_refused(const char *args, ...)
{
	char *out = NULL, *err = NULL;
	const char *needle;
	va_list ap;
	int st = sq(&out, &err, "%s", args);

	cr_expect_eq(st, EXIT_SANDQ, "sandq %s: exit %d, want %d (stderr: %s)", args, st,
	    EXIT_SANDQ, err);
	cr_expect_str_eq(out, "", "sandq %s printed on stdout: %s", args, out);
	va_start(ap, args);
	while ((needle = va_arg(ap, const char *)) != NULL)
		cr_expect_not_null(strstr(err, needle), "sandq %s: stderr lacks '%s': %s",
		    args, needle, err);
	va_end(ap);
	free(out);
	free(err);
}

/* sq_ok() whose stdout is one line of JSON; returns it parsed (owned). */
static json_t * __attribute__((format(printf, 1, 2)))
sq_json(const char *fmt, ...)
{
	char args[8192], *out;
	json_error_t je;
	json_t *j;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	out = sq_ok("%s", args);
	cr_assert(strchr(out, '\n') == out + strlen(out) - 1,
	    "sandq %s: not one line: %s", args, out);
	j = json_loads(out, 0, &je);
	cr_assert_not_null(j, "sandq %s: bad JSON (%s): %s", args, je.text, out);
	free(out);
	return j;
}

/* The "key: value" line of an info or stat listing, value copied to buf. */
static const char *
field(const char *text, const char *key, char *buf, size_t size)
{
	size_t klen = strlen(key);

	buf[0] = '\0';
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, klen) == 0 && p[klen] == ':' && p[klen + 1] == ' ') {
			snprintf(buf, size, "%.*s", (int)strcspn(p + klen + 2, "\n"),
			    p + klen + 2);
			return buf;
		}
	return NULL;
}

/* A sandbox's version, from `sandq sandbox info`. */
static long
version_of(const char *id)
{
	json_t *j = sq_json("sandbox info %s --json", id);
	long v = (long)json_integer_value(json_object_get(j, "version"));

	json_decref(j);
	return v;
}

/* The paths of an fs.list result, "\n"-joined into buf (types with ':'). */
static const char *
listing(const json_t *arr, char *buf, size_t size)
{
	size_t i, n = 0;
	json_t *e;

	buf[0] = '\0';
	json_array_foreach((json_t *)(uintptr_t)arr, i, e)
		n += (size_t)snprintf(buf + n, size - n, "%s:%s\n",
		    json_string_value(json_object_get(e, "type")),
		    json_string_value(json_object_get(e, "path")));
	cr_assert_lt(n, size);
	return buf;
}

/* `sandq fs ls ID -R --json`, as listing(). */
static const char *
tree_of(const char *id, char *buf, size_t size)
{
	json_t *j = sq_json("fs ls %s -R --json", id);

	cr_assert(json_is_array(j));
	listing(j, buf, size);
	json_decref(j);
	return buf;
}

/* The file's content in the sandbox (exit 0 required; owned). */
static char *
cat(const char *id, const char *path)
{
	return sq_ok("fs cat %s '%s'", id, path);
}

/*** Sandbox verbs ***/

/*
 * The folder used by create --from: files, nested folders, a symlink, .git,
 * a root .gitignore ignoring a file pattern, a folder and the contents of
 * another with a negation, and a nested .gitignore with its own negation.
 */
static void
make_source_folder(void)
{
	char path[512];

	mk_dir("src", 0755);
	put_text("src/.gitignore", "# build output\n*.key\nbuild/\nlogs/*\n!logs/keep.log\n",
	    0644);
	put_text("src/a.txt", "alpha\n", 0644);
	put_text("src/secret.key", "do not upload\n", 0600);
	mk_dir("src/build", 0755);
	put_text("src/build/out.o", "object\n", 0644);
	mk_dir("src/logs", 0755);
	put_text("src/logs/x.log", "noise\n", 0644);
	put_text("src/logs/keep.log", "kept\n", 0644);
	mk_dir("src/sub", 0750);
	put_text("src/sub/.gitignore", "*.tmp\n!keep.tmp\n", 0644);
	put_text("src/sub/run.sh", "#!/bin/sh\necho run\n", 0755);
	put_text("src/sub/junk.tmp", "junk\n", 0644);
	put_text("src/sub/keep.tmp", "keep me\n", 0644);
	mk_dir("src/sub/deep", 0755);
	put_text("src/sub/deep/d.txt", "deep\n", 0644);
	mk_dir("src/.git", 0755);
	put_text("src/.git/config", "[core]\n", 0644);
	snprintf(path, sizeof(path), "%s/src/link", H.dir);
	cr_assert_eq(symlink("a.txt", path), 0);
}

Test(cli_sandbox, create_from_uploads_the_folder_minus_what_gitignore_leaves_out)
{
	char buf[4096], v[128], *out, *err = NULL;
	json_t *j;

	make_source_folder();
	out = sq_ok("sandbox create cf1 --from src --label owner=me");
	cr_expect_str_eq(field(out, "sandbox", v, sizeof(v)), "cf1", "%s", out);
	cr_expect_str_eq(field(out, "version", v, sizeof(v)), "1", "%s", out);
	cr_expect_eq(strlen(field(out, "snapshot", v, sizeof(v))), 64, "%s", out);
	cr_expect_str_eq(field(out, "labels", v, sizeof(v)), "owner=me", "%s", out);
	free(out);

	/* Exactly the files git would keep: parents first, names in byte order. */
	cr_expect_str_eq(tree_of("cf1", buf, sizeof(buf)),
	    "file:/.gitignore\n"
	    "file:/a.txt\n"
	    "symlink:/link\n"
	    "dir:/logs\n"
	    "file:/logs/keep.log\n"
	    "dir:/sub\n"
	    "file:/sub/.gitignore\n"
	    "dir:/sub/deep\n"
	    "file:/sub/deep/d.txt\n"
	    "file:/sub/keep.tmp\n"
	    "file:/sub/run.sh\n");

	/* The plain listing: type, mode, size, mtime, name (and target). */
	out = sq_ok("fs ls cf1");
	cr_expect_not_null(strstr(out, "symlink  0777"), "%s", out);
	cr_expect_not_null(strstr(out, "  link -> a.txt\n"), "%s", out);
	cr_expect_not_null(strstr(out, "file     0644           6  "), "a.txt: %s", out);
	cr_expect_not_null(strstr(out, "dir      0750           0  "), "sub: %s", out);
	free(out);
	out = sq_ok("fs ls cf1 /sub");
	cr_expect_not_null(strstr(out, "file     0755          19  "), "run.sh keeps 0755: %s",
	    out);
	cr_expect_not_null(strstr(out, "  run.sh\n"), "%s", out);
	free(out);
	j = sq_json("fs stat cf1 /sub --json");
	cr_expect_eq(json_integer_value(json_object_get(j, "mode")), 0750);
	json_decref(j);

	out = cat("cf1", "/a.txt");
	cr_expect_str_eq(out, "alpha\n");
	free(out);
	out = cat("cf1", "sub/deep/d.txt");
	cr_expect_str_eq(out, "deep\n");
	free(out);
	out = cat("cf1", "/logs/keep.log");
	cr_expect_str_eq(out, "kept\n");
	free(out);
	sq_refused("fs cat cf1 /secret.key", "not_found", "/secret.key", NULL);
	sq_refused("fs cat cf1 /build/out.o", "not_found", "/build", NULL);
	sq_refused("fs stat cf1 /.git", "not_found", "/.git", NULL);

	/* An existing id: refused, the sandbox left as it was. */
	sq_refused("sandbox create cf1", "sandbox_exists", "'cf1' already exists", NULL);
	sq_refused("sandbox create cf1 --from src", "sandbox_exists", "cf1", NULL);
	cr_expect_eq(version_of("cf1"), 1);

	/* A missing folder fails before anything is sent. */
	cr_expect_eq(sq(&out, &err, "sandbox create cf2 --from no-such-dir"), EXIT_SANDQ);
	cr_expect_not_null(strstr(err, "--from no-such-dir"), "%s", err);
	free(out);
	free(err);
	sq_refused("sandbox info cf2", "sandbox_not_found", "'cf2'", NULL);
}

Test(cli_sandbox, create_from_refuses_a_fifo_even_an_ignored_one)
{
	char path[512];

	mk_dir("ff", 0755);
	put_text("ff/.gitignore", "pipe\n", 0644);
	snprintf(path, sizeof(path), "%s/ff/pipe", H.dir);
	cr_assert_eq(mkfifo(path, 0644), 0);
	sq_refused("sandbox create ff1 --from ff", "--from ff", "/pipe", "fifo", NULL);
	sq_refused("sandbox info ff1", "sandbox_not_found", "'ff1'", NULL);
}

Test(cli_sandbox, ls_info_and_rm)
{
	char v[128], snap[128], *out;
	json_t *j, *e;
	size_t i;
	bool seen1 = false, seen2 = false;

	free(sq_ok("sandbox create li1 --label team=a"));
	free(sq_ok("sandbox create li2"));
	out = sq_ok("sandbox info li1");
	cr_expect_str_eq(field(out, "version", v, sizeof(v)), "1", "%s", out);
	cr_expect_eq(strlen(field(out, "snapshot", snap, sizeof(snap))), 64, "%s", out);
	cr_expect_not_null(field(out, "size", v, sizeof(v)), "%s", out);
	cr_expect_not_null(field(out, "created_at", v, sizeof(v)), "%s", out);
	cr_expect_eq(strlen(v), 20, "UTC seconds: %s", v);
	cr_expect_str_eq(field(out, "labels", v, sizeof(v)), "team=a", "%s", out);
	free(out);

	/* A committing op moves the head: version 2, another snapshot. */
	put_text("f.txt", "x\n", 0644);
	free(sq_ok("fs put li1 /f.txt f.txt"));
	j = sq_json("sandbox info li1 --json");
	cr_expect_eq(json_integer_value(json_object_get(j, "version")), 2);
	cr_expect_str_neq(json_string_value(json_object_get(j, "snapshot")), snap);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(j, "labels"),
	    "team")), "a");
	json_decref(j);

	/* ls: a header, then one line per sandbox with version and snapshot. */
	out = sq_ok("sandbox ls");
	cr_expect_eq(strncmp(out, "SANDBOX  VERSION  UPDATED", 25), 0, "%s", out);
	cr_expect_not_null(strstr(out, "\nli1            2  "), "%s", out);
	cr_expect_not_null(strstr(out, "\nli2            1  "), "%s", out);
	cr_expect_not_null(strstr(out, "team=a\n"), "%s", out);
	free(out);
	j = sq_json("sandbox ls --json");
	cr_assert(json_is_array(j));
	json_array_foreach(j, i, e) {
		const char *id = json_string_value(json_object_get(e, "sandbox"));

		seen1 |= id && strcmp(id, "li1") == 0;
		seen2 |= id && strcmp(id, "li2") == 0;
	}
	cr_expect(seen1 && seen2);
	json_decref(j);

	/* rm: silent, then the sandbox is gone from info and ls. */
	out = sq_ok("sandbox rm li1");
	cr_expect_str_eq(out, "");
	free(out);
	sq_refused("sandbox info li1", "sandbox_not_found", "sandbox 'li1' not found", NULL);
	sq_refused("sandbox rm li1", "sandbox_not_found", "'li1'", NULL);
	sq_refused("fs cat li1 /f.txt", "sandbox_not_found", "'li1'", NULL);
	out = sq_ok("sandbox ls");
	cr_expect_null(strstr(out, "\nli1 "), "%s", out);
	cr_expect_not_null(strstr(out, "\nli2 "), "%s", out);
	free(out);
	/* --json of an op without data: the head it left. */
	j = sq_json("sandbox rm li2 --json");
	cr_expect_str_eq(json_string_value(json_object_get(j, "sandbox")), "li2");
	json_decref(j);
}

Test(cli_sandbox, fork_copies_the_files_and_then_goes_its_own_way)
{
	char src_tree[2048], buf[2048], v[128], *out;

	free(sq_ok("sandbox create fk1"));
	out = sq_ok("sh --sandbox fk1 'mkdir -p d && echo base > d/f && echo top > t'");
	cr_expect_str_eq(out, "");
	free(out);
	tree_of("fk1", src_tree, sizeof(src_tree));

	out = sq_ok("sandbox fork fk1 fk2");
	cr_expect_str_eq(field(out, "sandbox", v, sizeof(v)), "fk2", "%s", out);
	cr_expect_str_eq(field(out, "version", v, sizeof(v)), "1", "%s", out);
	free(out);
	cr_expect_str_eq(tree_of("fk2", buf, sizeof(buf)), src_tree);
	out = cat("fk2", "/d/f");
	cr_expect_str_eq(out, "base\n");
	free(out);

	/* Changes to the fork, by an op and by a job, stay in the fork. */
	put_text("new.txt", "fork only\n", 0644);
	free(sq_ok("fs put fk2 /d/f new.txt"));
	free(sq_ok("sh --sandbox fk2 'echo job > jobfile; rm t'"));
	out = cat("fk2", "/d/f");
	cr_expect_str_eq(out, "fork only\n");
	free(out);
	out = cat("fk2", "/jobfile");
	cr_expect_str_eq(out, "job\n");
	free(out);
	out = cat("fk1", "/d/f");
	cr_expect_str_eq(out, "base\n");
	free(out);
	out = cat("fk1", "/t");
	cr_expect_str_eq(out, "top\n");
	free(out);
	sq_refused("fs cat fk1 /jobfile", "not_found", "/jobfile", NULL);
	cr_expect_str_eq(tree_of("fk1", buf, sizeof(buf)), src_tree);
	cr_expect_eq(version_of("fk1"), 2);

	/* And the other way round. */
	free(sq_ok("sh --sandbox fk1 'echo src > only-src'"));
	sq_refused("fs stat fk2 /only-src", "not_found", "/only-src", NULL);

	sq_refused("sandbox fork fk1 fk2", "sandbox_exists", "fk2", NULL);
	sq_refused("sandbox fork nope fk3", "sandbox_not_found", "'nope'", NULL);
}

Test(cli_sandbox, export_is_an_sqlite_database_and_import_restores_it)
{
	char cmd[1024], t1[4096], t2[4096], path[512], *out, *a, *b;
	size_t alen, blen;
	json_t *j;

	free(sq_ok("sandbox create ex1"));
	free(sq_ok("sh --sandbox ex1 'mkdir -p d/e && printf hello > d/e/x && "
	    "chmod 640 d/e/x && ln -s d/e/x lnk && echo t > top'"));
	free(sq_ok("kv set ex1 cfg '{\"debug\":true}'"));
	free(sq_ok("kv set ex1 name alice"));

	out = sq_ok("sandbox export ex1 ex1.db");
	cr_expect_str_eq(out, "", "export prints nothing: %s", out);
	free(out);
	snprintf(path, sizeof(path), "%s/ex1.db", H.dir);
	snprintf(cmd, sizeof(cmd), "sqlite3 %s \"PRAGMA integrity_check; SELECT value FROM "
	    "fs_config WHERE key='schema_version'; SELECT key, value FROM kv_store ORDER "
	    "BY key;\"", path);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	cr_expect_str_eq(out, "ok\n0.4\ncfg|{\"debug\":true}\nname|\"alice\"\n");
	free(out);
	snprintf(cmd, sizeof(cmd), "%s-wal", path);
	cr_expect_not(exists(cmd), "%s left behind", cmd);
	snprintf(cmd, sizeof(cmd), "%s-journal", path);
	cr_expect_not(exists(cmd), "%s left behind", cmd);

	/* - is standard output, byte for byte the same; --json tells the size. */
	free(sq_ok("sandbox export ex1 - > ex1-stdout.db"));
	a = slurp(path, &alen);
	snprintf(path, sizeof(path), "%s/ex1-stdout.db", H.dir);
	b = slurp(path, &blen);
	cr_assert(a && b);
	cr_expect(alen > 0 && alen == blen && memcmp(a, b, alen) == 0,
	    "export to - differs (%zu vs %zu bytes)", alen, blen);
	free(a);
	free(b);
	j = sq_json("sandbox export ex1 ex1-again.db --json");
	cr_expect_str_eq(json_string_value(json_object_get(j, "file")), "ex1-again.db");
	cr_expect_eq((size_t)json_integer_value(json_object_get(j, "size")), alen);
	cr_expect_eq(json_integer_value(json_object_get(j, "version")), 4);
	json_decref(j);

	/* Import: a new sandbox with the same files, modes, symlinks and kv. */
	out = sq_ok("sandbox import ex2 ex1.db");
	cr_expect_not_null(strstr(out, "sandbox: ex2\nversion: 1\n"), "%s", out);
	free(out);
	a = sq_ok("fs ls ex1 -R --json");
	b = sq_ok("fs ls ex2 -R --json");
	cr_expect_str_eq(b, a, "the imported tree differs");
	free(a);
	free(b);
	cr_expect_str_eq(tree_of("ex2", t2, sizeof(t2)), tree_of("ex1", t1, sizeof(t1)));
	cr_expect_str_eq(t2, "dir:/d\ndir:/d/e\nfile:/d/e/x\nsymlink:/lnk\nfile:/top\n");
	out = cat("ex2", "/d/e/x");
	cr_expect_str_eq(out, "hello");
	free(out);
	out = sq_ok("kv keys ex2");
	cr_expect_str_eq(out, "cfg\nname\n");
	free(out);
	out = sq_ok("kv get ex2 cfg");
	cr_expect_str_eq(out, "{\"debug\":true}\n");
	free(out);
	out = sq_ok("kv get ex2 name");
	cr_expect_str_eq(out, "\"alice\"\n");
	free(out);

	/* Into an existing sandbox: its next version. From standard input too. */
	out = sq_ok("sandbox import ex2 - < ex1.db");
	cr_expect_not_null(strstr(out, "version: 2\n"), "%s", out);
	free(out);

	/* What is not an AgentFS database is refused, and nothing is created. */
	put_text("junk.db", "not a database\n", 0644);
	sq_refused("sandbox import ex3 junk.db", "bad_snapshot", NULL);
	put_text("empty.db", "", 0644);
	sq_refused("sandbox import ex3 empty.db", "empty.db", "empty", NULL);
	sq_refused("sandbox import ex3 missing.db", "missing.db", NULL);
	sq_refused("sandbox info ex3", "sandbox_not_found", NULL);
	sq_refused("sandbox export nope x.db", "sandbox_not_found", "'nope'", NULL);
	snprintf(path, sizeof(path), "%s/x.db", H.dir);
	cr_expect_not(exists(path), "a refused export wrote %s", path);
}

/* Runs sql on the SQLite file H.dir/rel with the library (asserts). */
static void
db_exec(const char *rel, const char *sql)
{
	char path[512], *msg = NULL;
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/%s", H.dir, rel);
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
	    SQLITE_OK, "%s: %s", path, sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg ? msg : "?");
	sqlite3_close(db);
}

/* cp H.dir/from H.dir/to. */
static void
copy_local(const char *from, const char *to)
{
	char path[512], *data;
	size_t len;

	snprintf(path, sizeof(path), "%s/%s", H.dir, from);
	data = slurp(path, &len);
	cr_assert_not_null(data, "%s", path);
	snprintf(path, sizeof(path), "%s/%s", H.dir, to);
	put_file(path, data, len, 0644);
	free(data);
}

/*
 * An import applies the limits a job on the sandbox has (docs/protocol.md
 * "Sandboxes", docs/security.md "Import applies the same limits as a
 * job"): with the default tenant held to 80 files and 1 MiB, an export
 * imports, and each hostile variant of it is refused naming its limit or
 * the object, whether into a new sandbox (then not created) or into an
 * existing one (whose version does not move). The variants are made from
 * the export with SQLite, as a tenant would make them.
 */
Test(cli_sandbox, import_refuses_what_a_job_could_not_hold)
{
	static const char *const extra[] = {
		"--set", "tenant.default.ceiling.files=80",
		"--set", "tenant.default.ceiling.disk_bytes=1048576", NULL };
	static const struct {
		const char *name;	/* the file, and the new sandbox */
		const char *sql;	/* run on a copy of the export */
		const char *code;	/* the refusal's code */
		const char *needle;	/* in its message */
	} bad[] = {
		{ "lie", "UPDATE fs_inode SET size = 900000 WHERE ino ="
		  " (SELECT ino FROM fs_dentry WHERE name = 'top')",
		  "bad_snapshot", "its size says 900000 bytes, its chunks hold 2" },
		{ "many",
		  "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
		  " WHERE i < 100)"
		  " INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " SELECT 1000 + i, 33188, 1, 0, 0, 0 FROM n;"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " SELECT 'e' || ino, 1, ino FROM fs_inode WHERE ino > 1000",
		  "too_large", "105 entries, more than the files limit 80" },
		{ "deep",
		  "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
		  " WHERE i < 65)"
		  " INSERT INTO fs_inode (ino, mode, nlink, atime, mtime, ctime)"
		  " SELECT 2000 + i, 16877, 1, 0, 0, 0 FROM n;"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " SELECT 'd', CASE ino WHEN 2001 THEN 1 ELSE ino - 1 END, ino"
		  " FROM fs_inode WHERE ino > 2000",
		  "too_large", "65 directories deep, more than the depth limit 64" },
		{ "long", "INSERT INTO fs_inode (ino, mode, nlink, atime, mtime,"
		  " ctime) VALUES (4000, 33188, 1, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino) VALUES"
		  " (replace(hex(zeroblob(150)), '0', 'n'), 1, 4000)",
		  "too_large", "300 bytes, more than the name length limit 255" },
		{ "big",
		  "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
		  " WHERE i < 299)"
		  " INSERT INTO fs_data (ino, chunk_index, data)"
		  " SELECT 5000, i, randomblob(4096) FROM n;"
		  "INSERT INTO fs_inode (ino, mode, nlink, size, atime, mtime,"
		  " ctime) VALUES (5000, 33188, 1, 1228800, 0, 0, 0);"
		  "INSERT INTO fs_dentry (name, parent_ino, ino)"
		  " VALUES ('big', 1, 5000)",
		  "too_large", "bytes, more than the disk limit 1048576" },
		{ "fts", "DROP TABLE fs_dentry; CREATE VIRTUAL TABLE fs_dentry"
		  " USING fts5(name, parent_ino, ino)",
		  "bad_snapshot", "'fs_dentry' is not a plain table (CREATE "
		  "VIRTUAL TABLE)" },
		{ "view", "CREATE VIEW tree AS SELECT name FROM fs_dentry",
		  "bad_snapshot", "a view 'tree'" },
		{ "trigger", "CREATE TRIGGER wipe AFTER INSERT ON kv_store BEGIN"
		  " DELETE FROM fs_data; END",
		  "bad_snapshot", "a trigger 'wipe' (on 'kv_store')" },
	};
	char args[256], file[64], *out;

	harness_stop(&H);
	harness_start(&H, 2, extra);
	free(sq_ok("sandbox create good"));
	free(sq_ok("sh --sandbox good 'mkdir -p a/b && printf hi > a/b/x && "
	    "echo t > top && ln -s a/b/x lnk'"));
	free(sq_ok("sandbox export good good.db"));

	/* What a job made fits what a job may hold: it imports. */
	out = sq_ok("sandbox import copy good.db");
	cr_expect_not_null(strstr(out, "version: 1\n"), "%s", out);
	free(out);
	out = cat("copy", "/a/b/x");
	cr_expect_str_eq(out, "hi");
	free(out);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(file, sizeof(file), "%s.db", bad[i].name);
		copy_local("good.db", file);
		db_exec(file, bad[i].sql);
		snprintf(args, sizeof(args), "sandbox import %s %s", bad[i].name,
		    file);
		sq_refused(args, bad[i].code, bad[i].needle, NULL);
		snprintf(args, sizeof(args), "sandbox info %s", bad[i].name);
		sq_refused(args, "sandbox_not_found", NULL);
		snprintf(args, sizeof(args), "sandbox import copy %s", file);
		sq_refused(args, bad[i].code, bad[i].needle, NULL);
		cr_expect_eq(version_of("copy"), 1, "%s moved the head",
		    bad[i].name);
	}
}

Test(cli_sandbox, history_lists_every_committing_call_in_order)
{
	static const char *const names[] = { "sandbox.create", "fs.write", "kv.set", "sh",
	    "sh", "fs.delete" };
	static const char *const statuses[] = { "success", "success", "success", "success",
	    "error", "success" };
	const size_t ncalls = sizeof(names) / sizeof(names[0]);
	char *out, *err = NULL, *p;
	json_t *j, *vs, *cs, *e;
	size_t i, lines = 0;

	free(sq_ok("sandbox create hi1"));
	put_text("h.txt", "h\n", 0644);
	free(sq_ok("fs put hi1 /h.txt h.txt"));
	free(sq_ok("kv set hi1 k 1"));
	free(sq_ok("sh --sandbox hi1 'echo first'"));
	cr_expect_eq(sq(&out, &err, "sh --sandbox hi1 'exit 4'"), 4);
	free(out);
	free(err);
	/* Reads and --no-persist runs record nothing. */
	free(sq_ok("fs cat hi1 /h.txt"));
	free(sq_ok("fs ls hi1 -R"));
	free(sq_ok("kv get hi1 k"));
	free(sq_ok("fs rm hi1 /h.txt"));
	free(sq_ok("sh --sandbox hi1 --no-persist 'echo scratch > s'"));

	j = sq_json("sandbox history hi1 --json");
	vs = json_object_get(j, "versions");
	cs = json_object_get(j, "calls");
	cr_assert(json_is_array(vs) && json_is_array(cs), "no versions or calls");
	/* Versions newest first: 6 down to 1. */
	cr_expect_eq(json_array_size(vs), ncalls);
	json_array_foreach(vs, i, e)
		cr_expect_eq(json_integer_value(json_object_get(e, "version")),
		    (json_int_t)(ncalls - i), "versions[%zu]", i);
	/* Calls oldest first, with names, statuses and ids in order. */
	cr_assert_eq(json_array_size(cs), ncalls);
	json_array_foreach(cs, i, e) {
		cr_expect_str_eq(json_string_value(json_object_get(e, "name")), names[i],
		    "calls[%zu]", i);
		cr_expect_str_eq(json_string_value(json_object_get(e, "status")), statuses[i],
		    "calls[%zu]", i);
		cr_expect_eq(json_integer_value(json_object_get(e, "id")), (json_int_t)i + 1);
		cr_expect(json_integer_value(json_object_get(e, "started_at")) > 0);
	}
	cr_expect_not_null(strstr(json_string_value(json_object_get(json_array_get(cs, 3),
	    "parameters")), "echo first"));
	cr_expect_not_null(strstr(json_string_value(json_object_get(json_array_get(cs, 3),
	    "result")), "\"stdout\":\"first\\n\""));
	cr_expect_not_null(strstr(json_string_value(json_object_get(json_array_get(cs, 4),
	    "result")), "\"exit_code\":4"));
	cr_expect_not_null(strstr(json_string_value(json_object_get(json_array_get(cs, 1),
	    "parameters")), "\"path\":\"/h.txt\""));
	json_decref(j);

	/* Plain: the versions table, a blank line, then one line per call. */
	out = sq_ok("sandbox history hi1");
	cr_expect_eq(strncmp(out, "VERSION  CREATED", 16), 0, "%s", out);
	p = strstr(out, "\n\n");
	cr_assert_not_null(p, "no blank line between the tables: %s", out);
	p += 2;
	cr_expect_not_null(strstr(p, "CALL  NAME"), "%s", p);
	p = strchr(p, '\n') + 1;
	for (char *line = p; *line; line = strchr(line, '\n') + 1) {
		char num[16], name[64], status[16];

		cr_assert_eq(sscanf(line, "%15s %63s %15s", num, name, status), 3, "%s", line);
		cr_expect_eq(atoi(num), (int)lines + 1, "%s", line);
		if (lines < ncalls) {
			cr_expect_str_eq(name, names[lines], "%s", line);
			cr_expect_str_eq(status, statuses[lines], "%s", line);
		}
		lines++;
		if (strchr(line, '\n') == NULL)
			break;
	}
	cr_expect_eq(lines, ncalls, "%s", out);
	free(out);
	sq_refused("sandbox history nope", "sandbox_not_found", "'nope'", NULL);
}

/*** fs verbs ***/

Test(cli_sandbox, fs_put_cat_stat_ls_rm)
{
	unsigned char bytes[256];
	char path[512], hex[513], *out, *got;
	size_t len = 0;
	json_t *j;

	for (int i = 0; i < 256; i++)
		bytes[i] = (unsigned char)i;
	snprintf(path, sizeof(path), "%s/bytes.bin", H.dir);
	put_file(path, bytes, sizeof(bytes), 0640);
	free(sq_ok("sandbox create fs1"));
	free(sq_ok("sh --sandbox fs1 'mkdir -p dir/sub && echo s > dir/sub/s'"));

	/* put: silent, the local mode kept; --json gives path and size. */
	out = sq_ok("fs put fs1 /dir/bytes.bin bytes.bin");
	cr_expect_str_eq(out, "");
	free(out);
	cr_expect_eq(version_of("fs1"), 3);
	cr_expect_eq(sq(NULL, NULL, "fs cat fs1 /dir/bytes.bin > back.bin"), 0);
	snprintf(path, sizeof(path), "%s/back.bin", H.dir);
	got = slurp(path, &len);
	cr_expect(len == sizeof(bytes) && memcmp(got, bytes, len) == 0,
	    "bytes 0..255 came back as %zu other bytes", len);
	free(got);
	/* The same bytes as a job sees them. */
	for (int i = 0; i < 256; i++)
		snprintf(hex + 2 * i, 3, "%02x", i);
	out = sq_ok("sh --sandbox fs1 --no-persist 'od -An -v -tx1 dir/bytes.bin | "
	    "tr -d \" \\n\"'");
	cr_expect_str_eq(out, hex);
	free(out);

	out = sq_ok("fs stat fs1 /dir/bytes.bin");
	{
		const char *want = "path: /dir/bytes.bin\ntype: file\nsize: 256\nmode: 0640\n"
		    "mtime: ";

		cr_expect_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
		cr_expect_eq(strlen(out), strlen(want) + 21, "%s", out);
	}
	free(out);
	j = sq_json("fs put fs1 dir/stdin.txt - --json < bytes.bin");
	cr_expect_str_eq(json_string_value(json_object_get(j, "path")), "/dir/stdin.txt");
	cr_expect_eq(json_integer_value(json_object_get(j, "size")), 256);
	json_decref(j);
	j = sq_json("fs stat fs1 /dir/stdin.txt --json");
	cr_expect_eq(json_integer_value(json_object_get(j, "mode")), 0644, "stdin is 0644");
	cr_expect_str_eq(json_string_value(json_object_get(j, "name")), "stdin.txt");
	json_decref(j);

	/* ls: one directory, or the subtree with whole paths. */
	out = sq_ok("fs ls fs1 /dir");
	cr_expect_not_null(strstr(out, "file     0640         256  "), "%s", out);
	cr_expect_not_null(strstr(out, "  bytes.bin\n"), "%s", out);
	cr_expect_not_null(strstr(out, "  stdin.txt\n"), "%s", out);
	cr_expect_not_null(strstr(out, "dir      0755           0  "), "%s", out);
	cr_expect_not_null(strstr(out, "  sub\n"), "%s", out);
	cr_expect_null(strstr(out, "  s\n"), "not recursive: %s", out);
	free(out);
	out = sq_ok("fs ls fs1 -R");
	cr_expect_not_null(strstr(out, "  /dir/sub/s\n"), "%s", out);
	free(out);

	/* rm: a file; a non-empty folder needs -r. */
	free(sq_ok("fs rm fs1 /dir/stdin.txt"));
	sq_refused("fs stat fs1 /dir/stdin.txt", "not_found", "/dir/stdin.txt", NULL);
	sq_refused("fs rm fs1 /dir", "not_empty", "/dir", NULL);
	j = sq_json("fs rm fs1 /dir -r --json");
	cr_expect_str_eq(json_string_value(json_object_get(j, "path")), "/dir");
	cr_expect_eq(json_integer_value(json_object_get(j, "removed")), 4, "dir, bytes.bin, "
	    "sub, sub/s");
	json_decref(j);
	out = sq_ok("fs ls fs1");
	cr_expect_str_eq(out, "");
	free(out);

	/* A missing path: refused naming it, exit 125. */
	sq_refused("fs cat fs1 /nope.txt", "not_found", "/nope.txt", NULL);
	sq_refused("fs stat fs1 /nope.txt", "not_found", "/nope.txt", NULL);
	sq_refused("fs ls fs1 /nope", "not_found", "/nope", NULL);
	sq_refused("fs rm fs1 /nope.txt", "not_found", "/nope.txt", NULL);
	sq_refused("fs put fs1 /no/dir/x bytes.bin", "not_found", "/no/dir/x", NULL);
	sq_refused("fs put fs1 /x missing-local-file", "missing-local-file", NULL);
	sq_refused("fs get fs1 /nope.txt .", "not_found", "/nope.txt", NULL);
	cr_expect_eq(version_of("fs1"), 6, "a refused op committed");
}

Test(cli_sandbox, fs_verbs_apply_path_rules)
{
	char *out;

	free(sq_ok("sandbox create pr1"));
	free(sq_ok("sh --sandbox pr1 'mkdir secret && echo pw > secret/p && echo ok > open'"));
	/* none: not found (as if absent); view: listed, not readable. */
	sq_refused("fs cat pr1 /secret/p --perm '/secret/**=none'", "not_found", "/secret/p",
	    NULL);
	sq_refused("fs cat pr1 /secret/p --perm '/secret/**=view'", "permission",
	    "/secret/p", NULL);
	out = sq_ok("fs ls pr1 /secret --perm '/secret/**=view'");
	cr_expect_not_null(strstr(out, "  p\n"), "%s", out);
	free(out);
	put_text("w.txt", "w\n", 0644);
	sq_refused("fs put pr1 /open w.txt --perm-preset read-only", "permission", "/open",
	    NULL);
	out = cat("pr1", "/open");
	cr_expect_str_eq(out, "ok\n");
	free(out);
	out = cat("pr1", "/secret/p");
	cr_expect_str_eq(out, "pw\n");
	free(out);
}

/*** fs get ***/

/* The mode bits of path (lstat), or -1. */
static int
mode_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* True if path is a symlink (not followed). */
static bool
is_symlink(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* readlink() into buf, "" if it is no symlink. */
static const char *
link_of(const char *path, char *buf, size_t size)
{
	ssize_t n = readlink(path, buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* Names in folder path, sorted and "\n"-joined (owned). */
static char *
names_in(const char *path)
{
	char cmd[600], *out = NULL;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | LC_ALL=C sort", path);
	cr_assert_eq(harness_run(cmd, &out), 0);
	return out;
}

/*
 * A sandbox holding files and folders with distinct modes (ro: 0555), a
 * relative symlink, and two hostile ones: evil climbs out to /tmp/<unique> and abs
 * names an absolute host path. Their targets go to evil and abs (256 bytes).
 */
static void
make_tree_sandbox(const char *id, char *evil, char *abs)
{
	char *out;
	const char *base = strrchr(H.dir, '/') + 1;

	snprintf(evil, 256, "/tmp/%s-evil", base);
	snprintf(abs, 256, "/tmp/%s-abs", base);
	free(sq_ok("sandbox create %s", id));
	out = sq_ok("sh --sandbox %s 'mkdir -p d/e && echo f > d/e/f && chmod 700 d/e && "
	    "chmod 751 d && echo top > top.txt && chmod 600 top.txt && printf x > d/run && "
	    "chmod 755 d/run && ln -s ../top.txt d/rel && mkdir ro && chmod 555 ro && "
	    "ln -s ../../../../../tmp/%s-evil evil && ln -s %s abs'", id, base, abs);
	cr_expect_str_eq(out, "");
	free(out);
	cr_assert_not(exists(evil), "%s exists before the test", evil);
	cr_assert_not(exists(abs), "%s exists before the test", abs);
}

Test(cli_sandbox, fs_get_copies_a_file_and_a_tree_with_modes_and_symlinks)
{
	char evil[256], abs[256], out_dir[400], p[512], l[512], *out, *s;
	json_t *j;

	make_tree_sandbox("gt1", evil, abs);
	snprintf(out_dir, sizeof(out_dir), "%s/get", H.dir);
	mk_dir("get", 0755);

	/* One file: LOCALDIR/NAME, its mode kept, silent. */
	out = sq_ok("fs get gt1 /top.txt get");
	cr_expect_str_eq(out, "");
	free(out);
	snprintf(p, sizeof(p), "%s/top.txt", out_dir);
	s = slurp(p, NULL);
	cr_expect_str_eq(s, "top\n");
	free(s);
	cr_expect_eq(mode_of(p), 0600, "mode %o", mode_of(p));
	/* Present already: an error naming it; the file is left as it was. */
	sq_refused("fs get gt1 /top.txt get", "get/top.txt", "already exists", NULL);

	/*
	 * A folder: LOCALDIR/NAME and everything below, modes kept; d/rel ->
	 * ../top.txt leads outside the copy (get/d), so it is left out
	 * (cli_hostile_test has the rest of that rule).
	 */
	j = sq_json("fs get gt1 /d get --json");
	cr_expect_str_eq(json_string_value(json_object_get(j, "path")), "get");
	cr_expect_eq(json_integer_value(json_object_get(j, "files")), 2);
	cr_expect_eq(json_integer_value(json_object_get(j, "dirs")), 2);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks")), 0);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks_skipped")), 1);
	json_decref(j);
	snprintf(p, sizeof(p), "%s/d", out_dir);
	cr_expect_eq(mode_of(p), 0751, "d: mode %o", mode_of(p));
	snprintf(p, sizeof(p), "%s/d/e", out_dir);
	cr_expect_eq(mode_of(p), 0700, "d/e: mode %o", mode_of(p));
	snprintf(p, sizeof(p), "%s/d/run", out_dir);
	cr_expect_eq(mode_of(p), 0755, "d/run: mode %o", mode_of(p));
	snprintf(p, sizeof(p), "%s/d/e/f", out_dir);
	s = slurp(p, NULL);
	cr_expect_str_eq(s, "f\n");
	free(s);
	cr_expect_eq(mode_of(p), 0644);
	snprintf(p, sizeof(p), "%s/d/rel", out_dir);
	cr_expect_not(exists(p), "get/d/rel leads outside get/d but was kept");
	s = names_in(out_dir);
	cr_expect_str_eq(s, "d\ntop.txt\n");
	free(s);

	/*
	 * The root: its entries go into LOCALDIR itself; d/rel stays inside
	 * it, the hostile links are left out.
	 */
	mk_dir("root", 0755);
	j = sq_json("fs get gt1 / root --json");
	cr_expect_eq(json_integer_value(json_object_get(j, "files")), 3);
	cr_expect_eq(json_integer_value(json_object_get(j, "dirs")), 3);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks")), 1);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks_skipped")), 2);
	json_decref(j);
	snprintf(p, sizeof(p), "%s/root", H.dir);
	s = names_in(p);
	cr_expect_str_eq(s, "d\nro\ntop.txt\n");
	free(s);
	/* Folders keep owner write, so the copy can be removed (get_finish_dirs). */
	snprintf(p, sizeof(p), "%s/root/ro", H.dir);
	cr_expect_eq(mode_of(p), 0755, "ro: mode %o", mode_of(p));
	/* Files keep their mtime. */
	{
		json_t *st = sq_json("fs stat gt1 /top.txt --json");
		struct stat lst;

		snprintf(p, sizeof(p), "%s/root/top.txt", H.dir);
		cr_assert_eq(lstat(p, &lst), 0);
		cr_expect_eq((json_int_t)lst.st_mtime,
		    json_integer_value(json_object_get(st, "mtime")));
		json_decref(st);
	}
	snprintf(p, sizeof(p), "%s/root/d/rel", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "../top.txt");
	/* --keep-symlinks: the hostile links as stored, never followed. */
	mk_dir("keep", 0755);
	free(sq_ok("fs get gt1 / keep --keep-symlinks"));
	snprintf(p, sizeof(p), "%s/keep/evil", H.dir);
	snprintf(l, sizeof(l), "../../../../../tmp/%s-evil", strrchr(H.dir, '/') + 1);
	{
		char got[512];

		cr_expect_str_eq(link_of(p, got, sizeof(got)), l);
	}
	snprintf(p, sizeof(p), "%s/keep/abs", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), abs);
	/* A symlink alone is judged from LOCALDIR: evil leads outside it. */
	mk_dir("one", 0755);
	free(sq_ok("fs get gt1 /evil one"));
	snprintf(p, sizeof(p), "%s/one/evil", H.dir);
	cr_expect_not(exists(p), "one/evil was kept");
	mk_dir("one2", 0755);
	free(sq_ok("fs get gt1 /evil one2 --keep-symlinks"));
	snprintf(p, sizeof(p), "%s/one2/evil", H.dir);
	cr_expect(is_symlink(p), "one2/evil is no symlink");
	cr_expect_not(exists(evil), "fs get created %s", evil);
	cr_expect_not(exists(abs), "fs get created %s", abs);
	/* The copy is usable: the relative link resolves inside it. */
	snprintf(p, sizeof(p), "%s/root/d/rel", H.dir);
	s = slurp(p, NULL);
	cr_expect_str_eq(s, "top\n");
	free(s);
}

Test(cli_sandbox, fs_get_never_writes_through_a_symlink_in_localdir)
{
	char evil[256], abs[256], p[512], other[400], *s;

	make_tree_sandbox("gs1", evil, abs);
	/* H.dir/out/d -> H.dir/other: d is a folder of the tree. */
	mk_dir("out", 0755);
	mk_dir("other", 0755);
	snprintf(other, sizeof(other), "%s/other", H.dir);
	snprintf(p, sizeof(p), "%s/out/d", H.dir);
	cr_assert_eq(symlink(other, p), 0);

	/* The documented behaviour: an error naming it; nothing replaced. */
	sq_refused("fs get gs1 / out", "out/d", "already exists", NULL);
	sq_refused("fs get gs1 /d out", "out/d", "already exists", NULL);
	{
		char got[512];

		cr_expect_str_eq(link_of(p, got, sizeof(got)), other, "out/d was replaced");
	}
	s = names_in(other);
	cr_expect_str_eq(s, "", "written through out/d: %s", s);
	free(s);
	/* What was copied before the error stays, inside out only (abs, which
	 * comes first, leads outside and is left out). */
	snprintf(p, sizeof(p), "%s/out", H.dir);
	s = names_in(p);
	cr_expect_str_eq(s, "d\n", "%s", s);
	free(s);

	/* LOCALDIR itself a symlink: refused, not followed. */
	snprintf(p, sizeof(p), "%s/via", H.dir);
	cr_assert_eq(symlink(other, p), 0);
	sq_refused("fs get gs1 /top.txt via", "via", "symlink", NULL);
	sq_refused("fs get gs1 / via", "via", "symlink", NULL);
	s = names_in(other);
	cr_expect_str_eq(s, "", "written through via: %s", s);
	free(s);

	/* A file symlink in the way is not written through either. */
	put_text("victim", "untouched\n", 0644);
	mk_dir("out2", 0755);
	snprintf(p, sizeof(p), "%s/out2/top.txt", H.dir);
	snprintf(other, sizeof(other), "%s/victim", H.dir);
	cr_assert_eq(symlink(other, p), 0);
	sq_refused("fs get gs1 /top.txt out2", "out2/top.txt", "already exists", NULL);
	s = slurp(other, NULL);
	cr_expect_str_eq(s, "untouched\n");
	free(s);

	/* No entry of the tree landed beside LOCALDIR, nor at the links' targets. */
	s = names_in(H.dir);
	cr_expect_null(strstr(s, "\nd\n"), "%s", s);
	cr_expect_null(strstr(s, "top.txt"), "%s", s);
	free(s);
	cr_expect_not(exists(evil), "%s created", evil);
	cr_expect_not(exists(abs), "%s created", abs);
}

/*** kv verbs ***/

Test(cli_sandbox, kv_set_get_del_keys)
{
	char *out;
	json_t *j;

	free(sq_ok("sandbox create kv1"));
	/* Valid JSON is stored as given; anything else as a JSON string. */
	free(sq_ok("kv set kv1 cfg '{\"debug\":true, \"n\":[1,2]}'"));
	free(sq_ok("kv set kv1 name alice"));
	free(sq_ok("kv set kv1 num 42"));
	free(sq_ok("kv set kv1 neg -- -1"));
	free(sq_ok("kv set kv1 broken '{oops'"));
	free(sq_ok("kv set kv1 quoted '\"text\"'"));
	out = sq_ok("kv get kv1 cfg");
	cr_expect_str_eq(out, "{\"debug\":true, \"n\":[1,2]}\n");
	free(out);
	out = sq_ok("kv get kv1 name");
	cr_expect_str_eq(out, "\"alice\"\n");
	free(out);
	out = sq_ok("kv get kv1 num");
	cr_expect_str_eq(out, "42\n");
	free(out);
	out = sq_ok("kv get kv1 neg");
	cr_expect_str_eq(out, "-1\n");
	free(out);
	out = sq_ok("kv get kv1 broken");
	cr_expect_str_eq(out, "\"{oops\"\n");
	free(out);
	out = sq_ok("kv get kv1 quoted --json");
	cr_expect_str_eq(out, "\"text\"\n", "--json prints the value as stored");
	free(out);

	/* keys: one per line in byte order; PREFIX narrows them. */
	out = sq_ok("kv keys kv1");
	cr_expect_str_eq(out, "broken\ncfg\nname\nneg\nnum\nquoted\n");
	free(out);
	out = sq_ok("kv keys kv1 n");
	cr_expect_str_eq(out, "name\nneg\nnum\n");
	free(out);
	out = sq_ok("kv keys kv1 zzz");
	cr_expect_str_eq(out, "");
	free(out);
	j = sq_json("kv keys kv1 nu --json");
	cr_expect(json_is_array(j) && json_array_size(j) == 1 &&
	    strcmp(json_string_value(json_array_get(j, 0)), "num") == 0);
	json_decref(j);

	/* set and del commit; del makes get fail naming the key. */
	cr_expect_eq(version_of("kv1"), 7);
	out = sq_ok("kv del kv1 name");
	cr_expect_str_eq(out, "");
	free(out);
	cr_expect_eq(version_of("kv1"), 8);
	sq_refused("kv get kv1 name", "not_found", "'name'", NULL);
	out = sq_ok("kv keys kv1 n");
	cr_expect_str_eq(out, "neg\nnum\n");
	free(out);
	/* Overwrite. */
	free(sq_ok("kv set kv1 num 43"));
	out = sq_ok("kv get kv1 num");
	cr_expect_str_eq(out, "43\n");
	free(out);
	sq_refused("kv get nope k", "sandbox_not_found", "'nope'", NULL);
}

/*** Jobs on a sandbox ***/

Test(cli_sandbox, sh_session_carries_cwd_and_exports)
{
	char *out;

	free(sq_ok("sandbox create ss1"));
	out = sq_ok("sh --sandbox ss1 'mkdir -p src; cd src; export A=1'");
	cr_expect_str_eq(out, "");
	free(out);
	out = sq_ok("sh --sandbox ss1 'pwd; echo $A'");
	cr_expect_str_eq(out, "/workspace/src\n1\n");
	free(out);
	/* --no-persist starts from the session and saves nothing. */
	out = sq_ok("sh --sandbox ss1 --no-persist 'cd /tmp; export A=2; pwd'");
	cr_expect_str_eq(out, "/tmp\n");
	free(out);
	out = sq_ok("sh --sandbox ss1 'pwd; echo $A'");
	cr_expect_str_eq(out, "/workspace/src\n1\n");
	free(out);
}

Test(cli_sandbox, perm_hides_a_path_from_the_job)
{
	char *out, *err = NULL;
	int st;

	free(sq_ok("sandbox create pm1"));
	free(sq_ok("sh --sandbox pm1 'mkdir secret && echo pw > secret/p && echo o > open'"));
	st = sq(&out, &err, "sh --sandbox pm1 --perm '/secret/**=none' "
	    "'cat open; ls /workspace/secret'");
	cr_expect_eq(st, 2, "ls of a hidden folder: exit %d (%s)", st, err);
	cr_expect_str_eq(out, "o\n");
	cr_expect_not_null(strstr(err, "/workspace/secret"), "%s", err);
	free(out);
	free(err);
	/* Without the rule it is there. */
	out = sq_ok("sh --sandbox pm1 'ls /workspace/secret'");
	cr_expect_str_eq(out, "p\n");
	free(out);
	/* A rule that does not parse is refused before anything runs. */
	sq_refused("sh --sandbox pm1 --perm '/secret' true", "--perm", NULL);
	sq_refused("sh --sandbox pm1 --perm-preset bogus true", "--perm-preset 'bogus'", NULL);
}

Test(cli_sandbox, read_only_preset_commits_no_change)
{
	char before[4096], after[4096], *out, *err = NULL;
	json_t *j;
	int st;

	free(sq_ok("sandbox create ro1"));
	free(sq_ok("sh --sandbox ro1 'echo orig > f'"));
	tree_of("ro1", before, sizeof(before));
	st = sq(&out, &err, "sh --sandbox ro1 --perm-preset read-only "
	    "'echo changed > /workspace/f'");
	cr_expect_eq(st, 1, "the write should fail in the job: exit %d", st);
	cr_expect_not_null(strstr(err, "Read-only file system"), "%s", err);
	free(out);
	free(err);
	st = sq(&out, &err, "sh --sandbox ro1 --perm-preset read-only "
	    "'echo new > /workspace/g'");
	cr_expect_eq(st, 1);
	free(out);
	free(err);
	/*
	 * Nothing of the files is committed. (The job itself ended on its own,
	 * so docs/protocol.md has it commit its history row: the version moves
	 * by one per job, but the tree and the file stay as they were.)
	 */
	out = cat("ro1", "/f");
	cr_expect_str_eq(out, "orig\n");
	free(out);
	sq_refused("fs stat ro1 /g", "not_found", "/g", NULL);
	cr_expect_str_eq(tree_of("ro1", after, sizeof(after)), before);
	j = sq_json("sh --sandbox ro1 --perm-preset read-only --json "
	    "'echo x > /workspace/f 2>/dev/null || echo refused'");
	cr_expect_str_eq(json_string_value(json_object_get(j, "stdout")), "refused\n");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "changes"),
	    "modified")), 0);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "changes"),
	    "added")), 0);
	cr_expect_eq(json_array_size(json_object_get(j, "changed")), 0);
	json_decref(j);
	out = cat("ro1", "/f");
	cr_expect_str_eq(out, "orig\n");
	free(out);
}

Test(cli_sandbox, python_sees_what_an_earlier_sh_job_wrote)
{
	char *out;

	free(sq_ok("sandbox create py1"));
	free(sq_ok("sh --sandbox py1 'mkdir -p data && printf 6 > data/n'"));
	out = sq_ok("python --sandbox py1 'print(int(open(\"data/n\").read()) * 7)'");
	cr_expect_str_eq(out, "42\n");
	free(out);
	/* And python's own writes are committed for the next job. */
	free(sq_ok("python --sandbox py1 'open(\"/workspace/data/py\", \"w\").write(\"py\")'"));
	out = cat("py1", "/data/py");
	cr_expect_str_eq(out, "py");
	free(out);
}

/*** Bad input ***/

Test(cli_sandbox, bad_paths_and_ids_are_refused)
{
	put_text("x.txt", "x\n", 0644);
	free(sq_ok("sandbox create bi1"));
	sq_refused("fs put bi1 ../x x.txt", "'../x'", "..", NULL);
	sq_refused("fs put bi1 a/../../x x.txt", "'a/../../x'", "..", NULL);
	sq_refused("fs put bi1 /a/.. x.txt", "..", NULL);
	sq_refused("fs put bi1 \"$(printf 'bad\\001name')\" x.txt", "control character",
	    NULL);
	sq_refused("fs put bi1 \"$(printf 'bad\\nname')\" x.txt", "control character", NULL);
	sq_refused("fs cat bi1 \"$(printf 'a\\033b')\"", "control character", NULL);
	sq_refused("fs cat bi1 /", "root", NULL);
	cr_expect_eq(version_of("bi1"), 1, "a refused put committed");

	sq_refused("sandbox create a/b", "ID 'a/b'", "A-Z a-z 0-9", NULL);
	sq_refused("sandbox create ..", "ID '..'", NULL);
	sq_refused("sandbox create 'a b'", "ID 'a b'", NULL);
	sq_refused("sandbox create \"$(printf 'x%%0129d' 0)\"", "1 to 128", NULL);
	sq_refused("sandbox fork bi1 x/y", "DST 'x/y'", NULL);
	sq_refused("fs ls ../bi1", "ID '../bi1'", NULL);
	sq_refused("sandbox create", "expected ID", NULL);
	sq_refused("sandbox frobnicate x", "unknown sandbox command 'frobnicate'", NULL);
	sq_refused("sandbox ls --from .", "--from", "does not apply", NULL);
	{
		char *out = sq_ok("sandbox ls");

		cr_expect_null(strstr(out, "a/b"), "%s", out);
		free(out);
	}
}

/*** The /workspace alias ***/

/*
 * The fs verbs take /workspace as an alias of the sandbox's root ("sandq
 * help fs"; docs/protocol.md "Paths": "/workspace/a/b", "workspace/a/b"
 * and "/a/b" are the same path). libsandq normalises what its caller wrote
 * as the dispatcher will, so the alias is dropped once, not escaped.
 */
Test(cli_sandbox, fs_paths_accept_the_workspace_alias)
{
	char *out;

	free(sq_ok("sandbox create wa1"));
	free(sq_ok("sh --sandbox wa1 'mkdir d && echo f > d/f'"));
	out = cat("wa1", "/workspace/d/f");
	cr_expect_str_eq(out, "f\n");
	free(out);
	out = cat("wa1", "workspace/d/f");
	cr_expect_str_eq(out, "f\n");
	free(out);
	out = sq_ok("fs stat wa1 /workspace/d");
	cr_expect_not_null(strstr(out, "path: /d\n"), "%s", out);
	free(out);
	out = sq_ok("fs ls wa1 /workspace");
	cr_expect_not_null(strstr(out, "  d\n"), "%s", out);
	free(out);
	put_text("n.txt", "n\n", 0644);
	free(sq_ok("fs put wa1 /workspace/d/n n.txt"));
	out = cat("wa1", "/d/n");
	cr_expect_str_eq(out, "n\n");
	free(out);
}

/*
 * The same for --perm patterns (docs/protocol.md "perms": "A pattern
 * starting with /workspace/, or equal to /workspace, loses that
 * component").
 */
Test(cli_sandbox, perm_patterns_accept_the_workspace_alias)
{
	char *out, *err = NULL;
	int st;

	free(sq_ok("sandbox create wa2"));
	free(sq_ok("sh --sandbox wa2 'mkdir secret && echo pw > secret/p'"));
	st = sq(&out, &err, "sh --sandbox wa2 --perm '/workspace/secret/**=none' "
	    "'ls /workspace/secret'");
	cr_expect_eq(st, 2, "the hidden folder was listed: exit %d, stdout %s", st, out);
	cr_expect_str_eq(out, "");
	free(out);
	free(err);
	sq_refused("fs cat wa2 /secret/p --perm '/workspace/secret/**=none'", "not_found",
	    NULL);
}

/*
 * An import naming no limits is held to the ceilings, not to a default
 * job's: a tree of 1,500 files (past the normal preset's 1,024) is stored,
 * and a job asking for the files it needs runs on it.
 */
Test(cli_sandbox, an_import_bigger_than_a_default_workspace_is_stored)
{
	char *out;

	mk_dir("big", 0755);
	for (int i = 0; i < 1500; i++) {
		char rel[64];

		snprintf(rel, sizeof(rel), "big/f%04d", i);
		put_text(rel, "x\n", 0644);
	}
	out = sq_ok("sandbox create big --from big");
	free(out);
	out = sq_ok("--preset permissive sh --sandbox big 'ls | wc -l'");
	cr_expect(strstr(out, "1500") != NULL, "the job saw: %s", out);
	free(out);
}
