/*
 * libsandq.c - the client library of libsandq/sandq.h: submits jobs to a
 * tenant's Redis stream and waits for their results, over one synchronous
 * hiredis connection.
 *
 * DESIGN. A job is built as a struct job and encoded by proto/job.c, the
 * codec the dispatcher decodes with, so client and server cannot drift apart
 * on the wire format; this file only converts the public options into that
 * struct and checks what the protocol cannot carry (bad ids, env names,
 * paths, sizes past the protocol's bounds) before anything is sent.
 *
 * Waiting reads sandq:{T}:res:ID first, then BLPOPs sandq:{T}:done:ID in
 * slices of at most WAIT_SLICE_MS with a GET between slices. The done list
 * holds one copy of the result: a second waiter on the same id, or a waiter
 * after one that died holding the popped element, would otherwise block
 * until its timeout although the result sits in res:ID.
 *
 * Sockets: hiredis 0.14 turns the connect timeout into SO_RCVTIMEO. Ordinary
 * commands run with CMD_TIMEOUT_MS so a dead server is noticed; a BLPOP gets
 * its own slice plus BLPOP_GRACE_MS and the default is restored after it.
 * hiredis marks a context dead after any I/O or protocol error; the next call
 * reconnects (redisReconnect) and repeats AUTH and SELECT. Reads are also
 * retried at once after a broken socket; an XADD is not, since it may have
 * landed: the caller decides whether to submit again under the same id.
 *
 * Sections: errors, connection, building jobs, submitting, results. The
 * library's other files (cases.c, presets.c, audit.c) read through
 * internal.h's sandq__read(); this file calls none of theirs.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>

#include "../common/err.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../proto/job.h"
#include "../proto/path.h"
#include "../proto/result.h"
#include "../proto/snapkey.h"
#include "../proto/url.h"
#include "internal.h"
#include "sandq.h"

_Static_assert(SANDQ_ID_MAX == JOB_ID_MAX, "public and wire id bounds differ");

#define SANDQ_PREFIX "sandq"		/* key prefix (docs/protocol.md, Keys) */
#define SANDQ_DEFAULT_TENANT "default"
#define CONNECT_TIMEOUT_MS 5000		/* TCP or unix connect */
#define CMD_TIMEOUT_MS 30000		/* one recv/send of an ordinary command */
#define BLPOP_GRACE_MS 5000		/* socket timeout beyond a BLPOP's own */
#define WAIT_SLICE_MS 10000		/* longest single BLPOP */
#define ID_RANDOM_BYTES 12		/* "j-" + 24 hex chars */

struct sandq {
	redisContext *rc;		/* the connection; never NULL once open */
	struct redis_url url;		/* kept for reconnects; wiped on close */
	char *tenant;			/* validated tenant name */
	char where[300];		/* "HOST:PORT" or the socket path */
	bool set_up;			/* AUTH and SELECT done on this socket */
	char errbuf[512];		/* message of the last failure */
};

/*** Errors ***/

/* Formats the message of the last failure into c->errbuf; returns code. */
static int __attribute__((format(printf, 3, 4)))
fail(struct sandq *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errbuf, sizeof(c->errbuf), fmt, ap);
	va_end(ap);
	return code;
}

/* Records the hiredis context's own error ("Connection refused"). -EIO. */
static int
fail_io(struct sandq *c)
{
	return fail(c, -EIO, "redis %s: %s", c->where,
	    c->rc->errstr[0] ? c->rc->errstr : "connection lost");
}

static struct timeval
tv_ms(int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	return tv;
}

/*** Connection ***/

/*
 * Runs one command with explicit argument lengths (binary-safe). Returns 0
 * with *out owning a reply that is not an error reply, or -EIO with the
 * message set: hiredis's for I/O failures, "redis: ERR ..." for error replies.
 */
static int
cmd(struct sandq *c, redisReply **out, int argc, const char **argv,
    const size_t *lens)
{
	redisReply *r;

	*out = NULL;
	r = redisCommandArgv(c->rc, argc, argv, lens);
	if (r == NULL)
		return fail_io(c);
	if (r->type == REDIS_REPLY_ERROR) {
		fail(c, -EIO, "redis: %.*s", (int)r->len, r->str);
		freeReplyObject(r);
		return -EIO;
	}
	*out = r;
	return 0;
}

/* Runs a command whose reply is not needed. 0 or -EIO. */
static int
cmd_ok(struct sandq *c, int argc, const char **argv, const size_t *lens)
{
	redisReply *r = NULL;
	int rc;

	if ((rc = cmd(c, &r, argc, argv, lens)) == 0)
		freeReplyObject(r);
	return rc;
}

/*
 * Authenticates and selects the database the URL names, on a fresh or
 * re-established socket. The password goes as an argument with its length,
 * so any byte is safe in it.
 */
static int
conn_setup(struct sandq *c)
{
	const char *argv[3];
	size_t lens[3];
	char db[16];
	int argc = 0;

	c->set_up = false;
	if (c->url.user[0] || c->url.pass[0]) {
		argv[argc] = "AUTH";
		lens[argc++] = 4;
		if (c->url.user[0]) {
			argv[argc] = c->url.user;
			lens[argc++] = strlen(c->url.user);
		}
		argv[argc] = c->url.pass;
		lens[argc++] = strlen(c->url.pass);
		if (cmd_ok(c, argc, argv, lens) < 0)
			return -EIO;
	}
	if (c->url.db != 0) {
		snprintf(db, sizeof(db), "%d", c->url.db);
		argv[0] = "SELECT";
		lens[0] = 6;
		argv[1] = db;
		lens[1] = strlen(db);
		if (cmd_ok(c, 2, argv, lens) < 0)
			return -EIO;
	}
	c->set_up = true;
	return 0;
}

/* Opens the socket c->url names and sets the command timeout. 0 or -EIO. */
static int
conn_open(struct sandq *c)
{
	if (c->url.path[0]) {
		snprintf(c->where, sizeof(c->where), "%s", c->url.path);
		c->rc = redisConnectUnixWithTimeout(c->url.path, tv_ms(CONNECT_TIMEOUT_MS));
	} else {
		snprintf(c->where, sizeof(c->where), "%s:%d", c->url.host, c->url.port);
		c->rc = redisConnectWithTimeout(c->url.host, c->url.port,
		    tv_ms(CONNECT_TIMEOUT_MS));
	}
	if (c->rc == NULL)
		return fail(c, -ENOMEM, "redis %s: cannot allocate a context", c->where);
	if (c->rc->err)
		return fail_io(c);
	if (redisSetTimeout(c->rc, tv_ms(CMD_TIMEOUT_MS)) != REDIS_OK)
		return fail_io(c);
	return conn_setup(c);
}

/*
 * Makes sure the connection is usable: after an I/O or protocol error
 * hiredis refuses every further command, so reconnect once and set up
 * again; a socket whose AUTH or SELECT failed is set up again too, so no
 * command runs unauthenticated or on the wrong database. 0 or -EIO.
 */
static int
conn_ready(struct sandq *c)
{
	if (c->rc->err == 0 && c->set_up)
		return 0;
	if (c->rc->err == 0)
		return conn_setup(c);
	if (redisReconnect(c->rc) != REDIS_OK || c->rc->err)
		return fail_io(c);
	if (redisSetTimeout(c->rc, tv_ms(CMD_TIMEOUT_MS)) != REDIS_OK)
		return fail_io(c);
	return conn_setup(c);
}

