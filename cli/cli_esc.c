/*
 * cli_esc.c - escaping text sandq did not write before it reaches a
 * terminal (cli_esc.h states the notation and what it covers).
 *
 * A terminal acts on C0 controls (ESC starts CSI and OSC sequences: move
 * the cursor, clear the screen, set the title, write the clipboard on some
 * terminals), on DEL, and on C1 controls, which many terminals take both
 * as raw bytes 0x80..0x9f (0x9b is CSI) and as their UTF-8 encodings
 * U+0080..U+009F. A newline or carriage return inside one field forges a
 * line of sandq's own output. Each of these is written as a visible escape;
 * so is every byte that is not part of valid UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF), since a terminal decoding it
 * its own way may find a control in it. Printable UTF-8 stays as it is,
 * so names in any script read normally.
 *
 * The work is done one unit at a time (esc_unit(): one byte, or one UTF-8
 * character), so a cut never splits a character or an escape.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "cli_esc.h"

/* Bidirectional-text controls: they reorder how the rest of a line reads. */
static bool
is_bidi_control(uint32_t cp)
{
	return cp == 0x061c || cp == 0x200e || cp == 0x200f ||
	    (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/*
 * The shown form of the unit at p[0..n) (n >= 1): written to u (not
 * NUL-terminated), its length in *ulen. Returns the input bytes the unit
 * covers: 1, or a whole valid UTF-8 character.
 */
static size_t
esc_unit(const unsigned char *p, size_t n, char u[CLI_ESC_UNIT_MAX + 1],
    size_t *ulen)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char c = p[0];
	uint32_t cp;
	size_t len;

	if (c >= 0x20 && c < 0x7f && c != '\\') {
		u[0] = (char)c;
		*ulen = 1;
		return 1;
	}
	if (c == '\\' || c == '\n' || c == '\t' || c == '\r') {
		u[0] = '\\';
		u[1] = c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
		*ulen = 2;
		return 1;
	}
	if (c < 0x80)
		goto out_byte;		/* the other C0 controls and DEL */
	if ((len = utf8_decode(p, n, &cp)) == 0)
		goto out_byte;		/* not UTF-8: each byte on its own */
	if (cp <= 0x9f || is_bidi_control(cp)) {
		u[0] = '\\';
		u[1] = 'u';
		for (int i = 0; i < 4; i++)
			u[2 + i] = hex[(cp >> (12 - 4 * i)) & 0xf];
		*ulen = 6;
		return len;
	}
	memcpy(u, p, len);
	*ulen = len;
	return len;
out_byte:
	u[0] = '\\';
	u[1] = 'x';
	u[2] = hex[c >> 4];
	u[3] = hex[c & 0xf];
	*ulen = 4;
	return 1;
}

size_t
cli_esc_buf(char *out, size_t size, const char *s, size_t n, size_t width)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t limit, o = 0, i = 0, mark_o = 0, mark_i = 0;
	char u[CLI_ESC_UNIT_MAX + 1];

	if (size == 0)
		return 0;
	limit = size - 1;
	if (width > 0 && width < limit)
		limit = width;
	while (i < n) {
		size_t ulen, k = esc_unit(p + i, n - i, u, &ulen);

		if (o + ulen > limit)
			break;
		memcpy(out + o, u, ulen);
		o += ulen;
		i += k;
		/* The last boundary after which "..." still fits. */
		if (o + 3 <= limit) {
			mark_o = o;
			mark_i = i;
		}
	}
	if (i < n) {
		/* Cut: back to the mark, then "..." (dropped if even that cannot fit). */
		o = mark_o;
		i = mark_i;
		if (o + 3 <= limit) {
			memcpy(out + o, "...", 3);
			o += 3;
		}
	}
	out[o] = '\0';
	return i;
}

/* The next of the rotating buffers. */
static char *
slot_next(void)
{
	static char ring[CLI_ESC_SLOTS][CLI_ESC_OUT_MAX];
	static unsigned next;

	return ring[next++ % CLI_ESC_SLOTS];
}

const char *
cli_escn(const char *s, size_t n)
{
	char *out = slot_next();

	cli_esc_buf(out, CLI_ESC_OUT_MAX, s ? s : "", s ? n : 0, 0);
	return out;
}

const char *
cli_esc(const char *s)
{
	return cli_escn(s, s ? strlen(s) : 0);
}

const char *
cli_escn_cut(const char *s, size_t n, size_t width)
{
	char *out = slot_next();

	cli_esc_buf(out, CLI_ESC_OUT_MAX, s ? s : "", s ? n : 0, width);
	return out;
}

const char *
cli_esc_cut(const char *s, size_t width)
{
	return cli_escn_cut(s, s ? strlen(s) : 0, width);
}

bool
cli_esc_is_plain(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	char u[CLI_ESC_UNIT_MAX + 1];

	for (size_t i = 0; i < n;) {
		size_t ulen, k = esc_unit(p + i, n - i, u, &ulen);

		if (ulen != k || memcmp(u, p + i, k) != 0)
			return false;
		i += k;
	}
	return true;
}

int
cli_esc_write(FILE *f, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	char buf[4096];
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		size_t ulen;

		if (o + CLI_ESC_UNIT_MAX + 1 > sizeof(buf)) {
			if (fwrite(buf, 1, o, f) != o)
				return -EIO;
			o = 0;
		}
		i += esc_unit(p + i, n - i, buf + o, &ulen);
		o += ulen;
	}
	if (o > 0 && fwrite(buf, 1, o, f) != o)
		return -EIO;
	return 0;
}

void
cli_vwarn(const char *prefix, const char *fmt, va_list ap)
{
	char *msg = NULL, *line;
	size_t plen = strlen(prefix), mlen, size;
	int n;

	if ((n = vasprintf(&msg, fmt, ap)) < 0) {
		fprintf(stderr, "%s(a message could not be formatted)\n", prefix);
		return;
	}
	mlen = (size_t)n;
	/* A unit at most quadruples: nothing is cut. One write keeps the line whole. */
	size = plen + 4 * mlen + 2;
	line = xmalloc(size);
	memcpy(line, prefix, plen);
	cli_esc_buf(line + plen, size - plen - 1, msg, mlen, 0);
	mlen = strlen(line);
	line[mlen++] = '\n';
	(void)fwrite(line, 1, mlen, stderr);
	free(line);
	free(msg);
}

void
cli_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
}
