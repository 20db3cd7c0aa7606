/*
 * cli_sandbox.c - the verbs of sandq on persistent sandboxes:
 *   sandq sandbox create|ls|info|fork|rm|history|export|import
 *   sandq fs ls|cat|put|get|rm|stat
 *   sandq kv get|set|del|keys
 * Each verb is one op (docs/protocol.md "Sandboxes") sent with
 * sandq_call(); fs get is several (fs.stat, fs.list, one fs.read per file).
 * This file holds the options, the sandbox verbs and the entry point with
 * its verb table; the fs and kv verbs are in cli_fs.c,
 * running an op and printing its result in cli_output.c, and
 * cli_sandbox_int.h is what the three share.
 *
 * The verbs, their output and exit statuses are a contract scripts rely on
 * (issue 4, "Interfaces scripts rely on"); the manual pages (cli_man.c)
 * state it. Output: the op's data in words (tables for ls and history, "key:
 * value" lines for info and stat), or with --json the data converted from
 * msgpack to one line of JSON (bin as base64). A rejected op prints
 * "sandq: CODE: MESSAGE" and exits with 125, as a rejected job does.
 *
 * SECURITY. The server's answers are not trusted to name safe local
 * paths: see cli_fs.c for fs get.
 * --image, --workdir and --from-image-dir make a sandbox on an image
 * (docs/images.md "Sandboxes on images"): the server checks them, and
 * seeds version 1 from the image's folder in a sandbox of its own.
 * --from DIR reads the folder with workspace_capture_rules(), which walks it with
 * the same care (see workspace/workspace.h), then drops what .gitignore files
 * and .git leave out.
 *
 * Sections: options, snapshots from a folder, verbs, entry point.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"
#include "../common/err.h"
#include "../common/xmalloc.h"
#include "../libsandq/sandq.h"
#include "../proto/job.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_sandbox.h"
#include "cli_sandbox_int.h"
#include "gitignore.h"

#define GITIGNORE_FILE_MAX (1u << 20)	/* bytes of one .gitignore read */

/* Options of the group verbs (bits of struct sbx.given). */
enum {
	S_REDIS = 1,
	S_TENANT,
	S_WAIT_TIMEOUT,
	S_JSON,
	S_HELP,
	S_FROM,
	S_LABEL,
	S_RECURSIVE,
	S_PERM,
	S_PERM_PRESET,
	S_ID,
	S_KEEP_SYMLINKS,
	S_IMAGE,
	S_WORKDIR,
	S_FROM_IMAGE_DIR,
	S_ALLOW,
};

#define SB(o) (1u << (o))
#define SOPTS_CONN (SB(S_REDIS) | SB(S_TENANT) | SB(S_WAIT_TIMEOUT) | \
	SB(S_JSON) | SB(S_HELP) | SB(S_ID))
#define SOPTS_PERMS (SB(S_PERM) | SB(S_PERM_PRESET))

static const struct option sbx_opts[] = {
	{ "redis", required_argument, NULL, S_REDIS },
	{ "tenant", required_argument, NULL, S_TENANT },
	{ "wait-timeout", required_argument, NULL, S_WAIT_TIMEOUT },
	{ "json", no_argument, NULL, S_JSON },
	{ "help", no_argument, NULL, S_HELP },
	{ "from", required_argument, NULL, S_FROM },
	{ "label", required_argument, NULL, S_LABEL },
	{ "recursive", no_argument, NULL, S_RECURSIVE },
	{ "perm", required_argument, NULL, S_PERM },
	{ "perm-preset", required_argument, NULL, S_PERM_PRESET },
	{ "id", required_argument, NULL, S_ID },
	{ "keep-symlinks", no_argument, NULL, S_KEEP_SYMLINKS },
	{ "image", required_argument, NULL, S_IMAGE },
	{ "workdir", required_argument, NULL, S_WORKDIR },
	{ "from-image-dir", required_argument, NULL, S_FROM_IMAGE_DIR },
	{ "allow", required_argument, NULL, S_ALLOW },
	{ NULL, 0, NULL, 0 },
};

