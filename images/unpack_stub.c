/*
 * unpack_stub.c - TEMPORARY stand-in for images/unpack.c, written on the
 * cache's branch so that the cache and its tests build before the
 * unpacker's branch is merged. The lead deletes this file at that merge
 * (the Makefile's IMAGES_UNPACK_STUB_SRCS goes with it).
 *
 * It is deliberately tiny and NOT the hostile-layer unpacker the issue
 * asks for: a child process (dropped to uid/gid for the _as variant)
 * extracts the tar stream with libarchive's secure flags into a staging
 * folder next to dest, bounded by max_bytes and max_entries only, with
 * device nodes dropped and setuid/setgid bits cleared; the parent renames
 * the staging folder to dest. No whiteouts, no ratio bound.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unpack.h"

struct stub_reply {
	int code;				/* 0 or -errno */
	struct img_unpack_stats st;
	char msg[200];
};

/* The child's side: extracts fd into the current folder; fills r. */
static void
extract(int fd, const struct img_unpack_limits *lim, struct stub_reply *r)
{
	struct archive *a = archive_read_new(), *w = archive_write_disk_new();
	struct archive_entry *ent;
	int rc;

	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_write_disk_set_options(w, ARCHIVE_EXTRACT_SECURE_NODOTDOT |
	    ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
	    ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME);
	if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK)
		goto fail;
	while ((rc = archive_read_next_header(a, &ent)) == ARCHIVE_OK) {
		mode_t type = archive_entry_filetype(ent);

		if (++r->st.entries > lim->max_entries) {
			r->code = -EFBIG;
			snprintf(r->msg, sizeof(r->msg), "more than %llu entries",
			    (unsigned long long)lim->max_entries);
			goto out;
		}
		if (type == AE_IFCHR || type == AE_IFBLK) {
			r->st.dropped_devices++;
			continue;
		}
		if (archive_entry_mode(ent) & (S_ISUID | S_ISGID)) {
			r->st.cleared_setid++;
			archive_entry_set_perm(ent, archive_entry_perm(ent) & 0777);
		}
		r->st.bytes += (uint64_t)archive_entry_size(ent);
		if (r->st.bytes > lim->max_bytes) {
			r->code = -EFBIG;
			snprintf(r->msg, sizeof(r->msg), "more than %llu bytes",
			    (unsigned long long)lim->max_bytes);
			goto out;
		}
		if (archive_write_header(w, ent) != ARCHIVE_OK)
			goto fail_w;
		{
			const void *buf;
			size_t len;
			la_int64_t off;

			while ((rc = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
				if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK)
					goto fail_w;
			if (rc != ARCHIVE_EOF)
				goto fail;
		}
		if (archive_write_finish_entry(w) != ARCHIVE_OK)
			goto fail_w;
	}
	if (rc == ARCHIVE_EOF)
		goto out;
fail:
	r->code = -EBADMSG;
	snprintf(r->msg, sizeof(r->msg), "%s", archive_error_string(a) ?
	    archive_error_string(a) : "unreadable tar stream");
	goto out;
fail_w:
	r->code = -EIO;
	snprintf(r->msg, sizeof(r->msg), "%s", archive_error_string(w) ?
	    archive_error_string(w) : "cannot write");
out:
	archive_write_free(w);
	archive_read_free(a);
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Both entry points: uid (uid_t)-1 keeps the caller's identity. */
static int
unpack(uid_t uid, gid_t gid, int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e)
{
	struct stub_reply r = { 0 };
	char stage[PATH_MAX];
	int pfd[2] = { -1, -1 }, dfd = -1, status, rc;
	pid_t pid;

	if (snprintf(stage, sizeof(stage), "%s.unpack-XXXXXX", dest) >= (int)sizeof(stage))
		return err_set(e, -ENAMETOOLONG, "%s: path too long", what);
	if (mkdtemp(stage) == NULL || chmod(stage, 0755) < 0)
		return err_set(e, -errno, "%s: staging folder: %s", what, strerror(errno));
	if ((uid != (uid_t)-1 && chown(stage, uid, gid) < 0) ||
	    (dfd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    pipe2(pfd, O_CLOEXEC) < 0) {
		rc = err_set(e, -errno, "%s: staging folder: %s", what, strerror(errno));
		goto out_rm;
	}
	if ((pid = fork()) < 0) {
		rc = err_set(e, -errno, "%s: fork: %s", what, strerror(errno));
		goto out_rm;
	}
	if (pid == 0) {
		/* fchdir: the dropped uid need not reach the folder by its path. */
		if (fchdir(dfd) < 0 || (uid != (uid_t)-1 && (setgroups(0, NULL) < 0 ||
		    setgid(gid) < 0 || setuid(uid) < 0))) {
			r.code = -errno;
			snprintf(r.msg, sizeof(r.msg), "cannot drop privileges: %s",
			    strerror(errno));
		} else {
			extract(fd, lim, &r);
		}
		_exit(write(pfd[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(pfd[1]);
	pfd[1] = -1;
	if (read(pfd[0], &r, sizeof(r)) != (ssize_t)sizeof(r)) {
		r.code = -EIO;
		snprintf(r.msg, sizeof(r.msg), "the unpacking process died");
	}
	waitpid(pid, &status, 0);
	if (r.code == 0 && rename(stage, dest) < 0) {
		r.code = -errno;
		snprintf(r.msg, sizeof(r.msg), "rename: %s", strerror(errno));
	}
	if ((rc = r.code) == 0) {
		if (st != NULL)
			*st = r.st;
		goto out;
	}
	err_set(e, r.code, "%s: %s", what, r.msg);
out_rm:
	nftw(stage, rm_one, 16, FTW_DEPTH | FTW_PHYS);
out:
	if (dfd >= 0)
		close(dfd);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	return rc;
}

int
img_unpack_layer(int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e)
{
	return unpack((uid_t)-1, (gid_t)-1, fd, dest, what, lim, st, e);
}

int
img_unpack_layer_as(uid_t uid, gid_t gid, int fd, const char *dest, const char *what,
    const struct img_unpack_limits *lim, struct img_unpack_stats *st, struct err *e)
{
	return unpack(uid, gid, fd, dest, what, lim, st, e);
}
