/*
 * internal.h - what the files of sandbox/ share, and nothing else sees.
 *
 * One file per mechanism: spawn.c (the process inits are cloned from),
 * layers.c (an image's layers, idmapped, mounted by the spawner), ns.c
 * (id maps, the sandbox identity, loopback), cgroup.c (per-job control
 * groups), mount.c (root, image, /dev, /proc, pivot), image.c (the
 * generated /etc), limits.c (rlimits), seccomp.c (worker and job filters),
 * exec.c (the job's own process: stdio, credentials, exec), persist.c (a
 * persistent sandbox's workspace), sockcap.c (the job's socket count).
 *
 * One file per process: sandbox.c is the worker's side (prepare,
 * supervise, capture), init.c the sandbox's init (pid 1 inside), and the
 * spawner's loop is in spawn.c. A function in a file that several of them
 * run says which in its name, after the module's: ns_worker_* in the
 * worker, ns_init_* in init, job_* in the job's process, spawner_* in the
 * spawner.
 */
#ifndef SANDQ_SANDBOX_INTERNAL_H
#define SANDQ_SANDBOX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <linux/seccomp.h>

#include "../common/err.h"
#include "../common/msg.h"
#include "../proto/job.h"
#include "sandbox.h"

/*** ns.c ***/

/* Namespaces each sandbox gets. */
#define SBX_CLONE_FLAGS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | \
	CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)

/*
 * The worker: writes uid_map and gid_map of pid: uid (gid) inside ->
 * host_uid; SANDBOX_UID for the host's image, the image's user for one.
 */
int ns_worker_write_id_maps(pid_t pid, uid_t host_uid, uint32_t uid, uint32_t gid,
    struct err *e);
/* In init: become uid/gid (the mapped ones) keeping capabilities in the userns. */
int ns_init_become_sandbox_user(uint32_t uid, uint32_t gid, struct err *e);
/*
 * In init: bring up loopback of the network namespace, unless it is up
 * already (the spawner's shared one, which init may not change).
 */
int ns_init_loopback_up(struct err *e);
/*
 * In a new init, from the spawner: this init's network namespace is one of
 * the shared ones, whose loopback the spawner brought up when it made it
 * and no job can bring down (it owns nothing there): ns_init_loopback_up()
 * then has nothing to do.
 */
void ns_init_net_is_shared(void);
/*
 * In the spawner: unshares a new network namespace for itself, owned by
 * the host's user namespace (so no job has any capability over it), with
 * loopback up and its per-namespace settings (ns.c, NETNS_SYSCTLS).
 * Returns 0 or -errno with e.
 */
int ns_spawner_net_make(struct err *e);
/*
 * In the spawner, once: moves it into a mount namespace of its own holding
 * only the mounts on the way to, or below, what it and its inits reach by
 * path (/proc, run_dir, the image cache, the worker's cgroup folders), the
 * worker's run_dir its peer (ns.c). Best effort: on any failure the spawner
 * keeps more mounts, never fewer than those.
 */
void ns_spawner_mounts_trim(const struct sandbox_conf *conf);

/*** ipcns.c ***/

#define IPCNS_SLOTS 2	/* as the network namespaces' slots (spawn.c) */

/* One shared IPC namespace of the spawner's, and what it checks before reuse. */
/*
 * The shared namespaces' turn-taking (spawn.c: the network ones; ipcns.c:
 * the IPC ones), in the spawner. ns_spawner_pidfd_ended(): whether the init
 * behind *pidfd has ended (its pidfd readable; then closed and set -1; -1
 * counts as ended), without waiting. ns_spawner_slot_pick(): among n slots, the
 * one taken last being turn, the first that reusable() says may be entered
 * as it is, from turn on (so jobs one after another keep to one), with
 * *reuse true; else the first whose init ended(), else the one after turn,
 * with *reuse false (the caller makes it anew). Returns the slot's index.
 */
