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
 *
 * With an image cache it also says what the cache holds (`sandq image
 * ls`): "images" (the STATUS_IMAGES_MAX most recently used, each
 * {"reference", "digest", "os", "arch", "layers", "bytes" (unpacked),
 * "blob_bytes", "pulled_at", "last_used", "in_use" (queued and running
 * jobs on it)}), "images_total" and "image_cache_bytes" (what the bound
 * counts: each layer once, unpacked and compressed) and
 * "image_cache_max". Reading the records is file I/O, so the listing is
 * made off the loop (uv_queue_work): at start, after each pull and
 * eviction, and every STATUS_IMAGES_EVERY_MS for the last uses; the
 * status sends the last listing, with in_use counted at that moment.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/cache.h"
#include "dispatcher.h"

#define STATUS_EVERY_MS 2000
#define STATUS_IMAGES_MAX 64		/* images a host's status lists */
#define STATUS_IMAGES_EVERY_MS 30000	/* listed again at least this often */

/* The image cache as the status lists it, and the listing off the loop. */
struct simages {
	struct img_record **recs;	/* most recently used first (owned) */
	size_t nrecs;
	size_t total;			/* records in the cache */
	uint64_t bytes;			/* distinct layers, unpacked + blobs */
	uint64_t listed_ms;		/* when the listing was made (0: never) */
	bool running;			/* a listing is under way */
	bool again;			/* the cache changed while it ran */
	bool closing;			/* status_stop(): free once it ends */
	uv_work_t work;
	struct sandqd *d;
	char root[PATH_MAX];
	/* Out, from the thread. */
	struct img_record **out;
	size_t nout, tout;
	uint64_t bout;
	int rc;
	struct err e;
};

static void images_list_start(struct sandqd *d);

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

/*** The image cache ***/

uint64_t
status_image_cache_bytes(const struct sandqd *d)
{
	return d->status_images != NULL ? d->status_images->bytes : 0;
}

/* Adds each layer of r not seen yet (digests in *seen, *n of them) to *bytes. */
static void
layers_count(const struct img_record *r, char ***seen, size_t *n, uint64_t *bytes)
{
	for (size_t i = 0; i < r->nlayers; i++) {
		bool have = false;

		for (size_t k = 0; k < *n && !have; k++)
			have = strcmp((*seen)[k], r->layers[i].digest) == 0;
		if (have)
			continue;
		*seen = xreallocarray(*seen, *n + 1, sizeof(**seen));
		(*seen)[(*n)++] = r->layers[i].digest;
		*bytes += r->layers[i].size + r->layers[i].unpacked;
	}
}

/* In a thread of libuv's pool: the records, newest STATUS_IMAGES_MAX kept. */
static void
list_work(uv_work_t *w)
{
	struct simages *si = w->data;
	struct img_cache *c = NULL;
	struct img_record **v = NULL;
	char **seen = NULL;
	size_t n = 0, nseen = 0, keep;

	si->out = NULL;
	si->nout = si->tout = 0;
	si->bout = 0;
	if ((si->rc = img_cache_attach(si->root, &c, &si->e)) < 0)
		return;
	si->rc = img_cache_list(c, &v, &n, &si->e);
	img_cache_close(c);
	if (si->rc < 0)
		return;
	for (size_t i = 0; i < n; i++)
		layers_count(v[i], &seen, &nseen, &si->bout);
	free(seen);
	/* Least recently used first: keep the tail, newest first. */
	keep = n < STATUS_IMAGES_MAX ? n : STATUS_IMAGES_MAX;
	si->out = xcalloc(keep + 1, sizeof(*si->out));
	for (size_t i = 0; i < keep; i++) {
		si->out[i] = v[n - 1 - i];
		v[n - 1 - i] = NULL;
	}
	si->nout = keep;
	si->tout = n;
	img_records_free(v, n - keep);
}

static void
simages_free(struct simages *si)
{
	img_records_free(si->recs, si->nrecs);
	free(si);
}

