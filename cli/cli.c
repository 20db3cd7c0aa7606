/*
 * cli.c - the sandq command: submits a job through libsandq, waits for its
 * result, writes the job's output to its own and exits with the job's
 * status, so a shell script can run a sandboxed command like a local one.
 *
 * The verbs, their options, the output and the exit statuses are a contract
 * other scripts rely on; the manual pages below (sandq help VERB) state it,
 * and every change to one must change the other.
 *
 * Options may come before the verb ("sandq --redis URL sh ...") and after
 * it: argv is read twice with getopt_long and one option table, first up to
 * the verb, then the verb's own arguments. run stops at its first operand
 * (or "--"), as env(1) and timeout(1) do, so the command's own options stay
 * its own. The options a verb does not take are refused after both passes.
 *
 * Sections: manual pages, option parsing, input files, output, verbs.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "../workspace/perms.h"
#include "cli.h"
#include "doctor.h"
#include "../libsandq/sandq.h"

#define CLI_VERSION "0.1.0"
#define EXIT_SANDQ 125			/* sandq itself failed */
#define DEFAULT_REDIS "redis://127.0.0.1:6379"
#define DEFAULT_TENANT "default"
#define SECONDS_MAX 1000000000ull	/* bound of any SECONDS option */
#define B64_CHUNK (3u * 1024u * 1024u)	/* a multiple of 3: chunks concatenate */

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
	uint8_t *stdin_data;		/* contents of --stdin */
	size_t stdin_len;
	char *text;			/* sh/python text read from stdin */
};

/*** Manual pages ***/

/*
 * Each page is NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXIT STATUS,
 * ENVIRONMENT, EXAMPLES, laid out as man(1) prints them. The option and
 * status texts are shared so the pages cannot contradict each other.
 */

static const char man_opts_conn[] =
"   Connection\n"
"       --redis URL\n"
"              The Redis server holding the queues:\n"
"              redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or\n"
"              unix://[[USER]:PASSWORD@]/PATH. Default: $SANDQ_REDIS, else\n"
"              redis://127.0.0.1:6379.\n"
"\n"
"       --tenant NAME\n"
"              The tenant whose queue and results are used: 1 to 64\n"
"              characters of A-Z a-z 0-9 _ -. Default: $SANDQ_TENANT, else\n"
"              default.\n"
"\n";

static const char man_opts_limits[] =
"   Limits\n"
"       Limits not given come from the preset. A limit above the server's\n"
"       ceiling gets the job rejected (exit status 125, with a message naming\n"
"       the limit).\n"
"\n"
"       --timeout SECONDS\n"
"              Wall-clock time the job may run, e.g. 30 or 0.5. When it\n"
"              passes, every process of the job is killed and sandq exits\n"
"              with 124.\n"
"\n"
"       --cpu SECONDS\n"
"              CPU time the job may use (the sandbox rounds it up to whole\n"
"              seconds).\n"
"\n"
"       --memory SIZE\n"
"              Address space of each of the job's processes. SIZE is a\n"
"              number of bytes, or one with a K, M, G or T suffix (binary\n"
"              multiples: 512M is 512 MiB).\n"
"\n"
"       --pids N\n"
"              Processes and threads the job may have at once.\n"
"\n"
"       --output SIZE\n"
"              Bytes kept of each of standard output and standard error; the\n"
"              rest is discarded and the stream marked truncated.\n"
"\n"
"       --disk SIZE\n"
"              Size of /workspace and of /tmp, and the largest file the job\n"
"              may write.\n"
"\n"
"       --preset strict|normal|permissive\n"
"              The set of limits used for those not given. Without it the\n"
"              server's default preset applies (normal unless its operator\n"
"              chose another):\n"
"\n"
"                  preset       time   cpu  memory  pids  output  disk\n"
"                  strict        10s   10s    256M    32     64K   16M\n"
"                  normal        30s   30s      1G   256      1M  256M\n"
"                  permissive   600s  600s      4G  1024     16M    2G\n"
"\n";

