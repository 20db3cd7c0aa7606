/*
 * tenant.c - a tenant's settings: defaults, strict field-by-field parsing,
 * the flat Redis hash and JSON forms, key names and ACL rules. Pure.
 *
 * DESIGN. One table (fields[]) lists every setting with its hash name, its
 * kind, where it lives in struct tenant_conf and its bounds. The hash
 * decoder, the JSON decoder and `sandq tenant add --weight 3` all go
 * through tenant_conf_set(), so a value is checked in exactly one place and
 * every refusal names the field the same way. Decoding is strict: settings
 * are written only by admins, so anything unexpected in them (an unknown
 * field, a value out of bounds, a format version this code does not know)
 * is a broken or foreign record, refused rather than guessed at.
 *
 * The ACL rules (tenant_acl_rules) are the security boundary between
 * tenants; docs/tenants.md "ACL rules" explains each one. They grant
 * exactly the commands libsandq sends, each on the narrowest key pattern
 * that still works, so a tenant can submit only to its own job stream and
 * read only its own results, and can name no key outside PREFIX:{T}:*.
 *
 * Sections: field table, the record, hash form, JSON form, Redis names.
 */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/ref.h"
#include "../proto/keys.h"
#include "tenant.h"

/*** Field table ***/

#define STR_(x) #x
#define NUM_STR(x) STR_(x)

enum tfield_kind {
	TF_VERSION,		/* "v": the format version, only in the hash */
	TF_U32,			/* uint32_t, decimal */
	TF_RATE,		/* double, decimal */
	TF_LIMIT,		/* uint64_t in ceiling; sizes take k/M/G/T */
	TF_NET,			/* comma-separated modes; "" = the host's */
	TF_QUOTA,		/* uint64_t size */
	TF_DENY,		/* patterns separated by '\n' */
	TF_IMAGES,		/* image_sources patterns separated by ',' */
};

struct tfield {
	const char *name;		/* hash field; JSON member after the dot */
	enum tfield_kind kind;
	size_t off;			/* offsetof(struct tenant_conf, ...) */
	uint64_t min;			/* smallest non-zero value */
	uint64_t max;			/* largest value */
	bool size;			/* takes a size suffix */
};

#define U32(n, lo, hi) { #n, TF_U32, offsetof(struct tenant_conf, n), lo, hi, false }
/*
 * The bounds of the ceilings are those of config.c's [limits] table: a
 * tenant's ceiling can only lower the host's (0 keeps it), never exceed
 * what the host would accept. Keep the two in step.
 */
#define CEIL(n, lo, hi, sz) { "ceiling." #n, TF_LIMIT, \
	offsetof(struct tenant_conf, ceiling.n), lo, hi, sz }

static const struct tfield fields[] = {
	{ "v", TF_VERSION, 0, TENANT_HASH_VERSION, TENANT_HASH_VERSION, false },
	U32(weight, 1, TENANT_WEIGHT_MAX),
	U32(max_running, 0, TENANT_COUNT_MAX),
	U32(max_queued, 0, TENANT_COUNT_MAX),
	{ "rate", TF_RATE, offsetof(struct tenant_conf, rate), 0, 0, false },
	U32(burst, 0, TENANT_BURST_MAX),
	CEIL(wall_ms, 1, 86400000, false),
	CEIL(cpu_ms, 1, 86400000, false),
	CEIL(memory_bytes, 1ull << 20, 64ull << 40, true),
	CEIL(pids, 1, 4194304, false),
	CEIL(output_bytes, 1ull << 10, 1ull << 30, true),
	CEIL(disk_bytes, 64ull << 10, 1ull << 40, true),
	CEIL(files, 16, 1048576, false),
	{ "net", TF_NET, offsetof(struct tenant_conf, net_mask), 0, 0, false },
	{ "storage_quota_bytes", TF_QUOTA,
	  offsetof(struct tenant_conf, storage_quota_bytes), 1, TENANT_QUOTA_MAX, true },
	{ "deny", TF_DENY, 0, 0, 0, false },
	{ "image_sources", TF_IMAGES, 0, 0, 0, false },
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
_Static_assert(NFIELDS <= TENANT_FIELDS_MAX, "struct tenant_hash is too small");

/* Spelling of each enum job_net; must match job_net_parse(). */
static const char *const net_names[] = { [NET_NONE] = "none", [NET_UNIX] = "unix",
	[NET_ALLOW] = "allow" };
_Static_assert(sizeof(net_names) / sizeof(net_names[0]) == NET__COUNT,
    "a network mode has no name");

/* Longest value of a field other than deny: a few numbers or mode names. */
#define VALUE_MAX 64
#define DENY_TEXT_MAX (TENANT_DENY_MAX * (TENANT_DENY_LEN_MAX + 1))
/* Longest image_sources text: every pattern at its longest, a ',' after. */
#define IMAGES_TEXT_MAX (TENANT_IMAGE_SOURCES_MAX * (IMG_REF_MAX + 1))

static const struct tfield *
field_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NFIELDS; i++)
		if (strlen(fields[i].name) == len && memcmp(fields[i].name, name, len) == 0)
			return &fields[i];
	return NULL;
}

