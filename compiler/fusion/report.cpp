#include "compiler/fusion/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/iteration_space.h"
#include "compiler/fusion/library_gemm.h"
#include "compiler/support/json.h"

namespace tilefuse {

static std::string bytes_str(int64_t b) {
  std::string digits = std::to_string(b < 0 ? -b : b), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (b < 0 ? "-" : "") + out;
}

static std::string ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }

static std::string tensor_desc(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string name = tensor_name(n);
  for (const GraphOutput& o : g.outputs())
    if (o.node == id) name = o.name;
  if (n.op == Op::WriteAt)  // stored in its cache's memory
    name += fmt::format(" (in '{}' in place)", g.node(storage_of(g, id)).name);
  return fmt::format("{} {}{}", name, dtype_name(n.dtype), shape_str(n.shape));
}

static std::string node_desc(const Graph& g, NodeId id) {
  return fmt::format("%{} {}", id, op_info(g.node(id).op).name);
}

static std::string registers_line(const Kernel& k, const MeasuredKernels& measured) {
  std::string s = fmt::format("registers: estimate {}", k.cost.registers);
  auto it = measured.find(k.name);
  if (it != measured.end() && it->second.registers >= 0) {
    s += fmt::format(", {} {}", it->second.source, it->second.registers);
    if (it->second.spill_bytes >= 0) s += fmt::format(" ({} bytes spilled)", it->second.spill_bytes);
    for (const std::string& note : it->second.notes) s += fmt::format("; ptxas: {}", note);
  } else {
    s += ", ptxas: not run";
  }
  return s;
}

// The kernel's blocks per SM: the model's, or — where ptxas's register count allows fewer — that
// count, saying so (the model estimates registers before codegen).
static std::string occupancy(const Kernel& k, const MeasuredKernels& measured, const DeviceProfile& p) {
  auto it = measured.find(k.name);
  const int threads = k.schedule.block_threads();
  if (it == measured.end() || it->second.registers <= 0 || threads <= 0)
    return fmt::format("occupancy {} blocks/SM", k.cost.blocks_per_sm);
  const int by_registers = p.blocks_by_registers(it->second.registers, threads);
  if (by_registers >= k.cost.blocks_per_sm) return fmt::format("occupancy {} blocks/SM", k.cost.blocks_per_sm);
  return fmt::format("occupancy {} blocks/SM at ptxas's registers (the model took {})", std::max(by_registers, 0),
                     k.cost.blocks_per_sm);
}

// The plan's totals against the unfused plan's, and the unfused plan's kernels.
static std::string totals_text(const Plan& plan) {
  const Graph& g = plan.graph;
  const DeviceProfile& p = plan.options.profile;
  std::string s = fmt::format(
      "fusion plan for {}\n  profile {}: {:.0f} GB/s, {:.1f}e12 instructions/s, launch {:.1f} µs; "
      "register budget {}\n\n",
      g.name(), p.name, p.hbm_bytes_per_s / 1e9, p.instructions_per_s / 1e12, p.launch_s * 1e6,
      plan.options.max_registers);
  s += fmt::format("  {:<9}{:>9}{:>10}{:>18}{:>14}\n", "", "kernels", "launches", "HBM bytes", "predicted");
  auto row = [&](const char* label, const PlanTotals& t) {
    s += fmt::format("  {:<9}{:>9}{:>10}{:>18}{:>14}\n", label, t.kernels, t.kernels, bytes_str(t.bytes),
                     ms(t.predicted_s));
  };
  row("unfused", plan.unfused);
  row("fused", plan.fused);
  int64_t saved = plan.unfused.bytes - plan.fused.bytes;
  s += fmt::format("  {:<9}{:>9}{:>10}{:>18}{:>14}   ({:.1f}% of bytes, {:.2f}x predicted)\n\n", "saved", "",
                   plan.unfused.kernels - plan.fused.kernels, bytes_str(saved),
                   ms(plan.unfused.predicted_s - plan.fused.predicted_s),
                   plan.unfused.bytes ? 100.0 * saved / plan.unfused.bytes : 0.0,
                   plan.fused.predicted_s > 0 ? plan.unfused.predicted_s / plan.fused.predicted_s : 0.0);

  s += "unfused plan: one kernel per op\n";
  for (const Kernel& k : plan.unfused_kernels)
    s += fmt::format("  {:<28} {:>16} B {:>12}\n", node_desc(g, k.nodes[0]), bytes_str(k.cost.bytes()),
                     ms(k.cost.predicted_s));
  return s;
}

