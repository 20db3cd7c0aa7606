/*
 * shared.c - the Redis snapshot store (snapshot_store = redis): every host
 * reaches every sandbox.
 *
 * Workers keep using the host's local store (STATE/store) and never talk
 * to the network; it becomes a cache of what Redis holds (dispatcher/rstore/rstore.h).
 * sandqd brings the two in step around each job that names a sandbox, on
 * libuv's work threads (blocking hiredis and SQLite, off the loop):
 *
 *   before: the job is picked to run -> the sandbox's head is pulled into
 *     the local store (only the chunks it lacks), or the local row goes if
 *     Redis has no such sandbox; a job that already made a version (a run
 *     before, on a host that died before publishing its result) is answered
 *     without running. Meanwhile the job keeps its place in its queue and
 *     nothing later on its sandbox passes it (core/runq.c, blocked()).
 *   after: the worker committed locally -> the new blob's missing pieces
 *     are pushed and the head moved in Redis by compare-and-set from the
 *     version the job started on, with the job's id; a fork or a delete is
 *     done in Redis; then the result is published. A head moved by another
 *     host meanwhile (-ESTALE) makes the job run again from the new head;
 *     another run of the same job that committed first (-EALREADY) makes
 *     this one's result go unpublished (that run's host publishes its own).
 *
 * Each work thread takes a pair of handles (an rstore connection and a
 * local store) from a small locked pool, opened on first use.
 */
#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "rstore/rstore.h"
#include "dispatcher.h"

#define SHARED_CONFLICTS_MAX 50		/* reruns after lost compare-and-sets */
#define SHARED_CONFLICT_BACKOFF_MS 20
#define SHARED_DOWN_BACKOFF_MS 1000	/* Redis unreachable: wait, uncounted */

struct shandle {
	struct rstore *rs;
	struct store *st;
	struct shandle *next;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shandle *pool_free;

enum skind { S_BEFORE, S_AFTER };

struct sreq {
	uv_work_t work;
	struct sandqd *d;
	struct djob *j;
	enum skind kind;
	enum job_op op;
	/* Copies the thread reads (it never touches d or j). */
	char url[1024], prefix[64], storedir[1100];
	char tenant[STORE_TENANT_MAX + 1], id[STORE_ID_MAX + 1], to[STORE_ID_MAX + 1];
	char job_id[JOB_ID_MAX + 1], sha[STORE_SHA_HEX + 1];
	uint64_t from, version;
	unsigned keep;
	bool check_job;			/* before: did this job commit already? */
	/* sandbox.history: Redis's rows, packed as the worker packs its own. */
	msgpack_sbuffer versions;
	size_t nversions;
	/* Answers. */
	int rc;
	int64_t done_version;		/* before: the version the job made, or 0 */
	struct err e;
};

/*** Handles (work threads) ***/

static struct shandle *
handle_get(const struct sreq *q, struct err *e)
{
	struct shandle *h;
	int rc;

	pthread_mutex_lock(&pool_lock);
	if ((h = pool_free) != NULL)
		pool_free = h->next;
	pthread_mutex_unlock(&pool_lock);
	if (h != NULL)
		return h;
	h = xcalloc(1, sizeof(*h));
	if ((rc = rstore_open(q->url, q->prefix, &h->rs, e)) < 0 ||
	    (rc = store_open(q->storedir, &h->st, e)) < 0) {
		rstore_close(h->rs);
		free(h);
		return NULL;
	}
	store_set_keep_versions(h->st, q->keep);
	return h;
}

static void
handle_put(struct shandle *h)
{
	pthread_mutex_lock(&pool_lock);
	h->next = pool_free;
	pool_free = h;
	pthread_mutex_unlock(&pool_lock);
}

/*** Before the job ***/

/* Local holds tenant/id as Redis does, or not at all when Redis has none. */
static int
sync_one(struct shandle *h, const char *tenant, const char *id, uint64_t *version,
    struct err *e)
{
	struct store_sandbox sb;
	int rc = rstore_pull(h->rs, h->st, tenant, id, &sb, e);

