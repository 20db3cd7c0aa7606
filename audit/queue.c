/*
 * queue.c - the bounded audit queue and the thread that drains it into the
 * local database.
 *
 * An audit write must never block or fail a job (docs/audit.md). sandqd
 * emits from its libuv loop, which must not wait on a disk, so emitting
 * only copies the event into a fixed ring under a mutex that nothing holds
 * across I/O, and a thread of its own does the SQLite work.
 *
 * DESIGN
 * The ring (struct audit_ring) is plain memory with no lock, so a
 * single-threaded user (the dispatcher's Redis sink on its loop) can use
 * it bare. A batch is the run of queued events contiguous in the ring:
 * the writer peeks it, writes it with the mutex released, and consumes it
 * only after the transaction committed, so producers never touch the slots
 * being written (they only fill slots past the queued ones) and a failed
 * write loses nothing. When the ring is full an emit drops the new event
 * and counts it: the events already queued are the older, contiguous part
 * of the trail. Once a write succeeds again, the writer appends an event
 * of its own (category "audit", action "dropped", detail {"dropped":N})
 * so the gap is recorded in the trail itself, not only in the counters.
 *
 * A failed open or write closes the connection and retries after a
 * backoff that doubles from AUDIT_BACKOFF_MIN_MS to AUDIT_BACKOFF_MAX_MS;
 * emits do not wake the writer while it backs off. Before each batch the
 * writer checks that path still names the file it has open, so a
 * database removed or replaced under it is recreated instead of written
 * into an unlinked inode. Retention runs after open and every
 * ret.every_ms, on the writer thread.
 *
 * The emitting thread takes the mutex for one ~2.6 KiB copy and signals
 * the condition variable only when the writer sleeps waiting for work, or
 * lingers (AUDIT_LINGER_MS: a batch gathers the events that come within
 * that time of its first) and a whole batch is queued.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "audit.h"

#define AUDIT_BACKOFF_MIN_MS 50
/*
 * A batch waits this long after its first event for more (or until
 * AUDIT_BATCH_MAX are queued, or a stop): one transaction then carries the
 * events of many jobs. Each transaction writes the table's and every
 * index's last page to the WAL and compiles the INSERT again, so a batch
 * per event (a busy host's writer wakes for each) cost more CPU than the
 * rest of sandqd (docs/decisions.md, "Throughput, third round").
 */
#define AUDIT_LINGER_MS 50
#define AUDIT_BACKOFF_MAX_MS 5000
#define AUDIT_PATH_MAX 4096

/*** The ring ***/

int
audit_ring_init(struct audit_ring *r, size_t cap)
{
	memset(r, 0, sizeof(*r));
	if (cap == 0 || cap > AUDIT_QUEUE_MAX)
		return -EINVAL;
	/* calloc of this size maps fresh pages: untouched slots cost nothing. */
	r->slot = xcalloc(cap, sizeof(*r->slot));
	r->cap = cap;
	return 0;
}

void
audit_ring_free(struct audit_ring *r)
{
	free(r->slot);
	memset(r, 0, sizeof(*r));
}

int
audit_ring_push(struct audit_ring *r, const struct audit_event *ev)
{
	if (r->count == r->cap) {
		r->dropped++;
		return -ENOBUFS;
	}
	r->slot[(r->head + r->count) % r->cap] = *ev;
	r->count++;
	return 0;
}

size_t
audit_ring_peek(const struct audit_ring *r, size_t max,
    const struct audit_event **first)
{
	size_t n = r->count;

	if (n > r->cap - r->head)
		n = r->cap - r->head;	/* up to the end of the array */
	if (n > max)
		n = max;
	*first = n > 0 ? &r->slot[r->head] : NULL;
	return n;
}

void
audit_ring_consume(struct audit_ring *r, size_t n)
{
	if (n > r->count)
		n = r->count;
	r->head = (r->head + n) % r->cap;
	r->count -= n;
}

/*** The writer ***/

struct audit_writer {
	pthread_mutex_t mu;		/* guards the fields down to stop_at */
	pthread_cond_t cv;		/* on CLOCK_MONOTONIC */
	struct audit_ring ring;
	bool idle;			/* the writer sleeps until an emit */
	bool lingering;			/* the writer waits for a fuller batch */
	int64_t first_ns;		/* mono ns the oldest queued event came */
	bool stop;			/* audit_writer_stop() was called */
	int64_t stop_at;		/* mono ns past which stop gives up */
	uint64_t written;		/* events committed */
	uint64_t failed_writes;		/* opens or batches that failed */

	/* The writer thread's own. */
	pthread_t thread;
	char path[AUDIT_PATH_MAX];
	struct audit_retention ret;
	struct audit_db *db;		/* NULL while closed */
	dev_t dev;			/* the file db has open */
	ino_t ino;
	char host[AUDIT_HOST_MAX + 1];
	uint64_t dropped_recorded;	/* drops already written as an event */
	int backoff_ms;			/* 0 while writes succeed */
	int64_t retry_at;		/* mono ns of the next attempt */
	int64_t retain_at;		/* mono ns of the next retention */
	bool failing;			/* for logging transitions only */
};

