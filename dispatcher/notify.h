/*
 * notify.h - sandqd's readiness and state for systemd (sd_notify(3)).
 *
 * deploy/sandqd.service is Type=notify: systemd holds `systemctl start` and
 * the units ordered after sandqd until READY=1, sent once Redis answered and
 * the workers are forked; STOPPING=1 when a drain starts; RELOADING=1 then
 * READY=1 around a SIGHUP reload. Each is a datagram to $NOTIFY_SOCKET, a
 * no-op when it is unset (started by hand, or by a test that reads them).
 *
 * Debian's libsystemd sends them. A build without it (HAVE_LIBSYSTEMD
 * unset: the Makefile found no libsystemd.pc) gets the no-op stubs below,
 * and its unit must be Type=exec (docs/operations.md "systemd").
 */
#ifndef SANDQ_DISPATCHER_NOTIFY_H
#define SANDQ_DISPATCHER_NOTIFY_H

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

/* Sends state (e.g. "READY=1\nSTATUS=..."); errors are not the daemon's. */
static inline void
notify_send(const char *state)
{
	(void)sd_notify(0, state);
}
#else
static inline void
notify_send(const char *state)
{
	(void)state;
}
#endif

#endif
