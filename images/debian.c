/*
 * debian.c - a Debian root built by mmdebstrap from the machine's apt
 * sources (see debian.h).
 *
 * Where the packages come from is the machine's choice, not sandq's:
 * the sources are read from the machine's apt configuration and handed
 * to mmdebstrap as one explicit file, so mmdebstrap never falls back to
 * its own default mirror and a build fetches from nowhere the machine's
 * apt would not.
 *
 * Why --mode=unshare: run by root, mmdebstrap then chroots in private
 * mount, pid, UTS and IPC namespaces, so the /proc, /sys and /dev it
 * mounts for the packages' maintainer scripts, and any daemon a script
 * starts, end with the build even when it is killed; root mode would
 * leave them on the host. Run by another user, the same mode puts the
 * build in a user namespace on that user's /etc/subuid range, so sandq
 * image build needs no root at all there.
 *
 * mmdebstrap runs with the caller's own environment (proxies,
 * SOURCE_DATE_EPOCH, TMPDIR: the user's build, the user's settings);
 * nothing in it chooses a source, since the sources file is explicit.
 *
 * Sections: the machine's sources, package names, running mmdebstrap.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/xmalloc.h"
#include "aptsrc.h"
#include "debian.h"
#include "oci.h"

#define LINE_MAX_ 4096		/* a line of mmdebstrap's output; longer ones are cut */

/*** The machine's sources ***/

/* Reads path whole (at most IMG_DEBIAN_FILE_MAX bytes) into *out (owned). */
static int
read_file(const char *path, char **out, size_t *len, struct err *e)
{
	struct stat sb;
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
	    sb.st_size > IMG_DEBIAN_FILE_MAX) {
		close(fd);
		return err_set(e, -EINVAL, "%s: not a file of at most %u bytes", path,
		    IMG_DEBIAN_FILE_MAX);
	}
	*out = xmalloc((size_t)sb.st_size + 1);
	n = read(fd, *out, (size_t)sb.st_size);
	close(fd);
	if (n != sb.st_size) {
		free(*out);
		*out = NULL;
		return err_set(e, -EIO, "%s: short read", path);
	}
	(*out)[n] = '\0';
	*len = (size_t)n;
	return 0;
}

/* Parses one sources file into all; notes its name in files. */
static int
read_sources(const char *path, bool deb822, struct apt_sources *all, char *files,
    size_t size, struct err *e)
{
	size_t before = all->n, len = 0, o = strlen(files);
	char *text = NULL;
	int rc;

	if ((rc = read_file(path, &text, &len, e)) < 0)
		return rc;
	rc = apt_sources_parse(text, len, path, deb822, all, e);
	free(text);
	if (rc == 0 && all->n > before && o + strlen(path) + 3 < size)
		snprintf(files + o, size - o, "%s%s", o ? ", " : "", path);
	return rc;
}

/* Whether apt reads sources.list.d/name: [A-Za-z0-9_.-], ending .list or .sources. */
static int
apt_part(const char *name)
{
	size_t n = strlen(name);

	if (strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789_.-") != n)
		return 0;
	if (n > 5 && strcmp(name + n - 5, ".list") == 0)
		return 1;
	if (n > 8 && strcmp(name + n - 8, ".sources") == 0)
		return 2;
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
img_debian_sources(const char *etc_apt, const char *suite, char **text,
    char *files, size_t size, struct err *e)
{
	struct apt_sources all = { 0 };
	char path[4096], **names = NULL;
	size_t nnames = 0;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	*text = NULL;
	files[0] = '\0';
	snprintf(path, sizeof(path), "%s/sources.list", etc_apt);
	if (access(path, F_OK) == 0 &&
	    (rc = read_sources(path, false, &all, files, size, e)) < 0)
		goto out;
	snprintf(path, sizeof(path), "%s/sources.list.d", etc_apt);
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL && nnames < IMG_DEBIAN_FILES_MAX)
			if (apt_part(de->d_name)) {
				names = xreallocarray(names, nnames + 1, sizeof(*names));
				names[nnames++] = xstrdup(de->d_name);
			}
		closedir(d);
	}
	/* apt reads them in alphabetical order. */
	if (nnames > 0)
		qsort(names, nnames, sizeof(*names), name_cmp);
	for (size_t i = 0; i < nnames; i++) {
		snprintf(path, sizeof(path), "%s/sources.list.d/%s", etc_apt, names[i]);
		if ((rc = read_sources(path, apt_part(names[i]) == 2, &all, files, size,
		    e)) < 0)
			goto out;
	}
	rc = apt_sources_for_suite(&all, suite, text, e);
out:
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	apt_sources_free(&all);
	return rc;
}

/*** Package names ***/

