/*
 * init.c - the sandbox's init: pid 1 of the sandbox's namespaces.
 *
 * The spawner (spawn.c) clones init into fresh namespaces and calls
 * init_main() there, the entry the worker handed it (spawn_init_cb). Init
 * waits for the worker's go (uid map written, cgroup made; before it, for
 * a sandbox on an OCI image, MSG_SBX_IMAGE: its layers and user), joins
 * its cgroup, takes the sandbox user's identity, builds the root (mount.c:
 * the host's read-only image, or the image's overlay), hands the worker the job's stdout and stderr pipes and reports
 * MSG_SBX_READY, then, if the worker asks (MSG_SBX_WARM), starts a warm
 * python3 for a python job (warm.c).
 * When the job arrives it mounts the job's tmpfs or
 * materialises a persistent sandbox's workspace (persist.c), seeds the
 * job's files, installs the job's filter (seccomp.c), spawns the job's
 * process (exec.c), reports MSG_SBX_EXEC, reaps every process of the
 * namespace, and on the main process's exit reports MSG_SBX_EXIT and exits
 * itself, which makes the kernel kill whatever the job left behind: nothing
 * outlives a job. A persistent sandbox's init waits for the worker's
 * MSG_SBX_COMMIT first and captures the workspace.
 *
 * The worker's side of the same channel is in sandbox.c. A failure goes to
 * the worker as MSG_SBX_FAIL, then init exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "internal.h"

/* The image this sandbox's root is (MSG_SBX_IMAGE), if not the host's. */
static struct {
	bool on;			/* an image: its layers below */
	uint32_t uid, gid;		/* the job's ids inside */
	size_t nlayers;
	char (*layers)[65];		/* hex digits, top first */
} image;

/* Where the job's sandbox keeps its files: /workspace, or its workdir. */
static const char *ws = "/workspace";

/* Takes MSG_SBX_IMAGE's payload into image. Returns false if malformed. */
static bool
init_image_take(const struct msg *m)
{
	struct msg_sbx_image hd;

	if (m->len < sizeof(hd))
		return false;
	memcpy(&hd, m->data, sizeof(hd));
	if (hd.nlayers == 0 || hd.nlayers > SANDBOX_IMAGE_LAYERS_MAX ||
	    m->len != sizeof(hd) + 64 * (size_t)hd.nlayers)
		return false;
	image.layers = xcalloc(hd.nlayers, sizeof(*image.layers));
	for (size_t i = 0; i < hd.nlayers; i++) {
		memcpy(image.layers[i], m->data + sizeof(hd) + 64 * i, 64);
		for (int k = 0; k < 64; k++) {
			char c = image.layers[i][k];

			if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
				return false;
		}
	}
	image.nlayers = hd.nlayers;
	image.uid = hd.uid;
	image.gid = hd.gid;
	image.on = true;
	return true;
}

static void __attribute__((noreturn))
init_fail(int ctl, uint8_t kind, const struct err *e)
{
	char buf[1 + sizeof(e->msg)];
	size_t n = strlen(e->msg);

	buf[0] = (char)kind;
	memcpy(buf + 1, e->msg, n);
	(void)msg_send(ctl, MSG_SBX_FAIL, 0, buf, n + 1, -1);
	_exit(1);
}

static int
init_stdin(const struct job *j, struct err *e)
{
	int fd, rc;

	if (j->stdin_data == NULL) {
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return err_set(e, -errno, "open /dev/null: %s", strerror(errno));
		return fd;
	}
	fd = memfd_create("stdin", MFD_CLOEXEC);
	if (fd < 0)
		return err_set(e, -errno, "memfd: %s", strerror(errno));
	if ((rc = write_all(fd, j->stdin_data, j->stdin_len)) < 0 ||
	    lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return err_set(e, rc < 0 ? rc : -errno, "stdin: %s",
		    strerror(rc < 0 ? -rc : errno));
	}
	return fd;
}

/* Whether any of the job's tmpfs has no block or no inode left. */
static bool
init_disk_full(void)
{
	const char *const dirs[] = { ws, "/tmp", "/dev/shm", "/" };
	/* "/": an image's writable root, on its own tmpfs. */
	size_t n = sizeof(dirs) / sizeof(dirs[0]) - !image.on;

	for (size_t i = 0; i < n; i++) {
		struct statfs sf;

		if (statfs(dirs[i], &sf) == 0 && (sf.f_bavail == 0 || sf.f_ffree == 0))
			return true;
	}
	return false;
}

