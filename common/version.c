/*
 * version.c — see version.h. SL_GIT_DESCRIBE comes from the Makefile
 * (`git describe --always --dirty`, rebuilt when it changes).
 */
#include "common/version.h"

#include <stdio.h>
#include <string.h>

const char *sl_version(void)
{
#ifdef SL_GIT_DESCRIBE
	return SL_GIT_DESCRIBE[0] ? SL_VERSION_RELEASE " (git " SL_GIT_DESCRIBE ")" : SL_VERSION_RELEASE;
#else
	return SL_VERSION_RELEASE;
#endif
}

int sl_version_asked(int argc, char **argv, const char *program)
{
	if (argc < 2 || strcmp(argv[1], "--version"))
		return 0;
	printf("%s %s\n", program, sl_version());
	return 1;
}
