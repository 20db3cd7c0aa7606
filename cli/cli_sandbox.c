/*
 * cli_sandbox.c - the verbs of sandq on persistent sandboxes:
 *   sandq sandbox create|ls|info|fork|rm|history|export|import
 *   sandq fs ls|cat|put|get|rm|stat
 *   sandq kv get|set|del|keys
 * Each verb is one op (docs/protocol.md "Sandboxes") sent with
 * sandq_call(); fs get is several (fs.stat, fs.list, one fs.read per file).
 * This file holds the manual pages, the options, the sandbox verbs and the
 * entry point with its verb table; the fs and kv verbs are in cli_fs.c,
 * running an op and printing its result in cli_output.c, and
 * cli_sandbox_int.h is what the three share.
 *
 * The verbs, their output and exit statuses are a contract scripts rely on
 * (issue 4, "Interfaces scripts rely on"); the manual pages below state
 * it. Output: the op's data in words (tables for ls and history, "key:
 * value" lines for info and stat), or with --json the data converted from
 * msgpack to one line of JSON (bin as base64). A rejected op prints
 * "sandq: CODE: MESSAGE" and exits with 125, as a rejected job does.
 *
 * SECURITY. The server's answers are not trusted to name safe local
 * paths: see cli_fs.c for fs get.
 * --from DIR reads the folder with workspace_capture_rules(), which walks it with
 * the same care (see workspace/workspace.h), then drops what .gitignore files
 * and .git leave out.
 *
 * Sections: manual pages, options, snapshots from a folder, verbs, entry
 * point.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/err.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../workspace/workspace.h"
#include "cli.h"
#include "cli_sandbox_int.h"
#include "gitignore.h"
#include "../libsandq/sandq.h"

#define DEFAULT_REDIS "redis://127.0.0.1:6379"
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
	{ NULL, 0, NULL, 0 },
};

/* One verb: where it lives, its operands and the options it takes. */
struct sbx_verb {
	const char *group;		/* "sandbox", "fs", "kv" */
	const char *name;		/* "create" */
	int min, max;			/* operands after the verb */
	unsigned opts;			/* SB() of its own options */
	sbx_verb_cb run;
	const char *usage;		/* operands, for messages */
};

/*** Manual pages ***/

static const char man_sandbox[] =
"SANDQ-SANDBOX(1)                User Commands               SANDQ-SANDBOX(1)\n"
"\n"
"NAME\n"
"       sandq sandbox - create, copy, inspect and remove persistent sandboxes\n"
"\n"
"SYNOPSIS\n"
"       sandq sandbox create ID [--from DIR] [--label KEY=VALUE]...\n"
"       sandq sandbox ls\n"
"       sandq sandbox info ID\n"
"       sandq sandbox fork SRC DST [--label KEY=VALUE]...\n"
"       sandq sandbox rm ID\n"
"       sandq sandbox history ID\n"
"       sandq sandbox export ID FILE\n"
"       sandq sandbox import ID FILE [--label KEY=VALUE]...\n"
"\n"
"DESCRIPTION\n"
"       A sandbox is a workspace that lasts across jobs: run, sh and python\n"
"       with --sandbox ID start in its files and commit their changes back as\n"
"       a new version. Its state is one AgentFS SQLite database (a snapshot).\n"
"       An ID is 1 to 128 characters of A-Z a-z 0-9 . _ : - (not . or ..).\n"
"\n"
"       create   Creates ID, empty or, with --from DIR, holding a copy of the\n"
"                local folder DIR: files, directories, symlinks (as symlinks)\n"
"                and permission bits. .git is left out, and so is whatever\n"
"                DIR's .gitignore files (the root's and nested ones) ignore.\n"
"                A FIFO, socket or device file in DIR is an error, even a\n"
"                .gitignore'd one (not under .git, which is never read).\n"
"                Prints the new sandbox's info.\n"
"       ls       Lists the tenant's sandboxes.\n"
"       info     Prints ID's head: version, snapshot, size, times, labels.\n"
"       fork     Creates DST as a copy of SRC's head (no data is copied).\n"
"       rm       Removes ID and its history.\n"
"       history  Lists ID's versions (newest first) and the calls that made\n"
"                them (oldest first).\n"
"       export   Writes ID's head snapshot to FILE (- for standard output),\n"
"                byte for byte: an AgentFS database sqlite3 can open.\n"
"       import   Reads an AgentFS database from FILE (- for standard input):\n"
"                creates ID, or commits it as ID's next version. A tree a\n"
"                job on ID could not hold (the tenant's default files and\n"
"                disk limits, 64 levels, 255-byte names) is refused, naming\n"
"                the limit, and so is a view, trigger or virtual table.\n"
"\n"
"OPTIONS\n"
"       --from DIR\n"
"              create: the folder to copy in (at most 128M as a snapshot).\n"
"\n"
"       --label KEY=VALUE\n"
"              create, fork, import: sets a label; repeatable.\n"
"\n";

