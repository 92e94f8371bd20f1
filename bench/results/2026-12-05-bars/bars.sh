#!/usr/bin/env bash
# Issue 11's regression bars in one call: the twelve benchmark graphs and the column sums,
# this build (bundle/) against b3244e6 (bench/tmp/old), three interleaved rounds of 30 runs; the
# copy ceiling from PyTorch; then the matmul's GPU tests and its Tile IR and sm_80 PTX.
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
OUT=${OUT:-/tmp} OLD=bench/tmp/old ROUNDS=3 ITERS=30 \
  NAMES="bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_32k_bf16 softmax_256k
         softmax_256k_bf16 layernorm layernorm_bf16 rmsnorm rmsnorm_bf16 column_sum column_sum_bf16" \
  bash scripts/gpu_ab.sh >/dev/null
cat "${OUT:-/tmp}/ab.md"
python3 - <<'PY' | tee "${OUT:-/tmp}/copy.txt"
import sys; sys.path.insert(0, "bench")
import peers
c = peers.copy_ceiling()
print(f"copy ceiling {c['copy_gbps']:.0f} GB/s (median {c['copy_median_ms']:.3f} ms of {c['copy_bytes']} bytes)")
PY
bundle/tilefuse tile matmul --library-gemm never | grep -E "for |dot" | head -4
bundle/tilefuse ptx matmul --target sm_80 --library-gemm never | grep -c "mma.sync.aligned.m16n8k16"
bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuMatMul.*:Gpu.ExamplesMatchReference' 2>&1 | tail -4 | tee "${OUT:-/tmp}/tests.log"
