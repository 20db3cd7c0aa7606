/*
 * persist.c - a persistent sandbox's snapshot inside its init: materialised
 * into /workspace before the job, captured back after it.
 *
 * Both directions run in the sandbox's init, as the sandbox's user inside
 * its namespaces: the worker never walks a tree a job has had its hands
 * on. The worker hands init the head as two sealed memfds, an image with
 * the spec and a patch of 4 KiB blocks over it with the base's key
 * (agentfs/patch.h); init opens them together without copying either
 * (agentfs_open_cow()), captures into that handle in place, and hands back
 * the new cumulative patch, again a sealed memfd. A job costs what it
 * changed: no step copies or reads the whole snapshot.
 *
 * The kept base (run_dir/base, see "The kept base" below) holds the last
 * snapshot materialised on this worker. A job on the same head and rules
 * gets /workspace as an overlay on it; only the upper layer is read back,
 * and after the commit init applies the kept changes to the base.
 *
 * Path rules (workspace/perms.h, docs/paths.md) are enforced twice:
 *  - by what is materialised and how: `none` paths are not written at all,
 *    `view` files only with their size (sparse zeros, mode 0), and every
 *    subtree whose level is below write is bind-mounted read-only over
 *    itself (a write subtree below it is bound read-write again), so the
 *    job can neither change, chmod, rename nor unlink it. Symlinks cannot
 *    be mount points: their rule is kept at commit only;
 *  - at commit: workspace_capture_rules() keeps every path below write
 *    exactly as the snapshot had it, and lists what it refused.
 *
 * The shell session (sh jobs only): the script is prefixed, on its first
 * line so line numbers stay the same, with an EXIT trap written in bash
 * builtins only (no fork) that saves $PWD and every exported variable to
 * /tmp/.sandq-session. Init reads that file back (no symlink followed,
 * bounded) after the job and keeps it in the snapshot's sandq_session
 * table; the next sh job on the sandbox starts there unless it sets cwd or
 * env itself. A script that replaces its shell (exec), or a job killed,
 * saves nothing, and the session stays as it was.
 *
 * A session is data one job leaves for another, so it never crosses path
 * rules: it is saved with the fingerprint of the rules of the job that
 * saved it (the worker's SHA-256 of perms_canonical(), what the matcher
 * enforces, handed over with the base's key), and a job under other
 * rules, or a session without a fingerprint, starts fresh (its history
 * row says "session": "not_restored"). Otherwise a job that may
 * not read /secret could export BASH_ENV=/workspace/evil.sh and have it
 * run in the operator's next full-access job, or a full-access job's
 * exports (a token read from a hidden file) would reach a restricted one.
 * Whatever the rules, variables that make a shell, the loader, libc or an
 * interpreter run code the next command does not name (BASH_ENV, LD_*,
 * PYTHON*, GIT_*, session_deny[]) are dropped when the session is read
 * back and again when it is applied, which old snapshots need.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"
#include "internal.h"

#define PERSIST_MOUNTS_MAX 1024		/* bind mounts path rules may need */
#define SESSION_FILE "/tmp/.sandq-session"
#define SESSION_MAX (1024 * 1024)	/* bytes of a saved session */
#define BASE_TMPL "tmpl"		/* the kept base's template, under it */

/*
 * The EXIT trap that saves the session: one line, ending in "; ". The
 * exported variables' names come from `compgen -e` through a file in the
 * job's /tmp (a builtin writing to a file: no fork), about 1 ms of bash's
 * CPU less per job than testing every variable's attributes did
 * (docs/decisions.md); nothing is saved if that file cannot be written.
 */
#define SESSION_NAMES "/tmp/.sandq-session-names"
static const char session_trap[] =
	"__sandq_session() { local - __n __a; set +eu; "
	"builtin compgen -e >|" SESSION_NAMES " 2>/dev/null || return 0; "
	"builtin mapfile -t __a <" SESSION_NAMES " 2>/dev/null || return 0; "
	"{ builtin printf 'cwd=%s\\0' \"$PWD\"; for __n in \"${__a[@]}\"; do "
	"builtin printf 'env=%s=%s\\0' \"$__n\" \"${!__n}\"; done; } "
	">" SESSION_FILE " 2>/dev/null; }; trap '__sandq_session || :' EXIT; ";

/*** Mapping the snapshot ***/

/*
 * The job's snapshot: the worker's image of it (snapfd) with a patch of
 * the blocks rewritten since (ps->patchfd, or none), both sealed memfds,
 * mapped shared and read-only and opened together without a copy
 * (agentfs_open_cow()). Changes made through v->fs stay in init's memory
 * as blocks; the cumulative patch is what goes back to the worker.
 */
struct snapview {
	struct agentfs *fs;
	void *img, *patch;
	size_t img_len, patch_len;
};

static int
map_sealed(int fd, void **map, size_t *len, struct err *e)
{
	struct stat st;

	*map = MAP_FAILED;
	*len = 0;
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0)
		return err_set(e, -errno, "snapshot: %s", strerror(errno));
	if (st.st_size <= 0 || (uint64_t)st.st_size > AGENTFS_BLOB_MAX)
		return err_set(e, -EBADMSG, "snapshot: bad size %lld", (long long)st.st_size);
	*map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED)
		return err_set(e, -errno, "snapshot: mmap: %s", strerror(errno));
	*len = (size_t)st.st_size;
	return 0;
}

static void
snapshot_view_close(struct snapview *v)
{
	agentfs_close(v->fs);
	v->fs = NULL;
	if (v->img != MAP_FAILED)
		munmap(v->img, v->img_len);
	if (v->patch != MAP_FAILED)
		munmap(v->patch, v->patch_len);
	v->img = v->patch = MAP_FAILED;
}

static int
snapshot_view(int snapfd, int patchfd, struct snapview *v, struct err *e)
{
	int rc;

	v->fs = NULL;
	v->img = v->patch = MAP_FAILED;
	if ((rc = map_sealed(snapfd, &v->img, &v->img_len, e)) < 0 ||
	    (rc = map_sealed(patchfd, &v->patch, &v->patch_len, e)) < 0 ||
	    (rc = agentfs_open_cow(v->img, v->img_len, v->patch != MAP_FAILED ? v->patch :
	    NULL, v->patch_len, &v->fs, e)) < 0)
		snapshot_view_close(v);
	return rc;
}