static const char man_opts_job[] =
"   Job\n"
"       --env NAME=VALUE\n"
"              Sets a variable in the job's environment; repeatable, the last\n"
"              value of a name wins. The job sees only these variables, plus\n"
"              PATH=/usr/local/bin:/usr/bin:/bin, HOME=/workspace,\n"
"              LANG=C.UTF-8 and PYTHONNOUSERSITE=1 unless they are set here.\n"
"\n"
"       --cwd DIR\n"
"              The job's working directory: absolute inside the sandbox, or\n"
"              relative to /workspace. A missing directory under /workspace or\n"
"              /tmp is created. Default: /workspace.\n"
"\n"
"       --stdin FILE\n"
"              Feeds the contents of FILE to the job's standard input; - reads\n"
"              sandq's own standard input to its end. At most 16M. Without it\n"
"              the job reads from /dev/null.\n"
"\n"
"       --file PATH=LOCALFILE\n"
"              Copies LOCALFILE into the sandbox as PATH (mode 0644) before the\n"
"              job starts; repeatable. PATH is relative to /workspace, which is\n"
"              the root for it: job.sh and /job.sh both mean /workspace/job.sh.\n"
"              Missing parent directories are created. At most 64M in all, and\n"
"              the whole job must fit the server's max_job_bytes (32M unless\n"
"              configured otherwise).\n"
"\n"
"       --id ID\n"
"              Uses ID as the job's id instead of a random j-XXXXXXXX... one:\n"
"              1 to 128 characters of A-Z a-z 0-9 . _ : -. Results are stored\n"
"              under the id, so it should be unique among the tenant's jobs.\n"
"\n"
"       --priority N\n"
"              Among the tenant's queued jobs, those with a higher N start\n"
"              first (default 0; may be negative).\n"
"\n"
"   Persistent sandboxes\n"
"       --sandbox ID\n"
"              Runs the job in the persistent sandbox ID (see sandq help\n"
"              sandbox) instead of an empty /workspace: it starts in the\n"
"              sandbox's files, and what it changes there is committed back as\n"
"              the sandbox's next version. Jobs on one sandbox run one at a\n"
"              time, in order.\n"
"\n"
"       --no-persist\n"
"              With --sandbox: runs on the sandbox's files but commits nothing.\n"
"\n"
"       --stream\n"
"              Prints the job's output as it is produced, stdout to stdout and\n"
"              stderr to stderr, rather than all of it at the end; the exit\n"
"              status is the job's, as without it. Not with --detach or --json.\n"
"\n"
"       --perm PATTERN=LEVEL\n"
"              A path rule, repeatable: PATTERN (in the sandbox's tree, / being\n"
"              /workspace; * stays within a component, ** spans any number of\n"
"              directories) gets LEVEL: none (hidden), view (listed, not\n"
"              readable), read (not changeable) or write. The most specific\n"
"              rule wins (docs/paths.md). Changes a rule refuses are left out\n"
"              of the commit and named on standard error.\n"
"\n"
"       --perm-preset NAME\n"
"              The rules the --perm rules go on top of: agent-safe (the\n"
"              default), read-only, full-access, development or view-only.\n"
"\n";

static const char man_opts_submit_out[] =
"   Waiting and output\n"
"       --detach\n"
"              Prints the job's id on one line and exits with 0 at once;\n"
"              collect the result later with sandq wait ID or sandq result ID.\n"
"              --json has no effect with it.\n"
"\n";

static const char man_opts_out[] =
"       --wait-timeout SECONDS\n"
"              Stops waiting after SECONDS (e.g. 60 or 2.5), prints\n"
"              \"sandq: no result for ID after SECONDS s\" and exits with 125.\n"
"              The job itself is not cancelled: its result can be fetched\n"
"              later. Default: wait for as long as it takes.\n"
"\n"
"       --json\n"
"              Prints the whole result as one JSON object on one line instead\n"
"              of the job's output: id, status, exit_code, signal, stdout,\n"
"              stdout_len, stdout_truncated, stderr, stderr_len,\n"
"              stderr_truncated, wall_ms, cpu_ms, max_rss_kb, queued_at,\n"
"              started_at, finished_at (epoch milliseconds), host, worker,\n"
"              attempt, error ({\"code\", \"message\"} or null) and, for a job on\n"
"              a sandbox, sandbox, version, snapshot, changed, changes and\n"
"              refused_paths. Output that is\n"
"              not valid UTF-8 is given as base64 in stdout_b64 or stderr_b64\n"
"              instead. The exit status is the same as without --json.\n"
"\n"
"       -h, --help\n"
"              Prints this manual and exits.\n"
"\n";

