/*
 * serve.h — `shardline serve MODEL`: the coordinator and one node group in
 * one command (tools/serve.c). The CLI (tools/shardline.c) hands it the
 * arguments after the word "serve".
 */
#ifndef TOOLS_SERVE_H
#define TOOLS_SERVE_H

/* Runs until SIGINT/SIGTERM (then drains and stops both) or until either
 * program exits. Returns the process exit status: 0 after a clean stop,
 * 1 on a failure, 2 on bad arguments. */
int serve_main(int argc, char **argv);

#endif
