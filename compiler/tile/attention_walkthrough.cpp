#include "compiler/tile/attention_walkthrough.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tilefuse {

AttentionRowWalk walk_online_attention(const std::vector<float>& query, const std::vector<std::vector<float>>& keys,
                                       const std::vector<std::vector<float>>& values, float scale, int tile,
                                       int visible) {
  const size_t d = values.empty() ? 0 : values[0].size();
  AttentionRowWalk w;
  float m = -INFINITY, l = 0;
  std::vector<float> o(d, 0.0f);
  for (size_t start = 0; start < keys.size(); start += static_cast<size_t>(tile)) {
    AttentionTileStep st;
    st.first_key = static_cast<int>(start);
    const size_t end = std::min(keys.size(), start + static_cast<size_t>(tile));
    st.tile_max = -INFINITY;
    for (size_t j = start; j < end; ++j) {
      float s = -INFINITY;
      if (static_cast<int>(j) < visible) {
        s = 0;
        for (size_t c = 0; c < query.size(); ++c) s += query[c] * keys[j][c];
        s *= scale;
      }
      st.scores.push_back(s);
      st.tile_max = std::max(st.tile_max, s);
    }
    st.max_before = m;
    st.max_after = std::max(m, st.tile_max);
    const float shift = st.max_after > -INFINITY ? st.max_after : 0.0f;
    st.rescale = std::exp(m - shift);
    st.tile_sum = 0;
    for (float& x : o) x *= st.rescale;
    for (size_t j = start; j < end; ++j) {
      const float p = std::exp(st.scores[j - start] - shift);
      st.tile_sum += p;
      for (size_t c = 0; c < d; ++c) o[c] += p * values[j][c];
    }
    l = l * st.rescale + st.tile_sum;
    m = st.max_after;
    st.sum_after = l;
    st.out_after = o;
    w.steps.push_back(st);
  }
  for (float x : o) w.out.push_back(l == 0 ? 0.0f : x / l);
  return w;
}

std::vector<double> exact_attention_row(const std::vector<float>& query, const std::vector<std::vector<float>>& keys,
                                        const std::vector<std::vector<float>>& values, double scale, int visible) {
  std::vector<double> s(static_cast<size_t>(visible), 0.0), out(values.empty() ? 0 : values[0].size(), 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    for (size_t c = 0; c < query.size(); ++c) s[j] += static_cast<double>(query[c]) * keys[j][c];
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  for (double& x : s) sum += x = std::exp(x - mx);
  for (size_t j = 0; j < s.size(); ++j)
    for (size_t c = 0; c < out.size(); ++c) out[c] += s[j] / sum * values[j][c];
  return out;
}

static std::string num(float v) { return fmt::format("{:.6g}", v); }
static std::string nums(const std::vector<float>& v) {
  std::vector<std::string> s;
  for (float x : v) s.push_back(num(x));
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string print_attention_walk(int row, const AttentionRowWalk& w) {
  std::string out = fmt::format("query {}\n", row);
  for (const AttentionTileStep& st : w.steps)
    out += fmt::format("  keys {}..{}: s {}; max {} → {}; α {}; Σp {}; l {}; O {}\n", st.first_key,
                       st.first_key + static_cast<int>(st.scores.size()) - 1, nums(st.scores), num(st.max_before),
                       num(st.max_after), num(st.rescale), num(st.tile_sum), num(st.sum_after), nums(st.out_after));
  out += fmt::format("  O / l = {}\n", nums(w.out));
  return out;
}

}  // namespace tilefuse