	if (rc == 0) {
		if (version)
			*version = sb.version;
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	if (version)
		*version = 0;
	memset(e, 0, sizeof(*e));
	rc = store_sandbox_delete(h->st, tenant, id, e);
	if (rc == -ENOENT) {
		memset(e, 0, sizeof(*e));
		rc = 0;
	}
	return rc;
}

struct names {
	char (*ids)[STORE_ID_MAX + 1];
	size_t n, cap;
};

static int
name_cb(const struct store_sandbox *sb, void *arg)
{
	struct names *ns = arg;

	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? 2 * ns->cap : 16;
		ns->ids = xreallocarray(ns->ids, ns->cap, sizeof(*ns->ids));
	}
	snprintf(ns->ids[ns->n++], sizeof(ns->ids[0]), "%s", sb->id);
	return 0;
}

/* sandbox.list: every sandbox of the tenant, in step (local ones Redis lacks go). */
static int
sync_all(struct shandle *h, const char *tenant, struct err *e)
{
	struct names remote = { 0 }, local = { 0 };
	int rc;

	if ((rc = rstore_list(h->rs, tenant, name_cb, &remote, e)) < 0 ||
	    (rc = store_sandbox_list(h->st, tenant, name_cb, &local, e)) < 0)
		goto out;
	for (size_t i = 0; i < remote.n && rc == 0; i++)
		rc = sync_one(h, tenant, remote.ids[i], NULL, e);
	for (size_t i = 0; i < local.n && rc == 0; i++) {
		bool kept = false;

		for (size_t k = 0; k < remote.n && !kept; k++)
			kept = strcmp(local.ids[i], remote.ids[k]) == 0;
		if (!kept)
			rc = sync_one(h, tenant, local.ids[i], NULL, e);
	}
out:
	free(remote.ids);
	free(local.ids);
	return rc;
}

static void
before_work(struct sreq *q, struct shandle *h)
{
	int64_t v;

	if (q->op == OP_SANDBOX_LIST) {
		q->rc = sync_all(h, q->tenant, &q->e);
		return;
	}
	if (q->check_job && q->job_id[0] != '\0') {
		v = rstore_job_version(h->rs, q->tenant, q->id, q->job_id, &q->e);
		if (v < 0) {
			q->rc = (int)v;
			return;
		}
		if ((q->done_version = v) > 0)
			return;
	}
	q->rc = sync_one(h, q->tenant, q->id, &q->from, &q->e);
	if (q->rc == 0 && q->op == OP_SANDBOX_FORK && q->to[0] != '\0')
		q->rc = sync_one(h, q->tenant, q->to, NULL, &q->e);
}

/*** After the job ***/

/* One history row, as worker/ops_sandbox.c packs it. */
static int
version_cb(const struct store_version *v, const char *job_id, void *arg)
{
	struct sreq *q = arg;
	msgpack_packer pk;

	(void)job_id;
	msgpack_packer_init(&pk, &q->versions, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	msgpack_pack_str_with_body(&pk, "version", 7);
	msgpack_pack_uint64(&pk, v->version);
	msgpack_pack_str_with_body(&pk, "snapshot", 8);
	msgpack_pack_str_with_body(&pk, v->sha256, strlen(v->sha256));
	msgpack_pack_str_with_body(&pk, "created_at", 10);
	msgpack_pack_int64(&pk, v->created_at);
	q->nversions++;
	return 0;
}

static void
after_work(struct sreq *q, struct shandle *h)
{
	struct store_sandbox sb;

	switch (q->op) {
	case OP_SANDBOX_HISTORY:
		/* The local store holds the versions this host saw; Redis all. */
		q->rc = rstore_history(h->rs, q->tenant, q->id, version_cb, q, &q->e);
		return;
	case OP_SANDBOX_FORK:
		q->rc = rstore_fork(h->rs, q->tenant, q->id, q->to, &q->e);
		return;
	case OP_SANDBOX_DELETE:
		q->rc = rstore_delete(h->rs, q->tenant, q->id, &q->e);
		if (q->rc == -ENOENT)
			q->rc = 0;	/* gone already, as the job wanted */
		return;
	default:
		break;
	}
	if ((q->rc = rstore_push(h->rs, h->st, q->tenant, q->sha, &q->e)) < 0)
		return;
	if (q->from == 0) {
		/* A new sandbox: its labels are the local row's. */
		if ((q->rc = store_sandbox_get(h->st, q->tenant, q->id, &sb, &q->e)) < 0)
			return;
		q->rc = rstore_create_image(h->rs, q->tenant, q->id, q->sha, sb.labels,
		    sb.image, sb.workdir, q->job_id, &q->e);
		return;
	}
	q->rc = rstore_commit(h->rs, q->tenant, q->id, q->from, q->sha, q->job_id, q->keep,
	    &q->e);
}

static void
work_cb(uv_work_t *w)
{
	struct sreq *q = w->data;
	struct shandle *h = handle_get(q, &q->e);

	if (h == NULL) {
		q->rc = -EIO;
		return;
	}
	if (q->kind == S_BEFORE)
		before_work(q, h);
	else
		after_work(q, h);
	handle_put(h);
}

/*** On the loop ***/

/*
 * r's data ({versions, calls} from the worker's local store) with Redis's
 * versions instead. Returns 0, or -EBADMSG when r's data is not that map.
 */
static int
history_replace(struct result *r, struct sreq *q)
{
	msgpack_unpacked u;
	msgpack_sbuffer out;
	msgpack_packer pk;
	const msgpack_object *calls = NULL;
	int rc = -EBADMSG;

	msgpack_unpacked_init(&u);
	if (r->data == NULL || msgpack_unpack_next(&u, (const char *)r->data, r->data_len,
	    NULL) != MSGPACK_UNPACK_SUCCESS || u.data.type != MSGPACK_OBJECT_MAP)
		goto out;
	for (uint32_t i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &u.data.via.map.ptr[i];

		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 5 &&
		    memcmp(kv->key.via.str.ptr, "calls", 5) == 0)
			calls = &kv->val;
	}
	if (calls == NULL)
		goto out;
	msgpack_sbuffer_init(&out);
	msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "versions", 8);
	msgpack_pack_array(&pk, q->nversions);
	msgpack_sbuffer_write(&out, q->versions.data, q->versions.size);
	msgpack_pack_str_with_body(&pk, "calls", 5);
	msgpack_pack_object(&pk, *calls);
	free(r->data);
	r->data_len = out.size;
	r->data = (uint8_t *)msgpack_sbuffer_release(&out);
	rc = 0;
out:
	msgpack_unpacked_destroy(&u);
	return rc;
}

