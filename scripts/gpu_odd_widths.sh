#!/usr/bin/env bash
# On the GPU machine: rows of odd widths read as aligned windows (--window 1) against the same
# rows read element by element (--window 0), in one call — the GPU tests that check both against
# float64, then the off-benchmark graphs with odd row widths (and two benchmark cases, which the
# option must not change) timed both ways beside the copy ceiling. Needs bundle/
# (scripts/build_bundle.sh); writes its logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
timeout 200 $B/tilefuse_tests --gtest_filter='GpuReduce.*:Codegen.OddWidth*' --gtest_brief=1 >"$OUT/odd_tests.log" 2>&1
echo "tests exit: $?"
grep -E "FAILED|PASSED|Failure" "$OUT/odd_tests.log" | head -20
GRAPHS=${GRAPHS:-"off_softmax_w4097 off_softmax_w4097_bf16 off_log_softmax_vocab off_log_softmax_vocab_bf16
  off_cross_entropy_vocab off_rmsnorm_w5003 off_rmsnorm_w5003_bf16 off_layernorm_w2999 off_layernorm_w2999_bf16
  off_mean_shift_w4100_bf16 off_prime_3d off_prime_3d_bf16 softmax_bf16 layernorm_bf16"}
for w in 1 0; do
  echo "== --window $w"
  # shellcheck disable=SC2086
  $B/tilefuse bench --window "$w" --json "$OUT/odd_window$w.json" $GRAPHS >"$OUT/odd_window$w.log" 2>&1
  echo "bench exit: $?"
  grep -E "copy ceiling|^[a-z_0-9]+:$|tilefuse [0-9]|FAIL" "$OUT/odd_window$w.log"
done
