/*
 * util.h - small side-effect-free helpers and thin syscall wrappers shared by
 * every process.
 */
#ifndef SANDQ_COMMON_UTIL_H
#define SANDQ_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Wall-clock time in milliseconds since the epoch. */
uint64_t now_ms(void);
/* CLOCK_MONOTONIC in nanoseconds. */
int64_t mono_ns(void);

/* Writes all len bytes, retrying on EINTR and short writes. 0 or -errno. */
int write_all(int fd, const void *buf, size_t len);

/*
 * Parses a size such as "512", "64k", "16M", "2G" (binary multiples) into
 * bytes. Returns 0 or -EINVAL (bad syntax, overflow).
 */
int parse_size(const char *s, uint64_t *out);
/* Parses a decimal integer in [min, max] with no trailing junk. 0 or -EINVAL. */
int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Sets or clears O_NONBLOCK. 0 or -errno. */
int fd_set_nonblock(int fd, bool on);

/*
 * The resident set of process pid in bytes (/proc/PID/statm: resident
 * pages times the page size; one open and one read). 0 or -errno.
 */
int proc_rss(int pid, uint64_t *bytes);

/*
 * Decodes one UTF-8 character at s[0..n) (n >= 1): returns its length (1 to
 * 4) and sets *cp, or 0 when s does not start with a valid encoding (a lone
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut
 * short). An ASCII byte, controls included, is a valid character.
 */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif
