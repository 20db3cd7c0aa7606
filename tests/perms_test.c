/*
 * perms_test.c - unit tests for the path-rule matcher in workspace/perms.c.
 *
 * The bulk of the cases live in tests/data/perms_golden.tsv (its header
 * describes the format): golden_table checks every line and reports each
 * failure by line number, so a new case is one line of data. The tests
 * presets_golden does the same for tests/data/presets_golden.tsv, one
 * column per preset. The tests
 * below them pin what a table cannot: the exact error messages for bad
 * patterns and levels, the bounds, perms_dir_may_show(), and that a hostile
 * pattern cannot make a check slow.
 *
 * Run from the repository root (the table's path is relative to it). The
 * suite's timeout bounds the hostile-pattern test; a per-test .timeout
 * would make Criterion 2.4's runner leak 48 bytes under LSan.
 * Everything allocated is freed: the suite runs under ASan with LSan.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../workspace/perms.h"

#define GOLDEN "tests/data/perms_golden.tsv"
#define PRESETS_GOLDEN "tests/data/presets_golden.tsv"
#define GOLDEN_RULES_MAX 16

TestSuite(perms, .timeout = 20);

/*** Golden table ***/

/* One parsed line of the table; strings point into the line. */
struct golden {
	const char *preset;			/* NULL for "-" */
	struct perm_rule rules[GOLDEN_RULES_MAX]; /* the job's rules */
	char pats[GOLDEN_RULES_MAX][512];	/* their patterns */
	size_t nrules;				/* entries in rules */
	const char *path;			/* path to check */
	enum perm_level want;			/* expected level */
};

/* Splits rules "p=l;p=l" (or "-") into g->rules. 0 or -1. */
static int
golden_rules(struct golden *g, char *s, struct err *e)
{
	char *tok, *save = NULL;

	g->nrules = 0;
	if (strcmp(s, "-") == 0)
		return 0;
	for (tok = strtok_r(s, ";", &save); tok != NULL;
	    tok = strtok_r(NULL, ";", &save)) {
		if (g->nrules == GOLDEN_RULES_MAX)
			return -1;
		if (perms_parse_rule(tok, g->pats[g->nrules],
		    sizeof(g->pats[0]), &g->rules[g->nrules].level, e) != 0)
			return -1;
		g->rules[g->nrules].pattern = g->pats[g->nrules];
		g->nrules++;
	}
	return 0;
}

/* Parses a line (modified in place) into g. 0, 1 to skip, or -1. */
static int
golden_parse(char *line, struct golden *g, struct err *e)
{
	char *f[4], *save = NULL;
	size_t i;

	line[strcspn(line, "\r\n")] = '\0';
	if (line[0] == '#' || line[0] == '\0')
		return 1;
	for (i = 0; i < 4; i++)
		if ((f[i] = strtok_r(i == 0 ? line : NULL, "\t", &save)) == NULL)
			return -1;
	if (strtok_r(NULL, "\t", &save) != NULL)
		return -1;
	g->preset = strcmp(f[0], "-") == 0 ? NULL : f[0];
	g->path = f[2];
	if (perms_parse_level(f[3], &g->want) != 0)
		return -1;
	return golden_rules(g, f[1], e);
}

Test(perms, golden_table)
{
	static struct golden g;
	char *line = NULL;
	size_t cap = 0, lineno = 0, cases = 0;
	FILE *fp;

	fp = fopen(GOLDEN, "r");
	cr_assert_not_null(fp, "cannot open %s (run from the repo root)", GOLDEN);
	while (getline(&line, &cap, fp) != -1) {
		struct perms p;
		struct err e = { 0, "" };
		enum perm_level got;
		int rc;

		lineno++;
		if ((rc = golden_parse(line, &g, &e)) == 1)
			continue;
		cr_expect_eq(rc, 0, "%s:%zu: malformed line %s", GOLDEN, lineno,
		    e.msg);
		if (rc != 0)
			continue;
		rc = perms_compile(&p, g.rules, g.nrules, g.preset, &e);
		cr_expect_eq(rc, 0, "%s:%zu: compile: %s", GOLDEN, lineno, e.msg);
		if (rc != 0)
			continue;
		got = perms_check(&p, g.path);
		cr_expect_eq(got, g.want, "%s:%zu: %s is %s, expected %s", GOLDEN,
		    lineno, g.path, perms_level_str(got), perms_level_str(g.want));
		perms_free(&p);
		cases++;
	}
	free(line);
	fclose(fp);
	cr_expect_geq(cases, 60, "only %zu cases in %s", cases, GOLDEN);
}

