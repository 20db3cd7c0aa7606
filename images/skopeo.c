/*
 * skopeo.c - one skopeo run: fork and exec from an argv, a clean
 * environment, a time limit, and its output read back (see skopeo.h).
 *
 * Why the environment is built rather than inherited: skopeo reads
 * proxies, registries and credentials from variables and from $HOME's
 * configuration. sandqd's own environment must not decide where an image
 * comes from; only the argv does (the registries and sources the config
 * allows were checked before this is called). HOME and TMPDIR point at
 * the cache's own tmp/ folder, so oci-archive: sources are extracted on
 * the cache's file system and nothing of root's home is read. The CLI's
 * push is the other way round: the user's registry credentials and
 * proxies are exactly what it needs, so it passes its own environment.
 *
 * skopeo gets a process group of its own, so that the time limit kills
 * all of it, and PR_SET_PDEATHSIG, so that it dies with its caller: the
 * caller's locks on the cache go when it dies, and an orphan skopeo
 * writing into the shared image layout next to the next pull's would
 * lose one of their index.json updates.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "oci.h"
#include "skopeo.h"

#define ERRBUF_MAX 16384	/* the tail of stderr kept */
#define LINE_MAX_ 4096		/* a stdout line; longer ones are cut */

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The child's side: async-signal-safe calls only until the exec (the
 * caller is threaded: another thread may hold a lock the child would
 * wait on for ever), its environment made by the caller. Never returns.
 */
static void __attribute__((noreturn))
child(const struct skopeo_cmd *c, pid_t parent, int out, int err, char *const *envp)
{
	static const char fail[] = "exec skopeo failed\n";
	sigset_t none;
	int null;

	setpgid(0, 0);
	/* The parent may have died before the signal was asked for. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(127);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	if ((null = open("/dev/null", O_RDONLY)) < 0 || dup2(null, 0) < 0 ||
	    dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(127);
	/* Nothing of the caller's (locks, sockets, blobs) goes with it. */
	close_range(3, ~0U, 0);
	execve(c->argv[0], (char *const *)(uintptr_t)c->argv, envp);
	(void)!write(2, fail, sizeof(fail) - 1);
	_exit(127);
}

/*
 * Go's quoting (msg="...") undone in place for \" and \\; other escapes
 * stay as written (the result is escaped for display anyway).
 */
static size_t
unquote(char *s, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\' && i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\'))
			i++;
		s[o++] = s[i];
	}
	return o;
}

/*
 * Why skopeo failed, from the tail of its stderr (buf, n bytes, modified):
 * the message of its last "level=fatal" line, else its last non-empty
 * line; escaped into why, its end kept if it is too long (the cause is
 * at the end of a Go error chain).
 */
static void
reason(char *buf, size_t n, char *why, size_t whysz)
{
	char *line = NULL, *fatal = NULL, *p, *q;
	size_t len = 0, flen = 0, cost = 0, start;

	for (p = buf; p < buf + n; p = q + 1) {
		if ((q = memchr(p, '\n', (size_t)(buf + n - p))) == NULL)
			q = buf + n;
		if (q == p)
			continue;
		line = p;
		len = (size_t)(q - p);
		if (memmem(p, len, "level=fatal", 11) != NULL) {
			fatal = p;
			flen = len;
		}
	}
	if (fatal != NULL) {
		line = fatal;
		len = flen;
	}
	if (line == NULL) {
		snprintf(why, whysz, "no message");
		return;
	}
	if ((p = memmem(line, len, "msg=\"", 5)) != NULL) {
		char *end = line + len;

		p += 5;
		for (q = p; q < end && *q != '"'; q++)
			if (*q == '\\')
				q++;
		len = unquote(p, (size_t)((q < end ? q : end) - p));
		line = p;
	}
	/* The longest end of the line whose escaped form fits. */
	for (start = len; start > 0; start--) {
		unsigned char c = (unsigned char)line[start - 1];

		cost += c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' ? 1 : 4;
		if (cost + 4 > whysz)
			break;
	}
	if (start > 0) {
		memcpy(why, "...", 3);
		oci_shown(line + start, len - start, why + 3, whysz - 3);
	} else {
		oci_shown(line, len, why, whysz);
	}
}

/* Hands line (n bytes, followed by a byte it may overwrite) to the callback. */
static void
emit(const struct skopeo_cmd *c, char *line, size_t n)
{
	if (n > 0 && line[n - 1] == '\r')
		n--;
	line[n] = '\0';
	if (c->line_cb != NULL)
		c->line_cb(c->arg, line);
}

