/*
 * unpack.c - the unpacker's process: each layer is unpacked by a child
 * forked for it, which (for img_unpack_layer_as) first becomes an
 * unprivileged uid, then bounds itself and does the work in a temporary
 * directory beside dest (unpack_tar.c), renames it to dest when the whole
 * layer is in, and sends its verdict back over a pipe.
 *
 * Why a child even without a uid to drop to: libarchive's disk writer
 * takes paths relative to the working directory, and only relative names
 * let its SECURE_NOABSOLUTEPATHS guard apply; a child can chdir() into the
 * temporary directory without moving the caller's (sandqd's threads use
 * theirs). And a parser bug in the child cannot corrupt the caller, nor
 * reach the caller's descriptors (closed first), nor outlive it
 * (PR_SET_PDEATHSIG).
 *
 * The parent trusts nothing the child says beyond "done" or "failed, and
 * why": it names the temporary directory itself (so a compromised child
 * cannot point root's clean-up elsewhere), removes it after any failure
 * (the child may have died mid-way) with a walk that never follows a
 * symlink, checks that dest is a directory after success, and strips
 * control bytes from the message it passes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "unpack_int.h"

#define TMP_NAME_MAX 64			/* IMG_UNPACK_TMP_PREFIX and 16 hex digits */

/* What the child sends back: one fixed-size record, then it exits. */
struct verdict {
	int code;			/* 0 or a negative errno */
	struct img_unpack_stats st;	/* what it did, also on failure */
	char msg[sizeof(((struct err *)0)->msg)];	/* e->msg, when code < 0 */
};

/* One call: what the child needs, all of it prepared by the parent. */
struct job {
	bool drop;			/* become uid/gid first */
	uid_t uid;			/* with drop */
	gid_t gid;			/* with drop */
	int fd;				/* the layer */
	int pipe;			/* the verdict's write end (child) */
	pid_t caller;			/* the parent's pid */
	const char *what;		/* names the layer */
	struct img_unpack_limits lim;	/* bounds (zeros: none) */
	char parent[PATH_MAX];		/* dest's directory */
	char base[NAME_MAX + 1];	/* dest's name in it */
	char tmp[TMP_NAME_MAX];		/* the temporary directory's name in it */
};

/*** The child ***/

/* Closes every descriptor from lo to hi (inclusive) that is 3 or more. */
static void
close_span(int lo, int hi)
{
	if (lo < 3)
		lo = 3;
	if (lo <= hi)
		close_range((unsigned)lo, (unsigned)hi, 0);
}

/*
 * Makes the child what it must be before it reads a byte of the layer,
 * each step before the next for a reason:
 *   1. PR_SET_PDEATHSIG: it dies with its parent, never unpacks for nobody
 *      (strictly: with the thread that forked it, so a caller calls from
 *      a thread that outlives the call, as any blocking call's caller does).
 *   2. Enter dest's directory while still the caller (the way down may be
 *      closed to the unpacking uid: a cache root is root's alone; only
 *      dest's directory itself must be writable by it). Then close every
 *      descriptor but 0-2, the layer and the verdict pipe: the
 *      caller's sockets and files are not the parser's to reach.
 *   3. The uid/gid (img_unpack_layer_as): groups and gid while still root,
 *      uid last (it drops the capabilities the other two need); checked,
 *      as setresuid() has failed silently in the past (CVE-2011-1182 and
 *      its kind): a child still able to become root stops.
 *   4. PR_SET_NO_NEW_PRIVS: nothing it could exec gains privilege.
 *   5. Bounds: RLIMIT_FSIZE at max_bytes (one file can hold no more than
 *      the layer; SIGXFSZ ignored so that the write fails with EFBIG and
 *      a message), RLIMIT_CPU, no core dumps; umask 022 for the
 *      directories libarchive makes on its own.
 * Returns 0 or a negative errno with e filled.
 */
