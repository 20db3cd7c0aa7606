/*
 * intake.c - a stream entry's bytes -> the job to queue, or how to answer
 * the entry instead.
 *
 * The entry's bytes are untrusted: they are checked against max_job_bytes,
 * walked by payload_scan() and decoded by the strict decoder before anything
 * else looks at them (intake_read). The decoded job is then held to the
 * host's rules and the tenant's own (intake_admit): its path rules, its
 * deadline, its network mode, its image (images/ref.h: the reference, or
 * the host's default_image, within the host's image_sources and the
 * tenant's), its limits resolved against the host's and lowered to the
 * tenant's ceilings, the tenant's denied commands, and the attempts it has
 * had. The worker gets a re-encoded, normalised job with every limit
 * resolved and its image's canonical text, never the tenant's bytes.
 *
 * Every refusal says what to do with the entry (struct intake_refusal): an
 * answer under the job's id (rejected or expired, with a code and a
 * message), a dead letter when no id can be read, or giving up on a job out
 * of attempts. Carrying it out (the result, the audit trail, Redis) is
 * jobs.c's: nothing here does I/O or reads a clock.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../../common/xmalloc.h"
#include "../../egress/egress.h"
#include "../../images/ref.h"
#include "../../workspace/perms.h"
#include "core.h"

/* What the decoder lets through is what a reference may be. */
_Static_assert(JOB_IMAGE_MAX == IMG_REF_MAX, "the job's image bound is a reference's");

/* Fills r for a refusal carried out as v says. Returns v. */
static enum intake_verdict
refuse(struct intake_refusal *r, enum intake_verdict v, enum res_status st,
    const char *code, const char *msg)
{
	r->status = st;
	r->code = code;
	snprintf(r->msg, sizeof(r->msg), "%s", msg);
	r->audit_target = NULL;
	return v;
}

enum intake_verdict
intake_read(const struct intake *in, const char *raw, size_t rawlen,
    size_t nfields, char id[JOB_ID_MAX + 1], struct job **jobp,
    struct intake_refusal *r)
{
	struct err e = { 0 };
	struct job *job = NULL;

	*jobp = NULL;
	if (raw == NULL)
		return refuse(r, INTAKE_DEAD, ST_REJECTED, NULL, nfields == 0 ?
		    "entry has no fields (deleted while pending?)" :
		    "entry has no 'job' field");
	if (rawlen > (uint64_t)in->cfg->max_job_bytes) {
		char msg[160];

		snprintf(msg, sizeof(msg), "job is %zu bytes, above the limit of %lld "
		    "(max_job_bytes)", rawlen, (long long)in->cfg->max_job_bytes);
		if (payload_peek_id(raw, rawlen, id))
			return refuse(r, INTAKE_ANSWER, ST_REJECTED, "too_large", msg);
		return refuse(r, INTAKE_DEAD, ST_REJECTED, NULL, msg);
	}
	if (payload_job_decode(raw, rawlen, &job, id, &e) < 0) {
		if (id[0] == '\0')
			payload_peek_id(raw, rawlen, id);
		/* An image the decoder refused (bytes, length) is a bad image. */
		if (id[0] != '\0')
			return refuse(r, INTAKE_ANSWER, ST_REJECTED, strncmp(e.msg,
			    "field 'image': ", 15) == 0 ? "image" : "invalid_job", e.msg);
		return refuse(r, INTAKE_DEAD, ST_REJECTED, NULL, e.msg);
	}
	/* The image's digest is sandqd's to find (dispatcher/images.c). */
	if (job->image_id != NULL) {
		job_free(job);
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "invalid_job",
		    "field 'image_id': set by sandqd only");
	}
	/* So is what a run's sandbox runs on (dispatcher/sbximage.c). */
	if (job->sandbox_image != NULL || job->sandbox_workdir != NULL) {
		bool img = job->sandbox_image != NULL;

		job_free(job);
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "invalid_job", img ?
		    "field 'sandbox_image': set by sandqd only" :
		    "field 'sandbox_workdir': set by sandqd only");
	}
	/* The tenant is the stream's; a job may only repeat it. */
	if (job->tenant != NULL && strcmp(job->tenant, in->tenant) != 0) {
		char msg[200];

		snprintf(msg, sizeof(msg), "field 'tenant': the job was submitted to "
		    "tenant '%s', not '%.64s'", in->tenant, job->tenant);
		job_free(job);
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "invalid_job", msg);
	}
	free(job->tenant);
	job->tenant = xstrdup(in->tenant);
	*jobp = job;
	return INTAKE_OK;
}