static const char man_exit[] =
"EXIT STATUS\n"
"       0      The job ran and exited with 0.\n"
"\n"
"       N      The job exited with status N (1 to 255).\n"
"\n"
"       124    The job ran past its --timeout, or was stopped by another limit\n"
"              (CPU time, memory, processes, output, disk).\n"
"\n"
"       125    sandq could not run the job (it was rejected, expired, was\n"
"              cancelled, or the server failed), or sandq itself failed: a bad\n"
"              option, Redis unreachable, no result before --wait-timeout.\n"
"\n"
"       128+N  The job was killed by signal N.\n"
"\n"
"       As with timeout(1) and env(1), a job that exits with 124, 125 or more\n"
"       than 128 itself cannot be told apart from these; --json says which.\n"
"\n";

static const char man_env[] =
"ENVIRONMENT\n"
"       SANDQ_REDIS\n"
"              The default of --redis.\n"
"\n"
"       SANDQ_TENANT\n"
"              The default of --tenant.\n"
"\n";

static const char man_output[] =
"       The job's standard output is written to sandq's standard output and its\n"
"       standard error to sandq's standard error, byte for byte. sandq's own\n"
"       notes go to standard error and start with \"sandq: \": the reason when\n"
"       the job could not run (\"sandq: rejected: MESSAGE\") or was stopped by\n"
"       a limit or a signal, and \"sandq: stdout truncated at N bytes\" when a\n"
"       stream reached its output limit.\n"
"\n"
"       Text that sandq prints but did not write (names, labels, keys, ids,\n"
"       paths, link targets, reasons, messages quoting them), on standard\n"
"       output and standard error, in every verb, has what a terminal would\n"
"       act on escaped: \\\\ for a backslash, \\n \\t \\r, \\xNN for other\n"
"       control bytes, DEL and bytes that are not UTF-8, \\u0080-\\u009f for\n"
"       C1 controls, \\uNNNN for bidirectional-text controls. Bytes asked for\n"
"       as such stay exact: the job's output, fs cat, kv get, sandbox export\n"
"       and --json (JSON-escaped).\n"
"\n";

static const char man_main[] =
"SANDQ(1)                        User Commands                       SANDQ(1)\n"
"\n"
"NAME\n"
"       sandq - run commands in sandq's Linux sandboxes, through Redis\n"
"\n"
"SYNOPSIS\n"
"       sandq [OPTIONS] run [OPTIONS] [--] COMMAND [ARG]...\n"
"       sandq [OPTIONS] sh [OPTIONS] SCRIPT\n"
"       sandq [OPTIONS] python [OPTIONS] CODE\n"
"       sandq [OPTIONS] wait [OPTIONS] ID\n"
"       sandq [OPTIONS] result [OPTIONS] ID\n"
"       sandq sandbox create|ls|info|fork|rm|history|export|import ...\n"
"       sandq fs ls|cat|put|get|rm|stat ID ...\n"
"       sandq kv get|set|del|keys ID ...\n"
"       sandq audit [--tenant T] [--job ID] [--sandbox ID] [--category C]\n"
"             [--denied] [--since DURATION] [--json] [--summary] [--export FILE]\n"
"       sandq tenant add|ls|show|set|rm ...\n"
"       sandq status [--json]\n"
"       sandq dead ls|show|retry|purge ...\n"
"       sandq cancel ID...\n"
"       sandq batch run CASES.jsonl [--base SANDBOX] [--concurrency N]\n"
"             [--out RESULTS.jsonl] [--id BATCH] [--json]\n"
"       sandq batch status BATCH [--json]\n"
"       sandq doctor [--json]\n"
"       sandq help [COMMAND]\n"
"       sandq --help | --version\n"
"\n"
"DESCRIPTION\n"
"       sandq adds a job to a tenant's queue in Redis (the stream\n"
"       sandq:{TENANT}:jobs). A sandqd daemon takes it and runs it in a fresh\n"
"       sandbox: its own namespaces, a read-only system, an empty /workspace,\n"
"       no network, an unprivileged user and resource limits. sandq then waits\n"
"       for the result, writes the job's output to its own and exits with the\n"
"       job's exit status, so a script can use a sandboxed command like a local\n"
"       one.\n"
"\n"
"       Options may be given before or after the command name. sandq help\n"
"       COMMAND, or sandq COMMAND --help, shows a command's own manual.\n"
"\n"
"COMMANDS\n"
"       run      Runs COMMAND with its arguments directly, without a shell.\n"
"       sh       Runs SCRIPT with bash -c.\n"
"       python   Runs CODE with python3 -c.\n"
"       wait     Waits for the result of a job submitted earlier and prints it.\n"
"       result   Prints the stored result of a job, without waiting.\n"
"       sandbox  Creates, forks, lists, exports, imports and removes\n"
"                persistent sandboxes: workspaces that last across jobs\n"
"                (sandq help sandbox).\n"
"       fs       Reads and changes a sandbox's files without running a job\n"
"                (sandq help fs).\n"
"       kv       A sandbox's key-value store (sandq help kv).\n"
"       audit    Reads the audit trail: a tenant's Redis audit stream, or a\n"
"                host's audit database (sandq help audit).\n"
"       tenant   Adds, changes and removes tenants and their confined\n"
"                Redis credentials (sandq help tenant).\n"
"       status   The hosts, and each tenant's queue, running jobs, results\n"
"                of the last minute and share of the workers.\n"
"       dead     Lists, shows, retries and purges jobs that ran out of\n"
"                attempts (sandq help dead).\n"
"       cancel   Stops queued or running jobs, from any host (sandq help\n"
"                cancel).\n"
"       batch    Runs a file of jobs, one JSON object a line, with bounded\n"
"                concurrency, checks each one's output against what it\n"
"                expects, and resumes after an interruption (sandq help\n"
"                batch).\n"
"       doctor   Prints which isolation mechanisms this machine gives and\n"
"                which limits sandqd can therefore enforce here.\n"
"       help     Shows the manual of a command.\n"
"\n"
"OUTPUT\n";

