/*
 * event.c - the audit event model and its encodings (pure: no I/O).
 *
 * An event is a fixed struct (audit.h); this file names its enums, checks
 * it against the model, and converts it to and from a JSON object and the
 * flat field/value pairs of a Redis stream entry. Both decoders are strict:
 * every field exactly once, nothing else, every value within its bound,
 * and an error that names the field. Readers meet these bytes from places
 * a tenant can write to (its own audit stream), so nothing is assumed.
 *
 * Times are RFC 3339 UTC with milliseconds in JSON and epoch milliseconds
 * everywhere else; the conversion is done here with civil-date arithmetic
 * rather than timegm(), so no time zone or locale can change it.
 *
 * Sections: names, checks, times, JSON, fields, filters, summaries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/xmalloc.h"
#include "audit.h"

const char *const audit_field_names[AUDIT_NFIELDS] = {
	"time", "host", "tenant", "job", "sandbox", "category", "action",
	"target", "allowed", "level", "detail",
};

enum {
	F_TIME, F_HOST, F_TENANT, F_JOB, F_SANDBOX, F_CATEGORY, F_ACTION,
	F_TARGET, F_ALLOWED, F_LEVEL, F_DETAIL,
};

static const char *const category_names[AUDIT_CAT__COUNT] = {
	"job", "sandbox", "syscall", "path", "quota", "policy", "tenant",
	"audit", "image",
};

static const char *const level_names[AUDIT_LVL__COUNT] = {
	"info", "notice", "warning", "alert",
};

/*** Names ***/

const char *
audit_category_name(enum audit_category c)
{
	if ((unsigned)c >= AUDIT_CAT__COUNT)
		return NULL;
	return category_names[c];
}

