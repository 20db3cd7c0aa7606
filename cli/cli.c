/*
 * cli.c - the sandq command: submits a job through libsandq, waits for its
 * result, writes the job's output to its own and exits with the job's
 * status, so a shell script can run a sandboxed command like a local one.
 *
 * The verbs, their options, the output and the exit statuses are a contract
 * other scripts rely on; the manual pages (cli_man.c, sandq help VERB)
 * state it, and every change to one must change the other.
 *
 * Options may come before the verb ("sandq --redis URL sh ...") and after
 * it: argv is read twice with getopt_long and one option table, first up to
 * the verb, then the verb's own arguments. run stops at its first operand
 * (or "--"), as env(1) and timeout(1) do, so the command's own options stay
 * its own. The options a verb does not take are refused after both passes.
 *
 * Sections: option parsing, input files, output, verbs.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../images/ref.h"
#include "../libsandq/sandq.h"
#include "../proto/job.h"
#include "cli_audit.h"
#include "cli_batch.h"
#include "cli_common.h"
#include "cli_dead.h"
#include "cli_image_build.h"
#include "cli_image.h"
#include "cli_man.h"
#include "cli_mcp.h"
#include "cli_presets.h"
#include "cli_sandbox.h"
#include "cli_status.h"
#include "cli_image_tag.h"
#include "cli_tenant.h"
#include "doctor.h"

enum verb {
	V_NONE = 0,
	V_RUN,
	V_SH,
	V_PYTHON,
	V_WAIT,
	V_RESULT,
	V_HELP,
};

/*
 * Long options. Values start past every character getopt_long can return
 * ('h', '?', ':'), and O_BASE is bit 0 of cli.given.
 */
enum {
	O_BASE = 256,
	O_REDIS = O_BASE,
	O_TENANT,
	O_TIMEOUT,
	O_CPU,
	O_MEMORY,
	O_PIDS,
	O_OUTPUT,
	O_DISK,
	O_ENV,
	O_CWD,
	O_STDIN,
	O_FILE,
	O_PRESET,
	O_ID,
	O_PRIORITY,
	O_WAIT_TIMEOUT,
	O_JSON,
	O_DETACH,
	O_HELP,
	O_VERSION,
	O_SANDBOX,
	O_NO_PERSIST,
	O_PERM,
	O_PERM_PRESET,
	O_STREAM,
	O_IMAGE,
	O_NET,
	O_ALLOW,
	O__END,
};

_Static_assert(O__END - O_BASE < 32, "cli.given has 32 bits");
#define BIT(o) (1u << ((o) - O_BASE))
/* What wait and result take; submitting verbs take everything. */
#define OPTS_FETCH (BIT(O_REDIS) | BIT(O_TENANT) | BIT(O_JSON) | \
	BIT(O_WAIT_TIMEOUT) | BIT(O_HELP) | BIT(O_VERSION))
#define OPTS_ALL (BIT(O__END) - 1)

static const struct option long_opts[] = {
	{ "redis", required_argument, NULL, O_REDIS },
	{ "tenant", required_argument, NULL, O_TENANT },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "cpu", required_argument, NULL, O_CPU },
	{ "memory", required_argument, NULL, O_MEMORY },
	{ "pids", required_argument, NULL, O_PIDS },
	{ "output", required_argument, NULL, O_OUTPUT },
	{ "disk", required_argument, NULL, O_DISK },
	{ "env", required_argument, NULL, O_ENV },
	{ "cwd", required_argument, NULL, O_CWD },
	{ "stdin", required_argument, NULL, O_STDIN },
	{ "file", required_argument, NULL, O_FILE },
	{ "preset", required_argument, NULL, O_PRESET },
	{ "id", required_argument, NULL, O_ID },
	{ "priority", required_argument, NULL, O_PRIORITY },
	{ "wait-timeout", required_argument, NULL, O_WAIT_TIMEOUT },
	{ "json", no_argument, NULL, O_JSON },
	{ "detach", no_argument, NULL, O_DETACH },
	{ "help", no_argument, NULL, O_HELP },
	{ "version", no_argument, NULL, O_VERSION },
	{ "sandbox", required_argument, NULL, O_SANDBOX },
	{ "no-persist", no_argument, NULL, O_NO_PERSIST },
	{ "stream", no_argument, NULL, O_STREAM },
	{ "perm", required_argument, NULL, O_PERM },
	{ "perm-preset", required_argument, NULL, O_PERM_PRESET },
	{ "image", required_argument, NULL, O_IMAGE },
	{ "net", required_argument, NULL, O_NET },
	{ "allow", required_argument, NULL, O_ALLOW },
	{ NULL, 0, NULL, 0 },
};

