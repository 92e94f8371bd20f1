#include "dsl_examples/examples.h"

#include <fmt/format.h>

#include "compiler/support/error.h"

namespace tilefuse {

Graph bias_gelu(DType dtype);
Graph gelu_two_consumers();

const std::vector<Example>& examples() {
  static const std::vector<Example> all = {
      {"bias_gelu", "gelu(x + b), x f32[8192, 8192], b f32[8192]: one kernel instead of two",
       [] { return bias_gelu(DType::F32); }},
      {"bias_gelu_bf16", "gelu(x + b) in bf16 (f32 arithmetic inside the kernel)",
       [] { return bias_gelu(DType::BF16); }},
      {"gelu_two_consumers", "y = gelu(x + b); out1 = y * 2; out2 = y + x: a shared producer",
       gelu_two_consumers},
  };
  return all;
}

const Example& find_example(const std::string& name) {
  std::vector<std::string> names;
  for (const Example& e : examples()) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  throw GraphError(fmt::format("unknown example '{}'; known: {} (see `tilefuse list`)", name,
                               fmt::join(names, ", ")));
}

}  // namespace tilefuse
