#pragma once
// The graphs users read first. Each builds a Graph with the DSL; the CLI, tests and benchmarks
// look them up by name.
#include <functional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct Example {
  std::string name;
  std::string description;
  std::function<Graph()> build;
  std::string family = "";  // the benchmark case it belongs to (softmax for softmax_32k_bf16); "" = name
  // Run-time values that random ones would make meaningless (a decode step's lengths), set over
  // the random inputs; nullptr: all random.
  std::function<void(TensorMap&)> inputs = nullptr;
};

const std::vector<Example>& examples();
// O = attention(q, k, v) over [batch, heads, n, d] bf16 and, given "do", dq, dk, dv from dsl::grad
// (dsl_examples/training.cpp; tests build it at their own shapes). With `group` > 1, K/V heads
// shared by that many query heads: q [batch, heads / group, group, n, d], k and v [batch,
// heads / group, 1, n, d].
Graph attention_train_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d,
                            bool causal, int64_t group = 1);
// O = attention(q, k, v) of q_heads query heads over kv_heads K/V heads (q [batch, kv_heads,
// group, n_q, d], k and v [batch, kv_heads, 1, n_kv, d], bf16), causal or not
// (dsl_examples/attention.cpp; tests build it at their own shapes).
Graph attention_grouped_graph(const std::string& name, int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t n_q,
                              int64_t n_kv, int64_t d, bool causal);
// O = attention(q, k, v) over [batch, heads, n, d] bf16, causal, each query seeing only the
// `window` keys up to its own: where(i_q ≥ i_k, where(i_q − i_k < window, s, −inf), −inf)
// (dsl_examples/attention.cpp; tests build it at their own shapes).
Graph attention_window_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d,
                             int64_t window);
// The off-benchmark family (dsl_examples/family.cpp): `tilefuse` knows them beside the examples.
const std::vector<Example>& family_examples();
// The attention family (dsl_examples/attention.cpp): prefill's head dimensions, odd lengths,
// grouped heads and score variants at benchmark size.
const std::vector<Example>& attention_family_examples();
// Throws GraphError listing the known names when `name` is unknown.
const Example& find_example(const std::string& name);

}  // namespace tilefuse
