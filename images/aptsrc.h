/*
 * aptsrc.h - apt's sources, parsed: the one-line form (sources.list,
 * *.list) and the deb822 form (*.sources), and the ones a suite needs
 * written back as one deb822 file for mmdebstrap. Pure: text in, structs
 * and text out, no I/O (images/debian.c reads the machine's files).
 *
 * `sandq image build --debian SUITE` builds from the machine's own apt
 * sources and nothing else: the entries (Types deb, not disabled) whose
 * Suites hold SUITE, SUITE-updates, SUITE-security or SUITE/updates, with
 * their URIs, Components, Signed-By and Trusted as the machine has them.
 *
 * Lifecycle: apt_sources_parse() appends to a zeroed struct apt_sources
 * (once per file), apt_sources_for_suite() writes the text,
 * apt_sources_free().
 */
#ifndef SANDQ_IMAGES_APTSRC_H
#define SANDQ_IMAGES_APTSRC_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define APT_SOURCES_MAX 256		/* entries kept from all files */
#define APT_ITEMS_MAX 64		/* URIs, suites or components of one entry */
#define APT_ITEM_MAX 1024		/* bytes of one of them */
#define APT_SIGNED_BY_MAX 65536		/* bytes of a Signed-By value (a path or a key) */
#define APT_SUITE_MAX 64		/* bytes of a suite name asked for */

/* One entry: a deb822 stanza or a one-line "deb" line. */
struct apt_source {
	char *file;			/* where it was read, for messages */
	unsigned line;			/* its first line there */
	char **uris;			/* owned, nuris of them */
	size_t nuris;
	char **suites;
	size_t nsuites;
	char **components;
	size_t ncomponents;
	char *signed_by;		/* a path, or a deb822 key block as written
					   (continuation lines and all); NULL: none */
	bool trusted;			/* Trusted: yes / [trusted=yes] */
};

struct apt_sources {
	struct apt_source *v;		/* owned */
	size_t n;
};

/*
 * Parses one file's text (len bytes; NUL bytes refused) read from file,
 * deb822 or one-line, and appends its binary entries (Types deb; deb-src
 * and Enabled: no are skipped) to *out. Returns 0, or -EINVAL with e
 * naming file:line and what is wrong; -E2BIG past the bounds above.
 */
int apt_sources_parse(const char *text, size_t len, const char *file, bool deb822,
    struct apt_sources *out, struct err *e);

/*
 * Whether s is a suite or codename apt could name: 1 to APT_SUITE_MAX
 * bytes of [A-Za-z0-9._-], not starting with '.' or '-'.
 */
bool apt_suite_ok(const char *s);

/*
 * The deb822 text (owned by the caller, *text) of the entries of all that
 * suite needs, each keeping only its suites among suite, suite-updates,
 * suite-security and suite/updates. Returns 0; -ENOENT when no entry
 * offers suite itself, e listing the suites there are ("the machine's apt
 * sources have no suite 'trixie' (they have: bookworm, ...)").
 */
int apt_sources_for_suite(const struct apt_sources *all, const char *suite,
    char **text, struct err *e);

void apt_sources_free(struct apt_sources *s);

#endif
