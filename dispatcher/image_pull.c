/*
 * image_pull.c - what a pull into sandqd's image cache shows outside: the
 * answer of an image.pull job, the pull's progress on that job's output
 * stream, and the pull on the audit trail. images.c decides when a pull
 * runs and who waits on it; this file only reports.
 *
 * Progress. A pull runs in a thread of libuv's pool (images.c), and the
 * cache calls its progress callback from there: each blob skopeo starts
 * copying, each blob verified against its digest, each layer unpacked,
 * and the record written. Each call becomes one small JSON record (the
 * whole state so far: phase, blob, index and count, bytes verified),
 * queued on the pull's watch under the feed's mutex; a uv_async_t wakes
 * the loop, which adds the records to the output stream (PREFIX:{T}:out:ID,
 * fd "3", docs/protocol.md) of every image.pull job waiting on the pull
 * that asked for a stream. A watch holds at most WATCH_RECORDS; past that
 * the newest record replaces the last one queued (each carries the whole
 * state, so a lost record is a frame, not a fact). When the pull ends the
 * loop delivers what is left before any waiter is answered, so a job's
 * records always come before its result and its stream's eof.
 *
 * The audit trail. A pull is the host's: every job on its reference waits
 * on it, of whichever tenant, and it goes on if the job that started it is
 * cancelled. So its events (category image: pull_started, pulled,
 * pull_failed) are not carried by a job's result: like a tenant change,
 * each goes at once to the host's database and to the audit stream of the
 * tenant whose job started the pull, naming that job.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <msgpack.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/cache.h"
#include "../proto/pack.h"
#include "dispatcher.h"

#define WATCH_RECORDS 64		/* progress records a watch queues */
#define RECORD_MAX 320			/* bytes of one record (JSON) */
#define PROGRESS_FD 3			/* its "fd" on the output stream */

/* The progress of one pull, from its thread to the loop. */
struct image_watch {
	struct image_feed *feed;
	const struct dimg_op *op;	/* what its waiters' img_wait holds */
	char ref[IMG_REF_MAX + 1];	/* skopeo's source */
	size_t tenant;			/* the tenant whose job started it, if any */
	bool has_tenant;
	char job[JOB_ID_MAX + 1];	/* that job's id, or "" */
	int64_t t0;			/* mono ns at its start */
	/* Under feed->mu: written by the pull's thread. */
	unsigned blobs;			/* blobs skopeo started copying */
	uint64_t verified;		/* bytes of the blobs verified so far */
	unsigned unpacked;		/* layers unpacked so far */
	char rec[WATCH_RECORDS][RECORD_MAX];
	size_t nrec;
	TAILQ_ENTRY(image_watch) link;	/* feed->live (loop only) */
};
TAILQ_HEAD(watch_list, image_watch);

/* Every running pull's watch, and the wake-up of the loop. */
struct image_feed {
	uv_async_t async;
	pthread_mutex_t mu;
	bool closed;			/* async closed: no wake-up any more */
	struct watch_list live;		/* loop only */
};

/*** From the pull's thread ***/

static const char *const phase_names[] = {
	[IMG_PHASE_FETCH] = "fetch", [IMG_PHASE_VERIFY] = "verify",
	[IMG_PHASE_UNPACK] = "unpack", [IMG_PHASE_DONE] = "done",
};