static const char man_fs[] =
"SANDQ-FS(1)                     User Commands                    SANDQ-FS(1)\n"
"\n"
"NAME\n"
"       sandq fs - read and change the files of a persistent sandbox\n"
"\n"
"SYNOPSIS\n"
"       sandq fs ls ID [PATH] [-R]\n"
"       sandq fs cat ID PATH\n"
"       sandq fs put ID PATH LOCALFILE\n"
"       sandq fs get ID PATH LOCALDIR [--keep-symlinks]\n"
"       sandq fs rm ID PATH [-r]\n"
"       sandq fs stat ID PATH\n"
"\n"
"DESCRIPTION\n"
"       PATH is written in the sandbox's own tree: / is its root (what a job\n"
"       sees as /workspace, which is accepted as an alias), and a relative\n"
"       PATH means the same from the root. No job is started: the ops work\n"
"       on the sandbox's snapshot. put and rm commit a new version.\n"
"\n"
"       ls       Lists the directory PATH (default /); -R, --recursive: the\n"
"                whole subtree. Columns: type, mode, size, mtime (UTC), path.\n"
"       cat      Writes the file PATH's bytes to standard output, raw (also\n"
"                with --json).\n"
"       put      Writes LOCALFILE (- for standard input, at most 64M) to\n"
"                PATH, with LOCALFILE's permission bits (0644 for standard\n"
"                input). PATH's parent directory must exist.\n"
"       get      Copies PATH, a file, a symlink or a whole tree, into LOCALDIR\n"
"                as LOCALDIR/NAME (NAME being PATH's last component; for /,\n"
"                the root's entries go into LOCALDIR itself). Nothing is\n"
"                written outside LOCALDIR and no symlink is followed; a name\n"
"                already present in LOCALDIR is an error naming it. A symlink\n"
"                whose target stays inside the copy (LOCALDIR/NAME for a\n"
"                folder, LOCALDIR for / or a single entry) comes out as a\n"
"                symlink; one that leads outside it (an absolute target, ..\n"
"                climbing out, a chain of links that does) is left out, named\n"
"                on standard error, and counted in a last line there. FIFOs,\n"
"                sockets and devices are left out too. On an error the part\n"
"                copied so far stays.\n"
"       rm       Removes PATH; a non-empty directory needs -r, --recursive.\n"
"       stat     Prints PATH's entry: path, type, size, mode, mtime, target.\n"
"\n"
"OPTIONS\n"
"       -R, -r, --recursive\n"
"              ls: the subtree; rm: a directory and everything in it.\n"
"\n"
"       --keep-symlinks\n"
"              get: creates every symlink as stored, those leading outside the\n"
"              copy included (each named with a warning). A program that later\n"
"              follows one of them reads or writes outside the copy.\n"
"\n"
"       --perm PATTERN=LEVEL, --perm-preset NAME\n"
"              The path rules the op runs under, as for run (see sandq help\n"
"              run): a hidden path is not found, a view-level one cannot be\n"
"              read, a read-level one cannot be changed.\n"
"\n";

static const char man_kv[] =
"SANDQ-KV(1)                     User Commands                    SANDQ-KV(1)\n"
"\n"
"NAME\n"
"       sandq kv - the key-value store of a persistent sandbox\n"
"\n"
"SYNOPSIS\n"
"       sandq kv get ID KEY\n"
"       sandq kv set ID KEY VALUE\n"
"       sandq kv del ID KEY\n"
"       sandq kv keys ID [PREFIX]\n"
"\n"
"DESCRIPTION\n"
"       Values are JSON. set stores VALUE as given when it is valid JSON\n"
"       (42, true, \"text\", [1,2], {\"a\":1}); anything else is stored as a\n"
"       JSON string, so kv set ID name alice stores \"alice\". get prints the\n"
"       stored JSON text on one line (also with --json). keys prints the keys\n"
"       starting with PREFIX, one per line, in byte order. set and del commit\n"
"       a new version. A VALUE starting with - goes after --:\n"
"       sandq kv set ID n -- -1.\n"
"\n"
"OPTIONS\n";