/* A seeded file: the sandbox path and the bytes read from the local one. */
struct cli_file {
	char *path;			/* as given, before the '=' */
	const char *local;		/* the local file, after the '=' */
	uint8_t *data;			/* its contents, once read */
	size_t len;
};

/* Everything the command line asked for, and what was read for it. */
struct cli {
	enum verb verb;
	const char *verb_name;		/* as typed, for messages */
	const char *redis;		/* --redis, $SANDQ_REDIS or the default */
	const char *tenant;		/* --tenant, $SANDQ_TENANT or "default" */
	struct sandq_limits limits;	/* --timeout ... --disk */
	const char *preset;
	const char *cwd;
	const char *id;
	int64_t priority;
	const char *stdin_path;		/* --stdin, "-" for our own stdin */
	const char **env;		/* --env values, NULL-terminated */
	size_t nenv;
	struct cli_file *files;		/* --file values */
	size_t nfiles;
	int64_t wait_ms;		/* --wait-timeout; -1 = no limit */
	bool json;
	bool detach;
	bool help;
	bool version;
	unsigned given;			/* BIT(O_*) of every option seen */
	char **args;			/* the verb's operands */
	int nargs;
	const char *sandbox;		/* --sandbox */
	bool no_persist;		/* --no-persist */
	bool stream;			/* --stream */
	struct sandq_perm *perms;	/* --perm; patterns owned */
	size_t nperms;
	const char *perm_preset;	/* --perm-preset */
	const char *image;		/* --image, as given */
	const char *net;		/* --net: none, unix or allow */
	const char **allow;		/* --allow values, NULL-terminated */
	size_t nallow;
	uint8_t *stdin_data;		/* contents of --stdin */
	size_t stdin_len;
	char *text;			/* sh/python text read from stdin */
};

/*** Option parsing ***/

static enum verb
verb_parse(const char *s)
{
	static const struct {
		const char *name;
		enum verb v;
	} tab[] = {
		{ "run", V_RUN }, { "sh", V_SH }, { "python", V_PYTHON },
		{ "wait", V_WAIT }, { "result", V_RESULT }, { "help", V_HELP },
	};

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (strcmp(s, tab[i].name) == 0)
			return tab[i].v;
	return V_NONE;
}

/*
 * Prints a usage error and the pointer to the manual, then returns the
 * exit status for it. Every bad command line ends here.
 */
static int __attribute__((format(printf, 2, 3)))
usage_error(const struct cli *cl, const char *fmt, ...)
{
	char hint[64] = "sandq --help";
	va_list ap;
	int status;

	if (cl->verb != V_NONE && cl->verb != V_HELP)
		snprintf(hint, sizeof(hint), "sandq help %s", cl->verb_name);
	va_start(ap, fmt);
	status = cli_vfail(CLI_EXIT_SANDQ, "sandq: ", hint, fmt, ap);
	va_end(ap);
	return status;
}

/* Formats ms as seconds without trailing zeros: "2", "0.5", "1.25". */
static const char *
fmt_seconds(char *buf, size_t size, uint64_t ms)
{
	size_t n;

	if (ms % 1000 == 0) {
		snprintf(buf, size, "%" PRIu64, ms / 1000);
		return buf;
	}
	snprintf(buf, size, "%" PRIu64 ".%03" PRIu64, ms / 1000, ms % 1000);
	n = strlen(buf);
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	return buf;
}

/* The option's own spelling, for messages: "--timeout" or "-h". */
static const char *
opt_name(int o)
{
	for (const struct option *lo = long_opts; lo->name; lo++)
		if (lo->val == o)
			return lo->name;
	return "?";
}

/* Parses a positive size for a limit option. 0 or a usage error's status. */
static int
opt_size(const struct cli *cl, int o, const char *arg, uint64_t *out)
{
	if (parse_size(arg, out) < 0 || *out == 0)
		return usage_error(cl, "--%s '%s': expected a size such as 4096, "
		    "64K or 512M", opt_name(o), arg);
	return 0;
}

/* Parses a positive SECONDS value for a limit option. */
static int
opt_seconds(const struct cli *cl, int o, const char *arg, uint64_t *out)
{
	if (cli_parse_seconds(arg, out) < 0 || *out == 0)
		return usage_error(cl, "--%s '%s': expected a number of seconds "
		    "greater than 0, such as 30 or 0.5", opt_name(o), arg);
	return 0;
}