// A row kernel's passes over each row, and where the rows stay.
static std::string row_passes_text(const Kernel& k) {
  if (k.kind != ScheduleKind::RowReduce) return "";
  std::string how =
      k.schedule.cluster_blocks > 1
          ? fmt::format(
                "the row stays in the registers of a cluster of {} blocks, which exchange "
                "partial results through distributed shared memory: inputs read once",
                k.schedule.cluster_blocks)
      : k.schedule.split_blocks > 1
          ? fmt::format(
                "each of the row's {} parts stays in the registers of the block that takes it, "
                "which publishes its (max, sum) pair in global memory ({} B in all): inputs "
                "read once",
                k.schedule.split_blocks, bytes_str(k.schedule.workspace_bytes()))
      : k.schedule.col_iters == 1 ? "the row stays in registers: inputs read once"
      : k.passes == 1             ? "one pass: inputs read once"
      : k.cost.reread_bytes
          ? fmt::format("later passes re-read {} B from HBM", bytes_str(k.cost.reread_bytes))
          : fmt::format("later passes re-read {} B, from L2 (the rows in flight fit)",
                        bytes_str(k.cost.l2_reread_bytes));
  return fmt::format("    {} pass{} over each row; {}\n", k.passes, k.passes == 1 ? "" : "es", how);
}

// Where an attention kernel's arithmetic goes: the products, the softmax and what hides it.
static std::string arithmetic_text(const Kernel& k) {
  std::string s;
  if (k.kind == ScheduleKind::Attention) {
    std::vector<std::string> hiding;
    if (k.schedule.overlap)
      hiding.push_back(attention_pins_pv_wait(k)
                           ? "each step's softmax under the previous step's P·V, its wait pinned below the softmax"
                           : "each step's softmax under the previous step's P·V");
    if (k.schedule.warpgroup_turns) hiding.push_back("the two warpgroups take turns: ping-pong");
    if (hiding.empty()) hiding.push_back("each product waited for before the softmax");
    s += fmt::format("    arithmetic: the products {} on the tensor cores, the softmax {} ({}-bound), {} of it hidden "
                     "under the products ({})\n",
                     ms(k.cost.tensor_s), ms(k.cost.softmax_s), k.cost.exp_bound ? "exponent (MUFU)" : "issue",
                     ms(k.cost.hidden_s), fmt::join(hiding, "; "));
  }
  if (k.kind == ScheduleKind::AttentionBackward)
    s += fmt::format(
        "    arithmetic: the products {} on the tensor cores ({}), P's exponentials and the "
        "per-score work {} ({}-bound){}; {} of the per-score work hidden under the products of the "
        "SM's other blocks ({} an SM)\n",
        ms(k.cost.tensor_s), k.schedule.wgmma ? "wgmma" : "mma.sync", ms(k.cost.softmax_s),
        k.cost.exp_bound ? "exponent (MUFU)" : "issue",
        k.cost.reduce_s > 0 ? fmt::format(", dQ's f32 sums {} at L2", ms(k.cost.reduce_s)) : "",
        ms(k.cost.hidden_s), k.cost.blocks_per_sm);
  return s;
}

