/*
 * cli_fs.c - the fs and kv verbs of sandq:
 *   sandq fs ls|cat|put|get|rm|stat
 *   sandq kv get|set|del|keys
 * Each is one op sent with cli_sandbox.c's helpers, but fs get, which is
 * several (fs.stat, fs.list, one fs.read per file) and writes what it
 * reads below a local folder. cli_sandbox.c parses the command line and
 * holds the manual pages that state the contract.
 *
 * SECURITY. The server's answers are not trusted to name safe local
 * paths. fs get writes below LOCALDIR only through directory fds opened
 * O_DIRECTORY|O_NOFOLLOW, one validated component at a time, with
 * O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat() and symlinkat(): a name with '/',
 * "..", or one already present is refused, symlinks are created and never
 * followed, so a hostile listing cannot write outside LOCALDIR.
 *
 * Sections: fs get, fs and kv verbs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../queue/payload.h"
#include "../store/agentfs.h"
#include "../store/workspace.h"
#include "cli.h"
#include "cli_sandbox_int.h"
#include "sandq.h"

#define GET_DEPTH_MAX AGENTFS_DEPTH_MAX	/* components below fs get's PATH */

/*** fs get ***/

/* What fs get wrote, for --json and the final modes. */
struct get_ctx {
	const struct sbx *s;
	struct sandq *c;
	const char *localdir;		/* for messages */
	int topfd;			/* the directory entries go into */
	uint64_t files, dirs, symlinks;
	struct get_dir {
		char *rel;		/* "" for the top itself */
		uint32_t mode;
		int64_t mtime;
	} *pending;			/* directories whose mode is set last */
	size_t npending;
};

/*
 * Splits rel ("a/b/c") into components in place, checking each with
 * workspace_name_is_valid(): an empty one, "." and "..", and bad UTF-8
 * are refused. Returns the count, or -EINVAL.
 */
static int
split_rel(char *rel, char **comps, int max)
{
	int n = 0;

	for (char *p = rel;;) {
		char *slash = strchr(p, '/');

		if (slash)
			*slash = '\0';
		if (n == max || !workspace_name_is_valid(p))
			return -EINVAL;
		comps[n++] = p;
		if (!slash)
			break;
		p = slash + 1;
	}
	return n;
}

/*
 * Opens the directory holding the last of n components, from topfd, one
 * component at a time with O_NOFOLLOW: a component that is (or became) a
 * symlink fails with ELOOP/ENOTDIR instead of leading elsewhere. Returns
 * an fd the caller closes, or -errno.
 */
static int
open_parent(int topfd, char **comps, int n)
{
	int fd = dup(topfd);

	if (fd < 0)
		return -errno;
	for (int i = 0; i < n - 1; i++) {
		int next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		int saved = errno;

		close(fd);
		if (next < 0)
			return -saved;
		fd = next;
	}
	return fd;
}

/* Sets a file's or directory's mtime (seconds) through its fd. */
static void
set_mtime(int fd, int64_t mtime)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = (time_t)mtime, .tv_nsec = 0 },
	};

	if (mtime > 0)
		(void)futimens(fd, ts);
}

/*
 * Fetches the sandbox file spath with fs.read and creates it as name in
 * dirfd: O_CREAT|O_EXCL|O_NOFOLLOW, so nothing present is overwritten or
 * written through. Returns 0 or an exit status.
 */
static int
get_file(struct get_ctx *g, int dirfd, const char *name, const char *spath,
    const char *shown, uint32_t mode, int64_t mtime)
{
	struct sandq_op_args a = { .sandbox = g->s->args[0], .path = spath };
	struct sandq_result *r = NULL;
	msgpack_unpacked u;
	const char *p = NULL;
	size_t len = 0;
	int fd, rc, status;

	if ((status = cli__call(g->s, g->c, "fs.read", &a, &r)) != 0)
		return status;
	msgpack_unpacked_init(&u);
	if (!cli__result_bytes(r, &u, &p, &len)) {
		status = cli__fail("fs get: the answer to fs.read %s holds no bytes", spath);
		goto out;
	}
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	    0600);
	if (fd < 0) {
		status = cli__fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
		    "already exists" : strerror(errno));
		goto out;
	}
	rc = write_all(fd, p ? p : "", len);
	if (rc == 0 && fchmod(fd, mode & 0777) < 0)
		rc = -errno;
	if (rc == 0)
		set_mtime(fd, mtime);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		status = cli__fail("%s/%s: %s", g->localdir, shown, strerror(-rc));
	else
		g->files++;
out:
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

/*
 * Creates one entry of the tree: e is an fs.list/fs.stat entry, rel its
 * path below the top ("" for the top itself, which then gets name). 0 or
 * an exit status.
 */
