// softmax(q·kᵀ·scale)·v written with the DSL's composite: two matmuls and a softmax between
// them, which fusion turns into one kernel looping over the keys (the scores never reach memory);
// causal, the mask from iota comparisons.
#include <cmath>

#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

Graph attention_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d, bool causal) {
  Graph g(name);
  const Shape shape = {batch, heads, n, d};
  Tensor q = input(g, "q", shape, DType::BF16);
  Tensor k = input(g, "k", shape, DType::BF16);
  Tensor v = input(g, "v", shape, DType::BF16);
  output("o", attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), causal));
  return g;
}

// Query heads grouped over shared K/V heads (GQA; MQA with one K/V head; group 1: one K/V head
// per query head): q [batch, kv_heads, group, n_q, d] against k, v [batch, kv_heads, 1, n_kv, d],
// the K/V heads broadcast over each group. With n_q 1, one new query per head attending over a
// whole cache (the decode step's shape through the prefill rule: no per-sequence lengths, no
// cache write yet).
Graph attention_grouped_graph(const std::string& name, int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t n_q,
                              int64_t n_kv, int64_t d, bool causal) {
  Graph g(name);
  const int64_t group = q_heads / kv_heads;
  Tensor q = input(g, "q", {batch, kv_heads, group, n_q, d}, DType::BF16);
  Tensor k = input(g, "k", {batch, kv_heads, 1, n_kv, d}, DType::BF16);
  Tensor v = input(g, "v", {batch, kv_heads, 1, n_kv, d}, DType::BF16);
  output("o", attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), causal));
  return g;
}

// A whole decode step: the new token's key and value written into the caches (k_cache, v_cache
// [batch, kv_heads, 1, max_len, d]) in place at each sequence's length, then one query per head
// attending over length + 1 keys (the mask iota < length + 1 ends each sequence's loop).
Graph attention_decode_step_graph(const std::string& name, int64_t batch, int64_t q_heads, int64_t kv_heads,
                                  int64_t max_len, int64_t d) {
  Graph g(name);
  const int64_t group = q_heads / kv_heads;
  const Shape cache = {batch, kv_heads, 1, max_len, d}, token = {batch, kv_heads, 1, 1, d};
  Tensor q = input(g, "q", {batch, kv_heads, group, 1, d}, DType::BF16);
  Tensor length = input(g, "length", {batch, 1, 1, 1, 1});
  Tensor k = write_at(input(g, "k_cache", cache, DType::BF16), input(g, "k_new", token, DType::BF16), length, 3);
  Tensor v = write_at(input(g, "v_cache", cache, DType::BF16), input(g, "v_new", token, DType::BF16), length, 3);
  Tensor s = matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(static_cast<double>(d)));
  s = where(iota(g, {1, max_len}, 1) < length + 1.0, s, -INFINITY);
  output("o", matmul(cast(softmax(s), DType::BF16), v));
  return g;
}

// Ragged lengths between half the cache and its last free slot, the same for every seed.
void decode_step_lengths(TensorMap& inputs, int64_t batch, int64_t max_len) {
  std::vector<double> lengths;
  for (int64_t b = 0; b < batch; ++b) lengths.push_back(static_cast<double>(max_len / 2 + (b * 977) % (max_len / 2)));
  inputs["length"] = TensorData::from_doubles(DType::F32, {batch, 1, 1, 1, 1}, lengths);
}

}  // namespace tilefuse
