/*
 * image.c - the generated minimal /etc every sandbox sees (read-only).
 *
 * Built once per worker at start-up, on the host, before any job runs. It
 * holds only what programs in the image need and nothing of the host's
 * configuration: user and group names for the sandbox's ids, localhost, a
 * hostname, name-service rules that use files only, an empty resolv.conf
 * (jobs have no network), the dynamic linker's cache (speeds up every exec),
 * and the Debian alternatives symlinks (/usr/bin/awk is one), which point into
 * /usr and are recreated as links, never as copies of host files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/util.h"
#include "internal.h"

static const struct {
	const char *name;
	const char *text;
} etc_files[] = {
	{ "passwd",
	  "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	  "sandbox:x:1000:1000:sandbox:/workspace:/bin/bash\n"
	  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" },
	{ "group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n" },
	{ "hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost\n" },
	{ "hostname", "sandbox\n" },
	{ "nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\n"
	  "hosts: files\nnetworks: files\nprotocols: files\nservices: files\n" },
	{ "resolv.conf", "" },
};

/* Joins dir and name into buf; -ENAMETOOLONG rather than a cut path. */
static int
join(char *buf, size_t size, const char *dir, const char *name, struct err *e)
{
	int n = snprintf(buf, size, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= size)
		return err_set(e, -ENAMETOOLONG, "path too long: %s/%s", dir, name);
	return 0;
}

static int
write_text(const char *dir, const char *name, const char *text, struct err *e)
{
	char path[512];
	int fd, rc;

	if (join(path, sizeof(path), dir, name, e) < 0)
		return e->code;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return err_set(e, -errno, "create %s: %s", path, strerror(errno));
	rc = write_all(fd, text, strlen(text));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return err_set(e, rc, "write %s: %s", path, strerror(-rc));
	return 0;
}

static int
copy_file(const char *src, const char *dst, struct err *e)
{
	char buf[65536];
	int in, out, rc = 0;
	ssize_t n;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return 0;	/* optional */
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out < 0) {
		rc = err_set(e, -errno, "create %s: %s", dst, strerror(errno));
		goto out_in;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		if ((rc = write_all(out, buf, (size_t)n)) < 0) {
			err_set(e, rc, "write %s: %s", dst, strerror(-rc));
			break;
		}
	}
	if (n < 0 && rc == 0)
		rc = err_set(e, -errno, "read %s: %s", src, strerror(errno));
	close(out);
out_in:
	close(in);
	return rc;
}

/* Recreates /etc/alternatives' links that point into /usr. */
static int
copy_alternatives(const char *dir, struct err *e)
{
	char path[512], target[512];
	struct dirent *de;
	DIR *d;
	int rc = 0;

	d = opendir("/etc/alternatives");
	if (d == NULL)
		return 0;
	if ((rc = join(path, sizeof(path), dir, "alternatives", e)) < 0)
		goto out_dir;
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		rc = err_set(e, -errno, "mkdir %s: %s", path, strerror(errno));
		goto out_dir;
	}
	while ((de = readdir(d)) != NULL) {
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, "/usr/", 5) != 0)
			continue;
		if (snprintf(path, sizeof(path), "%s/alternatives/%s", dir,
		    de->d_name) >= (int)sizeof(path))
			continue;
		if (symlink(target, path) < 0 && errno != EEXIST) {
			rc = err_set(e, -errno, "symlink %s: %s", path, strerror(errno));
			break;
		}
	}
out_dir:
	closedir(d);
	return rc;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

int
image_build_etc(const char *run_dir, struct err *e)
{
	char dir[512], tmp[512], old[512], path[512];
	int rc;

	if (join(dir, sizeof(dir), run_dir, "etc", e) < 0 ||
	    join(tmp, sizeof(tmp), run_dir, "etc.new", e) < 0 ||
	    join(old, sizeof(old), run_dir, "etc.old", e) < 0)
		return e->code;
	/* Leftovers of an earlier run are ours to remove. */
	nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	nftw(old, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (mkdir(tmp, 0755) < 0)
		return err_set(e, -errno, "mkdir %s: %s", tmp, strerror(errno));
	for (size_t i = 0; i < sizeof(etc_files) / sizeof(etc_files[0]); i++)
		if ((rc = write_text(tmp, etc_files[i].name, etc_files[i].text, e)) < 0)
			return rc;
	if ((rc = join(path, sizeof(path), tmp, "ld.so.cache", e)) < 0)
		return rc;
	if ((rc = copy_file("/etc/ld.so.cache", path, e)) < 0)
		return rc;
	if ((rc = join(path, sizeof(path), tmp, "localtime", e)) < 0)
		return rc;
	if (symlink("/usr/share/zoneinfo/Etc/UTC", path) < 0)
		return err_set(e, -errno, "symlink %s: %s", path, strerror(errno));
	if ((rc = copy_alternatives(tmp, e)) < 0)
		return rc;
	/* Swap the new image in whole; a reader never sees half an /etc. */
	if (rename(dir, old) < 0 && errno != ENOENT)
		return err_set(e, -errno, "rename %s: %s", dir, strerror(errno));
	if (rename(tmp, dir) < 0)
		return err_set(e, -errno, "rename %s: %s", tmp, strerror(errno));
	nftw(old, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}
