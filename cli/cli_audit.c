/*
 * cli_audit.c - `sandq audit`: reads the audit trail, filters it, and
 * prints it as a table, as JSON lines, as a summary, or exports it.
 *
 * Two sources. By default the tenant's stream sandq:{T}:audit, read with
 * XRANGE in pages of PAGE_COUNT from an id derived from --since (stream
 * ids are milliseconds); or, with --db PATH, a host's local audit
 * database opened read-only, where the filters run in SQL. Either way
 * every event passes the same audit_filter, so both answer the same
 * question the same way.
 *
 * The stream is read as untrusted input: a tenant's own Redis user may
 * write to it (its ACL covers sandq:{T}:*). Every entry is decoded
 * strictly and bounded; one that is not an event is skipped, counted and
 * named on standard error, and never stops the listing. Text shown in the
 * table is escaped (cli_esc.h), so an event cannot drive the operator's
 * terminal.
 *
 * audit parses the whole command line itself (options may come before or
 * after the verb, as elsewhere): cli.c hands it argv as soon as it sees
 * the verb. Exit status: 0, 2 for a bad command line (no job status to
 * stay clear of here, so the usual convention, as doctor), 125 when
 * sandq failed.
 *
 * Sections: options, output, sources, entry point.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../audit/audit.h"
#include "../common/err.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../proto/url.h"
#include "cli_audit.h"
#include "cli_common.h"
#include "cli_man.h"
#include "redis_sync.h"

#define EXIT_USAGE 2
#define PREFIX "sandq"			/* key prefix (docs/protocol.md, Keys) */
#define PAGE_COUNT 1000			/* entries per XRANGE */
/*
 * A stream id is the time Redis added the entry, an event's time the time
 * its host saw it: the XRANGE window is widened by this much on each side
 * and the exact bounds are applied to the events' own times.
 */
#define CLOCK_SLACK_MS (5 * 60 * 1000)
#define DETAIL_COLUMN 60		/* bytes of detail shown in the table */

/*** Options ***/

enum {
	A_REDIS = 256,
	A_TENANT,
	A_JOB,
	A_SANDBOX,
	A_CATEGORY,
	A_LEVEL,
	A_DENIED,
	A_ALLOWED,
	A_SINCE,
	A_UNTIL,
	A_JSON,
	A_SUMMARY,
	A_EXPORT,
	A_FORCE,
	A_DB,
	A_HELP,
};

static const struct option audit_opts[] = {
	{ "redis", required_argument, NULL, A_REDIS },
	{ "tenant", required_argument, NULL, A_TENANT },
	{ "job", required_argument, NULL, A_JOB },
	{ "sandbox", required_argument, NULL, A_SANDBOX },
	{ "category", required_argument, NULL, A_CATEGORY },
	{ "level", required_argument, NULL, A_LEVEL },
	{ "denied", no_argument, NULL, A_DENIED },
	{ "allowed", no_argument, NULL, A_ALLOWED },
	{ "since", required_argument, NULL, A_SINCE },
	{ "until", required_argument, NULL, A_UNTIL },
	{ "json", no_argument, NULL, A_JSON },
	{ "summary", no_argument, NULL, A_SUMMARY },
	{ "export", required_argument, NULL, A_EXPORT },
	{ "force", no_argument, NULL, A_FORCE },
	{ "db", required_argument, NULL, A_DB },
	{ "help", no_argument, NULL, A_HELP },
	{ NULL, 0, NULL, 0 },
};

/* The parsed command line and the output state. */
struct aud {
	struct audit_filter f;
	const char *redis;
	const char *tenant;		/* the stream's tenant */
	const char *db;			/* --db */
	const char *export;		/* --export FILE */
	bool force;
	bool json;
	bool summary;
	bool help;

	FILE *out;			/* stdout, or the export's temp file */
	struct audit_summary *sum;	/* with --summary */
	uint64_t printed;		/* events written */
	uint64_t skipped;		/* stream entries that are not events */
	char first_skip[300];		/* why the first was skipped */
	bool header_done;		/* the table's header */
};

