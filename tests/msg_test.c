/*
 * msg_test.c - unit tests for the frame codec in common/msg.c.
 *
 * Every test runs over a real socketpair(AF_UNIX, SOCK_SEQPACKET), the same
 * kind of channel the dispatcher and workers use, so record boundaries,
 * SCM_RIGHTS and MSG_TRUNC behave as in production. Bad frames are written
 * with raw sendmsg() so the receiver sees exactly the bytes a compromised peer
 * could send; after each one the test sends a good frame to prove the bad
 * record was consumed and the channel is still in step, and it counts open
 * descriptors to prove that descriptors riding on a bad frame were closed.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/msg.h"

static int sv[2] = { -1, -1 };

static void
pair_open(void)
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0,
	    "socketpair: %s", strerror(errno));
}

static void
pair_close(void)
{
	for (int i = 0; i < 2; i++) {
		if (sv[i] >= 0)
			close(sv[i]);
		sv[i] = -1;
	}
}

TestSuite(msg, .init = pair_open, .fini = pair_close, .timeout = 10);

/*** Helpers ***/

/* Fills buf with a pattern that differs at every offset modulo 251. */
static uint8_t *
pattern_new(size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	cr_assert_not_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i % 251);
	return p;
}

/* Counts this process's open descriptors. */
static int
fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;		/* the directory's own descriptor */
}

/* Sends one raw record: hdr (may be NULL), then body, with nfds descriptors. */
static void
send_raw(const void *hdr, size_t hdrlen, const void *body, size_t bodylen,
    const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} cm;
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov };
	ssize_t n;

	cr_assert(nfds >= 0 && nfds <= 4);
	if (hdrlen > 0) {
		iov[mh.msg_iovlen].iov_base = (void *)(uintptr_t)hdr;
		iov[mh.msg_iovlen++].iov_len = hdrlen;
	}
	if (bodylen > 0) {
		iov[mh.msg_iovlen].iov_base = (void *)(uintptr_t)body;
		iov[mh.msg_iovlen++].iov_len = bodylen;
	}
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	n = sendmsg(sv[0], &mh, MSG_NOSIGNAL);
	cr_assert_eq(n, (ssize_t)(hdrlen + bodylen), "sendmsg: %s", strerror(errno));
}

static struct msg_hdr
hdr_make(uint32_t type, uint32_t len, uint16_t flags)
{
	struct msg_hdr h = { .type = type, .len = len, .job_id = 7,
	    .version = MSG_VERSION, .flags = flags };

	return h;
}

