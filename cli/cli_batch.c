/*
 * cli_batch.c - `sandq batch run CASES.jsonl` and `sandq batch status ID`:
 * a file of jobs, one JSON object a line, run with a bound on how many are
 * in flight, each checked against the output it expects; resumable after
 * Ctrl-C or a crash, with its progress in Redis for other terminals.
 *
 * DESIGN. One blocking hiredis connection and no threads. Each case in
 * flight waits for one job at a time (its fork, its run, its fork's
 * deletion), and one BLPOP on the done lists of all of them takes the next
 * answer, for at most POLL_MS so that the progress bar and Ctrl-C are
 * served. A line becomes a job by converting its JSON to msgpack as it
 * is, without the batch's own fields (expect, expect_mode) and with its
 * id: sandqd checks it as it checks any client's job and refuses a bad
 * field with a `rejected` result naming it (docs/protocol.md), so every
 * field of the protocol works here without a second copy of its checks.
 *
 * Ids are derived, so that a run can be resumed: the batch's is --id or a
 * hash of the file, case N's job is batch:BATCH:N, and so is its --base
 * fork. A case is answered when --out has its line or Redis its result,
 * and a run skips those. Fork and delete jobs get fresh random ids: theirs
 * would otherwise collide with an earlier run's, whose results are kept.
 *
 * proto/batchcase.c turns a line into its job and judges its output;
 * cli_batch_status.c reads the progress record and words summaries.
 *
 * Sections: cases, results file, Redis, progress and summary,
 * the run, entry.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "../proto/keys.h"
#include "cancel.h"
#include "cli_batch.h"
#include "cli_batch_int.h"
#include "cli_common.h"
#include "cli_man.h"
#include "redis_sync.h"

#define PREFIX "sandq"
#define BATCH_ID_HASH 16		/* hex digits of SHA-256 in a derived id */
#define CASE_ID_MAX (6 + BATCH_ID_MAX + 1 + 10)	/* "batch:" BATCH ":" LINE */
#define CONCURRENCY_DEFAULT 16
#define CONCURRENCY_MAX 1024
#define CASES_FILE_MAX (1024u * 1024u * 1024u)	/* bytes of CASES */
#define POLL_MS 100			/* longest BLPOP: what Ctrl-C and the bar wait */
#define STALL_MS 5000			/* no answer this long: look for stored ones */
#define GRACE_MS 5000			/* after Ctrl-C, the wait for running cases */
#define BAR_MS 100			/* a terminal's bar: at most 10 redraws a second */
#define LINE_MS 5000			/* otherwise a progress line every 5 s */
#define HASH_MS 500			/* the progress hash, at most twice a second */
#define HASH_TTL_MS (7LL * 86400000)	/* the progress hash outlives its run by 7 days */
#define SLOWEST 5			/* slowest cases in the summary */
#define FAILED_LISTED 100		/* failed cases the summary lists */
#define STATUS_NAMES_MAX 32		/* distinct statuses counted; then "other" */
#define STATUS_NAME_MAX 23		/* bytes of a status name */
#define LOOKUP_CHUNK 128		/* GETs per pipelined round trip */
#define BAR_COLS 24
#define HASH_FIELDS 24

/* A case's id with ":delete:" and 8 hex digits is still a job id. */
_Static_assert(CASE_ID_MAX + 17 <= SANDQ_ID_MAX, "case ids too long");

/*** Cases ***/

enum cstate {
	C_PENDING = 0,			/* not started */
	C_FLIGHT,			/* its jobs are under way */
	C_DONE,				/* answered: counted, and in --out */
};

/* One case: a line of CASES. */
struct bcase {
	uint32_t line;			/* its line number: the case number */
	uint8_t state;			/* enum cstate */
	int8_t pass;			/* 1 passed, 0 failed, -1 no expect */
	int8_t status;			/* index in batch.st, once done */
	bool resumed;			/* answered before this run */
	bool stale;			/* Redis holds its `cancelled` result */
	size_t off, len;		/* the line in batch.file */
	uint64_t wall_ms;		/* its result's */
};

enum fstep {
	F_FORK,				/* sandbox.fork of --base */
	F_RUN,				/* the case's own job */
	F_DELETE,			/* sandbox.delete of the fork */
};

/* A case in flight: which of its jobs it waits for. */
struct flight {
	struct bcase *c;
	enum fstep step;
	json_t *job;			/* the case's job, as submitted */
	struct batch_expect ex;
	char fork[CASE_ID_MAX + 1];	/* the case's id: also its fork's name */
	char jid[SANDQ_ID_MAX + 1];	/* the job waited for */
	char done[KEY_MAX];		/* its done list */
};

/* A status and how many cases ended with it. */
struct bstat {
	char name[STATUS_NAME_MAX + 1];
	uint64_t n;
};

struct batch {
	/* Options. */
	const char *cases_path;		/* CASES ("-": standard input) */
	const char *out_path;		/* --out, or NULL */
	const char *base;		/* --base, or NULL */
	const char *redis;		/* --redis URL */
	const char *tenant;
	char id[BATCH_ID_MAX + 1];	/* --id, or derived */
	size_t concurrency;
	int64_t wait_ms;		/* set-up calls (sandbox.list): --wait-timeout */
	bool json;
	/* Input. */
	uint8_t *file;			/* CASES, whole */
	size_t flen;
	struct bcase *cases;		/* its cases, in line order */
	size_t ncases;
	/* Output and Redis. */
	FILE *out;			/* --out, appended to */
	redisContext *rc;
	char jobs_key[KEY_MAX];
	char hash_key[KEY_MAX];
	/* Flights, at most concurrency. */
	struct flight **fl;
	size_t nfl;
	const char **keys;		/* their done lists, for BLPOP */
	/* Counts. */
	struct bstat st[STATUS_NAMES_MAX];
	size_t nst;
	uint64_t done, resumed, ran, passed, failed, no_expect, not_ok, malformed;
	uint64_t cancelled;		/* cases Ctrl-C took out of the queue */
	/* Time, in ms: mono_ms() unless said. */
	int64_t t0, quiet_since, drawn_at, line_at, hash_at, stop_at;
	uint64_t started_at;		/* epoch */
	/* State. */
	bool tty;			/* stderr is a terminal: draw a bar */
	bool bar_shown;			/* a bar is on the screen */
	bool stopping;			/* Ctrl-C: no new cases */
	bool failed_io;			/* Redis or --out failed: stop */
	bool hash_warned;
};

