/*
 * audit_test.c - tests of the audit module (audit/) and of `sandq audit`.
 *
 * Unit part: the model's encodings (JSON and stream fields round trip
 * every field; each decoder refuses a bad value naming the field), times
 * and durations, the database (each filter, the triggers that keep it
 * append-only, retention by age and by size, summaries), the ring and
 * the writer thread (emits never wait on a failing disk, the queue holds
 * its bound and counts the rest, the thread recovers, stop flushes).
 *
 * CLI part: runs the built sandq (harness_build_dir()) against a database
 * made here, and against a private redis-server started by
 * harness_redis_start() (the stream path, paging included). Each test has
 * a fresh folder from mkdtemp(), removed by the fixture.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../audit/audit.h"
#include "harness.h"

static char dir[64];		/* the test's folder, from mkdtemp() */

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void
setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/audit_test.XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void
teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(audit, .init = setup, .fini = teardown, .timeout = 60);

/*** Helpers ***/

static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An event with every field set to something distinctive. */
static void
full_event(struct audit_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->time_ms = 1714566896789;	/* 2024-05-01T12:34:56.789Z */
	strcpy(ev->host, "host-a.example");
	strcpy(ev->tenant, "acme");
	strcpy(ev->job, "j-0123456789abcdef");
	strcpy(ev->sandbox, "proj:main");
	ev->category = AUDIT_CAT_PATH;
	strcpy(ev->action, "refused");
	strcpy(ev->target, "/workspace/.env\nwith newline \"quoted\" \xc3\xa9");
	ev->allowed = false;
	ev->level = AUDIT_LVL_ALERT;
	strcpy(ev->detail, "{\"rule\":\"/workspace/**/.env=none\"}");
}

static void
expect_event_eq(const struct audit_event *a, const struct audit_event *b)
{
	cr_expect_eq(a->time_ms, b->time_ms);
	cr_expect_str_eq(a->host, b->host);
	cr_expect_str_eq(a->tenant, b->tenant);
	cr_expect_str_eq(a->job, b->job);
	cr_expect_str_eq(a->sandbox, b->sandbox);
	cr_expect_eq(a->category, b->category);
	cr_expect_str_eq(a->action, b->action);
	cr_expect_str_eq(a->target, b->target);
	cr_expect_eq(a->allowed, b->allowed);
	cr_expect_eq(a->level, b->level);
	cr_expect_str_eq(a->detail, b->detail);
}

/* An event of tenant t, category c, action a, at time ms. */
static void
mk(struct audit_event *ev, const char *t, const char *job,
    enum audit_category c, const char *a, bool allowed, enum audit_level l,
    int64_t ms)
{
	audit_event_init(ev, c, a, "target", allowed, l);
	ev->time_ms = ms;
	audit_text_set(ev->tenant, sizeof(ev->tenant), t);
	audit_text_set(ev->job, sizeof(ev->job), job);
	strcpy(ev->host, "h1");
}

static void
db_path(char *buf, size_t size)
{
	snprintf(buf, size, "%s/audit.db", dir);
}

/*** The model and its encodings ***/

Test(audit, json_round_trips_every_field)
{
	struct audit_event in, out;
	struct err e = { 0 };
	json_t *o;
	char *text;

	full_event(&in);
	o = audit_event_to_json(&in);
	cr_assert_not_null(o);
	text = json_dumps(o, JSON_COMPACT);
	/* The fields in the model's order, time as RFC 3339 with ms. */
	cr_expect_eq(strncmp(text, "{\"time\":\"2024-05-01T12:34:56.789Z\","
	    "\"host\":\"host-a.example\",\"tenant\":\"acme\",", 68), 0, "%s", text);
	cr_expect_not_null(strstr(text, "\"category\":\"path\",\"action\":\"refused\""));
	cr_expect_not_null(strstr(text, "\"allowed\":false,\"level\":\"alert\",\"detail\":"));
	cr_expect_eq(json_object_size(o), AUDIT_NFIELDS);
	cr_assert_eq(audit_event_from_json(o, &out, &e), 0, "%s", e.msg);
	expect_event_eq(&in, &out);
	free(text);
	json_decref(o);

	/* And through the text, as an export is read back. */
	in.allowed = true;
	in.level = AUDIT_LVL_INFO;
	in.category = AUDIT_CAT_AUDIT;
	in.job[0] = in.sandbox[0] = in.tenant[0] = '\0';
	o = audit_event_to_json(&in);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	cr_assert_not_null(o);
	cr_assert_eq(audit_event_from_json(o, &out, &e), 0, "%s", e.msg);
	expect_event_eq(&in, &out);
	json_decref(o);
	free(text);
}

Test(audit, json_decoding_refuses_a_bad_field_and_names_it)
{
	static const struct {
		const char *key;	/* field changed */
		const char *json;	/* its new value, JSON; NULL deletes it */
		const char *named;	/* expected at the start of the message */
	} cases[] = {
		{ "time", "\"2024-05-01 12:34:56Z\"", "time:" },
		{ "time", "\"2024-02-30T00:00:00.000Z\"", "time:" },
		{ "time", "\"2024-05-01T12:34:56.789+02:00\"", "time:" },
		{ "time", "1714566896789", "time:" },
		{ "host", "\"bad\\u0007host\"", "host:" },
		{ "tenant", "\"a{b}\"", "tenant:" },
		{ "job", "\"j 1\"", "job:" },
		{ "sandbox", "\"../x/y\"", "sandbox:" },
		{ "category", "\"network\"", "category:" },
		{ "action", "\"Refused\"", "action:" },
		{ "action", "\"\"", "action:" },
		{ "target", "\"a\\u0000b\"", "target:" },
		{ "allowed", "\"false\"", "allowed:" },
		{ "level", "\"critical\"", "level:" },
		{ "detail", "42", "detail:" },
		{ "detail", NULL, "detail: missing" },
		{ "extra", "1", "extra: unknown field" },
	};
	struct audit_event ev, out;
	char big[AUDIT_TARGET_MAX + 2];

	full_event(&ev);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *o = audit_event_to_json(&ev);
		struct err e = { 0 };

		if (cases[i].json == NULL) {
			json_object_del(o, cases[i].key);
		} else {
			json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY |
			    JSON_ALLOW_NUL, NULL);

			cr_assert_not_null(v, "%s", cases[i].json);
			json_object_set_new(o, cases[i].key, v);
		}
		cr_expect_eq(audit_event_from_json(o, &out, &e), -EINVAL,
		    "case %zu accepted", i);
		cr_expect_eq(strncmp(e.msg, cases[i].named, strlen(cases[i].named)),
		    0, "case %zu: '%s' does not start with '%s'", i, e.msg,
		    cases[i].named);
		json_decref(o);
	}
	/* One byte past a bound. */
	{
		json_t *o = audit_event_to_json(&ev);
		struct err e = { 0 };

		memset(big, 'x', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		json_object_set_new(o, "target", json_string(big));
		cr_expect_eq(audit_event_from_json(o, &out, &e), -EINVAL);
		cr_expect_not_null(strstr(e.msg, "target: longer than 1023"), "%s", e.msg);
		json_decref(o);
	}
	/* Not an object. */
	{
		json_t *a = json_array();
		struct err e = { 0 };

		cr_expect_eq(audit_event_from_json(a, &out, &e), -EINVAL);
		json_decref(a);
	}
}