static int
child_setup(const struct job *j, struct err *e)
{
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	struct rlimit rl;
	unsigned cpu;
	int lo, hi;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != j->caller)
		return err_set(e, -ECHILD, "%s: the caller is gone", j->what);
	if (chdir(j->parent) != 0)
		return err_set(e, -errno, "%s: cannot enter '%s': %s",
		    j->what, j->parent, strerror(errno));
	lo = j->fd < j->pipe ? j->fd : j->pipe;
	hi = j->fd < j->pipe ? j->pipe : j->fd;
	close_span(3, lo - 1);
	close_span(lo + 1, hi - 1);
	close_span(hi + 1, INT_MAX);
	if (j->drop) {
		if (setresgid(j->gid, j->gid, j->gid) != 0 ||
		    setgroups(0, NULL) != 0 ||
		    setresuid(j->uid, j->uid, j->uid) != 0)
			return err_set(e, -errno, "%s: cannot become uid %u "
			    "gid %u: %s", j->what, (unsigned)j->uid,
			    (unsigned)j->gid, strerror(errno));
		if (getresuid(&ru, &eu, &su) != 0 ||
		    getresgid(&rg, &eg, &sg) != 0 ||
		    ru != j->uid || eu != j->uid || su != j->uid ||
		    rg != j->gid || eg != j->gid || sg != j->gid ||
		    setuid(0) == 0)
			return err_set(e, -EPERM, "%s: uid %u did not stick",
			    j->what, (unsigned)j->uid);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return err_set(e, -errno, "%s: PR_SET_NO_NEW_PRIVS: %s",
		    j->what, strerror(errno));
	signal(SIGXFSZ, SIG_IGN);
	if (j->lim.max_bytes > 0) {
		rl.rlim_cur = rl.rlim_max = (rlim_t)j->lim.max_bytes;
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			return err_set(e, -errno, "%s: RLIMIT_FSIZE: %s",
			    j->what, strerror(errno));
	}
	cpu = j->lim.max_cpu_seconds > 0 ? j->lim.max_cpu_seconds :
	    IMG_UNPACK_CPU_DEFAULT;
	rl.rlim_cur = cpu;
	rl.rlim_max = (rlim_t)cpu + 5;	/* SIGXCPU first, SIGKILL 5 s on */
	if (setrlimit(RLIMIT_CPU, &rl) != 0)
		return err_set(e, -errno, "%s: RLIMIT_CPU: %s", j->what,
		    strerror(errno));
	rl.rlim_cur = rl.rlim_max = 0;
	setrlimit(RLIMIT_CORE, &rl);
	umask(022);
	return 0;
}

/*
 * The child's work once set up, in dest's directory: makes the temporary
 * directory (0700 until the layer is in) there, unpacks there, and renames it to
 * dest without replacing anything; removes it on failure. Returns 0 or a
 * negative errno with e filled.
 */
static int
child_unpack(const struct job *j, struct img_unpack_stats *st, struct err *e)
{
	int r;

	if (mkdir(j->tmp, 0700) != 0)
		return err_set(e, -errno, "%s: cannot make a directory in '%s'"
		    " as uid %u: %s", j->what, j->parent, (unsigned)geteuid(),
		    strerror(errno));
	if (chdir(j->tmp) != 0) {
		r = err_set(e, -errno, "%s: cannot enter '%s/%s': %s", j->what,
		    j->parent, j->tmp, strerror(errno));
		goto out_remove;
	}
	r = unpack__tar(j->fd, j->what, &j->lim, st, e);
	if (chdir("..") != 0 && r == 0)
		r = err_set(e, -errno, "%s: cannot leave '%s/%s': %s", j->what,
		    j->parent, j->tmp, strerror(errno));
	if (r < 0)
		goto out_remove;
	/* The layer is whole: dest appears at once, or not at all. */
	if (renameat2(AT_FDCWD, j->tmp, AT_FDCWD, j->base,
	    RENAME_NOREPLACE) != 0) {
		r = err_set(e, -errno, "%s: cannot rename to '%s/%s': %s",
		    j->what, j->parent, j->base, strerror(errno));
		goto out_remove;
	}
	return 0;

out_remove:
	unpack__rm_tree(AT_FDCWD, j->tmp);
	return r;
}