// A kernel's copies, its grid's share of the device, and its predicted time and bound.
static std::string cost_text(const Plan& plan, const Kernel& k) {
  std::string s;
  if (k.cost.copy_bytes > 0)
    s += fmt::format("    operand copies into a padded pitch first: {} B read and written, {} (in the prediction)\n",
                     bytes_str(k.cost.copy_bytes), ms(k.cost.copy_s));
  if (k.cost.busy_share < 1 && (k.schedule.stages == 0 || k.schedule.contracts))
    s += fmt::format("    {} blocks for {} SMs: at most {:.1f}% of the device's memory bandwidth\n", k.schedule.grid(),
                     plan.options.profile.sm_count, 100 * k.cost.busy_share);
  else if (k.cost.busy_share < 1)
    s += fmt::format(
        "    persistent grid: its {} are busy {:.1f}% of the time (the last round over "
        "the {} is partial)\n",
        k.schedule.split_blocks > 1 ? "blocks" : "row groups", 100 * k.cost.busy_share,
        k.schedule.split_blocks > 1 ? "row parts" : "rows");
  std::string steps =
      k.cost.row_steps_s > 0 ? fmt::format(", then per-row steps {}", ms(k.cost.row_steps_s)) : "";
  if (k.cost.fill_drain_s > 0) steps += fmt::format(", filling and draining {}", ms(k.cost.fill_drain_s));
  std::string mufu = k.cost.mufu_s > 0.05 * k.cost.predicted_s
                         ? fmt::format(", transcendentals on the MUFU pipe {}", ms(k.cost.mufu_s))
                         : "";
  const bool mufu_bound = k.cost.mufu_s > std::max(k.cost.memory_s, k.cost.compute_s);
  s += fmt::format("    predicted {} ({}-bound: memory {}, arithmetic {}{}{})\n", ms(k.cost.predicted_s),
                   mufu_bound                            ? "MUFU"
                   : k.cost.memory_s >= k.cost.compute_s ? "memory"
                                                         : "compute",
                   ms(k.cost.memory_s), ms(k.cost.compute_s), mufu, steps);
  return s;
}

// A kernel that is cuBLASLt's GEMM: its epilogue and the library's rate (measured or assumed).
static std::string library_gemm_text(const Plan& plan, const Kernel& k) {
  const Graph& g = plan.graph;
  const DeviceProfile& p = plan.options.profile;
  const std::string shape = library_gemm_shape(g, g.node(contraction(g, k))).key();
  const auto rate = p.library_gemm_flops.find(shape);
  return fmt::format("    cuBLASLt GEMM, epilogue {}: no generated code; {:.3g} TFLOP at {}\n",
                     library_epilogue_name(*k.library), k.cost.flops / 1e12,
                     rate != p.library_gemm_flops.end()
                         ? fmt::format("{:.0f} TFLOP/s, the library's rate measured here for {}", rate->second / 1e12,
                                       shape)
                         : fmt::format("the library's {:.0f} TFLOP/s", library_flops_rate(g, k, p) / 1e12));
}

// A matmul's pipe, as the report names it: mma.sync staged or direct, or wgmma and the share of
// its rate a narrow tile's shared-memory bytes a flop leave.
static std::string matmul_pipe(const TileSchedule& s, const DeviceProfile& p) {
  if (!s.wgmma) return s.stages > 0 ? "mma.sync, staged" : "mma.sync, direct";
  const double share = smem_share(s, p);
  return share < 1 ? fmt::format("wgmma, {:.2f} of its rate: the tile's shared-memory bytes a flop", share) : "wgmma";
}