Test(audit, to_json_refuses_an_event_outside_the_model)
{
	struct audit_event ev;

	full_event(&ev);
	ev.category = AUDIT_CAT__COUNT;
	cr_expect_null(audit_event_to_json(&ev));
	full_event(&ev);
	ev.time_ms = -1;
	cr_expect_null(audit_event_to_json(&ev));
	full_event(&ev);
	memset(ev.detail, 'x', sizeof(ev.detail));	/* not terminated */
	cr_expect_null(audit_event_to_json(&ev));
}

Test(audit, fields_round_trip_every_field)
{
	struct audit_event in, out;
	struct audit_fields f;
	struct err e = { 0 };

	full_event(&in);
	cr_assert_eq(audit_event_to_fields(&in, &f, &e), 0, "%s", e.msg);
	for (int i = 0; i < AUDIT_NFIELDS; i++)
		cr_expect_str_eq(f.name[i], audit_field_names[i]);
	cr_expect_str_eq(f.value[0], "1714566896789");
	cr_expect_str_eq(f.value[8], "false");
	cr_expect_str_eq(f.value[9], "alert");
	cr_assert_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, f.name, f.name_len,
	    f.value, f.value_len, &e), 0, "%s", e.msg);
	expect_event_eq(&in, &out);
}

Test(audit, fields_decoding_refuses_what_a_tenant_could_write)
{
	struct audit_event in, out;
	struct audit_fields f;
	struct err e = { 0 };
	const char *names[AUDIT_NFIELDS], *values[AUDIT_NFIELDS];
	size_t nl[AUDIT_NFIELDS], vl[AUDIT_NFIELDS];

	full_event(&in);
	cr_assert_eq(audit_event_to_fields(&in, &f, &e), 0);
	/* A NUL inside a value (Redis strings are binary). */
	memcpy(names, f.name, sizeof(names));
	memcpy(values, f.value, sizeof(values));
	memcpy(nl, f.name_len, sizeof(nl));
	memcpy(vl, f.value_len, sizeof(vl));
	values[7] = "a\0b";
	vl[7] = 3;
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, names, nl, values,
	    vl, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "target: contains a NUL byte");
	/* Invalid UTF-8. */
	values[7] = "\xff\xfe";
	vl[7] = 2;
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, names, nl, values,
	    vl, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "target: not valid UTF-8");
	values[7] = f.value[7];
	vl[7] = f.value_len[7];
	/* A field twice (in place of another). */
	names[1] = "time";
	nl[1] = 4;
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, names, nl, values,
	    vl, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "time: given twice");
	/* An unknown field, a missing one, a bad time. */
	names[1] = "hostname";
	nl[1] = 8;
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, names, nl, values,
	    vl, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "hostname: unknown field");
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS - 1, f.name,
	    f.name_len, f.value, f.value_len, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "detail: missing");
	memcpy(names, f.name, sizeof(names));
	memcpy(nl, f.name_len, sizeof(nl));
	values[0] = "-5";
	vl[0] = 2;
	cr_expect_eq(audit_event_from_fields(&out, AUDIT_NFIELDS, names, nl, values,
	    vl, &e), -EINVAL);
	cr_expect_eq(strncmp(e.msg, "time:", 5), 0, "%s", e.msg);
}

Test(audit, times_and_durations_parse_strictly)
{
	char buf[AUDIT_TIME_LEN + 1];
	int64_t ms;

	cr_expect_eq(audit_time_format(0, buf), 0);
	cr_expect_str_eq(buf, "1970-01-01T00:00:00.000Z");
	cr_expect_eq(audit_time_format(AUDIT_TIME_MAX, buf), 0);
	cr_expect_str_eq(buf, "9999-12-31T23:59:59.999Z");
	cr_expect_eq(audit_time_format(AUDIT_TIME_MAX + 1, buf), -ERANGE);
	cr_expect_eq(audit_time_parse("2024-02-29T23:59:59.5Z", &ms), 0);
	cr_expect_eq(ms, 1709251199500);
	cr_expect_eq(audit_time_parse("2024-05-01T12:34:56Z", &ms), 0);
	cr_expect_eq(ms, 1714566896000);
	cr_expect_eq(audit_time_parse("2023-02-29T00:00:00Z", &ms), -EINVAL);
	cr_expect_eq(audit_time_parse("2024-05-01T12:34:56.1234Z", &ms), -EINVAL);
	cr_expect_eq(audit_time_parse("2024-05-01T24:00:00Z", &ms), -EINVAL);
	cr_expect_eq(audit_time_parse("1969-12-31T23:59:59Z", &ms), -EINVAL);
	cr_expect_eq(audit_duration_parse("30s", &ms), 0);
	cr_expect_eq(ms, 30000);
	cr_expect_eq(audit_duration_parse("10m", &ms), 0);
	cr_expect_eq(ms, 600000);
	cr_expect_eq(audit_duration_parse("2h", &ms), 0);
	cr_expect_eq(ms, 7200000);
	cr_expect_eq(audit_duration_parse("7d", &ms), 0);
	cr_expect_eq(ms, 604800000);
	cr_expect_eq(audit_duration_parse("10", &ms), -EINVAL);
	cr_expect_eq(audit_duration_parse("0s", &ms), -EINVAL);
	cr_expect_eq(audit_duration_parse("-1h", &ms), -EINVAL);
	cr_expect_eq(audit_duration_parse("1y", &ms), -EINVAL);
	cr_expect_eq(audit_duration_parse("99999999999999999999d", &ms), -EINVAL);
}

