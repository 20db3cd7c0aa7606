/*
 * cgroup.c - per-job control groups, v1 (memory, pids, cpuacct hierarchies)
 * or v2 (the unified hierarchy). See cgroup.h for the layout.
 *
 * Only three controllers matter to a job: memory (memory_bytes, OOM kills,
 * peak), pids (the pids limit and the forks it refused) and CPU accounting
 * (every process's CPU time, reaped or not, which rlimits cannot give).
 * Everything here is plain file I/O on cgroupfs; nothing parses more than a
 * "key value" line.
 *
 * Several processes run this file, and each function says which in its
 * name: cg_host_* run in sandqd, cg_worker_* in the worker, and
 * cg_init_join_self() in the sandbox's init; cg_detect(), cg_has() and
 * cg_ctrl_name() (and the static helpers) in any of them, the CLI's doctor
 * included.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "cgroup.h"

#define DESTROY_TRIES 200	/* x 10 ms: an exiting tree gets 2 s to leave */

static const char *const ctrl_names[CG__NCTRL] = {
	[CG_MEMORY] = "memory", [CG_PIDS] = "pids", [CG_CPU] = "cpu",
	[CG_CPUACCT] = "cpuacct",
};

/* The controllers a job's cgroup is made in (cpu is reported, not used). */
static const enum cg_ctrl job_ctrls[] = { CG_MEMORY, CG_PIDS, CG_CPUACCT };
#define NJOB_CTRLS (sizeof(job_ctrls) / sizeof(job_ctrls[0]))

const char *
cg_ctrl_name(enum cg_ctrl c)
{
	return c < CG__NCTRL ? ctrl_names[c] : "?";
}

bool
cg_has(const struct cg_sys *s, enum cg_ctrl c)
{
	return s->version != CG_NONE && s->dir[c][0] != '\0';
}

/*** Small file helpers ***/

/* snprintf into a path buffer; false if it did not fit. */
static bool __attribute__((format(printf, 3, 4)))
pathf(char *out, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, len, fmt, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < len;
}

/*
 * The worker's two v1 slots (s0, s1 in each controller) are written and
 * read about twenty times per job: their files stay open, one descriptor
 * per file and access mode, so each access is one pread or pwrite instead
 * of a walk of a nine-component path, an open and a close (about 7% of
 * the whole stack's CPU on a /bin/true job). A slot is never removed
 * while its worker lives, and cgroupfs files restart at offset 0.
 */
#define SLOT_DIRS_MAX (2 * NJOB_CTRLS)
#define SLOT_FDS_MAX 64
static char slot_dirs[SLOT_DIRS_MAX][CG_PATH_MAX];
static size_t nslot_dirs;
static struct {
	char path[CG_PATH_MAX + 64];	/* dir/file */
	int mode;			/* O_RDONLY or O_WRONLY */
	int fd;
} slot_fds[SLOT_FDS_MAX];
static size_t nslot_fds;

/* Whether dir is a slot's folder (slot_keep()). */
static bool
slot_is(const char *dir)
{
	for (size_t i = 0; i < nslot_dirs; i++)
		if (strcmp(slot_dirs[i], dir) == 0)
			return true;
	return false;
}

/* Marks dir, a slot's folder that exists, for its files to stay open. */
static void
slot_keep(const char *dir)
{
	if (!slot_is(dir) && nslot_dirs < SLOT_DIRS_MAX)
		snprintf(slot_dirs[nslot_dirs++], CG_PATH_MAX, "%s", dir);
}

/* Closes the kept files of slot dir and forgets it, before it is removed. */
static void
slot_forget(const char *dir)
{
	size_t n = strlen(dir), k = 0;

	for (size_t i = 0; i < nslot_fds; i++) {
		if (strncmp(slot_fds[i].path, dir, n) == 0 && slot_fds[i].path[n] == '/')
			close(slot_fds[i].fd);
		else
			slot_fds[k++] = slot_fds[i];
	}
	nslot_fds = k;
	for (size_t i = 0; i < nslot_dirs; i++)
		if (strcmp(slot_dirs[i], dir) == 0) {
			memmove(slot_dirs[i], slot_dirs[nslot_dirs - 1], CG_PATH_MAX);
			nslot_dirs--;
			break;
		}
}

