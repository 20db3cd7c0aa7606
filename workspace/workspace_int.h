/*
 * workspace_int.h - what the two files of the workspace code share, and
 * nothing else sees: the helpers of workspace.c that workspace_capture.c
 * calls. workspace.c materialises and applies; workspace_capture.c
 * captures (plain, overlay and in place). workspace.h is the public API.
 */
#ifndef SANDQ_WORKSPACE_INT_H
#define SANDQ_WORKSPACE_INT_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"
#include "perms.h"
#include "workspace.h"

/* Directories are walked through these: never a symlink, never a tty. */
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Copies lim (or the defaults) into out, lowered to the codec's caps. */
void workspace__limits_resolve(const struct workspace_limits *lim,
    struct workspace_limits *out);
/*
 * True when s[0..n) is valid UTF-8 without C0 controls, DEL or C1
 * controls: what a name or link target must be.
 */
bool workspace__text_is_clean(const unsigned char *s, size_t n);
/* Writes s into out (size bytes) with unprintable bytes and '\' as \xNN. */
void workspace__str_escape(const char *s, char *out, size_t size);
/* e <- "path (escaped): what is not valid UTF-8 ..."; returns -EILSEQ. */
int workspace__bad_name(struct err *e, const char *path, const char *what);
/* e <- "path: call: strerror(errno)"; returns -errno. */
int workspace__sys_fail(struct err *e, const char *path, const char *call);
/* True when path is strictly below dir (dlen bytes, "/a/b"). */
bool workspace__path_is_below(const char *path, const char *dir,
    size_t dlen);
/* The level of path under p; everything is writable without rules. */
enum perm_level workspace__level_of(const struct perms *p, const char *path);

#endif