/*** Levels and presets ***/

Test(perms, parses_the_four_levels_and_nothing_else)
{
	static const char *const bad[] = { "", "Write", "WRITE", "rw", "none ",
	    "admin", "writes", NULL };
	enum perm_level l;
	size_t i;

	cr_expect_eq(perms_parse_level("none", &l), 0);
	cr_expect_eq(l, PERM_NONE);
	cr_expect_eq(perms_parse_level("view", &l), 0);
	cr_expect_eq(l, PERM_VIEW);
	cr_expect_eq(perms_parse_level("read", &l), 0);
	cr_expect_eq(l, PERM_READ);
	cr_expect_eq(perms_parse_level("write", &l), 0);
	cr_expect_eq(l, PERM_WRITE);
	for (i = 0; bad[i] != NULL; i++)
		cr_expect_eq(perms_parse_level(bad[i], &l), -EINVAL, "'%s'", bad[i]);
	cr_expect_eq(perms_parse_level(NULL, &l), -EINVAL);
	cr_expect(PERM_NONE < PERM_VIEW && PERM_VIEW < PERM_READ &&
	    PERM_READ < PERM_WRITE);
	cr_expect_str_eq(perms_level_str(PERM_VIEW), "view");
	cr_expect_str_eq(perms_level_str((enum perm_level)9), "?");
}

Test(perms, rule_spec_rejects_unknown_level_with_its_name)
{
	struct err e = { 0, "" };
	enum perm_level l;
	char pat[64];

	cr_expect_eq(perms_parse_rule("src/**=admin", pat, sizeof(pat), &l, &e),
	    -EINVAL);
	cr_expect_str_eq(e.msg, "path rule 'src/**=admin': unknown level "
	    "'admin' (expected none, view, read or write)");
	cr_expect_eq(perms_parse_rule("src/**", pat, sizeof(pat), &l, &e),
	    -EINVAL);
	cr_expect_str_eq(e.msg, "path rule 'src/**': expected PATTERN=LEVEL");
	cr_expect_eq(perms_parse_rule("a=b=read", pat, sizeof(pat), &l, &e), 0);
	cr_expect_str_eq(pat, "a=b");
	cr_expect_eq(l, PERM_READ);
	cr_expect_eq(perms_parse_rule("abcdefgh=read", pat, 8, &l, &e),
	    -ENAMETOOLONG);
	cr_expect_str_eq(e.msg, "path rule 'abcdefgh=read': pattern longer "
	    "than 7 bytes");
}

/*
 * Each preset's level for a fixed list of paths (presets_golden.tsv), and
 * the header naming exactly the presets, in perms_preset_names()' order.
 */
