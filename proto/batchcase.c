/*
 * batchcase.c - a line of a batch's CASES file as the job to submit, and
 * what the line expects of the job's standard output. Pure: text in, a
 * JSON job or a verdict out. Shared by `sandq batch` (cli/cli_batch.c does
 * the I/O) and the gateway's /v1/batches (gateway/batch.c), so that a case
 * passes or fails the same way whichever ran it.
 *
 * A line is the job itself, as JSON: it is converted to msgpack as it is,
 * without the batch's own fields (expect, expect_mode), and sandqd checks
 * it like any other client's job. Expect modes, as `sandq help batch` says:
 * exact compares bytes; trim ignores the blanks ending each line and the
 * empty lines ending the text, on both sides; regex matches standard
 * output without its final newlines as a whole against EXPECT, a PCRE2
 * (Perl) regex where . matches a newline too (proto/rx.h: the options and
 * the bounds on the work of one match).
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "batchcase.h"
#include "rx.h"

bool
batchcase_id_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > BATCH_ID_MAX)
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._-") == n;
}

static bool
is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/*
 * p without the blanks that end each of its lines nor the empty lines
 * that end it: what trim compares. NUL-terminated, owned by the caller.
 */
static char *
trim_text(const char *p, size_t n, size_t *outlen)
{
	char *out = xmalloc(n + 1);
	size_t o = 0, i = 0;

	while (i < n) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t end = nl ? (size_t)(nl - p) : n, e = end;

		while (e > i && is_blank(p[e - 1]))
			e--;
		memcpy(out + o, p + i, e - i);
		o += e - i;
		if (nl)
			out[o++] = '\n';
		i = end + 1;
	}
	while (o > 0 && (out[o - 1] == '\n' || is_blank(out[o - 1])))
		o--;
	out[o] = '\0';
	*outlen = o;
	return out;
}

/*
 * Compiles n bytes of pat as a whole-output regex (rx.h). PCRE2 anchors
 * it by options, so an unbalanced pattern such as "a)|(b" is refused
 * rather than wrapped into another meaning.
 */
static int
regex_compile(struct batch_expect *ex, const char *pat, size_t n, char *why,
    size_t whylen)
{
	char msg[320];

	if (rx_compile(pat, n, &ex->re, msg, sizeof(msg)) != 0) {
		snprintf(why, whylen, "field 'expect': not a valid regex (PCRE2): %s",
		    msg);
		return -1;
	}
	ex->mode = EXPECT_REGEX;
	return 0;
}

int
batchcase_expect_set(struct batch_expect *ex, const char *mode, const char *s, size_t n,
    char *why, size_t whylen)
{
	memset(ex, 0, sizeof(*ex));
	if (mode == NULL || strcmp(mode, "exact") == 0) {
		ex->mode = EXPECT_EXACT;
		ex->text = xmemdup0(s, n);
		ex->len = n;
	} else if (strcmp(mode, "trim") == 0) {
		ex->mode = EXPECT_TRIM;
		ex->text = trim_text(s, n, &ex->len);
	} else if (strcmp(mode, "regex") == 0) {
		if (memchr(s, '\0', n) != NULL) {
			snprintf(why, whylen, "field 'expect': a regex cannot hold a "
			    "NUL character");
			return -1;
		}
		if (regex_compile(ex, s, n, why, whylen) < 0)
			return -1;
	} else {
		snprintf(why, whylen, "field 'expect_mode': expected exact, trim or "
		    "regex, not '%.32s'", mode);
		return -1;
	}
	return 0;
}

void
batchcase_expect_free(struct batch_expect *ex)
{
	rx_free(ex->re);
	free(ex->text);
	memset(ex, 0, sizeof(*ex));
}

int
batchcase_expect_check(const struct batch_expect *ex, const uint8_t *out,
    size_t len)
{
	char *t;
	size_t tl;
	bool ok;

	switch (ex->mode) {
	case EXPECT_EXACT:
		return len == ex->len && memcmp(out, ex->text, len) == 0;
	case EXPECT_TRIM:
		t = trim_text((const char *)out, len, &tl);
		ok = tl == ex->len && memcmp(t, ex->text, tl) == 0;
		free(t);
		return ok;
	case EXPECT_REGEX:
		while (len > 0 && out[len - 1] == '\n')
			len--;
		/* The bytes given, NULs included. */
		switch (rx_match(ex->re, out, len)) {
		case RX_MATCH:
			return 1;
		case RX_LIMIT:
			return -1;
		default:
			return 0;
		}
	default:
		return 1;
	}
}

