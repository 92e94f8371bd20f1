#!/usr/bin/env bash
# On the GPU machine: the row schedules that moved to Tile IR v2 behind flags, checked and timed
# against the first Tile IR's lowerers in one call — their GPU tests, then for each flag one build
# timed both ways in interleaved rounds (scripts/gpu_ab.sh, OLD=bundle):
#   --loop-ir 2     rows looped over column tiles (sm_80's schedule: --target sm_80)
#   --cluster-ir 2  rows a cluster holds (--stages 0 --split 0: no staging or split rows)
#   --window-ir 2   windowed rows (odd widths), with --cluster-ir 2 for the vocabulary's clusters
# A flag whose new/old medians hold within ~2% on its graphs can become the default, and the
# first IR's lowerer it replaces be deleted. Logs under $OUT/{tests,loop,cluster,window}.
#   TESTS=0 skips the tests;  MOVES="loop cluster window" (the default: all three) picks the
#   A/Bs (each runs its graphs 2 × 2 times: a call of 600 s may hold the tests and two of them);
#   ROUNDS, ITERS as for gpu_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
root=$OUT
if [ "${TESTS:-1}" = 1 ]; then
  mkdir -p "$root/tests"
  TILEFUSE_CACHE=0 timeout 400 "$B/tilefuse_tests" --gtest_brief=1 \
    --gtest_filter='GpuReduce.WarpAndClusterSpecialRows:GpuReduce.FewLongRowsInParts:GpuReduce.WindowedRowsMatchFloat64:GpuTileIr.*' \
    2>&1 | tee "$root/tests/tests.log" | tail -30
fi
ab() {  # NAME FLAGS NEW_FLAGS GRAPHS...
  local name=$1 flags=$2 new=$3
  shift 3
  mkdir -p "$root/$name"
  echo "== $name: $flags, new: $new"
  OUT="$root/$name" OLD=$B FLAGS="$flags" NEW_FLAGS="$new" NAMES="$*" bash scripts/gpu_ab.sh | tail -12
}
moves=" ${MOVES:-loop cluster window} "
[[ $moves == *" loop "* ]] && ab loop "--target sm_80" "--loop-ir 2" softmax_256k softmax_256k_bf16 off_log_softmax_vocab off_cross_entropy_vocab
[[ $moves == *" cluster "* ]] && ab cluster "--stages 0 --split 0" "--cluster-ir 2" softmax_32k softmax_32k_bf16 rmsnorm_32k_bf16 shift_32k_bf16
[[ $moves == *" window "* ]] && ab window "" "--window-ir 2 --cluster-ir 2" off_softmax_w4097 off_softmax_w4097_bf16 off_mean_shift_w4100_bf16 \
  off_log_softmax_vocab off_log_softmax_vocab_bf16 off_cross_entropy_vocab
exit 0