Test(perms, presets_golden)
{
	const char *const *names = perms_preset_names();
	struct perms p[16];
	char line[1024], *f[17], *save = NULL;
	size_t np = 0, nf, lineno = 0, cells = 0;
	FILE *fp;

	cr_assert_not_null(fp = fopen(PRESETS_GOLDEN, "r"), "%s", PRESETS_GOLDEN);
	while (names[np] != NULL) {
		cr_assert_lt(np, 16);
		cr_assert_eq(perms_compile(&p[np], NULL, 0, names[np], NULL), 0);
		np++;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		nf = 0;
		for (char *t = strtok_r(line, "\t", &save); t != NULL && nf < 17;
		    t = strtok_r(NULL, "\t", &save))
			f[nf++] = t;
		cr_assert_eq(nf, np + 1, "line %zu: %zu fields, want %zu", lineno,
		    nf, np + 1);
		if (strcmp(f[0], "path") == 0) {
			for (size_t i = 0; i < np; i++)
				cr_assert_str_eq(f[i + 1], names[i],
				    "header column %zu", i + 1);
			continue;
		}
		for (size_t i = 0; i < np; i++) {
			enum perm_level want;

			cr_assert_eq(perms_parse_level(f[i + 1], &want), 0,
			    "line %zu", lineno);
			cr_expect_eq(perms_check(&p[i], f[0]), want,
			    "line %zu: %s under %s is %s, want %s", lineno, f[0],
			    names[i], perms_level_str(perms_check(&p[i], f[0])),
			    f[i + 1]);
			cells++;
		}
	}
	fclose(fp);
	cr_expect_gt(cells, np * 30);
	for (size_t i = 0; i < np; i++)
		perms_free(&p[i]);
}

Test(perms, lists_the_presets)
{
	static const char *const want[] = { "agent-edit", "agent-safe",
	    "read-only", "full-access", "development", "view-only", NULL };
	const char *const *names = perms_preset_names();
	const struct perm_rule *rules;
	enum perm_level deflt;
	struct perms p;
	size_t i, n;

	for (i = 0; want[i] != NULL; i++) {
		cr_assert_not_null(names[i]);
		cr_expect_str_eq(names[i], want[i]);
		cr_expect_eq(perms_preset_rules(names[i], &rules, &n, &deflt), 0);
		cr_expect_not_null(perms_preset_description(names[i]));
		cr_expect_eq(perms_compile(&p, NULL, 0, names[i], NULL), 0);
		cr_expect_str_eq(p.preset, want[i]);
		cr_expect_eq(p.nrules, n);
		cr_expect_eq(p.deflt, deflt);
		perms_free(&p);
	}
	cr_expect_null(names[i]);
	cr_expect_eq(perms_preset_rules("nope", &rules, &n, &deflt), -ENOENT);
	cr_expect_eq(perms_compile(&p, NULL, 0, NULL, NULL), 0);
	cr_expect_str_eq(p.preset, PERMS_PRESET_DEFAULT);
	cr_expect_str_eq(PERMS_PRESET_DEFAULT, names[0]);
	cr_expect_null(perms_preset_description("nope"));
	perms_free(&p);
}