/*
 * Opens dir/file with mode; *kept says the descriptor is a slot's, kept
 * open (not to be closed). Returns it or -errno.
 */
static int
file_open(const char *dir, const char *file, int mode, bool *kept)
{
	char path[CG_PATH_MAX + 64];
	bool slot = slot_is(dir);
	int fd;

	*kept = false;
	if (!pathf(path, sizeof(path), "%s/%s", dir, file))
		return -ENAMETOOLONG;
	for (size_t i = 0; slot && i < nslot_fds; i++)
		if (slot_fds[i].mode == mode && strcmp(slot_fds[i].path, path) == 0) {
			*kept = true;
			return slot_fds[i].fd;
		}
	if ((fd = open(path, mode | O_CLOEXEC)) < 0)
		return -errno;
	if (slot && nslot_fds < SLOT_FDS_MAX) {
		memcpy(slot_fds[nslot_fds].path, path, sizeof(path));
		slot_fds[nslot_fds].mode = mode;
		slot_fds[nslot_fds++].fd = fd;
		*kept = true;
	}
	return fd;
}

static int
write_file(const char *dir, const char *file, const char *val)
{
	bool kept;
	int fd, rc = 0;

	if ((fd = file_open(dir, file, O_WRONLY, &kept)) < 0)
		return fd;
	if (pwrite(fd, val, strlen(val), 0) < 0)
		rc = -errno;
	if (!kept)
		close(fd);
	return rc;
}

/* Reads up to len-1 bytes of dir/file, NUL-terminated. */
static int
read_file(const char *dir, const char *file, char *buf, size_t len)
{
	ssize_t n;
	bool kept;
	int fd;

	if ((fd = file_open(dir, file, O_RDONLY, &kept)) < 0)
		return fd;
	n = pread(fd, buf, len - 1, 0);
	if (n < 0)
		n = -errno;
	if (!kept)
		close(fd);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	return 0;
}

static bool
read_u64(const char *dir, const char *file, uint64_t *v)
{
	char buf[64];

	if (read_file(dir, file, buf, sizeof(buf)) < 0)
		return false;
	return sscanf(buf, "%" SCNu64, v) == 1;
}

/* The value of "key N" in a flat keyed file (memory.events, pids.events...). */
static bool
read_key(const char *dir, const char *file, const char *key, uint64_t *v)
{
	char buf[2048];
	size_t klen = strlen(key);

	if (read_file(dir, file, buf, sizeof(buf)) < 0)
		return false;
	for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
			return sscanf(line + klen + 1, "%" SCNu64, v) == 1;
	}
	return false;
}

static bool
same_dir_as_earlier(const struct cg_sys *s, size_t i)
{
	for (size_t k = 0; k < i; k++)
		if (strcmp(s->dir[job_ctrls[k]], s->dir[job_ctrls[i]]) == 0)
			return true;
	return false;
}

/*** Detection ***/

/* Whether the comma-separated list has the word w. */
static bool
list_has(const char *list, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, w, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n'))
			return true;
	return false;
}