Test(audit, text_set_cuts_at_a_character_boundary)
{
	char small[5];

	/* "aé€" is 1 + 2 + 3 bytes: 4 bytes of room keep "aé". */
	cr_expect(audit_text_set(small, sizeof(small), "a\xc3\xa9\xe2\x82\xac"));
	cr_expect_str_eq(small, "a\xc3\xa9");
	cr_expect_not(audit_text_set(small, sizeof(small), "abcd"));
	cr_expect_str_eq(small, "abcd");
	cr_expect_not(audit_text_set(small, sizeof(small), NULL));
	cr_expect_str_eq(small, "");
}

/*** The database ***/

struct collect {
	struct audit_event ev[64];
	size_t n;
};

static int
collect_cb(const struct audit_event *ev, void *arg)
{
	struct collect *c = arg;

	if (c->n < 64)
		c->ev[c->n] = *ev;
	c->n++;
	return 0;
}

static size_t
count_where(struct audit_db *db, const struct audit_filter *f)
{
	struct collect *c = calloc(1, sizeof(*c));
	struct err e = { 0 };
	size_t n;

	cr_assert_eq(audit_db_query(db, f, collect_cb, c, &e), 0, "%s", e.msg);
	n = c->n;
	free(c);
	return n;
}

/* Eight events across two tenants, every category used at least once. */
static void
fill_db(struct audit_db *db, int64_t base)
{
	struct audit_event *evs = calloc(8, sizeof(*evs));
	struct err e = { 0 };

	mk(&evs[0], "t1", "j1", AUDIT_CAT_JOB, "received", true, AUDIT_LVL_INFO, base + 1);
	mk(&evs[1], "t1", "j1", AUDIT_CAT_JOB, "started", true, AUDIT_LVL_INFO, base + 2);
	mk(&evs[2], "t1", "j1", AUDIT_CAT_SYSCALL, "refused", false, AUDIT_LVL_ALERT,
	    base + 3);
	mk(&evs[3], "t1", "j1", AUDIT_CAT_JOB, "finished", true, AUDIT_LVL_INFO,
	    base + 4);
	mk(&evs[4], "t2", "j2", AUDIT_CAT_QUOTA, "refused", false, AUDIT_LVL_WARNING,
	    base + 5);
	mk(&evs[5], "t2", "j2", AUDIT_CAT_JOB, "rejected", false, AUDIT_LVL_WARNING,
	    base + 6);
	mk(&evs[6], "t2", "", AUDIT_CAT_SANDBOX, "created", true, AUDIT_LVL_NOTICE,
	    base + 7);
	strcpy(evs[6].sandbox, "sb1");
	mk(&evs[7], "t1", "j3", AUDIT_CAT_PATH, "refused", false, AUDIT_LVL_ALERT,
	    base + 8);
	strcpy(evs[7].sandbox, "sb1");
	cr_assert_eq(audit_db_append(db, evs, 8, &e), 0, "%s", e.msg);
	free(evs);
}

Test(audit, db_query_applies_each_filter)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	struct audit_filter f = { 0 };
	struct collect *c = calloc(1, sizeof(*c));
	int64_t base = 1714566896000;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, base);

	cr_assert_eq(audit_db_query(db, &f, collect_cb, c, &e), 0, "%s", e.msg);
	cr_expect_eq(c->n, 8);
	for (size_t i = 1; i < c->n; i++)
		cr_expect_lt(c->ev[i - 1].time_ms, c->ev[i].time_ms, "ordered by time");
	cr_expect_str_eq(c->ev[2].action, "refused");
	cr_expect_eq(c->ev[2].category, AUDIT_CAT_SYSCALL);
	cr_expect_str_eq(c->ev[6].sandbox, "sb1");

	f = (struct audit_filter){ .tenant = "t2" };
	cr_expect_eq(count_where(db, &f), 3);
	f = (struct audit_filter){ .job = "j1" };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .sandbox = "sb1" };
	cr_expect_eq(count_where(db, &f), 2);
	f = (struct audit_filter){ .categories = 1u << AUDIT_CAT_JOB };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .categories = (1u << AUDIT_CAT_SYSCALL) |
	    (1u << AUDIT_CAT_PATH) };
	cr_expect_eq(count_where(db, &f), 2);
	f = (struct audit_filter){ .level_min = AUDIT_LVL_WARNING };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .level_min = AUDIT_LVL_ALERT };
	cr_expect_eq(count_where(db, &f), 2);
	f = (struct audit_filter){ .outcome = AUDIT_DENIED_ONLY };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .outcome = AUDIT_ALLOWED_ONLY };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .since_ms = base + 5 };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .until_ms = base + 5 };
	cr_expect_eq(count_where(db, &f), 4);
	f = (struct audit_filter){ .tenant = "t1", .outcome = AUDIT_DENIED_ONLY,
	    .since_ms = base + 1, .until_ms = base + 8 };
	cr_expect_eq(count_where(db, &f), 1);

	/* The same filter in memory agrees with SQL on every event. */
	f = (struct audit_filter){ .tenant = "t1", .level_min = AUDIT_LVL_NOTICE };
	c->n = 0;
	memset(&f, 0, sizeof(f));
	cr_assert_eq(audit_db_query(db, &f, collect_cb, c, &e), 0);
	{
		struct audit_filter g = { .tenant = "t1", .level_min = AUDIT_LVL_ALERT };
		size_t m = 0;

		for (size_t i = 0; i < c->n; i++)
			m += audit_filter_match(&g, &c->ev[i]);
		cr_expect_eq(m, count_where(db, &g));
	}
	free(c);
	audit_db_close(db);
}

