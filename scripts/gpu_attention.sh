#!/usr/bin/env bash
# On the GPU machine: the attention GPU tests (the loop and the fused plans against float64; a
# 64-head 4096² d 128 run timed), the attention examples through the CLI (prefill on wgmma, the
# default, and on mma.sync), PyTorch's scaled_dot_product_attention on the same shape (flash and cuDNN backends)
# in the same call, and compute-sanitizer's racecheck over the small cases' shared rings. Needs
# bundle/ (scripts/build_bundle.sh); writes its logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
timeout 200 $B/tilefuse_tests --gtest_filter='*Attention*' >"$OUT/attention_tests.log" 2>&1
echo "tests exit: $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|seed|worst|TFLOP|Expected|Which|got" "$OUT/attention_tests.log" |
  grep -v "seed   \] Fuzz" | head -60
echo "== tilefuse run (the example through the plan)"
for args in "attention_small --check" "attention --bench --iters 20" "attention_causal --bench --iters 20" \
  "attention --bench --iters 20 --attention-wgmma 0" "attention_causal --bench --iters 20 --attention-wgmma 0" \
  "attention_decode --check --bench --iters 50" "attention_decode_gqa --check --bench --iters 50" \
  "attention_decode_32k --bench --iters 30" "attention_decode_128k --bench --iters 30" \
  "attention_decode_gqa_b64 --check --bench --iters 50" "attention_decode_gqa_128k --bench --iters 50" \
  "attention_decode_step --check --bench --iters 50" \
  "attention_train_small --check" "attention_train --bench --iters 5" "attention_train_causal --bench --iters 5" \
  "attention_decode_gqa --bench --iters 50 --pack-heads 0 --kv-splits 1" \
  "attention_decode --bench --iters 50 --kv-splits 2" \
  "attention_decode_128k --bench --iters 30 --kv-splits 16" \
  "attention_decode_gqa_128k --bench --iters 50 --kv-splits 60"; do
  echo "-- tilefuse run $args"
  # shellcheck disable=SC2086
  timeout 60 $B/tilefuse run $args 2>&1 | grep -vE "^\s*$|^  output"
done | tee "$OUT/attention_runs.log"
echo "== PyTorch scaled_dot_product_attention, same shape"
timeout 180 python3 - <<'PY' 2>&1 | tee "$OUT/attention_peers.log"
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import sys
sys.path.insert(0, "bench")
from gpu_timing import median_ms
b, h, n, d = 4, 16, 4096, 128
q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
flops = 4 * b * h * n * n * d
for causal in (False, True):
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                t = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
            f = flops / 2 if causal else flops
            print(f"sdpa {name} {'causal ' if causal else ''}{b}x{h} heads x {n}^2 d {d} bf16: {t:.4f} ms, "
                  f"{f / t / 1e9:.1f} TFLOP/s (of {'half ' if causal else ''}4·n²·d per head)")
        except Exception as e:
            print(f"sdpa {name}: {type(e).__name__}: {e}")
# Training: forward and backward at attention_train's shape (B8 H32 N4096 d128); TFLOP/s of
# 3.5 × 4·B·H·N²·D (halved when causal), as FlashAttention reports it.
b, h, n, d = 8, 32, 4096, 128
q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
do = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
for causal in (False, True):
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                def step():
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    o.backward(do)
                t = median_ms(step)
            f = 3.5 * 4 * b * h * n * n * d / (2 if causal else 1)
            print(f"sdpa {name} train {'causal ' if causal else ''}B{b} H{h} N{n} d {d}: fwd+bwd {t:.3f} ms, {f / t / 1e9:.1f} TFLOP/s")
        except Exception as e:
            print(f"sdpa {name} train: {type(e).__name__}: {e}")
del q, k, v, do
# Decode: one query per head over a cache (the attention_decode examples' shapes); GB/s of K and V.
for b, hq, hkv, n_kv in ((8, 32, 32, 4096), (8, 32, 8, 32768), (8, 32, 32, 32768), (1, 32, 32, 131072),
                         (64, 32, 8, 4096), (1, 64, 8, 131072)):
    q = torch.randn(b, hq, 1, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(b, hkv, n_kv, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    kv_bytes = 2 * b * hkv * n_kv * d * 2
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                t = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hkv))
            print(f"sdpa {name} decode B{b} Hq{hq} Hkv{hkv} L{n_kv} d {d}: {t * 1e3:.1f} us, {kv_bytes / t / 1e6:.0f} GB/s of K, V")
        except Exception as e:
            print(f"sdpa {name} decode B{b} Hq{hq} Hkv{hkv} L{n_kv}: {type(e).__name__}: {e}")
PY
echo "== racecheck (small attention cases)"
timeout 120 compute-sanitizer --tool racecheck $B/tilefuse_tests --gtest_filter='GpuAttention.MatchesFloat64:GpuAttention.PackedQueryHeadsMatchFloat64' \
  >"$OUT/attention_racecheck.log" 2>&1
echo "racecheck exit: $?"
grep -E "RACECHECK SUMMARY|Error|OK|FAILED" "$OUT/attention_racecheck.log" | head -10