bool ns_spawner_pidfd_ended(int *pidfd);
unsigned ns_spawner_slot_pick(unsigned n, unsigned turn, bool (*reusable)(void *arg, unsigned i),
    bool (*ended)(void *arg, unsigned i), void *arg, bool *reuse);

struct ipcns_slot {
	int ns;			/* the namespace, or -1 */
	int sysv[3];		/* its /proc/sysvipc shm, sem, msg, opened inside */
	int mq;			/* its mqueue filesystem, a detached mount */
	int last;		/* pidfd of the last init cloned into it, or -1 */
};

struct ipcns {
	int host;		/* the spawner's own IPC namespace */
	struct ipcns_slot slot[IPCNS_SLOTS];
	unsigned turn;		/* the slot taken last: the next init tries it first */
	struct ipcns_slot *cur;	/* the slot ipcns_spawner_enter() chose, or NULL */
};

/* In the spawner, once: no shared namespace yet. */
void ipcns_spawner_init(struct ipcns *s);
/*
 * Before a clone: enters the namespace the next init is to share (a slot
 * made anew if neither may be taken: its last init still runs, or left
 * something in it). True if the spawner is in it (the clone must not
 * unshare one), false if the init gets one of its own.
 */
bool ipcns_spawner_enter(struct ipcns *s);
/*
 * After a clone that ipcns_spawner_enter() let share: back to the
 * spawner's own namespace; pidfd (dup'ed) is the init's, or -1 if the
 * clone failed, which retires the slot's namespace.
 */
void ipcns_spawner_leave(struct ipcns *s, int pidfd);
/* Closes every slot's descriptors (not host's); in a new init too. */
void ipcns_spawner_close(struct ipcns *s);

/*** spawn.c ***/

/*
 * The entry of a sandbox's init: the spawner calls it in each fresh clone,
 * pid 1 of the new namespaces, with conf and ctl, init's end of its
 * channel to the worker. It must not return (the clone exits 1 if it does).
 */
typedef void spawn_init_cb(const struct sandbox_conf *conf, int ctl);

/*
 * The worker, before its own filter: forks the spawner, which runs
 * init_entry in every init it clones.
 */
int spawn_worker_start(const struct sandbox_conf *conf, spawn_init_cb *init_entry,
    struct err *e);
/* The worker: asks the spawner for a new init: pid, control channel, pidfd. */
int spawn_worker_sandbox(pid_t *pid, int *ctl, int *pidfd, struct err *e);
/*
 * The worker: asks the spawner to hold the n layers hex (64 hex digits
 * each) of the image cache mounted at run_dir/layers/HEX (layers.c);
 * *mounted: how many it had to mount anew. 0 or -errno with e.
 */
int spawn_worker_layers(const char (*hex)[65], size_t n, unsigned *mounted,
    struct err *e);
/*
 * Worker side of the egress listener (net "allow"): has the spawner make a
 * TCP socket listening on 127.0.0.1:port in the network namespace of the
 * init pidfd names, and returns it in *fd (owned by the caller). The
 * spawner never shares that namespace with a later sandbox. Returns 0 or
 * -errno with e.
 */
int spawn_worker_listen(int pidfd, uint16_t port, int *fd, struct err *e);

/*** layers.c ***/

#define LAYERS_HELD_MAX 512	/* layer mounts a spawner keeps */

/*
 * In the spawner: the request buf (len bytes, 64 hex digits a layer):
 * each layer of conf->image_cache mounted, idmapped (conf->unpack_uid ->
 * conf->host_uid), read-only, nosuid, nodev, at run_dir/layers/HEX, unless
 * it already is (and is still the cache's folder). Fills *out.
 */
void layers_spawner_request(const struct sandbox_conf *conf, const void *buf,
    size_t len, struct msg_spawn_layers *out);
/* In the spawner or an init: our command line and name become name. */
void spawn_set_title(const char *name);

/*** init.c ***/

/*
 * The init of a sandbox (a spawn_init_cb, handed to spawn_worker_start()),
 * in the spawner's fresh clone; ctl goes to the worker.
 */