/* Our cgroup path in the hierarchy that has controller c (v1), or "0::" (v2). */
static bool
own_path(const char *ctrl, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[1024];
	bool found = false;

	if (f == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (c2 == NULL)
			continue;
		*c2 = '\0';
		line[strcspn(line, "\n")] = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		if (ctrl == NULL ? (strcmp(line, "0") == 0 && c1[1] == '\0')
		    : list_has(c1 + 1, ctrl)) {
			snprintf(out, len, "%s", c2 + 1);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* mountpoint + (own path below the mount's root) into out. */
static bool
join_own(const char *mnt, const char *root, const char *own, char *out, size_t len)
{
	size_t rl = strlen(root);
	const char *rest = own;

	if (strcmp(root, "/") != 0) {
		if (strncmp(own, root, rl) != 0 || (own[rl] != '/' && own[rl] != '\0'))
			return false;	/* our cgroup is outside what is mounted */
		rest = own + rl;
	}
	if (strcmp(rest, "/") == 0)
		rest = "";
	return (size_t)snprintf(out, len, "%s%s", mnt, rest) < len;
}

/* The kernel was booted with cgroup.memory=nosocket: no socket is charged. */
static bool
sockets_unaccounted(void)
{
	char cmd[4096];
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (n <= 0)
		return false;
	cmd[n] = '\0';
	/* Each cgroup.memory= word is a comma list: "nokmem,nosocket". */
	for (const char *p = cmd; (p = strstr(p, "cgroup.memory=")) != NULL; p++) {
		char word[256];
		const char *v = p + strlen("cgroup.memory=");

		snprintf(word, sizeof(word), "%.*s", (int)strcspn(v, " \n"), v);
		if (list_has(word, "nosocket"))
			return true;
	}
	return false;
}

void
cg_detect(struct cg_sys *s)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], v2mnt[CG_PATH_MAX] = "", v2root[CG_PATH_MAX] = "/";

	memset(s, 0, sizeof(*s));
	if (f == NULL) {
		snprintf(s->why, sizeof(s->why), "cannot read /proc/self/mountinfo");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char root[CG_PATH_MAX], mnt[CG_PATH_MAX], fstype[64], opts[1024];
		char own[CG_PATH_MAX];
		const char *dash = strstr(line, " - ");

		if (dash == NULL ||
		    sscanf(line, "%*s %*s %*s %511s %511s", root, mnt) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fstype, opts) != 2)
			continue;
		if (strcmp(fstype, "cgroup2") == 0 && v2mnt[0] == '\0') {
			snprintf(v2mnt, sizeof(v2mnt), "%s", mnt);
			snprintf(v2root, sizeof(v2root), "%s", root);
			continue;
		}
		if (strcmp(fstype, "cgroup") != 0)
			continue;
		for (int c = 0; c < CG__NCTRL; c++) {
			if (s->dir[c][0] != '\0' || !list_has(opts, ctrl_names[c]))
				continue;
			if (own_path(ctrl_names[c], own, sizeof(own)))
				join_own(mnt, root, own, s->dir[c], sizeof(s->dir[c]));
		}
	}
	fclose(f);

	if (s->dir[CG_MEMORY][0] && s->dir[CG_PIDS][0]) {
		char tcp[CG_PATH_MAX + 40];

		s->version = CG_V1;
		/*
		 * v1 charges socket buffers to no counter unless a cgroup's
		 * tcp limit is set; a kernel built without it has no file.
		 */
		s->sock_bounded = !sockets_unaccounted() &&
		    pathf(tcp, sizeof(tcp), "%s/memory.kmem.tcp.limit_in_bytes",
		    s->dir[CG_MEMORY]) && access(tcp, F_OK) == 0;
		return;
	}
	memset(s->dir, 0, sizeof(s->dir));
	if (v2mnt[0] != '\0') {
		char own[CG_PATH_MAX], dir[CG_PATH_MAX], ctl[512];

		if (!own_path(NULL, own, sizeof(own)) ||
		    !join_own(v2mnt, v2root, own, dir, sizeof(dir)) ||
		    read_file(dir, "cgroup.controllers", ctl, sizeof(ctl)) < 0) {
			snprintf(s->why, sizeof(s->why),
			    "cgroup v2 at %s, but our own cgroup cannot be read", v2mnt);
			return;
		}
		for (int c = 0; c < CG__NCTRL; c++) {
			/* v2 accounts CPU time in cpu.stat whether or not "cpu" is on. */
			if (c == CG_CPUACCT || list_has(ctl, ctrl_names[c]))
				snprintf(s->dir[c], sizeof(s->dir[c]), "%s", dir);
		}
		if (s->dir[CG_MEMORY][0] && s->dir[CG_PIDS][0]) {
			s->version = CG_V2;
			/* v2 charges socket buffers to memory.max. */
			s->sock_bounded = !sockets_unaccounted();
			return;
		}
		snprintf(s->why, sizeof(s->why),
		    "cgroup v2 at %s does not give memory and pids to us (it gives: %.80s)",
		    v2mnt, ctl[0] ? ctl : "nothing");
		memset(s->dir, 0, sizeof(s->dir));
		return;
	}
	snprintf(s->why, sizeof(s->why), "no cgroup hierarchy with memory and pids is mounted");
}

/*** Removal ***/

/*
 * Kills what is in dir (a leaf) and removes it, or with keep only waits
 * for it to hold no task; true once it is gone (empty).
 */
static bool
clear_leaf(const char *dir, bool keep)
{
	long wait_us = 50;

	/*
	 * A process that has just exited may still count for a moment: retry
	 * soon, then less often (50 us doubling to 10 ms, about 2 s in all).
	 */
	for (int i = 0; i < DESTROY_TRIES; i++) {
		char buf[4096];
		struct timespec ts = { 0, wait_us * 1000 };

		if (keep) {
			if (read_file(dir, "tasks", buf, sizeof(buf)) < 0)
				return false;
			if (buf[0] == '\0')
				return true;
		} else if (rmdir(dir) == 0 || errno == ENOENT) {
			return true;
		} else if (errno != EBUSY) {
			return false;
		}
		if (read_file(dir, "cgroup.procs", buf, sizeof(buf)) == 0) {
			for (char *p = buf; *p; ) {
				long pid = strtol(p, &p, 10);

				if (pid > 0)
					kill((pid_t)pid, SIGKILL);
				while (*p == '\n')
					p++;
			}
		}
		nanosleep(&ts, NULL);
		if (wait_us < 10000)
			wait_us *= 2;
	}
	return false;
}

/* Kills what is in dir (a leaf) and removes it; true once it is gone. */
static bool
remove_leaf(const char *dir)
{
	return clear_leaf(dir, false);
}

/* Removes dir and every cgroup below it, deepest first. */
static void
remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char sub[CG_PATH_MAX];

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (!pathf(sub, sizeof(sub), "%s/%s", dir, de->d_name))
			continue;
		remove_tree(sub);
	}
	closedir(d);
	remove_leaf(dir);
}

