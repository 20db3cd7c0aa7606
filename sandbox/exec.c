/*
 * exec.c - the job's own process, and the per-job files it starts with.
 *
 * exec_init_spawn() starts the job's process from the sandbox's init with
 * clone(CLONE_VM | CLONE_VFORK): the child borrows init's memory until it
 * execs, so neither init's page tables nor the pages the child touches are
 * copied (a fork here cost about a tenth of a /bin/true job). Init is
 * suspended meanwhile; what the child may change in the shared memory is
 * nothing init reads again, and everything it must not allocate (the
 * environment, PATH for execvpe, a stack) is made by init beforehand.
 *
 * job_exec() runs in that child, already under the job's seccomp filter
 * (init installed it; it refuses nothing these steps use). The order is the
 * security argument, each step relying on the one before:
 *
 *   1. stdio onto 0/1/2, every other descriptor closed (close_range), so
 *      nothing of the worker or init leaks into the job;
 *   2. a new session and an empty signal mask (every disposition is
 *      already the default: spawner_main(), init_main());
 *   3. chdir to the job's cwd (still privileged: it may be a fresh folder);
 *   4. rlimits (limits.c), lowered while we still may;
 *   5. every capability dropped: bounding set, ambient, inheritable,
 *      permitted, effective; then NO_NEW_PRIVS, so no setuid binary or file
 *      capability can give any back;
 *   6. execvpe with the job's own environment only.
 *
 * A warm interpreter (warm.c) takes the same path ahead of its job, with
 * two differences: it installs the job's filter itself as step 0 (init
 * installs it on itself only once the job's tmpfs are mounted), and its
 * rlimits are set by init when the job is handed over (prlimit, the same
 * values, lowering only). It keeps its control socket as fd 3.
 *
 * A failure before exec is reported on the job's stderr like a shell would
 * ("sandq: python4: No such file or directory") with exit code 127 (not
 * found) or 126 (found, could not run), so the result stays the job's own.
 *
 * Two processes run this file, and each function says which in its name:
 * exec_init_* and init_* run in the sandbox's init; job_* run in the job's
 * process, from the clone (job_main()) to the exec.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#include "../common/util.h"
#include "internal.h"

#define JOB_PATH_ENV "/usr/local/bin:/usr/bin:/bin"

static void __attribute__((noreturn))
job_fail(int code, const char *what, int errnum)
{
	char buf[512];
	int n;

	n = snprintf(buf, sizeof(buf), "sandq: %s: %s\n", what, strerror(errnum));
	if (n > 0)
		(void)write_all(STDERR_FILENO, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
	_exit(code);
}

static int
job_drop_capabilities(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	/* Capabilities are numbered from 0 up: EINVAL marks the first unknown. */
	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL && cap > 0)
			break;
		return -errno;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -errno;
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -errno;
	return 0;
}

/*
 * Builds the job's environment: its own variables plus defaults it lacks.
 * HOME is /workspace, which a job under write rules may fill for later
 * jobs: PYTHONNOUSERSITE keeps every Python the job starts from running
 * the .pth files and usercustomize.py of ~/.local/lib/python3.X/site-packages,
 * which Python would otherwise execute at start-up without the job naming
 * them.
 * A job that wants its user site sets PYTHONNOUSERSITE= (empty) itself.
 */
char **
exec_init_environ(const struct job *j, const char *home, char **storage,
    size_t nstorage)
{
	static char home_var[JOB_ROOT_DIR_MAX + 8];
	const char *const defaults[] = {
		"PATH=" JOB_PATH_ENV, home_var, "LANG=C.UTF-8", "PYTHONNOUSERSITE=1",
	};
	size_t n = 0;

	/* HOME is the sandbox's files: /workspace, or its workdir. */
	snprintf(home_var, sizeof(home_var), "HOME=%s", home);
	for (size_t i = 0; i < j->nenv && n + 1 < nstorage; i++)
		storage[n++] = j->env[i];
	for (size_t d = 0; d < sizeof(defaults) / sizeof(defaults[0]); d++) {
		size_t klen = (size_t)(strchr(defaults[d], '=') - defaults[d]) + 1;
		bool have = false;

		for (size_t i = 0; i < j->nenv; i++)
			if (strncmp(j->env[i], defaults[d], klen) == 0)
				have = true;
		if (!have && n + 1 < nstorage)
			storage[n++] = (char *)(uintptr_t)defaults[d];
	}
	storage[n] = NULL;
	return storage;
}