Test(audit, db_refuses_updates_and_deletes_outside_retention)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	sqlite3 *raw = NULL;
	struct audit_filter f = { 0 };
	struct stat st;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, 1714566896000);
	cr_expect_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0600);

	cr_assert_eq(sqlite3_open(path, &raw), SQLITE_OK);
	cr_expect_neq(sqlite3_exec(raw, "UPDATE events SET allowed = 1", NULL, NULL,
	    NULL), SQLITE_OK);
	cr_expect_not_null(strstr(sqlite3_errmsg(raw), "append-only"), "%s",
	    sqlite3_errmsg(raw));
	cr_expect_neq(sqlite3_exec(raw, "DELETE FROM events WHERE tenant = 't2'",
	    NULL, NULL, NULL), SQLITE_OK);
	cr_expect_not_null(strstr(sqlite3_errmsg(raw), "only by retention"), "%s",
	    sqlite3_errmsg(raw));
	sqlite3_close(raw);
	cr_expect_eq(count_where(db, &f), 8, "nothing changed");
	audit_db_close(db);

	/* A read-only handle cannot append. */
	cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
	{
		struct audit_event ev;

		mk(&ev, "t1", "", AUDIT_CAT_JOB, "received", true, AUDIT_LVL_INFO, 1);
		cr_expect_eq(audit_db_append(db, &ev, 1, &e), -EROFS);
	}
	audit_db_close(db);
}

Test(audit, db_append_is_all_or_nothing)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	struct audit_event evs[3];
	struct audit_filter f = { 0 };

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	for (int i = 0; i < 3; i++)
		mk(&evs[i], "t1", "", AUDIT_CAT_JOB, "received", true, AUDIT_LVL_INFO,
		    1000 + i);
	strcpy(evs[2].tenant, "bad tenant");
	cr_expect_eq(audit_db_append(db, evs, 3, &e), -EINVAL);
	cr_expect_not_null(strstr(e.msg, "event 2: tenant:"), "%s", e.msg);
	cr_expect_eq(count_where(db, &f), 0);
	audit_db_close(db);
	/* A file that is not an audit database. */
	cr_expect_eq(audit_db_open_readonly("/etc/hostname", &db, &e) < 0, 1);
}

Test(audit, db_retention_by_age_deletes_only_the_old)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	struct audit_event *evs = calloc(150, sizeof(*evs));
	struct audit_filter f = { 0 };
	int64_t now = wall_ms();
	uint64_t deleted = 0;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	for (int i = 0; i < 150; i++)
		mk(&evs[i], "t1", "", AUDIT_CAT_JOB, "finished", true, AUDIT_LVL_INFO,
		    i < 100 ? now - 10 * 86400000LL + i : now - 3600000 + i);
	cr_assert_eq(audit_db_append(db, evs, 150, &e), 0, "%s", e.msg);
	cr_assert_eq(audit_db_retain(db, 7 * 86400000LL, 0, &deleted, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(deleted, 100);
	cr_expect_eq(count_where(db, &f), 50);
	f.since_ms = now - 3600000;
	cr_expect_eq(count_where(db, &f), 50, "the recent ones are the ones kept");
	/* Nothing more to do: a second run deletes nothing. */
	cr_assert_eq(audit_db_retain(db, 7 * 86400000LL, 0, &deleted, &e), 0);
	cr_expect_eq(deleted, 0);
	free(evs);
	audit_db_close(db);
}

Test(audit, db_retention_by_size_keeps_the_newest_under_the_bound)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	struct audit_event *evs = calloc(500, sizeof(*evs));
	struct audit_filter f = { 0 };
	struct collect *c = calloc(1, sizeof(*c));
	uint64_t size = 0, deleted = 0, max = 1024 * 1024;
	size_t left;
	int64_t base = wall_ms() - 60000;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	for (int b = 0; b < 8; b++) {
		for (int i = 0; i < 500; i++) {
			mk(&evs[i], "t1", "", AUDIT_CAT_SYSCALL, "refused", false,
			    AUDIT_LVL_ALERT, base + b * 500 + i);
			memset(evs[i].detail, 'a' + (i % 26), 900);
		}
		cr_assert_eq(audit_db_append(db, evs, 500, &e), 0, "%s", e.msg);
	}
	cr_assert_eq(audit_db_size(db, &size, &e), 0);
	cr_expect_gt(size, 3 * max, "4000 rows of ~1 KiB: %llu", (unsigned long long)size);
	cr_assert_eq(audit_db_retain(db, 0, max, &deleted, &e), 0, "%s", e.msg);
	cr_assert_eq(audit_db_size(db, &size, &e), 0);
	cr_expect_leq(size, max, "%llu bytes in use", (unsigned long long)size);
	left = count_where(db, &f);
	cr_expect_gt(left, 0);
	cr_expect_eq(left + deleted, 4000);
	/* The newest survived, and the survivors are a contiguous tail. */
	f.since_ms = base + 4000 - (int64_t)left;
	cr_expect_eq(count_where(db, &f), left);
	{
		struct stat st;

		cr_expect_eq(stat(path, &st), 0);
		cr_expect_lt((uint64_t)st.st_size, 2 * max,
		    "freed pages went back to the file system: %lld bytes",
		    (long long)st.st_size);
	}
	free(c);
	free(evs);
	audit_db_close(db);
}

struct sums {
	struct audit_count c[16];
	size_t n;
};

static int
sum_cb(const struct audit_count *c, void *arg)
{
	struct sums *s = arg;

	if (s->n < 16)
		s->c[s->n++] = *c;
	return 0;
}

static uint64_t
sum_of(const struct sums *s, enum audit_category cat, const char *action,
    bool allowed)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->c[i].category == cat && strcmp(s->c[i].action, action) == 0 &&
		    s->c[i].allowed == allowed)
			return s->c[i].count;
	return 0;
}

