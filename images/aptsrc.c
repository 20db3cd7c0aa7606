/*
 * aptsrc.c - apt's sources, parsed and written back for one suite (see
 * aptsrc.h).
 *
 * The two forms apt reads (sources.list(5)):
 *
 *   deb [ opt=value ... ] URI SUITE [COMPONENT ...]       one-line, *.list
 *
 *   Types: deb deb-src                                    deb822, *.sources
 *   URIs: http://deb.debian.org/debian
 *   Suites: bookworm bookworm-updates
 *   Components: main
 *   Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
 *
 * A deb822 stanza ends at an empty line; a line starting with '#' is a
 * comment; a field continues on lines starting with a space or a tab (an
 * inline Signed-By key is written that way). Field names are
 * case-insensitive. What the text says is kept as words (URIs, suites,
 * components have no spaces), so the text written back cannot carry
 * anything but the fields it names; a Signed-By key block is copied as
 * read, its continuation lines still starting with a space.
 *
 * Sections: words and lists, one-line, deb822, the suite's text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/xmalloc.h"
#include "aptsrc.h"

/* A byte buffer that grows (the text written back). */
struct buf {
	char *p;
	size_t len, cap;
};

static void
buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = xreallocarray(b->p, b->cap, 1);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

/*** Words and lists ***/

static bool
is_space(char c)
{
	return c == ' ' || c == '\t';
}

/*
 * Appends the words of s[0..n) (split on spaces and tabs) to *list.
 * Returns 0 or -E2BIG past APT_ITEMS_MAX words or APT_ITEM_MAX bytes.
 */
static int
words_add(const char *s, size_t n, char ***list, size_t *count)
{
	size_t i = 0;

	while (i < n) {
		size_t start;

		while (i < n && is_space(s[i]))
			i++;
		start = i;
		while (i < n && !is_space(s[i]))
			i++;
		if (i == start)
			break;
		if (*count >= APT_ITEMS_MAX || i - start > APT_ITEM_MAX)
			return -E2BIG;
		*list = xreallocarray(*list, *count + 1, sizeof(**list));
		(*list)[(*count)++] = xmemdup0(s + start, i - start);
	}
	return 0;
}