/*
 * Like cmd(), for commands that are safe to repeat (GET): when the
 * connection turns out to be broken, not answered with an error, reconnects
 * and tries once more. A long-lived client otherwise fails one call after
 * every Redis restart.
 */
static int
cmd_again(struct sandq *c, redisReply **out, int argc, const char **argv,
    const size_t *lens)
{
	int rc = cmd(c, out, argc, argv, lens);

	if (rc == -EIO && c->rc->err != 0 && conn_ready(c) == 0)
		rc = cmd(c, out, argc, argv, lens);
	return rc;
}

/*** For the library's other files (internal.h) ***/

int
sandq__fail(struct sandq *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errbuf, sizeof(c->errbuf), fmt, ap);
	va_end(ap);
	return code;
}

int
sandq__read(struct sandq *c, redisReply **out, int argc, const char **argv,
    const size_t *lens)
{
	int rc;

	*out = NULL;
	if ((rc = conn_ready(c)) < 0)
		return rc;
	return cmd_again(c, out, argc, argv, lens);
}

const char *
sandq__tenant(const struct sandq *c)
{
	return c->tenant;
}

/* Copies msg into the caller's buffer, if it gave one. */
static void
copy_err(char *err, size_t errlen, const char *msg)
{
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "%s", msg);
}

/*
 * NULL as tenant means "default", the tenant every sandqd serves unless
 * configured otherwise.
 */
struct sandq *
sandq_connect(const char *url, const char *tenant, char *err, size_t errlen)
{
	struct sandq *c = xcalloc(1, sizeof(*c));
	struct err e = { 0 };

	if (tenant == NULL)
		tenant = SANDQ_DEFAULT_TENANT;
	if (!key_tenant_valid(tenant)) {
		fail(c, -EINVAL, "tenant '%.64s': expected 1..64 bytes of [A-Za-z0-9_-]",
		    tenant);
		goto out_free;
	}
	if (url == NULL || redis_url_parse(url, &c->url, &e) < 0) {
		fail(c, -EINVAL, "%s", url ? e.msg : "no redis url");
		goto out_free;
	}
	c->tenant = xstrdup(tenant);
	if (conn_open(c) < 0)
		goto out_free;
	return c;

out_free:
	copy_err(err, errlen, c->errbuf);
	sandq_close(c);
	return NULL;
}

void
sandq_close(struct sandq *c)
{
	if (c == NULL)
		return;
	if (c->rc)
		redisFree(c->rc);
	/* The URL holds the password. */
	explicit_bzero(&c->url, sizeof(c->url));
	free(c->tenant);
	free(c);
}

const char *
sandq_last_error(const struct sandq *c)
{
	if (c == NULL)
		return "no connection";
	return c->errbuf;
}

/*** Building jobs ***/

/* The checks of env_name_valid() in proto/job.c, on "NAME=..." input. */
static bool
env_name_valid(const char *p, size_t n)
{
	if (n == 0 || n > JOB_ENV_NAME_MAX || (p[0] >= '0' && p[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = p[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '_'))
			return false;
	}
	return true;
}

/*
 * Copies the "K=V" strings into j->env. A name given twice keeps its last
 * value, as with env(1): left duplicated, getenv() would see the first and
 * a shell the last. Adds the bytes to *total (the protocol bounds argv and
 * env together).
 */
static int
job_set_env(struct sandq *c, struct job *j, const char *const *env, size_t *total)
{
	size_t n = 0;

	while (env[n] != NULL)
		n++;
	if (n > JOB_ENV_MAX)
		return fail(c, -EINVAL, "env: more than %d variables", JOB_ENV_MAX);
	j->env = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(env[i], '=');
		size_t klen = eq ? (size_t)(eq - env[i]) : 0;
		size_t k;

		if (eq == NULL)
			return fail(c, -EINVAL, "env: '%.64s' is not NAME=VALUE", env[i]);
		if (!env_name_valid(env[i], klen))
			return fail(c, -EINVAL,
			    "env: '%.*s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
			    (int)(klen > 64 ? 64 : klen), env[i]);
		for (k = 0; k < j->nenv; k++)
			if (strncmp(j->env[k], env[i], klen + 1) == 0)
				break;
		if (k < j->nenv) {
			*total -= strlen(j->env[k]) + 1;
			free(j->env[k]);
		} else {
			j->nenv++;
		}
		j->env[k] = xstrdup(env[i]);
		*total += strlen(env[i]) + 1;
	}
	return 0;
}

/*
 * Checks cwd as the decoder will ("/" alone, or a path that normalises),
 * and sends it as given: the dispatcher resolves relative ones against
 * /workspace.
 */
static int
job_set_cwd(struct sandq *c, struct job *j, const char *cwd)
{
	char path[JOB_PATH_MAX + 1];
	struct err e = { 0 };

	if (strcmp(cwd, "/") != 0 &&
	    payload_path_normalise(cwd, strlen(cwd), path, "cwd", &e) < 0)
		return fail(c, -EINVAL, "%s", e.msg);
	j->cwd = xstrdup(cwd);
	return 0;
}

/* Normalises and copies the seeded files ("/a/b", "a/b" and "/workspace/a/b"
 * are the same). */
static int
job_set_files(struct sandq *c, struct job *j, const struct sandq_file *files,
    size_t nfiles)
{
	char path[JOB_PATH_MAX + 1];
	struct err e = { 0 };
	size_t total = 0;

	if (nfiles > JOB_FILES_MAX)
		return fail(c, -EINVAL, "files: more than %d files", JOB_FILES_MAX);
	j->files = xcalloc(nfiles, sizeof(*j->files));
	for (size_t i = 0; i < nfiles; i++) {
		const struct sandq_file *f = &files[i];

		if (f->path == NULL ||
		    payload_sandbox_path_normalise(f->path, strlen(f->path), path, "files",
		    &e) < 0)
			return fail(c, -EINVAL, "%s (path '%.200s')",
			    f->path ? e.msg : "files: path is NULL",
			    f->path ? f->path : "");
		if (path[0] == '\0')
			return fail(c, -EINVAL, "files: '%.200s' is the workspace itself",
			    f->path);
		if (f->len > 0 && f->data == NULL)
			return fail(c, -EINVAL, "files: '%s' has a length but no data", path);
		/* total stays <= the bound, so adding one bounded len cannot wrap. */
		if (f->len > JOB_FILES_BYTES_MAX || total + f->len > JOB_FILES_BYTES_MAX)
			return fail(c, -EINVAL, "files: more than %u bytes in all",
			    JOB_FILES_BYTES_MAX);
		total += f->len;
		j->files[i].path = xstrdup(path);
		j->files[i].data = (uint8_t *)xmemdup0(f->data, f->len);
		j->files[i].len = f->len;
		j->nfiles++;
	}
	return 0;
}

/* Writes "j-" and 24 random lowercase hex digits into idbuf. */
static int
id_generate(struct sandq *c, char *idbuf)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char rnd[ID_RANDOM_BYTES];
	size_t got = 0;

	while (got < sizeof(rnd)) {
		ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
		if (n < 0) {
			int rc = -errno;

			if (rc == -EINTR)
				continue;
			return fail(c, rc, "getrandom: %s", strerror(-rc));
		}
		got += (size_t)n;
	}
	idbuf[0] = 'j';
	idbuf[1] = '-';
	for (size_t i = 0; i < sizeof(rnd); i++) {
		idbuf[2 + 2 * i] = hex[rnd[i] >> 4];
		idbuf[3 + 2 * i] = hex[rnd[i] & 15];
	}
	idbuf[2 + 2 * sizeof(rnd)] = '\0';
	return 0;
}

