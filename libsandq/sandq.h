/*
 * sandq.h - libsandq: submit sandq jobs to Redis and wait for their results.
 *
 * A C client of the wire protocol in docs/protocol.md: a job is an XADD of a
 * msgpack map to sandq:{TENANT}:jobs; its result is BLPOPed from
 * sandq:{TENANT}:done:ID and kept at sandq:{TENANT}:res:ID until its TTL.
 * This header is self-contained and is the library's only public header.
 *
 * Lifecycle:
 *   sandq_connect(url, tenant) -> sandq_submit_*() -> sandq_wait() ->
 *   sandq_result_free() ... -> sandq_close()
 * or, for the ops on a persistent sandbox (fs.*, kv.*, sandbox.*):
 *   sandq_connect() -> sandq_call() (= sandq_submit_op() + sandq_wait()) ->
 *   sandq_result_free() ... -> sandq_close()
 *
 * A connection is a synchronous hiredis context: use one per thread. Every
 * function returns 0 or a negative errno; sandq_last_error() explains the
 * most recent failure on a connection in words.
 */
#ifndef SANDQ_H
#define SANDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SANDQ_ID_MAX 128		/* bytes of a job id */

struct sandq;

/* Limits a job asks for; 0 leaves one to the preset. */
struct sandq_limits {
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t memory_bytes;
	uint64_t pids;
	uint64_t output_bytes;
	uint64_t disk_bytes;
	uint64_t files;
};

/* A file seeded into /workspace before the job runs. */
struct sandq_file {
	const char *path;		/* "a/b.txt" or "/a/b.txt": /workspace/a/b.txt */
	const void *data;
	size_t len;
};

/* Whether a run on a sandbox commits its workspace back. */
enum sandq_persist {
	SANDQ_PERSIST_DEFAULT = 0,	/* yes when a sandbox is named, else no */
	SANDQ_PERSIST_YES,		/* needs a sandbox */
	SANDQ_PERSIST_NO,		/* run on the sandbox's head, commit nothing */
};

/* A path rule (docs/paths.md): PATTERN gets LEVEL. */
struct sandq_perm {
	const char *pattern;		/* glob, e.g. "*.pem"; "/" is the root */
	const char *level;		/* "none", "view", "read" or "write" */
};

/*
 * One case of a run with cases (docs/protocol.md "Cases"): the command runs
 * once per case, in a fresh sandbox, with the case's stdin; its stdout is
 * compared with expect in expect_mode. Zero-initialise.
 */
struct sandq_case {
	const void *stdin_data;		/* NULL: no stdin */
	size_t stdin_len;
	const void *expect;		/* NULL: the case neither passes nor fails */
	size_t expect_len;
	const char *expect_mode;	/* "exact" (NULL), "trim" or "regex"
					 * (PCRE2, the whole output) */
};

/* A label of a sandbox (sandbox.create, import, fork). */
struct sandq_label {
	const char *key;		/* 1..256 bytes */
	const char *value;		/* 0..256 bytes */
};

/* Options common to every op. Zero-initialise, then set what you need. */
struct sandq_job_opts {
	const char *id;			/* NULL: a random id is made */
	const char *const *env;		/* "K=V" strings, NULL-terminated, or NULL */
	const char *cwd;		/* NULL: /workspace */
	const void *stdin_data;		/* with has_stdin */
	size_t stdin_len;
	bool has_stdin;
	struct sandq_limits limits;
	const char *preset;		/* "strict", "normal", "permissive" or NULL */
	const struct sandq_file *files;
	size_t nfiles;
	int64_t priority;		/* higher first within the tenant */
	int64_t deadline_ms;		/* epoch ms; 0 = none */
	const char *net;		/* network mode; NULL = "none" */
	const char *image;		/* runs: the image, "host" or a reference
					 * (docs/images.md); NULL: the server's
					 * default_image, or the sandbox's.
					 * sandbox.create/import: the image the
					 * new sandbox's runs use; NULL: none
					 * recorded (each run chooses) */
	/* Persistent sandboxes: run/sh/python and, for perms, fs.*. */
	const char *sandbox;		/* sandbox id, or NULL: a throw-away one */
	enum sandq_persist persist;	/* commit the workspace back? */
	const struct sandq_perm *perms;	/* path rules on top of perm_preset */
	size_t nperms;
	const char *perm_preset;	/* "agent-edit" (NULL), "agent-safe", ... */
	/* Live output: published as it comes (sandq_stream_open()). */
	bool stream;
	/*
	 * Runs: the command once per case (at most 1,000); not with stream
	 * or has_stdin. The result's data holds each case's outcome:
	 * sandq_cases_decode().
	 */
	const struct sandq_case *cases;
	size_t ncases;
	/* net "allow": the host patterns the job may reach, NULL-terminated
	 * ("pypi.example:443", "*.github.com"); within the tenant's net_allow. */
	const char *const *allow;
};

