/*
 * audit.c - a tenant's audit trail (PREFIX:{T}:audit, docs/audit.md) for
 * C clients, with the filters of `sandq audit`: job, sandbox, categories,
 * a minimum level, allowed or denied, a time window.
 *
 * DESIGN. libsandq may include only common/ and proto/ (docs/architecture.md),
 * so it cannot take audit/'s decoder; it keeps a small one here, held to the
 * same contract: an entry is an event only with each of the eleven fields
 * once and nothing else, each within docs/audit.md's bound, the category
 * and level among the names listed there, allowed true or false, time a
 * decimal epoch ms. Values are kept as bytes (no UTF-8 check; a NUL is
 * refused). Anything else is skipped and counted, never fatal: the
 * tenant's own Redis user may write to the stream. The window is applied
 * to the events' own times; the XRANGE bounds are widened by
 * CLOCK_SLACK_MS, as the CLI does, since a stream id is Redis's clock and
 * an event's time its host's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "internal.h"
#include "sandq.h"

#define PAGE_COUNT 1000			/* entries per XRANGE */
#define CLOCK_SLACK_MS (5 * 60 * 1000)
#define LIMIT_DEFAULT 100000		/* events returned when f->limit is 0 */

static const char *const categories[] = {
	"job", "sandbox", "syscall", "path", "quota", "policy", "tenant",
	"audit", "image",
};
#define NCATEGORIES (sizeof(categories) / sizeof(categories[0]))

static const char *const levels[] = { "info", "notice", "warning", "alert" };
#define NLEVELS (sizeof(levels) / sizeof(levels[0]))

/* The fields of an entry, in order, and each one's longest value. */
enum afield { A_TIME, A_HOST, A_TENANT, A_JOB, A_SANDBOX, A_CATEGORY,
	A_ACTION, A_TARGET, A_ALLOWED, A_LEVEL, A_DETAIL, A__COUNT };
static const struct {
	const char *name;
	size_t max;
} afields[A__COUNT] = {
	[A_TIME] = { "time", 20 }, [A_HOST] = { "host", 255 },
	[A_TENANT] = { "tenant", 64 }, [A_JOB] = { "job", 128 },
	[A_SANDBOX] = { "sandbox", 128 }, [A_CATEGORY] = { "category", 16 },
	[A_ACTION] = { "action", 32 }, [A_TARGET] = { "target", 1023 },
	[A_ALLOWED] = { "allowed", 5 }, [A_LEVEL] = { "level", 7 },
	[A_DETAIL] = { "detail", 1023 },
};

/* Index of s in names (n of them), or -1. */
static int
name_index(const char *const *names, size_t n, const char *s, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
			return (int)i;
	return -1;
}

/* The parsed filter: categories as a bit set, the level as an index. */
struct afilter {
	const struct sandq_audit_filter *f;
	unsigned cats;			/* bit per category, 0: any */
	int level_min;			/* index in levels */
};

static int
filter_init(struct sandq *c, const struct sandq_audit_filter *f,
    struct afilter *af)
{
	memset(af, 0, sizeof(*af));
	af->f = f;
	if (f->level != NULL &&
	    (af->level_min = name_index(levels, NLEVELS, f->level,
	    strlen(f->level))) < 0)
		return sandq__fail(c, -EINVAL, "audit: level '%.32s': expected "
		    "info, notice, warning or alert", f->level);
	for (const char *p = f->categories; p != NULL && *p != '\0';) {
		size_t n = strcspn(p, ",");
		int k = name_index(categories, NCATEGORIES, p, n);

		if (k < 0)
			return sandq__fail(c, -EINVAL, "audit: category '%.*s': "
			    "not a category (job, sandbox, syscall, path, quota, "
			    "policy, tenant, audit, image)", (int)(n > 32 ? 32 : n), p);
		af->cats |= 1u << k;
		p += n + (p[n] == ',');
	}
	return 0;
}

static bool
filter_match(const struct afilter *af, const struct sandq_audit_event *ev)
{
	const struct sandq_audit_filter *f = af->f;

	if (f->job != NULL && strcmp(ev->job, f->job) != 0)
		return false;
	if (f->sandbox != NULL && strcmp(ev->sandbox, f->sandbox) != 0)
		return false;
	if (af->cats != 0 && !(af->cats & (1u << name_index(categories,
	    NCATEGORIES, ev->category, strlen(ev->category)))))
		return false;
	if (name_index(levels, NLEVELS, ev->level, strlen(ev->level)) <
	    af->level_min)
		return false;
	if ((f->outcome == SANDQ_AUDIT_ALLOWED && !ev->allowed) ||
	    (f->outcome == SANDQ_AUDIT_DENIED && ev->allowed))
		return false;
	if (f->since_ms > 0 && ev->time_ms < f->since_ms)
		return false;
	if (f->until_ms > 0 && ev->time_ms >= f->until_ms)
		return false;
	return true;
}

static void
event_clear(struct sandq_audit_event *ev)
{
	free(ev->host);
	free(ev->tenant);
	free(ev->job);
	free(ev->sandbox);
	free(ev->category);
	free(ev->action);
	free(ev->target);
	free(ev->level);
	free(ev->detail);
	memset(ev, 0, sizeof(*ev));
}

/*
 * Decodes one XRANGE entry ([id, [field, value, ...]]) into ev, strictly
 * (see the file comment). Returns true for an event; false leaves ev empty.
 */