Test(perms, rejects_unknown_preset)
{
	struct err e = { 0, "" };
	struct perms p;

	cr_expect_eq(perms_compile(&p, NULL, 0, "yolo", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "unknown path preset 'yolo' (expected "
	    "agent-edit, agent-safe, read-only, full-access, development or "
	    "view-only)");
	cr_expect_eq(p.nrules, 0);
	perms_free(&p);
}

/*** Bad patterns ***/

/* Compiles n rules on full-access; expects code and message. */
static void
expect_bad(const struct perm_rule *r, size_t n, int code, const char *msg)
{
	struct err e = { 0, "" };
	struct perms p;

	cr_expect_eq(perms_compile(&p, r, n, "full-access", &e), code,
	    "for %s", msg);
	cr_expect_eq(e.code, code);
	cr_expect_str_eq(e.msg, msg);
	cr_expect_null(p.rules);
	cr_expect_eq(p.nrules, 0);
	perms_free(&p);
}

Test(perms, rejects_dotdot_components)
{
	struct perm_rule r[] = { { "src/**", PERM_READ }, { "a/../b", PERM_READ } };
	struct perm_rule up = { "..", PERM_READ }, tail = { "/a/..", PERM_NONE };

	expect_bad(r, 2, -EINVAL, "path rule 2 'a/../b': '..' is not allowed");
	expect_bad(&up, 1, -EINVAL, "path rule 1 '..': '..' is not allowed");
	expect_bad(&tail, 1, -EINVAL, "path rule 1 '/a/..': '..' is not allowed");
}

Test(perms, accepts_dots_that_are_not_dotdot)
{
	struct perm_rule r[] = { { "/a/.../b", PERM_NONE }, { "..x", PERM_NONE } };
	struct perms p;

	cr_assert_eq(perms_compile(&p, r, 2, "full-access", NULL), 0);
	cr_expect_eq(perms_check(&p, "/a/.../b"), PERM_NONE);
	cr_expect_eq(perms_check(&p, "/..x"), PERM_NONE);
	perms_free(&p);
}

Test(perms, rejects_empty_patterns)
{
	struct perm_rule empty = { "", PERM_READ }, null = { NULL, PERM_READ };

	expect_bad(&empty, 1, -EINVAL, "path rule 1 '': empty pattern");
	expect_bad(&null, 1, -EINVAL, "path rule 1 '': empty pattern");
}

Test(perms, rejects_control_characters_and_escapes_them)
{
	struct perm_rule soh = { "a\001b", PERM_READ };
	struct perm_rule nl = { "x/\n", PERM_READ };
	struct perm_rule del = { "it's\177", PERM_READ };

	expect_bad(&soh, 1, -EINVAL,
	    "path rule 1 'a\\x01b': control character 0x01 at byte 1");
	expect_bad(&nl, 1, -EINVAL,
	    "path rule 1 'x/\\x0a': control character 0x0a at byte 2");
	expect_bad(&del, 1, -EINVAL,
	    "path rule 1 'it\\x27s\\x7f': control character 0x7f at byte 4");
}

Test(perms, bounds_pattern_length)
{
	static char longest[PERMS_PATTERN_MAX + 1], over[PERMS_PATTERN_MAX + 2];
	struct perm_rule ok = { longest, PERM_READ }, bad = { over, PERM_READ };
	struct perms p;

	memset(longest, 'a', PERMS_PATTERN_MAX);
	memset(over, 'a', PERMS_PATTERN_MAX + 1);
	cr_expect_eq(perms_compile(&p, &ok, 1, "full-access", NULL), 0);
	perms_free(&p);
	expect_bad(&bad, 1, -ENAMETOOLONG, "path rule 1 '"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...': "
	    "longer than 4096 bytes");
}

Test(perms, bounds_rule_count)
{
	static struct perm_rule r[PERMS_RULES_MAX + 1];
	struct perms p;
	size_t i;

	for (i = 0; i < PERMS_RULES_MAX + 1; i++) {
		r[i].pattern = "/x/*";
		r[i].level = PERM_READ;
	}
	cr_expect_eq(perms_compile(&p, r, PERMS_RULES_MAX, "agent-safe", NULL), 0);
	cr_expect_eq(perms_check(&p, "/x/y"), PERM_READ);
	perms_free(&p);
	expect_bad(r, PERMS_RULES_MAX + 1, -E2BIG,
	    "too many path rules: 257 (at most 256)");
}

Test(perms, rejects_partial_double_star)
{
	struct perm_rule a = { "src/**.c", PERM_READ }, b = { "a**", PERM_READ };
	struct perm_rule c = { "/***/x", PERM_READ };

	expect_bad(&a, 1, -EINVAL,
	    "path rule 1 'src/**.c': '**' must be a whole path component");
	expect_bad(&b, 1, -EINVAL,
	    "path rule 1 'a**': '**' must be a whole path component");
	expect_bad(&c, 1, -EINVAL,
	    "path rule 1 '/***/x': '**' must be a whole path component");
}

Test(perms, rejects_level_out_of_range)
{
	struct perm_rule r = { "x", (enum perm_level)9 };

	expect_bad(&r, 1, -EINVAL, "path rule 1 'x': level 9 out of range");
}

/*** Paths ***/

Test(perms, normalizes_paths_like_patterns)
{
	static const char *const cases[][2] = {
		{ "/", "/" }, { ".", "/" }, { "a", "/a" }, { "//a//b/", "/a/b" },
		{ "./a/./b/.", "/a/b" }, { "/données", "/données" },
	};
	struct err e = { 0, "" };
	char out[64];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_expect_eq(perms_normalize_path(cases[i][0], out, sizeof(out),
		    &e), 0, "%s", cases[i][0]);
		cr_expect_str_eq(out, cases[i][1]);
	}
	cr_expect_eq(perms_normalize_path("a/../../etc", out, sizeof(out), &e),
	    -EINVAL);
	cr_expect_str_eq(e.msg, "path 'a/../../etc': '..' is not allowed");
	cr_expect_eq(perms_normalize_path("", out, sizeof(out), &e), -EINVAL);
	cr_expect_str_eq(e.msg, "path '': empty path");
	cr_expect_eq(perms_normalize_path("abc", out, 4, &e), -ENAMETOOLONG);
	cr_expect_eq(perms_normalize_path("src/**.c", out, sizeof(out), &e), 0,
	    "'**' is only special in patterns");
}

