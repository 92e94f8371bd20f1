#include "compiler/codegen/compile.h"

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/PassTimingInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Pass.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/StringSaver.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "compiler/codegen/disk_cache.h"
#include "compiler/codegen/emit.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/support/dump.h"
#include "compiler/support/error.h"
#include "compiler/support/trace.h"
#include "compiler/tile/build.h"
#include "compiler/tile/ir.h"
#include "tilefuse/source_hash.h"

namespace tilefuse {


CodegenOptions codegen_options_for(const std::string& sm) {
  if (sm == "sm_80" || sm == "sm_90" || sm == "sm_90a") return {sm, "+ptx80"};
  throw TargetError(
      fmt::format("unknown target '{}': tilefuse emits sm_80, sm_90 (default) or "
                  "sm_90a",
                  sm));
}

static uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// LLVM's TargetMachine is not safe to share between threads that emit code at once, so each
// thread keeps its own, one per target; LLVM's target registry is initialized once.
static llvm::TargetMachine& target_machine(const CodegenOptions& opt) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    // LLVM's own options for whoever looks into the backend (-time-passes, -print-after=...).
    if (const char* options = std::getenv("TILEFUSE_LLVM_OPTIONS")) {
      llvm::BumpPtrAllocator memory;
      llvm::StringSaver saver(memory);
      llvm::SmallVector<const char*, 8> argv{"tilefuse"};
      llvm::cl::TokenizeGNUCommandLine(options, saver, argv);
      std::string why;
      llvm::raw_string_ostream errors(why);
      if (!llvm::cl::ParseCommandLineOptions(static_cast<int>(argv.size()), argv.data(), "", &errors))
        throw CodegenError(fmt::format("TILEFUSE_LLVM_OPTIONS='{}': {}", options, why));
    }
  });
  thread_local std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  auto& tm = machines[opt.sm + opt.ptx_features];
  if (!tm) {
    llvm::Triple triple("nvptx64-nvidia-cuda");
    std::string err;
    const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
    if (!t) throw TargetError(fmt::format("LLVM has no NVPTX target: {}", err));
    // Default, not Aggressive: for NVPTX the difference is GVN in place of EarlyCSE after its
    // straight-line passes, which redoes what O3's GVN did: 7 ms of a GEMM's 55 ms backend. The
    // PTX of 372 of the 396 snapshots (scripts/ptx_snapshot.sh) is the same; the rest lose 2-21
    // instructions in epilogues, where GVN's PRE had copied an address product into both arms.
    tm.reset(t->createTargetMachine(triple, opt.sm, opt.ptx_features, llvm::TargetOptions(), std::nullopt,
                                    std::nullopt, llvm::CodeGenOptLevel::Default));
    if (!tm) throw TargetError(fmt::format("LLVM cannot target {} {}", opt.sm, opt.ptx_features));
  }
  return *tm;
}

// O3, less dead-store elimination: the emitted kernels store nothing that is overwritten, and
// DSE's alias queries on a guarded epilogue's 128 element addresses (BasicAA decomposing each
// GEP, computeKnownBits under it) were a third of matmul_odd's O3.
static void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassInstrumentationCallbacks skip;
  skip.registerShouldRunOptionalPassCallback(
      [](llvm::StringRef pass, llvm::Any) { return pass != "DSEPass"; });
  // -time-passes in TILEFUSE_LLVM_OPTIONS: each pass's time, printed as O3 ends.
  std::optional<llvm::StandardInstrumentations> timing;
  if (llvm::TimePassesIsEnabled) timing.emplace(m.getContext(), false).registerCallbacks(skip, &mam);
  llvm::PassBuilder pb(&tm, llvm::PipelineTuningOptions(), std::nullopt, &skip);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  if (timing) timing->getTimePasses().print();
}

static std::string emit_ptx(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallString<0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  // The module was verified as emitted (verified()); the backend's own two verifier runs check
  // LLVM's passes, not ours, and cost ~2 ms of a GEMM's compile: off, as clang has them.
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile, /*DisableVerify=*/true))
    throw CodegenError("LLVM's NVPTX backend cannot emit assembly");
  pm.run(m);
  if (llvm::TimePassesIsEnabled) llvm::reportAndResetTimings(&llvm::errs());
  return std::string(buf.str());
}

