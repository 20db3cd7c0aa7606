/*
 * cgroup.h - each job in its own control group: memory, process count and
 * CPU time bounded for the whole job tree, and what it used read back.
 *
 * Layout, in each controller's hierarchy (v1) or the unified one (v2):
 *
 *   <sandqd's own cgroup>/sandq.<sandqd pid>/        made by sandqd at start,
 *                                                     removed at exit
 *   <sandqd's own cgroup>/sandq.<sandqd pid>/w<N>/    worker N's, made by it
 *   <sandqd's own cgroup>/sandq.<sandqd pid>/w<N>/j<K>  one per sandbox
 *
 * With v2, sandqd first moves itself (and so its workers) into
 * sandq.<pid>/sandqd, because the unified hierarchy lets a cgroup hand
 * controllers to its children only while no process sits in it.
 *
 * A sandbox's cgroup is made when the sandbox is prepared (its init is
 * moved in before it runs anything), limited when the job arrives, read when
 * the job ends and removed once init is reaped. A machine without usable
 * cgroups runs jobs with rlimits only; cg_detect() says which.
 *
 * Each function says in its name which process runs it: cg_host_* sandqd,
 * cg_worker_* the worker, cg_init_join_self() the sandbox's init; the rest
 * any of them (the CLI's doctor included).
 */
#ifndef SANDQ_SANDBOX_CGROUP_H
#define SANDQ_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"

#define CG_PATH_MAX 512
/* A v1 slot's memory charge left by a job that the next job may find (cgroup.c). */
#define CG_SLOT_RESIDUE_MAX ((uint64_t)2 << 20)

enum cg_version { CG_NONE = 0, CG_V1 = 1, CG_V2 = 2 };

enum cg_ctrl { CG_MEMORY, CG_PIDS, CG_CPU, CG_CPUACCT, CG__NCTRL };

/* What this machine gives: found once from /proc/self/{mountinfo,cgroup}. */
struct cg_sys {
	enum cg_version version;
	/* Our own cgroup's folder per controller ("" if the controller is absent). */
	char dir[CG__NCTRL][CG_PATH_MAX];
	char why[200];		/* why version is CG_NONE, for doctor and logs */
	bool sock_bounded;	/* a job's TCP and UDP buffers are charged to it */
};

/* The cgroup usage of one sandbox's job tree. */
struct cg_usage {
	uint64_t cpu_ns;	/* CPU time of every process, reaped or not */
	uint64_t mem_peak;	/* peak memory charged, tmpfs files included */
	uint64_t oom_kills;	/* processes the kernel killed at memory_bytes */
	uint64_t pids_refused;	/* forks refused at the pids limit */
	bool has_cpu, has_mem_peak;
};

/* One sandbox's cgroup: the same name in each controller. */
struct cg_job {
	const struct cg_sys *sys;
	char dir[CG__NCTRL][CG_PATH_MAX];
	bool slot;		/* one of the worker's two kept folders: emptied, not removed */
	uint64_t oom_base;	/* the slot's OOM kills and refused forks when */
	uint64_t pids_base;	/* this sandbox took it (v1 cannot reset them) */
};

/* Fills s; s->version is CG_NONE (with s->why) when memory+pids are not both usable. */
void cg_detect(struct cg_sys *s);
const char *cg_ctrl_name(enum cg_ctrl c);
/* Whether controller c is there (has a folder). */
bool cg_has(const struct cg_sys *s, enum cg_ctrl c);

/*
 * sandqd at start: removes the trees of sandqd processes that no longer
 * exist, makes sandq.<pid>, and (v2) moves itself into sandq.<pid>/sandqd
 * and hands the controllers down. On failure s->version becomes CG_NONE.
 */
int cg_host_setup(struct cg_sys *s, pid_t sandqd, struct err *e);
/* sandqd at exit: removes sandq.<pid> and everything under it. */
void cg_host_cleanup(const struct cg_sys *s, pid_t sandqd);

/*
 * A worker at start (before its seccomp filter; root): points s at its own
 * folder sandq.<sandqd>/w<index>, made empty (left-overs of a worker that
 * died are killed and removed).
 */
int cg_worker_setup(struct cg_sys *s, pid_t sandqd, int index, struct err *e);

/*
 * Gives the sandbox its cgroup. On v1, one of the worker's two kept slots
 * s0 and s1 (by seq's parity, so the sandbox before, which may still be
 * ending, has the other): taken only if no task is in it, its peak, fail
 * and CPU counters reset to zero and the counters v1 cannot reset (OOM
 * kills, refused forks) read as a base; cg_worker_job_destroy() empties it
 * and gives its remaining charge back (memory.force_empty). A slot still
 * busy, and every cgroup on v2, is a new folder j<seq>, removed after the
 * job. With v2 it also moves pid (its init) in. With v1 the init joins by itself (cg_init_join_self()): a task moving
 * itself by its thread id skips the global lock that moving another
 * process takes, whose wait for an RCU grace period stalls every fork on
 * the machine meanwhile.
 */
int cg_worker_job_create(const struct cg_sys *s, uint64_t seq, pid_t pid,
    struct cg_job *out, struct err *e);
/* Whether the init must call cg_init_join_self() (v1). */
bool cg_worker_job_self_join(const struct cg_job *j);
/*
 * The folders the init joins, NUL-separated, into buf (for MSG_SBX_GO);
 * returns the length, 0 if there is nothing to join.
 */
size_t cg_worker_job_dirs(const struct cg_job *j, char *buf, size_t len);
/*
 * In the init, before it runs anything else and while it is still host
 * root: moves itself into each folder of the NUL-separated list.
 */
int cg_init_join_self(const char *dirs, size_t len, struct err *e);
/*
 * Sets the job's memory (bytes, swap none), socket buffer and process-count
 * limits. sock_bytes bounds the kernel's TCP and UDP buffers of the job's
 * sockets: on v1 they have their own counter (memory.kmem.tcp), which this
 * sets to sock_bytes; on v2 they are charged to memory.max and sock_bytes
 * is not used. Call it before the job creates its first socket: a socket
 * is charged only if it was made once the counter was set.
 */
int cg_worker_job_limit(const struct cg_job *j, uint64_t memory_bytes,
    uint64_t sock_bytes, uint64_t pids, struct err *e);
/* Reads what the job used so far. */
void cg_worker_job_usage(const struct cg_job *j, struct cg_usage *u);
/*
 * Kills every process left and removes the cgroup (retrying while busy);
 * a slot is emptied the same way and kept, its charge given back.
 */
void cg_worker_job_destroy(struct cg_job *j);

#endif
