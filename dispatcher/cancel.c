/*
 * cancel.c - `sandq cancel ID` reaching the host that holds the job.
 *
 * The CLI's script (cli/cancel.c) answers a job no host has read yet
 * by itself, atomically with deleting its entry. A job some host has read
 * gets a key, PREFIX:{T}:cancel:ID, instead. Every CANCEL_POLL_MS each
 * host asks, in one MGET, which of the jobs it holds (queued here or
 * running) have one: a queued job is answered `cancelled` at once; a
 * running one has its worker killed, and the reaper answers it
 * `cancelled` (not retried) and starts a fresh worker at once. The result
 * deletes the key. A job whose result is on its way is past cancelling.
 *
 * Polling rather than a subscription: nothing is missed across a Redis
 * reconnect, and the cost is one MGET a second while jobs are held.
 */
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "dispatcher.h"

#define CANCEL_POLL_MS 1000

static void
on_cancel(void *arg, size_t tenant, const char *id)
{
	struct sandqd *d = arg;
	struct tenant *t;
	struct djob *j;

	if (tenant >= d->ntenants)
		return;
	t = &d->tenants[tenant];
	TAILQ_FOREACH(j, &t->queue, link)
		if (strcmp(j->id, id) == 0) {
			/* Its sandbox is being pulled: the next poll finds it ready. */
			if (j->sync == SYNC_PULLING)
				return;
			runq_remove(t, j);
			log_info("job %s (%s): cancelled before it started", id, t->name);
			jobs_cancelled(d, j, "before it started");
			sched_dispatch(d);
			return;
		}
	for (size_t i = 0; i < d->nslots; i++) {
		struct wslot *w = &d->slots[i];

		j = w->run.job;
		if (j != NULL && j->tenant == tenant && strcmp(j->id, id) == 0 &&
		    !j->cancelled) {
			log_info("job %s (%s): cancelled while running on worker %d", id,
			    t->name, w->index);
			pool_cancel(d, w);
			return;
		}
	}
}

static void
poll_cb(uv_timer_t *timer)
{
	struct sandqd *d = timer->data;
	const char **ids = NULL;
	size_t *tenants = NULL, n = 0, cap = 0;

	for (size_t t = 0; t < d->ntenants; t++) {
		const struct djob *j;

		TAILQ_FOREACH(j, &d->tenants[t].queue, link) {
			if (n == cap) {
				cap = cap ? 2 * cap : 32;
				ids = xreallocarray(ids, cap, sizeof(*ids));
				tenants = xreallocarray(tenants, cap, sizeof(*tenants));
			}
			tenants[n] = t;
			ids[n++] = j->id;
		}
	}
	for (size_t i = 0; i < d->nslots; i++) {
		const struct djob *j = d->slots[i].run.job;

		if (j == NULL || j->cancelled)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			ids = xreallocarray(ids, cap, sizeof(*ids));
			tenants = xreallocarray(tenants, cap, sizeof(*tenants));
		}
		tenants[n] = j->tenant;
		ids[n++] = j->id;
	}
	if (n > 0)
		(void)rq_cancels(d->rq, tenants, ids, n, on_cancel, d);
	free(ids);
	free(tenants);
}

void
cancel_start(struct sandqd *d)
{
	uv_timer_init(d->loop, &d->cancel_poll);
	d->cancel_poll.data = d;
	uv_timer_start(&d->cancel_poll, poll_cb, CANCEL_POLL_MS, CANCEL_POLL_MS);
}

void
cancel_stop(struct sandqd *d)
{
	uv_timer_stop(&d->cancel_poll);
	uv_close((uv_handle_t *)&d->cancel_poll, NULL);
}
