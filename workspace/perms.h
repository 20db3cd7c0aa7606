/*
 * perms.h - path rules: which paths of a sandbox a job may see, read or
 * change.
 *
 * A rule is a pattern and a level (none < view < read < write). Patterns are
 * written in the sandbox's own tree, "/" being its root. A preset supplies a
 * default level and a few rules; a job's own rules go on top of them. The
 * level of a path is that of the most specific rule matching it, or the
 * preset's default when none does. docs/paths.md is the reference: pattern
 * syntax, precedence, each preset as a rule list.
 *
 * Pure code: no I/O, no globals that change. Compiling allocates; checking
 * does not.
 *
 * Lifecycle: perms_compile() (or perms_compile_job()) ->
 * perms_check()/perms_dir_may_show() any number of times, from any thread ->
 * perms_free().
 */
#ifndef SANDQ_WORKSPACE_PERMS_H
#define SANDQ_WORKSPACE_PERMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../proto/path.h"

#define PERMS_PATTERN_MAX 4096		/* bytes of a pattern as written */
#define PERMS_RULES_MAX 256		/* rules a job may give */
#define PERMS_PRESET_DEFAULT "agent-edit" /* preset of a job naming none */

/* enum perm_level (none < view < read < write) is proto/path.h's. */

struct job;

/* A rule as written. The pattern is borrowed, never owned. */
struct perm_rule {
	const char *pattern;		/* e.g. "src", "/a/b", "*.pem" */
	enum perm_level level;		/* level of every path it matches */
};

/* A compiled rule (perms.c). */
struct perm_crule;

/*
 * A compiled rule set. The caller owns the struct (it may live on the
 * stack); perms_compile() fills it and perms_free() releases its members.
 * Fields are read-only outside perms.c.
 */
struct perms {
	struct perm_crule *rules;	/* preset rules, then the job's */
	size_t nrules;			/* entries in rules */
	enum perm_level deflt;		/* level when no rule matches */
	const char *preset;		/* static name of the preset */
};

/*
 * Parses "none", "view", "read" or "write" (exactly, lower case) into *out.
 * Returns 0 or -EINVAL.
 */
int perms_parse_level(const char *s, enum perm_level *out);

/* The name of a level ("none" ...), or "?" for a value out of range. */
const char *perms_level_str(enum perm_level level);

/*
 * Parses "PATTERN=LEVEL" (the CLI's --perm, and the golden table) by
 * splitting at the last '=': the pattern is copied into pat (patsz bytes,
 * NUL-terminated), the level into *level. The pattern is not validated
 * here; perms_compile() does that. Returns 0, or -EINVAL / -ENAMETOOLONG
 * with e naming the rule.
 */
int perms_parse_rule(const char *spec, char *pat, size_t patsz,
    enum perm_level *level, struct err *e);

/*
 * The preset names, in a static NULL-terminated array: agent-edit (the
 * default, first), agent-safe, read-only, full-access, development,
 * view-only.
 */
const char *const *perms_preset_names(void);

/*
 * The one-line description of preset `name` (static storage), or NULL for an
 * unknown name.
 */
const char *perms_preset_description(const char *name);

/*
 * The rules of preset `name` (static storage) into *rules and *n, and its
 * default level into *deflt. Returns 0 or -ENOENT for an unknown name.
 */
int perms_preset_rules(const char *name, const struct perm_rule **rules,
    size_t *n, enum perm_level *deflt);

/*
 * Compiles preset `preset` (NULL or "" means PERMS_PRESET_DEFAULT) with the
 * job's n rules on top: validates and normalises each pattern, and
 * precomputes its specificity. Copies what it keeps; does not take
 * ownership of rules. On failure p is left empty (safe to perms_free()) and
 * e names the preset or the rule (1-based index and pattern). Returns 0,
 * -EINVAL (bad pattern, level or preset), -ENAMETOOLONG (pattern longer
 * than PERMS_PATTERN_MAX) or -E2BIG (more than PERMS_RULES_MAX rules).
 */
int perms_compile(struct perms *p, const struct perm_rule *rules, size_t n,
    const char *preset, struct err *e);

/*
 * Compiles job j's path rules: its perm_preset (NULL means the default) with
 * its perms on top, as perms_compile() does, with the same returns and
 * errors. The one place a job's rules become a rule set: the dispatcher
 * checks them with it, the worker and the sandbox enforce what it gives.
 * Does not take ownership of j.
 */
int perms_compile_job(struct perms *p, const struct job *j, struct err *e);

/*
 * The level of `path`, a normalised absolute path in the sandbox's tree
 * ("/" is the root; no "." or ".." components, which are not interpreted).
 * Empty components are skipped and a missing leading "/" is implied.
 * Allocates nothing.
 */
enum perm_level perms_check(const struct perms *p, const char *path);

/*
 * Calls cb(dir, arg) for each rule of p granting write to a whole folder
 * named literally: a pattern of D, a slash and a double star, with no '*'
 * or '?' in D (AgentFense's output folder rule). dir is D, valid during the
 * call. Stops at, and returns, the first nonzero cb result; else 0. The
 * materialiser makes such a folder when the snapshot lacks it
 * (workspace_materialise_rules()).
 */
int perms_write_dirs(const struct perms *p, int (*cb)(const char *dir, void *arg),
    void *arg);

/*
 * Whether directory `dir` (as for perms_check) or anything below it may be
 * visible (level above none). Conservative: false means nothing at or below
 * dir can be visible, so a materialiser may skip the subtree; true means
 * dir itself is visible or some rule granting more than none could match
 * below it (that rule may still lose to a more specific hiding one).
 */
bool perms_dir_may_show(const struct perms *p, const char *dir);

/*
 * Normalises a sandbox path the way patterns are normalised (relative means
 * from the root, "//" collapsed, "." dropped, ".." and control characters
 * refused, no trailing "/"): out gets at most strlen(in) + 2 bytes. Returns
 * 0, -EINVAL, or -ENAMETOOLONG (input over PERMS_PATTERN_MAX or out too
 * small), with e naming the path.
 */
int perms_normalize_path(const char *in, char *out, size_t outsz,
    struct err *e);

/*
 * The canonical text of compiled rules p: exactly what perms_check() and
 * perms_dir_may_show() decide by, and nothing else. "sandq-perms 1\n",
 * "default LEVEL\n", then "LEVEL PATTERN\n" for each rule in order (the
 * preset's expanded, then the job's, patterns normalised; a pattern holds
 * no control character, so a line is a rule). Equal texts give every path
 * the same level; rule sets written differently but compiling alike
 * ("src/", "/src") give equal texts. A fingerprint of it names "the same
 * rules" (the shell session, sandbox/persist.c). Returns a malloc'd
 * NUL-terminated string, its length without the NUL in *len; the caller
 * frees it.
 */
char *perms_canonical(const struct perms *p, size_t *len);

/*
 * The preset table as compact JSON (perms_json.c, with jansson; linked by
 * sandqd and the CLI, not the worker): {"default_preset": NAME,
 * "presets": [{"name", "description", "default", "rules": [{"pattern",
 * "level"}]}]}, what sandqd publishes as PREFIX:perm_presets. Returns a
 * malloc'd string the caller frees, or NULL when out of memory.
 */
char *perms_presets_json(void);

/* Releases what p owns and empties it. NULL is a no-op. */
void perms_free(struct perms *p);

#endif