bool
batchcase_expect_match(const struct batch_expect *ex, const uint8_t *out, size_t len)
{
	return batchcase_expect_check(ex, out, len) == 1;
}

/*
 * The line's own fields are left to sandqd, which refuses a bad one by
 * name; only what the batch owns is checked here: id, sandbox under
 * --base, expect and expect_mode.
 */
int
batchcase_parse(const char *text, size_t len, const char *id,
    const char *fork, json_t **job, struct batch_expect *ex, char *why,
    size_t whylen)
{
	const char *mode = "exact";
	json_error_t je;
	json_t *o, *e, *m;

	*job = NULL;
	memset(ex, 0, sizeof(*ex));
	if (len > BATCH_CASE_LINE_MAX) {
		snprintf(why, whylen, "longer than %u bytes", BATCH_CASE_LINE_MAX);
		return -1;
	}
	o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (o == NULL) {
		snprintf(why, whylen, "not JSON: %s (column %d)", je.text, je.column);
		return -1;
	}
	if (!json_is_object(o)) {
		snprintf(why, whylen, "expected a JSON object (a job)");
		goto out_bad;
	}
	e = json_object_get(o, "expect");
	m = json_object_get(o, "expect_mode");
	if (json_object_get(o, "id") != NULL) {
		snprintf(why, whylen, "field 'id': set by sandq batch (%s)", id);
		goto out_bad;
	}
	if (fork != NULL && json_object_get(o, "sandbox") != NULL) {
		snprintf(why, whylen, "field 'sandbox': not with --base (each case runs "
		    "on its own fork)");
		goto out_bad;
	}
	if (e != NULL && !json_is_string(e)) {
		snprintf(why, whylen, "field 'expect': expected a string");
		goto out_bad;
	}
	if (m != NULL && (e == NULL || !json_is_string(m))) {
		snprintf(why, whylen, "field 'expect_mode': %s", e == NULL ?
		    "needs 'expect'" : "expected exact, trim or regex");
		goto out_bad;
	}
	if (m != NULL)
		mode = json_string_value(m);
	if (e != NULL && batchcase_expect_set(ex, mode, json_string_value(e),
	    json_string_length(e), why, whylen) < 0)
		goto out_bad;
	json_object_del(o, "expect");
	json_object_del(o, "expect_mode");
	json_object_set_new(o, "id", json_string(id));
	if (fork != NULL)
		json_object_set_new(o, "sandbox", json_string(fork));
	*job = o;
	return 0;

out_bad:
	batchcase_expect_free(ex);
	json_decref(o);
	return -1;
}

/*
 * Packs j as msgpack. Reals become floats, which sandqd refuses by name
 * where it wants an integer.
 */
static void
mp_pack_json(msgpack_packer *pk, json_t *j)
{
	const char *k;
	json_t *v;
	size_t i;

	switch (json_typeof(j)) {
	case JSON_OBJECT:
		msgpack_pack_map(pk, json_object_size(j));
		json_object_foreach(j, k, v) {
			msgpack_pack_str(pk, strlen(k));
			msgpack_pack_str_body(pk, k, strlen(k));
			mp_pack_json(pk, v);
		}
		break;
	case JSON_ARRAY:
		msgpack_pack_array(pk, json_array_size(j));
		json_array_foreach(j, i, v) {
			mp_pack_json(pk, v);
		}
		break;
	case JSON_STRING:
		msgpack_pack_str(pk, json_string_length(j));
		msgpack_pack_str_body(pk, json_string_value(j), json_string_length(j));
		break;
	case JSON_INTEGER:
		msgpack_pack_int64(pk, json_integer_value(j));
		break;
	case JSON_REAL:
		msgpack_pack_double(pk, json_real_value(j));
		break;
	case JSON_TRUE:
		msgpack_pack_true(pk);
		break;
	case JSON_FALSE:
		msgpack_pack_false(pk);
		break;
	default:
		msgpack_pack_nil(pk);
		break;
	}
}

void
batchcase_pack(json_t *j, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	mp_pack_json(&pk, j);
	/* The sbuffer's data is malloc'd: handed over as it is. */
	*out = sb.data;
	*outlen = sb.size;
}