/*
 * Copies a value for a message: at most 64 bytes, control and non-ASCII
 * bytes as '?', so a hostile record cannot put escapes into a terminal.
 */
static const char *
shown(const char *v, size_t len, char *buf, size_t size)
{
	size_t i;

	for (i = 0; i < len && i + 1 < size && i < 64; i++)
		buf[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
	buf[i] = '\0';
	return buf;
}

/*** The record ***/

int
tenant_conf_init(struct tenant_conf *t, const char *name, struct err *e)
{
	char b[72];

	memset(t, 0, sizeof(*t));
	t->weight = 1;
	if (name == NULL || !key_tenant_valid(name))
		return err_set(e, -EINVAL, "tenant name '%s': expected 1..%d bytes of "
		    "[A-Za-z0-9_-]", name ? shown(name, strlen(name), b, sizeof(b)) : "",
		    TENANT_NAME_MAX);
	memcpy(t->name, name, strlen(name) + 1);
	return 0;
}

static void
strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static char **
strv_dup(char *const *v, size_t n)
{
	char **out = n > 0 ? xcalloc(n, sizeof(*out)) : NULL;

	for (size_t i = 0; i < n; i++)
		out[i] = xstrdup(v[i]);
	return out;
}

void
tenant_conf_free(struct tenant_conf *t)
{
	if (t == NULL)
		return;
	tenant_deny_clear(t);
	strv_free(t->image_sources, t->nimage_sources);
	t->image_sources = NULL;
	t->nimage_sources = 0;
}

void
tenant_conf_copy(struct tenant_conf *dst, const struct tenant_conf *src)
{
	*dst = *src;
	dst->deny = strv_dup(src->deny, src->ndeny);
	dst->image_sources = strv_dup(src->image_sources, src->nimage_sources);
}

void
tenant_deny_clear(struct tenant_conf *t)
{
	for (size_t i = 0; i < t->ndeny; i++)
		free(t->deny[i]);
	free(t->deny);
	t->deny = NULL;
	t->ndeny = 0;
}

/*
 * A deny pattern: 1..TENANT_DENY_LEN_MAX bytes of valid UTF-8 (it goes
 * into JSON) without control characters ('\n' separates patterns in the
 * hash). NULL or the problem.
 */
static const char *
deny_problem(const char *p, size_t len)
{
	json_t *s;

	if (len == 0)
		return "empty pattern";
	if (len > TENANT_DENY_LEN_MAX)
		return "pattern longer than " NUM_STR(TENANT_DENY_LEN_MAX) " bytes";
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			return "pattern holds a control character";
	if ((s = json_stringn(p, len)) == NULL)
		return "pattern is not valid UTF-8";
	json_decref(s);
	return NULL;
}

int
tenant_deny_add(struct tenant_conf *t, const char *pattern, struct err *e)
{
	const char *why;

	if (t->ndeny >= TENANT_DENY_MAX)
		return err_set(e, -EINVAL, "field 'deny': more than %d patterns",
		    TENANT_DENY_MAX);
	if ((why = deny_problem(pattern, strlen(pattern))) != NULL)
		return err_set(e, -EINVAL, "field 'deny': %s", why);
	t->deny = xreallocarray(t->deny, t->ndeny + 1, sizeof(*t->deny));
	t->deny[t->ndeny++] = xstrdup(pattern);
	return 0;
}

/* Splits "a\nb" into a fresh list; on failure nothing is allocated. */
static int
deny_parse(const char *v, size_t len, char ***out, size_t *nout, struct err *e)
{
	char **list = NULL;
	size_t n = 0, start = 0;
	const char *why;

	*out = NULL;
	*nout = 0;
	if (len == 0)
		return 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && v[i] != '\n')
			continue;
		if (n >= TENANT_DENY_MAX) {
			err_set(e, -EINVAL, "field 'deny': more than %d patterns",
			    TENANT_DENY_MAX);
			goto out_free;
		}
		if ((why = deny_problem(v + start, i - start)) != NULL) {
			err_set(e, -EINVAL, "field 'deny': pattern %zu: %s", n + 1, why);
			goto out_free;
		}
		list = xreallocarray(list, n + 1, sizeof(*list));
		list[n++] = xmemdup0(v + start, i - start);
		start = i + 1;
	}
	*out = list;
	*nout = n;
	return 0;