/* Takes j out of its tenant's queue (it was waiting there for the sync). */
static void
unqueue(struct sandqd *d, struct djob *j)
{
	runq_remove(&d->tenants[j->tenant], j);
}

static void
before_done(uv_work_t *w, int status)
{
	struct sreq *q = w->data;
	struct sandqd *d = q->d;
	struct djob *j = q->j;

	d->shared_inflight--;
	if (status < 0 && q->rc == 0)
		q->rc = status;
	if (d->drain_grace) {
		/* The drain timed out while its sandbox was pulled. */
		unqueue(d, j);
		jobs_fail(d, j, "sandqd shut down before the job started");
	} else if (q->rc == 0 && q->done_version > 0) {
		unqueue(d, j);
		jobs_result_lost(d, j, (uint64_t)q->done_version);
	} else if (q->rc == -EIO) {
		/* Redis is out of reach: nothing could be published anyway; wait. */
		unqueue(d, j);
		log_warnx("job %s: the shared snapshot store is out of reach (%s); "
		    "trying again", j->id, q->e.msg);
		sched_requeue(d, j, SHARED_DOWN_BACKOFF_MS);
	} else if (q->rc < 0) {
		unqueue(d, j);
		jobs_retry(d, j, "the shared snapshot store could not give sandbox '%s': %s",
		    q->id, q->e.msg[0] ? q->e.msg : strerror(-q->rc));
	} else {
		j->sync = SYNC_READY;
		j->sbx_from = q->from;
	}
	msgpack_sbuffer_destroy(&q->versions);
	free(q);
	sched_dispatch(d);
	sandqd_check_drained(d);
}

static void
after_done(uv_work_t *w, int status)
{
	struct sreq *q = w->data;
	struct sandqd *d = q->d;
	struct djob *j = q->j;
	struct result *r = j->sync_res;

	d->shared_inflight--;
	TAILQ_REMOVE(&d->pushing, j, link);
	j->sync_res = NULL;
	j->sync = SYNC_NONE;
	if (status < 0 && q->rc == 0)
		q->rc = status;
	if (q->rc == 0 && q->op == OP_SANDBOX_HISTORY) {
		if (history_replace(r, q) < 0)
			log_warnx("job %s: sandbox.history's answer is not a map of versions "
			    "and calls; sent as the worker made it", j->id);
		jobs_answer(d, j, r);
	} else if (q->rc == 0) {
		jobs_answer(d, j, r);
	} else if (q->op == OP_SANDBOX_HISTORY) {
		/* Redis failed us: the local versions are better than none. */
		log_warnx("job %s: the shared store's history of '%s' could not be read "
		    "(%s); answered from this host's", j->id, q->id, q->e.msg);
		jobs_answer(d, j, r);
	} else if (q->rc == -EALREADY) {
		/* Another run of this job committed first; its host answers it. */
		log_info("job %s: another run committed sandbox '%s' first; this run's "
		    "result is dropped", j->id, q->id);
		djob_free(j);
	} else if (q->rc == -EIO) {
		/* Redis is out of reach: the run's commit never got there; run it
		 * again once it is back (uncounted, as nothing can be published). */
		log_warnx("job %s: the shared snapshot store is out of reach (%s); its run "
		    "is repeated", j->id, q->e.msg);
		sched_requeue(d, j, SHARED_DOWN_BACKOFF_MS);
	} else if (q->rc == -ESTALE && j->conflicts < SHARED_CONFLICTS_MAX) {
		/* Another host moved the head: run again from the new one. */
		j->conflicts++;
		log_info("job %s: sandbox '%s' moved on while it ran (%s); running it again",
		    j->id, q->id, q->e.msg);
		sched_requeue(d, j, SHARED_CONFLICT_BACKOFF_MS * j->conflicts);
	} else {
		jobs_retry(d, j, "the shared snapshot store refused the job's commit of "
		    "sandbox '%s': %s", q->id, q->e.msg[0] ? q->e.msg : strerror(-q->rc));
	}
	result_free(r);
	msgpack_sbuffer_destroy(&q->versions);
	free(q);
	sched_dispatch(d);
	sandqd_check_drained(d);
}

