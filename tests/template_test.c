/*
 * template_test.c - sandboxes that start from one snapshot, end to end:
 * real redis-server, sandqd, workers and sandboxes, through libsandq.
 *
 * A sandbox.create names a snapshot by its key (snapshot_key), or sends
 * bytes the tenant already stores: either way it is a fork of that blob,
 * nothing copied or re-checked, and only the tenant's own sandboxes count.
 * On a worker, the kept base's template (sandbox/persist.c) keeps such a
 * shared snapshot materialised while jobs carry sandboxes off from it:
 * each sandbox starting from it sees exactly the snapshot (files, modes,
 * times, link counts, holes), whatever ran on the others, and each one's
 * own changes carry on to its next job, however jobs on them interleave.
 *
 * Needs root (sandqd maps each worker's jobs to an unprivileged host uid).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000

static struct harness H;

static void
setup(void)
{
	/* One worker: every job meets the same kept base and template. */
	static const char *const extra[] = { "--set", "tenants=default,other", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 1, extra);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(template, .init = setup, .fini = teardown, .timeout = 600);

static struct sandq *
client_for(const char *tenant)
{
	char err[256];
	struct sandq *c = sandq_connect(H.url, tenant, err, sizeof(err));

	cr_assert_not_null(c, "connect as %s: %s", tenant, err);
	return c;
}

static struct sandq_result *
op(struct sandq *c, const char *name, const struct sandq_op_args *a)
{
	struct sandq_result *r = NULL;

	cr_assert_eq(sandq_call(c, name, a, NULL, WAIT_MS, &r), 0, "%s: %s", name,
	    sandq_last_error(c));
	return r;
}

/* Creates sandbox id empty, then runs script on it; returns its head. */
static char *
made_with(struct sandq *c, const char *id, const char *script)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_job_opts o = { .sandbox = id };
	struct sandq_result *r = op(c, "sandbox.create", &a);
	char *head;

	cr_assert_str_eq(r->status, "ok", "create %s: %s", id,
	    r->error_message ? r->error_message : "");
	sandq_result_free(r);
	r = harness_sh(c, script, &o);
	cr_assert_str_eq(r->status, "ok", "seed %s: %s", id,
	    r->stderr_data ? (char *)r->stderr_data : "");
	head = strdup(r->snapshot);
	sandq_result_free(r);
	return head;
}

/* Runs script on sandbox sb (persist as given); returns its stdout. */
static char *
run_on(struct sandq *c, const char *sb, const char *script, bool persist,
    struct sandq_result **keep)
{
	struct sandq_job_opts o = { .sandbox = sb,
	    .persist = persist ? SANDQ_PERSIST_DEFAULT : SANDQ_PERSIST_NO };
	struct sandq_result *r = harness_sh(c, script, &o);
	char *out;

	cr_assert_str_eq(r->status, "ok", "'%s' on %s: %s %s / %s", script, sb,
	    r->status, r->error_message ? r->error_message : "",
	    r->stderr_data ? (char *)r->stderr_data : "");
	out = strdup(r->stdout_data ? (char *)r->stdout_data : "");
	if (keep != NULL)
		*keep = r;
	else
		sandq_result_free(r);
	return out;
}

/* The head of sandbox id after sandbox.info. */
static char *
head_of(struct sandq *c, const char *id)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = op(c, "sandbox.info", &a);
	char *head;

	cr_assert_str_eq(r->status, "ok", "info %s", id);
	head = strdup(r->snapshot);
	sandq_result_free(r);
	return head;
}

/* The head snapshot's bytes (sandbox.export). */
static void *
exported(struct sandq *c, const char *id, size_t *len)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = op(c, "sandbox.export", &a);
	msgpack_unpacked u;
	void *bytes;

	cr_assert_str_eq(r->status, "ok", "export %s", id);
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL),
	    MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(u.data.type, MSGPACK_OBJECT_BIN);
	*len = u.data.via.bin.size;
	bytes = malloc(*len);
	memcpy(bytes, u.data.via.bin.ptr, *len);
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return bytes;
}