static volatile sig_atomic_t interrupts;	/* SIGINTs during a run */

static void
on_sigint(int sig)
{
	(void)sig;
	interrupts = interrupts + 1;
}

static int64_t
mono_ms(void)
{
	return mono_ns() / 1000000;
}

static void
bar_clear(struct batch *b)
{
	if (b->bar_shown) {
		fputs("\r\033[K", stderr);
		b->bar_shown = false;
	}
}

/* "sandq: batch: MESSAGE" on stderr, below any progress bar. */
static void __attribute__((format(printf, 2, 3)))
note(struct batch *b, const char *fmt, ...)
{
	va_list ap;

	bar_clear(b);
	va_start(ap, fmt);
	cli_vwarn("sandq: batch: ", fmt, ap);
	va_end(ap);
}

/* The first BATCH_ID_HASH hex digits of the file's SHA-256. */
static int
batch_id_derive(struct batch *b)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(b->file, b->flen, md, &mdlen, EVP_sha256(), NULL) != 1)
		return -EIO;
	for (unsigned i = 0; i < BATCH_ID_HASH / 2; i++)
		snprintf(b->id + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static bool
line_blank(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return false;
	return true;
}

/* Lists the file's non-empty lines as cases. */
static void
cases_index(struct batch *b)
{
	size_t pos = 0, cap = 0;
	uint32_t line = 0;

	while (pos < b->flen) {
		const uint8_t *nl = memchr(b->file + pos, '\n', b->flen - pos);
		size_t end = nl ? (size_t)(nl - b->file) : b->flen;

		line++;
		if (!line_blank(b->file + pos, end - pos)) {
			if (b->ncases == cap) {
				cap = cap ? cap * 2 : 1024;
				b->cases = xreallocarray(b->cases, cap, sizeof(*b->cases));
			}
			memset(&b->cases[b->ncases], 0, sizeof(b->cases[0]));
			b->cases[b->ncases].line = line;
			b->cases[b->ncases].off = pos;
			b->cases[b->ncases].len = end - pos;
			b->cases[b->ncases].status = -1;
			b->ncases++;
		}
		pos = end + 1;
	}
}

/* The case numbered line, or NULL. */
static struct bcase *
case_find(struct batch *b, json_int_t line)
{
	size_t lo = 0, hi = b->ncases;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->cases[mid].line == line)
			return &b->cases[mid];
		if (b->cases[mid].line < line)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The case's job id, batch:BATCH:LINE, into buf (CASE_ID_MAX + 1 bytes). */
static void
case_id(const struct batch *b, const struct bcase *c, char *buf)
{
	snprintf(buf, CASE_ID_MAX + 1, "batch:%s:%" PRIu32, b->id, c->line);
}

/* case c's line as its job and expect (batchcase_parse). */
static int
case_parse(const struct batch *b, const struct bcase *c, json_t **job,
    struct batch_expect *ex, char *why, size_t whylen)
{
	char id[CASE_ID_MAX + 1];

	case_id(b, c, id);
	return batchcase_parse((const char *)b->file + c->off, c->len, id,
	    b->base ? id : NULL, job, ex, why, whylen);
}

/*** Results file ***/

/* The index of status in b->st, added if new; "other" past the table. */
static int8_t
status_index(struct batch *b, const char *status)
{
	size_t n = strlen(status);

	if (n == 0 || n > STATUS_NAME_MAX ||
	    strspn(status, "abcdefghijklmnopqrstuvwxyz_") != n)
		status = "other";
	for (size_t i = 0; i < b->nst; i++)
		if (strcmp(b->st[i].name, status) == 0)
			return (int8_t)i;
	/* The last slot is kept for "other". */
	if (b->nst >= STATUS_NAMES_MAX - 1 && strcmp(status, "other") != 0)
		return status_index(b, "other");
	snprintf(b->st[b->nst].name, sizeof(b->st[0].name), "%s", status);
	return (int8_t)b->nst++;
}

/* Counts an answered case. pass: 1, 0, or -1 without expect. */
static void
tally(struct batch *b, struct bcase *c, const char *status, int pass, uint64_t wall,
    bool resumed)
{
	c->state = C_DONE;
	c->status = status_index(b, status);
	b->st[c->status].n++;
	c->pass = (int8_t)pass;
	c->wall_ms = wall;
	c->resumed = resumed;
	b->done++;
	if (resumed)
		b->resumed++;
	else
		b->ran++;
	if (strcmp(status, "malformed") == 0) {
		b->malformed++;
	} else if (pass == 1) {
		b->passed++;
	} else if (pass == 0) {
		b->failed++;
	} else {
		b->no_expect++;
		if (strcmp(status, "ok") != 0)
			b->not_ok++;
	}
}

/* Appends o (taken) as one line to --out, if there is one. 0 or -EIO. */
static int
out_write(struct batch *b, json_t *o)
{
	int rc = 0;

	if (b->out != NULL && (json_dumpf(o, b->out, JSON_COMPACT) < 0 ||
	    fputc('\n', b->out) == EOF || fflush(b->out) == EOF)) {
		note(b, "--out %s: %s", b->out_path, strerror(errno));
		b->failed_io = true;
		rc = -EIO;
	}
	json_decref(o);
	return rc;
}

/* Records case c's result r: counted, and its line in --out. */
static int
record_result(struct batch *b, struct bcase *c, const struct sandq_result *r,
    const struct batch_expect *ex, bool resumed)
{
	int pass = -1;
	json_t *o = cli_result_json(r), *d = cli_result_data_json(r);

	if (ex->mode != EXPECT_NONE)
		pass = strcmp(r->status, "ok") == 0 &&
		    batchcase_expect_match(ex, r->stdout_data, r->stdout_len);
	if (d != NULL)
		json_object_set_new(o, "data", d);
	json_object_set_new(o, "case", json_integer(c->line));
	if (pass >= 0)
		json_object_set_new(o, "pass", json_boolean(pass));
	tally(b, c, r->status, pass, r->wall_ms, resumed);
	return out_write(b, o);
}

/* Records a malformed line: said with its number, counted, and in --out. */
static int
record_malformed(struct batch *b, struct bcase *c, const char *why)
{
	char id[CASE_ID_MAX + 1];
	json_t *o;

	case_id(b, c, id);
	note(b, "%s:%" PRIu32 ": %s", b->cases_path, c->line, why);
	o = json_pack("{s:s, s:I, s:s, s:{s:s, s:s?}}", "id", id, "case",
	    (json_int_t)c->line, "status", "malformed", "error", "code", "malformed",
	    "message", why);
	tally(b, c, "malformed", -1, 0, false);
	return o ? out_write(b, o) : 0;
}

/* Counts one line of an earlier --out if it answers a case of this batch. */
static void
out_line_resume(struct batch *b, const char *line, size_t len)
{
	char id[CASE_ID_MAX + 1];
	json_t *o = json_loadb(line, len, 0, NULL), *pass;
	const char *status;
	struct bcase *c;

	if (o == NULL)
		return;
	c = case_find(b, json_integer_value(json_object_get(o, "case")));
	status = json_string_value(json_object_get(o, "status"));
	if (c != NULL && c->state == C_PENDING && status != NULL) {
		case_id(b, c, id);
		if (strcmp(cli_jstr(o, "id", ""), id) == 0) {
			pass = json_object_get(o, "pass");
			tally(b, c, status, pass == NULL ? -1 : json_is_true(pass),
			    (uint64_t)cli_jint(o, "wall_ms"), true);
		}
	}
	json_decref(o);
}

/*
 * Reads the answers an earlier run wrote to --out. A last line without its
 * newline (a run killed while writing it) is cut off, so that the next
 * line appended starts on a line of its own.
 */
static int
out_resume(struct batch *b)
{
	FILE *f = fopen(b->out_path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	off_t good = 0;
	bool partial = false;

	if (f == NULL)
		return errno == ENOENT ? 0 : -errno;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] != '\n') {
			partial = true;
			break;
		}
		good += n;
		out_line_resume(b, line, (size_t)n);
	}
	free(line);
	fclose(f);
	if (partial && truncate(b->out_path, good) < 0)
		return -errno;
	return 0;
}

