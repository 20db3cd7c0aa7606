/*
 * persist.c - a persistent sandbox's snapshot inside its init: materialised
 * into /workspace before the job, captured back after it.
 *
 * Both directions run in the sandbox's init, as the sandbox's user inside
 * its namespaces: the worker never walks a tree a job has had its hands
 * on. The worker hands init the head snapshot as a sealed memfd with the
 * job's spec; init keeps that descriptor for the capture and maps it only
 * while it reads it.
 *
 * Path rules (store/perms.h, docs/paths.md) are enforced twice:
 *  - by what is materialised and how: `none` paths are not written at all,
 *    `view` files only with their size (sparse zeros, mode 0), and every
 *    subtree whose level is below write is bind-mounted read-only over
 *    itself (a write subtree below it is bound read-write again), so the
 *    job can neither change, chmod, rename nor unlink it. Symlinks cannot
 *    be mount points: their rule is kept at commit only;
 *  - at commit: workspace_capture_rules() keeps every path below write
 *    exactly as the snapshot had it, and lists what it refused.
 *
 * The shell session (sh jobs only): the script is prefixed, on its first
 * line so line numbers stay the same, with an EXIT trap written in bash
 * builtins only (no fork) that saves $PWD and every exported variable to
 * /tmp/.sandq-session. Init reads that file back (no symlink followed,
 * bounded) after the job and keeps it in the snapshot's sandq_session
 * table; the next sh job on the sandbox starts there unless it sets cwd or
 * env itself. A script that replaces its shell (exec), or a job killed,
 * saves nothing, and the session stays as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../store/agentfs.h"
#include "../store/perms.h"
#include "../store/workspace.h"
#include "internal.h"

#define PERSIST_MOUNTS_MAX 1024		/* bind mounts path rules may need */
#define SESSION_FILE "/tmp/.sandq-session"
#define SESSION_MAX (1024 * 1024)	/* bytes of a saved session */

/* The EXIT trap that saves the session: one line, ending in "; ". */
static const char session_trap[] =
	"__sandq_session() { local - __n; set +eu; { printf 'cwd=%s\\0' \"$PWD\"; "
	"for __n in \"${!A@}\" \"${!B@}\" \"${!C@}\" \"${!D@}\" \"${!E@}\" \"${!F@}\" "
	"\"${!G@}\" \"${!H@}\" \"${!I@}\" \"${!J@}\" \"${!K@}\" \"${!L@}\" \"${!M@}\" "
	"\"${!N@}\" \"${!O@}\" \"${!P@}\" \"${!Q@}\" \"${!R@}\" \"${!S@}\" \"${!T@}\" "
	"\"${!U@}\" \"${!V@}\" \"${!W@}\" \"${!X@}\" \"${!Y@}\" \"${!Z@}\" "
	"\"${!a@}\" \"${!b@}\" \"${!c@}\" \"${!d@}\" \"${!e@}\" \"${!f@}\" "
	"\"${!g@}\" \"${!h@}\" \"${!i@}\" \"${!j@}\" \"${!k@}\" \"${!l@}\" \"${!m@}\" "
	"\"${!n@}\" \"${!o@}\" \"${!p@}\" \"${!q@}\" \"${!r@}\" \"${!s@}\" \"${!t@}\" "
	"\"${!u@}\" \"${!v@}\" \"${!w@}\" \"${!x@}\" \"${!y@}\" \"${!z@}\" \"${!_@}\"; do "
	"[[ ${!__n@a} == *x* ]] && printf 'env=%s=%s\\0' \"$__n\" \"${!__n}\"; done; } "
	">" SESSION_FILE " 2>/dev/null; }; trap '__sandq_session || :' EXIT; ";

/*** Mapping the snapshot ***/

