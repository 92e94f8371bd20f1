#include "tools/fuzz/random_graph.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/dsl/autodiff.h"
#include "compiler/dsl/dsl.h"

namespace tilefuse::fuzz {

namespace {
using namespace dsl;

// Odd, prime, power-of-two and off-by-one sizes: vector widths that divide and that do not.
const int64_t kSizes[] = {1, 2, 3, 5, 7, 8, 11, 13, 16, 17, 31, 32, 33, 64, 97, 128, 255, 256, 257, 509, 1024, 2049, 4096};
// Long rows: whole vectors, and odd widths (windowed rows a cluster holds).
const int64_t kLongRows[] = {16384, 20000, 20001, 32768, 40000, 50257, 65536, 131072, 262144};

class Generator {
 public:
  Generator(uint64_t seed, const RandomGraphOptions& o, Graph& g) : rng_(seed), o_(o), g_(g) {}

  void build() {
    const double u = uniform();
    base_ = u < 0.6 ? DType::F32 : u < 0.8 ? DType::BF16 : DType::F16;
    full_ = full_shape();
    pool_.push_back(new_input(full_));
    for (int i = pick(0, 3); i > 0; --i) pool_.push_back(new_input(broadcast_of(full_)));
    for (int i = pick(1, 12); i > 0; --i) step();
    if (chance(o_.non_trailing) && full_.size() >= 2) side_.push_back(sum(operand(), {0}));
    choose_outputs();
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  bool chance(double p) { return uniform() < p; }
  template <typename T, size_t N>
  T one_of(const T (&v)[N]) {
    return v[pick(0, static_cast<int>(N) - 1)];
  }
  Tensor number(double v) { return constant(g_, v, base_); }

  // f16 keeps its sums of squares and of exps below 65504: its tensors stay small, its rows short.
  int64_t max_elements() const { return base_ == DType::F16 ? 32768 : o_.max_elements; }

  Shape full_shape() {
    Shape s;
    if (base_ != DType::F16 && chance(o_.long_rows)) {
      const int64_t row = one_of(kLongRows);
      const int64_t budget = std::max<int64_t>(1, 4 * o_.max_elements / row);
      for (int d = pick(1, 2); d > 0; --d) {
        int64_t n = std::min<int64_t>(one_of(kSizes), budget / std::max<int64_t>(1, num_elements(s)));
        s.push_back(std::max<int64_t>(1, std::min<int64_t>(n, 17)));
      }
      s.push_back(row);
      return s;
    }
    const int rank = pick(1, 5);
    for (int d = 0; d < rank; ++d) {
      const int64_t room = max_elements() / std::max<int64_t>(1, num_elements(s));
      int64_t n = one_of(kSizes);
      while (n > room) n = one_of(kSizes) % (room + 1);
      s.push_back(std::max<int64_t>(1, n));
    }
    return s;
  }

  // A shape that broadcasts to `full`: some axes 1 (leading, middle or trailing), possibly of
  // lower rank.
  Shape broadcast_of(const Shape& full) {
    Shape s = full;
    for (int64_t& d : s)
      if (chance(0.35)) d = 1;
    if (s.size() > 1 && chance(0.25)) s.erase(s.begin(), s.begin() + pick(1, static_cast<int>(s.size()) - 1));
    return s;
  }

  // An input of `shape`, sometimes of another float dtype and cast to the graph's.
  Tensor new_input(const Shape& shape) {
    const std::string name = "in" + std::to_string(inputs_++);
    DType dt = base_;
    if (chance(0.2)) dt = one_of({DType::F32, DType::BF16, DType::F16});
    if (base_ == DType::F16) dt = DType::F16;
    Tensor t = input(g_, name, shape, dt);
    return dt == base_ ? t : cast(t, base_);
  }

  // An operand from the pool, mostly one of the latest (chains), sometimes any (fan-out).
  Tensor operand() {
    const int n = static_cast<int>(pool_.size());
    return chance(0.6) ? pool_[std::max(0, n - pick(1, 3))] : pool_[pick(0, n - 1)];
  }

  void step() {
    const double u = uniform();
    if (u < 0.30) {
      pool_.push_back(unary(operand()));
    } else if (u < 0.58) {
      pool_.push_back(binary(operand(), operand()));
    } else if (u < 0.72) {
      Tensor x = operand();
      Tensor r = reduction(x, true);
      pool_.push_back(r);
      pool_.push_back(binary(x, r));  // broadcast back over what it reduced
    } else if (u < 0.78) {
      Tensor r = reduction(operand(), false);
      side_.push_back(chance(0.5) ? unary(r) : r);
    } else if (u < 0.83) {
      // A reduction of a reduction: the kept size-1 axes are reduced again with the next ones.
      Tensor x = operand();
      Tensor r = reduction(x, true);
      if (x.shape().size() >= 2) r = reduce(r, trailing_reduced_ + 1, true);
      pool_.push_back(r);
    } else if (u < 0.93) {
      pool_.push_back(composite(operand()));
    } else if (u < 0.93 + o_.matmul) {
      matmul_step(operand());
    } else if (u < 0.93 + o_.matmul + o_.attention) {
      attention_step();
    } else if (u < 0.93 + o_.matmul + o_.attention + o_.iota) {
      // A mask from iota comparisons (causal-like), selecting between two values.
      Tensor x = operand();
      const int rank = static_cast<int>(x.shape().size());
      Tensor i = iota(g_, x.shape(), -1, DType::F32), j = iota(g_, x.shape(), rank > 1 ? -2 : 0, DType::F32);
      Tensor mask = i <= j * 1.5;
      pool_.push_back(where(mask, x, base_ == DType::F32 ? x * 0.5 : cast(cast(x, DType::F32) * 0.5, base_)));
    } else {
      DType other = base_ == DType::F32 ? DType::BF16 : DType::F32;
      if (base_ == DType::F16) other = DType::F32;
      pool_.push_back(cast(cast(operand(), other), base_));
    }
  }

  // x [..., M, K] times a weight of its own: [K, K] keeps x's shape (an epilogue may follow in
  // the pool), [N, K] read transposed (x·Wᵀ) gives another (an output).
  void matmul_step(const Tensor& x) {
    const Shape s = x.shape();
    if (s.size() < 2) return;
    const int64_t k = s.back();
    // The weight and the product hold at most max_elements and 4·max_elements, and the float64
    // reference's multiply-adds (x's elements times n) stay under 64·max_elements: a square
    // weight of a 262144-wide row was 137 GB, and its reference ran the GPU fuzz out of memory.
    const int64_t rows = num_elements(s) / k;
    const int64_t most_n = std::min({max_elements() / k, 4 * max_elements() / rows, 64 * max_elements() / num_elements(s)});
    if (most_n < 1) return;
    const bool square = chance(0.5) && k <= most_n;
    const int64_t n = square ? k : std::clamp<int64_t>(one_of(kSizes) % 300, 1, most_n);
    MatMulOptions o;
    o.transpose_b = !square || chance(0.5);
    Tensor w = new_input(o.transpose_b ? Shape{n, k} : Shape{k, n});
    Tensor y = matmul(x, w, o) * (1.0 / std::sqrt(static_cast<double>(k)));
    (square ? pool_ : side_).push_back(y);
  }

  // softmax(f(Q·Kᵀ))·V over inputs of its own: [heads…, n, d] queries, n_kv keys.
  void attention_step() {
    const DType dt = base_ == DType::F32 ? one_of({DType::BF16, DType::F16}) : base_;
    const int64_t n = one_of({1, 16, 17, 64, 100, 130}), n_kv = one_of({1, 16, 33, 64, 100, 130});
    const int64_t d = chance(0.1) ? 48 : chance(0.05) ? 256 : one_of({16, 32, 64, 128});
    Shape lead = chance(0.5) ? Shape{2, 3} : Shape{static_cast<int64_t>(pick(1, 3))};
    // Sometimes K/V heads shared by query heads (GQA, MQA): K's and V's leading axes 1 where Q's are not.
    Shape kv_lead = lead;
    if (chance(0.3))
      for (int64_t& e : kv_lead)
        if (chance(0.5)) e = 1;
    auto shaped = [&](const Shape& heads, int64_t rows, int64_t cols) {
      Shape s = heads;
      s.push_back(rows);
      s.push_back(cols);
      return s;
    };
    auto qkv = [&](const Shape& heads, int64_t rows) {
      return input(g_, "in" + std::to_string(inputs_++), shaped(heads, rows, d), dt);
    };
    Tensor q = qkv(lead, n), k = qkv(kv_lead, n_kv), v = qkv(kv_lead, n_kv);
    const bool decode = chance(0.2);
    if (decode) {  // a decode step: new keys and values written into the caches in place first
      const int64_t tokens = std::min<int64_t>(n_kv, pick(1, 3));
      Shape at = kv_lead;  // one position per K/V head or per cache
      if (chance(0.5)) std::fill(at.begin(), at.end(), 1);
      at.push_back(1);
      at.push_back(1);
      Tensor position = input(g_, "in" + std::to_string(inputs_++), at);  // N(0, 1): ⌈·⌉ 0, 1, 2, …
      if (chance(0.3)) position = abs(position) * static_cast<double>(n_kv / 2);  // computed, further in
      k = write_at(k, qkv(kv_lead, tokens), position, -2);
      v = write_at(v, qkv(kv_lead, tokens), position, -2);
    }
    const bool f32_scores = chance(0.7);
    Tensor s = matmul(q, k, {false, true, f32_scores ? std::optional<DType>(DType::F32) : std::nullopt});
    s = s * (1.0 / std::sqrt(static_cast<double>(d)));
    if (chance(0.2)) s = tanh(s * 0.2) * 5.0;  // a softcap
    if (chance(0.25)) {  // a bias tensor: per query and key, per key (padding), per head, …
      Shape heads = chance(0.5) ? lead : Shape(lead.size(), 1);
      Shape bias = shaped(heads, chance(0.5) ? n : 1, chance(0.7) ? n_kv : 1);
      s = s + input(g_, "in" + std::to_string(inputs_++), bias, s.dtype());
    }
    if (chance(0.4) && n <= n_kv) {             // causal, the queries the last n of the keys' positions
      Tensor qi = iota(g_, {n, n_kv}, 0), ki = iota(g_, {n, n_kv}, 1);
      s = where(qi + static_cast<double>(n_kv - n) >= ki, s, -INFINITY);
      if (chance(0.3)) s = where(qi + static_cast<double>(n_kv - n) - ki < 8.0, s, -INFINITY);  // a window
    }
    Tensor p = chance(0.15) ? softmax_with_lse(s) : softmax(s, -1);
    if (p.dtype() != dt) p = cast(p, dt);
    if (chance(0.1)) side_.push_back(p);  // the probabilities kept: outside the rule
    const Tensor o = matmul(p, v);
    side_.push_back(o);
    // Sometimes a training step: dQ, dK and dV too, given dO (dsl::grad) — the backward's own
    // kernels where its graph takes the log-sum-exp form, the scores written where it does not.
    if (!decode && chance(0.25))
      for (const Tensor& t :
           grad({o}, {input(g_, "in" + std::to_string(inputs_++), o.shape(), o.dtype())}, {q, k, v}))
        side_.push_back(t);
  }

  // softmax(s) written out, its rows' log-sum-exp (or a function of it) kept as a side output:
  // row ops an attention kernel computes after its loop.
  Tensor softmax_with_lse(const Tensor& s) {
    Tensor mx = amax(s, {-1}, true);
    Tensor c = where(mx > -INFINITY, mx, constant(g_, 0.0, s.dtype()));
    Tensor e = exp(s - c), total = sum(e, {-1}, true);
    Tensor lse = c + log(total);
    side_.push_back(chance(0.5) ? lse : exp(-lse) * 2.0);
    return e / max(total, 1.0);
  }

  Tensor unary(const Tensor& x) {
    switch (pick(0, x.shape().empty() ? 16 : 17)) {  // a scalar has no row
      case 0:
        return -x;
      case 1:
        return abs(x);
      case 2:
        return exp(tanh(x));
      case 3:
        return log(abs(x) + 0.5);
      case 4:
        return sqrt(abs(x));
      case 5:
        return rsqrt(abs(x) + 0.25);
      case 6:
        return tanh(x);
      case 7:
        return erf(x);
      case 8:
        return sigmoid(x);
      case 9:
        return relu(x);
      case 10:
        return gelu(x);
      case 11:
        return gelu(x, GeluApprox::Tanh);
      case 12:
        return exp2(tanh(x));
      case 13:
        return x * 1.5 + 0.25;
      case 14:
        return max(x, number(-0.5));
      case 15:
        return pow(abs(x) + 0.5, 1.5);
      case 16:
        return x / 3.0;
      default:
        return exp(x - amax(x, {-1}, true));  // never positive: the short exp
    }
  }

  Tensor binary(const Tensor& a, const Tensor& b) {
    switch (pick(0, 9)) {
      case 0:
        return a + b;
      case 1:
        return a - b;
      case 2:
        return a * b;
      case 3:
        return a / (abs(b) + 1.0);
      case 4:
        return max(a, b);
      case 5:
        return min(a, b);
      case 6:
        return where(a > b, a, b * 0.5);
      case 7:
        return pow(abs(a) + 0.5, tanh(b));
      case 8:
        return fma(a, b, a);
      default:
        return where(a < 0.0, a * b, b);
    }
  }

  // sum, max, min or mean over the trailing `axes` axes of x (at most its rank).
  Tensor reduce(const Tensor& x, int axes, bool keepdim) {
    const int rank = static_cast<int>(x.shape().size());
    axes = std::clamp(axes, 1, rank);
    std::vector<int> which;
    for (int a = rank - axes; a < rank; ++a) which.push_back(a);
    return reduce_over(x, which, keepdim);
  }

  // sum, mean, max or min of x over `which`.
  Tensor reduce_over(const Tensor& x, const std::vector<int>& which, bool keepdim) {
    switch (pick(base_ == DType::F16 ? 1 : 0, 3)) {  // f16 sums may overflow: means instead
      case 0:
        return sum(x, which, keepdim);
      case 1:
        return mean(x, which, keepdim);
      case 2:
        return amax(x, which, keepdim);
      default:
        return amin(x, which, keepdim);
    }
  }

  Tensor reduction(const Tensor& x, bool keepdim) {
    const int rank = static_cast<int>(x.shape().size());
    if (rank >= 2 && chance(0.3)) {  // over leading or middle axes: a column reduction
      const int first = pick(0, rank - 2), last = pick(first, rank - 2);
      std::vector<int> which;
      for (int a = first; a <= last; ++a) which.push_back(a);
      trailing_reduced_ = 1;
      return reduce_over(x, which, keepdim);
    }
    trailing_reduced_ = pick(1, std::min(rank, 3));
    return reduce(x, trailing_reduced_, keepdim);
  }

  Tensor composite(const Tensor& x) {
    const Shape s = x.shape();
    const int64_t last = s.back();
    switch (pick(0, 5)) {
      case 0:
        return softmax(x, -1);
      case 1:
        return log_softmax(x, -1);
      case 2:
        return layernorm(x, new_input({last}), new_input({last}));
      case 3:
        return rmsnorm(x, new_input({last}));
      case 4:
        if (s.size() >= 2) {  // group norm: statistics over a group's [G, K], an affine per group
          const int64_t groups = s[s.size() - 2];
          Tensor xc = x - mean(x, {-2, -1}, true);
          Tensor var = mean(xc * xc, {-2, -1}, true);
          return xc * rsqrt(var + 1e-5) * new_input({groups, 1}) + new_input({groups, 1});
        }
        return softmax(x, -1);
      default:
        return x - amax(x, {-1}, true);
    }
  }

  void choose_outputs() {
    int n = 0;
    auto emit = [&](const Tensor& t) { output("out" + std::to_string(n++), t); };
    emit(pool_.back());
    for (int i = pick(0, 2); i > 0; --i) {
      const Tensor& t = pool_[pick(0, static_cast<int>(pool_.size()) - 1)];
      if (!g_.is_output(t.id()) || chance(0.1)) emit(t);  // now and then one value under two names
    }
    for (const Tensor& t : side_)
      if (chance(0.8)) emit(t);  // the rest are dead code
  }

  std::mt19937_64 rng_;
  RandomGraphOptions o_;
  Graph& g_;
  DType base_ = DType::F32;
  Shape full_;
  std::vector<Tensor> pool_;  // all broadcast to full_, all of dtype base_
  std::vector<Tensor> side_;  // reduced without keepdim: other shapes
  int inputs_ = 0;
  int trailing_reduced_ = 1;
};

}  // namespace

Graph random_graph(uint64_t seed, const RandomGraphOptions& options) {
  Graph g("fuzz_" + std::to_string(seed));
  Generator(seed, options, g).build();
  return g;
}

}  // namespace tilefuse::fuzz
