/*
 * dead.c - dead letters read as JSON and retried by one script (dead.h):
 * moved here from cli/cli_dead.c so that `sandq dead` and the gateway's
 * /v1/admin/dead routes share them. Pure but for the script's text.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>

#include "dead.h"

/* The value of field name in an entry's field/value array, or NULL. */
static const char *
field(const redisReply *fields, const char *name, size_t *len)
{
	for (size_t i = 0; i + 1 < fields->elements; i += 2)
		if (fields->element[i]->type == REDIS_REPLY_STRING &&
		    strcmp(fields->element[i]->str, name) == 0 &&
		    fields->element[i + 1]->type == REDIS_REPLY_STRING) {
			if (len)
				*len = fields->element[i + 1]->len;
			return fields->element[i + 1]->str;
		}
	return NULL;
}

bool
queue_dead_parse(const redisReply *e, struct queue_dead *d)
{
	const redisReply *f;

	memset(d, 0, sizeof(*d));
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING ||
	    e->element[1]->type != REDIS_REPLY_ARRAY)
		return false;
	f = e->element[1];
	d->dead_id = e->element[0]->str;
	d->entry = field(f, "entry", NULL);
	d->id = field(f, "id", NULL);
	d->reason = field(f, "reason", NULL);
	d->attempts = field(f, "attempts", NULL);
	d->has_payload = field(f, "payload", &d->payload_len) != NULL;
	d->truncated = field(f, "payload_truncated", NULL) != NULL &&
	    strcmp(field(f, "payload_truncated", NULL), "1") == 0;
	return true;
}

bool
queue_dead_retryable(const struct queue_dead *d)
{
	return d->id != NULL && d->has_payload && d->payload_len > 0 && !d->truncated;
}

json_t *
queue_dead_json(const struct queue_dead *d)
{
	json_t *o = json_object(), *att = NULL;
	unsigned long long ms = 0;

	sscanf(d->dead_id, "%llu-", &ms);
	if (d->attempts != NULL)
		att = json_loads(d->attempts, 0, NULL);
	json_object_set_new(o, "dead_id", json_string(d->dead_id));
	json_object_set_new(o, "at", json_integer((json_int_t)ms));
	json_object_set_new(o, "entry", d->entry ? json_string(d->entry) : json_null());
	json_object_set_new(o, "id", d->id ? json_string(d->id) : json_null());
	json_object_set_new(o, "reason", d->reason ? json_string(d->reason) : json_null());
	json_object_set_new(o, "attempts", att ? att : json_array());
	json_object_set_new(o, "payload_bytes", json_integer((json_int_t)d->payload_len));
	json_object_set_new(o, "payload_truncated", json_boolean(d->truncated));
	json_object_set_new(o, "retryable", json_boolean(queue_dead_retryable(d)));
	return o;
}

/*
 * The retry (dead.h). The payload is taken from the entry inside the
 * script, so a retry of a letter another operator retried meanwhile finds
 * it gone.
 */
const char queue_dead_retry_lua[] =
"local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])\n"
"if #e == 0 then return {0, 'gone'} end\n"
"local f, payload, cut = e[1][2], nil, '0'\n"
"for i = 1, #f, 2 do\n"
"  if f[i] == 'payload' then payload = f[i + 1] end\n"
"  if f[i] == 'payload_truncated' then cut = f[i + 1] end\n"
"end\n"
"if payload == nil or payload == '' or cut == '1' then return {0, 'no job to retry'} end\n"
"redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n"
"local id = redis.call('XADD', KEYS[2], '*', 'job', payload)\n"
"redis.call('XDEL', KEYS[1], ARGV[1])\n"
"return {1, id}\n";

