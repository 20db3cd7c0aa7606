/*
 * sandbox.h - a fresh Linux sandbox per job, prepared ahead of the job.
 *
 * A sandbox is a process tree whose root is an init process that is pid 1 of
 * new user, mount, pid, net, ipc and uts namespaces. Building the namespaces,
 * the read-only image, /proc and /dev costs about a millisecond, so the worker
 * prepares the next sandbox while it is idle; when a job arrives only the
 * job-specific steps remain (size-capped /workspace and /tmp, seeded files,
 * rlimits, fork, exec). No job code ever runs in a sandbox before its job:
 * each sandbox serves exactly one job and dies with it.
 *
 * Lifecycle:
 *   sandbox_setup_host(conf)          once per worker, before its seccomp filter:
 *                                     /etc image, cgroup folder, the spawner
 *   sandbox_confine_worker()          the worker's own filter, last
 *   sandbox_image_layers(conf, img)   an OCI image's layers mounted (the
 *                                     spawner's idmapped mounts), kept
 *   sandbox_prepare(conf, img) -> sbx init cloned by the spawner, uid map,
 *                                     cgroup; init builds the root: the
 *                                     host's image, or img's overlay
 *   sandbox_run(sbx, job, res)        runs one job, fills the result
 *   sandbox_free(sbx)                 kills what is left, reaps, closes
 *
 * Only sandbox/ knows the mechanisms; worker/ sees this header.
 */
#ifndef SANDQ_SANDBOX_H
#define SANDQ_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "cgroup.h"

#define SANDBOX_UID 1000	/* the job's uid and gid inside the sandbox */
#define SANDBOX_BASE_BYTES ((uint64_t)1 << 30)	/* tmpfs of a worker's kept base */
#define SANDBOX_BASE_INODES 262144u		/* its inodes */
#define SANDBOX_SOCKETS_DEFAULT 1024	/* job_sockets' default */
#define SANDBOX_IMAGE_LAYERS_MAX 128	/* layers of an image a sandbox runs on */

struct sandbox_conf {
	const char *run_dir;	/* per-worker folder: etc/ image, root/ mountpoint */
	uid_t host_uid;		/* host uid (and gid) the job's uid maps to; never 0 */
	int index;		/* worker slot, for names */
	struct cg_sys cg;	/* this worker's cgroup folder, or CG_NONE */
	bool no_base;		/* keep no base: materialise every job (persist.c) */
	bool net_fresh;		/* a network namespace per sandbox (spawn.c); else shared */
	uint64_t socket_bytes;	/* bound of a job's socket buffers; 0 = its memory limit */
	uint64_t sockets_max;	/* sockets a job may hold when it makes an inet one */
	const char *image_cache;	/* the image cache's root, or NULL: host only */
	uid_t unpack_uid;	/* who owns the cache's layers (and gid) */
};

/*
 * An OCI image a sandbox's root is made of (docs/images.md): its layers
 * in the image cache, and the user its jobs run as.
 */
struct sandbox_image {
	const char (*layers)[65];	/* the layers' digests' hex digits, top first */
	size_t nlayers;			/* 1..SANDBOX_IMAGE_LAYERS_MAX */
	uint32_t uid;			/* the job's uid inside (the image's User) */
	uint32_t gid;			/* and gid */
};

struct sandbox;

/*
 * Once per worker, as root and before its seccomp filter: creates
 * run_dir/etc (the generated minimal /etc) and run_dir/root (the mountpoint
 * of each sandbox's root), finds and prepares this worker's cgroup folder
 * (conf->cg; CG_NONE when the machine has none: rlimits only), and forks the
 * spawner every sandbox's init is cloned from. Returns 0 or -errno with e.
 */
int sandbox_setup_host(struct sandbox_conf *conf, struct err *e);

/*
 * The worker's own allowlist seccomp filter (seccomp.c), installed on the
 * calling thread last in its start-up, once the spawner is forked: no
 * sandbox descends from a confined worker. Returns 0 or -errno with e.
 */