/*** sandqd ***/

static void
remove_stale(const char *own, pid_t self)
{
	DIR *d = opendir(own);
	struct dirent *de;

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char sub[CG_PATH_MAX];
		int64_t pid;

		if (strncmp(de->d_name, "sandq.", 6) != 0 ||
		    parse_i64(de->d_name + 6, 1, INT32_MAX, &pid) < 0 || pid == self)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;	/* that sandqd still runs */
		if (pathf(sub, sizeof(sub), "%s/%s", own, de->d_name))
			remove_tree(sub);
	}
	closedir(d);
}

int
cg_host_setup(struct cg_sys *s, pid_t sandqd, struct err *e)
{
	char top[CG_PATH_MAX], sub[CG_PATH_MAX + 16], pidbuf[32];
	int rc;

	if (s->version == CG_NONE)
		return 0;
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		const char *own = s->dir[job_ctrls[i]];

		if (own[0] == '\0' || same_dir_as_earlier(s, i))
			continue;
		remove_stale(own, sandqd);
		if (!pathf(top, sizeof(top), "%s/sandq.%d", own, (int)sandqd)) {
			rc = err_set(e, -ENAMETOOLONG, "cgroup path too long: %s", own);
			goto fail;
		}
		if (mkdir(top, 0755) < 0 && errno != EEXIST) {
			rc = err_set(e, -errno, "mkdir %s: %s", top, strerror(errno));
			goto fail;
		}
	}
	if (s->version == CG_V2) {
		const char *own = s->dir[CG_MEMORY];

		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)sandqd);
		if (!pathf(top, sizeof(top), "%s/sandq.%d", own, (int)sandqd) ||
		    !pathf(sub, sizeof(sub), "%s/sandqd", top)) {
			rc = err_set(e, -ENAMETOOLONG, "cgroup path too long: %s", own);
			goto fail;
		}
		if ((mkdir(sub, 0755) < 0 && errno != EEXIST) ||
		    (rc = write_file(sub, "cgroup.procs", pidbuf)) < 0) {
			rc = err_set(e, -errno, "move sandqd into %s: %s", sub, strerror(errno));
			goto fail;
		}
		if ((rc = write_file(own, "cgroup.subtree_control", "+memory +pids")) < 0 ||
		    (rc = write_file(top, "cgroup.subtree_control", "+memory +pids")) < 0) {
			rc = err_set(e, rc, "cannot hand memory and pids down from %s: %s "
			    "(another process shares sandqd's cgroup?)", own, strerror(-rc));
			goto fail;
		}
	}
	return 0;
