/*
 * fuzz_msg_hdr.c - libFuzzer target for frame validation in common/msg.c.
 *
 * Input layout: byte 0 bit 0 says whether a descriptor "came with" the frame;
 * the rest is the received record. Two checks:
 *
 *   1. msg_check_hdr() on the record's first 16 bytes (zero-padded when the
 *      record is shorter). When it accepts, the header must really obey the
 *      protocol's bounds, so a loosened check is reported as a crash.
 *   2. The record is sent as one SOCK_SEQPACKET record and read back with
 *      msg_recv(): the answer must be a frame or -EBADMSG, never anything
 *      else, and the record must be consumed either way (the next read
 *      finds the socket empty).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_msg_hdr: property failed: %s\n", what);
		abort();
	}
}

static void
check_hdr(const uint8_t *rec, size_t got, bool have_fd)
{
	struct msg_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(&h, rec, got < sizeof(h) ? got : sizeof(h));
	(void)msg_type_name(h.type);
	if (msg_check_hdr(&h, got, have_fd) != 0)
		return;
	check(got >= sizeof(h), "accepted frames hold a header");
	check(h.version == MSG_VERSION, "accepted frames have our version");
	check((h.flags & ~(MSG_F_MEMFD | MSG_F_FD)) == 0, "no unknown flags");
	check(h.len <= MSG_MAX, "len within MSG_MAX");
	check(got == sizeof(h) + h.len, "len matches the record");
	check(!(h.flags & MSG_F_MEMFD) || h.len == sizeof(uint64_t),
	    "memfd frames carry a u64 size");
	check(!(h.flags & MSG_F_FD) || have_fd, "fd flag has an fd");
}

static void
recv_record(const uint8_t *rec, size_t got)
{
	static int sv[2] = { -1, -1 };
	struct msg m;
	int rc;

	/*
	 * An empty record reads as end-of-file on SOCK_SEQPACKET and is not
	 * consumed by msg_recv(), so it is left out; records the socket buffer
	 * cannot take are too.
	 */
	if (got == 0 || got > 65536)
		return;
	if (sv[0] < 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC |
	    SOCK_NONBLOCK, 0, sv) < 0) {
		perror("socketpair");
		abort();
	}
	check(send(sv[0], rec, got, MSG_NOSIGNAL) == (ssize_t)got, "send record");
	msg_init(&m);
	rc = msg_recv(sv[1], &m, MSG_BLOB_MAX);
	check(rc == 1 || rc == -EBADMSG, "msg_recv returns a frame or -EBADMSG");
	if (rc == 1) {
		check(got == sizeof(m.hdr) + m.hdr.len, "frame is the whole record");
		check(m.len == m.hdr.len, "payload length");
		check(m.len == 0 || memcmp(m.data, rec + sizeof(m.hdr), m.len) == 0,
		    "payload bytes");
		check(m.fd == -1 && (m.hdr.flags & (MSG_F_MEMFD | MSG_F_FD)) == 0,
		    "no descriptor was sent, so none is announced");
	}
	msg_clear(&m);
	check(msg_recv(sv[1], &m, MSG_BLOB_MAX) == -EAGAIN, "record consumed");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	check_hdr(data + 1, size - 1, data[0] & 1);
	recv_record(data + 1, size - 1);
	return 0;
}