/* Records one option. 0, or the exit status of a usage error. */
static int
opt_apply(struct cli *cl, int o, const char *arg)
{
	int64_t v = 0;
	uint64_t u = 0;

	cl->given |= BIT(o);
	switch (o) {
	case O_REDIS:
		cl->redis = arg;
		return 0;
	case O_TENANT:
		cl->tenant = arg;
		return 0;
	case O_TIMEOUT:
		return opt_seconds(cl, o, arg, &cl->limits.wall_ms);
	case O_CPU:
		return opt_seconds(cl, o, arg, &cl->limits.cpu_ms);
	case O_MEMORY:
		return opt_size(cl, o, arg, &cl->limits.memory_bytes);
	case O_OUTPUT:
		return opt_size(cl, o, arg, &cl->limits.output_bytes);
	case O_DISK:
		return opt_size(cl, o, arg, &cl->limits.disk_bytes);
	case O_PIDS:
		if (parse_i64(arg, 1, INT64_MAX, &v) < 0)
			return usage_error(cl, "--pids '%s': expected a number greater "
			    "than 0", arg);
		cl->limits.pids = (uint64_t)v;
		return 0;
	case O_ENV:
		/* libsandq checks the name; this catches a forgotten '='. */
		if (strchr(arg, '=') == NULL || arg[0] == '=')
			return usage_error(cl, "--env '%s': expected NAME=VALUE", arg);
		cl->env = xreallocarray(cl->env, cl->nenv + 2, sizeof(*cl->env));
		cl->env[cl->nenv++] = arg;
		cl->env[cl->nenv] = NULL;
		return 0;
	case O_CWD:
		cl->cwd = arg;
		return 0;
	case O_STDIN:
		cl->stdin_path = arg;
		return 0;
	case O_FILE: {
		const char *eq = strchr(arg, '=');
		struct cli_file *f;

		if (eq == NULL || eq == arg || eq[1] == '\0')
			return usage_error(cl, "--file '%s': expected PATH=LOCALFILE", arg);
		cl->files = xreallocarray(cl->files, cl->nfiles + 1, sizeof(*cl->files));
		f = &cl->files[cl->nfiles++];
		memset(f, 0, sizeof(*f));
		f->path = xmemdup0(arg, (size_t)(eq - arg));
		f->local = eq + 1;
		return 0;
	}
	case O_PRESET:
		if (strcmp(arg, "strict") != 0 && strcmp(arg, "normal") != 0 &&
		    strcmp(arg, "permissive") != 0)
			return usage_error(cl, "--preset '%s': expected strict, normal "
			    "or permissive", arg);
		cl->preset = arg;
		return 0;
	case O_ID:
		if (!payload_id_valid(arg, strlen(arg)))
			return usage_error(cl, "--id '%s': expected 1 to %d characters of "
			    "A-Z a-z 0-9 . _ : -", arg, SANDQ_ID_MAX);
		cl->id = arg;
		return 0;
	case O_PRIORITY:
		if (parse_i64(arg, INT64_MIN, INT64_MAX, &cl->priority) < 0)
			return usage_error(cl, "--priority '%s': expected an integer", arg);
		return 0;
	case O_WAIT_TIMEOUT:
		if (cli_parse_seconds(arg, &u) < 0)
			return usage_error(cl, "--wait-timeout '%s': expected a number of "
			    "seconds, such as 60 or 2.5", arg);
		cl->wait_ms = (int64_t)u;
		return 0;
	case O_JSON:
		cl->json = true;
		return 0;
	case O_DETACH:
		cl->detach = true;
		return 0;
	case O_HELP:
		cl->help = true;
		return 0;
	case O_VERSION:
		cl->version = true;
		return 0;
	case O_SANDBOX:
		if (!payload_id_valid(arg, strlen(arg)) || strcmp(arg, ".") == 0 ||
		    strcmp(arg, "..") == 0)
			return usage_error(cl, "--sandbox '%s': expected 1 to %d "
			    "characters of A-Z a-z 0-9 . _ : - (not . or ..)", arg,
			    JOB_SANDBOX_ID_MAX);
		cl->sandbox = arg;
		return 0;
	case O_STREAM:
		cl->stream = true;
		return 0;
	case O_NO_PERSIST:
		cl->no_persist = true;
		return 0;
	case O_PERM: {
		char msg[320];

		if (cli_perm_add(&cl->perms, &cl->nperms, arg, msg, sizeof(msg)) < 0)
			return usage_error(cl, "%s", msg);
		return 0;
	}
	case O_PERM_PRESET:
		if ((cl->perm_preset = cli_perm_preset(arg)) == NULL)
			return usage_error(cl, "--perm-preset '%s': expected agent-edit, "
			    "agent-safe, read-only, full-access, development or view-only", arg);
		return 0;
	case O_IMAGE: {
		struct img_ref ref;
		struct err e = { 0 };

		/*
		 * Read here for an early, local answer; sent as given: whether
		 * it may be used is the server's (image_sources). The message
		 * escapes what it shows.
		 */
		if (img_ref_parse(arg, &ref, &e) < 0)
			return usage_error(cl, "--image: %s", e.msg);
		cl->image = arg;
		return 0;
	}
	case O_NET: {
		enum job_net n;

		if (job_net_parse(arg, &n) < 0)
			return usage_error(cl, "--net '%s': expected none, unix or allow", arg);
		cl->net = arg;
		return 0;
	}
	case O_ALLOW:
		/* The grammar and the tenant's list are the server's to judge. */
		if (cl->nallow == JOB_ALLOW_MAX)
			return usage_error(cl, "--allow: at most %d patterns", JOB_ALLOW_MAX);
		if (arg[0] == '\0')
			return usage_error(cl, "--allow: an empty pattern");
		cl->allow = xreallocarray(cl->allow, cl->nallow + 2, sizeof(*cl->allow));
		cl->allow[cl->nallow++] = arg;
		cl->allow[cl->nallow] = NULL;
		return 0;
	default:
		return usage_error(cl, "internal error: option %d", o);
	}
}