/*
 * Hands each complete line of lb (*ln bytes; lb has room for one more)
 * to the callback and keeps the rest; a line that fills the buffer, or
 * (flush) the last one, goes as it is.
 */
static void
lines(const struct skopeo_cmd *c, char *lb, size_t *ln, bool flush)
{
	size_t start = 0;

	for (size_t i = 0; i < *ln; i++)
		if (lb[i] == '\n') {
			emit(c, lb + start, i - start);
			start = i + 1;
		}
	if (start < *ln && (flush || (start == 0 && *ln == LINE_MAX_))) {
		emit(c, lb + start, *ln - start);
		start = *ln;
	}
	*ln -= start;
	memmove(lb, lb + start, *ln);
}

int
skopeo_exec(struct skopeo_cmd *c)
{
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, rc = 0, status = 0;
	char ebuf[ERRBUF_MAX];
	char lb[LINE_MAX_ + 1];
	size_t en = 0, ln = 0;
	int64_t deadline = mono_ms() + c->timeout_ms;
	pid_t parent = getpid(), pid;
	char home[4200], tmp[4200];
	char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", home, tmp,
	    NULL };

	c->why[0] = '\0';
	c->out_len = 0;
	snprintf(home, sizeof(home), "HOME=%s", c->home != NULL ? c->home : "/");
	snprintf(tmp, sizeof(tmp), "TMPDIR=%s", c->home != NULL ? c->home : "/tmp");
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out_close;
	}
	if ((pid = fork()) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (pid == 0)
		child(c, parent, out[1], err[1], c->envp != NULL ?
		    (char *const *)(uintptr_t)c->envp : envp);
	close(out[1]);
	close(err[1]);
	out[1] = err[1] = -1;

	while (out[0] >= 0 || err[0] >= 0) {
		struct pollfd pf[2] = { { out[0], POLLIN, 0 }, { err[0], POLLIN, 0 } };
		int64_t left = deadline - mono_ms();
		ssize_t n;

		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(pf, 2, (int)(left > 1000 ? 1000 : left)) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (pf[0].revents) {
			if (c->out != NULL) {
				/* One byte kept for the NUL. */
				n = read(out[0], c->out + c->out_len, c->out_max - 1 - c->out_len);
				if (n > 0 && (c->out_len += (size_t)n) == c->out_max - 1) {
					rc = -E2BIG;
					break;
				}
			} else {
				n = read(out[0], lb + ln, LINE_MAX_ - ln);
				if (n > 0) {
					ln += (size_t)n;
					lines(c, lb, &ln, false);
				}
			}
			if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
				close(out[0]);
				out[0] = -1;
			}
		}
		if (pf[1].revents) {
			if (en == sizeof(ebuf)) {	/* keep the newer half */
				memmove(ebuf, ebuf + sizeof(ebuf) / 2, sizeof(ebuf) / 2);
				en = sizeof(ebuf) / 2;
			}
			n = read(err[0], ebuf + en, sizeof(ebuf) - en);
			if (n > 0)
				en += (size_t)n;
			else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				close(err[0]);
				err[0] = -1;
			}
		}
	}
	/* Its pipes are closed: it exits now, or is made to at the deadline. */
	while (rc == 0) {
		struct timespec ts = { 0, 10 * 1000000L };
		pid_t got = waitpid(pid, &status, WNOHANG);

		if (got == pid)
			break;
		/*
		 * Reaped by someone else (a waitpid(-1) elsewhere in the
		 * process): its status is lost, so it did not succeed here.
		 */
		if (got < 0 && errno != EINTR) {
			rc = -ECHILD;
			snprintf(c->why, sizeof(c->why), "its exit status was lost: %s",
			    strerror(errno));
			break;
		}
		if (mono_ms() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		nanosleep(&ts, NULL);
	}
	if (rc < 0) {
		/* Before the reap, so the group id is still this process's. */
		kill(-pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	if (c->out == NULL)
		lines(c, lb, &ln, true);
	else
		c->out[c->out_len] = '\0';
	if (rc == -ETIMEDOUT)
		snprintf(c->why, sizeof(c->why), "timed out after %u ms", c->timeout_ms);
	else if (rc == -E2BIG)
		snprintf(c->why, sizeof(c->why), "printed more than %zu bytes", c->out_max);
	else if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		rc = -EIO;
		reason(ebuf, en, c->why, SKOPEO_WHY_MAX);
		if (en == 0 && WIFSIGNALED(status))
			snprintf(c->why, sizeof(c->why), "killed by signal %d",
			    WTERMSIG(status));
	}
out_close:
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	if (rc < 0 && c->why[0] == '\0')
		snprintf(c->why, sizeof(c->why), "cannot start: %s", strerror(-rc));
	return rc;
}
