#include "runtime/executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

#include "compiler/support/error.h"
#include "compiler/support/trace.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/tile/pitch_copy.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda_driver.h"

namespace tilefuse {

// A matmul operand copied into a padded pitch before each launch of its kernel
// (TileSchedule::operand_pitch; the copy kernel compiler/tile/pitch_copy.h), the kernel reading
// the copy.
struct PitchCopy {
  size_t input;  // into Kernel::inputs
  std::string name;
  std::optional<cuda::Module> module;
  CUfunction copy = nullptr;
  uint64_t grid = 0;
  cuda::DeviceBuffer rows_padded;
};

struct Executable::Device {
  cuda::Stream stream;
  std::vector<cuda::Module> modules;
  std::vector<CUfunction> functions;
  std::map<NodeId, cuda::DeviceBuffer> buffers;  // graph inputs and kernel outputs
  MeasuredKernels driver;
  std::vector<uint64_t> grid;  // per kernel: blocks launched
  // Per kernel with a workspace: the workspace and the epoch of its last launch (CompiledKernel).
  std::vector<cuda::DeviceBuffer> workspace;
  std::vector<uint32_t> epoch;
  // Per kernel: its matmul operands copied into a padded pitch before each launch.
  std::vector<std::vector<PitchCopy>> pitch_copies;
  // Per kernel: its TMA tensor maps (CompiledKernel::tensor_maps) and the addresses they were
  // encoded for; a launch passing another address re-encodes that map.
  struct TensorMaps {
    std::vector<CUtensorMap> maps;
    std::vector<CUdeviceptr> bases;
  };
  std::vector<TensorMaps> tensor_maps;
};

// Kernel k's operand copies (tir::operand_copies): their kernels compiled and loaded, their
// buffers allocated.
static std::vector<PitchCopy> pitch_copies_of(const Graph& g, const Kernel& k, const CodegenOptions& options) {
  std::vector<PitchCopy> copies;
  for (const tir::OperandCopy& o : tir::operand_copies(g, k)) {
    PitchCopy c;
    c.input = o.input;
    c.name = o.name;
    c.module = cuda::Module::load_ptx(program_ptx(o.program(), options), c.name);
    c.copy = c.module->function(c.name);
    c.grid = static_cast<uint64_t>(tir::pitch_copy_blocks(o.rows, o.pitch));
    c.rows_padded = cuda::DeviceBuffer(static_cast<size_t>(o.rows * o.pitch) * dtype_size(o.dtype));
    copies.push_back(std::move(c));
  }
  return copies;
}

int64_t count_unwritten(const TensorData& t) {
  size_t w = dtype_size(t.dtype);
  int64_t n = 0;
  for (size_t i = 0; i < t.bytes.size(); i += w)
    n +=
        std::all_of(t.bytes.begin() + i, t.bytes.begin() + i + w, [](uint8_t b) { return b == kPoisonByte; });
  return n;
}

Executable::Executable(Plan plan, const CodegenOptions& options) : plan_(std::move(plan)), options_(options) {
  for (const Kernel& k : plan_.kernels) {
    compiled_.push_back(compile_kernel(plan_.graph, k, options_));
    if (compiled_.back().library) continue;
    if (auto m = run_ptxas(compiled_.back().ptx, k.name, options_)) ptxas_[k.name] = *m;
  }
}

Executable::~Executable() = default;

MeasuredKernels Executable::measured() const {
  MeasuredKernels m = ptxas_;
  if (dev_)
    for (const auto& [name, d] : dev_->driver)
      if (!m.count(name)) m[name] = d;
  return m;
}

static size_t node_bytes(const Node& n) {
  return static_cast<size_t>(num_elements(n.shape)) * dtype_size(n.dtype);
}

void Executable::load() {
  if (dev_) return;
  cuda::Context::get();
  auto dev = std::make_unique<Device>();
  dev->tensor_maps.resize(compiled_.size());
  for (size_t i = 0; i < compiled_.size(); ++i) {
    const CompiledKernel& c = compiled_[i];
    if (c.library) {  // runtime/cublaslt.h at launch
      std::string why;
      if (!cublaslt::available(&why))
        throw CudaError(fmt::format(
            "kernel {} is cuBLASLt's, which cannot run here ({}); plan with this machine's profile "
            "(note_missing_libraries) or with FusionOptions::library_gemm = LibraryGemmUse::Never",
            c.name, why));
      dev->functions.push_back(nullptr);
      dev->grid.push_back(0);
      dev->workspace.emplace_back(0);
      dev->epoch.push_back(0);
      dev->pitch_copies.emplace_back();
      continue;
    }
    dev->modules.push_back(cuda::Module::load_ptx(c.ptx, c.name));
    CUfunction f = dev->modules.back().function(c.name);
    dev->functions.push_back(f);
    dev->driver[c.name] = {dev->modules.back().num_registers(f), dev->modules.back().local_bytes(f),
                           "driver", {}};
    uint64_t grid = c.grid;
    if (c.cluster_blocks > 1 || c.persistent || c.dynamic_shared_bytes > 0) {
      int resident =
          cuda::prepare_launch(f, {c.block_threads, 1, 1}, c.cluster_blocks, c.dynamic_shared_bytes, c.name);
      if (resident == 0)
        throw CudaError(fmt::format(
            "kernel {}: this GPU cannot place one {} of {} threads ({} registers, {} bytes of dynamic "
            "shared memory each); plan with a smaller --max-cluster or fewer --stages",
            c.name, c.cluster_blocks > 1 ? fmt::format("cluster of {} blocks", c.cluster_blocks) : "block",
            c.block_threads, dev->driver[c.name].registers, c.dynamic_shared_bytes));
      // A persistent kernel gets one block (cluster) per place the device has. (Balancing the
      // rounds — 128 groups for 4096 rows instead of 132 — measured slower on the H200:
      // bench/NOTES.md v7.)
      if (c.persistent) grid = std::min<uint64_t>(grid, uint64_t(resident) * c.cluster_blocks);
      // (A split row's parts wait for each other: they need a block each at once.)
      if (const int parts = plan_.kernels[i].schedule.split_blocks; c.cooperative && grid < static_cast<uint64_t>(parts))
        throw CudaError(fmt::format("kernel {}: its rows are split into {} parts that wait for each other, and this GPU "
                                   "holds {} of its blocks at once; plan with --split 0",
                                   c.name, parts, grid));
    }
    dev->grid.push_back(grid);
    dev->workspace.emplace_back(c.workspace_bytes);
    if (c.workspace_bytes > 0) dev->workspace.back().fill_u8(0);
    dev->epoch.push_back(0);
    dev->pitch_copies.push_back(pitch_copies_of(plan_.graph, plan_.kernels[i], options_));
  }
  // Intermediates here; graph inputs and outputs when a host run first needs them (a run on
  // device memory uses the caller's).
  const Graph& g = plan_.graph;
  for (const Kernel& k : plan_.kernels)
    for (NodeId o : k.outputs)
      if (!g.is_output(o) && storage_of(g, o) == o) dev->buffers.emplace(o, cuda::DeviceBuffer(node_bytes(g.node(o))));
  dev_ = std::move(dev);
}

void Executable::allocate_io() {
  load();
  const Graph& g = plan_.graph;
  for (NodeId id : g.inputs())
    if (!dev_->buffers.count(id)) dev_->buffers.emplace(id, cuda::DeviceBuffer(node_bytes(g.node(id))));
  for (const Kernel& k : plan_.kernels)
    for (NodeId o : k.outputs)
      if (!dev_->buffers.count(o) && storage_of(g, o) == o)
        dev_->buffers.emplace(o, cuda::DeviceBuffer(node_bytes(g.node(o))));
}

void Executable::upload(const TensorMap& inputs) {
  check_inputs(plan_.graph, inputs);
  allocate_io();
  if (last_stream_) {  // a run on the caller's stream finishes before this one touches the buffers
    cuda::synchronize(static_cast<CUstream>(last_stream_));
    last_stream_ = nullptr;
  }
  for (NodeId id : plan_.graph.inputs()) {
    const TensorData& t = inputs.at(plan_.graph.node(id).name);
    dev_->buffers.at(id).upload(t.bytes.data(), t.bytes.size());
  }
}

void Executable::launch_all() { launch_all({}, nullptr); }

// A cuBLASLt kernel (Kernel::library): its matmul's shapes and layouts, and with a native
// epilogue the bias its add reads; its one output is the product or the epilogue's result.
static void launch_library_gemm(const Graph& g, const Kernel& k, const std::function<CUdeviceptr(NodeId)>& address,
                                CUstream stream) {
  const Node& mm = g.node(contraction(g, k));
  const Node &a = g.node(mm.operands[0]), &b = g.node(mm.operands[1]);
  cublaslt::Gemm gemm;
  static_cast<LibraryGemmShape&>(gemm) = library_gemm_shape(g, mm);
  auto batches = [](const Node& o) { return num_elements(o.shape) / (o.shape[o.shape.size() - 2] * o.shape.back()); };
  for (const Node* o : {&a, &b})
    if (batches(*o) != 1 && batches(*o) != gemm.batch)  // the plan never asks for this (library_gemm.cpp)
      throw Error(fmt::format("kernel {}: cuBLASLt cannot read %{} {}, broadcast along some batch axes", k.name,
                              o->id, shape_str(o->shape)));
  gemm.epilogue = *k.library;
  CUdeviceptr bias = 0;  // the operand of the epilogue's add that is not the product
  if (gemm.epilogue != LibraryEpilogue::None)
    for (NodeId n : k.nodes) {
      const Node& add = g.node(n);
      if (add.op == Op::Add) bias = address(add.operands[0] == mm.id ? add.operands[1] : add.operands[0]);
    }
  cublaslt::run(gemm, address(a.id), address(b.id), bias, address(k.outputs.at(0)), stream);
}

void Executable::launch_all(const std::map<NodeId, uint64_t>& at, void* stream_or_null,
                            const std::function<void(size_t)>& after_kernel) {
  CUstream stream = stream_or_null ? static_cast<CUstream>(stream_or_null) : dev_->stream.get();
  auto address = [&](NodeId n) -> CUdeviceptr {
    n = storage_of(plan_.graph, n);  // a write's result: its cache's memory
    auto it = at.find(n);
    return it != at.end() ? static_cast<CUdeviceptr>(it->second) : dev_->buffers.at(n).ptr();
  };
  for (size_t i = 0; i < plan_.kernels.size(); ++i) {
    const Kernel& k = plan_.kernels[i];
    if (compiled_[i].library) {
      TraceRange range("launch " + k.name);
      launch_library_gemm(plan_.graph, k, address, stream);
      if (after_kernel) after_kernel(i);
      continue;
    }
    std::vector<CUdeviceptr> ptrs;
    for (NodeId n : k.inputs) ptrs.push_back(address(n));
    for (PitchCopy& c : dev_->pitch_copies[i]) {
      CUdeviceptr copy_args[2] = {ptrs[c.input], c.rows_padded.ptr()};
      void* args[2] = {&copy_args[0], &copy_args[1]};
      cuda::launch(c.copy, {static_cast<unsigned>(c.grid), 1, 1}, {tir::kPitchCopyThreads, 1, 1}, 0, stream, args,
                   c.name);
      ptrs[c.input] = c.rows_padded.ptr();
    }
    for (NodeId n : k.outputs) ptrs.push_back(address(n));
    const bool workspace = compiled_[i].workspace_bytes > 0;
    if (workspace) ptrs.push_back(dev_->workspace[i].ptr());
    uint32_t epoch = 0;
    if (workspace && ++dev_->epoch[i] == 0) {  // after 2^32 launches: no word may carry a stale epoch
      cuda::synchronize(stream);
      dev_->workspace[i].fill_u8(0);
      dev_->epoch[i] = 1;
    }
    if (workspace) epoch = dev_->epoch[i];
    std::vector<void*> args;
    for (CUdeviceptr& p : ptrs) args.push_back(&p);
    if (workspace) args.push_back(&epoch);
    // TMA tensor maps of the tensors as this launch passes them (a caller's pointers, a copy's),
    // encoded again only where an address changed.
    const std::vector<TensorMapSpec>& specs = compiled_[i].tensor_maps;
    Device::TensorMaps& t = dev_->tensor_maps[i];
    t.maps.resize(specs.size());
    t.bases.resize(specs.size(), 0);
    for (size_t j = 0; j < specs.size(); ++j) {
      const TensorMapSpec& m = specs[j];
      if (t.bases[j] != ptrs.at(m.tensor)) {
        t.maps[j] = cuda::tensor_map(ptrs[m.tensor], m.dtype, m.dims, m.strides, m.box,
                                     fmt::format("kernel {} tensor {}", k.name, m.tensor));
        t.bases[j] = ptrs[m.tensor];
      }
      args.push_back(&t.maps[j]);
    }
    cuda::Dim3 grid{static_cast<unsigned>(dev_->grid[i]), 1, 1};
    cuda::Dim3 block{compiled_[i].block_threads, 1, 1};
    TraceRange range("launch " + k.name);
    cuda::launch(dev_->functions[i], grid, block, compiled_[i].dynamic_shared_bytes, stream, args.data(), k.name,
                 compiled_[i].cluster_blocks, compiled_[i].cooperative);
    if (after_kernel) after_kernel(i);
  }
}

// A caller's device tensor for graph node `n` named `name`: present, of the node's dtype and
// shape, non-null and 16-byte aligned (the kernels' vector accesses need it).
static const DeviceTensor& device_tensor(const DeviceTensorMap& m, const std::string& name, const Node& n,
                                         const char* what) {
  auto it = m.find(name);
  if (it == m.end()) throw InputError(fmt::format("run_on_device: no {} '{}' given", what, name));
  const DeviceTensor& t = it->second;
  if (t.dtype != n.dtype || t.shape != n.shape)
    throw InputError(fmt::format("run_on_device: {} '{}' is {}{}, the graph's is {}{}", what, name, dtype_name(t.dtype),
                                 shape_str(t.shape), dtype_name(n.dtype), shape_str(n.shape)));
  if (t.ptr == 0 || t.ptr % 16 != 0)
    throw InputError(fmt::format("run_on_device: {} '{}' is at {:#x}: device memory must be non-null and 16-byte "
                                 "aligned",
                                 what, name, t.ptr));
  return t;
}

void Executable::run_on_device(const DeviceTensorMap& inputs, const DeviceTensorMap& outputs, void* stream) {
  const Graph& g = plan_.graph;
  std::map<NodeId, uint64_t> at;
  std::set<std::string> known_inputs, known_outputs;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    at[id] = device_tensor(inputs, n.name, n, "input").ptr;
    known_inputs.insert(n.name);
  }
  for (const auto& [name, t] : inputs)
    if (!known_inputs.count(name)) throw InputError(fmt::format("run_on_device: graph '{}' has no input '{}'", g.name(), name));
  for (const GraphOutput& o : g.outputs()) known_outputs.insert(o.name);
  for (const auto& [name, t] : outputs)
    if (!known_outputs.count(name)) throw InputError(fmt::format("run_on_device: graph '{}' has no output '{}'", g.name(), name));
  std::vector<std::pair<const GraphOutput*, uint64_t>> passed;  // outputs no kernel writes
  std::vector<std::pair<const GraphOutput*, uint64_t>> written_in_place;  // a write's cache, copied if asked for
  for (const GraphOutput& o : g.outputs()) {
    const Op op = g.node(o.node).op;
    if (op == Op::WriteAt && !outputs.count(o.name)) continue;  // (the caller's cache holds it)
    const uint64_t ptr = device_tensor(outputs, o.name, g.node(o.node), "output").ptr;
    if (op == Op::WriteAt)
      written_in_place.push_back({&o, ptr});
    else if (op == Op::Input || op == Op::Constant)
      passed.push_back({&o, ptr});
    else
      at[o.node] = ptr;
  }
  load();
  if (stream != last_stream_) {  // runs must not overlap: the last one's stream finishes first
    cuda::synchronize(last_stream_ ? static_cast<CUstream>(last_stream_) : dev_->stream.get());
    last_stream_ = stream;
  }
  CUstream s = stream ? static_cast<CUstream>(stream) : dev_->stream.get();
  for (const auto& [o, ptr] : passed) {  // an input passed straight through, or a constant
    const Node& n = g.node(o->node);
    const size_t bytes = node_bytes(n);
    if (n.op == Op::Input) {
      if (ptr != at.at(o->node)) cuda::copy_device_to_device(ptr, at.at(o->node), bytes, s);
    } else {
      const TensorData one = TensorData::from_doubles(n.dtype, {1}, {n.value});
      uint32_t pattern = 0;
      std::memcpy(&pattern, one.bytes.data(), one.bytes.size());
      cuda::fill_async(ptr, bytes, static_cast<unsigned>(one.bytes.size()), pattern, s);
    }
  }
  launch_all(at, stream);
  for (const auto& [o, ptr] : written_in_place) {
    const uint64_t cache = at.at(storage_of(g, o->node));
    if (ptr != cache) cuda::copy_device_to_device(ptr, cache, node_bytes(g.node(o->node)), s);
  }
}

