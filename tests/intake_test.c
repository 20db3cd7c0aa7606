/*
 * intake_test.c - unit tests for dispatcher/core/intake.c: what a stream
 * entry becomes before anything runs it. Each refusal is checked for what
 * jobs.c carries out (answer with status and code, dead letter, give up),
 * its message word for word, and, for a tenant's rules, the audit target.
 *
 * Entries are built with msgpack-c's packer; the host's config is
 * config_defaults() with the changes a test sets, the tenant "acme". Pure:
 * no Redis, no libuv, no root. Everything allocated is freed in teardown.
 */
#include <criterion/criterion.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "../dispatcher/core/core.h"

static struct config cfg;
static struct tenant_conf conf;
static struct intake in;
static struct intake_refusal r;
static char id[JOB_ID_MAX + 1];
static struct job *job;
static char *norm;
static size_t normlen;
static msgpack_sbuffer buf;

static void
setup(void)
{
	struct err e = { 0 };

	config_defaults(&cfg);
	cr_assert_eq(tenant_conf_init(&conf, "acme", &e), 0, "%s", e.msg);
	in = (struct intake){ .cfg = &cfg, .tenant = "acme", .now = 1000 };
	memset(&r, 0, sizeof(r));
	id[0] = '\0';
	job = NULL;
	norm = NULL;
	msgpack_sbuffer_init(&buf);
}

static void
teardown(void)
{
	msgpack_sbuffer_destroy(&buf);
	free(norm);
	job_free(job);
	tenant_conf_free(&conf);
	config_free(&cfg);
}

TestSuite(intake, .init = setup, .fini = teardown);

static void
set(const char *kv)
{
	struct err e = { 0 };

	cr_assert_eq(config_set(&cfg, kv, &e), 0, "%s: %s", kv, e.msg);
}

/* Gives the tenant a setting of its own (a [tenant.acme] field). */
static void
tenant_set(const char *f, const char *v)
{
	struct err e = { 0 };

	cr_assert_eq(tenant_conf_set(&conf, f, strlen(f), v, strlen(v), &e), 0,
	    "%s=%s: %s", f, v, e.msg);
	in.conf = &conf;
}

static void
pstr(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/*
 * An exec job's bytes in buf: id, argv (NULL-terminated), then extra
 * string fields as key, value pairs (NULL-terminated), and limits.wall_ms
 * if wall_ms > 0.
 */
static void
entry(const char *jid, const char *const *argv, const char *const *extra,
    uint64_t wall_ms)
{
	msgpack_packer pk;
	size_t argc = 0, nextra = 0;

	while (argv[argc] != NULL)
		argc++;
	while (extra != NULL && extra[2 * nextra] != NULL)
		nextra++;
	msgpack_sbuffer_clear(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3 + nextra + (wall_ms > 0));
	pstr(&pk, "id");
	pstr(&pk, jid);
	pstr(&pk, "op");
	pstr(&pk, "exec");
	pstr(&pk, "argv");
	msgpack_pack_array(&pk, argc);
	for (size_t i = 0; i < argc; i++)
		pstr(&pk, argv[i]);
	for (size_t i = 0; i < nextra; i++) {
		pstr(&pk, extra[2 * i]);
		pstr(&pk, extra[2 * i + 1]);
	}
	if (wall_ms > 0) {
		pstr(&pk, "limits");
		msgpack_pack_map(&pk, 1);
		pstr(&pk, "wall_ms");
		msgpack_pack_uint64(&pk, wall_ms);
	}
}

static const char *const true_argv[] = { "true", NULL };

static enum intake_verdict
read_entry(void)
{
	return intake_read(&in, buf.data, buf.size, 1, id, &job, &r);
}

/* Reads buf's job, which must pass, then admits it with nattempts. */
static enum intake_verdict
admit(size_t nattempts)
{
	cr_assert_eq(read_entry(), INTAKE_OK, "read: %s", r.msg);
	return intake_admit(&in, job, nattempts, &norm, &normlen, &r);
}

/*** Reading ***/

Test(intake, an_entry_without_a_job_field_is_dead_lettered)
{
	cr_expect_eq(intake_read(&in, NULL, 0, 0, id, &job, &r), INTAKE_DEAD);
	cr_expect_str_eq(r.msg, "entry has no fields (deleted while pending?)");
	cr_expect_eq(intake_read(&in, NULL, 0, 2, id, &job, &r), INTAKE_DEAD);
	cr_expect_str_eq(r.msg, "entry has no 'job' field");
	cr_expect_null(job);
}

Test(intake, an_oversized_entry_is_answered_under_its_id_if_it_has_one)
{
	char big[2048], want[160];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	set("max_job_bytes=1024");
	entry("j-big", (const char *const[]){ "echo", big, NULL }, NULL, 0);
	snprintf(want, sizeof(want), "job is %zu bytes, above the limit of 1024 "
	    "(max_job_bytes)", buf.size);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "too_large");
	cr_expect_str_eq(r.msg, want);
	cr_expect_str_eq(id, "j-big");
	cr_expect_null(r.audit_target);

	id[0] = '\0';
	cr_expect_eq(intake_read(&in, big, sizeof(big), 1, id, &job, &r), INTAKE_DEAD);
	cr_expect_str_eq(id, "");
}

