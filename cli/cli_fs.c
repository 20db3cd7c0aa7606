/*
 * cli_fs.c - the fs and kv verbs of sandq:
 *   sandq fs ls|cat|put|get|rm|stat
 *   sandq kv get|set|del|keys
 * Each is one op sent with cli_sandbox.c's helpers, but fs get, which is
 * several (fs.stat, fs.list, one fs.read per file) and writes what it
 * reads below a local folder. cli_sandbox.c parses the command line;
 * cli_man.c holds the manual pages that state the contract.
 *
 * SECURITY. The server's answers are not trusted to name safe local
 * paths, nor a sandbox's links to point at safe ones. fs get writes below
 * LOCALDIR only through directory fds opened O_DIRECTORY|O_NOFOLLOW, one
 * validated component at a time, with O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat()
 * and symlinkat(): a name with '/', "..", a control character or a NUL,
 * one already present, or one below a symlink of the listing is refused,
 * and no symlink is ever followed, so a hostile listing cannot write
 * outside LOCALDIR (not even through a link it created a moment before).
 * What the copy holds once sandq is done is bounded too: by default no
 * symlink that leads outside the copy's top folder is created
 * (link_stays_inside(), the listing's own links followed), and the links
 * kept are resolved once more by the kernel, RESOLVE_BENEATH, against what
 * the folder already held (get_check_kept()). Those left out are named on
 * standard error and counted; --keep-symlinks keeps every link as stored.
 * This is the class of Judge0's CVE-2024-28185: an export whose links the
 * next tool on the host follows.
 *
 * Sections: fs get, fs and kv verbs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../libsandq/sandq.h"
#include "../proto/job.h"
#include "../workspace/workspace.h"
#include "cli_common.h"
#include "cli_sandbox_int.h"

#define GET_DEPTH_MAX AGENTFS_DEPTH_MAX	/* components below fs get's PATH */
#define GET_HOPS_MAX 40			/* links followed resolving one target, as the kernel */
#define GET_RESOLVE_MAX (2 * AGENTFS_PATH_MAX + 2)	/* bytes of a target being resolved */

/*** fs get ***/

/* A symlink of the listing. */
struct get_link {
	char *rel;			/* below the top */
	char *target;			/* as stored */
	bool created;			/* made, and to be checked against the host */
};

/* What fs get wrote, for --json and the final modes. */
struct get_ctx {
	const struct sbx *s;
	struct sandq *c;
	const char *localdir;		/* for messages */
	const char *top;		/* the copy's top folder, for messages */
	int topfd;			/* the directory entries go into */
	uint64_t files, dirs, symlinks;
	uint64_t links_skipped;		/* leading outside, not created */
	uint64_t links_outside;		/* leading outside, kept (--keep-symlinks) */
	json_t *skipped;		/* [{path, type, target}] of what was left out */
	struct get_link *links;		/* every symlink of the listing, by rel */
	size_t nlinks;
	struct get_dir {
		char *rel;		/* "" for the top itself */
		uint32_t mode;
		int64_t mtime;
	} *pending;			/* directories whose mode is set last */
	size_t npending;
};

/*
 * o[k] as a C string, or NULL when absent, not a string, or holding a NUL
 * byte: a name that is not what strlen() says is never used as a path.
 */
static const char *
jstr_whole(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return NULL;
	return json_string_value(v);
}

/*
 * Splits rel ("a/b/c") into components in place, checking each with
 * workspace_name_is_valid(): an empty one, "." and "..", control
 * characters and bad UTF-8 are refused. Returns the count, or -EINVAL.
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

static int
link_cmp(const void *a, const void *b)
{
	return strcmp(((const struct get_link *)a)->rel, ((const struct get_link *)b)->rel);
}

/* Adds a symlink of the listing (copies both strings). */
static void
link_add(struct get_ctx *g, const char *rel, const char *target)
{
	g->links = xreallocarray(g->links, g->nlinks + 1, sizeof(*g->links));
	g->links[g->nlinks].rel = xstrdup(rel);
	g->links[g->nlinks].target = xstrdup(target);
	g->links[g->nlinks++].created = false;
}