static int64_t
mono_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec
ns_to_ts(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };

	return ts;
}

/* Closes the connection, e.g. after a failure, so the next batch reopens. */
static void
db_drop(struct audit_writer *w)
{
	audit_db_close(w->db);
	w->db = NULL;
}

/*
 * Makes sure w->db is open on the file path names now: a file removed or
 * replaced since the open is reopened (created anew).
 */
static int
db_ready(struct audit_writer *w, struct err *e)
{
	struct stat st;
	int rc;

	if (w->db != NULL) {
		if (stat(w->path, &st) == 0 && st.st_dev == w->dev &&
		    st.st_ino == w->ino)
			return 0;
		log_warnx("audit: %s was removed or replaced; reopening", w->path);
		db_drop(w);
	}
	if ((rc = audit_db_open(w->path, &w->db, e)) != 0)
		return rc;
	if (stat(w->path, &st) != 0) {
		rc = err_set(e, -errno, "audit db: stat %s: %s", w->path,
		    strerror(errno));
		db_drop(w);
		return rc;
	}
	w->dev = st.st_dev;
	w->ino = st.st_ino;
	w->retain_at = 0;	/* apply retention to a freshly opened file */
	return 0;
}

/* The event recording drops not yet recorded; the writer owns it. */
static void
loss_event(struct audit_writer *w, uint64_t dropped, struct audit_event *ev)
{
	audit_event_init(ev, AUDIT_CAT_AUDIT, "dropped", "sqlite", false,
	    AUDIT_LVL_WARNING);
	audit_text_set(ev->host, sizeof(ev->host), w->host);
	snprintf(ev->detail, sizeof(ev->detail),
	    "{\"dropped\":%llu,\"dropped_total\":%llu}",
	    (unsigned long long)(dropped - w->dropped_recorded),
	    (unsigned long long)dropped);
}

/*
 * Writes batch (n events, owned by the ring, not consumed yet) and, when
 * events were dropped since the last record of it, the loss event.
 */
static int
write_batch(struct audit_writer *w, const struct audit_event *batch, size_t n,
    uint64_t dropped, struct err *e)
{
	int rc;

	if ((rc = db_ready(w, e)) != 0)
		return rc;
	if (n > 0 && (rc = audit_db_append(w->db, batch, n, e)) != 0)
		return rc;
	if (dropped > w->dropped_recorded) {
		struct audit_event *ev = xmalloc(sizeof(*ev));

		loss_event(w, dropped, ev);
		rc = audit_db_append(w->db, ev, 1, e);
		free(ev);
		if (rc != 0)
			return rc;
		w->dropped_recorded = dropped;
	}
	return 0;
}

static void
retain(struct audit_writer *w)
{
	struct err e = { 0 };
	uint64_t deleted = 0;
	int64_t every = w->ret.every_ms > 0 ? w->ret.every_ms : AUDIT_RETAIN_EVERY_MS;

	w->retain_at = mono_now_ns() + every * 1000000;
	if (w->ret.max_age_ms <= 0 && w->ret.max_bytes == 0)
		return;
	if (db_ready(w, &e) != 0 ||
	    audit_db_retain(w->db, w->ret.max_age_ms, w->ret.max_bytes, &deleted,
	    &e) != 0) {
		log_warnx("audit: retention: %s", e.msg);
		return;
	}
	if (deleted > 0)
		log_debug("audit: retention deleted %llu events",
		    (unsigned long long)deleted);
}

/* Sleeps (w->mu held) until there is something to do. False: exit. */
static bool
wait_for_work(struct audit_writer *w)
{
	for (;;) {
		int64_t now = mono_now_ns(), until;
		struct timespec ts;

		if (w->stop && (w->ring.count == 0 || now >= w->stop_at))
			return false;
		if (w->backoff_ms > 0 && now < w->retry_at) {
			/* Backing off: emits do not wake us, stop does. */
			until = w->retry_at;
			if (w->stop && w->stop_at < until)
				until = w->stop_at;
		} else if (w->ring.count > 0 && w->ring.count < AUDIT_BATCH_MAX &&
		    !w->stop && now < w->first_ns + AUDIT_LINGER_MS * 1000000LL) {
			/* A batch gathers what comes within the linger. */
			until = w->first_ns + AUDIT_LINGER_MS * 1000000LL;
			w->lingering = true;
		} else if (w->ring.count > 0 || w->ring.dropped > w->dropped_recorded ||
		    now >= w->retain_at) {
			return true;
		} else {
			until = w->stop ? w->stop_at : w->retain_at;
			w->idle = true;
		}
		ts = ns_to_ts(until);
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		w->idle = w->lingering = false;
	}
}

