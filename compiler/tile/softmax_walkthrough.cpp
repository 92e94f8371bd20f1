#include "compiler/tile/softmax_walkthrough.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tilefuse {

static float shift(float m) { return m > -INFINITY ? m : 0.0f; }

SoftmaxWalkthrough walk_online_softmax(const std::vector<float>& row, int tile) {
  SoftmaxWalkthrough w;
  float m = -INFINITY, s = 0.0f;
  for (size_t start = 0; start < row.size(); start += static_cast<size_t>(tile)) {
    SoftmaxTileStep st;
    st.values.assign(row.begin() + static_cast<long>(start),
                     row.begin() + static_cast<long>(std::min(row.size(), start + tile)));
    st.tile_max = -INFINITY;
    for (float x : st.values)
      st.tile_max = std::isnan(x) || std::isnan(st.tile_max) ? NAN : std::max(st.tile_max, x);
    st.max_before = m;
    float m_new = std::isnan(st.tile_max) ? NAN : std::max(m, st.tile_max);
    st.max_after = m_new;
    st.rescale = s == 0.0f ? NAN : std::exp(shift(m) - shift(m_new));
    st.tile_sum = 0.0f;
    for (float x : st.values) st.tile_sum += std::exp(x - shift(m_new));
    s = (s == 0.0f ? 0.0f : s * st.rescale) + st.tile_sum;
    m = m_new;
    st.sum_after = s;
    w.steps.push_back(st);
  }
  w.max = m;
  w.sum = s;
  for (float x : row) w.probabilities.push_back(std::exp(x - shift(m)) / std::max(s, 1.0f));
  return w;
}

static std::string num(float v) { return std::isnan(v) ? "—" : fmt::format("{:.8g}", v); }

std::string print_walkthrough(const std::vector<float>& row, const SoftmaxWalkthrough& w) {
  std::vector<std::string> xs;
  for (float x : row) xs.push_back(num(x));
  std::string out = fmt::format("row [{}]\n", fmt::join(xs, ", "));
  out += fmt::format("  {:<5} {:<26} {:>12} {:>12} {:>14} {:>14} {:>14}\n", "tile", "values", "tile max",
                     "running max", "rescale", "tile sum", "running sum");
  int i = 0;
  for (const SoftmaxTileStep& st : w.steps) {
    std::vector<std::string> v;
    for (float x : st.values) v.push_back(num(x));
    out += fmt::format("  {:<5} {:<26} {:>12} {:>12} {:>14} {:>14} {:>14}\n", i++,
                       fmt::format("[{}]", fmt::join(v, ", ")), num(st.tile_max),
                       fmt::format("{} → {}", num(st.max_before), num(st.max_after)), num(st.rescale),
                       num(st.tile_sum), num(st.sum_after));
  }
  std::vector<std::string> p;
  for (float x : w.probabilities) p.push_back(num(x));
  out += fmt::format("  max {}, sum {}: probabilities [{}]\n", num(w.max), num(w.sum), fmt::join(p, ", "));
  return out;
}

}  // namespace tilefuse
