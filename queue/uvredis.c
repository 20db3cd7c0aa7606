/*
 * uvredis.c - hiredis's async context on a libuv loop (see uvredis.h).
 *
 * One uv_poll_t per context, watching what hiredis asks for (readable,
 * writable or both). Cleanup comes from hiredis when the context is freed;
 * the poll handle is closed then and freed by libuv's close callback.
 */
#include <stdlib.h>

#include "uvredis.h"

struct uvredis {
	redisAsyncContext *ac;		/* NULL once hiredis has let go */
	uv_poll_t poll;
	int events;			/* UV_READABLE | UV_WRITABLE wanted */
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

static void
update(struct uvredis *p)
{
	if (p->events != 0)
		uv_poll_start(&p->poll, p->events, on_poll);
	else
		uv_poll_stop(&p->poll);
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

	p->events |= UV_WRITABLE;
	update(p);
}

static void
del_write(void *arg)
{
	struct uvredis *p = arg;

	p->events &= ~UV_WRITABLE;
	update(p);
}

static void
closed(uv_handle_t *h)
{
	free(h->data);
}

static void
cleanup(void *arg)
{
	struct uvredis *p = arg;

	p->ac = NULL;
	uv_close((uv_handle_t *)&p->poll, closed);
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
	p->ac = ac;
	p->poll.data = p;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}
