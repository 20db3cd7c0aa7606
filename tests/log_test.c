/*
 * log_test.c - the log line formats (common/log.c, common/log_json.c):
 * the RFC 3339 time and level of a text line, the journald priority that
 * replaces the time when stderr is the stream JOURNAL_STREAM names (and only
 * then), and log_format = json's one object a line, valid even for a
 * message that is not UTF-8 or is too long for a line.
 *
 * Each test points stderr at a pipe and reads back what one call wrote.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"

static int rd = -1;

/* stderr becomes a pipe's write end; rd its read end. */
static void
capture(void)
{
	int p[2];

	cr_assert(pipe(p) == 0);
	cr_assert(dup2(p[1], STDERR_FILENO) == STDERR_FILENO);
	close(p[1]);
	rd = p[0];
	unsetenv("JOURNAL_STREAM");
	log_setformat("text");
	log_setlevel_num(LOG_LVL_DEBUG);
}

/* What was written since (one write per line, so one read). */
static char *
captured(void)
{
	static char buf[8192];
	ssize_t n = read(rd, buf, sizeof(buf) - 1);

	cr_assert(n > 0);
	buf[n] = '\0';
	return buf;
}

/* JOURNAL_STREAM set to the device:inode of the current stderr. */
static void
stderr_is_journal(void)
{
	struct stat st;
	char v[64];

	cr_assert(fstat(STDERR_FILENO, &st) == 0);
	snprintf(v, sizeof(v), "%ju:%ju", (uintmax_t)st.st_dev, (uintmax_t)st.st_ino);
	setenv("JOURNAL_STREAM", v, 1);
}

static bool
matches(const char *s, const char *re)
{
	regex_t r;
	bool ok;

	cr_assert(regcomp(&r, re, REG_EXTENDED | REG_NOSUB) == 0);
	ok = regexec(&r, s, 0, NULL, 0) == 0;
	regfree(&r);
	return ok;
}

TestSuite(log, .init = capture);

Test(log, text_line_has_rfc3339_utc_time_to_the_millisecond_and_level)
{
	char *line;

	log_procinit("sandqd");
	log_warnx("worker/%d: replaced", 3);
	line = captured();
	cr_expect(matches(line, "^[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:"
	    "[0-6][0-9]\\.[0-9]{3}Z sandqd warn: worker/3: replaced\n$"), "%s", line);
	cr_expect_not(log_to_journal());
}

Test(log, errno_variant_appends_the_error)
{
	char *line;

	log_procinit("sandqd");
	errno = ENOENT;
	log_warn("open %s", "/x");
	line = captured();
	cr_expect(matches(line, "Z sandqd warn: open /x: No such file or directory\n$"),
	    "%s", line);
}

Test(log, journal_stream_gives_the_priority_in_place_of_the_time)
{
	const char *want[] = { "<3>sandqd error: e\n", "<4>sandqd warn: w\n",
	    "<6>sandqd info: i\n", "<7>sandqd debug: d\n" };

	stderr_is_journal();
	log_procinit("sandqd");
	cr_expect(log_to_journal());
	log_errorx("e");
	cr_expect_str_eq(captured(), want[0]);
	log_warnx("w");
	cr_expect_str_eq(captured(), want[1]);
	log_info("i");
	cr_expect_str_eq(captured(), want[2]);
	log_debug("d");
	cr_expect_str_eq(captured(), want[3]);
}

Test(log, journal_stream_of_another_file_keeps_the_time)
{
	/* Inherited from a unit, but stderr was redirected since. */
	setenv("JOURNAL_STREAM", "1:1", 1);
	log_procinit("sandqd");
	cr_expect_not(log_to_journal());
	log_info("hello");
	cr_expect(matches(captured(), "^[0-9]{4}-.*Z sandqd info: hello\n$"));
	setenv("JOURNAL_STREAM", "garbage", 1);
	log_procinit("sandqd");
	cr_expect_not(log_to_journal());
}

Test(log, json_line_is_one_object_with_time_level_process_message)
{
	json_error_t je;
	json_t *o;
	char *line;

	cr_assert(log_setformat("json") == 0);
	cr_expect_str_eq(log_getformat(), "json");
	log_procinit("worker/2");
	log_info("job %s: \"quoted\"\tand tab", "j1");
	line = captured();
	cr_expect_eq(strchr(line, '\n'), line + strlen(line) - 1, "one line: %s", line);
	o = json_loads(line, 0, &je);
	cr_assert_not_null(o, "%s: %s", je.text, line);
	cr_expect_eq(json_object_size(o), 4);
	cr_expect(matches(json_string_value(json_object_get(o, "time")),
	    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"));
	cr_expect_str_eq(json_string_value(json_object_get(o, "level")), "info");
	cr_expect_str_eq(json_string_value(json_object_get(o, "process")), "worker/2");
	cr_expect_str_eq(json_string_value(json_object_get(o, "message")),
	    "job j1: \"quoted\"\tand tab");
	json_decref(o);
}

Test(log, json_in_the_journal_starts_with_the_priority)
{
	json_t *o;
	char *line;

	stderr_is_journal();
	log_setformat("json");
	log_procinit("sandqd");
	log_errorx("bad");
	line = captured();
	cr_assert(strncmp(line, "<3>{", 4) == 0, "%s", line);
	o = json_loads(line + 3, 0, NULL);
	cr_assert_not_null(o);
	cr_expect_str_eq(json_string_value(json_object_get(o, "level")), "error");
	json_decref(o);
}

Test(log, json_message_not_utf8_has_its_bytes_escaped)
{
	json_t *o;

	log_setformat("json");
	log_procinit("sandqd");
	log_info("name %s", "a\xff\xfe" "b");
	o = json_loads(captured(), 0, NULL);
	cr_assert_not_null(o);
	cr_expect_str_eq(json_string_value(json_object_get(o, "message")),
	    "name a\\xff\\xfeb");
	json_decref(o);
}

Test(log, json_line_too_long_is_cut_and_still_one_object)
{
	char big[1000];
	json_t *o;
	char *line;

	/* Control bytes dump as \u0001: six bytes each, past the line's room. */
	memset(big, '\x01', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	log_setformat("json");
	log_procinit("sandqd");
	log_info("%s", big);
	line = captured();
	o = json_loads(line, 0, NULL);
	cr_assert_not_null(o, "%.200s", line);
	cr_expect_gt(strlen(json_string_value(json_object_get(o, "message"))), 100);
	json_decref(o);
}

Test(log, unknown_format_is_refused)
{
	cr_expect_eq(log_setformat("xml"), -EINVAL);
	cr_expect_str_eq(log_getformat(), "text");
}