static double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A module through O3 to PTX; `llvm_ir`, where given, gets the optimized module's text (printing
// it costs 7-10 ms of a GEMM's cold compile, so only a dump asks for it). `times`, where given,
// gets O3's and the backend's milliseconds.
static std::string module_ptx(std::unique_ptr<llvm::Module> module, const CodegenOptions& opt,
                              std::string* llvm_ir, CompileCounts* times = nullptr) {
  llvm::TargetMachine& tm = target_machine(opt);
  module->setDataLayout(tm.createDataLayout());
  auto start = std::chrono::steady_clock::now();
  optimize(*module, tm);
  if (times) times->optimize_ms += ms_since(start);
  if (llvm_ir) {
    llvm::raw_string_ostream os(*llvm_ir);
    module->print(os, nullptr);
    os.flush();
  }
  start = std::chrono::steady_clock::now();
  std::string ptx = emit_ptx(*module, tm);
  if (times) times->ptx_ms += ms_since(start);
  return ptx;
}

static bool adds_into_memory(const tir::Region& r) {
  for (const tir::Inst& i : r.body) {
    if (i.opcode == tir::Opcode::Store && i.reduce_add) return true;
    for (const tir::Region& inner : i.regions)
      if (adds_into_memory(inner)) return true;
  }
  return false;
}

// A program on wgmma is sm_90a's: an sm_90 target emits that for it, sm_80 cannot run it. Its
// reduce-add stores are red.global.add.v2.f32, which needs PTX 8.1.
static CodegenOptions target_for(const tir::Program& p, CodegenOptions opt) {
  if (!p.uses_wgmma()) return opt;
  if (opt.sm == "sm_80")
    throw TargetError(fmt::format("kernel {} multiplies on warpgroup MMA (wgmma), which needs sm_90a; plan it for "
                                  "sm_80 (--target sm_80 plans mma.sync) or with --wgmma 0 / --attention-wgmma 0",
                                  p.name));
  opt.sm = "sm_90a";
  if (adds_into_memory(p.body)) opt.ptx_features = "+ptx81";
  return opt;
}

// The rows of one TMA copy's box of each parameter TMA reads or writes: the stored rows of the
// ring it is copied into or staged in, or a warpgroup's 64 (TmaStore by warpgroup); one tensor
// map serves every copy, so they must agree.
static void tma_box_rows(const tir::Program& p, const tir::Region& r, std::map<int, int64_t>* rows_of) {
  for (const tir::Inst& i : r.body) {
    if (i.opcode == tir::Opcode::TmaLoad || i.opcode == tir::Opcode::TmaStore) {
      const tir::SharedRing& ring = p.shared.at(static_cast<size_t>(i.ring));
      const int64_t rows = i.by_warpgroup ? 64 : ring.tile.at(ring.col_major ? 1 : 0);
      const auto [at, fresh] = rows_of->emplace(i.param, rows);
      if (!fresh && at->second != rows)
        throw CodegenError(fmt::format("kernel {}: %arg{} is copied by TMA in boxes of {} and of {} rows",
                                       p.name, i.param, at->second, rows));
    }
    for (const tir::Region& inner : i.regions) tma_box_rows(p, inner, rows_of);
  }
}

