/*
 * sandbox.c - the worker's side of a sandbox: prepare it, supervise its job.
 *
 * DESIGN. sandbox_prepare() asks the spawner (spawn.c) for an init cloned
 * into fresh namespaces (ns.c), maps its ids, puts it in its cgroup
 * (cgroup.c) and lets it go; init (init.c) builds the read-only image
 * while the worker goes back to waiting for a job, then reports
 * MSG_SBX_READY and waits for the job. sandbox_run() sets the job's cgroup
 * limits and sends the job; init runs it and reports MSG_SBX_EXEC, then
 * MSG_SBX_EXIT when the job's main process has ended.
 *
 * The worker meanwhile polls the job's stdout and stderr pipes and init's
 * channel, captures output up to the job's output limit (past it, the job
 * is stopped: output_limit), reads the cgroup's CPU time (past cpu_ms: the
 * job is stopped), and at the wall-clock deadline kills init, which takes
 * the whole pid namespace down. CPU time comes from the cgroup (every
 * process, reaped or not) or, without one, from init's getrusage of the
 * processes it reaped; peak RSS from the latter.
 *
 * Sections: prepare / run / capture / free.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "internal.h"

#define READY_TIMEOUT_MS 10000	/* image build; normally about a millisecond */
#define DRAIN_AFTER_KILL_MS 2000
#define CPU_CHECK_MS 50		/* how often the job's cgroup CPU time is read */
#define NOTIFY_BATCH 64		/* refused calls answered per wake-up at most */
#define CAPTURE_TIMEOUT_MS 120000	/* reading a workspace back, at most */
#define BASE_UPDATE_TIMEOUT_MS 30000	/* bringing the kept base up, at most */

struct sandbox {
	pid_t init_pid;		/* pid 1 of the sandbox (a child of the spawner) */
	int pidfd;		/* init's pidfd: kill it, see it end; -1 once it has */
	int ctl;		/* SEQPACKET channel to init */
	int out_rd;		/* job's stdout, read end */
	int err_rd;		/* job's stderr, read end */
	sandbox_output_cb *output;	/* live output, or NULL (sandbox_set_output) */
	void *output_arg;
	void (*idle)(void *);	/* sandbox_set_idle(), or NULL once called */
	void *idle_arg;
	unsigned idle_after_ms;	/* call it this long after the job's exec */
	bool ready;		/* MSG_SBX_READY seen */
	struct cg_job cg;	/* the sandbox's cgroup (none if the machine has none) */
	uint64_t cg_memory, cg_pids;	/* the limits written to it, 0 if none */
	uint64_t socket_bytes;	/* conf->socket_bytes: 0 = the job's memory limit */
	uint64_t sockets_max;	/* conf->sockets_max: the job's socket cap */
	struct sockcap sockcap;	/* the sockets its network namespace holds */
	bool sockcap_warned;	/* a failed count was logged */
	enum job_net net;	/* the job's network mode, once it has arrived */
	int notify;		/* the job filter's listener, -1 until init sends it */
	bool updating;		/* init is bringing the kept base up to a commit */
	bool warm_asked;	/* MSG_SBX_WARM sent */
};

/*** Prepare ***/

/*
 * The bound of a job's TCP and UDP buffers for a memory limit: the
 * configured socket_bytes, never above the memory limit itself, so a job
 * holds at most twice its memory limit on cgroup v1 (where socket buffers
 * have their own counter) and its memory limit on v2.
 */
static uint64_t
sock_bound(const struct sandbox *s, uint64_t memory_bytes)
{
	if (s->socket_bytes == 0 || s->socket_bytes > memory_bytes)
		return memory_bytes;
	return s->socket_bytes;
}

/* The cgroup limits of the last job this worker ran. */
static uint64_t last_memory, last_pids;
/*
 * Whether that job was a python op that a warm python3 could take (it did,
 * or none was asked for): the next sandbox then starts one (warm.c). A
 * worker running shell or exec jobs spends no CPU on an interpreter nobody
 * uses; the first python job after them runs cold, and a python job the
 * warm process could not take (docs/protocol.md) does not ask for one for
 * the next job.
 */
static bool last_python;
/*
 * Python jobs to let pass before a sandbox asks for a warm python3 again,
 * and how many asked for ones in a row went unused: a workload the warm
 * process cannot take (an environment of its own, another network mode)
 * pays for one start-up in 2, 4, ... up to 64 jobs, not every other one.
 */
static unsigned warm_skip, warm_misses;

/*
 * run_dir/base: the kept base of persist.c, on its own tmpfs (it holds up
 * to a whole workspace) owned by the sandboxes' uid, so each init, as that
 * uid, can rebuild it, and nobody else on the host can read it.
 */
static int
base_mount(const struct sandbox_conf *conf, struct err *e)
{
	char path[512], opts[160];

	snprintf(path, sizeof(path), "%s/base", conf->run_dir);
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%u,mode=0700,uid=%u,gid=%u",
	    (unsigned long long)SANDBOX_BASE_BYTES, SANDBOX_BASE_INODES,
	    (unsigned)conf->host_uid, (unsigned)conf->host_uid);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return err_set(e, -errno, "mkdir %s: %s", path, strerror(errno));
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
		return err_set(e, -errno, "mount %s: %s", path, strerror(errno));
	return 0;
}

int
sandbox_confine_worker(struct err *e)
{
	return seccomp_worker_install(e);
}

