#include "compiler/fusion/fusion.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compiler/fusion/attention_backward.h"
#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/library_gemm.h"
#include "compiler/fusion/report.h"
#include "compiler/support/dump.h"
#include "compiler/support/error.h"

namespace tilefuse {

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Pointwise:
      return "pointwise";
    case ScheduleKind::RowReduce:
      return "row-reduction";
    case ScheduleKind::ColumnReduce:
      return "column-reduction";
    case ScheduleKind::MatMul:
      return "matmul";
    case ScheduleKind::Attention:
      return "attention";
    case ScheduleKind::AttentionBackward:
      return "attention-backward";
    case ScheduleKind::Write:
      return "write";
  }
  return "?";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Fused:
      return "fused";
    case Verdict::Merged:
      return "merged";
    case Verdict::Duplicated:
      return "duplicated";
    case Verdict::Materialized:
      return "materialized";
  }
  return "?";
}

const char* layer_name(Layer l) {
  switch (l) {
    case Layer::Legality:
      return "legality";
    case Layer::Budget:
      return "budget";
    case Layer::Profitability:
      return "profitability";
  }
  return "?";
}

namespace {

bool is_compute(const Node& n) { return n.op != Op::Input && n.op != Op::Constant; }

PlanTotals totals_of(const std::vector<Kernel>& kernels) {
  PlanTotals t{static_cast<int>(kernels.size()), 0, 0};
  for (const Kernel& k : kernels) {
    t.bytes += k.cost.bytes();
    t.predicted_s += k.cost.predicted_s;
  }
  return t;
}

// A candidate change to the kernels: producer p (or, for merges afterwards, no producer) moved
// out of its own group into `into` — the one consumer group (fused), every consumer group
// (duplicated), or the first of them, into which the others are merged (merged).
struct Move {
  Verdict verdict = Verdict::Materialized;
  NodeId producer = -1;
  std::vector<int> into;
};

// What applying a move changed, so that it can be undone in place: candidates are weighed on
// the pass's own state, not on copies of it (a copy per candidate made planning quadratic).
struct Undo {
  NodeId producer = -1;
  std::set<int> producer_where;                          // the producer's groups before
  std::vector<std::pair<int, std::set<NodeId>>> merged;  // groups merged away, with their members
  std::vector<std::pair<NodeId, std::set<int>>> where;   // their members' groups before
  std::vector<NodeId> added;                             // nodes added to the target
  int target = -1;
};

// A group's kernel, built when first needed and kept until the group changes.
struct CachedKernel {
  bool built = false;
  std::optional<Kernel> kernel;
  std::string why;  // when the group cannot be one kernel
};

// The fusion pass. Kernels are groups of nodes: a node is in exactly one group, except a
// duplicated node, which is in every group that uses it and written by none. Producers are
// weighed consumers first (reverse topological order); each decision tries its moves on the
// state and undoes them, and a group grown by one producer has its kernel extended from the
// group's kept kernel, so a chain of n producers plans in about n steps, not n² (cost_model.h).
class FusionPass {
 public:
  FusionPass(const Graph& g, const FusionOptions& opt) : g_(g), opt_(opt), live_(g.live()) {
    users_.resize(g.nodes().size());
    for (const Node& n : g.nodes())
      if (live_[n.id])
        for (NodeId o : n.operands) users_[o].push_back(n.id);
  }

  Plan run() {
    Plan plan;
    plan.graph = g_;
    plan.options = opt_;
    where_.resize(g_.nodes().size());
    for (const Node& n : g_.nodes()) {
      if (is_compute(n) && !live_[n.id]) plan.dead.push_back(n.id);
      if (is_compute(n) && live_[n.id]) {
        where_[n.id] = {static_cast<int>(groups_.size())};
        groups_.push_back({n.id});
      }
    }
    cache_.resize(groups_.size());
    plan.unfused_kernels = ordered_kernels();
    plan.unfused = totals_of(plan.unfused_kernels);
    if (opt_.fuse) {
      if (opt_.contraction_chains) {
        fuse_contraction_chains(&plan.decisions);
        fuse_backward_chains(&plan.decisions);
      }
      for (auto it = g_.nodes().rbegin(); it != g_.nodes().rend(); ++it)
        if (is_compute(*it) && live_[it->id] && !users_[it->id].empty() && !in_chain_.count(it->id))
          plan.decisions.push_back(decide(it->id));
      merge_sharing_kernels(&plan.decisions);
      for (FusionDecision& d : plan.decisions)
        if (chain_why_.count(d.producer)) d.reason += "; not one attention kernel: " + chain_why_.at(d.producer);
        else if (backward_why_.count(d.producer))
          d.reason += "; not the fused attention backward: " + backward_why_.at(d.producer);
    }
    plan.kernels = ordered_kernels();
    plan.fused = totals_of(plan.kernels);
    price_library_gemm(plan);
    return plan;
  }

 private:
  // ---- the state: groups, where each node is, and each group's kernel ----

  bool needed_outside(NodeId n) const {
    if (g_.is_output(n) || g_.node(n).op == Op::WriteAt) return true;
    for (NodeId u : users_[n])
      for (int h : where_[u])
        if (!where_[n].count(h)) return true;
    return false;
  }

  std::vector<NodeId> outputs_of(int h) const {
    std::vector<NodeId> out;
    for (NodeId n : groups_[h])
      if (needed_outside(n)) out.push_back(n);
    return out;
  }

  const CachedKernel& kernel(int h) {
    CachedKernel& c = cache_[h];
    if (!c.built) {
      c = {};
      c.built = true;
      const auto& m = groups_[h];
      c.kernel = build_kernel(g_, {m.begin(), m.end()}, outputs_of(h), opt_.profile, opt_.schedule, &c.why);
    }
    return c;
  }

