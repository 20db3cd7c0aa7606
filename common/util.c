/*
 * util.c - time, parsing, descriptor and /proc helpers shared by every process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int
write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int
parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s == '\0')
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int
parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	uint64_t mult = 1;
	char *end;

	if (s == NULL || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	case 't': case 'T': mult = 1ull << 40; end++; break;
	default: return -EINVAL;
	}
	/* Accept an optional "B" or "iB" after the multiplier ("16MiB"). */
	if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end != '\0')
		return -EINVAL;
	if (v > UINT64_MAX / mult)
		return -EINVAL;
	*out = v * mult;
	return 0;
}

int
fd_set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	if (fcntl(fd, F_SETFL, fl) < 0)
		return -errno;
	return 0;
}

int
proc_rss(int pid, uint64_t *bytes)
{
	static long page;
	char path[40], buf[128];
	unsigned long long size, resident;
	ssize_t n;
	int fd, rc;

	if (page <= 0 && (page = sysconf(_SC_PAGESIZE)) <= 0)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/statm", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	rc = n < 0 ? -errno : 0;
	close(fd);
	if (n <= 0)
		return n < 0 ? rc : -EIO;
	buf[n] = '\0';
	/* "size resident shared text lib data dt", in pages. */
	if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
		return -EIO;
	*bytes = (uint64_t)resident * (uint64_t)page;
	return 0;
}

size_t
utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	uint32_t v;
	size_t more;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		v = c & 0x1f;
		more = 1;
	} else if (c >= 0xe0 && c <= 0xef) {
		v = c & 0x0f;
		more = 2;
	} else if (c >= 0xf0 && c <= 0xf4) {
		v = c & 0x07;
		more = 3;
	} else {
		return 0;	/* a continuation byte alone, 0xc0, 0xc1, 0xf5.. */
	}
	if (n <= more)
		return 0;
	for (size_t k = 1; k <= more; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[k] & 0x3f);
	}
	if ((more == 2 && v < 0x800) || (more == 3 && (v < 0x10000 || v > 0x10ffff)) ||
	    (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return more + 1;
}
