// tilefuse_fuzz: the differential fuzzer over random graphs (tools/fuzz/fuzz_case.h).
//
//   tilefuse_fuzz --count 2000            plan, verify, compile and assemble seeds 1..2000
//   tilefuse_fuzz --count 500 --gpu       … and run each against the float64 reference
//   tilefuse_fuzz --seed 1234             replay one case; its graph is printed
//
// A failure prints its seed, the stage, the message, the graph and the command that replays
// it; a crash prints the seeds in flight and their stages before the process dies.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "compiler/graph/graph.h"
#include "tools/fuzz/fuzz_case.h"

using namespace tilefuse;
using namespace tilefuse::fuzz;

namespace {

const char* kUsage = R"(usage: tilefuse_fuzz [--seed S | --first S --count N] [--gpu] [--interpret] [--jobs J]
                     [--max-elements N] [--long-rows P] [--attention P]
  --seed S          one case, its graph printed (replays a failure)
  --first S         first seed of a batch (default 1)
  --count N         cases in the batch (default 100)
  --gpu             run every plan on the GPU against the float64 reference
  --interpret       run every plan on the host (each kernel's Tile IR interpreted) against the
                    float64 reference, but those with ops the interpreter lacks (wgmma, TMA)
  --jobs J          cases at once, each on its own thread and stream (default: the hardware's
                    threads, at most 16)
  --max-elements N  elements of the largest tensor (default 1048576)
  --long-rows P     chance of a graph over rows of 16384..262144 elements (default 0.15)
  --attention P     chance of each step being an attention, sometimes with its gradients
                    (default 0.01)
  --seconds S       take no new case after S seconds (a GPU call's budget): the summary says
                    how many of the seeds ran
  --verbose         a line for every case that did not pass (refused, unjudged) too, and for
                    every kernel that spills or that ptxas notes (wgmma serialized, waits injected)
exit: 0 all held, 1 a case failed, 2 bad usage
)";

// Crash reporting: each worker keeps a line naming its case and stage, written before the
// stage begins, so a signal handler can print it with write(2) alone.
constexpr int kMaxJobs = 64;
char g_in_flight[kMaxJobs][160];
thread_local int t_worker = 0;
thread_local uint64_t t_seed = 0;
CaseOptions g_options;

void note_stage(const char* stage) {
  std::string line = fmt::format("  seed {} at {}: replay: {}\n", t_seed, stage, replay_command(t_seed, g_options));
  std::snprintf(g_in_flight[t_worker], sizeof g_in_flight[0], "%s", line.c_str());
}

void on_crash(int sig) {
  const char* head = "tilefuse_fuzz: crashed (signal) with these cases in flight:\n";
  ssize_t ignored = write(2, head, std::strlen(head));
  for (auto& line : g_in_flight)
    if (line[0]) ignored = write(2, line, std::strlen(line));
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct Args {
  uint64_t first = 1;
  uint64_t count = 100;
  bool one = false;
  int jobs = 0;
  bool verbose = false;
  double seconds = 0;  // 0: no limit
};

uint64_t parse_u64(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    unsigned long long n = std::stoull(v, &used);
    if (used == v.size() && v[0] != '-') return n;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(fmt::format("{} needs a non-negative integer, got '{}'", flag, v));
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(s + " needs a value");
      return argv[++i];
    };
    if (s == "--seed") {
      a.first = parse_u64(s, value());
      a.count = 1;
      a.one = true;
    } else if (s == "--first") {
      a.first = parse_u64(s, value());
    } else if (s == "--count") {
      a.count = parse_u64(s, value());
    } else if (s == "--gpu") {
      g_options.gpu = true;
    } else if (s == "--interpret") {
      g_options.interpret = true;
    } else if (s == "--jobs") {
      a.jobs = static_cast<int>(std::clamp<uint64_t>(parse_u64(s, value()), 1, kMaxJobs));
    } else if (s == "--max-elements") {
      g_options.graph.max_elements = static_cast<int64_t>(std::max<uint64_t>(1, parse_u64(s, value())));
    } else if (s == "--long-rows") {
      g_options.graph.long_rows = std::stod(value());
    } else if (s == "--attention") {
      g_options.graph.attention = std::stod(value());
    } else if (s == "--seconds") {
      a.seconds = static_cast<double>(parse_u64(s, value()));
    } else if (s == "--verbose") {
      a.verbose = true;
    } else if (s == "--help" || s == "-h") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else {
      throw std::invalid_argument(fmt::format("unknown argument '{}'", s));
    }
  }
  if (a.jobs == 0) a.jobs = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  return a;
}

void report_failure(const CaseResult& r) {
  fmt::print("FAILED seed {} ({}) at {}: {}\n  replay: {}\n", r.seed, r.variant, r.stage, r.message,
             replay_command(r.seed, g_options));
}

int run_one(uint64_t seed) {
  Graph g = random_graph(seed, g_options.graph);
  fmt::print("{}", print_graph(g));
  t_seed = seed;
  CaseResult r = run_case(seed, g_options, note_stage);
  if (r.outcome == Outcome::Failed) {
    report_failure(r);
    return 1;
  }
  fmt::print("seed {} ({}): {}, {} kernels{}{}\n", seed, r.variant, outcome_name(r.outcome), r.kernels,
             g_options.interpret ? fmt::format(", {} of {} plans run on the host", r.interpreted, r.plans) : "",
             r.message.empty() ? "" : ": " + r.message);
  return 0;
}

// The process's resident memory, from /proc (0 where there is none).
long resident_mib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE) / (1024 * 1024);
}

