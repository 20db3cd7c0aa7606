/*
 * tenants.c - the tenants this host serves, and their settings.
 *
 * The tenants are those of the config file (`tenants = ...`) and those kept
 * in Redis by `sandq tenant add` (queue/tenant.h, docs/tenants.md): the set
 * PREFIX:tenants, one hash of settings each, and a change counter that every
 * sandqd polls (TENANTS_POLL_MS). A tenant added in Redis is served from the
 * next poll on, without a restart: its stream gets a consumer group and
 * joins the reads. A tenant's settings are its Redis record when it has
 * one, else its [tenant.NAME] section, else the defaults; a change applies
 * to the jobs read after it. A tenant removed from Redis (and not in the
 * config file) is no longer read; what this host already took of it still
 * runs and is answered. Every change is on the audit trail (category
 * tenant).
 *
 * The table has a fixed capacity (TENANTS_CAP): each tenant's queue head
 * lives in it, so it is never moved.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define TENANTS_POLL_MS 1000

/* A deep copy of src into t's settings (its lists are duplicated). */
static void
conf_take(struct tenant *t, const struct tenant_conf *src)
{
	if (t->has_conf)
		tenant_conf_free(&t->conf);
	tenant_conf_copy(&t->conf, src);
	t->has_conf = true;
	t->weight = src->weight > 0 ? src->weight : 1;
	t->max_running = src->max_running;
}

/* Whether a and b would store the same record. */
static bool
conf_same(const struct tenant_conf *a, const struct tenant_conf *b)
{
	json_t *x = tenant_json_encode(a), *y = tenant_json_encode(b);
	bool same = json_equal(x, y);

	json_decref(x);
	json_decref(y);
	return same;
}

static void
tenant_event(struct sandqd *d, const char *name, const char *action,
    const struct tenant_conf *conf)
{
	struct audit_event ev;
	char *detail = NULL;

	audit_event_init(&ev, AUDIT_CAT_TENANT, action, name, true, AUDIT_LVL_NOTICE);
	ev.time_ms = (int64_t)now_ms();
	audit_text_set(ev.host, sizeof(ev.host), d->cfg.host);
	audit_text_set(ev.tenant, sizeof(ev.tenant), name);
	if (conf != NULL) {
		json_t *o = tenant_json_encode(conf);

		detail = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
		json_decref(o);
		if (detail != NULL)
			audit_text_set(ev.detail, sizeof(ev.detail), detail);
		free(detail);
	}
	log_info("tenant %s: %s", name, action);
	if (d->audit != NULL)
		(void)audit_writer_emit(d->audit, &ev);
	/* Not carried by a job: with Redis down it is lost there, and counted
	 * (sandq status); the host's database has it. */
	if (rq_audit(d->rq, &ev, 1) < 0)
		d->audit_stream_lost++;
}

static struct tenant *
tenant_find(struct sandqd *d, const char *name, size_t *idx)
{
	for (size_t i = 0; i < d->ntenants; i++)
		if (strcmp(d->tenants[i].name, name) == 0) {
			*idx = i;
			return &d->tenants[i];
		}
	return NULL;
}

/* A tenant first seen in Redis: served from now on. */
static struct tenant *
tenant_add(struct sandqd *d, const char *name)
{
	struct tenant *t;
	struct err e = { 0 };

	if (d->ntenants == TENANTS_CAP) {
		log_warnx("tenant %s: not served: this host serves at most %d tenants",
		    name, TENANTS_CAP);
		return NULL;
	}
	if (rq_add_tenant(d->rq, name, &e) < 0) {
		log_warnx("tenant %s: not served: %s", name, e.msg);
		return NULL;
	}
	t = &d->tenants[d->ntenants++];
	memset(t, 0, sizeof(*t));
	t->name = xstrdup(name);
	t->name_owned = true;
	t->weight = 1;
	t->active = true;
	TAILQ_INIT(&t->queue);
	return t;
}

static void
on_tenants(void *arg, int status, const struct tenant_conf *confs, const bool *ok,
    size_t n, uint64_t gen)
{
	struct sandqd *d = arg;

	if (status != 0) {
		if (status < 0 && status != -ENOTCONN)
			log_warnx("tenants: cannot read them from Redis: %s", strerror(-status));
		return;		/* 1: unchanged */
	}
	/* Listed in Redis now; the others fall back or go. */
	for (size_t i = 0; i < d->ntenants; i++)
		d->tenants[i].listed = false;
	for (size_t k = 0; k < n; k++) {
		const char *name = confs[k].name[0] != '\0' ? confs[k].name : NULL;
		struct tenant *t;
		size_t idx;

		if (!ok[k] || name == NULL)
			continue;	/* logged by rq; the last good settings stay */
		if ((t = tenant_find(d, name, &idx)) == NULL) {
			if ((t = tenant_add(d, name)) == NULL)
				continue;
			conf_take(t, &confs[k]);
			tenant_event(d, name, "added", &confs[k]);
		} else if (!t->active || !t->has_conf || !conf_same(&t->conf, &confs[k])) {
			conf_take(t, &confs[k]);
			t->active = true;
			tenant_event(d, name, "changed", &confs[k]);
		}
		t->listed = true;
		t->from_redis = true;
	}
	for (size_t i = 0; i < d->ntenants; i++) {
		struct tenant *t = &d->tenants[i];
		const struct tenant_conf *cc;

		if (t->listed || !t->from_redis)
			continue;
		/* Gone from Redis: back to the config file's settings, or gone. */
		t->from_redis = false;
		if (t->in_config) {
			if ((cc = config_tenant_conf(&d->cfg, t->name)) != NULL)
				conf_take(t, cc);
			else {
				struct tenant_conf def;
				struct err e = { 0 };

				if (tenant_conf_init(&def, t->name, &e) == 0) {
					conf_take(t, &def);
					tenant_conf_free(&def);
				}
			}
			tenant_event(d, t->name, "changed", &t->conf);
		} else {
			t->active = false;
			tenant_event(d, t->name, "removed", NULL);
		}
	}
	d->tenants_gen = gen;
	sched_dispatch(d);
}

static void
poll_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;

	(void)rq_tenants_load(d->rq, d->tenants_gen, on_tenants, d);
}

void
tenants_init(struct sandqd *d)
{
	d->tenants = xcalloc(TENANTS_CAP, sizeof(*d->tenants));
	d->ntenants = d->cfg.ntenants;
	for (size_t i = 0; i < d->ntenants; i++) {
		struct tenant *t = &d->tenants[i];
		const struct tenant_conf *cc = config_tenant_conf(&d->cfg, d->cfg.tenants[i]);

		t->name = d->cfg.tenants[i];
		t->weight = 1;
		t->active = true;
		t->in_config = true;
		TAILQ_INIT(&t->queue);
		if (cc != NULL)
			conf_take(t, cc);
	}
	uv_timer_init(d->loop, &d->tenants_poll);
	d->tenants_poll.data = d;
}

void
tenants_start(struct sandqd *d)
{
	uv_timer_start(&d->tenants_poll, poll_cb, 0, TENANTS_POLL_MS);
}

void
tenants_stop(struct sandqd *d)
{
	uv_timer_stop(&d->tenants_poll);
	uv_close((uv_handle_t *)&d->tenants_poll, NULL);
}

void
tenants_free(struct sandqd *d)
{
	for (size_t i = 0; i < d->ntenants; i++) {
		if (d->tenants[i].has_conf)
			tenant_conf_free(&d->tenants[i].conf);
		if (d->tenants[i].name_owned)
			free(d->tenants[i].name);
	}
	free(d->tenants);
	d->tenants = NULL;
}