static int __attribute__((format(printf, 1, 2)))
usage(const char *fmt, ...)
{
	va_list ap;
	int status;

	va_start(ap, fmt);
	status = cli_vfail(EXIT_USAGE, "sandq: audit: ", "sandq audit --help", fmt, ap);
	va_end(ap);
	return status;
}

static int __attribute__((format(printf, 1, 2)))
fail(const char *fmt, ...)
{
	va_list ap;
	int status;

	va_start(ap, fmt);
	status = cli_vfail(CLI_EXIT_SANDQ, "sandq: audit: ", NULL, fmt, ap);
	va_end(ap);
	return status;
}

/* WHEN: a duration back from now, or an RFC 3339 UTC time. */
static int
parse_when(const char *s, int64_t *ms)
{
	int64_t d;
	struct timespec ts;

	if (audit_time_parse(s, ms) == 0)
		return 0;
	if (audit_duration_parse(s, &d) != 0)
		return -EINVAL;
	clock_gettime(CLOCK_REALTIME, &ts);
	*ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - d;
	if (*ms <= 0)
		*ms = 1;	/* 0 would mean "no bound" */
	return 0;
}

static bool
id_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > AUDIT_JOB_MAX)
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789._:-") == n;
}

/* --category: a name or a comma-separated list of names. */
static int
parse_categories(const char *arg, unsigned *mask)
{
	char buf[256], *save = NULL, *tok;

	if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf))
		return usage("--category: too long");
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		enum audit_category c;

		if (audit_category_parse(tok, &c) != 0)
			return usage("--category '%s': expected job, sandbox, syscall, "
			    "path, quota, policy, tenant, audit or image", tok);
		*mask |= 1u << c;
	}
	if (*mask == 0)
		return usage("--category: expected a category");
	return 0;
}

static int
opt_apply(struct aud *a, int o, const char *arg)
{
	switch (o) {
	case A_REDIS:
		a->redis = arg;
		return 0;
	case A_TENANT:
		if (!key_tenant_valid(arg))
			return usage("--tenant '%s': expected 1 to 64 characters of "
			    "A-Z a-z 0-9 _ -", arg);
		a->tenant = a->f.tenant = arg;
		return 0;
	case A_JOB:
	case A_SANDBOX:
		if (!id_valid(arg))
			return usage("--%s '%s': expected 1 to 128 characters of "
			    "A-Z a-z 0-9 . _ : -", o == A_JOB ? "job" : "sandbox", arg);
		if (o == A_JOB)
			a->f.job = arg;
		else
			a->f.sandbox = arg;
		return 0;
	case A_CATEGORY:
		return parse_categories(arg, &a->f.categories);
	case A_LEVEL:
		if (audit_level_parse(arg, &a->f.level_min) != 0)
			return usage("--level '%s': expected info, notice, warning or "
			    "alert", arg);
		return 0;
	case A_DENIED:
	case A_ALLOWED:
		if (a->f.outcome != AUDIT_ANY &&
		    a->f.outcome != (o == A_DENIED ? AUDIT_DENIED_ONLY :
		    AUDIT_ALLOWED_ONLY))
			return usage("--denied and --allowed exclude each other");
		a->f.outcome = o == A_DENIED ? AUDIT_DENIED_ONLY : AUDIT_ALLOWED_ONLY;
		return 0;
	case A_SINCE:
	case A_UNTIL:
		if (parse_when(arg, o == A_SINCE ? &a->f.since_ms :
		    &a->f.until_ms) != 0)
			return usage("--%s '%s': expected a duration (30s, 10m, 2h, "
			    "7d, 1w) or a UTC time (2024-05-01T12:00:00Z)",
			    o == A_SINCE ? "since" : "until", arg);
		return 0;
	case A_JSON:
		a->json = true;
		return 0;
	case A_SUMMARY:
		a->summary = true;
		return 0;
	case A_EXPORT:
		if (arg[0] == '\0')
			return usage("--export: expected a file name");
		a->export = arg;
		return 0;
	case A_FORCE:
		a->force = true;
		return 0;
	case A_DB:
		if (arg[0] == '\0')
			return usage("--db: expected a path");
		a->db = arg;
		return 0;
	case A_HELP:
		a->help = true;
		return 0;
	default:
		return usage("internal error: option %d", o);
	}
}