Test(intake, an_undecodable_entry_is_rejected_if_its_id_reads_else_dead_lettered)
{
	entry("j-bad", true_argv, (const char *const[]){ "frobnicate", "1", NULL }, 0);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "invalid_job");
	cr_expect_str_eq(id, "j-bad");
	cr_expect(strstr(r.msg, "frobnicate") != NULL, "%s", r.msg);

	id[0] = '\0';
	cr_expect_eq(intake_read(&in, "\xc1\xc1", 2, 1, id, &job, &r), INTAKE_DEAD);
	cr_expect_null(job);
}

Test(intake, a_job_may_only_repeat_its_streams_tenant)
{
	entry("j-t", true_argv, (const char *const[]){ "tenant", "other", NULL }, 0);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "invalid_job");
	cr_expect_str_eq(r.msg, "field 'tenant': the job was submitted to tenant "
	    "'acme', not 'other'");
	cr_expect_null(job);

	entry("j-t", true_argv, NULL, 0);
	cr_expect_eq(read_entry(), INTAKE_OK);
	cr_expect_str_eq(job->tenant, "acme");
}

/*** Admitting ***/

/* An exec job's bytes in buf with one path rule: pattern at level read. */
static void
entry_rule(const char *jid, const char *pattern)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	pstr(&pk, "id");
	pstr(&pk, jid);
	pstr(&pk, "op");
	pstr(&pk, "exec");
	pstr(&pk, "argv");
	msgpack_pack_array(&pk, 1);
	pstr(&pk, "true");
	pstr(&pk, "perms");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "pattern");
	pstr(&pk, pattern);
	pstr(&pk, "level");
	pstr(&pk, "read");
}

Test(intake, rules_that_do_not_compile_are_rejected_naming_the_field)
{
	entry_rule("j-p", "src/a**b");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "invalid_job");
	cr_expect(strncmp(r.msg, "field 'perms': ", 15) == 0 &&
	    strstr(r.msg, "'**' must be a whole path component") != NULL,
	    "%s", r.msg);
	cr_expect_null(r.audit_target);
	cr_expect_null(norm);

	job_free(job);
	job = NULL;
	entry_rule("j-p", "src/**");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
}

Test(intake, a_job_past_its_deadline_expires)
{
	entry("j-d", true_argv, NULL, 0);
	cr_assert_eq(read_entry(), INTAKE_OK);
	job->deadline_ms = 999;
	cr_expect_eq(intake_admit(&in, job, 0, &norm, &normlen, &r), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_EXPIRED);
	cr_expect_str_eq(r.code, "deadline");
	cr_expect_str_eq(r.msg, "deadline passed before the job could start");
	cr_expect_null(norm);
	job->deadline_ms = 1000;
	cr_expect_eq(intake_admit(&in, job, 0, &norm, &normlen, &r), INTAKE_OK);
}

