/*
 * rx.h - the regexes a case's expect is matched with (expect_mode regex):
 * PCRE2 (Debian's libpcre2-8), the same for `sandq batch`, the gateway's
 * batches and a run's cases in the worker, so a case passes or fails alike
 * wherever it is judged.
 *
 * Semantics (docs/operations.md "Batch runs", docs/protocol.md "Cases"):
 * the pattern must match the whole subject (PCRE2_ANCHORED and
 * PCRE2_ENDANCHORED, which is ^(?:PATTERN)$ without re-parsing the
 * pattern), '.' matches a newline (PCRE2_DOTALL), the pattern is UTF-8 and
 * a subject that is not valid UTF-8 can still match where it is
 * (PCRE2_MATCH_INVALID_UTF). Perl syntax: \d, \s, \w, (?i), lookarounds.
 * Work is bounded: RX_MATCH_LIMIT steps of the matcher, RX_DEPTH_LIMIT
 * nested backtracking points and RX_HEAP_LIMIT_KIB of its memory, so a
 * hostile pattern such as (a+)+b ends with RX_LIMIT instead of stalling
 * the process that judges it.
 *
 * Lifecycle: rx_compile() -> rx_match() any number of times -> rx_free().
 * Pure: no I/O, no globals.
 */
#ifndef SANDQ_PROTO_RX_H
#define SANDQ_PROTO_RX_H

#include <stddef.h>
#include <stdint.h>

#define RX_PATTERN_MAX (64u * 1024u)	/* bytes of a pattern */
#define RX_MATCH_LIMIT 1000000u		/* matcher steps for one subject */
#define RX_DEPTH_LIMIT 10000u		/* nested backtracking points */
#define RX_HEAP_LIMIT_KIB 65536u	/* matcher memory, KiB */

/* What rx_match() found. */
enum rx_verdict {
	RX_NO_MATCH = 0,		/* the subject is not matched */
	RX_MATCH = 1,			/* the whole subject matched */
	RX_LIMIT = -1,			/* the work bound was hit: not a match */
};

struct rx;

/*
 * Compiles len bytes of pat (no NUL inside; at most RX_PATTERN_MAX) into
 * *out, owned by the caller (rx_free()). On failure returns -EINVAL and
 * writes PCRE2's message with the offset it refers to into why (whylen
 * bytes): "missing closing parenthesis at offset 4"; *out is NULL.
 */
int rx_compile(const char *pat, size_t len, struct rx **out, char *why,
    size_t whylen);

/* Whether the whole of len bytes at s matches r (enum rx_verdict). */
enum rx_verdict rx_match(const struct rx *r, const uint8_t *s, size_t len);

/* Releases r. NULL is a no-op. */
void rx_free(struct rx *r);

#endif
