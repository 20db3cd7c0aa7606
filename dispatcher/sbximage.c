/*
 * sbximage.c - what sandqd holds each sandbox runs on: its image and its
 * workdir (docs/images.md "Sandboxes on images").
 *
 * A run on a sandbox that records an image runs on that image, so sandqd
 * must know it before it resolves the run's image (core/intake.c picks
 * it, images_before() pulls it). The record itself is the sandbox's row:
 * in the local store (STATE/store, the workers') or in Redis (snapshot
 * store redis), which sandqd could read only off the loop, for every job.
 * Instead sandqd keeps what it learned as a hint, and the worker, which
 * reads the row for every run on a sandbox anyway, checks it:
 *
 *   - at intake, a run on sandbox S takes S's image from the hint unless
 *     it names one, and carries what sandqd believed (sandbox_image,
 *     sandbox_workdir; absent: S records none);
 *   - the worker compares that belief, and the run's image, with the row;
 *     on a difference it runs nothing and answers "image_stale" with the
 *     row's image and workdir (sbximage_stale() reads them);
 *   - sandqd then corrects the hint and admits the run again, on the
 *     sandbox's image, from the head of its queue, or answers it rejected
 *     (code image) when it named another image than the sandbox's.
 *
 * So a stale hint costs one more trip to a worker, never a run on the
 * wrong image, and a run on a sandbox without an image costs one lookup
 * here and two string compares in the worker. The hint is learned from
 * what the workers answer: a sandbox.create or sandbox.import that made a
 * sandbox on an image, a fork (the source's hint), a delete (forgotten),
 * and each correction. It holds only sandboxes that record something,
 * at most SBXIMAGE_MAX of them (the oldest learned is dropped first: it
 * is learned again on its next run).
 */
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../store/store.h"
#include "dispatcher.h"

#define SBXIMAGE_MAX 16384		/* sandboxes held */
#define SBXIMAGE_BUCKETS 4096		/* hash buckets (a power of two) */
#define SBXIMAGE_STALE_MAX 3		/* corrections of one job before it fails */

struct sbxent {
	char *key;			/* "TENANT\0ID" */
	size_t keylen;
	char *image;			/* canonical reference, or NULL: none */
	char *workdir;			/* or NULL: /workspace */
	struct sbxent *next;		/* in its bucket */
	TAILQ_ENTRY(sbxent) age;	/* oldest first */
};
TAILQ_HEAD(sbxage, sbxent);

struct sbximages {
	struct sbxent *bucket[SBXIMAGE_BUCKETS];
	struct sbxage age;
	size_t n;
};

/* FNV-1a of the key. */
static size_t
key_hash(const char *key, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)key[i];
		h *= 1099511628211ULL;
	}
	return (size_t)h & (SBXIMAGE_BUCKETS - 1);
}

/* "TENANT\0ID" into buf; its length. */
static size_t
key_make(char *buf, size_t size, const char *tenant, const char *id)
{
	int n = snprintf(buf, size, "%s%c%s", tenant, '\0', id);

	return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}

/* The entry of key (len bytes) and the link that points at it (or would). */
static struct sbxent *
lookup_key(struct sbximages *s, const char *key, size_t len,
    struct sbxent ***linkp)
{
	struct sbxent **link;

	for (link = &s->bucket[key_hash(key, len)]; *link != NULL;
	    link = &(*link)->next)
		if ((*link)->keylen == len && memcmp((*link)->key, key, len) == 0)
			break;
	if (linkp != NULL)
		*linkp = link;
	return *link;
}

/* The entry of tenant/id, or NULL. */
static struct sbxent *
lookup(struct sbximages *s, const char *tenant, const char *id,
    struct sbxent ***linkp)
{
	char key[JOB_TENANT_MAX + JOB_SANDBOX_ID_MAX + 2];
	size_t len = key_make(key, sizeof(key), tenant, id);

	if (s == NULL || len == 0)
		return NULL;
	return lookup_key(s, key, len, linkp);
}

/* Unlinks x and frees it. */
static void
drop(struct sbximages *s, struct sbxent *x)
{
	struct sbxent **link;

	(void)lookup_key(s, x->key, x->keylen, &link);
	*link = x->next;
	TAILQ_REMOVE(&s->age, x, age);
	s->n--;
	free(x->key);
	free(x->image);
	free(x->workdir);
	free(x);
}

static void
forget(struct sbximages *s, const char *tenant, const char *id)
{
	struct sbxent *x = lookup(s, tenant, id, NULL);

	if (x != NULL)
		drop(s, x);
}

