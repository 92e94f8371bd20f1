#include "tools/fuzz/fuzz_case.h"

#include <fmt/format.h>

#include <random>

#include "compiler/codegen/compile.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/support/error.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_probe.h"
#include "runtime/executable.h"
#include "runtime/host_run.h"

namespace tilefuse::fuzz {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Passed:
      return "passed";
    case Outcome::Refused:
      return "refused";
    case Outcome::Unjudged:
      return "unjudged";
    case Outcome::Failed:
      return "FAILED";
  }
  return "?";
}

std::vector<Variant> variants_of(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Variant> out;
  Variant v{"default", {}, {}};
  switch (pick(0, 14)) {
    case 0:
      v.name = "--target sm_80";
      v.fusion.profile.max_cluster_blocks = 1;
      v.fusion.profile.bulk_copies = false;
      v.fusion.profile.wgmma = false;
      v.codegen = codegen_options_for("sm_80");
      break;
    case 1:  // long rows staged rather than split; half of a cluster's an exchange a reduction
      v.name = "--split 0";
      v.fusion.schedule.split = 0;
      if (pick(0, 1)) {
        v.name += " --cluster-online 0";
        v.fusion.schedule.cluster_online = 0;
      }
      break;
    case 2:
      v.name = "--stages 0";
      v.fusion.schedule.stages = 0;
      break;
    case 3: {
      const int threads = 32 << pick(0, 5);
      v.name = fmt::format("--block-threads {}", threads);
      v.fusion.schedule.block_threads = threads;
      break;
    }
    case 4:
      v.fusion.schedule.rows_per_thread = pick(1, 4);
      v.fusion.schedule.max_cluster_blocks = pick(1, 16);
      v.name = fmt::format("--rows-per-thread {} --max-cluster {}", v.fusion.schedule.rows_per_thread,
                           v.fusion.schedule.max_cluster_blocks);
      break;
    case 5:  // matmuls stay tilefuse's own (the default lets them be cuBLASLt's where that is faster)
      v.name = "--library-gemm never";
      v.fusion.library_gemm = LibraryGemmUse::Never;
      break;
    case 6:  // rows of odd widths as aligned windows, those with weights too
      v.name = "--window 1";
      v.fusion.schedule.window = 1;
      break;
    case 7:  // rows of odd widths element by element
      v.name = "--window 0";
      v.fusion.schedule.window = 0;
      break;
    case 8:  // attention: a block per query head, the keys split 3 ways (where they have 3 tiles) or not at
             // all; on wgmma, K and V by TMA from a producer warpgroup or by every thread's cp.async, 64 or
             // 128 keys a step, the softmax overlapped or not, TMA's warpgroups taking turns or not, the
             // running max raised lazily or at every step
      v.fusion.schedule.pack_heads = 0;
      v.fusion.schedule.kv_splits = pick(0, 1) ? 3 : 1;
      v.fusion.schedule.attention_tma = pick(0, 1);
      v.fusion.schedule.attention_block_n = pick(0, 1) ? 128 : 64;
      v.fusion.schedule.attention_overlap = pick(0, 1);
      v.fusion.schedule.attention_pingpong = pick(0, 1);
      v.fusion.schedule.attention_persistent = pick(0, 1);
      v.fusion.schedule.attention_lazy_rescale = pick(0, 1);
      if (v.fusion.schedule.attention_persistent) v.fusion.profile.sm_count = 2;  // blocks of several query tiles
      v.name = fmt::format(
          "--pack-heads 0 --kv-splits {} --attention-tma {} --attention-keys {} --attention-overlap {} "
          "--attention-pingpong {} --attention-persistent {} --attention-lazy-rescale {}{}",
          v.fusion.schedule.kv_splits, v.fusion.schedule.attention_tma, v.fusion.schedule.attention_block_n,
          v.fusion.schedule.attention_overlap, v.fusion.schedule.attention_pingpong,
          v.fusion.schedule.attention_persistent, v.fusion.schedule.attention_lazy_rescale,
          v.fusion.schedule.attention_persistent ? " (2 SMs)" : "");
      break;
    case 9: {  // the own GEMM's other Hopper schedules: cp.async, a block per tile, ping-pong over 2 SMs'
               // blocks, stores from the registers without clusters, the epilogue rolled over chunks
      v.fusion.library_gemm = LibraryGemmUse::Never;
      const int which = pick(0, 4);
      if (which == 0) v.fusion.schedule.gemm_tma = 0;
      if (which == 1) v.fusion.schedule.gemm_persistent = 0;
      if (which == 2) {
        v.fusion.schedule.gemm_pingpong = 1;
        v.fusion.profile.sm_count = 2;
      }
      if (which == 3) {
        v.fusion.schedule.gemm_tma_store = 0;
        v.fusion.schedule.gemm_cluster = 1;
      }
      if (which == 4) v.fusion.schedule.rolled_epilogue = 1;
      static const char* const names[] = {"--tma 0", "--persistent 0", "--pingpong 1 (2 SMs)",
                                          "--tma-store 0 --gemm-cluster 1", "--rolled-epilogue 1"};
      v.name = std::string("--library-gemm never ") + names[which];
      break;
    }
    case 10:  // one block barrier a pass over windowed rows too
      v.name = "--block-online 1";
      v.fusion.schedule.block_online = 1;
      break;
    case 11:  // rows looped over column tiles carrying a partial per thread (sm_80: no clusters,
              // bulk copies or split rows, so long rows loop)
      v.name = "--target sm_80 --split 0";
      v.fusion.profile.max_cluster_blocks = 1;
      v.fusion.profile.bulk_copies = false;
      v.fusion.profile.wgmma = false;
      v.fusion.schedule.split = 0;
      v.codegen = codegen_options_for("sm_80");
      break;
    case 12:  // rows held in clusters (no staging or split rows), half of them an exchange a pass
      v.name = "--stages 0 --split 0";
      v.fusion.schedule.stages = 0;
      v.fusion.schedule.split = 0;
      if (pick(0, 1)) {
        v.name += " --cluster-online 1";
        v.fusion.schedule.cluster_online = 1;
      }
      break;
    case 13:  // odd row widths in windows, weights along them too, half of a cluster's rows an
              // exchange a pass
      v.name = "--window 1";
      v.fusion.schedule.window = 1;
      if (pick(0, 1)) {
        v.name += " --cluster-online 1";
        v.fusion.schedule.cluster_online = 1;
      }
      break;
    default:
      break;
  }
  out.push_back(v);
  if (pick(0, 3) == 0) {
    Variant u{"--no-fuse", {}, {}};
    u.fusion.fuse = false;
    out.push_back(u);
  }
  // Drawn last, and a variant of its own, so that every seed keeps the variants it had before (a
  // failure found then replays): now and then the first variant again with a block barrier a
  // reduction over rows of whole warps (the default is one a pass; on top of its other hints),
  // the default one half of the time with long rows staged.
  if (pick(0, 5) == 0) {
    Variant w = out.front();
    if (w.name == "default") {
      w.name.clear();
      if (pick(0, 1)) {
        w.name = "--split 0 ";
        w.fusion.schedule.split = 0;
      }
    } else {
      w.name += " ";
    }
    w.name += "--block-online 0";
    w.fusion.schedule.block_online = 0;
    out.push_back(w);
  }
  // Drawn after all the rest, for the same reason: a quarter of the variants refill each stage of
  // their staged rows at its read, or at the first reduction, whatever the default would.
  for (Variant& u : out)
    if (pick(0, 3) == 0) {
      u.fusion.schedule.refill_at_read = pick(0, 1);
      u.name += fmt::format(" --refill-at-read {}", u.fusion.schedule.refill_at_read);
    }
  // And a quarter split rows in parts of 16, 32 or 64 elements a thread (blocks of fewer threads
  // for more).
  for (Variant& u : out)
    if (pick(0, 3) == 0) {
      u.fusion.schedule.part_elements = 16 << pick(0, 2);
      u.name += fmt::format(" --part-elements {}", u.fusion.schedule.part_elements);
    }
  // And a quarter fetch a split row's pending parts early, or not, whatever the default would.
  for (Variant& u : out)
    if (pick(0, 3) == 0) {
      u.fusion.schedule.fetch_parts_early = pick(0, 1);
      u.name += fmt::format(" --fetch-parts-early {}", u.fusion.schedule.fetch_parts_early);
    }
  // And a sixth take the attention backward's other forms (where a training step has one): dQ
  // summed across the key blocks by red.global or by TMA's reductions (where those fit: d 128, a
  // query count a multiple of 4), 128 keys a block, or every thread's cp.async.
  for (Variant& u : out)
    if (pick(0, 5) == 0) {
      static const char* const names[] = {" --attention-dq-sums 1",
                                          " --attention-dq-sums 1 --attention-dq-tma 1",
                                          " --attention-backward-rows 128", " --attention-backward-tma 0"};
      const int which = pick(0, 3);
      if (which <= 1) u.fusion.schedule.attention_dq_sums = 1;
      if (which == 1) u.fusion.schedule.attention_dq_tma = 1;
      if (which == 2) u.fusion.schedule.attention_backward_rows = 128;
      if (which == 3) u.fusion.schedule.attention_backward_tma = 0;
      u.name += names[which];
    }
  return out;
}

