/*
 * warm.c - a warm python3 ahead of the job (issue 19).
 *
 * A python job's own start-up (the interpreter, site, the encodings:
 * several milliseconds) used to be on its path. A prepared sandbox on the
 * host's root with a memory cgroup now starts `python3 -c BOOT` before the
 * job is known, through the job's own spawn path (exec.c: stdio, a new
 * session, caps dropped, NO_NEW_PRIVS, the job's seccomp filter for the
 * default network mode, installed by the child itself). BOOT blocks on its
 * control socket (fd 3). When the job comes and fits (warm_init_fits()),
 * init lowers its rlimits to the job's (prlimit: the values limits.c
 * gives, lowering only), reads its CPU time so far (not the job's) and
 * writes the job there; the bootstrap takes on the job's environment and
 * cwd exactly as a cold start would have them, closes the socket, empties
 * __main__ back to what a cold -c start has and runs the job's code there
 * as "<string>". A job with stdin has the bootstrap write it to a memfd
 * first, which the job's limits must not bound: it reports, and only then
 * does init set the limits and say go.
 * Anything else (another op, another network mode, an environment that
 * differs from the warm start in what Python or libc read at start-up)
 * kills the warm process and runs cold, as before. One warm process per
 * sandbox, for its one job; it dies with the pid namespace in any case.
 *
 * The exact rule and what a job could still tell apart are in
 * docs/decisions.md and docs/security.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "internal.h"

/*
 * The bootstrap. It imports nothing a cold start has not imported (os and
 * sys only), defines _b and _r in __main__ and removes both before the
 * job's code runs. Its input: netstrings ("LEN:BYTES") of the cwd, the
 * code, the stdin ("-" none, "+" and its bytes) and the environment, the
 * whole wrapped in one netstring so it knows where the job ends. The code
 * runs as a cold -c start runs it: exec() of the source string in
 * __main__'s dict (PyRun_String, "<string>"), not the compile() builtin,
 * whose first call in a process builds the ast module's node classes
 * (about 0.7 ms, and as many objects more to tear down at exit). An
 * uncaught exception is printed by sys.excepthook with the bootstrap's own
 * frame (the traceback's first entry, _r's) left out: the traceback a cold
 * start prints. SystemExit and KeyboardInterrupt end the process as they
 * would a cold one.
 */
static const char boot[] =
	"def _b():\n"
	" import os,sys\n"
	" r=os.read;w=os.write;b=bytearray();n=-1\n"
	" while len(b)!=n:\n"
	"  c=r(3,65536)\n"
	"  if not c:os._exit(1)\n"
	"  b+=c\n"
	"  if n<0 and b':' in b:j=b.index(b':');n=int(b[:j])+j+1\n"
	" del b[:j+1]\n"
	" a=[];i=0\n"
	" while i<len(b):j=b.index(b':',i);n=int(b[i:j]);a.append(bytes(b[j+1:j+1+n]));i=j+1+n\n"
	" d,s,q=a[0],a[1],a[2];del b\n"
	" os.environ.clear()\n"
	" for e in a[3:]:\n"
	"  k,_,v=e.partition(b'=')\n"
	"  if _ and k not in os.environb:os.environb[k]=v\n"
	" del a\n"
	" try:os.chdir(d)\n"
	" except OSError as x:w(2,b'sandq: '+d+b': '+os.strerror(x.errno).encode()+b'\\n');os._exit(126)\n"
	" if q[:1]==b'+':\n"
	"  f=os.memfd_create('stdin',os.MFD_CLOEXEC);m=memoryview(q)[1:]\n"
	"  while m:m=m[w(f,m):]\n"
	"  del m;os.lseek(f,0,0);os.dup2(f,0);os.close(f)\n"
	"  w(3,b'A')\n"
	"  if r(3,1)!=b'G':os._exit(1)\n"
	" del q;os.close(3);s=s.decode('utf-8','surrogateescape');sys.orig_argv[2:]=[s]\n"
	" return s\n"
	"def _r(s):\n"
	" import sys\n"
	" g=sys.modules['__main__'].__dict__;k={n:v for n,v in g.items() if n not in('_b','_r')};g.clear();g.update(k);del k\n"
	" try:\n"
	"  exec(s,g)\n"
	" except SystemExit:raise\n"
	" except BaseException as x:\n"
	"  t=x.__traceback__.tb_next\n"
	"  h=sys.excepthook\n"
	"  def p(y,v,_):\n"
	"   sys.excepthook=h;sys.last_traceback=v.__traceback__=t;h(y,v,t)\n"
	"  sys.excepthook=p;raise\n"
	"_r(_b())\n"
	;

