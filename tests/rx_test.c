/*
 * rx_test.c - unit tests for proto/rx.c (expect regexes on PCRE2) and the
 * regex mode of proto/batchcase.c that uses it.
 *
 * What is pinned: Perl syntax works (\d+), the whole output must match,
 * '.' crosses newlines, an invalid pattern is refused with PCRE2's
 * message and offset, and a catastrophic pattern ends with RX_LIMIT
 * instead of running on (the suite's timeout bounds it; no timing is
 * measured).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/batchcase.h"
#include "../proto/rx.h"

TestSuite(rx, .timeout = 60);

static enum rx_verdict
m(const char *pat, const char *s)
{
	struct rx *r = NULL;
	char why[256];
	enum rx_verdict v;

	cr_assert_eq(rx_compile(pat, strlen(pat), &r, why, sizeof(why)), 0,
	    "%s: %s", pat, why);
	v = rx_match(r, (const uint8_t *)s, strlen(s));
	rx_free(r);
	return v;
}

Test(rx, perl_syntax_and_whole_output)
{
	cr_expect_eq(m("\\d+", "12345"), RX_MATCH);
	cr_expect_eq(m("\\d+", "12a45"), RX_NO_MATCH);
	cr_expect_eq(m("\\d+", "x 12"), RX_NO_MATCH, "anchored at the start");
	cr_expect_eq(m("\\d+", "12 x"), RX_NO_MATCH, "anchored at the end");
	cr_expect_eq(m("a|b", "b"), RX_MATCH, "the whole alternation is anchored");
	cr_expect_eq(m("a|b", "ab"), RX_NO_MATCH);
	cr_expect_eq(m("x.y", "x\ny"), RX_MATCH, "dot matches a newline");
	cr_expect_eq(m("(?i)hello", "HeLLo"), RX_MATCH);
	cr_expect_eq(m("caf.", "caf\xc3\xa9"), RX_MATCH, "one UTF-8 character");
	cr_expect_eq(m(".*", "\xff\xfe"), RX_NO_MATCH, "invalid UTF-8 is not matched by .");
	cr_expect_eq(m("", ""), RX_MATCH);
}

Test(rx, invalid_pattern_names_message_and_offset)
{
	struct rx *r = (struct rx *)1;
	char why[256];

	cr_expect_eq(rx_compile("ab(c", 4, &r, why, sizeof(why)), -EINVAL);
	cr_expect_null(r);
	cr_expect_str_eq(why, "missing closing parenthesis at offset 4");
	cr_expect_eq(rx_compile("a)|(b", 5, &r, why, sizeof(why)), -EINVAL,
	    "unbalanced: refused, not wrapped into another meaning");
	cr_expect_eq(rx_compile("a\0b", 3, &r, why, sizeof(why)), -EINVAL);
	cr_expect_str_eq(why, "a regex cannot hold a NUL character");
}

Test(rx, catastrophic_pattern_hits_the_bound)
{
	static char s[64];
	struct rx *r = NULL;
	char why[256];

	/*
	 * (a+)+b against a's, then "ba": the b is there (so no required-byte
	 * shortcut), the end is not, and the a's split 2^61 ways.
	 */
	memset(s, 'a', sizeof(s) - 3);
	memcpy(s + sizeof(s) - 3, "ba", 2);
	cr_assert_eq(rx_compile("(a+)+b", 6, &r, why, sizeof(why)), 0);
	cr_expect_eq(rx_match(r, (const uint8_t *)s, sizeof(s) - 1), RX_LIMIT);
	rx_free(r);
}

Test(rx, batchcase_regex_mode)
{
	static const char line[] = "{\"op\":\"sh\",\"script\":\"x\","
	    "\"expect\":\"total: \\\\d+\",\"expect_mode\":\"regex\"}";
	static const char bad[] = "{\"op\":\"sh\",\"script\":\"x\","
	    "\"expect\":\"[a-\",\"expect_mode\":\"regex\"}";
	static const char evil[] = "{\"op\":\"sh\",\"script\":\"x\","
	    "\"expect\":\"(a+)+b\",\"expect_mode\":\"regex\"}";
	struct batch_expect ex;
	char why[512], a[80];
	json_t *job;

	cr_assert_eq(batchcase_parse(line, strlen(line), "c1", NULL, &job, &ex,
	    why, sizeof(why)), 0, "%s", why);
	json_decref(job);
	cr_expect(batchcase_expect_match(&ex, (const uint8_t *)"total: 42\n\n", 11),
	    "final newlines are off");
	cr_expect_not(batchcase_expect_match(&ex, (const uint8_t *)"total: x\n", 9));
	batchcase_expect_free(&ex);

	cr_expect_eq(batchcase_parse(bad, strlen(bad), "c2", NULL, &job, &ex,
	    why, sizeof(why)), -1);
	cr_expect_null(job);
	cr_expect_str_eq(why, "field 'expect': not a valid regex (PCRE2): "
	    "missing terminating ] for character class at offset 3");

	cr_assert_eq(batchcase_parse(evil, strlen(evil), "c3", NULL, &job, &ex,
	    why, sizeof(why)), 0, "%s", why);
	json_decref(job);
	memset(a, 'a', sizeof(a));
	a[sizeof(a) - 2] = 'b';
	cr_expect_eq(batchcase_expect_check(&ex, (const uint8_t *)a, sizeof(a)), -1);
	cr_expect_not(batchcase_expect_match(&ex, (const uint8_t *)a, sizeof(a)));
	batchcase_expect_free(&ex);
}
