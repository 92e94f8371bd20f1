#include "compiler/fusion/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/support/error.h"

namespace tilefuse {

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Pointwise:
      return "pointwise";
    case ScheduleKind::RowReduce:
      return "row-reduction";
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

// Kernel membership during the pass. A node is in exactly one group, except a duplicated node,
// which is in every group that uses it and written by none.
struct State {
  std::vector<std::set<NodeId>> groups;  // group id → members; empty once merged away
  std::vector<std::set<int>> where;      // node → groups computing it
};

class FusionPass {
 public:
  FusionPass(const Graph& g, const FusionOptions& opt) : g_(g), opt_(opt), live_(g.nodes().size()) {
    for (const GraphOutput& o : g.outputs()) live_[o.node] = true;
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it)
      if (live_[it->id])
        for (NodeId o : it->operands) live_[o] = true;
    users_.resize(g.nodes().size());
    for (const Node& n : g.nodes())
      if (live_[n.id])
        for (NodeId o : n.operands) users_[o].push_back(n.id);
  }

  Plan run() {
    Plan plan;
    plan.graph = g_;
    plan.options = opt_;
    State st;
    st.where.resize(g_.nodes().size());
    for (const Node& n : g_.nodes()) {
      if (is_compute(n) && !live_[n.id]) plan.dead.push_back(n.id);
      if (is_compute(n) && live_[n.id]) {
        st.where[n.id] = {static_cast<int>(st.groups.size())};
        st.groups.push_back({n.id});
      }
    }
    plan.unfused_kernels = ordered_kernels(st);
    plan.unfused = totals_of(plan.unfused_kernels);
    if (opt_.fuse) {
      for (auto it = g_.nodes().rbegin(); it != g_.nodes().rend(); ++it)
        if (is_compute(*it) && live_[it->id] && !users_[it->id].empty())
          plan.decisions.push_back(decide(it->id, st));
      merge_sharing_kernels(st, &plan.decisions);
    }
    plan.kernels = ordered_kernels(st);
    plan.fused = totals_of(plan.kernels);
    return plan;
  }

 private:
  std::vector<NodeId> outputs_of(const State& st, int gid) const {
    std::vector<NodeId> out;
    for (NodeId n : st.groups[gid]) {
      bool needed = g_.is_output(n);
      for (NodeId u : users_[n])
        for (int h : st.where[u])
          if (!st.where[n].count(h)) needed = true;
      if (needed) out.push_back(n);
    }
    return out;
  }

  std::optional<Kernel> kernel_of(const State& st, int gid, std::string* why) const {
    const auto& m = st.groups[gid];
    return build_kernel(g_, {m.begin(), m.end()}, outputs_of(st, gid), opt_.profile, opt_.schedule, why);
  }

  // Group-level dependency edges: h' → h when h reads a value h' writes.
  std::vector<std::set<int>> group_edges(const State& st) const {
    std::vector<std::set<int>> edges(st.groups.size());
    for (size_t h = 0; h < st.groups.size(); ++h)
      for (NodeId n : st.groups[h])
        for (NodeId o : g_.node(n).operands)
          if (!st.groups[h].count(o))
            for (int src : st.where[o]) edges[src].insert(static_cast<int>(h));
    return edges;
  }

  // Groups in dependency order, or empty when the group graph has a cycle.
  std::vector<int> topo_groups(const State& st) const {
    auto edges = group_edges(st);
    std::vector<int> indeg(st.groups.size(), 0), order;
    for (const auto& e : edges)
      for (int h : e) indeg[h]++;
    // Ready groups ordered by their first node, so kernel order follows the program.
    std::set<std::pair<NodeId, int>> ready;
    size_t live = 0;
    for (size_t h = 0; h < st.groups.size(); ++h) {
      if (st.groups[h].empty()) continue;
      live++;
      if (indeg[h] == 0) ready.insert({*st.groups[h].begin(), static_cast<int>(h)});
    }
    while (!ready.empty()) {
      int h = ready.begin()->second;
      ready.erase(ready.begin());
      order.push_back(h);
      for (int t : edges[h])
        if (--indeg[t] == 0) ready.insert({*st.groups[t].begin(), t});
    }
    if (order.size() != live) order.clear();
    return order;
  }

