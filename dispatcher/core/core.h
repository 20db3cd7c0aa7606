/*
 * core.h - the dispatcher's lower room: its records of jobs, tenants and
 * workers, and the decisions made on them without I/O.
 *
 *   intake.c  a stream entry's bytes -> the job to queue, or how to answer
 *             the entry instead (rejected, expired, dead-lettered)
 *   runq.c    the tenants' run queues: which job runs next (deficit round
 *             robin, per-sandbox order, backoff) and on which worker
 *
 * Nothing here talks to Redis, holds a libuv handle or starts a process:
 * the files above them (dispatcher.h) do, and call down into these, so
 * tests can drive them with plain structs (tests/sched_test.c). Nothing
 * here includes dispatcher.h.
 */
#ifndef SANDQ_DISPATCHER_CORE_H
#define SANDQ_DISPATCHER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <jansson.h>

#include "../../audit/audit.h"
#include "../../config/config.h"
#include "../../proto/job.h"
#include "../../proto/result.h"
#include "../../queue/tenant.h"

struct sandqd;
struct dimg_op;

struct djob {
	uint32_t seq;			/* job_id in worker frames */
	size_t tenant;			/* index into d->tenants */
	char entry_id[48];		/* stream entry id */
	char id[JOB_ID_MAX + 1];	/* the job's id */
	struct job *job;		/* decoded job, NULL once answered early */
	char *norm;			/* normalised job sent to the worker */
	size_t normlen;
	uint64_t queued_at;		/* epoch ms, from the entry id */
	int worker;			/* slot running it, or -1 */
	char *res;			/* encoded result awaiting publication */
	size_t reslen;
	char *dead_reason;		/* set: goes to the dead-letter stream */
	char *dead_raw;			/* the entry's bytes, for the record */
	size_t dead_rawlen;
	bool publishing;		/* a transaction for it is in flight */
	struct audit_event *audit;	/* its events for the Redis stream (audit.c) */
	size_t naudit;
	uint64_t audit_over;		/* events past DAUDIT_JOB_MAX */
	json_t *attempts;		/* its failed attempts' records, or NULL */
	char *dead_attempts;		/* out of attempts: JSON for the dead letter */
	uint64_t retry_at;		/* epoch ms its backoff ends; 0: not waiting */
	struct dimg_op *img_wait;	/* the pull (or eviction) its image waits
					 * on: queued, not runnable; NULL: none */
	char *image_name;		/* the tenant's image name it ran on
					 * ("NAME:TAG"), or NULL */
	uint16_t img_env;		/* variables images_apply() added to its env */
	bool img_cwd;			/* images_apply() set its cwd */
	bool image_named;		/* the client named its image */
	uint8_t image_stale;		/* times its sandbox's image was not what
					 * sandqd held (sbximage.c) */
	bool cancelled;			/* sandq cancel: its worker is being killed */
	uint8_t sync;			/* SYNC_*: the shared store around it (shared.c) */
	uint64_t sbx_from;		/* the sandbox's version it was given */
	struct result *sync_res;	/* its result while the commit goes to Redis */
	uint32_t conflicts;		/* reruns after another host moved its sandbox */
	uint64_t committed;		/* the version its worker reported committing */
	bool stream;			/* its output is published live (job stream) */
	const char *eof_status;		/* stream: its output stream ends with this */
	uint64_t streamed;		/* live output bytes relayed */
	uint64_t sent_at;		/* epoch ms it went to a worker (metrics), or 0 */
	uint64_t answered_at;		/* epoch ms its result was made (metrics), or 0 */
	bool egress;			/* net "allow": the proxy holds its listener */
	size_t egress_listeners;	/* listeners the worker sent (cases: one each) */
	struct result *egress_held;	/* its result, until the proxy has ended it */
	uint64_t egress_held_at;	/* loop ms it was held at */
	struct result *egress_rows;	/* the proxy's reports so far (egress only) */
	struct sandqd *d;		/* owner, for publish callbacks */
	TAILQ_ENTRY(djob) link;		/* tenant queue or publish list */
};
TAILQ_HEAD(djob_list, djob);

enum {
	SYNC_NONE = 0,			/* not synced (or no shared store) */
	SYNC_PULLING,			/* its sandbox is being pulled: not runnable */
	SYNC_READY,			/* pulled: may run */
	SYNC_PUSHING,			/* its commit is going to Redis */
};

#define STATUS_BUCKETS 60		/* one-second buckets: the last minute */

/* Results of one second (status.c). */
struct tstat_bucket {
	uint64_t sec;			/* epoch second it counts */
	uint32_t done, refused;
};