/* Whether tenant may use network mode; if not, the allowed ones into list. */
static bool
net_allowed(const struct config *c, const char *tenant, const char *mode,
    char *list, size_t len)
{
	size_t n, off = 0;
	char *const *modes = config_net_modes(c, tenant, &n);

	list[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (strcmp(modes[i], mode) == 0)
			return true;
		if (off < len)
			off += (size_t)snprintf(list + off, len - off, "%s%s",
			    i ? ", " : "", modes[i]);
	}
	return false;
}

/*
 * A net "allow" job's list within its tenant's net_allow (docs/security.md,
 * "Network by allowlist"): every pattern must parse and be covered by one
 * of the tenant's, so a job never widens its tenant's list. Returns true,
 * or false with msg naming the field and the pattern.
 */
static bool
allow_within(const struct config *c, const char *tenant, const struct job *job,
    char *msg, size_t len)
{
	struct egress_pat mine, theirs;
	struct err e = { 0 };
	size_t n;
	char *const *list = config_net_allow(c, tenant, &n);

	for (size_t i = 0; i < job->nallow; i++) {
		bool covered = false;

		if (egress_pat_parse(job->allow[i], &mine, &e) < 0) {
			snprintf(msg, len, "field 'allow': %s", e.msg);
			return false;
		}
		for (size_t k = 0; k < n && !covered; k++)
			covered = egress_pat_parse(list[k], &theirs, &e) == 0 &&
			    egress_pat_covers(&theirs, &mine);
		if (!covered) {
			char shown[EGRESS_PAT_MAX + 1];

			egress_pat_format(&mine, shown, sizeof(shown));
			snprintf(msg, len, "field 'allow': '%.80s' is not within tenant '%s''s "
			    "net_allow%s", shown, tenant, n == 0 ? " (which is empty)" : "");
			return false;
		}
	}
	return true;
}

/* The text a tenant's deny patterns are matched against, or NULL (ops). */
static char *
command_text(const struct job *job)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f;

	if (job->op == OP_SH)
		return xstrdup(job->script);
	if (job->op == OP_PYTHON)
		return xstrdup(job->code);
	if (job->op != OP_EXEC)
		return NULL;
	if ((f = open_memstream(&s, &len)) == NULL)
		fatal("open_memstream");
	for (size_t i = 0; i < job->argc; i++)
		fprintf(f, "%s%s", i ? " " : "", job->argv[i]);
	fclose(f);
	return s;
}

/* Whether the job asked for no limit at all. */
static bool
limits_unset(const struct job_limits *l)
{
	static const struct job_limits none;

	return memcmp(l, &none, sizeof(none)) == 0;
}

/*
 * Refuses the job for a rule of the tenant's (docs/tenants.md): on the audit
 * trail (category c, target the rule) before it is answered rejected.
 */
static void
refuse_rule(struct intake_refusal *r, enum audit_category c, const char *target,
    const char *code, const char *msg)
{
	refuse(r, INTAKE_ANSWER, ST_REJECTED, code, msg);
	r->audit_cat = c;
	r->audit_target = target;
}