// One kernel of the plan: what it computes, reads and writes, its schedule and its cost.
static std::string kernel_text(const Plan& plan, const Kernel& k, const MeasuredKernels& measured) {
  const Graph& g = plan.graph;
  const DeviceProfile& p = plan.options.profile;
  std::string s;
  std::vector<std::string> nodes, reads, writes;
  for (NodeId n : k.nodes) nodes.push_back(node_desc(g, n));
  for (NodeId n : k.inputs) reads.push_back(tensor_desc(g, n));
  for (NodeId n : k.outputs) writes.push_back(tensor_desc(g, n));
  s += fmt::format("  {}  {}  domain {}\n", k.name, schedule_kind_name(k.kind), shape_str(k.domain));
  s += fmt::format("    computes {}\n", fmt::join(nodes, ", "));
  s += fmt::format("    reads    {} ({} B)\n",
                   reads.empty() ? "nothing" : fmt::format("{}", fmt::join(reads, ", ")),
                   bytes_str(k.cost.bytes_read));
  s += fmt::format("    writes   {} ({} B)\n", fmt::join(writes, ", "), bytes_str(k.cost.bytes_written));
  s += fmt::format("    space    {}\n", iteration_space(g, k).str(g));
  s += k.library ? library_gemm_text(plan, k) : fmt::format("    {}\n", k.schedule.describe());
  s += row_passes_text(k);
  if (k.kind == ScheduleKind::MatMul && !k.library)
    s += fmt::format("    {}; {}; {:.3g} TFLOP at {:.0f} TFLOP/s ({}){}\n", registers_line(k, measured),
                     occupancy(k, measured, p), k.cost.flops / 1e12,
                     matmul_flops_rate(k.schedule, plan.options.profile) / 1e12, matmul_pipe(k.schedule, p),
                     k.nodes.size() > 1 ? "; the epilogue runs on the accumulator's tiles" : "");
  else if (!k.library)
    s += fmt::format("    {}; {}, {:.0f} KB in flight per SM\n", registers_line(k, measured),
                     occupancy(k, measured, p), k.cost.bytes_in_flight_per_sm / 1024);
  return s + arithmetic_text(k) + cost_text(plan, k);
}

// Each fusion decision, its options and what it saves; values not compiled.
static std::string decisions_text(const Plan& plan) {
  const Graph& g = plan.graph;
  std::string s;
  if (!plan.dead.empty()) {
    std::vector<std::string> dead;
    for (NodeId n : plan.dead) dead.push_back(node_desc(g, n));
    s += fmt::format("  not compiled (no output depends on them): {}\n", fmt::join(dead, ", "));
  }
  s += "\ndecisions (consumers first, then merges of kernels that read a tensor in common)\n";
  if (plan.decisions.empty()) s += "  none: fusion is off or no value has a consumer\n";
  std::set<NodeId> by_library;  // matmuls the library GEMM computes
  for (const Kernel& k : plan.kernels)
    if (k.library) by_library.insert(contraction(g, k));
  int i = 0;
  for (const FusionDecision& d : plan.decisions) {
    s += fmt::format("  #{} {}", ++i, verdict_name(d.verdict));
    if (d.stopped_by) s += fmt::format(" (stopped by {})", layer_name(*d.stopped_by));
    s += fmt::format(" — {}\n", d.reason);
    s +=
        fmt::format("     saves {} B and {} launch{}; registers {} → {}; predicted {} → {}\n",
                    bytes_str(d.bytes_saved), d.launches_saved, d.launches_saved == 1 ? "" : "es",
                    d.registers_before, d.registers_after, ms(d.predicted_before_s), ms(d.predicted_after_s));
    if (d.verdict == Verdict::Duplicated)
      s += fmt::format("     duplicated work: {:.0f} instructions, {} B of extra reads\n",
                       d.duplicated_instructions, bytes_str(d.duplicated_bytes));
    std::vector<std::string> opts;
    for (const FusionOption& o : d.options) {
      std::string t =
          fmt::format("{} {}", verdict_name(o.verdict), o.legal ? ms(o.predicted_s) : std::string("illegal"));
      if (o.legal && !o.fits) t += fmt::format(" over budget ({} regs)", o.registers);
      if (o.verdict == d.verdict) t += " ← chosen";
      opts.push_back(t);
    }
    s += fmt::format("     options: {}\n", fmt::join(opts, " | "));
    if (d.library_gemm_lost) s += "     the fused kernel computes the matmul itself: the library GEMM is given up (see below)\n";
    if (d.verdict != Verdict::Materialized && by_library.count(d.producer))
      s += "     undone: the matmul is cuBLASLt's (see the library GEMM priced, below)\n";
  }
  return s;
}