/*** Redis ***/

/* Says what failed and stops the run. -EIO. */
static int
redis_fail(struct batch *b, const redisReply *r, const char *what)
{
	note(b, "redis: %s: %s", what, r != NULL && r->type == REDIS_REPLY_ERROR ?
	    r->str : b->rc->errstr[0] ? b->rc->errstr : "unexpected reply");
	b->failed_io = true;
	return -EIO;
}

/* Adds job (JSON, packed as msgpack) to the tenant's stream. 0 or -EIO. */
static int
submit(struct batch *b, json_t *job)
{
	const char *argv[5] = { "XADD", b->jobs_key, "*", "job", NULL };
	size_t lens[5];
	char *mp = NULL;
	redisReply *r;
	int rc = 0;

	batchcase_pack(job, &mp, &lens[4]);
	argv[4] = mp;
	for (int i = 0; i < 4; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(b->rc, 5, argv, lens);
	if (r == NULL || r->type != REDIS_REPLY_STRING)
		rc = redis_fail(b, r, "XADD");
	freeReplyObject(r);
	free(mp);
	return rc;
}

/* Decodes a result Redis gave for id. 0, or -EBADMSG (said). */
static int
result_decode(struct batch *b, const redisReply *r, const char *id,
    struct sandq_result **out)
{
	if (sandq_result_decode(r->str, r->len, out) < 0) {
		note(b, "the result of %s does not decode", id);
		b->failed_io = true;
		return -EBADMSG;
	}
	return 0;
}

/*
 * One BLPOP on the done lists keys[0..n) for up to ms. Returns the index
 * of the list that answered, with *out its result (owned); -EAGAIN when
 * none did in time; -EIO or -EBADMSG (said) when Redis failed.
 */
static int
blpop_any(struct batch *b, const char *const *keys, size_t n, int64_t ms,
    struct sandq_result **out)
{
	const char **argv = xcalloc(n + 2, sizeof(*argv));
	size_t *lens = xcalloc(n + 2, sizeof(*lens));
	char secs[32];
	redisReply *r;
	int rc = -EAGAIN;

	*out = NULL;
	argv[0] = "BLPOP";
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = keys[i];
	/* Redis 6 and later take the timeout in seconds with a fraction. */
	snprintf(secs, sizeof(secs), "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000);
	argv[n + 1] = secs;
	for (size_t i = 0; i < n + 2; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(b->rc, (int)(n + 2), argv, lens);
	if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		size_t i = 0;

		while (i < n && strcmp(keys[i], r->element[0]->str) != 0)
			i++;
		if (i == n)
			rc = redis_fail(b, NULL, "BLPOP answered for a list not asked for");
		else
			rc = result_decode(b, r->element[1], keys[i], out) < 0 ? -EBADMSG :
			    (int)i;
	} else if (r == NULL || r->type != REDIS_REPLY_NIL) {
		rc = redis_fail(b, r, "BLPOP");
	}
	freeReplyObject(r);
	free(argv);
	free(lens);
	return rc;
}

/* Eight random hex digits, for the ids of fork and delete jobs. */
static void
random_hex(char buf[9])
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = (uint32_t)mono_ns() ^ (uint32_t)getpid();
	snprintf(buf, 9, "%08" PRIx32, v);
}

/*
 * Submits job (its id set) and waits for its result, for set-up calls
 * (sandbox.list, deleting forks left over). Returns 0 with *out owned,
 * -EINTR on Ctrl-C, -ETIMEDOUT past --wait-timeout (said), or -EIO.
 */
static int
call(struct batch *b, json_t *job, struct sandq_result **out)
{
	const char *id = json_string_value(json_object_get(job, "id"));
	char done[KEY_MAX];
	const char *keys[1] = { done };
	int64_t start = mono_ms();
	int rc;

	*out = NULL;
	if (key_done(done, PREFIX, b->tenant, id) < 0)
		return -ENAMETOOLONG;
	if ((rc = submit(b, job)) < 0)
		return rc;
	for (;;) {
		if (interrupts > 0)
			return -EINTR;
		if (b->wait_ms >= 0 && mono_ms() - start > b->wait_ms) {
			note(b, "no answer to %s after --wait-timeout", id);
			return -ETIMEDOUT;
		}
		if ((rc = blpop_any(b, keys, 1, POLL_MS, out)) != -EAGAIN)
			return rc < 0 ? rc : 0;
	}
}

/*
 * --base: checks that the sandbox exists and deletes the forks an earlier
 * run of this batch left (Ctrl-C while cases were running). Returns 0, 2
 * when there is no such sandbox, or another exit status.
 */
static int
base_prepare(struct batch *b)
{
	char rnd[9], id[SANDQ_ID_MAX + 1], pre[SANDQ_ID_MAX + 1];
	struct sandq_result *r = NULL;
	json_t *job, *list = NULL, *one;
	bool found = false;
	size_t i;
	int rc, status = 0;

	random_hex(rnd);
	snprintf(id, sizeof(id), "batch:%s:list:%s", b->id, rnd);
	snprintf(pre, sizeof(pre), "batch:%s:", b->id);
	job = json_pack("{s:s, s:s}", "op", "sandbox.list", "id", id);
	rc = call(b, job, &r);
	json_decref(job);
	if (rc < 0)
		return rc == -EINTR ? 130 : CLI_EXIT_SANDQ;
	if (strcmp(r->status, "ok") != 0) {
		note(b, "listing the sandboxes: %s: %s", r->status,
		    r->error_message ? r->error_message : "");
		sandq_result_free(r);
		return CLI_EXIT_SANDQ;
	}
	list = cli_result_data_json(r);
	sandq_result_free(r);
	json_array_foreach(list, i, one) {
		const char *name = cli_jstr(one, "sandbox", "");

		size_t np = strlen(pre);

		if (strcmp(name, b->base) == 0)
			found = true;
		/* Only batch:BATCH:LINE: a fork of this batch, by its name. */
		if (strncmp(name, pre, np) != 0 || name[np] == '\0' ||
		    strspn(name + np, "0123456789") != strlen(name + np))
			continue;
		random_hex(rnd);
		snprintf(id, sizeof(id), "%s:delete:%s", name, rnd);
		job = json_pack("{s:s, s:s, s:s}", "op", "sandbox.delete", "id", id,
		    "sandbox", name);
		rc = call(b, job, &r);
		json_decref(job);
		if (rc < 0) {
			status = rc == -EINTR ? 130 : CLI_EXIT_SANDQ;
			break;
		}
		note(b, "deleted %s, a fork an earlier run left: %s", name, r->status);
		sandq_result_free(r);
	}
	json_decref(list);
	if (status == 0 && !found) {
		note(b, "--base %s: no such sandbox for tenant %s", b->base, b->tenant);
		status = 2;
	}
	return status;
}

/*
 * Collects the results Redis holds for cases not answered in --out:
 * counted and written to --out as answers of an earlier run. A
 * `cancelled` one (an earlier Ctrl-C) is marked stale: the case runs again.
 */
static int
redis_resume(struct batch *b)
{
	size_t *idx = xcalloc(LOOKUP_CHUNK, sizeof(*idx));
	int rc = 0;

	for (size_t from = 0; from < b->ncases && rc == 0; from += LOOKUP_CHUNK) {
		size_t n = 0;

		for (size_t i = from; i < b->ncases && i < from + LOOKUP_CHUNK; i++) {
			char id[CASE_ID_MAX + 1], key[KEY_MAX];

			if (b->cases[i].state != C_PENDING)
				continue;
			case_id(b, &b->cases[i], id);
			key_res(key, PREFIX, b->tenant, id);
			redisAppendCommand(b->rc, "GET %s", key);
			idx[n++] = i;
		}
		for (size_t k = 0; k < n; k++) {
			struct bcase *c = &b->cases[idx[k]];
			struct sandq_result *res = NULL;
			redisReply *r = NULL;
			struct batch_expect ex;
			json_t *job;
			char why[512];

			if (redisGetReply(b->rc, (void **)&r) != REDIS_OK || r == NULL ||
			    (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
				rc = redis_fail(b, r, "GET");
				freeReplyObject(r);
				break;
			}
			if (r->type == REDIS_REPLY_STRING && rc == 0 &&
			    (rc = result_decode(b, r, "a case", &res)) == 0) {
				if (strcmp(res->status, "cancelled") == 0)
					c->stale = true;
				else if (case_parse(b, c, &job, &ex, why, sizeof(why)) < 0)
					rc = record_malformed(b, c, why);
				else {
					rc = record_result(b, c, res, &ex, true);
					json_decref(job);
					batchcase_expect_free(&ex);
				}
				sandq_result_free(res);
			}
			freeReplyObject(r);
		}
	}
	free(idx);
	return rc;
}

/*
 * Updates the progress hash, PREFIX:{T}:batch:ID, and its TTL. summary
 * (the final one) is added when given. A failure is said once; the run
 * goes on without it.
 */
static void
hash_update(struct batch *b, const char *state, json_t *summary)
{
	const char *argv[2 + 2 * HASH_FIELDS];
	char nums[HASH_FIELDS][24], host[256] = "", *by = NULL, *sum = NULL, ttl[24];
	json_t *bs = json_object();
	redisReply *r = NULL;
	int argc = 0, nn = 0, ok;

#define H_STR(k, v) do { argv[argc++] = (k); argv[argc++] = (v); } while (0)
#define H_NUM(k, v) do { snprintf(nums[nn], sizeof(nums[0]), "%" PRIu64, (uint64_t)(v)); \
	H_STR(k, nums[nn]); nn++; } while (0)
	for (size_t i = 0; i < b->nst; i++)
		json_object_set_new(bs, b->st[i].name, json_integer((json_int_t)b->st[i].n));
	by = json_dumps(bs, JSON_COMPACT);
	json_decref(bs);
	gethostname(host, sizeof(host) - 1);
	argv[argc++] = "HSET";
	argv[argc++] = b->hash_key;
	H_STR("state", state);
	H_STR("file", b->cases_path);
	H_STR("host", host);
	H_NUM("pid", getpid());
	H_NUM("total", b->ncases);
	H_NUM("done", b->done);
	H_NUM("resumed", b->resumed);
	H_NUM("passed", b->passed);
	H_NUM("failed", b->failed);
	H_NUM("no_expect", b->no_expect);
	H_NUM("not_ok", b->not_ok);
	H_NUM("malformed", b->malformed);
	H_NUM("running", b->nfl);
	H_NUM("concurrency", b->concurrency);
	H_NUM("started_at", b->started_at);
	H_NUM("updated_at", now_ms());
	H_STR("by_status", by ? by : "{}");
	if (b->base)
		H_STR("base", b->base);
	if (summary != NULL && (sum = json_dumps(summary, JSON_COMPACT)) != NULL) {
		H_NUM("finished_at", now_ms());
		H_STR("summary", sum);
	}
#undef H_NUM
#undef H_STR
	snprintf(ttl, sizeof(ttl), "%lld", HASH_TTL_MS);
	redisAppendCommandArgv(b->rc, argc, argv, NULL);
	redisAppendCommand(b->rc, "PEXPIRE %s %s", b->hash_key, ttl);
	ok = redisGetReply(b->rc, (void **)&r) == REDIS_OK && r != NULL &&
	    r->type != REDIS_REPLY_ERROR;
	if (ok || r != NULL) {
		freeReplyObject(r);
		r = NULL;
		ok = redisGetReply(b->rc, (void **)&r) == REDIS_OK && ok && r != NULL &&
		    r->type != REDIS_REPLY_ERROR;
	}
	if (!ok && !b->hash_warned) {
		note(b, "the progress record %s could not be written: %s", b->hash_key,
		    r && r->type == REDIS_REPLY_ERROR ? r->str : b->rc->errstr);
		b->hash_warned = true;
	}
	freeReplyObject(r);
	free(by);
	free(sum);
	b->hash_at = mono_ms();
}

/*** Progress and summary ***/

/* Cases that count against the exit status so far. */
static uint64_t
bad_count(const struct batch *b)
{
	return b->failed + b->malformed + b->not_ok;
}

/* The bar (terminal) or a line (every LINE_MS), and the hash (HASH_MS). */
static void
progress(struct batch *b)
{
	int64_t now = mono_ms();
	double secs = (double)(now - b->t0) / 1000, rate = secs > 0 ? b->ran / secs : 0;
	uint64_t left = b->ncases - b->done;
	char eta[32], bar[BAR_COLS + 1];
	size_t fill = b->ncases ? (size_t)(b->done * BAR_COLS / b->ncases) : BAR_COLS;

	if (now - b->hash_at >= HASH_MS)
		hash_update(b, b->stopping ? "stopping" : "running", NULL);
	cli_batch__fmt_eta(eta, sizeof(eta), rate > 0 ? left / rate : left == 0 ? 0 : -1);
	if (b->tty) {
		if (now - b->drawn_at < BAR_MS)
			return;
		memset(bar, '#', fill);
		memset(bar + fill, '.', BAR_COLS - fill);
		bar[BAR_COLS] = '\0';
		fprintf(stderr, "\r\033[K[%s] %" PRIu64 "/%zu %3u%%  %.1f/s  ETA %s  "
		    "failed %" PRIu64, bar, b->done, b->ncases, (unsigned)(b->ncases ?
		    b->done * 100 / b->ncases : 100), rate, eta, bad_count(b));
		b->bar_shown = true;
		b->drawn_at = now;
	} else if (now - b->line_at >= LINE_MS) {
		cli_warn("batch %s: %" PRIu64 "/%zu done, %.1f cases/s, "
		    "ETA %s, %" PRIu64 " failed", b->id, b->done, b->ncases, rate, eta,
		    bad_count(b));
		b->line_at = now;
	}
}

static int
by_wall_desc(const void *x, const void *y)
{
	const struct bcase *a = *(const struct bcase *const *)x;
	const struct bcase *c = *(const struct bcase *const *)y;

	if (a->wall_ms != c->wall_ms)
		return a->wall_ms < c->wall_ms ? 1 : -1;
	return a->line < c->line ? -1 : a->line > c->line;
}

/* The nearest-rank percentile q (1..100) of n walls sorted descending. */
static uint64_t
percentile(struct bcase *const *desc, size_t n, unsigned q)
{
	size_t rank = (n * q + 99) / 100;	/* 1-based, ascending */

	return n == 0 ? 0 : desc[n - (rank ? rank : 1)]->wall_ms;
}

/* The summary, as --json prints it (and the human one is read from). */
static json_t *
summary_json(struct batch *b)
{
	struct bcase **w = xcalloc(b->ncases + 1, sizeof(*w));
	json_t *o = json_object(), *bs = json_object(), *slow = json_array();
	json_t *failed = json_array();
	int64_t elapsed = mono_ms() - b->t0;
	size_t nw = 0;
	char id[CASE_ID_MAX + 1];

	for (size_t i = 0; i < b->ncases; i++) {
		struct bcase *c = &b->cases[i];

		if (c->state != C_DONE)
			continue;
		if (strcmp(b->st[c->status].name, "malformed") != 0)
			w[nw++] = c;
		if ((c->pass == 0 ||
		    (c->pass < 0 && strcmp(b->st[c->status].name, "ok") != 0)) &&
		    json_array_size(failed) < FAILED_LISTED)
			json_array_append_new(failed, json_integer(c->line));
	}
	qsort(w, nw, sizeof(*w), by_wall_desc);
	for (size_t i = 0; i < b->nst; i++)
		json_object_set_new(bs, b->st[i].name, json_integer((json_int_t)b->st[i].n));
	for (size_t i = 0; i < nw && i < SLOWEST; i++) {
		case_id(b, w[i], id);
		json_array_append_new(slow, json_pack("{s:I, s:s, s:s, s:I}", "case",
		    (json_int_t)w[i]->line, "id", id, "status", b->st[w[i]->status].name,
		    "wall_ms", (json_int_t)w[i]->wall_ms));
	}
	json_object_set_new(o, "batch", json_string(b->id));
	json_object_set_new(o, "total", json_integer((json_int_t)b->ncases));
	json_object_set_new(o, "done", json_integer((json_int_t)b->done));
	json_object_set_new(o, "resumed", json_integer((json_int_t)b->resumed));
	json_object_set_new(o, "passed", json_integer((json_int_t)b->passed));
	json_object_set_new(o, "failed", json_integer((json_int_t)b->failed));
	json_object_set_new(o, "no_expect", json_integer((json_int_t)b->no_expect));
	json_object_set_new(o, "not_ok", json_integer((json_int_t)b->not_ok));
	json_object_set_new(o, "malformed", json_integer((json_int_t)b->malformed));
	json_object_set_new(o, "cancelled", json_integer((json_int_t)b->cancelled));
	json_object_set_new(o, "by_status", bs);
	json_object_set_new(o, "wall_ms", json_pack("{s:I, s:I, s:I}",
	    "p50", (json_int_t)percentile(w, nw, 50),
	    "p95", (json_int_t)percentile(w, nw, 95),
	    "max", (json_int_t)(nw ? w[0]->wall_ms : 0)));
	json_object_set_new(o, "slowest", slow);
	json_object_set_new(o, "failed_cases", failed);
	json_object_set_new(o, "elapsed_ms", json_integer(elapsed));
	json_object_set_new(o, "cases_per_s", json_real(elapsed > 0 ?
	    (double)b->ran * 1000 / (double)elapsed : 0));
	json_object_set_new(o, "interrupted", json_boolean(b->stopping));
	free(w);
	return o;
}

/*** The run ***/

/* Ends flight i: frees it and moves the last one into its place. */
static void
flight_end(struct batch *b, size_t i)
{
	struct flight *f = b->fl[i];

	json_decref(f->job);
	batchcase_expect_free(&f->ex);
	free(f);
	b->fl[i] = b->fl[--b->nfl];
}

/* Submits the job of f's step and sets what f waits for. 0 or -EIO. */
static int
flight_submit(struct batch *b, struct flight *f)
{
	char rnd[9];
	json_t *job;
	int rc;

	if (f->step == F_RUN) {
		snprintf(f->jid, sizeof(f->jid), "%s", f->fork);
		rc = submit(b, f->job);
	} else {
		random_hex(rnd);
		snprintf(f->jid, sizeof(f->jid), "%s:%s:%s", f->fork,
		    f->step == F_FORK ? "fork" : "delete", rnd);
		if (f->step == F_FORK)
			job = json_pack("{s:s, s:s, s:s, s:s}", "op", "sandbox.fork", "id",
			    f->jid, "sandbox", b->base, "to", f->fork);
		else
			job = json_pack("{s:s, s:s, s:s}", "op", "sandbox.delete", "id",
			    f->jid, "sandbox", f->fork);
		rc = submit(b, job);
		json_decref(job);
	}
	key_done(f->done, PREFIX, b->tenant, f->jid);
	return rc;
}

/*
 * Starts case c: a malformed line is recorded at once; otherwise a flight
 * submits its first job. A `cancelled` result left in Redis is deleted
 * first, since sandqd keeps a job's first result. 0 or -EIO.
 */
static int
flight_start(struct batch *b, struct bcase *c)
{
	struct flight *f = xcalloc(1, sizeof(*f));
	char why[512], res[KEY_MAX], done[KEY_MAX];
	redisReply *r;

	if (case_parse(b, c, &f->job, &f->ex, why, sizeof(why)) < 0) {
		free(f);
		return record_malformed(b, c, why);
	}
	f->c = c;
	case_id(b, c, f->fork);
	b->fl[b->nfl++] = f;
	c->state = C_FLIGHT;
	if (c->stale) {
		key_res(res, PREFIX, b->tenant, f->fork);
		key_done(done, PREFIX, b->tenant, f->fork);
		r = redisCommand(b->rc, "DEL %s %s", res, done);
		if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
			redis_fail(b, r, "DEL");
			freeReplyObject(r);
			return -EIO;
		}
		freeReplyObject(r);
	}
	f->step = b->base ? F_FORK : F_RUN;
	return flight_submit(b, f);
}