/*** What a session may carry ***/

/* A name or a prefix no session carries; nocase for tools that read it so. */
struct deny {
	const char *name;	/* the variable, or the start of its name */
	bool prefix;		/* name is a prefix */
	bool nocase;		/* compared without case (npm reads them so) */
};

#define X(n) { n, false, false }
#define P(n) { n, true, false }
#define PI(n) { n, true, true }

/*
 * Variables a saved session never carries, whatever the rules: each makes
 * a shell, the loader, libc, an interpreter or a tool run or load code, or
 * read a file that names code, without the next job's command naming it.
 * docs/security.md gives the reason for each group. The guarantee is the
 * rules' fingerprint (a session never crosses rules); this list keeps
 * sandq from running a file of the workspace implicitly even under the
 * same rules.
 */
static const struct deny session_deny[] = {
	/* Shells: start-up files, prompts, options, function imports. */
	X("BASH_ENV"), X("ENV"), X("PROMPT_COMMAND"), X("PS0"), X("PS1"),
	X("PS2"), X("PS3"), X("PS4"), X("SHELLOPTS"), X("BASHOPTS"),
	X("IFS"), P("BASH_FUNC_"), X("BASH_LOADABLES_PATH"),
	X("INPUTRC"), X("ZDOTDIR"), X("FPATH"),
	/* bash -c sources ~/.bashrc when it thinks sshd started it. */
	X("SSH_CLIENT"), X("SSH2_CLIENT"),
	/* The loader and glibc: its list for setuid programs (unsecvars.h). */
	P("LD_"), P("MALLOC_"), X("GLIBC_TUNABLES"),
	X("GCONV_PATH"), X("GETCONF_DIR"), X("HOSTALIASES"), X("LOCALDOMAIN"),
	X("LOCPATH"), X("NIS_PATH"), X("NLSPATH"), X("RESOLV_HOST_CONF"),
	X("RES_OPTIONS"), X("TMPDIR"), X("TZDIR"), X("ARGP_HELP_FMT"),
	X("DATEMSK"), X("GMON_OUT_PREFIX"), X("HESIOD_CONFIG"), X("HES_DOMAIN"),
	/* Interpreters: start-up code, module paths, options. */
	P("PYTHON"), P("PERL"), P("RUBY"), P("GEM_"),
	P("BUNDLE_"), X("NODE_OPTIONS"), X("NODE_PATH"),
	X("NODE_REPL_EXTERNAL_MODULE"), PI("NPM_CONFIG_"),
	P("LUA_"), X("JAVA_TOOL_OPTIONS"), X("_JAVA_OPTIONS"),
	X("JDK_JAVA_OPTIONS"), X("CLASSPATH"),
	/* Tools: commands they run, config that loads modules. */
	P("GIT_"), X("EDITOR"), X("VISUAL"), X("PAGER"), X("MANPAGER"),
	X("LESSOPEN"), X("LESSCLOSE"), X("BROWSER"), X("SSH_ASKPASS"),
	X("SUDO_ASKPASS"), X("OPENSSL_CONF"), X("OPENSSL_ENGINES"),
	X("OPENSSL_MODULES"),
};

#undef X
#undef P
#undef PI

/* Whether the n bytes at name are a variable no session carries. */
static bool
session_var_denied(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(session_deny) / sizeof(session_deny[0]); i++) {
		const struct deny *d = &session_deny[i];
		size_t l = strlen(d->name);

		if (d->prefix ? n < l : n != l)
			continue;
		if (d->nocase ? strncasecmp(name, d->name, l) == 0 :
		    memcmp(name, d->name, l) == 0)
			return true;
	}
	return false;
}

/*** Marks: the bind mounts path rules need ***/

/* Marks as text, one "L /path\n" per entry (L the level's digit); names
 * hold no control character, so a line is a path. */
struct marks {
	char *buf;
	size_t len;
	unsigned n;
	struct err *e;
};

/* Records one mark; they are mounted once /workspace stands. */
static int
mark_cb(const char *path, enum perm_level level, enum agentfs_kind kind, void *arg)
{
	struct marks *mk = arg;
	char *line = NULL;
	int n;

	if (kind == AGENTFS_SYMLINK)
		return 0;	/* cannot be a mount point; enforced at commit */
	if (++mk->n > PERSIST_MOUNTS_MAX)
		return err_set(mk->e, -E2BIG, "path rules: more than %d paths need "
		    "their own protection; use broader rules", PERSIST_MOUNTS_MAX);
	n = xasprintf(&line, "%d %s\n", (int)level, path);
	mk->buf = xreallocarray(mk->buf, mk->len + (size_t)n + 1, 1);
	memcpy(mk->buf + mk->len, line, (size_t)n + 1);
	mk->len += (size_t)n;
	free(line);
	return 0;
}

/* Binds each marked subtree of ws (the sandbox's files) over itself,
 * read-only or read-write by its level, parents first (the order they
 * were recorded). */
static int
marks_mount(const char *buf, size_t len, const char *ws, struct err *e)
{
	char where[AGENTFS_PATH_MAX + JOB_ROOT_DIR_MAX + 16];
	size_t wslen = strlen(ws);

	for (size_t off = 0; off < len;) {
		const char *line = buf + off, *nl = memchr(line, '\n', len - off);
		unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
		size_t l = nl ? (size_t)(nl - line) : len - off, plen = l - 2;

		if (l < 3 || line[0] < '0' || line[0] > '9' || line[1] != ' ' ||
		    line[2] != '/' || plen > AGENTFS_PATH_MAX)
			return err_set(e, -EBADMSG, "path rules: bad mark record");
		off += l + 1;
		/* "/" is ws itself. */
		snprintf(where, sizeof(where), "%s%.*s", ws, plen == 1 ? 0 : (int)plen,
		    line + 2);
		if (line[0] - '0' < (int)PERM_WRITE)
			flags |= MS_RDONLY;
		if (mount(where, where, NULL, MS_BIND, NULL) < 0)
			return err_set(e, -errno, "path rules: bind %s: %s", where + wslen,
			    strerror(errno));
		if (mount(NULL, where, NULL, flags, NULL) < 0)
			return err_set(e, -errno, "path rules: protect %s: %s", where + wslen,
			    strerror(errno));
	}
	return 0;
}

