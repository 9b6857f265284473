#!/bin/sh
# tests/http/serve.sh with both coordinators under valgrind memcheck: every
# hostile client, hang-up and shutdown path must leave no memcheck error
# and no definitely lost block (an error exit or a non-empty log fails).
VALGRIND=1 exec sh tests/http/serve.sh "$@"