Test(audit, summary_counts_by_category_action_and_outcome)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128];
	struct sums s = { 0 }, m = { 0 };
	struct audit_filter f = { 0 };
	struct collect *c = calloc(1, sizeof(*c));
	struct audit_summary *sum = audit_summary_new();

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, 1714566896000);
	fill_db(db, 1714566897000);
	cr_assert_eq(audit_db_summary(db, &f, sum_cb, &s, &e), 0, "%s", e.msg);
	cr_expect_eq(s.n, 8);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_JOB, "received", true), 2);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_JOB, "rejected", false), 2);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_SYSCALL, "refused", false), 2);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_QUOTA, "refused", false), 2);
	s.n = 0;
	f.tenant = "t1";
	cr_assert_eq(audit_db_summary(db, &f, sum_cb, &s, &e), 0);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_JOB, "rejected", false), 0);
	cr_expect_eq(sum_of(&s, AUDIT_CAT_PATH, "refused", false), 2);

	/* The in-memory summary of the same events agrees. */
	memset(&f, 0, sizeof(f));
	cr_assert_eq(audit_db_query(db, &f, collect_cb, c, &e), 0);
	for (size_t i = 0; i < c->n; i++)
		cr_assert_eq(audit_summary_add(sum, &c->ev[i]), 0);
	audit_summary_each(sum, sum_cb, &m);
	cr_expect_eq(m.n, 8);
	cr_expect_eq(sum_of(&m, AUDIT_CAT_JOB, "received", true), 2);
	cr_expect_eq(sum_of(&m, AUDIT_CAT_SANDBOX, "created", true), 2);
	for (size_t i = 1; i < m.n; i++)
		cr_expect(m.c[i - 1].category < m.c[i].category ||
		    (m.c[i - 1].category == m.c[i].category &&
		    strcmp(m.c[i - 1].action, m.c[i].action) <= 0), "ordered");
	audit_summary_free(sum);
	free(c);
	audit_db_close(db);
}

/*** The ring and the writer ***/

Test(audit, ring_keeps_its_bound_and_wraps)
{
	struct audit_ring r;
	struct audit_event ev;
	const struct audit_event *first;
	size_t n;

	cr_assert_eq(audit_ring_init(&r, 4), 0);
	mk(&ev, "t1", "", AUDIT_CAT_JOB, "received", true, AUDIT_LVL_INFO, 1);
	for (int i = 0; i < 6; i++) {
		ev.time_ms = i + 1;
		cr_expect_eq(audit_ring_push(&r, &ev), i < 4 ? 0 : -ENOBUFS);
	}
	cr_expect_eq(r.dropped, 2);
	n = audit_ring_peek(&r, 3, &first);
	cr_expect_eq(n, 3);
	cr_expect_eq(first[0].time_ms, 1);
	audit_ring_consume(&r, 3);
	ev.time_ms = 10;
	cr_expect_eq(audit_ring_push(&r, &ev), 0);
	ev.time_ms = 11;
	cr_expect_eq(audit_ring_push(&r, &ev), 0);
	/* Slot 3 holds 4, then the run wraps: peek stops at the array's end. */
	n = audit_ring_peek(&r, 10, &first);
	cr_expect_eq(n, 1);
	cr_expect_eq(first[0].time_ms, 4);
	audit_ring_consume(&r, 1);
	n = audit_ring_peek(&r, 10, &first);
	cr_expect_eq(n, 2);
	cr_expect_eq(first[0].time_ms, 10);
	cr_expect_eq(first[1].time_ms, 11);
	audit_ring_free(&r);
	cr_expect_eq(audit_ring_init(&r, 0), -EINVAL);
}

struct stats_arg {
	struct audit_writer *w;
	uint64_t want;
};

static bool
written_reaches(void *p)
{
	struct stats_arg *a = p;
	uint64_t written = 0;

	audit_writer_stats(a->w, NULL, &written, NULL, NULL);
	return written >= a->want;
}

static bool
failed_once(void *p)
{
	struct stats_arg *a = p;
	uint64_t failed = 0;

	audit_writer_stats(a->w, NULL, NULL, NULL, &failed);
	return failed >= 1;
}

