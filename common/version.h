/*
 * version.h — the one version string every shardline program prints for
 * --version: `git describe` of the tree it was built from (the Makefile
 * passes it to version.c), or the release constant below when built
 * outside a git checkout.
 */
#ifndef SL_VERSION_H
#define SL_VERSION_H

#define SL_VERSION_RELEASE "0.1.0"

/* "0.1.0 (git 3be0846-dirty)", or "0.1.0" without git. */
const char *sl_version(void);
/* When argv[1] is --version: prints "PROGRAM VERSION" on stdout and
 * returns 1 (main then returns 0); else 0. Only the first argument is
 * looked at, so text arguments that happen to read --version stay text. */
int sl_version_asked(int argc, char **argv, const char *program);

#endif
