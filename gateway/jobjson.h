/*
 * jobjson.h - the gateway's JSON <-> sandq's wire model (pure: no I/O).
 *
 * A job arrives as one JSON object whose keys are docs/protocol.md's field
 * names; jobjson_job() turns it into a struct job (proto/job.h), which the
 * gateway then encodes with payload_job_encode() exactly as libsandq does.
 * Every refusal carries an HTTP status and a stable code (docs/gateway.md
 * "Errors"), so the caller answers it as it is and enqueues nothing.
 * jobjson_result() is the other way: a decoded result as the JSON the CLI
 * prints with --json, and an op's answer as "data" (bytes: "data_b64").
 */
#ifndef SANDQ_GATEWAY_JOBJSON_H
#define SANDQ_GATEWAY_JOBJSON_H

#include <jansson.h>
#include <stddef.h>

#include "../proto/job.h"
#include "../proto/result.h"

/* A refusal: the HTTP status, the stable code, and the message (escaped). */
struct gw_fail {
	int status;
	const char *code;	/* static text: "bad_json", "unknown_field", ... */
	char msg[256];
};

/*
 * Reads body (len bytes, untrusted, already bounded by --max-body) as a
 * job: the runs, the fs.*, kv.* and sandbox.* ops and image.pull.
 * id may be absent: then a
 * random "gw-" id is made. The job is encoded and decoded once more, so
 * that whatever sandqd's intake would refuse as malformed is refused here
 * (400 invalid_job) instead of being enqueued. Returns 0 and *out (the
 * caller frees it with job_free), or -EINVAL with f filled.
 */
int jobjson_job(const char *body, size_t len, struct job **out, struct gw_fail *f);
/* The same from a parsed JSON value (not taken). */
int jobjson_job_json(json_t *root, struct job **out, struct gw_fail *f);
/* r as the CLI's --json object (cli/cli_common.c cli_result_json); owned. */
json_t *jobjson_result(const struct result *r);
/* {"error":{"code":CODE,"message":MSG}}, owned. */
json_t *jobjson_error(const char *code, const char *msg);

#endif
