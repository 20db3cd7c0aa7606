/*
 * perms.c - the path-rule matcher: presets, compiling rules, and answering
 * "what may a job do with this path".
 *
 * Sections:
 *   - Presets: each a default level and a rule list (docs/paths.md).
 *   - Errors and normalisation: one normaliser for patterns and paths.
 *   - Matching: components, then whole paths with "**".
 *   - Compile, check, free.
 *
 * DESIGN: a rule covers what its pattern matches and everything below it,
 * as in gitignore (a hidden directory with visible contents would be
 * incoherent), so a glob is matched as if it ended in an implicit
 * "**" component.
 * Matching works on components: inside one, '*' and '?' are matched by the
 * classic single-backtrack wildcard loop; across components, "**" is the
 * same loop one level up (every other token matches exactly one component,
 * which is what makes remembering only the last star correct). Both loops
 * are O(n*m) with no recursion, so a hostile pattern such as many "**"
 * cannot make a check exponential, and neither allocates.
 *
 * Precedence is a key compared in order: match class (exact literal path >
 * literal ancestor directory > glob), then within directories the deeper
 * one, within globs more literal bytes and then more components that are
 * not "**"; on a full tie the later rule wins. Job rules come after the
 * preset's, so on a tie the job wins.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "perms.h"

/* A rule after perms_compile(). */
struct perm_crule {
	char *pat;			/* normalised: "/" or "/c1/c2..." */
	enum perm_level level;		/* level of what it matches */
	bool glob;			/* has '*' or '?' */
	uint32_t literal;		/* bytes other than '/', '*', '?' */
	uint32_t fixed;			/* components other than "**" */
};

/* How a rule matched a path; higher beats lower. */
enum match_class {
	MATCH_NO = 0,
	MATCH_GLOB,			/* a glob matched the path or an ancestor */
	MATCH_DIR,			/* a literal pattern names an ancestor */
	MATCH_EXACT,			/* a literal pattern names the path */
};

/*** Presets ***/

/*
 * The presets carry AgentFense's names and mean what its documented presets
 * mean (docs/paths.md "Presets" has the table and where sandq adds to
 * them); agent-edit is sandq's own, the default, what agent-safe meant
 * before issue 20. AgentFense orders rules by explicit priorities; sandq by
 * specificity (docs/paths.md "Precedence"), so where AgentFense lets a
 * high-priority glob beat a more literal one, the rule is repeated under
 * that prefix (the /output glob has six literal bytes and would beat the
 * .env glob's four; the .env glob pinned under /output has ten).
 */

/*
 * Secrets an agent should never see: AgentFense's list (environment files,
 * keys, certificates, a secrets folder; credential files for agent-safe)
 * and sandq's own additions, the ssh and AWS folders. Hidden rather than
 * read-only, since reading is the leak. P is a prefix ("" for anywhere).
 */
#define DEV_SECRETS(P) \
	{ P "**/.env*", PERM_NONE }, \
	{ P "**/secrets/**", PERM_NONE }, \
	{ P "**/*.key", PERM_NONE }, \
	{ P "**/*.pem", PERM_NONE }, \
	{ P "**/.ssh/**", PERM_NONE }, \
	{ P "**/.aws/**", PERM_NONE }
#define AGENT_SECRETS(P) \
	{ P "**/.git/**", PERM_NONE }, \
	DEV_SECRETS(P), \
	{ P "**/credentials*", PERM_NONE }

/*
 * agent-safe: read everything, write only /output and /tmp (in the
 * sandbox's tree: /workspace/output inside a job), hide secrets and .git
 * (AgentFense hides the history; a job that needs it makes .git readable
 * with a rule of its own). The write globs outrank the root-anchored secret
 * globs, so the secrets are pinned again under each writable folder.
 */
static const struct perm_rule agent_safe_rules[] = {
	{ "/output/**", PERM_WRITE },
	{ "/tmp/**", PERM_WRITE },
	AGENT_SECRETS(""),
	AGENT_SECRETS("/output/"),
	AGENT_SECRETS("/tmp/"),
};

