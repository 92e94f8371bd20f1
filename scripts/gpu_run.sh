#!/usr/bin/env bash
# On the GPU machine, in one call: the GPU tests, the differential fuzzer against the float64
# reference, the benchmark against its ceiling and peers, Nsight Compute's DRAM byte counts
# beside the cost model's, and the SASS of the main kernels. Needs bundle/
# (scripts/build_bundle.sh) and writes everything under $OUT. BENCH, PEER_CASES and NCU
# (example lists; each may be empty to skip that part) narrow a run to what changed; FUZZ is the
# number of fuzz graphs (default 500; 0 skips it; FUZZ_SECONDS, default 240, ends it sooner), TESTS=0 skips the test suite, FAMILY=1 adds the
# off-benchmark family (39 graphs beside eager and torch.compile; minutes of device time; FAMILY_OPTIONS
# passes planning options to tilefuse there, e.g. "--window 1"). VARIANTS ("name options; ...") times schedules other than
# the chosen ones, NCU_DETAIL (examples) adds Nsight Compute's occupancy and stall sections,
# SANITIZE=1 runs compute-sanitizer's memcheck, racecheck and synccheck over the whole test
# suite (the three at once), with their summaries in $OUT/sanitizer.txt (memcheck also counts
# the three Driver API errors that CudaDriver.LaunchScaleKernel and BrokenPtxReportsJitLog
# provoke on purpose; its "Program hit" lines name them).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
export TILEFUSE_COMMIT=${TILEFUSE_COMMIT:-$(cat $B/COMMIT 2>/dev/null || echo unknown)}
export PYTHONUNBUFFERED=1
BENCH=${BENCH-"bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_32k_bf16 softmax_256k
       softmax_256k_bf16 layernorm layernorm_bf16 rmsnorm rmsnorm_bf16"}
PEER_CASES=${PEER_CASES-bias_gelu,softmax,layernorm,rmsnorm}
NCU=${NCU-"bias_gelu bias_gelu_bf16 softmax softmax_32k softmax_256k layernorm rmsnorm"}
log="$OUT/tests.log"
tmp=$(mktemp -d)
[ "${TESTS:-1}" = 1 ] && {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "== tests"
  $B/tilefuse_tests --gtest_brief=1
  echo "tests exit: $?"
  echo "== explain"
  $B/tilefuse explain softmax
  echo "== run --check"
  for e in gelu_two_consumers log_softmax; do $B/tilefuse run $e --check --bench; done
} >"$log" 2>&1 && grep -E "FAILED|Failure|tests exit|PASSED|SKIPPED|GPU kernel" "$log" | head -30

if [ "${FUZZ:-500}" != 0 ]; then
  echo "== fuzz"
  # Memory and GPU memory sampled beside it: the fuzz at 88a114c was killed (SIGKILL) after about
  # 90 s with 12 jobs, without a word (bench/NOTES.md).
  $B/tilefuse_fuzz --count "${FUZZ:-500}" --gpu --jobs "${FUZZ_JOBS:-12}" --seconds "${FUZZ_SECONDS:-240}" >"$OUT/fuzz.log" 2>&1 &
  fuzz=$!
  while kill -0 $fuzz 2>/dev/null; do
    echo "$(date +%T) fuzz rss_kb $(ps -o rss= -p $fuzz) gpu_mib $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) $(free -m | awk '/Mem:/{print "host_used_mib", $3, "available_mib", $7}')"
    sleep 10
  done >"$OUT/fuzz_memory.log" 2>&1
  wait $fuzz
  echo "fuzz exit: $?" >>"$OUT/fuzz.log"
  grep -E "^FAILED|^fuzz|exit" "$OUT/fuzz.log" | tail -12
  tail -3 "$OUT/fuzz_memory.log"
fi

if [ "${SANITIZE:-0}" = 1 ]; then
  echo "== compute-sanitizer (whole suite)"
  for tool in memcheck racecheck synccheck; do
    (
      timeout "${SANITIZE_TIMEOUT:-500}" compute-sanitizer --tool "$tool" --print-limit 20 $B/tilefuse_tests \
        --gtest_brief=1 >"$OUT/sanitizer-$tool.log" 2>&1
      echo "exit: $?" >>"$OUT/sanitizer-$tool.log"
    ) &
  done
  wait
  for tool in memcheck racecheck synccheck; do
    echo "-- $tool"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests ran|PASSED|FAILED|exit:" "$OUT/sanitizer-$tool.log" | tail -8
  done | tee "$OUT/sanitizer.txt"
fi

if [ "${FAMILY:-0}" = 1 ]; then
  # The off-benchmark family (dsl_examples/family.cpp), checked and timed, beside PyTorch eager and
  # torch.compile running the same graphs (bench/peers.py interprets `tilefuse graph --json`),
  # predicted beside measured: $OUT/family.md.
  echo "== off-benchmark family"
  names=$($B/tilefuse list | awk '/\[off-benchmark\]/{print $1}')
  # shellcheck disable=SC2086
  # shellcheck disable=SC2086
  $B/tilefuse bench ${FAMILY_OPTIONS:-} --json "$tmp/family_tilefuse.json" $names >"$OUT/family.log" 2>&1
  graphs=()
  for n in $names; do
    $B/tilefuse graph "$n" --json >"$tmp/$n.graph.json" && graphs+=("$tmp/$n.graph.json")
  done
  python3 bench/peers.py --out "$tmp/family_peers.json" --cases none --graphs "${graphs[@]}" >>"$OUT/family.log" 2>&1
  python3 bench/report.py --tilefuse "$tmp/family_tilefuse.json" --peers "$tmp/family_peers.json" \
    --out "$OUT/family.json" --markdown "$OUT/family.md" | tail -$((3 * $(echo "$names" | wc -w) + 2))
fi

[ -n "$BENCH" ] || exit 0
echo "== benchmark"
$B/tilefuse bench --json "$tmp/tilefuse.json" $BENCH >"$OUT/bench.log" 2>&1
grep -vE "^  output" "$OUT/bench.log" | tail -40
if [ -n "${VARIANTS:-}" ]; then
  echo "== variants" | tee -a "$OUT/bench.log"
  IFS=';' read -ra variants <<<"$VARIANTS"
  for v in "${variants[@]}"; do
    echo "-- $v"
    # shellcheck disable=SC2086
    $B/tilefuse run $v --bench 2>&1 | grep -E "median|registers|FAILED|rror"
  done | tee -a "$OUT/bench.log"
fi
peer_arg=()
if [ -n "$PEER_CASES" ]; then
  echo "== peers" >>"$OUT/bench.log"
  python3 bench/peers.py --out "$tmp/peers.json" --cases "$PEER_CASES" >>"$OUT/bench.log" 2>&1
  tail -2 "$OUT/bench.log"
  peer_arg=(--peers "$tmp/peers.json")
fi

echo "== ncu"
for e in $NCU; do
  ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv \
    $B/tilefuse run $e --bench --iters 3 2>/dev/null | grep -v '^==PROF==' || true
done >"$OUT/ncu.csv"
wc -l "$OUT/ncu.csv"

for e in ${NCU_DETAIL:-}; do
  ncu --clock-control none --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis $B/tilefuse run $e --bench --iters 1 2>&1 |
    grep -v '^==PROF==' | tail -120
done >"$OUT/ncu_detail.txt"

ncu_arg=()
[ -s "$OUT/ncu.csv" ] && ncu_arg=(--ncu "$OUT/ncu.csv")
python3 bench/report.py --tilefuse "$tmp/tilefuse.json" "${peer_arg[@]}" "${ncu_arg[@]}" \
  --out "$OUT/results.json" --markdown "$OUT/results.md"

[ "${SASS:-1}" = 1 ] || exit 0
echo "== sass"
{
  for e in bias_gelu_bf16 softmax softmax_256k layernorm_bf16; do
    $B/tilefuse ptx $e >"$tmp/$e.ptx"
    ptxas -arch=sm_90 -v "$tmp/$e.ptx" -o "$tmp/$e.cubin" 2>&1
    cuobjdump -sass "$tmp/$e.cubin"
  done
} >"$OUT/sass.txt" 2>&1
grep -cE "LDG.E.128|STG.E.128" "$OUT/sass.txt" || true
