#!/usr/bin/env bash
# Call 1 (bundle/ at main: 004221b's kernels, and the matmul epilogue's operands loaded before the
# k loop; build-base/ = 445df71). Branches on the card:
# - an H200: the owed one-run bars — issue 12's GEMM bars (predicted beside measured), the
#   training step against build-base interleaved with cuDNN's step (issue 17), then attention's
#   family beside SDPA and FlexAttention (issue 13) while time is left;
# - an H100: s29's call2.sh (GPU checks, training A/B, d 256's schedules beside cuDNN).
#   (d 256 persistent is now a forced option, not overlapped: "both" runs as the overlap alone.)
# Both end with the cost model's inputs for the GEMM epilogue: mlp_train's kernels on own GEMMs
# (its GELU' epilogue at 128×128) and a plain 8192³ at 128×128 tiles, each beside its prediction;
# matmul_odd's kernels (copies apart) and the k-1024 GEMM with its tiles stored from registers.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
if [[ $card == *H200* ]]; then
  TESTS=0 ROUNDS=1 timeout 170 bash scripts/gpu_matmul_bars.sh 2>&1 | tail -12
  echo "matmul: $((SECONDS - start)) s"
  OLD=build-base NAMES="attention_train attention_train_causal" ROUNDS=2 ITERS=20 timeout 110 bash scripts/gpu_ab.sh 2>&1 | tail -4
  timeout 40 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/train_peers.log"
  echo "train: $((SECONDS - start)) s"
else
  bash bench/results/2026-12-07-s29/call2.sh
fi
for cfg in "mlp_train --library-gemm never" "matmul --gemm-tile 128x128" "matmul" "matmul_odd --library-gemm never" \
  "matmul_k1024 --tma-store 0" "matmul_k1024"; do
  [ $SECONDS -lt 470 ] || break
  # shellcheck disable=SC2086
  timeout 40 bundle/tilefuse run $cfg --bench --iters 20 2>&1 | grep -E "median|predicted|rror" | sed "s/^/$cfg: /"
done | tee "$OUT/epilogue_model.log"
echo "epilogue: $((SECONDS - start)) s"
# The epilogue's operands loaded before the k loop (mlp_train's GELU' kernel), against build-base.
if [ $SECONDS -lt 450 ]; then
  OLD=build-base NAMES=mlp_train FLAGS="--library-gemm never" ROUNDS=2 ITERS=20 timeout 90 bash scripts/gpu_ab.sh 2>&1 | tail -3
  mv "$OUT/ab.log" "$OUT/ab_mlp.log"; mv "$OUT/ab.md" "$OUT/ab_mlp.md"
  grep "mlp_train_k2" "$OUT/ab_mlp.log" | head -4
fi
if [[ $card == *H200* ]] && [ $SECONDS -lt 420 ]; then
  ROUNDS=1 timeout $((585 - SECONDS)) bash scripts/gpu_attention_family.sh >/dev/null 2>&1
  cat "$OUT/attention_family.md"
fi
echo "all: $((SECONDS - start)) s"
