/*
 * layers.c - the image layers a worker's sandboxes are built from: one
 * idmapped, read-only mount of each unpacked layer of the image cache,
 * made by the spawner on request and kept for the worker's later jobs.
 *
 * The cache's files belong to the uid that unpacked them (image_unpack_uid),
 * never to a sandbox's. A sandbox maps one id inside to its worker's host
 * uid, so through a plain bind the layers would show as nobody's: readable,
 * but never the job's own, and overlayfs could not copy a file up for the
 * job to change it. An idmapped mount (mount_setattr(MOUNT_ATTR_IDMAP))
 * shows them as the worker's host uid instead, that is as the job's own
 * user inside the sandbox, while the cache on disk stays untouched and
 * read-only to everyone but the unpacker.
 *
 * Making an idmapped mount takes CAP_SYS_ADMIN in the initial user
 * namespace: the spawner has it (root, no filter, forked before the worker
 * confined itself, in the worker's mount namespace), the worker does not.
 * So the worker asks (MSG_SPAWN_LAYERS, the layers' digests) and the
 * spawner mounts each one it does not hold yet at run_dir/layers/HEX, a
 * path every init cloned afterwards sees in its copy of the namespace.
 *
 * The spawner trusts only the request's shape (64 hex digits a layer). The
 * layer's folder is the unpacker's to write, and the unpacker handles
 * hostile bytes, so it is opened one component at a time without following
 * a link, and must be a folder owned by the unpacking uid: a link planted
 * in layers/sha256 cannot make the spawner mount any other folder of the
 * host. Each mount is read-only, nosuid and nodev whatever the layer holds.
 *
 * A layer the cache evicted and pulled again is a new folder under the
 * same name: each request compares the folder's device and inode with
 * those of the mount it has, and mounts the new one in place of the old.
 *
 * Everything here runs in the spawner (layers_spawner_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* One layer the spawner holds mounted. */
struct held {
	char hex[65];		/* its digest's hex digits; "" = a free slot */
	dev_t dev;		/* the cache folder it is a mount of */
	ino_t ino;
	uint64_t used;		/* request count when last asked for (LRU) */
};

static struct held held[LAYERS_HELD_MAX];
static uint64_t requests;
static int userns = -1;		/* the idmap: unpack uid -> the worker's host uid */

