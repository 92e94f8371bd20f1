#pragma once
// The attention backward in Tile IR v2, FlashAttention-2's form with no atomics: given the
// forward's q, k and v, the gradient dO of its output, each query row's log-sum-exp L = c + ln h
// (from the forward's shift c and divisor h: P = e^(S·scale − c) / h = e^(S·scale − L), with no
// max or sum of its own) and D = rowsum(dO∘O), two kernels recompute the
// probabilities tile by tile rather than read an N×N matrix:
//
//   keys:    a block per tile of keys, K and V resident, a loop over the query tiles:
//              Sᵀ = K·Qᵀ;  Pᵀ = e^(Sᵀ·scale − L);  dV += Pᵀ·dO
//              dPᵀ = V·dOᵀ;  dSᵀ = Pᵀ∘(dPᵀ − D);  dK += dSᵀ·Q        then dK·scale and dV
//   queries: a block per tile of queries, Q and dO resident, a loop over the key tiles:
//              S = Q·Kᵀ;  P = e^(S·scale − L);  dP = dO·Vᵀ;  dS = P∘(dP − D);  dQ += dS·K
//            then dQ·scale
//   all:     the keys kernel that also adds up dQ (sm_90a, wgmma): each step stores dSᵀ to shared
//            memory and adds its dS·K into an f32 workspace (red.global.add); the last of a K/V
//            head's key blocks to finish converts the head's dQ (·scale, to the inputs' dtype)
//            and zeroes the workspace for the next launch — 5 products where the two kernels
//            take 7, dQ's sums in an order that differs from run to run. Fed by TMA (128 keys,
//            d 128): dQᵀ = Kᵀ·dSᵀ, each warpgroup its 64 of d, added by TMA's reductions from
//            staged f32 panels into a column-major workspace (dQᵀ per query head)
//
// Both are one loop: the block's rows' operands A₁, A₂ (K, V or Q, dO) wait in shared memory,
// the other side's B₁, B₂ (Q, dO or K, V) come through two-stage rings — every thread's cp.async,
// or on wgmma a producer warpgroup's TMA copies (`tma`) — each stage read twice: transposed for
// the scores (A·Bᵀ) and as it is for the gradient's product, on mma.sync m16n8k16 or wgmma. P
// and dS stay in registers: their accumulator tiles are the next products' A fragments, rounded
// to the inputs' dtype as the forward rounds P. The queries kernel does the scores' two products
// again (7 products in all against 5 with dQ added up across the keys' blocks), but no block
// waits for another and dQ comes out the same on every run.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"
#include "compiler/graph/dtype.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

struct AttentionBackwardShape {
  // q, o, dO: [batch_heads, n_q, d]; k, v: [batch_heads / group, n_kv, d]; L and D:
  // [batch_heads, n_q].
  int64_t batch_heads = 1, n_q = 0, n_kv = 0, d = 64;
  // Query heads per K/V head (GQA, MQA), a K/V head's consecutive: the keys kernel's block sums
  // dK and dV over its K/V head's query heads (looping over each one's query tiles in turn).
  int64_t group = 1;
  DType dtype = DType::BF16;  // of q, k, v, dO and the gradients: bf16 or f16
  double scale = 0.125;
  // Which gradients the kernel computes: dK and dV (a block per key tile), dQ (a block per
  // query tile), or all three (a block per key tile, dQ added up across them; wgmma only).
  enum class Part { Keys, Queries, All };
  Part part = Part::Keys;
  int block_rows = 64;  // the block's keys (Keys) or queries (Queries): 16 per warp
  int block_cols = 64;  // the other side's per loop step (attention_backward_block_cols)
  // All five products on warpgroup MMA (sm_90a wgmma) from the rings — A₁ and A₂ from their
  // tiles, B read transposed for the scores — P and dS as register operands; d 64 or 128.
  bool wgmma = false;
  // On wgmma (the part All: 128 rows at d 128, its sums by TMA), warp-specialized: a producer
  // warpgroup's one thread copies the block's A₁, A₂ once and each step's B₁, B₂ by TMA into the
  // rings (mbarriers full and empty per stage), so the consumers issue no copies or their
  // addresses. At 64 rows two blocks an SM as
  // before (the producer at 24 registers, the consumers at the rest of 128 a thread: 232); at
  // 128, one (the consumers at 240).
  bool tma = false;
  // Query i sees no key past i + causal_offset: the loops skip the tiles wholly past it and mask
  // the rest.
  std::optional<int64_t> causal_offset;
  // The parameters: the inputs q, k, v, do, lse (L) and delta (D) in the order
  // `position` gives (position[i] is input i's place), then the gradients `outputs` lists — by
  // default the part's: dk and dv, dq, or all three. The part All then takes its workspace: dQ's
  // f32 sums of every query row, then a u32 counter per K/V head (zero at the first launch; each
  // launch leaves it zero; TileSchedule::workspace_bytes sizes it).
  enum class Grad { Q, K, V };
  // L as given: L itself, or M = −L·log2 e (`lse_scaled`), the exponent's shift in base 2, as
  // autodiff's graphs give it; the keys kernel then reads it as it uses it (no multiply a column a
  // step). (D is negated in the kernel: given −D, its dP's product started from the loaded values
  // themselves, and in the causal keys kernel ptxas 13.0 then serialized the wgmmas, C7511.)
  bool lse_scaled = false;
  std::array<std::string, 6> names = {"q", "k", "v", "do", "lse", "delta"};
  std::array<int, 6> position = {0, 1, 2, 3, 4, 5};
  struct Output {
    Grad grad;
    std::string name;
  };
  std::vector<Output> outputs;
};

// The columns a step takes: 64, but on mma.sync 32 for dK and dV at d 128, whose two
// accumulators take 128 registers of each thread — at 64 the step's scores, P and dP beside them
// (and the K and V fragments) spilled ~500 bytes; at 32 ptxas still keeps 4–12 bytes of the
// causal step in local memory (sm_80, sm_90). On wgmma, with no fragments of K and V in
// registers, 64 keeps 4 bytes there and ran 20% faster than 32 (bench/NOTES.md).
inline int attention_backward_block_cols(int64_t d, AttentionBackwardShape::Part part, bool wgmma) {
  return !wgmma && part == AttentionBackwardShape::Part::Keys && d > 64 ? 32 : 64;
}

// Throws Error naming what is unsupported (d other than 16, 32, 64, 128; f32; a gradient of the
// other part).
Program attention_backward_program(const AttentionBackwardShape& s,
                                   const std::string& name = "attention_backward");

// The program of an attention backward kernel of a plan (ScheduleKind::AttentionBackward): its
// chain's shape, scale and causal mask, its parameters in the kernel's order.
Program attention_backward_kernel_program(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
