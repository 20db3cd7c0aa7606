/*
 * uvredis.h - hiredis's async context on a libuv loop.
 *
 * hiredis ships an adapter for libuv (hiredis/adapters/libuv.h), but the
 * one in Debian 12's hiredis 0.14 drops a poll that ends in an error: a
 * connect refused while Redis restarts, or a reset on a connection Redis
 * dropped, is then never seen, and the connection neither completes nor
 * fails: sandqd would wait for it for ever. (hiredis fixed its adapter
 * later, upstream pull request 624.) This one hands an error to hiredis as
 * the events it was waiting for, so its read or write sees the socket's
 * error and the connect or disconnect callback runs.
 */
#ifndef SANDQ_QUEUE_UVREDIS_H
#define SANDQ_QUEUE_UVREDIS_H

#include <hiredis/async.h>
#include <uv.h>

/* Attaches ac to loop: REDIS_OK, or REDIS_ERR (already attached, no memory). */
int uvredis_attach(redisAsyncContext *ac, uv_loop_t *loop);

#endif