Test(audit, writer_emits_never_wait_on_a_failing_disk_and_it_recovers)
{
	enum { N = 10000, BOUND = 100 };
	struct audit_writer *w = NULL;
	struct audit_event *ev = calloc(1, sizeof(*ev));
	struct err e = { 0 };
	char sub[128], path[160];
	uint64_t queued, written, dropped, failed;
	int64_t t0, floor_ns, emit_ns, worst = 0;
	struct audit_ring r;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct stats_arg sa;
	struct audit_db *db = NULL;
	struct collect *c = calloc(1, sizeof(*c));
	struct audit_filter f = { 0 };

	/*
	 * The database's folder does not exist yet (this runs as root too,
	 * where a read-only folder would not stop a write).
	 */
	snprintf(sub, sizeof(sub), "%s/later", dir);
	snprintf(path, sizeof(path), "%s/audit.db", sub);
	cr_assert_eq(audit_writer_start(&w, path, BOUND, NULL, &e), 0, "%s", e.msg);
	sa.w = w;
	cr_assert(harness_wait_for(failed_once, &sa, 10000), "no failed open");
	mk(ev, "t1", "j1", AUDIT_CAT_SYSCALL, "refused", false, AUDIT_LVL_ALERT, 0);

	/*
	 * The floor: the same N pushes through a plain mutex-guarded ring of
	 * the same bound (100 copies, then refusals), measured here.
	 */
	cr_assert_eq(audit_ring_init(&r, BOUND), 0);
	t0 = mono_ns();
	for (int i = 0; i < N; i++) {
		pthread_mutex_lock(&mu);
		audit_ring_push(&r, ev);
		pthread_mutex_unlock(&mu);
	}
	floor_ns = mono_ns() - t0;
	audit_ring_free(&r);

	t0 = mono_ns();
	for (int i = 0; i < N; i++) {
		int64_t a = mono_ns(), d;

		audit_writer_emit(w, ev);
		if ((d = mono_ns() - a) > worst)
			worst = d;
	}
	emit_ns = mono_ns() - t0;
	cr_log_info("%d emits: %lld ns (worst one %lld ns); the floor: %lld ns",
	    N, (long long)emit_ns, (long long)worst, (long long)floor_ns);
	cr_expect_lt(emit_ns, 50 * floor_ns + 20000000,
	    "emits took %lld ns, the floor %lld ns", (long long)emit_ns,
	    (long long)floor_ns);
	cr_expect_lt(worst, 100000000, "one emit took %lld ns", (long long)worst);

	audit_writer_stats(w, &queued, &written, &dropped, &failed);
	cr_expect_eq(queued, BOUND);
	cr_expect_eq(written, 0);
	cr_expect_eq(dropped, N - BOUND);
	cr_expect_geq(failed, 1);

	/* The disk comes back: the queued ones are written, and the loss. */
	cr_assert_eq(mkdir(sub, 0700), 0);
	sa.want = BOUND;
	cr_assert(harness_wait_for(written_reaches, &sa, 20000), "not recovered");
	cr_expect_eq(audit_writer_stop(w, 5000), 0);

	cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
	f.categories = 1u << AUDIT_CAT_SYSCALL;
	cr_expect_eq(count_where(db, &f), BOUND);
	f.categories = 1u << AUDIT_CAT_AUDIT;
	cr_assert_eq(audit_db_query(db, &f, collect_cb, c, &e), 0);
	cr_assert_eq(c->n, 1, "one record of the loss");
	cr_expect_str_eq(c->ev[0].action, "dropped");
	cr_expect_not(c->ev[0].allowed);
	cr_expect_not_null(strstr(c->ev[0].detail, "\"dropped\":9900"), "%s",
	    c->ev[0].detail);
	cr_expect_gt(c->ev[0].time_ms, 0);
	audit_db_close(db);
	free(c);
	free(ev);
}

Test(audit, writer_stop_flushes_what_is_queued)
{
	struct audit_writer *w = NULL;
	struct audit_event ev;
	struct err e = { 0 };
	char path[128];
	struct audit_db *db = NULL;
	struct audit_filter f = { 0 };
	uint64_t dropped = 1;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_writer_start(&w, path, 2000, NULL, &e), 0, "%s", e.msg);
	mk(&ev, "t1", "j1", AUDIT_CAT_JOB, "finished", true, AUDIT_LVL_INFO, 0);
	for (int i = 0; i < 1500; i++)
		cr_assert_eq(audit_writer_emit(w, &ev), 0);
	audit_writer_stats(w, NULL, NULL, &dropped, NULL);
	cr_expect_eq(dropped, 0);
	cr_expect_eq(audit_writer_stop(w, 10000), 0, "events left unwritten");
	cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
	cr_expect_eq(count_where(db, &f), 1500);
	audit_db_close(db);
	cr_expect_eq(audit_writer_stop(NULL, 0), 0);
}

Test(audit, writer_stop_gives_up_on_a_dead_disk_within_its_timeout)
{
	struct audit_writer *w = NULL;
	struct audit_event ev;
	struct err e = { 0 };
	char path[160];
	int64_t t0;

	snprintf(path, sizeof(path), "%s/missing/audit.db", dir);
	cr_assert_eq(audit_writer_start(&w, path, 100, NULL, &e), 0, "%s", e.msg);
	mk(&ev, "t1", "j1", AUDIT_CAT_JOB, "finished", true, AUDIT_LVL_INFO, 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(audit_writer_emit(w, &ev), 0);
	t0 = mono_ns();
	cr_expect_eq(audit_writer_stop(w, 300), 5, "the five are reported lost");
	cr_expect_lt(mono_ns() - t0, 3000000000LL, "stop took too long");
}

Test(audit, writer_recreates_a_database_removed_under_it)
{
	struct audit_writer *w = NULL;
	struct audit_event ev;
	struct err e = { 0 };
	char path[128], side[160];
	struct audit_db *db = NULL;
	struct audit_filter f = { 0 };
	struct stats_arg sa;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_writer_start(&w, path, 100, NULL, &e), 0, "%s", e.msg);
	sa.w = w;
	mk(&ev, "t1", "j1", AUDIT_CAT_JOB, "started", true, AUDIT_LVL_INFO, 0);
	for (int i = 0; i < 10; i++)
		audit_writer_emit(w, &ev);
	sa.want = 10;
	cr_assert(harness_wait_for(written_reaches, &sa, 10000));
	unlink(path);
	snprintf(side, sizeof(side), "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof(side), "%s-shm", path);
	unlink(side);
	for (int i = 0; i < 7; i++)
		audit_writer_emit(w, &ev);
	sa.want = 17;
	cr_assert(harness_wait_for(written_reaches, &sa, 10000));
	cr_expect_eq(audit_writer_stop(w, 5000), 0);
	cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
	cr_expect_eq(count_where(db, &f), 7, "written into the new file");
	audit_db_close(db);
}

Test(audit, writer_applies_retention)
{
	struct audit_writer *w = NULL;
	struct audit_event ev;
	struct err e = { 0 };
	char path[128];
	struct audit_db *db = NULL;
	struct audit_filter f = { 0 };
	struct audit_retention ret = { .max_age_ms = 86400000, .every_ms = 20 };
	struct stats_arg sa;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_writer_start(&w, path, 100, &ret, &e), 0, "%s", e.msg);
	sa.w = w;
	mk(&ev, "t1", "j1", AUDIT_CAT_JOB, "started", true, AUDIT_LVL_INFO,
	    wall_ms() - 2 * 86400000LL);
	for (int i = 0; i < 5; i++)
		audit_writer_emit(w, &ev);
	ev.time_ms = 0;
	for (int i = 0; i < 3; i++)
		audit_writer_emit(w, &ev);
	sa.want = 8;
	cr_assert(harness_wait_for(written_reaches, &sa, 10000));
	/* The next run of retention (every 20 ms here) removes the old five. */
	for (int i = 0; i < 500; i++) {
		struct timespec ts = { 0, 10000000 };

		cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
		if (count_where(db, &f) == 3)
			i = 1000;
		audit_db_close(db);
		nanosleep(&ts, NULL);
	}
	cr_assert_eq(audit_db_open_readonly(path, &db, &e), 0, "%s", e.msg);
	cr_expect_eq(count_where(db, &f), 3);
	audit_db_close(db);
	audit_writer_stop(w, 5000);
}