  // Group h's kernel with `move` applied: extended from its kept kernel when the move only
  // added the producer to it (and the producer uses none of its nodes, so no other node's need
  // to be written changes), else built whole.
  CachedKernel kernel_after(int h, const Move& m) {
    const NodeId p = m.producer;
    const bool grown = p >= 0 && m.verdict != Verdict::Merged && groups_[h].count(p) &&
                       std::find(m.into.begin(), m.into.end(), h) != m.into.end();
    if (grown) {
      const CachedKernel& before = cache_[h];
      bool uses_member = false;
      for (NodeId o : g_.node(p).operands) uses_member |= groups_[h].count(o) > 0;
      if (before.built && before.kernel && !uses_member) {
        std::vector<NodeId> outputs = before.kernel->outputs;
        if (needed_outside(p)) outputs.push_back(p);
        CachedKernel c;
        c.built = true;
        c.kernel = extend_kernel(g_, *before.kernel, p, users_[p], outputs, opt_.profile, opt_.schedule, &c.why);
        return c;
      }
    }
    CachedKernel c;
    c.built = true;
    const auto& members = groups_[h];
    c.kernel = build_kernel(g_, {members.begin(), members.end()}, outputs_of(h), opt_.profile, opt_.schedule, &c.why);
    return c;
  }

  Undo apply(const Move& m) {
    Undo u;
    u.producer = m.producer;
    if (m.producer >= 0) {
      const NodeId p = m.producer;
      u.producer_where = where_[p];
      for (int h : where_[p]) groups_[h].erase(p);
      where_[p].clear();
      const size_t targets = m.verdict == Verdict::Duplicated ? m.into.size() : 1;
      for (size_t i = 0; i < targets; ++i) {
        groups_[m.into[i]].insert(p);
        where_[p].insert(m.into[i]);
      }
    }
    if (m.verdict != Verdict::Merged) return u;
    u.target = m.into[0];
    for (size_t i = 1; i < m.into.size(); ++i) {
      const int h = m.into[i];
      u.merged.push_back({h, groups_[h]});
      for (NodeId n : groups_[h]) {
        u.where.push_back({n, where_[n]});
        where_[n].erase(h);
        where_[n].insert(u.target);
        if (groups_[u.target].insert(n).second) u.added.push_back(n);
      }
      groups_[h].clear();
    }
    return u;
  }

  void undo(const Undo& u) {
    for (NodeId n : u.added) groups_[u.target].erase(n);
    for (auto it = u.where.rbegin(); it != u.where.rend(); ++it) where_[it->first] = it->second;
    for (const auto& [h, members] : u.merged) groups_[h] = members;
    if (u.producer >= 0) {
      for (int h : where_[u.producer]) groups_[h].erase(u.producer);
      where_[u.producer] = u.producer_where;
      for (int h : u.producer_where) groups_[h].insert(u.producer);
    }
  }

  // The groups group h feeds (reads of their nodes from h's).
  std::set<int> successors(int h) const {
    std::set<int> out;
    for (NodeId n : groups_[h])
      for (NodeId u : users_[n])
        for (int s : where_[u])
          if (s != h && !groups_[s].count(n)) out.insert(s);
    return out;
  }

  // The groups after group a that hold nodes.
  std::set<int> later_groups(int a) const {
    std::set<int> out;
    for (int b = a + 1; b < static_cast<int>(groups_.size()); ++b)
      if (!groups_[b].empty()) out.insert(b);
    return out;
  }
  // Whether a path of one or more kernels leads from group a to group b.
  bool reaches(int a, int b) const {
    std::set<int> seen;
    std::vector<int> stack(1, a);
    while (!stack.empty()) {
      const int h = stack.back();
      stack.pop_back();
      for (int s : successors(h)) {
        if (s == b) return true;
        if (seen.insert(s).second) stack.push_back(s);
      }
    }
    return false;
  }
  // Whether a path of kernels leads from group t back to itself.
  bool on_cycle(int t) const { return reaches(t, t); }

  // ---- weighing options ----

  // The touched groups' kernels through the three layers, with the move applied (kernels_out:
  // the kernels it would keep).
  FusionOption evaluate(const Move& m, const std::set<int>& touched, std::map<int, CachedKernel>* kernels_out) {
    FusionOption o;
    o.verdict = m.verdict;
    for (int h : touched) {
      if (groups_[h].empty()) continue;
      CachedKernel after;
      if (m.verdict != Verdict::Materialized) after = kernel_after(h, m);
      const CachedKernel& c = m.verdict == Verdict::Materialized ? kernel(h) : after;
      if (!c.kernel) {
        o.legal = false;
        o.why_not = c.why;
        return o;
      }
      const KernelCost& k = c.kernel->cost;
      o.kernels++;
      o.bytes += k.bytes();
      o.registers = std::max(o.registers, k.registers);
      o.predicted_s += k.predicted_s;
      // A matmul's tiles set its registers whatever it fuses; what its epilogue adds costs
      // occupancy, not spills, up to the device's per-thread limit.
      const int budget = c.kernel->kind == ScheduleKind::MatMul ||
                                 c.kernel->kind == ScheduleKind::Attention ||
                                 c.kernel->kind == ScheduleKind::AttentionBackward
                             ? std::max(opt_.max_registers, opt_.profile.max_registers_per_thread)
                             : opt_.max_registers;
      if (k.registers > budget && o.fits) {
        o.fits = false;
        o.why_not = fmt::format("the fused kernel needs ~{} registers per thread, over the budget of {}",
                                k.registers, budget);
      }
      if (kernels_out && m.verdict != Verdict::Materialized) (*kernels_out)[h] = std::move(after);
    }
    // Fusing or duplicating a producer into its consumers' groups cannot close a cycle here:
    // producers are weighed consumers first, so every group of more than one node holds only
    // nodes after p, and a path leaving such a group never returns to p, whose operands come
    // before it. Merging consumer groups can: one may feed the other through a third kernel.
    if (m.verdict == Verdict::Merged && on_cycle(m.into[0])) {
      o.legal = false;
      o.why_not = "fusing would create a cycle between kernels";
    }
    return o;
  }