static struct sreq *
sreq_new(struct sandqd *d, struct djob *j, enum skind kind)
{
	struct sreq *q = xcalloc(1, sizeof(*q));
	const struct job *job = j->job;

	q->work.data = q;
	msgpack_sbuffer_init(&q->versions);
	q->d = d;
	q->j = j;
	q->kind = kind;
	q->op = job->op;
	q->keep = (unsigned)d->cfg.keep_versions;
	snprintf(q->url, sizeof(q->url), "%s", d->cfg.redis);
	snprintf(q->prefix, sizeof(q->prefix), "%s", d->cfg.prefix);
	snprintf(q->storedir, sizeof(q->storedir), "%s/store", d->cfg.state);
	snprintf(q->tenant, sizeof(q->tenant), "%s", d->tenants[j->tenant].name);
	snprintf(q->id, sizeof(q->id), "%s", job->sandbox ? job->sandbox : "");
	snprintf(q->to, sizeof(q->to), "%s", job->to ? job->to : "");
	snprintf(q->job_id, sizeof(q->job_id), "%s", j->id);
	return q;
}

bool
shared_enabled(const struct sandqd *d)
{
	return strcmp(d->cfg.snapshot_store, "redis") == 0;
}

bool
shared_before(struct sandqd *d, struct djob *j)
{
	struct sreq *q;

	if (!shared_enabled(d) || j->job == NULL || j->sync == SYNC_READY)
		return true;
	if (j->job->sandbox == NULL && j->job->op != OP_SANDBOX_LIST)
		return true;
	q = sreq_new(d, j, S_BEFORE);
	/* Only a job that ran before can have committed already. */
	q->check_job = j->attempts != NULL && j->job->sandbox != NULL;
	j->sync = SYNC_PULLING;
	d->shared_inflight++;
	if (uv_queue_work(d->loop, &q->work, work_cb, before_done) != 0) {
		d->shared_inflight--;
		j->sync = SYNC_NONE;
		free(q);
		return true;	/* the worker's local store answers, as without Redis */
	}
	return false;
}

bool
shared_after(struct sandqd *d, struct djob *j, struct result *r)
{
	struct sreq *q;
	enum job_op op;

	if (!shared_enabled(d) || j->job == NULL || j->job->sandbox == NULL)
		return true;
	op = j->job->op;
	if (op == OP_SANDBOX_FORK || op == OP_SANDBOX_DELETE || op == OP_SANDBOX_HISTORY) {
		if (r->status != ST_OK)
			return true;
	} else if (r->snapshot == NULL || r->version <= j->sbx_from ||
	    strlen(r->snapshot) != STORE_SHA_HEX) {
		return true;	/* nothing committed */
	}
	q = sreq_new(d, j, S_AFTER);
	q->from = j->sbx_from;
	if (r->snapshot != NULL)
		snprintf(q->sha, sizeof(q->sha), "%s", r->snapshot);
	j->sync = SYNC_PUSHING;
	j->sync_res = r;
	d->shared_inflight++;
	/* No later job on its sandbox starts before its commit is in Redis. */
	TAILQ_INSERT_TAIL(&d->pushing, j, link);
	if (uv_queue_work(d->loop, &q->work, work_cb, after_done) != 0) {
		TAILQ_REMOVE(&d->pushing, j, link);
		d->shared_inflight--;
		j->sync = SYNC_NONE;
		j->sync_res = NULL;
		free(q);
		jobs_retry(d, j, "cannot reach the shared snapshot store");
		result_free(r);
		return false;
	}
	return false;
}

void
shared_stop(struct sandqd *d)
{
	struct shandle *h;

	(void)d;
	pthread_mutex_lock(&pool_lock);
	while ((h = pool_free) != NULL) {
		pool_free = h->next;
		rstore_close(h->rs);
		store_close(h->st);
		free(h);
	}
	pthread_mutex_unlock(&pool_lock);
}