/* Whether s is 64 lower-case hex digits. */
static bool
hex_ok(const char *s)
{
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/*
 * A user namespace whose maps send the unpacking uid (and gid) to the
 * worker's host uid, held open: the idmap of every layer mount. A child
 * makes the namespace and waits; we (root in the initial namespace) write
 * its maps, open it, and end the child. Made once per spawner.
 */
static int
idmap_userns(const struct sandbox_conf *conf)
{
	char path[64], map[64];
	int p[2], fd, rc = 0;
	pid_t pid;
	char c;

	if (userns >= 0)
		return userns;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(p[0]);
		close(p[1]);
		return rc;
	}
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (unshare(CLONE_NEWUSER) < 0)
			_exit(1);
		if (write(p[1], "u", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1)
		rc = -ECHILD;
	close(p[0]);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)conf->unpack_uid,
	    (unsigned)conf->host_uid);
	for (int i = 0; i < 2 && rc == 0; i++) {
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
		if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0 ||
		    write(fd, map, strlen(map)) != (ssize_t)strlen(map))
			rc = -errno;
		if (fd >= 0)
			close(fd);
	}
	if (rc == 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		if ((userns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			rc = -errno;
	}
	/* The namespace lives on in our descriptor; SIGCHLD is ignored: no zombie. */
	kill(pid, SIGKILL);
	return rc < 0 ? rc : userns;
}

/*
 * Opens the cache's folder of layer hex without following a link
 * anywhere below the cache's root, and checks it is a folder of the
 * unpacker's. Returns an O_PATH descriptor (st filled) or -errno.
 */
static int
open_layer(const struct sandbox_conf *conf, const char *hex, struct stat *st)
{
	char path[PATH_MAX];
	int dir, fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/layers/sha256", conf->image_cache) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	dir = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		return -errno;
	fd = openat(dir, hex, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(dir);
	if (fd < 0)
		return errno == ENOTDIR ? -ELOOP : -errno;
	if (fstat(fd, st) < 0 || !S_ISDIR(st->st_mode) || st->st_uid != conf->unpack_uid) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* Mounts the layer open as fd, idmapped, on its place below run_dir. */
static int
mount_layer(const struct sandbox_conf *conf, int fd, const char *hex)
{
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
		    MOUNT_ATTR_NODEV,
	};
	char dst[PATH_MAX];
	int tree, ns, rc = 0;

	if ((ns = idmap_userns(conf)) < 0)
		return ns;
	attr.userns_fd = (uint64_t)ns;
	snprintf(dst, sizeof(dst), "%s/layers/%s", conf->run_dir, hex);
	if (mkdir(dst, 0755) < 0 && errno != EEXIST)
		return -errno;
	/* A detached copy of that folder alone (no mount below it is taken). */
	tree = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (tree < 0)
		return -errno;
	if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0 ||
	    move_mount(tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		rc = -errno;
	close(tree);
	return rc;
}

/* Unmounts the held layer h and frees its slot. */
static void
drop(const struct sandbox_conf *conf, struct held *h)
{
	char dst[PATH_MAX];

	snprintf(dst, sizeof(dst), "%s/layers/%s", conf->run_dir, h->hex);
	(void)umount2(dst, MNT_DETACH);
	(void)rmdir(dst);
	h->hex[0] = '\0';
}

/*
 * A slot for a new layer: a free one, else the least recently asked for
 * that this request does not use (unmounted first). NULL if every slot is
 * this request's.
 */
static struct held *
slot(const struct sandbox_conf *conf)
{
	struct held *old = NULL;

	for (size_t i = 0; i < LAYERS_HELD_MAX; i++) {
		if (held[i].hex[0] == '\0')
			return &held[i];
		if (held[i].used != requests && (old == NULL || held[i].used < old->used))
			old = &held[i];
	}
	if (old != NULL)
		drop(conf, old);
	return old;
}

/* Makes sure layer hex is mounted and current; *mounted counts a new mount. */
static int
ensure(const struct sandbox_conf *conf, const char *hex, uint32_t *mounted)
{
	struct held *h = NULL;
	struct stat st;
	int fd, rc;

	if ((fd = open_layer(conf, hex, &st)) < 0)
		return fd;
	for (size_t i = 0; i < LAYERS_HELD_MAX && h == NULL; i++)
		if (strcmp(held[i].hex, hex) == 0)
			h = &held[i];
	if (h != NULL && h->dev == st.st_dev && h->ino == st.st_ino) {
		h->used = requests;
		close(fd);
		return 0;
	}
	/* Not held, or a mount of a folder the cache has since replaced. */
	if (h != NULL)
		drop(conf, h);
	else if ((h = slot(conf)) == NULL) {
		close(fd);
		return -ENOSPC;
	}
	rc = mount_layer(conf, fd, hex);
	close(fd);
	if (rc < 0)
		return rc;
	memcpy(h->hex, hex, 64);
	h->hex[64] = '\0';
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	h->used = requests;
	(*mounted)++;
	return 0;
}

void
layers_spawner_request(const struct sandbox_conf *conf, const void *buf, size_t len,
    struct msg_spawn_layers *out)
{
	const char *p = buf;
	size_t n = len / 64;

	*out = (struct msg_spawn_layers){ .index = -1 };
	if (conf->image_cache == NULL) {
		out->error = ENOSYS;	/* this worker was started without a cache */
		return;
	}
	requests++;
	for (size_t i = 0; i < n; i++) {
		char hex[65];
		int rc;

		memcpy(hex, p + 64 * i, 64);
		hex[64] = '\0';
		rc = hex_ok(hex) ? ensure(conf, hex, &out->mounted) : -EINVAL;
		if (rc < 0) {
			out->error = -rc;
			out->index = (int32_t)i;
			return;
		}
	}
}