out_free:
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return -EINVAL;
}

/*
 * Checks a list of image_sources patterns: at most
 * TENANT_IMAGE_SOURCES_MAX, each one images/ref.h reads (its message
 * escapes what it shows: a record's bytes may be anything), none twice.
 */
static int
sources_check(char *const *list, size_t n, struct err *e)
{
	struct img_pattern p;
	struct err pe;

	if (n > TENANT_IMAGE_SOURCES_MAX)
		return err_set(e, -EINVAL, "field 'image_sources': more than %d patterns",
		    TENANT_IMAGE_SOURCES_MAX);
	for (size_t i = 0; i < n; i++) {
		if (img_pattern_parse(list[i], &p, &pe) < 0)
			return err_set(e, -EINVAL, "field 'image_sources': pattern %zu: %s",
			    i + 1, pe.msg);
		for (size_t k = 0; k < i; k++)
			if (strcmp(list[k], list[i]) == 0)
				return err_set(e, -EINVAL, "field 'image_sources': pattern "
				    "%zu is listed twice", i + 1);
	}
	return 0;
}

/*
 * Splits "a, b" (',' between patterns, spaces around them) into a fresh,
 * checked list; blank text is the empty list. On failure nothing is
 * allocated.
 */
static int
sources_parse(const char *v, size_t len, char ***out, size_t *nout, struct err *e)
{
	char **list = NULL;
	size_t n = 0, start = 0;

	*out = NULL;
	*nout = 0;
	while (start < len && v[start] == ' ')
		start++;
	if (start == len)
		return 0;
	for (size_t i = start; i <= len; i++) {
		size_t a = start, b = i;

		if (i < len && v[i] != ',')
			continue;
		while (a < b && v[a] == ' ')
			a++;
		while (b > a && v[b - 1] == ' ')
			b--;
		if (b == a || b - a > IMG_REF_MAX || n >= TENANT_IMAGE_SOURCES_MAX) {
			err_set(e, -EINVAL, "field 'image_sources': %s", b == a ?
			    "an empty pattern" : b - a > IMG_REF_MAX ? "a pattern longer "
			    "than " NUM_STR(IMG_REF_MAX) " bytes" : "more than "
			    NUM_STR(TENANT_IMAGE_SOURCES_MAX) " patterns");
			goto out_free;
		}
		list = xreallocarray(list, n + 1, sizeof(*list));
		list[n++] = xmemdup0(v + a, b - a);
		start = i + 1;
	}
	if (sources_check(list, n, e) < 0)
		goto out_free;
	*out = list;
	*nout = n;
	return 0;

out_free:
	strv_free(list, n);
	return -EINVAL;
}

/* Makes list (owned, checked) t's image_sources. */
static void
sources_take(struct tenant_conf *t, char **list, size_t n)
{
	strv_free(t->image_sources, t->nimage_sources);
	t->image_sources = list;
	t->nimage_sources = n;
}

/*
 * A rate: decimal digits with an optional fraction or exponent, as strtod
 * reads them, but never "inf", "nan", hex or a sign.
 */
static int
rate_parse(const char *s, double *out)
{
	char *end;
	double d;

	if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '.') || strpbrk(s, "xXnN") != NULL)
		return -EINVAL;
	errno = 0;
	d = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !isfinite(d) || d < 0 || d > TENANT_RATE_MAX)
		return -EINVAL;
	*out = d;
	return 0;
}

/* "none,unix" (spaces around names allowed) into a mask; "" is 0. */
static int
net_parse(const char *s, uint32_t *out)
{
	uint32_t mask = 0;
	const char *p = s;

	while (*p == ' ')
		p++;
	if (*p == '\0') {
		*out = 0;
		return 0;
	}
	for (;;) {
		size_t n = strcspn(p, ", ");
		bool found = false;

		for (size_t i = 0; i < NET__COUNT; i++) {
			if (strlen(net_names[i]) == n && memcmp(net_names[i], p, n) == 0) {
				if (mask & (1u << i))
					return -EINVAL;	/* listed twice */
				mask |= 1u << i;
				found = true;
			}
		}
		if (!found)
			return -EINVAL;
		p += n;
		while (*p == ' ')
			p++;
		if (*p == '\0')
			break;
		if (*p != ',')
			return -EINVAL;
		p++;
		while (*p == ' ')
			p++;
	}
	*out = mask;
	return 0;
}