/* A memfd holding len pattern bytes, sealed with seals (0 = none). */
static int
memfd_make(size_t len, int seals)
{
	uint8_t *p = pattern_new(len);
	int fd = memfd_create("msg-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	cr_assert_geq(fd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(write(fd, p, len), (ssize_t)len);
	free(p);
	if (seals)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

#define ALL_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/*
 * Receives the pending (bad) record, expects -EBADMSG and no leaked
 * descriptor, then proves the channel still delivers the next good frame.
 */
static void
expect_bad_then_good(size_t max_blob)
{
	struct msg m;
	int before = fd_count();

	msg_init(&m);
	cr_expect_eq(msg_recv(sv[1], &m, max_blob), -EBADMSG);
	cr_expect_eq(fd_count(), before, "a descriptor of the bad frame leaked");
	cr_expect_null(m.data);
	cr_expect_eq(m.fd, -1);

	cr_assert_eq(msg_send(sv[0], MSG_JOB_DONE, 99, "next", 4, -1), 0);
	cr_assert_eq(msg_recv(sv[1], &m, max_blob), 1, "bad record not consumed");
	cr_expect_eq(m.hdr.type, MSG_JOB_DONE);
	cr_expect_eq(m.hdr.job_id, 99);
	cr_expect_eq(m.len, 4);
	cr_expect_arr_eq(m.data, "next", 4);
	msg_clear(&m);
}

/*** Good frames ***/

Test(msg, round_trips_small_frame)
{
	struct msg m;

	msg_init(&m);
	cr_assert_eq(msg_send(sv[0], MSG_JOB_RUN, 42, "hello", 5, -1), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_eq(m.hdr.type, MSG_JOB_RUN);
	cr_expect_eq(m.hdr.job_id, 42);
	cr_expect_eq(m.hdr.version, MSG_VERSION);
	cr_expect_eq(m.hdr.flags, 0);
	cr_expect_eq(m.hdr.len, 5);
	cr_expect_eq(m.len, 5);
	cr_expect_arr_eq(m.data, "hello", 5);
	cr_expect_eq(m.fd, -1);
	msg_clear(&m);
	cr_expect_null(m.data);
	cr_expect_eq(m.fd, -1);
}

Test(msg, round_trips_empty_payload)
{
	struct msg m;

	msg_init(&m);
	cr_assert_eq(msg_send(sv[0], MSG_SHUTDOWN, 0, NULL, 0, -1), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_eq(m.hdr.type, MSG_SHUTDOWN);
	cr_expect_eq(m.hdr.len, 0);
	cr_expect_eq(m.hdr.flags, 0);
	cr_expect_eq(m.len, 0);
	cr_expect_null(m.data);
	msg_clear(&m);
}

Test(msg, sends_msg_max_inline)
{
	uint8_t *p = pattern_new(MSG_MAX);
	struct msg m;

	msg_init(&m);
	cr_assert_eq(msg_send(sv[0], MSG_JOB_RUN, 1, p, MSG_MAX, -1), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_eq(m.hdr.flags & MSG_F_MEMFD, 0);
	cr_expect_eq(m.hdr.len, MSG_MAX);
	cr_assert_eq(m.len, MSG_MAX);
	cr_expect_arr_eq(m.data, p, MSG_MAX);
	msg_clear(&m);
	free(p);
}

Test(msg, sends_blob_over_msg_max_through_memfd)
{
	size_t len = MSG_MAX + 1;
	uint8_t *p = pattern_new(len);
	struct msg m;
	int before = fd_count();

	msg_init(&m);
	cr_assert_eq(msg_send(sv[0], MSG_JOB_DONE, 3, p, len, -1), 0);
	cr_expect_eq(fd_count(), before, "msg_send kept its memfd open");
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect(m.hdr.flags & MSG_F_MEMFD);
	cr_expect_eq(m.hdr.flags & MSG_F_FD, 0);
	cr_expect_eq(m.hdr.len, sizeof(uint64_t));
	cr_expect_eq(m.hdr.job_id, 3);
	cr_assert_eq(m.len, len);
	cr_expect_arr_eq(m.data, p, len);
	cr_expect_eq(m.fd, -1);
	cr_expect_eq(fd_count(), before, "msg_recv kept the memfd open");
	msg_clear(&m);
	free(p);
}

Test(msg, passes_extra_fd_that_works_on_the_other_side)
{
	int pfd[2];
	char buf[8] = { 0 };
	struct msg m;

	msg_init(&m);
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	cr_assert_eq(msg_send(sv[0], MSG_JOB_RUN, 5, "x", 1, pfd[1]), 0);
	/* The sender keeps its descriptor. */
	cr_expect_geq(fcntl(pfd[1], F_GETFD), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect(m.hdr.flags & MSG_F_FD);
	cr_expect_eq(m.hdr.flags & MSG_F_MEMFD, 0);
	cr_expect_eq(m.len, 1);
	cr_assert_geq(m.fd, 0);
	cr_expect_neq(m.fd, pfd[1]);
	cr_expect(fcntl(m.fd, F_GETFD) & FD_CLOEXEC, "received fd lacks CLOEXEC");
	cr_assert_eq(write(m.fd, "ok", 2), 2);
	cr_assert_eq(read(pfd[0], buf, sizeof(buf)), 2);
	cr_expect_str_eq(buf, "ok");
	msg_clear(&m);
	close(pfd[0]);
	close(pfd[1]);
}

Test(msg, passes_extra_fd_with_memfd_blob)
{
	size_t len = MSG_MAX + 4096;
	uint8_t *p = pattern_new(len);
	int pfd[2];
	char c = 0;
	struct msg m;

	msg_init(&m);
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	cr_assert_eq(msg_send(sv[0], MSG_JOB_DONE, 6, p, len, pfd[1]), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_eq(m.hdr.flags, MSG_F_MEMFD | MSG_F_FD);
	cr_assert_eq(m.len, len);
	cr_expect_arr_eq(m.data, p, len);
	cr_assert_geq(m.fd, 0);
	cr_assert_eq(write(m.fd, "z", 1), 1);
	cr_assert_eq(read(pfd[0], &c, 1), 1);
	cr_expect_eq(c, 'z');
	msg_clear(&m);
	close(pfd[0]);
	close(pfd[1]);
	free(p);
}

Test(msg, reuses_struct_without_clear)
{
	struct msg m;

	msg_init(&m);
	cr_assert_eq(msg_send(sv[0], MSG_LOG, 1, "first", 5, -1), 0);
	cr_assert_eq(msg_send(sv[0], MSG_LOG, 2, "second", 6, -1), 0);
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_arr_eq(m.data, "first", 5);
	/* msg_recv releases the previous frame itself (LSan checks). */
	cr_assert_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 1);
	cr_expect_eq(m.hdr.job_id, 2);
	cr_expect_arr_eq(m.data, "second", 6);
	msg_clear(&m);
	msg_clear(&m);
}

Test(msg, eof_returns_zero)
{
	struct msg m;

	msg_init(&m);
	close(sv[0]);
	sv[0] = -1;
	cr_expect_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), 0);
	msg_clear(&m);
}

Test(msg, nonblocking_empty_socket_returns_eagain)
{
	struct msg m;
	int fl = fcntl(sv[1], F_GETFL);

	msg_init(&m);
	cr_assert_eq(fcntl(sv[1], F_SETFL, fl | O_NONBLOCK), 0);
	cr_expect_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), -EAGAIN);
	cr_expect_null(m.data);
	cr_expect_eq(m.fd, -1);
}

/*
 * The buffer is one byte: msg_send must refuse on the length alone, before
 * reading data or creating a memfd (ASan would flag an over-read).
 */
Test(msg, send_refuses_len_over_blob_max_before_touching_data)
{
	char one = 'x';
	struct msg m;
	int before = fd_count();

	msg_init(&m);
	cr_expect_eq(msg_send(sv[0], MSG_JOB_DONE, 1, &one, (size_t)MSG_BLOB_MAX + 1, -1),
	    -EMSGSIZE);
	cr_expect_eq(msg_send(sv[0], MSG_JOB_DONE, 1, &one, SIZE_MAX, -1), -EMSGSIZE);
	cr_expect_eq(fd_count(), before);
	/* Nothing was sent. */
	cr_assert_eq(fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK), 0);
	cr_expect_eq(msg_recv(sv[1], &m, MSG_BLOB_MAX), -EAGAIN);
}

/*** Bad frames from a compromised peer ***/

Test(msg, rejects_wrong_version)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, 0);

	h.version = MSG_VERSION + 1;
	send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
	h.version = 0;
	send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_unknown_flag_bits)
{
	static const uint16_t bad[] = { 0x4, 0x8, 0x100, 0x8000, 0xfffc };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, bad[i]);

		send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
		expect_bad_then_good(MSG_BLOB_MAX);
	}
}