  std::string describe(NodeId n) const { return fmt::format("%{} {}", n, op_info(g_.node(n).op).name); }

  // The decision's verdict and what the chosen option saved and cost against `before`.
  static void record_outcome(FusionDecision& d, const FusionOption& before, const FusionOption& chosen) {
    d.verdict = chosen.verdict;
    d.bytes_saved = before.bytes - chosen.bytes;
    d.launches_saved = before.kernels - chosen.kernels;
    d.registers_before = before.registers;
    d.registers_after = chosen.registers;
    d.predicted_before_s = before.predicted_s;
    d.predicted_after_s = chosen.predicted_s;
  }

  FusionDecision decide(NodeId p) {
    FusionDecision d;
    d.producer = p;
    for (NodeId u : users_[p])
      if (std::find(d.consumers.begin(), d.consumers.end(), u) == d.consumers.end()) d.consumers.push_back(u);
    std::set<int> consumer_groups;
    for (NodeId u : d.consumers) consumer_groups.insert(where_[u].begin(), where_[u].end());
    std::set<int> touched = consumer_groups;
    touched.insert(where_[p].begin(), where_[p].end());

    std::vector<Move> moves = {{Verdict::Materialized, p, {}}};
    std::vector<int> into(consumer_groups.begin(), consumer_groups.end());
    if (consumer_groups.size() == 1) {
      moves.push_back({Verdict::Fused, p, into});
    } else {
      if (!g_.is_output(p)) moves.push_back({Verdict::Duplicated, p, into});
      moves.push_back({Verdict::Merged, p, into});
    }
    std::vector<FusionOption> options;
    std::vector<std::map<int, CachedKernel>> kernels(moves.size());
    for (size_t i = 0; i < moves.size(); ++i) {
      if (moves[i].verdict == Verdict::Materialized) {
        options.push_back(evaluate(moves[i], touched, nullptr));
        continue;
      }
      Undo u = apply(moves[i]);
      options.push_back(evaluate(moves[i], touched, &kernels[i]));
      undo(u);
    }

    const FusionOption& before = options[0];
    size_t best = 0;
    for (size_t i = 1; i < options.size(); ++i) {
      const FusionOption& o = options[i];
      const FusionOption& b = options[best];
      if (!o.legal || !o.fits) continue;
      // Prefer fewer kernels unless the model predicts a real (> 0.1%) loss.
      if (o.predicted_s < b.predicted_s * 0.999 || (o.predicted_s <= b.predicted_s * 1.001 && o.kernels < b.kernels))
        best = i;
    }
    d.options = options;
    record_outcome(d, before, options[best]);
    d.reason = reason(d, options, consumer_groups.size());
    if (best != 0) {
      apply(moves[best]);
      for (int h : touched) cache_[h] = {};
      for (auto& [h, c] : kernels[best]) cache_[h] = std::move(c);
    }
    return d;
  }

  std::string reason(FusionDecision& d, const std::vector<FusionOption>& options, size_t copies) const {
    const NodeId p = d.producer;
    std::vector<std::string> cons;
    for (NodeId c : d.consumers) cons.push_back(describe(c));
    std::string edge = fmt::format("{} → {}", describe(p), fmt::join(cons, ", "));
    switch (d.verdict) {
      case Verdict::Fused:
        return fmt::format("{}: one kernel; the intermediate never reaches memory", edge);
      case Verdict::Merged:
        return fmt::format(
            "{}: the consumers share one domain, so producer and consumers become one kernel that reads the "
            "operands once",
            edge);
      case Verdict::Duplicated: {
        const Node& pn = g_.node(p);
        const int64_t extra = static_cast<int64_t>(copies) - 1;
        d.duplicated_instructions =
            static_cast<double>(extra) * instructions_per_element(g_, pn) * static_cast<double>(num_elements(pn.shape));
        for (NodeId o : pn.operands)
          if (g_.node(o).op != Op::Constant)
            d.duplicated_bytes += extra * num_elements(g_.node(o).shape) * static_cast<int64_t>(dtype_size(g_.node(o).dtype));
        return fmt::format("{}: recomputed in each of {} consumer kernels; cheaper than writing and re-reading it",
                           edge, copies);
      }
      case Verdict::Materialized:
        break;
    }
    bool any_legal = false, any_fit = false;
    const FusionOption* stop = nullptr;
    for (size_t i = 1; i < options.size(); ++i) {
      const FusionOption& o = options[i];
      any_legal |= o.legal;
      any_fit |= o.legal && o.fits;
      if (!stop || (o.legal && !stop->legal) || (o.legal && o.fits && !stop->fits)) stop = &o;
    }
    d.stopped_by = !any_legal ? Layer::Legality : !any_fit ? Layer::Budget : Layer::Profitability;
    if (!stop) return fmt::format("{}: nothing to fuse", edge);
    if (d.stopped_by == Layer::Profitability)
      return fmt::format("{}: written once and re-read; {} would take {:.3f} ms against {:.3f} ms", edge,
                         verdict_name(stop->verdict), stop->predicted_s * 1e3, options[0].predicted_s * 1e3);
    return fmt::format("{}: not fused ({}): {}", edge, layer_name(*d.stopped_by), stop->why_not);
  }

