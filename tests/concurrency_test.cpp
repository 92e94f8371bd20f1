// Compilation from several threads at once: the same graph and different graphs, every
// compile succeeding with the PTX one thread alone produces.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "compiler/codegen/compile.h"
#include "compiler/fusion/fusion.h"
#include "dsl_examples/examples.h"
#include "runtime/executable.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse {
namespace {

TEST(Concurrency, EightThreadsCompileTheSameAndDifferentGraphs) {
  // Every thread compiles a shared example, one of two others, and random graphs of its own
  // (fresh cache keys); Executables also run ptxas, each on a file of its own. Afterwards every
  // kernel's PTX is compared with one compile on this thread.
  const int threads = 8, rounds = 3;
  auto graph = [](int id) {
    static const char* names[] = {"bias_gelu", "softmax_256k_bf16", "layernorm"};
    fuzz::RandomGraphOptions compiled;  // graphs planning does not refuse
    compiled.matmul = compiled.iota = compiled.non_trailing = 0;
    return id < 3 ? find_example(names[id]).build() : fuzz::random_graph(static_cast<uint64_t>(id), compiled);
  };
  std::mutex mu;
  std::map<std::pair<int, size_t>, std::string> ptx;  // (graph, kernel) → PTX
  std::vector<std::string> errors;
  auto compile = [&](int id) {
    Executable exe(plan_fusion(graph(id)));
    std::lock_guard<std::mutex> lock(mu);
    for (size_t k = 0; k < exe.kernels().size(); ++k) {
      auto [it, fresh] = ptx.emplace(std::make_pair(id, k), exe.kernels()[k].ptx);
      if (!fresh && it->second != exe.kernels()[k].ptx) errors.push_back(exe.kernels()[k].name + ": PTX differs");
    }
  };
  auto work = [&](int t) {
    try {
      for (int r = 0; r < rounds; ++r) {
        compile(0);
        compile(1 + (t + r) % 2);
        compile(1000 + t * rounds + r);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e.what());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (std::thread& t : pool) t.join();
  for (const std::string& e : errors) ADD_FAILURE() << e;
  ASSERT_GE(ptx.size(), 3u);
  for (const auto& [key, text] : ptx) {
    Plan p = plan_fusion(graph(key.first));
    ASSERT_LT(key.second, p.kernels.size());
    EXPECT_EQ(text, compile_kernel(p.graph, p.kernels[key.second]).ptx) << p.kernels[key.second].name;
  }
}

}  // namespace
}  // namespace tilefuse
