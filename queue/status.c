/*
 * status.c - the operator's view of hosts and tenants (status.h): moved
 * here from cli/cli_status.c so that `sandq status --json` and the
 * gateway's GET /v1/admin/status are one computation.
 *
 * A host whose last status is older than QUEUE_STATUS_STALE_MS is listed
 * as not live and not counted. A tenant's running jobs and last-minute
 * figures are the sums over live hosts; its queued jobs are its stream's
 * length less those running. Pure but for the time given at creation.
 */
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "status.h"
#include "tenant.h"

struct tfig {
	char name[TENANT_NAME_MAX + 1];
	long long queued, running, done, refused, backlog;
	long long pulling;	/* of queued: waiting for their image's pull */
};

struct queue_status {
	uint64_t now;
	long long workers;
	size_t live;		/* hosts that reported within the stale time */
	json_t *hosts;
	char **names;		/* hosts' names as written, in the order of hosts */
	size_t *name_lens;
	struct tfig *figs;
	size_t nfigs;
};

struct queue_status *
queue_status_new(uint64_t now_ms)
{
	struct queue_status *s = xcalloc(1, sizeof(*s));

	s->now = now_ms;
	s->hosts = json_array();
	s->figs = xcalloc(QUEUE_STATUS_TENANTS_MAX, sizeof(*s->figs));
	return s;
}

void
queue_status_free(struct queue_status *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < json_array_size(s->hosts); i++)
		free(s->names[i]);
	json_decref(s->hosts);
	free(s->names);
	free(s->name_lens);
	free(s->figs);
	free(s);
}

/* The figures of tenant name, added if new and there is room; or NULL. */
static struct tfig *
fig_get(struct queue_status *s, const char *name)
{
	struct tfig *f;

	for (size_t i = 0; i < s->nfigs; i++)
		if (strcmp(s->figs[i].name, name) == 0)
			return &s->figs[i];
	if (s->nfigs == QUEUE_STATUS_TENANTS_MAX || strlen(name) > TENANT_NAME_MAX)
		return NULL;
	f = &s->figs[s->nfigs++];
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	return f;
}

/* An integer member (a real one truncated) or 0. */
static long long
jint(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	return json_is_real(v) ? (long long)json_real_value(v) : json_integer_value(v);
}

/* A host's name as JSON: as it is if UTF-8, else with its bytes escaped. */
static json_t *
host_name(const char *p, size_t n)
{
	json_t *s = json_stringn(p, n);
	char buf[4 * 256 + 1];
	size_t o = 0;

	if (s != NULL)
		return s;
	for (size_t i = 0; i < n && o + 5 < sizeof(buf); i++) {
		unsigned char c = (unsigned char)p[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", c);
	}
	buf[o] = '\0';
	return json_string(buf);
}

void
queue_status_hosts(struct queue_status *s, const redisReply *r)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const redisReply *k = r->element[i], *v = r->element[i + 1];
		json_t *h, *ts, *e;
		const char *name;
		long long age;
		bool live;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		h = json_loadb(v->str, v->len, 0, NULL);
		if (h == NULL || !json_is_object(h)) {
			json_decref(h);
			continue;
		}
		age = (long long)s->now - jint(h, "time");
		live = age < QUEUE_STATUS_STALE_MS;
		e = json_object();
		json_object_set_new(e, "host", host_name(k->str, k->len));
		json_object_set_new(e, "workers", json_integer(jint(h, "workers")));
		json_object_set_new(e, "busy", json_integer(jint(h, "busy")));
		json_object_set_new(e, "age_ms", json_integer(age));
		json_object_set_new(e, "audit_lost", json_integer(jint(h, "audit_db_dropped") +
		    jint(h, "audit_stream_lost")));
		json_object_set_new(e, "live", json_boolean(live));
		s->names = xreallocarray(s->names, json_array_size(s->hosts) + 1,
		    sizeof(*s->names));
		s->name_lens = xreallocarray(s->name_lens, json_array_size(s->hosts) + 1,
		    sizeof(*s->name_lens));
		s->names[json_array_size(s->hosts)] = xmemdup0(k->str, k->len);
		s->name_lens[json_array_size(s->hosts)] = k->len;
		json_array_append_new(s->hosts, e);
		if (live) {
			s->live++;
			s->workers += jint(h, "workers");
			ts = json_object_get(h, "tenants");
			json_object_foreach(ts, name, e) {
				struct tfig *f = fig_get(s, name);

				if (f == NULL)
					continue;
				f->running += jint(e, "running");
				f->pulling += jint(e, "pulling");
				f->done += jint(e, "done_1m");
				f->refused += jint(e, "refused_1m");
			}
		}
		json_decref(h);
	}
}

void
queue_status_tenants(struct queue_status *s, const redisReply *r)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < r->elements; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING)
			(void)fig_get(s, r->element[i]->str);
}

size_t
queue_status_count(const struct queue_status *s)
{
	return s->nfigs;
}

const char *
queue_status_name(const struct queue_status *s, size_t i)
{
	return i < s->nfigs ? s->figs[i].name : NULL;
}

void
queue_status_backlog(struct queue_status *s, size_t i, long long xlen)
{
	struct tfig *f;

	if (i >= s->nfigs)
		return;
	f = &s->figs[i];
	f->backlog = xlen;
	f->queued = f->backlog > f->running ? f->backlog - f->running : 0;
}

const char *
queue_status_host(const struct queue_status *s, size_t i, size_t *len)
{
	if (i >= json_array_size(s->hosts))
		return NULL;
	*len = s->name_lens[i];
	return s->names[i];
}

size_t
queue_status_live_hosts(const struct queue_status *s)
{
	return s->live;
}

json_t *
queue_status_json(const struct queue_status *s)
{
	json_t *out = json_object(), *tenants = json_array();

	for (size_t i = 0; i < s->nfigs; i++) {
		const struct tfig *f = &s->figs[i];

		json_array_append_new(tenants, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f}",
		    "name", f->name, "queued", (json_int_t)f->queued,
		    "pulling", (json_int_t)f->pulling, "running", (json_int_t)f->running,
		    "done_1m", (json_int_t)f->done, "refused_1m", (json_int_t)f->refused,
		    "share", s->workers > 0 ? (double)f->running / (double)s->workers : 0.0));
	}
	json_object_set_new(out, "workers", json_integer(s->workers));
	json_object_set_new(out, "live_hosts", json_integer((json_int_t)s->live));
	json_object_set(out, "hosts", s->hosts);
	json_object_set_new(out, "tenants", tenants);
	return out;
}