bool
cli_sandbox_is_group(const char *name)
{
	return strcmp(name, "sandbox") == 0 || strcmp(name, "fs") == 0 ||
	    strcmp(name, "kv") == 0;
}

/*** Options ***/

static bool
sandbox_id_ok(const char *id)
{
	return payload_id_valid(id, strlen(id)) && strcmp(id, ".") != 0 &&
	    strcmp(id, "..") != 0;
}

/* Checks an operand that names a sandbox. */
static int
check_id(const struct sbx *s, const char *what, const char *id)
{
	if (!sandbox_id_ok(id))
		return cli__usage(s, "%s '%s': expected 1 to %d characters of "
		    "A-Z a-z 0-9 . _ : - (not . or ..)", what, id, JOB_SANDBOX_ID_MAX);
	return 0;
}

/* Records one option. 0 or a usage error's status. */
static int
opt_apply(struct sbx *s, int o, const char *arg)
{
	uint64_t u = 0;

	s->given |= SB(o);
	switch (o) {
	case S_REDIS:
		s->redis = arg;
		return 0;
	case S_TENANT:
		s->tenant = arg;
		return 0;
	case S_WAIT_TIMEOUT:
		if (cli_parse_seconds(arg, &u) < 0)
			return cli__usage(s, "--wait-timeout '%s': expected a number of "
			    "seconds, such as 60 or 2.5", arg);
		s->wait_ms = (int64_t)u;
		return 0;
	case S_JSON:
		s->json = true;
		return 0;
	case S_HELP:
		s->help = true;
		return 0;
	case S_FROM:
		if (arg[0] == '\0')
			return cli__usage(s, "--from: expected a folder");
		s->from = arg;
		return 0;
	case S_RECURSIVE:
		s->recursive = true;
		return 0;
	/* Checked by libsandq as the server checks them (proto/path.h). */
	case S_IMAGE:
		if (arg[0] == '\0')
			return cli__usage(s, "--image: expected host or a reference");
		s->image = arg;
		return 0;
	case S_WORKDIR:
		s->workdir = arg;
		return 0;
	case S_FROM_IMAGE_DIR:
		s->from_image_dir = arg;
		return 0;
	case S_ALLOW:
		/* The grammar and the tenant's list are the server's to judge. */
		if (s->nallow == JOB_ALLOW_MAX || arg[0] == '\0')
			return cli__usage(s, "--allow: at most %d patterns, none empty",
			    JOB_ALLOW_MAX);
		s->allow = xreallocarray(s->allow, s->nallow + 2, sizeof(*s->allow));
		s->allow[s->nallow++] = arg;
		s->allow[s->nallow] = NULL;
		return 0;
	case S_KEEP_SYMLINKS:
		s->keep_symlinks = true;
		return 0;
	case S_ID:
		if (!payload_id_valid(arg, strlen(arg)))
			return cli__usage(s, "--id '%s': expected 1 to %d characters of "
			    "A-Z a-z 0-9 . _ : -", arg, SANDQ_ID_MAX);
		s->id = arg;
		return 0;
	case S_LABEL: {
		const char *eq = strchr(arg, '=');
		size_t klen = eq ? (size_t)(eq - arg) : 0;

		if (eq == NULL || klen == 0)
			return cli__usage(s, "--label '%s': expected KEY=VALUE", arg);
		if (klen > JOB_LABEL_MAX || strlen(eq + 1) > JOB_LABEL_MAX)
			return cli__usage(s, "--label '%.64s...': key and value are at most "
			    "%d bytes each", arg, JOB_LABEL_MAX);
		if (s->nlabels >= JOB_LABELS_MAX)
			return cli__usage(s, "--label: more than %d labels", JOB_LABELS_MAX);
		for (size_t i = 0; i < s->nlabels; i++)
			if (strlen(s->labels[i].key) == klen &&
			    strncmp(s->labels[i].key, arg, klen) == 0)
				return cli__usage(s, "--label: key '%.*s' given twice", (int)klen,
				    arg);
		s->labels = xreallocarray(s->labels, s->nlabels + 1, sizeof(*s->labels));
		s->labels[s->nlabels].key = xmemdup0(arg, klen);
		s->labels[s->nlabels++].value = eq + 1;
		return 0;
	}
	case S_PERM: {
		char msg[320];

		if (cli_perm_add(&s->perms, &s->nperms, arg, msg, sizeof(msg)) < 0)
			return cli__usage(s, "%s", msg);
		return 0;
	}
	case S_PERM_PRESET:
		if ((s->perm_preset = cli_perm_preset(arg)) == NULL)
			return cli__usage(s, "--perm-preset '%s': expected agent-edit, agent-safe, "
			    "read-only, full-access, development or view-only", arg);
		return 0;
	default:
		return cli__usage(s, "internal error: option %d", o);
	}
}