/*
 * Runs getopt_long over argv (argv[0] is a name for getopt, not an
 * option) with optstring's mode: "+" stops at the first operand. On return
 * *next is the index of the first operand. 0 or a usage error's status.
 */
static int
opts_parse(struct cli *cl, int argc, char **argv, const char *optstring,
    int *next)
{
	int o, rc;

	/* Restarts GNU getopt on a new vector, whatever it scanned before. */
	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, optstring, long_opts, NULL)) != -1) {
		const char *bad = argv[optind - 1];

		switch (o) {
		case 'h':
			o = O_HELP;
			break;
		case ':':
			return usage_error(cl, "option '%s' needs a value", bad);
		case '?':
			if (optopt != 0)
				return usage_error(cl, "unknown option '-%c'", optopt);
			return usage_error(cl, "unknown option '%.*s'",
			    (int)strcspn(bad, "="), bad);
		default:
			break;
		}
		if ((rc = opt_apply(cl, o, optarg)) != 0)
			return rc;
	}
	*next = optind;
	return 0;
}

/* Fills the defaults the options left; refuses options the verb ignores. */
static int
opts_check(struct cli *cl)
{
	unsigned allowed = cl->verb == V_WAIT || cl->verb == V_RESULT ?
	    OPTS_FETCH : OPTS_ALL;
	unsigned extra = cl->given & ~allowed;

	if (extra != 0) {
		int o = O_BASE;

		while ((extra & BIT(o)) == 0)
			o++;
		return usage_error(cl, "option '--%s' does not apply to 'sandq %s'",
		    opt_name(o), cl->verb_name);
	}
	cl->redis = cli_redis_or_default(cl->redis);
	cl->tenant = cli_tenant_or_default(cl->tenant);
	if (cl->no_persist && cl->sandbox == NULL)
		return usage_error(cl, "--no-persist needs --sandbox");
	if (cl->nallow > 0 && (cl->net == NULL || strcmp(cl->net, "allow") != 0))
		return usage_error(cl, "--allow needs --net allow");
	if (cl->net != NULL && strcmp(cl->net, "allow") == 0 && cl->nallow == 0 &&
	    cl->sandbox == NULL)
		return usage_error(cl, "--net allow needs --allow PATTERN (or --sandbox of "
		    "a sandbox created with an allow list)");
	if (cl->stream && (cl->detach || cl->json))
		return usage_error(cl, "--stream prints output as it comes: not with %s",
		    cl->detach ? "--detach" : "--json");
	switch (cl->verb) {
	case V_RUN:
		if (cl->nargs < 1)
			return usage_error(cl, "missing COMMAND");
		break;
	case V_SH:
	case V_PYTHON:
		if (cl->nargs != 1)
			return usage_error(cl, "expected one %s argument, got %d",
			    cl->verb == V_SH ? "SCRIPT" : "CODE", cl->nargs);
		if (strcmp(cl->args[0], "-") == 0 && cl->stdin_path &&
		    strcmp(cl->stdin_path, "-") == 0)
			return usage_error(cl, "standard input cannot be both the %s and "
			    "--stdin -", cl->verb == V_SH ? "script" : "code");
		break;
	case V_WAIT:
	case V_RESULT:
		if (cl->nargs != 1)
			return usage_error(cl, "expected one job ID, got %d", cl->nargs);
		break;
	default:
		break;
	}
	return 0;
}

/*** Input files ***/

/* Explains a cli_read_input() failure. */
static int
input_error(const char *what, const char *path, int rc, size_t max)
{
	if (rc == -EFBIG)
		return cli_fail("%s %s: larger than %zu bytes", what, path, max);
	return cli_fail("%s %s: %s", what, path, strerror(-rc));
}

