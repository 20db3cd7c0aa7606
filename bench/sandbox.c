/*
 * sandbox.c - what a persistent sandbox costs a job, end to end.
 *
 *   sandbox-bench URL [--jobs N] [--warmup W] [--forks F] [--files K]
 *                     [--bytes B] [--imports M]
 *
 * The job-level twin of snapshot.c: the same `sh 'echo I > f'` job (I its
 * index, so every run really changes one file) is timed from XADD to
 * result, N times (default 200) after W warm-up runs (default 20), one at
 * a time, against one daemon (floor and big in four alternating rounds of
 * N/4, so that their ratio comes from the same stretch of time):
 *   floor       no sandbox: a throw-away workspace
 *   small       a persistent sandbox of a few files (materialise + commit)
 *   big         a persistent sandbox of K files (default 1,000) holding B
 *               bytes of random content (default 10 MB), seeded once by a
 *               job on it
 *   no-persist  the big sandbox with persist: false (materialise only)
 *   fork        F (default 50) sandbox.fork ops of the big sandbox
 *   import      M times (default 20): sandbox.create of a new sandbox with
 *               `snapshot`, the big sandbox's bytes as sandbox.export gave
 *               them (what a user does to start from a saved snapshot),
 *               through sandq_call() (which sends their key first: the
 *               tenant stores them, so the new sandbox names that blob),
 *               then its first job (the same `echo I > f`), timed together
 *               from before the key is hashed to the job's result; the
 *               worker has never run a job on the new sandbox
 *   flat        the big sandbox's files all in its root folder, beside f:
 *               persistent, N runs
 * It prints p50 and p95 per case and the targets: the big case at
 * most 10 ms and 2.5x the floor (the snapshot round trip included), the
 * import case at most 30 ms; and materialising alone (p50 no-persist - p50
 * floor).
 *
 * What it checks is deterministic, never a time: every job ok, a commit
 * per persistent run (version + 1, one file added or modified), none for
 * persist: false (the head unchanged), each fork naming the source's
 * snapshot hash (a fork shares the blob, it copies nothing), and each
 * imported sandbox at version 1 whose first job commits version 2 with one
 * change. Any failure
 * makes the exit status 1. The sandboxes are deleted at the end.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>

#include "../libsandq/sandq.h"
#include "timing.h"

#define WAIT_MS 120000		/* a result slower than this is a failure */

/* One timed case: its name and its sample. */
struct bcase {
	const char *name;
	double *ms;
	size_t n;
	double p50, p95;
};

/* The head of a sandbox, as the last result on it reported. */
struct head {
	uint64_t version;
	char snapshot[65];
};

static int failures;

/* Counts a failure and says why: r's status and error, or c's last error. */
static void
fail(const char *what, const struct sandq_result *r, struct sandq *c)
{
	failures++;
	if (r == NULL)
		fprintf(stderr, "sandbox-bench: %s: %s\n", what,
		    c != NULL ? sandq_last_error(c) : "failed");
	else
		fprintf(stderr, "sandbox-bench: %s: status %s, %s: %s\n", what,
		    r->status, r->error_code ? r->error_code : "-",
		    r->error_message ? r->error_message : "-");
}

static void
head_set(struct head *h, const struct sandq_result *r)
{
	h->version = r->version;
	snprintf(h->snapshot, sizeof(h->snapshot), "%s",
	    r->snapshot != NULL ? r->snapshot : "");
}

/*
 * Runs one `echo i > f` job with options o (NULL: no sandbox) and stores
 * its time from submit to result in *ms. When h is not NULL the job runs on
 * a sandbox whose head h was: a persistent run must commit exactly one
 * changed file as version h->version + 1, and h moves to it; a run with
 * persist: false must leave h as it was. Returns 0, or -1 after counting a
 * failure.
 */
