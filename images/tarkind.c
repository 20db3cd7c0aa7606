/*
 * tarkind.c - which kind of tarball `sandq image import` was given (see
 * tarkind.h).
 *
 * The names decide, at the top of the archive (a leading "./" or "/"
 * dropped): skopeo's oci-archive: reads a tar whose top holds oci-layout
 * and index.json, its docker-archive: one whose top holds manifest.json
 * (what `docker save` and skopeo write). A root filesystem holds neither
 * at its top. Every header is read, so a truncated archive is found here,
 * before anything is pushed.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oci.h"
#include "pack.h"
#include "tarkind.h"

#define READ_BLOCK 65536

const char *
img_tar_kind_name(enum img_tar_kind k)
{
	switch (k) {
	case IMG_TAR_OCI:
		return "an OCI archive";
	case IMG_TAR_DOCKER:
		return "a docker-archive";
	default:
		return "a root filesystem tarball";
	}
}

/* name without leading "/" and "./" components. */
static const char *
top_name(const char *name)
{
	for (;;) {
		if (name[0] == '/')
			name++;
		else if (name[0] == '.' && name[1] == '/')
			name += 2;
		else
			return name;
	}
}

/* Whether fd is a regular file with nothing past its offset. */
static bool
empty(int fd)
{
	struct stat sb;
	off_t at = lseek(fd, 0, SEEK_CUR);

	return fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && at >= 0 && sb.st_size <= at;
}

int
img_tar_kind(int fd, const char *what, enum img_tar_kind *kind, struct err *e)
{
	struct archive *a = archive_read_new();
	struct archive_entry *ae;
	bool layout = false, index = false, manifest = false, in_data = false, was_empty;
	char last[160] = "", why[128];
	const char *m;
	uint64_t n = 0;
	int rc = 0, r;

	*kind = IMG_TAR_ROOTFS;
	was_empty = empty(fd);
	if (a == NULL)
		return err_set(e, -ENOMEM, "%s: out of memory", what);
	archive_read_support_format_tar(a);
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_filter_xz(a);
	archive_read_support_filter_bzip2(a);
	if (archive_read_open_fd(a, fd, READ_BLOCK) != ARCHIVE_OK)
		goto out_bad;
	while ((r = archive_read_next_header(a, &ae)) != ARCHIVE_EOF) {
		const char *name;

		if (r < ARCHIVE_WARN)
			goto out_bad;
		if (++n > IMG_PACK_ENTRIES_DEFAULT) {
			rc = err_set(e, -E2BIG, "%s: more than %u entries", what,
			    IMG_PACK_ENTRIES_DEFAULT);
			goto out;
		}
		name = archive_entry_pathname(ae);
		if (name == NULL)
			name = "";
		if (archive_entry_filetype(ae) == AE_IFREG) {
			const char *t = top_name(name);

			layout |= strcmp(t, "oci-layout") == 0;
			index |= strcmp(t, "index.json") == 0;
			manifest |= strcmp(t, "manifest.json") == 0;
		}
		oci_shown(name, strlen(name), last, sizeof(last));
		/* Reading the data through finds a truncated last entry. */
		if (archive_read_data_skip(a) < ARCHIVE_WARN) {
			in_data = true;
			goto out_bad;
		}
	}
	if (n == 0) {
		rc = err_set(e, -EBADMSG, "%s: no entries (an empty file or archive)",
		    what);
		goto out;
	}
	if (layout && index)
		*kind = IMG_TAR_OCI;
	else if (manifest && !layout)
		*kind = IMG_TAR_DOCKER;
	goto out;

out_bad:
	m = archive_error_string(a);
	oci_shown(m ? m : "unknown error", strlen(m ? m : "unknown error"), why,
	    sizeof(why));
	if (n == 0 && was_empty)
		rc = err_set(e, -EBADMSG, "%s: an empty file", what);
	else if (n == 0)
		rc = err_set(e, -EBADMSG, "%s: not a tar archive (%s)", what, why);
	else
		rc = err_set(e, -EBADMSG, "%s: truncated or corrupt %s the entry "
		    "'%s' (%s)", what, in_data ? "in" : "after", last, why);
out:
	archive_read_free(a);
	return rc;
}
