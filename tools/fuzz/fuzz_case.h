#pragma once
// One fuzz case: a seeded random graph through every stage — plan (and the plan verifier),
// compile, ptxas, on the host the Tile IR v2 programs interpreted, and on a GPU a run against the float64 reference with poisoned outputs —
// under options that the seed also picks (schedule hints, the sm_80 target, the unfused plan).
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/codegen/target.h"
#include "compiler/fusion/plan.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse::fuzz {

struct CaseOptions {
  bool gpu = false;  // run on the GPU and check against the reference
  // Run each plan the interpreter can on the host (runtime/host_run.h) and check it against the
  // reference: the passes checked without a GPU.
  bool interpret = false;
  RandomGraphOptions graph;
};

enum class Outcome {
  Passed,    // every stage held
  Refused,   // planning refused the graph with a typed UnsupportedError (a stated limit)
  Unjudged,  // ran, but rounding alone moves an output too far to judge it (runtime/check.h)
  Failed,    // any other error, a broken plan invariant, or a wrong or unwritten output
};
const char* outcome_name(Outcome o);

struct CaseResult {
  uint64_t seed = 0;
  Outcome outcome = Outcome::Passed;
  std::string stage;    // where it stopped: plan, verify, compile, host, gpu
  std::string message;  // the error, the broken invariants or the failed check
  std::string variant;  // the options the seed picked
  int kernels = 0;      // compiled, over every plan of the case
  int spilling = 0;     // kernels whose ptxas report shows spills
  // Of them, and of those ptxas noted: "variant: kernel N bytes (its schedule)", "variant:
  // kernel ptxas notes … (its schedule)".
  std::vector<std::string> spills;
  int noted = 0;        // kernels ptxas notes a performance loss in (wgmma serialized, waits injected)
  int plans = 0;        // compiled
  int interpreted = 0;  // of them, run on the host (CaseOptions::interpret)
};

// The plans a case builds: the default options, or — picked by the seed — schedule hints, the
// sm_80 target or --library-gemm never; and sometimes the unfused plan too (an independent path to the
// same outputs).
struct Variant {
  std::string name;
  FusionOptions fusion;
  CodegenOptions codegen;
};
std::vector<Variant> variants_of(uint64_t seed);

// The seed of a case's random inputs.
inline uint64_t input_seed(uint64_t seed) { return seed ^ 0x5eed5eed5eed5eedull; }

// `stage_note` (optional) is told each stage as it begins, for a crash report.
CaseResult run_case(uint64_t seed, const CaseOptions& options, void (*stage_note)(const char*) = nullptr);

// The command that replays one case.
std::string replay_command(uint64_t seed, const CaseOptions& options);

}  // namespace tilefuse::fuzz
