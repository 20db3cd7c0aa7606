/*
 * dispatcher.h - what the files of dispatcher/ share (sandqd only).
 *
 *   main.c   start-up, signals, drain, shutdown
 *   jobs.c   stream entries -> answers, dead letters or the queue;
 *            results -> Redis (with retry)
 *   sched.c  the pick fed with sandqd's tenants and workers; how much to read
 *   pool.c   the worker table: spawn, handshake, dispatch, reap, respawn
 *   images.c the image cache (STATE/images): a run's image resolved to a
 *            digest before it is queued, pulled off the loop if need be
 *   sbximage.c what each sandbox runs on (its image, its workdir), as a
 *            hint the worker checks against the sandbox's row
 *   image_pull.c  image.pull's answer, pull progress, pulls on the audit trail
 *   core/    the lower room, without Redis or libuv (core/core.h): intake.c
 *            decides what an entry is worth, runq.c which job runs next and
 *            on which worker
 *
 * A job's life in the dispatcher: the read from its tenant's stream (rq's
 * on_entry in main.c; lease.c for an entry read before) -> jobs_entry():
 * intake_read() decodes it and intake_admit() admits it, or they say how
 * to answer it at once (rejected / expired / dead-lettered / given up),
 * which jobs_entry() does -> sched_enqueue() (for a tenant with max_queued
 * or rate, once admit_read() has it admitted) puts it on its tenant's run
 * queue -> sched_dispatch(): runq_pick() chooses it and pool_send_job()
 * hands it to the idle worker runq_idle_for() names -> the worker's
 * MSG_JOB_DONE, or its death, makes a result (or, for a failure of the
 * infrastructure, a retry: back on the queue after a backoff) ->
 * jobs_publish_pending() stores the result and acks the entry in one
 * transaction, retrying across Redis outages -> the job is freed. Nothing
 * is acknowledged before its result is stored, so a crash of sandqd at any
 * point leaves the entry pending.
 */
#ifndef SANDQ_DISPATCHER_H
#define SANDQ_DISPATCHER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <jansson.h>
#include <uv.h>

#include "../audit/audit.h"
#include "../config/config.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "../queue/redis.h"
#include "../queue/tenant.h"
#include "../sandbox/cgroup.h"
#include "core/core.h"

struct wslot {
	struct runq_slot run;		/* what the scheduler sees: state, job, last sandbox */
	int index;			/* slot number */
	pid_t pid;			/* worker pid, or 0 */
	int fd;				/* channel, or -1 */
	uv_poll_t *poll;		/* readable channel (heap: freed on close) */
	struct sandqd *d;		/* owner */
	uv_timer_t respawn;		/* respawn delay */
	int64_t backoff_ms;		/* next respawn delay */
	uint64_t jobs;			/* jobs its current process completed */
	bool retiring;			/* replaced: worker_max_jobs or memory growth */
	char why[96];			/* why sandqd killed it, until reaped */
	int64_t since_ms;		/* monotonic: started, got its job, or retired */
	uint64_t rss_base;		/* its own RSS at HELLO (bytes); 0 unknown */
};

struct sandqd {
	uv_loop_t *loop;
	struct config cfg;
	struct rq *rq;
	struct tenant *tenants;
	size_t ntenants;
	struct runq runq;		/* the scheduler's round and view of the pool */
	struct wslot *slots;
	size_t nslots;
	char *worker_path;		/* sandq-worker binary */
	struct cg_sys cg;		/* the host's cgroups for jobs, or CG_NONE */
	struct djob_list publish;	/* results waiting for Redis */
	size_t inflight_publish;	/* publishes sent, reply due */
	uint32_t next_seq;
	bool history_done;		/* our pending entries re-read */
	bool read_blocking;		/* the read in flight blocks (no work here) */
	bool read_dry;			/* a read found nothing since a job ended */
	bool draining;			/* SIGTERM: no new reads */
	bool stopping;			/* workers being shut down */
	bool drain_grace;		/* past the drain timeout */
	uv_signal_t sig_term, sig_int, sig_chld;
	uv_timer_t read_retry;		/* read again after an error */
	uv_timer_t publish_retry;	/* publish again after an outage */
	uv_timer_t drain_timer;		/* drain deadline */
	uint64_t jobs_done;		/* results published */
	struct audit_writer *audit;	/* the host's audit database, or NULL */
	uint64_t tenants_gen;		/* the Redis tenants' counter last applied */
	uint64_t audit_stream_lost;	/* events that could not reach a stream */
	uv_timer_t tenants_poll;	/* polls it */
	uv_timer_t status_timer;	/* writes this host's status */
	uv_timer_t admit_retry;		/* watches new entries again (admit.c) */
	uv_timer_t lease_renew;		/* renews the leases of what we hold */
	uv_timer_t lease_reclaim;	/* takes over what others stopped renewing */
	uv_timer_t backoff_timer;	/* the next retry's backoff ends (sched.c) */
	uv_timer_t cancel_poll;		/* asks which held jobs were cancelled */
	size_t shared_inflight;		/* shared store syncs under way (shared.c) */
	struct djob_list pushing;	/* results whose commit goes to Redis */
	uv_timer_t pool_watch;		/* finds workers stuck (pool.c) */
	struct dimages *images;		/* the image cache and its pulls (images.c) */
	struct sbximages *sbximages;	/* what sandboxes run on (sbximage.c) */
	struct image_feed *image_feed;	/* pulls' progress to the loop (image_pull.c) */
	struct simages *status_images;	/* the cache as the status lists it (status.c) */
	struct exporter *exporter;	/* Prometheus metrics (exporter.c), or NULL */
	struct degress *egress;		/* the egress proxy (egress.c) */
};

