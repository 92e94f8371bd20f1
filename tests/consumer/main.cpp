// Plans and compiles a graph of its own through the installed package; on a GPU it also runs and
// checks it. Prints the plan's kernel count and the PTX's first kernel entry.
#include <tilefuse/tilefuse.h>

#include <cstdio>

using namespace tilefuse;
using namespace tilefuse::dsl;

int main() {
  Graph g("consumer");
  Tensor x = input(g, "x", {256, 1000}, DType::BF16);
  output("y", softmax(max(x, 0.0) * 2.0));
  Plan plan = plan_fusion(g);
  if (!plan_problems(plan).empty()) return 1;
  Executable exe(plan);
  std::printf("kernels %zu\n", exe.kernels().size());
  const std::string& ptx = exe.kernels().at(0).ptx;
  std::printf("%s\n", ptx.substr(ptx.find(".visible .entry"), 40).c_str());
  try {
    TensorMap in = random_inputs(g, 7);
    CheckReport check = check_against_reference(plan, in, exe.run(in));
    std::printf("gpu %s\n", check.ok ? "ok" : "FAILED");
    return check.ok ? 0 : 1;
  } catch (const CudaError& e) {
    std::printf("no gpu: %s\n", e.what());
  }
  return 0;
}