/* The listing's symlink at rel, or NULL. g->links is sorted. */
static struct get_link *
link_find(const struct get_ctx *g, const char *rel)
{
	struct get_link key = { .rel = (char *)(uintptr_t)rel };

	if (g->nlinks == 0)
		return NULL;
	return bsearch(&key, g->links, g->nlinks, sizeof(*g->links), link_cmp);
}

/* The listing's symlink that rel lies strictly below, or NULL. */
static const struct get_link *
link_above(const struct get_ctx *g, const char *rel)
{
	char buf[AGENTFS_PATH_MAX + 1];
	size_t n = strlen(rel);

	if (n > AGENTFS_PATH_MAX)
		return NULL;
	memcpy(buf, rel, n + 1);
	for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
		const struct get_link *l;

		*slash = '\0';
		if ((l = link_find(g, buf)) != NULL)
			return l;
	}
	return NULL;
}

/*
 * True if the symlink at rel (below the top) with this target resolves
 * below the top: the target is relative, and walking it from the link's
 * folder, through the listing's own symlinks (at most GET_HOPS_MAX of
 * them), never climbs above the top with "..". A name the listing does not
 * hold counts as a plain folder or file, so a dangling link inside stays
 * inside. Anything past the buffers' bounds counts as outside. This is
 * lexical: what the host folder already held is the kernel's check, after
 * the copy (get_check_kept()).
 */
static bool
link_stays_inside(const struct get_ctx *g, const char *rel, const char *target)
{
	char cur[AGENTFS_PATH_MAX + 1], todo[GET_RESOLVE_MAX], next[GET_RESOLVE_MAX];
	const char *slash = strrchr(rel, '/');
	size_t clen = slash ? (size_t)(slash - rel) : 0;
	int hops = 0;
	char *p;

	if (target[0] == '/' || clen > AGENTFS_PATH_MAX || strlen(target) >= sizeof(todo))
		return false;
	memcpy(cur, rel, clen);
	cur[clen] = '\0';
	strcpy(todo, target);
	p = todo;
	while (*p != '\0') {
		char *end = strchrnul(p, '/'), *rest = *end ? end + 1 : end;
		size_t n = (size_t)(end - p), at = clen;
		const struct get_link *l;

		if (n == 0 || (n == 1 && p[0] == '.')) {
			p = rest;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			char *up = strrchr(cur, '/');

			if (clen == 0)
				return false;	/* above the top */
			clen = up ? (size_t)(up - cur) : 0;
			cur[clen] = '\0';
			p = rest;
			continue;
		}
		if (clen + 1 + n > AGENTFS_PATH_MAX)
			return false;
		if (clen > 0)
			cur[clen++] = '/';
		memcpy(cur + clen, p, n);
		clen += n;
		cur[clen] = '\0';
		if ((l = link_find(g, cur)) == NULL) {
			p = rest;
			continue;
		}
		/* A link of the copy: its target goes on from the link's folder. */
		if (++hops > GET_HOPS_MAX || l->target[0] == '/')
			return false;
		clen = at;
		cur[clen] = '\0';
		if ((size_t)snprintf(next, sizeof(next), "%s/%s", l->target, rest) >=
		    sizeof(next))
			return false;
		strcpy(todo, next);
		p = todo;
	}
	return true;
}