fail:
	snprintf(s->why, sizeof(s->why), "%.180s", e->msg);
	s->version = CG_NONE;
	memset(s->dir, 0, sizeof(s->dir));
	return rc;
}

void
cg_host_cleanup(const struct cg_sys *s, pid_t sandqd)
{
	char top[CG_PATH_MAX];

	if (s->version == CG_NONE)
		return;
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		if (s->dir[job_ctrls[i]][0] == '\0' || same_dir_as_earlier(s, i))
			continue;
		if (!pathf(top, sizeof(top), "%s/sandq.%d", s->dir[job_ctrls[i]], (int)sandqd))
			continue;
		/* v2: sandq.<pid>/sandqd holds us until we exit; the next start removes it. */
		remove_tree(top);
	}
}

/*** Worker ***/

int
cg_worker_setup(struct cg_sys *s, pid_t sandqd, int index, struct err *e)
{
	char top[CG_PATH_MAX], suffix[64];

	if (s->version == CG_NONE)
		return 0;
	snprintf(suffix, sizeof(suffix), "/sandq.%d/sandqd", (int)sandqd);
	s->dir[CG_CPU][0] = '\0';	/* reported by doctor, not used by jobs */
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		char *dir = s->dir[job_ctrls[i]];
		size_t dl = strlen(dir), sl = strlen(suffix);

		if (dir[0] == '\0')
			continue;
		/* v2: we sit in sandq.<pid>/sandqd; the tree is its parent. */
		if (dl > sl && strcmp(dir + dl - sl, suffix) == 0)
			dir[dl - sl] = '\0';
		if (!pathf(top, sizeof(top), "%s/sandq.%d", dir, (int)sandqd))
			return err_set(e, -ENAMETOOLONG, "cgroup path too long: %s", dir);
		if (access(top, F_OK) < 0) {
			snprintf(s->why, sizeof(s->why), "sandqd made no cgroup at %.150s", top);
			s->version = CG_NONE;
			memset(s->dir, 0, sizeof(s->dir));
			return 0;
		}
		if (!pathf(dir, CG_PATH_MAX, "%s/w%d", top, index))
			return err_set(e, -ENAMETOOLONG, "cgroup path too long: %s", top);
	}
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		const char *dir = s->dir[job_ctrls[i]];
		int rc;

		if (dir[0] == '\0' || same_dir_as_earlier(s, i))
			continue;
		remove_tree(dir);	/* a worker before us may have died mid-job */
		if (mkdir(dir, 0755) < 0)
			return err_set(e, -errno, "mkdir %s: %s", dir, strerror(errno));
		if (s->version == CG_V2 &&
		    (rc = write_file(dir, "cgroup.subtree_control", "+memory +pids")) < 0)
			return err_set(e, rc, "%s: cannot enable memory and pids: %s", dir,
			    strerror(-rc));
	}
	return 0;
}

/*** Per sandbox ***/

/*
 * Counters of a v1 slot set back to zero as it is taken (a write of 0
 * resets each), so a job's peak, failures and CPU are its own.
 */
static const char *const slot_resets[][2] = {
	{ "memory", "memory.max_usage_in_bytes" }, { "memory", "memory.failcnt" },
	{ "memory", "memory.memsw.max_usage_in_bytes" }, { "memory", "memory.memsw.failcnt" },
	{ "memory", "memory.kmem.tcp.max_usage_in_bytes" },
	{ "memory", "memory.kmem.tcp.failcnt" }, { "cpuacct", "cpuacct.usage" },
};