/* Parses an integer or size field into *v within f's bounds (0 always). */
static int
number_parse(const struct tfield *f, const char *s, uint64_t *v)
{
	int64_t i;

	/* strtoll would skip blanks and take a sign: digits only. */
	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	if (f->size) {
		if (parse_size(s, v) < 0)
			return -EINVAL;
	} else {
		if (parse_i64(s, 0, INT64_MAX, &i) < 0)
			return -EINVAL;
		*v = (uint64_t)i;
	}
	if ((*v != 0 || (f->min > 0 && f->kind == TF_U32)) &&
	    (*v < f->min || *v > f->max))
		return -ERANGE;
	return 0;
}

/* The expectation of field f, for messages. */
static void
expected(const struct tfield *f, char *buf, size_t size)
{
	switch (f->kind) {
	case TF_VERSION:
		snprintf(buf, size, "expected %d", TENANT_HASH_VERSION);
		break;
	case TF_RATE:
		snprintf(buf, size, "expected jobs per second, 0 (no cap) to %.0f",
		    TENANT_RATE_MAX);
		break;
	case TF_NET:
		snprintf(buf, size, "expected a comma-separated list of none, unix, allow "
		    "(each once), or empty for the host's");
		break;
	default:
		if (f->min > 0 && f->kind == TF_U32)
			snprintf(buf, size, "must be %" PRIu64 "..%" PRIu64, f->min, f->max);
		else
			snprintf(buf, size, "must be 0 or %" PRIu64 "..%" PRIu64 "%s",
			    f->min, f->max, f->size ? " bytes (k/M/G/T suffixes)" : "");
		break;
	}
}

int
tenant_conf_set(struct tenant_conf *t, const char *field, size_t flen,
    const char *value, size_t vlen, struct err *e)
{
	const struct tfield *f = field_find(field, flen);
	char v[VALUE_MAX + 1], b[72], exp[128];
	uint64_t u = 0;
	double d = 0;
	uint32_t mask = 0;
	int rc = 0;

	if (f == NULL)
		return err_set(e, -EINVAL, "unknown field '%s'", shown(field, flen, b,
		    sizeof(b)));
	if (memchr(value, '\0', vlen) != NULL)
		return err_set(e, -EINVAL, "field '%s': holds a NUL byte", f->name);
	if (f->kind == TF_DENY) {
		char **list = NULL;
		size_t n = 0;

		if (vlen > DENY_TEXT_MAX)
			return err_set(e, -EINVAL, "field 'deny': longer than %d bytes",
			    DENY_TEXT_MAX);
		if (deny_parse(value, vlen, &list, &n, e) < 0)
			return -EINVAL;
		tenant_deny_clear(t);
		t->deny = list;
		t->ndeny = n;
		return 0;
	}
	if (f->kind == TF_IMAGES) {
		char **list = NULL;
		size_t n = 0;

		if (vlen > IMAGES_TEXT_MAX)
			return err_set(e, -EINVAL, "field 'image_sources': longer than %d "
			    "bytes", IMAGES_TEXT_MAX);
		if (sources_parse(value, vlen, &list, &n, e) < 0)
			return -EINVAL;
		sources_take(t, list, n);
		return 0;
	}
	expected(f, exp, sizeof(exp));
	if (vlen > VALUE_MAX)
		return err_set(e, -EINVAL, "field '%s': %s, got %zu bytes", f->name, exp,
		    vlen);
	memcpy(v, value, vlen);
	v[vlen] = '\0';
	switch (f->kind) {
	case TF_VERSION:
		if (strcmp(v, NUM_STR(TENANT_HASH_VERSION)) != 0)
			rc = -EINVAL;
		break;
	case TF_RATE:
		rc = rate_parse(v, &d);
		break;
	case TF_NET:
		rc = net_parse(v, &mask);
		break;
	default:
		rc = number_parse(f, v, &u);
		break;
	}
	if (rc < 0)
		return err_set(e, -EINVAL, "field '%s': %s, got '%s'", f->name, exp,
		    shown(v, vlen, b, sizeof(b)));
	switch (f->kind) {
	case TF_U32:
		*(uint32_t *)(void *)((char *)t + f->off) = (uint32_t)u;
		break;
	case TF_LIMIT:
	case TF_QUOTA:
		*(uint64_t *)(void *)((char *)t + f->off) = u;
		break;
	case TF_RATE:
		t->rate = d;
		break;
	case TF_NET:
		t->net_mask = mask;
		break;
	default:
		break;
	}
	return 0;
}

/* Reads field f of t as a number (kinds TF_U32, TF_LIMIT, TF_QUOTA). */
static uint64_t
field_get(const struct tenant_conf *t, const struct tfield *f)
{
	const char *p = (const char *)t + f->off;

	if (f->kind == TF_U32)
		return *(const uint32_t *)(const void *)p;
	return *(const uint64_t *)(const void *)p;
}