static const char man_common[] =
"       --json\n"
"              Prints the op's result data as one line of JSON instead: the\n"
"              info map, the listing, the entry... (bytes as base64). For ops\n"
"              without data (rm, kv set, kv del) it prints {\"sandbox\",\n"
"              \"version\", \"snapshot\"}; export prints {\"sandbox\", \"version\",\n"
"              \"snapshot\", \"file\", \"size\"}; fs get prints {\"path\", \"files\",\n"
"              \"dirs\", \"symlinks\", \"symlinks_skipped\", \"symlinks_outside\",\n"
"              \"skipped\": [{\"path\", \"type\", \"target\"}]}.\n"
"\n"
"       --redis URL, --tenant NAME, --wait-timeout SECONDS, --id ID\n"
"              As for run (see sandq help run).\n"
"\n"
"       -h, --help\n"
"              Prints this manual and exits.\n"
"\n"
"EXIT STATUS\n"
"       0      The op succeeded.\n"
"\n"
"       125    The op was rejected (\"sandq: CODE: MESSAGE\" on standard error;\n"
"              CODE is one of sandbox_not_found, sandbox_exists, not_found,\n"
"              exists, is_dir, not_dir, not_empty, permission, too_large,\n"
"              bad_snapshot, invalid), the server failed, or sandq itself\n"
"              failed: a bad argument, Redis unreachable, a local file.\n"
"\n"
"EXAMPLES\n"
"       sandq sandbox create proj --from . --label owner=me\n"
"       sandq sh --sandbox proj 'make && ls build'\n"
"       sandq fs cat proj /build/report.txt\n"
"       sandq fs get proj /build ./out\n"
"       sandq sandbox fork proj proj-try; sandq sandbox history proj --json\n"
"       sandq sandbox export proj proj.db; sqlite3 proj.db .tables\n"
"       sandq kv set proj config '{\"debug\":true}'; sandq kv get proj config\n";

void
cli_sandbox_help(const char *group)
{
	if (strcmp(group, "fs") == 0)
		fputs(man_fs, stdout);
	else if (strcmp(group, "kv") == 0)
		fputs(man_kv, stdout);
	else
		fputs(man_sandbox, stdout);
	fputs(man_common, stdout);
}

bool
cli_sandbox_is_group(const char *name)
{
	return strcmp(name, "sandbox") == 0 || strcmp(name, "fs") == 0 ||
	    strcmp(name, "kv") == 0;
}

/*** Options ***/

int __attribute__((format(printf, 2, 3)))
cli__usage(const struct sbx *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
	if (s->v != NULL)
		fprintf(stderr, "Usage: sandq %s %s %s\n", s->v->group, s->v->name,
		    s->v->usage);
	fprintf(stderr, "Try 'sandq help %s'.\n", s->group);
	return CLI_EXIT_SANDQ;
}

int __attribute__((format(printf, 1, 2)))
cli__fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
	return CLI_EXIT_SANDQ;
}

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
			return cli__usage(s, "--perm-preset '%s': expected agent-safe, read-only, "
			    "full-access, development or view-only", arg);
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
}