/*** egress.c ***/

/* Starts the egress proxy if some tenant may use net "allow". */
void egress_init(struct sandqd *d);
/* After a reload: starts it if it is wanted now and not running. */
void egress_reconcile(struct sandqd *d);
/* SIGCHLD: reaps the proxy by its pid and restarts it with a backoff. */
void egress_reap(struct sandqd *d);
/*
 * A net "allow" job's listener from its worker: handed to the proxy with
 * sandqd's word on the job. fd stays the caller's (closed by it).
 */
void egress_job_listener(struct sandqd *d, struct djob *j, int fd);
/*
 * Takes r (the worker's result) if the proxy holds j's listener: the proxy
 * ends the job and jobs_worker_result_go() follows once it has reported
 * every connection. Returns false (r untouched) for any other job.
 */
bool egress_hold(struct sandqd *d, struct djob *j, struct result *r);
/* j failed without a result (its worker died): the proxy ends it, unheld. */
void egress_job_drop(struct sandqd *d, struct djob *j);
/*
 * If j (admitted) is a net "allow" run on a sandbox naming no allow list:
 * reads the sandbox's from Redis and returns true; j is then queued
 * (through imgnames_lookup()) or answered rejected naming the field, or
 * dropped unanswered if Redis goes away meanwhile. False: nothing to read.
 */
bool egress_sandbox_allow(struct sandqd *d, struct djob *j);
/* After a worker's result: a sandbox's list kept, copied or dropped. */
void egress_sandbox_result(struct sandqd *d, const struct djob *j, const struct result *r);
/* Results held for the proxy's report (a drain waits for them). */
size_t egress_pending(const struct sandqd *d);
void egress_stop(struct sandqd *d);
void egress_free(struct sandqd *d);

/*** tenants.c ***/

/* The config file's tenants (before rq_new) and the poll timer. */
void tenants_init(struct sandqd *d);
/* Polls the tenants kept in Redis from now on. */
void tenants_start(struct sandqd *d);
void tenants_stop(struct sandqd *d);
void tenants_free(struct sandqd *d);

/*** lease.c ***/

/* An entry read before (our history, or taken over): republished if it has
 * a result already, else handled as new. */
void lease_redelivered(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *raw, size_t rawlen, size_t nfields);
void lease_start(struct sandqd *d);
void lease_stop(struct sandqd *d);

/*** shared.c ***/

/* Whether snapshot_store is redis. */
bool shared_enabled(const struct sandqd *d);
/*
 * Before j goes to a worker: true if it may go now; false if its sandbox
 * is being pulled (j stays queued, not runnable, until it is ready, or is
 * answered or retried).
 */
bool shared_before(struct sandqd *d, struct djob *j);
/*
 * The worker's result r for j: true if it can be answered now; false if
 * its commit goes to Redis first (r is then shared.c's, answered or
 * retried when that is done).
 */
bool shared_after(struct sandqd *d, struct djob *j, struct result *r);
void shared_stop(struct sandqd *d);

/*** cancel.c ***/

void cancel_start(struct sandqd *d);
void cancel_stop(struct sandqd *d);

/*** imgnames.c ***/