Test(msg, rejects_len_longer_than_record)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 10, 0);

	send_raw(&h, sizeof(h), "abcde", 5, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_len_shorter_than_record)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, 0);

	send_raw(&h, sizeof(h), "abcde", 5, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
	/* A zero len with trailing bytes, too. */
	h.len = 0;
	send_raw(&h, sizeof(h), "abcde", 5, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_len_over_msg_max)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, MSG_MAX + 1, 0);

	send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
	h.len = UINT32_MAX;
	send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_record_shorter_than_header)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 0, 0);

	send_raw(&h, 1, NULL, 0, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
	send_raw(&h, sizeof(h) - 1, NULL, 0, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_short_record_carrying_fd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 0, MSG_F_FD);
	int pfd[2];

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	send_raw(&h, 5, NULL, 0, &pfd[0], 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(pfd[0]);
	close(pfd[1]);
}

Test(msg, rejects_fd_flag_without_fd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, MSG_F_FD);

	send_raw(&h, sizeof(h), "abc", 3, NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_fd_without_flag)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, 0);
	int pfd[2];

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	send_raw(&h, sizeof(h), "abc", 3, &pfd[0], 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(pfd[0]);
	close(pfd[1]);
}

Test(msg, rejects_more_fds_than_flags_announce)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 3, MSG_F_FD);
	int pfd[2], fds[3];

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	fds[0] = fds[1] = fds[2] = pfd[0];
	send_raw(&h, sizeof(h), "abc", 3, fds, 2);
	expect_bad_then_good(MSG_BLOB_MAX);
	/* Three descriptors overflow the receiver's control buffer. */
	send_raw(&h, sizeof(h), "abc", 3, fds, 3);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(pfd[0]);
	close(pfd[1]);
}

Test(msg, rejects_memfd_flag_without_fd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 1;

	send_raw(&h, sizeof(h), &size, sizeof(size), NULL, 0);
	expect_bad_then_good(MSG_BLOB_MAX);
}