  // Evaluates the touched groups of a candidate state through the three layers.
  FusionOption evaluate(const State& st, Verdict verdict, const std::set<int>& touched) const {
    FusionOption o;
    o.verdict = verdict;
    for (int h : touched) {
      if (st.groups[h].empty()) continue;
      std::string why;
      auto k = kernel_of(st, h, &why);
      if (!k) {
        o.legal = false;
        o.why_not = why;
        return o;
      }
      o.kernels++;
      o.bytes += k->cost.bytes();
      o.registers = std::max(o.registers, k->cost.registers);
      o.predicted_s += k->cost.predicted_s;
      if (k->cost.registers > opt_.max_registers && o.fits) {
        o.fits = false;
        o.why_not = fmt::format(
            "the fused kernel needs ~{} registers per thread, over the budget "
            "of {}",
            k->cost.registers, opt_.max_registers);
      }
    }
    if (verdict != Verdict::Materialized && topo_groups(st).empty()) {
      o.legal = false;
      o.why_not = "fusing would create a cycle between kernels";
    }
    return o;
  }

  std::string describe(NodeId n) const { return fmt::format("%{} {}", n, op_info(g_.node(n).op).name); }

  FusionDecision decide(NodeId p, State& st) {
    FusionDecision d;
    d.producer = p;
    for (NodeId u : users_[p])
      if (std::find(d.consumers.begin(), d.consumers.end(), u) == d.consumers.end()) d.consumers.push_back(u);
    std::set<int> consumer_groups;
    for (NodeId u : d.consumers) consumer_groups.insert(st.where[u].begin(), st.where[u].end());
    int own = *st.where[p].begin();
    std::set<int> touched = consumer_groups;
    touched.insert(own);

    std::vector<std::pair<FusionOption, State>> candidates;
    candidates.push_back({evaluate(st, Verdict::Materialized, touched), st});
    auto move_into = [&](State& s, int h) {
      s.groups[h].insert(p);
      s.where[p].insert(h);
    };
    if (consumer_groups.size() == 1) {
      State s = st;
      s.groups[own].clear();
      s.where[p].clear();
      move_into(s, *consumer_groups.begin());
      candidates.push_back({evaluate(s, Verdict::Fused, touched), s});
    } else {
      if (!g_.is_output(p)) {
        State s = st;
        s.groups[own].clear();
        s.where[p].clear();
        for (int h : consumer_groups) move_into(s, h);
        candidates.push_back({evaluate(s, Verdict::Duplicated, touched), s});
      }
      State s = st;
      int target = *consumer_groups.begin();
      s.groups[own].clear();
      s.where[p].clear();
      move_into(s, target);
      for (int h : consumer_groups) {
        if (h == target) continue;
        for (NodeId n : s.groups[h]) {
          s.where[n].erase(h);
          s.where[n].insert(target);
          s.groups[target].insert(n);
        }
        s.groups[h].clear();
      }
      candidates.push_back({evaluate(s, Verdict::Merged, touched), s});
    }

    const FusionOption& before = candidates[0].first;
    size_t best = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      const FusionOption& o = candidates[i].first;
      const FusionOption& b = candidates[best].first;
      if (!o.legal || !o.fits) continue;
      // Prefer fewer kernels unless the model predicts a real (> 0.1%) loss.
      if (o.predicted_s < b.predicted_s * 0.999 ||
          (o.predicted_s <= b.predicted_s * 1.001 && o.kernels < b.kernels))
        best = i;
    }
    for (auto& c : candidates) d.options.push_back(c.first);
    const FusionOption& chosen = candidates[best].first;
    d.verdict = chosen.verdict;
    d.bytes_saved = before.bytes - chosen.bytes;
    d.launches_saved = before.kernels - chosen.kernels;
    d.registers_before = before.registers;
    d.registers_after = chosen.registers;
    d.predicted_before_s = before.predicted_s;
    d.predicted_after_s = chosen.predicted_s;

