// tilefuse: the CLI over all stages.
#include "tools/tilefuse/cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/graph_json.h"
#include "compiler/graph/reference.h"
#include "compiler/support/dump.h"
#include "compiler/support/error.h"
#include "compiler/support/json.h"
#include "runtime/check.h"
#include "compiler/tile/attention_walkthrough.h"
#include "compiler/tile/softmax_walkthrough.h"
#include "dsl_examples/examples.h"
#include "runtime/cuda_driver.h"
#include "compiler/codegen/disk_cache.h"
#include "runtime/device_probe.h"
#include "runtime/executable.h"
#include "runtime/host_run.h"

namespace tilefuse {

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 69;  // EX_UNAVAILABLE: asked to run, and no GPU is present

const char* kUsage = R"(usage: tilefuse COMMAND [ARGS]

  list                         the example graphs
  graph NAME [--json]          the graph, printed (or as JSON: bench/peers.py --graph builds
                               PyTorch peers from it)
  plan NAME [--json]           the fusion-decision report: unfused against fused plan,
                               kernels, costs, and every decision with its reason
  tile NAME [--kernel K]       the Tile IR of each kernel (or of kernel K)
  ptx NAME [--kernel K]        the PTX of each kernel (or of kernel K)
  run NAME [--check] [--bench] run on the GPU; --check compares every output with the
                               float64 reference; --bench times it (median of CUDA events)
                               beside the cost model's prediction, and each kernel of several
  run NAME --host [--check]    run the plan on the host instead, each kernel's Tile IR
                               interpreted (no GPU needed; slow: for checking a plan)
  bench --json FILE [NAME...]  copy-bandwidth ceiling and every named example (default:
                               bias_gelu, bias_gelu_bf16), checked and timed, as JSON
  explain softmax [--tile N] [--row 1,2,3,1000 ...]
                               the running softmax tile by tile (running max, sum, rescale)
                               for small rows, beside the kernel's results (the GPU's, or
                               without one its Tile IR run on the host) and float64's
  explain attention [--tile N] [--causal]
                               the attention loop of 8 queries over 8 keys (d 4) key tile by
                               key tile (scores, running max, rescale, sum, output), beside
                               the float64 reference and the fused kernel (on the GPU, or
                               its Tile IR on the host)
  cache stats|clear            the disk cache of compiled kernels: where, entries, bytes; or
                               empty it
  cache time NAME...           each example's kernels compiled cold (through LLVM: the Tile IR
                               build, LLVM IR, O3 and PTX timed apart) and warm (from the
                               disk cache), timed