  // Contraction chains (contraction_chain.h), weighed before the edge-by-edge decisions: a
  // chain's nodes, each still a kernel of its own, become one attention kernel when that is
  // legal, fits and is predicted faster. Its nodes are then decided: nothing joins or leaves it.
  // Where a softmax's probabilities reach a matmul but the rule does not hold, the decision for
  // the probabilities says why.
  void fuse_contraction_chains(std::vector<FusionDecision>* decisions) {
    for (auto it = g_.nodes().rbegin(); it != g_.nodes().rend(); ++it) {
      if (it->op != Op::MatMul || !live_[it->id] || in_chain_.count(it->id)) continue;
      std::string why;
      std::optional<ContractionChain> c = match_contraction_chain(g_, it->id, &why);
      if (!c) {
        if (!why.empty()) chain_why_[it->operands[0]] = why;
        continue;
      }
      const std::vector<NodeId> nodes = c->nodes();
      std::vector<int> into;
      for (NodeId n : nodes) {
        if (in_chain_.count(n) || where_[n].size() != 1 || groups_[*where_[n].begin()].size() != 1) break;
        into.push_back(*where_[n].begin());
      }
      if (into.size() != nodes.size()) continue;
      const std::set<int> touched(into.begin(), into.end());
      FusionOption before = scores_written(nodes);
      Move merge{Verdict::Merged, -1, into};
      Undo u = apply(merge);
      std::map<int, CachedKernel> kernels;
      FusionOption after = evaluate(merge, touched, &kernels);
      if (!after.legal || !after.fits || after.predicted_s >= before.predicted_s) {
        undo(u);
        chain_why_[c->cast >= 0 ? c->cast : c->probs] =
            !after.legal || !after.fits ? after.why_not : "the model predicts the chain's own kernels faster";
        continue;
      }
      for (int h : touched) cache_[h] = {};
      cache_[into[0]] = std::move(kernels[into[0]]);
      in_chain_.insert(nodes.begin(), nodes.end());
      after.verdict = Verdict::Fused;
      FusionDecision d = chain_decision(c->scores, before, after);
      const Node& s = g_.node(c->scores);
      d.reason = fmt::format(
          "contraction chain %{} matmul → softmax → %{} matmul: one kernel looping over the {} keys, carrying the "
          "output, the running max and the running sum; the scores {}{} never reach memory (against the plan "
          "that writes them and reads them again)",
          c->scores, c->output, c->n_kv, dtype_name(s.dtype), shape_str(s.shape));
      if (!c->row_ops.empty()) {
        std::vector<std::string> ops;
        for (NodeId r : c->row_ops) ops.push_back(fmt::format("%{} {}", r, op_info(g_.node(r).op).name));
        d.reason += fmt::format(
            "; {} computed from the final max and sum after the loop (one value a query row, "
            "as a log-sum-exp)",
            fmt::join(ops, ", "));
      }
      decisions->push_back(d);
    }
  }

  // Attention backward chains (attention_backward.h), weighed after the forward's: each becomes
  // two kernels — dK and dV, and dQ — both holding the chain's nodes from S to dS' (in each
  // group: computed in each, written by neither), where both are legal, fit and together are
  // predicted faster than the plan that writes P and dS. Its nodes are then decided.
  void fuse_backward_chains(std::vector<FusionDecision>* decisions) {
    std::set<NodeId> seen;
    for (const Node& n : g_.nodes()) {
      if (n.op != Op::MatMul || !live_[n.id] || in_chain_.count(n.id)) continue;
      std::string why;
      const std::optional<BackwardChain> c = match_attention_backward(g_, n.id, &why);
      if (!c) {
        if (!why.empty()) backward_why_[n.operands[0]] = why;
        continue;
      }
      if (!seen.insert(c->probs).second) continue;
      std::vector<std::vector<NodeId>> parts;  // each part's live gradients and their products
      for (bool keys : {true, false}) {
        std::vector<NodeId> grads;
        for (NodeId x : c->part(keys))
          if (live_[x]) grads.push_back(x);
        if (!grads.empty()) parts.push_back(grads);
      }
      std::vector<NodeId> all = c->shared();
      for (const std::vector<NodeId>& grads : parts) all.insert(all.end(), grads.begin(), grads.end());
      bool alone = true;  // every node still a kernel of its own
      for (NodeId x : all)
        alone &= live_[x] && !in_chain_.count(x) && where_[x].size() == 1 &&
                 groups_[*where_[x].begin()].size() == 1;
      if (!alone) continue;
      std::sort(all.begin(), all.end());
      const FusionOption before = scores_written(all);
      std::set<int> touched;
      for (NodeId x : all) touched.insert(*where_[x].begin());
      std::vector<Undo> undos;
      std::map<int, CachedKernel> kernels;
      FusionOption after = backward_kernels(*c, parts, &undos, &kernels);
      const std::string other_form = weigh_dq_sums(*c, &parts, &after, &undos, &kernels);
      if (!after.legal || !after.fits || after.predicted_s >= before.predicted_s) {
        for (auto u = undos.rbegin(); u != undos.rend(); ++u) undo(*u);
        backward_why_[c->ds()] = !after.legal || !after.fits
                                     ? after.why_not
                                     : "the model predicts the plan that writes P and dS faster";
        continue;
      }
      for (int h : touched) cache_[h] = {};
      for (auto& [h, k] : kernels) cache_[h] = std::move(k);
      in_chain_.insert(all.begin(), all.end());
      FusionDecision d = chain_decision(c->scores, before, after);
      const Node& s = g_.node(c->scores);
      const bool sums = parts.size() == 1 && !c->gradients(true).empty() && !c->gradients(false).empty();
      d.reason = fmt::format(
          "attention backward %{} Q·Kᵀ → P, dP, dS → the gradients: {} kernel{} ({}) recomputing P from the "
          "rows' log-sum-exp a tile at a time{}; P and dS {}{} never reach memory (against the "
          "plan "
          "that writes them and reads them again){}",
          c->scores, parts.size(), parts.size() == 1 ? "" : "s",
          parts.size() == 2 ? "dK and dV over the queries, dQ over the keys"
          : sums            ? "dK and dV over the queries, dQ's products summed across the key blocks"
                            : "one loop",
          parts.size() == 2 ? " (the scores' two products done in each)" : "", dtype_name(s.dtype),
          shape_str(s.shape), other_form.empty() ? "" : "; " + other_form);
      decisions->push_back(d);
    }
  }
  // FlashAttention-2's form beside the two kernels built (`parts`, `after`, their `undos` and
  // `kernels`): all the gradients in one kernel, dQ's products summed across the key blocks
  // (5 products where the two kernels take 7, and the sums' traffic at L2). The one the hint
  // asks for, or the faster, is left applied in the four; the text says how the other compared.
  std::string weigh_dq_sums(const BackwardChain& c, std::vector<std::vector<NodeId>>* parts,
                            FusionOption* after, std::vector<Undo>* undos,
                            std::map<int, CachedKernel>* kernels) {
    const int hint = opt_.schedule.attention_dq_sums;
    if (parts->size() != 2 || hint == 0) return "";
    for (auto u = undos->rbegin(); u != undos->rend(); ++u) undo(*u);
    std::vector<NodeId> grads = (*parts)[0];
    grads.insert(grads.end(), (*parts)[1].begin(), (*parts)[1].end());
    std::vector<Undo> one_undos;
    std::map<int, CachedKernel> one_kernels;
    const FusionOption one = backward_kernels(c, {grads}, &one_undos, &one_kernels);
    const bool possible = one.legal && one.fits;
    if (possible && (hint == 1 || !after->legal || !after->fits || one.predicted_s < after->predicted_s)) {
      const std::string text = fmt::format(
          "the two kernels (dQ over the keys, deterministic) predicted {:.3f} ms", after->predicted_s * 1e3);
      *parts = {grads};
      *after = one;
      *undos = std::move(one_undos);
      *kernels = std::move(one_kernels);
      return text;
    }
    for (auto u = one_undos.rbegin(); u != one_undos.rend(); ++u) undo(*u);
    // (The two kernels' moves again: into the same groups, so their kernels as built stand.)
    undos->clear();
    apply_parts(c, *parts, undos);
    double reduce_s = 0;
    for (const auto& [h, k] : one_kernels)
      if (k.kernel) reduce_s += k.kernel->cost.reduce_s;
    return possible ? fmt::format(
                          "dQ summed across the key blocks in one kernel (5 products, not 7) predicted "
                          "{:.3f} ms, {:.3f} of them its f32 sums at L2",
                          one.predicted_s * 1e3, reduce_s * 1e3)
                    : "not dQ summed across the key blocks: " + one.why_not;
  }