/* True for a sandbox id: a job id's alphabet and bound, not "." or "..". */
static bool
sandbox_id_valid(const char *s)
{
	return payload_id_valid(s, strlen(s)) && strcmp(s, ".") != 0 &&
	    strcmp(s, "..") != 0;
}

/* Checks a sandbox id for field `what`; -EINVAL with the message set. */
static int
check_sandbox_id(struct sandq *c, const char *what, const char *id)
{
	if (!sandbox_id_valid(id))
		return fail(c, -EINVAL, "%s '%.64s': expected 1..%d bytes of "
		    "[A-Za-z0-9._:-], not . or ..", what, id, JOB_SANDBOX_ID_MAX);
	return 0;
}

/* True if s has no C0 control character or DEL (patterns, keys). */
static bool
text_clean(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/*
 * Copies the path rules and the preset. Levels are checked here (the
 * four words of docs/paths.md); pattern syntax is the server's
 * (perms_compile()), which names the rule it refuses.
 */
static int
job_set_perms(struct sandq *c, struct job *j, const struct sandq_job_opts *o)
{
	if (o->nperms > 0 && o->perms == NULL)
		return fail(c, -EINVAL, "perms: a count but no array");
	if (o->nperms > JOB_PERMS_MAX)
		return fail(c, -EINVAL, "perms: more than %d rules", JOB_PERMS_MAX);
	if (o->nperms > 0)
		j->perms = xcalloc(o->nperms, sizeof(*j->perms));
	for (size_t i = 0; i < o->nperms; i++) {
		const struct sandq_perm *p = &o->perms[i];
		size_t plen = p->pattern ? strlen(p->pattern) : 0;
		enum perm_level level;

		if (plen == 0 || plen > JOB_PATTERN_MAX || !text_clean(p->pattern))
			return fail(c, -EINVAL, "perms[%zu]: pattern must be 1..%d bytes "
			    "without control characters", i, JOB_PATTERN_MAX);
		if (p->level == NULL ||
		    perm_level_parse(p->level, strlen(p->level), &level) < 0)
			return fail(c, -EINVAL, "perms[%zu] '%.200s': level '%.32s': "
			    "expected none, view, read or write", i, p->pattern,
			    p->level ? p->level : "(null)");
		/* As the dispatcher will read it: "/workspace/x" is "/x". */
		j->perms[i].pattern = xstrdup(payload_pattern_unalias(p->pattern));
		j->perms[i].level = level;
		j->nperms++;
	}
	if (o->perm_preset != NULL) {
		if (o->perm_preset[0] == '\0' || strlen(o->perm_preset) > 64 ||
		    !text_clean(o->perm_preset))
			return fail(c, -EINVAL, "perm_preset '%.64s': not a preset name",
			    o->perm_preset);
		j->perm_preset = xstrdup(o->perm_preset);
	}
	return 0;
}

/* The job's id: o->id checked, or a random one. *out is malloc'd. */
static int
job_id(struct sandq *c, const struct sandq_job_opts *o, char **out)
{
	char id[JOB_ID_MAX + 1];
	int rc;

	if (o->id) {
		if (!payload_id_valid(o->id, strlen(o->id)))
			return fail(c, -EINVAL,
			    "id '%.64s': expected 1..%d bytes of [A-Za-z0-9._:-]",
			    o->id, JOB_ID_MAX);
		snprintf(id, sizeof(id), "%s", o->id);
	} else if ((rc = id_generate(c, id)) < 0) {
		return rc;
	}
	*out = xstrdup(id);
	return 0;
}

/*
 * Fills the options common to every op into j. *total accumulates the
 * bytes of argv and env. Returns 0 or -EINVAL with the message set.
 */
static int
job_set_opts(struct sandq *c, struct job *j, const struct sandq_job_opts *o,
    size_t *total)
{
	if (o->env && job_set_env(c, j, o->env, total) < 0)
		return -EINVAL;
	if (o->cwd && job_set_cwd(c, j, o->cwd) < 0)
		return -EINVAL;
	if (o->has_stdin) {
		if (o->stdin_len > JOB_STDIN_MAX)
			return fail(c, -EINVAL, "stdin: more than %u bytes", JOB_STDIN_MAX);
		if (o->stdin_len > 0 && o->stdin_data == NULL)
			return fail(c, -EINVAL, "stdin: a length but no data");
		/* Never NULL, so an empty stdin is sent as an empty one. */
		j->stdin_data = (uint8_t *)xmemdup0(o->stdin_data, o->stdin_len);
		j->stdin_len = o->stdin_len;
	}
	j->limits.wall_ms = o->limits.wall_ms;
	j->limits.cpu_ms = o->limits.cpu_ms;
	j->limits.memory_bytes = o->limits.memory_bytes;
	j->limits.pids = o->limits.pids;
	j->limits.output_bytes = o->limits.output_bytes;
	j->limits.disk_bytes = o->limits.disk_bytes;
	j->limits.files = o->limits.files;
	if (o->preset && job_preset_parse(o->preset, &j->preset) < 0)
		return fail(c, -EINVAL,
		    "preset '%.32s': expected strict, normal or permissive", o->preset);
	if (o->nfiles > 0 && o->files == NULL)
		return fail(c, -EINVAL, "files: a count but no array");
	if (o->nfiles && job_set_files(c, j, o->files, o->nfiles) < 0)
		return -EINVAL;
	if (o->deadline_ms < 0)
		return fail(c, -EINVAL, "deadline_ms: must not be negative");
	j->priority = o->priority;
	j->deadline_ms = o->deadline_ms;
	if (o->net != NULL) {
		if (strlen(o->net) > 32)
			return fail(c, -EINVAL, "net: longer than 32 bytes");
		j->net = xstrdup(o->net);
	}
	for (size_t i = 0; o->allow != NULL && o->allow[i] != NULL; i++) {
		if (i == JOB_ALLOW_MAX || strlen(o->allow[i]) > JOB_ALLOW_LEN)
			return fail(c, -EINVAL, "allow: at most %d patterns of %d bytes",
			    JOB_ALLOW_MAX, JOB_ALLOW_LEN);
		j->allow = xreallocarray(j->allow, i + 2, sizeof(char *));
		j->allow[i] = xstrdup(o->allow[i]);
		j->allow[i + 1] = NULL;
		j->nallow = i + 1;
	}
	if (o->image != NULL) {
		size_t n = strlen(o->image);

		/* The decoder's bound; the grammar is the server's to judge. */
		if (n == 0 || n > JOB_IMAGE_MAX)
			return fail(c, -EINVAL, "image: expected 1 to %d bytes", JOB_IMAGE_MAX);
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)o->image[i];

			if (ch <= 0x20 || ch >= 0x7f)
				return fail(c, -EINVAL, "image: byte 0x%02x at offset %zu: a "
				    "reference is printable ASCII without spaces", ch, i);
		}
		j->image = xstrdup(o->image);
	}
	return job_set_perms(c, j, o);
}

/*
 * A run's cases (docs/protocol.md "Cases"): copied into j, with the bounds
 * the decoder checks, so a bad case is refused here by its index.
 */