int
sandbox_setup_host(struct sandbox_conf *conf, struct err *e)
{
	char path[512];
	int rc;

	if (conf->host_uid == 0)
		return err_set(e, -EINVAL, "sandbox uid must not be host root");
	if (mkdir(conf->run_dir, 0755) < 0 && errno != EEXIST)
		return err_set(e, -errno, "mkdir %s: %s", conf->run_dir, strerror(errno));
	/*
	 * The worker's own mount namespace, with run_dir on a private tmpfs:
	 * the /etc image and the sandboxes' mountpoint live there, the host
	 * never sees them, they vanish with the worker, and a sandbox's mount
	 * table names no host path (its /etc is "/etc" of a tmpfs).
	 */
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", conf->run_dir, "tmpfs", MS_NOSUID | MS_NODEV,
	    "size=16m,nr_inodes=4096,mode=0755") < 0)
		return err_set(e, -errno, "private run folder %s: %s", conf->run_dir,
		    strerror(errno));
	snprintf(path, sizeof(path), "%s/root", conf->run_dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return err_set(e, -errno, "mkdir %s: %s", path, strerror(errno));
	/* Where the spawner mounts image layers (layers.c). */
	snprintf(path, sizeof(path), "%s/layers", conf->run_dir);
	if (conf->image_cache != NULL && mkdir(path, 0755) < 0 && errno != EEXIST)
		return err_set(e, -errno, "mkdir %s: %s", path, strerror(errno));
	if (!conf->no_base && (rc = base_mount(conf, e)) < 0)
		return rc;
	if ((rc = image_build_etc(conf->run_dir, e)) < 0 ||
	    (rc = mount_worker_template(conf->run_dir, e)) < 0)
		return rc;
	cg_detect(&conf->cg);
	if ((rc = cg_worker_setup(&conf->cg, getppid(), conf->index, e)) < 0)
		return rc;
	if (conf->cg.version == CG_NONE)
		log_warnx("no cgroups: %s; jobs are bounded by rlimits only", conf->cg.why);
	/* The jobs' filter, compiled once: each job only loads it. */
	if ((rc = seccomp_worker_job_compile(e)) < 0)
		return rc;
	/* Last: the spawner keeps a copy of all the above. */
	return spawn_worker_start(conf, init_main, e);
}

int
sandbox_image_layers(const struct sandbox_conf *conf, const struct sandbox_image *img,
    struct err *e)
{
	unsigned mounted;
	int rc;

	if (conf->image_cache == NULL)
		return err_set(e, -ENOSYS, "this worker has no image cache");
	if ((rc = spawn_worker_layers(img->layers, img->nlayers, &mounted, e)) < 0)
		return rc;
	return (int)mounted;
}

/* Tells init its root is img: layers and user, before its go. */
static int
send_image(const struct sandbox *s, const struct sandbox_image *img, struct err *e)
{
	struct msg_sbx_image hd = { .uid = img->uid, .gid = img->gid,
	    .nlayers = (uint32_t)img->nlayers };
	size_t len = sizeof(hd) + 64 * img->nlayers;
	uint8_t *buf = xmalloc(len);
	int rc;

	memcpy(buf, &hd, sizeof(hd));
	for (size_t i = 0; i < img->nlayers; i++)
		memcpy(buf + sizeof(hd) + 64 * i, img->layers[i], 64);
	rc = msg_send(s->ctl, MSG_SBX_IMAGE, 0, buf, len, -1);
	free(buf);
	if (rc < 0)
		return err_set(e, rc, "hand the image to sandbox init: %s", strerror(-rc));
	return 0;
}

int
sandbox_prepare(const struct sandbox_conf *conf, const struct sandbox_image *img,
    struct sandbox **out, struct err *e)
{
	static uint64_t sandboxes;	/* names each sandbox's cgroup */
	char godirs[CG__NCTRL * CG_PATH_MAX];
	struct sandbox *s;
	int rc;

	*out = NULL;
	if (img != NULL && (img->nlayers == 0 || img->nlayers > SANDBOX_IMAGE_LAYERS_MAX))
		return err_set(e, -E2BIG, "an image of %zu layers (1 to %d)", img->nlayers,
		    SANDBOX_IMAGE_LAYERS_MAX);
	s = xcalloc(1, sizeof(*s));
	s->out_rd = s->err_rd = s->notify = -1;
	s->sockcap.fd[0] = s->sockcap.fd[1] = -1;
	s->sockets_max = conf->sockets_max;
	if ((rc = spawn_worker_sandbox(&s->init_pid, &s->ctl, &s->pidfd, e)) < 0 ||
	    (rc = ns_worker_write_id_maps(s->init_pid, conf->host_uid,
	    img != NULL ? img->uid : SANDBOX_UID, img != NULL ? img->gid : SANDBOX_UID,
	    e)) < 0 ||
	    (img != NULL && (rc = send_image(s, img, e)) < 0) ||
	    (rc = cg_worker_job_create(&conf->cg, ++sandboxes, s->init_pid, &s->cg,
	    e)) < 0) {
		sandbox_free(s);
		return rc;
	}
	/*
	 * Jobs mostly ask for what the one before asked for: set that now, off
	 * the job's path; sandbox_run() corrects it if needed.
	 */
	s->socket_bytes = conf->socket_bytes;
	if (last_memory > 0 && cg_worker_job_limit(&s->cg, last_memory,
	    sock_bound(s, last_memory), last_pids, e) == 0) {
		s->cg_memory = last_memory;
		s->cg_pids = last_pids;
	}
	/* Let init go on (into its cgroup first); it builds the image meanwhile. */
	if ((rc = msg_send(s->ctl, MSG_SBX_GO, 0, godirs,
	    cg_worker_job_dirs(&s->cg, godirs, sizeof(godirs)), -1)) < 0) {
		err_set(e, rc, "start sandbox init: %s", strerror(-rc));
		sandbox_free(s);
		return rc;
	}
	/* Best effort: without it, a python job runs cold. */
	if (last_python && warm_skip > 0)
		warm_skip--;
	else if (last_python)
		s->warm_asked = msg_send(s->ctl, MSG_SBX_WARM, 0, NULL, 0, -1) >= 0;
	*out = s;
	return 0;
}