/* The spelling of an option, for messages. */
static const char *
opt_name(int o)
{
	for (const struct option *lo = sbx_opts; lo->name; lo++)
		if (lo->val == o)
			return lo->name;
	return "?";
}

static void
sbx_free(struct sbx *s)
{
	for (size_t i = 0; i < s->nlabels; i++)
		free((char *)(uintptr_t)s->labels[i].key);
	free(s->labels);
	for (size_t i = 0; i < s->nperms; i++)
		free((char *)(uintptr_t)s->perms[i].pattern);
	free(s->perms);
	free(s->allow);
}

/*** Snapshots from a folder ***/

/* An entry of a captured snapshot. */
struct snap_ent {
	char *path;			/* "/a/b" */
	bool is_dir;
	bool is_gitignore;		/* a regular file named .gitignore */
	bool drop;			/* left out */
};

struct snap_list {
	struct snap_ent *v;
	size_t n, cap;
};

static int
collect_cb(const struct agentfs_entry *ent, void *arg)
{
	struct snap_list *l = arg;

	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 256;
		l->v = xreallocarray(l->v, l->cap, sizeof(*l->v));
	}
	l->v[l->n].path = xstrdup(ent->path);
	l->v[l->n].is_dir = ent->kind == AGENTFS_DIR;
	l->v[l->n].is_gitignore = ent->kind == AGENTFS_FILE &&
	    strcmp(ent->name, ".gitignore") == 0;
	l->v[l->n].drop = false;
	l->n++;
	return 0;
}

/* Number of '/' in p: the depth of a path. */
static size_t
depth(const char *p)
{
	size_t n = 0;

	for (; *p; p++)
		n += *p == '/';
	return n;
}

/* True if a component of path (absolute) is ".git". */
static bool
in_dot_git(const char *path)
{
	const char *p = strstr(path, "/.git");

	for (; p; p = strstr(p + 1, "/.git"))
		if (p[5] == '\0' || p[5] == '/')
			return true;
	return false;
}

/*
 * Loads every .gitignore of the snapshot, shallower directories first so
 * deeper files take precedence (gitignore.h).
 */
static int
load_gitignores(struct agentfs *fs, struct snap_list *l, struct gitignore *g,
    const char *dir)
{
	size_t maxd = 0;
	struct err e = { 0 };

	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].is_gitignore && depth(l->v[i].path) > maxd)
			maxd = depth(l->v[i].path);
	for (size_t d = 1; d <= maxd; d++) {
		for (size_t i = 0; i < l->n; i++) {
			struct snap_ent *en = &l->v[i];
			char *base;
			void *text = NULL;
			size_t len = 0;
			int rc;

			if (!en->is_gitignore || depth(en->path) != d || in_dot_git(en->path))
				continue;
			if ((rc = agentfs_read(fs, en->path, &text, &len, &e)) < 0)
				return cli_fail("--from %s: reading %s: %s", dir, en->path, e.msg);
			/* The directory holding it, without the leading '/'. */
			base = xmemdup0(en->path + 1, strlen(en->path + 1) -
			    strlen("/.gitignore") + (d == 1 ? 1 : 0));
			if (d == 1)
				base[0] = '\0';
			rc = len > GITIGNORE_FILE_MAX ? 0 :
			    gitignore_add(g, base, text, len, &e);
			if (len > GITIGNORE_FILE_MAX)
				cli_warn("--from %s: %s is over %u bytes; not "
				    "read", dir, en->path, GITIGNORE_FILE_MAX);
			free(base);
			free(text);
			if (rc < 0)
				return cli_fail("--from %s: %s", dir, e.msg);
		}
	}
	return 0;
}