Test(intake, a_network_mode_the_host_does_not_allow_is_rejected)
{
	set("net_modes=none");
	entry("j-n", true_argv, (const char *const[]){ "net", "unix", NULL }, 0);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "net");
	cr_expect_str_eq(r.msg, "field 'net': mode 'unix' is not allowed for tenant "
	    "'acme' (net_modes: none)");
	cr_expect_null(r.audit_target, "the host's rule is not the tenant's");
}

/* Drops job's allow list, as before its sandbox's was read. */
static void
allow_clear(struct job *j)
{
	for (size_t i = 0; i < j->nallow; i++)
		free(j->allow[i]);
	free(j->allow);
	j->allow = NULL;
	j->nallow = 0;
}

/*
 * A net "allow" run on a sandbox naming no list takes the sandbox's, held
 * to the tenant's net_allow as of now (narrowed since the sandbox was
 * made: rejected naming the field); none, or a damaged one, is rejected.
 */
Test(intake, a_sandboxs_allow_list_is_held_to_the_tenants_as_a_jobs)
{
	static const char list[] = "pypi.example:443,files.example:443";

	set("net_modes=none, unix, allow");
	set("net_allow=pypi.example:443");
	entry("j-a", true_argv, (const char *const[]){ "net", "allow", "sandbox", "box",
	    NULL }, 0);
	cr_assert_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_assert(intake_needs_sandbox_allow(job));

	cr_expect_not(intake_sandbox_allow(&in, job, NULL, 0, &norm, &normlen, &r));
	cr_expect_str_eq(r.code, "net");
	cr_expect_str_eq(r.msg, "field 'allow': net 'allow' needs the hosts it may reach: "
	    "the job names none and sandbox 'box' was created without allow");

	cr_expect_not(intake_sandbox_allow(&in, job, list, strlen(list), &norm, &normlen, &r));
	cr_expect_str_eq(r.msg, "field 'allow': 'files.example:443' is not within tenant "
	    "'acme''s net_allow (sandbox 'box''s allow)");

	allow_clear(job);
	cr_expect_not(intake_sandbox_allow(&in, job, "a.example,,b", 12, &norm, &normlen, &r));
	cr_expect_str_eq(r.msg, "field 'allow': the allow list of sandbox 'box' is damaged "
	    "in Redis");

	allow_clear(job);
	cr_expect(intake_sandbox_allow(&in, job, list, 16, &norm, &normlen, &r), "%s", r.msg);
	cr_assert_eq(job->nallow, 1);
	cr_expect_str_eq(job->allow[0], "pypi.example:443");
	cr_expect_not(intake_needs_sandbox_allow(job));
}

Test(intake, a_limit_above_the_tenants_ceiling_is_refused_on_the_audit_trail)
{
	tenant_set("ceiling.wall_ms", "1000");
	entry("j-l", true_argv, NULL, 5000);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "limit");
	cr_expect_str_eq(r.msg, "limits.wall_ms: 5000 is above tenant 'acme''s "
	    "ceiling of 1000");
	cr_expect_str_eq(r.audit_target, "limits");
	cr_expect_eq(r.audit_cat, AUDIT_CAT_QUOTA);
}

Test(intake, a_default_above_the_tenants_ceiling_is_lowered_to_it)
{
	tenant_set("ceiling.wall_ms", "1000");
	entry("j-l", true_argv, NULL, 0);
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_eq(job->limits.wall_ms, 1000);
	cr_expect(norm != NULL && normlen > 0);
}