Test(msg, rejects_memfd_frame_with_wrong_inline_len)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 4, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 1;
	int fd = memfd_make(MSG_MAX + 1, ALL_SEALS);

	send_raw(&h, sizeof(h), &size, 4, &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(fd);
}

Test(msg, rejects_unsealed_memfd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 1;
	int fd = memfd_make(MSG_MAX + 1, 0);

	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(fd);
}

Test(msg, rejects_partly_sealed_memfd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 1;
	/* Sealed against growth and shrinking, but the sender can still write. */
	int fd = memfd_make(MSG_MAX + 1, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW);

	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(fd);
}

Test(msg, rejects_memfd_flag_on_plain_fd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 1;
	int pfd[2];

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	send_raw(&h, sizeof(h), &size, sizeof(size), &pfd[0], 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(pfd[0]);
	close(pfd[1]);
}

Test(msg, rejects_memfd_size_not_matching_field)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 11;	/* larger than the memfd */
	int fd = memfd_make(MSG_MAX + 10, ALL_SEALS);

	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	size = MSG_MAX + 9;		/* smaller than the memfd */
	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	size = 0;
	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	size = UINT64_MAX;
	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(fd);
}

Test(msg, rejects_small_blob_sent_as_memfd)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = 16;
	int fd = memfd_make(16, ALL_SEALS);

	/* A blob that fits inline must travel inline: one encoding per size. */
	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_BLOB_MAX);
	close(fd);
}

Test(msg, rejects_memfd_blob_over_max_blob)
{
	struct msg_hdr h = hdr_make(MSG_JOB_DONE, 8, MSG_F_MEMFD);
	uint64_t size = MSG_MAX + 100;
	int fd = memfd_make(MSG_MAX + 100, ALL_SEALS);

	send_raw(&h, sizeof(h), &size, sizeof(size), &fd, 1);
	expect_bad_then_good(MSG_MAX + 99);
	close(fd);
}

Test(msg, rejects_blob_from_msg_send_over_max_blob)
{
	size_t len = MSG_MAX + 1;
	uint8_t *p = pattern_new(len);

	cr_assert_eq(msg_send(sv[0], MSG_JOB_DONE, 1, p, len, -1), 0);
	expect_bad_then_good(MSG_MAX);
	free(p);
}

/*** msg_check_hdr ***/