/*
 * Memory an emptied slot may still hold charged before it is made anew: a
 * job can leave pages no reclaim takes (tmpfs with no swap: the worker's
 * kept base that a persistent run's init brought up to its commit), and
 * v1 refuses a limit under the usage (EBUSY), so a later job with a
 * smaller limit could not start in it. Page cache under this is reclaimed
 * by the limit's write itself.
 */
#define SLOT_REMAKE_BYTES CG_SLOT_RESIDUE_MAX	/* what slot_empty_memory() lets stay */

/*
 * Makes the empty memory slot dir anew (rmdir hands its charges to the
 * parent, as a per-job cgroup's removal does) when it still holds more
 * than SLOT_REMAKE_BYTES. False if it cannot: the caller makes j<seq>.
 */
static bool
slot_memory_fresh(const char *dir)
{
	uint64_t used = 0;

	if (!read_u64(dir, "memory.usage_in_bytes", &used) || used <= SLOT_REMAKE_BYTES)
		return true;
	/* The files kept open are the removed cgroup's. */
	slot_forget(dir);
	return rmdir(dir) == 0 && mkdir(dir, 0755) == 0;
}

/*
 * Takes v1 slot seq & 1 for out, if no task is in it (made if absent):
 * resets its counters and reads the bases of those that cannot be. False
 * if it is busy or cannot be made or reset: the caller makes j<seq>.
 */
static bool
slot_take(const struct cg_sys *s, uint64_t seq, struct cg_job *out)
{
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		enum cg_ctrl c = job_ctrls[i];
		char tasks[64];

		if (s->dir[c][0] == '\0')
			continue;
		if (!pathf(out->dir[c], sizeof(out->dir[c]), "%s/s%u", s->dir[c],
		    (unsigned)(seq & 1)))
			return false;
		if (same_dir_as_earlier(s, i))
			continue;
		/* A slot this worker took before exists: only its tasks matter. */
		if (slot_is(out->dir[c])) {
			if (read_file(out->dir[c], "tasks", tasks, sizeof(tasks)) < 0 ||
			    tasks[0] != '\0')
				return false;
		} else if (mkdir(out->dir[c], 0755) < 0 && (errno != EEXIST ||
		    read_file(out->dir[c], "tasks", tasks, sizeof(tasks)) < 0 ||
		    tasks[0] != '\0')) {
			return false;
		}
		if (c == CG_MEMORY && !slot_memory_fresh(out->dir[c]))
			return false;
		slot_keep(out->dir[c]);
	}
	for (size_t k = 0; k < sizeof(slot_resets) / sizeof(slot_resets[0]); k++) {
		enum cg_ctrl c = strcmp(slot_resets[k][0], "memory") == 0 ? CG_MEMORY :
		    CG_CPUACCT;
		int rc;

		/* Files this kernel lacks (memsw without swap accounting) are fine. */
		if (out->dir[c][0] != '\0' &&
		    (rc = write_file(out->dir[c], slot_resets[k][1], "0")) < 0 && rc != -ENOENT)
			return false;
	}
	(void)read_key(out->dir[CG_MEMORY], "memory.oom_control", "oom_kill", &out->oom_base);
	(void)read_key(out->dir[CG_PIDS], "pids.events", "max", &out->pids_base);
	out->slot = true;
	return true;
}

/*
 * What a job left charged to its v1 slot's memory cgroup (page cache it
 * read first, kernel objects: dentries, inodes) is reclaimed before a
 * later job takes the slot when it is more than CG_SLOT_RESIDUE_MAX bytes.
 * Below that it stays: force_empty reclaims until the count is 0 and
 * tries 16 times more when it cannot get there, and the few hundred KiB
 * of kernel objects freed only later (RCU, per-CPU caches) that every
 * sandbox leaves never let it: about 1.5 ms of CPU per job, most of a
 * /bin/true job's, to free nothing. What stays counts in the next job's
 * charge, not in its counters (reset as the slot is taken); the kernel
 * reclaims what of it is reclaimable before it would refuse that job
 * memory, and what is not reclaimable was not freed by force_empty
 * either; more than that left after the reclaim makes slot_take() make
 * the slot anew. A job cannot read it (no cgroupfs in a sandbox).
 */