/*
 * Makes the calling process (and so every process the job starts) the OOM
 * killer's first choice in the sandbox's cgroup. Without it the kernel may
 * take init at the memory limit: memory a job holds in the kernel (pipe
 * pages, socket queues) counts in no process's size, so init can look as
 * large as the job, and init's death ends the sandbox as internal rather
 * than memory_limit. Raising the score needs no privilege. Best effort: a
 * failure leaves the kernel's own choice.
 */
static void
job_oom_first(void)
{
	int fd;

	/*
	 * Init is not dumpable (its /proc files are not ours to write), and we
	 * are its clone; we are the job's process from here on, which exec
	 * makes dumpable again anyway.
	 */
	(void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	if ((fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC)) < 0)
		return;
	(void)write_all(fd, "1000", 4);
	close(fd);
}

/*
 * A warm interpreter's step 0 (warm.c): the job's filter, which init could
 * not install on itself yet (it still mounts the job's tmpfs when the job
 * comes). We share init's descriptor table (CLONE_FILES) until the filter
 * is in, so its listener lands where init finds it (s->warm_listener, in
 * the memory we share too); then the table is unshared and every later
 * step works on our own copy, as a job's process does.
 */
static void
job_warm_filter(struct exec_spec *s)
{
	struct err e = { 0 };
	int nfd;

	if ((nfd = seccomp_init_job_install(s->warm_net, &e)) < 0)
		_exit(126);
	s->warm_listener = nfd;
	if (syscall(SYS_close_range, ~0U, ~0U, CLOSE_RANGE_UNSHARE) < 0)
		_exit(126);
}

static void __attribute__((noreturn))
job_exec(struct exec_spec *s)
{
	const struct job *j = s->job;
	sigset_t all;
	struct err e = { 0 };

	if (s->warm)
		job_warm_filter(s);
	if (dup2(s->stdin_fd, 0) < 0 || dup2(s->stdout_fd, 1) < 0 ||
	    dup2(s->stderr_fd, 2) < 0)
		_exit(126);
	/* A warm interpreter keeps its control socket as 3 (warm.c). */
	if (s->warm && (s->warm_ctl < 3 || dup2(s->warm_ctl, 3) < 0 ||
	    fcntl(3, F_SETFD, 0) < 0))
		_exit(126);
	if (syscall(SYS_close_range, s->warm ? 4U : 3U, ~0U, 0U) < 0)
		_exit(126);
	setsid();
	/*
	 * Dispositions: exec resets handled signals itself and keeps ignored
	 * ones. The spawner set every one to default at its start, and the
	 * only one changed since (SIGCHLD, ignored by the spawner) init has
	 * set back before anything else: we, init's clone, ignore nothing
	 * (tests/jobstart_test.c). No loop of 64 rt_sigaction through the
	 * job's filter here.
	 */
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);

	if (chdir(j->cwd ? j->cwd : s->home) < 0)
		job_fail(126, j->cwd ? j->cwd : s->home, errno);
	job_oom_first();
	/* A warm interpreter's limits are the job's, set by init at hand-off. */
	if (!s->warm && limits_apply(&j->limits, s->cg_memory, &e) < 0)
		job_fail(126, e.msg, -e.code);
	if (job_drop_capabilities() < 0)
		job_fail(126, "drop capabilities", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		job_fail(126, "no_new_privs", errno);

	execvpe(j->argv[0], j->argv, s->envp);
	job_fail(errno == ENOENT || errno == ENOTDIR ? 127 : 126, j->argv[0], errno);
}

static int
job_main(void *arg)
{
	job_exec(arg);
}