static int
job_set_cases(struct sandq *c, struct job *j, const struct sandq_job_opts *o)
{
	if (o->ncases == 0)
		return 0;
	if (o->cases == NULL)
		return fail(c, -EINVAL, "cases: a count but no array");
	if (o->ncases > JOB_CASES_MAX)
		return fail(c, -EINVAL, "cases: more than %d", JOB_CASES_MAX);
	if (o->has_stdin || o->stream)
		return fail(c, -EINVAL, "cases: not with %s",
		    o->has_stdin ? "stdin" : "stream");
	j->cases = xcalloc(o->ncases, sizeof(*j->cases));
	for (size_t i = 0; i < o->ncases; i++) {
		const struct sandq_case *in = &o->cases[i];
		struct job_case *jc = &j->cases[j->ncases++];

		if (in->stdin_len > JOB_STDIN_MAX ||
		    (in->stdin_len > 0 && in->stdin_data == NULL))
			return fail(c, -EINVAL, "cases[%zu].stdin: no data or more "
			    "than %u bytes", i, JOB_STDIN_MAX);
		if (in->expect_len > 0 && in->expect == NULL)
			return fail(c, -EINVAL, "cases[%zu].expect: a length but "
			    "no data", i);
		if (in->expect_mode != NULL && (in->expect == NULL ||
		    (strcmp(in->expect_mode, "exact") != 0 &&
		    strcmp(in->expect_mode, "trim") != 0 &&
		    strcmp(in->expect_mode, "regex") != 0)))
			return fail(c, -EINVAL, "cases[%zu].expect_mode: %s", i,
			    in->expect == NULL ? "needs expect" :
			    "expected exact, trim or regex");
		if (in->stdin_data != NULL) {
			jc->stdin_data = (uint8_t *)xmemdup0(in->stdin_data,
			    in->stdin_len);
			jc->stdin_len = in->stdin_len;
		}
		if (in->expect != NULL) {
			jc->expect = (uint8_t *)xmemdup0(in->expect, in->expect_len);
			jc->expect_len = in->expect_len;
		}
		if (in->expect_mode != NULL)
			jc->expect_mode = xstrdup(in->expect_mode);
	}
	return 0;
}

/*
 * Builds the job of one op: argv for exec, text (the script or the code)
 * for sh and python. idbuf receives the id once the job is built. Returns
 * 0 with *out owning the job, or -EINVAL/-errno with the message set.
 */
static int
job_build(struct sandq *c, enum job_op op, const char *const *argv,
    const char *text, const struct sandq_job_opts *o, char *idbuf,
    struct job **out)
{
	static const struct sandq_job_opts none;
	struct job *j = job_new();
	size_t total = 0;
	int rc;

	*out = NULL;
	if (idbuf)
		idbuf[0] = '\0';
	if (o == NULL)
		o = &none;
	if ((rc = job_id(c, o, &j->id)) < 0)
		goto out_free;
	j->op = op;

	if (op == OP_EXEC) {
		size_t n = 0;

		while (argv && argv[n])
			n++;
		if (n == 0 || argv[0][0] == '\0') {
			rc = fail(c, -EINVAL, "argv: empty, or an empty program name");
			goto out_free;
		}
		if (n > JOB_ARGV_MAX) {
			rc = fail(c, -EINVAL, "argv: more than %d entries", JOB_ARGV_MAX);
			goto out_free;
		}
		j->argv = xcalloc(n + 1, sizeof(char *));
		for (size_t i = 0; i < n; i++) {
			size_t len = strlen(argv[i]);

			if (len > JOB_ARG_MAX - 1) {
				rc = fail(c, -EINVAL, "argv[%zu]: longer than %u bytes", i,
				    JOB_ARG_MAX - 1);
				goto out_free;
			}
			j->argv[i] = xstrdup(argv[i]);
			j->argc++;
			total += len + 1;
		}
	} else {
		const char *what = op == OP_SH ? "script" : "code";
		size_t len;

		if (text == NULL) {
			rc = fail(c, -EINVAL, "%s: NULL", what);
			goto out_free;
		}
		/* It becomes one argument of bash -c / python3 -c. */
		len = strlen(text);
		if (len > JOB_ARG_MAX - 1) {
			rc = fail(c, -EINVAL, "%s: longer than %u bytes, the kernel's limit "
			    "on one argument; seed it as a file instead", what,
			    JOB_ARG_MAX - 1);
			goto out_free;
		}
		if (op == OP_SH)
			j->script = xstrdup(text);
		else
			j->code = xstrdup(text);
		total += len + 12;
	}
	if ((rc = job_set_opts(c, j, o, &total)) < 0)
		goto out_free;
	if ((rc = job_set_cases(c, j, o)) < 0)
		goto out_free;
	if (o->sandbox) {
		if ((rc = check_sandbox_id(c, "sandbox", o->sandbox)) < 0)
			goto out_free;
		j->sandbox = xstrdup(o->sandbox);
	}
	/* docs/protocol.md: persist defaults to true when a sandbox is named. */
	if (o->persist == SANDQ_PERSIST_YES && o->sandbox == NULL) {
		rc = fail(c, -EINVAL, "persist: needs a sandbox");
		goto out_free;
	}
	j->persist = o->sandbox != NULL && o->persist != SANDQ_PERSIST_NO;
	j->stream = o->stream;
	if (total > JOB_EXEC_BYTES_MAX) {
		rc = fail(c, -EINVAL, "arguments and environment exceed %u bytes",
		    JOB_EXEC_BYTES_MAX);
		goto out_free;
	}
	if (idbuf)
		snprintf(idbuf, SANDQ_ID_MAX + 1, "%s", j->id);
	*out = j;
	return 0;

out_free:
	job_free(j);
	return rc;
}

/*
 * The wire names of the ops sandq_submit_op() takes. Kept here rather
 * than taken from job_op_name() so the client knows an op the moment the
 * protocol names it, whatever the codec's own table holds.
 */
static const struct {
	const char *name;
	enum job_op op;
} op_table[] = {
	{ "fs.read", OP_FS_READ }, { "fs.write", OP_FS_WRITE },
	{ "fs.list", OP_FS_LIST }, { "fs.stat", OP_FS_STAT },
	{ "fs.delete", OP_FS_DELETE }, { "kv.get", OP_KV_GET },
	{ "kv.set", OP_KV_SET }, { "kv.delete", OP_KV_DELETE },
	{ "kv.keys", OP_KV_KEYS }, { "sandbox.create", OP_SANDBOX_CREATE },
	{ "sandbox.fork", OP_SANDBOX_FORK }, { "sandbox.delete", OP_SANDBOX_DELETE },
	{ "sandbox.export", OP_SANDBOX_EXPORT }, { "sandbox.import", OP_SANDBOX_IMPORT },
	{ "sandbox.history", OP_SANDBOX_HISTORY }, { "sandbox.info", OP_SANDBOX_INFO },
	{ "sandbox.list", OP_SANDBOX_LIST },
};

/*
 * A sandbox.create's workdir and from_image_dir, checked and normalised as
 * the server does (proto/path.h); a workdir of /workspace is the default,
 * and one left out with from_image_dir is that folder, as the decoder has
 * it.
 */