void init_main(const struct sandbox_conf *conf, int ctl) __attribute__((noreturn));

/*** mount.c ***/

/*
 * In the worker, once, in its own mount namespace and before the spawner
 * is forked: the pieces every sandbox's root takes (the read-only /etc,
 * the host's folders, /dev) at run_dir/tmpl, read-only (mount.c,
 * TEMPLATE). 0 or -errno with e.
 */
int mount_worker_template(const char *run_dir, struct err *e);

/*
 * In the child, with the worker's run_dir as the current folder: builds the
 * whole read-only root on its root/ folder from the template and pivots
 * into it.
 */
int mount_build_root(bool base, struct err *e);
/*
 * The same for an image (init, run_dir current, as the image's user):
 * the root is an overlay of the n layers at layers/HEX (top first) under
 * a writable layer on its own tmpfs, with sandq's /dev, /proc, /tmp,
 * /workspace and /etc/hosts, hostname, resolv.conf; nosuid, nodev.
 */
int mount_build_image_root(const char (*hex)[65], size_t n, bool base, struct err *e);
/*
 * In init, per job on an image: the root's writable layer sized to the
 * job's disk and files limits. 0 or -errno with e.
 */
int mount_image_upper_size(const struct job_limits *l, struct err *e);
/*
 * In the child, per job: size-capped ws (the sandbox's files: /workspace,
 * or its workdir), /tmp and /dev/shm; ws owned by the caller's uid and gid
 * (the job's, inside).
 */
int mount_job_tmpfs(const struct job_limits *l, uint64_t extra_bytes,
    uint64_t extra_inodes, const char *ws, struct err *e);
/*
 * In init, per job on a sandbox with a workdir (ws, absolute and
 * normalised): makes each of its folders, following no link (a symlink or
 * a file on the way is refused, naming it). image: the root is an
 * image's, writable; otherwise the host's root is made writable for the
 * while. 0 or -errno with e.
 */
int mount_workdir_make(const char *ws, bool image, struct err *e);
/* In init: covers /workspace (and the kept base under it) with an empty,
 * read-only folder, for a sandbox whose files are at its workdir. */
int mount_workspace_cover(struct err *e);

/*** image.c ***/

int image_build_etc(const char *run_dir, struct err *e);

/*
 * persist.c, in a persistent sandbox's init. persist_materialise() makes
 * /workspace from the snapshot in snapfd under the job's path rules
 * (read-only bind mounts below write): as an overlay on the worker's kept
 * base (ps) when the base holds that snapshot or can be rebuilt to, else
 * written out on a tmpfs; for sh jobs it applies the saved session to j
 * (cwd, env, the EXIT trap that saves the next one) when it was saved
 * under the same path rules, minus the variables no session carries
 * (docs/security.md). persist_capture()
 * reads back what the job changed against the same snapshot and rules,
 * adds the tool call record rec (JSON from the worker) and the session,
 * sends the worker MSG_SBX_CHANGES then MSG_SBX_SNAPSHOT, and on an
 * overlay waits for MSG_SBX_BASE_NEXT to bring the base up to the commit.
 * Both 0 or -errno with e.
 */
struct persist {
	const char *ws;		/* where the sandbox's files are: /workspace, or
				 * its workdir (the job's sandbox_workdir) */
	bool image;		/* the root is an image's (writable) */
	int basefd;		/* run_dir/base, opened before pivot_root; -1: none */
	int patchfd;		/* MSG_SBX_BASE's patch over the snapshot; -1: none */
	char *key;		/* MSG_SBX_BASE: the base this job wants; NULL: none */
	char rules_fp[SANDBOX_RULES_FP_LEN + 1];	/* MSG_SBX_BASE: the job's
				 * rules fingerprint; empty: none */
	int treefd;		/* base/tree (or the template's tree: on_tmpl),
				 * once known to hold key; else -1 */
	int tmplfd;		/* base/tmpl, the template (persist.c); -1 */
	bool on_tmpl;		/* the job's lower layer is the template's tree */
	int upperfd;		/* /workspace's upper layer when it is an overlay; -1 */
	bool session_refused;	/* a saved session was not restored: other rules */
	bool made_dirs;		/* workspace_make_write_dirs() made a folder: the
				 * base's marks lack it, so it is not advanced */
	struct capture_ahead *ahead;	/* persist_capture_ahead()'s, or NULL */
};