/*
 * Operands of an op on a persistent sandbox (sandq_submit_op()). Set only
 * those the op uses: the server rejects a job carrying a field its op does
 * not use. Zero-initialise.
 */
struct sandq_op_args {
	const char *sandbox;		/* the sandbox; NULL: o->sandbox */
	const char *path;		/* fs.*: "/a/b" or "a/b"; "/" the root */
	const void *data;		/* fs.write: content (may be empty) */
	size_t data_len;
	uint32_t mode;			/* fs.write: permission bits; 0 = 0644 */
	bool parents;			/* fs.write: create missing folders
					 * first (mkdir -p), each under the
					 * path rules */
	bool recursive;			/* fs.list subtree, fs.delete a tree */
	const char *key;		/* kv.get, kv.set, kv.delete */
	const char *value;		/* kv.set: JSON text */
	const char *prefix;		/* kv.keys: NULL = every key */
	const char *to;			/* sandbox.fork: the new sandbox */
	const void *snapshot;		/* sandbox.create/import: AgentFS bytes */
	size_t snapshot_len;
	const char *snapshot_key;	/* sandbox.create: instead of the bytes,
					 * the key of a snapshot the tenant's
					 * sandboxes hold (sandq_snapshot_key(),
					 * or a result's snapshot) */
	const struct sandq_label *labels;	/* sandbox.create/import/fork */
	size_t nlabels;
	const struct sandq_file *files;	/* sandbox.create: seeded files */
	size_t nfiles;
	/*
	 * A sandbox on an image (docs/images.md "Sandboxes on images"): the
	 * image is o->image; these say where its files are.
	 */
	const char *workdir;		/* sandbox.create/import: where the new
					 * sandbox's files are in its runs;
					 * NULL: /workspace (or from_image_dir) */
	const char *from_image_dir;	/* sandbox.create: the folder of o->image
					 * (e.g. "/testbed") that becomes its
					 * version 1; needs o->image */
};

/* A system call the job's seccomp filter refused, and how many times. */
struct sandq_refusal {
	char *syscall;			/* its name, e.g. "mount" */
	uint64_t count;
};

/* A result (docs/protocol.md "Result"). Owned by the caller. */
struct sandq_result {
	char *id;
	char *status;			/* "ok", "exit", "timeout", "rejected", ... */
	int exit_code;			/* ok/exit; -1 otherwise */
	int signal;			/* signal that ended the job, or 0 */
	uint8_t *stdout_data;		/* NUL-terminated for convenience */
	size_t stdout_len;
	bool stdout_truncated;
	uint8_t *stderr_data;		/* NUL-terminated for convenience */
	size_t stderr_len;
	bool stderr_truncated;
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t max_rss_kb;
	uint64_t queued_at;		/* epoch ms */
	uint64_t started_at;
	uint64_t finished_at;
	char *host;			/* NULL if absent */
	int64_t worker;
	int64_t attempt;
	char *error_code;		/* NULL unless the result carries an error */
	char *error_message;
	struct sandq_refusal *refused;	/* syscalls refused to the job, by name */
	size_t nrefused;
	/* Persistent sandboxes; NULL/0 when absent. */
	char *sandbox;			/* the sandbox the job ran on */
	uint64_t version;		/* its version after the job */
	char *snapshot;			/* SHA-256 (hex) of that version */
	char **changed;			/* paths the commit changed, at most 1024 */
	size_t nchanged;
	bool changed_truncated;		/* more changes than changed lists */
	uint64_t added, modified, removed;	/* exact counts behind changed */
	char **refused_paths;		/* changes the path rules kept out */
	size_t nrefused_paths;
	uint8_t *data;			/* fs/kv/sandbox ops: one msgpack object */
	size_t data_len;		/* bytes of data; 0: the op returned none */
	/* A run on an image other than host; NULL when absent. */
	char *image;			/* the reference it ran on (a name resolved) */
	char *image_digest;		/* the manifest digest it took */
	char *image_name;		/* the tenant's name it asked for ("NAME:TAG") */
};