    std::vector<std::string> cons;
    for (NodeId c : d.consumers) cons.push_back(describe(c));
    std::string edge = fmt::format("{} → {}", describe(p), fmt::join(cons, ", "));
    switch (chosen.verdict) {
      case Verdict::Fused:
        d.reason = fmt::format("{}: one kernel; the intermediate never reaches memory", edge);
        break;
      case Verdict::Merged:
        d.reason = fmt::format(
            "{}: the consumers share one domain, so producer and consumers "
            "become one kernel that reads the operands once",
            edge);
        break;
      case Verdict::Duplicated: {
        const Node& pn = g_.node(p);
        int copies = static_cast<int>(consumer_groups.size());
        d.duplicated_instructions =
            (copies - 1) * instructions_per_element(g_, pn) * static_cast<double>(num_elements(pn.shape));
        for (NodeId o : pn.operands)
          if (g_.node(o).op != Op::Constant)
            d.duplicated_bytes += (copies - 1) * num_elements(g_.node(o).shape) *
                                  static_cast<int64_t>(dtype_size(g_.node(o).dtype));
        d.reason = fmt::format(
            "{}: recomputed in each of {} consumer kernels; cheaper than "
            "writing and re-reading it",
            edge, copies);
        break;
      }
      case Verdict::Materialized: {
        bool any_legal = false, any_fit = false;
        const FusionOption* stop = nullptr;
        for (size_t i = 1; i < candidates.size(); ++i) {
          const FusionOption& o = candidates[i].first;
          any_legal |= o.legal;
          any_fit |= o.legal && o.fits;
          if (!stop || (o.legal && !stop->legal) || (o.legal && o.fits && !stop->fits)) stop = &o;
        }
        d.stopped_by = !any_legal ? Layer::Legality : !any_fit ? Layer::Budget : Layer::Profitability;
        if (!stop)
          d.reason = fmt::format("{}: nothing to fuse", edge);
        else if (d.stopped_by == Layer::Profitability)
          d.reason = fmt::format(
              "{}: written once and re-read; {} would take {:.3f} ms against "
              "{:.3f} ms",
              edge, verdict_name(stop->verdict), stop->predicted_s * 1e3, before.predicted_s * 1e3);
        else
          d.reason = fmt::format("{}: not fused ({}): {}", edge, layer_name(*d.stopped_by), stop->why_not);
        break;
      }
    }
    st = candidates[best].second;
    return d;
  }

  // Values group h reads from memory (graph inputs and other groups' outputs).
  std::set<NodeId> reads_of(const State& st, int h) const {
    std::set<NodeId> in;
    for (NodeId n : st.groups[h])
      for (NodeId o : g_.node(n).operands)
        if (!st.groups[h].count(o) && g_.node(o).op != Op::Constant) in.insert(o);
    return in;
  }

  // The edge-by-edge decisions above see one producer at a time, so they can leave a kernel
  // and its consumer kernel both reading the same tensor — RMSNorm's sum of squares and its
  // scaling both read x when the reduction was weighed before x·x joined it. Afterwards, a
  // producer kernel and a consumer kernel that read a tensor in common are merged when the
  // merged kernel is legal, fits, and is predicted faster; each merge is a decision.
  void merge_sharing_kernels(State& st, std::vector<FusionDecision>* decisions) {
    for (bool changed = true; changed;) {
      changed = false;
      auto edges = group_edges(st);
      for (size_t a = 0; a < st.groups.size() && !changed; ++a) {
        if (st.groups[a].empty()) continue;
        std::set<NodeId> reads_a = reads_of(st, static_cast<int>(a));
        for (int b : edges[a]) {
          std::set<NodeId> reads_b = reads_of(st, b);
          std::vector<NodeId> shared;
          for (NodeId n : reads_a)
            if (reads_b.count(n)) shared.push_back(n);
          if (shared.empty()) continue;
          State s = st;
          for (NodeId n : s.groups[b]) {
            s.where[n].erase(b);
            s.where[n].insert(static_cast<int>(a));
            s.groups[a].insert(n);
          }
          s.groups[b].clear();
          std::set<int> touched = {static_cast<int>(a), b};
          FusionOption before = evaluate(st, Verdict::Materialized, touched);
          FusionOption after = evaluate(s, Verdict::Merged, touched);
          if (!after.legal || !after.fits || after.predicted_s >= before.predicted_s * 0.999) continue;
          FusionDecision d;
          for (NodeId n : st.groups[b])
            for (NodeId o : g_.node(n).operands)
              if (st.groups[a].count(o)) {
                if (d.producer < 0) d.producer = o;
                if (o == d.producer &&
                    std::find(d.consumers.begin(), d.consumers.end(), n) == d.consumers.end())
                  d.consumers.push_back(n);
              }
          d.verdict = Verdict::Merged;
          d.options = {before, after};
          d.bytes_saved = before.bytes - after.bytes;
          d.launches_saved = before.kernels - after.kernels;
          d.registers_before = before.registers;
          d.registers_after = after.registers;
          d.predicted_before_s = before.predicted_s;
          d.predicted_after_s = after.predicted_s;
          std::vector<std::string> names, cons;
          for (NodeId n : shared)
            names.push_back(g_.node(n).op == Op::Input ? g_.node(n).name : fmt::format("%{}", n));
          for (NodeId c : d.consumers) cons.push_back(describe(c));
          d.reason = fmt::format(
              "{} → {}: afterwards, the kernel computing {} and its consumer's kernel both read {}; "
              "merged, one kernel reads {} once",
              describe(d.producer), fmt::join(cons, ", "), describe(d.producer), fmt::join(names, ", "),
              names.size() == 1 ? "it" : "them");
          decisions->push_back(d);
          st = s;
          changed = true;
          break;
        }
      }
    }
  }

  std::vector<Kernel> ordered_kernels(const State& st) const {
    std::vector<Kernel> out;
    std::string base;
    for (char c : g_.name()) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    for (int h : topo_groups(st)) {
      std::string why;
      auto k = kernel_of(st, h, &why);
      if (!k) {
        std::vector<std::string> nodes;
        for (NodeId n : st.groups[h]) nodes.push_back(describe(n));
        throw UnsupportedError(fmt::format("graph '{}': no kernel can compute {}: {}", g_.name(),
                                           fmt::join(nodes, ", "), why));
      }
      k->name = fmt::format("{}_k{}", base, out.size());
      out.push_back(std::move(*k));
    }
    return out;
  }

  const Graph& g_;
  const FusionOptions& opt_;
  std::vector<bool> live_;                  // some graph output depends on it
  std::vector<std::vector<NodeId>> users_;  // live users only
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
  const DeviceProfile& p = o.profile;
  auto positive = [&](const char* field, double v) {
    if (!(v > 0))
      throw Error(fmt::format("device profile '{}': {} is {}; it must be positive", p.name, field, v));
  };
  positive("hbm_bytes_per_s", p.hbm_bytes_per_s);
  positive("instructions_per_s", p.instructions_per_s);
  positive("bf16_matmul_flops", p.bf16_matmul_flops);
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