/*
 * Parses all of argv (the options before "audit" too). The only operand
 * allowed is the verb itself.
 */
static int
opts_parse(struct aud *a, int argc, char **argv)
{
	int o, rc, verbs = 0;

	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", audit_opts, NULL)) != -1) {
		const char *bad = argv[optind - 1];

		if (o == 'h')
			o = A_HELP;
		else if (o == ':')
			return usage("option '%s' needs a value", bad);
		else if (o == '?')
			return optopt ? usage("unknown option '-%c'", optopt) :
			    usage("option '%.*s' does not apply to 'sandq audit'",
			    (int)strcspn(bad, "="), bad);
		if ((rc = opt_apply(a, o, optarg)) != 0)
			return rc;
	}
	for (int i = optind; i < argc; i++) {
		if (strcmp(argv[i], "audit") == 0 && verbs++ == 0)
			continue;
		return usage("unexpected argument '%s'", argv[i]);
	}
	if (a->help)
		return 0;
	if (a->export != NULL && a->summary)
		return usage("--export writes events; it does not take --summary");
	if (a->force && a->export == NULL)
		return usage("--force applies to --export only");
	if (a->f.since_ms > 0 && a->f.until_ms > 0 && a->f.since_ms >= a->f.until_ms)
		return usage("--since is not before --until");
	return 0;
}

/*** Output ***/

/*
 * Writes s into a column of width bytes, escaped as every verb escapes a
 * tenant's text (cli_esc.h: an event's target or detail cannot drive the
 * terminal or forge a row), empty as -, cut with "..." between whole
 * characters and escapes. pad: fill to width.
 */
static void
put_cell(FILE *f, const char *s, size_t width, bool pad)
{
	const char *shown = s[0] ? cli_esc_cut(s, width) : "-";
	size_t used = strlen(shown);

	fputs(shown, f);
	while (pad && used < width) {
		fputc(' ', f);
		used++;
	}
}

static void
table_row(struct aud *a, const struct audit_event *ev)
{
	char t[AUDIT_TIME_LEN + 1];
	FILE *f = a->out;

	if (!a->header_done) {
		fprintf(f, "%-24s %-12s %-8s %-13s %-7s %-32s %-26s %s\n", "TIME",
		    "TENANT", "CATEGORY", "ACTION", "OUTCOME", "TARGET", "JOB",
		    "DETAIL");
		a->header_done = true;
	}
	if (audit_time_format(ev->time_ms, t) != 0)
		snprintf(t, sizeof(t), "?");
	fprintf(f, "%-24s ", t);
	put_cell(f, ev->tenant, 12, true);
	fputc(' ', f);
	put_cell(f, audit_category_name(ev->category), 8, true);
	fputc(' ', f);
	put_cell(f, ev->action, 13, true);
	fprintf(f, " %-7s ", ev->allowed ? "allowed" : "denied");
	put_cell(f, ev->target, 32, true);
	fputc(' ', f);
	put_cell(f, ev->job, 26, true);
	fputc(' ', f);
	put_cell(f, ev->detail, DETAIL_COLUMN, false);
	fputc('\n', f);
}

static int
json_line(FILE *f, const struct audit_event *ev)
{
	json_t *o = audit_event_to_json(ev);
	int rc;

	if (o == NULL)
		return -ENOMEM;
	rc = json_dumpf(o, f, JSON_COMPACT);
	json_decref(o);
	if (rc != 0 || fputc('\n', f) == EOF)
		return -EIO;
	return 0;
}

/* The sink every source feeds: one event that passed the filter. */
static int
on_event(const struct audit_event *ev, void *arg)
{
	struct aud *a = arg;

	if (a->sum != NULL) {
		if (audit_summary_add(a->sum, ev) != 0)
			return -ENOBUFS;
		return 0;
	}
	if (a->json || a->export != NULL) {
		if (json_line(a->out, ev) != 0)
			return -EIO;
	} else {
		table_row(a, ev);
	}
	a->printed++;
	return 0;
}

static int
on_count(const struct audit_count *c, void *arg)
{
	struct aud *a = arg;

	return audit_summary_add_count(a->sum, c) != 0 ? -ENOBUFS : 0;
}

