#include "compiler/tile/fold_factors.h"

#include <algorithm>
#include <map>
#include <set>

namespace tilefuse::tir {

namespace {

// How often each value is used anywhere in the program (args, limits).
void count_uses(const Region& r, std::map<int, int>& uses) {
  for (const Inst& i : r.body) {
    for (const std::vector<int>* ids : {&i.args, &i.limits})
      for (int v : *ids) ++uses[v];
    for (const Region& inner : i.regions) count_uses(inner, uses);
  }
}

class Folder {
 public:
  explicit Folder(Program& p) : p_(p) { count_uses(p.body, uses_); }

  void region(Region& r) {
    for (Inst& i : r.body)
      for (Region& inner : i.regions) region(inner);
    for (size_t k = 0; k < r.body.size(); ++k) fold(r, k);
    // The products and spreads the folds left unused.
    r.body.erase(std::remove_if(r.body.begin(), r.body.end(),
                                [&](const Inst& i) { return i.results.size() == 1 && dropped_.count(i.results[0]); }),
                 r.body.end());
  }

 private:
  const Type& type(int v) const { return p_.types.at(static_cast<size_t>(v)); }
  bool f32(int v) const { return type(v).dtype == DType::F32; }
  // A value per row: a one-column blocked tile or a scalar.
  bool per_row(int v) const {
    const Type& t = type(v);
    return t.kind == Type::Kind::Scalar || (t.is_tile() && t.frag == Frag::None && t.shape.size() == 2 && t.shape[1] == 1);
  }
  // The instruction of region r before `end` that defines v, or null.
  Inst* defining(Region& r, size_t end, int v) {
    for (size_t j = 0; j < end; ++j)
      if (std::find(r.body[j].results.begin(), r.body[j].results.end(), v) != r.body[j].results.end()) return &r.body[j];
    return nullptr;
  }
  int value(const Type& t) { return p_.add_value(t); }
  Inst compute(Op op, std::vector<int> args, const Type& t) {
    Inst i;
    i.opcode = Opcode::Compute;
    i.op = op;
    i.args = std::move(args);
    i.results = {value(t)};
    return i;
  }

  // r.body[k] = (t · spread(f)) / s becomes t · spread(f · (1/s)), the new values just before it.
  void fold(Region& r, size_t& k) {
    Inst& div = r.body[k];
    if (div.opcode != Opcode::Compute || div.op != Op::Div || !type(div.results[0]).is_tile()) return;
    const int product = div.args[0], s = div.args[1];
    if (!per_row(s) || !f32(product) || uses_[product] != 1) return;
    Inst* mul = defining(r, k, product);
    if (!mul || mul->opcode != Opcode::Compute || mul->op != Op::Mul) return;
    for (size_t side = 0; side < 2; ++side) {
      Inst* spread = defining(r, k, mul->args[side]);
      if (!spread || spread->opcode != Opcode::Spread || !f32(spread->args[0]) || !f32(mul->args[1 - side])) continue;
      const int t = mul->args[1 - side], f = spread->args[0];
      Inst one;
      one.opcode = Opcode::Const;
      one.value = 1.0;
      one.results = {value(Type::scalar(DType::F32))};
      // (1/s of a 16-bit s is rounded to it, as the quotient's reciprocal was, and taken as f32.)
      Inst inverse = compute(Op::Div, {one.results[0], s}, type(s));
      std::vector<Inst> added = {one, inverse};
      if (!f32(s)) {
        Type t32 = type(s);
        t32.dtype = DType::F32;
        added.push_back(compute(Op::Cast, {inverse.results[0]}, t32));
      }
      Inst scaled = compute(Op::Mul, {f, added.back().results[0]}, type(f));
      Inst spread_scaled;
      spread_scaled.opcode = Opcode::Spread;
      spread_scaled.args = {scaled.results[0]};
      spread_scaled.results = {value(type(spread->results[0]))};
      if (--uses_[mul->args[side]] == 0) dropped_.insert(mul->args[side]);  // (the spread)
      dropped_.insert(product);
      div.op = Op::Mul;
      div.args = {t, spread_scaled.results[0]};
      added.push_back(scaled);
      added.push_back(spread_scaled);
      r.body.insert(r.body.begin() + static_cast<std::ptrdiff_t>(k), added.begin(), added.end());
      k += added.size();
      return;
    }
  }

  Program& p_;
  std::map<int, int> uses_;
  std::set<int> dropped_;  // the results of the instructions to drop
};

}  // namespace

void fold_row_factors(Program& p) { Folder(p).region(p.body); }

}  // namespace tilefuse::tir
