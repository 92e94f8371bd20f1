#pragma once
// The Plan is data: an ordered list of kernels, and one FusionDecision per decision considered.
// Reports are rendered from these records and nothing else.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/fusion/device_profile.h"
#include "compiler/fusion/schedule.h"
#include "compiler/graph/graph.h"

namespace tilefuse {

// Pointwise: every axis of the domain parallel. RowReduce: the trailing axes reduced.
// ColumnReduce: a block of axes followed by parallel ones reduced (a bias gradient's sum over
// rows): the domain is [P, R, C] with R reduced. MatMul: one contraction (its domain is the
// product's shape) and a pointwise epilogue on its result. Attention: a contraction chain
// (compiler/fusion/contraction_chain.h), O = softmax(f(Q·Kᵀ))·V as one loop over key tiles.
// Write: a write_at node alone, storing its value's slices into its cache in place.
enum class ScheduleKind { Pointwise, RowReduce, ColumnReduce, MatMul, Attention, AttentionBackward, Write };
const char* schedule_kind_name(ScheduleKind k);

struct KernelCost {
  int64_t bytes_read = 0;       // each external operand read once, at its own size
  int64_t bytes_written = 0;    // each kernel output written once
  int64_t reread_bytes = 0;     // a looped row kernel's later passes re-reading its inputs from HBM
  int64_t l2_reread_bytes = 0;  // the same re-reads when the rows in flight fit in L2
  double instructions = 0;      // issued per thread over the whole domain (cost_model.h)
  int registers = 0;            // estimate per thread
  int blocks_per_sm = 0;        // occupancy the estimate allows
  double bytes_in_flight_per_sm = 0;
  // The share of the SMs drawing on memory: a persistent kernel's busy row groups (its last
  // round over the rows may leave some idle), or a grid of fewer blocks than SMs; 1 when all.
  double busy_share = 1;
  double row_steps_s = 0;  // a persistent kernel's serial per-row work, summed over its rounds
  // A pointwise or row kernel's fill and drain: its first loads wait a DRAM latency before bytes
  // flow, and its last stores take about another to land after they stop (cost_model.cpp).
  double fill_drain_s = 0;
  double flops = 0;  // a matmul's multiply-adds, two each
  // A matmul's operands copied into a padded pitch before it (TileSchedule::operand_pitch): the
  // bytes those copies read and write, and their time (part of predicted_s).
  int64_t copy_bytes = 0;
  double copy_s = 0;
  // Memory traffic beyond the tensors': split-K's partial products written to the workspace and
  // read back, and the padded columns of operands read from their copies.
  int64_t scratch_bytes = 0;
  double memory_s = 0, compute_s = 0, predicted_s = 0;
  // A pointwise or row kernel's transcendental functions on the MUFU pipe (a quarter of the
  // issue rate an SM): a third limit beside memory and issue (cost_model.cpp, estimate_cost).
  double mufu_s = 0;
  // Attention's arithmetic in parts: the two products on the tensor cores, the softmax beside
  // them (its issued instructions or its exponents on the MUFU pipe, whichever is longer; its
  // bound named by exp_bound), and how much of the softmax the schedule hides under the products.
  double tensor_s = 0, softmax_s = 0, hidden_s = 0;
  bool exp_bound = false;
  // Reductions into memory at L2 (the attention backward's dQ summed across key blocks): their
  // time, not overlapped with the products (measured: bench/NOTES.md).
  double reduce_s = 0;
  int64_t bytes() const { return bytes_read + bytes_written + reread_bytes + copy_bytes + scratch_bytes; }
};

// Sums over a kernel's nodes that its cost needs, kept so that a kernel grown by one producer is
// costed without visiting the rest (cost_model.h: extend_kernel).
struct NodeTotals {
  double instructions_per_element = 0;  // Σ instructions_per_element over the nodes
  // The same split for issue slots (cost_model.cpp, issue_slots): over the nodes that span the
  // domain (a reduction 1, a division by a divisor broadcast over it 1); over the smaller ones
  // (a division's reciprocals among them), each once and each times its share of the domain.
  double element_instructions = 0, small_instructions = 0, spread_instructions = 0;
  double mufu_elements = 0;             // Σ mufu_per_element × the node's elements in the domain
  double mufu_per_element = 0;          // attention: Σ mufu_per_element over the score ops
  int scratch_regs = 0;                 // the largest scratch_regs of a node
  int reductions = 0;
  int online_sums = 0;  // row kernels: sums of exps computed in their max's pass
};

// A matmul kernel computed by the vendor library (cuBLASLt) instead of generated code, with the
// native epilogue it folds in (compiler/fusion/library_gemm.h).
enum class LibraryEpilogue { None, Bias, BiasRelu, BiasGeluTanh };
const char* library_epilogue_name(LibraryEpilogue e);

struct Kernel {
  std::string name;
  ScheduleKind kind = ScheduleKind::Pointwise;
  std::vector<NodeId> nodes;    // computed here, in topological order
  std::vector<NodeId> inputs;   // read from memory: graph inputs or other kernels' outputs
  std::vector<NodeId> outputs;  // written to memory
  Shape domain;                 // pointwise: the outputs' shape; reduction: the reduced input's
  int split = -1;               // reduction: first reduced axis of the domain
  int reduce_end = -1;          // reduction: one past the last reduced axis (the rank, for rows)
  int passes = 1;               // row reduction: passes over each row (row_passes.h)
  TileSchedule schedule;
  KernelCost cost;
  NodeTotals totals;
  std::optional<LibraryEpilogue> library;  // set: cuBLASLt computes it (kind MatMul)
};

enum class Verdict { Fused, Merged, Duplicated, Materialized };
const char* verdict_name(Verdict v);

// Which layer of the pass stopped a fusion option.
enum class Layer { Legality, Budget, Profitability };
const char* layer_name(Layer l);

struct FusionOption {
  Verdict verdict;  // what taking this option means
  bool legal = true;
  bool fits = true;        // within the register budget
  std::string why_not;     // empty when legal and fitting
  int kernels = 0;         // kernels touched after the option
  int64_t bytes = 0;       // HBM bytes of the touched kernels after the option
  int registers = 0;       // max estimated registers of the touched kernels
  double predicted_s = 0;  // predicted time of the touched kernels
};

struct FusionDecision {
  NodeId producer = -1;
  std::vector<NodeId> consumers;
  Verdict verdict = Verdict::Materialized;
  std::optional<Layer> stopped_by;  // set when a fusing option was refused
  std::string reason;
  int64_t bytes_saved = 0;
  int launches_saved = 0;
  int registers_before = 0, registers_after = 0;
  double duplicated_instructions = 0;
  int64_t duplicated_bytes = 0;  // extra reads of the producer's operands by the copies
  bool library_gemm_lost = false;
  double predicted_before_s = 0, predicted_after_s = 0;
  std::vector<FusionOption> options;
};

// One way to compute a matmul kernel and its epilogue (compiler/fusion/library_gemm.h).
struct GemmOption {
  std::string name;         // "cuBLASLt GEMM, then the epilogue", …
  bool applies = true;      // false: the option does not fit this kernel (why_not says why)
  std::string why_not;
  double predicted_s = 0;   // when it applies
};

struct GemmChoice {
  std::string kernel;       // the plan's matmul kernel
  NodeId matmul = -1;
  std::vector<GemmOption> options;  // (i), (ii), (iii), in that order
  int chosen = 2;           // index into options
  // Why the chosen option was taken over a faster one (empty when it is the fastest).
  std::string note;
  // Predicted time the chosen option loses against the fastest that applies (0 when none).
  double lost_s = 0;
};

struct PlanTotals {
  int kernels = 0;
  int64_t bytes = 0;
  double predicted_s = 0;
};

enum class LibraryGemmUse { Never, WhenFaster, Always };

struct FusionOptions {
  bool fuse = true;
  // Contraction chains (attention) become one kernel where the rule holds (contraction_chain.h);
  // off, their nodes are decided edge by edge like any other (the scores written).
  bool contraction_chains = true;
  // Whether a matmul kernel may be cuBLASLt's (the report's "library GEMM priced"): never, where
  // the library is predicted faster (the default), or wherever it can compute the kernel.
  LibraryGemmUse library_gemm = LibraryGemmUse::WhenFaster;
  int max_registers = 128;  // per thread; a fused kernel estimated above this is refused
  ScheduleHints schedule;
  DeviceProfile profile = DeviceProfile::h200();
};

struct Plan {
  Graph graph;
  FusionOptions options;
  std::vector<Kernel> kernels;          // in launch (dependency) order
  std::vector<Kernel> unfused_kernels;  // the baseline: one kernel per op, in the same order
  std::vector<FusionDecision> decisions;
  std::vector<NodeId> dead;  // computed nodes no output depends on: not compiled
  std::vector<GemmChoice> gemm_choices;  // per matmul kernel: the library GEMM, priced
  PlanTotals unfused, fused;
};

}  // namespace tilefuse