/*
 * If j (admitted) runs on a tenant's image name: reads the name from Redis
 * and returns true; j is then queued (jobs_admitted()) or answered when
 * the name is read, or dropped unanswered if Redis goes away meanwhile
 * (its entry stays pending, to be read again). False: j names no name.
 */
bool imgnames_lookup(struct sandqd *d, struct djob *j);

/*** admit.c ***/

void admit_init(struct sandqd *d);
/* (Re)starts the watch of new entries of tenants with max_queued or rate. */
void admit_watch(struct sandqd *d);
/* Whether the tenant has max_queued or rate set. */
bool admit_capped(const struct sandqd *d, size_t tenant);
/* A capped tenant's job read for a worker: queued once admitted. */
void admit_read(struct sandqd *d, struct djob *j);
/* A new entry the watch saw: decided by rq_admit(), answered if refused. */
void admit_watched(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *job, size_t joblen);
void admit_stop(struct sandqd *d);

/*** images.c ***/

/* Opens STATE/images (made if need be); fatal if it cannot. */
void images_start(struct sandqd *d);
/* Frees what is left, once the loop has ended. */
void images_free(struct sandqd *d);
/* The cache's root (for the workers), or NULL before images_start(). */
const char *images_root(const struct sandqd *d);
/*
 * Before j is queued: a run on an image other than host gets its digest
 * (and the image's Env and WorkingDir) now if the cache has the image, or
 * waits on its pull (j->img_wait set: queued but not runnable). Returns
 * true if j is to be queued; false if it was answered (rejected, code
 * image: naming what is wrong).
 */
bool images_before(struct sandqd *d, struct djob *j);
/* j no longer waits for its image (it is answered or freed). */
void images_forget(struct djob *j);
/*
 * Takes back what images_before() gave j (its image_id, the image's Env
 * and WorkingDir) so that it can be admitted again on another image.
 */
void images_unapply(struct djob *j);
/* How many of t's queued jobs wait for their image. */
size_t images_waiting(const struct tenant *t);

/*** sbximage.c ***/

void sbximage_init(struct sandqd *d);
void sbximage_free(struct sandqd *d);
/*
 * What sandqd holds tenant/id runs on: true with *image and *workdir (each
 * NULL for none; valid until the next change) if it holds anything; false
 * (both NULL) for a sandbox it knows nothing of, which is held to record
 * neither.
 */
bool sbximage_get(const struct sandqd *d, const char *tenant, const char *id,
    const char **image, const char **workdir);
/*
 * Before intake_admit() of job (j's, decoded): notes whether it named its
 * image, and for a run on a sandbox sets in->sandbox_image and the job's
 * sandbox_image and sandbox_workdir to what sandqd holds its sandbox runs
 * on, for the worker to check.
 */
void sbximage_admit(struct sandqd *d, struct djob *j, struct job *job,
    struct intake *in);
/* Learns from a worker's result r of j (a create, import, fork, delete). */
void sbximage_result(struct sandqd *d, const struct djob *j, const struct result *r);
/*
 * The worker's result r of j: true if it was the worker's "image_stale"
 * (the sandbox's row says another image or workdir than j carried),
 * consumed here: the hint is corrected and j admitted again, from the
 * head of its queue, or answered (rejected, code image: it names another
 * image than its sandbox's). False: r is an ordinary result.
 */
bool sbximage_stale(struct sandqd *d, struct djob *j, const struct result *r);
/*** image_pull.c ***/

struct image_watch;
struct img_pull_opts;
struct img_progress;
struct img_record;
struct img_pull_stats;

/* The relay of pulls' progress to the loop (from images_start()). */
void image_pull_init(struct sandqd *d);
/* Closes the relay's handle (at shutdown); a pull ending later still reports. */
void image_pull_stop(struct sandqd *d);
/* Frees the relay, once the loop has ended. */
void image_pull_free(struct sandqd *d);
/*
 * A pull of src (skopeo's source) is starting; op is what its waiting
 * jobs' img_wait holds; job (of tenant index tenant; "" or NULL: none) the
 * job that started it. Sets opts' progress callback to feed the returned
 * watch (the caller's, until image_pull_end()) and records
 * image/pull_started on the audit trail.
 */
struct image_watch *image_pull_begin(struct sandqd *d, const struct dimg_op *op,
    const char *src, size_t tenant, const char *job, struct img_pull_opts *opts);
/*
 * The pull ended (rc 0 with its record r and stats st, or -errno with e),
 * after ms: delivers the progress still queued, records image/pulled or
 * image/pull_failed, and frees w (NULL is a no-op). Call it before any
 * waiting job is answered.
 */