int
audit_category_parse(const char *s, enum audit_category *out)
{
	for (unsigned i = 0; i < AUDIT_CAT__COUNT; i++) {
		if (strcmp(s, category_names[i]) == 0) {
			*out = (enum audit_category)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *
audit_level_name(enum audit_level l)
{
	if ((unsigned)l >= AUDIT_LVL__COUNT)
		return NULL;
	return level_names[l];
}

int
audit_level_parse(const char *s, enum audit_level *out)
{
	for (unsigned i = 0; i < AUDIT_LVL__COUNT; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum audit_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

/*** Checks ***/

/*
 * Length of the valid UTF-8 sequence at p (n bytes left), or 0: no
 * overlong forms, no surrogates, nothing past U+10FFFF.
 */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t len;
	unsigned min, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		min = 0x80;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		min = 0x800;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		min = 0x10000;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool
utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(p + i, n - i);

		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

bool
audit_text_set(char *dst, size_t size, const char *src)
{
	size_t n, keep = 0;
	const unsigned char *p = (const unsigned char *)src;

	if (size == 0)
		return src != NULL && src[0] != '\0';
	if (src == NULL) {
		dst[0] = '\0';
		return false;
	}
	n = strlen(src);
	if (n < size) {
		memcpy(dst, src, n + 1);
		return false;
	}
	/* Keep whole characters only; an invalid byte ends the copy too. */
	while (keep < size - 1) {
		size_t k = utf8_seq(p + keep, n - keep);

		if (k == 0 || keep + k > size - 1)
			break;
		keep += k;
	}
	memcpy(dst, src, keep);
	dst[keep] = '\0';
	return true;
}

void
audit_event_init(struct audit_event *ev, enum audit_category c,
    const char *action, const char *target, bool allowed,
    enum audit_level level)
{
	struct timespec ts;

	memset(ev, 0, sizeof(*ev));
	clock_gettime(CLOCK_REALTIME, &ts);
	ev->time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	ev->category = c;
	audit_text_set(ev->action, sizeof(ev->action), action);
	audit_text_set(ev->target, sizeof(ev->target), target);
	ev->allowed = allowed;
	ev->level = level;
}

enum text_kind {
	TEXT_ANY,			/* any UTF-8 but NUL (target, detail) */
	TEXT_PRINTABLE,			/* no control characters (host) */
	TEXT_TENANT,			/* [A-Za-z0-9_-] */
	TEXT_ID,			/* [A-Za-z0-9._:-] (job and sandbox ids) */
	TEXT_ACTION,			/* [a-z0-9_.], not empty */
};

/* Checks n bytes of a field's text. 0 or -EINVAL naming the field. */
static int
text_check(const char *field, const char *s, size_t n, size_t max,
    enum text_kind kind, struct err *e)
{
	if (n > max)
		return err_set(e, -EINVAL, "%s: longer than %zu bytes", field, max);
	if (kind == TEXT_ACTION && n == 0)
		return err_set(e, -EINVAL, "%s: empty", field);
	if (memchr(s, '\0', n) != NULL)
		return err_set(e, -EINVAL, "%s: contains a NUL byte", field);
	if (!utf8_valid(s, n))
		return err_set(e, -EINVAL, "%s: not valid UTF-8", field);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		bool ok;

		switch (kind) {
		case TEXT_ANY:
			ok = true;
			break;
		case TEXT_PRINTABLE:
			ok = c >= 0x20 && c != 0x7f;
			break;
		case TEXT_TENANT:
			ok = alnum || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
			break;
		case TEXT_ID:
			ok = alnum || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' ||
			    c == '.' || c == ':';
			break;
		default:
			ok = alnum || c == '_' || c == '.';
			break;
		}
		if (!ok)
			return err_set(e, -EINVAL, "%s: byte 0x%02x at %zu is not "
			    "allowed", field, c, i);
	}
	return 0;
}

/* A fixed buffer's text: NUL-terminated within it, then text_check(). */
static int
buf_check(const char *field, const char *buf, size_t size, enum text_kind kind,
    struct err *e)
{
	const char *nul = memchr(buf, '\0', size);

	if (nul == NULL)
		return err_set(e, -EINVAL, "%s: not terminated", field);
	return text_check(field, buf, (size_t)(nul - buf), size - 1, kind, e);
}

int
audit_event_check(const struct audit_event *ev, struct err *e)
{
	int rc;

	if (ev->time_ms < 0 || ev->time_ms > AUDIT_TIME_MAX)
		return err_set(e, -EINVAL, "time: %lld is outside 1970..9999",
		    (long long)ev->time_ms);
	if ((rc = buf_check("host", ev->host, sizeof(ev->host),
	    TEXT_PRINTABLE, e)) != 0 ||
	    (rc = buf_check("tenant", ev->tenant, sizeof(ev->tenant),
	    TEXT_TENANT, e)) != 0 ||
	    (rc = buf_check("job", ev->job, sizeof(ev->job), TEXT_ID, e)) != 0 ||
	    (rc = buf_check("sandbox", ev->sandbox, sizeof(ev->sandbox),
	    TEXT_ID, e)) != 0)
		return rc;
	if (audit_category_name(ev->category) == NULL)
		return err_set(e, -EINVAL, "category: %d is not a category",
		    (int)ev->category);
	if ((rc = buf_check("action", ev->action, sizeof(ev->action),
	    TEXT_ACTION, e)) != 0 ||
	    (rc = buf_check("target", ev->target, sizeof(ev->target),
	    TEXT_ANY, e)) != 0)
		return rc;
	if (audit_level_name(ev->level) == NULL)
		return err_set(e, -EINVAL, "level: %d is not a level",
		    (int)ev->level);
	return buf_check("detail", ev->detail, sizeof(ev->detail), TEXT_ANY, e);
}

/*** Times ***/

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era;
	unsigned yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned)(y - era * 400);
	doy = (153 * (m + (m > 2 ? (unsigned)-3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static unsigned
days_in_month(unsigned y, unsigned m)
{
	static const unsigned dm[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30,
	    31, 30, 31 };

	if (m == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
		return 29;
	return dm[m - 1];
}

int
audit_time_format(int64_t ms, char buf[AUDIT_TIME_LEN + 1])
{
	time_t secs;
	struct tm tm;
	char tmp[64];

	if (ms < 0 || ms > AUDIT_TIME_MAX)
		return -ERANGE;
	secs = (time_t)(ms / 1000);
	if (gmtime_r(&secs, &tm) == NULL)
		return -ERANGE;
	/* In range, every field has its width: the text is AUDIT_TIME_LEN. */
	if (snprintf(tmp, sizeof(tmp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, (int)(ms % 1000)) != AUDIT_TIME_LEN)
		return -ERANGE;
	memcpy(buf, tmp, AUDIT_TIME_LEN + 1);
	return 0;
}

/* n digits at s as a number, or -1. */
static int
digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

int
audit_time_parse(const char *s, int64_t *ms)
{
	int y, mo, d, h, mi, sec, frac = 0, nfrac = 0;
	const char *p;

	if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
	    s[13] != ':' || s[16] != ':')
		return -EINVAL;
	y = digits(s, 4);
	mo = digits(s + 5, 2);
	d = digits(s + 8, 2);
	h = digits(s + 11, 2);
	mi = digits(s + 14, 2);
	sec = digits(s + 17, 2);
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 ||
	    d > (int)days_in_month((unsigned)y, (unsigned)mo) || h < 0 || h > 23 ||
	    mi < 0 || mi > 59 || sec < 0 || sec > 59)
		return -EINVAL;
	p = s + 19;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			if (++nfrac > 3)
				return -EINVAL;
			frac = frac * 10 + (*p - '0');
		}
		if (nfrac == 0)
			return -EINVAL;
		for (int i = nfrac; i < 3; i++)
			frac *= 10;
	}
	if (strcmp(p, "Z") != 0)
		return -EINVAL;
	*ms = ((days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
	    h * 3600 + mi * 60 + sec) * 1000) + frac;
	return 0;
}

int
audit_duration_parse(const char *s, int64_t *ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "d", 86400000 }, { "w", 604800000 },
	};
	int64_t n = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		n = n * 10 + (*p - '0');
		if (n > AUDIT_TIME_MAX)
			return -EINVAL;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].unit) == 0) {
			if (n == 0 || n > AUDIT_TIME_MAX / units[i].ms)
				return -EINVAL;
			*ms = n * units[i].ms;
			return 0;
		}
	}
	return -EINVAL;
}

