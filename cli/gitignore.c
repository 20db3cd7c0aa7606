/*
 * gitignore.c - the .gitignore matcher of gitignore.h: parses pattern
 * lines into rules and decides whether a path is left out.
 *
 * DESIGN. A rule keeps the directory of its .gitignore (base), its flags
 * and its pattern split into '/' components. Rules are held in the order
 * they were added; since a directory's file is added before its
 * subdirectories', walking the list backwards and stopping at the first
 * rule that applies gives git's precedence (last line of a file wins, a
 * deeper file beats a shallower one). Components are matched with
 * fnmatch(3) (flags 0: no component holds a '/', and git's '*' matches a
 * leading '.'); "**" components are matched by a table over (pattern
 * component, path component) pairs, so a pattern of many "**" costs
 * O(components x depth) calls and never backtracks exponentially.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "gitignore.h"

#define PATH_DEPTH_MAX 512		/* components of a path matched */

struct gi_rule {
	char *base;			/* directory of the .gitignore, "" = root */
	size_t baselen;			/* strlen(base) */
	char *pat;			/* the pattern, components NUL-separated */
	char **segs;			/* nseg pointers into pat */
	size_t nseg;
	bool negate;			/* "!pattern": include again */
	bool dir_only;			/* "pattern/": directories only */
	bool anchored;			/* '/' at the start or in the middle */
};

struct gitignore {
	struct gi_rule *rules;		/* in the order added */
	size_t nrules;
	size_t cap;
};

struct gitignore *
gitignore_new(void)
{
	return xcalloc(1, sizeof(struct gitignore));
}

void
gitignore_free(struct gitignore *g)
{
	if (g == NULL)
		return;
	for (size_t i = 0; i < g->nrules; i++) {
		free(g->rules[i].base);
		free(g->rules[i].pat);
		free(g->rules[i].segs);
	}
	free(g->rules);
	free(g);
}

size_t
gitignore_count(const struct gitignore *g)
{
	return g->nrules;
}

/*** Parsing ***/

/*
 * Cuts trailing spaces that are not escaped: "a\ " keeps its escaped
 * space (the backslash stays for fnmatch to read), "a  " becomes "a".
 */
static size_t
trim_trailing_spaces(const char *s, size_t n)
{
	while (n > 0 && s[n - 1] == ' ') {
		size_t bs = 0;

		/* An odd number of backslashes before the space escapes it. */
		while (bs < n - 1 && s[n - 2 - bs] == '\\')
			bs++;
		if (bs % 2 == 1)
			break;
		n--;
	}
	return n;
}

/*
 * Parses one line (n bytes, no '\n') into a rule appended to g. Lines that
 * carry no rule are skipped. 0 or -E2BIG.
 */
static int
add_line(struct gitignore *g, const char *base, const char *s, size_t n)
{
	struct gi_rule r = { 0 };
	size_t nseg = 1;
	char *p;

	if (n > 0 && s[n - 1] == '\r')
		n--;
	if (n == 0 || s[0] == '#' || n > GITIGNORE_LINE_MAX || memchr(s, '\0', n))
		return 0;
	n = trim_trailing_spaces(s, n);
	if (n > 0 && s[0] == '!') {
		r.negate = true;
		s++;
		n--;
	}
	if (n > 0 && s[n - 1] == '/') {
		r.dir_only = true;
		n--;
	}
	if (n == 0)
		return 0;
	/* A '/' left now is at the start or in the middle: anchored. */
	if (memchr(s, '/', n) != NULL)
		r.anchored = true;
	if (s[0] == '/') {
		s++;
		n--;
		if (n == 0)
			return 0;
	}
	if (g->nrules >= GITIGNORE_RULES_MAX)
		return -E2BIG;

	r.pat = xmemdup0(s, n);
	for (size_t i = 0; i < n; i++)
		if (r.pat[i] == '/')
			nseg++;
	r.segs = xcalloc(nseg, sizeof(char *));
	p = r.pat;
	for (size_t i = 0; i < nseg; i++) {
		char *slash = strchr(p, '/');

		if (slash)
			*slash = '\0';
		/* "a//b" is "a/b", and consecutive "**" are one. */
		if (p[0] != '\0' && !(strcmp(p, "**") == 0 && r.nseg > 0 &&
		    strcmp(r.segs[r.nseg - 1], "**") == 0))
			r.segs[r.nseg++] = p;
		if (slash)
			p = slash + 1;
	}
	if (r.nseg == 0) {
		free(r.pat);
		free(r.segs);
		return 0;
	}
	r.base = xstrdup(base);
	r.baselen = strlen(base);
	if (g->nrules == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 16;
		g->rules = xreallocarray(g->rules, g->cap, sizeof(*g->rules));
	}
	g->rules[g->nrules++] = r;
	return 0;
}