/*
 * Builds the snapshot of folder dir for sandbox.create: captures it with
 * workspace_capture_rules() (base NULL: every hostile-tree check applies;
 * .git hidden by a rule), then removes what the .gitignore files ignore,
 * children first. On
 * success *blob (malloc'd) holds the database. Returns 0 or an exit status.
 */
static int
snapshot_from_dir(const char *dir, void **blob, size_t *bloblen)
{
	struct workspace_limits lim = WORKSPACE_LIMITS_DEFAULT;
	struct agentfs *fs = NULL;
	struct gitignore *g = gitignore_new();
	static const struct perm_rule skip_git[] = {
		{ "**/.git", PERM_NONE }, { "**/.git/**", PERM_NONE },
	};
	struct workspace_changes ch = { 0 };
	struct snap_list l = { 0 };
	struct perms p = { 0 };
	struct err e = { 0 };
	int dfd, rc, status = CLI_EXIT_SANDQ;

	*blob = NULL;
	*bloblen = 0;
	/* The folder named on the command line may itself be a symlink the
	 * user chose; nothing below it is followed. */
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		cli_fail("--from %s: %s", dir, strerror(errno));
		goto out;
	}
	/*
	 * .git is hidden through path rules, so capture never reads it (it
	 * can dwarf the tree). .gitignore's negations do not map onto rules,
	 * so those are applied to the captured snapshot below.
	 */
	if ((rc = perms_compile(&p, skip_git, 2, "full-access", &e)) == 0)
		rc = workspace_capture_rules(dfd, NULL, &lim, &p, &fs, &ch, &e);
	workspace_changes_free(&ch);
	perms_free(&p);
	close(dfd);
	if (rc < 0) {
		cli_fail("--from %s: %s", dir, e.msg[0] ? e.msg : strerror(-rc));
		goto out;
	}
	if ((rc = agentfs_walk(fs, collect_cb, &l, &e)) < 0) {
		cli_fail("--from %s: %s", dir, e.msg);
		goto out;
	}
	if ((status = load_gitignores(fs, &l, g, dir)) != 0)
		goto out;
	status = CLI_EXIT_SANDQ;
	for (size_t i = 0; i < l.n; i++)
		l.v[i].drop = in_dot_git(l.v[i].path) ||
		    gitignore_is_ignored(g, l.v[i].path + 1, l.v[i].is_dir);
	/* The walk lists parents before children: remove in reverse. */
	for (size_t i = l.n; i-- > 0;) {
		if (l.v[i].drop && (rc = agentfs_remove(fs, l.v[i].path, &e)) < 0) {
			cli_fail("--from %s: leaving out %s: %s", dir, l.v[i].path, e.msg);
			goto out;
		}
	}
	if ((rc = agentfs_to_blob(fs, blob, bloblen, &e)) < 0) {
		cli_fail("--from %s: %s", dir, e.msg);
		goto out;
	}
	if (*bloblen > JOB_SNAPSHOT_MAX) {
		cli_fail("--from %s: the snapshot is %zu bytes, more than the %u a job "
		    "may carry", dir, *bloblen, JOB_SNAPSHOT_MAX);
		free(*blob);
		*blob = NULL;
		goto out;
	}
	status = 0;
out:
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i].path);
	free(l.v);
	gitignore_free(g);
	agentfs_close(fs);
	return status;
}

/*** Verbs ***/

