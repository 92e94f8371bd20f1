#!/usr/bin/env bash
# Call 1: bundle/ (main: the kernels of 004221b; mlp_train planned as six library GEMMs and one
# pointwise kernel for GELU and GELU' together, the 128-wide GEMM's shared-memory share priced;
# the GEMM epilogue's operands loaded before the k loop; d 256 persistent as a forced option)
# against build-base/ (445df71). Branches on the card:
# - an H200: the owed one-run bars first — issue 12's GEMM bars (each kernel's prediction beside),
#   then the training steps (attention_train A/B with cuDNN's step; mlp_train A/B with eager and
#   torch.compile), then attention's family beside SDPA and FlexAttention while time is left;
# - an H100: the GPU checks, the training steps as above, then d 256's schedules beside cuDNN.
# Both: the cost model's inputs for the GEMM tiles (8192³ at 128×128 and 128×256, matmul_odd's
# kernels, the k-1024 GEMM stored from registers), each beside its prediction.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
if [[ $card == *H200* ]]; then
  TESTS=0 ROUNDS=1 timeout 170 bash scripts/gpu_matmul_bars.sh 2>&1 | tail -12
else
  timeout 60 bundle/tilefuse_tests --gtest_filter='GpuAttentionBackward.FusedPlansMatchFloat64:GpuAttention.WgmmaPlansMatchFloat64:GpuMatMul.*' \
    >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
  grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -20
  for n in attention_train_small mlp_train_small; do
    echo "check $n: $(timeout 20 bundle/tilefuse run $n --check 2>&1 | grep -iE 'error|fail' | head -3 | tr '\n' ' ')"
  done
fi
echo "first part: $((SECONDS - start)) s"
OLD=build-base NAMES="attention_train attention_train_causal mlp_train" ROUNDS=2 ITERS=20 timeout 150 bash scripts/gpu_ab.sh 2>&1 | tail -5
mv "$OUT/ab.log" "$OUT/ab_train.log"; mv "$OUT/ab.md" "$OUT/ab_train.md"
grep -E "mlp_train_k[0-9]: median" "$OUT/ab_train.log" | head -16
timeout 40 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/train_peers.log"
timeout 120 python3 bench/mlp_train_peers.py 2>&1 | tee "$OUT/mlp_peers.log"
echo "train: $((SECONDS - start)) s"
for cfg in "matmul --gemm-tile 128x128" "matmul" "matmul_odd --library-gemm never" "matmul_k1024 --tma-store 0" \
  "matmul_k1024"; do
  [ $SECONDS -lt 420 ] || break
  # shellcheck disable=SC2086
  timeout 40 bundle/tilefuse run $cfg --bench --iters 20 2>&1 | grep -E "median|predicted|rror" | sed "s/^/$cfg: /"
done | tee "$OUT/gemm_model.log"
echo "gemm model: $((SECONDS - start)) s"
if [[ $card == *H200* ]]; then
  [ $SECONDS -lt 440 ] && ROUNDS=1 timeout $((585 - SECONDS)) bash scripts/gpu_attention_family.sh >/dev/null 2>&1
  cat "$OUT/attention_family.md" 2>/dev/null
else
  for n in attention_d256 attention_d256_causal; do
    for cfg in "plain:" "overlap:--attention-overlap 1" "persistent:--attention-persistent 1"; do
      [ $SECONDS -lt 540 ] || break
      # shellcheck disable=SC2086
      timeout 30 bundle/tilefuse run $n --bench --iters 20 ${cfg#*:} 2>&1 | grep -E "median|rror" | sed "s/^/${cfg%%:*} $n /"
    done
  done | tee "$OUT/d256.log"
  [ $SECONDS -lt 560 ] && timeout 40 python3 bench/attention_peers.py attention_d256 attention_d256_causal 2>&1 | grep -E "^peer" | tee -a "$OUT/d256.log"
fi
echo "all: $((SECONDS - start)) s"