/* Whether s is "sha256:" and 64 lower-case hex digits (what a record may quote). */
static bool
digest_plain(const char *s)
{
	if (s == NULL || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 71)
		return false;
	for (size_t i = 7; i < 71; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* The cache's progress callback (the pull's thread): one record queued. */
static void
on_progress(void *arg, const struct img_progress *p)
{
	struct image_watch *w = arg;
	struct image_feed *f = w->feed;
	char *rec;
	bool wake;

	if ((unsigned)p->phase >= sizeof(phase_names) / sizeof(phase_names[0]))
		return;
	pthread_mutex_lock(&f->mu);
	if (p->phase == IMG_PHASE_FETCH)
		w->blobs++;
	else if (p->phase == IMG_PHASE_VERIFY)
		w->verified += p->size;
	else if (p->phase == IMG_PHASE_UNPACK)
		w->unpacked++;
	/* Full: the newest replaces the last (both carry the whole state). */
	rec = w->rec[w->nrec < WATCH_RECORDS ? w->nrec++ : WATCH_RECORDS - 1];
	snprintf(rec, RECORD_MAX, "{\"phase\":\"%s\",\"digest\":%s%s%s,\"index\":%u,"
	    "\"count\":%u,\"size\":%" PRIu64 ",\"blobs\":%u,\"verified\":%" PRIu64
	    ",\"unpacked\":%u,\"elapsed_ms\":%" PRId64 "}", phase_names[p->phase],
	    digest_plain(p->digest) ? "\"" : "", digest_plain(p->digest) ? p->digest : "null",
	    digest_plain(p->digest) ? "\"" : "", p->index, p->count, p->size, w->blobs,
	    w->verified, w->unpacked, (mono_ns() - w->t0) / 1000000);
	wake = !f->closed;
	/* Sent under the lock: image_pull_stop() cannot close it meanwhile. */
	if (wake)
		uv_async_send(&f->async);
	pthread_mutex_unlock(&f->mu);
}

/*** On the loop ***/

/* Adds rec to the output stream of every image.pull job waiting on w's pull. */
static void
deliver(struct sandqd *d, const struct image_watch *w, const char *rec)
{
	struct djob *j;

	for (size_t i = 0; i < d->ntenants; i++)
		TAILQ_FOREACH(j, &d->tenants[i].queue, link)
			if (j->img_wait == w->op && j->stream && j->job != NULL &&
			    j->job->op == OP_IMAGE_PULL &&
			    rq_output(d->rq, j->tenant, j->id, PROGRESS_FD, rec, strlen(rec),
			    d->cfg.result_ttl_s * 1000) < 0)
				log_debug("job %s: pull progress not relayed (Redis down)", j->id);
}

/* Delivers what w has queued. */
static void
flush(struct sandqd *d, struct image_watch *w)
{
	struct image_feed *f = d->image_feed;
	char (*recs)[RECORD_MAX];
	size_t n;

	pthread_mutex_lock(&f->mu);
	n = w->nrec;
	recs = n > 0 ? xmalloc(n * sizeof(w->rec[0])) : NULL;
	if (n > 0)
		memcpy(recs, w->rec, n * sizeof(w->rec[0]));
	w->nrec = 0;
	pthread_mutex_unlock(&f->mu);
	for (size_t i = 0; i < n; i++)
		deliver(d, w, recs[i]);
	free(recs);
}

static void
async_cb(uv_async_t *a)
{
	struct sandqd *d = a->data;
	struct image_watch *w;

	TAILQ_FOREACH(w, &d->image_feed->live, link)
		flush(d, w);
}

/*
 * An event of the pull's: to the host's database and to the stream of the
 * tenant whose job started it (not carried by a job: see the top).
 */
static void
pull_event(struct sandqd *d, const struct image_watch *w, const char *action,
    bool allowed, enum audit_level lv, const char *detail)
{
	struct audit_event ev;

	audit_event_init(&ev, AUDIT_CAT_IMAGE, action, w->ref, allowed, lv);
	ev.time_ms = (int64_t)now_ms();
	audit_text_set(ev.host, sizeof(ev.host), d->cfg.host);
	if (w->has_tenant)
		audit_text_set(ev.tenant, sizeof(ev.tenant), d->tenants[w->tenant].name);
	audit_text_set(ev.job, sizeof(ev.job), w->job);
	if (detail != NULL)
		audit_text_set(ev.detail, sizeof(ev.detail), detail);
	if (d->audit != NULL)
		(void)audit_writer_emit(d->audit, &ev);
	/* With Redis down it is lost there, and counted; the database has it. */
	if (w->has_tenant && rq_audit(d->rq, &ev, 1) < 0)
		d->audit_stream_lost++;
}

void
image_pull_init(struct sandqd *d)
{
	struct image_feed *f = xcalloc(1, sizeof(*f));

	pthread_mutex_init(&f->mu, NULL);
	TAILQ_INIT(&f->live);
	if (uv_async_init(d->loop, &f->async, async_cb) != 0)
		fatalx("cannot make the image pulls' progress relay");
	f->async.data = d;
	d->image_feed = f;
}

void
image_pull_stop(struct sandqd *d)
{
	struct image_feed *f = d->image_feed;

	if (f == NULL || f->closed)
		return;
	pthread_mutex_lock(&f->mu);
	f->closed = true;
	pthread_mutex_unlock(&f->mu);
	uv_close((uv_handle_t *)&f->async, NULL);
}

void
image_pull_free(struct sandqd *d)
{
	struct image_feed *f = d->image_feed;
	struct image_watch *w;

	if (f == NULL)
		return;
	/* The loop has ended: no pull runs, every watch was ended. */
	while ((w = TAILQ_FIRST(&f->live)) != NULL) {
		TAILQ_REMOVE(&f->live, w, link);
		free(w);
	}
	pthread_mutex_destroy(&f->mu);
	free(f);
	d->image_feed = NULL;
}

struct image_watch *
image_pull_begin(struct sandqd *d, const struct dimg_op *op, const char *src,
    size_t tenant, const char *job, struct img_pull_opts *opts)
{
	struct image_watch *w = xcalloc(1, sizeof(*w));

	w->feed = d->image_feed;
	w->op = op;
	snprintf(w->ref, sizeof(w->ref), "%s", src);
	if (job != NULL && job[0] != '\0' && tenant < d->ntenants) {
		w->tenant = tenant;
		w->has_tenant = true;
		snprintf(w->job, sizeof(w->job), "%s", job);
	}
	w->t0 = mono_ns();
	TAILQ_INSERT_TAIL(&w->feed->live, w, link);
	opts->progress = on_progress;
	opts->progress_arg = w;
	pull_event(d, w, "pull_started", true, AUDIT_LVL_INFO, NULL);
	return w;
}

void
image_pull_end(struct sandqd *d, struct image_watch *w, int rc, const struct err *e,
    const struct img_record *r, const struct img_pull_stats *st, uint64_t ms)
{
	json_t *o;
	char *detail;

	if (w == NULL)
		return;
	exporter_count(d, rc == 0 ? EXP_PULL_OK : EXP_PULL_FAILED, 0);
	flush(d, w);
	if (rc == 0 && r != NULL)
		o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "digest", r->manifest,
		    "bytes", (json_int_t)r->blob_bytes, "unpacked_bytes",
		    (json_int_t)r->unpacked_bytes, "layers", (json_int_t)r->nlayers,
		    "layers_unpacked", (json_int_t)(st != NULL ? st->unpacked : 0),
		    "duration_ms", (json_int_t)ms, "reused", st != NULL && st->reused);
	else
		o = json_pack("{s:I, s:s}", "duration_ms", (json_int_t)ms, "error",
		    e != NULL ? e->msg : "the pull failed");
	detail = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (rc == 0)
		pull_event(d, w, "pulled", true, AUDIT_LVL_INFO, detail);
	else
		pull_event(d, w, "pull_failed", false, AUDIT_LVL_WARNING, detail);
	free(detail);
	TAILQ_REMOVE(&w->feed->live, w, link);
	free(w);
}

