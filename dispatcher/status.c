/*
 * status.c - what this host tells the others, and `sandq status`.
 *
 * Every STATUS_EVERY_MS, sandqd writes one JSON object under its host name
 * in the hash PREFIX:hosts (docs/protocol.md, Keys):
 *
 *   {"host", "time" (epoch ms), "pid", "workers", "busy",
 *    "audit_db_dropped", "audit_stream_lost" (events the audit sinks lost),
 *    "tenants": {NAME: {"queued", "pulling", "running", "done_1m", "refused_1m"}}}
 *
 * queued is what this host has taken from the tenant's stream and not yet
 * started; pulling, the part of it that waits for its image's pull; done_1m and refused_1m count the results it published in the
 * last minute (refused: rejected or expired), over a ring of one-second
 * buckets. A reader treats an entry whose time is older than a few periods
 * as a host that is gone. The hash is written by the dispatchers' own
 * Redis user; tenants' users cannot read it.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "dispatcher.h"

#define STATUS_EVERY_MS 2000

/* The bucket of now, emptied if it held an older second. */
static struct tstat_bucket *
bucket_now(struct tenant *t)
{
	uint64_t sec = now_ms() / 1000;
	struct tstat_bucket *b = &t->stats[sec % STATUS_BUCKETS];

	if (b->sec != sec) {
		b->sec = sec;
		b->done = b->refused = 0;
	}
	return b;
}

void
status_count(struct sandqd *d, size_t tenant, bool refused)
{
	struct tstat_bucket *b = bucket_now(&d->tenants[tenant]);

	if (refused)
		b->refused++;
	else
		b->done++;
}

static void
last_minute(const struct tenant *t, uint64_t *done, uint64_t *refused)
{
	uint64_t sec = now_ms() / 1000;

	*done = *refused = 0;
	for (size_t i = 0; i < STATUS_BUCKETS; i++)
		if (t->stats[i].sec + STATUS_BUCKETS > sec) {
			*done += t->stats[i].done;
			*refused += t->stats[i].refused;
		}
}

static void
status_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;
	json_t *o = json_object(), *tenants = json_object();
	char *text;

	json_object_set_new(o, "host", json_string(d->cfg.host));
	json_object_set_new(o, "time", json_integer((json_int_t)now_ms()));
	json_object_set_new(o, "pid", json_integer((json_int_t)getpid()));
	json_object_set_new(o, "workers", json_integer((json_int_t)d->nslots));
	json_object_set_new(o, "busy", json_integer((json_int_t)pool_count(d, W_BUSY)));
	if (d->audit != NULL) {
		uint64_t queued, written, dropped, failed;

		audit_writer_stats(d->audit, &queued, &written, &dropped, &failed);
		json_object_set_new(o, "audit_db_dropped", json_integer((json_int_t)dropped));
	}
	json_object_set_new(o, "audit_stream_lost",
	    json_integer((json_int_t)d->audit_stream_lost));
	for (size_t i = 0; i < d->ntenants; i++) {
		const struct tenant *t = &d->tenants[i];
		json_t *e = json_object();
		uint64_t done, refused;

		if (!t->active && t->queued == 0 && t->running == 0)
			continue;
		last_minute(t, &done, &refused);
		json_object_set_new(e, "queued", json_integer((json_int_t)t->queued));
		json_object_set_new(e, "pulling", json_integer((json_int_t)images_waiting(t)));
		json_object_set_new(e, "running", json_integer((json_int_t)t->running));
		json_object_set_new(e, "done_1m", json_integer((json_int_t)done));
		json_object_set_new(e, "refused_1m", json_integer((json_int_t)refused));
		json_object_set_new(tenants, t->name, e);
	}
	json_object_set_new(o, "tenants", tenants);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (text != NULL)
		(void)rq_host_status(d->rq, d->cfg.host, text);
	free(text);
}

void
status_start(struct sandqd *d)
{
	uv_timer_init(d->loop, &d->status_timer);
	d->status_timer.data = d;
	uv_timer_start(&d->status_timer, status_cb, STATUS_EVERY_MS, STATUS_EVERY_MS);
}

void
status_now(struct sandqd *d)
{
	status_cb(&d->status_timer);
}

void
status_stop(struct sandqd *d)
{
	uv_timer_stop(&d->status_timer);
	uv_close((uv_handle_t *)&d->status_timer, NULL);
}