/*
 * Connects to Redis (redis://HOST:PORT or unix:///PATH, with optional
 * USER:PASS@) for the given tenant. Returns NULL and, if err is not NULL,
 * writes a message into err (errlen bytes) on failure.
 */
struct sandq *sandq_connect(const char *url, const char *tenant, char *err,
    size_t errlen);
void sandq_close(struct sandq *c);

/* The message of the last failure on c. */
const char *sandq_last_error(const struct sandq *c);

/*
 * Submits a job; idbuf (SANDQ_ID_MAX + 1 bytes) receives its id. The _exec
 * form runs argv directly, _sh runs script with bash -c, _python runs code
 * with python3 -c. Returns 0 or -errno (-EINVAL for options the protocol
 * cannot carry, -EIO for Redis errors).
 */
int sandq_submit_exec(struct sandq *c, const char *const *argv,
    const struct sandq_job_opts *o, char *idbuf);
int sandq_submit_sh(struct sandq *c, const char *script,
    const struct sandq_job_opts *o, char *idbuf);
int sandq_submit_python(struct sandq *c, const char *code,
    const struct sandq_job_opts *o, char *idbuf);

/*
 * Submits an op on a persistent sandbox: op is its wire name ("fs.read",
 * "kv.set", "sandbox.create", ... see docs/protocol.md), a its operands
 * (NULL: none) and o the common options (NULL: none; perms, perm_preset
 * and id apply; run-only options such as argv limits are sent as given
 * and rejected by the server). Fields the op does not use are not
 * checked here: the server rejects them by name. Returns 0 or -EINVAL
 * (unknown op, bad sandbox id, a bound of the protocol), -EIO.
 */
int sandq_submit_op(struct sandq *c, const char *op,
    const struct sandq_op_args *a, const struct sandq_job_opts *o,
    char *idbuf);
/*
 * sandq_submit_op() then sandq_wait(timeout_ms). *out owns the result
 * whatever its status; a rejected op is a result (status "rejected",
 * error_code such as "sandbox_not_found"), not a failure of the call.
 */
int sandq_call(struct sandq *c, const char *op, const struct sandq_op_args *a,
    const struct sandq_job_opts *o, int64_t timeout_ms,
    struct sandq_result **out);
/*
 * sandq_call() of a sandbox.create with snapshot bytes (and no job id,
 * limits or preset given) first sends only their key (snapshot_key): when
 * one of the tenant's sandboxes holds that snapshot, the sandbox is made
 * from it without the upload (as sandbox.fork, with nothing re-checked);
 * on snapshot_not_found the bytes go as asked. Same outcome, and for a
 * stored snapshot a hash of the bytes instead of their trip through Redis.
 */
/*
 * The key of a snapshot's bytes (docs/store.md "Chunks and keys"): what
 * results give as snapshot, 64 lower-case hex digits and a NUL into key.
 * 0, or -EIO when the digest fails.
 */