static void
words_free(char **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static void
source_free(struct apt_source *s)
{
	free(s->file);
	words_free(s->uris, s->nuris);
	words_free(s->suites, s->nsuites);
	words_free(s->components, s->ncomponents);
	free(s->signed_by);
	memset(s, 0, sizeof(*s));
}

void
apt_sources_free(struct apt_sources *s)
{
	for (size_t i = 0; i < s->n; i++)
		source_free(&s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

/*
 * Adds *src to out if it is whole (a URI and a suite); takes it either
 * way. Returns 0, or -EINVAL / -E2BIG with e.
 */
static int
source_keep(struct apt_sources *out, struct apt_source *src, struct err *e)
{
	if (src->nuris == 0 || src->nsuites == 0) {
		int rc = err_set(e, -EINVAL, "%s:%u: an entry without %s", src->file,
		    src->line, src->nuris == 0 ? "URIs" : "Suites");

		source_free(src);
		return rc;
	}
	if (out->n >= APT_SOURCES_MAX) {
		source_free(src);
		return err_set(e, -E2BIG, "more than %d apt sources", APT_SOURCES_MAX);
	}
	out->v = xreallocarray(out->v, out->n + 1, sizeof(*out->v));
	out->v[out->n++] = *src;
	memset(src, 0, sizeof(*src));
	return 0;
}

/* The next line of text (from *pos), without its newline, into *line and *n. */
static bool
next_line(const char *text, size_t len, size_t *pos, const char **line, size_t *n)
{
	const char *nl;

	if (*pos >= len)
		return false;
	*line = text + *pos;
	nl = memchr(*line, '\n', len - *pos);
	*n = nl != NULL ? (size_t)(nl - *line) : len - *pos;
	*pos += *n + (nl != NULL);
	if (*n > 0 && (*line)[*n - 1] == '\r')
		(*n)--;
	return true;
}

/*** One-line ***/

/* Reads "[ opt=v ... ]" options of one line into src (signed-by, trusted). */
static int
oneline_options(const char *s, size_t n, struct apt_source *src)
{
	size_t i = 0;

	while (i < n) {
		size_t start;

		while (i < n && is_space(s[i]))
			i++;
		start = i;
		while (i < n && !is_space(s[i]))
			i++;
		if (i - start > 10 && strncasecmp(s + start, "signed-by=", 10) == 0) {
			if (i - start - 10 > APT_ITEM_MAX)
				return -E2BIG;
			free(src->signed_by);
			src->signed_by = xmemdup0(s + start + 10, i - start - 10);
		} else if (i - start == 11 && strncasecmp(s + start, "trusted=yes", 11) == 0) {
			src->trusted = true;
		}
	}
	return 0;
}

/* One "deb ..." line (s, n bytes, comment removed) at file:lineno. */
static int
oneline_entry(const char *s, size_t n, const char *file, unsigned lineno,
    struct apt_sources *out, struct err *e)
{
	struct apt_source src = { 0 };
	const char *end = s + n, *close;
	char **words = NULL;
	size_t nwords = 0;
	int rc;

	while (s < end && is_space(*s))
		s++;
	if (end - s < 4 || strncmp(s, "deb", 3) != 0 || !is_space(s[3]))
		return 0;	/* deb-src, or nothing */
	s += 4;
	while (s < end && is_space(*s))
		s++;
	src.file = xstrdup(file);
	src.line = lineno;
	if (s < end && *s == '[') {
		if ((close = memchr(s, ']', (size_t)(end - s))) == NULL) {
			source_free(&src);
			return err_set(e, -EINVAL, "%s:%u: '[' without ']'", file, lineno);
		}
		if (oneline_options(s + 1, (size_t)(close - s - 1), &src) < 0) {
			source_free(&src);
			return err_set(e, -E2BIG, "%s:%u: an option too long", file, lineno);
		}
		s = close + 1;
	}
	if (words_add(s, (size_t)(end - s), &words, &nwords) < 0) {
		words_free(words, nwords);
		source_free(&src);
		return err_set(e, -E2BIG, "%s:%u: too many or too long words", file, lineno);
	}
	if (nwords < 2) {
		words_free(words, nwords);
		source_free(&src);
		return err_set(e, -EINVAL, "%s:%u: expected 'deb URI SUITE [COMPONENT...]'",
		    file, lineno);
	}
	src.uris = xcalloc(1, sizeof(char *));
	src.uris[0] = words[0];
	src.nuris = 1;
	src.suites = xcalloc(1, sizeof(char *));
	src.suites[0] = words[1];
	src.nsuites = 1;
	src.ncomponents = nwords - 2;
	src.components = src.ncomponents ? xcalloc(src.ncomponents, sizeof(char *)) : NULL;
	for (size_t i = 2; i < nwords; i++)
		src.components[i - 2] = words[i];
	free(words);
	rc = source_keep(out, &src, e);
	return rc;
}

static int
parse_oneline(const char *text, size_t len, const char *file, struct apt_sources *out,
    struct err *e)
{
	const char *line, *hash;
	size_t pos = 0, n;
	unsigned lineno = 0;
	int rc;

	while (next_line(text, len, &pos, &line, &n)) {
		lineno++;
		if ((hash = memchr(line, '#', n)) != NULL)
			n = (size_t)(hash - line);
		if ((rc = oneline_entry(line, n, file, lineno, out, e)) < 0)
			return rc;
	}
	return 0;
}

/*** deb822 ***/

/* A stanza being read. */
struct stanza {
	struct apt_source src;
	bool any;			/* a field was read */
	bool deb;			/* Types holds deb */
	bool disabled;			/* Enabled: no */
	char field[32];			/* the field continuation lines belong to */
};

/* Ends the stanza st: kept if it is a binary, enabled one. */
static int
stanza_end(struct stanza *st, struct apt_sources *out, struct err *e)
{
	int rc = 0;

	if (st->any && st->deb && !st->disabled)
		rc = source_keep(out, &st->src, e);
	source_free(&st->src);
	memset(st, 0, sizeof(*st));
	return rc;
}

/* One "Name: value" field (value v, n bytes) of st. */
static int
stanza_field(struct stanza *st, const char *name, const char *v, size_t n)
{
	char **types = NULL;
	size_t ntypes = 0;
	int rc = 0;

	if (strcasecmp(name, "Types") == 0) {
		rc = words_add(v, n, &types, &ntypes);
		for (size_t i = 0; i < ntypes; i++)
			st->deb |= strcmp(types[i], "deb") == 0;
		words_free(types, ntypes);
	} else if (strcasecmp(name, "URIs") == 0) {
		rc = words_add(v, n, &st->src.uris, &st->src.nuris);
	} else if (strcasecmp(name, "Suites") == 0) {
		rc = words_add(v, n, &st->src.suites, &st->src.nsuites);
	} else if (strcasecmp(name, "Components") == 0) {
		rc = words_add(v, n, &st->src.components, &st->src.ncomponents);
	} else if (strcasecmp(name, "Signed-By") == 0) {
		if (n > APT_SIGNED_BY_MAX)
			return -E2BIG;
		free(st->src.signed_by);
		st->src.signed_by = xmemdup0(v, n);
	} else if (strcasecmp(name, "Enabled") == 0) {
		st->disabled = n == 2 && strncasecmp(v, "no", 2) == 0;
	} else if (strcasecmp(name, "Trusted") == 0) {
		st->src.trusted = n == 3 && strncasecmp(v, "yes", 3) == 0;
	}
	return rc;
}

/* A continuation line (s, n bytes, its leading blank included) of a field. */
static int
stanza_more(struct stanza *st, const char *s, size_t n)
{
	size_t have;

	if (strcasecmp(st->field, "Signed-By") == 0) {
		have = st->src.signed_by ? strlen(st->src.signed_by) : 0;
		if (have + n + 1 > APT_SIGNED_BY_MAX)
			return -E2BIG;
		st->src.signed_by = xreallocarray(st->src.signed_by, have + n + 2, 1);
		st->src.signed_by[have] = '\n';
		memcpy(st->src.signed_by + have + 1, s, n);
		st->src.signed_by[have + 1 + n] = '\0';
		return 0;
	}
	/* Word lists may go on over several lines. */
	return stanza_field(st, st->field, s, n);
}

static int
parse_deb822(const char *text, size_t len, const char *file, struct apt_sources *out,
    struct err *e)
{
	struct stanza st = { 0 };
	const char *line;
	size_t pos = 0, n;
	unsigned lineno = 0;
	int rc = 0;

	while (next_line(text, len, &pos, &line, &n)) {
		const char *colon, *v;
		size_t name_len;

		lineno++;
		if (n > 0 && line[0] == '#')
			continue;
		if (n == 0 || (n == 1 && line[0] == ' ')) {
			if ((rc = stanza_end(&st, out, e)) < 0)
				return rc;
			continue;
		}
		if (is_space(line[0])) {
			if (st.field[0] == '\0') {
				rc = err_set(e, -EINVAL, "%s:%u: a continuation line "
				    "without a field", file, lineno);
				goto out;
			}
			if (stanza_more(&st, line, n) < 0) {
				rc = err_set(e, -E2BIG, "%s:%u: field %s too long",
				    file, lineno, st.field);
				goto out;
			}
			continue;
		}
		colon = memchr(line, ':', n);
		name_len = colon != NULL ? (size_t)(colon - line) : 0;
		if (colon == NULL || name_len == 0 || name_len >= sizeof(st.field) ||
		    strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789-_.") != name_len) {
			rc = err_set(e, -EINVAL, "%s:%u: expected 'Field: value'", file,
			    lineno);
			goto out;
		}
		if (!st.any) {
			st.src.file = xstrdup(file);
			st.src.line = lineno;
			st.any = true;
		}
		memcpy(st.field, line, name_len);
		st.field[name_len] = '\0';
		v = colon + 1;
		while (v < line + n && is_space(*v))
			v++;
		if (stanza_field(&st, st.field, v, (size_t)(line + n - v)) < 0) {
			rc = err_set(e, -E2BIG, "%s:%u: field %s too long or too many "
			    "words", file, lineno, st.field);
			goto out;
		}
	}
	rc = stanza_end(&st, out, e);
out:
	source_free(&st.src);
	return rc;
}

int
apt_sources_parse(const char *text, size_t len, const char *file, bool deb822,
    struct apt_sources *out, struct err *e)
{
	if (memchr(text, '\0', len) != NULL)
		return err_set(e, -EINVAL, "%s: a NUL byte", file);
	return deb822 ? parse_deb822(text, len, file, out, e) :
	    parse_oneline(text, len, file, out, e);
}

/*** The suite's text ***/

bool
apt_suite_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > APT_SUITE_MAX || s[0] == '.' || s[0] == '-')
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._-") == n;
}

/* Whether suite t is suite s or one of its update suites. */
static bool
suite_for(const char *t, const char *s)
{
	size_t n = strlen(s);

	if (strncmp(t, s, n) != 0)
		return false;
	return t[n] == '\0' || strcmp(t + n, "-updates") == 0 ||
	    strcmp(t + n, "-security") == 0 || strcmp(t + n, "/updates") == 0;
}

/* Appends "Name: w1 w2 ...\n". */
static void
field_words(struct buf *b, const char *name, char *const *w, size_t n)
{
	buf_str(b, name);
	buf_str(b, ":");
	for (size_t i = 0; i < n; i++) {
		buf_str(b, " ");
		buf_str(b, w[i]);
	}
	buf_str(b, "\n");
}

/* The suites of all, for a message: "a, b, c" (cut to fit size). */
static void
suites_list(const struct apt_sources *all, char *out, size_t size)
{
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < all->n; i++)
		for (size_t k = 0; k < all->v[i].nsuites; k++) {
			const char *t = all->v[i].suites[k];
			int w;

			if (strlen(t) > 64)
				continue;
			w = snprintf(out + o, size - o, "%s%s", o ? ", " : "", t);
			if (w < 0 || (size_t)w >= size - o) {
				out[o] = '\0';
				return;
			}
			o += (size_t)w;
		}
}

