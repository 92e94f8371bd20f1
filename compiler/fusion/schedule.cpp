#include "compiler/fusion/schedule.h"

#include <algorithm>

#include <fmt/format.h>

namespace tilefuse {

std::string PointwiseSchedule::describe() const {
  return fmt::format("tile {}×{} ({} rows × {} cols per thread, {}×{} threads, {} blocks), {}-wide vectors",
                     tile_rows(), tile_cols(), rows_per_thread, vec, thread_rows, threads_per_row,
                     grid(), vec);
}

static int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

static std::vector<Shape> collapse_shapes(const Shape& domain, const std::vector<Shape>& operands,
                                   Shape* collapsed_domain) {
  // Operand dims aligned right to the domain, 1 where absent; domain dims of size 1 dropped.
  std::vector<size_t> keep;
  for (size_t d = 0; d < domain.size(); ++d)
    if (domain[d] != 1) keep.push_back(d);
  auto dim_of = [&](const Shape& s, size_t d) -> int64_t {
    size_t off = domain.size() - s.size();
    return d < off ? 1 : s[d - off];
  };
  Shape dom;
  std::vector<Shape> out(operands.size());
  for (size_t k = 0; k < keep.size(); ++k) {
    size_t d = keep[k];
    bool merge = k > 0;
    for (const Shape& s : operands)
      if (merge && (dim_of(s, d) == 1) != (dim_of(s, keep[k - 1]) == 1)) merge = false;
    if (merge) {
      dom.back() *= domain[d];
      for (size_t i = 0; i < operands.size(); ++i) out[i].back() *= dim_of(operands[i], d);
    } else {
      dom.push_back(domain[d]);
      for (size_t i = 0; i < operands.size(); ++i) out[i].push_back(dim_of(operands[i], d));
    }
  }
  if (dom.empty()) {  // a scalar domain
    dom = {1};
    for (Shape& s : out) s = {1};
  }
  *collapsed_domain = dom;
  return out;
}

PointwiseSchedule choose_pointwise_schedule(const Shape& domain, const std::vector<Shape>& operands,
                                            const std::vector<DType>& dtypes,
                                            const ScheduleHints& hints) {
  PointwiseSchedule s;
  collapse_shapes(domain, operands, &s.dims);
  // A fully contiguous domain has no row structure; give it rows so each thread owns several
  // vectors (independent loads in flight) without index division.
  if (s.dims.size() == 1) {
    int64_t n = s.dims[0];
    int64_t c = 4096;
    while (c > 1 && n % c != 0) c /= 2;
    if (c >= 256 && n / c > 1) s.dims = {n / c, c};
  }
  s.cols = s.dims.back();
  s.rows = num_elements(s.dims) / s.cols;
  size_t widest = 1;
  for (DType t : dtypes) widest = std::max(widest, dtype_size(t));
  s.vec = static_cast<int>(16 / widest);
  while (s.vec > 1 && s.cols % s.vec != 0) s.vec /= 2;
  const int threads = hints.block_threads ? hints.block_threads : 256;
  s.threads_per_row = static_cast<int>(std::min<int64_t>(threads, pow2_ceil((s.cols + s.vec - 1) / s.vec)));
  s.thread_rows = threads / s.threads_per_row;
  if (s.thread_rows > s.rows) s.thread_rows = static_cast<int>(pow2_ceil(s.rows));
  // Two 16-byte vectors per thread per operand measured best on the H200 (bench/NOTES.md).
  int rpt = hints.rows_per_thread ? hints.rows_per_thread : 2;
  s.rows_per_thread = static_cast<int>(std::clamp<int64_t>((s.rows + s.thread_rows - 1) / s.thread_rows, 1, rpt));
  return s;
}

}  // namespace tilefuse

namespace tilefuse {

std::vector<Shape> operand_views(const PointwiseSchedule& s, const Shape& domain,
                                 const std::vector<Shape>& operands) {
  Shape collapsed;
  std::vector<Shape> views = collapse_shapes(domain, operands, &collapsed);
  if (collapsed.size() == 1 && s.dims.size() == 2)  // the contiguous domain split into rows
    for (Shape& v : views) v = v[0] == 1 ? Shape{1, 1} : s.dims;
  return views;
}

}  // namespace tilefuse
