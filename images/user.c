/*
 * user.c - an image's User as the uid and gid its jobs run as (user.h).
 *
 * Numbers and "root" need nothing but the text. A name is looked up in
 * the image's own /etc/passwd (or /etc/group), found as overlayfs would
 * show it: in the topmost layer that has the file, unless a layer above
 * deletes it (a whiteout: a character device) or replaces /etc with
 * something that is not a folder. Each file is opened one component at a
 * time with O_NOFOLLOW below the layer's folder, so a layer's symbolic
 * link never leads the reader (the worker) to a file of the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/xmalloc.h"
#include "oci.h"
#include "user.h"

/* Reads a decimal id (no sign, no leading zero but "0") of s[0..n). */
static bool
parse_id(const char *s, size_t n, uint32_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > IMG_USER_ID_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Reads fd to its end or max bytes; returns the count or -errno. */
static ssize_t
read_upto(int fd, char *buf, size_t max)
{
	size_t got = 0;

	while (got < max) {
		ssize_t r = read(fd, buf + got, max - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/*
 * Reads etc/NAME of the image (layers top first) into *buf (owned, NUL
 * added). Returns 0, -ENOENT when no layer shows one, or -errno.
 */
static int
read_etc(const char *name, const char *const *layers, size_t n, char **buf)
{
	*buf = NULL;
	for (size_t i = 0; i < n; i++) {
		int dir = -1, etc = -1, fd = -1, rc;
		struct stat st;
		ssize_t got;

		dir = open(layers[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dir < 0)
			return -errno;
		etc = openat(dir, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		rc = etc < 0 ? -errno : 0;
		close(dir);
		if (rc == -ENOENT)
			continue;	/* this layer leaves /etc as it was */
		if (rc < 0)
			return -ENOENT;	/* a link, a file or a whiteout: no /etc below */
		if (fstatat(etc, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -errno;
			close(etc);
			if (rc == -ENOENT)
				continue;
			return rc;
		}
		if (!S_ISREG(st.st_mode)) {
			close(etc);
			return -ENOENT;	/* a whiteout, a link: the file is not there */
		}
		if (st.st_size > IMG_USER_FILE_MAX) {
			close(etc);
			return -EFBIG;
		}
		fd = openat(etc, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		rc = fd < 0 ? -errno : 0;
		close(etc);
		if (rc < 0)
			return rc;
		*buf = xmalloc(IMG_USER_FILE_MAX + 1);
		got = read_upto(fd, *buf, IMG_USER_FILE_MAX);
		close(fd);
		if (got < 0) {
			free(*buf);
			*buf = NULL;
			return (int)got;
		}
		(*buf)[got] = '\0';
		return 0;
	}
	return -ENOENT;
}

/*
 * In a passwd or group text, the line whose first field is key (klen
 * bytes): fills id (the third field) and, if gid is not NULL, *gid (the
 * fourth). Returns true if found and its numbers parse.
 */
static bool
find_entry(const char *text, const char *key, size_t klen, uint32_t *id, uint32_t *gid)
{
	for (const char *line = text; line != NULL && *line != '\0';) {
		const char *end = strchr(line, '\n'), *f[5];
		size_t len = end != NULL ? (size_t)(end - line) : strlen(line), nf = 0;

		f[nf++] = line;
		for (size_t i = 0; i < len && nf < 5; i++)
			if (line[i] == ':')
				f[nf++] = line + i + 1;
		if (nf >= (gid != NULL ? 5u : 4u) && (size_t)(f[1] - f[0] - 1) == klen &&
		    memcmp(line, key, klen) == 0) {
			const char *stop = line + len;
			const char *e3 = nf > 3 ? f[3] - 1 : stop;

			if (!parse_id(f[2], (size_t)(e3 - f[2]), id))
				return false;
			if (gid != NULL) {
				const char *e4 = nf > 4 ? f[4] - 1 : stop;

				if (!parse_id(f[3], (size_t)(e4 - f[3]), gid))
					return false;
			}
			return true;
		}
		line = end != NULL ? end + 1 : NULL;
	}
	return false;
}

/* Looks key up in the image's etc/file; 0, or -errno with e. */
static int
lookup(const char *file, const char *key, size_t klen, const char *const *layers,
    size_t n, uint32_t *id, uint32_t *gid, const char *user, struct err *e)
{
	char shown[80], buf[64];
	char *text = NULL;
	int rc;

	oci_shown(user, strlen(user), shown, sizeof(shown));
	if ((rc = read_etc(file, layers, n, &text)) < 0)
		return err_set(e, rc == -ENOENT ? -ENOENT : -EINVAL, "user '%s': the "
		    "image's /etc/%s cannot be read: %s", shown, file,
		    rc == -ENOENT ? "it has none" : strerror(-rc));
	if (!find_entry(text, key, klen, id, gid))
		rc = err_set(e, -ENOENT, "user '%s': '%s' is not in the image's /etc/%s",
		    shown, oci_shown(key, klen, buf, sizeof(buf)), file);
	free(text);
	return rc;
}

int
img_user_resolve(const char *user, const char *const *layers, size_t n,
    struct img_user *out, struct err *e)
{
	const char *colon, *grp;
	size_t ulen, glen;
	uint32_t gid = 0;
	bool have_gid = false;
	char shown[80];
	int rc;

	out->uid = out->gid = 0;
	if (user == NULL || user[0] == '\0')
		return 0;	/* no User: root, as Docker runs it */
	if (strlen(user) > IMG_USER_MAX || strchr(user, '\n') != NULL)
		return err_set(e, -EINVAL, "user '%s': not a user",
		    oci_shown(user, strlen(user), shown, sizeof(shown)));
	colon = strchr(user, ':');
	ulen = colon != NULL ? (size_t)(colon - user) : strlen(user);
	grp = colon != NULL ? colon + 1 : NULL;
	glen = grp != NULL ? strlen(grp) : 0;
	if (ulen == 0 || (grp != NULL && (glen == 0 || strchr(grp, ':') != NULL)))
		return err_set(e, -EINVAL, "user '%s': expected USER or USER:GROUP",
		    oci_shown(user, strlen(user), shown, sizeof(shown)));
	/* The group first: a user's own group is only the default. */
	if (grp != NULL) {
		if (glen == 4 && memcmp(grp, "root", 4) == 0)
			gid = 0;
		else if (!parse_id(grp, glen, &gid) && (rc = lookup("group", grp, glen,
		    layers, n, &gid, NULL, user, e)) < 0)
			return rc;
		have_gid = true;
	}
	if (ulen == 4 && memcmp(user, "root", 4) == 0) {
		out->uid = 0;
		out->gid = 0;
	} else if (parse_id(user, ulen, &out->uid)) {
		out->gid = 0;		/* as Docker runs a bare number */
	} else if ((rc = lookup("passwd", user, ulen, layers, n, &out->uid, &out->gid,
	    user, e)) < 0) {
		return rc;
	}
	if (have_gid)
		out->gid = gid;
	return 0;
}