static int
job_run(struct sandq *c, const struct sandq_job_opts *o, struct head *h,
    size_t i, double *ms)
{
	char id[SANDQ_ID_MAX + 1], script[64];
	struct sandq_result *r = NULL;
	double t0;
	int rc = -1;

	snprintf(script, sizeof(script), "echo %zu > f", i);
	t0 = now_ms();
	if (sandq_submit_sh(c, script, o, id) < 0 ||
	    sandq_wait(c, id, WAIT_MS, &r) < 0) {
		fail("sh job", NULL, c);
		goto out;
	}
	*ms = now_ms() - t0;
	if (strcmp(r->status, "ok") != 0) {
		fail("sh job", r, c);
		goto out;
	}
	if (h == NULL) {
		rc = 0;
		goto out;
	}
	if (r->snapshot == NULL) {
		fprintf(stderr, "sandbox-bench: job %s: no snapshot in the result\n", id);
		failures++;
	} else if (o->persist == SANDQ_PERSIST_NO) {
		if (r->version != h->version || strcmp(r->snapshot, h->snapshot) != 0) {
			fprintf(stderr, "sandbox-bench: job %s with persist: false "
			    "moved the head to version %" PRIu64 "\n", id, r->version);
			failures++;
		} else {
			rc = 0;
		}
	} else if (r->version != h->version + 1 ||
	    r->added + r->modified + r->removed != 1) {
		fprintf(stderr, "sandbox-bench: job %s committed version %" PRIu64
		    " with %" PRIu64 "/%" PRIu64 "/%" PRIu64 " changes, expected "
		    "version %" PRIu64 " with one\n", id, r->version, r->added,
		    r->modified, r->removed, h->version + 1);
		failures++;
	} else {
		head_set(h, r);
		rc = 0;
	}
out:
	sandq_result_free(r);
	return rc;
}

/* W warm-up runs, then the timed ones into bc; p50/p95 of those that ran. */
static void
case_run(struct sandq *c, struct bcase *bc, const struct sandq_job_opts *o,
    struct head *h, size_t warmup, size_t n)
{
	size_t k = 0;
	double ms;

	for (size_t i = 0; i < warmup; i++)
		job_run(c, o, h, i, &ms);
	for (size_t i = 0; i < n; i++)
		if (job_run(c, o, h, warmup + i, &ms) == 0)
			bc->ms[k++] = ms;
	bc->n = k;
	bc->p50 = k ? pct(bc->ms, k, 50) : 0;
	bc->p95 = k ? pct(bc->ms, k, 95) : 0;
}

/*
 * Cases a and b (options oa, ob; heads ha, hb as job_run() takes them) in
 * alternating rounds of n / ROUNDS jobs each, after W warm-up runs of
 * each: the ratio of their p50s is taken from the same stretch of time, so
 * a shared machine that slows down or speeds up during the run moves both.
 */
#define ROUNDS 4

static void
cases_run_alternating(struct sandq *c, struct bcase *a, const struct sandq_job_opts *oa,
    struct head *ha, struct bcase *b, const struct sandq_job_opts *ob,
    struct head *hb, size_t warmup, size_t n)
{
	struct bcase *bc[2] = { a, b };
	const struct sandq_job_opts *o[2] = { oa, ob };
	struct head *h[2] = { ha, hb };
	size_t k[2] = { 0, 0 }, done[2] = { 0, 0 };
	double ms;

	for (int x = 0; x < 2; x++)
		for (size_t i = 0; i < warmup; i++)
			job_run(c, o[x], h[x], i, &ms);
	for (size_t r = 0; r < ROUNDS; r++)
		for (int x = 0; x < 2; x++) {
			size_t upto = n * (r + 1) / ROUNDS;

			for (; done[x] < upto; done[x]++)
				if (job_run(c, o[x], h[x], warmup + done[x], &ms) == 0)
					bc[x]->ms[k[x]++] = ms;
		}
	for (int x = 0; x < 2; x++) {
		bc[x]->n = k[x];
		bc[x]->p50 = k[x] ? pct(bc[x]->ms, k[x], 50) : 0;
		bc[x]->p95 = k[x] ? pct(bc[x]->ms, k[x], 95) : 0;
	}
}

/* An op on a sandbox; *out owns the result (ok), else a failure. */
static int
op_call(struct sandq *c, const char *op, const struct sandq_op_args *a,
    struct sandq_result **out)
{
	struct sandq_result *r = NULL;
	char what[128];

