/*
 * err.c - the error record helpers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

int
err_set(struct err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return code;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return code;
}

void
err_clear(struct err *e)
{
	if (e == NULL)
		return;
	e->code = 0;
	e->msg[0] = '\0';
}