static const char man_main_opts[] =
"OPTIONS\n"
"       run, sh and python take every option below; wait and result take\n"
"       --redis, --tenant, --json and --wait-timeout.\n"
"\n";

static const char man_main_examples[] =
"EXAMPLES\n"
"       sandq sh 'echo hi; exit 3'; echo $?\n"
"              Prints hi, then 3.\n"
"\n"
"       sandq --timeout 0.5 --memory 256M run -- python3 -c 'print(1)'\n"
"              Runs python3 directly, with tighter limits.\n"
"\n"
"       id=$(sandq --detach sh 'make test'); sandq wait \"$id\"\n"
"              Submits now, collects the output later.\n"
"\n"
"       sandq --file job.sh=./job.sh sh 'bash job.sh'\n"
"              Ships a local script into the sandbox and runs it.\n"
"\n"
"       sandq sandbox create proj --from . && sandq sh --sandbox proj 'make'\n"
"              Copies this folder (minus .gitignore'd files) into a persistent\n"
"              sandbox and builds in it; the build output stays there.\n"
"\n"
"SEE ALSO\n"
"       sandqd(8), timeout(1), env(1)\n";

/* One page per verb; the shared texts above fill the rest. */
struct man_page {
	enum verb verb;
	const char *name;		/* "run" */
	const char *head;		/* title line, NAME, SYNOPSIS, DESCRIPTION */
	bool submits;			/* takes the job options */
	const char *examples;		/* EXAMPLES */
};

