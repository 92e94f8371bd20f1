#include "dsl_examples/examples.h"

#include <fmt/format.h>

#include "compiler/support/error.h"

namespace tilefuse {

Graph bias_gelu(DType dtype);
Graph gelu_two_consumers();
Graph softmax_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype);
Graph log_softmax_graph(int64_t rows, int64_t cols);
Graph shift_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype);
Graph layernorm_graph(DType dtype);
Graph rmsnorm_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype);
Graph column_sum_graph(DType dtype);
Graph matmul_graph(const std::string& name, int64_t m, int64_t n, int64_t k, bool bias_gelu);
Graph attention_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d, bool causal);
Graph mlp_train_graph(const std::string& name, int64_t tokens, int64_t width, int64_t hidden, DType dtype);
Graph attention_decode_step_graph(const std::string& name, int64_t batch, int64_t q_heads, int64_t kv_heads,
                                  int64_t max_len, int64_t d);
void decode_step_lengths(TensorMap& inputs, int64_t batch, int64_t max_len);

const std::vector<Example>& examples() {
  static const std::vector<Example> all = {
      {"bias_gelu", "gelu(x + b), x f32[8192, 8192], b f32[8192]: one kernel instead of two",
       [] { return bias_gelu(DType::F32); }, "bias_gelu"},
      {"bias_gelu_bf16", "gelu(x + b) in bf16 (f32 arithmetic inside the kernel)",
       [] { return bias_gelu(DType::BF16); }, "bias_gelu"},
      {"gelu_two_consumers", "y = gelu(x + b); out1 = y * 2; out2 = y + x: a shared producer",
       gelu_two_consumers},
      {"softmax", "softmax(x, -1), x f32[16384, 4096]: max, exp, sum, divide in one kernel",
       [] { return softmax_graph("softmax", 16384, 4096, DType::F32); }, "softmax"},
      {"softmax_bf16", "softmax(x, -1), x bf16[16384, 4096], f32 accumulation",
       [] { return softmax_graph("softmax", 16384, 4096, DType::BF16); }, "softmax"},
      {"softmax_32k", "softmax of x f32[4096, 32768]: one persistent block per row, staged",
       [] { return softmax_graph("softmax_32k", 4096, 32768, DType::F32); }, "softmax"},
      {"softmax_32k_bf16", "softmax of x bf16[4096, 32768]",
       [] { return softmax_graph("softmax_32k", 4096, 32768, DType::BF16); }, "softmax"},
      {"softmax_256k", "softmax of x f32[2048, 262144]: rows of 1 MB staged over a cluster of 8 blocks",
       [] { return softmax_graph("softmax_256k", 2048, 262144, DType::F32); }, "softmax"},
      {"softmax_256k_bf16", "softmax of x bf16[2048, 262144]",
       [] { return softmax_graph("softmax_256k", 2048, 262144, DType::BF16); }, "softmax"},
      {"shift_32k", "x − max(x) over rows of x f32[4096, 32768]: the row schedule's own cost",
       [] { return shift_graph("shift_32k", 4096, 32768, DType::F32); }},
      {"shift_32k_bf16", "x − max(x) over rows of x bf16[4096, 32768]",
       [] { return shift_graph("shift_32k", 4096, 32768, DType::BF16); }},
      {"log_softmax", "log_softmax(x, -1), x f32[16384, 4096]",
       [] { return log_softmax_graph(16384, 4096); }},
      {"layernorm", "layernorm over the last axis of x f32[16384, 4096], weight and bias f32[4096]",
       [] { return layernorm_graph(DType::F32); }, "layernorm"},
      {"layernorm_bf16", "layernorm over the last axis of x bf16[16384, 4096]",
       [] { return layernorm_graph(DType::BF16); }, "layernorm"},
      {"rmsnorm", "RMSNorm over the last axis of x f32[16384, 4096], weight f32[4096]",
       [] { return rmsnorm_graph("rmsnorm", 16384, 4096, DType::F32); }, "rmsnorm"},
      {"rmsnorm_bf16", "RMSNorm over the last axis of x bf16[16384, 4096]",
       [] { return rmsnorm_graph("rmsnorm", 16384, 4096, DType::BF16); }, "rmsnorm"},
      {"rmsnorm_32k", "RMSNorm of x f32[4096, 32768]: one reduction per long row, staged",
       [] { return rmsnorm_graph("rmsnorm_32k", 4096, 32768, DType::F32); }},
      {"rmsnorm_32k_bf16", "RMSNorm of x bf16[4096, 32768]",
       [] { return rmsnorm_graph("rmsnorm_32k", 4096, 32768, DType::BF16); }},
      {"column_sum",
       "sum(x, {0}) of x f32[8192, 8192]: a bias gradient's reduction over rows, split over blocks",
       [] { return column_sum_graph(DType::F32); }, "column_sum"},
      {"column_sum_bf16", "sum(x, {0}) of x bf16[8192, 8192], f32 accumulation",
       [] { return column_sum_graph(DType::BF16); }, "column_sum"},
      {"matmul", "a · b, a and b bf16[8192, 8192]: tensor cores (wgmma on sm_90a), f32 accumulation",
       [] { return matmul_graph("matmul", 8192, 8192, 8192, false); }},
      {"matmul_4096", "a · b, a and b bf16[4096, 4096]: 512 tiles of 128×256, under four waves of 132 SMs",
       [] { return matmul_graph("matmul_4096", 4096, 4096, 4096, false); }, "matmul"},
      {"matmul_ffn", "a · b, a bf16[8192, 4096], b [4096, 28672]: a feed-forward layer's up-projection",
       [] { return matmul_graph("matmul_ffn", 8192, 28672, 4096, false); }, "matmul"},
      {"matmul_k1024",
       "a · b, a bf16[16384, 1024], b [1024, 4096]: a short product, its bytes near its flops in time",
       [] { return matmul_graph("matmul_k1024", 16384, 4096, 1024, false); }, "matmul"},
      {"matmul_odd", "a · b, a bf16[8191, 4097], b [4097, 4095]: no extent a multiple of the tile or of 8",
       [] { return matmul_graph("matmul_odd", 8191, 4095, 4097, false); }, "matmul"},
      {"matmul_m1", "a · b, a bf16[1, 8192], b [8192, 8192]: one token's projection, bound by streaming b",
       [] { return matmul_graph("matmul_m1", 1, 8192, 8192, false); }, "matmul"},
      {"matmul_m16",
       "a · b, a bf16[16, 8192], b [8192, 8192]: a decode batch's projection, bound by streaming b",
       [] { return matmul_graph("matmul_m16", 16, 8192, 8192, false); }, "matmul"},
      {"matmul_bias_gelu", "gelu(a · b + bias) in bf16, a [8192, 4096], b [4096, 8192]: the epilogue fused",
       [] { return matmul_graph("matmul_bias_gelu", 8192, 8192, 4096, true); }},
      {"matmul_bias_gelu_k1024",
       "gelu(a · b + bias) in bf16, a [16384, 1024], b [1024, 4096]: exact GELU fused, "
       "against cuBLASLt's tanh-GELU epilogue",
       [] { return matmul_graph("matmul_bias_gelu_k1024", 16384, 4096, 1024, true); }, "matmul_bias_gelu"},
      {"attention",
       "softmax(q·kᵀ/√d)·v, q, k, v bf16[8, 32, 4096, 128]: one kernel over the keys, no scores written",
       [] { return attention_graph("attention", 8, 32, 4096, 128, false); }},
      {"attention_causal",
       "causal softmax(q·kᵀ/√d)·v, bf16[8, 32, 4096, 128]: the mask from iotas, key tiles past "
       "each block's last query skipped",
       [] { return attention_graph("attention_causal", 8, 32, 4096, 128, true); }, "attention"},
      {"attention_gqa",
       "softmax(q·kᵀ/√d)·v, q bf16[8, 8, 4, 4096, 128], k, v [8, 8, 1, 4096, 128]: 32 query heads "
       "over 8 K/V heads, broadcast",
       [] { return attention_grouped_graph("attention_gqa", 8, 32, 8, 4096, 4096, 128, false); },
       "attention"},
      {"attention_small", "softmax(q·kᵀ/√d)·v, bf16[2, 3, 200, 64]: small enough to check against float64",
       [] { return attention_graph("attention_small", 2, 3, 200, 64, false); }, "attention"},
      {"attention_decode",
       "one query per head over a cache: q bf16[8, 32, 1, 128], k, v [8, 32, 4096, 128] (the "
       "prefill rule, a block per head; no lengths or cache write yet)",
       [] { return attention_grouped_graph("attention_decode", 8, 32, 32, 1, 4096, 128, false); },
       "attention_decode"},
      {"attention_decode_gqa",
       "one query per head, 4 query heads per K/V head: q bf16[8, 8, 4, 1, 128], k, v "
       "[8, 8, 1, 32768, 128] (a K/V head's query heads in one block, the keys split 4 ways)",
       [] { return attention_grouped_graph("attention_decode_gqa", 8, 32, 8, 1, 32768, 128, false); },
       "attention_decode"},
      // The decode grid: longer caches, one sequence, many sequences, many query heads per K/V head.
      {"attention_decode_32k",
       "one query per head over 32768 keys: q bf16[8, 32, 1, 128], k, v [8, 32, 32768, 128]",
       [] { return attention_grouped_graph("attention_decode_32k", 8, 32, 32, 1, 32768, 128, false); },
       "attention_decode"},
      {"attention_decode_128k",
       "one sequence of 131072 keys: q bf16[1, 32, 1, 128], k, v [1, 32, 131072, 128] "
       "(split-KV fills the SMs)",
       [] { return attention_grouped_graph("attention_decode_128k", 1, 32, 32, 1, 131072, 128, false); },
       "attention_decode"},
      {"attention_decode_gqa_b64",
       "64 sequences, 4 query heads per K/V head: q bf16[64, 8, 4, 1, 128], k, v "
       "[64, 8, 1, 4096, 128]",
       [] { return attention_grouped_graph("attention_decode_gqa_b64", 64, 32, 8, 1, 4096, 128, false); },
       "attention_decode"},
      {"attention_decode_gqa_128k",
       "one sequence, 8 query heads per K/V head: q bf16[1, 8, 8, 1, 128], k, v "
       "[1, 8, 1, 131072, 128]",
       [] { return attention_grouped_graph("attention_decode_gqa_128k", 1, 64, 8, 1, 131072, 128, false); },
       "attention_decode"},
      {"attention_decode_step",
       "a decode step: the new k, v written into caches bf16[8, 8, 1, 4096, 128] in place at "
       "each sequence's length (2048 … 4095, ragged), then 4 query heads per K/V head attending over length "
       "+ 1 keys",
       [] { return attention_decode_step_graph("attention_decode_step", 8, 32, 8, 4096, 128); },
       "attention_decode", [](TensorMap& in) { decode_step_lengths(in, 8, 4096); }},
      {"mlp_train",
       "y = gelu(x·W1 + b1)·W2 and, given dL/dy, dx, dW1, db1, dW2 from dsl::grad: x bf16[8192, 4096], "
       "W1 [4096, 16384]",
       [] { return mlp_train_graph("mlp_train", 8192, 4096, 16384, DType::BF16); }},
      {"mlp_train_small",
       "the same step at x bf16[64, 96], W1 [96, 160]: small enough to check against float64",
       [] { return mlp_train_graph("mlp_train_small", 64, 96, 160, DType::BF16); }, "mlp_train"},
      {"attention_train",
       "attention over q, k, v bf16[8, 32, 4096, 128] and, given dL/dO, dq, dk, dv: the forward "
       "one kernel, the backward two that recompute P from its row statistics (dK, dV over the query tiles; "
       "dQ over the keys)",
       [] { return attention_train_graph("attention_train", 8, 32, 4096, 128, false); }},
      {"attention_train_causal", "the same step with a causal mask",
       [] { return attention_train_graph("attention_train_causal", 8, 32, 4096, 128, true); },
       "attention_train"},
      {"attention_train_small",
       "the same step at bf16[2, 3, 100, 64], causal: small enough to check against float64",
       [] { return attention_train_graph("attention_train_small", 2, 3, 100, 64, true); }, "attention_train"},
  };
  return all;
}

const Example& find_example(const std::string& name) {
  std::vector<std::string> names;
  for (const Example& e : examples()) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  throw GraphError(
      fmt::format("unknown example '{}'; known: {} (see `tilefuse list`)", name, fmt::join(names, ", ")));
}

}  // namespace tilefuse