/* The tables below escape every text of the server's (cli_esc.h). */
static void
human_ls(const json_t *d)
{
	int w = 7;
	size_t i;
	json_t *o;
	char t[32], lb[2048];

	json_array_foreach((json_t *)(uintptr_t)d, i, o) {
		int n = (int)strlen(cli_jesc(o, "sandbox", ""));

		if (n > w)
			w = n;
	}
	printf("%-*s  %7s  %-20s  %-12s  %s\n", w, "SANDBOX", "VERSION", "UPDATED",
	    "SNAPSHOT", "LABELS");
	/* A sandbox on an image says so after its labels: "image=REF:DIR". */
	json_array_foreach((json_t *)(uintptr_t)d, i, o) {
		printf("%-*s  %7" JSON_INTEGER_FORMAT "  %-20s  %-12s  %s", w,
		    cli_jesc(o, "sandbox", ""), cli_jint(o, "version"),
		    cli_fmt_time_ms(t, sizeof(t), cli_jint(o, "updated_at")),
		    /* Its first 12 bytes: hex digits, or shown escaped. */
		    cli_escn(cli_jstr(o, "snapshot", ""), strnlen(cli_jstr(o, "snapshot",
		    ""), 12)),
		    cli__fmt_labels(lb, sizeof(lb), json_object_get(o, "labels")));
		if (json_object_get(o, "image") || json_object_get(o, "workdir"))
			printf("  image=%s:%s", cli_jesc(o, "image", "-"),
			    cli_jesc(o, "workdir", "/workspace"));
		putchar('\n');
	}
}

static void
human_history(const json_t *d)
{
	const json_t *vs = json_object_get(d, "versions");
	const json_t *cs = json_object_get(d, "calls");
	size_t i;
	json_t *o;
	char t[32];

	printf("%7s  %-20s  %s\n", "VERSION", "CREATED", "SNAPSHOT");
	json_array_foreach((json_t *)(uintptr_t)vs, i, o)
		printf("%7" JSON_INTEGER_FORMAT "  %-20s  %s\n", cli_jint(o, "version"),
		    cli_fmt_time_ms(t, sizeof(t), cli_jint(o, "created_at")),
		    cli_jesc(o, "snapshot", ""));
	printf("\n%5s  %-16s  %-7s  %-20s  %8s  %s\n", "CALL", "NAME", "STATUS",
	    "STARTED", "MS", "PARAMETERS");
	json_array_foreach((json_t *)(uintptr_t)cs, i, o) {
		printf("%5" JSON_INTEGER_FORMAT "  %-16s  %-7s  %-20s  %8"
		    JSON_INTEGER_FORMAT "  %s\n", cli_jint(o, "id"), cli_jesc(o, "name", ""),
		    cli_jesc(o, "status", ""), cli_fmt_time_ms(t, sizeof(t),
		    cli_jint(o, "started_at")), cli_jint(o, "duration_ms"),
		    cli_jesc_cut(o, "parameters", 63));
	}
}

static void
human_info(const json_t *d)
{
	if (json_is_object(d))
		cli__print_info(d);
}

static int
cmd_create(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .labels = s->labels,
	    .nlabels = s->nlabels, .workdir = s->workdir,
	    .from_image_dir = s->from_image_dir };
	struct sandq_result *r = NULL;
	void *blob = NULL;
	size_t len = 0;
	int status;

	if (s->from_image_dir != NULL && s->from != NULL)
		return cli__usage(s, "--from and --from-image-dir: version 1 comes from "
		    "one of them");
	if (s->from_image_dir != NULL && s->image == NULL)
		return cli__usage(s, "--from-image-dir needs --image (the image whose "
		    "folder it is)");
	if (s->from && (status = snapshot_from_dir(s->from, &blob, &len)) != 0)
		return status;
	a.snapshot = blob;
	a.snapshot_len = len;
	status = cli__call(s, c, "sandbox.create", &a, &r);
	free(blob);
	if (status != 0)
		return status;
	return cli__finish(s, r, human_info);
}

static int
cmd_ls(struct sbx *s, struct sandq *c)
{
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "sandbox.list", NULL, &r)) != 0)
		return status;
	return cli__finish(s, r, human_ls);
}

static int
cmd_info(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0] };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "sandbox.info", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, human_info);
}

static int
cmd_fork(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .to = s->args[1],
	    .labels = s->labels, .nlabels = s->nlabels };
	struct sandq_result *r = NULL;
	int status;

	if ((status = check_id(s, "DST", s->args[1])) != 0 ||
	    (status = cli__call(s, c, "sandbox.fork", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, human_info);
}

static int
cmd_rm(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0] };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "sandbox.delete", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, NULL);
}