/*** The answer of image.pull ***/

/* The image as image.pull's data: one msgpack map (docs/protocol.md). */
static int
pull_data(const struct djob *j, const struct img_record *r, bool pulled, uint64_t ms,
    char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 11);
	pack_kv_str(&pk, "reference", j->job->image);
	pack_kv_str(&pk, "digest", r->manifest);
	pack_kv_str(&pk, "os", r->os);
	pack_kv_str(&pk, "arch", r->arch);
	pack_str(&pk, "layers");
	msgpack_pack_array(&pk, r->nlayers);
	for (size_t i = 0; i < r->nlayers; i++) {
		msgpack_pack_map(&pk, 3);
		pack_kv_str(&pk, "digest", r->layers[i].digest);
		pack_kv_u64(&pk, "size", r->layers[i].size);
		pack_kv_u64(&pk, "unpacked", r->layers[i].unpacked);
	}
	pack_kv_u64(&pk, "bytes", r->blob_bytes);
	pack_kv_u64(&pk, "unpacked_bytes", r->unpacked_bytes);
	pack_kv_bool(&pk, "pulled", pulled);
	pack_kv_u64(&pk, "pulled_at", r->pulled_ms);
	pack_kv_u64(&pk, "last_used", r->last_use_ms);
	pack_kv_u64(&pk, "duration_ms", ms);
	return pack_release(&sb, out, outlen);
}

void
image_pull_answer(struct sandqd *d, struct djob *j, const struct img_record *r,
    bool pulled, uint64_t ms)
{
	struct result *res = result_new(j->id);
	char *data = NULL;
	size_t len = 0;

	if (pull_data(j, r, pulled, ms, &data, &len) < 0)
		fatalx("cannot encode an image");
	res->status = ST_OK;
	res->exit_code = 0;
	res->wall_ms = ms;
	res->data = (uint8_t *)data;
	res->data_len = len;
	/* Named at the top as a run's image is (jobs.c names runs' only). */
	res->image = xstrdup(j->job->image);
	res->image_digest = xstrdup(r->manifest);
	res->image_name = j->image_name != NULL ? xstrdup(j->image_name) : NULL;
	log_info("image %s: job %s of %s answered (%s)", r->reference, j->id,
	    d->tenants[j->tenant].name, pulled ? "pulled" : "cached");
	jobs_answer(d, j, res);
	result_free(res);
}