/*** JSON ***/

/* The text fields: index in audit_field_names, buffer and kind. */
struct text_field {
	int idx;
	size_t off;			/* offsetof the buffer in the event */
	size_t size;
	enum text_kind kind;
};

#define TF(i, m, k) { i, offsetof(struct audit_event, m), \
	sizeof(((struct audit_event *)0)->m), k }
static const struct text_field text_fields[] = {
	TF(F_HOST, host, TEXT_PRINTABLE),
	TF(F_TENANT, tenant, TEXT_TENANT),
	TF(F_JOB, job, TEXT_ID),
	TF(F_SANDBOX, sandbox, TEXT_ID),
	TF(F_ACTION, action, TEXT_ACTION),
	TF(F_TARGET, target, TEXT_ANY),
	TF(F_DETAIL, detail, TEXT_ANY),
};
#undef TF

static const struct text_field *
text_field_of(int idx)
{
	for (size_t i = 0; i < sizeof(text_fields) / sizeof(text_fields[0]); i++)
		if (text_fields[i].idx == idx)
			return &text_fields[i];
	return NULL;
}

json_t *
audit_event_to_json(const struct audit_event *ev)
{
	char t[AUDIT_TIME_LEN + 1];
	json_t *o;

	if (audit_event_check(ev, NULL) != 0 ||
	    audit_time_format(ev->time_ms, t) != 0)
		return NULL;
	o = json_object();
	if (o == NULL)
		return NULL;
	/* jansson keeps insertion order: the fields come out as listed. */
	if (json_object_set_new(o, "time", json_string(t)) != 0 ||
	    json_object_set_new(o, "host", json_string(ev->host)) != 0 ||
	    json_object_set_new(o, "tenant", json_string(ev->tenant)) != 0 ||
	    json_object_set_new(o, "job", json_string(ev->job)) != 0 ||
	    json_object_set_new(o, "sandbox", json_string(ev->sandbox)) != 0 ||
	    json_object_set_new(o, "category",
	    json_string(audit_category_name(ev->category))) != 0 ||
	    json_object_set_new(o, "action", json_string(ev->action)) != 0 ||
	    json_object_set_new(o, "target", json_string(ev->target)) != 0 ||
	    json_object_set_new(o, "allowed", json_boolean(ev->allowed)) != 0 ||
	    json_object_set_new(o, "level",
	    json_string(audit_level_name(ev->level))) != 0 ||
	    json_object_set_new(o, "detail", json_string(ev->detail)) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int
field_index(const char *name, size_t len)
{
	for (int i = 0; i < AUDIT_NFIELDS; i++)
		if (strlen(audit_field_names[i]) == len &&
		    memcmp(audit_field_names[i], name, len) == 0)
			return i;
	return -1;
}

/*
 * Stores the text value of field idx (n bytes at s, not necessarily
 * terminated) into ev after checking it. 0 or -EINVAL naming the field.
 */
static int
field_set(struct audit_event *ev, int idx, const char *s, size_t n,
    bool time_is_ms, struct err *e)
{
	const char *name = audit_field_names[idx];
	const struct text_field *tf;
	char buf[32];
	int rc;

	if (idx == F_TIME || idx == F_CATEGORY || idx == F_LEVEL ||
	    idx == F_ALLOWED) {
		/* Short words: copy to a terminated buffer first. */
		if (n >= sizeof(buf) || memchr(s, '\0', n) != NULL)
			return err_set(e, -EINVAL, "%s: not a valid value", name);
		memcpy(buf, s, n);
		buf[n] = '\0';
	}
	switch (idx) {
	case F_TIME:
		if (time_is_ms) {
			char *end;
			long long v;

			errno = 0;
			v = strtoll(buf, &end, 10);
			if (buf[0] < '0' || buf[0] > '9' || *end != '\0' ||
			    errno != 0 || v > AUDIT_TIME_MAX)
				return err_set(e, -EINVAL, "time: '%s' is not epoch "
				    "milliseconds", buf);
			ev->time_ms = v;
		} else if (audit_time_parse(buf, &ev->time_ms) != 0) {
			return err_set(e, -EINVAL, "time: '%s' is not RFC 3339 UTC "
			    "(YYYY-MM-DDTHH:MM:SS.mmmZ)", buf);
		}
		return 0;
	case F_CATEGORY:
		if (audit_category_parse(buf, &ev->category) != 0)
			return err_set(e, -EINVAL, "category: '%s' is not a category",
			    buf);
		return 0;
	case F_LEVEL:
		if (audit_level_parse(buf, &ev->level) != 0)
			return err_set(e, -EINVAL, "level: '%s' is not info, notice, "
			    "warning or alert", buf);
		return 0;
	case F_ALLOWED:
		if (strcmp(buf, "true") == 0)
			ev->allowed = true;
		else if (strcmp(buf, "false") == 0)
			ev->allowed = false;
		else
			return err_set(e, -EINVAL, "allowed: '%s' is not true or false",
			    buf);
		return 0;
	default:
		break;
	}
	if ((tf = text_field_of(idx)) == NULL)
		return err_set(e, -EINVAL, "%s: not a text field", name);
	if ((rc = text_check(name, s, n, tf->size - 1, tf->kind, e)) != 0)
		return rc;
	memcpy((char *)ev + tf->off, s, n);
	((char *)ev)[tf->off + n] = '\0';
	return 0;
}

/* Names the first field of seen[] still false. */
static int
missing_field(const bool *seen, struct err *e)
{
	for (int i = 0; i < AUDIT_NFIELDS; i++)
		if (!seen[i])
			return err_set(e, -EINVAL, "%s: missing", audit_field_names[i]);
	return 0;
}

int
audit_event_from_json(const json_t *obj, struct audit_event *ev,
    struct err *e)
{
	bool seen[AUDIT_NFIELDS] = { false };
	const char *key;
	json_t *val;
	int rc;

	memset(ev, 0, sizeof(*ev));
	if (!json_is_object(obj))
		return err_set(e, -EINVAL, "event: not a JSON object");
	/* json_object_foreach does not modify obj; the macro is not const. */
	json_object_foreach((json_t *)(uintptr_t)obj, key, val) {
		int idx = field_index(key, strlen(key));

		if (idx < 0)
			return err_set(e, -EINVAL, "%.64s: unknown field", key);
		seen[idx] = true;
		if (idx == F_ALLOWED) {
			if (!json_is_boolean(val))
				return err_set(e, -EINVAL, "allowed: not a boolean");
			ev->allowed = json_is_true(val);
			continue;
		}
		if (!json_is_string(val))
			return err_set(e, -EINVAL, "%s: not a string", key);
		if ((rc = field_set(ev, idx, json_string_value(val),
		    json_string_length(val), false, e)) != 0)
			return rc;
	}
	return missing_field(seen, e);
}

/*** Fields ***/

int
audit_event_to_fields(const struct audit_event *ev, struct audit_fields *f,
    struct err *e)
{
	int rc;

	if ((rc = audit_event_check(ev, e)) != 0)
		return rc;
	snprintf(f->time_buf, sizeof(f->time_buf), "%lld", (long long)ev->time_ms);
	f->value[F_TIME] = f->time_buf;
	f->value[F_HOST] = ev->host;
	f->value[F_TENANT] = ev->tenant;
	f->value[F_JOB] = ev->job;
	f->value[F_SANDBOX] = ev->sandbox;
	f->value[F_CATEGORY] = audit_category_name(ev->category);
	f->value[F_ACTION] = ev->action;
	f->value[F_TARGET] = ev->target;
	f->value[F_ALLOWED] = ev->allowed ? "true" : "false";
	f->value[F_LEVEL] = audit_level_name(ev->level);
	f->value[F_DETAIL] = ev->detail;
	for (int i = 0; i < AUDIT_NFIELDS; i++) {
		f->name[i] = audit_field_names[i];
		f->name_len[i] = strlen(f->name[i]);
		f->value_len[i] = strlen(f->value[i]);
	}
	return 0;
}

int
audit_event_from_fields(struct audit_event *ev, size_t n,
    const char *const *names, const size_t *name_lens,
    const char *const *values, const size_t *value_lens, struct err *e)
{
	bool seen[AUDIT_NFIELDS] = { false };
	int rc;

	memset(ev, 0, sizeof(*ev));
	if (n > AUDIT_NFIELDS)
		return err_set(e, -EINVAL, "entry: %zu fields, the model has %d", n,
		    AUDIT_NFIELDS);
	for (size_t i = 0; i < n; i++) {
		int idx = field_index(names[i], name_lens[i]);

		if (idx < 0)
			return err_set(e, -EINVAL, "%.*s: unknown field",
			    (int)(name_lens[i] > 64 ? 64 : name_lens[i]), names[i]);
		if (seen[idx])
			return err_set(e, -EINVAL, "%s: given twice",
			    audit_field_names[idx]);
		seen[idx] = true;
		if ((rc = field_set(ev, idx, values[i], value_lens[i], true, e)) != 0)
			return rc;
	}
	return missing_field(seen, e);
}

int
audit_stream_key(char *buf, size_t size, const char *prefix,
    const char *tenant)
{
	int n = snprintf(buf, size, "%s:{%s}:audit", prefix, tenant);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return n;
}

/*** Filters ***/

bool
audit_filter_match(const struct audit_filter *f, const struct audit_event *ev)
{
	if (f->tenant != NULL && strcmp(f->tenant, ev->tenant) != 0)
		return false;
	if (f->job != NULL && strcmp(f->job, ev->job) != 0)
		return false;
	if (f->sandbox != NULL && strcmp(f->sandbox, ev->sandbox) != 0)
		return false;
	if (f->categories != 0 && (f->categories & (1u << ev->category)) == 0)
		return false;
	if (ev->level < f->level_min)
		return false;
	if ((f->outcome == AUDIT_ALLOWED_ONLY && !ev->allowed) ||
	    (f->outcome == AUDIT_DENIED_ONLY && ev->allowed))
		return false;
	if (f->since_ms > 0 && ev->time_ms < f->since_ms)
		return false;
	if (f->until_ms > 0 && ev->time_ms >= f->until_ms)
		return false;
	return true;
}

/*** Summaries ***/

/* Groups kept sorted by (category, action, allowed) for binary search. */
struct audit_summary {
	struct audit_count *g;
	size_t n, cap;
};

static int
count_cmp(const struct audit_count *a, enum audit_category c,
    const char *action, bool allowed)
{
	int r;

	if (a->category != c)
		return a->category < c ? -1 : 1;
	if ((r = strcmp(a->action, action)) != 0)
		return r;
	if (a->allowed != allowed)
		return a->allowed ? 1 : -1;
	return 0;
}

struct audit_summary *
audit_summary_new(void)
{
	return xcalloc(1, sizeof(struct audit_summary));
}

int
audit_summary_add_count(struct audit_summary *s, const struct audit_count *c)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = count_cmp(&s->g[mid], c->category, c->action, c->allowed);

		if (r == 0) {
			s->g[mid].count += c->count;
			return 0;
		}
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (s->n >= AUDIT_SUMMARY_GROUPS)
		return -ENOBUFS;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 32;
		s->g = xreallocarray(s->g, s->cap, sizeof(*s->g));
	}
	memmove(&s->g[lo + 1], &s->g[lo], (s->n - lo) * sizeof(*s->g));
	memset(&s->g[lo], 0, sizeof(s->g[lo]));
	s->g[lo].category = c->category;
	audit_text_set(s->g[lo].action, sizeof(s->g[lo].action), c->action);
	s->g[lo].allowed = c->allowed;
	s->g[lo].count = c->count;
	s->n++;
	return 0;
}

int
audit_summary_add(struct audit_summary *s, const struct audit_event *ev)
{
	struct audit_count c = { .category = ev->category,
	    .allowed = ev->allowed, .count = 1 };

	audit_text_set(c.action, sizeof(c.action), ev->action);
	return audit_summary_add_count(s, &c);
}

int
audit_summary_each(const struct audit_summary *s, audit_count_cb cb, void *arg)
{
	int rc;

	for (size_t i = 0; i < s->n; i++)
		if ((rc = cb(&s->g[i], arg)) != 0)
			return rc;
	return 0;
}

void
audit_summary_free(struct audit_summary *s)
{
	if (s == NULL)
		return;
	free(s->g);
	free(s);
}
