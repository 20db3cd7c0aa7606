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

/*
 * r as the JSON object --json prints (the fields listed in the manual's
 * --json). The caller owns it. sandq batch writes the same objects. r is
 * seen as the wire's struct result (its members borrowed, nothing copied)
 * so that proto/mpjson.c's mpjson_result() is the one writer of a result's
 * JSON, here and in the gateway.
 */
json_t *
cli_result_json(const struct sandq_result *r)
{
	struct result w = { 0 };
	struct refusal *refused = NULL;
	json_t *o;

	w.id = r->id;
	if (r->status == NULL || res_status_parse(r->status, &w.status) < 0)
		w.status = ST_INTERNAL;	/* libsandq decoded it: cannot happen */
	w.exit_code = r->exit_code;
	w.signal = r->signal;
	w.out = r->stdout_data;
	w.out_len = r->stdout_len;
	w.out_truncated = r->stdout_truncated;
	w.err = r->stderr_data;
	w.err_len = r->stderr_len;
	w.err_truncated = r->stderr_truncated;
	w.wall_ms = r->wall_ms;
	w.cpu_ms = r->cpu_ms;
	w.max_rss_kb = r->max_rss_kb;
	w.queued_at = r->queued_at;
	w.started_at = r->started_at;
	w.finished_at = r->finished_at;
	w.host = r->host;
	w.worker = r->worker;
	w.attempt = r->attempt;
	w.error_code = r->error_code;
	w.error_message = r->error_message;
	if (r->nrefused > 0) {
		refused = xcalloc(r->nrefused, sizeof(*refused));
		for (size_t i = 0; i < r->nrefused; i++) {
			refused[i].name = r->refused[i].syscall;
			refused[i].count = r->refused[i].count;
		}
	}
	w.refused = refused;
	w.nrefused = r->nrefused;
	w.sandbox = r->sandbox;
	w.version = r->version;
	w.snapshot = r->snapshot;
	w.changed = r->changed;
	w.nchanged = r->nchanged;
	w.changed_truncated = r->changed_truncated;
	w.added = r->added;
	w.modified = r->modified;
	w.removed = r->removed;
	w.refused_paths = r->refused_paths;
	w.nrefused_paths = r->nrefused_paths;
	w.image = r->image;
	w.image_digest = r->image_digest;
	w.image_name = r->image_name;
	o = mpjson_result(&w);
	free(refused);
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
