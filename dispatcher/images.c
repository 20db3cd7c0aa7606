/*
 * images.c - sandqd's image cache (STATE/images) and the jobs that wait
 * for their image.
 *
 * A run admitted on an image other than host (core/intake.c checked its
 * reference against image_sources) is resolved before it may run: its
 * reference is looked up in the cache (images/cache.h); found, the job
 * takes the image's manifest digest (image_id), Env and WorkingDir at
 * once (images_apply()) and is queued as any job. Not found, the image is
 * pulled off the event loop (uv_queue_work: skopeo, digests, unpacking
 * take seconds to minutes), one pull per reference at a time: later jobs
 * on the same reference wait on the same pull. A waiting job is queued
 * (it counts as queued, and in `sandq status` as pulling) but not
 * runnable (core/runq.c), nor is any later job on its sandbox; it can be
 * cancelled or expire like any queued job. When the pull ends, every job
 * still waiting on it gets the digest, or is answered rejected with code
 * image and the pull's error, which names the image.
 *
 * At most IMAGES_PULLS_MAX pulls run at once (libuv's pool has four
 * threads, which the shared snapshot store needs too); more wait their
 * turn. After pulls, once none is running, the cache is shrunk to
 * image_cache_bytes (img_cache_evict), least recently used first, keeping
 * every image a queued or running job names (their digests, listed on
 * the loop before the work starts). A refused pull that fetched anything
 * is followed by an eviction too, bound or not: what it fetched and
 * unpacked (blobs, the layers below a refused one) is named by no record,
 * and without it a tenant naming hostile images could fill the disk
 * while no good pull comes to sweep it. While an eviction runs no lookup is
 * made: jobs arriving then wait for it and are resolved afresh after it,
 * so no job takes a digest an eviction is removing. Each use of an image
 * marks it used (img_cache_touch), for the eviction's order.
 *
 * A job's digest is final: a tag that moves in its registry is seen again
 * only once the cache has let the image go (docs/images.md).
 *
 * An image.pull job (`sandq image pull`) goes the same way without a
 * worker: answered at once when the cache has its image, else queued on
 * the same single pull as the runs, and answered with the image, or
 * rejected with the pull's error, when it ends. image_pull.c makes the
 * answer, relays the pull's progress and puts the pull on the audit trail.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/cache.h"
#include "../images/ref.h"
#include "dispatcher.h"

#define IMAGES_PULLS_MAX 2	/* pulls at once */

enum iop_kind { IOP_PULL, IOP_EVICT };

/* A pull or an eviction, and the jobs waiting on it. */
struct dimg_op {
	enum iop_kind kind;
	char ref[IMG_REF_MAX + 1];	/* pull: skopeo's source */
	struct img_pull_opts opts;	/* pull: how */
	char root[PATH_MAX];		/* the cache, for the thread's own handle */
	uint64_t max_bytes;		/* evict: the bound */
	char **keep;			/* evict: digests in use (owned) */
	size_t nkeep;
	/* Out, from the thread. */
	int rc;
	struct err e;
	struct img_record *rec;		/* pull: the image (owned) */
	struct img_pull_stats st;
	struct img_evict_result ev;
	int64_t t0;			/* mono ns when it started */
	struct image_watch *watch;	/* pull: progress, audit (image_pull.c) */
	char starter[JOB_ID_MAX + 1];	/* pull: the first job to wait on it, or "" */
	size_t starter_tenant;		/* and its tenant */
	/* On the loop. */
	bool started, done;
	size_t waiting;			/* jobs whose img_wait is this op */
	uv_work_t work;
	struct sandqd *d;
	TAILQ_ENTRY(dimg_op) link;
};
TAILQ_HEAD(dimg_list, dimg_op);

struct dimages {
	struct img_cache *cache;	/* the loop's handle */
	char root[PATH_MAX];
	struct dimg_list ops;		/* pending and running, in order */
	size_t pulling;			/* pulls running */
	struct dimg_op *evict;		/* the eviction pending or running, or NULL */
	bool evict_due;			/* a pull added to the cache, or a refused one
					   left garbage, since the last */
	uint64_t pulls, hits;		/* pulls done, lookups that found the image */
};