  // A backward chain's parts as groups: each part's nodes merged into one and the chain's shared
  // nodes duplicated into every part's (computed in each, written by none) — the moves applied,
  // their undos in `undos`. The parts' groups.
  std::vector<int> apply_parts(const BackwardChain& c, const std::vector<std::vector<NodeId>>& parts,
                               std::vector<Undo>* undos) {
    std::vector<int> targets;
    for (const std::vector<NodeId>& nodes : parts) {
      std::vector<int> into;
      for (NodeId x : nodes) into.push_back(*where_[x].begin());
      if (into.size() > 1) undos->push_back(apply(Move{Verdict::Merged, -1, into}));
      targets.push_back(into[0]);
    }
    for (NodeId x : c.shared()) undos->push_back(apply(Move{Verdict::Duplicated, x, targets}));
    return targets;
  }
  // The parts applied (apply_parts) and their kernels built into `kernels`.
  FusionOption backward_kernels(const BackwardChain& c, const std::vector<std::vector<NodeId>>& parts,
                                std::vector<Undo>* undos, std::map<int, CachedKernel>* kernels) {
    const std::vector<int> targets = apply_parts(c, parts, undos);
    FusionOption o;
    o.verdict = Verdict::Fused;
    for (int t : targets) {
      CachedKernel& k = (*kernels)[t];
      k.built = true;
      const auto& members = groups_[t];
      k.kernel = build_kernel(g_, {members.begin(), members.end()}, outputs_of(t), opt_.profile,
                              opt_.schedule, &k.why);
      if (!k.kernel) {
        o.legal = false;
        o.why_not = k.why;
        return o;
      }
      o.kernels++;
      o.bytes += k.kernel->cost.bytes();
      o.registers = std::max(o.registers, k.kernel->cost.registers);
      o.predicted_s += k.kernel->cost.predicted_s;
    }
    return o;
  }

  // The decision that fused a chain whose first product is `scores`: the plan without the rule
  // against the chain's kernels (its reason the caller's).
  FusionDecision chain_decision(NodeId scores, const FusionOption& before, const FusionOption& after) {
    FusionDecision d;
    d.producer = scores;
    d.consumers = users_[scores];
    d.options = {before, after};
    record_outcome(d, before, after);
    return d;
  }

  // The chain as the edge-by-edge decisions plan it without the rule (the scores written and read
  // again): the kernels of that plan that compute any of its nodes.
  FusionOption scores_written(const std::vector<NodeId>& nodes) {
    if (!without_chains_) {
      FusionOptions o = opt_;
      o.contraction_chains = false;
      without_chains_ = FusionPass(g_, o).run();
    }
    FusionOption before;
    before.verdict = Verdict::Materialized;
    for (const Kernel& k : without_chains_->kernels) {
      bool touches = false;
      for (NodeId n : k.nodes) touches |= std::binary_search(nodes.begin(), nodes.end(), n);
      if (!touches) continue;
      before.kernels++;
      before.bytes += k.cost.bytes();
      before.registers = std::max(before.registers, k.cost.registers);
      before.predicted_s += k.cost.predicted_s;
    }
    return before;
  }

