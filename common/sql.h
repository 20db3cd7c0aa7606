/*
 * sqlerr.h - SQLite result codes as negative errno values, for the store's
 * modules (agentfs.c, store.c), so one SQLite failure reads the same from
 * either.
 */
#ifndef SANDQ_STORE_SQLERR_H
#define SANDQ_STORE_SQLERR_H

/* The -errno for a SQLite result code (extended codes included). */
int sqlerr_errno(int rc);

#endif
