/*
 * job.h - a job as a plain struct, and its msgpack codec.
 *
 * Pure code: no I/O, no globals. Used by the dispatcher (decode untrusted
 * jobs from Redis), the worker (decode the normalised job the dispatcher
 * re-encoded), and libsandq (encode jobs). docs/protocol.md is the
 * field-by-field reference; result.h has the other direction.
 *
 * Decoding is bounded twice: payload_scan() (scan.h) walks the raw bytes
 * first and refuses any container whose announced count exceeds the bytes
 * left, or any nesting deeper than PAYLOAD_MAX_DEPTH, so msgpack-c never
 * allocates for a count a 5-byte input can claim; then each field is checked
 * against the limits below and reported by name ("field 'limits.wall_ms':
 * ..."). Paths are normalised as path.h says.
 *
 * Lifecycle: job_new()/payload_job_decode() -> use -> job_free().
 */
#ifndef SANDQ_PROTO_JOB_H
#define SANDQ_PROTO_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "path.h"

#define PAYLOAD_VERSION 1	/* "v" of jobs and results */

/* Bounds on decoded jobs (docs/protocol.md "Limits"). */
#define JOB_ID_MAX 128			/* bytes of an id: [A-Za-z0-9._:-] */
#define JOB_ARGV_MAX 4096		/* argv entries */
#define JOB_ARG_MAX (128u * 1024u)	/* bytes per argument (MAX_ARG_STRLEN) */
#define JOB_ENV_MAX 1024		/* environment entries */
#define JOB_ENV_NAME_MAX 256		/* bytes of a variable name */
#define JOB_EXEC_BYTES_MAX (1024u * 1024u)  /* argv + env total */
#define JOB_SCRIPT_MAX (1024u * 1024u)	/* sh script / python code */
#define JOB_STDIN_MAX (16u * 1024u * 1024u)
#define JOB_FILES_MAX 1024		/* seeded files */
#define JOB_FILES_BYTES_MAX (64u * 1024u * 1024u)
#define JOB_LABELS_MAX 64
#define JOB_ALLOW_MAX 64		/* patterns of a job's allow (EGRESS_PATS_MAX) */
#define JOB_ALLOW_LEN 262		/* bytes of one (EGRESS_PAT_MAX) */
#define JOB_LABEL_MAX 256
#define JOB_CASES_MAX 1000		/* cases of one run (field cases) */
#define JOB_PERMS_MAX 256		/* path rules of a job (PERMS_RULES_MAX) */
#define JOB_PATTERN_MAX 4096		/* bytes of a rule pattern (PERMS_PATTERN_MAX) */
#define JOB_SANDBOX_ID_MAX 128		/* bytes of a sandbox id (STORE_ID_MAX) */
#define JOB_TENANT_MAX 64		/* bytes of a tenant name (STORE_TENANT_MAX) */
#define JOB_DATA_MAX (64u * 1024u * 1024u)	/* fs.write content */
#define JOB_KV_KEY_MAX 1024		/* bytes of a kv key or prefix */
#define JOB_KV_VALUE_MAX (1024u * 1024u)	/* bytes of a kv value (JSON text) */
#define JOB_SNAPSHOT_MAX (128u * 1024u * 1024u)	/* sandbox.create/import bytes */
#define JOB_IMAGE_MAX 1024		/* bytes of an image reference (IMG_REF_MAX) */
#define JOB_IMAGE_ID_LEN 71		/* "sha256:" and 64 hex digits */

enum job_op {
	OP_NONE = 0,
	OP_EXEC,		/* argv */
	OP_SH,			/* script, run by bash */
	OP_PYTHON,		/* code, run by python3 */
	/* On a sandbox's snapshot, without starting a process (worker/ops.c). */
	OP_FS_READ,		/* path -> data: the file's bytes */
	OP_FS_WRITE,		/* path, data, mode: create or replace a file */
	OP_FS_LIST,		/* path (default "/"), recursive */
	OP_FS_STAT,		/* path */
	OP_FS_DELETE,		/* path, recursive */
	OP_KV_GET,		/* key -> data: the JSON text */
	OP_KV_SET,		/* key, value (JSON text) */
	OP_KV_DELETE,		/* key */
	OP_KV_KEYS,		/* prefix (optional) */
	OP_SANDBOX_CREATE,	/* empty, from files, or from snapshot */
	OP_SANDBOX_FORK,	/* sandbox -> to, sharing the blob */
	OP_SANDBOX_DELETE,
	OP_SANDBOX_EXPORT,	/* -> data: the head blob */
	OP_SANDBOX_IMPORT,	/* snapshot: a new sandbox or a new version */
	OP_SANDBOX_HISTORY,	/* -> data: versions and tool calls */
	OP_SANDBOX_INFO,	/* -> data: head, version, times, labels */
	OP_SANDBOX_LIST,	/* -> data: every sandbox of the tenant */
	/* Answered by sandqd itself, never by a worker (dispatcher/images.c). */
	OP_IMAGE_PULL,		/* image -> data: the image, in the host's cache */
	OP__COUNT,
};