/*** The kept base ***/

/*
 * run_dir/base, a tmpfs of the worker's that outlives each sandbox, keeps
 * the last snapshot this worker materialised, under the rules of the job
 * it was for, as the lower layer of the next job's /workspace:
 *   tree/   the snapshot materialised (workspace_materialise_rules())
 *   marks   its mark records (struct marks)
 *   cwd, env, rules  its saved shell session and the fingerprint of the
 *           rules it was saved under (empty: none)
 *   state   "KEY\nBYTES ENTRIES\n": which snapshot under which rules
 *           (the worker's key), and its size for the tmpfs above it
 * state is written last (renamed into place) and removed first: a base
 * without it is rebuilt, so one left half written by a killed init is
 * never used. Only inits write it, one at a time (the worker runs one
 * sandbox's job at a time, and waits for an updating init to exit).
 *
 * BASE_TMPL/ (the template) has the same files, for a snapshot several
 * sandboxes start from (the worker says so: its head is another
 * sandbox's too, as after sandbox.fork or a create from a snapshot the
 * tenant stores). A job committing on such a head would otherwise carry
 * the base off to its own new head, and the next sandbox starting from it
 * would materialise it again; instead the tree moves (a rename) to the
 * template and the base becomes a copy of it (workspace_copy_tree(), on
 * tmpfs, no decoding) that the job's changes are applied to. A job whose
 * key only the template holds runs on the template's tree as its lower
 * layer, and the base is made from it the same way after its commit. The
 * template is never written while it holds a key: only the base is. No
 * file is shared between the two (a hard link would show the job a link
 * count of 2).
 */

/* Writes name under dirfd atomically: a temporary file renamed over it. */
static int
base_put(int dirfd, const char *name, const void *data, size_t len, struct err *e)
{
	char tmp[64];
	int fd, rc;

	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, -errno, "base: %s: %s", name, strerror(errno));
	rc = write_all(fd, data, len);
	close(fd);
	if (rc < 0 || renameat(dirfd, tmp, dirfd, name) < 0)
		return err_set(e, rc < 0 ? rc : -errno, "base: %s: %s", name,
		    strerror(rc < 0 ? -rc : errno));
	return 0;
}

