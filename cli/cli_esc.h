/*
 * cli_esc.h - the one way the sandq command shows text it did not write:
 * labels, kv keys, file names and link targets, tool-call names, job and
 * batch ids, dead-letter reasons, host names, and error messages that may
 * quote any of them. Whatever a tenant (or a server, or a Redis writer)
 * put there, the operator's terminal receives printable text only: no
 * escape sequence can set its title, clear it, move its cursor or forge a
 * line of sandq's own output.
 *
 * The notation (docs/decisions.md, "Escaping tenant text"):
 *   \\            a backslash itself, so every escape reads back exactly
 *   \n \t \r      those three controls
 *   \xNN          any other C0 control, DEL, and each byte that is not
 *                 part of valid UTF-8 (a raw 0x9b among them)
 *   \u00NN        a C1 control written in UTF-8 (U+0080..U+009F)
 *   \uNNNN        a bidirectional-text control (U+061C, U+200E, U+200F,
 *                 U+202A..U+202E, U+2066..U+2069), which reorders a line
 *   anything else printable UTF-8, unchanged
 *
 * What the user asked for as bytes is not text to escape: `fs cat`, `kv
 * get`, `sandbox export -`, a job's stdout and stderr, and --json output
 * (JSON-escaped already) stay exact.
 *
 * Lifecycle: none. cli_esc() and friends return one of CLI_ESC_SLOTS
 * static buffers in turn, so up to that many may appear in one printf().
 */
#ifndef SANDQ_CLI_ESC_H
#define SANDQ_CLI_ESC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CLI_ESC_SLOTS 8			/* buffers cli_esc() rotates through */
#define CLI_ESC_IN_MAX 16384		/* input bytes cli_esc() shows; past it "..." */
#define CLI_ESC_UNIT_MAX 6		/* longest escape of one unit: "\u009b" */
#define CLI_ESC_OUT_MAX (CLI_ESC_IN_MAX * 4 + 4)	/* a slot: the worst case */

/*
 * Escapes s[0..n) into out (size bytes, NUL-terminated), whole units only;
 * with width > 0 the result is at most width bytes, and "..." (within
 * width) marks a cut. Returns the number of input bytes shown, n when
 * everything fitted.
 */
size_t cli_esc_buf(char *out, size_t size, const char *s, size_t n, size_t width);
/*
 * The escaped form of NUL-terminated s ("" for NULL), in the next static
 * slot: valid until CLI_ESC_SLOTS later calls of cli_esc*(). Owns nothing.
 */
const char *cli_esc(const char *s);
/* cli_esc() of s[0..n), which may hold NUL bytes (shown as \x00). */
const char *cli_escn(const char *s, size_t n);
/* cli_esc() cut to at most width bytes (width >= 4), "..." marking a cut. */
const char *cli_esc_cut(const char *s, size_t width);
/* cli_esc_cut() of s[0..n). */
const char *cli_escn_cut(const char *s, size_t n, size_t width);
/* True if s[0..n) shows as itself: nothing in it would be escaped. */
bool cli_esc_is_plain(const char *s, size_t n);
/* Writes the escaped form of s[0..n) to f, however long. 0 or -EIO. */
int cli_esc_write(FILE *f, const char *s, size_t n);
/*
 * prefix (sandq's own text, as is), then fmt formatted and escaped as a
 * whole, then a newline, on stderr: the one way sandq's messages are
 * written, so a message quoting a server's answer or an upload cannot
 * drive the terminal either.
 */
void cli_vwarn(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* cli_vwarn("sandq: ", fmt, ...). */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
