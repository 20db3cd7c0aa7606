/*
 * imgnames.c - a run on a tenant's image name (sandq image tag): the name
 * read from Redis before the job is queued.
 *
 * A tenant's names live in one Redis hash (proto/keys.h key_images(),
 * images/names.h for the value), so every host resolves a name the same
 * way and a name tagged again is seen by the next job, not after a
 * refresh. Intake admitted the job with its name unresolved
 * (core/intake.c); one HGET here finds what it names, intake_name_resolved()
 * checks that against the host's and the tenant's image_sources as if the
 * job had named it, and the job goes on as any run on that image: resolved
 * to a digest in the cache, pulled if need be (images.c). The name stays
 * with the job, for its result.
 *
 * A job whose name is being read is held by the pending reply alone: if
 * the connection drops, the job is dropped unanswered and its entry, still
 * pending in its stream, is read again (as admit.c does).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../images/names.h"
#include "dispatcher.h"

static void
on_name(void *arg, int status, const char *val, size_t len)
{
	struct djob *j = arg;
	struct sandqd *d = j->d;
	const struct tenant *t = &d->tenants[j->tenant];
	struct intake in = { .cfg = &d->cfg, .tenant = t->name,
	    .conf = t->has_conf ? &t->conf : NULL };
	struct img_name_value v;
	struct intake_refusal r;
	struct err e = { 0 };
	char msg[400];

	if (status == -ENOTCONN) {
		djob_free(j);
		return;
	}
	if (status < 0) {
		jobs_answer_error(d, j, ST_INTERNAL, "image", "field 'image': the "
		    "tenant's image names could not be read from Redis");
		return;
	}
	if (status == 1 && img_name_value_decode(val, len, &v, &e) < 0) {
		snprintf(msg, sizeof(msg), "field 'image': image name '%s' of tenant "
		    "'%s' is damaged in Redis: %.200s", j->image_name, t->name, e.msg);
		jobs_answer_error(d, j, ST_REJECTED, "image", msg);
		return;
	}
	if (!intake_name_resolved(&in, j->job, status == 1 ? v.ref : NULL, &j->norm,
	    &j->normlen, &r)) {
		jobs_refused_rule(d, j, &r);
		return;
	}
	log_debug("job %s (%s): image name %s is %s", j->id, t->name, j->image_name,
	    j->job->image);
	jobs_admitted(d, j);
	sched_dispatch(d);
}

bool
imgnames_lookup(struct sandqd *d, struct djob *j)
{
	char key[IMG_NAME_MAX + IMG_TAG_MAX + 2];
	int rc;

	if (!intake_image_name(j->job, key, sizeof(key)))
		return false;
	j->d = d;
	j->image_name = xstrdup(key);
	if ((rc = rq_image_name_get(d->rq, j->tenant, key, on_name, j)) < 0) {
		if (rc == -ENOTCONN)
			djob_free(j);	/* Redis is down: read again once it is back */
		else
			jobs_answer_error(d, j, ST_INTERNAL, "image", "field 'image': the "
			    "tenant's image names could not be read from Redis");
	}
	return true;
}
