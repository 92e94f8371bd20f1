#pragma once
// Roofline cost model: time = max(bytes / effective bandwidth, instructions / issue rate) + launch.
// Arithmetic is counted in issued instructions, not flops: exp, erf and divisions are sequences
// of FMA, SFU and select instructions, and at 16-bit byte rates their issue time rivals the
// memory time.
// Effective bandwidth falls when too few bytes are in flight to cover memory latency, which is
// how the register estimate (through occupancy) enters the time.
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// One kernel computing `nodes` and writing `outputs`: pointwise, or a row reduction when it
// reduces. Returns nullopt, with the reason in `why`, when the set cannot be one kernel (outputs
// of different shapes, a member that does not broadcast into the domain, reductions of
// different rows, no schedule).
std::optional<Kernel> build_kernel(const Graph& g, const std::vector<NodeId>& nodes,
                                   const std::vector<NodeId>& outputs, const DeviceProfile& profile,
                                   const ScheduleHints& hints, std::string* why);

// The kernel of base's nodes and `producer` (not among them), writing `outputs`: the same as
// build_kernel on the union, in time proportional to the producer's operands and users and the
// kernel's reads and writes rather than to all its nodes (a long chain fused one producer at a
// time stays linear). `users` are the producer's users in the graph.
std::optional<Kernel> extend_kernel(const Graph& g, const Kernel& base, NodeId producer,
                                    const std::vector<NodeId>& users, const std::vector<NodeId>& outputs,
                                    const DeviceProfile& profile, const ScheduleHints& hints, std::string* why);

// Instructions per element for a node of `g` as codegen emits it (from SASS on sm_90): 16-bit
// results take the short exp and GELU, and an f32 exp of x − max x the short form for arguments
// that are never positive.
double instructions_per_element(const Graph& g, const Node& n);
// Of those, the ones on the MUFU pipe (ex2, lg2, rcp, rsqrt, sqrt, tanh.approx: 16 a clock per
// SM, a quarter of the issue rate).
double mufu_per_element(const Node& n);
// math::tanh_absolute (an attention score's tanh, contraction_chain.h): instructions per element,
// two of them MUFU.
constexpr double kTanhAbsoluteInstructions = 7;
// The bytes of kernel k's inputs and outputs, each once, into its cost's bytes read and written.
void count_tensor_bytes(const Graph& g, const Kernel& k, KernelCost* c);
// The multiply-add rate a matmul schedule runs at (the profile's figure for its kind).
double matmul_flops_rate(const TileSchedule& s, const DeviceProfile& p);
// A wgmma GEMM tile's share of that rate, set by the bytes shared memory moves a flop (1 at
// 128×256, 0.8 at 128×128; 1 for every other schedule).
double smem_share(const TileSchedule& s, const DeviceProfile& p);

// A node's shape aligned to kernel k's domain, of the domain's rank: a reduction without keepdim
// has 1s put back where its reduced axes were (for a row reduction, at the right); everything
// else as numpy aligns it.
Shape aligned_shape(const Graph& g, NodeId n, const Kernel& k);
// The shape of one value per row (row reduction, attention: per query) or per column (column
// reduction) of k's domain.
Shape reduced_domain(const Kernel& k);
// One past the last axis reduction r reduces, counting the size-1 axes that follow its block.
int reduced_end(const Graph& g, const Node& r);

// Fills kernel.cost from its totals, operands and schedule.
// Whether kernel k rounds node n to its 16-bit dtype where it computes it: n is written to memory
// (rounded there) and also used inside the kernel, whose uses then see the rounded value too — so
// every use of a value that reaches memory, in any kernel, sees the same value (runtime/check.cpp
// models exactly that). Other values stay in f32 inside a kernel.
bool rounds_where_computed(const Graph& g, const Kernel& k, NodeId n);

// The kernel's matmul node (ScheduleKind::MatMul), or -1.
NodeId contraction(const Graph& g, const Kernel& k);
// Whether matmul kernel k rounds its product to the product's 16-bit dtype before the epilogue:
// where the product reaches memory too, and where a rolled epilogue stages it in the output's
// dtype (TileSchedule::rolled_epilogue). Elsewhere the epilogue takes the f32 accumulator, as
// every 16-bit value is held until stored (and as cuBLASLt's epilogue takes it).
bool rounds_product(const Graph& g, const Kernel& k);

void estimate_cost(const Graph& g, Kernel& kernel, const DeviceProfile& profile);

}  // namespace tilefuse