/* Totals of a summary, per (category, action) and overall. */
struct sum_print {
	struct aud *a;
	json_t *cats;			/* with --json */
	uint64_t allowed, denied;
	enum audit_category cat;	/* the row being gathered */
	char action[AUDIT_ACTION_MAX + 1];
	uint64_t row_allowed, row_denied;
	bool have_row;
};

static void
counts_set(json_t *o, uint64_t allowed, uint64_t denied)
{
	json_object_set_new(o, "allowed", json_integer((json_int_t)allowed));
	json_object_set_new(o, "denied", json_integer((json_int_t)denied));
}

/* Emits the (category, action) row gathered so far. */
static void
sum_flush(struct sum_print *p)
{
	const char *cname = audit_category_name(p->cat);

	if (!p->have_row)
		return;
	if (p->cats != NULL) {
		json_t *c = json_object_get(p->cats, cname), *acts, *row;

		if (c == NULL) {
			c = json_object();
			counts_set(c, 0, 0);
			json_object_set_new(c, "actions", json_object());
			json_object_set_new(p->cats, cname, c);
		}
		counts_set(c, (uint64_t)json_integer_value(json_object_get(c,
		    "allowed")) + p->row_allowed, (uint64_t)json_integer_value(
		    json_object_get(c, "denied")) + p->row_denied);
		acts = json_object_get(c, "actions");
		row = json_object();
		counts_set(row, p->row_allowed, p->row_denied);
		json_object_set_new(acts, p->action, row);
	} else {
		fprintf(p->a->out, "%-8s ", cname);
		put_cell(p->a->out, p->action, 16, true);
		fprintf(p->a->out, " %10" PRIu64 " %10" PRIu64 "\n", p->row_allowed,
		    p->row_denied);
	}
	p->have_row = false;
}

static int
sum_row(const struct audit_count *c, void *arg)
{
	struct sum_print *p = arg;

	if (p->have_row && (p->cat != c->category ||
	    strcmp(p->action, c->action) != 0))
		sum_flush(p);
	if (!p->have_row) {
		p->cat = c->category;
		snprintf(p->action, sizeof(p->action), "%s", c->action);
		p->row_allowed = p->row_denied = 0;
		p->have_row = true;
	}
	if (c->allowed) {
		p->row_allowed += c->count;
		p->allowed += c->count;
	} else {
		p->row_denied += c->count;
		p->denied += c->count;
	}
	return 0;
}

static int
summary_print(struct aud *a)
{
	struct sum_print p = { .a = a };
	int rc = 0;

	if (a->json)
		p.cats = json_object();
	else
		fprintf(a->out, "%-8s %-16s %10s %10s\n", "CATEGORY", "ACTION",
		    "ALLOWED", "DENIED");
	audit_summary_each(a->sum, sum_row, &p);
	sum_flush(&p);
	if (a->json) {
		json_t *o = json_object();

		json_object_set_new(o, "total", json_integer((json_int_t)(p.allowed +
		    p.denied)));
		counts_set(o, p.allowed, p.denied);
		json_object_set_new(o, "categories", p.cats);
		if (json_dumpf(o, a->out, JSON_COMPACT) != 0 ||
		    fputc('\n', a->out) == EOF)
			rc = -EIO;
		json_decref(o);
	} else {
		fprintf(a->out, "%-8s %-16s %10" PRIu64 " %10" PRIu64 "\n", "total",
		    "", p.allowed, p.denied);
	}
	return rc;
}

/*** Sources ***/