static int
get_entry(struct get_ctx *g, const json_t *e, const char *rel, const char *name)
{
	char *comps[GET_DEPTH_MAX + 1];
	char *buf = xstrdup(rel[0] ? rel : name);
	const char *type = cli__jstr(e, "type", "");
	const char *spath = cli__jstr(e, "path", NULL);
	const char *shown = rel[0] ? rel : name;
	uint32_t mode = (uint32_t)cli__jint(e, "mode");
	int n, dfd = -1, status = 0;

	if (spath == NULL) {
		status = cli__fail("fs get: an entry without a path");
		goto out;
	}
	if ((n = split_rel(buf, comps, GET_DEPTH_MAX)) < 0) {
		status = cli__fail("fs get: refusing the entry '%s': not a valid name below "
		    "%s", spath, g->localdir);
		goto out;
	}
	if ((dfd = open_parent(g->topfd, comps, n)) < 0) {
		status = cli__fail("%s/%s: its directory: %s", g->localdir, shown,
		    strerror(-dfd));
		goto out;
	}
	if (strcmp(type, "dir") == 0) {
		if (mkdirat(dfd, comps[n - 1], 0700) < 0) {
			status = cli__fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
			    "already exists" : strerror(errno));
			goto out;
		}
		g->pending = xreallocarray(g->pending, g->npending + 1,
		    sizeof(*g->pending));
		g->pending[g->npending].rel = xstrdup(shown);
		g->pending[g->npending].mode = mode;
		g->pending[g->npending++].mtime = cli__jint(e, "mtime");
		g->dirs++;
	} else if (strcmp(type, "symlink") == 0) {
		const char *target = cli__jstr(e, "target", NULL);

		/* The target is stored as given and never resolved here. */
		if (target == NULL || target[0] == '\0') {
			status = cli__fail("fs get: symlink %s has no target", spath);
			goto out;
		}
		if (symlinkat(target, dfd, comps[n - 1]) < 0) {
			status = cli__fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
			    "already exists" : strerror(errno));
			goto out;
		}
		g->symlinks++;
	} else if (strcmp(type, "file") == 0) {
		status = get_file(g, dfd, comps[n - 1], spath, shown, mode,
		    cli__jint(e, "mtime"));
	} else {
		cli_warn("fs get: skipping %s, a %s", spath, type);
	}
out:
	if (dfd >= 0)
		close(dfd);
	free(buf);
	return status;
}