static int
snapshot_open(int snapfd, struct agentfs **fs, struct err *e)
{
	struct stat st;
	void *map;
	int rc;

	*fs = NULL;
	if (fstat(snapfd, &st) < 0)
		return err_set(e, -errno, "snapshot: %s", strerror(errno));
	if (st.st_size <= 0 || (uint64_t)st.st_size > AGENTFS_BLOB_MAX)
		return err_set(e, -EBADMSG, "snapshot: bad size %lld", (long long)st.st_size);
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, snapfd, 0);
	if (map == MAP_FAILED)
		return err_set(e, -errno, "snapshot: mmap: %s", strerror(errno));
	/* The worker read these bytes back under their SHA-256. */
	rc = agentfs_open_trusted(map, (size_t)st.st_size, fs, e);
	munmap(map, (size_t)st.st_size);
	return rc;
}

static int
rules_compile(const struct job *j, struct perms *p, struct err *e)
{
	struct perm_rule *rules = NULL;
	int rc;

	if (j->nperms > 0)
		rules = xcalloc(j->nperms, sizeof(*rules));
	for (size_t i = 0; i < j->nperms; i++) {
		rules[i].pattern = j->perms[i].pattern;
		if (perms_parse_level(j->perms[i].level, &rules[i].level) < 0) {
			free(rules);
			return err_set(e, -EINVAL, "path rule %zu: bad level '%s'", i + 1,
			    j->perms[i].level);
		}
	}
	rc = perms_compile(p, rules, j->nperms, j->perm_preset, e);
	free(rules);
	return rc;
}

/*** Materialise ***/

struct marks {
	unsigned mounts;
	struct err *e;
};

/* Binds one subtree over itself, read-only or read-write by its level. */
static int
mark_cb(const char *path, enum perm_level level, enum agentfs_kind kind, void *arg)
{
	struct marks *mk = arg;
	unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
	char where[AGENTFS_PATH_MAX + 16];

	if (kind == AGENTFS_SYMLINK)
		return 0;	/* cannot be a mount point; enforced at commit */
	if (++mk->mounts > PERSIST_MOUNTS_MAX)
		return err_set(mk->e, -E2BIG, "path rules: more than %d paths need "
		    "their own protection; use broader rules", PERSIST_MOUNTS_MAX);
	snprintf(where, sizeof(where), "/workspace%s", strcmp(path, "/") == 0 ? "" : path);
	if (mount(where, where, NULL, MS_BIND, NULL) < 0)
		return err_set(mk->e, -errno, "path rules: bind %s: %s", path, strerror(errno));
	if (level < PERM_WRITE)
		flags |= MS_RDONLY;
	if (mount(NULL, where, NULL, flags, NULL) < 0)
		return err_set(mk->e, -errno, "path rules: protect %s: %s", path,
		    strerror(errno));
	return 0;
}

/* Splits a saved "K=V\0K=V\0" environment into the job's env array. */
static void
session_env_apply(struct job *j, const char *buf, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += buf[i] == '\0';
	if (n == 0 || n > JOB_ENV_MAX)
		return;
	j->env = xcalloc(n + 1, sizeof(*j->env));
	j->nenv = 0;
	for (size_t off = 0; off < len && j->nenv < n;) {
		size_t l = strlen(buf + off);

		j->env[j->nenv++] = xstrdup(buf + off);
		off += l + 1;
	}
}