/*
 * The tenant's own rules for a job (docs/tenants.md): its network modes
 * (within the host's), its ceilings over the host's limits (an asked limit
 * above one is refused naming it; a default above one is lowered to it),
 * its denied command patterns. lim is the job's resolved limits. Returns
 * true, or false with *r filled.
 */
static bool
tenant_rules(const struct intake *in, const struct job *job,
    struct job_limits *lim, struct intake_refusal *r)
{
	const struct tenant_conf *c = in->conf;
	static const struct { const char *name; size_t off; } fields[] = {
#define F(x) { #x, offsetof(struct job_limits, x) }
		F(wall_ms), F(cpu_ms), F(memory_bytes), F(pids), F(output_bytes),
		F(disk_bytes), F(files),
#undef F
	};
	char msg[400], *text;
	int k;

	if (c == NULL)
		return true;
	if (c->net_mask != 0 && !tenant_net_allowed(c, job->net_mode)) {
		snprintf(msg, sizeof(msg), "field 'net': mode '%s' is not allowed for tenant "
		    "'%s'", job->net ? job->net : "none", in->tenant);
		refuse_rule(r, AUDIT_CAT_QUOTA, "net", "net", msg);
		return false;
	}
	for (size_t i = 0; JOB_HAS_LIMITS(job) && i < sizeof(fields) / sizeof(fields[0]); i++) {
		uint64_t cap = *(const uint64_t *)(const void *)((const char *)&c->ceiling +
		    fields[i].off);
		uint64_t asked = *(const uint64_t *)(const void *)((const char *)&job->limits +
		    fields[i].off);
		uint64_t *got = (uint64_t *)(void *)((char *)lim + fields[i].off);

		if (cap == 0 || *got <= cap)
			continue;
		if (asked == 0) {
			*got = cap;	/* a default, not the job's ask */
			continue;
		}
		snprintf(msg, sizeof(msg), "limits.%s: %llu is above tenant '%s''s ceiling "
		    "of %llu", fields[i].name, (unsigned long long)asked, in->tenant,
		    (unsigned long long)cap);
		refuse_rule(r, AUDIT_CAT_QUOTA, "limits", "limit", msg);
		return false;
	}
	if (c->ndeny > 0 && (text = command_text(job)) != NULL) {
		k = tenant_deny_match(c, text);
		free(text);
		if (k >= 0) {
			snprintf(msg, sizeof(msg), "the command matches tenant '%s''s denied "
			    "pattern '%.256s' (a policy aid, not a security boundary)",
			    in->tenant, c->deny[k]);
			refuse_rule(r, AUDIT_CAT_POLICY, c->deny[k], "policy", msg);
			return false;
		}
	}
	return true;
}

/*
 * The image of a run: the reference it names, or the host's default_image,
 * parsed (refused naming the field) and, unless it is a tenant's name
 * (checked once resolved: see intake_admit()), within the host's
 * image_sources. Fills *ref and sets job->image to the canonical text, so
 * the worker and every later check see one spelling. Returns true, or false
 * with *r filled.
 */
static bool
image_pick(const struct intake *in, struct job *job, struct img_ref *ref,
    struct intake_refusal *r)
{
	/* A run on a sandbox that records an image runs on it (sbximage.c). */
	const char *text = job->image != NULL ? job->image :
	    in->sandbox_image != NULL ? in->sandbox_image : in->cfg->default_image;
	char canon[IMG_REF_MAX + 1], msg[sizeof(r->msg)];
	struct err e = { 0 };

	if (img_ref_parse(text, ref, &e) < 0) {
		snprintf(msg, sizeof(msg), "field 'image': %s", e.msg);
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", msg);
		return false;
	}
	if (img_ref_str(ref, canon, sizeof(canon)) < 0)
		fatalx("an image reference outgrew its canonical form");
	if (ref->kind != IMG_NAME && !img_source_allowed(in->cfg->image_sources,
	    in->cfg->nimage_sources, ref)) {
		/* The canonical text is printable ASCII: img_ref_parse() says so. */
		snprintf(msg, sizeof(msg), "field 'image': '%.256s'%s is not within "
		    "this host's image_sources%s", canon, job->image ? "" :
		    in->sandbox_image ? " (the sandbox's)" : " (the default)",
		    in->cfg->nimage_sources == 0 ?
		    " (empty: host only)" : "");
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", msg);
		return false;
	}
	free(job->image);
	job->image = xstrdup(canon);
	return true;
}