std::vector<TensorMapSpec> tensor_maps_of(const tir::Program& p) {
  std::map<int, int64_t> rows_of;
  tma_box_rows(p, p.body, &rows_of);
  std::vector<TensorMapSpec> maps;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const tir::Param& prm = p.params[i];
    if (prm.tma_rows <= 0) continue;
    auto it = rows_of.find(static_cast<int>(i));
    if (it == rows_of.end())
      throw CodegenError(
          fmt::format("kernel {}: %arg{} has a tensor map that no TMA copy reads or writes", p.name, i));
    TensorMapSpec m;
    m.tensor = static_cast<unsigned>(i);
    m.dtype = prm.dtype;
    const uint64_t element_bytes = dtype_size(prm.dtype);
    // Along the stored rows (a column-major parameter's columns), across them, then batches.
    const uint64_t run = static_cast<uint64_t>(prm.col_major ? prm.group_rows : prm.view.at(1));
    const uint64_t across = static_cast<uint64_t>(prm.col_major ? prm.view.at(1) : prm.tma_rows);
    m.dims[0] = run;
    m.dims[1] = across;
    m.dims[2] = static_cast<uint64_t>(std::max<int64_t>(1, prm.view.at(0) / prm.tma_rows));
    m.strides[0] = run * element_bytes;
    m.strides[1] = run * across * element_bytes;
    m.box[0] = static_cast<unsigned>(128 / element_bytes);  // a 128-byte line
    m.box[1] = static_cast<unsigned>(it->second);
    maps.push_back(m);
  }
  return maps;
}

std::string program_ptx(const tir::Program& p, const CodegenOptions& opt) {
  llvm::LLVMContext ctx;
  return module_ptx(emit_program(p, ctx), target_for(p, opt), nullptr);
}

namespace {

std::mutex cache_mu;
std::map<uint64_t, CompiledKernel> memory_cache;  // by the hash of the Tile IR and the target
CompileCounts counts;

// What decides the code besides the Tile IR: the target, LLVM, and the compiler's own sources.
std::string target_of(const CodegenOptions& opt) {
  return fmt::format("{} {} LLVM {} sources {}", opt.sm, opt.ptx_features, LLVM_VERSION_STRING, TILEFUSE_SOURCE_HASH);
}

}  // namespace

CompileCounts compile_counts() {
  std::lock_guard<std::mutex> lock(cache_mu);
  return counts;
}

void forget_compiled_in_memory() {
  std::lock_guard<std::mutex> lock(cache_mu);
  memory_cache.clear();
}

// The runtime passes a kernel's inputs, then its outputs, in the kernel's order (then the
// workspace): a program whose parameters are in another order would read one tensor as another.
static void check_params_follow_kernel(const Graph& g, const Kernel& k, const tir::Program& p) {
  std::vector<const tir::Param*> tensors;
  for (const tir::Param& prm : p.params)
    if (!prm.workspace) tensors.push_back(&prm);
  if (tensors.size() != k.inputs.size() + k.outputs.size())
    throw CodegenError(fmt::format("kernel {}: its program has {} tensor parameters for {} inputs and {} outputs", k.name,
                                   tensors.size(), k.inputs.size(), k.outputs.size()));
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const std::string want = tensor_name(g.node(k.inputs[i]));
    if (tensors[i]->name != want || tensors[i]->output)
      throw CodegenError(fmt::format("kernel {}: its program's parameter {} is '{}', but the kernel's input {} is '{}'",
                                     k.name, i, tensors[i]->name, i, want));
  }
}