int
persist_materialise(int snapfd, struct job *j, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *fs = NULL;
	struct perms p = { 0 };
	uint64_t bytes = 0, entries = 0;
	struct marks mk = { .e = e };
	int rc, wsfd = -1;

	if ((rc = snapshot_open(snapfd, &fs, e)) < 0)
		return rc;
	if ((rc = rules_compile(j, &p, e)) < 0)
		goto out;
	if ((rc = agentfs_usage(fs, &bytes, &entries, e)) < 0)
		goto out;
	/* The snapshot, plus the job's own disk and inode allowance. */
	if ((rc = mount_job_tmpfs(&j->limits, bytes + entries * 4096, entries, e)) < 0)
		goto out;
	wsfd = open("/workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (wsfd < 0) {
		rc = err_set(e, -errno, "open /workspace: %s", strerror(errno));
		goto out;
	}
	if ((rc = workspace_materialise_rules(fs, wsfd, &lim, &p, mark_cb, &mk, e)) < 0)
		goto out;
	if (j->op == OP_SH) {
		void *val = NULL;
		size_t len = 0;
		struct err ignore = { 0 };

		struct stat st;

		/* A directory that is gone (or was in /tmp) means /workspace. */
		if (j->cwd == NULL && agentfs_session_get(fs, "cwd", &val, &len, &ignore) == 0 &&
		    len > 0 && len <= JOB_PATH_MAX && ((char *)val)[0] == '/' &&
		    strlen(val) == len && stat(val, &st) == 0 && S_ISDIR(st.st_mode)) {
			j->cwd = val;
			val = NULL;
		}
		free(val);
		val = NULL;
		if (j->env == NULL && agentfs_session_get(fs, "env", &val, &len, &ignore) == 0)
			session_env_apply(j, val, len);
		free(val);
		if (j->persist && j->argc == 3) {
			char *s = NULL;

			xasprintf(&s, "%s%s", session_trap, j->argv[2]);
			free(j->argv[2]);
			j->argv[2] = s;
		}
	}
out:
	if (wsfd >= 0)
		close(wsfd);
	perms_free(&p);
	agentfs_close(fs);
	return rc;
}

/*** Capture ***/