/* Whose fault a failed materialise or capture is: the job's input, or ours. */
static uint8_t
fail_kind(int rc)
{
	switch (rc) {
	case -E2BIG: case -EDQUOT: case -EFBIG: case -EPERM: case -EILSEQ:
	case -EXDEV: case -EAGAIN: case -EEXIST: case -ENOSPC:
		return SBX_FAIL_INPUT;
	default:
		return SBX_FAIL_INTERNAL;
	}
}

/* Whose fault a failed seed is: the image's folder, its size, or ours. */
static uint8_t
seed_fail_kind(int rc)
{
	switch (rc) {
	case -E2BIG: case -EFBIG: case -ENOSPC: case -EDQUOT: case -ENAMETOOLONG:
		return SBX_FAIL_DISK;
	case -ENOENT: case -ENOTDIR: case -ELOOP: case -EACCES: case -EPERM:
	case -EILSEQ: case -EXDEV:
		return SBX_FAIL_INPUT;
	default:
		return SBX_FAIL_INTERNAL;
	}
}

/*
 * A sandbox.create with from_image_dir: no process runs; the image's
 * folder, as the overlay root shows it, is captured into the empty
 * snapshot the worker handed over (persist.c), and init exits.
 */
static void __attribute__((noreturn))
init_seed(int ctl, int snapfd, const struct job *j)
{
	struct err e = { 0 };
	int rc;

	if (!image.on || snapfd < 0) {
		err_set(&e, -EINVAL, "a seed needs an image's root and a snapshot");
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	}
	if ((rc = persist_seed(ctl, snapfd, j, &e)) < 0)
		init_fail(ctl, seed_fail_kind(rc), &e);
	_exit(0);
}

/*
 * On a sandbox whose files are at its workdir, the job's paths that name
 * /workspace (its cwd: a relative one was decoded as /workspace/...) name
 * the workdir: /workspace is the alias of the sandbox's files
 * (docs/paths.md), as in a job's files, path rules and fs.* paths.
 */
static void
init_workdir_alias(struct job *j)
{
	char *cwd = NULL;

	if (strcmp(ws, "/workspace") == 0 || j->cwd == NULL ||
	    strncmp(j->cwd, "/workspace", 10) != 0 ||
	    (j->cwd[10] != '\0' && j->cwd[10] != '/'))
		return;
	xasprintf(&cwd, "%s%s", ws, j->cwd + 10);
	free(j->cwd);
	j->cwd = cwd;
}

/*
 * After the job: waits for the worker's go (MSG_SBX_COMMIT, with the tool
 * call record) and captures the workspace. EOF means the worker decided not
 * to commit.
 */
static void __attribute__((noreturn))
init_commit(int ctl, struct persist *ps, int snapfd, const struct job *j)
{
	struct err e = { 0 };
	struct msg m;
	int rc;

	msg_init(&m);
	rc = msg_recv(ctl, &m, MSG_MAX);
	if (rc <= 0 || m.hdr.type != MSG_SBX_COMMIT)
		_exit(0);
	/* -ENOSPC here is the capture's growth bound (or a snapshot at the
	 * codec's size cap): the job's disk, not its input. */
	if ((rc = persist_capture(ctl, ps, snapfd, j, m.data, m.len, &e)) < 0)
		init_fail(ctl, rc == -ENOSPC ? SBX_FAIL_DISK : fail_kind(rc), &e);
	/*
	 * The kept base is up to the commit (or left unsealed): the channel's
	 * end tells the worker so before the namespaces' teardown in our exit
	 * (sandbox_updating()).
	 */
	close(ctl);
	_exit(0);
}

/* Runs one job in this sandbox and exits with it. */
static void __attribute__((noreturn))
init_run_job(const struct sandbox_conf *conf, int ctl, int out_wr, int err_wr,
    struct msg *m, struct persist *ps)
{
	struct exec_spec spec = { .stdout_fd = out_wr, .stderr_fd = err_wr,
	    .cg_memory = conf->cg.version != CG_NONE };
	struct msg_sbx_exec ex = { 0 };
	struct err e = { 0 };
	struct job *j = NULL;
	int64_t pre_cpu_ns = 0;
	pid_t job_pid;
	int st, nfd, snapfd, rc;
	bool capture, warm;