std::string replay_command(uint64_t seed, const CaseOptions& o) {
  const RandomGraphOptions d;  // (the graph options that differ from the defaults make the same graph)
  std::string graph;
  if (o.graph.max_elements != d.max_elements)
    graph += fmt::format(" --max-elements {}", o.graph.max_elements);
  if (o.graph.long_rows != d.long_rows) graph += fmt::format(" --long-rows {}", o.graph.long_rows);
  if (o.graph.attention != d.attention) graph += fmt::format(" --attention {}", o.graph.attention);
  return fmt::format("tilefuse_fuzz --seed {}{}{}{}", seed, graph, o.gpu ? " --gpu" : "",
                     o.interpret ? " --interpret" : "");
}

CaseResult run_case(uint64_t seed, const CaseOptions& o, void (*stage_note)(const char*)) {
  CaseResult r;
  r.seed = seed;
  auto stage = [&](const char* s) {
    r.stage = s;
    if (stage_note) stage_note(s);
  };
  auto fail = [&](std::string message) {
    r.outcome = Outcome::Failed;
    r.message = std::move(message);
    return r;
  };
  try {
    stage("generate");
    Graph g = random_graph(seed, o.graph);
    verify(g);
    const bool gpu = o.gpu && cuda::available();
    for (Variant& v : variants_of(seed)) {
      r.variant += (r.variant.empty() ? "" : ", ") + v.name;
      stage("plan");
      if (gpu) note_missing_libraries(v.fusion.profile);
      Plan plan = plan_fusion(g, v.fusion);
      stage("verify");
      std::vector<std::string> problems = plan_problems(plan);
      if (!problems.empty()) return fail(fmt::format("{}: {}", v.name, fmt::join(problems, "; ")));
      stage("compile");
      Executable exe(std::move(plan), v.codegen);
      r.kernels += static_cast<int>(exe.kernels().size());
      for (const auto& [name, m] : exe.measured()) {
        r.spilling += m.spill_bytes > 0;
        r.noted += !m.notes.empty();
        for (const Kernel& k : exe.plan().kernels) {
          if (k.name != name) continue;
          if (m.spill_bytes > 0)
            r.spills.push_back(fmt::format("{}: {} {} bytes ({})", v.name, name, m.spill_bytes, k.schedule.describe()));
          if (!m.notes.empty())
            r.spills.push_back(fmt::format("{}: {} ptxas notes {} ({})", v.name, name,
                                           fmt::join(m.notes, "; "), k.schedule.describe()));
        }
      }
      r.plans++;
      const bool on_host = o.interpret && host_run_refusal(exe.plan()).empty();
      if (!on_host && !gpu) continue;
      TensorMap inputs = random_inputs(exe.plan().graph, input_seed(seed));
      if (on_host) {
        stage("host");
        CheckReport check = check_against_reference(exe.plan(), inputs, run_on_host(exe.plan(), inputs));
        if (!check.ok)
          return fail(fmt::format("{}: on the host, inputs seeded {}\n{}", v.name, input_seed(seed), check.text()));
        if (check.ill_conditioned) r.outcome = Outcome::Unjudged;
        r.interpreted++;
      }
      if (!gpu) continue;
      stage("gpu");
      CheckReport check = check_against_reference(exe.plan(), inputs, exe.run(inputs));
      if (!check.ok) return fail(fmt::format("{}: inputs seeded {}\n{}", v.name, input_seed(seed), check.text()));
      if (check.ill_conditioned) r.outcome = Outcome::Unjudged;
    }
  } catch (const UnsupportedError& e) {
    if (r.stage != "plan") return fail(e.what());
    r.outcome = Outcome::Refused;
    r.message = e.what();
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return r;
}

}  // namespace tilefuse::fuzz