/*
 * Init is the spawner's child, so it is killed and waited for through its
 * pidfd: no pid can be reused under us. Killing pid 1 kills the whole pid
 * namespace, and the pidfd turns readable once init has exited, which pid 1
 * does only after every other process of the namespace is gone.
 */
static void
kill_init(struct sandbox *s)
{
	if (s->pidfd >= 0)
		(void)syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
}

static void
wait_for_init(struct sandbox *s)
{
	struct pollfd pfd = { .fd = s->pidfd, .events = POLLIN };

	if (s->pidfd < 0)
		return;
	while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
		;
	close(s->pidfd);
	s->pidfd = -1;
}

/*** Run ***/

struct capture {
	uint8_t *buf;
	size_t len;
	size_t cap;		/* output limit */
	bool truncated;
	bool eof;
	int fdno;		/* 1 stdout, 2 stderr: for the live output */
	sandbox_output_cb *output;	/* or NULL */
	void *output_arg;
};

static void
capture_read(int fd, struct capture *c)
{
	uint8_t tmp[65536];

	for (;;) {
		ssize_t n = read(fd, tmp, sizeof(tmp));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;		/* EAGAIN: nothing more for now */
		if (n == 0) {
			c->eof = true;
			return;
		}
		size_t keep = (size_t)n;
		if (c->len + keep > c->cap) {
			keep = c->cap - c->len;
			c->truncated = true;
		}
		if (keep > 0) {
			c->buf = xreallocarray(c->buf, c->len + keep, 1);
			memcpy(c->buf + c->len, tmp, keep);
			c->len += keep;
			if (c->output != NULL)
				c->output(c->output_arg, c->fdno, tmp, keep);
		}
	}
}

/*
 * Waits for init's READY, taking the stdout and stderr pipes it hands over
 * first; returns 0, or fills res and returns -1.
 */
static int
wait_ready(struct sandbox *s, struct result *res)
{
	int64_t deadline = mono_ns() + (int64_t)READY_TIMEOUT_MS * 1000000;
	struct msg m;
	int rc;

	msg_init(&m);
	while (!s->ready) {
		struct pollfd pfd = { .fd = s->ctl, .events = POLLIN };
		int64_t left = (deadline - mono_ns()) / 1000000;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
			result_set_error(res, ST_INTERNAL, "sandbox",
			    "sandbox did not become ready in %d ms", READY_TIMEOUT_MS);
			return -1;
		}
		rc = msg_recv(s->ctl, &m, MSG_MAX);
		if (rc == 1 && m.hdr.type == MSG_SBX_READY && s->out_rd >= 0 &&
		    s->err_rd >= 0) {
			s->ready = true;
		} else if (rc == 1 && m.hdr.type == MSG_SBX_PIPE && m.len == 1 &&
		    m.fd >= 0 && (m.data[0] == 1 || m.data[0] == 2)) {
			int *slot = m.data[0] == 1 ? &s->out_rd : &s->err_rd;

			if (*slot >= 0)
				close(*slot);
			*slot = m.fd;
			m.fd = -1;
		} else {
			if (rc == 1 && m.hdr.type == MSG_SBX_FAIL && m.len >= 1)
				result_set_error(res, ST_INTERNAL, "sandbox",
				    "sandbox set-up failed: %.*s", (int)(m.len - 1),
				    (const char *)m.data + 1);
			else
				result_set_error(res, ST_INTERNAL, "sandbox",
				    "sandbox init ended during set-up");
			msg_clear(&m);
			return -1;
		}
		msg_clear(&m);
	}
	return 0;
}

/* Why the worker killed the sandbox, if it did. */
enum kill_reason { KILLED_NONE, KILLED_TIMEOUT, KILLED_CPU, KILLED_OUTPUT };

/* What the worker learns while a job runs. */
struct run {
	int64_t exec_ns;	/* when init saw the exec, 0 until then */
	int64_t end_ns;		/* when the job ended or was killed */
	uint64_t pre_cpu_ns;	/* the cgroup's CPU before the job (warm.c) */
	int status;		/* wait status of the job's main process */
	bool exited;		/* MSG_SBX_EXIT seen */
	bool disk_full;		/* a tmpfs of the job was full at its end */
	enum kill_reason killed;
};

/* Calls the sandbox_set_idle() callback, once. */
static void
sandbox_idle_call(struct sandbox *s)
{
	void (*cb)(void *) = s->idle;

	s->idle = NULL;
	if (cb != NULL)
		cb(s->idle_arg);
}

