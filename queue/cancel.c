/*
 * cancel.c - the one script that cancels a job (cancel.h): moved here from
 * cli/ so that `sandq cancel`, batch's Ctrl-C and the gateway run the same
 * text, each on its own connection with its own credentials.
 *
 * A job no host has read yet is deleted from its stream and answered
 * `cancelled` in the same step, so no host can read it in between; a job a
 * host holds gets a cancellation key that the host polls
 * (dispatcher/cancel.c) and answers.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../proto/result.h"
#include "cancel.h"

/*
 * KEYS: jobs, res, done, cancel; ARGV: job id, the `cancelled` result,
 * TTL ms, group, "1" to leave a held job alone, the tenant's results
 * channel. {0, "finished"} if the job has a result; {1, entry} if it was
 * waiting unread (now deleted, answered, and its id published on the
 * channel); {2, consumer} if a host holds it (the cancellation key is set
 * for it, unless ARGV[5] is "1"); {0, "unknown"} if no entry carries the
 * id. The id is matched as text first, then confirmed
 * by decoding the entry (cmsgpack), so a job whose script merely mentions
 * the id is not taken for it. A stream with no consumer group yet has been
 * read by no host.
 */
const char queue_cancel_lua[] =
"if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 'finished'} end\n"
"local found, start = nil, '-'\n"
"while not found do\n"
"  local batch = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 1000)\n"
"  if #batch == 0 then break end\n"
"  for _, e in ipairs(batch) do\n"
"    local f = e[2]\n"
"    for i = 1, #f, 2 do\n"
"      if f[i] == 'job' and string.find(f[i + 1], ARGV[1], 1, true) then\n"
"        local ok, job = pcall(cmsgpack.unpack, f[i + 1])\n"
"        if ok and type(job) == 'table' and job['id'] == ARGV[1] then found = e[1] end\n"
"      end\n"
"    end\n"
"    if found then break end\n"
"  end\n"
"  start = '(' .. batch[#batch][1]\n"
"end\n"
"if not found then return {0, 'unknown'} end\n"
"local pend = redis.pcall('XPENDING', KEYS[1], ARGV[4], found, found, 1)\n"
"if pend.err == nil and #pend > 0 then\n"
"  if ARGV[5] ~= '1' then redis.call('SET', KEYS[4], '1', 'PX', ARGV[3]) end\n"
"  return {2, pend[1][2]}\n"
"end\n"
"redis.call('XDEL', KEYS[1], found)\n"
"redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
"redis.call('DEL', KEYS[3])\n"
"redis.call('RPUSH', KEYS[3], ARGV[2])\n"
"redis.call('PEXPIRE', KEYS[3], ARGV[3])\n"
"redis.call('PUBLISH', ARGV[6], ARGV[1])\n"
"return {1, found}\n";

int
queue_cancel_args(struct queue_cancel_args *a, const char *prefix,
    const char *tenant, const char *id, const char *by, bool queued_only,
    struct err *e)
{
	struct result *r;

	memset(a, 0, sizeof(*a));
	if (key_jobs(a->jobs, prefix, tenant) < 0 || key_res(a->res, prefix, tenant, id) < 0 ||
	    key_done(a->done, prefix, tenant, id) < 0 ||
	    key_cancel(a->can, prefix, tenant, id) < 0 ||
	    key_results(a->chan, prefix, tenant) < 0)
		return err_set(e, -EINVAL, "cancel: a key of tenant '%.64s' is too long",
		    tenant);
	if ((r = result_new(id)) == NULL)
		return err_set(e, -ENOMEM, "cancel: no memory");
	result_set_error(r, ST_CANCELLED, "cancelled", "cancelled (%s) before any host "
	    "read it", by);
	r->finished_at = now_ms();
	if (payload_result_encode(r, &a->result, &a->result_len) < 0) {
		result_free(r);
		return err_set(e, -ENOMEM, "cancel: cannot encode the cancelled result");
	}
	result_free(r);
	snprintf(a->ttl, sizeof(a->ttl), "%d", QUEUE_CANCEL_TTL_MS);
	a->argv[0] = "EVAL";
	a->argv[1] = queue_cancel_lua;
	a->argv[2] = "4";
	a->argv[3] = a->jobs;
	a->argv[4] = a->res;
	a->argv[5] = a->done;
	a->argv[6] = a->can;
	a->argv[7] = id;
	a->argv[8] = a->result;
	a->argv[9] = a->ttl;
	a->argv[10] = KEY_GROUP;
	a->argv[11] = queued_only ? "1" : "0";
	a->argv[12] = a->chan;
	for (int i = 0; i < QUEUE_CANCEL_ARGC; i++)
		a->lens[i] = i == 8 ? a->result_len : strlen(a->argv[i]);
	return 0;
}

void
queue_cancel_args_free(struct queue_cancel_args *a)
{
	free(a->result);
	a->result = NULL;
}

enum queue_cancel
queue_cancel_outcome(const struct redisReply *rep, bool queued_only, char *host,
    size_t hlen)
{
	host[0] = '\0';
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_INTEGER ||
	    rep->element[1]->type != REDIS_REPLY_STRING)
		return QCANCEL_FAILED;
	if (rep->element[0]->integer == 1)
		return QCANCEL_CANCELLED;
	if (rep->element[0]->integer == 2) {
		snprintf(host, hlen, "%s", rep->element[1]->str);
		return queued_only ? QCANCEL_HELD : QCANCEL_CANCELLING;
	}
	return strcmp(rep->element[1]->str, "finished") == 0 ? QCANCEL_FINISHED :
	    QCANCEL_UNKNOWN;
}
