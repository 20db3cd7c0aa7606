/*
 * msg.c - framing for the dispatcher <-> worker <-> sandbox-init channels.
 *
 * Both ends use these two functions over SOCK_SEQPACKET sockets, so there is
 * one codec and one set of bounds. Receiving takes the whole record in one
 * call into a buffer of the largest size a record may have (MSG_MAX past
 * the header; one per process, under a lock), checks the header against
 * what arrived, and only then allocates exactly the announced payload and
 * copies it: no length from a peer reaches malloc() unchecked. (It peeked
 * at the header first, a second system call for each of the ~16 records a
 * /bin/true job's processes exchange: docs/decisions.md, "Throughput,
 * third round".)
 *
 * Blobs above MSG_MAX go through a memfd sealed against writes, growth and
 * shrinking before it is sent, so the receiver reads a snapshot the sender can
 * no longer change under it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "msg.h"
#include "xmalloc.h"

#define MEMFD_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

void
msg_init(struct msg *m)
{
	memset(m, 0, sizeof(*m));
	m->fd = -1;
}

void
msg_clear(struct msg *m)
{
	free(m->data);
	if (m->fd >= 0)
		close(m->fd);
	msg_init(m);
}

const char *
msg_type_name(uint32_t type)
{
	switch (type) {
	case MSG_JOB_RUN: return "JOB_RUN";
	case MSG_SHUTDOWN: return "SHUTDOWN";
	case MSG_HELLO: return "HELLO";
	case MSG_JOB_DONE: return "JOB_DONE";
	case MSG_JOB_COMMITTED: return "JOB_COMMITTED";
	case MSG_JOB_OUTPUT: return "JOB_OUTPUT";
	case MSG_LOG: return "LOG";
	case MSG_SBX_SPEC: return "SBX_SPEC";
	case MSG_SBX_READY: return "SBX_READY";
	case MSG_SBX_EXEC: return "SBX_EXEC";
	case MSG_SBX_EXIT: return "SBX_EXIT";
	case MSG_SBX_FAIL: return "SBX_FAIL";
	case MSG_SBX_GO: return "SBX_GO";
	case MSG_SBX_PIPE: return "SBX_PIPE";
	case MSG_SBX_NOTIFY: return "SBX_NOTIFY";
	case MSG_SBX_COMMIT: return "SBX_COMMIT";
	case MSG_SBX_CHANGES: return "SBX_CHANGES";
	case MSG_SBX_SNAPSHOT: return "SBX_SNAPSHOT";
	case MSG_JOB_TENANT: return "JOB_TENANT";
	case MSG_SBX_BASE: return "SBX_BASE";
	case MSG_SBX_BASE_NEXT: return "SBX_BASE_NEXT";
	case MSG_SPAWN_REQ: return "SPAWN_REQ";
	case MSG_SPAWN_DONE: return "SPAWN_DONE";
	case MSG_SPAWN_PIDFD: return "SPAWN_PIDFD";
	case MSG_SPAWN_LAYERS: return "SPAWN_LAYERS";
	case MSG_SPAWN_LAYERS_DONE: return "SPAWN_LAYERS_DONE";
	case MSG_SBX_IMAGE: return "SBX_IMAGE";
	case MSG_SBX_WARM: return "SBX_WARM";
	case MSG_JOB_NET: return "JOB_NET";
	case MSG_SPAWN_LISTEN: return "SPAWN_LISTEN";
	case MSG_SPAWN_LISTEN_DONE: return "SPAWN_LISTEN_DONE";
	case MSG_EGRESS_JOB: return "EGRESS_JOB";
	case MSG_EGRESS_END: return "EGRESS_END";
	case MSG_EGRESS_CONN: return "EGRESS_CONN";
	case MSG_EGRESS_ENDED: return "EGRESS_ENDED";
	case MSG_EGRESS_LISTEN: return "EGRESS_LISTEN";
	default: return "unknown";
	}
}

/* Writes all of buf into a new sealed memfd; returns the fd or -errno. */
static int
blob_to_memfd(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t off = 0;
	int fd, rc;

	fd = memfd_create("sandq-blob", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, p + off, len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out_close;
		}
		off += (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, MEMFD_SEALS) < 0) {
		rc = -errno;
		goto out_close;
	}
	return fd;
out_close:
	close(fd);
	return rc;
}

int
msg_send(int sock, uint32_t type, uint32_t job_id, const void *data,
    size_t len, int fd)
{
	struct msg_hdr h = { .type = type, .job_id = job_id,
	    .version = MSG_VERSION };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(2 * sizeof(int))];
	} cm;
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 1 };
	int fds[2], nfds = 0, memfd = -1, rc;
	uint64_t blob_len = len;

	if (len > MSG_BLOB_MAX)
		return -EMSGSIZE;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	if (len > MSG_MAX) {
		if ((memfd = blob_to_memfd(data, len)) < 0)
			return memfd;
		h.flags |= MSG_F_MEMFD;
		h.len = sizeof(blob_len);
		iov[1].iov_base = &blob_len;
		iov[1].iov_len = sizeof(blob_len);
		mh.msg_iovlen = 2;
		fds[nfds++] = memfd;
	} else if (len > 0) {
		h.len = (uint32_t)len;
		iov[1].iov_base = (void *)(uintptr_t)data;
		iov[1].iov_len = len;
		mh.msg_iovlen = 2;
	}
	if (fd >= 0) {
		h.flags |= MSG_F_FD;
		fds[nfds++] = fd;
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
	for (;;) {
		if (sendmsg(sock, &mh, MSG_NOSIGNAL) >= 0) {
			rc = 0;
			break;
		}
		if (errno != EINTR) {
			rc = -errno;
			break;
		}
	}
	if (memfd >= 0)
		close(memfd);
	return rc;
}

