/*
 * cancel.c - the one script that cancels a job (cancel.h), for `sandq
 * cancel` (cli_dead.c) and for batch's Ctrl-C (cli_batch.c), run with the
 * credentials the caller connected with.
 *
 * A job no host has read yet is deleted from its stream and answered
 * `cancelled` in the same step, so no host can read it in between; a job a
 * host holds gets a cancellation key that the host polls
 * (dispatcher/cancel.c) and answers.
 */
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../proto/keys.h"
#include "../proto/result.h"
#include "cancel.h"
#include "cli_esc.h"

#define PREFIX "sandq"
#define CANCEL_TTL_MS 86400000		/* a cancellation waits this long for its host */

/*
 * KEYS: jobs, res, done, cancel; ARGV: job id, the `cancelled` result,
 * TTL ms, group, "1" to leave a held job alone. {0, "finished"} if the job
 * has a result; {1, entry} if it was waiting unread (now deleted and
 * answered); {2, consumer} if a host holds it (the cancellation key is set
 * for it, unless ARGV[5] is "1"); {0, "unknown"} if no entry carries the
 * id. The id is matched as text first, then confirmed
 * by decoding the entry (cmsgpack), so a job whose script merely mentions
 * the id is not taken for it. A stream with no consumer group yet has been
 * read by no host.
 */
static const char cancel_lua[] =
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
"return {1, found}\n";

enum cli_cancel
cli_cancel_job(redisContext *rc, const char *tenant, const char *id,
    bool queued_only, char *host, size_t hlen)
{
	char jobs[KEY_MAX], res[KEY_MAX], done[KEY_MAX], can[KEY_MAX], ttl[24];
	struct result *r = result_new(id);
	char *enc = NULL;
	size_t enclen = 0;
	enum cli_cancel outcome = CLI_CANCEL_FAILED;
	redisReply *rep;

	host[0] = '\0';
	result_set_error(r, ST_CANCELLED, "cancelled", "cancelled (sandq cancel) before "
	    "any host read it");
	r->finished_at = now_ms();
	if (payload_result_encode(r, &enc, &enclen) < 0) {
		result_free(r);
		return CLI_CANCEL_FAILED;
	}
	result_free(r);
	if (key_jobs(jobs, PREFIX, tenant) < 0 || key_res(res, PREFIX, tenant, id) < 0 ||
	    key_done(done, PREFIX, tenant, id) < 0 || key_cancel(can, PREFIX, tenant, id) < 0) {
		free(enc);
		return CLI_CANCEL_FAILED;
	}
	snprintf(ttl, sizeof(ttl), "%d", CANCEL_TTL_MS);
	rep = redisCommand(rc, "EVAL %s 4 %s %s %s %s %s %b %s %s %s", cancel_lua, jobs, res,
	    done, can, id, enc, enclen, ttl, KEY_GROUP, queued_only ? "1" : "0");
	free(enc);
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_INTEGER ||
	    rep->element[1]->type != REDIS_REPLY_STRING) {
		cli_warn("cancel %s: %s", id,
		    rep && rep->type == REDIS_REPLY_ERROR ? rep->str : rc->errstr);
	} else if (rep->element[0]->integer == 1) {
		outcome = CLI_CANCELLED;
	} else if (rep->element[0]->integer == 2) {
		outcome = queued_only ? CLI_CANCEL_HELD : CLI_CANCELLING;
		snprintf(host, hlen, "%s", rep->element[1]->str);
	} else {
		outcome = strcmp(rep->element[1]->str, "finished") == 0 ?
		    CLI_CANCEL_FINISHED : CLI_CANCEL_UNKNOWN;
	}
	freeReplyObject(rep);
	return outcome;
}