Test(perms, check_tolerates_unnormalised_slashes)
{
	struct perm_rule r = { "/a/b", PERM_NONE };
	struct perms p;

	cr_assert_eq(perms_compile(&p, &r, 1, "full-access", NULL), 0);
	cr_expect_eq(perms_check(&p, "a/b"), PERM_NONE);
	cr_expect_eq(perms_check(&p, "//a//b/"), PERM_NONE);
	cr_expect_eq(perms_check(&p, "/a/b/c"), PERM_NONE);
	cr_expect_eq(perms_check(&p, ""), PERM_WRITE);
	perms_free(&p);
}

/*** Hidden subtrees ***/

Test(perms, dir_may_show_skips_only_subtrees_nothing_can_show_in)
{
	struct perms p;

	cr_assert_eq(perms_compile(&p, NULL, 0, "agent-edit", NULL), 0);
	cr_expect(perms_dir_may_show(&p, "/"));
	cr_expect(perms_dir_may_show(&p, "/workspace"));
	cr_expect(perms_dir_may_show(&p, "/workspace/.git"));
	cr_expect_not(perms_dir_may_show(&p, "/secrets"));
	cr_expect_not(perms_dir_may_show(&p, "/a/b/secrets/c"));
	cr_expect_not(perms_dir_may_show(&p, "/home/agent/.ssh"));
	perms_free(&p);
}

Test(perms, dir_may_show_finds_a_visible_path_under_a_hidden_one)
{
	struct perm_rule r[] = { { "/", PERM_NONE }, { "/a", PERM_NONE },
	    { "/a/b/c", PERM_READ }, { "/tmp", PERM_WRITE } };
	struct perms p;

	cr_assert_eq(perms_compile(&p, r, 4, "full-access", NULL), 0);
	cr_expect_eq(perms_check(&p, "/a/b"), PERM_NONE);
	cr_expect(perms_dir_may_show(&p, "/"));
	cr_expect(perms_dir_may_show(&p, "/a"));
	cr_expect(perms_dir_may_show(&p, "/a/b"));
	cr_expect(perms_dir_may_show(&p, "/a/b/c/d"));
	cr_expect_not(perms_dir_may_show(&p, "/a/x"));
	cr_expect_not(perms_dir_may_show(&p, "/etc"));
	cr_expect(perms_dir_may_show(&p, "/tmp"));
	perms_free(&p);
}

