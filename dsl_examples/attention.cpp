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

// The attention family (`tilefuse list` shows them beside the examples): the head dimensions,
// odd lengths and grouped heads of the prefill bar, and the variants — a softcap, ALiBi, a
// sliding window — that FlexAttention compiles from the same score function, each at
// B8 H32 N4096 bf16 (d 128 unless named). scripts/gpu_attention_family.sh times them beside cuDNN and
// FlexAttention in the same call.
namespace {

Tensor scores(const Tensor& q, const Tensor& k, int64_t d) {
  return matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(static_cast<double>(d)));
}

Tensor probs_times_v(const Tensor& s, const Tensor& v) { return matmul(cast(softmax(s), DType::BF16), v); }

struct Qkv {
  Tensor q, k, v;
};
Qkv qkv(Graph& g, int64_t n, int64_t d) {
  const Shape shape = {8, 32, n, d};
  return {input(g, "q", shape, DType::BF16), input(g, "k", shape, DType::BF16), input(g, "v", shape, DType::BF16)};
}

// tanh(s / 50)·50: Gemma 2's cap on its attention logits.
Graph softcap_graph() {
  Graph g("attention_softcap");
  Qkv t = qkv(g, 4096, 128);
  output("o", probs_times_v(tanh(scores(t.q, t.k, 128) * (1.0 / 50)) * 50.0, t.v));
  return g;
}

// Causal, plus ALiBi's bias slope[h]·(i_k − i_q), one slope per head from a tensor.
Graph alibi_graph() {
  Graph g("attention_alibi");
  Qkv t = qkv(g, 4096, 128);
  Tensor qi = iota(g, {4096, 4096}, 0), ki = iota(g, {4096, 4096}, 1);
  Tensor s = scores(t.q, t.k, 128) + input(g, "slope", {32, 1, 1}) * (ki - qi);
  output("o", probs_times_v(where(qi >= ki, s, -INFINITY), t.v));
  return g;
}

}  // namespace

Graph attention_window_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d,
                             int64_t window) {
  Graph g(name);
  const Shape shape = {batch, heads, n, d};
  Tensor q = input(g, "q", shape, DType::BF16), k = input(g, "k", shape, DType::BF16), v = input(g, "v", shape, DType::BF16);
  Tensor qi = iota(g, {n, n}, 0), ki = iota(g, {n, n}, 1);
  Tensor s = where(qi >= ki, where(qi - ki < static_cast<double>(window), scores(q, k, d), -INFINITY), -INFINITY);
  output("o", probs_times_v(s, v));
  return g;
}

const std::vector<Example>& attention_family_examples() {
  static const std::vector<Example> all = [] {
    std::vector<Example> out;
    auto add = [&](std::function<Graph()> build, const std::string& what) {
      Graph g = build();
      out.push_back({g.name(), "[attention family] " + what, std::move(build), "attention"});
    };
    for (bool causal : {false, true}) {
      const std::string c = causal ? "_causal" : "";
      const std::string how = causal ? "causal " : "";
      add([c, causal] { return attention_graph("attention_d64" + c, 8, 32, 4096, 64, causal); },
          how + "B8 H32 N4096, head dimension 64");
      add([c, causal] { return attention_graph("attention_d256" + c, 8, 32, 4096, 256, causal); },
          how + "B8 H32 N4096, head dimension 256");
      add([c, causal] { return attention_graph("attention_n4097" + c, 8, 32, 4097, 128, causal); },
          how + "B8 H32, 4097 queries and keys (one past the tiles)");
    }
    add([] { return attention_grouped_graph("attention_gqa_causal", 8, 32, 8, 4096, 4096, 128, true); },
        "causal, 32 query heads over 8 K/V heads");
    add(softcap_graph, "scores capped by tanh(s/50)·50");
    add(alibi_graph, "causal, plus ALiBi's bias slope[h]·(i_k − i_q)");
    add([] { return attention_window_graph("attention_window", 8, 32, 4096, 128, 1024); },
        "causal sliding window of 1024 keys (Mistral's)");
    return out;
  }();
  return all;
}

}  // namespace tilefuse