static void op_start_next(struct sandqd *d);
static bool pull_job_cached(struct sandqd *d, struct djob *j,
    const struct img_record *r);
static bool pull_job_before(struct sandqd *d, struct djob *j);

/*** The jobs' side ***/

/* The reference of job's image, parsed; its skopeo source into src. */
static int
job_source(const struct job *job, struct img_ref *ref, char *src, size_t n)
{
	struct err e;

	if (img_ref_parse(job->image, ref, &e) < 0)
		return -EINVAL;
	return img_ref_source(ref, src, n) < 0 ? -EINVAL : 0;
}

/*
 * Gives j the image of record r: image_id, the image's Env under the
 * job's own (the job's value wins per variable), and, for a job without
 * a cwd that commits nothing, the image's WorkingDir (else /). The job is
 * encoded again and decoded once more, so the worker never gets one it
 * cannot read (a variable name the decoder refuses, too much env). Marks
 * the image used. Returns true, or false with msg filled (the job is
 * unchanged but for what was merged).
 */
static bool
images_apply(struct sandqd *d, struct djob *j, const struct img_record *r,
    char *msg, size_t msglen)
{
	struct job *job = j->job, *back = NULL;
	struct err e = { 0 };
	char *norm = NULL;
	size_t normlen = 0, added = 0;

	free(job->image_id);
	job->image_id = xstrdup(r->manifest);
	j->img_env = 0;
	j->img_cwd = false;
	/* A sandbox.create or import takes the digest alone. */
	if (JOB_OP_RUNS(job->op) && r->nenv > 0) {
		job->env = xreallocarray(job->env, job->nenv + r->nenv + 1, sizeof(char *));
		for (size_t i = 0; i < r->nenv; i++) {
			const char *eq = strchr(r->env[i], '=');
			size_t klen = eq != NULL ? (size_t)(eq - r->env[i]) : 0;
			bool have = false;

			if (eq == NULL)
				continue;	/* no value: nothing to set */
			for (size_t k = 0; k < job->nenv && !have; k++)
				have = strncmp(job->env[k], r->env[i], klen + 1) == 0;
			if (!have)
				job->env[job->nenv + added++] = xstrdup(r->env[i]);
		}
		job->nenv += added;
		job->env[job->nenv] = NULL;
		j->img_env = (uint16_t)added;
	}
	/* A run on a sandbox starts in its files (the worker's default). */
	if (JOB_OP_RUNS(job->op) && job->cwd == NULL && job->sandbox == NULL) {
		job->cwd = xstrdup(r->working_dir != NULL && r->working_dir[0] == '/' ?
		    r->working_dir : "/");
		j->img_cwd = true;
	}
	if (payload_job_encode(job, &norm, &normlen) < 0)
		fatalx("cannot encode a job");
	if (payload_job_decode(norm, normlen, &back, NULL, &e) < 0) {
		free(norm);
		snprintf(msg, msglen, "field 'image': image '%.100s': its config does not "
		    "fit a job: %.180s", job->image, e.msg);
		return false;
	}
	job_free(back);
	free(j->norm);
	j->norm = norm;
	j->normlen = normlen;
	if (img_cache_touch(d->images->cache, r->manifest, &e) < 0)
		log_debug("image %s: %s", r->manifest, e.msg);
	return true;
}

/* j waits on op. */
static void
wait_on(struct dimg_op *op, struct djob *j)
{
	j->img_wait = op;
	op->waiting++;
	if (op->starter[0] == '\0') {
		/* Named on the audit trail as the job that started the pull. */
		snprintf(op->starter, sizeof(op->starter), "%s", j->id);
		op->starter_tenant = j->tenant;
	}
}