/* The job options every op of s sends. */
struct sandq_job_opts
cli__job_opts(const struct sbx *s)
{
	struct sandq_job_opts o = { 0 };

	o.id = s->id;
	o.perms = s->perms;
	o.nperms = s->nperms;
	o.perm_preset = s->perm_preset;
	return o;
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
				return cli__fail("--from %s: reading %s: %s", dir, en->path, e.msg);
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
				return cli__fail("--from %s: %s", dir, e.msg);
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
		cli__fail("--from %s: %s", dir, strerror(errno));
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
		cli__fail("--from %s: %s", dir, e.msg[0] ? e.msg : strerror(-rc));
		goto out;
	}
	if ((rc = agentfs_walk(fs, collect_cb, &l, &e)) < 0) {
		cli__fail("--from %s: %s", dir, e.msg);
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
			cli__fail("--from %s: leaving out %s: %s", dir, l.v[i].path, e.msg);
			goto out;
		}
	}
	if ((rc = agentfs_to_blob(fs, blob, bloblen, &e)) < 0) {
		cli__fail("--from %s: %s", dir, e.msg);
		goto out;
	}
	if (*bloblen > JOB_SNAPSHOT_MAX) {
		cli__fail("--from %s: the snapshot is %zu bytes, more than the %u a job "
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
		int n = (int)strlen(cli__jesc(o, "sandbox", ""));

		if (n > w)
			w = n;
	}
	printf("%-*s  %7s  %-20s  %-12s  %s\n", w, "SANDBOX", "VERSION", "UPDATED",
	    "SNAPSHOT", "LABELS");
	json_array_foreach((json_t *)(uintptr_t)d, i, o)
		printf("%-*s  %7" JSON_INTEGER_FORMAT "  %-20s  %-12s  %s\n", w,
		    cli__jesc(o, "sandbox", ""), cli__jint(o, "version"),
		    cli__fmt_time_ms(t, sizeof(t), cli__jint(o, "updated_at")),
		    /* Its first 12 bytes: hex digits, or shown escaped. */
		    cli_escn(cli__jstr(o, "snapshot", ""), strnlen(cli__jstr(o, "snapshot",
		    ""), 12)),
		    cli__fmt_labels(lb, sizeof(lb), json_object_get(o, "labels")));
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
		printf("%7" JSON_INTEGER_FORMAT "  %-20s  %s\n", cli__jint(o, "version"),
		    cli__fmt_time_ms(t, sizeof(t), cli__jint(o, "created_at")),
		    cli__jesc(o, "snapshot", ""));
	printf("\n%5s  %-16s  %-7s  %-20s  %8s  %s\n", "CALL", "NAME", "STATUS",
	    "STARTED", "MS", "PARAMETERS");
	json_array_foreach((json_t *)(uintptr_t)cs, i, o) {
		printf("%5" JSON_INTEGER_FORMAT "  %-16s  %-7s  %-20s  %8"
		    JSON_INTEGER_FORMAT "  %s\n", cli__jint(o, "id"), cli__jesc(o, "name", ""),
		    cli__jesc(o, "status", ""), cli__fmt_time_ms(t, sizeof(t),
		    cli__jint(o, "started_at")), cli__jint(o, "duration_ms"),
		    cli__jesc_cut(o, "parameters", 63));
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
	    .nlabels = s->nlabels };
	struct sandq_result *r = NULL;
	void *blob = NULL;
	size_t len = 0;
	int status;

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

/* Writes len bytes to FILE ("-": stdout), replacing it. 0 or an exit status. */
int
cli__write_local(const char *file, const void *p, size_t len)
{
	int fd, rc;

	if (strcmp(file, "-") == 0) {
		if (fwrite(p, 1, len, stdout) != len || fflush(stdout) == EOF)
			return cli__fail("writing standard output: %s", strerror(errno));
		return 0;
	}
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return cli__fail("%s: %s", file, strerror(errno));
	rc = write_all(fd, p, len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return cli__fail("%s: %s", file, strerror(-rc));
	return 0;
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
		status = cli__fail("sandbox export: the answer holds no snapshot");
	else
		status = cli__write_local(s->args[1], p, len);
	if (status == 0 && s->json) {
		json_t *o = cli__result_head_json(r);

		json_object_set_new(o, "file", json_string(s->args[1]));
		json_object_set_new(o, "size", json_integer((json_int_t)len));
		status = cli__print_json_line(o);
	}
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return status;
}

static int
cmd_import(struct sbx *s, struct sandq *c)
{
	struct sandq_op_args a = { .sandbox = s->args[0], .labels = s->labels,
	    .nlabels = s->nlabels };
	struct sandq_result *r = NULL;
	uint8_t *blob = NULL;
	size_t len = 0;
	int rc, status;

	if ((rc = cli_read_input(s->args[1], true, JOB_SNAPSHOT_MAX, &blob, &len)) < 0)
		return rc == -EFBIG ? cli__fail("%s: larger than %u bytes", s->args[1],
		    JOB_SNAPSHOT_MAX) : cli__fail("%s: %s", s->args[1], strerror(-rc));
	if (len == 0) {
		free(blob);
		return cli__fail("%s: empty, not an AgentFS database", s->args[1]);
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
	{ "sandbox", "create", 1, 1, SB(S_FROM) | SB(S_LABEL), cmd_create,
	    "ID [--from DIR] [--label KEY=VALUE]..." },
	{ "sandbox", "ls", 0, 0, 0, cmd_ls, "" },
	{ "sandbox", "info", 1, 1, 0, cmd_info, "ID" },
	{ "sandbox", "fork", 2, 2, SB(S_LABEL), cmd_fork,
	    "SRC DST [--label KEY=VALUE]..." },
	{ "sandbox", "rm", 1, 1, 0, cmd_rm, "ID" },
	{ "sandbox", "history", 1, 1, 0, cmd_history, "ID [--json]" },
	{ "sandbox", "export", 2, 2, 0, cmd_export, "ID FILE" },
	{ "sandbox", "import", 2, 2, SB(S_LABEL), cmd_import,
	    "ID FILE [--label KEY=VALUE]..." },
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
			cli_sandbox_help(s->group);
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
		cli_sandbox_help(s->group);
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
	if (s->redis == NULL && (s->redis = getenv("SANDQ_REDIS")) == NULL)
		s->redis = DEFAULT_REDIS;
	s->tenant = cli_tenant_or_default(s->tenant);
	if ((c = sandq_connect(s->redis, s->tenant, err, sizeof(err))) == NULL)
		return cli__fail("%s", err);
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