  // The edge-by-edge decisions above see one producer at a time, so they can leave a kernel
  // and its consumer kernel both reading the same tensor — RMSNorm's sum of squares and its
  // scaling both read x when the reduction was weighed before x·x joined it — and they never
  // weigh two kernels that no edge joins: a row's Σx² and max of one x. Nor do they take a
  // producer into some of its consumers while others (a matmul) must read it from memory:
  // mlp_train's GELU' and its column sum db1. Afterwards, a producer kernel and a consumer
  // kernel are merged (the producer's output still written for the others), and then kernels
  // that read a tensor in common with no path of kernels between them, when the merged kernel
  // is legal, fits, and is predicted faster; each merge is a decision.
  void merge_sharing_kernels(std::vector<FusionDecision>* decisions) {
    for (bool siblings : {false, true})
      while (merge_one(siblings, decisions)) {
      }
  }

  // The first pair of kernels that merges: group a and one it feeds, or (`siblings`) a and a
  // later group that reads a tensor in common with it and no path of kernels joins either way.
  bool merge_one(bool siblings, std::vector<FusionDecision>* decisions) {
    for (int a = 0; a < static_cast<int>(groups_.size()); ++a) {
      if (groups_[a].empty() || !kernel(a).kernel) continue;
      for (int b : siblings ? later_groups(a) : successors(a)) {
        if (!kernel(b).kernel) continue;
        const std::vector<NodeId>& reads_a = kernel(a).kernel->inputs;
        const std::vector<NodeId>& reads_b = kernel(b).kernel->inputs;
        std::vector<NodeId> shared;
        std::set_intersection(reads_a.begin(), reads_a.end(), reads_b.begin(), reads_b.end(),
                              std::back_inserter(shared));
        if (siblings && (shared.empty() || reaches(a, b) || reaches(b, a))) continue;
        if (try_merge(a, b, shared, decisions)) return true;
      }
    }
    return false;
  }

  bool still_written(int h, NodeId n) {
    const std::vector<NodeId>& outs = kernel(h).kernel->outputs;
    return std::find(outs.begin(), outs.end(), n) != outs.end();
  }

  bool try_merge(int a, int b, const std::vector<NodeId>& shared, std::vector<FusionDecision>* decisions) {
    const std::set<int> touched = {a, b};
    const std::set<NodeId> members_a = groups_[a], members_b = groups_[b];
    FusionOption before = evaluate({Verdict::Materialized, -1, {}}, touched, nullptr);
    Move merge{Verdict::Merged, -1, {a, b}};
    Undo u = apply(merge);
    std::map<int, CachedKernel> kernels;
    FusionOption after = evaluate(merge, touched, &kernels);
    if (!after.legal || !after.fits || after.predicted_s >= before.predicted_s * 0.999) {
      undo(u);
      return false;
    }
    cache_[a] = std::move(kernels[a]);
    cache_[b] = {};
    FusionDecision d;
    for (NodeId n : members_b)
      for (NodeId o : g_.node(n).operands)
        if (members_a.count(o) && !members_b.count(o)) {
          if (d.producer < 0) d.producer = o;
          if (o == d.producer && std::find(d.consumers.begin(), d.consumers.end(), n) == d.consumers.end())
            d.consumers.push_back(n);
        }
    const bool edge = d.producer >= 0;
    if (!edge) {  // two kernels no edge joins: the decision is about the tensor they share
      d.producer = shared[0];
      for (const std::set<NodeId>* members : {&members_a, &members_b})
        for (NodeId n : *members)
          if (std::count(g_.node(n).operands.begin(), g_.node(n).operands.end(), shared[0])) {
            d.consumers.push_back(n);
            break;
          }
    }
    d.options = {before, after};
    record_outcome(d, before, after);
    std::vector<std::string> names, cons;
    for (NodeId n : shared) names.push_back(tensor_name(g_.node(n)));
    for (NodeId c : d.consumers) cons.push_back(describe(c));
    d.reason =
        edge && shared.empty()
            ? fmt::format(
                  "{} → {}: afterwards, the kernel computing {} and its consumer's kernel merged: {} "
                  "is not read back{}",
                  describe(d.producer), fmt::join(cons, ", "), describe(d.producer),
                  tensor_name(g_.node(d.producer)),
                  still_written(a, d.producer) ? " (still written: other kernels read it)" : "")
        : edge ? fmt::format(
                     "{} → {}: afterwards, the kernel computing {} and its consumer's kernel both read {}; "
                     "merged, one kernel reads {} once",
                     describe(d.producer), fmt::join(cons, ", "), describe(d.producer),
                     fmt::join(names, ", "), names.size() == 1 ? "it" : "them")
               : fmt::format(
                     "{} → {}: afterwards, the kernels computing {} and {} both read {}, and no kernel "
                     "lies between them; merged, one kernel reads {} once",
                     describe(d.producer), fmt::join(cons, ", "), describe(d.consumers.at(0)),
                     describe(d.consumers.at(1)), fmt::join(names, ", "), names.size() == 1 ? "it" : "them");
    decisions->push_back(d);
    return true;
  }

  // ---- the plan's kernels ----

  // Groups in dependency order (ready groups by their first node, so kernel order follows the
  // program).
  std::vector<int> topo_groups() const {
    std::vector<int> indeg(groups_.size(), 0), order;
    std::vector<std::set<int>> edges(groups_.size());
    size_t live = 0;
    for (size_t h = 0; h < groups_.size(); ++h) {
      if (groups_[h].empty()) continue;
      live++;
      edges[h] = successors(static_cast<int>(h));
    }
    for (const auto& e : edges)
      for (int h : e) indeg[h]++;
    std::set<std::pair<NodeId, int>> ready;
    for (size_t h = 0; h < groups_.size(); ++h)
      if (!groups_[h].empty() && indeg[h] == 0) ready.insert({*groups_[h].begin(), static_cast<int>(h)});
    while (!ready.empty()) {
      int h = ready.begin()->second;
      ready.erase(ready.begin());
      order.push_back(h);
      for (int t : edges[h])
        if (--indeg[t] == 0) ready.insert({*groups_[t].begin(), t});
    }
    if (order.size() != live) throw Error(fmt::format("graph '{}': fusion left a cycle between kernels", g_.name()));
    return order;
  }

