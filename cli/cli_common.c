/*
 * cli_common.c - the helpers every file of the sandq command shares
 * (cli_common.h): connection defaults, the failure printers, durations,
 * reading local input, base64, the JSON of a result and of its data, and
 * the --perm options. A leaf: it calls no verb and prints no manual, so
 * any verb file may use it and the dispatcher (cli.c) sits above them all.
 *
 * Sections: connection, failures, durations and input, JSON, path rules.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/err.h"
#include "../common/xmalloc.h"
#include "../proto/mpjson.h"
#include "../workspace/perms.h"
#include "cli_common.h"

#define SECONDS_MAX 1000000000ull	/* bound of any SECONDS option */

/*** Connection ***/

const char *
cli_redis_or_default(const char *given)
{
	if (given == NULL && (given = getenv("SANDQ_REDIS")) == NULL)
		given = CLI_DEFAULT_REDIS;
	return given;
}

const char *
cli_tenant_or_default(const char *given)
{
	if (given == NULL && (given = getenv("SANDQ_TENANT")) == NULL)
		given = CLI_DEFAULT_TENANT;
	return given;
}

/*** Failures ***/

int
cli_vfail(int status, const char *prefix, const char *hint, const char *fmt,
    va_list ap)
{
	cli_vwarn(prefix, fmt, ap);
	if (hint != NULL)
		fprintf(stderr, "Try '%s'.\n", hint);
	return status;
}

int
cli_fail(const char *fmt, ...)
{
	va_list ap;
	int status;

	va_start(ap, fmt);
	status = cli_vfail(CLI_EXIT_SANDQ, "sandq: ", NULL, fmt, ap);
	va_end(ap);
	return status;
}

/*** Durations and input ***/

/*
 * Parses "2", "0.5" or ".25" seconds into milliseconds; digits past the
 * third decimal round up, so a limit is never shortened. 0 or -EINVAL.
 */
int
cli_parse_seconds(const char *s, uint64_t *ms)
{
	uint64_t whole = 0, frac = 0;
	int digits = 0;
	bool more = false;
	const char *p = s;

	if (!isdigit((unsigned char)p[0]) &&
	    !(p[0] == '.' && isdigit((unsigned char)p[1])))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		whole = whole * 10 + (uint64_t)(*p - '0');
		if (whole > SECONDS_MAX)
			return -EINVAL;
	}
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++) {
			if (digits < 3) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				digits++;
			} else if (*p != '0') {
				more = true;
			}
		}
	}
	if (*p != '\0')
		return -EINVAL;
	for (; digits < 3; digits++)
		frac *= 10;
	*ms = whole * 1000 + frac + (more ? 1 : 0);
	return 0;
}

/*
 * Reads fd to its end into *out (NUL-terminated, owned by the caller).
 * Returns 0, -EFBIG past max bytes, or -errno.
 */
static int
read_fd(int fd, size_t max, uint8_t **out, size_t *outlen)
{
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;

	*out = NULL;
	*outlen = 0;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			if (len > max) {
				free(buf);
				return -EFBIG;
			}
			cap = cap ? cap * 2 : 64 * 1024;
			if (cap > max + 1)
				cap = max + 1;
			buf = xreallocarray(buf, cap + 1, 1);
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			int rc = -errno;

			if (errno == EINTR)
				continue;
			free(buf);
			return rc;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		free(buf);
		return -EFBIG;
	}
	if (buf == NULL)
		buf = xmalloc(1);
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/* Reads a local file (or our stdin for "-" when dash_is_stdin). */
int
cli_read_input(const char *path, bool dash_is_stdin, size_t max, uint8_t **out,
    size_t *outlen)
{
	int fd, rc;

	if (dash_is_stdin && strcmp(path, "-") == 0)
		return read_fd(STDIN_FILENO, max, out, outlen);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	rc = read_fd(fd, max, out, outlen);
	close(fd);
	return rc;
}

/*** JSON ***/

/* Base64 of n bytes (EVP_EncodeBlock), NUL-terminated, owned by the caller. */
char *
cli_base64(const uint8_t *p, size_t n)
{
	return mpjson_base64(p, n);
}

/* Sets name to the bytes as a string if they are UTF-8, else name_b64. */
static void
json_set_bytes(json_t *obj, const char *name, const uint8_t *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	char key[32];

	if (s != NULL) {
		json_object_set_new(obj, name, s);
		return;
	}
	snprintf(key, sizeof(key), "%s_b64", name);
	{
		char *b64 = cli_base64(p, n);
		json_object_set_new(obj, key, json_string(b64));
		free(b64);
	}
}

static json_t *
json_str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/*
 * r as the JSON object --json prints (the fields listed in the manual's
 * --json). The caller owns it. sandq batch writes the same objects.
 */