static bool
event_decode(const redisReply *e, struct sandq_audit_event *ev)
{
	const redisReply *id, *kv;
	char **slot[A__COUNT] = {
		[A_HOST] = &ev->host, [A_TENANT] = &ev->tenant, [A_JOB] = &ev->job,
		[A_SANDBOX] = &ev->sandbox, [A_CATEGORY] = &ev->category,
		[A_ACTION] = &ev->action, [A_TARGET] = &ev->target,
		[A_LEVEL] = &ev->level, [A_DETAIL] = &ev->detail,
	};
	bool seen[A__COUNT] = { false };
	char *end;

	memset(ev, 0, sizeof(*ev));
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
		return false;
	id = e->element[0];
	kv = e->element[1];
	if (id->type != REDIS_REPLY_STRING || id->len >= sizeof(ev->id) ||
	    kv->type != REDIS_REPLY_ARRAY || kv->elements != 2 * A__COUNT)
		return false;
	memcpy(ev->id, id->str, id->len);
	for (size_t i = 0; i < kv->elements; i += 2) {
		const redisReply *k = kv->element[i], *v = kv->element[i + 1];
		int f = -1;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			goto out_bad;
		for (int n = 0; n < A__COUNT; n++)
			if (strlen(afields[n].name) == k->len &&
			    memcmp(afields[n].name, k->str, k->len) == 0)
				f = n;
		if (f < 0 || seen[f] || v->len > afields[f].max ||
		    memchr(v->str, '\0', v->len) != NULL)
			goto out_bad;
		seen[f] = true;
		if (f == A_TIME) {
			char t[24];

			memcpy(t, v->str, v->len);
			t[v->len] = '\0';
			errno = 0;
			ev->time_ms = strtoll(t, &end, 10);
			if (v->len == 0 || *end != '\0' || errno != 0 ||
			    ev->time_ms < 0 || ev->time_ms > INT64_C(253402300799999))
				goto out_bad;
		} else if (f == A_ALLOWED) {
			if (v->len == 4 && memcmp(v->str, "true", 4) == 0)
				ev->allowed = true;
			else if (!(v->len == 5 && memcmp(v->str, "false", 5) == 0))
				goto out_bad;
		} else {
			*slot[f] = xmemdup0(v->str, v->len);
		}
	}
	if (name_index(categories, NCATEGORIES, ev->category,
	    strlen(ev->category)) < 0 ||
	    name_index(levels, NLEVELS, ev->level, strlen(ev->level)) < 0 ||
	    ev->action[0] == '\0')
		goto out_bad;
	return true;

out_bad:
	event_clear(ev);
	return false;
}

int
sandq_audit(struct sandq *c, const struct sandq_audit_filter *f,
    struct sandq_audit_events **out)
{
	static const struct sandq_audit_filter all;
	struct sandq_audit_events *res;
	char key[KEY_MAX], start[48], stop[32];
	size_t limit, cap = 0;
	struct afilter af;
	int rc;

	*out = NULL;
	if (f == NULL)
		f = &all;
	if ((rc = filter_init(c, f, &af)) < 0)
		return rc;
	if (key_store(key, SANDQ_KEY_PREFIX, sandq__tenant(c), "", NULL) < 0 ||
	    strlen(key) + 6 > sizeof(key))
		return sandq__fail(c, -EINVAL, "audit: tenant name too long");
	strcat(key, "audit");
	limit = f->limit > 0 ? f->limit : LIMIT_DEFAULT;
	if (f->since_ms > CLOCK_SLACK_MS)
		snprintf(start, sizeof(start), "%" PRId64, f->since_ms - CLOCK_SLACK_MS);
	else
		snprintf(start, sizeof(start), "-");
	if (f->until_ms > 0)
		snprintf(stop, sizeof(stop), "%" PRId64, f->until_ms + CLOCK_SLACK_MS);
	else
		snprintf(stop, sizeof(stop), "+");
	res = xcalloc(1, sizeof(*res));
	for (;;) {
		const char *argv[6] = { "XRANGE", key, start, stop, "COUNT", "1000" };
		size_t lens[6];
		redisReply *r = NULL;
		size_t n;

		for (int i = 0; i < 6; i++)
			lens[i] = strlen(argv[i]);
		if ((rc = sandq__read(c, &r, 6, argv, lens)) < 0) {
			sandq_audit_free(res);
			return rc;
		}
		if (r->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			sandq_audit_free(res);
			return sandq__fail(c, -EIO, "audit: %s: not a stream", key);
		}
		n = r->elements;
		for (size_t i = 0; i < n && res->nevents < limit; i++) {
			struct sandq_audit_event ev;
			const redisReply *e = r->element[i];

			/* The next page starts after the last id seen. */
			if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
			    e->element[0]->type == REDIS_REPLY_STRING &&
			    e->element[0]->len < sizeof(start) - 1)
				snprintf(start, sizeof(start), "(%.*s",
				    (int)e->element[0]->len, e->element[0]->str);
			if (!event_decode(e, &ev)) {
				res->skipped++;
				continue;
			}
			if (!filter_match(&af, &ev)) {
				event_clear(&ev);
				continue;
			}
			if (res->nevents == cap) {
				cap = cap ? cap * 2 : 64;
				res->events = xreallocarray(res->events, cap,
				    sizeof(*res->events));
			}
			res->events[res->nevents++] = ev;
		}
		freeReplyObject(r);
		if (n < PAGE_COUNT || res->nevents >= limit)
			break;
	}
	*out = res;
	return 0;
}

void
sandq_audit_free(struct sandq_audit_events *ev)
{
	if (ev == NULL)
		return;
	for (size_t i = 0; i < ev->nevents; i++)
		event_clear(&ev->events[i]);
	free(ev->events);
	free(ev);
}
