/*
 * cli_esc_test.c - the escaping every sandq verb applies to text it did not
 * write (cli/cli_esc.c): each class of byte a terminal acts on comes out
 * as its escape, printable UTF-8 as it is, and cuts never split a unit.
 * cli_hostile_test.c runs the same bytes through the verbs themselves.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/cli_esc.h"

/*
 * True if s holds nothing a terminal acts on: no C0 control (not even a
 * newline: these are single fields), no DEL, no byte outside valid UTF-8
 * (a raw 0x9b among them), no C1 control written in UTF-8.
 */
static bool
terminal_safe(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; p[i];) {
		size_t more = p[i] < 0x80 ? 0 : p[i] >= 0xc2 && p[i] <= 0xdf ? 1 :
		    p[i] >= 0xe0 && p[i] <= 0xef ? 2 : p[i] >= 0xf0 && p[i] <= 0xf4 ? 3 : 9;

		if (p[i] < 0x20 || p[i] == 0x7f || more == 9)
			return false;
		for (size_t k = 1; k <= more; k++)
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
		if (p[i] == 0xc2 && p[i + 1] <= 0x9f)
			return false;
		i += more + 1;
	}
	return true;
}

Test(cli_esc, each_class_of_control_gets_its_escape)
{
	static const struct {
		const char *in;
		size_t len;
		const char *want;
	} tab[] = {
		{ "plain text", 10, "plain text" },
		{ "\x1b[2J", 4, "\\x1b[2J" },				/* CSI */
		{ "\x1b]0;title\x07", 10, "\\x1b]0;title\\x07" },	/* OSC */
		{ "a\nb\tc\rd", 7, "a\\nb\\tc\\rd" },
		{ "\x7f", 1, "\\x7f" },					/* DEL */
		{ "\x00x", 2, "\\x00x" },				/* NUL inside */
		{ "\xc2\x9b" "2J", 4, "\\u009b2J" },			/* C1 in UTF-8 */
		{ "\xc2\x80\xc2\x9f", 4, "\\u0080\\u009f" },
		{ "\x9b" "2J", 3, "\\x9b2J" },				/* raw C1 */
		{ "\xc0\xaf", 2, "\\xc0\\xaf" },			/* overlong */
		{ "\xed\xa0\x80", 3, "\\xed\\xa0\\x80" },		/* surrogate */
		{ "\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80" },	/* past U+10FFFF */
		{ "\xe2\x82", 2, "\\xe2\\x82" },			/* cut short */
		{ "\xe2\x80\xae" "evil", 7, "\\u202eevil" },		/* RLO */
		{ "back\\slash", 10, "back\\\\slash" },
		{ "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 17,
		    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80" },
		{ "\xc2\xa0nbsp", 6, "\xc2\xa0nbsp" },			/* U+00A0 is printable */
	};

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		const char *got = cli_escn(tab[i].in, tab[i].len);

		cr_expect_str_eq(got, tab[i].want, "case %zu", i);
		cr_expect(terminal_safe(got), "case %zu: %s", i, got);
		cr_expect_eq(cli_esc_is_plain(tab[i].in, tab[i].len),
		    strcmp(tab[i].in, tab[i].want) == 0 && strlen(tab[i].in) == tab[i].len,
		    "case %zu", i);
	}
}

Test(cli_esc, every_byte_alone_comes_out_terminal_safe)
{
	for (int b = 0; b < 256; b++) {
		char in = (char)b;
		const char *got = cli_escn(&in, 1);

		cr_expect(terminal_safe(got), "byte 0x%02x: %s", b, got);
		if (b >= 0x20 && b < 0x7f && b != '\\')
			cr_expect_eq(strlen(got), 1, "byte 0x%02x", b);
	}
	/* Every two-byte sequence too: C1 in UTF-8 lives there. */
	for (int a = 0x80; a < 256; a++)
		for (int b = 0; b < 256; b++) {
			char in[2] = { (char)a, (char)b };

			cr_assert(terminal_safe(cli_escn(in, 2)), "0x%02x 0x%02x", a, b);
		}
}

Test(cli_esc, cuts_fall_between_units_and_say_so)
{
	char out[64];

	/* Fits: unchanged and nothing marked. */
	cr_expect_eq(cli_esc_buf(out, sizeof(out), "abcdef", 6, 6), 6);
	cr_expect_str_eq(out, "abcdef");
	/* Cut: "..." within the width. */
	cr_expect_eq(cli_esc_buf(out, sizeof(out), "abcdefgh", 8, 6), 3);
	cr_expect_str_eq(out, "abc...");
	/* Never half an escape: "\x1b" is four bytes or none. */
	cli_esc_buf(out, sizeof(out), "ab\x1b" "cdef", 7, 8);
	cr_expect_str_eq(out, "ab...");
	/* Never half a character. */
	cli_esc_buf(out, sizeof(out), "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5", 9, 8);
	cr_expect_str_eq(out, "\xe6\x97\xa5...");
	cr_expect_str_eq(cli_esc_cut("0123456789", 7), "0123...");
	cr_expect_str_eq(cli_esc_cut(NULL, 7), "");
	/* The buffer bounds too. */
	cli_esc_buf(out, 8, "0123456789", 10, 0);
	cr_expect_str_eq(out, "0123...");
}

Test(cli_esc, slots_rotate_so_one_printf_can_take_several)
{
	const char *a = cli_esc("a\x1b"), *b = cli_esc("b\x07");

	cr_expect_str_eq(a, "a\\x1b");
	cr_expect_str_eq(b, "b\\x07");
	cr_expect_neq(a, b);
}

Test(cli_esc, long_input_is_written_whole_or_cut_visibly)
{
	size_t n = 3 * CLI_ESC_IN_MAX;
	char *in = malloc(n), *got = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_not_null(in);
	for (size_t i = 0; i < n; i += 2) {
		in[i] = '\xc2';
		in[i + 1] = '\x9b';
	}
	/* cli_esc(): bounded, marked. */
	cr_expect(strlen(cli_escn(in, n)) < CLI_ESC_OUT_MAX);
	cr_expect_str_eq(cli_escn(in, n) + strlen(cli_escn(in, n)) - 3, "...");
	/* cli_esc_write(): everything, never a character split across its slices. */
	f = open_memstream(&got, &len);
	cr_assert_not_null(f);
	cr_assert_eq(cli_esc_write(f, in, n), 0);
	fclose(f);
	cr_expect_eq(len, n / 2 * 6);
	cr_expect(terminal_safe(got));
	cr_expect_null(strstr(got, "\\xc2"), "a character was split");
	free(got);
	free(in);
}

Test(cli_esc, warn_escapes_the_whole_message_on_one_line)
{
	char path[] = "/tmp/cli_esc_test.XXXXXX", buf[256];
	int fd = mkstemp(path), saved = dup(2);
	FILE *f;

	cr_assert(fd >= 0 && saved >= 0);
	dup2(fd, 2);
	cli_warn("bad_snapshot: tool call '%s': %s", "t\x1b[2J\n", "\xc2\x9b" "x");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	f = fdopen(fd, "r");
	cr_assert_not_null(f);
	rewind(f);
	cr_assert_not_null(fgets(buf, sizeof(buf), f));
	cr_expect_str_eq(buf, "sandq: bad_snapshot: tool call 't\\x1b[2J\\n': \\u009bx\n");
	cr_expect_null(fgets(buf, sizeof(buf), f), "more than one line");
	fclose(f);
	unlink(path);
}