/* Holds that tenant/id runs on image with its files at workdir (NULL: none). */
static void
learn(struct sandqd *d, const char *tenant, const char *id, const char *image,
    const char *workdir)
{
	struct sbximages *s = d->sbximages;
	struct sbxent **link, *x;

	if (image != NULL && image[0] == '\0')
		image = NULL;
	if (workdir != NULL && workdir[0] == '\0')
		workdir = NULL;
	forget(s, tenant, id);
	if (image == NULL && workdir == NULL)
		return;		/* none is what an unknown sandbox is held to */
	if (s->n >= SBXIMAGE_MAX)
		drop(s, TAILQ_FIRST(&s->age));
	x = xcalloc(1, sizeof(*x));
	x->keylen = strlen(tenant) + 1 + strlen(id);
	x->key = xmalloc(x->keylen + 1);
	key_make(x->key, x->keylen + 1, tenant, id);
	x->image = image != NULL ? xstrdup(image) : NULL;
	x->workdir = workdir != NULL ? xstrdup(workdir) : NULL;
	(void)lookup_key(s, x->key, x->keylen, &link);
	*link = x;
	TAILQ_INSERT_TAIL(&s->age, x, age);
	s->n++;
}

void
sbximage_init(struct sandqd *d)
{
	d->sbximages = xcalloc(1, sizeof(*d->sbximages));
	TAILQ_INIT(&d->sbximages->age);
}

void
sbximage_free(struct sandqd *d)
{
	struct sbximages *s = d->sbximages;
	struct sbxent *x;

	if (s == NULL)
		return;
	while ((x = TAILQ_FIRST(&s->age)) != NULL)
		drop(s, x);
	free(s);
	d->sbximages = NULL;
}

bool
sbximage_get(const struct sandqd *d, const char *tenant, const char *id,
    const char **image, const char **workdir)
{
	const struct sbxent *x = lookup(d->sbximages, tenant, id, NULL);

	*image = x != NULL ? x->image : NULL;
	*workdir = x != NULL ? x->workdir : NULL;
	return x != NULL;
}

void
sbximage_admit(struct sandqd *d, struct djob *j, struct job *job,
    struct intake *in)
{
	const char *image = NULL, *workdir = NULL;

	j->image_named = job->image != NULL;
	if (!JOB_OP_RUNS(job->op) || job->sandbox == NULL)
		return;
	(void)sbximage_get(d, d->tenants[j->tenant].name, job->sandbox, &image,
	    &workdir);
	in->sandbox_image = image;
	/* What the worker checks against the row (intake refused a client's). */
	free(job->sandbox_image);
	free(job->sandbox_workdir);
	job->sandbox_image = image != NULL ? xstrdup(image) : NULL;
	job->sandbox_workdir = workdir != NULL ? xstrdup(workdir) : NULL;
}

void
sbximage_result(struct sandqd *d, const struct djob *j, const struct result *r)
{
	const struct job *job = j->job;
	const char *tenant = d->tenants[j->tenant].name, *image, *workdir;

	if (job == NULL || job->sandbox == NULL || r->status != ST_OK)
		return;
	switch (job->op) {
	case OP_SANDBOX_CREATE:
		learn(d, tenant, job->sandbox, job->image, job->workdir);
		break;
	case OP_SANDBOX_IMPORT:
		/* Into an existing sandbox, it matched what that one records. */
		if (job->image != NULL || job->workdir != NULL)
			learn(d, tenant, job->sandbox, job->image, job->workdir);
		break;
	case OP_SANDBOX_FORK: {
		char *img = NULL, *wd = NULL;

		/* Copied: learning may drop the source's entry to make room. */
		if (job->to == NULL)
			break;
		(void)sbximage_get(d, tenant, job->sandbox, &image, &workdir);
		img = image != NULL ? xstrdup(image) : NULL;
		wd = workdir != NULL ? xstrdup(workdir) : NULL;
		learn(d, tenant, job->to, img, wd);
		free(img);
		free(wd);
		break;
	}
	case OP_SANDBOX_DELETE:
		forget(d->sbximages, tenant, job->sandbox);
		break;
	default:
		break;
	}
}

/*
 * Reads the row's image and workdir from an image_stale answer's data,
 * {"image": str, "workdir": str} ("" for none): bounded as the store
 * bounds them, printable ASCII. Returns 0, or -EBADMSG.
 */
