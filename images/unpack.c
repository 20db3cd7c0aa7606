/*
 * unpack.c - the caller's side of the unpacker: each layer is unpacked by
 * a process of its own, sandq-unpack (unpack_child.c, unpack_main.c),
 * started here with fork() and at once execve(), and waited for; it sends
 * back its verdict over a pipe.
 *
 * Why a process of its own: the unpacking uid (img_unpack_layer_as) is
 * dropped to there, never in the caller; libarchive's disk writer takes
 * paths relative to the working directory, and only relative names let
 * its SECURE_NOABSOLUTEPATHS guard apply, so the unpacker chdir()s into
 * the temporary directory without moving the caller's; a parser bug
 * cannot corrupt the caller, nor reach its descriptors (closed), nor
 * outlive it (PR_SET_PDEATHSIG). Why execve() at once: the caller is
 * threaded (sandqd's pulls run in libuv's pool); between fork() and exec
 * the child runs only async-signal-safe calls, as a child of a threaded
 * program must (another thread may have held the allocator's lock at the
 * fork: a child that then allocates waits for ever, which is how a
 * sanitizer build of sandqd hung), and its job arrives through a pipe
 * written before the fork.
 *
 * The caller trusts nothing the unpacker says beyond "done" or "failed,
 * and why": it names the temporary directory itself (so a compromised
 * unpacker cannot point root's clean-up elsewhere), removes it after any
 * failure (the unpacker may have died mid-way) with a walk that never
 * follows a symlink, checks that dest is a directory after success, and
 * strips control bytes from the message it passes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "unpack_int.h"

#ifndef SANDQ_LIBEXECDIR
#define SANDQ_LIBEXECDIR "/usr/local/libexec/sandq"
#endif

static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static char helper[PATH_MAX];		/* img_unpack_set_helper(), or found */

/*** The parent ***/

/*
 * Splits dest into j->parent and j->base and checks that dest does not
 * exist and its parent is a directory. 0 or a negative errno.
 */
static int
split_dest(struct unpack_job *j, const char *dest, struct err *e)
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
name_tmp(struct unpack_job *j)
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
reap(pid_t pid, int rfd, const struct unpack_job *j, struct unpack_verdict *v,
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
take_msg(struct err *e, int code, const struct unpack_verdict *v)
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

/*** Finding and starting the unpacker ***/

void
img_unpack_set_helper(const char *path)
{
	pthread_mutex_lock(&helper_lock);
	snprintf(helper, sizeof(helper), "%s", path != NULL ? path : "");
	pthread_mutex_unlock(&helper_lock);
}

/*
 * The unpacker's path into out: img_unpack_set_helper()'s, else
 * sandq-unpack beside the running program, else one folder up (a test
 * binary in build/tests), else in SANDQ_LIBEXECDIR. Returns 0, or
 * -ENOENT with e saying where it looked.
 */
static int
helper_path(char out[PATH_MAX], const char *what, struct err *e)
{
	static const char *const rel[] = { "/" UNPACK_HELPER, "/../" UNPACK_HELPER };
	char self[PATH_MAX];
	ssize_t n;

	pthread_mutex_lock(&helper_lock);
	snprintf(out, PATH_MAX, "%s", helper);
	pthread_mutex_unlock(&helper_lock);
	if (out[0] != '\0')
		return access(out, X_OK) == 0 ? 0 : err_set(e, -ENOENT, "%s: the "
		    "unpacker %s: %s", what, out, strerror(errno));
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		dirname(self);		/* in place: self is now the folder */
		for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			int len = snprintf(out, PATH_MAX, "%s%s", self, rel[i]);

			if (len > 0 && len < PATH_MAX && access(out, X_OK) == 0)
				return 0;
		}
	}
	snprintf(out, PATH_MAX, "%s/%s", SANDQ_LIBEXECDIR, UNPACK_HELPER);
	if (access(out, X_OK) == 0)
		return 0;
	return err_set(e, -ENOENT, "%s: the unpacker (%s) is neither beside this "
	    "program nor in %s", what, UNPACK_HELPER, SANDQ_LIBEXECDIR);
}