static void *
writer_main(void *arg)
{
	struct audit_writer *w = arg;

	pthread_mutex_lock(&w->mu);
	while (wait_for_work(w)) {
		const struct audit_event *batch;
		size_t n = audit_ring_peek(&w->ring, AUDIT_BATCH_MAX, &batch);
		uint64_t dropped = w->ring.dropped;
		struct err e = { 0 };
		int rc;

		pthread_mutex_unlock(&w->mu);
		/* The n slots stay ours: producers only fill slots past count. */
		rc = write_batch(w, batch, n, dropped, &e);
		if (rc == 0 && mono_now_ns() >= w->retain_at)
			retain(w);
		pthread_mutex_lock(&w->mu);
		if (rc == 0) {
			audit_ring_consume(&w->ring, n);
			/* What came during the write starts the next batch. */
			w->first_ns = mono_now_ns();
			w->written += n;
			w->backoff_ms = 0;
			if (w->failing)
				log_warnx("audit: %s: writing again", w->path);
			w->failing = false;
			continue;
		}
		w->failed_writes++;
		db_drop(w);
		w->backoff_ms = w->backoff_ms == 0 ? AUDIT_BACKOFF_MIN_MS :
		    w->backoff_ms * 2;
		if (w->backoff_ms > AUDIT_BACKOFF_MAX_MS)
			w->backoff_ms = AUDIT_BACKOFF_MAX_MS;
		w->retry_at = mono_now_ns() + (int64_t)w->backoff_ms * 1000000;
		if (!w->failing)
			log_warnx("audit: %s; events queue (at most %zu) and the "
			    "write is retried", e.msg, w->ring.cap);
		w->failing = true;
	}
	pthread_mutex_unlock(&w->mu);
	db_drop(w);
	return NULL;
}

int
audit_writer_start(struct audit_writer **out, const char *path,
    size_t max_queued, const struct audit_retention *ret, struct err *e)
{
	struct audit_writer *w;
	pthread_condattr_t ca;
	int rc;

	err_clear(e);
	*out = NULL;
	if (max_queued == 0)
		max_queued = AUDIT_QUEUE_DEFAULT;
	if (path == NULL || strlen(path) >= AUDIT_PATH_MAX)
		return err_set(e, -ENAMETOOLONG, "audit: database path too long");
	if (max_queued > AUDIT_QUEUE_MAX)
		return err_set(e, -EINVAL, "audit: queue bound %zu is past %d",
		    max_queued, AUDIT_QUEUE_MAX);
	w = xcalloc(1, sizeof(*w));
	snprintf(w->path, sizeof(w->path), "%s", path);
	if (ret != NULL)
		w->ret = *ret;
	if (gethostname(w->host, sizeof(w->host) - 1) != 0)
		w->host[0] = '\0';
	audit_ring_init(&w->ring, max_queued);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = pthread_create(&w->thread, NULL, writer_main, w)) != 0) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		audit_ring_free(&w->ring);
		free(w);
		return err_set(e, -rc, "audit: writer thread: %s", strerror(rc));
	}
	*out = w;
	return 0;
}

int
audit_writer_emit(struct audit_writer *w, const struct audit_event *ev)
{
	bool wake;

	pthread_mutex_lock(&w->mu);
	if (audit_ring_push(&w->ring, ev) != 0) {
		pthread_mutex_unlock(&w->mu);
		return -ENOBUFS;
	}
	if (w->ring.count == 1)
		w->first_ns = mono_now_ns();
	if (ev->time_ms == 0) {
		struct timespec ts;
		struct audit_event *last = &w->ring.slot[(w->ring.head +
		    w->ring.count - 1) % w->ring.cap];

		clock_gettime(CLOCK_REALTIME, &ts);
		last->time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	}
	wake = w->idle || (w->lingering && w->ring.count >= AUDIT_BATCH_MAX);
	w->idle = w->lingering = false;	/* one wake-up is enough */
	pthread_mutex_unlock(&w->mu);
	if (wake)
		pthread_cond_signal(&w->cv);
	return 0;
}

void
audit_writer_stats(struct audit_writer *w, uint64_t *queued, uint64_t *written,
    uint64_t *dropped, uint64_t *failed_writes)
{
	pthread_mutex_lock(&w->mu);
	if (queued != NULL)
		*queued = w->ring.count;
	if (written != NULL)
		*written = w->written;
	if (dropped != NULL)
		*dropped = w->ring.dropped;
	if (failed_writes != NULL)
		*failed_writes = w->failed_writes;
	pthread_mutex_unlock(&w->mu);
}

size_t
audit_writer_stop(struct audit_writer *w, int timeout_ms)
{
	size_t left;

	if (w == NULL)
		return 0;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	w->stop_at = mono_now_ns() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) *
	    1000000;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	/*
	 * The thread checks stop_at between batches; one batch is bounded by
	 * SQLite's busy timeout, so the join waits at most about that long
	 * past timeout_ms.
	 */
	pthread_join(w->thread, NULL);
	left = w->ring.count;
	if (left > 0)
		log_warnx("audit: %zu events not written to %s at stop", left,
		    w->path);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	audit_ring_free(&w->ring);
	free(w);
	return left;
}