TensorMap Executable::run(const TensorMap& inputs, const RunOptions& options) {
  upload(inputs);
  if (options.poison_outputs)  // (not a write's: its memory is the uploaded cache)
    for (const Kernel& k : plan_.kernels)
      for (NodeId o : k.outputs)
        if (storage_of(plan_.graph, o) == o) dev_->buffers.at(o).fill_u8(kPoisonByte);
  launch_all();
  dev_->stream.synchronize();
  const Graph& g = plan_.graph;
  TensorMap out;
  for (const GraphOutput& o : g.outputs()) {
    const Node& n = g.node(o.node);
    TensorData t = TensorData::zeros(n.dtype, n.shape);
    if (n.op == Op::Input)  // an input passed straight through
      t = inputs.at(n.name);
    else if (n.op == Op::Constant)
      t = TensorData::from_doubles(n.dtype, n.shape, std::vector<double>(num_elements(n.shape), n.value));
    else
      dev_->buffers.at(storage_of(g, o.node)).download(t.bytes.data(), t.bytes.size());
    out[o.name] = std::move(t);
  }
  return out;
}

std::vector<float> Executable::time(const TensorMap& inputs, int warmup, int iters) {
  upload(inputs);
  for (int i = 0; i < warmup; ++i) launch_all();
  dev_->stream.synchronize();
  std::vector<cuda::Event> start(iters), stop(iters);
  double issue_s = 0;  // the host's time to issue each run's launches (a decode step's overhead)
  for (int i = 0; i < iters; ++i) {
    start[i].record(dev_->stream.get());
    const auto issue = std::chrono::steady_clock::now();
    launch_all();
    issue_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - issue).count();
    stop[i].record(dev_->stream.get());
  }
  dev_->stream.synchronize();
  issue_us_ = iters > 0 ? issue_s / iters * 1e6 : 0;
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) ms.push_back(cuda::Event::elapsed_ms(start[i], stop[i]));
  return ms;
}

std::vector<std::vector<float>> Executable::time_kernels(const TensorMap& inputs, int warmup, int iters) {
  upload(inputs);
  for (int i = 0; i < warmup; ++i) launch_all();
  const size_t n = plan_.kernels.size();
  // events[r][0] before run r, events[r][i + 1] after its kernel i
  std::vector<std::vector<cuda::Event>> events(static_cast<size_t>(iters));
  CUstream stream = dev_->stream.get();
  for (std::vector<cuda::Event>& run : events) {
    run.resize(n + 1);
    run[0].record(stream);
    launch_all({}, nullptr, [&](size_t i) { run[i + 1].record(stream); });
  }
  dev_->stream.synchronize();
  std::vector<std::vector<float>> ms(n);
  for (const std::vector<cuda::Event>& run : events)
    for (size_t i = 0; i < n; ++i) ms[i].push_back(cuda::Event::elapsed_ms(run[i], run[i + 1]));
  return ms;
}

}  // namespace tilefuse