struct tenant {
	char *name;
	struct djob_list queue;		/* validated, waiting for a worker */
	size_t queued;			/* length of queue */
	size_t running;			/* jobs on workers */
	uint32_t weight;		/* share of the workers under contention, >= 1 */
	uint32_t max_running;		/* jobs on this host's workers at most; 0: no cap */
	uint32_t deficit;		/* picks left in this round (runq.c) */
	struct tenant_conf conf;	/* its settings (tenants.c), if has_conf */
	bool has_conf;
	bool active;			/* its stream is read */
	bool in_config;			/* listed in the config file */
	bool from_redis;		/* its settings are its Redis record */
	bool listed;			/* seen in the last Redis poll */
	bool name_owned;		/* name is ours to free (added at run time) */
	struct tstat_bucket stats[STATUS_BUCKETS];	/* results, last minute */
};

#define TENANTS_CAP 1024		/* tenants one host serves at most */

enum wstate {
	W_DOWN = 0,			/* not running (respawn pending) */
	W_STARTING,			/* forked, no HELLO yet */
	W_IDLE,				/* ready for a job */
	W_BUSY,				/* running its job */
	W_DEAD,				/* killed or channel closed, not reaped */
};

/*
 * A worker as the scheduler sees it. pool.c's slots carry one each (struct
 * wslot's `run`), tests make their own: no process is behind it.
 */
struct runq_slot {
	enum wstate state;
	struct djob *job;		/* job in flight (W_BUSY; until reaped if W_DEAD) */
	uint64_t idle_seq;		/* when it last became idle (ordinal) */
	size_t last_tenant;		/* tenant of the last job it ran */
	char last_sandbox[JOB_SANDBOX_ID_MAX + 1];	/* its sandbox, "" if none */
};

/*
 * What the scheduler keeps besides the tenants' queues: its place in the
 * round, and its view of the workers. slots and committing are the
 * owner's (sandqd's pool and shared store, or a test's fakes).
 */
struct runq {
	struct runq_slot **slots;	/* the workers, by index */
	size_t nslots;
	const struct djob_list *committing;	/* ran, commit going to Redis: their
						 * sandboxes are still busy (or NULL) */
	size_t rr;			/* round-robin position among the tenants */
	uint64_t idle_seq;		/* ordinal of the last slot to go idle */
};

/*** intake.c ***/

/* What an entry is held to. Nothing in it is owned. */
struct intake {
	const struct config *cfg;	/* the host's settings */
	const char *tenant;		/* the stream's tenant */
	const struct tenant_conf *conf;	/* its own settings, or NULL (none) */
	uint64_t now;			/* epoch ms, for the deadline */
	const char *sandbox_image;	/* a run's sandbox's image as sandqd holds it
					 * (canonical), NULL: none known; the run's
					 * image unless it names one */
};

enum intake_verdict {
	INTAKE_OK = 0,			/* go on: the job is admitted so far */
	INTAKE_ANSWER,			/* answer it at once under its id */
	INTAKE_DEAD,			/* no id to answer under: dead-letter the entry */
	INTAKE_GIVE_UP,			/* out of attempts: answer internal, dead-letter */
};

/* What to answer a refused entry, or the reason it is dead-lettered. */
struct intake_refusal {
	enum res_status status;		/* INTAKE_ANSWER: ST_REJECTED or ST_EXPIRED */
	const char *code;		/* INTAKE_ANSWER: its error code */
	char msg[400];			/* the answer's message, or the dead letter's reason */
	const char *audit_target;	/* set: a rule of the tenant's refused it, recorded
					 * first ("refused", this target, audit_cat);
					 * static, or in->conf's */
	enum audit_category audit_cat;	/* AUDIT_CAT_QUOTA, or _POLICY for deny */
};

/*
 * Reads a stream entry for the tenant: raw, rawlen are its 'job' field (raw
 * NULL when it has none; nfields its fields), checked against
 * max_job_bytes, decoded by the strict decoder, and the tenant it names (if
 * any) against in->tenant. id receives the job's id as soon as one can be
 * read, refused or not. Returns INTAKE_OK with *jobp the job (the caller's:
 * job_free()), its tenant set; else INTAKE_ANSWER or INTAKE_DEAD, with *r
 * filled and *jobp NULL. in->now is not read.
 */
enum intake_verdict intake_read(const struct intake *in, const char *raw,
    size_t rawlen, size_t nfields, char id[JOB_ID_MAX + 1], struct job **jobp,
    struct intake_refusal *r);