int
tenant_conf_check(const struct tenant_conf *t, struct err *e)
{
	char b[128];

	if (!key_tenant_valid(t->name))
		return err_set(e, -EINVAL, "tenant name '%s': expected 1..%d bytes of "
		    "[A-Za-z0-9_-]", shown(t->name, strnlen(t->name, sizeof(t->name)),
		    b, sizeof(b)), TENANT_NAME_MAX);
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct tfield *f = &fields[i];
		uint64_t v;

		if (f->kind != TF_U32 && f->kind != TF_LIMIT && f->kind != TF_QUOTA)
			continue;
		v = field_get(t, f);
		if ((v != 0 || (f->kind == TF_U32 && f->min > 0)) &&
		    (v < f->min || v > f->max)) {
			expected(f, b, sizeof(b));
			return err_set(e, -EINVAL, "field '%s': %s, got %" PRIu64, f->name,
			    b, v);
		}
	}
	if (!isfinite(t->rate) || t->rate < 0 || t->rate > TENANT_RATE_MAX)
		return err_set(e, -EINVAL, "field 'rate': out of range");
	if (t->net_mask >= (1u << NET__COUNT))
		return err_set(e, -EINVAL, "field 'net': unknown mode bit");
	if (t->ndeny > TENANT_DENY_MAX)
		return err_set(e, -EINVAL, "field 'deny': more than %d patterns",
		    TENANT_DENY_MAX);
	for (size_t i = 0; i < t->ndeny; i++) {
		const char *why = deny_problem(t->deny[i], strlen(t->deny[i]));

		if (why != NULL)
			return err_set(e, -EINVAL, "field 'deny': pattern %zu: %s", i + 1, why);
	}
	return sources_check(t->image_sources, t->nimage_sources, e);
}

uint32_t
tenant_burst(const struct tenant_conf *t)
{
	uint32_t whole;

	if (t->burst != 0)
		return t->burst;
	whole = (uint32_t)t->rate;
	if ((double)whole < t->rate)
		whole++;
	return whole > 0 ? whole : 1;
}

bool
tenant_net_allowed(const struct tenant_conf *t, enum job_net n)
{
	if ((unsigned)n >= NET__COUNT)
		return false;
	return t->net_mask == 0 || (t->net_mask & (1u << n)) != 0;
}

int
tenant_deny_match(const struct tenant_conf *t, const char *text)
{
	for (size_t i = 0; i < t->ndeny; i++)
		if (fnmatch(t->deny[i], text, 0) == 0)
			return (int)i;
	return -1;
}

/*** Hash form ***/

/* The image_sources joined by ',' (owned). */
static char *
sources_format(const struct tenant_conf *t)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);

	if (f == NULL)
		fatal("open_memstream");
	for (size_t i = 0; i < t->nimage_sources; i++)
		fprintf(f, "%s%s", i ? "," : "", t->image_sources[i]);
	fclose(f);
	return s;
}

/*
 * The rate as the shortest of "%.15g" and "%.17g" that reads back as the
 * same double: "2.5" rather than "2.5000000000000000", and still exact.
 */
static void
rate_format(double r, char *buf, size_t size)
{
	snprintf(buf, size, "%.15g", r);
	if (strtod(buf, NULL) != r)
		snprintf(buf, size, "%.17g", r);
}

/* The modes of mask, "none,unix", or "" for 0. */
static void
net_format(uint32_t mask, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < NET__COUNT; i++)
		if (mask & (1u << i))
			n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? "," : "",
			    net_names[i]);
}

/* The deny list joined by '\n' (owned). */
static char *
deny_format(const struct tenant_conf *t)
{
	size_t len = 0, n = 0;
	char *s;

	for (size_t i = 0; i < t->ndeny; i++)
		len += strlen(t->deny[i]) + 1;
	s = xmalloc(len + 1);
	s[0] = '\0';
	for (size_t i = 0; i < t->ndeny; i++) {
		size_t l = strlen(t->deny[i]);

		if (i > 0)
			s[n++] = '\n';
		memcpy(s + n, t->deny[i], l);
		n += l;
	}
	s[n] = '\0';
	return s;
}

void
tenant_hash_encode(const struct tenant_conf *t, struct tenant_hash *h)
{
	char buf[VALUE_MAX + 1];

	memset(h, 0, sizeof(*h));
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct tfield *f = &fields[i];

		switch (f->kind) {
		case TF_VERSION:
			snprintf(buf, sizeof(buf), "%d", TENANT_HASH_VERSION);
			break;
		case TF_RATE:
			rate_format(t->rate, buf, sizeof(buf));
			break;
		case TF_NET:
			net_format(t->net_mask, buf, sizeof(buf));
			break;
		case TF_DENY:
			h->field[h->n] = f->name;
			h->value[h->n++] = deny_format(t);
			continue;
		case TF_IMAGES:
			h->field[h->n] = f->name;
			h->value[h->n++] = sources_format(t);
			continue;
		default:
			snprintf(buf, sizeof(buf), "%" PRIu64, field_get(t, f));
			break;
		}
		h->field[h->n] = f->name;
		h->value[h->n++] = xstrdup(buf);
	}
}