common options:
  --target sm_80|sm_90|sm_90a  codegen target (default sm_90)
  --no-fuse                    plan every op as its own kernel
  --library-gemm MODE          whether a matmul may be cuBLASLt's: faster (the default: where the
                               report's priced options say the library is no slower), never, or
                               always (wherever cuBLASLt can compute it)
  --max-registers N            register budget per thread for fused kernels (default 128;
                               matmul kernels: up to the device's 255)
  --seed N                     seed for random inputs, 0..2^64-1 (default: drawn at random
                               and printed, so that --seed replays the run)
  --iters N                    timed iterations for --bench (default 100)
  --block-threads N            schedule override: threads per block (power of two, 32..1024)
  --rows-per-thread N          schedule override: rows each thread owns (1..16)
  --max-cluster N              schedule override: most blocks one row may be split over (1..16;
                               1: no clusters; sm_80 implies 1)
  --stages N                   schedule override: most rows a persistent row kernel prefetches
                               into shared memory (0..4; 0: rows go straight to registers)
  --split 0|1                  schedule override: 0 keeps a long softmax row in one block or
                               cluster instead of splitting it into parts that any blocks of a
                               persistent grid take, meeting in global memory (default 1)
  --window 0|1                 schedule override: 1 reads rows whose width is not a multiple
                               of the vector width (and pointwise domains of an odd element
                               count) as aligned 16-byte windows with masked ends, 0 element by
                               element (default: windows, except rows that read two or more
                               weights along the row)
  --cluster-online 0|1         rows a cluster holds: 1, one exchange of the blocks' values a
                               pass over the row (a softmax's max and sum together, each
                               block's sum rescaled to the row's max); 0, one a reduction
                               (default: 1 for a cluster's staged rows and windowed 16-bit rows)
  --block-online 0|1           rows one block holds over whole warps: 1, one block barrier a
                               pass over the row (each warp's max and online sum gathered into
                               every warp together, each warp's sum rescaled to the row's max);
                               0, one a reduction (default: 1 but for windowed rows)
  --refill-at-read 0|1         staged rows: 1, each stage refilled as soon as every thread has
                               read it, behind a block barrier of its own; 0, at the first
                               reduction's block barrier (default: 1 for a cluster's rows, 0
                               for rows claimed one a block)
  --fetch-parts-early 0|1      split rows: 1, the pending task's parts' words loaded at the top
                               of each task and gathered behind the warps' barrier; 0, gathered
                               after the publish behind a barrier of their own (default: 1 for
                               16-bit rows, 0 for f32)
  --part-elements 16|32|64     split rows: the elements each thread holds of a part of 64 KiB
                               (32 KiB for 16-bit rows at 16), in blocks of as many threads as
                               that takes (at most 1024) unless --block-threads says, as many
                               an SM as registers allow; default 16 for f32, 32 for 16-bit rows
  --pack-heads 0|1             schedule override: 1 gives attention with one query per head and
                               K/V heads shared by a group of query heads (GQA, MQA decode) one
                               block per K/V head, its query heads as the block's rows (default 1)
  --kv-splits N|auto           schedule override: attention's keys split into N ranges of key
                               tiles, a block each, merged through a workspace (split-KV, for
                               decode's few heads); auto: as many as fill the SMs (default)
  --gemm-tile MxN              schedule override: a staged matmul's block tile (64, 128 or 256
                               each; default 128x256 on wgmma, a warpgroup per 64 rows;
                               128x128 on mma.sync, over 2×4 warps)
  --wgmma 0|1|auto             schedule override: 1 runs 16-bit matmuls on warpgroup MMA from
                               shared memory (sm_90a, where the target has it), 0 on mma.sync;
                               auto (the default): wgmma where k is over 128
  --tma 0|1                    schedule override: 1 (the default) feeds a wgmma matmul's shared
                               memory by TMA from a producer warpgroup (mbarrier rings,
                               setmaxnreg), 0 by every thread's cp.async
  --tma-store 0|1              schedule override: 1 (the default) stores a TMA matmul's outputs
                               by TMA through shared memory (a 128-byte panel of columns at a
                               time, the consumers going on), 0 from each thread's accumulators
  --rolled-epilogue 0|1|auto   schedule override: 1 computes a TMA-stored matmul's epilogue on
                               each staged panel in a loop over 32-row chunks (LLVM compiles one
                               chunk's code, not one per element); auto: where it evaluates a
                               transcendental function; 0 (the default): on the accumulators
  --persistent 0|1             schedule override: 1 (the default) runs a TMA matmul with more tiles
                               than SMs as one block per SM looping over the tiles (the next
                               tile's copies overlap the epilogue), 0 a block per tile
  --pingpong 0|1               schedule override: 1 runs a persistent TMA matmul as two consumer
                               warpgroups on 64-row tiles of their own, their k loops taking
                               turns (each one's epilogue under the other's k loop); 0 (the
                               default) both warpgroups on each 128-row tile
  --gemm-cluster 1|2           schedule override: 2 (the default) runs a persistent TMA matmul in
                               clusters of two blocks on adjacent tile rows, B's tile copied once
                               for both (TMA multicast) where B is stored along N; 1 no clusters
  --attention-wgmma 0|1        schedule override: 1 runs attention's two products on warpgroup
                               MMA (sm_90a; Q and P from registers, K and V from shared memory;
                               the default on sm_90), 0 on mma.sync
  --attention-overlap 0|1|auto schedule override: 1 runs each key step's softmax on wgmma while
                               the previous step's P·V is in flight (three K/V stages; past
                               head dimension 128 on TMA only, two stages), 0 waits for each
                               product; auto (the default): where the products bound the
                               kernel (prefill): up to head dimension 128, past it on TMA
  --attention-rows 64|128      schedule override: query rows per attention block on wgmma; 128
                               runs two warpgroups over one K/V ring, one block per SM (default 64;
                               128 measured 10% slower: the two blocks of 64 interleave freely)
  --attention-tma 0|1|auto     schedule override: 1 feeds attention's Q, K and V tiles on wgmma
                               by TMA from a producer warpgroup to two consumer warpgroups of
                               64 query rows each (FlashAttention-3's block; past d 128 two
                               stages, overlapped too); 0 every thread's cp.async; auto (the
                               default): TMA where the products bound the kernel (prefill, not
                               decode)
  --attention-keys 64|128      schedule override: keys per attention step at d ≤ 128 (default
                               128 on TMA, 64 otherwise)
  --attention-backward-rows 64|128
                               schedule override: keys per block of the attention backward's
                               dK/dV kernel on wgmma; 128 runs two warpgroups sharing each Q
                               and dO stage, one block per SM (default 64)
  --attention-backward-tma 0|1 schedule override: 1 (the default) feeds the attention
                               backward's kernels on wgmma by TMA from a producer warpgroup;
                               0 by every thread's cp.async
  --attention-dq-sums 0|1|auto schedule override: 1 sums the attention backward's dQ across the
                               key blocks in the dK/dV kernel (one kernel, reduce-adds into an
                               f32 workspace; wgmma, d 64 or 128); 0 gives dQ its own kernel
                               over the key tiles (deterministic); auto (the default): whichever
                               the cost model predicts faster
  --attention-dq-tma 0|1       schedule override: 1 adds dQ's sums (the one-kernel backward,
                               where --attention-dq-sums takes it) by TMA reductions from staged
                               f32 panels, 128 keys a block fed by TMA, where d is 128 and the
                               queries a multiple of 4; 0 (the default) by every thread's
                               red.global. Its model takes the sums as hidden under the math,
                               which the H100 did not show (0.88× the two kernels)
  --attention-pingpong 0|1     schedule override: 1 has TMA attention's two consumer warpgroups
                               issue their products in turns, one's softmax under the other's
                               products (FlashAttention-3's ping-pong; measured 1–2% slower with
                               the softmax overlapped); 0 (the default) each as soon as its key
                               tile is in
  --attention-lazy-rescale 0|1|auto
                               schedule override: 1 raises TMA attention's running max lazily:
                               O and the row sum are rescaled only where a row's max passes the
                               shift its terms use by more than 8·ln 2 (terms up to 2^8; each
                               warp skips the rescale where none of its rows moved), once more
                               after the loop; 0 rescales at every key tile; auto (the default)
                               lazily but for a run-time key limit with the softmax overlapped
  --attention-persistent 0|1|auto
                               schedule override: 1 runs TMA attention (without split keys) on a
                               persistent grid of a block per SM taking the query tiles in turn
                               (causal: a head's long and short tiles in pairs; windows:
                               longest first), the next tile's Q, K and V copied while this one
                               finishes (d ≤ 128; past it only by 1 with --attention-overlap 0);
                               0 a block
                               per query tile; auto (the default):
                               persistent where that static order balances the blocks' work
                               within 2% (not under a causal mask without a window with an odd
                               count of tiles a head, 3 or more)
  --pitch-copy 0|1|auto        schedule override: 1 copies a 16-bit matmul operand whose rows
                               are not whole 16-byte chunks (K or N not a multiple of 8) into a
                               padded pitch before the kernel, which then runs staged; 0 reads
                               it in place (the direct schedule); auto (the default): whichever
                               the cost model predicts faster
  --k-splits N|auto            schedule override: a staged matmul's k steps split into N ranges,
                               a block each, summed by the last block of each tile (1: none;
                               auto, the default: where the tiles leave SMs idle)
  --gemm-group G               schedule override: matmul blocks take their tiles G tile rows at
                               a time (operand tiles shared in L2 by the blocks running at once;
                               default 8 on wgmma)
  --measured-profile           cost model constants measured on this GPU (copy bandwidth, SM
                               count, L2, and cuBLASLt's rate for each of the graph's GEMM
                               shapes, kept in the disk cache's folder) instead of the H200
                               defaults
  --cache-report               on stderr at the end: kernels compiled, and taken from the disk
                               cache or from memory

TILEFUSE_DUMP=graph,plan,tile,llvm,ptx (or all) dumps stages; TILEFUSE_DUMP_DIR=dir writes files.
Compiled kernels are kept in TILEFUSE_CACHE_DIR (default $XDG_CACHE_HOME/tilefuse or
~/.cache/tilefuse), at most TILEFUSE_CACHE_MAX_MB (512); TILEFUSE_CACHE=0 turns that off.
)";