/* Records an entry left out, for the summary and --json. */
static void
get_skip(struct get_ctx *g, const char *shown, const char *type, const char *target)
{
	json_t *o = json_pack("{s:s, s:s}", "path", shown, "type", type);

	if (o == NULL)
		return;
	if (target != NULL)
		json_object_set_new(o, "target", json_string(target));
	json_array_append_new(g->skipped, o);
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
		status = cli_fail("fs get: the answer to fs.read %s holds no bytes", spath);
		goto out;
	}
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	    0600);
	if (fd < 0) {
		status = cli_fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
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
		status = cli_fail("%s/%s: %s", g->localdir, shown, strerror(-rc));
	else
		g->files++;
out:
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

/*
 * Creates the symlink shown (below the top) as name in dfd, unless it
 * leads outside the top and --keep-symlinks was not given: then it is
 * named, counted and left out. 0 or an exit status.
 */
static int
get_symlink(struct get_ctx *g, int dfd, const char *name, const char *shown,
    const char *spath, const char *target)
{
	bool inside;

	if (target == NULL || target[0] == '\0')
		return cli_fail("fs get: symlink %s has no target", spath);
	inside = link_stays_inside(g, shown, target);
	if (!inside && !g->s->keep_symlinks) {
		cli_warn("fs get: left out %s/%s -> %s: it leads outside %s", g->localdir,
		    shown, target, g->top);
		get_skip(g, shown, "symlink", target);
		g->links_skipped++;
		return 0;
	}
	/* The target is stored as given and never resolved here. */
	if (symlinkat(target, dfd, name) < 0)
		return cli_fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
		    "already exists" : strerror(errno));
	g->symlinks++;
	if (!inside) {
		cli_warn("fs get: kept %s/%s -> %s, which leads outside %s "
		    "(--keep-symlinks)", g->localdir, shown, target, g->top);
		g->links_outside++;
	} else {
		struct get_link *l = link_find(g, shown);

		if (l != NULL)
			l->created = true;
	}
	return 0;
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
	const char *type = cli_jstr(e, "type", "");
	const char *spath = jstr_whole(e, "path");
	const char *shown = rel[0] ? rel : name;
	const struct get_link *above;
	uint32_t mode = (uint32_t)cli_jint(e, "mode");
	int n, dfd = -1, status = 0;

	if (spath == NULL) {
		status = cli_fail("fs get: refusing an entry without a path, or with a NUL "
		    "in it");
		goto out;
	}
	if ((n = split_rel(buf, comps, GET_DEPTH_MAX)) < 0) {
		status = cli_fail("fs get: refusing the entry '%s': not a valid name below "
		    "%s", spath, g->localdir);
		goto out;
	}
	/* No sandbox holds one: only a hostile listing, which stops here. */
	if ((above = link_above(g, shown)) != NULL) {
		status = cli_fail("fs get: refusing the entry '%s': it lies below the "
		    "symlink %s", spath, above->rel);
		goto out;
	}
	if ((dfd = open_parent(g->topfd, comps, n)) < 0) {
		status = cli_fail("%s/%s: its directory: %s", g->localdir, shown,
		    strerror(-dfd));
		goto out;
	}
	if (strcmp(type, "dir") == 0) {
		if (mkdirat(dfd, comps[n - 1], 0700) < 0) {
			status = cli_fail("%s/%s: %s", g->localdir, shown, errno == EEXIST ?
			    "already exists" : strerror(errno));
			goto out;
		}
		g->pending = xreallocarray(g->pending, g->npending + 1,
		    sizeof(*g->pending));
		g->pending[g->npending].rel = xstrdup(shown);
		g->pending[g->npending].mode = mode;
		g->pending[g->npending++].mtime = cli_jint(e, "mtime");
		g->dirs++;
	} else if (strcmp(type, "symlink") == 0) {
		status = get_symlink(g, dfd, comps[n - 1], shown, spath,
		    jstr_whole(e, "target"));
	} else if (strcmp(type, "file") == 0) {
		status = get_file(g, dfd, comps[n - 1], spath, shown, mode,
		    cli_jint(e, "mtime"));
	} else {
		cli_warn("fs get: left out %s, a %s", spath, type);
		get_skip(g, shown, type, NULL);
	}
out:
	if (dfd >= 0)
		close(dfd);
	free(buf);
	return status;
}

/*
 * Resolves every link fs get created, now that the copy is whole, with
 * the kernel's own walk confined to the top (openat2 RESOLVE_BENEATH): one
 * that escapes now does so through something the folder held before (a
 * root or single-entry copy goes into LOCALDIR itself), and is removed and
 * counted as left out. Dangling links and loops lead nowhere and stay.
 * Without openat2 (Linux before 5.6) the lexical check stands alone.
 * Returns 0, or an exit status if such a link could not be removed.
 */
