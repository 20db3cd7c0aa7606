/*
 * ipcns.c - the IPC namespace a worker's sandboxes take turns in.
 *
 * Why. A new IPC namespace per sandbox cost about 1.4% of all CPU in the
 * throughput profile (copy_ipcs: the namespace's mqueue superblock, made
 * at the clone and torn down by a kernel worker afterwards): a few
 * percent of a short job. So the spawner makes one itself and clones the
 * next init into it, under the rules of the shared network namespace
 * (docs/security.md, "The IPC namespace"):
 *
 *   - nobody's but sandq's: the spawner unshares it, so its owner is the
 *     host's user namespace; its limits (/proc/sys/kernel/shm*, msg*,
 *     sem, /proc/sys/fs/mqueue) are writable only by that owner's root,
 *     and no job holds a capability over it;
 *   - one sandbox at a time: the next init enters it only once the last
 *     one cloned into it has ended (its pidfd readable: every process of
 *     its pid namespace gone). Two slots, taken in turn as the network
 *     namespaces are (spawn.c): the worker may prepare the next sandbox
 *     while the last one still runs, which then takes the other;
 *   - nothing left in it: only when it holds no System V shared memory
 *     segment, semaphore set or message queue (its /proc/sysvipc files,
 *     opened from inside, list none) and no POSIX message queue (its
 *     mqueue filesystem, mounted detached from inside, is empty);
 *     otherwise a new one is made, which is then the shared one.
 *
 * Only the spawner runs this file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define SYSVIPC_MAX 4096	/* what of a /proc/sysvipc file is read: its header */

static const char *const sysv_files[3] = {
	"/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg",
};

/* Closes slot sl's descriptors: its namespace is no longer shared. */
static void
slot_drop(struct ipcns_slot *sl)
{
	int *fds[] = { &sl->ns, &sl->mq, &sl->last, &sl->sysv[0], &sl->sysv[1],
	    &sl->sysv[2] };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

void
ipcns_spawner_init(struct ipcns *s)
{
	s->host = open("/proc/self/ns/ipc", O_RDONLY | O_CLOEXEC);
	s->turn = 0;
	s->cur = NULL;
	for (unsigned k = 0; k < IPCNS_SLOTS; k++) {
		struct ipcns_slot *sl = &s->slot[k];

		sl->ns = sl->mq = sl->last = -1;
		for (int i = 0; i < 3; i++)
			sl->sysv[i] = -1;
	}
}

void
ipcns_spawner_close(struct ipcns *s)
{
	for (unsigned k = 0; k < IPCNS_SLOTS; k++)
		slot_drop(&s->slot[k]);
	s->cur = NULL;
}

/* Whether a /proc/sysvipc file (fd, opened in the namespace) lists nothing. */
static bool
sysv_empty(int fd)
{
	char buf[SYSVIPC_MAX];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	char *nl;

	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* A header line, and nothing after it. */
	nl = strchr(buf, '\n');
	return nl != NULL && nl[1] == '\0';
}

/* Whether the mqueue filesystem (mnt, its root) holds no queue. */
static bool
mq_empty(int mnt)
{
	char buf[1024];
	int fd = openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool empty = fd >= 0;
	long n;

	while (empty && (n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			empty = false;
			break;
		}
		for (long off = 0; off < n; ) {
			const struct dirent64 *d = (const struct dirent64 *)(buf + off);

			if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0)
				empty = false;
			off += d->d_reclen;
		}
	}
	if (fd >= 0)
		close(fd);
	return empty;
}

/* Whether slot k of s may take the next init as it is (above). */
static bool
slot_reusable(void *arg, unsigned k)
{
	struct ipcns_slot *sl = &((struct ipcns *)arg)->slot[k];

	if (sl->ns < 0 || !ns_spawner_pidfd_ended(&sl->last))
		return false;
	for (int i = 0; i < 3; i++)
		if (!sysv_empty(sl->sysv[i]))
			return false;
	return mq_empty(sl->mq);
}

/*
 * Makes a new namespace in slot sl: unshared by the spawner, its sysvipc
 * files and mqueue filesystem opened from inside, then back to the
 * host's. Returns 0 or -errno; either way the spawner is back in its own.
 */
static int
slot_renew(const struct ipcns *s, struct ipcns_slot *sl)
{
	int rc = 0, fs = -1;

	slot_drop(sl);
	if (unshare(CLONE_NEWIPC) < 0)
		return -errno;
	for (int i = 0; i < 3 && rc == 0; i++)
		if ((sl->sysv[i] = open(sysv_files[i], O_RDONLY | O_CLOEXEC)) < 0)
			rc = -errno;
	/* The namespace's own mqueue superblock (it is keyed by namespace). */
	if (rc == 0 && ((fs = fsopen("mqueue", FSOPEN_CLOEXEC)) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
	    (sl->mq = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
	    MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0))
		rc = -errno;
	if (fs >= 0)
		close(fs);
	if (rc == 0 && (sl->ns = open("/proc/self/ns/ipc", O_RDONLY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (setns(s->host, CLONE_NEWIPC) < 0)
		_exit(1);	/* a spawner in the wrong namespace clones nothing */
	if (rc < 0)
		slot_drop(sl);
	return rc;
}

/* Whether slot i of s has no init left running in it. */
static bool
slot_ended(void *arg, unsigned i)
{
	return ns_spawner_pidfd_ended(&((struct ipcns *)arg)->slot[i].last);
}

bool
ipcns_spawner_enter(struct ipcns *s)
{
	struct ipcns_slot *sl;
	bool reuse;

	s->cur = NULL;
	if (s->host < 0)
		return false;
	/* As the network namespaces are taken (ns_spawner_slot_pick()). */
	s->turn = ns_spawner_slot_pick(IPCNS_SLOTS, s->turn, slot_reusable, slot_ended, s, &reuse);
	sl = &s->slot[s->turn];
	if (!reuse && slot_renew(s, sl) < 0)
		return false;
	if (setns(sl->ns, CLONE_NEWIPC) < 0)
		return false;
	s->cur = sl;
	return true;
}

void
ipcns_spawner_leave(struct ipcns *s, int pidfd)
{
	if (setns(s->host, CLONE_NEWIPC) < 0)
		_exit(1);
	/* No init to wait for: an unknown end, never shared again. */
	if (s->cur != NULL && (pidfd < 0 ||
	    (s->cur->last = fcntl(pidfd, F_DUPFD_CLOEXEC, 0)) < 0))
		slot_drop(s->cur);
	s->cur = NULL;
}