struct Args {
  std::string command;
  std::vector<std::string> names;
  std::vector<std::vector<float>> rows;
  int tile = 0;  // explain: keys per tile (0: the command's default)
  bool causal = false;
  bool json = false, check = false, bench = false, no_fuse = false, measured_profile = false, cache_report = false;
  bool host = false;  // run: each kernel's Tile IR interpreted on the host, not on the GPU
  LibraryGemmUse library_gemm = LibraryGemmUse::WhenFaster;
  std::string json_file, kernel, target = "sm_90";
  int max_registers = 128, iters = 100;
  ScheduleHints schedule;  // the schedule flags (their defaults are ScheduleHints')
  std::optional<uint64_t> seed;
};

struct UsageError : Error {
  using Error::Error;
};

int parse_int(const std::string& flag, const std::string& v, int least, int most) {
  try {
    size_t used = 0;
    long n = std::stol(v, &used);
    if (used == v.size() && n >= least && n <= most) return static_cast<int>(n);
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("{} needs an integer from {} to {}, got '{}'", flag, least, most, v));
}

// A tile extent of 64 or 128.
int parse_64_or_128(const std::string& flag, const std::string& v) {
  if (v != "64" && v != "128") throw UsageError(fmt::format("{} needs 64 or 128, got '{}'", flag, v));
  return std::stoi(v);
}

// A number in [least, most], or "auto" (-1: the planner decides).
int parse_int_or_auto(const std::string& flag, const std::string& v, int least, int most) {
  if (v == "auto") return -1;
  try {
    return parse_int(flag, v, least, most);
  } catch (const UsageError&) {
    throw UsageError(fmt::format("{} needs an integer from {} to {} or auto, got '{}'", flag, least, most, v));
  }
}

uint64_t parse_seed(const std::string& v) {
  try {
    size_t used = 0;
    unsigned long long n = std::stoull(v, &used, 10);
    if (used == v.size() && !v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) return n;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("--seed needs an integer from 0 to 18446744073709551615, got '{}'", v));
}

// Numbers as f32 values: subnormals (1e-40) are numbers; values beyond f32's range are refused
// rather than turned into inf (write inf for that).
std::vector<float> parse_row(const std::string& text) {
  std::vector<float> row;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    char* stop = nullptr;
    errno = 0;
    float f = item.empty() ? 0 : std::strtof(item.c_str(), &stop);
    if (item.empty() || *stop != 0 || std::isspace(static_cast<unsigned char>(item[0])))
      throw UsageError(
          fmt::format("--row takes comma-separated numbers (inf, -inf, nan allowed), got '{}'", item));
    if (errno == ERANGE && std::isinf(f))
      throw UsageError(fmt::format("--row: {} is beyond the range of f32 (±3.4e38); write inf or -inf", item));
    row.push_back(f);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return row;
}

// The planning options the flags ask for (the measured profile is taken at plan time).
FusionOptions fusion_options(const Args& a) {
  FusionOptions fo;
  fo.fuse = !a.no_fuse;
  fo.library_gemm = a.library_gemm;
  fo.max_registers = a.max_registers;
  fo.schedule = a.schedule;
  if (a.target == "sm_80") {  // clusters, bulk copies and wgmma are sm_90's
    fo.profile.max_cluster_blocks = 1;
    fo.profile.bulk_copies = false;
    fo.profile.wgmma = false;
  }
  return fo;
}

// The graphs the commands know: the built-in examples for the tilefuse CLI, a program's own for
// a program that runs the CLI (run_cli).
const std::vector<Example>* graphs = nullptr;
std::string program = "tilefuse";

// The usage text, under the program's name.
std::string usage() { return fmt::format("usage: {}{}", program, std::string(kUsage).substr(std::strlen("usage: tilefuse"))); }

// A graph by name; an unknown name is a usage error.
const Example& example(const std::string& name) {
  std::vector<std::string> names;
  for (const Example& e : *graphs) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  throw UsageError(fmt::format("unknown graph '{}'; known: {} (see `{} list`)", name, fmt::join(names, ", "), program));
}