	snprintf(what, sizeof(what), "%s %s", op, a->sandbox);
	if (sandq_call(c, op, a, NULL, WAIT_MS, &r) < 0) {
		fail(what, NULL, c);
		return -1;
	}
	if (strcmp(r->status, "ok") != 0) {
		fail(what, r, c);
		sandq_result_free(r);
		return -1;
	}
	*out = r;
	return 0;
}

/* Creates sandbox id with files (may be none); its head in *h. */
static int
sandbox_create(struct sandq *c, const char *id, const struct sandq_file *files,
    size_t nfiles, struct head *h)
{
	struct sandq_op_args a = { .sandbox = id, .files = files, .nfiles = nfiles };
	struct sandq_result *r = NULL;

	if (op_call(c, "sandbox.create", &a, &r) < 0)
		return -1;
	head_set(h, r);
	sandq_result_free(r);
	return 0;
}

/*
 * Fills the big sandbox: one job writes nfiles files of random content,
 * total bytes in all, over 10 folders (as snapshot.c lays them out) or,
 * flat, all in the root folder beside the file the jobs change, and
 * commits them. Random content keeps the blob as large as the files.
 */
static int
sandbox_seed(struct sandq *c, const char *id, int nfiles, size_t total,
    bool flat, struct head *h)
{
	struct sandq_job_opts o = { .sandbox = id, .preset = "permissive" };
	struct sandq_result *r = NULL;
	char script[1024], jid[SANDQ_ID_MAX + 1];
	size_t fsize = total / (size_t)nfiles;
	int rc = -1;

	/*
	 * No `set -e`: on a sandbox it also governs what the session-state
	 * epilogue runs after the script, and `set -e; true` exits 1 there.
	 * The last command's status is the job's.
	 */
	if (flat)
		snprintf(script, sizeof(script),
		    "if command -v python3 >/dev/null; then\n"
		    "python3 -c 'import os\n"
		    "for i in range(%d):\n"
		    "    with open(\"f%%d\" %% i, \"wb\") as f: "
		    "f.write(os.urandom(%zu))'\n"
		    "else\n"
		    "i=0; while [ $i -lt %d ]; do\n"
		    "head -c %zu /dev/urandom > f$i; i=$((i + 1)); done\n"
		    "fi\n", nfiles, fsize, nfiles, fsize);
	else
		snprintf(script, sizeof(script),
		    "if command -v python3 >/dev/null; then\n"
		    "python3 -c 'import os\n"
		    "for d in range(10): os.makedirs(\"d%%d\" %% d, exist_ok=True)\n"
		    "for i in range(%d):\n"
		    "    with open(\"d%%d/f%%d\" %% (i %% 10, i), \"wb\") as f: "
		    "f.write(os.urandom(%zu))'\n"
		    "else\n"
		    "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p d$d; done\n"
		    "i=0; while [ $i -lt %d ]; do\n"
		    "head -c %zu /dev/urandom > d$((i %% 10))/f$i; i=$((i + 1)); done\n"
		    "fi\n", nfiles, fsize, nfiles, fsize);
	if (sandq_submit_sh(c, script, &o, jid) < 0 ||
	    sandq_wait(c, jid, WAIT_MS, &r) < 0) {
		fail("seeding job", NULL, c);
		goto out;
	}
	if (strcmp(r->status, "ok") != 0) {
		fail("seeding job", r, c);
		fprintf(stderr, "sandbox-bench: seeding job exit code %d, stderr: %.*s\n",
		    r->exit_code, (int)r->stderr_len, (const char *)r->stderr_data);
		goto out;
	}
	if (r->snapshot == NULL || r->version != h->version + 1 ||
	    r->added < (uint64_t)nfiles) {
		fprintf(stderr, "sandbox-bench: seeding committed version %" PRIu64
		    " adding %" PRIu64 " entries, expected version %" PRIu64
		    " adding at least %d\n", r->version, r->added, h->version + 1,
		    nfiles);
		failures++;
		goto out;
	}
	head_set(h, r);
	rc = 0;
out:
	sandq_result_free(r);
	return rc;
}