static void
slot_empty_memory(const char *dir)
{
	uint64_t usage;

	if (read_u64(dir, "memory.usage_in_bytes", &usage) && usage <= CG_SLOT_RESIDUE_MAX)
		return;
	(void)write_file(dir, "memory.force_empty", "1");
}

int
cg_worker_job_create(const struct cg_sys *s, uint64_t seq, pid_t pid,
    struct cg_job *out, struct err *e)
{
	char pidbuf[32];
	int rc;

	memset(out, 0, sizeof(*out));
	out->sys = s;
	if (s->version == CG_NONE)
		return 0;
	if (s->version == CG_V1 && slot_take(s, seq, out))
		return 0;
	memset(out, 0, sizeof(*out));
	out->sys = s;
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		enum cg_ctrl c = job_ctrls[i];

		if (s->dir[c][0] == '\0')
			continue;
		if (!pathf(out->dir[c], sizeof(out->dir[c]), "%s/j%" PRIu64, s->dir[c], seq)) {
			rc = err_set(e, -ENAMETOOLONG, "cgroup path too long: %s", s->dir[c]);
			goto fail;
		}
		if (same_dir_as_earlier(s, i))
			continue;
		if (mkdir(out->dir[c], 0755) < 0 && errno != EEXIST) {
			rc = err_set(e, -errno, "mkdir %s: %s", out->dir[c], strerror(errno));
			goto fail;
		}
		if (s->version == CG_V1)
			continue;	/* the init joins itself */
		if ((rc = write_file(out->dir[c], "cgroup.procs", pidbuf)) < 0) {
			err_set(e, rc, "%s: cannot move the sandbox in: %s", out->dir[c],
			    strerror(-rc));
			goto fail;
		}
	}
	return 0;
fail:
	cg_worker_job_destroy(out);
	return rc;
}

bool
cg_worker_job_self_join(const struct cg_job *j)
{
	return j->sys != NULL && j->sys->version == CG_V1;
}

size_t
cg_worker_job_dirs(const struct cg_job *j, char *buf, size_t len)
{
	size_t off = 0;

	if (!cg_worker_job_self_join(j))
		return 0;
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		const char *d = j->dir[job_ctrls[i]];
		size_t n = strlen(d) + 1;

		if (d[0] == '\0' || same_dir_as_earlier(j->sys, i) || off + n > len)
			continue;
		memcpy(buf + off, d, n);
		off += n;
	}
	return off;
}

int
cg_init_join_self(const char *dirs, size_t len, struct err *e)
{
	for (size_t off = 0; off < len; ) {
		const char *d = dirs + off;
		size_t n = strnlen(d, len - off);
		int rc;

		if (n == len - off)
			return err_set(e, -EINVAL, "cgroup list is not NUL-terminated");
		/* "0" in tasks: this thread (our only one), without the global lock. */
		if ((rc = write_file(d, "tasks", "0")) < 0)
			return err_set(e, rc, "join cgroup %s: %s", d, strerror(-rc));
		off += n + 1;
	}
	return 0;
}