  std::vector<Kernel> ordered_kernels() {
    std::vector<Kernel> out;
    std::string base;
    for (char c : g_.name()) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    for (int h : topo_groups()) {
      const CachedKernel& c = kernel(h);
      if (!c.kernel) {
        std::vector<std::string> nodes;
        for (NodeId n : groups_[h]) nodes.push_back(describe(n));
        throw UnsupportedError(
            fmt::format("graph '{}': no kernel can compute {}: {}", g_.name(), fmt::join(nodes, ", "), c.why));
      }
      Kernel k = *c.kernel;
      k.name = fmt::format("{}_k{}", base, out.size());
      out.push_back(std::move(k));
    }
    return out;
  }

  const Graph& g_;
  const FusionOptions& opt_;
  std::vector<bool> live_;                  // some graph output depends on it
  std::vector<std::vector<NodeId>> users_;  // live users only
  std::vector<std::set<NodeId>> groups_;    // group id → members; empty once merged away
  std::vector<std::set<int>> where_;        // node → groups computing it
  std::vector<CachedKernel> cache_;
  std::set<NodeId> in_chain_;               // nodes of the attention kernels fused
  std::optional<Plan> without_chains_;       // the plan with no chain fused (scores_written)
  std::map<NodeId, std::string> backward_why_;  // dS' (or what a product takes): why no backward fused
  std::map<NodeId, std::string> chain_why_;  // a probabilities node: why its chain did not fuse         // group id → its kernel
};

}  // namespace

// Schedule hints (named by their CLI flags too) and the device profile's constants: a value out
// of range gets a message naming it, not a division by zero deep in the cost model.
void check_fusion_options(const FusionOptions& o) {
  const ScheduleHints& h = o.schedule;
  auto bad_hint = [](const char* field, const char* flag, int v, const char* range) {
    return Error(fmt::format("schedule hint {} ({} {}) must be {}", field, flag, v, range));
  };
  if (h.block_threads &&
      (h.block_threads < 32 || h.block_threads > 1024 || (h.block_threads & (h.block_threads - 1))))
    throw bad_hint("block_threads", "--block-threads", h.block_threads, "a power of two from 32 to 1024");
  if (h.rows_per_thread < 0 || h.rows_per_thread > 16)
    throw bad_hint("rows_per_thread", "--rows-per-thread", h.rows_per_thread, "from 1 to 16");
  if (h.max_cluster_blocks < 0 || h.max_cluster_blocks > 16)
    throw bad_hint("max_cluster_blocks", "--max-cluster", h.max_cluster_blocks, "from 1 to 16");
  if (h.stages < -1 || h.stages > 4) throw bad_hint("stages", "--stages", h.stages, "from 0 to 4");
  if (h.split < -1 || h.split > 1) throw bad_hint("split", "--split", h.split, "0 or 1");
  if (h.window < -1 || h.window > 1) throw bad_hint("window", "--window", h.window, "0 or 1");
  if (h.cluster_online < -1 || h.cluster_online > 1)
    throw bad_hint("cluster_online", "--cluster-online", h.cluster_online, "-1, 0 or 1");
  if (h.block_online < -1 || h.block_online > 1)
    throw bad_hint("block_online", "--block-online", h.block_online, "0 or 1");
  if (h.refill_at_read < -1 || h.refill_at_read > 1)
    throw bad_hint("refill_at_read", "--refill-at-read", h.refill_at_read, "-1, 0 or 1");
  if (h.part_elements != 0 && h.part_elements != 16 && h.part_elements != 32 && h.part_elements != 64)
    throw bad_hint("part_elements", "--part-elements", h.part_elements, "16, 32 or 64");
  if (h.fetch_parts_early < -1 || h.fetch_parts_early > 1)
    throw bad_hint("fetch_parts_early", "--fetch-parts-early", h.fetch_parts_early, "-1, 0 or 1");
  for (auto [field, v] : {std::pair<const char*, int>{"gemm_block_m", h.gemm_block_m}, {"gemm_block_n", h.gemm_block_n}})
    if (v != 0 && v != 64 && v != 128 && v != 256) throw bad_hint(field, "--gemm-tile", v, "64, 128 or 256");
  if (int64_t{h.gemm_block_m ? h.gemm_block_m : 128} * (h.gemm_block_n ? h.gemm_block_n : 128) > 128 * 256)
    throw Error(fmt::format("schedule hint --gemm-tile {}x{}: a block of 256 threads would hold {} accumulator values "
                            "each, more than its registers; at most 128x256 or 256x128",
                            h.gemm_block_m, h.gemm_block_n, h.gemm_block_m * h.gemm_block_n / 256));
  if (h.gemm_group < 0 || h.gemm_group > 64) throw bad_hint("gemm_group", "--gemm-group", h.gemm_group, "from 1 to 64");
  const DeviceProfile& p = o.profile;
  auto positive = [&](const char* field, double v) {
    if (!(v > 0))
      throw Error(fmt::format("device profile '{}': {} is {}; it must be positive", p.name, field, v));
  };
  positive("hbm_bytes_per_s", p.hbm_bytes_per_s);
  positive("instructions_per_s", p.instructions_per_s);
  positive("exp2_per_s", p.exp2_per_s);
  positive("bf16_matmul_flops", p.bf16_matmul_flops);
  positive("bf16_matmul_unaligned_flops", p.bf16_matmul_unaligned_flops);
  for (const auto& [shape, flops] : p.library_gemm_flops)
    positive(fmt::format("library_gemm_flops[{}]", shape).c_str(), flops);
  positive("pitch_copy_bytes_per_s", p.pitch_copy_bytes_per_s);
  positive("mma_sync_flops", p.mma_sync_flops);
  positive("mma_sync_direct_flops", p.mma_sync_direct_flops);
  positive("wgmma_flops", p.wgmma_flops);
  positive("wgmma_tma_flops", p.wgmma_tma_flops);
  positive("sm_count", p.sm_count);
  positive("max_threads_per_sm", p.max_threads_per_sm);
  positive("max_blocks_per_sm", p.max_blocks_per_sm);
  positive("registers_per_sm", p.registers_per_sm);
  positive("max_registers_per_thread", p.max_registers_per_thread);
  positive("max_cluster_blocks", p.max_cluster_blocks);
  positive("max_shared_bytes_per_block", static_cast<double>(p.max_shared_bytes_per_block));
  positive("shared_bytes_per_sm", static_cast<double>(p.shared_bytes_per_sm));
  for (auto [field, v] : {std::pair<const char*, double>{"launch_s", p.launch_s}, {"memory_latency_s", p.memory_latency_s},
                          {"l2_bytes", p.l2_bytes}, {"row_step_s", p.row_step_s},
                          {"cluster_exchange_s", p.cluster_exchange_s}, {"split_step_s", p.split_step_s}})
    if (!(v >= 0) || std::isinf(v))
      throw Error(fmt::format("device profile '{}': {} is {}; it must be finite and not negative", p.name, field, v));
}