/* Applies the directories' modes and mtimes, deepest first, once filled. */
static void
get_finish_dirs(struct get_ctx *g)
{
	char *comps[GET_DEPTH_MAX + 1];

	for (size_t i = g->npending; i-- > 0;) {
		struct get_dir *d = &g->pending[i];
		int n, pfd, fd;

		if (d->rel == NULL)
			continue;	/* the top itself: the caller's */
		n = split_rel(d->rel, comps, GET_DEPTH_MAX);
		if (n < 0 || (pfd = open_parent(g->topfd, comps, n)) < 0)
			continue;
		fd = openat(pfd, comps[n - 1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		close(pfd);
		if (fd < 0)
			continue;
		/* Owner write stays, so the caller can clean up a copy. */
		(void)fchmod(fd, (d->mode & 0777) | 0700);
		set_mtime(fd, d->mtime);
		close(fd);
	}
}

/* True if p names the sandbox's root: "/", "//", ".", "/workspace". */
static bool
path_is_root(const char *p)
{
	while (*p == '/' || (*p == '.' && (p[1] == '/' || p[1] == '\0')))
		p++;
	if (*p == '\0')
		return true;
	if (strncmp(p, "workspace", 9) != 0)
		return false;
	for (p += 9; *p == '/'; p++)
		;
	return *p == '\0';
}

int
cli__fs_get(struct sbx *s, struct sandq *c)
{
	const char *id = s->args[0], *path = s->args[1];
	struct get_ctx g = { .s = s, .c = c, .localdir = s->args[2], .topfd = -1 };
	struct sandq_op_args a = { .sandbox = id, .path = path };
	struct sandq_result *r = NULL;
	json_t *st = NULL, *list = NULL;
	char *localname = NULL;
	const char *spath, *type, *name;
	int rootfd, status;
	bool root = path_is_root(path);

	rootfd = open(g.localdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rootfd < 0) {
		int saved = errno;
		struct stat lst;

		if (lstat(g.localdir, &lst) == 0 && S_ISLNK(lst.st_mode))
			return cli__fail("%s: is a symlink (not followed); give the folder it "
			    "points to", g.localdir);
		return cli__fail("%s: %s", g.localdir, strerror(saved));
	}
	if (root) {
		st = json_pack("{s:s, s:s, s:i}", "path", "/", "type", "dir", "mode", 0755);
	} else {
		if ((status = cli__call(s, c, "fs.stat", &a, &r)) != 0)
			goto out;
		st = cli__result_data_json(r);
		sandq_result_free(r);
		r = NULL;
		if (!json_is_object(st)) {
			status = cli__fail("fs get: fs.stat %s answered without an entry", path);
			goto out;
		}
	}
	spath = cli__jstr(st, "path", NULL);
	type = cli__jstr(st, "type", "");
	if (spath == NULL || spath[0] != '/') {
		status = cli__fail("fs get: fs.stat %s answered without a path", path);
		goto out;
	}
	name = strrchr(spath, '/') + 1;
	if (!root && !workspace_name_is_valid(name)) {
		status = cli__fail("fs get: refusing the name of '%s'", spath);
		goto out;
	}
	if (strcmp(type, "dir") != 0) {
		g.topfd = rootfd;
		status = get_entry(&g, st, "", name);
		rootfd = -1;
		goto out_json;
	}
	if (root) {
		g.topfd = rootfd;
		rootfd = -1;
	} else {
		if (mkdirat(rootfd, name, 0700) < 0) {
			status = cli__fail("%s/%s: %s", g.localdir, name, errno == EEXIST ?
			    "already exists" : strerror(errno));
			goto out;
		}
		g.topfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (g.topfd < 0) {
			status = cli__fail("%s/%s: %s", g.localdir, name, strerror(errno));
			goto out;
		}
		g.dirs++;
		/* Messages name LOCALDIR/NAME/REL from here on. */
		xasprintf(&localname, "%s/%s", s->args[2], name);
		g.localdir = localname;
	}
	a.path = spath;
	a.recursive = true;
	if ((status = cli__call(s, c, "fs.list", &a, &r)) != 0)
		goto out;
	list = cli__result_data_json(r);
	sandq_result_free(r);
	r = NULL;
	if (!json_is_array(list)) {
		status = cli__fail("fs get: fs.list %s answered without a listing", spath);
		goto out;
	}
	{
		size_t blen = root ? 1 : strlen(spath) + 1, i;
		json_t *e;

		json_array_foreach(list, i, e) {
			const char *ep = cli__jstr(e, "path", "");

			/* Only what lies strictly below spath; the rest is refused. */
			if ((root && ep[0] != '/') || (!root &&
			    (strncmp(ep, spath, blen - 1) != 0 || ep[blen - 1] != '/')) ||
			    ep[blen] == '\0') {
				status = cli__fail("fs get: refusing the entry '%s', not below %s",
				    ep, spath);
				goto out;
			}
			if ((status = get_entry(&g, e, ep + blen, "")) != 0)
				goto out;
		}
	}
	if (!root) {
		g.pending = xreallocarray(g.pending, g.npending + 1, sizeof(*g.pending));
		memmove(g.pending + 1, g.pending, g.npending * sizeof(*g.pending));
		g.pending[0].rel = NULL;
		g.pending[0].mode = (uint32_t)cli__jint(st, "mode");
		g.pending[0].mtime = cli__jint(st, "mtime");
		g.npending++;
	}
out_json:
	if (status == 0) {
		get_finish_dirs(&g);
		if (g.npending && g.pending[0].rel == NULL) {
			(void)fchmod(g.topfd, (g.pending[0].mode & 0777) | 0700);
			set_mtime(g.topfd, g.pending[0].mtime);
		}
	}
	if (status == 0 && s->json)
		status = cli__print_json_line(json_pack("{s:s, s:I, s:I, s:I}", "path",
		    s->args[2], "files", (json_int_t)g.files, "dirs", (json_int_t)g.dirs,
		    "symlinks", (json_int_t)g.symlinks));
out:
	for (size_t i = 0; i < g.npending; i++)
		free(g.pending[i].rel);
	free(g.pending);
	free(localname);
	if (g.topfd >= 0)
		close(g.topfd);
	if (rootfd >= 0)
		close(rootfd);
	json_decref(st);
	json_decref(list);
	return status;
}

/*** fs and kv verbs ***/

static void
human_stat(const json_t *d)
{
	if (json_is_object(d))
		cli__print_entry(d);
}

/* fs ls: one line per entry; recursive listings show whole paths. */
static bool fs_ls_recursive;

static void
human_fs_ls(const json_t *d)
{
	size_t i;
	json_t *o;
	char t[32];

	json_array_foreach((json_t *)(uintptr_t)d, i, o) {
		bool link = json_object_get(o, "target") != NULL;

		printf("%-7s  %04o  %10" JSON_INTEGER_FORMAT "  %-20s  %s%s%s\n",
		    cli__jesc(o, "type", "?"), (unsigned)(cli__jint(o, "mode") & 07777),
		    cli__jint(o, "size"), cli__fmt_time_ms(t, sizeof(t), cli__jint(o, "mtime") * 1000),
		    cli__jesc(o, fs_ls_recursive ? "path" : "name", ""),
		    link ? " -> " : "", link ? cli__jesc(o, "target", "") : "");
	}
}

static void
human_lines(const json_t *d)
{
	size_t i;
	json_t *o;

	/* One key a line: a newline in a key must not make two. */
	json_array_foreach((json_t *)(uintptr_t)d, i, o)
		printf("%s\n", json_is_string(o) ? cli_escn(json_string_value(o),
		    json_string_length(o)) : "");
}

int
cli__fs_ls(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0],
	    .path = s->nargs > 1 ? s->args[1] : NULL, .recursive = s->recursive };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "fs.list", &a, &r)) != 0)
		return status;
	fs_ls_recursive = s->recursive;
	return cli__finish(s, r, human_fs_ls);
}