static bool
env_name_keep(const char *s, size_t n)
{
	static const char *const skip[] = { "PWD", "OLDPWD", "SHLVL", "_" };

	if (n == 0 || n > JOB_ENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (strlen(skip[i]) == n && memcmp(skip[i], s, n) == 0)
			return false;
	return true;
}

/*
 * Reads what the trap saved: the job wrote it, so it is read like anything
 * else of the job's (no symlink, regular file, bounded) and parsed strictly.
 * Returns 0 and fills the session, or -1 to keep the old one.
 */
static int
session_read(char **cwd, char **env, size_t *envlen)
{
	struct stat st;
	char *buf, *out;
	size_t n = 0, o = 0, nvars = 0;
	ssize_t r;
	int fd;

	*cwd = *env = NULL;
	*envlen = 0;
	fd = open(SESSION_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > SESSION_MAX) {
		close(fd);
		return -1;
	}
	buf = xmalloc((size_t)st.st_size + 1);
	while (n < (size_t)st.st_size &&
	    (r = read(fd, buf + n, (size_t)st.st_size - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = '\0';
	out = xmalloc(n + 1);
	for (size_t off = 0; off < n;) {
		const char *rec = buf + off;
		size_t l = strnlen(rec, n - off);

		if (off + l >= n)
			break;		/* no terminating NUL: cut short, drop it */
		off += l + 1;
		if (l > 4 && memcmp(rec, "cwd=", 4) == 0 && *cwd == NULL) {
			if (rec[4] == '/' && l - 4 <= JOB_PATH_MAX)
				*cwd = xstrdup(rec + 4);
		} else if (l > 4 && memcmp(rec, "env=", 4) == 0) {
			const char *kv = rec + 4, *eq = memchr(kv, '=', l - 4);

			if (eq != NULL && env_name_keep(kv, (size_t)(eq - kv)) &&
			    nvars < JOB_ENV_MAX && l - 4 <= JOB_ARG_MAX) {
				memcpy(out + o, kv, l - 4 + 1);
				o += l - 4 + 1;
				nvars++;
			}
		}
	}
	free(buf);
	if (*cwd == NULL) {
		free(out);
		return -1;
	}
	*env = out;
	*envlen = o;
	return 0;
}

/* Adds the job's tool_calls row from the worker's JSON record. */
static int
call_add(struct agentfs *fs, const void *rec, size_t len, struct err *e)
{
	json_error_t jerr;
	json_t *o = json_loadb(rec, len, 0, &jerr), *v;
	char *params = NULL, *result = NULL;
	const char *name, *status, *error = NULL;
	int rc;

	if (o == NULL || !json_is_object(o))
		fatalx("the worker sent a bad tool call record: %s", jerr.text);
	name = json_string_value(json_object_get(o, "name"));
	status = json_string_value(json_object_get(o, "status"));
	if ((v = json_object_get(o, "error")) != NULL && json_is_string(v))
		error = json_string_value(v);
	if ((v = json_object_get(o, "parameters")) != NULL)
		params = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if ((v = json_object_get(o, "result")) != NULL)
		result = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	rc = agentfs_tool_call_add(fs, name ? name : "job", params, result, error,
	    status ? status : "error",
	    json_integer_value(json_object_get(o, "started_ms")),
	    json_integer_value(json_object_get(o, "completed_ms")), e);
	free(params);
	free(result);
	json_decref(o);
	return rc;
}

/* "A/M/D/R path" records after three counters, as one bounded frame. */
static int
send_changes(int ctl, const struct workspace_changes *ch)
{
	char *buf = xmalloc(MSG_MAX);
	size_t n = 0;
	int rc;
	uint64_t hdr[4] = { ch->added, ch->modified, ch->removed, ch->refused };

	memcpy(buf, hdr, sizeof(hdr));
	n = sizeof(hdr);
	for (size_t i = 0; i < ch->nlist + ch->nrefused_list; i++) {
		const char *path = i < ch->nlist ? ch->list[i].path :
		    ch->refused_list[i - ch->nlist];
		char op = i < ch->nlist ? (char)ch->list[i].op : 'R';
		size_t l = strlen(path);

		if (n + l + 2 > MSG_MAX)
			break;	/* the counters stay exact; the worker flags it */
		buf[n++] = op;
		memcpy(buf + n, path, l + 1);
		n += l + 1;
	}
	rc = msg_send(ctl, MSG_SBX_CHANGES, 0, buf, n, -1);
	free(buf);
	return rc;
}

int
persist_capture(int ctl, int snapfd, const struct job *j, const void *rec,
    size_t reclen, struct err *e)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct workspace_changes ch = { 0 };
	struct agentfs *base = NULL, *out = NULL;
	struct perms p = { 0 };
	void *blob = NULL;
	size_t bloblen = 0;
	int rc, wsfd = -1;

	if ((rc = snapshot_open(snapfd, &base, e)) < 0)
		return rc;
	if ((rc = rules_compile(j, &p, e)) < 0)
		goto out;
	wsfd = open("/workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (wsfd < 0) {
		rc = err_set(e, -errno, "open /workspace: %s", strerror(errno));
		goto out;
	}
	if ((rc = workspace_capture_rules(wsfd, base, &lim, &p, &out, &ch, e)) < 0)
		goto out;
	agentfs_close(base);
	base = NULL;
	if ((rc = call_add(out, rec, reclen, e)) < 0)
		goto out;
	if (j->op == OP_SH) {
		char *cwd = NULL, *env = NULL;
		size_t envlen = 0;

		if (session_read(&cwd, &env, &envlen) == 0 &&
		    ((rc = agentfs_session_set(out, "cwd", cwd, strlen(cwd), e)) < 0 ||
		    (rc = agentfs_session_set(out, "env", env, envlen, e)) < 0)) {
			free(cwd);
			free(env);
			goto out;
		}
		free(cwd);
		free(env);
	}
	if ((rc = agentfs_to_blob(out, &blob, &bloblen, e)) < 0)
		goto out;
	if (bloblen > MSG_BLOB_MAX) {
		rc = err_set(e, -EFBIG, "the new snapshot is %zu bytes, over the %u-byte "
		    "limit", bloblen, MSG_BLOB_MAX);
		goto out;
	}
	if ((rc = send_changes(ctl, &ch)) < 0 ||
	    (rc = msg_send(ctl, MSG_SBX_SNAPSHOT, 0, blob, bloblen, -1)) < 0)
		err_set(e, rc, "hand the snapshot over: %s", strerror(-rc));
out:
	free(blob);
	if (wsfd >= 0)
		close(wsfd);
	workspace_changes_free(&ch);
	perms_free(&p);
	agentfs_close(out);
	agentfs_close(base);
	return rc;
}