/*
 * The tenant's image_sources (docs/tenants.md), which can only narrow the
 * host's: a run's image (ref, canonical in job->image; named: the job named
 * it, rather than taking the default) must match both lists. Refused on
 * the audit trail like the tenant's other rules. Returns true, or false
 * with *r filled.
 */
static bool
tenant_image_rule(const struct intake *in, const struct job *job,
    const struct img_ref *ref, bool named, struct intake_refusal *r)
{
	const struct tenant_conf *c = in->conf;
	char msg[sizeof(r->msg)];

	if (c == NULL || c->nimage_sources == 0 || ref->kind == IMG_NAME ||
	    img_source_allowed(c->image_sources, c->nimage_sources, ref))
		return true;
	snprintf(msg, sizeof(msg), "field 'image': '%.256s'%s is not within tenant "
	    "'%s''s image_sources", job->image, named ? "" : in->sandbox_image ?
	    " (the sandbox's)" : " (the default)", in->tenant);
	refuse_rule(r, AUDIT_CAT_QUOTA, "image_sources", "image", msg);
	return false;
}

/*
 * Whether the job's path rules compile (workspace/perms.c: pattern syntax,
 * the preset; decoding already refused an unknown level): refused here,
 * naming the rule, rather than by the sandbox after the job was queued.
 */
static bool
rules_valid(const struct job *job, struct err *e)
{
	struct perms p = { 0 };
	int rc;

	if (job->nperms == 0 && job->perm_preset == NULL)
		return true;
	rc = perms_compile_job(&p, job, e);
	perms_free(&p);
	if (rc < 0) {
		char msg[sizeof(e->msg)];

		snprintf(msg, sizeof(msg), "%s", e->msg);
		snprintf(e->msg, sizeof(e->msg), "field 'perms': %.200s", msg);
		return false;
	}
	return true;
}

/*
 * image.pull (answered by sandqd, never by a worker): its image is held
 * to the same rules as a run's (parsed, within the host's image_sources
 * and the tenant's, code "image"; a tenant's name goes on, to be read and
 * checked as a run's is: intake_name_resolved()), and must be something
 * to pull: not host. It has no limits, network or path rules. Returns as
 * intake_admit() does.
 */
static enum intake_verdict
image_pull_admit(const struct intake *in, struct job *job, size_t nattempts,
    char **norm, size_t *normlen, struct intake_refusal *r)
{
	struct img_ref ref;

	if (job->deadline_ms > 0 && in->now > (uint64_t)job->deadline_ms)
		return refuse(r, INTAKE_ANSWER, ST_EXPIRED, "deadline",
		    "deadline passed before the job could start");
	if (!image_pick(in, job, &ref, r) || !tenant_image_rule(in, job, &ref, true, r))
		return INTAKE_ANSWER;
	if (ref.kind == IMG_HOST)
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", "field 'image': "
		    "'host' is this host's own files: there is nothing to pull");
	if (payload_job_encode(job, norm, normlen) < 0)
		fatalx("cannot encode a job");
	if (nattempts >= (size_t)in->cfg->max_attempts)
		return INTAKE_GIVE_UP;
	return INTAKE_OK;
}

