/*
 * uvredis.c - hiredis's async context on a libuv loop (see uvredis.h).
 *
 * One uv_poll_t per context, watching what hiredis asks for (readable,
 * writable or both). Cleanup comes from hiredis when the context is freed;
 * the handles are closed then and the context's state freed by libuv's
 * close callback of the last one.
 *
 * Writes do not wait for the socket to poll writable: hiredis asks to
 * write after each command it queues, and a connected socket with room in
 * its buffer is writable at once, so an idle handle writes at the loop's
 * next turn instead (an active idle handle also keeps that turn's poll
 * from blocking). Only a write the socket could not take whole, or a
 * connect in progress, polls for writable. With libuv, every change of a
 * poll's events is an epoll_ctl DEL and ADD: two changes for every
 * command, 17 epoll_ctl calls for a `/bin/true` job (docs/decisions.md,
 * "Throughput, third round"). Readable, once asked for, stays polled.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "uvredis.h"

struct uvredis {
	redisAsyncContext *ac;		/* NULL once hiredis has let go */
	uv_poll_t poll;
	uv_idle_t flush;		/* writes what hiredis queued, next turn */
	int events;			/* UV_READABLE | UV_WRITABLE wanted */
	int polled;			/* the events poll watches now */
	bool in_flush;			/* inside hiredis's write, from flush */
	int open;			/* handles not closed yet */
};

static void
on_poll(uv_poll_t *h, int status, int events)
{
	struct uvredis *p = h->data;

	/*
	 * An error (a refused connect, a reset): let hiredis try what it was
	 * waiting for, so it reads the socket's error and calls back.
	 */
	if (status < 0)
		events = p->events;
	if (p->ac != NULL && (events & UV_READABLE))
		redisAsyncHandleRead(p->ac);
	if (p->ac != NULL && (events & UV_WRITABLE))
		redisAsyncHandleWrite(p->ac);
}

/* Gives the poll the events wanted, if they changed. */
static void
update(struct uvredis *p)
{
	if (p->events == p->polled)
		return;
	if (p->events != 0)
		uv_poll_start(&p->poll, p->events, on_poll);
	else
		uv_poll_stop(&p->poll);
	p->polled = p->events;
}

/* The idle turn after a command: hiredis writes what it queued. */
static void
on_flush(uv_idle_t *h)
{
	struct uvredis *p = h->data;

	uv_idle_stop(h);
	if (p->ac == NULL)
		return;
	/* A write that stops short asks again (add_write): it polls then. */
	p->in_flush = true;
	redisAsyncHandleWrite(p->ac);
	p->in_flush = false;
}

static void
add_read(void *arg)
{
	struct uvredis *p = arg;

	p->events |= UV_READABLE;
	update(p);
}

static void
del_read(void *arg)
{
	struct uvredis *p = arg;

	p->events &= ~UV_READABLE;
	update(p);
}

static void
add_write(void *arg)
{
	struct uvredis *p = arg;

	if ((p->ac->c.flags & REDIS_CONNECTED) && !p->in_flush &&
	    !(p->events & UV_WRITABLE)) {
		uv_idle_start(&p->flush, on_flush);
		return;
	}
	p->events |= UV_WRITABLE;
	update(p);
}

static void
del_write(void *arg)
{
	struct uvredis *p = arg;

	uv_idle_stop(&p->flush);
	p->events &= ~UV_WRITABLE;
	update(p);
}

static void
closed(uv_handle_t *h)
{
	struct uvredis *p = h->data;

	if (--p->open == 0)
		free(p);
}

static void
cleanup(void *arg)
{
	struct uvredis *p = arg;

	p->ac = NULL;
	uv_close((uv_handle_t *)&p->poll, closed);
	uv_close((uv_handle_t *)&p->flush, closed);
}

int
uvredis_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
	struct uvredis *p;

	if (ac->ev.data != NULL || (p = calloc(1, sizeof(*p))) == NULL)
		return REDIS_ERR;
	if (uv_poll_init(loop, &p->poll, ac->c.fd) != 0) {
		free(p);
		return REDIS_ERR;
	}
	uv_idle_init(loop, &p->flush);
	p->open = 2;
	p->ac = ac;
	p->poll.data = p;
	p->flush.data = p;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}