int persist_materialise(struct persist *ps, int snapfd, struct job *j, struct err *e);
/*
 * In the init of a sandbox on an image, for a sandbox.create with
 * from_image_dir (j): captures that folder of the root (no link followed
 * on the way to it) into the empty snapshot snapfd under full access and
 * j's files and disk_bytes, and sends the worker MSG_SBX_CHANGES then
 * MSG_SBX_SNAPSHOT, as persist_capture() does. -ENOENT, -ENOTDIR or
 * -ELOOP with e naming the folder and the image when it is missing, not
 * a folder or a symlink; the capture's own errors otherwise.
 */
int persist_seed(int ctl, int snapfd, const struct job *j, struct err *e);
/*
 * While the job runs (init only waits for it then): opens the snapshot and
 * reads what the capture will need of it (its entries and size, each
 * entry's level under j's rules) into ps->ahead, so that persist_capture()
 * of the same j starts at the workspace. Only on an overlay; a failure
 * leaves ps->ahead NULL and the capture reads it itself.
 */
void persist_capture_ahead(struct persist *ps, int snapfd, const struct job *j);
int persist_capture(int ctl, struct persist *ps, int snapfd, const struct job *j,
    const void *rec, size_t reclen, struct err *e);

/*** limits.c ***/

#define LIMITS_NRLIMITS 7

struct limits_rlimit {
	int resource;		/* RLIMIT_* */
	struct rlimit rl;	/* soft and hard */
};

/*
 * Pure: translates resolved job limits to the rlimits a job gets. With
 * cgroup set, memory and processes are bounded by the job's cgroup, and the
 * rlimits on them stay out of its way (see limits.c).
 */
size_t limits_to_rlimits(const struct job_limits *l, bool cgroup,
    struct limits_rlimit out[LIMITS_NRLIMITS]);
/* Applies them to the calling process. */
int limits_apply(const struct job_limits *l, bool cgroup, struct err *e);

/*** seccomp.c ***/

/* The worker's own allowlist filter, last in its start-up. */
int seccomp_worker_install(struct err *e);
/* Compiles the job's deny filter to BPF once (the worker, at start-up). */
int seccomp_worker_job_compile(struct err *e);
/*
 * In init, before the job's process: installs the job's filter for its
 * network mode and returns its listener descriptor (for the worker), or
 * -errno with e.
 */
int seccomp_init_job_install(enum job_net net, struct err *e);
/*
 * The worker: whether a notification of the job filter for network mode net
 * is a call to count (an inet socket(), sockcap.c) rather than a refused one.
 */
bool seccomp_worker_job_counted(enum job_net net, const struct seccomp_data *d);

/*** sockcap.c ***/

/*
 * The sockets a job holds, read from its network namespace's
 * /proc/PID/net/sockstat and sockstat6: every socket it made (unix ones
 * too), plus TCP sockets no process holds (connections not yet accepted,
 * closed ones still sending). The counter is kept open for the sandbox's
 * life: the worker reads it again at each inet socket() the job makes.
 */
struct sockcap {
	int fd[2];		/* sockstat, sockstat6; -1 if not open */
};

