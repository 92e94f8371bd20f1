// The tilefuse CLI over the built-in examples, the off-benchmark family and the attention family (tools/tilefuse/cli.h).
#include "dsl_examples/examples.h"
#include "tools/tilefuse/cli.h"

int main(int argc, char** argv) {
  std::vector<tilefuse::Example> graphs = tilefuse::examples();
  graphs.insert(graphs.end(), tilefuse::family_examples().begin(), tilefuse::family_examples().end());
  graphs.insert(graphs.end(), tilefuse::attention_family_examples().begin(),
                tilefuse::attention_family_examples().end());
  return tilefuse::run_cli(argc, argv, graphs);
}