Test(msg, check_hdr_table)
{
	static const struct {
		const char *name;
		struct msg_hdr h;
		size_t got;
		bool have_fd;
		int want;
	} t[] = {
#define H(type_, len_, ver_, flags_) \
	{ .type = (type_), .len = (len_), .job_id = 1, .version = (ver_), .flags = (flags_) }
		{ "empty frame", H(MSG_SHUTDOWN, 0, MSG_VERSION, 0), 16, false, 0 },
		{ "small payload", H(MSG_JOB_RUN, 5, MSG_VERSION, 0), 21, false, 0 },
		{ "payload of MSG_MAX", H(MSG_JOB_RUN, MSG_MAX, MSG_VERSION, 0),
		    16 + MSG_MAX, false, 0 },
		{ "type is not checked here", H(9999, 0, MSG_VERSION, 0), 16, false, 0 },
		{ "fd flag with fd", H(MSG_JOB_RUN, 0, MSG_VERSION, MSG_F_FD), 16, true, 0 },
		{ "memfd frame", H(MSG_JOB_RUN, 8, MSG_VERSION, MSG_F_MEMFD), 24, true, 0 },
		{ "memfd and fd", H(MSG_JOB_RUN, 8, MSG_VERSION, MSG_F_MEMFD | MSG_F_FD),
		    24, true, 0 },
		{ "nothing received", H(MSG_JOB_RUN, 0, MSG_VERSION, 0), 0, false, -EBADMSG },
		{ "short header", H(MSG_JOB_RUN, 0, MSG_VERSION, 0), 15, false, -EBADMSG },
		{ "version 0", H(MSG_JOB_RUN, 0, 0, 0), 16, false, -EBADMSG },
		{ "version + 1", H(MSG_JOB_RUN, 0, MSG_VERSION + 1, 0), 16, false, -EBADMSG },
		{ "version 0xffff", H(MSG_JOB_RUN, 0, 0xffff, 0), 16, false, -EBADMSG },
		{ "flag 0x4", H(MSG_JOB_RUN, 0, MSG_VERSION, 0x4), 16, false, -EBADMSG },
		{ "flag 0x8000", H(MSG_JOB_RUN, 0, MSG_VERSION, 0x8000), 16, false, -EBADMSG },
		{ "every flag", H(MSG_JOB_RUN, 8, MSG_VERSION, 0xffff), 24, true, -EBADMSG },
		{ "len MSG_MAX + 1", H(MSG_JOB_RUN, MSG_MAX + 1, MSG_VERSION, 0),
		    16 + MSG_MAX + 1, false, -EBADMSG },
		{ "len UINT32_MAX", H(MSG_JOB_RUN, UINT32_MAX, MSG_VERSION, 0),
		    16 + (size_t)UINT32_MAX, false, -EBADMSG },
		{ "len above got", H(MSG_JOB_RUN, 6, MSG_VERSION, 0), 21, false, -EBADMSG },
		{ "len below got", H(MSG_JOB_RUN, 4, MSG_VERSION, 0), 21, false, -EBADMSG },
		{ "memfd len 0", H(MSG_JOB_RUN, 0, MSG_VERSION, MSG_F_MEMFD), 16, true, -EBADMSG },
		{ "memfd len 4", H(MSG_JOB_RUN, 4, MSG_VERSION, MSG_F_MEMFD), 20, true, -EBADMSG },
		{ "memfd len 16", H(MSG_JOB_RUN, 16, MSG_VERSION, MSG_F_MEMFD), 32, true, -EBADMSG },
		{ "fd flag, no fd", H(MSG_JOB_RUN, 0, MSG_VERSION, MSG_F_FD), 16, false, -EBADMSG },
		{ "memfd and fd flags, no fd", H(MSG_JOB_RUN, 8, MSG_VERSION,
		    MSG_F_MEMFD | MSG_F_FD), 24, false, -EBADMSG },
#undef H
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		cr_expect_eq(msg_check_hdr(&t[i].h, t[i].got, t[i].have_fd), t[i].want,
		    "case '%s': got %d, want %d", t[i].name,
		    msg_check_hdr(&t[i].h, t[i].got, t[i].have_fd), t[i].want);
}

/*** Names ***/

Test(msg, type_name_known_and_unknown)
{
	static const struct {
		uint32_t type;
		const char *name;
	} t[] = {
		{ MSG_JOB_RUN, "JOB_RUN" }, { MSG_SHUTDOWN, "SHUTDOWN" },
		{ MSG_HELLO, "HELLO" }, { MSG_JOB_DONE, "JOB_DONE" },
		{ MSG_LOG, "LOG" },
		{ MSG_SBX_SPEC, "SBX_SPEC" }, { MSG_SBX_READY, "SBX_READY" },
		{ MSG_SBX_EXEC, "SBX_EXEC" }, { MSG_SBX_EXIT, "SBX_EXIT" },
		{ MSG_SBX_FAIL, "SBX_FAIL" },
		{ MSG_SBX_GO, "SBX_GO" },
		{ MSG_SBX_PIPE, "SBX_PIPE" },
		{ MSG_SBX_NOTIFY, "SBX_NOTIFY" },
		{ MSG_SBX_COMMIT, "SBX_COMMIT" },
		{ MSG_SBX_CHANGES, "SBX_CHANGES" },
		{ MSG_SBX_SNAPSHOT, "SBX_SNAPSHOT" },
		{ MSG_SBX_BASE, "SBX_BASE" },
		{ MSG_SBX_BASE_NEXT, "SBX_BASE_NEXT" },
		{ MSG_JOB_TENANT, "JOB_TENANT" },
		{ MSG_SPAWN_REQ, "SPAWN_REQ" },
		{ MSG_SPAWN_DONE, "SPAWN_DONE" },
		{ MSG_SPAWN_PIDFD, "SPAWN_PIDFD" },
		{ MSG_SPAWN_LAYERS, "SPAWN_LAYERS" },
		{ MSG_SPAWN_LAYERS_DONE, "SPAWN_LAYERS_DONE" },
		{ MSG_SBX_IMAGE, "SBX_IMAGE" },
		{ 0, "unknown" }, { 99, "unknown" }, { 199, "unknown" },
		{ 299, "unknown" }, { 399, "unknown" }, { 499, "unknown" },
		{ 100000, "unknown" }, { UINT32_MAX, "unknown" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		cr_expect_str_eq(msg_type_name(t[i].type), t[i].name, "type %u",
		    t[i].type);
}