/*** sandq audit ***/

/* Runs build/sandq with args; stdout to *out, stderr to err_path. */
static int
sandq(const char *args, char **out)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "%s/sandq %s 2>%s/stderr", harness_build_dir(),
	    args, dir);
	return harness_run(cmd, out);
}

static char *
stderr_text(void)
{
	char cmd[256], *out = NULL;

	snprintf(cmd, sizeof(cmd), "cat %s/stderr", dir);
	harness_run(cmd, &out);
	return out;
}

static size_t
lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

Test(audit, cli_reads_a_database_with_filters_as_json_lines)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128], args[1024], *out = NULL, *line, *save = NULL;
	size_t n = 0;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, 1714566896000);
	audit_db_close(db);

	snprintf(args, sizeof(args), "audit --db %s --json", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 8, "%s", out);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n",
	    &save)) {
		json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		struct audit_event ev;

		cr_assert_not_null(o, "%s", line);
		cr_expect_eq(audit_event_from_json(o, &ev, &e), 0, "%s: %s", line, e.msg);
		json_decref(o);
		n++;
	}
	cr_expect_eq(n, 8);
	free(out);

	snprintf(args, sizeof(args), "audit --db %s --json --tenant t1 --denied "
	    "--category syscall,path", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2, "%s", out);
	free(out);
	snprintf(args, sizeof(args), "--json audit --db %s --job j2 --level warning",
	    path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2, "%s", out);
	free(out);
	snprintf(args, sizeof(args), "audit --db %s --since 2024-05-01T12:34:56.005Z "
	    "--until 2024-05-01T12:34:56.007Z --json", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2, "%s", out);
	free(out);
	/* Nothing in the last hour: the events are from 2024. */
	snprintf(args, sizeof(args), "audit --db %s --since 1h", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_str_eq(out, "");
	free(out);

	/* The table: a header and one row per event. */
	snprintf(args, sizeof(args), "audit --db %s", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 9, "%s", out);
	cr_expect_eq(strncmp(out, "TIME ", 5), 0);
	cr_expect_not_null(strstr(out, "2024-05-01T12:34:56.003Z t1"), "%s", out);
	free(out);

	/* Usage errors are 2, failures 125. */
	cr_expect_eq(sandq("audit --since yesterday", NULL), 2);
	cr_expect_eq(sandq("audit --category net", NULL), 2);
	cr_expect_eq(sandq("audit --denied --allowed", NULL), 2);
	cr_expect_eq(sandq("audit --summary --export x", NULL), 2);
	cr_expect_eq(sandq("audit extra", NULL), 2);
	cr_expect_eq(sandq("--timeout 5 audit", NULL), 2);
	snprintf(args, sizeof(args), "audit --db %s/missing.db", dir);
	cr_expect_eq(sandq(args, NULL), 125);
	cr_expect_eq(sandq("audit --db /etc/hostname", NULL), 125);
	cr_expect_eq(sandq("audit --help", &out), 0);
	cr_expect_not_null(strstr(out, "SANDQ-AUDIT(1)"));
	free(out);
}

Test(audit, cli_shows_hostile_text_safely_in_the_table)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	struct audit_event ev;
	char path[128], args[1024], *out = NULL;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	mk(&ev, "t1", "j1", AUDIT_CAT_PATH, "refused", false, AUDIT_LVL_ALERT, 1000);
	strcpy(ev.target, "/workspace/\x1b]0;pwned\x07\ncarriage\r\xc2\x9b" "2J");
	strcpy(ev.detail, "line1\nline2");
	cr_assert_eq(audit_db_append(db, &ev, 1, &e), 0, "%s", e.msg);
	audit_db_close(db);
	snprintf(args, sizeof(args), "audit --db %s", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2, "one header, one row: %s", out);
	cr_expect_null(strchr(out, '\x1b'));
	cr_expect_null(strchr(out, '\r'));
	cr_expect_null(strstr(out, "\xc2\x9b"));
	cr_expect_not_null(strstr(out, "line1\\nline2"), "%s", out);
	/* Escaped, then cut to the column between whole escapes. */
	cr_expect_not_null(strstr(out, " /workspace/\\x1b]0;pwned\\x07\\n... "), "%s", out);
	free(out);
}

Test(audit, cli_summary_counts_and_json)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128], args[1024], *out = NULL;
	json_t *o;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, 1714566896000);
	fill_db(db, 1714566897000);
	audit_db_close(db);
	snprintf(args, sizeof(args), "audit --db %s --summary --json", path);
	cr_assert_eq(sandq(args, &out), 0);
	o = json_loads(out, 0, NULL);
	cr_assert_not_null(o, "%s", out);
	cr_expect_eq(json_integer_value(json_object_get(o, "total")), 16);
	cr_expect_eq(json_integer_value(json_object_get(o, "allowed")), 8);
	cr_expect_eq(json_integer_value(json_object_get(o, "denied")), 8);
	{
		json_t *job = json_object_get(json_object_get(o, "categories"), "job");
		json_t *rej = json_object_get(json_object_get(job, "actions"), "rejected");

		cr_expect_eq(json_integer_value(json_object_get(job, "allowed")), 6);
		cr_expect_eq(json_integer_value(json_object_get(job, "denied")), 2);
		cr_expect_eq(json_integer_value(json_object_get(rej, "denied")), 2);
	}
	json_decref(o);
	free(out);
	snprintf(args, sizeof(args), "audit --db %s --summary", path);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_not_null(strstr(out, "syscall  refused                   0          2"),
	    "%s", out);
	cr_expect_not_null(strstr(out, "total                              8          8"),
	    "%s", out);
	free(out);
}