// Each matmul kernel's three ways, priced.
static std::string gemm_choices_text(const Plan& plan) {
  if (plan.gemm_choices.empty()) return "";
  std::string s;
  s += "\nmatmul kernels: the library GEMM priced\n";
  for (const GemmChoice& c : plan.gemm_choices) {
    s += fmt::format("  {} (%{} matmul)\n", c.kernel, c.matmul);
    const char* tag[] = {"(i)  ", "(ii) ", "(iii)"};
    for (size_t o = 0; o < c.options.size(); ++o) {
      const GemmOption& op = c.options[o];
      s += fmt::format("    {} {}: {}{}\n", tag[o], op.name,
                       op.applies ? fmt::format("{} predicted", ms(op.predicted_s)) : "does not apply — " + op.why_not,
                       static_cast<int>(o) == c.chosen ? " ← chosen" : "");
    }
    if (!c.note.empty()) s += fmt::format("    {}: {} predicted lost\n", c.note, ms(c.lost_s));
  }
  return s;
}

std::string plan_report_text(const Plan& plan, const MeasuredKernels& measured) {
  std::string s = totals_text(plan) + "\nkernels\n";
  for (const Kernel& k : plan.kernels) s += kernel_text(plan, k, measured);
  return s + decisions_text(plan) + gemm_choices_text(plan);
}