Args parse(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command given");
  Args a;
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", s));
      return argv[++i];
    };
    static const std::map<std::string, bool Args::*> flags = {
        {"--check", &Args::check},
        {"--bench", &Args::bench},
        {"--no-fuse", &Args::no_fuse},
        {"--measured-profile", &Args::measured_profile},
        {"--cache-report", &Args::cache_report},
        {"--causal", &Args::causal},
        {"--host", &Args::host}};
    if (s == "--json" && a.command == "bench")
      a.json_file = value();
    else if (s == "--json")
      a.json = true;
    else if (flags.count(s))
      a.*flags.at(s) = true;
    else if (s == "--kernel")
      a.kernel = value();
    else if (s == "--tile")
      a.tile = parse_int(s, value(), 1, 1 << 20);
    else if (s == "--row")
      a.rows.push_back(parse_row(value()));
    else if (s == "--target")
      a.target = value();
    else if (s == "--max-registers")
      a.max_registers = parse_int(s, value(), 1, 255);
    else if (s == "--iters")
      a.iters = parse_int(s, value(), 1, 1 << 20);
    else if (s == "--block-threads")
      a.schedule.block_threads = parse_int(s, value(), 32, 1024);
    else if (s == "--rows-per-thread")
      a.schedule.rows_per_thread = parse_int(s, value(), 1, 16);
    else if (s == "--max-cluster")
      a.schedule.max_cluster_blocks = parse_int(s, value(), 1, 16);
    else if (s == "--stages")
      a.schedule.stages = parse_int(s, value(), 0, 4);
    else if (s == "--split")
      a.schedule.split = parse_int(s, value(), 0, 1);
    else if (s == "--window")
      a.schedule.window = parse_int(s, value(), 0, 1);
    else if (s == "--cluster-online")
      a.schedule.cluster_online = parse_int(s, value(), 0, 1);
    else if (s == "--block-online")
      a.schedule.block_online = parse_int(s, value(), 0, 1);
    else if (s == "--refill-at-read")
      a.schedule.refill_at_read = parse_int(s, value(), 0, 1);
    else if (s == "--fetch-parts-early")
      a.schedule.fetch_parts_early = parse_int(s, value(), 0, 1);
    else if (s == "--part-elements")
      a.schedule.part_elements = parse_int(s, value(), 16, 64);
    else if (s == "--wgmma")
      a.schedule.gemm_wgmma = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--tma")
      a.schedule.gemm_tma = parse_int(s, value(), 0, 1);
    else if (s == "--attention-tma")
      a.schedule.attention_tma = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-dq-sums")
      a.schedule.attention_dq_sums = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-pingpong")
      a.schedule.attention_pingpong = parse_int(s, value(), 0, 1);
    else if (s == "--attention-lazy-rescale")
      a.schedule.attention_lazy_rescale = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-persistent")
      a.schedule.attention_persistent = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-keys")
      a.schedule.attention_block_n = parse_64_or_128(s, value());
    else if (s == "--tma-store")
      a.schedule.gemm_tma_store = parse_int(s, value(), 0, 1);
    else if (s == "--rolled-epilogue")
      a.schedule.rolled_epilogue = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--persistent")
      a.schedule.gemm_persistent = parse_int(s, value(), 0, 1);
    else if (s == "--pingpong")
      a.schedule.gemm_pingpong = parse_int(s, value(), 0, 1);
    else if (s == "--gemm-cluster")
      a.schedule.gemm_cluster = parse_int(s, value(), 1, 2);
    else if (s == "--k-splits") {
      const std::string v = value();
      a.schedule.gemm_k_splits = v == "auto" ? 0 : parse_int(s, v, 1, 4096);
    } else if (s == "--pitch-copy")
      a.schedule.pitch_copy = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-wgmma")
      a.schedule.attention_wgmma = parse_int(s, value(), 0, 1);
    else if (s == "--attention-overlap")
      a.schedule.attention_overlap = parse_int_or_auto(s, value(), 0, 1);
    else if (s == "--attention-rows")
      a.schedule.attention_block_m = parse_64_or_128(s, value());
    else if (s == "--attention-backward-rows")
      a.schedule.attention_backward_rows = parse_64_or_128(s, value());
    else if (s == "--attention-backward-tma")
      a.schedule.attention_backward_tma = parse_int(s, value(), 0, 1);
    else if (s == "--attention-dq-tma")
      a.schedule.attention_dq_tma = parse_int(s, value(), 0, 1);
    else if (s == "--pack-heads")
      a.schedule.pack_heads = parse_int(s, value(), 0, 1);
    else if (s == "--kv-splits")
      a.schedule.kv_splits = parse_int_or_auto(s, value(), 0, 64);
    else if (s == "--gemm-tile") {
      const std::string v = value();
      const size_t x = v.find('x');
      if (x == std::string::npos) throw UsageError(fmt::format("--gemm-tile needs MxN (64, 128 or 256 each), got '{}'", v));
      a.schedule.gemm_block_m = parse_int(s, v.substr(0, x), 64, 256);
      a.schedule.gemm_block_n = parse_int(s, v.substr(x + 1), 64, 256);
      for (int e : {a.schedule.gemm_block_m, a.schedule.gemm_block_n})
        if (e != 64 && e != 128 && e != 256)
          throw UsageError(fmt::format("--gemm-tile needs MxN (64, 128 or 256 each), got '{}'", v));
    } else if (s == "--gemm-group")
      a.schedule.gemm_group = parse_int(s, value(), 1, 64);
    else if (s == "--seed")
      a.seed = parse_seed(value());
    else if (s == "--library-gemm") {
      const std::string v = value();
      static const std::map<std::string, LibraryGemmUse> uses = {
          {"never", LibraryGemmUse::Never}, {"faster", LibraryGemmUse::WhenFaster}, {"always", LibraryGemmUse::Always}};
      if (!uses.count(v)) throw UsageError(fmt::format("--library-gemm needs never, faster or always, got '{}'", v));
      a.library_gemm = uses.at(v);
    }
    else if (s.rfind("--", 0) == 0)
      throw UsageError(fmt::format("unknown option '{}' for '{}'", s, a.command));
    else
      a.names.push_back(s);
  }
  try {
    codegen_options_for(a.target);
    check_fusion_options(fusion_options(a));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return a;
}