/* Variables a cold start reads before the job's code (Python, glibc). */
static const char *const start_prefix[] = { "PYTHON", "LC_", "LD_", "MALLOC_" };
static const char *const start_names[] = {
	"LANG", "LANGUAGE", "PATH", "HOME", "TZ", "GLIBC_TUNABLES", "LOCPATH",
	"GCONV_PATH", "NLSPATH",
};

static struct {
	pid_t pid;		/* the warm python3, or -1 */
	int ctl;		/* our end of its control socket, or -1 */
	int listener;		/* its filter's listener, or -1 */
	enum job_net net;	/* the network mode of that filter */
	char *env[8];		/* its start-up variables (all are start_*) */
	size_t nenv;
} warm = { .pid = -1, .ctl = -1, .listener = -1 };

/* Whether a "NAME=value" is one a cold start reads before the code runs. */
static bool
warm_start_var(const char *kv)
{
	size_t n = strcspn(kv, "=");

	for (size_t i = 0; i < sizeof(start_prefix) / sizeof(start_prefix[0]); i++)
		if (strncmp(kv, start_prefix[i], strlen(start_prefix[i])) == 0)
			return true;
	for (size_t i = 0; i < sizeof(start_names) / sizeof(start_names[0]); i++)
		if (strlen(start_names[i]) == n && strncmp(kv, start_names[i], n) == 0)
			return true;
	return false;
}

