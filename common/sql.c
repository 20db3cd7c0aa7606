/*
 * sqlerr.c - SQLite result codes as negative errno values.
 */
#include <errno.h>
#include <sqlite3.h>

#include "sql.h"

int
sqlerr_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;		/* disk full, or a database at its size cap */
	case SQLITE_TOOBIG:
		return -EFBIG;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_INTERRUPT:
		return -ETIMEDOUT;	/* a deadline's progress handler */
	case SQLITE_PERM:
	case SQLITE_READONLY:
		return -EACCES;
	default:
		return -EIO;
	}
}