const std::string& one_name(const Args& a) {
  if (a.names.size() != 1)
    throw UsageError(fmt::format("'{}' takes one example name (see `tilefuse list`)", a.command));
  return a.names[0];
}

// Random inputs from `seed`, with the values the example sets itself (Example::inputs).
TensorMap example_inputs(const std::string& name, const Graph& g, uint64_t seed) {
  TensorMap inputs = random_inputs(g, seed);
  if (example(name).inputs) example(name).inputs(inputs);
  return inputs;
}

Plan make_plan(const Args& a, const std::string& name) {
  Graph g = example(name).build();
  FusionOptions fo = fusion_options(a);
  if (a.measured_profile) {
    DeviceProfile measured = measure_device_profile();
    measured.max_cluster_blocks = std::min(measured.max_cluster_blocks, fo.profile.max_cluster_blocks);
    measured.bulk_copies &= fo.profile.bulk_copies;
    measured.wgmma &= fo.profile.wgmma;
    const int timed = measure_library_gemms(g, measured);
    if (timed > 0) fmt::print(stderr, "measured cuBLASLt on {} GEMM shape{} of {}\n", timed, timed == 1 ? "" : "s", name);
    fo.profile = measured;
  }
  note_missing_libraries(fo.profile);
  Plan p = plan_fusion(g, fo);
  for (const std::string& hint : ineffective_hints(p))
    fmt::print(stderr, "{}: note: {} changes no kernel's schedule in this plan\n", program, hint);
  return p;
}

std::vector<const Kernel*> selected_kernels(const Plan& p, const std::string& kernel) {
  std::vector<const Kernel*> ks;
  std::vector<std::string> names;
  for (const Kernel& k : p.kernels) {
    names.push_back(k.name);
    if (kernel.empty() || k.name == kernel) ks.push_back(&k);
  }
  if (ks.empty())
    throw UsageError(fmt::format("plan '{}' has no kernel '{}'; its kernels: {}", p.graph.name(), kernel,
                                 fmt::join(names, ", ")));
  return ks;
}

// The run's seed: --seed, else drawn at random (printed, so that --seed replays it).
uint64_t seed_of(const Args& a) {
  if (a.seed) return *a.seed;
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// The disk cache: where it is and what it holds, emptied, or each example compiled cold and warm.
int cmd_cache(const Args& a) {
  const std::string what = a.names.empty() ? "" : a.names[0];
  if (what == "stats" && a.names.size() == 1) {
    DiskCacheInfo info = disk_cache_info();
    if (info.dir.empty()) {
      fmt::print("disk cache: off (TILEFUSE_CACHE=0, or no cache directory)\n");
      return 0;
    }
    fmt::print("disk cache: {}\n  {} kernel{}, {} bytes of at most {}{}\n", info.dir, info.entries,
               info.entries == 1 ? "" : "s", info.bytes,
               info.limit_bytes, info.invalid ? fmt::format("; {} files that are not whole entries", info.invalid) : "");
    return info.invalid ? 1 : 0;
  }
  if (what == "clear" && a.names.size() == 1) {
    const int64_t n = disk_cache_clear();
    fmt::print("disk cache: {} kernel{} removed\n", n, n == 1 ? "" : "s");
    return 0;
  }
  if (what == "time" && a.names.size() > 1) {
    if (disk_cache_dir().empty()) throw Error("cache time: the disk cache is off (TILEFUSE_CACHE=0)");
    for (size_t i = 1; i < a.names.size(); ++i) {
      Plan p = make_plan(a, a.names[i]);
      CodegenOptions co = codegen_options_for(a.target);
      auto compile_all = [&](bool from_disk) {
        forget_compiled_in_memory();
        co.read_disk_cache = from_disk;
        auto start = std::chrono::steady_clock::now();
        for (const Kernel& k : p.kernels) compile_kernel(p.graph, k, co);
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      };
      const CompileCounts before = compile_counts();
      const double cold = compile_all(false);
      const CompileCounts mid = compile_counts();
      const double warm = compile_all(true);
      const CompileCounts after = compile_counts();
      fmt::print(
          "{}: {} kernel{}: cold {:.1f} ms ({} through LLVM: Tile IR {:.1f}, LLVM IR {:.1f}, O3 {:.1f}, PTX "
          "{:.1f}), warm {:.1f} ms ({} from the disk cache)\n",
          a.names[i], p.kernels.size(), p.kernels.size() == 1 ? "" : "s", cold,
          mid.compiled - before.compiled, mid.build_ms - before.build_ms, mid.emit_ms - before.emit_ms,
          mid.optimize_ms - before.optimize_ms, mid.ptx_ms - before.ptx_ms, warm,
          after.from_disk - mid.from_disk);
    }
    return 0;
  }
  throw UsageError("cache takes stats, clear, or time NAME...");
}

// Each kernel's median time (an event after each launch) beside the cost model's prediction.
void print_kernel_times(Executable& exe, const TensorMap& inputs, int iters) {
  const std::vector<std::vector<float>> ms = exe.time_kernels(inputs, 3, iters);
  const std::vector<Kernel>& kernels = exe.plan().kernels;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const double measured = summarize_ms(ms[i]).median_ms, predicted = kernels[i].cost.predicted_s * 1e3;
    fmt::print("  {}: median {:.4f} ms, predicted {:.4f} ms ({:.2f}x){}\n", kernels[i].name, measured, predicted,
               measured / predicted, exe.kernels()[i].library ? ", cuBLASLt" : "");
  }
}