/* Handles one frame from init. Returns false once init's channel is done. */
static bool
handle_ctl(struct sandbox *s, struct run *run, struct result *res)
{
	struct msg m;
	int rc;

	msg_init(&m);
	rc = msg_recv(s->ctl, &m, MSG_MAX);
	if (rc == -EAGAIN)
		return true;
	if (rc <= 0)
		return false;
	switch (m.hdr.type) {
	case MSG_SBX_EXEC:
		if (m.len == sizeof(struct msg_sbx_exec)) {
			struct msg_sbx_exec ex;
			memcpy(&ex, m.data, sizeof(ex));
			run->exec_ns = ex.started_ns;
			run->pre_cpu_ns = ex.pre_cpu_ns > 0 ? (uint64_t)ex.pre_cpu_ns : 0;
			if (s->warm_asked && !(ex.flags & SBX_EXEC_WARM)) {
				last_python = false;
				if (warm_misses < 6)
					warm_misses++;
				warm_skip = (1u << warm_misses) - 1;
			} else if (s->warm_asked) {
				warm_misses = 0;
			}
		}
		break;
	case MSG_SBX_EXIT:
		if (m.len == sizeof(struct msg_sbx_exit)) {
			struct msg_sbx_exit x;
			memcpy(&x, m.data, sizeof(x));
			run->status = x.status;
			run->exited = true;
			run->disk_full = (x.flags & SBX_EXIT_DISK_FULL) != 0;
			res->cpu_ms = x.cpu_us > 0 ? (uint64_t)x.cpu_us / 1000 : 0;
			res->max_rss_kb = x.max_rss_kb > 0 ? (uint64_t)x.max_rss_kb : 0;
		}
		break;
	case MSG_SBX_NOTIFY:
		if (m.fd >= 0 && s->notify < 0) {
			s->notify = m.fd;
			m.fd = -1;
		}
		break;
	case MSG_SBX_FAIL:
		if (m.len >= 1) {
			bool input = m.data[0] == SBX_FAIL_INPUT;
			result_set_error(res, input ? ST_REJECTED : ST_INTERNAL,
			    input ? "bad_input" : "sandbox", "%s%.*s",
			    input ? "" : "sandbox set-up failed: ",
			    (int)(m.len - 1), (const char *)m.data + 1);
		}
		break;
	default:
		log_warnx("unexpected %s frame from sandbox init", msg_type_name(m.hdr.type));
		break;
	}
	msg_clear(&m);
	return true;
}

/*
 * The status says what really happened. A job that exited 0 is ok whatever
 * it ran into. Otherwise the limit it ran into names the outcome, most
 * telling first: the kernel's OOM kill, a refused fork, a full workspace
 * (or SIGXFSZ), the output cap, CPU time, the wall clock; then its own exit
 * code or signal. error.message says which limit and what else happened.
 */
static void
fill_status(struct result *res, const struct run *run, const struct job_limits *l,
    const struct cg_usage *u)
{
	int sig = 0, code = -1;
	const char *after = "";

	if (res->error_code != NULL)
		return;		/* set-up failure already recorded */
	if (run->exited && WIFEXITED(run->status))
		code = WEXITSTATUS(run->status);
	else if (run->exited && WIFSIGNALED(run->status))
		sig = WTERMSIG(run->status);
	if (run->killed == KILLED_NONE && code == 0) {
		res->status = ST_OK;
		res->exit_code = 0;
		return;
	}
	if (run->killed != KILLED_NONE) {
		sig = SIGKILL;
		code = -1;
		after = run->killed == KILLED_TIMEOUT ? "; it was then stopped at its wall-clock limit" :
		    run->killed == KILLED_CPU ? "; it was then stopped at its CPU limit" :
		    "; it was then stopped at its output limit";
	}
	res->exit_code = code;
	res->signal = sig;
	if (u->oom_kills > 0) {
		result_set_error(res, ST_MEMORY_LIMIT, "memory_limit",
		    "the job reached its memory limit of %" PRIu64 " bytes and the kernel "
		    "killed %" PRIu64 " of its processes%s", l->memory_bytes, u->oom_kills, after);
	} else if (u->pids_refused > 0) {
		result_set_error(res, ST_PIDS_LIMIT, "pids_limit",
		    "the job reached its limit of %" PRIu64 " processes; %" PRIu64
		    " fork%s refused%s", l->pids, u->pids_refused,
		    u->pids_refused == 1 ? " was" : "s were", after);
	} else if (run->disk_full || sig == SIGXFSZ) {
		result_set_error(res, ST_DISK_LIMIT, "disk_limit",
		    "the job filled its %" PRIu64 "-byte %s%s", l->disk_bytes,
		    sig == SIGXFSZ ? "file size limit" : "workspace, /tmp or /dev/shm", after);
	} else if (run->killed == KILLED_OUTPUT) {
		result_set_error(res, ST_OUTPUT_LIMIT, "output_limit",
		    "the job wrote more than its output limit of %" PRIu64 " bytes and was "
		    "stopped", l->output_bytes);
	} else if (run->killed == KILLED_CPU || sig == SIGXCPU ||
	    (sig == SIGKILL && res->cpu_ms >= l->cpu_ms)) {
		result_set_error(res, ST_CPU_LIMIT, "cpu_limit",
		    "the job used its CPU limit of %" PRIu64 " ms", l->cpu_ms);
	} else if (run->killed == KILLED_TIMEOUT) {
		result_set_error(res, ST_TIMEOUT, "timeout",
		    "the job ran past its wall-clock limit of %" PRIu64 " ms", l->wall_ms);
	} else if (sig != 0) {
		res->status = ST_SIGNAL;
	} else if (code > 0) {
		res->status = ST_EXIT;
	} else {
		result_set_error(res, ST_INTERNAL, "sandbox", "unknown wait status %d",
		    run->status);
	}
}

/*
 * The sockets the sandbox's network namespace holds (sockcap.c). Its
 * sockstat files are opened the first time a job asks for a counted
 * socket, which most jobs never do (two opens and two closes of /proc
 * files per sandbox otherwise): through init's pid, and kept only if init
 * is still alive after the open, so they are its namespace's and not
 * those of a process that took the pid since.
 */
static int64_t
sockets_held(struct sandbox *s)
{
	struct pollfd p = { .fd = s->pidfd, .events = POLLIN };
	struct err e = { 0 };

	if (s->sockcap.fd[0] < 0) {
		if (sockcap_open(&s->sockcap, s->init_pid, &e) < 0)
			return e.code;
		if (s->pidfd < 0 || poll(&p, 1, 0) != 0) {
			sockcap_close(&s->sockcap);
			return -ESRCH;
		}
	}
	return sockcap_count(&s->sockcap);
}