CompiledKernel compile_kernel(const Graph& g, const Kernel& k, const CodegenOptions& options) {
  CodegenOptions opt = options;
  if (k.library) {
    CompiledKernel c;
    c.name = k.name;
    c.library = true;
    c.tile_ir = fmt::format(
        "// {}: cuBLASLt GEMM (%{} matmul, epilogue: {}); no generated code (tilefuse's own: --library-gemm never)\n",
        k.name,
                            contraction(g, k), library_epilogue_name(*k.library));
    return c;
  }
  if (k.schedule.cluster_blocks > 1 && opt.sm == "sm_80")
    throw TargetError(
        fmt::format("kernel {} splits its rows over clusters of {} blocks, which need sm_90; "
                    "plan it for sm_80 without clusters (--max-cluster 1)",
                    k.name, k.schedule.cluster_blocks));
  if (k.schedule.stages > 0 && !k.schedule.contracts && opt.sm == "sm_80")
    throw TargetError(
        fmt::format("kernel {} stages its rows through shared memory by bulk copies, which need sm_90; "
                    "plan it for sm_80 without stages (--stages 0)",
                    k.name));
  const auto build_start = std::chrono::steady_clock::now();
  const tir::Program program = tir::build_program(g, k);
  const double build_ms = ms_since(build_start);
  check_params_follow_kernel(g, k, program);
  opt = target_for(program, opt);
  const std::string tile_text = tir::print_program(program);
  dump("tile", k.name, tile_text);
  const std::string target = target_of(opt);
  const std::string material = tile_text + "|" + target;
  const uint64_t key = fnv1a(material);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = memory_cache.find(key);
    if (it != memory_cache.end()) {
      counts.from_memory++;
      CompiledKernel c = it->second;
      c.from_cache = true;
      return c;
    }
  }
  // On disk: named by two independent hashes of the key, the entry checked against the Tile IR.
  // An entry stored without its LLVM IR does not serve a dump of the IR.
  const std::string disk_key = fmt::format("{:016x}{:016x}", key, fnv1a("tilefuse " + material));
  const bool wants_llvm_ir = dump_enabled("llvm");
  std::optional<CompiledKernel> d =
      opt.read_disk_cache ? disk_cache_load(disk_key, tile_text, target) : std::nullopt;
  if (d && (!wants_llvm_ir || !d->llvm_ir.empty())) {
    dump("llvm", k.name, d->llvm_ir);
    dump("ptx", k.name, d->ptx);
    std::lock_guard<std::mutex> lock(cache_mu);
    counts.from_disk++;
    memory_cache[key] = *d;
    d->from_cache = true;
    return *d;
  }
  CompiledKernel c;
  c.name = k.name;
  c.tile_ir = tile_text;
  c.block_threads = static_cast<unsigned>(program.launch_threads());
  c.tensor_maps = tensor_maps_of(program);
  c.grid = static_cast<uint64_t>(k.schedule.grid());
  c.cluster_blocks = static_cast<unsigned>(k.schedule.cluster_blocks);
  c.dynamic_shared_bytes = static_cast<unsigned>(program.shared_bytes());
  c.persistent = k.schedule.stages > 0 && !k.schedule.contracts;
  c.workspace_bytes = static_cast<uint64_t>(k.schedule.workspace_bytes());
  c.cooperative = k.schedule.split_blocks > 1 && !k.schedule.reduces_columns;  // split rows wait for each other
  CompileCounts times;
  times.build_ms = build_ms;
  {
    TraceRange range("compile " + k.name);
    llvm::LLVMContext ctx;
    const auto emit_start = std::chrono::steady_clock::now();
    std::unique_ptr<llvm::Module> module = emit_program(program, ctx);
    times.emit_ms = ms_since(emit_start);
    c.ptx = module_ptx(std::move(module), opt, wants_llvm_ir ? &c.llvm_ir : nullptr, &times);
    dump("llvm", k.name, c.llvm_ir);
    dump("ptx", k.name, c.ptx);
  }
  disk_cache_store(disk_key, target, c);
  std::lock_guard<std::mutex> lock(cache_mu);
  counts.compiled++;
  counts.build_ms += times.build_ms;
  counts.emit_ms += times.emit_ms;
  counts.optimize_ms += times.optimize_ms;
  counts.ptx_ms += times.ptx_ms;
  memory_cache[key] = c;
  return c;
}