std::string plan_report_json(const Plan& plan, const MeasuredKernels& measured) {
  const Graph& g = plan.graph;
  JsonWriter j;
  auto totals = [&](const char* key, const PlanTotals& t) {
    j.key(key)
        .begin_object()
        .field("kernels", t.kernels)
        .field("launches", t.kernels)
        .field("bytes", t.bytes)
        .field("predicted_s", t.predicted_s)
        .end_object();
  };
  j.begin_object().field("graph", g.name());
  j.key("profile")
      .begin_object()
      .field("name", plan.options.profile.name)
      .field("hbm_bytes_per_s", plan.options.profile.hbm_bytes_per_s)
      .field("instructions_per_s", plan.options.profile.instructions_per_s)
      .field("launch_s", plan.options.profile.launch_s)
      .end_object();
  j.field("register_budget", plan.options.max_registers);
  totals("unfused", plan.unfused);
  totals("fused", plan.fused);
  j.key("unfused_kernels").begin_array();
  for (const Kernel& k : plan.unfused_kernels)
    j.begin_object()
        .field("node", k.nodes[0])
        .field("op", op_info(g.node(k.nodes[0]).op).name)
        .field("bytes", k.cost.bytes())
        .field("predicted_s", k.cost.predicted_s)
        .end_object();
  j.end_array();
  j.key("kernels").begin_array();
  for (const Kernel& k : plan.kernels) {
    j.begin_object().field("name", k.name).field("schedule", schedule_kind_name(k.kind));
    if (k.library) j.field("library", std::string("cuBLASLt, epilogue ") + library_epilogue_name(*k.library));
    j.array("domain", k.domain).array("nodes", k.nodes).array("inputs", k.inputs).array("outputs", k.outputs);
    j.field("iteration_space", iteration_space(g, k).str(g));
    const TileSchedule& s = k.schedule;
    j.key("tile")
        .begin_object()
        .field("rows", s.rows)
        .field("cols", s.cols)
        .field("vec", s.vec)
        .field("threads_per_row", s.threads_per_row)
        .field("thread_rows", s.thread_rows)
        .field("rows_per_thread", s.rows_per_thread)
        .field("block_threads", s.block_threads())
        .field("grid", s.grid())
        .field("col_iters", s.col_iters)
        .field("cluster_blocks", s.cluster_blocks)
        .field("stages", s.stages)
        .field("stage_bytes", s.stage_bytes)
        .field("split_blocks", s.split_blocks)
        .field("claims_rows", s.claims_rows())
        .field("workspace_bytes", s.workspace_bytes());
    if (s.contracts)
      j.field("batch", s.batch).field("m", s.m).field("n", s.n).field("k", s.k).field("block_m", s.block_m)
          .field("block_n", s.block_n).field("block_k", s.block_k).field("warps_m", s.warps_m).field("warps_n", s.warps_n)
          .field("a_pitch", s.operand_pitch[0]).field("b_pitch", s.operand_pitch[1]);
    if (s.attention)
      j.field("heads_per_block", s.heads_per_block).field("kv_splits", s.kv_splits).field("tma", s.tma)
          .field("overlap", s.overlap).field("warpgroup_turns", s.warpgroup_turns);
    if (s.attention_backward > 0) j.field("attention_backward", s.attention_backward).field("tma", s.tma);
    j.end_object();
    if (s.attention)
      j.field("tensor_s", k.cost.tensor_s).field("softmax_s", k.cost.softmax_s).field("hidden_s", k.cost.hidden_s);
    j.field("bytes_read", k.cost.bytes_read)
        .field("flops", k.cost.flops)
        .field("bytes_written", k.cost.bytes_written)
        .field("instructions", k.cost.instructions)
        .field("memory_s", k.cost.memory_s)
        .field("compute_s", k.cost.compute_s)
        .field("mufu_s", k.cost.mufu_s)
        .field("registers_estimate", k.cost.registers)
        .field("passes", k.passes)
        .field("reread_bytes", k.cost.reread_bytes)
        .field("l2_reread_bytes", k.cost.l2_reread_bytes)
        .field("busy_share", k.cost.busy_share)
        .field("row_steps_s", k.cost.row_steps_s)
        .field("fill_drain_s", k.cost.fill_drain_s)
        .field("copy_bytes", k.cost.copy_bytes)
        .field("copy_s", k.cost.copy_s)
        .field("scratch_bytes", k.cost.scratch_bytes)
        .field("predicted_s", k.cost.predicted_s);
    auto it = measured.find(k.name);
    if (it != measured.end()) {
      j.field("registers_measured", it->second.registers)
          .field("spill_bytes", it->second.spill_bytes)
          .field("registers_source", it->second.source)
          .array("ptxas_notes", it->second.notes);
    }
    j.end_object();
  }
  j.end_array();
  j.array("dead", plan.dead);
  j.key("decisions").begin_array();
  for (const FusionDecision& d : plan.decisions) {
    j.begin_object()
        .field("producer", d.producer)
        .array("consumers", d.consumers)
        .field("verdict", verdict_name(d.verdict));
    if (d.stopped_by) j.field("stopped_by", layer_name(*d.stopped_by));
    j.field("reason", d.reason)
        .field("bytes_saved", d.bytes_saved)
        .field("launches_saved", d.launches_saved)
        .field("registers_before", d.registers_before)
        .field("registers_after", d.registers_after)
        .field("duplicated_instructions", d.duplicated_instructions)
        .field("duplicated_bytes", d.duplicated_bytes)
        .field("library_gemm_lost", d.library_gemm_lost)
        .field("predicted_before_s", d.predicted_before_s)
        .field("predicted_after_s", d.predicted_after_s);
    j.key("options").begin_array();
    for (const FusionOption& o : d.options) {
      j.begin_object()
          .field("verdict", verdict_name(o.verdict))
          .field("legal", o.legal)
          .field("fits", o.fits)
          .field("why_not", o.why_not)
          .field("kernels", o.kernels)
          .field("bytes", o.bytes)
          .field("registers", o.registers)
          .field("predicted_s", o.predicted_s)
          .end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();
  j.key("gemm_choices").begin_array();
  for (const GemmChoice& c : plan.gemm_choices) {
    j.begin_object().field("kernel", c.kernel).field("matmul", c.matmul).field("chosen", c.chosen);
    j.field("note", c.note).field("lost_s", c.lost_s);
    j.key("options").begin_array();
    for (const GemmOption& o : c.options)
      j.begin_object()
          .field("name", o.name)
          .field("applies", o.applies)
          .field("why_not", o.why_not)
          .field("predicted_s", o.predicted_s)
          .end_object();
    j.end_array().end_object();
  }
  j.end_array().end_object();
  return j.str() + "\n";
}

}  // namespace tilefuse