static const struct man_page man_pages[] = {
	{ V_RUN, "run",
"SANDQ-RUN(1)                    User Commands                   SANDQ-RUN(1)\n"
"\n"
"NAME\n"
"       sandq run - run a command in a sandbox\n"
"\n"
"SYNOPSIS\n"
"       sandq run [OPTIONS] [--] COMMAND [ARG]...\n"
"\n"
"DESCRIPTION\n"
"       Runs COMMAND with the ARGs in a fresh sandbox, directly: no shell is\n"
"       involved, so each ARG reaches the program exactly as given. COMMAND is\n"
"       looked up in the job's PATH. Options end at COMMAND or at --, so\n"
"       COMMAND's own options are left to it.\n"
"\n", true,
"EXAMPLES\n"
"       sandq run -- python3 -c 'print(6 * 7)'\n"
"              Prints 42.\n"
"\n"
"       sandq run --cwd src --file src/a.c=a.c -- cc -c a.c\n"
"              Compiles a local file in the sandbox.\n" },
	{ V_SH, "sh",
"SANDQ-SH(1)                     User Commands                    SANDQ-SH(1)\n"
"\n"
"NAME\n"
"       sandq sh - run a shell script in a sandbox\n"
"\n"
"SYNOPSIS\n"
"       sandq sh [OPTIONS] SCRIPT\n"
"       sandq sh [OPTIONS] -\n"
"\n"
"DESCRIPTION\n"
"       Runs SCRIPT with bash -c in a fresh sandbox. With -, the script is read\n"
"       from sandq's standard input (not together with --stdin -). A script is\n"
"       at most 128K; ship a longer one with --file and run it.\n"
"\n", true,
"EXAMPLES\n"
"       sandq sh 'echo hi; exit 3'; echo $?\n"
"              Prints hi, then 3.\n"
"\n"
"       sandq --env A=1 sh 'echo $A'\n"
"              Prints 1.\n"
"\n"
"       sandq --file x.txt=/etc/hostname sh 'cat x.txt'\n"
"              Prints this host's name, read inside the sandbox.\n" },
	{ V_PYTHON, "python",
"SANDQ-PYTHON(1)                 User Commands                SANDQ-PYTHON(1)\n"
"\n"
"NAME\n"
"       sandq python - run Python code in a sandbox\n"
"\n"
"SYNOPSIS\n"
"       sandq python [OPTIONS] CODE\n"
"       sandq python [OPTIONS] -\n"
"\n"
"DESCRIPTION\n"
"       Runs CODE with python3 -c in a fresh sandbox. With -, the code is read\n"
"       from sandq's standard input (not together with --stdin -). Code is at\n"
"       most 128K; ship a longer program with --file and run it.\n"
"\n", true,
"EXAMPLES\n"
"       echo abc | sandq --stdin - python 'print(input().upper())'\n"
"              Prints ABC.\n"
"\n"
"       sandq --json python 'print(1)'\n"
"              Prints the whole result as JSON.\n" },
	{ V_WAIT, "wait",
"SANDQ-WAIT(1)                   User Commands                  SANDQ-WAIT(1)\n"
"\n"
"NAME\n"
"       sandq wait - wait for a job's result and print it\n"
"\n"
"SYNOPSIS\n"
"       sandq wait [OPTIONS] ID\n"
"\n"
"DESCRIPTION\n"
"       Waits for the result of the job ID (submitted with --detach, or by\n"
"       another client) and prints it as run, sh and python do, with the same\n"
"       exit status. A result that is already stored is printed at once;\n"
"       results are kept for a day unless the server is configured otherwise.\n"
"\n", false,
"EXAMPLES\n"
"       id=$(sandq --detach sh 'sleep 1; echo done'); sandq wait \"$id\"\n"
"              Prints done.\n"
"\n"
"       sandq wait --wait-timeout 10 j-0123456789abcdef01234567\n"
"              Gives up after ten seconds, with 125.\n" },
	{ V_RESULT, "result",
"SANDQ-RESULT(1)                 User Commands                SANDQ-RESULT(1)\n"
"\n"
"NAME\n"
"       sandq result - print a job's stored result\n"
"\n"
"SYNOPSIS\n"
"       sandq result [OPTIONS] ID\n"
"\n"
"DESCRIPTION\n"
"       Prints the stored result of the job ID as run, sh and python do, with\n"
"       the same exit status, without waiting. When there is none (the job has\n"
"       not finished, or its result expired), prints \"sandq: no result for ID\"\n"
"       and exits with 125. --wait-timeout is accepted and has no effect.\n"
"\n", false,
"EXAMPLES\n"
"       sandq --json result j-0123456789abcdef01234567\n"
"              Prints the stored result as JSON.\n" },
};

static void
man_print(const struct man_page *p)
{
	fputs(p->head, stdout);
	fputs("OUTPUT\n", stdout);
	fputs(man_output, stdout);
	fputs("OPTIONS\n", stdout);
	fputs(man_opts_conn, stdout);
	if (p->submits) {
		fputs(man_opts_limits, stdout);
		fputs(man_opts_job, stdout);
		fputs(man_opts_submit_out, stdout);
	} else {
		fputs("   Output\n", stdout);
	}
	fputs(man_opts_out, stdout);
	fputs(man_exit, stdout);
	fputs(man_env, stdout);
	fputs(p->examples, stdout);
}

static void
man_print_main(void)
{
	fputs(man_main, stdout);
	fputs(man_output, stdout);
	fputs(man_main_opts, stdout);
	fputs(man_opts_conn, stdout);
	fputs(man_opts_limits, stdout);
	fputs(man_opts_job, stdout);
	fputs(man_opts_submit_out, stdout);
	fputs(man_opts_out, stdout);
	fputs("       --version\n"
	    "              Prints \"sandq " CLI_VERSION "\" and exits.\n\n", stdout);
	fputs(man_exit, stdout);
	fputs(man_env, stdout);
	fputs(man_main_examples, stdout);
}

static const struct man_page *
man_find(enum verb v)
{
	for (size_t i = 0; i < sizeof(man_pages) / sizeof(man_pages[0]); i++)
		if (man_pages[i].verb == v)
			return &man_pages[i];
	return NULL;
}

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
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
	if (cl->verb != V_NONE && cl->verb != V_HELP)
		fprintf(stderr, "Try 'sandq help %s'.\n", cl->verb_name);
	else
		fputs("Try 'sandq --help'.\n", stderr);
	return EXIT_SANDQ;
}

