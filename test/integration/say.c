/* SPDX-License-Identifier: BSD-2-Clause */
#include <stdarg.h>
#include <stdio.h>

#include "say.h"

void say(const char *fmt, ...)
{
	char line[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (say_prefix)
		printf("%s: %s\n", say_prefix, line);
	else
		printf("%s\n", line);
	fflush(stdout);
}
