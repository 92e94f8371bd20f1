// The tilefuse CLI over the built-in examples (tools/tilefuse/cli.h).
#include "dsl_examples/examples.h"
#include "tools/tilefuse/cli.h"

int main(int argc, char** argv) { return tilefuse::run_cli(argc, argv, tilefuse::examples()); }