Test(audit, cli_export_writes_whole_files_and_refuses_to_overwrite)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	char path[128], file[128], args[1024], *out = NULL;
	char cmd[256];
	struct stat st;

	db_path(path, sizeof(path));
	cr_assert_eq(audit_db_open(path, &db, &e), 0, "%s", e.msg);
	fill_db(db, 1714566896000);
	audit_db_close(db);
	snprintf(file, sizeof(file), "%s/out.jsonl", dir);
	snprintf(args, sizeof(args), "audit --db %s --export %s", path, file);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_str_eq(strstr(out, "exported 8 events"), out);
	free(out);
	cr_assert_eq(stat(file, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0600);
	snprintf(cmd, sizeof(cmd), "cat %s", file);
	harness_run(cmd, &out);
	cr_expect_eq(lines(out), 8);
	free(out);
	/* Again: refused, and the file is untouched; --force replaces it. */
	snprintf(args, sizeof(args), "audit --db %s --export %s --denied", path, file);
	cr_expect_eq(sandq(args, NULL), 125);
	out = stderr_text();
	cr_expect_not_null(strstr(out, "exists"), "%s", out);
	free(out);
	harness_run(cmd, &out);
	cr_expect_eq(lines(out), 8);
	free(out);
	snprintf(args, sizeof(args), "audit --db %s --export %s --denied --force",
	    path, file);
	cr_expect_eq(sandq(args, NULL), 0);
	harness_run(cmd, &out);
	cr_expect_eq(lines(out), 4);
	free(out);
	/* No temporary file is left beside it. */
	snprintf(cmd, sizeof(cmd), "ls %s | grep -c tmp", dir);
	harness_run(cmd, &out);
	cr_expect_str_eq(out, "0\n");
	free(out);
}

/*** The stream, through a private redis-server ***/

static void
xadd(redisContext *c, const char *key, const struct audit_event *ev)
{
	const char *argv[3 + 2 * AUDIT_NFIELDS];
	size_t lens[3 + 2 * AUDIT_NFIELDS];
	struct audit_fields f;
	struct err e = { 0 };
	redisReply *r;
	int n = 0;

	cr_assert_eq(audit_event_to_fields(ev, &f, &e), 0, "%s", e.msg);
	argv[n] = "XADD";
	lens[n++] = 4;
	argv[n] = key;
	lens[n++] = strlen(key);
	argv[n] = "*";
	lens[n++] = 1;
	for (int i = 0; i < AUDIT_NFIELDS; i++) {
		argv[n] = f.name[i];
		lens[n++] = f.name_len[i];
		argv[n] = f.value[i];
		lens[n++] = f.value_len[i];
	}
	r = redisCommandArgv(c, n, argv, lens);
	cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
	freeReplyObject(r);
}

Test(audit, cli_reads_the_tenants_stream_in_pages)
{
	struct harness rs;
	struct timeval tv = { 2, 0 };
	redisContext *c;
	struct audit_event ev;
	char key[128], args[512], *out = NULL, *err;
	int64_t now = wall_ms();
	redisReply *r;

	if (access("/usr/bin/redis-server", X_OK) != 0)
		cr_skip_test("no /usr/bin/redis-server");
	harness_redis_start(&rs);
	c = redisConnectWithTimeout("127.0.0.1", rs.port, tv);
	cr_assert(c != NULL && c->err == 0);
	cr_assert(audit_stream_key(key, sizeof(key), "sandq", "t1") > 0);
	cr_expect_str_eq(key, "sandq:{t1}:audit");
	/* 2500 events: three pages of XRANGE; every fifth one denied. */
	for (int i = 0; i < 2500; i++) {
		mk(&ev, "t1", "j1", i % 5 ? AUDIT_CAT_JOB : AUDIT_CAT_SYSCALL,
		    i % 5 ? "finished" : "refused", i % 5 != 0,
		    i % 5 ? AUDIT_LVL_INFO : AUDIT_LVL_ALERT, now - 2500 + i);
		xadd(c, key, &ev);
	}
	/* One entry a tenant forged badly, and another tenant's event. */
	r = redisCommand(c, "XADD %s * time 1 bogus yes", key);
	freeReplyObject(r);
	mk(&ev, "t2", "j9", AUDIT_CAT_JOB, "received", true, AUDIT_LVL_INFO, now);
	xadd(c, "sandq:{t2}:audit", &ev);
	redisFree(c);

	snprintf(args, sizeof(args), "--redis %s audit --tenant t1 --json", rs.url);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2500);
	cr_expect_null(strstr(out, "j9"));
	free(out);
	err = stderr_text();
	cr_expect_not_null(strstr(err, "skipped 1 stream entries"), "%s", err);
	cr_expect_not_null(strstr(err, "bogus: unknown field"), "%s", err);
	free(err);

	snprintf(args, sizeof(args), "audit --redis %s --tenant t1 --denied --json",
	    rs.url);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 500);
	free(out);
	/* The default tenant comes from $SANDQ_TENANT. */
	snprintf(args, sizeof(args), "audit --redis %s --summary --json", rs.url);
	{
		char env[600];

		snprintf(env, sizeof(env), "SANDQ_TENANT=t2 %s/sandq %s 2>/dev/null",
		    harness_build_dir(), args);
		cr_assert_eq(harness_run(env, &out), 0);
		cr_expect_str_eq(out, "{\"total\":1,\"allowed\":1,\"denied\":0,"
		    "\"categories\":{\"job\":{\"allowed\":1,\"denied\":0,\"actions\":"
		    "{\"received\":{\"allowed\":1,\"denied\":0}}}}}\n");
		free(out);
	}
	/* --since: only the last second or so of the 2500 ms. */
	snprintf(args, sizeof(args), "audit --redis %s --tenant t1 --since "
	    "2024-01-01T00:00:00Z --until 1ms --json", rs.url);
	cr_assert_eq(sandq(args, &out), 0);
	cr_expect_eq(lines(out), 2500);
	free(out);
	harness_stop(&rs);

	/* Redis gone: a failure, not a usage error. */
	cr_expect_eq(sandq(args, NULL), 125);
}
