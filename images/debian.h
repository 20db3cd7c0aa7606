/*
 * debian.h - a Debian root filesystem built with mmdebstrap from the
 * machine's own apt sources, as one tarball: what `sandq image build
 * NAME --debian SUITE --packages "..."` packs (images/pack.h) and pushes.
 *
 * Lifecycle: img_debian_sources() (the machine's sources for the suite,
 * as a deb822 text the caller writes to a file ending in .sources) ->
 * img_debian_build() (mmdebstrap, to a tarball) -> the caller packs it.
 */
#ifndef SANDQ_IMAGES_DEBIAN_H
#define SANDQ_IMAGES_DEBIAN_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define IMG_DEBIAN_ETC_APT "/etc/apt"		/* where apt's sources are */
#define IMG_DEBIAN_MMDEBSTRAP "/usr/bin/mmdebstrap"
#define IMG_DEBIAN_PACKAGES_MAX 512		/* packages of one build */
#define IMG_DEBIAN_PACKAGE_MAX 128		/* bytes of one package's name */
#define IMG_DEBIAN_FILE_MAX (1u << 20)		/* bytes of one sources file */
#define IMG_DEBIAN_FILES_MAX 128		/* sources files read */
#define IMG_DEBIAN_WHY_MAX 160			/* bytes of mmdebstrap's reason kept */

/*
 * The apt sources of the machine whose apt configuration is under etc_apt
 * (IMG_DEBIAN_ETC_APT; a test's folder): sources.list and the *.list and
 * *.sources files of sources.list.d whose names apt reads ([A-Za-z0-9_.-]),
 * in apt's order; of them, what suite needs (aptsrc.h), as one deb822
 * text (*text, owned). files (size bytes) gets the files the text came
 * from, ", "-separated, for a progress line. Returns 0, or -errno with e:
 * -ENOENT when none offers suite (naming the suites there are), -EINVAL
 * for a file apt would not read either.
 */
int img_debian_sources(const char *etc_apt, const char *suite, char **text,
    char *files, size_t size, struct err *e);

/*
 * Whether s is a package apt may be asked to install: a Debian package
 * name ([a-z0-9][a-z0-9+.-]+, at most IMG_DEBIAN_PACKAGE_MAX bytes),
 * optionally followed by "=VERSION" ([A-Za-z0-9.+~:-]) or "/RELEASE"
 * ([A-Za-z0-9.-]).
 */
bool img_debian_package_ok(const char *s);

/* One build (img_debian_build). */
struct img_debian_build {
	const char *suite;		/* e.g. "bookworm" (apt_suite_ok) */
	const char *const *packages;	/* NULL-terminated (img_debian_package_ok), or NULL */
	const char *sources;		/* the deb822 file, its name ending in .sources */
	const char *out;		/* the tarball to write (must not exist) */
	const char *mmdebstrap;		/* NULL: IMG_DEBIAN_MMDEBSTRAP */
	void (*line_cb)(void *arg, const char *line);	/* each line it prints, or NULL */
	void *arg;
};

/*
 * Runs mmdebstrap --mode=unshare --variant=minbase --format=tar
 * [--include=P,...] SUITE OUT SOURCES with the caller's environment, its
 * output and errors handed line by line to b->line_cb (a line is raw
 * bytes from mmdebstrap and apt: escape it before showing it), and waits
 * for it. It dies with the caller (PR_SET_PDEATHSIG). Returns 0 when it
 * exited 0 and out exists; -ENOENT when mmdebstrap is not installed;
 * -EIO when it failed, e naming its exit status and its last error line
 * ("E: ...", escaped); -errno if it could not be started.
 */
int img_debian_build(const struct img_debian_build *b, struct err *e);

#endif