Test(intake, a_network_mode_the_tenant_does_not_allow_is_refused_on_the_audit_trail)
{
	tenant_set("net", "unix");
	entry("j-n", true_argv, NULL, 0);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "net");
	cr_expect_str_eq(r.msg, "field 'net': mode 'none' is not allowed for tenant "
	    "'acme'");
	cr_expect_str_eq(r.audit_target, "net");
	cr_expect_eq(r.audit_cat, AUDIT_CAT_QUOTA);
}

Test(intake, a_denied_command_is_refused_as_policy)
{
	tenant_set("deny", "rm *");
	entry("j-p", (const char *const[]){ "rm", "-rf", "/", NULL }, NULL, 0);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "policy");
	cr_expect_str_eq(r.msg, "the command matches tenant 'acme''s denied pattern "
	    "'rm *' (a policy aid, not a security boundary)");
	cr_expect_str_eq(r.audit_target, "rm *");
	cr_expect_eq(r.audit_cat, AUDIT_CAT_POLICY);
}

Test(intake, a_job_out_of_attempts_is_given_up_with_its_normalised_job)
{
	entry("j-a", true_argv, NULL, 0);
	cr_expect_eq(admit((size_t)cfg.max_attempts), INTAKE_GIVE_UP);
	cr_expect(norm != NULL && normlen > 0, "the dead letter carries the job");
	free(norm);
	norm = NULL;
	cr_expect_eq(intake_admit(&in, job, (size_t)cfg.max_attempts - 1, &norm,
	    &normlen, &r), INTAKE_OK);
}

/*** Images ***/

/* An exec job naming image ref (NULL: none). */
static void
entry_image(const char *ref)
{
	if (ref == NULL)
		entry("j-i", true_argv, NULL, 0);
	else
		entry("j-i", true_argv, (const char *const[]){ "image", ref, NULL }, 0);
}

/* Expects a refusal with code image and message msg, on the audit trail
 * (target image_sources) or not. */
static void
expect_image_refused(const char *msg, bool audited)
{
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "image");
	cr_expect_str_eq(r.msg, msg);
	if (audited) {
		cr_expect_str_eq(r.audit_target, "image_sources");
		cr_expect_eq(r.audit_cat, AUDIT_CAT_QUOTA);
	} else {
		cr_expect_null(r.audit_target, "the host's rule is not the tenant's");
	}
	cr_expect_null(norm);
}

Test(intake, a_job_naming_no_image_runs_on_the_default_host_as_today)
{
	struct job *back = NULL;
	struct err e = { 0 };

	entry_image(NULL);
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_str_eq(job->image, "host");
	cr_assert_eq(payload_job_decode(norm, normlen, &back, NULL, &e), 0, "%s", e.msg);
	cr_expect_str_eq(back->image, "host", "the worker is told its image");
	job_free(back);
}

Test(intake, a_job_naming_host_runs)
{
	entry_image("host");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_str_eq(job->image, "host");
}

Test(intake, a_bad_reference_is_rejected_naming_the_field)
{
	entry_image("docker://registry/x");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': registry host 'registry': needs a '.', "
	    "a port or to be localhost (skopeo would read it as a folder of Docker "
	    "Hub)", false);
	/* Bytes the decoder refuses: answered as a bad image too. */
	job_free(job);
	job = NULL;
	entry_image("oci:/\x1b]0;x\a");
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	expect_image_refused("field 'image': byte 0x1b at offset 5: a reference is "
	    "printable ASCII without spaces", false);
	cr_expect_str_eq(id, "j-i");
}

Test(intake, an_image_outside_the_hosts_sources_is_rejected)
{
	entry_image("docker://R.io/x");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/x:latest' is not within "
	    "this host's image_sources (empty: host only)", false);
	job_free(job);
	job = NULL;
	set("image_sources=docker://r.io/*");
	set("default_image=docker://r.io/base");
	entry_image("host");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'host' is not within this host's "
	    "image_sources", false);
}

