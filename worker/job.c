/*
 * job.c - the worker's loop: receive a job, run it in the prepared sandbox,
 * send the result, prepare the next sandbox.
 *
 * The next sandbox is prepared right after a result is sent, while the
 * dispatcher publishes it and the queue hands over the next job, so a job
 * arriving at an idle worker finds its namespaces and image already built.
 *
 * The dispatcher validated and normalised the job, so a job that fails to
 * decode here means the peer is broken: the worker exits (STYLE 4), and the
 * dispatcher fails the job and respawns it.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../queue/payload.h"
#include "worker.h"

static void
prepare_next(struct worker *w)
{
	struct err e = { 0 };

	if (w->next != NULL)
		return;
	if (sandbox_prepare(&w->sbx_conf, &w->next, &e) < 0)
		log_warnx("cannot prepare a sandbox: %s", e.msg);
}

static int
send_result(struct worker *w, uint32_t job_id, const struct result *res)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if (payload_result_encode(res, &buf, &len) < 0)
		fatalx("cannot encode a result");
	rc = msg_send(w->fd, MSG_JOB_DONE, job_id, buf, len, -1);
	free(buf);
	return rc;
}

static int
run_job(struct worker *w, const struct msg *m)
{
	struct err e = { 0 };
	struct result *res;
	struct job *j = NULL;
	int rc;

	if (payload_job_decode(m->data, m->len, &j, NULL, &e) < 0)
		fatalx("dispatcher sent a job that does not decode: %s", e.msg);
	res = result_new(j->id);
	prepare_next(w);
	if (w->next == NULL) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "no sandbox could be prepared on this worker");
		res->started_at = res->finished_at = now_ms();
	} else {
		sandbox_run(w->next, j, m->data, m->len, res);
		/* Reaped after the result is out and the next sandbox started. */
		w->spent = w->next;
		w->next = NULL;
	}
	w->jobs++;
	log_debug("job %s: %s in %llu ms", j->id, res_status_name(res->status),
	    (unsigned long long)res->wall_ms);
	rc = send_result(w, m->hdr.job_id, res);
	result_free(res);
	job_free(j);
	return rc;
}

int
worker_loop(struct worker *w)
{
	struct msg m;
	int rc;

	msg_init(&m);
	prepare_next(w);
	for (;;) {
		rc = msg_recv(w->fd, &m, MSG_BLOB_MAX);
		if (rc == 0)
			break;		/* dispatcher closed the channel */
		if (rc < 0)
			fatalx("bad frame from the dispatcher: %s", strerror(-rc));
		switch (m.hdr.type) {
		case MSG_JOB_RUN:
			if (run_job(w, &m) < 0)
				fatalx("cannot send a result to the dispatcher");
			/*
			 * The result woke the dispatcher, often onto this CPU:
			 * let it publish before the next sandbox's clone, about
			 * a millisecond of kernel work, delays it.
			 */
			sched_yield();
			prepare_next(w);
			/* By now the spent sandbox's init has usually exited. */
			sandbox_free(w->spent);
			w->spent = NULL;
			break;
		case MSG_SHUTDOWN:
			goto out;
		default:
			fatalx("unexpected %s frame from the dispatcher",
			    msg_type_name(m.hdr.type));
		}
		msg_clear(&m);
	}
out:
	msg_clear(&m);
	sandbox_free(w->spent);
	sandbox_free(w->next);
	w->next = NULL;
	return 0;
}