int
warm_init_start(int stdin_fd, int out_wr, int err_wr, const char *home,
    struct err *e)
{
	static struct job boot_job;
	static char *argv[4];
	static struct exec_spec spec;
	int sp[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return err_set(e, -errno, "warm: socketpair: %s", strerror(errno));
	argv[0] = (char *)(uintptr_t)"python3";
	argv[1] = (char *)(uintptr_t)"-c";
	argv[2] = (char *)(uintptr_t)boot;
	boot_job.argv = argv;
	boot_job.argc = 3;
	boot_job.op = OP_PYTHON;
	boot_job.cwd = (char *)(uintptr_t)"/";	/* the job's tmpfs is not there yet */
	spec = (struct exec_spec){ .job = &boot_job, .home = home,
	    .stdin_fd = stdin_fd, .stdout_fd = out_wr, .stderr_fd = err_wr,
	    .cg_memory = true, .warm = true, .warm_net = NET_NONE,
	    .warm_ctl = sp[1], .warm_listener = -1 };
	pid = exec_init_spawn(&spec, e);
	close(sp[1]);
	if (pid < 0 || spec.warm_listener < 0) {
		close(sp[0]);
		if (pid > 0) {
			kill(pid, SIGKILL);
			(void)waitpid(pid, NULL, 0);
		}
		return pid < 0 ? (int)pid : err_set(e, -EIO, "warm: no filter");
	}
	warm.pid = pid;
	warm.ctl = sp[0];
	warm.listener = spec.warm_listener;
	warm.net = NET_NONE;
	/* What it started with, for warm_init_fits(). */
	for (char **p = spec.envp; *p && warm.nenv < sizeof(warm.env) / sizeof(warm.env[0]); p++)
		if (warm_start_var(*p))
			warm.env[warm.nenv++] = xstrdup(*p);
	return 0;
}

/* Whether every start-up variable of env is the warm start's, and back. */
static bool
warm_env_same(char **env)
{
	size_t n = 0;

	for (char **p = env; *p; p++) {
		bool found = false;

		if (!warm_start_var(*p))
			continue;
		for (size_t i = 0; i < warm.nenv && !found; i++)
			found = strcmp(*p, warm.env[i]) == 0;
		if (!found)
			return false;
		n++;
	}
	/* Each of the warm start's, once: none missing, none twice. */
	return n == warm.nenv;
}

bool
warm_init_fits(const struct job *j, const char *home, bool cg_memory)
{
	static char *store[JOB_ENV_MAX + 8];
	int st;

	if (warm.pid < 0 || j->op != OP_PYTHON || j->argc != 3 || j->code == NULL ||
	    j->net_mode != warm.net || !cg_memory)
		return false;
	/* Still there (not killed at a lowered memory limit, say)? */
	if (waitpid(warm.pid, &st, WNOHANG) != 0) {
		warm.pid = -1;
		return false;
	}
	return warm_env_same(exec_init_environ(j, home, store,
	    sizeof(store) / sizeof(store[0])));
}

int
warm_init_listener(void)
{
	int fd = warm.listener;

	warm.listener = -1;
	return fd;
}

void
warm_init_discard(void)
{
	if (warm.pid > 0) {
		kill(warm.pid, SIGKILL);
		while (waitpid(warm.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	warm.pid = -1;
	if (warm.ctl >= 0)
		close(warm.ctl);
	if (warm.listener >= 0)
		close(warm.listener);
	warm.ctl = warm.listener = -1;
}

/* Appends one netstring to buf. */
static void
warm_put(char **buf, size_t *len, const char *pfx, const void *p, size_t n)
{
	size_t pl = strlen(pfx);
	char hd[32];
	int hl = snprintf(hd, sizeof(hd), "%zu:", n + pl);

	*buf = xreallocarray(*buf, *len + (size_t)hl + pl + n, 1);
	memcpy(*buf + *len, hd, (size_t)hl);
	memcpy(*buf + *len + hl, pfx, pl);
	if (n > 0)
		memcpy(*buf + *len + hl + pl, p, n);
	*len += (size_t)hl + pl + n;
}

/*
 * The warm process's rlimits lowered to the job's (the values limits.c
 * gives) and its CPU time so far read into *pre_cpu_ns (not the job's).
 * On failure it is discarded.
 */
static int
warm_limit(const struct job *j, bool cg_memory, pid_t pid, int64_t *pre_cpu_ns,
    struct err *e)
{
	struct limits_rlimit rl[LIMITS_NRLIMITS];
	size_t n = limits_to_rlimits(&j->limits, cg_memory, rl);
	clockid_t cid;
	struct timespec ts;

	for (size_t i = 0; i < n; i++)
		if (prlimit(pid, rl[i].resource, &rl[i].rl, NULL) < 0) {
			int rc = err_set(e, -errno, "warm: prlimit %d: %s",
			    rl[i].resource, strerror(errno));

			warm_init_discard();
			return rc;
		}
	if (clock_getcpuclockid(pid, &cid) == 0 && clock_gettime(cid, &ts) == 0)
		*pre_cpu_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	return 0;
}

pid_t
warm_init_hand(const struct job *j, const char *home, bool cg_memory,
    int64_t *pre_cpu_ns, struct err *e)
{
	static char *store[JOB_ENV_MAX + 8];
	const char *cwd = j->cwd ? j->cwd : home;
	char *buf = NULL, **env, c = 0, hd[32];
	size_t len = 0, n;
	pid_t pid = warm.pid;
	int rc = 0;

	*pre_cpu_ns = 0;
	/*
	 * Without stdin the bootstrap makes no file and no descriptor for
	 * the job: its limits and the CPU it used so far are set and read
	 * before it has the job, and it runs the code as soon as it is set
	 * up (no acknowledgement, no go: a round trip less). With stdin it
	 * writes the stdin memfd first, which the job's RLIMIT_FSIZE and
	 * RLIMIT_NOFILE must not bound (init writes it for a cold start).
	 */
	if (j->stdin_data == NULL &&
	    (rc = warm_limit(j, cg_memory, pid, pre_cpu_ns, e)) < 0)
		return rc;
	warm_put(&buf, &len, "", cwd, strlen(cwd));
	warm_put(&buf, &len, "", j->code, strlen(j->code));
	if (j->stdin_data != NULL)
		warm_put(&buf, &len, "+", j->stdin_data, j->stdin_len);
	else
		warm_put(&buf, &len, "-", NULL, 0);
	env = exec_init_environ(j, home, store, sizeof(store) / sizeof(store[0]));
	for (char **p = env; *p; p++)
		warm_put(&buf, &len, "", *p, strlen(*p));
	/* The whole as one netstring: the bootstrap reads exactly that. */
	n = (size_t)snprintf(hd, sizeof(hd), "%zu:", len);
	buf = xreallocarray(buf, len + n, 1);
	memmove(buf + n, buf, len);
	memcpy(buf, hd, n);
	len += n;
	for (size_t off = 0; off < len;) {
		ssize_t w = send(warm.ctl, buf + off, len - off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			break;	/* it ended: its status is the job's */
		off += (size_t)w;
	}
	free(buf);
	/*
	 * With stdin: it has taken the job on (or ended, e.g. at a missing
	 * cwd, as a cold start would have: that status is the job's). Its
	 * limits, then go.
	 */
	if (j->stdin_data != NULL) {
		while (read(warm.ctl, &c, 1) < 0 && errno == EINTR)
			;
		if (c == 'A') {
			if ((rc = warm_limit(j, cg_memory, pid, pre_cpu_ns, e)) < 0)
				return rc;
			(void)send(warm.ctl, "G", 1, MSG_NOSIGNAL);
		}
	}
	close(warm.ctl);
	warm.ctl = -1;
	warm.pid = -1;
	return pid;
}