/* Prints a failure of sandq itself (not of usage) and returns 125. */
static int __attribute__((format(printf, 1, 2)))
failure(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
	return EXIT_SANDQ;
}

const char *
cli_tenant_or_default(const char *given)
{
	if (given == NULL && (given = getenv("SANDQ_TENANT")) == NULL)
		given = DEFAULT_TENANT;
	return given;
}

/*
 * Parses "2", "0.5" or ".25" seconds into milliseconds; digits past the
 * third decimal round up, so a limit is never shortened. 0 or -EINVAL.
 */
int
cli_parse_seconds(const char *s, uint64_t *ms)
{
	uint64_t whole = 0, frac = 0;
	int digits = 0;
	bool more = false;
	const char *p = s;

	if (!isdigit((unsigned char)p[0]) &&
	    !(p[0] == '.' && isdigit((unsigned char)p[1])))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		whole = whole * 10 + (uint64_t)(*p - '0');
		if (whole > SECONDS_MAX)
			return -EINVAL;
	}
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++) {
			if (digits < 3) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				digits++;
			} else if (*p != '0') {
				more = true;
			}
		}
	}
	if (*p != '\0')
		return -EINVAL;
	for (; digits < 3; digits++)
		frac *= 10;
	*ms = whole * 1000 + frac + (more ? 1 : 0);
	return 0;
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
			return usage_error(cl, "--perm-preset '%s': expected agent-safe, "
			    "read-only, full-access, development or view-only", arg);
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
	if (cl->redis == NULL && (cl->redis = getenv("SANDQ_REDIS")) == NULL)
		cl->redis = DEFAULT_REDIS;
	cl->tenant = cli_tenant_or_default(cl->tenant);
	if (cl->no_persist && cl->sandbox == NULL)
		return usage_error(cl, "--no-persist needs --sandbox");
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

/*
 * Reads fd to its end into *out (NUL-terminated, owned by the caller).
 * Returns 0, -EFBIG past max bytes, or -errno.
 */
static int
read_fd(int fd, size_t max, uint8_t **out, size_t *outlen)
{
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;

	*out = NULL;
	*outlen = 0;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			if (len > max) {
				free(buf);
				return -EFBIG;
			}
			cap = cap ? cap * 2 : 64 * 1024;
			if (cap > max + 1)
				cap = max + 1;
			buf = xreallocarray(buf, cap + 1, 1);
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			int rc = -errno;

			if (errno == EINTR)
				continue;
			free(buf);
			return rc;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		free(buf);
		return -EFBIG;
	}
	if (buf == NULL)
		buf = xmalloc(1);
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/* Reads a local file (or our stdin for "-" when dash_is_stdin). */
int
cli_read_input(const char *path, bool dash_is_stdin, size_t max, uint8_t **out,
    size_t *outlen)
{
	int fd, rc;

	if (dash_is_stdin && strcmp(path, "-") == 0)
		return read_fd(STDIN_FILENO, max, out, outlen);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	rc = read_fd(fd, max, out, outlen);
	close(fd);
	return rc;
}

/* Explains a cli_read_input() failure. */
static int
input_error(const char *what, const char *path, int rc, size_t max)
{
	if (rc == -EFBIG)
		return failure("%s %s: larger than %zu bytes", what, path, max);
	return failure("%s %s: %s", what, path, strerror(-rc));
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

		if ((rc = read_fd(STDIN_FILENO, JOB_ARG_MAX - 1, &text, &len)) < 0)
			return input_error("reading", "standard input", rc, JOB_ARG_MAX - 1);
		cl->text = (char *)text;
		/* It becomes one argument of bash/python3: a C string. */
		if (memchr(cl->text, '\0', len) != NULL)
			return failure("the %s on standard input contains a NUL byte",
			    cl->verb == V_SH ? "script" : "code");
	}
	return 0;
}