static int
get_check_kept(struct get_ctx *g)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	char *comps[GET_DEPTH_MAX + 1];
	int status = 0;

	for (size_t i = 0; i < g->nlinks; i++) {
		struct get_link *l = &g->links[i];
		char *buf;
		long fd;
		int n, pfd = -1, rc = -EINVAL;

		if (!l->created)
			continue;
		fd = syscall(SYS_openat2, g->topfd, l->rel, &how, sizeof(how));
		if (fd >= 0) {
			close((int)fd);
			continue;
		}
		if (errno == ENOSYS)
			return 0;
		if (errno != EXDEV)
			continue;
		buf = xstrdup(l->rel);
		n = split_rel(buf, comps, GET_DEPTH_MAX);
		if (n > 0)
			rc = pfd = open_parent(g->topfd, comps, n);
		if (pfd >= 0) {
			rc = unlinkat(pfd, comps[n - 1], 0) == 0 ? 0 : -errno;
			close(pfd);
		}
		free(buf);
		if (rc < 0) {
			status = cli_fail("%s/%s -> %s leads outside %s through what it already "
			    "held, and could not be removed: %s", g->localdir, l->rel, l->target,
			    g->top, strerror(-rc));
			continue;
		}
		cli_warn("fs get: left out %s/%s -> %s: through what %s already held, it "
		    "leads outside it", g->localdir, l->rel, l->target, g->top);
		get_skip(g, l->rel, "symlink", l->target);
		g->symlinks--;
		g->links_skipped++;
	}
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
		if (n <= 0 || (pfd = open_parent(g->topfd, comps, n)) < 0)
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

/*
 * Collects the listing's symlinks (below spath, blen bytes with its '/')
 * for link_stays_inside(), before anything is created. A listing entry
 * outside spath is left to the main loop, which refuses it.
 */
static void
get_collect_links(struct get_ctx *g, const json_t *list, size_t blen)
{
	size_t i;
	json_t *e;

	json_array_foreach(list, i, e) {
		const char *ep = jstr_whole(e, "path"), *target = jstr_whole(e, "target");

		if (ep != NULL && target != NULL && strlen(ep) > blen &&
		    strcmp(cli_jstr(e, "type", ""), "symlink") == 0)
			link_add(g, ep + blen, target);
	}
	if (g->nlinks > 1)
		qsort(g->links, g->nlinks, sizeof(*g->links), link_cmp);
}

/* The summary on standard error, and --json on standard output. */
static int
get_report(struct get_ctx *g)
{
	if (g->links_skipped > 0)
		cli_warn("fs get: left out %" PRIu64 " symlink%s leading outside %s "
		    "(--keep-symlinks keeps them as stored)", g->links_skipped,
		    g->links_skipped == 1 ? "" : "s", g->top);
	if (g->links_outside > 0)
		cli_warn("fs get: --keep-symlinks: %" PRIu64 " symlink%s lead%s outside %s; "
		    "a program following %s reaches past it", g->links_outside,
		    g->links_outside == 1 ? "" : "s", g->links_outside == 1 ? "s" : "",
		    g->top, g->links_outside == 1 ? "it" : "them");
	if (!g->s->json)
		return 0;
	return cli_print_json_line(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:O}",
	    "path", g->s->args[2], "files", (json_int_t)g->files, "dirs",
	    (json_int_t)g->dirs, "symlinks", (json_int_t)g->symlinks,
	    "symlinks_skipped", (json_int_t)g->links_skipped, "symlinks_outside",
	    (json_int_t)g->links_outside, "skipped", g->skipped));
}