int sandq_snapshot_key(const void *snapshot, size_t len, char key[65]);
/*
 * Submits image.pull (docs/images.md): the host that reads it pulls image
 * (a reference within its image_sources) into its image cache, or finds
 * it there, and answers ok with data, a msgpack map: reference, digest,
 * os, arch, layers [{digest, size, unpacked}], bytes, unpacked_bytes,
 * pulled (false: it was cached), pulled_at, last_used, duration_ms. Of
 * o (NULL: none) only id, priority, deadline_ms and stream are sent; with
 * stream, the pull's progress records come through sandq_stream_next()
 * as fd 3, each one JSON object. Returns 0 or -EINVAL (no image, a bound
 * of the protocol), -EIO.
 */
int sandq_submit_image_pull(struct sandq *c, const char *image,
    const struct sandq_job_opts *o, char *idbuf);

/*
 * Live output of a job submitted with o->stream: an iterator over its
 * chunks as they are published (PREFIX:{T}:out:ID, docs/protocol.md).
 * sandq_stream_next() returns 1 with *fd (1 stdout, 2 stderr, 3 an
 * image.pull's progress record) and *data,
 * *len (valid until the next call), 0 at the end (the job is answered:
 * get its result with sandq_wait()), -ETIMEDOUT when timeout_ms passed
 * with nothing new (call again), or -EIO. The stream uses its own
 * connection (blocking reads), so c stays free for other calls.
 */
struct sandq_stream;
int sandq_stream_open(struct sandq *c, const char *id, struct sandq_stream **out);
int sandq_stream_next(struct sandq_stream *s, int64_t timeout_ms, int *fd,
    const void **data, size_t *len);
void sandq_stream_close(struct sandq_stream *s);

/* Submits raw bytes as the entry's `job` field, unchecked (for tests). */
int sandq_submit_raw(struct sandq *c, const void *job, size_t len);

/*
 * Waits for a job's result: returns it at once if it is already stored,
 * else blocks until it arrives or timeout_ms passes (< 0: no limit), then
 * -ETIMEDOUT. *out owns the result.
 */
int sandq_wait(struct sandq *c, const char *id, int64_t timeout_ms,
    struct sandq_result **out);
/* The stored result, or -ENOENT if there is none (yet, or any longer). */
int sandq_result_get(struct sandq *c, const char *id, struct sandq_result **out);
/* Decodes a result from its msgpack bytes (as stored in Redis). */
int sandq_result_decode(const void *buf, size_t len, struct sandq_result **out);
void sandq_result_free(struct sandq_result *r);

/*** Runs with cases (libsandq/cases.c) ***/

/* One case's outcome in a run with cases. Owned by its sandq_cases. */
struct sandq_case_result {
	uint64_t index;			/* 1-based, as the server numbers cases */
	char *status;			/* "ok", "exit", "timeout", ... */
	int exit_code;
	int signal;
	uint8_t *stdout_data;		/* NUL-terminated for convenience */
	size_t stdout_len;
	bool stdout_truncated;
	uint8_t *stderr_data;		/* NUL-terminated for convenience */
	size_t stderr_len;
	bool stderr_truncated;
	uint64_t wall_ms;
	uint64_t cpu_ms;
	int pass;			/* 1 passed, 0 failed, -1 no expect */
	char *error;			/* the case's run error, or NULL */
};

/* The per-case results of a run with cases. Owned by the caller. */
struct sandq_cases {
	struct sandq_case_result *cases;
	size_t ncases;
	uint64_t passed;		/* cases whose expect matched */
	uint64_t failed;		/* cases with an expect that did not */
};

/*
 * Decodes the data of r, a result of a run with cases, into *out (owned by
 * the caller: sandq_cases_free()). Returns 0, -ENOENT when r carries no
 * data (a run rejected before its cases ran: see r->error_message), or
 * -EBADMSG when the data is not the cases' map (the bounds of the wire
 * protocol are checked: at most 1,000 cases).
 */
int sandq_cases_decode(const struct sandq_result *r, struct sandq_cases **out);
void sandq_cases_free(struct sandq_cases *cs);

/*** Path presets (libsandq/presets.c; links -ljansson) ***/