/*
 * nforks sandbox.fork ops of src, named PREFIX-I, into bc. Each result
 * must name the source's snapshot: the fork shares the blob. Returns how
 * many forks were made (all of them need deleting).
 */
static size_t
fork_run(struct sandq *c, struct bcase *bc, const char *src, const char *prefix,
    const struct head *h, size_t nforks)
{
	size_t k = 0, made = 0;

	for (size_t i = 0; i < nforks; i++) {
		char to[128];
		struct sandq_op_args a = { .sandbox = src, .to = to };
		struct sandq_result *r = NULL;
		double t0 = now_ms(), ms;

		snprintf(to, sizeof(to), "%s-%zu", prefix, i);
		if (op_call(c, "sandbox.fork", &a, &r) < 0)
			continue;
		ms = now_ms() - t0;
		made++;
		if (r->snapshot == NULL || strcmp(r->snapshot, h->snapshot) != 0) {
			fprintf(stderr, "sandbox-bench: fork %s has snapshot %.64s, "
			    "not the source's %s\n", to,
			    r->snapshot ? r->snapshot : "(none)", h->snapshot);
			failures++;
		} else {
			bc->ms[k++] = ms;
		}
		sandq_result_free(r);
	}
	bc->n = k;
	bc->p50 = k ? pct(bc->ms, k, 50) : 0;
	bc->p95 = k ? pct(bc->ms, k, 95) : 0;
	return made;
}

/*
 * The head of sandbox id as sandbox.export gives it (a msgpack bin) into
 * *snap (malloc'd, *len bytes). Returns 0 or -1 after counting a failure.
 */
static int
sandbox_export(struct sandq *c, const char *id, void **snap, size_t *len)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = NULL;
	msgpack_unpacked u;
	int rc = -1;

	if (op_call(c, "sandbox.export", &a, &r) < 0)
		return -1;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL) ==
	    MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_BIN &&
	    u.data.via.bin.size > 0) {
		*len = u.data.via.bin.size;
		*snap = malloc(*len);
		if (*snap != NULL) {
			memcpy(*snap, u.data.via.bin.ptr, *len);
			rc = 0;
		}
	}
	if (rc < 0) {
		fprintf(stderr, "sandbox-bench: sandbox.export %s: not a snapshot\n", id);
		failures++;
	}
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return rc;
}

/*
 * nimports new sandboxes PREFIX-I, each made by sandbox.create with snap
 * (len bytes) and then its first job, timed together into bc. Each must
 * be created at version 1 and its job commit version 2 with one change.
 * Returns how many were created (all of them need deleting).
 */
static size_t
import_run(struct sandq *c, struct bcase *bc, const char *prefix, const void *snap,
    size_t len, size_t nimports)
{
	size_t k = 0, made = 0;

	for (size_t i = 0; i < nimports; i++) {
		char to[128];
		struct sandq_op_args a = { .sandbox = to, .snapshot = snap,
		    .snapshot_len = len };
		struct sandq_job_opts o = { .sandbox = to };
		struct sandq_result *r = NULL;
		struct head h = { 0 };
		double t0 = now_ms(), ms;

		snprintf(to, sizeof(to), "%s-%zu", prefix, i);
		if (op_call(c, "sandbox.create", &a, &r) < 0)
			continue;
		made++;
		head_set(&h, r);
		sandq_result_free(r);
		if (h.version != 1) {
			fprintf(stderr, "sandbox-bench: import %s at version %" PRIu64
			    ", not 1\n", to, h.version);
			failures++;
			continue;
		}
		if (job_run(c, &o, &h, i, &ms) < 0)
			continue;
		ms = now_ms() - t0;
		bc->ms[k++] = ms;
	}
	bc->n = k;
	bc->p50 = k ? pct(bc->ms, k, 50) : 0;
	bc->p95 = k ? pct(bc->ms, k, 95) : 0;
	return made;
}

static void
sandbox_delete(struct sandq *c, const char *id)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = NULL;

	if (op_call(c, "sandbox.delete", &a, &r) == 0)
		sandq_result_free(r);
}