Plan plan_fusion(const Graph& g, const FusionOptions& options) {
  verify(g);
  for (const Node& n : g.nodes()) {
    if (op_info(n.op).kind != OpKind::Reduce) continue;
    // Trailing: every axis from the first reduced one on is reduced or of size 1.
    const Shape& in = g.node(n.operands[0]).shape;
    bool trailing = true;
    for (int d = n.axes.front(); d < static_cast<int>(in.size()); ++d)
      trailing &= in[d] == 1 || std::count(n.axes.begin(), n.axes.end(), d) > 0;
    if (!trailing)
      throw UnsupportedError(fmt::format(
          "graph '{}': %{} {} reduces axes [{}] of {}{}: tilefuse reduces the trailing axes of a tensor "
          "(its rows); lay the data out so the reduced axes come last",
          g.name(), n.id, op_info(n.op).name, fmt::join(n.axes, ", "), dtype_name(n.dtype),
          shape_str(g.node(n.operands[0]).shape)));
  }
  check_fusion_options(options);
  return FusionPass(g, options).run();
}

}  // namespace tilefuse

namespace tilefuse {

std::vector<std::string> ineffective_hints(const Plan& plan) {
  struct Hint {
    const char* flag;
    int ScheduleHints::*field;
    int unset;
  };
  static const Hint hints[] = {{"--block-threads", &ScheduleHints::block_threads, 0},
                               {"--rows-per-thread", &ScheduleHints::rows_per_thread, 0},
                               {"--max-cluster", &ScheduleHints::max_cluster_blocks, 0},
                               {"--stages", &ScheduleHints::stages, -1},
                               {"--split", &ScheduleHints::split, -1}};
  auto schedules = [](const Plan& p) {
    std::vector<std::string> out;
    for (const Kernel& k : p.kernels) out.push_back(k.schedule.describe());
    return out;
  };
  std::vector<std::string> out;
  for (const Hint& h : hints) {
    if (plan.options.schedule.*h.field == h.unset) continue;
    FusionOptions without = plan.options;
    without.schedule.*h.field = h.unset;
    if (schedules(plan_fusion(plan.graph, without)) == schedules(plan))
      out.push_back(fmt::format("{} {}", h.flag, plan.options.schedule.*h.field));
  }
  return out;
}

}  // namespace tilefuse