/*
 * Answers the job filter's pending notifications: each refused call gets
 * EPERM and is counted by name; an inet socket() goes on while the job holds
 * fewer sockets than its cap, and past it fails with EMFILE, counted as a
 * refused "socket" (sockcap.c). Bounded per call, so a job flooding refused
 * calls cannot keep the worker from its output and clocks; the flood only
 * slows the job, whose calls wait for their answers. Returns false once the
 * listener is done (every process under the filter has exited).
 */
static bool
notify_answer(struct sandbox *s, struct result *res)
{
	for (int i = 0; i < NOTIFY_BATCH; i++) {
		struct pollfd pfd = { .fd = s->notify, .events = POLLIN };
		struct seccomp_notif req;
		struct seccomp_notif_resp resp;
		char *name;

		if (poll(&pfd, 1, 0) <= 0)
			return true;
		if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL))
			return false;
		memset(&req, 0, sizeof(req));
		if (ioctl(s->notify, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0) {
			if (errno == EINTR || errno == ENOENT)
				continue;	/* the caller went away meanwhile */
			return false;
		}
		resp = (struct seccomp_notif_resp){ .id = req.id, .error = -EPERM };
		if (seccomp_worker_job_counted(s->net, &req.data)) {
			int64_t held = sockets_held(s);

			/* Under the cap the socket is made; at it, EMFILE (recorded). */
			if (held >= 0 && (uint64_t)held < s->sockets_max)
				resp = (struct seccomp_notif_resp){ .id = req.id,
				    .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE };
			else
				resp.error = -EMFILE;
			/* Once per sandbox: a job may call socket() in a loop. */
			if (held < 0 && !s->sockcap_warned) {
				log_warnx("socket count: %s", strerror((int)-held));
				s->sockcap_warned = true;
			}
		}
		/* ENOENT: the call was interrupted or its process died: fine. */
		(void)ioctl(s->notify, SECCOMP_IOCTL_NOTIF_SEND, &resp);
		if (resp.flags & SECCOMP_USER_NOTIF_FLAG_CONTINUE)
			continue;
		name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, req.data.nr);
		if (name != NULL) {
			result_add_refusal(res, name, 1);
			free(name);
		} else {
			char buf[32];

			snprintf(buf, sizeof(buf), "syscall_%d", req.data.nr);
			result_add_refusal(res, buf, 1);
		}
	}
	return true;
}

/* Kills the sandbox (its init, so the whole pid namespace) for reason r. */
static void
kill_sandbox(struct sandbox *s, struct run *run, enum kill_reason r, int64_t now)
{
	if (run->killed != KILLED_NONE || run->exited)
		return;
	kill_init(s);
	run->killed = r;
	run->end_ns = now;
}

void
sandbox_set_output(struct sandbox *s, sandbox_output_cb *cb, void *arg)
{
	s->output = cb;
	s->output_arg = arg;
}

void
sandbox_set_idle(struct sandbox *s, void (*cb)(void *), void *arg,
    unsigned after_ms)
{
	s->idle = cb;
	s->idle_arg = arg;
	s->idle_after_ms = after_ms;
}

int
sandbox_net_listen(struct sandbox *s, uint16_t port, int *fd, struct err *e)
{
	if (s->pidfd < 0)
		return err_set(e, -ESRCH, "the sandbox's init is gone");
	return spawn_worker_listen(s->pidfd, port, fd, e);
}