int sandbox_confine_worker(struct err *e);

/*
 * Has the spawner hold every layer of img mounted, idmapped so that the
 * cache's files show as the job's own, at conf->run_dir/layers/HEX
 * (layers.c), for the inits it clones from now on. Returns how many
 * layers it had to mount anew (0: a sandbox prepared for img before is
 * still current; more: one was not, or a layer changed in the cache),
 * or -errno with e (a layer missing from the cache: -ENOENT).
 */
int sandbox_image_layers(const struct sandbox_conf *conf,
    const struct sandbox_image *img, struct err *e);

/*
 * Starts a new sandbox: clones its init into fresh namespaces, maps its uid
 * and lets it build its root in the background: the host's image, or, with
 * img (not NULL; its layers mounted by sandbox_image_layers()), an overlay
 * of img's layers whose jobs run as img's user. Does not wait for it.
 * On success *out owns the sandbox. Returns 0 or -errno with e.
 */
int sandbox_prepare(const struct sandbox_conf *conf, const struct sandbox_image *img,
    struct sandbox **out, struct err *e);

#define SANDBOX_RULES_FP_LEN 64	/* hex digits of a rules fingerprint */

/* A persistent sandbox's head as the worker holds it (worker.h). */
struct sandbox_snapshot {
	int img_fd;		/* sealed memfd: an image of the snapshot */
	int patch_fd;		/* sealed memfd: a patch over it (agentfs/patch.h), or -1 */
	const char *base_key;	/* the head under the job's rules, for the kept base */
	const char *rules_fp;	/* the job's rules fingerprint, SANDBOX_RULES_FP_LEN
				 * hex digits: which saved shell session it may
				 * take (persist.c) */
};

/*
 * Runs job j (limits already resolved: every field of j->limits is set),
 * whose normalised msgpack encoding is spec/speclen (what the dispatcher
 * sent; handed to the sandbox's init as it is), in a prepared sandbox,
 * supervising its wall clock and capturing its output, and fills res:
 * status, exit_code, signal, stdout/stderr (+ truncated flags), wall_ms,
 * cpu_ms, max_rss_kb, started_at, finished_at, and error fields for
 * rejected/internal outcomes. snap (NULL: none) is a persistent sandbox's
 * head, materialised as /workspace under the job's path rules
 * (persist.c); its descriptors are not closed. Its base_key names that
 * head under those rules for the worker's kept base: when the base holds
 * it, /workspace is an overlay on it and nothing is written out. The
 * sandbox is spent afterwards, except that a job with j->persist whose
 * process ended on its own leaves init waiting for sandbox_capture().
 * Returns 0 when res describes the outcome (whatever it is); -errno only if
 * the worker itself failed (it then fills an internal result as well).
 */
int sandbox_run(struct sandbox *sbx, const struct job *j, const void *spec,
    size_t speclen, const struct sandbox_snapshot *snap, struct result *res);

/*
 * For a net "allow" job, before sandbox_run(): a TCP socket listening on
 * 127.0.0.1:port inside sbx's network namespace (made by the spawner), for
 * the egress proxy to accept the job's connections on (docs/security.md,
 * "Network by allowlist"). *fd is the caller's. Returns 0 or -errno with e.
 */
int sandbox_net_listen(struct sandbox *sbx, uint16_t port, int *fd, struct err *e);

/*
 * Live output: sandbox_run() calls cb with each piece of the job's output
 * as it reads it (fd 1 stdout, 2 stderr; only what the output limit keeps,
 * in order per stream), besides capturing it. NULL stops it.
 */
typedef void sandbox_output_cb(void *arg, int fd, const void *buf, size_t len);
void sandbox_set_output(struct sandbox *sbx, sandbox_output_cb *cb, void *arg);