static int
job_set_root_dirs(struct sandq *c, struct job *j, const struct sandq_op_args *a)
{
	char dir[JOB_ROOT_DIR_MAX + 1];
	struct err e = { 0 };

	if (a->from_image_dir != NULL) {
		if (payload_root_dir_normalise(a->from_image_dir, strlen(a->from_image_dir),
		    dir, false, "from_image_dir", &e) < 0)
			return fail(c, -EINVAL, "%s", e.msg);
		j->from_image_dir = xstrdup(dir);
	}
	if (a->workdir != NULL) {
		if (payload_root_dir_normalise(a->workdir, strlen(a->workdir), dir, true,
		    "workdir", &e) < 0)
			return fail(c, -EINVAL, "%s", e.msg);
		if (strcmp(dir, "/workspace") != 0)
			j->workdir = xstrdup(dir);
	} else if (j->from_image_dir != NULL) {
		j->workdir = xstrdup(j->from_image_dir);
	}
	return 0;
}

/* Copies the labels as key, value pairs (the layout of struct job). */
static int
job_set_labels(struct sandq *c, struct job *j, const struct sandq_label *l,
    size_t n)
{
	if (n > 0 && l == NULL)
		return fail(c, -EINVAL, "labels: a count but no array");
	if (n > JOB_LABELS_MAX)
		return fail(c, -EINVAL, "labels: more than %d labels", JOB_LABELS_MAX);
	j->labels = xcalloc(2 * n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		if (l[i].key == NULL || l[i].key[0] == '\0' || l[i].value == NULL ||
		    strlen(l[i].key) > JOB_LABEL_MAX || strlen(l[i].value) > JOB_LABEL_MAX)
			return fail(c, -EINVAL, "labels[%zu]: key must be 1..%d bytes and "
			    "value 0..%d bytes", i, JOB_LABEL_MAX, JOB_LABEL_MAX);
		for (size_t k = 0; k < i; k++)
			if (strcmp(l[k].key, l[i].key) == 0)
				return fail(c, -EINVAL, "labels: key '%.64s' given twice",
				    l[i].key);
		j->labels[2 * i] = xstrdup(l[i].key);
		j->labels[2 * i + 1] = xstrdup(l[i].value);
		j->nlabels++;
	}
	return 0;
}

/* Checks an optional string operand against its bound. */
static int
check_str(struct sandq *c, const char *field, const char *s, size_t min,
    size_t max)
{
	size_t n = strlen(s);

	if (n < min || n > max)
		return fail(c, -EINVAL, "%s: expected %zu..%zu bytes, got %zu", field,
		    min, max, n);
	return 0;
}

/*
 * Copies the operands of a sandbox op into j: checks what the protocol
 * bounds (sizes, ids, paths that cannot normalise) so a mistake is told
 * before anything is sent; which fields an op needs is the server's call.
 */
static int
job_set_args(struct sandq *c, struct job *j, const struct sandq_op_args *a)
{
	char path[JOB_PATH_MAX + 1];
	struct err e = { 0 };

	if (a->path) {
		if (check_str(c, "path", a->path, 1, JOB_PATH_MAX) < 0)
			return -EINVAL;
		if (payload_sandbox_path_normalise(a->path, strlen(a->path), path, "path",
		    &e) < 0)
			return fail(c, -EINVAL, "%s", e.msg);
		xasprintf(&j->path, "/%s", path);
	}
	if (a->data != NULL || j->op == OP_FS_WRITE) {
		if (a->data == NULL && a->data_len > 0)
			return fail(c, -EINVAL, "data: a length but no bytes");
		if (a->data_len > JOB_DATA_MAX)
			return fail(c, -EINVAL, "data: more than %u bytes", JOB_DATA_MAX);
		/* Never NULL, so an empty file is sent as an empty one. */
		j->data = (uint8_t *)xmemdup0(a->data ? a->data : "", a->data_len);
		j->data_len = a->data_len;
	}
	if (a->mode > 07777)
		return fail(c, -EINVAL, "mode: %#o is more than 07777", a->mode);
	j->mode = a->mode;
	j->recursive = a->recursive;
	j->parents = a->parents;
	if (a->key) {
		if (check_str(c, "key", a->key, 1, JOB_KV_KEY_MAX) < 0)
			return -EINVAL;
		j->key = xstrdup(a->key);
	}
	if (a->value) {
		if (check_str(c, "value", a->value, 0, JOB_KV_VALUE_MAX) < 0)
			return -EINVAL;
		j->value = xstrdup(a->value);
	}
	if (a->prefix) {
		if (check_str(c, "prefix", a->prefix, 0, JOB_KV_KEY_MAX) < 0)
			return -EINVAL;
		j->prefix = xstrdup(a->prefix);
	}
	if (a->to) {
		if (check_sandbox_id(c, "to", a->to) < 0)
			return -EINVAL;
		j->to = xstrdup(a->to);
	}
	if (a->snapshot != NULL || a->snapshot_len > 0) {
		if (a->snapshot == NULL)
			return fail(c, -EINVAL, "snapshot: a length but no bytes");
		if (a->snapshot_len > JOB_SNAPSHOT_MAX)
			return fail(c, -EINVAL, "snapshot: more than %u bytes",
			    JOB_SNAPSHOT_MAX);
		j->snapshot = (uint8_t *)xmemdup0(a->snapshot, a->snapshot_len);
		j->snapshot_len = a->snapshot_len;
	}
	if (a->snapshot_key != NULL) {
		if (strlen(a->snapshot_key) != SNAPKEY_HEX ||
		    strspn(a->snapshot_key, "0123456789abcdef") != SNAPKEY_HEX)
			return fail(c, -EINVAL, "snapshot_key: not a snapshot's key "
			    "(64 lower-case hex digits)");
		j->snapshot_key = xstrdup(a->snapshot_key);
	}
	if (a->nlabels && job_set_labels(c, j, a->labels, a->nlabels) < 0)
		return -EINVAL;
	if (a->nfiles > 0 && a->files == NULL)
		return fail(c, -EINVAL, "files: a count but no array");
	if (a->nfiles && job_set_files(c, j, a->files, a->nfiles) < 0)
		return -EINVAL;
	return job_set_root_dirs(c, j, a);
}

/*
 * Builds the job of a sandbox op named op. The sandbox comes from a or o
 * (not two different ones); every op but sandbox.list needs one. Returns
 * 0 with *out owning the job, or -EINVAL/-errno with the message set.
 */