/* Reads every file the options name: --stdin, --file, and a "-" operand. */
static int
inputs_load(struct cli *cl)
{
	int rc;

	if (cl->stdin_path && (rc = cli_read_input(cl->stdin_path, true, JOB_STDIN_MAX,
	    &cl->stdin_data, &cl->stdin_len)) < 0)
		return input_error("--stdin", cl->stdin_path, rc, JOB_STDIN_MAX);
	for (size_t i = 0; i < cl->nfiles; i++) {
		struct cli_file *f = &cl->files[i];

		if ((rc = cli_read_input(f->local, false, JOB_FILES_BYTES_MAX, &f->data,
		    &f->len)) < 0)
			return input_error("--file", f->local, rc, JOB_FILES_BYTES_MAX);
	}
	if ((cl->verb == V_SH || cl->verb == V_PYTHON) && strcmp(cl->args[0], "-") == 0) {
		uint8_t *text = NULL;
		size_t len = 0;

		if ((rc = cli_read_input("-", true, JOB_ARG_MAX - 1, &text, &len)) < 0)
			return input_error("reading", "standard input", rc, JOB_ARG_MAX - 1);
		cl->text = (char *)text;
		/* It becomes one argument of bash/python3: a C string. */
		if (memchr(cl->text, '\0', len) != NULL)
			return cli_fail("the %s on standard input contains a NUL byte",
			    cl->verb == V_SH ? "script" : "code");
	}
	return 0;
}

static void
cli_free(struct cli *cl)
{
	free(cl->env);
	free(cl->allow);
	for (size_t i = 0; i < cl->nfiles; i++) {
		free(cl->files[i].path);
		free(cl->files[i].data);
	}
	free(cl->files);
	free(cl->stdin_data);
	free(cl->text);
	for (size_t i = 0; i < cl->nperms; i++)
		free((char *)(uintptr_t)cl->perms[i].pattern);
	free(cl->perms);
}

/*** Output ***/

/* Prints r as one JSON object on one line. 0 or -EIO. */
static int
print_json(const struct sandq_result *r)
{
	json_t *o = cli_result_json(r);
	int rc = 0;

	if (json_dumpf(o, stdout, JSON_COMPACT) < 0 || fputc('\n', stdout) == EOF)
		rc = -EIO;
	json_decref(o);
	return rc;
}

/* The note for a job that did not end by itself; NULL for ok and exit. */
static const char *
status_note(const char *st)
{
	static const struct {
		const char *status, *note;
	} tab[] = {
		{ "timeout", "the job ran past its wall-clock limit" },
		{ "cpu_limit", "the job used up its CPU time" },
		{ "memory_limit", "the job ran out of memory" },
		{ "pids_limit", "the job reached its process limit" },
		{ "output_limit", "the job reached its output limit" },
		{ "disk_limit", "the job reached its disk limit" },
		{ "rejected", "the job was rejected" },
		{ "cancelled", "the job was cancelled" },
		{ "expired", "the job's deadline passed before it started" },
		{ "internal", "the server failed to run the job" },
	};

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (strcmp(st, tab[i].status) == 0)
			return tab[i].note;
	return NULL;
}

/*
 * Writes the job's output to ours, raw, then sandq's own notes to stderr.
 * Returns the exit status the result gives, or 125 if writing failed.
 */
static int
print_result(const struct sandq_result *r)
{
	const char *note = status_note(r->status);

	if (fwrite(r->stdout_data, 1, r->stdout_len, stdout) != r->stdout_len ||
	    fflush(stdout) == EOF)
		return cli_fail("writing the job's output: %s", strerror(errno));
	fwrite(r->stderr_data, 1, r->stderr_len, stderr);
	if (r->stdout_truncated)
		cli_warn("stdout truncated at %zu bytes", r->stdout_len);
	if (r->stderr_truncated)
		cli_warn("stderr truncated at %zu bytes", r->stderr_len);
	for (size_t i = 0; i < r->nrefused_paths; i++)
		cli_warn("not committed (path rules): %s",
		    r->refused_paths[i]);
	if (note != NULL) {
		const char *msg = r->error_message && r->error_message[0] ?
		    r->error_message : note;
		cli_warn("%s: %s", r->status, msg);
	} else if (strcmp(r->status, "signal") == 0) {
		cli_warn("signal: the job was killed by signal %d (%s)",
		    r->signal, strsignal(r->signal));
	}
	return sandq_result_exit_status(r);
}

/* Prints r the way the options ask and returns the exit status. */
static int
output(const struct cli *cl, const struct sandq_result *r)
{
	if (cl->stream) {
		/* The output went out as it came: the rest of the report only. */
		struct sandq_result rest = *r;

		rest.stdout_len = rest.stderr_len = 0;
		return print_result(&rest);
	}
	if (cl->json) {
		if (print_json(r) < 0 || fflush(stdout) == EOF)
			return cli_fail("writing the result: %s", strerror(errno));
		return sandq_result_exit_status(r);
	}
	return print_result(r);
}