/*
 * Admits a job from intake_read(): its path rules (they must compile), its
 * deadline (against in->now), network mode, a run's image (its reference or
 * the host's default_image, within the host's image_sources; code "image"),
 * limits (resolved against the host's presets and ceilings, then the
 * tenant's), the tenant's rules (in->conf: network modes, ceilings, denied
 * commands, image_sources), then its attempts so far (nattempts) against
 * max_attempts. Returns INTAKE_OK, or INTAKE_GIVE_UP for a job out of
 * attempts, with job->limits resolved, a run's job->image its image's
 * canonical text and *norm, *normlen the normalised job for the worker
 * (the caller's: free()); else INTAKE_ANSWER with *r filled. The job stays
 * the caller's either way. A run on any allowed image goes on with
 * job->image canonical, to be resolved to a digest by sandqd
 * (dispatcher/images.c) before it is queued; a run on a tenant's own image
 * name (intake_image_name() says which) goes on with job->image the name,
 * which sandqd reads from Redis and hands to intake_name_resolved().
 * An image.pull is held to the image rules alone (not host; a tenant's
 * name goes on as a run's) and has no limits.
 */
enum intake_verdict intake_admit(const struct intake *in, struct job *job,
    size_t nattempts, char **norm, size_t *normlen, struct intake_refusal *r);
/*
 * Whether job (admitted) runs on, or pulls (image.pull), a tenant's image
 * name: true with key its key in the tenant's names ("NAME:TAG",
 * img_name_key()).
 */
bool intake_image_name(const struct job *job, char *key, size_t size);
/*
 * A run on a tenant's image name, once the name is read: target is what
 * the name resolves to (canonical, never a name), or NULL when the tenant
 * has no such name. The target must be within the host's and the tenant's
 * image_sources, as a reference the job named itself (a name never widens
 * them). Returns true with job->image the target and *norm, *normlen
 * encoded again (the old bytes freed), or false with *r filled (rejected,
 * "image"; the tenant's refusal on the audit trail).
 */
bool intake_name_resolved(const struct intake *in, struct job *job, const char *target,
    char **norm, size_t *normlen, struct intake_refusal *r);
/* Whether job (admitted) is a net "allow" run on a sandbox naming no list. */
bool intake_needs_sandbox_allow(const struct job *job);
/*
 * Such a run, once its sandbox's list is read: value (len bytes, the
 * patterns comma-separated) or NULL when the sandbox has none. The list
 * becomes the job's, held to the tenant's net_allow as a job's own.
 * Returns true with *norm, *normlen encoded again (the old bytes freed), or
 * false with *r filled (rejected, "net", naming the field).
 */
bool intake_sandbox_allow(const struct intake *in, struct job *job, const char *value,
    size_t len, char **norm, size_t *normlen, struct intake_refusal *r);

/*** runq.c ***/

/*
 * Queues j on t, after the last job of equal or higher priority and after
 * the last job on its sandbox. j->job must be set.
 */
void runq_enqueue(struct tenant *t, struct djob *j);
/*
 * Puts j back at the head of t's queue, a job whose attempt failed: not run
 * before retry_at (epoch ms; 0: at once), nor is any later job on its
 * sandbox.
 */
void runq_requeue(struct tenant *t, struct djob *j, uint64_t retry_at);
/* Takes j, queued on t, out of the queue (to run, answer or sync it). */
void runq_remove(struct tenant *t, struct djob *j);
/*
 * The next job to run at now (epoch ms), by deficit round robin over the
 * tenants (table of n), or NULL if none can run now. The job stays queued:
 * the caller runq_remove()s it. Moves q's round and the tenants' deficits.
 */
struct djob *runq_pick(struct runq *q, struct tenant *tenants, size_t n,
    uint64_t now);
/* How many of t's queued jobs could run at now (their sandbox is free). */
size_t runq_runnable(const struct runq *q, const struct tenant *t, uint64_t now);
/*
 * Ends the backoffs due at now: returns how many queued jobs still wait
 * one, with *next the epoch ms the first of those ends (UINT64_MAX if none).
 */
size_t runq_backoff(struct tenant *tenants, size_t n, uint64_t now, uint64_t *next);
/* Records that s is ready for a job (its idle_seq: idle the shortest). */
void runq_slot_idle(struct runq *q, struct runq_slot *s);
/* Records that s runs j: busy, and the last to run j's sandbox. */
void runq_slot_busy(struct runq_slot *s, struct djob *j);
/*
 * The slot idle the longest (it has had the most time to prepare its next
 * sandbox), or -1 if none is idle.
 */
int runq_idle(const struct runq *q);
/*
 * An idle slot for j: one that last ran j's sandbox (it still holds its
 * snapshot), else runq_idle(). -1 if none is idle.
 */
int runq_idle_for(const struct runq *q, const struct djob *j);

#endif