static int
job_build_op(struct sandq *c, const char *op, const struct sandq_op_args *a,
    const struct sandq_job_opts *o, char *idbuf, struct job **out)
{
	static const struct sandq_job_opts no_opts;
	static const struct sandq_op_args no_args;
	const char *sandbox;
	struct job *j = NULL;
	enum job_op jop = OP_NONE;
	size_t total = 0;
	int rc;

	*out = NULL;
	if (idbuf)
		idbuf[0] = '\0';
	if (o == NULL)
		o = &no_opts;
	if (a == NULL)
		a = &no_args;
	for (size_t i = 0; op && i < sizeof(op_table) / sizeof(op_table[0]); i++)
		if (strcmp(op, op_table[i].name) == 0)
			jop = op_table[i].op;
	if (jop == OP_NONE)
		return fail(c, -EINVAL, "op '%.32s': not an op on a sandbox (fs.*, kv.*, "
		    "sandbox.*)", op ? op : "(null)");
	if (a->sandbox && o->sandbox && strcmp(a->sandbox, o->sandbox) != 0)
		return fail(c, -EINVAL, "sandbox: named twice, '%.64s' and '%.64s'",
		    a->sandbox, o->sandbox);
	sandbox = a->sandbox ? a->sandbox : o->sandbox;
	if (sandbox == NULL && jop != OP_SANDBOX_LIST)
		return fail(c, -EINVAL, "sandbox: op '%s' needs one", op);
	if (sandbox && check_sandbox_id(c, "sandbox", sandbox) < 0)
		return -EINVAL;
	if (o->persist != SANDQ_PERSIST_DEFAULT)
		return fail(c, -EINVAL, "persist: only for exec, sh and python");
	if (a->nfiles && o->nfiles)
		return fail(c, -EINVAL, "files: given both as an operand and an option");

	j = job_new();
	if ((rc = job_id(c, o, &j->id)) < 0)
		goto out_free;
	j->op = jop;
	if (sandbox)
		j->sandbox = xstrdup(sandbox);
	if ((rc = job_set_opts(c, j, o, &total)) < 0 ||
	    (rc = job_set_args(c, j, a)) < 0)
		goto out_free;
	if (idbuf)
		snprintf(idbuf, SANDQ_ID_MAX + 1, "%s", j->id);
	*out = j;
	return 0;

out_free:
	job_free(j);
	return rc;
}

/*** Submitting ***/

/* XADD sandq:{T}:jobs * job BYTES. 0 or -EIO/-ENAMETOOLONG. */
static int
xadd(struct sandq *c, const void *buf, size_t len)
{
	char key[KEY_MAX];
	const char *argv[5];
	size_t lens[5];
	redisReply *r = NULL;
	int rc;

	if (key_jobs(key, SANDQ_PREFIX, c->tenant) < 0)
		return fail(c, -ENAMETOOLONG, "key of tenant '%s' too long", c->tenant);
	if ((rc = conn_ready(c)) < 0)
		return rc;
	argv[0] = "XADD";
	lens[0] = 4;
	argv[1] = key;
	lens[1] = strlen(key);
	argv[2] = "*";
	lens[2] = 1;
	argv[3] = "job";
	lens[3] = 3;
	argv[4] = buf;
	lens[4] = len;
	if ((rc = cmd(c, &r, 5, argv, lens)) < 0)
		return rc;
	if (r->type != REDIS_REPLY_STRING)
		rc = fail(c, -EIO, "redis: XADD answered with reply type %d", r->type);
	freeReplyObject(r);
	return rc;
}

/* Encodes and adds a built job; frees it. */
static int
submit_job(struct sandq *c, struct job *j)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if ((rc = payload_job_encode(j, &buf, &len)) < 0) {
		fail(c, rc, "cannot encode the job");
		goto out_job;
	}
	rc = xadd(c, buf, len);
	free(buf);
out_job:
	job_free(j);
	return rc;
}

/* Builds, encodes and adds one job of a run op. */
static int
submit(struct sandq *c, enum job_op op, const char *const *argv,
    const char *text, const struct sandq_job_opts *o, char *idbuf)
{
	struct job *j = NULL;
	int rc;

	if ((rc = job_build(c, op, argv, text, o, idbuf, &j)) < 0)
		return rc;
	return submit_job(c, j);
}

int
sandq_submit_op(struct sandq *c, const char *op, const struct sandq_op_args *a,
    const struct sandq_job_opts *o, char *idbuf)
{
	struct job *j = NULL;
	int rc;

	if ((rc = job_build_op(c, op, a, o, idbuf, &j)) < 0)
		return rc;
	return submit_job(c, j);
}

/*
 * Whether sandq_call() sends a sandbox.create's snapshot by key first:
 * bytes given, no key, and nothing that only an upload takes (limits, a
 * preset) or that two jobs cannot share (a job id).
 */
static bool
key_first(const char *op, const struct sandq_op_args *a,
    const struct sandq_job_opts *o)
{
	static const struct sandq_limits none;

	return a != NULL && strcmp(op, "sandbox.create") == 0 &&
	    a->snapshot != NULL && a->snapshot_len > 0 && a->snapshot_key == NULL &&
	    (o == NULL || (o->id == NULL && o->preset == NULL &&
	    memcmp(&o->limits, &none, sizeof(none)) == 0));
}

int
sandq_call(struct sandq *c, const char *op, const struct sandq_op_args *a,
    const struct sandq_job_opts *o, int64_t timeout_ms,
    struct sandq_result **out)
{
	char id[SANDQ_ID_MAX + 1];
	int rc;

	*out = NULL;
	if (key_first(op, a, o)) {
		struct sandq_op_args k = *a;
		char key[SNAPKEY_HEX + 1];

		if (snapkey_of(a->snapshot, a->snapshot_len, key) == 0) {
			k.snapshot = NULL;
			k.snapshot_len = 0;
			k.snapshot_key = key;
			if ((rc = sandq_submit_op(c, op, &k, o, id)) < 0 ||
			    (rc = sandq_wait(c, id, timeout_ms, out)) < 0)
				return rc;
			if ((*out)->error_code == NULL ||
			    strcmp((*out)->error_code, "snapshot_not_found") != 0)
				return rc;
			sandq_result_free(*out);
			*out = NULL;
		}
	}
	if ((rc = sandq_submit_op(c, op, a, o, id)) < 0)
		return rc;
	return sandq_wait(c, id, timeout_ms, out);
}

int
sandq_snapshot_key(const void *snapshot, size_t len, char key[SNAPKEY_HEX + 1])
{
	return snapkey_of(snapshot, len, key);
}

int
sandq_submit_image_pull(struct sandq *c, const char *image,
    const struct sandq_job_opts *o, char *idbuf)
{
	static const struct sandq_job_opts no_opts;
	struct sandq_job_opts only;
	struct job *j;
	size_t total = 0;
	int rc;

	if (idbuf)
		idbuf[0] = '\0';
	if (o == NULL)
		o = &no_opts;
	if (image == NULL)
		return fail(c, -EINVAL, "image: missing (op image.pull)");
	/* What image.pull takes; image is checked as a run's is. */
	only = (struct sandq_job_opts){ .id = o->id, .priority = o->priority,
	    .deadline_ms = o->deadline_ms, .image = image };
	j = job_new();
	j->op = OP_IMAGE_PULL;
	j->stream = o->stream;
	if ((rc = job_id(c, &only, &j->id)) < 0 ||
	    (rc = job_set_opts(c, j, &only, &total)) < 0) {
		job_free(j);
		return rc;
	}
	if (idbuf)
		snprintf(idbuf, SANDQ_ID_MAX + 1, "%s", j->id);
	return submit_job(c, j);
}

int
sandq_submit_exec(struct sandq *c, const char *const *argv,
    const struct sandq_job_opts *o, char *idbuf)
{
	return submit(c, OP_EXEC, argv, NULL, o, idbuf);
}

int
sandq_submit_sh(struct sandq *c, const char *script,
    const struct sandq_job_opts *o, char *idbuf)
{
	return submit(c, OP_SH, NULL, script, o, idbuf);
}

int
sandq_submit_python(struct sandq *c, const char *code,
    const struct sandq_job_opts *o, char *idbuf)
{
	return submit(c, OP_PYTHON, NULL, code, o, idbuf);
}

int
sandq_submit_raw(struct sandq *c, const void *job, size_t len)
{
	if (job == NULL && len > 0)
		return fail(c, -EINVAL, "raw job: a length but no data");
	return xadd(c, job ? job : "", len);
}

/*** Results ***/