/* The pull of src running or pending, or NULL. */
static struct dimg_op *
pull_of(struct dimages *im, const char *src)
{
	struct dimg_op *op;

	TAILQ_FOREACH(op, &im->ops, link)
		if (op->kind == IOP_PULL && !op->done && strcmp(op->ref, src) == 0)
			return op;
	return NULL;
}

/* Whether ref's registry is one image_plain_http names. */
static bool
plain_http(const struct config *cfg, const struct img_ref *ref)
{
	char hostport[IMG_HOST_MAX + 8];

	if (ref->kind != IMG_DOCKER)
		return false;
	if (ref->port != 0)
		snprintf(hostport, sizeof(hostport), "%s:%u", ref->host, (unsigned)ref->port);
	else
		snprintf(hostport, sizeof(hostport), "%s", ref->host);
	for (size_t i = 0; i < cfg->nimage_plain_http; i++)
		if (strcasecmp(cfg->image_plain_http[i], hostport) == 0)
			return true;
	return false;
}

static struct dimg_op *
op_new(struct sandqd *d, enum iop_kind kind)
{
	struct dimg_op *op = xcalloc(1, sizeof(*op));

	op->kind = kind;
	op->d = d;
	op->work.data = op;
	snprintf(op->root, sizeof(op->root), "%s", d->images->root);
	TAILQ_INSERT_TAIL(&d->images->ops, op, link);
	return op;
}

static void
op_free(struct dimg_op *op)
{
	for (size_t i = 0; i < op->nkeep; i++)
		free(op->keep[i]);
	free(op->keep);
	img_record_free(op->rec);
	free(op);
}

/* What resolving a job came to. */
enum resolved { R_READY, R_WAIT, R_FAIL };

/*
 * Resolves j's image: its digest now (R_READY), a pull or eviction to
 * wait on (R_WAIT), or a refusal (R_FAIL, msg filled).
 */
static enum resolved
resolve(struct sandqd *d, struct djob *j, char *msg, size_t msglen)
{
	struct dimages *im = d->images;
	struct img_record *r = NULL;
	struct dimg_op *op;
	struct img_ref ref;
	struct err e = { 0 };
	char src[IMG_REF_MAX + 1];
	int rc;

	if (job_source(j->job, &ref, src, sizeof(src)) < 0) {
		snprintf(msg, msglen, "field 'image': '%.256s' has no source to pull "
		    "from", j->job->image);
		return R_FAIL;
	}
	if (im->evict != NULL) {
		wait_on(im->evict, j);
		return R_WAIT;
	}
	rc = img_cache_lookup(im->cache, src, &r, &e);
	if (rc == 0) {
		bool ok = j->job->op == OP_IMAGE_PULL ? pull_job_cached(d, j, r) :
		    images_apply(d, j, r, msg, msglen);

		img_record_free(r);
		im->hits++;
		return ok ? R_READY : R_FAIL;
	}
	if (rc != -ENOENT)
		log_warnx("image cache: %s; pulling %s again", e.msg, src);
	if ((op = pull_of(im, src)) == NULL) {
		op = op_new(d, IOP_PULL);
		snprintf(op->ref, sizeof(op->ref), "%s", src);
		op->opts.plain_http = plain_http(&d->cfg, &ref);
		op->opts.timeout_ms = (unsigned)d->cfg.image_pull_timeout_ms;
		op->opts.unpack_uid = (uid_t)d->cfg.image_unpack_uid;
		op->opts.unpack_gid = (gid_t)d->cfg.image_unpack_uid;
		op->opts.retry_times = 1;
		op->opts.limits.max_bytes = (uint64_t)d->cfg.image_max_layer_bytes;
		op->opts.limits.max_entries = (uint64_t)d->cfg.image_max_layer_entries;
		op->opts.limits.max_ratio = (uint32_t)d->cfg.image_max_layer_ratio;
		log_info("image %s: pulling (job %s of %s)", src, j->id,
		    d->tenants[j->tenant].name);
	}
	wait_on(op, j);
	op_start_next(d);
	return R_WAIT;
}

