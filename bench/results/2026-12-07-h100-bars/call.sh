#!/usr/bin/env bash
# The two calls of 2026-12-07 (an H100 both times; the H200 was asked for first and none came).
# bundle/ at 126d24b (pairs rounded in every store width; whole warps over a row of whole
# vectors), build-base/ at c89649b (the bundle before them).
cd "$(dirname "$0")/../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
# call 1
for n in matmul_odd attention_small attention_train_small mlp_train_small off_prime_3d_bf16 off_mean_shift_w4100 attention_d256; do
  echo "check $n: $(timeout 60 bundle/tilefuse run $n --check --library-gemm never 2>&1 | grep -iE 'max|ok|fail|error' | head -3 | tr '\n' ' ')"
done
OLD=build-base NAMES="matmul matmul_k1024 mlp_train attention attention_train attention_d256 off_mean_shift_w4100" \
  FLAGS="--library-gemm never" ROUNDS=2 ITERS=30 bash scripts/gpu_ab.sh     # ab_call1.*
ROUNDS=2 bash scripts/gpu_matmul_bars.sh                                   # matmul_bars.log, matmul_tests.log, matmul_few_rows.json
# call 2 (the same machine, warm)
OLD=build-base NAMES="mlp_train matmul" FLAGS="--library-gemm never" ROUNDS=3 ITERS=30 bash scripts/gpu_ab.sh  # ab_call2.*