int run_batch(const Args& a) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  std::map<Outcome, int> counts;
  int kernels = 0, spilling = 0, noted = 0, plans = 0, interpreted = 0;
  std::vector<uint64_t> failed;
  std::atomic<uint64_t> done{0};
  auto out_of_time = [&] {
    return a.seconds > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= a.seconds;
  };
  auto work = [&](int worker) {
    t_worker = worker;
    for (uint64_t i = next++; i < a.count && !out_of_time(); i = next++) {
      t_seed = a.first + i;
      CaseResult r = run_case(t_seed, g_options, note_stage);
      std::lock_guard<std::mutex> lock(mu);
      done++;
      counts[r.outcome]++;
      kernels += r.kernels;
      spilling += r.spilling;
      noted += r.noted;
      plans += r.plans;
      interpreted += r.interpreted;
      if (r.outcome == Outcome::Failed) {
        failed.push_back(r.seed);
        report_failure(r);
        std::fflush(stdout);
      } else if (a.verbose && r.outcome != Outcome::Passed) {
        fmt::print("{} seed {} ({}): {}\n", outcome_name(r.outcome), r.seed, r.variant, r.message);
      }
      if (a.verbose)
        for (const std::string& s : r.spills) fmt::print("ptxas seed {}, {}\n", r.seed, s);
      // A line now and then, flushed: a run killed from outside (out of memory, a time limit)
      // still says how far it got and how large it had grown.
      if (done % 100 == 0) {
        fmt::print("fuzz: {} cases done, {:.0f} s, resident {} MiB\n", done.load(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   resident_mib());
        std::fflush(stdout);
      }
    }
    g_in_flight[worker][0] = 0;
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < a.jobs; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // With --seconds the workers stop taking seeds; those taken before ran to the end, and they are
  // the first ones (seeds are taken in order).
  const std::string stopped =
      done < a.count ? fmt::format(" (of {}..{}: --seconds {:.0f} ran out)", a.first, a.first + a.count - 1, a.seconds)
                     : "";
  fmt::print(
      "fuzz: seeds {}..{}{}{}: {} passed, {} refused (typed errors), {} unjudged (ill-conditioned), {} failed; "
      "{} kernels compiled, {} with spills, {} with wgmma serialized or waits injected by ptxas{}; {:.1f} s on {} "
      "threads\n",
      a.first, a.first + done.load() - 1, stopped, g_options.gpu ? " on the GPU" : "", counts[Outcome::Passed],
      counts[Outcome::Refused], counts[Outcome::Unjudged], counts[Outcome::Failed], kernels, spilling, noted,
      g_options.interpret ? fmt::format("; {} of {} plans run on the host", interpreted, plans) : "", seconds, a.jobs);
  if (!failed.empty()) fmt::print("failed seeds: {}\n", fmt::join(failed, " "));
  return failed.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tilefuse_fuzz: {}\n\n{}", e.what(), kUsage);
    return 2;
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, on_crash);
  try {
    return a.one ? run_one(a.first) : run_batch(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tilefuse_fuzz: {}\n", e.what());
    return 1;
  }
}
