#!/bin/bash
# causal pair order A/B, DRAM bytes, keys kernel plan vs alone, GPU attention tests
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh; export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
M=gpu__time_duration.sum,dram__bytes_read.sum,gpc__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second
for env in "X=1" "TILEFUSE_AB_OLD_ORDER=1"; do echo "== ncu causal fwd $env"
  env $env timeout 60 ncu --clock-control none --metrics $M -k regex:attention_causal_k0 -c 1 bundle/tilefuse run attention_causal 2>&1 | grep -E "dram__|gpu__time|gpc__"; done
OLD=bundle OLD_ENV=TILEFUSE_AB_OLD_ORDER=1 NAMES="attention_causal attention_n4097_causal attention_gqa_causal attention_window attention_d64_causal attention_alibi" ROUNDS=2 ITERS=30 timeout 200 bash scripts/gpu_ab.sh 2>&1 | tail -12
timeout 60 python3 - <<'PY'
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
sys.path.insert(0, "bench")
from gpu_timing import median_ms
for n in (4096, 4097):
    q, k, v = (torch.randn(8, 32, n, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        t = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    print(f"sdpa cudnn causal B8 H32 N{n} d128: {t:.4f} ms")
PY
echo "== keys kernel in the plan (clock none)"
timeout 90 ncu --clock-control none --metrics $M,lts__t_sector_hit_rate.pct -k regex:attention_train_k[23] -c 2 bundle/tilefuse run attention_train 2>&1 | grep -E "attention_train_k|dram__|gpu__time|gpc__|lts__"
echo "== keys kernel alone (test, clock none), launches 44..47"
timeout 120 ncu --clock-control none --metrics $M,lts__t_sector_hit_rate.pct -k regex:attention_backward --launch-skip 44 --launch-count 4 bundle/tilefuse_tests --gtest_filter=GpuAttentionBackward.TrainingShapeTimed 2>&1 | grep -E "attention_backward \(|dram__|gpu__time|gpc__|lts__|backward "
echo "== plan per-kernel, twice"
for i in 1 2; do timeout 60 bundle/tilefuse run attention_train --bench --iters 10 2>&1 | grep -E "median|_k[0-3]"; done
echo "== tests"
timeout 200 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.*' 2>&1 | tail -15
echo "== cold compile on this host's CPU"; nproc; lscpu | grep -E "Model name|MHz" | head -3
for r in 1 2; do env -u TILEFUSE_CACHE TILEFUSE_CACHE_DIR=/tmp/tfc$r timeout 60 bundle/tilefuse cache time matmul matmul matmul_bias_gelu matmul_bias_gelu_k1024 attention --library-gemm never; done