int
cli__fs_get(struct sbx *s, struct sandq *c)
{
	const char *id = s->args[0], *path = s->args[1];
	struct get_ctx g = { .s = s, .c = c, .localdir = s->args[2], .top = s->args[2],
	    .topfd = -1, .skipped = json_array() };
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

		json_decref(g.skipped);
		if (lstat(g.localdir, &lst) == 0 && S_ISLNK(lst.st_mode))
			return cli_fail("%s: is a symlink (not followed); give the folder it "
			    "points to", g.localdir);
		return cli_fail("%s: %s", g.localdir, strerror(saved));
	}
	if (root) {
		st = json_pack("{s:s, s:s, s:i}", "path", "/", "type", "dir", "mode", 0755);
	} else {
		if ((status = cli__call(s, c, "fs.stat", &a, &r)) != 0)
			goto out;
		st = cli_result_data_json(r);
		sandq_result_free(r);
		r = NULL;
		if (!json_is_object(st)) {
			status = cli_fail("fs get: fs.stat %s answered without an entry", path);
			goto out;
		}
	}
	spath = jstr_whole(st, "path");
	type = cli_jstr(st, "type", "");
	if (spath == NULL || spath[0] != '/') {
		status = cli_fail("fs get: fs.stat %s answered without a path", path);
		goto out;
	}
	name = strrchr(spath, '/') + 1;
	if (!root && !workspace_name_is_valid(name)) {
		status = cli_fail("fs get: refusing the name of '%s'", spath);
		goto out;
	}
	if (strcmp(type, "dir") != 0) {
		/* One entry, in LOCALDIR: its links are judged from there. */
		if (strcmp(type, "symlink") == 0 && jstr_whole(st, "target") != NULL)
			link_add(&g, name, jstr_whole(st, "target"));
		g.topfd = rootfd;
		rootfd = -1;
		status = get_entry(&g, st, "", name);
		goto out_json;
	}
	if (root) {
		g.topfd = rootfd;
		rootfd = -1;
	} else {
		if (mkdirat(rootfd, name, 0700) < 0) {
			status = cli_fail("%s/%s: %s", g.localdir, name, errno == EEXIST ?
			    "already exists" : strerror(errno));
			goto out;
		}
		g.topfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (g.topfd < 0) {
			status = cli_fail("%s/%s: %s", g.localdir, name, strerror(errno));
			goto out;
		}
		g.dirs++;
		/* Messages name LOCALDIR/NAME/REL from here on. */
		xasprintf(&localname, "%s/%s", s->args[2], name);
		g.localdir = localname;
		g.top = localname;
	}
	a.path = spath;
	a.recursive = true;
	if ((status = cli__call(s, c, "fs.list", &a, &r)) != 0)
		goto out;
	list = cli_result_data_json(r);
	sandq_result_free(r);
	r = NULL;
	if (!json_is_array(list)) {
		status = cli_fail("fs get: fs.list %s answered without a listing", spath);
		goto out;
	}
	{
		size_t blen = root ? 1 : strlen(spath) + 1, i;
		json_t *e;

		get_collect_links(&g, list, blen);
		json_array_foreach(list, i, e) {
			const char *ep = cli_jstr(e, "path", "");

			/* Only what lies strictly below spath; the rest is refused. */
			if ((root && ep[0] != '/') || (!root &&
			    (strncmp(ep, spath, blen - 1) != 0 || ep[blen - 1] != '/')) ||
			    ep[blen] == '\0') {
				status = cli_fail("fs get: refusing the entry '%s', not below %s",
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
		g.pending[0].mode = (uint32_t)cli_jint(st, "mode");
		g.pending[0].mtime = cli_jint(st, "mtime");
		g.npending++;
	}
out_json:
	if (status == 0)
		status = get_check_kept(&g);
	if (status == 0) {
		get_finish_dirs(&g);
		if (g.npending && g.pending[0].rel == NULL) {
			(void)fchmod(g.topfd, (g.pending[0].mode & 0777) | 0700);
			set_mtime(g.topfd, g.pending[0].mtime);
		}
		status = get_report(&g);
	}
out:
	for (size_t i = 0; i < g.npending; i++)
		free(g.pending[i].rel);
	free(g.pending);
	for (size_t i = 0; i < g.nlinks; i++) {
		free(g.links[i].rel);
		free(g.links[i].target);
	}
	free(g.links);
	free(localname);
	if (g.topfd >= 0)
		close(g.topfd);
	if (rootfd >= 0)
		close(rootfd);
	json_decref(g.skipped);
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
		    cli_jesc(o, "type", "?"), (unsigned)(cli_jint(o, "mode") & 07777),
		    cli_jint(o, "size"), cli_fmt_time_ms(t, sizeof(t), cli_jint(o, "mtime") * 1000),
		    cli_jesc(o, fs_ls_recursive ? "path" : "name", ""),
		    link ? " -> " : "", link ? cli_jesc(o, "target", "") : "");
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
		status = cli_fail("fs cat: the answer holds no content");
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
		return rc == -EFBIG ? cli_fail("%s: larger than %u bytes", local,
		    JOB_DATA_MAX) : cli_fail("%s: %s", local, strerror(-rc));
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
		status = cli_fail("kv get: the answer holds no value");
	} else if (fwrite(p, 1, len, stdout) != len || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF) {
		status = cli_fail("writing standard output: %s", strerror(errno));
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