enum intake_verdict
intake_admit(const struct intake *in, struct job *job, size_t nattempts,
    char **norm, size_t *normlen, struct intake_refusal *r)
{
	struct job_limits lim;
	struct err e = { 0 };
	struct img_ref ref;
	bool named = job->image != NULL;
	char modes[128];

	if (job->op == OP_IMAGE_PULL)
		return image_pull_admit(in, job, nattempts, norm, normlen, r);
	if (!rules_valid(job, &e))
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "invalid_job", e.msg);
	if (job->deadline_ms > 0 && in->now > (uint64_t)job->deadline_ms)
		return refuse(r, INTAKE_ANSWER, ST_EXPIRED, "deadline",
		    "deadline passed before the job could start");
	if (!net_allowed(in->cfg, in->tenant, job->net ? job->net : "none",
	    modes, sizeof(modes))) {
		char msg[256];

		snprintf(msg, sizeof(msg), "field 'net': mode '%s'%s is not allowed for "
		    "tenant '%s' (net_modes: %s)", job->net ? job->net : "none",
		    job->net ? "" : " (the default)", in->tenant, modes);
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "net", msg);
	}
	/* A run's list, or a new sandbox's for its runs: within the tenant's. */
	if (job->net_mode == NET_ALLOW || job->nallow > 0) {
		char msg[400];

		if (!allow_within(in->cfg, in->tenant, job, msg, sizeof(msg)))
			return refuse(r, INTAKE_ANSWER, ST_REJECTED, "net", msg);
	}
	if (JOB_HAS_IMAGE(job) && !image_pick(in, job, &ref, r))
		return INTAKE_ANSWER;
	/*
	 * Runs have limits, and so do imports: what they store must fit what
	 * a job on the sandbox may hold. The other ops start no process and
	 * store only what the job itself carries.
	 */
	if (JOB_HAS_LIMITS(job) && config_job_limits(in->cfg, job, &lim, &e) < 0)
		return refuse(r, INTAKE_ANSWER, ST_REJECTED, "limit", e.msg);
	/*
	 * An import that names neither limits nor a preset is held to what any
	 * job of the tenant could be given (the ceilings, lowered to the
	 * tenant's by tenant_rules()), not to a default job's: a sandbox larger
	 * than a default job's workspace is still one a job can run on.
	 */
	if (JOB_HAS_LIMITS(job) && !JOB_OP_RUNS(job->op) && job->preset == PRESET_DEFAULT &&
	    limits_unset(&job->limits))
		lim = in->cfg->ceiling;
	if (!tenant_rules(in, job, &lim, r))
		return INTAKE_ANSWER;
	if (JOB_HAS_IMAGE(job)) {
		/*
		 * An allowed image goes on: sandqd resolves it to a digest in
		 * its cache (pulling it if need be) before the job is queued
		 * (dispatcher/images.c). A tenant's own name is read from
		 * Redis first, and what it names is checked then
		 * (intake_name_resolved()).
		 */
		if (!tenant_image_rule(in, job, &ref, named, r))
			return INTAKE_ANSWER;
	}
	if (JOB_HAS_LIMITS(job))
		job->limits = lim;
	if (payload_job_encode(job, norm, normlen) < 0)
		fatalx("cannot encode a job");
	if (nattempts >= (size_t)in->cfg->max_attempts)
		return INTAKE_GIVE_UP;
	return INTAKE_OK;
}

bool
intake_image_name(const struct job *job, char *key, size_t size)
{
	struct img_ref ref;
	struct err e;

	/* A create or import on a name records what the name resolves to. */
	if ((!JOB_HAS_IMAGE(job) && job->op != OP_IMAGE_PULL) || job->image == NULL ||
	    img_ref_parse(job->image, &ref, &e) < 0 || ref.kind != IMG_NAME)
		return false;
	return img_name_key(&ref, key, size) >= 0;
}

bool
intake_needs_sandbox_allow(const struct job *job)
{
	return JOB_OP_RUNS(job->op) && job->net_mode == NET_ALLOW && job->nallow == 0 &&
	    job->sandbox != NULL;
}