int
cg_worker_job_limit(const struct cg_job *j, uint64_t memory_bytes,
    uint64_t sock_bytes, uint64_t pids, struct err *e)
{
	const struct cg_sys *s = j->sys;
	char buf[32];
	int rc;

	if (s == NULL || s->version == CG_NONE)
		return 0;
	snprintf(buf, sizeof(buf), "%" PRIu64, memory_bytes);
	if (s->version == CG_V1) {
		/*
		 * No swap: memory+swap gets the same limit (the file is absent
		 * without swap accounting). v1 keeps memory <= memory+swap at
		 * every step, so a raise goes memory+swap first.
		 */
		rc = write_file(j->dir[CG_MEMORY], "memory.limit_in_bytes", buf);
		if (rc == -EINVAL) {
			(void)write_file(j->dir[CG_MEMORY], "memory.memsw.limit_in_bytes", buf);
			rc = write_file(j->dir[CG_MEMORY], "memory.limit_in_bytes", buf);
		}
		if (rc == 0)
			(void)write_file(j->dir[CG_MEMORY], "memory.memsw.limit_in_bytes", buf);
		/*
		 * Socket buffers: v1 charges them to memory.kmem.tcp (TCP and
		 * UDP alike, once this is set), never to memory.limit_in_bytes.
		 * Unset, a job's loopback sockets hold any amount of the host's
		 * shared TCP and UDP pools (docs/security.md, "Kernel memory").
		 */
		if (rc == 0 && s->sock_bounded) {
			snprintf(buf, sizeof(buf), "%" PRIu64, sock_bytes);
			if ((rc = write_file(j->dir[CG_MEMORY], "memory.kmem.tcp.limit_in_bytes",
			    buf)) < 0)
				return err_set(e, rc, "socket buffer limit: %s", strerror(-rc));
		}
	} else {
		rc = write_file(j->dir[CG_MEMORY], "memory.max", buf);
		if (rc == 0)
			(void)write_file(j->dir[CG_MEMORY], "memory.swap.max", "0");
	}
	if (rc < 0)
		return err_set(e, rc, "memory limit: %s", strerror(-rc));
	/* The sandbox's init is one of the processes the pids controller counts. */
	snprintf(buf, sizeof(buf), "%" PRIu64, pids + 1);
	if ((rc = write_file(j->dir[CG_PIDS], "pids.max", buf)) < 0)
		return err_set(e, rc, "pids limit: %s", strerror(-rc));
	return 0;
}

void
cg_worker_job_usage(const struct cg_job *j, struct cg_usage *u)
{
	const struct cg_sys *s = j->sys;

	memset(u, 0, sizeof(*u));
	if (s == NULL || s->version == CG_NONE)
		return;
	if (s->version == CG_V1) {
		u->has_cpu = j->dir[CG_CPUACCT][0] &&
		    read_u64(j->dir[CG_CPUACCT], "cpuacct.usage", &u->cpu_ns);
		u->has_mem_peak = read_u64(j->dir[CG_MEMORY], "memory.max_usage_in_bytes",
		    &u->mem_peak);
		(void)read_key(j->dir[CG_MEMORY], "memory.oom_control", "oom_kill",
		    &u->oom_kills);
		u->oom_kills -= u->oom_kills >= j->oom_base ? j->oom_base : u->oom_kills;
	} else {
		uint64_t us;

		if ((u->has_cpu = read_key(j->dir[CG_CPUACCT], "cpu.stat", "usage_usec", &us)))
			u->cpu_ns = us * 1000;
		u->has_mem_peak = read_u64(j->dir[CG_MEMORY], "memory.peak", &u->mem_peak);
		(void)read_key(j->dir[CG_MEMORY], "memory.events", "oom_kill", &u->oom_kills);
	}
	(void)read_key(j->dir[CG_PIDS], "pids.events", "max", &u->pids_refused);
	u->pids_refused -= u->pids_refused >= j->pids_base ? j->pids_base : u->pids_refused;
}

void
cg_worker_job_destroy(struct cg_job *j)
{
	const struct cg_sys *s = j->sys;

	if (s == NULL || s->version == CG_NONE)
		return;
	for (size_t i = 0; i < NJOB_CTRLS; i++) {
		enum cg_ctrl c = job_ctrls[i];

		if (j->dir[c][0] == '\0')
			continue;
		if (same_dir_as_earlier(s, i))
			continue;
		if (!clear_leaf(j->dir[c], j->slot))
			log_warn("cannot %s cgroup %s", j->slot ? "empty" : "remove", j->dir[c]);
		else if (j->slot && c == CG_MEMORY)
			slot_empty_memory(j->dir[c]);
	}
	memset(j->dir, 0, sizeof(j->dir));
	j->slot = false;
}
