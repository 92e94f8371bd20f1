#pragma once
// The attention backward found in a gradient graph. Autodiff's rule for a contraction chain
// (compiler/dsl/autodiff.cpp) recomputes the probabilities from the forward's row values instead
// of keeping them:
//   S = Q·Kᵀ;  X = f(S);  P = e^(X − L)                L = c + ln h: the row's log-sum-exp, from
//                                                      the forward's shift c and divisor h
//                    or P = 2^(X·log2 e + M)           M = −L·log2 e (autodiff's form: read as
//                                                      the kernels use it, no multiply a column)
//   dP = dO·Vᵀ;  dS = P∘(dP − D)                        D = rowsum(dO∘O), computed before
//   dS' = cast(mask(dS)·scale)                          (f's scale; its mask's where(m, ·, 0))
//   dQ = dS'·K;  dK = dS'ᵀ·Q;  dV = cast(P)ᵀ·dO
// The gradients then come from two kernels that recompute P a tile at a time
// (tile/attention_backward.h): dK and dV from a loop over the query tiles for each key tile, dQ
// from a loop over the key tiles for each query tile. Both hold the nodes from S to dS', which
// the fusion pass puts in both (computed twice, written by neither): no N×N tensor reaches
// memory. K/V heads shared by query heads (GQA, MQA) have dK and dV summed over each K/V head's
// query heads by its block. The other form, FlashAttention-2's — all three gradients in the keys'
// kernel, dQ's products summed across its blocks into an f32 workspace (wgmma, d 64 or 128) —
// is priced beside them and kept where faster (fusion.cpp, weigh_dq_sums; its sums' traffic at
// L2 in the cost). f is S·scale (a positive constant) with at most a causal mask; other
// score functions and head dimensions other than 16–128 keep the plan that writes P and dS, and
// the match says why.
#include <optional>
#include <string>
#include <vector>

#include "compiler/fusion/device_profile.h"
#include "compiler/fusion/plan.h"

namespace tilefuse {

struct BackwardChain {
  NodeId scores = -1;                // S = Q·Kᵀ
  std::vector<NodeId> score_ops;     // X = f(S), in order
  std::vector<NodeId> index_ops;     // the causal mask's iotas and comparison
  NodeId x_log2e = -1;               // X·log2 e (P's second form), or -1
  NodeId shifted = -1;               // X − L, or X·log2 e + M
  NodeId probs = -1;                 // P = e^(X − L) or 2^(X·log2 e + M)
  NodeId probs_cast = -1;            // P in the inputs' dtype (dV's operand), or -1
  NodeId lse = -1;                   // L, or M = −L·log2 e where lse_scaled; read
  bool lse_scaled = false;
  NodeId dp = -1;                    // dO·Vᵀ
  std::vector<NodeId> ds_ops;        // from P and dP to dS' (its last), in order
  NodeId delta = -1;                 // D, read
  NodeId dq = -1, dk = -1, dv = -1;  // the gradients the graph has (-1: none)
  // dK's and dV's products (dk and dv themselves, or — K/V heads shared — what they sum over the
  // query heads of a K/V head).
  NodeId dk_product = -1, dv_product = -1;
  int64_t group = 1;  // query heads per K/V head
  NodeId q = -1, k = -1, v = -1, d_o = -1;
  double scale = 1;
  std::optional<int64_t> causal_offset;
  int64_t batch = 1, n_q = 0, n_kv = 0, d = 0;  // batch: the product of Q's leading axes
  NodeId ds() const { return ds_ops.back(); }
  // From S to dS': what both kernels compute, sorted.
  std::vector<NodeId> shared() const;
  // The part's gradients the graph has: dK and dV (keys) or dQ.
  std::vector<NodeId> gradients(bool keys) const;
  // Its nodes besides the shared ones: the gradients and their products.
  std::vector<NodeId> part(bool keys) const;
};

// The backward chain one of whose gradient products is `grad`, or nullopt; `why` says what broke
// the rule where `grad` takes P or dS as an operand but something else does not fit.
std::optional<BackwardChain> match_attention_backward(const Graph& g, NodeId grad, std::string* why);

// The chain of kernel k (its nodes a chain's shared nodes and one part's gradients, or both
// parts': dQ summed in the keys' kernel unless hints.attention_dq_sums is 0): the part's kind,
// domain, schedule and cost; false with the reason in `why`.
// On wgmma where the device has it, the head dimension is 64 or 128 and hints.attention_wgmma
// is 1 (the forward's hint).
bool attention_backward_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, const ScheduleHints& hints,
                               std::string* why);

// The chain whose gradients kernel k computes (an AttentionBackward kernel), and whether its
// blocks are the keys' (dK and dV, with dQ's sums or without).
BackwardChain backward_chain_of(const Graph& g, const Kernel& k, bool* keys);

// Its products at the mma.sync or wgmma rate, its exponentials and other per-score work and dQ's
// sums at L2 (by red.global not overlapped; by TMA beside the math), against its bytes read and
// written once.
void estimate_attention_backward_cost(const Graph& g, Kernel& k, const DeviceProfile& p);

}  // namespace tilefuse