static int
stale_data(const struct result *r, char image[STORE_IMAGE_MAX + 1],
    char workdir[STORE_WORKDIR_MAX + 1])
{
	msgpack_unpacked u;
	int rc = -EBADMSG, seen = 0;

	image[0] = workdir[0] = '\0';
	if (r->data == NULL || r->data_len > 4096)
		return -EBADMSG;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL) !=
	    MSGPACK_UNPACK_SUCCESS || u.data.type != MSGPACK_OBJECT_MAP)
		goto out;
	for (uint32_t i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object *k = &u.data.via.map.ptr[i].key;
		const msgpack_object *v = &u.data.via.map.ptr[i].val;
		bool img;
		char *dst;
		size_t max;

		if (k->type != MSGPACK_OBJECT_STR || v->type != MSGPACK_OBJECT_STR)
			goto out;
		img = k->via.str.size == 5 && memcmp(k->via.str.ptr, "image", 5) == 0;
		if (!img && !(k->via.str.size == 7 &&
		    memcmp(k->via.str.ptr, "workdir", 7) == 0))
			goto out;
		dst = img ? image : workdir;
		max = img ? STORE_IMAGE_MAX : STORE_WORKDIR_MAX;
		if (v->via.str.size > max)
			goto out;
		memcpy(dst, v->via.str.ptr, v->via.str.size);
		dst[v->via.str.size] = '\0';
		seen |= img ? 1 : 2;
	}
	if (seen == 3 && store_image_check(image, workdir, NULL) == 0)
		rc = 0;
out:
	msgpack_unpacked_destroy(&u);
	return rc;
}

bool
sbximage_stale(struct sandqd *d, struct djob *j, const struct result *r)
{
	struct tenant *t = &d->tenants[j->tenant];
	struct intake in = { .cfg = &d->cfg, .tenant = t->name,
	    .conf = t->has_conf ? &t->conf : NULL };
	char image[STORE_IMAGE_MAX + 1], workdir[STORE_WORKDIR_MAX + 1];
	char msg[768];
	struct intake_refusal ref;
	struct job *job = j->job;
	char *norm = NULL;
	size_t normlen = 0;

	if (r->status != ST_REJECTED || r->error_code == NULL ||
	    strcmp(r->error_code, "image_stale") != 0 || job == NULL ||
	    job->sandbox == NULL)
		return false;
	if (stale_data(r, image, workdir) < 0) {
		log_warnx("job %s: its worker's image_stale answer is malformed", j->id);
		jobs_answer_error(d, j, ST_INTERNAL, "internal", "the worker found "
		    "the sandbox's image changed, and said so in a form sandqd cannot "
		    "read");
		return true;
	}
	learn(d, t->name, job->sandbox, image, workdir);
	/* A job that names an image other than its sandbox's is refused. */
	if (j->image_named && image[0] != '\0' && strcmp(job->image, image) != 0) {
		snprintf(msg, sizeof(msg), "field 'image': '%.180s' is not the image of "
		    "sandbox '%s', '%.180s': a job on a sandbox runs on the sandbox's "
		    "image (name it, or none)", job->image, job->sandbox, image);
		jobs_answer_error(d, j, ST_REJECTED, "image", msg);
		return true;
	}
	if (++j->image_stale > SBXIMAGE_STALE_MAX) {
		snprintf(msg, sizeof(msg), "sandbox '%s' changed what it runs on %d "
		    "times while the job waited for it", job->sandbox,
		    SBXIMAGE_STALE_MAX);
		jobs_answer_error(d, j, ST_INTERNAL, "image", msg);
		return true;
	}
	log_info("job %s: sandbox '%s' runs on %s (files at %s); admitted again on it",
	    j->id, job->sandbox, image[0] ? image : "the job's own image",
	    workdir[0] ? workdir : "/workspace");
	/* Back to what intake admitted, then admitted anew on the sandbox's. */
	images_unapply(j);
	if (!j->image_named) {
		free(job->image);
		job->image = NULL;
	}
	sbximage_admit(d, j, job, &in);
	in.now = now_ms();
	switch (intake_admit(&in, job, j->attempts != NULL ?
	    json_array_size(j->attempts) : 0, &norm, &normlen, &ref)) {
	case INTAKE_OK:
	case INTAKE_GIVE_UP:	/* it ran no further than before */
		break;
	default:
		jobs_refused_rule(d, j, &ref);
		return true;
	}
	free(j->norm);
	j->norm = norm;
	j->normlen = normlen;
	/* First again on its sandbox, once its image is resolved. */
	if (images_before(d, j))
		sched_requeue(d, j, 0);
	return true;
}
