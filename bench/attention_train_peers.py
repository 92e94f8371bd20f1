"""SDPA's training step (forward, then backward of a given dO) on attention_train's shape, causal
and not, for scripts/gpu_train.sh and the call scripts: the cuDNN and flash backends (or those
named), each line

    sdpa BACKEND train [causal ]B8 H32 N4096 d128: fwd MS ms, fwd+bwd MS ms (TFLOP/s), bwd MS ms

(medians of CUDA events; TFLOP/s counts 3.5 × 4·B·H·N²·D, halved when causal, as FlashAttention
reports it).

    python3 bench/attention_train_peers.py [cudnn] [flash]
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "bench")
from gpu_timing import median_ms  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
b, h, n, d = 8, 32, 4096, 128
q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
do = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
for causal in (False, True):
    for name in sys.argv[1:] or ["flash", "cudnn"]:
        with sdpa_kernel(BACKENDS[name]):
            fwd = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
            t = median_ms(
                lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(do))
        f = 3.5 * 4 * b * h * n * n * d / (2 if causal else 1)
        print(f"sdpa {name} train {'causal ' if causal else ''}B{b} H{h} N{n} d{d}: fwd {fwd:.3f} ms, "
              f"fwd+bwd {t:.3f} ms ({f / t / 1e9:.1f} TFLOP/s), bwd {t - fwd:.3f} ms")