/*
 * A fork that failed answers for the case: its result, under the case's
 * id, with the failure said.
 */
static int
record_fork_failure(struct batch *b, struct flight *f, struct sandq_result *r)
{
	char *msg = NULL;

	xasprintf(&msg, "--base %s: the fork failed: %s", b->base,
	    r->error_message && r->error_message[0] ? r->error_message : r->status);
	free(r->error_message);
	r->error_message = msg;
	if (r->error_code == NULL)
		r->error_code = xstrdup(r->status);
	free(r->id);
	r->id = xstrdup(f->fork);
	return record_result(b, f->c, r, &f->ex, false);
}

/* Moves flight i on with the answer r to its job (taken). */
static int
flight_answer(struct batch *b, size_t i, struct sandq_result *r)
{
	struct flight *f = b->fl[i];
	int rc = 0;

	switch (f->step) {
	case F_FORK:
		if (strcmp(r->status, "ok") != 0) {
			rc = record_fork_failure(b, f, r);
			flight_end(b, i);
			break;
		}
		/* After Ctrl-C the case does not run; its fork goes. */
		f->step = b->stopping ? F_DELETE : F_RUN;
		rc = flight_submit(b, f);
		break;
	case F_RUN:
		rc = record_result(b, f->c, r, &f->ex, false);
		if (b->base && rc == 0) {
			f->step = F_DELETE;
			rc = flight_submit(b, f);
		} else {
			flight_end(b, i);
		}
		break;
	case F_DELETE:
		if (strcmp(r->status, "ok") != 0 &&
		    !(r->error_code && strcmp(r->error_code, "sandbox_not_found") == 0))
			note(b, "the fork %s was not deleted: %s: %s", f->fork, r->status,
			    r->error_message ? r->error_message : "");
		flight_end(b, i);
		break;
	}
	sandq_result_free(r);
	return rc;
}