/* Opens init's counters (worker side; init_pid is in the job's netns). */
int sockcap_open(struct sockcap *c, pid_t init_pid, struct err *e);
/* The same from a /proc/.../net folder ("/proc/self/net": the caller's netns). */
int sockcap_open_dir(struct sockcap *c, const char *dir, struct err *e);
/* The count now, or -errno. */
int64_t sockcap_count(const struct sockcap *c);
/* Closes what is open; a no-op on a closed or zeroed one with fd -1. */
void sockcap_close(struct sockcap *c);
/* Pure: the count in a sockstat and a sockstat6 text, or -EINVAL. */
int64_t sockcap_parse(const char *stat, const char *stat6);
/*
 * 1 if the namespace holds no socket of any kind, none in TIME_WAIT and no
 * fragment (every per-namespace count of both files zero), 0 if it does,
 * or -errno. sockcap_idle() is the same on texts (pure).
 */
int sockcap_is_idle(const struct sockcap *c);
bool sockcap_idle(const char *stat, const char *stat6);

/*** exec.c ***/

#define EXEC_STACK_SIZE (256 * 1024)	/* the job's process until it execs */

struct exec_spec {
	const struct job *job;	/* argv, env, cwd, limits */
	const char *home;	/* the sandbox's files: default cwd and HOME */
	int stdin_fd;		/* becomes fd 0 */
	int stdout_fd;		/* becomes fd 1 */
	int stderr_fd;		/* becomes fd 2 */
	bool cg_memory;		/* a memory cgroup bounds the job (RLIMIT_AS need not) */
	bool warm;		/* a warm interpreter ahead of its job (warm.c) */
	enum job_net warm_net;	/* warm: the filter it installs itself */
	int warm_ctl;		/* warm: its control socket, becomes fd 3 */
	int warm_listener;	/* warm: set by the child, the filter's listener */
	char **envp;		/* set by exec_init_spawn(), in envstore */
	char *envstore[JOB_ENV_MAX + 8];
};

/*
 * In init, per job: starts the job's process, which execs the job or _exits
 * 126/127 as a shell would. Returns its pid, or fills e.
 */
pid_t exec_init_spawn(struct exec_spec *s, struct err *e);
/*
 * In init: the environment a job starts with, its own variables plus the
 * defaults it lacks (PATH, HOME=home, LANG, PYTHONNOUSERSITE), in storage
 * (NULL-terminated). HOME's text is in a static buffer: valid until the
 * next call.
 */
char **exec_init_environ(const struct job *j, const char *home, char **storage,
    size_t nstorage);
/*** warm.c ***/

/*
 * In init, before MSG_SBX_READY, on the host's root with a memory cgroup:
 * starts a warm python3 (exec_init_spawn(), the job's path) with stdin_fd,
 * out_wr and err_wr as its stdio and HOME home. Returns 0, or -errno with
 * e and no warm process (the job runs cold).
 */
int warm_init_start(int stdin_fd, int out_wr, int err_wr, const char *home,
    struct err *e);
/*
 * In init, the job known: whether the warm process (if any, and alive) can
 * run j exactly as a cold `python3 -c` would (docs/decisions.md: a python
 * op, its network mode, a memory cgroup, and the variables Python and
 * libc read at start-up all as the warm start had them).
 */
bool warm_init_fits(const struct job *j, const char *home, bool cg_memory);
/* In init: takes the warm process's filter listener (the caller closes it). */
int warm_init_listener(void);
/*
 * In init: hands j to the warm process (warm_init_fits() said yes): its
 * cwd, code, stdin and environment, then its rlimits. Returns its pid (the
 * job's process from now on) with *pre_cpu_ns its CPU time before the job,
 * or -errno with e (it is killed).
 */
pid_t warm_init_hand(const struct job *j, const char *home, bool cg_memory,
    int64_t *pre_cpu_ns, struct err *e);
/* In init: kills and reaps the warm process, if any. */
void warm_init_discard(void);

/* In init, per job: creates every seeded file under ws (the sandbox's files). */
int exec_init_seed_files(const struct job *j, const char *ws, struct err *e);
/*
 * In init, per job: ensures the cwd exists when it is under ws (the
 * sandbox's files) or /tmp, or anywhere on an image's (writable) root when
 * image is set.
 */
int exec_init_prepare_cwd(const struct job *j, bool image, const char *ws,
    struct err *e);

#endif