int
gitignore_add(struct gitignore *g, const char *base, const char *text,
    size_t len, struct err *e)
{
	size_t off = 0;

	/* The root's base is "", a nested one's has no leading or trailing '/'. */
	while (*base == '/')
		base++;
	while (off < len) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t n = nl ? (size_t)(nl - (text + off)) : len - off;

		if (add_line(g, base, text + off, n) < 0)
			return err_set(e, -E2BIG, ".gitignore in '/%s': more than %d rules "
			    "in all", base, GITIGNORE_RULES_MAX);
		off += n + 1;
	}
	return 0;
}

/*** Matching ***/

/* fnmatch of one component; both are NUL-terminated, neither has a '/'. */
static bool
seg_match(const char *seg, const char *comp, size_t complen)
{
	char buf[GITIGNORE_LINE_MAX + 1];

	if (complen > GITIGNORE_LINE_MAX)
		return false;
	memcpy(buf, comp, complen);
	buf[complen] = '\0';
	return fnmatch(seg, buf, 0) == 0;
}

/*
 * Matches the components of an anchored pattern against the n components
 * of a path (comps[i] starts at path + off[i], len[i] bytes). dp[i][j]
 * says whether segs i.. match comps j..; filled from the end.
 */
static bool
segs_match(const struct gi_rule *r, const char *path, const size_t *off,
    const size_t *len, size_t n)
{
	size_t w = n + 1;
	uint8_t *dp = xcalloc((r->nseg + 1) * w, 1);
	bool res;

	dp[r->nseg * w + n] = 1;
	for (size_t i = r->nseg; i-- > 0;) {
		bool star = strcmp(r->segs[i], "**") == 0;

		for (size_t j = n + 1; j-- > 0;) {
			uint8_t v;

			if (star && i == r->nseg - 1)
				v = j < n;	/* trailing "**": one or more */
			else if (star)
				v = dp[(i + 1) * w + j] || (j < n && dp[i * w + j + 1]);
			else
				v = j < n && dp[(i + 1) * w + j + 1] &&
				    seg_match(r->segs[i], path + off[j], len[j]);
			dp[i * w + j] = v;
		}
	}
	res = dp[0] != 0;
	free(dp);
	return res;
}

/* Whether rule r matches path (relative to the root). */
static bool
rule_match(const struct gi_rule *r, const char *path, bool is_dir)
{
	const char *rel = path;
	size_t off[PATH_DEPTH_MAX], len[PATH_DEPTH_MAX];
	size_t n = 0;

	if (r->dir_only && !is_dir)
		return false;
	if (r->baselen > 0) {
		if (strncmp(path, r->base, r->baselen) != 0 || path[r->baselen] != '/')
			return false;
		rel = path + r->baselen + 1;
	}
	if (rel[0] == '\0')
		return false;
	if (!r->anchored) {
		const char *last = strrchr(rel, '/');

		last = last ? last + 1 : rel;
		return seg_match(r->segs[0], last, strlen(last));
	}
	for (const char *p = rel; *p;) {
		size_t l = strcspn(p, "/");

		if (l > 0) {
			if (n == PATH_DEPTH_MAX)
				return false;
			off[n] = (size_t)(p - rel);
			len[n++] = l;
		}
		p += l;
		if (*p == '/')
			p++;
	}
	return segs_match(r, rel, off, len, n);
}

bool
gitignore_match(const struct gitignore *g, const char *path, bool is_dir)
{
	for (size_t i = g->nrules; i-- > 0;)
		if (rule_match(&g->rules[i], path, is_dir))
			return !g->rules[i].negate;
	return false;
}

bool
gitignore_is_ignored(const struct gitignore *g, const char *path, bool is_dir)
{
	char buf[GITIGNORE_LINE_MAX * 2];
	size_t n = strlen(path);

	if (g->nrules == 0)
		return false;
	if (n >= sizeof(buf))
		return gitignore_match(g, path, is_dir);
	memcpy(buf, path, n + 1);
	/* Each parent directory, from the top: an excluded one hides all below. */
	for (size_t i = 1; i < n; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		if (gitignore_match(g, buf, true))
			return true;
		buf[i] = '/';
	}
	return gitignore_match(g, path, is_dir);
}