bool
img_debian_package_ok(const char *s)
{
	static const char name_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789+.-";
	size_t n = strspn(s, name_chars), len = strlen(s);

	if (len > IMG_DEBIAN_PACKAGE_MAX || n < 2 || s[0] == '+' || s[0] == '.' ||
	    s[0] == '-')
		return false;
	if (s[n] == '\0')
		return true;
	if (s[n] == '=')
		return s[n + 1] != '\0' && strspn(s + n + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		    "abcdefghijklmnopqrstuvwxyz0123456789.+~:-") == len - n - 1;
	if (s[n] == '/')
		return s[n + 1] != '\0' && strspn(s + n + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		    "abcdefghijklmnopqrstuvwxyz0123456789.-") == len - n - 1;
	return false;
}

/*** Running mmdebstrap ***/

/* The child: mmdebstrap with out as its stdout and stderr. Never returns. */
static void __attribute__((noreturn))
child(const char *const *argv, pid_t parent, int out)
{
	int null;

	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(127);
	if ((null = open("/dev/null", O_RDONLY)) < 0 || dup2(null, 0) < 0 ||
	    dup2(out, 1) < 0 || dup2(out, 2) < 0)
		_exit(127);
	close_range(3, ~0U, 0);
	execv(argv[0], (char *const *)(uintptr_t)argv);
	dprintf(2, "E: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* What the output says so far: each line to the callback, the last error kept. */
struct output {
	const struct img_debian_build *b;
	char line[LINE_MAX_ + 1];
	size_t len;
	char last[LINE_MAX_ + 1];	/* the last "E: " line, else the last line */
	bool last_is_error;
};

static void
output_line(struct output *o)
{
	bool error;

	o->line[o->len] = '\0';
	if (o->len > 0 && o->line[o->len - 1] == '\r')
		o->line[--o->len] = '\0';
	if (o->len == 0)
		return;
	if (o->b->line_cb != NULL)
		o->b->line_cb(o->b->arg, o->line);
	error = strncmp(o->line, "E: ", 3) == 0;
	if (error || !o->last_is_error) {
		memcpy(o->last, o->line, o->len + 1);
		o->last_is_error = error;
	}
	o->len = 0;
}

int
img_debian_build(const struct img_debian_build *b, struct err *e)
{
	const char *bin = b->mmdebstrap != NULL ? b->mmdebstrap : IMG_DEBIAN_MMDEBSTRAP;
	const char *argv[12];
	struct output *o = NULL;
	char *include = NULL, buf[4096], why[IMG_DEBIAN_WHY_MAX + 8];
	int pfd[2] = { -1, -1 }, status = 0, rc = 0, k = 0;
	pid_t pid, parent = getpid();
	size_t ilen = 0;

	if (access(bin, X_OK) != 0)
		return err_set(e, -ENOENT, "%s is not installed (Debian's package "
		    "mmdebstrap)", bin);
	for (size_t i = 0; b->packages != NULL && b->packages[i] != NULL; i++) {
		size_t n = strlen(b->packages[i]);

		include = xreallocarray(include, ilen + n + 12, 1);
		ilen += (size_t)sprintf(include + ilen, "%s%s", ilen ? "," : "--include=",
		    b->packages[i]);
	}
	argv[k++] = bin;
	argv[k++] = "--mode=unshare";
	argv[k++] = "--variant=minbase";
	argv[k++] = "--format=tar";
	if (include != NULL)
		argv[k++] = include;
	/* "--" first: nothing below is read as an option. */
	argv[k++] = "--";
	argv[k++] = b->suite;
	argv[k++] = b->out;
	argv[k++] = b->sources;
	argv[k] = NULL;

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		rc = err_set(e, -errno, "mmdebstrap: %s", strerror(errno));
		goto out;
	}
	if ((pid = fork()) < 0) {
		rc = err_set(e, -errno, "mmdebstrap: fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		child(argv, parent, pfd[1]);
	close(pfd[1]);
	pfd[1] = -1;
	o = xcalloc(1, sizeof(*o));
	o->b = b;
	for (;;) {
		ssize_t n = read(pfd[0], buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n' || o->len == LINE_MAX_)
				output_line(o);
			if (buf[i] != '\n')
				o->line[o->len++] = buf[i];
		}
	}
	output_line(o);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			rc = err_set(e, -ECHILD, "mmdebstrap: its exit status was lost: %s",
			    strerror(errno));
			goto out;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		oci_shown(o->last, strlen(o->last), why, sizeof(why));
		if (WIFSIGNALED(status))
			rc = err_set(e, -EIO, "mmdebstrap was killed by signal %d: %s",
			    WTERMSIG(status), why[0] ? why : "no message");
		else
			rc = err_set(e, -EIO, "mmdebstrap failed (exit status %d): %s",
			    WEXITSTATUS(status), why[0] ? why : "no message");
		goto out;
	}
	if (access(b->out, F_OK) != 0)
		rc = err_set(e, -EIO, "mmdebstrap exited 0 but wrote no tarball");
out:
	free(o);
	free(include);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	return rc;
}