static int
cmd_history(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0] };
	struct sandq_result *r = NULL;
	int status;

	if ((status = cli__call(s, c, "sandbox.history", &a, &r)) != 0)
		return status;
	return cli__finish(s, r, human_history);
}

static int
cmd_export(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0] };
	struct sandq_result *r = NULL;
	msgpack_unpacked u;
	const char *p = NULL;
	size_t len = 0;
	int status;

	if ((status = cli__call(s, c, "sandbox.export", &a, &r)) != 0)
		return status;
	msgpack_unpacked_init(&u);
	if (!cli__result_bytes(r, &u, &p, &len))
		status = cli_fail("sandbox export: the answer holds no snapshot");
	else
		status = cli__write_local(s->args[1], p, len);
	if (status == 0 && s->json) {
		json_t *o = cli__result_head_json(r);

		json_object_set_new(o, "file", json_string(s->args[1]));
		json_object_set_new(o, "size", json_integer((json_int_t)len));
		status = cli_print_json_line(o);
	}
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

static int
cmd_import(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .labels = s->labels,
	    .nlabels = s->nlabels, .workdir = s->workdir };
	struct sandq_result *r = NULL;
	uint8_t *blob = NULL;
	size_t len = 0;
	int rc, status;

	if ((rc = cli_read_input(s->args[1], true, JOB_SNAPSHOT_MAX, &blob, &len)) < 0)
		return rc == -EFBIG ? cli_fail("%s: larger than %u bytes", s->args[1],
		    JOB_SNAPSHOT_MAX) : cli_fail("%s: %s", s->args[1], strerror(-rc));
	if (len == 0) {
		free(blob);
		return cli_fail("%s: empty, not an AgentFS database", s->args[1]);
	}
	a.snapshot = blob;
	a.snapshot_len = len;
	status = cli__call(s, c, "sandbox.import", &a, &r);
	free(blob);
	if (status != 0)
		return status;
	return cli__finish(s, r, human_info);
}

static const struct sbx_verb verbs[] = {
	{ "sandbox", "create", 1, 1, SB(S_FROM) | SB(S_LABEL) | SB(S_IMAGE) |
	    SB(S_WORKDIR) | SB(S_FROM_IMAGE_DIR) | SB(S_ALLOW), cmd_create,
	    "ID [--from DIR] [--image REF [--from-image-dir PATH]] [--workdir PATH] "
	    "[--label KEY=VALUE]... [--allow PATTERN]..." },
	{ "sandbox", "ls", 0, 0, 0, cmd_ls, "" },
	{ "sandbox", "info", 1, 1, 0, cmd_info, "ID" },
	{ "sandbox", "fork", 2, 2, SB(S_LABEL), cmd_fork,
	    "SRC DST [--label KEY=VALUE]..." },
	{ "sandbox", "rm", 1, 1, 0, cmd_rm, "ID" },
	{ "sandbox", "history", 1, 1, 0, cmd_history, "ID [--json]" },
	{ "sandbox", "export", 2, 2, 0, cmd_export, "ID FILE" },
	{ "sandbox", "import", 2, 2, SB(S_LABEL) | SB(S_IMAGE) | SB(S_WORKDIR),
	    cmd_import, "ID FILE [--image REF] [--workdir PATH] [--label KEY=VALUE]..." },
	{ "fs", "ls", 1, 2, SB(S_RECURSIVE) | SOPTS_PERMS, cli__fs_ls, "ID [PATH] [-R]" },
	{ "fs", "cat", 2, 2, SOPTS_PERMS, cli__fs_cat, "ID PATH" },
	{ "fs", "put", 3, 3, SOPTS_PERMS, cli__fs_put, "ID PATH LOCALFILE" },
	{ "fs", "get", 3, 3, SB(S_KEEP_SYMLINKS) | SOPTS_PERMS, cli__fs_get,
	    "ID PATH LOCALDIR [--keep-symlinks]" },
	{ "fs", "rm", 2, 2, SB(S_RECURSIVE) | SOPTS_PERMS, cli__fs_rm, "ID PATH [-r]" },
	{ "fs", "stat", 2, 2, SOPTS_PERMS, cli__fs_stat, "ID PATH" },
	{ "kv", "get", 2, 2, 0, cli__kv_get, "ID KEY" },
	{ "kv", "set", 3, 3, 0, cli__kv_set, "ID KEY VALUE" },
	{ "kv", "del", 2, 2, 0, cli__kv_del, "ID KEY" },
	{ "kv", "keys", 1, 2, 0, cli__kv_keys, "ID [PREFIX]" },
};

