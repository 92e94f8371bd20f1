#pragma once
// The running (online) softmax of a row loop, tile by tile, on the host: the recurrence a
// looped softmax kernel carries, printed so a reader can check every number by hand.
//
//   c(m)  = m where m > −inf, else 0            (a fully masked row keeps a finite shift)
//   m'    = max(m, max of the tile)
//   s'    = s · exp(c(m) − c(m')) + Σ_tile exp(x − c(m'))   (the first factor is 0 when s = 0)
//   p_i   = exp(x_i − c(m)) / max(s, 1)         (s ≥ 1 for any row with a finite entry)
#include <string>
#include <vector>

namespace tilefuse {

struct SoftmaxTileStep {
  std::vector<float> values;
  float tile_max, max_before, max_after;
  float rescale;  // exp(c(m) − c(m')), applied to the running sum (NaN when the sum was 0)
  float tile_sum, sum_after;
};

struct SoftmaxWalkthrough {
  std::vector<SoftmaxTileStep> steps;
  float max = 0, sum = 0;
  std::vector<float> probabilities;
};

SoftmaxWalkthrough walk_online_softmax(const std::vector<float>& row, int tile);
std::string print_walkthrough(const std::vector<float>& row, const SoftmaxWalkthrough& w);

}  // namespace tilefuse