void
tenant_hash_free(struct tenant_hash *h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < h->n; i++)
		free(h->value[i]);
	memset(h, 0, sizeof(*h));
}

int
tenant_hash_decode(struct tenant_conf *t, const char *name,
    const char *const *flds, const size_t *flens,
    const char *const *values, const size_t *vlens, size_t n, struct err *e)
{
	char b[72];
	int rc;

	if ((rc = tenant_conf_init(t, name, e)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if ((rc = tenant_conf_set(t, flds[i], flens[i], values[i], vlens[i], e)) < 0)
			goto out_free;
	}
	if ((rc = tenant_conf_check(t, e)) < 0)
		goto out_free;
	return 0;

out_free:
	/* Prefix the tenant, so a dispatcher's log line says whose record. */
	snprintf(b, sizeof(b), "%s", t->name);
	{
		char msg[sizeof(e->msg)];

		snprintf(msg, sizeof(msg), "%s", e->msg);
		err_set(e, rc, "tenant '%s': %s", b, msg);
	}
	tenant_conf_free(t);
	return rc;
}

/*** JSON form ***/

json_t *
tenant_json_encode(const struct tenant_conf *t)
{
	json_t *o = json_object(), *ceil = json_object(), *deny = json_array();
	json_t *images = json_array();

	json_object_set_new(o, "name", json_string(t->name));
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct tfield *f = &fields[i];

		switch (f->kind) {
		case TF_U32:
		case TF_QUOTA:
			json_object_set_new(o, f->name, json_integer((json_int_t)field_get(t, f)));
			break;
		case TF_LIMIT:
			json_object_set_new(ceil, f->name + strlen("ceiling."),
			    json_integer((json_int_t)field_get(t, f)));
			break;
		case TF_RATE:
			json_object_set_new(o, "rate", json_real(t->rate));
			break;
		case TF_NET:
			if (t->net_mask == 0) {
				json_object_set_new(o, "net", json_null());
			} else {
				json_t *a = json_array();

				for (size_t k = 0; k < NET__COUNT; k++)
					if (t->net_mask & (1u << k))
						json_array_append_new(a, json_string(net_names[k]));
				json_object_set_new(o, "net", a);
			}
			break;
		default:
			break;
		}
	}
	json_object_set_new(o, "ceiling", ceil);
	/* Patterns are valid UTF-8: tenant_deny_add() and deny_parse() check. */
	for (size_t i = 0; i < t->ndeny; i++)
		json_array_append_new(deny, json_string(t->deny[i]));
	json_object_set_new(o, "deny", deny);
	/* Patterns are printable ASCII: sources_check() holds them to it. */
	for (size_t i = 0; i < t->nimage_sources; i++)
		json_array_append_new(images, json_string(t->image_sources[i]));
	json_object_set_new(o, "image_sources", images);
	return o;
}

/* Sets field name from a JSON integer or real through tenant_conf_set(). */
static int
json_number_set(struct tenant_conf *t, const char *name, const json_t *v,
    struct err *e)
{
	char buf[64];

	if (json_is_integer(v) && json_integer_value(v) >= 0)
		snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else if (json_is_real(v) && strcmp(name, "rate") == 0)
		snprintf(buf, sizeof(buf), "%.17g", json_real_value(v));
	else
		return err_set(e, -EINVAL, "field '%s': expected a %snumber", name,
		    strcmp(name, "rate") == 0 ? "" : "non-negative whole ");
	return tenant_conf_set(t, name, strlen(name), buf, strlen(buf), e);
}

static int
json_decode_member(struct tenant_conf *t, const char *key, const json_t *v,
    struct err *e)
{
	char b[72];
	const char *ck;
	const json_t *cv;
	size_t i;
	int rc;

