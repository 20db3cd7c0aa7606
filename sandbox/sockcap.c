/*
 * sockcap.c - the count of sockets a job holds, for its socket cap.
 *
 * Why. TCP lets every socket queue one segment past any memory limit (the
 * kernel forces the charge so that a connection always makes progress):
 * about 40 KiB a socket on the loopback. The cgroup's socket counter bounds
 * everything else (cg_worker_job_limit); only the number of sockets bounds
 * this. No kernel limit counts a process tree's sockets, but each job is
 * alone in its network namespace, which holds no socket when the job
 * starts (spawn.c, sockcap_idle()), so its /proc/net/sockstat counts them:
 * "sockets: used" every socket a process holds (unix included), "TCP:
 * inuse" and "TCP6: inuse" every TCP socket in the namespace's tables,
 * including those no process holds (not yet accepted, or closed with data
 * still to send). The count is their sum: a connected socket counts twice,
 * which errs on the side of the host.
 *
 * The job filter sends each inet socket() to the worker (seccomp.c); the
 * worker reads the count and lets the call go on (the call's arguments are
 * registers only, so letting it continue races with nothing) or fails it
 * with EMFILE at the cap (sandbox.c, notify_answer()).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SOCKSTAT_MAX 4096	/* both files are a few hundred bytes */

/* The number after "label" at the start of a line of text, or -1. */
static int64_t
field(const char *text, const char *label)
{
	size_t n = strlen(label);

	for (const char *p = text; p != NULL && *p != '\0';
	    p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		char *end;
		long long v;

		if (strncmp(p, label, n) != 0)
			continue;
		errno = 0;
		v = strtoll(p + n, &end, 10);
		if (errno != 0 || end == p + n || v < 0)
			return -1;
		return v;
	}
	return -1;
}

int64_t
sockcap_parse(const char *stat, const char *stat6)
{
	int64_t used = field(stat, "sockets: used "), tcp = field(stat, "TCP: inuse ");
	int64_t tcp6 = stat6 != NULL ? field(stat6, "TCP6: inuse ") : 0;

	if (used < 0 || tcp < 0 || tcp6 < 0)
		return -EINVAL;
	return used + tcp + tcp6;
}

/*
 * Whether one sockstat file shows a network namespace with nothing in it:
 * every "used", "inuse" and "tw" count, and the fragments' "memory", zero.
 * The others ("orphan", "alloc", "mem") count the whole host.
 */
static bool
stat_idle(const char *text)
{
	static const char *const keys[] = { " used ", " inuse ", " tw ", " memory " };
	bool seen = false;

	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		for (const char *p = strstr(text, keys[k]); p != NULL;
		    p = strstr(p + 1, keys[k])) {
			const char *v = p + strlen(keys[k]);

			if (*v < '0' || *v > '9' || strtoull(v, NULL, 10) != 0)
				return false;
			seen = true;
		}
	return seen;
}

bool
sockcap_idle(const char *stat, const char *stat6)
{
	return stat_idle(stat) && (stat6 == NULL || stat_idle(stat6)) &&
	    strstr(stat, "sockets: used ") != NULL && strstr(stat, "TCP: inuse ") != NULL;
}

int
sockcap_open(struct sockcap *c, pid_t init_pid, struct err *e)
{
	char dir[32];

	snprintf(dir, sizeof(dir), "/proc/%d/net", (int)init_pid);
	return sockcap_open_dir(c, dir, e);
}

int
sockcap_open_dir(struct sockcap *c, const char *dir, struct err *e)
{
	static const char *const names[2] = { "sockstat", "sockstat6" };
	char path[64];

	c->fd[0] = c->fd[1] = -1;
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		c->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		/* Without IPv6 there is no sockstat6, and no TCP6 to count. */
		if (c->fd[i] < 0 && !(i == 1 && errno == ENOENT)) {
			int rc = -errno;

			sockcap_close(c);
			return err_set(e, rc, "open %s: %s", path, strerror(-rc));
		}
	}
	return 0;
}

/* Reads both files afresh into text; -errno if the first cannot be read. */
static int
sockcap_read(const struct sockcap *c, char text[2][SOCKSTAT_MAX])
{
	for (int i = 0; i < 2; i++) {
		ssize_t n;

		text[i][0] = '\0';
		if (c->fd[i] < 0) {
			if (i == 0)
				return -EBADF;
			continue;
		}
		/* A seq_file read at offset 0 renders the counters afresh. */
		n = pread(c->fd[i], text[i], sizeof(text[i]) - 1, 0);
		if (n < 0)
			return -errno;
		text[i][n] = '\0';
	}
	return 0;
}

int64_t
sockcap_count(const struct sockcap *c)
{
	char text[2][SOCKSTAT_MAX];
	int rc;

	if ((rc = sockcap_read(c, text)) < 0)
		return rc;
	return sockcap_parse(text[0], c->fd[1] >= 0 ? text[1] : NULL);
}

int
sockcap_is_idle(const struct sockcap *c)
{
	char text[2][SOCKSTAT_MAX];
	int rc;

	if ((rc = sockcap_read(c, text)) < 0)
		return rc;
	return sockcap_idle(text[0], c->fd[1] >= 0 ? text[1] : NULL) ? 1 : 0;
}

void
sockcap_close(struct sockcap *c)
{
	for (int i = 0; i < 2; i++) {
		if (c->fd[i] >= 0)
			close(c->fd[i]);
		c->fd[i] = -1;
	}
}
