#pragma once
// The attention loop of one query row, key tile by key tile, on the host: the recurrence an
// attention kernel (compiler/tile/attention.h) carries, printed so that a reader can check every
// number by hand.
//
//   s_j   = q·k_j·scale, −inf for a key the row may not see (a causal mask)
//   m'    = max(m, max of the tile's s);  c(m) = m where m > −inf, else 0
//   α     = exp(m − c(m'))                (0 while m is −inf: nothing to rescale yet)
//   p_j   = exp(s_j − c(m'))
//   l'    = l·α + Σ_tile p_j
//   O'    = O·α + Σ_tile p_j·v_j
//   out   = O / l, or 0 where l = 0      (a row that sees no key, as softmax gives)
#include <string>
#include <vector>

namespace tilefuse {

struct AttentionTileStep {
  int first_key = 0;
  std::vector<float> scores;  // the tile's s_j
  float tile_max = 0, max_before = 0, max_after = 0;
  float rescale = 0;  // α
  float tile_sum = 0, sum_after = 0;
  std::vector<float> out_after;  // O' (not yet divided by l')
};

struct AttentionRowWalk {
  std::vector<AttentionTileStep> steps;
  std::vector<float> out;  // O / l
};

// `keys` and `values` are rows of d; `visible` keys are seen (the rest masked: a causal row).
AttentionRowWalk walk_online_attention(const std::vector<float>& query, const std::vector<std::vector<float>>& keys,
                                       const std::vector<std::vector<float>>& values, float scale, int tile,
                                       int visible);
std::string print_attention_walk(int row, const AttentionRowWalk& w);
// What the walk must end at: softmax(q·kᵀ·scale)·v over the first `visible` keys, in float64
// (0 when it sees none).
std::vector<double> exact_attention_row(const std::vector<float>& query, const std::vector<std::vector<float>>& keys,
                                        const std::vector<std::vector<float>>& values, double scale, int visible);

}  // namespace tilefuse