int
msg_check_hdr(const struct msg_hdr *h, size_t got, bool have_fd)
{
	if (got < sizeof(*h))
		return -EBADMSG;
	if (h->version != MSG_VERSION)
		return -EBADMSG;
	if (h->flags & ~(uint16_t)(MSG_F_MEMFD | MSG_F_FD))
		return -EBADMSG;
	if (h->len > MSG_MAX)
		return -EBADMSG;
	if ((h->flags & MSG_F_MEMFD) && h->len != sizeof(uint64_t))
		return -EBADMSG;
	if (got != sizeof(*h) + h->len)
		return -EBADMSG;
	if (((h->flags & MSG_F_FD) != 0) && !have_fd)
		return -EBADMSG;
	return 0;
}

/* Reads a sealed memfd blob of exactly size bytes into a new buffer. */
static int
memfd_read(int fd, uint64_t size, size_t max_blob, uint8_t **out)
{
	struct stat st;
	uint8_t *buf;
	size_t off = 0;
	int seals;

	if (size > max_blob || size <= MSG_MAX)
		return -EBADMSG;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & MEMFD_SEALS) != MEMFD_SEALS)
		return -EBADMSG;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != size)
		return -EBADMSG;
	buf = xmalloc((size_t)size);
	while (off < size) {
		ssize_t n = pread(fd, buf + off, (size_t)size - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return n < 0 ? -errno : -EBADMSG;
		}
		off += (size_t)n;
	}
	*out = buf;
	return 0;
}

/*
 * Where records land: the largest a peer may send, and one byte more so a
 * longer one shows as such even where MSG_TRUNC is not reported. Static,
 * so untouched pages cost nothing (a fork's copy included); the lock is
 * for sandqd, whose threads may receive at once.
 */
static struct {
	struct msg_hdr h;
	uint8_t payload[MSG_MAX + 1];
} rbuf;
static pthread_mutex_t rbuf_lock = PTHREAD_MUTEX_INITIALIZER;

int
msg_recv(int sock, struct msg *m, size_t max_blob)
{
	struct msg_hdr h;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(2 * sizeof(int))];
	} cm;
	struct iovec iov[2] = { { &rbuf.h, sizeof(rbuf.h) },
	    { rbuf.payload, sizeof(rbuf.payload) } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2,
	    .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	int fds[2] = { -1, -1 }, nfds = 0, rc;
	uint8_t *payload = NULL;
	bool bad;
	ssize_t n;

	msg_clear(m);
	if (max_blob > MSG_BLOB_MAX)
		max_blob = MSG_BLOB_MAX;

	/* The whole record at once, then checked before anything is allocated. */
	memset(&cm, 0, sizeof(cm));
	memset(&h, 0, sizeof(h));
	pthread_mutex_lock(&rbuf_lock);
	do {
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		rc = n == 0 ? 0 : errno == EWOULDBLOCK ? -EAGAIN : -errno;
		pthread_mutex_unlock(&rbuf_lock);
		return rc;
	}
	memcpy(&h, &rbuf.h, (size_t)n < sizeof(h) ? (size_t)n : sizeof(h));
	/* A record longer than any a peer may send is cut, and refused. */
	bad = (size_t)n < sizeof(h) || h.len > MSG_MAX || (size_t)n != sizeof(h) + h.len ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
	if (!bad && h.len > 0) {
		payload = xmalloc(h.len);
		memcpy(payload, rbuf.payload, h.len);
	}
	pthread_mutex_unlock(&rbuf_lock);
	/* Descriptors taken in any case, so a refused record's are closed. */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < 2)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	rc = -EBADMSG;
	if (bad)
		goto out_free;
	/* Exactly as many descriptors as the flags announce. */
	if (nfds != !!(h.flags & MSG_F_MEMFD) + !!(h.flags & MSG_F_FD))
		goto out_free;
	if ((rc = msg_check_hdr(&h, (size_t)n, nfds > 0)) < 0)
		goto out_free;

	m->hdr = h;
	m->fd = -1;
	if (h.flags & MSG_F_MEMFD) {
		uint64_t size;

		memcpy(&size, payload, sizeof(size));
		free(payload);
		payload = NULL;
		if ((rc = memfd_read(fds[0], size, max_blob, &m->data)) < 0)
			goto out_free;
		close(fds[0]);
		fds[0] = -1;
		m->len = (size_t)size;
		if (h.flags & MSG_F_FD) {
			m->fd = fds[1];
			fds[1] = -1;
		}
	} else {
		m->data = payload;
		m->len = h.len;
		payload = NULL;
		if (h.flags & MSG_F_FD) {
			m->fd = fds[0];
			fds[0] = -1;
		}
	}
	return 1;

out_free:
	free(payload);
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}