int
sandbox_run(struct sandbox *s, const struct job *j, const void *spec,
    size_t speclen, const struct sandbox_snapshot *snap, struct result *res)
{
	const struct job_limits *l = &j->limits;
	struct capture out = { .cap = l->output_bytes, .fdno = 1, .output = s->output,
	    .output_arg = s->output_arg };
	struct capture err = { .cap = l->output_bytes, .fdno = 2, .output = s->output,
	    .output_arg = s->output_arg };
	struct run run = { 0 };
	struct cg_usage u = { 0 };
	struct err e = { 0 };
	int64_t t0, deadline, drain_until = 0, next_cpu_check;
	bool ctl_open = true, exec_seen = false;
	bool cpu_by_cgroup = s->cg.sys != NULL && cg_has(s->cg.sys, CG_CPUACCT);
	int rc = 0;

	t0 = mono_ns();
	res->started_at = now_ms();
	s->net = j->net_mode;
	if (wait_ready(s, res) < 0)
		goto out_finish;
	if ((s->cg_memory != l->memory_bytes || s->cg_pids != l->pids) &&
	    cg_worker_job_limit(&s->cg, l->memory_bytes, sock_bound(s, l->memory_bytes),
	    l->pids, &e) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox", "cgroup: %s", e.msg);
		goto out_finish;
	}
	last_memory = l->memory_bytes;
	last_pids = l->pids;
	last_python = j->op == OP_PYTHON;
	/* The patch rides with the base's key and the rules' fingerprint,
	 * the image with the spec. */
	if (snap != NULL) {
		char *base = NULL;
		int n = xasprintf(&base, "%s\n%s", snap->base_key, snap->rules_fp);

		rc = msg_send(s->ctl, MSG_SBX_BASE, 0, base, (size_t)n, snap->patch_fd);
		free(base);
		if (rc < 0) {
			result_set_error(res, ST_INTERNAL, "sandbox",
			    "cannot hand the job to its sandbox: %s", strerror(-rc));
			goto out_finish;
		}
	}
	if ((rc = msg_send(s->ctl, MSG_SBX_SPEC, 0, spec, speclen,
	    snap != NULL ? snap->img_fd : -1)) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "cannot hand the job to its sandbox: %s", strerror(-rc));
		goto out_finish;
	}
	fd_set_nonblock(s->out_rd, true);
	fd_set_nonblock(s->err_rd, true);
	fd_set_nonblock(s->ctl, true);
	/*
	 * The wall clock runs from exec; until init reports the exec, set-up
	 * gets the ready timeout on top.
	 */
	deadline = t0 + ((int64_t)l->wall_ms + READY_TIMEOUT_MS) * 1000000;
	next_cpu_check = t0 + (int64_t)CPU_CHECK_MS * 1000000;

	/*
	 * Done once the job's exit is known and its output is closed; init's own
	 * exit (which tears the namespaces down) is reaped later, off the path
	 * from the job's end to its result (sandbox_free()).
	 */
	while (!(out.eof && err.eof && (run.exited || !ctl_open))) {
		struct pollfd pfd[4];
		nfds_t n = 0;
		int64_t now = mono_ns(), wake;

		if (run.killed == KILLED_NONE && !run.exited) {
			if (now >= deadline)
				kill_sandbox(s, &run, KILLED_TIMEOUT, now);
			else if (out.truncated || err.truncated)
				kill_sandbox(s, &run, KILLED_OUTPUT, now);
			else if (cpu_by_cgroup && now >= next_cpu_check &&
			    (exec_seen || !s->warm_asked)) {
				/*
				 * All processes together, reaped or not; a warm
				 * python3's start-up (known from MSG_SBX_EXEC) not.
				 */
				cg_worker_job_usage(&s->cg, &u);
				u.cpu_ns -= u.cpu_ns > run.pre_cpu_ns ? run.pre_cpu_ns : u.cpu_ns;
				if (u.has_cpu && u.cpu_ns >= l->cpu_ms * 1000000)
					kill_sandbox(s, &run, KILLED_CPU, now);
				next_cpu_check = now + (int64_t)CPU_CHECK_MS * 1000000;
			}
			if (run.killed != KILLED_NONE)
				drain_until = now + (int64_t)DRAIN_AFTER_KILL_MS * 1000000;
		} else if (run.killed != KILLED_NONE && now >= drain_until) {
			log_warnx("sandbox output still open %d ms after the kill",
			    DRAIN_AFTER_KILL_MS);
			break;
		}
		wake = run.killed != KILLED_NONE ? drain_until : deadline;
		if (run.killed == KILLED_NONE && cpu_by_cgroup && next_cpu_check < wake)
			wake = next_cpu_check;
		/* The idle work, once the job has run that long (after its
		 * exec report, so after the warm accounting above: a sandbox
		 * it prepares asks for a warm python3 only if this job could
		 * use one). */
		if (s->idle != NULL && exec_seen && !run.exited &&
		    run.killed == KILLED_NONE) {
			int64_t at = run.exec_ns + (int64_t)s->idle_after_ms * 1000000;

			if (now >= at) {
				sandbox_idle_call(s);
				continue;
			}
			if (at < wake)
				wake = at;
		}
		if (!out.eof)
			pfd[n++] = (struct pollfd){ .fd = s->out_rd, .events = POLLIN };
		if (!err.eof)
			pfd[n++] = (struct pollfd){ .fd = s->err_rd, .events = POLLIN };
		if (ctl_open)
			pfd[n++] = (struct pollfd){ .fd = s->ctl, .events = POLLIN };
		if (s->notify >= 0)
			pfd[n++] = (struct pollfd){ .fd = s->notify, .events = POLLIN };
		if (poll(pfd, n, run.exited ? -1 : (int)((wake - now + 999999) / 1000000)) < 0 &&
		    errno != EINTR) {
			log_warn("poll");
			break;
		}
		for (nfds_t i = 0; i < n; i++) {
			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (pfd[i].fd == s->notify) {
				if (!notify_answer(s, res)) {
					close(s->notify);
					s->notify = -1;
				}
			} else if (pfd[i].fd == s->out_rd)
				capture_read(s->out_rd, &out);
			else if (pfd[i].fd == s->err_rd)
				capture_read(s->err_rd, &err);
			else if (!handle_ctl(s, &run, res))
				ctl_open = false;
			if (run.exec_ns > 0 && !exec_seen) {
				exec_seen = true;
				deadline = run.exec_ns + (int64_t)l->wall_ms * 1000000;
			}
			if (run.exited && run.end_ns == 0)
				run.end_ns = mono_ns();
		}
	}

out_finish:
	s->idle = NULL;
	if (!run.exited) {
		/* Killed or failed: what it used is known once every process is gone. */
		kill_init(s);
		wait_for_init(s);
	}
	/*
	 * The cgroup counts every process, including any not reaped yet, and
	 * knows which limits were hit. A job that exited 0 is ok whatever it
	 * hit, and init's count of what it reaped will do: spare the reads.
	 */
	if (!(run.exited && run.killed == KILLED_NONE && WIFEXITED(run.status) &&
	    WEXITSTATUS(run.status) == 0)) {
		cg_worker_job_usage(&s->cg, &u);
		u.cpu_ns -= u.cpu_ns > run.pre_cpu_ns ? run.pre_cpu_ns : u.cpu_ns;
		if (u.has_cpu && u.cpu_ns / 1000000 > res->cpu_ms)
			res->cpu_ms = u.cpu_ns / 1000000;
	}
	if (run.end_ns == 0)
		run.end_ns = mono_ns();
	res->wall_ms = run.exec_ns > 0 ? (uint64_t)(run.end_ns - run.exec_ns) / 1000000 : 0;
	res->finished_at = now_ms();
	res->out = out.buf;
	res->out_len = out.len;
	res->out_truncated = out.truncated;
	res->err = err.buf;
	res->err_len = err.len;
	res->err_truncated = err.truncated;
	if (!run.exited && run.killed == KILLED_NONE && res->error_code == NULL)
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "sandbox init ended before the job did");
	fill_status(res, &run, l, &u);
	return 0;
}

