/*
 * unpack_child.c - the unpacker's process (sandq-unpack, unpack_main.c):
 * for one layer it first becomes an unprivileged uid, then bounds itself
 * and does the work in a temporary directory beside dest (unpack_tar.c),
 * renames it to dest when the whole layer is in, and sends its verdict
 * back over a pipe. unpack.c starts it, with fork() and at once execve():
 * the caller is threaded (sandqd's pulls run in libuv's pool), and after
 * a fork only the forking thread exists, with every lock the others held
 * still held (the allocator's among them); a fresh program owns no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "unpack_int.h"

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
child_setup(const struct unpack_job *j, struct err *e)
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
child_unpack(const struct unpack_job *j, struct img_unpack_stats *st, struct err *e)
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

void
unpack__child_main(const struct unpack_job *j)
{
	struct unpack_verdict v;
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