/* Expects the job admitted on image canon, told to the worker as that. */
static void
expect_image_admitted(const char *canon)
{
	struct job *back = NULL;
	struct err e = { 0 };

	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_str_eq(job->image, canon, "made canonical");
	cr_expect_null(job->image_id, "the digest is sandqd's to find, later");
	cr_assert_eq(payload_job_decode(norm, normlen, &back, NULL, &e), 0, "%s", e.msg);
	cr_expect_str_eq(back->image, canon, "the worker is told its image");
	job_free(back);
	free(norm);
	norm = NULL;
	job_free(job);
	job = NULL;
}

Test(intake, an_allowed_image_goes_on_to_be_resolved)
{
	set("image_sources=host, docker://r.io/*, oci:/srv/img/*");
	entry_image("docker://R.io/x");
	expect_image_admitted("docker://r.io/x:latest");
	entry_image("oci:/srv/img/py:3");
	expect_image_admitted("oci:/srv/img/py:3");
	/* And so does a default other than host. */
	set("default_image=docker://r.io/base");
	entry_image(NULL);
	expect_image_admitted("docker://r.io/base:latest");
}

Test(intake, a_tenants_image_name_goes_on_to_be_read_and_its_target_checked)
{
	char key[200];
	struct job *back = NULL;
	struct err e = { 0 };

	set("image_sources=host, docker://r.io/*");
	entry_image("numpy");
	cr_expect_eq(admit(0), INTAKE_OK, "a name is not checked before it is read: %s",
	    r.msg);
	cr_expect_str_eq(job->image, "numpy");
	cr_assert(intake_image_name(job, key, sizeof(key)));
	cr_expect_str_eq(key, "numpy:latest");
	/* What it names, within image_sources: the job runs on that. */
	cr_assert(intake_name_resolved(&in, job, "docker://r.io/sci/numpy@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", &norm,
	    &normlen, &r), "%s", r.msg);
	cr_expect_str_eq(job->image, "docker://r.io/sci/numpy@sha256:0123456789abcdef"
	    "0123456789abcdef0123456789abcdef0123456789abcdef");
	cr_expect(!intake_image_name(job, key, sizeof(key)), "resolved: no name left");
	cr_assert_eq(payload_job_decode(norm, normlen, &back, NULL, &e), 0, "%s", e.msg);
	cr_expect_str_eq(back->image, job->image, "the worker is told the target");
	job_free(back);
}

Test(intake, an_unknown_name_or_a_target_outside_image_sources_is_refused)
{
	set("image_sources=host, docker://r.io/team/*");
	entry_image("numpy:2");
	cr_assert_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect(!intake_name_resolved(&in, job, NULL, &norm, &normlen, &r));
	cr_expect_str_eq(r.code, "image");
	cr_expect_str_eq(r.msg, "field 'image': tenant 'acme' has no image named "
	    "'numpy:2' (sandq image tag)");
	cr_expect(!intake_name_resolved(&in, job, "docker://r.io/other/x:1", &norm,
	    &normlen, &r));
	cr_expect_str_eq(r.msg, "field 'image': 'docker://r.io/other/x:1' (image name "
	    "'numpy:2') is not within this host's image_sources");
	cr_expect_null(r.audit_target, "the host's rule is not the tenant's");
	/* A name never resolves to a name. */
	cr_expect(!intake_name_resolved(&in, job, "other", &norm, &normlen, &r));
	cr_expect_str_eq(r.msg, "field 'image': image name 'numpy:2' resolves to no "
	    "image: a name");
}

Test(intake, a_names_target_outside_the_tenants_image_sources_is_audited)
{
	set("image_sources=host, docker://r.io/*");
	tenant_set("image_sources", "docker://r.io/team/*");
	entry_image("numpy");
	cr_assert_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect(!intake_name_resolved(&in, job, "docker://r.io/other/x:1", &norm,
	    &normlen, &r));
	cr_expect_str_eq(r.msg, "field 'image': 'docker://r.io/other/x:1' is not within "
	    "tenant 'acme''s image_sources");
	cr_expect_str_eq(r.audit_target, "image_sources");
	cr_expect_eq(r.audit_cat, AUDIT_CAT_QUOTA);
}