json_t *
cli_result_json(const struct sandq_result *r)
{
	json_t *o = json_object();

	json_object_set_new(o, "id", json_str_or_null(r->id));
	json_object_set_new(o, "status", json_str_or_null(r->status));
	json_object_set_new(o, "exit_code", json_integer(r->exit_code));
	json_object_set_new(o, "signal", json_integer(r->signal));
	json_set_bytes(o, "stdout", r->stdout_data, r->stdout_len);
	json_object_set_new(o, "stdout_len", json_integer((json_int_t)r->stdout_len));
	json_object_set_new(o, "stdout_truncated", json_boolean(r->stdout_truncated));
	json_set_bytes(o, "stderr", r->stderr_data, r->stderr_len);
	json_object_set_new(o, "stderr_len", json_integer((json_int_t)r->stderr_len));
	json_object_set_new(o, "stderr_truncated", json_boolean(r->stderr_truncated));
	json_object_set_new(o, "wall_ms", json_integer((json_int_t)r->wall_ms));
	json_object_set_new(o, "cpu_ms", json_integer((json_int_t)r->cpu_ms));
	json_object_set_new(o, "max_rss_kb", json_integer((json_int_t)r->max_rss_kb));
	json_object_set_new(o, "queued_at", json_integer((json_int_t)r->queued_at));
	json_object_set_new(o, "started_at", json_integer((json_int_t)r->started_at));
	json_object_set_new(o, "finished_at", json_integer((json_int_t)r->finished_at));
	json_object_set_new(o, "host", json_str_or_null(r->host));
	json_object_set_new(o, "worker", json_integer(r->worker));
	json_object_set_new(o, "attempt", json_integer(r->attempt));
	if (r->error_code || r->error_message)
		json_object_set_new(o, "error", json_pack("{s:s, s:s}",
		    "code", r->error_code ? r->error_code : "",
		    "message", r->error_message ? r->error_message : ""));
	else
		json_object_set_new(o, "error", json_null());
	{
		json_t *refused = json_object();

		for (size_t i = 0; i < r->nrefused; i++)
			json_object_set_new(refused, r->refused[i].syscall,
			    json_integer((json_int_t)r->refused[i].count));
		json_object_set_new(o, "refused", refused);
	}
	if (r->image) {
		json_object_set_new(o, "image", json_string(r->image));
		json_object_set_new(o, "image_digest", json_str_or_null(r->image_digest));
		json_object_set_new(o, "image_name", json_str_or_null(r->image_name));
	}
	if (r->sandbox) {
		json_t *ch = json_array(), *rp = json_array();

		json_object_set_new(o, "sandbox", json_string(r->sandbox));
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
		json_object_set_new(o, "snapshot", json_str_or_null(r->snapshot));
		for (size_t i = 0; i < r->nchanged; i++)
			json_array_append_new(ch, json_str_or_null(r->changed[i]));
		json_object_set_new(o, "changed", ch);
		json_object_set_new(o, "changed_truncated",
		    json_boolean(r->changed_truncated));
		json_object_set_new(o, "changes", json_pack("{s:I, s:I, s:I}",
		    "added", (json_int_t)r->added, "modified", (json_int_t)r->modified,
		    "removed", (json_int_t)r->removed));
		for (size_t i = 0; i < r->nrefused_paths; i++)
			json_array_append_new(rp, json_str_or_null(r->refused_paths[i]));
		json_object_set_new(o, "refused_paths", rp);
	}
	return o;
}

/* The result's data as JSON, or NULL when it has none (or it is garbage). */
json_t *
cli_result_data_json(const struct sandq_result *r)
{
	msgpack_unpacked u;
	size_t off = 0;
	json_t *j = NULL;

	if (r->data == NULL || r->data_len == 0)
		return NULL;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, &off) ==
	    MSGPACK_UNPACK_SUCCESS)
		j = mpjson_value(&u.data);
	msgpack_unpacked_destroy(&u);
	return j;
}

/* Prints j as one compact line and drops the reference. 0 or CLI_EXIT_SANDQ. */
int
cli_print_json_line(json_t *j)
{
	int rc = 0;

	if (json_dumpf(j, stdout, JSON_COMPACT | JSON_ENCODE_ANY) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF)
		rc = cli_fail("writing the output: %s", strerror(errno));
	json_decref(j);
	return rc;
}

/* A string member or def. */
const char *
cli_jstr(const json_t *o, const char *k, const char *def)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : def;
}

/* An integer member or 0. */
json_int_t
cli_jint(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	if (json_is_real(v))
		return (json_int_t)json_real_value(v);
	return json_integer_value(v);
}

const char *
cli_jesc(const json_t *o, const char *k, const char *def)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_string(v))
		return cli_esc(def);
	return cli_escn(json_string_value(v), json_string_length(v));
}

const char *
cli_jesc_cut(const json_t *o, const char *k, size_t width)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_string(v))
		return "";
	return cli_escn_cut(json_string_value(v), json_string_length(v), width);
}

/*
 * Formats epoch milliseconds as "2024-05-01T12:00:00Z" (UTC, seconds);
 * "-" for 0 or a value past what gmtime can take.
 */
const char *
cli_fmt_time_ms(char *buf, size_t size, json_int_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || gmtime_r(&t, &tm) == NULL ||
	    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, size, "-");
	return buf;
}

/*** Path rules ***/

int
cli_perm_add(struct sandq_perm **perms, size_t *n, const char *arg, char *msg,
    size_t msglen)
{
	char pat[PERMS_PATTERN_MAX + 1];
	enum perm_level lvl;
	struct err e = { 0 };

	if (perms_parse_rule(arg, pat, sizeof(pat), &lvl, &e) < 0) {
		snprintf(msg, msglen, "--perm '%.200s': %s", arg, e.msg);
		return -1;
	}
	if (*n >= PERMS_RULES_MAX) {
		snprintf(msg, msglen, "--perm: more than %d rules", PERMS_RULES_MAX);
		return -1;
	}
	*perms = xreallocarray(*perms, *n + 1, sizeof(**perms));
	(*perms)[*n].pattern = xstrdup(pat);
	(*perms)[(*n)++].level = perms_level_str(lvl);
	return 0;
}

const char *
cli_perm_preset(const char *arg)
{
	const char *const *names = perms_preset_names();

	for (size_t i = 0; names[i]; i++)
		if (strcmp(arg, names[i]) == 0)
			return names[i];
	return NULL;
}