static void
case_print(const struct bcase *bc)
{
	if (bc->n == 0)
		printf("%-42s %5s %9s %9s\n", bc->name, "0", "-", "-");
	else
		printf("%-42s %5zu %9.2f %9.2f\n", bc->name, bc->n, bc->p50, bc->p95);
}

int
main(int argc, char **argv)
{
	size_t njobs = 200, warmup = 20, nforks = 50, total = 10u * 1000 * 1000, made;
	size_t nimports = 20, imported = 0, snaplen = 0;
	void *snap = NULL;
	int nfiles = 1000;
	struct sandq *c = NULL;
	struct head small = { 0 }, big = { 0 }, flat = { 0 };
	struct bcase floor_c = { .name = "floor: no sandbox (throw-away workspace)" },
	    small_c = { .name = "persistent, small (3 files)" },
	    big_c = { .name = "persistent, big" },
	    flat_c = { .name = "persistent, big, all in one folder" },
	    nop_c = { .name = "persist: false, big (materialise only)" },
	    fork_c = { .name = "sandbox.fork of big" },
	    import_c = { .name = "create from big's snapshot + first job" };
	struct sandq_job_opts o = { 0 };
	char err[256], small_id[64], big_id[64], flat_id[64], fork_pfx[64];
	char big_name[64], imp_pfx[64];
	const struct sandq_file seed[] = {
		{ "README.md", "# bench\n", 8 },
		{ "src/main.c", "int main(void) { return 0; }\n", 29 },
		{ "src/util.h", "#pragma once\n", 13 },
	};

	if (argc < 2) {
		fprintf(stderr, "usage: sandbox-bench URL [--jobs N] [--warmup W] "
		    "[--forks F] [--files K] [--bytes B] [--imports M]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--jobs") == 0)
			njobs = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--warmup") == 0)
			warmup = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--forks") == 0)
			nforks = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--files") == 0)
			nfiles = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--bytes") == 0)
			total = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--imports") == 0)
			nimports = strtoul(argv[i + 1], NULL, 10);
	}
	if (njobs == 0 || nforks == 0 || nimports == 0 || nfiles < 1 || total < (size_t)nfiles)
		return 2;
	/* The pid keeps two runs against one daemon apart. */
	snprintf(small_id, sizeof(small_id), "sbench-%d-small", (int)getpid());
	snprintf(big_id, sizeof(big_id), "sbench-%d-big", (int)getpid());
	snprintf(flat_id, sizeof(flat_id), "sbench-%d-flat", (int)getpid());
	snprintf(fork_pfx, sizeof(fork_pfx), "sbench-%d-fork", (int)getpid());
	snprintf(imp_pfx, sizeof(imp_pfx), "sbench-%d-import", (int)getpid());
	snprintf(big_name, sizeof(big_name), "persistent, big (%d files, %.1f MB)",
	    nfiles, (double)total / 1e6);
	big_c.name = big_name;

	if ((c = sandq_connect(argv[1], "default", err, sizeof(err))) == NULL) {
		fprintf(stderr, "sandbox-bench: %s\n", err);
		return 1;
	}
	floor_c.ms = calloc(njobs, sizeof(double));
	small_c.ms = calloc(njobs, sizeof(double));
	big_c.ms = calloc(njobs, sizeof(double));
	flat_c.ms = calloc(njobs, sizeof(double));
	nop_c.ms = calloc(njobs, sizeof(double));
	fork_c.ms = calloc(nforks, sizeof(double));
	import_c.ms = calloc(nimports, sizeof(double));

	/* 1. A small persistent sandbox. */
	if (sandbox_create(c, small_id, seed, sizeof(seed) / sizeof(seed[0]),
	    &small) == 0) {
		o.sandbox = small_id;
		case_run(c, &small_c, &o, &small, warmup, njobs);
	}

	/*
	 * 2, 3, 4, 5. The big one, seeded once: persistent, in alternating
	 * rounds with the floor (the same job on a throw-away workspace, the
	 * ratio's other side); then not persistent; then forks.
	 */
	made = 0;
	if (sandbox_create(c, big_id, NULL, 0, &big) == 0 &&
	    sandbox_seed(c, big_id, nfiles, total, false, &big) == 0) {
		o.sandbox = big_id;
		o.persist = SANDQ_PERSIST_DEFAULT;
		cases_run_alternating(c, &floor_c, NULL, NULL, &big_c, &o, &big,
		    warmup, njobs);
		o.persist = SANDQ_PERSIST_NO;
		case_run(c, &nop_c, &o, &big, warmup, njobs);
		made = fork_run(c, &fork_c, big_id, fork_pfx, &big, nforks);
		/* 6. New sandboxes from its exported snapshot, and a first job. */
		if (sandbox_export(c, big_id, &snap, &snaplen) == 0)
			imported = import_run(c, &import_c, imp_pfx, snap, snaplen,
			    nimports);
	}

	/*
	 * 7. The same files all in one folder, the changed file among them:
	 * what a change costs beside many entries of its folder.
	 */
	if (sandbox_create(c, flat_id, NULL, 0, &flat) == 0 &&
	    sandbox_seed(c, flat_id, nfiles, total, true, &flat) == 0) {
		o.sandbox = flat_id;
		o.persist = SANDQ_PERSIST_DEFAULT;
		case_run(c, &flat_c, &o, &flat, warmup, njobs);
	}

	/* Not measured: leave the daemon as we found it. */
	for (size_t i = 0; i < made; i++) {
		char id[128];

		snprintf(id, sizeof(id), "%s-%zu", fork_pfx, i);
		sandbox_delete(c, id);
	}
	for (size_t i = 0; i < imported; i++) {
		char id[128];

		snprintf(id, sizeof(id), "%s-%zu", imp_pfx, i);
		sandbox_delete(c, id);
	}
	free(snap);
	if (big.snapshot[0] != '\0')
		sandbox_delete(c, big_id);
	if (flat.snapshot[0] != '\0')
		sandbox_delete(c, flat_id);
	if (small.snapshot[0] != '\0')
		sandbox_delete(c, small_id);
	sandq_close(c);

	printf("sandbox bench: sh 'echo I > f', %zu jobs per case after %zu "
	    "warm-up, one at a time, XADD -> result\n", njobs, warmup);
	printf("%-42s %5s %9s %9s\n", "case", "n", "p50 ms", "p95 ms");
	case_print(&floor_c);
	case_print(&small_c);
	case_print(&big_c);
	case_print(&nop_c);
	case_print(&fork_c);
	case_print(&import_c);
	case_print(&flat_c);
	if (fork_c.n > 0)
		printf("forks share the source's snapshot %.12s...: %zu of %zu "
		    "(target: no blob copied)\n", big.snapshot, fork_c.n, nforks);
	if (floor_c.n > 0 && big_c.n > 0)
		printf("big: p50 %.2f ms, %.2fx the floor (targets: <= 10 ms, "
		    "<= 2.5x); the snapshot round trip adds %.2f ms\n", big_c.p50,
		    big_c.p50 / floor_c.p50, big_c.p50 - floor_c.p50);
	if (floor_c.n > 0 && flat_c.n > 0)
		printf("big, all in one folder: p50 %.2f ms, %.2fx the floor\n",
		    flat_c.p50, flat_c.p50 / floor_c.p50);
	if (import_c.n > 0)
		printf("create from a %.1f MB snapshot + first job: p50 %.2f ms, "
		    "%.2fx the floor (target: <= 30 ms)\n", (double)snaplen / 1e6,
		    import_c.p50, floor_c.n > 0 ? import_c.p50 / floor_c.p50 : 0);
	if (floor_c.n > 0 && nop_c.n > 0)
		printf("materialise only adds %.2f ms (p50 persist: false big - "
		    "p50 floor)\n", nop_c.p50 - floor_c.p50);
	if (floor_c.n > 0 && small_c.n > 0)
		printf("a small sandbox adds %.2f ms (p50 small - p50 floor)\n",
		    small_c.p50 - floor_c.p50);
	if (failures)
		printf("\n%d failure(s): see above\n", failures);
	free(floor_c.ms);
	free(small_c.ms);
	free(big_c.ms);
	free(flat_c.ms);
	free(nop_c.ms);
	free(fork_c.ms);
	free(import_c.ms);
	return failures ? 1 : 0;
}