/*
 * agent-edit (sandq's default) writes everywhere but keeps .git read-only:
 * hooks, config (core.fsmonitor, core.pager, aliases) and filters there run
 * code on the host of whoever exports the sandbox and runs git in it, and
 * rewriting history is how an agent would hide what it did. The agent can
 * still read the history. The .git rule comes first: it ties with
 * the .ssh and *.pem rules (four literal bytes each), and on a tie the
 * later rule wins, so a key kept under a .git folder, or a repository
 * inside .ssh, stays hidden.
 */
static const struct perm_rule agent_edit_rules[] = {
	{ "**/.git/**", PERM_READ },
	DEV_SECRETS(""),
};

/* development is AgentFense's: write everything, secrets hidden. */
static const struct perm_rule development_rules[] = {
	DEV_SECRETS(""),
};

struct preset {
	const char *name;		/* as a job names it */
	enum perm_level deflt;		/* level when no rule matches */
	const struct perm_rule *rules;	/* static rule list */
	size_t nrules;			/* entries in rules */
	const char *description;	/* one line, for listings */
};

#define RULES(a) a, sizeof(a) / sizeof(a[0])

/* The first is the default (PERMS_PRESET_DEFAULT). */
static const struct preset presets[] = {
	{ "agent-edit", PERM_WRITE, RULES(agent_edit_rules),
	    "sandq's default: write everything but .git (read-only); "
	    "secrets hidden" },
	{ "agent-safe", PERM_READ, RULES(agent_safe_rules),
	    "AgentFense's agent-safe: read everything, write only /output "
	    "and /tmp; secrets and .git hidden" },
	{ "read-only", PERM_READ, NULL, 0, "read everything, write nothing" },
	{ "full-access", PERM_WRITE, NULL, 0,
	    "read and write everything, secrets included" },
	{ "development", PERM_WRITE, RULES(development_rules),
	    "write everything; secrets hidden" },
	{ "view-only", PERM_VIEW, NULL, 0,
	    "list names and sizes; read nothing" },
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

static const char *const preset_names[NPRESETS + 1] = {
	"agent-edit", "agent-safe", "read-only", "full-access", "development",
	"view-only", NULL,
};

const char *const *
perms_preset_names(void)
{
	return preset_names;
}

static const struct preset *
preset_find(const char *name)
{
	size_t i;

	for (i = 0; i < NPRESETS; i++)
		if (strcmp(presets[i].name, name) == 0)
			return &presets[i];
	return NULL;
}

int
perms_preset_rules(const char *name, const struct perm_rule **rules,
    size_t *n, enum perm_level *deflt)
{
	const struct preset *ps;

	if (name == NULL || (ps = preset_find(name)) == NULL)
		return -ENOENT;
	*rules = ps->rules;
	*n = ps->nrules;
	*deflt = ps->deflt;
	return 0;
}

const char *
perms_preset_description(const char *name)
{
	const struct preset *ps;

	if (name == NULL || (ps = preset_find(name)) == NULL)
		return NULL;
	return ps->description;
}

int
perms_parse_level(const char *s, enum perm_level *out)
{
	if (s == NULL)
		return -EINVAL;
	return perm_level_parse(s, strlen(s), out);
}

const char *
perms_level_str(enum perm_level level)
{
	return perm_level_name(level);
}

/*** Errors and normalisation ***/

/*
 * Copies s into buf for an error message: at most 48 bytes, then "...";
 * control characters, quotes and backslashes as \xNN, so a hostile pattern
 * cannot forge a log line. Bytes >= 0x80 (UTF-8) are kept.
 */
static void
quote(const char *s, char *buf, size_t bufsz)
{
	size_t i, o = 0;
	unsigned char c;

	/* cppcheck-suppress arrayIndexOutOfBoundsCond ; s[i] is read only below its NUL */
	for (i = 0; s[i] != '\0' && o + 8 < bufsz; i++) {
		if (i == 48) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\')
			o += (size_t)snprintf(buf + o, bufsz - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
}

static int bad(struct err *e, int code, size_t idx, const char *in,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * Fills e with "path rule IDX 'PATTERN': WHY" (idx >= 1) or "path 'PATH':
 * WHY" (idx 0) and returns code.
 */
static int
bad(struct err *e, int code, size_t idx, const char *in, const char *fmt, ...)
{
	char q[64 * 4 + 8], why[160];
	va_list ap;

	quote(in, q, sizeof(q));
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (idx == 0)
		return err_set(e, code, "path '%s': %s", q, why);
	return err_set(e, code, "path rule %zu '%s': %s", idx, q, why);
}

static bool
is_dstar(const char *s, size_t n)
{
	return n == 2 && s[0] == '*' && s[1] == '*';
}

/*
 * The normaliser behind perms_compile() and perms_normalize_path(): see the
 * contract of the latter. For patterns (pattern true) it also refuses "**"
 * that is not a whole component and collapses repeated "**" components,
 * which match the same paths. idx names the rule in errors (0: a path).
 */
static int
normalize(const char *in, char *out, size_t outsz, bool pattern, size_t idx,
    struct err *e)
{
	size_t len, i, n, o = 0;
	const char *s, *prev = NULL;
	size_t prevn = 0;

	if (in == NULL)
		in = "";
	len = strnlen(in, PERMS_PATTERN_MAX + 1);
	if (len > PERMS_PATTERN_MAX)
		return bad(e, -ENAMETOOLONG, idx, in, "longer than %d bytes",
		    PERMS_PATTERN_MAX);
	if (len == 0)
		return bad(e, -EINVAL, idx, in, "empty %s",
		    pattern ? "pattern" : "path");
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c < 0x20 || c == 0x7f)
			return bad(e, -EINVAL, idx, in,
			    "control character 0x%02x at byte %zu", c, i);
	}
	if (outsz < len + 2)
		return bad(e, -ENAMETOOLONG, idx, in, "no room to normalise");
	for (s = in; *s != '\0'; s += n) {
		while (*s == '/')
			s++;
		n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return bad(e, -EINVAL, idx, in, "'..' is not allowed");
		if (pattern && !is_dstar(s, n) && memmem(s, n, "**", 2) != NULL)
			return bad(e, -EINVAL, idx, in,
			    "'**' must be a whole path component");
		if (pattern && is_dstar(s, n) && prev != NULL &&
		    is_dstar(prev, prevn))
			continue;
		out[o++] = '/';
		memcpy(out + o, s, n);
		o += n;
		prev = s;
		prevn = n;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

int
perms_normalize_path(const char *in, char *out, size_t outsz, struct err *e)
{
	return normalize(in, out, outsz, false, 0, e);
}

int
perms_parse_rule(const char *spec, char *pat, size_t patsz,
    enum perm_level *level, struct err *e)
{
	char q[64 * 4 + 8];
	const char *eq;
	size_t n;

	if (spec == NULL)
		spec = "";
	quote(spec, q, sizeof(q));
	if ((eq = strrchr(spec, '=')) == NULL)
		return err_set(e, -EINVAL,
		    "path rule '%s': expected PATTERN=LEVEL", q);
	if (perms_parse_level(eq + 1, level) != 0) {
		char lq[64 * 4 + 8];

		quote(eq + 1, lq, sizeof(lq));
		return err_set(e, -EINVAL, "path rule '%s': unknown level '%s' "
		    "(expected none, view, read or write)", q, lq);
	}
	n = (size_t)(eq - spec);
	if (n >= patsz)
		return err_set(e, -ENAMETOOLONG,
		    "path rule '%s': pattern longer than %zu bytes", q,
		    patsz - 1);
	memcpy(pat, spec, n);
	pat[n] = '\0';
	return 0;
}

/*** Matching ***/

/* One path component: n bytes at s; n == 0 means the end. */
struct comp {
	const char *s;			/* first byte */
	size_t n;			/* bytes up to the next '/' or NUL */
};

/* Sets c to the first component at or after s, skipping empty ones. */
static void
comp_at(const char *s, struct comp *c)
{
	while (*s == '/')
		s++;
	c->s = s;
	c->n = strcspn(s, "/");
}

static void
comp_next(struct comp *c)
{
	comp_at(c->s + c->n, c);
}

/* Bytes of the UTF-8 character at s (1 for a stray byte), at most n. */
static size_t
utf8_len(const char *s, size_t n)
{
	size_t i = 1;

	while (i < n && i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80)
		i++;
	return i;
}

/*
 * Whether component pattern p (pn bytes) matches name s (sn bytes): '*'
 * any run of characters, '?' exactly one UTF-8 character, anything else
 * itself. Both may start with '.': there is no dotfile exception.
 */
static bool
comp_match(const char *p, size_t pn, const char *s, size_t sn)
{
	size_t pi = 0, si = 0, star_pi = SIZE_MAX, star_si = 0;

	while (si < sn) {
		if (pi < pn && p[pi] == '*') {
			star_pi = ++pi;
			star_si = si;
		} else if (pi < pn && p[pi] == '?') {
			pi++;
			si += utf8_len(s + si, sn - si);
		} else if (pi < pn && p[pi] == s[si]) {
			pi++;
			si++;
		} else if (star_pi != SIZE_MAX) {
			/* Let the last '*' take one more character. */
			star_si += utf8_len(s + star_si, sn - star_si);
			si = star_si;
			pi = star_pi;
		} else {
			return false;
		}
	}
	while (pi < pn && p[pi] == '*')
		pi++;
	return pi == pn;
}

/*
 * Whether pattern pat matches path or one of its ancestors (pat followed by
 * an implicit "**"). With below set, whether it could match dir = path or
 * something under it: running out of path with pattern left is then a yes,
 * since every pattern component matches some name.
 */
static bool
glob_walk(const char *pat, const char *path, bool below)
{
	struct comp p, s, star_p = { NULL, 0 }, star_s = { NULL, 0 };
	bool star = false;

	comp_at(pat, &p);
	comp_at(path, &s);
	for (;;) {
		if (s.n == 0) {
			if (below)
				return true;
			while (p.n != 0 && is_dstar(p.s, p.n))
				comp_next(&p);
			return p.n == 0;
		}
		if (p.n == 0)
			return true;	/* The rest is under a match. */
		if (is_dstar(p.s, p.n)) {
			comp_next(&p);
			star = true;
			star_p = p;
			star_s = s;
		} else if (comp_match(p.s, p.n, s.s, s.n)) {
			comp_next(&p);
			comp_next(&s);
		} else if (star) {
			/* Let the last "**" take one more component. */
			comp_next(&star_s);
			s = star_s;
			p = star_p;
		} else {
			return false;
		}
	}
}

/* How a literal pattern (no wildcards) matches path. */
static enum match_class
literal_walk(const char *pat, const char *path)
{
	struct comp p, s;

	comp_at(pat, &p);
	comp_at(path, &s);
	for (;;) {
		if (p.n == 0)
			return s.n == 0 ? MATCH_EXACT : MATCH_DIR;
		if (s.n != p.n || memcmp(s.s, p.s, p.n) != 0)
			return MATCH_NO;
		comp_next(&p);
		comp_next(&s);
	}
}

static enum match_class
rule_match(const struct perm_crule *r, const char *path)
{
	if (!r->glob)
		return literal_walk(r->pat, path);
	return glob_walk(r->pat, path, false) ? MATCH_GLOB : MATCH_NO;
}

/*
 * Whether rule a (at index ai, matching as ca) takes precedence over rule b
 * (index bi, matching as cb): the precedence key of the file comment, ties
 * going to the later rule.
 */
static bool
beats(const struct perm_crule *a, size_t ai, enum match_class ca,
    const struct perm_crule *b, size_t bi, enum match_class cb)
{
	size_t al, bl;

	if (ca != cb)
		return ca > cb;
	if (ca == MATCH_DIR && (al = strlen(a->pat)) != (bl = strlen(b->pat)))
		return al > bl;
	if (ca == MATCH_GLOB && a->literal != b->literal)
		return a->literal > b->literal;
	if (ca == MATCH_GLOB && a->fixed != b->fixed)
		return a->fixed > b->fixed;
	return ai > bi;
}

/*** Compile, check, free ***/

/* Compiles rule idx (1-based, for errors) into r. */
static int
crule_init(struct perm_crule *r, const struct perm_rule *in, size_t idx,
    struct err *e)
{
	size_t cap, i;
	int rc;

	if ((unsigned)in->level > PERM_WRITE)
		return bad(e, -EINVAL, idx, in->pattern ? in->pattern : "",
		    "level %d out of range", (int)in->level);
	cap = (in->pattern ? strnlen(in->pattern, PERMS_PATTERN_MAX + 1) : 0) + 2;
	r->pat = xmalloc(cap);
	if ((rc = normalize(in->pattern, r->pat, cap, true, idx, e)) != 0) {
		free(r->pat);
		r->pat = NULL;
		return rc;
	}
	r->level = in->level;
	r->glob = strpbrk(r->pat, "*?") != NULL;
	r->literal = 0;
	r->fixed = 0;
	for (i = 0; r->pat[i] != '\0'; i++)
		if (strchr("/*?", r->pat[i]) == NULL)
			r->literal++;
	for (i = 0; r->pat[i] != '\0'; i++)
		if (r->pat[i] == '/' && !is_dstar(r->pat + i + 1,
		    strcspn(r->pat + i + 1, "/")))
			r->fixed++;
	return 0;
}

int
perms_compile(struct perms *p, const struct perm_rule *rules, size_t n,
    const char *preset, struct err *e)
{
	const struct preset *ps;
	char q[64 * 4 + 8];
	size_t i, total;
	int rc;

	memset(p, 0, sizeof(*p));
	if (preset == NULL || preset[0] == '\0')
		preset = PERMS_PRESET_DEFAULT;
	if ((ps = preset_find(preset)) == NULL) {
		quote(preset, q, sizeof(q));
		return err_set(e, -EINVAL, "unknown path preset '%s' (expected "
		    "agent-edit, agent-safe, read-only, full-access, "
		    "development or view-only)", q);
	}
	if (n > PERMS_RULES_MAX)
		return err_set(e, -E2BIG, "too many path rules: %zu (at most %d)",
		    n, PERMS_RULES_MAX);
	if (n > 0 && rules == NULL)
		return err_set(e, -EINVAL, "path rules: NULL list of %zu", n);
	total = ps->nrules + n;
	p->rules = xcalloc(total, sizeof(*p->rules));
	for (i = 0; i < total; i++) {
		/* Preset rules first: later rules win ties, so the job's do. */
		if (i < ps->nrules)
			rc = crule_init(&p->rules[i], &ps->rules[i], i + 1, e);
		else
			rc = crule_init(&p->rules[i], &rules[i - ps->nrules],
			    i - ps->nrules + 1, e);
		if (rc != 0)
			goto out_free;
		p->nrules++;
	}
	p->deflt = ps->deflt;
	p->preset = ps->name;
	return 0;

out_free:
	perms_free(p);
	return rc;
}

/*
 * A job's rules arrive decoded (proto/job.c): each level an enum, each
 * pattern without the /workspace alias. Only the borrowed view
 * perms_compile() takes is built here.
 */
int
perms_compile_job(struct perms *p, const struct job *j, struct err *e)
{
	struct perm_rule *rules;
	int rc;

	rules = xcalloc(j->nperms + 1, sizeof(*rules));
	for (size_t i = 0; i < j->nperms; i++) {
		rules[i].pattern = j->perms[i].pattern;
		rules[i].level = j->perms[i].level;
	}
	rc = perms_compile(p, rules, j->nperms, j->perm_preset, e);
	free(rules);
	return rc;
}

/* The index of the rule deciding path, or SIZE_MAX for the default. */
static size_t
winner(const struct perms *p, const char *path)
{
	enum match_class bc = MATCH_NO, c;
	size_t i, best = SIZE_MAX;

	for (i = 0; i < p->nrules; i++) {
		if ((c = rule_match(&p->rules[i], path)) == MATCH_NO)
			continue;
		if (best == SIZE_MAX ||
		    beats(&p->rules[i], i, c, &p->rules[best], best, bc)) {
			best = i;
			bc = c;
		}
	}
	return best;
}

int
perms_write_dirs(const struct perms *p, int (*cb)(const char *dir, void *arg),
    void *arg)
{
	for (size_t i = 0; i < p->nrules; i++) {
		const struct perm_crule *r = &p->rules[i];
		size_t n = strlen(r->pat);
		char *dir;
		int rc;

		if (r->level != PERM_WRITE || n <= 3 || strcmp(r->pat + n - 3, "/**") != 0 ||
		    memchr(r->pat, '*', n - 3) != NULL || memchr(r->pat, '?', n - 3) != NULL)
			continue;
		dir = xmemdup0(r->pat, n - 3);
		rc = cb(dir, arg);
		free(dir);
		if (rc != 0)
			return rc;
	}
	return 0;
}

enum perm_level
perms_check(const struct perms *p, const char *path)
{
	size_t w = winner(p, path);

	return w != SIZE_MAX ? p->rules[w].level : p->deflt;
}

/*
 * Whether rule v could beat rule r at some path strictly below a directory
 * r decides. Below it, r matches as a directory (literal) or a glob, and v
 * as exact or directory (literal) or a glob, so the outcome is fixed except
 * for a literal v, which is given the benefit of the doubt when deeper.
 */
static bool
may_beat_below(const struct perms *p, size_t vi, size_t ri)
{
	const struct perm_crule *v = &p->rules[vi], *r = &p->rules[ri];

	if (!r->glob && v->glob)
		return false;
	if (!r->glob)
		return beats(v, vi, MATCH_DIR, r, ri, MATCH_DIR) ||
		    strlen(v->pat) > strlen(r->pat);
	if (!v->glob)
		return true;
	return beats(v, vi, MATCH_GLOB, r, ri, MATCH_GLOB);
}

bool
perms_dir_may_show(const struct perms *p, const char *dir)
{
	size_t i, w = winner(p, dir);

	if ((w != SIZE_MAX ? p->rules[w].level : p->deflt) != PERM_NONE)
		return true;
	/*
	 * dir is hidden by rule w, which covers its whole subtree (or by a
	 * default of none). A path below can show only through a rule that
	 * grants more, can match there, and can beat w there.
	 */
	for (i = 0; i < p->nrules; i++) {
		if (p->rules[i].level == PERM_NONE ||
		    !glob_walk(p->rules[i].pat, dir, true))
			continue;
		if (w == SIZE_MAX || may_beat_below(p, i, w))
			return true;
	}
	return false;
}

char *
perms_canonical(const struct perms *p, size_t *len)
{
	size_t n = 0, cap;
	char *buf;

	/* Each line: a level name (at most 5 bytes), a space, the pattern. */
	cap = sizeof("sandq-perms 1\ndefault write\n");
	for (size_t i = 0; i < p->nrules; i++)
		cap += strlen(p->rules[i].pat) + 8;
	buf = xmalloc(cap);
	n += (size_t)snprintf(buf + n, cap - n, "sandq-perms 1\ndefault %s\n",
	    perms_level_str(p->deflt));
	for (size_t i = 0; i < p->nrules; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s %s\n",
		    perms_level_str(p->rules[i].level), p->rules[i].pat);
	*len = n;
	return buf;
}

void
perms_free(struct perms *p)
{
	size_t i;

	if (p == NULL)
		return;
	for (i = 0; i < p->nrules; i++)
		free(p->rules[i].pat);
	free(p->rules);
	memset(p, 0, sizeof(*p));
}