/*** Verbs ***/

/* Explains a failed sandq_wait() or sandq_result_get(). */
static int
wait_error(const struct cli *cl, struct sandq *c, const char *id, int rc)
{
	char secs[32];

	if (rc == -ETIMEDOUT)
		return cli_fail("no result for %s after %s s", id,
		    fmt_seconds(secs, sizeof(secs), (uint64_t)cl->wait_ms));
	if (rc == -ENOENT)
		return cli_fail("no result for %s", id);
	return cli_fail("%s", sandq_last_error(c));
}

/* Waits for id's result and prints it. Returns the exit status. */
static int
wait_and_print(const struct cli *cl, struct sandq *c, const char *id)
{
	struct sandq_result *r = NULL;
	int rc, status;

	if ((rc = sandq_wait(c, id, cl->wait_ms, &r)) < 0)
		return wait_error(cl, c, id, rc);
	status = output(cl, r);
	sandq_result_free(r);
	return status;
}

/* --stream: copies the job's live output to ours until it ends. 0 or 125. */
static int
stream_output(struct sandq *c, const char *id)
{
	struct sandq_stream *st = NULL;
	const void *data;
	size_t len;
	int fd, rc;

	if (sandq_stream_open(c, id, &st) < 0)
		return cli_fail("%s", sandq_last_error(c));
	while ((rc = sandq_stream_next(st, -1, &fd, &data, &len)) == 1) {
		FILE *f = fd == 2 ? stderr : stdout;

		if (fwrite(data, 1, len, f) != len || fflush(f) == EOF) {
			sandq_stream_close(st);
			return cli_fail("writing the job's output: %s", strerror(errno));
		}
	}
	sandq_stream_close(st);
	if (rc < 0)
		return cli_fail("live output of %s: %s", id, strerror(-rc));
	return 0;
}

/* run, sh, python: submit, then wait and print unless --detach. */
static int
cmd_submit(struct cli *cl, struct sandq *c)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_file *files = NULL;
	char id[SANDQ_ID_MAX + 1];
	const char *text;
	int rc, status;

	o.id = cl->id;
	o.env = cl->env;
	o.cwd = cl->cwd;
	if (cl->stdin_path) {
		o.stdin_data = cl->stdin_data;
		o.stdin_len = cl->stdin_len;
		o.has_stdin = true;
	}
	o.limits = cl->limits;
	o.preset = cl->preset;
	o.priority = cl->priority;
	o.sandbox = cl->sandbox;
	o.persist = cl->no_persist ? SANDQ_PERSIST_NO : SANDQ_PERSIST_DEFAULT;
	o.perms = cl->perms;
	o.nperms = cl->nperms;
	o.perm_preset = cl->perm_preset;
	o.image = cl->image;
	o.net = cl->net;
	o.allow = cl->allow;
	o.stream = cl->stream;
	if (cl->nfiles) {
		files = xcalloc(cl->nfiles, sizeof(*files));
		for (size_t i = 0; i < cl->nfiles; i++) {
			files[i].path = cl->files[i].path;
			files[i].data = cl->files[i].data;
			files[i].len = cl->files[i].len;
		}
		o.files = files;
		o.nfiles = cl->nfiles;
	}
	text = cl->text ? cl->text : cl->args[0];
	if (cl->verb == V_RUN)
		rc = sandq_submit_exec(c, (const char *const *)cl->args, &o, id);
	else if (cl->verb == V_SH)
		rc = sandq_submit_sh(c, text, &o, id);
	else
		rc = sandq_submit_python(c, text, &o, id);
	free(files);
	if (rc == -EINVAL)
		return usage_error(cl, "%s", sandq_last_error(c));
	if (rc < 0)
		return cli_fail("%s", sandq_last_error(c));
	if (cl->detach) {
		if (printf("%s\n", id) < 0 || fflush(stdout) == EOF)
			return cli_fail("writing the job id: %s", strerror(errno));
		return 0;
	}
	if (cl->stream && (status = stream_output(c, id)) != 0)
		return status;
	status = wait_and_print(cl, c, id);
	return status;
}

/* result: the stored result, without waiting. */
static int
cmd_result(const struct cli *cl, struct sandq *c)
{
	struct sandq_result *r = NULL;
	int rc, status;

	if ((rc = sandq_result_get(c, cl->args[0], &r)) < 0)
		return wait_error(cl, c, cl->args[0], rc);
	status = output(cl, r);
	sandq_result_free(r);
	return status;
}