// `run --host`: the plan on the host (runtime/host_run.h), checked where asked.
int cmd_run_on_host(const Args& a) {
  const std::string& name = one_name(a);
  if (a.bench) throw UsageError("--bench times the GPU's kernels; --host runs them on the host");
  const Plan plan = make_plan(a, name);
  if (const std::string why = host_run_refusal(plan); !why.empty()) {
    fmt::print(stderr, "{} run {} --host: cannot run on the host: {}\n", program, name, why);
    return 1;
  }
  const uint64_t seed = seed_of(a);
  const TensorMap inputs = example_inputs(name, plan.graph, seed);
  fmt::print("{} on the host (each kernel's Tile IR interpreted), {} kernel{}, inputs seeded {}\n", name,
             plan.kernels.size(), plan.kernels.size() == 1 ? "" : "s", seed);
  const TensorMap outs = run_on_host(plan, inputs);
  bool ok = true;
  if (a.check) {
    const CheckReport check = check_against_reference(plan, inputs, outs);
    fmt::print("{}", check.text());
    ok = check.ok;
  }
  fmt::print("{}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

int cmd_run(const Args& a) {
  if (a.host) return cmd_run_on_host(a);
  const std::string& name = one_name(a);
  Executable exe(make_plan(a, name), codegen_options_for(a.target));
  std::string why;
  if (!cuda::available(&why)) {
    fmt::print(stderr, "{} run {}: cannot run: {}\n", program, name, why);
    return kExitNoGpu;
  }
  const Graph& g = exe.plan().graph;
  uint64_t seed = seed_of(a);
  TensorMap inputs = example_inputs(name, g, seed);
  const auto& info = cuda::Context::get().info();
  fmt::print("{} on {} (sm_{}{}), {} kernel{}, inputs seeded {}\n", name, info.name, info.cc_major,
             info.cc_minor, exe.kernels().size(), exe.kernels().size() == 1 ? "" : "s", seed);
  TensorMap outs = exe.run(inputs);
  bool ok = true;
  if (a.check) {
    CheckReport check = check_against_reference(exe.plan(), inputs, outs);
    fmt::print("{}", check.text());
    ok = check.ok;
  }
  if (a.bench) {
    if (const std::string note = foreign_profile_note(exe.plan().options.profile, info.name); !note.empty())
      fmt::print("  {}\n", note);
    Timing t = summarize_ms(exe.time(inputs, 10, a.iters));
    int64_t bytes = minimum_bytes(g);
    fmt::print("  median {:.4f} ms (min {:.4f}, p90 {:.4f}) over {} runs: {:.0f} GB/s of {} minimum bytes\n",
               t.median_ms, t.min_ms, t.p90_ms, a.iters, bytes / (t.median_ms * 1e-3) / 1e9, bytes);
    double predicted_ms = 0;
    for (const Kernel& k : exe.plan().kernels) predicted_ms += k.cost.predicted_s * 1e3;
    fmt::print("  predicted {:.4f} ms by the cost model for {} (measured/predicted {:.2f})\n", predicted_ms,
               exe.plan().options.profile.name, t.median_ms / predicted_ms);
    fmt::print("  launch overhead: {} kernel launch{} issued in {:.1f} µs on the host per run\n", exe.kernels().size(),
               exe.kernels().size() == 1 ? "" : "es", exe.issue_us());
    const double flops = plan_flops(exe.plan());
    if (flops > 0) fmt::print("  {:.1f} TFLOP/s of {:.4g} matmul flops\n", flops / (t.median_ms * 1e-3) / 1e12, flops);
    if (exe.kernels().size() > 1) print_kernel_times(exe, inputs, a.iters);
  }
  for (const auto& [k, m] : exe.measured())
    fmt::print("  {}: {} registers ({}), {} bytes spilled/local\n", k, m.registers, m.source, m.spill_bytes);
  fmt::print("{}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

int cmd_bench(const Args& a) {
  if (a.json_file.empty()) throw UsageError("bench needs --json FILE");
  std::vector<std::string> names = a.names;
  if (names.empty()) names = {"bias_gelu", "bias_gelu_bf16"};
  for (const std::string& n : names) example(n);  // unknown names fail before any work
  // The results file is opened before the run, so a path that cannot be written fails first.
  std::ofstream json(a.json_file);
  if (!json) throw Error(fmt::format("bench: cannot write {}: {}", a.json_file, std::strerror(errno)));
  std::string why;
  if (!cuda::available(&why)) {
    fmt::print(stderr, "{} bench: cannot run: {}\n", program, why);
    return kExitNoGpu;
  }
  const auto& info = cuda::Context::get().info();
  size_t copy_bytes = size_t{1} << 30;
  Timing copy = time_copy(copy_bytes, a.iters);
  double copy_gbps = 2.0 * copy_bytes / (copy.median_ms * 1e-3) / 1e9;
  fmt::print("{}: copy ceiling {:.0f} GB/s ({:.4f} ms for 2 × {} bytes)\n", info.name, copy_gbps,
             copy.median_ms, copy_bytes);
  if (const std::string note = foreign_profile_note(fusion_options(a).profile, info.name);
      !note.empty() && !a.measured_profile)
    fmt::print("{}\n", note);
  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const char* commit = std::getenv("TILEFUSE_COMMIT");
  const uint64_t seed = seed_of(a);
  fmt::print("inputs seeded {}\n", seed);
  JsonWriter j;
  j.begin_object()
      .field("tool", "tilefuse")
      .field("date", date)
      .field("gpu", info.name)
      .field("driver_version", info.driver_version)
      .field("commit", commit ? commit : "unknown")
      .field("seed", std::to_string(seed));  // a string: JSON readers may hold 53-bit integers only
  j.key("ceiling")
      .begin_object()
      .field("copy_gbps", copy_gbps)
      .field("copy_bytes", static_cast<int64_t>(2 * copy_bytes))
      .field("copy_median_ms", copy.median_ms)
      .end_object();
  j.key("results").begin_array();
  bool all_ok = true;
  for (const std::string& name : names) {
    Executable exe(make_plan(a, name), codegen_options_for(a.target));
    const Graph& g = exe.plan().graph;
    TensorMap inputs = example_inputs(name, g, seed);
    fmt::print("{}:\n", name);
    CheckReport chk = check_against_reference(exe.plan(), inputs, exe.run(inputs));
    fmt::print("{}", chk.text());
    all_ok &= chk.ok;
    Timing t = summarize_ms(exe.time(inputs, 10, a.iters));
    int64_t bytes = minimum_bytes(g);
    double gbps = bytes / (t.median_ms * 1e-3) / 1e9;
    fmt::print("  tilefuse {:.4f} ms, {:.0f} GB/s = {:.1f}% of copy\n", t.median_ms, gbps,
               100 * gbps / copy_gbps);
    const Node& first = g.node(g.inputs()[0]);
    const Example& ex = example(name);
    j.begin_object()
        .field("case", ex.family.empty() ? name : ex.family)
        .field("example", name)
        .field("dtype", dtype_name(first.dtype))
        .array("shape", first.shape)
        .field("impl", "tilefuse")
        .field("median_ms", t.median_ms)
        .field("min_ms", t.min_ms)
        .field("p90_ms", t.p90_ms)
        .field("bytes", bytes)
        .field("gbps", gbps)
        .field("max_rel_err", chk.max_rel_err)
        .field("unwritten", chk.unwritten)
        .field("ok", chk.ok);
    MeasuredKernels m = exe.measured();
    j.key("kernels").begin_array();
    for (const Kernel& k : exe.plan().kernels) {
      j.begin_object()
          .field("name", k.name)
          .field("predicted_bytes", k.cost.bytes())
          .field("predicted_ms", k.cost.predicted_s * 1e3)
          .field("registers_estimate", k.cost.registers);
      if (m.count(k.name))
        j.field("registers", m[k.name].registers).field("spill_bytes", m[k.name].spill_bytes);
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
  json << j.str() << "\n";
  json.close();
  if (!json) throw Error(fmt::format("bench: cannot write {}: {}", a.json_file, std::strerror(errno)));
  fmt::print("wrote {}\n", a.json_file);
  return all_ok ? 0 : 1;
}

// The running softmax, tile by tile, then the same rows through the compiled kernel (where a GPU
// is present) and the float64 reference.
// Attention of 8 queries over 8 keys of d 4 (values exact in bf16, so the GPU kernel sees what
// the walk-through sees), key tile by key tile. The GPU kernel runs the same graph with d padded
// to 16 by zeros (its smallest head dimension): the same scores, and zeros in the added columns.
int cmd_explain_attention(const Args& a) {
  const int n = 8, d = 4, pad = 16, tile = a.tile > 0 ? a.tile : 4;
  const float scale = 0.5f;  // 1/√d
  std::vector<std::vector<float>> q(n, std::vector<float>(d)), k = q, v = q;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) {
      q[i][c] = static_cast<float>((i * 3 + c * 5) % 7 - 3) * 0.5f;
      k[i][c] = static_cast<float>((i * 5 + c * 3) % 7 - 3) * 0.5f;
      v[i][c] = static_cast<float>((i + 2 * c) % 5 - 2);
    }
  fmt::print(
      "attention of {} queries over {} keys, d {}, scale {}{}, keys in tiles of {} (`tilefuse tile attention` shows "
      "the loop a kernel runs)\n"
      "  s = q·k·scale (−inf where masked);  m' = max(m, tile max);  c = m', or 0 while m' = −inf\n"
      "  α = exp(m − c);  p = exp(s − c);  l' = l·α + Σp;  O' = O·α + Σ p·v;  out = O / l\n\n",
      n, n, d, scale, a.causal ? ", causal (query i sees keys 0..i)" : "", tile);
  auto rows = [](const std::vector<std::vector<float>>& m) {
    std::vector<std::string> s;
    for (const auto& r : m) s.push_back(fmt::format("[{}]", fmt::join(r, ", ")));
    return fmt::format("{}", fmt::join(s, ", "));
  };
  fmt::print("q = {}\nk = {}\nv = {}\n\n", rows(q), rows(k), rows(v));
  // The graph: the DSL's composite over [1, 1, n, 16], d padded by zeros.
  Graph g("explain_attention");
  const Shape shape = {1, 1, n, pad};
  output("o", dsl::attention(dsl::input(g, "q", shape, DType::BF16), dsl::input(g, "k", shape, DType::BF16),
                             dsl::input(g, "v", shape, DType::BF16), scale, a.causal));
  TensorMap in;
  for (auto [name, m] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) {
    std::vector<double> padded(static_cast<size_t>(n * pad), 0.0);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < d; ++c) padded[static_cast<size_t>(i * pad + c)] = (*m)[i][c];
    in[name] = TensorData::from_doubles(DType::BF16, shape, padded);
  }
  std::string why;
  const bool gpu = cuda::available(&why);
  std::vector<double> kernel;
  const Plan plan = plan_fusion(g);
  const bool host = !gpu && host_run_refusal(plan).empty();  // (the kernel's Tile IR interpreted)
  if (gpu) kernel = Executable(plan).run(in).at("o").to_doubles();
  if (host) kernel = run_on_host(plan, in).at("o").to_doubles();
  auto numbers = [&](const std::vector<double>& o, size_t from) {
    std::vector<std::string> s;
    for (size_t c = 0; c < static_cast<size_t>(d); ++c) s.push_back(fmt::format("{:.6g}", o[from + c]));
    return fmt::format("[{}]", fmt::join(s, ", "));
  };
  for (int i = 0; i < n; ++i) {
    const int visible = a.causal ? i + 1 : n;
    fmt::print("{}", print_attention_walk(i, walk_online_attention(q[i], k, v, scale, tile, visible)));
    // Exactly, in float64 (the graph itself rounds P and O to bf16).
    fmt::print("  float64:           {}\n", numbers(exact_attention_row(q[i], k, v, scale, visible), 0));
    if (gpu) fmt::print("  GPU kernel (bf16): {}\n", numbers(kernel, static_cast<size_t>(i * pad)));
    if (host) fmt::print("  kernel on host:    {}\n", numbers(kernel, static_cast<size_t>(i * pad)));
  }
  if (!gpu)
    fmt::print("\n({}; {})\n", why,
               host ? "the kernel's lines are its Tile IR run on the host, bf16 as the GPU rounds it"
                    : "the kernel's lines are left out");
  return 0;
}

int cmd_explain(const Args& a) {
  if (one_name(a) == "attention") return cmd_explain_attention(a);
  if (one_name(a) != "softmax") throw UsageError("explain knows 'softmax' and 'attention'");
  const int tile = a.tile > 0 ? a.tile : 2;
  std::vector<std::vector<float>> rows = a.rows;
  if (rows.empty())
    rows = {{1, 2, 3, 1000}, {-INFINITY, 1, -INFINITY, 2}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
  fmt::print(
      "online softmax over tiles of {} (`tilefuse tile softmax_256k` shows the loop a kernel runs)\n"
      "  c(m) = m, or 0 while m = −inf;  m' = max(m, tile max);\n"
      "  s' = s·exp(c(m) − c(m')) + Σ exp(x − c(m'));  p = exp(x − c(m)) / max(s, 1)\n\n",
      tile);
  std::string why;
  bool gpu = cuda::available(&why), on_host = false;
  for (const auto& row : rows) {
    if (row.empty()) throw UsageError("--row needs at least one number");
    fmt::print("{}", print_walkthrough(row, walk_online_softmax(row, tile)));
    Graph g("explain_softmax");
    output("y", dsl::softmax(dsl::input(g, "x", {1, static_cast<int64_t>(row.size())}), -1));
    TensorMap in;
    in["x"] = TensorData::from_doubles(DType::F32, {1, static_cast<int64_t>(row.size())},
                                       std::vector<double>(row.begin(), row.end()));
    std::vector<std::string> ref;
    auto reference = reference_run(g, in);
    for (double p : reference.at("y")) ref.push_back(fmt::format("{:.8g}", p));
    fmt::print("  float64 reference:     [{}]\n", fmt::join(ref, ", "));
    const Plan plan = plan_fusion(g);
    on_host |= !gpu && host_run_refusal(plan).empty();
    if (gpu || host_run_refusal(plan).empty()) {
      std::vector<std::string> out;
      for (double p : (gpu ? Executable(plan).run(in) : run_on_host(plan, in)).at("y").to_doubles())
        out.push_back(fmt::format("{:.8g}", p));
      fmt::print("  {}[{}]\n", gpu ? "GPU kernel:            " : "kernel on the host:    ", fmt::join(out, ", "));
    }
    fmt::print("\n");
  }
  if (!gpu)
    fmt::print("({}; {})\n", why,
               on_host ? "the kernel's line is its Tile IR run on the host" : "the kernel's line is left out");
  return 0;
}

int dispatch(const Args& a) {
  if (a.command == "list") {
    for (const Example& e : *graphs) fmt::print("{:<22} {}\n", e.name, e.description);
    return 0;
  }
  if (a.command == "graph") {
    Graph g = example(one_name(a)).build();
    verify(g);
    fmt::print("{}", a.json ? graph_json(g) : print_graph(g));
    return 0;
  }
  if (a.command == "plan") {
    Executable exe(make_plan(a, one_name(a)), codegen_options_for(a.target));
    fmt::print("{}", a.json ? plan_report_json(exe.plan(), exe.measured())
                            : plan_report_text(exe.plan(), exe.measured()));
    return 0;
  }
  if (a.command == "tile" || a.command == "ptx") {
    Plan p = make_plan(a, one_name(a));
    CodegenOptions co = codegen_options_for(a.target);
    for (const Kernel* k : selected_kernels(p, a.kernel)) {
      CompiledKernel c = compile_kernel(p.graph, *k, co);
      fmt::print("{}", a.command == "tile" || c.library ? c.tile_ir : c.ptx);
    }
    return 0;
  }
  if (a.command == "cache") return cmd_cache(a);
  if (a.command == "run") return cmd_run(a);
  if (a.command == "bench") return cmd_bench(a);
  if (a.command == "explain") return cmd_explain(a);
  if (a.command == "help" || a.command == "--help" || a.command == "-h") {
    fmt::print("{}", usage());
    return 0;
  }
  throw UsageError(fmt::format("unknown command '{}'", a.command));
}

}  // namespace

int run_cli(int argc, char** argv, const std::vector<Example>& known, const std::string& name) {
  graphs = &known;
  program = name;
  int rc;
  try {
    Args a = parse(argc, argv);
    rc = dispatch(a);
    if (a.cache_report) {
      const CompileCounts c = compile_counts();
      const std::string dir = disk_cache_dir();
      fmt::print(stderr, "{}: kernels: {} compiled, {} from the disk cache ({}), {} from memory\n", program, c.compiled,
                 c.from_disk, dir.empty() ? "off" : dir, c.from_memory);
    }
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: {}\n\n{}", program, e.what(), usage());
    return kExitUsage;
  } catch (const CudaError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return std::strncmp(e.what(), "no GPU present", 14) == 0 ? kExitNoGpu : 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "{}: out of host memory\n", program);
    return 1;
  } catch (const std::exception& e) {  // tilefuse's errors, and the library's (a failed write, …)
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
  // What was printed must have reached its destination (a full disk is an error).
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "{}: cannot write the output: {}\n", program, std::strerror(errno));
    return 1;
  }
  return rc;
}

}  // namespace tilefuse