/*
 * The forked child: async-signal-safe calls only, then the unpacker. Its
 * descriptors become UNPACK_FD_LAYER, _VERDICT and _JOB (each moved out of
 * the way first, so no dup2() overwrites another), 0-2 /dev/null, and
 * nothing else goes with it. Never returns.
 */
static void __attribute__((noreturn))
child_exec(const char *path, pid_t caller, int layer, int verdict, int job, int null)
{
	static char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	char *const argv[] = { (char *)(uintptr_t)path, NULL };
	int hi;

	/* It dies with the caller's thread, and never outlives the caller. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != caller)
		_exit(127);
	hi = fcntl(layer, F_DUPFD, 16);
	verdict = fcntl(verdict, F_DUPFD, 16);
	job = fcntl(job, F_DUPFD, 16);
	if (hi < 0 || verdict < 0 || job < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
	    dup2(null, 2) < 0 || dup2(hi, UNPACK_FD_LAYER) < 0 ||
	    dup2(verdict, UNPACK_FD_VERDICT) < 0 || dup2(job, UNPACK_FD_JOB) < 0)
		_exit(127);
	close_range(UNPACK_FD_JOB + 1, ~0U, 0);
	execve(path, argv, envp);
	_exit(127);
}

/* img_unpack_layer() and img_unpack_layer_as(): j->drop says which. */
static int
unpack(struct unpack_job *j, const char *dest, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	struct unpack_verdict v;
	char path[PATH_MAX];
	struct stat sb;
	int p[2], q[2], r, dfd, null;
	pid_t pid;

	if (st != NULL)
		memset(st, 0, sizeof(*st));
	if (j->what[0] == '\0')
		snprintf(j->what, sizeof(j->what), "layer");
	if (lim != NULL)
		j->lim = *lim;
	if ((r = split_dest(j, dest, e)) < 0 || (r = helper_path(path, j->what, e)) < 0)
		return r;
	name_tmp(j);
	j->caller = getpid();
	j->pipe = UNPACK_FD_VERDICT;
	/* The job goes first, whole, into a pipe: it fits in its buffer. */
	if (pipe2(p, O_CLOEXEC) != 0)
		return err_set(e, -errno, "%s: pipe: %s", j->what, strerror(errno));
	if (pipe2(q, O_CLOEXEC) != 0) {
		r = err_set(e, -errno, "%s: pipe: %s", j->what, strerror(errno));
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (write_all(q[1], j, sizeof(*j)) != 0 ||
	    (null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		r = err_set(e, -errno, "%s: handing the job over: %s", j->what,
		    strerror(errno));
		goto out_pipes;
	}
	close(q[1]);
	q[1] = -1;
	pid = fork();
	if (pid == 0)
		child_exec(path, j->caller, j->fd, p[1], q[0], null);
	close(null);
	if (pid < 0) {
		r = err_set(e, -errno, "%s: fork: %s", j->what, strerror(errno));
		goto out_pipes;
	}
	close(p[1]);
	p[1] = -1;
	memset(&v, 0, sizeof(v));
	r = reap(pid, p[0], j, &v, e);
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
		/* The unpacker may have died before its own clean-up. */
		dfd = open(j->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)unpack__rm_tree(dfd, j->tmp);
			close(dfd);
		}
	}
out_pipes:
	for (int i = 0; i < 2; i++) {
		if (p[i] >= 0)
			close(p[i]);
		if (q[i] >= 0)
			close(q[i]);
	}
	return r;
}

int
img_unpack_layer(int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st,
    struct err *e)
{
	struct unpack_job *j;
	int r;

	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return err_set(e, -ENOMEM, "out of memory");
	j->fd = fd;
	snprintf(j->what, sizeof(j->what), "%s", what != NULL ? what : "");
	r = unpack(j, dest, lim, st, e);
	free(j);
	return r;
}

int
img_unpack_layer_as(uid_t uid, gid_t gid, int fd, const char *dest,
    const char *what, const struct img_unpack_limits *lim,
    struct img_unpack_stats *st, struct err *e)
{
	struct unpack_job *j;
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
	snprintf(j->what, sizeof(j->what), "%s", what != NULL ? what : "");
	r = unpack(j, dest, lim, st, e);
	free(j);
	return r;
}