	if (strcmp(key, "name") == 0)
		return 0;	/* read first, by tenant_json_decode() */
	if (strcmp(key, "ceiling") == 0) {
		if (!json_is_object(v))
			return err_set(e, -EINVAL, "field 'ceiling': expected an object");
		json_object_foreach((json_t *)(uintptr_t)v, ck, cv) {
			char name[64];

			snprintf(name, sizeof(name), "ceiling.%.40s", ck);
			if (field_find(name, strlen(name)) == NULL ||
			    strlen(ck) > 40)
				return err_set(e, -EINVAL, "unknown field 'ceiling.%s'",
				    shown(ck, strlen(ck), b, sizeof(b)));
			if ((rc = json_number_set(t, name, cv, e)) < 0)
				return rc;
		}
		return 0;
	}
	if (strcmp(key, "net") == 0) {
		uint32_t mask = 0;

		if (json_is_null(v)) {
			t->net_mask = 0;
			return 0;
		}
		if (!json_is_array(v) || json_array_size(v) == 0)
			return err_set(e, -EINVAL, "field 'net': expected a non-empty "
			    "array of modes or null");
		json_array_foreach(v, i, cv) {
			enum job_net n;

			if (!json_is_string(cv) || job_net_parse(json_string_value(cv), &n) < 0 ||
			    (mask & (1u << n)))
				return err_set(e, -EINVAL, "field 'net': expected none or "
				    "unix, each once");
			mask |= 1u << n;
		}
		t->net_mask = mask;
		return 0;
	}
	if (strcmp(key, "deny") == 0) {
		if (!json_is_array(v))
			return err_set(e, -EINVAL, "field 'deny': expected an array");
		tenant_deny_clear(t);
		json_array_foreach(v, i, cv) {
			if (!json_is_string(cv) || strlen(json_string_value(cv)) !=
			    json_string_length(cv))
				return err_set(e, -EINVAL, "field 'deny': expected strings "
				    "without NUL");
			if ((rc = tenant_deny_add(t, json_string_value(cv), e)) < 0)
				return rc;
		}
		return 0;
	}
	if (strcmp(key, "image_sources") == 0) {
		char **list = NULL;
		size_t n = 0;

		if (!json_is_array(v))
			return err_set(e, -EINVAL, "field 'image_sources': expected an array");
		if (json_array_size(v) > TENANT_IMAGE_SOURCES_MAX)
			return err_set(e, -EINVAL, "field 'image_sources': more than %d "
			    "patterns", TENANT_IMAGE_SOURCES_MAX);
		json_array_foreach(v, i, cv) {
			if (!json_is_string(cv) || strlen(json_string_value(cv)) !=
			    json_string_length(cv)) {
				strv_free(list, n);
				return err_set(e, -EINVAL, "field 'image_sources': expected "
				    "strings without NUL");
			}
			list = xreallocarray(list, n + 1, sizeof(*list));
			list[n++] = xstrdup(json_string_value(cv));
		}
		if (sources_check(list, n, e) < 0) {
			strv_free(list, n);
			return -EINVAL;
		}
		sources_take(t, list, n);
		return 0;
	}
	if (strcmp(key, "v") == 0 || field_find(key, strlen(key)) == NULL ||
	    strncmp(key, "ceiling.", 8) == 0)
		return err_set(e, -EINVAL, "unknown field '%s'", shown(key, strlen(key),
		    b, sizeof(b)));
	return json_number_set(t, key, v, e);
}

int
tenant_json_decode(struct tenant_conf *t, const json_t *o, struct err *e)
{
	const json_t *name = json_object_get(o, "name"), *v;
	const char *key;
	int rc;

	memset(t, 0, sizeof(*t));
	if (!json_is_object(o))
		return err_set(e, -EINVAL, "tenant: expected a JSON object");
	if (!json_is_string(name))
		return err_set(e, -EINVAL, "field 'name': expected a string");
	if ((rc = tenant_conf_init(t, json_string_value(name), e)) < 0)
		return rc;
	json_object_foreach((json_t *)(uintptr_t)o, key, v) {
		if ((rc = json_decode_member(t, key, v, e)) < 0)
			goto out_free;
	}
	if ((rc = tenant_conf_check(t, e)) < 0)
		goto out_free;
	return 0;

out_free:
	tenant_conf_free(t);
	return rc;
}

/*** Redis names ***/

int
tenant_key_set(char *buf, const char *prefix)
{
	int n = snprintf(buf, KEY_MAX, "%s:tenants", prefix);

	return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : n;
}

int
tenant_key_gen(char *buf, const char *prefix)
{
	int n = snprintf(buf, KEY_MAX, "%s:tenants:gen", prefix);

	return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : n;
}

/*
 * "PREFIX:tenant:NAME" has no hash tag: it must never fall under the
 * tenant's own pattern PREFIX:{NAME}:*, which a tag would invite.
 */
int
tenant_key_conf(char *buf, const char *prefix, const char *name)
{
	int n;

	if (!key_tenant_valid(name))
		return -EINVAL;
	n = snprintf(buf, KEY_MAX, "%s:tenant:%s", prefix, name);
	return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : n;
}