/* True for the ops that run a process (exec, sh, python). */
#define JOB_OP_RUNS(op) ((op) == OP_EXEC || (op) == OP_SH || (op) == OP_PYTHON)
/*
 * True for the jobs that have limits: runs, and the ops that import a
 * snapshot (sandbox.import, sandbox.create with one), whose tree must fit
 * what a job on the sandbox may hold (docs/protocol.md "Sandboxes").
 */
#define JOB_HAS_LIMITS(j) (JOB_OP_RUNS((j)->op) || \
	(j)->op == OP_SANDBOX_IMPORT || \
	((j)->op == OP_SANDBOX_CREATE && ((j)->snapshot != NULL || \
	(j)->from_image_dir != NULL)))
/*
 * True for the jobs whose image sandqd checks and resolves: runs (their
 * own, the sandbox's or the default), and a sandbox.create or
 * sandbox.import that names one for its new sandbox (docs/images.md
 * "Sandboxes on images").
 */
#define JOB_HAS_IMAGE(j) (JOB_OP_RUNS((j)->op) || \
	(((j)->op == OP_SANDBOX_CREATE || (j)->op == OP_SANDBOX_IMPORT) && \
	(j)->image != NULL))

enum job_preset {
	PRESET_DEFAULT = 0,	/* the config's default preset */
	PRESET_STRICT,
	PRESET_NORMAL,
	PRESET_PERMISSIVE,
};

/* Resource limits; 0 means "not set" (taken from the preset). */
struct job_limits {
	uint64_t wall_ms;	/* wall-clock time */
	uint64_t cpu_ms;	/* CPU time (RLIMIT_CPU, rounded up to seconds) */
	uint64_t memory_bytes;	/* address space */
	uint64_t pids;		/* processes (and threads) */
	uint64_t output_bytes;	/* captured bytes per stream */
	uint64_t disk_bytes;	/* /workspace and /tmp tmpfs size, file size */
	uint64_t files;		/* open files (RLIMIT_NOFILE) */
};

struct job_file {
	char *path;		/* normalised, relative to /workspace, no '..' */
	uint8_t *data;		/* contents (owned) */
	size_t len;		/* bytes */
};

/* A job's network (docs/security.md): its own namespace with only loopback. */
enum job_net {
	NET_NONE = 0,	/* unix, inet and inet6 sockets, reaching only loopback */
	NET_UNIX,	/* unix sockets only: no IP at all */
	NET_ALLOW,	/* as none, and the egress proxy to the hosts of allow */
	NET__COUNT,
};

/* One case of a run with cases: its stdin and the stdout expected. */
struct job_case {
	uint8_t *stdin_data;	/* owned, or NULL: no stdin */
	size_t stdin_len;
	uint8_t *expect;	/* owned, or NULL: nothing to compare */
	size_t expect_len;
	char *expect_mode;	/* "exact" (NULL), "trim" or "regex" */
};

/* A path rule as given: the pattern as written, less the /workspace alias. */
struct job_perm {
	char *pattern;		/* JOB_PATTERN_MAX bytes, no NUL or control char */
	enum perm_level level;	/* parsed at decode; a string on the wire */
};

struct job {
	char *id;		/* client-made, JOB_ID_MAX, key-safe */
	enum job_op op;
	char **argv;		/* exec: NULL-terminated; sh/python: built */
	size_t argc;
	char *script;		/* sh: the script (owned) */
	char *code;		/* python: the code (owned) */
	uint8_t *stdin_data;	/* bytes fed to stdin, or NULL */
	size_t stdin_len;
	char **env;		/* "K=V" strings, NULL-terminated, or NULL */
	size_t nenv;
	char *cwd;		/* absolute path inside the sandbox, or NULL */
	struct job_limits limits;
	enum job_preset preset;
	struct job_file *files;
	size_t nfiles;
	char **labels;		/* key, value, key, value..., or NULL */
	size_t nlabels;		/* pairs */
	char *net;		/* as given: "none", "unix", "allow", or NULL (none) */
	enum job_net net_mode;	/* parsed net; NET_NONE when net is NULL */
	char **allow;		/* net "allow": host patterns (egress/egress.h),
				 * JOB_ALLOW_MAX of at most JOB_ALLOW_LEN bytes;
				 * checked against the tenant's by sandqd */
	size_t nallow;
	int64_t priority;	/* higher runs first within a tenant */
	int64_t deadline_ms;	/* epoch ms, 0 = none (checked by dispatcher) */
	char *image;		/* runs: the image reference as given (printable
				 * ASCII, JOB_IMAGE_MAX), or NULL (the config's
				 * default_image); sandqd checks it against
				 * images/ref.h and sends its canonical text */
	char *image_id;		/* runs on an image: its manifest digest
				 * ("sha256:" and 64 lower-case hex digits),
				 * set by sandqd once the image is in its
				 * cache; a client's job may not carry it */
	char *sandbox_image;	/* runs on a sandbox: the image sandqd holds
				 * the sandbox records (canonical text), NULL
				 * for none; the worker checks it against the
				 * sandbox's row. Set by sandqd only */
	char *sandbox_workdir;	/* the same for its workdir, NULL for
				 * /workspace; set by sandqd only */

