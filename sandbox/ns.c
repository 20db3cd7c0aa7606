/*
 * ns.c - namespaces: the uid/gid maps, the sandbox identity, loopback.
 *
 * The sandbox's init is created (by the spawner, spawn.c) with one clone()
 * that unshares user, mount, pid and uts namespaces at once, so there is
 * no moment where it shares any of them with the worker. Its network
 * namespace is new too (job_netns = fresh), or one of the two its worker's
 * sandboxes take turns in, which the spawner makes here
 * (ns_spawner_net_make()) and owns: no job has a capability over it; its
 * IPC namespace likewise (ipcns.c). Both kinds take turns by the same rule
 * (ns_spawner_slot_pick()). Its uid
 * inside is SANDBOX_UID (on an image: the image's user, root included),
 * mapped to one unprivileged host uid per worker: the job is never host
 * root, and two workers' jobs never share a host uid.
 *
 * The spawner's own mount namespace holds only what it and its inits use
 * (ns_spawner_mounts_trim()): each init's clone copies that namespace, and
 * its pivot detaches the copy again, so every host mount left out is one
 * mount fewer to copy and to tear down per sandbox.
 *
 * Two processes run this file, and each function says which in its name:
 * ns_worker_write_id_maps() runs in the worker (root in the parent
 * namespace), ns_spawner_* in the spawner, ns_init_* in the sandbox's
 * init, inside its namespaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "internal.h"

static int
write_file(const char *path, const char *text, struct err *e)
{
	int fd, rc;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, -errno, "open %s: %s", path, strerror(errno));
	rc = write_all(fd, text, strlen(text));
	close(fd);
	if (rc < 0)
		return err_set(e, rc, "write %s: %s", path, strerror(-rc));
	return 0;
}

int
ns_worker_write_id_maps(pid_t pid, uid_t host_uid, uint32_t uid, uint32_t gid,
    struct err *e)
{
	char path[64], map[64];
	int rc;

	/*
	 * One id inside, one unprivileged id outside. Written by the worker
	 * (root in the parent namespace), so setgroups stays "allow" for the
	 * child to clear its supplementary groups with.
	 */
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)host_uid);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	if ((rc = write_file(path, map, e)) < 0)
		return rc;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)host_uid);
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	return write_file(path, map, e);
}

int
ns_init_become_sandbox_user(uint32_t uid, uint32_t gid, struct err *e)
{
	/*
	 * Keep capabilities across the uid change: init still has to mount and
	 * pivot inside its user namespace. The job's own process drops them
	 * all before exec (exec.c).
	 */
	if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) < 0)
		return err_set(e, -errno, "set securebits: %s", strerror(errno));
	if (setgroups(0, NULL) < 0)
		return err_set(e, -errno, "setgroups: %s", strerror(errno));
	if (setresgid(gid, gid, gid) < 0)
		return err_set(e, -errno, "setresgid: %s", strerror(errno));
	if (setresuid(uid, uid, uid) < 0)
		return err_set(e, -errno, "setresuid: %s", strerror(errno));
	return 0;
}

/* Brings loopback of the caller's network namespace up, if it is not. */
static int
loopback_up(struct err *e)
{
	struct ifreq ifr;
	int fd, rc = 0;

	/*
	 * An AF_UNIX socket is enough: interface ioctls fall through to the
	 * socket's network namespace, and it works in every network mode.
	 */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_set(e, -errno, "socket: %s", strerror(errno));
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		rc = err_set(e, -errno, "loopback flags: %s", strerror(errno));
		goto out_close;
	}
	if ((ifr.ifr_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING))
		goto out_close;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		rc = err_set(e, -errno, "loopback up: %s", strerror(errno));
out_close:
	close(fd);
	return rc;
}

/* This init's network namespace is a shared one (ns_init_net_is_shared()). */
static bool init_net_shared;

void
ns_init_net_is_shared(void)
{
	init_net_shared = true;
}

int
ns_init_loopback_up(struct err *e)
{
	/* No socket and two ioctls per sandbox for a loopback already up. */
	if (init_net_shared)
		return 0;
	return loopback_up(e);
}

/*
 * Settings of the shared network namespace, written once as its owner
 * (host root): no job can write any of them (docs/security.md, "The
 * network namespace"). TCP keeps no metrics of past connections (RTT,
 * window, reordering per destination) that a later connection would
 * start from: a job's connections leave nothing a later one reads.
 */
static const char *const netns_sysctls[][2] = {
	{ "/proc/sys/net/ipv4/tcp_no_metrics_save", "1\n" },
};

int
ns_spawner_net_make(struct err *e)
{
	int rc;

	if (unshare(CLONE_NEWNET) < 0)
		return err_set(e, -errno, "unshare a network namespace: %s",
		    strerror(errno));
	for (size_t i = 0; i < sizeof(netns_sysctls) / sizeof(netns_sysctls[0]); i++)
		if ((rc = write_file(netns_sysctls[i][0], netns_sysctls[i][1], e)) < 0)
			return rc;
	return loopback_up(e);
}

/*** The shared namespaces' turns (spawner; internal.h) ***/

