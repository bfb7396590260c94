/* streams.c: `cinfer streams`: video sources through a pipeline (src/streams). */
#include "cli/cli.h"
#include "streams/streams.h"

int cmd_streams(int argc, char **argv) { return streams_main(argc, argv); }