void image_pull_end(struct sandqd *d, struct image_watch *w, int rc,
    const struct err *e, const struct img_record *r, const struct img_pull_stats *st,
    uint64_t ms);
/*
 * Answers image.pull job j (not queued) ok, its data the image r (pulled:
 * this host fetched it for the request; false: it was in the cache), ms
 * the wait.
 */
void image_pull_answer(struct sandqd *d, struct djob *j, const struct img_record *r,
    bool pulled, uint64_t ms);

/*** status.c ***/

/* Counts a published result of the tenant's (refused: rejected/expired). */
void status_count(struct sandqd *d, size_t tenant, bool refused);
/* Writes this host's status to PREFIX:hosts every couple of seconds. */
void status_start(struct sandqd *d);
/*
 * Writes this host's status now (on every connection to Redis), so a host
 * shows in `sandq status` as soon as it is connected, not a period later.
 */
void status_now(struct sandqd *d);
/* The image cache changed (a pull, an eviction): its listing is made anew. */
void status_images_changed(struct sandqd *d);
void status_stop(struct sandqd *d);

/* Bytes the image cache held at its last listing (0: no cache, not listed yet). */
uint64_t status_image_cache_bytes(const struct sandqd *d);

/*** exporter.c ***/

enum exporter_event {
	EXP_RETRY,			/* a failed attempt retried */
	EXP_DEAD_LETTER,		/* an entry or job dead-lettered */
	EXP_TAKEN_OVER,			/* a job taken over from a silent host */
	EXP_RECYCLED,			/* a worker replaced as worn */
	EXP_PULL_OK,			/* an image pull ended well */
	EXP_PULL_FAILED,		/* an image pull failed */
};

/* The metrics' registry, and GET /metrics at metrics_listen unless it is ""
 * (a bind that fails is a warning: sandqd runs on without the endpoint). */
void exporter_start(struct sandqd *d);
/* Closes the listener (close_all()). */
void exporter_stop(struct sandqd *d);
/* Frees the registry, once the loop has ended. */
void exporter_free(struct sandqd *d);
/* j answered with r: its status, refusals and times; notes when (publish). */
void exporter_job(struct sandqd *d, struct djob *j, const struct result *r);
/* j's result is in Redis: the publish time since exporter_job(). */
void exporter_published(struct sandqd *d, const struct djob *j);
/* One event of the tenant's (a tenant index; ignored for pool and images). */
void exporter_count(struct sandqd *d, enum exporter_event ev, size_t tenant);

/*** audit.c ***/

#define DAUDIT_JOB_MAX 64		/* events a job carries to Redis */

/* The host's audit database (STATE/audit.db) and the streams' cap. */
void daudit_start(struct sandqd *d);
/* Flushes the database writer (a bounded wait) and stops it. */
void daudit_stop(struct sandqd *d);
/* Records an event of j's (detail printf-style, may be NULL). */
void daudit_job(struct sandqd *d, struct djob *j, enum audit_category c,
    const char *action, const char *target, bool allowed, enum audit_level lv,
    const char *fmt, ...) __attribute__((format(printf, 8, 9)));
/* The events a result implies: refusals, sandbox ops, finished/rejected. */
void daudit_result(struct sandqd *d, struct djob *j, const struct result *r);
/* Before j's events go to Redis: notes what past DAUDIT_JOB_MAX was cut. */
void daudit_close(struct sandqd *d, struct djob *j);

/*** jobs.c ***/

/*
 * Answers j, an entry refused at admission (already deleted from its
 * stream): rejected with code (queue_full, rate_limited), the quota named
 * on the audit trail; an entry whose id cannot be read (from raw, when j
 * has none) is dead-lettered.
 */
void jobs_refuse(struct sandqd *d, struct djob *j, const char *raw, size_t rawlen,
    const char *code, const char *quota, const char *msg);
/* A new job record for the tenant's stream entry; djob_free() frees it. */
struct djob *djob_new(struct sandqd *d, size_t tenant, const char *entry_id);
/* Completes and publishes j's result r (r stays the caller's). */
void jobs_answer(struct sandqd *d, struct djob *j, struct result *r);
/* Answers a job that made version of its sandbox in a run whose result was lost. */
void jobs_result_lost(struct sandqd *d, struct djob *j, uint64_t version);
/* Answers j at once: status st, error code and msg (j is not queued). */
void jobs_answer_error(struct sandqd *d, struct djob *j, enum res_status st,
    const char *code, const char *msg);
