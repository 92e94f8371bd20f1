#!/usr/bin/env bash
# On the GPU machine: the row schedules on Tile IR v2, checked and timed against the first Tile
# IR's lowerers still selectable, in one call — their GPU tests, then for each one build timed
# both ways in interleaved rounds (scripts/gpu_ab.sh, OLD=bundle):
#   cluster  rows a cluster holds (--stages 0 --split 0): --cluster-ir 1 against the default 2
#   window   windowed rows (odd widths): --window-ir 1 against 2 (one-block rows: 2 is the default)
#   split    rows split into parts meeting in global memory: --split-ir 1 (the default) against 2
#   staged   a cluster's staged rows (--split 0): the first IR against v2 with one exchange and one
#            block barrier a pass, and each stage refilled as soon as read (--refill-at-read 1)
#   staged0  the same without the refill at the read (each stage refilled at the first reduction)
#   refill   claimed rows one a block (v2): the refill at the first reduction against at the read
# A schedule whose new/old medians hold within ~2% on its graphs can become the default, and the
# first IR's lowerer it replaces be deleted. Logs under $OUT/{tests,cluster,window}.
#   TESTS=0 skips the tests;  MOVES="cluster window split staged staged0 refill" (the default: all) picks
#   the A/Bs;
#   ROUNDS, ITERS as for gpu_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
root=$OUT
if [ "${TESTS:-1}" = 1 ]; then
  mkdir -p "$root/tests"
  TILEFUSE_CACHE=0 timeout 400 "$B/tilefuse_tests" --gtest_brief=1 \
    --gtest_filter='GpuReduce.*:GpuTileIr.*:Gpu.OddWidthsRunFlat:Gpu.RowKernelsOnTileIrV2MatchFloat64' \
    2>&1 | tee "$root/tests/tests.log" | tail -30
fi
ab() {  # NAME FLAGS OLD_FLAGS NEW_FLAGS GRAPHS...
  local name=$1 flags=$2 old=$3 new=$4
  shift 4
  mkdir -p "$root/$name"
  echo "== $name: $flags, old: $old, new: $new"
  OUT="$root/$name" OLD=$B FLAGS="$flags" OLD_FLAGS="$old" NEW_FLAGS="$new" NAMES="$*" bash scripts/gpu_ab.sh | tail -12
}
moves=" ${MOVES:-cluster window split staged staged0 refill} "
[[ $moves == *" cluster "* ]] && ab cluster "--stages 0 --split 0" "--cluster-ir 1" "" softmax_32k softmax_32k_bf16 rmsnorm_32k_bf16 shift_32k_bf16
[[ $moves == *" window "* ]] && ab window "" "--window-ir 1" "--window-ir 2" off_softmax_w4097 off_softmax_w4097_bf16 off_mean_shift_w4100_bf16 \
  off_log_softmax_vocab off_log_softmax_vocab_bf16 off_cross_entropy_vocab
[[ $moves == *" split "* ]] && ab split "" "--split-ir 1" "--split-ir 2" softmax_256k softmax_256k_bf16
[[ $moves == *" staged "* ]] && ab staged "--split 0" "" "--staged-ir 2 --cluster-online 1 --block-online 1 --refill-at-read 1" \
  softmax_256k softmax_256k_bf16
[[ $moves == *" staged0 "* ]] && ab staged0 "--split 0" "" "--staged-ir 2 --cluster-online 1 --block-online 1" \
  softmax_256k softmax_256k_bf16
[[ $moves == *" refill "* ]] && ab refill "" "--refill-at-read 0" "--refill-at-read 1" softmax_32k softmax_32k_bf16 rmsnorm_32k \
  rmsnorm_32k_bf16
exit 0