/*
 * sandbox_run() calls cb(arg) at most once, if the job is still running
 * after_ms after init reported its process started: the worker's own work
 * (preparing the next sandbox) then overlaps a long job instead of
 * following it, and stays off a short job's path, where it would take a
 * CPU from the job (docs/decisions.md). The job's output and refused calls
 * wait meanwhile. NULL stops it; sandbox_run() forgets it either way.
 */
void sandbox_set_idle(struct sandbox *sbx, void (*cb)(void *), void *arg,
    unsigned after_ms);

/*
 * After sandbox_run() of a persistent job: hands init the tool call record
 * rec (JSON text: name, parameters, result, status, error, started_ms,
 * completed_ms) and waits for the captured workspace. On success returns 0
 * with *snapfd (the caller closes it) a memfd sealed against any change
 * holding the *len bytes of the new snapshot's patch over the image the
 * job was given (agentfs/patch.h: the blocks rewritten since that image), and
 * res's changed, added/modified/removed and refused_paths filled. If the
 * workspace cannot be committed (a special file, a cap, a name), returns
 * -1 with res's error set: status rejected, code "commit_refused", for
 * the job's own doing (exit_code and output stay), internal for ours.
 * snaplen is the size of the snapshot materialised (to size the memory the
 * capture may use).
 */
int sandbox_capture(struct sandbox *sbx, const struct job *j, const char *rec,
    size_t snaplen, int *snapfd, size_t *len, struct result *res);

/*
 * Seeds a new sandbox's version 1 from a folder of the image this sandbox
 * was prepared on. j is a sandbox.create with from_image_dir (limits
 * resolved), spec/speclen its normalised encoding, img_fd an empty
 * snapshot (a sealed memfd; not closed). Init captures the folder, as it
 * shows through the image's overlay root, into that snapshot with the
 * capture's own checks (persist.c, workspace_capture_inplace()) under j's
 * files and disk_bytes, within j's wall_ms; no process of the job's runs.
 * On success returns 0 with *patchfd (the caller closes it) and *len the
 * patch over img_fd, as sandbox_capture() gives them, and res's change
 * counts and refused_paths filled; else -1 with res's error: rejected with
 * code image (the folder is missing, not a folder, a symlink: the message
 * names it and the image), too_large (past a limit), timeout (past
 * wall_ms); internal for ours. The sandbox is spent afterwards.
 */
int sandbox_seed(struct sandbox *sbx, const struct job *j, const void *spec,
    size_t speclen, int img_fd, int *patchfd, size_t *len, struct result *res);

/*
 * After sandbox_capture() succeeded: tells init whether its snapshot was
 * committed, as base_key (the key of the worker's kept base it becomes), or
 * not (NULL). With a key, init brings the kept base up to the commit and
 * exits; sandbox_free() then waits for it (up to 30 s) instead of killing
 * it half way, so the next job's sandbox finds the base whole. keep: the
 * head the job started on is other sandboxes' too, so the base it held
 * stays as the template (sandbox/persist.c, "The kept base").
 */
void sandbox_commit_done(struct sandbox *sbx, const char *base_key, bool keep);

/*
 * Whether init is still bringing the kept base up to a commit
 * (sandbox_commit_done() with a key, and init has neither said it is done,
 * by closing its channel, nor exited).
 */
bool sandbox_updating(struct sandbox *sbx);
/*
 * Waits for that update's end (up to 30 s); true once it is done. Init may
 * still be exiting: sandbox_free() later reaps it.
 */
bool sandbox_update_wait(struct sandbox *sbx);
/*
 * Gives the kept base's update up: sandbox_free() then kills init at once.
 * The base, unsealed, is rebuilt (or the template used) by the next job
 * that wants it. For a job on another sandbox, which would not use it.
 */
void sandbox_update_abandon(struct sandbox *sbx);

/* Kills the sandbox's init (and so every process in it), reaps it, frees. */
void sandbox_free(struct sandbox *sbx);

#endif