/*
 * Moves a decoded result into the public struct. The output buffers are
 * taken over and grown by one byte for the NUL the header promises,
 * not copied: they can be as large as RESULT_OUTPUT_MAX.
 */
static struct sandq_result *
result_export(struct result *in)
{
	struct sandq_result *r = xcalloc(1, sizeof(*r));

	r->id = in->id;
	in->id = NULL;
	r->status = xstrdup(res_status_name(in->status));
	r->exit_code = in->exit_code;
	r->signal = in->signal;
	r->stdout_data = xreallocarray(in->out, in->out_len + 1, 1);
	r->stdout_data[in->out_len] = '\0';
	r->stdout_len = in->out_len;
	r->stdout_truncated = in->out_truncated;
	in->out = NULL;
	r->stderr_data = xreallocarray(in->err, in->err_len + 1, 1);
	r->stderr_data[in->err_len] = '\0';
	r->stderr_len = in->err_len;
	r->stderr_truncated = in->err_truncated;
	in->err = NULL;
	r->wall_ms = in->wall_ms;
	r->cpu_ms = in->cpu_ms;
	r->max_rss_kb = in->max_rss_kb;
	r->queued_at = in->queued_at;
	r->started_at = in->started_at;
	r->finished_at = in->finished_at;
	r->host = in->host;
	in->host = NULL;
	r->worker = in->worker;
	r->attempt = in->attempt;
	r->error_code = in->error_code;
	in->error_code = NULL;
	r->error_message = in->error_message;
	in->error_message = NULL;
	/* The header promises a message whenever there is an error. */
	if (r->error_code && r->error_message == NULL)
		r->error_message = xstrdup("");
	if (in->nrefused) {
		r->refused = xcalloc(in->nrefused, sizeof(*r->refused));
		for (size_t i = 0; i < in->nrefused; i++) {
			r->refused[i].syscall = in->refused[i].name;
			r->refused[i].count = in->refused[i].count;
			in->refused[i].name = NULL;
		}
		r->nrefused = in->nrefused;
	}
	/* Persistent sandboxes: taken over, like the outputs. */
	r->sandbox = in->sandbox;
	in->sandbox = NULL;
	r->version = in->version;
	r->snapshot = in->snapshot;
	in->snapshot = NULL;
	r->image = in->image;
	in->image = NULL;
	r->image_digest = in->image_digest;
	in->image_digest = NULL;
	r->image_name = in->image_name;
	in->image_name = NULL;
	r->changed = in->changed;
	r->nchanged = in->nchanged;
	in->changed = NULL;
	in->nchanged = 0;
	r->changed_truncated = in->changed_truncated;
	r->added = in->added;
	r->modified = in->modified;
	r->removed = in->removed;
	r->refused_paths = in->refused_paths;
	r->nrefused_paths = in->nrefused_paths;
	in->refused_paths = NULL;
	in->nrefused_paths = 0;
	r->data = in->data;
	r->data_len = in->data_len;
	in->data = NULL;
	in->data_len = 0;
	return r;
}

/* Decodes into e; the public sandq_result_decode() has nowhere to say why. */
static int
result_decode(const void *buf, size_t len, struct sandq_result **out,
    struct err *e)
{
	struct result *in = NULL;
	int rc;

	*out = NULL;
	if ((rc = payload_result_decode(buf, len, &in, e)) < 0)
		return rc;
	*out = result_export(in);
	result_free(in);
	return 0;
}

int
sandq_result_decode(const void *buf, size_t len, struct sandq_result **out)
{
	struct err e = { 0 };

	return result_decode(buf, len, out, &e);
}

/* Decodes a result Redis returned for id, or explains why it cannot. */
static int
reply_result(struct sandq *c, const char *id, const redisReply *r,
    struct sandq_result **out)
{
	struct err e = { 0 };

	if (r->type != REDIS_REPLY_STRING)
		return fail(c, -EPROTO, "redis: result of %s has reply type %d", id,
		    r->type);
	if (result_decode(r->str, r->len, out, &e) < 0)
		return fail(c, -EBADMSG, "result of %s: %s", id, e.msg);
	return 0;
}

/* Checks an id before it becomes part of a key. */
static int
check_id(struct sandq *c, const char *id)
{
	if (id == NULL || !payload_id_valid(id, strlen(id)))
		return fail(c, -EINVAL, "id '%.64s': expected 1..%d bytes of [A-Za-z0-9._:-]",
		    id ? id : "(null)", JOB_ID_MAX);
	return 0;
}

int
sandq_result_get(struct sandq *c, const char *id, struct sandq_result **out)
{
	char key[KEY_MAX];
	const char *argv[2];
	size_t lens[2];
	redisReply *r = NULL;
	int rc;

	*out = NULL;
	if ((rc = check_id(c, id)) < 0)
		return rc;
	if (key_res(key, SANDQ_PREFIX, c->tenant, id) < 0)
		return fail(c, -ENAMETOOLONG, "key of job %s too long", id);
	if ((rc = conn_ready(c)) < 0)
		return rc;
	argv[0] = "GET";
	lens[0] = 3;
	argv[1] = key;
	lens[1] = strlen(key);
	if ((rc = cmd_again(c, &r, 2, argv, lens)) < 0)
		return rc;
	if (r->type == REDIS_REPLY_NIL)
		rc = fail(c, -ENOENT, "no result for %s", id);
	else
		rc = reply_result(c, id, r, out);
	freeReplyObject(r);
	return rc;
}

/*
 * One BLPOP on the done list for up to slice_ms (> 0). Returns 0 with *out
 * set, -EAGAIN when the slice passed without a result, or an error.
 */
static int
blpop_slice(struct sandq *c, const char *id, int64_t slice_ms,
    struct sandq_result **out)
{
	char key[KEY_MAX], secs[32];
	const char *argv[3];
	size_t lens[3];
	redisReply *r = NULL;
	int rc;

	if (key_done(key, SANDQ_PREFIX, c->tenant, id) < 0)
		return fail(c, -ENAMETOOLONG, "key of job %s too long", id);
	/* Redis 6 and later read the timeout as seconds with a fraction. */
	snprintf(secs, sizeof(secs), "%" PRId64 ".%03" PRId64, slice_ms / 1000,
	    slice_ms % 1000);
	argv[0] = "BLPOP";
	lens[0] = 5;
	argv[1] = key;
	lens[1] = strlen(key);
	argv[2] = secs;
	lens[2] = strlen(secs);
	/* The socket must outlast the server-side wait, or hiredis cuts it. */
	if (redisSetTimeout(c->rc, tv_ms(slice_ms + BLPOP_GRACE_MS)) != REDIS_OK)
		return fail_io(c);
	rc = cmd(c, &r, 3, argv, lens);
	if (c->rc->err == 0 && redisSetTimeout(c->rc, tv_ms(CMD_TIMEOUT_MS)) != REDIS_OK) {
		freeReplyObject(r);
		return fail_io(c);
	}
	if (rc < 0)
		return rc;
	if (r->type == REDIS_REPLY_NIL)
		rc = -EAGAIN;
	else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		rc = fail(c, -EPROTO, "redis: BLPOP answered with reply type %d", r->type);
	else
		rc = reply_result(c, id, r->element[1], out);
	freeReplyObject(r);
	return rc;
}

int
sandq_wait(struct sandq *c, const char *id, int64_t timeout_ms,
    struct sandq_result **out)
{
	int64_t deadline = 0;
	bool retried = false;
	int rc;