static Plan plan_graph(const Graph& g, const FusionOptions& options) {
  verify(g);
  for (const Node& n : g.nodes()) {
    if (op_info(n.op).kind != OpKind::Reduce) continue;
    // One contiguous block of axes (size-1 axes inside it count as reduced): the rows, or the
    // columns of a [P, R, C] view.
    const Shape& in = g.node(n.operands[0]).shape;
    bool contiguous = true;
    for (int d = n.axes.front(); d <= n.axes.back(); ++d)
      contiguous &= in[static_cast<size_t>(d)] == 1 || std::count(n.axes.begin(), n.axes.end(), d) > 0;
    if (!contiguous)
      throw UnsupportedError(fmt::format(
          "graph '{}': %{} {} reduces axes [{}] of {}{}: tilefuse reduces one block of adjacent axes; "
          "reduce in two steps, or lay the data out so the reduced axes are adjacent",
          g.name(), n.id, op_info(n.op).name, fmt::join(n.axes, ", "), dtype_name(n.dtype),
          shape_str(g.node(n.operands[0]).shape)));
  }
  check_fusion_options(options);
  return FusionPass(g, options).run();  // (iotas stay in pointwise and attention kernels: node_fits)
}

Plan plan_fusion(const Graph& g, const FusionOptions& options) {
  dump("graph", g.name(), print_graph(g));
  Plan p = plan_graph(g, options);
  dump("plan", g.name(), plan_report_text(p));
  return p;
}

}  // namespace tilefuse

namespace tilefuse {

std::vector<std::string> ineffective_hints(const Plan& plan) {
  struct Hint {
    const char* flag;
    int ScheduleHints::*field;
    int unset;
    int ScheduleHints::*second = nullptr;  // a flag setting two fields (--gemm-tile MxN)
  };
  static const Hint hints[] = {{"--block-threads", &ScheduleHints::block_threads, 0},
                               {"--rows-per-thread", &ScheduleHints::rows_per_thread, 0},
                               {"--max-cluster", &ScheduleHints::max_cluster_blocks, 0},
                               {"--stages", &ScheduleHints::stages, -1},
                               {"--split", &ScheduleHints::split, -1},
                               {"--part-elements", &ScheduleHints::part_elements, 0},
                               {"--gemm-tile", &ScheduleHints::gemm_block_m, 0, &ScheduleHints::gemm_block_n},
                               {"--gemm-group", &ScheduleHints::gemm_group, 0},
                               {"--wgmma", &ScheduleHints::gemm_wgmma, -1},
                               {"--attention-wgmma", &ScheduleHints::attention_wgmma, 1},
                               {"--attention-overlap", &ScheduleHints::attention_overlap, -1},
                               {"--attention-rows", &ScheduleHints::attention_block_m, 0},
                               {"--attention-tma", &ScheduleHints::attention_tma, -1},
                               {"--attention-keys", &ScheduleHints::attention_block_n, 0},
                               {"--attention-pingpong", &ScheduleHints::attention_pingpong, 0},
                               {"--attention-lazy-rescale", &ScheduleHints::attention_lazy_rescale, -1},
                               {"--attention-dq-sums", &ScheduleHints::attention_dq_sums, -1},
                               {"--attention-dq-tma", &ScheduleHints::attention_dq_tma, 0},
                               {"--attention-backward-rows", &ScheduleHints::attention_backward_rows, 0},
                               {"--attention-backward-tma", &ScheduleHints::attention_backward_tma, 1},
                               {"--attention-persistent", &ScheduleHints::attention_persistent, -1}};
  auto schedules = [](const Plan& p) {
    std::vector<std::string> out;
    for (const Kernel& k : p.kernels) out.push_back(k.schedule.describe());
    return out;
  };
  std::vector<std::string> out;
  for (const Hint& h : hints) {
    const ScheduleHints& set = plan.options.schedule;
    if (set.*h.field == h.unset && (!h.second || set.*h.second == h.unset)) continue;
    FusionOptions without = plan.options;
    without.schedule.*h.field = h.unset;
    if (h.second) without.schedule.*h.second = h.unset;
    if (schedules(plan_graph(plan.graph, without)) == schedules(plan))
      out.push_back(h.second ? fmt::format("{} {}x{}", h.flag, set.*h.field, set.*h.second)
                             : fmt::format("{} {}", h.flag, set.*h.field));
  }
  return out;
}

}  // namespace tilefuse