/* help [VERB]: sandq's page, or the page of the command named. */
static int
cmd_help(struct cli *cl)
{
	if (cl->nargs > 1)
		return usage_error(cl, "help takes one command name, got %d", cl->nargs);
	if (cl->nargs == 0 || verb_parse(cl->args[0]) == V_HELP)
		cli_man_main();
	else if (!cli_man_print(cl->args[0]))
		return usage_error(cl, "unknown command '%s'", cl->args[0]);
	return 0;
}

/* Connects and runs a verb that talks to Redis. Returns the exit status. */
static int
run_verb(struct cli *cl)
{
	char err[512];
	struct sandq *c;
	int status;

	if ((cl->verb == V_RUN || cl->verb == V_SH || cl->verb == V_PYTHON) &&
	    (status = inputs_load(cl)) != 0)
		return status;
	if ((c = sandq_connect(cl->redis, cl->tenant, err, sizeof(err))) == NULL)
		return cli_fail("%s", err);
	if (cl->verb == V_WAIT) {
		if (!payload_id_valid(cl->args[0], strlen(cl->args[0])))
			status = usage_error(cl, "'%s' is not a job id", cl->args[0]);
		else
			status = wait_and_print(cl, c, cl->args[0]);
	} else if (cl->verb == V_RESULT) {
		if (!payload_id_valid(cl->args[0], strlen(cl->args[0])))
			status = usage_error(cl, "'%s' is not a job id", cl->args[0]);
		else
			status = cmd_result(cl, c);
	} else {
		status = cmd_submit(cl, c);
	}
	sandq_close(c);
	return status;
}

/*
 * Finds the verb before the options are parsed, so that a bad option given
 * ahead of it can already point at the verb's manual. Skips the values of
 * options that take one; returns NULL if there is no verb.
 */
static const char *
verb_prescan(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--") == 0)
			return i + 1 < argc ? argv[i + 1] : NULL;
		if (a[0] != '-' || a[1] == '\0')
			return a;
		if (a[1] != '-' || strchr(a, '=') != NULL)
			continue;
		for (const struct option *lo = long_opts; lo->name; lo++)
			if (lo->has_arg == required_argument && strcmp(a + 2, lo->name) == 0)
				i++;
	}
	return NULL;
}

/*
 * Parses the command line in two passes (see the top of the file) and runs
 * the verb. Returns the process's exit status.
 */
