/*
 * mount.c - the sandbox's filesystem: a read-only image and per-job tmpfs.
 *
 * Runs in the sandbox's init, inside its own user and mount namespaces, so
 * nothing here touches the host's mount table. The root is a small tmpfs on
 * the worker's run_dir/root holding:
 *
 *   /usr, /lib*, /bin, /sbin   host folders bound read-only (or, on a
 *                              merged-/usr host, the same symlinks)
 *   /etc                       the worker's generated minimal /etc, read-only
 *   /dev                       null zero full random urandom tty bound from
 *                              the host, fd/std* links, a private devpts
 *   /proc                      a fresh procfs of the sandbox's pid namespace
 *   /workspace /tmp /dev/shm   per-job tmpfs capped at the job's disk limit
 *
 * then pivots into it, detaches the old root and remounts the root read-only.
 * Nothing of the host outside the image is reachable afterwards. Every mount
 * is nosuid; tmpfs mounts made in a user namespace are implicitly nodev.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

static const char *const host_dirs[] = {
	"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
};

static const char *const dev_nodes[] = {
	"null", "zero", "full", "random", "urandom", "tty",
};

static int
do_mount(const char *src, const char *dst, const char *type,
    unsigned long flags, const char *data, struct err *e)
{
	if (mount(src, dst, type, flags, data) < 0)
		return err_set(e, -errno, "mount %s on %s: %s", src ? src : type,
		    dst, strerror(errno));
	return 0;
}

/*
 * Flags the kernel locks on a mount made visible to a less privileged user
 * namespace: a read-only remount of a bind must repeat them or fail EPERM.
 */
static unsigned long
locked_flags(const char *path)
{
	struct statvfs sv;
	unsigned long f = 0;

	if (statvfs(path, &sv) < 0)
		return 0;
	if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
	return f;
}

/* Binds src on dst read-only (and nosuid), keeping the locked flags. */
static int
bind_ro(const char *src, const char *dst, unsigned long extra, struct err *e)
{
	int rc;

	if ((rc = do_mount(src, dst, NULL, MS_BIND | MS_REC, NULL, e)) < 0)
		return rc;
	return do_mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
	    MS_NOSUID | extra | locked_flags(dst), NULL, e);
}

static int
mk_dir(const char *path, mode_t mode, struct err *e)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return err_set(e, -errno, "mkdir %s: %s", path, strerror(errno));
	return 0;
}