/* The child's whole life: set up, unpack, send the verdict, _exit. */
static void __attribute__((noreturn))
child_main(const struct job *j)
{
	struct verdict v;
	struct err e;

	memset(&v, 0, sizeof(v));
	err_clear(&e);
	v.code = child_setup(j, &e);
	if (v.code == 0)
		v.code = child_unpack(j, &v.st, &e);
	if (v.code < 0)
		memcpy(v.msg, e.msg, sizeof(v.msg));
	(void)write_all(j->pipe, &v, sizeof(v));
	_exit(0);
}

/*** The parent ***/

/*
 * Splits dest into j->parent and j->base and checks that dest does not
 * exist and its parent is a directory. 0 or a negative errno.
 */
static int
split_dest(struct job *j, const char *dest, struct err *e)
{
	const char *slash;
	struct stat sb;
	size_t n;

	n = dest != NULL ? strlen(dest) : 0;
	if (n == 0 || n >= PATH_MAX || dest[n - 1] == '/')
		return err_set(e, -EINVAL, "%s: bad destination '%s'", j->what,
		    dest != NULL ? dest : "");
	slash = strrchr(dest, '/');
	if (slash == NULL) {
		snprintf(j->parent, sizeof(j->parent), ".");
		slash = dest - 1;
	} else if (slash == dest) {
		snprintf(j->parent, sizeof(j->parent), "/");
	} else {
		memcpy(j->parent, dest, (size_t)(slash - dest));
		j->parent[slash - dest] = '\0';
	}
	if (strlen(slash + 1) > NAME_MAX || strcmp(slash + 1, ".") == 0 ||
	    strcmp(slash + 1, "..") == 0)
		return err_set(e, -EINVAL, "%s: bad destination '%s'", j->what,
		    dest);
	snprintf(j->base, sizeof(j->base), "%s", slash + 1);
	if (lstat(dest, &sb) == 0)
		return err_set(e, -EEXIST, "%s: '%s' already exists", j->what,
		    dest);
	if (errno != ENOENT)
		return err_set(e, -errno, "%s: '%s': %s", j->what, dest,
		    strerror(errno));
	if (stat(j->parent, &sb) != 0)
		return err_set(e, -errno, "%s: '%s': %s", j->what, j->parent,
		    strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return err_set(e, -ENOTDIR, "%s: '%s' is not a directory",
		    j->what, j->parent);
	return 0;
}

/* Names the temporary directory: IMG_UNPACK_TMP_PREFIX and 64 random bits. */
static void
name_tmp(struct job *j)
{
	unsigned long long r;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = ((unsigned long long)getpid() << 32) ^
		    (unsigned long long)mono_ns();
	snprintf(j->tmp, sizeof(j->tmp), "%s%016llx", IMG_UNPACK_TMP_PREFIX, r);
}

/*
 * Waits for the child and reads its verdict into v (the pipe holds it
 * whole: a record under PIPE_BUF, written before the child exits). Returns
 * 0 with v filled, or a negative errno with e saying how the child ended.
 */
static int
reap(pid_t pid, int rfd, const struct job *j, struct verdict *v,
    struct err *e)
{
	ssize_t n;
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return err_set(e, -errno, "%s: waitpid: %s", j->what,
			    strerror(errno));
	/* A grandchild holding the pipe open must not block us: read what is there. */
	(void)fd_set_nonblock(rfd, true);
	n = read(rfd, v, sizeof(*v));
	if (n == (ssize_t)sizeof(*v))
		return 0;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
		return err_set(e, -ECHILD, "%s: the unpacker ran out of CPU "
		    "time (%u s)", j->what, j->lim.max_cpu_seconds > 0 ?
		    j->lim.max_cpu_seconds : IMG_UNPACK_CPU_DEFAULT);
	if (WIFSIGNALED(status))
		return err_set(e, -ECHILD, "%s: the unpacker was killed by "
		    "signal %d", j->what, WTERMSIG(status));
	return err_set(e, -ECHILD, "%s: the unpacker exited (status %d) "
	    "without a verdict", j->what, WEXITSTATUS(status));
}

/*
 * Copies the child's message into e: NUL-terminated, control bytes as '?'
 * (the child escaped what it quoted; this is for a child gone wrong).
 */
static void
take_msg(struct err *e, int code, const struct verdict *v)
{
	size_t i;

	if (e == NULL)
		return;
	e->code = code;
	memcpy(e->msg, v->msg, sizeof(e->msg));
	e->msg[sizeof(e->msg) - 1] = '\0';
	for (i = 0; e->msg[i] != '\0'; i++)
		if ((unsigned char)e->msg[i] < 0x20 ||
		    (unsigned char)e->msg[i] == 0x7f)
			e->msg[i] = '?';
}

/* img_unpack_layer() and img_unpack_layer_as(): j->drop says which. */
static int
unpack(struct job *j, const char *dest, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	struct verdict v;
	struct stat sb;
	int p[2], r, dfd;
	pid_t pid;

	if (st != NULL)
		memset(st, 0, sizeof(*st));
	if (j->what == NULL)
		j->what = "layer";
	if (lim != NULL)
		j->lim = *lim;
	r = split_dest(j, dest, e);
	if (r < 0)
		return r;
	name_tmp(j);
	j->caller = getpid();
	if (pipe2(p, O_CLOEXEC) != 0)
		return err_set(e, -errno, "%s: pipe: %s", j->what,
		    strerror(errno));
	pid = fork();
	if (pid < 0) {
		r = err_set(e, -errno, "%s: fork: %s", j->what, strerror(errno));
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (pid == 0) {
		close(p[0]);
		j->pipe = p[1];
		child_main(j);
	}
	close(p[1]);
	memset(&v, 0, sizeof(v));
	r = reap(pid, p[0], j, &v, e);
	close(p[0]);
	if (r == 0) {
		r = v.code < 0 && v.code >= -4095 ? v.code :
		    v.code == 0 ? 0 : -EIO;
		if (st != NULL)
			*st = v.st;
		if (r < 0)
			take_msg(e, r, &v);
	}
	if (r == 0 && (lstat(dest, &sb) != 0 || !S_ISDIR(sb.st_mode)))
		r = err_set(e, -EIO, "%s: the unpacker reported success but "
		    "'%s' is not a directory", j->what, dest);
	if (r < 0) {
		/* The child may have died before its own clean-up. */
		dfd = open(j->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)unpack__rm_tree(dfd, j->tmp);
			close(dfd);
		}
	}
	return r;
}

int
img_unpack_layer(int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st,
    struct err *e)
{
	struct job *j;
	int r;

	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return err_set(e, -ENOMEM, "out of memory");
	j->fd = fd;
	j->what = what;
	r = unpack(j, dest, lim, st, e);
	free(j);
	return r;
}

int
img_unpack_layer_as(uid_t uid, gid_t gid, int fd, const char *dest,
    const char *what, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	struct job *j;
	int r;

	if (uid == 0 || gid == 0)
		return err_set(e, -EINVAL, "%s: refusing to unpack as uid %u "
		    "gid %u (root)", what != NULL ? what : "layer",
		    (unsigned)uid, (unsigned)gid);
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return err_set(e, -ENOMEM, "out of memory");
	j->drop = true;
	j->uid = uid;
	j->gid = gid;
	j->fd = fd;
	j->what = what;
	r = unpack(j, dest, lim, st, e);
	free(j);
	return r;
}
