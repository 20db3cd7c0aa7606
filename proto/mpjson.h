/*
 * mpjson.h - one msgpack object as JSON (jansson), for what prints results.
 *
 * The CLI's --json (cli/cli_common.c) and the gateway (gateway/jobjson.c)
 * render a result and its "data" with these functions, so `sandq --json`
 * and GET /v1/jobs/ID say the same thing. Not in PROTO_SRCS:
 * linked only by the programs that have jansson (the CLI, the gateway).
 */
#ifndef SANDQ_PROTO_MPJSON_H
#define SANDQ_PROTO_MPJSON_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"

/* p (n bytes) as standard base64 with padding; malloc'd, NUL-terminated. */
char *mpjson_base64(const uint8_t *p, size_t n);
/*
 * o as JSON (owned): bin and ext as base64 strings, a str that is not
 * UTF-8 as base64 too, map keys that are not strings as their JSON text,
 * integers past INT64_MAX as reals. Depth is the decoder's bound.
 */
json_t *mpjson_value(const msgpack_object *o);

/*
 * r as one JSON object: the fields the CLI's --json prints and GET
 * /v1/jobs/ID answers (docs/protocol.md "Result"), without "data", which
 * each caller renders by its own rule. Output that is not UTF-8 becomes
 * "stdout_b64"/"stderr_b64". The one writer of a result's JSON. Owned.
 */
json_t *mpjson_result(const struct result *r);

#endif