static void
cli_free(struct cli *cl)
{
	free(cl->env);
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

/* Base64 of n bytes (EVP_EncodeBlock), NUL-terminated, owned by the caller. */
int
cli_perm_add(struct sandq_perm **perms, size_t *n, const char *arg, char *msg,
    size_t msglen)
{
	char pat[PERMS_PATTERN_MAX + 1];
	enum perm_level lvl;
	struct err e = { 0 };

	if (perms_parse_rule(arg, pat, sizeof(pat), &lvl, &e) < 0) {
		snprintf(msg, msglen, "--perm '%.200s': %s", arg, e.msg);
		return -1;
	}
	if (*n >= PERMS_RULES_MAX) {
		snprintf(msg, msglen, "--perm: more than %d rules", PERMS_RULES_MAX);
		return -1;
	}
	*perms = xreallocarray(*perms, *n + 1, sizeof(**perms));
	(*perms)[*n].pattern = xstrdup(pat);
	(*perms)[(*n)++].level = perms_level_str(lvl);
	return 0;
}

const char *
cli_perm_preset(const char *arg)
{
	const char *const *names = perms_preset_names();

	for (size_t i = 0; names[i]; i++)
		if (strcmp(arg, names[i]) == 0)
			return names[i];
	return NULL;
}

char *
cli_base64(const uint8_t *p, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	char *o = out;

	/* EVP_EncodeBlock takes an int; whole 3-byte chunks concatenate. */
	while (n > 0) {
		size_t chunk = n > B64_CHUNK ? B64_CHUNK : n;

		o += EVP_EncodeBlock((unsigned char *)o, p, (int)chunk);
		p += chunk;
		n -= chunk;
	}
	*o = '\0';
	return out;
}

/* Sets name to the bytes as a string if they are UTF-8, else name_b64. */
static void
json_set_bytes(json_t *obj, const char *name, const uint8_t *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	char key[32];

	if (s != NULL) {
		json_object_set_new(obj, name, s);
		return;
	}
	snprintf(key, sizeof(key), "%s_b64", name);
	{
		char *b64 = cli_base64(p, n);
		json_object_set_new(obj, key, json_string(b64));
		free(b64);
	}
}

static json_t *
json_str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/*
 * r as the JSON object --json prints (the fields listed in the manual's
 * --json). The caller owns it. sandq batch writes the same objects.
 */
json_t *
cli_result_json(const struct sandq_result *r)
{
	json_t *o = json_object();

	json_object_set_new(o, "id", json_str_or_null(r->id));
	json_object_set_new(o, "status", json_str_or_null(r->status));
	json_object_set_new(o, "exit_code", json_integer(r->exit_code));
	json_object_set_new(o, "signal", json_integer(r->signal));
	json_set_bytes(o, "stdout", r->stdout_data, r->stdout_len);
	json_object_set_new(o, "stdout_len", json_integer((json_int_t)r->stdout_len));
	json_object_set_new(o, "stdout_truncated", json_boolean(r->stdout_truncated));
	json_set_bytes(o, "stderr", r->stderr_data, r->stderr_len);
	json_object_set_new(o, "stderr_len", json_integer((json_int_t)r->stderr_len));
	json_object_set_new(o, "stderr_truncated", json_boolean(r->stderr_truncated));
	json_object_set_new(o, "wall_ms", json_integer((json_int_t)r->wall_ms));
	json_object_set_new(o, "cpu_ms", json_integer((json_int_t)r->cpu_ms));
	json_object_set_new(o, "max_rss_kb", json_integer((json_int_t)r->max_rss_kb));
	json_object_set_new(o, "queued_at", json_integer((json_int_t)r->queued_at));
	json_object_set_new(o, "started_at", json_integer((json_int_t)r->started_at));
	json_object_set_new(o, "finished_at", json_integer((json_int_t)r->finished_at));
	json_object_set_new(o, "host", json_str_or_null(r->host));
	json_object_set_new(o, "worker", json_integer(r->worker));
	json_object_set_new(o, "attempt", json_integer(r->attempt));
	if (r->error_code || r->error_message)
		json_object_set_new(o, "error", json_pack("{s:s, s:s}",
		    "code", r->error_code ? r->error_code : "",
		    "message", r->error_message ? r->error_message : ""));
	else
		json_object_set_new(o, "error", json_null());
	{
		json_t *refused = json_object();

		for (size_t i = 0; i < r->nrefused; i++)
			json_object_set_new(refused, r->refused[i].syscall,
			    json_integer((json_int_t)r->refused[i].count));
		json_object_set_new(o, "refused", refused);
	}
	if (r->sandbox) {
		json_t *ch = json_array(), *rp = json_array();

		json_object_set_new(o, "sandbox", json_string(r->sandbox));
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
		json_object_set_new(o, "snapshot", json_str_or_null(r->snapshot));
		for (size_t i = 0; i < r->nchanged; i++)
			json_array_append_new(ch, json_str_or_null(r->changed[i]));
		json_object_set_new(o, "changed", ch);
		json_object_set_new(o, "changed_truncated",
		    json_boolean(r->changed_truncated));
		json_object_set_new(o, "changes", json_pack("{s:I, s:I, s:I}",
		    "added", (json_int_t)r->added, "modified", (json_int_t)r->modified,
		    "removed", (json_int_t)r->removed));
		for (size_t i = 0; i < r->nrefused_paths; i++)
			json_array_append_new(rp, json_str_or_null(r->refused_paths[i]));
		json_object_set_new(o, "refused_paths", rp);
	}
	return o;
}

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
		return failure("writing the job's output: %s", strerror(errno));
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
			return failure("writing the result: %s", strerror(errno));
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
		return failure("no result for %s after %s s", id,
		    fmt_seconds(secs, sizeof(secs), (uint64_t)cl->wait_ms));
	if (rc == -ENOENT)
		return failure("no result for %s", id);
	return failure("%s", sandq_last_error(c));
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
		return failure("%s", sandq_last_error(c));
	while ((rc = sandq_stream_next(st, -1, &fd, &data, &len)) == 1) {
		FILE *f = fd == 2 ? stderr : stdout;

		if (fwrite(data, 1, len, f) != len || fflush(f) == EOF) {
			sandq_stream_close(st);
			return failure("writing the job's output: %s", strerror(errno));
		}
	}
	sandq_stream_close(st);
	if (rc < 0)
		return failure("live output of %s: %s", id, strerror(-rc));
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
		return failure("%s", sandq_last_error(c));
	if (cl->detach) {
		if (printf("%s\n", id) < 0 || fflush(stdout) == EOF)
			return failure("writing the job id: %s", strerror(errno));
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

/* help [VERB]. */
static int
cmd_help(struct cli *cl)
{
	const struct man_page *p;
	enum verb v;

	if (cl->nargs == 0) {
		man_print_main();
		return 0;
	}
	if (cl->nargs > 1)
		return usage_error(cl, "help takes one command name, got %d", cl->nargs);
	if ((v = verb_parse(cl->args[0])) == V_HELP) {
		man_print_main();
		return 0;
	}
	if (strcmp(cl->args[0], "doctor") == 0) {
		doctor_help();
		return 0;
	}
	if (strcmp(cl->args[0], "audit") == 0) {
		cli_audit_help();
		return 0;
	}
	if (strcmp(cl->args[0], "tenant") == 0) {
		cli_tenant_help();
		return 0;
	}
	if (strcmp(cl->args[0], "status") == 0) {
		cli_status_help();
		return 0;
	}
	if (strcmp(cl->args[0], "dead") == 0) {
		cli_dead_help();
		return 0;
	}
	if (strcmp(cl->args[0], "cancel") == 0) {
		cli_cancel_help();
		return 0;
	}
	if (strcmp(cl->args[0], "batch") == 0) {
		cli_batch_help();
		return 0;
	}
	if (cli_sandbox_is_group(cl->args[0])) {
		cli_sandbox_help(cl->args[0]);
		return 0;
	}
	if ((p = man_find(v)) == NULL)
		return usage_error(cl, "unknown command '%s'", cl->args[0]);
	man_print(p);
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
		return failure("%s", err);
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
	const struct man_page *p;
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
	if (cl->redis == NULL && (cl->redis = getenv("SANDQ_REDIS")) == NULL)
		cl->redis = DEFAULT_REDIS;
	/* `sandq status`: hosts and tenants, read from Redis (cli_status.c). */
	if (next < argc && strcmp(argv[next], "status") == 0)
		return cli_status_main(&(struct cli_conn){ .redis = cl->redis,
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
	/* `sandq tenant ...`: the admin verbs of cli_tenant.c. */
	if (next < argc && strcmp(argv[next], "tenant") == 0)
		return cli_tenant_main(&(struct cli_conn){ .redis = cl->redis,
		    .tenant = cl->tenant, .json = cl->json, .help = cl->help },
		    argc - next, argv + next);
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
			man_print_main();
			return 0;
		}
		return usage_error(cl, "missing command (run, sh, python, wait, result, "
		    "sandbox, fs, kv, audit, tenant, status, dead, cancel, batch, doctor or help)");
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
		if ((p = man_find(cl->verb)) != NULL)
			man_print(p);
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
		status = failure("writing standard output: %s", strerror(errno));
	return status;
}