	/* A persistent sandbox's snapshot rides with the spec; kept for the capture. */
	snapfd = m->fd;
	m->fd = -1;
	if (payload_job_decode(m->data, m->len, &j, NULL, &e) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if (j->op == OP_SANDBOX_CREATE)
		init_seed(ctl, snapfd, j);
	/* The worker checked the workdir against the sandbox's row. */
	if (snapfd >= 0 && j->sandbox_workdir != NULL)
		ws = j->sandbox_workdir;
	ps->ws = ws;
	ps->image = image.on;
	init_workdir_alias(j);
	spec.home = ws;
	capture = snapfd >= 0 && j->persist;
	if (image.on && mount_image_upper_size(&j->limits, &e) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if (snapfd >= 0) {
		if ((rc = persist_materialise(ps, snapfd, j, &e)) < 0)
			init_fail(ctl, fail_kind(rc), &e);
	} else if (mount_job_tmpfs(&j->limits, 0, 0, ws, &e) < 0) {
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	}
	if (exec_init_seed_files(j, ws, &e) < 0 ||
	    exec_init_prepare_cwd(j, image.on, ws, &e) < 0)
		init_fail(ctl, SBX_FAIL_INPUT, &e);
	/*
	 * A warm python3 (warm.c) takes the job if it can run it exactly as
	 * a cold start would; otherwise it goes, and the CPU it used (in the
	 * cgroup, and reaped: in our rusage) is not the job's.
	 */
	warm = warm_init_fits(j, ws, spec.cg_memory);
	if (!warm) {
		struct rusage ru;

		warm_init_discard();
		if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
			pre_cpu_ns = ((int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
			    1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
		if ((spec.stdin_fd = init_stdin(j, &e)) < 0)
			init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	}
	spec.job = j;
	/*
	 * The job's filter, from here on for init and everything it starts;
	 * the worker answers what it refuses. Init needs nothing it refuses.
	 * A warm process installed the same filter itself (exec.c): the
	 * worker gets its listener, and init's own is not needed.
	 */
	if ((nfd = seccomp_init_job_install(j->net_mode, &e)) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if (warm) {
		close(nfd);
		nfd = warm_init_listener();
	}
	if (msg_send(ctl, MSG_SBX_NOTIFY, 0, NULL, 0, nfd) < 0)
		_exit(1);
	close(nfd);

	if ((job_pid = warm ? warm_init_hand(j, ws, spec.cg_memory, &pre_cpu_ns, &e) :
	    exec_init_spawn(&spec, &e)) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	ex.started_ns = mono_ns();
	ex.pre_cpu_ns = pre_cpu_ns;
	ex.flags = warm ? SBX_EXEC_WARM : 0;
	/* Only the job holds the pipes now: EOF comes when it and its children end. */
	if (!warm)
		close(spec.stdin_fd);
	close(out_wr);
	close(err_wr);
	(void)msg_send(ctl, MSG_SBX_EXEC, 0, &ex, sizeof(ex), -1);
	/* The capture's reads of the snapshot, while the job runs. */
	if (capture)
		persist_capture_ahead(ps, snapfd, j);

	/* As pid 1, reap every process of the namespace, orphans included. */
	for (;;) {
		pid_t p = waitpid(-1, &st, 0);

		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			_exit(1);
		if (p == job_pid) {
			struct msg_sbx_exit x = { .status = st };
			struct rusage ru;

			/*
			 * A snapshot is captured from a still workspace: end
			 * whatever the job left running, and reap it.
			 */
			if (capture) {
				(void)kill(-1, SIGKILL);
				while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
					;
			}

			if (init_disk_full())
				x.flags |= SBX_EXIT_DISK_FULL;
			/* Every process reaped so far: the job and its orphans. */
			if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
				x.cpu_us = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
				    1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
				x.cpu_us -= x.cpu_us > pre_cpu_ns / 1000 ? pre_cpu_ns / 1000 :
				    x.cpu_us;
				x.max_rss_kb = ru.ru_maxrss;
			}
			(void)msg_send(ctl, MSG_SBX_EXIT, 0, &x, sizeof(x), -1);
			/* Our exit kills the rest of the pid namespace. */
			if (!capture)
				_exit(0);
			init_commit(ctl, ps, snapfd, j);
		}
	}
}

/* Makes a pipe for the job's stdout or stderr and hands its read end over. */
static int
init_pipe(int ctl, uint8_t which, struct err *e)
{
	int p[2], rc;

	if (pipe2(p, O_CLOEXEC) < 0)
		return err_set(e, -errno, "pipe: %s", strerror(errno));
	rc = msg_send(ctl, MSG_SBX_PIPE, 0, &which, 1, p[0]);
	close(p[0]);
	if (rc < 0) {
		close(p[1]);
		return err_set(e, rc, "hand over a pipe: %s", strerror(-rc));
	}
	return p[1];
}

void
init_main(const struct sandbox_conf *conf, int ctl)
{
	struct persist ps = { .ws = "/workspace", .basefd = -1, .patchfd = -1,
	    .treefd = -1, .tmplfd = -1, .upperfd = -1 };
	struct err e = { 0 };
	struct msg m;
	int rc, out_wr, err_wr;

	/*
	 * Die with the spawner (which dies with the worker). Until the worker
	 * says go (uid map written, cgroup joined), run nothing: EOF means the
	 * worker gave up on us.
	 */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	spawn_set_title("sandq-init");
	/* The spawner ignores SIGCHLD; init must reap, so it may not. */
	signal(SIGCHLD, SIG_DFL);
	msg_init(&m);
	rc = msg_recv(ctl, &m, MSG_MAX);
	/* An image's root: its layers and user come first (sandbox.c). */
	if (rc == 1 && m.hdr.type == MSG_SBX_IMAGE) {
		if (!init_image_take(&m))
			_exit(1);
		msg_clear(&m);
		rc = msg_recv(ctl, &m, MSG_MAX);
	}
	if (rc <= 0 || m.hdr.type != MSG_SBX_GO)
		_exit(1);
	/* Into our cgroup before anything else, while we are still host root. */
	if (m.len > 0 && cg_init_join_self((const char *)m.data, m.len, &e) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	msg_clear(&m);

	/*
	 * Enter run_dir while we still hold the host identity that owns it:
	 * the folders above it may be closed to the sandbox's uid.
	 */
	if (chdir(conf->run_dir) < 0) {
		err_set(&e, -errno, "chdir %s: %s", conf->run_dir, strerror(errno));
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	}
	/* The uid map is written: take the sandbox user's identity. */
	if (ns_init_become_sandbox_user(image.on ? image.uid : SANDBOX_UID,
	    image.on ? image.gid : SANDBOX_UID, &e) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	/*
	 * A credential change clears the parent-death signal: set it again,
	 * then make sure the worker did not die in between (its end of the
	 * channel would be closed).
	 */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The job shares our uid: it may not look into us (/proc/1/fd). */
	prctl(PR_SET_DUMPABLE, 0);
	/*
	 * The worker's kept base (persist.c), reachable only through this
	 * descriptor once the root is pivoted; none is fine (no reuse).
	 */
	ps.basefd = open("base", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	{
		struct pollfd pfd = { .fd = ctl, .events = 0 };

		if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR)))
			_exit(1);
	}
	if ((out_wr = init_pipe(ctl, 1, &e)) < 0 || (err_wr = init_pipe(ctl, 2, &e)) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if ((image.on ? mount_build_image_root(image.layers, image.nlayers,
	    ps.basefd >= 0, &e) : mount_build_root(ps.basefd >= 0, &e)) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if (ns_init_loopback_up(&e) < 0)
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	if (sethostname("sandbox", 7) < 0) {
		err_set(&e, -errno, "sethostname: %s", strerror(errno));
		init_fail(ctl, SBX_FAIL_INTERNAL, &e);
	}
	if (msg_send(ctl, MSG_SBX_READY, 0, NULL, 0, -1) < 0)
		_exit(1);

	rc = msg_recv(ctl, &m, MSG_BLOB_MAX);
	/*
	 * The worker asks for a warm python3 (its last job was python) while
	 * it waits for a job: on the host's root with a memory cgroup
	 * (RLIMIT_AS stays unlimited, so start-up is the same under any job's
	 * limits). Best effort: without it, the job runs cold.
	 */
	if (rc == 1 && m.hdr.type == MSG_SBX_WARM) {
		int nul = image.on || conf->cg.version == CG_NONE ? -1 :
		    open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (nul >= 0) {
			(void)warm_init_start(nul, out_wr, err_wr, ws, &e);
			close(nul);
		}
		msg_clear(&m);
		rc = msg_recv(ctl, &m, MSG_BLOB_MAX);
	}
	if (rc == 1 && m.hdr.type == MSG_SBX_BASE && m.len > SANDBOX_RULES_FP_LEN + 1 &&
	    m.len < 1024 && memchr(m.data, '\n', m.len) ==
	    (char *)m.data + m.len - SANDBOX_RULES_FP_LEN - 1) {
		/* "KEY\nFINGERPRINT": the key has no newline, nor the fingerprint. */
		ps.key = xmemdup0(m.data, m.len - SANDBOX_RULES_FP_LEN - 1);
		memcpy(ps.rules_fp, (char *)m.data + m.len - SANDBOX_RULES_FP_LEN,
		    SANDBOX_RULES_FP_LEN);
		ps.patchfd = m.fd;
		m.fd = -1;
		msg_clear(&m);
		rc = msg_recv(ctl, &m, MSG_BLOB_MAX);
	}
	if (rc <= 0 || m.hdr.type != MSG_SBX_SPEC)
		_exit(rc == 0 ? 0 : 1);	/* the worker is gone or confused */
	init_run_job(conf, ctl, out_wr, err_wr, &m, &ps);
}
