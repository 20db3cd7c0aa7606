/*
 * gitignore.h - which paths of a folder .gitignore files leave out, for
 * `sandq sandbox create ID --from DIR`.
 *
 * Lifecycle: gitignore_new() -> gitignore_add() once per .gitignore file,
 * a directory's before those of its subdirectories -> gitignore_is_ignored()
 * any number of times -> gitignore_free().
 *
 * Paths are relative to the folder's root, components separated by '/',
 * without a leading '/' ("src/main.c"); a .gitignore's base is the
 * directory holding it in the same form ("" for the root's).
 *
 * The supported subset of gitignore(5):
 *  - blank lines and lines starting with '#' are skipped; "\#" and "\!" at
 *    the start stand for a literal '#' and '!'; trailing spaces are cut
 *    unless escaped ("\ "); a trailing '\r' (CRLF files) is cut;
 *  - a leading '!' negates: a path it matches is included again, unless a
 *    parent directory of it is excluded (git cannot re-include those, and
 *    neither does this);
 *  - a trailing '/' matches directories only;
 *  - a pattern with a '/' at its start or in its middle is anchored: it is
 *    matched against the path relative to the .gitignore's directory;
 *    otherwise against the last component of a path at any depth below it;
 *  - '*', '?' and '[...]' as fnmatch(3) without FNM_PATHNAME inside one
 *    component ('*' never crosses '/'; a leading '.' is not special), '\'
 *    escapes the next character;
 *  - a "**" component: leading "**" / matches in every directory, a middle
 *    / "**" / matches zero or more directories, a trailing / "**" matches
 *    everything inside (not the directory itself); other runs of '*' are
 *    plain '*'.
 * Precedence: within a file the last matching line wins; a .gitignore in a
 * deeper directory beats its parents'. Not supported: $GIT_DIR/info/exclude,
 * core.excludesFile, and git's index (tracked files are not special here).
 * Pure code: no I/O.
 */
#ifndef SANDQ_CLI_GITIGNORE_H
#define SANDQ_CLI_GITIGNORE_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define GITIGNORE_RULES_MAX 65536	/* rules over every file */
#define GITIGNORE_LINE_MAX 4096		/* bytes of one pattern line */

struct gitignore;

/* An empty rule set (ignores nothing). Owned by the caller. */
struct gitignore *gitignore_new(void);

/*
 * Adds the rules of one .gitignore file: text (len bytes, not
 * NUL-terminated, may hold any bytes) found in directory base ("" for the
 * root, "a/b" otherwise; copied). Lines over GITIGNORE_LINE_MAX bytes and
 * lines holding a NUL are skipped, as git skips what it cannot use.
 * Returns 0, or -E2BIG past GITIGNORE_RULES_MAX rules with e set (the rules
 * before it are kept).
 */
int gitignore_add(struct gitignore *g, const char *base, const char *text,
    size_t len, struct err *e);

/*
 * Whether path itself is matched by an excluding rule that no later
 * including one overrides, looking only at path (not at its parents).
 * is_dir says whether path is a directory (for dir-only rules).
 */
bool gitignore_match(const struct gitignore *g, const char *path, bool is_dir);

/*
 * Whether path is left out: it matches (gitignore_match()), or one of its
 * parent directories does.
 */
bool gitignore_is_ignored(const struct gitignore *g, const char *path,
    bool is_dir);

/* Number of rules held. */
size_t gitignore_count(const struct gitignore *g);

/* Frees g and its rules. NULL is a no-op. */
void gitignore_free(struct gitignore *g);

#endif