	/* Persistent sandboxes (docs/protocol.md "Sandboxes"). */
	char *tenant;		/* the stream's tenant, set by sandqd; a client
				 * value must equal it */
	char *sandbox;		/* sandbox id, or NULL (a throw-away one) */
	bool persist;		/* commit the workspace back (default: sandbox set) */
	bool stream;		/* output published live to PREFIX:{T}:out:ID */
	struct job_case *cases;	/* runs: the command once per case, or NULL */
	size_t ncases;
	struct job_perm *perms;	/* path rules, on top of perm_preset */
	size_t nperms;
	char *perm_preset;	/* agent-edit (default), agent-safe, ... or NULL */

	/* Operands of the fs.*, kv.* and sandbox.* ops. */
	char *path;		/* fs.*: absolute sandbox path, "/" the root */
	uint8_t *data;		/* fs.write: content (owned; non-NULL if given) */
	size_t data_len;
	uint32_t mode;		/* fs.write: permission bits (decoded 0644 if absent) */
	bool recursive;		/* fs.list: the whole subtree; fs.delete: a tree */
	bool parents;		/* fs.write: create missing folders first (mkdir -p) */
	char *key;		/* kv.get/set/delete */
	char *value;		/* kv.set: JSON text */
	char *prefix;		/* kv.keys: NULL = every key */
	char *to;		/* sandbox.fork: the new sandbox's id */
	uint8_t *snapshot;	/* sandbox.create/import: AgentFS database bytes */
	size_t snapshot_len;
	char *snapshot_key;	/* sandbox.create: a stored snapshot's key
				 * (proto/snapkey.h), instead of its bytes */
	char *workdir;		/* sandbox.create/import: where the sandbox's
				 * files are in its jobs (path.h's root
				 * folder), NULL for /workspace; a create
				 * with from_image_dir defaults to it */
	char *from_image_dir;	/* sandbox.create: the folder of image that
				 * becomes version 1, or NULL */
};

struct job *job_new(void);
/* Frees every member; NULL is a no-op. */
void job_free(struct job *j);

/*
 * Decodes and validates a job. On success returns 0 and *out owns a job.
 * On failure returns -EINVAL (or -EBADMSG for bytes that are not one msgpack
 * map) with e->msg naming the field; *out is NULL. idbuf (JOB_ID_MAX + 1
 * bytes, may be NULL) receives the job's id whenever it could be read and is
 * valid, even if another field failed; otherwise idbuf[0] is '\0'.
 */
int payload_job_decode(const void *buf, size_t len, struct job **out,
    char *idbuf, struct err *e);

/*
 * Encodes a job as msgpack (the same format decode reads). *out is malloc'd
 * and owned by the caller. Returns 0 or -ENOMEM.
 */
int payload_job_encode(const struct job *j, char **out, size_t *outlen);

/*
 * Finds the job's id in raw bytes without allocating or decoding the rest,
 * so an oversized or malformed job can still be answered under its id.
 * Returns true and fills idbuf (JOB_ID_MAX + 1 bytes) if the top-level map
 * has a valid "id" before any structural damage; false otherwise.
 */
bool payload_peek_id(const void *buf, size_t len, char *idbuf);

/* True if s is a valid job id (1..JOB_ID_MAX bytes of [A-Za-z0-9._:-]). */
bool payload_id_valid(const char *s, size_t len);

const char *job_op_name(enum job_op op);
const char *job_preset_name(enum job_preset p);
int job_preset_parse(const char *s, enum job_preset *p);
/* "none", "unix" or "allow" (docs/security.md, Network); 0 or -EINVAL. */
int job_net_parse(const char *s, enum job_net *n);

#endif