bool
images_before(struct sandqd *d, struct djob *j)
{
	const struct job *job = j->job;
	char msg[400];

	if (job != NULL && job->op == OP_IMAGE_PULL)
		return pull_job_before(d, j);
	if (job == NULL || !JOB_HAS_IMAGE(job) || job->image == NULL ||
	    strcmp(job->image, "host") == 0 || job->image_id != NULL)
		return true;
	if (d->images == NULL) {
		jobs_answer_error(d, j, ST_INTERNAL, "image", "field 'image': this host "
		    "keeps no image cache");
		return false;
	}
	if (resolve(d, j, msg, sizeof(msg)) == R_FAIL) {
		jobs_answer_error(d, j, ST_REJECTED, "image", msg);
		return false;
	}
	return true;
}

void
images_unapply(struct djob *j)
{
	struct job *job = j->job;

	for (; j->img_env > 0 && job->nenv > 0; j->img_env--)
		free(job->env[--job->nenv]);
	if (job->env != NULL) {
		job->env[job->nenv] = NULL;
		if (job->nenv == 0) {
			free(job->env);
			job->env = NULL;
		}
	}
	if (j->img_cwd) {
		free(job->cwd);
		job->cwd = NULL;
		j->img_cwd = false;
	}
	free(job->image_id);
	job->image_id = NULL;
}

void
images_forget(struct djob *j)
{
	struct dimg_op *op = j->img_wait;

	if (op == NULL)
		return;
	j->img_wait = NULL;
	op->waiting--;
	if (op->done && op->waiting == 0) {
		TAILQ_REMOVE(&op->d->images->ops, op, link);
		op_free(op);
	}
}

size_t
images_waiting(const struct tenant *t)
{
	const struct djob *j;
	size_t n = 0;

	TAILQ_FOREACH(j, &t->queue, link)
		n += j->img_wait != NULL;
	return n;
}

/*** image.pull: a pull a client asks for (answers: image_pull.c) ***/

/* j, an image.pull, found its image in the cache: answered now. */
static bool
pull_job_cached(struct sandqd *d, struct djob *j, const struct img_record *r)
{
	image_pull_answer(d, j, r, false, 0);
	return true;
}

/*
 * j, an image.pull (not queued): answered at once from the cache, or
 * waits on the pull of its reference as a run would (queued, not
 * runnable, counted as pulling), to be answered when it ends
 * (pull_job_release). Returns true if j is to be queued, false if it was
 * answered.
 */
static bool
pull_job_before(struct sandqd *d, struct djob *j)
{
	char msg[400];

	if (d->images == NULL) {
		jobs_answer_error(d, j, ST_INTERNAL, "image", "field 'image': this host "
		    "keeps no image cache");
		return false;
	}
	switch (resolve(d, j, msg, sizeof(msg))) {
	case R_WAIT:
		return true;
	case R_READY:
		return false;		/* answered from the cache */
	default:
		jobs_answer_error(d, j, ST_REJECTED, "image", msg);
		return false;
	}
}

/*
 * j, an image.pull queued on op (done), leaves the queue: answered with
 * the image or the pull's error, or, after an eviction, resolved afresh
 * (queued again if it waits once more).
 */
static void
pull_job_release(struct sandqd *d, struct dimg_op *op, struct djob *j)
{
	struct tenant *t = &d->tenants[j->tenant];
	char msg[400];

	images_forget(j);
	runq_remove(t, j);
	if (op->kind == IOP_EVICT) {
		if (pull_job_before(d, j))
			runq_enqueue(t, j);
	} else if (op->rc == 0) {
		image_pull_answer(d, j, op->rec, !op->st.reused,
		    (uint64_t)(mono_ns() - op->t0) / 1000000);
	} else {
		snprintf(msg, sizeof(msg), "field 'image': %s", op->e.msg);
		jobs_answer_error(d, j, ST_REJECTED, "image", msg);
	}
}

/*** The work, off the loop ***/

static bool
kept(void *arg, const struct img_record *r)
{
	const struct dimg_op *op = arg;

	for (size_t i = 0; i < op->nkeep; i++)
		if (strcmp(op->keep[i], r->manifest) == 0)
			return true;
	return false;
}

