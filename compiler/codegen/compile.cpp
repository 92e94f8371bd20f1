#include "compiler/codegen/compile.h"

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>

#include "compiler/codegen/lower_to_llvm.h"
#include "compiler/support/dump.h"
#include "compiler/support/error.h"
#include "compiler/tile/lower_kernel.h"

namespace tilefuse {

// Bump when codegen changes what it emits for the same Tile IR.
static constexpr int kCodegenVersion = 1;

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

static llvm::TargetMachine& target_machine(const CodegenOptions& opt) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  std::lock_guard<std::mutex> lock(mu);
  static bool initialized = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    return true;
  }();
  (void)initialized;
  auto& tm = machines[opt.sm + opt.ptx_features];
  if (!tm) {
    llvm::Triple triple("nvptx64-nvidia-cuda");
    std::string err;
    const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
    if (!t) throw TargetError(fmt::format("LLVM has no NVPTX target: {}", err));
    tm.reset(t->createTargetMachine(triple, opt.sm, opt.ptx_features, llvm::TargetOptions(), std::nullopt,
                                    std::nullopt, llvm::CodeGenOptLevel::Aggressive));
    if (!tm) throw TargetError(fmt::format("LLVM cannot target {} {}", opt.sm, opt.ptx_features));
  }
  return *tm;
}

static void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

static std::string emit_ptx(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallString<0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw CodegenError("LLVM's NVPTX backend cannot emit assembly");
  pm.run(m);
  return std::string(buf.str());
}

CompiledKernel compile_kernel(const Graph& g, const Kernel& k, const CodegenOptions& opt) {
  static std::mutex mu;
  static std::map<uint64_t, CompiledKernel> cache;
  if (k.schedule.cluster_blocks > 1 && opt.sm == "sm_80")
    throw TargetError(
        fmt::format("kernel {} splits its rows over clusters of {} blocks, which need sm_90; "
                    "plan it for sm_80 without clusters (--max-cluster 1)",
                    k.name, k.schedule.cluster_blocks));
  if (k.schedule.stages > 0 && opt.sm == "sm_80")
    throw TargetError(
        fmt::format("kernel {} stages its rows through shared memory by bulk copies, which need sm_90; "
                    "plan it for sm_80 without stages (--stages 0)",
                    k.name));
  TileProgram tile = lower_kernel(g, k);
  std::string tile_text = print_tile_program(tile);
  dump("tile", k.name, tile_text);
  uint64_t key = fnv1a(fmt::format("{}|{}|{}|{}|{}", tile_text, opt.sm, opt.ptx_features, LLVM_VERSION_STRING,
                                   kCodegenVersion));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      CompiledKernel c = it->second;
      c.from_cache = true;
      return c;
    }
  }
  CompiledKernel c;
  c.name = k.name;
  c.tile_ir = tile_text;
  c.block_threads = static_cast<unsigned>(k.schedule.block_threads());
  c.grid = static_cast<uint64_t>(k.schedule.grid());
  c.cluster_blocks = static_cast<unsigned>(k.schedule.cluster_blocks);
  c.dynamic_shared_bytes = static_cast<unsigned>(k.schedule.dynamic_shared_bytes());
  c.persistent = k.schedule.stages > 0;
  c.workspace_bytes = static_cast<uint64_t>(k.schedule.workspace_bytes());
  c.cooperative = k.schedule.split_blocks > 1;
  {
    llvm::LLVMContext ctx;
    auto module = lower_to_llvm(tile, ctx);
    llvm::TargetMachine& tm = target_machine(opt);
    module->setDataLayout(tm.createDataLayout());
    optimize(*module, tm);
    llvm::raw_string_ostream os(c.llvm_ir);
    module->print(os, nullptr);
    os.flush();
    dump("llvm", k.name, c.llvm_ir);
    c.ptx = emit_ptx(*module, tm);
    dump("ptx", k.name, c.ptx);
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = c;
  return c;
}

std::string find_ptxas() {
  if (const char* env = std::getenv("TILEFUSE_PTXAS")) return env;
  if (std::filesystem::exists("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  if (std::system("command -v ptxas >/dev/null 2>&1") == 0) return "ptxas";
  return "";
}

std::optional<MeasuredKernel> run_ptxas(const std::string& ptx, const std::string& kernel,
                                        const CodegenOptions& opt) {
  std::string ptxas = find_ptxas();
  if (ptxas.empty()) return std::nullopt;
  auto dir = std::filesystem::temp_directory_path();
  std::string path = (dir / fmt::format("tilefuse_{}_{}.ptx", kernel, fnv1a(ptx))).string();
  {
    std::ofstream f(path);
    f << ptx;
  }
  std::string cmd = fmt::format("'{}' -arch={} -v '{}' -o /dev/null 2>&1", ptxas, opt.sm, path);
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw CodegenError(fmt::format("cannot run {}", cmd));
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  std::filesystem::remove(path);
  if (status != 0) throw CodegenError(fmt::format("ptxas rejected the PTX of kernel {}:\n{}", kernel, out));
  MeasuredKernel m;
  m.source = "ptxas";
  std::smatch match;
  if (std::regex_search(out, match, std::regex(R"(Used (\d+) registers)"))) m.registers = std::stoi(match[1]);
  if (std::regex_search(out, match, std::regex(R"((\d+) bytes spill stores)")))
    m.spill_bytes = std::stoi(match[1]);
  return m;
}

}  // namespace tilefuse
