/*
 * log_json.c - log_format = json: one JSON object a line, for log shippers
 * (Vector, Fluent Bit, Promtail) that read a file or the journal.
 *
 *   {"time":"2026-11-26T03:27:36.123Z","level":"warn","process":"sandqd",
 *    "message":"..."}
 *
 * A file of its own so that only the binaries that offer the format link
 * jansson (log.c is in every binary and in libsandq). The object is built
 * and dumped with jansson, never by hand. Messages arrive already escaped
 * where a tenant influenced them (log.h's callers); a message that is still
 * not UTF-8 has its other bytes written as \xNN, so no line is dropped.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* The message as a JSON string: as it is when UTF-8, else bytes escaped. */
static json_t *
message_string(const char *msg)
{
	char buf[4 * 1024 + 1];
	size_t o = 0;
	json_t *s = json_string(msg);

	if (s != NULL)
		return s;
	for (const unsigned char *p = (const unsigned char *)msg;
	    *p != '\0' && o + 5 < sizeof(buf); p++) {
		if (*p < 0x80 && *p != '\\')
			buf[o++] = (char)*p;
		else
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", *p);
	}
	buf[o] = '\0';
	return json_string(buf);
}

/*
 * log_json_cb: the line into buf. A message whose escapes would overflow
 * the line (control bytes become \u00XX, six times their size) is cut
 * before dumping, as text lines are cut.
 */
static int
json_line(char *buf, size_t size, const char *time, const char *level,
    const char *process, const char *message)
{
	char cut[1024];
	size_t keep = strlen(message);

	for (int tries = 0; tries < 2; tries++) {
		json_t *o;
		size_t n;

		o = json_pack("{s:s, s:s, s:s, s:o}", "time", time, "level", level,
		    "process", process, "message", message_string(message));
		if (o == NULL)
			return -1;
		n = json_dumpb(o, buf, size, JSON_COMPACT);
		json_decref(o);
		if (n > 0 && n < size)
			return (int)n;
		/*
		 * Too long: a sixth of what the other members leave, which
		 * holds whatever the bytes are.
		 */
		if (size < 512)
			return -1;
		keep = keep < (size - 256) / 6 ? keep : (size - 256) / 6;
		keep = keep < sizeof(cut) - 1 ? keep : sizeof(cut) - 1;
		memcpy(cut, message, keep);
		cut[keep] = '\0';
		message = cut;
	}
	return -1;
}

int
log_setformat(const char *name)
{
	if (strcmp(name, "text") == 0)
		log__setjson(NULL);
	else if (strcmp(name, "json") == 0)
		log__setjson(json_line);
	else
		return -EINVAL;
	return 0;
}