/* In a thread of libuv's pool: the pull or eviction, on its own handle. */
static void
work_cb(uv_work_t *w)
{
	struct dimg_op *op = w->data;
	struct img_cache *c = NULL;

	op->t0 = mono_ns();
	if ((op->rc = img_cache_open(op->root, &c, &op->e)) < 0)
		return;
	if (op->kind == IOP_PULL) {
		op->opts.stats = &op->st;
		op->rc = img_cache_pull(c, op->ref, &op->opts, &op->rec, &op->e);
	} else {
		op->rc = img_cache_evict(c, op->max_bytes, kept, op, &op->ev, &op->e);
	}
	img_cache_close(c);
}

/*** Back on the loop ***/

/* Every digest a queued or running job names: what an eviction keeps. */
static void
keep_in_use(struct sandqd *d, struct dimg_op *op)
{
	struct djob *j;

	for (size_t i = 0; i < d->ntenants; i++)
		TAILQ_FOREACH(j, &d->tenants[i].queue, link)
			if (j->job != NULL && j->job->image_id != NULL) {
				op->keep = xreallocarray(op->keep, op->nkeep + 1, sizeof(char *));
				op->keep[op->nkeep++] = xstrdup(j->job->image_id);
			}
	for (size_t i = 0; i < d->nslots; i++) {
		j = d->slots[i].run.job;
		if (j != NULL && j->job != NULL && j->job->image_id != NULL) {
			op->keep = xreallocarray(op->keep, op->nkeep + 1, sizeof(char *));
			op->keep[op->nkeep++] = xstrdup(j->job->image_id);
		}
	}
}

/*
 * Takes j (queued, waiting on op, which is done) off the wait: it gets
 * the pulled image, waits anew (after an eviction), or is answered.
 */
static void
release(struct sandqd *d, struct dimg_op *op, struct djob *j)
{
	struct tenant *t = &d->tenants[j->tenant];
	char msg[400];
	enum resolved how = R_FAIL;

	if (j->job->op == OP_IMAGE_PULL) {
		pull_job_release(d, op, j);
		return;
	}
	images_forget(j);
	if (op->kind == IOP_EVICT)
		how = resolve(d, j, msg, sizeof(msg));
	else if (op->rc == 0)
		how = images_apply(d, j, op->rec, msg, sizeof(msg)) ? R_READY : R_FAIL;
	else
		snprintf(msg, sizeof(msg), "field 'image': %s", op->e.msg);
	if (how != R_FAIL)
		return;
	runq_remove(t, j);
	jobs_answer_error(d, j, ST_REJECTED, "image", msg);
}

static void
after_cb(uv_work_t *w, int status)
{
	struct dimg_op *op = w->data;
	struct sandqd *d = op->d;
	struct dimages *im = d->images;
	double ms = (double)(mono_ns() - op->t0) / 1e6;

	op->done = true;
	if (status < 0 && op->rc == 0)
		op->rc = err_set(&op->e, status, "image '%s': the pull was cancelled",
		    op->ref);
	if (op->kind == IOP_PULL) {
		im->pulling--;
		im->pulls++;
		if (op->rc == 0) {
			im->evict_due |= d->cfg.image_cache_bytes > 0;
			log_info("image %s: %s as %s in %.0f ms (%u layers unpacked)",
			    op->ref, op->st.reused ? "found" : "pulled", op->rec->manifest,
			    ms, op->st.unpacked);
		} else {
			/* What it fetched before the refusal is garbage now. */
			im->evict_due |= op->st.fetched > 0;
			log_warnx("%s", op->e.msg);
		}
	} else {
		im->evict = NULL;
		if (op->rc == 0 && op->ev.images > 0)
			log_info("image cache: %u images, %u layers evicted; %llu bytes "
			    "now (bound %llu)", op->ev.images, op->ev.layers,
			    (unsigned long long)op->ev.bytes_after,
			    (unsigned long long)op->max_bytes);
		else if (op->rc == 0 && op->ev.layers + op->ev.blobs > 0)
			log_info("image cache: %u layers, %u blobs that no image names "
			    "removed", op->ev.layers, op->ev.blobs);
		else if (op->rc < 0)
			log_warnx("image cache eviction: %s", op->e.msg);
	}
	if (op->kind == IOP_PULL) {
		image_pull_end(d, op->watch, op->rc, &op->e, op->rec, &op->st,
		    (uint64_t)(ms > 0 ? ms : 0));
		op->watch = NULL;
	}
	status_images_changed(d);
	/* Every job still waiting on it (cancelled ones are gone already). */
	op->waiting++;		/* held while its waiters are released */
	for (size_t i = 0; i < d->ntenants; i++) {
		struct djob *j, *next;

		for (j = TAILQ_FIRST(&d->tenants[i].queue); j != NULL; j = next) {
			next = TAILQ_NEXT(j, link);
			if (j->img_wait == op)
				release(d, op, j);
		}
	}
	if (--op->waiting == 0) {
		TAILQ_REMOVE(&im->ops, op, link);
		op_free(op);
	}
	op_start_next(d);
	if (!d->stopping)
		sched_dispatch(d);
	sandqd_check_drained(d);
}