int
apt_sources_for_suite(const struct apt_sources *all, const char *suite,
    char **text, struct err *e)
{
	struct buf b = { 0 };
	bool found = false;
	char have[160];

	*text = NULL;
	for (size_t i = 0; i < all->n; i++) {
		const struct apt_source *s = &all->v[i];
		char **mine = NULL;
		size_t nmine = 0;

		for (size_t k = 0; k < s->nsuites; k++)
			if (suite_for(s->suites[k], suite)) {
				found |= strcmp(s->suites[k], suite) == 0;
				mine = xreallocarray(mine, nmine + 1, sizeof(*mine));
				mine[nmine++] = s->suites[k];
			}
		if (nmine == 0)
			continue;
		if (b.len > 0)
			buf_str(&b, "\n");
		buf_str(&b, "Types: deb\n");
		field_words(&b, "URIs", s->uris, s->nuris);
		field_words(&b, "Suites", mine, nmine);
		if (s->ncomponents > 0)
			field_words(&b, "Components", s->components, s->ncomponents);
		if (s->signed_by != NULL) {
			buf_str(&b, "Signed-By: ");
			buf_str(&b, s->signed_by);
			buf_str(&b, "\n");
		}
		if (s->trusted)
			buf_str(&b, "Trusted: yes\n");
		free(mine);
	}
	if (!found) {
		free(b.p);
		suites_list(all, have, sizeof(have));
		return err_set(e, -ENOENT, "the machine's apt sources have no suite '%s' "
		    "(they have: %s)", suite, have[0] ? have : "none");
	}
	*text = b.p;
	return 0;
}