static int
cli_main(struct cli *cl, int argc, char **argv)
{
	char **vargv;
	int vargc, next = 0, rc;

	cl->verb_name = verb_prescan(argc, argv);
	/* doctor talks to no Redis and takes none of the options below. */
	if (cl->verb_name && strcmp(cl->verb_name, "doctor") == 0) {
		for (int i = 1; i < argc; i++)
			if (argv[i] == cl->verb_name)
				return doctor_main(argc - i - 1, argv + i + 1);
	}
	/* audit parses the whole line itself (cli/cli_audit.c). */
	if (cl->verb_name && strcmp(cl->verb_name, "audit") == 0)
		return cli_audit_main(argc, argv);
	if (cl->verb_name && (cl->verb = verb_parse(cl->verb_name)) == V_HELP)
		cl->verb = V_NONE;
	/* Options before the verb; "+" stops at the verb. */
	if ((rc = opts_parse(cl, argc, argv, "+:h", &next)) != 0)
		return rc;
	/* The verbs handed the connection below do not fill its default. */
	cl->redis = cli_redis_or_default(cl->redis);
	/* `sandq status`: hosts and tenants, read from Redis (cli_status.c). */
	if (next < argc && strcmp(argv[next], "status") == 0)
		return cli_status_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	/* `sandq presets [NAME]`: the published path presets (cli_presets.c). */
	if (next < argc && strcmp(argv[next], "presets") == 0)
		return cli_presets_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	/* `sandq dead ...` and `sandq cancel ...` (cli_dead.c). */
	if (next < argc && strcmp(argv[next], "dead") == 0)
		return cli_dead_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	if (next < argc && strcmp(argv[next], "cancel") == 0)
		return cli_cancel_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	/*
	 * `sandq batch run|status ...` (cli_batch.c): a job option here would
	 * apply to no case (each line is its job); its usage status is 2.
	 */
	if (next < argc && strcmp(argv[next], "batch") == 0) {
		unsigned extra = cl->given & ~OPTS_FETCH;

		if (extra != 0) {
			int o = O_BASE;

			while ((extra & BIT(o)) == 0)
				o++;
			cli_warn("option '--%s' does not apply to 'sandq batch'", opt_name(o));
			fputs("Try 'sandq help batch'.\n", stderr);
			return 2;
		}
		return cli_batch_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .wait_ms = cl->wait_ms, .json = cl->json,
		    .help = cl->help }, argc - next, argv + next);
	}
	/* `sandq image tag|untag|tags`: a tenant's image names (cli_image_tag.c). */
	if (next < argc && strcmp(argv[next], "image") == 0 && (next + 1 == argc ||
	    strcmp(argv[next + 1], "--help") == 0 || strcmp(argv[next + 1], "-h") == 0)) {
		cli_man_print("image");
		return next + 1 == argc && !cl->help ? 2 : 0;
	}
	if (next + 1 < argc && strcmp(argv[next], "image") == 0 &&
	    cli_image_tag_is_verb(argv[next + 1]))
		return cli_image_tag_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	/*
	 * `sandq mcp [--sandbox ID]`: an MCP server over stdio (cli_mcp.c). Of
	 * the job options only --sandbox applies (before or after the verb).
	 */
	if (next < argc && strcmp(argv[next], "mcp") == 0) {
		unsigned extra = cl->given & ~(OPTS_FETCH | BIT(O_SANDBOX));

		cl->verb_name = argv[next];
		if (extra != 0) {
			int o = O_BASE;

			while ((extra & BIT(o)) == 0)
				o++;
			cli_warn("option '--%s' does not apply to 'sandq mcp'", opt_name(o));
			fputs("Try 'sandq help mcp'.\n", stderr);
			return 2;
		}
		return cli_mcp_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    cl->sandbox, argc - next, argv + next);
	}
	/* `sandq tenant ...`: the admin verbs of cli_tenant.c. */
	if (next < argc && strcmp(argv[next], "tenant") == 0)
		return cli_tenant_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	/* `sandq image build|import ...` (cli_image_build.c). */
	if (cli_image_build_is_verb(argc - next, argv + next)) {
		unsigned extra = cl->given & ~OPTS_FETCH;

		cl->verb_name = argv[next];
		if (extra != 0) {
			int o = O_BASE;

			while ((extra & BIT(o)) == 0)
				o++;
			cli_warn("option '--%s' does not apply to 'sandq image %s'",
			    opt_name(o), argv[next + 1]);
			fprintf(stderr, "Try 'sandq image %s --help'.\n", argv[next + 1]);
			return 2;
		}
		return cli_image_build_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
	}
	/* `sandq image pull|ls ...` (cli_image.c). */
	if (next < argc && cli_image_is_group(argv[next]))
		return cli_image_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .wait_ms = cl->wait_ms, .json = cl->json,
		    .help = cl->help }, argc - next, argv + next);
	if (next < argc && cli_sandbox_is_group(argv[next])) {
		struct cli_conn conn = { .redis = cl->redis, .tenant = cl->tenant,
		    .wait_ms = cl->wait_ms, .json = cl->json, .help = cl->help };
		unsigned extra = cl->given & ~OPTS_FETCH;

		cl->verb_name = argv[next];
		if (extra != 0) {
			int o = O_BASE;

			while ((extra & BIT(o)) == 0)
				o++;
			return usage_error(cl, "option '--%s' does not apply to 'sandq %s'",
			    opt_name(o), argv[next]);
		}
		return cli_sandbox_main(&conn, argc - next, argv + next);
	}
	if (next >= argc) {
		if (cl->version) {
			printf("sandq %s\n", CLI_VERSION);
			return 0;
		}
		if (cl->help) {
			cli_man_main();
			return 0;
		}
		return usage_error(cl, "missing command (run, sh, python, wait, result, "
		    "sandbox, fs, kv, image, audit, tenant, status, dead, cancel, batch, mcp, doctor or help)");
	}
	cl->verb_name = argv[next];
	if ((cl->verb = verb_parse(argv[next])) == V_NONE)
		return usage_error(cl, "unknown command '%s'", argv[next]);
	vargv = argv + next;
	vargc = argc - next;
	if (cl->verb == V_HELP) {
		cl->args = vargv + 1;
		cl->nargs = vargc - 1;
		return cmd_help(cl);
	}

	/* The verb's own arguments; run's operands start at its command. */
	if ((rc = opts_parse(cl, vargc, vargv,
	    cl->verb == V_RUN ? "+:h" : ":h", &next)) != 0)
		return rc;
	cl->args = vargv + next;
	cl->nargs = vargc - next;
	if (cl->version) {
		printf("sandq %s\n", CLI_VERSION);
		return 0;
	}
	if (cl->help) {
		cli_man_print(cl->verb_name);
		return 0;
	}
	if ((rc = opts_check(cl)) != 0)
		return rc;
	return run_verb(cl);
}

int
main(int argc, char **argv)
{
	struct cli cl = { .wait_ms = -1 };
	int status;

	status = cli_main(&cl, argc, argv);
	cli_free(&cl);
	if (fflush(stdout) == EOF && status == 0)
		status = cli_fail("writing standard output: %s", strerror(errno));
	return status;
}