Test(template, a_create_names_a_stored_snapshot_by_its_key)
{
	struct sandq *c = client_for("default"), *other = client_for("other");
	char *head = made_with(c, "k-src", "echo hello > a && mkdir d && echo x > d/x");
	struct sandq_op_args a = { .sandbox = "k-new", .snapshot_key = head };
	struct sandq_result *r = op(c, "sandbox.create", &a);
	char *out;

	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_eq(r->version, 1);
	cr_expect_str_eq(r->snapshot, head, "a create by key shares the blob, as a fork");
	sandq_result_free(r);
	out = run_on(c, "k-new", "cat a d/x; echo more >> a", true, NULL);
	cr_expect_str_eq(out, "hello\nx\n");
	free(out);
	/* Each goes its own way from there. */
	out = run_on(c, "k-src", "cat a", false, NULL);
	cr_expect_str_eq(out, "hello\n");
	free(out);

	/* A key no sandbox of this tenant holds, and another tenant's. */
	a = (struct sandq_op_args){ .sandbox = "k-none", .snapshot_key =
	    "0000000000000000000000000000000000000000000000000000000000000000" };
	r = op(c, "sandbox.create", &a);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "snapshot_not_found");
	cr_expect(strstr(r->error_message, "snapshot_key") != NULL, "%s", r->error_message);
	sandq_result_free(r);
	a = (struct sandq_op_args){ .sandbox = "k-theirs", .snapshot_key = head };
	r = op(other, "sandbox.create", &a);
	cr_expect_str_eq(r->error_code, "snapshot_not_found",
	    "tenant 'other' reached tenant 'default''s snapshot");
	sandq_result_free(r);
	/* Nothing was made by the refusals. */
	a = (struct sandq_op_args){ .sandbox = "k-theirs" };
	r = op(other, "sandbox.info", &a);
	cr_expect_str_eq(r->error_code, "sandbox_not_found");
	sandq_result_free(r);

	/* Not a key: refused before it reaches a host. */
	a = (struct sandq_op_args){ .sandbox = "k-bad", .snapshot_key = "ABC" };
	cr_expect_lt(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0);
	cr_expect(strstr(sandq_last_error(c), "snapshot_key") != NULL, "%s",
	    sandq_last_error(c));
	free(head);
	sandq_close(other);
	sandq_close(c);
}

Test(template, bytes_the_tenant_stores_are_taken_as_they_are)
{
	struct sandq *c = client_for("default"), *other = client_for("other");
	char *head = made_with(c, "b-src", "echo hello > a && ln -s a l");
	char key[65], *out;
	size_t len = 0;
	void *bytes = exported(c, "b-src", &len);
	struct sandq_op_args a = { .sandbox = "b-1", .snapshot = bytes,
	    .snapshot_len = len };
	struct sandq_result *r;
	char id[SANDQ_ID_MAX + 1];

	/* The key is the one the store gives the same bytes. */
	cr_assert_eq(sandq_snapshot_key(bytes, len, key), 0);
	cr_expect_str_eq(key, head);

	/* sandq_call() sends the key first: the stored blob, no upload. */
	r = op(c, "sandbox.create", &a);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_str_eq(r->snapshot, head);
	sandq_result_free(r);
	/* The bytes themselves: sandqd finds them stored, the same. */
	a.sandbox = "b-2";
	cr_assert_eq(sandq_submit_op(c, "sandbox.create", &a, NULL, id), 0);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_str_eq(r->snapshot, head, "stored bytes were imported as a copy");
	sandq_result_free(r);
	out = run_on(c, "b-2", "cat l", true, NULL);
	cr_expect_str_eq(out, "hello\n");
	free(out);

	/* Another tenant's upload of the same bytes is checked and copied. */
	a.sandbox = "b-3";
	r = op(other, "sandbox.create", &a);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_str_neq(r->snapshot, head, "tenant 'other' got tenant 'default''s blob");
	sandq_result_free(r);
	out = run_on(other, "b-3", "cat l", false, NULL);
	cr_expect_str_eq(out, "hello\n");
	free(out);
	free(bytes);
	free(head);
	sandq_close(other);
	sandq_close(c);
}