/* Answers j `cancelled` (when: "before it started", "while running"). */
void jobs_cancelled(struct sandqd *d, struct djob *j, const char *when);
/* Answers a queued job whose deadline_ms passed before it could start. */
void jobs_expire(struct sandqd *d, struct djob *j);
/* Publishes a stored result again for a redelivered entry (and acks it). */
void jobs_republish(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *id, const char *res, size_t reslen);
/*
 * A stream entry read for a worker, carried out as core/intake.c decides:
 * answered at once (rejected, expired), dead-lettered, given up on, or
 * queued (once admitted, for a tenant with max_queued or rate). attempts:
 * the records of the job's failed attempts so far (a JSON array, the
 * reference is taken), NULL for a first delivery; a job out of attempts is
 * answered and dead-lettered.
 */
void jobs_entry(struct sandqd *d, size_t tenant, const char *entry_id,
    const char *job, size_t joblen, size_t nfields, json_t *attempts);
/* j, admitted (its image name read, if it has one): queued, or sent to
 * admission first for a tenant with max_queued or rate. */
void jobs_admitted(struct sandqd *d, struct djob *j);
/* Answers j refused by a rule, r's refusal on the audit trail if it names
 * a target (a tenant's rule). */
void jobs_refused_rule(struct sandqd *d, struct djob *j, const struct intake_refusal *r);
/*
 * The job's attempt failed for a reason of the infrastructure's (its
 * worker died, broke or could not take it): the failure is recorded with
 * the job (and in Redis), and the job runs again after a backoff, or,
 * past max_attempts, is answered `internal` and dead-lettered with every
 * attempt. While draining it is answered at once (jobs_fail).
 */
void jobs_retry(struct sandqd *d, struct djob *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An attempt record: {attempt, host, worker, at, reason} (a new reference). */
json_t *jobs_attempt_record(struct sandqd *d, size_t n, int worker, const char *reason);
/* The worker's result (bytes from MSG_JOB_DONE), checked and completed. */
/* The rest of jobs_worker_result() for a decoded result r (owned from here). */
void jobs_worker_result_go(struct sandqd *d, struct djob *j, struct result *r);
void jobs_worker_result(struct sandqd *d, struct djob *j, int worker,
    const void *buf, size_t len);
/* An internal result for a job whose worker failed it. */
void jobs_fail(struct sandqd *d, struct djob *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jobs_publish_pending(struct sandqd *d);
void jobs_publish_pending_cb(uv_timer_t *t);
void djob_free(struct djob *j);

/*** sched.c ***/
void sched_init(struct sandqd *d);
void sched_stop(struct sandqd *d);
void sched_enqueue(struct sandqd *d, struct djob *j);
/* Puts a job whose attempt failed back at the head of its queue, to run
 * after delay_ms (no later job on its sandbox overtakes it). */
void sched_requeue(struct sandqd *d, struct djob *j, uint64_t delay_ms);
/* Hands queued jobs to idle workers; then reads more if there is room. */
void sched_dispatch(struct sandqd *d);
size_t sched_queued(const struct sandqd *d);
size_t sched_running(const struct sandqd *d);
/* rq's read_done callback lands here. */
void sched_read_done(struct sandqd *d, int status, size_t n);

/*** pool.c ***/
int pool_start(struct sandqd *d);
/* The worker idle the longest (runq_idle), or NULL if none is idle. */
struct wslot *pool_idle(struct sandqd *d);
/* An idle worker for j: the one that last ran its sandbox, else pool_idle(). */
struct wslot *pool_idle_for(struct sandqd *d, const struct djob *j);
size_t pool_count(const struct sandqd *d, enum wstate st);
int pool_send_job(struct sandqd *d, struct wslot *w, struct djob *j);
void pool_reap(struct sandqd *d);
/* Closes every channel (workers exit on EOF) or kills them all. */
void pool_stop(struct sandqd *d, bool kill_now);
/* Kills w for its cancelled job; the reaper answers it and respawns at once. */
void pool_cancel(struct sandqd *d, struct wslot *w);
/* SIGKILLs every worker; the reaper then answers their jobs. */
void pool_kill(struct sandqd *d);
/* True once no worker process is left. */
bool pool_all_down(const struct sandqd *d);
/* Closes every libuv handle the pool owns (before the loop's last run). */
void pool_close_handles(struct sandqd *d);

/*** main.c ***/
void sandqd_check_drained(struct sandqd *d);

#endif
