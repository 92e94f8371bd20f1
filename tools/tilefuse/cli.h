#pragma once
// The tilefuse command line as a function: `tilefuse` runs it over the built-in examples, and a
// program of a user's own can run it over its own graphs —
//
//   int main(int argc, char** argv) {
//     return tilefuse::run_cli(argc, argv, {{"my_mlp", "the MLP block", [] { return my_mlp(); }}}, "my_tool");
//   }
//
// — so that `my_tool plan my_mlp`, `tile`, `ptx`, `run --check --bench`, `bench` and `cache` work on
// them as on the examples. Returns the exit code (0 success, 1 error, 2 bad usage, 69 no GPU).
#include <string>
#include <vector>

#include "dsl_examples/examples.h"

namespace tilefuse {

int run_cli(int argc, char** argv, const std::vector<Example>& graphs, const std::string& program = "tilefuse");

}  // namespace tilefuse
