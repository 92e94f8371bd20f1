#pragma once
// The attention loop in Tile IR v2: O = softmax(Q·Kᵀ·scale)·V with the scores never leaving
// registers (FlashAttention-2 on mma.sync m16n8k16). Each block holds BM query rows of one
// (batch, head) — a warp per 16 rows, its Q fragments loaded once — and loops over the keys BN
// at a time, K and V tiles staged through two-stage shared rings (cp.async), carrying the output
// accumulator O, the running row max m and the running row sum l:
//
//   s = Q·Kⱼᵀ·scale (masked to −inf past the last key);  m' = max(m, rowmax s)
//   c = m' (0 while m' is −inf);  α = e^(m − c);  p = e^(s − c)
//   l' = l·α + rowsum p;  O' = O·α + bf16(p)·Vⱼ  (p stays in registers: the accumulator's
//   layout of two 8-column pieces is the next dot's A fragment — `convert`)
//
// and stores O / l (0 for a row with no finite score, as softmax gives). The fusion pass does not
// produce this kernel yet: tests and the attention issue's next step build it from its shape.
#include <cstdint>
#include <string>

#include "compiler/graph/dtype.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

struct AttentionShape {
  int64_t batch_heads = 1;  // B·H: q and o are [batch_heads, n_q, d], k and v [batch_heads, n_kv, d]
  int64_t n_q = 0, n_kv = 0, d = 64;
  DType dtype = DType::BF16;  // of q, k, v and o: bf16 or f16
  double scale = 0.125;
  int block_m = 64, block_n = 64;  // query rows per block (16 per warp), keys per loop step
};

// Throws Error naming what is unsupported (d other than 16, 32, 64, 128, 256; f32; tiles).
Program attention_program(const AttentionShape& s, const std::string& name = "attention");

}  // namespace tilefuse::tir