int
tenant_acl_user(char *buf, size_t len, const char *name)
{
	int n;

	if (!key_tenant_valid(name))
		return -EINVAL;
	n = snprintf(buf, len, TENANT_USER_PREFIX "%s", name);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

struct rulebuf {
	char *p;
	size_t left;
};

/* Appends one rule, formatted into b; -ENAMETOOLONG when b or argv is full. */
static int __attribute__((format(printf, 5, 6)))
rule_add(const char **argv, size_t *n, size_t max, struct rulebuf *b,
    const char *fmt, ...)
{
	va_list ap;
	int w;

	if (*n >= max)
		return -ENAMETOOLONG;
	va_start(ap, fmt);
	w = vsnprintf(b->p, b->left, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= b->left)
		return -ENAMETOOLONG;
	argv[(*n)++] = b->p;
	b->p += w + 1;
	b->left -= (size_t)w + 1;
	return 0;
}

/*
 * The commands of a tenant's user, and why each (docs/tenants.md):
 *   get                 GET PREFIX:{T}:res:ID, a stored result
 *   blpop               BLPOP PREFIX:{T}:done:ID, waiting for a result
 *   xrange xrevrange    reading its own output, audit and dead-letter streams
 *   xread xlen          the same, following or counting them
 *   ping                health checks; reveals nothing
 * plus, in a selector of its own, xadd on PREFIX:{T}:jobs only. AUTH,
 * HELLO and QUIT need no grant. Nothing here lists keys, runs scripts or
 * reads server state.
 */
static const char *const tenant_commands[] = {
	"+get", "+blpop", "+xrange", "+xrevrange", "+xread", "+xlen", "+ping",
};

int
tenant_acl_rules(const char *prefix, const char *name, const char *pass_sha256,
    bool reset, bool allow_select, const char **argv, size_t max, char *buf,
    size_t buflen)
{
	struct rulebuf b = { buf, buflen };
	size_t n = 0;
	int rc = 0;

	if (!key_tenant_valid(name))
		return -EINVAL;
	if (pass_sha256 != NULL && (strlen(pass_sha256) != 64 ||
	    strspn(pass_sha256, "0123456789abcdef") != 64))
		return -EINVAL;
	/*
	 * "reset" first: a user left over under this name (by hand, or by an
	 * older sandq) keeps nothing it had. Then "on": a new user is off.
	 */
	if (reset) {
		rc |= rule_add(argv, &n, max, &b, "reset");
		rc |= rule_add(argv, &n, max, &b, "on");
	}
	/* "#HASH": the password itself never reaches Redis, its logs or ACL LIST. */
	if (pass_sha256 != NULL) {
		rc |= rule_add(argv, &n, max, &b, "resetpass");
		rc |= rule_add(argv, &n, max, &b, "#%s", pass_sha256);
	}
	/*
	 * Keys: read anything of its own; read and write (BLPOP pops) only the
	 * done lists. Writing the job stream is granted below, to XADD alone.
	 */
	rc |= rule_add(argv, &n, max, &b, "resetkeys");
	rc |= rule_add(argv, &n, max, &b, "%%R~%s:{%s}:*", prefix, name);
	rc |= rule_add(argv, &n, max, &b, "~%s:{%s}:done:*", prefix, name);
	/* No pub/sub command is granted; the pattern only bounds a future one. */
	rc |= rule_add(argv, &n, max, &b, "resetchannels");
	rc |= rule_add(argv, &n, max, &b, "&%s:{%s}:*", prefix, name);
	rc |= rule_add(argv, &n, max, &b, "clearselectors");
	rc |= rule_add(argv, &n, max, &b, "-@all");
	for (size_t i = 0; i < sizeof(tenant_commands) / sizeof(tenant_commands[0]); i++)
		rc |= rule_add(argv, &n, max, &b, "%s", tenant_commands[i]);
	if (allow_select)
		rc |= rule_add(argv, &n, max, &b, "+select");
	/*
	 * A selector pairs XADD with the one key it may write: with XADD in
	 * the root rules, the done lists' write permission would also let the
	 * tenant XADD into PREFIX:{T}:done:ID and break its own results, and
	 * a write pattern over PREFIX:{T}:* would let it forge its audit stream.
	 */
	rc |= rule_add(argv, &n, max, &b, "(+xadd %%W~%s:{%s}:jobs)", prefix, name);
	/*
	 * The tenant names its own images (sandq image tag): the hash commands
	 * on its names hash alone. sandqd reads every value back as untrusted
	 * (images/names.h) and checks what it names against image_sources.
	 */
	rc |= rule_add(argv, &n, max, &b, "(+hget +hset +hdel +hgetall ~%s:{%s}:images)",
	    prefix, name);
	return rc != 0 ? -ENAMETOOLONG : (int)n;
}
