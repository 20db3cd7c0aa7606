/*
 * path.h - sandbox paths as jobs name them: normalisation and the
 * /workspace alias.
 *
 * Inside a job the sandbox's root is /workspace, so a job may name a path of
 * its tree either way: "a/b", "/a/b" and "/workspace/a/b" are one path.
 * Decoding (job.c) normalises every path once; libsandq applies the same
 * functions to what its caller wrote, so a client and the dispatcher agree.
 * docs/paths.md is the reference.
 *
 * A path rule (docs/paths.md) is a pattern and a level; the level is parsed
 * here, once, when the job is decoded, so every later reader holds an enum
 * perm_level. workspace/perms.h compiles and checks the rules.
 *
 * Pure code: no I/O, no globals.
 */
#ifndef SANDQ_PROTO_PATH_H
#define SANDQ_PROTO_PATH_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define JOB_PATH_MAX 4096		/* bytes of a sandbox path */
#define JOB_NAME_MAX 255		/* bytes of one path component */

/* The level of a path rule: what a job may do with the paths it matches. */
enum perm_level {
	PERM_NONE = 0,		/* hidden: absent from listings, ENOENT */
	PERM_VIEW,		/* listed with its size, reading refused */
	PERM_READ,		/* readable, any change refused */
	PERM_WRITE,		/* allowed */
};

/*
 * Parses a level's name, "none", "view", "read" or "write" (exactly len
 * bytes, lower case), into *out. Returns 0 or -EINVAL.
 */
int perm_level_parse(const char *s, size_t len, enum perm_level *out);

/* The name of a level ("none" ...), or "?" for a value out of range. */
const char *perm_level_name(enum perm_level level);

/*
 * Normalises a sandbox path ("a/b", "/a/b", "./a//b/") to "a/b" in out
 * (JOB_PATH_MAX + 1 bytes). Refuses '..', empty, NUL, control characters and
 * components longer than JOB_NAME_MAX. Returns 0 or -EINVAL with e set.
 */
int payload_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e);
/*
 * The same for a path of the sandbox's tree (files, fs.* path), which may
 * also name the root as /workspace: "a/b", "/a/b", "/workspace/a/b" and
 * "workspace/a/b" are all "a/b"; the root is "". Exactly what decoding a job
 * gives, so a client that builds a struct job uses it on what its caller
 * wrote. Returns 0 or -EINVAL with e set.
 */
int payload_sandbox_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e);
/*
 * A path rule's pattern as decoding gives it: one leading "/workspace"
 * dropped ("/workspace" alone is "/"); anything else as written. Returns a
 * pointer into p, or the static "/" (never NULL).
 */
const char *payload_pattern_unalias(const char *p);

/*
 * Length of a leading "/workspace" (or, unless absolute_only, "workspace")
 * component of p (n bytes): the sandbox root as a job sees it. 0 if there is
 * none.
 */
size_t path_alias_len(const char *p, size_t n, bool absolute_only);

/* True if the sandbox path s would lose its first component to the alias. */
bool path_needs_alias(const char *s);

/*
 * A folder of a sandbox's root filesystem, as a sandbox.create's workdir
 * or from_image_dir names it (docs/images.md "Sandboxes on images"):
 * absolute, printable ASCII but ',', ':' and '\', normalised ("//", "."
 * and a trailing "/" dropped), no "..", at most JOB_ROOT_DIR_MAX bytes and
 * JOB_ROOT_DIR_DEPTH components, neither "/" nor at or below a folder
 * sandq mounts itself (path.c's root_dir_reserved[]: /proc, /dev, /tmp, /etc, /sys,
 * /workspace), except that workspace_ok lets "/workspace" itself through
 * (a workdir of /workspace is the default). Writes "/a/b" to out
 * (JOB_ROOT_DIR_MAX + 1 bytes). Returns 0 or -EINVAL with e naming field
 * and the path (at most 64 bytes of it).
 */
#define JOB_ROOT_DIR_MAX 1024		/* bytes of a workdir or from_image_dir */
#define JOB_ROOT_DIR_DEPTH 32		/* its components */
int payload_root_dir_normalise(const char *in, size_t len, char *out,
    bool workspace_ok, const char *field, struct err *e);

/*
 * in (len bytes) as an error message may quote it: at most 64 bytes, then
 * "...", control bytes as '?'. Writes buf and returns it.
 */
const char *path_shown(const char *in, size_t len, char buf[72]);

#endif