/*** Capture ***/

/* Takes the changes init reports into the result. */
static void
changes_take(struct result *res, const uint8_t *p, size_t n)
{
	uint64_t hdr[4];
	size_t listed = 0;

	if (n < sizeof(hdr))
		return;
	memcpy(hdr, p, sizeof(hdr));
	res->added = hdr[0];
	res->modified = hdr[1];
	res->removed = hdr[2];
	for (size_t off = sizeof(hdr); off + 2 <= n;) {
		const char *path = (const char *)p + off + 1;
		size_t l = strnlen(path, n - off - 1);
		char op = (char)p[off];

		if (off + 1 + l >= n || path[0] != '/')
			break;		/* malformed tail: keep what came before */
		off += l + 2;
		if (op == 'R') {
			if (res->nrefused_paths < RESULT_REFUSED_PATHS_MAX) {
				res->refused_paths = xreallocarray(res->refused_paths,
				    res->nrefused_paths + 1, sizeof(char *));
				res->refused_paths[res->nrefused_paths++] = xstrdup(path);
			}
		} else if (res->nchanged < RESULT_CHANGED_MAX) {
			res->changed = xreallocarray(res->changed, res->nchanged + 1,
			    sizeof(char *));
			res->changed[res->nchanged++] = xstrdup(path);
			listed++;
		}
	}
	res->changed_truncated = listed < hdr[0] + hdr[1] + hdr[2];
}

/* Whether fd is a memfd sealed against every change, of size len. */
static bool
snapshot_fd_ok(int fd, uint64_t len)
{
	int want = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;

	return seals >= 0 && (seals & want) == want && fstat(fd, &st) == 0 &&
	    S_ISREG(st.st_mode) && (uint64_t)st.st_size == len && len > 0;
}

/*
 * Waits (until deadline, mono ns) for what a capture or a seed hands back:
 * the changes, then the sealed patch (0, *snapfd and *len set), or init's
 * failure (-1, res's error set: what names each kind of failure, and the
 * prefix of its message, are the caller's, in how).
 */
struct handback {
	const char *prefix;		/* starts each failure's message */
	enum res_status input_st;	/* SBX_FAIL_INPUT's status and code */
	const char *input_code;
	enum res_status disk_st;	/* SBX_FAIL_DISK's */
	const char *disk_code;
	enum res_status timeout_st;	/* the deadline passed: status, code, message */
	const char *timeout_code;
	const char *timeout_msg;
};

static int
handback_wait(struct sandbox *s, int64_t deadline, const struct handback *how,
    int *snapfd, size_t *len, struct result *res)
{
	struct msg m;
	int rc;

	msg_init(&m);
	for (;;) {
		struct pollfd pfd = { .fd = s->ctl, .events = POLLIN };
		int64_t left = (deadline - mono_ns()) / 1000000;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
			result_set_error(res, how->timeout_st, how->timeout_code, "%s",
			    how->timeout_msg);
			break;
		}
		rc = msg_recv(s->ctl, &m, MSG_BLOB_MAX);
		if (rc == 1 && m.hdr.type == MSG_SBX_CHANGES) {
			changes_take(res, m.data, m.len);
		} else if (rc == 1 && m.hdr.type == MSG_SBX_SNAPSHOT &&
		    m.len == sizeof(uint64_t) && m.fd >= 0) {
			uint64_t n;

			memcpy(&n, m.data, sizeof(n));
			if (!snapshot_fd_ok(m.fd, n) || n > MSG_BLOB_MAX) {
				result_set_error(res, ST_INTERNAL, "sandbox",
				    "the sandbox handed over a snapshot that is not sealed");
				break;
			}
			*snapfd = m.fd;
			*len = (size_t)n;
			m.fd = -1;
			msg_clear(&m);
			return 0;
		} else if (rc == 1 && m.hdr.type == MSG_SBX_FAIL && m.len >= 1) {
			bool input = m.data[0] == SBX_FAIL_INPUT;
			bool disk = m.data[0] == SBX_FAIL_DISK;

			result_set_error(res, disk ? how->disk_st : input ? how->input_st :
			    ST_INTERNAL, disk ? how->disk_code : input ? how->input_code :
			    "sandbox", "%s%.*s", how->prefix, (int)(m.len - 1),
			    (const char *)m.data + 1);
			break;
		} else {
			result_set_error(res, ST_INTERNAL, "sandbox", "%ssandbox init ended "
			    "before it was done", how->prefix);
			break;
		}
		msg_clear(&m);
	}
	msg_clear(&m);
	return -1;
}