/* A path rule of a preset. */
struct sandq_preset_rule {
	char *pattern;			/* in the sandbox's tree, "/" its root */
	char *level;			/* "none", "view", "read" or "write" */
};

/* A path preset as the server enforces it (docs/paths.md "Presets"). */
struct sandq_preset {
	char *name;			/* what perm_preset names */
	char *description;
	char *deflt;			/* level of a path no rule covers */
	struct sandq_preset_rule *rules;	/* in order */
	size_t nrules;
};

/* The presets the servers publish. Owned by the caller. */
struct sandq_presets {
	char *default_preset;		/* a job's when it names none */
	struct sandq_preset *presets;
	size_t npresets;
};

/*
 * Reads the path presets sandqd publishes at every start
 * (sandq:perm_presets, docs/protocol.md "Keys") into *out (owned by the
 * caller: sandq_presets_free()). Returns 0, -ENOENT when no sandqd has
 * published them yet, -EBADMSG when the key does not hold the documented
 * JSON (bounded: at most 64 presets of 1,024 rules), or -EIO.
 */
int sandq_presets(struct sandq *c, struct sandq_presets **out);
/* The preset named name in ps, or NULL. */
const struct sandq_preset *sandq_presets_find(const struct sandq_presets *ps,
    const char *name);
void sandq_presets_free(struct sandq_presets *ps);

/*** The audit trail (libsandq/audit.c) ***/

/* Outcomes an audit query keeps. */
enum sandq_audit_outcome {
	SANDQ_AUDIT_ANY = 0,
	SANDQ_AUDIT_ALLOWED,		/* sandq audit --allowed */
	SANDQ_AUDIT_DENIED,		/* sandq audit --denied */
};

/*
 * What sandq_audit() keeps: the filters of `sandq audit` (docs/audit.md).
 * Zero-initialise; an unset field keeps everything.
 */
struct sandq_audit_filter {
	const char *job;		/* exact job id, or NULL */
	const char *sandbox;		/* exact sandbox id, or NULL */
	const char *categories;		/* comma-separated ("syscall,path"), or NULL */
	const char *level;		/* minimum: info < notice < warning < alert */
	enum sandq_audit_outcome outcome;
	int64_t since_ms;		/* event time >= since_ms (epoch ms), if > 0 */
	int64_t until_ms;		/* event time < until_ms, if > 0 */
	size_t limit;			/* at most this many events (0: 100,000) */
};

/* One audit event (docs/audit.md "The event"). Strings are never NULL. */
struct sandq_audit_event {
	char id[48];			/* the stream entry's id */
	int64_t time_ms;		/* when the host saw it */
	char *host;
	char *tenant;
	char *job;
	char *sandbox;
	char *category;
	char *action;
	char *target;
	bool allowed;
	char *level;
	char *detail;
};

/* Events from sandq_audit(). Owned by the caller. */
struct sandq_audit_events {
	struct sandq_audit_event *events;	/* oldest first */
	size_t nevents;
	size_t skipped;			/* entries that were not events */
};

/*
 * Reads the tenant's audit trail (sandq:{T}:audit) with XRANGE, page by
 * page, keeping the events that pass f (NULL: all), oldest first, into
 * *out (owned by the caller: sandq_audit_free()). The stream is untrusted
 * (the tenant's own user may write to it): an entry that is not an event,
 * field by field within docs/audit.md's bounds, is skipped and counted.
 * Returns 0, -EINVAL for a bad filter (an unknown category or level,
 * with the message naming it), or -EIO.
 */
int sandq_audit(struct sandq *c, const struct sandq_audit_filter *f,
    struct sandq_audit_events **out);
void sandq_audit_free(struct sandq_audit_events *ev);

/*
 * The exit status the sandq CLI gives a result: 0 for ok, the job's code for
 * exit, 128+N for a signal, 124 for a timeout or any *_limit, 125 when sandq
 * could not run the job (rejected, expired, cancelled, internal).
 */
int sandq_result_exit_status(const struct sandq_result *r);

#ifdef __cplusplus
}
#endif

#endif
