#include "runtime/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/graph/reference.h"
#include "runtime/executable.h"

namespace tilefuse {

// A kernel computes in f32 and its approximations (exp, erf, …) are within a few ulp, so its
// distance from the oracle may reach a small multiple of what correctly rounded f32 arithmetic
// between nodes gives. Beyond `kJudgeable` that bound says nothing about correctness.
static constexpr double kRoundingFactor = 16;
static constexpr double kJudgeable = 0.1;

CheckReport check_against_reference(const Graph& g, const TensorMap& inputs, const TensorMap& outputs) {
  CheckReport r;
  auto ref = reference_run(g, inputs);
  auto rounded = reference_run(g, inputs, ReferencePrecision::Storage);
  for (const GraphOutput& o : g.outputs()) {
    const TensorData& t = outputs.at(o.name);
    OutputCheck c;
    c.name = o.name;
    c.dtype = t.dtype;
    c.unwritten = count_unwritten(t);
    c.rel_err = relative_error(t.to_doubles(), ref.at(o.name));
    c.rounding = relative_error(rounded.at(o.name), ref.at(o.name));
    // A bool output may flip where an f32 and a float64 value straddle a threshold.
    c.tolerance = t.dtype == DType::F32 ? 1e-6 : 1e-2;
    c.allowed = std::max(c.tolerance, kRoundingFactor * c.rounding);
    c.ill_conditioned = !(c.allowed <= kJudgeable);
    // Unjudged, an output still fails for a NaN or inf that rounded arithmetic does not give.
    bool judged_ok = c.ill_conditioned ? std::isfinite(c.rel_err) || !std::isfinite(c.rounding)
                                       : c.rel_err <= c.allowed;
    c.ok = c.unwritten == 0 && judged_ok;
    r.max_rel_err = std::max(r.max_rel_err, c.rel_err);
    r.unwritten += c.unwritten;
    r.ok &= c.ok;
    r.ill_conditioned |= c.ill_conditioned;
    r.outputs.push_back(c);
  }
  return r;
}

std::string CheckReport::text() const {
  std::string s;
  for (const OutputCheck& c : outputs) {
    s += fmt::format("  output {}: relative error {:.3e} (tolerance {:.0e}", c.name, c.rel_err, c.tolerance);
    if (c.allowed > c.tolerance)
      s += fmt::format("; rounding alone moves it {:.3e}, so {:.3e} is allowed", c.rounding, c.allowed);
    s += ")";
    if (c.ill_conditioned) s += " — ill-conditioned: rounding alone moves it too far to judge";
    if (c.unwritten) s += fmt::format(" — {} elements never written", c.unwritten);
    if (!c.ok) s += " FAILED";
    s += "\n";
  }
  return s;
}

}  // namespace tilefuse