int
sandbox_capture(struct sandbox *s, const struct job *j, const char *rec,
    size_t snaplen, int *snapfd, size_t *len, struct result *res)
{
	static const struct handback how = {
		/* exit_code and the output stay: the job did run. */
		.prefix = "the job ran, but its workspace was not committed: ",
		.input_st = ST_REJECTED, .input_code = "commit_refused",
		.disk_st = ST_DISK_LIMIT, .disk_code = "disk_limit",
		.timeout_st = ST_INTERNAL, .timeout_code = "sandbox",
		.timeout_msg = "the workspace was not captured within 120000 ms",
	};
	int64_t deadline = mono_ns() + (int64_t)CAPTURE_TIMEOUT_MS * 1000000;
	struct err e = { 0 };
	int rc;

	_Static_assert(CAPTURE_TIMEOUT_MS == 120000, "the message above says so");
	*snapfd = -1;
	*len = 0;
	/*
	 * The job is over and its processes are gone; the capture holds the
	 * old and the new snapshot in memory, charged to the sandbox's
	 * cgroup: give it room beyond the job's own limit.
	 */
	if (s->cg_memory > 0 && cg_worker_job_limit(&s->cg, s->cg_memory +
	    4 * (uint64_t)snaplen + 2 * j->limits.disk_bytes + ((uint64_t)64 << 20),
	    sock_bound(s, s->cg_memory), s->cg_pids, &e) < 0)
		log_warnx("capture: cannot raise the memory limit: %s", e.msg);
	fd_set_nonblock(s->ctl, false);
	if ((rc = msg_send(s->ctl, MSG_SBX_COMMIT, 0, rec, strlen(rec), -1)) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "cannot ask the sandbox for its workspace: %s", strerror(-rc));
		return -1;
	}
	return handback_wait(s, deadline, &how, snapfd, len, res);
}

int
sandbox_seed(struct sandbox *s, const struct job *j, const void *spec,
    size_t speclen, int img_fd, int *patchfd, size_t *len, struct result *res)
{
	const struct job_limits *l = &j->limits;
	char timeout[160];
	struct handback how = {
		.prefix = "from_image_dir: ",
		.input_st = ST_REJECTED, .input_code = "image",
		.disk_st = ST_REJECTED, .disk_code = "too_large",
		.timeout_st = ST_REJECTED, .timeout_code = "timeout",
		.timeout_msg = timeout,
	};
	struct err e = { 0 };
	int64_t deadline;
	int rc;

	*patchfd = -1;
	*len = 0;
	snprintf(timeout, sizeof(timeout), "from_image_dir: the folder was not "
	    "captured within the wall_ms limit of %llu ms",
	    (unsigned long long)l->wall_ms);
	if (wait_ready(s, res) < 0)
		return -1;
	/* The capture holds the folder's snapshot in memory: its size and more. */
	if (cg_worker_job_limit(&s->cg, l->memory_bytes + 2 * l->disk_bytes +
	    ((uint64_t)64 << 20), sock_bound(s, l->memory_bytes), l->pids, &e) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox", "cgroup: %s", e.msg);
		return -1;
	}
	if ((rc = msg_send(s->ctl, MSG_SBX_SPEC, 0, spec, speclen, img_fd)) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "cannot hand the seed to its sandbox: %s", strerror(-rc));
		return -1;
	}
	deadline = mono_ns() + (int64_t)l->wall_ms * 1000000;
	return handback_wait(s, deadline, &how, patchfd, len, res);
}

void
sandbox_commit_done(struct sandbox *s, const char *base_key, bool keep)
{
	char *k = NULL;
	int n;

	n = xasprintf(&k, "%s%s", base_key != NULL ? base_key : "",
	    base_key != NULL && keep ? "\nkeep" : "");
	if (msg_send(s->ctl, MSG_SBX_BASE_NEXT, 0, k, (size_t)n, -1) == 0)
		s->updating = base_key != NULL;
	free(k);
}

/*
 * Waits up to timeout_ms (-1: no limit) for the end of the kept base's
 * update: init closes its channel once the base is done, before its exit
 * (init.c init_commit()), or it has exited. Nothing else comes on the
 * channel after the snapshot, so anything readable there is its end.
 */
static void
update_wait(struct sandbox *s, int timeout_ms)
{
	struct pollfd pfd[2];
	nfds_t n = 0;

	if (!s->updating || s->pidfd < 0) {
		s->updating = false;
		return;
	}
	pfd[n++] = (struct pollfd){ .fd = s->pidfd, .events = POLLIN };
	if (s->ctl >= 0)
		pfd[n++] = (struct pollfd){ .fd = s->ctl, .events = POLLIN };
	while (poll(pfd, n, timeout_ms) < 0 && errno == EINTR)
		;
	for (nfds_t i = 0; i < n; i++)
		if (pfd[i].revents != 0)
			s->updating = false;
}

bool
sandbox_updating(struct sandbox *s)
{
	if (s == NULL)
		return false;
	update_wait(s, 0);
	return s->updating;
}

bool
sandbox_update_wait(struct sandbox *s)
{
	if (s == NULL)
		return true;
	update_wait(s, BASE_UPDATE_TIMEOUT_MS);
	return !s->updating;
}

void
sandbox_update_abandon(struct sandbox *s)
{
	if (s != NULL)
		s->updating = false;
}

/*** Free ***/

void
sandbox_free(struct sandbox *s)
{
	if (s == NULL)
		return;
	/* Killed half way, the base would only be rebuilt: give it time. */
	if (s->updating && s->pidfd >= 0) {
		struct pollfd pfd = { .fd = s->pidfd, .events = POLLIN };
		int64_t end = mono_ns() + (int64_t)BASE_UPDATE_TIMEOUT_MS * 1000000;
		int left;

		while ((left = (int)((end - mono_ns()) / 1000000)) > 0 &&
		    poll(&pfd, 1, left) < 0 && errno == EINTR)
			;
	}
	kill_init(s);
	wait_for_init(s);
	if (s->ctl >= 0)
		close(s->ctl);
	if (s->out_rd >= 0)
		close(s->out_rd);
	if (s->err_rd >= 0)
		close(s->err_rd);
	if (s->notify >= 0)
		close(s->notify);
	sockcap_close(&s->sockcap);
	/* Init is reaped, so its pid namespace is empty: nothing holds the cgroup. */
	cg_worker_job_destroy(&s->cg);
	free(s);
}