bool
intake_sandbox_allow(const struct intake *in, struct job *job, const char *value,
    size_t len, char **norm, size_t *normlen, struct intake_refusal *r)
{
	char msg[sizeof(r->msg)];
	size_t start = 0;

	if (value == NULL) {
		snprintf(msg, sizeof(msg), "field 'allow': net 'allow' needs the hosts it may "
		    "reach: the job names none and sandbox '%s' was created without allow",
		    job->sandbox);
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "net", msg);
		return false;
	}
	/* sandqd wrote it; read back bounded all the same. An empty list the
	 * job gave ([]) is no list: the sandbox's. */
	free(job->allow);
	job->allow = xcalloc(JOB_ALLOW_MAX + 1, sizeof(char *));
	for (size_t i = 0; i <= len; i++) {
		bool bad = false;

		if (i < len && value[i] != ',') {
			bad = value[i] <= ' ' || value[i] > '~';
			if (!bad)
				continue;
		}
		if (bad || i == start || i - start > JOB_ALLOW_LEN ||
		    job->nallow == JOB_ALLOW_MAX) {
			snprintf(msg, sizeof(msg), "field 'allow': the allow list of sandbox "
			    "'%s' is damaged in Redis", job->sandbox);
			refuse(r, INTAKE_ANSWER, ST_REJECTED, "net", msg);
		return false;
		}
		job->allow[job->nallow++] = xmemdup0(value + start, i - start);
		start = i + 1;
	}
	/* The tenant's list may have narrowed since the sandbox was made. */
	if (!allow_within(in->cfg, in->tenant, job, msg, sizeof(msg))) {
		char full[sizeof(r->msg)];

		snprintf(full, sizeof(full), "%.300s (sandbox '%s''s allow)", msg, job->sandbox);
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "net", full);
		return false;
	}
	free(*norm);
	if (payload_job_encode(job, norm, normlen) < 0)
		fatalx("cannot encode a job");
	return true;
}

bool
intake_name_resolved(const struct intake *in, struct job *job, const char *target,
    char **norm, size_t *normlen, struct intake_refusal *r)
{
	char key[IMG_NAME_MAX + IMG_TAG_MAX + 2], msg[sizeof(r->msg)], canon[IMG_REF_MAX + 1];
	struct img_ref name, ref;
	struct err e = { 0 };

	if (img_ref_parse(job->image, &name, &e) < 0 || name.kind != IMG_NAME ||
	    img_name_key(&name, key, sizeof(key)) < 0)
		fatalx("intake_name_resolved: not a job on an image name");
	if (target == NULL) {
		snprintf(msg, sizeof(msg), "field 'image': tenant '%s' has no image "
		    "named '%s' (sandq image tag)", in->tenant, key);
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", msg);
		return false;
	}
	if (img_ref_parse(target, &ref, &e) < 0 || ref.kind == IMG_NAME) {
		snprintf(msg, sizeof(msg), "field 'image': image name '%.100s' resolves to "
		    "no image: %.150s", key, ref.kind == IMG_NAME ? "a name" : e.msg);
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", msg);
		return false;
	}
	if (img_ref_str(&ref, canon, sizeof(canon)) < 0)
		fatalx("an image reference outgrew its canonical form");
	if (!img_source_allowed(in->cfg->image_sources, in->cfg->nimage_sources, &ref)) {
		snprintf(msg, sizeof(msg), "field 'image': '%.200s' (image name '%.100s') is "
		    "not within this host's image_sources%s", canon, key,
		    in->cfg->nimage_sources == 0 ? " (empty: host only)" : "");
		refuse(r, INTAKE_ANSWER, ST_REJECTED, "image", msg);
		return false;
	}
	/* The tenant's rule reads the job's image: the target, from here on. */
	free(job->image);
	job->image = xstrdup(canon);
	if (!tenant_image_rule(in, job, &ref, true, r))
		return false;
	free(*norm);
	if (payload_job_encode(job, norm, normlen) < 0)
		fatalx("cannot encode a job");
	return true;
}