/* Reads name under dirfd (at most max bytes) into a NUL-terminated buffer. */
static char *
base_get(int dirfd, const char *name, size_t max, size_t *len)
{
	struct stat st;
	char *buf;
	size_t n = 0;
	ssize_t r;
	int fd;

	*len = 0;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return NULL;
	}
	buf = xmalloc((size_t)st.st_size + 1);
	while (n < (size_t)st.st_size && (r = read(fd, buf + n, (size_t)st.st_size - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* Whether the base (or the template, dirfd) holds key; its size then in
 * *bytes and *entries. */
static bool
base_holds(int dirfd, const char *key, uint64_t *bytes, uint64_t *entries)
{
	size_t len, klen = strlen(key);
	char *st = dirfd >= 0 ? base_get(dirfd, "state", 4096, &len) : NULL;
	bool ok;
	unsigned long long b, n;

	ok = st != NULL && len > klen && memcmp(st, key, klen) == 0 && st[klen] == '\n' &&
	    sscanf(st + klen + 1, "%llu %llu", &b, &n) == 2;
	free(st);
	if (ok) {
		*bytes = b;
		*entries = n;
	}
	return ok;
}

/* Saves what a job on the base needs besides the tree: session, state. */
static int
base_seal(const struct persist *ps, struct agentfs *fs, const char *key,
    struct err *e)
{
	struct err ignore = { 0 };
	uint64_t bytes = 0, entries = 0;
	const char *names[] = { "cwd", "env", "rules" };
	char *state = NULL;
	int rc = 0, n;

	for (int i = 0; i < 3 && rc == 0; i++) {
		void *val = NULL;
		size_t len = 0;

		if (agentfs_session_get(fs, names[i], &val, &len, &ignore) < 0)
			len = 0;
		rc = base_put(ps->basefd, names[i], val != NULL ? val : "", len, e);
		free(val);
	}
	if (rc == 0)
		rc = agentfs_usage(fs, &bytes, &entries, e);
	if (rc < 0)
		return rc;
	n = xasprintf(&state, "%s\n%llu %llu\n", key, (unsigned long long)bytes,
	    (unsigned long long)entries);
	rc = base_put(ps->basefd, "state", state, (size_t)n, e);
	free(state);
	return rc;
}

/* Empties base/tree, or creates it. */
static int
base_clear(struct persist *ps, struct err *e)
{
	int rc;

	if (ps->treefd >= 0)
		close(ps->treefd);
	ps->treefd = -1;
	if ((rc = workspace_remove_at(ps->basefd, "tree", e)) < 0)
		return rc;
	if (mkdirat(ps->basefd, "tree", 0755) < 0)
		return err_set(e, -errno, "base: mkdir tree: %s", strerror(errno));
	ps->treefd = openat(ps->basefd, "tree", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (ps->treefd < 0)
		return err_set(e, -errno, "base: open tree: %s", strerror(errno));
	return 0;
}

/* Materialises fs into an emptied base under p, then seals it as key. */
static int
base_rebuild(struct persist *ps, struct agentfs *fs, const struct perms *p,
    struct marks *mk, const char *key, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	int rc;

	(void)unlinkat(ps->basefd, "state", 0);
	if ((rc = base_clear(ps, e)) < 0 ||
	    (rc = workspace_materialise_rules(fs, ps->treefd, &lim, p, mark_cb, mk, e)) < 0 ||
	    (rc = base_put(ps->basefd, "marks", mk->buf ? mk->buf : "", mk->len, e)) < 0)
		return rc;
	return base_seal(ps, fs, key, e);
}

/* base/BASE_TMPL, opened on first use; -1 when there is none. */
static int
tmpl_open(struct persist *ps)
{
	if (ps->tmplfd < 0 && ps->basefd >= 0)
		ps->tmplfd = openat(ps->basefd, BASE_TMPL, O_RDONLY | O_DIRECTORY |
		    O_NOFOLLOW | O_CLOEXEC);
	return ps->tmplfd;
}

/* Copies file name from dirfd src to dirfd dst (a base's small files). */
static int
base_file_copy(int src, int dst, const char *name, struct err *e)
{
	size_t len = 0;
	char *buf = base_get(src, name, (size_t)PERSIST_MOUNTS_MAX *
	    (AGENTFS_PATH_MAX + 4), &len);
	int rc;

	if (buf == NULL)
		return err_set(e, -ENOENT, "base: %s: cannot read it", name);
	rc = base_put(dst, name, buf, len, e);
	free(buf);
	return rc;
}

/*
 * The base, still sealed as its key (state: its state file's text),
 * becomes the template: the template there was goes, the tree moves over
 * (a rename, on the same tmpfs) with its marks and session, and the
 * template is sealed last. base/tree is gone after it.
 */
static int
tmpl_take(struct persist *ps, const char *state, size_t statelen, struct err *e)
{
	static const char *const names[] = { "marks", "cwd", "env", "rules" };
	int rc;

	/* Unsealed first: a template half removed is never taken. */
	if (tmpl_open(ps) >= 0) {
		(void)unlinkat(ps->tmplfd, "state", 0);
		close(ps->tmplfd);
		ps->tmplfd = -1;
	}
	if ((rc = workspace_remove_at(ps->basefd, BASE_TMPL, e)) < 0)
		return rc;
	if (mkdirat(ps->basefd, BASE_TMPL, 0700) < 0 || tmpl_open(ps) < 0)
		return err_set(e, -errno, "base: make the template: %s", strerror(errno));
	if (renameat(ps->basefd, "tree", ps->tmplfd, "tree") < 0)
		return err_set(e, -errno, "base: move the tree: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if ((rc = base_file_copy(ps->basefd, ps->tmplfd, names[i], e)) < 0)
			return rc;
	return base_put(ps->tmplfd, "state", state, statelen, e);
}

/* base/tree (and its marks) made anew as a copy of the template's. */
static int
base_from_tmpl(struct persist *ps, struct err *e)
{
	int rc, src;

	if ((rc = base_clear(ps, e)) < 0)
		return rc;
	src = openat(ps->tmplfd, "tree", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (src < 0)
		return err_set(e, -errno, "base: open the template: %s", strerror(errno));
	rc = workspace_copy_tree(src, ps->treefd, e);
	close(src);
	if (rc == 0)
		rc = base_file_copy(ps->tmplfd, ps->basefd, "marks", e);
	return rc;
}

/*
 * /workspace as an overlay: the base's tree below, the job's writes on a
 * fresh tmpfs above (its upper layer kept open in ps for the capture). The
 * tmpfs is mounted on /workspace first and the overlay over it, so the
 * layers' folders are out of the job's reach. Returns 1 when the overlay
 * stands, 0 when this kernel cannot do it (no user xattrs on tmpfs, no
 * overlayfs in a user namespace: the caller materialises /workspace
 * itself), or -errno.
 */
static int
overlay_mount(struct persist *ps, const struct job_limits *l, uint64_t bytes,
    uint64_t entries, struct err *e)
{
	char opts[2 * JOB_ROOT_DIR_MAX + 128], upper[JOB_ROOT_DIR_MAX + 8];
	char work[JOB_ROOT_DIR_MAX + 8];
	int fd, rc;

	/* The tree through the base's mount under /workspace, before the
	 * job's tmpfs covers it: a layer must be a mount of this namespace. */
	fd = open(ps->on_tmpl ? "/workspace/" BASE_TMPL "/tree" : "/workspace/tree",
	    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, -errno, "overlay: open the base: %s", strerror(errno));
	close(ps->treefd);
	ps->treefd = fd;
	if ((rc = mount_job_tmpfs(l, bytes + entries * 4096, entries, ps->ws, e)) < 0)
		return rc;
	snprintf(upper, sizeof(upper), "%s/.u", ps->ws);
	snprintf(work, sizeof(work), "%s/.w", ps->ws);
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0755) < 0)
		return err_set(e, -errno, "overlay: mkdir: %s", strerror(errno));
	/* An overlay in a user namespace keeps its whiteouts and opaque
	 * folders in user xattrs of the upper layer. */
	if (setxattr(work, "user.sandq", "1", 1, 0) < 0)
		goto out_plain;
	/* ws holds no ',', ':' or '\\' (proto/path.h): the options read as meant. */
	snprintf(opts, sizeof(opts), "lowerdir=/proc/self/fd/%d,upperdir=%s,"
	    "workdir=%s,userxattr", ps->treefd, upper, work);
	if ((ps->upperfd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0)
		return err_set(e, -errno, "overlay: open upper: %s", strerror(errno));
	if (mount("overlay", ps->ws, "overlay", MS_NOSUID | MS_NODEV, opts) == 0)
		return 1;
	close(ps->upperfd);
	ps->upperfd = -1;
out_plain:
	if (rmdir(upper) < 0 || rmdir(work) < 0)
		return err_set(e, -errno, "overlay: rmdir: %s", strerror(errno));
	return 0;
}

/*** Materialise ***/

/*
 * Splits a saved "K=V\0K=V\0" environment into the job's env array,
 * without the variables no session carries: a snapshot saved before they
 * were dropped at capture may still hold them.
 */
static void
session_env_apply(struct job *j, const char *buf, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += buf[i] == '\0';
	if (n == 0 || n > JOB_ENV_MAX)
		return;
	j->env = xcalloc(n + 1, sizeof(*j->env));
	j->nenv = 0;
	for (size_t off = 0; off < len && j->nenv < n;) {
		const char *kv = buf + off, *eq = strchr(kv, '=');
		size_t l = strlen(kv);

		off += l + 1;
		if (eq == NULL || session_var_denied(kv, (size_t)(eq - kv)))
			continue;
		j->env[j->nenv++] = xstrdup(kv);
	}
	if (j->nenv == 0) {
		free(j->env);
		j->env = NULL;
	}
}

/*
 * Whether a saved session whose rules fingerprint is rules (len bytes as
 * saved, or NULL) may start a job whose rules have fingerprint mine: only
 * when they are equal. A session saved without a fingerprint (by an older
 * sandq) counts as saved under other rules.
 */
static bool
session_same_rules(const char *rules, size_t len, const char *mine)
{
	return rules != NULL && len == SANDBOX_RULES_FP_LEN &&
	    strlen(mine) == SANDBOX_RULES_FP_LEN &&
	    memcmp(rules, mine, SANDBOX_RULES_FP_LEN) == 0;
}

/* The saved session (cwd, env: owned, may be NULL) applied to an sh job. */
static void
session_apply(struct job *j, char *cwd, size_t cwdlen, const char *env, size_t envlen)
{
	struct stat st;

	/* A directory that is gone (or was in /tmp) means the sandbox's files. */
	if (j->cwd == NULL && cwd != NULL && cwdlen > 0 && cwdlen <= JOB_PATH_MAX &&
	    cwd[0] == '/' && strlen(cwd) == cwdlen && stat(cwd, &st) == 0 &&
	    S_ISDIR(st.st_mode)) {
		j->cwd = cwd;
		cwd = NULL;
	}
	free(cwd);
	if (j->env == NULL && env != NULL && envlen > 0)
		session_env_apply(j, env, envlen);
	if (j->persist && j->argc == 3) {
		char *s = NULL;

		xasprintf(&s, "%s%s", session_trap, j->argv[2]);
		free(j->argv[2]);
		j->argv[2] = s;
	}
}

int
persist_materialise(struct persist *ps, int snapfd, struct job *j, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct snapview v = { .img = MAP_FAILED, .patch = MAP_FAILED };
	struct agentfs *fs = NULL;
	struct perms p = { 0 };
	uint64_t bytes = 0, entries = 0;
	struct marks mk = { .e = e };
	char *cwd = NULL, *env = NULL, *rules = NULL;
	size_t cwdlen = 0, envlen = 0, ruleslen = 0;
	bool mounted = false;
	int rc, wsfd = -1;

	if ((rc = perms_compile_job(&p, j, e)) < 0)
		goto out;
	/* A workdir's folders are made on the root before anything is mounted. */
	if (strcmp(ps->ws, "/workspace") != 0 &&
	    (rc = mount_workdir_make(ps->ws, ps->image, e)) < 0)
		goto out;
	if (ps->basefd >= 0 && ps->key != NULL) {
		int from = -1;

		if (base_holds(ps->basefd, ps->key, &bytes, &entries))
			from = ps->basefd;
		else if (base_holds(tmpl_open(ps), ps->key, &bytes, &entries))
			from = ps->tmplfd;
		if (from >= 0) {
			ps->on_tmpl = from == ps->tmplfd;
			ps->treefd = openat(from, "tree", O_RDONLY | O_DIRECTORY |
			    O_NOFOLLOW | O_CLOEXEC);
			mk.buf = base_get(from, "marks", (size_t)PERSIST_MOUNTS_MAX *
			    (AGENTFS_PATH_MAX + 4), &mk.len);
		}
		if (ps->treefd < 0 || mk.buf == NULL) {
			ps->on_tmpl = false;
			free(mk.buf);
			mk = (struct marks){ .e = e };
			if ((rc = snapshot_view(snapfd, ps->patchfd, &v, e)) < 0)
				goto out;
			fs = v.fs;
			if ((rc = base_rebuild(ps, fs, &p, &mk, ps->key, e)) < 0 ||
			    (rc = agentfs_usage(fs, &bytes, &entries, e)) < 0)
				goto out;
		}
		if ((rc = overlay_mount(ps, &j->limits, bytes, entries, e)) < 0)
			goto out;
		mounted = true;
		if (rc == 1 && j->op == OP_SH) {
			int sfd = ps->on_tmpl ? ps->tmplfd : ps->basefd;

			cwd = base_get(sfd, "cwd", JOB_PATH_MAX, &cwdlen);
			env = base_get(sfd, "env", SESSION_MAX, &envlen);
			rules = base_get(sfd, "rules", SANDBOX_RULES_FP_LEN, &ruleslen);
		}
	}
	if (ps->upperfd < 0) {
		/* No kept base (or no overlay here): the snapshot itself. */
		free(mk.buf);
		mk = (struct marks){ .e = e };
		if (fs == NULL) {
			if ((rc = snapshot_view(snapfd, ps->patchfd, &v, e)) < 0)
				goto out;
			fs = v.fs;
		}
		if ((rc = agentfs_usage(fs, &bytes, &entries, e)) < 0)
			goto out;
		/* The snapshot, plus the job's own disk and inode allowance. */
		if (!mounted && (rc = mount_job_tmpfs(&j->limits, bytes + entries * 4096,
		    entries, ps->ws, e)) < 0)
			goto out;
		wsfd = open(ps->ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (wsfd < 0) {
			rc = err_set(e, -errno, "open %s: %s", ps->ws, strerror(errno));
			goto out;
		}
		if ((rc = workspace_materialise_rules(fs, wsfd, &lim, &p, mark_cb, &mk, e)) < 0)
			goto out;
		if (j->op == OP_SH) {
			void *val = NULL;
			struct err ignore = { 0 };

			if (agentfs_session_get(fs, "cwd", &val, &cwdlen, &ignore) == 0)
				cwd = val;
			val = NULL;
			if (agentfs_session_get(fs, "env", &val, &envlen, &ignore) == 0)
				env = val;
			val = NULL;
			if (agentfs_session_get(fs, "rules", &val, &ruleslen, &ignore) == 0)
				rules = val;
		}
	}
	/* agent-safe's /output where the sandbox has none: in the upper layer
	 * (or the tmpfs), a new folder to the capture, whichever path. */
	if (wsfd < 0 && (wsfd = open(ps->ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0) {
		rc = err_set(e, -errno, "open %s: %s", ps->ws, strerror(errno));
		goto out;
	}
	if ((rc = workspace_make_write_dirs(wsfd, &p, mark_cb, &mk, e)) < 0)
		goto out;
	ps->made_dirs = rc > 0;
	if ((rc = marks_mount(mk.buf, mk.len, ps->ws, e)) < 0)
		goto out;
	/* Files elsewhere: /workspace, and the kept base under it, covered. */
	if (strcmp(ps->ws, "/workspace") != 0 && (rc = mount_workspace_cover(e)) < 0)
		goto out;
	if (j->op == OP_SH) {
		/*
		 * Another job's session starts this one only under the same
		 * rules; the note is for a job that would have taken some of it.
		 */
		if (((j->cwd == NULL && cwdlen > 0) || (j->env == NULL && envlen > 0)) &&
		    !session_same_rules(rules, ruleslen, ps->rules_fp)) {
			free(cwd);
			free(env);
			cwd = env = NULL;
			cwdlen = envlen = 0;
			ps->session_refused = true;
		}
		session_apply(j, cwd, cwdlen, env, envlen);
		cwd = NULL;
	}
	rc = 0;
out:
	free(cwd);
	free(env);
	free(rules);
	free(mk.buf);
	if (wsfd >= 0)
		close(wsfd);
	perms_free(&p);
	snapshot_view_close(&v);
	return rc;
}

/*** Capture ***/

/* Whether a saved variable named by the n bytes at s is kept. */
static bool
env_name_keep(const char *s, size_t n)
{
	static const char *const skip[] = { "PWD", "OLDPWD", "SHLVL", "_" };

	if (n == 0 || n > JOB_ENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (strlen(skip[i]) == n && memcmp(skip[i], s, n) == 0)
			return false;
	return !session_var_denied(s, n);
}

/*
 * Reads what the trap saved: the job wrote it, so it is read like anything
 * else of the job's (no symlink, regular file, bounded) and parsed strictly.
 * Returns 0 and fills the session, or -1 to keep the old one.
 */
static int
session_read(char **cwd, char **env, size_t *envlen)
{
	struct stat st;
	char *buf, *out;
	size_t n = 0, o = 0, nvars = 0;
	ssize_t r;
	int fd;

	*cwd = *env = NULL;
	*envlen = 0;
	fd = open(SESSION_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > SESSION_MAX) {
		close(fd);
		return -1;
	}
	buf = xmalloc((size_t)st.st_size + 1);
	while (n < (size_t)st.st_size &&
	    (r = read(fd, buf + n, (size_t)st.st_size - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = '\0';
	out = xmalloc(n + 1);
	for (size_t off = 0; off < n;) {
		const char *rec = buf + off;
		size_t l = strnlen(rec, n - off);

		if (off + l >= n)
			break;		/* no terminating NUL: cut short, drop it */
		off += l + 1;
		if (l > 4 && memcmp(rec, "cwd=", 4) == 0 && *cwd == NULL) {
			if (rec[4] == '/' && l - 4 <= JOB_PATH_MAX)
				*cwd = xstrdup(rec + 4);
		} else if (l > 4 && memcmp(rec, "env=", 4) == 0) {
			const char *kv = rec + 4, *eq = memchr(kv, '=', l - 4);

			if (eq != NULL && env_name_keep(kv, (size_t)(eq - kv)) &&
			    nvars < JOB_ENV_MAX && l - 4 <= JOB_ARG_MAX) {
				memcpy(out + o, kv, l - 4 + 1);
				o += l - 4 + 1;
				nvars++;
			}
		}
	}
	free(buf);
	if (*cwd == NULL) {
		free(out);
		return -1;
	}
	*env = out;
	*envlen = o;
	return 0;
}

/*
 * Adds the job's tool_calls row from the worker's JSON record; with
 * refused, its result says the saved session was not restored.
 */
static int
call_add(struct agentfs *fs, const void *rec, size_t len, bool refused,
    struct err *e)
{
	json_error_t jerr;
	json_t *o = json_loadb(rec, len, 0, &jerr), *v;
	char *params = NULL, *result = NULL;
	const char *name, *status, *error = NULL;
	int rc;

	if (o == NULL || !json_is_object(o))
		fatalx("the worker sent a bad tool call record: %s", jerr.text);
	name = json_string_value(json_object_get(o, "name"));
	status = json_string_value(json_object_get(o, "status"));
	if ((v = json_object_get(o, "error")) != NULL && json_is_string(v))
		error = json_string_value(v);
	if ((v = json_object_get(o, "parameters")) != NULL)
		params = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if ((v = json_object_get(o, "result")) != NULL) {
		if (refused && json_is_object(v))
			json_object_set_new(v, "session", json_string("not_restored"));
		result = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	}
	rc = agentfs_tool_call_add(fs, name ? name : "job", params, result, error,
	    status ? status : "error",
	    json_integer_value(json_object_get(o, "started_ms")),
	    json_integer_value(json_object_get(o, "completed_ms")), e);
	free(params);
	free(result);
	json_decref(o);
	return rc;
}

/* "A/M/D/R path" records after three counters, as one bounded frame. */
static int
send_changes(int ctl, const struct workspace_changes *ch)
{
	static char buf[MSG_MAX];	/* init is one thread; no mmap per call */
	size_t n = 0;
	int rc;
	uint64_t hdr[4] = { ch->added, ch->modified, ch->removed, ch->refused };

	memcpy(buf, hdr, sizeof(hdr));
	n = sizeof(hdr);
	for (size_t i = 0; i < ch->nlist + ch->nrefused_list; i++) {
		const char *path = i < ch->nlist ? ch->list[i].path :
		    ch->refused_list[i - ch->nlist];
		char op = i < ch->nlist ? (char)ch->list[i].op : 'R';
		size_t l = strlen(path);

		if (n + l + 2 > MSG_MAX)
			break;	/* the counters stay exact; the worker flags it */
		buf[n++] = op;
		memcpy(buf + n, path, l + 1);
		n += l + 1;
	}
	rc = msg_send(ctl, MSG_SBX_CHANGES, 0, buf, n, -1);
	return rc;
}

/*
 * Adds the job's record and, for sh, the session it saved with the
 * fingerprint of the rules it ran under (ps->rules_fp; without one the old
 * session stays): the three rows go into the same new snapshot or none
 * does, so a session never pairs with other rules.
 */
static int
capture_finish(struct agentfs *out, const struct persist *ps, const struct job *j,
    const void *rec, size_t reclen, struct err *e)
{
	char *cwd = NULL, *env = NULL;
	size_t envlen = 0;
	int rc;

	if ((rc = call_add(out, rec, reclen, ps->session_refused, e)) < 0 ||
	    j->op != OP_SH || strlen(ps->rules_fp) != SANDBOX_RULES_FP_LEN)
		return rc;
	if (session_read(&cwd, &env, &envlen) == 0 &&
	    (rc = agentfs_session_set(out, "cwd", cwd, strlen(cwd), e)) == 0 &&
	    (rc = agentfs_session_set(out, "env", env, envlen, e)) == 0)
		rc = agentfs_session_set(out, "rules", ps->rules_fp, SANDBOX_RULES_FP_LEN, e);
	free(cwd);
	free(env);
	return rc;
}

/* The cumulative patch of fs in a new memfd, sealed against any change:
 * the worker keeps it as it is. */
static int
patch_ship(struct agentfs *fs, int *fdp, size_t *lenp, struct err *e)
{
	int fd, rc;

	fd = memfd_create("snapshot-patch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return err_set(e, -errno, "snapshot: memfd: %s", strerror(errno));
	if ((rc = agentfs_cow_patch_write(fs, fd, lenp, e)) < 0) {
		close(fd);
		return rc;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW |
	    F_SEAL_WRITE) < 0) {
		rc = err_set(e, -errno, "snapshot: seal: %s", strerror(errno));
		close(fd);
		return rc;
	}
	*fdp = fd;
	return 0;
}

/*
 * After the worker committed the new snapshot as key (MSG_SBX_BASE_NEXT
 * with the key; empty: not committed), brings the base up to it: the
 * lower tree takes the changes ch made, read from fs (the new snapshot),
 * and the base is sealed as key. Failures only leave the base unsealed
 * (rebuilt next time). The overlay above the tree is spent: the job is
 * gone, and init exits (its mount namespace with it) once this is done.
 */
static void
base_advance(int ctl, struct persist *ps, struct agentfs *fs,
    const struct workspace_changes *ch)
{
	struct err e = { 0 };
	struct msg m;
	char *key, *state = NULL, *nl;
	size_t statelen = 0;
	bool keep = false;
	int rc = 0;

	msg_init(&m);
	if (msg_recv(ctl, &m, MSG_MAX) <= 0 || m.hdr.type != MSG_SBX_BASE_NEXT ||
	    m.len == 0) {
		msg_clear(&m);
		return;		/* not committed: the base still holds the old head */
	}
	key = xmemdup0(m.data, m.len);
	msg_clear(&m);
	/* "KEY" or "KEY\nkeep": the head the job started on is shared. */
	if ((nl = strchr(key, '\n')) != NULL) {
		keep = strcmp(nl + 1, "keep") == 0;
		*nl = '\0';
		if (!keep || *key == '\0') {
			free(key);
			return;
		}
	}
	if (keep && !ps->on_tmpl)
		state = base_get(ps->basefd, "state", 4096, &statelen);
	(void)unlinkat(ps->basefd, "state", 0);
	/* Its marks were made for a tree without the folder made for the
	 * job (workspace_make_write_dirs()): rebuilt by the next job. */
	if (ps->made_dirs) {
		free(state);
		free(key);
		return;
	}
	if (ps->on_tmpl)
		rc = base_from_tmpl(ps, &e);
	else if (state != NULL)
		if ((rc = tmpl_take(ps, state, statelen, &e)) == 0)
			rc = base_from_tmpl(ps, &e);
	if (rc == 0 && workspace_apply(fs, ps->treefd, ch, &e) == 0)
		(void)base_seal(ps, fs, key, &e);
	free(state);
	free(key);
}

/* The snapshot opened, and its entries read, ahead of the capture. */
struct capture_ahead {
	struct snapview v;
	struct workspace_ahead *a;
	struct perms p;		/* the job's rules, compiled */
};

void
persist_capture_ahead(struct persist *ps, int snapfd, const struct job *j)
{
	struct capture_ahead *ca;
	struct err e = { 0 };

	if (ps->upperfd < 0 || ps->ahead != NULL)
		return;
	ca = xcalloc(1, sizeof(*ca));
	if (perms_compile_job(&ca->p, j, &e) < 0) {
		free(ca);
		return;
	}
	if (snapshot_view(snapfd, ps->patchfd, &ca->v, &e) < 0) {
		perms_free(&ca->p);
		free(ca);
		return;
	}
	if (workspace_capture_ahead(ca->v.fs, &ca->p, &ca->a, &e) < 0) {
		snapshot_view_close(&ca->v);
		perms_free(&ca->p);
		free(ca);
		return;
	}
	/*
	 * What the capture will run for the first time in this process,
	 * done now, while the job runs: its record and session statements
	 * parsed, and JSON (call_add()) used once, which maps jansson's pages
	 * and binds its symbols in this fresh copy of the spawner.
	 */
	agentfs_capture_warm(ca->v.fs);
	json_decref(json_loads("{\"a\":[1,\"b\",null]}", 0, NULL));
	ps->ahead = ca;
}

int
persist_capture(int ctl, struct persist *ps, int snapfd, const struct job *j,
    const void *rec, size_t reclen, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct snapview v = { .img = MAP_FAILED, .patch = MAP_FAILED };
	struct workspace_ahead *ahead = NULL;
	struct workspace_changes ch = { 0 };
	struct perms p = { 0 };
	uint64_t len64;
	size_t len = 0;
	int rc, wsfd = -1, fd = -1;

	/*
	 * The rules, as compiled while the job ran if the capture's reads
	 * were made then (persist_capture_ahead(), for this same job).
	 */
	if (ps->ahead != NULL) {
		p = ps->ahead->p;
		v = ps->ahead->v;
		ahead = ps->ahead->a;
		free(ps->ahead);
		ps->ahead = NULL;
	} else if ((rc = perms_compile_job(&p, j, e)) < 0)
		return rc;
	/*
	 * The job's disk limit bounds what it commits, not only what its
	 * tmpfs holds: a sparse file or a hard link takes little of the
	 * tmpfs but is read back in full, and what is committed stays in
	 * the store, in the worker's image and patch and in the kept base.
	 * The capture stops (-ENOSPC) once the snapshot would grow by more.
	 */
	lim.max_growth = j->limits.disk_bytes;
	/* An overlay's capture reads its upper layer (ps->upperfd) only. */
	if (ps->upperfd < 0 && (wsfd = open(ps->ws, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = err_set(e, -errno, "open %s: %s", ps->ws, strerror(errno));
		goto out;
	}
	/*
	 * In place on the head: only the blocks the capture rewrites are
	 * new, and they are the patch the worker gets. On an overlay only
	 * what the job changed is read, and the head was opened and its
	 * entries read while the job ran (persist_capture_ahead()).
	 */
	if (ahead == NULL && (rc = snapshot_view(snapfd, ps->patchfd, &v, e)) < 0)
		goto out;
	if (ahead != NULL) {
		rc = workspace_capture_overlay_ahead(ps->upperfd, v.fs, ahead, &lim,
		    &p, &ch, e);
		ahead = NULL;		/* taken over */
	} else
		rc = ps->upperfd >= 0 ?
		    workspace_capture_overlay(ps->upperfd, v.fs, &lim, &p, &ch, e) :
		    workspace_capture_inplace(wsfd, v.fs, &lim, &p, &ch, e);
	if (rc < 0 || (rc = capture_finish(v.fs, ps, j, rec, reclen, e)) < 0 ||
	    (rc = patch_ship(v.fs, &fd, &len, e)) < 0)
		goto out;
	len64 = len;
	if ((rc = send_changes(ctl, &ch)) < 0 ||
	    (rc = msg_send(ctl, MSG_SBX_SNAPSHOT, 0, &len64, sizeof(len64), fd)) < 0) {
		err_set(e, rc, "hand the snapshot over: %s", strerror(-rc));
		goto out;
	}
	if (ps->upperfd >= 0)
		base_advance(ctl, ps, v.fs, &ch);
out:
	if (fd >= 0)
		close(fd);
	if (wsfd >= 0)
		close(wsfd);
	workspace_ahead_free(ahead);
	snapshot_view_close(&v);
	workspace_changes_free(&ch);
	perms_free(&p);
	return rc;
}

/*** Seed: version 1 from a folder of the image ***/

/*
 * Opens dir (absolute, normalised: proto/path.h) of the root, each
 * component with O_NOFOLLOW, so a link of the image's is never followed:
 * the folder is the image's own, wherever its links point. The messages
 * name the folder and the image.
 */
static int
seed_dir_open(const char *dir, const char *image, struct err *e)
{
	char path[PATH_MAX];
	struct stat st;
	int fd = -1, next;
	size_t n = strlen(dir);

	if (n >= sizeof(path) || dir[0] != '/')
		return err_set(e, -EINVAL, "'%s': not an absolute path", dir);
	memcpy(path, dir, n + 1);
	if ((fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return err_set(e, -errno, "open /: %s", strerror(errno));
	for (char *c = path + 1; *c != '\0';) {
		char *end = c + strcspn(c, "/");
		bool last = *end == '\0';

		*end = '\0';	/* path is the component's own path, for messages */
		if (fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			int err = errno;

			close(fd);
			return err_set(e, -err, "'%s' %s in image '%s'", path,
			    err == ENOENT ? "does not exist" : strerror(err), image);
		}
		if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
			close(fd);
			return err_set(e, S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR,
			    "'%s' is %s in image '%s'%s", path, S_ISLNK(st.st_mode) ?
			    "a symlink" : "not a folder", image, S_ISLNK(st.st_mode) ?
			    ": name the folder it points to" : "");
		}
		next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next < 0)
			return err_set(e, -errno, "'%s' in image '%s': %s", path, image,
			    strerror(errno));
		fd = next;
		if (last)
			break;
		*end = '/';
		c = end + 1;
	}
	return fd;
}

int
persist_seed(int ctl, int snapfd, const struct job *j, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct snapview v = { .img = MAP_FAILED, .patch = MAP_FAILED };
	struct workspace_changes ch = { 0 };
	struct perms p = { 0 };
	uint64_t len64;
	size_t len = 0;
	int rc, dirfd = -1, fd = -1;

	if (j->from_image_dir == NULL || j->image == NULL)
		return err_set(e, -EINVAL, "a seed names a folder and an image");
	/*
	 * The caps of a job on the sandbox, as an import has them: what could
	 * not be materialised must not be stored either.
	 */
	if (j->limits.files != 0 && j->limits.files < lim.max_files)
		lim.max_files = (uint32_t)j->limits.files;
	if (j->limits.disk_bytes != 0 && j->limits.disk_bytes < lim.max_bytes)
		lim.max_bytes = j->limits.disk_bytes;
	if (j->limits.disk_bytes != 0 && j->limits.disk_bytes < lim.max_file_bytes)
		lim.max_file_bytes = j->limits.disk_bytes;
	lim.max_growth = j->limits.disk_bytes;
	/* The image's overlay root: its files show their layers' devices. */
	lim.layer_devices = true;
	/* Every file of the folder: the image's files are the tenant's own. */
	if ((rc = perms_compile(&p, NULL, 0, "full-access", e)) < 0)
		return rc;
	if ((dirfd = seed_dir_open(j->from_image_dir, j->image, e)) < 0) {
		rc = dirfd;
		goto out;
	}
	if ((rc = snapshot_view(snapfd, -1, &v, e)) < 0 ||
	    (rc = workspace_capture_inplace(dirfd, v.fs, &lim, &p, &ch, e)) < 0 ||
	    (rc = patch_ship(v.fs, &fd, &len, e)) < 0)
		goto out;
	len64 = len;
	if ((rc = send_changes(ctl, &ch)) < 0 ||
	    (rc = msg_send(ctl, MSG_SBX_SNAPSHOT, 0, &len64, sizeof(len64), fd)) < 0)
		err_set(e, rc, "hand the snapshot over: %s", strerror(-rc));
out:
	if (fd >= 0)
		close(fd);
	if (dirfd >= 0)
		close(dirfd);
	snapshot_view_close(&v);
	workspace_changes_free(&ch);
	perms_free(&p);
	return rc;
}