Test(intake, a_clients_image_id_is_refused)
{
	set("image_sources=host, docker://r.io/*");
	entry("j-i", true_argv, (const char *const[]){ "image", "docker://r.io/x",
	    "image_id", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef"
	    "0123456789abcdef", NULL }, 0);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "invalid_job");
	cr_expect_str_eq(r.msg, "field 'image_id': set by sandqd only");
	cr_expect_str_eq(id, "j-i", "answered under its id");
	cr_expect_null(job);
}

Test(intake, a_tenants_image_sources_narrow_the_hosts_on_the_audit_trail)
{
	set("image_sources=host, docker://r.io/*");
	tenant_set("image_sources", "docker://r.io/team/*");
	entry_image("docker://r.io/teamx");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/teamx:latest' is not "
	    "within tenant 'acme''s image_sources", true);
	job_free(job);
	job = NULL;
	entry_image(NULL);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'host' (the default) is not within "
	    "tenant 'acme''s image_sources", true);
	job_free(job);
	job = NULL;
	entry_image("docker://r.io/team/app");
	expect_image_admitted("docker://r.io/team/app:latest");
}

Test(intake, a_tenants_image_sources_cannot_widen_the_hosts)
{
	tenant_set("image_sources", "host, docker://r.io/*");
	entry_image("docker://r.io/x");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/x:latest' is not within "
	    "this host's image_sources (empty: host only)", false);
	job_free(job);
	job = NULL;
	entry_image("host");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
}

Test(intake, ops_that_run_nothing_take_no_image)
{
	msgpack_packer pk;

	set("image_sources=docker://r.io/*");
	set("default_image=docker://r.io/base");
	msgpack_sbuffer_clear(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	pstr(&pk, "id");
	pstr(&pk, "j-o");
	pstr(&pk, "op");
	pstr(&pk, "sandbox.list");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_null(job->image);
}

/*** Sandboxes on images (docs/images.md) ***/

/* What a run's sandbox runs on is sandqd's to say: a client's is refused. */
Test(intake, a_clients_sandbox_image_or_workdir_is_refused)
{
	entry("j-s", true_argv, (const char *const[]){ "sandbox", "sb",
	    "sandbox_image", "host", NULL }, 0);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "invalid_job");
	cr_expect_str_eq(r.msg, "field 'sandbox_image': set by sandqd only");
	cr_expect_null(job);
	entry("j-s", true_argv, (const char *const[]){ "sandbox", "sb",
	    "sandbox_workdir", "/testbed", NULL }, 0);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_str_eq(r.msg, "field 'sandbox_workdir': set by sandqd only");
}

/*
 * A run naming no image takes its sandbox's (what sandqd holds), checked
 * against the sources as its own would be, and named so in a refusal;
 * a run naming one keeps it (the worker compares it with the sandbox's).
 */
Test(intake, a_run_on_a_sandbox_takes_the_sandboxs_image)
{
	set("image_sources=host, docker://r.io/*");
	in.sandbox_image = "docker://r.io/task:1";
	entry("j-s", true_argv, (const char *const[]){ "sandbox", "sb", NULL }, 0);
	expect_image_admitted("docker://r.io/task:1");
	entry("j-s", true_argv, (const char *const[]){ "sandbox", "sb", "image",
	    "host", NULL }, 0);
	expect_image_admitted("host");
	/* The tenant's list applies to the sandbox's image, and says whose. */
	tenant_set("image_sources", "host");
	entry("j-s", true_argv, (const char *const[]){ "sandbox", "sb", NULL }, 0);
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/task:1' (the sandbox's) is "
	    "not within tenant 'acme''s image_sources", true);
}