/*
 * The safety net of a long wait: a done list popped by another client
 * (sandq wait on a case's id) would hide a result stored under res:ID.
 */
static int
flights_poll_stored(struct batch *b)
{
	for (size_t i = b->nfl; i-- > 0;) {
		struct sandq_result *res = NULL;
		char key[KEY_MAX];
		redisReply *r;
		int rc = 0;

		key_res(key, PREFIX, b->tenant, b->fl[i]->jid);
		r = redisCommand(b->rc, "GET %s", key);
		if (r == NULL ||
		    (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
			rc = redis_fail(b, r, "GET");
		else if (r->type == REDIS_REPLY_STRING &&
		    (rc = result_decode(b, r, b->fl[i]->jid, &res)) == 0)
			rc = flight_answer(b, i, res);
		freeReplyObject(r);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Waits up to POLL_MS for one answer and handles it. 0 or -errno. */
static int
flights_wait(struct batch *b)
{
	struct sandq_result *r = NULL;
	int64_t now;
	int rc;

	for (size_t i = 0; i < b->nfl; i++)
		b->keys[i] = b->fl[i]->done;
	rc = blpop_any(b, b->keys, b->nfl, POLL_MS, &r);
	now = mono_ms();
	if (rc >= 0) {
		b->quiet_since = now;
		return flight_answer(b, (size_t)rc, r);
	}
	if (rc == -EAGAIN && now - b->quiet_since >= STALL_MS) {
		b->quiet_since = now;
		return flights_poll_stored(b);
	}
	return rc == -EAGAIN ? 0 : rc;
}

/*
 * Ctrl-C: no case starts any more, and those no host has read are
 * cancelled (removed and answered `cancelled` in one step, by sandq
 * cancel's script), forks included. Cases a host holds are left to finish
 * for GRACE_MS. A cancelled case is not answered: the next run runs it.
 */
static int
flights_stop(struct batch *b)
{
	char host[256];

	b->stopping = true;
	b->stop_at = mono_ms() + GRACE_MS;
	note(b, "interrupted: cancelling the cases not started, waiting up to %d s for "
	    "those running (Ctrl-C again: stop now)", GRACE_MS / 1000);
	for (size_t i = b->nfl; i-- > 0;) {
		struct flight *f = b->fl[i];
		enum cli_cancel got;

		if (f->step == F_DELETE)
			continue;
		got = cli_cancel_job(b->rc, b->tenant, f->jid, true, host, sizeof(host));
		if (got == CLI_CANCEL_FAILED) {
			b->failed_io = true;
			return -EIO;
		}
		if (got != CLI_CANCELLED)
			continue;
		if (f->step == F_RUN)
			b->cancelled++;
		f->c->state = C_PENDING;
		if (f->step == F_RUN && b->base) {
			f->step = F_DELETE;
			if (flight_submit(b, f) < 0)
				return -EIO;
		} else {
			flight_end(b, i);
		}
	}
	return 0;
}

/* Runs the cases until all are answered, Ctrl-C, or a failure. */
static void
batch_loop(struct batch *b)
{
	size_t next = 0;

	b->quiet_since = mono_ms();
	while (!b->failed_io) {
		if (interrupts > 0 && !b->stopping && flights_stop(b) < 0)
			break;
		if (b->stopping && (interrupts > 1 || mono_ms() >= b->stop_at))
			break;
		while (!b->stopping && !b->failed_io && b->nfl < b->concurrency &&
		    next < b->ncases) {
			struct bcase *c = &b->cases[next++];

			if (c->state == C_PENDING)
				flight_start(b, c);
		}
		if (b->nfl == 0 && (b->stopping || next >= b->ncases))
			break;
		if (b->nfl > 0 && !b->failed_io)
			flights_wait(b);
		progress(b);
	}
}

/* The exit status of a run that ended without a failure of its own. */
static int
batch_status_of(const struct batch *b)
{
	if (b->stopping)
		return 130;
	return bad_count(b) > 0 || b->done < b->ncases ? 1 : 0;
}

/*
 * batch run, once the options are checked: reads the cases, resumes from
 * --out and Redis, runs the rest, prints the summary. Returns the exit
 * status.
 */
static int
batch_run(struct batch *b)
{
	struct sigaction sa = { .sa_handler = on_sigint }, old_int;
	json_t *summary;
	char msg[512];
	int rc, status;

	if ((rc = cli_read_input(b->cases_path, true, CASES_FILE_MAX, &b->file,
	    &b->flen)) < 0) {
		cli_warn("batch: %s: %s", b->cases_path, rc == -EFBIG ?
		    "larger than 1 GiB" : strerror(-rc));
		return 2;
	}
	cases_index(b);
	if (b->id[0] == '\0' && batch_id_derive(b) < 0) {
		cli_warn("batch: cannot hash %s", b->cases_path);
		return CLI_EXIT_SANDQ;
	}
	if (key_jobs(b->jobs_key, PREFIX, b->tenant) < 0 ||
	    key_batch(b->hash_key, PREFIX, b->tenant, b->id) < 0)
		return 2;
	if ((b->rc = cli_redis_open(b->redis, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		return CLI_EXIT_SANDQ;
	}
	b->fl = xcalloc(b->concurrency, sizeof(*b->fl));
	b->keys = xcalloc(b->concurrency, sizeof(*b->keys));
	b->tty = isatty(STDERR_FILENO) == 1;
	b->t0 = mono_ms();
	b->line_at = b->t0;
	b->started_at = now_ms();
	/* No SA_RESTART: a blocked read returns, and the loop sees the flag. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	if (b->base && (status = base_prepare(b)) != 0)
		goto out_signal;
	if (b->out_path != NULL) {
		if ((rc = out_resume(b)) < 0) {
			cli_warn("batch: --out %s: %s", b->out_path,
			    strerror(-rc));
			status = 2;
			goto out_signal;
		}
		if ((b->out = fopen(b->out_path, "a")) == NULL) {
			cli_warn("batch: --out %s: %s", b->out_path,
			    strerror(errno));
			status = 2;
			goto out_signal;
		}
	}
	if (redis_resume(b) == 0) {
		hash_update(b, "running", NULL);
		batch_loop(b);
	}
	bar_clear(b);
	if (b->nfl > 0 && !b->failed_io)
		note(b, "%zu case%s still running: their results will be kept in Redis; "
		    "run the batch again (--id %s) to collect them", b->nfl,
		    b->nfl == 1 ? " is" : "s are", b->id);
	while (b->nfl > 0)
		flight_end(b, b->nfl - 1);
	status = b->failed_io ? CLI_EXIT_SANDQ : batch_status_of(b);
	summary = summary_json(b);
	if (!b->failed_io)
		hash_update(b, b->stopping ? "interrupted" : "finished", summary);
	if (b->json)
		status = cli_print_json_line(summary) ? CLI_EXIT_SANDQ : status;
	else {
		cli_batch__summary_print(summary);
		json_decref(summary);
	}

out_signal:
	sigaction(SIGINT, &old_int, NULL);
	return status;
}

static void
batch_free(struct batch *b)
{
	if (b->out != NULL)
		fclose(b->out);
	if (b->rc != NULL)
		redisFree(b->rc);
	free(b->fl);
	free(b->keys);
	free(b->cases);
	free(b->file);
}

/*** Entry ***/

static int __attribute__((format(printf, 1, 2)))
usage(const char *fmt, ...)
{
	va_list ap;
	int status;

	va_start(ap, fmt);
	status = cli_vfail(2, "sandq: batch: ", "sandq help batch", fmt, ap);
	va_end(ap);
	return status;
}

int
cli_batch_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "out", required_argument, NULL, 'o' },
		{ "id", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct batch b = { .concurrency = CONCURRENCY_DEFAULT, .wait_ms = conn->wait_ms,
	    .json = conn->json, .redis = conn->redis, .tenant = conn->tenant };
	const char *verb;
	int64_t n;
	int c, status;

	if (conn->help || argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		cli_man_print("batch");
		return conn->help || argc >= 2 ? 0 : 2;
	}
	verb = argv[1];
	if (strcmp(verb, "run") != 0 && strcmp(verb, "status") != 0)
		return usage("unknown verb '%s' (run, status)", verb);
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc - 1, argv + 1, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (!payload_id_valid(optarg, strlen(optarg)) ||
			    strcmp(optarg, ".") == 0 || strcmp(optarg, "..") == 0)
				return usage("--base '%s': not a sandbox id", optarg);
			b.base = optarg;
			break;
		case 'c':
			if (parse_i64(optarg, 1, CONCURRENCY_MAX, &n) < 0)
				return usage("--concurrency '%s': expected 1 to %d", optarg,
				    CONCURRENCY_MAX);
			b.concurrency = (size_t)n;
			break;
		case 'o':
			b.out_path = optarg;
			break;
		case 'i':
			if (!batchcase_id_valid(optarg))
				return usage("--id '%s': expected 1 to %d characters of A-Z a-z "
				    "0-9 . _ -", optarg, BATCH_ID_MAX);
			snprintf(b.id, sizeof(b.id), "%s", optarg);
			break;
		case 'j':
			b.json = true;
			break;
		case 'h':
			cli_man_print("batch");
			return 0;
		case ':':
			return usage("option '%s' needs a value", argv[optind]);
		default:
			return usage("unknown option '%s'", argv[optind]);
		}
	}
	argc -= optind + 1;
	argv += optind + 1;
	b.tenant = cli_tenant_or_default(b.tenant);
	if (!key_tenant_valid(b.tenant))
		return usage("'%s' is not a tenant name", b.tenant);
	if (strcmp(verb, "status") == 0) {
		if (argc != 1 || b.base || b.out_path || b.id[0] ||
		    b.concurrency != CONCURRENCY_DEFAULT)
			return usage("status takes one batch id, and only --json");
		if (!batchcase_id_valid(argv[0]))
			return usage("'%s' is not a batch id", argv[0]);
		return cli_batch__status(b.redis, b.tenant, argv[0], b.json);
	}
	if (argc != 1)
		return usage("run takes one CASES file, got %d operands", argc);
	b.cases_path = argv[0];
	status = batch_run(&b);
	batch_free(&b);
	return status;
}