/* Decodes one XRANGE entry [id, [field, value, ...]] into ev. */
static int
entry_event(const redisReply *ent, struct audit_event *ev, struct err *e)
{
	const char *names[AUDIT_NFIELDS], *values[AUDIT_NFIELDS];
	size_t nlens[AUDIT_NFIELDS], vlens[AUDIT_NFIELDS];
	const redisReply *kv;
	size_t n;

	kv = ent->element[1];
	if (kv->type != REDIS_REPLY_ARRAY || kv->elements % 2 != 0 ||
	    kv->elements > 2 * AUDIT_NFIELDS)
		return err_set(e, -EINVAL, "not %d field/value pairs", AUDIT_NFIELDS);
	n = kv->elements / 2;
	for (size_t i = 0; i < n; i++) {
		const redisReply *k = kv->element[2 * i], *v = kv->element[2 * i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			return err_set(e, -EINVAL, "a field or value is not a string");
		names[i] = k->str;
		nlens[i] = k->len;
		values[i] = v->str;
		vlens[i] = v->len;
	}
	return audit_event_from_fields(ev, n, names, nlens, values, vlens, e);
}

/* The id after "MS-SEQ" for the next page's start, into buf. */
static int
next_id(const char *id, size_t len, char *buf, size_t size)
{
	unsigned long long ms, seq;
	char tmp[64];
	int end = 0;

	if (len >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, id, len);
	tmp[len] = '\0';
	if (sscanf(tmp, "%llu-%llu%n", &ms, &seq, &end) != 2 ||
	    (size_t)end != len)
		return -EINVAL;
	if (seq == UINT64_MAX)
		snprintf(buf, size, "%llu-0", ms + 1);
	else
		snprintf(buf, size, "%llu-%llu", ms, seq + 1);
	return 0;
}

static int
from_redis(struct aud *a)
{
	char key[KEY_MAX], start[64], end[64], count[16], msg[512];
	struct audit_event *ev = xmalloc(sizeof(*ev));
	redisContext *rc;
	int status = 0;

	if ((rc = cli_redis_open(a->redis, NULL, msg, sizeof(msg))) == NULL) {
		free(ev);
		return fail("%s", msg);
	}
	if (audit_stream_key(key, sizeof(key), PREFIX, a->tenant) < 0) {
		status = fail("tenant name too long");
		goto out;
	}
	if (a->f.since_ms > CLOCK_SLACK_MS)
		snprintf(start, sizeof(start), "%lld-0",
		    (long long)(a->f.since_ms - CLOCK_SLACK_MS));
	else
		snprintf(start, sizeof(start), "-");
	if (a->f.until_ms > 0)
		snprintf(end, sizeof(end), "%lld",
		    (long long)(a->f.until_ms + CLOCK_SLACK_MS));
	else
		snprintf(end, sizeof(end), "+");
	snprintf(count, sizeof(count), "%d", PAGE_COUNT);
	for (;;) {
		const char *argv[] = { "XRANGE", key, start, end, "COUNT", count };
		redisReply *r = redisCommandArgv(rc, 6, argv, NULL);
		const redisReply *last = NULL;
		size_t got;

		if (r == NULL) {
			status = fail("redis: XRANGE %s: %s", key, rc->errstr);
			goto out;
		}
		if (r->type != REDIS_REPLY_ARRAY) {
			status = fail("redis: XRANGE %s: %s", key, r->type ==
			    REDIS_REPLY_ERROR ? r->str : "unexpected reply");
			freeReplyObject(r);
			goto out;
		}
		got = r->elements;
		for (size_t i = 0; i < got && status == 0; i++) {
			const redisReply *ent = r->element[i];
			struct err e = { 0 };
			int cbrc;

			if (ent->type != REDIS_REPLY_ARRAY || ent->elements != 2 ||
			    ent->element[0]->type != REDIS_REPLY_STRING) {
				status = fail("redis: XRANGE %s: unexpected reply", key);
				break;
			}
			last = ent;
			if (entry_event(ent, ev, &e) != 0) {
				if (a->skipped++ == 0)
					snprintf(a->first_skip, sizeof(a->first_skip),
					    "%.40s: %s", ent->element[0]->str, e.msg);
				continue;
			}
			if (!audit_filter_match(&a->f, ev))
				continue;
			if ((cbrc = on_event(ev, a)) != 0)
				status = fail("%s", cbrc == -ENOBUFS ? "more than 4096 "
				    "kinds of events to summarise" : "writing events failed");
		}
		if (status == 0 && got == PAGE_COUNT && last != NULL &&
		    next_id(last->element[0]->str, last->element[0]->len, start,
		    sizeof(start)) != 0)
			status = fail("redis: XRANGE %s: bad entry id", key);
		freeReplyObject(r);
		if (status != 0 || got < PAGE_COUNT)
			break;
	}
out:
	free(ev);
	redisFree(rc);
	return status;
}

static int
from_db(struct aud *a)
{
	struct audit_db *db = NULL;
	struct err e = { 0 };
	int rc;

	if (audit_db_open_readonly(a->db, &db, &e) != 0)
		return fail("%s", e.msg);
	if (a->sum != NULL)
		rc = audit_db_summary(db, &a->f, on_count, a, &e);
	else
		rc = audit_db_query(db, &a->f, on_event, a, &e);
	audit_db_close(db);
	if (rc == -ENOBUFS)
		return fail("more than %d kinds of events to summarise",
		    AUDIT_SUMMARY_GROUPS);
	if (rc == -EIO && e.msg[0] == '\0')
		return fail("writing events failed");
	if (rc != 0)
		return fail("%s", e.msg[0] ? e.msg : strerror(-rc));
	return 0;
}

/*** Entry point ***/

/*
 * Opens FILE's temporary sibling for --export: refused early if FILE
 * exists and there is no --force, so no Redis read is wasted.
 */
static int
export_open(struct aud *a, char *tmp, size_t size)
{
	struct stat st;
	int fd;

	if (!a->force && lstat(a->export, &st) == 0)
		return fail("%s exists; --force replaces it", a->export);
	if (snprintf(tmp, size, "%s.tmp-XXXXXX", a->export) >= (int)size)
		return fail("%s: name too long", a->export);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		return fail("%s: %s", tmp, strerror(errno));
	if ((a->out = fdopen(fd, "w")) == NULL) {
		close(fd);
		unlink(tmp);
		return fail("%s: %s", tmp, strerror(errno));
	}
	return 0;
}

/*
 * Makes the export visible: flushed and synced, then renamed over FILE
 * (--force) or to FILE only if it still does not exist (RENAME_NOREPLACE,
 * or link() where the file system lacks it).
 */
static int
export_finish(struct aud *a, const char *tmp, int status)
{
	int rc = 0;

	if (status == 0 && (fflush(a->out) != 0 || fsync(fileno(a->out)) != 0))
		status = fail("%s: %s", tmp, strerror(errno));
	if (fclose(a->out) != 0 && status == 0)
		status = fail("%s: %s", tmp, strerror(errno));
	a->out = NULL;
	if (status == 0) {
		if (a->force)
			rc = rename(tmp, a->export);
		else if ((rc = renameat2(AT_FDCWD, tmp, AT_FDCWD, a->export,
		    RENAME_NOREPLACE)) != 0 && (errno == EINVAL || errno == ENOSYS)) {
			if ((rc = link(tmp, a->export)) == 0)
				unlink(tmp);
		}
		if (rc != 0)
			status = errno == EEXIST ?
			    fail("%s exists; --force replaces it", a->export) :
			    fail("%s: %s", a->export, strerror(errno));
	}
	if (status != 0 || rc != 0)
		unlink(tmp);
	if (status == 0)
		printf("exported %" PRIu64 " events to %s\n", a->printed, a->export);
	return status;
}

int
cli_audit_main(int argc, char **argv)
{
	struct aud a = { .out = stdout };
	char tmp[4096 + 16];
	int status;

	if ((status = opts_parse(&a, argc, argv)) != 0)
		return status;
	if (a.help) {
		cli_man_print("audit");
		return 0;
	}
	a.redis = cli_redis_or_default(a.redis);
	a.tenant = cli_tenant_or_default(a.tenant);
	if (!key_tenant_valid(a.tenant))
		return usage("$SANDQ_TENANT '%s': not a tenant name", a.tenant);
	if (a.summary)
		a.sum = audit_summary_new();
	if (a.export != NULL && (status = export_open(&a, tmp, sizeof(tmp))) != 0)
		return status;
	status = a.db != NULL ? from_db(&a) : from_redis(&a);
	if (a.export != NULL)
		status = export_finish(&a, tmp, status);
	else if (status == 0 && a.sum != NULL && summary_print(&a) != 0)
		status = fail("writing the summary failed");
	if (a.skipped > 0)
		cli_warn("audit: skipped %" PRIu64 " stream entries that "
		    "are not audit events (first: %s)", a.skipped, a.first_skip);
	audit_summary_free(a.sum);
	return status;
}