	*out = NULL;
	if ((rc = check_id(c, id)) < 0)
		return rc;
	/* A timeout past any real wait (INT64_MAX) would overflow: no limit. */
	if (timeout_ms > INT64_MAX / 4)
		timeout_ms = -1;
	if (timeout_ms >= 0)
		deadline = mono_ns() / 1000000 + timeout_ms;
	for (;;) {
		int64_t slice = WAIT_SLICE_MS;

		rc = sandq_result_get(c, id, out);
		if (rc != -ENOENT)
			return rc;
		if (timeout_ms >= 0) {
			int64_t left = deadline - mono_ns() / 1000000;

			if (left <= 0)
				break;
			if (left < slice)
				slice = left;
		}
		rc = blpop_slice(c, id, slice, out);
		/*
		 * A connection that broke during the BLPOP is opened again by
		 * the next GET, once: the result is still in res:ID even if
		 * the popped element was lost with the socket.
		 */
		if (rc == -EIO && c->rc->err != 0 && !retried) {
			retried = true;
			continue;
		}
		if (rc != -EAGAIN)
			return rc;
		retried = false;
	}
	return fail(c, -ETIMEDOUT, "no result for %s after %" PRId64 " ms", id,
	    timeout_ms);
}

void
sandq_result_free(struct sandq_result *r)
{
	if (r == NULL)
		return;
	free(r->id);
	free(r->status);
	free(r->stdout_data);
	free(r->stderr_data);
	free(r->host);
	free(r->error_code);
	free(r->error_message);
	for (size_t i = 0; i < r->nrefused; i++)
		free(r->refused[i].syscall);
	free(r->refused);
	free(r->sandbox);
	free(r->snapshot);
	free(r->image);
	free(r->image_digest);
	free(r->image_name);
	for (size_t i = 0; i < r->nchanged; i++)
		free(r->changed[i]);
	free(r->changed);
	for (size_t i = 0; i < r->nrefused_paths; i++)
		free(r->refused_paths[i]);
	free(r->refused_paths);
	free(r->data);
	free(r);
}

int
sandq_result_exit_status(const struct sandq_result *r)
{
	enum res_status st;

	if (r == NULL || r->status == NULL || res_status_parse(r->status, &st) < 0)
		return 125;
	switch (st) {
	case ST_OK:
		return 0;
	case ST_EXIT:
		/* An exit status is 0..255; anything else is not one we can give. */
		return r->exit_code >= 0 && r->exit_code <= 255 ? r->exit_code : 125;
	case ST_SIGNAL:
		return r->signal > 0 && r->signal < 128 ? 128 + r->signal : 125;
	case ST_TIMEOUT:
	case ST_CPU_LIMIT:
	case ST_MEMORY_LIMIT:
	case ST_PIDS_LIMIT:
	case ST_OUTPUT_LIMIT:
	case ST_DISK_LIMIT:
		return 124;
	case ST_REJECTED:
	case ST_CANCELLED:
	case ST_EXPIRED:
	case ST_INTERNAL:
	case ST__COUNT:
		break;
	}
	return 125;
}

/*** Live output ***/

struct sandq_stream {
	struct sandq *c;		/* its own connection: XREAD BLOCK */
	char key[KEY_MAX];		/* PREFIX:{T}:out:ID */
	char id[SANDQ_ID_MAX + 1];
	char last[64];			/* the last entry id read */
	redisReply *batch;		/* entries read, not yet handed out */
	size_t next;			/* the next of batch's entries */
	bool done;
};

int
sandq_stream_open(struct sandq *c, const char *id, struct sandq_stream **out)
{
	struct sandq_stream *s;
	int rc;

	*out = NULL;
	if ((rc = check_id(c, id)) < 0)
		return rc;
	s = xcalloc(1, sizeof(*s));
	s->c = xcalloc(1, sizeof(*s->c));
	s->c->url = c->url;
	s->c->tenant = xstrdup(c->tenant);
	if (key_out(s->key, SANDQ_PREFIX, c->tenant, id) < 0 || conn_open(s->c) < 0) {
		rc = fail(c, -EIO, "stream of %s: %s", id, s->c->errbuf);
		sandq_stream_close(s);
		return rc;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	snprintf(s->last, sizeof(s->last), "0-0");
	*out = s;
	return 0;
}

/* The entry's field name's value, or NULL. */
static const redisReply *
entry_field(const redisReply *fields, const char *name)
{
	for (size_t i = 0; i + 1 < fields->elements; i += 2)
		if (fields->element[i]->type == REDIS_REPLY_STRING &&
		    strcmp(fields->element[i]->str, name) == 0)
			return fields->element[i + 1];
	return NULL;
}

int
sandq_stream_next(struct sandq_stream *s, int64_t timeout_ms, int *fd,
    const void **data, size_t *len)
{
	char block[24];
	int rc;

	while (!s->done) {
		if (s->batch != NULL && s->next < s->batch->elements) {
			const redisReply *e = s->batch->element[s->next++], *f, *d;

			if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
				continue;
			snprintf(s->last, sizeof(s->last), "%s", e->element[0]->str);
			if (entry_field(e->element[1], "eof") != NULL) {
				s->done = true;
				break;
			}
			f = entry_field(e->element[1], "fd");
			d = entry_field(e->element[1], "data");
			if (f == NULL || d == NULL || d->type != REDIS_REPLY_STRING)
				continue;
			*fd = atoi(f->str);
			*data = d->str;
			*len = d->len;
			return 1;
		}
		if (s->batch != NULL) {
			freeReplyObject(s->batch);
			s->batch = NULL;
		}
		{
			redisReply *r = NULL;
			const char *argv[] = { "XREAD", "COUNT", "256", "BLOCK", block, "STREAMS",
			    s->key, s->last };
			size_t lens[8];

			snprintf(block, sizeof(block), "%lld",
			    (long long)(timeout_ms < 0 || timeout_ms > WAIT_SLICE_MS ?
			    WAIT_SLICE_MS : timeout_ms));
			for (size_t i = 0; i < 8; i++)
				lens[i] = strlen(argv[i]);
			if ((rc = cmd(s->c, &r, 8, argv, lens)) < 0)
				return rc;
			if (r->type == REDIS_REPLY_NIL) {
				/* Nothing new: a job answered without output (a
				 * refusal) has no eof of its own; its result ends it. */
				struct sandq_result *res = NULL;

				freeReplyObject(r);
				if (sandq_result_get(s->c, s->id, &res) == 0) {
					sandq_result_free(res);
					s->done = true;
					break;
				}
				if (timeout_ms >= 0)
					return -ETIMEDOUT;
				continue;
			}
			if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 ||
			    r->element[0]->elements != 2) {
				freeReplyObject(r);
				return fail(s->c, -EIO, "stream of %s: an unexpected reply", s->id);
			}
			/* [[key, [entries]]]: keep the reply, hand out its entries. */
			s->batch = r;
			s->next = 0;
			{
				redisReply *entries = r->element[0]->element[1];

				r->element[0]->element[1] = NULL;
				freeReplyObject(r);
				s->batch = entries;
			}
		}
	}
	return 0;
}

void
sandq_stream_close(struct sandq_stream *s)
{
	if (s == NULL)
		return;
	if (s->batch != NULL)
		freeReplyObject(s->batch);
	sandq_close(s->c);
	free(s);
}