std::string find_ptxas() {
  if (const char* env = std::getenv("TILEFUSE_PTXAS")) return env;
  if (std::filesystem::exists("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  static const bool on_path = std::system("command -v ptxas >/dev/null 2>&1") == 0;
  return on_path ? "ptxas" : "";
}

namespace {

// A file of its own for one ptxas run (concurrent runs, threads or processes, never share
// one), removed when it goes out of scope.
class PtxFile {
 public:
  PtxFile(const std::string& ptx, const std::string& kernel) {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec || !std::filesystem::is_directory(dir, ec))
      throw CodegenError(fmt::format(
          "kernel {}: ptxas needs a file for its input, and the temporary directory{} cannot hold one ({}); "
          "set TMPDIR to a writable directory",
          kernel, std::getenv("TMPDIR") ? fmt::format(" TMPDIR={}", std::getenv("TMPDIR")) : "",
          ec ? ec.message() : "not a directory"));
    std::string pattern = (dir / "tilefuse_XXXXXX.ptx").string();
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back(0);
    int fd = mkstemps(name.data(), 4);
    if (fd < 0)
      throw CodegenError(fmt::format("kernel {}: cannot create a file in {} for ptxas: {}", kernel,
                                     dir.string(), std::strerror(errno)));
    path_ = name.data();
    size_t done = 0;
    while (done < ptx.size()) {
      ssize_t n = ::write(fd, ptx.data() + done, ptx.size() - done);
      if (n <= 0) {
        std::string why = std::strerror(errno);
        ::close(fd);
        throw CodegenError(fmt::format("kernel {}: cannot write {} for ptxas: {}", kernel, path_, why));
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0)
      throw CodegenError(fmt::format("kernel {}: cannot write {} for ptxas: {}", kernel, path_, std::strerror(errno)));
  }
  ~PtxFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  PtxFile(const PtxFile&) = delete;
  PtxFile& operator=(const PtxFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

MeasuredKernel ptxas_report(const std::string& out) {
  MeasuredKernel m;
  m.source = "ptxas";
  // Its performance notes (info lines, not warnings): "(C7514) Potential Performance Loss: wgmma
  // … serialized …", "(C7517) warpgroup.wait is injected …" — each code and its words up to the
  // function's name.
  const std::regex note(R"(\((C75\d\d)\) (.*?)( in (the )?function '.*)?$)");
  std::istringstream info(out);
  std::smatch match;
  for (std::string line; std::getline(info, line);)
    if (std::regex_search(line, match, note))
      m.notes.push_back(fmt::format("{} {}", match[1].str(), std::regex_replace(match[2].str(), std::regex(" +"), " ")));
  if (std::regex_search(out, match, std::regex(R"(Used (\d+) registers)"))) m.registers = std::stoi(match[1]);
  if (std::regex_search(out, match, std::regex(R"((\d+) bytes spill stores)"))) m.spill_bytes = std::stoi(match[1]);
  return m;
}

std::optional<MeasuredKernel> run_ptxas(const std::string& ptx, const std::string& kernel,
                                        const CodegenOptions& opt) {
  std::string ptxas = find_ptxas();
  if (ptxas.empty()) return std::nullopt;
  if (ptxas.find('/') != std::string::npos && ::access(ptxas.c_str(), X_OK) != 0)
    throw CodegenError(fmt::format("cannot run ptxas at {}{}: {}", ptxas,
                                   std::getenv("TILEFUSE_PTXAS") ? " (TILEFUSE_PTXAS)" : "", std::strerror(errno)));
  PtxFile file(ptx, kernel);
  // The PTX's own target: a kernel on wgmma is sm_90a's whatever the options say.
  std::smatch target;
  const std::string arch = std::regex_search(ptx, target, std::regex(R"(\.target (sm_\w+))")) ? target[1].str() : opt.sm;
  std::string cmd = fmt::format("'{}' -arch={} -v '{}' -o /dev/null 2>&1", ptxas, arch, file.path());
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw CodegenError(fmt::format("cannot run {}: {}", cmd, std::strerror(errno)));
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127)
    throw CodegenError(fmt::format("cannot run ptxas ({}):\n{}", cmd, out));
  if (WEXITSTATUS(status) != 0)
    throw CodegenError(fmt::format("ptxas rejected the PTX of kernel {}:\n{}", kernel, out));
  // A warning that ptxas serialized wgmma is a codegen defect here: thrown. Its info-level notes
  // of the same (C75xx: registers, injected waits) are kept in the report (ptxas_report).
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.find("warning") != std::string::npos && line.find("wgmma") != std::string::npos)
      throw CodegenError(fmt::format("ptxas serialized the wgmma of kernel {}:\n{}", kernel, out));
  return ptxas_report(out);
}

}  // namespace tilefuse
