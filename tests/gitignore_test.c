/*
 * gitignore_test.c - unit tests for the .gitignore matcher in
 * cli/gitignore.c (the subset cli/gitignore.h lists): comments and
 * escapes, negation, dir-only patterns, anchoring, "**", and the
 * precedence of nested .gitignore files over their parents'.
 * Pure code; everything allocated is freed (the suite runs under ASan).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "../cli/gitignore.h"

TestSuite(gitignore, .timeout = 20);

/* A rule set from one root .gitignore. */
static struct gitignore *
root(const char *text)
{
	struct gitignore *g = gitignore_new();
	struct err e = { 0 };

	cr_assert_eq(gitignore_add(g, "", text, strlen(text), &e), 0, "%s", e.msg);
	return g;
}

static void
add(struct gitignore *g, const char *base, const char *text)
{
	struct err e = { 0 };

	cr_assert_eq(gitignore_add(g, base, text, strlen(text), &e), 0, "%s", e.msg);
}

#define IGN(g, p, d) cr_expect(gitignore_is_ignored(g, p, d), "%s should be ignored", p)
#define KEEP(g, p, d) cr_expect(!gitignore_is_ignored(g, p, d), "%s should be kept", p)

Test(gitignore, empty_ignores_nothing)
{
	struct gitignore *g = root("");

	KEEP(g, "a", false);
	KEEP(g, "a/b/c", true);
	cr_expect_eq(gitignore_count(g), 0);
	gitignore_free(g);
}

Test(gitignore, comments_blank_lines_and_escapes)
{
	struct gitignore *g = root("# a comment\n\n   \n\\#hash\n\\!bang\n#notrule\n");

	cr_expect_eq(gitignore_count(g), 2);
	IGN(g, "#hash", false);
	IGN(g, "!bang", false);
	KEEP(g, "notrule", false);
	KEEP(g, "# a comment", false);
	gitignore_free(g);
}

Test(gitignore, trailing_spaces_and_crlf)
{
	struct gitignore *g = root("a.txt   \r\nb\\ \nc.log\r\n");

	IGN(g, "a.txt", false);
	IGN(g, "b ", false);
	KEEP(g, "b", false);
	IGN(g, "c.log", false);
	gitignore_free(g);
}

Test(gitignore, star_and_question)
{
	struct gitignore *g = root("*.o\nfile?.c\n[ab]*.tmp\n");

	IGN(g, "x.o", false);
	IGN(g, "deep/er/x.o", false);
	IGN(g, ".o", false);		/* '*' matches a leading dot */
	IGN(g, "file1.c", false);
	KEEP(g, "file12.c", false);
	IGN(g, "a1.tmp", false);
	KEEP(g, "c1.tmp", false);
	gitignore_free(g);
}

Test(gitignore, star_never_crosses_slash)
{
	struct gitignore *g = root("doc/*.txt\n");

	IGN(g, "doc/a.txt", false);
	KEEP(g, "doc/sub/a.txt", false);
	KEEP(g, "x/doc/a.txt", false);
	gitignore_free(g);
}

Test(gitignore, negation_last_match_wins)
{
	struct gitignore *g = root("*.log\n!keep.log\n");

	IGN(g, "a.log", false);
	KEEP(g, "keep.log", false);
	KEEP(g, "sub/keep.log", false);
	gitignore_free(g);

	g = root("!keep.log\n*.log\n");
	IGN(g, "keep.log", false);
	gitignore_free(g);
}

Test(gitignore, negation_cannot_reinclude_under_excluded_dir)
{
	struct gitignore *g = root("build/\n!build/keep.txt\n");

	IGN(g, "build", true);
	IGN(g, "build/keep.txt", false);
	gitignore_free(g);

	/* Excluding the contents, not the directory, lets a file back in. */
	g = root("build/*\n!build/keep.txt\n");
	KEEP(g, "build", true);
	IGN(g, "build/other", false);
	KEEP(g, "build/keep.txt", false);
	gitignore_free(g);
}

Test(gitignore, dir_only)
{
	struct gitignore *g = root("tmp/\n");

	IGN(g, "tmp", true);
	KEEP(g, "tmp", false);
	IGN(g, "a/tmp", true);
	IGN(g, "a/tmp/x", false);	/* under an excluded directory */
	KEEP(g, "a/tmpx", true);
	gitignore_free(g);
}

Test(gitignore, leading_slash_anchors)
{
	struct gitignore *g = root("/top.txt\n/out\n");

	IGN(g, "top.txt", false);
	KEEP(g, "sub/top.txt", false);
	IGN(g, "out", true);
	IGN(g, "out/x", false);
	KEEP(g, "a/out", true);
	gitignore_free(g);
}

Test(gitignore, middle_slash_anchors)
{
	struct gitignore *g = root("a/b\nsrc/gen/\n");

	IGN(g, "a/b", false);
	KEEP(g, "x/a/b", false);
	IGN(g, "src/gen", true);
	KEEP(g, "src/gen", false);
	KEEP(g, "lib/src/gen", true);
	gitignore_free(g);
}