int
cli__fs_cat(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .path = s->args[1] };
	struct sandq_result *r = NULL;
	msgpack_unpacked u;
	const char *p = NULL;
	size_t len = 0;
	int status;

	if ((status = cli__call(s, c, "fs.read", &a, &r)) != 0)
		return status;
	msgpack_unpacked_init(&u);
	if (!cli__result_bytes(r, &u, &p, &len))
		status = cli__fail("fs cat: the answer holds no content");
	else
		status = cli__write_local("-", p, len);
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

int
cli__fs_put(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .path = s->args[1] };
	struct sandq_result *r = NULL;
	const char *local = s->args[2];
	uint8_t *data = NULL;
	size_t len = 0;
	struct stat st;
	int rc, status;

	if ((rc = cli_read_input(local, true, JOB_DATA_MAX, &data, &len)) < 0)
		return rc == -EFBIG ? cli__fail("%s: larger than %u bytes", local,
		    JOB_DATA_MAX) : cli__fail("%s: %s", local, strerror(-rc));
	/* The local file's permission bits, as cp(1) keeps them. */
	if (strcmp(local, "-") != 0 && stat(local, &st) == 0 && S_ISREG(st.st_mode))
		a.mode = st.st_mode & 0777;
	a.data = data;
	a.data_len = len;
	status = cli__call(s, c, "fs.write", &a, &r);
	free(data);
	if (status != 0)
		return status;
	return cli__finish(s, r, NULL);
}

int
cli__fs_rm(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .path = s->args[1],
	    .recursive = s->recursive };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "fs.delete", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, NULL);
}

int
cli__fs_stat(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .path = s->args[1] };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "fs.stat", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, human_stat);
}

int
cli__kv_get(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .key = s->args[1] };
	struct sandq_result *r = NULL;
	msgpack_unpacked u;
	const char *p = NULL;
	size_t len = 0;
	int status;

	if ((status = cli__call(s, c, "kv.get", &a, &r)) != 0)
		return status;
	/* The value is JSON text already: printed as stored, in both modes. */
	msgpack_unpacked_init(&u);
	if (!cli__result_bytes(r, &u, &p, &len)) {
		status = cli__fail("kv get: the answer holds no value");
	} else if (fwrite(p, 1, len, stdout) != len || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF) {
		status = cli__fail("writing standard output: %s", strerror(errno));
	}
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

int
cli__kv_set(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .key = s->args[1] };
	struct sandq_result *r = NULL;
	json_t *j = json_loads(s->args[2], JSON_DECODE_ANY, NULL);
	char *value = NULL;
	int status;

	/* Valid JSON goes as given; anything else as a JSON string. */
	if (j == NULL) {
		json_t *str = json_string(s->args[2]);

		if (str == NULL)
			return cli__usage(s, "VALUE is neither JSON nor UTF-8 text");
		value = json_dumps(str, JSON_ENCODE_ANY | JSON_COMPACT);
		json_decref(str);
	}
	json_decref(j);
	a.value = value ? value : s->args[2];
	status = cli__call(s, c, "kv.set", &a, &r);
	free(value);
	if (status != 0)
		return status;
	return cli__finish(s, r, NULL);
}

int
cli__kv_del(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .key = s->args[1] };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "kv.delete", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, NULL);
}

int
cli__kv_keys(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0],
	    .prefix = s->nargs > 1 ? s->args[1] : NULL };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "kv.keys", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, human_lines);
}