/* An sbuf holding a sandbox.create of id sb with string fields kv. */
static void
entry_create(const char *const *kv)
{
	msgpack_packer pk;
	size_t n = 0;

	while (kv[2 * n] != NULL)
		n++;
	msgpack_sbuffer_clear(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3 + n);
	pstr(&pk, "id");
	pstr(&pk, "j-c");
	pstr(&pk, "op");
	pstr(&pk, "sandbox.create");
	pstr(&pk, "sandbox");
	pstr(&pk, "sb");
	for (size_t i = 0; i < n; i++) {
		pstr(&pk, kv[2 * i]);
		pstr(&pk, kv[2 * i + 1]);
	}
}

/*
 * A create's image is held to the sources as a run's is, made canonical;
 * a create without one records none and takes no default; a seed's
 * limits are resolved as an import's (the ceilings).
 */
Test(intake, a_create_on_an_image_is_checked_as_a_run)
{
	entry_create((const char *const[]){ "image", "docker://R.io/task", NULL });
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/task:latest' is not within "
	    "this host's image_sources (empty: host only)", false);
	job_free(job);
	job = NULL;
	set("image_sources=host, docker://r.io/*");
	entry_create((const char *const[]){ "image", "docker://R.io/task",
	    "from_image_dir", "/testbed", NULL });
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_str_eq(job->image, "docker://r.io/task:latest");
	cr_expect_str_eq(job->workdir, "/testbed");
	cr_expect_eq(job->limits.disk_bytes, cfg.ceiling.disk_bytes, "an import's bound");
	job_free(job);
	job = NULL;
	free(norm);
	norm = NULL;
	set("default_image=docker://r.io/base");
	entry_create((const char *const[]){ "workdir", "/srv/app", NULL });
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_null(job->image, "no image: none recorded, not the default");
}

/*** image.pull ***/

/* An image.pull job naming ref (NULL: no image field). */
static void
entry_pull(const char *ref)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, ref != NULL ? 3 : 2);
	pstr(&pk, "id");
	pstr(&pk, "j-p");
	pstr(&pk, "op");
	pstr(&pk, "image.pull");
	if (ref != NULL) {
		pstr(&pk, "image");
		pstr(&pk, ref);
	}
}

Test(intake, an_image_pull_within_the_sources_goes_on_with_its_canonical_reference)
{
	struct job *back = NULL;
	struct err e = { 0 };

	set("image_sources=host, docker://r.io/*");
	entry_pull("docker://R.io/x");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	cr_expect_str_eq(job->image, "docker://r.io/x:latest");
	cr_expect_eq(job->limits.wall_ms, 0, "a pull has no limits");
	cr_assert_eq(payload_job_decode(norm, normlen, &back, NULL, &e), 0, "%s", e.msg);
	cr_expect_eq(back->op, OP_IMAGE_PULL);
	cr_expect_str_eq(back->image, "docker://r.io/x:latest");
	job_free(back);
}

Test(intake, an_image_pull_is_held_to_the_image_rules_of_a_run)
{
	set("image_sources=host, docker://r.io/*");
	/* Outside the host's sources, the same refusal as a run's. */
	entry_pull("docker://other.io/x");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://other.io/x:latest' is not "
	    "within this host's image_sources", false);
	job_free(job);
	job = NULL;
	/* Outside the tenant's: on the audit trail. */
	tenant_set("image_sources", "docker://r.io/team/*");
	entry_pull("docker://r.io/x");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'docker://r.io/x:latest' is not within "
	    "tenant 'acme''s image_sources", true);
	job_free(job);
	job = NULL;
	/* host is nothing to pull. */
	in.conf = NULL;
	entry_pull("host");
	cr_expect_eq(admit(0), INTAKE_ANSWER);
	expect_image_refused("field 'image': 'host' is this host's own files: there is "
	    "nothing to pull", false);
	job_free(job);
	job = NULL;
	/* A tenant's name goes on, to be read and checked as a run's is. */
	entry_pull("numpy");
	cr_expect_eq(admit(0), INTAKE_OK, "%s", r.msg);
	{
		char key[80];

		cr_assert(intake_image_name(job, key, sizeof(key)));
		cr_expect_str_eq(key, "numpy:latest");
		cr_assert(intake_name_resolved(&in, job, "docker://r.io/sci/numpy:1", &norm,
		    &normlen, &r), "%s", r.msg);
		cr_expect_str_eq(job->image, "docker://r.io/sci/numpy:1");
	}
	free(norm);
	norm = NULL;
	job_free(job);
	job = NULL;
	/* The decoder wants the image: a pull of nothing is a bad image. */
	entry_pull(NULL);
	cr_expect_eq(read_entry(), INTAKE_ANSWER);
	cr_expect_str_eq(r.code, "image");
	cr_expect_str_eq(r.msg, "field 'image': missing (op image.pull)");
}