Test(perms, dir_may_show_is_conservative_with_globs)
{
	struct perm_rule r[] = { { "**/hide/**", PERM_NONE },
	    { "**/public/**", PERM_READ }, { "**/p/**", PERM_READ },
	    { "/b/*.txt", PERM_READ }, { "/b", PERM_NONE } };
	struct perms p;

	cr_assert_eq(perms_compile(&p, r, 5, "full-access", NULL), 0);
	/* "public" has more literal bytes than "hide", so it shows through. */
	cr_expect_eq(perms_check(&p, "/x/hide/y/public"), PERM_READ);
	cr_expect(perms_dir_may_show(&p, "/x/hide"));
	cr_expect(perms_dir_may_show(&p, "/x/hide/y"));
	/* "p" has fewer: it loses to "hide" everywhere below. */
	cr_expect_eq(perms_check(&p, "/x/hide/p/f"), PERM_NONE);
	perms_free(&p);

	cr_assert_eq(perms_compile(&p, &r[2], 3, "full-access", NULL), 0);
	/* "/b" is a literal directory rule: no glob can beat it below. */
	cr_expect_eq(perms_check(&p, "/b/p/a.txt"), PERM_NONE);
	cr_expect_not(perms_dir_may_show(&p, "/b"));
	cr_expect_not(perms_dir_may_show(&p, "/b/sub"));
	perms_free(&p);

	cr_assert_eq(perms_compile(&p, r, 1, "full-access", NULL), 0);
	cr_expect_not(perms_dir_may_show(&p, "/x/hide"));
	perms_free(&p);
	r[1] = r[2];
	cr_assert_eq(perms_compile(&p, r, 2, "full-access", NULL), 0);
	cr_expect_not(perms_dir_may_show(&p, "/x/hide"), "'p' cannot win");
	perms_free(&p);
}

/*** Canonical text ***/

/* The canonical text of preset with n rules; the caller frees it. */
static char *
canonical(const char *preset, const struct perm_rule *r, size_t n)
{
	struct perms p;
	size_t len = 0;
	char *text;

	cr_assert_eq(perms_compile(&p, r, n, preset, NULL), 0);
	text = perms_canonical(&p, &len);
	cr_expect_eq(strlen(text), len);
	perms_free(&p);
	return text;
}

Test(perms, canonical_text_is_what_the_matcher_enforces)
{
	const struct perm_rule a[] = { { "/secret/**", PERM_NONE }, { "src", PERM_READ } };
	const struct perm_rule b[] = { { "secret//**/", PERM_NONE }, { "/./src", PERM_READ } };
	const struct perm_rule swapped[] = { a[1], a[0] };
	const struct perm_rule other[] = { { "/secret/**", PERM_VIEW }, a[1] };
	char *ta = canonical("full-access", a, 2), *t;

	cr_expect_str_eq(ta, "sandq-perms 1\ndefault write\nnone /secret/**\nread /src\n");
	/* Written otherwise, compiled alike: the same text. */
	t = canonical("full-access", b, 2);
	cr_expect_str_eq(t, ta);
	free(t);
	/* Order decides ties, a level or the default decides everything. */
	t = canonical("full-access", swapped, 2);
	cr_expect_str_neq(t, ta);
	free(t);
	t = canonical("full-access", other, 2);
	cr_expect_str_neq(t, ta);
	free(t);
	t = canonical("read-only", a, 2);
	cr_expect_str_neq(t, ta);
	free(t);
	/* A preset is its rules expanded: the default names agent-edit. */
	t = canonical(NULL, NULL, 0);
	cr_expect_str_eq(t, "sandq-perms 1\ndefault write\nread /**/.git/**\n"
	    "none /**/.env*\nnone /**/secrets/**\nnone /**/*.key\n"
	    "none /**/*.pem\nnone /**/.ssh/**\nnone /**/.aws/**\n");
	free(t);
	free(ta);
}

/*** Cost ***/

Test(perms, many_double_stars_stay_fast)
{
	static char pat[PERMS_PATTERN_MAX + 1], path[PERMS_PATTERN_MAX + 1];
	struct perm_rule r = { pat, PERM_NONE };
	struct perms p;
	size_t o = 0, i;

	/* "a" then "**", many times, then "b": exponential for naive recursion. */
	while (o + 6 < 2000) {
		memcpy(pat + o, "/a/**", 5);
		o += 5;
	}
	memcpy(pat + o, "/b", 3);
	for (i = 0, o = 0; o + 2 < sizeof(path) - 1; i++, o += 2)
		memcpy(path + o, "/a", 2);
	path[o] = '\0';
	cr_assert_eq(perms_compile(&p, &r, 1, "full-access", NULL), 0);
	for (i = 0; i < 10; i++)
		cr_expect_eq(perms_check(&p, path), PERM_WRITE);
	perms_free(&p);
}
