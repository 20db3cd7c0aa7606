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
 *   /dev                       null zero full random urandom tty (the
 *                              host's device numbers), fd/std* links, a
 *                              private devpts
 *   /proc                      a fresh procfs of the sandbox's pid namespace
 *   /workspace /tmp /dev/shm   per-job tmpfs capped at the job's disk limit
 *
 * then pivots into it, detaches the old root and remounts the root read-only.
 * Nothing of the host outside the image is reachable afterwards. Every mount
 * is nosuid; tmpfs mounts made in a user namespace are implicitly nodev.
 *
 * TEMPLATE. What is the same in every sandbox (the read-only /etc, the host
 * folders, /dev's nodes and links) the worker builds once, at start-up, in
 * its own mount namespace at run_dir/tmpl (mount_worker_template()): binds
 * remounted read-only, and /dev a tmpfs filled then made read-only, its
 * superblock included. Each init's clone copies that namespace, and the
 * copy, made for a less privileged user namespace, locks every flag of
 * every mount (read-only, nosuid, nodev, noexec) and every mount to its
 * parent. Init then places one recursive bind of each piece on its own
 * fresh root tmpfs: no lookup of the host's folders, no remount, no /dev
 * tmpfs to fill and tear down per sandbox. What is per sandbox stays so:
 * the root tmpfs (init may still make a workdir's folders on it), the
 * devpts instance, /proc, and the job's tmpfs. Nothing of the template
 * can change: its mounts are read-only and locked in every sandbox, /dev's
 * superblock is read-only and owned by the host's user namespace, and no
 * sandbox can unmount a piece of it to reach below (docs/security.md,
 * "The mount template"; tests/reuse_test.c).
 *
 * On an OCI image (mount_build_image_root) the root is instead overlayfs,
 * mounted here in the sandbox's user namespace with userxattr: its lower
 * layers are the image's layers, idmapped mounts the spawner keeps at
 * run_dir/layers/HEX (layers.c) that show every file as the job's own; its
 * upper layer and work folder are on a tmpfs of this sandbox alone, sized
 * to the job's disk limit when the job arrives (mount_image_upper_size),
 * and thrown away with the sandbox. The image's whiteouts (0/0 character
 * devices) and opaque folders (user.overlay.opaque) hide what lower layers
 * hold, as the OCI spec says. The root stays writable (the job may change
 * its image; the cache never sees it) and is nosuid and nodev. /dev,
 * /proc, /tmp, /workspace are sandq's as on the host's image, and so are
 * /etc/hosts, /etc/hostname and /etc/resolv.conf, bound read-only over the
 * image's (made first where the image has none).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

/*** The template (worker) ***/

#define TMPL "tmpl"	/* the template's folder under run_dir */

/* What the template holds of each host folder, for every init to copy. */
static struct {
	bool present;		/* the host has it */
	bool link;		/* a symlink (merged /usr), else a folder bound */
	char target[256];	/* the link's target */
} tmpl_host[sizeof(host_dirs) / sizeof(host_dirs[0])];
static bool tmpl_built;		/* mount_worker_template() succeeded */

/*
 * Mirrors host folder host_dirs[i] into the template (the current folder):
 * the same symlink, recorded for inits, or a read-only bind.
 */
static int
tmpl_host_dir(size_t i, struct err *e)
{
	const char *name = host_dirs[i];
	char host[64];
	struct stat st;
	ssize_t n;

	snprintf(host, sizeof(host), "/%s", name);
	if (lstat(host, &st) < 0)
		return 0;	/* not on this host */
	if (S_ISLNK(st.st_mode)) {
		n = readlink(host, tmpl_host[i].target, sizeof(tmpl_host[i].target) - 1);
		if (n < 0)
			return err_set(e, -errno, "readlink %s: %s", host, strerror(errno));
		tmpl_host[i].target[n] = '\0';
		tmpl_host[i].link = tmpl_host[i].present = true;
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (mk_dir(name, 0755, e) < 0)
		return e->code;
	tmpl_host[i].present = true;
	return bind_ro(host, name, 0, e);
}

/*
 * The template's /dev (the current folder's dev/): a small tmpfs holding
 * the host's harmless nodes, the fd and std* links, and the folders devpts
 * and each job's /dev/shm are mounted on; then read-only, the superblock
 * itself too. The nodes are made here (mknod, the host's device numbers,
 * 0666), on a tmpfs the worker mounts as host root without nodev: device
 * nodes work there (they would not on a tmpfs a sandbox made, and a job
 * can create none of its own), and each init's recursive bind of /dev is
 * then one mount, not seven (docs/decisions.md, "Throughput, third
 * round"). Nothing can add a node later: the superblock is read-only and
 * mknod needs CAP_MKNOD in the host's user namespace.
 */
static int
tmpl_dev(struct err *e)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "dev/fd" }, { "/proc/self/fd/0", "dev/stdin" },
		{ "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
		{ "pts/ptmx", "dev/ptmx" },
	};
	char host[64], dst[64];
	int rc;

	if (mk_dir("dev", 0755, e) < 0)
		return e->code;
	if ((rc = do_mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
	    "size=64k,nr_inodes=64,mode=0755", e)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(dev_nodes) / sizeof(dev_nodes[0]); i++) {
		struct stat st;

		snprintf(host, sizeof(host), "/dev/%s", dev_nodes[i]);
		snprintf(dst, sizeof(dst), "dev/%s", dev_nodes[i]);
		/* The host's node, whatever its numbers, if it is a character device. */
		if (stat(host, &st) < 0)
			return err_set(e, -errno, "stat %s: %s", host, strerror(errno));
		if (!S_ISCHR(st.st_mode))
			return err_set(e, -ENODEV, "%s is not a character device", host);
		if (mknod(dst, S_IFCHR | 0666, st.st_rdev) < 0 || chmod(dst, 0666) < 0)
			return err_set(e, -errno, "mknod %s: %s", dst, strerror(errno));
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			return err_set(e, -errno, "symlink %s: %s", links[i][1],
			    strerror(errno));
	if (mk_dir("dev/pts", 0755, e) < 0 || mk_dir("dev/shm", 01777, e) < 0)
		return e->code;
	/* The superblock read-only (no bind flag), then this mount of it. */
	if ((rc = do_mount(NULL, "dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID |
	    MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755", e)) < 0)
		return rc;
	return do_mount(NULL, "dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
	    MS_NOEXEC, NULL, e);
}

int
mount_worker_template(const char *run_dir, struct err *e)
{
	char path[512];
	int here, rc;

	/* Built relative to run_dir/tmpl; our own folder back afterwards. */
	if ((here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return err_set(e, -errno, "open the current folder: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/" TMPL, run_dir);
	if ((rc = mk_dir(path, 0755, e)) < 0)
		goto out;
	if (chdir(path) < 0) {
		rc = err_set(e, -errno, "chdir %s: %s", path, strerror(errno));
		goto out;
	}
	if ((rc = mk_dir("etc", 0755, e)) < 0 || (rc = bind_ro("../etc", "etc", MS_NODEV,
	    e)) < 0)
		goto out;
	for (size_t i = 0; i < sizeof(host_dirs) / sizeof(host_dirs[0]); i++)
		if ((rc = tmpl_host_dir(i, e)) < 0)
			goto out;
	if ((rc = tmpl_dev(e)) < 0)
		goto out;
	tmpl_built = true;
out:
	if (fchdir(here) < 0 && rc == 0)
		rc = err_set(e, -errno, "back to our folder: %s", strerror(errno));
	close(here);
	return rc;
}

/*** A sandbox's root (init) ***/

/*
 * Places the template's dev/ (relative path tdev) on dev, then a devpts
 * instance of this sandbox's own on dev/pts: /dev read-only, locked.
 */
static int
place_dev(const char *tdev, struct err *e)
{
	int rc;

	if ((rc = do_mount(tdev, "dev", NULL, MS_BIND | MS_REC, NULL, e)) < 0)
		return rc;
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
	const char *root = "root";
	char src[64];
	int rc;

	if (!tmpl_built)
		return err_set(e, -ENOENT, "the worker built no mount template");
	/* Nothing we mount may propagate back to the host's namespace. */
	if ((rc = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, e)) < 0)
		return rc;
	if ((rc = do_mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
	    "size=64k,nr_inodes=256,mode=0755", e)) < 0)
		return rc;
	if (chdir(root) < 0)
		return err_set(e, -errno, "chdir %s: %s", root, strerror(errno));
	/* The template's pieces, read-only and locked as they are (above). */
	if (mk_dir("etc", 0755, e) < 0)
		return e->code;
	if ((rc = do_mount("../" TMPL "/etc", "etc", NULL, MS_BIND | MS_REC, NULL, e)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(host_dirs) / sizeof(host_dirs[0]); i++) {
		const char *name = host_dirs[i];

		if (!tmpl_host[i].present)
			continue;
		if (tmpl_host[i].link) {
			if (symlink(tmpl_host[i].target, name) < 0)
				return err_set(e, -errno, "symlink %s: %s", name, strerror(errno));
			continue;
		}
		snprintf(src, sizeof(src), "../" TMPL "/%s", name);
		if (mk_dir(name, 0755, e) < 0)
			return e->code;
		if ((rc = do_mount(src, name, NULL, MS_BIND | MS_REC, NULL, e)) < 0)
			return rc;
	}
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
	if ((rc = place_dev("../" TMPL "/dev", e)) < 0)
		return rc;
	/* We are pid 1 of the new pid namespace: this procfs shows only it. */
	if ((rc = do_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	    NULL, e)) < 0)
		return rc;

	/*
	 * pivot_root(".", ".") stacks the old root under the new one; the
	 * detach then drops every host mount from this namespace at once
	 * (the template's with them: only our binds of it stay).
	 */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return err_set(e, -errno, "pivot_root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) < 0)
		return err_set(e, -errno, "detach old root: %s", strerror(errno));
	if (chdir("/") < 0)
		return err_set(e, -errno, "chdir /: %s", strerror(errno));
	/* The root is read-only once filled (/dev is already). */
	return do_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
	    MS_NOSUID | MS_NODEV, NULL, e);
}

/*** An image's root ***/

#define IMAGE_UPPER_BYTES (16u << 20)	/* the writable layer until the job sizes it */
#define IMAGE_UPPER_INODES 1024u
#define IMAGE_UPPER_EXTRA_INODES 64u	/* what the root's set-up itself makes */

static int upper_fd = -1;	/* the writable layer's tmpfs (O_PATH), for its size */

/* The files of sandq's /etc an image's /etc takes. */
static const char *const image_etc[] = { "hosts", "hostname", "resolv.conf" };

/*
 * Makes name (one component, relative to rootfd: the image's root) a real
 * folder: kept if it is one, made if absent, and anything else the image
 * put there (a link, a file) removed first, so nothing mounted on it later
 * follows a link of the image's.
 */
static int
image_dir(int rootfd, const char *name, mode_t mode, struct err *e)
{
	struct stat st;

	if (fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		if (unlinkat(rootfd, name, 0) < 0)
			return err_set(e, -errno, "the image's /%s: %s", name, strerror(errno));
	} else if (errno != ENOENT) {
		return err_set(e, -errno, "the image's /%s: %s", name, strerror(errno));
	}
	if (mkdirat(rootfd, name, mode) < 0)
		return err_set(e, -errno, "mkdir /%s: %s", name, strerror(errno));
	return 0;
}

/*
 * Binds sandq's etc/NAME (src) over the image's /etc/NAME (etcfd's),
 * read-only: a regular file of the image's is covered; a link or a
 * missing one becomes an empty file first. A folder there is refused.
 */
static int
image_etc_file(int etcfd, const char *name, const char *src, struct err *e)
{
	char dst[64];
	struct stat st;
	int fd;

	if (fstatat(etcfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return err_set(e, -EISDIR, "the image's /etc/%s is a folder", name);
		if (!S_ISREG(st.st_mode) && unlinkat(etcfd, name, 0) < 0)
			return err_set(e, -errno, "the image's /etc/%s: %s", name,
			    strerror(errno));
	} else if (errno != ENOENT) {
		return err_set(e, -errno, "the image's /etc/%s: %s", name, strerror(errno));
	}
	fd = openat(etcfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return err_set(e, -errno, "the image's /etc/%s: %s", name, strerror(errno));
	close(fd);
	snprintf(dst, sizeof(dst), "etc/%s", name);
	return bind_ro(src, dst, MS_NODEV, e);
}

/*
 * The overlay of the n layers at layers/HEX (top first, relative to
 * run_dir, our current folder) over root/upper, mounted on root/merged
 * nosuid and nodev. Its errors carry overlayfs's own reason when it gives
 * one (read from the filesystem context).
 */
static int
image_overlay(const char (*hex)[65], size_t n, struct err *e)
{
	char path[80], why[256] = "";
	int fs, mnt, rc = 0;

	if ((fs = fsopen("overlay", FSOPEN_CLOEXEC)) < 0)
		return err_set(e, -errno, "fsopen overlay: %s", strerror(errno));
	/* lowerdir+: one layer per call, no length limit on the list. */
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(path, sizeof(path), "layers/%.64s", hex[i]);
		if (fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", path, 0) < 0)
			rc = -errno;
	}
	if (rc == 0 && (fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", "root/upper", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "workdir", "root/work", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0))
		rc = -errno;
	if (rc < 0) {
		ssize_t k = read(fs, why, sizeof(why) - 1);

		why[k > 0 ? k : 0] = '\0';
		close(fs);
		return err_set(e, rc, "overlay of %zu layers: %s%s%s", n, strerror(-rc),
		    why[0] ? ": " : "", why);
	}
	mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	close(fs);
	if (mnt < 0)
		return err_set(e, -errno, "fsmount overlay: %s", strerror(errno));
	if (move_mount(mnt, "", AT_FDCWD, "root/merged", MOVE_MOUNT_F_EMPTY_PATH) < 0)
		rc = err_set(e, -errno, "mount the overlay: %s", strerror(errno));
	close(mnt);
	return rc;
}

int
mount_build_image_root(const char (*hex)[65], size_t n, bool base, struct err *e)
{
	char opts[96], src[64];
	int rootfd = -1, etcfd = -1, rc;

	if (!tmpl_built)
		return err_set(e, -ENOENT, "the worker built no mount template");
	if ((rc = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, e)) < 0)
		return rc;
	/* The writable layer: this sandbox's own, gone with it. */
	snprintf(opts, sizeof(opts), "size=%u,nr_inodes=%u,mode=0755", IMAGE_UPPER_BYTES,
	    IMAGE_UPPER_INODES);
	if ((rc = do_mount("tmpfs", "root", "tmpfs", MS_NOSUID | MS_NODEV, opts, e)) < 0)
		return rc;
	if (mk_dir("root/upper", 0755, e) < 0 || mk_dir("root/work", 0755, e) < 0 ||
	    mk_dir("root/merged", 0755, e) < 0)
		return e->code;
	if ((upper_fd = open("root", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return err_set(e, -errno, "open root: %s", strerror(errno));
	if ((rc = image_overlay(hex, n, e)) < 0)
		return rc;
	if (chdir("root/merged") < 0)
		return err_set(e, -errno, "chdir root/merged: %s", strerror(errno));
	if ((rootfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return err_set(e, -errno, "open the image's root: %s", strerror(errno));
	if ((rc = image_dir(rootfd, "proc", 0555, e)) < 0 ||
	    (rc = image_dir(rootfd, "dev", 0755, e)) < 0 ||
	    (rc = image_dir(rootfd, "tmp", 01777, e)) < 0 ||
	    (rc = image_dir(rootfd, "workspace", 0755, e)) < 0 ||
	    (rc = image_dir(rootfd, "etc", 0755, e)) < 0)
		goto out;
	if ((etcfd = openat(rootfd, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0) {
		rc = err_set(e, -errno, "open the image's /etc: %s", strerror(errno));
		goto out;
	}
	/* Relative to root/merged: the worker's generated etc is run_dir/etc. */
	for (size_t i = 0; i < sizeof(image_etc) / sizeof(image_etc[0]); i++) {
		snprintf(src, sizeof(src), "../../etc/%s", image_etc[i]);
		if ((rc = image_etc_file(etcfd, image_etc[i], src, e)) < 0)
			goto out;
	}
	if (base && (rc = do_mount("../../base", "workspace", NULL, MS_BIND | MS_NOSUID |
	    MS_NODEV | MS_NOEXEC, NULL, e)) < 0)
		goto out;
	if ((rc = place_dev("../../" TMPL "/dev", e)) < 0)
		goto out;
	if ((rc = do_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	    NULL, e)) < 0)
		goto out;
	/* As for the host's image: the old root stacked under, then dropped. */
	if (syscall(SYS_pivot_root, ".", ".") < 0) {
		rc = err_set(e, -errno, "pivot_root: %s", strerror(errno));
		goto out;
	}
	if (umount2(".", MNT_DETACH) < 0) {
		rc = err_set(e, -errno, "detach old root: %s", strerror(errno));
		goto out;
	}
	if (chdir("/") < 0) {
		rc = err_set(e, -errno, "chdir /: %s", strerror(errno));
		goto out;
	}
	/* /dev is the template's, read-only; the root stays the job's to change. */
out:
	if (etcfd >= 0)
		close(etcfd);
	if (rootfd >= 0)
		close(rootfd);
	return rc;
}

int
mount_image_upper_size(const struct job_limits *l, struct err *e)
{
	char size[32], inodes[32];
	int fc, rc = 0;

	/*
	 * The tmpfs is in the detached old tree since the pivot: fspick()
	 * takes its superblock through the descriptor kept, and resizes it.
	 */
	snprintf(size, sizeof(size), "%llu", (unsigned long long)l->disk_bytes);
	snprintf(inodes, sizeof(inodes), "%llu", (unsigned long long)l->files + 1 +
	    IMAGE_UPPER_EXTRA_INODES);
	if ((fc = fspick(upper_fd, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC)) < 0)
		return err_set(e, -errno, "fspick the root's layer: %s", strerror(errno));
	if (fsconfig(fc, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
	    fsconfig(fc, FSCONFIG_SET_STRING, "nr_inodes", inodes, 0) < 0 ||
	    fsconfig(fc, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
		rc = err_set(e, -errno, "size the root's layer to %s bytes: %s", size,
		    strerror(errno));
	close(fc);
	return rc;
}

int
mount_job_tmpfs(const struct job_limits *l, uint64_t extra_bytes,
    uint64_t extra_inodes, const char *ws, struct err *e)
{
	char opts[128];
	int rc;

	/* A persistent sandbox's workspace holds its snapshot on top. */
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=0755,uid=%u,gid=%u",
	    (unsigned long long)(l->disk_bytes + extra_bytes),
	    (unsigned long long)(l->files + 1 + extra_inodes),
	    (unsigned)getuid(), (unsigned)getgid());
	if ((rc = do_mount("tmpfs", ws, "tmpfs", MS_NOSUID | MS_NODEV, opts, e)) < 0)
		return rc;
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=01777",
	    (unsigned long long)l->disk_bytes, (unsigned long long)l->files + 1);
	if ((rc = do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts, e)) < 0)
		return rc;
	return do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts, e);
}

/*** A sandbox's workdir ***/

/*
 * Makes every component of ws (an absolute, normalised path: proto/path.h)
 * a folder, from the root down: kept where the root has one, made where it
 * has none. Nothing is followed: a component that is a symlink or a file
 * is refused, naming it, so the sandbox's files are never mounted through
 * a link of the image's. Relative to dirfd, the root.
 */
static int
workdir_walk(int rootfd, const char *ws, struct err *e)
{
	char path[PATH_MAX];
	int dirfd = rootfd, next, rc = 0;
	size_t n = strlen(ws);

	if (n >= sizeof(path) || ws[0] != '/')
		return err_set(e, -EINVAL, "workdir '%s': not an absolute path", ws);
	memcpy(path, ws, n + 1);
	for (char *c = path + 1; *c != '\0';) {
		char *end = c + strcspn(c, "/");
		bool last = *end == '\0';

		*end = '\0';	/* path is now the folder made, for messages */
		if (mkdirat(dirfd, c, 0755) < 0 && errno != EEXIST) {
			rc = err_set(e, -errno, "workdir '%s': cannot make '%s': %s", ws,
			    path, strerror(errno));
			break;
		}
		if ((next = openat(dirfd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC)) < 0) {
			rc = err_set(e, -errno, "workdir '%s': '%s' is %s", ws, path,
			    errno == ELOOP || errno == ENOTDIR ? "not a folder (a symlink "
			    "or a file) in the sandbox's image" : strerror(errno));
			break;
		}
		if (dirfd != rootfd)
			close(dirfd);
		dirfd = next;
		if (last)
			break;
		*end = '/';
		c = end + 1;
	}
	if (dirfd != rootfd)
		close(dirfd);
	return rc;
}

int
mount_workdir_make(const char *ws, bool image, struct err *e)
{
	int rootfd, rc, rc2 = 0;

	/*
	 * The host's root is read-only once built: writable for the mkdirs,
	 * then read-only again (the mount is this namespace's own). An
	 * image's root is the job's own, writable already.
	 */
	if (!image && (rc = do_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID |
	    MS_NODEV, NULL, e)) < 0)
		return rc;
	if ((rootfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = err_set(e, -errno, "open /: %s", strerror(errno));
	else
		rc = workdir_walk(rootfd, ws, e);
	if (rootfd >= 0)
		close(rootfd);
	if (!image)
		rc2 = do_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
		    MS_NOSUID | MS_NODEV, NULL, rc < 0 ? &(struct err){ 0 } : e);
	return rc < 0 ? rc : rc2;
}

int
mount_workspace_cover(struct err *e)
{
	/*
	 * /workspace holds the worker's kept base (bound there before the
	 * root was pivoted); a sandbox whose files are elsewhere covers it
	 * with an empty, read-only folder.
	 */
	return do_mount("tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV |
	    MS_NOEXEC | MS_RDONLY, "size=4k,nr_inodes=2,mode=0555", e);
}