static void
list_done(uv_work_t *w, int status)
{
	struct simages *si = w->data;
	struct sandqd *d = si->d;

	si->running = false;
	if (si->closing) {
		img_records_free(si->out, si->nout);
		simages_free(si);
		return;
	}
	if (status == 0 && si->rc == 0) {
		img_records_free(si->recs, si->nrecs);
		si->recs = si->out;
		si->nrecs = si->nout;
		si->total = si->tout;
		si->bytes = si->bout;
	} else if (status == 0) {
		log_warnx("image cache listing: %s", si->e.msg);
	}
	si->out = NULL;
	si->listed_ms = now_ms();
	if (si->again) {
		si->again = false;
		images_list_start(d);
	}
}

/* Lists the cache off the loop, unless a listing runs (then once more after). */
static void
images_list_start(struct sandqd *d)
{
	struct simages *si = d->status_images;

	if (si == NULL || images_root(d) == NULL || si->closing)
		return;
	if (si->running) {
		si->again = true;
		return;
	}
	si->running = true;
	si->work.data = si;
	snprintf(si->root, sizeof(si->root), "%s", images_root(d));
	if (uv_queue_work(d->loop, &si->work, list_work, list_done) != 0) {
		si->running = false;
		log_warnx("image cache listing: cannot queue it");
	}
}

void
status_images_changed(struct sandqd *d)
{
	images_list_start(d);
}

/* Queued and running jobs on the image of manifest digest. */
static size_t
in_use(const struct sandqd *d, const char *digest)
{
	const struct djob *j;
	size_t n = 0;

	for (size_t i = 0; i < d->ntenants; i++)
		TAILQ_FOREACH(j, &d->tenants[i].queue, link)
			n += j->job != NULL && j->job->image_id != NULL &&
			    strcmp(j->job->image_id, digest) == 0;
	for (size_t i = 0; i < d->nslots; i++) {
		j = d->slots[i].run.job;
		n += j != NULL && j->job != NULL && j->job->image_id != NULL &&
		    strcmp(j->job->image_id, digest) == 0;
	}
	return n;
}

/* The images part of the status into o (nothing without a cache). */
static void
images_status(struct sandqd *d, json_t *o)
{
	struct simages *si = d->status_images;
	json_t *a;

	if (si == NULL || images_root(d) == NULL)
		return;
	if (!si->running && now_ms() - si->listed_ms >= STATUS_IMAGES_EVERY_MS)
		images_list_start(d);
	a = json_array();
	for (size_t i = 0; i < si->nrecs; i++) {
		const struct img_record *r = si->recs[i];

		json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, "
		    "s:I, s:I}", "reference", r->reference, "digest", r->manifest, "os", r->os,
		    "arch", r->arch, "layers", (json_int_t)r->nlayers,
		    "bytes", (json_int_t)r->unpacked_bytes, "blob_bytes", (json_int_t)r->blob_bytes,
		    "pulled_at", (json_int_t)r->pulled_ms, "last_used", (json_int_t)r->last_use_ms,
		    "in_use", (json_int_t)in_use(d, r->manifest)));
	}
	json_object_set_new(o, "images", a);
	json_object_set_new(o, "images_total", json_integer((json_int_t)si->total));
	json_object_set_new(o, "image_cache_bytes", json_integer((json_int_t)si->bytes));
	json_object_set_new(o, "image_cache_max",
	    json_integer((json_int_t)d->cfg.image_cache_bytes));
}

/*** The status ***/

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
	images_status(d, o);
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
	d->status_images = xcalloc(1, sizeof(*d->status_images));
	d->status_images->d = d;
	images_list_start(d);
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
	struct simages *si = d->status_images;

	uv_timer_stop(&d->status_timer);
	uv_close((uv_handle_t *)&d->status_timer, NULL);
	d->status_images = NULL;
	if (si == NULL)
		return;
	if (si->running)
		si->closing = true;	/* freed when the listing ends */
	else
		simages_free(si);
}
