/*
 * rx.c - expect regexes on PCRE2 (rx.h has the semantics and bounds).
 *
 * The compiled code and a match context carrying the limits live together
 * in struct rx; match data is made per call, so one struct rx may be used
 * from several threads. No JIT: the interpreter honours every limit
 * (the JIT ignores the depth limit), and a case is matched once.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "rx.h"

struct rx {
	pcre2_code *code;		/* the compiled pattern */
	pcre2_match_context *mctx;	/* the work bounds */
};

int
rx_compile(const char *pat, size_t len, struct rx **out, char *why,
    size_t whylen)
{
	const uint32_t opts = PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOTALL |
	    PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C;
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE off = 0;
	int errcode = 0;
	struct rx *r;

	*out = NULL;
	if (len > RX_PATTERN_MAX) {
		snprintf(why, whylen, "longer than %u bytes", RX_PATTERN_MAX);
		return -EINVAL;
	}
	if (memchr(pat, '\0', len) != NULL) {
		snprintf(why, whylen, "a regex cannot hold a NUL character");
		return -EINVAL;
	}
	r = xcalloc(1, sizeof(*r));
	r->code = pcre2_compile((PCRE2_SPTR)pat, len, opts, &errcode, &off, NULL);
	if (r->code == NULL) {
		if (pcre2_get_error_message(errcode, msg, sizeof(msg)) < 0)
			snprintf((char *)msg, sizeof(msg), "error %d", errcode);
		snprintf(why, whylen, "%s at offset %zu", (const char *)msg,
		    (size_t)off);
		free(r);
		return -EINVAL;
	}
	if ((r->mctx = pcre2_match_context_create(NULL)) == NULL)
		fatalx("pcre2: out of memory");
	pcre2_set_match_limit(r->mctx, RX_MATCH_LIMIT);
	pcre2_set_depth_limit(r->mctx, RX_DEPTH_LIMIT);
	pcre2_set_heap_limit(r->mctx, RX_HEAP_LIMIT_KIB);
	*out = r;
	return 0;
}

enum rx_verdict
rx_match(const struct rx *r, const uint8_t *s, size_t len)
{
	pcre2_match_data *md;
	bool whole = false;
	int rc;

	if ((md = pcre2_match_data_create_from_pattern(r->code, NULL)) == NULL)
		fatalx("pcre2: out of memory");
	/* An empty subject may be given as NULL. */
	rc = pcre2_match(r->code, len > 0 ? (PCRE2_SPTR)s : (PCRE2_SPTR)"", len,
	    0, 0, md, r->mctx);
	/*
	 * With PCRE2_MATCH_INVALID_UTF, the anchors hold per valid stretch of
	 * the subject, not for the subject: "\xff" matches ".*" as an empty
	 * string. Only a match spanning every byte counts.
	 */
	if (rc >= 0) {
		const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);

		whole = ov[0] == 0 && ov[1] == len;
	}
	pcre2_match_data_free(md);
	if (rc >= 0)
		return whole ? RX_MATCH : RX_NO_MATCH;
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
	    rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_NOMEMORY)
		return RX_LIMIT;
	return RX_NO_MATCH;
}

void
rx_free(struct rx *r)
{
	if (r == NULL)
		return;
	pcre2_match_context_free(r->mctx);
	pcre2_code_free(r->code);
	free(r);
}