Test(gitignore, leading_double_star)
{
	struct gitignore *g = root("**/foo\n**/bar/baz\n");

	IGN(g, "foo", false);
	IGN(g, "a/foo", true);
	IGN(g, "a/b/c/foo", false);
	IGN(g, "bar/baz", false);
	IGN(g, "x/y/bar/baz", false);
	KEEP(g, "x/bar/y/baz", false);
	gitignore_free(g);
}

Test(gitignore, trailing_double_star)
{
	struct gitignore *g = root("abc/**\n");

	KEEP(g, "abc", true);		/* the contents, not the directory */
	IGN(g, "abc/x", false);
	IGN(g, "abc/x/y/z", false);
	KEEP(g, "q/abc/x", false);	/* anchored */
	gitignore_free(g);
}

Test(gitignore, middle_double_star)
{
	struct gitignore *g = root("a/**/b\nx/**/**/y\n");

	IGN(g, "a/b", false);
	IGN(g, "a/x/b", false);
	IGN(g, "a/x/y/z/b", false);
	KEEP(g, "a/x/bb", false);
	KEEP(g, "q/a/b", false);
	IGN(g, "x/y", false);
	IGN(g, "x/1/2/3/y", false);
	gitignore_free(g);
}

Test(gitignore, double_star_elsewhere_is_a_star)
{
	struct gitignore *g = root("foo**bar\n");

	IGN(g, "fooXbar", false);
	IGN(g, "d/foobar", false);
	KEEP(g, "foo/bar", false);
	gitignore_free(g);
}

Test(gitignore, secrets_anywhere)
{
	struct gitignore *g = root("**/secrets/**\n");

	IGN(g, "secrets/x", false);
	IGN(g, "a/b/secrets/c/d", false);
	KEEP(g, "secrets", true);
	gitignore_free(g);
}

Test(gitignore, nested_file_applies_below_its_directory)
{
	struct gitignore *g = root("*.log\n");

	add(g, "sub", "*.tmp\n/local\n");
	IGN(g, "sub/x.tmp", false);
	KEEP(g, "x.tmp", false);	/* the nested file's rules stay below it */
	KEEP(g, "other/x.tmp", false);
	IGN(g, "sub/local", false);
	KEEP(g, "sub/deeper/local", false); /* anchored at sub/ */
	KEEP(g, "local", false);
	IGN(g, "sub/a.log", false);	/* the root's rules still apply */
	gitignore_free(g);
}

Test(gitignore, nested_file_beats_parent)
{
	struct gitignore *g = root("*.log\n");

	add(g, "keep", "!*.log\n");
	IGN(g, "a.log", false);
	KEEP(g, "keep/a.log", false);
	KEEP(g, "keep/deep/a.log", false);
	gitignore_free(g);

	/* ... and the other way round. */
	g = root("!important.txt\n");
	add(g, "sub", "*.txt\n");
	IGN(g, "sub/important.txt", false);
	KEEP(g, "important.txt", false);
	gitignore_free(g);
}

Test(gitignore, nested_base_is_a_whole_component)
{
	struct gitignore *g = root("");

	add(g, "sub", "*\n");
	IGN(g, "sub/x", false);
	KEEP(g, "subway/x", false);
	KEEP(g, "sub", true);		/* the file's own directory is not matched */
	gitignore_free(g);
}

Test(gitignore, negated_dir_only)
{
	struct gitignore *g = root("*\n!*/\n!*.c\n");

	KEEP(g, "src", true);
	KEEP(g, "src/a.c", false);
	IGN(g, "src/a.h", false);
	gitignore_free(g);
}

Test(gitignore, bad_lines_are_skipped)
{
	char text[GITIGNORE_LINE_MAX + 64];
	struct gitignore *g;

	memset(text, 'a', GITIGNORE_LINE_MAX + 1);
	memcpy(text + GITIGNORE_LINE_MAX + 1, "\nok\n", 5);
	g = root(text);
	cr_expect_eq(gitignore_count(g), 1);
	IGN(g, "ok", false);
	gitignore_free(g);

	g = gitignore_new();
	{
		struct err e = { 0 };
		static const char nul[] = "a\0b\nc\n!\n/\n";

		cr_expect_eq(gitignore_add(g, "", nul, sizeof(nul) - 1, &e), 0);
	}
	cr_expect_eq(gitignore_count(g), 1);
	IGN(g, "c", false);
	gitignore_free(g);
}

Test(gitignore, many_double_stars_stay_fast)
{
	char path[2048] = "";
	struct gitignore *g = root("**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/b\n");

	for (int i = 0; i < 300; i++)
		strcat(path, "a/");
	strcat(path, "c");
	KEEP(g, path, false);
	gitignore_free(g);
}