/*** Entry point ***/

/* "create, ls, info, ..." of a group, for messages. */
static const char *
verb_list(const char *group, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		int w;

		if (strcmp(verbs[i].group, group) != 0)
			continue;
		w = snprintf(buf + n, size - n, "%s%s", n ? ", " : "", verbs[i].name);
		if (w < 0 || (size_t)w >= size - n)
			break;
		n += (size_t)w;
	}
	return buf;
}

static int
sbx_run(struct sbx *s, int argc, char **argv)
{
	char list[256], err[512];
	struct sandq *c;
	int o, rc;

	/* GNU getopt permutes: options may follow the operands. */
	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":hRr", sbx_opts, NULL)) != -1) {
		const char *bad = argv[optind - 1];

		if (o == 'h')
			o = S_HELP;
		else if (o == 'R' || o == 'r')
			o = S_RECURSIVE;
		else if (o == ':')
			return cli__usage(s, "option '%s' needs a value", bad);
		else if (o == '?')
			return optopt ? cli__usage(s, "unknown option '-%c'", optopt) :
			    cli__usage(s, "unknown option '%.*s'", (int)strcspn(bad, "="), bad);
		if ((rc = opt_apply(s, o, optarg)) != 0)
			return rc;
	}
	if (optind >= argc) {
		if (s->help) {
			cli_man_print(s->group);
			return 0;
		}
		return cli__usage(s, "missing %s command (%s)", s->group,
		    verb_list(s->group, list, sizeof(list)));
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(verbs[i].group, s->group) == 0 &&
		    strcmp(verbs[i].name, argv[optind]) == 0)
			s->v = &verbs[i];
	if (s->v == NULL)
		return cli__usage(s, "unknown %s command '%s' (expected %s)", s->group,
		    argv[optind], verb_list(s->group, list, sizeof(list)));
	if (s->help) {
		cli_man_print(s->group);
		return 0;
	}
	s->args = argv + optind + 1;
	s->nargs = argc - optind - 1;
	{
		unsigned extra = s->given & ~(SOPTS_CONN | s->v->opts);

		if (extra) {
			int bit = 0;

			while ((extra & SB(bit)) == 0)
				bit++;
			return cli__usage(s, "option '--%s' does not apply to 'sandq %s %s'",
			    opt_name(bit), s->v->group, s->v->name);
		}
	}
	if (s->nargs < s->v->min || s->nargs > s->v->max)
		return cli__usage(s, "expected %s", s->v->usage[0] ? s->v->usage :
		    "no arguments");
	if (s->v->min > 0 && (rc = check_id(s, strcmp(s->v->name, "fork") == 0 ?
	    "SRC" : "ID", s->args[0])) != 0)
		return rc;
	s->redis = cli_redis_or_default(s->redis);
	s->tenant = cli_tenant_or_default(s->tenant);
	if ((c = sandq_connect(s->redis, s->tenant, err, sizeof(err))) == NULL)
		return cli_fail("%s", err);
	rc = s->v->run(s, c);
	sandq_close(c);
	return rc;
}

int
cli_sandbox_main(const struct cli_conn *conn, int argc, char **argv)
{
	struct sbx s = { 0 };
	int status;

	s.group = argv[0];
	s.redis = conn->redis;
	s.tenant = conn->tenant;
	s.wait_ms = conn->wait_ms;
	s.json = conn->json;
	s.help = conn->help;
	status = sbx_run(&s, argc, argv);
	sbx_free(&s);
	return status;
}
