/*
 * gwharness.h - a sandq-gateway for the integration tests (gwharness.c),
 * beside the redis-server and sandqd of harness.h.
 */
#ifndef SANDQ_TEST_GWHARNESS_H
#define SANDQ_TEST_GWHARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "../queue/token.h"
#include "harness.h"

/* "http://127.0.0.1:PORT" of the gateway gwh_start() started last. */
extern char gwh_base[64];

/* A request to the gateway (a POST-style body when body is set, JSON); the
 * answer's body (owned), *status its HTTP status. */
char *gwh_http(const char *method, const char *path, const char *token, const char *body,
    long *status);
/* The same with n raw bytes of body (NULL: none); *outlen the answer's size. */
char *gwh_http_raw(const char *method, const char *path, const char *token,
    const void *body, size_t n, long *status, size_t *outlen);
/* The answer's error code ("" when it has none; owned). */
char *gwh_error_code(const char *text);
/* Starts sandq-gateway against redis_url (extra: more arguments, or NULL)
 * on a free port, logging to h's folder; returns once /healthz answers. */
pid_t gwh_start(const struct harness *h, const char *redis_url, const char *const *extra);
/* Starts sandq-gateway with only `--config conf` (which must make it listen
 * on 127.0.0.1:port); returns once /healthz answers there. */
pid_t gwh_start_conf(const struct harness *h, const char *conf, int port);
/* SIGTERM and reap; pid <= 0 is a no-op. */
void gwh_stop(pid_t pid);
/* A new token of tenant (an admin one when tenant is ""), its record in h's Redis. */
void gwh_token_make(const struct harness *h, const char *tenant, char tok[TOKEN_LEN + 1]);
/* The length of tenant's job stream in h's Redis. */
long long gwh_xlen(const struct harness *h, const char *tenant);

#endif