/* Everything a job can see of the tree, but the root's own line. */
#define LISTING "find . -mindepth 1 -printf '%p %M %n %s %b %T@ %l\\n' | LC_ALL=C sort; " \
	"cat a d/b 2>&1; echo; head -c 16 sparse | od -An -tx1"

Test(template, sandboxes_from_one_snapshot_each_start_from_it)
{
	struct sandq *c = client_for("default");
	char *head = made_with(c, "t-src",
	    "mkdir -p d/e empty ro && echo a > a && echo b > d/b && printf x > d/e/x && "
	    "chmod 600 d/b && chmod 700 d/e && ln -s d/b link && truncate -s 1M sparse && "
	    "printf z | dd of=sparse bs=1 seek=700000 conv=notrunc 2>/dev/null && "
	    "echo r > ro/r && chmod 555 ro && touch -d @1000000000 a d/b");
	const char *forks[] = { "t-f1", "t-f2", "t-f3" };
	char *want, *got, *h;
	struct sandq_result *r;

	for (size_t i = 0; i < 3; i++) {
		struct sandq_op_args a = { .sandbox = "t-src", .to = forks[i] };

		r = op(c, "sandbox.fork", &a);
		cr_assert_str_eq(r->status, "ok");
		sandq_result_free(r);
	}
	want = run_on(c, "t-src", LISTING, false, NULL);
	cr_assert(strstr(want, "./sparse -rw-r--r-- 1 1048576 ") != NULL, "%s", want);

	/*
	 * t-f1 moves off the shared head: the base it leaves stays whole as
	 * the template, and its next job (which waits for that) runs on a
	 * copy of it with t-f1's change: the same tree but for that.
	 */
	got = run_on(c, "t-f1", LISTING "; echo new > c", true, &r);
	cr_expect_str_eq(got, want);
	cr_expect_eq(r->version, 2);
	sandq_result_free(r);
	free(got);
	got = run_on(c, "t-f1", "{ " LISTING "; } | grep -v '^\\./c '", false, NULL);
	cr_expect_str_eq(got, want, "the base copied from the template differs:\n%s\n---\n%s", got, want);
	free(got);
	got = run_on(c, "t-f2", LISTING, false, NULL);
	cr_expect_str_eq(got, want, "a fork saw another's changes");
	free(got);
	got = run_on(c, "t-f1", "cat c; echo changed > a; rm d/b", true, NULL);
	cr_expect_str_eq(got, "new\n");
	free(got);

	/* t-f2 moves off too, right after (t-f1's base is given up). */
	got = run_on(c, "t-f2", "echo two > a", true, NULL);
	free(got);
	got = run_on(c, "t-f1", "cat a c; test -e d/b || echo no-b", true, NULL);
	cr_expect_str_eq(got, "changed\nnew\nno-b\n");
	free(got);
	got = run_on(c, "t-f2", "cat a d/b; test -e c || echo no-c", true, NULL);
	cr_expect_str_eq(got, "two\nb\nno-c\n");
	free(got);
	got = run_on(c, "t-f3", LISTING, false, NULL);
	cr_expect_str_eq(got, want, "the third fork did not start from the snapshot");
	free(got);

	/* A second job on each, with time between: its own changes again. */
	for (int round = 0; round < 2; round++) {
		got = run_on(c, "t-f1", "cat a", true, NULL);
		cr_expect_str_eq(got, "changed\n");
		free(got);
		got = run_on(c, "t-f2", "cat a", true, NULL);
		cr_expect_str_eq(got, "two\n");
		free(got);
	}
	/* Nothing of the forks reached the source. */
	h = head_of(c, "t-src");
	cr_expect_str_eq(h, head);
	got = run_on(c, "t-src", LISTING, false, NULL);
	cr_expect_str_eq(got, want);
	free(got);
	free(h);
	free(want);
	free(head);
	sandq_close(c);
}