/* Reads an exec job, then makes it net "allow" with the patterns given. */
static enum intake_verdict
admit_allow(const char *const *pats)
{
	size_t n = 0;

	entry("j-a", true_argv, NULL, 0);
	cr_assert_eq(read_entry(), INTAKE_OK, "read: %s", r.msg);
	free(job->net);
	job->net = xstrdup("allow");
	job->net_mode = NET_ALLOW;
	while (pats[n] != NULL)
		n++;
	job->allow = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++)
		job->allow[job->nallow++] = xstrdup(pats[i]);
	return intake_admit(&in, job, 0, &norm, &normlen, &r);
}

Test(intake, an_allow_list_inside_the_hosts_net_allow_is_admitted)
{
	set("net_modes=none, allow");
	set("net_allow=*.example.org:443, 192.0.2.7:80");
	cr_expect_eq(admit_allow((const char *const[]){ "pypi.example.org:443",
	    "*.files.example.org:443", "192.0.2.7:80", NULL }), INTAKE_OK, "%s", r.msg);
}

Test(intake, an_allow_pattern_outside_the_tenants_list_is_rejected_naming_it)
{
	struct err e = { 0 };

	set("net_modes=none, allow");
	set("net_allow=*.example.org");
	cr_expect_eq(admit_allow((const char *const[]){ "pypi.example.org", "example.org",
	    NULL }), INTAKE_ANSWER);
	cr_expect_eq(r.status, ST_REJECTED);
	cr_expect_str_eq(r.code, "net");
	cr_expect_str_eq(r.msg, "field 'allow': 'example.org' is not within tenant "
	    "'acme''s net_allow");
	/* A tenant's own list narrows the host's. */
	cr_assert_eq(config_load_string(&cfg, "[tenant.acme]\nnet_allow = pypi.example.org\n",
	    "t.conf", &e), 0, "%s", e.msg);
	job_free(job);
	job = NULL;
	cr_expect_eq(admit_allow((const char *const[]){ "files.example.org", NULL }),
	    INTAKE_ANSWER);
	cr_expect_str_eq(r.msg, "field 'allow': 'files.example.org' is not within tenant "
	    "'acme''s net_allow");
}

Test(intake, an_address_or_a_wider_port_is_not_within_a_names_pattern)
{
	set("net_modes=none, allow");
	set("net_allow=*.example.org:443");
	cr_expect_eq(admit_allow((const char *const[]){ "10.0.0.1:443", NULL }),
	    INTAKE_ANSWER);
	cr_expect_str_eq(r.msg, "field 'allow': '10.0.0.1:443' is not within tenant "
	    "'acme''s net_allow");
	job_free(job);
	job = NULL;
	cr_expect_eq(admit_allow((const char *const[]){ "a.example.org", NULL }),
	    INTAKE_ANSWER);
	job_free(job);
	job = NULL;
	set("net_allow=");
	cr_expect_eq(admit_allow((const char *const[]){ "a.example.org:443", NULL }),
	    INTAKE_ANSWER);
	cr_expect_str_eq(r.msg, "field 'allow': 'a.example.org:443' is not within tenant "
	    "'acme''s net_allow (which is empty)");
}