pid_t
exec_init_spawn(struct exec_spec *s, struct err *e)
{
	static void *stack;
	const char *path = JOB_PATH_ENV;
	pid_t pid;

	s->envp = exec_init_environ(s->job, s->home, s->envstore,
	    sizeof(s->envstore) / sizeof(s->envstore[0]));
	/* execvpe searches the caller's PATH: make it the job's. */
	for (char **p = s->envp; *p; p++)
		if (strncmp(*p, "PATH=", 5) == 0)
			path = *p + 5;
	if (setenv("PATH", path, 1) < 0)
		return err_set(e, -errno, "setenv: %s", strerror(errno));
	if (stack == NULL) {
		stack = mmap(NULL, EXEC_STACK_SIZE, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (stack == MAP_FAILED) {
			stack = NULL;
			return err_set(e, -errno, "job stack: %s", strerror(errno));
		}
	}
#ifdef __SANITIZE_ADDRESS__
	/*
	 * The stack may have carried a child before (a warm interpreter that
	 * did not get the job): its frames' redzones are still marked in the
	 * shadow memory we share, and would read as overflows in this child.
	 */
	__asan_unpoison_memory_region(stack, EXEC_STACK_SIZE);
#endif
	pid = clone(job_main, (char *)stack + EXEC_STACK_SIZE,
	    CLONE_VM | CLONE_VFORK | (s->warm ? CLONE_FILES : 0) | SIGCHLD, s);
	if (pid < 0)
		return err_set(e, -errno, "clone: %s", strerror(errno));
	return pid;
}

/* mkdir -p of the parents of rel (relative to dirfd), owned by the job. */
static int
init_make_parents(int dirfd, const char *rel, struct err *e)
{
	char buf[JOB_PATH_MAX + 1];
	char *p;

	snprintf(buf, sizeof(buf), "%s", rel);
	for (p = strchr(buf, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdirat(dirfd, buf, 0755) < 0 && errno != EEXIST)
			return err_set(e, -errno, "mkdir %s: %s", buf, strerror(errno));
		*p = '/';
	}
	return 0;
}

int
exec_init_seed_files(const struct job *j, const char *ws, struct err *e)
{
	struct open_how how = {
		.flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		.mode = 0644,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int dirfd, rc = 0;

	if (j->nfiles == 0)
		return 0;
	dirfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return err_set(e, -errno, "open %s: %s", ws, strerror(errno));
	/*
	 * Paths were normalised by the decoder (no '..', no empty parts). The
	 * workspace may hold a persistent sandbox's snapshot, symlinks
	 * included, so no component is followed: a seeded file replaces a
	 * file of the snapshot, never what a symlink there points at. Nothing
	 * of the job runs yet, so nothing changes between the calls.
	 */
	for (size_t i = 0; i < j->nfiles; i++) {
		const struct job_file *f = &j->files[i];
		int fd;

		if ((rc = init_make_parents(dirfd, f->path, e)) < 0)
			break;
		fd = (int)syscall(SYS_openat2, dirfd, f->path, &how, sizeof(how));
		if (fd < 0) {
			rc = err_set(e, -errno, "file '%s': %s", f->path,
			    errno == ELOOP || errno == EXDEV ? "a symlink is in the way" :
			    strerror(errno));
			break;
		}
		rc = write_all(fd, f->data, f->len);
		close(fd);
		if (rc < 0) {
			err_set(e, rc, "file '%s': %s", f->path, strerror(-rc));
			break;
		}
	}
	close(dirfd);
	return rc;
}

int
exec_init_prepare_cwd(const struct job *j, bool image, const char *ws,
    struct err *e)
{
	size_t wl = strlen(ws);
	const char *rel;
	char buf[JOB_PATH_MAX + 16];
	int dirfd, rc;

	if (j->cwd == NULL)
		return 0;
	if (strncmp(j->cwd, ws, wl) == 0 && j->cwd[wl] == '/') {
		dirfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rel = j->cwd + wl + 1;
	} else if (strncmp(j->cwd, "/tmp/", 5) == 0) {
		dirfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rel = j->cwd + 5;
	} else if (image && strcmp(j->cwd, "/") != 0) {
		/*
		 * An image's root is the job's own (a writable layer over the
		 * image): its WorkingDir is made if the image lacks it, as
		 * Docker does. Symlinks there are the image's and resolve
		 * inside the sandbox's root.
		 */
		dirfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rel = j->cwd + 1;
	} else {
		return 0;	/* must exist already; job_exec reports it if not */
	}
	if (dirfd < 0)
		return err_set(e, -errno, "open cwd root: %s", strerror(errno));
	snprintf(buf, sizeof(buf), "%s/", rel);
	rc = init_make_parents(dirfd, buf, e);
	close(dirfd);
	return rc;
}