/* Mirrors one host top-level folder: the same symlink, or a read-only bind. */
static int
mirror_host_dir(const char *name, struct err *e)
{
	char host[64], target[256];
	struct stat st;
	ssize_t n;

	snprintf(host, sizeof(host), "/%s", name);
	if (lstat(host, &st) < 0)
		return 0;	/* not on this host */
	if (S_ISLNK(st.st_mode)) {
		n = readlink(host, target, sizeof(target) - 1);
		if (n < 0)
			return err_set(e, -errno, "readlink %s: %s", host, strerror(errno));
		target[n] = '\0';
		if (symlink(target, name) < 0)
			return err_set(e, -errno, "symlink %s: %s", name, strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (mk_dir(name, 0755, e) < 0)
		return e->code;
	return bind_ro(host, name, 0, e);
}

static int
build_dev(struct err *e)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "dev/fd" }, { "/proc/self/fd/0", "dev/stdin" },
		{ "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
		{ "pts/ptmx", "dev/ptmx" },
	};
	char host[64], dst[64];
	int fd, rc;

	if ((rc = do_mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
	    "size=64k,nr_inodes=64,mode=0755", e)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(dev_nodes) / sizeof(dev_nodes[0]); i++) {
		snprintf(host, sizeof(host), "/dev/%s", dev_nodes[i]);
		snprintf(dst, sizeof(dst), "dev/%s", dev_nodes[i]);
		fd = open(dst, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
		if (fd < 0)
			return err_set(e, -errno, "create %s: %s", dst, strerror(errno));
		close(fd);
		/*
		 * A bind of the host's node: device nodes on a tmpfs made in a
		 * user namespace do not work (it is nodev), and the job can
		 * create none of its own.
		 */
		if ((rc = do_mount(host, dst, NULL, MS_BIND, NULL, e)) < 0)
			return rc;
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			return err_set(e, -errno, "symlink %s: %s", links[i][1],
			    strerror(errno));
	if (mk_dir("dev/pts", 0755, e) < 0 || mk_dir("dev/shm", 01777, e) < 0)
		return e->code;
	return do_mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
	    "newinstance,ptmxmode=0666,mode=0620", e);
}

int
mount_build_root(bool base, struct err *e)
{
	/*
	 * Relative to run_dir, init's current folder (entered before it took
	 * the sandbox's uid): only run_dir and below need be searchable by that
	 * uid, whatever the modes of the folders above it.
	 */
	const char *root = "root", *etc = "../etc";
	int rc;

	/* Nothing we mount may propagate back to the host's namespace. */
	if ((rc = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, e)) < 0)
		return rc;
	if ((rc = do_mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
	    "size=64k,nr_inodes=256,mode=0755", e)) < 0)
		return rc;
	if (chdir(root) < 0)
		return err_set(e, -errno, "chdir %s: %s", root, strerror(errno));
	if (mk_dir("etc", 0755, e) < 0)
		return e->code;
	if ((rc = bind_ro(etc, "etc", MS_NODEV, e)) < 0)
		return rc;

	for (size_t i = 0; i < sizeof(host_dirs) / sizeof(host_dirs[0]); i++)
		if ((rc = mirror_host_dir(host_dirs[i], e)) < 0)
			return rc;
	if (mk_dir("proc", 0555, e) < 0 ||
	    mk_dir("dev", 0755, e) < 0 || mk_dir("tmp", 01777, e) < 0 ||
	    mk_dir("workspace", 0755, e) < 0)
		return e->code;
	/*
	 * The worker's kept base under /workspace, where every job's own
	 * /workspace will cover it: an overlay can only take a layer from a
	 * mount of its own namespace (persist.c).
	 */
	if (base && (rc = do_mount("../base", "workspace", NULL, MS_BIND | MS_NOSUID |
	    MS_NODEV | MS_NOEXEC, NULL, e)) < 0)
		return rc;
	if ((rc = build_dev(e)) < 0)
		return rc;
	/* We are pid 1 of the new pid namespace: this procfs shows only it. */
	if ((rc = do_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	    NULL, e)) < 0)
		return rc;

	/*
	 * pivot_root(".", ".") stacks the old root under the new one; the
	 * detach then drops every host mount from this namespace at once.
	 */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return err_set(e, -errno, "pivot_root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) < 0)
		return err_set(e, -errno, "detach old root: %s", strerror(errno));
	if (chdir("/") < 0)
		return err_set(e, -errno, "chdir /: %s", strerror(errno));
	/* /dev's tmpfs and the root are read-only once filled. */
	if ((rc = do_mount(NULL, "/dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
	    MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL, e)) < 0)
		return rc;
	return do_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
	    MS_NOSUID | MS_NODEV, NULL, e);
}

int
mount_job_tmpfs(const struct job_limits *l, uint64_t extra_bytes,
    uint64_t extra_inodes, struct err *e)
{
	char opts[128];
	int rc;

	/* A persistent sandbox's workspace holds its snapshot on top. */
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=0755,uid=%d,gid=%d",
	    (unsigned long long)(l->disk_bytes + extra_bytes),
	    (unsigned long long)(l->files + 1 + extra_inodes),
	    SANDBOX_UID, SANDBOX_UID);
	if ((rc = do_mount("tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV,
	    opts, e)) < 0)
		return rc;
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=01777",
	    (unsigned long long)l->disk_bytes, (unsigned long long)l->files + 1);
	if ((rc = do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts, e)) < 0)
		return rc;
	return do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts, e);
}