/*
 * Starts what may start: pending pulls up to IMAGES_PULLS_MAX, unless an
 * eviction waits; then, with no pull running and one due, an eviction.
 */
static void
op_start_next(struct sandqd *d)
{
	struct dimages *im = d->images;
	struct dimg_op *op;

	if (d->stopping)
		return;
	if (im->evict != NULL) {
		if (im->evict->started || im->pulling > 0)
			return;
		keep_in_use(d, im->evict);
		im->evict->started = true;
		if (uv_queue_work(d->loop, &im->evict->work, work_cb, after_cb) != 0)
			fatalx("cannot queue an image cache eviction");
		return;
	}
	TAILQ_FOREACH(op, &im->ops, link) {
		if (im->pulling >= IMAGES_PULLS_MAX)
			break;
		if (op->started || op->kind != IOP_PULL)
			continue;
		op->started = true;
		im->pulling++;
		op->watch = image_pull_begin(d, op, op->ref, op->starter_tenant, op->starter,
		    &op->opts);
		if (uv_queue_work(d->loop, &op->work, work_cb, after_cb) != 0)
			fatalx("cannot queue an image pull");
	}
	if (im->pulling == 0 && im->evict_due) {
		bool pending = false;

		TAILQ_FOREACH(op, &im->ops, link)
			pending |= op->kind == IOP_PULL && !op->done;
		if (pending)
			return;
		im->evict_due = false;
		im->evict = op_new(d, IOP_EVICT);
		/* No bound: only what no record names goes. */
		im->evict->max_bytes = d->cfg.image_cache_bytes > 0 ?
		    (uint64_t)d->cfg.image_cache_bytes : UINT64_MAX;
		op_start_next(d);
	}
}

/*** Start and stop ***/

void
images_start(struct sandqd *d)
{
	struct dimages *im = xcalloc(1, sizeof(*im));
	struct err e = { 0 };

	snprintf(im->root, sizeof(im->root), "%s/images", d->cfg.state);
	TAILQ_INIT(&im->ops);
	if (img_cache_open(im->root, &im->cache, &e) < 0)
		fatalx("%s", e.msg);
	d->images = im;
	image_pull_init(d);
}

const char *
images_root(const struct sandqd *d)
{
	return d->images != NULL ? d->images->root : NULL;
}

void
images_free(struct sandqd *d)
{
	struct dimages *im = d->images;
	struct dimg_op *op;

	if (im == NULL)
		return;
	/* The loop has run to its end: no work is pending. */
	while ((op = TAILQ_FIRST(&im->ops)) != NULL) {
		TAILQ_REMOVE(&im->ops, op, link);
		op_free(op);
	}
	img_cache_close(im->cache);
	free(im);
	d->images = NULL;
	image_pull_free(d);
}