bool
ns_spawner_pidfd_ended(int *pidfd)
{
	struct pollfd p = { .fd = *pidfd, .events = POLLIN };

	if (*pidfd < 0)
		return true;
	/*
	 * No wait: a sandbox asked for while both slots' inits still run
	 * gets a namespace of its own rather than hold the worker up.
	 */
	if (poll(&p, 1, 0) != 1)
		return false;
	close(*pidfd);
	*pidfd = -1;
	return true;
}

unsigned
ns_spawner_slot_pick(unsigned n, unsigned turn, bool (*reusable)(void *arg, unsigned i),
    bool (*ended)(void *arg, unsigned i), void *arg, bool *reuse)
{
	for (unsigned i = 0; i < n; i++)
		if (reusable(arg, (turn + i) % n)) {
			*reuse = true;
			return (turn + i) % n;
		}
	*reuse = false;
	for (unsigned i = 0; i < n; i++)
		if (ended(arg, (turn + i) % n))
			return (turn + i) % n;
	return (turn + 1) % n;
}

/*** The spawner's mount namespace ***/

#define TRIM_MOUNTS_MAX 4096	/* mountinfo lines read at most */

/* Whether path a is b or one of its folders' ancestors ("/" is everyone's). */
static bool
path_within(const char *a, const char *b)
{
	size_t n = strlen(a);

	if (strcmp(a, "/") == 0)
		return true;
	return strncmp(a, b, n) == 0 && (b[n] == '\0' || b[n] == '/');
}

/*
 * Decodes a mountinfo field in place: the kernel writes space, tab,
 * newline and backslash as \ooo. Returns false on a malformed escape.
 */
static bool
mountinfo_unescape(char *f)
{
	char *o = f;

	for (const char *p = f; *p != '\0'; p++) {
		if (*p != '\\') {
			*o++ = *p;
			continue;
		}
		if (p[1] < '0' || p[1] > '3' || p[2] < '0' || p[2] > '7' ||
		    p[3] < '0' || p[3] > '7')
			return false;
		*o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
		p += 3;
	}
	*o = '\0';
	return true;
}

/*
 * The mount points of the caller's namespace, in mountinfo's order (a
 * mount after the one it is on), or NULL. *n gets the count.
 */
static char **
mount_points(size_t *n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, **mp = NULL;
	size_t cap = 0, len = 0;

	*n = 0;
	if (f == NULL)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *fld = strtok_r(line, " ", &save);

		/* id parent major:minor root MOUNTPOINT ... */
		for (int i = 0; i < 4 && fld != NULL; i++)
			fld = strtok_r(NULL, " ", &save);
		if (fld == NULL || !mountinfo_unescape(fld) || fld[0] != '/' ||
		    len == TRIM_MOUNTS_MAX) {
			for (size_t i = 0; i < len; i++)
				free(mp[i]);
			free(mp);
			mp = NULL;
			len = 0;
			break;
		}
		mp = xreallocarray(mp, len + 1, sizeof(*mp));
		mp[len++] = xstrdup(fld);
	}
	free(line);
	fclose(f);
	*n = len;
	return mp;
}

void
ns_spawner_mounts_trim(const struct sandbox_conf *conf)
{
	char *need[2 + CG__NCTRL + 1];
	size_t nneed = 0, nmp = 0;
	char **mp = NULL;
	bool ok = true;

	/* What the spawner and its inits reach by path: realpaths, or nothing. */
	need[nneed++] = xstrdup("/proc");
	if ((need[nneed] = realpath(conf->run_dir, NULL)) == NULL)
		ok = false;
	else
		nneed++;
	if (conf->image_cache != NULL) {
		if ((need[nneed] = realpath(conf->image_cache, NULL)) == NULL)
			ok = false;
		else
			nneed++;
	}
	for (int c = 0; ok && c < CG__NCTRL; c++) {
		if (conf->cg.dir[c][0] == '\0')
			continue;
		if ((need[nneed] = realpath(conf->cg.dir[c], NULL)) == NULL)
			ok = false;
		else
			nneed++;
	}
	/*
	 * run_dir shared with the worker's copy of it (the two namespaces'
	 * mounts of it peers), so the image layers we mount there (layers.c)
	 * still show in the worker's, which reads them; inits' copies turn
	 * private first thing (mount.c).
	 */
	if (!ok || mount(NULL, need[1], NULL, MS_SHARED, NULL) < 0 ||
	    unshare(CLONE_NEWNS) < 0)
		goto out;
	if ((mp = mount_points(&nmp)) == NULL)
		goto out;
	/* Last first: a mount's own mounts before it. */
	for (size_t i = nmp; i-- > 0; ) {
		bool keep = false;

		for (size_t k = 0; k < nneed && !keep; k++)
			keep = path_within(mp[i], need[k]) || path_within(need[k], mp[i]);
		/* Best effort: a mount left in place is only one more to copy. */
		if (!keep)
			(void)umount2(mp[i], MNT_DETACH);
	}
out:
	for (size_t i = 0; i < nmp; i++)
		free(mp[i]);
	free(mp);
	for (size_t k = 0; k < nneed; k++)
		free(need[k]);
}
